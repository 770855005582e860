//! Metrics with controller-runtime's names, kept in one registry per manager.
//!
//! A [`Metrics`] is one Prometheus registry holding every series a manager exports, under the
//! names controller-runtime and client-go use, so existing dashboards and alerts work:
//!
//! | family | kind | labels | fed by |
//! |---|---|---|---|
//! | `controller_runtime_reconcile_total` | counter | `controller`, `result` | [`ControllerMetrics::reconciled`] |
//! | `controller_runtime_reconcile_errors_total` | counter | `controller` | [`ControllerMetrics::error`] |
//! | `controller_runtime_terminal_reconcile_errors_total` | counter | `controller` | [`ControllerMetrics::terminal_error`] |
//! | `controller_runtime_reconcile_panics_total` | counter | `controller` | [`ControllerMetrics::panicked`] |
//! | `controller_runtime_reconcile_timeouts_total` | counter | `controller` | [`ControllerMetrics::timed_out`] |
//! | `controller_runtime_reconcile_time_seconds` | histogram | `controller` | [`ControllerMetrics::reconciled`] |
//! | `controller_runtime_max_concurrent_reconciles` | gauge | `controller` | [`Metrics::controller`] |
//! | `controller_runtime_active_workers` | gauge | `controller` | [`ControllerMetrics::worker_started`] / [`worker_stopped`](ControllerMetrics::worker_stopped) |
//! | `workqueue_depth` | as client-go, per priority (controller-runtime's priority queue) | `name`, `controller`, `priority` (after 25 distinct priorities: `exceeded_cardinality_limit`) | the queue, through [`Metrics::workqueue`] |
//! | `workqueue_adds_total`, `workqueue_queue_duration_seconds`, `workqueue_work_duration_seconds`, `workqueue_unfinished_work_seconds`, `workqueue_longest_running_processor_seconds`, `workqueue_retries_total` | as client-go | `name`, `controller` | the queue, through [`Metrics::workqueue`] |
//! | `rest_client_requests_total` | counter | `code`, `method`, `host` | the client, through [`Metrics::request_observer`] |
//! | `rest_client_request_duration_seconds` | histogram | `verb`, `host` | the client, through [`Metrics::request_observer`] |
//! | `leader_election_master_status` | gauge | `name` | [`LeaderStatus::set`] |
//! | `informer_queued_items`, `informer_processing_latency_seconds`, `informer_store_resource_version` | as client-go 1.36 | `name` (the informer's) | the cache's informers, through [`Metrics::informers`] |
//! | `informer_staleness_seconds` | gauge, computed when scraped | `name` | seconds since the informer last heard from the server (a list, a watch event, a bookmark) |
//! | `controller_runtime_cache_read_your_writes_timeouts_total` | counter | `kind` | cache reads that stopped waiting for the manager's own writes (see [`cache`](super::cache)) |
//! | `controller_runtime_cache_read_your_writes_wait_seconds` | histogram | none | how long cache reads waited for the manager's own writes |
//! | `process_cpu_seconds_total`, `process_resident_memory_bytes`, `process_virtual_memory_bytes`, `process_open_fds`, `process_max_fds`, `process_start_time_seconds` | as Prometheus' process collector | none | `/proc`, read at each scrape (Linux only) |
//!
//! Every series of a controller starts at zero when the controller is registered, as
//! controller-runtime does, so a rate over a counter that has not moved yet is 0, not absent.
//!
//! ```
//! use std::time::Duration;
//! use controller_runtime::runtime::metrics::{Metrics, ReconcileResult};
//!
//! let metrics = Metrics::new();
//! let memcached = metrics.controller("memcached", 1);
//! memcached.reconciled(ReconcileResult::Success, Duration::from_millis(12));
//! let text = metrics.encode();
//! assert!(text.contains(
//!     r#"controller_runtime_reconcile_total{controller="memcached",result="success"} 1"#
//! ));
//! ```

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use parking_lot::Mutex;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Metric, Registry};

pub use prometheus_client;

/// The `Content-Type` of [`Metrics::encode`]: the Prometheus text format, version 0.0.4.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// The `Content-Type` of [`Metrics::encode_openmetrics`]: OpenMetrics text, version 1.0.0.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// controller-runtime's buckets for `controller_runtime_reconcile_time_seconds`, in seconds.
const RECONCILE_BUCKETS: [f64; 40] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0,
];

/// client-go's buckets for `rest_client_request_duration_seconds`, in seconds.
const REQUEST_BUCKETS: [f64; 12] = [
    0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
];

fn reconcile_histogram() -> Histogram {
    Histogram::new(RECONCILE_BUCKETS)
}

/// controller-runtime's workqueue buckets: `ExponentialBuckets(10e-9, 10, 12)`, 10 ns to
/// 1000 s.
fn queue_histogram() -> Histogram {
    Histogram::new(exponential_buckets(10e-9, 10.0, 12))
}

