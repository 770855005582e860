//! The [`SharedIndexInformer`]: a reflector, a queue and an indexer wired together, with
//! any number of event handlers sharing the one cache (client-go's `sharedIndexInformer`).
//!
//! # Implementation Details
//!
//! [`run`](SharedIndexInformer::run) builds the queue — the in-order [`RealFifo`], or with
//! [`FifoKind::Delta`] the [`DeltaFifo`] (whose known objects are the indexer, emitting
//! `Replaced`); either holds the transform — spawns the reflector on it, and spawns the
//! processing task, which pops in a loop. Each pop applies its deltas to the indexer and
//! hands out notifications (client-go's `processDeltas`), oldest delta first: one event
//! from the RealFIFO, or a relist as a tombstone `Deleted` per cached key it lacks and a
//! `Replaced` per listed object, or a resync as a `Sync` per cached object; one key's deltas
//! from the DeltaFIFO.
//!
//! | delta | indexer | notification |
//! |---|---|---|
//! | `Added`, `Updated`, `Replaced`, `Sync`; key not cached | insert | `on_add(obj, is_in_initial_list)` to every handler |
//! | same; key cached, `resourceVersion` changed | insert | `on_update(old, new)` to every handler |
//! | same; key cached, same `resourceVersion` | insert | `on_update(old, new)` only to handlers due for resync |
//! | `Deleted` | remove | `on_delete(object or tombstone)` to every handler |
//!
//! All of it runs under the informer's state mutex, which adding a handler also takes; the
//! `processor` module says what that buys. The DeltaFIFO also holds its own lock meanwhile
//! (see [`DeltaFifo::pop`]); the RealFIFO does not (see [`RealFifo::pop`]). A pop hook
//! ([`on_pop`](SharedIndexInformer::on_pop)) is told each row taken, as a [`PopAction`] per
//! delta, one [`PopTrace`] per key; without one, a pop builds no trace.
//!
//! The processing loop is a task of its own, so that `run` notices its shutdown signal
//! however long the queue is: a pop with items waiting never awaits, and the loop yields
//! only when its cooperative budget is spent.
//!
//! The reflector is built when the informer starts, because its resync period — the
//! informer's *resync check period* — is only final then: a handler registered before the
//! start with a shorter period lowers it.

use std::collections::HashSet;
use std::fmt;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::delta_fifo::{
    Delta, DeltaFifo, DeltaFifoOptions, DeltaObject, DeltaType, PopError, QueueSnapshot,
    Transformer,
};
use crate::handler::EventHandler;
use crate::index::{IndexError, Indexers, namespace_indexers};
use crate::lister::Lister;
use crate::lister_watcher::{Error as WatchError, ListerWatcher};
use crate::metrics::{InformerMetrics, MetricsProvider};
use crate::object::{DeletedFinalStateUnknown, Key, Object};
use crate::processor::{Notification, Processor, Registration};
use crate::real_fifo::{FifoItem, RealFifo};
use crate::reflector::{LastSync, Reflector, ReflectorOptions, ReflectorStore, Trace};
use crate::store::Indexer;
use crate::watermark::Watermark;

/// Why a call on a [`SharedIndexInformer`] was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InformerError {
    /// The call is only allowed before [`run`](SharedIndexInformer::run).
    #[error("informer has already started")]
    Started,
    /// The informer has stopped; it takes no more handlers or indexers.
    #[error("informer has stopped already")]
    Stopped,
    /// The indexers could not be added.
    #[error(transparent)]
    Index(#[from] IndexError),
}

/// Called with every error that ends a list-and-watch round: a failed LIST or watch request
/// (client-go's `WatchErrorHandler`); see [`Reflector::on_watch_error`].
pub type WatchErrorHandler = Arc<dyn Fn(&WatchError) + Send + Sync>;

/// What one pop did: the key's deltas, oldest first, each with what the informer did with it.
/// See [`SharedIndexInformer::on_pop`].
#[derive(Debug)]
pub struct PopTrace<K> {
    /// The key the deltas belong to.
    pub key: Key,
    /// Whether they belong to the first list.
    pub is_in_initial_list: bool,
    /// Each delta and what came of it, in the order they were applied.
    pub steps: Vec<PopStep<K>>,
}

/// One popped delta and what the informer did with it.
#[derive(Debug)]
pub struct PopStep<K> {
    /// The delta, as popped.
    pub delta: Delta<K>,
    /// What it did to the cache, and so which notification it sent.
    pub action: PopAction,
    /// How many handlers the notification went to.
    pub notified: usize,
}

/// What the informer did with one popped delta, and so which notification it sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PopAction {
    /// Not cached: inserted; an add to every handler.
    Add,
    /// Cached at another resourceVersion: replaced; an update to every handler.
    Update,
    /// Cached at the same resourceVersion: replaced; an update to the handlers due for resync.
    Resync,
    /// Removed; a delete to every handler.
    Delete,
    /// A tombstone in a delta other than `Deleted`: ignored.
    Ignore,
}

