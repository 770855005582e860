//! The probe and metrics HTTP endpoints.
//!
//! Two small HTTP/1.1 servers, as controller-runtime's manager runs them:
//!
//! * [`serve_probes`] answers `/healthz` and `/readyz` from two sets of named [`Checks`], in
//!   controller-runtime's exact text format (`pkg/healthz`): `200 ok`; on failure `500` with
//!   one `[+]name ok` or `[-]name failed: reason withheld` line per check, sorted by name,
//!   and a last line `healthz check failed`; `?verbose` for the lines on success too,
//!   `?exclude=name` to skip a check, and `/healthz/<name>` for a single check.
//! * [`serve_metrics`] answers `GET /metrics` with a [`Metrics`] registry in the Prometheus
//!   text format (OpenMetrics when the scraper asks for it);
//!   [`serve_metrics_secure`] serves the same over HTTPS ([`MetricsTls`]), each request
//!   authenticated and authorized through the API server by an
//!   [`Authorizer`] when one is given (kubebuilder's
//!   `--metrics-secure`, controller-runtime's `filters.WithAuthenticationAndAuthorization`).
//!
//! All run one task per connection and stop gracefully when their `shutdown` future
//! completes. [`parse_bind_address`] reads kubebuilder's `--health-probe-bind-address` and
//! `--metrics-bind-address` flags (`:8081`, `0` to disable).
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

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderValue, X_CONTENT_TYPE_OPTIONS};
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use parking_lot::RwLock;
use rustls::sign::CertifiedKey;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

use super::auth::Authorizer;
use super::metrics::{self, Metrics};
use super::webhook::CertWatcher;

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

/// One health check: `Ok(())` when healthy, else a reason (logged, never served to the
/// aggregated endpoint).
///
/// Checks run on the server's task for every request: keep them quick and non-blocking,
/// e.g. reading a flag or a `watch` receiver.
pub type Check = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// A check that always passes (controller-runtime's `healthz.Ping`).
pub fn ping() -> Check {
    Arc::new(|| Ok(()))
}

/// Wraps a closure as a [`Check`].
pub fn check(f: impl Fn() -> Result<(), String> + Send + Sync + 'static) -> Check {
    Arc::new(f)
}

// === Checks ===

/// A set of named checks served under one endpoint (`/healthz` or `/readyz`). Cheap to
/// clone; clones share the set, so checks added after the server started are served too.
///
/// An empty set serves one implicit `ping` check, as controller-runtime does.
#[derive(Clone, Default)]
pub struct Checks {
    /// Sorted by name, the order the aggregated endpoint lists them in.
    checks: Arc<RwLock<BTreeMap<String, Check>>>,
}

impl fmt::Debug for Checks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.checks.read().keys()).finish()
    }
}

/// What one check reported, for the aggregated answer.
struct Outcome {
    name: String,
    healthy: bool,
    excluded: bool,
}

impl Checks {
    /// An empty set (which serves the implicit `ping`).
    pub fn new() -> Checks {
        Checks::default()
    }

    /// Adds `check` under `name`.
    ///
    /// # Errors
    ///
    /// [`Error::DuplicateCheck`] if `name` is taken; [`Error::InvalidCheckName`] if it is
    /// empty or holds a `/`.
    pub fn add(&self, name: impl Into<String>, check: Check) -> Result<(), Error> {
        let name = name.into();
        if name.is_empty() || name.contains('/') {
            return Err(Error::InvalidCheckName(name));
        }
        let mut checks = self.checks.write();
        if checks.contains_key(&name) {
            return Err(Error::DuplicateCheck(name));
        }
        checks.insert(name, check);
        Ok(())
    }

    /// The names of the checks, sorted.
    pub fn names(&self) -> Vec<String> {
        self.checks.read().keys().cloned().collect()
    }

