//! The informer's hot paths, one core:
//!
//! - `deltafifo/add_pop`: 10,000 ConfigMaps added, then popped and applied to an indexer;
//! - `indexer/update`: 10,000 updates to an indexer with the namespace index and a label
//!   index, each moving the object to another label value;
//! - `end_to_end/apply`: the recorded watch stream of `watch_decode` (100,000 events), cut
//!   into frames, decoded, fed to the DeltaFIFO, popped into the indexer and handed to a
//!   handler — what an informer does per event, minus the network; `raw` caches
//!   `Raw<ConfigMap>`, `typed` caches `ConfigMap`.

mod common;

use std::sync::Arc;

use controller_runtime::client::{FrameDecoder, Raw, WatchEvent, WatchObject, decode_event};
use controller_runtime::informer::{
    DeltaFifo, DeltaFifoOptions, DeltaType, IndexFunc, Indexer, Object, namespace_indexers,
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
    group.finish();
}

/// Decodes every frame of `chunks` into the FIFO and pops it into an indexer; returns the
/// deltas handled.
fn apply<K: WatchObject + Object>(chunks: &[bytes::Bytes]) -> usize {
    let indexer = Indexer::new(namespace_indexers());
    let fifo = DeltaFifo::with_options(DeltaFifoOptions {
        known_objects: Some(Arc::new(indexer.clone())),
        ..DeltaFifoOptions::default()
    });
    let mut decoder = FrameDecoder::new();
    let mut handled = 0usize;
    for chunk in chunks {
        decoder.push(chunk.clone());
        while let Some(frame) = decoder.next_frame() {
            match decode_event::<K>(&frame, "bench").expect("valid") {
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