type PopHook<K> = Arc<dyn Fn(&PopTrace<K>) + Send + Sync>;
type TraceHook = Arc<dyn Fn(&Trace) + Send + Sync>;

/// Which queue an informer pops from; see the [crate docs](crate#two-queues) for how the two
/// differ for a handler.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FifoKind {
    /// The [`RealFifo`], the default: every event popped alone, in arrival order, a relist
    /// applied as one item, handlers notified without the queue's lock held (client-go's
    /// informers since 1.36, where `InOrderInformers` is GA and `AtomicFIFO` and
    /// `UnlockWhileProcessingFIFO` are on).
    #[default]
    InOrder,
    /// The [`DeltaFifo`]: a key's deltas popped together, keys in first-come order, processed
    /// under the queue's lock; client-go's informers until 1.32. Kept as the design that
    /// teaches how an informer compresses a backlog per key, and for comparison.
    Delta,
}

/// How a [`SharedIndexInformer`] behaves.
#[derive(Clone, Debug)]
pub struct InformerOptions {
    /// The default resync period of its handlers, and its initial resync check period;
    /// [`Duration::ZERO`] (the default) never resyncs. See
    /// [`add_event_handler_with_resync`](SharedIndexInformer::add_event_handler_with_resync).
    pub resync_period: Duration,
    /// The reflector's options. Its `resync_period` is ignored: the informer sets it to its
    /// resync check period when it starts.
    pub reflector: ReflectorOptions,
    /// Waits this long before each pop, like a slow consumer, so that deltas pile up in the
    /// queue where [`queue_snapshot`](SharedIndexInformer::queue_snapshot) shows them; for
    /// tracing tools. [`Duration::ZERO`] (the default) pops at once.
    pub pop_delay: Duration,
    /// The queue between the reflector and the cache: the in-order [`RealFifo`] by default.
    pub fifo: FifoKind,
    /// Where the informer's metrics go; `None` (the default) records none. See
    /// [`metrics`](crate::metrics).
    pub metrics: Option<Arc<dyn MetricsProvider>>,
}

impl Default for InformerOptions {
    fn default() -> Self {
        InformerOptions {
            resync_period: Duration::ZERO,
            pop_delay: Duration::ZERO,
            fifo: FifoKind::default(),
            metrics: None,
            reflector: ReflectorOptions {
                name: "informer".into(),
                ..ReflectorOptions::default()
            },
        }
    }
}

impl InformerOptions {
    /// Default options under `name` (for logs), never resyncing.
    pub fn named(name: impl Into<String>) -> Self {
        let mut options = InformerOptions::default();
        options.reflector.name = name.into();
        options
    }
}

type BoxFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// What the informer hands its reflector when it starts.
struct ReflectorParts<K> {
    fifo: Queue<K>,
    options: ReflectorOptions,
    should_resync: Arc<dyn Fn() -> bool + Send + Sync>,
    on_error: Option<WatchErrorHandler>,
    on_trace: Option<TraceHook>,
}

/// Builds and starts the reflector: the lister-watcher's type ends here.
type StartReflector<K> = Box<dyn FnOnce(ReflectorParts<K>) -> (LastSync, BoxFuture) + Send>;

/// Gives every informer its own number, so registrations know where they belong.
static NEXT_INFORMER: AtomicU64 = AtomicU64::new(0);

/// Keeps a local, indexed copy of one collection in step with the API server, and tells any
/// number of [`EventHandler`]s what changed (client-go's `SharedIndexInformer`).
///
/// * **One cache, many handlers.** Every handler has its own unbounded buffer and task: a slow
///   handler delays neither the others nor the informer. Objects are `Arc<K>`s shared by the
///   queue, the [`Indexer`] and every handler.
/// * **Handlers may come late.** One added after [`run`](Self::run) first receives every
///   cached object as an add with `is_in_initial_list = true`, then every later change, with
///   nothing missed or doubled.
/// * **Resync per handler.** A handler's resync re-delivers every cached object as an update
///   with the same `resourceVersion`; only handlers whose period is due receive it. See
///   [`add_event_handler_with_resync`](Self::add_event_handler_with_resync).
/// * **Synced, twice.** [`has_synced`](Self::has_synced) says the first list is in the
///   indexer; [`Registration::has_synced`] says a handler has also *seen* it.
/// * **Deletions are never lost.** A deletion made while the watch was down reaches the
///   handlers after the relist as a tombstone ([`DeletedObject::Tombstone`](crate::DeletedObject)).
///
/// ```
/// use std::time::Duration;
/// use informer::{HandlerFns, InformerOptions, ListerWatcher, SharedIndexInformer};
/// use k8s_openapi::api::core::v1::ConfigMap;
///
/// # async fn example(lister_watcher: impl ListerWatcher<ConfigMap> + 'static) {
/// let informer = SharedIndexInformer::new(lister_watcher, InformerOptions {
///     resync_period: Duration::from_secs(600),
///     ..InformerOptions::named("configmaps")
/// });
/// let registration = informer
///     .add_event_handler(HandlerFns::new().with_add(|cm: &std::sync::Arc<ConfigMap>, _| {
///         println!("{:?}", cm.metadata.name);
///     }))
///     .unwrap();
/// let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
/// let run = informer.run(async { let _ = stopped.await; });
/// # let _ = (registration, stop, run);
/// # }
/// ```
pub struct SharedIndexInformer<K> {
    inner: Arc<Inner<K>>,
}

