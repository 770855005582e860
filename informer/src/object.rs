//! The [`Object`] trait, object keys (`namespace/name`) and the deletion tombstone.

use std::borrow::Cow;
use std::cell::RefCell;
use std::fmt;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Anything the cache can hold: a Kubernetes object, seen through the few metadata fields
/// the cache reads.
///
/// The cache needs an object's name and namespace (for its key), its resourceVersion (to tell
/// a resync from a change) and, for label-selector queries, its labels. Everything else is
/// read only by your own index functions and handlers, through the concrete type.
///
/// Every `k8s-openapi` type with an [`ObjectMeta`] implements it through a blanket impl, and
/// so does any type that implements `k8s_openapi::Metadata<Ty = ObjectMeta>` (custom
/// resources written in the `k8s-openapi` style). Other types implement it directly; a type
/// that keeps an [`ObjectMeta`] can forward to it:
///
/// ```
/// use std::borrow::Cow;
/// use informer::Object;
/// use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
///
/// struct PartialObjectMetadata {
///     metadata: ObjectMeta,
/// }
///
/// impl Object for PartialObjectMetadata {
///     fn name(&self) -> &str {
///         informer::meta::name(&self.metadata)
///     }
///     fn namespace(&self) -> Option<&str> {
///         self.metadata.namespace.as_deref()
///     }
///     fn resource_version(&self) -> Option<&str> {
///         self.metadata.resource_version.as_deref()
///     }
///     fn label(&self, key: &str) -> Option<Cow<'_, str>> {
///         informer::meta::label(&self.metadata, key)
///     }
/// }
/// ```
pub trait Object: Send + Sync + 'static {
    /// `metadata.name`; empty when unset.
    fn name(&self) -> &str;
    /// `metadata.namespace`; `None` or empty for a cluster-scoped object.
    fn namespace(&self) -> Option<&str>;
    /// `metadata.resourceVersion`.
    fn resource_version(&self) -> Option<&str>;
    /// The value of the label `key`, if the object carries it.
    fn label(&self, key: &str) -> Option<Cow<'_, str>>;
}

impl<K> Object for K
where
    K: k8s_openapi::Metadata<Ty = ObjectMeta> + Send + Sync + 'static,
{
    fn name(&self) -> &str {
        meta::name(self.metadata())
    }
    fn namespace(&self) -> Option<&str> {
        self.metadata().namespace.as_deref()
    }
    fn resource_version(&self) -> Option<&str> {
        self.metadata().resource_version.as_deref()
    }
    fn label(&self, key: &str) -> Option<Cow<'_, str>> {
        meta::label(self.metadata(), key)
    }
}

/// Helpers for implementing [`Object`] over an [`ObjectMeta`].
pub mod meta {
    use std::borrow::Cow;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    /// `metadata.name`, empty when unset.
    pub fn name(meta: &ObjectMeta) -> &str {
        meta.name.as_deref().unwrap_or("")
    }

    /// The value of the label `key`.
    pub fn label<'a>(meta: &'a ObjectMeta, key: &str) -> Option<Cow<'a, str>> {
        let value = meta.labels.as_ref()?.get(key)?;
        Some(Cow::Borrowed(value.as_str()))
    }
}

/// The key of an object in the cache: `namespace/name`, or `name` for a cluster-scoped object.
///
/// Keys are shared strings: the DeltaFIFO allocates one when a key enters the queue, and the
/// indexer keeps that same allocation when the popped deltas are applied to it, so storing an
/// object costs one key allocation however many places refer to it.
pub type Key = Arc<str>;

/// The key of an object with this metadata: `namespace/name`, or `name` when the namespace is
/// empty or absent (client-go's `MetaNamespaceKeyFunc`).
///
/// A missing name counts as empty, as in client-go; the function never fails.
///
/// ```
/// use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
///
/// let meta = ObjectMeta {
///     namespace: Some("default".into()),
///     name: Some("web".into()),
///     ..ObjectMeta::default()
/// };
/// assert_eq!(&*informer::meta_key(&meta), "default/web");
/// ```
pub fn meta_key(meta: &ObjectMeta) -> Key {
    with_key(meta.namespace.as_deref(), meta::name(meta), |key| {
        Key::from(key)
    })
}

/// The key of `obj`: see [`meta_key`].
pub fn key_of<K: Object + ?Sized>(obj: &K) -> Key {
    with_object_key(obj, |key| Key::from(key))
}

/// Splits a key into `(namespace, name)` (client-go's `SplitMetaNamespaceKey`).
///
/// A key without `/` is a cluster-scoped name and gives an empty namespace.
///
/// # Errors
///
/// [`KeyError`] if the key holds more than one `/`.
///
/// ```
/// assert_eq!(informer::split_key("default/web").unwrap(), ("default", "web"));
/// assert_eq!(informer::split_key("node-1").unwrap(), ("", "node-1"));
/// assert!(informer::split_key("a/b/c").is_err());
/// ```
pub fn split_key(key: &str) -> Result<(&str, &str), KeyError> {
    let mut parts = key.split('/');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(name), None, _) => Ok(("", name)),
        (Some(namespace), Some(name), None) => Ok((namespace, name)),
        _ => Err(KeyError {
            key: key.to_owned(),
        }),
    }
}

