//! `latency-bench`: our side and the edit driver of `make bench-latency` (benches/bench-latency.py).
//!
//! The benchmark restarts a controller over the ConfigMaps of one namespace and, while the
//! controller drains its initial list, edits some of them at a steady rate; it reports how
//! long each live edit waited for its reconcile, and how long the initial items waited.
//! Two subcommands, each printing JSON lines on stdout (progress and errors on stderr):
//!
//! * `controller` — our manager with one controller `For` ConfigMaps, built as a user builds
//!   one with `Controller::new(&manager).complete(reconcile, ctx)`, so it measures whatever
//!   queue the runtime gives controllers by default. Its peer on controller-runtime is
//!   `benches/clientgo/cmd/latency-peer/`; both print the same lines (see [`Recorder`]):
//!   `{"event":"synced",…}` once the cache has synced, `{"event":"live",…}` for every
//!   reconcile of an object carrying this run's edit stamp, and `{"event":"drained",…}` with
//!   every key's first reconcile-start once each cached key has been reconciled once.
//! * `edit` — the driver, the same for both sides: it stamps the annotation
//!   [`STAMP`] = `<run>.<seq>` on one ConfigMap after another at `--rate` a second (merge
//!   patches, each sent on its own schedule, so a slow answer delays no other) and prints
//!   `{"event":"edit","seq":…,"key":…,"sent_unix_ns":…,"acked_unix_ns":…}` per edit. It
//!   lists the objects to edit first and says `{"event":"ready"}`, then starts editing at the
//!   first line on its stdin, so its own start-up is not in the measured window.
//!
//! Both run until their stdin closes (the harness closes it to stop them; a harness that dies
//! stops them too).
//!
//! The reconcile is the same on both sides: it takes the time on entry (the reconcile-start),
//! reads the object from the cache (ours hands it over; the peer reads it through the
//! manager's client), reports a stamp of this run, then does one GET of the object from
//! the API server, the fixed work that makes a 10,000-object initial list take a while to
//! drain with the default single worker. Neither client is rate limited on the client side
//! (controller-runtime's `GetConfig` sets QPS -1; ours is built with no rate limit), so the
//! work is the server's round trip on both.

use std::collections::HashMap;
use std::io::BufRead;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail, ensure};
use clap::{Parser, Subcommand};
use controller_runtime::client::{Api, Client, ClientOptions, ListParams, Patch, PatchParams};
use controller_runtime::config::{Config, KubeconfigOptions};
use controller_runtime::runtime::{
    Action, CacheOptions, Controller, Manager, ManagerOptions, ReconcileError,
};
use k8s_openapi::api::core::v1::ConfigMap;
use parking_lot::Mutex;
use serde_json::json;
use tokio::sync::watch;

/// The annotation each live edit stamps: `<run>.<seq>`.
const STAMP: &str = "bench-latency/seq";

/// Our controller, and the edit driver, of `make bench-latency`.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// The kubeconfig to use; default: as kubectl finds one (`KUBECONFIG`, ~/.kube/config).
    #[arg(long, global = true)]
    kubeconfig: Option<PathBuf>,
    /// The namespace whose ConfigMaps are reconciled and edited.
    #[arg(long, global = true, default_value = "bench-latency")]
    namespace: String,
    /// This run's name: the driver stamps it, the controller reports only its stamps.
    #[arg(long, global = true, default_value = "run")]
    run: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Our controller over the namespace's ConfigMaps, reporting reconcile-starts.
    Controller {
        /// Seconds to wait for the cache to sync and every key to be reconciled once.
        #[arg(long, default_value_t = 600)]
        timeout_secs: u64,
        /// Worker threads of the multi-threaded runtime (Go's GOMAXPROCS is the core count).
        #[arg(long, default_value_t = 2)]
        threads: usize,
    },
    /// Stamps ConfigMaps of the namespace at a steady rate, from the first line on stdin until
    /// stdin closes.
    Edit {
        /// Edits a second.
        #[arg(long, default_value_t = 20.0)]
        rate: f64,
        /// Only ConfigMaps with these labels are edited.
        #[arg(long, default_value = "app=bench-informer")]
        selector: String,
    },
}

