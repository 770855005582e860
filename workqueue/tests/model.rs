//! Randomized tests: the queue against a reference model, and many tasks racing on one queue.

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use parking_lot::Mutex;
use proptest::prelude::*;
use tokio::time::Instant;
use workqueue::{DelayingQueue, QueueConfig};

const MS: Duration = Duration::from_millis(1);

// === Reference model ===

/// One step of a single-task script.
#[derive(Debug, Clone)]
enum Op {
    Add(u8),
    AddAfter(u8, u8),
    Get,
    Done(u8),
    Advance(u8),
    ShutDown,
}

fn op() -> impl Strategy<Value = Op> {
    // Few items and short delays, so that requests for one item often overlap.
    let item = 0u8..3;
    prop_oneof![
        3 => item.clone().prop_map(Op::Add),
        5 => (item.clone(), 0u8..6).prop_map(|(i, d)| Op::AddAfter(i, d)),
        4 => Just(Op::Get),
        3 => item.prop_map(Op::Done),
        3 => (0u8..4).prop_map(Op::Advance),
        1 => Just(Op::ShutDown),
    ]
}

/// The documented semantics, written as plainly as possible: a FIFO, the set of items being
/// processed, the set of those added again meanwhile, and one pending request per item.
#[derive(Default)]
struct Model {
    queue: VecDeque<u8>,
    processing: HashSet<u8>,
    dirty_while_processing: HashSet<u8>,
    /// Item → (deadline in ms, order of the request).
    pending: HashMap<u8, (u64, u64)>,
    next_request: u64,
    now_ms: u64,
    shut_down: bool,
}

impl Model {
    /// Queues the requests whose deadline has passed, earliest first.
    fn promote(&mut self) {
        let mut due: Vec<_> = self
            .pending
            .iter()
            .filter(|(_, (at, _))| *at <= self.now_ms)
            .map(|(&item, &key)| (key, item))
            .collect();
        due.sort_unstable();
        for (_, item) in due {
            self.pending.remove(&item);
            self.mark_dirty(item);
        }
    }

    /// The item must be processed (again): queue it, or mark it dirty if it is being processed.
    fn mark_dirty(&mut self, item: u8) {
        if self.processing.contains(&item) {
            self.dirty_while_processing.insert(item);
        } else if !self.queue.contains(&item) {
            self.queue.push_back(item);
        }
    }

    fn add(&mut self, item: u8) {
        if self.shut_down {
            return;
        }
        self.promote();
        self.pending.remove(&item); // an immediate add supersedes a pending request
        self.mark_dirty(item);
    }

    fn add_after(&mut self, item: u8, delay_ms: u64) {
        if self.shut_down {
            return;
        }
        if delay_ms == 0 {
            return self.add(item);
        }
        self.promote();
        if self.queue.contains(&item) || self.dirty_while_processing.contains(&item) {
            return; // will be processed after now anyway
        }
        let request = (self.now_ms + delay_ms, self.next_request);
        self.next_request += 1;
        let pending = self.pending.entry(item).or_insert(request);
        if request.0 < pending.0 {
            *pending = request; // the earliest deadline wins
        }
    }

    /// `Some(Some(item))`, `Some(None)` for shutdown, `None` if a `get` would wait.
    fn get(&mut self) -> Option<Option<u8>> {
        self.promote();
        match self.queue.pop_front() {
            Some(item) => {
                self.processing.insert(item);
                Some(Some(item))
            }
            None if self.shut_down => Some(None),
            None => None,
        }
    }

    fn done(&mut self, item: u8) {
        self.promote();
        if self.processing.remove(&item) && self.dirty_while_processing.remove(&item) {
            self.queue.push_back(item);
        }
    }

    fn shut_down(&mut self) {
        self.promote();
        self.shut_down = true;
        self.pending.clear();
    }

    fn len(&mut self) -> usize {
        self.promote();
        self.queue.len()
    }
}

// === Reference model with priorities ===

/// One step of a single-task script on a queue with priorities.
#[derive(Debug, Clone)]
enum PrioOp {
    Add(u8, i8),
    AddAfter(u8, u8, i8),
    Get,
    Done(u8),
    Advance(u8),
    ShutDown,
}

