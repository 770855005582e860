//! Failover without a restart: the operator, leading, loses its connection to the API server
//! for 30 s (a fault proxy drops every byte, then resets every connection that lived through
//! the cut), and a Memcached is scaled meanwhile. The test reads the operator's JSON log as
//! an audit and its metrics:
//!
//! - the process never exits;
//! - it stops leading during the cut, and once it says so its `leader_election_master_status`
//!   reads 0;
//! - every reconcile runs inside a term it leads (the `leading` span names the Lease's
//!   term), between the term's start and the line that says the term's controllers have
//!   stopped: nothing is reconciled while the replica does not lead;
//! - after the cut it leads again in a new term (without a restart: same identity), with
//!   the gauge at 1, and converges the change made during the cut.
//!
//! With a second replica that keeps its connection, the same cut hands the lease over: the
//! cut replica's last reconcile comes before the other's first, and after the cut it stays
//! a standby that reconciles nothing.
//!
//! Convergence is the operator's part ([`common::written`]: the Deployment's replicas and
//! the status's observed generation), not the Pods' readiness, which is the cluster's.
//! With `--leader-elect-exit-on-lost`, the same cut makes the operator exit with an error,
//! as controller-runtime's does.
//!
//! The time from the connection's return to the new term, and the standby's takeover, are
//! printed (measured, not asserted).

#[path = "../../../tests/support/mod.rs"]
mod support;

mod common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use common::{
    converged, micros, now_micros, release_all, secs, setup, spec, start_operator, teardown,
    written,
};
use controller_runtime::client::{Api, Patch, PatchParams, PostParams};
use k8s_openapi::api::apps::v1::Deployment;
use memcached_operator::api::Memcached;
use serde_json::Value;
use support::fault_proxy::{FaultProxy, FaultRates};
use support::{CONVERGE, cluster, http_get, sample, wait_until};

const LEASE: Duration = Duration::from_secs(6);
const RENEW: Duration = Duration::from_secs(4);
const RETRY: Duration = Duration::from_secs(1);
/// How long the connection is cut.
const CUT: Duration = Duration::from_secs(30);
const LEASE_NAME: &str = "86f835c3.example.com";
const MEMCACHEDS: [&str; 2] = ["mc-0", "mc-1"];

/// One term as leader, as the log tells it.
#[derive(Debug)]
struct Term {
    term: i64,
    began: i64,
    /// When the manager said the term's controllers had stopped; `None` while it leads.
    ended: Option<i64>,
}

/// One reconcile, as its "reconciling" line records it.
#[derive(Debug)]
struct Reconcile {
    at: i64,
    object: String,
    /// The leadership span it ran in: identity and term, if any.
    leader: Option<(String, i64)>,
}

