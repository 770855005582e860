//! `operator-bench`: the driver of `make bench-operator` (benches/bench-operator.py). It acts
//! on the cluster as a user would and times what the operator under test does, seen from
//! outside, so ours and controller-runtime's (`benches/clientgo/cmd/operator-peer`) are
//! measured by the same code. Each subcommand prints JSON lines on stdout:
//!
//! * `install-crd` — applies the `Memcached` CRD (server-side) and waits until it is served.
//! * `start` — creates the namespace and one `Memcached`, watches for its Deployment, and
//!   says `{"event":"watching"}` once the watch runs (the harness then spawns the operator),
//!   `{"event":"deployment","unix_secs":…}` the moment the Deployment appears (the first
//!   reconcile's effect), and `{"event":"converged",…}` once it has converged (see
//!   [`converged`]).
//! * `patch-latency` — patches the resource's `spec.size` back and forth between two values;
//!   each latency runs from just before the patch is sent to the Deployment watch event that
//!   shows `spec.replicas` at the new size. Before the next patch it waits until the
//!   resource's status says the operator has seen that generation. With `--paired-with`
//!   the resources of several namespaces (each under its own operator) take turns, one
//!   patch at a time, so every operator is measured under the same cluster load.
//! * `seed` — creates N `Memcached` resources of one size.
//! * `wait-converged` — waits until every `Memcached` of the namespace has converged. With
//!   `--count-writes` it says `{"event":"watching"}` once its watches run (the harness then
//!   seeds), and its last line adds `writes`: the operator's writes it saw, by verb and
//!   resource (see [`Writes`]). With `--progress` it says `{"event":"watching"}` too,
//!   then how many have converged each time that number rises.
//! * `cleanup` — deletes the namespace and waits until it has gone; with
//!   `--strip-finalizers` (when no operator runs) it first removes the finalizer of every
//!   resource and deletes the resources, Deployments, ReplicaSets and Pods, sixteen requests
//!   at a time.
//! * `cleanup-stale` — `cleanup --strip-finalizers` of every namespace a run left behind
//!   (labelled `bench-operator=true`).
//!
//! The client has no client-side rate limit, so the driver never waits on itself.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail, ensure};
use clap::{Parser, Subcommand};
use controller_runtime::client::{
    Api, Client, ClientOptions, DeleteParams, ListParams, Patch, PatchParams, PostParams,
    WatchEvent, WatchObject, WatchParams,
};
use controller_runtime::config::{Config, KubeconfigOptions};
use k8s_openapi::Metadata;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use memcached_operator::api::{Memcached, MemcachedSpec};
use memcached_operator::reconcile::FINALIZER;
use serde_json::json;
use tokio::sync::mpsc;

/// The label on every namespace the driver creates, so a later run can find leftovers.
const NAMESPACE_LABEL: (&str, &str) = ("bench-operator", "true");

