//! The protocol's decision alone, then whole members over an in-memory Lease registry on
//! paused time: joins, a kill, a partition, with the ranges checked at every step.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::*;
use crate::runtime::shard::ranges::assign;

fn r(text: &str) -> Ranges {
    text.parse().unwrap()
}

const LOW: &str = "0x0-0x8000000000000000";
const HIGH: &str = "0x8000000000000000-0x10000000000000000";

// === plan ===

#[test]
fn a_verified_claim_becomes_active() {
    let plan = plan(&Ranges::none(), &r(LOW), &r(LOW), &r(HIGH), |_| false);
    assert_eq!(plan.active, r(LOW));
    assert_eq!(plan.published, r(LOW));
    assert!(plan.withdrawn.is_empty());
}

#[test]
fn a_claim_another_member_holds_is_withdrawn_and_never_active() {
    let plan = plan(&Ranges::none(), &r(LOW), &r(LOW), &r(LOW), |_| false);
    assert_eq!(plan.active, Ranges::none());
    assert_eq!(plan.published, Ranges::none());
    assert_eq!(plan.withdrawn, r(LOW));
}

#[test]
fn free_assigned_ranges_are_claimed_but_not_yet_active() {
    let plan = plan(
        &Ranges::none(),
        &Ranges::none(),
        &Ranges::all(),
        &r(HIGH),
        |_| false,
    );
    assert_eq!(plan.active, Ranges::none());
    assert_eq!(plan.published, r(LOW));
}

#[test]
fn a_range_given_up_closes_at_once_and_is_unpublished_only_once_idle() {
    let all = Ranges::all();
    let busy = plan(&all, &all, &r(LOW), &Ranges::none(), |_| true);
    assert_eq!(busy.active, r(LOW));
    assert_eq!(
        busy.published, all,
        "still published while a key in it runs"
    );
    let idle = plan(&r(LOW), &all, &r(LOW), &Ranges::none(), |_| false);
    assert_eq!(idle.active, r(LOW));
    assert_eq!(idle.published, r(LOW));
}

#[test]
fn an_active_range_is_kept_whatever_others_claim() {
    // A rival's claim over an active range is the rival's to withdraw.
    let plan = plan(&r(LOW), &r(LOW), &r(LOW), &r(LOW), |_| false);
    assert_eq!(plan.active, r(LOW));
    assert_eq!(plan.published, r(LOW));
}

#[test]
fn timings_are_validated() {
    let mut config = ShardConfig::new("set", "ns", "a");
    assert!(config.validate().is_ok());
    config.renew_deadline = config.lease_duration;
    assert!(config.validate().is_err());
    let mut config = ShardConfig::new("set", "ns", "a");
    config.retry_period = Duration::from_secs(9);
    assert!(config.validate().is_err());
    assert!(ShardConfig::new("", "ns", "a").validate().is_err());
}

#[test]
fn lease_names_are_dns_subdomains() {
    let config = ShardConfig::new("Memcached_Operator", "ns", "pod-7:ab");
    assert_eq!(config.lease_name(), "memcached-operator-shard-pod-7-ab");
    assert_eq!(config.set_label(), "Memcached_Operator");
}

// === members over an in-memory registry ===

/// The API server's Leases, in memory, with resourceVersions.
#[derive(Default)]
struct Leases {
    items: Mutex<BTreeMap<String, Lease>>,
    version: AtomicU64,
}

/// One member's view of [`Leases`]; every request fails while `cut` is set, and takes
/// `slow` milliseconds more.
struct Fake {
    leases: Arc<Leases>,
    cut: Arc<AtomicBool>,
    slow: Arc<AtomicU64>,
}

fn cut_error() -> client::Error {
    client::Error::Build("connection cut".into())
}

impl Fake {
    async fn hop(&self) -> client::Result<()> {
        // Each request takes a little time, so members interleave.
        let slow = self.slow.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(20 + slow)).await;
        if self.cut.load(Ordering::SeqCst) {
            return Err(cut_error());
        }
        Ok(())
    }

    fn stamp(&self, mut lease: Lease) -> Lease {
        let version = self.leases.version.fetch_add(1, Ordering::SeqCst) + 1;
        lease.metadata.resource_version = Some(version.to_string());
        lease
    }
}