fn request_histogram() -> Histogram {
    Histogram::new(REQUEST_BUCKETS)
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// A gauge holding a float (the workqueue's seconds gauges).
type FloatGauge = Gauge<f64, AtomicU64>;

// === label sets ===

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    controller: String,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    name: String,
    controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DepthLabels {
    name: String,
    controller: String,
    priority: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    code: String,
    method: String,
    host: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LatencyLabels {
    verb: String,
    host: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LeaseLabels {
    name: String,
}

// === Metrics ===

/// One manager's metrics: a Prometheus registry with controller-runtime's families. Cheap to
/// clone; clones share the registry.
///
/// Each `Metrics` has its own registry, so two managers in one process (or two tests) never
/// share series.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    /// Behind a lock only so [`Metrics::register`] can add families after construction;
    /// the families themselves are lock-free to update.
    registry: Mutex<Registry>,
    reconcile_total: Family<ResultLabels, Counter>,
    reconcile_errors: Family<ControllerLabels, Counter>,
    terminal_errors: Family<ControllerLabels, Counter>,
    reconcile_panics: Family<ControllerLabels, Counter>,
    reconcile_timeouts: Family<ControllerLabels, Counter>,
    reconcile_time: HistogramFamily<ControllerLabels>,
    max_concurrent: Family<ControllerLabels, Gauge>,
    active_workers: Family<ControllerLabels, Gauge>,
    queue: QueueFamilies,
    requests: Family<RequestLabels, Counter>,
    request_duration: HistogramFamily<LatencyLabels>,
    leader: Family<LeaseLabels, Gauge>,
    informers: InformerFamilies,
}

/// The seven workqueue families.
#[derive(Clone, Debug)]
struct QueueFamilies {
    depth: Family<DepthLabels, Gauge>,
    adds: Family<QueueLabels, Counter>,
    latency: HistogramFamily<QueueLabels>,
    work_duration: HistogramFamily<QueueLabels>,
    unfinished: Family<QueueLabels, FloatGauge>,
    longest_running: Family<QueueLabels, FloatGauge>,
    retries: Family<QueueLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// A registry with the controller, workqueue, REST client, leader election and process
    /// families registered (the first four empty until something is registered against
    /// them).
    pub fn new() -> Metrics {
        let mut registry = Registry::default();

        let reconcile_total = Family::default();
        registry.register(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            reconcile_total.clone(),
        );
        let reconcile_errors = Family::default();
        registry.register(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            reconcile_errors.clone(),
        );
        let terminal_errors = Family::default();
        registry.register(
            "controller_runtime_terminal_reconcile_errors",
            "Total number of terminal reconciliation errors per controller",
            terminal_errors.clone(),
        );
        let reconcile_panics = Family::default();
        registry.register(
            "controller_runtime_reconcile_panics",
            "Total number of reconciliation panics per controller",
            reconcile_panics.clone(),
        );
        let reconcile_timeouts = Family::default();
        registry.register(
            "controller_runtime_reconcile_timeouts",
            "Total number of reconciliation timeouts per controller",
            reconcile_timeouts.clone(),
        );
        let reconcile_time: HistogramFamily<_> =
            Family::new_with_constructor(reconcile_histogram as fn() -> Histogram);
        registry.register(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            reconcile_time.clone(),
        );
        let max_concurrent = Family::default();
        registry.register(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            max_concurrent.clone(),
        );
        let active_workers = Family::default();
        registry.register(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            active_workers.clone(),
        );

        let queue = QueueFamilies {
            depth: Family::default(),
            adds: Family::default(),
            latency: Family::new_with_constructor(queue_histogram as fn() -> Histogram),
            work_duration: Family::new_with_constructor(queue_histogram as fn() -> Histogram),
            unfinished: Family::default(),
            longest_running: Family::default(),
            retries: Family::default(),
        };
        registry.register(
            "workqueue_depth",
            "Current depth of workqueue",
            queue.depth.clone(),
        );
        registry.register(
            "workqueue_adds",
            "Total number of adds handled by workqueue",
            queue.adds.clone(),
        );
        registry.register(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            queue.latency.clone(),
        );
        registry.register(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes",
            queue.work_duration.clone(),
        );
        registry.register(
            "workqueue_unfinished_work_seconds",
            "How many seconds of work has been done that is in progress and hasn't been \
             observed by work_duration. Large values indicate stuck threads. One can deduce \
             the number of stuck threads by observing the rate at which this increases",
            queue.unfinished.clone(),
        );
        registry.register(
            "workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running",
            queue.longest_running.clone(),
        );
        registry.register(
            "workqueue_retries",
            "Total number of retries handled by workqueue",
            queue.retries.clone(),
        );

        let requests = Family::default();
        registry.register(
            "rest_client_requests",
            "Number of HTTP requests, partitioned by status code, method, and host",
            requests.clone(),
        );
        let request_duration: HistogramFamily<_> =
            Family::new_with_constructor(request_histogram as fn() -> Histogram);
        registry.register(
            "rest_client_request_duration_seconds",
            "Request latency in seconds. Broken down by verb, and host",
            request_duration.clone(),
        );

        let leader = Family::default();
        registry.register(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates \
             backup, 1 indicates master. 'name' is the string used to identify the lease. \
             Please make sure to group by name",
            leader.clone(),
        );

        let informers = InformerFamilies::register(&mut registry);
        registry.register_collector(Box::new(ProcessCollector));

        Metrics {
            inner: Arc::new(Inner {
                registry: Mutex::new(registry),
                reconcile_total,
                reconcile_errors,
                terminal_errors,
                reconcile_panics,
                reconcile_timeouts,
                reconcile_time,
                max_concurrent,
                active_workers,
                queue,
                requests,
                request_duration,
                leader,
                informers,
            }),
        }
    }

    /// The series of the controller `name`, all created now and at zero (as
    /// controller-runtime's `initMetrics`), with `controller_runtime_max_concurrent_reconciles`
    /// set to `max_concurrent`.
    ///
    /// Calling it again for the same name returns handles on the same series (and sets the
    /// maximum again).
    pub fn controller(&self, name: &str, max_concurrent: usize) -> ControllerMetrics {
        let inner = &self.inner;
        let labels = ControllerLabels {
            controller: name.to_owned(),
        };
        let result = |result: ReconcileResult| {
            inner.reconcile_total.get_or_create_owned(&ResultLabels {
                controller: name.to_owned(),
                result: result.as_label(),
            })
        };
        let max = inner.max_concurrent.get_or_create_owned(&labels);
        max.set(i64::try_from(max_concurrent).unwrap_or(i64::MAX));
        ControllerMetrics {
            inner: Arc::new(ControllerSeries {
                success: result(ReconcileResult::Success),
                error: result(ReconcileResult::Error),
                requeue: result(ReconcileResult::Requeue),
                requeue_after: result(ReconcileResult::RequeueAfter),
                errors: inner.reconcile_errors.get_or_create_owned(&labels),
                terminal_errors: inner.terminal_errors.get_or_create_owned(&labels),
                panics: inner.reconcile_panics.get_or_create_owned(&labels),
                timeouts: inner.reconcile_timeouts.get_or_create_owned(&labels),
                time: inner.reconcile_time.get_or_create_owned(&labels),
                active_workers: inner.active_workers.get_or_create_owned(&labels),
            }),
        }
    }

    /// A workqueue metrics provider labelling every series `name=<queue name>` and
    /// `controller=<controller>` (controller-runtime names the queue after the controller,
    /// so both labels carry the controller's name).
    ///
    /// Pass it to the queue with `QueueConfig::new().name(controller).metrics_provider(..)`;
    /// a queue without a name records nothing (client-go's rule).
    pub fn workqueue(&self, controller: &str) -> Arc<dyn workqueue::MetricsProvider> {
        Arc::new(WorkqueueProvider {
            families: self.inner.queue.clone(),
            controller: controller.to_owned(),
        })
    }

    /// An observer for [`ClientOptions::observer`](crate::client::ClientOptions::observer)
    /// that feeds `rest_client_requests_total{code,method,host}` and
    /// `rest_client_request_duration_seconds{verb,host}`.
    pub fn request_observer(&self) -> Arc<dyn crate::client::RequestObserver> {
        Arc::new(RestClientObserver {
            requests: self.inner.requests.clone(),
            duration: self.inner.request_duration.clone(),
        })
    }

    /// The `leader_election_master_status{name=<lease_name>}` gauge, created now at 0
    /// (client-go sets it off when an elector is built).
    pub fn leader_status(&self, lease_name: &str) -> LeaderStatus {
        let gauge = self.inner.leader.get_or_create_owned(&LeaseLabels {
            name: lease_name.to_owned(),
        });
        gauge.set(0);
        LeaderStatus { gauge }
    }

    /// An informer metrics provider labelling every series `name=<informer name>`; pass it
    /// in [`InformerOptions::metrics`](informer::InformerOptions::metrics). The manager's
    /// cache gives it to every informer it makes.
    pub fn informers(&self) -> Arc<dyn informer::metrics::MetricsProvider> {
        Arc::new(InformerProvider(self.inner.informers.clone()))
    }

    /// Registers a metric of the application's own in this registry, under `name` (a
    /// counter's name without its `_total`, which encoding adds).
    ///
    /// # Panics
    ///
    /// In builds with debug assertions, if a counter's name ends in `_total`
    /// (prometheus-client's check).
    pub fn register(&self, name: &str, help: &str, metric: impl Metric) {
        self.inner.registry.lock().register(name, help, metric);
    }

    /// The whole registry in the Prometheus text format (version 0.0.4), what
    /// controller-runtime serves by default; send it with [`CONTENT_TYPE`].
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail, and every family here encodes as text.
        let _ = prometheus_client::encoding::prometheus_text::encode(
            &mut out,
            &self.inner.registry.lock(),
        );
        out
    }

    /// The whole registry in OpenMetrics text (ending in `# EOF`), for scrapers that ask for
    /// it; send it with [`OPENMETRICS_CONTENT_TYPE`].
    pub fn encode_openmetrics(&self) -> String {
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.inner.registry.lock());
        out
    }
}

