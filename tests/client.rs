//! The client against the real local cluster: every verb, watches, pagination, field
//! selectors, resourceVersion rules, conflicts and preconditions, deletion propagation,
//! server-side apply, 410 after compaction, subresources on built-in kinds and custom
//! resources, typed custom resources, cluster-scoped kinds, metadata-only and dynamic APIs,
//! and HTTP/1.1 when HTTP/2 is declined (`client_http2.rs` proves watches share one HTTP/2
//! connection).
//!
//! Every test runs once per way of authenticating — the client certificate, a bearer token
//! from a `tokenFile`, an inline `token`, and an exec credential plugin — concurrently, each
//! run with its own client and its own namespaces (see [`under_every_auth`]).

mod support;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use controller_runtime::client::{
    Api, ApiResource, Client, ClientOptions, DeleteParams, DeleteResult, DynamicObject, Error,
    ListParams, Patch, PatchParams, PostParams, VersionMatch, WatchEvent, WatchObject, WatchParams,
    WatchStream,
};
use controller_runtime::config::{Config, KubeconfigOptions};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, PodTemplate, Service};
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde::{Deserialize, Serialize};
use serde_json::json;
use support::cluster::{compact_etcd, create_namespace, template, testenv_dir};
use support::{CONVERGE, unique};

// === fixtures ===

/// How the test client proves who it is.
#[derive(Clone, Copy, Debug)]
enum AuthMode {
    /// testenv's admin kubeconfig: `client-certificate-data` and `client-key-data`.
    ClientCertificate,
    /// `tokenFile:` naming testenv's admin token.
    BearerTokenFile,
    /// `token:` holding testenv's admin token inline.
    InlineToken,
    /// `exec:` running the test plugin, which hands out the admin token.
    ExecPlugin,
}

const ALL_AUTH: [AuthMode; 4] = [
    AuthMode::ClientCertificate,
    AuthMode::BearerTokenFile,
    AuthMode::InlineToken,
    AuthMode::ExecPlugin,
];

/// A client for the test cluster authenticating as `mode`, loaded through a kubeconfig file
/// as a user's would be.
fn client(mode: AuthMode) -> Client {
    client_with(mode, ClientOptions::default())
}

/// Like [`client`], with `options`.
fn client_with(mode: AuthMode, options: ClientOptions) -> Client {
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
async fn under_every_auth<F, Fut>(test: F)
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

/// Evaluates `$check` (an expression that may `.await`) every 250 ms until it is `Some`, and
/// yields that value. Panics if [`CONVERGE`] passes first: the cluster never got there.
///
/// A macro rather than a function over an async closure: such a closure's future, borrowing
/// the test's locals, is not provably `Send`, which [`under_every_auth`]'s spawned runs need.
macro_rules! converge {
    ($what:expr, $check:expr) => {{
        let begin = tokio::time::Instant::now();
        loop {
            if let Some(v) = $check {
                break v;
            }
            assert!(
                begin.elapsed() < CONVERGE,
                "{}: not within {CONVERGE:?}",
                $what
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }};
}

/// A namespace for one test, deleted when dropped.
struct TestNamespace {
    name: String,
}

impl TestNamespace {
    async fn create(client: &Client, prefix: &str) -> TestNamespace {
        let name = create_namespace(client, prefix).await;
        TestNamespace { name }
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        // kubectl, not the client: the client's connection runs on the test's runtime,
        // which is busy dropping this.
        let _ = support::Kubectl::from_env().try_run(
            &[
                "delete",
                "namespace",
                &self.name,
                "--wait=false",
                "--ignore-not-found",
            ],
            None,
        );
    }
}

fn configmap(name: &str, data: &[(&str, &str)]) -> ConfigMap {
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

fn data_of(cm: &ConfigMap, key: &str) -> Option<String> {
    cm.data.as_ref().and_then(|d| d.get(key).cloned())
}

fn names_of<K: k8s_openapi::Metadata<Ty = ObjectMeta>>(items: &[K]) -> Vec<String> {
    let mut names: Vec<String> = items
        .iter()
        .map(|o| o.metadata().name.clone().unwrap_or_default())
        .collect();
    names.sort();
    names
}

/// The next event, bounded so a missing event fails the test instead of hanging it.
async fn next_event<K: WatchObject>(
    stream: &mut WatchStream<K>,
) -> Option<Result<WatchEvent<K>, Error>> {
    tokio::time::timeout(CONVERGE, stream.next())
        .await
        .expect("no watch event within the limit")
}

/// The collection's current resourceVersion, to watch from.
async fn current_version<K>(api: &Api<K>) -> String
where
    K: WatchObject + Serialize,
{
    api.list(&ListParams::default().limit(1))
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap()
}

/// The next `n` events other than bookmarks, each summarized by `describe`; events for which
/// it returns `None` are skipped.
async fn next_events<K: WatchObject>(
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

// === every verb ===

#[tokio::test]
#[ignore = "needs cluster"]
async fn crud_verbs_work_under_every_authentication() {
    under_every_auth(crud_verbs).await;
}

async fn crud_verbs(mode: AuthMode) {
    let client = client(mode);
    let ns = TestNamespace::create(&client, "crud").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);

    let created = api
        .create(&PostParams::default(), &configmap("a", &[("k", "1")]))
        .await
        .unwrap_or_else(|e| panic!("create: {e}"));
    assert_eq!(
        created.metadata.namespace.as_deref(),
        Some(ns.name.as_str())
    );

    let err = api
        .create(&PostParams::default(), &configmap("a", &[]))
        .await
        .unwrap_err();
    assert!(err.is_already_exists(), "{err}");

    let got = api.get("a").await.unwrap();
    assert_eq!(data_of(&got, "k").as_deref(), Some("1"));

    // Replace with the version just read succeeds; replacing again with that now-stale
    // version is a conflict.
    let mut update = got.clone();
    update.data = Some([("k".to_owned(), "2".to_owned())].into());
    let replaced = api
        .replace("a", &PostParams::default(), &update)
        .await
        .unwrap();
    assert_eq!(data_of(&replaced, "k").as_deref(), Some("2"));
    let stale = api
        .replace("a", &PostParams::default(), &update)
        .await
        .unwrap_err();
    assert!(stale.is_conflict(), "{stale}");

    let merged = api
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"m": "merge"}})),
        )
        .await
        .unwrap();
    assert_eq!(data_of(&merged, "m").as_deref(), Some("merge"));
    let jsonpatched = api
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Json(json!([{"op": "replace", "path": "/data/k", "value": "3"}])),
        )
        .await
        .unwrap();
    assert_eq!(data_of(&jsonpatched, "k").as_deref(), Some("3"));
    let strategic = api
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Strategic(json!({"metadata": {"labels": {"s": "yes"}}})),
        )
        .await
        .unwrap();
    assert_eq!(strategic.metadata.labels.unwrap()["s"], "yes");

    let listed = api
        .list(&ListParams::default().labels("suite=client"))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);
    assert!(listed.metadata.resource_version.is_some());

    let deleted = api.delete("a", &DeleteParams::default()).await.unwrap();
    assert!(matches!(deleted, DeleteResult::Deleted(_)), "{deleted:?}");
    assert_eq!(api.get_opt("a").await.unwrap(), None);
    let err = api.get("a").await.unwrap_err();
    assert!(err.is_not_found(), "{err}");
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn watch_sees_create_update_and_delete_in_order_under_every_authentication() {
    under_every_auth(watch_in_order).await;
}

