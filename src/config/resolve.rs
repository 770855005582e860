//! Turning a [`Kubeconfig`] into a [`Config`]: choosing the context, reading the files it
//! names, decoding base64 and parsing PEM.

use std::path::Path;

use base64::Engine as _;
use http::Uri;
use rustls_pki_types::pem::{self, PemObject};
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::exec::API_VERSIONS;
use super::kubeconfig::{ExecSection, NamedAuthInfo, NamedCluster, describe};
use super::{
    Auth, Config, Error, ExecCluster, ExecConfig, Identity, InteractiveMode, Kubeconfig,
    KubeconfigOptions, Result,
};

/// The cluster extension whose content an exec plugin receives as `spec.cluster.config`.
const EXEC_EXTENSION: &str = "client.authentication.k8s.io/exec";

impl Config {
    /// Resolves an already loaded kubeconfig: picks the context (`options.context`, else
    /// `current-context`), its cluster and user (unless `options` overrides them), reads the
    /// files they name and parses their certificates and keys. `options.path` is not used.
    ///
    /// When a user has several credentials, a `token` wins, then `tokenFile`, then
    /// `username`/`password`, then `exec`; a token together with a username is an error, as in
    /// kubectl. A context without a user means no credentials.
    ///
    /// ```
    /// use controller_runtime::config::{Auth, Config, Kubeconfig, KubeconfigOptions};
    /// use std::path::Path;
    ///
    /// let yaml = "
    /// current-context: dev
    /// clusters: [{name: dev, cluster: {server: 'https://10.0.0.1:6443'}}]
    /// contexts: [{name: dev, context: {cluster: dev, user: me, namespace: team}}]
    /// users: [{name: me, user: {token: abc}}]
    /// ";
    /// let kubeconfig = Kubeconfig::from_yaml(yaml, Path::new("/k/config"))?;
    /// let config = Config::resolve(&kubeconfig, &KubeconfigOptions::default())?;
    /// assert_eq!(config.cluster_url, "https://10.0.0.1:6443/");
    /// assert_eq!(config.default_namespace, "team");
    /// assert!(matches!(config.auth, Auth::Bearer(_)));
    /// assert_eq!(config.source, "kubeconfig /k/config (context dev)");
    /// # Ok::<(), controller_runtime::config::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// No context chosen; a context, cluster or user that is not defined; a missing `server`;
    /// a file that cannot be read; bad base64 or PEM; an unsupported credential (legacy
    /// `auth-provider`, impersonation, an exec `apiVersion` other than `v1`/`v1beta1`).
    pub fn resolve(kubeconfig: &Kubeconfig, options: &KubeconfigOptions) -> Result<Config> {
        let origin = kubeconfig.origin();
        let context_name = non_empty(options.context.as_deref())
            .or(non_empty(kubeconfig.current_context.as_deref()))
            .ok_or_else(|| Error::NoContext {
                origin: origin.clone(),
            })?;
        let named_context = find(
            &kubeconfig.contexts,
            context_name,
            "context",
            &origin,
            |c| &c.name,
        )?;
        let context_origin = entry_origin(named_context.file.as_deref(), &origin);
        let context = named_context.context.clone().unwrap_or_default();

        let cluster_name = non_empty(options.cluster.as_deref())
            .or(non_empty(context.cluster.as_deref()))
            .ok_or_else(|| Error::Invalid {
                origin: context_origin.clone(),
                field: format!("contexts[{context_name}].cluster"),
                problem: "missing".to_owned(),
            })?;
        let named_cluster = find(
            &kubeconfig.clusters,
            cluster_name,
            "cluster",
            &origin,
            |c| &c.name,
        )?;
        let cluster = resolve_cluster(named_cluster, &origin)?;

        let (identity, auth) = match non_empty(options.user.as_deref())
            .or(non_empty(context.user.as_deref()))
        {
            None => (None, Auth::None),
            Some(user_name) => {
                let named_user = find(&kubeconfig.users, user_name, "user", &origin, |u| &u.name)?;
                resolve_user(named_user, named_cluster, &cluster, &origin)?
            }
        };

        Ok(Config {
            cluster_url: cluster.url,
            default_namespace: non_empty(context.namespace.as_deref())
                .unwrap_or("default")
                .to_owned(),
            root_certs: cluster.root_certs,
            accept_invalid_certs: cluster.insecure,
            tls_server_name: cluster.tls_server_name,
            identity,
            auth,
            source: format!("{context_origin} (context {context_name})"),
        })
    }
}