// === ControllerMetrics ===

/// How a reconcile ended, the `result` label of `controller_runtime_reconcile_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReconcileResult {
    /// Done; the key's backoff is forgotten (`result="success"`).
    Success,
    /// The reconciler returned an error (`result="error"`).
    Error,
    /// The reconciler asked to be requeued with backoff (`result="requeue"`).
    Requeue,
    /// The reconciler asked to run again after a delay (`result="requeue_after"`).
    RequeueAfter,
}

impl ReconcileResult {
    /// The label value controller-runtime uses.
    pub fn as_label(self) -> &'static str {
        match self {
            ReconcileResult::Success => "success",
            ReconcileResult::Error => "error",
            ReconcileResult::Requeue => "requeue",
            ReconcileResult::RequeueAfter => "requeue_after",
        }
    }
}

/// One controller's series. Cheap to clone; updates are atomic.
#[derive(Clone)]
pub struct ControllerMetrics {
    inner: Arc<ControllerSeries>,
}

struct ControllerSeries {
    success: Counter,
    error: Counter,
    requeue: Counter,
    requeue_after: Counter,
    errors: Counter,
    terminal_errors: Counter,
    panics: Counter,
    timeouts: Counter,
    time: Histogram,
    active_workers: Gauge,
}

impl fmt::Debug for ControllerMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ControllerMetrics").finish_non_exhaustive()
    }
}

impl ControllerMetrics {
    /// One reconcile ended with `result` after `elapsed`: counts it in
    /// `controller_runtime_reconcile_total{result}` and observes
    /// `controller_runtime_reconcile_time_seconds`.
    pub fn reconciled(&self, result: ReconcileResult, elapsed: Duration) {
        let s = &self.inner;
        match result {
            ReconcileResult::Success => s.success.inc(),
            ReconcileResult::Error => s.error.inc(),
            ReconcileResult::Requeue => s.requeue.inc(),
            ReconcileResult::RequeueAfter => s.requeue_after.inc(),
        };
        s.time.observe(elapsed.as_secs_f64());
    }

