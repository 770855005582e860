//! Membership and the hand-over protocol: one Lease per replica, the ranges each holds, and
//! the gate ([`Shard::admit`]) every sharded reconcile passes. See the
//! [module docs](super) for the protocol and why no key runs in two replicas at once.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use parking_lot::Mutex;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use super::ranges::{HashRange, Ranges, ShardKey, assigned_to};
use crate::client::{self, Api, Client, DeleteParams, ListParams, PostParams};

/// The label naming the controller set a member Lease belongs to.
pub const SET_LABEL: &str = "shard.controller-runtime.rs/set";
/// The annotation in which a member publishes the ranges it holds ([`Ranges`]' text form).
pub const HOLDS_ANNOTATION: &str = "shard.controller-runtime.rs/holds";
/// The annotation in which a member publishes its term: a number it raises each time its
/// published ranges change.
pub const TERM_ANNOTATION: &str = "shard.controller-runtime.rs/term";

/// Why a shard could not be made or stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The timings or names cannot work; the message says which.
    #[error("invalid sharding configuration: {0}")]
    InvalidConfig(String),
}

/// How a replica takes part in a sharded controller set.
#[derive(Clone, Debug)]
pub struct ShardConfig {
    /// The controller set: every replica of one operator uses the same name. Names the
    /// members' Leases and the label that finds them.
    pub set: String,
    /// The namespace of the members' Leases.
    pub namespace: String,
    /// This replica's identity, unique among the members (the pod name, say).
    pub identity: String,
    /// The field whose hash places an object on a shard.
    pub key: ShardKey,
    /// How long a member's lease lasts without a renewal, as others judge it. Default 15 s.
    pub lease_duration: Duration,
    /// How long after its last successful renewal began a member stops all work, if it
    /// could not renew since. Must be below `lease_duration`; the difference is the time an
    /// in-flight reconcile has to end. Default 10 s.
    pub renew_deadline: Duration,
    /// How often a member renews its lease and looks at the others. Default 2 s.
    pub retry_period: Duration,
}

impl ShardConfig {
    /// A member `identity` of controller set `set`, its Lease in `namespace`, with the
    /// leader-election timings (15 s / 10 s / 2 s).
    pub fn new(
        set: impl Into<String>,
        namespace: impl Into<String>,
        identity: impl Into<String>,
    ) -> Self {
        ShardConfig {
            set: set.into(),
            namespace: namespace.into(),
            identity: identity.into(),
            key: ShardKey::Uid,
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    fn validate(&self) -> Result<(), Error> {
        let bad = |m: &str| Err(Error::InvalidConfig(m.to_owned()));
        if self.set.is_empty() || self.namespace.is_empty() || self.identity.is_empty() {
            return bad("set, namespace and identity must not be empty");
        }
        if self.lease_duration < Duration::from_secs(1) {
            return bad("lease_duration must be at least 1 s (a Lease holds whole seconds)");
        }
        if self.renew_deadline >= self.lease_duration {
            return bad("renew_deadline must be below lease_duration");
        }
        if self.retry_period.is_zero() || self.retry_period.mul_f64(1.2) >= self.renew_deadline {
            return bad("retry_period × 1.2 must be positive and below renew_deadline");
        }
        Ok(())
    }

    /// The member Lease's name: the set and the identity, lowercased, every character a
    /// DNS subdomain does not allow turned into `-`.
    pub fn lease_name(&self) -> String {
        let name = format!("{}-shard-{}", self.set, self.identity);
        let clean: String = name
            .chars()
            .map(|c| match c.to_ascii_lowercase() {
                c @ ('a'..='z' | '0'..='9' | '-' | '.') => c,
                _ => '-',
            })
            .collect();
        let clean = clean.trim_matches(|c: char| !c.is_ascii_alphanumeric());
        clean.chars().take(253).collect()
    }

    /// The set label's value: the set name, cut to 63 characters a label value allows.
    fn set_label(&self) -> String {
        let clean: String = self
            .set
            .chars()
            .map(|c| match c {
                c if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') => c,
                _ => '-',
            })
            .take(63)
            .collect();
        clean
            .trim_matches(|c: char| !c.is_ascii_alphanumeric())
            .to_owned()
    }
}

// === the gate ===

/// What a replica may work on now: its active ranges, the term they were published in, and
/// the instant past which it must stop (its renew deadline).
#[derive(Clone, Debug, PartialEq)]
pub struct Holding {
    /// The ranges whose keys this replica reconciles now.
    pub ranges: Ranges,
    /// The term of the published Lease that holds them.
    pub term: u64,
    /// Raised by one at each change of `ranges`.
    pub generation: u64,
}

/// A live member of the set, as [`Shard::members`] reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct MemberView {
    /// Its identity.
    pub identity: String,
    /// The ranges its Lease says it holds.
    pub ranges: Ranges,
    /// Whether it is this replica.
    pub this: bool,
}

/// Why [`Shard::try_admit`] refused a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// No active range holds the key: another replica's (or nobody's yet).
    NotHeld,
    /// An active range holds it, but the renew deadline passed without a renewal: nothing
    /// is admitted until one succeeds (or the member drops its ranges).
    Fenced,
}

