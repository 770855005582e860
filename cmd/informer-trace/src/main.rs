//! `informer-trace` shows an informer working live against any cluster, one line per step:
//! what the reflector does (list pages, watch starts, bookmarks, relists and why), what it
//! writes into the DeltaFIFO, the deltas each pop hands over per key and what they do to the
//! indexer, and every few seconds the FIFO's depth and the indexer's size and namespace index.
//!
//! ```text
//! informer-trace ConfigMap -n default
//! informer-trace Deployment --api-version apps/v1 --duration 60
//! ```
//!
//! It wires the pieces as a shared informer does, without the handlers, so each hand-over is
//! visible: ListerWatcher → Reflector → DeltaFIFO → pop → Indexer.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use controller_runtime::client::{Api, ApiListerWatcher, Client, ClientOptions, DynamicObject};
use controller_runtime::config::{Config, KubeconfigOptions};
use controller_runtime::informer::{
    DeltaFifo, DeltaFifoOptions, DeltaType, Deltas, Indexer, NAMESPACE_INDEX, Object, Reflector,
    ReflectorOptions, ReflectorStore, Trace, key_of, namespace_indexers,
};
use tokio::time::Instant;

/// Watch an informer's internals live.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// The kind to follow, e.g. ConfigMap, Pod, Deployment.
    kind: String,
    /// The kind's API version.
    #[arg(long, default_value = "v1")]
    api_version: String,
    /// Only this namespace (all namespaces when omitted).
    #[arg(short, long)]
    namespace: Option<String>,
    /// Only objects with these labels, e.g. `app=web`.
    #[arg(short = 'l', long)]
    selector: Option<String>,
    /// The kubeconfig to use (default: as kubectl finds it).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// The context to use (default: the current context).
    #[arg(long)]
    context: Option<String>,
    /// Resync every this many seconds.
    #[arg(long)]
    resync: Option<u64>,
    /// List with classic paged LIST instead of a streaming list (WatchList).
    #[arg(long)]
    no_watch_list: bool,
    /// Print a summary of the FIFO and the indexer every this many seconds.
    #[arg(long, default_value_t = 10)]
    summary_every: u64,
    /// Stop after this many seconds (default: run until Ctrl-C).
    #[arg(long)]
    duration: Option<u64>,
}

/// Prints one trace line: time since start, the component, what happened.
#[derive(Clone)]
struct Printer(Instant);

impl Printer {
    fn line(&self, component: &str, message: std::fmt::Arguments<'_>) {
        println!(
            "{:>9.3}s  {component:<9} {message}",
            self.0.elapsed().as_secs_f64()
        );
    }
}

fn describe(obj: &DynamicObject) -> String {
    format!("{}@{}", key_of(obj), obj.resource_version().unwrap_or("?"))
}

/// The DeltaFIFO, with a line for everything the reflector writes into it.
struct TracedFifo {
    fifo: DeltaFifo<DynamicObject>,
    out: Printer,
}

impl ReflectorStore<DynamicObject> for TracedFifo {
    fn add(&self, o: DynamicObject) {
        let d = describe(&o);
        self.fifo.add(o);
        self.out.line(
            "fifo",
            format_args!("← Added {d} (depth {})", self.fifo.len()),
        );
    }
    fn update(&self, o: DynamicObject) {
        let d = describe(&o);
        self.fifo.update(o);
        self.out.line(
            "fifo",
            format_args!("← Updated {d} (depth {})", self.fifo.len()),
        );
    }
    fn delete(&self, o: DynamicObject) {
        let d = describe(&o);
        self.fifo.delete(o);
        self.out.line(
            "fifo",
            format_args!("← Deleted {d} (depth {})", self.fifo.len()),
        );
    }
    fn replace(&self, objects: Vec<DynamicObject>, rv: &str) {
        let n = objects.len();
        self.fifo.replace(objects, rv);
        self.out.line(
            "fifo",
            format_args!(
                "← Replace {n} objects at rv {rv}; missing keys become tombstones (depth {})",
                self.fifo.len()
            ),
        );
    }
    fn resync(&self) {
        self.fifo.resync();
        self.out.line(
            "fifo",
            format_args!(
                "← Resync: Sync deltas for known keys (depth {})",
                self.fifo.len()
            ),
        );
    }
    fn bookmark(&self, rv: &str) {
        self.out
            .line("fifo", format_args!("bookmark at rv {rv}: nothing queued"));
    }
}