/// A cluster entry, checked and with its CA read.
struct ResolvedCluster {
    url: Uri,
    root_certs: Vec<CertificateDer<'static>>,
    /// The CA bundle as PEM, for exec plugins that ask for cluster information.
    ca_pem: Option<Vec<u8>>,
    insecure: bool,
    tls_server_name: Option<String>,
}

fn resolve_cluster(named: &NamedCluster, fallback: &str) -> Result<ResolvedCluster> {
    let origin = entry_origin(named.file.as_deref(), fallback);
    let field = |name: &str| format!("clusters[{}].{name}", named.name);
    let cluster = named.cluster.clone().unwrap_or_default();

    let server = non_empty(cluster.server.as_deref()).ok_or_else(|| Error::Invalid {
        origin: origin.clone(),
        field: field("server"),
        problem: "missing".to_owned(),
    })?;
    let url = parse_server(server).map_err(|problem| Error::Invalid {
        origin: origin.clone(),
        field: field("server"),
        problem,
    })?;

    let ca = if let Some(data) = non_empty(cluster.certificate_authority_data.as_deref()) {
        let field = field("certificate-authority-data");
        Some((decode_base64(&origin, &field, data)?, field))
    } else if let Some(path) = non_empty_path(cluster.certificate_authority.as_deref()) {
        let field = field("certificate-authority");
        let pem = read_referenced(&origin, &field, path)?;
        Some((pem, format!("{field} {}", path.display())))
    } else {
        None
    };
    let root_certs = match &ca {
        Some((pem, field)) => parse_certs(&origin, field, pem)?,
        None => Vec::new(),
    };

    Ok(ResolvedCluster {
        url,
        root_certs,
        ca_pem: ca.map(|(pem, _)| pem),
        insecure: cluster.insecure_skip_tls_verify,
        tls_server_name: non_empty(cluster.tls_server_name.as_deref()).map(str::to_owned),
    })
}

