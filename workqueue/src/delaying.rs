//! The delaying layer, [`DelayingQueue`]: `add_after` on a min-heap of deadlines, no task per item.
//!
//! # Implementation Details
//!
//! **One request per item.** An item has at most one pending delayed request, stored in the
//! queue's item map as `Waiting(at)` (or `ProcessingWaiting(at)` while a worker holds the
//! item), where `at` is the deadline in nanoseconds since the queue was built. Re-adding keeps
//! the earliest deadline. An item that is queued, or dirty while being processed, will be
//! processed after now anyway, so `add_after` leaves it alone; symmetrically, `add` of a
//! waiting item queues it now and cancels the pending request (see [`DelayingQueue`] for the
//! reasoning). The map packs each state into one word (`PackedState` in `queue.rs`): two
//! bits say which state and 62 hold the deadline, so deadlines are capped at 2⁶² ns (146
//! years) after the queue was built.
//!
//! **The heap.** Deadlines are ordered by a [`BinaryHeap`] of compact `Timer` entries
//! (`at: u64`, `seq: u64`, the item): 16 bytes plus the item, against client-go's
//! heap-allocated `waitFor` with a 24-byte `time.Time` and a separate map entry. `seq` numbers
//! the requests and breaks ties, so items due at the same instant are queued in the order of
//! their `add_after` calls.
//!
//! **Lazy deletion.** An entry is never searched for in the heap. When a request is cancelled
//! (by `add`) or replaced (by an earlier `add_after`), its old entry simply stays behind; the
//! item map is the truth. When an entry comes due, it fires only if the map still holds its
//! deadline and it is its item's last entry; otherwise it is stale and dropped. Firing changes
//! the state, so two entries for one item never both fire.
//!
//! The map holds the deadline alone, not which request set it, so an entry left behind by a
//! cancelled request can carry the same deadline as a later request of the same item (for
//! example on a paused clock). Both entries then come due together, and firing the stale one
//! would queue the item at the earlier request's place among the others due at that
//! instant. So entries that share a deadline are popped together, and an entry whose item has
//! a later one among them is dropped: an item's live request is always its last entry, since
//! a request that does not become live pushes nothing. That keeps the exact order with a
//! one-word state, where the map used to hold a 32-bit request ticket beside the deadline (a
//! 16-byte state) and could confuse two requests 2³² apart. Only entries with equal deadlines
//! pay for it: after popping an entry, one look at the heap's top says whether there are any.
//!
//! Stale entries are bounded: when they outnumber the live ones (and the heap has grown since
//! the last sweep), one `retain` pass removes them, so the sweep costs O(1) amortized per
//! entry.
//!
//! **Requests are recorded in batches.** Recording a request costs a probe of the item map
//! and a store to it, both at a random place in a table far larger than the cache. Under the
//! lock, one after the other, those misses cannot overlap: each `add_after` waited for its
//! own probe, and the unlock (a locked instruction) waited for its store to reach the cache.
//! So `add_after` only appends the request to a short buffer (`incoming`) when no getter
//! has to be woken for it — there is no keeper and no idle getter, or the keeper already
//! sleeps until a deadline no later than this one — and every 64 requests, or at the start
//! of any other operation on the queue (every one of them promotes due items first, and that
//! records the buffer before anything else), the buffered requests are recorded in one loop,
//! in the order they were made, where the processor overlaps their misses (the map updates
//! first, then the heap pushes, whose read-back of the entry just written would otherwise
//! wait for each map store). A request that
//! would wake a getter is recorded at once, after the buffered ones. Nothing can observe the
//! difference: the outcome of each request depends only on the item map and the heap, which
//! nothing reads between the buffering and the recording; requests are numbered (`seq`) when
//! recorded, in call order; a buffered request whose deadline has passed is recorded before
//! anything is promoted; and the wake-ups are those the recording would have done, none.
//!
//! **The timer is driven by the getters.** There is no background task. Every operation that
//! takes the lock first moves the entries whose deadline has passed into the FIFO (reading
//! the clock only when the heap is not empty), and one parked `get` — the *keeper*, see
//! [`crate::waiters`] — sleeps until the earliest deadline. Inserting a new earliest deadline
//! wakes the keeper to re-arm; nothing else does. When no worker is waiting, a due item is
//! queued by the next operation on the queue (which is the next time anyone could see it).
//! Nothing needs a runtime to be current when the queue is built.
//!
//! **Precision.** tokio's timer counts whole milliseconds and rounds up, so a plain sleep
//! fires up to about 2 ms late. The keeper therefore sleeps on tokio's timer only until 1 ms
//! before the deadline, and from there on the OS clock: it registers with one shared thread
//! ([`crate::precise`]) that blocks until the deadline and then wakes it. Sleeping, rather
//! than spinning through the last millisecond, costs no CPU and keeps the keeper's thread
//! welcome to the OS scheduler when other processes load the cores, so a waiting worker gets a
//! due item about 0.1 ms after its deadline. When deadlines are dense (more than one per
//! 0.2 ms, `COALESCE` in `queue.rs`), one wake-up serves all those due by then,
//! so an item can wait up to 0.2 ms more; nothing is ever handed out early. On a paused
//! clock (tests) tokio's timer alone is used, and it fires exactly at the deadline.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::fmt;
use std::hash::Hash;
use std::ops::Deref;
use std::time::Duration;