fn prio_op() -> impl Strategy<Value = PrioOp> {
    let item = 0u8..4;
    // Mostly 0, as in a controller; a step of 1 ms against advances of up to 4 ms, so that
    // aging reorders items of different priorities.
    let priority = prop_oneof![3 => Just(0i8), 2 => -3i8..=3];
    prop_oneof![
        4 => (item.clone(), priority.clone()).prop_map(|(i, p)| PrioOp::Add(i, p)),
        3 => (item.clone(), 0u8..6, priority).prop_map(|(i, d, p)| PrioOp::AddAfter(i, d, p)),
        4 => Just(PrioOp::Get),
        3 => item.prop_map(PrioOp::Done),
        3 => (0u8..4).prop_map(PrioOp::Advance),
        1 => Just(PrioOp::ShutDown),
    ]
}

/// One queued item of [`PrioModel`]: its rank, the priority it was ranked with, its push
/// order, and the priority it will be handed out with.
#[derive(Debug, Clone, Copy)]
struct Queued {
    item: u8,
    rank: i64,
    ranked_at: i32,
    seq: u64,
    priority: i32,
}

/// The documented semantics of priorities, written plainly: every queued item has the rank
/// `queued at − priority × step`, and `get` takes the smallest (rank, priority, push order).
#[derive(Default)]
struct PrioModel {
    queue: Vec<Queued>,
    processing: HashSet<u8>,
    /// Items added again while processed, with the priority they will be queued with.
    dirty_while_processing: HashMap<u8, i32>,
    /// Item → (deadline in ms, order of the request, priority).
    pending: HashMap<u8, (u64, u64, i32)>,
    next_request: u64,
    next_seq: u64,
    now_ms: u64,
    /// Whether an add with a priority other than 0 happened (the queue's priority side).
    prioritised: bool,
    shut_down: bool,
}

const STEP_MS: i64 = 1;

impl PrioModel {
    fn now(&self) -> i64 {
        self.now_ms as i64
    }

    fn rank(&self, priority: i32) -> i64 {
        self.now() - i64::from(priority) * STEP_MS
    }

    fn promote(&mut self) {
        let mut due: Vec<_> = self
            .pending
            .iter()
            .filter(|(_, (at, _, _))| *at <= self.now_ms)
            .map(|(&item, &(at, order, priority))| ((at, order), item, priority))
            .collect();
        due.sort_unstable();
        for (_, item, priority) in due {
            self.pending.remove(&item);
            if self.processing.contains(&item) {
                self.dirty_while_processing.insert(item, priority);
            } else {
                self.push(item, priority);
            }
        }
    }

    /// The first add with a priority other than 0: items queued so far count as queued now.
    fn prioritise(&mut self, priority: i32) {
        if priority != 0 && !self.prioritised {
            self.prioritised = true;
            let now = self.now();
            for queued in &mut self.queue {
                queued.rank = now;
            }
        }
    }

