//! `informer-bench`: `seed` fills the bench namespace; `run` measures a paged LIST and
//! fresh informers against it once and prints one JSON line per result on stdout (progress
//! goes to stderr). `make bench-informer` runs it beside the client-go peer.

use std::path::PathBuf;
use std::time::Duration;

use alloc_counter::CountingAlloc;
use anyhow::{Context, Result, ensure};
use clap::{Parser, Subcommand, ValueEnum};
use controller_runtime::client::{Api, Client, ClientOptions, ListParams, RateLimit, Raw};
use controller_runtime::config::{Config, KubeconfigOptions};
use informer_bench::{
    BenchObject, PodsRunParams, PodsSeedParams, SeedParams, SyncParams, informer_sync, paged_list,
    pods_clean, pods_run, pods_seed, seed, typed_reads,
};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use serde_json::{Value, json};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc::new();

/// Informer initial sync, paged LIST and bytes per cached object, against a cluster.
///
/// `run` prints one JSON object per line on stdout, with the same workload names and fields
/// as the Go peer in benches/clientgo/cmd/informer-peer/.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// The kubeconfig to use; default: as kubectl finds one (`KUBECONFIG`, ~/.kube/config).
    #[arg(long, global = true)]
    kubeconfig: Option<PathBuf>,
    /// The namespace holding the seeded objects.
    #[arg(long, global = true, default_value = "bench-informer")]
    namespace: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create the namespace, the ConfigMaps and the Pods that are missing; wait for the Pods
    /// to run.
    Seed {
        /// ConfigMaps to have.
        #[arg(long, default_value_t = 10_000)]
        configmaps: usize,
        /// Pods to have, all Running.
        #[arg(long, default_value_t = 1_000)]
        pods: usize,
        /// Creates in flight at once.
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
        /// Client-side rate limit while seeding, requests a second (and as many at once).
        #[arg(long, default_value_t = 1_000.0)]
        qps: f64,
    },
    /// Measure once: paged LIST, then an informer per kind, with and without managedFields;
    /// with `--repr raw`, also typed reads of every cached ConfigMap, twice.
    Run {
        /// Items per page of the paged LIST.
        #[arg(long, default_value_t = 500)]
        page_size: u32,
        /// Milliseconds to wait after a sync before reading the heap (the peer waits as long).
        #[arg(long, default_value_t = 200)]
        settle_ms: u64,
        /// Untimed paged LISTs before measuring, to open the connection and warm both ends.
        #[arg(long, default_value_t = 1)]
        warmup: usize,
        /// Worker threads of the multi-threaded runtime.
        #[arg(long, default_value_t = 2)]
        threads: usize,
        /// Seconds an informer may take to sync before the run fails.
        #[arg(long, default_value_t = 120)]
        timeout_secs: u64,
        /// How ConfigMaps are represented in the cache.
        #[arg(long, value_enum, default_value_t = Repr::Typed)]
        repr: Repr,
        /// Run only the workloads whose name contains this text (e.g. `informer/pods`).
        #[arg(long)]
        only: Option<String>,
        /// Ask for JSON only. By default `--repr raw` lists and watches built-in kinds as
        /// protobuf, transcoded into the JSON it caches.
        #[arg(long)]
        json: bool,
    },
    /// `make bench-pods`: create the Pods of the namespace that are missing, bound to the
    /// kwok nodes, and wait until all run.
    PodsSeed {
        /// Pods to have.
        #[arg(long, default_value_t = 100_000)]
        pods: usize,
        /// Creates in flight at once.
        #[arg(long, default_value_t = 64)]
        concurrency: usize,
        /// Seconds to wait for the Pods to run.
        #[arg(long, default_value_t = 1_800)]
        timeout_secs: u64,
    },
    /// `make bench-pods`: one informer over the namespace's Pods, step by step over stdin and
    /// stdout (see `pods_run`).
    PodsRun {
        /// Milliseconds to wait after the sync before the settled figures.
        #[arg(long, default_value_t = 5_000)]
        settle_ms: u64,
        /// Worker threads of the multi-threaded runtime.
        #[arg(long, default_value_t = 2)]
        threads: usize,
        /// Seconds the informer may take to sync before the run fails.
        #[arg(long, default_value_t = 600)]
        timeout_secs: u64,
        /// Ask for JSON only, instead of protobuf transcoded into JSON.
        #[arg(long)]
        json: bool,
    },
    /// `make bench-pods`: delete every Pod of the namespace at once, then the namespace.
    PodsClean {
        /// Deletes in flight at once.
        #[arg(long, default_value_t = 64)]
        concurrency: usize,
    },
}

