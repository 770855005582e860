//! The client's wire codec: which format a list or a watch travels in, and how its bytes
//! become objects. The HTTP side of the client sends requests and moves bytes; it asks this
//! module which format to ask for ([`Codec::format`]), which one arrived
//! ([`Format::arrived`], the one reading of the Content-Type), and hands every list body and
//! every watch frame to [`decode`].
//!
//! ```text
//!  request:   Codec::format::<K>() ──▶ Format::Json | Format::Protobuf(kind) ──▶ Accept
//!  response:  Content-Type ──▶ Format::arrived ──▶ the Format to decode with
//!
//!  watch body ──▶ EventReader cuts frames:        list body
//!                   JSON lines (FrameDecoder)         │
//!                   length-prefixed (WatchFramer)     │
//!                        │ one frame                  │ the whole body
//!                        ▼                            ▼
//!                 decode(format, bytes) ──▶ WatchEvent<K> | ObjectList<K>
//!                   JSON:     scan (one validating pass) ──▶ Raw<K>; serde for other types
//!                   protobuf: protobuf (envelope, list, event) ──▶ proto_json, with the
//!                             tables of proto_schema (proto_tables, generated) ──▶ Raw<K>
//! ```
//!
//! Only [`Raw`] of a built-in kind has a protobuf form; everything else, and everything
//! without the `protobuf` feature, is JSON. A protobuf message holding a field the tables
//! do not know makes the [`Codec`] that met it read that kind as JSON from then on
//! ([`Codec::refused`]), so the relist that follows succeeds.

mod event;
#[cfg(feature = "protobuf")]
pub(crate) mod proto_json;
#[cfg(feature = "protobuf")]
mod proto_schema;
#[cfg(feature = "protobuf")]
mod proto_tables;
#[cfg(feature = "protobuf")]
pub(crate) mod protobuf;
mod raw;
mod scan;

use http::Response;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use serde::Deserialize;
use serde::de::DeserializeOwned;

pub use event::{
    Bookmark, BookmarkMeta, EventReader, FrameDecoder, INITIAL_EVENTS_END, WatchEvent, WatchObject,
    decode_event,
};
#[cfg(feature = "protobuf")]
pub use proto_json::ProtoKind;
pub use raw::{MetaView, OwnerRefView, Raw};

pub(crate) use scan::validate as validate_json;

use super::error::{Error, Result, Status, snippet};

/// The wire format of a list body or a watch: the one a request asks for, and the one that
/// arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    /// JSON: every kind can travel as JSON.
    Json,
    /// The apiserver's protobuf of one built-in kind.
    #[cfg(feature = "protobuf")]
    Protobuf(ProtoKind),
}

impl Format {
    /// The Accept header asking for this format; `json` is the JSON media type to ask for
    /// (plain, or as metadata only).
    pub(crate) fn accept(self, json: &'static str) -> &'static str {
        match self {
            Format::Json => json,
            // Protobuf, or JSON if the server has no protobuf form of the kind.
            #[cfg(feature = "protobuf")]
            Format::Protobuf(_) => "application/vnd.kubernetes.protobuf, application/json",
        }
    }

    /// The format `response` to a request that asked for `self` arrived in, as its
    /// Content-Type says: the one test of which format arrived. Asked for protobuf, a server
    /// may still answer JSON (a custom resource, or a server without it); asked for JSON, it
    /// answers JSON.
    pub(crate) fn arrived<B>(self, response: &Response<B>) -> Format {
        #[cfg(not(feature = "protobuf"))]
        let _ = response;
        match self {
            Format::Json => Format::Json,
            #[cfg(feature = "protobuf")]
            Format::Protobuf(_) => {
                let protobuf = response
                    .headers()
                    .get(http::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| v.starts_with(protobuf::MEDIA_TYPE));
                if protobuf { self } else { Format::Json }
            }
        }
    }
}

/// One client's choice of formats: whether it asks for protobuf at all, and the kinds it
/// reads as JSON though they have a protobuf form (see [`Codec::refused`]). Held per client,
/// so one cluster's newer server does not turn another cluster's watches to JSON.
#[derive(Debug)]
pub(crate) struct Codec {
    #[cfg(feature = "protobuf")]
    protobuf: bool,
    #[cfg(feature = "protobuf")]
    refusals: proto_json::Refusals,
}

impl Codec {
    /// A codec that asks for protobuf where it can if `protobuf`.
    pub(crate) fn new(protobuf: bool) -> Self {
        #[cfg(not(feature = "protobuf"))]
        let _ = protobuf;
        Codec {
            #[cfg(feature = "protobuf")]
            protobuf,
            #[cfg(feature = "protobuf")]
            refusals: proto_json::Refusals::default(),
        }
    }

    /// The format to ask for when listing or watching `K`: protobuf if `K` has a protobuf
    /// form, this codec asks for protobuf, and it has not refused `K`'s kind.
    #[cfg_attr(not(feature = "protobuf"), allow(clippy::extra_unused_type_parameters))]
    pub(crate) fn format<K: WatchObject>(&self) -> Format {
        #[cfg(feature = "protobuf")]
        if let Some(kind) = K::protobuf_kind()
            && self.protobuf
            && self.refusals.usable(kind)
        {
            return Format::Protobuf(kind);
        }
        Format::Json
    }