use tokio::time::Instant;

use crate::queue::{ItemState, MAX_PAYLOAD, Queue, QueueConfig, Shared, State};
use crate::waiters::WakeList;

/// A [`Queue`] that can also add an item after a delay (client-go's `TypedDelayingInterface`).
///
/// All of [`Queue`]'s methods are available through `Deref`. Clones share one queue.
///
/// # Delays
///
/// * `add_after(item, d)` queues `item` once `d` has passed; a zero delay adds it now.
///   (A [`Duration`] cannot be negative; the "negative delay" of client-go is a zero here.)
/// * Each item has at most one pending request, and **the earliest deadline wins**:
///   `add_after(x, 50ms)` then `add_after(x, 70ms)` queues `x` once, at 50 ms; `add_after(x,
///   50ms)` then `add_after(x, 30ms)` queues it once, at 30 ms. A later request never postpones
///   an earlier one.
/// * **An immediate `add` supersedes a pending request.** `add_after(x, 1s)` then `add(x)`
///   queues `x` now and drops the pending request, so `x` is processed once, not once now and
///   again a second later. This is where we differ from client-go, which processes `x`
///   twice (kubernetes/kubernetes#126027): a request "process `x` by then" is satisfied by
///   the processing that is about to happen, and a worker that still needs a later pass
///   asks again (`add_after` / `add_rate_limited`) when it handles `x`. It is also what the
///   earliest-deadline rule says, with "now" as the earliest deadline.
/// * For the same reason, `add_after` of an item that is already queued, or that was added
///   again while being processed, changes nothing: that item will be processed after now.
///   An item that is being processed and not dirty does get the request, which fires after
///   its deadline (queued at `done` if the worker still holds it then).
/// * `shut_down` drops every pending request; `add_after` after shutdown is ignored and
///   counts no retry.
///
/// # Timing
///
/// No task runs per item or per queue: a waiting `get` keeps the timer (so `get` needs a
/// tokio runtime with the time driver enabled once delayed items are pending). A waiting
/// worker receives a due item about 0.1 ms after its deadline (at most 0.2 ms more when
/// deadlines are dense), not within tokio's 1 ms timer tick, and without spinning: for the
/// last millisecond it sleeps on the OS clock, in a thread the queues share. If no worker
/// is waiting, the item is queued by the next operation on the queue, in deadline order and
/// ahead of items added directly after its deadline.
///
/// For the metrics, a due item became dirty at its deadline: its
/// `workqueue_queue_duration_seconds` runs from the deadline, as in client-go, whose waiting
/// goroutine adds the item then. One difference remains: client-go also counts the item in
/// `workqueue_depth` and `workqueue_adds_total` at the deadline, while this queue counts it
/// when it moves the item into the FIFO — at once if a `get` is waiting, otherwise at the
/// next operation on the queue (an `add` of an item that is already queued may not be one:
/// see [`Queue::add`]). Until then [`len`](Queue::len), which moves due items first, is
/// exact, but the depth gauge can lag.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::time::Duration;
/// use tokio::time::Instant;
/// use workqueue::DelayingQueue;
///
/// let queue = DelayingQueue::new();
/// let start = Instant::now();
/// queue.add_after("retry", Duration::from_millis(50));
/// queue.add_after("retry", Duration::from_millis(70)); // later: ignored
/// assert_eq!(queue.get().await, Some("retry"));
/// assert_eq!(start.elapsed(), Duration::from_millis(50));
/// # }
/// ```
pub struct DelayingQueue<T: Send> {
    queue: Queue<T>,
}

