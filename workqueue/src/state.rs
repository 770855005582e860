//! The state every queue layer shares: the item map, the FIFO, the delay heap, the promotion of due items, and the `get` that waits for them.
//!
//! [`Queue`](crate::Queue), [`DelayingQueue`](crate::DelayingQueue) and
//! [`RateLimitingQueue`](crate::RateLimitingQueue) are thin handles over one [`Shared`]: they
//! hold its docs and its public API, and every operation is a method here.
//!
//! # Implementation Details
//!
//! One [`parking_lot::Mutex`] guards one [`State`], and every operation is one short critical
//! section on it. Where client-go keeps a FIFO plus two sets (`dirty`, `processing`) and
//! probes them several times per operation, and a delaying queue beside it with its own
//! goroutine, channel, heap and map, this queue keeps one map, `items`, from each item it
//! knows to an [`ItemState`], plus the FIFO of queued items and the heap of deadlines:
//!
//! | state | in FIFO | handed out | delayed entry | `add` moves it to | `done` moves it to |
//! |---|---|---|---|---|---|
//! | (absent) | no | no | no | `Queued(seq)` | (ignored) |
//! | `Queued(seq)` | yes | no | no | (unchanged; `QueuedHeap` if raised above 0) | (ignored) |
//! | `QueuedHeap` | in the priority heap | no | no | (unchanged; `Queued` if raised to 0 early) | (ignored) |
//! | `Processing` | no | yes | no | `ProcessingDirty` | (absent) |
//! | `ProcessingDirty` | no | yes | no | (unchanged) | `Queued` |
//! | `Waiting(due)` | no | no | yes | `Queued` | (ignored) |
//! | `ProcessingWaiting(due)` | no | yes | yes | `ProcessingDirty` | `Waiting(due)` |
//!
//! The map stores each state packed into one word, [`PackedState`] (two bits of state, 62 of
//! push number or deadline), so an entry is the item plus 8 bytes and a control byte, and
//! deadlines are capped at 2⁶² ns (146 years) after the queue was built.
//!
//! **The FIFO.** `Queued(seq)` records where the item was pushed: the FIFO ([`Fifo`]) numbers
//! every push and counts its pops, so `get` only pops — it never touches the map — and a
//! `Queued(seq)` that the FIFO has popped since *reads* as `Processing` (`Fifo::current`);
//! the next transition of that item writes its real state. So `done` costs one hash lookup
//! in the common case and `get` none. An `add` of an item that is already queued (or dirty
//! while being processed) — most adds of a busy key — usually does not take the lock at all:
//! the thread remembers the keys it found dirty, and per-slot pop counters say whether that
//! can have changed ([`crate::recent`]). Failing that, it is one lookup under the lock in a
//! short inlined path that builds nothing and wakes nobody; the same path marks an item being
//! processed dirty. Any other `add` continues out of line and probes again to insert. Both
//! paths leave the item dirty, so both let the thread remember it.
//!
//! The map is [`hashbrown`]'s, for `entry_ref` (`done` finds, updates or removes an entry in
//! one probe, without cloning the key) and its default hasher, foldhash: several times faster
//! than std's SipHash on short keys, and randomly seeded, which is enough for keys that come
//! from the cluster's own object names.
//!
//! **One delayed request per item.** An item has at most one pending request, its
//! `Waiting(at)` (or `ProcessingWaiting(at)` while a worker holds it). Re-adding keeps the
//! earliest deadline; an item that is queued, or dirty while being processed, will be
//! processed after now anyway, so `add_after` leaves it alone; `add` of a waiting item queues
//! it now and cancels the request.
//!
//! **The heap.** Deadlines are ordered by a [`BinaryHeap`] of compact [`Timer`] entries
//! (`at: u64`, `seq: u64`, the item): 16 bytes plus the item, against client-go's
//! heap-allocated `waitFor` with a 24-byte `time.Time` and a separate map entry. `seq` numbers
//! the requests and breaks ties, so items due at the same instant are queued in the order of
//! their `add_after` calls.
//!
//! **Lazy deletion.** An entry is never searched for in the heap. When a request is cancelled
//! (by `add`) or replaced (by an earlier `add_after`), its old entry simply stays behind; the
//! item map is the truth. When an entry comes due, it fires only if the map still holds its
//! deadline and it is its item's last entry; otherwise it is stale and dropped. Firing changes
//! the state, so two entries for one item never both fire. The map holds the deadline alone,
//! so an entry left behind by a cancelled request can carry the same deadline as a later
//! request of the same item; entries that share a deadline are therefore popped together, and
//! an entry whose item has a later one among them is dropped (an item's live request is
//! always its last entry: a request that does not become live pushes nothing). Stale entries
//! are bounded: when they outnumber the live ones (and the heap has grown since the last
//! sweep), one `retain` pass removes them, O(1) amortized per entry.
//!
//! **Requests are recorded in batches.** Recording a request costs a probe of the item map
//! and a store to it, both at a random place in a table far larger than the cache; under the
//! lock, one after the other, those misses cannot overlap. So `add_after` only appends the
//! request to a short buffer (`incoming`) when no getter has to be woken for it, and every
//! 64 requests, or at the start of any other operation (each promotes due items first, and
//! that records the buffer first), the buffered requests are recorded in one loop, in call
//! order, where the processor overlaps their misses. Nothing can observe the difference: the
//! outcome of each request depends only on the item map and the heap, which nothing reads
//! between the buffering and the recording; requests are numbered when recorded, in call
//! order; a buffered request whose deadline has passed is recorded before anything is
//! promoted; and the wake-ups are those the recording would have done, none.
//!
//! **The timer is driven by the getters.** There is no background task and no thread. Every
//! operation that takes the lock first moves the entries whose deadline has passed into the
//! FIFO (reading the clock only when the heap is not empty), and one parked `get` — the
//! *keeper*, see [`crate::waiters`] — sleeps on tokio's timer until the earliest deadline.
//! Inserting a new earliest deadline wakes the keeper to re-arm; nothing else does. When no
//! worker is waiting, a due item is queued by the next operation on the queue (the next time
//! anyone could see it). Nothing needs a runtime to be current when the queue is built.
//!
//! tokio's timer counts whole milliseconds and rounds deadlines up, so a waiting worker gets
//! a due item up to about a millisecond or two after its deadline, never before it, and all
//! items due within one tick in one wake-up. That is what a user of the queue can see: a
//! retry after 5 ms, 1 s or 1000 s, where a millisecond is noise. Waking closer to the
//! deadline takes a thread of our own that sleeps on the OS clock; by the crate's
//! optimisation rule (see the [crate docs](crate#speed)), a hidden thread is not worth a
//! sub-millisecond difference nobody notices, so there is none. On paused time (tests) tokio
//! fires the sleep exactly at the deadline.
//!
//! Invariants, checked by the model tests:
//!
//! * an item is in the FIFO exactly once if its state reads `Queued`, and not at all otherwise
//!   (entries left behind by an item raised into the priority heap are stale and skipped);
//!   it is live in the priority heap exactly when its state reads `QueuedHeap` — so it is
//!   never queued twice (the client-go "dirty" set is `Queued ∪ QueuedHeap ∪
//!   ProcessingDirty`);
//! * `processing` counts the states that are handed out — so `get` never hands out an item
//!   that is handed out already, and `done` re-queues a dirty item exactly once;
//! * `len()` is the FIFO's length: items being processed, including dirty ones, are not in it;
//! * `live` in the heap counts the `Waiting` and `ProcessingWaiting` states.
//!
//! Getters that find the FIFO empty park in [`crate::waiters`], which wakes exactly one of
//! them per queued item. Wakers are collected under the lock and woken after it is released.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};
use std::fmt;
use std::future::poll_fn;
use std::hash::Hash;
use std::pin::{Pin, pin};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use hashbrown::HashMap;
use hashbrown::hash_map::{Entry, EntryRef};
use parking_lot::{Mutex, MutexGuard};
use tokio::sync::Notify;
use tokio::time::{Instant, Sleep};

