//! The RealFIFO: every event in arrival order, one item per pop, a relist as one item
//! (client-go's `RealFIFO` as its informers run it since 1.36: `InOrderInformers`,
//! `AtomicFIFO`, `UnlockWhileProcessingFIFO`).
//!
//! # Implementation Details
//!
//! The state sits behind one `parking_lot` mutex: `items`, every queued [`FifoItem`], oldest
//! first. Nothing is merged: two events for one key are two items, popped apart, with other
//! keys' events between them as they arrived. A `replace` is **one** item holding the whole
//! list ([`FifoItem::ReplacedAll`]) and a `resync` is one [`FifoItem::SyncAll`]: the queue
//! never reads the consumer's store. Working out what a relist deleted, or which objects a
//! resync re-delivers, is the consumer's job when it pops the item — against its store as
//! it is then, after every earlier item was applied (client-go's atomic mode, where the
//! queue has no known objects). That is what makes the next point safe.
//!
//! `pop` does **not** hold the lock while `process` runs: it takes the head item and
//! releases the lock, so the reflector keeps queueing while handlers are notified. Pops are
//! serialised by a second mutex, `consumer`, held from taking an item to finishing it, so
//! items are still processed one at a time and in order. After `process`, `pop` takes the
//! lock again to count the item done: the first list's countdown (`has_synced`, published
//! as an atomic flag only then) and the resource-version watermark move only once the item
//! is applied. A pop waiting on an empty queue registers with a [`Notify`] before it
//! releases the lock, so no wake-up is lost.
//!
//! The price of never holding producers up is that nothing slows them down either: a
//! reflector can queue faster than the informer applies, and the queue grows. (client-go
//! keeps its lock while processing once 2,000 items wait, which stalls its reflector and,
//! through it, the watch; here the queue's length shows in `informer_queued_items`.) Objects are transformed before the lock is
//! taken, once, and shared as `Arc`s.
//!
//! The watermark is kept as marks `(n, rv)`: "once `n` items have been processed, every
//! event up to `rv` is applied". An event's mark is its own resourceVersion at its place in
//! the queue, a relist's the list's version after its item, a bookmark's after everything
//! queued before it; an item counts as processed only after `process` returned.

use std::collections::VecDeque;
use std::pin::pin;
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};
use tokio::sync::Notify;

use crate::synced::SyncedLatch;
use crate::watermark::{self, Watermark};

use crate::delta_fifo::{
    Delta, DeltaObject, DeltaType, PopError, QueueSnapshot, QueuedDelta, Transformer,
};
use crate::object::{Key, Object, key_of};
use crate::reflector::ReflectorStore;

/// One item of a [`RealFifo`], as [`pop`](RealFifo::pop) hands it out.
#[derive(Debug)]
pub enum FifoItem<K> {
    /// One watch event: an `Added`, `Updated` or `Deleted` [`Delta`] of `key`.
    Event {
        /// The object's key.
        key: Key,
        /// What happened to it.
        delta: Delta<K>,
    },
    /// A relist: the whole collection is `objects` as of `resource_version` (client-go's
    /// `ReplacedAll`). The consumer applies it in one step: a deletion, with a
    /// [`DeletedFinalStateUnknown`](crate::DeletedFinalStateUnknown) tombstone, for each key
    /// it holds that the list does not, then `Replaced` for each listed object.
    ReplacedAll {
        /// Every listed object with its key, in list order, transformed.
        objects: Vec<(Key, Arc<K>)>,
        /// The list's resourceVersion.
        resource_version: String,
    },
    /// A resync is due (client-go's `SyncAll`): the consumer re-delivers, as `Sync`, every
    /// object it holds.
    SyncAll,
}

impl<K> Clone for FifoItem<K> {
    fn clone(&self) -> Self {
        match self {
            FifoItem::Event { key, delta } => FifoItem::Event {
                key: key.clone(),
                delta: delta.clone(),
            },
            FifoItem::ReplacedAll {
                objects,
                resource_version,
            } => FifoItem::ReplacedAll {
                objects: objects.clone(),
                resource_version: resource_version.clone(),
            },
            FifoItem::SyncAll => FifoItem::SyncAll,
        }
    }
}

