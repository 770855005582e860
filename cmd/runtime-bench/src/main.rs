//! `runtime-bench`: our manager with one no-op controller over the ConfigMaps of one
//! namespace, timed from the start of `main` until every ConfigMap has been reconciled once,
//! then the process's resident memory; one JSON line on stdout, the same fields as the
//! controller-runtime peer (`benches/clientgo/cmd/runtime-peer/`). `make bench-runtime` runs
//! the two alternately.
//!
//! The manager is built as a user builds one, with its defaults except: the cache limited
//! to `--namespace` and no client-side rate limit (controller-runtime's `GetConfig` sets
//! QPS -1; ours defaults to 20/s, bursts of 30, which a run that makes three requests never
//! reaches). Metrics and probes are off and there is no leader election, as by default. The
//! cache strips managedFields and lists and watches as protobuf, as by default.
//!
//! The reconcile gets the object from the cache (the runtime reads it before calling,
//! decoding the cached JSON; with `--keep-typed` the cache keeps what it decoded) and counts
//! distinct keys. When the count reaches
//! `--expect`, the clock stops and a line `{"event":"reconciled"}` goes to stdout at once
//! (the harness times the run from spawning the process to it); `--settle-ms` later VmRSS
//! and VmHWM are read from `/proc/self/status` as the kernel reports them.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use clap::Parser;
use controller_runtime::client::ClientOptions;
use controller_runtime::config::{Config, KubeconfigOptions};
use controller_runtime::runtime::{
    Action, CacheOptions, Controller, Manager, ManagerOptions, ReconcileError,
};
use k8s_openapi::api::core::v1::ConfigMap;
use parking_lot::Mutex;
use serde_json::json;
use tokio::sync::watch;

/// Start to every ConfigMap reconciled once, and resident memory, for our manager.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// The kubeconfig to use; default: as kubectl finds one (`KUBECONFIG`, ~/.kube/config).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// The namespace whose ConfigMaps are reconciled.
    #[arg(long, default_value = "bench-informer")]
    namespace: String,
    /// ConfigMaps in the namespace: the clock stops when this many distinct keys were
    /// reconciled (0: as many as the cache holds once synced).
    #[arg(long, default_value_t = 0)]
    expect: usize,
    /// Milliseconds to wait after the last reconcile before reading the resident memory
    /// (the peer waits as long).
    #[arg(long, default_value_t = 200)]
    settle_ms: u64,
    /// Seconds to wait for every ConfigMap to be reconciled before failing.
    #[arg(long, default_value_t = 120)]
    timeout_secs: u64,
    /// Worker threads of the multi-threaded runtime (Go's GOMAXPROCS is the core count, 2).
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Exit as soon as the memory is read, without stopping the manager: for profiling the
    /// start alone (`perf record`), without the teardown of the cache.
    #[arg(long)]
    exit_at_once: bool,
    /// Keep each object's typed form in the cache once decoded (`CacheOptions::keep_typed`).
    #[arg(long)]
    keep_typed: bool,
    /// Turn read-your-own-writes off (`CacheOptions::read_your_writes`): reads do not wait
    /// for the manager's own writes, and its informers carry no watermark handler.
    #[arg(long)]
    no_read_your_writes: bool,
}

impl Args {
    /// The name the JSON line gives this configuration.
    fn impl_name(&self) -> &'static str {
        match (self.keep_typed, self.no_read_your_writes) {
            (false, false) => "ours",
            (true, false) => "ours/keep",
            (false, true) => "ours/no-ryw",
            (true, true) => "ours/keep/no-ryw",
        }
    }
}

/// What one run measured.
struct Outcome {
    reconciled: usize,
    /// From the start of `main` to the last distinct key reconciled.
    elapsed: Duration,
    /// From the start of `main` to the manager built (kubeconfig read, client made).
    built: Duration,
    /// From the start of `main` to the cache synced.
    synced: Duration,
    rss: u64,
    hwm: u64,
}

fn main() -> Result<()> {
    let started = Instant::now();
    let args = Args::parse();
    ensure!(args.threads >= 1, "--threads must be at least 1");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads)
        .enable_all()
        .build()
        .context("building the tokio runtime")?;
    let outcome = runtime.block_on(run(&args, started))?;
    print_outcome(&outcome, args.impl_name());
    Ok(())
}

/// The progress line on stderr and the JSON line on stdout.
fn print_outcome(outcome: &Outcome, name: &str) {
    eprintln!(
        "ours: {} reconciled in {:.1} ms (manager built at {:.1} ms, cache synced at {:.1} ms), \
         rss {:.1} MiB, peak {:.1} MiB",
        outcome.reconciled,
        outcome.elapsed.as_secs_f64() * 1e3,
        outcome.built.as_secs_f64() * 1e3,
        outcome.synced.as_secs_f64() * 1e3,
        mib(outcome.rss),
        mib(outcome.hwm),
    );
    let line = json!({
        "impl": name,
        "workload": "runtime/configmaps",
        "objects": outcome.reconciled,
        "secs": outcome.elapsed.as_secs_f64(),
        "built_secs": outcome.built.as_secs_f64(),
        "synced_secs": outcome.synced.as_secs_f64(),
        "rss_bytes": outcome.rss,
        "hwm_bytes": outcome.hwm,
    });
    println!("{line}");
}

