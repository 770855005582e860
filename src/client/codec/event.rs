//! Watch events: [`WatchEvent`] and [`Bookmark`], [`WatchObject`] (what a list or watch can
//! decode its objects into), the decoding of one frame into an event, and the cutting of a
//! watch body into frames: newline-delimited JSON ([`FrameDecoder`]) or length-prefixed
//! protobuf ([`WatchFramer`](super::protobuf::WatchFramer)), both behind [`EventReader`].
//!
//! # Implementation Details
//!
//! A JSON frame's `type` comes before its `object`, so the object deserializes directly into
//! the target type without an intermediate tree; [`Raw`] replaces even that with one
//! validating scan of the frame.
//!
//! The API server writes each JSON event as one object followed by `\n`. [`FrameDecoder`]
//! cuts frames out of the body's chunks: a frame that lies wholly inside a chunk is a
//! zero-copy slice of it; only a frame split across chunks is copied, into a carry-over
//! buffer.

use std::collections::{BTreeMap, VecDeque};

use bytes::{Buf, Bytes, BytesMut};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde::de::{DeserializeOwned, Error as _};

#[cfg(feature = "protobuf")]
use super::decode_json;
#[cfg(feature = "protobuf")]
use super::proto_json::{self, ProtoKind};
#[cfg(feature = "protobuf")]
use super::protobuf::{self, WatchFramer};
use super::raw::Raw;
use super::scan;
use super::{Decode, Format, decode};
use crate::client::error::{Error, Result, Status, snippet};

/// The annotation on the bookmark that ends a WatchList's initial events.
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// One event from a watch.
#[derive(Clone, Debug, PartialEq)]
pub enum WatchEvent<K> {
    /// The object was created, or is part of the initial state.
    Added(K),
    /// The object changed.
    Modified(K),
    /// The object was deleted; this is its last state.
    Deleted(K),
    /// No object changed, but the collection reached this resourceVersion.
    Bookmark(Bookmark),
}

/// The informer's shape of an event: the one conversion from the client's.
impl<K> From<WatchEvent<K>> for informer::lister_watcher::WatchEvent<K> {
    fn from(event: WatchEvent<K>) -> Self {
        use informer::lister_watcher::WatchEvent as Informer;
        match event {
            WatchEvent::Added(k) => Informer::Added(k),
            WatchEvent::Modified(k) => Informer::Modified(k),
            WatchEvent::Deleted(k) => Informer::Deleted(k),
            WatchEvent::Bookmark(b) => Informer::Bookmark {
                initial_events_end: b.is_initial_events_end(),
                resource_version: b.metadata.resource_version,
            },
        }
    }
}

/// A `BOOKMARK` event: the resourceVersion the watch has reached.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Bookmark {
    /// The bookmark's metadata; only `resourceVersion` and annotations are set.
    pub metadata: BookmarkMeta,
}

/// The metadata a bookmark carries.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BookmarkMeta {
    /// The collection's resourceVersion at this point of the stream.
    pub resource_version: String,
    /// Annotations; [`INITIAL_EVENTS_END`] marks the end of a WatchList's initial events.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

impl Bookmark {
    /// Whether this bookmark ends the initial events of a `sendInitialEvents` watch.
    pub fn is_initial_events_end(&self) -> bool {
        self.metadata
            .annotations
            .get(INITIAL_EVENTS_END)
            .is_some_and(|v| v == "true")
    }
}

/// The wire form of an event: `{"type": "...", "object": {...}}`.
#[derive(Deserialize)]
#[serde(tag = "type", content = "object", rename_all = "UPPERCASE")]
enum Frame<K> {
    Added(K),
    Modified(K),
    Deleted(K),
    Bookmark(Bookmark),
    Error(Box<Status>),
}

/// Decodes one frame (one line of a watch body) into an event. An `ERROR` frame becomes
/// [`Error::Api`] with the server's `Status` (a 410 there means the watch must relist).
///
/// # Errors
///
/// [`Error::Decode`] if the frame is not a watch event of `K`; `what` names the watch in
/// the message.
pub fn decode_event<K: WatchObject>(frame: &[u8], what: &str) -> Result<WatchEvent<K>> {
    K::decode_frame(frame, what)
}

