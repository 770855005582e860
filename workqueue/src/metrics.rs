//! Metrics hooks: the [`MetricsProvider`] trait and the seven queue metrics of client-go.
//!
//! [`MetricsProvider`]'s docs give each metric's exact meaning; `QueueMetrics` is the
//! per-queue bookkeeping the queue updates under its lock.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

use tokio::time::Instant;

/// How often the unfinished-work and longest-running gauges are refreshed (client-go's
/// `defaultUnfinishedWorkUpdatePeriod`).
pub const UNFINISHED_WORK_UPDATE_PERIOD: Duration = Duration::from_millis(500);

/// `workqueue_depth` with the `priority` label: a gauge per priority that moves by one.
///
/// An item counts under the priority it will be handed out with: the one it was added with,
/// or a higher one it was raised to by a later add (which moves it from one priority to the
/// other). Aging does not move it: the label is the priority asked for, not the effective one.
pub trait PriorityGaugeMetric: Send + Sync {
    /// Adds one under `priority`.
    fn inc(&self, priority: i32);
    /// Subtracts one under `priority`.
    fn dec(&self, priority: i32);
}

/// A [`GaugeMetric`] behind the [`PriorityGaugeMetric`] interface: the priority is dropped.
struct WithoutPriority(Box<dyn GaugeMetric>);

impl PriorityGaugeMetric for WithoutPriority {
    fn inc(&self, _: i32) {
        self.0.inc();
    }
    fn dec(&self, _: i32) {
        self.0.dec();
    }
}

/// A monotonically increasing count (`adds_total`, `retries_total`).
pub trait CounterMetric: Send + Sync {
    /// Adds one.
    fn inc(&self);
}

/// A gauge that moves by one (`depth`).
pub trait GaugeMetric: Send + Sync {
    /// Adds one.
    fn inc(&self);
    /// Subtracts one.
    fn dec(&self);
}

/// A gauge set to an absolute value (`unfinished_work_seconds`,
/// `longest_running_processor_seconds`).
pub trait SettableGaugeMetric: Send + Sync {
    /// Sets the gauge to `value`.
    fn set(&self, value: f64);
}

/// A distribution of observations in seconds (`queue_duration_seconds`,
/// `work_duration_seconds`).
pub trait HistogramMetric: Send + Sync {
    /// Records one observation.
    fn observe(&self, value: f64);
}

/// A metric that ignores every update; what [`MetricsProvider`]'s default methods return.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoopMetric;

impl CounterMetric for NoopMetric {
    fn inc(&self) {}
}

impl GaugeMetric for NoopMetric {
    fn inc(&self) {}
    fn dec(&self) {}
}

impl SettableGaugeMetric for NoopMetric {
    fn set(&self, _: f64) {}
}

impl HistogramMetric for NoopMetric {
    fn observe(&self, _: f64) {}
}

