//! Typed admission handlers (defaulting and validating over a kind) and kubebuilder's paths.

use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

#[cfg(doc)]
use super::WebhookServer;
use super::{AdmissionRequest, AdmissionResponse, GroupVersionKind, Operation, json_patch};

/// An admission handler: answers one request. The server sets the response's `uid`, and
/// turns a panic into a refusal (HTTP 500 in the review's status).
pub type Handler = Arc<dyn Fn(&AdmissionRequest) -> AdmissionResponse + Send + Sync>;

/// A handler that sets defaults on objects of kind `K` with `default`, and answers with the
/// JSON Patch from the object received to the object `default` leaves; see
/// [`WebhookServer::defaulting`].
pub fn defaulter<K>(default: impl Fn(&mut K) + Send + Sync + 'static) -> Handler
where
    K: k8s_openapi::Resource + DeserializeOwned + Serialize,
{
    Arc::new(move |request: &AdmissionRequest| {
        default_review(request, &default).unwrap_or_else(Refusal::into_response)
    })
}

/// A handler that validates objects of kind `K` with `validate`; see
/// [`WebhookServer::validating`].
pub fn validator<K>(
    validate: impl Fn(&K, Option<&K>, Operation) -> Result<Vec<String>, String> + Send + Sync + 'static,
) -> Handler
where
    K: k8s_openapi::Resource + DeserializeOwned,
{
    Arc::new(move |request: &AdmissionRequest| {
        validate_review(request, &validate).unwrap_or_else(Refusal::into_response)
    })
}

/// Why a typed handler could not run its function: an HTTP status for the review's status
/// and a message.
struct Refusal {
    code: u16,
    message: String,
}

impl Refusal {
    fn bad_request(message: String) -> Refusal {
        Refusal { code: 400, message }
    }

    fn into_response(self) -> AdmissionResponse {
        AdmissionResponse::error(self.code, self.message)
    }
}

/// Runs `default` on the request's object. `K` is decoded and encoded back before the
/// function runs as well as after, and every operation that this bare round trip already
/// produces is dropped from the patch: a field `K` does not model (say, one a newer API
/// server added) is not removed just because the webhook's types are older.
fn default_review<K>(
    request: &AdmissionRequest,
    default: &impl Fn(&mut K),
) -> Result<AdmissionResponse, Refusal>
where
    K: k8s_openapi::Resource + DeserializeOwned + Serialize,
{
    if matches!(request.operation, Operation::Delete | Operation::Connect) {
        return Ok(AdmissionResponse::allow());
    }
    check_kind::<K>(request)?;
    let original = request
        .object
        .as_ref()
        .ok_or_else(|| Refusal::bad_request("the request holds no object to default".into()))?;
    let mut object: K = decode(original, "object")?;
    let encode = |object: &K| {
        serde_json::to_value(object).map_err(|e| Refusal {
            code: 500,
            message: format!("encoding the {} as JSON: {e}", K::KIND),
        })
    };
    let round_trip = encode(&object)?;
    default(&mut object);
    let defaulted = encode(&object)?;
    let noise = json_patch(original, &round_trip);
    let mut operations = json_patch(original, &defaulted);
    operations.retain(|op| !noise.contains(op));
    Ok(AdmissionResponse::patched(&operations))
}

fn validate_review<K>(
    request: &AdmissionRequest,
    validate: &impl Fn(&K, Option<&K>, Operation) -> Result<Vec<String>, String>,
) -> Result<AdmissionResponse, Refusal>
where
    K: k8s_openapi::Resource + DeserializeOwned,
{
    check_kind::<K>(request)?;
    let (object, old) = match request.operation {
        Operation::Create => (
            decode_present::<K>(request.object.as_ref(), "object")?,
            None,
        ),
        Operation::Update => (
            decode_present::<K>(request.object.as_ref(), "object")?,
            Some(decode_present::<K>(
                request.old_object.as_ref(),
                "oldObject",
            )?),
        ),
        Operation::Delete => (
            decode_present::<K>(request.old_object.as_ref(), "oldObject")?,
            None,
        ),
        Operation::Connect => {
            return Err(Refusal::bad_request(format!(
                "this webhook validates {}, not CONNECT",
                K::KIND
            )));
        }
    };
    Ok(match validate(&object, old.as_ref(), request.operation) {
        Ok(warnings) => AdmissionResponse::allow().with_warnings(warnings),
        Err(message) => AdmissionResponse::deny(message),
    })
}

/// Refuses a request for a kind other than `K`.
fn check_kind<K: k8s_openapi::Resource>(request: &AdmissionRequest) -> Result<(), Refusal> {
    let kind = &request.kind;
    if kind.group == K::GROUP && kind.version == K::VERSION && kind.kind == K::KIND {
        return Ok(());
    }
    Err(Refusal::bad_request(format!(
        "this webhook admits {}, not {kind}",
        GroupVersionKind::of::<K>()
    )))
}

fn decode_present<K: k8s_openapi::Resource + DeserializeOwned>(
    value: Option<&Value>,
    field: &str,
) -> Result<K, Refusal> {
    match value {
        Some(v) => decode(v, field),
        None => Err(Refusal::bad_request(format!(
            "the request holds no {field}"
        ))),
    }
}

fn decode<K: k8s_openapi::Resource + DeserializeOwned>(
    value: &Value,
    field: &str,
) -> Result<K, Refusal> {
    K::deserialize(value)
        .map_err(|e| Refusal::bad_request(format!("decoding the {field} as {}: {e}", K::KIND)))
}

/// kubebuilder's path for a defaulting webhook of `K`:
/// `/mutate-<group with dots as dashes>-<version>-<lowercase kind>`, e.g.
/// `/mutate-cache-example-com-v1alpha1-memcached`.
pub fn mutate_path<K: k8s_openapi::Resource>() -> String {
    kind_path::<K>("mutate")
}

/// kubebuilder's path for a validating webhook of `K`, e.g.
/// `/validate-cache-example-com-v1alpha1-memcached`.
pub fn validate_path<K: k8s_openapi::Resource>() -> String {
    kind_path::<K>("validate")
}

fn kind_path<K: k8s_openapi::Resource>(prefix: &str) -> String {
    format!(
        "/{prefix}-{}-{}-{}",
        K::GROUP.replace('.', "-"),
        K::VERSION,
        K::KIND.to_lowercase()
    )
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use serde_json::json;

    use super::*;
    use crate::runtime::webhook::admission::tests::{configmap, request_json, run};
    use crate::runtime::webhook::patch::tests::apply;
    use crate::runtime::webhook::{JSON_PATCH, PatchOperation};

    fn add_defaulted(cm: &mut ConfigMap) {
        cm.data
            .get_or_insert_default()
            .insert("defaulted".into(), "true".into());
    }

    #[test]
    fn defaulting_answers_with_a_patch_that_applies() {
        let handler = defaulter::<ConfigMap>(add_defaulted);
        let object = configmap(json!({"a": "1"}));
        let response = run(
            &handler,
            &request_json("CREATE", object.clone(), Value::Null),
        );
        assert!(response.allowed);
        assert_eq!(response.uid, "705ab4f5-6393-11e8-b7cc-42010a800002");
        assert_eq!(response.patch_type.as_deref(), Some(JSON_PATCH));
        let ops = response.patch_operations().unwrap();
        assert_eq!(
            ops,
            [PatchOperation::Add {
                path: "/data/defaulted".into(),
                value: json!("true")
            }]
        );
        let mut patched = object;
        apply(&mut patched, &ops);
        assert_eq!(patched, configmap(json!({"a": "1", "defaulted": "true"})));
    }

    #[test]
    fn defaulting_leaves_fields_the_type_does_not_model() {
        let handler = defaulter::<ConfigMap>(add_defaulted);
        let mut object = configmap(json!({"a": "1"}));
        object["futureField"] = json!({"x": 1});
        object["metadata"]["futureMeta"] = json!("kept");
        let response = run(&handler, &request_json("CREATE", object, Value::Null));
        assert_eq!(
            response.patch_operations().unwrap(),
            [PatchOperation::Add {
                path: "/data/defaulted".into(),
                value: json!("true")
            }]
        );
    }

    #[test]
    fn defaulting_can_remove_a_field_the_type_models() {
        let handler = defaulter::<ConfigMap>(|cm: &mut ConfigMap| {
            cm.data.as_mut().unwrap().remove("drop");
        });
        let object = configmap(json!({"keep": "1", "drop": "2"}));
        let response = run(
            &handler,
            &request_json("UPDATE", object, configmap(json!({}))),
        );
        assert_eq!(
            response.patch_operations().unwrap(),
            [PatchOperation::Remove {
                path: "/data/drop".into()
            }]
        );
    }

    #[test]
    fn defaulting_without_a_change_sends_no_patch() {
        let handler = defaulter::<ConfigMap>(|_| {});
        let response = run(
            &handler,
            &request_json("CREATE", configmap(json!({"a": "1"})), Value::Null),
        );
        assert!(response.allowed);
        assert!(response.patch.is_none());
        assert!(response.patch_type.is_none());
    }

    #[test]
    fn defaulting_allows_a_delete_unchanged() {
        let handler = defaulter::<ConfigMap>(|_| panic!("not called on delete"));
        let response = run(
            &handler,
            &request_json("DELETE", Value::Null, configmap(json!({}))),
        );
        assert!(response.allowed);
        assert!(response.patch.is_none());
    }

    fn image_policy(
        cm: &ConfigMap,
        old: Option<&ConfigMap>,
        op: Operation,
    ) -> Result<Vec<String>, String> {
        let image = cm.data.as_ref().and_then(|d| d.get("image"));
        match image {
            Some(i) if !i.starts_with("registry.example.com/") => Err(format!(
                "{op}: image {i:?} is not from registry.example.com"
            )),
            Some(i) if !i.contains(':') => Ok(vec![format!("image {i:?} has no tag")]),
            _ if op == Operation::Update && old.is_none() => Err("no old object".into()),
            _ => Ok(vec![]),
        }
    }

    #[test]
    fn validation_refuses_with_the_message_and_403() {
        let handler = validator::<ConfigMap>(image_policy);
        let response = run(
            &handler,
            &request_json(
                "CREATE",
                configmap(json!({"image": "evil.test/x:1"})),
                Value::Null,
            ),
        );
        assert!(!response.allowed);
        let status = response.status.as_ref().unwrap();
        assert_eq!(status.code, Some(403));
        assert_eq!(status.reason.as_deref(), Some("Forbidden"));
        assert_eq!(
            response.message(),
            Some(r#"CREATE: image "evil.test/x:1" is not from registry.example.com"#)
        );
        assert!(response.patch.is_none());
    }

    #[test]
    fn validation_allows_with_warnings_and_sees_the_old_object_on_update() {
        let handler = validator::<ConfigMap>(image_policy);
        let response = run(
            &handler,
            &request_json(
                "UPDATE",
                configmap(json!({"image": "registry.example.com/m"})),
                configmap(json!({})),
            ),
        );
        assert!(response.allowed, "{response:?}");
        assert_eq!(
            response.warnings,
            Some(vec![
                r#"image "registry.example.com/m" has no tag"#.to_owned()
            ])
        );
    }

    #[test]
    fn validation_of_a_delete_sees_the_object_being_deleted() {
        let handler = validator::<ConfigMap>(|cm: &ConfigMap, old, op| {
            assert_eq!(op, Operation::Delete);
            assert!(old.is_none());
            match cm.data.as_ref().and_then(|d| d.get("protected")) {
                Some(_) => Err("this ConfigMap is protected".into()),
                None => Ok(vec![]),
            }
        });
        let response = run(
            &handler,
            &request_json(
                "DELETE",
                Value::Null,
                configmap(json!({"protected": "yes"})),
            ),
        );
        assert!(!response.allowed);
        assert_eq!(response.message(), Some("this ConfigMap is protected"));
    }

    #[test]
    fn a_review_of_another_kind_is_refused_with_a_clear_message() {
        let handler = validator::<k8s_openapi::api::apps::v1::Deployment>(|_, _, _| Ok(vec![]));
        let response = run(
            &handler,
            &request_json("CREATE", configmap(json!({})), Value::Null),
        );
        assert!(!response.allowed);
        assert_eq!(response.status.as_ref().unwrap().code, Some(400));
        assert_eq!(
            response.message(),
            Some("this webhook admits apps/v1 Deployment, not v1 ConfigMap")
        );
    }

    #[test]
    fn an_object_that_does_not_decode_is_refused() {
        let handler = defaulter::<ConfigMap>(add_defaulted);
        let response = run(
            &handler,
            &request_json("CREATE", configmap(json!(5)), Value::Null),
        );
        assert!(!response.allowed);
        assert_eq!(response.status.as_ref().unwrap().code, Some(400));
        let message = response.message().unwrap();
        assert!(
            message.starts_with("decoding the object as ConfigMap: "),
            "{message}"
        );
        assert!(response.patch.is_none());
    }

    #[test]
    fn a_missing_object_is_refused() {
        let handler = validator::<ConfigMap>(image_policy);
        let response = run(
            &handler,
            &request_json("UPDATE", configmap(json!({})), Value::Null),
        );
        assert!(!response.allowed);
        assert_eq!(response.message(), Some("the request holds no oldObject"));
    }

    #[test]
    fn kubebuilder_paths_follow_the_kind() {
        assert_eq!(mutate_path::<ConfigMap>(), "/mutate--v1-configmap");
        assert_eq!(
            validate_path::<k8s_openapi::api::apps::v1::Deployment>(),
            "/validate-apps-v1-deployment"
        );
    }
}
