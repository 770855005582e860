//! Priorities: the heap of prioritised items beside the FIFO, and how waiting ages them.
//!
//! # Implementation Details
//!
//! **One number orders everything.** An item queued at time `t` (nanoseconds since the
//! priority side was created) with priority `p` gets the *rank* `v = t − p × step`, and `get` hands out
//! the smallest rank first. Read `(now − v) / step` as the item's *effective priority*: it
//! starts at `p` and rises by one level per `step` waited. Because every waiting item rises
//! at the same rate, `now` cancels out of every comparison, so the order of two waiting
//! items never changes while they wait, and a rank is computed once, when the item is
//! queued. This is what makes aging cheap: no periodic re-sort, no timer.
//!
//! Ties (equal ranks) go to the lower priority, which is the item that was queued first
//! (`t = v + p × step`), then to the earlier push.
//!
//! **Where items sit.** Priority-0 items stay in the plain FIFO ([`crate::state::Fifo`]),
//! whose ranks rise with their push order, so the FIFO's front is its smallest rank. Every
//! other priority goes to one [`BinaryHeap`] of entries `(v, priority, push number, item)`.
//! `get` compares the FIFO's front with the heap's top. A queue that never saw another
//! priority has no [`Priorities`] at all: its `add` and `get` are the FIFO's, and read no
//! clock.
//!
//! **Stamps.** From the first add with another priority on, every push to the FIFO records
//! its time in `stamps`. Items that were in the FIFO before count as queued at that moment
//! (time 0): until then nothing could be handed out ahead of them anyway, and the error can
//! only favour an item of higher priority queued later.
//!
//! **Raising.** A re-add with a higher priority gives the item the smaller of its rank and
//! the rank a fresh add would give it: a fresh add if it has not waited long, and its place
//! otherwise, so raising never costs it the waiting it has done. A moved item leaves its old
//! entry behind, stale (lazy deletion, as in the delay heap): a heap entry is live only if
//! `pending` holds its push number, and the FIFO entries left behind are listed in
//! `stale_fifo`. Stale heap entries are swept when they outnumber the live ones.
//!
//! **Pending priorities.** An item that is not queued but will be — delayed (`Waiting`), or
//! added again while it is processed (`ProcessingDirty`, `ProcessingWaiting`) — keeps the
//! highest priority it was added with in `pending`, and is queued with it. Priority 0 is
//! the absence of an entry.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};
use std::hash::Hash;
use std::time::Duration;

use hashbrown::{HashMap, HashSet};
use tokio::time::Instant;

/// How long a waiting item takes to rise one priority level, unless
/// [`QueueConfig::aging_step`](crate::QueueConfig::aging_step) says otherwise: 1 s, so an
/// item added at priority −100 is handed out no later than an item of priority 0 added 100 s
/// after it.
pub const DEFAULT_AGING_STEP: Duration = Duration::from_secs(1);

/// Push number of a pending entry that is not in the heap.
const NOT_QUEUED: u64 = u64::MAX;

/// Heaps smaller than this are never swept.
const MIN_SWEEP_LEN: usize = 64;

/// The priority side of a queue; created by the first add with a priority other than 0.
pub(crate) struct Priorities<T> {
    /// Zero of this side's clock, when it was created: ranks are nanoseconds since.
    epoch: Instant,
    /// Nanoseconds per priority level.
    step: i64,
    /// The first FIFO push number that has a stamp.
    first_stamped: u64,
    /// The ranks of the FIFO's items from `max(popped, first_stamped)` on, in FIFO order.
    stamps: VecDeque<i64>,
    /// Queued items of priority other than 0, smallest rank on top; stale entries included.
    heap: BinaryHeap<Entry<T>>,
    /// Every item in the heap (live entry's push number), and every item waiting to be queued
    /// with a priority other than 0.
    pending: HashMap<T, Pending>,
    /// Next heap push number.
    next_seq: u64,
    /// Number of live heap entries.
    live: usize,
    /// FIFO push numbers whose item moved to the heap.
    stale_fifo: HashSet<u64>,
}