    /// The answer to a request for `path` (what follows the endpoint, e.g. `""`, `"/"` or
    /// `"/ping"`) with query string `query`: the status and the text body.
    pub fn respond(&self, path: &str, query: Option<&str>) -> (StatusCode, String) {
        let path = clean_path(path);
        let checks: Vec<(String, Check)> = self
            .checks
            .read()
            .iter()
            .map(|(n, c)| (n.clone(), c.clone()))
            .collect();
        if path.is_empty() {
            return aggregate(&checks, query);
        }
        // A single check: its error is shown, as controller-runtime's CheckHandler does.
        let check = match checks.iter().find(|(n, _)| *n == path) {
            Some((_, c)) => c.clone(),
            None if checks.is_empty() && path == "ping" => ping(),
            None => return (StatusCode::NOT_FOUND, NOT_FOUND.to_owned()),
        };
        match check() {
            Ok(()) => (StatusCode::OK, "ok".to_owned()),
            Err(e) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("internal server error: {e}\n"),
            ),
        }
    }
}

/// Go's `http.NotFound` body.
const NOT_FOUND: &str = "404 page not found\n";

/// The aggregated answer, in controller-runtime's format.
fn aggregate(checks: &[(String, Check)], query: Option<&str>) -> (StatusCode, String) {
    let params = parse_query(query.unwrap_or(""));
    let verbose = params.iter().any(|(k, _)| k == "verbose");
    let mut excluded: BTreeSet<String> = params
        .into_iter()
        .filter(|(k, _)| k == "exclude")
        .map(|(_, v)| v)
        .collect();

    let mut failed = false;
    let mut outcomes: Vec<Outcome> = Vec::with_capacity(checks.len().max(1));
    for (name, check) in checks {
        if excluded.remove(name) {
            outcomes.push(Outcome {
                name: name.clone(),
                healthy: true,
                excluded: true,
            });
            continue;
        }
        let healthy = match check() {
            Ok(()) => true,
            Err(reason) => {
                tracing::debug!(check = %name, %reason, "health check failed");
                failed = true;
                false
            }
        };
        outcomes.push(Outcome {
            name: name.clone(),
            healthy,
            excluded: false,
        });
    }
    if checks.is_empty() {
        outcomes.push(Outcome {
            name: "ping".to_owned(),
            healthy: true,
            excluded: false,
        });
    }
    for name in &excluded {
        tracing::debug!(check = %name, "cannot exclude health check, no matches for it");
    }

    let status = if failed {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::OK
    };
    if !failed && !verbose {
        return (status, "ok".to_owned());
    }
    let mut body = String::new();
    for o in &outcomes {
        let line = match (o.excluded, o.healthy) {
            (true, _) => format!("[+]{} excluded: ok\n", o.name),
            (false, true) => format!("[+]{} ok\n", o.name),
            (false, false) => format!("[-]{} failed: reason withheld\n", o.name),
        };
        body.push_str(&line);
    }
    if !excluded.is_empty() {
        let quoted: Vec<String> = excluded.iter().map(|n| format!("{n:?}")).collect();
        body.push_str(&format!(
            "warn: some health checks cannot be excluded: no matches for {}\n",
            quoted.join(",")
        ));
    }
    // controller-runtime writes "healthz" here for every endpoint, /readyz included.
    if failed {
        let failing: Vec<&str> = outcomes
            .iter()
            .filter(|o| !o.healthy)
            .map(|o| o.name.as_str())
            .collect();
        tracing::info!(?failing, "healthz check failed");
        body.push_str("healthz check failed\n");
    } else {
        body.push_str("healthz check passed\n");
    }
    (status, body)
}

/// The sub-path as Go's `path.Clean` leaves it, without its leading `/`: `""` for the
/// endpoint itself.
fn clean_path(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for segment in path.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            s => parts.push(s),
        }
    }
    parts.join("/")
}

/// `k=v&k2` pairs, percent- and `+`-decoded as Go's `url.ParseQuery` does.
fn parse_query(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (decode_component(k), decode_component(v))
        })
        .collect()
}

