//! The probe and metrics servers on loopback, asked with raw HTTP/1.1: each response
//! format byte for byte, 404s, content negotiation, and a graceful stop.

use std::net::SocketAddr;
use std::time::Duration;

use controller_runtime::runtime::metrics::{Metrics, ReconcileResult};
use controller_runtime::runtime::server::{Checks, check, ping, serve_metrics, serve_probes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A response: status code, lower-cased headers, body.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Sends one `GET` with `Connection: close` and reads the whole answer.
async fn get(addr: SocketAddr, target: &str, extra: &str) -> Answer {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request =
        format!("GET {target} HTTP/1.1\r\nHost: probe\r\n{extra}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    let raw = String::from_utf8(raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .map(|l| {
            let (n, v) = l.split_once(':').unwrap();
            (n.to_ascii_lowercase(), v.trim().to_owned())
        })
        .collect();
    Answer {
        status,
        headers,
        body: body.to_owned(),
    }
}

struct Running {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<std::io::Result<()>>,
}

impl Running {
    async fn stop(mut self) {
        self.stop.take().unwrap().send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("the server stops")
            .unwrap()
            .unwrap();
    }
}

async fn probes(healthz: Checks, readyz: Checks) -> Running {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = oneshot::channel();
    let task = tokio::spawn(serve_probes(listener, healthz, readyz, async {
        let _ = rx.await;
    }));
    Running {
        addr,
        stop: Some(tx),
        task,
    }
}

async fn metrics_server(metrics: Metrics) -> Running {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = oneshot::channel();
    let task = tokio::spawn(serve_metrics(listener, metrics, async {
        let _ = rx.await;
    }));
    Running {
        addr,
        stop: Some(tx),
        task,
    }
}

fn healthy_and_failing() -> (Checks, Checks) {
    let healthz = Checks::new();
    healthz.add("ping", ping()).unwrap();
    let readyz = Checks::new();
    readyz.add("ping", ping()).unwrap();
    readyz
        .add("informers", check(|| Err("memcached not synced".into())))
        .unwrap();
    (healthz, readyz)
}

#[tokio::test]
async fn healthz_answers_ok_as_plain_text() {
    let (healthz, readyz) = healthy_and_failing();
    let server = probes(healthz, readyz).await;
    let a = get(server.addr, "/healthz", "").await;
    assert_eq!(a.status, 200);
    assert_eq!(a.body, "ok");
    assert_eq!(a.header("content-type"), Some("text/plain; charset=utf-8"));
    assert_eq!(a.header("x-content-type-options"), Some("nosniff"));

    let a = get(server.addr, "/healthz?verbose", "").await;
    assert_eq!(
        (a.status, a.body.as_str()),
        (200, "[+]ping ok\nhealthz check passed\n")
    );
    server.stop().await;
}

#[tokio::test]
async fn readyz_failure_lists_every_check_and_withholds_reasons() {
    let (healthz, readyz) = healthy_and_failing();
    let server = probes(healthz, readyz).await;
    let a = get(server.addr, "/readyz", "").await;
    assert_eq!(a.status, 500);
    assert_eq!(
        a.body,
        "[-]informers failed: reason withheld\n[+]ping ok\nhealthz check failed\n"
    );

    let a = get(server.addr, "/readyz?exclude=informers", "").await;
    assert_eq!((a.status, a.body.as_str()), (200, "ok"));

    let a = get(server.addr, "/readyz?exclude=informers&verbose", "").await;
    assert_eq!(
        (a.status, a.body.as_str()),
        (
            200,
            "[+]informers excluded: ok\n[+]ping ok\nhealthz check passed\n"
        )
    );
    server.stop().await;
}

#[tokio::test]
async fn single_checks_and_unknown_paths() {
    let (healthz, readyz) = healthy_and_failing();
    let server = probes(healthz, readyz).await;
    let a = get(server.addr, "/readyz/ping", "").await;
    assert_eq!((a.status, a.body.as_str()), (200, "ok"));
    let a = get(server.addr, "/readyz/informers", "").await;
    assert_eq!(
        (a.status, a.body.as_str()),
        (500, "internal server error: memcached not synced\n")
    );
    for path in [
        "/readyz/nope",
        "/healthz/informers",
        "/",
        "/metrics",
        "/healthzz",
    ] {
        let a = get(server.addr, path, "").await;
        assert_eq!(a.status, 404, "{path}");
        assert_eq!(a.body, "404 page not found\n", "{path}");
    }
    server.stop().await;
}

#[tokio::test]
async fn metrics_are_served_in_prometheus_text_or_openmetrics_on_request() {
    let metrics = Metrics::new();
    metrics
        .controller("memcached", 1)
        .reconciled(ReconcileResult::Success, Duration::from_millis(5));
    let server = metrics_server(metrics).await;

    let a = get(server.addr, "/metrics", "").await;
    assert_eq!(a.status, 200);
    assert_eq!(
        a.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    assert!(
        a.body.contains(
            r#"controller_runtime_reconcile_total{controller="memcached",result="success"} 1"#
        ),
        "{}",
        a.body
    );
    assert!(!a.body.contains("# EOF"));

    let a = get(
        server.addr,
        "/metrics",
        "Accept: application/openmetrics-text;version=1.0.0,text/plain;q=0.5\r\n",
    )
    .await;
    assert_eq!(a.status, 200);
    assert_eq!(
        a.header("content-type"),
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
    );
    assert!(a.body.ends_with("# EOF\n"));

    let a = get(server.addr, "/healthz", "").await;
    assert_eq!(a.status, 404);
    server.stop().await;
}

#[tokio::test]
async fn shutdown_closes_idle_connections_and_stops_accepting() {
    let server = probes(Checks::new(), Checks::new()).await;
    let addr = server.addr;
    // A keep-alive connection that has been answered once and then sits idle.
    let mut idle = TcpStream::connect(addr).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: probe\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 1024];
    let n = idle.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).ends_with("\r\n\r\nok"));

    server.stop().await;
    // The server closed the idle connection...
    let n = tokio::time::timeout(Duration::from_secs(5), idle.read(&mut buf))
        .await
        .expect("the idle connection is closed")
        .unwrap_or(0);
    assert_eq!(n, 0);
    // ...and no longer listens.
    assert!(TcpStream::connect(addr).await.is_err());
}