/// Drives a Memcached operator and times it from outside.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// The kubeconfig to use; default: as kubectl finds one (`KUBECONFIG`, ~/.kube/config).
    #[arg(long, global = true)]
    kubeconfig: Option<PathBuf>,
    /// The namespace to work in.
    #[arg(long, global = true, default_value = "bench-operator")]
    namespace: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Apply the Memcached CRD and wait until the API server serves it.
    InstallCrd,
    /// Create the namespace and one Memcached; report when the watch runs, when the
    /// Deployment appears and when it has converged.
    Start {
        /// The Memcached's name.
        #[arg(long, default_value = "first")]
        name: String,
        /// Its spec.size.
        #[arg(long, default_value_t = 1)]
        size: i32,
        /// Give up after this many seconds.
        #[arg(long, default_value_t = 120)]
        timeout_secs: u64,
    },
    /// Patch spec.size back and forth and time each patch to the Deployment's replicas.
    PatchLatency {
        /// The Memcached's name.
        #[arg(long, default_value = "first")]
        name: String,
        /// How many patches.
        #[arg(long, default_value_t = 200)]
        count: usize,
        /// The two sizes to alternate between (the first patch sets whichever the resource
        /// does not have).
        #[arg(long, value_delimiter = ',', default_value = "1,2")]
        sizes: Vec<i32>,
        /// Milliseconds to wait after the operator has seen one patch before sending the
        /// next.
        #[arg(long, default_value_t = 0)]
        gap_ms: u64,
        /// Give up when one patch is not seen through within this many seconds.
        #[arg(long, default_value_t = 30)]
        timeout_secs: u64,
        /// Further namespaces, each with a resource of the same name under another
        /// operator: their patches interleave with this namespace's, one at a time, the
        /// order turning each time, so that both operators meet the same cluster load.
        /// One result line per namespace.
        #[arg(long, value_delimiter = ',')]
        paired_with: Vec<String>,
    },
    /// Create Memcached resources named PREFIX-0 … PREFIX-(COUNT-1).
    Seed {
        /// How many.
        #[arg(long, default_value_t = 1000)]
        count: usize,
        /// Their spec.size.
        #[arg(long, default_value_t = 1)]
        size: i32,
        /// Their name's prefix.
        #[arg(long, default_value = "mc")]
        prefix: String,
        /// Creates in flight at once.
        #[arg(long, default_value_t = 16)]
        concurrency: usize,
    },
    /// Wait until every Memcached of the namespace has converged.
    WaitConverged {
        /// How many Memcached resources the namespace must hold.
        #[arg(long)]
        count: usize,
        /// Give up after this many seconds.
        #[arg(long, default_value_t = 300)]
        timeout_secs: u64,
        /// Count only the resources whose name starts with this (default: every one).
        #[arg(long, default_value = "")]
        prefix: String,
        /// Also watch the namespace's Events, say `{"event":"watching"}` once the watches
        /// run, and report the operator's writes seen until every resource converged.
        #[arg(long)]
        count_writes: bool,
        /// Say `{"event":"watching"}` once the watches run, and then
        /// `{"event":"progress","converged":N,"unix_secs":…}` each time more of them have
        /// converged (the harness acts on a share of them).
        #[arg(long)]
        progress: bool,
    },
    /// Delete the namespace and wait until it has gone.
    Cleanup {
        /// Remove the finalizer of resources being deleted (when no operator runs).
        #[arg(long)]
        strip_finalizers: bool,
        /// Give up after this many seconds.
        #[arg(long, default_value_t = 300)]
        timeout_secs: u64,
    },
    /// Delete every namespace labelled bench-operator=true, stripping finalizers.
    CleanupStale {
        /// Give up after this many seconds.
        #[arg(long, default_value_t = 300)]
        timeout_secs: u64,
    },
}

fn main() -> Result<()> {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("building the tokio runtime")?;
    runtime.block_on(run(args))
}

