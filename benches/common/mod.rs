//! What the benches share: the recorded watch stream, replayed as a body arrives.

use bytes::Bytes;

/// `events` frames of `testdata/watch/configmaps-1200.jsonl` (the 1,200 recorded events,
/// repeated), as one body cut into 16 KiB chunks.
pub fn recorded_stream(events: usize) -> Vec<Bytes> {
    const CHUNK: usize = 16 * 1024;
    let recorded = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/testdata/watch/configmaps-1200.jsonl"
    ))
    .expect("the recorded stream");
    let frames: Vec<&[u8]> = recorded
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    let mut body = Vec::new();
    for frame in frames.iter().cycle().take(events) {
        body.extend_from_slice(frame);
        body.push(b'\n');
    }
    let body = Bytes::from(body);
    (0..body.len())
        .step_by(CHUNK)
        .map(|start| body.slice(start..(start + CHUNK).min(body.len())))
        .collect()
}
