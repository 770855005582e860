//! client-go's `util/workqueue` in Rust, on tokio: a fair, deduplicating work queue with
//! delays, rate limits, priorities that age, and metrics hooks. No Kubernetes dependency;
//! usable on its own.
//!
//! # Map
//!
//! * [`Queue`] — the base queue: `add`, `add_with_priority`, `get` (async),
//!   `get_with_priority`, `done`, `len`, `shut_down`, `shut_down_with_drain`.
//! * [`DelayingQueue`] — a `Queue` plus `add_after` and `add_after_with_priority` (earliest
//!   deadline wins).
//! * [`RateLimitingQueue`] — a `DelayingQueue` plus `add_rate_limited`, `forget`,
//!   `num_requeues`, and `add_with` ([`AddOpts`]: priority, delay, rate limit; the
//!   controller-runtime priority queue's `AddWithOpts`), driven by a [`RateLimiter`]:
//!   [`ItemExponentialFailure`], [`TokenBucket`], [`ItemFastSlow`], [`MaxOf`],
//!   [`WithMaxWait`], and client-go's defaults [`default_controller_rate_limiter`] and
//!   [`default_item_based_rate_limiter`].
//! * [`QueueConfig`] — name, metrics, and the [aging step](QueueConfig::aging_step).
//! * [`MetricsProvider`] — where the seven client-go queue metrics go (none by default);
//!   `workqueue_depth` can carry a priority label ([`PriorityGaugeMetric`]).
//!
//! ```text
//!  producers ── add / add_with_priority ─────────────┐
//!            ── add_after ──▶ delay heap ── due ─────┤
//!            ── add_rate_limited ─▶ RateLimiter::when┘
//!                                                    ▼
//!          FIFO of dirty priority-0 items ┐ (each item at most once, in one of the two)
//!          heap of other priorities ──────┤ smallest rank first: queued at − priority × step
//!                                         │ get
//!                                         ▼
//!                      workers (each item held by at most one worker) ── done ──▶ back to the
//!                                                                      queue if re-added meanwhile
//! ```
//!
//! The three queue types are layers of one handle (`RateLimitingQueue` derefs to
//! `DelayingQueue`, which derefs to `Queue`), and all three drive one shared state: the item
//! map, the FIFO and the delay heap behind one lock, and the promotion of due items
//! (`state.rs`, whose docs hold the implementation details); `priority.rs` holds the heap
//! of prioritised items and how they age. `waiters.rs` parks the getters
//! and picks the one that keeps the delay timer; `recent.rs` lets a duplicate `add` skip the
//! lock; `rate_limiter.rs` holds the limiters, `metrics.rs` the metrics hooks.
//!
//! # Contract
//!
//! The queue keeps client-go's four promises:
//!
//! * **Fair.** Within a priority, items are handed out in the order they were added (for a
//!   delayed item, the order in which its deadline passed); across priorities, by their
//!   rank (see [Priorities](#priorities)), so no item waits forever. A queue used only
//!   with plain `add`s is client-go's FIFO.
//! * **Stingy.** An item is never handed to two workers at once, and adding an item that is
//!   already waiting does nothing: many adds before processing collapse into one. An item
//!   added while it is being processed is queued again, exactly once, when its worker calls
//!   `done`.
//! * **Many producers and consumers.** Every handle is `Clone + Send + Sync`; `add` is
//!   synchronous and never blocks on anything but a short lock; `get` is async and wakes
//!   exactly one parked worker per queued item.
//! * **Shutdown.** After `shut_down`, adds are ignored but items already queued are still
//!   handed out; `get` returns `None` once the queue is empty. `shut_down_with_drain`
//!   additionally waits until every queued and every in-flight item is `done`.
//!
//! # Priorities
//!
//! `add_with_priority(item, p)` queues `item` at priority `p` (any `i32`; higher first; a
//! plain `add` is 0), as controller-runtime's priority queue does: live changes at 0, an
//! initial list at −100. An item keeps the highest priority it was added with, and a re-add
//! with a higher one raises it while it waits, to the back of its new priority (or where
//! it is, if it ranks better already).
//!
//! Unlike controller-runtime's queue, where an item of priority −100 waits as long as items
//! of priority 0 keep coming (kubernetes-sigs/controller-runtime#3496: 30 minutes and more
//! in production), **a waiting item ages**: it rises one level per
//! [aging step](QueueConfig::aging_step) ([`DEFAULT_AGING_STEP`], 1 s). Precisely, an item
//! queued at time `t` with priority `p` has the rank `t − p × step`, and `get` hands out the
//! smallest rank (a tie goes to the lower priority, which was queued first, then to the
//! earlier add). So:
//!
//! **The bound.** An item queued with priority `p` is never handed out after an item of
//! priority `q` queued more than `(q − p) × step` after it. With the defaults, an item of
//! the initial list (−100) goes before every live change (0) made more than 100 s after it:
//! it waits at most 100 s longer than such a change, however many keep arriving — once it
//! has waited 100 s it is in the top class, and only items queued before that moment can
//! still go first. A queue that is not overloaded hands everything out sooner; the bound
//! is what aging guarantees when it is.
//!
//! Why: two waiting items rise at the same rate, so their order never changes while they
//! wait, and the rank is fixed once, when the item is queued. An item `b` of priority `q`
//! queued at `t_b > t_a + (q − p) × step` has the rank `t_b − q × step > t_a − p × step`,
//! the rank of `a`. (A delayed item counts as queued when the queue moves it in — at its
//! deadline if a worker is waiting — and an item added while it is processed when `done`
//! queues it; an item in the FIFO before the queue's first add with a priority other than 0
//! counts as queued at that first add.)
//!
//! The cost: a queue that only ever sees priority 0 is the plain FIFO and reads no clock.
//! Once another priority is used, each queued item is stamped with the time (one clock read
//! per queueing), and items of priorities other than 0 live in a binary heap (O(log n)).
//! `aging_step(Duration::ZERO)` makes priorities labels only: items go out in queueing
//! order.
//!
//! # Your side of the contract
//!
//! Call `done` exactly once for every item `get` returns, whether
//! processing succeeded or not. On a rate-limited queue, `forget` an item when it succeeded
//! (that only clears its retry history: it still needs `done`).
//!
//! Where this crate differs from client-go and controller-runtime, on purpose:
//!
//! * waiting items age, so a low priority delays an item by a bounded time instead of
//!   starving it (above);
//! * an immediate `add` cancels a pending `add_after` of the same item instead of processing
//!   it twice (kubernetes/kubernetes#126027), and an `add_after` of an item that is already
//!   queued changes nothing — one pending request per item, the earliest wins (see
//!   [`DelayingQueue`]);
//! * `shut_down_with_drain` also waits for queued items (kubernetes/kubernetes#141079);
//! * a stray `done` (for an item that is not being processed) is ignored;
//! * `add_after` never blocks (client-go's can, on a full 1000-entry channel).
//!
//! # Speed
//!
//! An optimisation stays in this crate only if it moves a number a user of the queue would
//! notice — a row of `make bench-queue` (add → get → done throughput, `add_after` insert
//! rate, bytes per pending item, firing lateness) by 10 % or more — and adds no `unsafe` and
//! no hidden thread or task. So delays fire on tokio's timer, whose millisecond resolution
//! is far below any retry delay a controller uses, and no thread of our own sleeps on the OS
//! clock to shave that millisecond; the lock-free duplicate `add` and the packed item state
//! stay, because each moved its row by far more than 10 %.
//!
//! # Example: a worker loop
//!
//! ```
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use workqueue::{RateLimitingQueue, default_controller_rate_limiter};
//!
//! fn reconcile(key: &str, handled: &AtomicUsize) -> Result<(), String> {
//!     handled.fetch_add(1, Ordering::Relaxed);
//!     if key.is_empty() { Err("empty key".into()) } else { Ok(()) }
//! }
//!
//! #[tokio::main(flavor = "current_thread")]
//! async fn main() {
//!     let queue = RateLimitingQueue::<String>::new(default_controller_rate_limiter());
//!     let handled = Arc::new(AtomicUsize::new(0));
//!
//!     let workers: Vec<_> = (0..2)
//!         .map(|_| {
//!             let (queue, handled) = (queue.clone(), Arc::clone(&handled));
//!             tokio::spawn(async move {
//!                 while let Some(key) = queue.get().await {
//!                     match reconcile(&key, &handled) {
//!                         Ok(()) => queue.forget(&key),
//!                         Err(_) => queue.add_rate_limited(key.clone()),
//!                     }
//!                     queue.done(&key);
//!                 }
//!             })
//!         })
//!         .collect();
//!
//!     for key in ["default/web", "default/cache", "default/web"] {
//!         queue.add(key.to_string()); // the second "default/web" is deduplicated
//!     }
//!     queue.shut_down_with_drain().await;
//!     for worker in workers {
//!         worker.await.unwrap();
//!     }
//!     assert_eq!(handled.load(Ordering::Relaxed), 2);
//! }
//! ```

mod delaying;
mod metrics;
mod priority;
mod queue;
mod rate_limiter;
mod rate_limiting;
mod recent;
mod state;
mod waiters;

#[cfg(test)]
mod test_util;

pub use delaying::DelayingQueue;
pub use metrics::{
    CounterMetric, GaugeMetric, HistogramMetric, MetricsProvider, NoopMetric, PriorityGaugeMetric,
    SettableGaugeMetric, UNFINISHED_WORK_UPDATE_PERIOD,
};
pub use priority::DEFAULT_AGING_STEP;
pub use queue::{Queue, QueueConfig};
pub use rate_limiter::{
    Error as RateLimiterError, ItemExponentialFailure, ItemFastSlow, MaxOf, RateLimiter,
    Result as RateLimiterResult, TokenBucket, WithMaxWait, default_controller_rate_limiter,
    default_item_based_rate_limiter,
};
pub use rate_limiting::{AddOpts, RateLimitingQueue};
