//! The workqueue's criterion benches: add → get → done cycles with 1, 2, 4 and 8 producers
//! and as many workers, on unique and on repeating keys, beside the same cycle on a lock-free
//! MPMC channel (the ceiling a deduplicating queue can approach); and `add_after` with
//! 1,000,000 items pending (insert, and a delayed add that fires through the full heap).
//!
//! Each cycle sample runs `ADDS` adds through a fresh queue on a tokio runtime with two
//! worker threads (one thread for `single_thread`) and reports adds per second. Producers
//! yield to the scheduler every `YIELD_EVERY` adds, as `queue-bench` and its Go peer do, so
//! producers and workers interleave and the backlog stays small. Bytes per
//! pending item and firing lateness are not times, so criterion cannot report them:
//! `cargo run --release -p queue-bench` measures those, and `make bench-queue` compares
//! everything with client-go in one run (see BENCHMARKS.md).
//!
//! `cargo bench --bench workqueue` runs it all in a few minutes on two cores.

use std::hint::black_box;
use std::time::{Duration, Instant};

use controller_runtime::workqueue::{DelayingQueue, Queue};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use tokio::runtime::Runtime;

/// Adds per cycle sample.
const ADDS: u64 = 40_000;
/// Producers yield after this many adds.
const YIELD_EVERY: u64 = 1_000;
/// Distinct keys of the repeating-keys cycles.
const REPEAT_SPACE: u64 = 32;
/// Items pending in the `add_after` benches.
const PENDING: u64 = 1_000_000;

/// A tokio runtime with `threads` worker threads, or a current-thread one for `0`.
fn runtime(threads: usize) -> Runtime {
    let mut builder = if threads == 0 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder.worker_threads(threads);
        builder
    };
    builder.enable_time().build().expect("tokio runtime")
}

/// The keys producer `p` of `producers` adds.
fn keys(p: u64, producers: u64, repeat: bool) -> impl Iterator<Item = u64> + Send + 'static {
    let per = ADDS / producers;
    (p * per..(p + 1) * per).map(move |i| if repeat { i % REPEAT_SPACE } else { i })
}

/// One cycle through a fresh queue: workers wait in `get`, producers add, the queue shuts
/// down once every add is made, and the time runs until the last worker is done.
async fn queue_cycle(n: u64, repeat: bool) -> Duration {
    let queue = Queue::<u64>::new();
    let workers: Vec<_> = (0..n)
        .map(|_| {
            let queue = queue.clone();
            tokio::spawn(async move {
                while let Some(key) = queue.get().await {
                    queue.done(black_box(&key));
                }
            })
        })
        .collect();
    tokio::task::yield_now().await;
    let start = Instant::now();
    let producers: Vec<_> = (0..n)
        .map(|p| {
            let queue = queue.clone();
            tokio::spawn(async move {
                for (i, key) in (1..).zip(keys(p, n, repeat)) {
                    queue.add(key);
                    if i % YIELD_EVERY == 0 {
                        tokio::task::yield_now().await;
                    }
                }
            })
        })
        .collect();
    for producer in producers {
        producer.await.expect("producer");
    }
    queue.shut_down();
    for worker in workers {
        worker.await.expect("worker");
    }
    start.elapsed()
}

/// The same cycle on an unbounded `async_channel`: send, receive, no dedup, no `done`.
async fn channel_cycle(n: u64) -> Duration {
    let (tx, rx) = async_channel::unbounded::<u64>();
    let workers: Vec<_> = (0..n)
        .map(|_| {
            let rx = rx.clone();
            tokio::spawn(async move {
                while let Ok(key) = rx.recv().await {
                    black_box(key);
                }
            })
        })
        .collect();
    drop(rx);
    tokio::task::yield_now().await;
    let start = Instant::now();
    let producers: Vec<_> = (0..n)
        .map(|p| {
            let tx = tx.clone();
            tokio::spawn(async move {
                for (i, key) in (1..).zip(keys(p, n, false)) {
                    tx.try_send(key).expect("open channel");
                    if i % YIELD_EVERY == 0 {
                        tokio::task::yield_now().await;
                    }
                }
            })
        })
        .collect();
    drop(tx);
    for producer in producers {
        producer.await.expect("producer");
    }
    for worker in workers {
        worker.await.expect("worker");
    }
    start.elapsed()
}

