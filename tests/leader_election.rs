//! Leader election against the real cluster: two electors on one Lease in a fresh namespace.
//! Exactly one leads; a leader cancelled with `release_on_cancel` hands over within one
//! jittered retry period; a leader that vanishes without releasing is replaced once its
//! lease has expired, never earlier. The `leader_election_master_status` gauge follows.
//!
//! Durations are shortened (lease 4 s, renew 3 s, retry 1 s) to keep the tests quick. The
//! handover times are asserted, as client-go's algorithm bounds them (see each test), with a
//! stated tolerance for request latency.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use controller_runtime::client::{Api, Client};
use controller_runtime::runtime::leader_election::{
    Error, JITTER_FACTOR, LeaderElectionConfig, LeaderElector,
};
use controller_runtime::runtime::metrics::Metrics;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use parking_lot::Mutex;
use support::cluster::{client, create_namespace, delete_namespace};
use support::{CONVERGE, sample};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

const LEASE: Duration = Duration::from_secs(4);
const RENEW: Duration = Duration::from_secs(3);
const RETRY: Duration = Duration::from_secs(1);
/// Allowance for request latency on a loaded machine (two lease requests, a GET and a PUT).
const TOLERANCE: Duration = Duration::from_millis(1000);

fn config(namespace: &str, release_on_cancel: bool) -> LeaderElectionConfig {
    LeaderElectionConfig {
        lease_duration: LEASE,
        renew_deadline: RENEW,
        retry_period: RETRY,
        release_on_cancel,
        ..LeaderElectionConfig::new("le-test", namespace)
    }
}

/// One candidate, as one replica of an operator would run it: its own metrics registry.
struct Candidate {
    elector: Arc<LeaderElector>,
    metrics: Metrics,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), Error>>,
}

impl Candidate {
    fn start(client: &Client, config: LeaderElectionConfig) -> Candidate {
        let metrics = Metrics::new();
        let status = metrics.leader_status(&config.lease_name);
        let elector = Arc::new(
            LeaderElector::new(client.clone(), config)
                .unwrap()
                .with_status(status),
        );
        let (tx, rx) = oneshot::channel::<()>();
        let e = elector.clone();
        let task = tokio::spawn(async move {
            e.run(async {
                let _ = rx.await;
            })
            .await
        });
        Candidate {
            elector,
            metrics,
            stop: Some(tx),
            task,
        }
    }

    fn leading(&self) -> bool {
        *self.elector.leading().borrow()
    }

