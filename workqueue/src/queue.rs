//! The base queue, [`Queue`]: fair, stingy, many producers and consumers, graceful shutdown.
//!
//! A thin handle: the state and every transition live in [`crate::state`]. This module holds
//! the API, its documentation, how a queue is configured ([`QueueConfig`]), and the metrics
//! refresher a named queue with a provider spawns.

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::metrics::{MetricsProvider, QueueMetrics, UNFINISHED_WORK_UPDATE_PERIOD};
use crate::priority::DEFAULT_AGING_STEP;
use crate::state::Shared;

/// How a queue is built: its name, where its metrics go, and how fast waiting items age.
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
#[derive(Clone)]
pub struct QueueConfig {
    name: String,
    metrics_provider: Option<Arc<dyn MetricsProvider>>,
    aging_step: Duration,
}

impl Default for QueueConfig {
    fn default() -> Self {
        Self {
            name: String::new(),
            metrics_provider: None,
            aging_step: DEFAULT_AGING_STEP,
        }
    }
}

impl QueueConfig {
    /// An unnamed configuration without metrics, aging one priority level per
    /// [`DEFAULT_AGING_STEP`].
    pub fn new() -> Self {
        Self::default()
    }

    /// How long a waiting item takes to rise one priority level (see
    /// [priorities](crate#priorities)). [`Duration::ZERO`] turns priorities into labels only:
    /// items are handed out in the order they were queued.
    pub fn aging_step(mut self, step: Duration) -> Self {
        self.aging_step = step;
        self
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
            .field("aging_step", &self.aging_step)
            .finish()
    }
}

/// A fair, deduplicating work queue (client-go's `workqueue.Typed[T]`), with priorities
/// that age (controller-runtime's priority queue, without its starvation).
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
        let shared = Arc::new(Shared::new(metrics, config.aging_step));
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
    ///
    /// A plain `add` is an add at priority 0: it raises an item that waits at a lower
    /// priority (see [`add_with_priority`](Self::add_with_priority)).
    #[inline]
    pub fn add(&self, item: T) {
        self.shared.add(item);
    }

    /// Queues `item` with `priority` (higher first; [`add`](Self::add) is priority 0).
    ///
    /// Everything [`add`](Self::add) says holds, and an item the queue knows already keeps
    /// the highest priority it was added with: a re-add with a higher priority raises it
    /// (to the place a fresh add would give it, unless it ranks better already from
    /// waiting), one with a lower priority changes nothing. An item added with a priority
    /// while it is processed is queued with it by [`done`](Self::done). How priorities and
    /// waiting combine, and the bound on any item's wait, are in the
    /// [crate docs](crate#priorities).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// use workqueue::Queue;
    ///
    /// let queue = Queue::new();
    /// queue.add_with_priority("resync", -100);
    /// queue.add("edited");
    /// queue.add_with_priority("urgent", 10);
    /// assert_eq!(queue.get_with_priority().await, Some(("urgent", 10)));
    /// assert_eq!(queue.get().await, Some("edited"));
    /// assert_eq!(queue.get_with_priority().await, Some(("resync", -100)));
    /// # }
    /// ```
    pub fn add_with_priority(&self, item: T, priority: i32) {
        self.shared.add_with_priority(item, priority);
    }

    /// Waits for an item and hands it out; `None` once the queue is shut down and empty.
    ///
    /// Items come out in FIFO order (with priorities: highest first, FIFO within a priority,
    /// waiting items aging upward; see [priorities](crate#priorities)). The item is now
    /// *being processed*: no other `get` returns it until you call [`done`](Self::done) with
    /// it, which you must do exactly once for every item you get, whether processing
    /// succeeded or not — otherwise the item is never handed out again and
    /// [`shut_down_with_drain`](Self::shut_down_with_drain) never returns.
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
        self.shared.get().await.map(|(item, _)| item)
    }

    /// [`get`](Self::get), with the priority the item was queued with (0 for a plain
    /// [`add`](Self::add)), so that a worker can queue it again at the same priority.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`get`](Self::get).
    pub async fn get_with_priority(&self) -> Option<(T, i32)> {
        self.shared.get().await
    }

    /// Marks `item` as done processing.
    ///
    /// If the item was added again while it was being processed, it goes to the back of the
    /// queue now. Call this exactly once for every item [`get`](Self::get) returned, even if
    /// processing failed (use the rate-limited queue to retry). Calling it for an item that is
    /// not being processed is ignored, so a stray call can never queue an item twice.
    pub fn done(&self, item: &T) {
        self.shared.done(item);
    }

    /// The number of items waiting to be handed out.
    ///
    /// As in client-go, items being processed are not counted, not even those added again
    /// while being processed, and neither are items still pending in the delaying layer.
    pub fn len(&self) -> usize {
        self.shared.len()
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
        self.shared.shut_down(false);
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
        self.shared.shut_down(true);
        self.shared.wait_drained().await;
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
        self.shared.fmt(f)
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

#[cfg(test)]
mod tests {
    use std::pin::pin;
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
    fn handles_are_send_and_sync_and_get_is_send() {
        fn assert_send_sync<X: Send + Sync>(_: &X) {}
        fn assert_send<X: Send>(_: &X) {}
        let queue = Queue::<String>::new();
        assert_send_sync(&queue);
        assert_send(&queue.get());
        assert_send(&queue.shut_down_with_drain());
    }
}