/// A queue of every event, in the order they came, one [`FifoItem`] per pop (client-go's
/// `RealFIFO` in its atomic, unlock-while-processing mode). The default queue of an informer
/// ([`FifoKind::InOrder`](crate::FifoKind::InOrder)).
///
/// Where the [`DeltaFifo`](crate::DeltaFifo) keeps one entry per key and hands out all of a
/// key's deltas at once, in the order keys first arrived, the RealFIFO keeps the log:
///
/// * **Every event, in order.** `add`, `update` and `delete` each append one
///   [`FifoItem::Event`]; a key's events are never merged, and events of different keys stay
///   interleaved as they came. A `delete` is queued even for a key nobody knows.
/// * **`replace(list)`** appends one [`FifoItem::ReplacedAll`]: the consumer finds what is
///   gone when it applies it. The first `replace` sets the number of items
///   [`has_synced`](Self::has_synced) waits for: everything queued then, the relist counting
///   as one.
/// * **`resync`** appends one [`FifoItem::SyncAll`].
/// * **[`pop`](Self::pop) does not hold the queue's lock while it processes**, so producers
///   are never held up by handlers; pops are still processed one at a time, in order.
///
/// ```
/// use informer::{DeltaFifo, FifoItem, RealFifo};
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
///
/// let cm = |name: &str| ConfigMap {
///     metadata: ObjectMeta { namespace: Some("ns".into()), name: Some(name.into()), ..Default::default() },
///     ..Default::default()
/// };
/// let real = RealFifo::new(None);
/// let classic = DeltaFifo::new();
/// for (name, update) in [("a", false), ("b", false), ("a", true)] {
///     if update { real.update(cm(name)); classic.update(cm(name)) } else { real.add(cm(name)); classic.add(cm(name)) }
/// }
/// real.replace(vec![cm("a")], "7");
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let mut pops = Vec::new();
/// for _ in 0..4 {
///     pops.push(real.pop(|item, _| match item {
///         FifoItem::Event { key, delta } => format!("{key} {}", delta.kind),
///         FifoItem::ReplacedAll { objects, resource_version } => format!("{} listed at {resource_version}", objects.len()),
///         FifoItem::SyncAll => "resync".to_owned(),
///     }).await.unwrap());
/// }
/// assert_eq!(pops, ["ns/a Added", "ns/b Added", "ns/a Updated", "1 listed at 7"]);
/// // The DeltaFIFO hands out a's two deltas together, before b's.
/// let first = classic.pop(|deltas, _| deltas.as_slice().len()).await.unwrap();
/// assert_eq!((first, classic.len()), (2, 1));
/// # });
/// ```
pub struct RealFifo<K> {
    shared: Arc<Shared<K>>,
}

struct Shared<K> {
    state: Mutex<State<K>>,
    /// Held by a pop from taking an item until it is counted done: one at a time, in order.
    consumer: Mutex<()>,
    transformer: Option<Transformer<K>>,
    /// Wakes pops waiting on an empty queue: when something is queued, and on close.
    item_added: Notify,
    /// `populated && initial_population_count == 0`, published after the item that got it
    /// there was processed. Never goes back to false.
    synced: SyncedLatch,
    /// Set by an informer: advanced past each item once it is processed.
    watermark: Option<Watermark>,
}

struct State<K> {
    /// Every queued item, oldest first.
    items: VecDeque<FifoItem<K>>,
    /// Items ever queued, and ever popped and processed.
    pushed: u64,
    popped: u64,
    /// `(n, rv)`: once `n` items have been processed, everything up to `rv` is applied.
    /// Increasing in `n`.
    marks: VecDeque<(u64, u64)>,
    /// Whether anything was ever queued by `add`, `update`, `delete` or `replace`.
    populated: bool,
    /// Items of the first `replace` (and before it) not yet processed.
    initial_population_count: usize,
    /// Set by `close`; `pop` returns [`PopError::Closed`] once the queue is also empty.
    closed: bool,
}

impl<K> Clone for RealFifo<K> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<K: Object> Default for RealFifo<K> {
    fn default() -> Self {
        Self::new(None)
    }
}

// === impl RealFifo ===