impl<T: Eq + Hash + Clone + Send + 'static> DelayingQueue<T> {
    /// An unnamed delaying queue without metrics.
    pub fn new() -> Self {
        Self::with_config(QueueConfig::default())
    }

    /// A delaying queue built from `config` (see [`Queue::with_config`]).
    pub fn with_config(config: QueueConfig) -> Self {
        Self {
            queue: Queue::with_config(config),
        }
    }

    /// Adds `item` once `delay` has passed; see the [type docs](Self#delays) for how requests
    /// for the same item combine.
    ///
    /// Counts one retry in the metrics on every call before shutdown, even with a zero
    /// delay. Never blocks (client-go's may, when its 1000-entry channel is full).
    pub fn add_after(&self, item: T, delay: Duration) {
        let shared = &self.queue.shared;
        let mut wake = WakeList::default();
        let mut state = shared.state.lock();
        if state.shutting_down {
            return;
        }
        if let Some(metrics) = &state.metrics {
            metrics.retry();
        }
        if delay.is_zero() {
            state.promote_due(shared.epoch, &mut wake);
            state.enqueue(item, &mut wake);
            return;
        }
        let now = nanos_since(shared.epoch, Instant::now());
        state.promote_due_at(shared.epoch, now, &mut wake);
        // Capped at about 146 years from the queue's epoch, so that it fits the item map's
        // packed state; later deadlines are "never" anyway (see `Shared::instant_at`).
        let at = now
            .saturating_add(u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX))
            .min(MAX_PAYLOAD);
        state.request(item, at, &mut wake);
    }

    /// The number of delayed requests whose deadline has not passed yet.
    ///
    /// Useful for tests and monitoring; [`len`](Queue::len) does not count these.
    pub fn pending_delayed(&self) -> usize {
        let shared = &self.queue.shared;
        let mut wake = WakeList::default();
        let mut state = shared.state.lock();
        state.promote_due(shared.epoch, &mut wake);
        state.delayed.pending()
    }
}

impl<T: Eq + Hash + Clone + Send + 'static> Default for DelayingQueue<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Send> Deref for DelayingQueue<T> {
    type Target = Queue<T>;

    fn deref(&self) -> &Queue<T> {
        &self.queue
    }
}

impl<T: Send> Clone for DelayingQueue<T> {
    fn clone(&self) -> Self {
        Self {
            queue: self.queue.clone(),
        }
    }
}

impl<T: Send> fmt::Debug for DelayingQueue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("DelayingQueue").field(&self.queue).finish()
    }
}

/// Nanoseconds from `epoch` to `now` (zero if `now` is earlier).
fn nanos_since(epoch: Instant, now: Instant) -> u64 {
    u64::try_from(now.saturating_duration_since(epoch).as_nanos()).unwrap_or(u64::MAX)
}

impl<T: Send> Shared<T> {
    /// The instant of deadline `at` (nanoseconds since the epoch).
    pub(crate) fn instant_at(&self, at: u64) -> Instant {
        self.epoch
            .checked_add(Duration::from_nanos(at))
            // Only for deadlines centuries away; tokio uses the same "far future".
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400 * 365 * 30))
    }
}

// === impl State (delaying transitions) ===

impl<T: Eq + Hash + Clone> State<T> {
    /// Queues every delayed item whose deadline has passed, reading the clock only if
    /// something is pending.
    #[inline]
    pub(crate) fn promote_due(&mut self, epoch: Instant, wake: &mut WakeList) {
        if !self.delayed.is_empty() {
            self.settle(wake);
            self.promote_due_at(epoch, nanos_since(epoch, Instant::now()), wake);
        }
    }

    /// Queues every delayed item due at or before `now` (nanoseconds since `epoch`), in
    /// deadline order.
    ///
    /// For the metrics, each item became dirty at its deadline, not now: this may run well
    /// after the deadline when no `get` was waiting.
    #[inline(never)]
    pub(crate) fn promote_due_at(&mut self, epoch: Instant, now: u64, wake: &mut WakeList) {
        if self.delayed.incoming_min <= now {
            self.settle(wake);
        }
        while let Some(timer) = self.delayed.pop_due(now) {
            if self.delayed.next_deadline() == Some(timer.at) {
                self.promote_same_deadline(epoch, timer, wake);
            } else {
                self.fire(epoch, timer, wake);
            }
        }
    }

    /// Fires `timer` and every other entry due at the same deadline, in request order,
    /// except those whose item has a later entry among them.
    ///
    /// The item map knows a request by its deadline alone, so an entry left behind by a
    /// cancelled request matches a later request of the same item for the same deadline.
    /// Both sit here; the later one is the live one (an item's live request is always its
    /// last entry), and only it may fire, in its own place in the order.
    #[cold]
    fn promote_same_deadline(&mut self, epoch: Instant, timer: Timer<T>, wake: &mut WakeList) {
        let mut group = vec![timer];
        while let Some(next) = self.delayed.pop_due(group[0].at) {
            group.push(next);
        }
        let mut superseded = vec![false; group.len()];
        if group.len() <= 16 {
            for (i, timer) in group.iter().enumerate() {
                superseded[i] = group[i + 1..].iter().any(|later| later.item == timer.item);
            }
        } else {
            let mut seen = hashbrown::HashSet::with_capacity(group.len());
            for (i, timer) in group.iter().enumerate().rev() {
                superseded[i] = !seen.insert(&timer.item);
            }
        }
        for (timer, superseded) in group.into_iter().zip(superseded) {
            if !superseded {
                self.fire(epoch, timer, wake);
            }
        }
    }

