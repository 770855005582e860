//! How the client proves who it is: the [`Auth`] methods and the runtime [`Credentials`] that
//! turn them into an `Authorization` header, refreshing token files and exec plugins.

use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use http::HeaderValue;
use tokio::time::Instant;

use super::exec;
use super::{Error, Result};

/// How often a bearer token file is re-read, at most, unless [`Credentials::invalidate`] is
/// called. The kubelet rotates projected service-account tokens well before they expire.
pub const TOKEN_FILE_REREAD: Duration = Duration::from_secs(60);

// === Secret ===

/// A secret string: a token, a password or a private key in PEM.
///
/// Its `Debug` output is `Secret(***)` and it has no `Display`, so it cannot end up in a log
/// line by accident. Call [`Secret::expose`] where the value is really needed.
///
/// ```
/// use controller_runtime::config::Secret;
///
/// let token = Secret::new("s3cr3t");
/// assert_eq!(format!("{token:?}"), "Secret(***)");
/// assert_eq!(token.expose(), "s3cr3t");
/// ```
#[derive(Clone, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The secret value itself.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Secret {
        Secret(value)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

// === Auth ===

/// How requests are authenticated, besides a client certificate (see
/// [`Identity`](super::Identity)).
#[derive(Clone, Debug, Default)]
pub enum Auth {
    /// No `Authorization` header.
    #[default]
    None,
    /// HTTP basic authentication (`username`/`password` in a kubeconfig).
    Basic {
        /// The user name.
        username: String,
        /// The password.
        password: Secret,
    },
    /// A fixed bearer token (`token` in a kubeconfig).
    Bearer(Secret),
    /// A bearer token read from a file, re-read as it rotates (`tokenFile` in a kubeconfig, and
    /// the in-cluster service-account token).
    TokenFile(PathBuf),
    /// A token obtained by running a credential plugin (`exec` in a kubeconfig).
    Exec(ExecConfig),
}

/// An exec credential plugin, as a kubeconfig's `users[].user.exec` describes it, resolved: a
/// relative command path is already absolute and the cluster information is filled in.
///
/// The plugin speaks `client.authentication.k8s.io/v1` (or `v1beta1`): it receives an
/// `ExecCredential` request in the `KUBERNETES_EXEC_INFO` environment variable and prints an
/// `ExecCredential` with `status.token` on stdout. Plugins that answer with a client
/// certificate (`status.clientCertificateData`) instead of a token are not supported: the
/// call fails with an error that says so.
#[derive(Clone)]
pub struct ExecConfig {
    /// `client.authentication.k8s.io/v1` or `client.authentication.k8s.io/v1beta1`.
    pub api_version: String,
    /// The program to run: absolute, or a bare name looked up on `PATH`.
    pub command: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Environment variables added to the client's own. Their values are not shown by `Debug`.
    pub env: Vec<(String, String)>,
    /// Shown when the command is not found.
    pub install_hint: Option<String>,
    /// Whether the request carries `spec.cluster` (then `cluster` is set).
    pub provide_cluster_info: bool,
    /// The kubeconfig's `interactiveMode`. The plugin never gets a terminal, so `Always` fails.
    pub interactive_mode: InteractiveMode,
    /// The cluster sent as `spec.cluster` when `provide_cluster_info` is true.
    pub cluster: Option<Box<ExecCluster>>,
}

impl fmt::Debug for ExecConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let env: Vec<String> = self.env.iter().map(|(k, _)| format!("{k}=***")).collect();
        f.debug_struct("ExecConfig")
            .field("api_version", &self.api_version)
            .field("command", &self.command)
            .field("args", &self.args)
            .field("env", &env)
            .field("install_hint", &self.install_hint)
            .field("provide_cluster_info", &self.provide_cluster_info)
            .field("interactive_mode", &self.interactive_mode)
            .field("cluster", &self.cluster)
            .finish()
    }
}

