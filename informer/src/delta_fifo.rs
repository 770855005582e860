//! The DeltaFIFO: what happened to each object, queued in first-in first-out order of keys.
//!
//! # Implementation Details
//!
//! The state sits behind one `parking_lot` mutex: `items`, a map from key to its non-empty
//! delta list, and `queue`, the keys in FIFO order. A key is in `queue` if and only if it is
//! in `items`, and at most once. A key's list starts inline (one delta, no allocation) and
//! becomes a vector at its second delta. The [`Key`] allocated when a key enters the queue is
//! handed to `process` inside [`Deltas`] and, through [`Indexer::insert`](crate::Indexer::insert),
//! becomes the indexer's key too, so an object's key is allocated once per queue entry.
//!
//! Objects arrive owned (`K`), are transformed in place, and are wrapped in one `Arc` that the
//! FIFO, the indexer and every handler share; the FIFO never clones an object. `add`, `update`
//! and `replace` run the transformer before taking the lock, to keep the critical section
//! short; `delete` runs it under the lock, after deciding the deletion is news.
//!
//! A `pop` that finds the queue empty registers with a [`tokio::sync::Notify`] *before*
//! releasing the lock, counts itself in `parked`, releases the lock and awaits. A producer
//! that queues something while `parked > 0` wakes the parked pops after releasing the lock,
//! and, since that wakes every one of them, sets `parked` back to zero and counts the wake-up
//! in `wakes`: the next producers, until a pop parks again, touch no `Notify` at all (a
//! reflector queues a whole chunk of events before the popping task runs). Waking re-checks
//! the queue under the lock, so spurious wake-ups are harmless. A pop remembers `wakes` as it
//! was when it parked, so that it uncounts itself — when it wakes, or when its future is
//! dropped while parked — only if no wake-up has uncounted it already. No guard is ever held
//! across an `.await`.
//!
//! `has_synced` is an atomic flag, set under the lock once `populated` is true and
//! `initial_population_count` (listed keys plus queued tombstones of the first `replace`) has
//! dropped to zero. `pop` decrements the count before calling `process` (so the last initial
//! item still gets `is_in_initial_list = true`) and sets the flag only after `process`
//! returns, so a reader who sees `has_synced() == true` also sees that item in the indexer —
//! the guarantee client-go gets from `HasSynced` taking the same lock as `Pop`.
//!
//! [`DeltaFifo::snapshot`], the read-only view for debugging, holds the lock only to clone the
//! first keys and their objects' `Arc`s; it reads their resourceVersions after releasing it.
//!
//! Hash tables never shrink on their own, so when a `pop` empties a queue whose tables grew
//! past 1024 keys (the initial list of a large collection, a burst), it frees them: after
//! the initial sync, memory per cached object is the indexer's alone.
//!
//! Like client-go, a `pop` whose `process` runs for more than 100 ms while more than ten keys
//! wait logs a warning ("slow event handlers blocking the queue"); the clock is read only when
//! both the depth and the log level call for it.

use std::collections::VecDeque;
use std::fmt;
use std::iter::Chain;
use std::pin::pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hashbrown::{HashMap, HashSet};
use parking_lot::{Mutex, MutexGuard};
use tokio::sync::Notify;

use crate::synced::SyncedLatch;
use crate::watermark::{self, Watermark};

use crate::object::{DeletedFinalStateUnknown, Key, Object, key_of, with_object_key};

/// How long `process` may run, with more than ten keys waiting, before `pop` warns.
const SLOW_PROCESS: Duration = Duration::from_millis(100);

/// Queue depth above which `pop` times `process`.
const SLOW_PROCESS_DEPTH: usize = 10;

/// Capacity (in keys) above which a drained FIFO frees its tables instead of keeping them.
const RELEASE_TABLES_ABOVE: usize = 1024;

// === DeltaType, DeltaObject, Delta ===

/// What happened to an object (client-go's `DeltaType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeltaType {
    /// The watch reported the object created.
    Added,
    /// The watch reported the object changed.
    Updated,
    /// The watch reported the object deleted, or a relist found it gone (then the delta
    /// carries a tombstone).
    Deleted,
    /// A relist listed the object (only with
    /// [`emit_delta_type_replaced`](DeltaFifoOptions::emit_delta_type_replaced); `Sync`
    /// otherwise).
    Replaced,
    /// A periodic resync re-delivered the known object; or a relist listed it, when `Replaced`
    /// is not emitted.
    Sync,
}

impl DeltaType {
    /// The client-go name of the type: `"Added"`, `"Updated"`, ….
    pub fn as_str(self) -> &'static str {
        match self {
            DeltaType::Added => "Added",
            DeltaType::Updated => "Updated",
            DeltaType::Deleted => "Deleted",
            DeltaType::Replaced => "Replaced",
            DeltaType::Sync => "Sync",
        }
    }
}

impl fmt::Display for DeltaType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The object a delta carries: the object itself, or, for a deletion a relist discovered, a
/// tombstone.
pub enum DeltaObject<K> {
    /// The object as the API server (or the known objects, for `Sync`) reported it.
    Object(Arc<K>),
    /// The object was deleted while the watch was down; only `Deleted` deltas carry this.
    Tombstone(DeletedFinalStateUnknown<K>),
}

impl<K> DeltaObject<K> {
    /// The object, or the tombstone's last known object (which may be stale, or missing).
    pub fn object(&self) -> Option<&Arc<K>> {
        match self {
            DeltaObject::Object(obj) => Some(obj),
            DeltaObject::Tombstone(tombstone) => tombstone.obj.as_ref(),
        }
    }

    /// The tombstone, if this is one.
    pub fn tombstone(&self) -> Option<&DeletedFinalStateUnknown<K>> {
        match self {
            DeltaObject::Object(_) => None,
            DeltaObject::Tombstone(tombstone) => Some(tombstone),
        }
    }

    /// Whether this is a tombstone.
    pub fn is_tombstone(&self) -> bool {
        matches!(self, DeltaObject::Tombstone(_))
    }
}

impl<K: Object> DeltaObject<K> {
    /// The key: the tombstone's key, or the object's `namespace/name` (client-go's
    /// `DeletionHandlingMetaNamespaceKeyFunc`).
    pub fn key(&self) -> Key {
        match self {
            DeltaObject::Object(obj) => key_of(&**obj),
            DeltaObject::Tombstone(tombstone) => tombstone.key.clone(),
        }
    }
}

impl<K> Clone for DeltaObject<K> {
    fn clone(&self) -> Self {
        match self {
            DeltaObject::Object(obj) => DeltaObject::Object(obj.clone()),
            DeltaObject::Tombstone(tombstone) => DeltaObject::Tombstone(tombstone.clone()),
        }
    }
}

impl<K: fmt::Debug> fmt::Debug for DeltaObject<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeltaObject::Object(obj) => f.debug_tuple("Object").field(obj).finish(),
            DeltaObject::Tombstone(t) => f.debug_tuple("Tombstone").field(t).finish(),
        }
    }
}

/// One event for one object.
pub struct Delta<K> {
    /// What happened.
    pub kind: DeltaType,
    /// The object it happened to.
    pub object: DeltaObject<K>,
}

impl<K> Clone for Delta<K> {
    fn clone(&self) -> Self {
        Self {
            kind: self.kind,
            object: self.object.clone(),
        }
    }
}

impl<K: fmt::Debug> fmt::Debug for Delta<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Delta")
            .field("kind", &self.kind)
            .field("object", &self.object)
            .finish()
    }
}

// === impl Deltas ===

/// Every delta queued for one key, oldest first; never empty. What [`DeltaFifo::pop`] hands
/// to `process`.
pub struct Deltas<K> {
    key: Key,
    list: DeltaList<K>,
}

/// A non-empty list of deltas, inline while it holds one.
enum DeltaList<K> {
    One(Delta<K>),
    Many(Vec<Delta<K>>),
}

impl<K> Deltas<K> {
    /// The key all these deltas belong to.
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// The deltas, oldest first.
    pub fn as_slice(&self) -> &[Delta<K>] {
        self.list.as_slice()
    }

    /// The deltas, oldest first.
    pub fn iter(&self) -> std::slice::Iter<'_, Delta<K>> {
        self.as_slice().iter()
    }

    /// The oldest delta.
    pub fn oldest(&self) -> &Delta<K> {
        &self.as_slice()[0]
    }

    /// The newest delta.
    pub fn newest(&self) -> &Delta<K> {
        self.list.newest()
    }
}

impl<K> DeltaList<K> {
    fn as_slice(&self) -> &[Delta<K>] {
        match self {
            DeltaList::One(delta) => std::slice::from_ref(delta),
            DeltaList::Many(list) => list,
        }
    }