    /// Fires the popped entry `timer` if it is its item's live request; drops it if stale.
    #[inline]
    fn fire(&mut self, epoch: Instant, timer: Timer<T>, wake: &mut WakeList) {
        let Some(state) = self.items.get_mut(&timer.item) else {
            return; // stale: the item was processed and forgotten since
        };
        let since = || epoch.checked_add(Duration::from_nanos(timer.at));
        match state.get() {
            ItemState::Waiting(at) if at == timer.at => {
                self.delayed.cancel_one();
                if let Some(metrics) = &mut self.metrics {
                    metrics.add_at(&timer.item, since().unwrap_or_else(Instant::now));
                }
                *state = self.fifo.push(timer.item).pack();
                self.waiters.wake_for_item(wake);
            }
            ItemState::ProcessingWaiting(at) if at == timer.at => {
                *state = ItemState::ProcessingDirty.pack();
                self.delayed.cancel_one();
                if let Some(metrics) = &mut self.metrics {
                    metrics.add_at(&timer.item, since().unwrap_or_else(Instant::now));
                }
            }
            _ => {} // stale: superseded by an add or an earlier deadline
        }
    }

    /// Takes a request to add `item` at deadline `at` (in the future, at most
    /// [`MAX_PAYLOAD`]): records it now if a getter must be woken for it, or else buffers it
    /// (see the module docs).
    #[inline]
    pub(crate) fn request(&mut self, item: T, at: u64, wake: &mut WakeList) {
        if self.waiters.wakes_for_deadline(at) {
            self.settle(wake); // the buffered requests were made first
            self.schedule(item, at, wake);
        } else {
            self.delayed.buffer(item, at);
            if self.delayed.incoming.len() >= INCOMING_BATCH {
                self.settle(wake);
            }
        }
    }

    /// Records the buffered requests, in the order they were made.
    ///
    /// First every map update, then every heap push: a push reads back the entry it just
    /// wrote, and that read waits until every earlier store has reached the cache, including
    /// the map's missing ones. In this order it waits once per batch instead of once per
    /// request.
    #[inline(never)]
    pub(crate) fn settle(&mut self, wake: &mut WakeList) {
        if self.delayed.incoming.is_empty() {
            return;
        }
        let mut incoming = std::mem::take(&mut self.delayed.incoming);
        // One allocation per batch of up to `INCOMING_BATCH` requests.
        let mut recorded = Vec::with_capacity(incoming.len());
        self.delayed.incoming_min = u64::MAX;
        for (item, at) in incoming.drain(..) {
            if let Some(key) = self.record(item, at) {
                recorded.push((key, at));
            }
        }
        for (key, at) in recorded.drain(..) {
            self.delayed.push(key, at);
            self.waiters.wake_for_deadline(at, wake);
        }
        self.delayed.incoming = incoming; // keep its capacity
        self.sweep_if_needed();
    }

    /// Records a request to add `item` at deadline `at` (in the future, at most
    /// [`MAX_PAYLOAD`]).
    fn schedule(&mut self, item: T, at: u64, wake: &mut WakeList) {
        if let Some(key) = self.record(item, at) {
            self.delayed.push(key, at);
            self.waiters.wake_for_deadline(at, wake);
            self.sweep_if_needed();
        }
    }

    /// The item map's part of recording a request for `item` at `at`: returns the key to push
    /// to the heap with it, or `None` if the request changes nothing.
    #[inline]
    fn record(&mut self, item: T, at: u64) -> Option<T> {
        use hashbrown::hash_map::Entry;

        match self.items.entry(item) {
            Entry::Vacant(vacant) => {
                let key = vacant.key().clone();
                vacant.insert(ItemState::Waiting(at).pack());
                self.delayed.add_one();
                Some(key)
            }
            Entry::Occupied(mut occupied) => {
                let next = match self.fifo.current(*occupied.get()) {
                    // Will be processed after now anyway.
                    ItemState::Queued(_) | ItemState::ProcessingDirty => return None,
                    ItemState::Processing => {
                        self.delayed.add_one();
                        ItemState::ProcessingWaiting(at)
                    }
                    ItemState::Waiting(old) if at < old => ItemState::Waiting(at),
                    ItemState::ProcessingWaiting(old) if at < old => {
                        ItemState::ProcessingWaiting(at)
                    }
                    // The pending request is earlier: it wins.
                    ItemState::Waiting(_) | ItemState::ProcessingWaiting(_) => return None,
                };
                occupied.insert(next.pack());
                Some(occupied.key().clone())
            }
        }
    }