async fn watch_in_order(mode: AuthMode) {
    let client = client(mode);
    let ns = TestNamespace::create(&client, "watch").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let rv = current_version(&api).await;
    let mut stream = api
        .watch(&WatchParams::default().from_version(&rv).timeout(120))
        .await
        .unwrap();

    api.create(&PostParams::default(), &configmap("w", &[("v", "1")]))
        .await
        .unwrap();
    api.patch(
        "w",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"v": "2"}})),
    )
    .await
    .unwrap();
    api.delete("w", &DeleteParams::default()).await.unwrap();

    // The namespace's kube-root-ca.crt may be published meanwhile; follow "w" only.
    let seen = next_events(&mut stream, 3, |ty, cm: &ConfigMap| {
        (cm.metadata.name.as_deref() == Some("w")).then(|| format!("{ty} {:?}", data_of(cm, "v")))
    })
    .await;
    assert_eq!(
        seen,
        [
            r#"ADDED Some("1")"#,
            r#"MODIFIED Some("2")"#,
            r#"DELETED Some("2")"#
        ]
    );
}

// === lists: pages, field selectors, versions ===

#[tokio::test]
#[ignore = "needs cluster"]
async fn pagination_spans_several_pages_under_every_authentication() {
    under_every_auth(pagination).await;
}

