//! Admission webhooks: a TLS server that answers the API server's `AdmissionReview`s with
//! typed defaulting and validating functions.
//!
//! An operator is a CRD, a controller and, often, an admission webhook: the API server sends
//! every create or update of a kind to the webhook before storing it, and the webhook sets
//! defaults (a *mutating* webhook, answering with a JSON Patch) or refuses the object (a
//! *validating* webhook). This module is controller-runtime's `pkg/webhook`:
//!
//! * [`WebhookServer`] — HTTPS on port 9443 by default, with the serving certificate and key
//!   read from `<cert_dir>/tls.crt` and `<cert_dir>/tls.key` (PEM) and **reloaded when the
//!   files change**, as cert-manager or a rotated Secret volume rewrites them;
//! * [`defaulting`](WebhookServer::defaulting) — a function `Fn(&mut K)` sets defaults on the
//!   typed object; the server answers with the JSON Patch from the object it got to the
//!   object the function left;
//! * [`validating`](WebhookServer::validating) — a function
//!   `Fn(&K, Option<&K>, Operation) -> Result<Vec<String>, String>` allows the object (with
//!   warnings shown to the user) or refuses it with a message;
//! * [`handle`](WebhookServer::handle) — any function from [`AdmissionRequest`] to
//!   [`AdmissionResponse`], for what the typed forms do not cover;
//! * [`AdmissionReview`] and friends — `admission.k8s.io/v1` on the wire (k8s-openapi does
//!   not carry them), and [`json_patch`], the RFC 6902 diff between two JSON documents.
//!
//! ```text
//!  kube-apiserver ──POST AdmissionReview (HTTPS, caBundle-verified)──▶ WebhookServer
//!                                                                        │ path → handler
//!      ◀── AdmissionReview{response: allowed, status, patch, warnings} ──┤
//!                                                                        ▼
//!            decode request.object as K ─▶ your Fn(&mut K) / Fn(&K, Option<&K>, Operation)
//! ```
//!
//! Bad input never panics the server: a body that is not an `AdmissionReview` gets HTTP 400;
//! a review for another kind, an object that does not decode as `K`, or a function that
//! panics gets `allowed: false` with a message saying why (the API server then applies the
//! webhook's `failurePolicy`).
//!
//! # Example: the Memcached sample's defaulting webhook
//!
//! ```no_run
//! use controller_runtime::runtime::webhook::{WebhookOptions, WebhookServer};
//! use k8s_openapi::api::apps::v1::Deployment;
//!
//! # async fn run() -> Result<(), controller_runtime::runtime::webhook::Error> {
//! let shutdown = async {
//!     let _ = tokio::signal::ctrl_c().await;
//! };
//! WebhookServer::new(WebhookOptions::default()) // :9443, <tmp>/k8s-webhook-server/serving-certs
//!     .defaulting::<Deployment>("/mutate-apps-v1-deployment", |d| {
//!         let spec = d.spec.get_or_insert_default();
//!         spec.replicas.get_or_insert(3);
//!     })
//!     .validating::<Deployment>("/validate-apps-v1-deployment", |d, _old, _op| {
//!         match d.spec.as_ref().and_then(|s| s.replicas) {
//!             Some(n) if n % 2 == 0 => Err(format!("replicas must be odd, not {n}")),
//!             _ => Ok(vec![]),
//!         }
//!     })
//!     .run(shutdown)
//!     .await
//! # }
//! ```
//!
//! # Implementation Details
//!
//! **Certificates.** The TLS configuration resolves its certificate through a watcher that
//! holds the current pair. Before each new connection's handshake the watcher compares the
//! two files' modification time, length and inode with those it saw last; when either
//! changed it reads and parses both, checks that the key matches the certificate, and swaps
//! the pair in. A pair that does not load (a half-written file, a key for another
//! certificate) is logged with the file it came from and the old pair stays; since the file
//! stamps are remembered, the error is logged once per change, and the next write is tried
//! again. Connections already open keep the certificate they were made with. No thread or
//! timer is involved: a server nobody connects to has no use for a fresh certificate.
//!
//! **JSON Patch.** [`json_patch`] walks both documents together: objects key by key (a key
//! only in the source is removed, only in the target added, in both compared recursively),
//! arrays index by index over their common length (then the target's extra elements are
//! added in order, or the source's extra elements removed from the last one down, so each
//! index is valid when its operation applies), and anything else replaced when unequal.
//! A defaulting handler decodes the object as `K` and encodes it back *before* calling the
//! function as well as after, and drops from the patch every operation that this bare round
//! trip already produces: a field `K` does not model (say, one a newer API server added) is
//! not removed from the object just because the webhook's types are older.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::header::{ALLOW, CONTENT_TYPE, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use k8s_openapi::ByteString;
use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use parking_lot::{Mutex, RwLock};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

