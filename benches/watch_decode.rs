//! Decoding a watch stream: 100,000 events (the 1,200 recorded in
//! `testdata/watch/configmaps-1200.jsonl`, replayed) cut into frames from 16 KiB chunks, as
//! the body arrives, and decoded on one thread, two ways:
//!
//! * `raw`: into `WatchEvent<Raw<ConfigMap>>`, what informers cache: every frame validated,
//!   its type and key fields picked out, the object's bytes copied out of the body.
//! * `typed`: into `WatchEvent<ConfigMap>`, the whole k8s-openapi object built with serde.
//!
//! and the same 1,200 events as the apiserver sends them as protobuf
//! (`testdata/watch/configmaps-1200.pb`), what informers of built-in kinds read:
//!
//! * `protobuf`: length-prefixed frames cut from the chunks, each transcoded into the JSON
//!   of a `Raw<ConfigMap>`.
//!
//! `make bench-decode` runs it and prints events per second for each.

mod common;

use bytes::Bytes;
use controller_runtime::client::{
    EventReader, FrameDecoder, Raw, WatchEvent, WatchObject, decode_event,
};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::ConfigMap;

const EVENTS: usize = 100_000;

fn decode_all<K: WatchObject>(chunks: &[Bytes]) -> usize {
    let mut decoder = FrameDecoder::new();
    let mut n = 0;
    for chunk in chunks {
        decoder.push(chunk.clone());
        while let Some(frame) = decoder.next_frame() {
            let event: WatchEvent<K> =
                decode_event(&frame, "the benchmark").expect("a valid event");
            std::hint::black_box(&event);
            n += 1;
        }
    }
    n
}

fn decode_all_protobuf(chunks: &[Bytes]) -> usize {
    let mut reader =
        EventReader::protobuf::<Raw<ConfigMap>>().expect("ConfigMap has a protobuf form");
    let mut n = 0;
    for chunk in chunks {
        reader.push(chunk.clone());
        while let Some(event) = reader.next_event("the benchmark") {
            let event: WatchEvent<Raw<ConfigMap>> = event.expect("a valid event");
            std::hint::black_box(&event);
            n += 1;
        }
    }
    n
}

fn watch_decode(c: &mut Criterion) {
    let chunks = common::recorded_stream(EVENTS);
    assert_eq!(decode_all::<Raw<ConfigMap>>(&chunks), EVENTS);
    assert_eq!(decode_all::<ConfigMap>(&chunks), EVENTS);
    let protobuf = common::recorded_protobuf_stream(EVENTS);
    assert_eq!(decode_all_protobuf(&protobuf), EVENTS);
    let bytes: usize = chunks.iter().map(Bytes::len).sum();
    let mut group = c.benchmark_group("watch_decode");
    group.sample_size(10);
    group.throughput(Throughput::Elements(EVENTS as u64));
    let name = format!("configmaps_{EVENTS}_events_{bytes}_bytes");
    group.bench_function(format!("{name}/raw"), |b| {
        b.iter(|| decode_all::<Raw<ConfigMap>>(&chunks))
    });
    group.bench_function(format!("{name}/typed"), |b| {
        b.iter(|| decode_all::<ConfigMap>(&chunks))
    });
    let bytes: usize = protobuf.iter().map(Bytes::len).sum();
    group.bench_function(
        format!("configmaps_{EVENTS}_events_{bytes}_bytes/protobuf"),
        |b| b.iter(|| decode_all_protobuf(&protobuf)),
    );
    group.finish();
}

criterion_group!(benches, watch_decode);
criterion_main!(benches);