impl<K: Object> RealFifo<K> {
    /// An empty queue. `transformer` runs once on every object entering from outside, before
    /// it is shared.
    pub fn new(transformer: Option<Transformer<K>>) -> Self {
        Self {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    items: VecDeque::new(),
                    pushed: 0,
                    popped: 0,
                    marks: VecDeque::new(),
                    populated: false,
                    initial_population_count: 0,
                    closed: false,
                }),
                consumer: Mutex::new(()),
                transformer,
                item_added: Notify::new(),
                synced: SyncedLatch::default(),
                watermark: None,
            }),
        }
    }

    /// Has the queue move `watermark`: past each event's resource version once it is
    /// processed (events arrive in resource-version order), to a `replace`'s once that item
    /// is, and to a bookmark's once everything queued before it is.
    pub(crate) fn with_watermark(mut self, watermark: Watermark) -> Self {
        Arc::get_mut(&mut self.shared)
            .expect("set on a new queue")
            .watermark = Some(watermark);
        self
    }

    /// Queues an [`Added`](DeltaType::Added) event for `obj`.
    pub fn add(&self, obj: K) {
        self.push(DeltaType::Added, obj);
    }

    /// Queues an [`Updated`](DeltaType::Updated) event for `obj`.
    pub fn update(&self, obj: K) {
        self.push(DeltaType::Updated, obj);
    }

    /// Queues a [`Deleted`](DeltaType::Deleted) event carrying `obj`, known or not.
    pub fn delete(&self, obj: K) {
        self.push(DeltaType::Deleted, obj);
    }

    /// Queues a relist: one [`FifoItem::ReplacedAll`] holding `list`, the result of a LIST
    /// at `resource_version`; see the [type documentation](RealFifo).
    pub fn replace(&self, list: impl IntoIterator<Item = K>, resource_version: &str) {
        let shared = &*self.shared;
        let objects = list.into_iter().map(|obj| shared.share(obj)).collect();
        self.queue_replace(objects, resource_version);
    }

    /// Runs the queue's transformer on `obj`, for an object that enters later through
    /// [`replace_transformed`](Self::replace_transformed).
    pub fn transform(&self, obj: &mut K) {
        if let Some(transform) = &self.shared.transformer {
            transform(obj);
        }
    }

    /// [`replace`](Self::replace) with objects that went through
    /// [`transform`](Self::transform) already: the transformer does not run again.
    pub fn replace_transformed(&self, list: impl IntoIterator<Item = K>, resource_version: &str) {
        let objects = list
            .into_iter()
            .map(|obj| (key_of(&obj), Arc::new(obj)))
            .collect();
        self.queue_replace(objects, resource_version);
    }

    fn queue_replace(&self, objects: Vec<(Key, Arc<K>)>, resource_version: &str) {
        let shared = &*self.shared;
        let mut state = shared.state.lock();
        state.push(FifoItem::ReplacedAll {
            objects,
            resource_version: resource_version.to_owned(),
        });
        state.mark(watermark::parse(Some(resource_version)));
        if !state.populated {
            state.populated = true;
            state.initial_population_count = state.items.len();
        }
        shared.release(state);
    }

    /// Queues a [`FifoItem::SyncAll`]: the consumer re-delivers what it holds.
    pub fn resync(&self) {
        let mut state = self.shared.state.lock();
        state.push(FifoItem::SyncAll);
        self.shared.release(state);
    }

    /// A bookmark reached `resource_version`: nothing changed up to it. It counts only for
    /// the informer's [store resource version](crate::SharedIndexInformer::store_resource_version),
    /// once everything queued before it has been processed; nothing is queued.
    pub fn bookmark(&self, resource_version: &str) {
        let mut state = self.shared.state.lock();
        state.mark(watermark::parse(Some(resource_version)));
        self.shared.release(state);
    }

    /// Waits for a queued item, removes it, and returns what `process` returns for it.
    ///
    /// `process` gets the item and `is_in_initial_list`: true while the queue has not
    /// [synced](Self::has_synced), i.e. for every item of the first `replace` and before it.
    /// It runs synchronously **without the queue's lock**: producers go on queueing, and
    /// `process` may call the queue's producer methods. Pops are serialised: a second pop
    /// waits (blocking its thread) until the first has finished processing, so give a queue
    /// one consumer. The item is counted done — towards `has_synced` and the watermark —
    /// only once `process` returns; if it panics, the item is lost but still counted.
    ///
    /// # Errors
    ///
    /// [`PopError::Closed`] once [`close`](Self::close) was called and the queue is empty.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropping the future before it completes removes nothing. `process` runs
    /// inside a single poll, so once called it completes.
    pub async fn pop<F, R>(&self, process: F) -> Result<R, PopError>
    where
        F: FnOnce(FifoItem<K>, bool) -> R,
    {
        let shared = &*self.shared;
        loop {
            let mut notified = pin!(shared.item_added.notified());
            notified.as_mut().enable();
            {
                let consumer = shared.consumer.lock();
                let mut state = shared.state.lock();
                if let Some(item) = state.items.pop_front() {
                    let is_in_initial_list = !state.has_synced();
                    drop(state);
                    let done = Done { shared };
                    let out = process(item, is_in_initial_list);
                    drop(done);
                    drop(consumer);
                    return Ok(out);
                }
                if state.closed {
                    return Err(PopError::Closed);
                }
            }
            notified.await;
        }
    }

    /// Whether the first `replace` has been fully popped and processed (or an `add`, `update`
    /// or `delete` came first). Lock-free; never false again once true.
    pub fn has_synced(&self) -> bool {
        self.shared.synced.is_set()
    }

    /// Resolves once [`has_synced`](Self::has_synced) is true; never, if it never is.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe.
    pub async fn wait_synced(&self) {
        self.shared.synced.wait().await;
    }

    /// Closes the queue: waiting and future pops return [`PopError::Closed`] once it is
    /// empty. Items queued before (or after) are still popped.
    pub fn close(&self) {
        self.shared.state.lock().closed = true;
        self.shared.item_added.notify_waiters();
    }

    /// The number of queued items.
    pub fn len(&self) -> usize {
        self.shared.state.lock().items.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What the queue holds: its depth in items, and its first `limit` entries in pop order,
    /// each as a key with one delta (see [`DeltaFifo::snapshot`](crate::DeltaFifo::snapshot)).
    /// A relist shows as one `Replaced` entry per listed object, a resync as one `Sync` entry
    /// under the key `*`.
    pub fn snapshot(&self, limit: usize) -> QueueSnapshot {
        let state = self.shared.state.lock();
        let depth = state.items.len();
        let mut held: Vec<(Key, DeltaType, bool, Option<Arc<K>>)> = Vec::new();
        for item in &state.items {
            if held.len() >= limit {
                break;
            }
            match item {
                FifoItem::Event { key, delta } => held.push((
                    key.clone(),
                    delta.kind,
                    delta.object.is_tombstone(),
                    delta.object.object().cloned(),
                )),
                FifoItem::ReplacedAll { objects, .. } => {
                    let room = limit - held.len();
                    held.extend(objects.iter().take(room).map(|(key, obj)| {
                        (key.clone(), DeltaType::Replaced, false, Some(obj.clone()))
                    }));
                }
                FifoItem::SyncAll => held.push((Key::from("*"), DeltaType::Sync, false, None)),
            }
        }
        drop(state);
        let keys = held
            .into_iter()
            .map(|(key, kind, tombstone, obj)| {
                let queued = QueuedDelta {
                    kind,
                    resource_version: obj
                        .as_deref()
                        .and_then(Object::resource_version)
                        .map(str::to_owned),
                    tombstone,
                };
                (key, vec![queued])
            })
            .collect();
        QueueSnapshot { depth, keys }
    }

    fn push(&self, kind: DeltaType, obj: K) {
        let shared = &*self.shared;
        let rv = watermark::parse(obj.resource_version());
        let (key, obj) = shared.share(obj);
        let mut state = shared.state.lock();
        state.populated = true;
        let object = DeltaObject::Object(obj);
        state.push(FifoItem::Event {
            key,
            delta: Delta { kind, object },
        });
        state.mark(rv);
        shared.release(state);
    }
}