fn resolve_user(
    named: &NamedAuthInfo,
    named_cluster: &NamedCluster,
    cluster: &ResolvedCluster,
    fallback: &str,
) -> Result<(Option<Identity>, Auth)> {
    let origin = entry_origin(named.file.as_deref(), fallback);
    let field = |name: &str| format!("users[{}].{name}", named.name);
    let invalid = |field: String, problem: &str| Error::Invalid {
        origin: origin.clone(),
        field,
        problem: problem.to_owned(),
    };
    let user = named.user.clone().unwrap_or_default();

    if user.impersonate.is_some() || !user.impersonate_groups.is_empty() {
        return Err(invalid(field("as"), "impersonation is not supported"));
    }

    // The client certificate and key: the -data forms win over the files.
    let cert = if let Some(data) = non_empty(user.client_certificate_data.as_deref()) {
        let field = field("client-certificate-data");
        Some((decode_base64(&origin, &field, data)?, field))
    } else if let Some(path) = non_empty_path(user.client_certificate.as_deref()) {
        let field = field("client-certificate");
        let pem = read_referenced(&origin, &field, path)?;
        Some((pem, format!("{field} {}", path.display())))
    } else {
        None
    };
    let key = if let Some(data) = non_empty(user.client_key_data.as_ref().map(|s| s.expose())) {
        let field = field("client-key-data");
        Some((decode_base64(&origin, &field, data)?, field))
    } else if let Some(path) = non_empty_path(user.client_key.as_deref()) {
        let field = field("client-key");
        let pem = read_referenced(&origin, &field, path)?;
        Some((pem, format!("{field} {}", path.display())))
    } else {
        None
    };
    let identity = match (cert, key) {
        (None, None) => None,
        (Some(_), None) => {
            return Err(invalid(
                format!("users[{}]", named.name),
                "client certificate without client key",
            ));
        }
        (None, Some(_)) => {
            return Err(invalid(
                format!("users[{}]", named.name),
                "client key without client certificate",
            ));
        }
        (Some((cert_pem, cert_field)), Some((key_pem, key_field))) => Some(Identity {
            cert_chain: parse_certs(&origin, &cert_field, &cert_pem)?,
            key: parse_key(&origin, &key_field, &key_pem)?,
        }),
    };

    let token = user.token.filter(|t| !t.expose().is_empty());
    let token_file = user.token_file.filter(|path| !path.as_os_str().is_empty());
    let username = user.username.filter(|u| !u.is_empty());
    if (token.is_some() || token_file.is_some()) && username.is_some() {
        return Err(invalid(
            format!("users[{}]", named.name),
            "username/password and a token cannot both be set",
        ));
    }

    let auth = if let Some(token) = token {
        if http::HeaderValue::from_str(&format!("Bearer {}", token.expose())).is_err() {
            return Err(invalid(field("token"), "not a valid HTTP header value"));
        }
        Auth::Bearer(token)
    } else if let Some(path) = token_file {
        // Read once now so a wrong path fails at load; the client re-reads it as it rotates.
        let field = field("tokenFile");
        let text = read_referenced(&origin, &field, &path)?;
        if String::from_utf8_lossy(&text).trim().is_empty() {
            return Err(Error::EmptyToken {
                what: format!("{origin}: {field}"),
                path,
            });
        }
        Auth::TokenFile(path)
    } else if let Some(username) = username {
        Auth::Basic {
            username,
            password: user.password.unwrap_or_default(),
        }
    } else if let Some(exec) = &user.exec {
        Auth::Exec(resolve_exec(
            exec,
            &field("exec"),
            &origin,
            named_cluster,
            cluster,
        )?)
    } else if let Some(provider) = &user.auth_provider {
        return Err(invalid(
            field("auth-provider"),
            &format!(
                "auth provider {:?} is not supported; use an exec credential plugin instead",
                provider.name
            ),
        ));
    } else {
        Auth::None
    };
    Ok((identity, auth))
}

fn resolve_exec(
    exec: &ExecSection,
    prefix: &str,
    origin: &str,
    named_cluster: &NamedCluster,
    cluster: &ResolvedCluster,
) -> Result<ExecConfig> {
    let invalid = |name: &str, problem: String| Error::Invalid {
        origin: origin.to_owned(),
        field: format!("{prefix}.{name}"),
        problem,
    };
    let command = non_empty_path(exec.command.as_deref())
        .ok_or_else(|| invalid("command", "missing".to_owned()))?;
    let api_version = match non_empty(exec.api_version.as_deref()) {
        None => return Err(invalid("apiVersion", "missing".to_owned())),
        Some(version) if API_VERSIONS.contains(&version) => version,
        Some(version) => {
            return Err(invalid(
                "apiVersion",
                format!(
                    "unsupported {version:?} (expected {})",
                    API_VERSIONS.join(" or ")
                ),
            ));
        }
    };
    let interactive_mode = match exec.interactive_mode.as_deref() {
        None | Some("") | Some("IfAvailable") => InteractiveMode::IfAvailable,
        Some("Never") => InteractiveMode::Never,
        Some("Always") => InteractiveMode::Always,
        Some(other) => {
            return Err(invalid(
                "interactiveMode",
                format!("unknown value {other:?} (expected Never, IfAvailable or Always)"),
            ));
        }
    };
    let raw = named_cluster.cluster.clone().unwrap_or_default();
    let exec_cluster = exec.provide_cluster_info.then(|| {
        Box::new(ExecCluster {
            server: raw.server.clone().unwrap_or_default(),
            tls_server_name: cluster.tls_server_name.clone(),
            insecure_skip_tls_verify: cluster.insecure,
            certificate_authority_data: cluster.ca_pem.clone(),
            proxy_url: non_empty(raw.proxy_url.as_deref()).map(str::to_owned),
            disable_compression: raw.disable_compression,
            config: raw
                .extensions
                .iter()
                .find(|e| e.name == EXEC_EXTENSION)
                .map(|e| e.extension.clone()),
        })
    });
    Ok(ExecConfig {
        api_version: api_version.to_owned(),
        command: command.to_owned(),
        args: exec.args.clone(),
        env: exec
            .env
            .iter()
            .map(|var| (var.name.clone(), var.value.clone()))
            .collect(),
        install_hint: non_empty(exec.install_hint.as_deref()).map(str::to_owned),
        provide_cluster_info: exec.provide_cluster_info,
        interactive_mode,
        cluster: exec_cluster,
    })
}

