//! What the client's cluster suites (`client_crud.rs`, `client_list.rs`, `client_watch.rs`,
//! `client_delete.rs`, `client_kinds.rs`, `client_transport.rs`) share: running a test once
//! per way of authenticating, namespaces that go when dropped, labelled ConfigMaps, and
//! bounded reads of a watch.
//!
//! Every such test runs once per way of authenticating — the client certificate, a bearer
//! token from a `tokenFile`, an inline `token`, and an exec credential plugin —
//! concurrently, each run with its own client and its own namespaces (see
//! [`under_every_auth`]).

use std::future::Future;
use std::path::{Path, PathBuf};

use controller_runtime::client::{
    Api, Client, ClientOptions, Error, ListParams, WatchEvent, WatchObject, WatchStream,
};
use controller_runtime::config::{Config, KubeconfigOptions};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;

use super::cluster::{create_namespace, testenv_dir};
use super::{CONVERGE, Kubectl, Namespace, unique};

/// How the test client proves who it is.
#[derive(Clone, Copy, Debug)]
pub enum AuthMode {
    /// testenv's admin kubeconfig: `client-certificate-data` and `client-key-data`.
    ClientCertificate,
    /// `tokenFile:` naming testenv's admin token.
    BearerTokenFile,
    /// `token:` holding testenv's admin token inline.
    InlineToken,
    /// `exec:` running the test plugin, which hands out the admin token.
    ExecPlugin,
}

/// Every [`AuthMode`], in the order runs report them.
pub const ALL_AUTH: [AuthMode; 4] = [
    AuthMode::ClientCertificate,
    AuthMode::BearerTokenFile,
    AuthMode::InlineToken,
    AuthMode::ExecPlugin,
];

/// A client for the test cluster authenticating as `mode`, loaded through a kubeconfig file
/// as a user's would be.
pub fn client(mode: AuthMode) -> Client {
    client_with(mode, ClientOptions::default())
}

/// Like [`client`], with `options`.
pub fn client_with(mode: AuthMode, options: ClientOptions) -> Client {
    let dir = testenv_dir();
    let path = match mode {
        AuthMode::ClientCertificate => dir.join("kubeconfig"),
        other => write_kubeconfig(&dir, other),
    };
    let config = Config::from_kubeconfig(&KubeconfigOptions {
        path: Some(path.clone()),
        ..KubeconfigOptions::default()
    })
    .unwrap();
    if !matches!(mode, AuthMode::ClientCertificate) {
        // Loading resolved it; don't leave copies (one holds the token) in the temp dir.
        let _ = std::fs::remove_file(&path);
    }
    assert_eq!(
        config.identity.is_some(),
        matches!(mode, AuthMode::ClientCertificate),
        "{mode:?}: only the admin kubeconfig carries a client certificate"
    );
    Client::new(config, options).unwrap()
}

/// A kubeconfig for the same cluster whose user has no certificate: a token file, the token
/// inline, or the test exec plugin handing out that token.
fn write_kubeconfig(dir: &Path, mode: AuthMode) -> PathBuf {
    let admin = std::fs::read_to_string(dir.join("kubeconfig")).unwrap();
    let server = admin
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .unwrap()
        .to_owned();
    let ca = admin
        .lines()
        .find_map(|l| l.trim().strip_prefix("certificate-authority-data: "))
        .unwrap()
        .to_owned();
    let token = dir.join("pki/admin.token");
    let user = match mode {
        AuthMode::BearerTokenFile => format!("    tokenFile: {}\n", token.display()),
        AuthMode::InlineToken => {
            let value = std::fs::read_to_string(&token).unwrap();
            // Single-quoted YAML: only a quote needs escaping, by doubling it.
            format!("    token: '{}'\n", value.trim().replace('\'', "''"))
        }
        AuthMode::ExecPlugin => format!(
            "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: {}\n      \
             interactiveMode: Never\n      env:\n      - name: EXEC_PLUGIN_TOKEN_FILE\n        value: {}\n",
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("testdata/exec-plugin.sh")
                .display(),
            token.display()
        ),
        AuthMode::ClientCertificate => unreachable!(),
    };
    let yaml = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: t\nclusters:\n- name: c\n  cluster:\n    \
         server: {server}\n    certificate-authority-data: {ca}\ncontexts:\n- name: t\n  context:\n    \
         cluster: c\n    user: u\n    namespace: default\nusers:\n- name: u\n  user:\n{user}"
    );
    let path = std::env::temp_dir().join(format!("{}-{mode:?}.kubeconfig", unique("client")));
    std::fs::write(&path, yaml).unwrap();
    path
}