    fn push(&mut self, item: u8, priority: i32) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let rank = self.rank(priority);
        self.queue.push(Queued {
            item,
            rank,
            ranked_at: priority,
            seq,
            priority,
        });
    }

    /// A re-add of a queued item with `priority`.
    fn raise(&mut self, index: usize, priority: i32) {
        let queued = self.queue[index];
        if priority <= queued.priority {
            return;
        }
        let fresh = self.rank(priority);
        let seq = self.next_seq;
        let entry = &mut self.queue[index];
        if queued.ranked_at == 0 {
            // In the FIFO, raised above 0: to the heap, with the better of the two ranks.
            *entry = Queued {
                rank: queued.rank.min(fresh),
                ranked_at: priority,
                seq,
                priority,
                ..queued
            };
        } else if fresh >= queued.rank {
            entry.priority = priority; // it ranks better already: keeps its place
            return;
        } else {
            *entry = Queued {
                rank: fresh,
                ranked_at: priority,
                seq,
                priority,
                ..queued
            };
        }
        self.next_seq += 1;
    }

    fn mark_dirty(&mut self, item: u8, priority: i32) {
        if self.processing.contains(&item) {
            let dirty = self.dirty_while_processing.entry(item).or_insert(priority);
            *dirty = (*dirty).max(priority);
        } else if let Some(index) = self.queue.iter().position(|q| q.item == item) {
            self.raise(index, priority);
        } else {
            self.push(item, priority);
        }
    }

    fn add(&mut self, item: u8, priority: i32) {
        if self.shut_down {
            return;
        }
        self.promote();
        self.prioritise(priority);
        let priority = match self.pending.remove(&item) {
            Some((_, _, pending)) => pending.max(priority),
            None => priority,
        };
        self.mark_dirty(item, priority);
    }

    fn add_after(&mut self, item: u8, delay_ms: u64, priority: i32) {
        if self.shut_down {
            return;
        }
        if delay_ms == 0 {
            return self.add(item, priority);
        }
        self.prioritise(priority);
        self.promote();
        if let Some(dirty) = self.dirty_while_processing.get_mut(&item) {
            *dirty = (*dirty).max(priority);
            return;
        }
        if let Some(index) = self.queue.iter().position(|q| q.item == item) {
            return self.raise(index, priority);
        }
        let request = (self.now_ms + delay_ms, self.next_request, priority);
        self.next_request += 1;
        let pending = self.pending.entry(item).or_insert(request);
        pending.2 = pending.2.max(priority);
        if request.0 < pending.0 {
            (pending.0, pending.1) = (request.0, request.1);
        }
    }

    fn get(&mut self) -> Option<Option<(u8, i32)>> {
        self.promote();
        let best = self
            .queue
            .iter()
            .enumerate()
            .min_by_key(|(_, q)| (q.rank, q.ranked_at, q.seq))
            .map(|(index, _)| index);
        match best {
            Some(index) => {
                let queued = self.queue.remove(index);
                self.processing.insert(queued.item);
                Some(Some((queued.item, queued.priority)))
            }
            None if self.shut_down => Some(None),
            None => None,
        }
    }

    fn done(&mut self, item: u8) {
        self.promote();
        if self.processing.remove(&item)
            && let Some(priority) = self.dirty_while_processing.remove(&item)
        {
            self.push(item, priority);
        }
    }

    fn shut_down(&mut self) {
        self.promote();
        self.shut_down = true;
        self.pending.clear();
    }

    fn len(&mut self) -> usize {
        self.promote();
        self.queue.len()
    }
}

/// Polls `future` once.
fn poll_once<F: Future>(future: std::pin::Pin<&mut F>) -> Poll<F::Output> {
    future.poll(&mut Context::from_waker(Waker::noop()))
}

fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// Every operation gives exactly the model's answer: which item `get` returns (FIFO,
    /// dedup, processing exclusion, earliest deadline, add superseding a delayed request),
    /// `len`, and the number of pending delayed requests.
    #[test]
    fn queue_matches_the_reference_model(ops in prop::collection::vec(op(), 1..80)) {
        paused_runtime().block_on(async {
            let queue = DelayingQueue::new();
            let mut model = Model::default();
            for (step, op) in ops.iter().enumerate() {
                match *op {
                    Op::Add(item) => {
                        queue.add(item);
                        model.add(item);
                    }
                    Op::AddAfter(item, ms) => {
                        queue.add_after(item, u32::from(ms) * MS);
                        model.add_after(item, u64::from(ms));
                    }
                    Op::Get => {
                        let got = match poll_once(pin!(queue.get())) {
                            Poll::Ready(item) => Some(item),
                            Poll::Pending => None,
                        };
                        prop_assert_eq!(got, model.get(), "step {}: {:?}", step, op);
                    }
                    Op::Done(item) => {
                        queue.done(&item);
                        model.done(item);
                    }
                    Op::Advance(ms) => {
                        tokio::time::advance(u32::from(ms) * MS).await;
                        model.now_ms += u64::from(ms);
                    }
                    Op::ShutDown => {
                        queue.shut_down();
                        model.shut_down();
                    }
                }
                prop_assert_eq!(queue.len(), model.len(), "len after step {}: {:?}", step, op);
                prop_assert_eq!(queue.pending_delayed(), model.pending.len(), "step {}", step);
                prop_assert_eq!(queue.is_shutting_down(), model.shut_down);
            }
            Ok(())
        })?;
    }
}

// === Many tasks on paused time ===

/// A small deterministic generator (xorshift64*), so a failing seed replays exactly.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed | 1)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

/// What the tasks did, in one global order (one thread, so the order is exact).
#[derive(Default)]
struct Log {
    step: u64,
    /// Per item: (step, time, delay) of each add the queue accepted (before shutdown).
    adds: HashMap<u8, Vec<(u64, Instant, Duration)>>,
    /// Per item: steps at which `get` handed it out.
    gets: HashMap<u8, Vec<u64>>,
    in_flight: HashSet<u8>,
    shut_down_at: Option<(u64, Instant)>,
}

