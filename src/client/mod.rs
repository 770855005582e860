//! The Kubernetes API client: HTTP/1.1 and HTTP/2 over rustls, typed and dynamic APIs, and
//! watches decoded as they arrive.
//!
//! ```text
//!  Config ──▶ Client ─┬─▶ Api<K>  (typed: k8s-openapi kinds and custom resources)
//!                     ├─▶ Api<DynamicObject>  (any kind, resolved through discovery)
//!                     └─▶ raw requests (get_raw, request)
//!
//!  every request: token bucket (QPS, burst) ─▶ credentials ─▶ hyper (pooled; h2 by ALPN)
//!                 ◀── 429/503 + Retry-After: wait and resend; 401: refresh credentials once
//!                 ◀── error body ─▶ Error::Api(Status)
//!  lists and watches: the codec picks the format to ask for and decodes what arrives
//! ```
//!
//! This module is the HTTP side; the wire codec (frame cutting, the JSON scanner, [`Raw`],
//! protobuf and its transcoder into JSON) sits behind one seam in `codec`. With the
//! `protobuf` feature (on by default), lists and watches of [`Raw`] of a built-in kind (what
//! informers cache) ask for the apiserver's protobuf form, which it encodes about twice as
//! fast, and transcode it into the same JSON the server would have sent
//! ([`ClientOptions::protobuf`] turns it off for one client).
//!
//! A [`Client`] is cheap to clone; clones share one connection pool. Against a server that
//! offers HTTP/2 (every kube-apiserver does), all requests, watches included, share one TLS
//! connection.
//!
//! ```no_run
//! use controller_runtime::client::{Api, Client, ListParams};
//! use k8s_openapi::api::core::v1::ConfigMap;
//!
//! # async fn run() -> controller_runtime::client::Result<()> {
//! let client = Client::try_default().await?;
//! let configmaps: Api<ConfigMap> = Api::namespaced(client, "default");
//! for cm in configmaps.list(&ListParams::default()).await?.items {
//!     println!("{}", cm.metadata.name.unwrap_or_default());
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Speed
//!
//! An optimisation stays in the client only if it moves a number a user would notice — a row
//! of `make bench-decode`, `make bench-informer` (sync, bytes per cached object) or `make
//! bench-operator` — by 10 % or more, and adds no `unsafe` and no hidden thread. [`Raw`]
//! meets it several times over: one validating scan instead of building `K` per event, and
//! compact JSON instead of `K`'s tree in the cache (`BENCHMARKS.md`, "Watch decoding" and
//! "Informer"). The scanner itself is safe portable code reading eight bytes at a time; a
//! SIMD classifier saves work on long and escape-dense strings, but needs `unsafe`, which
//! the crate forbids.

/// Implements `informer::Object` (and [`WatchObject`]) for a type with a `metadata:
/// ObjectMeta` field.
macro_rules! object_via_metadata {
    ($ty:ty) => {
        impl informer::Object for $ty {
            fn name(&self) -> &str {
                informer::meta::name(&self.metadata)
            }
            fn namespace(&self) -> Option<&str> {
                self.metadata.namespace.as_deref()
            }
            fn resource_version(&self) -> Option<&str> {
                self.metadata.resource_version.as_deref()
            }
            fn label(&self, key: &str) -> Option<std::borrow::Cow<'_, str>> {
                informer::meta::label(&self.metadata, key)
            }
        }

        impl $crate::client::WatchObject for $ty {}
    };
}

/// The builders `labels` and `fields` of [`Selector`] (no argument) and of a type holding one
/// (the field's name), so that a caller narrows a list or watch in one line.
macro_rules! selector_builders {
    ($($field:ident)?) => {
        /// Only objects whose labels match `selector`, e.g. `app=web,tier!=db`.
        pub fn labels(mut self, selector: &str) -> Self {
            self$(.$field)?.labels = Some(selector.to_owned());
            self
        }

        /// Only objects whose fields match `selector`, e.g. `metadata.name=x`.
        pub fn fields(mut self, selector: &str) -> Self {
            self$(.$field)?.fields = Some(selector.to_owned());
            self
        }
    };
}