/// What setting up or starting a webhook server can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A webhook path must start with `/`.
    #[error("webhook path {0:?} must start with '/'")]
    InvalidPath(String),

    /// Two handlers were registered on one path.
    #[error("a webhook is already registered on path {0:?}")]
    DuplicatePath(String),

    /// The listening socket could not be bound.
    #[error("binding the webhook server to {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The operating system's refusal.
        #[source]
        source: std::io::Error,
    },

    /// A certificate or key file could not be read.
    #[error("reading {}: {source}", path.display())]
    ReadFile {
        /// The file.
        path: PathBuf,
        /// Why it could not be read.
        #[source]
        source: std::io::Error,
    },

    /// A certificate or key file is not valid PEM.
    #[error("parsing {}: {source}", path.display())]
    Pem {
        /// The file.
        path: PathBuf,
        /// The parser's complaint.
        #[source]
        source: pem::Error,
    },

    /// A certificate or key file holds no item of the kind expected.
    #[error("{}: no {what} in PEM", path.display())]
    Missing {
        /// The file.
        path: PathBuf,
        /// `certificate` or `private key`.
        what: &'static str,
    },

    /// The key cannot be used, or it does not belong to the certificate.
    #[error("loading the key pair {} and {}: {source}", cert.display(), key.display())]
    KeyPair {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// rustls' complaint: an unsupported key, or a key for another certificate.
        #[source]
        source: rustls::Error,
    },

    /// The TLS configuration could not be built.
    #[error("building the TLS configuration: {0}")]
    Tls(#[source] rustls::Error),
}

/// `Result` with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

// === AdmissionReview (admission.k8s.io/v1) ===

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

// === JSON Patch ===

/// One RFC 6902 operation, as [`json_patch`] produces them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum PatchOperation {
    /// Adds `value` at `path` (a new object member, or inserted into an array).
    Add {
        /// A JSON Pointer (RFC 6901).
        path: String,
        /// The value to add.
        value: Value,
    },
    /// Removes the value at `path`.
    Remove {
        /// A JSON Pointer (RFC 6901).
        path: String,
    },
    /// Replaces the value at `path` with `value`.
    Replace {
        /// A JSON Pointer (RFC 6901).
        path: String,
        /// The new value.
        value: Value,
    },
}

/// The JSON Patch (RFC 6902) that turns `from` into `to`; empty when they are equal.
///
/// Objects are compared member by member and arrays element by element (see the
/// [module's implementation details](self#implementation-details)); paths are JSON Pointers
/// with `~` and `/` escaped as `~0` and `~1`.
///
/// ```
/// use controller_runtime::runtime::webhook::{PatchOperation, json_patch};
/// use serde_json::json;
///
/// let ops = json_patch(&json!({"spec": {"size": 0}}), &json!({"spec": {"size": 3}}));
/// assert_eq!(ops, [PatchOperation::Replace { path: "/spec/size".into(), value: json!(3) }]);
/// ```
pub fn json_patch(from: &Value, to: &Value) -> Vec<PatchOperation> {
    let mut operations = Vec::new();
    let mut path = String::new();
    diff(&mut path, from, to, &mut operations);
    operations
}

fn diff(path: &mut String, from: &Value, to: &Value, out: &mut Vec<PatchOperation>) {
    match (from, to) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, old) in a {
                let len = path.len();
                push_token(path, key);
                match b.get(key) {
                    Some(new) => diff(path, old, new, out),
                    None => out.push(PatchOperation::Remove { path: path.clone() }),
                }
                path.truncate(len);
            }
            for (key, new) in b {
                if !a.contains_key(key) {
                    let len = path.len();
                    push_token(path, key);
                    out.push(PatchOperation::Add {
                        path: path.clone(),
                        value: new.clone(),
                    });
                    path.truncate(len);
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            let common = a.len().min(b.len());
            let len = path.len();
            for i in 0..common {
                push_index(path, i);
                diff(path, &a[i], &b[i], out);
                path.truncate(len);
            }
            for (i, new) in b.iter().enumerate().skip(common) {
                push_index(path, i);
                out.push(PatchOperation::Add {
                    path: path.clone(),
                    value: new.clone(),
                });
                path.truncate(len);
            }
            for i in (common..a.len()).rev() {
                push_index(path, i);
                out.push(PatchOperation::Remove { path: path.clone() });
                path.truncate(len);
            }
        }
        _ if from == to => {}
        _ => out.push(PatchOperation::Replace {
            path: path.clone(),
            value: to.clone(),
        }),
    }
}

/// Appends `/token` to a JSON Pointer, escaping `~` as `~0` and `/` as `~1`.
fn push_token(path: &mut String, token: &str) {
    path.push('/');
    for c in token.chars() {
        match c {
            '~' => path.push_str("~0"),
            '/' => path.push_str("~1"),
            c => path.push(c),
        }
    }
}

