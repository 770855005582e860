//! [`ObjectList`]: one page of a list, and the decoding of a list body into it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use serde::Deserialize;

use super::event::WatchObject;
use super::{Decode, decode_json};
#[cfg(feature = "protobuf")]
use super::{ProtoKind, proto_json, protobuf};
#[cfg(feature = "protobuf")]
use crate::client::error::Error;
use crate::client::error::Result;

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
    let envelope = protobuf::envelope(body)?;
    let list = protobuf::list(envelope.raw)?;
    let items = list
        .items
        .iter()
        .map(|item| K::from_protobuf(kind, item))
        .collect::<proto_json::Result<Vec<K>>>()?;
    let nonempty = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    Ok(ObjectList {
        metadata: ListMeta {
            resource_version: nonempty(list.resource_version),
            continue_: nonempty(list.continue_token),
            remaining_item_count: list.remaining_item_count,
            ..ListMeta::default()
        },
        items,
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
