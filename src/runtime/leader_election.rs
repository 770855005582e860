//! Leader election on coordination.k8s.io/v1 Leases.
//!
//! A [`LeaderElector`] competes for one `Lease` with the other replicas of an operator, the
//! way client-go's `leaderelection` package does: it tries to acquire the lease every
//! `retry_period` (jittered), then, once it leads, renews it every `retry_period`, giving up
//! when no renewal succeeded for `renew_deadline`. Controllers run only while
//! [`LeaderElector::leading`] reads `true`; when [`run`](LeaderElector::run) returns
//! [`Error::Lost`], whatever the lease guards must stop at once. Then `run` may be called
//! again to compete once more (the manager does, by default), or the process exits, as
//! controller-runtime's does.
//!
//! ```no_run
//! use controller_runtime::client::Client;
//! use controller_runtime::runtime::leader_election::{LeaderElectionConfig, LeaderElector};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let client = Client::try_default().await?;
//! let config = LeaderElectionConfig::new("86f835c3.example.com", "memcached-operator-system");
//! let elector = LeaderElector::new(client, config)?;
//! let mut leading = elector.leading();
//! tokio::spawn(async move {
//!     while leading.changed().await.is_ok() {
//!         println!("leading: {}", *leading.borrow());
//!     }
//! });
//! elector.run(async { let _ = tokio::signal::ctrl_c().await; }).await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Implementation Details
//!
//! The lease's spec is read as client-go's `LeaderElectionRecord`: holder, lease duration,
//! acquire and renew times, transitions. One attempt ([`LeaderElector`]'s
//! `try_acquire_or_renew`) goes:
//!
//! 1. **Fast path.** If this elector holds the lease and its lease is still valid, it
//!    replaces the lease it last wrote with a new renew time, at the `resourceVersion` it
//!    got back; a conflict or error falls through to the slow path.
//! 2. **Read.** `GET` the lease; if there is none, create it naming this elector (a
//!    concurrent create loses with 409 and tries again later).
//! 3. **Observe.** If the record differs from the one last observed, remember it and the
//!    *local monotonic time* of the observation. Expiry is judged only from that time plus
//!    the record's `leaseDurationSeconds`: the renew time written by another machine is
//!    never compared with this machine's clock, so clock skew between replicas does not
//!    matter (only their clock *rates* do).
//! 4. **Decide** (`decide`): a holder other than this elector whose lease is still valid
//!    wins; otherwise this elector writes a record naming itself, keeping the acquire time and
//!    transitions if it already held the lease, else with acquire time now and transitions
//!    plus one.
//! 5. **Write** with the `resourceVersion` just read: of several candidates only one
//!    succeeds (optimistic concurrency); the others get 409 and try again.
//!
//! While leading, renewals repeat every `retry_period`; each renewal may retry (every
//! `retry_period`) until `renew_deadline` has passed since the last successful renewal was
//! *sent*, and then leadership is lost. Each request is bounded by
//! `max(renew_deadline / 2, 1 s)`, controller-runtime's timeout for the leader-election
//! client.
//!
//! # The guarantee
//!
//! Let *S* be the moment (on this replica's monotonic clock) the last successful renewal
//! was sent. The server wrote it after *S*, so every other candidate observed that record
//! after *S* and waits `lease_duration` from its observation before taking over: nobody
//! else can lead before *S* + `lease_duration`. This elector stops leading at
//! *S* + `renew_deadline` at the latest, whether or not its requests answer: the
//! `lease_duration - renew_deadline` between the two (5 s by default) is the margin for the
//! replicas' clock *rates* and for stopping what the lease guards (the manager drops every
//! reconcile in flight at once; a write already sent may still be on its way to the
//! server within that margin). client-go counts its deadline from the start of the failing
//! renewal, up to a request timeout and a retry period later than *S*, which can leave no
//! margin at all.
//!
//! Three deliberate differences from client-go beyond that one: a renewal that reads the
//! lease naming another holder ends leadership at once, rather than retrying until the
//! deadline, since someone else already believes it leads; an elector that lost the lease
//! and runs again starts a new term (acquire time now, transitions plus one) even if the
//! lease still names it; and a candidate that does not lead watches the lease between its
//! attempts, so it tries again as soon as the lease is released (a warm standby takes over
//! within a round trip of the release, not a jittered retry period later: the lease the
//! watch delivers is written at once, without reading it again) and the moment the
//! holder's lease expires. The watch is an optimisation: without it (no `watch`
//! permission on leases) the candidate polls every jittered `retry_period`, as client-go's.
//!
//! Release (with `release_on_cancel`) writes client-go's released record: empty holder,
//! `leaseDurationSeconds: 1`, acquire and renew times now, transitions kept. Other
//! candidates take an empty-holder lease at their next attempt.

use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::Instant;

use super::metrics::LeaderStatus;
use crate::client::{self, Api, Client, PostParams, Selector, WatchEvent, WatchParams};

/// client-go's `JitterFactor`: acquire attempts are spaced `retry_period × [1, 2.2)` apart,
/// and `renew_deadline` must exceed `retry_period × 1.2`.
pub const JITTER_FACTOR: f64 = 1.2;

/// Why leader election stopped or could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration breaks one of client-go's rules (see [`LeaderElector::new`]).
    #[error("invalid leader election configuration: {0}")]
    InvalidConfig(String),

    /// Leadership was lost: no renewal succeeded within `renew_deadline`, or another
    /// candidate holds the lease. What the lease guards must stop at once; then compete
    /// again (call [`LeaderElector::run`] again) or exit.
    #[error("leader election lost: lease {lease}: {reason}")]
    Lost {
        /// The lease, as `namespace/name`.
        lease: String,
        /// What happened.
        reason: String,
    },

    /// [`LeaderElector::run`] was called while another call to it was running.
    #[error("leader election for lease {0} is already running")]
    AlreadyRunning(String),
}

/// How to elect: which lease, who we are, and client-go's three durations.
#[derive(Clone, Debug)]
pub struct LeaderElectionConfig {
    /// The Lease's name (controller-runtime's `LeaderElectionID`).
    pub lease_name: String,
    /// The Lease's namespace.
    pub namespace: String,
    /// This candidate's identity, written as `holderIdentity`; unique per process.
    pub identity: String,
    /// How long a lease stays valid after it was last seen to change; others wait this long
    /// before taking it over. Default 15 s.
    pub lease_duration: Duration,
    /// How long the leader keeps retrying a renewal before it gives up. Default 10 s.
    pub renew_deadline: Duration,
    /// The interval between attempts. Default 2 s.
    pub retry_period: Duration,
    /// Release the lease when `run`'s shutdown completes, so another candidate takes over
    /// at once instead of after `lease_duration`. Only safe if everything the lease guards
    /// has stopped by then: the manager ends `run` only once its controllers have stopped
    /// (and keeps the lease when it could not wait for them, see
    /// [`LeaderElector::keep_lease`]). Default true (controller-runtime's is false: its
    /// manager cannot tell whether the user's runnables have stopped).
    pub release_on_cancel: bool,
}

