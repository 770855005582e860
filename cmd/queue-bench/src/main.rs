//! `queue-bench`: runs the workqueue workloads once and prints one JSON line per result on
//! stdout (progress goes to stderr). `make bench-queue` runs it beside the client-go peer.

use std::time::Duration;

use alloc_counter::CountingAlloc;
use anyhow::{Context, Result, ensure};
use clap::Parser;
use queue_bench::{CycleParams, Insert, Keys, Lateness, cycle_workloads};
use serde_json::{Value, json};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc::new();

/// Workqueue throughput, add_after insert rate, bytes per pending item and firing lateness.
///
/// Prints one JSON object per line on stdout, with the same workload names and fields as
/// the Go peer in benches/clientgo/.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Total adds per unique-keys add → get → done workload, split between the producers.
    #[arg(long, default_value_t = 2_000_000)]
    adds: u64,
    /// Total adds per repeating-keys workload (dedup makes these faster, so they get more).
    #[arg(long, default_value_t = 10_000_000)]
    repeat_adds: u64,
    /// Key space of the repeating-keys workloads.
    #[arg(long, default_value_t = 32)]
    repeat_keys: u64,
    /// Producers yield to the scheduler after this many adds (0: never).
    #[arg(long, default_value_t = 1_000)]
    yield_every: u64,
    /// Worker threads of the multi-threaded runtime.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Items pending in the add_after insert / bytes-per-item workload.
    #[arg(long, default_value_t = 1_000_000)]
    pending: usize,
    /// Items in the firing-lateness workload.
    #[arg(long, default_value_t = 100_000)]
    lateness_items: usize,
    /// Shortest delay of the firing-lateness workload, in milliseconds.
    #[arg(long, default_value_t = 200)]
    lateness_low_ms: u64,
    /// Spread of the firing-lateness delays, in milliseconds.
    #[arg(long, default_value_t = 2_000)]
    lateness_span_ms: u64,
    /// Seed of the random delays (the Go peer draws the same delays from the same seed).
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Run only the workloads whose name contains this text (e.g. `cycle/unique`).
    #[arg(long)]
    only: Option<String>,
    /// Skip the MPMC-channel ceiling.
    #[arg(long)]
    no_channel: bool,
}

impl Args {
    /// The checks clap cannot express.
    fn validate(self) -> Result<Self> {
        ensure!(
            self.adds >= 8 && self.repeat_adds >= 8,
            "--adds and --repeat-adds must be at least 8 (one per producer)"
        );
        ensure!(self.repeat_keys >= 1, "--repeat-keys must be at least 1");
        ensure!(self.threads >= 1, "--threads must be at least 1");
        ensure!(
            self.pending >= 1 && self.lateness_items >= 1,
            "--pending and --lateness-items must be at least 1"
        );
        Ok(self)
    }

    fn selected(&self, workload: &str) -> bool {
        self.only
            .as_deref()
            .is_none_or(|only| workload.contains(only))
    }
}

fn main() -> Result<()> {
    let args = Args::parse().validate().context("invalid arguments")?;

    let params = CycleParams {
        unique_adds: args.adds,
        repeat_adds: args.repeat_adds,
        repeat_space: args.repeat_keys,
        threads: args.threads,
        yield_every: args.yield_every,
    };
    for cycle in cycle_workloads(params) {
        let name = cycle.to_string();
        if !args.selected(&name) {
            continue;
        }
        let mut runs = vec![("ours", cycle.run_queue())];
        if !args.no_channel && cycle.keys == Keys::Unique {
            runs.push(("channel", cycle.run_channel()));
        }
        for (implementation, outcome) in runs {
            eprintln!(
                "{implementation:>8} {name:<22} {:>7.2} M adds/s  ({} processed, {:.3} s)",
                outcome.adds_per_sec() / 1e6,
                outcome.processed,
                outcome.elapsed.as_secs_f64(),
            );
            emit(json!({
                "impl": implementation,
                "workload": name,
                "adds": outcome.adds,
                "processed": outcome.processed,
                "secs": outcome.elapsed.as_secs_f64(),
                "adds_per_sec": outcome.adds_per_sec(),
            }));
        }
    }

    if args.selected("add_after/insert") {
        let outcome = Insert {
            items: args.pending,
            low: Duration::from_secs(60),
            span: Duration::from_secs(60),
            seed: args.seed,
        }
        .run(&|| ALLOC.live_bytes());
        eprintln!(
            "{:>8} {:<22} {:>7.2} M inserts/s, {:.1} bytes per pending item ({} pending u64 keys)",
            "ours",
            "add_after/insert",
            outcome.inserts_per_sec() / 1e6,
            outcome.bytes_per_item(),
            outcome.items,
        );
        emit(json!({
            "impl": "ours",
            "workload": "add_after/insert",
            "items": outcome.items,
            "secs": outcome.elapsed.as_secs_f64(),
            "inserts_per_sec": outcome.inserts_per_sec(),
            "heap_bytes": outcome.heap_bytes,
            "bytes_per_item": outcome.bytes_per_item(),
        }));
    }

    if args.selected("add_after/lateness") {
        let outcome = Lateness {
            items: args.lateness_items,
            low: Duration::from_millis(args.lateness_low_ms),
            span: Duration::from_millis(args.lateness_span_ms),
            seed: args.seed,
        }
        .run();
        let micros = |d: Duration| d.as_secs_f64() * 1e6;
        eprintln!(
            "{:>8} {:<22} p50 {:.0} µs, p99 {:.0} µs, max {:.0} µs ({} items)",
            "ours",
            "add_after/lateness",
            micros(outcome.p50),
            micros(outcome.p99),
            micros(outcome.max),
            outcome.items,
        );
        emit(json!({
            "impl": "ours",
            "workload": "add_after/lateness",
            "items": outcome.items,
            "p50_us": micros(outcome.p50),
            "p99_us": micros(outcome.p99),
            "max_us": micros(outcome.max),
        }));
    }
    Ok(())
}

fn emit(line: Value) {
    println!("{line}");
}
