//! Controllers: the builder that wires watches to a queue, and the workers that reconcile
//! (controller-runtime's `builder` and `controller`, kube-rs's `Controller`).
//!
//! ```text
//!  informer of K ────── for ─────▶ key of the object ──────┐
//!  informer of D ────── owns ────▶ key of its controller ──┤ predicates
//!  informer of W ────── watches ─▶ keys your map gives ────┤
//!                                                          ▼
//!    RateLimitingQueue<Key> (one key at a time, backoff per key, live changes first)
//!                                                          │ max_concurrent_reconciles workers
//!                                                          ▼
//!           reconcile(Arc<K> from the cache, context) ──▶ Action / ReconcileError
//! ```
//!
//! # What a reconcile returns, and what happens next
//!
//! | return | queue | `result` label |
//! |---|---|---|
//! | `Ok(Action::done())` | the key's backoff is forgotten | `success` |
//! | `Ok(Action::requeue_after(d))` | backoff forgotten; the key is queued again after `d` | `requeue_after` |
//! | `Ok(Action::requeue())` | queued again after the key's backoff, which grows | `requeue` |
//! | `Err(e)` | queued again after the key's backoff, which grows (5 ms doubling to 1000 s, and 10 per second overall) | `error` |
//! | `Err(ReconcileError::terminal(e))` | not queued again until the next event | `error` |
//! | a panic | caught, counted, and treated as an error | `error` |
//! | still running at its [`reconcile_timeout`](Controller::reconcile_timeout) | dropped (its future is not polled again), counted in `controller_runtime_reconcile_timeouts_total`, logged, and treated as an error | `error` |
//!
//! **Deleted objects.** A key whose object is no longer in the cache when its turn comes
//! (deleted, or never cached) is not reconciled: `reconcile` only ever sees objects that
//! exist, its backoff is forgotten, and nothing is counted. To act on a delete, either hold
//! a [finalizer](super::finalizer) (the object stays, with a deletion timestamp, until the
//! reconcile lets it go: the way to clean up what must never be missed) or give the
//! controller an [`on_delete`](Controller::on_delete) function, called once with the last
//! state the cache held:
//!
//! | the key's object is gone, and | what runs | queue | `result` label |
//! |---|---|---|---|
//! | no `on_delete` | nothing | backoff forgotten | none |
//! | `on_delete`, which returns `Ok(())` | `on_delete(last state, ctx)` | backoff forgotten; the state is dropped | `success` |
//! | `on_delete`, which fails (error, panic or timeout) | as above | the state is kept and retried with backoff, as a reconcile's error | `error` |
//! | `on_delete`, which fails terminally | as above | the state is dropped | `error` |
//!
//! The last state is the object as the watch last delivered it, or, for an object deleted
//! while the watch was down, the state its tombstone (`DeletedFinalStateUnknown`) carried,
//! which may be older; a tombstone that carries none is logged and skipped. Events a
//! predicate filters out call nothing. If the object comes back under the same name, its
//! pending deletes are handled first, then the new object is reconciled. Deleted states
//! live in memory only: a delete that happens while no replica runs, or whose `on_delete`
//! has not succeeded when the process stops, is not seen again (hold a finalizer where
//! that matters), and a replica that comes to lead runs the `on_delete`s of the deletes it
//! saw while standing by, which the last leader may have run already: make `on_delete`
//! idempotent. With [sharding](super::shard#deleted-objects-on_delete), `on_delete` runs
//! only on the replica that holds the deleted object's hash, and a delete of a range given
//! up before its turn is dropped there.
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use controller_runtime::prelude::*;
//! use k8s_openapi::api::core::v1::ConfigMap;
//!
//! /// A record kept outside the cluster for every ConfigMap.
//! struct Registry;
//!
//! impl Registry {
//!     async fn upsert(&self, key: &str) -> Result<(), std::io::Error> { Ok(()) }
//!     async fn remove(&self, key: &str) -> Result<(), std::io::Error> { Ok(()) }
//! }
//!
//! async fn reconcile(
//!     cm: Arc<ConfigMap>,
//!     registry: Arc<Registry>,
//! ) -> Result<Action, ReconcileError> {
//!     registry.upsert(&ObjectRef::from_obj(&*cm).key()).await?;
//!     Ok(Action::done())
//! }
//!
//! /// `cm` is gone from the cluster: this is its last state. An error is retried with backoff.
//! async fn forget(cm: Arc<ConfigMap>, registry: Arc<Registry>) -> Result<(), ReconcileError> {
//!     registry.remove(&ObjectRef::from_obj(&*cm).key()).await?;
//!     Ok(())
//! }
//!
//! # async fn run(manager: Manager) -> Result<(), Box<dyn std::error::Error>> {
//! let registry = Arc::new(Registry);
//! Controller::<ConfigMap>::new(&manager)
//!     .on_delete(forget, registry.clone())
//!     .complete(reconcile, registry)?;
//! # Ok(())
//! # }
//! ```
//!
//! **A requeue is a floor, not an appointment.** If an event for the object arrives while a
//! `requeue_after` is pending, the object is reconciled at once and the pending requeue is
//! cancelled: each key has at most one pending entry in the queue, and an immediate one
//! wins. Whatever that reconcile returns decides what happens next; return
//! `requeue_after` again from it if you still want the later look. (client-go's classic
//! queue would run both; controller-runtime's priority queue behaves like this one.)
//!
//! One key is never reconciled by two workers at once; events that arrive during its
//! reconcile queue it once more, to run after.
//!
//! # Deadlines and stopping
//!
//! A reconcile (and an `on_delete`) runs for at most its controller's
//! [`reconcile_timeout`](Controller::reconcile_timeout) (default the manager's
//! [`reconcile_timeout`](super::ManagerOptions::reconcile_timeout), none unless set). When
//! the manager stops, workers take no new keys and the reconciles in flight are left to
//! finish within the graceful shutdown timeout; a long one can end early by awaiting
//! [`stopping`], which completes when the manager starts to stop (controller-runtime's
//! cancelled `ctx`), and read its [`deadline`]. When this replica loses the leader
//! election's lease, no grace is given: [`stopping`] completes and the reconciles in flight
//! are dropped at once; the controller starts afresh, on a new queue filled from the
//! caches, if the replica leads again (see the
//! [manager](super::manager#losing-the-lease)).
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use controller_runtime::prelude::*;
//! use controller_runtime::runtime::controller::stopping;
//! use k8s_openapi::api::core::v1::ConfigMap;
//!
//! async fn reconcile(cm: Arc<ConfigMap>, _ctx: Arc<()>) -> Result<Action, ReconcileError> {
//!     tokio::select! {
//!         () = tokio::time::sleep(Duration::from_secs(60)) => Ok(Action::done()), // slow work
//!         // Retried by the next leader, or after the restart.
//!         () = stopping() => Err(ReconcileError::msg("the manager is stopping")),
//!     }
//! }
//! ```
//!
//! # Priorities
//!
//! The queue is a priority queue (controller-runtime's default since v0.23): live changes
//! go first. An object from the informer's initial list, and a resync of an object that did
//! not change (same `resourceVersion`), enter at [`LOW_PRIORITY`]; every other event at 0.
//! A key keeps its priority when it is queued again (error, `requeue`, `requeue_after`)
//! unless the [`Action`] sets one ([`Action::priority`]), and a key queued at several
//! priorities takes the highest. Unlike controller-runtime's, a waiting key ages: it rises
//! one level per second waited, so a key from the initial list is reconciled no later than
//! a live change made 100 s after it would be, however busy the controller is (the
//! [workqueue's docs](workqueue#priorities) prove the bound).
//! [`Controller::use_priority_queue(false)`](Controller::use_priority_queue) gives back the
//! plain FIFO.