fn decode_component(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

// === serving ===

/// Serves `/healthz` (and `/healthz/<check>`) from `healthz` and `/readyz` (and
/// `/readyz/<check>`) from `readyz` on `listener` until `shutdown` completes; any other
/// path is a 404.
///
/// # Errors
///
/// None so far: a failed `accept` (say, out of file descriptors) is logged and retried.
/// The `Result` leaves room for setup errors.
///
/// # Cancel safety
///
/// Dropping the future stops accepting and drops every connection at once; completing
/// `shutdown` instead lets requests in flight finish (for up to 5 s).
pub async fn serve_probes(
    listener: TcpListener,
    healthz: Checks,
    readyz: Checks,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let handler = move |req: Request<Incoming>| {
        let path = req.uri().path();
        let query = req.uri().query();
        let (status, body) = if let Some(rest) = endpoint(path, "/healthz") {
            healthz.respond(rest, query)
        } else if let Some(rest) = endpoint(path, "/readyz") {
            readyz.respond(rest, query)
        } else {
            (StatusCode::NOT_FOUND, NOT_FOUND.to_owned())
        };
        std::future::ready(text_response(status, body, "text/plain; charset=utf-8"))
    };
    serve(listener, None, handler, shutdown, "probes").await
}

/// Serves `GET /metrics` from `metrics` on `listener` until `shutdown` completes; any other
/// path is a 404.
///
/// The body is the Prometheus text format ([`metrics::CONTENT_TYPE`]), or OpenMetrics text
/// ([`metrics::OPENMETRICS_CONTENT_TYPE`]) when the request's `Accept` names
/// `application/openmetrics-text`, as Prometheus' scraper does.
///
/// # Errors
///
/// As [`serve_probes`].
///
/// # Cancel safety
///
/// As [`serve_probes`].
pub async fn serve_metrics(
    listener: TcpListener,
    metrics: Metrics,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let handler = move |req: Request<Incoming>| std::future::ready(scrape(&metrics, &req));
    serve(listener, None, handler, shutdown, "metrics").await
}

/// Serves `GET /metrics` as [`serve_metrics`] does, over HTTPS with `tls`; with an
/// `authorizer`, a request to `/metrics` is served only if it allows it (else 401, 403 or
/// 500 with controller-runtime's text; see [`auth`](super::auth)). Other paths are a 404
/// either way.
///
/// HTTP/1.1 only, as kubebuilder's scaffold serves metrics (its `--enable-http2` is off by
/// default, against the HTTP/2 Rapid Reset and Stream Cancellation attacks).
///
/// # Errors
///
/// As [`serve_probes`]: a failed handshake is logged at debug level and ends only its
/// connection.
///
/// # Cancel safety
///
/// As [`serve_probes`].
pub async fn serve_metrics_secure(
    listener: TcpListener,
    metrics: Metrics,
    tls: MetricsTls,
    authorizer: Option<Authorizer>,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let metrics = Arc::new(metrics);
    let handler = move |req: Request<Incoming>| {
        let (metrics, authorizer) = (metrics.clone(), authorizer.clone());
        async move {
            if let (Some(authorizer), "/metrics") = (&authorizer, req.uri().path()) {
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
            scrape(&metrics, &req)
        }
    };
    serve(listener, Some(tls), handler, shutdown, "metrics").await
}

/// The answer to a request to the metrics server, once allowed.
fn scrape(metrics: &Metrics, req: &Request<Incoming>) -> Response<Full<Bytes>> {
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

/// The metrics server's TLS: a certificate from files, reloaded as they change (the webhook
/// server's watcher), or a self-signed one made at start.
#[derive(Clone)]
pub struct MetricsTls {
    acceptor: TlsAcceptor,
    /// The watcher of the certificate files, checked before each handshake; `None` for a
    /// self-signed certificate.
    watcher: Option<Arc<CertWatcher>>,
}

impl fmt::Debug for MetricsTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MetricsTls")
            .field("watcher", &self.watcher)
            .finish_non_exhaustive()
    }
}

/// Serves one fixed certificate.
#[derive(Debug)]
struct Fixed(Arc<CertifiedKey>);

impl rustls::server::ResolvesServerCert for Fixed {
    fn resolve(&self, _hello: rustls::server::ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

impl MetricsTls {
    /// The certificate of `options.cert_dir` when both of its files exist, else a
    /// self-signed one.
    ///
    /// # Errors
    ///
    /// [`Error::Certificate`] (naming the file) if the files exist but do not load;
    /// [`Error::SelfSigned`] or [`Error::Tls`] if the TLS configuration cannot be made.
    pub async fn load(options: &SecureMetricsOptions) -> Result<MetricsTls, Error> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let cert = options.cert_dir.join(&options.cert_name);
        let key = options.cert_dir.join(&options.key_name);
        let both = tokio::fs::try_exists(&cert).await.unwrap_or(false)
            && tokio::fs::try_exists(&key).await.unwrap_or(false);
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(Error::Tls)?
            .with_no_client_auth();
        let (mut config, watcher) = if both {
            let watcher = Arc::new(
                CertWatcher::new(cert, key, provider)
                    .await
                    .map_err(Error::Certificate)?,
            );
            (builder.with_cert_resolver(watcher.clone()), Some(watcher))
        } else {
            tracing::info!(
                cert_dir = %options.cert_dir.display(),
                "no metrics serving certificate there; serving a self-signed one"
            );
            let pair = self_signed(&provider)?;
            (
                builder.with_cert_resolver(Arc::new(Fixed(Arc::new(pair)))),
                None,
            )
        };
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(MetricsTls {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            watcher,
        })
    }
}

/// A self-signed certificate for `localhost` and `127.0.0.1` (ECDSA P-256), as
/// controller-runtime makes for a metrics server without one.
fn self_signed(provider: &rustls::crypto::CryptoProvider) -> Result<CertifiedKey, Error> {
    let bad = |e: rcgen::Error| Error::SelfSigned(e.to_string());
    let key = rcgen::KeyPair::generate().map_err(bad)?;
    let names = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
    let mut params = rcgen::CertificateParams::new(names).map_err(bad)?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "localhost");
    let cert = params.self_signed(&key).map_err(bad)?;
    let key_der = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
    CertifiedKey::from_der(vec![cert.der().clone()], key_der, provider)
        .map_err(|e| Error::SelfSigned(e.to_string()))
}

/// What follows `prefix` in `path` when `path` is the endpoint or below it.
fn endpoint<'p>(path: &'p str, prefix: &str) -> Option<&'p str> {
    let rest = path.strip_prefix(prefix)?;
    (rest.is_empty() || rest.starts_with('/')).then_some(rest)
}