async fn pagination(mode: AuthMode) {
    let client = client(mode);
    let ns = TestNamespace::create(&client, "pages").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    for i in 0..5 {
        api.create(&PostParams::default(), &configmap(&format!("p{i}"), &[]))
            .await
            .unwrap();
    }
    let params = ListParams::default().labels("suite=client").limit(2);
    let first = api.list(&params).await.unwrap();
    assert_eq!(first.items.len(), 2);
    let token = first.metadata.continue_.clone().expect("a continue token");
    let second = api
        .list(&params.clone().continue_from(&token))
        .await
        .unwrap();
    assert_eq!(second.items.len(), 2);
    assert_ne!(first.items[0].metadata.name, second.items[0].metadata.name);

    let all = api.list_all(&params).await.unwrap();
    assert_eq!(names_of(&all.items), ["p0", "p1", "p2", "p3", "p4"]);
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn field_selector_filters_on_the_server() {
    under_every_auth(field_selector).await;
}

async fn field_selector(mode: AuthMode) {
    let client = client(mode);
    let ns = TestNamespace::create(&client, "fields").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    for name in ["a", "b", "c"] {
        api.create(&PostParams::default(), &configmap(name, &[]))
            .await
            .unwrap();
    }
    let one = api
        .list(&ListParams::default().fields("metadata.name=b"))
        .await
        .unwrap();
    assert_eq!(names_of(&one.items), ["b"]);
    let others = api
        .list(
            &ListParams::default()
                .labels("suite=client")
                .fields("metadata.name!=b"),
        )
        .await
        .unwrap();
    assert_eq!(names_of(&others.items), ["a", "c"]);

    // The server, not the client, judges the selector: a field it does not index is refused.
    let err = api
        .list(&ListParams::default().fields("data.k=v"))
        .await
        .unwrap_err();
    assert!(err.is_bad_request(), "{err}");
    assert!(err.to_string().contains("data.k"), "{err}");
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn list_not_older_than_a_version_includes_every_change_up_to_it() {
    under_every_auth(list_not_older_than).await;
}

async fn list_not_older_than(mode: AuthMode) {
    let client = client(mode);
    let ns = TestNamespace::create(&client, "notolder").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    api.create(&PostParams::default(), &configmap("n", &[("v", "1")]))
        .await
        .unwrap();
    let patched = api
        .patch(
            "n",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"v": "2"}})),
        )
        .await
        .unwrap();
    let rv = patched.metadata.resource_version.unwrap();

    let list = api
        .list(
            &ListParams::default()
                .labels("suite=client")
                .at(&rv, Some(VersionMatch::NotOlderThan)),
        )
        .await
        .unwrap();
    let listed_at: u64 = list.metadata.resource_version.unwrap().parse().unwrap();
    assert!(
        listed_at >= rv.parse().unwrap(),
        "listed at {listed_at}, older than {rv}"
    );
    assert_eq!(list.items.len(), 1);
    assert_eq!(data_of(&list.items[0], "v").as_deref(), Some("2"));
}

// === watch details ===

#[tokio::test]
#[ignore = "needs cluster"]
async fn bookmarks_arrive_and_initial_events_end_with_their_bookmark() {
    under_every_auth(bookmarks).await;
}

async fn bookmarks(mode: AuthMode) {
    let client = client(mode);
    let ns = TestNamespace::create(&client, "bookmark").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    api.create(&PostParams::default(), &configmap("existing", &[]))
        .await
        .unwrap();

    // WatchList: the current state as ADDED events, then the initial-events-end bookmark.
    let mut stream = api
        .watch(&WatchParams::default().initial_events().timeout(60))
        .await
        .unwrap();
    let mut added = Vec::new();
    loop {
        match next_event(&mut stream).await {
            Some(Ok(WatchEvent::Added(cm))) => added.push(cm.metadata.name.unwrap()),
            Some(Ok(WatchEvent::Bookmark(b))) if b.is_initial_events_end() => {
                assert!(!b.metadata.resource_version.is_empty());
                break;
            }
            Some(Ok(WatchEvent::Bookmark(_))) => {}
            other => panic!("before the initial-events-end bookmark: {other:?}"),
        }
    }
    added.sort();
    assert_eq!(added, ["existing", "kube-root-ca.crt"]);

    // A bookmark tells a watcher the collection moved on when none of its own objects
    // changed: a change in another namespace advances the version this watch reports.
    let rv = current_version(&api).await;
    let mut stream = api
        .watch(&WatchParams::default().from_version(&rv).timeout(5))
        .await
        .unwrap();
    let elsewhere = TestNamespace::create(&client, "bookmark-elsewhere").await;
    Api::<ConfigMap>::namespaced(client.clone(), &elsewhere.name)
        .create(&PostParams::default(), &configmap("unrelated", &[]))
        .await
        .unwrap();
    let mut bookmarks = Vec::new();
    while let Some(ev) = next_event(&mut stream).await {
        match ev.unwrap() {
            WatchEvent::Bookmark(b) => {
                bookmarks.push(b.metadata.resource_version.parse::<u64>().unwrap())
            }
            other => panic!("no object in this namespace changed, yet: {other:?}"),
        }
    }
    let start: u64 = rv.parse().unwrap();
    assert!(
        bookmarks.iter().any(|&v| v > start),
        "no bookmark past {start} before the watch closed: {bookmarks:?}"
    );
}

// === conflicts and versions ===

#[tokio::test]
#[ignore = "needs cluster"]
async fn server_side_apply_conflicts_between_managers_unless_forced() {
    under_every_auth(server_side_apply).await;
}

async fn server_side_apply(mode: AuthMode) {
    let client = client(mode);
    let ns = TestNamespace::create(&client, "ssa").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let doc = |v: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "s"}, "data": {"owned": v}});

    let applied = api
        .patch("s", &PatchParams::apply("first"), &Patch::Apply(doc("1")))
        .await
        .unwrap();
    assert_eq!(data_of(&applied, "owned").as_deref(), Some("1"));

    let err = api
        .patch("s", &PatchParams::apply("second"), &Patch::Apply(doc("2")))
        .await
        .unwrap_err();
    assert!(err.is_conflict(), "{err}");
    assert!(err.to_string().contains("conflict with \"first\""), "{err}");

    let forced = api
        .patch(
            "s",
            &PatchParams::apply("second").force(),
            &Patch::Apply(doc("2")),
        )
        .await
        .unwrap();
    assert_eq!(data_of(&forced, "owned").as_deref(), Some("2"));

    let err = api
        .patch("s", &PatchParams::default(), &Patch::Apply(doc("3")))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::InvalidRequest(_)),
        "apply without a manager: {err}"
    );
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn compacted_versions_are_gone_for_watch_and_exact_list() {
    under_every_auth(compacted_versions).await;
}

