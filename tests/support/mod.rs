//! Helpers shared by the integration tests: finding the cluster, running kubectl against it,
//! throwaway namespaces, bounded waits, and reading a metrics scrape.
//!
//! A cluster test that finds no cluster fails with instructions; it never passes silently.

#![allow(dead_code)] // each test binary uses its own subset

pub mod certs;
pub mod client_suite;
pub mod cluster;
pub mod example;
pub mod fault_proxy;
pub mod scripted;
pub mod versions;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// How long a cluster test waits for the cluster to converge before it fails. Generous: it
/// bounds a hang, it does not measure speed.
pub const CONVERGE: Duration = Duration::from_secs(180);

/// kubectl pointed at the test cluster.
#[derive(Clone)]
pub struct Kubectl {
    bin: PathBuf,
    kubeconfig: PathBuf,
}

impl Kubectl {
    /// Finds the cluster through `TESTENV_KUBECONFIG` (set by the Makefile) or
    /// `target/testenv/kubeconfig`, and kubectl through `TESTENV_KUBECTL`, the kubectl built
    /// with the cluster, or `kubectl` on `PATH`. Panics when there is no cluster.
    pub fn from_env() -> Self {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let kubeconfig = cluster::kubeconfig();
        let built = root.join("target/testenv/bin/kubectl");
        let bin = std::env::var_os("TESTENV_KUBECTL")
            .map(PathBuf::from)
            .or_else(|| built.is_file().then_some(built))
            .unwrap_or_else(|| PathBuf::from("kubectl"));
        Kubectl { bin, kubeconfig }
    }