struct Inner<K> {
    name: Arc<str>,
    indexer: Indexer<K>,
    /// [`InformerOptions::pop_delay`].
    pop_delay: Duration,
    /// [`InformerOptions::fifo`].
    fifo_kind: FifoKind,
    /// Created by `run`.
    fifo: OnceLock<Queue<K>>,
    /// Wakes `wait_synced` callers when `fifo` is set.
    fifo_set: Notify,
    /// The reflector's last synced version, once it exists.
    last_sync: OnceLock<LastSync>,
    /// How far the indexer is up to date; moved by the queue.
    watermark: Watermark,
    /// The informer's series, if [`InformerOptions::metrics`] asked for them.
    metrics: Option<Arc<InformerMetrics>>,
    state: Mutex<State<K>>,
}

/// Everything that changes after construction, behind one mutex: the processing loop holds
/// it while it updates the indexer and hands out notifications.
struct State<K> {
    processor: Processor<K>,
    /// [`InformerOptions::resync_period`]: what `add_event_handler` asks for.
    default_resync: Duration,
    /// Taken by `run`.
    start: Option<StartReflector<K>>,
    reflector_options: ReflectorOptions,
    transform: Option<Transformer<K>>,
    on_watch_error: Option<WatchErrorHandler>,
    on_reflector_trace: Option<TraceHook>,
    on_pop: Option<PopHook<K>>,
}

impl<K: Object> fmt::Debug for SharedIndexInformer<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedIndexInformer")
            .field("name", &self.inner.name)
            .field("cached", &self.inner.indexer.len())
            .finish_non_exhaustive()
    }
}

// === impl SharedIndexInformer ===

impl<K: Object> SharedIndexInformer<K> {
    /// An informer over what `lister_watcher` serves, with the namespace index
    /// ([`NAMESPACE_INDEX`](crate::NAMESPACE_INDEX)). Nothing happens until
    /// [`run`](Self::run).
    pub fn new<LW>(lister_watcher: LW, options: InformerOptions) -> Self
    where
        LW: ListerWatcher<K> + 'static,
    {
        let start: StartReflector<K> = Box::new(move |parts: ReflectorParts<K>| {
            let ReflectorParts {
                fifo,
                options,
                should_resync,
                on_error,
                on_trace,
            } = parts;
            let mut reflector = Reflector::new(lister_watcher, fifo, options)
                .should_resync(move || should_resync());
            if let Some(on_error) = on_error {
                reflector = reflector.on_watch_error(move |e| on_error(e));
            }
            if let Some(on_trace) = on_trace {
                reflector = reflector.on_trace(move |t| on_trace(t));
            }
            let last_sync = reflector.last_sync_resource_version();
            let run: BoxFuture = Box::pin(reflector.run(std::future::pending()));
            (last_sync, run)
        });
        let id = NEXT_INFORMER.fetch_add(1, Ordering::Relaxed);
        let name: Arc<str> = options.reflector.name.as_str().into();
        SharedIndexInformer {
            inner: Arc::new(Inner {
                name: name.clone(),
                indexer: Indexer::new(namespace_indexers()),
                pop_delay: options.pop_delay,
                fifo_kind: options.fifo,
                fifo: OnceLock::new(),
                fifo_set: Notify::new(),
                last_sync: OnceLock::new(),
                watermark: Watermark::default(),
                metrics: options
                    .metrics
                    .map(|provider| Arc::new(InformerMetrics::new(&*provider, &name))),
                state: Mutex::new(State {
                    processor: Processor::new(id, name, options.resync_period),
                    default_resync: options.resync_period,
                    start: Some(start),
                    reflector_options: options.reflector,
                    transform: None,
                    on_watch_error: None,
                    on_reflector_trace: None,
                    on_pop: None,
                }),
            }),
        }
    }