impl LeaderElectionConfig {
    /// controller-runtime's durations (15 s / 10 s / 2 s), and release on cancel, for the
    /// lease `namespace/lease_name`, with identity `<hostname>_<random UUID>`.
    pub fn new(lease_name: impl Into<String>, namespace: impl Into<String>) -> Self {
        LeaderElectionConfig {
            lease_name: lease_name.into(),
            namespace: namespace.into(),
            identity: default_identity(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            release_on_cancel: true,
        }
    }

    /// Checks client-go's rules; see [`LeaderElector::new`].
    fn validate(&self) -> Result<(), Error> {
        let bad = |m: &str| Err(Error::InvalidConfig(m.to_owned()));
        if self.lease_name.is_empty() {
            return bad("lease name must not be empty");
        }
        if self.namespace.is_empty() {
            return bad("namespace must not be empty");
        }
        if self.identity.is_empty() {
            return bad("identity must not be empty");
        }
        if self.lease_duration.is_zero() || self.renew_deadline.is_zero() {
            return bad("lease duration and renew deadline must be greater than zero");
        }
        if self.retry_period.is_zero() {
            return bad("retry period must be greater than zero");
        }
        if self.lease_duration < Duration::from_secs(1) {
            return bad("lease duration must be at least 1s (the lease holds whole seconds)");
        }
        if self.lease_duration <= self.renew_deadline {
            return bad("lease duration must be greater than renew deadline");
        }
        if self.renew_deadline <= self.retry_period.mul_f64(JITTER_FACTOR) {
            return bad("renew deadline must be greater than retry period × 1.2");
        }
        Ok(())
    }

    /// `leaseDurationSeconds` as written: whole seconds, as client-go truncates.
    fn lease_seconds(&self) -> i32 {
        i32::try_from(self.lease_duration.as_secs()).unwrap_or(i32::MAX)
    }

    /// controller-runtime's timeout for one leader-election request.
    fn request_timeout(&self) -> Duration {
        (self.renew_deadline / 2).max(Duration::from_secs(1))
    }
}

/// `<hostname>_<random UUID>`, controller-runtime's default identity.
fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()))
        .unwrap_or_else(|| "localhost".to_owned());
    format!("{host}_{}", random_uuid())
}

/// 64 random bits from the standard library's randomly keyed hasher.
fn random_u64() -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    );
    hasher.finish()
}

/// A random (version 4) UUID in its usual text form.
fn random_uuid() -> String {
    let hi = random_u64();
    let lo = random_u64();
    let hi = (hi & !0xf000) | 0x4000; // version 4
    let lo = (lo & !(0b11 << 62)) | (0b10 << 62); // RFC 4122 variant
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        hi >> 32,
        (hi >> 16) & 0xffff,
        hi & 0xffff,
        lo >> 48,
        lo & 0xffff_ffff_ffff
    )
}

/// `retry_period × [1, 1 + JITTER_FACTOR)` (client-go's `wait.Jitter`).
fn jittered(period: Duration) -> Duration {
    let unit = (random_u64() >> 11) as f64 / (1u64 << 53) as f64;
    period + period.mul_f64(JITTER_FACTOR * unit)
}

/// Now, at the microsecond precision a `MicroTime` keeps on the server, so a record read
/// back compares equal to the one written.
fn micro_now() -> MicroTime {
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
    MicroTime(Timestamp::from_microsecond(micros).unwrap_or(Timestamp::UNIX_EPOCH))
}

// === the record and the decision ===

/// A Lease's spec as client-go's `LeaderElectionRecord`.
#[derive(Clone, Debug, Default, PartialEq)]
struct Record {
    /// Empty when nobody holds the lease (released).
    holder: String,
    lease_duration_seconds: i32,
    acquire_time: Option<MicroTime>,
    renew_time: Option<MicroTime>,
    transitions: i32,
}

impl Record {
    fn from_spec(spec: Option<&LeaseSpec>) -> Record {
        let Some(spec) = spec else {
            return Record::default();
        };
        Record {
            holder: spec.holder_identity.clone().unwrap_or_default(),
            lease_duration_seconds: spec.lease_duration_seconds.unwrap_or_default(),
            acquire_time: spec.acquire_time.clone(),
            renew_time: spec.renew_time.clone(),
            transitions: spec.lease_transitions.unwrap_or_default(),
        }
    }

    /// The spec client-go writes: every field set, anything else in the spec dropped.
    fn to_spec(&self) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.holder.clone()),
            lease_duration_seconds: Some(self.lease_duration_seconds),
            acquire_time: self.acquire_time.clone(),
            renew_time: self.renew_time.clone(),
            lease_transitions: Some(self.transitions),
            ..LeaseSpec::default()
        }
    }
}

/// The last record this elector saw or wrote, and when (on the local monotonic clock) it
/// last changed.
#[derive(Clone, Debug)]
struct Observed {
    record: Record,
    at: Instant,
}

impl Observed {
    /// Whether the observed lease is still valid at `now`: less than its
    /// `leaseDurationSeconds` since it was seen to change.
    fn valid(&self, now: Instant) -> bool {
        let duration =
            Duration::from_secs(u64::try_from(self.record.lease_duration_seconds).unwrap_or(0));
        now < self.at + duration
    }
}

/// Remembers `record`, resetting the observation time only if it changed.
fn observe(observed: &mut Option<Observed>, record: Record, now: Instant) {
    match observed {
        Some(o) if o.record == record => {}
        _ => *observed = Some(Observed { record, at: now }),
    }
}

/// What one attempt does, once the lease has been read and observed.
#[derive(Debug, PartialEq)]
enum Decision {
    /// Write this record, naming this elector.
    Write(Record),
    /// Another candidate holds a valid lease.
    Held {
        /// Its identity.
        holder: String,
    },
}

/// client-go's decision (`tryAcquireOrRenew`, steps 3–4), given what has been observed.
///
/// `renewing` says whether this elector leads now. A record naming this elector while it
/// does not lead (it lost the lease and competes again, see [`LeaderElector::run`]) is
/// taken as a new term, with a new acquire time and transitions plus one: that term's
/// work must not be mistaken for the lost one's. client-go never meets this case, as its
/// process exits when it loses the lease.
fn decide(
    observed: &Observed,
    now: Instant,
    identity: &str,
    lease_seconds: i32,
    wall: MicroTime,
    renewing: bool,
) -> Decision {
    let current = &observed.record;
    let mine = current.holder == identity;
    if !current.holder.is_empty() && !mine && observed.valid(now) {
        return Decision::Held {
            holder: current.holder.clone(),
        };
    }
    let (acquire_time, transitions) = if mine && renewing {
        (current.acquire_time.clone(), current.transitions)
    } else {
        (Some(wall.clone()), current.transitions.saturating_add(1))
    };
    Decision::Write(Record {
        holder: identity.to_owned(),
        lease_duration_seconds: lease_seconds,
        acquire_time,
        renew_time: Some(wall),
        transitions,
    })
}

