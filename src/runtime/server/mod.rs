//! The probe and metrics HTTP endpoints, with the bind-address flags that place them.
//!
//! Two small HTTP/1.1 servers, as controller-runtime's manager runs them:
//!
//! * [`serve_probes`] answers `/healthz` and `/readyz` from two sets of named [`Checks`], in
//!   controller-runtime's exact text format (`pkg/healthz`): `200 ok`; on failure `500` with
//!   one `[+]name ok` or `[-]name failed: reason withheld` line per check, sorted by name,
//!   and a last line `healthz check failed`; `?verbose` for the lines on success too,
//!   `?exclude=name` to skip a check, and `/healthz/<name>` for a single check.
//! * [`serve_metrics`] answers `GET /metrics` with a [`Metrics`](crate::runtime::Metrics)
//!   registry in the Prometheus text format (OpenMetrics when the scraper asks for it);
//!   [`serve_metrics_secure`] serves the same over HTTPS ([`MetricsTls`]), each request
//!   authenticated and authorized through the API server by an
//!   [`Authorizer`](crate::runtime::auth::Authorizer) when one is given (kubebuilder's
//!   `--metrics-secure`, controller-runtime's `filters.WithAuthenticationAndAuthorization`).
//!
//! All run one task per connection and stop gracefully when their `shutdown` future
//! completes. [`parse_bind_address`] reads kubebuilder's `--health-probe-bind-address` and
//! `--metrics-bind-address` flags (`:8081`, `0` to disable).
//!
//! `health.rs` holds the checks and the probe server, `metrics.rs` the metrics server and
//! its TLS, `address.rs` the flags' parsing; the runtime's `serve` runs the connections.
//!
//! ```no_run
//! use controller_runtime::runtime::server::{Checks, ping, parse_bind_address, serve_probes};
//!
//! # async fn run() -> std::io::Result<()> {
//! let healthz = Checks::new();
//! healthz.add("ping", ping()).unwrap();
//! let readyz = Checks::new();
//! readyz.add("ping", ping()).unwrap();
//! let addr = parse_bind_address(":8081").unwrap().expect("enabled");
//! let listener = tokio::net::TcpListener::bind(addr).await?;
//! let shutdown = async {
//!     let _ = tokio::signal::ctrl_c().await;
//! };
//! serve_probes(listener, healthz, readyz, shutdown).await
//! # }
//! ```

use bytes::Bytes;
use http::header::{HeaderValue, X_CONTENT_TYPE_OPTIONS};
use http::{Response, StatusCode};
use http_body_util::Full;

mod address;
mod health;
mod metrics;

pub use address::parse_bind_address;
pub use health::{Check, Checks, check, ping, serve_probes};
pub use metrics::{MetricsTls, SecureMetricsOptions, serve_metrics, serve_metrics_secure};
pub(crate) use metrics::{serve_metrics_secure_with, serve_metrics_with};

/// What the probe and metrics servers can reject.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A check of that name was already added.
    #[error("health check {0:?} already exists")]
    DuplicateCheck(String),

    /// A check name must be non-empty and free of `/`, since it is also a path segment.
    #[error("health check name {0:?} must be non-empty and contain no '/'")]
    InvalidCheckName(String),

    /// A bind address that is not `[host]:port`, `0` or empty.
    #[error("bind address {address:?}: {reason}")]
    InvalidBindAddress {
        /// The address as given.
        address: String,
        /// What is wrong with it.
        reason: String,
    },

    /// The metrics server's certificate and key files exist but do not load.
    #[error("the metrics server's certificate: {0}")]
    Certificate(#[source] super::webhook::Error),

    /// No self-signed certificate could be made.
    #[error("generating a self-signed certificate for the metrics server: {0}")]
    SelfSigned(String),

    /// The TLS configuration could not be built.
    #[error("building the metrics server's TLS configuration: {0}")]
    Tls(#[source] rustls::Error),
}

/// A response of `status` with `body` as `content_type`, never sniffed by browsers.
fn text_response(
    status: StatusCode,
    body: String,
    content_type: &'static str,
) -> Response<Full<Bytes>> {
    let mut response = crate::runtime::serve::response(status, body, content_type);
    let nosniff = HeaderValue::from_static("nosniff");
    response
        .headers_mut()
        .insert(X_CONTENT_TYPE_OPTIONS, nosniff);
    response
}