/// A type a watch can decode its events into: every `k8s-openapi` kind and custom resource
/// in the `k8s-openapi` style, [`DynamicObject`](crate::client::DynamicObject),
/// [`PartialObjectMetadata`](crate::client::PartialObjectMetadata), and [`Raw`].
///
/// The provided [`decode_frame`](Self::decode_frame) builds the object with serde; [`Raw`]
/// replaces it with one validating scan of the frame, the fast path informers use.
pub trait WatchObject: DeserializeOwned {
    /// Decodes one frame into an event: see [`decode_event`].
    ///
    /// # Errors
    ///
    /// As [`decode_event`].
    fn decode_frame(frame: &[u8], what: &str) -> Result<WatchEvent<Self>> {
        decode_with_serde(frame, what)
    }

    /// The protobuf form the apiserver can send this type in, if it has one. Lists and
    /// watches of such a type ask for protobuf, and read the answer with
    /// [`from_protobuf`](Self::from_protobuf) when it comes as protobuf. `None` (the default)
    /// keeps the type on JSON; [`Raw`] of a built-in kind says `Some`.
    #[cfg(feature = "protobuf")]
    fn protobuf_kind() -> Option<ProtoKind> {
        None
    }

    /// Builds an object from its protobuf form: a list item, or a watch event's object.
    /// Only called when [`protobuf_kind`](Self::protobuf_kind) gave `kind`.
    ///
    /// # Errors
    ///
    /// If the message cannot be transcoded; the default refuses every message.
    #[cfg(feature = "protobuf")]
    fn from_protobuf(kind: ProtoKind, object: &[u8]) -> proto_json::Result<Self> {
        let _ = (kind, object);
        Err(proto_json::Error::Malformed(protobuf::Error {
            what: "an object of a type without a protobuf form",
            offset: 0,
        }))
    }
}

impl<K> WatchObject for K where K: k8s_openapi::Metadata<Ty = ObjectMeta> + DeserializeOwned {}

impl<K: k8s_openapi::Resource> WatchObject for Raw<K> {
    #[cfg(feature = "protobuf")]
    fn protobuf_kind() -> Option<ProtoKind> {
        proto_json::kind(K::GROUP, K::VERSION, K::KIND)
    }

    #[cfg(feature = "protobuf")]
    fn from_protobuf(kind: ProtoKind, object: &[u8]) -> proto_json::Result<Self> {
        proto_json::transcode(kind, object)
    }

    fn decode_frame(frame: &[u8], what: &str) -> Result<WatchEvent<Self>> {
        let fail = |e| bad_frame(frame, what, e);
        let text = std::str::from_utf8(frame).map_err(|e| fail(serde_json::Error::custom(e)))?;
        let fields = scan::scan_frame(text).map_err(|e| fail(serde_json::Error::custom(e)))?;
        let event_type = fields.event_type.as_ref().map(|t| &text[t.range.clone()]);
        // Bookmarks, errors and anything unexpected: rare, and serde says it best.
        let (Some(wrap), Some(object)) = (event_type.and_then(object_event), &fields.object) else {
            return decode_with_serde(frame, what);
        };
        Ok(wrap(Raw::from_fields(text, object).map_err(fail)?))
    }
}

/// A watch frame: JSON as [`decode_event`] reads it, or protobuf of one built-in kind.
impl<K: WatchObject> Decode for WatchEvent<K> {
    fn json(frame: &[u8], what: &str) -> Result<Self> {
        K::decode_frame(frame, what)
    }

