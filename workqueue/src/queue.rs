//! The base queue, [`Queue`]: fair, stingy, many producers and consumers, graceful shutdown.
//!
//! # Implementation Details
//!
//! One [`parking_lot::Mutex`] guards one `State`, and every operation is one short critical
//! section on it. Where client-go keeps a FIFO plus two sets (`dirty`, `processing`) and
//! probes them several times per operation, this queue keeps one map, `items`, from each
//! item it knows to an [`ItemState`], plus the FIFO of queued items:
//!
//! | state | in FIFO | handed out | delayed entry | `add` moves it to | `done` moves it to |
//! |---|---|---|---|---|---|
//! | (absent) | no | no | no | `Queued(seq)` | (ignored) |
//! | `Queued(seq)` | yes | no | no | (unchanged) | (ignored) |
//! | `Processing` | no | yes | no | `ProcessingDirty` | (absent) |
//! | `ProcessingDirty` | no | yes | no | (unchanged) | `Queued` |
//! | `Waiting(due)` | no | no | yes | `Queued` | (ignored) |
//! | `ProcessingWaiting(due)` | no | yes | yes | `ProcessingDirty` | `Waiting(due)` |
//!
//! The map stores each state packed into one word, `PackedState` (two bits of state, 62 of
//! push number or deadline), so an entry is the item plus 8 bytes and a control byte.
//!
//! `Queued(seq)` records where the item was pushed: the FIFO ([`Fifo`]) numbers every push
//! and counts its pops, so `get` only pops — it never touches the map — and a `Queued(seq)`
//! that the FIFO has popped since *reads* as `Processing` (`Fifo::current`); the next
//! transition of that item writes its real state. The two `Waiting` states belong to the
//! delaying layer (see [`crate::delaying`]); a plain [`Queue`] never enters them. So `done`
//! costs one hash lookup in the common case and `get` none. An `add` of an item that is
//! already queued (or dirty while being processed) — most adds of a busy key — usually does
//! not take the lock at all: the thread remembers the keys it found dirty, and per-slot pop
//! counters say whether that can have changed ([`crate::recent`]). Failing that, it is one
//! lookup under the lock in a short inlined path that builds nothing and wakes nobody; the
//! same path marks an item being processed dirty. Any other `add` continues out of line and
//! probes again to insert. Both paths leave the item dirty, so both let the thread remember
//! it (the inline path keeps the item given to `add`; the other renews an entry it has).
//!
//! The map is [`hashbrown`]'s, for `entry_ref` (`done` finds, updates or removes an entry
//! in one probe, without cloning the key) and its default hasher, foldhash: several times
//! faster than std's SipHash on short keys, and randomly seeded, which is enough
//! for keys that come from the cluster's own object names.
//!
//! Invariants, checked by the model tests:
//!
//! * an item is in the FIFO exactly once if its state reads `Queued`, and not at all otherwise —
//!   so it is never queued twice (the client-go "dirty" set is `Queued ∪ ProcessingDirty`);
//! * `processing` counts the states that are handed out — so `get` never hands out an item
//!   that is handed out already, and `done` re-queues a dirty item exactly once;
//! * `len()` is the FIFO's length: items being processed, including dirty ones, are not in it.
//!
//! Getters that find the FIFO empty park in [`crate::waiters`], which wakes exactly one of
//! them per queued item. Wakers are collected under the lock and woken after it is released.

use std::collections::VecDeque;
use std::fmt;
use std::future::poll_fn;
use std::hash::Hash;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hashbrown::HashMap;
use hashbrown::hash_map::{Entry, EntryRef};
use parking_lot::{Mutex, MutexGuard};
use tokio::sync::Notify;
use tokio::time::{Instant, Sleep};

use crate::delaying::DelayHeap;
use crate::metrics::{MetricsProvider, QueueMetrics, UNFINISHED_WORK_UPDATE_PERIOD};
use crate::precise::{self, PreciseWake};
use crate::recent::PopCounters;
use crate::waiters::{Waiters, WakeList};

/// How a queue is built: its name and where its metrics go.
///
/// Metrics are recorded only when the name is non-empty *and* a provider is set (client-go's
/// rule); the default records none.
///
/// ```
/// use std::sync::Arc;
/// use workqueue::{MetricsProvider, QueueConfig};
///
/// struct Prometheus;
/// impl MetricsProvider for Prometheus {}
///
/// let config = QueueConfig::new()
///     .name("memcached")
///     .metrics_provider(Arc::new(Prometheus));
/// assert_eq!(config.queue_name(), "memcached");
/// ```
#[derive(Clone, Default)]
pub struct QueueConfig {
    name: String,
    metrics_provider: Option<Arc<dyn MetricsProvider>>,
}

impl QueueConfig {
    /// An unnamed configuration without metrics.
    pub fn new() -> Self {
        Self::default()
    }

    /// Names the queue; the name labels its metrics.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Sends the queue's metrics to `provider` (only if the queue is named).
    pub fn metrics_provider(mut self, provider: Arc<dyn MetricsProvider>) -> Self {
        self.metrics_provider = Some(provider);
        self
    }

    /// The queue's name (empty if unnamed).
    pub fn queue_name(&self) -> &str {
        &self.name
    }

    fn build_metrics<T: Eq + Hash + Clone>(&self) -> Option<QueueMetrics<T>> {
        if self.name.is_empty() {
            return None;
        }
        let provider = self.metrics_provider.as_deref()?;
        Some(QueueMetrics::new(provider, &self.name))
    }
}

impl fmt::Debug for QueueConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueConfig")
            .field("name", &self.name)
            .field("metrics_provider", &self.metrics_provider.is_some())
            .finish()
    }
}