    /// Drops the heap's stale entries if they outnumber the live ones.
    fn sweep_if_needed(&mut self) {
        if self.delayed.needs_sweep() {
            let items = &self.items;
            self.delayed.sweep(|item, at| {
                matches!(
                    items.get(item).map(|state| state.get()),
                    Some(ItemState::Waiting(a) | ItemState::ProcessingWaiting(a)) if a == at
                )
            });
        }
    }

    /// Drops every pending request (shutdown).
    pub(crate) fn discard_delayed(&mut self) {
        if self.delayed.pending() > 0 {
            self.items.retain(|_, state| match state.get() {
                ItemState::Waiting(_) => false,
                ItemState::ProcessingWaiting(_) => {
                    *state = ItemState::Processing.pack();
                    true
                }
                _ => true,
            });
        }
        self.delayed.clear();
    }
}

// === DelayHeap ===

/// One heap entry: `item` is due at `at`; `seq` orders entries with equal deadlines.
pub(crate) struct Timer<T> {
    pub(crate) at: u64,
    seq: u64,
    pub(crate) item: T,
}

impl<T> Timer<T> {
    fn key(&self) -> (u64, u64) {
        (self.at, self.seq)
    }
}

impl<T> PartialEq for Timer<T> {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl<T> Eq for Timer<T> {}

impl<T> PartialOrd for Timer<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> Ord for Timer<T> {
    /// Reversed, so that `BinaryHeap` (a max-heap) pops the earliest deadline first.
    fn cmp(&self, other: &Self) -> Ordering {
        other.key().cmp(&self.key())
    }
}

/// At most this many requests wait in the buffer before they are recorded together.
const INCOMING_BATCH: usize = 64;

/// Sweep only once the heap holds at least this many entries.
const MIN_SWEEP_LEN: usize = 64;

/// The delayed entries of a queue, including stale ones (see the module docs).
pub(crate) struct DelayHeap<T> {
    heap: BinaryHeap<Timer<T>>,
    /// Requests not recorded yet (item, deadline), oldest first; see [`State::settle`].
    incoming: Vec<(T, u64)>,
    /// The earliest deadline in `incoming` (`u64::MAX` if it is empty).
    incoming_min: u64,
    /// Next tie-breaking sequence number.
    next_seq: u64,
    /// Live requests: items in state `Waiting` or `ProcessingWaiting`.
    live: usize,
    /// The heap length above which a sweep may run; doubles after each sweep.
    sweep_above: usize,
}

impl<T> Default for DelayHeap<T> {
    fn default() -> Self {
        Self {
            heap: BinaryHeap::new(),
            incoming: Vec::new(),
            incoming_min: u64::MAX,
            next_seq: 0,
            live: 0,
            sweep_above: MIN_SWEEP_LEN,
        }
    }
}

impl<T> DelayHeap<T> {
    /// Whether the heap has no entries at all (live or stale).
    pub(crate) fn is_empty(&self) -> bool {
        self.heap.is_empty() && self.incoming.is_empty()
    }

    /// Number of buffered requests, not counted by [`pending`](Self::pending) until
    /// [`State::settle`] records them (some may change nothing).
    pub(crate) fn unrecorded(&self) -> usize {
        self.incoming.len()
    }

    /// Buffers a request until [`State::settle`].
    #[inline]
    fn buffer(&mut self, item: T, at: u64) {
        self.incoming_min = self.incoming_min.min(at);
        self.incoming.push((item, at));
    }

    /// Number of live requests.
    pub(crate) fn pending(&self) -> usize {
        self.live
    }

    /// The earliest deadline in the heap (possibly of a stale entry).
    pub(crate) fn next_deadline(&self) -> Option<u64> {
        self.heap.peek().map(|timer| timer.at)
    }

    /// Pops the earliest entry if it is due at `now`.
    fn pop_due(&mut self, now: u64) -> Option<Timer<T>> {
        if self.heap.peek()?.at <= now {
            self.heap.pop()
        } else {
            None
        }
    }

    /// Pushes the entry of a request for `item` due at `at`, numbered after every earlier
    /// one. The caller updated the item map and `live`.
    fn push(&mut self, item: T, at: u64) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.heap.push(Timer { at, seq, item });
    }

    /// A new live request.
    fn add_one(&mut self) {
        self.live += 1;
    }