async fn run(args: Args) -> Result<()> {
    let config = Config::from_kubeconfig(&KubeconfigOptions {
        path: args.kubeconfig.clone(),
        ..KubeconfigOptions::default()
    })
    .context("loading the kubeconfig")?;
    let client = Client::new(
        config,
        ClientOptions {
            rate_limit: None,
            ..ClientOptions::default()
        },
    )
    .context("building the client")?;
    let ns = args.namespace.as_str();
    match args.command {
        Command::InstallCrd => memcached_operator::install_crd(&client, secs(60))
            .await
            .context("installing the Memcached CRD"),
        Command::Start {
            name,
            size,
            timeout_secs,
        } => start(&client, ns, &name, size, secs(timeout_secs)).await,
        Command::PatchLatency {
            name,
            count,
            sizes,
            gap_ms,
            timeout_secs,
            paired_with,
        } => {
            ensure!(
                sizes.len() == 2 && sizes[0] != sizes[1],
                "--sizes needs two different sizes"
            );
            let namespaces: Vec<&str> = [ns]
                .into_iter()
                .chain(paired_with.iter().map(String::as_str))
                .collect();
            let run = LatencyRun {
                count,
                sizes: (sizes[0], sizes[1]),
                gap: Duration::from_millis(gap_ms),
                timeout: secs(timeout_secs),
            };
            patch_latency(&client, &namespaces, &name, &run).await
        }
        Command::Seed {
            count,
            size,
            prefix,
            concurrency,
        } => seed(&client, ns, count, size, &prefix, concurrency).await,
        Command::WaitConverged {
            count,
            timeout_secs,
            prefix,
            count_writes,
            progress,
        } => {
            let wait = Wait {
                count,
                prefix,
                timeout: secs(timeout_secs),
                count_writes,
                progress,
            };
            wait_converged(&client, ns, &wait).await
        }
        Command::Cleanup {
            strip_finalizers,
            timeout_secs,
        } => cleanup(&client, ns, strip_finalizers, secs(timeout_secs)).await,
        Command::CleanupStale { timeout_secs } => {
            let namespaces = Api::<Namespace>::cluster(client.clone());
            let selector = format!("{}={}", NAMESPACE_LABEL.0, NAMESPACE_LABEL.1);
            let stale = namespaces
                .list(&ListParams::default().labels(&selector))
                .await?;
            for namespace in stale.items {
                let name = namespace.metadata.name.unwrap_or_default();
                eprintln!("operator-bench: removing namespace {name}, left by an earlier run");
                cleanup(&client, &name, true, secs(timeout_secs)).await?;
            }
            Ok(())
        }
    }
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// Seconds since the Unix epoch, as Python's `time.time()` reads the same clock.
fn unix_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Prints one JSON line on stdout (flushed: stdout is line-buffered per `println!`).
fn emit(value: &serde_json::Value) {
    println!("{value}");
}

// === start ===

async fn start(client: &Client, ns: &str, name: &str, size: i32, timeout: Duration) -> Result<()> {
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(ns.to_owned()),
            labels: Some([(NAMESPACE_LABEL.0, NAMESPACE_LABEL.1)].map(owned).into()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    Api::<Namespace>::cluster(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .with_context(|| format!("creating namespace {ns}"))?;
    memcacheds(client, ns)
        .create(&PostParams::default(), &memcached(name, size))
        .await
        .with_context(|| format!("creating Memcached {ns}/{name}"))?;

    let by_name = format!("metadata.name={name}");
    let mut watch = Watched::start(client, ns, Some(&by_name)).await?;
    emit(&json!({"event": "watching"}));
    let deadline = Instant::now() + timeout;
    let mut announced = false;
    loop {
        let (at, change) = watch.next(deadline).await.with_context(|| {
            format!(
                "waiting for the Deployment of {ns}/{name}{}",
                if announced { " to converge" } else { "" }
            )
        })?;
        watch.apply(change);
        if !announced && watch.deployments.contains_key(name) {
            announced = true;
            emit(&json!({"event": "deployment", "unix_secs": at}));
        }
        if watch.converged_count() == 1 {
            emit(&json!({"event": "converged", "unix_secs": unix_secs()}));
            return Ok(());
        }
    }
}

// === patch-latency ===

/// What one `patch-latency` run does.
struct LatencyRun {
    count: usize,
    sizes: (i32, i32),
    gap: Duration,
    timeout: Duration,
}

/// Patches the resource `name` of each namespace `count` times, one patch at a time: with
/// several namespaces they take turns, the first to go changing every time. Emits one result
/// per namespace, in the order given.
async fn patch_latency(
    client: &Client,
    namespaces: &[&str],
    name: &str,
    run: &LatencyRun,
) -> Result<()> {
    let mut targets = Vec::with_capacity(namespaces.len());
    for ns in namespaces {
        targets.push(Target::start(client, ns, name).await?);
    }
    for i in 0..run.count {
        for t in 0..targets.len() {
            let target = &mut targets[(t + i) % namespaces.len()];
            target.patch_once(i, run).await?;
            if !run.gap.is_zero() {
                tokio::time::sleep(run.gap).await;
            }
        }
    }
    for target in targets {
        target.emit();
    }
    Ok(())
}

/// One resource whose patches are timed.
struct Target {
    api: Api<Memcached>,
    namespace: String,
    name: String,
    watch: Watched,
    size: i32,
    /// From each patch sent to its Deployment watch event.
    latencies: Vec<Duration>,
    /// The patch request alone, answered by the API server: the floor under each latency.
    round_trips: Vec<Duration>,
}

impl Target {
    async fn start(client: &Client, ns: &str, name: &str) -> Result<Target> {
        let api = memcacheds(client, ns);
        let by_name = format!("metadata.name={name}");
        let watch = Watched::start(client, ns, Some(&by_name)).await?;
        let size = api.get(name).await?.spec.size();
        Ok(Target {
            api,
            namespace: ns.to_owned(),
            name: name.to_owned(),
            watch,
            size,
            latencies: Vec::new(),
            round_trips: Vec::new(),
        })
    }

    /// Patch `i`: sets the other size, times it to the Deployment, then waits for the
    /// operator's status to observe it.
    async fn patch_once(&mut self, i: usize, run: &LatencyRun) -> Result<()> {
        let (ns, name) = (&self.namespace, &self.name);
        let next = if self.size == run.sizes.0 {
            run.sizes.1
        } else {
            run.sizes.0
        };
        let patch = json!({"spec": {"size": next}});
        let sent = Instant::now();
        let patched = self
            .api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .with_context(|| format!("patch {i}: setting the size of {ns}/{name} to {next}"))?;
        self.round_trips.push(sent.elapsed());
        let generation = patched.metadata.generation.unwrap_or_default();
        let deadline = sent + run.timeout;
        // The Deployment at the new size: the latency.
        let seen = loop {
            let (_, change) = self.watch.next(deadline).await.with_context(|| {
                format!("patch {i}: waiting for Deployment {ns}/{name} to have {next} replicas")
            })?;
            let arrived = change.arrived;
            self.watch.apply(change);
            if self.watch.replicas(name) == Some(next) && arrived > sent {
                break arrived;
            }
        };
        self.latencies.push(seen - sent);
        // The operator's pass ends with the status; wait for it before the next patch.
        while self.watch.observed_generation(name) < Some(generation) {
            let (_, change) = self.watch.next(deadline).await.with_context(|| {
                format!("patch {i}: waiting for the status of {ns}/{name} to observe generation {generation}")
            })?;
            self.watch.apply(change);
        }
        self.size = next;
        Ok(())
    }

    fn emit(mut self) {
        self.latencies.sort();
        self.round_trips.sort();
        let (latencies, round_trips) = (&self.latencies, &self.round_trips);
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let mean = latencies.iter().map(|d| ms(*d)).sum::<f64>() / latencies.len().max(1) as f64;
        emit(&json!({
            "event": "patch-latency",
            "namespace": self.namespace,
            "count": latencies.len(),
            "p50_ms": ms(percentile(latencies, 50)),
            "p99_ms": ms(percentile(latencies, 99)),
            "max_ms": ms(latencies.last().copied().unwrap_or_default()),
            "min_ms": ms(latencies.first().copied().unwrap_or_default()),
            "mean_ms": mean,
            "patch_rtt_p50_ms": ms(percentile(round_trips, 50)),
            "patch_rtt_p99_ms": ms(percentile(round_trips, 99)),
        }));
    }
}

/// The nearest-rank percentile `p` of sorted `samples` (zero for none).
fn percentile(sorted: &[Duration], p: usize) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (p * sorted.len()).div_ceil(100).max(1);
    sorted[rank.min(sorted.len()) - 1]
}

// === seed and wait-converged ===

async fn seed(
    client: &Client,
    ns: &str,
    count: usize,
    size: i32,
    prefix: &str,
    concurrency: usize,
) -> Result<()> {
    let begin = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..concurrency.max(1) {
        let (api, next, prefix) = (memcacheds(client, ns), next.clone(), prefix.to_owned());
        workers.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    return Ok::<_, anyhow::Error>(());
                }
                let name = format!("{prefix}-{i}");
                api.create(&PostParams::default(), &memcached(&name, size))
                    .await
                    .with_context(|| format!("creating Memcached {name}"))?;
            }
        });
    }
    while let Some(done) = workers.join_next().await {
        done.context("a seeding task")??;
    }
    emit(&json!({"event": "seeded", "count": count, "secs": begin.elapsed().as_secs_f64()}));
    Ok(())
}