    fn newest(&self) -> &Delta<K> {
        match self {
            DeltaList::One(delta) => delta,
            DeltaList::Many(list) => list.last().expect("a delta list is never empty"),
        }
    }

    fn newest_mut(&mut self) -> &mut Delta<K> {
        match self {
            DeltaList::One(delta) => delta,
            DeltaList::Many(list) => list.last_mut().expect("a delta list is never empty"),
        }
    }

    /// Appends `delta`, collapsing a trailing `Deleted`/`Deleted` pair into one: the older,
    /// unless the older is a tombstone (client-go's `dedupDeltas`).
    fn push(&mut self, delta: Delta<K>) {
        if delta.kind == DeltaType::Deleted {
            let last = self.newest_mut();
            if last.kind == DeltaType::Deleted {
                if last.object.is_tombstone() {
                    *last = delta;
                }
                return;
            }
        }
        match self {
            DeltaList::Many(list) => list.push(delta),
            DeltaList::One(_) => {
                let DeltaList::One(first) = std::mem::replace(self, DeltaList::Many(Vec::new()))
                else {
                    unreachable!("matched One above")
                };
                *self = DeltaList::Many(vec![first, delta]);
            }
        }
    }
}

impl<K> Clone for Deltas<K> {
    fn clone(&self) -> Self {
        Self {
            key: self.key.clone(),
            list: self.list.clone(),
        }
    }
}

impl<K> Clone for DeltaList<K> {
    fn clone(&self) -> Self {
        match self {
            DeltaList::One(delta) => DeltaList::One(delta.clone()),
            DeltaList::Many(list) => DeltaList::Many(list.clone()),
        }
    }
}

impl<K: fmt::Debug> fmt::Debug for Deltas<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Deltas")
            .field("key", &self.key)
            .field("deltas", &self.as_slice())
            .finish()
    }
}

impl<'a, K> IntoIterator for &'a Deltas<K> {
    type Item = &'a Delta<K>;
    type IntoIter = std::slice::Iter<'a, Delta<K>>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<K> IntoIterator for Deltas<K> {
    type Item = Delta<K>;
    type IntoIter = DeltasIntoIter<K>;

    fn into_iter(self) -> DeltasIntoIter<K> {
        let (one, many) = match self.list {
            DeltaList::One(delta) => (Some(delta), Vec::new()),
            DeltaList::Many(list) => (None, list),
        };
        DeltasIntoIter(one.into_iter().chain(many))
    }
}

/// The deltas of a [`Deltas`], by value, oldest first.
pub struct DeltasIntoIter<K>(Chain<std::option::IntoIter<Delta<K>>, std::vec::IntoIter<Delta<K>>>);

impl<K> Iterator for DeltasIntoIter<K> {
    type Item = Delta<K>;

    fn next(&mut self) -> Option<Delta<K>> {
        self.0.next()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

// === QueuedDelta, QueueSnapshot ===

/// One delta waiting in the FIFO, as [`DeltaFifo::snapshot`] reports it: its type and its
/// object's resourceVersion, without the object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedDelta {
    /// What happened.
    pub kind: DeltaType,
    /// The object's `metadata.resourceVersion`; for a tombstone, its last known object's.
    /// `None` if the object has none, or the tombstone carries no object.
    pub resource_version: Option<String>,
    /// Whether the delta carries a [`DeletedFinalStateUnknown`] tombstone (a deletion a relist
    /// discovered) rather than the object.
    pub tombstone: bool,
}

/// What the FIFO held at one moment: its depth and the keys at the head of the queue, each
/// with its pending deltas. Made by [`DeltaFifo::snapshot`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueSnapshot {
    /// How many keys were queued, including those beyond the snapshot's limit.
    pub depth: usize,
    /// The first queued keys, in the order [`pop`](DeltaFifo::pop) hands them out, each with
    /// its deltas, oldest first.
    pub keys: Vec<(Key, Vec<QueuedDelta>)>,
}

/// A delta as [`DeltaFifo::snapshot`] copies it under the lock: type, whether a tombstone,
/// and the object, whose resourceVersion it reads after releasing the lock.
type HeldDelta<K> = (DeltaType, bool, Option<Arc<K>>);

// === KnownObjects, options, errors ===

/// Read access to the objects the consumer already holds (client-go's `KeyListerGetter`):
/// normally the informer's [`Indexer`](crate::Indexer).
///
/// The DeltaFIFO consults it, under its own lock, to find deletions a relist implies, to
/// resync, and to decide whether a `delete` is news.
pub trait KnownObjects<K>: Send + Sync {
    /// Every known key, in any order.
    fn list_keys(&self) -> Vec<Key>;
    /// The object known under `key`.
    fn get_by_key(&self, key: &str) -> Option<Arc<K>>;
}

/// A function applied to every object entering the FIFO, before it is shared (client-go's
/// `TransformFunc`); typically it drops `metadata.managedFields` to save memory.
///
/// It mutates the object in place and cannot fail. It must not change the namespace or name:
/// the key is computed from the transformed object.
pub type Transformer<K> = Arc<dyn Fn(&mut K) + Send + Sync>;

/// How to build a [`DeltaFifo`] (client-go's `DeltaFIFOOptions`).
pub struct DeltaFifoOptions<K> {
    /// The objects the consumer holds (the informer's indexer). Without them, `replace` only
    /// detects deletions among queued keys, `resync` does nothing, and `delete` is ignored
    /// unless the key is queued.
    pub known_objects: Option<Arc<dyn KnownObjects<K>>>,
    /// Whether `replace` emits [`DeltaType::Replaced`] (true) or [`DeltaType::Sync`] (false,
    /// the default, as in client-go). The informer sets it.
    pub emit_delta_type_replaced: bool,
    /// Applied to every object entering the FIFO; see [`Transformer`].
    pub transformer: Option<Transformer<K>>,
}

impl<K> Default for DeltaFifoOptions<K> {
    fn default() -> Self {
        Self {
            known_objects: None,
            emit_delta_type_replaced: false,
            transformer: None,
        }
    }
}

/// Why [`DeltaFifo::pop`] returned without an item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PopError {
    /// The FIFO was closed and everything queued has been popped.
    #[error("delta fifo is closed")]
    Closed,
}

// === impl DeltaFifo ===

