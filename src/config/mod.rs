//! Where the client's configuration comes from: kubeconfig files and the in-cluster service
//! account, loaded in kubectl's order.
//!
//! # Loading order
//!
//! [`Config::infer`] looks where kubectl looks and takes the first that exists:
//!
//! 1. the files listed in `KUBECONFIG` (separated like `PATH`), merged: for every cluster,
//!    context and user the first file to define a name wins, and the first non-empty
//!    `current-context` wins; files that do not exist are skipped;
//! 2. otherwise `~/.kube/config`;
//! 3. otherwise, when no kubeconfig exists (or it defines nothing), the in-cluster service
//!    account: `KUBERNETES_SERVICE_HOST` and `KUBERNETES_SERVICE_PORT`, and the token, CA and
//!    namespace under [`SERVICE_ACCOUNT_DIR`].
//!
//! A kubeconfig that exists but is broken is an error, not a reason to try in-cluster. An
//! explicit path (kubectl's `--kubeconfig`) goes through [`Config::from_kubeconfig`] with
//! [`KubeconfigOptions::path`], which reads only that file.
//!
//! # The types
//!
//! ```text
//!  kubeconfig files ──Kubeconfig::read/merge──▶ Kubeconfig ──Config::resolve──┐
//!                                                (raw YAML model)            ▼
//!  service account ──────────────Config::incluster──────────────────────▶ Config
//!                                                   (URL, roots, Identity, Auth)
//!                                                                            │ .auth
//!                                               Credentials::new(auth) ◀─────┘
//!                                      authorization() → "Bearer …" header, refreshed
//! ```
//!
//! - [`Kubeconfig`] is the file as written (see the [`kubeconfig`] module), with relative paths
//!   made absolute and each entry remembering its file.
//! - [`Config`] is resolved: files read, base64 decoded, PEM parsed, ready for TLS.
//! - [`Auth`] says how to authenticate; [`Credentials`] turns it into an `Authorization`
//!   header at request time, re-reading token files and re-running exec plugins as they
//!   expire.
//! - [`Error`] names the file and the field at fault. Secrets ([`Secret`], private keys, exec
//!   environment values) never appear in `Debug` output, errors or logs.
//!
//! ```no_run
//! use controller_runtime::config::{Config, KubeconfigOptions};
//!
//! // As kubectl would, with no flags.
//! let config = Config::infer()?;
//! println!("talking to {} as configured by {}", config.cluster_url, config.source);
//!
//! // As `kubectl --kubeconfig ./dev.yaml --context staging`.
//! let config = Config::from_kubeconfig(&KubeconfigOptions {
//!     path: Some("dev.yaml".into()),
//!     context: Some("staging".into()),
//!     ..KubeconfigOptions::default()
//! })?;
//! # Ok::<(), controller_runtime::config::Error>(())
//! ```

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;

use rustls_pki_types::{CertificateDer, PrivateKeyDer};

mod auth;
mod error;
mod exec;
mod incluster;
pub mod kubeconfig;
mod resolve;

pub use auth::{
    Auth, Credentials, ExecCluster, ExecConfig, InteractiveMode, Secret, TOKEN_FILE_REREAD,
};
pub use error::{Error, Result};
pub(crate) use exec::parse_credential;
pub use incluster::SERVICE_ACCOUNT_DIR;
pub use kubeconfig::Kubeconfig;

