//! Health checks and the `/healthz` and `/readyz` server, in controller-runtime's format.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::future::Future;
use std::sync::Arc;

use http::{Request, StatusCode};
use hyper::body::Incoming;
use parking_lot::RwLock;
use tokio::net::TcpListener;

use super::{Error, text_response};
use crate::runtime::serve::{NOT_FOUND, serve};

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
    serve(listener, None, handler, shutdown, "probes").await;
    Ok(())
}

/// What follows `prefix` in `path` when `path` is the endpoint or below it.
fn endpoint<'p>(path: &'p str, prefix: &str) -> Option<&'p str> {
    let rest = path.strip_prefix(prefix)?;
    (rest.is_empty() || rest.starts_with('/')).then_some(rest)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

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