/// The priority of an item not in the FIFO, and where its heap entry is.
#[derive(Clone, Copy, Debug)]
struct Pending {
    /// The highest priority it was added with.
    priority: i32,
    /// Its rank, if it is in the heap.
    v: i64,
    /// Its live heap entry's push number, or [`NOT_QUEUED`].
    seq: u64,
}

/// One heap entry.
struct Entry<T> {
    v: i64,
    priority: i32,
    seq: u64,
    item: T,
}

impl<T> Entry<T> {
    fn key(&self) -> (i64, i32, u64) {
        (self.v, self.priority, self.seq)
    }
}

impl<T> PartialEq for Entry<T> {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl<T> Eq for Entry<T> {}

impl<T> PartialOrd for Entry<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> Ord for Entry<T> {
    /// Reversed, so that `BinaryHeap` (a max-heap) pops the smallest rank first.
    fn cmp(&self, other: &Self) -> Ordering {
        other.key().cmp(&self.key())
    }
}

/// The rank of an item queued at `t` with `priority`.
fn rank(t: i64, priority: i32, step: i64) -> i64 {
    t.saturating_sub(i64::from(priority).saturating_mul(step))
}

/// Where a raised queued item is now.
pub(crate) enum Moved {
    /// It stays where it is (its label changed, or it moved within the heap).
    Stays,
    /// It left the heap for the FIFO at priority 0: push it there.
    ToFifo,
}

impl<T> Priorities<T> {
    /// Nanoseconds since the epoch.
    fn now(&self) -> i64 {
        i64::try_from(
            Instant::now()
                .saturating_duration_since(self.epoch)
                .as_nanos(),
        )
        .unwrap_or(i64::MAX)
    }

    /// Records the stamp of a push to the FIFO.
    pub(crate) fn stamp_fifo_push(&mut self) {
        let now = self.now();
        self.stamps.push_back(now);
    }

    /// Number of stale FIFO entries.
    pub(crate) fn stale_fifo_len(&self) -> usize {
        self.stale_fifo.len()
    }

    /// Number of items queued in the heap.
    pub(crate) fn heap_len(&self) -> usize {
        self.live
    }
}

impl<T: Eq + Hash + Clone> Priorities<T> {
    /// An empty priority side; `next_push` is the FIFO's next push number.
    pub(crate) fn new(step_nanos: u64, next_push: u64) -> Self {
        Self {
            epoch: Instant::now(),
            step: i64::try_from(step_nanos).unwrap_or(i64::MAX),
            first_stamped: next_push,
            stamps: VecDeque::new(),
            heap: BinaryHeap::new(),
            pending: HashMap::default(),
            next_seq: 0,
            live: 0,
            stale_fifo: HashSet::default(),
        }
    }

    /// The rank of the FIFO item pushed as `seq`, the FIFO having popped `popped`.
    fn fifo_rank(&self, seq: u64, popped: u64) -> i64 {
        if seq < self.first_stamped {
            return 0; // queued before this side was created: count from its creation
        }
        let index = seq - popped.max(self.first_stamped);
        self.stamps
            .get(usize::try_from(index).unwrap_or(usize::MAX))
            .copied()
            .unwrap_or(0)
    }

    /// The FIFO popped its entry `seq`: drop its stamp; `true` if the entry was stale.
    pub(crate) fn fifo_popped(&mut self, seq: u64) -> bool {
        if seq >= self.first_stamped {
            self.stamps.pop_front();
        }
        !self.stale_fifo.is_empty() && self.stale_fifo.remove(&seq)
    }

    /// Whether the FIFO entry `seq` is stale.
    pub(crate) fn is_stale_fifo(&self, seq: u64) -> bool {
        !self.stale_fifo.is_empty() && self.stale_fifo.contains(&seq)
    }