/// What one `wait-converged` waits for.
struct Wait {
    /// How many resources (named with `prefix`) the namespace must hold, all converged.
    count: usize,
    prefix: String,
    timeout: Duration,
    /// Whether to count the operator's writes.
    count_writes: bool,
    /// Whether to report each rise of the number converged.
    progress: bool,
}

async fn wait_converged(client: &Client, ns: &str, wait: &Wait) -> Result<()> {
    let (count, prefix) = (wait.count, wait.prefix.as_str());
    let begin = Instant::now();
    let deadline = begin + wait.timeout;
    let mut watch = if wait.count_writes {
        let watch = Watched::start_counting(client, ns).await?;
        emit(&json!({"event": "watching"}));
        watch
    } else {
        let watch = Watched::start(client, ns, None).await?;
        if wait.progress {
            emit(&json!({"event": "watching"}));
        }
        watch
    };
    let mut reported = 0;
    loop {
        let named = |n: &&String| n.starts_with(prefix);
        let converged = watch.converged.iter().filter(named).count();
        if wait.progress && converged > reported {
            reported = converged;
            emit(&json!({"event": "progress", "converged": converged, "unix_secs": unix_secs()}));
        }
        if converged >= count && watch.memcacheds.keys().filter(named).count() == count {
            break;
        }
        match watch.next(deadline).await {
            Ok((_, change)) => watch.apply(change),
            Err(error) => bail!(
                "{converged} of {count} Memcached resources in {ns} converged ({} exist, {} \
                 Deployments): {error:#}",
                watch.memcacheds.len(),
                watch.deployments.len()
            ),
        }
    }
    let mut done = json!({
        "event": "converged",
        "count": count,
        "secs": begin.elapsed().as_secs_f64(),
        "unix_secs": unix_secs(),
    });
    if let Some(writes) = &watch.writes {
        done["writes"] = json!(writes.counts);
    }
    emit(&done);
    Ok(())
}

// === cleanup ===