use crate::metrics::QueueMetrics;
use crate::priority::{Moved, Priorities};
use crate::recent::PopCounters;
use crate::waiters::{Waiters, WakeList};

/// The state shared by all handles of one queue.
pub(crate) struct Shared<T: Send> {
    pub(crate) state: Mutex<State<T>>,
    /// Woken when a drain may have completed, or was cut short by `shut_down`.
    drained: Notify,
    /// Zero of the queue's clock: delayed deadlines are nanoseconds since this instant.
    epoch: Instant,
    /// Lets a duplicate `add` skip the lock (see [`crate::recent`]).
    pub(crate) counters: PopCounters<T>,
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
    /// Queued with a priority other than 0: in the priority heap (see [`crate::priority`]).
    QueuedHeap,
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
/// | `11` | 0, 1 or 2 | `Processing`, `ProcessingDirty` or `QueuedHeap` |
///
/// Half the size of the enum (16 bytes: a `u64` payload and a tag), so a map entry of a
/// `u64` key is 17 bytes with its control byte instead of 25: the map is most of the queue's
/// memory, and of the memory `add_after` touches for the first time.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct PackedState(u64);

impl ItemState {
    /// Packs the state; payloads above [`MAX_PAYLOAD`] never occur (push numbers count one
    /// per push, deadlines are capped by `add_after`).
    #[inline]
    pub(crate) fn pack(self) -> PackedState {
        const TAG: u32 = 62;
        let word = match self {
            ItemState::Queued(seq) => seq,
            ItemState::Waiting(at) => 1 << TAG | at,
            ItemState::ProcessingWaiting(at) => 2 << TAG | at,
            ItemState::Processing => 3 << TAG,
            ItemState::ProcessingDirty => 3 << TAG | 1,
            ItemState::QueuedHeap => 3 << TAG | 2,
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
            _ if payload == 1 => ItemState::ProcessingDirty,
            _ => ItemState::QueuedHeap,
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
    /// Delayed requests, from `add_after`. Empty for a queue that never delays.
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

/// The queued items: the FIFO of priority-0 items and, once another priority was used, the
/// priority heap beside it ([`Priorities`]). The FIFO numbers every push, so that an item's
/// state can record where it was queued and `get` can hand an item out without touching the
/// item map.
pub(crate) struct Fifo<T> {
    items: VecDeque<T>,
    /// Number of items popped so far: the push number of the front item.
    popped: u64,
    /// The priority side; `None` until an add with a priority other than 0.
    pub(crate) prio: Option<Box<Priorities<T>>>,
    /// The aging step in nanoseconds, to build `prio`.
    aging_step: u64,
}

impl<T> Fifo<T> {
    /// An empty FIFO; `aging_step` is how fast prioritised items age.
    pub(crate) fn new(aging_step: Duration) -> Self {
        Self {
            items: VecDeque::new(),
            popped: 0,
            prio: None,
            aging_step: u64::try_from(aging_step.as_nanos()).unwrap_or(u64::MAX),
        }
    }

    /// Appends `item` at priority 0; returns the state that records it as queued here.
    #[inline(always)]
    pub(crate) fn push(&mut self, item: T) -> ItemState {
        let seq = self.popped + self.items.len() as u64;
        self.items.push_back(item);
        if let Some(prio) = &mut self.prio {
            prio.stamp_fifo_push();
        }
        ItemState::Queued(seq)
    }

    /// Removes the oldest item of a FIFO without priorities.
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
        match &self.prio {
            None => self.items.len(),
            Some(prio) => self.items.len() - prio.stale_fifo_len() + prio.heap_len(),
        }
    }

    /// Whether nothing is queued.
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T: Eq + Hash + Clone> Fifo<T> {
    /// The priority side, created on first use: by the first add with a priority other
    /// than 0.
    pub(crate) fn prio(&mut self) -> &mut Priorities<T> {
        let next_push = self.popped + self.items.len() as u64;
        let step = self.aging_step;
        self.prio
            .get_or_insert_with(|| Box::new(Priorities::new(step, next_push)))
    }

    /// Queues `item` with `priority`; returns its new state.
    ///
    /// Always inlined, so that a plain add pays one comparison for priorities: the heap's
    /// side stays out of line.
    #[inline(always)]
    pub(crate) fn push_with(&mut self, item: T, priority: i32) -> ItemState {
        if priority == 0 {
            self.push(item)
        } else {
            self.push_prioritised(item, priority)
        }
    }

    /// [`push_with`](Self::push_with) at a priority other than 0: into the heap.
    #[inline(never)]
    fn push_prioritised(&mut self, item: T, priority: i32) -> ItemState {
        self.prio().push(item, priority);
        ItemState::QueuedHeap
    }

    /// Removes the best queued item: the item, its priority, and whether it came from the
    /// heap (whose items the caller marks as being processed).
    #[inline(never)]
    fn pop_prioritised(&mut self) -> Option<(T, i32, bool)> {
        let prio = self.prio.as_deref_mut()?;
        while !self.items.is_empty() && prio.is_stale_fifo(self.popped) {
            self.items.pop_front();
            prio.fifo_popped(self.popped);
            self.popped += 1;
        }
        let from_heap = match (self.items.is_empty(), prio.peek()) {
            (true, None) => return None,
            (false, None) => false,
            (true, Some(_)) => true,
            (false, Some(top)) => !prio.fifo_first(self.popped, self.popped, top),
        };
        if from_heap {
            let (item, priority) = prio.pop()?;
            return Some((item, priority, true));
        }
        let item = self.items.pop_front()?;
        prio.fifo_popped(self.popped);
        self.popped += 1;
        Some((item, 0, false))
    }

    /// The priority a not-queued item will be queued with.
    #[inline]
    pub(crate) fn pending_priority(&self, item: &T) -> i32 {
        match &self.prio {
            None => 0,
            Some(prio) => prio.pending_priority(item),
        }
    }

    /// Sets the priority an item that is not queued nor pending yet will be queued with.
    #[inline]
    pub(crate) fn set_pending(&mut self, item: &T, priority: i32) {
        if priority != 0 {
            self.prio().set_pending(item, priority);
        } else if let Some(prio) = &mut self.prio {
            prio.take_pending(item);
        }
    }

    /// Takes the priority an item about to be queued was given.
    #[inline]
    pub(crate) fn take_pending(&mut self, item: &T) -> i32 {
        match &mut self.prio {
            None => 0,
            Some(prio) => prio.take_pending(item),
        }
    }

    /// An item in `state` is added again with `priority`: raises it if that is higher.
    /// Returns its old priority and its new state if it was raised. Not for `Processing`,
    /// which the add makes dirty.
    #[inline]
    pub(crate) fn raise(
        &mut self,
        item: &T,
        state: ItemState,
        priority: i32,
    ) -> Option<(i32, ItemState)> {
        if self.prio.is_none() && priority <= 0 {
            return None; // every known item is at 0
        }
        self.raise_prioritised(item, state, priority)
    }

    /// [`raise`](Self::raise) on a queue with priorities.
    #[inline(never)]
    fn raise_prioritised(
        &mut self,
        item: &T,
        state: ItemState,
        priority: i32,
    ) -> Option<(i32, ItemState)> {
        match state {
            ItemState::Queued(seq) => {
                if priority <= 0 {
                    return None;
                }
                let popped = self.popped;
                self.prio().raise_fifo(item, seq, popped, priority);
                Some((0, ItemState::QueuedHeap))
            }
            ItemState::QueuedHeap => {
                let (old, moved) = self.prio().raise_queued(item, priority)?;
                let state = match moved {
                    Moved::Stays => ItemState::QueuedHeap,
                    Moved::ToFifo => self.push(item.clone()),
                };
                Some((old, state))
            }
            ItemState::ProcessingDirty
            | ItemState::Waiting(_)
            | ItemState::ProcessingWaiting(_) => {
                let old = self.prio().raise_pending(item, priority)?;
                Some((old, state))
            }
            ItemState::Processing => None,
        }
    }
}
// === impl Shared ===

impl<T: Send> Shared<T> {
    /// An empty queue's state, its clock starting now; prioritised items rise one level per
    /// `aging_step`.
    pub(crate) fn new(metrics: Option<QueueMetrics<T>>, aging_step: Duration) -> Self {
        Self {
            state: Mutex::new(State {
                items: HashMap::default(),
                fifo: Fifo::new(aging_step),
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
        }
    }

    /// The instant of deadline `at` (nanoseconds since the epoch).
    fn instant_at(&self, at: u64) -> Instant {
        self.epoch
            .checked_add(Duration::from_nanos(at))
            // Only for deadlines centuries away; tokio uses the same "far future".
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400 * 365 * 30))
    }
}

impl<T: Eq + Hash + Clone + Send> Shared<T> {
    /// Locks the state, first queueing the delayed items that have come due. Declare the
    /// `wake` list before the returned guard, so the guard is released first.
    #[inline]
    fn lock_promoted(&self, wake: &mut WakeList) -> MutexGuard<'_, State<T>> {
        let mut state = self.state.lock();
        state.promote_due(self.epoch, wake);
        state
    }

    /// [`Queue::add`](crate::Queue::add).
    #[inline]
    pub(crate) fn add(&self, item: T) {
        // The duplicate add, which is most adds of a busy key: first without the lock, if
        // this thread saw the item dirty and nothing of its slot was popped since...
        if self.counters.is_certainly_dirty(&item) {
            return;
        }
        let mut state = self.state.lock();
        if state.shutting_down {
            return;
        }
        // ... then with one probe under the lock, remembering the item for next time.
        if state.add_known(&item) {
            let slot = self.counters.slot(&item);
            let seen = self.counters.count(slot);
            self.counters.start_counting();
            drop(state);
            self.counters.remember(item, slot, seen);
            return;
        }
        self.add_locked(state, item);
    }

    /// The rest of `add`, with the lock held: the item may become queued or dirty.
    #[inline(never)]
    fn add_locked(&self, mut state: MutexGuard<'_, State<T>>, item: T) {
        let mut wake = WakeList::default();
        state.promote_due(self.epoch, &mut wake);
        // `enqueue` leaves the item dirty, and nothing is popped before the lock is released.
        if self.counters.is_counting() {
            self.counters.refresh(&item);
        }
        state.enqueue(item, 0, &mut wake);
        // Unlock before waking (`wake` was declared after the guard, so drop it by hand).
        drop(state);
    }

    /// [`Queue::add_with_priority`](crate::Queue::add_with_priority).
    pub(crate) fn add_with_priority(&self, item: T, priority: i32) {
        if priority == 0 {
            return self.add(item);
        }
        let mut wake = WakeList::default();
        let mut state = self.lock_promoted(&mut wake);
        if !state.shutting_down {
            state.fifo.prio();
            // No `refresh` of a remembered key: at a negative priority, a later plain `add`
            // must take the lock to raise it.
            state.enqueue(item, priority, &mut wake);
        }
    }

    /// [`DelayingQueue::add_after`](crate::DelayingQueue::add_after), and with a priority
    /// other than 0,
    /// [`DelayingQueue::add_after_with_priority`](crate::DelayingQueue::add_after_with_priority).
    pub(crate) fn add_after(&self, item: T, delay: Duration, priority: i32) {
        let mut wake = WakeList::default();
        let mut state = self.state.lock();
        if state.shutting_down {
            return;
        }
        if let Some(metrics) = &state.metrics {
            metrics.retry();
        }
        if priority != 0 {
            state.fifo.prio();
        }
        if delay.is_zero() {
            state.promote_due(self.epoch, &mut wake);
            state.enqueue(item, priority, &mut wake);
            return;
        }
        let now = nanos_since(self.epoch, Instant::now());
        state.promote_due_at(self.epoch, now, &mut wake);
        // Capped at about 146 years from the queue's epoch, so that it fits the item map's
        // packed state; later deadlines are "never" anyway (see `instant_at`).
        let at = now
            .saturating_add(u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX))
            .min(MAX_PAYLOAD);
        if priority == 0 {
            state.request(item, at, &mut wake);
        } else {
            state.settle(&mut wake); // the buffered requests were made first
            state.schedule(item, at, priority, &mut wake);
        }
    }

    /// [`Queue::get_with_priority`](crate::Queue::get_with_priority).
    pub(crate) async fn get(&self) -> Option<(T, i32)> {
        // Fast path: an item is ready, or the queue is over. No waiter, no timer, one lock.
        if let Some(out) = self.try_take() {
            return out;
        }
        let mut waiter = Waiter {
            shared: self,
            slot: None,
            sleep: None,
        };
        poll_fn(|cx| waiter.poll_get(cx)).await
    }

    /// `get` without waiting: the item, `Some(None)` once shut down and empty, or `None`
    /// if `get` has to wait.
    fn try_take(&self) -> Option<Option<(T, i32)>> {
        let mut wake = WakeList::default();
        let mut state = self.lock_promoted(&mut wake);
        match state.pop(&self.counters) {
            Some(item) => Some(Some(item)),
            None if state.shutting_down => Some(None),
            None => None,
        }
    }

    /// [`Queue::done`](crate::Queue::done).
    pub(crate) fn done(&self, item: &T) {
        let drained = {
            let mut wake = WakeList::default();
            self.lock_promoted(&mut wake).done(item, &mut wake)
        };
        if drained {
            self.drained.notify_waiters();
        }
    }

    /// [`Queue::len`](crate::Queue::len).
    pub(crate) fn len(&self) -> usize {
        let mut wake = WakeList::default();
        self.lock_promoted(&mut wake).fifo.len()
    }

    /// [`DelayingQueue::pending_delayed`](crate::DelayingQueue::pending_delayed).
    pub(crate) fn pending_delayed(&self) -> usize {
        let mut wake = WakeList::default();
        self.lock_promoted(&mut wake).delayed.pending()
    }

    /// [`Queue::shut_down`](crate::Queue::shut_down) and, with `drain`, the first step of
    /// [`Queue::shut_down_with_drain`](crate::Queue::shut_down_with_drain).
    pub(crate) fn shut_down(&self, drain: bool) {
        {
            let mut wake = WakeList::default();
            self.lock_promoted(&mut wake).shut_down(drain, &mut wake);
        }
        if !drain {
            self.drained.notify_waiters();
        }
    }

    /// The rest of [`Queue::shut_down_with_drain`](crate::Queue::shut_down_with_drain): waits
    /// until the drain completes or a `shut_down` cuts it short.
    pub(crate) async fn wait_drained(&self) {
        loop {
            let mut notified = pin!(self.drained.notified());
            notified.as_mut().enable();
            {
                let state = self.state.lock();
                if !state.drain || state.is_drained() {
                    return;
                }
            }
            notified.await;
        }
    }

    /// Refreshes the unfinished-work gauges; `false` once the queue is shutting down.
    pub(crate) fn update_unfinished_work(&self) -> bool {
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

impl<T: Send> fmt::Debug for Shared<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state.lock();
        f.debug_struct("Queue")
            .field("queued", &state.fifo.len())
            .field("processing", &state.processing)
            .field("delayed", &state.delayed.pending())
            .field("delayed_unrecorded", &state.delayed.unrecorded())
            .field("shutting_down", &state.shutting_down)
            .finish()
    }
}

/// Nanoseconds from `epoch` to `now` (zero if `now` is earlier).
fn nanos_since(epoch: Instant, now: Instant) -> u64 {
    u64::try_from(now.saturating_duration_since(epoch).as_nanos()).unwrap_or(u64::MAX)
}

// === impl State ===

impl<T: Eq + Hash + Clone + Send> State<T> {
    /// The "add" transition of the state table, for an item that is due now, added with
    /// `priority`.
    #[inline]
    pub(crate) fn enqueue(&mut self, item: T, priority: i32, wake: &mut WakeList) {
        if priority == 0 && self.fifo.prio.is_none() {
            self.enqueue_plain(item, wake);
        } else {
            self.enqueue_prioritised(item, priority, wake);
        }
    }

