//! The `add_after` workloads: insert rate and heap bytes with many pending items, and how
//! late pending items reach a waiting worker.

use std::time::{Duration, Instant};

use workqueue::DelayingQueue;

use crate::cycle::Threads;
use crate::rng::SplitMix64;

/// The key added last, with a 1 ns delay, to mark the end of the inserts.
const BARRIER: u64 = u64::MAX;

/// How long the lateness worker gets to park in `get` before the inserts start.
const SETTLE: Duration = Duration::from_millis(10);

/// The insert workload: `items` distinct `u64` keys added with delays drawn from
/// `[low, low + span)` into an empty [`DelayingQueue`], none of them due during the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insert {
    /// Number of keys added (all pending at the end).
    pub items: usize,
    /// Shortest delay; keep it long enough that nothing comes due during the run.
    pub low: Duration,
    /// Spread of the delays.
    pub span: Duration,
    /// Seed of the delays (the Go peer draws the same ones from the same seed).
    pub seed: u64,
}

/// What one run of [`Insert`] measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InsertOutcome {
    /// Time from the first `add_after` until a `get` returned the barrier key added last.
    pub elapsed: Duration,
    /// Heap bytes held by the queue with every item pending (after the barrier is done).
    pub heap_bytes: usize,
    /// Number of pending items.
    pub items: usize,
}

impl InsertOutcome {
    /// `add_after` calls per second.
    pub fn inserts_per_sec(&self) -> f64 {
        self.items as f64 / self.elapsed.as_secs_f64()
    }

    /// Heap bytes per pending item.
    pub fn bytes_per_item(&self) -> f64 {
        self.heap_bytes as f64 / self.items as f64
    }
}

impl Insert {
    /// Runs the workload; `live_bytes` reads the heap in use (see [`alloc_counter::CountingAlloc`]).
    ///
    /// After the inserts, one more key is added with a 1 ns delay and the clock stops when
    /// `get` returns it. Our `add_after` is synchronous, so this costs one heap push and pop;
    /// client-go's hands items to a goroutine through a channel, and there the barrier is what
    /// makes the clock include that goroutine's heap inserts. `live_bytes` is read before
    /// the queue is built and again with every item pending.
    pub fn run(&self, live_bytes: &dyn Fn() -> usize) -> InsertOutcome {
        let delays = SplitMix64::new(self.seed).delays(self.items, self.low, self.span);
        Threads::Workers(2).runtime().block_on(async {
            let before = live_bytes();
            let queue = DelayingQueue::<u64>::new();
            let start = Instant::now();
            for (key, delay) in (0u64..).zip(&delays) {
                queue.add_after(key, *delay);
            }
            queue.add_after(BARRIER, Duration::from_nanos(1));
            let barrier = queue.get().await;
            let elapsed = start.elapsed();
            assert_eq!(barrier, Some(BARRIER), "only the barrier is due");
            queue.done(&BARRIER);
            let heap_bytes = live_bytes().saturating_sub(before);
            assert_eq!(queue.pending_delayed(), self.items);
            queue.shut_down();
            InsertOutcome {
                elapsed,
                heap_bytes,
                items: self.items,
            }
        })
    }
}

/// The firing-lateness workload: one worker waits in `get` while `items` keys are added
/// with delays drawn from `[low, low + span)`; for each key, the lateness is the time `get`
/// returned it minus its deadline (the clock read just before its `add_after`, plus its
/// delay).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lateness {
    /// Number of keys.
    pub items: usize,
    /// Shortest delay; long enough that every insert is done before the first deadline.
    pub low: Duration,
    /// Spread of the delays.
    pub span: Duration,
    /// Seed of the delays.
    pub seed: u64,
}

/// Percentiles of the lateness, nearest-rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LatenessOutcome {
    /// Median lateness.
    pub p50: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// Largest lateness.
    pub max: Duration,
    /// Number of items measured.
    pub items: usize,
}

impl Lateness {
    /// Runs the workload on a two-thread runtime.
    pub fn run(&self) -> LatenessOutcome {
        let delays = SplitMix64::new(self.seed).delays(self.items, self.low, self.span);
        let items = self.items;
        let (deadlines, received) = Threads::Workers(2).runtime().block_on(async move {
            let queue = DelayingQueue::<u64>::new();
            let worker = tokio::spawn({
                let queue = queue.clone();
                async move {
                    let mut received = Vec::with_capacity(items);
                    while received.len() < items {
                        let key = queue.get().await.expect("the queue is not shut down");
                        received.push((key, Instant::now()));
                        queue.done(&key);
                    }
                    received
                }
            });
            tokio::time::sleep(SETTLE).await;
            let mut deadlines = Vec::with_capacity(items);
            for (key, delay) in (0u64..).zip(&delays) {
                deadlines.push(Instant::now() + *delay);
                queue.add_after(key, *delay);
            }
            let received = worker.await.expect("worker task");
            queue.shut_down();
            (deadlines, received)
        });
        let lateness = received
            .iter()
            .map(|&(key, at)| at.saturating_duration_since(deadlines[key as usize]))
            .collect();
        LatenessOutcome::from_samples(lateness)
    }
}

impl LatenessOutcome {
    /// Percentiles of `samples` (nearest-rank); all zero if there are none.
    pub fn from_samples(mut samples: Vec<Duration>) -> Self {
        samples.sort_unstable();
        Self {
            p50: percentile(&samples, 50),
            p99: percentile(&samples, 99),
            max: samples.last().copied().unwrap_or_default(),
            items: samples.len(),
        }
    }
}

/// The nearest-rank `pct`th percentile of sorted `samples`: the smallest value with at least
/// `pct`% of the samples at or below it.
fn percentile(sorted: &[Duration], pct: usize) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (pct * sorted.len()).div_ceil(100).max(1);
    sorted[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_leaves_every_item_pending() {
        let outcome = Insert {
            items: 1_000,
            low: Duration::from_secs(60),
            span: Duration::from_secs(60),
            seed: 1,
        }
        .run(&|| 0);
        assert_eq!(outcome.items, 1_000);
        assert_eq!(outcome.heap_bytes, 0, "the fake reader counts nothing");
    }

    #[test]
    fn lateness_receives_every_item() {
        let outcome = Lateness {
            items: 200,
            low: Duration::from_millis(20),
            span: Duration::from_millis(20),
            seed: 2,
        }
        .run();
        assert_eq!(outcome.items, 200);
        assert!(outcome.p50 <= outcome.p99 && outcome.p99 <= outcome.max);
    }

    #[test]
    fn percentile_is_nearest_rank() {
        let samples: Vec<Duration> = (1..=100).map(Duration::from_micros).collect();
        assert_eq!(percentile(&samples, 50), Duration::from_micros(50));
        assert_eq!(percentile(&samples, 99), Duration::from_micros(99));
        assert_eq!(percentile(&samples[..1], 99), Duration::from_micros(1));
        assert_eq!(percentile(&[], 50), Duration::ZERO);
    }
}