    /// `leader_election_master_status{name="le-test"}` in this candidate's registry.
    fn status_metric(&self) -> String {
        let text = self.metrics.encode();
        sample(&text, r#"leader_election_master_status{name="le-test"}"#)
            .unwrap_or_else(|| panic!("no status in\n{text}"))
            .to_owned()
    }

    async fn until_leading(&self) {
        let mut rx = self.elector.leading();
        tokio::time::timeout(CONVERGE, rx.wait_for(|l| *l))
            .await
            .expect("became leader")
            .unwrap();
    }

    async fn cancel(mut self) -> Result<(), Error> {
        self.stop.take().unwrap().send(()).unwrap();
        tokio::time::timeout(CONVERGE, self.task)
            .await
            .expect("run returns after shutdown")
            .unwrap()
    }
}

/// Waits until exactly one of `a`, `b` leads; returns (leader, follower).
async fn elected(a: Candidate, b: Candidate) -> (Candidate, Candidate) {
    tokio::time::timeout(CONVERGE, async {
        loop {
            match (a.leading(), b.leading()) {
                (true, false) => return,
                (false, true) => return,
                (true, true) => panic!("two leaders"),
                (false, false) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    })
    .await
    .expect("someone is elected");
    if a.leading() { (a, b) } else { (b, a) }
}

/// Samples both candidates every 10 ms and remembers whether they ever both led.
fn watch_for_two_leaders(a: &Candidate, b: &Candidate) -> Arc<AtomicBool> {
    let both = Arc::new(AtomicBool::new(false));
    let flag = both.clone();
    let (ra, rb) = (a.elector.leading(), b.elector.leading());
    tokio::spawn(async move {
        loop {
            if *ra.borrow() && *rb.borrow() {
                flag.store(true, Ordering::SeqCst);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    both
}

/// Every distinct lease spec seen, polling every 50 ms.
fn record_lease(leases: Api<Lease>) -> Arc<Mutex<Vec<LeaseSpec>>> {
    let seen = Arc::new(Mutex::new(Vec::<LeaseSpec>::new()));
    let out = seen.clone();
    tokio::spawn(async move {
        loop {
            if let Ok(Some(lease)) = leases.get_opt("le-test").await {
                let spec = lease.spec.unwrap_or_default();
                let mut seen = out.lock();
                if seen.last() != Some(&spec) {
                    seen.push(spec);
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    seen
}

fn micros(t: &MicroTime) -> i64 {
    t.0.as_microsecond()
}

fn wall_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64
}

fn since(later: i64, earlier: i64) -> Duration {
    Duration::from_micros(u64::try_from(later - earlier).unwrap_or_else(|_| {
        panic!("{later} is before {earlier}");
    }))
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn release_on_cancel_hands_the_lease_over_within_a_jittered_retry_period() {
    let client = client();
    let ns = create_namespace(&client, "le-release").await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);

    let a = Candidate::start(&client, config(&ns, true));
    let b = Candidate::start(&client, config(&ns, true));
    let both = watch_for_two_leaders(&a, &b);
    let (leader, follower) = elected(a, b).await;
    assert_eq!(leader.status_metric(), "1");
    assert_eq!(follower.status_metric(), "0");

    // Leadership is stable: a few renewals later, still one leader, the same one.
    tokio::time::sleep(3 * RETRY).await;
    assert!(leader.leading() && !follower.leading());
    let before = leases.get("le-test").await.unwrap().spec.unwrap();
    assert_eq!(
        before.holder_identity.as_deref(),
        Some(leader.elector.identity())
    );
    assert_eq!(before.lease_duration_seconds, Some(4));
    assert!(before.renew_time > before.acquire_time, "{before:?}");

    let cancelled_at = wall_micros();
    let leader_id = leader.elector.identity().to_owned();
    leader.cancel().await.unwrap();
    let released_at = wall_micros();
    follower.until_leading().await;
    assert_eq!(follower.status_metric(), "1");

    let after = leases.get("le-test").await.unwrap().spec.unwrap();
    assert_eq!(
        after.holder_identity.as_deref(),
        Some(follower.elector.identity())
    );
    assert_eq!(
        after.lease_transitions,
        before.lease_transitions.map(|t| t + 1)
    );
    let acquired = micros(after.acquire_time.as_ref().unwrap());
    assert!(acquired >= cancelled_at, "acquired before the release");
    // The release is written before `run` returns; the follower's next attempt comes
    // within retry × (1 + 1.2) (client-go's jitter), and finds an empty holder.
    let handover = since(acquired, released_at.min(acquired));
    let bound = RETRY.mul_f64(1.0 + JITTER_FACTOR) + TOLERANCE;
    println!("handover after release: {handover:?} (bound {bound:?}); old leader {leader_id}");
    assert!(handover <= bound, "handover took {handover:?} > {bound:?}");
    assert!(!both.load(Ordering::SeqCst), "two leaders at once");

    follower.cancel().await.unwrap();
    // Released again: nobody holds it.
    let last = leases.get("le-test").await.unwrap().spec.unwrap();
    assert_eq!(last.holder_identity.as_deref(), Some(""));
    assert_eq!(last.lease_duration_seconds, Some(1));
    delete_namespace(&client, &ns).await;
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_vanished_leader_is_replaced_once_its_lease_expires() {
    let client = client();
    let ns = create_namespace(&client, "le-expire").await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);

    let a = Candidate::start(&client, config(&ns, false));
    let b = Candidate::start(&client, config(&ns, false));
    let both = watch_for_two_leaders(&a, &b);
    let (mut leader, follower) = elected(a, b).await;
    let seen = record_lease(leases.clone());
    tokio::time::sleep(2 * RETRY).await;
    let leader_id = leader.elector.identity().to_owned();
    let follower_id = follower.elector.identity().to_owned();

    // The leader's process "dies": its task is aborted, nothing is released.
    let aborted = tokio::time::Instant::now();
    leader.task.abort();
    let _ = (&mut leader.task).await;
    assert!(!*leader.elector.leading().borrow());
    assert_eq!(leader.status_metric(), "0");

    follower.until_leading().await;
    let waited = aborted.elapsed();
    assert_eq!(follower.status_metric(), "1");
    // Let the recorder catch the takeover.
    tokio::time::sleep(Duration::from_millis(200)).await;

    let seen = seen.lock().clone();
    let last_renewal = seen
        .iter()
        .filter(|s| s.holder_identity.as_deref() == Some(leader_id.as_str()))
        .filter_map(|s| s.renew_time.as_ref().map(micros))
        .max()
        .expect("the old leader's renewals were seen");
    let takeover = seen
        .iter()
        .find(|s| s.holder_identity.as_deref() == Some(follower_id.as_str()))
        .expect("the takeover was seen");
    let old = seen
        .iter()
        .rev()
        .find(|s| s.holder_identity.as_deref() == Some(leader_id.as_str()))
        .unwrap();
    assert_eq!(
        takeover.lease_transitions,
        old.lease_transitions.map(|t| t + 1)
    );
    let acquired = micros(takeover.acquire_time.as_ref().unwrap());
    let gap = since(acquired, last_renewal);
    // Never before the lease expired: the follower saw the last renewal no earlier than it
    // was written, and waits a full lease from that observation. (A small allowance for
    // the microsecond rounding of the recorded times.)
    assert!(
        gap + Duration::from_millis(5) >= LEASE,
        "took over {gap:?} after the last renewal, before the {LEASE:?} lease expired"
    );
    // At the latest: the follower observes the last renewal within one jittered retry
    // period (retry × 2.2) of it, and attempts again within another after expiry.
    let bound = LEASE + 2 * RETRY.mul_f64(1.0 + JITTER_FACTOR) + TOLERANCE;
    println!(
        "takeover {gap:?} after the last renewal (bound {bound:?}; lease + retry = {:?}); \
         {waited:?} after the abort",
        LEASE + RETRY
    );
    assert!(gap <= bound, "takeover took {gap:?} > {bound:?}");
    assert!(!both.load(Ordering::SeqCst), "two leaders at once");

    follower.cancel().await.unwrap();
    delete_namespace(&client, &ns).await;
}