/// How objects are represented in memory. One arm per representation in [`run_workload`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Repr {
    /// k8s-openapi's structs, fully decoded.
    Typed,
    /// `Raw<K>`: the JSON as the server sent it, decoded on demand.
    Raw,
}

impl Repr {
    fn as_str(self) -> &'static str {
        match self {
            Repr::Typed => "typed",
            Repr::Raw => "raw",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    ConfigMaps,
    Pods,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::ConfigMaps => "configmaps",
            Kind::Pods => "pods",
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Measure {
    /// Paged LIST decoded into typed objects.
    List,
    /// A fresh informer to synced; the heap it holds.
    Informer { strip: bool },
    /// A fresh informer of `Raw<K>`, managedFields stripped (the runtime's cache), synced;
    /// then every object read twice through the typed path. `--repr raw` only.
    TypedReads,
}

#[derive(Clone, Copy, Debug)]
struct Workload {
    kind: Kind,
    measure: Measure,
}

impl Workload {
    /// Every workload, in the order they run; the Go peer runs the same but the last, which
    /// only `Raw` has.
    const ALL: [Workload; 6] = [
        Workload {
            kind: Kind::ConfigMaps,
            measure: Measure::List,
        },
        Workload {
            kind: Kind::ConfigMaps,
            measure: Measure::Informer { strip: false },
        },
        Workload {
            kind: Kind::ConfigMaps,
            measure: Measure::Informer { strip: true },
        },
        Workload {
            kind: Kind::Pods,
            measure: Measure::Informer { strip: false },
        },
        Workload {
            kind: Kind::Pods,
            measure: Measure::Informer { strip: true },
        },
        Workload {
            kind: Kind::ConfigMaps,
            measure: Measure::TypedReads,
        },
    ];

    fn name(&self) -> String {
        match self.measure {
            Measure::List => format!("list/{}", self.kind.as_str()),
            Measure::Informer { strip: false } => format!("informer/{}", self.kind.as_str()),
            Measure::Informer { strip: true } => format!("informer/{}/strip", self.kind.as_str()),
            Measure::TypedReads => format!("informer/{}/strip/typed-reads", self.kind.as_str()),
        }
    }
}

/// What `run` was asked for, once validated.
struct RunParams {
    namespace: String,
    page_size: u32,
    settle: Duration,
    warmup: usize,
    timeout: Duration,
    repr: Repr,
    only: Option<String>,
    /// What the client asked the server for: `protobuf` (for `Raw` of built-in kinds) or
    /// `json`.
    wire: &'static str,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let config = Config::from_kubeconfig(&KubeconfigOptions {
        path: args.kubeconfig.clone(),
        ..KubeconfigOptions::default()
    })
    .context("loading the kubeconfig")?;
    match args.command {
        Command::Seed {
            configmaps,
            pods,
            concurrency,
            qps,
        } => {
            let limit = RateLimit::new(qps, qps.max(1.0) as u32)?;
            let client = Client::new(
                config,
                ClientOptions {
                    rate_limit: Some(limit),
                    ..ClientOptions::default()
                },
            )?;
            let params = SeedParams {
                namespace: args.namespace,
                configmaps,
                pods,
                concurrency,
                timeout: Duration::from_secs(300),
            };
            runtime(2)?.block_on(seed(&client, &params))?;
            eprintln!("seed: done");
            Ok(())
        }
        Command::Run {
            page_size,
            settle_ms,
            warmup,
            threads,
            timeout_secs,
            repr,
            only,
            json,
        } => {
            ensure!(page_size >= 1, "--page-size must be at least 1");
            ensure!(threads >= 1, "--threads must be at least 1");
            // No client-side rate limit, on both sides: a paged LIST is 20-odd requests,
            // and a limit would measure the token bucket, not the list.
            let client = unlimited_client(config, json)?;
            let params = RunParams {
                namespace: args.namespace,
                page_size,
                settle: Duration::from_millis(settle_ms),
                warmup,
                timeout: Duration::from_secs(timeout_secs),
                repr,
                only,
                wire: if json || repr == Repr::Typed {
                    "json"
                } else {
                    "protobuf"
                },
            };
            runtime(threads)?.block_on(run(&client, &params))
        }
        Command::PodsSeed {
            pods,
            concurrency,
            timeout_secs,
        } => {
            let client = unlimited_client(config, false)?;
            let params = PodsSeedParams {
                namespace: args.namespace,
                pods,
                concurrency,
                timeout: Duration::from_secs(timeout_secs),
            };
            runtime(2)?.block_on(pods_seed(&client, &params))?;
            eprintln!("pods-seed: done");
            Ok(())
        }
        Command::PodsRun {
            settle_ms,
            threads,
            timeout_secs,
            json,
        } => {
            ensure!(threads >= 1, "--threads must be at least 1");
            let client = unlimited_client(config, json)?;
            let params = PodsRunParams {
                namespace: args.namespace,
                settle: Duration::from_millis(settle_ms),
                timeout: Duration::from_secs(timeout_secs),
            };
            runtime(threads)?.block_on(pods_run(&client, &params, || ALLOC.live_bytes()))?;
            Ok(())
        }
        Command::PodsClean { concurrency } => {
            let client = unlimited_client(config, false)?;
            runtime(2)?.block_on(pods_clean(
                &client,
                &args.namespace,
                concurrency,
                Duration::from_secs(1_800),
            ))?;
            Ok(())
        }
    }
}

