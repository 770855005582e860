//! The informer's hot paths, one core:
//!
//! - `deltafifo/add_pop`: 10,000 ConfigMaps added, then popped and applied to an indexer;
//! - `indexer/update`: 10,000 updates to an indexer with the namespace index and a label
//!   index, each moving the object to another label value;
//! - `end_to_end/apply`: the recorded watch stream of `watch_decode` (100,000 events), cut
//!   into frames, decoded, fed to the DeltaFIFO and popped into the indexer, in one loop;
//!   `raw` caches `Raw<ConfigMap>`, `typed` caches `ConfigMap`;
//! - `end_to_end/informer`: the same stream through a real [`SharedIndexInformer`] on a
//!   single-threaded runtime: its reflector reads the stream as one watch, decoding frame by
//!   frame, its DeltaFIFO and indexer apply each event, and its processor hands every
//!   notification to a registered handler on the handler's own task — everything an informer
//!   does per event, minus the network.
//!
//! The `…/protobuf` rows replay the same events as the apiserver sends them as protobuf
//! (`testdata/watch/configmaps-1200.pb`), what an informer of `Raw<K>` for a built-in kind
//! reads: each frame is transcoded into the JSON `Raw<ConfigMap>` keeps.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use controller_runtime::client::{EventReader, Raw, WatchEvent, WatchObject};
use controller_runtime::informer::lister_watcher::{Result as LwResult, WatchEvent as LwEvent};
use controller_runtime::informer::{
    DeltaFifo, DeltaFifoOptions, DeltaType, EventStream, HandlerFns, IndexFunc, Indexer,
    InformerOptions, ListOptions, ListPage, ListerWatcher, Object, SharedIndexInformer,
    WatchOptions, namespace_indexers,
};
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

fn configmap(i: usize, tier: usize) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(format!("cm-{i:05}")),
            namespace: Some(format!("ns-{}", i % 10)),
            resource_version: Some((1000 + i).to_string()),
            labels: Some([("tier".to_owned(), format!("t{tier}"))].into()),
            ..ObjectMeta::default()
        },
        data: Some([("size".to_owned(), i.to_string())].into()),
        ..ConfigMap::default()
    }
}

fn indexers() -> controller_runtime::informer::Indexers<ConfigMap> {
    let mut indexers = namespace_indexers();
    indexers.insert(
        "tier".into(),
        IndexFunc::new(|cm: &ConfigMap, out| {
            if let Some(t) = cm.metadata.labels.as_ref().and_then(|l| l.get("tier")) {
                out.push(t);
            }
        }),
    );
    indexers
}

/// Pops everything, applying each delta to the indexer as the informer does.
fn drain<K: Object>(fifo: &DeltaFifo<K>, indexer: &Indexer<K>, handled: &mut usize) {
    while fifo
        .try_pop(|deltas, _| {
            for delta in deltas.iter() {
                match (delta.kind, delta.object.object()) {
                    (DeltaType::Deleted, _) => {
                        indexer.remove(deltas.key());
                    }
                    (_, Some(obj)) => {
                        indexer.insert(deltas.key(), obj.clone());
                    }
                    (_, None) => {}
                }
                *handled += 1;
            }
        })
        .is_some()
    {}
}