use std::any::Any;
use std::collections::hash_map::RandomState;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use informer::{DeletedObject, EventHandler, Key};
use parking_lot::Mutex;
use tokio::sync::watch;
use tracing::{Instrument, Span};
use workqueue::{
    AddOpts, QueueConfig, RateLimiter, RateLimitingQueue, default_controller_rate_limiter,
};

use super::cache::{self, CacheError, CachedKind, with_read_your_writes};
use super::debug::{ControllerTrace, Retry, WatchEvent, error_line};
use super::manager::{Manager, ManagerError};
use super::metrics::{ControllerMetrics, ReconcileResult};
use super::predicate::{self, Event, Predicate};
use super::rbac::{self, Rule};
use super::shard::cache::{By, ShardFilter};
use super::shard::controller::Sharding;
use super::shard::member::{Permit, Refused};
use crate::client::Raw;

// === Action and ReconcileError ===

/// What a successful reconcile asks for next. See the [module docs](self) for what each does
/// to the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Action {
    next: Next,
    priority: Option<i32>,
}

/// The priority of events from an initial list and of resyncs of unchanged objects
/// (controller-runtime's `handler.LowPriority`); live changes enter at 0.
pub const LOW_PRIORITY: i32 = -100;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Next {
    Done,
    Requeue,
    RequeueAfter(Duration),
}

impl Action {
    /// Nothing more to do until the next event.
    pub fn done() -> Self {
        Action {
            next: Next::Done,
            priority: None,
        }
    }

    /// Look again after `delay`, or sooner if an event for the object comes first (which
    /// cancels this request). A zero delay is the same as [`done`](Self::done), as in
    /// controller-runtime.
    pub fn requeue_after(delay: Duration) -> Self {
        if delay.is_zero() {
            return Action::done();
        }
        Action {
            next: Next::RequeueAfter(delay),
            priority: None,
        }
    }

    /// Look again after the key's backoff, which grows with each such request (controller-runtime's
    /// deprecated `Requeue: true`). Prefer [`requeue_after`](Self::requeue_after).
    pub fn requeue() -> Self {
        Action {
            next: Next::Requeue,
            priority: None,
        }
    }

    /// Queues the key again at `priority` (higher first; live changes are 0, an initial list
    /// [`LOW_PRIORITY`]) instead of the priority it was reconciled at, which a requeue keeps
    /// otherwise (controller-runtime's `Result.Priority`). Only a requeue uses it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use controller_runtime::runtime::controller::Action;
    ///
    /// // Look again in a minute, behind live changes.
    /// let action = Action::requeue_after(Duration::from_secs(60)).priority(-10);
    /// assert_eq!(action.requeue_priority(), Some(-10));
    /// ```
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = Some(priority);
        self
    }

    /// The priority set with [`priority`](Self::priority), if any.
    pub fn requeue_priority(&self) -> Option<i32> {
        self.priority
    }

    /// The delay asked for, if this is a `requeue_after`.
    pub fn delay(&self) -> Option<Duration> {
        match self.next {
            Next::RequeueAfter(d) => Some(d),
            _ => None,
        }
    }
}

/// Why a reconcile failed: any error, converted by `?`, or a terminal one that is not
/// retried ([`ReconcileError::terminal`]).
///
/// ```
/// use controller_runtime::runtime::controller::{Action, ReconcileError};
///
/// fn parse(size: &str) -> Result<Action, ReconcileError> {
///     let n: i32 = size.parse()?; // a ParseIntError becomes a retried error
///     if n < 0 {
///         // Retrying cannot fix a negative size: wait for the user to change it.
///         return Err(ReconcileError::terminal(format!("size {n} is negative")));
///     }
///     Ok(Action::done())
/// }
/// assert!(parse("x").unwrap_err().to_string().contains("invalid digit"));
/// assert!(parse("-1").unwrap_err().is_terminal());
/// ```
pub struct ReconcileError {
    source: Box<dyn std::error::Error + Send + Sync>,
    terminal: bool,
}

impl ReconcileError {
    /// An error that retrying cannot fix: it is counted and logged, and the key waits for
    /// its next event instead of being retried (controller-runtime's `TerminalError`).
    pub fn terminal(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        ReconcileError {
            source: error.into(),
            terminal: true,
        }
    }

    /// An error from a message, retried with backoff.
    pub fn msg(message: impl fmt::Display) -> Self {
        ReconcileError {
            source: message.to_string().into(),
            terminal: false,
        }
    }

    /// Whether the error is terminal.
    pub fn is_terminal(&self) -> bool {
        self.terminal
    }

    /// The underlying error.
    pub fn source(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.source
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for ReconcileError {
    fn from(error: E) -> Self {
        ReconcileError {
            source: Box::new(error),
            terminal: false,
        }
    }
}

impl fmt::Display for ReconcileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.terminal {
            write!(f, "terminal error: ")?;
        }
        write!(f, "{}", self.source)?;
        let mut cause = self.source.source();
        while let Some(c) = cause {
            write!(f, ": {c}")?;
            cause = c.source();
        }
        Ok(())
    }
}

impl fmt::Debug for ReconcileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReconcileError")
            .field("source", &self.source)
            .field("terminal", &self.terminal)
            .finish()
    }
}

// === stopping and the deadline ===

tokio::task_local! {
    /// What a reconcile's future can ask of its surroundings: see [`stopping`].
    static SCOPE: Scope;
}

/// The manager's stop signal and the reconcile's deadline.
#[derive(Clone)]
struct Scope {
    stop: watch::Receiver<bool>,
    deadline: Option<tokio::time::Instant>,
}

/// A future that completes when the manager starts to stop, for the reconcile (or
/// `on_delete`) it is called from to end early, as a Go reconcile ends when its `ctx` is
/// cancelled; otherwise the manager lets it finish, within the graceful shutdown timeout.
/// See the [module docs](self#deadlines-and-stopping) for an example.
///
/// Call it in the reconcile's own task; the future it returns may then be moved into a
/// task the reconcile spawns. Called outside a reconcile, there is no manager to ask and
/// the future never completes.
pub fn stopping() -> impl Future<Output = ()> + Send + 'static {
    let stop = SCOPE.try_with(|scope| scope.stop.clone()).ok();
    async move {
        match stop {
            Some(mut stop) => {
                let _ = stop.wait_for(|stopping| *stopping).await;
            }
            None => std::future::pending().await,
        }
    }
}

/// Whether the manager has started to stop, from within a reconcile (or `on_delete`);
/// false outside one. See [`stopping`].
pub fn is_stopping() -> bool {
    SCOPE
        .try_with(|scope| *scope.stop.borrow())
        .unwrap_or(false)
}

/// When the reconcile (or `on_delete`) it is called from will be dropped: its start plus
/// its controller's [`reconcile_timeout`](Controller::reconcile_timeout). `None` without a
/// timeout, or outside a reconcile.
pub fn deadline() -> Option<tokio::time::Instant> {
    SCOPE.try_with(|scope| scope.deadline).ok().flatten()
}

// === ObjectRef ===

/// The object a reconcile is for, as a `watches` mapping names it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ObjectRef {
    /// Its namespace; `None` for a cluster-scoped object.
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
}

impl ObjectRef {
    /// A cluster-scoped object, or one to place with [`within`](Self::within).
    pub fn new(name: impl Into<String>) -> Self {
        ObjectRef {
            namespace: None,
            name: name.into(),
        }
    }

    /// The object itself: its name, and its namespace unless it is cluster-scoped (kube-rs's
    /// `ObjectRef::from_obj`).
    ///
    /// ```
    /// use controller_runtime::runtime::ObjectRef;
    /// use k8s_openapi::api::core::v1::ConfigMap;
    ///
    /// let mut cm = ConfigMap::default();
    /// cm.metadata.name = Some("settings".into());
    /// assert_eq!(ObjectRef::from_obj(&cm), ObjectRef::new("settings"));
    /// cm.metadata.namespace = Some("shop".into());
    /// assert_eq!(ObjectRef::from_obj(&cm).key().as_ref(), "shop/settings");
    /// ```
    pub fn from_obj<K>(object: &K) -> Self
    where
        K: k8s_openapi::Metadata<Ty = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>,
    {
        let meta = object.metadata();
        ObjectRef {
            namespace: meta.namespace.clone().filter(|ns| !ns.is_empty()),
            name: meta.name.clone().unwrap_or_default(),
        }
    }

