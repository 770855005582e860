//! Sharded operators on the cluster: three operator processes run with `--shard` over a few
//! hundred Memcacheds of size 0 (so that the cluster's own controllers have no Pods to
//! make). The test proves, from the cluster and from the operators' JSON logs:
//!
//! - every Memcached converges; each replica settles on the ranges `assign` gives it among
//!   the identities, its cache holds exactly the Memcacheds whose uid hashes into them, and
//!   it reconciles only keys of its active ranges;
//! - after one replica is killed with SIGKILL and another one added, the ranges are taken
//!   over (the survivors' and the newcomer's active ranges cover the hash space again) and
//!   every Memcached, old and new, converges again;
//! - the audit: no key has reconcile intervals in two replicas that overlap in time (a
//!   killed replica's last reconcile counts as running until it was seen dead).
//!
//! A second test cuts one of two replicas off the API server (a fault proxy drops every
//! byte) while it reconciles a key slowly (each reconcile first waits 10 s on an "outside
//! service"): the cut replica drops that reconcile at its renew deadline (`shard reconcile
//! aborted`), before the other takes its ranges over and reconciles the key; the audit
//! finds no overlap, and the cut replica rejoins once the connection is back.
//!
//! `benches/bench-shard.py` (`make bench-shard`) runs the long version with throughput.

#[path = "../../../tests/support/mod.rs"]
mod support;

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{
    converged, micros, now_micros, secs, setup, spec, start_operator_env, teardown, written,
};
use controller_runtime::client::{Api, ListParams, Patch, PatchParams, PostParams};
use controller_runtime::runtime::shard::{Ranges, assign, fnv1a64};
use k8s_openapi::api::apps::v1::Deployment;
use memcached_operator::api::Memcached;
use memcached_operator::reconcile::OUTSIDE_SERVICE_DELAY_ENV;
use serde_json::Value;
use support::cluster;
use support::fault_proxy::{FaultProxy, FaultRates};
use support::{CONVERGE, wait_until};

const LEASE: Duration = Duration::from_secs(4);
const RENEW: Duration = Duration::from_secs(3);
const RETRY: Duration = Duration::from_secs(1);
/// Memcacheds before the kill, and added after it.
const FIRST: usize = 240;
const LATER: usize = 60;

/// One operator process.
struct Replica {
    identity: String,
    child: tokio::process::Child,
    log: PathBuf,
    /// When it was seen dead after SIGKILL.
    dead: Option<i64>,
}

impl Replica {
    async fn start(ns: &str, dir: &Path, identity: &str) -> Replica {
        Replica::start_with(ns, dir, identity, &cluster::kubeconfig(), &[]).await
    }

    /// A replica talking through `kubeconfig`, with `env` set.
    async fn start_with(
        ns: &str,
        dir: &Path,
        identity: &str,
        kubeconfig: &Path,
        env: &[(&str, &str)],
    ) -> Replica {
        let log = dir.join(format!("{identity}.log"));
        let args = [
            "--shard",
            "--shard-identity",
            identity,
            "--shard-namespace",
            ns,
            &format!("--leader-elect-lease-duration={}s", LEASE.as_secs()),
            &format!("--leader-elect-renew-deadline={}s", RENEW.as_secs()),
            &format!("--leader-elect-retry-period={}s", RETRY.as_secs()),
        ];
        let child = start_operator_env(kubeconfig, ns, &log, "info", &args, env).await;
        Replica {
            identity: identity.to_owned(),
            child,
            log,
            dead: None,
        }
    }

    async fn kill(&mut self) -> i64 {
        let sent = now_micros();
        self.child.start_kill().unwrap();
        self.child.wait().await.unwrap();
        self.dead = Some(now_micros());
        sent
    }

    fn audit(&self) -> Audit {
        Audit::read(&self.log, self.dead)
    }
}

/// One reconcile: its key, when it started and ended, and the term it ran in.
#[derive(Debug, Clone)]
struct Interval {
    key: String,
    start: i64,
    end: i64,
    term: u64,
}

