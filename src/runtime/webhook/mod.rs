//! Admission webhooks: a TLS server that answers the API server's `AdmissionReview`s with
//! typed defaulting and validating functions.
//!
//! An operator is a CRD, a controller and, often, an admission webhook: the API server sends
//! every create or update of a kind to the webhook before storing it, and the webhook sets
//! defaults (a *mutating* webhook, answering with a JSON Patch) or refuses the object (a
//! *validating* webhook). This module is controller-runtime's `pkg/webhook`, in four files:
//!
//! * `server.rs`: [`WebhookServer`] — HTTPS on port 9443 by default, with the serving
//!   certificate and key read from `<cert_dir>/tls.crt` and `<cert_dir>/tls.key` (PEM) and
//!   **reloaded when the files change**, as cert-manager or a rotated Secret volume rewrites
//!   them: the files are checked before each new connection's handshake, and a pair that
//!   does not load is logged, naming the file, while the previous pair stays in service;
//! * `handler.rs`: [`defaulting`](WebhookServer::defaulting) — a function `Fn(&mut K)` sets
//!   defaults on the typed object; the server answers with the JSON Patch from the object it
//!   got to the object the function left; [`validating`](WebhookServer::validating) — a
//!   function `Fn(&K, Option<&K>, Operation) -> Result<Vec<String>, String>` allows the
//!   object (with warnings shown to the user) or refuses it with a message; kubebuilder's
//!   paths ([`mutate_path`], [`validate_path`]);
//! * [`handle`](WebhookServer::handle) — any function from [`AdmissionRequest`] to
//!   [`AdmissionResponse`], for what the typed forms do not cover;
//! * `admission.rs`: [`AdmissionReview`] and friends — `admission.k8s.io/v1` on the wire
//!   (k8s-openapi does not carry them); `patch.rs`: [`json_patch`], the RFC 6902 diff
//!   between two JSON documents.
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

use std::net::SocketAddr;
use std::path::PathBuf;

use rustls::pki_types::pem;

mod admission;
mod handler;
mod patch;
mod server;

pub(crate) use admission::review;
pub use admission::{
    ADMISSION_V1, ADMISSION_V1BETA1, AdmissionRequest, AdmissionResponse, AdmissionReview,
    GroupVersionKind, GroupVersionResource, JSON_PATCH, Operation,
};
pub use handler::{Handler, defaulter, mutate_path, validate_path, validator};
pub use patch::{PatchOperation, json_patch};
pub(crate) use server::Endpoint;
pub use server::{BoundWebhookServer, WebhookOptions, WebhookServer};

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