async fn compacted_versions(mode: AuthMode) {
    let client = client(mode);
    let ns = TestNamespace::create(&client, "gone").await;
    // PodTemplates are served straight from etcd in testenv (no watch cache), so etcd's
    // compaction is what the client sees.
    let api: Api<PodTemplate> = Api::namespaced(client.clone(), &ns.name);
    let created = api
        .create(&PostParams::default(), &template("t"))
        .await
        .unwrap();
    let old = created.metadata.resource_version.unwrap();
    for i in 0..2 {
        api.patch(
            "t",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"i": i.to_string()}}})),
        )
        .await
        .unwrap();
    }
    // Blocking, but brief; the other modes' runs wait for it.
    compact_etcd();

    let mut stream = api
        .watch(&WatchParams::default().from_version(&old).timeout(30))
        .await
        .unwrap();
    let err = match next_event(&mut stream).await {
        Some(Err(e)) => e,
        other => panic!("want a 410 from the watch, got {other:?}"),
    };
    assert!(err.is_gone(), "{err}");

    let err = api
        .list(&ListParams::default().at(&old, Some(VersionMatch::Exact)))
        .await
        .unwrap_err();
    assert!(err.is_gone(), "{err}");
}

// === deletion ===

#[tokio::test]
#[ignore = "needs cluster"]
async fn delete_honours_preconditions_and_foreground_propagation() {
    under_every_auth(delete_foreground).await;
}

async fn delete_foreground(mode: AuthMode) {
    let client = client(mode);
    let ns = TestNamespace::create(&client, "del").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let cm = api
        .create(&PostParams::default(), &configmap("d", &[]))
        .await
        .unwrap();
    let err = api
        .delete(
            "d",
            &DeleteParams::default().precondition(Some("not-the-uid"), None),
        )
        .await
        .unwrap_err();
    assert!(err.is_conflict(), "{err}");
    let uid = cm.metadata.uid.unwrap();
    api.delete("d", &DeleteParams::default().precondition(Some(&uid), None))
        .await
        .unwrap();

    // Foreground: the Deployment stays, marked, until its ReplicaSet is gone.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let deploy: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "fg"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "fg"}},
            "template": {"metadata": {"labels": {"app": "fg"}},
                         "spec": {"containers": [{"name": "m", "image": "memcached:1.6"}]}}
        }
    }))
    .unwrap();
    deployments
        .create(&PostParams::default(), &deploy)
        .await
        .unwrap();
    match deployments
        .delete("fg", &DeleteParams::foreground())
        .await
        .unwrap()
    {
        DeleteResult::Pending(d) => {
            assert!(d.metadata.deletion_timestamp.is_some());
            assert!(
                d.metadata
                    .finalizers
                    .unwrap()
                    .contains(&"foregroundDeletion".to_owned())
            );
        }
        DeleteResult::Deleted(s) => panic!("a foreground delete finished at once: {s:?}"),
    }
    converge!("the Deployment deleted", {
        deployments
            .get_opt("fg")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    });
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn delete_with_a_stale_resource_version_precondition_is_a_conflict() {
    under_every_auth(delete_resource_version_precondition).await;
}

async fn delete_resource_version_precondition(mode: AuthMode) {
    let client = client(mode);
    let ns = TestNamespace::create(&client, "delrv").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let created = api
        .create(&PostParams::default(), &configmap("d", &[("v", "1")]))
        .await
        .unwrap();
    let stale = created.metadata.resource_version.unwrap();
    let current = api
        .patch(
            "d",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"v": "2"}})),
        )
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    assert_ne!(stale, current);

    let err = api
        .delete(
            "d",
            &DeleteParams::default().precondition(None, Some(&stale)),
        )
        .await
        .unwrap_err();
    assert!(err.is_conflict(), "{err}");
    assert!(api.get_opt("d").await.unwrap().is_some(), "deleted anyway");

    let deleted = api
        .delete(
            "d",
            &DeleteParams::default().precondition(None, Some(&current)),
        )
        .await
        .unwrap();
    assert!(matches!(deleted, DeleteResult::Deleted(_)), "{deleted:?}");
    assert_eq!(api.get_opt("d").await.unwrap(), None);
}