// === lease I/O ===

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Reading and writing the one Lease: the API server, or a scripted fake in tests.
trait LeaseStore: Send + Sync {
    /// The lease, or `None` if it does not exist.
    fn get(&self) -> BoxFuture<'_, client::Result<Option<Lease>>>;
    /// Creates the lease.
    fn create(&self, lease: Lease) -> BoxFuture<'_, client::Result<Lease>>;
    /// Replaces the lease at the `resourceVersion` it carries.
    fn replace(&self, lease: Lease) -> BoxFuture<'_, client::Result<Lease>>;
    /// Completes when the lease changes after `version` (at once if it has already), with
    /// the lease as it is now (`None`: deleted, or not known), or never if the store cannot
    /// tell; an error if it cannot watch.
    fn changed(&self, version: Option<String>) -> BoxFuture<'_, client::Result<Option<Lease>>>;
}

struct ApiStore {
    api: Api<Lease>,
    name: String,
}

impl LeaseStore for ApiStore {
    fn get(&self) -> BoxFuture<'_, client::Result<Option<Lease>>> {
        Box::pin(self.api.get_opt(&self.name))
    }

    fn create(&self, lease: Lease) -> BoxFuture<'_, client::Result<Lease>> {
        Box::pin(async move { self.api.create(&PostParams::default(), &lease).await })
    }

    fn replace(&self, lease: Lease) -> BoxFuture<'_, client::Result<Lease>> {
        Box::pin(async move {
            self.api
                .replace(&self.name, &PostParams::default(), &lease)
                .await
        })
    }

    /// A watch of this one lease from `version`: its first change (a bookmark is none).
    fn changed(&self, version: Option<String>) -> BoxFuture<'_, client::Result<Option<Lease>>> {
        Box::pin(async move {
            let params = WatchParams {
                selector: Selector {
                    fields: Some(format!("metadata.name={}", self.name)),
                    ..Selector::default()
                },
                resource_version: version,
                ..WatchParams::default()
            };
            let mut events = self.api.watch(&params).await?;
            loop {
                match events.next().await {
                    Some(Ok(WatchEvent::Bookmark(_))) => {}
                    Some(Ok(WatchEvent::Added(lease) | WatchEvent::Modified(lease))) => {
                        return Ok(Some(lease));
                    }
                    Some(Ok(WatchEvent::Deleted(_))) => return Ok(None),
                    Some(Err(e)) => return Err(e),
                    // Ended by the server: the retry period goes on.
                    None => std::future::pending::<()>().await,
                }
            }
        })
    }
}

// === LeaderElector ===

/// One candidate for one lease. See the [module docs](self) for the algorithm.
pub struct LeaderElector {
    config: LeaderElectionConfig,
    store: Box<dyn LeaseStore>,
    state: Mutex<State>,
    leading: watch::Sender<bool>,
    status: Option<LeaderStatus>,
    running: AtomicBool,
    /// Set by [`keep_lease`](LeaderElector::keep_lease): no release on shutdown.
    keep_lease: AtomicBool,
}

/// What the elector knows; never held across an await.
#[derive(Default)]
struct State {
    observed: Option<Observed>,
    /// The lease as last read or written: its metadata (`resourceVersion`) is what the next
    /// write is conditioned on.
    lease: Option<Lease>,
    /// The holder last logged, so each change of leader is logged once.
    reported_leader: String,
}

/// How one attempt ended.
#[derive(Debug, PartialEq)]
enum Attempt {
    /// This elector holds the lease now.
    Led,
    /// Another candidate does.
    HeldBy(String),
    /// A request failed; try again later.
    Failed,
}

impl std::fmt::Debug for LeaderElector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderElector")
            .field("config", &self.config)
            .field("leading", &*self.leading.borrow())
            .finish_non_exhaustive()
    }
}

impl LeaderElector {
    /// An elector for `config.namespace/config.lease_name` talking through `client`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] unless, as client-go requires, `lease_duration >
    /// renew_deadline > retry_period × 1.2`, all positive, with `lease_duration` at least
    /// 1 s (the lease holds whole seconds) and a non-empty lease name, namespace and identity.
    pub fn new(client: Client, config: LeaderElectionConfig) -> Result<Self, Error> {
        let store = ApiStore {
            api: Api::namespaced(client, &config.namespace),
            name: config.lease_name.clone(),
        };
        Self::with_store(Box::new(store), config)
    }

    fn with_store(store: Box<dyn LeaseStore>, config: LeaderElectionConfig) -> Result<Self, Error> {
        config.validate()?;
        Ok(LeaderElector {
            config,
            store,
            state: Mutex::new(State::default()),
            leading: watch::Sender::new(false),
            status: None,
            running: AtomicBool::new(false),
            keep_lease: AtomicBool::new(false),
        })
    }

    /// Reports leadership on `status` (`leader_election_master_status`), which is set to 0
    /// now.
    pub fn with_status(mut self, status: LeaderStatus) -> Self {
        status.set(*self.leading.borrow());
        self.status = Some(status);
        self
    }

    /// Keeps the lease when `run`'s shutdown completes, even with `release_on_cancel`: for
    /// a caller that could not stop everything the lease guards (the manager, when its
    /// graceful shutdown timeout is zero and reconciles may still run). The others then
    /// take over after `lease_duration`, as after a crash.
    pub fn keep_lease(&self) {
        self.keep_lease.store(true, Ordering::Release);
    }

    /// A receiver that reads `true` while this elector leads.
    pub fn leading(&self) -> watch::Receiver<bool> {
        self.leading.subscribe()
    }

    /// This candidate's identity.
    pub fn identity(&self) -> &str {
        &self.config.identity
    }

    /// The configuration.
    pub fn config(&self) -> &LeaderElectionConfig {
        &self.config
    }

    /// The holder last observed (empty before the first read, or when the lease is
    /// released): client-go's `GetLeader`.
    pub fn leader(&self) -> String {
        let state = self.state.lock();
        state
            .observed
            .as_ref()
            .map(|o| o.record.holder.clone())
            .unwrap_or_default()
    }

    /// When the holder last observed acquired the lease (its `acquireTime`), if the lease
    /// says.
    pub fn acquired_at(&self) -> Option<std::time::SystemTime> {
        let state = self.state.lock();
        let observed = state.observed.as_ref()?;
        let at = observed.record.acquire_time.as_ref()?;
        let millis = u64::try_from(at.0.as_millisecond()).ok()?;
        Some(std::time::UNIX_EPOCH + Duration::from_millis(millis))
    }

    /// The lease's `leaseTransitions` as last read or written: while this elector leads, the
    /// number of its term, which no other term of the same lease shares. Logs and audits
    /// tell leaders apart by it.
    pub fn term(&self) -> i32 {
        let state = self.state.lock();
        state.observed.as_ref().map_or(0, |o| o.record.transitions)
    }

    /// `namespace/name`, for logs and errors.
    fn describe(&self) -> String {
        format!("{}/{}", self.config.namespace, self.config.lease_name)
    }