/// The DeltaFIFO: a queue of keys, each with the [`Deltas`] that happened to its object.
///
/// A cheap handle: clones share the same queue, so the reflector can hold one and the
/// informer's processing loop another.
///
/// The reflector feeds it the events it sees — [`add`](DeltaFifo::add),
/// [`update`](DeltaFifo::update), [`delete`](DeltaFifo::delete) from the watch,
/// [`replace`](DeltaFifo::replace) after every LIST, [`resync`](DeltaFifo::resync) on its
/// timer — and the informer [`pop`](DeltaFifo::pop)s [`Deltas`] one key at a time and applies
/// them to the [`Indexer`](crate::Indexer), which the FIFO reads back as its
/// [`KnownObjects`]. This is client-go's classic `DeltaFIFO` with `KnownObjects` and, in the
/// informer, `EmitDeltaTypeReplaced`; its semantics are kept exactly:
///
/// * **One entry per key, in FIFO order of keys.** Every event for an object appends a
///   [`Delta`] to that key's list, oldest first. A key already waiting keeps its place in line;
///   popping hands over the whole list at once.
/// * **Nothing is collapsed** except two consecutive `Deleted` deltas, which become one: the
///   older, unless the older is a tombstone, in which case the newer.
/// * **`delete` of a key nobody knows** (neither queued nor in the known objects) is ignored:
///   a relist already reported it.
/// * **`replace(list)`** appends `Replaced` (or `Sync`, see
///   [`emit_delta_type_replaced`](DeltaFifoOptions::emit_delta_type_replaced)) for every listed
///   object, then a [`DeletedFinalStateUnknown`] tombstone for every queued key missing from the
///   list (carrying its newest object), then one for every known key missing from the list
///   and not queued (carrying the known object).
/// * **`resync`** appends `Sync` with the known object for every known key that has nothing
///   queued; a key with queued deltas is skipped, so a resync never overtakes a newer update.
/// * **[`has_synced`](DeltaFifo::has_synced)** turns true once the first `replace` — every
///   object it listed and every tombstone it queued — has been popped and processed, or at
///   once if an `add`, `update` or `delete` came before any `replace`, or if the first
///   `replace` was empty. It never turns false again.
/// * **The transformer** runs once on every object entering the FIFO from outside (`add`,
///   `update`, a `delete` that is not ignored, each object of `replace`), before it is wrapped
///   in an `Arc`. It never runs on tombstones or on `resync`'s objects, which come from the
///   known objects and were transformed on the way in.
/// * **`pop` processes under the FIFO lock**, see below.
///
/// # Popping
///
/// [`pop`](DeltaFifo::pop) waits (asynchronously) for a key, removes it with its deltas, and
/// calls your `process` function with them *while holding the FIFO's lock*. Nothing else
/// touches the FIFO until `process` returns: no other `pop` interleaves, and an `add`, a
/// `replace` or a `resync` that arrives meanwhile waits, then sees the result — an event for
/// the popped key is queued as a new entry behind the others, and `replace` and `resync` see
/// the known objects exactly as `process` left them. The informer relies on this to update
/// its indexer atomically with respect to the FIFO. The price is client-go's: a slow
/// `process` blocks the producers. Keep it short and non-blocking (update the store, hand
/// notifications to channels), and never call back into the FIFO from it — that deadlocks.
///
/// # Example: the informer's loop
///
/// ```
/// use std::sync::Arc;
/// use informer::{DeltaFifo, DeltaFifoOptions, DeltaObject, DeltaType, Indexer};
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
///
/// let indexer: Indexer<ConfigMap> = Indexer::default();
/// let fifo = DeltaFifo::with_options(DeltaFifoOptions {
///     known_objects: Some(Arc::new(indexer.clone())),
///     emit_delta_type_replaced: true,
///     ..DeltaFifoOptions::default()
/// });
/// let cm = |name: &str| ConfigMap {
///     metadata: ObjectMeta { namespace: Some("ns".into()), name: Some(name.into()), ..Default::default() },
///     ..Default::default()
/// };
///
/// fifo.replace([cm("a"), cm("b")], "1");
/// fifo.update(cm("a"));
/// # let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
/// # rt.block_on(async {
/// while !fifo.has_synced() {
///     fifo.pop(|deltas, _is_in_initial_list| {
///         for delta in &deltas {
///             match (&delta.kind, &delta.object) {
///                 (DeltaType::Deleted, _) => { indexer.remove(deltas.key()); }
///                 (_, DeltaObject::Object(obj)) => { indexer.insert(deltas.key(), obj.clone()); }
///                 (_, DeltaObject::Tombstone(_)) => unreachable!("only Deleted carries tombstones"),
///             }
///         }
///     })
///     .await
///     .unwrap();
/// }
/// # });
/// assert_eq!(indexer.len(), 2);
/// ```
pub struct DeltaFifo<K> {
    shared: Arc<Shared<K>>,
}

struct Shared<K> {
    state: Mutex<State<K>>,
    known_objects: Option<Arc<dyn KnownObjects<K>>>,
    emit_delta_type_replaced: bool,
    transformer: Option<Transformer<K>>,
    /// Wakes pops parked on an empty queue: when something is queued, and on close.
    item_added: Notify,
    /// `populated && initial_population_count == 0`, published after the item that got it
    /// there was processed. Never goes back to false.
    synced: SyncedLatch,
    /// Set by an informer: advanced to `queued_rv` whenever the queue is seen empty.
    watermark: Option<Watermark>,
}

struct State<K> {
    /// The highest resource version ever queued (event objects, `replace`, `bookmark`).
    queued_rv: u64,
    /// Each queued key's deltas; never an empty list. Same keys as `queue`.
    items: HashMap<Key, DeltaList<K>>,
    /// Queued keys, oldest first; each at most once, each in `items`.
    queue: VecDeque<Key>,
    /// Whether anything was ever queued by `add`, `update`, `delete` or `replace`.
    populated: bool,
    /// Items of the first `replace` not yet popped (listed keys plus queued tombstones).
    initial_population_count: usize,
    /// Set by `close`; `pop` returns [`PopError::Closed`] once the queue is also empty.
    closed: bool,
    /// Pops registered with `item_added`, waiting for an item and not yet woken.
    parked: usize,
    /// Wake-ups sent to parked pops; each sets `parked` to zero.
    wakes: u64,
}

impl<K> Clone for DeltaFifo<K> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<K: Object> Default for DeltaFifo<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K> fmt::Debug for DeltaFifo<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.state.lock();
        f.debug_struct("DeltaFifo")
            .field("len", &state.queue.len())
            .field("populated", &state.populated)
            .field("initial_population_count", &state.initial_population_count)
            .field("closed", &state.closed)
            .finish_non_exhaustive()
    }
}

impl<K: Object> DeltaFifo<K> {
    /// A FIFO without known objects or transformer, emitting `Sync` on `replace`.
    pub fn new() -> Self {
        Self::with_options(DeltaFifoOptions::default())
    }