fn trace_line(out: &Printer, t: &Trace) {
    let r = "reflector";
    match t {
        Trace::ListPage {
            resource_version,
            limit,
            continued,
            items,
        } => out.line(
            r,
            format_args!(
                "LIST {} rv={} limit={} → {items} items",
                if *continued {
                    "next page"
                } else {
                    "first page"
                },
                resource_version
                    .as_deref()
                    .map_or("\"\" (consistent read)".into(), |v| format!("{v:?}")),
                limit.map_or("none".into(), |l| l.to_string()),
            ),
        ),
        Trace::Listed {
            items,
            resource_version,
        } => out.line(
            r,
            format_args!("listed {items} objects at rv {resource_version} → Replace"),
        ),
        Trace::ListFailed {
            error,
            from_scratch,
        } => out.line(
            r,
            format_args!(
                "LIST failed: {error}{}",
                if *from_scratch {
                    "; listing again from scratch (rv \"\")"
                } else {
                    ""
                }
            ),
        ),
        Trace::FullListFallback => out.line(
            r,
            format_args!("continue token expired; listing once more in full"),
        ),
        Trace::StreamListStarted { resource_version } => out.line(
            r,
            format_args!(
                "streaming list (sendInitialEvents) from rv {}",
                resource_version.as_deref().unwrap_or("\"\" (latest)")
            ),
        ),
        Trace::StreamListFailed { error, fallback } => out.line(
            r,
            format_args!(
                "streaming list failed: {error}; {}",
                if *fallback {
                    "falling back to LIST"
                } else {
                    "retrying after a backoff"
                }
            ),
        ),
        Trace::WatchStarted {
            resource_version,
            timeout_seconds,
        } => out.line(
            r,
            format_args!("WATCH from rv {resource_version} (server timeout {timeout_seconds}s)"),
        ),
        Trace::Bookmark { resource_version } => {
            out.line(r, format_args!("bookmark: now at rv {resource_version}"))
        }
        Trace::WatchEnded { events, reason } => out.line(
            r,
            format_args!("watch ended after {events} events: {reason:?}"),
        ),
        Trace::Resync => out.line(r, format_args!("resync period passed")),
        Trace::Backoff { delay } => out.line(
            r,
            format_args!(
                "backing off {:.1}s before the next attempt",
                delay.as_secs_f64()
            ),
        ),
    }
}

/// Applies one key's deltas to the indexer, as the shared informer's processDeltas does,
/// and says what happened.
fn apply(
    indexer: &Indexer<DynamicObject>,
    deltas: Deltas<DynamicObject>,
    initial: bool,
    out: &Printer,
) {
    let key = deltas.key().clone();
    let kinds: Vec<String> = deltas
        .iter()
        .map(|d| match d.object.object() {
            Some(o) => format!(
                "{}@{}",
                d.kind.as_str(),
                o.resource_version().unwrap_or("?")
            ),
            None => format!("{}(tombstone)", d.kind.as_str()),
        })
        .collect();
    let mut effect = String::new();
    for delta in deltas.iter() {
        match (delta.kind, delta.object.object()) {
            (DeltaType::Deleted, _) => {
                indexer.remove(&key);
                effect = "delete".into();
            }
            (_, Some(obj)) => {
                let old = indexer.insert(&key, obj.clone());
                effect = match old {
                    Some(old) if old.resource_version() == obj.resource_version() => {
                        "resync (same rv)".into()
                    }
                    Some(_) => "update".into(),
                    None => "add".into(),
                };
            }
            (_, None) => {}
        }
    }
    out.line(
        "pop",
        format_args!(
            "{key}: [{}]{} → indexer {effect} (size {})",
            kinds.join(", "),
            if initial { " (initial list)" } else { "" },
            indexer.len()
        ),
    );
}