/// Creates the seven metrics of a named queue (client-go's `MetricsProvider`).
///
/// Each method is called once per queue, with the queue's name, when the queue is built.
/// Every method has a default that returns a [`NoopMetric`], so a provider implements only
/// the metrics it exports.
///
/// # Metrics
///
/// A queue records metrics only when its [`QueueConfig`](crate::QueueConfig) has a non-empty
/// name **and** a provider; otherwise it keeps no per-item timestamps at all, which is the
/// no-op default. The provider is asked once, at construction, for seven metric objects,
/// each labelled by the queue's name. Their meaning is exactly client-go's
/// (`util/workqueue/metrics.go`), and so are the Prometheus names a provider would give them:
///
/// | provider method | Prometheus name | kind | meaning |
/// |---|---|---|---|
/// | [`new_depth_metric`](MetricsProvider::new_depth_metric), or [`new_depth_metric_with_priority`](MetricsProvider::new_depth_metric_with_priority) if the provider implements it | `workqueue_depth` (with the label `priority`: controller-runtime's) | gauge | `inc` when an item becomes dirty (accepted by `add`, or due in the delaying queue), `dec` when `get` hands it out. An item added again while it is processed counts here although [`len`](crate::Queue::len) leaves it out. A re-add that raises an item's priority moves it to the new label. |
/// | [`new_adds_metric`](MetricsProvider::new_adds_metric) | `workqueue_adds_total` | counter | `inc` when an item becomes dirty. Adds of an item that is already dirty are not counted: five adds while it is processed count once. |
/// | [`new_latency_metric`](MetricsProvider::new_latency_metric) | `workqueue_queue_duration_seconds` | histogram | at `get`: seconds since the item became dirty (the first add, not the last; for a delayed item, its deadline). |
/// | [`new_work_duration_metric`](MetricsProvider::new_work_duration_metric) | `workqueue_work_duration_seconds` | histogram | at `done`: seconds since `get` handed the item out. |
/// | [`new_unfinished_work_seconds_metric`](MetricsProvider::new_unfinished_work_seconds_metric) | `workqueue_unfinished_work_seconds` | gauge | sum of the ages of the items being processed, set every 500 ms. |
/// | [`new_longest_running_processor_seconds_metric`](MetricsProvider::new_longest_running_processor_seconds_metric) | `workqueue_longest_running_processor_seconds` | gauge | age of the oldest item being processed, set every 500 ms. |
/// | [`new_retries_metric`](MetricsProvider::new_retries_metric) | `workqueue_retries_total` | counter | `inc` on every [`add_after`](crate::DelayingQueue::add_after) (and so every `add_rate_limited`) before shutdown, even with a zero delay. |
///
/// The two 500 ms gauges are set by a small task spawned on the tokio runtime that is current
/// when the queue is built; it stops when the queue shuts down or is dropped. A queue built
/// outside a runtime does not update them.
///
/// A delayed item becomes dirty at its deadline, as in client-go, whose waiting goroutine adds
/// it then: its queue duration runs from the deadline even when no `get` was waiting and the
/// queue noticed the item later. Its `inc` of depth and adds, though, happens when the queue
/// moves it into the FIFO (see [`DelayingQueue`](crate::DelayingQueue#timing)).
///
/// Durations are measured on [`tokio::time::Instant`], so they follow tokio's paused clock in
/// tests. Metric objects are called while the queue's lock is held: keep them cheap (an
/// atomic add, a histogram observation) and never call back into the queue from them.
///
/// # Example
///
/// A provider that counts adds across all queues:
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use workqueue::{CounterMetric, MetricsProvider, Queue, QueueConfig};
///
/// #[derive(Default)]
/// struct Adds(Arc<AtomicU64>);
///
/// struct AddsCounter(Arc<AtomicU64>);
///
/// impl CounterMetric for AddsCounter {
///     fn inc(&self) {
///         self.0.fetch_add(1, Ordering::Relaxed);
///     }
/// }
///
/// impl MetricsProvider for Adds {
///     fn new_adds_metric(&self, _name: &str) -> Box<dyn CounterMetric> {
///         Box::new(AddsCounter(Arc::clone(&self.0)))
///     }
/// }
///
/// let provider = Arc::new(Adds::default());
/// let total = Arc::clone(&provider.0);
/// let queue = Queue::with_config(QueueConfig::new().name("pods").metrics_provider(provider));
/// queue.add("a");
/// queue.add("a"); // already queued: not a new add
/// queue.add("b");
/// assert_eq!(total.load(Ordering::Relaxed), 2);
/// ```
pub trait MetricsProvider: Send + Sync {
    /// `workqueue_depth`: items waiting to be handed out.
    fn new_depth_metric(&self, name: &str) -> Box<dyn GaugeMetric> {
        let _ = name;
        Box::new(NoopMetric)
    }

    /// `workqueue_depth` with the `priority` label. By default, the gauge of
    /// [`new_depth_metric`](Self::new_depth_metric), without the label; implement this one
    /// to export depth per priority (and then `new_depth_metric` is not asked for).
    fn new_depth_metric_with_priority(&self, name: &str) -> Box<dyn PriorityGaugeMetric> {
        Box::new(WithoutPriority(self.new_depth_metric(name)))
    }

    /// `workqueue_adds_total`: items that became dirty.
    fn new_adds_metric(&self, name: &str) -> Box<dyn CounterMetric> {
        let _ = name;
        Box::new(NoopMetric)
    }

    /// `workqueue_queue_duration_seconds`: time from becoming dirty to `get`.
    fn new_latency_metric(&self, name: &str) -> Box<dyn HistogramMetric> {
        let _ = name;
        Box::new(NoopMetric)
    }

