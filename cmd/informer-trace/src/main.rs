//! `informer-trace` runs a shared informer against any cluster and shows what it does, one
//! line per step, all from the informer's own trace hooks:
//!
//! * `reflector`: what the reflector does (list pages, watch starts, bookmarks, relists and
//!   why);
//! * `pop`: each pop: the key, its deltas (`Replaced@123` is a delta type and the object's
//!   resourceVersion), what the informer did with each — the change to the cache and the
//!   handlers notified (the tool registers one, which does nothing) — and the cache's size;
//! * `summary`, every few seconds: the FIFO's depth and queue (the keys in pop order, each
//!   with its pending deltas), the cache's size, and every index's values with the number of
//!   keys under each — the namespace index, and one label index per `--index-label`.
//!
//! ```text
//! informer-trace ConfigMap -n default
//! informer-trace Pod -n default --index-label app --index-label pod-template-hash
//! informer-trace Deployment --api-version apps/v1 --duration 60
//! informer-trace ConfigMap -n default --pop-delay 5   # a slow consumer: watch events pile up
//! informer-trace ConfigMap -n default --pop-delay 5 --delta-fifo   # the same on the DeltaFIFO
//! ```
//!
//! The informer pops from the in-order RealFIFO, as client-go 1.36's do: one event per pop,
//! as the server sent them, a relist as one item (the trace shows a pop line per key it
//! touched). `--delta-fifo` selects the classic DeltaFIFO, which keeps one entry per key.
//!
//! A sample, with `--no-watch-list --index-label x --pop-delay 1 --summary-every 3
//! --delta-fifo`: a LIST, then, while the informer pops slowly, `before` is labelled, and
//! `during` is created and deleted. `--pop-delay` sets [`InformerOptions::pop_delay`], so the
//! DeltaFIFO's per-key lists of deltas become visible.
//!
//! ```text
//!     0.004s  reflector LIST first page rv="0" limit=500 → 2 items
//!     0.004s  reflector listed 2 objects at rv 584 → Replace
//!     0.004s  reflector WATCH from rv 584 (server timeout 308s)
//!     1.003s  pop       demo/before: [Replaced@584] (initial list) → add (1 handler); cache 1
//!     2.008s  pop       demo/kube-root-ca.crt: [Replaced@583] (initial list) → add (1 handler); cache 2
//!     3.002s  summary   fifo depth 2, synced true; indexer 2 objects
//!     3.002s  summary   fifo queue (depth 2, in pop order):
//!     3.002s  summary      1. demo/before  [Updated@586]
//!     3.002s  summary      2. demo/during  [Added@587, Deleted@588]
//!     3.002s  summary   index namespace: demo=2
//!     3.002s  summary   index label:x: no values
//!     3.011s  pop       demo/before: [Updated@586] → update (1 handler); cache 2
//!     4.016s  pop       demo/during: [Added@587, Deleted@588] → add (1 handler), delete (1 handler); cache 2
//! ```

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use controller_runtime::client::{Api, ApiListerWatcher, Client, ClientOptions, DynamicObject};
use controller_runtime::config::{Config, KubeconfigOptions};
use controller_runtime::informer::{
    Delta, DeltaType, FifoKind, HandlerFns, IndexFunc, Indexer, Indexers, InformerOptions,
    NAMESPACE_INDEX, Object, PopAction, PopTrace, QueueSnapshot, QueuedDelta, SharedIndexInformer,
    Trace,
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
    /// Also index objects by the value of this label (repeatable); the summary shows each
    /// index's values, as the index `label:KEY`.
    #[arg(long = "index-label", value_name = "KEY", value_parser = parse_label_key)]
    index_labels: Vec<String>,
    /// Show at most this many keys when printing the FIFO's queue.
    #[arg(long, value_name = "N", default_value_t = 10)]
    fifo_lines: usize,
    /// Wait this many seconds before each pop, like a slow consumer, so deltas pile up in the
    /// FIFO where the trace shows them (default: pop at once).
    #[arg(long, value_name = "SECS", value_parser = parse_seconds)]
    pop_delay: Option<Duration>,
    /// Pop from the DeltaFIFO, a key's deltas together in first-come order of keys
    /// (client-go's queue until 1.32), instead of the in-order RealFIFO.
    #[arg(long)]
    delta_fifo: bool,
    /// Stop after this many seconds (default: run until Ctrl-C).
    #[arg(long)]
    duration: Option<u64>,
}

