//! [`Raw`]: an object kept as the JSON the server sent, decoded into its type on demand.
//!
//! # Implementation Details
//!
//! A `Raw<K>` is one heap block: the object's JSON, followed by the decoded form of any key
//! field whose JSON string carried an escape (the API server never escapes names, namespaces
//! or resourceVersions, so in practice nothing follows). Six spans of 32-bit offsets into
//! that block mark the name, namespace, resourceVersion, uid, metadata and labels. A watch
//! frame becomes a `Raw<K>` after one validating pass of [`scan`](super::scan) and one copy
//! of the object's bytes out of the network buffer, so the cache never pins the buffer it
//! came in.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::scan::{self, ObjectFields, StrSpan};

/// A Kubernetes object kept as its JSON: validated, its key fields picked out, and decoded
/// into `K` only when asked.
///
/// Informers that cache `Raw<K>` do the least work per event: a watch event costs one
/// validating scan of its bytes and one copy, not the dozens of allocations of building `K`,
/// and the cache holds the compact JSON instead of `K`'s tree of strings and maps. A
/// controller decodes the few objects it actually reconciles, with [`decode`](Self::decode).
///
/// What is checked on arrival: the JSON is well-formed (strictly, as `serde_json` parses it)
/// and `metadata.name`, `namespace`, `resourceVersion` and `uid` are strings (or `null`) where present.
/// What is not: the rest of `K`'s schema, which [`decode`](Self::decode) checks.
///
/// `Raw<K>` is a [`k8s_openapi::Resource`] when `K` is, so [`Api`](crate::client::Api) and the
/// informer factory serve it like `K`:
///
/// ```
/// use controller_runtime::client::Raw;
/// use informer::Object;
/// use k8s_openapi::api::core::v1::ConfigMap;
///
/// let raw: Raw<ConfigMap> = Raw::from_json(
///     r#"{"apiVersion":"v1","kind":"ConfigMap",
///         "metadata":{"name":"web","namespace":"prod","labels":{"app":"web"}},
///         "data":{"size":"3"}}"#,
/// )
/// .unwrap();
/// assert_eq!(raw.name(), "web");
/// assert_eq!(raw.label("app").as_deref(), Some("web"));
/// let cm: ConfigMap = raw.decode().unwrap();
/// assert_eq!(cm.data.unwrap()["size"], "3");
/// ```
pub struct Raw<K> {
    /// The object's JSON (`json_len` bytes), then any unescaped key fields.
    buf: Box<str>,
    json_len: u32,
    name: Span,
    namespace: Span,
    resource_version: Span,
    uid: Span,
    metadata: Span,
    labels: Span,
    /// The typed form, decoded on the first [`Raw::typed`] and kept.
    typed: OnceLock<Arc<K>>,
}

/// A range of `Raw::buf`, or nothing.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Span {
    start: u32,
    end: u32,
}

impl Span {
    const NONE: Span = Span {
        start: u32::MAX,
        end: u32::MAX,
    };

    fn get(self, buf: &str) -> Option<&str> {
        (self.start != u32::MAX).then(|| &buf[self.start as usize..self.end as usize])
    }
}

/// Builds the buffer and spans for the object at `fields.object` of `input`; `buf` starts
/// as the object's JSON.
#[derive(Default)]
struct Builder<'a> {
    input: &'a str,
    base: usize,
    buf: String,
}

impl Builder<'_> {
    /// The span of a string field: into the copied JSON when it has no escapes, otherwise
    /// into its decoded form appended after the JSON.
    fn string(&mut self, field: Option<&StrSpan>) -> Span {
        let Some(escaped) = field.filter(|f| f.escaped) else {
            return self.range(field.map(|f| &f.range));
        };
        let start = self.buf.len();
        self.buf.push_str(&escaped.value(self.input));
        Span {
            start: start as u32,
            end: self.buf.len() as u32,
        }
    }

    /// The span of a part of the object, by its range in the input; nothing if it is absent.
    fn range(&self, range: Option<&Range<usize>>) -> Span {
        range.map_or(Span::NONE, |range| Span {
            start: (range.start - self.base) as u32,
            end: (range.end - self.base) as u32,
        })
    }

    /// The `Raw` of the JSON in the buffer, whose key fields `fields` locates: any with an
    /// escape is decoded after the JSON.
    fn finish<K>(mut self, fields: &ObjectFields) -> Raw<K> {
        let json_len = self.buf.len() as u32;
        let name = self.string(fields.name.as_ref());
        let namespace = self.string(fields.namespace.as_ref());
        let resource_version = self.string(fields.resource_version.as_ref());
        let uid = self.string(fields.uid.as_ref());
        let metadata = self.range(fields.metadata.as_ref());
        let labels = self.range(fields.labels.as_ref());
        Raw {
            buf: self.buf.into_boxed_str(),
            json_len,
            name,
            namespace,
            resource_version,
            uid,
            metadata,
            labels,
            typed: OnceLock::new(),
        }
    }
}

