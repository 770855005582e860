//! The client against the real local cluster: every verb, watches, pagination, conflicts,
//! server-side apply, 410 after compaction, subresources, metadata-only and dynamic APIs,
//! and HTTP/1.1 when HTTP/2 is declined (`client_http2.rs` proves watches share one HTTP/2
//! connection). The core verbs run three times: with the client certificate, a bearer token,
//! and an exec credential plugin.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use controller_runtime::client::{
    Api, ApiResource, Client, ClientOptions, DeleteParams, DeleteResult, DynamicObject, Error,
    ListParams, Patch, PatchParams, PostParams, VersionMatch, WatchEvent, WatchParams, WatchStream,
};
use controller_runtime::config::{Config, KubeconfigOptions};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, PodTemplate};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::json;
use support::cluster::{compact_etcd, create_namespace, template, testenv_dir};
use support::{CONVERGE, unique};

// === fixtures ===

/// How the test client proves who it is.
#[derive(Clone, Copy, Debug)]
enum AuthMode {
    ClientCertificate,
    BearerToken,
    ExecPlugin,
}

const ALL_AUTH: [AuthMode; 3] = [
    AuthMode::ClientCertificate,
    AuthMode::BearerToken,
    AuthMode::ExecPlugin,
];

/// A client for the test cluster authenticating as `mode`, loaded through a kubeconfig file
/// as a user's would be.
fn client(mode: AuthMode) -> Client {
    let dir = testenv_dir();
    let path = match mode {
        AuthMode::ClientCertificate => dir.join("kubeconfig"),
        other => write_kubeconfig(&dir, other),
    };
    let config = Config::from_kubeconfig(&KubeconfigOptions {
        path: Some(path),
        ..KubeconfigOptions::default()
    })
    .unwrap();
    Client::new(config, ClientOptions::default()).unwrap()
}

/// A kubeconfig for the same cluster whose user has no certificate: a token file, or the
/// test exec plugin handing out that token.
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
        AuthMode::BearerToken => format!("    tokenFile: {}\n", token.display()),
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

/// The next event, bounded so a missing event fails the test instead of hanging it.
async fn next_event<K: controller_runtime::client::WatchObject>(
    stream: &mut WatchStream<K>,
) -> Option<Result<WatchEvent<K>, Error>> {
    tokio::time::timeout(CONVERGE, stream.next())
        .await
        .expect("no watch event within the limit")
}

// === every verb, under each authentication ===

#[tokio::test]
#[ignore = "needs cluster"]
async fn crud_verbs_work_under_every_authentication() {
    for mode in ALL_AUTH {
        let client = client(mode);
        let ns = TestNamespace::create(&client, "crud").await;
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);

        let created = api
            .create(&PostParams::default(), &configmap("a", &[("k", "1")]))
            .await
            .unwrap_or_else(|e| panic!("{mode:?}: create: {e}"));
        assert_eq!(
            created.metadata.namespace.as_deref(),
            Some(ns.name.as_str())
        );

        let err = api
            .create(&PostParams::default(), &configmap("a", &[]))
            .await
            .unwrap_err();
        assert!(err.is_already_exists(), "{mode:?}: {err}");

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
        assert!(stale.is_conflict(), "{mode:?}: {stale}");

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
        assert!(
            matches!(deleted, DeleteResult::Deleted(_)),
            "{mode:?}: {deleted:?}"
        );
        assert_eq!(api.get_opt("a").await.unwrap(), None);
        let err = api.get("a").await.unwrap_err();
        assert!(err.is_not_found(), "{mode:?}: {err}");
    }
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn watch_sees_create_update_and_delete_in_order_under_every_authentication() {
    for mode in ALL_AUTH {
        let client = client(mode);
        let ns = TestNamespace::create(&client, "watch").await;
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
        let rv = api
            .list(&ListParams::default())
            .await
            .unwrap()
            .metadata
            .resource_version
            .unwrap();
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
        let is_w = |cm: &ConfigMap| cm.metadata.name.as_deref() == Some("w");
        let mut seen = Vec::new();
        while seen.len() < 3 {
            match next_event(&mut stream).await {
                Some(Ok(
                    WatchEvent::Added(cm) | WatchEvent::Modified(cm) | WatchEvent::Deleted(cm),
                )) if !is_w(&cm) => {}
                Some(Ok(WatchEvent::Added(cm))) => {
                    seen.push(format!("ADDED {:?}", data_of(&cm, "v")))
                }
                Some(Ok(WatchEvent::Modified(cm))) => {
                    seen.push(format!("MODIFIED {:?}", data_of(&cm, "v")))
                }
                Some(Ok(WatchEvent::Deleted(cm))) => {
                    seen.push(format!("DELETED {:?}", data_of(&cm, "v")))
                }
                Some(Ok(WatchEvent::Bookmark(_))) => {}
                other => panic!("{mode:?}: watch ended early: {other:?}"),
            }
        }
        assert_eq!(
            seen,
            [
                r#"ADDED Some("1")"#,
                r#"MODIFIED Some("2")"#,
                r#"DELETED Some("2")"#
            ],
            "{mode:?}"
        );
    }
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn pagination_spans_several_pages_under_every_authentication() {
    for mode in ALL_AUTH {
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
        assert_eq!(first.items.len(), 2, "{mode:?}");
        let token = first.metadata.continue_.clone().expect("a continue token");
        let second = api
            .list(&params.clone().continue_from(&token))
            .await
            .unwrap();
        assert_eq!(second.items.len(), 2);
        assert_ne!(first.items[0].metadata.name, second.items[0].metadata.name);

        let all = api.list_all(&params).await.unwrap();
        let mut names: Vec<_> = all
            .items
            .iter()
            .map(|c| c.metadata.name.clone().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["p0", "p1", "p2", "p3", "p4"], "{mode:?}");
    }
}

// === watch details ===

#[tokio::test]
#[ignore = "needs cluster"]
async fn bookmarks_arrive_and_initial_events_end_with_their_bookmark() {
    let client = client(AuthMode::ClientCertificate);
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
    let rv = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
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
    let client = client(AuthMode::ClientCertificate);
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
    let client = client(AuthMode::ClientCertificate);
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
    let client = client(AuthMode::ClientCertificate);
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
    let begin = tokio::time::Instant::now();
    while deployments.get_opt("fg").await.unwrap().is_some() {
        assert!(
            begin.elapsed() < CONVERGE,
            "the Deployment was never deleted"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

// === subresources, metadata-only and dynamic ===

#[tokio::test]
#[ignore = "needs cluster"]
async fn dynamic_api_and_status_subresource_on_a_custom_resource() {
    let client = client(AuthMode::ClientCertificate);
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
    let begin = tokio::time::Instant::now();
    let resource: ApiResource = loop {
        match client.resolve(&format!("{group}/v1"), "Gadget").await {
            Ok(r) => break r,
            Err(e) => {
                assert!(begin.elapsed() < CONVERGE, "Gadget never served: {e}");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    };
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
    let client = client(AuthMode::ClientCertificate);
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
    let dir = testenv_dir();
    let config = Config::from_kubeconfig(&KubeconfigOptions {
        path: Some(dir.join("kubeconfig")),
        ..KubeconfigOptions::default()
    })
    .unwrap();
    let client = Client::new(
        config,
        ClientOptions {
            http2: false,
            ..ClientOptions::default()
        },
    )
    .unwrap();
    let body = client.get_raw("/readyz").await.unwrap();
    assert_eq!(&body[..], b"ok");
}