async fn run(args: &Args, started: Instant) -> Result<Outcome> {
    let config = Config::from_kubeconfig(&KubeconfigOptions {
        path: args.kubeconfig.clone(),
        ..KubeconfigOptions::default()
    })
    .context("loading the kubeconfig")?;
    let options = ManagerOptions {
        cache: CacheOptions {
            namespaces: vec![args.namespace.clone()],
            keep_typed: args.keep_typed,
            read_your_writes: !args.no_read_your_writes,
            ..CacheOptions::default()
        },
        client: ClientOptions {
            rate_limit: None,
            ..ClientOptions::default()
        },
        ..ManagerOptions::default()
    };
    let manager = Manager::with_config(config, options).context("building the manager")?;
    let built = started.elapsed();
    let counter = Arc::new(Counter::new());
    Controller::<ConfigMap>::new(&manager).complete(reconcile, counter.clone())?;
    let store = manager.store::<ConfigMap>()?;

    let (stop, stopping) = watch::channel(false);
    let running = {
        let manager = manager.clone();
        let mut stopping = stopping.clone();
        tokio::spawn(async move {
            manager
                .run_until(async move {
                    let _ = stopping.wait_for(|s| *s).await;
                })
                .await
        })
    };

    let timeout = Duration::from_secs(args.timeout_secs);
    let deadline = tokio::time::Instant::now() + timeout;
    if tokio::time::timeout_at(deadline, store.wait_synced())
        .await
        .is_err()
    {
        bail!("the cache did not sync within {timeout:?}");
    }
    let synced = started.elapsed();
    let want = match args.expect {
        0 => store.informers().map(|i| i.get_indexer().len()).sum(),
        n => n,
    };
    let mut done = counter.want(want);
    tokio::select! {
        _ = tokio::time::sleep_until(deadline) => {
            bail!("{} of {want} ConfigMaps reconciled within {timeout:?}", counter.len());
        }
        _ = done.wait_for(|d| *d) => {}
    }
    let elapsed = started.elapsed();
    // Told at once (stdout flushes each line), so the harness can time the run from
    // spawning the process.
    println!(r#"{{"event":"reconciled"}}"#);

    tokio::time::sleep(Duration::from_millis(args.settle_ms)).await;
    let status = std::fs::read_to_string("/proc/self/status").context("reading VmRSS")?;
    let (rss, hwm) = parse_status(&status).context("parsing /proc/self/status")?;
    let outcome = Outcome {
        reconciled: counter.len(),
        elapsed,
        built,
        synced,
        rss,
        hwm,
    };
    if args.exit_at_once {
        print_outcome(&outcome, args.impl_name());
        std::process::exit(0);
    }
    let _ = stop.send(true);
    running.await.context("the manager's task")??;
    Ok(outcome)
}

/// The no-op reconcile: the object came from the cache; count its key.
async fn reconcile(cm: Arc<ConfigMap>, counter: Arc<Counter>) -> Result<Action, ReconcileError> {
    let ns = cm.metadata.namespace.as_deref().unwrap_or_default();
    let name = cm.metadata.name.as_deref().unwrap_or_default();
    counter.add(format!("{ns}/{name}"));
    Ok(Action::done())
}

/// Counts distinct keys, and says when it has seen the number it was told to wait for.
struct Counter {
    state: Mutex<CounterState>,
    done: watch::Sender<bool>,
}

struct CounterState {
    seen: HashSet<String>,
    /// Zero until [`Counter::want`] sets it.
    want: usize,
}

impl Counter {
    fn new() -> Self {
        Counter {
            state: Mutex::new(CounterState {
                seen: HashSet::new(),
                want: 0,
            }),
            done: watch::Sender::new(false),
        }
    }

    /// Sets the count to reach; the receiver turns true once it is reached (at once if it
    /// is already).
    fn want(&self, want: usize) -> watch::Receiver<bool> {
        let rx = self.done.subscribe();
        let mut state = self.state.lock();
        state.want = want;
        self.check(&state);
        rx
    }

    fn add(&self, key: String) {
        let mut state = self.state.lock();
        state.seen.insert(key);
        self.check(&state);
    }

    fn check(&self, state: &CounterState) {
        if state.want > 0 && state.seen.len() >= state.want {
            self.done.send_if_modified(|d| !std::mem::replace(d, true));
        }
    }

    fn len(&self) -> usize {
        self.state.lock().seen.len()
    }
}

/// VmRSS and VmHWM (peak), in bytes, from the text of `/proc/<pid>/status`.
fn parse_status(status: &str) -> Result<(u64, u64)> {
    let field = |name: &str| -> Result<u64> {
        let line = status
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .with_context(|| format!("no {name}"))?;
        let kb = line.trim().trim_end_matches("kB").trim();
        Ok(kb
            .parse::<u64>()
            .with_context(|| format!("{name}: {kb:?}"))?
            * 1024)
    };
    Ok((field("VmRSS")?, field("VmHWM")?))
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1 << 20)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_status_reads_rss_and_peak_in_bytes() {
        let status =
            "Name:\truntime-bench\nVmHWM:\t   20480 kB\nVmRSS:\t   10240 kB\nThreads:\t3\n";
        assert_eq!(parse_status(status).unwrap(), (10 << 20, 20 << 20));
    }

    #[test]
    fn parse_status_without_rss_is_an_error() {
        assert!(parse_status("Name:\tx\n").is_err());
    }

    #[test]
    fn counter_is_done_once_it_has_seen_enough_distinct_keys() {
        let counter = Counter::new();
        counter.add("a".into());
        let done = counter.want(2);
        counter.add("a".into());
        assert!(!*done.borrow());
        counter.add("b".into());
        assert!(*done.borrow());
        assert_eq!(counter.len(), 2);
    }

    #[test]
    fn counter_told_a_count_already_reached_is_done_at_once() {
        let counter = Counter::new();
        counter.add("a".into());
        assert!(*counter.want(1).borrow());
    }
}