/// A client without a client-side rate limit, on JSON only if `json`: a limit would measure
/// the token bucket, not the cluster.
fn unlimited_client(config: Config, json: bool) -> Result<Client> {
    let options = ClientOptions {
        rate_limit: None,
        protobuf: !json,
        ..ClientOptions::default()
    };
    Ok(Client::new(config, options)?)
}

fn runtime(threads: usize) -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .context("building the tokio runtime")
}

async fn run(client: &Client, params: &RunParams) -> Result<()> {
    let configmaps = Api::<ConfigMap>::namespaced(client.clone(), &params.namespace);
    for _ in 0..params.warmup {
        paged_list(&configmaps, params.page_size)
            .await
            .context("warm-up LIST")?;
    }
    let probe = configmaps.list(&ListParams::default().limit(1)).await?;
    ensure!(
        !probe.items.is_empty(),
        "namespace {} holds no ConfigMaps: run `informer-bench seed` first",
        params.namespace
    );

    for workload in Workload::ALL {
        let name = workload.name();
        if params
            .only
            .as_deref()
            .is_some_and(|only| !name.contains(only))
            || (matches!(workload.measure, Measure::TypedReads) && params.repr != Repr::Raw)
        {
            continue;
        }
        let line = run_workload(client, params, workload)
            .await
            .with_context(|| format!("workload {name}"))?;
        println!("{line}");
    }
    Ok(())
}

/// Runs one workload on the type `params.repr` and `workload.kind` pick. A new
/// representation is one more arm here and a [`BenchObject`] impl.
async fn run_workload(client: &Client, params: &RunParams, workload: Workload) -> Result<Value> {
    if let Measure::TypedReads = workload.measure {
        return match workload.kind {
            Kind::ConfigMaps => measure_typed_reads::<ConfigMap>(client, params, workload).await,
            Kind::Pods => measure_typed_reads::<Pod>(client, params, workload).await,
        };
    }
    match (params.repr, workload.kind) {
        (Repr::Typed, Kind::ConfigMaps) => measure::<ConfigMap>(client, params, workload).await,
        (Repr::Typed, Kind::Pods) => measure::<Pod>(client, params, workload).await,
        (Repr::Raw, Kind::ConfigMaps) => measure::<Raw<ConfigMap>>(client, params, workload).await,
        (Repr::Raw, Kind::Pods) => measure::<Raw<Pod>>(client, params, workload).await,
    }
}