/// Everything the client needs to reach one API server as one user. Resolved: files read,
/// base64 decoded, PEM parsed.
#[derive(Clone)]
pub struct Config {
    /// The API server, e.g. `https://127.0.0.1:6443`; may carry a path prefix.
    pub cluster_url: http::Uri,
    /// The context's namespace, or the in-cluster namespace file, else `default`.
    pub default_namespace: String,
    /// CA certificates to trust for the server: these and no others. The platform's roots are
    /// never consulted (this crate carries no root store), so when this is empty an `https`
    /// server can only be reached with `accept_invalid_certs`, and [`Client::new`] refuses
    /// to build a client otherwise.
    ///
    /// [`Client::new`]: crate::client::Client::new
    pub root_certs: Vec<CertificateDer<'static>>,
    /// Skip verifying the server's certificate (`insecure-skip-tls-verify`).
    pub accept_invalid_certs: bool,
    /// The name to verify the server's certificate against, instead of the URL's host.
    pub tls_server_name: Option<String>,
    /// A client certificate to present.
    pub identity: Option<Identity>,
    /// How requests are authenticated; give it to [`Credentials::new`].
    pub auth: Auth,
    /// Where this came from, for logs and errors: `kubeconfig /path (context foo)` or
    /// `in-cluster`.
    pub source: String,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("cluster_url", &self.cluster_url)
            .field("default_namespace", &self.default_namespace)
            .field(
                "root_certs",
                &format!("{} certificate(s)", self.root_certs.len()),
            )
            .field("accept_invalid_certs", &self.accept_invalid_certs)
            .field("tls_server_name", &self.tls_server_name)
            .field("identity", &self.identity)
            .field("auth", &self.auth)
            .field("source", &self.source)
            .finish()
    }
}

/// A client certificate chain and its private key. `Debug` does not show the key.
pub struct Identity {
    /// The client certificate first, then any intermediates.
    pub cert_chain: Vec<CertificateDer<'static>>,
    /// The private key of the first certificate.
    pub key: PrivateKeyDer<'static>,
}

impl Identity {
    /// When the client certificate (the first of the chain) stops being valid: its
    /// `notAfter`, read from the DER. `None` when there is no certificate or it cannot be
    /// read. The API server refuses an expired client certificate with a bare 401, so a
    /// caller that meets one can check this to say why.
    pub fn not_after(&self) -> Option<std::time::SystemTime> {
        x509_not_after(self.cert_chain.first()?.as_ref())
    }
}

/// The `notAfter` of a DER certificate: `Certificate ::= SEQUENCE { tbsCertificate
/// SEQUENCE { [0] version OPTIONAL, serialNumber, signature, issuer, validity SEQUENCE {
/// notBefore, notAfter }, … } … }`, with UTCTime or GeneralizedTime in UTC.
fn x509_not_after(der: &[u8]) -> Option<std::time::SystemTime> {
    /// One DER element: its tag, its contents and what follows it.
    fn element(der: &[u8]) -> Option<(u8, &[u8], &[u8])> {
        let (&tag, rest) = der.split_first()?;
        let (&first, rest) = rest.split_first()?;
        let (len, rest) = if first < 0x80 {
            (usize::from(first), rest)
        } else {
            let n = usize::from(first & 0x7f);
            if n == 0 || n > 4 || rest.len() < n {
                return None;
            }
            let len = rest[..n]
                .iter()
                .fold(0usize, |l, &b| (l << 8) | usize::from(b));
            (len, &rest[n..])
        };
        (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
    }
    let (_, certificate, _) = element(der)?;
    let (_, mut tbs, _) = element(certificate)?;
    if tbs.first() == Some(&0xa0) {
        tbs = element(tbs)?.2; // the version
    }
    for _ in 0..3 {
        tbs = element(tbs)?.2; // serialNumber, signature, issuer
    }
    let (_, validity, _) = element(tbs)?;
    let (_, _, after) = element(validity)?;
    let (tag, time, _) = element(after)?;
    let time = std::str::from_utf8(time).ok()?.strip_suffix('Z')?;
    let (year, rest) = match tag {
        0x17 => {
            let yy: i64 = time.get(..2)?.parse().ok()?;
            (if yy < 50 { 2000 + yy } else { 1900 + yy }, time.get(2..)?)
        }
        0x18 => (time.get(..4)?.parse().ok()?, time.get(4..)?),
        _ => return None,
    };
    let field = |i: usize| -> Option<i64> { rest.get(i..i + 2)?.parse().ok() };
    let (month, day) = (field(0)?, field(2)?);
    let seconds = field(4)? * 3600 + field(6)? * 60 + field(8)?;
    // Days from 1970-01-01 to the civil date (Howard Hinnant's `days_from_civil`).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let since_epoch = u64::try_from(days * 86_400 + seconds).ok()?;
    Some(std::time::UNIX_EPOCH + std::time::Duration::from_secs(since_epoch))
}

impl Clone for Identity {
    fn clone(&self) -> Identity {
        Identity {
            cert_chain: self.cert_chain.clone(),
            key: self.key.clone_key(),
        }
    }
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identity")
            .field(
                "cert_chain",
                &format!("{} certificate(s)", self.cert_chain.len()),
            )
            .field("key", &"***")
            .finish()
    }
}