/// A fair, deduplicating work queue (client-go's `workqueue.Typed[T]`).
///
/// `Queue` is a handle: clones share one queue, so give each producer and worker its own
/// clone. The contract (fair, stingy, shutdown) is in the [crate docs](crate).
///
/// The item type needs `Eq + Hash` to be deduplicated, `Clone` because an item is held both
/// by the dedup map and by the FIFO (use a cheap-to-clone key such as `Arc<str>` for large
/// items), and `Send + 'static` so queues and items move between tasks. `Sync` is not
/// required: items are only touched under the queue's lock, by their owner, or by the thread
/// that remembers them for its duplicate adds (see [`add`](Self::add)).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use workqueue::Queue;
///
/// let queue = Queue::new();
/// queue.add("a");
/// queue.add("b");
/// queue.add("a"); // already queued: nothing happens
/// assert_eq!(queue.len(), 2);
///
/// let item = queue.get().await.unwrap();
/// assert_eq!(item, "a");
/// queue.add("a"); // being processed: queued again when `done` is called
/// assert_eq!(queue.len(), 1);
/// queue.done(&item);
/// assert_eq!(queue.len(), 2);
/// # }
/// ```
pub struct Queue<T: Send> {
    pub(crate) shared: Arc<Shared<T>>,
}

/// The state shared by all handles of one queue.
pub(crate) struct Shared<T: Send> {
    pub(crate) state: Mutex<State<T>>,
    /// Woken when a drain may have completed, or was cut short by `shut_down`.
    drained: Notify,
    /// Zero of the queue's clock: delayed deadlines are nanoseconds since this instant.
    pub(crate) epoch: Instant,
    /// Lets a duplicate `add` skip the lock (see [`crate::recent`]).
    counters: PopCounters<T>,
}

/// Where an item is; see the table in the module docs.
///
/// This is the decoded view; the item map stores it packed into one word, as a
/// [`PackedState`]. Read a stored state through [`Fifo::current`]: a `Queued(seq)` whose item
/// has been popped reads as `Processing`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ItemState {
    /// Pushed to the FIFO as its push number `seq`: waiting for a worker until the FIFO has
    /// popped it, handed out (`Processing`) after.
    Queued(u64),
    /// Handed out to a worker, not added since.
    Processing,
    /// Handed out and added again since: re-queued by `done`.
    ProcessingDirty,
    /// Not queued nor handed out; the delayed request due at this deadline (nanoseconds
    /// since the queue's epoch) will queue it.
    Waiting(u64),
    /// Handed out; the delayed request due at this deadline will mark it dirty.
    ProcessingWaiting(u64),
}

/// The largest payload of an [`ItemState`]: push numbers and deadlines (nanoseconds since the
/// queue's epoch, about 146 years) stay below 2⁶².
pub(crate) const MAX_PAYLOAD: u64 = (1 << 62) - 1;

/// An [`ItemState`] in one word, as the item map stores it: the top two bits say which
/// state, the other 62 hold the push number or the deadline.
///
/// | bits 63–62 | bits 61–0 | state |
/// |---|---|---|
/// | `00` | `seq` | `Queued(seq)` |
/// | `01` | `at` | `Waiting(at)` |
/// | `10` | `at` | `ProcessingWaiting(at)` |
/// | `11` | 0 or 1 | `Processing` or `ProcessingDirty` |
///
/// Half the size of the enum (16 bytes: a `u64` payload and a tag), so a map entry of a
/// `u64` key is 17 bytes with its control byte instead of 25: the map is most of the queue's
/// memory, and of the memory `add_after` touches for the first time.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct PackedState(u64);

impl ItemState {
    /// Packs the state; payloads above [`MAX_PAYLOAD`] never occur (push numbers count one
    /// per push, deadlines are capped by the delaying layer).
    #[inline]
    pub(crate) fn pack(self) -> PackedState {
        const TAG: u32 = 62;
        let word = match self {
            ItemState::Queued(seq) => seq,
            ItemState::Waiting(at) => 1 << TAG | at,
            ItemState::ProcessingWaiting(at) => 2 << TAG | at,
            ItemState::Processing => 3 << TAG,
            ItemState::ProcessingDirty => 3 << TAG | 1,
        };
        debug_assert!(match self {
            ItemState::Queued(p) | ItemState::Waiting(p) | ItemState::ProcessingWaiting(p) =>
                p <= MAX_PAYLOAD,
            _ => true,
        });
        PackedState(word)
    }
}

impl PackedState {
    /// The state this word holds.
    #[inline]
    pub(crate) fn get(self) -> ItemState {
        let payload = self.0 & MAX_PAYLOAD;
        match self.0 >> 62 {
            0 => ItemState::Queued(payload),
            1 => ItemState::Waiting(payload),
            2 => ItemState::ProcessingWaiting(payload),
            _ if payload == 0 => ItemState::Processing,
            _ => ItemState::ProcessingDirty,
        }
    }
}

impl fmt::Debug for PackedState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.get().fmt(f)
    }
}

/// Everything behind the queue's lock.
pub(crate) struct State<T> {
    /// Every item the queue knows, and where it is.
    pub(crate) items: HashMap<T, PackedState>,
    /// Items in state `Queued`, oldest first, each exactly once.
    pub(crate) fifo: Fifo<T>,
    /// Number of items handed out and not yet `done` (states `Processing*`).
    pub(crate) processing: usize,
    /// Delayed entries (the delaying layer). Empty for a plain queue.
    pub(crate) delayed: DelayHeap<T>,
    /// Parked getters.
    pub(crate) waiters: Waiters,
    /// Set once by `shut_down` or `shut_down_with_drain`; never cleared.
    pub(crate) shutting_down: bool,
    /// A `shut_down_with_drain` is waiting (cleared by `shut_down`).
    drain: bool,
    /// Present only for a named queue with a metrics provider.
    pub(crate) metrics: Option<QueueMetrics<T>>,
}

/// The FIFO of queued items. It numbers every push, so that an item's state can record where
/// it was queued and `get` can hand an item out without touching the item map.
pub(crate) struct Fifo<T> {
    items: VecDeque<T>,
    /// Number of items popped so far: the push number of the front item.
    popped: u64,
}