/// What one replica's log says.
#[derive(Debug, Default)]
struct Audit {
    reconciles: Vec<Interval>,
    /// Each change of its active ranges: when, and the ranges.
    active: Vec<(i64, Ranges)>,
    /// The sizes its cache of Memcacheds reported, in order.
    cached: Vec<usize>,
    /// Reconciles dropped at the renew deadline: when, and the key.
    aborted: Vec<(i64, String)>,
}

impl Audit {
    fn read(log: &Path, dead: Option<i64>) -> Audit {
        let mut audit = Audit::default();
        let mut open: BTreeMap<String, Interval> = BTreeMap::new();
        for line in std::fs::read_to_string(log).unwrap_or_default().lines() {
            let Ok(entry) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            let at = micros(entry["timestamp"].as_str().unwrap_or_default());
            let fields = &entry["fields"];
            let span = entry["spans"]
                .as_array()
                .and_then(|spans| spans.iter().find(|s| s["name"] == "reconcile"));
            match fields["message"].as_str().unwrap_or_default() {
                "shard ranges active" => {
                    let ranges = fields["ranges"].as_str().unwrap_or_default();
                    audit.active.push((at, ranges.parse().unwrap()));
                }
                "shard cache" if fields["kind"] == "Memcached" => {
                    audit
                        .cached
                        .push(fields["cached"].as_u64().unwrap() as usize);
                }
                "shard reconcile started" => {
                    let span = span.expect("a shard reconcile logs in its reconcile span");
                    let id = span["reconcile_id"].as_str().unwrap().to_owned();
                    let key = format!(
                        "{}/{}",
                        span["namespace"].as_str().unwrap(),
                        span["object"].as_str().unwrap()
                    );
                    let term = span["term"].as_u64().expect("the span names the term");
                    assert!(span["replica"].is_string() && span["range"].is_string());
                    open.insert(
                        id,
                        Interval {
                            key,
                            start: at,
                            end: i64::MAX,
                            term,
                        },
                    );
                }
                "shard reconcile aborted" => {
                    let span = span.expect("an abort logs in its reconcile span");
                    let key = format!(
                        "{}/{}",
                        span["namespace"].as_str().unwrap(),
                        span["object"].as_str().unwrap()
                    );
                    audit.aborted.push((at, key));
                }
                "shard reconcile ended" => {
                    let id = span.and_then(|s| s["reconcile_id"].as_str()).unwrap();
                    let mut interval = open.remove(id).expect("ended after it started");
                    interval.end = at;
                    audit.reconciles.push(interval);
                }
                _ => {}
            }
        }
        // A reconcile still open when the process died ran until then, at the latest.
        for (_, mut interval) in open {
            interval.end = dead.unwrap_or(i64::MAX);
            audit.reconciles.push(interval);
        }
        audit
    }

    /// Its active ranges at `at`.
    fn active_at(&self, at: i64) -> Ranges {
        self.active
            .iter()
            .take_while(|(t, _)| *t <= at)
            .last()
            .map(|(_, r)| r.clone())
            .unwrap_or_default()
    }
}

async fn create_many(memcacheds: &Api<Memcached>, names: impl Iterator<Item = String>) {
    let names: Vec<String> = names.collect();
    for chunk in names.chunks(20) {
        let mut tasks = tokio::task::JoinSet::new();
        for name in chunk {
            let (api, name) = (memcacheds.clone(), name.clone());
            tasks.spawn(async move {
                api.create(&PostParams::default(), &Memcached::new(&name, spec(0)))
                    .await
                    .unwrap();
            });
        }
        while let Some(done) = tasks.join_next().await {
            done.unwrap();
        }
    }
}

