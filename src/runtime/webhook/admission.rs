//! `admission.k8s.io/v1` on the wire: `AdmissionReview`, its answers, and running a review.

use std::collections::BTreeMap;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};

use bytes::Bytes;
use http::StatusCode;
use k8s_openapi::ByteString;
use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Handler, PatchOperation};

/// The `apiVersion` of the reviews the API server sends (`admissionReviewVersions: [v1]`).
pub const ADMISSION_V1: &str = "admission.k8s.io/v1";

/// The older version, same shape, still accepted and answered in kind.
pub const ADMISSION_V1BETA1: &str = "admission.k8s.io/v1beta1";

/// The `patchType` of every patch: RFC 6902 JSON Patch, the only one the API server takes.
pub const JSON_PATCH: &str = "JSONPatch";

/// An `admission.k8s.io/v1` `AdmissionReview`: the API server sends one with a `request`,
/// the webhook answers with one holding a `response`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionReview {
    /// `admission.k8s.io/v1` (or `v1beta1`); the answer repeats the request's.
    #[serde(default)]
    pub api_version: String,
    /// `AdmissionReview`.
    #[serde(default)]
    pub kind: String,
    /// What is asked, in a review from the API server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<AdmissionRequest>,
    /// The answer, in a review from the webhook.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<AdmissionResponse>,
}

/// What the API server asks a webhook to admit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionRequest {
    /// Identifies this call; the response must carry it back.
    pub uid: String,
    /// The kind of `object`, in the version the webhook asked for.
    pub kind: GroupVersionKind,
    /// The resource being admitted (`apps/v1 deployments`).
    pub resource: GroupVersionResource,
    /// The subresource, e.g. `status` or `scale`, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_resource: Option<String>,
    /// The kind the client sent, when the API server converted it to `kind`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_kind: Option<GroupVersionKind>,
    /// The resource the client addressed, when it differs from `resource`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_resource: Option<GroupVersionResource>,
    /// The subresource the client addressed, when it differs from `sub_resource`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_sub_resource: Option<String>,
    /// The object's name; empty on a create whose name the server generates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The object's namespace; absent for cluster-scoped kinds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// What is being done.
    pub operation: Operation,
    /// Who is doing it.
    #[serde(default)]
    pub user_info: UserInfo,
    /// The object as it would be stored: absent on `DELETE`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<Value>,
    /// The object as stored now: on `UPDATE` and `DELETE`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_object: Option<Value>,
    /// A dry run: the webhook must have no side effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<bool>,
    /// The operation's options (`CreateOptions`, `UpdateOptions`, `DeleteOptions`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<Value>,
}

/// A kind: group (`""` for the core group), version and kind.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GroupVersionKind {
    /// The API group, `""` for the core group.
    #[serde(default)]
    pub group: String,
    /// The version, e.g. `v1`.
    pub version: String,
    /// The kind, e.g. `ConfigMap`.
    pub kind: String,
}

impl GroupVersionKind {
    /// The kind of `K`.
    pub fn of<K: k8s_openapi::Resource>() -> Self {
        GroupVersionKind {
            group: K::GROUP.to_owned(),
            version: K::VERSION.to_owned(),
            kind: K::KIND.to_owned(),
        }
    }
}

impl fmt::Display for GroupVersionKind {
    /// `apps/v1 Deployment`, or `v1 ConfigMap` for the core group.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            write!(f, "{} {}", self.version, self.kind)
        } else {
            write!(f, "{}/{} {}", self.group, self.version, self.kind)
        }
    }
}

/// A resource: group, version and plural name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GroupVersionResource {
    /// The API group, `""` for the core group.
    #[serde(default)]
    pub group: String,
    /// The version.
    pub version: String,
    /// The plural resource name, e.g. `configmaps`.
    pub resource: String,
}

/// The operation under admission.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Operation {
    /// A create.
    Create,
    /// An update (including patches and server-side apply).
    Update,
    /// A delete.
    Delete,
    /// A connect (`exec`, `attach`, `portforward`, proxy).
    Connect,
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        })
    }
}