/// A permit to reconcile one key of a held range; the range stays held until it drops.
pub struct Permit {
    shard: Arc<Inner>,
    hash: u64,
    /// The held range the key falls in.
    pub range: HashRange,
    /// The term the range is held in.
    pub term: u64,
}

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("range", &self.range)
            .field("term", &self.term)
            .finish_non_exhaustive()
    }
}

impl Permit {
    /// Completes once this replica can no longer prove it holds the permit's range: its
    /// renew deadline (the fence) has passed without a renewal since. A reconcile still
    /// running then must be dropped: from `lease_duration - renew_deadline` later another
    /// member may start on its key. Never completes while renewals keep succeeding.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads the fence and sleeps.
    pub async fn revoked(&self) {
        loop {
            // The fence only moves later (each successful write), so sleeping until the
            // fence read now and reading it again on waking is enough.
            let fence = self.shard.state.lock().fence;
            match fence {
                Some(fence) if Instant::now() < fence => tokio::time::sleep_until(fence).await,
                _ => return,
            }
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut state = self.shard.state.lock();
        if let Some(count) = state.inflight.get_mut(&self.hash) {
            *count -= 1;
            if *count == 0 {
                state.inflight.remove(&self.hash);
            }
        }
        drop(state);
        self.shard.drained.notify_waiters();
    }
}

/// One replica's membership in a sharded controller set: the gate its controllers' workers
/// pass ([`admit`](Self::admit)) and the loop that keeps its Lease and moves its ranges
/// ([`run`](Self::run)). Cheap to clone.
#[derive(Clone)]
pub struct Shard {
    inner: Arc<Inner>,
}

struct Inner {
    config: ShardConfig,
    registry: Box<dyn Registry>,
    state: Mutex<State>,
    /// The active ranges, for caches and controllers that follow them.
    holding: watch::Sender<Holding>,
    /// Notified when a permit drops.
    drained: Notify,
}

/// What the member knows; never held across an await.
#[derive(Default)]
struct State {
    /// The ranges whose keys may be reconciled now. Invariant: within `published`, and
    /// each was in `published` at a write followed by a list that showed no other live
    /// member holding any of it.
    active: Ranges,
    /// The ranges the Lease says (or will say, at the next write) this member holds.
    published: Ranges,
    term: u64,
    /// The number of changes of `active` so far.
    generation: u64,
    /// Keys in flight, by hash, with their number.
    inflight: HashMap<u64, usize>,
    /// When the last successful write of the Lease began plus the renew deadline: past
    /// it, nothing is admitted. `None` before the first write.
    fence: Option<Instant>,
    /// The own Lease as last written (its resourceVersion conditions the next write).
    own: Option<Lease>,
    /// The other members' Leases as observed, by name.
    observed: BTreeMap<String, Observed>,
}

/// Another member's Lease as observed, with the local time the observation began.
#[derive(Clone, Debug)]
struct Observed {
    resource_version: String,
    /// When this replica first saw this resourceVersion (local monotonic time).
    since: Instant,
    holder: String,
    lease_duration: Duration,
    holds: Ranges,
}

impl Observed {
    fn live(&self, now: Instant) -> bool {
        !self.holder.is_empty() && now < self.since + self.lease_duration
    }
}

impl fmt::Debug for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.inner.state.lock();
        f.debug_struct("Shard")
            .field("identity", &self.inner.config.identity)
            .field("active", &state.active)
            .field("published", &state.published)
            .field("term", &state.term)
            .finish_non_exhaustive()
    }
}