/// Counts a popped item done when dropped: after `process` returned, or if it panicked.
struct Done<'a, K> {
    shared: &'a Shared<K>,
}

impl<K> Drop for Done<'_, K> {
    fn drop(&mut self) {
        let mut state = self.shared.state.lock();
        state.popped += 1;
        state.initial_population_count = state.initial_population_count.saturating_sub(1);
        self.shared.release(state);
    }
}

impl<K: Object> Shared<K> {
    /// Transforms an object entering from outside, and shares it with its key.
    fn share(&self, mut obj: K) -> (Key, Arc<K>) {
        if let Some(transform) = &self.transformer {
            transform(&mut obj);
        }
        (key_of(&obj), Arc::new(obj))
    }
}

impl<K> Shared<K> {
    /// Publishes `has_synced` and the watermark, releases the lock, then wakes whoever needs
    /// it.
    fn release(&self, mut state: MutexGuard<'_, State<K>>) {
        let became_synced = self.synced.set_if(|| state.has_synced());
        let queued = !state.items.is_empty();
        let applied = state.applied_mark();
        drop(state);
        if let (Some(watermark), Some(rv)) = (&self.watermark, applied) {
            watermark.advance(rv);
        }
        if queued {
            self.item_added.notify_waiters();
        }
        if became_synced {
            self.synced.wake();
        }
    }
}