    #[cfg(feature = "protobuf")]
    fn protobuf(kind: ProtoKind, frame: &[u8], what: &str) -> Result<Self> {
        let fail = |source: proto_json::Error| Error::Protobuf {
            what: format!("a watch frame from {what}"),
            source,
        };
        let event = protobuf::watch_event(frame).map_err(|e| fail(e.into()))?;
        let raw = event.object.raw;
        if let Some(wrap) = object_event(event.event_type) {
            return Ok(wrap(K::from_protobuf(kind, raw).map_err(fail)?));
        }
        match event.event_type {
            "BOOKMARK" => {
                let json = proto_json::transcode_json(kind, raw).map_err(fail)?;
                let what = format!("a bookmark from {what}");
                Ok(WatchEvent::Bookmark(decode_json(what, json.as_bytes())?))
            }
            "ERROR" => Err(Error::Api(Box::new(
                protobuf::status(raw).map_err(|e| fail(e.into()))?,
            ))),
            other => Err(bad_frame(
                frame,
                what,
                serde_json::Error::custom(format!("unknown event type {other:?}")),
            )),
        }
    }
}

/// [`decode_event`] through serde.
fn decode_with_serde<K: DeserializeOwned>(frame: &[u8], what: &str) -> Result<WatchEvent<K>> {
    match serde_json::from_slice::<Frame<K>>(frame) {
        Ok(Frame::Added(k)) => Ok(WatchEvent::Added(k)),
        Ok(Frame::Modified(k)) => Ok(WatchEvent::Modified(k)),
        Ok(Frame::Deleted(k)) => Ok(WatchEvent::Deleted(k)),
        Ok(Frame::Bookmark(b)) => Ok(WatchEvent::Bookmark(b)),
        Ok(Frame::Error(status)) => Err(Error::Api(status)),
        Err(source) => Err(bad_frame(frame, what, source)),
    }
}

/// The event of `type` that carries an object; `None` for a bookmark, an error, or a type
/// no server sends.
fn object_event<K>(event_type: &str) -> Option<fn(K) -> WatchEvent<K>> {
    match event_type {
        "ADDED" => Some(WatchEvent::Added),
        "MODIFIED" => Some(WatchEvent::Modified),
        "DELETED" => Some(WatchEvent::Deleted),
        _ => None,
    }
}

/// A frame from the watch `what` that is not an event.
fn bad_frame(frame: &[u8], what: &str, source: serde_json::Error) -> Error {
    Error::Decode {
        what: format!("a watch frame from {what}"),
        source,
        snippet: snippet(frame, 200),
    }
}

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
            let Some(i) = memchr::memchr(b'\n', chunk) else {
                self.partial.extend_from_slice(chunk);
                self.chunks.pop_front();
                continue;
            };
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
            if !frame.iter().all(u8::is_ascii_whitespace) {
                return Some(frame);
            }
        }
    }

    /// How many bytes of an unfinished frame are held, ignoring whitespace.
    pub fn pending(&self) -> usize {
        let held = self.partial.iter().chain(self.chunks.iter().flatten());
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
    Protobuf(WatchFramer, ProtoKind),
}

impl EventReader {
    /// A reader of newline-delimited JSON events.
    pub fn json() -> Self {
        Self::of(Format::Json)
    }

    /// A reader of the protobuf events of `K`, if `K` has a protobuf form (as
    /// [`Raw`] of a built-in kind has) and the crate is built with the
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
    /// As [`decode_event`]; a protobuf frame that cannot be read is
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
    use k8s_openapi::api::core::v1::ConfigMap;

    #[test]
    fn added_event_decodes_into_the_typed_object() {
        let ev: WatchEvent<ConfigMap> = decode_event(
            br#"{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"n","resourceVersion":"5"},"data":{"k":"v"}}}"#,
            "test",
        )
        .unwrap();
        let WatchEvent::Added(cm) = ev else {
            panic!("not Added: {ev:?}")
        };
        assert_eq!(cm.metadata.name.as_deref(), Some("a"));
        assert_eq!(cm.data.unwrap()["k"], "v");
    }

    #[test]
    fn bookmark_carries_its_version_and_the_initial_events_end_mark() {
        let ev: WatchEvent<ConfigMap> = decode_event(
            br#"{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"12","annotations":{"k8s.io/initial-events-end":"true"}}}}"#,
            "test",
        )
        .unwrap();
        let WatchEvent::Bookmark(b) = ev else {
            panic!("not a bookmark")
        };
        assert_eq!(b.metadata.resource_version, "12");
        assert!(b.is_initial_events_end());
    }