fn summary(fifo: &DeltaFifo<DynamicObject>, indexer: &Indexer<DynamicObject>, out: &Printer) {
    let namespaces = indexer.list_index_func_values(NAMESPACE_INDEX);
    let mut counts: Vec<String> = namespaces
        .iter()
        .map(|ns| {
            let n = indexer
                .index_keys(NAMESPACE_INDEX, ns)
                .map_or(0, |k| k.len());
            format!("{}={n}", if ns.is_empty() { "(cluster)" } else { ns })
        })
        .collect();
    counts.sort();
    out.line(
        "summary",
        format_args!(
            "fifo depth {}, synced {}; indexer {} objects; namespace index: {}",
            fifo.len(),
            fifo.has_synced(),
            indexer.len(),
            if counts.is_empty() {
                "empty".into()
            } else {
                counts.join(" ")
            }
        ),
    );
}

async fn run(args: Args) -> anyhow::Result<()> {
    let config = if args.kubeconfig.is_some() || args.context.is_some() {
        Config::from_kubeconfig(&KubeconfigOptions {
            path: args.kubeconfig.clone(),
            context: args.context.clone(),
            ..KubeconfigOptions::default()
        })?
    } else {
        Config::infer()?
    };
    let source = config.source.clone();
    let client = Client::new(config, ClientOptions::default())?;
    let resource = client
        .resolve(&args.api_version, &args.kind)
        .await
        .with_context(|| {
            format!(
                "finding {} {} on the server ({source})",
                args.api_version, args.kind
            )
        })?;
    let namespace = args.namespace.as_deref().filter(|_| resource.namespaced);
    let out = Printer(Instant::now());
    out.line(
        "start",
        format_args!(
            "following {} ({}) {} on {} ({source})",
            resource.kind,
            resource.api_version,
            namespace.map_or("in all namespaces".to_owned(), |ns| format!(
                "in namespace {ns}"
            )),
            client.base_url()
        ),
    );

    let mut lw = ApiListerWatcher::new(Api::<DynamicObject>::dynamic(client, &resource, namespace));
    if let Some(selector) = &args.selector {
        lw = lw.labels(selector);
    }
    let indexer = Indexer::new(namespace_indexers());
    let fifo = DeltaFifo::with_options(DeltaFifoOptions {
        known_objects: Some(Arc::new(indexer.clone())),
        emit_delta_type_replaced: true,
        ..DeltaFifoOptions::default()
    });
    let printer = out.clone();
    let reflector = Reflector::new(
        lw,
        TracedFifo {
            fifo: fifo.clone(),
            out: out.clone(),
        },
        ReflectorOptions {
            name: resource.plural.clone(),
            resync_period: args.resync.map(Duration::from_secs),
            watch_list: !args.no_watch_list,
            ..ReflectorOptions::default()
        },
    )
    .on_trace(move |t| trace_line(&printer, t));

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut stop = stop_rx.clone();
    let reflector = tokio::spawn(reflector.run(async move {
        let _ = stop.wait_for(|s| *s).await;
    }));
    let (pop_fifo, pop_indexer, pop_out) = (fifo.clone(), indexer.clone(), out.clone());
    let popper = tokio::spawn(async move {
        while pop_fifo
            .pop(|deltas, initial| apply(&pop_indexer, deltas, initial, &pop_out))
            .await
            .is_ok()
        {}
    });

    let deadline = args
        .duration
        .map(|s| Instant::now() + Duration::from_secs(s));
    let mut ticker = tokio::time::interval(Duration::from_secs(args.summary_every.max(1)));
    ticker.tick().await;
    loop {
        tokio::select! {
            _ = ticker.tick() => summary(&fifo, &indexer, &out),
            _ = tokio::signal::ctrl_c() => break,
            () = async {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            } => break,
        }
    }
    summary(&fifo, &indexer, &out);
    let _ = stop_tx.send(true);
    fifo.close();
    let _ = reflector.await;
    let _ = popper.await;
    out.line("stop", format_args!("done"));
    Ok(())
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    if let Err(e) = run(args).await {
        eprintln!("informer-trace: {e:#}");
        std::process::exit(1);
    }
}