fn text_response(
    status: StatusCode,
    body: String,
    content_type: &'static str,
) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    response
}

/// How long a graceful stop waits for requests in flight.
const DRAIN_LIMIT: Duration = Duration::from_secs(5);

/// How long a client has to finish the TLS handshake.
const HANDSHAKE_LIMIT: Duration = Duration::from_secs(10);

/// The accept loop: one task per connection (after its TLS handshake, with `tls`), HTTP/1.1,
/// until `shutdown`; then stop accepting, ask each connection to finish its request in
/// flight and close, and wait for them (up to [`DRAIN_LIMIT`]).
async fn serve<H, F>(
    listener: TcpListener,
    tls: Option<MetricsTls>,
    handler: H,
    shutdown: impl Future<Output = ()>,
    what: &'static str,
) -> std::io::Result<()>
where
    H: Fn(Request<Incoming>) -> F + Send + Sync + 'static,
    F: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    let handler = Arc::new(handler);
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut builder = http1::Builder::new();
    builder.timer(TokioTimer::new());
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(server = what, %addr, secure = tls.is_some(), "serving");
    }
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!(server = what, error = %e, "accepting a connection failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let connection = Connection {
                    handler: handler.clone(),
                    builder: builder.clone(),
                    stop: stop_rx.clone(),
                    peer,
                    what,
                };
                let tls = tls.clone();
                connections.spawn(async move {
                    match tls {
                        None => connection.serve(stream).await,
                        Some(tls) => {
                            if let Some(stream) = connection.handshake(&tls, stream).await {
                                connection.serve(stream).await;
                            }
                        }
                    }
                });
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
        tracing::warn!(
            server = what,
            "connections still open after {DRAIN_LIMIT:?}; closing them"
        );
        connections.shutdown().await;
    }
    tracing::info!(server = what, "stopped");
    Ok(())
}

