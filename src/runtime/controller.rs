//! Controllers: the builder that wires watches to a queue, and the workers that reconcile
//! (controller-runtime's `builder` and `controller`, kube-rs's `Controller`).
//!
//! ```text
//!  informer of K ────── for ─────▶ key of the object ──────┐
//!  informer of D ────── owns ────▶ key of its controller ──┤ predicates
//!  informer of W ────── watches ─▶ keys your map gives ────┤
//!                                                          ▼
//!                 RateLimitingQueue<Key> (one key at a time, backoff per key)
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
use tokio::sync::watch;
use tracing::Instrument;
use workqueue::{
    AddOpts, QueueConfig, RateLimiter, RateLimitingQueue, default_controller_rate_limiter,
};

use super::cache::{self, CacheError, CachedKind, with_read_your_writes};
use super::manager::{Manager, ManagerError};
use super::metrics::{ControllerMetrics, ReconcileResult};
use super::predicate::{self, Event, Predicate};
use super::rbac::{self, Rule};
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
    max_concurrent: usize,
    rate_limiter: Option<Box<dyn RateLimiter<Key>>>,
    /// Whether events enter the queue at their priority (see [Priorities](self#priorities)).
    priorities: bool,
    /// Whether reconciles' cache reads wait for the manager's own writes.
    read_your_writes: bool,
    /// The RBAC rules declared with [`rbac`](Self::rbac) and inferred from `owns`.
    rules: Vec<Rule>,
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
            max_concurrent: 1,
            rate_limiter: None,
            priorities: true,
            read_your_writes: true,
            rules: Vec::new(),
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
            let map = move |obj: &Raw<W>, out: &mut dyn FnMut(Key)| match cache::typed(obj, keep) {
                Ok(typed) => map(&typed).iter().for_each(|r| out(r.key())),
                Err(e) => tracing::warn!(
                    error = %e,
                    object = %informer::key_of(obj),
                    "watched object does not decode; its event is ignored"
                ),
            };
            wire::<W>(manager, target, predicate, true, map)
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

    /// How many keys are reconciled at once; default 1. One key is never reconciled twice
    /// at once, however many workers.
    pub fn max_concurrent_reconciles(mut self, workers: usize) -> Self {
        self.max_concurrent = workers.max(1);
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

    /// Whether the queue gives live changes priority over the initial list and resyncs
    /// (default `true`; see [Priorities](self#priorities)). `false` queues every event at
    /// priority 0: the plain FIFO of client-go, which never reads the clock to age keys. An
    /// [`Action::priority`] still applies.
    pub fn use_priority_queue(mut self, enabled: bool) -> Self {
        self.priorities = enabled;
        self
    }

    /// Registers the controller with the manager, which runs it once the caches have synced
    /// (and, with leader election, while it leads). `reconcile` gets the object from the
    /// cache and `context`. Its RBAC rules join the manager's
    /// [`rbac_rules`](Manager::rbac_rules).
    ///
    /// # Errors
    ///
    /// [`ManagerError::DuplicateController`] if the name is taken, or
    /// [`ManagerError::Cache`] if a watched kind is already cached as another Rust type.
    pub fn complete<C, F, Fut>(self, reconcile: F, context: Arc<C>) -> Result<(), ManagerError>
    where
        C: Send + Sync + 'static,
        F: Fn(Arc<K>, Arc<C>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Action, ReconcileError>> + Send + 'static,
    {
        let name = self
            .name
            .clone()
            .unwrap_or_else(|| K::KIND.to_ascii_lowercase());
        self.manager.claim_controller_name(&name)?;
        let metrics = self
            .manager
            .metrics()
            .controller(&name, self.max_concurrent);
        let config = QueueConfig::new()
            .name(name.clone())
            .metrics_provider(self.manager.metrics().workqueue(&name));
        let queue = match self.rate_limiter {
            Some(limiter) => RateLimitingQueue::with_config(limiter, config),
            None => RateLimitingQueue::with_config(default_controller_rate_limiter(), config),
        };
        let filters: Arc<[Predicate]> = self.event_filters.into();
        let store = self.manager.store::<K>()?;
        let for_predicate = combine(self.for_predicates);
        let target = Target {
            queue: queue.clone(),
            filters,
            priorities: self.priorities,
        };
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
        let reconcile = Arc::new(move |obj, ctx| {
            Box::pin(with_read_your_writes(ryw, reconcile(obj, ctx)))
                as Pin<Box<dyn Future<Output = _> + Send>>
        });
        let workers = Workers {
            name,
            queue,
            lookup: Arc::new(move |key: &str| {
                let (store, key) = (store.clone(), key.to_owned());
                Box::pin(with_read_your_writes(ryw, async move {
                    store.get_key(&key).await
                }))
            }),
            reconcile,
            context,
            metrics,
            max_concurrent: self.max_concurrent,
        };
        self.manager
            .add_controller(workers.name.clone(), move |stop| {
                Box::pin(workers.run(stop))
            });
        Ok(())
    }
}

impl<K> fmt::Debug for Controller<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Controller")
            .field("kind", &std::any::type_name::<K>())
            .field("name", &self.name)
            .field("watches", &self.wires.len())
            .field("max_concurrent_reconciles", &self.max_concurrent)
            .field("rbac", &self.rules)
            .finish_non_exhaustive()
    }
}