    /// Queues `item` in the heap with `priority` (not 0), ranked from now.
    pub(crate) fn push(&mut self, item: T, priority: i32) {
        let v = rank(self.now(), priority, self.step);
        self.push_ranked(item, priority, v);
    }

    /// Queues `item` in the heap with `priority` and rank `v`, replacing any pending entry.
    fn push_ranked(&mut self, item: T, priority: i32, v: i64) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let key = item.clone();
        self.heap.push(Entry {
            v,
            priority,
            seq,
            item,
        });
        self.pending.insert(key, Pending { priority, v, seq });
        self.live += 1;
        self.sweep_if_needed();
    }

    /// The rank and priority of the heap's best live entry, dropping stale ones on top.
    pub(crate) fn peek(&mut self) -> Option<(i64, i32)> {
        while let Some(top) = self.heap.peek() {
            if self
                .pending
                .get(&top.item)
                .is_some_and(|pending| pending.seq == top.seq)
            {
                return Some((top.v, top.priority));
            }
            self.heap.pop();
        }
        None
    }

    /// Takes the heap's best live entry: the item and the priority it is handed out with.
    /// Call after [`peek`](Self::peek) returned `Some`.
    pub(crate) fn pop(&mut self) -> Option<(T, i32)> {
        let top = self.heap.pop()?;
        let pending = self.pending.remove(&top.item)?;
        self.live -= 1;
        Some((top.item, pending.priority))
    }

    /// Whether the FIFO front (rank `fifo_v`) goes before the heap top `(v, priority)`.
    pub(crate) fn fifo_first(&self, seq: u64, popped: u64, top: (i64, i32)) -> bool {
        (self.fifo_rank(seq, popped), 0) <= top
    }

    /// The priority `item` will be queued with (0 if none is pending).
    pub(crate) fn pending_priority(&self, item: &T) -> i32 {
        self.pending.get(item).map_or(0, |pending| pending.priority)
    }

    /// Takes the pending priority of an item that is about to be queued.
    pub(crate) fn take_pending(&mut self, item: &T) -> i32 {
        self.pending
            .remove(item)
            .map_or(0, |pending| pending.priority)
    }

    /// Sets the priority (not 0) an item that is neither queued nor pending will be queued
    /// with.
    pub(crate) fn set_pending(&mut self, item: &T, priority: i32) {
        let pending = Pending {
            priority,
            v: 0,
            seq: NOT_QUEUED,
        };
        self.pending.insert(item.clone(), pending);
    }

    /// Raises the pending priority of an item that is not queued to `priority`; returns the
    /// old one if it was lower.
    pub(crate) fn raise_pending(&mut self, item: &T, priority: i32) -> Option<i32> {
        let old = self.pending_priority(item);
        if priority <= old {
            return None;
        }
        if priority == 0 {
            self.pending.remove(item);
        } else {
            self.pending.insert(
                item.clone(),
                Pending {
                    priority,
                    v: 0,
                    seq: NOT_QUEUED,
                },
            );
        }
        Some(old)
    }

    /// Raises a FIFO item (pushed as `seq`, priority 0) to `priority` > 0: it moves to the
    /// heap with the better of its rank and a fresh one.
    pub(crate) fn raise_fifo(&mut self, item: &T, seq: u64, popped: u64, priority: i32) {
        let v = self
            .fifo_rank(seq, popped)
            .min(rank(self.now(), priority, self.step));
        self.stale_fifo.insert(seq);
        self.push_ranked(item.clone(), priority, v);
    }

    /// Raises a heap item to `priority`: returns the old priority if it was lower, and where
    /// the item is now.
    pub(crate) fn raise_queued(&mut self, item: &T, priority: i32) -> Option<(i32, Moved)> {
        let pending = *self.pending.get(item)?;
        if priority <= pending.priority {
            return None;
        }
        let fresh = rank(self.now(), priority, self.step);
        if fresh >= pending.v {
            // It has waited long enough to rank better already: it keeps its place.
            if let Some(entry) = self.pending.get_mut(item) {
                entry.priority = priority;
            }
            return Some((pending.priority, Moved::Stays));
        }
        if priority == 0 {
            self.pending.remove(item);
            self.live -= 1;
            return Some((pending.priority, Moved::ToFifo));
        }
        self.live -= 1;
        self.push_ranked(item.clone(), priority, fresh);
        Some((pending.priority, Moved::Stays))
    }

