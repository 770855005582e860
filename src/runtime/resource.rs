//! [`ResourceExt`]: an object's name and namespace as `&str`, on every typed object.
//!
//! [`informer::Object`] has methods of the same names (its `namespace` is an `Option`), for
//! the cache's own use; import one or the other, not both, or `obj.name()` is ambiguous.

use k8s_openapi::Metadata;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The name and namespace of any typed object, empty when unset (kube-rs's `ResourceExt`,
/// controller-runtime's `GetName`/`GetNamespace`).
///
/// Every k8s-openapi kind and every kind `#[derive(CustomResource)]` writes implements
/// `k8s_openapi::Metadata<Ty = ObjectMeta>`, and so gets these accessors. They read through
/// an `Arc`, as a reconcile holds its object:
///
/// ```
/// use std::sync::Arc;
///
/// use controller_runtime::runtime::ResourceExt;
/// use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
/// use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
///
/// let cm = Arc::new(ConfigMap {
///     metadata: ObjectMeta {
///         name: Some("settings".into()),
///         namespace: Some("shop".into()),
///         ..ObjectMeta::default()
///     },
///     ..ConfigMap::default()
/// });
/// assert_eq!((cm.namespace(), cm.name()), ("shop", "settings"));
/// // Cluster-scoped, or not set: empty.
/// assert_eq!(Namespace::default().namespace(), "");
/// ```
pub trait ResourceExt {
    /// `metadata.name`; empty when unset (an object not yet created with `generateName`).
    fn name(&self) -> &str;
    /// `metadata.namespace`; empty for a cluster-scoped object, or when unset.
    fn namespace(&self) -> &str;
}

impl<K: Metadata<Ty = ObjectMeta>> ResourceExt for K {
    fn name(&self) -> &str {
        self.metadata().name.as_deref().unwrap_or_default()
    }

    fn namespace(&self) -> &str {
        self.metadata().namespace.as_deref().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;

    use super::*;

    #[test]
    fn unset_name_and_namespace_read_as_empty() {
        let pod = Pod::default();
        assert_eq!((pod.name(), pod.namespace()), ("", ""));
    }
}
