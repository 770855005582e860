//! The add → get → done workloads: `P` producers and `W` workers on one queue, and the same
//! cycle on a lock-free MPMC channel as the ceiling.

use std::fmt;
use std::hint::black_box;
use std::time::{Duration, Instant};

use tokio::runtime::Runtime;
use workqueue::Queue;

/// How long the workers get to park in `get` before the clock starts.
const SETTLE: Duration = Duration::from_millis(10);

/// Which keys the producers add.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keys {
    /// Every key is added once: no dedup, every add is processed.
    Unique,
    /// Keys are taken modulo `space`: most adds find their key already queued or being
    /// processed, so the queue deduplicates them.
    Repeating {
        /// Number of distinct keys.
        space: u64,
    },
    /// Unique keys, odd ones added at priority −100 (an initial list) and even ones at 0
    /// (live changes): the queue as a controller runs it by default. The Go peer runs
    /// controller-runtime's priority queue.
    Prioritised,
}

/// The priority [`Keys::Prioritised`] adds `key` with.
pub fn priority_of(key: u64) -> i32 {
    if key % 2 == 1 { -100 } else { 0 }
}

/// A producer: `add`s every key, yielding to the scheduler every `every` adds (0: never).
async fn produce(keys: impl Iterator<Item = u64>, every: u64, mut add: impl FnMut(u64)) {
    for (i, key) in (1u64..).zip(keys) {
        add(key);
        if every != 0 && i % every == 0 {
            tokio::task::yield_now().await;
        }
    }
}

/// The threads a workload runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Threads {
    /// A tokio `current_thread` runtime: producers and workers share one thread.
    One,
    /// A multi-threaded tokio runtime with this many worker threads.
    Workers(usize),
}

impl Threads {
    /// A runtime with these threads and the time driver.
    pub fn runtime(self) -> Runtime {
        let mut builder = match self {
            Threads::One => tokio::runtime::Builder::new_current_thread(),
            Threads::Workers(n) => {
                let mut builder = tokio::runtime::Builder::new_multi_thread();
                builder.worker_threads(n);
                builder
            }
        };
        builder
            .enable_time()
            .build()
            .expect("building a tokio runtime")
    }
}

/// One add → get → done workload.
///
/// Producer `p` adds keys `p·n .. (p+1)·n` (taken modulo the key space for
/// [`Keys::Repeating`]), where `n = adds / producers`; each worker loops on `get` and `done`
/// until the queue is shut down and empty. The clock runs from the moment the producers are
/// started (workers already parked in `get`) until the last worker has finished, so it
/// covers every add and the processing of everything they queued.
///
/// Producers yield to the scheduler every `yield_every` adds, like a task that awaits its
/// next event. Without it a tokio task never yields, so on a single thread (or when the
/// woken worker waits in the producer thread's LIFO slot) all adds would happen before any
/// get, and the run would measure a hash table holding every key instead of the cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cycle {
    /// Which keys are added.
    pub keys: Keys,
    /// Number of producer tasks.
    pub producers: usize,
    /// Number of worker tasks.
    pub workers: usize,
    /// Total number of adds, split evenly between the producers (rounded down).
    pub adds: u64,
    /// The runtime the tasks run on.
    pub threads: Threads,
    /// Producers yield to the scheduler after every `yield_every` adds (0: never).
    pub yield_every: u64,
}

/// What one run of a [`Cycle`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CycleOutcome {
    /// Adds made (the throughput figures count these).
    pub adds: u64,
    /// Items the workers received: equal to `adds` for unique keys, fewer when repeating
    /// keys were deduplicated.
    pub processed: u64,
    /// Wall time from starting the producers to the last worker finishing.
    pub elapsed: Duration,
}

impl CycleOutcome {
    /// Adds per second.
    pub fn adds_per_sec(&self) -> f64 {
        self.adds as f64 / self.elapsed.as_secs_f64()
    }
}

impl Cycle {
    /// The adds each producer makes.
    pub fn adds_per_producer(&self) -> u64 {
        self.adds / self.producers as u64
    }

