//! The kubeconfig file model: serde types, reading a file, and kubectl's merge rules.
//!
//! These types mirror the YAML as written (`clientcmd/api/v1` in client-go), with every field
//! optional and unknown fields ignored, so any kubeconfig kubectl reads loads here too. Turning
//! one into a usable [`Config`](super::Config) is [`Config::resolve`](super::Config::resolve).
//!
//! Reading a file does two things beyond parsing: relative paths (`certificate-authority`,
//! `client-certificate`, `client-key`, `tokenFile`, and an exec `command` containing a `/`)
//! become absolute against the file's directory, and every named entry remembers the file it
//! came from, so errors found later still name the right file.

use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer};

use super::{Error, Result, Secret};

/// A kubeconfig: clusters, users (`AuthInfo`s) and the contexts that pair them.
///
/// ```
/// use controller_runtime::config::Kubeconfig;
/// use std::path::Path;
///
/// let yaml = "
/// current-context: dev
/// clusters:
/// - name: dev
///   cluster: {server: 'https://127.0.0.1:6443', certificate-authority: ca.pem}
/// contexts:
/// - name: dev
///   context: {cluster: dev, user: me, namespace: team}
/// users:
/// - name: me
///   user: {token: abc}
/// ";
/// let kubeconfig = Kubeconfig::from_yaml(yaml, Path::new("/home/me/.kube/config"))?;
/// let cluster = kubeconfig.clusters[0].cluster.as_ref().unwrap();
/// assert_eq!(
///     cluster.certificate_authority.as_deref(),
///     Some(Path::new("/home/me/.kube/ca.pem"))
/// );
/// # Ok::<(), controller_runtime::config::Error>(())
/// ```
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub struct Kubeconfig {
    /// The context used when none is chosen explicitly.
    #[serde(default)]
    pub current_context: Option<String>,
    /// Named clusters.
    #[serde(default, deserialize_with = "null_as_default")]
    pub clusters: Vec<NamedCluster>,
    /// Named contexts.
    #[serde(default, deserialize_with = "null_as_default")]
    pub contexts: Vec<NamedContext>,
    /// Named users.
    #[serde(default, deserialize_with = "null_as_default")]
    pub users: Vec<NamedAuthInfo>,
    /// The files this kubeconfig was read from, in merge order.
    #[serde(skip)]
    pub files: Vec<PathBuf>,
}

/// A cluster with its name.
#[derive(Clone, Debug, Default, Deserialize)]
#[non_exhaustive]
pub struct NamedCluster {
    /// The cluster's name.
    pub name: String,
    /// The cluster.
    #[serde(default)]
    pub cluster: Option<Cluster>,
    /// The file it was read from.
    #[serde(skip)]
    pub file: Option<PathBuf>,
}

/// How to reach an API server.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub struct Cluster {
    /// The API server's URL, e.g. `https://127.0.0.1:6443`.
    #[serde(default)]
    pub server: Option<String>,
    /// A PEM file of CA certificates to trust.
    #[serde(default)]
    pub certificate_authority: Option<PathBuf>,
    /// PEM CA certificates, base64; wins over `certificate_authority`.
    #[serde(default)]
    pub certificate_authority_data: Option<String>,
    /// Skip verifying the server's certificate.
    #[serde(default, deserialize_with = "null_as_default")]
    pub insecure_skip_tls_verify: bool,
    /// The name to verify the server's certificate against, instead of the URL's host.
    #[serde(default)]
    pub tls_server_name: Option<String>,
    /// A proxy to reach the server through.
    #[serde(default)]
    pub proxy_url: Option<String>,
    /// Ask the server not to compress responses.
    #[serde(default, deserialize_with = "null_as_default")]
    pub disable_compression: bool,
    /// Extra information for tools, e.g. for exec plugins under
    /// `client.authentication.k8s.io/exec`.
    #[serde(default, deserialize_with = "null_as_default")]
    pub extensions: Vec<NamedExtension>,
}

/// A named extension: free-form data for tools.
#[derive(Clone, Debug, Default, Deserialize)]
#[non_exhaustive]
pub struct NamedExtension {
    /// The extension's name.
    pub name: String,
    /// Its content.
    #[serde(default)]
    pub extension: serde_json::Value,
}

