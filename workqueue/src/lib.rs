//! client-go's `util/workqueue` in Rust, on tokio: a fair, deduplicating work queue with
//! delays, rate limits and metrics hooks. No Kubernetes dependency; usable on its own.
//!
//! # Map
//!
//! * [`Queue`] — the base queue: `add`, `get` (async), `done`, `len`, `shut_down`,
//!   `shut_down_with_drain`.
//! * [`DelayingQueue`] — a `Queue` plus `add_after` (earliest deadline wins).
//! * [`RateLimitingQueue`] — a `DelayingQueue` plus `add_rate_limited`, `forget`,
//!   `num_requeues`, driven by a [`RateLimiter`]: [`ItemExponentialFailure`], [`TokenBucket`],
//!   [`ItemFastSlow`], [`MaxOf`], [`WithMaxWait`], and client-go's defaults
//!   [`default_controller_rate_limiter`] and [`default_item_based_rate_limiter`].
//! * [`MetricsProvider`] — where the seven client-go queue metrics go (none by default).
//!
//! ```text
//!  producers ── add ─────────────────────────────────┐
//!            ── add_after ──▶ delay heap ── due ─────┤
//!            ── add_rate_limited ─▶ RateLimiter::when┘
//!                                                    ▼
//!                          FIFO of dirty items (each item at most once)
//!                                                    │ get
//!                                                    ▼
//!                      workers (each item held by at most one worker) ── done ──▶ back to the
//!                                                                      FIFO if re-added meanwhile
//! ```
//!
//! The three queue types are layers of one handle (`RateLimitingQueue` derefs to
//! `DelayingQueue`, which derefs to `Queue`), and all three drive one shared state: the item
//! map, the FIFO and the delay heap behind one lock, and the promotion of due items
//! (`state.rs`, whose docs hold the implementation details). `waiters.rs` parks the getters
//! and picks the one that keeps the delay timer; `recent.rs` lets a duplicate `add` skip the
//! lock; `rate_limiter.rs` holds the limiters, `metrics.rs` the metrics hooks.
//!
//! # Contract
//!
//! The queue keeps client-go's four promises:
//!
//! * **Fair.** Items are handed out in the order they were added (for a delayed item, the
//!   order in which its deadline passed).
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
//! Your side of the contract: call `done` exactly once for every item `get` returns, whether
//! processing succeeded or not. On a rate-limited queue, `forget` an item when it succeeded
//! (that only clears its retry history: it still needs `done`).
//!
//! Where this crate differs from client-go, on purpose:
//!
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
    CounterMetric, GaugeMetric, HistogramMetric, MetricsProvider, NoopMetric,
    PriorityGaugeMetric, SettableGaugeMetric, UNFINISHED_WORK_UPDATE_PERIOD,
};
pub use priority::DEFAULT_AGING_STEP;
pub use queue::{Queue, QueueConfig};
pub use rate_limiter::{
    Error as RateLimiterError, ItemExponentialFailure, ItemFastSlow, MaxOf, RateLimiter,
    Result as RateLimiterResult, TokenBucket, WithMaxWait, default_controller_rate_limiter,
    default_item_based_rate_limiter,
};
pub use rate_limiting::{AddOpts, RateLimitingQueue};