mod api;
mod codec;
mod dynamic;
mod error;
mod lister_watcher;
mod params;
mod rate_limit;
mod tls;
mod watch;
mod writes;

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, RETRY_AFTER, USER_AGENT};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use serde::de::DeserializeOwned;

pub use api::{Api, DeleteResult, PartialObjectMetadata};
#[cfg(feature = "protobuf")]
pub use codec::ProtoKind;
#[cfg(feature = "protobuf")]
pub use codec::proto_json::Error as ProtobufError;
pub use codec::{
    Bookmark, BookmarkMeta, EventReader, FrameDecoder, INITIAL_EVENTS_END, MetaView, ObjectList,
    OwnerRefView, Raw, WatchEvent, WatchObject, decode_event,
};
pub use dynamic::{ApiResource, DynamicObject};
pub use error::{Error, Result, Status};
pub use lister_watcher::{ApiEventStream, ApiListerWatcher, FilterSlot, ListFilter};
pub use params::{
    DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions, PropagationPolicy,
    Selector, VersionMatch, WatchParams,
};
pub use watch::WatchStream;
pub use writes::{Write, WriteLog, WrittenKey};

use crate::config::{Config, Credentials};
use codec::{Codec, decode_json};
pub(crate) use codec::{Format, decode, validate_json};
pub(crate) use error::status_from_response;
use rate_limit::TokenBucket;

/// The client-side rate limit: `qps` requests a second sustained, `burst` at once.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateLimit {
    qps: f64,
    burst: NonZeroU32,
}

impl RateLimit {
    /// controller-runtime's defaults: 20 requests a second, bursts of 30.
    pub const DEFAULT: RateLimit = RateLimit {
        qps: 20.0,
        burst: NonZeroU32::new(30).unwrap(),
    };

    /// A limit of `qps` a second with bursts of `burst`.
    ///
    /// # Errors
    ///
    /// [`Error::Build`] unless `qps` is positive and finite and `burst` at least 1.
    pub fn new(qps: f64, burst: u32) -> Result<RateLimit> {
        let burst = NonZeroU32::new(burst)
            .ok_or_else(|| Error::Build("rate limit burst must be at least 1".into()))?;
        if !(qps.is_finite() && qps > 0.0) {
            return Err(Error::Build(format!(
                "rate limit qps must be positive, not {qps}"
            )));
        }
        Ok(RateLimit { qps, burst })
    }

    /// Requests a second, sustained.
    pub fn qps(&self) -> f64 {
        self.qps
    }

    /// Requests at once.
    pub fn burst(&self) -> u32 {
        self.burst.get()
    }
}

/// How a [`Client`] behaves, apart from where it connects.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// Client-side rate limit; `None` sends as fast as callers ask. Default
    /// [`RateLimit::DEFAULT`].
    pub rate_limit: Option<RateLimit>,
    /// Limit on a whole non-watch request, body included. Watches are bounded by their
    /// server-side `timeoutSeconds` instead. Default 60 s.
    pub timeout: Option<Duration>,
    /// Sent as `User-Agent`. Default `controller-runtime-rs/<version> (<os>/<arch>)`.
    pub user_agent: String,
    /// How many times a request answered 429 (or 503 with `Retry-After`) is sent again,
    /// after waiting as the server asks. Default 10, as client-go.
    pub max_retries: u32,
    /// Offer HTTP/2 by ALPN. Default true; HTTP/1.1 is used when the server declines.
    pub http2: bool,
    /// List and watch built-in kinds as protobuf when the objects are cached as
    /// [`Raw`] (what informers cache), transcoding them into the same JSON: the server
    /// encodes protobuf about twice as fast and sends fewer bytes. Default true; false keeps
    /// every request on JSON, as does building without the `protobuf` feature.
    pub protobuf: bool,
    /// Told of every HTTP attempt (retries included) with its method, host, status and
    /// latency: where the `rest_client_*` metrics come from (the runtime's
    /// `Metrics::request_observer` makes one). Default none.
    pub observer: Option<Arc<dyn RequestObserver>>,
}