impl<K> State<K> {
    fn has_synced(&self) -> bool {
        self.populated && self.initial_population_count == 0
    }

    fn push(&mut self, item: FifoItem<K>) {
        self.items.push_back(item);
        self.pushed += 1;
    }

    /// Marks `rv` applied once every item queued so far is processed.
    fn mark(&mut self, rv: Option<u64>) {
        if let Some(rv) = rv {
            self.marks.push_back((self.pushed, rv));
        }
    }

    /// Takes the marks every processed item has reached; the highest, if any.
    fn applied_mark(&mut self) -> Option<u64> {
        let mut applied = None;
        while let Some(&(n, rv)) = self.marks.front() {
            if n > self.popped {
                break;
            }
            self.marks.pop_front();
            applied = applied.max(Some(rv));
        }
        applied
    }
}

// === impl ReflectorStore for RealFifo ===

impl<K: Object> ReflectorStore<K> for RealFifo<K> {
    fn add(&self, object: K) {
        RealFifo::add(self, object);
    }

    fn update(&self, object: K) {
        RealFifo::update(self, object);
    }

    fn delete(&self, object: K) {
        RealFifo::delete(self, object);
    }

    fn replace(&self, objects: Vec<K>, resource_version: &str) {
        RealFifo::replace(self, objects, resource_version);
    }

    fn prepare(&self, object: &mut K) {
        RealFifo::transform(self, object);
    }

    fn replace_prepared(&self, objects: Vec<K>, resource_version: &str) {
        RealFifo::replace_transformed(self, objects, resource_version);
    }

    fn resync(&self) {
        RealFifo::resync(self);
    }