async fn cleanup(
    client: &Client,
    ns: &str,
    strip_finalizers: bool,
    timeout: Duration,
) -> Result<()> {
    let begin = Instant::now();
    let namespaces = Api::<Namespace>::cluster(client.clone());
    let api = memcacheds(client, ns);
    // Seconds each phase took, for the record.
    let mut phases = serde_json::Map::new();
    let mut mark = Instant::now();
    let mut phase = |name: &str| {
        phases.insert(name.to_owned(), json!(mark.elapsed().as_secs_f64()));
        mark = Instant::now();
    };
    if strip_finalizers {
        // No operator runs: its finalizers go first, then the objects, all many at a time,
        // so the namespace is empty by the time it is deleted.
        strip_all_finalizers(&api, false).await?;
        phase("finalizers_secs");
        delete_all(api.clone()).await?;
        delete_all(Api::<Deployment>::namespaced(client.clone(), ns)).await?;
        delete_all(Api::<ReplicaSet>::namespaced(client.clone(), ns)).await?;
        delete_all(Api::<Pod>::namespaced(client.clone(), ns)).await?;
        phase("objects_secs");
    }
    match namespaces.delete(ns, &DeleteParams::default()).await {
        Err(e) if e.is_not_found() => {}
        other => {
            other.with_context(|| format!("deleting namespace {ns}"))?;
        }
    }
    while namespaces.get_opt(ns).await?.is_some() {
        if begin.elapsed() > timeout {
            let left = api.list(&ListParams::default()).await?.items.len();
            bail!("namespace {ns} still there after {timeout:?} ({left} Memcached resources left)");
        }
        if strip_finalizers {
            // Any created meanwhile.
            strip_all_finalizers(&api, true).await?;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    phase("namespace_secs");
    emit(&json!({
        "event": "cleaned",
        "secs": begin.elapsed().as_secs_f64(),
        "phases": phases,
    }));
    Ok(())
}

/// Removes the finalizers of the namespace's Memcached resources (only of those being
/// deleted with `deleted_only`), sixteen requests in flight.
async fn strip_all_finalizers(api: &Api<Memcached>, deleted_only: bool) -> Result<()> {
    let names = api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|mc| !deleted_only || mc.metadata.deletion_timestamp.is_some())
        .filter(|mc| {
            mc.metadata
                .finalizers
                .as_ref()
                .is_some_and(|f| !f.is_empty())
        })
        .filter_map(|mc| mc.metadata.name)
        .collect();
    let api = api.clone();
    each(names, move |name| {
        let api = api.clone();
        async move {
            let patch = json!({"metadata": {"finalizers": null}});
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Err(e) if e.is_not_found() => Ok(()),
                other => other
                    .map(drop)
                    .with_context(|| format!("removing the finalizer of {name}")),
            }
        }
    })
    .await
}

/// Deletes every object of `api`'s kind in its namespace, sixteen requests in flight, rather
/// than leaving them to the namespace controller and the garbage collector, which take their
/// time over a thousand.
async fn delete_all<K>(api: Api<K>) -> Result<()>
where
    K: WatchObject
        + serde::Serialize
        + Metadata<Ty = ObjectMeta>
        + k8s_openapi::Resource
        + Send
        + Sync
        + 'static,
{
    let names = api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|o| o.metadata().name.clone())
        .collect();
    each(names, move |name| {
        let api = api.clone();
        async move {
            match api.delete(&name, &DeleteParams::background()).await {
                Err(e) if e.is_not_found() => Ok(()),
                other => other
                    .map(drop)
                    .with_context(|| format!("deleting {} {name}", K::KIND)),
            }
        }
    })
    .await
}

/// Runs `op` on every name, sixteen at a time; the first error ends it.
async fn each<F, Fut>(names: Vec<String>, op: F) -> Result<()>
where
    F: Fn(String) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<()>> + Send,
{
    let names = Arc::new(names);
    let next = Arc::new(AtomicUsize::new(0));
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..16 {
        let (names, next, op) = (names.clone(), next.clone(), op.clone());
        workers.spawn(async move {
            while let Some(name) = names.get(next.fetch_add(1, Ordering::Relaxed)) {
                op(name.clone()).await?;
            }
            Ok::<_, anyhow::Error>(())
        });
    }
    while let Some(done) = workers.join_next().await {
        done.context("a cleanup task")??;
    }
    Ok(())
}

// === the Memcached resources ===

fn memcacheds(client: &Client, ns: &str) -> Api<Memcached> {
    Api::namespaced(client.clone(), ns)
}

fn memcached(name: &str, size: i32) -> Memcached {
    Memcached::new(
        name,
        MemcachedSpec {
            size: Some(size),
            container_port: memcached_operator::api::DEFAULT_PORT,
            image: None,
        },
    )
}

fn owned((k, v): (&str, &str)) -> (String, String) {
    (k.to_owned(), v.to_owned())
}

