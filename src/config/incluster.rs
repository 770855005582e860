//! In-cluster configuration: the service-account token, CA and namespace a Pod is given.

use std::io;
use std::path::{Path, PathBuf};

use super::resolve::{parse_certs, parse_server};
use super::{Auth, Config, Environment, Error, Result};

/// Where Kubernetes mounts a Pod's service-account token, CA bundle and namespace.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

const ORIGIN: &str = "in-cluster";

impl Config {
    /// Configuration for a program running in a Pod: the API server from the
    /// `KUBERNETES_SERVICE_HOST` and `KUBERNETES_SERVICE_PORT` environment variables, and the
    /// service account's files in [`SERVICE_ACCOUNT_DIR`]. See
    /// [`incluster_from`](Self::incluster_from) for what is read.
    ///
    /// # Errors
    ///
    /// Either variable unset or empty, or [`incluster_from`](Self::incluster_from)'s errors.
    pub fn incluster() -> Result<Config> {
        incluster_with(&Environment::from_process())
    }

    /// In-cluster configuration from a service-account directory `dir` holding `token`,
    /// `ca.crt` and (optionally) `namespace`, and the API server at `host` (an IPv6 address
    /// is bracketed) and `port`. Tests point it at a directory of their own.
    ///
    /// The token is read once to check it is there, and the returned
    /// [`Auth::TokenFile`] makes the client re-read it as the kubelet rotates it. The
    /// namespace defaults to `default` when the file is absent.
    ///
    /// # Errors
    ///
    /// The token or CA file cannot be read, the token is empty, the CA holds no certificate,
    /// or `host` and `port` do not make a URL.
    pub fn incluster_from(dir: &Path, host: &str, port: &str) -> Result<Config> {
        let host = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]")
        } else {
            host.to_owned()
        };
        let cluster_url =
            parse_server(&format!("https://{host}:{port}")).map_err(|problem| Error::Invalid {
                origin: ORIGIN.to_owned(),
                field: "KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT".to_owned(),
                problem,
            })?;

        let token = dir.join("token");
        let text = std::fs::read(&token).map_err(|source| Error::ReadFile {
            what: ORIGIN.to_owned(),
            path: token.clone(),
            source,
        })?;
        if String::from_utf8_lossy(&text).trim().is_empty() {
            return Err(Error::EmptyToken {
                what: ORIGIN.to_owned(),
                path: token,
            });
        }

        let ca = dir.join("ca.crt");
        let ca_pem = std::fs::read(&ca).map_err(|source| Error::ReadFile {
            what: ORIGIN.to_owned(),
            path: ca.clone(),
            source,
        })?;
        let root_certs = parse_certs(ORIGIN, &ca.display().to_string(), &ca_pem)?;

        Ok(Config {
            cluster_url,
            default_namespace: read_namespace(&dir.join("namespace"))?,
            root_certs,
            accept_invalid_certs: false,
            tls_server_name: None,
            identity: None,
            auth: Auth::TokenFile(token),
            source: ORIGIN.to_owned(),
        })
    }
}

fn read_namespace(path: &PathBuf) -> Result<String> {
    match std::fs::read_to_string(path) {
        Ok(text) if !text.trim().is_empty() => Ok(text.trim().to_owned()),
        Ok(_) => Ok("default".to_owned()),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok("default".to_owned()),
        Err(source) => Err(Error::ReadFile {
            what: ORIGIN.to_owned(),
            path: path.clone(),
            source,
        }),
    }
}

/// [`Config::incluster`] with its environment passed in.
pub(crate) fn incluster_with(env: &Environment) -> Result<Config> {
    let required = |value: &Option<String>, name: &'static str| {
        value
            .clone()
            .filter(|v| !v.is_empty())
            .ok_or(Error::MissingEnv { name })
    };
    let host = required(&env.service_host, "KUBERNETES_SERVICE_HOST")?;
    let port = required(&env.service_port, "KUBERNETES_SERVICE_PORT")?;
    Config::incluster_from(&env.service_account_dir, &host, &port)
}