/// What one process's log says it did.
#[derive(Debug, Default)]
struct Audit {
    identity: String,
    terms: Vec<Term>,
    reconciles: Vec<Reconcile>,
    /// When it logged that it lost the lease (the elector's line), by term.
    lost: Vec<(i64, i64)>,
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
            let term = || fields["term"].as_i64().unwrap();
            match fields["message"].as_str().unwrap_or_default() {
                "attempting to acquire leader lease" => {
                    audit.identity = fields["identity"].as_str().unwrap().to_owned();
                }
                "became the leader" => audit.terms.push(Term {
                    term: term(),
                    began: at(),
                    ended: None,
                }),
                "lost the lease: stopped the controllers, competing again" => {
                    let (t, at) = (term(), at());
                    let open = audit.terms.iter_mut().find(|x| x.term == t);
                    open.expect("a term that ends began").ended = Some(at);
                }
                "leader election lost" => audit.lost.push((term(), at())),
                "reconciling" => {
                    let spans = entry["spans"].as_array();
                    let span = |name: &str| {
                        spans.and_then(|spans| spans.iter().find(|s| s["name"] == name).cloned())
                    };
                    let leader = span("leading").map(|s| {
                        (
                            s["identity"].as_str().unwrap_or_default().to_owned(),
                            s["term"].as_i64().unwrap_or(-1),
                        )
                    });
                    let object = span("reconcile")
                        .and_then(|s| s["object"].as_str().map(str::to_owned))
                        .unwrap_or_default();
                    audit.reconciles.push(Reconcile {
                        at: at(),
                        object,
                        leader,
                    });
                }
                _ => {}
            }
        }
        audit
    }

    /// Every reconcile ran in one of this process's terms, inside it.
    fn assert_reconciled_only_while_leading(&self, who: &str) {
        for r in &self.reconciles {
            let Some((identity, term)) = &r.leader else {
                panic!("{who} reconciled {} outside any term: {r:?}", r.object);
            };
            assert_eq!(identity, &self.identity, "{who}: {r:?}");
            let t = self.terms.iter().find(|t| t.term == *term);
            let t = t.unwrap_or_else(|| panic!("{who}: term {term} never began: {r:?}"));
            assert!(r.at >= t.began, "{who} reconciled before term {term} began");
            if let Some(ended) = t.ended {
                assert!(
                    r.at <= ended,
                    "{who} reconciled {} {:.3}s after term {term} ended",
                    r.object,
                    secs(r.at - ended)
                );
            }
        }
    }
}

/// `leader_election_master_status` for the operator's Lease, from its metrics on `addr`.
async fn leader_gauge(addr: SocketAddr) -> String {
    let (code, body) = http_get(addr, "/metrics").await;
    assert_eq!(code, 200, "{body}");
    let series = format!("leader_election_master_status{{name=\"{LEASE_NAME}\"}}");
    sample(&body, &series)
        .unwrap_or_else(|| panic!("no {series} in\n{body}"))
        .to_owned()
}

/// An operator with `--leader-elect` (short durations) through `kubeconfig`, serving its
/// metrics on a free port; returned once its caches have synced.
async fn candidate(
    kubeconfig: &Path,
    ns: &str,
    log: &Path,
    extra: &[&str],
) -> (tokio::process::Child, SocketAddr) {
    let metrics: SocketAddr = format!("127.0.0.1:{}", support::free_port())
        .parse()
        .unwrap();
    let args = [
        "--leader-elect",
        "--leader-election-namespace",
        ns,
        &format!("--leader-elect-lease-duration={}s", LEASE.as_secs()),
        &format!("--leader-elect-renew-deadline={}s", RENEW.as_secs()),
        &format!("--leader-elect-retry-period={}s", RETRY.as_secs()),
        &format!("--metrics-bind-address={metrics}"),
        "--metrics-secure=false",
    ];
    let args: Vec<&str> = args.into_iter().chain(extra.iter().copied()).collect();
    let rust_log = "info,controller_runtime::runtime::controller=debug";
    let child = start_operator(kubeconfig, ns, log, rust_log, &args).await;
    (child, metrics)
}

async fn scale(memcacheds: &Api<Memcached>, name: &str, size: i32) {
    memcacheds
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"size": size}})),
        )
        .await
        .unwrap();
}

