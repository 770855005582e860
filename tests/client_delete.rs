//! Deletion against the real local cluster: uid and resourceVersion preconditions, and
//! foreground, background and orphan propagation. Each test runs under every way of
//! authenticating (`support::client_suite`).

mod support;

use controller_runtime::client::{Api, DeleteParams, DeleteResult, Patch, PatchParams, PostParams};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde_json::json;
use support::client_suite::{AuthMode, client, configmap, namespace, under_every_auth};
use support::converge;

#[tokio::test]
#[ignore = "needs cluster"]
async fn delete_honours_preconditions_and_foreground_propagation() {
    under_every_auth(delete_foreground).await;
}

async fn delete_foreground(mode: AuthMode) {
    let client = client(mode);
    let ns = namespace(&client, "del").await;
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
    let ns = namespace(&client, "delrv").await;
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
    let ns = namespace(&client, "propagate").await;
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