/// Waits until exactly `names` exist and the operators have done their part for each.
async fn all_converge(
    memcacheds: &Api<Memcached>,
    deployments: &Api<Deployment>,
    names: &BTreeSet<String>,
) {
    wait_until("every Memcached converged", CONVERGE, async || {
        converged(memcacheds, deployments, names, written).await
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn sharded_replicas_split_the_keys_hand_over_and_never_reconcile_one_key_twice_at_once() {
    let (client, ns, dir) = setup("shard-test").await;
    let memcacheds = Api::<Memcached>::namespaced(client.clone(), &ns);
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns);
    let mut names: BTreeSet<String> = (0..FIRST).map(|i| format!("mc-{i:04}")).collect();
    create_many(&memcacheds, names.iter().cloned()).await;

    let mut replicas = Vec::new();
    for identity in ["shard-r0", "shard-r1", "shard-r2"] {
        replicas.push(Replica::start(&ns, &dir, identity).await);
    }
    all_converge(&memcacheds, &deployments, &names).await;

    // Each replica settled on the ranges `assign` gives it among the identities.
    let split = assign(&["shard-r0", "shard-r1", "shard-r2"]);
    for (replica, (identity, ranges)) in replicas.iter().zip(&split) {
        assert_eq!(&replica.identity, identity);
        let audit = replica.audit();
        let last = audit.active.last().map(|(_, r)| r.clone());
        assert_eq!(last.as_ref(), Some(ranges), "{identity}'s active ranges");
        println!(
            "{identity}: ranges {ranges:?} ({:.3} of the space)",
            ranges.share()
        );
    }

    // Each replica's cache holds exactly the Memcacheds of its ranges, as its "shard cache"
    // reports say.
    let hashes: Vec<u64> = memcacheds
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|m| fnv1a64(m.metadata.uid.as_deref().unwrap()))
        .collect();
    for (replica, (identity, ranges)) in replicas.iter().zip(&split) {
        let expected = hashes.iter().filter(|h| ranges.contains(**h)).count();
        wait_until(
            &format!("{identity}'s cache holding its share"),
            CONVERGE,
            async || {
                let cached = replica.audit().cached.last().copied();
                (cached == Some(expected))
                    .then_some(())
                    .ok_or(format!("cached {cached:?}, want {expected}"))
            },
        )
        .await;
        println!(
            "{identity}: cache holds {expected} of {} Memcacheds ({:.3})",
            hashes.len(),
            expected as f64 / hashes.len() as f64
        );
    }

    // SIGKILL one, add one, and add more Memcacheds.
    let killed_at = replicas[1].kill().await;
    replicas.push(Replica::start(&ns, &dir, "shard-r3").await);
    let later: Vec<String> = (FIRST..FIRST + LATER)
        .map(|i| format!("mc-{i:04}"))
        .collect();
    names.extend(later.iter().cloned());
    create_many(&memcacheds, later.into_iter()).await;
    all_converge(&memcacheds, &deployments, &names).await;

    // Taken over: the live replicas' active ranges cover the space again.
    let audits: Vec<Audit> = replicas.iter().map(Replica::audit).collect();
    let covered = |at: i64| {
        replicas
            .iter()
            .zip(&audits)
            .filter(|(r, _)| r.dead.is_none())
            .fold(Ranges::none(), |all, (_, a)| all.union(&a.active_at(at)))
            == Ranges::all()
    };
    let mut changes: Vec<i64> = audits
        .iter()
        .flat_map(|a| a.active.iter().map(|(t, _)| *t))
        .filter(|t| *t >= killed_at)
        .collect();
    changes.sort();
    let takeover = changes
        .into_iter()
        .find(|t| covered(*t))
        .expect("the live replicas cover the hash space again");
    println!(
        "takeover: {:.1} s from SIGKILL (lease {LEASE:?}, retry {RETRY:?})",
        (takeover - killed_at) as f64 / 1e6
    );

    // Each reconcile was of a key in its replica's active ranges at the time, and every key
    // was reconciled.
    let uids: BTreeMap<String, u64> = memcacheds
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|m| {
            let key = format!("{ns}/{}", m.metadata.name.unwrap());
            (key, fnv1a64(&m.metadata.uid.unwrap()))
        })
        .collect();
    let mut reconciled = BTreeSet::new();
    for (replica, audit) in replicas.iter().zip(&audits) {
        let mut keys = BTreeSet::new();
        for interval in &audit.reconciles {
            let hash = uids[&interval.key];
            assert!(
                audit.active_at(interval.start).contains(hash),
                "{} reconciled {} outside its active ranges",
                replica.identity,
                interval.key
            );
            keys.insert(interval.key.clone());
        }
        println!("{}: {} keys reconciled", replica.identity, keys.len());
        reconciled.extend(keys);
    }
    assert_eq!(reconciled.len(), uids.len(), "every key reconciled");

    // The audit: no key in two replicas at once.
    let mut by_key: BTreeMap<&str, Vec<(usize, &Interval)>> = BTreeMap::new();
    for (i, audit) in audits.iter().enumerate() {
        for interval in &audit.reconciles {
            by_key.entry(&interval.key).or_default().push((i, interval));
        }
    }
    let mut overlaps = Vec::new();
    for (key, intervals) in &by_key {
        for (n, (i, a)) in intervals.iter().enumerate() {
            for (j, b) in &intervals[n + 1..] {
                if i != j && a.start < b.end && b.start < a.end {
                    overlaps.push(format!(
                        "{key}: {} term {} and {} term {}",
                        replicas[*i].identity, a.term, replicas[*j].identity, b.term
                    ));
                }
            }
        }
    }
    assert!(
        overlaps.is_empty(),
        "one key in two replicas at once: {overlaps:#?}"
    );
    let total: usize = audits.iter().map(|a| a.reconciles.len()).sum();
    println!(
        "{total} reconciles of {} keys audited: overlaps 0",
        by_key.len()
    );

    common::release_all(&memcacheds, names.iter().map(String::as_str)).await;
    for replica in &mut replicas {
        let _ = replica.child.start_kill();
    }
    teardown(&client, &ns, &dir).await;
}