/// A context with its name.
#[derive(Clone, Debug, Default, Deserialize)]
#[non_exhaustive]
pub struct NamedContext {
    /// The context's name.
    pub name: String,
    /// The context.
    #[serde(default)]
    pub context: Option<Context>,
    /// The file it was read from.
    #[serde(skip)]
    pub file: Option<PathBuf>,
}

/// A cluster, a user and a default namespace.
#[derive(Clone, Debug, Default, Deserialize)]
#[non_exhaustive]
pub struct Context {
    /// The cluster's name.
    #[serde(default)]
    pub cluster: Option<String>,
    /// The user's name; none means no credentials.
    #[serde(default)]
    pub user: Option<String>,
    /// The namespace for requests that do not name one.
    #[serde(default)]
    pub namespace: Option<String>,
}

/// A user with its name.
#[derive(Clone, Debug, Default, Deserialize)]
#[non_exhaustive]
pub struct NamedAuthInfo {
    /// The user's name.
    pub name: String,
    /// The user.
    #[serde(default)]
    pub user: Option<AuthInfo>,
    /// The file it was read from.
    #[serde(skip)]
    pub file: Option<PathBuf>,
}

/// Who the client is: credentials for one user. Secret fields are [`Secret`]s, so `Debug`
/// never shows them.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub struct AuthInfo {
    /// A PEM file with the client certificate chain.
    #[serde(default)]
    pub client_certificate: Option<PathBuf>,
    /// The client certificate chain in PEM, base64; wins over `client_certificate`.
    #[serde(default)]
    pub client_certificate_data: Option<String>,
    /// A PEM file with the client's private key.
    #[serde(default)]
    pub client_key: Option<PathBuf>,
    /// The client's private key in PEM, base64; wins over `client_key`.
    #[serde(default)]
    pub client_key_data: Option<Secret>,
    /// A bearer token.
    #[serde(default)]
    pub token: Option<Secret>,
    /// A file holding a bearer token, re-read as it rotates.
    #[serde(default, rename = "tokenFile")]
    pub token_file: Option<PathBuf>,
    /// User name for basic authentication.
    #[serde(default)]
    pub username: Option<String>,
    /// Password for basic authentication.
    #[serde(default)]
    pub password: Option<Secret>,
    /// A credential plugin to run for a token.
    #[serde(default)]
    pub exec: Option<ExecSection>,
    /// A legacy auth provider (`gcp`, `oidc`, `azure`); only its name is kept, and using it is
    /// an error that points to exec plugins.
    #[serde(default)]
    pub auth_provider: Option<AuthProvider>,
    /// The user to impersonate (`as`); not supported, so setting it is an error.
    #[serde(default, rename = "as")]
    pub impersonate: Option<String>,
    /// The groups to impersonate (`as-groups`); not supported, so setting it is an error.
    #[serde(default, rename = "as-groups", deserialize_with = "null_as_default")]
    pub impersonate_groups: Vec<String>,
}

/// A legacy `auth-provider` entry; only its name is kept (its config holds tokens).
#[derive(Clone, Debug, Default, Deserialize)]
#[non_exhaustive]
pub struct AuthProvider {
    /// The provider's name, e.g. `gcp` or `oidc`.
    #[serde(default)]
    pub name: String,
}

/// A user's `exec` section: a credential plugin, as written in the file.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ExecSection {
    /// The `ExecCredential` API version the plugin speaks.
    #[serde(default)]
    pub api_version: Option<String>,
    /// The program to run.
    #[serde(default)]
    pub command: Option<PathBuf>,
    /// Its arguments.
    #[serde(default, deserialize_with = "null_as_default")]
    pub args: Vec<String>,
    /// Environment variables to add.
    #[serde(default, deserialize_with = "null_as_default")]
    pub env: Vec<ExecEnvVar>,
    /// Shown when the program is not installed.
    #[serde(default)]
    pub install_hint: Option<String>,
    /// Send the cluster's details to the plugin.
    #[serde(default, deserialize_with = "null_as_default")]
    pub provide_cluster_info: bool,
    /// `Never`, `IfAvailable` or `Always`.
    #[serde(default)]
    pub interactive_mode: Option<String>,
}

/// An environment variable for an exec plugin. `Debug` does not show its value.
#[derive(Clone, Default, Deserialize)]
#[non_exhaustive]
pub struct ExecEnvVar {
    /// The variable's name.
    pub name: String,
    /// Its value.
    #[serde(default)]
    pub value: String,
}