    /// Counts `controller_runtime_reconcile_errors_total` (every error, terminal or not).
    pub fn error(&self) {
        self.inner.errors.inc();
    }

    /// Counts `controller_runtime_terminal_reconcile_errors_total`.
    pub fn terminal_error(&self) {
        self.inner.terminal_errors.inc();
    }

    /// Counts `controller_runtime_reconcile_panics_total`.
    pub fn panicked(&self) {
        self.inner.panics.inc();
    }

    /// Counts `controller_runtime_reconcile_timeouts_total`: a reconcile ran past its
    /// controller's timeout and was dropped.
    pub fn timed_out(&self) {
        self.inner.timeouts.inc();
    }

    /// A worker started a reconcile: `controller_runtime_active_workers` + 1.
    pub fn worker_started(&self) {
        self.inner.active_workers.inc();
    }

    /// A worker finished a reconcile: `controller_runtime_active_workers` − 1.
    pub fn worker_stopped(&self) {
        self.inner.active_workers.dec();
    }
}

// === LeaderStatus ===

/// The `leader_election_master_status` gauge of one lease: 1 while this process leads.
#[derive(Clone, Debug)]
pub struct LeaderStatus {
    gauge: Gauge,
}

impl LeaderStatus {
    /// Sets the gauge to 1 (`true`) or 0.
    pub fn set(&self, leading: bool) {
        self.gauge.set(i64::from(leading));
    }

    /// Whether the gauge reads 1.
    pub fn get(&self) -> bool {
        self.gauge.get() == 1
    }
}

// === workqueue provider ===

/// Hands a queue its seven series from the shared families.
struct WorkqueueProvider {
    families: QueueFamilies,
    controller: String,
}

impl WorkqueueProvider {
    fn labels(&self, name: &str) -> QueueLabels {
        QueueLabels {
            name: name.to_owned(),
            controller: self.controller.clone(),
        }
    }
}

/// `workqueue_depth` of one queue, a series per priority, as controller-runtime caps them.
struct QueueDepth {
    family: Family<DepthLabels, Gauge>,
    labels: QueueLabels,
    /// The series seen so far (few: a linear scan beats hashing).
    series: Mutex<Vec<(i32, Gauge)>>,
}

impl QueueDepth {
    /// controller-runtime's `maxRecommendedUniquePriorities`.
    const MAX_PRIORITIES: usize = 25;

    fn gauge(&self, priority: i32) -> Gauge {
        let mut series = self.series.lock();
        if let Some((_, gauge)) = series.iter().find(|(p, _)| *p == priority) {
            return gauge.clone();
        }
        let label = if series.len() < Self::MAX_PRIORITIES {
            priority.to_string()
        } else {
            "exceeded_cardinality_limit".to_owned()
        };
        let gauge = self.family.get_or_create_owned(&DepthLabels {
            name: self.labels.name.clone(),
            controller: self.labels.controller.clone(),
            priority: label,
        });
        series.push((priority, gauge.clone()));
        gauge
    }
}

impl workqueue::PriorityGaugeMetric for QueueDepth {
    fn inc(&self, priority: i32) {
        self.gauge(priority).inc();
    }
    fn dec(&self, priority: i32) {
        self.gauge(priority).dec();
    }
}

struct QueueCounter(Counter);
struct QueueHistogram(Histogram);
struct QueueSettable(FloatGauge);

impl workqueue::CounterMetric for QueueCounter {
    fn inc(&self) {
        self.0.inc();
    }
}

impl workqueue::HistogramMetric for QueueHistogram {
    fn observe(&self, value: f64) {
        self.0.observe(value);
    }
}

impl workqueue::SettableGaugeMetric for QueueSettable {
    fn set(&self, value: f64) {
        self.0.set(value);
    }
}

impl workqueue::MetricsProvider for WorkqueueProvider {
    fn new_depth_metric_with_priority(
        &self,
        name: &str,
    ) -> Box<dyn workqueue::PriorityGaugeMetric> {
        Box::new(QueueDepth {
            family: self.families.depth.clone(),
            labels: self.labels(name),
            series: Mutex::new(Vec::new()),
        })
    }

    fn new_adds_metric(&self, name: &str) -> Box<dyn workqueue::CounterMetric> {
        let f = &self.families;
        Box::new(QueueCounter(f.adds.get_or_create_owned(&self.labels(name))))
    }

    fn new_latency_metric(&self, name: &str) -> Box<dyn workqueue::HistogramMetric> {
        let f = &self.families;
        Box::new(QueueHistogram(
            f.latency.get_or_create_owned(&self.labels(name)),
        ))
    }

    fn new_work_duration_metric(&self, name: &str) -> Box<dyn workqueue::HistogramMetric> {
        let f = &self.families;
        Box::new(QueueHistogram(
            f.work_duration.get_or_create_owned(&self.labels(name)),
        ))
    }

    fn new_unfinished_work_seconds_metric(
        &self,
        name: &str,
    ) -> Box<dyn workqueue::SettableGaugeMetric> {
        let f = &self.families;
        Box::new(QueueSettable(
            f.unfinished.get_or_create_owned(&self.labels(name)),
        ))
    }

    fn new_longest_running_processor_seconds_metric(
        &self,
        name: &str,
    ) -> Box<dyn workqueue::SettableGaugeMetric> {
        let f = &self.families;
        Box::new(QueueSettable(
            f.longest_running.get_or_create_owned(&self.labels(name)),
        ))
    }