fn push_index(path: &mut String, index: usize) {
    use std::fmt::Write;
    let _ = write!(path, "/{index}");
}

// === handlers ===

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

// === HTTP ===

/// The largest request body read (controller-runtime's limit): a review carries the object
/// twice, and etcd takes objects up to about 1.5 MiB.
const MAX_BODY: usize = 7 * 1024 * 1024;

/// What answers a POST on one path: from the request's content type and body to the
/// response's status and body (a review, or a text error).
pub(crate) type Endpoint = Arc<dyn Fn(&str, &[u8]) -> (StatusCode, Bytes) + Send + Sync>;

type Routes = HashMap<String, Endpoint>;

/// The answer to one HTTP request.
async fn respond(routes: &Routes, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let Some(endpoint) = routes.get(request.uri().path()).cloned() else {
        return text(StatusCode::NOT_FOUND, "404 page not found\n".to_owned());
    };
    if request.method() != Method::POST {
        let mut response = text(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("method {} not allowed: use POST\n", request.method()),
        );
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("POST"));
        return response;
    }
    let content_type = request
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let body = match Limited::new(request.into_body(), MAX_BODY).collect().await {
        Ok(body) => body.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            return text(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the request body is larger than {MAX_BODY} bytes\n"),
            );
        }
        Err(e) => {
            return text(
                StatusCode::BAD_REQUEST,
                format!("reading the request body: {e}\n"),
            );
        }
    };
    let (status, body) = endpoint(&content_type, &body);
    let content_type = if status == StatusCode::OK {
        "application/json"
    } else {
        "text/plain; charset=utf-8"
    };
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
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

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

// === certificates ===

/// What a certificate or key file looked like when last read: modification time, length,
/// inode (a renamed-in file has a new one). `None` when it could not be examined.
type Stamp = Option<(Option<SystemTime>, u64, u64)>;

async fn stamp(path: &Path) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    let metadata = tokio::fs::metadata(path).await.ok()?;
    Some((metadata.modified().ok(), metadata.len(), metadata.ino()))
}

/// The serving certificate: the current pair, reloaded from its files when they change.
/// The metrics server serves its certificate with it too.
pub(crate) struct CertWatcher {
    cert_path: PathBuf,
    key_path: PathBuf,
    provider: Arc<CryptoProvider>,
    /// The pair served to new handshakes; always a pair that loaded.
    current: RwLock<Arc<CertifiedKey>>,
    /// The files' stamps when last read (successfully or not).
    seen: Mutex<(Stamp, Stamp)>,
}

impl fmt::Debug for CertWatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertWatcher")
            .field("cert_path", &self.cert_path)
            .field("key_path", &self.key_path)
            .finish_non_exhaustive()
    }
}

impl ResolvesServerCert for CertWatcher {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.read().clone())
    }
}

impl CertWatcher {
    /// Loads the pair; fails if it does not load.
    pub(crate) async fn new(
        cert_path: PathBuf,
        key_path: PathBuf,
        provider: Arc<CryptoProvider>,
    ) -> Result<CertWatcher> {
        let stamps = (stamp(&cert_path).await, stamp(&key_path).await);
        let pair = load_pair(&cert_path, &key_path, &provider).await?;
        Ok(CertWatcher {
            cert_path,
            key_path,
            provider,
            current: RwLock::new(Arc::new(pair)),
            seen: Mutex::new(stamps),
        })
    }

    /// Reloads the pair if either file changed since it was last read; keeps the current
    /// pair (and logs why) if the new one does not load.
    pub(crate) async fn refresh(&self) {
        let stamps = (stamp(&self.cert_path).await, stamp(&self.key_path).await);
        if *self.seen.lock() == stamps {
            return;
        }
        // Stamped before reading: a write during the read shows as a new stamp next time.
        let loaded = load_pair(&self.cert_path, &self.key_path, &self.provider).await;
        *self.seen.lock() = stamps;
        match loaded {
            Ok(pair) => {
                let mut current = self.current.write();
                if current.cert != pair.cert {
                    *current = Arc::new(pair);
                    tracing::info!(cert = %self.cert_path.display(), "reloaded the serving certificate");
                }
            }
            Err(e) => tracing::error!(
                error = %e,
                "the serving certificate did not reload; serving the previous one"
            ),
        }
    }
}

async fn read(path: &Path) -> Result<Vec<u8>> {
    tokio::fs::read(path)
        .await
        .map_err(|source| Error::ReadFile {
            path: path.to_owned(),
            source,
        })
}

