//! Test helpers: a waker that counts its wake-ups, one-shot polling, and a recording metrics provider.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use parking_lot::Mutex;

use crate::metrics::{
    CounterMetric, GaugeMetric, HistogramMetric, MetricsProvider, SettableGaugeMetric,
};

/// A waker that counts how often it was woken.
pub(crate) struct CountingWaker(AtomicUsize);

/// Shared view of a [`CountingWaker`]'s count.
#[derive(Clone)]
pub(crate) struct WakeCount(Arc<CountingWaker>);

impl WakeCount {
    /// Wake-ups so far.
    pub(crate) fn get(&self) -> usize {
        self.0.0.load(Ordering::SeqCst)
    }
}

impl CountingWaker {
    /// A new waker and the handle that reads its count.
    pub(crate) fn pair() -> (Waker, WakeCount) {
        let inner = Arc::new(CountingWaker(AtomicUsize::new(0)));
        (Waker::from(Arc::clone(&inner)), WakeCount(inner))
    }
}

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Polls `future` once with `waker`.
pub(crate) fn poll_with<F: Future + ?Sized>(future: Pin<&mut F>, waker: &Waker) -> Poll<F::Output> {
    future.poll(&mut Context::from_waker(waker))
}

/// Polls `future` once with a waker that does nothing.
pub(crate) fn poll_once<F: Future + ?Sized>(future: Pin<&mut F>) -> Poll<F::Output> {
    poll_with(future, Waker::noop())
}

/// Everything a [`RecordingProvider`] saw, per metric.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Recorded {
    pub(crate) depth: i64,
    pub(crate) adds: u64,
    pub(crate) latency: Vec<f64>,
    pub(crate) work_duration: Vec<f64>,
    pub(crate) unfinished_work: Option<f64>,
    pub(crate) longest_running: Option<f64>,
    pub(crate) retries: u64,
    /// The names the provider was asked to create metrics for.
    pub(crate) names: Vec<String>,
}

/// A metrics provider that records every update in memory.
#[derive(Clone, Default)]
pub(crate) struct RecordingProvider(pub(crate) Arc<Mutex<Recorded>>);

impl RecordingProvider {
    /// A copy of what was recorded so far.
    pub(crate) fn snapshot(&self) -> Recorded {
        self.0.lock().clone()
    }
}

struct Metric {
    record: Arc<Mutex<Recorded>>,
    kind: Kind,
}

#[derive(Clone, Copy)]
enum Kind {
    Depth,
    Adds,
    Latency,
    WorkDuration,
    Unfinished,
    Longest,
    Retries,
}

impl CounterMetric for Metric {
    fn inc(&self) {
        let mut r = self.record.lock();
        match self.kind {
            Kind::Adds => r.adds += 1,
            Kind::Retries => r.retries += 1,
            _ => unreachable!("not a counter"),
        }
    }
}

impl GaugeMetric for Metric {
    fn inc(&self) {
        self.record.lock().depth += 1;
    }
    fn dec(&self) {
        self.record.lock().depth -= 1;
    }
}

impl SettableGaugeMetric for Metric {
    fn set(&self, value: f64) {
        let mut r = self.record.lock();
        match self.kind {
            Kind::Unfinished => r.unfinished_work = Some(value),
            Kind::Longest => r.longest_running = Some(value),
            _ => unreachable!("not a settable gauge"),
        }
    }
}

impl HistogramMetric for Metric {
    fn observe(&self, value: f64) {
        let mut r = self.record.lock();
        match self.kind {
            Kind::Latency => r.latency.push(value),
            Kind::WorkDuration => r.work_duration.push(value),
            _ => unreachable!("not a histogram"),
        }
    }
}

impl RecordingProvider {
    fn metric(&self, name: &str, kind: Kind) -> Box<Metric> {
        self.0.lock().names.push(name.to_owned());
        Box::new(Metric {
            record: Arc::clone(&self.0),
            kind,
        })
    }
}

impl MetricsProvider for RecordingProvider {
    fn new_depth_metric(&self, name: &str) -> Box<dyn GaugeMetric> {
        self.metric(name, Kind::Depth)
    }
    fn new_adds_metric(&self, name: &str) -> Box<dyn CounterMetric> {
        self.metric(name, Kind::Adds)
    }
    fn new_latency_metric(&self, name: &str) -> Box<dyn HistogramMetric> {
        self.metric(name, Kind::Latency)
    }
    fn new_work_duration_metric(&self, name: &str) -> Box<dyn HistogramMetric> {
        self.metric(name, Kind::WorkDuration)
    }
    fn new_unfinished_work_seconds_metric(&self, name: &str) -> Box<dyn SettableGaugeMetric> {
        self.metric(name, Kind::Unfinished)
    }
    fn new_longest_running_processor_seconds_metric(
        &self,
        name: &str,
    ) -> Box<dyn SettableGaugeMetric> {
        self.metric(name, Kind::Longest)
    }
    fn new_retries_metric(&self, name: &str) -> Box<dyn CounterMetric> {
        self.metric(name, Kind::Retries)
    }
}

/// Awaits `future`, failing the test if it is still pending after an hour of (paused) time.
///
/// On paused time a lost wake-up would otherwise hang the test: when every task is stuck,
/// tokio jumps the clock to this timeout and the test fails at once.
pub(crate) async fn within<F: Future>(future: F) -> F::Output {
    tokio::time::timeout(std::time::Duration::from_secs(3600), future)
        .await
        .expect("stuck: a wake-up was lost")
}