    /// The keys producer `p` adds, in order.
    pub fn keys_of(&self, p: usize) -> impl Iterator<Item = u64> + Send + 'static {
        let n = self.adds_per_producer();
        let keys = self.keys;
        (p as u64 * n..(p as u64 + 1) * n).map(move |i| match keys {
            Keys::Unique | Keys::Prioritised => i,
            Keys::Repeating { space } => i % space,
        })
    }

    /// Runs the workload on this crate's [`Queue`].
    pub fn run_queue(&self) -> CycleOutcome {
        let spec = *self;
        spec.threads.runtime().block_on(async move {
            let queue = Queue::<u64>::new();
            let workers: Vec<_> = (0..spec.workers)
                .map(|_| {
                    let queue = queue.clone();
                    tokio::spawn(async move {
                        let mut processed = 0u64;
                        while let Some(key) = queue.get().await {
                            black_box(key);
                            queue.done(&key);
                            processed += 1;
                        }
                        processed
                    })
                })
                .collect();
            tokio::time::sleep(SETTLE).await;

            let start = Instant::now();
            let producers: Vec<_> = (0..spec.producers)
                .map(|p| {
                    let queue = queue.clone();
                    let keys = spec.keys_of(p);
                    let every = spec.yield_every;
                    let prioritised = spec.keys == Keys::Prioritised;
                    tokio::spawn(async move {
                        // Two loops, so that the plain rows' loop holds a plain add only.
                        if prioritised {
                            produce(keys, every, |key| {
                                queue.add_with_priority(key, priority_of(key));
                            })
                            .await;
                        } else {
                            produce(keys, every, |key| queue.add(key)).await;
                        }
                    })
                })
                .collect();
            for producer in producers {
                producer.await.expect("producer task");
            }
            queue.shut_down();
            let mut processed = 0;
            for worker in workers {
                processed += worker.await.expect("worker task");
            }
            CycleOutcome {
                adds: spec.adds_per_producer() * spec.producers as u64,
                processed,
                elapsed: start.elapsed(),
            }
        })
    }

    /// Runs the same cycle on an unbounded [`async_channel`]: producers send, workers
    /// receive, nothing is deduplicated and there is no `done`. Closing the channel (every
    /// sender dropped) plays the part of `shut_down`.
    pub fn run_channel(&self) -> CycleOutcome {
        let spec = *self;
        spec.threads.runtime().block_on(async move {
            let (tx, rx) = async_channel::unbounded::<u64>();
            let workers: Vec<_> = (0..spec.workers)
                .map(|_| {
                    let rx = rx.clone();
                    tokio::spawn(async move {
                        let mut processed = 0u64;
                        while let Ok(key) = rx.recv().await {
                            black_box(key);
                            processed += 1;
                        }
                        processed
                    })
                })
                .collect();
            drop(rx);
            tokio::time::sleep(SETTLE).await;

            let start = Instant::now();
            let producers: Vec<_> = (0..spec.producers)
                .map(|p| {
                    let tx = tx.clone();
                    let keys = spec.keys_of(p);
                    let every = spec.yield_every;
                    tokio::spawn(async move {
                        for (i, key) in (1u64..).zip(keys) {
                            tx.try_send(key).expect("the channel is open and unbounded");
                            if every != 0 && i % every == 0 {
                                tokio::task::yield_now().await;
                            }
                        }
                    })
                })
                .collect();
            drop(tx);
            for producer in producers {
                producer.await.expect("producer task");
            }
            let mut processed = 0;
            for worker in workers {
                processed += worker.await.expect("worker task");
            }
            CycleOutcome {
                adds: spec.adds_per_producer() * spec.producers as u64,
                processed,
                elapsed: start.elapsed(),
            }
        })
    }
}

impl fmt::Display for Cycle {
    /// The workload's name, shared with the Go peer: `cycle/unique/p4w4`,
    /// `cycle/repeat/p1w1`, `cycle/unique/1thread`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys = match self.keys {
            Keys::Unique => "unique",
            Keys::Repeating { .. } => "repeat",
            Keys::Prioritised => "prio",
        };
        match self.threads {
            Threads::One => write!(f, "cycle/{keys}/1thread"),
            Threads::Workers(_) => write!(f, "cycle/{keys}/p{}w{}", self.producers, self.workers),
        }
    }
}