    /// Runs kubectl with `args` (and `stdin`, if any); returns stdout, or an error holding
    /// the command and its stderr.
    pub fn try_run(&self, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
        let mut cmd = Command::new(&self.bin);
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("running {}: {e}", self.bin.display()))?;
        if let Some(input) = stdin {
            child
                .stdin
                .take()
                .expect("stdin is piped")
                .write_all(input.as_bytes())
                .map_err(|e| format!("writing kubectl's stdin: {e}"))?;
        }
        let out = child
            .wait_with_output()
            .map_err(|e| format!("waiting for kubectl: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "kubectl {} failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    /// Runs kubectl and panics if it fails.
    pub fn run(&self, args: &[&str]) -> String {
        self.try_run(args, None).unwrap_or_else(|e| panic!("{e}"))
    }

    /// `kubectl apply -f -` with `manifest` on stdin.
    pub fn apply(&self, manifest: &str) -> String {
        self.try_run(&["apply", "-f", "-"], Some(manifest))
            .unwrap_or_else(|e| panic!("{e}\nmanifest:\n{manifest}"))
    }

    /// Runs kubectl with `-o json` appended and parses the output.
    pub fn try_json(&self, args: &[&str]) -> Result<serde_json::Value, String> {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        let out = self.try_run(&all, None)?;
        serde_json::from_str(&out)
            .map_err(|e| format!("kubectl {} gave bad JSON: {e}", all.join(" ")))
    }

    /// Like [`Kubectl::try_json`], panicking on failure.
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        self.try_json(args).unwrap_or_else(|e| panic!("{e}"))
    }

    /// `path` (a kubectl JSONPath) of object `what` in namespace `ns`; empty when kubectl
    /// fails (e.g. the object does not exist yet), for polling.
    pub fn jsonpath(&self, ns: &str, what: &str, path: &str) -> String {
        self.try_run(
            &["-n", ns, "get", what, "-o", &format!("jsonpath={path}")],
            None,
        )
        .unwrap_or_default()
    }
}

/// Asks the OS for a free loopback port (bound, then released for a process to take).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A name no other test or earlier run uses: `prefix-<pid>-<n>`.
pub fn unique(prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Polls `check` every 250 ms until it returns `Ok`, and returns that value. Panics with the
/// last observation if `limit` passes first: the cluster did not converge.
pub fn eventually<T>(
    what: &str,
    limit: Duration,
    mut check: impl FnMut() -> Result<T, String>,
) -> T {
    let begin = Instant::now();
    loop {
        match check() {
            Ok(v) => return v,
            Err(last) if begin.elapsed() > limit => {
                panic!("{what}: not reached within {limit:?}; last seen: {last}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(250)),
        }
    }
}

/// A namespace for one test, deleted (through kubectl, without waiting) when dropped.
///
/// kubectl, not the client, deletes it: a client's connection runs on the test's runtime,
/// which may be busy dropping this.
pub struct Namespace {
    kubectl: Kubectl,
    /// The namespace's name.
    pub name: String,
}

impl Namespace {
    /// Creates a namespace named `prefix-<pid>-<n>`.
    pub fn create(kubectl: &Kubectl, prefix: &str) -> Self {
        let name = unique(prefix);
        kubectl.run(&["create", "namespace", &name]);
        Namespace::guard(kubectl, name)
    }

    /// Takes charge of `name`, an existing namespace, to delete it when dropped.
    pub fn guard(kubectl: &Kubectl, name: String) -> Self {
        Namespace {
            kubectl: kubectl.clone(),
            name,
        }
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = self.kubectl.try_run(
            &[
                "delete",
                "namespace",
                &self.name,
                "--wait=false",
                "--ignore-not-found",
            ],
            None,
        );
    }
}

/// Evaluates `$check` (an expression that may `.await`) every 250 ms until it is `Some`, and
/// yields that value. Panics if [`CONVERGE`] passes first: the cluster never got there.
///
/// A macro rather than a function over an async closure: such a closure's future, borrowing
/// the test's locals, is not provably `Send`, which spawned test runs need.
#[allow(unused_macros)] // each test binary uses its own subset
macro_rules! converge {
    ($what:expr, $check:expr) => {{
        let begin = tokio::time::Instant::now();
        loop {
            if let Some(v) = $check {
                break v;
            }
            assert!(
                begin.elapsed() < $crate::support::CONVERGE,
                "{}: not within {:?}",
                $what,
                $crate::support::CONVERGE
            );
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        }
    }};
}
#[allow(unused_imports)] // each test binary uses its own subset
pub(crate) use converge;

/// The value of the series `series` (its full name and labels, exactly as exposed) in a
/// Prometheus text scrape.
pub fn sample<'s>(scrape: &'s str, series: &str) -> Option<&'s str> {
    scrape
        .lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
}

/// Polls `check` every 100 ms until it returns `Ok`, without blocking the runtime, and
/// returns that value. Panics with the last observation if `limit` passes first.
pub async fn wait_until<T>(
    what: &str,
    limit: Duration,
    mut check: impl AsyncFnMut() -> Result<T, String>,
) -> T {
    let begin = Instant::now();
    loop {
        match check().await {
            Ok(v) => return v,
            Err(last) if begin.elapsed() > limit => {
                panic!("{what}: not reached within {limit:?}; last seen: {last}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Waits until the plain-HTTP probe server on `addr` answers `/readyz` with 200.
pub async fn wait_ready(addr: std::net::SocketAddr) {
    wait_until("ready (/readyz)", CONVERGE, async || {
        let (code, body) = match tokio::net::TcpStream::connect(addr).await {
            Ok(_) => http_get(addr, "/readyz").await,
            Err(e) => (0, e.to_string()),
        };
        (code == 200).then_some(()).ok_or(format!("{code} {body}"))
    })
    .await
}

/// GETs `path` from a plain-HTTP server on `addr` and returns the status code and body.
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_owned()
    };
    (code, body)
}

/// Joins the chunks of a chunked HTTP/1.1 body.
fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
}

/// Runs `manager` on a task until the returned sender fires (or is dropped); the task
/// returns what `run_until` returned.
pub fn run_manager(
    manager: &controller_runtime::runtime::Manager,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<(), controller_runtime::runtime::ManagerError>>,
) {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let manager = manager.clone();
    let task = tokio::spawn(async move {
        manager
            .run_until(async move {
                let _ = stopped.await;
            })
            .await
    });
    (stop, task)
}