    /// The same name in `namespace`.
    pub fn within(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// The queue key: `namespace/name`, or `name`.
    pub fn key(&self) -> Key {
        match &self.namespace {
            Some(ns) if !ns.is_empty() => format!("{ns}/{}", self.name).into(),
            _ => self.name.as_str().into(),
        }
    }
}

// === the builder ===

type Queue = RateLimitingQueue<Key>;

/// Wires one watch to the controller's queue once the queue exists.
type Wire = Box<dyn FnOnce(&Manager, &Target) -> Result<(), CacheError> + Send>;

/// A controller for kind `K`, built in a line or two and run by the [`Manager`].
///
/// ```no_run
/// use std::sync::Arc;
/// use controller_runtime::runtime::controller::{Action, Controller, ReconcileError};
/// use controller_runtime::runtime::manager::Manager;
/// use k8s_openapi::api::core::v1::{ConfigMap, Secret};
///
/// struct Ctx;
///
/// async fn reconcile(cm: Arc<ConfigMap>, _ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
///     println!("{:?}", cm.metadata.name);
///     Ok(Action::done())
/// }
///
/// # async fn run(manager: &Manager) -> Result<(), Box<dyn std::error::Error>> {
/// Controller::<ConfigMap>::new(manager).owns::<Secret>().complete(reconcile, Arc::new(Ctx))?;
/// # Ok(())
/// # }
/// ```
pub struct Controller<K> {
    manager: Manager,
    name: Option<String>,
    for_predicates: Vec<Predicate>,
    event_filters: Vec<Predicate>,
    wires: Vec<Wire>,
    /// Set with [`max_concurrent_reconciles`](Self::max_concurrent_reconciles); else the
    /// manager's.
    max_concurrent: Option<usize>,
    rate_limiter: Option<Box<dyn RateLimiter<Key>>>,
    /// Whether events enter the queue at their priority (see [Priorities](self#priorities)).
    priorities: bool,
    /// Whether reconciles' cache reads wait for the manager's own writes.
    read_your_writes: bool,
    /// The RBAC rules declared with [`rbac`](Self::rbac) and inferred from `owns`.
    rules: Vec<Rule>,
    /// Set with [`reconcile_timeout`](Self::reconcile_timeout); zero is no limit.
    reconcile_timeout: Option<Duration>,
    on_delete: Option<OnDelete<K>>,
    _kind: std::marker::PhantomData<fn() -> K>,
}

impl<K: CachedKind> Controller<K> {
    /// A controller that reconciles objects of kind `K` (controller-runtime's `For`): every
    /// event for one queues its key.
    pub fn new(manager: &Manager) -> Self {
        Controller {
            manager: manager.clone(),
            name: None,
            for_predicates: Vec::new(),
            event_filters: Vec::new(),
            wires: Vec::new(),
            max_concurrent: None,
            rate_limiter: None,
            priorities: true,
            read_your_writes: true,
            rules: Vec::new(),
            reconcile_timeout: None,
            on_delete: None,
            _kind: std::marker::PhantomData,
        }
    }

    /// Filters the events of kind `K` itself (controller-runtime's `For(.., WithPredicates)`).
    pub fn with_predicate(mut self, predicate: Predicate) -> Self {
        self.for_predicates.push(predicate);
        self
    }

    /// Filters the events of every watch (controller-runtime's `WithEventFilter`).
    pub fn with_event_filter(mut self, predicate: Predicate) -> Self {
        self.event_filters.push(predicate);
        self
    }

    /// Also reconciles the controlling owner of kind `K` of every object of kind `D` (the
    /// owner reference with `controller: true`), on its every event; on an update, of the
    /// old and the new object both (controller-runtime's `Owns`).
    ///
    /// The controller is taken to set those references, with `blockOwnerDeletion`, as
    /// [`controller_reference`](super::owner::controller_reference) makes them: its RBAC
    /// rules gain what the OwnerReferencesPermissionEnforcement admission plugin asks for
    /// that (delete on `D`, update on `K`'s `finalizers`; see [`rbac`]).
    pub fn owns<D: CachedKind>(self) -> Self {
        self.owns_with::<D>(None)
    }

    /// As [`owns`](Self::owns), with a predicate on `D`'s events.
    pub fn owns_with<D: CachedKind>(mut self, predicate: impl Into<Option<Predicate>>) -> Self {
        self.rules.extend(rbac::owner_reference_rules::<K, D>());
        let predicate = predicate.into();
        let namespaced = <K::Scope as crate::informers::InformerScope>::NAMESPACED;
        self.wires.push(Box::new(move |manager, target| {
            let map = move |obj: &Raw<D>, out: &mut dyn FnMut(Key)| {
                let Ok(meta) = obj.meta() else { return };
                let Some(owner) = meta.controller() else {
                    return;
                };
                if owner.kind != K::KIND || owner.group() != K::GROUP {
                    return;
                }
                let namespace = informer::Object::namespace(obj).filter(|_| namespaced);
                let mut owner_ref = ObjectRef::new(owner.name.as_ref());
                owner_ref.namespace = namespace.map(str::to_owned);
                out(owner_ref.key());
            };
            if let Some(shard) = manager.sharding() {
                // Sharded: cache only the objects whose controller owner is in this
                // replica's ranges.
                let filter = ShardFilter::new(&shard, By::ControllerOwner);
                manager.cache().set_filter::<D>(Arc::new(filter))?;
            }
            wire::<D>(manager, target, predicate, true, map)
        }));
        self
    }

    /// Also reconciles the objects that `map` names for every event of kind `W`
    /// (controller-runtime's `Watches` with `EnqueueRequestsFromMapFunc`). `map` sees the
    /// typed object, decoded from the cache as [`Store`](super::Store) reads decode it.
    pub fn watches<W: CachedKind>(
        self,
        map: impl Fn(&W) -> Vec<ObjectRef> + Send + Sync + 'static,
    ) -> Self {
        self.watches_with::<W>(None, map)
    }

    /// As [`watches`](Self::watches), with a predicate on `W`'s events.
    pub fn watches_with<W: CachedKind>(
        mut self,
        predicate: impl Into<Option<Predicate>>,
        map: impl Fn(&W) -> Vec<ObjectRef> + Send + Sync + 'static,
    ) -> Self {
        let predicate = predicate.into();
        self.wires.push(Box::new(move |manager, target| {
            let keep = manager.cache().options().keep_typed;
            let sharding = match manager.sharding() {
                Some(shard) => Some(Sharding::new(shard, manager.store::<K>()?)),
                None => None,
            };
            wire::<W>(
                manager,
                target,
                predicate,
                true,
                watch_map(keep, sharding, map),
            )
        }));
        self
    }

    /// Declares what the reconciler does to the API server beyond what the runtime infers
    /// (kubebuilder's `+kubebuilder:rbac` markers): its writes, and any read that does not
    /// come from the cache. The cache's list and watch of `K` and of every `owns` and
    /// `watches` kind are inferred, as are an event recorder's and the owner references'
    /// needs; see [`rbac`]. The rules join the manager's
    /// [`rbac_rules`](Manager::rbac_rules) when the controller is
    /// [`complete`](Self::complete)d.
    ///
    /// ```no_run
    /// # use std::sync::Arc;
    /// # use controller_runtime::runtime::{Action, Controller, Manager, ReconcileError};
    /// use controller_runtime::runtime::rbac::{Rule, Verb};
    /// use k8s_openapi::api::apps::v1::Deployment;
    /// # async fn reconcile(_: Arc<Deployment>, _: Arc<()>) -> Result<Action, ReconcileError> {
    /// #     Ok(Action::done())
    /// # }
    /// # fn run(manager: &Manager) -> Result<(), Box<dyn std::error::Error>> {
    /// Controller::<Deployment>::new(manager)
    ///     .rbac(Rule::of::<Deployment>().verbs([Verb::Patch]).because("adds an annotation"))
    ///     .rbac(Rule::status::<Deployment>().verbs([Verb::Patch]))
    ///     .complete(reconcile, Arc::new(()))?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn rbac(mut self, rule: Rule) -> Self {
        self.rules.push(rule);
        self
    }