    /// `workqueue_work_duration_seconds`: time from `get` to `done`.
    fn new_work_duration_metric(&self, name: &str) -> Box<dyn HistogramMetric> {
        let _ = name;
        Box::new(NoopMetric)
    }

    /// `workqueue_unfinished_work_seconds`: summed age of items being processed.
    fn new_unfinished_work_seconds_metric(&self, name: &str) -> Box<dyn SettableGaugeMetric> {
        let _ = name;
        Box::new(NoopMetric)
    }

    /// `workqueue_longest_running_processor_seconds`: age of the oldest item being processed.
    fn new_longest_running_processor_seconds_metric(
        &self,
        name: &str,
    ) -> Box<dyn SettableGaugeMetric> {
        let _ = name;
        Box::new(NoopMetric)
    }

    /// `workqueue_retries_total`: calls to `add_after`.
    fn new_retries_metric(&self, name: &str) -> Box<dyn CounterMetric> {
        let _ = name;
        Box::new(NoopMetric)
    }
}

/// The metrics of one queue and the per-item timestamps they need. Lives under the queue lock.
pub(crate) struct QueueMetrics<T> {
    depth: Box<dyn PriorityGaugeMetric>,
    adds: Box<dyn CounterMetric>,
    latency: Box<dyn HistogramMetric>,
    work_duration: Box<dyn HistogramMetric>,
    unfinished_work: Box<dyn SettableGaugeMetric>,
    longest_running: Box<dyn SettableGaugeMetric>,
    retries: Box<dyn CounterMetric>,
    /// When each dirty item first became dirty. Set only if absent.
    add_times: HashMap<T, Instant>,
    /// When each item being processed was handed out.
    processing_start: HashMap<T, Instant>,
}

impl<T: Eq + Hash + Clone> QueueMetrics<T> {
    /// Asks `provider` for the seven metrics of the queue `name`.
    pub(crate) fn new(provider: &dyn MetricsProvider, name: &str) -> Self {
        Self {
            depth: provider.new_depth_metric_with_priority(name),
            adds: provider.new_adds_metric(name),
            latency: provider.new_latency_metric(name),
            work_duration: provider.new_work_duration_metric(name),
            unfinished_work: provider.new_unfinished_work_seconds_metric(name),
            longest_running: provider.new_longest_running_processor_seconds_metric(name),
            retries: provider.new_retries_metric(name),
            add_times: HashMap::new(),
            processing_start: HashMap::new(),
        }
    }

    /// `item` became dirty now, with `priority`.
    pub(crate) fn add(&mut self, item: &T, priority: i32) {
        self.add_at(item, Instant::now(), priority);
    }

    /// `item` became dirty at `since` (a delayed item: its deadline, which may be earlier
    /// than the moment the queue noticed), with `priority`. Its queue duration runs from
    /// `since`.
    pub(crate) fn add_at(&mut self, item: &T, since: Instant, priority: i32) {
        self.adds.inc();
        self.depth.inc(priority);
        if !self.add_times.contains_key(item) {
            self.add_times.insert(item.clone(), since);
        }
    }

    /// A dirty item was raised from priority `old` to `new`.
    pub(crate) fn reprioritize(&mut self, old: i32, new: i32) {
        self.depth.dec(old);
        self.depth.inc(new);
    }

    /// `item` was handed out by `get`, with `priority`.
    pub(crate) fn get(&mut self, item: &T, priority: i32) {
        self.depth.dec(priority);
        let now = Instant::now();
        self.processing_start.insert(item.clone(), now);
        if let Some(added) = self.add_times.remove(item) {
            self.latency.observe(seconds_between(added, now));
        }
    }

    /// `done` was called for `item`, which was being processed.
    pub(crate) fn done(&mut self, item: &T) {
        if let Some(started) = self.processing_start.remove(item) {
            self.work_duration
                .observe(seconds_between(started, Instant::now()));
        }
    }

    /// `add_after` was called.
    pub(crate) fn retry(&self) {
        self.retries.inc();
    }

    /// Sets the two in-flight gauges from the processing start times.
    pub(crate) fn update_unfinished_work(&self) {
        let now = Instant::now();
        let (mut total, mut oldest) = (0.0_f64, 0.0_f64);
        for &started in self.processing_start.values() {
            let age = seconds_between(started, now);
            total += age;
            oldest = oldest.max(age);
        }
        self.unfinished_work.set(total);
        self.longest_running.set(oldest);
    }
}

