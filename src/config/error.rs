//! The configuration error type: every message names the file and the field at fault.

use std::io;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

/// The result of loading configuration or producing credentials.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why configuration could not be loaded, or credentials could not be produced.
///
/// Messages start with where the problem is: `kubeconfig /path/to/file` and the field inside it
/// (`users[admin].client-key-data`), `in-cluster`, `token file /path` or `exec plugin /path`.
/// They never contain a token, a password, a private key or other secret values.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// [`Config::infer`](super::Config::infer) found neither a kubeconfig nor an in-cluster
    /// service account; `attempts` holds why each source failed, in the order tried.
    #[error("no Kubernetes configuration found: {}", join_errors(.attempts))]
    NoConfiguration {
        /// Why each source failed: the kubeconfig search, then in-cluster.
        attempts: Vec<Error>,
    },

    /// No kubeconfig file exists where one was looked for (`KUBECONFIG`, `~/.kube/config`).
    #[error("no kubeconfig found: {reason}")]
    NoKubeconfig {
        /// Where the search looked.
        reason: String,
    },

    /// A file could not be read: a kubeconfig, a file a kubeconfig names, an in-cluster file,
    /// or a token file.
    #[error("{what} {}: {}", .path.display(), io_reason(.source))]
    ReadFile {
        /// What the file is and who named it, e.g. `kubeconfig /k.yaml: users[me].client-key`.
        what: String,
        /// The file that could not be read.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },

    /// A kubeconfig file is not text, not YAML, or not shaped like a kubeconfig.
    #[error("kubeconfig {}: invalid YAML: {source}", .path.display())]
    Yaml {
        /// The kubeconfig file.
        path: PathBuf,
        /// The parser's error, with its line and column.
        #[source]
        source: Box<serde_saphyr::Error>,
    },

    /// A context, cluster or user that was asked for is not defined.
    #[error("{origin}: {kind} {name:?} not found (known: {})", join_names(.known))]
    NotFound {
        /// Where it was looked for, e.g. `kubeconfig /a.yaml, /b.yaml`.
        origin: String,
        /// `context`, `cluster` or `user`.
        kind: &'static str,
        /// The name asked for.
        name: String,
        /// The names that are defined, sorted.
        known: Vec<String>,
    },

    /// No context was chosen and the kubeconfig has no `current-context`.
    #[error("{origin}: no context chosen and current-context is not set")]
    NoContext {
        /// The kubeconfig, e.g. `kubeconfig /a.yaml`.
        origin: String,
    },

    /// A field is missing, or holds a value that cannot be used.
    #[error("{origin}: {field}: {problem}")]
    Invalid {
        /// Where the field is: `kubeconfig /a.yaml` or `in-cluster`.
        origin: String,
        /// The field, e.g. `clusters[dev].server`.
        field: String,
        /// What is wrong with it; never the value of a secret.
        problem: String,
    },

    /// A `-data` field is not valid base64.
    #[error("{origin}: {field}: invalid base64: {source}")]
    Base64 {
        /// Where the field is, e.g. `kubeconfig /a.yaml`.
        origin: String,
        /// The field, e.g. `users[admin].client-certificate-data`.
        field: String,
        /// The decoder's error.
        #[source]
        source: base64::DecodeError,
    },

    /// PEM text is malformed.
    #[error("{origin}: {field}: invalid PEM: {}", pem_problem(.source))]
    Pem {
        /// Where the field is, e.g. `kubeconfig /a.yaml` or `in-cluster`.
        origin: String,
        /// The field (and the file, for the file forms).
        field: String,
        /// The parser's error.
        #[source]
        source: rustls_pki_types::pem::Error,
    },

    /// An environment variable that in-cluster configuration needs is unset or empty.
    #[error("in-cluster: environment variable {name} is not set")]
    MissingEnv {
        /// The variable, `KUBERNETES_SERVICE_HOST` or `KUBERNETES_SERVICE_PORT`.
        name: &'static str,
    },

    /// A token file holds nothing but whitespace.
    #[error("{what} {}: empty", .path.display())]
    EmptyToken {
        /// Who reads the file: `token file` or `in-cluster`.
        what: String,
        /// The file.
        path: PathBuf,
    },

    /// A token or password cannot be sent in an HTTP header (it holds a control character).
    #[error("{origin}: credential is not a valid HTTP header value")]
    InvalidHeader {
        /// Where the credential came from, e.g. `bearer token` or `exec plugin /bin/p`.
        origin: String,
    },

    /// An exec credential plugin could not be started.
    #[error("exec plugin {}: {}", .command.display(), start_reason(.source, .install_hint))]
    ExecStart {
        /// The command.
        command: PathBuf,
        /// The kubeconfig's `installHint`, shown when the command is not found.
        install_hint: Option<String>,
        /// The I/O error from spawning it.
        #[source]
        source: io::Error,
    },

    /// An exec credential plugin did not finish in time; it was killed.
    #[error("exec plugin {}: no answer within {}s", .command.display(), .timeout.as_secs())]
    ExecTimeout {
        /// The command.
        command: PathBuf,
        /// How long it was given.
        timeout: Duration,
    },

    /// An exec credential plugin exited unsuccessfully.
    #[error("exec plugin {} failed ({status}): {}", .command.display(), stderr_or_none(.stderr))]
    ExecFailed {
        /// The command.
        command: PathBuf,
        /// Its exit status.
        status: ExitStatus,
        /// What it wrote to stderr, trimmed.
        stderr: String,
    },

    /// An exec credential plugin printed something that is not a usable `ExecCredential`.
    #[error("exec plugin {}: {problem}", .command.display())]
    ExecResponse {
        /// The command.
        command: PathBuf,
        /// What is wrong with its output; never the token itself.
        problem: String,
    },

    /// A failure shared by several callers: concurrent
    /// [`Credentials::authorization`](super::Credentials::authorization) calls wait for one
    /// exec plugin run and all receive its error.
    #[error(transparent)]
    Shared(Arc<Error>),
}