    /// The controller's name, in logs and metrics; default the lowercased kind (`memcached`).
    /// Names must be unique within a manager.
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// How many keys are reconciled at once; default the manager's
    /// [`max_concurrent_reconciles`](super::ManagerOptions::max_concurrent_reconciles). One
    /// key is never reconciled twice at once, however many workers.
    pub fn max_concurrent_reconciles(mut self, workers: usize) -> Self {
        self.max_concurrent = Some(workers.max(1));
        self
    }

    /// Whether this controller's cache reads (the object it is called with, and every
    /// [`Store`](super::Store) read its reconcile makes) wait for the manager's own writes;
    /// default true. See [read-your-own-writes](super::cache#reads-wait-for-the-sync-and-for-this-processs-own-writes).
    /// Off, a reconcile may read a copy older than what it just wrote.
    pub fn read_your_writes(mut self, on: bool) -> Self {
        self.read_your_writes = on;
        self
    }

    /// The queue's rate limiter; default controller-runtime's (per key 5 ms doubling to
    /// 1000 s, and 10 per second with bursts of 100 overall).
    pub fn rate_limiter(mut self, limiter: impl RateLimiter<Key> + 'static) -> Self {
        self.rate_limiter = Some(Box::new(limiter));
        self
    }

    /// The longest a reconcile (or an [`on_delete`](Self::on_delete)) may run: past it, its
    /// future is dropped (never polled again), and the key is counted in
    /// `controller_runtime_reconcile_timeouts_total`, logged, and retried with backoff as
    /// an error (controller-runtime's `ReconciliationTimeout`). Default the manager's
    /// [`reconcile_timeout`](super::ManagerOptions::reconcile_timeout); zero sets no limit.
    /// A reconcile reads its own with [`deadline`].
    pub fn reconcile_timeout(mut self, timeout: Duration) -> Self {
        self.reconcile_timeout = Some(timeout);
        self
    }

    /// Calls `on_delete` with the last state of each object of kind `K` that is deleted,
    /// and `context`: for cleaning up outside the cluster without a finalizer. An error is
    /// retried with backoff, with the same state. See the
    /// [module docs](self#what-a-reconcile-returns-and-what-happens-next) for what happens
    /// to deletes, with and without it, and for an example.
    pub fn on_delete<C, F, Fut>(mut self, on_delete: F, context: Arc<C>) -> Self
    where
        C: Send + Sync + 'static,
        F: Fn(Arc<K>, Arc<C>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), ReconcileError>> + Send + 'static,
    {
        self.on_delete = Some(Arc::new(move |obj| {
            Box::pin(on_delete(obj, context.clone())) as BoxFuture<_>
        }));
        self
    }

    /// Whether the queue gives live changes priority over the initial list and resyncs
    /// (default `true`; see [Priorities](self#priorities)). `false` queues every event at
    /// priority 0: the plain FIFO of client-go, which never reads the clock to age keys. An
    /// [`Action::priority`] still applies.
    pub fn use_priority_queue(mut self, enabled: bool) -> Self {
        self.priorities = enabled;
        self
    }

    /// Registers the controller with the manager, which runs it once the caches have synced
    /// (and, with leader election, while it leads); completed after the manager started,
    /// it starts at once, its workers waiting for its informers to sync. `reconcile` gets
    /// the object from the cache and `context`. Its RBAC rules join the manager's
    /// [`rbac_rules`](Manager::rbac_rules).
    ///
    /// # Errors
    ///
    /// [`ManagerError::EmptyControllerName`] if [`named`](Self::named) was given `""`,
    /// [`ManagerError::DuplicateController`] if the name is taken (names are unique per
    /// manager, where controller-runtime's are unique per process),
    /// [`ManagerError::Stopped`] if the manager is stopping, or [`ManagerError::Cache`] if
    /// a watched kind is already cached as another Rust type.
    pub fn complete<C, F, Fut>(self, reconcile: F, context: Arc<C>) -> Result<(), ManagerError>
    where
        C: Send + Sync + 'static,
        F: Fn(Arc<K>, Arc<C>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Action, ReconcileError>> + Send + 'static,
    {
        self.manager.accepting()?;
        let name = self
            .name
            .clone()
            .unwrap_or_else(|| K::KIND.to_ascii_lowercase());
        self.manager.claim_controller_name(&name)?;
        let max_concurrent = (self.max_concurrent)
            .unwrap_or(self.manager.options().max_concurrent_reconciles)
            .max(1);
        let metrics = self.manager.metrics().controller(&name, max_concurrent);
        let trace = self.manager.debug_pages().map(|d| d.controller(&name));
        // A fresh queue for each term as leader; a limiter given by the user is shared by
        // them all.
        let new_queue = {
            let mut provider = self.manager.metrics().workqueue(&name);
            if let Some(trace) = &trace {
                provider = trace.queue_metrics(provider);
            }
            let name = name.clone();
            let limiter: Option<Arc<dyn RateLimiter<Key>>> = self.rate_limiter.map(Arc::from);
            move || {
                let config = QueueConfig::new()
                    .name(name.clone())
                    .metrics_provider(provider.clone());
                match &limiter {
                    Some(limiter) => RateLimitingQueue::with_config(limiter.clone(), config),
                    None => {
                        RateLimitingQueue::with_config(default_controller_rate_limiter(), config)
                    }
                }
            }
        };
        let filters: Arc<[Predicate]> = self.event_filters.into();
        let store = self.manager.store::<K>()?;
        let for_predicate = combine(self.for_predicates);
        let target = Target {
            queue: Slot::default(),
            filters,
            priorities: self.priorities,
            trace: trace.clone(),
            // Sharded, each move of the ranges relists the caches, which hands every cached
            // object over again unchanged: with no resync asked for, those are not queued.
            skip_unchanged: self.manager.sharding().is_some()
                && self.manager.cache().options().resync.is_zero(),
            replays: Arc::default(),
        };
        if let Some(trace) = &trace {
            let slot = target.queue.clone();
            trace.set_delayed(move || slot.get().map_or(0, |queue| queue.pending_delayed()));
        }
        let sharding = self
            .manager
            .sharding()
            .map(|shard| Arc::new(Sharding::new(shard, store.clone())));
        let on_delete = match self.on_delete {
            Some(on_delete) => {
                let graves = Graves::default();
                record_deletes::<K>(
                    &self.manager,
                    &target.queue,
                    &target.filters,
                    for_predicate.clone(),
                    &graves,
                    sharding.clone(),
                )?;
                Some((on_delete, graves))
            }
            None => None,
        };
        let timeout = (self.reconcile_timeout)
            .or(self.manager.options().reconcile_timeout)
            .filter(|t| !t.is_zero());
        wire::<K>(
            &self.manager,
            &target,
            for_predicate,
            false,
            |obj: &Raw<K>, out: &mut dyn FnMut(Key)| out(informer::key_of(obj)),
        )?;
        for wire in self.wires {
            wire(&self.manager, &target)?;
        }
        for rule in self.rules {
            self.manager.add_rbac(rule);
        }
        let ryw = self.read_your_writes;
        if let Some(shard) = self.manager.sharding() {
            let filter = ShardFilter::new(&shard, By::Own);
            self.manager.cache().set_filter::<K>(Arc::new(filter))?;
        }
        let follow = sharding.clone().map(|s| (s, store.clone()));
        let reconcile = Arc::new(move |obj, ctx| {
            Box::pin(with_read_your_writes(ryw, reconcile(obj, ctx)))
                as Pin<Box<dyn Future<Output = _> + Send>>
        });
        let workers = Workers {
            name,
            queue: new_queue(),
            lookup: Arc::new(move |key: &str| {
                let (store, key) = (store.clone(), key.to_owned());
                Box::pin(with_read_your_writes(ryw, async move {
                    store.get_key(&key).await
                }))
            }),
            reconcile,
            context,
            metrics,
            max_concurrent,
            timeout,
            on_delete,
            trace,
            sharding,
        };
        let cache = self.manager.cache().clone();
        self.manager
            .add_controller(workers.name.clone(), move |mut stop| {
                let (cache, target, follow) = (cache.clone(), target.clone(), follow.clone());
                let mut workers = workers.clone();
                workers.queue = new_queue();
                Box::pin(async move {
                    // Completed after the start, the controller's informers have just
                    // started; before it, they synced already.
                    tokio::select! {
                        synced = cache.wait_for_sync() => synced?,
                        _ = stop.wait_for(|s| *s) => return Ok(()),
                    }
                    // This term's queue, filled from the caches as a fresh process's
                    // would be; the handlers drop events again once the term ends.
                    if let Some((_, graves)) = &workers.on_delete {
                        graves.lock().clear();
                    }
                    let _term = target.queue.install(workers.queue.clone());
                    target.replay();
                    match &follow {
                        // Keys of ranges acquired later are queued again as they come.
                        Some((sharding, store)) => {
                            let queue = workers.queue.clone();
                            let follow = sharding.follow(store.clone(), |key| queue.add(key));
                            tokio::select! {
                                _ = workers.run(stop) => {}
                                _ = follow => {}
                            }
                        }
                        None => workers.run(stop).await,
                    }
                    Ok(())
                })
            })
    }
}

impl<K> fmt::Debug for Controller<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Controller")
            .field("kind", &std::any::type_name::<K>())
            .field("name", &self.name)
            .field("watches", &self.wires.len())
            .field("max_concurrent_reconciles", &self.max_concurrent)
            .field("reconcile_timeout", &self.reconcile_timeout)
            .field("on_delete", &self.on_delete.is_some())
            .field("rbac", &self.rules)
            .finish_non_exhaustive()
    }
}