fn cycles(c: &mut Criterion) {
    let multi = runtime(2);
    for (group_name, repeat) in [("cycle/unique", false), ("cycle/repeat", true)] {
        let mut group = c.benchmark_group(group_name);
        group.throughput(Throughput::Elements(ADDS));
        for n in [1, 2, 4, 8] {
            group.bench_with_input(BenchmarkId::new("queue", n), &n, |b, &n| {
                b.iter_custom(|iters| {
                    (0..iters)
                        .map(|_| multi.block_on(queue_cycle(n, repeat)))
                        .sum()
                });
            });
            if !repeat {
                group.bench_with_input(BenchmarkId::new("channel", n), &n, |b, &n| {
                    b.iter_custom(|iters| {
                        (0..iters).map(|_| multi.block_on(channel_cycle(n))).sum()
                    });
                });
            }
        }
        group.finish();
    }

    let single = runtime(0);
    let mut group = c.benchmark_group("cycle/single_thread");
    group.throughput(Throughput::Elements(ADDS));
    group.bench_function("queue", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| single.block_on(queue_cycle(1, false)))
                .sum()
        });
    });
    group.bench_function("channel", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| single.block_on(channel_cycle(1))).sum());
    });
    group.finish();
}

/// A delaying queue holding `PENDING` items due an hour or more from now, and the next
/// unused key.
fn pending_queue(seed: &mut u64) -> (DelayingQueue<u64>, u64) {
    let queue = DelayingQueue::new();
    for key in 0..PENDING {
        queue.add_after(key, far_delay(seed));
    }
    (queue, PENDING)
}

/// A delay of one to two hours (xorshift; the values only need to be spread out).
fn far_delay(seed: &mut u64) -> Duration {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    Duration::from_secs(3_600) + Duration::from_nanos(*seed % 3_600_000_000_000)
}

fn add_after(c: &mut Criterion) {
    let rt = runtime(0);
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut group = c.benchmark_group("add_after/1m_pending");
    group.throughput(Throughput::Elements(1));

    // Insert: a new key with a random far deadline. The queue is rebuilt (untimed) once it
    // holds twice `PENDING`, so every insert sees between one and two million pending.
    let (mut queue, mut next) = rt.block_on(async { pending_queue(&mut seed) });
    group.bench_function("insert", |b| {
        b.iter_custom(|iters| {
            let mut elapsed = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                if next >= 2 * PENDING {
                    drop(std::mem::replace(&mut queue, DelayingQueue::new()));
                    (queue, next) = rt.block_on(async { pending_queue(&mut seed) });
                }
                let batch = left.min(2 * PENDING - next);
                let delays: Vec<Duration> = (0..batch).map(|_| far_delay(&mut seed)).collect();
                let start = Instant::now();
                for delay in delays {
                    queue.add_after(next, delay);
                    next += 1;
                }
                elapsed += start.elapsed();
                left -= batch;
            }
            elapsed
        });
    });

    // Fire: `add_after` with a 1 ns delay, then `get` and `done`: the item goes through the
    // heap above a million far entries and comes out as soon as it is due.
    let (queue, _) = rt.block_on(async { pending_queue(&mut seed) });
    group.bench_function("fire", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for key in 0..iters {
                    let key = u64::MAX - key;
                    queue.add_after(key, Duration::from_nanos(1));
                    let got = queue.get().await.expect("not shut down");
                    queue.done(black_box(&got));
                }
                start.elapsed()
            })
        });
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = cycles, add_after
}
criterion_main!(benches);