/// A webhook's answer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionResponse {
    /// The request's `uid` (the server fills it in before answering).
    pub uid: String,
    /// Whether the request may proceed.
    pub allowed: bool,
    /// Why not (or a 200 on success): the API server shows a refusal's `message` to the user
    /// as `admission webhook "<name>" denied the request: <message>`, with `code` as the
    /// HTTP status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
    /// A JSON Patch (RFC 6902) to apply to the object; base64 on the wire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch: Option<ByteString>,
    /// [`JSON_PATCH`] when `patch` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch_type: Option<String>,
    /// Annotations the API server adds to the audit event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_annotations: Option<BTreeMap<String, String>>,
    /// Warnings the API server passes to the client (kubectl prints them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warnings: Option<Vec<String>>,
}

impl AdmissionResponse {
    /// Allowed, unchanged.
    pub fn allow() -> Self {
        AdmissionResponse {
            allowed: true,
            status: Some(status(200, None, None)),
            ..AdmissionResponse::default()
        }
    }

    /// Refused as a policy decision: HTTP 403, reason `Forbidden`, with `message`.
    pub fn deny(message: impl Into<String>) -> Self {
        AdmissionResponse {
            allowed: false,
            status: Some(status(403, Some("Forbidden"), Some(message.into()))),
            ..AdmissionResponse::default()
        }
    }

    /// Refused because the request could not be handled: `code` (400 for bad input, 500
    /// for a failure of the webhook itself) with `message`.
    pub fn error(code: u16, message: impl Into<String>) -> Self {
        let reason = match code {
            400 => Some("BadRequest"),
            500 => Some("InternalError"),
            _ => None,
        };
        AdmissionResponse {
            allowed: false,
            status: Some(status(code, reason, Some(message.into()))),
            ..AdmissionResponse::default()
        }
    }

    /// Allowed with `operations` applied to the object; no patch when there are none.
    pub fn patched(operations: &[PatchOperation]) -> Self {
        let mut response = AdmissionResponse::allow();
        if !operations.is_empty() {
            let bytes = serde_json::to_vec(operations).expect("a JSON Patch always encodes");
            response.patch = Some(ByteString(bytes));
            response.patch_type = Some(JSON_PATCH.to_owned());
        }
        response
    }

    /// The same answer with `warnings` for the client (none: unchanged).
    pub fn with_warnings(mut self, warnings: Vec<String>) -> Self {
        if !warnings.is_empty() {
            self.warnings = Some(warnings);
        }
        self
    }

    /// The refusal's message, if any.
    pub fn message(&self) -> Option<&str> {
        self.status.as_ref().and_then(|s| s.message.as_deref())
    }

    /// The JSON Patch operations, decoded from `patch`.
    ///
    /// # Errors
    ///
    /// If `patch` is not a JSON Patch this module can represent.
    pub fn patch_operations(&self) -> Result<Vec<PatchOperation>, serde_json::Error> {
        match &self.patch {
            Some(bytes) => serde_json::from_slice(&bytes.0),
            None => Ok(Vec::new()),
        }
    }
}

fn status(code: u16, reason: Option<&str>, message: Option<String>) -> Status {
    Status {
        code: Some(i32::from(code)),
        reason: reason.map(str::to_owned),
        message,
        ..Status::default()
    }
}