/// A `watches` kind's mapping, as its handler runs it: the typed object to the keys `map`
/// names. Sharded, a key whose primary object is not cached in this replica's active
/// ranges is not queued at all: the worker's gate would refuse it anyway, and a primary
/// cached later, or a range acquired later, queues its key itself.
fn watch_map<W: CachedKind>(
    keep: bool,
    sharding: Option<Sharding>,
    map: impl Fn(&W) -> Vec<ObjectRef> + Send + Sync + 'static,
) -> impl Fn(&Raw<W>, &mut dyn FnMut(Key)) + Send + Sync + 'static {
    move |obj: &Raw<W>, out: &mut dyn FnMut(Key)| match cache::typed(obj, keep) {
        Ok(typed) => {
            for key in map(&typed).iter().map(ObjectRef::key) {
                if sharding.as_ref().is_none_or(|s| s.may_admit(&key)) {
                    out(key);
                }
            }
        }
        Err(e) => tracing::warn!(
            error = %e,
            object = %informer::key_of(obj),
            "watched object does not decode; its event is ignored"
        ),
    }
}

/// All of `predicates`, as one (none: `None`).
fn combine(predicates: Vec<Predicate>) -> Option<Predicate> {
    predicates.into_iter().reduce(Predicate::and)
}

/// Where a controller's handlers put keys: its queue, behind its event filters.
#[derive(Clone)]
struct Target {
    /// The queue of the term under way; empty while this replica does not lead.
    queue: Slot,
    filters: Arc<[Predicate]>,
    /// Initial-list events and unchanged resyncs enter at [`LOW_PRIORITY`].
    priorities: bool,
    /// The debug pages' recorder, when they are on.
    trace: Option<Arc<ControllerTrace>>,
    /// Updates that change nothing (same resourceVersion: a relist) are not queued.
    skip_unchanged: bool,
    /// One per watch: hands every cached object to its handler as an initial add.
    replays: Arc<Mutex<Vec<Replay>>>,
}

/// Hands every object in a watch's cache to its handler, as the initial list did.
type Replay = Box<dyn Fn() + Send + Sync>;

impl Target {
    /// Fills the queue from the caches, as the informers' initial lists fill a fresh
    /// process's: each watch's handler sees every cached object as an initial add, through
    /// its filters and mapping, at [`LOW_PRIORITY`] with priorities on.
    fn replay(&self) {
        for replay in self.replays.lock().iter() {
            replay();
        }
    }
}

/// The queue of a term as leader, shared by the controller's handlers and its workers.
/// Outside a term it is empty and the handlers queue nothing: a replica that does not lead
/// holds no keys and no deleted objects' states, and fills a new queue from its caches
/// when it leads again (see [`Target::replay`]).
#[derive(Clone, Default)]
struct Slot(Arc<parking_lot::RwLock<Option<Queue>>>);

impl Slot {
    /// A slot holding `queue`, as during a term.
    #[cfg(test)]
    fn holding(queue: Queue) -> Slot {
        Slot(Arc::new(parking_lot::RwLock::new(Some(queue))))
    }

    /// The queue, during a term.
    fn get(&self) -> Option<Queue> {
        self.0.read().clone()
    }

    /// Makes `queue` the term's until the guard is dropped (the term ended, or its task
    /// was dropped): then the slot is emptied and the queue shut down and emptied, so
    /// its depth reads zero.
    fn install(&self, queue: Queue) -> TermQueue {
        *self.0.write() = Some(queue.clone());
        TermQueue {
            slot: self.clone(),
            queue,
        }
    }
}

/// See [`Slot::install`].
struct TermQueue {
    slot: Slot,
    queue: Queue,
}

impl Drop for TermQueue {
    fn drop(&mut self) {
        *self.slot.0.write() = None;
        let queue = self.queue.clone();
        queue.shut_down();
        // A shut-down queue hands out what it holds without waiting.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                while let Some(key) = queue.get().await {
                    queue.done(&key);
                }
            });
        }
    }
}

/// Registers, on every informer of kind `D`, a handler that puts the keys `map` gives for
/// each event passing the target's filters and `predicate` into its queue.
fn wire<D: CachedKind>(
    manager: &Manager,
    target: &Target,
    predicate: Option<Predicate>,
    both_on_update: bool,
    map: impl Fn(&Raw<D>, &mut dyn FnMut(Key)) + Send + Sync + 'static,
) -> Result<(), CacheError> {
    let store = manager.store::<D>()?;
    let handler = Arc::new(Enqueue {
        kind: D::KIND,
        target: target.clone(),
        predicate,
        both_on_update,
        map,
        _kind: std::marker::PhantomData,
    });
    for informer in store.informers() {
        informer.add_event_handler(handler.clone())?;
    }
    let listers = store.listers();
    target.replays.lock().push(Box::new(move || {
        for object in listers.iter().flat_map(|lister| lister.list()) {
            handler.add(&object, true);
        }
    }));
    Ok(())
}

/// The event handler behind every watch: filter, map to keys, queue.
struct Enqueue<D, M> {
    /// The watched kind, for the debug pages.
    kind: &'static str,
    target: Target,
    predicate: Option<Predicate>,
    /// Map the old object too on an update (owners may differ); the object's own key is the
    /// same in both.
    both_on_update: bool,
    map: M,
    _kind: std::marker::PhantomData<fn() -> D>,
}

