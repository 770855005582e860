//! Leader failover under load: two operator processes with `--leader-elect` while a driver
//! scales three Memcacheds without pause; the leader is killed with SIGKILL (no release)
//! again and again, and a fresh candidate replaces it each time. The operators log each
//! reconcile inside their leadership span (identity and term, the Lease's
//! `leaseTransitions`), and the test reads those logs as an audit:
//!
//! - a process reconciles only after it acquired the lease and, once killed, never again,
//!   and each of its reconciles names its own identity and term;
//! - the terms strictly increase, one identity each, and each new term begins after the
//!   previous leader died: never two leaders reconciling at once;
//! - each handover, from the kill to the next acquisition, is printed beside what the
//!   election allows (the lease duration plus two jittered retry periods, plus slack for the
//!   requests): printed, not asserted, since it depends on the machine's timing
//!   (`make bench-failover` measures it).
//!
//! At the end every Memcached has settled at the driver's last size.

#[path = "../../../tests/support/mod.rs"]
mod support;

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{
    converged, micros, now_micros, release_all, secs, settled, setup, spec, start_operator,
    teardown,
};
use controller_runtime::client::{Api, Patch, PatchParams, PostParams};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use memcached_operator::api::Memcached;
use serde_json::Value;
use support::cluster;
use support::fault_proxy::Rng;
use support::{CONVERGE, wait_until};

const LEASE: Duration = Duration::from_secs(4);
const RENEW: Duration = Duration::from_secs(3);
const RETRY: Duration = Duration::from_secs(1);
/// For the requests of one handover: the survivor's read and its write of the Lease.
const SLACK: Duration = Duration::from_secs(2);
/// How many leaders are killed.
const KILLS: usize = 3;
const LEASE_NAME: &str = "86f835c3.example.com";
const MEMCACHEDS: [&str; 3] = ["mc-0", "mc-1", "mc-2"];

/// One operator process and what the test did to it.
struct Candidate {
    child: tokio::process::Child,
    log: PathBuf,
    /// When SIGKILL was sent, and when the process was seen dead.
    kill_sent: Option<i64>,
    dead: Option<i64>,
}

impl Candidate {
    /// A candidate, returned once its caches have synced (before it leads).
    async fn start(ns: &str, log: PathBuf) -> Candidate {
        let args = [
            "--leader-elect",
            "--leader-election-namespace",
            ns,
            &format!("--leader-elect-lease-duration={}s", LEASE.as_secs()),
            &format!("--leader-elect-renew-deadline={}s", RENEW.as_secs()),
            &format!("--leader-elect-retry-period={}s", RETRY.as_secs()),
        ];
        let rust_log = "info,controller_runtime::runtime::controller=debug";
        let child = start_operator(&cluster::kubeconfig(), ns, &log, rust_log, &args).await;
        Candidate {
            child,
            log,
            kill_sent: None,
            dead: None,
        }
    }

    fn audit(&self) -> Audit {
        Audit::read(&self.log)
    }

    async fn kill(&mut self) {
        self.kill_sent = Some(now_micros());
        self.child.start_kill().unwrap();
        self.child.wait().await.unwrap();
        self.dead = Some(now_micros());
    }
}

/// One reconcile, as its "reconciling" line records it.
#[derive(Debug)]
struct Reconcile {
    at: i64,
    /// The leadership span it ran in: identity and term, if any.
    leader: Option<(String, i64)>,
}

/// What one process's log says it did.
#[derive(Debug, Default)]
struct Audit {
    identity: String,
    /// When it acquired the lease, and its term.
    acquired: Option<(i64, i64)>,
    reconciles: Vec<Reconcile>,
}