/// What an exec plugin is told about the cluster (`spec.cluster` of the request), when the
/// kubeconfig sets `provideClusterInfo: true`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ExecCluster {
    /// The cluster's `server`.
    pub server: String,
    /// The cluster's `tls-server-name`.
    pub tls_server_name: Option<String>,
    /// The cluster's `insecure-skip-tls-verify`.
    pub insecure_skip_tls_verify: bool,
    /// The cluster's CA bundle in PEM, from `certificate-authority-data` or the file.
    pub certificate_authority_data: Option<Vec<u8>>,
    /// The cluster's `proxy-url`.
    pub proxy_url: Option<String>,
    /// The cluster's `disable-compression`.
    pub disable_compression: bool,
    /// The cluster extension named `client.authentication.k8s.io/exec`, sent as `config`.
    pub config: Option<serde_json::Value>,
}

/// A kubeconfig exec plugin's `interactiveMode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum InteractiveMode {
    /// The plugin never needs a terminal.
    Never,
    /// The plugin uses a terminal if there is one (the default for `v1beta1`).
    #[default]
    IfAvailable,
    /// The plugin needs a terminal; this client has none to give, so running it fails.
    Always,
}

// === Credentials ===

/// Runtime credentials: turns an [`Auth`] into the `Authorization` header to send now,
/// refreshing it as needed.
///
/// Cheap to clone; clones share one cache. A client makes one from its
/// [`Config`](super::Config) and calls [`authorization`](Self::authorization) before every
/// request, and [`invalidate`](Self::invalidate) after a `401 Unauthorized`.
///
/// - [`Auth::Bearer`] and [`Auth::Basic`] give a fixed header.
/// - [`Auth::TokenFile`] re-reads the file at most once every [`TOKEN_FILE_REREAD`], and on
///   the first call after `invalidate`. If a periodic re-read fails, the previous token is kept
///   and a warning logged.
/// - [`Auth::Exec`] runs the plugin on first use and caches its token until a little before
///   `status.expirationTimestamp` (forever, if it gives none) or until `invalidate`.
///   Concurrent callers wait for one run and share its result, success or failure.
///
/// ```no_run
/// # async fn demo() -> controller_runtime::config::Result<()> {
/// use controller_runtime::config::{Config, Credentials};
///
/// let config = Config::infer()?;
/// let credentials = Credentials::new(config.auth.clone());
/// if let Some(value) = credentials.authorization().await? {
///     assert!(value.is_sensitive());
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Credentials {
    inner: Arc<Inner>,
}

struct Inner {
    /// Bumped by `invalidate`; a cached token is used only while its epoch is current.
    epoch: AtomicU64,
    kind: Kind,
}

enum Kind {
    None,
    /// A fixed header, or why the credential cannot be a header.
    Static(std::result::Result<HeaderValue, &'static str>),
    TokenFile {
        path: PathBuf,
        /// Never held across an await.
        cache: Mutex<Option<FileToken>>,
    },
    Exec {
        config: ExecConfig,
        /// Held for the whole plugin run, so concurrent callers queue behind it.
        state: tokio::sync::Mutex<ExecState>,
        /// Plugin runs finished so far; a caller that sees it move while it waited for
        /// `state` takes the result of that run instead of starting another.
        runs: AtomicU64,
    },
}

struct FileToken {
    header: HeaderValue,
    read_at: Instant,
    epoch: u64,
}

#[derive(Default)]
struct ExecState {
    /// The token in use, while it has not expired or been invalidated.
    token: Option<ExecToken>,
    /// The outcome of the latest run, handed to callers that waited for it.
    last: Option<std::result::Result<HeaderValue, Arc<Error>>>,
}

struct ExecToken {
    header: HeaderValue,
    expires: Option<SystemTime>,
    epoch: u64,
}

impl Credentials {
    /// Prepares credentials for `auth`. Nothing is read or run until
    /// [`authorization`](Self::authorization) is called.
    pub fn new(auth: Auth) -> Credentials {
        let kind = match auth {
            Auth::None => Kind::None,
            Auth::Bearer(token) => {
                Kind::Static(header(&format!("Bearer {}", token.expose())).ok_or("bearer token"))
            }
            Auth::Basic { username, password } => {
                let pair = format!("{username}:{}", password.expose());
                let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
                Kind::Static(header(&format!("Basic {encoded}")).ok_or("basic auth"))
            }
            Auth::TokenFile(path) => Kind::TokenFile {
                path,
                cache: Mutex::new(None),
            },
            Auth::Exec(config) => Kind::Exec {
                config,
                state: tokio::sync::Mutex::new(ExecState::default()),
                runs: AtomicU64::new(0),
            },
        };
        Credentials {
            inner: Arc::new(Inner {
                epoch: AtomicU64::new(0),
                kind,
            }),
        }
    }

