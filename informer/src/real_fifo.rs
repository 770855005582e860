//! The RealFIFO: every event in arrival order, one delta per pop (client-go's `RealFIFO`, what
//! its informers use since `InOrderInformers`).
//!
//! # Implementation Details
//!
//! The state sits behind one `parking_lot` mutex: `items`, every queued delta with its key,
//! oldest first. Nothing is merged: two events for one key are two items, popped apart, with
//! other keys' events between them as they arrived. This is client-go's non-atomic mode, with
//! the informer's indexer as known objects: `replace` queues tombstones for the keys the list
//! no longer has, then `Replaced` for every listed object, and `resync` queues `Sync` for the
//! known keys with nothing queued.
//!
//! As in the [`DeltaFifo`](crate::DeltaFifo), `pop` runs `process` under the lock, so the
//! known objects a `replace` or a `resync` reads are exactly what `process` left; `has_synced`
//! is an atomic flag published after the item that got there was processed; and a pop waiting
//! on an empty queue registers with a [`Notify`] before it releases the lock, so no wake-up is
//! lost. Objects are transformed before the lock is taken, once, and shared as `Arc`s.

use std::collections::{HashMap, HashSet, VecDeque};
use std::pin::pin;
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};
use tokio::sync::Notify;

use crate::synced::SyncedLatch;
use crate::watermark::{self, Watermark};

use crate::delta_fifo::{
    Delta, DeltaObject, DeltaType, KnownObjects, PopError, QueueSnapshot, QueuedDelta, Transformer,
};
use crate::object::{DeletedFinalStateUnknown, Key, Object, key_of};
use crate::reflector::ReflectorStore;

/// A queue of every event, in the order they came, one [`Delta`] per pop (client-go's
/// `RealFIFO`). Select it for an informer with
/// [`FifoKind::InOrder`](crate::FifoKind::InOrder).
///
/// Where the [`DeltaFifo`](crate::DeltaFifo) keeps one entry per key and hands out all of a
/// key's deltas at once, in the order keys first arrived, the RealFIFO keeps the log:
///
/// * **Every event, in order.** `add`, `update` and `delete` each append one delta; a key's
///   deltas are never merged, and events of different keys stay interleaved as they came.
///   A `delete` is queued even for a key nobody knows.
/// * **`replace(list)`** appends, in this order: a [`DeletedFinalStateUnknown`] tombstone for
///   every queued key missing from `list` whose newest delta is not already `Deleted`
///   (carrying that delta's object), in the order the keys were first queued; one for every
///   known key neither listed nor queued (carrying the known object); then `Replaced` for
///   every listed object. The first `replace` sets the number of items
///   [`has_synced`](Self::has_synced) waits for: everything queued then, counted in events.
/// * **`resync`** appends `Sync`, with the known object, for every known key with nothing
///   queued.
/// * **[`pop`](Self::pop) processes under the lock**, one delta at a time, exactly as
///   [`DeltaFifo::pop`](crate::DeltaFifo::pop) does.
///
/// ```
/// use std::sync::Arc;
/// use informer::{DeltaFifo, Indexer, RealFifo};
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
///
/// let cm = |name: &str| ConfigMap {
///     metadata: ObjectMeta { namespace: Some("ns".into()), name: Some(name.into()), ..Default::default() },
///     ..Default::default()
/// };
/// let real = RealFifo::new(Arc::new(Indexer::<ConfigMap>::default()), None);
/// let classic = DeltaFifo::new();
/// for (name, update) in [("a", false), ("b", false), ("a", true)] {
///     if update { real.update(cm(name)); classic.update(cm(name)) } else { real.add(cm(name)); classic.add(cm(name)) }
/// }
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let mut pops = Vec::new();
/// for _ in 0..3 {
///     pops.push(real.pop(|key, delta, _| format!("{key} {}", delta.kind)).await.unwrap());
/// }
/// assert_eq!(pops, ["ns/a Added", "ns/b Added", "ns/a Updated"]);
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
    known_objects: Arc<dyn KnownObjects<K>>,
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
    /// Every queued delta with its key, oldest first.
    items: VecDeque<(Key, Delta<K>)>,
    /// Items ever queued, and ever popped and processed.
    pushed: u64,
    popped: u64,
    /// `(n, rv)`: once `n` items have been processed, everything up to `rv` is applied.
    /// Increasing in `n`.
    marks: VecDeque<(u64, u64)>,
    /// Whether anything was ever queued by `add`, `update`, `delete` or `replace`.
    populated: bool,
    /// Items of the first `replace` (and before it) not yet popped.
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