    /// Forgets the pending priorities of items `keep` rejects (shutdown drops their states).
    pub(crate) fn retain_pending(&mut self, mut keep: impl FnMut(&T) -> bool) {
        self.pending
            .retain(|item, pending| pending.seq != NOT_QUEUED || keep(item));
    }

    /// Drops the heap's stale entries if they outnumber the live ones.
    fn sweep_if_needed(&mut self) {
        if self.heap.len() > MIN_SWEEP_LEN && self.heap.len() > 2 * self.live {
            let pending = &self.pending;
            self.heap
                .retain(|entry| pending.get(&entry.item).is_some_and(|p| p.seq == entry.seq));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use parking_lot::Mutex;
    use tokio::time::advance;

    use super::*;
    use crate::test_util::RecordingProvider;
    use crate::{DelayingQueue, MetricsProvider, PriorityGaugeMetric, Queue, QueueConfig};

    const SEC: Duration = Duration::from_secs(1);
    const LOW: i32 = -100;

    /// Takes every queued item, in order, marking each done.
    async fn drain<T: Eq + Hash + Clone + Send + 'static>(queue: &Queue<T>) -> Vec<(T, i32)> {
        let mut out = Vec::new();
        while !queue.is_empty() {
            let (item, priority) = queue.get_with_priority().await.unwrap();
            queue.done(&item);
            out.push((item, priority));
        }
        out
    }

    #[tokio::test(start_paused = true)]
    async fn higher_priority_first_and_fifo_within_a_priority() {
        let queue = Queue::new();
        queue.add_with_priority("low-1", LOW);
        queue.add("live-1");
        queue.add_with_priority("high", 5);
        queue.add_with_priority("low-2", LOW);
        queue.add("live-2");
        assert_eq!(queue.len(), 5);
        assert_eq!(
            drain(&queue).await,
            [
                ("high", 5),
                ("live-1", 0),
                ("live-2", 0),
                ("low-1", LOW),
                ("low-2", LOW)
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_plain_queue_stays_a_fifo_without_a_priority_side() {
        let queue = Queue::new();
        for item in [3, 1, 2] {
            queue.add(item);
        }
        assert!(queue.shared.state.lock().fifo.prio.is_none());
        assert_eq!(drain(&queue).await, [(3, 0), (1, 0), (2, 0)]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_re_add_with_a_higher_priority_raises_a_waiting_item_to_the_back_of_its_new_priority()
    {
        let queue = Queue::new();
        queue.add_with_priority("a", LOW);
        queue.add_with_priority("b", LOW);
        queue.add("c");
        queue.add_with_priority("d", 3);
        queue.add_with_priority("b", 3); // raised: behind d
        queue.add_with_priority("a", 0); // raised: behind c
        queue.add("c"); // dedup, keeps its place
        assert_eq!(queue.len(), 4);
        assert_eq!(
            drain(&queue).await,
            [("d", 3), ("b", 3), ("c", 0), ("a", 0)]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_re_add_with_a_lower_priority_changes_nothing() {
        let queue = Queue::new();
        queue.add_with_priority("a", 2);
        queue.add_with_priority("b", 1);
        queue.add_with_priority("a", LOW);
        queue.add("a");
        assert_eq!(drain(&queue).await, [("a", 2), ("b", 1)]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_priority_0_item_raised_above_0_leaves_the_fifo() {
        let queue = Queue::new();
        queue.add("a");
        queue.add("b");
        queue.add_with_priority("b", 1);
        assert_eq!(
            queue.len(),
            2,
            "the entry b left in the FIFO is not counted"
        );
        assert_eq!(drain(&queue).await, [("b", 1), ("a", 0)]);
        assert!(queue.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_plain_add_raises_a_low_item_even_when_the_thread_remembers_it() {
        let queue = Queue::new();
        queue.add("x");
        queue.add("x"); // remembered: later duplicate adds may skip the lock
        assert_eq!(queue.get().await, Some("x"));
        queue.add_with_priority("x", LOW); // dirty while processed, at -100
        queue.add("y");
        queue.add("x"); // must take the lock and raise x to 0
        queue.done(&"x");
        assert_eq!(drain(&queue).await, [("y", 0), ("x", 0)]);
    }

    #[tokio::test(start_paused = true)]
    async fn an_item_added_while_processed_is_queued_with_its_priority_by_done() {
        let queue = Queue::new();
        queue.add("x");
        assert_eq!(queue.get().await, Some("x"));
        queue.add_with_priority("x", LOW);
        queue.add_with_priority("x", -50); // raised while dirty
        queue.add("y");
        queue.done(&"x");
        assert_eq!(drain(&queue).await, [("y", 0), ("x", -50)]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_delayed_item_is_queued_with_its_priority_when_due() {
        let queue = DelayingQueue::new();
        queue.add_after_with_priority("late", SEC, 7);
        queue.add_after_with_priority("low", SEC, LOW);
        queue.add_after("low", 2 * SEC); // raises the pending request to 0, keeps 1 s
        queue.add("now");
        advance(SEC).await;
        assert_eq!(queue.pending_delayed(), 0);
        assert_eq!(drain(&queue).await, [("late", 7), ("now", 0), ("low", 0)]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_item_ages_one_level_per_step() {
        let queue = Queue::with_config(QueueConfig::new().aging_step(SEC));
        queue.add_with_priority("low", LOW);
        advance(99 * SEC).await;
        queue.add("live-at-99s");
        assert_eq!(queue.get().await, Some("live-at-99s"), "still ranks below");
        queue.done(&"live-at-99s");
        advance(SEC).await;
        queue.add("live-at-100s");
        assert_eq!(
            queue.get().await,
            Some("low"),
            "at 100 s it ties with a fresh priority-0 item, and ties go to the older"
        );
    }

    /// The bound: a worker that serves one item per second, and live changes arriving twice
    /// as fast. Without aging the low item would never be served; with it, it is served
    /// right after the live changes made within 100 s of it, before any made later.
    #[tokio::test(start_paused = true)]
    async fn no_item_is_overtaken_by_items_added_later_than_its_priority_gap_in_steps() {
        let queue = Queue::with_config(QueueConfig::new().aging_step(SEC));
        queue.add_with_priority((u32::MAX, 0), LOW);
        let mut served = Vec::new();
        for second in 0..300u32 {
            queue.add((second, 0));
            queue.add((second, 1));
            let item = queue.get().await.unwrap();
            queue.done(&item);
            served.push(item);
            advance(SEC).await;
        }
        let at = served
            .iter()
            .position(|&(second, _)| second == u32::MAX)
            .expect("the low item was served");
        assert!(served[..at].iter().all(|&(second, _)| second < 100));
        assert_eq!(at, 200, "every live change of the first 100 s went first");
        assert_eq!(served[at + 1], (100, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_zero_aging_step_hands_items_out_in_queueing_order() {
        let queue = Queue::with_config(QueueConfig::new().aging_step(Duration::ZERO));
        queue.add_with_priority("low", LOW);
        advance(SEC).await;
        queue.add_with_priority("high", 5);
        assert_eq!(drain(&queue).await, [("low", LOW), ("high", 5)]);
    }

    #[tokio::test(start_paused = true)]
    async fn items_in_the_fifo_before_the_first_priority_count_as_queued_then() {
        let queue = Queue::with_config(QueueConfig::new().aging_step(SEC));
        queue.add("old");
        advance(50 * SEC).await;
        queue.add_with_priority("low", LOW);
        advance(50 * SEC).await;
        queue.add_with_priority("high", 60);
        // "old" ranks as queued at 50 s (not 0 s): "high", at 100 − 60 = 40 s, goes first.
        assert_eq!(
            drain(&queue).await,
            [("high", 60), ("old", 0), ("low", LOW)]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn shut_down_still_hands_out_prioritised_items_and_drain_waits_for_them() {
        let queue = Queue::new();
        queue.add_with_priority("low", LOW);
        queue.add("live");
        let drained = tokio::spawn({
            let queue = queue.clone();
            async move { queue.shut_down_with_drain().await }
        });
        tokio::task::yield_now().await;
        queue.add_with_priority("ignored", 9);
        assert_eq!(queue.get_with_priority().await, Some(("live", 0)));
        queue.done(&"live");
        assert!(!drained.is_finished());
        assert_eq!(queue.get_with_priority().await, Some(("low", LOW)));
        queue.done(&"low");
        crate::test_util::within(drained).await.unwrap();
        assert_eq!(queue.get().await, None);
    }

    /// Depth per priority label, as the provider sees it.
    #[derive(Clone, Default)]
    struct ByPriority(Arc<Mutex<std::collections::BTreeMap<i32, i64>>>);

    impl PriorityGaugeMetric for ByPriority {
        fn inc(&self, priority: i32) {
            *self.0.lock().entry(priority).or_default() += 1;
        }
        fn dec(&self, priority: i32) {
            *self.0.lock().entry(priority).or_default() -= 1;
        }
    }

    impl MetricsProvider for ByPriority {
        fn new_depth_metric_with_priority(&self, _: &str) -> Box<dyn PriorityGaugeMetric> {
            Box::new(self.clone())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn depth_is_labelled_by_priority_and_moves_with_a_raise() {
        let depth = ByPriority::default();
        let queue = Queue::with_config(
            QueueConfig::new()
                .name("q")
                .metrics_provider(Arc::new(depth.clone())),
        );
        let seen = || depth.0.lock().clone().into_iter().collect::<Vec<_>>();
        queue.add_with_priority("a", LOW);
        queue.add_with_priority("b", LOW);
        queue.add("c");
        assert_eq!(seen(), [(LOW, 2), (0, 1)]);
        queue.add("b");
        assert_eq!(seen(), [(LOW, 1), (0, 2)]);
        assert_eq!(queue.get_with_priority().await, Some(("c", 0)));
        assert_eq!(seen(), [(LOW, 1), (0, 1)]);
        queue.add_with_priority("c", LOW); // dirty while processed
        assert_eq!(seen(), [(LOW, 2), (0, 1)]);
        queue.done(&"c");
        drain(&queue).await;
        assert_eq!(seen(), [(LOW, 0), (0, 0)]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_provider_without_priorities_still_counts_depth() {
        let provider = RecordingProvider::default();
        let queue = Queue::with_config(
            QueueConfig::new()
                .name("q")
                .metrics_provider(Arc::new(provider.clone())),
        );
        queue.add_with_priority("a", LOW);
        queue.add("b");
        assert_eq!(provider.snapshot().depth, 2);
        assert_eq!(provider.snapshot().names.len(), 7);
        drain(&queue).await;
        assert_eq!(provider.snapshot().depth, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn stale_heap_entries_are_swept() {
        let queue = Queue::new();
        for round in 0..10 {
            for item in 0..100u32 {
                queue.add_with_priority(item, -100 + round);
            }
        }
        let heap = queue
            .shared
            .state
            .lock()
            .fifo
            .prio
            .as_ref()
            .unwrap()
            .heap
            .len();
        assert!(
            heap <= 2 * 100 + MIN_SWEEP_LEN,
            "{heap} entries for 100 items"
        );
        assert_eq!(queue.len(), 100);
        let out = drain(&queue).await;
        assert_eq!(out.len(), 100);
        assert!(out.iter().all(|&(_, priority)| priority == -91));
    }
}