    /// The `Authorization` header value to send now, or `None` when there is no token or
    /// password to send. The value is marked sensitive, so HTTP/2 does not index it and
    /// `Debug` hides it.
    ///
    /// # Errors
    ///
    /// A token file that cannot be read or is empty (with no earlier token to fall back on),
    /// an exec plugin that cannot run, fails, times out or prints no usable token, or a
    /// credential that holds characters an HTTP header cannot carry. Errors from an exec
    /// plugin run come wrapped in [`Error::Shared`], since every caller waiting for that run
    /// receives the same one; its message is the original's.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe. Dropping the future while an exec plugin runs kills the plugin; the next
    /// caller starts it again.
    pub async fn authorization(&self) -> Result<Option<HeaderValue>> {
        match &self.inner.kind {
            Kind::None => Ok(None),
            Kind::Static(Ok(value)) => Ok(Some(value.clone())),
            Kind::Static(Err(origin)) => Err(Error::InvalidHeader {
                origin: (*origin).to_owned(),
            }),
            Kind::TokenFile { path, cache } => self.file_token(path, cache).await.map(Some),
            Kind::Exec {
                config,
                state,
                runs,
            } => self.exec_token(config, state, runs).await.map(Some),
        }
    }

    /// Forgets cached tokens, e.g. after a `401 Unauthorized`, so the next
    /// [`authorization`](Self::authorization) re-reads the token file or runs the exec plugin
    /// again. Fixed credentials are unaffected.
    pub fn invalidate(&self) {
        self.inner.epoch.fetch_add(1, Ordering::SeqCst);
    }

    fn epoch(&self) -> u64 {
        self.inner.epoch.load(Ordering::SeqCst)
    }

    async fn file_token(
        &self,
        path: &PathBuf,
        cache: &Mutex<Option<FileToken>>,
    ) -> Result<HeaderValue> {
        let epoch = self.epoch();
        let previous = {
            let cached = cache.lock().unwrap_or_else(PoisonError::into_inner);
            match cached.as_ref() {
                Some(t) if t.epoch == epoch && t.read_at.elapsed() < TOKEN_FILE_REREAD => {
                    return Ok(t.header.clone());
                }
                Some(t) if t.epoch == epoch => Some(t.header.clone()),
                _ => None,
            }
        };
        let header = match read_token_file(path).await {
            Ok(header) => header,
            Err(error) => match previous {
                Some(header) => {
                    tracing::warn!(
                        path = %path.display(),
                        error = %error,
                        "cannot re-read token file; keeping the previous token"
                    );
                    header
                }
                None => return Err(error),
            },
        };
        *cache.lock().unwrap_or_else(PoisonError::into_inner) = Some(FileToken {
            header: header.clone(),
            read_at: Instant::now(),
            epoch,
        });
        Ok(header)
    }