    /// Tries to acquire the lease until this elector leads or `shutdown` completes; then
    /// renews it every `retry_period` until `shutdown` completes or leadership is lost.
    /// [`leading`](Self::leading) reads `true` in between.
    ///
    /// Returns `Ok(())` when `shutdown` completed, after releasing the lease if
    /// `release_on_cancel` is set and this elector held it.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when no renewal succeeded for `renew_deadline` or another candidate
    /// took the lease: stop everything the lease guards and exit.
    /// [`Error::AlreadyRunning`] if another `run` of this elector is in progress.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops campaigning without releasing the lease; the others take
    /// it over after `lease_duration`. [`leading`](Self::leading) is set back to `false`.
    pub async fn run(&self, shutdown: impl Future<Output = ()>) -> Result<(), Error> {
        if self.running.swap(true, Ordering::AcqRel) {
            return Err(Error::AlreadyRunning(self.describe()));
        }
        let _running = ResetOnDrop(self);
        let mut shutdown = std::pin::pin!(shutdown);
        let desc = self.describe();

        tracing::info!(lease = %desc, identity = %self.config.identity, "attempting to acquire leader lease");
        // The lease as a watch event just delivered it: the next attempt need not read it.
        let mut seen: Option<Lease> = None;
        let mut valid_until = loop {
            let sent = Instant::now();
            let attempt = tokio::select! {
                () = &mut shutdown => return Ok(()),
                a = self.try_acquire_or_renew_from(false, seen.take()) => a,
            };
            self.report_transition();
            if attempt == Attempt::Led {
                break sent + self.config.renew_deadline;
            }
            let (wake, version) = self.next_attempt();
            let changed = async {
                match self.store.changed(version).await {
                    Ok(lease) => lease,
                    Err(e) => {
                        // Without a watch (no RBAC for it, say), the polling goes on.
                        tracing::debug!(lease = %desc, error = %e, "cannot watch the lease; polling it");
                        std::future::pending().await
                    }
                }
            };
            tokio::select! {
                () = &mut shutdown => return Ok(()),
                () = tokio::time::sleep_until(wake) => {}
                lease = changed => seen = lease,
            }
        };
        let term = self.term();
        tracing::info!(lease = %desc, identity = %self.config.identity, term, "successfully acquired lease");
        self.set_leading(true);

        let lost = loop {
            let renewed = tokio::select! {
                () = &mut shutdown => break None,
                r = self.renew(valid_until) => r,
            };
            self.report_transition();
            match renewed {
                Ok(until) => valid_until = until,
                Err(reason) => break Some(reason),
            }
            tokio::select! {
                () = &mut shutdown => break None,
                () = tokio::time::sleep(self.config.retry_period) => {}
            }
        };
        self.set_leading(false);
        match lost {
            None => {
                if self.config.release_on_cancel && !self.keep_lease.load(Ordering::Acquire) {
                    self.release().await;
                }
                tracing::info!(lease = %desc, term, "stopped leading");
                Ok(())
            }
            Some(reason) => {
                tracing::error!(lease = %desc, term, %reason, "leader election lost");
                Err(Error::Lost {
                    lease: desc,
                    reason,
                })
            }
        }
    }

    /// When the next attempt to acquire is due, and the lease's `resourceVersion` as last
    /// read, from which a watch reports the next change: the jittered retry period, or
    /// sooner the moment the observed holder's lease expires.
    fn next_attempt(&self) -> (Instant, Option<String>) {
        let now = Instant::now();
        let mut wake = now + jittered(self.config.retry_period);
        let state = self.state.lock();
        if let Some(o) = &state.observed
            && !o.record.holder.is_empty()
        {
            let seconds = u64::try_from(o.record.lease_duration_seconds).unwrap_or(0);
            wake = wake.min((o.at + Duration::from_secs(seconds)).max(now));
        }
        let version = state
            .lease
            .as_ref()
            .and_then(|l| l.metadata.resource_version.clone());
        (wake, version)
    }

    /// One renewal: attempts every `retry_period` until one succeeds or `valid_until` has
    /// come, and returns until when the renewal it made keeps this elector leading: the
    /// moment its request was *sent* plus `renew_deadline`. The server wrote the renewal
    /// after that moment, so every other candidate observed it later still, and waits
    /// `lease_duration` from its observation before it takes over: this elector stops
    /// leading at least `lease_duration - renew_deadline` before anyone else can lead
    /// (the margin for the clocks' rates and for the last requests in flight).
    async fn renew(&self, valid_until: Instant) -> Result<Instant, String> {
        let deadline = valid_until;
        loop {
            let sent = Instant::now();
            match tokio::time::timeout_at(deadline, self.try_acquire_or_renew(true)).await {
                Ok(Attempt::Led) => return Ok(sent + self.config.renew_deadline),
                Ok(Attempt::HeldBy(holder)) => {
                    return Err(format!("the lease is held by {holder:?}"));
                }
                Ok(Attempt::Failed) => {}
                Err(_) => break,
            }
            let next = Instant::now() + self.config.retry_period;
            if next >= deadline {
                tokio::time::sleep_until(deadline).await;
                break;
            }
            tokio::time::sleep_until(next).await;
        }
        Err(format!(
            "failed to renew the lease within the renew deadline ({:?}) of the last renewal",
            self.config.renew_deadline
        ))
    }

    /// One attempt to acquire or renew (client-go's `tryAcquireOrRenew`). With `renewing`,
    /// a lease read naming anyone else means leadership is gone.
    async fn try_acquire_or_renew(&self, renewing: bool) -> Attempt {
        self.try_acquire_or_renew_from(renewing, None).await
    }

    /// [`try_acquire_or_renew`](Self::try_acquire_or_renew), starting from `known`, the
    /// lease as a watch delivered it just now, instead of reading it.
    async fn try_acquire_or_renew_from(&self, renewing: bool, known: Option<Lease>) -> Attempt {
        let identity = self.config.identity.as_str();
        let lease_seconds = self.config.lease_seconds();
        let desc = self.describe();

        // 1. Fast path: renew the lease we wrote last, if it is ours and still valid.
        let fast = {
            let state = self.state.lock();
            match (&state.observed, &state.lease) {
                (Some(o), Some(lease))
                    if renewing && o.record.holder == identity && o.valid(Instant::now()) =>
                {
                    let record = Record {
                        renew_time: Some(micro_now()),
                        lease_duration_seconds: lease_seconds,
                        ..o.record.clone()
                    };
                    let mut lease = lease.clone();
                    lease.spec = Some(record.to_spec());
                    Some((record, lease))
                }
                _ => None,
            }
        };
        if let Some((record, lease)) = fast {
            match self.request(self.store.replace(lease)).await {
                Ok(written) => {
                    self.wrote(record, written);
                    return Attempt::Led;
                }
                Err(e) => {
                    tracing::warn!(lease = %desc, error = %e, "failed to update lease optimistically, falling back to slow path");
                }
            }
        }

        // 2. Read (unless a watch just delivered it), or create if absent.
        let current = match known {
            Some(known) => Some(known),
            None => match self.request(self.store.get()).await {
                Ok(current) => current,
                Err(e) => {
                    tracing::warn!(lease = %desc, error = %e, "error retrieving lease");
                    return Attempt::Failed;
                }
            },
        };
        let now = Instant::now();
        let Some(current) = current else {
            let wall = micro_now();
            let record = Record {
                holder: identity.to_owned(),
                lease_duration_seconds: lease_seconds,
                acquire_time: Some(wall.clone()),
                renew_time: Some(wall),
                transitions: 0,
            };
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.lease_name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(record.to_spec()),
            };
            return match self.request(self.store.create(lease)).await {
                Ok(written) => {
                    self.wrote(record, written);
                    Attempt::Led
                }
                Err(e) => {
                    tracing::warn!(lease = %desc, error = %e, "error initially creating lease");
                    Attempt::Failed
                }
            };
        };