async fn measure<K: BenchObject>(
    client: &Client,
    params: &RunParams,
    workload: Workload,
) -> Result<Value> {
    let name = workload.name();
    let mut line = json!({
        "impl": "ours",
        "workload": name,
        "repr": params.repr.as_str(),
        "wire": params.wire,
    });
    match workload.measure {
        Measure::List => {
            let api = Api::<K>::namespaced(client.clone(), &params.namespace);
            let outcome = paged_list(&api, params.page_size).await?;
            eprintln!(
                "{:>9} {:<26} {:>8.1} ms  ({} items, {} pages of {})",
                "ours",
                name,
                outcome.elapsed.as_secs_f64() * 1e3,
                outcome.items,
                outcome.pages,
                params.page_size
            );
            line["objects"] = outcome.items.into();
            line["pages"] = outcome.pages.into();
            line["secs"] = outcome.elapsed.as_secs_f64().into();
        }
        Measure::Informer { strip } => {
            let sync = SyncParams {
                namespace: params.namespace.clone(),
                strip_managed_fields: strip,
                settle: params.settle,
                timeout: params.timeout,
            };
            let outcome = informer_sync::<K>(client, &sync, || ALLOC.live_bytes()).await?;
            eprintln!(
                "{:>9} {:<26} {:>8.1} ms  {:>8.0} bytes/object  ({} objects)",
                "ours",
                name,
                outcome.elapsed.as_secs_f64() * 1e3,
                outcome.bytes_per_object(),
                outcome.objects
            );
            line["objects"] = outcome.objects.into();
            line["secs"] = outcome.elapsed.as_secs_f64().into();
            line["heap_bytes"] = outcome.heap_bytes.into();
            line["bytes_per_object"] = outcome.bytes_per_object().into();
        }
        Measure::TypedReads => unreachable!("run_workload measures typed reads itself"),
    }
    Ok(line)
}

/// The typed-reads workload: see [`typed_reads`].
async fn measure_typed_reads<K>(
    client: &Client,
    params: &RunParams,
    workload: Workload,
) -> Result<Value>
where
    K: k8s_openapi::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let name = workload.name();
    let sync = SyncParams {
        namespace: params.namespace.clone(),
        strip_managed_fields: true,
        settle: params.settle,
        timeout: params.timeout,
    };
    let o = typed_reads::<K>(client, &sync, &ALLOC).await?;
    let objects = o.sync.objects;
    let per_object_ns = |d: Duration| d.as_secs_f64() * 1e9 / objects.max(1) as f64;
    eprintln!(
        "{:>9} {:<26} {:>8.0} → {:.0} bytes/object; reads {:.0} then {:.0} ns/object; \
         decoded {}→{}/{objects}, same Arc {}/{objects}, {} allocations in the second read",
        "ours",
        name,
        o.sync.bytes_per_object(),
        o.bytes_per_object_after_reads(),
        per_object_ns(o.first_read),
        per_object_ns(o.second_read),
        o.decoded_before,
        o.decoded_after,
        o.same_arc,
        o.second_read_allocations,
    );
    ensure!(
        o.decoded_after == objects && o.same_arc == objects,
        "the typed reads did not keep every decode: {} decoded, {} same Arc, of {objects}",
        o.decoded_after,
        o.same_arc
    );
    Ok(json!({
        "impl": "ours",
        "workload": name,
        "repr": params.repr.as_str(),
        "wire": params.wire,
        "objects": objects,
        "secs": o.sync.elapsed.as_secs_f64(),
        "heap_bytes": o.sync.heap_bytes,
        "bytes_per_object": o.sync.bytes_per_object(),
        "heap_bytes_after_reads": o.heap_bytes_after_reads,
        "bytes_per_object_after_reads": o.bytes_per_object_after_reads(),
        "first_read_secs": o.first_read.as_secs_f64(),
        "second_read_secs": o.second_read.as_secs_f64(),
        "first_read_ns_per_object": per_object_ns(o.first_read),
        "second_read_ns_per_object": per_object_ns(o.second_read),
        "decoded_before": o.decoded_before,
        "decoded_after": o.decoded_after,
        "same_arc": o.same_arc,
        "second_read_allocations": o.second_read_allocations,
    }))
}