/// Whether a resource and its Deployment have converged: the Deployment exists with
/// `spec.replicas` at the size and as many ready replicas, its controller has seen its
/// generation, and the resource's status (written by the operator) says the same: its
/// generation observed, the ready replicas and one Pod name per replica, and our finalizer
/// on it.
pub fn converged(mc: &Memcached, deployment: Option<&Deployment>) -> bool {
    let size = mc.spec.size();
    let Some(deployment) = deployment else {
        return false;
    };
    let spec_replicas = deployment.spec.as_ref().and_then(|s| s.replicas);
    let status = deployment.status.as_ref();
    let deployment_ok = spec_replicas == Some(size)
        && status.and_then(|s| s.ready_replicas).unwrap_or(0) == size
        && status.and_then(|s| s.observed_generation) == deployment.metadata.generation;
    let finalized = mc
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == FINALIZER);
    let observed = mc.status.as_ref().is_some_and(|s| {
        s.observed_generation == mc.metadata.generation
            && s.ready_replicas.unwrap_or(0) == size
            && s.nodes.len() == usize::try_from(size).unwrap_or(0)
    });
    deployment_ok && finalized && observed
}

// === watching Memcached resources and Deployments ===

/// One watch event, stamped when it arrived.
struct Change {
    arrived: Instant,
    unix_secs: f64,
    what: Kind,
}

enum Kind {
    Memcached(Box<WatchEvent<Memcached>>),
    Deployment(Box<WatchEvent<Deployment>>),
    Event(Box<WatchEvent<Event>>),
}

/// The operator's writes, counted from the watches of one namespace, by verb and resource:
/// each watch event is one write that changed something, and its kind and what changed
/// say which. A Memcached's new finalizers are a `patch memcacheds`, its new status a
/// `patch memcacheds/status` (the two are written apart: a status write cannot change
/// the finalizers, nor the other the status); a new Deployment is a `create deployments`,
/// one whose generation moved an `update deployments` (the cluster's controllers write
/// only its status, which is not counted); an Event of the operator's a `create events`,
/// its change (a series' count) a `patch events`. Writes that changed nothing make no event
/// and are not seen here: the operator's own request counts (`rest_client_requests_total`)
/// hold them.
#[derive(Debug, Default)]
struct Writes {
    counts: std::collections::BTreeMap<&'static str, u64>,
}

/// The `reportingController` of both operators' Events.
const REPORTING_CONTROLLER: &str = "memcached-controller";

impl Writes {
    fn add(&mut self, what: &'static str) {
        *self.counts.entry(what).or_default() += 1;
    }

    /// Counts a Memcached's event, `before` being the copy held until then.
    fn memcached(&mut self, before: Option<&Memcached>, event: &WatchEvent<Memcached>) {
        let (WatchEvent::Modified(after), Some(before)) = (event, before) else {
            return; // the driver's create, or a deletion
        };
        let status = |mc: &Memcached| serde_json::to_value(&mc.status).unwrap_or_default();
        if before.metadata.finalizers != after.metadata.finalizers {
            self.add("patch memcacheds");
        } else if status(before) != status(after) {
            self.add("patch memcacheds/status");
        }
    }

    /// Counts a Deployment's event, `before` being the copy held until then.
    fn deployment(&mut self, before: Option<&Deployment>, event: &WatchEvent<Deployment>) {
        match (event, before) {
            (WatchEvent::Added(_), None) => self.add("create deployments"),
            (WatchEvent::Modified(after), Some(before))
                if before.metadata.generation != after.metadata.generation =>
            {
                self.add("update deployments");
            }
            _ => {}
        }
    }

    /// Counts an Event's event, if the operator reported it.
    fn event(&mut self, event: &WatchEvent<Event>) {
        let ours = |e: &Event| e.reporting_controller.as_deref() == Some(REPORTING_CONTROLLER);
        match event {
            WatchEvent::Added(e) if ours(e) => self.add("create events"),
            WatchEvent::Modified(e) if ours(e) => self.add("patch events"),
            _ => {}
        }
    }
}

/// The Memcached resources and Deployments of a namespace, kept up to date by two watches
/// whose events are stamped on arrival by their own tasks (so an event that arrives while
/// the caller awaits something else keeps its true time).
struct Watched {
    memcacheds: HashMap<String, Memcached>,
    deployments: HashMap<String, Deployment>,
    /// The names of the resources that have converged, kept up to date event by event.
    converged: HashSet<String>,
    events: mpsc::UnboundedReceiver<Result<Change>>,
    /// With [`start_counting`](Self::start_counting): the writes seen.
    writes: Option<Writes>,
}

impl Watched {
    /// Lists both kinds (`fields` selecting by name, or all), then watches from there.
    async fn start(client: &Client, ns: &str, fields: Option<&str>) -> Result<Watched> {
        let (tx, events) = mpsc::unbounded_channel();
        Self::start_with(client, ns, fields, tx, events).await
    }

