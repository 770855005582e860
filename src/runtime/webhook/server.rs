//! The webhook server: admission handlers by path, served over HTTPS.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{ALLOW, CONTENT_TYPE, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::net::TcpListener;

use super::{
    AdmissionRequest, AdmissionResponse, Error, Handler, Operation, Result, defaulter, review,
    validator,
};
use crate::runtime::certwatcher::CertWatcher;
use crate::runtime::serve::{self, Certificate, NOT_FOUND, Tls};

/// How a [`WebhookServer`] listens. The defaults are controller-runtime's.
#[derive(Clone, Debug)]
pub struct WebhookOptions {
    /// Where to listen. Default `0.0.0.0:9443`.
    pub bind_address: SocketAddr,
    /// The directory holding the serving certificate and key. Default
    /// `<temp dir>/k8s-webhook-server/serving-certs`, where controller-runtime looks and
    /// where kubebuilder's manifests mount the cert-manager Secret.
    pub cert_dir: PathBuf,
    /// The certificate file in `cert_dir`, PEM, leaf first. Default `tls.crt`.
    pub cert_name: String,
    /// The private key file in `cert_dir`, PEM (PKCS#8, PKCS#1 or SEC1). Default `tls.key`.
    pub key_name: String,
    /// Offer HTTP/2 as well as HTTP/1.1. Default false, as kubebuilder's scaffold, since
    /// HTTP/2's rapid-reset and stream floods (CVE-2023-44487) cost a webhook more than
    /// multiplexing saves it.
    pub enable_http2: bool,
}

impl Default for WebhookOptions {
    fn default() -> Self {
        WebhookOptions {
            bind_address: SocketAddr::from((Ipv4Addr::UNSPECIFIED, 9443)),
            cert_dir: std::env::temp_dir().join("k8s-webhook-server/serving-certs"),
            cert_name: "tls.crt".to_owned(),
            key_name: "tls.key".to_owned(),
            enable_http2: false,
        }
    }
}

/// An admission webhook server: handlers registered by path, served over TLS; see the
/// [module docs](super).
///
/// Register handlers with [`defaulting`](Self::defaulting),
/// [`validating`](Self::validating) and [`handle`](Self::handle) (and a CRD conversion
/// webhook with [`conversion`](Self::conversion)), then either
/// [`run`](Self::run) it, or [`bind`](Self::bind) it first (which loads the certificate and
/// binds the port, so setup errors surface before serving) and
/// [`serve`](BoundWebhookServer::serve) the result.
pub struct WebhookServer {
    options: WebhookOptions,
    routes: Routes,
    /// The first registration error, reported by `bind`.
    invalid: Option<Error>,
}

impl fmt::Debug for WebhookServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut paths: Vec<&String> = self.routes.keys().collect();
        paths.sort();
        f.debug_struct("WebhookServer")
            .field("options", &self.options)
            .field("paths", &paths)
            .finish_non_exhaustive()
    }
}

impl WebhookServer {
    /// A server with no handlers yet.
    pub fn new(options: WebhookOptions) -> Self {
        WebhookServer {
            options,
            routes: Routes::new(),
            invalid: None,
        }
    }