fn deltafifo(c: &mut Criterion) {
    const N: usize = 10_000;
    let mut group = c.benchmark_group("deltafifo");
    group.throughput(Throughput::Elements(N as u64));
    group.bench_function("add_pop_10000", |b| {
        b.iter_batched(
            || (0..N).map(|i| configmap(i, 0)).collect::<Vec<_>>(),
            |objects| {
                let indexer = Indexer::new(indexers());
                let fifo = DeltaFifo::with_options(DeltaFifoOptions {
                    known_objects: Some(Arc::new(indexer.clone())),
                    ..DeltaFifoOptions::default()
                });
                for obj in objects {
                    fifo.add(obj);
                }
                let mut handled = 0;
                drain(&fifo, &indexer, &mut handled);
                assert_eq!(handled, N);
            },
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

fn indexer(c: &mut Criterion) {
    const N: usize = 10_000;
    let mut group = c.benchmark_group("indexer");
    group.throughput(Throughput::Elements(N as u64));
    let store = Indexer::new(indexers());
    for i in 0..N {
        store.add(Arc::new(configmap(i, 0)));
    }
    let mut round = 0;
    group.bench_function("update_10000_with_2_indices", |b| {
        b.iter_batched(
            || {
                round += 1;
                (0..N)
                    .map(|i| Arc::new(configmap(i, round % 4)))
                    .collect::<Vec<_>>()
            },
            |updates| {
                for obj in updates {
                    store.update(obj);
                }
            },
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

fn end_to_end(c: &mut Criterion) {
    const EVENTS: usize = 100_000;
    let chunks = common::recorded_stream(EVENTS);

    let mut group = c.benchmark_group("end_to_end");
    group.sample_size(10);
    group.throughput(Throughput::Elements(EVENTS as u64));
    group.bench_function("apply_100000_recorded_events/raw", |b| {
        b.iter(|| {
            let handled = apply::<Raw<ConfigMap>>(&chunks);
            assert!(handled >= EVENTS / 2, "{handled}");
        })
    });
    group.bench_function("apply_100000_recorded_events/typed", |b| {
        b.iter(|| {
            let handled = apply::<ConfigMap>(&chunks);
            assert!(handled >= EVENTS / 2, "{handled}");
        })
    });
    let protobuf = common::recorded_protobuf_stream(EVENTS);
    group.bench_function("apply_100000_recorded_events/protobuf", |b| {
        b.iter(|| {
            let handled = apply_protobuf(&protobuf);
            assert!(handled >= EVENTS / 2, "{handled}");
        })
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let chunks = Arc::new(chunks);
    group.bench_function("informer_100000_recorded_events/raw", |b| {
        b.iter(|| {
            let handled = runtime.block_on(run_informer(chunks.clone(), false));
            assert!(handled >= EVENTS / 2, "{handled}");
        })
    });
    let protobuf = Arc::new(protobuf);
    group.bench_function("informer_100000_recorded_events/protobuf", |b| {
        b.iter(|| {
            let handled = runtime.block_on(run_informer(protobuf.clone(), true));
            assert!(handled >= EVENTS / 2, "{handled}");
        })
    });
    group.finish();
}

/// The name of the object the replay sends after the recording: when the handler sees it,
/// it has seen everything before it.
const END: &str = "zz-end-of-replay";

/// Runs a shared informer over the replayed stream (protobuf frames if `protobuf`, JSON
/// lines otherwise) until its handler has seen all of it; returns the notifications the
/// handler received.
async fn run_informer(chunks: Arc<Vec<bytes::Bytes>>, protobuf: bool) -> usize {
    type K = Raw<ConfigMap>;
    let mut options = InformerOptions::named("bench");
    options.reflector.watch_list = false;
    let informer = SharedIndexInformer::new(Replay { chunks, protobuf }, options);
    let handled = Arc::new(AtomicUsize::new(0));
    let end = Arc::new(tokio::sync::Notify::new());
    let count = |handled: &Arc<AtomicUsize>| {
        let handled = handled.clone();
        move || handled.fetch_add(1, Ordering::Relaxed)
    };
    let (on_update, on_delete) = (count(&handled), count(&handled));
    let (on_add, seen_end) = (count(&handled), end.clone());
    informer
        .add_event_handler(
            HandlerFns::<K>::new()
                .with_add(move |obj, _| {
                    if obj.name() == END {
                        seen_end.notify_one();
                    } else {
                        on_add();
                    }
                })
                .with_update(move |_, _| {
                    on_update();
                })
                .with_delete(move |_| {
                    on_delete();
                }),
        )
        .expect("a handler");
    informer.run(end.notified()).await;
    handled.load(Ordering::Relaxed)
}

/// A lister-watcher whose collection starts empty and whose one watch is the recording.
struct Replay {
    chunks: Arc<Vec<bytes::Bytes>>,
    protobuf: bool,
}

/// The recording, decoded frame by frame as a watch body arrives, then the end marker; then
/// the watch stays open.
struct ReplayStream {
    chunks: Arc<Vec<bytes::Bytes>>,
    next_chunk: usize,
    framing: Framing,
    ended: bool,
}

/// How the replayed body is cut and decoded: the client's watch stream's reader.
struct Framing(EventReader);

impl Framing {
    fn json() -> Self {
        Framing(EventReader::json())
    }

    fn protobuf() -> Self {
        Framing(EventReader::protobuf::<Raw<ConfigMap>>().expect("a built-in kind"))
    }

    fn push(&mut self, chunk: &bytes::Bytes) {
        self.0.push(chunk.clone());
    }

    fn next_event<K: WatchObject>(&mut self) -> Option<WatchEvent<K>> {
        Some(self.0.next_event("bench")?.expect("a valid event"))
    }
}

impl ListerWatcher<Raw<ConfigMap>> for Replay {
    type Stream = ReplayStream;

    async fn list(&self, _: &ListOptions) -> LwResult<ListPage<Raw<ConfigMap>>> {
        Ok(ListPage {
            items: Vec::new(),
            resource_version: "1".into(),
            continue_token: None,
        })
    }

    async fn watch(&self, _: &WatchOptions) -> LwResult<ReplayStream> {
        let framing = if self.protobuf {
            Framing::protobuf()
        } else {
            Framing::json()
        };
        Ok(ReplayStream {
            chunks: self.chunks.clone(),
            next_chunk: 0,
            framing,
            ended: false,
        })
    }
}

impl EventStream<Raw<ConfigMap>> for ReplayStream {
    async fn next(&mut self) -> Option<LwResult<LwEvent<Raw<ConfigMap>>>> {
        loop {
            if let Some(event) = self.framing.next_event() {
                if matches!(event, WatchEvent::Bookmark(_)) {
                    continue;
                }
                return Some(Ok(event.into()));
            }
            if let Some(chunk) = self.chunks.get(self.next_chunk) {
                // A body arrives a chunk at a time, and its reader yields between chunks:
                // let the informer's other tasks run, as they would while the socket waits.
                if self.next_chunk > 0 {
                    tokio::task::yield_now().await;
                }
                self.next_chunk += 1;
                self.framing.push(chunk);
                continue;
            }
            if !self.ended {
                self.ended = true;
                let end = format!(
                    r#"{{"kind":"ConfigMap","apiVersion":"v1","metadata":{{"name":"{END}","namespace":"bench","resourceVersion":"2"}}}}"#
                );
                return Some(Ok(LwEvent::Added(Raw::from_json(&end).expect("valid"))));
            }
            std::future::pending::<()>().await;
        }
    }
}

/// Decodes every frame of `chunks` into the FIFO and pops it into an indexer; returns the
/// deltas handled.
fn apply<K: WatchObject + Object>(chunks: &[bytes::Bytes]) -> usize {
    apply_framed::<K>(chunks, Framing::json())
}

/// [`apply`] for the protobuf recording, into `Raw<ConfigMap>`.
fn apply_protobuf(chunks: &[bytes::Bytes]) -> usize {
    apply_framed::<Raw<ConfigMap>>(chunks, Framing::protobuf())
}

fn apply_framed<K: WatchObject + Object>(chunks: &[bytes::Bytes], mut framing: Framing) -> usize {
    let indexer = Indexer::new(namespace_indexers());
    let fifo = DeltaFifo::with_options(DeltaFifoOptions {
        known_objects: Some(Arc::new(indexer.clone())),
        ..DeltaFifoOptions::default()
    });
    let mut handled = 0usize;
    for chunk in chunks {
        framing.push(chunk);
        while let Some(event) = framing.next_event::<K>() {
            match event {
                WatchEvent::Added(o) => fifo.add(o),
                WatchEvent::Modified(o) => fifo.update(o),
                WatchEvent::Deleted(o) => fifo.delete(o),
                WatchEvent::Bookmark(_) => {}
            }
        }
        // The informer pops as events arrive; drain after each chunk.
        drain(&fifo, &indexer, &mut handled);
    }
    std::hint::black_box(indexer.len());
    handled
}

criterion_group!(benches, deltafifo, indexer, end_to_end);
criterion_main!(benches);