    /// A FIFO built from `options`.
    pub fn with_options(options: DeltaFifoOptions<K>) -> Self {
        let DeltaFifoOptions {
            known_objects,
            emit_delta_type_replaced,
            transformer,
        } = options;
        Self {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    queued_rv: 0,
                    items: HashMap::new(),
                    queue: VecDeque::new(),
                    populated: false,
                    initial_population_count: 0,
                    closed: false,
                    parked: 0,
                    wakes: 0,
                }),
                known_objects,
                emit_delta_type_replaced,
                transformer,
                item_added: Notify::new(),
                synced: SyncedLatch::default(),
                watermark: None,
            }),
        }
    }

    /// Has the FIFO move `watermark`: to the highest resource version queued so far, each
    /// time the queue is seen empty after a pop, a `replace` or a `bookmark`. Keys pop in the
    /// order they first arrived, not in resource-version order, so an emptied queue is the
    /// only point where everything up to what was queued is known to be applied.
    pub(crate) fn with_watermark(mut self, watermark: Watermark) -> Self {
        Arc::get_mut(&mut self.shared)
            .expect("set on a new FIFO")
            .watermark = Some(watermark);
        self
    }

    /// Queues an [`Added`](DeltaType::Added) delta for `obj`.
    ///
    /// Accepted after [`close`](Self::close) too, as in client-go: the item is still popped.
    pub fn add(&self, obj: K) {
        self.queue_object(DeltaType::Added, obj);
    }

    /// Queues an [`Updated`](DeltaType::Updated) delta for `obj`.
    pub fn update(&self, obj: K) {
        self.queue_object(DeltaType::Updated, obj);
    }

    /// Queues a [`Deleted`](DeltaType::Deleted) delta carrying `obj` — unless its key is
    /// neither queued nor known, in which case a relist already reported the deletion and the
    /// call does nothing (the transformer does not run either).
    pub fn delete(&self, mut obj: K) {
        let shared = &*self.shared;
        let rv = watermark::parse(obj.resource_version());
        let mut state = shared.state.lock();
        state.populated = true;
        state.saw(rv);
        let known = shared.known_objects.as_deref();
        let news = with_object_key(&obj, |key| {
            state.items.contains_key(key) || known.is_some_and(|k| k.get_by_key(key).is_some())
        });
        if news {
            if let Some(transform) = &shared.transformer {
                transform(&mut obj);
            }
            state.push_object(DeltaType::Deleted, Arc::new(obj));
        }
        shared.release(state);
    }

    /// Replaces the FIFO's view of the world with `list`, the result of a LIST.
    ///
    /// Atomically: queues `Replaced` (or `Sync`) for each listed object, in list order; then a
    /// `Deleted` tombstone for every queued key not in `list`, carrying its newest object (a
    /// tombstone's object, if the newest delta is already a tombstone); then a `Deleted`
    /// tombstone for every known key neither in `list` nor queued, carrying the known object.
    /// The first `replace` (before any `add`, `update` or `delete`) sets the number of items
    /// [`has_synced`](Self::has_synced) waits for: the distinct listed keys plus the queued
    /// tombstones.
    ///
    /// The resource version counts only for the informer's
    /// [store resource version](crate::SharedIndexInformer::store_resource_version).
    pub fn replace(&self, list: impl IntoIterator<Item = K>, resource_version: &str) {
        let list = list
            .into_iter()
            .map(|mut obj| {
                self.transform(&mut obj);
                Arc::new(obj)
            })
            .collect();
        self.replace_shared(list, resource_version);
    }

    /// Runs the FIFO's transformer on `obj`, for an object that enters later through
    /// [`replace_transformed`](Self::replace_transformed).
    pub fn transform(&self, obj: &mut K) {
        if let Some(transform) = &self.shared.transformer {
            transform(obj);
        }
    }

    /// [`replace`](Self::replace) with objects that went through
    /// [`transform`](Self::transform) already: the transformer does not run again.
    pub fn replace_transformed(&self, list: impl IntoIterator<Item = K>, resource_version: &str) {
        self.replace_shared(list.into_iter().map(Arc::new).collect(), resource_version);
    }

    fn replace_shared(&self, list: Vec<Arc<K>>, resource_version: &str) {
        let shared = &*self.shared;
        let kind = if shared.emit_delta_type_replaced {
            DeltaType::Replaced
        } else {
            DeltaType::Sync
        };

        let mut state = shared.state.lock();
        let st = &mut *state;
        st.saw(watermark::parse(Some(resource_version)));
        let mut listed: HashSet<Key> = HashSet::with_capacity(list.len());
        for obj in list {
            listed.insert(st.push_object_keyed(kind, obj));
        }

        let mut queued_deletions = 0;
        for (key, deltas) in st.items.iter_mut() {
            if listed.contains(key) {
                continue;
            }
            let obj = deltas.newest().object.object().cloned();
            deltas.push(tombstone(key.clone(), obj));
            queued_deletions += 1;
        }

        if let Some(known) = &shared.known_objects {
            for key in known.list_keys() {
                if listed.contains(&key) || st.items.contains_key(&key) {
                    continue;
                }
                let obj = known.get_by_key(&key);
                if obj.is_none() {
                    tracing::info!(key = %key, "key does not exist in known objects store, placing tombstone without object");
                }
                st.push_new(key.clone(), tombstone(key, obj));
                queued_deletions += 1;
            }
        }

        if !st.populated {
            st.populated = true;
            st.initial_population_count = listed.len() + queued_deletions;
        }
        shared.release(state);
    }

    /// Queues a [`Sync`](DeltaType::Sync) delta, carrying the known object, for every known
    /// key that has nothing queued. Does nothing without known objects.
    pub fn resync(&self) {
        let shared = &*self.shared;
        let Some(known) = &shared.known_objects else {
            return;
        };
        let mut state = shared.state.lock();
        for key in known.list_keys() {
            if state.items.contains_key(&key) {
                continue;
            }
            let Some(obj) = known.get_by_key(&key) else {
                tracing::info!(key = %key, "key does not exist in known objects store, unable to queue object for sync");
                continue;
            };
            state.push_new(
                key,
                Delta {
                    kind: DeltaType::Sync,
                    object: DeltaObject::Object(obj),
                },
            );
        }
        shared.release(state);
    }

    /// Waits for a queued key, removes it, and returns what `process` returns for its deltas.
    ///
    /// `process` gets the key's [`Deltas`] and `is_in_initial_list`: true while the FIFO has
    /// not [synced](Self::has_synced), i.e. for every item of the first `replace`, the last one
    /// included. It runs synchronously **under the FIFO's lock**: see the
    /// [type documentation](DeltaFifo#popping) for what that guarantees, and never call the FIFO
    /// from inside it (that deadlocks). The item is gone from the FIFO whatever `process` does;
    /// there is no requeue (client-go removed `ErrRequeue`).
    ///
    /// # Errors
    ///
    /// [`PopError::Closed`] once [`close`](Self::close) was called and the queue is empty.
    /// Items queued before (or after) `close` are still handed out first.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropping the future before it completes removes nothing. `process` runs
    /// inside a single poll, so once called it completes.
    pub async fn pop<F, R>(&self, process: F) -> Result<R, PopError>
    where
        F: FnOnce(Deltas<K>, bool) -> R,
    {
        let shared = &*self.shared;
        let mut parked = Parked {
            shared,
            since: None,
        };
        loop {
            let mut notified = pin!(shared.item_added.notified());
            {
                let mut state = shared.state.lock();
                parked.unpark(&mut state);
                if !state.queue.is_empty() {
                    return Ok(shared.pop_locked(state, process));
                }
                if state.closed {
                    return Err(PopError::Closed);
                }
                notified.as_mut().enable();
                state.parked += 1;
                parked.since = Some(state.wakes);
            }
            notified.await;
        }
    }

    /// Like [`pop`](Self::pop), but returns `None` at once if nothing is queued (closed or
    /// not).
    pub fn try_pop<F, R>(&self, process: F) -> Option<R>
    where
        F: FnOnce(Deltas<K>, bool) -> R,
    {
        let state = self.shared.state.lock();
        if state.queue.is_empty() {
            return None;
        }
        Some(self.shared.pop_locked(state, process))
    }

    /// Whether the first `replace` has been fully popped and processed (or the FIFO was
    /// populated by `add`, `update` or `delete` first). See the
    /// [type documentation](DeltaFifo). Lock-free.
    pub fn has_synced(&self) -> bool {
        self.shared.synced.is_set()
    }

    /// Resolves once [`has_synced`](Self::has_synced) is true; never, if it never is (for
    /// example after `close`), so race it against your shutdown signal.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe.
    pub async fn wait_synced(&self) {
        self.shared.synced.wait().await;
    }

    /// Closes the FIFO: parked and future pops return [`PopError::Closed`] once the queue is
    /// empty.
    pub fn close(&self) {
        let mut state = self.shared.state.lock();
        state.closed = true;
        state.woke_parked();
        drop(state);
        self.shared.item_added.notify_waiters();
    }

    /// Whether [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.shared.state.lock().closed
    }

    /// The number of queued keys.
    pub fn len(&self) -> usize {
        self.shared.state.lock().queue.len()
    }

    /// Whether no key is queued.
    pub fn is_empty(&self) -> bool {
        self.shared.state.lock().queue.is_empty()
    }

    /// The queued keys, in the order they will be popped.
    pub fn queued_keys(&self) -> Vec<Key> {
        self.shared.state.lock().queue.iter().cloned().collect()
    }

    /// What the FIFO holds right now, for debugging and teaching: its depth and, for the first
    /// `limit` keys in the order they will be popped, each key's pending deltas (type and
    /// resourceVersion, oldest first). Removes nothing.
    ///
    /// The view is consistent — depth, keys and deltas all come from one acquisition of the
    /// FIFO's lock — but may be stale as soon as it returns. It costs `O(limit)` plus the
    /// deltas of those keys, however deep the queue; under the lock it only clones keys and
    /// `Arc`s, and reads the resourceVersions after releasing it. Client-go has no
    /// equivalent; its `ListKeys` is [`queued_keys`](Self::queued_keys) here, without the
    /// order.
    ///
    /// ```
    /// use informer::{DeltaFifo, DeltaType};
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    ///
    /// let cm = |name: &str, rv: &str| ConfigMap {
    ///     metadata: ObjectMeta {
    ///         namespace: Some("ns".into()),
    ///         name: Some(name.into()),
    ///         resource_version: Some(rv.into()),
    ///         ..Default::default()
    ///     },
    ///     ..Default::default()
    /// };
    /// let fifo = DeltaFifo::new();
    /// fifo.add(cm("a", "1"));
    /// fifo.add(cm("b", "2"));
    /// fifo.update(cm("a", "3"));
    ///
    /// let snapshot = fifo.snapshot(1);
    /// assert_eq!(snapshot.depth, 2);
    /// let (key, deltas) = &snapshot.keys[0];
    /// assert_eq!(&**key, "ns/a");
    /// let seen: Vec<_> = deltas.iter().map(|d| (d.kind, d.resource_version.as_deref())).collect();
    /// assert_eq!(seen, [(DeltaType::Added, Some("1")), (DeltaType::Updated, Some("3"))]);
    /// ```
    pub fn snapshot(&self, limit: usize) -> QueueSnapshot {
        let state = self.shared.state.lock();
        let depth = state.queue.len();
        let held: Vec<(Key, Vec<HeldDelta<K>>)> = state
            .queue
            .iter()
            .take(limit)
            .map(|key| {
                let list = state.items.get(key).expect("every queued key has deltas");
                let deltas = list
                    .as_slice()
                    .iter()
                    .map(|d| (d.kind, d.object.is_tombstone(), d.object.object().cloned()))
                    .collect();
                (key.clone(), deltas)
            })
            .collect();
        drop(state);
        let keys = held
            .into_iter()
            .map(|(key, deltas)| {
                let deltas = deltas
                    .into_iter()
                    .map(|(kind, tombstone, obj)| QueuedDelta {
                        kind,
                        resource_version: obj
                            .as_deref()
                            .and_then(Object::resource_version)
                            .map(str::to_owned),
                        tombstone,
                    })
                    .collect();
                (key, deltas)
            })
            .collect();
        QueueSnapshot { depth, keys }
    }

    /// A copy of the deltas queued for `key` (the objects are shared, not copied).
    pub fn get_by_key(&self, key: &str) -> Option<Deltas<K>> {
        let state = self.shared.state.lock();
        let (key, list) = state.items.get_key_value(key)?;
        Some(Deltas {
            key: key.clone(),
            list: list.clone(),
        })
    }

    /// A bookmark reached `resource_version`: nothing changed up to it. It counts only for
    /// the informer's [store resource version](crate::SharedIndexInformer::store_resource_version),
    /// once everything queued before it has been popped.
    pub fn bookmark(&self, resource_version: &str) {
        let shared = &*self.shared;
        let mut state = shared.state.lock();
        state.saw(watermark::parse(Some(resource_version)));
        shared.release(state);
    }

    fn queue_object(&self, kind: DeltaType, mut obj: K) {
        let shared = &*self.shared;
        let rv = watermark::parse(obj.resource_version());
        if let Some(transform) = &shared.transformer {
            transform(&mut obj);
        }
        let obj = Arc::new(obj);
        let mut state = shared.state.lock();
        state.populated = true;
        state.saw(rv);
        state.push_object(kind, obj);
        shared.release(state);
    }
}