/// A ConfigMap named `name` that `owner` owns, so the garbage collector acts on it.
fn owned_configmap(name: &str, owner: &ConfigMap) -> ConfigMap {
    let mut cm = configmap(name, &[]);
    cm.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: owner.metadata.name.clone().unwrap(),
        uid: owner.metadata.uid.clone().unwrap(),
        ..OwnerReference::default()
    }]);
    cm
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn delete_orphans_or_collects_dependents_as_the_propagation_policy_says() {
    under_every_auth(delete_propagation).await;
}

async fn delete_propagation(mode: AuthMode) {
    let client = client(mode);
    let ns = TestNamespace::create(&client, "propagate").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let pp = PostParams::default();

    // Orphan: the owner waits, with the orphan finalizer, until the garbage collector has
    // removed the owner reference from its dependent; the dependent stays.
    let owner = api.create(&pp, &configmap("owner", &[])).await.unwrap();
    api.create(&pp, &owned_configmap("orphan", &owner))
        .await
        .unwrap();
    match api.delete("owner", &DeleteParams::orphan()).await.unwrap() {
        DeleteResult::Pending(o) => {
            assert!(o.metadata.deletion_timestamp.is_some());
            assert!(
                o.metadata
                    .finalizers
                    .unwrap_or_default()
                    .contains(&"orphan".to_owned())
            );
        }
        // The garbage collector may already have finished.
        DeleteResult::Deleted(_) => {}
    }
    converge!("the owner deleted, its dependent orphaned", {
        let owner_gone = api.get_opt("owner").await.unwrap().is_none();
        let dependent = api.get("orphan").await.unwrap();
        let unowned = dependent
            .metadata
            .owner_references
            .is_none_or(|r| r.is_empty());
        (owner_gone && unowned).then_some(())
    });

    // Background: the owner goes at once; the garbage collector deletes the dependent.
    let owner = api.create(&pp, &configmap("owner2", &[])).await.unwrap();
    api.create(&pp, &owned_configmap("collected", &owner))
        .await
        .unwrap();
    let deleted = api
        .delete("owner2", &DeleteParams::background())
        .await
        .unwrap();
    assert!(matches!(deleted, DeleteResult::Deleted(_)), "{deleted:?}");
    assert_eq!(api.get_opt("owner2").await.unwrap(), None);
    converge!("the dependent collected", {
        api.get_opt("collected")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    });
    assert!(
        api.get_opt("orphan").await.unwrap().is_some(),
        "the orphan was collected too"
    );
}

// === subresources ===

#[tokio::test]
#[ignore = "needs cluster"]
async fn status_subresource_of_a_built_in_kind_changes_status_only() {
    under_every_auth(service_status).await;
}

async fn service_status(mode: AuthMode) {
    let client = client(mode);
    let ns = TestNamespace::create(&client, "svcstatus").await;
    // A LoadBalancer Service: testenv runs no cloud controller, so its status is ours to set.
    let api: Api<Service> = Api::namespaced(client.clone(), &ns.name);
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "lb"},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}
    }))
    .unwrap();
    api.create(&PostParams::default(), &svc).await.unwrap();
    let ingress_ips = |s: &Service| -> Vec<String> {
        s.status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|lb| lb.ingress.as_ref())
            .map(|i| i.iter().filter_map(|i| i.ip.clone()).collect())
            .unwrap_or_default()
    };
    let port = |s: &Service| s.spec.as_ref().unwrap().ports.as_ref().unwrap()[0].port;

    let status = api.get_status("lb").await.unwrap();
    assert_eq!(status.metadata.name.as_deref(), Some("lb"));
    assert!(ingress_ips(&status).is_empty());

    let patched = api
        .patch_status(
            "lb",
            &PatchParams::default(),
            &Patch::Merge(json!({
                "spec": {"ports": [{"port": 81}]},
                "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.10"}]}}
            })),
        )
        .await
        .unwrap();
    assert_eq!(ingress_ips(&patched), ["192.0.2.10"]);
    assert_eq!(port(&patched), 80, "spec changed through /status");

    let mut current = api.get_status("lb").await.unwrap();
    current.status = Some(
        serde_json::from_value(json!({"loadBalancer": {"ingress": [{"ip": "192.0.2.11"}]}}))
            .unwrap(),
    );
    current.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].port = 82;
    let replaced = api
        .replace_status("lb", &PostParams::default(), &current)
        .await
        .unwrap();
    assert_eq!(ingress_ips(&replaced), ["192.0.2.11"]);
    assert_eq!(port(&replaced), 80, "spec changed through /status");

    // A status replace with the version now stale is a conflict, as a replace is.
    let err = api
        .replace_status("lb", &PostParams::default(), &current)
        .await
        .unwrap_err();
    assert!(err.is_conflict(), "{err}");
    assert_eq!(ingress_ips(&api.get("lb").await.unwrap()), ["192.0.2.11"]);
}

// === a typed custom resource ===