impl<D, M> Enqueue<D, M>
where
    D: Send + Sync + 'static,
    M: Fn(&Raw<D>, &mut dyn FnMut(Key)),
{
    fn passes(&self, event: &Event<'_>) -> bool {
        predicate::all(&self.target.filters, event)
            && self.predicate.as_ref().is_none_or(|p| p.matches(event))
    }

    /// Queues the keys of `obj`, at [`LOW_PRIORITY`] if `low` and the controller uses
    /// priorities.
    /// Tells the debug pages (when on) what the event did for each key `obj` maps to.
    fn trace(&self, obj: &Raw<D>, verb: &str, passed: bool, low: bool) {
        if let Some(trace) = &self.target.trace {
            use informer::Object;
            let object = informer::key_of(obj);
            let event = WatchEvent {
                kind: self.kind,
                verb,
                object: &object,
                resource_version: obj.resource_version(),
                passed,
                low: low && self.target.priorities,
            };
            (self.map)(obj, &mut |key| trace.watch_event(&key, &event));
        }
    }

    /// An object entered the cache (`listed`: it was there when the term began); queues
    /// its keys if it passes the filters.
    fn add(&self, obj: &Raw<D>, listed: bool) {
        let passed = self.passes(&Event::Create(obj));
        if self.target.trace.is_some() {
            let verb = if listed { "add (initial list)" } else { "add" };
            self.trace(obj, verb, passed, listed);
        }
        if passed {
            self.enqueue(obj, listed);
        }
    }

    fn enqueue(&self, obj: &Raw<D>, low: bool) {
        let Some(queue) = self.target.queue.get() else {
            return;
        };
        if low && self.target.priorities {
            (self.map)(obj, &mut |key| queue.add_with_priority(key, LOW_PRIORITY));
        } else {
            (self.map)(obj, &mut |key| queue.add(key));
        }
    }
}

impl<D, M> EventHandler<Raw<D>> for Enqueue<D, M>
where
    D: Send + Sync + 'static,
    M: Fn(&Raw<D>, &mut dyn FnMut(Key)) + Send + Sync + 'static,
{
    /// The informer's initial adds are left to the term's [replay](Target::replay), which
    /// queues every cached object once the caches have synced. The handler may deliver
    /// them later than that (its notifications trail the cache), and queued a second time
    /// a key a worker has already taken would be reconciled twice.
    fn on_add(&self, obj: &Arc<Raw<D>>, initial: bool) {
        if !initial {
            self.add(obj, false);
        }
    }

    fn on_update(&self, old: &Arc<Raw<D>>, new: &Arc<Raw<D>>) {
        // A resync re-delivers an object unchanged: same resourceVersion.
        use informer::Object;
        let passed = self.passes(&Event::Update {
            old: &**old,
            new: &**new,
        });
        let unchanged = (**old).resource_version() == (**new).resource_version();
        if self.target.trace.is_some() {
            let verb = if unchanged {
                "update (resync)"
            } else {
                "update"
            };
            if self.both_on_update {
                self.trace(old, verb, passed, unchanged);
            }
            self.trace(new, verb, passed, unchanged);
        }
        if passed {
            if unchanged && self.target.skip_unchanged {
                return;
            }
            if self.both_on_update {
                self.enqueue(old, unchanged);
            }
            self.enqueue(new, unchanged);
        }
    }

    fn on_delete(&self, obj: &DeletedObject<Raw<D>>) {
        // A tombstone without its last state cannot be mapped: nothing is known of it.
        if let Some(obj) = obj.object() {
            let passed = self.passes(&Event::Delete(&**obj));
            if self.target.trace.is_some() {
                self.trace(obj, "delete", passed, false);
            }
            if passed {
                self.enqueue(obj, false);
            }
        }
    }
}

/// Registers, on every informer of kind `K`, a handler that keeps the last state of each
/// deleted object passing `filters` and `predicate` in `graves`, and queues its key;
/// sharded, only of an object in this replica's active ranges.
fn record_deletes<K: CachedKind>(
    manager: &Manager,
    queue: &Slot,
    filters: &Arc<[Predicate]>,
    predicate: Option<Predicate>,
    graves: &Graves<K>,
    sharding: Option<Arc<Sharding>>,
) -> Result<(), CacheError> {
    let store = manager.store::<K>()?;
    let handler = Arc::new(RecordDeletes {
        queue: queue.clone(),
        filters: filters.clone(),
        predicate,
        graves: graves.clone(),
        keep: manager.cache().options().keep_typed,
        sharding,
    });
    for informer in store.informers() {
        informer.add_event_handler(handler.clone())?;
    }
    Ok(())
}

/// The handler behind [`Controller::on_delete`]: keeps deleted objects' last states.
struct RecordDeletes<K> {
    queue: Slot,
    filters: Arc<[Predicate]>,
    predicate: Option<Predicate>,
    graves: Graves<K>,
    keep: bool,
    /// Sharded: deletes of objects outside the active ranges are not kept. Those include
    /// the objects a relist drops from the cache when a range is given up, which are not
    /// deleted at all.
    sharding: Option<Arc<Sharding>>,
}

impl<K: CachedKind> EventHandler<Raw<K>> for RecordDeletes<K> {
    fn on_delete(&self, obj: &DeletedObject<Raw<K>>) {
        // Outside a term, deletions are the leader's to handle.
        let Some(queue) = self.queue.get() else {
            return;
        };
        let Some(last) = obj.object() else {
            tracing::warn!(
                object = %obj.key(),
                "deleted while the watch was down, with no last state known: on_delete is not called for it"
            );
            return;
        };
        let event = Event::Delete(&**last);
        if !predicate::all(&self.filters, &event)
            || self.predicate.as_ref().is_some_and(|p| !p.matches(&event))
        {
            return;
        }
        let hash = match &self.sharding {
            None => None,
            Some(sharding) => match sharding.hash(last) {
                Some(hash) if sharding.holds(hash) => Some(hash),
                _ => {
                    tracing::debug!(
                        object = %obj.key(),
                        "deleted (or dropped from the cache) outside this replica's shard ranges: on_delete is not called for it here"
                    );
                    return;
                }
            },
        };
        match cache::typed(last, self.keep) {
            Ok(typed) => {
                let key = obj.key();
                let mut graves = self.graves.lock();
                let grave = Grave { last: typed, hash };
                graves.entry(key.clone()).or_default().push_back(grave);
                queue.add(key);
            }
            Err(error) => tracing::error!(
                %error,
                "a deleted object does not decode: on_delete is not called for it"
            ),
        }
    }
}

// === the workers ===

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;
type Lookup<K> = Arc<dyn Fn(&str) -> BoxFuture<Result<Option<Arc<K>>, CacheError>> + Send + Sync>;
type Reconcile<K, C> =
    Arc<dyn Fn(Arc<K>, Arc<C>) -> BoxFuture<Result<Action, ReconcileError>> + Send + Sync>;
/// What runs for a deleted object, its context bound.
type OnDelete<K> = Arc<dyn Fn(Arc<K>) -> BoxFuture<Result<(), ReconcileError>> + Send + Sync>;
/// The last states of deleted objects whose `on_delete` has not succeeded yet, by key,
/// oldest first.
type Graves<K> = Arc<Mutex<HashMap<Key, VecDeque<Grave<K>>>>>;

/// A deleted object's last state, waiting for `on_delete`.
struct Grave<K> {
    last: Arc<K>,
    /// Sharded: the object's shard hash, which decides the replica that runs `on_delete`.
    hash: Option<u64>,
}

impl<K> Clone for Grave<K> {
    fn clone(&self) -> Self {
        Grave {
            last: self.last.clone(),
            hash: self.hash,
        }
    }
}

/// How a reconcile (or an `on_delete`) ended, when it did not return `Ok`.
enum Failure {
    Error(ReconcileError),
    Panic(Box<dyn Any + Send>),
    Timeout(Duration),
    /// Sharded: dropped because this replica could no longer prove it holds the key's
    /// range (its renew deadline passed).
    Revoked,
}