fn tombstone<K>(key: Key, obj: Option<Arc<K>>) -> Delta<K> {
    Delta {
        kind: DeltaType::Deleted,
        object: DeltaObject::Tombstone(DeletedFinalStateUnknown { key, obj }),
    }
}

// === impl Shared ===

impl<K: Object> Shared<K> {
    /// Pops the head of the non-empty queue and processes it with the lock held.
    fn pop_locked<F, R>(&self, mut state: MutexGuard<'_, State<K>>, process: F) -> R
    where
        F: FnOnce(Deltas<K>, bool) -> R,
    {
        let st = &mut *state;
        let key = st
            .queue
            .pop_front()
            .expect("pop_locked is called with a non-empty queue");
        let is_in_initial_list = !st.has_synced();
        if st.initial_population_count > 0 {
            st.initial_population_count -= 1;
        }
        let list = st.items.remove(&key).expect("every queued key has deltas");
        let depth = st.queue.len();
        if depth == 0 && st.items.capacity() > RELEASE_TABLES_ABOVE {
            // Drained after a burst (typically the initial list): give the tables back.
            st.items = HashMap::new();
            st.queue = VecDeque::new();
        }
        let timer = (depth > SLOW_PROCESS_DEPTH && tracing::enabled!(tracing::Level::WARN))
            .then(|| (Instant::now(), key.clone()));

        let out = process(Deltas { key, list }, is_in_initial_list);

        if let Some((start, key)) = timer {
            let elapsed = start.elapsed();
            if elapsed > SLOW_PROCESS {
                tracing::warn!(key = %key, depth, ?elapsed, "delta fifo pop process took long: slow event handlers blocking the queue");
            }
        }
        self.release(state);
        out
    }
}

impl<K> Shared<K> {
    /// Publishes `has_synced`, releases the lock, then wakes whoever needs it.
    fn release(&self, mut state: MutexGuard<'_, State<K>>) {
        let became_synced = self.synced.set_if(|| state.has_synced());
        let wake_pops = state.parked > 0 && !state.queue.is_empty();
        if wake_pops {
            state.woke_parked();
        }
        // Popping runs under this lock: an empty queue has applied all it was given.
        let applied = state.queue.is_empty().then_some(state.queued_rv);
        drop(state);
        if let (Some(watermark), Some(rv)) = (&self.watermark, applied) {
            watermark.advance(rv);
        }
        if wake_pops {
            self.item_added.notify_waiters();
        }
        if became_synced {
            self.synced.wake();
        }
    }
}

/// A pop counted in `parked`; uncounts itself if its future is dropped while parked.
struct Parked<'a, K> {
    shared: &'a Shared<K>,
    /// `State::wakes` when the pop parked; `None` while it is not parked.
    since: Option<u64>,
}

impl<K> Parked<'_, K> {
    /// Takes the pop out of `parked`, unless a wake-up since it parked already did.
    fn unpark(&mut self, state: &mut State<K>) {
        if self.since.take() == Some(state.wakes) {
            state.parked -= 1;
        }
    }
}

impl<K> Drop for Parked<'_, K> {
    fn drop(&mut self) {
        if self.since.is_some() {
            let mut state = self.shared.state.lock();
            self.unpark(&mut state);
        }
    }
}

// === impl State ===

impl<K> State<K> {
    /// Records that every parked pop is being woken: none is left waiting.
    fn woke_parked(&mut self) {
        self.parked = 0;
        self.wakes += 1;
    }

    fn has_synced(&self) -> bool {
        self.populated && self.initial_population_count == 0
    }

    /// Notes a resource version being queued.
    fn saw(&mut self, rv: Option<u64>) {
        if let Some(rv) = rv {
            self.queued_rv = self.queued_rv.max(rv);
        }
    }

    /// Appends `delta` to the entry of `key`, which is not queued yet or is.
    fn push_new(&mut self, key: Key, delta: Delta<K>) {
        match self.items.get_mut(&key) {
            Some(list) => list.push(delta),
            None => {
                self.queue.push_back(key.clone());
                self.items.insert(key, DeltaList::One(delta));
            }
        }
    }
}

impl<K: Object> State<K> {
    /// Appends a delta carrying `obj` to its key's entry, queueing the key if it is new.
    ///
    /// One hash lookup when the key is queued already; one key allocation when it is not.
    fn push_object(&mut self, kind: DeltaType, obj: Arc<K>) {
        let slot = with_object_key(&*obj, |key| {
            self.items.get_mut(key).ok_or_else(|| Key::from(key))
        });
        let delta = Delta {
            kind,
            object: DeltaObject::Object(obj),
        };
        match slot {
            Ok(list) => list.push(delta),
            Err(key) => {
                self.queue.push_back(key.clone());
                self.items.insert(key, DeltaList::One(delta));
            }
        }
    }

