//! The workqueue's criterion benches: add → get → done cycles with 1, 2, 4 and 8 producers
//! and as many workers, on unique and on repeating keys, beside the same cycle on a lock-free
//! MPMC channel (the ceiling a deduplicating queue can approach); and `add_after` with
//! 1,000,000 items pending: insert, a delayed add that fires through the full heap, how late
//! items come due (`lateness`), and the heap bytes per pending item.
//!
//! Each cycle sample runs `ADDS` adds through a fresh queue on a tokio runtime with two
//! worker threads (one thread for `single_thread`) and reports adds per second. Producers
//! yield to the scheduler every `YIELD_EVERY` adds, as `queue-bench` and its Go peer do, so
//! producers and workers interleave and the backlog stays small.
//!
//! Two figures are not the time of an operation, and are reported as follows:
//!
//! * **`add_after/1m_pending/lateness`** reports, as its "time per iteration", the *mean
//!   lateness* of the items of a sample: one worker waits in `get` on a queue holding
//!   `PENDING` far items; the sample adds `iters` keys with deadlines `LATENESS_LEAD` +
//!   `LATENESS_STEP`·i from now, and each key's lateness is the instant `get` returned it
//!   minus its deadline. `iter_custom` returns the sum of those latenesses, not the wall time
//!   (which is about `LATENESS_STEP`·iters longer). The p50, p99 and max over every key of
//!   the run are printed after the group.
//! * **Bytes per pending item** is printed once, before the `add_after` group: the heap in
//!   use with `PENDING` items pending minus the heap before the queue was built, divided by
//!   `PENDING`, read from the counting global allocator every bench shares
//!   ([`alloc_counter::CountingAlloc`]: malloc chunks, as `queue-bench` and `informer-bench`
//!   count; it adds two relaxed atomic adds per allocation and one per free to every bench in
//!   this file).
//!
//! `make bench-queue` compares all of it with client-go in one run (see BENCHMARKS.md).
//! `cargo bench --bench workqueue` runs this file in a few minutes on two cores.

use std::hint::black_box;
use std::time::{Duration, Instant};

use alloc_counter::CountingAlloc;
use controller_runtime::workqueue::{DelayingQueue, Queue};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use tokio::runtime::Runtime;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc::new();

/// Adds per cycle sample.
const ADDS: u64 = 40_000;
/// Producers yield after this many adds.
const YIELD_EVERY: u64 = 1_000;
/// Distinct keys of the repeating-keys cycles.
const REPEAT_SPACE: u64 = 32;
/// Items pending in the `add_after` benches.
const PENDING: u64 = 1_000_000;
/// The earliest deadline of a lateness sample, from the moment its first key is added.
const LATENESS_LEAD: Duration = Duration::from_millis(2);
/// The spacing of a lateness sample's deadlines (50 per millisecond, as in `queue-bench`).
const LATENESS_STEP: Duration = Duration::from_micros(20);

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

/// Prints the heap bytes per pending item of a queue holding `PENDING` items.
fn print_bytes_per_pending_item(rt: &Runtime, seed: &mut u64) {
    let before = ALLOC.live_bytes();
    let (queue, _) = rt.block_on(async { pending_queue(seed) });
    let bytes = ALLOC.live_bytes().saturating_sub(before);
    assert_eq!(queue.pending_delayed() as u64, PENDING);
    println!(
        "add_after/1m_pending/bytes_per_item: {:.1} bytes ({bytes} bytes for {PENDING} pending)",
        bytes as f64 / PENDING as f64
    );
}

/// One lateness sample: adds `iters` keys due `LATENESS_LEAD + i·LATENESS_STEP` from now to
/// `queue`, whose worker sends back each key with the instant `get` returned it; pushes each
/// key's lateness to `all` and returns their sum.
async fn lateness_sample(
    queue: &DelayingQueue<u64>,
    got: &mut tokio::sync::mpsc::UnboundedReceiver<(u64, Instant)>,
    next_key: &mut u64,
    iters: u64,
    all: &mut Vec<Duration>,
) -> Duration {
    let first = *next_key;
    let mut deadlines = Vec::with_capacity(iters as usize);
    for i in 0..iters {
        let delay = LATENESS_LEAD + LATENESS_STEP * u32::try_from(i).expect("sample size");
        deadlines.push(Instant::now() + delay);
        queue.add_after(*next_key, delay);
        *next_key += 1;
    }
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let (key, at) = got.recv().await.expect("the worker runs until shutdown");
        let late = at.saturating_duration_since(deadlines[(key - first) as usize]);
        all.push(late);
        total += late;
    }
    total
}

fn add_after(c: &mut Criterion) {
    let rt = runtime(0);
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    print_bytes_per_pending_item(&rt, &mut seed);
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

    // Lateness: reported per item as its lateness, not as wall time (see the module docs).
    let multi = runtime(2);
    let (queue, mut next_key) = multi.block_on(async { pending_queue(&mut seed) });
    let (tx, mut got) = tokio::sync::mpsc::unbounded_channel();
    let worker = multi.spawn({
        let queue = queue.clone();
        async move {
            while let Some(key) = queue.get().await {
                let _ = tx.send((key, Instant::now()));
                queue.done(&key);
            }
        }
    });
    let mut all = Vec::new();
    let mut group = c.benchmark_group("add_after/1m_pending");
    group.bench_function("lateness", |b| {
        b.iter_custom(|iters| {
            multi.block_on(lateness_sample(
                &queue,
                &mut got,
                &mut next_key,
                iters,
                &mut all,
            ))
        });
    });
    group.finish();
    queue.shut_down();
    multi.block_on(worker).expect("lateness worker");
    all.sort_unstable();
    // Nearest rank, as `queue-bench` reports its lateness.
    let rank = |pct: usize| all[(pct * all.len()).div_ceil(100).max(1) - 1];
    if let Some(max) = all.last() {
        println!(
            "add_after/1m_pending/lateness over {} items: p50 {:?}, p99 {:?}, max {:?}",
            all.len(),
            rank(50),
            rank(99),
            max
        );
    }
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