impl Log {
    fn next(&mut self) -> u64 {
        self.step += 1;
        self.step
    }

    fn record_add(&mut self, item: u8, delay: Duration) {
        if self.shut_down_at.is_none() {
            let step = self.next();
            self.adds
                .entry(item)
                .or_default()
                .push((step, Instant::now(), delay));
        }
    }
}

fn add_randomly(queue: &DelayingQueue<u8>, log: &Mutex<Log>, rng: &mut Rng, item: u8) {
    let delay = if rng.below(2) == 0 {
        Duration::ZERO
    } else {
        Duration::from_millis(rng.below(6))
    };
    // Log first: the add happens after this step.
    log.lock().record_add(item, delay);
    // A third of the adds carry a priority: the heap and its raises race too.
    let priority = match rng.below(3) {
        0 => i32::try_from(rng.below(5)).unwrap() - 2,
        _ => 0,
    };
    if delay.is_zero() && rng.below(2) == 0 {
        queue.add_with_priority(item, priority);
    } else {
        queue.add_after_with_priority(item, delay, priority);
    }
}

async fn pause(rng: &mut Rng) {
    match rng.below(3) {
        0 => {}
        1 => tokio::task::yield_now().await,
        _ => tokio::time::sleep(Duration::from_millis(rng.below(4))).await,
    }
}

/// Workers, producers and one optional shutdown race on one queue. Checks that no item is
/// held by two workers, no item is handed out more often than it was accepted, and every
/// accepted add whose deadline passed before shutdown is followed by a `get` of that item.
fn run_tasks(seed: u64, workers: usize, producers: usize, ops: usize, shut_down_early: bool) {
    // On paused time, a lost wake-up leaves every task stuck; tokio then jumps the clock to
    // this timeout and the test fails at once instead of hanging.
    let run = async move {
        let queue = DelayingQueue::<u8>::new();
        let log = Arc::new(Mutex::new(Log::default()));
        let mut rng = Rng::new(seed);

        let worker_tasks: Vec<_> = (0..workers)
            .map(|w| {
                let (queue, log) = (queue.clone(), Arc::clone(&log));
                let mut rng = Rng::new(seed ^ (w as u64 + 1).wrapping_mul(0x9E37_79B9));
                tokio::spawn(async move {
                    loop {
                        // Sometimes give up waiting, to race cancelled gets with the rest.
                        let item = if rng.below(3) == 0 {
                            let patience = Duration::from_millis(rng.below(4));
                            match tokio::time::timeout(patience, queue.get()).await {
                                Ok(item) => item,
                                Err(_) => continue,
                            }
                        } else {
                            queue.get().await
                        };
                        let Some(item) = item else { break };
                        {
                            let mut log = log.lock();
                            assert!(log.in_flight.insert(item), "{item} handed to two workers");
                            let step = log.next();
                            log.gets.entry(item).or_default().push(step);
                        }
                        pause(&mut rng).await;
                        if rng.below(4) == 0 {
                            add_randomly(&queue, &log, &mut rng, item);
                        }
                        log.lock().in_flight.remove(&item);
                        queue.done(&item);
                    }
                })
            })
            .collect();

        let shut_down_after = shut_down_early.then(|| rng.below((producers * ops) as u64));
        let issued = Arc::new(AtomicU64::new(0));
        let producer_tasks: Vec<_> = (0..producers)
            .map(|p| {
                let (queue, log, issued) = (queue.clone(), Arc::clone(&log), Arc::clone(&issued));
                let mut rng = Rng::new(seed.rotate_left(p as u32 + 7) ^ 0xABCD);
                tokio::spawn(async move {
                    for _ in 0..ops {
                        let item = rng.below(8) as u8;
                        add_randomly(&queue, &log, &mut rng, item);
                        if Some(issued.fetch_add(1, Ordering::SeqCst)) == shut_down_after {
                            let step = log.lock().next();
                            log.lock().shut_down_at = Some((step, Instant::now()));
                            queue.shut_down();
                        }
                        pause(&mut rng).await;
                    }
                })
            })
            .collect();

        for task in producer_tasks {
            task.await.unwrap();
        }
        // Wait for the workers to catch up. Time only moves when every task is parked, so
        // an item still queued after that means a parked worker missed its wake-up (the
        // final shutdown would otherwise hide it by waking everyone).
        let mut caught_up = false;
        for _ in 0..1_000 {
            tokio::time::sleep(10 * MS).await;
            let idle = log.lock().in_flight.is_empty();
            if idle && queue.is_empty() && queue.pending_delayed() == 0 {
                caught_up = true;
                break;
            }
        }
        assert!(
            caught_up,
            "items stayed queued while workers waited: a wake-up was lost"
        );
        {
            let mut log = log.lock();
            if log.shut_down_at.is_none() {
                let step = log.next();
                log.shut_down_at = Some((step, Instant::now()));
            }
        }
        queue.shut_down_with_drain().await;
        for task in worker_tasks {
            task.await.unwrap();
        }

        let log = log.lock();
        let (shut_step, shut_time) = log.shut_down_at.unwrap();
        assert!(log.in_flight.is_empty());
        assert_eq!(queue.len(), 0);
        for (item, gets) in &log.gets {
            let accepted = log.adds.get(item).map_or(0, Vec::len);
            assert!(
                gets.len() <= accepted,
                "{item}: {} gets, {accepted} adds",
                gets.len()
            );
        }
        for (item, adds) in &log.adds {
            let last_get = log.gets.get(item).and_then(|g| g.last().copied());
            for &(step, at, delay) in adds {
                if step < shut_step && at + delay <= shut_time {
                    assert!(
                        last_get.is_some_and(|g| g > step),
                        "{item} added at step {step} (delay {delay:?}) was lost"
                    );
                }
            }
        }
    };
    paused_runtime().block_on(async {
        tokio::time::timeout(Duration::from_secs(3600), run)
            .await
            .expect("stuck: a wake-up was lost");
    });
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn racing_tasks_never_share_lose_or_duplicate_items(
        seed in any::<u64>(),
        workers in 1usize..5,
        producers in 1usize..4,
        ops in 1usize..40,
        shut_down_early in any::<bool>(),
    ) {
        run_tasks(seed, workers, producers, ops, shut_down_early);
    }
}

