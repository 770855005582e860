//! Entry points for the fuzz targets in `fuzz/`: **not API**. Hidden from the docs, outside
//! any compatibility promise, and free to change with the targets.
//!
//! The targets (`fuzz/fuzz_targets/`) and the corpus replay test (`tests/fuzz_corpus.rs`)
//! share one body per target (`fuzz/src/lib.rs`). Most of what those bodies drive is public
//! API ([`EventReader`](crate::client::EventReader), [`Raw`](crate::client::Raw),
//! [`Kubeconfig`](crate::config::Kubeconfig), [`Config::resolve`](crate::config::Config));
//! these functions reach the few private parsers they cannot, and do nothing else.

use bytes::Bytes;

use crate::client::{Format, ObjectList, Result, Status, WatchEvent, WatchObject};
use crate::runtime::webhook::Handler;

/// The format of `K`'s protobuf form when `protobuf`, else JSON; `None` when `K` has no
/// protobuf form (or the crate is built without the `protobuf` feature).
fn format<K: WatchObject>(protobuf: bool) -> Option<Format> {
    if !protobuf {
        return Some(Format::Json);
    }
    #[cfg(feature = "protobuf")]
    return K::protobuf_kind().map(Format::Protobuf);
    #[cfg(not(feature = "protobuf"))]
    None
}

/// Whether `input` is exactly one well-formed JSON value, as the scanner behind
/// [`Raw`](crate::client::Raw) and the watch decoder judges it; the error says why not and
/// where.
pub fn validate_json(input: &str) -> std::result::Result<(), String> {
    crate::client::validate_json(input).map_err(|e| e.to_string())
}

/// Decodes one watch frame as the client's one `decode` does: JSON, or `K`'s protobuf when
/// `protobuf` (`None` if `K` has none).
pub fn decode_frame<K: WatchObject>(protobuf: bool, frame: &[u8]) -> Option<Result<WatchEvent<K>>> {
    Some(crate::client::decode(format::<K>(protobuf)?, frame, "fuzz"))
}

/// Decodes one list body as the client's one `decode` does: JSON, or `K`'s protobuf when
/// `protobuf` (`None` if `K` has none).
pub fn decode_list<K: WatchObject>(protobuf: bool, body: &[u8]) -> Option<Result<ObjectList<K>>> {
    Some(crate::client::decode(format::<K>(protobuf)?, body, "fuzz"))
}

/// The `Status` the client makes of an error answer with HTTP status `code` and `body`, read
/// as JSON, or as protobuf when `protobuf` (`None` without the `protobuf` feature).
pub fn status_from_response(code: u16, protobuf: bool, body: &[u8]) -> Option<Status> {
    use k8s_openapi::api::core::v1::ConfigMap;
    let format = format::<crate::client::Raw<ConfigMap>>(protobuf)?;
    Some(crate::client::status_from_response(code, format, body))
}

/// A kubeconfig file's bytes as text, as [`Kubeconfig::read`](crate::config::Kubeconfig::read)
/// decodes them (UTF-8, or UTF-16 with a byte-order mark); `None` if they are neither.
pub fn kubeconfig_text(bytes: &[u8]) -> Option<String> {
    crate::config::kubeconfig::decode_text(bytes)
}

/// Reads an exec credential plugin's `stdout` as the client does for a plugin of
/// `api_version`: the token's length and whether it expires, or why the output is refused.
pub fn exec_credential(
    stdout: &[u8],
    api_version: &str,
) -> std::result::Result<(usize, bool), String> {
    crate::config::parse_credential(stdout, api_version)
        .map(|c| (c.token.expose().len(), c.expires.is_some()))
}

/// Answers an admission webhook request body as the webhook server does, with `handler`:
/// the HTTP status and the body sent back.
pub fn admission_review(handler: &Handler, content_type: &str, body: &[u8]) -> (u16, Bytes) {
    let (status, body) = crate::runtime::webhook::review(handler, content_type, body);
    (status.as_u16(), body)
}