impl fmt::Debug for ExecEnvVar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}=***", self.name)
    }
}

// === impl Kubeconfig ===

impl Kubeconfig {
    /// Reads one kubeconfig file. A file with several YAML documents is read as their merge;
    /// an empty file is an empty kubeconfig.
    ///
    /// # Errors
    ///
    /// The file cannot be read, is not YAML shaped like a kubeconfig, or defines a name twice.
    pub fn read(path: impl AsRef<Path>) -> Result<Kubeconfig> {
        let path = std::path::absolute(path.as_ref()).unwrap_or_else(|_| path.as_ref().into());
        let bytes = std::fs::read(&path).map_err(|source| Error::ReadFile {
            what: "kubeconfig".to_owned(),
            path: path.clone(),
            source,
        })?;
        let text = decode_text(&bytes).ok_or_else(|| Error::Invalid {
            origin: format!("kubeconfig {}", path.display()),
            field: "file".to_owned(),
            problem: "not UTF-8 or UTF-16 text".to_owned(),
        })?;
        Kubeconfig::from_yaml(&text, &path)
    }

    /// Parses kubeconfig YAML as if it had been read from `path`, which names the file in
    /// errors and anchors relative paths; `path` itself is not read.
    ///
    /// # Errors
    ///
    /// The text is not YAML shaped like a kubeconfig, or defines a name twice.
    pub fn from_yaml(yaml: &str, path: &Path) -> Result<Kubeconfig> {
        let options = serde_saphyr::options! { with_snippet: false };
        let documents: Vec<Kubeconfig> = serde_saphyr::from_multiple_with_options(yaml, options)
            .map_err(|source| Error::Yaml {
                path: path.to_owned(),
                source: Box::new(source),
            })?;
        let dir = path.parent().unwrap_or(Path::new(""));
        let mut merged = Kubeconfig::default();
        for mut document in documents {
            document.check_unique_names(path)?;
            document.anchor(path, dir);
            merged = merged.merge(document);
        }
        merged.files = vec![path.to_owned()];
        Ok(merged)
    }