// === impl RealFifo ===

impl<K: Object> RealFifo<K> {
    /// An empty queue. `known_objects` are the objects its consumer holds (the informer's
    /// indexer): what `replace` finds deleted and `resync` re-delivers. `transformer` runs
    /// once on every object entering from outside, before it is shared.
    pub fn new(
        known_objects: Arc<dyn KnownObjects<K>>,
        transformer: Option<Transformer<K>>,
    ) -> Self {
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
                known_objects,
                transformer,
                item_added: Notify::new(),
                synced: SyncedLatch::default(),
                watermark: None,
            }),
        }
    }

    /// Has the queue move `watermark`: past each event's resource version once it is
    /// processed (events arrive in resource-version order), to a `replace`'s once all of it
    /// is, and to a bookmark's once everything queued before it is.
    pub(crate) fn with_watermark(mut self, watermark: Watermark) -> Self {
        Arc::get_mut(&mut self.shared)
            .expect("set on a new queue")
            .watermark = Some(watermark);
        self
    }

    /// A bookmark reached `resource_version`: nothing changed up to it. It counts only for
    /// the informer's [store resource version](crate::SharedIndexInformer::store_resource_version),
    /// once everything queued before it has been processed.
    pub fn bookmark(&self, resource_version: &str) {
        let mut state = self.shared.state.lock();
        state.mark(watermark::parse(Some(resource_version)));
        self.shared.release(state);
    }

    /// Queues an [`Added`](DeltaType::Added) delta for `obj`.
    pub fn add(&self, obj: K) {
        self.push(DeltaType::Added, obj);
    }

    /// Queues an [`Updated`](DeltaType::Updated) delta for `obj`.
    pub fn update(&self, obj: K) {
        self.push(DeltaType::Updated, obj);
    }

    /// Queues a [`Deleted`](DeltaType::Deleted) delta carrying `obj`, known or not.
    pub fn delete(&self, obj: K) {
        self.push(DeltaType::Deleted, obj);
    }

    /// Replaces the queue's view of the world with `list`, the result of a LIST: tombstones
    /// for what is gone, then `Replaced` for every listed object; see the
    /// [type documentation](RealFifo). The resource version counts only for the informer's
    /// [store resource version](crate::SharedIndexInformer::store_resource_version).
    pub fn replace(&self, list: impl IntoIterator<Item = K>, resource_version: &str) {
        let shared = &*self.shared;
        let list: Vec<(Key, Arc<K>)> = list.into_iter().map(|obj| shared.share(obj)).collect();
        let listed: HashSet<&Key> = list.iter().map(|(key, _)| key).collect();
        let mut state = shared.state.lock();
        let st = &mut *state;
        // Each queued key's newest delta, the keys in the order they were first queued.
        let mut newest: HashMap<&Key, &Delta<K>> = HashMap::new();
        let mut queued = Vec::new();
        for (key, delta) in &st.items {
            if newest.insert(key, delta).is_none() {
                queued.push(key);
            }
        }
        let mut gone: Vec<(Key, Delta<K>)> = queued
            .into_iter()
            .filter(|key| !listed.contains(key) && newest[key].kind != DeltaType::Deleted)
            .map(|key| {
                (
                    key.clone(),
                    tombstone(key, newest[key].object.object().cloned()),
                )
            })
            .collect();
        for key in shared.known_objects.list_keys() {
            if listed.contains(&key) || newest.contains_key(&key) {
                continue;
            }
            let obj = shared.known_objects.get_by_key(&key);
            if obj.is_none() {
                tracing::info!(key = %key, "key does not exist in known objects store, placing tombstone without object");
            }
            gone.push((key.clone(), tombstone(&key, obj)));
        }
        let replaced = list.iter().map(|(key, obj)| {
            let object = DeltaObject::Object(obj.clone());
            (
                key.clone(),
                Delta {
                    kind: DeltaType::Replaced,
                    object,
                },
            )
        });
        st.pushed += (gone.len() + list.len()) as u64;
        st.items.extend(gone.into_iter().chain(replaced));
        st.mark(watermark::parse(Some(resource_version)));
        if !st.populated {
            st.populated = true;
            st.initial_population_count = st.items.len();
        }
        shared.release(state);
    }

    /// Queues a [`Sync`](DeltaType::Sync) delta, carrying the known object, for every known
    /// key with nothing queued.
    pub fn resync(&self) {
        let shared = &*self.shared;
        let mut state = shared.state.lock();
        let queued: HashSet<Key> = state.items.iter().map(|(key, _)| key.clone()).collect();
        for key in shared.known_objects.list_keys() {
            if queued.contains(&key) {
                continue;
            }
            let Some(obj) = shared.known_objects.get_by_key(&key) else {
                tracing::info!(key = %key, "key does not exist in known objects store, unable to queue object for sync");
                continue;
            };
            let object = DeltaObject::Object(obj);
            state.items.push_back((
                key,
                Delta {
                    kind: DeltaType::Sync,
                    object,
                },
            ));
            state.pushed += 1;
        }
        shared.release(state);
    }

    /// Waits for a queued delta, removes it, and returns what `process` returns for it.
    ///
    /// `process` gets the delta's key, the delta, and `is_in_initial_list`: true while the
    /// queue has not [synced](Self::has_synced). It runs synchronously **under the queue's
    /// lock**, as [`DeltaFifo::pop`](crate::DeltaFifo::pop)'s does: keep it short and never
    /// call the queue from it (that deadlocks).
    ///
    /// # Errors
    ///
    /// [`PopError::Closed`] once [`close`](Self::close) was called and the queue is empty.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropping the future before it completes removes nothing.
    pub async fn pop<F, R>(&self, process: F) -> Result<R, PopError>
    where
        F: FnOnce(Key, Delta<K>, bool) -> R,
    {
        let shared = &*self.shared;
        loop {
            let mut notified = pin!(shared.item_added.notified());
            notified.as_mut().enable();
            {
                let mut state = shared.state.lock();
                if let Some((key, delta)) = state.items.pop_front() {
                    let is_in_initial_list = !state.has_synced();
                    state.initial_population_count =
                        state.initial_population_count.saturating_sub(1);
                    let out = process(key, delta, is_in_initial_list);
                    state.popped += 1;
                    shared.release(state);
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

    /// The number of queued deltas.
    pub fn len(&self) -> usize {
        self.shared.state.lock().items.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What the queue holds: its depth and its first `limit` deltas in pop order, each as a
    /// key with one delta (see [`DeltaFifo::snapshot`](crate::DeltaFifo::snapshot)).
    pub fn snapshot(&self, limit: usize) -> QueueSnapshot {
        let state = self.shared.state.lock();
        let depth = state.items.len();
        let held: Vec<(Key, Delta<K>)> = state.items.iter().take(limit).cloned().collect();
        drop(state);
        let keys = held
            .into_iter()
            .map(|(key, delta)| {
                let queued = QueuedDelta {
                    kind: delta.kind,
                    resource_version: delta
                        .object
                        .object()
                        .and_then(|obj| obj.resource_version())
                        .map(str::to_owned),
                    tombstone: delta.object.is_tombstone(),
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
        state.items.push_back((key, Delta { kind, object }));
        state.pushed += 1;
        state.mark(rv);
        shared.release(state);
    }
}

fn tombstone<K>(key: &Key, obj: Option<Arc<K>>) -> Delta<K> {
    let key = key.clone();
    Delta {
        kind: DeltaType::Deleted,
        object: DeltaObject::Tombstone(DeletedFinalStateUnknown { key, obj }),
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

    /// Publishes `has_synced`, releases the lock, then wakes whoever needs it.
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
    use crate::store::Indexer;

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

    /// A queue whose known objects are `cached`, and the indexer holding them.
    fn real_fifo(cached: &[(&str, &str)]) -> (RealFifo<ConfigMap>, Indexer<ConfigMap>) {
        let indexer = Indexer::default();
        for (name, rv) in cached {
            indexer.add(Arc::new(cm(name, rv)));
        }
        (RealFifo::new(Arc::new(indexer.clone()), None), indexer)
    }

    /// Pops one delta as `key Kind@rv`, marking tombstones and initial-list items.
    async fn pop(fifo: &RealFifo<ConfigMap>) -> String {
        fifo.pop(|key, delta, initial| {
            let obj = delta.object.object();
            let rv = obj.and_then(|o| o.resource_version()).unwrap_or("-");
            let tombstone = if delta.object.is_tombstone() {
                "(tombstone)"
            } else {
                ""
            };
            let initial = if initial { " initial" } else { "" };
            format!("{key} {}{tombstone}@{rv}{initial}", delta.kind)
        })
        .await
        .unwrap()
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
        let (fifo, _) = real_fifo(&[]);
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
    async fn replace_queues_tombstones_with_the_last_known_state_then_the_listed_objects() {
        let (fifo, _) = real_fifo(&[("gone", "1"), ("kept", "1")]);
        fifo.add(cm("queued", "2"));
        fifo.update(cm("queued", "3"));
        fifo.add(cm("deleted", "4"));
        fifo.delete(cm("deleted", "5"));
        fifo.add(cm("relisted", "6"));
        fifo.replace([cm("kept", "1"), cm("relisted", "7"), cm("new", "8")], "8");
        assert_eq!(
            drain(&fifo).await,
            [
                "ns/queued Added@2",
                "ns/queued Updated@3",
                "ns/deleted Added@4",
                "ns/deleted Deleted@5",
                "ns/relisted Added@6",
                // Missing from the list: the newest queued state, then the known one. A key
                // whose newest delta is a deletion gets none.
                "ns/queued Deleted(tombstone)@3",
                "ns/gone Deleted(tombstone)@1",
                "ns/kept Replaced@1",
                "ns/relisted Replaced@7",
                "ns/new Replaced@8",
            ]
        );
    }

    #[tokio::test]
    async fn the_first_replace_is_the_initial_list_counted_in_events() {
        let (fifo, _) = real_fifo(&[]);
        fifo.replace([cm("a", "1"), cm("b", "1")], "1");
        assert!(!fifo.has_synced());
        fifo.update(cm("a", "2"));
        assert_eq!(pop(&fifo).await, "ns/a Replaced@1 initial");
        assert_eq!(pop(&fifo).await, "ns/b Replaced@1 initial");
        assert!(
            fifo.has_synced(),
            "synced once the listed items are processed"
        );
        assert_eq!(pop(&fifo).await, "ns/a Updated@2");

        let (empty, _) = real_fifo(&[]);
        empty.replace([], "1");
        assert!(empty.has_synced(), "an empty first list syncs at once");
        empty.wait_synced().await;
    }

    #[tokio::test]
    async fn resync_queues_the_known_objects_with_nothing_queued_untransformed() {
        let indexer = Indexer::default();
        indexer.add(Arc::new(cm("a", "1")));
        indexer.add(Arc::new(cm("b", "1")));
        let transformed = Arc::new(AtomicUsize::new(0));
        let count = transformed.clone();
        let transform: Transformer<ConfigMap> = Arc::new(move |_: &mut ConfigMap| {
            count.fetch_add(1, Ordering::Relaxed);
        });
        let fifo = RealFifo::new(Arc::new(indexer), Some(transform));
        fifo.update(cm("b", "2"));
        fifo.resync();
        assert_eq!(drain(&fifo).await, ["ns/b Updated@2", "ns/a Sync@1"]);
        assert_eq!(transformed.load(Ordering::Relaxed), 1, "only the update");
    }

    #[tokio::test]
    async fn close_ends_pops_once_the_queue_is_drained() {
        let (fifo, _) = real_fifo(&[]);
        let waiting = tokio::spawn({
            let fifo = fifo.clone();
            async move { fifo.pop(|_, _, _| ()).await }
        });
        tokio::task::yield_now().await;
        fifo.close();
        assert_eq!(waiting.await.unwrap(), Err(PopError::Closed));
        fifo.add(cm("a", "1"));
        assert_eq!(pop(&fifo).await, "ns/a Added@1", "queued items still pop");
        assert_eq!(fifo.pop(|_, _, _| ()).await, Err(PopError::Closed));
    }
}