async fn load_pair(
    cert_path: &Path,
    key_path: &Path,
    provider: &CryptoProvider,
) -> Result<CertifiedKey> {
    let cert_pem = read(cert_path).await?;
    let key_pem = read(key_path).await?;
    parse_pair(cert_path, &cert_pem, key_path, &key_pem, provider)
}

/// Parses a PEM certificate chain and key, and checks that the key is the certificate's.
fn parse_pair(
    cert_path: &Path,
    cert_pem: &[u8],
    key_path: &Path,
    key_pem: &[u8],
    provider: &CryptoProvider,
) -> Result<CertifiedKey> {
    let pem_error = |path: &Path, what: &'static str, source: pem::Error| match source {
        pem::Error::NoItemsFound => Error::Missing {
            path: path.to_owned(),
            what,
        },
        source => Error::Pem {
            path: path.to_owned(),
            source,
        },
    };
    let certs = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(cert_path, "certificate", e))?;
    if certs.is_empty() {
        return Err(Error::Missing {
            path: cert_path.to_owned(),
            what: "certificate",
        });
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| pem_error(key_path, "private key", e))?;
    CertifiedKey::from_der(certs, key, provider).map_err(|source| Error::KeyPair {
        cert: cert_path.to_owned(),
        key: key_path.to_owned(),
        source,
    })
}

// === WebhookServer ===

/// How a [`WebhookServer`] listens. The defaults are controller-runtime's.
#[derive(Clone, Debug)]
pub struct WebhookOptions {
    /// Where to listen. Default `0.0.0.0:9443`.
    pub bind_address: SocketAddr,
    /// The directory holding the serving certificate and key. Default
    /// `<temp dir>/k8s-webhook-server/serving-certs`, where controller-runtime looks and
    /// where kubebuilder's manifests mount the cert-manager Secret.
    pub cert_dir: PathBuf,
    /// The certificate file in `cert_dir`, PEM, leaf first. Default `tls.crt`.
    pub cert_name: String,
    /// The private key file in `cert_dir`, PEM (PKCS#8, PKCS#1 or SEC1). Default `tls.key`.
    pub key_name: String,
    /// Offer HTTP/2 as well as HTTP/1.1. Default false, as kubebuilder's scaffold, since
    /// HTTP/2's rapid-reset and stream floods (CVE-2023-44487) cost a webhook more than
    /// multiplexing saves it.
    pub enable_http2: bool,
}

impl Default for WebhookOptions {
    fn default() -> Self {
        WebhookOptions {
            bind_address: SocketAddr::from((Ipv4Addr::UNSPECIFIED, 9443)),
            cert_dir: std::env::temp_dir().join("k8s-webhook-server/serving-certs"),
            cert_name: "tls.crt".to_owned(),
            key_name: "tls.key".to_owned(),
            enable_http2: false,
        }
    }
}

/// An admission webhook server: handlers registered by path, served over TLS; see the
/// [module docs](self).
///
/// Register handlers with [`defaulting`](Self::defaulting),
/// [`validating`](Self::validating) and [`handle`](Self::handle) (and a CRD conversion
/// webhook with [`conversion`](Self::conversion)), then either
/// [`run`](Self::run) it, or [`bind`](Self::bind) it first (which loads the certificate and
/// binds the port, so setup errors surface before serving) and
/// [`serve`](BoundWebhookServer::serve) the result.
pub struct WebhookServer {
    options: WebhookOptions,
    routes: Routes,
    /// The first registration error, reported by `bind`.
    invalid: Option<Error>,
}

impl fmt::Debug for WebhookServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut paths: Vec<&String> = self.routes.keys().collect();
        paths.sort();
        f.debug_struct("WebhookServer")
            .field("options", &self.options)
            .field("paths", &paths)
            .finish_non_exhaustive()
    }
}

impl WebhookServer {
    /// A server with no handlers yet.
    pub fn new(options: WebhookOptions) -> Self {
        WebhookServer {
            options,
            routes: Routes::new(),
            invalid: None,
        }
    }