/// Watches the client's HTTP attempts, as client-go's `metrics.RequestResult` and
/// `metrics.RequestLatency` hooks do.
///
/// [`observe`](RequestObserver::observe) is called once per HTTP attempt: a request that is
/// retried after a 429 or a 401 is observed once per try. A watch is observed when its
/// response headers arrive, so its latency is the time to the first byte, not the stream's
/// life. The call is made on the request's task: keep it cheap (a counter, a histogram).
pub trait RequestObserver: Send + Sync + std::fmt::Debug {
    /// One attempt of `method` to `host` (`host[:port]` of the server URL) ended after
    /// `latency`, answered with status `code`, or with no answer at all (`None`: connection
    /// refused, TLS failure, reset), which client-go labels `<error>`.
    fn observe(&self, method: &Method, host: &str, code: Option<u16>, latency: Duration);
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            rate_limit: Some(RateLimit::DEFAULT),
            timeout: Some(Duration::from_secs(60)),
            user_agent: format!(
                "controller-runtime-rs/{} ({}/{})",
                env!("CARGO_PKG_VERSION"),
                std::env::consts::OS,
                std::env::consts::ARCH
            ),
            max_retries: 10,
            http2: true,
            protobuf: true,
            observer: None,
        }
    }
}

/// A client for one API server, as one user. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
    /// Where this client notes its writes, if it does ([`Client::recording_writes`]).
    writes: Option<Arc<WriteLog>>,
}

type Connector = hyper_rustls::HttpsConnector<HttpConnector>;

struct Inner {
    http: HyperClient<Connector, Full<Bytes>>,
    /// `scheme://authority[/prefix]`, without a trailing slash.
    base: String,
    credentials: Credentials,
    limiter: Option<TokenBucket>,
    user_agent: HeaderValue,
    timeout: Option<Duration>,
    max_retries: u32,
    /// Which wire format lists and watches ask for.
    codec: Arc<Codec>,
    default_namespace: String,
    source: String,
    /// Told of every attempt; see [`ClientOptions::observer`].
    observer: Option<Arc<dyn RequestObserver>>,
    /// The server URL's `host[:port]`, as the observer reports it.
    host: String,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("server", &self.inner.base)
            .field("source", &self.inner.source)
            .finish_non_exhaustive()
    }
}

/// One request, before it is sent (perhaps several times).
pub(crate) struct Req {
    pub(crate) method: Method,
    /// Path and query, starting with `/`.
    pub(crate) path: String,
    pub(crate) body: Bytes,
    pub(crate) content_type: Option<&'static str>,
    /// The JSON media type to accept: plain, or as metadata only.
    pub(crate) accept: &'static str,
    /// The wire format asked for; protobuf replaces `accept`.
    pub(crate) format: Format,
}

impl Req {
    pub(crate) fn new(method: Method, path: String) -> Self {
        Req {
            method,
            path,
            body: Bytes::new(),
            content_type: None,
            accept: "application/json",
            format: Format::Json,
        }
    }

    pub(crate) fn format(mut self, format: Format) -> Self {
        self.format = format;
        self
    }

    pub(crate) fn json_body(mut self, body: Vec<u8>) -> Self {
        self.body = body.into();
        self.content_type = Some("application/json");
        self
    }
}

// === impl Client ===

impl Client {
    /// A client for the cluster found as kubectl finds it (see [`Config::infer`]), with
    /// default options.
    ///
    /// # Errors
    ///
    /// If no configuration can be loaded, or it cannot make a client.
    pub async fn try_default() -> Result<Client> {
        let config = tokio::task::spawn_blocking(Config::infer)
            .await
            .map_err(|e| Error::Build(format!("loading the configuration: {e}")))??;
        Client::new(config, ClientOptions::default())
    }

    /// A client for `config`.
    ///
    /// # Errors
    ///
    /// [`Error::Build`] if the URL or TLS settings are unusable: among them an `https` server
    /// with no certificate authority ([`Config::root_certs`] empty) and no
    /// `insecure-skip-tls-verify`, since only the configured CAs are ever trusted.
    pub fn new(config: Config, options: ClientOptions) -> Result<Client> {
        let scheme = config.cluster_url.scheme_str().unwrap_or("");
        if scheme != "https" && scheme != "http" {
            return Err(Error::Build(format!(
                "server {} ({}) must be an http or https URL",
                config.cluster_url, config.source
            )));
        }
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(Duration::from_secs(30)));
        http.set_keepalive(Some(Duration::from_secs(30)));