// === Many threads ===

/// Real threads (no timers): per item, never two workers at once, never more gets than adds,
/// and the last add of every item is followed by a get.
#[test]
fn threads_never_share_lose_or_duplicate_items() {
    const ITEMS: usize = 16;
    const PRODUCERS: usize = 2;
    const WORKERS: usize = 4;
    const ADDS_PER_PRODUCER: usize = 5_000;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let queue = DelayingQueue::<usize>::new();
        let clock = Arc::new(AtomicU64::new(1));
        let busy: Arc<Vec<AtomicBool>> =
            Arc::new((0..ITEMS).map(|_| AtomicBool::new(false)).collect());
        let last_add: Arc<Vec<AtomicU64>> =
            Arc::new((0..ITEMS).map(|_| AtomicU64::new(0)).collect());
        let adds: Arc<Vec<AtomicU64>> = Arc::new((0..ITEMS).map(|_| AtomicU64::new(0)).collect());
        let gets: Arc<Vec<AtomicU64>> = Arc::new((0..ITEMS).map(|_| AtomicU64::new(0)).collect());
        let last_get: Arc<Vec<AtomicU64>> =
            Arc::new((0..ITEMS).map(|_| AtomicU64::new(0)).collect());

        let workers: Vec<_> = (0..WORKERS)
            .map(|_| {
                let queue = queue.clone();
                let (clock, busy, gets, last_get) =
                    (clock.clone(), busy.clone(), gets.clone(), last_get.clone());
                tokio::spawn(async move {
                    while let Some(item) = queue.get().await {
                        let now = clock.fetch_add(1, Ordering::SeqCst);
                        assert!(!busy[item].swap(true, Ordering::SeqCst), "{item} shared");
                        gets[item].fetch_add(1, Ordering::SeqCst);
                        last_get[item].fetch_max(now, Ordering::SeqCst);
                        tokio::task::yield_now().await;
                        busy[item].store(false, Ordering::SeqCst);
                        queue.done(&item);
                    }
                })
            })
            .collect();

        let producers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let queue = queue.clone();
                let (clock, last_add, adds) = (clock.clone(), last_add.clone(), adds.clone());
                tokio::spawn(async move {
                    let mut rng = Rng::new(p as u64 + 11);
                    for i in 0..ADDS_PER_PRODUCER {
                        let item = rng.below(ITEMS as u64) as usize;
                        let now = clock.fetch_add(1, Ordering::SeqCst);
                        last_add[item].fetch_max(now, Ordering::SeqCst);
                        adds[item].fetch_add(1, Ordering::SeqCst);
                        if i % 2 == 0 {
                            queue.add(item);
                        } else {
                            queue.add_after(item, Duration::ZERO);
                        }
                        if i % 64 == 0 {
                            tokio::task::yield_now().await;
                        }
                    }
                })
            })
            .collect();

        for producer in producers {
            producer.await.unwrap();
        }
        queue.shut_down_with_drain().await;
        for worker in workers {
            worker.await.unwrap();
        }
        for item in 0..ITEMS {
            let (added, got) = (
                adds[item].load(Ordering::SeqCst),
                gets[item].load(Ordering::SeqCst),
            );
            assert!(got <= added, "{item}: {got} gets for {added} adds");
            if added > 0 {
                assert!(
                    last_get[item].load(Ordering::SeqCst) > last_add[item].load(Ordering::SeqCst),
                    "{item}: its last add was never handed out"
                );
            }
        }
    });
}