    /// Serves a defaulting (mutating) webhook for kind `K` on `path`: `default` is given the
    /// object being created or updated and sets what is unset; the API server applies the
    /// JSON Patch between the two. `DELETE` and `CONNECT` are allowed unchanged.
    ///
    /// `K` is decoded from the request and encoded back; operations that decoding and
    /// encoding alone produce (a field `K` does not model, a number spelled differently) are
    /// left out of the patch, so they never remove or rewrite what the function did not
    /// touch. A request for another kind is refused with HTTP 400 in its status.
    pub fn defaulting<K>(self, path: &str, default: impl Fn(&mut K) + Send + Sync + 'static) -> Self
    where
        K: k8s_openapi::Resource + DeserializeOwned + Serialize,
    {
        self.handle_with(path, defaulter::<K>(default))
    }

    /// Serves a validating webhook for kind `K` on `path`. `validate` is given, for a
    /// `CREATE`, the new object and `None`; for an `UPDATE`, the new object and the old;
    /// for a `DELETE`, the object being deleted and `None`. It returns `Ok(warnings)` to
    /// allow (the warnings reach the client, which shows them) or `Err(message)` to refuse
    /// with HTTP 403 `Forbidden` and that message. `CONNECT` is refused.
    pub fn validating<K>(
        self,
        path: &str,
        validate: impl Fn(&K, Option<&K>, Operation) -> Result<Vec<String>, String>
        + Send
        + Sync
        + 'static,
    ) -> Self
    where
        K: k8s_openapi::Resource + DeserializeOwned,
    {
        self.handle_with(path, validator::<K>(validate))
    }

    /// Serves `handler` on `path`: any function from the request to the response.
    pub fn handle(
        self,
        path: &str,
        handler: impl Fn(&AdmissionRequest) -> AdmissionResponse + Send + Sync + 'static,
    ) -> Self {
        self.handle_with(path, Arc::new(handler))
    }

    /// Serves `conversion`, the CRD conversion webhook, on
    /// [`CONVERT_PATH`](super::conversion::CONVERT_PATH) (`/convert`): see
    /// [`runtime::conversion`](super::conversion). One [`Conversion`] holds every kind the
    /// server converts; a second call is an [`Error::DuplicatePath`].
    ///
    /// [`Conversion`]: super::conversion::Conversion
    pub fn conversion(self, conversion: super::conversion::Conversion) -> Self {
        self.route(super::conversion::CONVERT_PATH, conversion.endpoint())
    }

    fn handle_with(self, path: &str, handler: Handler) -> Self {
        let endpoint: Endpoint =
            Arc::new(move |content_type: &str, body: &[u8]| review(&handler, content_type, body));
        self.route(path, endpoint)
    }

    fn route(mut self, path: &str, endpoint: Endpoint) -> Self {
        if self.invalid.is_some() {
            return self;
        }
        if !path.starts_with('/') {
            self.invalid = Some(Error::InvalidPath(path.to_owned()));
        } else if self.routes.insert(path.to_owned(), endpoint).is_some() {
            self.invalid = Some(Error::DuplicatePath(path.to_owned()));
        }
        self
    }

    /// The options this server was made with.
    pub fn options(&self) -> &WebhookOptions {
        &self.options
    }

    /// The registered paths, sorted.
    pub fn paths(&self) -> Vec<String> {
        let mut paths: Vec<String> = self.routes.keys().cloned().collect();
        paths.sort();
        paths
    }

    /// Loads the certificate and binds the listening socket, ready to
    /// [`serve`](BoundWebhookServer::serve).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidPath`] or [`Error::DuplicatePath`] for a bad registration;
    /// [`Error::ReadFile`], [`Error::Pem`], [`Error::Missing`] or [`Error::KeyPair`] (each
    /// naming the file) if the certificate and key do not load; [`Error::Bind`] if the
    /// address is taken.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: nothing is kept if the future is dropped.
    pub async fn bind(self) -> Result<BoundWebhookServer> {
        if let Some(e) = self.invalid {
            return Err(e);
        }
        let options = self.options;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let certs = Arc::new(
            CertWatcher::new(
                options.cert_dir.join(&options.cert_name),
                options.cert_dir.join(&options.key_name),
                provider.clone(),
            )
            .await?,
        );
        let mut tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(Error::Tls)?
            .with_no_client_auth()
            .with_cert_resolver(certs.clone());
        tls.alpn_protocols = if options.enable_http2 {
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        } else {
            vec![b"http/1.1".to_vec()]
        };
        let listener = TcpListener::bind(options.bind_address)
            .await
            .map_err(|source| Error::Bind {
                addr: options.bind_address,
                source,
            })?;
        let local_addr = listener.local_addr().unwrap_or(options.bind_address);
        Ok(BoundWebhookServer {
            listener,
            local_addr,
            acceptor: TlsAcceptor::from(Arc::new(tls)),
            certs,
            routes: Arc::new(self.routes),
        })
    }

    /// [`bind`](Self::bind)s, then [`serve`](BoundWebhookServer::serve)s until `shutdown`
    /// completes.
    ///
    /// # Errors
    ///
    /// As [`bind`](Self::bind); serving itself does not fail.
    ///
    /// # Cancel safety
    ///
    /// As [`BoundWebhookServer::serve`].
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<()> {
        self.bind().await?.serve(shutdown).await;
        Ok(())
    }
}

/// A [`WebhookServer`] with its certificate loaded and its socket bound.
pub struct BoundWebhookServer {
    listener: TcpListener,
    local_addr: SocketAddr,
    acceptor: TlsAcceptor,
    certs: Arc<CertWatcher>,
    routes: Arc<Routes>,
}

impl fmt::Debug for BoundWebhookServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BoundWebhookServer")
            .field("local_addr", &self.local_addr)
            .field("certs", &self.certs)
            .finish_non_exhaustive()
    }
}

