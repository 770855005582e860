//! The one accept loop behind every server here: TLS, HTTP/1.1 or HTTP/2, graceful stop.
//!
//! The probe, metrics and webhook servers all run [`serve`]: one task per connection, a TLS
//! handshake first when the server has a certificate (its files checked for changes before
//! each handshake, see `certwatcher`), then HTTP/2 if ALPN agreed on it (offered only when
//! the server enables it) or else HTTP/1.1, until `shutdown`, then a drain of up to 5 s.

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

use super::certwatcher::CertWatcher;

/// How long a graceful stop waits for requests in flight.
const DRAIN_LIMIT: Duration = Duration::from_secs(5);

/// How long a client has to finish the TLS handshake.
const HANDSHAKE_LIMIT: Duration = Duration::from_secs(10);

/// Go's `http.NotFound` body.
pub(crate) const NOT_FOUND: &str = "404 page not found\n";

/// A response of `status` with `body` as `content_type`.
pub(crate) fn response(
    status: StatusCode,
    body: impl Into<Bytes>,
    content_type: &'static str,
) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    let content_type = HeaderValue::from_static(content_type);
    response.headers_mut().insert(CONTENT_TYPE, content_type);
    response
}

/// Where a [`Tls`] gets its certificate.
pub(crate) enum Certificate {
    /// The pair of files a watcher follows, checked for changes before each handshake.
    Watched(Arc<CertWatcher>),
    /// One pair for the server's life: a chain, leaf first, and its key.
    Fixed(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>),
}

/// A server's TLS: the acceptor, and the watcher to refresh before each handshake.
#[derive(Clone)]
pub(crate) struct Tls {
    acceptor: TlsAcceptor,
    /// `None` for a fixed certificate.
    pub(crate) watcher: Option<Arc<CertWatcher>>,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let watcher = &self.watcher;
        f.debug_struct("Tls")
            .field("watcher", watcher)
            .finish_non_exhaustive()
    }
}

impl Tls {
    /// TLS 1.2 and 1.3 without client certificates, serving `certificate`; ALPN offers
    /// HTTP/2 only when `http2` is set, else HTTP/1.1 alone.
    pub(crate) fn new(certificate: Certificate, http2: bool) -> Result<Tls, rustls::Error> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth();
        let (mut config, watcher) = match certificate {
            Certificate::Watched(w) => (builder.with_cert_resolver(w.clone()), Some(w)),
            Certificate::Fixed(chain, key) => (builder.with_single_cert(chain, key)?, None),
        };
        config.alpn_protocols = if http2 {
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        } else {
            vec![b"http/1.1".to_vec()]
        };
        let acceptor = TlsAcceptor::from(Arc::new(config));
        Ok(Tls { acceptor, watcher })
    }
}

/// Serves `handler` on `listener`, over `tls` if given, until `shutdown` completes; then
/// stops accepting, asks each connection to finish its request in flight and close, and
/// waits for them (up to [`DRAIN_LIMIT`]). `what` names the server in logs. A failed
/// `accept` (say, out of file descriptors) is logged and retried.
pub(crate) async fn serve<H, F>(
    listener: TcpListener,
    tls: Option<Tls>,
    handler: H,
    shutdown: impl Future<Output = ()>,
    what: &'static str,
) where
    H: Fn(Request<Incoming>) -> F + Send + Sync + 'static,
    F: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    let handler = Arc::new(handler);
    // Connections stop when the sender is dropped.
    let (stop_tx, stop_rx) = watch::channel(());
    let mut connections = JoinSet::new();
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(server = what, %addr, secure = tls.is_some(), "serving");
    }
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let (tls, handler, stop) = (tls.clone(), handler.clone(), stop_rx.clone());
                    connections.spawn(connection(stream, peer, tls, handler, stop, what));
                }
                Err(e) => {
                    tracing::warn!(server = what, error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            // Reap finished connections so the set does not grow.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    drop(stop_tx);
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
}

/// A connection's byte stream, plain or TLS.
trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// One accepted connection: its TLS handshake (the certificate files checked for changes
/// first) when `tls` is given, then HTTP until the client closes or the server stops.
async fn connection<H, F>(
    stream: TcpStream,
    peer: SocketAddr,
    tls: Option<Tls>,
    handler: Arc<H>,
    mut stop: watch::Receiver<()>,
    what: &'static str,
) where
    H: Fn(Request<Incoming>) -> F + Send + Sync + 'static,
    F: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    let (io, h2): (Box<dyn Io>, bool) = match tls {
        None => (Box::new(stream), false),
        Some(tls) => {
            if let Some(watcher) = &tls.watcher {
                watcher.refresh().await;
            }
            let handshake = tokio::time::timeout(HANDSHAKE_LIMIT, tls.acceptor.accept(stream));
            let stream = tokio::select! {
                done = handshake => match done {
                    Ok(Ok(stream)) => stream,
                    Ok(Err(e)) => {
                        tracing::debug!(server = what, %peer, error = %e, "TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(server = what, %peer, "TLS handshake timed out");
                        return;
                    }
                },
                _ = stop.changed() => return,
            };
            let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
            (Box::new(stream), h2)
        }
    };
    let service = service_fn(move |request: Request<Incoming>| {
        let response = handler(request);
        async move { Ok::<_, Infallible>(response.await) }
    });
    let io = TokioIo::new(io);
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
        tracing::debug!(server = what, %peer, error = %e, "connection ended with an error");
    }
}

/// Runs a connection until it ends; once the server stops, asks it to finish the request in
/// flight and close.
async fn drive<C>(
    conn: C,
    graceful: impl FnOnce(Pin<&mut C>),
    mut stop: watch::Receiver<()>,
) -> Result<(), hyper::Error>
where
    C: Future<Output = Result<(), hyper::Error>>,
{
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => r,
        _ = stop.changed() => {
            graceful(conn.as_mut());
            conn.await
        }
    }
}