/// A controller's queue and its workers, ready to run; a clone shares everything but is
/// given its own queue for its term.
pub(crate) struct Workers<K, C> {
    name: String,
    queue: Queue,
    lookup: Lookup<K>,
    reconcile: Reconcile<K, C>,
    context: Arc<C>,
    metrics: ControllerMetrics,
    max_concurrent: usize,
    /// The longest a reconcile may run.
    timeout: Option<Duration>,
    /// With [`Controller::on_delete`]: what runs for a deleted object, and the last states
    /// waiting for it.
    on_delete: Option<(OnDelete<K>, Graves<K>)>,
    /// The debug pages' recorder, when they are on.
    trace: Option<Arc<ControllerTrace>>,
    /// With a sharded manager: the gate before each reconcile.
    sharding: Option<Arc<Sharding>>,
}

impl<K, C> Clone for Workers<K, C> {
    fn clone(&self) -> Self {
        Workers {
            name: self.name.clone(),
            queue: self.queue.clone(),
            lookup: self.lookup.clone(),
            reconcile: self.reconcile.clone(),
            context: self.context.clone(),
            metrics: self.metrics.clone(),
            max_concurrent: self.max_concurrent,
            timeout: self.timeout,
            on_delete: self.on_delete.clone(),
            trace: self.trace.clone(),
            sharding: self.sharding.clone(),
        }
    }
}

impl<K, C> Workers<K, C>
where
    K: Send + Sync + 'static,
    C: Send + Sync + 'static,
{
    /// Runs the workers until `stop` turns true; then each finishes the reconcile it is in
    /// and takes no more. Returns when every worker has returned.
    async fn run(self, stop: watch::Receiver<bool>) {
        tracing::info!(controller = %self.name, workers = self.max_concurrent, "starting workers");
        let this = Arc::new(self);
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..this.max_concurrent {
            let (this, mut stop) = (this.clone(), stop.clone());
            // Each worker logs within the span the controller runs in (the leader's).
            workers.spawn(
                async move {
                    loop {
                        let key = tokio::select! {
                            biased;
                            _ = stop.wait_for(|s| *s) => break,
                            key = this.queue.get_with_priority() => match key {
                                Some(key) => key,
                                None => break,
                            },
                        };
                        let (key, priority) = key;
                        if let Some(trace) = &this.trace {
                            trace.started(&key, priority);
                        }
                        // `done` also when the reconcile is dropped (the term ended).
                        let _done = Done(&this.queue, &key);
                        this.process(&key, priority, &stop).await;
                        if let Some(trace) = &this.trace {
                            trace.settled(&key);
                        }
                    }
                }
                .in_current_span(),
            );
        }
        while workers.join_next().await.is_some() {}
        this.queue.shut_down();
        tracing::info!(controller = %this.name, "all workers finished");
    }

    /// Reconciles `key`, handed out at `priority`, once (or, for a deleted object, runs
    /// `on_delete` once) and queues it again as the outcome asks.
    async fn process(&self, key: &Key, priority: i32, stop: &watch::Receiver<bool>) {
        if let Some((on_delete, graves)) = &self.on_delete {
            loop {
                let front = graves.lock().get(key).and_then(|g| g.front().cloned());
                let Some(grave) = front else { break };
                // Sharded: only the replica that holds the deleted object's range now runs
                // its on_delete; a state of a range given up since the delete is dropped.
                let permit = match &self.sharding {
                    None => None,
                    Some(sharding) => {
                        let hash = grave.hash.ok_or(Refused::NotHeld);
                        match hash.and_then(|h| sharding.admit_hash(h)) {
                            Ok(permit) => Some(permit),
                            Err(Refused::NotHeld) => {
                                tracing::info!(controller = %self.name, %key, "deleted object no longer in this replica's shard ranges; on_delete is not called for it");
                                pop_grave(graves, key);
                                continue;
                            }
                            Err(Refused::Fenced) => return self.fenced(key, priority),
                        }
                    }
                };
                let work = on_delete(grave.last);
                return self.delete(key, priority, stop, work, graves, permit).await;
            }
        }
        let object = match (self.lookup)(key).await {
            Ok(Some(object)) => object,
            Ok(None) => {
                // Deleted (or never cached): nothing to reconcile, nothing to retry.
                tracing::debug!(controller = %self.name, %key, "object is gone; not reconciling");
                self.queue.forget(key);
                return;
            }
            Err(error) => {
                // The object will not decode until it changes, and its change queues it.
                tracing::error!(controller = %self.name, %key, %error, "cannot reconcile");
                self.metrics.error();
                self.metrics.terminal_error();
                self.metrics
                    .reconciled(ReconcileResult::Error, Duration::ZERO);
                return;
            }
        };
        let span = self.span(key);
        // Sharded: only a key of a range this replica holds now; the permit keeps the range
        // held until the reconcile ends.
        let permit = match &self.sharding {
            None => None,
            Some(sharding) => match sharding.admit(key) {
                Ok(permit) => Some(permit),
                Err(Refused::NotHeld) => {
                    tracing::debug!(controller = %self.name, %key, "not in this replica's shard ranges; skipped");
                    self.queue.forget(key);
                    return;
                }
                Err(Refused::Fenced) => return self.fenced(key, priority),
            },
        };
        let work = (self.reconcile)(object, self.context.clone());
        let (outcome, elapsed) = self.attempt(&span, stop, work, permit).await;
        let _entered = span.enter();
        // A requeue keeps the priority unless the action sets one.
        let requeue_at = match &outcome {
            Ok(action) => action.priority.unwrap_or(priority),
            Err(_) => priority,
        };
        let result = match outcome {
            Ok(action) => match action.next {
                Next::Done => {
                    self.queue.forget(key);
                    ReconcileResult::Success
                }
                Next::RequeueAfter(delay) => {
                    self.queue.forget(key);
                    let after = AddOpts::new().priority(requeue_at).after(delay);
                    self.queue.add_with(key.clone(), after);
                    if let Some(trace) = &self.trace {
                        trace.retry(key, Retry::After, Some(delay), 0, None);
                    }
                    ReconcileResult::RequeueAfter
                }
                Next::Requeue => {
                    let retry = AddOpts::new().priority(requeue_at).rate_limited();
                    let delay = self.queue.add_with(key.clone(), retry);
                    if let Some(trace) = &self.trace {
                        let failures = self.queue.num_requeues(key);
                        trace.retry(key, Retry::Requeue, Some(delay), failures, None);
                    }
                    ReconcileResult::Requeue
                }
            },
            Err(failure) => self.failed(key, failure, requeue_at),
        };
        self.finish(key, result, elapsed);
    }

    /// A key of an active range refused because the renew deadline passed: queued again
    /// with backoff, since a renewal may yet succeed without the ranges changing (and so
    /// without the keys of the ranges being queued again). If the member drops its ranges
    /// instead, the retry finds the key not held and forgets it.
    fn fenced(&self, key: &Key, priority: i32) {
        tracing::debug!(controller = %self.name, %key, "shard renew deadline passed; retrying with backoff");
        let retry = AddOpts::new().priority(priority).rate_limited();
        self.queue.add_with(key.clone(), retry);
    }

    /// Runs `on_delete` for the oldest deleted state of `key`; once it is done with (it
    /// succeeded, or failed terminally), queues the key again if another deleted state or
    /// the object itself is there.
    async fn delete(
        &self,
        key: &Key,
        priority: i32,
        stop: &watch::Receiver<bool>,
        work: BoxFuture<Result<(), ReconcileError>>,
        graves: &Graves<K>,
        permit: Option<Permit>,
    ) {
        let span = self.span(key);
        span.in_scope(|| tracing::debug!("object is gone; calling on_delete with its last state"));
        let (outcome, elapsed) = self.attempt(&span, stop, work, permit).await;
        let _entered = span.enter();
        let settled = match &outcome {
            Ok(()) => true,
            Err(Failure::Error(error)) => error.is_terminal(),
            Err(_) => false,
        };
        let result = match outcome {
            Ok(()) => {
                self.queue.forget(key);
                ReconcileResult::Success
            }
            Err(failure) => self.failed(key, failure, priority),
        };
        if settled {
            let more = pop_grave(graves, key) > 0;
            if more || matches!((self.lookup)(key).await, Ok(Some(_))) {
                self.queue.add(key.clone());
            }
        }
        self.finish(key, result, elapsed);
    }

    /// The span every line of one reconcile of `key` is logged in.
    fn span(&self, key: &Key) -> Span {
        let (namespace, name) = informer::split_key(key).unwrap_or(("", key));
        // The object's name is `object`: JSON logs write a span's own name as `name`, and a
        // second `name` key would hide one of the two.
        tracing::info_span!(
            "reconcile",
            controller = %self.name,
            namespace,
            object = name,
            reconcile_id = %reconcile_id(),
            replica = tracing::field::Empty,
            range = tracing::field::Empty,
            term = tracing::field::Empty,
        )
    }

    /// Runs `work` (a reconcile or an `on_delete`) in `span`, within the timeout, with a
    /// panic caught and [`stopping`] and [`deadline`] answering inside. Sharded, with the
    /// `permit` that admitted it: logs `shard reconcile started` and `ended` in `span`
    /// (which names the replica, range and term), and drops `work` at once if the permit is
    /// revoked (this replica's renew deadline passed), before the range can move.
    async fn attempt<T>(
        &self,
        span: &Span,
        stop: &watch::Receiver<bool>,
        work: BoxFuture<Result<T, ReconcileError>>,
        permit: Option<Permit>,
    ) -> (Result<T, Failure>, Duration) {
        if let (Some(permit), Some(sharding)) = (&permit, &self.sharding) {
            span.record("replica", sharding.identity());
            span.record("range", tracing::field::display(permit.range));
            span.record("term", permit.term);
            span.in_scope(|| tracing::info!("shard reconcile started"));
        }
        span.in_scope(|| tracing::debug!("reconciling"));
        let started = Instant::now();
        let deadline = self.timeout.map(|t| (tokio::time::Instant::now() + t, t));
        let scope = Scope {
            stop: stop.clone(),
            deadline: deadline.map(|(at, _)| at),
        };
        let work = CatchUnwind(Box::pin(SCOPE.scope(scope, work))).instrument(span.clone());
        let work = async {
            match work.await {
                Ok(Ok(out)) => Ok(out),
                Ok(Err(error)) => Err(Failure::Error(error)),
                Err(panic) => Err(Failure::Panic(panic)),
            }
        };
        self.metrics.worker_started();
        let work = async {
            match deadline {
                Some((at, timeout)) => tokio::time::timeout_at(at, work)
                    .await
                    .unwrap_or(Err(Failure::Timeout(timeout))),
                None => work.await,
            }
        };
        let outcome = match &permit {
            Some(permit) => tokio::select! {
                // Past the fence, whatever the work would still do is not ours to do.
                biased;
                () = permit.revoked() => Err(Failure::Revoked),
                outcome = work => outcome,
            },
            None => work.await,
        };
        self.metrics.worker_stopped();
        if permit.is_some() {
            if matches!(outcome, Err(Failure::Revoked)) {
                span.in_scope(|| {
                    tracing::warn!(
                        reason = "the renew deadline passed: this replica can no longer prove it holds the key's range",
                        "shard reconcile aborted"
                    )
                });
            }
            span.in_scope(|| tracing::info!("shard reconcile ended"));
        }
        // The range stays held until here: the work was dropped (or returned) first.
        drop(permit);
        (outcome, started.elapsed())
    }

    /// Counts and logs a failed attempt, and queues the key again at `priority` with backoff
    /// unless the error is terminal.
    fn failed(&self, key: &Key, failure: Failure, priority: i32) -> ReconcileResult {
        self.metrics.error();
        let line = self.trace.as_ref().map(|_| failure_line(&failure));
        match failure {
            Failure::Error(error) if error.is_terminal() => {
                self.metrics.terminal_error();
                tracing::error!(%error, "reconcile failed; not retrying");
                if let Some(trace) = &self.trace {
                    let failures = self.queue.num_requeues(key);
                    trace.retry(key, Retry::Error, None, failures, line);
                }
                return ReconcileResult::Error;
            }
            Failure::Error(error) => {
                tracing::error!(%error, "reconcile failed; retrying with backoff");
            }
            Failure::Panic(panic) => {
                self.metrics.panicked();
                tracing::error!(
                    panic = %panic_message(&*panic),
                    "reconcile panicked [recovered]; retrying with backoff"
                );
            }
            Failure::Timeout(timeout) => {
                self.metrics.timed_out();
                tracing::error!(
                    ?timeout,
                    "reconcile timed out and was dropped; retrying with backoff"
                );
            }
            Failure::Revoked => {
                // Retried only if this replica holds the key's range again by then.
                tracing::warn!("reconcile dropped with its shard range; retrying with backoff");
            }
        }
        let retry = AddOpts::new().priority(priority).rate_limited();
        let delay = self.queue.add_with(key.clone(), retry);
        if let Some(trace) = &self.trace {
            let failures = self.queue.num_requeues(key);
            trace.retry(key, Retry::Error, Some(delay), failures, line);
        }
        ReconcileResult::Error
    }

    fn finish(&self, key: &Key, result: ReconcileResult, elapsed: Duration) {
        if let Some(trace) = &self.trace {
            trace.finished(key, result.as_label(), elapsed);
        }
        tracing::debug!(
            result = result.as_label(),
            elapsed_ms = elapsed.as_millis() as u64,
            "reconciled"
        );
        self.metrics.reconciled(result, elapsed);
    }
}