/// A label key as `--index-label` takes it: non-empty, without spaces or `=`.
fn parse_label_key(s: &str) -> Result<String, String> {
    if s.is_empty() || s.contains(|c: char| c.is_whitespace() || c == '=') {
        return Err(format!(
            "{s:?} is not a label key (e.g. app or app.kubernetes.io/name)"
        ));
    }
    Ok(s.to_owned())
}

/// A non-negative number of seconds, fractions allowed.
fn parse_seconds(s: &str) -> Result<Duration, String> {
    s.parse::<f64>()
        .ok()
        .and_then(|secs| Duration::try_from_secs_f64(secs).ok())
        .ok_or_else(|| format!("{s:?} is not a number of seconds"))
}

/// The name of the index over the values of label `key`.
fn label_index_name(key: &str) -> String {
    format!("label:{key}")
}

/// Prints trace lines: time since start, the component, what happened.
#[derive(Clone)]
struct Printer(Instant);

impl Printer {
    fn line(&self, component: &str, message: std::fmt::Arguments<'_>) {
        self.block(component, &[message.to_string()]);
    }

    /// Prints `lines` together, all with the same time, so no other line comes between them.
    fn block(&self, component: &str, lines: &[String]) {
        let at = self.0.elapsed().as_secs_f64();
        let mut stdout = std::io::stdout().lock();
        for line in lines {
            // A closed stdout (e.g. piped into `head`) is not worth failing over.
            let _ = writeln!(stdout, "{at:>9.3}s  {component:<9} {line}");
        }
    }
}

/// One delta as the trace shows it: its type and the object's resourceVersion
/// (`Updated@5120`); a tombstone says so (`Deleted(tombstone)@5101`), and has no version when
/// it carries no object (`Deleted(tombstone)`).
fn delta_label(kind: DeltaType, resource_version: Option<&str>, tombstone: bool) -> String {
    let tombstone = if tombstone { "(tombstone)" } else { "" };
    match resource_version {
        Some(rv) => format!("{kind}{tombstone}@{rv}"),
        None if tombstone.is_empty() => format!("{kind}@?"),
        None => format!("{kind}{tombstone}"),
    }
}

fn popped_label(delta: &Delta<DynamicObject>) -> String {
    delta_label(
        delta.kind,
        delta.object.object().and_then(|o| o.resource_version()),
        delta.object.is_tombstone(),
    )
}

fn queued_label(delta: &QueuedDelta) -> String {
    delta_label(
        delta.kind,
        delta.resource_version.as_deref(),
        delta.tombstone,
    )
}

/// Joins one key's delta labels as `[A, B, C]`, eliding the middle of a long list.
fn delta_list(labels: Vec<String>) -> String {
    const HEAD: usize = 2;
    const TAIL: usize = 3;
    if labels.len() <= HEAD + TAIL + 1 {
        return format!("[{}]", labels.join(", "));
    }
    let hidden = labels.len() - HEAD - TAIL;
    format!(
        "[{}, … {hidden} more …, {}]",
        labels[..HEAD].join(", "),
        labels[labels.len() - TAIL..].join(", ")
    )
}