/// How long a client has to finish the TLS handshake.
const HANDSHAKE_LIMIT: Duration = Duration::from_secs(10);

/// How long a graceful stop waits for requests in flight.
const DRAIN_LIMIT: Duration = Duration::from_secs(5);

impl BoundWebhookServer {
    /// The address the server listens on (useful after binding port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Serves until `shutdown` completes: one task per connection, the certificate files
    /// checked for changes before each handshake. Then it stops accepting, lets requests in
    /// flight finish (for up to 5 s) and returns.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops accepting and drops every connection at once; completing
    /// `shutdown` instead lets requests in flight finish.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) {
        let BoundWebhookServer {
            listener,
            local_addr,
            acceptor,
            certs,
            routes,
        } = self;
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut connections = JoinSet::new();
        tracing::info!(addr = %local_addr, paths = ?sorted(&routes), "serving webhooks");
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                accepted = listener.accept() => {
                    let (stream, peer) = match accepted {
                        Ok(a) => a,
                        Err(e) => {
                            tracing::warn!(error = %e, "accepting a webhook connection failed");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                    };
                    let connection = Connection {
                        acceptor: acceptor.clone(),
                        certs: certs.clone(),
                        routes: routes.clone(),
                        stop: stop_rx.clone(),
                        peer,
                    };
                    connections.spawn(connection.run(stream));
                }
                // Reap finished connections so the set does not grow.
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
        drop(listener);
        let _ = stop_tx.send(true);
        let drained = tokio::time::timeout(DRAIN_LIMIT, async {
            while connections.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!("webhook connections still open after {DRAIN_LIMIT:?}; closing them");
            connections.shutdown().await;
        }
        tracing::info!("webhook server stopped");
    }
}

fn sorted(routes: &Routes) -> Vec<&str> {
    let mut paths: Vec<&str> = routes.keys().map(String::as_str).collect();
    paths.sort_unstable();
    paths
}

/// One accepted connection, before its handshake.
struct Connection {
    acceptor: TlsAcceptor,
    certs: Arc<CertWatcher>,
    routes: Arc<Routes>,
    stop: watch::Receiver<bool>,
    peer: SocketAddr,
}

impl Connection {
    async fn run(self, stream: tokio::net::TcpStream) {
        let Connection {
            acceptor,
            certs,
            routes,
            mut stop,
            peer,
        } = self;
        certs.refresh().await;
        let handshake = tokio::time::timeout(HANDSHAKE_LIMIT, acceptor.accept(stream));
        let tls = tokio::select! {
            done = handshake => match done {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "webhook TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "webhook TLS handshake timed out");
                    return;
                }
            },
            () = async { let _ = stop.wait_for(|s| *s).await; } => return,
        };
        let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
        let service = service_fn(move |request: Request<Incoming>| {
            let routes = routes.clone();
            async move { Ok::<_, Infallible>(respond(&routes, request).await) }
        });
        let io = TokioIo::new(tls);
        let result = if h2 {
            let mut builder = http2::Builder::new(TokioExecutor::new());
            builder.timer(TokioTimer::new());
            let conn = builder.serve_connection(io, service);
            drive(conn, |c| c.graceful_shutdown(), stop).await
        } else {
            let mut builder = http1::Builder::new();
            builder.timer(TokioTimer::new());
            let conn = builder.serve_connection(io, service);
            drive(conn, |c| c.graceful_shutdown(), stop).await
        };
        if let Err(e) = result {
            tracing::debug!(%peer, error = %e, "webhook connection ended with an error");
        }
    }
}