impl Audit {
    fn read(log: &Path) -> Audit {
        let mut audit = Audit::default();
        for line in std::fs::read_to_string(log).unwrap_or_default().lines() {
            let Ok(entry) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            let at = || micros(entry["timestamp"].as_str().unwrap());
            let fields = &entry["fields"];
            match fields["message"].as_str().unwrap_or_default() {
                "attempting to acquire leader lease" => {
                    audit.identity = fields["identity"].as_str().unwrap().to_owned();
                }
                "successfully acquired lease" => {
                    audit.acquired = Some((at(), fields["term"].as_i64().unwrap()));
                }
                "reconciling" => {
                    let leader = entry["spans"].as_array().and_then(|spans| {
                        spans.iter().find(|s| s["name"] == "leading").map(|s| {
                            (
                                s["identity"].as_str().unwrap_or_default().to_owned(),
                                s["term"].as_i64().unwrap_or(-1),
                            )
                        })
                    });
                    audit.reconciles.push(Reconcile { at: at(), leader });
                }
                _ => {}
            }
        }
        audit
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn killing_the_leader_under_load_never_lets_two_leaders_reconcile_at_once() {
    let (client, ns, dir) = setup("mc-failover-load").await;
    let memcacheds = Api::<Memcached>::namespaced(client.clone(), &ns);
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns);
    let leases = Api::<Lease>::namespaced(client.clone(), &ns);
    for name in MEMCACHEDS {
        memcacheds
            .create(&PostParams::default(), &Memcached::new(name, spec(1)))
            .await
            .unwrap();
    }

    let mut candidates = Vec::new();
    for i in 0..2 {
        candidates.push(Candidate::start(&ns, dir.join(format!("operator-{i}.log"))).await);
    }

    // The load: a size patch every 150-400 ms, until the last leader has taken over.
    let driving = Arc::new(AtomicBool::new(true));
    let driver = tokio::spawn({
        let (memcacheds, driving) = (memcacheds.clone(), driving.clone());
        async move {
            let mut rng = Rng::new(now_micros() as u64);
            let mut patches = 0u32;
            while driving.load(Ordering::Relaxed) {
                let name = MEMCACHEDS[rng.below(3) as usize];
                let size = rng.below(3);
                memcacheds
                    .patch(
                        name,
                        &PatchParams::default(),
                        &Patch::Merge(serde_json::json!({"spec": {"size": size}})),
                    )
                    .await
                    .unwrap();
                patches += 1;
                tokio::time::sleep(Duration::from_millis(150 + rng.below(250))).await;
            }
            patches
        }
    });

    // The candidate that holds the lease and has reconciled under it.
    let leader_reconciling = async |candidates: &[Candidate]| {
        wait_until("a leader reconciling", CONVERGE, async || {
            let holder = leases
                .get_opt(LEASE_NAME)
                .await
                .map_err(|e| e.to_string())?
                .and_then(|l| l.spec?.holder_identity)
                .unwrap_or_default();
            for (i, c) in candidates.iter().enumerate() {
                if c.dead.is_some() {
                    continue;
                }
                let audit = c.audit();
                if !holder.is_empty() && audit.identity == holder && audit.reconciles.len() >= 3 {
                    return Ok(i);
                }
            }
            Err(format!("holder {holder:?}, not yet reconciling"))
        })
        .await
    };
    for round in 0..KILLS {
        let leader = leader_reconciling(&candidates).await;
        candidates[leader].kill().await;
        println!("round {round}: killed the leader (operator-{leader})");
        let next = candidates.len();
        candidates.push(Candidate::start(&ns, dir.join(format!("operator-{next}.log"))).await);
    }
    leader_reconciling(&candidates).await;
    driving.store(false, Ordering::Relaxed);
    let patches = driver.await.unwrap();
    let names: BTreeSet<String> = MEMCACHEDS.map(String::from).into();
    wait_until(
        "every Memcached settled at its last size",
        CONVERGE,
        async || converged(&memcacheds, &deployments, &names, settled).await,
    )
    .await;

    // The audit.
    let audits: Vec<Audit> = candidates.iter().map(Candidate::audit).collect();
    let mut terms: Vec<(i64, i64, usize)> = Vec::new(); // (acquired at, term, candidate)
    for (i, (c, a)) in candidates.iter().zip(&audits).enumerate() {
        assert!(
            !a.identity.is_empty(),
            "operator-{i} logged no identity: {}",
            c.log.display()
        );
        let Some((acquired, term)) = a.acquired else {
            assert!(
                a.reconciles.is_empty(),
                "operator-{i} reconciled without ever leading: {}",
                c.log.display()
            );
            continue;
        };
        terms.push((acquired, term, i));
        for r in &a.reconciles {
            assert_eq!(
                r.leader,
                Some((a.identity.clone(), term)),
                "operator-{i} reconciled outside its leadership span: {}",
                c.log.display()
            );
            assert!(
                r.at >= acquired,
                "operator-{i} reconciled before it acquired the lease"
            );
            if let Some(dead) = c.dead {
                assert!(r.at <= dead, "operator-{i} reconciled after it was killed");
            }
        }
    }
    terms.sort();
    assert_eq!(
        terms.len(),
        KILLS + 1,
        "one term per killed leader and the last: {terms:?}"
    );
    let identities: BTreeSet<&str> = terms
        .iter()
        .map(|t| audits[t.2].identity.as_str())
        .collect();
    assert_eq!(identities.len(), terms.len(), "one identity per term");
    let bound = LEASE + RETRY.mul_f64(2.0 * 1.2) + SLACK;
    println!("\n| term | process    | reconciles | handover from the kill (s) |");
    println!("|------|------------|------------|----------------------------|");
    for (k, &(acquired, term, i)) in terms.iter().enumerate() {
        let handover = match k.checked_sub(1).map(|p| &candidates[terms[p].2]) {
            Some(previous) => {
                let (sent, dead) = (previous.kill_sent.unwrap(), previous.dead.unwrap());
                assert!(term > terms[k - 1].1, "terms must increase: {:?}", terms);
                assert!(
                    acquired > dead,
                    "term {term} began before the previous leader was dead"
                );
                let handover = acquired - sent;
                let over = if handover > bound.as_micros() as i64 {
                    " (over the bound)"
                } else {
                    ""
                };
                format!("{:.1}{over}", secs(handover))
            }
            None => "first".to_owned(),
        };
        println!(
            "| {term:>4} | {:<10} | {:>10} | {handover:>26} |",
            format!("operator-{i}"),
            audits[i].reconciles.len()
        );
    }
    println!(
        "{patches} size patches; lease {LEASE:?}, retry {RETRY:?}: \
         lease + retry = {:?}, bound {bound:?}",
        LEASE + RETRY
    );

    release_all(&memcacheds, MEMCACHEDS).await;
    for c in &mut candidates {
        if c.dead.is_none() {
            c.kill().await;
        }
    }
    teardown(&client, &ns, &dir).await;
}