    /// Serves a defaulting (mutating) webhook for kind `K` on `path`: `default` is given the
    /// object being created or updated and sets what is unset; the API server applies the
    /// JSON Patch between the two. `DELETE` and `CONNECT` are allowed unchanged.
    ///
    /// `K` is decoded from the request and encoded back; operations that decoding and
    /// encoding alone produce (a field `K` does not model, a number spelled differently) are
    /// left out of the patch, so they never remove or rewrite what the function did not
    /// touch. A request for another kind is refused with HTTP 400 in its status.
    pub fn defaulting<K>(self, path: &str, default: impl Fn(&mut K) + Send + Sync + 'static) -> Self
    where
        K: k8s_openapi::Resource + DeserializeOwned + Serialize,
    {
        self.handle_with(path, defaulter::<K>(default))
    }

    /// Serves a validating webhook for kind `K` on `path`. `validate` is given, for a
    /// `CREATE`, the new object and `None`; for an `UPDATE`, the new object and the old;
    /// for a `DELETE`, the object being deleted and `None`. It returns `Ok(warnings)` to
    /// allow (the warnings reach the client, which shows them) or `Err(message)` to refuse
    /// with HTTP 403 `Forbidden` and that message. `CONNECT` is refused.
    pub fn validating<K>(
        self,
        path: &str,
        validate: impl Fn(&K, Option<&K>, Operation) -> Result<Vec<String>, String>
        + Send
        + Sync
        + 'static,
    ) -> Self
    where
        K: k8s_openapi::Resource + DeserializeOwned,
    {
        self.handle_with(path, validator::<K>(validate))
    }

    /// Serves `handler` on `path`: any function from the request to the response.
    pub fn handle(
        self,
        path: &str,
        handler: impl Fn(&AdmissionRequest) -> AdmissionResponse + Send + Sync + 'static,
    ) -> Self {
        self.handle_with(path, Arc::new(handler))
    }

    /// Serves `conversion`, the CRD conversion webhook, on
    /// [`CONVERT_PATH`](crate::runtime::conversion::CONVERT_PATH) (`/convert`): see
    /// [`runtime::conversion`](crate::runtime::conversion). One [`Conversion`] holds every
    /// kind the server converts; a second call is an [`Error::DuplicatePath`].
    ///
    /// [`Conversion`]: crate::runtime::conversion::Conversion
    pub fn conversion(self, conversion: crate::runtime::conversion::Conversion) -> Self {
        self.route(
            crate::runtime::conversion::CONVERT_PATH,
            conversion.endpoint(),
        )
    }

    fn handle_with(self, path: &str, handler: Handler) -> Self {
        let endpoint: Endpoint =
            Arc::new(move |content_type: &str, body: &[u8]| review(&handler, content_type, body));
        self.route(path, endpoint)
    }

    fn route(mut self, path: &str, endpoint: Endpoint) -> Self {
        if self.invalid.is_some() {
            return self;
        }
        if !path.starts_with('/') {
            self.invalid = Some(Error::InvalidPath(path.to_owned()));
        } else if self.routes.insert(path.to_owned(), endpoint).is_some() {
            self.invalid = Some(Error::DuplicatePath(path.to_owned()));
        }
        self
    }

    /// The options this server was made with.
    pub fn options(&self) -> &WebhookOptions {
        &self.options
    }

    /// The registered paths, sorted.
    pub fn paths(&self) -> Vec<String> {
        let mut paths: Vec<String> = self.routes.keys().cloned().collect();
        paths.sort();
        paths
    }

    /// Loads the certificate and binds the listening socket, ready to
    /// [`serve`](BoundWebhookServer::serve).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidPath`] or [`Error::DuplicatePath`] for a bad registration;
    /// [`Error::ReadFile`], [`Error::Pem`], [`Error::Missing`] or [`Error::KeyPair`] (each
    /// naming the file) if the certificate and key do not load; [`Error::Bind`] if the
    /// address is taken.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: nothing is kept if the future is dropped.
    pub async fn bind(self) -> Result<BoundWebhookServer> {
        if let Some(e) = self.invalid {
            return Err(e);
        }
        let options = self.options;
        let certs = CertWatcher::new(
            options.cert_dir.join(&options.cert_name),
            options.cert_dir.join(&options.key_name),
        )
        .await?;
        let tls = Tls::new(Certificate::Watched(Arc::new(certs)), options.enable_http2)
            .map_err(Error::Tls)?;
        let listener = TcpListener::bind(options.bind_address)
            .await
            .map_err(|source| Error::Bind {
                addr: options.bind_address,
                source,
            })?;
        let local_addr = listener.local_addr().unwrap_or(options.bind_address);
        Ok(BoundWebhookServer {
            listener,
            local_addr,
            tls,
            routes: self.routes,
        })
    }

    /// [`bind`](Self::bind)s, then [`serve`](BoundWebhookServer::serve)s until `shutdown`
    /// completes.
    ///
    /// # Errors
    ///
    /// As [`bind`](Self::bind); serving itself does not fail.
    ///
    /// # Cancel safety
    ///
    /// As [`BoundWebhookServer::serve`].
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<()> {
        self.bind().await?.serve(shutdown).await;
        Ok(())
    }
}

/// A [`WebhookServer`] with its certificate loaded and its socket bound.
pub struct BoundWebhookServer {
    listener: TcpListener,
    local_addr: SocketAddr,
    tls: Tls,
    routes: Routes,
}

impl fmt::Debug for BoundWebhookServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BoundWebhookServer")
            .field("local_addr", &self.local_addr)
            .field("certs", &self.tls.watcher)
            .finish_non_exhaustive()
    }
}

