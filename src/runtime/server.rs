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
//!   text format (OpenMetrics when the scraper asks for it).
//!
//! Both run one task per connection and stop gracefully when their `shutdown` future
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
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_TYPE, HeaderValue, X_CONTENT_TYPE_OPTIONS};
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use parking_lot::RwLock;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::metrics::{self, Metrics};

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
    let handler = move |req: &Request<Incoming>| {
        let path = req.uri().path();
        let query = req.uri().query();
        let (status, body) = if let Some(rest) = endpoint(path, "/healthz") {
            healthz.respond(rest, query)
        } else if let Some(rest) = endpoint(path, "/readyz") {
            readyz.respond(rest, query)
        } else {
            (StatusCode::NOT_FOUND, NOT_FOUND.to_owned())
        };
        text_response(status, body, "text/plain; charset=utf-8")
    };
    serve(listener, handler, shutdown, "probes").await
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
    let handler = move |req: &Request<Incoming>| {
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
    };
    serve(listener, handler, shutdown, "metrics").await
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

/// The accept loop: one task per connection, HTTP/1.1, until `shutdown`; then stop
/// accepting, ask each connection to finish its request in flight and close, and wait for
/// them (up to [`DRAIN_LIMIT`]).
async fn serve<H>(
    listener: TcpListener,
    handler: H,
    shutdown: impl Future<Output = ()>,
    what: &'static str,
) -> std::io::Result<()>
where
    H: Fn(&Request<Incoming>) -> Response<Full<Bytes>> + Send + Sync + 'static,
{
    let handler = Arc::new(handler);
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut builder = http1::Builder::new();
    builder.timer(TokioTimer::new());
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(server = what, %addr, "serving");
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
                let handler = handler.clone();
                let mut stop = stop_rx.clone();
                let conn = builder.serve_connection(
                    TokioIo::new(stream),
                    service_fn(move |req: Request<Incoming>| {
                        let response = handler(&req);
                        async move { Ok::<_, Infallible>(response) }
                    }),
                );
                connections.spawn(async move {
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