impl<T> Default for Fifo<T> {
    fn default() -> Self {
        Self {
            items: VecDeque::new(),
            popped: 0,
        }
    }
}

impl<T> Fifo<T> {
    /// Appends `item`; returns the state that records it as queued here.
    #[inline]
    pub(crate) fn push(&mut self, item: T) -> ItemState {
        let seq = self.popped + self.items.len() as u64;
        self.items.push_back(item);
        ItemState::Queued(seq)
    }

    /// Removes the oldest item.
    #[inline]
    fn pop(&mut self) -> Option<T> {
        let item = self.items.pop_front()?;
        self.popped += 1;
        Some(item)
    }

    /// What a stored state means now: `Queued(seq)` of an item this FIFO has popped since
    /// is `Processing`.
    #[inline]
    pub(crate) fn current(&self, state: PackedState) -> ItemState {
        match state.get() {
            ItemState::Queued(seq) if seq < self.popped => ItemState::Processing,
            state => state,
        }
    }

    /// Number of queued items.
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether nothing is queued.
    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

// === impl Queue ===

impl<T: Eq + Hash + Clone + Send + 'static> Queue<T> {
    /// An unnamed queue without metrics.
    pub fn new() -> Self {
        Self::with_config(QueueConfig::default())
    }

    /// A queue built from `config`.
    ///
    /// If `config` enables metrics and a tokio runtime is current, this spawns the task that
    /// refreshes the unfinished-work gauges every 500 ms; it ends when the queue shuts down
    /// or is dropped.
    pub fn with_config(config: QueueConfig) -> Self {
        let metrics = config.build_metrics();
        let has_metrics = metrics.is_some();
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                items: HashMap::default(),
                fifo: Fifo::default(),
                processing: 0,
                delayed: DelayHeap::default(),
                waiters: Waiters::default(),
                shutting_down: false,
                drain: false,
                metrics,
            }),
            drained: Notify::new(),
            epoch: Instant::now(),
            counters: PopCounters::default(),
        });
        if has_metrics {
            spawn_unfinished_work_updater(&shared);
        }
        Self { shared }
    }

    /// Queues `item` for processing, unless it is already waiting to be processed.
    ///
    /// * Not known to the queue: appended to the back of the FIFO, and one parked `get`
    ///   is woken.
    /// * Already queued: nothing happens (this is the dedup; the position is kept).
    /// * Being processed: marked dirty, not queued; [`done`](Self::done) queues it again, so
    ///   however many times it is added meanwhile, it is processed exactly once more.
    /// * Pending in the delaying layer: the pending entry is dropped and the item is queued
    ///   now (see [`DelayingQueue`](crate::DelayingQueue) for why).
    /// * After shutdown: ignored.
    ///
    /// A repeated add of a queued item is usually answered without taking the queue's lock:
    /// the calling thread remembers the item (the value passed in, which would otherwise be
    /// dropped) together with a counter that changes whenever an item that might be it is
    /// handed out. So a thread may keep up to 512 recently re-added items per queue alive,
    /// for up to 8 queues (the oldest queue's are dropped first); they are dropped when
    /// replaced or when the thread exits. Such an add also leaves delayed items that have
    /// come due for the next operation to queue.
    pub fn add(&self, item: T) {
        let counters = &self.shared.counters;
        // The duplicate add, which is most adds of a busy key: first without the lock, if
        // this thread saw the item dirty and nothing of its slot was popped since...
        if counters.is_certainly_dirty(&item) {
            return;
        }
        let mut state = self.shared.state.lock();
        if state.shutting_down {
            return;
        }
        // ... then with one probe under the lock, remembering the item for next time.
        if state.add_known(&item) {
            let slot = counters.slot(&item);
            let seen = counters.count(slot);
            counters.start_counting();
            drop(state);
            counters.remember(item, slot, seen);
            return;
        }
        self.add_locked(state, item);
    }

    /// The rest of `add`, with the lock held: the item may become queued or dirty.
    #[inline(never)]
    fn add_locked(&self, mut state: MutexGuard<'_, State<T>>, item: T) {
        let mut wake = WakeList::default();
        state.promote_due(self.shared.epoch, &mut wake);
        // `enqueue` leaves the item dirty, and nothing is popped before the lock is released.
        if self.shared.counters.is_counting() {
            self.shared.counters.refresh(&item);
        }
        state.enqueue(item, &mut wake);
        // Unlock before waking (`wake` was declared after the guard, so drop it by hand).
        drop(state);
    }

    /// Waits for an item and hands it out; `None` once the queue is shut down and empty.
    ///
    /// Items come out in FIFO order. The item is now *being processed*: no other `get`
    /// returns it until you call [`done`](Self::done) with it, which you must do exactly once
    /// for every item you get, whether processing succeeded or not — otherwise the item is
    /// never handed out again and [`shut_down_with_drain`](Self::shut_down_with_drain) never
    /// returns.
    ///
    /// After [`shut_down`](Self::shut_down), items still in the queue keep being returned;
    /// `None` comes only when none is left, so workers can simply loop on
    /// `while let Some(item) = queue.get().await`.
    ///
    /// When items are pending in the delaying layer, one waiting `get` sleeps until the
    /// earliest deadline and queues the due items; this needs a runtime with the time driver
    /// enabled.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe. If the future is dropped before it completes, no item was taken from the
    /// queue, and a wake-up it had received is passed on to another waiting `get`.
    pub async fn get(&self) -> Option<T> {
        // Fast path: an item is ready, or the queue is over. No waiter, no timer, one lock.
        if let Some(out) = self.try_take() {
            return out;
        }
        self.get_slow().await
    }

    /// `get` without waiting: the item, `Some(None)` once shut down and empty, or `None`
    /// if `get` has to wait.
    fn try_take(&self) -> Option<Option<T>> {
        let mut wake = WakeList::default();
        let mut state = self.shared.state.lock();
        state.promote_due(self.shared.epoch, &mut wake);
        match state.pop(&self.shared.counters) {
            Some(item) => Some(Some(item)),
            None if state.shutting_down => Some(None),
            None => None,
        }
    }

    /// `get` when the queue was empty: park, and keep the delaying timer if needed.
    async fn get_slow(&self) -> Option<T> {
        let mut waiter = Waiter {
            shared: &self.shared,
            slot: None,
            sleep: None,
            precise: None,
            fire_at: None,
        };
        poll_fn(|cx| waiter.poll_get(cx)).await
    }

    /// Marks `item` as done processing.
    ///
    /// If the item was added again while it was being processed, it goes to the back of the
    /// queue now. Call this exactly once for every item [`get`](Self::get) returned, even if
    /// processing failed (use the rate-limited queue to retry). Calling it for an item that is
    /// not being processed is ignored, so a stray call can never queue an item twice.
    pub fn done(&self, item: &T) {
        let drained = {
            let mut wake = WakeList::default();
            let mut state = self.shared.state.lock();
            state.promote_due(self.shared.epoch, &mut wake);
            state.done(item, &mut wake)
        };
        if drained {
            self.shared.drained.notify_waiters();
        }
    }

    /// The number of items waiting to be handed out.
    ///
    /// As in client-go, items being processed are not counted, not even those added again
    /// while being processed, and neither are items still pending in the delaying layer.
    pub fn len(&self) -> usize {
        let mut wake = WakeList::default();
        let mut state = self.shared.state.lock();
        state.promote_due(self.shared.epoch, &mut wake);
        state.fifo.len()
    }

    /// Whether [`len`](Self::len) is zero.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Starts shutting the queue down, without waiting for anything.
    ///
    /// From now on `add` and `add_after` are ignored and entries still pending in the
    /// delaying layer are dropped. Items already queued are still handed out by `get`, and an
    /// item added while it was being processed is still queued again by `done`; `get`
    /// returns `None` once the queue is empty. Every parked `get` is woken.
    ///
    /// Calling it while [`shut_down_with_drain`](Self::shut_down_with_drain) waits makes that
    /// call return. Calling it twice is harmless.
    pub fn shut_down(&self) {
        {
            let mut wake = WakeList::default();
            let mut state = self.shared.state.lock();
            state.promote_due(self.shared.epoch, &mut wake);
            state.shut_down(false, &mut wake);
        }
        self.shared.drained.notify_waiters();
    }

    /// Shuts the queue down like [`shut_down`](Self::shut_down), then waits until every queued
    /// item has been handed out and every handed-out item is `done`.
    ///
    /// Unlike client-go today, which waits only for the items being processed and can
    /// return while items are still queued, this waits for the queued items too: the fix
    /// proposed in kubernetes/kubernetes#141079. Items added while being processed are
    /// queued by `done` and waited for as well. Workers must keep calling `get` and `done`
    /// until `get` returns `None`, or this never returns; a concurrent `shut_down` makes it
    /// return at once.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the shutdown has happened by the first poll; dropping the future only
    /// stops the waiting.
    pub async fn shut_down_with_drain(&self) {
        {
            let mut wake = WakeList::default();
            let mut state = self.shared.state.lock();
            state.promote_due(self.shared.epoch, &mut wake);
            state.shut_down(true, &mut wake);
        }
        loop {
            let mut notified = pin!(self.shared.drained.notified());
            notified.as_mut().enable();
            {
                let state = self.shared.state.lock();
                if !state.drain || state.is_drained() {
                    return;
                }
            }
            notified.await;
        }
    }

    /// Whether [`shut_down`](Self::shut_down) or
    /// [`shut_down_with_drain`](Self::shut_down_with_drain) has been called.
    pub fn is_shutting_down(&self) -> bool {
        self.shared.state.lock().shutting_down
    }
}

