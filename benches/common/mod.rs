//! What the benches share: the recorded watch streams, replayed as a body arrives.
//!
//! A replay sends the chunks of one pass over the recording again and again, as a
//! connection reuses its read buffers: the decoder finds the bytes in cache, as it does when
//! the kernel has just copied them off the socket. Spelling out every event instead would
//! make a 124 MB body that each pass reads from main memory, a cost no real watch pays.

use bytes::Bytes;

/// The size of the chunks a replayed body arrives in.
const CHUNK: usize = 16 * 1024;

fn testdata(name: &str) -> Vec<u8> {
    let path = format!("{}/testdata/watch/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

/// `events` frames of `testdata/watch/configmaps-1200.jsonl` (the 1,200 recorded events,
/// repeated), cut into 16 KiB chunks.
pub fn recorded_stream(events: usize) -> Vec<Bytes> {
    let recorded = testdata("configmaps-1200.jsonl");
    let frames: Vec<Vec<u8>> = recorded
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| [l, b"\n"].concat())
        .collect();
    replayed(&frames, events)
}

/// `events` frames of `testdata/watch/configmaps-1200.pb`, the same 1,200 events as the
/// apiserver sends them as protobuf (length-prefixed frames), repeated and cut into 16 KiB
/// chunks.
pub fn recorded_protobuf_stream(events: usize) -> Vec<Bytes> {
    let recorded = testdata("configmaps-1200.pb");
    let mut frames = Vec::new();
    let mut rest = &recorded[..];
    while let Some((len, tail)) = rest.split_first_chunk::<4>() {
        let len = u32::from_be_bytes(*len) as usize;
        frames.push(rest[..4 + len].to_vec());
        rest = &tail[len..];
    }
    replayed(&frames, events)
}

/// `events` frames cycling through `frames`: the chunks of one pass over all of them,
/// repeated, then those of the first few to make up the count.
fn replayed(frames: &[Vec<u8>], events: usize) -> Vec<Bytes> {
    let cycle = chunked(frames.concat());
    let mut chunks = Vec::new();
    for _ in 0..events / frames.len() {
        chunks.extend(cycle.iter().cloned());
    }
    chunks.extend(chunked(frames[..events % frames.len()].concat()));
    chunks
}

fn chunked(body: Vec<u8>) -> Vec<Bytes> {
    let body = Bytes::from(body);
    (0..body.len())
        .step_by(CHUNK)
        .map(|start| body.slice(start..(start + CHUNK).min(body.len())))
        .collect()
}