/// What to load from kubeconfig files, like kubectl's `--kubeconfig`, `--context`,
/// `--cluster` and `--user` flags.
#[derive(Clone, Debug, Default)]
pub struct KubeconfigOptions {
    /// Read only this file. `None` means `KUBECONFIG`, else `~/.kube/config`.
    pub path: Option<PathBuf>,
    /// The context to use instead of `current-context`.
    pub context: Option<String>,
    /// The cluster to use instead of the context's.
    pub cluster: Option<String>,
    /// The user to use instead of the context's.
    pub user: Option<String>,
}

impl Config {
    /// Loads configuration the way kubectl does with no flags: `KUBECONFIG`, then
    /// `~/.kube/config`, then in-cluster. See the [module docs](self) for the details.
    ///
    /// # Errors
    ///
    /// [`Error::NoConfiguration`] listing why each source failed when none is usable; or the
    /// error from a kubeconfig that exists but cannot be loaded.
    pub fn infer() -> Result<Config> {
        infer_with(&Environment::from_process())
    }

    /// Loads configuration from kubeconfig files only: `options.path` if set, else the files in
    /// `KUBECONFIG` (merged), else `~/.kube/config`; then resolves the context `options`
    /// chooses (see [`Config::resolve`]).
    ///
    /// # Errors
    ///
    /// [`Error::NoKubeconfig`] when no file is found, and anything [`Kubeconfig::read`] or
    /// [`Config::resolve`] reports.
    pub fn from_kubeconfig(options: &KubeconfigOptions) -> Result<Config> {
        let kubeconfig = match &options.path {
            Some(path) => Kubeconfig::read(path)?,
            None => Kubeconfig::from_env()?,
        };
        Config::resolve(&kubeconfig, options)
    }
}

impl Kubeconfig {
    /// Reads the kubeconfig kubectl would use without `--kubeconfig`: the files in
    /// `KUBECONFIG` merged (see [`Kubeconfig::read_merged`]), or `~/.kube/config` when
    /// `KUBECONFIG` is unset or empty.
    ///
    /// # Errors
    ///
    /// [`Error::NoKubeconfig`] when no file is found, else the first read or parse error.
    pub fn from_env() -> Result<Kubeconfig> {
        kubeconfig_with(&Environment::from_process())
    }
}

// === loading order, with the environment passed in ===

/// The parts of the process environment that loading reads, so tests can supply their own.
#[derive(Clone, Debug)]
pub(crate) struct Environment {
    /// `KUBECONFIG`.
    pub(crate) kubeconfig: Option<OsString>,
    /// The home directory.
    pub(crate) home: Option<PathBuf>,
    /// `KUBERNETES_SERVICE_HOST`.
    pub(crate) service_host: Option<String>,
    /// `KUBERNETES_SERVICE_PORT`.
    pub(crate) service_port: Option<String>,
    /// Where the service-account files are.
    pub(crate) service_account_dir: PathBuf,
}

impl Environment {
    fn from_process() -> Environment {
        Environment {
            kubeconfig: std::env::var_os("KUBECONFIG"),
            home: std::env::home_dir(),
            service_host: std::env::var("KUBERNETES_SERVICE_HOST").ok(),
            service_port: std::env::var("KUBERNETES_SERVICE_PORT").ok(),
            service_account_dir: PathBuf::from(SERVICE_ACCOUNT_DIR),
        }
    }
}