    /// Registers `handler` with the informer's default resync period
    /// ([`InformerOptions::resync_period`]); see
    /// [`add_event_handler_with_resync`](Self::add_event_handler_with_resync).
    ///
    /// # Errors
    ///
    /// [`InformerError::Stopped`] once the informer has stopped.
    pub fn add_event_handler(
        &self,
        handler: impl EventHandler<K>,
    ) -> Result<Registration, InformerError> {
        let default = self.inner.state.lock().default_resync;
        self.add_event_handler_with_resync(handler, default)
    }

    /// Registers `handler`, to be resynced every `resync_period` ([`Duration::ZERO`]: never).
    ///
    /// The period follows client-go's rules. A period below one second is raised to one
    /// second. The informer checks for due resyncs every *resync check period* (initially
    /// [`InformerOptions::resync_period`]), so a handler's effective period is never shorter:
    /// before the informer starts, a shorter period lowers the check period (and every other
    /// handler's effective period is worked out again); after the start, it is raised to the
    /// check period instead. An informer created with a zero period never resyncs, whatever
    /// its handlers ask. [`Registration::resync_period`] tells the outcome.
    ///
    /// If the informer is running, the handler first receives every cached object as an add
    /// with `is_in_initial_list = true`, then every later change. The same handler value
    /// registered twice is two independent registrations.
    ///
    /// # Errors
    ///
    /// [`InformerError::Stopped`] once the informer has stopped.
    pub fn add_event_handler_with_resync(
        &self,
        handler: impl EventHandler<K>,
        resync_period: Duration,
    ) -> Result<Registration, InformerError> {
        let inner = &self.inner;
        let mut state = inner.state.lock();
        if state.processor.is_stopped() {
            tracing::warn!(informer = %inner.name, "handler not added: the informer has stopped already");
            return Err(InformerError::Stopped);
        }
        let listener = state
            .processor
            .add(Box::new(handler), resync_period, || inner.indexer.list());
        drop(state);
        let weak = Arc::downgrade(inner);
        let upstream = Arc::new(move || weak.upgrade().is_some_and(|i| i.has_synced()));
        Ok(Registration::new(listener, upstream))
    }

    /// Removes a handler: it receives nothing more, though a call in progress finishes on its
    /// own. A registration from another informer, or one already removed, is ignored.
    pub fn remove_event_handler(&self, registration: &Registration) {
        self.inner
            .state
            .lock()
            .processor
            .remove(registration.state());
    }

    /// Sets the function applied to every object before it is cached and handed to handlers
    /// (client-go's `SetTransform`), e.g. to drop `metadata.managedFields`. It runs once per
    /// object received from the server, in place, before the object is shared; see
    /// [`Transformer`].
    ///
    /// # Errors
    ///
    /// [`InformerError::Started`] once the informer has started.
    pub fn set_transform(
        &self,
        transform: impl Fn(&mut K) + Send + Sync + 'static,
    ) -> Result<(), InformerError> {
        let mut state = self.inner.state.lock();
        if state.processor.is_started() {
            return Err(InformerError::Started);
        }
        state.transform = Some(Arc::new(transform));
        Ok(())
    }

    /// Sets the function called with every error that ends a list-and-watch round: a failed
    /// LIST or watch request (client-go's `SetWatchErrorHandler`). As in client-go, errors
    /// inside a running watch are only logged; see [`Reflector::on_watch_error`]. The
    /// informer logs every error anyway and goes on.
    ///
    /// # Errors
    ///
    /// [`InformerError::Started`] once the informer has started.
    pub fn set_watch_error_handler(
        &self,
        handler: impl Fn(&WatchError) + Send + Sync + 'static,
    ) -> Result<(), InformerError> {
        let mut state = self.inner.state.lock();
        if state.processor.is_started() {
            return Err(InformerError::Started);
        }
        state.on_watch_error = Some(Arc::new(handler));
        Ok(())
    }

    /// Calls `hook` with every step the reflector takes (see [`Reflector::on_trace`]); for
    /// tracing tools.
    ///
    /// # Errors
    ///
    /// [`InformerError::Started`] once the informer has started.
    pub fn on_reflector_trace(
        &self,
        hook: impl Fn(&Trace) + Send + Sync + 'static,
    ) -> Result<(), InformerError> {
        let mut state = self.inner.state.lock();
        if state.processor.is_started() {
            return Err(InformerError::Started);
        }
        state.on_reflector_trace = Some(Arc::new(hook));
        Ok(())
    }

    /// Calls `hook` after each pop with what the informer did: the key, its deltas, and for
    /// each the change to the cache and the notification sent ([`PopTrace`]); for tracing
    /// tools. Replaces the previous hook; before or after the start.
    ///
    /// The hook runs where the pop runs, under the informer's state mutex (and with the
    /// DeltaFIFO, its lock): keep it short, and call nothing on the informer but its cache
    /// ([`get_indexer`](Self::get_indexer)) and its
    /// [`store_resource_version`](Self::store_resource_version), or it deadlocks. A relist
    /// popped from the RealFIFO is told as one trace per key. Without a hook, a pop costs one
    /// more `Option` check.
    pub fn on_pop(&self, hook: impl Fn(&PopTrace<K>) + Send + Sync + 'static) {
        self.inner.state.lock().on_pop = Some(Arc::new(hook));
    }

