//! The client's request observer against a scripted server on loopback: one observation per
//! HTTP attempt, retries included, and `<error>` for a request that got no answer, as the
//! `rest_client_*` metrics count them.

mod support;

use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use controller_runtime::client::{Client, ClientOptions, RequestObserver};
use controller_runtime::config::Auth;
use controller_runtime::runtime::metrics::Metrics;
use http::Method;
use support::sample;
use support::scripted::{Scripted, http_client};

/// Answers each request, on any connection, with the next scripted response.
fn scripted(responses: Vec<&'static str>) -> SocketAddr {
    Scripted::start(
        responses
            .into_iter()
            .map(|r| r.as_bytes().to_vec())
            .collect(),
    )
    .addr
}

fn client(addr: SocketAddr, observer: Arc<dyn RequestObserver>) -> Client {
    let options = ClientOptions {
        observer: Some(observer),
        http2: false,
        ..ClientOptions::default()
    };
    http_client(addr, Auth::None, options)
}

/// Every observation, in order.
#[derive(Debug, Default)]
struct Recorder(Mutex<Vec<(Method, String, Option<u16>)>>);

impl RequestObserver for Recorder {
    fn observe(&self, method: &Method, host: &str, code: Option<u16>, _latency: Duration) {
        self.0
            .lock()
            .unwrap()
            .push((method.clone(), host.to_owned(), code));
    }
}

#[tokio::test]
async fn every_attempt_is_observed_retries_included() {
    let addr = scripted(vec![
        "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 0\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
    ]);
    let recorder = Arc::new(Recorder::default());
    let client = client(addr, recorder.clone());
    let body = client.get_raw("/version").await.unwrap();
    assert_eq!(&body[..], b"{}");
    let host = addr.to_string();
    assert_eq!(
        *recorder.0.lock().unwrap(),
        vec![
            (Method::GET, host.clone(), Some(429)),
            (Method::GET, host, Some(200)),
        ]
    );
}

#[tokio::test]
async fn rest_client_metrics_count_codes_and_transport_errors() {
    let addr = scripted(vec![
        "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
    ]);
    let metrics = Metrics::new();
    let client = client(addr, metrics.request_observer());
    assert!(client.get_raw("/api/v1/nothing").await.is_err());

    // A port nothing listens on: bind one, then close it.
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let refused = self::client(closed, metrics.request_observer());
    assert!(refused.get_raw("/version").await.is_err());

    let text = metrics.encode();
    let line = |series: String| sample(&text, &series);
    assert_eq!(
        line(format!(
            r#"rest_client_requests_total{{code="404",method="GET",host="{addr}"}}"#
        )),
        Some("1"),
        "{text}"
    );
    assert_eq!(
        line(format!(
            r#"rest_client_requests_total{{code="<error>",method="GET",host="{closed}"}}"#
        )),
        Some("1"),
        "{text}"
    );
    assert_eq!(
        line(format!(
            r#"rest_client_request_duration_seconds_count{{verb="GET",host="{addr}"}}"#
        )),
        Some("1"),
        "{text}"
    );
}