fn main() -> Result<()> {
    let started = Instant::now();
    let args = Args::parse();
    ensure!(!args.run.is_empty(), "--run must not be empty");
    let threads = match args.command {
        Command::Controller { threads, .. } => threads,
        Command::Edit { .. } => 2,
    };
    ensure!(threads >= 1, "--threads must be at least 1");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .context("building the tokio runtime")?;
    runtime.block_on(async {
        let config = Config::from_kubeconfig(&KubeconfigOptions {
            path: args.kubeconfig.clone(),
            ..KubeconfigOptions::default()
        })
        .context("loading the kubeconfig")?;
        let stdin = stdin_watch();
        match args.command {
            Command::Controller { timeout_secs, .. } => {
                let timeout = Duration::from_secs(timeout_secs);
                controller(config, &args.namespace, &args.run, started, timeout, stdin).await
            }
            Command::Edit { rate, selector } => {
                ensure!(
                    rate.is_finite() && rate > 0.0,
                    "--rate must be a positive number of edits a second, not {rate}"
                );
                edit(config, &args.namespace, &args.run, rate, &selector, stdin).await
            }
        }
    })
}

/// What the harness has said on stdin so far; each state follows the one before.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Stdin {
    /// Nothing yet.
    Silent,
    /// A first line: go.
    Go,
    /// The end: stop.
    Closed,
}

/// The state of stdin, read on a thread of its own (the runtime has no stdin support here).
fn stdin_watch() -> watch::Receiver<Stdin> {
    let (tx, rx) = watch::channel(Stdin::Silent);
    std::thread::spawn(move || {
        let mut line = String::new();
        let mut stdin = std::io::stdin().lock();
        while matches!(stdin.read_line(&mut line), Ok(n) if n > 0) {
            tx.send_if_modified(|s| {
                let first = *s == Stdin::Silent;
                if first {
                    *s = Stdin::Go;
                }
                first
            });
            line.clear();
        }
        let _ = tx.send(Stdin::Closed);
    });
    rx
}

/// Now as nanoseconds since the Unix epoch: the clock the controller and the driver share.
fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

// === the controller ===

/// What the reconcile needs: the recorder and the API for its one GET.
struct Ctx {
    recorder: Recorder,
    api: Api<ConfigMap>,
}

async fn controller(
    config: Config,
    namespace: &str,
    run: &str,
    started: Instant,
    timeout: Duration,
    mut stdin: watch::Receiver<Stdin>,
) -> Result<()> {
    let options = ManagerOptions {
        cache: CacheOptions {
            namespaces: vec![namespace.to_owned()],
            ..CacheOptions::default()
        },
        client: ClientOptions {
            rate_limit: None,
            ..ClientOptions::default()
        },
        ..ManagerOptions::default()
    };
    let manager = Manager::with_config(config, options).context("building the manager")?;
    let ctx = Arc::new(Ctx {
        recorder: Recorder::new(run, started),
        api: Api::namespaced(manager.client(), namespace),
    });
    Controller::<ConfigMap>::new(&manager).complete(reconcile, ctx.clone())?;
    let store = manager.store::<ConfigMap>()?;

    let (stop, stopping) = watch::channel(false);
    let mut running = {
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

    let deadline = tokio::time::Instant::now() + timeout;
    if tokio::time::timeout_at(deadline, store.wait_synced())
        .await
        .is_err()
    {
        bail!("the cache did not sync within {timeout:?}");
    }
    let want: usize = store.informers().map(|i| i.get_indexer().len()).sum();
    ensure!(
        want > 0,
        "namespace {namespace} holds no ConfigMaps: seed it first"
    );
    println!(
        "{}",
        json!({"event": "synced", "impl": "ours", "objects": want,
               "secs": started.elapsed().as_secs_f64(), "unix_ns": unix_ns()})
    );
    let mut drained = ctx.recorder.want(want);
    tokio::select! {
        _ = tokio::time::sleep_until(deadline) => {
            bail!("{} of {want} ConfigMaps reconciled within {timeout:?}", ctx.recorder.len());
        }
        _ = stdin.wait_for(|s| *s == Stdin::Closed) => {
            bail!("stdin closed before the initial list drained");
        }
        _ = drained.wait_for(|d| *d) => {}
    }
    println!("{}", ctx.recorder.drained_line());

    tokio::select! {
        _ = stdin.wait_for(|s| *s == Stdin::Closed) => {}
        result = &mut running => {
            result.context("the manager's task")??;
            bail!("the manager stopped on its own");
        }
    }
    let _ = stop.send(true);
    running.await.context("the manager's task")??;
    Ok(())
}

/// The reconcile: the start time, the stamp, then one GET from the API server.
async fn reconcile(cm: Arc<ConfigMap>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    let at = unix_ns();
    let name = cm.metadata.name.as_deref().unwrap_or_default();
    let ns = cm.metadata.namespace.as_deref().unwrap_or_default();
    let stamp = cm
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(STAMP))
        .map(String::as_str);
    ctx.recorder.started(&format!("{ns}/{name}"), stamp, at);
    match ctx.api.get(name).await {
        Err(e) if e.is_not_found() => Ok(Action::done()),
        Err(e) => Err(e.into()),
        Ok(_) => Ok(Action::done()),
    }
}

