//! The client's error type, which keeps the server's `Status` so callers can ask what
//! happened (`is_not_found`, `is_conflict`, `is_gone`, …).

use std::time::Duration;

pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;

use super::codec::{Format, decode_status};

/// `Result` with the client's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong talking to the API server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server answered with an error `Status`: a non-2xx response, or an `ERROR` frame in a
    /// watch stream.
    #[error("{}", describe_status(.0))]
    Api(Box<Status>),

    /// The request never got an answer: connection refused, TLS handshake failure, reset.
    /// The message names the cause found among the source's causes (nothing listening, a
    /// server certificate the configured CA did not sign, a client certificate the server
    /// refused) and what to fix.
    #[error("request to {url} failed: {}", describe_transport(.url, .source.as_ref()))]
    Transport {
        /// The URL the request went to.
        url: String,
        /// The underlying failure.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// Reading a response body failed partway.
    #[error("reading the response from {url}: {source}")]
    Body {
        /// The URL the response came from.
        url: String,
        /// The underlying failure.
        #[source]
        source: hyper::Error,
    },

    /// No answer within the request timeout.
    #[error("request to {url} timed out after {after:?}")]
    Timeout {
        /// The URL the request went to.
        url: String,
        /// The timeout that passed.
        after: Duration,
    },

    /// A response or watch frame was not the JSON expected.
    #[error("decoding {what}: {source}; the data began: {snippet}")]
    Decode {
        /// What was being decoded, e.g. `a watch frame from /api/v1/pods`.
        what: String,
        /// The parser's complaint.
        #[source]
        source: serde_json::Error,
        /// The first bytes of the offending data, for the log.
        snippet: String,
    },

    /// A protobuf response or watch frame that could not be read or transcoded into JSON.
    /// A field this client's tables do not know also makes the client read that kind as
    /// JSON from then on, so the list or watch that follows succeeds.
    #[cfg(feature = "protobuf")]
    #[error("decoding {what}: {source}")]
    Protobuf {
        /// What was being decoded, e.g. `a watch frame from /api/v1/pods`.
        what: String,
        /// What was wrong with it.
        #[source]
        source: super::codec::proto_json::Error,
    },

    /// A watch stream ended in the middle of a frame.
    #[error("watch stream from {url} ended in the middle of a frame ({len} bytes pending)")]
    TruncatedFrame {
        /// The URL of the watch.
        url: String,
        /// How many bytes of the unfinished frame had arrived.
        len: usize,
    },

    /// The client could not be built from its configuration.
    #[error("building the client: {0}")]
    Build(String),

    /// Loading the configuration, or obtaining credentials, failed.
    #[error(transparent)]
    Config(#[from] crate::config::Error),

    /// A request could not be made from the arguments given: a bad name, header or patch.
    #[error("invalid request: {0}")]
    InvalidRequest(String),

    /// Discovery found no resource for the kind asked for.
    #[error("the server has no resource for {0}")]
    ResourceNotFound(String),
}

fn describe_status(s: &Status) -> String {
    let code = s.code.unwrap_or_default();
    let reason = s.reason.as_deref().unwrap_or("Unknown");
    let text = match s.message.as_deref().map(str::trim) {
        Some(msg) if !msg.is_empty() => format!("{code} {reason}: {msg}"),
        _ => format!("{code} {reason}"),
    };
    match status_hint(s) {
        Some(hint) => format!("{text}; {hint}"),
        None => text,
    }
}

/// What to do about the answers whose server message names the cause but not the fix: a
/// 401, an RBAC 403 (the server names the user, verb and resource) and a 404 for a resource
/// the server does not serve at all (not one missing object).
fn status_hint(s: &Status) -> Option<&'static str> {
    let message = s.message.as_deref().unwrap_or_default().trim();
    match s.code? {
        401 => Some(
            "the server did not accept the credentials: renew the client certificate or token \
             (an expired one is refused)",
        ),
        403 if message.contains("is forbidden: User \"") => {
            Some("RBAC allows the user no such request: bind a Role or ClusterRole that grants it")
        }
        // The second is the API server's plain-text answer for a group it does not serve.
        404 if message == "the server could not find the requested resource"
            || message == "404 page not found" =>
        {
            Some(
                "the server does not serve this resource: for a custom resource, install its \
             CustomResourceDefinition",
            )
        }
        _ => None,
    }
}