    /// Like [`push_object`](Self::push_object), and returns the queued key.
    fn push_object_keyed(&mut self, kind: DeltaType, obj: Arc<K>) -> Key {
        let key = with_object_key(&*obj, |key| match self.items.get_key_value(key) {
            Some((stored, _)) => stored.clone(),
            None => Key::from(key),
        });
        let delta = Delta {
            kind,
            object: DeltaObject::Object(obj),
        };
        self.push_new(key.clone(), delta);
        key
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Indexer;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A ConfigMap in namespace `ns` whose resourceVersion tells versions apart.
    fn cm(name: &str, rv: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                namespace: Some("ns".into()),
                name: Some(name.into()),
                resource_version: Some(rv.into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    fn rv(obj: &ConfigMap) -> &str {
        obj.metadata.resource_version.as_deref().unwrap_or("")
    }

    /// One delta as text: `Added:1`, `Deleted:tombstone:1`, `Deleted:tombstone:-`.
    fn show(delta: &Delta<ConfigMap>) -> String {
        let obj = delta.object.object().map_or("-", |o| rv(o));
        match &delta.object {
            DeltaObject::Object(_) => format!("{}:{obj}", delta.kind),
            DeltaObject::Tombstone(_) => format!("{}:tombstone:{obj}", delta.kind),
        }
    }

    /// Pops one key without waiting: `(key, deltas as text, is_in_initial_list)`.
    fn pop_now(fifo: &DeltaFifo<ConfigMap>) -> (String, Vec<String>, bool) {
        fifo.try_pop(|deltas, initial| {
            let shown = deltas.iter().map(show).collect();
            (deltas.key().to_string(), shown, initial)
        })
        .expect("an item is queued")
    }

    fn with_known(indexer: &Indexer<ConfigMap>, emit_replaced: bool) -> DeltaFifo<ConfigMap> {
        DeltaFifo::with_options(DeltaFifoOptions {
            known_objects: Some(Arc::new(indexer.clone())),
            emit_delta_type_replaced: emit_replaced,
            ..DeltaFifoOptions::default()
        })
    }

    fn known(objs: &[ConfigMap]) -> Indexer<ConfigMap> {
        let indexer = Indexer::default();
        for obj in objs {
            indexer.add(Arc::new(obj.clone()));
        }
        indexer
    }

    // --- queue order and dedup ---

    #[test]
    fn pop_returns_keys_in_first_in_first_out_order() {
        let fifo = DeltaFifo::new();
        fifo.add(cm("b", "1"));
        fifo.add(cm("a", "2"));
        fifo.add(cm("c", "3"));
        let order: Vec<String> = (0..3).map(|_| pop_now(&fifo).0).collect();
        assert_eq!(order, ["ns/b", "ns/a", "ns/c"]);
        assert!(fifo.try_pop(|_, _| ()).is_none());
    }

    #[test]
    fn requeued_key_keeps_its_place_in_line() {
        let fifo = DeltaFifo::new();
        fifo.add(cm("a", "1"));
        fifo.add(cm("b", "2"));
        fifo.update(cm("a", "3"));
        assert_eq!(fifo.queued_keys(), [Key::from("ns/a"), Key::from("ns/b")]);
        assert_eq!(pop_now(&fifo).1, ["Added:1", "Updated:3"]);
        assert_eq!(pop_now(&fifo).1, ["Added:2"]);
    }

    #[test]
    fn added_then_updated_are_not_collapsed() {
        let fifo = DeltaFifo::new();
        fifo.add(cm("a", "1"));
        fifo.update(cm("a", "2"));
        fifo.update(cm("a", "2"));
        assert_eq!(pop_now(&fifo).1, ["Added:1", "Updated:2", "Updated:2"]);
    }

    #[test]
    fn consecutive_deletes_keep_the_older_one() {
        let fifo = DeltaFifo::new();
        fifo.add(cm("a", "1"));
        fifo.delete(cm("a", "2"));
        fifo.delete(cm("a", "3"));
        assert_eq!(pop_now(&fifo).1, ["Added:1", "Deleted:2"]);
    }

    #[test]
    fn delete_after_a_tombstone_replaces_the_tombstone() {
        let fifo = DeltaFifo::new();
        fifo.add(cm("a", "1"));
        fifo.replace([], "9"); // queues Deleted(tombstone) for ns/a
        fifo.delete(cm("a", "2"));
        assert_eq!(pop_now(&fifo).1, ["Added:1", "Deleted:2"]);
    }

    #[test]
    fn only_a_trailing_deleted_pair_is_collapsed() {
        let fifo = DeltaFifo::new();
        fifo.add(cm("a", "1"));
        fifo.delete(cm("a", "2"));
        fifo.add(cm("a", "3"));
        fifo.delete(cm("a", "4"));
        assert_eq!(
            pop_now(&fifo).1,
            ["Added:1", "Deleted:2", "Added:3", "Deleted:4"]
        );
    }

    // --- delete of unknown keys ---

    #[test]
    fn delete_without_known_objects_ignores_a_key_that_is_not_queued() {
        let fifo = DeltaFifo::new();
        fifo.delete(cm("a", "1"));
        assert!(fifo.is_empty());
    }

    #[test]
    fn delete_without_known_objects_queues_for_a_queued_key() {
        let fifo = DeltaFifo::new();
        fifo.add(cm("a", "1"));
        fifo.delete(cm("a", "2"));
        assert_eq!(pop_now(&fifo).1, ["Added:1", "Deleted:2"]);
    }

    #[test]
    fn delete_with_known_objects_ignores_a_key_neither_known_nor_queued() {
        let indexer = known(&[cm("other", "1")]);
        let fifo = with_known(&indexer, true);
        fifo.delete(cm("a", "1"));
        assert!(fifo.is_empty());
    }

    #[test]
    fn delete_of_a_known_key_queues_the_given_object_not_a_tombstone() {
        let indexer = known(&[cm("a", "1")]);
        let fifo = with_known(&indexer, true);
        fifo.delete(cm("a", "2"));
        assert_eq!(pop_now(&fifo).1, ["Deleted:2"]);
    }

    // --- replace ---

    #[test]
    fn replace_emits_sync_by_default() {
        let fifo = DeltaFifo::new();
        fifo.replace([cm("a", "1"), cm("b", "2")], "5");
        assert_eq!(pop_now(&fifo), ("ns/a".into(), vec!["Sync:1".into()], true));
        assert_eq!(pop_now(&fifo).1, ["Sync:2"]);
    }

    #[test]
    fn replace_emits_replaced_when_configured() {
        let fifo = with_known(&Indexer::default(), true);
        fifo.replace([cm("a", "1")], "5");
        assert_eq!(pop_now(&fifo).1, ["Replaced:1"]);
    }

    #[test]
    fn replace_appends_to_keys_already_queued() {
        let fifo = with_known(&Indexer::default(), true);
        fifo.add(cm("b", "1"));
        fifo.replace([cm("a", "2"), cm("b", "3")], "5");
        assert_eq!(pop_now(&fifo).1, ["Added:1", "Replaced:3"]);
        assert_eq!(pop_now(&fifo).1, ["Replaced:2"]);
    }

    #[test]
    fn replace_tombstones_a_queued_key_missing_from_the_list_with_its_newest_object() {
        let fifo = DeltaFifo::new();
        fifo.add(cm("gone", "1"));
        fifo.update(cm("gone", "2"));
        fifo.replace([cm("a", "3")], "5");
        let (key, deltas, _) = pop_now(&fifo);
        assert_eq!(key, "ns/gone");
        assert_eq!(deltas, ["Added:1", "Updated:2", "Deleted:tombstone:2"]);
        assert_eq!(pop_now(&fifo).1, ["Sync:3"]);
    }

    #[test]
    fn replace_tombstone_carries_the_key() {
        let fifo = DeltaFifo::new();
        fifo.add(cm("gone", "1"));
        fifo.replace([], "5");
        let tombstone_key = fifo
            .try_pop(|deltas, _| deltas.newest().object.tombstone().unwrap().key.clone())
            .unwrap();
        assert_eq!(&*tombstone_key, "ns/gone");
    }

    #[test]
    fn replace_unwraps_a_tombstone_that_is_already_the_newest_delta() {
        let fifo = DeltaFifo::new();
        fifo.add(cm("gone", "1"));
        fifo.replace([], "5");
        fifo.replace([], "6");
        // The second tombstone replaces the first (dedup) and carries the object, not a
        // tombstone of a tombstone.
        assert_eq!(pop_now(&fifo).1, ["Added:1", "Deleted:tombstone:1"]);
    }

    #[test]
    fn replace_does_not_grow_a_key_whose_newest_delta_is_a_deletion() {
        let fifo = DeltaFifo::new();
        fifo.add(cm("gone", "1"));
        fifo.delete(cm("gone", "2"));
        fifo.replace([], "5");
        assert_eq!(pop_now(&fifo).1, ["Added:1", "Deleted:2"]);
    }

    #[test]
    fn replace_tombstones_a_known_key_missing_from_the_list_with_the_known_object() {
        let indexer = known(&[cm("gone", "1"), cm("kept", "2")]);
        let fifo = with_known(&indexer, true);
        fifo.replace([cm("kept", "3")], "5");
        assert_eq!(
            pop_now(&fifo),
            ("ns/kept".into(), vec!["Replaced:3".into()], true)
        );
        assert_eq!(
            pop_now(&fifo),
            ("ns/gone".into(), vec!["Deleted:tombstone:1".into()], true)
        );
        assert!(fifo.is_empty());
    }

    #[test]
    fn replace_tombstones_a_key_both_known_and_queued_once_with_the_queued_object() {
        let indexer = known(&[cm("gone", "1")]);
        let fifo = with_known(&indexer, true);
        fifo.update(cm("gone", "2"));
        fifo.replace([], "5");
        assert_eq!(pop_now(&fifo).1, ["Updated:2", "Deleted:tombstone:2"]);
        assert!(fifo.is_empty());
    }

    /// Known objects that list a key they cannot return.
    struct Forgetful;

    impl KnownObjects<ConfigMap> for Forgetful {
        fn list_keys(&self) -> Vec<Key> {
            vec![Key::from("ns/ghost")]
        }
        fn get_by_key(&self, _key: &str) -> Option<Arc<ConfigMap>> {
            None
        }
    }

    #[test]
    fn replace_places_a_tombstone_without_object_when_the_known_lookup_misses() {
        let fifo = DeltaFifo::with_options(DeltaFifoOptions {
            known_objects: Some(Arc::new(Forgetful)),
            ..DeltaFifoOptions::default()
        });
        fifo.replace([], "5");
        assert_eq!(
            pop_now(&fifo),
            ("ns/ghost".into(), vec!["Deleted:tombstone:-".into()], true)
        );
    }

    #[test]
    fn relist_tombstone_removes_a_missed_deletion_from_the_indexer() {
        let indexer: Indexer<ConfigMap> = Indexer::default();
        let fifo = with_known(&indexer, true);
        let apply = |deltas: Deltas<ConfigMap>, _| {
            for delta in deltas.iter() {
                match (delta.kind, &delta.object) {
                    (DeltaType::Deleted, _) => {
                        indexer.remove(deltas.key());
                    }
                    (_, DeltaObject::Object(obj)) => {
                        indexer.insert(deltas.key(), obj.clone());
                    }
                    (_, DeltaObject::Tombstone(_)) => unreachable!(),
                }
            }
        };
        fifo.replace([cm("a", "1"), cm("b", "2")], "2");
        while fifo.try_pop(apply).is_some() {}
        fifo.replace([cm("b", "3")], "3");
        while fifo.try_pop(apply).is_some() {}
        assert_eq!(indexer.list_keys(), [Key::from("ns/b")]);
        assert_eq!(rv(&indexer.get_by_key("ns/b").unwrap()), "3");
    }

    // --- resync ---

    #[test]
    fn resync_without_known_objects_does_nothing() {
        let fifo = DeltaFifo::<ConfigMap>::new();
        fifo.resync();
        assert!(fifo.is_empty());
    }

    #[test]
    fn resync_queues_sync_with_the_known_object_for_each_known_key() {
        let indexer = known(&[cm("a", "1")]);
        let fifo = with_known(&indexer, true);
        fifo.resync();
        assert_eq!(pop_now(&fifo).1, ["Sync:1"]);
    }

    #[test]
    fn resync_skips_a_key_with_queued_deltas() {
        // The update/resync race: the queued update is newer than the known object.
        let indexer = known(&[cm("a", "1"), cm("b", "1")]);
        let fifo = with_known(&indexer, true);
        fifo.update(cm("a", "2"));
        fifo.resync();
        assert_eq!(
            pop_now(&fifo),
            ("ns/a".into(), vec!["Updated:2".into()], false)
        );
        assert_eq!(
            pop_now(&fifo),
            ("ns/b".into(), vec!["Sync:1".into()], false)
        );
    }

    #[test]
    fn resync_does_not_count_as_population() {
        let indexer = known(&[cm("a", "1")]);
        let fifo = with_known(&indexer, true);
        fifo.resync();
        pop_now(&fifo);
        assert!(!fifo.has_synced());
    }

    // --- has_synced ---

    #[test]
    fn has_synced_is_false_before_anything_is_queued() {
        assert!(!DeltaFifo::<ConfigMap>::new().has_synced());
    }

    #[test]
    fn has_synced_is_true_after_an_add_before_any_replace() {
        let fifo = DeltaFifo::new();
        fifo.add(cm("a", "1"));
        assert!(fifo.has_synced());
        assert!(!pop_now(&fifo).2, "not in an initial list");
    }

    #[test]
    fn has_synced_is_true_after_an_ignored_delete_before_any_replace() {
        let fifo = DeltaFifo::new();
        fifo.delete(cm("a", "1"));
        assert!(fifo.is_empty());
        assert!(fifo.has_synced());
    }

    #[test]
    fn has_synced_is_true_right_after_an_empty_first_replace() {
        let fifo = DeltaFifo::<ConfigMap>::new();
        fifo.replace([], "1");
        assert!(fifo.has_synced());
    }

    #[test]
    fn has_synced_waits_for_every_listed_key_and_tombstone_of_the_first_replace() {
        let indexer = known(&[cm("gone", "1")]);
        let fifo = with_known(&indexer, true);
        fifo.replace([cm("a", "2"), cm("b", "3")], "3");
        assert_eq!(fifo.len(), 3);
        for _ in 0..3 {
            assert!(!fifo.has_synced());
            assert!(
                pop_now(&fifo).2,
                "every item of the first list is in the initial list"
            );
        }
        assert!(fifo.has_synced());
        fifo.add(cm("c", "4"));
        assert!(!pop_now(&fifo).2);
    }

    #[test]
    fn has_synced_counts_distinct_listed_keys() {
        let fifo = DeltaFifo::new();
        fifo.replace([cm("a", "1"), cm("a", "2"), cm("b", "3")], "3");
        assert_eq!(pop_now(&fifo).1, ["Sync:1", "Sync:2"]);
        assert!(!fifo.has_synced());
        pop_now(&fifo);
        assert!(fifo.has_synced());
    }

    #[test]
    fn has_synced_turns_true_only_after_the_last_initial_item_is_processed() {
        let fifo = DeltaFifo::new();
        fifo.replace([cm("a", "1")], "1");
        let during = fifo
            .try_pop(|_, initial| (initial, fifo.has_synced()))
            .unwrap();
        assert_eq!(during, (true, false));
        assert!(fifo.has_synced());
    }

    #[test]
    fn later_replace_does_not_reset_has_synced() {
        let fifo = DeltaFifo::new();
        fifo.replace([], "1");
        fifo.replace([cm("a", "1")], "2");
        assert!(fifo.has_synced());
        assert!(!pop_now(&fifo).2);
    }

    #[test]
    fn replace_after_an_add_does_not_gate_has_synced() {
        let fifo = DeltaFifo::new();
        fifo.add(cm("x", "1"));
        fifo.replace([cm("a", "2")], "2");
        assert!(fifo.has_synced());
        assert!(!pop_now(&fifo).2);
        assert!(!pop_now(&fifo).2);
    }

    // --- transformer ---

    /// A FIFO whose transformer counts its calls and marks objects with an annotation.
    fn transforming(indexer: &Indexer<ConfigMap>) -> (DeltaFifo<ConfigMap>, Arc<AtomicUsize>) {
        let calls = Arc::new(AtomicUsize::new(0));
        let counter = calls.clone();
        let fifo = DeltaFifo::with_options(DeltaFifoOptions {
            known_objects: Some(Arc::new(indexer.clone())),
            emit_delta_type_replaced: true,
            transformer: Some(Arc::new(move |obj: &mut ConfigMap| {
                counter.fetch_add(1, Ordering::Relaxed);
                obj.metadata.annotations = Some(BTreeMap::from([("t".into(), "1".into())]));
            })),
        });
        (fifo, calls)
    }

    fn transformed(obj: &ConfigMap) -> bool {
        obj.metadata.annotations.is_some()
    }

    #[test]
    fn transformer_runs_once_on_each_object_entering_the_fifo() {
        let indexer = Indexer::default();
        let (fifo, calls) = transforming(&indexer);
        fifo.add(cm("a", "1"));
        fifo.update(cm("a", "2"));
        fifo.delete(cm("a", "3"));
        fifo.replace([cm("b", "4"), cm("c", "5")], "5");
        assert_eq!(calls.load(Ordering::Relaxed), 5);
        while let Some(all) = fifo.try_pop(|deltas, _| {
            deltas
                .iter()
                .filter_map(|d| d.object.object())
                .all(|o| transformed(o))
        }) {
            assert!(all);
        }
    }

    #[test]
    fn transformer_skips_ignored_deletes_tombstones_and_resync() {
        let indexer = known(&[cm("known", "1")]);
        let (fifo, calls) = transforming(&indexer);
        fifo.delete(cm("unknown", "1")); // ignored
        fifo.replace([], "2"); // one tombstone, for ns/known
        pop_now(&fifo);
        fifo.resync(); // Sync with the known object
        assert_eq!(calls.load(Ordering::Relaxed), 0);
        let synced = fifo
            .try_pop(|deltas, _| deltas.newest().object.object().cloned())
            .unwrap()
            .unwrap();
        assert!(!transformed(&synced));
    }

    // --- pop, close and concurrency ---

    #[tokio::test]
    async fn pop_waits_until_an_item_is_queued() {
        let fifo = DeltaFifo::new();
        let popper = tokio::spawn({
            let fifo = fifo.clone();
            async move { fifo.pop(|deltas, _| deltas.key().to_string()).await }
        });
        tokio::task::yield_now().await;
        assert!(!popper.is_finished());
        assert_eq!(fifo.shared.state.lock().parked, 1);
        fifo.add(cm("a", "1"));
        assert_eq!(popper.await.unwrap(), Ok("ns/a".to_owned()));
        assert_eq!(fifo.shared.state.lock().parked, 0);
    }

    #[tokio::test]
    async fn a_wake_up_uncounts_the_pops_it_wakes_once() {
        let fifo = DeltaFifo::new();
        let spawn_pop = || {
            let fifo = fifo.clone();
            tokio::spawn(async move { fifo.pop(|deltas, _| deltas.key().to_string()).await })
        };
        let (first, second) = (spawn_pop(), spawn_pop());
        tokio::task::yield_now().await;
        let counts = |fifo: &DeltaFifo<ConfigMap>| {
            let state = fifo.shared.state.lock();
            (state.parked, state.wakes)
        };
        assert_eq!(counts(&fifo), (2, 0));
        fifo.add(cm("a", "1"));
        // Both pops are woken and neither has run yet: nobody is left to wake.
        assert_eq!(counts(&fifo), (0, 1));
        fifo.update(cm("a", "2"));
        assert_eq!(counts(&fifo), (0, 1));
        // One pop takes "a"; the other finds the queue empty and parks again.
        while !(first.is_finished() || second.is_finished()) {
            tokio::task::yield_now().await;
        }
        tokio::task::yield_now().await;
        assert_eq!(counts(&fifo), (1, 1));
        fifo.add(cm("b", "1"));
        assert_eq!(counts(&fifo), (0, 2));
        let mut keys = [
            first.await.unwrap().unwrap(),
            second.await.unwrap().unwrap(),
        ];
        keys.sort();
        assert_eq!(keys, ["ns/a", "ns/b"]);
        assert_eq!(counts(&fifo), (0, 2));
    }

    #[tokio::test]
    async fn close_wakes_a_parked_pop_with_closed() {
        let fifo = DeltaFifo::<ConfigMap>::new();
        let popper = tokio::spawn({
            let fifo = fifo.clone();
            async move { fifo.pop(|_, _| ()).await }
        });
        tokio::task::yield_now().await;
        assert!(!popper.is_finished());
        fifo.close();
        assert_eq!(popper.await.unwrap(), Err(PopError::Closed));
        assert!(fifo.is_closed());
    }

    #[tokio::test]
    async fn pop_drains_queued_items_after_close_then_reports_closed() {
        let fifo = DeltaFifo::new();
        fifo.add(cm("a", "1"));
        fifo.close();
        fifo.add(cm("b", "2"));
        let key = |d: Deltas<ConfigMap>, _| d.key().to_string();
        assert_eq!(fifo.pop(key).await, Ok("ns/a".to_owned()));
        assert_eq!(fifo.pop(key).await, Ok("ns/b".to_owned()));
        assert_eq!(fifo.pop(key).await, Err(PopError::Closed));
    }

    #[tokio::test]
    async fn dropping_a_parked_pop_removes_nothing_and_uncounts_it() {
        let fifo = DeltaFifo::new();
        tokio::select! {
            biased;
            _ = fifo.pop(|_, _| ()) => panic!("nothing was queued"),
            () = tokio::task::yield_now() => {}
        }
        assert_eq!(fifo.shared.state.lock().parked, 0);
        fifo.add(cm("a", "1"));
        assert_eq!(
            fifo.pop(|d, _| d.key().to_string()).await,
            Ok("ns/a".into())
        );
    }

    #[tokio::test]
    async fn wait_synced_resolves_once_the_initial_list_is_processed() {
        let fifo = DeltaFifo::new();
        fifo.replace([cm("a", "1")], "1");
        let waiter = tokio::spawn({
            let fifo = fifo.clone();
            async move { fifo.wait_synced().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        fifo.pop(|_, _| ()).await.unwrap();
        waiter.await.unwrap();
    }

    #[test]
    fn add_from_another_thread_during_process_is_queued_behind_the_popped_item() {
        let fifo = DeltaFifo::new();
        fifo.add(cm("a", "1"));
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let mut adder = None;
        let popped = fifo
            .try_pop(|deltas, _| {
                let other = fifo.clone();
                adder = Some(std::thread::spawn(move || {
                    started_tx.send(()).unwrap();
                    other.add(cm("a", "2"));
                }));
                // The other thread is running and about to add (it then blocks on the lock).
                started_rx.recv().unwrap();
                deltas.iter().map(show).collect::<Vec<_>>()
            })
            .unwrap();
        adder.unwrap().join().unwrap();
        assert_eq!(popped, ["Added:1"]);
        assert_eq!(pop_now(&fifo).1, ["Added:2"]);
    }

    #[test]
    fn snapshot_shows_the_head_of_the_queue_in_pop_order_and_removes_nothing() {
        let indexer = known(&[cm("gone", "5")]);
        let fifo = with_known(&indexer, true);
        fifo.add(cm("a", "1"));
        fifo.add(cm("b", "2"));
        fifo.update(cm("a", "3"));
        // Lists b only: a gets a tombstone with its newest object, the known "gone" one with
        // the known object.
        fifo.replace([cm("b", "4")], "4");

        let shown = |snapshot: &QueueSnapshot| -> Vec<(String, Vec<String>)> {
            snapshot
                .keys
                .iter()
                .map(|(key, deltas)| {
                    let deltas = deltas
                        .iter()
                        .map(|d| {
                            let rv = d.resource_version.as_deref().unwrap_or("-");
                            if d.tombstone {
                                format!("{}:tombstone:{rv}", d.kind)
                            } else {
                                format!("{}:{rv}", d.kind)
                            }
                        })
                        .collect();
                    (key.to_string(), deltas)
                })
                .collect()
        };
        let all = fifo.snapshot(usize::MAX);
        assert_eq!(all.depth, 3);
        assert_eq!(
            shown(&all),
            [
                (
                    "ns/a".to_owned(),
                    vec![
                        "Added:1".to_owned(),
                        "Updated:3".to_owned(),
                        "Deleted:tombstone:3".to_owned()
                    ]
                ),
                (
                    "ns/b".to_owned(),
                    vec!["Added:2".to_owned(), "Replaced:4".to_owned()]
                ),
                ("ns/gone".to_owned(), vec!["Deleted:tombstone:5".to_owned()]),
            ]
        );

        let head = fifo.snapshot(1);
        assert_eq!(head.depth, 3, "depth counts the keys beyond the limit");
        assert_eq!(shown(&head), shown(&all)[..1]);
        assert_eq!(fifo.snapshot(0).keys, []);

        assert_eq!(fifo.len(), 3, "a snapshot removes nothing");
        assert_eq!(pop_now(&fifo).0, "ns/a");
        assert_eq!(fifo.snapshot(usize::MAX).keys.len(), 2);
    }

    #[test]
    fn snapshot_of_a_tombstone_without_object_has_no_resource_version() {
        let fifo = DeltaFifo::with_options(DeltaFifoOptions {
            known_objects: Some(Arc::new(Forgetful)),
            ..DeltaFifoOptions::default()
        });
        fifo.replace([], "1");
        let snapshot = fifo.snapshot(10);
        assert_eq!(
            snapshot.keys,
            [(
                Key::from("ns/ghost"),
                vec![QueuedDelta {
                    kind: DeltaType::Deleted,
                    resource_version: None,
                    tombstone: true,
                }]
            )]
        );
    }

    #[test]
    fn get_by_key_copies_the_queued_deltas_without_removing_them() {
        let fifo = DeltaFifo::new();
        fifo.add(cm("a", "1"));
        fifo.update(cm("a", "2"));
        let copy = fifo.get_by_key("ns/a").unwrap();
        assert_eq!(
            copy.iter().map(show).collect::<Vec<_>>(),
            ["Added:1", "Updated:2"]
        );
        assert_eq!(show(copy.oldest()), "Added:1");
        assert_eq!(show(copy.newest()), "Updated:2");
        assert!(fifo.get_by_key("ns/b").is_none());
        assert_eq!(fifo.len(), 1);
    }

    #[test]
    fn popped_key_is_the_allocation_the_indexer_stores() {
        let indexer = Indexer::default();
        let fifo = with_known(&indexer, true);
        fifo.add(cm("a", "1"));
        let key = fifo
            .try_pop(|deltas, _| {
                let obj = deltas.newest().object.object().unwrap().clone();
                indexer.insert(deltas.key(), obj);
                deltas.key().clone()
            })
            .unwrap();
        assert!(Arc::ptr_eq(&key, &indexer.list_keys()[0]));
    }

    #[test]
    fn a_drained_fifo_frees_tables_that_grew_past_the_threshold() {
        let fifo = DeltaFifo::new();
        for i in 0..=RELEASE_TABLES_ABOVE {
            fifo.add(cm(&i.to_string(), "1"));
        }
        while fifo.try_pop(|_, _| ()).is_some() {}
        let state = fifo.shared.state.lock();
        assert_eq!(state.items.capacity(), 0);
        assert_eq!(state.queue.capacity(), 0);
    }

    #[test]
    fn a_drained_small_fifo_keeps_its_tables() {
        let fifo = DeltaFifo::new();
        fifo.add(cm("a", "1"));
        fifo.try_pop(|_, _| ()).unwrap();
        assert!(fifo.shared.state.lock().items.capacity() > 0);
    }

    #[test]
    fn deltas_iterate_by_value_oldest_first() {
        let fifo = DeltaFifo::new();
        fifo.add(cm("a", "1"));
        fifo.update(cm("a", "2"));
        let kinds = fifo
            .try_pop(|deltas, _| deltas.into_iter().map(|d| d.kind).collect::<Vec<_>>())
            .unwrap();
        assert_eq!(kinds, [DeltaType::Added, DeltaType::Updated]);
    }

    #[test]
    fn delta_object_key_is_the_tombstone_key_or_the_object_key() {
        let obj = DeltaObject::Object(Arc::new(cm("a", "1")));
        assert_eq!(&*obj.key(), "ns/a");
        let tombstone = DeltaObject::<ConfigMap>::Tombstone(DeletedFinalStateUnknown {
            key: Key::from("ns/b"),
            obj: None,
        });
        assert_eq!(&*tombstone.key(), "ns/b");
        assert!(tombstone.is_tombstone() && !obj.is_tombstone());
    }
}
