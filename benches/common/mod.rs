//! What the benches share: the recorded watch streams, replayed as a body arrives.

use bytes::Bytes;

/// The size of the chunks a replayed body arrives in.
const CHUNK: usize = 16 * 1024;

fn testdata(name: &str) -> Vec<u8> {
    let path = format!("{}/testdata/watch/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

/// `events` frames of `testdata/watch/configmaps-1200.jsonl` (the 1,200 recorded events,
/// repeated), as one body cut into 16 KiB chunks.
pub fn recorded_stream(events: usize) -> Vec<Bytes> {
    let recorded = testdata("configmaps-1200.jsonl");
    let frames: Vec<&[u8]> = recorded
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    let mut body = Vec::new();
    for frame in frames.iter().cycle().take(events) {
        body.extend_from_slice(frame);
        body.push(b'\n');
    }
    chunked(body)
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
        frames.push(&rest[..4 + len]);
        rest = &tail[len..];
    }
    let mut body = Vec::new();
    for frame in frames.iter().cycle().take(events) {
        body.extend_from_slice(frame);
    }
    chunked(body)
}

fn chunked(body: Vec<u8>) -> Vec<Bytes> {
    let body = Bytes::from(body);
    (0..body.len())
        .step_by(CHUNK)
        .map(|start| body.slice(start..(start + CHUNK).min(body.len())))
        .collect()
}
