//! The metrics server: `/metrics` over HTTP, or HTTPS with the API server's authorization.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION};
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;

use super::{Error, text_response};
use crate::runtime::auth::Authorizer;
use crate::runtime::certwatcher::CertWatcher;
use crate::runtime::debug::{self, DebugPages};
use crate::runtime::metrics::{self, Metrics};
use crate::runtime::serve::{Certificate, NOT_FOUND, Tls, serve};

/// Serves `GET /metrics` from `metrics` on `listener` until `shutdown` completes; any other
/// path is a 404.
///
/// The body is the Prometheus text format ([`metrics::CONTENT_TYPE`]), or OpenMetrics text
/// ([`metrics::OPENMETRICS_CONTENT_TYPE`]) when the request's `Accept` names
/// `application/openmetrics-text`, as Prometheus' scraper does.
///
/// # Errors
///
/// As [`serve_probes`](super::serve_probes).
///
/// # Cancel safety
///
/// As [`serve_probes`](super::serve_probes).
pub async fn serve_metrics(
    listener: TcpListener,
    metrics: Metrics,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    serve_metrics_with(listener, metrics, None, shutdown).await
}

/// [`serve_metrics`], with the [debug pages](crate::runtime::debug) too when `debug` is set.
pub(crate) async fn serve_metrics_with(
    listener: TcpListener,
    metrics: Metrics,
    debug: Option<DebugPages>,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let handler =
        move |req: Request<Incoming>| std::future::ready(scrape(&metrics, debug.as_ref(), &req));
    serve(listener, None, handler, shutdown, "metrics").await;
    Ok(())
}

/// Serves `GET /metrics` as [`serve_metrics`] does, over HTTPS with `tls`; with an
/// `authorizer`, a request to `/metrics` is served only if it allows it (else 401, 403 or
/// 500 with controller-runtime's text; see [`auth`](crate::runtime::auth)). Other paths are
/// a 404 either way.
///
/// HTTP/1.1 only, as kubebuilder's scaffold serves metrics (its `--enable-http2` is off by
/// default, against the HTTP/2 Rapid Reset and Stream Cancellation attacks).
///
/// # Errors
///
/// As [`serve_probes`](super::serve_probes): a failed handshake is logged at debug level
/// and ends only its connection.
///
/// # Cancel safety
///
/// As [`serve_probes`](super::serve_probes).
pub async fn serve_metrics_secure(
    listener: TcpListener,
    metrics: Metrics,
    tls: MetricsTls,
    authorizer: Option<Authorizer>,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    serve_metrics_secure_with(listener, metrics, None, tls, authorizer, shutdown).await
}

/// [`serve_metrics_secure`], with the [debug pages](crate::runtime::debug) too when `debug`
/// is set, behind the same authorization as `/metrics`.
pub(crate) async fn serve_metrics_secure_with(
    listener: TcpListener,
    metrics: Metrics,
    debug: Option<DebugPages>,
    tls: MetricsTls,
    authorizer: Option<Authorizer>,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let metrics = Arc::new(metrics);
    let handler = move |req: Request<Incoming>| {
        let (metrics, authorizer, debug) = (metrics.clone(), authorizer.clone(), debug.clone());
        async move {
            let path = req.uri().path();
            let guarded = path == "/metrics"
                || (debug.is_some() && (path == debug::PAGE_PATH || path == debug::JSON_PATH));
            if let (Some(authorizer), true) = (&authorizer, guarded) {
                let verdict = authorizer
                    .check(
                        req.headers().get(AUTHORIZATION),
                        req.method(),
                        req.uri().path(),
                    )
                    .await;
                if let Some((status, body)) = verdict.refusal() {
                    return text_response(status, body, "text/plain; charset=utf-8");
                }
            }
            scrape(&metrics, debug.as_ref(), &req)
        }
    };
    serve(listener, Some(tls.0), handler, shutdown, "metrics").await;
    Ok(())
}

/// The answer to a request to the metrics server, once allowed.
fn scrape(
    metrics: &Metrics,
    debug: Option<&DebugPages>,
    req: &Request<Incoming>,
) -> Response<Full<Bytes>> {
    if let Some((body, content_type)) =
        debug.and_then(|d| d.respond(req.uri().path(), req.uri().query()))
    {
        let mut response = text_response(StatusCode::OK, body, content_type);
        let no_store = http::HeaderValue::from_static("no-store");
        response
            .headers_mut()
            .insert(http::header::CACHE_CONTROL, no_store);
        return response;
    }
    if req.uri().path() != "/metrics" {
        return text_response(
            StatusCode::NOT_FOUND,
            NOT_FOUND.to_owned(),
            "text/plain; charset=utf-8",
        );
    }
    let openmetrics = req
        .headers()
        .get_all(ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("application/openmetrics-text"));
    if openmetrics {
        text_response(
            StatusCode::OK,
            metrics.encode_openmetrics(),
            metrics::OPENMETRICS_CONTENT_TYPE,
        )
    } else {
        text_response(StatusCode::OK, metrics.encode(), metrics::CONTENT_TYPE)
    }
}

