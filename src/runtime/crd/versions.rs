//! Several versions of one kind in one CustomResourceDefinition: [`merge`] and the
//! conversion webhook that converts objects between them ([`webhook_conversion`]).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition, WebhookClientConfig, WebhookConversion,
};

/// Why [`merge`] refused its CRDs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MergeError {
    /// There was nothing to merge.
    #[error("no CustomResourceDefinitions to merge")]
    Empty,

    /// Two CRDs describe different kinds: another group, names or scope.
    #[error(
        "the CRDs of versions {first_version} and {version} differ in {field}: {first} and {other}"
    )]
    Mismatch {
        /// What differs: `name`, `group`, `names`, `scope` or `conversion`.
        field: &'static str,
        /// The first CRD's first version.
        first_version: String,
        /// What the first CRD has.
        first: String,
        /// The version whose CRD differs.
        version: String,
        /// What that CRD has.
        other: String,
    },

    /// One version came twice.
    #[error("version {0} is given twice")]
    DuplicateVersion(String),

    /// The storage version is none of the versions given.
    #[error("the storage version {storage} is not one of the versions {versions:?}")]
    NoStorageVersion {
        /// The storage version asked for.
        storage: String,
        /// The versions given.
        versions: Vec<String>,
    },
}

/// One CustomResourceDefinition serving every version of `crds`, with `storage_version` the
/// one version stored in etcd: what `kube-rs`' `merge_crds` does, for kinds with a derived
/// type per version.
///
/// Each CRD is one version of one kind, as `Kind::crd()` makes it (see
/// [`CustomResource::crd`](super::CustomResource::crd)); they must agree on the CRD's name,
/// group, names (kind, plural, singular, list kind, short names, categories), scope and
/// conversion. The result is the first CRD with every version, in the order given, each
/// keeping its own schema, subresources and printer columns and its `served` flag, and
/// `storage` true for `storage_version` alone.
///
/// Every version but the storage one is converted on each read and write: the CRD converts
/// only by rewriting `apiVersion` until [`webhook_conversion`] gives it a conversion webhook
/// (see [`runtime::conversion`](crate::runtime::conversion)).
///
/// ```
/// use controller_runtime::CustomResource;
/// use controller_runtime::runtime::crd;
/// use schemars::JsonSchema;
/// use serde::{Deserialize, Serialize};
///
/// mod v1 {
///     use super::*;
///
///     /// A widget, first shape.
///     #[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
///     #[resource(group = "example.com", version = "v1", kind = "Widget", namespaced)]
///     pub struct WidgetSpec {
///         /// How many.
///         pub count: i32,
///     }
/// }
///
/// mod v2 {
///     use super::*;
///
///     /// A widget, second shape.
///     #[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
///     #[resource(group = "example.com", version = "v2", kind = "Widget", namespaced)]
///     pub struct WidgetSpec {
///         /// How many, renamed.
///         pub replicas: i32,
///     }
/// }
///
/// fn main() {
///     let merged = crd::merge([v1::Widget::crd(), v2::Widget::crd()], "v1").unwrap();
///     let versions: Vec<_> = merged.spec.versions.iter()
///         .map(|v| (v.name.as_str(), v.served, v.storage))
///         .collect();
///     assert_eq!(versions, [("v1", true, true), ("v2", true, false)]);
///
///     // A storage version that is none of them is refused.
///     let error = crd::merge([v1::Widget::crd(), v2::Widget::crd()], "v3").unwrap_err();
///     assert_eq!(
///         error.to_string(),
///         r#"the storage version v3 is not one of the versions ["v1", "v2"]"#
///     );
/// }
/// ```
///
/// # Errors
///
/// [`MergeError::Empty`] for no CRDs, [`MergeError::Mismatch`] when two describe different
/// kinds, [`MergeError::DuplicateVersion`] when a version comes twice, and
/// [`MergeError::NoStorageVersion`] when `storage_version` is not among them.
pub fn merge(
    crds: impl IntoIterator<Item = CustomResourceDefinition>,
    storage_version: &str,
) -> Result<CustomResourceDefinition, MergeError> {
    let mut crds = crds.into_iter();
    let mut merged = crds.next().ok_or(MergeError::Empty)?;
    let first_version = merged
        .spec
        .versions
        .first()
        .map(|v| v.name.clone())
        .unwrap_or_default();
    for crd in crds {
        let version = crd
            .spec
            .versions
            .first()
            .map(|v| v.name.clone())
            .unwrap_or_default();
        let differs = |field: &'static str, first: String, other: String| {
            (first != other).then(|| MergeError::Mismatch {
                field,
                first_version: first_version.clone(),
                first,
                version: version.clone(),
                other,
            })
        };
        let (a, b) = (&merged.spec, &crd.spec);
        let mismatch = differs(
            "name",
            merged.metadata.name.clone().unwrap_or_default(),
            crd.metadata.name.clone().unwrap_or_default(),
        )
        .or_else(|| differs("group", a.group.clone(), b.group.clone()))
        .or_else(|| differs("names", format!("{:?}", a.names), format!("{:?}", b.names)))
        .or_else(|| differs("scope", a.scope.clone(), b.scope.clone()))
        .or_else(|| {
            differs(
                "conversion",
                format!("{:?}", a.conversion),
                format!("{:?}", b.conversion),
            )
        });
        if let Some(mismatch) = mismatch {
            return Err(mismatch);
        }
        for v in crd.spec.versions {
            if merged.spec.versions.iter().any(|m| m.name == v.name) {
                return Err(MergeError::DuplicateVersion(v.name));
            }
            merged.spec.versions.push(v);
        }
    }
    if !merged
        .spec
        .versions
        .iter()
        .any(|v| v.name == storage_version)
    {
        return Err(MergeError::NoStorageVersion {
            storage: storage_version.to_owned(),
            versions: merged
                .spec
                .versions
                .iter()
                .map(|v| v.name.clone())
                .collect(),
        });
    }
    for v in &mut merged.spec.versions {
        v.storage = v.name == storage_version;
    }
    Ok(merged)
}