/// A key that is not `name` or `namespace/name`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unexpected key format: {key:?}")]
pub struct KeyError {
    /// The key that failed to split.
    pub key: String,
}

thread_local! {
    /// Scratch space for building `namespace/name` without allocating on every event.
    static KEY_BUF: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Calls `f` with the key of `obj`, without allocating in the common case: see [`with_key`].
pub(crate) fn with_object_key<K: Object + ?Sized, R>(obj: &K, f: impl FnOnce(&str) -> R) -> R {
    with_key(obj.namespace(), obj.name(), f)
}

/// Calls `f` with the key made of `namespace` and `name`, without allocating in the common
/// case.
///
/// A cluster-scoped key borrows the name; a namespaced key is assembled in a per-thread
/// buffer. If that buffer is already in use (a nested call from inside `f`), the key is
/// allocated instead.
pub(crate) fn with_key<R>(namespace: Option<&str>, name: &str, f: impl FnOnce(&str) -> R) -> R {
    let namespace = match namespace {
        None | Some("") => return f(name),
        Some(namespace) => namespace,
    };
    // `f` is moved into whichever branch runs; `Option` lets the fallback take it.
    let mut f = Some(f);
    let buffered = KEY_BUF.try_with(|cell| {
        let mut buf = cell.try_borrow_mut().ok()?;
        buf.clear();
        buf.push_str(namespace);
        buf.push('/');
        buf.push_str(name);
        f.take().map(|f| f(&buf))
    });
    match (buffered, f) {
        (Ok(Some(out)), _) => out,
        (_, Some(f)) => f(&format!("{namespace}/{name}")),
        (_, None) => unreachable!("the key closure ran but returned nothing"),
    }
}

// === impl DeletedFinalStateUnknown ===

/// A tombstone: the object was deleted while the watch was disconnected, and the relist that
/// noticed it cannot say what the object looked like at the end.
///
/// The DeltaFIFO's `replace` queues it as a `Deleted` delta for every key that was queued or
/// known but is missing from the new list. `obj` is the last state this client saw, which may
/// be stale, or `None` if the known objects no longer held it.
pub struct DeletedFinalStateUnknown<K> {
    /// The key of the deleted object.
    pub key: Key,
    /// The last known state of the object, if any.
    pub obj: Option<Arc<K>>,
}

impl<K> Clone for DeletedFinalStateUnknown<K> {
    fn clone(&self) -> Self {
        Self {
            key: self.key.clone(),
            obj: self.obj.clone(),
        }
    }
}

impl<K: fmt::Debug> fmt::Debug for DeletedFinalStateUnknown<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeletedFinalStateUnknown")
            .field("key", &self.key)
            .field("obj", &self.obj)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn meta(namespace: Option<&str>, name: &str) -> ObjectMeta {
        ObjectMeta {
            namespace: namespace.map(str::to_owned),
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn namespaced_object_key_is_namespace_slash_name() {
        assert_eq!(&*meta_key(&meta(Some("ns"), "a")), "ns/a");
    }

    #[test]
    fn cluster_scoped_object_key_is_the_name() {
        assert_eq!(&*meta_key(&meta(None, "node-1")), "node-1");
        assert_eq!(&*meta_key(&meta(Some(""), "node-1")), "node-1");
    }

    #[test]
    fn missing_name_gives_an_empty_name_part() {
        let mut m = meta(Some("ns"), "");
        m.name = None;
        assert_eq!(&*meta_key(&m), "ns/");
    }

    #[test]
    fn k8s_openapi_types_are_objects_through_the_blanket_impl() {
        let cm = ConfigMap {
            metadata: meta(Some("ns"), "cm"),
            ..ConfigMap::default()
        };
        assert_eq!(&*key_of(&cm), "ns/cm");
        assert_eq!(cm.name(), "cm");
        assert_eq!(cm.namespace(), Some("ns"));
        assert_eq!(cm.label("app"), None);
    }

    #[test]
    fn nested_key_building_falls_back_to_allocation() {
        let outer = meta(Some("a"), "x");
        let inner = meta(Some("b"), "y");
        let both = with_key(outer.namespace.as_deref(), "x", |o| {
            let i = with_key(inner.namespace.as_deref(), "y", str::to_owned);
            format!("{o}+{i}")
        });
        assert_eq!(both, "a/x+b/y");
    }

    #[test]
    fn split_key_accepts_one_or_two_parts() {
        assert_eq!(split_key("ns/a"), Ok(("ns", "a")));
        assert_eq!(split_key("a"), Ok(("", "a")));
        assert_eq!(split_key("ns/"), Ok(("ns", "")));
        assert_eq!(split_key(""), Ok(("", "")));
    }

    #[test]
    fn split_key_rejects_more_than_two_parts() {
        let err = split_key("a/b/c").unwrap_err();
        assert_eq!(err.key, "a/b/c");
        assert_eq!(err.to_string(), "unexpected key format: \"a/b/c\"");
    }
}