    /// What the queue holds: its depth and its first `limit` keys in pop order, each with
    /// its pending deltas ([`DeltaFifo::snapshot`], [`RealFifo::snapshot`]); empty before the
    /// start.
    pub fn queue_snapshot(&self, limit: usize) -> QueueSnapshot {
        self.inner
            .fifo
            .get()
            .map(|fifo| fifo.snapshot(limit))
            .unwrap_or_default()
    }

    /// Adds indices to the cache, indexing what it already holds; before or after the start.
    ///
    /// # Errors
    ///
    /// [`InformerError::Stopped`] once the informer has stopped;
    /// [`InformerError::Index`] if a name is already taken (then nothing is added).
    pub fn add_indexers(&self, indexers: Indexers<K>) -> Result<(), InformerError> {
        let state = self.inner.state.lock();
        if state.processor.is_stopped() {
            return Err(InformerError::Stopped);
        }
        self.inner.indexer.add_indexers(indexers)?;
        Ok(())
    }

    /// The cache. Read it freely; writing to it behind the informer's back breaks the
    /// informer's view of the world.
    pub fn get_indexer(&self) -> &Indexer<K> {
        &self.inner.indexer
    }

    /// A [`Lister`] over the cache.
    pub fn lister(&self) -> Lister<K> {
        Lister::new(self.inner.indexer.clone())
    }

    /// Whether the first list is entirely in the cache: every object the informer's first
    /// list (or streaming list) returned has been popped from the queue and applied to the
    /// indexer. False before [`run`](Self::run); never false again once true.
    pub fn has_synced(&self) -> bool {
        self.inner.has_synced()
    }

    /// Resolves once [`has_synced`](Self::has_synced) is true; never, if it never is (the
    /// informer never runs, or stops first), so race it against your shutdown signal.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe.
    pub async fn wait_synced(&self) {
        loop {
            let mut set = pin!(self.inner.fifo_set.notified());
            set.as_mut().enable();
            if let Some(fifo) = self.inner.fifo.get() {
                fifo.wait_synced().await;
                return;
            }
            set.await;
        }
    }

    /// Whether [`run`](Self::run) has been called.
    pub fn is_started(&self) -> bool {
        self.inner.state.lock().processor.is_started()
    }

    /// Whether the informer has stopped: its [`run`](Self::run) returned, or was dropped.
    pub fn is_stopped(&self) -> bool {
        self.inner.state.lock().processor.is_stopped()
    }

    /// The resourceVersion of the reflector's last list or watch event; `""` before the first
    /// list.
    pub fn last_sync_resource_version(&self) -> String {
        self.inner
            .last_sync
            .get()
            .map(LastSync::get)
            .unwrap_or_default()
    }

    /// The store's resource-version watermark: the highest resource version `R` such that
    /// every event of this informer's list and watch with a resourceVersion `<= R` has been
    /// applied to the indexer (so a [`Lister`] read sees it); 0 before the first list is
    /// applied. For read-your-own-writes: after a write answered with resourceVersion `w`,
    /// a read once this is `>= w` sees that write or something newer.
    ///
    /// Resource versions are compared as integers, as Kubernetes allows since 1.35
    /// (KEP-5504); one that is not an integer moves nothing. How far the watermark may move
    /// depends on the queue:
    ///
    /// * [`FifoKind::InOrder`]: events leave the queue in the order the server sent them, so
    ///   once an event is applied the watermark is its resourceVersion; a relist's objects
    ///   count at the list's resourceVersion once all of the relist is applied.
    /// * [`FifoKind::Delta`]: keys leave the queue in the order they first arrived, not in
    ///   resourceVersion order (`a@5` queued behind `b@3` may be applied first, while a
    ///   newer `b@7` waits behind it), so the watermark only moves when the queue is seen
    ///   empty after a pop: to the highest resourceVersion queued until then. Under a
    ///   steady stream of events it can lag; it never runs ahead.
    ///
    /// A bookmark at `b` moves it to `b` once everything queued before the bookmark is
    /// applied. The watermark never moves down, even when a relist returns an older list.
    pub fn store_resource_version(&self) -> u64 {
        self.inner.watermark.get()
    }

    /// A receiver of [`store_resource_version`](Self::store_resource_version) that is told
    /// each time it moves up, e.g. to wait until it reaches a version:
    ///
    /// ```no_run
    /// # async fn f(informer: informer::SharedIndexInformer<k8s_openapi::api::core::v1::ConfigMap>) {
    /// let written = 1234;
    /// let mut watermark = informer.watch_store_resource_version();
    /// let _ = watermark.wait_for(|&rv| rv >= written).await;
    /// # }
    /// ```
    ///
    /// The channel stays open as long as the informer does: a stopped informer's watermark
    /// just stops moving.
    pub fn watch_store_resource_version(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.watermark.subscribe()
    }