impl<T: Eq + Hash + Clone + Send + 'static> Default for Queue<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Send> Clone for Queue<T> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<T: Send> fmt::Debug for Queue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.state.lock();
        f.debug_struct("Queue")
            .field("queued", &state.fifo.len())
            .field("processing", &state.processing)
            .field("delayed", &state.delayed.pending())
            .field("delayed_unrecorded", &state.delayed.unrecorded())
            .field("shutting_down", &state.shutting_down)
            .finish()
    }
}

impl<T: Eq + Hash + Clone + Send> Shared<T> {
    /// Refreshes the unfinished-work gauges; `false` once the queue is shutting down.
    fn update_unfinished_work(&self) -> bool {
        let state = self.state.lock();
        if state.shutting_down {
            return false;
        }
        if let Some(metrics) = &state.metrics {
            metrics.update_unfinished_work();
        }
        true
    }
}

/// Spawns the 500 ms refresher of the unfinished-work gauges, if a runtime is current.
fn spawn_unfinished_work_updater<T: Eq + Hash + Clone + Send + 'static>(shared: &Arc<Shared<T>>) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let shared = Arc::downgrade(shared);
    let start = Instant::now() + UNFINISHED_WORK_UPDATE_PERIOD;
    runtime.spawn(async move {
        let mut ticks = tokio::time::interval_at(start, UNFINISHED_WORK_UPDATE_PERIOD);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let Some(shared) = shared.upgrade() else {
                return;
            };
            if !shared.update_unfinished_work() {
                return;
            }
        }
    });
}

// === impl State ===

