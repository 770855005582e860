//! The client's verbs on a built-in kind against the real local cluster: create, get,
//! replace (and its conflict), merge, JSON and strategic patches, server-side apply between
//! field managers, list, delete, and the status subresource. Each test runs under every way
//! of authenticating (`support::client_suite`).

mod support;

use controller_runtime::client::{
    Api, DeleteParams, DeleteResult, Error, ListParams, Patch, PatchParams, PostParams,
};
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use serde_json::json;
use support::client_suite::{AuthMode, client, configmap, data_of, namespace, under_every_auth};

#[tokio::test]
#[ignore = "needs cluster"]
async fn crud_verbs_work_under_every_authentication() {
    under_every_auth(crud_verbs).await;
}

async fn crud_verbs(mode: AuthMode) {
    let client = client(mode);
    let ns = namespace(&client, "crud").await;
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

// === server-side apply ===

#[tokio::test]
#[ignore = "needs cluster"]
async fn server_side_apply_conflicts_between_managers_unless_forced() {
    under_every_auth(server_side_apply).await;
}

async fn server_side_apply(mode: AuthMode) {
    let client = client(mode);
    let ns = namespace(&client, "ssa").await;
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

// === subresources ===

#[tokio::test]
#[ignore = "needs cluster"]
async fn status_subresource_of_a_built_in_kind_changes_status_only() {
    under_every_auth(service_status).await;
}

async fn service_status(mode: AuthMode) {
    let client = client(mode);
    let ns = namespace(&client, "svcstatus").await;
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