/// The FIFO's queue as lines: `title` with the depth, then one line per key at its head, in
/// pop order, then how many more keys wait.
fn queue_lines(title: &str, snapshot: &QueueSnapshot) -> Vec<String> {
    if snapshot.depth == 0 {
        return vec![format!("{title}: empty")];
    }
    let mut lines = Vec::with_capacity(snapshot.keys.len() + 2);
    lines.push(format!("{title} (depth {}, in pop order):", snapshot.depth));
    for (i, (key, deltas)) in snapshot.keys.iter().enumerate() {
        let deltas = delta_list(deltas.iter().map(queued_label).collect());
        lines.push(format!("  {:>2}. {key}  {deltas}", i + 1));
    }
    let more = snapshot.depth.saturating_sub(snapshot.keys.len());
    if more > 0 {
        lines.push(format!("      … and {more} more"));
    }
    lines
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

/// One pop, from the informer's pop hook: the key's deltas, then what the informer did with
/// each, then the cache's size.
fn pop_line(pop: &PopTrace<DynamicObject>, indexer: &Indexer<DynamicObject>) -> String {
    let deltas = pop.steps.iter().map(|s| popped_label(&s.delta)).collect();
    let actions: Vec<String> = pop
        .steps
        .iter()
        .map(|step| {
            let action = match step.action {
                PopAction::Add => "add",
                PopAction::Update => "update",
                PopAction::Resync => "resync (same rv)",
                PopAction::Delete => "delete",
                PopAction::Ignore => return "ignored".to_owned(),
            };
            let plural = if step.notified == 1 { "" } else { "s" };
            format!("{action} ({} handler{plural})", step.notified)
        })
        .collect();
    let initial = if pop.is_in_initial_list {
        " (initial list)"
    } else {
        ""
    };
    format!(
        "{}: {}{initial} → {}; cache {}",
        pop.key,
        delta_list(deltas),
        actions.join(", "),
        indexer.len()
    )
}

/// How many values of one index the summary shows.
const INDEX_VALUES_SHOWN: usize = 20;

/// One index as a summary line: each value, sorted, with the number of keys under it.
fn index_line(indexer: &Indexer<DynamicObject>, index: &str) -> String {
    let mut values = indexer.list_index_func_values(index);
    if values.is_empty() {
        return format!("index {index}: no values");
    }
    values.sort_unstable();
    let mut shown: Vec<String> = values
        .iter()
        .take(INDEX_VALUES_SHOWN)
        .map(|value| {
            let n = indexer.index_keys(index, value).map_or(0, |k| k.len());
            match &**value {
                "" if index == NAMESPACE_INDEX => format!("(cluster)={n}"),
                "" => format!("\"\"={n}"),
                value => format!("{value}={n}"),
            }
        })
        .collect();
    if values.len() > INDEX_VALUES_SHOWN {
        shown.push(format!(
            "… and {} more values",
            values.len() - INDEX_VALUES_SHOWN
        ));
    }
    format!("index {index}: {}", shown.join(" "))
}

/// The FIFO (depth, sync state, the head of its queue) and the cache (size, every index).
fn summary(
    informer: &SharedIndexInformer<DynamicObject>,
    indices: &[String],
    fifo_lines: usize,
    out: &Printer,
) {
    let snapshot = informer.queue_snapshot(fifo_lines);
    let indexer = informer.get_indexer();
    let mut lines = vec![format!(
        "fifo depth {}, synced {}; indexer {} objects",
        snapshot.depth,
        informer.has_synced(),
        indexer.len(),
    )];
    lines.extend(queue_lines("fifo queue", &snapshot));
    lines.extend(indices.iter().map(|index| index_line(indexer, index)));
    out.block("summary", &lines);
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
    let mut options = InformerOptions::named(resource.plural.clone());
    options.resync_period = Duration::from_secs(args.resync.unwrap_or(0));
    options.reflector.watch_list = !args.no_watch_list;
    options.pop_delay = args.pop_delay.unwrap_or_default();
    if args.delta_fifo {
        options.fifo = FifoKind::Delta;
    }
    let informer = SharedIndexInformer::new(lw, options);

    let mut indexers = Indexers::new();
    let mut indices = vec![NAMESPACE_INDEX.to_owned()];
    let mut described = vec![format!("{NAMESPACE_INDEX} (by metadata.namespace)")];
    for key in &args.index_labels {
        let name = label_index_name(key);
        if indices.contains(&name) {
            continue;
        }
        let label = key.clone();
        indexers.insert(
            name.clone(),
            IndexFunc::new(move |obj: &DynamicObject, values| {
                if let Some(value) = obj.label(&label) {
                    values.push(&value);
                }
            }),
        );
        described.push(format!(
            "{name} (by the value of label {key}; objects without it are in none)"
        ));
        indices.push(name);
    }
    informer.add_indexers(indexers)?;
    out.line(
        "start",
        format_args!("indexer indices: {}", described.join(", ")),
    );
    let printer = out.clone();
    informer.on_reflector_trace(move |t| trace_line(&printer, t))?;
    let printer = out.clone();
    let indexer = informer.get_indexer().clone();
    informer.on_pop(move |pop| printer.line("pop", format_args!("{}", pop_line(pop, &indexer))));
    // One handler, doing nothing: the informer notifies it, and resyncs for it.
    informer.add_event_handler(HandlerFns::new())?;

    let deadline = args
        .duration
        .map(|s| Instant::now() + Duration::from_secs(s));
    let mut ticker = tokio::time::interval(Duration::from_secs(args.summary_every.max(1)));
    ticker.tick().await;
    let stop = async {
        loop {
            tokio::select! {
                _ = ticker.tick() => summary(&informer, &indices, args.fifo_lines, &out),
                _ = tokio::signal::ctrl_c() => break,
                () = async {
                    match deadline {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                } => break,
            }
        }
        summary(&informer, &indices, args.fifo_lines, &out);
    };
    informer.run(stop).await;
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

#[cfg(test)]
mod tests {
    use super::*;
    use controller_runtime::informer::{Key, namespace_indexers};
    use std::sync::Arc;

    fn queued(kind: DeltaType, rv: Option<&str>, tombstone: bool) -> QueuedDelta {
        QueuedDelta {
            kind,
            resource_version: rv.map(str::to_owned),
            tombstone,
        }
    }

    #[test]
    fn delta_label_shows_type_version_and_tombstones() {
        assert_eq!(
            delta_label(DeltaType::Updated, Some("7"), false),
            "Updated@7"
        );
        assert_eq!(
            delta_label(DeltaType::Deleted, Some("7"), true),
            "Deleted(tombstone)@7"
        );
        assert_eq!(
            delta_label(DeltaType::Deleted, None, true),
            "Deleted(tombstone)"
        );
        assert_eq!(delta_label(DeltaType::Added, None, false), "Added@?");
    }

    #[test]
    fn delta_list_elides_the_middle_of_a_long_list() {
        let labels = |n: usize| (1..=n).map(|i| format!("U@{i}")).collect::<Vec<_>>();
        assert_eq!(delta_list(labels(6)), "[U@1, U@2, U@3, U@4, U@5, U@6]");
        assert_eq!(
            delta_list(labels(9)),
            "[U@1, U@2, … 4 more …, U@7, U@8, U@9]"
        );
    }

    #[test]
    fn queue_lines_number_the_keys_in_pop_order_and_count_the_rest() {
        let snapshot = QueueSnapshot {
            depth: 3,
            keys: vec![
                (
                    Key::from("ns/a"),
                    vec![
                        queued(DeltaType::Replaced, Some("1"), false),
                        queued(DeltaType::Updated, Some("2"), false),
                    ],
                ),
                (
                    Key::from("ns/b"),
                    vec![queued(DeltaType::Deleted, None, true)],
                ),
            ],
        };
        assert_eq!(
            queue_lines("fifo queue", &snapshot),
            [
                "fifo queue (depth 3, in pop order):",
                "   1. ns/a  [Replaced@1, Updated@2]",
                "   2. ns/b  [Deleted(tombstone)]",
                "      … and 1 more",
            ]
        );
        assert_eq!(
            queue_lines("fifo queue", &QueueSnapshot::default()),
            ["fifo queue: empty"]
        );
    }

    #[test]
    fn index_line_sorts_values_and_counts_their_keys() {
        let mut indexers = namespace_indexers();
        indexers.insert(
            label_index_name("app"),
            IndexFunc::new(|obj: &DynamicObject, values| {
                if let Some(value) = obj.label("app") {
                    values.push(&value);
                }
            }),
        );
        let indexer = Indexer::new(indexers);
        let cm = |ns: &str, name: &str, app: Option<&str>| {
            let mut obj = DynamicObject::default();
            obj.metadata.namespace = Some(ns.into()).filter(|ns: &String| !ns.is_empty());
            obj.metadata.name = Some(name.into());
            obj.metadata.labels = app.map(|app| [("app".to_owned(), app.to_owned())].into());
            Arc::new(obj)
        };
        indexer.add(cm("b", "1", Some("web")));
        indexer.add(cm("a", "2", Some("web")));
        indexer.add(cm("a", "3", Some("db")));
        indexer.add(cm("", "4", None));
        assert_eq!(
            index_line(&indexer, NAMESPACE_INDEX),
            "index namespace: (cluster)=1 a=2 b=1"
        );
        assert_eq!(
            index_line(&indexer, "label:app"),
            "index label:app: db=1 web=2"
        );
        assert_eq!(
            index_line(&indexer, "label:none"),
            "index label:none: no values"
        );
    }

    #[test]
    fn arguments_reject_bad_label_keys_and_durations() {
        assert_eq!(
            parse_label_key("app.kubernetes.io/name").unwrap(),
            "app.kubernetes.io/name"
        );
        assert!(parse_label_key("").is_err());
        assert!(parse_label_key("a=b").is_err());
        assert_eq!(parse_seconds("1.5").unwrap(), Duration::from_millis(1500));
        assert!(parse_seconds("-1").is_err());
        assert!(parse_seconds("soon").is_err());
    }
}