/// Describes an I/O error in a few stable words.
fn io_reason(error: &io::Error) -> String {
    match error.kind() {
        io::ErrorKind::NotFound => "no such file".to_owned(),
        io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
        io::ErrorKind::IsADirectory => "is a directory".to_owned(),
        _ => error.to_string(),
    }
}

/// Describes a PEM error in words (the parser's own message shows markers as byte lists).
fn pem_problem(error: &rustls_pki_types::pem::Error) -> String {
    use rustls_pki_types::pem::Error as Pem;
    match error {
        Pem::MissingSectionEnd { end_marker } => format!(
            "no END line for the {} section",
            String::from_utf8_lossy(end_marker)
        ),
        Pem::IllegalSectionStart { line } => {
            format!("malformed BEGIN line {:?}", String::from_utf8_lossy(line))
        }
        Pem::Base64Decode(error) => format!("bad base64 inside a section: {error}"),
        other => other.to_string(),
    }
}

fn start_reason(error: &io::Error, install_hint: &Option<String>) -> String {
    match (error.kind(), install_hint) {
        (io::ErrorKind::NotFound, Some(hint)) => format!("command not found; {}", hint.trim()),
        (io::ErrorKind::NotFound, None) => "command not found".to_owned(),
        _ => format!("cannot run: {}", io_reason(error)),
    }
}

fn stderr_or_none(stderr: &str) -> &str {
    if stderr.is_empty() {
        "nothing on stderr"
    } else {
        stderr
    }
}

fn join_names(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

fn join_errors(errors: &[Error]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_file_reads_as_no_such_file() {
        let error = Error::ReadFile {
            what: "kubeconfig /k.yaml: clusters[a].certificate-authority".to_owned(),
            path: PathBuf::from("/x/ca.pem"),
            source: io::Error::from(io::ErrorKind::NotFound),
        };
        assert_eq!(
            error.to_string(),
            "kubeconfig /k.yaml: clusters[a].certificate-authority /x/ca.pem: no such file"
        );
    }

    #[test]
    fn not_found_lists_known_names_or_none() {
        let error = |known: Vec<String>| Error::NotFound {
            origin: "kubeconfig /c.yaml".to_owned(),
            kind: "context",
            name: "nope".to_owned(),
            known,
        };
        assert_eq!(
            error(vec!["a".into(), "b".into()]).to_string(),
            r#"kubeconfig /c.yaml: context "nope" not found (known: a, b)"#
        );
        assert_eq!(
            error(vec![]).to_string(),
            r#"kubeconfig /c.yaml: context "nope" not found (known: none)"#
        );
    }

    #[test]
    fn missing_plugin_shows_install_hint() {
        let error = Error::ExecStart {
            command: PathBuf::from("kubectl-oidc"),
            install_hint: Some("install it with brew\n".to_owned()),
            source: io::Error::from(io::ErrorKind::NotFound),
        };
        assert_eq!(
            error.to_string(),
            "exec plugin kubectl-oidc: command not found; install it with brew"
        );
    }

    #[test]
    fn shared_error_reads_like_the_original() {
        let original = Error::MissingEnv {
            name: "KUBERNETES_SERVICE_HOST",
        };
        let text = original.to_string();
        assert_eq!(Error::Shared(Arc::new(original)).to_string(), text);
    }
}
