//! The informer's metrics hook: a [`MetricsProvider`] hands each informer its series (client-go's `InformerMetricsProvider` and `FIFOMetricsProvider`); there is none by default.
//!
//! The informer crate knows no metrics library. An application that exports metrics
//! implements [`MetricsProvider`] over its own (the root crate's `runtime::metrics` does,
//! with prometheus-client) and passes it in [`InformerOptions::metrics`](crate::InformerOptions::metrics).
//! Each informer asks the provider for its series once, when it is made, by its name
//! ([`ReflectorOptions::name`](crate::ReflectorOptions::name)):
//!
//! | series | kind | what the informer records |
//! |---|---|---|
//! | `informer_queued_items` | gauge | the queue's length (items; keys for the DeltaFIFO), after every change |
//! | `informer_processing_latency_seconds` | histogram | the time to apply one pop to the cache and hand out its notifications |
//! | `informer_store_resource_version` | gauge | the [store resource version](crate::SharedIndexInformer::store_resource_version), its 15 least significant digits |
//! | staleness | gauge, read when scraped | when the informer last heard from the server: a list, any watch event, a bookmark |
//!
//! The first three carry client-go 1.36's names; the staleness gauge is ours (client-go has
//! none): name it as you like, e.g. `informer_last_heard_seconds`.
//!
//! ```
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use informer::metrics::{GaugeMetric, MetricsProvider};
//!
//! /// Keeps the last queue length it was told.
//! #[derive(Debug, Default)]
//! struct Depth(Arc<AtomicU64>);
//!
//! struct Gauge(Arc<AtomicU64>);
//! impl GaugeMetric for Gauge {
//!     fn set(&self, value: f64) {
//!         self.0.store(value as u64, Ordering::Relaxed);
//!     }
//! }
//!
//! impl MetricsProvider for Depth {
//!     fn new_queued_items_metric(&self, _name: &str) -> Box<dyn GaugeMetric> {
//!         Box::new(Gauge(self.0.clone()))
//!     }
//! }
//!
//! let mut options = informer::InformerOptions::named("configmaps");
//! options.metrics = Some(Arc::new(Depth::default()));
//! ```

use std::fmt;
use std::time::Instant;

/// A gauge: a value that goes up and down.
pub trait GaugeMetric: Send + Sync {
    /// Sets the value.
    fn set(&self, value: f64);
}

/// A histogram of observed values.
pub trait HistogramMetric: Send + Sync {
    /// Records one value.
    fn observe(&self, value: f64);
}

/// When the informer last heard from the server; a provider reports the seconds since then
/// when it is scraped.
pub trait StalenessMetric: Send + Sync {
    /// The informer heard from the server at `at`. Called for the first time when the
    /// informer starts (it has heard nothing yet: it is stale since then), then for every
    /// list, watch event and bookmark.
    fn heard(&self, at: Instant);
}

/// Makes an informer's metrics; every method's default makes one that records nothing. See
/// the [module documentation](self).
pub trait MetricsProvider: Send + Sync + fmt::Debug {
    /// `informer_queued_items`: items waiting in the queue.
    fn new_queued_items_metric(&self, name: &str) -> Box<dyn GaugeMetric> {
        let _ = name;
        Box::new(Noop)
    }

    /// `informer_processing_latency_seconds`: the time to apply one pop.
    fn new_processing_latency_metric(&self, name: &str) -> Box<dyn HistogramMetric> {
        let _ = name;
        Box::new(Noop)
    }

    /// `informer_store_resource_version`: the store resource version, modulo 10^15.
    fn new_store_resource_version_metric(&self, name: &str) -> Box<dyn GaugeMetric> {
        let _ = name;
        Box::new(Noop)
    }

    /// The staleness gauge: seconds since the informer last heard from the server.
    fn new_staleness_metric(&self, name: &str) -> Box<dyn StalenessMetric> {
        let _ = name;
        Box::new(Noop)
    }
}

/// Records nothing.
struct Noop;

impl GaugeMetric for Noop {
    fn set(&self, _: f64) {}
}

impl HistogramMetric for Noop {
    fn observe(&self, _: f64) {}
}

impl StalenessMetric for Noop {
    fn heard(&self, _: Instant) {}
}

/// client-go's `informer_store_resource_version` keeps the 15 least significant digits, so
/// that the value survives the gauge's `f64`.
const RESOURCE_VERSION_DIGITS: u64 = 1_000_000_000_000_000;

/// One informer's series.
pub(crate) struct InformerMetrics {
    queued: Box<dyn GaugeMetric>,
    latency: Box<dyn HistogramMetric>,
    resource_version: Box<dyn GaugeMetric>,
    staleness: Box<dyn StalenessMetric>,
}

impl InformerMetrics {
    /// Asks `provider` for the series of the informer `name`.
    pub(crate) fn new(provider: &dyn MetricsProvider, name: &str) -> Self {
        InformerMetrics {
            queued: provider.new_queued_items_metric(name),
            latency: provider.new_processing_latency_metric(name),
            resource_version: provider.new_store_resource_version_metric(name),
            staleness: provider.new_staleness_metric(name),
        }
    }

    /// The informer heard from the server (or started: from then on it is stale).
    pub(crate) fn heard(&self) {
        self.staleness.heard(Instant::now());
    }

    /// The queue holds `len` items.
    pub(crate) fn queued(&self, len: usize) {
        self.queued.set(len as f64);
    }

    /// A pop that began at `started` is applied.
    pub(crate) fn processed(&self, started: Instant) {
        self.latency.observe(started.elapsed().as_secs_f64());
    }

    /// The store resource version is `rv`.
    pub(crate) fn store_resource_version(&self, rv: u64) {
        self.resource_version
            .set((rv % RESOURCE_VERSION_DIGITS) as f64);
    }
}