/// A custom resource written in the k8s-openapi style, as an operator writes its own kinds:
/// the `Widget` kind of the `typed.client.example.com` group (see [`install_widget_crd`]).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
struct Widget {
    api_version: String,
    kind: String,
    metadata: ObjectMeta,
    spec: WidgetSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status: Option<WidgetStatus>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
struct WidgetSpec {
    size: i64,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
struct WidgetStatus {
    ready: i64,
}

impl k8s_openapi::Resource for Widget {
    const API_VERSION: &'static str = "typed.client.example.com/v1";
    const GROUP: &'static str = "typed.client.example.com";
    const KIND: &'static str = "Widget";
    const VERSION: &'static str = "v1";
    const URL_PATH_SEGMENT: &'static str = "widgets";
    type Scope = NamespaceResourceScope;
}

impl k8s_openapi::Metadata for Widget {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl Widget {
    fn new(name: &str, size: i64) -> Widget {
        use k8s_openapi::Resource;
        Widget {
            api_version: Widget::API_VERSION.to_owned(),
            kind: Widget::KIND.to_owned(),
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            spec: WidgetSpec { size },
            status: None,
        }
    }
}

/// Installs the `Widget` CRD unless it is installed, and waits until the API serves it.
///
/// A typed kind's group is a constant, so unlike the dynamic test's CRD this one cannot be
/// unique per run: it is shared by every run and left installed (each run's widgets go with
/// its namespace). A CRD left terminating by an interrupted run is waited out.
async fn install_widget_crd(client: &Client) {
    use k8s_openapi::Resource;
    let crds = Api::<DynamicObject>::dynamic(
        client.clone(),
        &client
            .resolve("apiextensions.k8s.io/v1", "CustomResourceDefinition")
            .await
            .unwrap(),
        None,
    );
    let name = format!("{}.{}", Widget::URL_PATH_SEGMENT, Widget::GROUP);
    let crd: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
        "spec": {
            "group": Widget::GROUP, "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                    "status": {"type": "object", "properties": {"ready": {"type": "integer"}}}}}}}]
        }
    }))
    .unwrap();
    converge!("the Widget CRD installed", {
        match crds.get_opt(&name).await.unwrap() {
            Some(c) if c.metadata.deletion_timestamp.is_none() => Some(()),
            Some(_) => None, // terminating: wait until it is gone
            None => match crds.create(&PostParams::default(), &crd).await {
                Ok(_) => Some(()),
                Err(e) if e.is_already_exists() => None,
                Err(e) => panic!("creating the Widget CRD: {e}"),
            },
        }
    });
    converge!("Widget served", {
        client.resolve(Widget::API_VERSION, Widget::KIND).await.ok()
    });
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn typed_custom_resource_supports_every_verb_and_its_status() {
    install_widget_crd(&client(AuthMode::ClientCertificate)).await;
    under_every_auth(typed_custom_resource).await;
}

async fn typed_custom_resource(mode: AuthMode) {
    let client = client(mode);
    let ns = TestNamespace::create(&client, "typedcr").await;
    let api: Api<Widget> = Api::namespaced(client.clone(), &ns.name);
    assert_eq!(
        api.collection_path(),
        format!(
            "/apis/typed.client.example.com/v1/namespaces/{}/widgets",
            ns.name
        )
    );
    let rv = current_version(&api).await;
    let mut stream = api
        .watch(&WatchParams::default().from_version(&rv).timeout(120))
        .await
        .unwrap();

    let created = api
        .create(&PostParams::default(), &Widget::new("w1", 1))
        .await
        .unwrap();
    assert_eq!(created.kind, "Widget");
    assert_eq!(created.spec, WidgetSpec { size: 1 });
    assert_eq!(created.status, None);
    assert!(created.metadata.uid.is_some());

    let got = api.get("w1").await.unwrap();
    assert_eq!(got.metadata.uid, created.metadata.uid);
    api.create(&PostParams::default(), &Widget::new("w2", 5))
        .await
        .unwrap();
    let listed = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(names_of(&listed.items), ["w1", "w2"]);
    let one = api
        .list(&ListParams::default().fields("metadata.name=w2"))
        .await
        .unwrap();
    assert_eq!(one.items.len(), 1);
    assert_eq!(one.items[0].spec.size, 5);

    let mut update = got.clone();
    update.spec.size = 2;
    let replaced = api
        .replace("w1", &PostParams::default(), &update)
        .await
        .unwrap();
    assert_eq!(replaced.spec.size, 2);
    let err = api
        .replace("w1", &PostParams::default(), &update)
        .await
        .unwrap_err();
    assert!(err.is_conflict(), "{err}");

    // Through /status, status changes and spec does not.
    let mut with_status = replaced.clone();
    with_status.spec.size = 99;
    with_status.status = Some(WidgetStatus { ready: 1 });
    let status_replaced = api
        .replace_status("w1", &PostParams::default(), &with_status)
        .await
        .unwrap();
    assert_eq!(status_replaced.status, Some(WidgetStatus { ready: 1 }));
    assert_eq!(status_replaced.spec.size, 2, "spec changed through /status");
    let status_patched = api
        .patch_status(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 98}, "status": {"ready": 2}})),
        )
        .await
        .unwrap();
    assert_eq!(status_patched.status, Some(WidgetStatus { ready: 2 }));
    assert_eq!(status_patched.spec.size, 2, "spec changed through /status");
    assert_eq!(
        api.get_status("w1").await.unwrap().status,
        Some(WidgetStatus { ready: 2 })
    );

    let deleted = api.delete("w1", &DeleteParams::default()).await.unwrap();
    assert!(matches!(deleted, DeleteResult::Deleted(_)), "{deleted:?}");
    assert_eq!(api.get_opt("w1").await.unwrap(), None);

    let seen = next_events(&mut stream, 5, |ty, w: &Widget| {
        (w.metadata.name.as_deref() == Some("w1")).then(|| {
            let ready = w.status.as_ref().map(|s| s.ready);
            format!("{ty} size={} ready={ready:?}", w.spec.size)
        })
    })
    .await;
    assert_eq!(
        seen,
        [
            "ADDED size=1 ready=None",
            "MODIFIED size=2 ready=None",
            "MODIFIED size=2 ready=Some(1)",
            "MODIFIED size=2 ready=Some(2)",
            "DELETED size=2 ready=Some(2)",
        ]
    );
}