/// Records reconcile-starts: each key's first, relative to the controller's start (the
/// start of `main`), and says when it has seen as many keys as it was told to wait for;
/// prints a `live` line for each reconcile of an object stamped by this run.
struct Recorder {
    run: String,
    started: Instant,
    state: Mutex<RecorderState>,
    drained: watch::Sender<bool>,
}

struct RecorderState {
    first: HashMap<String, Duration>,
    /// Zero until [`Recorder::want`] sets it.
    want: usize,
}

impl Recorder {
    /// A recorder for `run`'s stamps, timing first reconciles from `started`.
    fn new(run: &str, started: Instant) -> Self {
        Recorder {
            run: run.to_owned(),
            started,
            state: Mutex::new(RecorderState {
                first: HashMap::new(),
                want: 0,
            }),
            drained: watch::Sender::new(false),
        }
    }

    /// A reconcile of `key` started at `unix_ns`, its object carrying `stamp`.
    fn started(&self, key: &str, stamp: Option<&str>, unix_ns: u64) {
        let since = self.started.elapsed();
        if let Some(seq) = stamp.and_then(|s| seq_of(s, &self.run)) {
            println!(
                "{}",
                json!({"event": "live", "key": key, "seq": seq, "unix_ns": unix_ns})
            );
        }
        let mut state = self.state.lock();
        if !state.first.contains_key(key) {
            state.first.insert(key.to_owned(), since);
            self.check(&state);
        }
    }

    /// Sets the number of distinct keys to wait for; the receiver turns true once that
    /// many were reconciled (at once if they were already).
    fn want(&self, want: usize) -> watch::Receiver<bool> {
        let rx = self.drained.subscribe();
        let mut state = self.state.lock();
        state.want = want;
        self.check(&state);
        rx
    }

    fn check(&self, state: &RecorderState) {
        if state.want > 0 && state.first.len() >= state.want {
            self.drained
                .send_if_modified(|d| !std::mem::replace(d, true));
        }
    }

    /// Keys reconciled so far.
    fn len(&self) -> usize {
        self.state.lock().first.len()
    }

    /// The `drained` line: every key's first reconcile-start, in seconds from the start.
    fn drained_line(&self) -> serde_json::Value {
        let state = self.state.lock();
        let first: serde_json::Map<String, serde_json::Value> = state
            .first
            .iter()
            .map(|(k, d)| (k.clone(), json!(d.as_secs_f64())))
            .collect();
        json!({"event": "drained", "secs": self.started.elapsed().as_secs_f64(),
               "unix_ns": unix_ns(), "first_start_secs": first})
    }
}

/// The sequence number of a stamp `<run>.<seq>` if it is `run`'s.
///
/// ```text
/// seq_of("r1-ours.42", "r1-ours") == Some(42); seq_of("r0-ours.42", "r1-ours") == None
/// ```
fn seq_of(stamp: &str, run: &str) -> Option<u64> {
    stamp.strip_prefix(run)?.strip_prefix('.')?.parse().ok()
}

// === the driver ===