fn seconds_between(earlier: Instant, later: Instant) -> f64 {
    later.saturating_duration_since(earlier).as_secs_f64()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::time::advance;

    use super::*;
    use crate::test_util::RecordingProvider;
    use crate::{DelayingQueue, Queue, QueueConfig};

    const MS: Duration = Duration::from_millis(1);

    fn config(provider: &RecordingProvider) -> QueueConfig {
        QueueConfig::new()
            .name("pods")
            .metrics_provider(Arc::new(provider.clone()))
    }

    fn secs(d: Duration) -> f64 {
        d.as_secs_f64()
    }

    /// Lets spawned tasks (the unfinished-work updater) run.
    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn each_metric_is_created_once_with_the_queue_name() {
        let provider = RecordingProvider::default();
        let _queue = Queue::<u8>::with_config(config(&provider));
        assert_eq!(provider.snapshot().names, vec!["pods"; 7]);
    }

    #[tokio::test(start_paused = true)]
    async fn an_unnamed_queue_records_no_metrics() {
        let provider = RecordingProvider::default();
        let queue =
            Queue::with_config(QueueConfig::new().metrics_provider(Arc::new(provider.clone())));
        queue.add(1);
        assert_eq!(provider.snapshot(), Default::default());
    }

    #[tokio::test(start_paused = true)]
    async fn add_while_processing_counts_once_in_adds_and_depth() {
        let provider = RecordingProvider::default();
        let queue = Queue::with_config(config(&provider));
        queue.add("x");
        assert_eq!(
            (provider.snapshot().adds, provider.snapshot().depth),
            (1, 1)
        );
        assert_eq!(queue.get().await, Some("x"));
        assert_eq!(provider.snapshot().depth, 0);
        for _ in 0..5 {
            queue.add("x");
        }
        let seen = provider.snapshot();
        assert_eq!((seen.adds, seen.depth), (2, 1), "five re-adds count once");
        assert_eq!(queue.len(), 0, "but len leaves the dirty item out");
        queue.done(&"x");
        assert_eq!(
            (provider.snapshot().adds, provider.snapshot().depth),
            (2, 1)
        );
        assert_eq!(queue.get().await, Some("x"));
        queue.done(&"x");
        let seen = provider.snapshot();
        assert_eq!((seen.adds, seen.depth), (2, 0));
        assert_eq!((seen.latency.len(), seen.work_duration.len()), (2, 2));
    }

    #[tokio::test(start_paused = true)]
    async fn queue_duration_runs_from_the_first_add_to_get() {
        let provider = RecordingProvider::default();
        let queue = Queue::with_config(config(&provider));
        queue.add("x");
        advance(10 * MS).await;
        queue.add("x"); // deduplicated: does not restart the clock
        advance(5 * MS).await;
        assert_eq!(queue.get().await, Some("x"));
        assert_eq!(provider.snapshot().latency, [secs(15 * MS)]);
    }

    #[tokio::test(start_paused = true)]
    async fn work_duration_runs_from_get_to_done() {
        let provider = RecordingProvider::default();
        let queue = Queue::with_config(config(&provider));
        queue.add("x");
        assert_eq!(queue.get().await, Some("x"));
        advance(20 * MS).await;
        queue.done(&"x");
        queue.done(&"x"); // stray: no second observation
        assert_eq!(provider.snapshot().work_duration, [secs(20 * MS)]);
    }

    #[tokio::test(start_paused = true)]
    async fn unfinished_work_is_refreshed_every_500ms_until_shutdown() {
        let provider = RecordingProvider::default();
        let queue = Queue::with_config(config(&provider));
        queue.add("a");
        queue.add("b");
        assert_eq!(queue.get().await, Some("a"));
        advance(250 * MS).await;
        assert_eq!(queue.get().await, Some("b"));
        settle().await;
        assert_eq!(provider.snapshot().unfinished_work, None, "no tick yet");

        advance(250 * MS).await;
        settle().await;
        let seen = provider.snapshot();
        assert_eq!(seen.unfinished_work, Some(secs(750 * MS)), "0.5 s + 0.25 s");
        assert_eq!(seen.longest_running, Some(secs(500 * MS)));

        queue.done(&"a");
        advance(500 * MS).await;
        settle().await;
        let seen = provider.snapshot();
        assert_eq!(
            seen.unfinished_work,
            Some(secs(750 * MS)),
            "only b, 0.75 s old"
        );
        assert_eq!(seen.longest_running, Some(secs(750 * MS)));

        queue.shut_down();
        advance(500 * MS).await;
        settle().await;
        assert_eq!(
            provider.snapshot().unfinished_work,
            Some(secs(750 * MS)),
            "frozen"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn every_add_after_counts_a_retry_until_shutdown() {
        let provider = RecordingProvider::default();
        let queue = DelayingQueue::with_config(config(&provider));
        queue.add_after("x", Duration::ZERO);
        queue.add_after("y", 10 * MS);
        queue.add_after("y", 20 * MS); // merged, still a retry
        queue.add_after("x", 10 * MS); // already queued, still a retry
        assert_eq!(provider.snapshot().retries, 4);
        queue.add("z"); // not a retry
        queue.shut_down();
        queue.add_after("x", Duration::ZERO);
        assert_eq!(provider.snapshot().retries, 4);
    }

    #[tokio::test(start_paused = true)]
    async fn a_delayed_item_counts_as_added_when_it_comes_due() {
        let provider = RecordingProvider::default();
        let queue = DelayingQueue::with_config(config(&provider));
        queue.add_after("x", 10 * MS);
        assert_eq!(
            (provider.snapshot().adds, provider.snapshot().depth),
            (0, 0)
        );
        advance(10 * MS).await;
        assert_eq!(queue.len(), 1);
        assert_eq!(
            (provider.snapshot().adds, provider.snapshot().depth),
            (1, 1)
        );
        advance(5 * MS).await;
        assert_eq!(queue.get().await, Some("x"));
        assert_eq!(provider.snapshot().latency, [secs(5 * MS)]);
    }

    #[tokio::test(start_paused = true)]
    async fn queue_duration_of_a_delayed_item_runs_from_its_deadline_when_no_get_waits() {
        let provider = RecordingProvider::default();
        let queue = DelayingQueue::with_config(config(&provider));
        queue.add("busy");
        assert_eq!(queue.get().await, Some("busy")); // the only worker is busy: none parked
        queue.add_after("x", 10 * MS);
        advance(30 * MS).await; // due at 10 ms; nothing touches the queue until 30 ms
        assert_eq!(
            provider.snapshot().depth,
            0,
            "depth counts it only when the queue moves it"
        );
        queue.done(&"busy"); // the next operation moves it into the FIFO
        assert_eq!(provider.snapshot().depth, 1);
        advance(5 * MS).await;
        assert_eq!(queue.get().await, Some("x"));
        assert_eq!(
            provider.snapshot().latency,
            [0.0, secs(25 * MS)],
            "from the deadline (10 ms) to get (35 ms)"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_delayed_item_dirty_while_processing_counts_from_its_deadline() {
        let provider = RecordingProvider::default();
        let queue = DelayingQueue::with_config(config(&provider));
        queue.add("x");
        assert_eq!(queue.get().await, Some("x"));
        queue.add_after("x", 10 * MS); // fires while x is still being processed
        advance(40 * MS).await;
        queue.done(&"x"); // notices the deadline, then re-queues x
        advance(5 * MS).await;
        assert_eq!(queue.get().await, Some("x"));
        assert_eq!(provider.snapshot().latency, [0.0, secs(35 * MS)]);
    }

    #[tokio::test(start_paused = true)]
    async fn an_add_that_supersedes_a_delayed_request_counts_once() {
        let provider = RecordingProvider::default();
        let queue = DelayingQueue::with_config(config(&provider));
        queue.add_after("x", Duration::from_secs(10));
        queue.add("x");
        advance(Duration::from_secs(10)).await;
        assert_eq!(queue.len(), 1);
        assert_eq!(
            (provider.snapshot().adds, provider.snapshot().depth),
            (1, 1)
        );
    }

    #[test]
    fn default_provider_methods_return_no_op_metrics() {
        struct Nothing;
        impl MetricsProvider for Nothing {}
        let queue = Queue::with_config(
            QueueConfig::new()
                .name("quiet")
                .metrics_provider(Arc::new(Nothing)),
        );
        queue.add(1);
        assert_eq!(queue.len(), 1);
    }
}