    /// How often the reflector asks whether a handler is due for resync; [`Duration::ZERO`]
    /// if it never does. Final once the informer has started.
    pub fn resync_check_period(&self) -> Duration {
        self.inner.state.lock().processor.resync_check_period()
    }

    /// The informer's name, from [`ReflectorOptions::name`].
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Lists, watches and notifies until `shutdown` completes; then stops every handler,
    /// waits for the handler calls in progress, and returns. Must run on a tokio runtime.
    ///
    /// An informer runs once: a second call logs a warning and returns at once (client-go's
    /// behaviour). Once it has returned, [`is_stopped`](Self::is_stopped) is true and the
    /// informer takes no more handlers.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops the informer as `shutdown` would, except that it cannot wait
    /// for handler calls in progress.
    pub async fn run(&self, shutdown: impl Future<Output = ()> + Send) {
        let Some((fifo, reflector)) = self.start() else {
            return;
        };
        let inner = &*self.inner;
        let mut running = Running {
            inner: &self.inner,
            reflector: Some(reflector),
            process: Some(tokio::spawn(process(self.inner.clone(), fifo))),
        };
        {
            let reflector = running.reflector.as_mut().expect("set above");
            let process = running.process.as_mut().expect("set above");
            tokio::select! {
                () = shutdown => {}
                _ = process => {}
                result = reflector => {
                    tracing::error!(informer = %inner.name, ?result, "the reflector ended on its own: stopping the informer");
                }
            }
        }
        let tasks = running.stop();
        for task in tasks {
            let _ = task.await;
        }
        tracing::debug!(informer = %inner.name, "informer stopped");
    }

    /// Marks the informer started, starts the registered handlers, and builds the queue and
    /// the reflector; `None` if it had started already.
    fn start(&self) -> Option<(Queue<K>, JoinHandle<()>)> {
        let inner = &self.inner;
        let runtime = tokio::runtime::Handle::current();
        let mut state = inner.state.lock();
        if state.processor.is_started() {
            tracing::warn!(informer = %inner.name, "the informer has already been run");
            return None;
        }
        state.processor.start(runtime.clone());
        let fifo = match inner.fifo_kind {
            FifoKind::Delta => Fifo::Delta(
                DeltaFifo::with_options(DeltaFifoOptions {
                    known_objects: Some(Arc::new(inner.indexer.clone())),
                    emit_delta_type_replaced: true,
                    transformer: state.transform.clone(),
                })
                .with_watermark(inner.watermark.clone()),
            ),
            FifoKind::InOrder => Fifo::InOrder(
                RealFifo::new(state.transform.clone()).with_watermark(inner.watermark.clone()),
            ),
        };
        let fifo = Queue {
            fifo,
            metrics: inner.metrics.clone(),
            watermark: inner.watermark.clone(),
        };
        if let Some(metrics) = &inner.metrics {
            metrics.heard();
        }
        let check = state.processor.resync_check_period();
        let mut options = state.reflector_options.clone();
        options.resync_period = (!check.is_zero()).then_some(check);
        let weak = Arc::downgrade(inner);
        let should_resync = Arc::new(move || {
            weak.upgrade().is_some_and(|inner| {
                inner
                    .state
                    .lock()
                    .processor
                    .should_resync(tokio::time::Instant::now())
            })
        });
        let start = state.start.take().expect("taken only by the first run");
        let (last_sync, reflector) = start(ReflectorParts {
            fifo: fifo.clone(),
            options,
            should_resync,
            on_error: state.on_watch_error.clone(),
            on_trace: state.on_reflector_trace.clone(),
        });
        drop(state);
        let _ = inner.last_sync.set(last_sync);
        let _ = inner.fifo.set(fifo.clone());
        inner.fifo_set.notify_waiters();
        tracing::debug!(informer = %inner.name, resync_check_period = ?check, "informer started");
        Some((fifo, runtime.spawn(reflector)))
    }
}

/// The processing loop: pops until the queue is closed and drained. It runs as its own task,
/// so that however busy it is, `run` sees its shutdown signal at once; and it yields when
/// its cooperative budget is spent, since a pop with items waiting never awaits.
async fn process<K: Object>(inner: Arc<Inner<K>>, fifo: Queue<K>) {
    loop {
        if !inner.pop_delay.is_zero() {
            tokio::time::sleep(inner.pop_delay).await;
        }
        if fifo.pop(&inner).await.is_err() {
            break;
        }
        tokio::task::consume_budget().await;
    }
}

// === impl Inner ===