/// One accepted connection.
struct Connection<H> {
    handler: Arc<H>,
    builder: http1::Builder,
    stop: watch::Receiver<bool>,
    peer: SocketAddr,
    what: &'static str,
}

impl<H, F> Connection<H>
where
    H: Fn(Request<Incoming>) -> F + Send + Sync + 'static,
    F: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    /// The TLS handshake (with the certificate files checked for changes first); `None`
    /// when it fails, times out, or the server stops meanwhile.
    async fn handshake(
        &self,
        tls: &MetricsTls,
        stream: tokio::net::TcpStream,
    ) -> Option<tokio_rustls::server::TlsStream<tokio::net::TcpStream>> {
        if let Some(watcher) = &tls.watcher {
            watcher.refresh().await;
        }
        let (peer, what) = (self.peer, self.what);
        let mut stop = self.stop.clone();
        let handshake = tokio::time::timeout(HANDSHAKE_LIMIT, tls.acceptor.accept(stream));
        tokio::select! {
            done = handshake => match done {
                Ok(Ok(stream)) => Some(stream),
                Ok(Err(e)) => {
                    tracing::debug!(server = what, %peer, error = %e, "TLS handshake failed");
                    None
                }
                Err(_) => {
                    tracing::debug!(server = what, %peer, "TLS handshake timed out");
                    None
                }
            },
            () = async { let _ = stop.wait_for(|s| *s).await; } => None,
        }
    }

    /// Serves HTTP/1.1 on `io` until the client closes or the server stops.
    async fn serve<I>(self, io: I)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let Connection {
            handler,
            builder,
            mut stop,
            peer,
            what,
        } = self;
        let conn = builder.serve_connection(
            TokioIo::new(io),
            service_fn(move |req: Request<Incoming>| {
                let response = handler(req);
                async move { Ok::<_, Infallible>(response.await) }
            }),
        );
        let mut conn = std::pin::pin!(conn);
        let result = tokio::select! {
            r = conn.as_mut() => r,
            // The guard `wait_for` returns is not Send: drop it inside.
            () = async { let _ = stop.wait_for(|stopping| *stopping).await; } => {
                conn.as_mut().graceful_shutdown();
                conn.await
            }
        };
        if let Err(e) = result {
            tracing::debug!(server = what, %peer, error = %e, "connection ended with an error");
        }
    }
}

// === bind addresses ===

