//! The `{{api_version}}` `{{kind}}` kind: its spec, its status, and (derived from them)
//! its CustomResourceDefinition (`make manifests` writes it to config/crd/bases/).

use controller_runtime::CustomResource;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The desired state of a {{kind}}.
///
/// TODO(user): the fields users set. Doc comments become the CRD's descriptions, and
/// `#[schemars(..)]` attributes its validation (e.g. `#[schemars(range(min = 1, max = 10))]`).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[resource(
    group = "{{full_group}}",
    version = "{{version}}",
    kind = "{{kind}}",
    namespaced,
    status = "{{kind}}Status",
    printcolumn(
        name = "Available",
        type = "string",
        json_path = ".status.conditions[?(@.type==\"Available\")].status"
    ),
    printcolumn(name = "Age", type = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct {{kind}}Spec {
    /// An example field of {{kind}}; edit src/api/{{version}}/{{module}}.rs to remove or
    /// update it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub foo: Option<String>,
}

/// What the controller last saw of a {{kind}}.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct {{kind}}Status {
    /// The latest observations of the {{kind}}'s state, one per type (`Available`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "controller_runtime::runtime::crd::conditions_schema")]
    pub conditions: Vec<Condition>,
}