/// Runs `test` once for each [`AuthMode`], concurrently, and fails naming every mode whose
/// run panicked. Each run makes its own client (and so its own connection) and its own
/// namespaces.
pub async fn under_every_auth<F, Fut>(test: F)
where
    F: Fn(AuthMode) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let runs: Vec<_> = ALL_AUTH
        .iter()
        .map(|&mode| (mode, tokio::spawn(test(mode))))
        .collect();
    let mut failed = Vec::new();
    for (mode, run) in runs {
        if let Err(e) = run.await {
            let why = match e.try_into_panic() {
                Ok(payload) => payload
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_else(|| "a panic without a message".to_owned()),
                Err(e) => e.to_string(),
            };
            failed.push(format!("{mode:?}: {why}"));
        }
    }
    assert!(
        failed.is_empty(),
        "failed under {} of {} authentication modes:\n{}",
        failed.len(),
        ALL_AUTH.len(),
        failed.join("\n")
    );
}

/// A namespace for one test, made by [`create_namespace`] (so settled), deleted when dropped.
pub async fn namespace(client: &Client, prefix: &str) -> Namespace {
    Namespace::guard(&Kubectl::from_env(), create_namespace(client, prefix).await)
}

/// A ConfigMap named `name` holding `data`, labelled `suite=client` so that a list can leave
/// out the namespace's `kube-root-ca.crt`.
pub fn configmap(name: &str, data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some([("suite".to_owned(), "client".to_owned())].into()),
            ..ObjectMeta::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        ),
        ..ConfigMap::default()
    }
}

/// The value under `key` in `cm`'s data.
pub fn data_of(cm: &ConfigMap, key: &str) -> Option<String> {
    cm.data.as_ref().and_then(|d| d.get(key).cloned())
}

/// The names of `items`, sorted.
pub fn names_of<K: k8s_openapi::Metadata<Ty = ObjectMeta>>(items: &[K]) -> Vec<String> {
    let mut names: Vec<String> = items
        .iter()
        .map(|o| o.metadata().name.clone().unwrap_or_default())
        .collect();
    names.sort();
    names
}

/// The next event, bounded so a missing event fails the test instead of hanging it.
pub async fn next_event<K: WatchObject>(
    stream: &mut WatchStream<K>,
) -> Option<Result<WatchEvent<K>, Error>> {
    tokio::time::timeout(CONVERGE, stream.next())
        .await
        .expect("no watch event within the limit")
}

/// The collection's current resourceVersion, to watch from.
///
/// The list has no limit on purpose: the API server answers a limited list from etcd while a
/// resource's watch cache is still starting (a CRD just installed), and a watch from that
/// version can then be 410 Expired when the cache starts at a later one. An unlimited list
/// waits (429, retried) for the cache, whose versions a watch can always resume from. The
/// callers list a fresh namespace, so the whole list is small.
pub async fn current_version<K>(api: &Api<K>) -> String
where
    K: WatchObject + Serialize,
{
    api.list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap()
}

/// The next `n` events other than bookmarks, each summarized by `describe`; events for which
/// it returns `None` are skipped.
pub async fn next_events<K: WatchObject>(
    stream: &mut WatchStream<K>,
    n: usize,
    describe: impl Fn(&str, &K) -> Option<String>,
) -> Vec<String> {
    let mut seen = Vec::new();
    while seen.len() < n {
        let described = match next_event(stream).await {
            Some(Ok(WatchEvent::Added(o))) => describe("ADDED", &o),
            Some(Ok(WatchEvent::Modified(o))) => describe("MODIFIED", &o),
            Some(Ok(WatchEvent::Deleted(o))) => describe("DELETED", &o),
            Some(Ok(WatchEvent::Bookmark(_))) => None,
            Some(Err(e)) => panic!("watch failed after {seen:?}: {e}"),
            None => panic!("watch ended after {seen:?}"),
        };
        seen.extend(described);
    }
    seen
}