/// The parameters shared by the throughput workloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CycleParams {
    /// Adds per unique-keys workload.
    pub unique_adds: u64,
    /// Adds per repeating-keys workload (these run faster, so they get more).
    pub repeat_adds: u64,
    /// Key space of the repeating-keys workloads.
    pub repeat_space: u64,
    /// Worker threads of the multi-threaded runtime.
    pub threads: usize,
    /// Producers yield after this many adds (0: never).
    pub yield_every: u64,
}

/// The throughput workloads, in report order: unique then repeating keys with 1, 2, 4 and
/// 8 producers and as many workers on `threads` worker threads, then unique keys with one
/// producer and one worker on a single thread, then prioritised keys with 1 and 2
/// producers and as many workers.
pub fn cycle_workloads(params: CycleParams) -> Vec<Cycle> {
    let mut out = Vec::new();
    let repeating = Keys::Repeating {
        space: params.repeat_space,
    };
    for (keys, adds) in [
        (Keys::Unique, params.unique_adds),
        (repeating, params.repeat_adds),
    ] {
        for n in [1, 2, 4, 8] {
            out.push(Cycle {
                keys,
                producers: n,
                workers: n,
                adds,
                threads: Threads::Workers(params.threads),
                yield_every: params.yield_every,
            });
        }
    }
    out.push(Cycle {
        keys: Keys::Unique,
        producers: 1,
        workers: 1,
        adds: params.unique_adds,
        threads: Threads::One,
        yield_every: params.yield_every,
    });
    for n in [1, 2] {
        out.push(Cycle {
            keys: Keys::Prioritised,
            producers: n,
            workers: n,
            adds: params.unique_adds,
            threads: Threads::Workers(params.threads),
            yield_every: params.yield_every,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(keys: Keys, n: usize, threads: Threads) -> Cycle {
        Cycle {
            keys,
            producers: n,
            workers: n,
            adds: 10_000,
            threads,
            yield_every: 100,
        }
    }

    #[test]
    fn unique_keys_are_each_processed_once() {
        for n in [1, 2, 4, 8] {
            let outcome = spec(Keys::Unique, n, Threads::Workers(2)).run_queue();
            assert_eq!(outcome.adds, 10_000);
            assert_eq!(outcome.processed, 10_000, "{n} producers and workers");
        }
    }

    #[test]
    fn repeating_keys_are_processed_at_least_once_and_at_most_once_per_add() {
        let outcome = spec(Keys::Repeating { space: 64 }, 4, Threads::Workers(2)).run_queue();
        assert_eq!(outcome.adds, 10_000);
        assert!((64..=10_000).contains(&outcome.processed), "{outcome:?}");
    }

    #[test]
    fn single_thread_cycle_processes_everything() {
        let outcome = spec(Keys::Unique, 1, Threads::One).run_queue();
        assert_eq!(outcome.processed, 10_000);
    }

    #[test]
    fn channel_delivers_every_add() {
        for threads in [Threads::One, Threads::Workers(2)] {
            let outcome = spec(Keys::Repeating { space: 8 }, 2, threads).run_channel();
            assert_eq!(outcome.processed, 10_000);
        }
    }

    #[test]
    fn producers_split_the_key_range() {
        let cycle = spec(Keys::Unique, 4, Threads::One);
        let keys: Vec<u64> = (0..4).flat_map(|p| cycle.keys_of(p)).collect();
        assert_eq!(keys, (0..10_000).collect::<Vec<_>>());
    }

    #[test]
    fn workload_names_match_the_go_peer() {
        let names: Vec<String> = cycle_workloads(CycleParams {
            unique_adds: 100,
            repeat_adds: 1_000,
            repeat_space: 8,
            threads: 2,
            yield_every: 0,
        })
        .iter()
        .map(ToString::to_string)
        .collect();
        assert_eq!(names[0], "cycle/unique/p1w1");
        assert_eq!(names[7], "cycle/repeat/p8w8");
        assert_eq!(names[8], "cycle/unique/1thread");
        assert_eq!(names[10], "cycle/prio/p2w2");
    }

    #[test]
    fn prioritised_keys_are_each_processed_once() {
        let outcome = spec(Keys::Prioritised, 2, Threads::Workers(2)).run_queue();
        assert_eq!((outcome.adds, outcome.processed), (10_000, 10_000));
    }
}