impl<T: Eq + Hash + Clone + Send> State<T> {
    /// The "add" transition of the state table, for an item that is due now.
    pub(crate) fn enqueue(&mut self, item: T, wake: &mut WakeList) {
        match self.items.entry(item) {
            Entry::Vacant(vacant) => {
                let queued = self.fifo.push(vacant.key().clone());
                if let Some(metrics) = &mut self.metrics {
                    metrics.add(vacant.key());
                }
                vacant.insert(queued.pack());
                self.waiters.wake_for_item(wake);
            }
            Entry::Occupied(mut occupied) => {
                let next = match self.fifo.current(*occupied.get()) {
                    ItemState::Queued(_) | ItemState::ProcessingDirty => return,
                    ItemState::Processing => ItemState::ProcessingDirty,
                    ItemState::Waiting(_) => {
                        self.delayed.cancel_one();
                        self.waiters.wake_for_item(wake);
                        self.fifo.push(occupied.key().clone())
                    }
                    ItemState::ProcessingWaiting(_) => {
                        self.delayed.cancel_one();
                        ItemState::ProcessingDirty
                    }
                };
                occupied.insert(next.pack());
                if let Some(metrics) = &mut self.metrics {
                    metrics.add(occupied.key());
                }
            }
        }
    }

    /// The `add` of an item the map already holds as queued, dirty or being processed, with
    /// one probe: nothing changes for the first two (the duplicate add), and an item being
    /// processed is marked dirty, which wakes nobody. Returns whether the add was handled,
    /// leaving `item` dirty; `false` sends `add` down the general path.
    ///
    /// Answers only when no delayed entry is pending, so that there is nothing to promote
    /// first; with entries pending, `add` takes the general path.
    #[inline]
    fn add_known(&mut self, item: &T) -> bool {
        if !self.delayed.is_empty() {
            return false;
        }
        let Some(state) = self.items.get_mut(item) else {
            return false;
        };
        match self.fifo.current(*state) {
            ItemState::Queued(_) | ItemState::ProcessingDirty => {}
            ItemState::Processing => {
                *state = ItemState::ProcessingDirty.pack();
                if let Some(metrics) = &mut self.metrics {
                    metrics.add(item);
                }
            }
            ItemState::Waiting(_) | ItemState::ProcessingWaiting(_) => return false,
        }
        true
    }

    /// Takes the oldest queued item. Popping it from the FIFO is what marks it as being
    /// processed: the map is not touched (see [`Fifo::current`]).
    ///
    /// This is the one transition out of the dirty states, so it is counted for the
    /// lock-free duplicate check before the item is handed out.
    fn pop(&mut self, counters: &PopCounters<T>) -> Option<T> {
        let seq = self.fifo.popped;
        let item = self.fifo.pop()?;
        debug_assert_eq!(self.items.get(&item), Some(&ItemState::Queued(seq).pack()));
        if counters.is_counting() {
            counters.count_pop(&item);
        }
        self.processing += 1;
        if let Some(metrics) = &mut self.metrics {
            metrics.get(&item);
        }
        Some(item)
    }

    /// The "done" transition. Returns whether a drain just completed.
    fn done(&mut self, item: &T, wake: &mut WakeList) -> bool {
        let EntryRef::Occupied(mut entry) = self.items.entry_ref(item) else {
            return false;
        };
        match self.fifo.current(*entry.get()) {
            ItemState::Processing => {
                entry.remove();
            }
            ItemState::ProcessingDirty => {
                entry.insert(self.fifo.push(entry.key().clone()).pack());
                self.waiters.wake_for_item(wake);
            }
            ItemState::ProcessingWaiting(at) => {
                entry.insert(ItemState::Waiting(at).pack());
            }
            // Not handed out: a stray `done` changes nothing.
            ItemState::Queued(_) | ItemState::Waiting(_) => return false,
        }
        self.processing -= 1;
        if let Some(metrics) = &mut self.metrics {
            metrics.done(item);
        }
        self.drain && self.is_drained()
    }

    /// Marks the queue as shutting down, drops pending delayed entries, wakes every getter.
    fn shut_down(&mut self, drain: bool, wake: &mut WakeList) {
        self.shutting_down = true;
        self.drain = drain;
        self.discard_delayed();
        self.waiters.wake_all(wake);
    }

    /// Parks the polled getter in `slot`; returns the deadline to sleep until if it keeps
    /// the delaying timer.
    fn park_waiter(
        &mut self,
        slot: usize,
        old: Option<std::task::Waker>,
        waker: &std::task::Waker,
    ) -> Option<u64> {
        if !self.waiters.has_keeper() && !self.delayed.is_empty() {
            self.waiters.claim_keeper(slot);
        }
        self.waiters.park(slot, old, waker);
        if !self.waiters.is_keeper(slot) {
            return None;
        }
        let at = self.delayed.next_deadline();
        self.waiters.set_armed(at);
        at
    }
}

impl<T> State<T> {
    /// Whether nothing is queued and nothing is being processed.
    fn is_drained(&self) -> bool {
        self.processing == 0 && self.fifo.is_empty()
    }

    /// Frees the slot of a `get` that completed.
    fn release_waiter(&mut self, slot: usize, wake: &mut WakeList) {
        self.waiters.release(slot);
        self.ensure_keeper(wake);
    }

    /// Frees the slot of a `get` whose future was dropped, passing on any wake-up it got.
    fn cancel_waiter(&mut self, slot: usize, wake: &mut WakeList) {
        self.waiters.release(slot);
        if !self.fifo.is_empty() {
            self.waiters.wake_for_item(wake);
        }
        self.ensure_keeper(wake);
    }

    /// Wakes an idle getter to take the keeper role if delayed entries have no keeper.
    fn ensure_keeper(&mut self, wake: &mut WakeList) {
        if !self.waiters.has_keeper() && !self.delayed.is_empty() {
            self.waiters.wake_idle(wake);
        }
    }
}

// === impl Waiter ===

/// How much earlier than a delayed deadline the keeper's tokio sleep ends, when the deadline
/// is further away than [`PRECISE_HORIZON`].
///
/// tokio's timer counts whole milliseconds and rounds deadlines up, so a tokio sleep to the
/// deadline would fire up to about a millisecond late. A sleep to 1 ms before it ends at most
/// on the deadline; from there the keeper also registers an OS-clock wake-up
/// ([`crate::precise`]) for the deadline itself.
const TIMER_SLACK: Duration = Duration::from_millis(1);

