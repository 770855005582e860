//! The `Memcached` kind: its spec, its status, and (derived from them) its
//! CustomResourceDefinition, in two versions.
//!
//! # Versions
//!
//! | version | role | shape |
//! |---|---|---|
//! | `v1alpha1` (this module) | stored in etcd, reconciled by the controller, the conversion **hub** | `spec.size`, `spec.containerPort`, `spec.image` |
//! | [`v1beta1`] | served, converted to and from `v1alpha1` by the conversion webhook | `spec.size`, `spec.container.image`; no port |
//!
//! `v1beta1` is the shape the API is moving to: the Pod's container settings gather under
//! `spec.container` (`spec.image` becomes `spec.container.image`), and the port is no longer
//! a choice, since memcached listens on its standard port, [`DEFAULT_PORT`]. Nothing is lost
//! either way: a `v1alpha1` object with another port, read as `v1beta1`, keeps it in the
//! annotation [`v1beta1::CONTAINER_PORT_ANNOTATION`], and writing that `v1beta1` object back
//! restores the port from it (the way kubebuilder projects carry a field one version
//! lacks). `spec.size` and the whole status are the same in both versions, so `kubectl
//! scale`, the printer columns and `kubectl get -o jsonpath='{.spec.size}'` read the same in
//! each.
//!
//! [`crd()`] is the CRD as `make manifests` writes it to `config/crd/bases/`: both versions,
//! `v1alpha1` stored and served, `v1beta1` declared but **not served**. Without the
//! conversion webhook the API server would convert by rewriting `apiVersion` alone, so a
//! `v1beta1` read would show no image and a write through `v1beta1` (a patch, an edit:
//! kubectl prefers the highest version served) would drop the image and reset the port.
//! [`crd_with_conversion`] serves `v1beta1` too and points the CRD at the conversion
//! webhook ([`crate::webhook::server`] serves it); `config/default` does the same with a
//! kustomize component (`config/crd/patches`). Both versions have the `scale` subresource
//! (`spec.size`, `status.readyReplicas`), so `kubectl scale memcached/<name> --replicas=3`
//! works.
//!
//! The controller reads and writes `v1alpha1` only, so nothing is converted until a client
//! asks for `v1beta1`.

pub mod v1beta1;

use controller_runtime::CustomResource;
use controller_runtime::runtime::crd;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The most memcached Pods one resource may ask for; the schema refuses more.
pub const MAX_SIZE: i32 = 100;

/// The size of a resource that does not say.
pub const DEFAULT_SIZE: i32 = 1;

/// The port memcached listens on when the spec does not say.
pub const DEFAULT_PORT: i32 = 11211;

/// The version the API server stores, and the hub that [`v1beta1`] converts through.
pub const STORAGE_VERSION: &str = "v1alpha1";

/// The `Memcached` CRD as committed in `config/crd/bases/`: both versions, `v1alpha1`
/// stored, `v1beta1` not served until a conversion webhook converts it
/// ([`crd_with_conversion`]; see the [module docs](self)).
pub fn crd() -> CustomResourceDefinition {
    let mut crd = crd::merge(
        [Memcached::crd(), v1beta1::Memcached::crd()],
        STORAGE_VERSION,
    )
    .expect("the versions of Memcached name one kind");
    for version in &mut crd.spec.versions {
        version.served = version.name == STORAGE_VERSION;
    }
    crd
}

/// The `Memcached` CRD serving both versions, converted by the webhook `client` reaches
/// (what `config/default` deploys).
pub fn crd_with_conversion(client: WebhookClientConfig) -> CustomResourceDefinition {
    let mut crd = crd();
    for version in &mut crd.spec.versions {
        version.served = true;
    }
    crd::webhook_conversion(crd, client)
}

/// The desired state of a memcached cluster.
// clippy reads two printer columns of one type as a duplicated attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[resource(
    group = "cache.example.com",
    version = "v1alpha1",
    kind = "Memcached",
    namespaced,
    shortname = "mc",
    status = "MemcachedStatus",
    scale(
        spec_replicas_path = ".spec.size",
        status_replicas_path = ".status.readyReplicas"
    ),
    derive = "PartialEq",
    printcolumn(name = "Size", type = "integer", json_path = ".spec.size"),
    printcolumn(name = "Ready", type = "integer", json_path = ".status.readyReplicas"),
    printcolumn(
        name = "Available",
        type = "string",
        json_path = ".status.conditions[?(@.type==\"Available\")].status"
    ),
    printcolumn(name = "Age", type = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct MemcachedSpec {
    /// How many memcached Pods to run, from 0 to 100. The defaulting webhook sets 1 when
    /// it is left out (and the operator reads a missing size as 1).
    #[schemars(range(min = 0, max = 100))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<i32>,
    /// The port memcached listens on.
    #[serde(default = "default_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub container_port: i32,
    /// The memcached image; the operator's `--memcached-image` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
}

fn default_port() -> i32 {
    DEFAULT_PORT
}

impl MemcachedSpec {
    /// The size asked for, or [`DEFAULT_SIZE`].
    pub fn size(&self) -> i32 {
        self.size.unwrap_or(DEFAULT_SIZE)
    }
}

/// What the operator last saw of a memcached cluster.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemcachedStatus {
    /// `Available`, `Progressing` and `Degraded`, each with a reason and a message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The names of the memcached Pods. Always written, empty too: the status is written
    /// by merge patch, where a missing list would keep the old one.
    #[serde(default)]
    pub nodes: Vec<String>,
    /// How many memcached Pods are ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
}

/// The condition types the status reports.
pub mod condition {
    /// All the Pods asked for are ready.
    pub const AVAILABLE: &str = "Available";
    /// The Deployment is being created or scaled, or its Pods are starting.
    pub const PROGRESSING: &str = "Progressing";
    /// The operator cannot bring the cluster to its spec (a write was refused).
    pub const DEGRADED: &str = "Degraded";
}