    /// A live request fired or was cancelled (its entry is now stale or gone).
    pub(crate) fn cancel_one(&mut self) {
        self.live -= 1;
    }

    /// Whether stale entries outnumber live ones in a heap that grew since the last sweep.
    fn needs_sweep(&self) -> bool {
        let len = self.heap.len();
        len > self.sweep_above && len - self.live > self.live
    }

    /// Keeps only the entries `is_live(item, due)` accepts.
    fn sweep(&mut self, is_live: impl Fn(&T, u64) -> bool) {
        self.heap.retain(|timer| is_live(&timer.item, timer.at));
        self.sweep_above = (2 * self.heap.len()).max(MIN_SWEEP_LEN);
    }

    /// Drops every entry.
    fn clear(&mut self) {
        self.heap.clear();
        self.incoming.clear();
        self.incoming_min = u64::MAX;
        self.live = 0;
        self.sweep_above = MIN_SWEEP_LEN;
    }

    /// Number of entries, stale ones included (tests only).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }
}

#[cfg(test)]
mod tests {
    use std::pin::pin;
    use std::task::Poll;

    use tokio::time::advance;

    use super::*;
    use crate::test_util::{CountingWaker, poll_once, poll_with, within};

    const MS: Duration = Duration::from_millis(1);

    #[tokio::test(start_paused = true)]
    async fn add_after_queues_the_item_when_its_delay_has_passed() {
        let queue = DelayingQueue::new();
        queue.add_after("x", 50 * MS);
        assert_eq!(queue.len(), 0);
        assert_eq!(queue.pending_delayed(), 1);
        advance(49 * MS).await;
        assert_eq!(queue.len(), 0);
        advance(MS).await;
        assert_eq!(queue.len(), 1);
        assert_eq!(queue.pending_delayed(), 0);
        assert_eq!(queue.get().await, Some("x"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_get_returns_exactly_at_the_deadline() {
        let queue = DelayingQueue::new();
        let start = Instant::now();
        queue.add_after(1, 3 * Duration::from_secs(1));
        assert_eq!(within(queue.get()).await, Some(1));
        assert_eq!(start.elapsed(), Duration::from_secs(3));
    }

    #[tokio::test(start_paused = true)]
    async fn re_add_with_a_later_deadline_keeps_the_earlier_one() {
        let queue = DelayingQueue::new();
        queue.add_after("x", 50 * MS);
        queue.add_after("x", 70 * MS);
        assert_eq!(queue.pending_delayed(), 1);
        advance(50 * MS).await;
        assert_eq!(queue.len(), 1);
        assert_eq!(queue.get().await, Some("x"));
        queue.done(&"x");
        advance(20 * MS).await;
        assert_eq!(
            queue.len(),
            0,
            "the 70 ms request was merged into the 50 ms one"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn re_add_with_an_earlier_deadline_wins() {
        let queue = DelayingQueue::new();
        queue.add_after("x", 50 * MS);
        queue.add_after("x", 30 * MS);
        advance(29 * MS).await;
        assert_eq!(queue.len(), 0);
        advance(MS).await;
        assert_eq!(queue.len(), 1);
        assert_eq!(queue.get().await, Some("x"));
        queue.done(&"x");
        advance(20 * MS).await;
        assert_eq!(queue.len(), 0, "the superseded 50 ms entry is stale");
    }

    #[tokio::test(start_paused = true)]
    async fn zero_delay_adds_now() {
        let queue = DelayingQueue::new();
        queue.add_after("x", Duration::ZERO);
        assert_eq!(queue.len(), 1);
        assert_eq!(queue.pending_delayed(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn immediate_add_supersedes_a_pending_delayed_request() {
        let queue = DelayingQueue::new();
        queue.add_after("x", Duration::from_secs(1));
        queue.add("x");
        assert_eq!(queue.pending_delayed(), 0);
        assert_eq!(queue.get().await, Some("x"));
        queue.done(&"x");
        advance(Duration::from_secs(2)).await;
        assert_eq!(
            queue.len(),
            0,
            "x is not processed a second time (client-go #126027)"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn zero_delay_add_after_supersedes_a_pending_request() {
        let queue = DelayingQueue::new();
        queue.add_after("x", Duration::from_secs(1));
        queue.add_after("x", Duration::ZERO);
        assert_eq!(queue.len(), 1);
        assert_eq!(queue.pending_delayed(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn add_after_of_a_queued_item_changes_nothing() {
        let queue = DelayingQueue::new();
        queue.add("x");
        queue.add_after("x", 10 * MS);
        assert_eq!(queue.pending_delayed(), 0);
        assert_eq!(queue.get().await, Some("x"));
        queue.done(&"x");
        advance(20 * MS).await;
        assert_eq!(queue.len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn add_after_while_processing_fires_after_done() {
        let queue = DelayingQueue::new();
        queue.add("x");
        assert_eq!(queue.get().await, Some("x"));
        queue.add_after("x", 10 * MS);
        advance(10 * MS).await;
        assert_eq!(queue.len(), 0, "still being processed");
        queue.done(&"x");
        assert_eq!(queue.len(), 1);
        assert_eq!(queue.get().await, Some("x"));
    }

    #[tokio::test(start_paused = true)]
    async fn add_after_while_processing_waits_for_its_deadline() {
        let queue = DelayingQueue::new();
        queue.add("x");
        assert_eq!(queue.get().await, Some("x"));
        queue.add_after("x", 10 * MS);
        queue.done(&"x");
        assert_eq!(queue.len(), 0);
        assert_eq!(queue.pending_delayed(), 1);
        advance(10 * MS).await;
        assert_eq!(queue.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn add_while_processing_with_a_pending_request_requeues_once() {
        let queue = DelayingQueue::new();
        queue.add("x");
        assert_eq!(queue.get().await, Some("x"));
        queue.add_after("x", 10 * MS);
        queue.add("x");
        assert_eq!(queue.pending_delayed(), 0);
        queue.done(&"x");
        assert_eq!(queue.get().await, Some("x"));
        queue.done(&"x");
        advance(20 * MS).await;
        assert_eq!(queue.len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn due_items_are_queued_in_deadline_order_then_call_order() {
        let queue = DelayingQueue::new();
        queue.add_after("c", 30 * MS);
        queue.add_after("a", 10 * MS);
        queue.add_after("b1", 20 * MS);
        queue.add_after("b2", 20 * MS);
        queue.add_after("b3", 20 * MS);
        advance(30 * MS).await;
        for expected in ["a", "b1", "b2", "b3", "c"] {
            assert_eq!(queue.get().await, Some(expected));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_request_never_fires_in_place_of_a_later_one_with_the_same_deadline() {
        // Found by the model test: "x"'s first entry (due at 1 ms) is cancelled by `add`;
        // its next request is due at 1 ms too, but was made after "y"'s.
        let queue = DelayingQueue::new();
        queue.add_after("x", MS);
        queue.add_after("y", MS);
        queue.add("x");
        assert_eq!(queue.get().await, Some("x"));
        queue.done(&"x");
        queue.add_after("x", MS);
        advance(MS).await;
        assert_eq!(queue.get().await, Some("y"));
        assert_eq!(queue.get().await, Some("x"));
    }

    #[tokio::test(start_paused = true)]
    async fn many_requests_due_together_keep_their_order_past_cancelled_twins() {
        // More than 16 entries share the deadline, so the stale twins are found by hashing.
        let queue = DelayingQueue::new();
        for item in 0..20 {
            queue.add_after(item, MS);
        }
        queue.add(0); // cancels 0's and 5's requests: their entries stay, stale
        queue.add(5);
        for expected in [0, 5] {
            assert_eq!(queue.get().await, Some(expected));
            queue.done(&expected);
        }
        queue.add_after(5, MS); // same deadline as the stale entries, requested last
        queue.add_after(0, MS);
        advance(MS).await;
        let expected: Vec<_> = (1..20).filter(|i| *i != 5).chain([5, 0]).collect();
        let mut got = Vec::new();
        while !queue.is_empty() {
            got.push(queue.get().await.unwrap());
        }
        assert_eq!(got, expected);
        assert_eq!(queue.pending_delayed(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_due_item_is_queued_before_a_later_direct_add() {
        let queue = DelayingQueue::new();
        queue.add_after("delayed", 10 * MS);
        advance(15 * MS).await;
        queue.add("direct");
        assert_eq!(queue.get().await, Some("delayed"));
        assert_eq!(queue.get().await, Some("direct"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_earliest_deadline_re_arms_the_waiting_get() {
        let queue = DelayingQueue::new();
        let start = Instant::now();
        queue.add_after("late", Duration::from_secs(10));
        let worker = tokio::spawn({
            let queue = queue.clone();
            async move { queue.get().await }
        });
        tokio::task::yield_now().await;
        queue.add_after("early", Duration::from_secs(1));
        assert_eq!(within(worker).await.unwrap(), Some("early"));
        assert_eq!(start.elapsed(), Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn dense_deadlines_are_each_handed_out_at_or_after_their_own() {
        let queue = DelayingQueue::new();
        let start = Instant::now();
        let us = Duration::from_micros;
        let delays = [
            10 * MS,
            10 * MS + us(50),
            10 * MS + us(120),
            11 * MS,
            11 * MS + us(1),
        ];
        for (item, delay) in delays.iter().enumerate() {
            queue.add_after(item, *delay);
        }
        for expected in 0..delays.len() {
            let item = within(queue.get()).await.unwrap();
            assert_eq!(item, expected, "deadline order");
            assert!(start.elapsed() >= delays[item], "{item} handed out early");
            queue.done(&item);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn only_one_parked_get_keeps_the_timer() {
        let queue = DelayingQueue::<u32>::new();
        queue.add_after(1, 10 * MS);
        let mut gets: Vec<_> = (0..3).map(|_| Box::pin(queue.get())).collect();
        let wakers: Vec<_> = gets
            .iter_mut()
            .map(|get| {
                let (waker, count) = CountingWaker::pair();
                assert_eq!(poll_with(get.as_mut(), &waker), Poll::Pending);
                (waker, count)
            })
            .collect();
        assert_eq!(queue.shared.state.lock().waiters.idle_len(), 2);

        // A new earliest deadline wakes the keeper only.
        queue.add_after(2, 5 * MS);
        let woken: Vec<_> = wakers.iter().map(|(_, c)| c.get()).collect();
        assert_eq!(woken, [1, 0, 0]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_keeper_hands_the_timer_to_another_get() {
        let queue = DelayingQueue::<u32>::new();
        queue.add_after(1, 10 * MS);
        let mut keeper = Box::pin(queue.get());
        assert_eq!(poll_once(keeper.as_mut()), Poll::Pending);
        let worker = tokio::spawn({
            let queue = queue.clone();
            async move { queue.get().await }
        });
        tokio::task::yield_now().await;
        drop(keeper);
        let start = Instant::now();
        assert_eq!(within(worker).await.unwrap(), Some(1));
        assert_eq!(start.elapsed(), 10 * MS);
    }

    #[tokio::test(start_paused = true)]
    async fn several_waiting_gets_share_due_items() {
        let queue = DelayingQueue::new();
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let queue = queue.clone();
                tokio::spawn(async move { queue.get().await })
            })
            .collect();
        tokio::task::yield_now().await;
        for (i, delay) in [30, 10, 20, 10].into_iter().enumerate() {
            queue.add_after(i, delay * MS);
        }
        let mut got = Vec::new();
        for worker in workers {
            got.push(within(worker).await.unwrap().unwrap());
        }
        got.sort_unstable();
        assert_eq!(got, [0, 1, 2, 3]);
    }

    #[tokio::test(start_paused = true)]
    async fn shut_down_drops_pending_requests() {
        let queue = DelayingQueue::new();
        queue.add("now");
        queue.add_after("later", 10 * MS);
        assert_eq!(queue.get().await, Some("now"));
        queue.add_after("now", 10 * MS); // pending while processing
        queue.shut_down();
        assert_eq!(queue.pending_delayed(), 0);
        queue.add_after("ignored", Duration::ZERO);
        advance(20 * MS).await;
        assert_eq!(queue.len(), 0);
        queue.done(&"now");
        assert_eq!(queue.get().await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn shut_down_first_queues_requests_that_are_already_due() {
        let queue = DelayingQueue::new();
        queue.add_after("due", 10 * MS);
        advance(10 * MS).await;
        queue.shut_down();
        assert_eq!(queue.get().await, Some("due"));
        assert_eq!(queue.get().await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn shut_down_wakes_the_keeper() {
        let queue = DelayingQueue::<u8>::new();
        queue.add_after(1, Duration::from_secs(60));
        let mut get = pin!(queue.get());
        let (waker, woken) = CountingWaker::pair();
        assert_eq!(poll_with(get.as_mut(), &waker), Poll::Pending);
        queue.shut_down();
        assert_eq!(woken.get(), 1);
        assert_eq!(poll_with(get.as_mut(), &waker), Poll::Ready(None));
    }

    #[tokio::test(start_paused = true)]
    async fn stale_entries_are_swept() {
        let queue = DelayingQueue::new();
        for round in 0..1_000u32 {
            queue.add_after(round % 4, Duration::from_secs(60));
            queue.add(round % 4); // cancels the request: its entry goes stale
            let item = queue.get().await.unwrap();
            queue.done(&item);
        }
        let state = queue.shared.state.lock();
        assert_eq!(state.delayed.pending(), 0);
        assert!(
            state.delayed.len() <= 2 * MIN_SWEEP_LEN,
            "{}",
            state.delayed.len()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn huge_delays_do_not_overflow() {
        let queue = DelayingQueue::new();
        queue.add_after("never", Duration::MAX);
        queue.add_after("soon", MS);
        assert_eq!(queue.get().await, Some("soon"));
        assert_eq!(queue.pending_delayed(), 1);
    }
}