    /// Reads and merges several kubeconfig files, as kubectl does with `KUBECONFIG`: files
    /// that do not exist are skipped, duplicates and empty paths ignored, and the rules of
    /// [`merge`](Self::merge) apply in the order given.
    ///
    /// # Errors
    ///
    /// [`Error::NoKubeconfig`] if none of the files exists; otherwise the first file that
    /// cannot be read or parsed.
    pub fn read_merged<P: AsRef<Path>>(paths: impl IntoIterator<Item = P>) -> Result<Kubeconfig> {
        let mut seen = HashSet::new();
        let mut tried = Vec::new();
        let mut merged: Option<Kubeconfig> = None;
        for path in paths {
            let path = path.as_ref();
            if path.as_os_str().is_empty() || !seen.insert(path.to_owned()) {
                continue;
            }
            tried.push(path.display().to_string());
            let next = match Kubeconfig::read(path) {
                Ok(next) => next,
                Err(Error::ReadFile { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound =>
                {
                    continue;
                }
                Err(error) => return Err(error),
            };
            merged = Some(match merged {
                None => next,
                Some(first) => first.merge(next),
            });
        }
        merged.ok_or_else(|| Error::NoKubeconfig {
            reason: match tried.len() {
                0 => "no file named".to_owned(),
                1 => format!("{} does not exist", tried[0]),
                _ => format!("none of {} exists", tried.join(", ")),
            },
        })
    }

    /// Merges `other` into `self` with kubectl's rules: `self` wins. Its `current-context`
    /// stays unless empty; clusters, contexts and users from `other` are added only under
    /// names `self` does not define.
    pub fn merge(mut self, other: Kubeconfig) -> Kubeconfig {
        if self.current_context.as_deref().unwrap_or("").is_empty() {
            self.current_context = other.current_context;
        }
        add_new(&mut self.clusters, other.clusters, |c| &c.name);
        add_new(&mut self.contexts, other.contexts, |c| &c.name);
        add_new(&mut self.users, other.users, |u| &u.name);
        self.files.extend(other.files);
        self
    }

    /// Whether this defines nothing at all: no current context, clusters, contexts or users.
    pub fn is_empty(&self) -> bool {
        self.current_context.as_deref().unwrap_or("").is_empty()
            && self.clusters.is_empty()
            && self.contexts.is_empty()
            && self.users.is_empty()
    }

    /// How errors name this kubeconfig: `kubeconfig` and its files.
    pub(crate) fn origin(&self) -> String {
        describe(&self.files)
    }

    fn check_unique_names(&self, path: &Path) -> Result<()> {
        let duplicate = |section: &str, names: Vec<&String>| -> Result<()> {
            let mut seen = HashSet::new();
            match names.into_iter().find(|name| !seen.insert(*name)) {
                None => Ok(()),
                Some(name) => Err(Error::Invalid {
                    origin: format!("kubeconfig {}", path.display()),
                    field: section.to_owned(),
                    problem: format!("name {name:?} defined twice"),
                }),
            }
        };
        duplicate("clusters", self.clusters.iter().map(|c| &c.name).collect())?;
        duplicate("contexts", self.contexts.iter().map(|c| &c.name).collect())?;
        duplicate("users", self.users.iter().map(|u| &u.name).collect())
    }

    /// Records `path` on every entry and makes its relative paths absolute against `dir`.
    fn anchor(&mut self, path: &Path, dir: &Path) {
        for named in &mut self.clusters {
            named.file = Some(path.to_owned());
            if let Some(cluster) = &mut named.cluster {
                absolutize(dir, &mut cluster.certificate_authority);
            }
        }
        for named in &mut self.contexts {
            named.file = Some(path.to_owned());
        }
        for named in &mut self.users {
            named.file = Some(path.to_owned());
            if let Some(user) = &mut named.user {
                absolutize(dir, &mut user.client_certificate);
                absolutize(dir, &mut user.client_key);
                absolutize(dir, &mut user.token_file);
                if let Some(exec) = &mut user.exec
                    && let Some(command) = &mut exec.command
                    && command.is_relative()
                    && command.components().count() > 1
                {
                    *command = dir.join(&*command);
                }
            }
        }
    }
}

/// `kubeconfig` followed by the files, for messages.
pub(crate) fn describe(files: &[PathBuf]) -> String {
    let files: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    if files.is_empty() {
        "kubeconfig".to_owned()
    } else {
        format!("kubeconfig {}", files.join(", "))
    }
}

fn add_new<T>(into: &mut Vec<T>, from: Vec<T>, name: impl Fn(&T) -> &String) {
    let known: HashSet<String> = into.iter().map(|t| name(t).clone()).collect();
    into.extend(from.into_iter().filter(|t| !known.contains(name(t))));
}

fn absolutize(dir: &Path, path: &mut Option<PathBuf>) {
    if let Some(p) = path
        && !p.as_os_str().is_empty()
        && p.is_relative()
    {
        *p = dir.join(&*p);
    }
}

/// UTF-8 (with or without a byte-order mark) or UTF-16 with a byte-order mark, as kubectl
/// accepts.
pub(crate) fn decode_text(bytes: &[u8]) -> Option<String> {
    let utf16 = |rest: &[u8], from: fn([u8; 2]) -> u16| -> Option<String> {
        let units: Vec<u16> = rest
            .chunks(2)
            .map(|pair| from([pair[0], *pair.get(1).unwrap_or(&0)]))
            .collect();
        String::from_utf16(&units).ok()
    };
    match bytes {
        [0xEF, 0xBB, 0xBF, rest @ ..] => String::from_utf8(rest.to_vec()).ok(),
        [0xFF, 0xFE, rest @ ..] => utf16(rest, u16::from_le_bytes),
        [0xFE, 0xFF, rest @ ..] => utf16(rest, u16::from_be_bytes),
        _ => String::from_utf8(bytes.to_vec()).ok(),
    }
}

fn null_as_default<'de, D, T>(deserializer: D) -> std::result::Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Kubeconfig {
        Kubeconfig::from_yaml(yaml, Path::new("/k/dir/config")).unwrap()
    }

