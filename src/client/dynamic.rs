//! Kinds known only at run time: [`ApiResource`] describes where a kind is served, resolved
//! from a group/version/kind through discovery, and [`DynamicObject`] holds any object.

use std::any::TypeId;

use http::Method;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{APIResourceList, ObjectMeta};
use serde::{Deserialize, Serialize};

use super::error::{Error, Result};
use super::{Client, Req};

/// Where the API serves one kind: its group, version, plural and scope.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ApiResource {
    /// The API group; empty for the core group (`v1`).
    pub group: String,
    /// The version, e.g. `v1`.
    pub version: String,
    /// `group/version`, or `version` for the core group.
    pub api_version: String,
    /// The kind, e.g. `Deployment`.
    pub kind: String,
    /// The plural used in paths, e.g. `deployments`.
    pub plural: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
}

impl ApiResource {
    /// The resource of a k8s-openapi type or a custom resource implementing
    /// `k8s_openapi::Resource`.
    pub fn of<K: k8s_openapi::Resource>() -> Self
    where
        K::Scope: 'static,
    {
        ApiResource {
            group: K::GROUP.to_owned(),
            version: K::VERSION.to_owned(),
            api_version: K::API_VERSION.to_owned(),
            kind: K::KIND.to_owned(),
            plural: K::URL_PATH_SEGMENT.to_owned(),
            namespaced: TypeId::of::<K::Scope>() == TypeId::of::<NamespaceResourceScope>(),
        }
    }

    /// The collection's path, in `namespace` if given.
    pub fn collection_path(&self, namespace: Option<&str>) -> String {
        let prefix = group_version_path(&self.group, &self.version);
        match namespace {
            Some(ns) => format!("{prefix}/namespaces/{ns}/{}", self.plural),
            None => format!("{prefix}/{}", self.plural),
        }
    }
}

/// Where the API serves a group/version: `/api/v1` for the core group, else
/// `/apis/group/version`.
fn group_version_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    }
}

/// Any object: its type, its metadata, and every other field as JSON.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct DynamicObject {
    /// `group/version` of the object.
    #[serde(rename = "apiVersion", default)]
    pub api_version: String,
    /// The object's kind.
    #[serde(default)]
    pub kind: String,
    /// The object's metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Every other top-level field (`spec`, `status`, `data`, …).
    #[serde(flatten)]
    pub data: serde_json::Map<String, serde_json::Value>,
}

object_via_metadata!(DynamicObject);

// === impl Client: discovery ===

impl Client {
    /// Finds where the server serves `kind` of `api_version` (`v1`, `apps/v1`,
    /// `example.com/v1alpha1`), through discovery.
    ///
    /// # Errors
    ///
    /// [`Error::ResourceNotFound`] if the group/version does not serve that kind;
    /// [`Error::Api`] with 404 if the server has no such group/version.
    pub async fn resolve(&self, api_version: &str, kind: &str) -> Result<ApiResource> {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let path = group_version_path(group, version);
        let list: APIResourceList = self.request_json(Req::new(Method::GET, path)).await?;
        list.resources
            .iter()
            // Subresources (`deployments/status`) share the kind; the collection has no '/'.
            .find(|r| r.kind == kind && !r.name.contains('/'))
            .map(|r| ApiResource {
                group: group.to_owned(),
                version: version.to_owned(),
                api_version: api_version.to_owned(),
                kind: kind.to_owned(),
                plural: r.name.clone(),
                namespaced: r.namespaced,
            })
            .ok_or_else(|| Error::ResourceNotFound(format!("{kind} in {api_version}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::{ConfigMap, Node};

    #[test]
    fn typed_resources_know_their_paths_and_scope() {
        let cm = ApiResource::of::<ConfigMap>();
        assert!(cm.namespaced);
        assert_eq!(
            cm.collection_path(Some("ns")),
            "/api/v1/namespaces/ns/configmaps"
        );
        assert_eq!(cm.collection_path(None), "/api/v1/configmaps");

        let deploy = ApiResource::of::<Deployment>();
        assert_eq!(deploy.api_version, "apps/v1");
        assert_eq!(
            deploy.collection_path(Some("a")),
            "/apis/apps/v1/namespaces/a/deployments"
        );

        let node = ApiResource::of::<Node>();
        assert!(!node.namespaced);
        assert_eq!(node.collection_path(None), "/api/v1/nodes");
    }

    #[test]
    fn dynamic_object_keeps_every_field() {
        let json = r#"{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"size":3},"status":{"ok":true}}"#;
        let obj: DynamicObject = serde_json::from_str(json).unwrap();
        assert_eq!(obj.kind, "Widget");
        assert_eq!(obj.metadata.name.as_deref(), Some("w"));
        assert_eq!(obj.data["spec"]["size"], 3);
        let back: serde_json::Value = serde_json::to_value(&obj).unwrap();
        assert_eq!(
            back,
            serde_json::from_str::<serde_json::Value>(json).unwrap()
        );
    }
}
