//! The `cache.example.com/v1alpha1` `Memcached` kind: its spec, its status, and (derived
//! from them) its CustomResourceDefinition.

use controller_runtime::CustomResource;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The most memcached Pods one resource may ask for; the schema refuses more.
pub const MAX_SIZE: i32 = 100;

/// The size of a resource that does not say.
pub const DEFAULT_SIZE: i32 = 1;

/// The port memcached listens on when the spec does not say.
pub const DEFAULT_PORT: i32 = 11211;

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