    #[test]
    fn relative_paths_resolve_against_the_files_directory() {
        let config = parse(
            "
clusters:
- name: c
  cluster: {certificate-authority: certs/ca.pem}
users:
- name: u
  user:
    client-certificate: ../tls.crt
    client-key: /abs/tls.key
    tokenFile: token
    exec: {command: ./bin/plugin}
- name: bare
  user:
    exec: {command: gcloud}
",
        );
        let cluster = config.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(
            cluster.certificate_authority.as_deref(),
            Some(Path::new("/k/dir/certs/ca.pem"))
        );
        let user = config.users[0].user.as_ref().unwrap();
        assert_eq!(
            user.client_certificate.as_deref(),
            Some(Path::new("/k/dir/../tls.crt"))
        );
        assert_eq!(user.client_key.as_deref(), Some(Path::new("/abs/tls.key")));
        assert_eq!(user.token_file.as_deref(), Some(Path::new("/k/dir/token")));
        let command = user.exec.as_ref().unwrap().command.as_deref();
        assert_eq!(command, Some(Path::new("/k/dir/./bin/plugin")));
        let bare = config.users[1]
            .user
            .as_ref()
            .unwrap()
            .exec
            .as_ref()
            .unwrap();
        assert_eq!(bare.command.as_deref(), Some(Path::new("gcloud")));
    }

    #[test]
    fn nulls_and_unknown_fields_are_accepted() {
        let config = parse(
            "
apiVersion: v1
kind: Config
preferences: {}
clusters: null
contexts:
- name: c
  context: {cluster: x, extensions: [{name: e, extension: {a: 1}}]}
users: ~
",
        );
        assert!(config.clusters.is_empty());
        assert_eq!(config.contexts[0].name, "c");
        assert!(config.users.is_empty());
    }

    #[test]
    fn empty_text_is_an_empty_kubeconfig() {
        assert!(parse("").is_empty());
        assert!(parse("# only a comment\n").is_empty());
    }

    #[test]
    fn merge_keeps_first_definition_and_first_current_context() {
        let first = parse(
            "
current-context: ''
clusters: [{name: shared, cluster: {server: 'https://first'}}]
",
        );
        let second = parse(
            "
current-context: second
clusters:
- {name: shared, cluster: {server: 'https://second'}}
- {name: extra, cluster: {server: 'https://extra'}}
",
        );
        let merged = first.merge(second);
        assert_eq!(merged.current_context.as_deref(), Some("second"));
        let servers: Vec<_> = merged
            .clusters
            .iter()
            .map(|c| {
                (
                    c.name.as_str(),
                    c.cluster.as_ref().unwrap().server.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            servers,
            [
                ("shared", Some("https://first")),
                ("extra", Some("https://extra"))
            ]
        );
    }

    #[test]
    fn documents_in_one_file_merge_in_order() {
        let config = parse(
            "
current-context: a
users: [{name: u, user: {username: first}}]
---
current-context: b
users: [{name: u, user: {username: second}}, {name: v}]
",
        );
        assert_eq!(config.current_context.as_deref(), Some("a"));
        assert_eq!(config.users.len(), 2);
        let first = config.users[0].user.as_ref().unwrap();
        assert_eq!(first.username.as_deref(), Some("first"));
        assert_eq!(config.files, [PathBuf::from("/k/dir/config")]);
    }

    #[test]
    fn a_name_defined_twice_in_one_file_is_an_error() {
        let error = Kubeconfig::from_yaml(
            "contexts: [{name: a}, {name: b}, {name: a}]",
            Path::new("/k/c.yaml"),
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            r#"kubeconfig /k/c.yaml: contexts: name "a" defined twice"#
        );
    }

    #[test]
    fn utf16_and_bom_are_decoded() {
        let text = "current-context: x\n";
        let mut le = vec![0xFF, 0xFE];
        le.extend(text.encode_utf16().flat_map(u16::to_le_bytes));
        let mut be = vec![0xFE, 0xFF];
        be.extend(text.encode_utf16().flat_map(u16::to_be_bytes));
        let mut bom = vec![0xEF, 0xBB, 0xBF];
        bom.extend(text.as_bytes());
        for bytes in [le, be, bom] {
            assert_eq!(decode_text(&bytes).as_deref(), Some(text));
        }
        assert_eq!(decode_text(&[0xC3, 0x28]), None);
    }

    #[test]
    fn debug_hides_tokens_passwords_keys_and_exec_env() {
        let config = parse(
            "
users:
- name: u
  user:
    token: tok-123
    password: pw-456
    client-key-data: a2V5LTc4OQ==
    exec: {command: p, env: [{name: SECRET, value: env-000}]}
",
        );
        let text = format!("{config:?}");
        for secret in ["tok-123", "pw-456", "a2V5LTc4OQ==", "env-000"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert!(text.contains("SECRET=***"), "{text}");
    }
}