// === TLS for the metrics server ===

/// How `/metrics` is served over HTTPS (kubebuilder's `--metrics-secure`). The defaults are
/// controller-runtime's.
#[derive(Clone, Debug)]
pub struct SecureMetricsOptions {
    /// The directory holding the certificate and key (`--metrics-cert-path`). Default
    /// `<temp dir>/k8s-metrics-server/serving-certs`. When either file is missing, a
    /// self-signed certificate for `localhost` and `127.0.0.1` is made at start, as
    /// controller-runtime does: scrapers then skip verifying it, as Prometheus' scrape
    /// config for kubebuilder's ServiceMonitor does (`insecureSkipVerify`), but the traffic
    /// and the bearer tokens in it are encrypted.
    pub cert_dir: PathBuf,
    /// The certificate's file name in `cert_dir` (PEM, the chain). Default `tls.crt`.
    pub cert_name: String,
    /// The key's file name in `cert_dir` (PEM). Default `tls.key`.
    pub key_name: String,
    /// Authenticate (TokenReview) and authorize (SubjectAccessReview) every request to
    /// `/metrics`, as kubebuilder's scaffold does with `--metrics-secure`. Default true.
    pub authorize: bool,
}

impl Default for SecureMetricsOptions {
    fn default() -> Self {
        SecureMetricsOptions {
            cert_dir: std::env::temp_dir()
                .join("k8s-metrics-server")
                .join("serving-certs"),
            cert_name: "tls.crt".to_owned(),
            key_name: "tls.key".to_owned(),
            authorize: true,
        }
    }
}

/// The metrics server's TLS: a certificate from files, reloaded as they change, or a
/// self-signed one made at start. HTTP/1.1 only.
#[derive(Clone, Debug)]
pub struct MetricsTls(Tls);

impl MetricsTls {
    /// The certificate of `options.cert_dir` when both of its files exist, else a
    /// self-signed one.
    ///
    /// # Errors
    ///
    /// [`Error::Certificate`] (naming the file) if the files exist but do not load;
    /// [`Error::SelfSigned`] or [`Error::Tls`] if the TLS configuration cannot be made.
    pub async fn load(options: &SecureMetricsOptions) -> Result<MetricsTls, Error> {
        let cert = options.cert_dir.join(&options.cert_name);
        let key = options.cert_dir.join(&options.key_name);
        let both = tokio::fs::try_exists(&cert).await.unwrap_or(false)
            && tokio::fs::try_exists(&key).await.unwrap_or(false);
        let certificate = if both {
            let watcher = CertWatcher::new(cert, key).await;
            Certificate::Watched(Arc::new(watcher.map_err(Error::Certificate)?))
        } else {
            tracing::info!(
                cert_dir = %options.cert_dir.display(),
                "no metrics serving certificate there; serving a self-signed one"
            );
            let (chain, key) = self_signed()?;
            Certificate::Fixed(chain, key)
        };
        Ok(MetricsTls(
            Tls::new(certificate, false).map_err(Error::Tls)?,
        ))
    }
}

/// A self-signed certificate for `localhost` and `127.0.0.1` (ECDSA P-256), as
/// controller-runtime makes for a metrics server without one: the chain and its key.
fn self_signed() -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), Error> {
    let bad = |e: rcgen::Error| Error::SelfSigned(e.to_string());
    let key = rcgen::KeyPair::generate().map_err(bad)?;
    let names = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
    let mut params = rcgen::CertificateParams::new(names).map_err(bad)?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "localhost");
    let cert = params.self_signed(&key).map_err(bad)?;
    let key_der = PrivateKeyDer::Pkcs8(key.serialize_der().into());
    Ok((vec![cert.der().clone()], key_der))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[tokio::test]
    async fn without_certificate_files_the_metrics_server_makes_a_self_signed_one() {
        let options = SecureMetricsOptions {
            cert_dir: PathBuf::from("/nonexistent/k8s-metrics-server"),
            ..SecureMetricsOptions::default()
        };
        let tls = MetricsTls::load(&options).await.unwrap();
        assert!(tls.0.watcher.is_none());
        let (chain, _) = self_signed().unwrap();
        assert_eq!(chain.len(), 1);
    }

    #[tokio::test]
    async fn certificate_files_are_served_and_a_bad_pair_names_the_file() {
        let tls = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/tls");
        let options = SecureMetricsOptions {
            cert_dir: tls.clone(),
            cert_name: "server.pem".into(),
            key_name: "server-key.pem".into(),
            ..SecureMetricsOptions::default()
        };
        let loaded = MetricsTls::load(&options).await.unwrap();
        assert!(loaded.0.watcher.is_some());
        let mismatched = SecureMetricsOptions {
            key_name: "self-signed-key.pem".into(),
            ..options
        };
        let error = MetricsTls::load(&mismatched).await.unwrap_err();
        assert!(matches!(error, Error::Certificate(_)), "{error}");
        assert!(error.to_string().contains("self-signed-key.pem"), "{error}");
    }
}
