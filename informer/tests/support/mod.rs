//! Helpers shared by the informer crate's scripted tests.

#![allow(dead_code)] // each test binary uses its own subset

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// ConfigMap `ns/name` at resourceVersion `rv`, with no data: all a scripted list or watch
/// needs.
pub fn cm(name: &str, rv: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            namespace: Some("ns".into()),
            name: Some(name.into()),
            resource_version: Some(rv.into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    }
}
