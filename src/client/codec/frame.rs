//! Cutting a watch body into frames: newline-delimited JSON ([`FrameDecoder`]) or
//! length-prefixed protobuf ([`WatchFramer`](super::protobuf::WatchFramer)), and
//! [`EventReader`], which cuts with the one its format needs and decodes each frame.
//!
//! # Implementation Details
//!
//! The API server writes each JSON event as one object followed by `\n`. [`FrameDecoder`]
//! cuts frames out of the body's chunks: a frame that lies wholly inside a chunk is a
//! zero-copy slice of it; only a frame split across chunks is copied, into a carry-over
//! buffer.

use std::collections::VecDeque;

use bytes::{Buf, Bytes, BytesMut};

use super::event::{WatchEvent, WatchObject};
#[cfg(feature = "protobuf")]
use super::protobuf::WatchFramer;
use super::{Format, decode};
#[cfg(feature = "protobuf")]
use crate::client::error::Error;
use crate::client::error::Result;

/// Cuts newline-delimited frames out of a byte stream's chunks.
#[derive(Debug, Default)]
pub struct FrameDecoder {
    /// Chunks not yet cut into frames; the first may be partly consumed.
    chunks: VecDeque<Bytes>,
    /// The start of a frame split across chunks.
    partial: BytesMut,
}

impl FrameDecoder {
    /// A decoder holding nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the next chunk of the body.
    pub fn push(&mut self, chunk: Bytes) {
        if !chunk.is_empty() {
            self.chunks.push_back(chunk);
        }
    }

    /// The next complete frame, without its newline; `None` until one has fully arrived.
    /// Blank lines are skipped.
    pub fn next_frame(&mut self) -> Option<Bytes> {
        loop {
            let chunk = self.chunks.front_mut()?;
            match memchr::memchr(b'\n', chunk) {
                Some(i) => {
                    let head = chunk.split_to(i);
                    chunk.advance(1);
                    if chunk.is_empty() {
                        self.chunks.pop_front();
                    }
                    let frame = if self.partial.is_empty() {
                        head
                    } else {
                        self.partial.extend_from_slice(&head);
                        self.partial.split().freeze()
                    };
                    if frame.iter().all(u8::is_ascii_whitespace) {
                        continue;
                    }
                    return Some(frame);
                }
                None => {
                    let rest = self.chunks.pop_front().expect("front exists");
                    self.partial.extend_from_slice(&rest);
                }
            }
        }
    }

    /// How many bytes of an unfinished frame are held, ignoring whitespace.
    pub fn pending(&self) -> usize {
        let chunks = self.chunks.iter().flat_map(|c| c.iter());
        let held = self.partial.iter().chain(chunks);
        held.filter(|b| !b.is_ascii_whitespace()).count()
    }
}

/// Cuts a watch body's chunks into frames and decodes each into an event: newline-delimited
/// JSON, or (with the `protobuf` feature) the length-prefixed protobuf of one built-in kind.
/// What a [`WatchStream`](crate::client::WatchStream) reads its body with; usable on its own
/// over recorded chunks.
#[derive(Debug)]
pub struct EventReader {
    framing: Framing,
}

/// How a watch body is cut into frames.
#[derive(Debug)]
enum Framing {
    /// Newline-delimited JSON.
    Json(FrameDecoder),
    /// Length-prefixed protobuf of this kind.
    #[cfg(feature = "protobuf")]
    Protobuf(WatchFramer, super::ProtoKind),
}

impl EventReader {
    /// A reader of newline-delimited JSON events.
    pub fn json() -> Self {
        Self::of(Format::Json)
    }

    /// A reader of the protobuf events of `K`, if `K` has a protobuf form (as
    /// [`Raw`](super::Raw) of a built-in kind has) and the crate is built with the
    /// `protobuf` feature.
    pub fn protobuf<K: WatchObject>() -> Option<Self> {
        #[cfg(feature = "protobuf")]
        return K::protobuf_kind().map(|kind| Self::of(Format::Protobuf(kind)));
        #[cfg(not(feature = "protobuf"))]
        None
    }

    /// A reader of events in `format`.
    pub(crate) fn of(format: Format) -> Self {
        let framing = match format {
            Format::Json => Framing::Json(FrameDecoder::new()),
            #[cfg(feature = "protobuf")]
            Format::Protobuf(kind) => Framing::Protobuf(WatchFramer::default(), kind),
        };
        EventReader { framing }
    }

    /// The format this reader reads.
    pub(crate) fn format(&self) -> Format {
        match &self.framing {
            Framing::Json(_) => Format::Json,
            #[cfg(feature = "protobuf")]
            Framing::Protobuf(_, kind) => Format::Protobuf(*kind),
        }
    }

    /// Whether this reader reads protobuf.
    pub fn is_protobuf(&self) -> bool {
        self.format() != Format::Json
    }

    /// Adds the next chunk of the body.
    pub fn push(&mut self, chunk: Bytes) {
        match &mut self.framing {
            Framing::Json(decoder) => decoder.push(chunk),
            #[cfg(feature = "protobuf")]
            Framing::Protobuf(framer, _) => framer.push_bytes(chunk),
        }
    }

    /// The next whole frame's event, if one has arrived; `what` names the watch in errors.
    ///
    /// # Errors
    ///
    /// As [`decode_event`](super::decode_event); a protobuf frame that cannot be read is
    /// `Error::Protobuf`.
    pub fn next_event<K: WatchObject>(&mut self, what: &str) -> Option<Result<WatchEvent<K>>> {
        let frame = match &mut self.framing {
            Framing::Json(decoder) => decoder.next_frame()?,
            #[cfg(feature = "protobuf")]
            Framing::Protobuf(framer, _) => match framer.next_frame() {
                Ok(frame) => frame?,
                Err(e) => {
                    return Some(Err(Error::Protobuf {
                        what: format!("a watch frame from {what}"),
                        source: e.into(),
                    }));
                }
            },
        };
        Some(decode(self.format(), &frame, what))
    }

    /// How many bytes of an unfinished frame are held (for JSON, ignoring whitespace).
    pub fn pending(&self) -> usize {
        match &self.framing {
            Framing::Json(decoder) => decoder.pending(),
            #[cfg(feature = "protobuf")]
            Framing::Protobuf(framer, _) => framer.pending(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(chunks: &[&[u8]]) -> Vec<String> {
        let mut d = FrameDecoder::new();
        let mut out = Vec::new();
        for c in chunks {
            d.push(Bytes::copy_from_slice(c));
            while let Some(f) = d.next_frame() {
                out.push(String::from_utf8(f.to_vec()).unwrap());
            }
        }
        out
    }

    #[test]
    fn frames_split_across_chunks_are_joined() {
        assert_eq!(
            frames(&[b"{\"a\":1}\n{\"b\"", b":2", b"}\n{\"c\":3}\n"]),
            ["{\"a\":1}", "{\"b\":2}", "{\"c\":3}"]
        );
    }

    #[test]
    fn blank_lines_are_skipped_and_a_partial_tail_is_pending() {
        let mut d = FrameDecoder::new();
        d.push(Bytes::from_static(b"\n{\"a\":1}\n\n{\"b\""));
        assert_eq!(d.next_frame().as_deref(), Some(&b"{\"a\":1}"[..]));
        assert_eq!(d.next_frame(), None);
        assert_eq!(d.pending(), 4);
    }
}