fn conflict() -> client::Error {
    client::Error::Api(Box::new(
        serde_json::from_str(
            r#"{"kind":"Status","status":"Failure","reason":"Conflict","code":409}"#,
        )
        .unwrap(),
    ))
}

impl Registry for Fake {
    fn list(&self) -> BoxFuture<'_, client::Result<Vec<Lease>>> {
        Box::pin(async move {
            self.hop().await?;
            Ok(self.leases.items.lock().values().cloned().collect())
        })
    }

    fn get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, client::Result<Option<Lease>>> {
        Box::pin(async move {
            self.hop().await?;
            Ok(self.leases.items.lock().get(name).cloned())
        })
    }

    fn create(&self, lease: Lease) -> BoxFuture<'_, client::Result<Lease>> {
        Box::pin(async move {
            self.hop().await?;
            let name = lease.metadata.name.clone().unwrap();
            let mut items = self.leases.items.lock();
            if items.contains_key(&name) {
                return Err(conflict());
            }
            let lease = self.stamp(lease);
            items.insert(name, lease.clone());
            Ok(lease)
        })
    }

    fn replace(&self, lease: Lease) -> BoxFuture<'_, client::Result<Lease>> {
        Box::pin(async move {
            self.hop().await?;
            let name = lease.metadata.name.clone().unwrap();
            let mut items = self.leases.items.lock();
            let current = items
                .get(&name)
                .and_then(|l| l.metadata.resource_version.clone());
            if current.is_none() || current != lease.metadata.resource_version {
                return Err(conflict());
            }
            let lease = self.stamp(lease);
            items.insert(name, lease.clone());
            Ok(lease)
        })
    }

    fn delete<'a>(&'a self, name: &'a str) -> BoxFuture<'a, client::Result<()>> {
        Box::pin(async move {
            self.hop().await?;
            self.leases.items.lock().remove(name);
            Ok(())
        })
    }
}

/// A member running in a task, killable without leaving.
struct Member {
    shard: Shard,
    cut: Arc<AtomicBool>,
    slow: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

fn start(leases: &Arc<Leases>, identity: &str) -> Member {
    let cut = Arc::new(AtomicBool::new(false));
    let slow = Arc::new(AtomicU64::new(0));
    let registry = Fake {
        leases: leases.clone(),
        cut: cut.clone(),
        slow: slow.clone(),
    };
    let shard =
        Shard::with_registry(Box::new(registry), ShardConfig::new("set", "ns", identity)).unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let runner = shard.clone();
    let task = tokio::spawn(async move {
        runner
            .run(async {
                let _ = stopped.await;
            })
            .await
    });
    Member {
        shard,
        cut,
        slow,
        task,
        stop: Some(stop),
    }
}

/// The ranges `shard` admits keys in at this instant.
fn admitting(shard: &Shard) -> Ranges {
    let state = shard.inner.state.lock();
    match state.fence {
        Some(fence) if Instant::now() < fence => state.active.clone(),
        _ => Ranges::none(),
    }
}

/// Advances time by `duration` in steps, asserting at each that no two of `members` admit
/// keys in one range.
async fn run_checked(members: &[&Member], duration: Duration) {
    let step = Duration::from_millis(50);
    let mut left = duration;
    while !left.is_zero() {
        tokio::time::sleep(step).await;
        left = left.saturating_sub(step);
        let held: Vec<(String, Ranges)> = members
            .iter()
            .map(|m| (m.shard.identity().to_owned(), admitting(&m.shard)))
            .collect();
        for (i, (a, ra)) in held.iter().enumerate() {
            for (b, rb) in &held[i + 1..] {
                assert!(
                    !ra.overlaps(rb),
                    "{a} admits {ra:?} and {b} admits {rb:?} at once"
                );
            }
        }
    }
}

/// Whether `members` admit exactly the split [`assign`] gives them.
fn settled(members: &[&Member]) -> bool {
    let names: Vec<&str> = members.iter().map(|m| m.shard.identity()).collect();
    assign(&names).into_iter().all(|(name, ranges)| {
        let member = members.iter().find(|m| m.shard.identity() == name).unwrap();
        admitting(&member.shard) == ranges
    })
}

/// Runs (checked) until `done` holds; panics, saying `what` did not happen, after `limit`.
async fn run_until(
    members: &[&Member],
    limit: Duration,
    what: &str,
    mut done: impl FnMut() -> bool,
) {
    let step = Duration::from_millis(50);
    let mut waited = Duration::ZERO;
    while !done() {
        assert!(waited < limit, "{what} after {limit:?}: {members:?}");
        run_checked(members, step).await;
        waited += step;
    }
}

/// Runs (checked) until `members` settle; panics after `limit`.
async fn settle(members: &[&Member], limit: Duration) {
    run_until(members, limit, "not settled", || settled(members)).await;
}

/// A hash in the share [`assign`] gives `member` among `members`.
fn key_of(members: &[&str], member: &str) -> u64 {
    let (_, share) = assign(members)
        .into_iter()
        .find(|(name, _)| name == member)
        .unwrap();
    u64::try_from(share.ranges()[0].start()).unwrap()
}

/// Asserts that `b` sees the members a, b (itself) and c, and publishes what it holds.
fn assert_b_sees_a_b_c(b: &Member) {
    let seen = b.shard.members();
    let identities: Vec<_> = seen.iter().map(|m| (m.identity.as_str(), m.this)).collect();
    assert_eq!(identities, [("a", false), ("b", true), ("c", false)]);
    assert!(
        !seen[1].ranges.is_empty(),
        "b publishes what it holds: {seen:?}"
    );
}

impl fmt::Debug for Member {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} admitting {:?}", self.shard, admitting(&self.shard))
    }
}