    fn new_retries_metric(&self, name: &str) -> Box<dyn workqueue::CounterMetric> {
        let f = &self.families;
        Box::new(QueueCounter(
            f.retries.get_or_create_owned(&self.labels(name)),
        ))
    }
}

// === informer provider ===

/// client-go's buckets for `informer_processing_latency_seconds`, in seconds.
const INFORMER_PROCESSING_BUCKETS: [f64; 12] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

fn informer_histogram() -> Histogram {
    Histogram::new(INFORMER_PROCESSING_BUCKETS)
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InformerLabels {
    name: String,
}

/// The four informer families.
#[derive(Clone, Debug)]
struct InformerFamilies {
    queued: Family<InformerLabels, FloatGauge>,
    latency: HistogramFamily<InformerLabels>,
    resource_version: Family<InformerLabels, FloatGauge>,
    staleness: Family<InformerLabels, Staleness>,
}

impl InformerFamilies {
    fn register(registry: &mut Registry) -> InformerFamilies {
        let families = InformerFamilies {
            queued: Family::default(),
            latency: Family::new_with_constructor(informer_histogram as fn() -> Histogram),
            resource_version: Family::default(),
            staleness: Family::default(),
        };
        registry.register(
            "informer_queued_items",
            "Number of items currently queued in the FIFO",
            families.queued.clone(),
        );
        registry.register(
            "informer_processing_latency_seconds",
            "Time taken to process events after popping from the queue",
            families.latency.clone(),
        );
        registry.register(
            "informer_store_resource_version",
            "The 15 least significant digits of the resource version of the store",
            families.resource_version.clone(),
        );
        registry.register(
            "informer_staleness_seconds",
            "Seconds since the informer last heard from the API server: a list, a watch \
             event or a bookmark",
            families.staleness.clone(),
        );
        families
    }
}

/// Hands an informer its four series from the shared families.
#[derive(Debug)]
struct InformerProvider(InformerFamilies);

impl InformerProvider {
    fn labels(name: &str) -> InformerLabels {
        InformerLabels {
            name: name.to_owned(),
        }
    }
}

struct InformerGauge(FloatGauge);

impl informer::metrics::GaugeMetric for InformerGauge {
    fn set(&self, value: f64) {
        self.0.set(value);
    }
}

impl informer::metrics::HistogramMetric for QueueHistogram {
    fn observe(&self, value: f64) {
        self.0.observe(value);
    }
}

impl informer::metrics::StalenessMetric for Staleness {
    fn heard(&self, at: std::time::Instant) {
        Staleness::heard(self, at);
    }
}

impl informer::metrics::MetricsProvider for InformerProvider {
    fn new_queued_items_metric(&self, name: &str) -> Box<dyn informer::metrics::GaugeMetric> {
        let gauge = self.0.queued.get_or_create_owned(&Self::labels(name));
        Box::new(InformerGauge(gauge))
    }

    fn new_processing_latency_metric(
        &self,
        name: &str,
    ) -> Box<dyn informer::metrics::HistogramMetric> {
        let histogram = self.0.latency.get_or_create_owned(&Self::labels(name));
        Box::new(QueueHistogram(histogram))
    }

    fn new_store_resource_version_metric(
        &self,
        name: &str,
    ) -> Box<dyn informer::metrics::GaugeMetric> {
        let gauge = self
            .0
            .resource_version
            .get_or_create_owned(&Self::labels(name));
        Box::new(InformerGauge(gauge))
    }

    fn new_staleness_metric(&self, name: &str) -> Box<dyn informer::metrics::StalenessMetric> {
        Box::new(self.0.staleness.get_or_create_owned(&Self::labels(name)))
    }
}

/// A gauge of the seconds since the last [`heard`](Self::heard), worked out when scraped.
/// Starts as heard when it is made.
#[derive(Clone, Debug)]
struct Staleness(Arc<Mutex<std::time::Instant>>);

impl Default for Staleness {
    fn default() -> Self {
        Staleness(Arc::new(Mutex::new(std::time::Instant::now())))
    }
}

impl Staleness {
    fn heard(&self, at: std::time::Instant) {
        let mut last = self.0.lock();
        *last = (*last).max(at);
    }
}

impl prometheus_client::metrics::TypedMetric for Staleness {
    const TYPE: prometheus_client::metrics::MetricType =
        prometheus_client::metrics::MetricType::Gauge;
}

impl EncodeMetric for Staleness {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::MetricEncoder,
    ) -> Result<(), fmt::Error> {
        let seconds = self.0.lock().elapsed().as_secs_f64();
        encoder.encode_gauge(&seconds)
    }

    fn metric_type(&self) -> prometheus_client::metrics::MetricType {
        prometheus_client::metrics::MetricType::Gauge
    }
}

// === REST client observer ===

/// Feeds the `rest_client_*` families from the client's [`RequestObserver`] hook.
///
/// [`RequestObserver`]: crate::client::RequestObserver
#[derive(Debug)]
struct RestClientObserver {
    requests: Family<RequestLabels, Counter>,
    duration: HistogramFamily<LatencyLabels>,
}

impl crate::client::RequestObserver for RestClientObserver {
    fn observe(&self, method: &http::Method, host: &str, code: Option<u16>, latency: Duration) {
        let code = code.map_or_else(|| "<error>".to_owned(), |c| c.to_string());
        self.requests
            .get_or_create(&RequestLabels {
                code,
                method: method.as_str().to_owned(),
                host: host.to_owned(),
            })
            .inc();
        self.duration
            .get_or_create(&LatencyLabels {
                verb: method.as_str().to_owned(),
                host: host.to_owned(),
            })
            .observe(latency.as_secs_f64());
    }
}

// === process collector ===