    /// Whether `error`, from decoding `format`, is a protobuf field the tables do not know
    /// (a server newer than this client). If it is, this codec reads that kind as JSON from
    /// now on.
    pub(crate) fn refused(&self, format: Format, error: &Error) -> bool {
        #[cfg(feature = "protobuf")]
        if let (
            Format::Protobuf(kind),
            Error::Protobuf {
                source: proto_json::Error::UnknownField { .. },
                ..
            },
        ) = (format, error)
        {
            tracing::warn!(%error, "reading this kind as JSON from now on");
            self.refusals.refuse(kind);
            return true;
        }
        let _ = (format, error);
        false
    }
}

/// What a list body or a watch frame decodes into: an [`ObjectList`] or a [`WatchEvent`].
pub(crate) trait Decode: Sized {
    /// Decodes JSON; `what` (a path or URL) names the source in errors.
    fn json(bytes: &[u8], what: &str) -> Result<Self>;

    /// Decodes the protobuf of `kind`; `what` names the source in errors.
    #[cfg(feature = "protobuf")]
    fn protobuf(kind: ProtoKind, bytes: &[u8], what: &str) -> Result<Self>;
}

/// Decodes one list body or one watch frame of `format`; `what` (a path or URL) names the
/// source in errors.
///
/// # Errors
///
/// [`Error::Decode`] for JSON that is not a `T`, `Error::Protobuf` for protobuf that cannot
/// be read or transcoded, [`Error::Api`] for a watch's `ERROR` event.
pub(crate) fn decode<T: Decode>(format: Format, bytes: &[u8], what: &str) -> Result<T> {
    match format {
        Format::Json => T::json(bytes, what),
        #[cfg(feature = "protobuf")]
        Format::Protobuf(kind) => T::protobuf(kind, bytes, what),
    }
}

/// Decodes a JSON body; `what` names it in the error.
pub(crate) fn decode_json<T: DeserializeOwned>(what: String, body: &[u8]) -> Result<T> {
    serde_json::from_slice(body).map_err(|source| Error::Decode {
        what,
        source,
        snippet: snippet(body, 200),
    })
}

/// The `Status` an error answer's body of `format` holds, if it holds one.
pub(crate) fn decode_status(format: Format, body: &[u8]) -> Option<Status> {
    match format {
        Format::Json => serde_json::from_slice(body).ok(),
        #[cfg(feature = "protobuf")]
        Format::Protobuf(_) => protobuf::envelope(body)
            .ok()
            .filter(|e| e.kind == "Status")
            .and_then(|e| protobuf::status(e.raw).ok()),
    }
}

/// One page of a list: the items and the list's metadata (`resourceVersion`, `continue`).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(bound(deserialize = "K: Deserialize<'de>"))]
pub struct ObjectList<K> {
    /// The list's metadata: the `resourceVersion` the list was read at, and the `continue`
    /// token if more pages follow.
    #[serde(default)]
    pub metadata: ListMeta,
    /// The objects.
    #[serde(default = "Vec::new", deserialize_with = "null_as_empty")]
    pub items: Vec<K>,
}

fn null_as_empty<'de, D, K>(d: D) -> Result<Vec<K>, D::Error>
where
    D: serde::Deserializer<'de>,
    K: Deserialize<'de>,
{
    Ok(Option::<Vec<K>>::deserialize(d)?.unwrap_or_default())
}

/// A list body: JSON, or protobuf of one built-in kind, transcoded item by item.
impl<K: WatchObject> Decode for ObjectList<K> {
    fn json(body: &[u8], path: &str) -> Result<Self> {
        decode_json(format!("the list {path}"), body)
    }

    #[cfg(feature = "protobuf")]
    fn protobuf(kind: ProtoKind, body: &[u8], path: &str) -> Result<Self> {
        read_protobuf(kind, body).map_err(|source| Error::Protobuf {
            what: format!("the list {path}"),
            source,
        })
    }
}

/// Reads a protobuf list body of `kind`.
#[cfg(feature = "protobuf")]
fn read_protobuf<K: WatchObject>(
    kind: ProtoKind,
    body: &[u8],
) -> proto_json::Result<ObjectList<K>> {
    let list = protobuf::list(protobuf::envelope(body)?.raw)?;
    let items = list.items.iter().map(|item| K::from_protobuf(kind, item));
    let nonempty = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    Ok(ObjectList {
        metadata: ListMeta {
            resource_version: nonempty(list.resource_version),
            continue_: nonempty(list.continue_token),
            remaining_item_count: list.remaining_item_count,
            ..ListMeta::default()
        },
        items: items.collect::<proto_json::Result<_>>()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_with_null_items_is_empty() {
        let list: ObjectList<serde_json::Value> =
            serde_json::from_str(r#"{"metadata":{"resourceVersion":"5"},"items":null}"#).unwrap();
        assert!(list.items.is_empty());
        assert_eq!(list.metadata.resource_version.as_deref(), Some("5"));
    }
}