        let builder = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls::client_config(&config)?)
            .https_or_http();
        let builder = match tls::server_name(&config)? {
            Some(name) => {
                builder.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name))
            }
            None => builder,
        };
        let connector = if options.http2 {
            builder.enable_all_versions().wrap_connector(http)
        } else {
            builder.enable_http1().wrap_connector(http)
        };

        let http = HyperClient::builder(TokioExecutor::new())
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(90))
            // Pings notice a dead connection under a long-lived watch.
            .http2_keep_alive_interval(Duration::from_secs(30))
            .http2_keep_alive_timeout(Duration::from_secs(15))
            .http2_keep_alive_while_idle(true)
            .build(connector);

        let user_agent = HeaderValue::from_str(&options.user_agent).map_err(|_| {
            Error::Build(format!(
                "user agent {:?} is not a valid header",
                options.user_agent
            ))
        })?;
        let host = config
            .cluster_url
            .authority()
            .map(|a| a.to_string())
            .unwrap_or_default();
        let base = config
            .cluster_url
            .to_string()
            .trim_end_matches('/')
            .to_owned();
        Ok(Client {
            inner: Arc::new(Inner {
                http,
                base,
                credentials: Credentials::new(config.auth),
                limiter: options.rate_limit.map(|r| TokenBucket::new(r.qps, r.burst)),
                user_agent,
                timeout: options.timeout,
                max_retries: options.max_retries,
                codec: Arc::new(Codec::new(options.protobuf)),
                default_namespace: config.default_namespace,
                source: config.source,
                observer: options.observer,
                host,
            }),
            writes: None,
        })
    }

    /// This client, noting every write it makes in `log`, which a cache reads to answer
    /// reads of written objects only once it has seen the writes (read-your-own-writes).
    /// The manager's client records into the log its cache reads; a client made with
    /// [`Client::new`] records nothing. Clones share the log; the connection pool is shared
    /// with `self`.
    pub fn recording_writes(&self, log: Arc<WriteLog>) -> Client {
        Client {
            inner: self.inner.clone(),
            writes: Some(log),
        }
    }

    /// The log this client notes its writes in, if it does.
    pub fn write_log(&self) -> Option<&Arc<WriteLog>> {
        self.writes.as_ref()
    }

    /// The namespace the configuration names (its context's, or the pod's in-cluster).
    pub fn default_namespace(&self) -> &str {
        &self.inner.default_namespace
    }

    /// Which wire format this client's lists and watches ask for.
    pub(crate) fn codec(&self) -> &Codec {
        &self.inner.codec
    }

    /// The server's base URL.
    pub fn base_url(&self) -> &str {
        &self.inner.base
    }

    /// GETs `path` (e.g. `/readyz`, `/version`) and returns the body.
    ///
    /// # Errors
    ///
    /// [`Error::Api`] for a non-2xx answer; transport, timeout and body errors as they come.
    ///
    /// # Cancel safety
    ///
    /// Cancelling drops the request; nothing is left half-done on the client.
    pub async fn get_raw(&self, path: &str) -> Result<Bytes> {
        Ok(self
            .request_body(Req::new(Method::GET, path.to_owned()))
            .await?
            .1)
    }

    /// Sends a request with a JSON body (if any) to `path` and decodes the JSON answer.
    ///
    /// # Errors
    ///
    /// As [`Client::get_raw`], plus [`Error::Decode`] if the answer is not a `T`.
    pub async fn request<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<T> {
        let req = Req::new(method, path.to_owned());
        let req = match body {
            Some(b) => req.json_body(b),
            None => req,
        };
        self.request_json(req).await
    }

    /// Sends `req`, waiting on the rate limit first and again on each retry, and returns the
    /// response once it is final: not 429, not 503 with `Retry-After`, not a 401 that fresh
    /// credentials might fix.
    async fn send(&self, req: &Req) -> Result<Response<Incoming>> {
        let url = format!("{}{}", self.inner.base, req.path);
        let mut retries = 0;
        let mut reauthenticated = false;
        loop {
            if let Some(limiter) = &self.inner.limiter {
                limiter.acquire().await;
            }
            let mut builder = Request::builder()
                .method(req.method.clone())
                .uri(&url)
                .header(USER_AGENT, self.inner.user_agent.clone())
                .header(ACCEPT, req.format.accept(req.accept));
            if let Some(ct) = req.content_type {
                builder = builder.header(CONTENT_TYPE, ct);
            }
            if let Some(auth) = self.inner.credentials.authorization().await? {
                builder = builder.header(AUTHORIZATION, auth);
            }
            let request = builder
                .body(Full::new(req.body.clone()))
                .map_err(|e| Error::InvalidRequest(format!("{} {url}: {e}", req.method)))?;

            let started = tokio::time::Instant::now();
            let response = self.inner.http.request(request).await;
            if let Some(observer) = &self.inner.observer {
                let code = response.as_ref().ok().map(|r| r.status().as_u16());
                observer.observe(&req.method, &self.inner.host, code, started.elapsed());
            }
            let response = response.map_err(|e| Error::Transport {
                url: url.clone(),
                source: Box::new(e),
            })?;

            let status = response.status();
            if status == StatusCode::UNAUTHORIZED && !reauthenticated {
                // A rotated token or an expired exec credential: fetch afresh, once.
                self.inner.credentials.invalidate();
                reauthenticated = true;
                tracing::debug!(%url, "401 Unauthorized; refreshing credentials and retrying");
                continue;
            }
            let retry_after = retry_after(&response);
            let retryable = status == StatusCode::TOO_MANY_REQUESTS
                || (status.is_server_error() && retry_after.is_some());
            if retryable && retries < self.inner.max_retries {
                retries += 1;
                let wait = retry_after.unwrap_or(Duration::from_secs(1));
                tracing::debug!(%url, %status, ?wait, retries, "server asked to retry");
                drop(response);
                tokio::time::sleep(wait).await;
                continue;
            }
            return Ok(response);
        }
    }

    /// Sends `req` and returns a 2xx answer and the format it arrived in; any other answer
    /// is [`Error::Api`] with the server's `Status`.
    async fn send_ok(&self, req: &Req) -> Result<(Format, Response<Incoming>)> {
        let response = self.send(req).await?;
        let format = req.format.arrived(&response);
        let status = response.status();
        if status.is_success() {
            return Ok((format, response));
        }
        let body = self.collect(req, response).await?;
        let status = status_from_response(status.as_u16(), format, &body);
        Err(Error::Api(Box::new(status)))
    }

    /// The whole body of `response` to `req`.
    async fn collect(&self, req: &Req, response: Response<Incoming>) -> Result<Bytes> {
        let body = response.into_body().collect().await;
        body.map(|b| b.to_bytes()).map_err(|source| Error::Body {
            url: format!("{}{}", self.inner.base, req.path),
            source,
        })
    }

    /// Sends `req` and returns the whole body of a 2xx answer, and the format it arrived in.
    pub(crate) async fn request_body(&self, req: Req) -> Result<(Format, Bytes)> {
        let fut = async {
            let (format, response) = self.send_ok(&req).await?;
            Ok((format, self.collect(&req, response).await?))
        };
        match self.inner.timeout {
            Some(after) => tokio::time::timeout(after, fut)
                .await
                .map_err(|_| Error::Timeout {
                    url: format!("{}{}", self.inner.base, req.path),
                    after,
                })?,
            None => fut.await,
        }
    }

    pub(crate) async fn request_json<T: DeserializeOwned>(&self, req: Req) -> Result<T> {
        let what = format!("the response to {} {}", req.method, req.path);
        let (_, body) = self.request_body(req).await?;
        decode_json(what, &body)
    }

    /// Starts a watch of `K` in the format the codec chooses for `K`; the stream reads
    /// whichever format the server sends.
    pub(crate) async fn request_watch<K: WatchObject>(&self, req: Req) -> Result<WatchStream<K>> {
        let req = req.format(self.inner.codec.format::<K>());
        let (format, response) = self.send_ok(&req).await?;
        let url = format!("{}{}", self.inner.base, req.path);
        let codec = self.inner.codec.clone();
        Ok(WatchStream::new(response.into_body(), url, format, codec))
    }
}

/// The wait a `Retry-After` header asks for, in whole seconds as the API server sends it.
fn retry_after<B>(response: &Response<B>) -> Option<Duration> {
    let secs: u64 = response
        .headers()
        .get(RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_secs(secs))
}