/// Prometheus' process metrics, read from `/proc/self` at each scrape. Where `/proc` cannot
/// be read (not Linux), the metrics are left out.
#[derive(Debug)]
struct ProcessCollector;

/// Clock ticks a second in `/proc/<pid>/stat`: `USER_HZ`, 100 on every Linux architecture
/// (Prometheus' procfs assumes the same).
const USER_HZ: f64 = 100.0;

/// What one scrape reads about the process.
#[derive(Debug, Default, PartialEq)]
struct ProcessStats {
    cpu_seconds: Option<f64>,
    start_time_seconds: Option<f64>,
    resident_bytes: Option<u64>,
    virtual_bytes: Option<u64>,
    open_fds: Option<u64>,
    max_fds: Option<u64>,
}

impl ProcessStats {
    fn read() -> ProcessStats {
        let mut stats = ProcessStats::default();
        if let Ok(stat) = std::fs::read_to_string("/proc/self/stat") {
            let boot_time = std::fs::read_to_string("/proc/stat")
                .ok()
                .and_then(|s| parse_boot_time(&s));
            if let Some(fields) = parse_stat(&stat) {
                stats.cpu_seconds = Some((fields.utime + fields.stime) as f64 / USER_HZ);
                stats.start_time_seconds =
                    boot_time.map(|bt| bt as f64 + fields.start_ticks as f64 / USER_HZ);
            }
        }
        if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
            stats.resident_bytes = status_kib(&status, "VmRSS:").map(|k| k * 1024);
            stats.virtual_bytes = status_kib(&status, "VmSize:").map(|k| k * 1024);
        }
        if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
            stats.open_fds = Some(dir.count() as u64);
        }
        if let Ok(limits) = std::fs::read_to_string("/proc/self/limits") {
            stats.max_fds = parse_max_open_files(&limits);
        }
        stats
    }
}

/// The fields of `/proc/<pid>/stat` the collector needs.
#[derive(Debug, PartialEq)]
struct StatFields {
    utime: u64,
    stime: u64,
    start_ticks: u64,
}

/// Parses `/proc/<pid>/stat`. The command name (field 2) is in parentheses and may itself
/// hold spaces and parentheses, so fields are counted from the last `)`.
fn parse_stat(stat: &str) -> Option<StatFields> {
    let after = &stat[stat.rfind(')')? + 1..];
    // `after` starts at field 3 (state); utime is field 14, stime 15, starttime 22.
    let fields: Vec<&str> = after.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(StatFields {
        utime: field(14)?,
        stime: field(15)?,
        start_ticks: field(22)?,
    })
}

/// The `btime` line of `/proc/stat`: boot time in seconds since the epoch.
fn parse_boot_time(stat: &str) -> Option<u64> {
    stat.lines()
        .find_map(|l| l.strip_prefix("btime"))
        .and_then(|v| v.trim().parse().ok())
}

/// A `Key:   1234 kB` line of `/proc/<pid>/status`, in KiB.
fn status_kib(status: &str, key: &str) -> Option<u64> {
    let line = status.lines().find_map(|l| l.strip_prefix(key))?;
    line.split_whitespace().next()?.parse().ok()
}