impl<K: Object> Inner<K> {
    fn has_synced(&self) -> bool {
        self.fifo.get().is_some_and(Queue::has_synced)
    }

    /// Applies one item popped from the in-order queue.
    fn process_item(&self, item: FifoItem<K>, initial: bool) {
        match item {
            FifoItem::Event { key, delta } => self.process(key, [delta], initial),
            FifoItem::ReplacedAll { objects, .. } => self.replace_all(objects, initial),
            FifoItem::SyncAll => self.sync_all(),
        }
    }

    /// Applies a relist in one step, under the state mutex: a tombstone deletion for every
    /// cached key the list does not have (in key order), then `Replaced` for every listed
    /// object. The pop hook hears one pop per key.
    fn replace_all(&self, objects: Vec<(Key, Arc<K>)>, initial: bool) {
        let state = self.state.lock();
        let listed: HashSet<&Key> = objects.iter().map(|(key, _)| key).collect();
        let mut gone: Vec<Key> = self
            .indexer
            .list_keys()
            .into_iter()
            .filter(|key| !listed.contains(key))
            .collect();
        drop(listed);
        gone.sort_unstable();
        for key in gone {
            let obj = self.indexer.get_by_key(&key);
            let tombstone = DeletedFinalStateUnknown {
                key: key.clone(),
                obj,
            };
            let delta = Delta {
                kind: DeltaType::Deleted,
                object: DeltaObject::Tombstone(tombstone),
            };
            self.process_locked(&state, key, [delta], initial);
        }
        for (key, obj) in objects {
            let delta = Delta {
                kind: DeltaType::Replaced,
                object: DeltaObject::Object(obj),
            };
            self.process_locked(&state, key, [delta], initial);
        }
    }

    /// Re-delivers every cached object as `Sync`, under the state mutex: an update to the
    /// handlers due for resync.
    fn sync_all(&self) {
        let state = self.state.lock();
        for key in self.indexer.list_keys() {
            let Some(obj) = self.indexer.get_by_key(&key) else {
                continue;
            };
            let delta = Delta {
                kind: DeltaType::Sync,
                object: DeltaObject::Object(obj),
            };
            self.process_locked(&state, key, [delta], false);
        }
    }

    /// Applies one pop's deltas, all of `key`, to the indexer and hands out the
    /// notifications, oldest delta first (client-go's `processDeltas`); tells the pop hook, if
    /// any. With the DeltaFIFO it runs under the queue's lock.
    fn process(&self, key: Key, deltas: impl IntoIterator<Item = Delta<K>>, initial: bool) {
        self.process_locked(&self.state.lock(), key, deltas, initial);
    }

    /// [`process`](Self::process) with the state mutex held.
    fn process_locked(
        &self,
        state: &State<K>,
        key: Key,
        deltas: impl IntoIterator<Item = Delta<K>>,
        is_in_initial_list: bool,
    ) {
        let mut steps = Vec::new();
        for delta in deltas {
            let traced = state.on_pop.is_some().then(|| delta.clone());
            let (action, notified) = self.apply(&state.processor, &key, delta, is_in_initial_list);
            steps.extend(traced.map(|delta| PopStep {
                delta,
                action,
                notified,
            }));
        }
        if let Some(hook) = &state.on_pop {
            hook(&PopTrace {
                key,
                is_in_initial_list,
                steps,
            });
        }
    }

    /// Applies one delta: one row of the table in the module docs. Returns the row and how
    /// many handlers were notified.
    fn apply(
        &self,
        processor: &Processor<K>,
        key: &Key,
        delta: Delta<K>,
        is_in_initial_list: bool,
    ) -> (PopAction, usize) {
        match (delta.kind, delta.object) {
            (DeltaType::Deleted, object) => {
                self.indexer.remove(key);
                let sent = processor.distribute(Notification::Delete(object), false);
                (PopAction::Delete, sent)
            }
            (_, DeltaObject::Object(obj)) => match self.indexer.insert(key, obj.clone()) {
                Some(old) => {
                    let sync = old.resource_version() == obj.resource_version();
                    let action = if sync {
                        PopAction::Resync
                    } else {
                        PopAction::Update
                    };
                    (
                        action,
                        processor.distribute(Notification::Update { old, new: obj }, sync),
                    )
                }
                None => {
                    let add = Notification::Add {
                        obj,
                        is_in_initial_list,
                    };
                    (PopAction::Add, processor.distribute(add, false))
                }
            },
            (kind, DeltaObject::Tombstone(t)) => {
                tracing::warn!(informer = %self.name, key = %t.key, %kind, "a tombstone in a delta other than Deleted: ignored");
                (PopAction::Ignore, 0)
            }
        }
    }
}

/// The queue an informer pops from, as [`InformerOptions::fifo`] chose it, with what the
/// informer's metrics need.
struct Queue<K> {
    fifo: Fifo<K>,
    metrics: Option<Arc<InformerMetrics>>,
    watermark: Watermark,
}