/// All of `predicates`, as one (none: `None`).
fn combine(predicates: Vec<Predicate>) -> Option<Predicate> {
    predicates.into_iter().reduce(Predicate::and)
}

/// Where a controller's handlers put keys: its queue, behind its event filters.
#[derive(Clone)]
struct Target {
    queue: Queue,
    filters: Arc<[Predicate]>,
    /// Initial-list events and unchanged resyncs enter at [`LOW_PRIORITY`].
    priorities: bool,
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
        target: target.clone(),
        predicate,
        both_on_update,
        map,
        _kind: std::marker::PhantomData,
    });
    for informer in store.informers() {
        informer.add_event_handler(handler.clone())?;
    }
    Ok(())
}

/// The event handler behind every watch: filter, map to keys, queue.
struct Enqueue<D, M> {
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
    fn enqueue(&self, obj: &Raw<D>, low: bool) {
        let queue = &self.target.queue;
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
    fn on_add(&self, obj: &Arc<Raw<D>>, initial: bool) {
        if self.passes(&Event::Create(&**obj)) {
            self.enqueue(obj, initial);
        }
    }

    fn on_update(&self, old: &Arc<Raw<D>>, new: &Arc<Raw<D>>) {
        if self.passes(&Event::Update {
            old: &**old,
            new: &**new,
        }) {
            // A resync re-delivers an object unchanged: same resourceVersion.
            use informer::Object;
            let unchanged = (**old).resource_version() == (**new).resource_version();
            if self.both_on_update {
                self.enqueue(old, unchanged);
            }
            self.enqueue(new, unchanged);
        }
    }

    fn on_delete(&self, obj: &DeletedObject<Raw<D>>) {
        // A tombstone without its last state cannot be mapped: nothing is known of it.
        if let Some(obj) = obj.object()
            && self.passes(&Event::Delete(&**obj))
        {
            self.enqueue(obj, false);
        }
    }
}

// === the workers ===

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;
type Lookup<K> = Arc<dyn Fn(&str) -> BoxFuture<Result<Option<Arc<K>>, CacheError>> + Send + Sync>;
type Reconcile<K, C> =
    Arc<dyn Fn(Arc<K>, Arc<C>) -> BoxFuture<Result<Action, ReconcileError>> + Send + Sync>;

/// A controller's queue and its workers, ready to run.
pub(crate) struct Workers<K, C> {
    name: String,
    queue: Queue,
    lookup: Lookup<K>,
    reconcile: Reconcile<K, C>,
    context: Arc<C>,
    metrics: ControllerMetrics,
    max_concurrent: usize,
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
                        this.process(&key, priority).await;
                        this.queue.done(&key);
                    }
                }
                .in_current_span(),
            );
        }
        while workers.join_next().await.is_some() {}
        this.queue.shut_down();
        tracing::info!(controller = %this.name, "all workers finished");
    }

    /// Reconciles `key`, handed out at `priority`, once and queues it again as the outcome
    /// asks.
    async fn process(&self, key: &Key, priority: i32) {
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
        let (namespace, name) = informer::split_key(key).unwrap_or(("", key));
        // The object's name is `object`: JSON logs write a span's own name as `name`, and a
        // second `name` key would hide one of the two.
        let span = tracing::info_span!(
            "reconcile",
            controller = %self.name,
            namespace,
            object = name,
            reconcile_id = %reconcile_id(),
        );
        span.in_scope(|| tracing::debug!("reconciling"));
        let started = Instant::now();
        self.metrics.worker_started();
        let outcome = CatchUnwind((self.reconcile)(object, self.context.clone()))
            .instrument(span.clone())
            .await;
        self.metrics.worker_stopped();
        let elapsed = started.elapsed();
        let _entered = span.enter();
        // A requeue keeps the priority unless the action sets one.
        let requeue_at = match &outcome {
            Ok(Ok(action)) => action.priority.unwrap_or(priority),
            _ => priority,
        };
        let retry = AddOpts::new().priority(requeue_at).rate_limited();
        let result = match outcome {
            Ok(Ok(action)) => match action.next {
                Next::Done => {
                    self.queue.forget(key);
                    ReconcileResult::Success
                }
                Next::RequeueAfter(delay) => {
                    self.queue.forget(key);
                    let after = AddOpts::new().priority(requeue_at).after(delay);
                    self.queue.add_with(key.clone(), after);
                    ReconcileResult::RequeueAfter
                }
                Next::Requeue => {
                    self.queue.add_with(key.clone(), retry);
                    ReconcileResult::Requeue
                }
            },
            Ok(Err(error)) => {
                self.metrics.error();
                if error.is_terminal() {
                    self.metrics.terminal_error();
                    tracing::error!(%error, "reconcile failed; not retrying");
                } else {
                    tracing::error!(%error, "reconcile failed; retrying with backoff");
                    self.queue.add_with(key.clone(), retry);
                }
                ReconcileResult::Error
            }
            Err(panic) => {
                self.metrics.panicked();
                self.metrics.error();
                tracing::error!(
                    panic = %panic_message(&*panic),
                    "reconcile panicked [recovered]; retrying with backoff"
                );
                self.queue.add_with(key.clone(), retry);
                ReconcileResult::Error
            }
        };
        tracing::debug!(
            result = result.as_label(),
            elapsed_ms = elapsed.as_millis() as u64,
            "reconciled"
        );
        self.metrics.reconciled(result, elapsed);
    }
}

/// Polls a future, turning a panic inside it into an `Err` with the panic's payload.
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