impl<K> Raw<K> {
    /// Checks `json` (one JSON object) and keeps it.
    ///
    /// # Errors
    ///
    /// If `json` is not one well-formed JSON object, a key field is not a string, or the
    /// object exceeds 4 GiB. The message gives the byte offset of the fault.
    pub fn from_json(json: &str) -> serde_json::Result<Self> {
        let fields = scan::scan_object(json).map_err(serde_json::Error::custom)?;
        Self::from_fields(json, &fields)
    }

    /// Checks `bytes` (one JSON object, UTF-8) and keeps them: [`from_json`](Self::from_json).
    ///
    /// # Errors
    ///
    /// As [`from_json`](Self::from_json), and if `bytes` are not UTF-8.
    pub fn from_slice(bytes: &[u8]) -> serde_json::Result<Self> {
        let json = std::str::from_utf8(bytes).map_err(serde_json::Error::custom)?;
        Self::from_json(json)
    }

    /// Serializes `object` and keeps the result.
    ///
    /// # Errors
    ///
    /// If `object` does not serialize to a JSON object.
    pub fn encode(object: &K) -> serde_json::Result<Self>
    where
        K: Serialize,
    {
        Self::from_json(&serde_json::to_string(object)?)
    }

    /// Copies the object that `fields` (from a scan of `input`) locates.
    pub(crate) fn from_fields(input: &str, fields: &ObjectFields) -> serde_json::Result<Self> {
        let object = &input[fields.object.clone()];
        if u32::try_from(object.len()).is_err() {
            return Err(serde_json::Error::custom(
                "object of 4 GiB or more cannot be kept",
            ));
        }
        let b = Builder {
            input,
            base: fields.object.start,
            buf: object.to_owned(),
        };
        Ok(b.finish(fields))
    }

    /// Keeps `json`, which the protobuf transcoder wrote (so it is well-formed),
    /// whole: `fields` locate its key fields and span all of it.
    ///
    /// # Errors
    ///
    /// If the object is 4 GiB or more.
    #[cfg(feature = "protobuf")]
    pub(crate) fn from_transcoded(json: String, fields: &ObjectFields) -> serde_json::Result<Self> {
        debug_assert_eq!(fields.object, 0..json.len());
        if fields.key_escaped() || u32::try_from(json.len()).is_err() {
            // Rare: let the general path decode the escapes (or refuse the size).
            return Self::from_fields(&json, fields);
        }
        // Every key field is a span of the JSON itself, which the builder never reads.
        let b = Builder {
            buf: json,
            ..Builder::default()
        };
        Ok(b.finish(fields))
    }

    /// Drops `metadata.managedFields`, which are often most of an object's bytes and which
    /// controllers rarely read: the transform to give an informer caching `Raw<K>` to halve
    /// what it holds.
    ///
    /// ```
    /// use controller_runtime::client::Raw;
    /// use k8s_openapi::api::core::v1::ConfigMap;
    ///
    /// let mut raw: Raw<ConfigMap> = Raw::from_json(
    ///     r#"{"metadata":{"managedFields":[{"manager":"kubectl"}],"name":"web"}}"#,
    /// )
    /// .unwrap();
    /// raw.strip_managed_fields();
    /// assert_eq!(raw.json(), r#"{"metadata":{"name":"web"}}"#);
    /// ```
    pub fn strip_managed_fields(&mut self) {
        let json = self.json();
        // The JSON was checked on arrival, so the scan does not fail; without the member,
        // the object stays as it is.
        let Some(member) = scan::scan_object(json).ok().and_then(|f| f.managed_fields) else {
            return;
        };
        // Remove the member with the comma that separates it from a neighbour: the one before
        // it, or else the one after it.
        let before = json[..member.start].trim_end();
        let after = json[member.end..].trim_start();
        let (before, after) = match before.strip_suffix(',') {
            Some(before) => (before, after),
            None => (
                before,
                after.strip_prefix(',').unwrap_or(after).trim_start(),
            ),
        };
        if let Ok(raw) = Self::from_json(&format!("{before}{after}")) {
            *self = raw;
        }
    }