/// Reads a kubebuilder-style bind address flag: `""` or `"0"` disable the server (`None`);
/// `":8081"` listens on every IPv4 address; `"127.0.0.1:8080"`, `"[::1]:8080"` and
/// `"localhost:8080"` on that address.
///
/// # Errors
///
/// [`Error::InvalidBindAddress`] for anything else: a missing or bad port, or a host name
/// other than `localhost` (names are not resolved).
pub fn parse_bind_address(s: &str) -> Result<Option<SocketAddr>, Error> {
    let s = s.trim();
    if s.is_empty() || s == "0" {
        return Ok(None);
    }
    let bad = |reason: &str| Error::InvalidBindAddress {
        address: s.to_owned(),
        reason: reason.to_owned(),
    };
    if let Ok(addr) = s.parse::<SocketAddr>() {
        return Ok(Some(addr));
    }
    let (host, port) = s.rsplit_once(':').ok_or_else(|| bad("missing port"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| bad("the port must be a number from 0 to 65535"))?;
    let ip = match host {
        "" => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        "localhost" => IpAddr::V4(Ipv4Addr::LOCALHOST),
        h => h
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .map_err(|_| bad("the host must be an IP address, localhost or empty"))?,
    };
    Ok(Some(SocketAddr::new(ip, port)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::sync::atomic::{AtomicBool, Ordering};

    fn failing(reason: &'static str) -> Check {
        check(move || Err(reason.to_owned()))
    }

    #[test]
    fn all_passing_answers_ok() {
        let checks = Checks::new();
        checks.add("ping", ping()).unwrap();
        checks.add("cache", ping()).unwrap();
        assert_eq!(checks.respond("", None), (StatusCode::OK, "ok".into()));
        assert_eq!(checks.respond("/", None), (StatusCode::OK, "ok".into()));
    }

    #[test]
    fn verbose_lists_checks_sorted_and_passed() {
        let checks = Checks::new();
        checks.add("ping", ping()).unwrap();
        checks.add("cache", ping()).unwrap();
        assert_eq!(
            checks.respond("", Some("verbose")),
            (
                StatusCode::OK,
                "[+]cache ok\n[+]ping ok\nhealthz check passed\n".into()
            )
        );
        assert_eq!(
            checks.respond("", Some("verbose=1")).1,
            "[+]cache ok\n[+]ping ok\nhealthz check passed\n"
        );
    }

    #[test]
    fn a_failing_check_withholds_its_reason_and_fails_the_whole() {
        let checks = Checks::new();
        checks.add("ping", ping()).unwrap();
        checks.add("informers", failing("not synced")).unwrap();
        assert_eq!(
            checks.respond("", None),
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "[-]informers failed: reason withheld\n[+]ping ok\nhealthz check failed\n".into()
            )
        );
    }

    #[test]
    fn excluded_checks_are_skipped_and_unknown_ones_warned() {
        let checks = Checks::new();
        checks.add("ping", ping()).unwrap();
        checks.add("informers", failing("not synced")).unwrap();
        assert_eq!(
            checks.respond("", Some("exclude=informers")),
            (StatusCode::OK, "ok".into())
        );
        assert_eq!(
            checks.respond(
                "",
                Some("exclude=informers&verbose&exclude=nope&exclude=a%2Bb")
            ),
            (
                StatusCode::OK,
                "[+]informers excluded: ok\n[+]ping ok\n\
                 warn: some health checks cannot be excluded: no matches for \"a+b\",\"nope\"\n\
                 healthz check passed\n"
                    .into()
            )
        );
    }

    #[test]
    fn single_check_shows_its_error_and_unknown_is_404() {
        let checks = Checks::new();
        checks.add("ping", ping()).unwrap();
        checks.add("informers", failing("not synced")).unwrap();
        assert_eq!(checks.respond("/ping", None), (StatusCode::OK, "ok".into()));
        assert_eq!(
            checks.respond("/informers", None),
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal server error: not synced\n".into()
            )
        );
        assert_eq!(checks.respond("/nope", None).0, StatusCode::NOT_FOUND);
        assert_eq!(checks.respond("/ping/", None).0, StatusCode::OK);
    }

    #[test]
    fn an_empty_set_serves_an_implicit_ping() {
        let checks = Checks::new();
        assert_eq!(checks.respond("", None), (StatusCode::OK, "ok".into()));
        assert_eq!(
            checks.respond("", Some("verbose")).1,
            "[+]ping ok\nhealthz check passed\n"
        );
        assert_eq!(checks.respond("/ping", None), (StatusCode::OK, "ok".into()));
    }

    #[test]
    fn checks_added_later_are_served_through_clones() {
        let checks = Checks::new();
        let served = checks.clone();
        let ready = Arc::new(AtomicBool::new(false));
        let flag = ready.clone();
        checks
            .add(
                "leader",
                check(move || {
                    if flag.load(Ordering::Relaxed) {
                        Ok(())
                    } else {
                        Err("not yet".into())
                    }
                }),
            )
            .unwrap();
        assert_eq!(
            served.respond("", None).0,
            StatusCode::INTERNAL_SERVER_ERROR
        );
        ready.store(true, Ordering::Relaxed);
        assert_eq!(served.respond("", None).0, StatusCode::OK);
    }

    #[test]
    fn check_names_must_be_unique_path_segments() {
        let checks = Checks::new();
        checks.add("ping", ping()).unwrap();
        assert!(matches!(
            checks.add("ping", ping()),
            Err(Error::DuplicateCheck(n)) if n == "ping"
        ));
        assert!(matches!(
            checks.add("a/b", ping()),
            Err(Error::InvalidCheckName(_))
        ));
        assert!(matches!(
            checks.add("", ping()),
            Err(Error::InvalidCheckName(_))
        ));
        assert_eq!(checks.names(), vec!["ping".to_owned()]);
    }

    #[test]
    fn bind_addresses_follow_kubebuilder_flags() {
        assert_eq!(parse_bind_address("0").unwrap(), None);
        assert_eq!(parse_bind_address("").unwrap(), None);
        assert_eq!(
            parse_bind_address(":8081").unwrap(),
            Some("0.0.0.0:8081".parse().unwrap())
        );
        assert_eq!(
            parse_bind_address("127.0.0.1:8080").unwrap(),
            Some("127.0.0.1:8080".parse().unwrap())
        );
        assert_eq!(
            parse_bind_address("[::1]:8443").unwrap(),
            Some("[::1]:8443".parse().unwrap())
        );
        assert_eq!(
            parse_bind_address("localhost:9090").unwrap(),
            Some("127.0.0.1:9090".parse().unwrap())
        );
        for bad in ["8080", ":http", ":70000", "example.com:80", "1.2.3:80"] {
            assert!(
                matches!(
                    parse_bind_address(bad),
                    Err(Error::InvalidBindAddress { .. })
                ),
                "{bad}"
            );
        }
    }

    #[tokio::test]
    async fn without_certificate_files_the_metrics_server_makes_a_self_signed_one() {
        let options = SecureMetricsOptions {
            cert_dir: PathBuf::from("/nonexistent/k8s-metrics-server"),
            ..SecureMetricsOptions::default()
        };
        let tls = MetricsTls::load(&options).await.unwrap();
        assert!(tls.watcher.is_none());
        let provider = rustls::crypto::ring::default_provider();
        let pair = self_signed(&provider).unwrap();
        assert_eq!(pair.cert.len(), 1);
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
        assert!(loaded.watcher.is_some());
        let mismatched = SecureMetricsOptions {
            key_name: "self-signed-key.pem".into(),
            ..options
        };
        let error = MetricsTls::load(&mismatched).await.unwrap_err();
        assert!(matches!(error, Error::Certificate(_)), "{error}");
        assert!(error.to_string().contains("self-signed-key.pem"), "{error}");
    }

    #[test]
    fn paths_and_queries_are_cleaned_as_go_does() {
        assert_eq!(clean_path(""), "");
        assert_eq!(clean_path("/"), "");
        assert_eq!(clean_path("//ping/"), "ping");
        assert_eq!(clean_path("/a/../ping"), "ping");
        assert_eq!(
            parse_query("verbose&exclude=a%20b&x=1+2&bad=%zz"),
            vec![
                ("verbose".into(), "".into()),
                ("exclude".into(), "a b".into()),
                ("x".into(), "1 2".into()),
                ("bad".into(), "%zz".into()),
            ]
        );
        assert_eq!(decode_component("%41%4"), "A%4");
    }
}