    /// As [`start`](Self::start) for the whole namespace, also watching its Events, and
    /// counting the operator's [`Writes`] from then on.
    async fn start_counting(client: &Client, ns: &str) -> Result<Watched> {
        let (tx, events) = mpsc::unbounded_channel();
        let api = Api::<Event>::namespaced(client.clone(), ns);
        list_then_watch(api, None, tx.clone(), |event| Kind::Event(Box::new(event))).await?;
        let mut watched = Self::start_with(client, ns, None, tx, events).await?;
        watched.writes = Some(Writes::default());
        Ok(watched)
    }

    async fn start_with(
        client: &Client,
        ns: &str,
        fields: Option<&str>,
        tx: mpsc::UnboundedSender<Result<Change>>,
        events: mpsc::UnboundedReceiver<Result<Change>>,
    ) -> Result<Watched> {
        let memcacheds = list_then_watch(memcacheds(client, ns), fields, tx.clone(), |event| {
            Kind::Memcached(Box::new(event))
        })
        .await?;
        let deployments = list_then_watch(
            Api::<Deployment>::namespaced(client.clone(), ns),
            fields,
            tx,
            |event| Kind::Deployment(Box::new(event)),
        )
        .await?;
        let mut watched = Watched {
            memcacheds,
            deployments,
            converged: HashSet::new(),
            events,
            writes: None,
        };
        let names: Vec<String> = watched.memcacheds.keys().cloned().collect();
        for name in names {
            watched.recount(name);
        }
        Ok(watched)
    }

    /// The next event, with its arrival time as Unix seconds, or an error at `deadline`.
    async fn next(&mut self, deadline: Instant) -> Result<(f64, Change)> {
        let wait = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(wait, self.events.recv()).await {
            Err(_) => bail!("timed out"),
            Ok(None) => bail!("the watches ended"),
            Ok(Some(change)) => {
                let change = change?;
                Ok((change.unix_secs, change))
            }
        }
    }

    fn apply(&mut self, change: Change) {
        if let Some(writes) = &mut self.writes {
            match &change.what {
                Kind::Memcached(event) => {
                    writes.memcached(
                        event_name(event).and_then(|n| self.memcacheds.get(n)),
                        event,
                    );
                }
                Kind::Deployment(event) => {
                    let before = event_name(event).and_then(|n| self.deployments.get(n));
                    writes.deployment(before, event);
                }
                Kind::Event(event) => writes.event(event),
            }
        }
        let name = match change.what {
            Kind::Memcached(event) => apply_event(&mut self.memcacheds, *event),
            Kind::Deployment(event) => apply_event(&mut self.deployments, *event),
            Kind::Event(_) => None,
        };
        if let Some(name) = name {
            self.recount(name);
        }
    }

    /// Brings the converged set up to date for the resource `name`.
    fn recount(&mut self, name: String) {
        let now = self
            .memcacheds
            .get(&name)
            .is_some_and(|mc| converged(mc, self.deployments.get(&name)));
        if now {
            self.converged.insert(name);
        } else {
            self.converged.remove(&name);
        }
    }

    fn replicas(&self, name: &str) -> Option<i32> {
        self.deployments.get(name)?.spec.as_ref()?.replicas
    }

    fn observed_generation(&self, name: &str) -> Option<i64> {
        self.memcacheds
            .get(name)?
            .status
            .as_ref()?
            .observed_generation
    }

    /// How many resources have converged with their Deployment.
    fn converged_count(&self) -> usize {
        self.converged.len()
    }
}

/// The name of the object an event is about (none for a bookmark).
fn event_name<K: Metadata<Ty = ObjectMeta>>(event: &WatchEvent<K>) -> Option<&str> {
    match event {
        WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => {
            o.metadata().name.as_deref()
        }
        WatchEvent::Bookmark(_) => None,
    }
}

/// Applies one event to `objects`; the name of the object it changed.
fn apply_event<K: Metadata<Ty = ObjectMeta>>(
    objects: &mut HashMap<String, K>,
    event: WatchEvent<K>,
) -> Option<String> {
    match event {
        WatchEvent::Added(o) | WatchEvent::Modified(o) => {
            let name = o.metadata().name.clone().unwrap_or_default();
            objects.insert(name.clone(), o);
            Some(name)
        }
        WatchEvent::Deleted(o) => {
            let name = o.metadata().name.clone().unwrap_or_default();
            objects.remove(&name);
            Some(name)
        }
        WatchEvent::Bookmark(_) => None,
    }
}