async fn create_all(memcacheds: &Api<Memcached>) {
    for name in MEMCACHEDS {
        memcacheds
            .create(&PostParams::default(), &Memcached::new(name, spec(1)))
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn a_leader_cut_off_for_30s_stops_reconciling_keeps_running_and_leads_again() {
    let (client, ns, dir) = setup("mc-lease-cut").await;
    let memcacheds = Api::<Memcached>::namespaced(client.clone(), &ns);
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns);
    let names: BTreeSet<String> = MEMCACHEDS.map(String::from).into();
    create_all(&memcacheds).await;

    let (proxy, _) = FaultProxy::to_cluster(FaultRates::moderate()).await;
    proxy.set_faults(false);
    let log = dir.join("operator.log");
    let (mut operator, metrics) = candidate(&proxy.kubeconfig_in(&dir), &ns, &log, &[]).await;
    wait_until("every Memcached written", CONVERGE, async || {
        converged(&memcacheds, &deployments, &names, written).await
    })
    .await;
    let audit = Audit::read(&log);
    assert_eq!(audit.terms.len(), 1, "one term before the cut: {audit:?}");
    assert_eq!(leader_gauge(metrics).await, "1");

    // The cut, and a change the operator cannot see while it lasts.
    let cut_at = now_micros();
    proxy.set_cut(true);
    println!("cut the operator's connection for {CUT:?}");
    scale(&memcacheds, "mc-0", 2).await;
    let lost = wait_until("the operator stops leading", CUT, async || {
        Audit::read(&log)
            .lost
            .first()
            .map(|&(_, at)| at)
            .ok_or_else(|| "still leading".to_owned())
    })
    .await;
    // The elector has stopped leading before it says so: the gauge reads 0 already.
    assert_eq!(leader_gauge(metrics).await, "0", "gauge after the loss");
    let remaining = CUT.saturating_sub(Duration::from_micros((now_micros() - cut_at) as u64));
    tokio::time::sleep(remaining).await;
    assert!(
        operator.try_wait().unwrap().is_none(),
        "the operator exited during the cut"
    );
    let during = Audit::read(&log);
    assert_eq!(during.terms.len(), 1, "no new term during the cut");
    let ended = during.terms[0]
        .ended
        .expect("the term ended during the cut");
    let healed_at = now_micros();
    proxy.set_cut(false);
    println!("connection back");

    wait_until(
        "mc-0 converged at the size set during the cut",
        CONVERGE,
        async || converged(&memcacheds, &deployments, &names, written).await,
    )
    .await;
    let after = Audit::read(&log);
    assert!(
        operator.try_wait().unwrap().is_none(),
        "the operator exited after the cut"
    );
    assert_eq!(
        after.terms.len(),
        2,
        "a second term after the cut: {after:?}"
    );
    let (first, second) = (&after.terms[0], &after.terms[1]);
    assert!(second.term > first.term, "terms increase: {after:?}");
    assert!(second.began > healed_at, "the new term began after the cut");
    after.assert_reconciled_only_while_leading("the operator");
    assert!(
        after
            .reconciles
            .iter()
            .any(|r| r.object == "mc-0" && r.leader.as_ref().map(|l| l.1) == Some(second.term)),
        "mc-0 reconciled in the new term"
    );
    assert_eq!(leader_gauge(metrics).await, "1", "gauge in the new term");
    println!(
        "| cut → lease lost (s) | cut → controllers stopped (s) | return → leading again (s) |\n\
         |----------------------|-------------------------------|----------------------------|\n\
         | {:>20.2} | {:>29.2} | {:>26.2} |",
        secs(lost - cut_at),
        secs(ended - cut_at),
        secs(second.began - healed_at)
    );

    release_all(&memcacheds, MEMCACHEDS).await;
    operator.start_kill().unwrap();
    operator.wait().await.unwrap();
    teardown(&client, &ns, &dir).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn a_leader_cut_off_hands_over_to_a_standby_and_stays_a_standby_after_the_cut() {
    let (client, ns, dir) = setup("mc-lease-cut-standby").await;
    let memcacheds = Api::<Memcached>::namespaced(client.clone(), &ns);
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns);
    let names: BTreeSet<String> = MEMCACHEDS.map(String::from).into();
    create_all(&memcacheds).await;

    let (proxy, _) = FaultProxy::to_cluster(FaultRates::moderate()).await;
    proxy.set_faults(false);
    let (cut_log, standby_log) = (dir.join("cut.log"), dir.join("standby.log"));
    let (mut cut, _) = candidate(&proxy.kubeconfig_in(&dir), &ns, &cut_log, &[]).await;
    wait_until("every Memcached written", CONVERGE, async || {
        converged(&memcacheds, &deployments, &names, written).await
    })
    .await;
    let (mut standby, _) = candidate(&cluster::kubeconfig(), &ns, &standby_log, &[]).await;
    assert!(Audit::read(&standby_log).terms.is_empty(), "one leader");

    let cut_at = now_micros();
    proxy.set_cut(true);
    scale(&memcacheds, "mc-1", 2).await;
    wait_until(
        "the standby converged mc-1 during the cut",
        CONVERGE,
        async || converged(&memcacheds, &deployments, &names, written).await,
    )
    .await;
    let remaining = CUT.saturating_sub(Duration::from_micros((now_micros() - cut_at) as u64));
    tokio::time::sleep(remaining).await;
    proxy.set_cut(false);
    // A change after the cut: the standby, leading now, converges it; the cut replica,
    // back, must not touch it.
    scale(&memcacheds, "mc-0", 0).await;
    wait_until("mc-0 converged after the cut", CONVERGE, async || {
        converged(&memcacheds, &deployments, &names, written).await
    })
    .await;
    // Long enough for the cut replica to compete again, at least once, and lose.
    tokio::time::sleep(LEASE + RETRY * 3).await;

    let (a, b) = (Audit::read(&cut_log), Audit::read(&standby_log));
    assert!(cut.try_wait().unwrap().is_none(), "the cut replica exited");
    a.assert_reconciled_only_while_leading("the cut replica");
    b.assert_reconciled_only_while_leading("the standby");
    assert_eq!(a.terms.len(), 1, "the cut replica led once: {a:?}");
    assert_eq!(b.terms.len(), 1, "the standby led once: {b:?}");
    let (a_term, b_term) = (&a.terms[0], &b.terms[0]);
    let a_ended = a_term.ended.expect("the cut replica's term ended");
    assert!(b_term.term > a_term.term, "terms increase");
    assert!(
        b_term.began > a_ended,
        "the standby began before the cut replica had stopped"
    );
    let a_last = a.reconciles.iter().map(|r| r.at).max().unwrap();
    let b_first = b.reconciles.iter().map(|r| r.at).min().unwrap();
    assert!(a_last < b_first, "two replicas reconciled at once");
    println!(
        "| cut → cut replica stopped (s) | cut → standby leads (s) | margin between them (s) |\n\
         |-------------------------------|-------------------------|-------------------------|\n\
         | {:>29.2} | {:>23.2} | {:>23.2} |",
        secs(a_ended - cut_at),
        secs(b_term.began - cut_at),
        secs(b_term.began - a_ended)
    );

    release_all(&memcacheds, MEMCACHEDS).await;
    for child in [&mut cut, &mut standby] {
        child.start_kill().unwrap();
        child.wait().await.unwrap();
    }
    teardown(&client, &ns, &dir).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn with_exit_on_lost_a_leader_cut_off_exits_as_controller_runtimes_does() {
    let (client, ns, dir) = setup("mc-lease-cut-exit").await;
    let (proxy, _) = FaultProxy::to_cluster(FaultRates::moderate()).await;
    proxy.set_faults(false);
    let log = dir.join("operator.log");
    let exit = ["--leader-elect-exit-on-lost"];
    let (mut operator, metrics) = candidate(&proxy.kubeconfig_in(&dir), &ns, &log, &exit).await;
    wait_until("the operator leads", CONVERGE, async || {
        let gauge = leader_gauge(metrics).await;
        (gauge == "1").then_some(()).ok_or(gauge)
    })
    .await;
    proxy.set_cut(true);
    let status = tokio::time::timeout(CONVERGE, operator.wait())
        .await
        .expect("the operator exits once it has lost the lease")
        .unwrap();
    assert!(!status.success(), "exits with an error: {status}");
    let audit = Audit::read(&log);
    assert_eq!(audit.lost.len(), 1, "{audit:?}");
    assert_eq!(audit.terms.len(), 1, "never competed again: {audit:?}");
    audit.assert_reconciled_only_while_leading("the operator");
    proxy.set_cut(false);
    teardown(&client, &ns, &dir).await;
}