    async fn exec_token(
        &self,
        config: &ExecConfig,
        state: &tokio::sync::Mutex<ExecState>,
        runs: &AtomicU64,
    ) -> Result<HeaderValue> {
        let ticket = runs.load(Ordering::SeqCst);
        let mut state = state.lock().await;
        if let Some(token) = &state.token
            && token.epoch == self.epoch()
            && exec::is_fresh(token.expires, SystemTime::now())
        {
            return Ok(token.header.clone());
        }
        if runs.load(Ordering::SeqCst) != ticket
            && let Some(last) = &state.last
        {
            // A run finished while this caller waited: share its outcome.
            return last.clone().map_err(Error::Shared);
        }
        let outcome = exec::run(config).await.and_then(|credential| {
            let value =
                header(&format!("Bearer {}", credential.token.expose())).ok_or_else(|| {
                    Error::InvalidHeader {
                        origin: format!("exec plugin {}", config.command.display()),
                    }
                })?;
            Ok((value, credential.expires))
        });
        runs.fetch_add(1, Ordering::SeqCst);
        match outcome {
            Ok((value, expires)) => {
                state.token = Some(ExecToken {
                    header: value.clone(),
                    expires,
                    epoch: self.epoch(),
                });
                state.last = Some(Ok(value.clone()));
                Ok(value)
            }
            Err(error) => {
                let error = Arc::new(error);
                state.token = None;
                state.last = Some(Err(error.clone()));
                Err(Error::Shared(error))
            }
        }
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.inner.kind {
            Kind::None => "none".to_owned(),
            Kind::Static(_) => "static".to_owned(),
            Kind::TokenFile { path, .. } => format!("token file {}", path.display()),
            Kind::Exec { config, .. } => format!("exec plugin {}", config.command.display()),
        };
        f.debug_struct("Credentials").field("kind", &kind).finish()
    }
}

/// A sensitive header value, or `None` if `value` cannot be a header.
fn header(value: &str) -> Option<HeaderValue> {
    let mut value = HeaderValue::from_str(value).ok()?;
    value.set_sensitive(true);
    Some(value)
}

async fn read_token_file(path: &PathBuf) -> Result<HeaderValue> {
    let what = "token file";
    let text = tokio::fs::read_to_string(path)
        .await
        .map_err(|source| Error::ReadFile {
            what: what.to_owned(),
            path: path.clone(),
            source,
        })?;
    let token = text.trim();
    if token.is_empty() {
        return Err(Error::EmptyToken {
            what: what.to_owned(),
            path: path.clone(),
        });
    }
    header(&format!("Bearer {token}")).ok_or_else(|| Error::InvalidHeader {
        origin: format!("{what} {}", path.display()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_file(name: &str, contents: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("cr-auth-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("token");
        std::fs::write(&path, contents).unwrap();
        path
    }

    #[tokio::test]
    async fn basic_auth_is_base64_of_user_colon_password() {
        let credentials = Credentials::new(Auth::Basic {
            username: "admin".into(),
            password: Secret::new("pa:ss"),
        });
        let value = credentials.authorization().await.unwrap().unwrap();
        assert_eq!(value, "Basic YWRtaW46cGE6c3M=");
        assert!(value.is_sensitive());
    }

    #[tokio::test]
    async fn no_auth_sends_no_header() {
        let credentials = Credentials::new(Auth::None);
        assert_eq!(credentials.authorization().await.unwrap(), None);
    }

    #[tokio::test]
    async fn bearer_token_with_newline_is_an_error_without_the_token() {
        let credentials = Credentials::new(Auth::Bearer(Secret::new("abc\ndef")));
        let error = credentials.authorization().await.unwrap_err();
        assert_eq!(
            error.to_string(),
            "bearer token: credential is not a valid HTTP header value"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn token_file_is_reread_after_a_minute() {
        let path = temp_file("minute", "one\n");
        let credentials = Credentials::new(Auth::TokenFile(path.clone()));
        assert_eq!(
            credentials.authorization().await.unwrap().unwrap(),
            "Bearer one"
        );

        std::fs::write(&path, "two").unwrap();
        tokio::time::advance(TOKEN_FILE_REREAD - Duration::from_secs(1)).await;
        assert_eq!(
            credentials.authorization().await.unwrap().unwrap(),
            "Bearer one"
        );

        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(
            credentials.authorization().await.unwrap().unwrap(),
            "Bearer two"
        );
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn token_file_keeps_previous_token_when_periodic_reread_fails() {
        let path = temp_file("keep", "one");
        let credentials = Credentials::new(Auth::TokenFile(path.clone()));
        assert_eq!(
            credentials.authorization().await.unwrap().unwrap(),
            "Bearer one"
        );

        std::fs::remove_file(&path).unwrap();
        tokio::time::advance(TOKEN_FILE_REREAD).await;
        assert_eq!(
            credentials.authorization().await.unwrap().unwrap(),
            "Bearer one"
        );

        // After an invalidate the old token is not trusted any more.
        credentials.invalidate();
        let error = credentials.authorization().await.unwrap_err();
        assert_eq!(
            error.to_string(),
            format!("token file {}: no such file", path.display())
        );
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }

    #[test]
    fn debug_hides_secrets() {
        let auth = Auth::Basic {
            username: "admin".into(),
            password: Secret::new("hunter2"),
        };
        let text = format!("{auth:?} {:?}", Credentials::new(auth.clone()));
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains("admin"), "{text}");
    }
}