        // 3. Observe, 4. decide.
        let record = Record::from_spec(current.spec.as_ref());
        if renewing && record.holder != identity {
            let holder = record.holder.clone();
            let mut state = self.state.lock();
            observe(&mut state.observed, record, now);
            state.lease = Some(current);
            return Attempt::HeldBy(holder);
        }
        let decision = {
            let mut state = self.state.lock();
            observe(&mut state.observed, record, now);
            state.lease = Some(current.clone());
            let observed = state.observed.as_ref().expect("just observed");
            decide(
                observed,
                now,
                identity,
                lease_seconds,
                micro_now(),
                renewing,
            )
        };
        let record = match decision {
            Decision::Held { holder } => {
                tracing::debug!(lease = %desc, %holder, "lease is held by another candidate and has not yet expired");
                return Attempt::HeldBy(holder);
            }
            Decision::Write(record) => record,
        };

        // 5. Write, conditioned on the resourceVersion just read.
        let mut lease = current;
        lease.spec = Some(record.to_spec());
        match self.request(self.store.replace(lease)).await {
            Ok(written) => {
                self.wrote(record, written);
                Attempt::Led
            }
            Err(e) => {
                tracing::warn!(lease = %desc, error = %e, "failed to update lease");
                Attempt::Failed
            }
        }
    }

    /// Gives the lease up if this elector holds it (client-go's `release`): empty holder,
    /// `leaseDurationSeconds: 1`. A conflict (a renewal whose answer was lost to shutdown
    /// may have moved the `resourceVersion`) reads the lease and tries once more.
    async fn release(&self) -> bool {
        let desc = self.describe();
        let identity = self.config.identity.as_str();
        let (record, lease) = {
            let state = self.state.lock();
            match (&state.observed, &state.lease) {
                (Some(o), Some(lease)) if o.record.holder == identity => {
                    let wall = micro_now();
                    let record = Record {
                        holder: String::new(),
                        lease_duration_seconds: 1,
                        acquire_time: Some(wall.clone()),
                        renew_time: Some(wall),
                        transitions: o.record.transitions,
                    };
                    (record, lease.clone())
                }
                _ => return true,
            }
        };
        let mut attempt = lease;
        for tries_left in (0..2).rev() {
            attempt.spec = Some(record.to_spec());
            match self.request(self.store.replace(attempt.clone())).await {
                Ok(written) => {
                    self.wrote(record, written);
                    tracing::info!(lease = %desc, "released lease");
                    return true;
                }
                Err(e) if e.is_conflict() && tries_left > 0 => {
                    match self.request(self.store.get()).await {
                        Ok(Some(current))
                            if Record::from_spec(current.spec.as_ref()).holder == identity =>
                        {
                            attempt = current;
                        }
                        Ok(_) => return true,
                        Err(e) => {
                            tracing::error!(lease = %desc, error = %e, "failed to release lease");
                            return false;
                        }
                    }
                }
                Err(e) => {
                    tracing::error!(lease = %desc, error = %e, "failed to release lease");
                    return false;
                }
            }
        }
        false
    }

    /// Bounds one lease request by the leader-election request timeout.
    async fn request<T>(&self, fut: BoxFuture<'_, client::Result<T>>) -> client::Result<T> {
        let after = self.config.request_timeout();
        match tokio::time::timeout(after, fut).await {
            Ok(r) => r,
            Err(_) => Err(client::Error::Timeout {
                url: format!("lease {}", self.describe()),
                after,
            }),
        }
    }

    /// Remembers a successful write: the record as observed now, and the lease as the
    /// server returned it (its new `resourceVersion`).
    fn wrote(&self, record: Record, written: Lease) {
        let mut state = self.state.lock();
        state.observed = Some(Observed {
            record,
            at: Instant::now(),
        });
        state.lease = Some(written);
    }

    /// Logs a change of the observed holder once (client-go's `OnNewLeader`).
    fn report_transition(&self) {
        let mut state = self.state.lock();
        let holder = state
            .observed
            .as_ref()
            .map(|o| o.record.holder.clone())
            .unwrap_or_default();
        if holder != state.reported_leader {
            tracing::info!(lease = %self.describe(), leader = %holder, "new leader observed");
            state.reported_leader = holder;
        }
    }

    fn set_leading(&self, leading: bool) {
        self.leading.send_replace(leading);
        if let Some(status) = &self.status {
            status.set(leading);
        }
    }
}

/// Marks the elector not running and not leading when `run` ends, however it ends.
struct ResetOnDrop<'a>(&'a LeaderElector);

