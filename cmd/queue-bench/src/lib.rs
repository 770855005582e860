//! `queue-bench` measures the workqueue on the workloads that `benches/clientgo/` runs on
//! client-go's, so that `make bench-queue` can compare the two in one run.
//!
//! # Map
//!
//! * [`Cycle`] — add → get → done with `P` producers and `W` workers on unique or repeating
//!   keys (or unique keys at two priorities, [`Keys::Prioritised`]), run on our
//!   [`workqueue::Queue`] ([`Cycle::run_queue`]) and, as the ceiling a
//!   deduplicating queue can approach, on a lock-free MPMC channel ([`Cycle::run_channel`]).
//! * [`Insert`] — `add_after` of many distinct keys: insert rate and heap bytes per pending
//!   item, read through [`alloc_counter::CountingAlloc`].
//! * [`Lateness`] — how late delayed items reach a worker waiting in `get`.
//! * [`SplitMix64`] — the delay generator, written identically in the Go peer.
//!
//! ```text
//!  main.rs ── flags ──▶ cycle_workloads / Insert / Lateness ── run ──▶ outcome ── JSON line ──▶ stdout
//!                                                                          └── progress ──▶ stderr
//! ```
//!
//! # Example
//!
//! ```
//! use queue_bench::{Cycle, Keys, Threads};
//!
//! let cycle = Cycle {
//!     keys: Keys::Repeating { space: 16 },
//!     producers: 2,
//!     workers: 2,
//!     adds: 1_000,
//!     threads: Threads::Workers(2),
//!     yield_every: 100,
//! };
//! assert_eq!(cycle.to_string(), "cycle/repeat/p2w2");
//! let outcome = cycle.run_queue();
//! assert_eq!(outcome.adds, 1_000);
//! assert!(outcome.processed >= 16); // every key at least once, duplicates collapsed
//! ```

mod cycle;
mod delayed;
mod rng;

pub use cycle::{Cycle, CycleOutcome, CycleParams, Keys, Threads, cycle_workloads, priority_of};
pub use delayed::{Insert, InsertOutcome, Lateness, LatenessOutcome};
pub use rng::SplitMix64;