    /// [`enqueue`](Self::enqueue) on a queue that has only ever seen priority 0: the plain
    /// FIFO's transitions, with nothing to raise and no pending priority to keep.
    fn enqueue_plain(&mut self, item: T, wake: &mut WakeList) {
        match self.items.entry(item) {
            Entry::Vacant(vacant) => {
                let queued = self.fifo.push(vacant.key().clone());
                if let Some(metrics) = &mut self.metrics {
                    metrics.add(vacant.key(), 0);
                }
                vacant.insert(queued.pack());
                self.waiters.wake_for_item(wake);
            }
            Entry::Occupied(mut occupied) => {
                let next = match self.fifo.current(*occupied.get()) {
                    ItemState::Queued(_) | ItemState::QueuedHeap | ItemState::ProcessingDirty => {
                        return;
                    }
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
                    metrics.add(occupied.key(), 0);
                }
            }
        }
    }

    /// [`enqueue`](Self::enqueue) with a priority, or on a queue that has seen one.
    #[inline(never)]
    fn enqueue_prioritised(&mut self, item: T, priority: i32, wake: &mut WakeList) {
        match self.items.entry(item) {
            Entry::Vacant(vacant) => {
                let queued = self.fifo.push_with(vacant.key().clone(), priority);
                if let Some(metrics) = &mut self.metrics {
                    metrics.add(vacant.key(), priority);
                }
                vacant.insert(queued.pack());
                self.waiters.wake_for_item(wake);
            }
            Entry::Occupied(mut occupied) => {
                let key = occupied.key();
                let (next, priority) = match self.fifo.current(*occupied.get()) {
                    state @ (ItemState::Queued(_)
                    | ItemState::QueuedHeap
                    | ItemState::ProcessingDirty) => {
                        if let Some((old, next)) = self.fifo.raise(key, state, priority) {
                            if let Some(metrics) = &mut self.metrics {
                                metrics.reprioritize(old, priority);
                            }
                            occupied.insert(next.pack());
                        }
                        return;
                    }
                    ItemState::Processing => {
                        self.fifo.set_pending(key, priority);
                        (ItemState::ProcessingDirty, priority)
                    }
                    ItemState::Waiting(_) => {
                        self.delayed.cancel_one();
                        self.waiters.wake_for_item(wake);
                        let priority = self.fifo.take_pending(key).max(priority);
                        (self.fifo.push_with(key.clone(), priority), priority)
                    }
                    state @ ItemState::ProcessingWaiting(_) => {
                        self.delayed.cancel_one();
                        self.fifo.raise(key, state, priority);
                        (ItemState::ProcessingDirty, self.fifo.pending_priority(key))
                    }
                };
                occupied.insert(next.pack());
                if let Some(metrics) = &mut self.metrics {
                    metrics.add(occupied.key(), priority);
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
            ItemState::Queued(_) => {}
            // Below priority 0, a plain add raises it: the general path does that.
            ItemState::ProcessingDirty | ItemState::QueuedHeap => {
                return self.fifo.pending_priority(item) >= 0;
            }
            ItemState::Processing => {
                *state = ItemState::ProcessingDirty.pack();
                if let Some(metrics) = &mut self.metrics {
                    metrics.add(item, 0);
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
    #[inline]
    fn pop(&mut self, counters: &PopCounters<T>) -> Option<(T, i32)> {
        let (item, priority) = if self.fifo.prio.is_none() {
            let seq = self.fifo.popped;
            let item = self.fifo.pop()?;
            debug_assert_eq!(self.items.get(&item), Some(&ItemState::Queued(seq).pack()));
            (item, 0)
        } else {
            self.pop_prioritised()?
        };
        if counters.is_counting() {
            counters.count_pop(&item);
        }
        self.processing += 1;
        if let Some(metrics) = &mut self.metrics {
            metrics.get(&item, priority);
        }
        Some((item, priority))
    }

    /// [`pop`](Self::pop)'s choice on a queue with priorities, out of line: an item from the
    /// heap is marked as being processed (a FIFO item reads so once popped).
    #[inline(never)]
    fn pop_prioritised(&mut self) -> Option<(T, i32)> {
        let (item, priority, from_heap) = self.fifo.pop_prioritised()?;
        if from_heap && let Some(state) = self.items.get_mut(&item) {
            *state = ItemState::Processing.pack();
        }
        Some((item, priority))
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
                let priority = self.fifo.take_pending(entry.key());
                entry.insert(self.fifo.push_with(entry.key().clone(), priority).pack());
                self.waiters.wake_for_item(wake);
            }
            ItemState::ProcessingWaiting(at) => {
                entry.insert(ItemState::Waiting(at).pack());
            }
            // Not handed out: a stray `done` changes nothing.
            ItemState::Queued(_) | ItemState::QueuedHeap | ItemState::Waiting(_) => {
                return false;
            }
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
    fn park_waiter(&mut self, slot: usize, old: Option<Waker>, waker: &Waker) -> Option<u64> {
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
                let priority = self.fifo.take_pending(&timer.item);
                if let Some(metrics) = &mut self.metrics {
                    let since = since().unwrap_or_else(Instant::now);
                    metrics.add_at(&timer.item, since, priority);
                }
                *state = self.fifo.push_with(timer.item, priority).pack();
                self.waiters.wake_for_item(wake);
            }
            ItemState::ProcessingWaiting(at) if at == timer.at => {
                *state = ItemState::ProcessingDirty.pack();
                self.delayed.cancel_one();
                if let Some(metrics) = &mut self.metrics {
                    let priority = self.fifo.pending_priority(&timer.item);
                    let since = since().unwrap_or_else(Instant::now);
                    metrics.add_at(&timer.item, since, priority);
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
            self.schedule(item, at, 0, wake);
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
            if let Some(key) = self.record(item, at, 0) {
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

    /// Records a request to add `item` with `priority` at deadline `at` (in the future, at
    /// most [`MAX_PAYLOAD`]).
    pub(crate) fn schedule(&mut self, item: T, at: u64, priority: i32, wake: &mut WakeList) {
        if let Some(key) = self.record(item, at, priority) {
            self.delayed.push(key, at);
            self.waiters.wake_for_deadline(at, wake);
            self.sweep_if_needed();
        }
    }

    /// The item map's part of recording a request for `item` at `at` with `priority`: returns
    /// the key to push to the heap with it, or `None` if the request changes no deadline.
    #[inline]
    fn record(&mut self, item: T, at: u64, priority: i32) -> Option<T> {
        use hashbrown::hash_map::Entry;

        match self.items.entry(item) {
            Entry::Vacant(vacant) => {
                let key = vacant.key().clone();
                self.fifo.set_pending(&key, priority);
                vacant.insert(ItemState::Waiting(at).pack());
                self.delayed.add_one();
                Some(key)
            }
            Entry::Occupied(mut occupied) => {
                let state = self.fifo.current(*occupied.get());
                let raised = self.fifo.raise(occupied.key(), state, priority);
                let next = match state {
                    // Will be processed after now anyway; only its priority may rise.
                    ItemState::Queued(_) | ItemState::QueuedHeap | ItemState::ProcessingDirty => {
                        if let Some((old, next)) = raised {
                            if let Some(metrics) = &mut self.metrics {
                                metrics.reprioritize(old, priority);
                            }
                            occupied.insert(next.pack());
                        }
                        return None;
                    }
                    ItemState::Processing => {
                        self.fifo.set_pending(occupied.key(), priority);
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
            let items = &self.items;
            let fifo = &mut self.fifo;
            if let Some(prio) = &mut fifo.prio {
                // Only dirty items keep a pending priority now.
                prio.retain_pending(|item| {
                    items.get(item).map(|state| state.get()) == Some(ItemState::ProcessingDirty)
                });
            }
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
pub(crate) const MIN_SWEEP_LEN: usize = 64;

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
// === impl Waiter ===

/// The part of a `get` future that must be cleaned up if the future is dropped.
struct Waiter<'a, T: Send> {
    shared: &'a Shared<T>,
    /// The getter's slot in `Waiters`, once it has parked.
    slot: Option<usize>,
    /// The keeper's sleep until the earliest deadline. Boxed: only the keeper sleeps, and
    /// this keeps `get`'s future small.
    sleep: Option<Pin<Box<Sleep>>>,
}

impl<T: Eq + Hash + Clone + Send> Waiter<'_, T> {
    /// One poll of `get`: take an item, report shutdown, or park (and, as the keeper, sleep
    /// until the earliest delayed deadline).
    fn poll_get(&mut self, cx: &mut Context<'_>) -> Poll<Option<(T, i32)>> {
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
                return Poll::Pending;
            };
            // Keeper: sleep on tokio's timer until the deadline.
            let when = self.shared.instant_at(at);
            let timer = match &mut self.sleep {
                Some(timer) => {
                    if timer.deadline() != when {
                        timer.as_mut().reset(when);
                    }
                    timer
                }
                None => self.sleep.insert(Box::pin(tokio::time::sleep_until(when))),
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
    use super::*;

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
}
