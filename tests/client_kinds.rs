//! Kinds beyond a typed built-in one against the real local cluster: a typed custom resource
//! with its status, a typed cluster-scoped kind, the dynamic API on a custom resource, and
//! metadata-only lists, gets and watches. Each test runs under every way of authenticating
//! (`support::client_suite`).

mod support;

use controller_runtime::client::{
    Api, ApiResource, Client, DeleteParams, DeleteResult, DynamicObject, ListParams, Patch,
    PatchParams, PostParams, WatchEvent, WatchParams,
};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use serde_json::json;
use support::client_suite::{
    AuthMode, client, configmap, current_version, names_of, namespace, next_event, next_events,
    under_every_auth,
};
use support::{converge, unique};

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
    let ns = namespace(&client, "typedcr").await;
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

    let ns = namespace(&client, "dyn").await;
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
    let ns = namespace(&client, "meta").await;
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