// === helpers shared with in-cluster loading ===

/// Parses a server URL; a URL without a scheme gets `https://`, as kubectl does.
pub(crate) fn parse_server(server: &str) -> std::result::Result<Uri, String> {
    let full = if server.contains("://") {
        server.to_owned()
    } else {
        format!("https://{server}")
    };
    let url: Uri = full
        .parse()
        .map_err(|error| format!("invalid URL {server:?}: {error}"))?;
    if !matches!(url.scheme_str(), Some("https" | "http")) {
        return Err(format!(
            "invalid URL {server:?}: scheme must be https or http"
        ));
    }
    if url.host().is_none_or(str::is_empty) {
        return Err(format!("invalid URL {server:?}: no host"));
    }
    Ok(url)
}

/// Reads a file a configuration names; errors say who named it.
pub(crate) fn read_referenced(origin: &str, field: &str, path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|source| Error::ReadFile {
        what: format!("{origin}: {field}"),
        path: path.to_owned(),
        source,
    })
}

/// Decodes a `-data` field. Whitespace inside it (line breaks) is ignored, as in kubectl.
pub(crate) fn decode_base64(origin: &str, field: &str, data: &str) -> Result<Vec<u8>> {
    let compact: String = data.split_ascii_whitespace().collect();
    base64::engine::general_purpose::STANDARD
        .decode(compact)
        .map_err(|source| Error::Base64 {
            origin: origin.to_owned(),
            field: field.to_owned(),
            source,
        })
}

/// Parses every certificate in PEM text; there must be at least one.
pub(crate) fn parse_certs(
    origin: &str,
    field: &str,
    pem_text: &[u8],
) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_slice_iter(pem_text)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|source| pem_error(origin, field, source, "no certificate in PEM"))?;
    if certs.is_empty() {
        return Err(Error::Invalid {
            origin: origin.to_owned(),
            field: field.to_owned(),
            problem: "no certificate in PEM".to_owned(),
        });
    }
    Ok(certs)
}

/// Parses the first private key (PKCS#8, PKCS#1 or SEC1) in PEM text.
pub(crate) fn parse_key(
    origin: &str,
    field: &str,
    pem_text: &[u8],
) -> Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_slice(pem_text)
        .map_err(|source| pem_error(origin, field, source, "no private key in PEM"))
}

fn pem_error(origin: &str, field: &str, source: pem::Error, none_found: &str) -> Error {
    match source {
        pem::Error::NoItemsFound => Error::Invalid {
            origin: origin.to_owned(),
            field: field.to_owned(),
            problem: none_found.to_owned(),
        },
        source => Error::Pem {
            origin: origin.to_owned(),
            field: field.to_owned(),
            source,
        },
    }
}

/// `kubeconfig <the entry's file>`, or `fallback` for entries not read from a file.
fn entry_origin(file: Option<&Path>, fallback: &str) -> String {
    match file {
        Some(file) => describe(&[file.to_owned()]),
        None => fallback.to_owned(),
    }
}

fn find<'a, T>(
    entries: &'a [T],
    name: &str,
    kind: &'static str,
    origin: &str,
    name_of: impl Fn(&T) -> &String,
) -> Result<&'a T> {
    entries
        .iter()
        .find(|entry| name_of(entry) == name)
        .ok_or_else(|| {
            let mut known: Vec<String> = entries.iter().map(|e| name_of(e).clone()).collect();
            known.sort();
            Error::NotFound {
                origin: origin.to_owned(),
                kind,
                name: name.to_owned(),
                known,
            }
        })
}

