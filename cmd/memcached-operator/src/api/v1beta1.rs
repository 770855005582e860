//! The `cache.example.com/v1beta1` `Memcached`, and its conversions to and from the hub,
//! `v1alpha1` (see the [parent module](super#versions) for how the versions differ).

use std::collections::BTreeMap;

use controller_runtime::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{DEFAULT_PORT, MemcachedStatus};

/// Where a `v1alpha1` object's `spec.containerPort` other than [`DEFAULT_PORT`] is kept
/// while it is read or written as `v1beta1`, which has no port. Reserved: a conversion to
/// `v1alpha1` takes the port from it and removes it, and a conversion to `v1beta1` sets it
/// (or removes it, for the default port).
pub const CONTAINER_PORT_ANNOTATION: &str = "cache.example.com/v1alpha1-container-port";

/// The desired state of a memcached cluster, `v1beta1`.
// clippy reads two printer columns of one type as a duplicated attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[resource(
    group = "cache.example.com",
    version = "v1beta1",
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
    /// The memcached container. Memcached listens on its standard port, 11211.
    #[serde(default, skip_serializing_if = "Container::is_empty")]
    pub container: Container,
}

/// The memcached container of each Pod.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Container {
    /// The memcached image; the operator's `--memcached-image` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
}

impl Container {
    /// Whether nothing is set (then `spec.container` is left out).
    pub fn is_empty(&self) -> bool {
        self.image.is_none()
    }
}

/// Why a `v1beta1` `Memcached` cannot become a `v1alpha1` one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConversionError {
    /// The port annotation does not hold a port.
    #[error("annotation {CONTAINER_PORT_ANNOTATION}={0:?} is not a port from 1 to 65535")]
    BadPort(String),
}

impl From<super::Memcached> for Memcached {
    /// `spec.image` moves to `spec.container.image`; a port other than the default goes to
    /// [`CONTAINER_PORT_ANNOTATION`].
    fn from(hub: super::Memcached) -> Memcached {
        let mut metadata = hub.metadata;
        let annotations = metadata.annotations.get_or_insert_with(BTreeMap::new);
        if hub.spec.container_port == DEFAULT_PORT {
            annotations.remove(CONTAINER_PORT_ANNOTATION);
        } else {
            annotations.insert(
                CONTAINER_PORT_ANNOTATION.to_owned(),
                hub.spec.container_port.to_string(),
            );
        }
        if annotations.is_empty() {
            metadata.annotations = None;
        }
        Memcached {
            metadata,
            spec: MemcachedSpec {
                size: hub.spec.size,
                container: Container {
                    image: hub.spec.image,
                },
            },
            status: hub.status,
        }
    }
}

impl TryFrom<Memcached> for super::Memcached {
    type Error = ConversionError;

    /// `spec.container.image` moves to `spec.image`; the port comes from
    /// [`CONTAINER_PORT_ANNOTATION`] (which is removed), or is the default.
    ///
    /// # Errors
    ///
    /// [`ConversionError::BadPort`] when the annotation holds no port.
    fn try_from(spoke: Memcached) -> Result<super::Memcached, ConversionError> {
        let mut metadata = spoke.metadata;
        let port = metadata
            .annotations
            .as_mut()
            .and_then(|a| a.remove(CONTAINER_PORT_ANNOTATION));
        let container_port = match port {
            None => DEFAULT_PORT,
            Some(text) => match text.parse::<u16>() {
                Ok(port) if port > 0 => i32::from(port),
                _ => return Err(ConversionError::BadPort(text)),
            },
        };
        if metadata
            .annotations
            .as_ref()
            .is_some_and(BTreeMap::is_empty)
        {
            metadata.annotations = None;
        }
        Ok(super::Memcached {
            metadata,
            spec: super::MemcachedSpec {
                size: spoke.spec.size,
                container_port,
                image: spoke.spec.container.image,
            },
            status: spoke.status,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    fn hub(port: i32, annotations: &[(&str, &str)]) -> super::super::Memcached {
        super::super::Memcached {
            metadata: ObjectMeta {
                name: Some("cache".to_owned()),
                namespace: Some("ns".to_owned()),
                annotations: (!annotations.is_empty()).then(|| {
                    annotations
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                        .collect()
                }),
                ..ObjectMeta::default()
            },
            spec: super::super::MemcachedSpec {
                size: Some(3),
                container_port: port,
                image: Some("memcached:1.6".to_owned()),
            },
            status: Some(MemcachedStatus {
                ready_replicas: Some(2),
                nodes: vec!["cache-a".to_owned(), "cache-b".to_owned()],
                observed_generation: Some(4),
                conditions: vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
                    type_: "Available".to_owned(),
                    status: "False".to_owned(),
                    reason: "Scaling".to_owned(),
                    message: "2 of 3".to_owned(),
                    last_transition_time: Time(Default::default()),
                    observed_generation: None,
                }],
            }),
        }
    }

    #[test]
    fn a_v1alpha1_object_round_trips_through_v1beta1() {
        for (port, annotations) in [
            (DEFAULT_PORT, vec![]),
            (11311, vec![]),
            (11311, vec![("team", "cache")]),
            (DEFAULT_PORT, vec![("team", "cache")]),
        ] {
            let original = hub(port, &annotations);
            let spoke = Memcached::from(original.clone());
            assert_eq!(spoke.spec.size, Some(3));
            assert_eq!(spoke.spec.container.image.as_deref(), Some("memcached:1.6"));
            assert_eq!(spoke.status, original.status);
            let kept = spoke
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(CONTAINER_PORT_ANNOTATION).cloned());
            assert_eq!(kept, (port != DEFAULT_PORT).then(|| port.to_string()));
            let back = super::super::Memcached::try_from(spoke).unwrap();
            assert_eq!(back, original, "port {port}, annotations {annotations:?}");
        }
    }

    #[test]
    fn a_v1beta1_object_round_trips_through_v1alpha1() {
        let mut spoke = Memcached::from(hub(11311, &[("team", "cache")]));
        let back = Memcached::from(super::super::Memcached::try_from(spoke.clone()).unwrap());
        assert_eq!(back, spoke);
        spoke.spec.container = Container::default();
        spoke.metadata.annotations = None;
        let hub = super::super::Memcached::try_from(spoke.clone()).unwrap();
        assert_eq!(
            (hub.spec.container_port, hub.spec.image.as_deref()),
            (DEFAULT_PORT, None)
        );
        assert_eq!(Memcached::from(hub), spoke);
        assert_eq!(
            serde_json::to_value(&spoke.spec).unwrap(),
            serde_json::json!({"size": 3}),
            "an empty container is left out"
        );
    }

    #[test]
    fn a_port_annotation_without_a_port_fails_the_conversion_with_its_value() {
        for bad in ["eleven", "0", "65536", "-1", ""] {
            let mut spoke = Memcached::from(hub(DEFAULT_PORT, &[]));
            spoke.metadata.annotations = Some(BTreeMap::from([(
                CONTAINER_PORT_ANNOTATION.to_owned(),
                bad.to_owned(),
            )]));
            let error = super::super::Memcached::try_from(spoke).unwrap_err();
            assert_eq!(error, ConversionError::BadPort(bad.to_owned()));
        }
        assert_eq!(
            ConversionError::BadPort("eleven".to_owned()).to_string(),
            "annotation cache.example.com/v1alpha1-container-port=\"eleven\" is not a port from 1 to 65535"
        );
    }
}