/// The keys reconciled by two of `replicas` at once, each with the two replicas and terms.
fn overlaps(replicas: &[(&str, &Audit)]) -> Vec<String> {
    let mut by_key: BTreeMap<&str, Vec<(&str, &Interval)>> = BTreeMap::new();
    for (identity, audit) in replicas {
        for interval in &audit.reconciles {
            by_key
                .entry(&interval.key)
                .or_default()
                .push((identity, interval));
        }
    }
    let mut found = Vec::new();
    for (key, intervals) in &by_key {
        for (n, (i, a)) in intervals.iter().enumerate() {
            for (j, b) in &intervals[n + 1..] {
                if i != j && a.start < b.end && b.start < a.end {
                    found.push(format!(
                        "{key}: {i} term {} and {j} term {}",
                        a.term, b.term
                    ));
                }
            }
        }
    }
    found
}

/// How long each reconcile of the cut test waits first: longer than the lease, so that a
/// reconcile the cut replica did not drop would still run when the other replica starts
/// on its key.
const SLOW: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn a_replica_cut_off_drops_its_running_reconcile_before_another_takes_the_key() {
    let (client, ns, dir) = setup("shard-cut").await;
    let memcacheds = Api::<Memcached>::namespaced(client.clone(), &ns);
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns);
    let names: BTreeSet<String> = (0..12).map(|i| format!("slow-{i:02}")).collect();
    create_many(&memcacheds, names.iter().cloned()).await;

    let (proxy, _) = FaultProxy::to_cluster(FaultRates::moderate()).await;
    proxy.set_faults(false);
    let delay = SLOW.as_millis().to_string();
    let env = [(OUTSIDE_SERVICE_DELAY_ENV, delay.as_str())];
    let identities = ["shard-cut-r0", "shard-cut-r1"];
    let through_proxy = proxy.kubeconfig_in(&dir);
    let mut cut = Replica::start_with(&ns, &dir, identities[0], &through_proxy, &env).await;
    let direct = cluster::kubeconfig();
    let mut other = Replica::start_with(&ns, &dir, identities[1], &direct, &env).await;
    all_converge(&memcacheds, &deployments, &names).await;
    let split = assign(&identities);
    for (replica, (_, ranges)) in [&cut, &other].into_iter().zip(&split) {
        wait_until("each replica holds its split", CONVERGE, async || {
            let last = replica.audit().active.last().map(|(_, r)| r.clone());
            (last.as_ref() == Some(ranges))
                .then_some(())
                .ok_or(format!("{}: {last:?}", replica.identity))
        })
        .await;
    }

    // A change to a Memcached of the cut replica's ranges; the cut comes as soon as the
    // cut replica has started on it (its reconcile then waits SLOW).
    let listed = memcacheds.list(&ListParams::default()).await.unwrap();
    let victim = listed
        .items
        .iter()
        .find(|m| {
            split[0]
                .1
                .contains(fnv1a64(m.metadata.uid.as_deref().unwrap()))
        })
        .and_then(|m| m.metadata.name.clone())
        .expect("a Memcached in the cut replica's ranges");
    let key = format!("{ns}/{victim}");
    let edited_at = now_micros();
    memcacheds
        .patch(
            &victim,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"size": 1}})),
        )
        .await
        .unwrap();
    wait_until(
        "the cut replica starts on the change",
        CONVERGE,
        async || {
            let audit = cut.audit();
            let started = audit
                .reconciles
                .iter()
                .any(|i| i.key == key && i.start >= edited_at);
            started.then_some(()).ok_or("not yet".to_owned())
        },
    )
    .await;
    let cut_at = now_micros();
    proxy.set_cut(true);
    println!("cut {} while it reconciles {key}", identities[0]);

    // The other replica takes the key over and converges the change.
    all_converge(&memcacheds, &deployments, &names).await;
    let (a, b) = (cut.audit(), other.audit());
    let aborted = a
        .aborted
        .iter()
        .find(|(at, k)| *k == key && *at >= cut_at)
        .map(|(at, _)| *at)
        .expect("the cut replica aborted its reconcile of the key");
    let taken = b
        .reconciles
        .iter()
        .filter(|i| i.key == key && i.start >= cut_at)
        .map(|i| i.start)
        .min()
        .expect("the other replica reconciled the key after the cut");
    assert!(aborted < taken, "aborted after the other replica started");
    let found = overlaps(&[(identities[0], &a), (identities[1], &b)]);
    assert!(
        found.is_empty(),
        "one key in two replicas at once: {found:#?}"
    );
    println!(
        "cut → aborted {:.2} s, cut → other replica starts the key {:.2} s (reconciles wait {SLOW:?}, lease {LEASE:?}, renew deadline {RENEW:?})",
        secs(aborted - cut_at),
        secs(taken - cut_at)
    );

    // Back, the cut replica rejoins and holds its split again.
    let healed_at = now_micros();
    proxy.set_cut(false);
    wait_until(
        "the cut replica holds its split again",
        CONVERGE,
        async || {
            let audit = cut.audit();
            let last = audit.active.last().filter(|(at, _)| *at >= healed_at);
            (last.map(|(_, r)| r) == Some(&split[0].1))
                .then_some(())
                .ok_or(format!("{last:?}"))
        },
    )
    .await;
    assert!(
        cut.child.try_wait().unwrap().is_none(),
        "the cut replica exited"
    );
    let found = overlaps(&[
        (identities[0], &cut.audit()),
        (identities[1], &other.audit()),
    ]);
    assert!(
        found.is_empty(),
        "one key in two replicas at once: {found:#?}"
    );

    common::release_all(&memcacheds, names.iter().map(String::as_str)).await;
    for replica in [&mut cut, &mut other] {
        let _ = replica.child.start_kill();
    }
    teardown(&client, &ns, &dir).await;
}