/// Runs `handler` on a review in `body`: `200` and the answering review, or `400` and why
/// the body is not a review.
pub(crate) fn review(handler: &Handler, content_type: &str, body: &[u8]) -> (StatusCode, Bytes) {
    let bad = |message: String| (StatusCode::BAD_REQUEST, Bytes::from(message + "\n"));
    let media_type = content_type.split(';').next().unwrap_or("").trim();
    if !media_type.eq_ignore_ascii_case("application/json") {
        return bad(format!(
            "contentType={content_type:?}, expected application/json"
        ));
    }
    if body.is_empty() {
        return bad("the request body is empty".to_owned());
    }
    let review: AdmissionReview = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) => return bad(format!("the request body is not an AdmissionReview: {e}")),
    };
    if review.kind != "AdmissionReview"
        || (review.api_version != ADMISSION_V1 && review.api_version != ADMISSION_V1BETA1)
    {
        return bad(format!(
            "expected an {ADMISSION_V1} AdmissionReview, got apiVersion {:?} kind {:?}",
            review.api_version, review.kind
        ));
    }
    let Some(request) = review.request else {
        return bad("the AdmissionReview holds no request".to_owned());
    };
    let mut response = match catch_unwind(AssertUnwindSafe(|| handler(&request))) {
        Ok(response) => response,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a non-string payload".to_owned());
            tracing::error!(uid = %request.uid, kind = %request.kind, panic = %what, "admission handler panicked");
            AdmissionResponse::error(500, format!("the webhook panicked: {what}"))
        }
    };
    response.uid = request.uid.clone();
    tracing::debug!(
        uid = %request.uid,
        kind = %request.kind,
        operation = %request.operation,
        namespace = request.namespace.as_deref().unwrap_or(""),
        name = request.name.as_deref().unwrap_or(""),
        allowed = response.allowed,
        "admission reviewed"
    );
    let answer = AdmissionReview {
        api_version: review.api_version,
        kind: review.kind,
        request: None,
        response: Some(response),
    };
    let bytes = serde_json::to_vec(&answer).expect("an AdmissionReview always encodes");
    (StatusCode::OK, Bytes::from(bytes))
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::ConfigMap;
    use serde_json::json;

    use super::*;

    /// A review as kube-apiserver v1.36 sends it for a ConfigMap create.
    pub(crate) fn request_json(operation: &str, object: Value, old: Value) -> Value {
        json!({
            "kind": "AdmissionReview",
            "apiVersion": "admission.k8s.io/v1",
            "request": {
                "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                "resource": {"group": "", "version": "v1", "resource": "configmaps"},
                "requestKind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                "requestResource": {"group": "", "version": "v1", "resource": "configmaps"},
                "name": "cm",
                "namespace": "ns",
                "operation": operation,
                "userInfo": {
                    "username": "admin",
                    "uid": "u-1",
                    "groups": ["system:masters", "system:authenticated"],
                    "extra": {"scopes": ["a", "b"]}
                },
                "object": object,
                "oldObject": old,
                "dryRun": false,
                "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}
            }
        })
    }

    pub(crate) fn configmap(data: Value) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "cm", "namespace": "ns", "uid": "c-1"},
            "data": data
        })
    }

    /// Runs `handler` on `review` as the HTTP layer does; returns the response.
    pub(crate) fn run(handler: &Handler, review: &Value) -> AdmissionResponse {
        let body = serde_json::to_vec(review).unwrap();
        let (status, answer) = review_bytes(handler, &body);
        assert_eq!(
            status,
            StatusCode::OK,
            "{}",
            String::from_utf8_lossy(&answer)
        );
        let answer: AdmissionReview = serde_json::from_slice(&answer).unwrap();
        assert_eq!(answer.api_version, ADMISSION_V1);
        assert_eq!(answer.kind, "AdmissionReview");
        assert!(answer.request.is_none());
        answer.response.unwrap()
    }

    fn review_bytes(handler: &Handler, body: &[u8]) -> (StatusCode, Bytes) {
        review(handler, "application/json", body)
    }

    #[test]
    fn admission_review_request_round_trips() {
        let wire = request_json("UPDATE", configmap(json!({"a": "1"})), configmap(json!({})));
        let review: AdmissionReview = serde_json::from_value(wire.clone()).unwrap();
        let request = review.request.as_ref().unwrap();
        assert_eq!(request.operation, Operation::Update);
        assert_eq!(request.kind, GroupVersionKind::of::<ConfigMap>());
        assert_eq!(request.resource.resource, "configmaps");
        assert_eq!(request.user_info.username.as_deref(), Some("admin"));
        assert_eq!(request.dry_run, Some(false));
        assert_eq!(serde_json::to_value(&review).unwrap(), wire);
    }

    #[test]
    fn admission_review_response_has_the_wire_shape() {
        let ops = [PatchOperation::Add {
            path: "/data".into(),
            value: json!({"a": "b"}),
        }];
        let mut response = AdmissionResponse::patched(&ops).with_warnings(vec!["careful".into()]);
        response.uid = "u".into();
        let wire = serde_json::to_value(&response).unwrap();
        assert_eq!(wire["uid"], "u");
        assert_eq!(wire["allowed"], true);
        assert_eq!(wire["patchType"], "JSONPatch");
        assert_eq!(wire["warnings"], json!(["careful"]));
        assert_eq!(wire["status"]["code"], 200);
        // base64 of the JSON operations
        let patch = wire["patch"].as_str().unwrap();
        use base64::Engine;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(patch)
            .unwrap();
        assert_eq!(
            serde_json::from_slice::<Value>(&decoded).unwrap(),
            json!([{"op": "add", "path": "/data", "value": {"a": "b"}}])
        );
        let back: AdmissionResponse = serde_json::from_value(wire).unwrap();
        assert_eq!(back, response);
        assert_eq!(back.patch_operations().unwrap(), ops);
    }

    #[test]
    fn a_raw_handler_gets_its_uid_filled_in() {
        let handler: Handler = Arc::new(|_: &AdmissionRequest| AdmissionResponse::deny("no"));
        let response = run(
            &handler,
            &request_json("CREATE", configmap(json!({})), Value::Null),
        );
        assert_eq!(response.uid, "705ab4f5-6393-11e8-b7cc-42010a800002");
        assert!(!response.allowed);
    }

    #[test]
    fn a_panicking_handler_is_refused_not_crashed() {
        let handler: Handler = Arc::new(|_: &AdmissionRequest| panic!("boom"));
        let response = run(
            &handler,
            &request_json("CREATE", configmap(json!({})), Value::Null),
        );
        assert!(!response.allowed);
        assert_eq!(response.status.as_ref().unwrap().code, Some(500));
        assert_eq!(response.message(), Some("the webhook panicked: boom"));
        assert_eq!(response.uid, "705ab4f5-6393-11e8-b7cc-42010a800002");
    }

    fn allow_all() -> Handler {
        Arc::new(|_: &AdmissionRequest| AdmissionResponse::allow())
    }

    #[test]
    fn a_v1beta1_review_is_answered_in_kind() {
        let handler = allow_all();
        let mut wire = request_json("CREATE", configmap(json!({})), Value::Null);
        wire["apiVersion"] = json!(ADMISSION_V1BETA1);
        let (status, body) = review_bytes(&handler, &serde_json::to_vec(&wire).unwrap());
        assert_eq!(status, StatusCode::OK);
        let answer: AdmissionReview = serde_json::from_slice(&body).unwrap();
        assert_eq!(answer.api_version, ADMISSION_V1BETA1);
    }

    #[test]
    fn a_body_that_is_not_an_admission_review_is_a_400() {
        let handler = allow_all();
        let cases: [(&str, &[u8], &str); 6] = [
            ("application/json", b"not json", "the request body is not an AdmissionReview: "),
            ("application/json", b"", "the request body is empty"),
            ("application/json", br#"{"kind":"Pod","apiVersion":"v1"}"#, "expected an admission.k8s.io/v1 AdmissionReview"),
            ("application/json", br#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1"}"#, "the AdmissionReview holds no request"),
            ("application/json", br#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"x"}}"#, "the request body is not an AdmissionReview: missing field"),
            ("text/plain", b"{}", "contentType=\"text/plain\", expected application/json"),
        ];
        for (content_type, body, expected) in cases {
            let (status, answer) = review(&handler, content_type, body);
            assert_eq!(status, StatusCode::BAD_REQUEST);
            let answer = String::from_utf8_lossy(&answer);
            assert!(
                answer.starts_with(expected),
                "{expected:?} not in {answer:?}"
            );
        }
        // A content type with parameters is still JSON.
        let ok = request_json("CREATE", configmap(json!({})), Value::Null);
        let (status, _) = review(
            &handler,
            "application/json; charset=utf-8",
            &serde_json::to_vec(&ok).unwrap(),
        );
        assert_eq!(status, StatusCode::OK);
    }
}