/// `crd` with its objects converted between versions by a webhook:
/// `spec.conversion: {strategy: Webhook, webhook: {clientConfig, conversionReviewVersions:
/// [v1]}}`, the API server calling `client_config` (a Service, or a URL, with the CA that
/// signed the webhook's certificate) with `apiextensions.k8s.io/v1` `ConversionReview`s.
///
/// A [`WebhookServer`](crate::runtime::webhook::WebhookServer) answers them on
/// [`CONVERT_PATH`](crate::runtime::conversion::CONVERT_PATH) once given a
/// [`Conversion`](crate::runtime::conversion::Conversion).
///
/// ```
/// use controller_runtime::runtime::crd;
/// use k8s_openapi::ByteString;
/// use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
///     CustomResourceDefinition, WebhookClientConfig,
/// };
///
/// let ca_pem = b"-----BEGIN CERTIFICATE-----\n...".to_vec();
/// let crd = crd::webhook_conversion(
///     CustomResourceDefinition::default(),
///     WebhookClientConfig {
///         url: Some("https://127.0.0.1:9443/convert".to_owned()),
///         ca_bundle: Some(ByteString(ca_pem)),
///         service: None,
///     },
/// );
/// let conversion = crd.spec.conversion.unwrap();
/// assert_eq!(conversion.strategy, "Webhook");
/// assert_eq!(conversion.webhook.unwrap().conversion_review_versions, ["v1"]);
/// ```
pub fn webhook_conversion(
    mut crd: CustomResourceDefinition,
    client_config: WebhookClientConfig,
) -> CustomResourceDefinition {
    crd.spec.conversion = Some(CustomResourceConversion {
        strategy: "Webhook".to_owned(),
        webhook: Some(WebhookConversion {
            client_config: Some(client_config),
            conversion_review_versions: vec!["v1".to_owned()],
        }),
    });
    crd
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::crd::{CustomResource, KindInfo};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::ServiceReference;
    use schemars::JsonSchema;
    use serde::{Deserialize, Serialize};

    const V1: KindInfo = KindInfo {
        group: "unit.example.com",
        version: "v1",
        kind: "Gizmo",
        plural: "gizmos",
        singular: "gizmo",
        namespaced: true,
        short_names: &["gz"],
        categories: &[],
        printer_columns: &[],
        scale: None,
    };

    /// A spec.
    #[derive(Deserialize, Serialize, JsonSchema)]
    struct Spec {
        /// Count.
        count: i32,
    }

    fn crd(info: KindInfo) -> CustomResourceDefinition {
        info.crd(crate::runtime::crd::structural_schema::<Spec>(), None)
    }

    fn summary(crd: &CustomResourceDefinition) -> Vec<(&str, bool, bool)> {
        crd.spec
            .versions
            .iter()
            .map(|v| (v.name.as_str(), v.served, v.storage))
            .collect()
    }

    #[test]
    fn merging_keeps_every_version_in_order_with_one_storage_version() {
        let v2 = KindInfo {
            version: "v2",
            ..V1
        };
        let v3 = KindInfo {
            version: "v3alpha1",
            ..V1
        };
        let mut unserved = crd(v3);
        unserved.spec.versions[0].served = false;
        let merged = merge([crd(V1), crd(v2), unserved], "v2").unwrap();
        assert_eq!(
            summary(&merged),
            [
                ("v1", true, false),
                ("v2", true, true),
                ("v3alpha1", false, false)
            ]
        );
        assert_eq!(
            merged.metadata.name.as_deref(),
            Some("gizmos.unit.example.com")
        );
        assert_eq!(merged.spec.names.short_names, Some(vec!["gz".to_owned()]));
        // Each version keeps its own schema.
        assert!(merged.spec.versions.iter().all(|v| v.schema.is_some()));

        let one = merge([crd(V1)], "v1").unwrap();
        assert_eq!(one, crd(V1));
    }

    #[test]
    fn merging_refuses_crds_of_different_kinds_with_what_differs() {
        let cases = [
            (
                KindInfo {
                    version: "v2",
                    group: "other.example.com",
                    ..V1
                },
                "the CRDs of versions v1 and v2 differ in name: gizmos.unit.example.com and gizmos.other.example.com",
            ),
            (
                KindInfo {
                    version: "v2",
                    namespaced: false,
                    ..V1
                },
                "the CRDs of versions v1 and v2 differ in scope: Namespaced and Cluster",
            ),
            (
                KindInfo {
                    version: "v2",
                    short_names: &["g"],
                    ..V1
                },
                "the CRDs of versions v1 and v2 differ in names: CustomResourceDefinitionNames",
            ),
            (V1, "version v1 is given twice"),
        ];
        for (other, expected) in cases {
            let error = merge([crd(V1), crd(other)], "v1").unwrap_err();
            assert!(error.to_string().starts_with(expected), "{error}");
        }

        let mut converted = crd(KindInfo {
            version: "v2",
            ..V1
        });
        converted = webhook_conversion(converted, WebhookClientConfig::default());
        let error = merge([crd(V1), converted], "v1").unwrap_err();
        assert!(
            matches!(
                error,
                MergeError::Mismatch {
                    field: "conversion",
                    ..
                }
            ),
            "{error}"
        );

        assert_eq!(merge([], "v1").unwrap_err(), MergeError::Empty);
        assert_eq!(
            merge([crd(V1)], "v2").unwrap_err().to_string(),
            r#"the storage version v2 is not one of the versions ["v1"]"#
        );
    }

    #[test]
    fn webhook_conversion_calls_the_client_with_v1_reviews() {
        let service = WebhookClientConfig {
            service: Some(ServiceReference {
                name: "webhook-service".to_owned(),
                namespace: "system".to_owned(),
                path: Some("/convert".to_owned()),
                port: None,
            }),
            ..WebhookClientConfig::default()
        };
        let converted = webhook_conversion(crd(V1), service);
        assert_eq!(
            serde_json::to_value(&converted.spec.conversion).unwrap(),
            serde_json::json!({
                "strategy": "Webhook",
                "webhook": {
                    "clientConfig": {"service": {"name": "webhook-service", "namespace": "system", "path": "/convert"}},
                    "conversionReviewVersions": ["v1"],
                },
            })
        );
    }

    /// A derived kind, in two versions.
    mod derived {
        use super::*;

        pub mod v1 {
            use super::*;

            /// Version one.
            #[derive(crate::CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
            #[resource(
                group = "unit.example.com",
                version = "v1",
                kind = "Sprocket",
                namespaced,
                crate = "crate"
            )]
            pub struct SprocketSpec {
                /// Teeth.
                pub teeth: i32,
            }
        }

        pub mod v2 {
            use super::*;

            /// Version two.
            #[derive(crate::CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
            #[resource(
                group = "unit.example.com",
                version = "v2",
                kind = "Sprocket",
                namespaced,
                crate = "crate"
            )]
            pub struct SprocketSpec {
                /// Teeth, counted differently.
                pub cogs: i32,
            }
        }
    }

    #[test]
    fn derived_versions_of_one_kind_merge_with_their_own_schemas() {
        use derived::{v1, v2};
        let merged = merge([v2::Sprocket::crd(), v1::Sprocket::crd()], "v1").unwrap();
        assert_eq!(summary(&merged), [("v2", true, false), ("v1", true, true)]);
        let spec_fields = |i: usize| -> Vec<String> {
            let root = merged.spec.versions[i]
                .schema
                .clone()
                .unwrap()
                .open_api_v3_schema;
            let spec = &root.unwrap().properties.unwrap()["spec"];
            spec.properties.clone().unwrap().into_keys().collect()
        };
        assert_eq!(spec_fields(0), ["cogs"]);
        assert_eq!(spec_fields(1), ["teeth"]);
    }
}