/// Runs a connection until it ends; once `stop` turns true, asks it to finish the request
/// in flight and close.
async fn drive<C>(
    conn: C,
    graceful: impl FnOnce(Pin<&mut C>),
    mut stop: watch::Receiver<bool>,
) -> Result<(), hyper::Error>
where
    C: Future<Output = Result<(), hyper::Error>>,
{
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => r,
        // The guard `wait_for` returns is not Send: drop it inside.
        () = async { let _ = stop.wait_for(|s| *s).await; } => {
            graceful(conn.as_mut());
            conn.await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use proptest::prelude::*;
    use serde_json::json;

    // --- a small RFC 6902 applier, to check the diff against ---

    fn unescape(token: &str) -> String {
        token.replace("~1", "/").replace("~0", "~")
    }

    fn split(path: &str) -> (Vec<String>, String) {
        assert!(path.starts_with('/'), "pointer {path:?}");
        let mut tokens: Vec<String> = path[1..].split('/').map(unescape).collect();
        let last = tokens.pop().unwrap();
        (tokens, last)
    }

    fn parent<'v>(doc: &'v mut Value, tokens: &[String]) -> &'v mut Value {
        tokens.iter().fold(doc, |v, t| match v {
            Value::Object(m) => m.get_mut(t).expect("parent member exists"),
            Value::Array(a) => &mut a[t.parse::<usize>().expect("array index")],
            other => panic!("cannot descend into {other}"),
        })
    }

    fn apply(doc: &mut Value, ops: &[PatchOperation]) {
        for op in ops {
            match op {
                PatchOperation::Replace { path, value } if path.is_empty() => *doc = value.clone(),
                PatchOperation::Add { path, value } => {
                    let (tokens, last) = split(path);
                    match parent(doc, &tokens) {
                        Value::Object(m) => {
                            assert!(m.insert(last, value.clone()).is_none(), "add over {path}");
                        }
                        Value::Array(a) => {
                            let i = if last == "-" {
                                a.len()
                            } else {
                                last.parse().unwrap()
                            };
                            assert!(i <= a.len(), "add past the end at {path}");
                            a.insert(i, value.clone());
                        }
                        other => panic!("add into {other}"),
                    }
                }
                PatchOperation::Remove { path } => {
                    let (tokens, last) = split(path);
                    match parent(doc, &tokens) {
                        Value::Object(m) => {
                            m.remove(&last).expect("removed member exists");
                        }
                        Value::Array(a) => {
                            a.remove(last.parse().unwrap());
                        }
                        other => panic!("remove from {other}"),
                    }
                }
                PatchOperation::Replace { path, value } => {
                    let (tokens, last) = split(path);
                    match parent(doc, &tokens) {
                        Value::Object(m) => {
                            *m.get_mut(&last).expect("replaced member exists") = value.clone();
                        }
                        Value::Array(a) => a[last.parse::<usize>().unwrap()] = value.clone(),
                        other => panic!("replace in {other}"),
                    }
                }
            }
        }
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            (-3i64..3).prop_map(Value::from),
            "[xy]{0,2}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 40, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                object_of(inner),
            ]
        })
    }

    /// Objects over a small key alphabet (with the characters a pointer escapes), so two
    /// random objects share keys often.
    fn object_of(inner: impl Strategy<Value = Value>) -> impl Strategy<Value = Value> {
        prop::collection::btree_map("[a~/]{0,2}", inner, 0..4)
            .prop_map(|m| Value::Object(m.into_iter().collect()))
    }

    proptest! {
        #[test]
        fn applying_the_patch_to_the_source_gives_the_target(
            from in object_of(json_value()),
            to in object_of(json_value()),
        ) {
            let ops = json_patch(&from, &to);
            let mut patched = from.clone();
            apply(&mut patched, &ops);
            prop_assert_eq!(patched, to);
        }

        #[test]
        fn a_document_has_no_patch_to_itself(doc in object_of(json_value())) {
            prop_assert!(json_patch(&doc, &doc).is_empty());
        }

        #[test]
        fn patches_survive_the_wire(from in object_of(json_value()), to in object_of(json_value())) {
            let ops = json_patch(&from, &to);
            let wire = serde_json::to_vec(&ops).unwrap();
            let back: Vec<PatchOperation> = serde_json::from_slice(&wire).unwrap();
            prop_assert_eq!(back, ops);
        }
    }

    #[test]
    fn pointer_tokens_escape_tilde_and_slash() {
        let ops = json_patch(&json!({}), &json!({"a/b~c": 1}));
        assert_eq!(
            ops,
            [PatchOperation::Add {
                path: "/a~1b~0c".into(),
                value: json!(1)
            }]
        );
        let wire = serde_json::to_value(&ops).unwrap();
        assert_eq!(wire, json!([{"op": "add", "path": "/a~1b~0c", "value": 1}]));
    }

    #[test]
    fn shrinking_an_array_removes_from_the_end() {
        let ops = json_patch(&json!({"l": [1, 2, 3, 4]}), &json!({"l": [1, 5]}));
        assert_eq!(
            ops,
            [
                PatchOperation::Replace {
                    path: "/l/1".into(),
                    value: json!(5)
                },
                PatchOperation::Remove {
                    path: "/l/3".into()
                },
                PatchOperation::Remove {
                    path: "/l/2".into()
                },
            ]
        );
    }

    #[test]
    fn a_changed_type_is_replaced_whole() {
        let ops = json_patch(&json!({"a": {"b": 1}}), &json!({"a": [1]}));
        assert_eq!(
            ops,
            [PatchOperation::Replace {
                path: "/a".into(),
                value: json!([1])
            }]
        );
    }

    // --- reviews ---

    /// A review as kube-apiserver v1.36 sends it for a ConfigMap create.
    fn request_json(operation: &str, object: Value, old: Value) -> Value {
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

    fn configmap(data: Value) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "cm", "namespace": "ns", "uid": "c-1"},
            "data": data
        })
    }

    /// Runs `handler` on `review` as the HTTP layer does; returns the response.
    fn run(handler: &Handler, review: &Value) -> AdmissionResponse {
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

    fn add_defaulted(cm: &mut ConfigMap) {
        cm.data
            .get_or_insert_default()
            .insert("defaulted".into(), "true".into());
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
    fn a_panicking_handler_is_refused_not_crashed() {
        let handler = defaulter::<ConfigMap>(|_| panic!("boom"));
        let response = run(
            &handler,
            &request_json("CREATE", configmap(json!({})), Value::Null),
        );
        assert!(!response.allowed);
        assert_eq!(response.status.as_ref().unwrap().code, Some(500));
        assert_eq!(response.message(), Some("the webhook panicked: boom"));
        assert_eq!(response.uid, "705ab4f5-6393-11e8-b7cc-42010a800002");
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
    fn a_v1beta1_review_is_answered_in_kind() {
        let handler = defaulter::<ConfigMap>(|_| {});
        let mut wire = request_json("CREATE", configmap(json!({})), Value::Null);
        wire["apiVersion"] = json!(ADMISSION_V1BETA1);
        let (status, body) = review_bytes(&handler, &serde_json::to_vec(&wire).unwrap());
        assert_eq!(status, StatusCode::OK);
        let answer: AdmissionReview = serde_json::from_slice(&body).unwrap();
        assert_eq!(answer.api_version, ADMISSION_V1BETA1);
    }

    #[test]
    fn a_body_that_is_not_an_admission_review_is_a_400() {
        let handler = defaulter::<ConfigMap>(|_| {});
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

    #[test]
    fn kubebuilder_paths_follow_the_kind() {
        assert_eq!(mutate_path::<ConfigMap>(), "/mutate--v1-configmap");
        assert_eq!(
            validate_path::<k8s_openapi::api::apps::v1::Deployment>(),
            "/validate-apps-v1-deployment"
        );
    }

    #[test]
    fn registering_a_path_twice_or_without_a_slash_fails_at_bind() {
        let server = WebhookServer::new(WebhookOptions::default())
            .defaulting::<ConfigMap>("/a", |_| {})
            .validating::<ConfigMap>("/a", |_, _, _| Ok(vec![]));
        assert!(matches!(server.invalid, Some(Error::DuplicatePath(ref p)) if p == "/a"));
        let server = WebhookServer::new(WebhookOptions::default())
            .handle("a", |_| AdmissionResponse::allow());
        assert!(matches!(server.invalid, Some(Error::InvalidPath(ref p)) if p == "a"));
    }

    #[test]
    fn servers_can_be_handed_to_another_task() {
        fn send<T: Send + 'static>() {}
        send::<WebhookServer>();
        send::<BoundWebhookServer>();
        send::<Error>();
    }

    // --- certificates ---

    const CERT: &[u8] = include_bytes!("../../testdata/tls/server.pem");
    const KEY: &[u8] = include_bytes!("../../testdata/tls/server-key.pem");
    const OTHER_KEY: &[u8] = include_bytes!("../../testdata/tls/self-signed-key.pem");

    fn parse(cert: &[u8], key: &[u8]) -> Result<CertifiedKey> {
        let provider = rustls::crypto::ring::default_provider();
        parse_pair(
            Path::new("/certs/tls.crt"),
            cert,
            Path::new("/certs/tls.key"),
            key,
            &provider,
        )
    }

    #[test]
    fn a_matching_pair_loads() {
        let pair = parse(CERT, KEY).unwrap();
        assert_eq!(pair.cert.len(), 1);
    }

    #[test]
    fn a_bad_pair_names_the_file_at_fault() {
        let message = |r: Result<CertifiedKey>| r.expect_err("must fail").to_string();
        assert_eq!(
            message(parse(b"", KEY)),
            "/certs/tls.crt: no certificate in PEM"
        );
        assert_eq!(
            message(parse(CERT, b"garbage")),
            "/certs/tls.key: no private key in PEM"
        );
        assert_eq!(
            message(parse(KEY, KEY)),
            "/certs/tls.crt: no certificate in PEM"
        );
        let truncated = &CERT[..CERT.len() / 2];
        assert!(
            message(parse(truncated, KEY)).starts_with("parsing /certs/tls.crt: "),
            "{}",
            message(parse(truncated, KEY))
        );
        let mismatch = message(parse(CERT, OTHER_KEY));
        assert!(
            mismatch.starts_with("loading the key pair /certs/tls.crt and /certs/tls.key: "),
            "{mismatch}"
        );
    }
}