// === a cluster-scoped kind ===

#[tokio::test]
#[ignore = "needs cluster"]
async fn typed_cluster_scoped_kind_supports_create_get_list_watch_and_delete() {
    under_every_auth(cluster_scoped).await;
}

async fn cluster_scoped(mode: AuthMode) {
    let client = client(mode);
    let api: Api<ClusterRole> = Api::cluster(client.clone());
    assert_eq!(
        api.collection_path(),
        "/apis/rbac.authorization.k8s.io/v1/clusterroles"
    );
    assert_eq!(api.namespace(), None);
    // Cluster-scoped: no namespace to clean up after us, so the name and label are unique.
    let name = unique("client-role");
    let selector = format!("client-test={name}");
    let role = ClusterRole {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels: Some([("client-test".to_owned(), name.clone())].into()),
            ..ObjectMeta::default()
        },
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["configmaps".into()]),
            verbs: vec!["get".into()],
            ..PolicyRule::default()
        }]),
        ..ClusterRole::default()
    };

    let rv = current_version(&api).await;
    let mut stream = api
        .watch(
            &WatchParams::default()
                .labels(&selector)
                .from_version(&rv)
                .timeout(120),
        )
        .await
        .unwrap();

    let created = api.create(&PostParams::default(), &role).await.unwrap();
    assert_eq!(created.metadata.namespace, None);
    let got = api.get(&name).await.unwrap();
    assert_eq!(got.rules.unwrap()[0].verbs, ["get"]);
    let listed = api
        .list(&ListParams::default().labels(&selector))
        .await
        .unwrap();
    assert_eq!(names_of(&listed.items), std::slice::from_ref(&name));
    let deleted = api.delete(&name, &DeleteParams::default()).await.unwrap();
    assert!(matches!(deleted, DeleteResult::Deleted(_)), "{deleted:?}");
    assert_eq!(api.get_opt(&name).await.unwrap(), None);

    let seen = next_events(&mut stream, 2, |ty, r: &ClusterRole| {
        Some(format!("{ty} {}", r.metadata.name.as_deref().unwrap_or("")))
    })
    .await;
    assert_eq!(seen, [format!("ADDED {name}"), format!("DELETED {name}")]);
}

// === dynamic and metadata-only ===

#[tokio::test]
#[ignore = "needs cluster"]
async fn dynamic_api_and_status_subresource_on_a_custom_resource() {
    under_every_auth(dynamic_custom_resource).await;
}

async fn dynamic_custom_resource(mode: AuthMode) {
    let client = client(mode);
    let group = format!("{}.client.example.com", unique("g"));
    let crds = Api::<DynamicObject>::dynamic(
        client.clone(),
        &client
            .resolve("apiextensions.k8s.io/v1", "CustomResourceDefinition")
            .await
            .unwrap(),
        None,
    );
    let crd: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("gadgets.{group}")},
        "spec": {
            "group": group, "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                    "status": {"type": "object", "properties": {"ready": {"type": "integer"}}}}}}}]
        }
    }))
    .unwrap();
    crds.create(&PostParams::default(), &crd).await.unwrap();

    // Discovery serves the new kind once the CRD is established.
    let resource: ApiResource = converge!("Gadget served", {
        client.resolve(&format!("{group}/v1"), "Gadget").await.ok()
    });
    assert_eq!(resource.plural, "gadgets");
    assert!(resource.namespaced);

    let ns = TestNamespace::create(&client, "dyn").await;
    let gadgets = Api::<DynamicObject>::dynamic(client.clone(), &resource, Some(&ns.name));
    let gadget: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{group}/v1"), "kind": "Gadget",
        "metadata": {"name": "g1"}, "spec": {"size": 3}
    }))
    .unwrap();
    gadgets
        .create(&PostParams::default(), &gadget)
        .await
        .unwrap();

    // The status subresource changes status only.
    let patched = gadgets
        .patch_status(
            "g1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 99}, "status": {"ready": 3}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.data["status"]["ready"], 3);
    assert_eq!(
        patched.data["spec"]["size"], 3,
        "spec changed through /status"
    );
    let mut current = gadgets.get_status("g1").await.unwrap();
    current.data.insert("status".into(), json!({"ready": 4}));
    let replaced = gadgets
        .replace_status("g1", &PostParams::default(), &current)
        .await
        .unwrap();
    assert_eq!(replaced.data["status"]["ready"], 4);

    let listed = gadgets.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1);
    crds.delete(&format!("gadgets.{group}"), &DeleteParams::default())
        .await
        .unwrap();
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn metadata_only_list_get_and_watch() {
    under_every_auth(metadata_only).await;
}