    #[test]
    fn error_frame_becomes_a_typed_gone_error() {
        let err = decode_event::<ConfigMap>(
            br#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (5)","reason":"Expired","code":410}}"#,
            "test",
        )
        .unwrap_err();
        assert!(err.is_gone(), "{err}");
        assert_eq!(
            err.to_string(),
            "410 Expired: too old resource version: 1 (5)"
        );
    }

    #[test]
    fn garbage_frame_is_a_decode_error_naming_the_watch() {
        let err = decode_event::<ConfigMap>(
            b"{\"type\":\"ADDED\",\"object\":{nope",
            "/api/v1/configmaps",
        )
        .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with("decoding a watch frame from /api/v1/configmaps: "),
            "{msg}"
        );
        assert!(
            msg.ends_with("the data began: {\"type\":\"ADDED\",\"object\":{nope"),
            "{msg}"
        );
    }

    #[test]
    fn unknown_event_type_is_a_decode_error() {
        let err = decode_event::<ConfigMap>(br#"{"type":"RENAMED","object":{}}"#, "w").unwrap_err();
        assert!(matches!(err, Error::Decode { .. }), "{err}");
    }

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

#[cfg(all(test, feature = "protobuf"))]
mod protobuf_tests {
    use super::*;
    use crate::client::codec::protobuf::tests::ld;
    use k8s_openapi::api::core::v1::ConfigMap;

    /// A watch frame: `type`, then the object as `RawExtension { raw: k8s\0 Unknown }`.
    fn frame(event_type: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
        let type_meta = [ld(1, b"v1"), ld(2, kind.as_bytes())].concat();
        let envelope = [b"k8s\0".to_vec(), ld(1, &type_meta), ld(2, raw)].concat();
        [ld(1, event_type.as_bytes()), ld(2, &ld(1, &envelope))].concat()
    }

    fn decode_protobuf(frame: &[u8], what: &str) -> Result<WatchEvent<Raw<ConfigMap>>> {
        decode(Format::Protobuf(kind()), frame, what)
    }

    fn kind() -> ProtoKind {
        Raw::<ConfigMap>::protobuf_kind().expect("ConfigMap has a protobuf form")
    }

    #[test]
    fn an_error_event_becomes_the_servers_status() {
        // Status { status: "Failure", message, reason: "Expired", code: 410 }.
        let status = [
            ld(2, b"Failure"),
            ld(3, b"too old resource version: 1 (5)"),
            ld(4, b"Expired"),
            vec![6 << 3, 0x9a, 0x03],
        ]
        .concat();
        let err = decode_protobuf(&frame("ERROR", "Status", &status), "w").unwrap_err();
        assert!(err.is_gone(), "{err}");
        assert_eq!(
            err.to_string(),
            "410 Expired: too old resource version: 1 (5)"
        );
    }

    #[test]
    fn a_bookmark_carries_its_version_and_the_end_of_initial_events() {
        // ConfigMap { metadata: { resourceVersion: "12", annotations: {end: "true"} } }.
        let annotation = [ld(1, INITIAL_EVENTS_END.as_bytes()), ld(2, b"true")].concat();
        let meta = [ld(6, b"12"), ld(12, &annotation)].concat();
        let event = decode_protobuf(&frame("BOOKMARK", "ConfigMap", &ld(1, &meta)), "w").unwrap();
        let WatchEvent::Bookmark(b) = event else {
            panic!("not a bookmark: {event:?}")
        };
        assert_eq!(b.metadata.resource_version, "12");
        assert!(b.is_initial_events_end());
    }

    #[test]
    fn an_unknown_event_type_or_a_garbled_frame_is_an_error() {
        let meta = ld(1, &ld(1, b"a"));
        let err = decode_protobuf(&frame("RENAMED", "ConfigMap", &meta), "w").unwrap_err();
        assert!(matches!(err, Error::Decode { .. }), "{err}");
        let err = decode_protobuf(b"\x0a\x05AD", "w").unwrap_err();
        assert!(matches!(err, Error::Protobuf { .. }), "{err}");
        assert!(
            err.to_string()
                .starts_with("decoding a watch frame from w: malformed protobuf")
        );
    }
}