fn non_empty(value: Option<&str>) -> Option<&str> {
    value.filter(|v| !v.is_empty())
}

fn non_empty_path(value: Option<&Path>) -> Option<&Path> {
    value.filter(|v| !v.as_os_str().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(yaml: &str, options: &KubeconfigOptions) -> Result<Config> {
        let kubeconfig = Kubeconfig::from_yaml(yaml, Path::new("/k/config")).unwrap();
        Config::resolve(&kubeconfig, options)
    }

    fn error(yaml: &str) -> String {
        resolve(yaml, &KubeconfigOptions::default())
            .unwrap_err()
            .to_string()
    }

    const BASE: &str = "
current-context: dev
clusters: [{name: dev, cluster: {server: 'https://h:6443'}}]
contexts: [{name: dev, context: {cluster: dev, user: me}}]
";

    #[test]
    fn server_without_scheme_gets_https_and_keeps_its_path() {
        assert_eq!(parse_server("h:6443").unwrap(), "https://h:6443/");
        assert_eq!(parse_server("http://h/prefix/").unwrap().path(), "/prefix/");
        assert_eq!(
            parse_server("ftp://h").unwrap_err(),
            r#"invalid URL "ftp://h": scheme must be https or http"#
        );
    }

    #[test]
    fn options_override_context_cluster_and_user() {
        let yaml = "
current-context: dev
clusters:
- {name: dev, cluster: {server: 'https://dev'}}
- {name: prod, cluster: {server: 'https://prod', tls-server-name: api.prod}}
contexts:
- {name: dev, context: {cluster: dev, user: me, namespace: team}}
- {name: other, context: {cluster: dev}}
users:
- {name: me, user: {token: abc}}
- {name: root, user: {username: root, password: pw}}
";
        let config = resolve(
            yaml,
            &KubeconfigOptions {
                context: Some("other".into()),
                cluster: Some("prod".into()),
                user: Some("root".into()),
                ..KubeconfigOptions::default()
            },
        )
        .unwrap();
        assert_eq!(config.cluster_url, "https://prod/");
        assert_eq!(config.tls_server_name.as_deref(), Some("api.prod"));
        assert_eq!(config.default_namespace, "default");
        assert!(matches!(config.auth, Auth::Basic { ref username, .. } if username == "root"));
        assert_eq!(config.source, "kubeconfig /k/config (context other)");
    }

    #[test]
    fn context_without_user_means_no_auth() {
        let config = resolve(
            "
current-context: dev
clusters: [{name: dev, cluster: {server: 'https://h'}}]
contexts: [{name: dev, context: {cluster: dev}}]
",
            &KubeconfigOptions::default(),
        )
        .unwrap();
        assert!(matches!(config.auth, Auth::None));
        assert!(config.identity.is_none());
    }

    #[test]
    fn missing_pieces_are_named() {
        assert_eq!(
            error("clusters: []"),
            "kubeconfig /k/config: no context chosen and current-context is not set"
        );
        assert_eq!(
            error(&format!("{BASE}users: [{{name: other}}]")),
            r#"kubeconfig /k/config: user "me" not found (known: other)"#
        );
        assert_eq!(
            error(
                "
current-context: dev
contexts: [{name: dev, context: {user: me}}]
"
            ),
            "kubeconfig /k/config: contexts[dev].cluster: missing"
        );
        assert_eq!(
            error(
                "
current-context: dev
clusters: [{name: dev, cluster: {insecure-skip-tls-verify: true}}]
contexts: [{name: dev, context: {cluster: dev}}]
"
            ),
            "kubeconfig /k/config: clusters[dev].server: missing"
        );
    }

    #[test]
    fn conflicting_or_unsupported_credentials_are_errors() {
        let user = |body: &str| error(&format!("{BASE}users: [{{name: me, user: {body}}}]"));
        assert_eq!(
            user("{token: t, username: u}"),
            "kubeconfig /k/config: users[me]: username/password and a token cannot both be set"
        );
        assert_eq!(
            user("{token: \"a\\nb\"}"),
            "kubeconfig /k/config: users[me].token: not a valid HTTP header value"
        );
        assert_eq!(
            user("{auth-provider: {name: gcp, config: {access-token: secret}}}"),
            "kubeconfig /k/config: users[me].auth-provider: auth provider \"gcp\" is not \
             supported; use an exec credential plugin instead"
        );
        assert_eq!(
            user("{as: admin}"),
            "kubeconfig /k/config: users[me].as: impersonation is not supported"
        );
        assert_eq!(
            user("{exec: {command: p, apiVersion: client.authentication.k8s.io/v1alpha1}}"),
            "kubeconfig /k/config: users[me].exec.apiVersion: unsupported \
             \"client.authentication.k8s.io/v1alpha1\" (expected \
             client.authentication.k8s.io/v1 or client.authentication.k8s.io/v1beta1)"
        );
        assert_eq!(
            user("{exec: {apiVersion: client.authentication.k8s.io/v1}}"),
            "kubeconfig /k/config: users[me].exec.command: missing"
        );
        assert_eq!(
            user(
                "{exec: {command: p, apiVersion: client.authentication.k8s.io/v1, interactiveMode: Sometimes}}"
            ),
            "kubeconfig /k/config: users[me].exec.interactiveMode: unknown value \"Sometimes\" \
             (expected Never, IfAvailable or Always)"
        );
        assert_eq!(
            user("{client-certificate-data: aGVsbG8=}"),
            "kubeconfig /k/config: users[me]: client certificate without client key"
        );
    }

    #[test]
    fn token_wins_over_exec_and_basic_needs_only_a_username() {
        let yaml = format!(
            "{BASE}users: [{{name: me, user: {{token: t, exec: {{command: p, apiVersion: x}}}}}}]"
        );
        let config = resolve(&yaml, &KubeconfigOptions::default()).unwrap();
        assert!(matches!(config.auth, Auth::Bearer(ref t) if t.expose() == "t"));

        let yaml = format!("{BASE}users: [{{name: me, user: {{username: u}}}}]");
        let config = resolve(&yaml, &KubeconfigOptions::default()).unwrap();
        assert!(
            matches!(config.auth, Auth::Basic { ref username, ref password } if username == "u" && password.expose().is_empty())
        );
    }

    #[test]
    fn exec_gets_cluster_info_only_when_asked() {
        let yaml = "
current-context: dev
clusters:
- name: dev
  cluster:
    server: 'https://h:6443'
    proxy-url: 'http://proxy:3128'
    extensions: [{name: client.authentication.k8s.io/exec, extension: {audience: k}}]
contexts: [{name: dev, context: {cluster: dev, user: me}}]
users:
- name: me
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1beta1
      command: plugin
      args: [get-token]
      env: [{name: A, value: b}]
      provideClusterInfo: true
      installHint: brew install plugin
";
        let config = resolve(yaml, &KubeconfigOptions::default()).unwrap();
        let Auth::Exec(exec) = config.auth else {
            panic!("expected exec, got {:?}", config.auth)
        };
        assert_eq!(exec.api_version, "client.authentication.k8s.io/v1beta1");
        assert_eq!(exec.command, Path::new("plugin"));
        assert_eq!(exec.args, ["get-token"]);
        assert_eq!(exec.env, [("A".to_owned(), "b".to_owned())]);
        assert_eq!(exec.install_hint.as_deref(), Some("brew install plugin"));
        assert_eq!(exec.interactive_mode, InteractiveMode::IfAvailable);
        let cluster = exec.cluster.unwrap();
        assert_eq!(cluster.server, "https://h:6443");
        assert_eq!(cluster.proxy_url.as_deref(), Some("http://proxy:3128"));
        assert_eq!(cluster.config, Some(serde_json::json!({"audience": "k"})));
    }
}