    fn bookmark(&self, resource_version: &str) {
        RealFifo::bookmark(self, resource_version);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

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

    fn line(item: FifoItem<ConfigMap>, initial: bool) -> String {
        let initial = if initial { " initial" } else { "" };
        let rv = |obj: &ConfigMap| obj.resource_version().unwrap_or("-").to_owned();
        match item {
            FifoItem::Event { key, delta } => {
                let at = delta.object.object().map_or("-".to_owned(), |o| rv(o));
                format!("{key} {}@{at}{initial}", delta.kind)
            }
            FifoItem::ReplacedAll {
                objects,
                resource_version,
            } => {
                let listed: Vec<String> = objects
                    .iter()
                    .map(|(key, obj)| format!("{key}@{}", rv(obj)))
                    .collect();
                format!(
                    "replaced all at {resource_version}: {}{initial}",
                    listed.join(" ")
                )
            }
            FifoItem::SyncAll => format!("sync all{initial}"),
        }
    }

    async fn pop(fifo: &RealFifo<ConfigMap>) -> String {
        fifo.pop(line).await.unwrap()
    }

    async fn drain(fifo: &RealFifo<ConfigMap>) -> Vec<String> {
        let mut popped = Vec::new();
        while !fifo.is_empty() {
            popped.push(pop(fifo).await);
        }
        popped
    }

    #[tokio::test]
    async fn every_event_is_popped_alone_in_arrival_order_across_keys() {
        let fifo = RealFifo::default();
        fifo.add(cm("a", "1"));
        fifo.add(cm("b", "1"));
        fifo.update(cm("a", "2"));
        fifo.delete(cm("a", "3"));
        fifo.delete(cm("a", "3"));
        fifo.delete(cm("unknown", "4"));
        assert!(fifo.has_synced(), "an add before any replace syncs at once");
        let snapshot = fifo.snapshot(2);
        assert_eq!(snapshot.depth, 6);
        let head: Vec<_> = snapshot
            .keys
            .iter()
            .map(|(k, d)| (&**k, d[0].kind))
            .collect();
        assert_eq!(
            head,
            [("ns/a", DeltaType::Added), ("ns/b", DeltaType::Added)]
        );
        assert_eq!(
            drain(&fifo).await,
            [
                "ns/a Added@1",
                "ns/b Added@1",
                "ns/a Updated@2",
                "ns/a Deleted@3",
                "ns/a Deleted@3",
                "ns/unknown Deleted@4",
            ]
        );
    }

    #[tokio::test]
    async fn a_relist_is_one_item_behind_what_was_queued_and_a_resync_another() {
        let fifo = RealFifo::default();
        fifo.add(cm("queued", "2"));
        fifo.replace([cm("kept", "1"), cm("new", "8")], "8");
        fifo.resync();
        let snapshot = fifo.snapshot(10);
        assert_eq!(snapshot.depth, 3, "in items");
        let shown: Vec<_> = snapshot
            .keys
            .iter()
            .map(|(k, d)| format!("{k} {}", d[0].kind))
            .collect();
        assert_eq!(
            shown,
            [
                "ns/queued Added",
                "ns/kept Replaced",
                "ns/new Replaced",
                "* Sync"
            ]
        );
        assert_eq!(
            drain(&fifo).await,
            [
                "ns/queued Added@2",
                "replaced all at 8: ns/kept@1 ns/new@8",
                "sync all",
            ]
        );
    }

    #[tokio::test]
    async fn the_first_replace_is_the_initial_list_and_syncs_once_processed() {
        let fifo = RealFifo::default();
        fifo.replace([cm("a", "1"), cm("b", "1")], "1");
        assert!(!fifo.has_synced());
        fifo.update(cm("a", "2"));
        let during = fifo
            .pop(|item, initial| (line(item, initial), fifo.has_synced()))
            .await
            .unwrap();
        assert_eq!(
            during,
            ("replaced all at 1: ns/a@1 ns/b@1 initial".to_owned(), false),
            "synced only once the relist is applied"
        );
        assert!(fifo.has_synced());
        assert_eq!(pop(&fifo).await, "ns/a Updated@2");

        let empty = RealFifo::<ConfigMap>::default();
        empty.replace([], "1");
        assert!(
            !empty.has_synced(),
            "even an empty list is an item to apply"
        );
        assert_eq!(pop(&empty).await, "replaced all at 1:  initial");
        empty.wait_synced().await;
    }

    #[tokio::test]
    async fn process_runs_without_the_lock_so_producers_go_on() {
        let fifo = RealFifo::default();
        fifo.add(cm("a", "1"));
        let queued_meanwhile = fifo
            .pop(|_, _| {
                // A producer queueing while a handler runs would deadlock under the lock.
                fifo.add(cm("b", "2"));
                fifo.len()
            })
            .await
            .unwrap();
        assert_eq!(queued_meanwhile, 1);
        assert_eq!(pop(&fifo).await, "ns/b Added@2");
    }

    #[tokio::test]
    async fn the_watermark_moves_only_once_an_item_is_processed() {
        let watermark = Watermark::default();
        let fifo = RealFifo::default().with_watermark(watermark.clone());
        fifo.bookmark("3");
        assert_eq!(
            watermark.get(),
            3,
            "nothing queued: a bookmark counts at once"
        );
        fifo.add(cm("a", "5"));
        fifo.bookmark("6");
        fifo.add(cm("b", "x"));
        let during = fifo.pop(|_, _| watermark.get()).await.unwrap();
        assert_eq!((during, watermark.get()), (3, 6));
        assert_eq!(pop(&fifo).await, "ns/b Added@x");
        assert_eq!(watermark.get(), 6, "not an integer: moves nothing");
        fifo.replace([cm("a", "5")], "9");
        let during = fifo.pop(|_, _| watermark.get()).await.unwrap();
        assert_eq!((during, watermark.get()), (6, 9));
    }

    #[tokio::test]
    async fn objects_are_transformed_once_as_they_enter() {
        let transformed = Arc::new(AtomicUsize::new(0));
        let count = transformed.clone();
        let transform: Transformer<ConfigMap> = Arc::new(move |_: &mut ConfigMap| {
            count.fetch_add(1, Ordering::Relaxed);
        });
        let fifo = RealFifo::new(Some(transform));
        fifo.update(cm("b", "2"));
        fifo.replace([cm("a", "1"), cm("b", "2")], "2");
        fifo.resync();
        assert_eq!(drain(&fifo).await.len(), 3);
        assert_eq!(transformed.load(Ordering::Relaxed), 3, "not the resync");
    }

    #[tokio::test]
    async fn close_ends_pops_once_the_queue_is_drained() {
        let fifo = RealFifo::<ConfigMap>::default();
        let waiting = tokio::spawn({
            let fifo = fifo.clone();
            async move { fifo.pop(|_, _| ()).await }
        });
        tokio::task::yield_now().await;
        fifo.close();
        assert_eq!(waiting.await.unwrap(), Err(PopError::Closed));
        fifo.add(cm("a", "1"));
        assert_eq!(pop(&fifo).await, "ns/a Added@1", "queued items still pop");
        assert_eq!(fifo.pop(|_, _| ()).await, Err(PopError::Closed));
    }
}