impl BoundWebhookServer {
    /// The address the server listens on (useful after binding port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Serves until `shutdown` completes: one task per connection, the certificate files
    /// checked for changes before each handshake. Then it stops accepting, lets requests in
    /// flight finish (for up to 5 s) and returns.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops accepting and drops every connection at once; completing
    /// `shutdown` instead lets requests in flight finish.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) {
        let mut paths: Vec<&String> = self.routes.keys().collect();
        paths.sort_unstable();
        tracing::info!(addr = %self.local_addr, ?paths, "serving webhooks");
        let routes = Arc::new(self.routes);
        let handler = move |request: Request<Incoming>| respond(routes.clone(), request);
        serve::serve(self.listener, Some(self.tls), handler, shutdown, "webhook").await;
    }
}

/// The largest request body read (controller-runtime's limit): a review carries the object
/// twice, and etcd takes objects up to about 1.5 MiB.
const MAX_BODY: usize = 7 * 1024 * 1024;

/// What answers a POST on one path: from the request's content type and body to the
/// response's status and body (a review, or a text error).
pub(crate) type Endpoint = Arc<dyn Fn(&str, &[u8]) -> (StatusCode, Bytes) + Send + Sync>;

type Routes = HashMap<String, Endpoint>;

/// The answer to one HTTP request.
async fn respond(routes: Arc<Routes>, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let text = |status, body: String| serve::response(status, body, "text/plain; charset=utf-8");
    let Some(endpoint) = routes.get(request.uri().path()).cloned() else {
        return text(StatusCode::NOT_FOUND, NOT_FOUND.to_owned());
    };
    if request.method() != Method::POST {
        let mut response = text(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("method {} not allowed: use POST\n", request.method()),
        );
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("POST"));
        return response;
    }
    let content_type = request
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let body = match Limited::new(request.into_body(), MAX_BODY).collect().await {
        Ok(body) => body.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            return text(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the request body is larger than {MAX_BODY} bytes\n"),
            );
        }
        Err(e) => {
            return text(
                StatusCode::BAD_REQUEST,
                format!("reading the request body: {e}\n"),
            );
        }
    };
    let (status, body) = endpoint(&content_type, &body);
    let content_type = if status == StatusCode::OK {
        "application/json"
    } else {
        "text/plain; charset=utf-8"
    };
    serve::response(status, body, content_type)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;

    #[test]
    fn registering_a_path_twice_or_without_a_slash_fails_at_bind() {
        let server = WebhookServer::new(WebhookOptions::default())
            .defaulting::<ConfigMap>("/a", |_| {})
            .validating::<ConfigMap>("/a", |_, _, _| Ok(vec![]));
        assert!(matches!(server.invalid, Some(Error::DuplicatePath(ref p)) if p == "/a"));
        let server = WebhookServer::new(WebhookOptions::default())
            .handle("a", |_| AdmissionResponse::allow());
        assert!(matches!(server.invalid, Some(Error::InvalidPath(ref p)) if p == "a"));
    }

    #[test]
    fn servers_can_be_handed_to_another_task() {
        fn send<T: Send + 'static>() {}
        send::<WebhookServer>();
        send::<BoundWebhookServer>();
        send::<Error>();
    }
}