    /// The object's JSON, as the server sent it.
    pub fn json(&self) -> &str {
        &self.buf[..self.json_len as usize]
    }

    /// `metadata.uid`.
    pub fn uid(&self) -> Option<&str> {
        self.uid.get(&self.buf)
    }

    /// `metadata.labels` as JSON, when present.
    pub fn labels_json(&self) -> Option<&str> {
        self.labels.get(&self.buf)
    }

    /// `metadata` as JSON, when present.
    pub fn metadata_json(&self) -> Option<&str> {
        self.metadata.get(&self.buf)
    }

    /// The routing facts of the object's metadata (generation, owners, finalizers, deletion
    /// timestamp, labels, annotations), read from the `metadata` member alone: the rest of
    /// the object is not parsed.
    ///
    /// ```
    /// use controller_runtime::client::Raw;
    /// use k8s_openapi::api::apps::v1::Deployment;
    ///
    /// let raw: Raw<Deployment> = Raw::from_json(
    ///     r#"{"metadata":{"name":"web","generation":4,"ownerReferences":[{"apiVersion":"cache.example.com/v1alpha1",
    ///         "kind":"Memcached","name":"mc","uid":"u-1","controller":true}]},"spec":{"replicas":3}}"#,
    /// )
    /// .unwrap();
    /// let meta = raw.meta().unwrap();
    /// assert_eq!(meta.generation, Some(4));
    /// assert_eq!(meta.controller().unwrap().name, "mc");
    /// ```
    ///
    /// # Errors
    ///
    /// If a routing field does not have its schema's type (a `generation` that is not a
    /// number, say).
    pub fn meta(&self) -> serde_json::Result<MetaView<'_>> {
        match self.metadata_json() {
            Some(json) => serde_json::from_str(json),
            None => Ok(MetaView::default()),
        }
    }

    /// The object in its type, decoded on the first call and kept: later calls return the
    /// same `Arc` without decoding again, until the object changes (a changed object is a
    /// new `Raw`). This is how a cache of `Raw<K>` that keeps typed forms serves reads;
    /// [`decode`](Self::decode) is how one that does not serves them.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use controller_runtime::client::Raw;
    /// use k8s_openapi::api::core::v1::ConfigMap;
    ///
    /// let raw: Raw<ConfigMap> = Raw::from_json(r#"{"metadata":{"name":"web"}}"#).unwrap();
    /// let first = raw.typed().unwrap();
    /// assert!(Arc::ptr_eq(&first, &raw.typed().unwrap()));
    /// ```
    ///
    /// # Errors
    ///
    /// If the JSON does not match `K`'s schema; nothing is kept then, and the next call tries
    /// again.
    pub fn typed(&self) -> serde_json::Result<Arc<K>>
    where
        K: DeserializeOwned,
    {
        if let Some(typed) = self.typed.get() {
            return Ok(Arc::clone(typed));
        }
        let decoded = Arc::new(self.decode()?);
        Ok(Arc::clone(self.typed.get_or_init(|| decoded)))
    }

    /// Whether [`typed`](Self::typed) has decoded and kept the typed form.
    pub fn is_decoded(&self) -> bool {
        self.typed.get().is_some()
    }

    /// Decodes the object into `K`. Each call decodes afresh; [`typed`](Self::typed) keeps
    /// its result.
    ///
    /// # Errors
    ///
    /// If the JSON does not match `K`'s schema.
    pub fn decode(&self) -> serde_json::Result<K>
    where
        K: DeserializeOwned,
    {
        serde_json::from_str(self.json())
    }

    /// Decodes the object into any type: a smaller view of it, or
    /// [`PartialObjectMetadata`](crate::client::PartialObjectMetadata) for its whole metadata.
    ///
    /// # Errors
    ///
    /// If the JSON does not match `T`'s schema.
    pub fn decode_as<T: DeserializeOwned>(&self) -> serde_json::Result<T> {
        serde_json::from_str(self.json())
    }
}

impl<K: Send + Sync + 'static> informer::Object for Raw<K> {
    fn name(&self) -> &str {
        self.name.get(&self.buf).unwrap_or("")
    }

    fn namespace(&self) -> Option<&str> {
        self.namespace.get(&self.buf)
    }

    fn resource_version(&self) -> Option<&str> {
        self.resource_version.get(&self.buf)
    }

    fn label(&self, key: &str) -> Option<Cow<'_, str>> {
        scan::lookup(self.labels_json()?, key)
    }
}