/// An `add` that follows a `get` of the item on another thread is never dropped, although the
/// adding thread remembered the item as queued just before (the lock-free duplicate check).
/// The threads take turns through channels, so every get must find its item at once.
#[test]
fn an_add_after_a_get_on_another_thread_is_never_lost() {
    const ROUNDS: u64 = 20_000;

    let queue = workqueue::Queue::<u64>::new();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let (got_tx, got_rx) = std::sync::mpsc::channel::<Option<u64>>();
    let worker = std::thread::spawn({
        let queue = queue.clone();
        move || {
            while go_rx.recv().is_ok() {
                let got = match poll_once(pin!(queue.get())) {
                    Poll::Ready(item) => item,
                    Poll::Pending => None,
                };
                got_tx.send(got).unwrap();
                if let Some(item) = got {
                    queue.done(&item);
                }
            }
        }
    });
    for round in 0..ROUNDS {
        let item = round % 8;
        for _ in 0..3 {
            queue.add(item); // queued, then remembered, then answered without the lock
        }
        go_tx.send(()).unwrap();
        assert_eq!(got_rx.recv().unwrap(), Some(item));
        queue.add(item); // the worker has it (or is done with it): this add must count
        go_tx.send(()).unwrap();
        assert_eq!(
            got_rx.recv().unwrap(),
            Some(item),
            "round {round}: the add after get was lost"
        );
    }
    drop(go_tx);
    worker.join().unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// With priorities and aging: every `get` hands out the model's item with the model's
    /// priority (highest rank first, FIFO within a priority, raising, aging, pending
    /// priorities of delayed and dirty items), and `len` and the pending count agree.
    #[test]
    fn prioritised_queue_matches_the_reference_model(
        ops in prop::collection::vec(prio_op(), 1..80),
    ) {
        paused_runtime().block_on(async {
            let queue = DelayingQueue::with_config(
                QueueConfig::new().aging_step(Duration::from_millis(STEP_MS as u64)),
            );
            let mut model = PrioModel::default();
            for (step, op) in ops.iter().enumerate() {
                match *op {
                    PrioOp::Add(item, p) => {
                        queue.add_with_priority(item, i32::from(p));
                        model.add(item, i32::from(p));
                    }
                    PrioOp::AddAfter(item, ms, p) => {
                        queue.add_after_with_priority(item, u32::from(ms) * MS, i32::from(p));
                        model.add_after(item, u64::from(ms), i32::from(p));
                    }
                    PrioOp::Get => {
                        let got = match poll_once(pin!(queue.get_with_priority())) {
                            Poll::Ready(item) => Some(item),
                            Poll::Pending => None,
                        };
                        prop_assert_eq!(got, model.get(), "step {}: {:?}", step, op);
                    }
                    PrioOp::Done(item) => {
                        queue.done(&item);
                        model.done(item);
                    }
                    PrioOp::Advance(ms) => {
                        tokio::time::advance(u32::from(ms) * MS).await;
                        model.now_ms += u64::from(ms);
                    }
                    PrioOp::ShutDown => {
                        queue.shut_down();
                        model.shut_down();
                    }
                }
                prop_assert_eq!(queue.len(), model.len(), "len after step {}: {:?}", step, op);
                prop_assert_eq!(queue.pending_delayed(), model.pending.len(), "step {}", step);
            }
            Ok(())
        })?;
    }
}