/// Drops the oldest deleted state of `key`; how many are left.
fn pop_grave<K>(graves: &Graves<K>, key: &Key) -> usize {
    let mut graves = graves.lock();
    let rest = graves.get_mut(key).map(|g| {
        g.pop_front();
        g.len()
    });
    if rest == Some(0) {
        graves.remove(key);
    }
    rest.unwrap_or(0)
}

/// Marks a key handed out by the queue done when dropped.
struct Done<'a>(&'a Queue, &'a Key);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        self.0.done(self.1);
    }
}

/// Polls a future, turning a panic inside it into an `Err` with the panic's payload.
/// A failure's first line, for the debug pages.
fn failure_line(failure: &Failure) -> String {
    match failure {
        Failure::Error(error) => error_line(error),
        Failure::Panic(panic) => format!("panicked: {}", error_line(&panic_message(&**panic))),
        Failure::Timeout(timeout) => format!("timed out after {timeout:?}"),
        Failure::Revoked => "dropped: the shard range could no longer be proven held".to_owned(),
    }
}

struct CatchUnwind<F>(F);

impl<F: Future + Unpin> Future for CatchUnwind<F> {
    type Output = Result<F::Output, Box<dyn Any + Send>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = &mut self.0;
        // A reconcile's future is dropped after a panic, never polled again, so nothing
        // observes state the panic left half-updated.
        match std::panic::catch_unwind(AssertUnwindSafe(|| Pin::new(inner).poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(out)) => Poll::Ready(Ok(out)),
            Err(panic) => Poll::Ready(Err(panic)),
        }
    }
}

/// A panic payload's message, when it has one.
fn panic_message(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(a panic without a message)")
}

/// A random identifier in the UUID format, for telling reconciles apart in logs.
fn reconcile_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let hash = |salt: u64| {
        let mut h = RandomState::new().build_hasher();
        h.write_u64(n ^ salt);
        h.finish()
    };
    let (a, b) = (hash(0), hash(u64::MAX));
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        0x8000 | (b >> 48) & 0x3fff,
        b & 0xffff_ffff_ffff
    )
}

#[cfg(test)]
mod tests;