/// How close to its deadline the keeper registers an OS-clock wake-up (beside its tokio
/// sleep, which then only backs it up).
const PRECISE_HORIZON: Duration = Duration::from_millis(2);

/// The shortest time the keeper sleeps: a deadline closer than this is fired this long from
/// now, together with every other one due by then.
///
/// Deadlines can be arbitrarily dense (thousands per millisecond); waking for each one would
/// cost a thread switch per item. With this floor the keeper wakes at most once per
/// `COALESCE` and an item waits at most this much past its deadline for the wake-up (it is
/// never handed out early). A lone deadline is not delayed: the keeper sleeps to it exactly.
const COALESCE: Duration = Duration::from_micros(200);

/// The difference between tokio's clock and the OS clock above which the keeper takes tokio's
/// clock for paused (tests) and uses only tokio's timer, which follows it.
const PAUSED_CLOCK_SKEW: Duration = Duration::from_millis(1);

/// The part of a `get` future that must be cleaned up if the future is dropped.
struct Waiter<'a, T: Send> {
    shared: &'a Shared<T>,
    /// The getter's slot in `Waiters`, once it has parked.
    slot: Option<usize>,
    /// The keeper's tokio sleep. Boxed: only the keeper sleeps, and this keeps `get`'s
    /// future small.
    sleep: Option<Pin<Box<Sleep>>>,
    /// The keeper's OS-clock wake-up, when its deadline is near.
    precise: Option<Box<PreciseWake>>,
    /// When the keeper last decided to wake up (its deadline, or later by up to
    /// [`COALESCE`]).
    fire_at: Option<Instant>,
}

impl<T: Eq + Hash + Clone + Send> Waiter<'_, T> {
    /// One poll of `get`: take an item, report shutdown, or park (and, as the keeper, sleep
    /// until the earliest delayed deadline).
    fn poll_get(&mut self, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let mut timer_fired = false;
        loop {
            let deadline = {
                let mut wake = WakeList::default();
                let mut state = self.shared.state.lock();
                let old_waker = self.slot.and_then(|slot| state.waiters.begin_poll(slot));
                state.promote_due(self.shared.epoch, &mut wake);
                let out = match state.pop(&self.shared.counters) {
                    Some(item) => Some(Some(item)),
                    None if state.shutting_down => Some(None),
                    None => None,
                };
                if let Some(out) = out {
                    if let Some(slot) = self.slot.take() {
                        state.release_waiter(slot, &mut wake);
                    }
                    return Poll::Ready(out);
                }
                let slot = *self.slot.get_or_insert_with(|| state.waiters.register());
                state.park_waiter(slot, old_waker, cx.waker())
            };
            let Some(at) = deadline else {
                self.sleep = None;
                self.precise = None;
                self.fire_at = None;
                return Poll::Pending;
            };
            // Keeper: sleep on tokio's timer until shortly before the deadline, then on the
            // OS clock until it passes.
            let when = self.shared.instant_at(at);
            let now = Instant::now();
            if when <= now {
                continue; // came due since the promotion above
            }
            // Keep a wake-up already set for no earlier than this deadline and no later than
            // `COALESCE` from now, so that repeated polls cannot push it back.
            let fire_at = match self.fire_at {
                Some(set) if when <= set && set <= now + COALESCE => set,
                _ => when.max(now + COALESCE),
            };
            self.fire_at = Some(fire_at);
            let target = if fire_at - now > PRECISE_HORIZON {
                self.precise = None;
                fire_at - TIMER_SLACK
            } else {
                self.arm_precise(now, fire_at, cx.waker());
                fire_at
            };
            let timer = match &mut self.sleep {
                Some(timer) => {
                    if timer.deadline() != target {
                        timer.as_mut().reset(target);
                    }
                    timer
                }
                None => self
                    .sleep
                    .insert(Box::pin(tokio::time::sleep_until(target))),
            };
            if timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.sleep = None;
            if timer_fired {
                // The timer fired twice in one poll without anything coming due: yield to the
                // scheduler instead of spinning while the clock catches up.
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            timer_fired = true;
        }
    }

    /// Registers (or keeps) the OS-clock wake-up for `fire_at`, unless tokio's clock does
    /// not follow the OS clock (it is paused).
    fn arm_precise(&mut self, now: Instant, fire_at: Instant, waker: &std::task::Waker) {
        let os_now = std::time::Instant::now();
        let std_now = now.into_std();
        let skew = os_now
            .checked_duration_since(std_now)
            .unwrap_or_else(|| std_now - os_now);
        if skew > PAUSED_CLOCK_SKEW {
            self.precise = None;
            return;
        }
        let at = fire_at.into_std();
        if self.precise.as_ref().is_some_and(|p| p.is_for(at, waker)) {
            return;
        }
        self.precise = None; // cancel before registering anew
        self.precise = precise::wake_at(at, waker).map(Box::new);
    }
}