impl<K: k8s_openapi::Resource> k8s_openapi::Resource for Raw<K> {
    const API_VERSION: &'static str = K::API_VERSION;
    const GROUP: &'static str = K::GROUP;
    const KIND: &'static str = K::KIND;
    const VERSION: &'static str = K::VERSION;
    const URL_PATH_SEGMENT: &'static str = K::URL_PATH_SEGMENT;
    type Scope = K::Scope;
}

impl<K> Clone for Raw<K> {
    fn clone(&self) -> Self {
        Raw {
            buf: self.buf.clone(),
            typed: self.typed.clone(),
            ..*self
        }
    }
}

impl<K> PartialEq for Raw<K> {
    fn eq(&self, other: &Self) -> bool {
        self.json() == other.json()
    }
}

impl<K> Eq for Raw<K> {}

impl<K> fmt::Debug for Raw<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Raw")
            .field("kind", &std::any::type_name::<K>())
            .field("namespace", &self.namespace.get(&self.buf))
            .field("name", &self.name.get(&self.buf))
            .field("resource_version", &self.resource_version.get(&self.buf))
            .field("json_bytes", &self.json_len)
            .finish()
    }
}

impl<K> Serialize for Raw<K> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // Already-checked JSON goes out as it is.
        let raw: &RawValue =
            serde_json::from_str(self.json()).map_err(serde::ser::Error::custom)?;
        raw.serialize(serializer)
    }
}

impl<'de, K> Deserialize<'de> for Raw<K> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(deserializer)?;
        Raw::from_json(raw.get()).map_err(D::Error::custom)
    }
}

// Keep the type as small as its fields promise: a boxed string, a length, six spans and
// the slot for the typed form.
const _: () = assert!(std::mem::size_of::<Raw<()>>() == 88);

/// The routing facts of an object's metadata, borrowed from its JSON where it can be: what
/// a controller needs to route an event without decoding the object ([`Raw::meta`]).
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct MetaView<'a> {
    /// `metadata.uid`: tells an object from another of the same name made after it.
    #[serde(default, borrow)]
    pub uid: Option<Cow<'a, str>>,
    /// `metadata.generation`: bumped by the server on every change to the spec.
    #[serde(default)]
    pub generation: Option<i64>,
    /// `metadata.deletionTimestamp`: set once the object is being deleted.
    #[serde(default, borrow)]
    pub deletion_timestamp: Option<Cow<'a, str>>,
    /// `metadata.ownerReferences`.
    #[serde(default, borrow)]
    pub owner_references: Vec<OwnerRefView<'a>>,
    /// `metadata.finalizers`.
    #[serde(default)]
    pub finalizers: Vec<String>,
    /// `metadata.labels`.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// `metadata.annotations`.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

impl MetaView<'_> {
    /// The owner reference marked `controller: true`, if any.
    pub fn controller(&self) -> Option<&OwnerRefView<'_>> {
        self.owner_references
            .iter()
            .find(|o| o.controller == Some(true))
    }

    /// Whether the object is being deleted (it has a deletion timestamp).
    pub fn is_deleting(&self) -> bool {
        self.deletion_timestamp.is_some()
    }
}

/// One owner reference, as [`MetaView`] reads it.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct OwnerRefView<'a> {
    /// The owner's `apiVersion` (`group/version`, or `version` for the core group).
    #[serde(borrow)]
    pub api_version: Cow<'a, str>,
    /// The owner's kind.
    #[serde(borrow)]
    pub kind: Cow<'a, str>,
    /// The owner's name, in the object's own namespace.
    #[serde(borrow)]
    pub name: Cow<'a, str>,
    /// The owner's uid.
    #[serde(borrow)]
    pub uid: Cow<'a, str>,
    /// Whether this owner is the object's managing controller.
    #[serde(default)]
    pub controller: Option<bool>,
}