/// The cause of a transport failure, and its fix where one is known (hyper's own message,
/// "client error (Connect)", names none); otherwise every cause's message, joined.
fn describe_transport(url: &str, source: &(dyn std::error::Error + 'static)) -> String {
    if causes(source).any(is_refusal) {
        let at = url
            .parse::<http::Uri>()
            .ok()
            .and_then(|u| u.authority().map(ToString::to_string))
            .unwrap_or_else(|| url.to_owned());
        return format!(
            "connection refused: nothing listens at {at}; check that the API server is \
             running and that the configuration's server address is right"
        );
    }
    if let Some(tls) = causes(source).find_map(|e| e.downcast_ref::<rustls::Error>()) {
        return describe_tls(tls);
    }
    let mut text = source.to_string();
    let mut cause = source.source();
    while let Some(e) = cause {
        let more = e.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        cause = e.source();
    }
    text
}

/// `error` and its causes, outermost first. An io::Error's `source` skips the error it
/// wraps (which may be another io::Error around rustls's), so the walk goes inside it.
fn causes<'a>(
    error: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(error), |e| {
        match e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => e.source(),
        }
    })
}

/// Whether `e` is a refused connection.
fn is_refusal(e: &(dyn std::error::Error + 'static)) -> bool {
    e.downcast_ref::<std::io::Error>()
        .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
}

/// A TLS failure in the words of the configuration that can fix it.
fn describe_tls(e: &rustls::Error) -> String {
    use rustls::{AlertDescription as Alert, CertificateError as Cert};
    match e {
        rustls::Error::InvalidCertificate(Cert::UnknownIssuer) => {
            "the server's certificate is not signed by the kubeconfig's certificate-authority: \
             set certificate-authority(-data) to the CA that issued the API server's certificate"
                .to_owned()
        }
        rustls::Error::InvalidCertificate(Cert::Expired | Cert::ExpiredContext { .. }) => {
            format!(
                "the server's certificate has expired ({e}): renew the API server's certificate"
            )
        }
        rustls::Error::InvalidCertificate(
            Cert::NotValidForName | Cert::NotValidForNameContext { .. },
        ) => format!(
            "the server's certificate does not name the address in the configuration ({e}): \
             use a name the certificate holds, or set tls-server-name"
        ),
        rustls::Error::InvalidCertificate(_) => format!("the server's certificate is refused: {e}"),
        rustls::Error::AlertReceived(
            alert @ (Alert::CertificateExpired
            | Alert::BadCertificate
            | Alert::CertificateUnknown
            | Alert::CertificateRevoked
            | Alert::UnknownCA
            | Alert::CertificateRequired
            | Alert::AccessDenied),
        ) => format!(
            "the server refused the client certificate ({alert:?}): renew the user's \
             client-certificate in the kubeconfig"
        ),
        other => format!("TLS: {other}"),
    }
}

// === impl Error ===

impl Error {
    /// The server's `Status`, if the server answered with one.
    pub fn status(&self) -> Option<&Status> {
        match self {
            Error::Api(s) => Some(s),
            _ => None,
        }
    }

    /// The HTTP status code the server gave, if it answered with an error.
    pub fn code(&self) -> Option<u16> {
        self.status()
            .and_then(|s| s.code)
            .and_then(|c| u16::try_from(c).ok())
    }

    /// The server's machine-readable reason (`NotFound`, `Conflict`, `Expired`, …).
    pub fn reason(&self) -> Option<&str> {
        self.status().and_then(|s| s.reason.as_deref())
    }

    /// 404: the object or resource does not exist.
    pub fn is_not_found(&self) -> bool {
        self.code() == Some(404)
    }

    /// 409: a conflict, such as an update against a stale `resourceVersion`, or a
    /// server-side apply conflict. See also [`Error::is_already_exists`].
    pub fn is_conflict(&self) -> bool {
        self.code() == Some(409)
    }

    /// 409 with reason `AlreadyExists`: a create for a name that is taken.
    pub fn is_already_exists(&self) -> bool {
        self.is_conflict() && self.reason() == Some("AlreadyExists")
    }

    /// 410: the `resourceVersion` asked for is older than the server keeps (compacted), or a
    /// continue token has expired. A watcher must list again.
    pub fn is_gone(&self) -> bool {
        self.code() == Some(410)
    }

    /// 410 with reason `Expired`: a list's continue token is too old to resume from.
    pub fn is_expired(&self) -> bool {
        self.is_gone() && self.reason() == Some("Expired")
    }

    /// 429: the server asks the client to slow down.
    pub fn is_too_many_requests(&self) -> bool {
        self.code() == Some(429)
    }

    /// 401: the credentials were not accepted.
    pub fn is_unauthorized(&self) -> bool {
        self.code() == Some(401)
    }

    /// 403: the credentials are valid but may not do this.
    pub fn is_forbidden(&self) -> bool {
        self.code() == Some(403)
    }

    /// 422: the object failed validation.
    pub fn is_invalid(&self) -> bool {
        self.code() == Some(422)
    }

    /// 400: the request itself was malformed.
    pub fn is_bad_request(&self) -> bool {
        self.code() == Some(400)
    }

    /// 504 or reason `Timeout`: the server gave up waiting, e.g. for its cache to reach a
    /// `resourceVersion`.
    pub fn is_server_timeout(&self) -> bool {
        self.code() == Some(504) || self.reason() == Some("Timeout")
    }

    /// The server has not yet seen the `resourceVersion` asked for, in every form API
    /// servers say so (client-go's `isTooLargeResourceVersionError`): a cause with reason
    /// `ResourceVersionTooLarge`, or a message naming it (servers before 1.17); and, from
    /// servers 1.17.0 to 1.18.5, a `Timeout` whose cause names it only in its message. A
    /// reflector answers by listing from the latest state instead.
    pub fn is_resource_version_too_large(&self) -> bool {
        const TOO_LARGE: &str = "Too large resource version";
        let Some(status) = self.status() else {
            return false;
        };
        let causes = || {
            status
                .details
                .iter()
                .flat_map(|d| d.causes.iter().flatten())
        };
        let says = |m: &Option<String>| m.as_deref().is_some_and(|m| m.contains(TOO_LARGE));
        says(&status.message)
            || causes().any(|c| c.reason.as_deref() == Some("ResourceVersionTooLarge"))
            || (self.is_server_timeout() && causes().any(|c| says(&c.message)))
    }

    /// The connection was refused: nothing listened at the server's address.
    pub fn is_connection_refused(&self) -> bool {
        match self {
            Error::Transport { source, .. } => causes(source.as_ref()).any(is_refusal),
            _ => false,
        }
    }
}

/// The `Status` of an error response: its body's, read in the `format` it arrived in, else
/// one made from the HTTP status code.
pub(crate) fn status_from_response(code: u16, format: Format, body: &[u8]) -> Status {
    if let Some(mut status) = decode_status(format, body)
        && (status.code.is_some() || status.reason.is_some() || status.message.is_some())
    {
        status.code.get_or_insert(i32::from(code));
        return status;
    }
    let reason = http::StatusCode::from_u16(code)
        .ok()
        .and_then(|c| c.canonical_reason())
        .unwrap_or("Unknown")
        .replace(' ', "");
    Status {
        code: Some(i32::from(code)),
        reason: Some(reason),
        message: Some(snippet(body, 512)),
        status: Some("Failure".into()),
        ..Status::default()
    }
}

/// The first `max` bytes of `data` as text, for error messages.
pub(crate) fn snippet(data: &[u8], max: usize) -> String {
    let end = data.len().min(max);
    let mut s = String::from_utf8_lossy(&data[..end]).into_owned();
    if data.len() > max {
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_body_is_kept_with_its_reason_and_message() {
        let body = br#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"configmaps \"x\" not found","reason":"NotFound","details":{"name":"x","kind":"configmaps"},"code":404}"#;
        let err = Error::Api(Box::new(status_from_response(404, Format::Json, body)));
        assert!(err.is_not_found());
        assert!(!err.is_conflict());
        assert_eq!(err.reason(), Some("NotFound"));
        assert_eq!(err.to_string(), "404 NotFound: configmaps \"x\" not found");
    }

    #[test]
    fn a_body_that_is_not_a_status_becomes_one_from_the_code() {
        let err = Error::Api(Box::new(status_from_response(
            429,
            Format::Json,
            b"slow down <html>",
        )));
        assert!(err.is_too_many_requests());
        assert_eq!(err.reason(), Some("TooManyRequests"));
        assert_eq!(err.to_string(), "429 TooManyRequests: slow down <html>");
    }

    #[test]
    fn expired_continue_token_is_gone_and_expired() {
        let body = br#"{"kind":"Status","status":"Failure","message":"The provided continue parameter is too old","reason":"Expired","code":410}"#;
        let err = Error::Api(Box::new(status_from_response(410, Format::Json, body)));
        assert!(err.is_gone() && err.is_expired());
    }

    #[test]
    fn too_large_resource_version_is_recognised_by_its_cause() {
        let body = br#"{"kind":"Status","status":"Failure","message":"Timeout: Too large resource version: 100, current: 5","reason":"Timeout","details":{"causes":[{"reason":"ResourceVersionTooLarge","message":"Too large resource version"}],"retryAfterSeconds":1},"code":504}"#;
        let err = Error::Api(Box::new(status_from_response(504, Format::Json, body)));
        assert!(err.is_resource_version_too_large());
        assert!(err.is_server_timeout());
        assert!(!err.is_gone());
    }

    #[test]
    fn rbac_refusals_unknown_resources_and_refused_credentials_say_what_to_do() {
        let status = |code: u16, body: &[u8]| {
            Error::Api(Box::new(status_from_response(code, Format::Json, body)))
        };
        let forbidden = status(403, br#"{"kind":"Status","status":"Failure","message":"pods is forbidden: User \"system:serviceaccount:a:b\" cannot list resource \"pods\" in API group \"\" in the namespace \"a\"","reason":"Forbidden","code":403}"#);
        assert!(forbidden.to_string().ends_with(
            "in the namespace \"a\"; RBAC allows the user no such request: bind a Role or ClusterRole that grants it"
        ), "{forbidden}");
        let denied = status(403, br#"{"kind":"Status","status":"Failure","message":"admission webhook \"v\" denied the request: no","reason":"Forbidden","code":403}"#);
        assert!(!denied.to_string().contains("RBAC"), "{denied}");
        let no_resource = status(404, br#"{"kind":"Status","status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","code":404}"#);
        assert!(
            no_resource
                .to_string()
                .contains("install its CustomResourceDefinition"),
            "{no_resource}"
        );
        let no_group = status(404, b"404 page not found\n");
        assert_eq!(
            no_group.to_string(),
            "404 NotFound: 404 page not found; the server does not serve this resource: for a \
             custom resource, install its CustomResourceDefinition"
        );
        let no_object = status(404, br#"{"kind":"Status","status":"Failure","message":"pods \"x\" not found","reason":"NotFound","code":404}"#);
        assert_eq!(no_object.to_string(), "404 NotFound: pods \"x\" not found");
        let unauthorized = status(401, br#"{"kind":"Status","status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}"#);
        assert!(
            unauthorized.to_string().starts_with(
                "401 Unauthorized: Unauthorized; the server did not accept the credentials"
            ),
            "{unauthorized}"
        );
    }

    #[derive(Debug, thiserror::Error)]
    #[error("client error (Connect)")]
    struct Opaque(#[source] std::io::Error);

    fn transport_error(cause: std::io::Error) -> Error {
        Error::Transport {
            url: "https://127.0.0.1:1/api/v1/pods".to_owned(),
            source: Box::new(Opaque(cause)),
        }
    }

    fn transport(cause: std::io::Error) -> String {
        transport_error(cause).to_string()
    }

    #[test]
    fn a_refused_connection_is_found_among_the_causes_and_names_the_address_tried() {
        let refusal = || std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert!(transport_error(refusal()).is_connection_refused());
        // Inside an io::Error, whose `source` would skip it.
        assert!(transport_error(std::io::Error::other(refusal())).is_connection_refused());
        assert!(!transport_error(std::io::Error::other("reset by peer")).is_connection_refused());
        let refused = transport(refusal());
        assert!(
            refused.starts_with("request to https://127.0.0.1:1/api/v1/pods failed: connection refused: nothing listens at 127.0.0.1:1;"),
            "{refused}"
        );
    }

    #[test]
    fn tls_failures_name_the_certificate_at_fault() {
        // As hyper-rustls hands it over: tokio-rustls's io::Error inside another.
        let unknown = transport(std::io::Error::other(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
        )));
        assert!(
            unknown.contains(
                "the server's certificate is not signed by the kubeconfig's certificate-authority"
            ),
            "{unknown}"
        );
        let refused = transport(std::io::Error::other(rustls::Error::AlertReceived(
            rustls::AlertDescription::CertificateExpired,
        )));
        assert!(
            refused.contains("the server refused the client certificate (CertificateExpired)"),
            "{refused}"
        );
        let other = transport(std::io::Error::other("reset by peer"));
        assert!(
            other.ends_with("failed: client error (Connect): reset by peer"),
            "{other}"
        );
    }

    #[test]
    fn snippet_marks_truncation() {
        assert_eq!(snippet(b"abcdef", 3), "abc…");
        assert_eq!(snippet(b"abc", 3), "abc");
    }
}