/// The soft limit of `Max open files` in `/proc/<pid>/limits`.
fn parse_max_open_files(limits: &str) -> Option<u64> {
    let line = limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))?;
    line.split_whitespace().next()?.parse().ok()
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let stats = ProcessStats::read();
        if let Some(v) = stats.cpu_seconds {
            let m = ConstCounter::new(v);
            m.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds",
                None,
                m.metric_type(),
            )?)?;
        }
        let gauges: [(&str, &str, Option<f64>); 5] = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                stats.resident_bytes.map(|v| v as f64),
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                stats.virtual_bytes.map(|v| v as f64),
            ),
            (
                "process_open_fds",
                "Number of open file descriptors",
                stats.open_fds.map(|v| v as f64),
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors",
                stats.max_fds.map(|v| v as f64),
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds",
                stats.start_time_seconds,
            ),
        ];
        for (name, help, value) in gauges {
            if let Some(v) = value {
                let m = ConstGauge::new(v);
                m.encode(encoder.encode_descriptor(name, help, None, m.metric_type())?)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use workqueue::{QueueConfig, RateLimitingQueue};

    /// The value of the sample line that starts with `series ` (name and labels exactly).
    fn sample(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .map(|v| v.trim().parse().unwrap())
    }

    #[test]
    fn informer_series_carry_client_go_names_and_the_informer_name() {
        let metrics = Metrics::new();
        let provider = metrics.informers();
        let name = "configmaps.v1/demo";
        provider.new_queued_items_metric(name).set(3.0);
        provider.new_processing_latency_metric(name).observe(0.002);
        // 16 digits: client-go keeps the 15 least significant ones.
        provider
            .new_store_resource_version_metric(name)
            .set((1_234_567_890_123_456_u64 % 1_000_000_000_000_000) as f64);
        let staleness = provider.new_staleness_metric(name);
        staleness.heard(std::time::Instant::now());
        let text = metrics.encode();
        let labels = r#"{name="configmaps.v1/demo"}"#;
        let get = |family: &str| sample(&text, &format!("{family}{labels}"));
        assert_eq!(get("informer_queued_items"), Some(3.0), "{text}");
        assert_eq!(get("informer_processing_latency_seconds_count"), Some(1.0));
        assert_eq!(
            get("informer_store_resource_version"),
            Some(234_567_890_123_456.0)
        );
        let stale = get("informer_staleness_seconds").expect("the staleness gauge");
        assert!(stale >= 0.0, "{stale}");
        assert!(
            text.contains("# TYPE informer_staleness_seconds gauge"),
            "{text}"
        );
    }

    #[test]
    fn controller_series_start_at_zero_with_controller_runtime_names() {
        let metrics = Metrics::new();
        let _c = metrics.controller("memcached", 3);
        let text = metrics.encode();
        for result in ["success", "error", "requeue", "requeue_after"] {
            let series = format!(
                r#"controller_runtime_reconcile_total{{controller="memcached",result="{result}"}}"#
            );
            assert_eq!(sample(&text, &series), Some(0.0), "{series} in\n{text}");
        }
        for name in [
            "controller_runtime_reconcile_errors_total",
            "controller_runtime_terminal_reconcile_errors_total",
            "controller_runtime_reconcile_panics_total",
            "controller_runtime_reconcile_timeouts_total",
            "controller_runtime_active_workers",
            "controller_runtime_reconcile_time_seconds_count",
        ] {
            let series = format!(r#"{name}{{controller="memcached"}}"#);
            assert_eq!(sample(&text, &series), Some(0.0), "{series} in\n{text}");
        }
        assert_eq!(
            sample(
                &text,
                r#"controller_runtime_max_concurrent_reconciles{controller="memcached"}"#
            ),
            Some(3.0)
        );
        assert!(text.contains("# TYPE controller_runtime_reconcile_total counter"));
        assert!(text.contains("# TYPE controller_runtime_reconcile_time_seconds histogram"));
    }

    #[test]
    fn reconcile_outcomes_move_their_own_series() {
        let metrics = Metrics::new();
        let c = metrics.controller("memcached", 1);
        c.reconciled(ReconcileResult::Success, Duration::from_millis(3));
        c.reconciled(ReconcileResult::RequeueAfter, Duration::from_millis(70));
        c.reconciled(ReconcileResult::Error, Duration::from_secs(2));
        c.error();
        c.terminal_error();
        c.panicked();
        c.timed_out();
        c.worker_started();
        c.worker_started();
        c.worker_stopped();
        let text = metrics.encode();
        let total = |r: &str| {
            sample(
                &text,
                &format!(
                    r#"controller_runtime_reconcile_total{{controller="memcached",result="{r}"}}"#
                ),
            )
        };
        assert_eq!(total("success"), Some(1.0));
        assert_eq!(total("requeue_after"), Some(1.0));
        assert_eq!(total("error"), Some(1.0));
        assert_eq!(total("requeue"), Some(0.0));
        let one = |name: &str| sample(&text, &format!(r#"{name}{{controller="memcached"}}"#));
        assert_eq!(one("controller_runtime_reconcile_errors_total"), Some(1.0));
        assert_eq!(
            one("controller_runtime_terminal_reconcile_errors_total"),
            Some(1.0)
        );
        assert_eq!(one("controller_runtime_reconcile_panics_total"), Some(1.0));
        assert_eq!(
            one("controller_runtime_reconcile_timeouts_total"),
            Some(1.0)
        );
        assert_eq!(one("controller_runtime_active_workers"), Some(1.0));
        assert_eq!(
            one("controller_runtime_reconcile_time_seconds_count"),
            Some(3.0)
        );
        // 3 ms falls in the first bucket; 70 ms in le=0.1; 2 s in le=2.
        let bucket = |le: &str| {
            sample(
                &text,
                &format!(
                    r#"controller_runtime_reconcile_time_seconds_bucket{{controller="memcached",le="{le}"}}"#
                ),
            )
        };
        assert_eq!(bucket("0.005"), Some(1.0), "{text}");
        assert_eq!(bucket("0.1"), Some(2.0));
        assert_eq!(bucket("2"), Some(3.0));
        assert_eq!(bucket("60"), Some(3.0));
    }

    #[test]
    fn two_registries_never_share_series() {
        let a = Metrics::new();
        let b = Metrics::new();
        a.controller("only-in-a", 1)
            .reconciled(ReconcileResult::Success, Duration::ZERO);
        assert!(a.encode().contains("only-in-a"));
        assert!(!b.encode().contains("only-in-a"));
    }

    #[test]
    fn leader_status_starts_at_zero_and_flips() {
        let metrics = Metrics::new();
        let status = metrics.leader_status("86f835c3.example.com");
        let series = r#"leader_election_master_status{name="86f835c3.example.com"}"#;
        assert_eq!(sample(&metrics.encode(), series), Some(0.0));
        status.set(true);
        assert!(status.get());
        assert_eq!(sample(&metrics.encode(), series), Some(1.0));
        status.set(false);
        assert_eq!(sample(&metrics.encode(), series), Some(0.0));
    }

    #[test]
    fn request_observer_labels_as_client_go() {
        let metrics = Metrics::new();
        let observer = metrics.request_observer();
        let host = "127.0.0.1:6443";
        observer.observe(
            &http::Method::GET,
            host,
            Some(200),
            Duration::from_millis(20),
        );
        observer.observe(
            &http::Method::GET,
            host,
            Some(200),
            Duration::from_millis(2),
        );
        observer.observe(
            &http::Method::PUT,
            host,
            Some(409),
            Duration::from_millis(30),
        );
        observer.observe(&http::Method::POST, host, None, Duration::from_secs(1));
        let text = metrics.encode();
        let count = |code: &str, method: &str| {
            sample(
                &text,
                &format!(
                    r#"rest_client_requests_total{{code="{code}",method="{method}",host="{host}"}}"#
                ),
            )
        };
        assert_eq!(count("200", "GET"), Some(2.0), "{text}");
        assert_eq!(count("409", "PUT"), Some(1.0));
        assert_eq!(count("<error>", "POST"), Some(1.0));
        assert_eq!(
            sample(
                &text,
                &format!(
                    r#"rest_client_request_duration_seconds_bucket{{verb="GET",host="{host}",le="0.005"}}"#
                )
            ),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &text,
                &format!(
                    r#"rest_client_request_duration_seconds_count{{verb="GET",host="{host}"}}"#
                )
            ),
            Some(2.0)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn workqueue_depth_has_a_series_per_priority_up_to_25() {
        let metrics = Metrics::new();
        let queue: RateLimitingQueue<String> = RateLimitingQueue::with_config(
            workqueue::default_controller_rate_limiter(),
            QueueConfig::new()
                .name("pods")
                .metrics_provider(metrics.workqueue("pods")),
        );
        let depth = |priority: &str| {
            let series = format!(
                r#"workqueue_depth{{name="pods",controller="pods",priority="{priority}"}}"#
            );
            sample(&metrics.encode(), &series)
        };
        queue.add_with_priority("a".to_owned(), -100);
        queue.add_with_priority("b".to_owned(), -100);
        queue.add("c".to_owned());
        assert_eq!((depth("-100"), depth("0")), (Some(2.0), Some(1.0)));
        queue.add("a".to_owned()); // raised: moves to priority 0
        assert_eq!((depth("-100"), depth("0")), (Some(1.0), Some(2.0)));
        for priority in 1..=30 {
            queue.add_with_priority(format!("p{priority}"), priority);
        }
        assert_eq!(depth("23"), Some(1.0));
        assert_eq!(depth("24"), None, "the 26th priority seen");
        assert_eq!(depth("exceeded_cardinality_limit"), Some(7.0));
    }

    #[tokio::test(start_paused = true)]
    async fn workqueue_series_move_with_a_real_queue() {
        let metrics = Metrics::new();
        let queue: RateLimitingQueue<String> = RateLimitingQueue::with_config(
            workqueue::default_controller_rate_limiter(),
            QueueConfig::new()
                .name("memcached")
                .metrics_provider(metrics.workqueue("memcached")),
        );
        queue.add("default/a".to_owned());
        queue.add("default/b".to_owned());
        queue.add("default/a".to_owned());
        let labels = r#"{name="memcached",controller="memcached"}"#;
        let depth = r#"workqueue_depth{name="memcached",controller="memcached",priority="0"}"#;
        let text = metrics.encode();
        assert_eq!(sample(&text, depth), Some(2.0));
        assert_eq!(
            sample(&text, &format!("workqueue_adds_total{labels}")),
            Some(2.0)
        );

        let item = queue.get().await.unwrap();
        // Paused time: sleeping lets the queue's 500 ms gauge task run as the clock jumps.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let text = metrics.encode();
        assert_eq!(sample(&text, depth), Some(1.0));
        assert_eq!(
            sample(
                &text,
                &format!("workqueue_queue_duration_seconds_count{labels}")
            ),
            Some(1.0)
        );
        assert!(
            sample(
                &text,
                &format!("workqueue_longest_running_processor_seconds{labels}")
            )
            .unwrap()
                >= 1.0,
            "{text}"
        );
        queue.add_rate_limited(item.clone());
        queue.done(&item);
        let text = metrics.encode();
        assert_eq!(
            sample(&text, &format!("workqueue_retries_total{labels}")),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &text,
                &format!("workqueue_work_duration_seconds_count{labels}")
            ),
            Some(1.0)
        );
        assert!(text.contains("# TYPE workqueue_queue_duration_seconds histogram"));
        // controller-runtime's buckets: 10 ns to 1000 s by factors of 10.
        for le in ["1e-08", "0.001", "1", "1000", "+Inf"] {
            let series = format!(
                r#"workqueue_queue_duration_seconds_bucket{{name="memcached",controller="memcached",le="{le}"}}"#
            );
            assert!(sample(&text, &series).is_some(), "{series} in\n{text}");
        }
    }

    #[test]
    fn process_metrics_are_read_from_proc() {
        let text = Metrics::new().encode();
        if std::path::Path::new("/proc/self/stat").exists() {
            for name in [
                "process_cpu_seconds_total",
                "process_resident_memory_bytes",
                "process_open_fds",
                "process_max_fds",
                "process_start_time_seconds",
            ] {
                let v = sample(&text, name).unwrap_or_else(|| panic!("{name} in\n{text}"));
                assert!(v >= 0.0);
            }
            assert!(sample(&text, "process_resident_memory_bytes").unwrap() > 0.0);
            assert!(sample(&text, "process_open_fds").unwrap() >= 1.0);
        }
    }

    #[test]
    fn stat_parsing_counts_fields_after_the_command_name() {
        // A command name with spaces and parentheses must not shift the fields.
        let stat = "4242 (my (odd) cmd) S 1 4242 4242 0 -1 4194560 500 0 0 0 \
                    250 130 0 0 20 0 8 0 98765 123456789 2048 18446744073709551615";
        assert_eq!(
            parse_stat(stat),
            Some(StatFields {
                utime: 250,
                stime: 130,
                start_ticks: 98765
            })
        );
        assert_eq!(
            parse_boot_time("cpu 1 2 3\nbtime 1700000000\n"),
            Some(1_700_000_000)
        );
        assert_eq!(
            status_kib("Name:\tx\nVmSize:\t  2048 kB\nVmRSS:\t 512 kB\n", "VmRSS:"),
            Some(512)
        );
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1024                 524288               files\n";
        assert_eq!(parse_max_open_files(limits), Some(1024));
    }

    #[test]
    fn openmetrics_encoding_ends_with_eof() {
        let metrics = Metrics::new();
        metrics.controller("c", 1);
        let text = metrics.encode_openmetrics();
        assert!(text.ends_with("# EOF\n"));
        assert!(!metrics.encode().contains("# EOF"));
    }
}