impl OwnerRefView<'_> {
    /// The owner's API group (empty for the core group).
    pub fn group(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map_or("", |(group, _)| group)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use informer::Object;
    use k8s_openapi::api::core::v1::{ConfigMap, Pod};

    const CM: &str = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"web","namespace":"prod","uid":"u-1","resourceVersion":"7","labels":{"app":"web","tier":"front"},"managedFields":[{"manager":"kubectl","fieldsV1":{"f:data":{}}}]},"data":{"size":"3"}}"#;

    #[test]
    fn key_fields_are_read_without_decoding() {
        let raw: Raw<ConfigMap> = Raw::from_json(CM).unwrap();
        assert_eq!(raw.name(), "web");
        assert_eq!(raw.namespace(), Some("prod"));
        assert_eq!(raw.resource_version(), Some("7"));
        assert_eq!(raw.uid(), Some("u-1"));
        assert_eq!(raw.label("tier").as_deref(), Some("front"));
        assert_eq!(raw.label("nope"), None);
        assert_eq!(raw.json(), CM);
        assert_eq!(&*informer::key_of(&raw), "prod/web");
    }

    #[test]
    fn decode_gives_the_typed_object_and_its_errors() {
        let raw: Raw<ConfigMap> = Raw::from_json(CM).unwrap();
        let cm = raw.decode().unwrap();
        assert_eq!(cm.metadata.name.as_deref(), Some("web"));
        assert_eq!(cm.metadata.managed_fields.unwrap().len(), 1);
        let wrong: Raw<ConfigMap> = Raw::from_json(r#"{"metadata":{},"data":5}"#).unwrap();
        assert!(wrong.decode().is_err());
    }

    #[test]
    fn escaped_key_fields_are_decoded_once() {
        let raw: Raw<ConfigMap> =
            Raw::from_json(r#"{"metadata":{"name":"a\u002db","namespace":"n\/s"}}"#).unwrap();
        assert_eq!(raw.name(), "a-b");
        assert_eq!(raw.namespace(), Some("n/s"));
        assert_eq!(
            raw.json(),
            r#"{"metadata":{"name":"a\u002db","namespace":"n\/s"}}"#
        );
        assert_eq!(raw.clone(), raw);
    }

    #[test]
    fn bad_input_is_refused_with_its_position() {
        let err = Raw::<ConfigMap>::from_json(r#"{"metadata":{"name":"x"}"#).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unexpected end of input in an object at byte 24"
        );
        let err = Raw::<ConfigMap>::from_json(r#"{"metadata":{"name":1}}"#).unwrap_err();
        assert_eq!(err.to_string(), "expected a string at byte 21");
        assert!(Raw::<ConfigMap>::from_json("[1]").is_err());
        assert!(Raw::<ConfigMap>::from_slice(b"{\"a\":\"\xff\"}").is_err());
    }

    #[test]
    fn serde_round_trips_the_json_unchanged() {
        let list = format!(r#"{{"items":[{CM}, {CM}]}}"#);
        #[derive(Deserialize)]
        struct List {
            items: Vec<Raw<ConfigMap>>,
        }
        let list: List = serde_json::from_str(&list).unwrap();
        assert_eq!(list.items[1].name(), "web");
        assert_eq!(serde_json::to_string(&list.items[0]).unwrap(), CM);
        let encoded = Raw::<Pod>::encode(&Pod::default()).unwrap();
        assert_eq!(encoded.name(), "");
        assert_eq!(encoded.decode().unwrap(), Pod::default());
    }

    #[test]
    fn stripping_managed_fields_keeps_everything_else() {
        let mut raw: Raw<ConfigMap> = Raw::from_json(CM).unwrap();
        raw.strip_managed_fields();
        let mut want: ConfigMap = serde_json::from_str(CM).unwrap();
        want.metadata.managed_fields = None;
        assert_eq!(raw.decode().unwrap(), want);
        assert_eq!(raw.label("app").as_deref(), Some("web"));
        for (json, stripped) in [
            (r#"{"metadata":{"managedFields":[]}}"#, r#"{"metadata":{}}"#),
            (
                r#"{"metadata":{"managedFields":[] , "name":"a"}}"#,
                r#"{"metadata":{"name":"a"}}"#,
            ),
            (
                r#"{"metadata":{"name":"a", "managedFields":[{"a":1}]}}"#,
                r#"{"metadata":{"name":"a"}}"#,
            ),
            (
                r#"{"metadata":{"name":"a"}}"#,
                r#"{"metadata":{"name":"a"}}"#,
            ),
        ] {
            let mut raw: Raw<ConfigMap> = Raw::from_json(json).unwrap();
            raw.strip_managed_fields();
            assert_eq!(raw.json(), stripped);
        }
    }

    #[test]
    fn debug_shows_the_key_not_the_body() {
        let raw: Raw<ConfigMap> = Raw::from_json(CM).unwrap();
        let debug = format!("{raw:?}");
        assert!(
            debug.contains("\"web\"") && debug.contains("json_bytes"),
            "{debug}"
        );
        assert!(!debug.contains("size"), "{debug}");
    }
}