fn kubeconfig_with(env: &Environment) -> Result<Kubeconfig> {
    if let Some(list) = env.kubeconfig.as_ref().filter(|v| !v.is_empty()) {
        let paths: Vec<PathBuf> = std::env::split_paths(list).collect();
        return Kubeconfig::read_merged(&paths).map_err(|error| match error {
            Error::NoKubeconfig { reason } => Error::NoKubeconfig {
                reason: format!("KUBECONFIG names no existing file ({reason})"),
            },
            other => other,
        });
    }
    let home = env.home.as_deref().ok_or_else(|| Error::NoKubeconfig {
        reason: "KUBECONFIG is not set and there is no home directory".to_owned(),
    })?;
    let path = home.join(".kube").join("config");
    Kubeconfig::read(&path).map_err(|error| match error {
        Error::ReadFile { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            Error::NoKubeconfig {
                reason: format!(
                    "KUBECONFIG is not set and {} does not exist",
                    path.display()
                ),
            }
        }
        other => other,
    })
}

fn infer_with(env: &Environment) -> Result<Config> {
    let skipped = match kubeconfig_with(env) {
        Ok(kubeconfig) if !kubeconfig.is_empty() => {
            return Config::resolve(&kubeconfig, &KubeconfigOptions::default());
        }
        Ok(kubeconfig) => Error::NoKubeconfig {
            reason: format!("{} defines nothing", kubeconfig.origin()),
        },
        Err(error @ Error::NoKubeconfig { .. }) => error,
        Err(error) => return Err(error),
    };
    incluster::incluster_with(env).map_err(|incluster| Error::NoConfiguration {
        attempts: vec![skipped, incluster],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client certificate valid from 2020-01-01 to 2020-01-02 (UTCTime).
    const EXPIRED_CLIENT_CERT: &str = "\
-----BEGIN CERTIFICATE-----
MIIBuTCCAV+gAwIBAgIBATAKBggqhkjOPQQDAjAnMRAwDgYDVQQKEwd0ZXN0ZW52
MRMwEQYDVQQDEwp0ZXN0ZW52LWNhMB4XDTIwMDEwMTAwMDAwMFoXDTIwMDEwMjAw
MDAwMFowMTEXMBUGA1UECgwOc3lzdGVtOm1hc3RlcnMxFjAUBgNVBAMMDWV4cGly
ZWQtYWRtaW4wWTATBgcqhkjOPQIBBggqhkjOPQMBBwNCAAQOZjDtFRL6ha6aIfdS
/g561n89NFmVDr7aDwqja9MeaSaghNVulO4JqnjLaUmFsPM3hO6m2dgolFmR3wWA
04mUo3IwcDATBgNVHSUEDDAKBggrBgEFBQcDAjAOBgNVHQ8BAf8EBAMCB4AwCQYD
VR0TBAIwADAdBgNVHQ4EFgQUJOU1IWB+QPxBHIg6UwklZQnvWwIwHwYDVR0jBBgw
FoAU18O7S+lVJ65tzpOD8zzNaxux5FEwCgYIKoZIzj0EAwIDSAAwRQIgHYgzAemY
GOzdkIjCGAkthW0jiRMWqfVFPS3QxYpPZ5QCIQD379DCDffijO4wooToyxHLap5l
gU4foRyx5mnuOOcpyA==
-----END CERTIFICATE-----";

    fn identity(pem: &str) -> Identity {
        use rustls_pki_types::pem::PemObject;
        Identity {
            cert_chain: vec![CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()],
            key: PrivateKeyDer::from_pem_slice(include_bytes!("../../testdata/tls/server-key.pem"))
                .unwrap(),
        }
    }

    #[test]
    fn not_after_reads_utc_and_generalized_times() {
        let expired = identity(EXPIRED_CLIENT_CERT).not_after().unwrap();
        assert_eq!(
            expired
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs(),
            1_577_923_200 // 2020-01-02T00:00:00Z
        );
        let far = identity(include_str!("../../testdata/tls/server.pem"))
            .not_after()
            .unwrap();
        assert_eq!(
            far.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs(),
            4_949_022_176 // 2126-10-30T08:22:56Z
        );
        assert_eq!(x509_not_after(b"\x30\x03\x02\x01"), None);
    }

    /// A scratch directory, removed on drop.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let dir = std::env::temp_dir().join(format!("cr-config-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Scratch(dir)
        }

        fn write(&self, name: &str, text: &str) -> PathBuf {
            let path = self.0.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, text).unwrap();
            path
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn env(scratch: &Scratch) -> Environment {
        Environment {
            kubeconfig: None,
            home: Some(scratch.0.join("home")),
            service_host: None,
            service_port: None,
            service_account_dir: scratch.0.join("sa"),
        }
    }

    fn kubeconfig(server: &str) -> String {
        format!(
            "current-context: c
clusters: [{{name: c, cluster: {{server: '{server}'}}}}]
contexts: [{{name: c, context: {{cluster: c}}}}]
"
        )
    }

    #[test]
    fn shared_types_can_cross_threads() {
        fn send_sync<T: Send + Sync + 'static>() {}
        send_sync::<Config>();
        send_sync::<Credentials>();
        send_sync::<Error>();
        send_sync::<Kubeconfig>();
    }

    #[test]
    fn kubeconfig_env_wins_over_home() {
        let scratch = Scratch::new("env-wins");
        scratch.write("home/.kube/config", &kubeconfig("https://home"));
        let listed = scratch.write("listed.yaml", &kubeconfig("https://listed"));
        let mut env = env(&scratch);
        env.kubeconfig =
            Some(std::env::join_paths([scratch.0.join("missing.yaml"), listed.clone()]).unwrap());
        let config = infer_with(&env).unwrap();
        assert_eq!(config.cluster_url, "https://listed/");
        assert_eq!(
            config.source,
            format!("kubeconfig {} (context c)", listed.display())
        );
    }

    #[test]
    fn home_config_is_used_when_kubeconfig_env_is_empty() {
        let scratch = Scratch::new("home");
        scratch.write("home/.kube/config", &kubeconfig("https://home"));
        let mut env = env(&scratch);
        env.kubeconfig = Some(OsString::new());
        assert_eq!(infer_with(&env).unwrap().cluster_url, "https://home/");
    }

    #[test]
    fn in_cluster_is_used_when_no_kubeconfig_exists() {
        let scratch = Scratch::new("incluster");
        scratch.write("sa/token", "tok\n");
        scratch.write(
            "sa/ca.crt",
            include_str!("../../testdata/kubeconfig/test-only-ca.pem"),
        );
        let mut env = env(&scratch);
        env.service_host = Some("10.96.0.1".to_owned());
        env.service_port = Some("443".to_owned());
        let config = infer_with(&env).unwrap();
        assert_eq!(config.source, "in-cluster");
        assert_eq!(config.cluster_url, "https://10.96.0.1:443/");
    }

    #[test]
    fn empty_kubeconfig_falls_through_to_in_cluster() {
        let scratch = Scratch::new("empty");
        let empty = scratch.write("home/.kube/config", "");
        let error = infer_with(&env(&scratch)).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "no Kubernetes configuration found: no kubeconfig found: kubeconfig {} \
                 defines nothing; in-cluster: environment variable KUBERNETES_SERVICE_HOST \
                 is not set",
                empty.display()
            )
        );
    }

    #[test]
    fn nothing_found_says_everything_tried() {
        let scratch = Scratch::new("nothing");
        let mut env = env(&scratch);
        env.service_host = Some("10.96.0.1".to_owned());
        let error = infer_with(&env).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "no Kubernetes configuration found: no kubeconfig found: KUBECONFIG is not set \
                 and {}/home/.kube/config does not exist; in-cluster: environment variable \
                 KUBERNETES_SERVICE_PORT is not set",
                scratch.0.display()
            )
        );

        env.kubeconfig = Some(scratch.0.join("a.yaml").into_os_string());
        let error = infer_with(&env).unwrap_err();
        assert!(
            error.to_string().starts_with(&format!(
                "no Kubernetes configuration found: no kubeconfig found: KUBECONFIG names no \
                 existing file ({}/a.yaml does not exist); in-cluster:",
                scratch.0.display()
            )),
            "{error}"
        );
    }

    #[test]
    fn broken_kubeconfig_is_reported_not_skipped() {
        let scratch = Scratch::new("broken");
        let path = scratch.write("home/.kube/config", "clusters: {oops");
        let mut env = env(&scratch);
        env.service_host = Some("10.96.0.1".to_owned());
        env.service_port = Some("443".to_owned());
        let error = infer_with(&env).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with(&format!("kubeconfig {}: invalid YAML: ", path.display())),
            "{error}"
        );
    }
}