impl<T: Send> Drop for Waiter<'_, T> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            let mut wake = WakeList::default();
            let mut state = self.shared.state.lock();
            state.cancel_waiter(slot, &mut wake);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::task::Poll;

    use super::*;
    use crate::test_util::{CountingWaker, poll_once, poll_with, within};

    #[tokio::test(start_paused = true)]
    async fn items_come_out_in_fifo_order() {
        let queue = Queue::new();
        for item in ["a", "b", "c"] {
            queue.add(item);
        }
        for expected in ["a", "b", "c"] {
            assert_eq!(queue.get().await, Some(expected));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn add_of_a_queued_item_is_deduplicated() {
        let queue = Queue::new();
        queue.add("foo");
        queue.add("bar");
        queue.add("foo");
        assert_eq!(queue.len(), 2);
        assert_eq!(queue.get().await, Some("foo"));
        assert_eq!(queue.get().await, Some("bar"));
        assert!(queue.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn an_item_being_processed_is_not_handed_out_again() {
        let queue = Queue::new();
        queue.add("x");
        assert_eq!(queue.get().await, Some("x"));
        queue.add("x");
        let mut second = pin!(queue.get());
        assert_eq!(poll_once(second.as_mut()), Poll::Pending);
        queue.done(&"x");
        assert_eq!(poll_once(second.as_mut()), Poll::Ready(Some("x")));
    }

    #[tokio::test(start_paused = true)]
    async fn add_while_processing_requeues_once_on_done() {
        let queue = Queue::new();
        queue.add("x");
        queue.add("y");
        assert_eq!(queue.get().await, Some("x"));
        for _ in 0..5 {
            queue.add("x");
        }
        assert_eq!(
            queue.len(),
            1,
            "dirty while processing is not counted by len"
        );
        queue.done(&"x");
        assert_eq!(queue.len(), 2);
        assert_eq!(queue.get().await, Some("y"));
        assert_eq!(queue.get().await, Some("x"));
        queue.done(&"y");
        queue.done(&"x");
        assert!(queue.is_empty());
        queue.shut_down();
        assert_eq!(queue.get().await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_re_added_item_skips_the_lock_only_until_it_is_handed_out() {
        let queue = Queue::new();
        let certain = |item: &'static str| queue.shared.counters.is_certainly_dirty(&item);
        queue.add("x");
        assert!(!certain("x"), "a first add remembers nothing");
        queue.add("x"); // a duplicate found under the lock: remembered
        assert!(certain("x"));
        queue.add("y");
        queue.add("y");
        assert_eq!(queue.get().await, Some("x"));
        assert!(!certain("x"), "handed out: no longer certain");
        queue.add("x"); // being processed: marked dirty, not dropped
        assert_eq!(queue.len(), 1);
        queue.done(&"x");
        assert_eq!(queue.len(), 2);
        assert_eq!(queue.get().await, Some("y"));
        assert_eq!(queue.get().await, Some("x"));
        assert!(!certain("x"));
        queue.done(&"x");
        queue.add("x"); // queued anew: the remembered entry is renewed
        assert!(certain("x"));
        assert_eq!(queue.get().await, Some("x"));
        assert!(!certain("x"));
    }

    #[tokio::test(start_paused = true)]
    async fn an_add_of_a_remembered_item_after_shut_down_is_still_ignored() {
        let queue = Queue::new();
        queue.add(1);
        queue.add(1);
        queue.shut_down();
        queue.add(1);
        assert_eq!(queue.get().await, Some(1));
        queue.done(&1);
        queue.add(1);
        assert_eq!(queue.get().await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn len_counts_only_queued_items() {
        let queue = Queue::new();
        queue.add(1);
        queue.add(2);
        assert_eq!(queue.get().await, Some(1));
        assert_eq!(queue.len(), 1);
        queue.add(1);
        assert_eq!(queue.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn done_for_an_item_not_being_processed_is_ignored() {
        let queue = Queue::new();
        queue.done(&"never-added");
        queue.add("x");
        queue.done(&"x"); // queued, not handed out
        assert_eq!(queue.len(), 1);
        assert_eq!(queue.get().await, Some("x"));
        queue.done(&"x");
        queue.done(&"x"); // second done: ignored
        assert!(queue.is_empty());
        queue.add("x");
        assert_eq!(queue.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn get_waits_for_an_add() {
        let queue = Queue::new();
        let worker = tokio::spawn({
            let queue = queue.clone();
            async move { queue.get().await }
        });
        tokio::task::yield_now().await;
        queue.add(7);
        assert_eq!(within(worker).await.unwrap(), Some(7));
    }

    #[tokio::test(start_paused = true)]
    async fn each_add_wakes_exactly_one_parked_get() {
        let queue = Queue::<u32>::new();
        let mut gets: Vec<_> = (0..3).map(|_| Box::pin(queue.get())).collect();
        let counts: Vec<_> = gets
            .iter_mut()
            .map(|get| {
                let (waker, count) = CountingWaker::pair();
                assert_eq!(poll_with(get.as_mut(), &waker), Poll::Pending);
                (waker, count)
            })
            .collect();
        let woken = || counts.iter().map(|(_, c)| c.get()).collect::<Vec<_>>();

        queue.add(1);
        assert_eq!(
            woken(),
            [1, 0, 0],
            "the longest-waiting get is woken, alone"
        );
        queue.add(2);
        assert_eq!(woken(), [1, 1, 0]);
        queue.add(2); // duplicate: no wake-up
        assert_eq!(woken(), [1, 1, 0]);

        assert_eq!(
            poll_with(gets[0].as_mut(), &counts[0].0),
            Poll::Ready(Some(1))
        );
        assert_eq!(
            poll_with(gets[1].as_mut(), &counts[1].0),
            Poll::Ready(Some(2))
        );
        assert_eq!(poll_with(gets[2].as_mut(), &counts[2].0), Poll::Pending);
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_get_passes_its_wake_up_on() {
        let queue = Queue::<u32>::new();
        let (waker_a, woken_a) = CountingWaker::pair();
        let (waker_b, woken_b) = CountingWaker::pair();
        let mut a = Box::pin(queue.get());
        let mut b = Box::pin(queue.get());
        assert_eq!(poll_with(a.as_mut(), &waker_a), Poll::Pending);
        assert_eq!(poll_with(b.as_mut(), &waker_b), Poll::Pending);

        queue.add(1);
        assert_eq!((woken_a.get(), woken_b.get()), (1, 0));
        drop(a); // woken, but never took the item
        assert_eq!(woken_b.get(), 1, "the wake-up moved to the other get");
        assert_eq!(poll_with(b.as_mut(), &waker_b), Poll::Ready(Some(1)));
    }

    #[tokio::test(start_paused = true)]
    async fn shut_down_still_hands_out_queued_items_then_reports_none() {
        let queue = Queue::new();
        queue.add("a");
        queue.add("b");
        queue.shut_down();
        assert!(queue.is_shutting_down());
        queue.add("c"); // ignored
        assert_eq!(queue.get().await, Some("a"));
        assert_eq!(queue.get().await, Some("b"));
        assert_eq!(queue.get().await, None);
        assert_eq!(queue.get().await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn shut_down_wakes_every_parked_get() {
        let queue = Queue::<u32>::new();
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let queue = queue.clone();
                tokio::spawn(async move { queue.get().await })
            })
            .collect();
        tokio::task::yield_now().await;
        queue.shut_down();
        for worker in workers {
            assert_eq!(within(worker).await.unwrap(), None);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn dirty_item_is_still_requeued_by_done_after_shut_down() {
        let queue = Queue::new();
        queue.add("x");
        assert_eq!(queue.get().await, Some("x"));
        queue.add("x");
        queue.shut_down();
        queue.done(&"x");
        assert_eq!(queue.get().await, Some("x"));
        queue.done(&"x");
        assert_eq!(queue.get().await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn shut_down_with_drain_waits_for_queued_and_processing_items() {
        let queue = Queue::new();
        queue.add("a");
        queue.add("b");
        assert_eq!(queue.get().await, Some("a"));

        let mut drain = pin!(queue.shut_down_with_drain());
        assert_eq!(poll_once(drain.as_mut()), Poll::Pending);
        assert!(queue.is_shutting_down());

        queue.done(&"a");
        // client-go would return here: nothing is being processed. "b" is still queued.
        assert_eq!(poll_once(drain.as_mut()), Poll::Pending);
        assert_eq!(queue.get().await, Some("b"));
        assert_eq!(poll_once(drain.as_mut()), Poll::Pending);
        queue.done(&"b");
        assert_eq!(poll_once(drain.as_mut()), Poll::Ready(()));
        assert_eq!(queue.get().await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn shut_down_with_drain_waits_for_an_item_re_added_while_processing() {
        let queue = Queue::new();
        queue.add("a");
        assert_eq!(queue.get().await, Some("a"));
        queue.add("a");
        let mut drain = pin!(queue.shut_down_with_drain());
        assert_eq!(poll_once(drain.as_mut()), Poll::Pending);
        queue.done(&"a");
        assert_eq!(poll_once(drain.as_mut()), Poll::Pending);
        assert_eq!(queue.get().await, Some("a"));
        queue.done(&"a");
        assert_eq!(poll_once(drain.as_mut()), Poll::Ready(()));
    }

    #[tokio::test(start_paused = true)]
    async fn shut_down_with_drain_ignores_stray_done() {
        let queue = Queue::new();
        queue.add("a");
        queue.add("b");
        assert_eq!(queue.get().await, Some("a"));
        let mut drain = pin!(queue.shut_down_with_drain());
        assert_eq!(poll_once(drain.as_mut()), Poll::Pending);
        queue.done(&"b"); // "b" is queued, not handed out
        queue.done(&"unknown");
        assert_eq!(poll_once(drain.as_mut()), Poll::Pending);
        queue.done(&"a");
        assert_eq!(
            poll_once(drain.as_mut()),
            Poll::Pending,
            "b is still queued"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn shut_down_with_drain_returns_at_once_when_idle() {
        let queue = Queue::<u8>::new();
        queue.shut_down_with_drain().await;
        assert!(queue.is_shutting_down());
    }

    #[tokio::test(start_paused = true)]
    async fn shut_down_makes_a_waiting_drain_return() {
        let queue = Queue::new();
        queue.add(1);
        assert_eq!(queue.get().await, Some(1));
        let mut drain = pin!(queue.shut_down_with_drain());
        assert_eq!(poll_once(drain.as_mut()), Poll::Pending);
        queue.shut_down();
        assert_eq!(poll_once(drain.as_mut()), Poll::Ready(()));
    }

    #[tokio::test(start_paused = true)]
    async fn drain_completes_with_concurrent_workers() {
        let queue = Queue::new();
        for i in 0..100 {
            queue.add(i);
        }
        let workers: Vec<_> = (0..3)
            .map(|_| {
                let queue = queue.clone();
                tokio::spawn(async move {
                    let mut handled = 0;
                    while let Some(item) = queue.get().await {
                        tokio::task::yield_now().await;
                        queue.done(&item);
                        handled += 1;
                    }
                    handled
                })
            })
            .collect();
        within(queue.shut_down_with_drain()).await;
        assert!(queue.is_empty());
        let mut total = 0;
        for worker in workers {
            total += worker.await.unwrap();
        }
        assert_eq!(total, 100);
    }

    #[test]
    fn queue_can_be_built_and_fed_outside_a_runtime() {
        let queue = Queue::with_config(QueueConfig::new().name("no-runtime"));
        queue.add(1);
        assert_eq!(queue.len(), 1);
        let mut get = pin!(queue.get());
        assert_eq!(poll_once(get.as_mut()), Poll::Ready(Some(1)));
    }

    #[test]
    fn a_stored_state_is_one_word() {
        assert_eq!(std::mem::size_of::<PackedState>(), 8);
    }

    #[test]
    fn every_state_survives_packing() {
        for state in [
            ItemState::Queued(0),
            ItemState::Queued(MAX_PAYLOAD),
            ItemState::Processing,
            ItemState::ProcessingDirty,
            ItemState::Waiting(0),
            ItemState::Waiting(1),
            ItemState::Waiting(MAX_PAYLOAD),
            ItemState::ProcessingWaiting(0),
            ItemState::ProcessingWaiting(MAX_PAYLOAD),
        ] {
            assert_eq!(state.pack().get(), state);
        }
    }

    #[test]
    fn handles_are_send_and_sync_and_get_is_send() {
        fn assert_send_sync<X: Send + Sync>(_: &X) {}
        fn assert_send<X: Send>(_: &X) {}
        let queue = Queue::<String>::new();
        assert_send_sync(&queue);
        assert_send(&queue.get());
        assert_send(&queue.shut_down_with_drain());
    }
}