#[tokio::test(start_paused = true)]
async fn a_key_in_flight_on_a_member_cut_off_is_revoked_before_another_member_admits_it() {
    let leases = Arc::new(Leases::default());
    let a = start(&leases, "a");
    let b = start(&leases, "b");
    settle(&[&a, &b], Duration::from_secs(60)).await;
    let hash = key_of(&["a", "b"], "a");
    let permit = a.shard.admit(hash).expect("a holds its half");
    // A reconcile that never ends by itself: it lets go only when its permit is revoked.
    let released = Arc::new(AtomicBool::new(false));
    let holder = {
        let released = released.clone();
        tokio::spawn(async move {
            permit.revoked().await;
            released.store(true, Ordering::SeqCst);
            drop(permit);
        })
    };
    run_checked(&[&a, &b], Duration::from_secs(5)).await;
    assert!(!released.load(Ordering::SeqCst), "renewals keep it held");

    a.cut.store(true, Ordering::SeqCst);
    run_until(
        &[&a, &b],
        Duration::from_secs(60),
        "b never took a's half",
        || admitting(&b.shard).contains(hash),
    )
    .await;
    assert!(
        released.load(Ordering::SeqCst),
        "b admits the key while a's reconcile of it still runs"
    );
    assert_eq!(a.shard.in_flight(), 0);
    holder.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_member_leaving_with_a_key_still_in_flight_leaves_its_lease_to_expire() {
    let leases = Arc::new(Leases::default());
    let mut a = start(&leases, "a");
    settle(&[&a], Duration::from_secs(30)).await;
    // Held past the renew deadline: a reconcile that cannot be dropped.
    let permit = a.shard.admit(1).unwrap();
    let _ = a.stop.take().unwrap().send(());
    (&mut a.task).await.unwrap();
    assert!(
        leases.items.lock().contains_key("set-shard-a"),
        "the Lease is not deleted under a running key"
    );
    drop(permit);
}

#[tokio::test(start_paused = true)]
async fn members_split_the_space_and_hand_ranges_over_without_overlap() {
    let leases = Arc::new(Leases::default());
    let a = start(&leases, "a");
    settle(&[&a], Duration::from_secs(30)).await;
    assert_eq!(admitting(&a.shard), Ranges::all());

    let b = start(&leases, "b");
    let c = start(&leases, "c");
    settle(&[&a, &b, &c], Duration::from_secs(60)).await;
    assert_b_sees_a_b_c(&b);

    // SIGKILL: the task dies with its Lease in place; the others wait for it to expire.
    c.task.abort();
    let _ = (&mut { c.task }).await;
    settle(&[&a, &b], Duration::from_secs(60)).await;

    // A graceful leave deletes the Lease: the other takes its ranges.
    let mut b = b;
    let _ = b.stop.take().unwrap().send(());
    run_checked(&[&a, &b], Duration::from_secs(1)).await;
    (&mut b.task).await.unwrap();
    assert!(!leases.items.lock().contains_key("set-shard-b"));
    let d = start(&leases, "d");
    settle(&[&a, &d], Duration::from_secs(60)).await;
}

#[tokio::test(start_paused = true)]
async fn a_member_cut_off_stops_before_others_take_its_ranges_and_rejoins() {
    let leases = Arc::new(Leases::default());
    let a = start(&leases, "a");
    let b = start(&leases, "b");
    let c = start(&leases, "c");
    settle(&[&a, &b, &c], Duration::from_secs(60)).await;
    assert_b_sees_a_b_c(&b);

    b.cut.store(true, Ordering::SeqCst);
    // b stays in the check: it must stop admitting before a or c start on its ranges.
    run_checked(&[&a, &b, &c], Duration::from_secs(12)).await;
    assert_eq!(
        admitting(&b.shard),
        Ranges::none(),
        "past its renew deadline"
    );
    run_until(
        &[&a, &b, &c],
        Duration::from_secs(60),
        "a and c not settled",
        || settled(&[&a, &c]),
    )
    .await;

    b.cut.store(false, Ordering::SeqCst);
    settle(&[&a, &b, &c], Duration::from_secs(60)).await;
}

#[tokio::test(start_paused = true)]
async fn a_range_is_not_given_up_while_a_key_in_it_runs() {
    let leases = Arc::new(Leases::default());
    let a = start(&leases, "a");
    settle(&[&a], Duration::from_secs(30)).await;
    // A key in what will be b's share.
    let hash = key_of(&["a", "b"], "b");
    let permit = a.shard.admit(hash).expect("a holds everything");
    assert_eq!(permit.range, HashRange::ALL);

    let b = start(&leases, "b");
    run_checked(&[&a, &b], Duration::from_secs(20)).await;
    assert!(a.shard.admit(hash).is_none(), "closed to new keys at once");
    assert!(
        !admitting(&b.shard).contains(hash),
        "b waits while a's key runs"
    );
    drop(permit);
    settle(&[&a, &b], Duration::from_secs(30)).await;
    assert!(b.shard.admit(hash).is_some());
}

#[tokio::test(start_paused = true)]
async fn a_key_fenced_while_a_late_write_is_under_way_is_admitted_once_it_lands() {
    let leases = Arc::new(Leases::default());
    let a = start(&leases, "a");
    settle(&[&a], Duration::from_secs(30)).await;
    // Each request now takes 3.5 s: a round (write, list, a 2 s pause) starts the next
    // write before the 10 s renew deadline and ends it after, so the deadline passes while
    // a write that will succeed is under way.
    a.slow.store(3_500, Ordering::SeqCst);
    run_until(
        &[&a],
        Duration::from_secs(30),
        "the renew deadline never passed",
        || a.shard.try_admit(7).is_err(),
    )
    .await;
    // Fenced, not dropped: the controller retries such a key, and the range is still held.
    assert_eq!(a.shard.try_admit(7).err(), Some(Refused::Fenced));
    assert_eq!(a.shard.active(), Ranges::all());
    // The late write lands and renews: the same key is admitted again.
    run_until(
        &[&a],
        Duration::from_secs(30),
        "the key was never admitted again",
        || a.shard.try_admit(7).is_ok(),
    )
    .await;
}