impl Drop for ResetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.set_leading(false);
        self.0.running.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::Status;
    use crate::runtime::metrics::Metrics;
    use std::sync::Arc;

    fn config(identity: &str) -> LeaderElectionConfig {
        LeaderElectionConfig {
            identity: identity.to_owned(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            ..LeaderElectionConfig::new("lock", "ns")
        }
    }

    fn api_error(code: i32, reason: &str) -> client::Error {
        client::Error::Api(Box::new(Status {
            code: Some(code),
            reason: Some(reason.to_owned()),
            ..Status::default()
        }))
    }

    /// An in-memory lease with resourceVersions, conflicts, a switch that fails every
    /// request, and a log of the verbs called.
    #[derive(Default)]
    struct Fake {
        inner: parking_lot::Mutex<FakeState>,
        /// Woken on every write, for [`LeaseStore::changed`].
        changes: tokio::sync::Notify,
    }

    #[derive(Default)]
    struct FakeState {
        lease: Option<Lease>,
        version: u64,
        failing: bool,
        /// Every request waits forever.
        hanging: bool,
        calls: Vec<&'static str>,
    }

    impl Fake {
        fn record(&self) -> Option<Record> {
            let s = self.inner.lock();
            s.lease.as_ref().map(|l| Record::from_spec(l.spec.as_ref()))
        }

        fn set_failing(&self, failing: bool) {
            self.inner.lock().failing = failing;
        }

        fn set_hanging(&self, hanging: bool) {
            self.inner.lock().hanging = hanging;
        }

        fn calls(&self) -> Vec<&'static str> {
            std::mem::take(&mut self.inner.lock().calls)
        }

        /// Writes `record` as another client would (a new resourceVersion).
        fn overwrite(&self, record: &Record) {
            let mut s = self.inner.lock();
            s.version += 1;
            let version = s.version.to_string();
            let lease = s.lease.get_or_insert_with(Lease::default);
            lease.metadata.resource_version = Some(version);
            lease.spec = Some(record.to_spec());
            drop(s);
            self.changes.notify_waiters();
        }

        fn store(self: &Arc<Self>) -> Box<dyn LeaseStore> {
            Box::new(SharedFake(self.clone()))
        }
    }

    struct SharedFake(Arc<Fake>);

    impl LeaseStore for SharedFake {
        fn get(&self) -> BoxFuture<'_, client::Result<Option<Lease>>> {
            let mut s = self.0.inner.lock();
            s.calls.push("get");
            let r = if s.failing {
                Err(api_error(500, "InternalError"))
            } else {
                Ok(s.lease.clone())
            };
            let hang = s.hanging;
            drop(s);
            Box::pin(async move {
                if hang {
                    std::future::pending::<()>().await;
                }
                r
            })
        }

        fn create(&self, mut lease: Lease) -> BoxFuture<'_, client::Result<Lease>> {
            let mut s = self.0.inner.lock();
            s.calls.push("create");
            let r = if s.failing {
                Err(api_error(500, "InternalError"))
            } else if s.lease.is_some() {
                Err(api_error(409, "AlreadyExists"))
            } else {
                s.version += 1;
                lease.metadata.resource_version = Some(s.version.to_string());
                s.lease = Some(lease.clone());
                self.0.changes.notify_waiters();
                Ok(lease)
            };
            let hang = s.hanging;
            drop(s);
            Box::pin(async move {
                if hang {
                    std::future::pending::<()>().await;
                }
                r
            })
        }

        fn replace(&self, mut lease: Lease) -> BoxFuture<'_, client::Result<Lease>> {
            let mut s = self.0.inner.lock();
            s.calls.push("replace");
            let stored = s
                .lease
                .as_ref()
                .and_then(|l| l.metadata.resource_version.clone());
            let r = if s.failing {
                Err(api_error(500, "InternalError"))
            } else if stored.is_none() {
                Err(api_error(404, "NotFound"))
            } else if lease.metadata.resource_version != stored {
                Err(api_error(409, "Conflict"))
            } else {
                s.version += 1;
                lease.metadata.resource_version = Some(s.version.to_string());
                s.lease = Some(lease.clone());
                self.0.changes.notify_waiters();
                Ok(lease)
            };
            let hang = s.hanging;
            drop(s);
            Box::pin(async move {
                if hang {
                    std::future::pending::<()>().await;
                }
                r
            })
        }

        fn changed(&self, version: Option<String>) -> BoxFuture<'_, client::Result<Option<Lease>>> {
            let fake = self.0.clone();
            Box::pin(async move {
                loop {
                    let notified = fake.changes.notified();
                    let current = fake.inner.lock().lease.clone();
                    let current_version = current
                        .as_ref()
                        .and_then(|l| l.metadata.resource_version.clone());
                    if current_version != version {
                        fake.inner.lock().calls.push("changed");
                        return Ok(current);
                    }
                    notified.await;
                }
            })
        }
    }

    fn elector(fake: &Arc<Fake>, config: LeaderElectionConfig) -> Arc<LeaderElector> {
        Arc::new(LeaderElector::with_store(fake.store(), config).unwrap())
    }

    /// Runs `elector` in a task until the returned sender is dropped or fires.
    fn spawn_run(
        elector: &Arc<LeaderElector>,
    ) -> (
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<Result<(), Error>>,
    ) {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let e = elector.clone();
        let task = tokio::spawn(async move {
            e.run(async {
                let _ = rx.await;
            })
            .await
        });
        (tx, task)
    }

    async fn until_leading(elector: &LeaderElector, leading: bool) {
        let mut rx = elector.leading();
        rx.wait_for(|l| *l == leading).await.unwrap();
    }

    fn wall(secs: i64) -> MicroTime {
        MicroTime(Timestamp::from_second(secs).unwrap())
    }

    // --- the pure decision ---

    #[test]
    fn a_valid_lease_of_another_holder_is_respected() {
        let start = Instant::now();
        let observed = Observed {
            record: Record {
                holder: "other".into(),
                lease_duration_seconds: 15,
                transitions: 3,
                ..Record::default()
            },
            at: start,
        };
        let now = start + Duration::from_secs(14);
        assert_eq!(
            decide(&observed, now, "me", 15, wall(100), false),
            Decision::Held {
                holder: "other".into()
            }
        );
        // Expired after the *record's* duration from the local observation.
        let now = start + Duration::from_secs(15);
        assert_eq!(
            decide(&observed, now, "me", 10, wall(100), false),
            Decision::Write(Record {
                holder: "me".into(),
                lease_duration_seconds: 10,
                acquire_time: Some(wall(100)),
                renew_time: Some(wall(100)),
                transitions: 4,
            })
        );
    }

    #[test]
    fn a_released_lease_is_taken_at_once_as_a_transition() {
        let start = Instant::now();
        let observed = Observed {
            record: Record {
                holder: String::new(),
                lease_duration_seconds: 1,
                transitions: 7,
                ..Record::default()
            },
            at: start,
        };
        match decide(&observed, start, "me", 15, wall(5), false) {
            Decision::Write(r) => {
                assert_eq!(r.holder, "me");
                assert_eq!(r.transitions, 8);
                assert_eq!(r.acquire_time, Some(wall(5)));
            }
            d => panic!("{d:?}"),
        }
    }

    #[test]
    fn renewing_keeps_acquire_time_and_transitions() {
        let start = Instant::now();
        let observed = Observed {
            record: Record {
                holder: "me".into(),
                lease_duration_seconds: 15,
                acquire_time: Some(wall(1)),
                renew_time: Some(wall(2)),
                transitions: 2,
            },
            at: start,
        };
        assert_eq!(
            decide(
                &observed,
                start + Duration::from_secs(1),
                "me",
                15,
                wall(9),
                true
            ),
            Decision::Write(Record {
                holder: "me".into(),
                lease_duration_seconds: 15,
                acquire_time: Some(wall(1)),
                renew_time: Some(wall(9)),
                transitions: 2,
            })
        );
    }

    #[test]
    fn observation_time_moves_only_when_the_record_changes() {
        let t0 = Instant::now();
        let record = Record {
            holder: "other".into(),
            lease_duration_seconds: 15,
            renew_time: Some(wall(1)),
            ..Record::default()
        };
        let mut observed = None;
        observe(&mut observed, record.clone(), t0);
        observe(&mut observed, record.clone(), t0 + Duration::from_secs(10));
        assert_eq!(observed.as_ref().unwrap().at, t0);
        let renewed = Record {
            renew_time: Some(wall(2)),
            ..record
        };
        observe(&mut observed, renewed, t0 + Duration::from_secs(12));
        assert_eq!(observed.unwrap().at, t0 + Duration::from_secs(12));
    }

    #[test]
    fn configuration_is_validated_as_client_go_does() {
        let ok = config("me");
        assert!(ok.validate().is_ok());
        let cases = [
            LeaderElectionConfig {
                renew_deadline: Duration::from_secs(15),
                ..config("me")
            },
            LeaderElectionConfig {
                retry_period: Duration::from_millis(8400),
                ..config("me")
            },
            LeaderElectionConfig {
                retry_period: Duration::ZERO,
                ..config("me")
            },
            LeaderElectionConfig {
                lease_duration: Duration::from_millis(900),
                renew_deadline: Duration::from_millis(800),
                retry_period: Duration::from_millis(100),
                ..config("me")
            },
            config(""),
            LeaderElectionConfig {
                lease_name: String::new(),
                ..config("me")
            },
        ];
        for c in cases {
            assert!(
                matches!(c.validate(), Err(Error::InvalidConfig(_))),
                "{c:?}"
            );
        }
        assert_eq!(config("me").request_timeout(), Duration::from_secs(5));
    }

    #[test]
    fn default_identity_is_hostname_and_a_uuid() {
        let a = LeaderElectionConfig::new("l", "n").identity;
        let b = LeaderElectionConfig::new("l", "n").identity;
        assert_ne!(a, b);
        let (host, uuid) = a.rsplit_once('_').unwrap();
        assert!(!host.is_empty());
        assert_eq!(uuid.len(), 36);
        assert_eq!(uuid.as_bytes()[14], b'4');
    }

    #[test]
    fn jitter_stays_within_client_go_bounds() {
        let period = Duration::from_secs(2);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..1000 {
            let d = jittered(period);
            assert!(
                d >= period && d < period.mul_f64(1.0 + JITTER_FACTOR),
                "{d:?}"
            );
            seen.insert(d);
        }
        assert!(seen.len() > 900, "jitter repeats: {} distinct", seen.len());
    }

    // --- the elector against a scripted lease ---

    #[tokio::test(start_paused = true)]
    async fn creates_an_absent_lease_and_renews_on_the_fast_path() {
        let fake = Arc::new(Fake::default());
        let metrics = Metrics::new();
        let status = metrics.leader_status("lock");
        let e = Arc::new(
            LeaderElector::with_store(fake.store(), config("me"))
                .unwrap()
                .with_status(status.clone()),
        );
        let (stop, task) = spawn_run(&e);
        until_leading(&e, true).await;
        assert!(status.get());
        let r = fake.record().unwrap();
        assert_eq!(r.holder, "me");
        assert_eq!(r.lease_duration_seconds, 15);
        assert_eq!(r.transitions, 0);
        // Leading begins with a renewal, as client-go's renew loop starts at once.
        assert_eq!(fake.calls(), vec!["get", "create", "replace"]);

        // Renewals every retry period, each a single replace with no read.
        tokio::time::sleep(Duration::from_millis(4100)).await;
        assert_eq!(fake.calls(), vec!["replace", "replace"]);
        assert_ne!(fake.record().unwrap().renew_time, None);
        let renewed = fake.record().unwrap();
        assert_eq!(renewed.acquire_time, r.acquire_time);
        assert_eq!(renewed.transitions, 0);

        stop.send(()).unwrap();
        task.await.unwrap().unwrap();
        assert!(!*e.leading().borrow());
        assert!(!status.get());
        // Released by default: nobody holds the lease.
        assert_eq!(fake.record().unwrap().holder, "");
    }

    #[tokio::test(start_paused = true)]
    async fn takeover_waits_a_full_lease_duration_from_the_local_observation() {
        let fake = Arc::new(Fake::default());
        // Another holder's record, with a renew time far in the past: remote times are not
        // trusted, only the local observation of a change is.
        fake.overwrite(&Record {
            holder: "other".into(),
            lease_duration_seconds: 15,
            acquire_time: Some(wall(0)),
            renew_time: Some(wall(0)),
            transitions: 5,
        });
        let e = elector(&fake, config("me"));
        let began = Instant::now();
        let (_stop, _task) = spawn_run(&e);
        until_leading(&e, true).await;
        let waited = began.elapsed();
        assert!(waited >= Duration::from_secs(15), "{waited:?}");
        // At most one jittered retry period (< 2.2 × 2 s) after expiry.
        assert!(waited < Duration::from_millis(15_000 + 4_400), "{waited:?}");
        let r = fake.record().unwrap();
        assert_eq!(r.holder, "me");
        assert_eq!(r.transitions, 6);
    }

    #[tokio::test(start_paused = true)]
    async fn a_holder_that_keeps_renewing_keeps_the_lease() {
        let fake = Arc::new(Fake::default());
        let other = |n: i64| Record {
            holder: "other".into(),
            lease_duration_seconds: 15,
            renew_time: Some(wall(n)),
            ..Record::default()
        };
        fake.overwrite(&other(0));
        let e = elector(&fake, config("me"));
        let (_stop, _task) = spawn_run(&e);
        for n in 1..=20 {
            tokio::time::sleep(Duration::from_secs(2)).await;
            fake.overwrite(&other(n));
            assert!(!*e.leading().borrow(), "took over a live lease at {n}");
        }
        assert_eq!(e.leader(), "other");
    }

    #[tokio::test(start_paused = true)]
    async fn two_candidates_on_one_lease_elect_exactly_one() {
        let fake = Arc::new(Fake::default());
        let a = elector(&fake, config("a"));
        let b = elector(&fake, config("b"));
        let (_sa, _ta) = spawn_run(&a);
        let (_sb, _tb) = spawn_run(&b);
        tokio::time::sleep(Duration::from_secs(30)).await;
        let leaders = [&a, &b].iter().filter(|e| *e.leading().borrow()).count();
        assert_eq!(leaders, 1);
        let holder = fake.record().unwrap().holder;
        assert!(holder == "a" || holder == "b");
        let (winner, loser) = if holder == "a" { (&a, &b) } else { (&b, &a) };
        assert!(*winner.leading().borrow());
        assert_eq!(loser.leader(), holder);
    }

    #[tokio::test(start_paused = true)]
    async fn failed_renewals_lose_leadership_after_the_renew_deadline() {
        let fake = Arc::new(Fake::default());
        let metrics = Metrics::new();
        let status = metrics.leader_status("lock");
        let e = Arc::new(
            LeaderElector::with_store(fake.store(), config("me"))
                .unwrap()
                .with_status(status.clone()),
        );
        let (_stop, task) = spawn_run(&e);
        until_leading(&e, true).await;
        fake.set_failing(true);
        let failing_since = Instant::now();
        let result = task.await.unwrap();
        let after = failing_since.elapsed();
        assert!(matches!(result, Err(Error::Lost { .. })), "{result:?}");
        // The last successful renewal was sent at most one retry period before the
        // failures began; leadership ends renew_deadline after it was sent.
        assert!(after >= Duration::from_secs(8), "{after:?}");
        assert!(after <= Duration::from_secs(10), "{after:?}");
        assert!(!*e.leading().borrow());
        assert!(!status.get());
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_that_never_answers_ends_leadership_renew_deadline_after_the_last_send() {
        let fake = Arc::new(Fake::default());
        let e = elector(&fake, config("me"));
        let (_stop, task) = spawn_run(&e);
        until_leading(&e, true).await;
        // Every later request hangs: the deadline must not wait for their timeouts.
        let last_write = Instant::now();
        fake.set_hanging(true);
        let result = task.await.unwrap();
        assert!(matches!(result, Err(Error::Lost { .. })), "{result:?}");
        let after = last_write.elapsed();
        assert!(after <= Duration::from_secs(10), "{after:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn an_elector_that_lost_the_lease_runs_again_in_a_new_term() {
        let fake = Arc::new(Fake::default());
        let e = elector(&fake, config("me"));
        let (_stop, task) = spawn_run(&e);
        until_leading(&e, true).await;
        let first = fake.record().unwrap();
        fake.set_failing(true);
        assert!(matches!(task.await.unwrap(), Err(Error::Lost { .. })));
        assert!(!*e.leading().borrow());
        // The lease still names this elector; running again is a new term all the same.
        fake.set_failing(false);
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (_stop, _task) = spawn_run(&e);
        until_leading(&e, true).await;
        let second = fake.record().unwrap();
        assert_eq!(second.holder, "me");
        assert_eq!(second.transitions, first.transitions + 1);
        assert_eq!(e.term(), second.transitions);
        assert_ne!(second.acquire_time, first.acquire_time);
    }

    #[tokio::test(start_paused = true)]
    async fn a_standby_takes_a_released_lease_as_soon_as_it_sees_the_release() {
        let fake = Arc::new(Fake::default());
        let held = Record {
            holder: "other".into(),
            lease_duration_seconds: 15,
            renew_time: Some(wall(1)),
            transitions: 3,
            ..Record::default()
        };
        fake.overwrite(&held);
        let e = elector(&fake, config("me"));
        let (_stop, _task) = spawn_run(&e);
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(!*e.leading().borrow());
        let _ = fake.calls();
        let released = Instant::now();
        fake.overwrite(&Record {
            holder: String::new(),
            lease_duration_seconds: 1,
            ..held
        });
        until_leading(&e, true).await;
        // No retry period waited: the watch woke the standby, and handed it the lease it
        // then wrote without reading it again.
        assert!(released.elapsed() < Duration::from_millis(100));
        assert_eq!(fake.calls()[..2], ["changed", "replace"]);
        assert_eq!(fake.record().unwrap().transitions, 4);
    }

    #[tokio::test(start_paused = true)]
    async fn a_standby_tries_again_the_moment_the_holders_lease_expires() {
        let fake = Arc::new(Fake::default());
        fake.overwrite(&Record {
            holder: "other".into(),
            lease_duration_seconds: 15,
            renew_time: Some(wall(1)),
            ..Record::default()
        });
        let e = elector(&fake, config("me"));
        let began = Instant::now();
        let (_stop, _task) = spawn_run(&e);
        until_leading(&e, true).await;
        // Observed at the first attempt, expired 15 s later: not a jittered retry after.
        assert_eq!(began.elapsed().as_secs(), 15);
    }

    #[tokio::test(start_paused = true)]
    async fn keep_lease_skips_the_release_on_cancel() {
        let fake = Arc::new(Fake::default());
        let e = elector(&fake, config("me"));
        let (stop, task) = spawn_run(&e);
        until_leading(&e, true).await;
        e.keep_lease();
        stop.send(()).unwrap();
        task.await.unwrap().unwrap();
        assert_eq!(fake.record().unwrap().holder, "me");
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_taken_by_another_holder_ends_leadership_at_once() {
        let fake = Arc::new(Fake::default());
        let e = elector(&fake, config("me"));
        let (_stop, task) = spawn_run(&e);
        until_leading(&e, true).await;
        let r = fake.record().unwrap();
        fake.overwrite(&Record {
            holder: "usurper".into(),
            transitions: r.transitions + 1,
            ..r
        });
        let since = Instant::now();
        let result = task.await.unwrap();
        assert!(
            matches!(&result, Err(Error::Lost { reason, .. }) if reason.contains("usurper")),
            "{result:?}"
        );
        // The next renewal (one retry period) noticed.
        assert!(
            since.elapsed() <= Duration::from_secs(2),
            "{:?}",
            since.elapsed()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn release_on_cancel_clears_the_holder_and_shortens_the_lease() {
        let fake = Arc::new(Fake::default());
        let e = elector(
            &fake,
            LeaderElectionConfig {
                release_on_cancel: true,
                ..config("me")
            },
        );
        let (stop, task) = spawn_run(&e);
        until_leading(&e, true).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        stop.send(()).unwrap();
        task.await.unwrap().unwrap();
        let r = fake.record().unwrap();
        assert_eq!(r.holder, "");
        assert_eq!(r.lease_duration_seconds, 1);
        assert_eq!(r.transitions, 0);
        assert_eq!(r.acquire_time, r.renew_time);

        // Another candidate takes the released lease on its first attempt.
        let other = elector(&fake, config("other"));
        let (_s, _t) = spawn_run(&other);
        tokio::time::timeout(Duration::from_millis(10), until_leading(&other, true))
            .await
            .expect("took the released lease at once");
        assert_eq!(fake.record().unwrap().transitions, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn release_after_a_lost_answer_rereads_the_lease() {
        let fake = Arc::new(Fake::default());
        let e = elector(
            &fake,
            LeaderElectionConfig {
                release_on_cancel: true,
                ..config("me")
            },
        );
        let (stop, task) = spawn_run(&e);
        until_leading(&e, true).await;
        // A renewal landed whose answer the elector never saw: same holder, new version.
        let r = fake.record().unwrap();
        fake.overwrite(&r);
        fake.calls();
        stop.send(()).unwrap();
        task.await.unwrap().unwrap();
        assert_eq!(fake.record().unwrap().holder, "");
        assert_eq!(fake.calls(), vec!["replace", "get", "replace"]);
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_before_leading_returns_without_writing() {
        let fake = Arc::new(Fake::default());
        fake.overwrite(&Record {
            holder: "other".into(),
            lease_duration_seconds: 15,
            ..Record::default()
        });
        let e = elector(
            &fake,
            LeaderElectionConfig {
                release_on_cancel: true,
                ..config("me")
            },
        );
        let (stop, task) = spawn_run(&e);
        tokio::time::sleep(Duration::from_secs(5)).await;
        stop.send(()).unwrap();
        task.await.unwrap().unwrap();
        assert_eq!(fake.record().unwrap().holder, "other");
        assert!(!fake.calls().contains(&"replace"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_second_run_at_once_is_refused() {
        let fake = Arc::new(Fake::default());
        let e = elector(&fake, config("me"));
        let (_stop, _task) = spawn_run(&e);
        until_leading(&e, true).await;
        let second = e.run(std::future::ready(())).await;
        assert!(
            matches!(second, Err(Error::AlreadyRunning(_))),
            "{second:?}"
        );
        assert!(*e.leading().borrow());
    }
}