async fn metadata_only(mode: AuthMode) {
    let client = client(mode);
    let ns = TestNamespace::create(&client, "meta").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let list = api.list_metadata(&ListParams::default()).await.unwrap();
    let rv = list.metadata.resource_version.clone().unwrap();
    let mut stream = api
        .watch_metadata(&WatchParams::default().from_version(&rv).timeout(60))
        .await
        .unwrap();
    api.create(
        &PostParams::default(),
        &configmap("m", &[("big", &"x".repeat(4096))]),
    )
    .await
    .unwrap();

    let meta = api.get_metadata("m").await.unwrap();
    assert_eq!(meta.kind, "PartialObjectMetadata");
    assert_eq!(meta.metadata.name.as_deref(), Some("m"));
    let list = api
        .list_metadata(&ListParams::default().labels("suite=client"))
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(
        list.items[0].metadata.labels.as_ref().unwrap()["suite"],
        "client"
    );
    loop {
        match next_event(&mut stream).await {
            Some(Ok(WatchEvent::Added(m))) => {
                assert_eq!(m.metadata.name.as_deref(), Some("m"));
                assert_eq!(m.kind, "PartialObjectMetadata");
                break;
            }
            Some(Ok(WatchEvent::Bookmark(_))) => {}
            other => panic!("{other:?}"),
        }
    }
}

// === transport ===

#[tokio::test]
#[ignore = "needs cluster"]
async fn http1_only_client_works_when_http2_is_declined() {
    under_every_auth(http1_only).await;
}

async fn http1_only(mode: AuthMode) {
    let client = client_with(
        mode,
        ClientOptions {
            http2: false,
            ..ClientOptions::default()
        },
    );
    let body = client.get_raw("/readyz").await.unwrap();
    assert_eq!(&body[..], b"ok");
    // An authenticated request too: /readyz is open to anyone.
    let ns = TestNamespace::create(&client, "http1").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    api.create(&PostParams::default(), &configmap("h", &[]))
        .await
        .unwrap();
    let listed = api
        .list(&ListParams::default().labels("suite=client"))
        .await
        .unwrap();
    assert_eq!(names_of(&listed.items), ["h"]);
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn protobuf_list_reads_the_same_objects_as_json() {
    use controller_runtime::client::Raw;
    use controller_runtime::informer::Object;

    let client = client(AuthMode::ClientCertificate);
    let ns = TestNamespace::create(&client, "proto").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    for i in 0..3 {
        api.create(
            &PostParams::default(),
            &configmap(&format!("pb{i}"), &[("k", "v")]),
        )
        .await
        .unwrap();
    }
    let json = api.list(&ListParams::default().limit(2)).await.unwrap();

    // `Raw` of a built-in kind is listed as protobuf and transcoded.
    let raw: Api<Raw<ConfigMap>> = Api::namespaced(client.clone(), &ns.name);
    let list = raw.list(&ListParams::default().limit(2)).await.unwrap();
    // Three ConfigMaps and the namespace's kube-root-ca.crt, two to a page.
    assert!(list.metadata.continue_.is_some(), "a continue token");
    assert_eq!(list.metadata.remaining_item_count, Some(2));
    assert_eq!(json.metadata.remaining_item_count, Some(2));
    let got: Vec<_> = list
        .items
        .iter()
        .map(|item| {
            let labels: Vec<_> = item
                .meta()
                .unwrap()
                .labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            (
                item.name().to_owned(),
                item.namespace().unwrap().to_owned(),
                item.uid().unwrap().to_owned(),
                labels,
            )
        })
        .collect();
    let want: Vec<_> = json
        .items
        .iter()
        .map(|cm| {
            let m = &cm.metadata;
            let labels = m
                .labels
                .iter()
                .flatten()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            (
                m.name.clone().unwrap(),
                m.namespace.clone().unwrap(),
                m.uid.clone().unwrap(),
                labels,
            )
        })
        .collect();
    assert_eq!(got, want);

    // An error answer comes in protobuf too, and reads as the same Status.
    let bad_token = ListParams {
        continue_token: Some("not-a-token".into()),
        ..ListParams::default()
    };
    let err = raw.list(&bad_token).await.unwrap_err();
    let status = err.status().expect("a Status");
    assert_eq!(status.code, Some(400), "{err}");
    assert_eq!(status.reason.as_deref(), Some("BadRequest"), "{err}");
}