async fn edit(
    config: Config,
    namespace: &str,
    run: &str,
    rate: f64,
    selector: &str,
    mut stdin: watch::Receiver<Stdin>,
) -> Result<()> {
    let client = Client::new(
        config,
        ClientOptions {
            rate_limit: None,
            ..ClientOptions::default()
        },
    )
    .context("building the client")?;
    let api = Api::<ConfigMap>::namespaced(client, namespace);
    let mut names: Vec<String> = api
        .list_metadata(&ListParams::default().labels(selector))
        .await
        .with_context(|| format!("listing the ConfigMaps of {namespace}"))?
        .items
        .into_iter()
        .filter_map(|m| m.metadata.name)
        .collect();
    ensure!(
        !names.is_empty(),
        "no ConfigMap in {namespace} matches {selector:?}: seed it first"
    );
    names.sort();
    let stride = stride(names.len());
    eprintln!(
        "edit: stamping {} ConfigMaps of {namespace} at {rate}/s from the first line on stdin \
         until it closes",
        names.len()
    );
    println!("{}", json!({"event": "ready", "objects": names.len()}));
    let _ = stdin.wait_for(|s| *s >= Stdin::Go).await;

    let mut ticks = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    let mut edits = tokio::task::JoinSet::<Result<()>>::new();
    let mut seq: u64 = 0;
    loop {
        tokio::select! {
            biased;
            _ = stdin.wait_for(|s| *s == Stdin::Closed) => break,
            _ = ticks.tick() => {}
        }
        let name = names[target(seq, names.len(), stride)].clone();
        let (api, stamp) = (api.clone(), format!("{run}.{seq}"));
        let key = format!("{namespace}/{name}");
        edits.spawn(async move {
            let patch = json!({"metadata": {"annotations": {STAMP: stamp}}});
            let sent = unix_ns();
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .with_context(|| format!("edit {seq}: stamping {key}"))?;
            let acked = unix_ns();
            println!(
                "{}",
                json!({"event": "edit", "seq": seq, "key": key,
                       "sent_unix_ns": sent, "acked_unix_ns": acked})
            );
            Ok(())
        });
        seq += 1;
        while let Some(done) = edits.try_join_next() {
            done.context("an edit's task")??;
        }
    }
    while let Some(done) = edits.join_next().await {
        done.context("an edit's task")??;
    }
    println!("{}", json!({"event": "edits-done", "sent": seq}));
    Ok(())
}

/// A step through `0..n` that visits every index once in `n` steps and spreads neighbours
/// apart: the first number from `0.618 n` up that shares no factor with `n`.
fn stride(n: usize) -> usize {
    let gcd = |mut a: usize, mut b: usize| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    let mut step = ((n as f64 * 0.618) as usize).max(1);
    while gcd(step, n) != 1 {
        step += 1;
    }
    step
}

/// The index of the object edit `seq` stamps.
fn target(seq: u64, n: usize, stride: usize) -> usize {
    ((seq as u128 * stride as u128) % n as u128) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seq_of_reads_only_this_runs_stamps() {
        assert_eq!(seq_of("r1-ours.42", "r1-ours"), Some(42));
        assert_eq!(seq_of("r0-ours.42", "r1-ours"), None);
        assert_eq!(seq_of("r1-ours.42", "r1"), None);
        assert_eq!(seq_of("r1-ours.x", "r1-ours"), None);
    }

    #[test]
    fn targets_visit_every_object_once_before_repeating() {
        for n in [1, 2, 3, 10, 500, 10_000, 10_001] {
            let stride = stride(n);
            let mut seen: Vec<usize> = (0..n as u64).map(|s| target(s, n, stride)).collect();
            seen.sort_unstable();
            assert_eq!(seen, (0..n).collect::<Vec<_>>(), "n = {n}");
            assert_eq!(target(n as u64, n, stride), 0);
        }
    }

    #[test]
    fn consecutive_targets_are_far_apart() {
        let stride = stride(10_000);
        let (a, b) = (target(0, 10_000, stride), target(1, 10_000, stride));
        assert!(b.abs_diff(a) > 1_000, "{a} then {b}");
    }

    #[test]
    fn recorder_counts_each_key_once_and_says_when_drained() {
        let recorder = Recorder::new("r", Instant::now());
        recorder.started("ns/a", None, 1);
        let drained = recorder.want(2);
        recorder.started("ns/a", Some("r.1"), 2);
        assert!(!*drained.borrow());
        recorder.started("ns/b", Some("other.1"), 3);
        assert!(*drained.borrow());
        let line = recorder.drained_line();
        assert_eq!(line["first_start_secs"].as_object().unwrap().len(), 2);
    }

    #[test]
    fn recorder_told_a_count_already_reached_is_drained_at_once() {
        let recorder = Recorder::new("r", Instant::now());
        recorder.started("ns/a", None, 1);
        assert!(*recorder.want(1).borrow());
    }
}