impl Shard {
    /// A member of `config.set` whose Lease lives in `config.namespace`, talking through
    /// `client`. It holds nothing until [`run`](Self::run) acquires ranges.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] unless `lease_duration > renew_deadline > retry_period ×
    /// 1.2 > 0`, `lease_duration ≥ 1 s`, and the names are not empty.
    pub fn new(client: Client, config: ShardConfig) -> Result<Shard, Error> {
        let registry = ApiRegistry {
            api: Api::namespaced(client, &config.namespace),
            selector: format!("{SET_LABEL}={}", config.set_label()),
        };
        Shard::with_registry(Box::new(registry), config)
    }

    fn with_registry(registry: Box<dyn Registry>, config: ShardConfig) -> Result<Shard, Error> {
        config.validate()?;
        Ok(Shard {
            inner: Arc::new(Inner {
                config,
                registry,
                state: Mutex::new(State::default()),
                holding: watch::Sender::new(Holding {
                    ranges: Ranges::none(),
                    term: 0,
                    generation: 0,
                }),
                drained: Notify::new(),
            }),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ShardConfig {
        &self.inner.config
    }

    /// This replica's identity.
    pub fn identity(&self) -> &str {
        &self.inner.config.identity
    }

    /// The field whose hash places an object on a shard.
    pub fn key(&self) -> ShardKey {
        self.inner.config.key
    }

    /// The active ranges and their term, as they change.
    pub fn holding(&self) -> watch::Receiver<Holding> {
        self.inner.holding.subscribe()
    }

    /// Whether `hash` falls in the active ranges now (as [`holding`](Self::holding) last
    /// announced them: what the sharded caches keep).
    pub(crate) fn holds(&self, hash: u64) -> bool {
        self.inner.holding.borrow().ranges.contains(hash)
    }

    /// The live members as this replica last observed them, sorted by identity: each with
    /// the ranges its Lease says it holds (this replica's own: the ranges it publishes).
    pub fn members(&self) -> Vec<MemberView> {
        let now = Instant::now();
        let state = self.inner.state.lock();
        let own = &self.inner.config.identity;
        let mut members: Vec<MemberView> = state
            .observed
            .values()
            .filter(|o| o.live(now) && o.holder != *own)
            .map(|o| MemberView {
                identity: o.holder.clone(),
                ranges: o.holds.clone(),
                this: false,
            })
            .collect();
        members.push(MemberView {
            identity: own.clone(),
            ranges: state.published.clone(),
            this: true,
        });
        members.sort_by(|a, b| a.identity.cmp(&b.identity));
        members
    }

    /// The active ranges now.
    pub fn active(&self) -> Ranges {
        self.inner.state.lock().active.clone()
    }

    /// A permit to reconcile a key whose shard hash is `hash`, if this replica holds its
    /// range now and its renew deadline has not passed; keep it until the reconcile ends.
    /// A range is not given up while a permit in it lives.
    ///
    /// Past the renew deadline nothing is admitted; see [`try_admit`](Self::try_admit) for
    /// why a key was refused.
    pub fn admit(&self, hash: u64) -> Option<Permit> {
        self.try_admit(hash).ok()
    }

    /// As [`admit`](Self::admit), saying why a key is refused.
    ///
    /// # Errors
    ///
    /// [`Refused::NotHeld`] if no active range holds `hash`; [`Refused::Fenced`] if one
    /// does but the renew deadline has passed since the last renewal (the key may be this
    /// replica's again once a renewal succeeds, so it is worth retrying).
    pub fn try_admit(&self, hash: u64) -> Result<Permit, Refused> {
        let mut state = self.inner.state.lock();
        let range = *state
            .active
            .ranges()
            .iter()
            .find(|r| r.contains(hash))
            .ok_or(Refused::NotHeld)?;
        if state.fence.is_none_or(|fence| Instant::now() >= fence) {
            return Err(Refused::Fenced);
        }
        *state.inflight.entry(hash).or_default() += 1;
        let term = state.term;
        drop(state);
        Ok(Permit {
            shard: self.inner.clone(),
            hash,
            range,
            term,
        })
    }

    /// Keeps this member's Lease and moves its ranges until `shutdown` completes; then
    /// stops admitting keys, waits (at most `renew_deadline`) for the keys in flight, and
    /// deletes its Lease so that the others take its ranges at once.
    pub async fn run(&self, shutdown: impl Future<Output = ()>) {
        let inner = &self.inner;
        tokio::pin!(shutdown);
        tracing::info!(
            set = %inner.config.set,
            replica = %inner.config.identity,
            lease = %inner.config.lease_name(),
            "joining the shard set"
        );
        loop {
            let again = tokio::select! {
                biased;
                _ = &mut shutdown => break,
                again = self.tick() => again,
            };
            // A change is written (and, for a claim, verified) at once, after a breath.
            let pause = if again {
                Duration::from_millis(100)
            } else {
                jittered(inner.config.retry_period)
            };
            tokio::select! {
                biased;
                _ = &mut shutdown => break,
                _ = tokio::time::sleep(pause) => {}
            }
        }
        self.leave().await;
    }

    /// Stops admitting, waits for the keys in flight, and deletes the Lease; if a key is
    /// still in flight after `renew_deadline`, leaves the Lease to expire instead.
    async fn leave(&self) {
        let inner = &self.inner;
        self.set_active(Ranges::none());
        let drained = async {
            loop {
                let notified = inner.drained.notified();
                if inner.state.lock().inflight.is_empty() {
                    break;
                }
                notified.await;
            }
        };
        // The fence passes within `renew_deadline` (no write happens from now on), and
        // every permit is revoked then; a reconcile that does not let go (it blocks
        // outside an `.await`) keeps the Lease, which others wait out.
        if tokio::time::timeout(inner.config.renew_deadline, drained)
            .await
            .is_err()
        {
            tracing::warn!(
                replica = %inner.config.identity,
                "keys still in flight after the renew deadline; leaving the shard lease to expire"
            );
            return;
        }
        let name = inner.config.lease_name();
        match self.request(inner.registry.delete(&name)).await {
            Ok(()) => tracing::info!(replica = %inner.config.identity, "left the shard set"),
            Err(error) => {
                tracing::warn!(%error, "could not delete the shard lease; it expires on its own")
            }
        }
    }

    /// Sets the active ranges, announcing them if they changed.
    fn set_active(&self, ranges: Ranges) {
        let mut state = self.inner.state.lock();
        let changed = swap_active(&mut state, &self.inner.config.identity, ranges);
        drop(state);
        self.announce(changed);
    }

    /// Tells the followers of [`holding`](Self::holding) about a change of the active ranges.
    fn announce(&self, changed: Option<Holding>) {
        if let Some(holding) = changed {
            self.inner.holding.send_replace(holding);
        }
    }

    /// One round: write the Lease, list the members, then verify claims, release, claim.
    /// True if the published ranges changed and another round should follow at once.
    async fn tick(&self) -> bool {
        let inner = &self.inner;
        let cfg = &inner.config;
        if !self.write().await {
            return false;
        }
        let leases = match self.request(inner.registry.list()).await {
            Ok(leases) => leases,
            Err(error) => {
                tracing::debug!(%error, "listing the shard set's leases failed");
                return false;
            }
        };
        let now = Instant::now();
        let own_name = cfg.lease_name();
        let mut state = inner.state.lock();
        observe(&mut state.observed, &leases, &own_name, now);
        let mut members: Vec<&str> = vec![cfg.identity.as_str()];
        let mut others = Ranges::none();
        for observed in state.observed.values().filter(|o| o.live(now)) {
            members.push(&observed.holder);
            others = others.union(&observed.holds);
        }
        let desired = assigned_to(&members, &cfg.identity);
        let plan = plan(&state.active, &state.published, &desired, &others, |r| {
            state.inflight.keys().any(|h| r.contains(*h))
        });
        let changed = plan.published != state.published;
        if changed {
            state.published = plan.published;
            state.term += 1;
        }
        // Under the same lock as the check of the keys in flight: no key of a range being
        // given up is admitted between the check and the narrowing.
        let announced = swap_active(&mut state, &cfg.identity, plan.active);
        drop(state);
        if !plan.withdrawn.is_empty() {
            tracing::info!(replica = %cfg.identity, ranges = %plan.withdrawn, "claim met another member's; withdrawn");
        }
        self.announce(announced);
        changed
    }

    /// Writes this member's Lease (renew time, held ranges, term); true if it succeeded.
    async fn write(&self) -> bool {
        let inner = &self.inner;
        let cfg = &inner.config;
        let started = Instant::now();
        let mut fenced = None;
        let lease = {
            let mut state = inner.state.lock();
            // Past the renew deadline, this member may already count as gone to the others,
            // who may take its ranges: it starts over from nothing, and what it writes now
            // holds nothing.
            if state.fence.is_some_and(|fence| started >= fence) && !state.published.is_empty() {
                tracing::warn!(
                    replica = %cfg.identity,
                    "could not renew the shard lease within the renew deadline; dropping every range"
                );
                state.published = Ranges::none();
                state.term += 1;
                fenced = swap_active(&mut state, &cfg.identity, Ranges::none());
            }
            let mut lease = state.own.clone().unwrap_or_else(|| Lease {
                metadata: ObjectMeta {
                    name: Some(cfg.lease_name()),
                    namespace: Some(cfg.namespace.clone()),
                    ..ObjectMeta::default()
                },
                ..Lease::default()
            });
            let labels = lease.metadata.labels.get_or_insert_default();
            labels.insert(SET_LABEL.to_owned(), cfg.set_label());
            let annotations = lease.metadata.annotations.get_or_insert_default();
            annotations.insert(HOLDS_ANNOTATION.to_owned(), state.published.to_string());
            annotations.insert(TERM_ANNOTATION.to_owned(), state.term.to_string());
            let now = micro_now();
            let spec = lease.spec.get_or_insert_default();
            spec.holder_identity = Some(cfg.identity.clone());
            spec.lease_duration_seconds = Some(cfg.lease_duration.as_secs().max(1) as i32);
            spec.acquire_time.get_or_insert_with(|| now.clone());
            spec.renew_time = Some(now);
            lease
        };
        self.announce(fenced);
        let written = if lease.metadata.resource_version.is_some() {
            self.request(inner.registry.replace(lease)).await
        } else {
            match self.request(inner.registry.get(&cfg.lease_name())).await {
                // A Lease of an earlier run of this identity: take its place, after its term.
                Ok(Some(previous)) => {
                    let before: u64 = annotation(&previous, TERM_ANNOTATION)
                        .and_then(|t| t.parse().ok())
                        .unwrap_or(0);
                    {
                        let mut state = inner.state.lock();
                        state.term = state.term.max(before + 1);
                        state.own = Some(previous);
                    }
                    return Box::pin(self.write()).await;
                }
                Ok(None) => self.request(inner.registry.create(lease)).await,
                Err(error) => Err(error),
            }
        };
        let mut state = inner.state.lock();
        match written {
            Ok(lease) => {
                state.own = Some(lease);
                state.fence = Some(started + cfg.renew_deadline);
                true
            }
            Err(error) => {
                if error.is_conflict() || error.is_not_found() {
                    state.own = None;
                }
                tracing::debug!(%error, "writing the shard lease failed");
                false
            }
        }
    }

    /// `request`, bounded by [`request_limit`].
    async fn request<T>(
        &self,
        request: impl Future<Output = client::Result<T>>,
    ) -> client::Result<T> {
        let limit = request_limit(&self.inner.config);
        tokio::time::timeout(limit, request)
            .await
            .unwrap_or_else(|_| {
                Err(client::Error::Build(format!(
                    "shard lease request timed out after {limit:?}"
                )))
            })
    }
}

/// How long one Lease request may take: half the renew deadline (at least 1 s), and no
/// more than `lease_duration - renew_deadline`, so that a renewal that began before the
/// renew deadline ends before any other member can judge the Lease expired.
fn request_limit(config: &ShardConfig) -> Duration {
    let half = (config.renew_deadline / 2).max(Duration::from_secs(1));
    half.min(config.lease_duration - config.renew_deadline)
}

/// Sets `state.active` to `ranges`; what to announce if they changed.
/// Logged here, under the state's lock, so that the line comes before any reconcile the
/// change admits and after any it refuses.
fn swap_active(state: &mut State, identity: &str, ranges: Ranges) -> Option<Holding> {
    if state.active == ranges {
        return None;
    }
    tracing::info!(
        replica = %identity,
        ranges = %ranges,
        share = format!("{:.3}", ranges.share()),
        term = state.term,
        "shard ranges active"
    );
    state.active = ranges.clone();
    state.generation += 1;
    Some(Holding {
        ranges,
        term: state.term,
        generation: state.generation,
    })
}

/// What one round decides, from the ranges active and published, the ranges assigned to
/// this member, and those other live members hold.
#[derive(Debug, PartialEq)]
struct Plan {
    /// The ranges to admit keys in from now on.
    active: Ranges,
    /// The ranges the next write publishes.
    published: Ranges,
    /// Claims given up because another member holds some of their hashes.
    withdrawn: Ranges,
}

/// The protocol's one decision (see the [module docs](super)). `busy(r)`: a key of `r` is
/// in flight. Called right after a successful write of `published` and a list of the
/// members that followed it.
fn plan(
    active: &Ranges,
    published: &Ranges,
    desired: &Ranges,
    others: &Ranges,
    busy: impl Fn(&Ranges) -> bool,
) -> Plan {
    // Claims (published, not yet active) that another live member also holds are
    // withdrawn; each side wrote before it listed, so at least one of two rival claimants
    // sees the other, and whoever sees a rival withdraws.
    let claims = published.subtract(active);
    let withdrawn = claims.intersect(others);
    let mut published = published.subtract(&withdrawn);
    // Verified claims this member still wants become active.
    let verified = claims.subtract(&withdrawn).intersect(desired);
    let mut active = active.union(&verified);
    // Ranges no longer assigned: stop admitting now, unpublish once nothing in them runs.
    let leaving = published.subtract(desired);
    active = active.subtract(&leaving);
    if !leaving.is_empty() && !busy(&leaving) {
        published = published.subtract(&leaving);
    }
    // Ranges assigned and free: claim them; they become active after the next write and
    // list show no rival.
    let free = desired.subtract(&published).subtract(others);
    published = published.union(&free);
    Plan {
        active,
        published,
        withdrawn,
    }
}

/// Notes the other members' Leases in `observed`: a Lease whose resourceVersion changed is
/// observed anew from `now`; a Lease gone is forgotten.
fn observe(observed: &mut BTreeMap<String, Observed>, leases: &[Lease], own: &str, now: Instant) {
    let mut seen = BTreeMap::new();
    for lease in leases {
        let Some(name) = lease.metadata.name.clone() else {
            continue;
        };
        if name == own {
            continue;
        }
        let resource_version = lease.metadata.resource_version.clone().unwrap_or_default();
        let spec = lease.spec.clone().unwrap_or_default();
        let holds = annotation(lease, HOLDS_ANNOTATION)
            .map(|h| {
                h.parse().unwrap_or_else(|error| {
                    // A member whose holdings cannot be read is taken to hold everything:
                    // nothing is taken from it until its Lease expires or changes.
                    tracing::warn!(lease = %name, %error, "unreadable shard holdings");
                    Ranges::all()
                })
            })
            .unwrap_or_default();
        let since = match observed.get(&name) {
            Some(before) if before.resource_version == resource_version => before.since,
            _ => now,
        };
        seen.insert(
            name,
            Observed {
                resource_version,
                since,
                holder: spec.holder_identity.unwrap_or_default(),
                lease_duration: Duration::from_secs(
                    spec.lease_duration_seconds.unwrap_or(0).max(0) as u64,
                ),
                holds,
            },
        );
    }
    *observed = seen;
}

fn annotation<'a>(lease: &'a Lease, key: &str) -> Option<&'a str> {
    lease
        .metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

/// Now, at the microsecond precision a `MicroTime` keeps.
fn micro_now() -> MicroTime {
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
    MicroTime(Timestamp::from_microsecond(micros).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// `period × [1, 1.2)`, so that members started together do not write in step.
fn jittered(period: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(0);
    let fraction = (hasher.finish() % 1000) as f64 / 1000.0;
    period.mul_f64(1.0 + 0.2 * fraction)
}

// === for the controller's tests ===

#[cfg(test)]
impl Shard {
    /// A member that has `active` (published and active) with its fence at `fence`, and
    /// no reachable Lease: nothing moves unless a test moves it.
    pub(crate) fn fixed(identity: &str, active: Ranges, fence: Instant) -> Shard {
        let config = ShardConfig::new("set", "ns", identity);
        let shard = Shard::with_registry(Box::new(Offline), config).unwrap();
        {
            let mut state = shard.inner.state.lock();
            state.published = active.clone();
            state.fence = Some(fence);
        }
        shard.set_active(active);
        shard
    }

    /// Moves the fence, as a successful renewal would.
    pub(crate) fn set_fence(&self, fence: Instant) {
        self.inner.state.lock().fence = Some(fence);
    }

    /// How many keys are in flight (permits alive).
    pub(crate) fn in_flight(&self) -> usize {
        self.inner.state.lock().inflight.values().sum()
    }
}

/// A registry that answers nothing.
#[cfg(test)]
struct Offline;

#[cfg(test)]
impl Registry for Offline {
    fn list(&self) -> BoxFuture<'_, client::Result<Vec<Lease>>> {
        Box::pin(std::future::pending())
    }
    fn get<'a>(&'a self, _: &'a str) -> BoxFuture<'a, client::Result<Option<Lease>>> {
        Box::pin(std::future::pending())
    }
    fn create(&self, _: Lease) -> BoxFuture<'_, client::Result<Lease>> {
        Box::pin(std::future::pending())
    }
    fn replace(&self, _: Lease) -> BoxFuture<'_, client::Result<Lease>> {
        Box::pin(std::future::pending())
    }
    fn delete<'a>(&'a self, _: &'a str) -> BoxFuture<'a, client::Result<()>> {
        Box::pin(std::future::pending())
    }
}

// === lease I/O ===

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The members' Leases: the API server, or an in-memory fake in tests.
trait Registry: Send + Sync {
    /// Every member Lease of the set (a consistent read).
    fn list(&self) -> BoxFuture<'_, client::Result<Vec<Lease>>>;
    fn get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, client::Result<Option<Lease>>>;
    fn create(&self, lease: Lease) -> BoxFuture<'_, client::Result<Lease>>;
    /// Replaces the Lease at the resourceVersion it carries.
    fn replace(&self, lease: Lease) -> BoxFuture<'_, client::Result<Lease>>;
    fn delete<'a>(&'a self, name: &'a str) -> BoxFuture<'a, client::Result<()>>;
}

struct ApiRegistry {
    api: Api<Lease>,
    selector: String,
}

impl Registry for ApiRegistry {
    fn list(&self) -> BoxFuture<'_, client::Result<Vec<Lease>>> {
        Box::pin(async move {
            let params = ListParams::default().labels(&self.selector);
            Ok(self.api.list(&params).await?.items)
        })
    }

    fn get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, client::Result<Option<Lease>>> {
        Box::pin(self.api.get_opt(name))
    }

    fn create(&self, lease: Lease) -> BoxFuture<'_, client::Result<Lease>> {
        Box::pin(async move { self.api.create(&PostParams::default(), &lease).await })
    }

    fn replace(&self, lease: Lease) -> BoxFuture<'_, client::Result<Lease>> {
        Box::pin(async move {
            let name = lease.metadata.name.clone().unwrap_or_default();
            self.api
                .replace(&name, &PostParams::default(), &lease)
                .await
        })
    }

    fn delete<'a>(&'a self, name: &'a str) -> BoxFuture<'a, client::Result<()>> {
        Box::pin(async move {
            match self.api.delete(name, &DeleteParams::default()).await {
                Ok(_) => Ok(()),
                Err(error) if error.is_not_found() => Ok(()),
                Err(error) => Err(error),
            }
        })
    }
}

#[cfg(test)]
mod tests;