/// Lists `api`'s objects, then starts a task forwarding its watch from the list's version,
/// each event wrapped by `wrap` and stamped on arrival.
async fn list_then_watch<K>(
    api: Api<K>,
    fields: Option<&str>,
    tx: mpsc::UnboundedSender<Result<Change>>,
    wrap: fn(WatchEvent<K>) -> Kind,
) -> Result<HashMap<String, K>>
where
    K: WatchObject + Metadata<Ty = ObjectMeta> + Send + 'static,
{
    let mut list_params = ListParams::default();
    let mut watch_params = WatchParams::default();
    if let Some(fields) = fields {
        list_params = list_params.fields(fields);
        watch_params = watch_params.fields(fields);
    }
    let list = api.list_all(&list_params).await?;
    let mut version = list.metadata.resource_version.clone().unwrap_or_default();
    let mut stream = api
        .watch(&watch_params.clone().from_version(&version))
        .await?;
    tokio::spawn(async move {
        loop {
            let event = match stream.next().await {
                // The server ends a watch when it likes (its timeout, a watcher it finds
                // too slow under load): go on from the last version seen, as a reflector
                // does; a 410 there (the version compacted away) fails the watch.
                None => match api
                    .watch(&watch_params.clone().from_version(&version))
                    .await
                {
                    Ok(again) => {
                        stream = again;
                        continue;
                    }
                    Err(e) => Err(anyhow::Error::new(e).context(format!(
                        "the watch of {} ended, and could not go on from {version}",
                        api.collection_path()
                    ))),
                },
                Some(Err(e)) => Err(anyhow::Error::new(e).context("the watch failed")),
                Some(Ok(event)) => {
                    let seen = match &event {
                        WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => {
                            o.metadata().resource_version.clone()
                        }
                        WatchEvent::Bookmark(b) => Some(b.metadata.resource_version.clone()),
                    };
                    version = seen.unwrap_or(version);
                    Ok(Change {
                        arrived: Instant::now(),
                        unix_secs: unix_secs(),
                        what: wrap(event),
                    })
                }
            };
            let last = event.is_err();
            if tx.send(event).is_err() || last {
                return;
            }
        }
    });
    let objects = list
        .items
        .into_iter()
        .map(|o| (o.metadata().name.clone().unwrap_or_default(), o))
        .collect();
    Ok(objects)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{DeploymentSpec, DeploymentStatus};
    use memcached_operator::api::MemcachedStatus;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn percentile_is_the_nearest_rank() {
        let samples: Vec<Duration> = (1..=200).map(ms).collect();
        assert_eq!(percentile(&samples, 50), ms(100));
        assert_eq!(percentile(&samples, 99), ms(198));
        assert_eq!(percentile(&samples[..1], 99), ms(1));
        assert_eq!(percentile(&[], 50), Duration::ZERO);
    }

    fn converged_pair(size: i32) -> (Memcached, Deployment) {
        let mut mc = memcached("a", size);
        mc.metadata.generation = Some(2);
        mc.metadata.finalizers = Some(vec![FINALIZER.to_owned()]);
        mc.status = Some(MemcachedStatus {
            observed_generation: Some(2),
            ready_replicas: Some(size),
            nodes: (0..size).map(|i| format!("a-{i}")).collect(),
            ..MemcachedStatus::default()
        });
        let deployment = Deployment {
            metadata: ObjectMeta {
                generation: Some(3),
                ..ObjectMeta::default()
            },
            spec: Some(DeploymentSpec {
                replicas: Some(size),
                ..DeploymentSpec::default()
            }),
            status: Some(DeploymentStatus {
                observed_generation: Some(3),
                ready_replicas: (size > 0).then_some(size),
                ..DeploymentStatus::default()
            }),
        };
        (mc, deployment)
    }

    #[test]
    fn a_resource_converges_when_its_deployment_and_status_agree_with_its_size() {
        for size in [0, 1, 2] {
            let (mc, deployment) = converged_pair(size);
            assert!(converged(&mc, Some(&deployment)), "size {size}");
            assert!(!converged(&mc, None));
        }
    }

    #[test]
    fn a_resource_has_not_converged_while_any_part_lags() {
        let (mc, deployment) = converged_pair(2);
        let mut scaled = deployment.clone();
        scaled.spec.as_mut().unwrap().replicas = Some(1);
        let mut unready = deployment.clone();
        unready.status.as_mut().unwrap().ready_replicas = Some(1);
        let mut unobserved = deployment.clone();
        unobserved.metadata.generation = Some(4);
        for lagging in [scaled, unready, unobserved] {
            assert!(!converged(&mc, Some(&lagging)));
        }
        let mut stale = mc.clone();
        stale.metadata.generation = Some(3);
        let mut no_finalizer = mc.clone();
        no_finalizer.metadata.finalizers = None;
        let mut one_node = mc.clone();
        one_node.status.as_mut().unwrap().nodes.pop();
        for lagging in [stale, no_finalizer, one_node] {
            assert!(!converged(&lagging, Some(&deployment)));
        }
    }
}
