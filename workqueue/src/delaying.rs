//! The delaying layer, [`DelayingQueue`]: a [`Queue`] plus `add_after`.
//!
//! A thin handle: requests live in the queue's item map and delay heap, and are promoted by
//! [`crate::state`], whose docs say how (one request per item, a lazily cleaned heap,
//! batched recording, a timer kept by one waiting `get` on tokio's clock).

use std::fmt;
use std::hash::Hash;
use std::ops::Deref;
use std::time::Duration;

use crate::queue::{Queue, QueueConfig};

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
/// No task or thread runs per item or per queue: a waiting `get` keeps the timer, on
/// tokio's clock (so `get` needs a tokio runtime with the time driver enabled once delayed
/// items are pending, and tests can run on paused time). A waiting worker receives a due item
/// within tokio's timer resolution, a millisecond or so after its deadline, never before it.
/// If no worker is waiting, the item is queued by the next operation on the queue, in
/// deadline order and ahead of items added directly after its deadline.
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
        self.queue.shared.add_after(item, delay, 0);
    }

    /// [`add_after`](Self::add_after) with a priority: once due, `item` is queued with
    /// `priority` (see [`Queue::add_with_priority`]). A pending request keeps the earliest
    /// deadline and the highest priority of the requests made for it.
    pub fn add_after_with_priority(&self, item: T, delay: Duration, priority: i32) {
        self.queue.shared.add_after(item, delay, priority);
    }

    /// The number of delayed requests whose deadline has not passed yet.
    ///
    /// Useful for tests and monitoring; [`len`](Queue::len) does not count these.
    pub fn pending_delayed(&self) -> usize {
        self.queue.shared.pending_delayed()
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

#[cfg(test)]
mod tests {
    use std::pin::pin;
    use std::task::Poll;

    use tokio::time::advance;

    use tokio::time::Instant;

    use super::*;
    use crate::state::MIN_SWEEP_LEN;
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