enum Fifo<K> {
    Delta(DeltaFifo<K>),
    InOrder(RealFifo<K>),
}

impl<K> Clone for Queue<K> {
    fn clone(&self) -> Self {
        let fifo = match &self.fifo {
            Fifo::Delta(q) => Fifo::Delta(q.clone()),
            Fifo::InOrder(q) => Fifo::InOrder(q.clone()),
        };
        Queue {
            fifo,
            metrics: self.metrics.clone(),
            watermark: self.watermark.clone(),
        }
    }
}

/// Calls the same method on whichever queue it is.
macro_rules! each {
    ($queue:expr, $q:ident => $call:expr) => {
        match &$queue.fifo {
            Fifo::Delta($q) => $call,
            Fifo::InOrder($q) => $call,
        }
    };
}

impl<K: Object> Queue<K> {
    /// Pops once into `inner`'s processing; times it for the metrics, if any.
    async fn pop(&self, inner: &Inner<K>) -> Result<(), PopError> {
        let timed = self.metrics.is_some();
        let started = match &self.fifo {
            Fifo::Delta(q) => {
                q.pop(|d, initial| {
                    let started = timed.then(Instant::now);
                    inner.process(d.key().clone(), d, initial);
                    started
                })
                .await
            }
            Fifo::InOrder(q) => {
                q.pop(|item, initial| {
                    let started = timed.then(Instant::now);
                    inner.process_item(item, initial);
                    started
                })
                .await
            }
        }?;
        if let (Some(metrics), Some(started)) = (&self.metrics, started) {
            metrics.processed(started);
            self.observe(metrics);
        }
        Ok(())
    }

    /// Updates the queue's gauges.
    fn observe(&self, metrics: &InformerMetrics) {
        metrics.queued(self.len());
        metrics.store_resource_version(self.watermark.get());
    }

    /// The reflector brought something from the server: the informer heard from it.
    fn heard(&self) {
        if let Some(metrics) = &self.metrics {
            metrics.heard();
            self.observe(metrics);
        }
    }

    fn len(&self) -> usize {
        each!(self, q => q.len())
    }

    fn has_synced(&self) -> bool {
        each!(self, q => q.has_synced())
    }

    async fn wait_synced(&self) {
        each!(self, q => q.wait_synced().await)
    }

    fn close(&self) {
        each!(self, q => q.close())
    }

    fn snapshot(&self, limit: usize) -> QueueSnapshot {
        each!(self, q => q.snapshot(limit))
    }
}

impl<K: Object> ReflectorStore<K> for Queue<K> {
    fn add(&self, object: K) {
        each!(self, q => q.add(object));
        self.heard();
    }

    fn update(&self, object: K) {
        each!(self, q => q.update(object));
        self.heard();
    }

    fn delete(&self, object: K) {
        each!(self, q => q.delete(object));
        self.heard();
    }

    fn replace(&self, objects: Vec<K>, resource_version: &str) {
        each!(self, q => q.replace(objects, resource_version));
        self.heard();
    }

    fn prepare(&self, object: &mut K) {
        each!(self, q => q.transform(object));
    }

    fn replace_prepared(&self, objects: Vec<K>, resource_version: &str) {
        each!(self, q => q.replace_transformed(objects, resource_version));
        self.heard();
    }

    fn resync(&self) {
        each!(self, q => q.resync());
        if let Some(metrics) = &self.metrics {
            self.observe(metrics);
        }
    }

    fn bookmark(&self, resource_version: &str) {
        each!(self, q => q.bookmark(resource_version));
        self.heard();
    }
}

/// A started informer; stopping it (explicitly, or by drop) ends the reflector and the
/// processing loop, closes the FIFO and stops the handlers.
struct Running<'a, K: Object> {
    inner: &'a Arc<Inner<K>>,
    reflector: Option<JoinHandle<()>>,
    process: Option<JoinHandle<()>>,
}

impl<K: Object> Running<'_, K> {
    /// Returns the tasks to await: the handlers' and the processing loop's (which stops at
    /// its next pop).
    fn stop(&mut self) -> Vec<JoinHandle<()>> {
        if let Some(reflector) = self.reflector.take() {
            reflector.abort();
        }
        let process = self.process.take().inspect(JoinHandle::abort);
        if let Some(fifo) = self.inner.fifo.get() {
            fifo.close();
        }
        let mut state = self.inner.state.lock();
        let mut tasks = if state.processor.is_stopped() {
            Vec::new()
        } else {
            state.processor.stop()
        };
        drop(state);
        tasks.extend(process);
        tasks
    }
}

impl<K: Object> Drop for Running<'_, K> {
    fn drop(&mut self) {
        drop(self.stop());
    }
}
