//! The Memcached operator against the real cluster, in process: a resource gets its owned
//! Deployment and an honest status, size changes and hand edits are followed, and a deletion
//! passes through the finalizer to garbage collection.

#[path = "../../../tests/support/mod.rs"]
mod support;

use std::time::Duration;

use controller_runtime::client::{Api, DeleteParams, Patch, PatchParams, PostParams};
use controller_runtime::runtime::{CacheOptions, Manager, ManagerOptions};
use k8s_openapi::api::apps::v1::Deployment;
use memcached_operator::api::{Memcached, MemcachedSpec, condition};
use memcached_operator::reconcile::{FINALIZER, deployment_for, write_deployment};
use support::cluster::{self, create_namespace};
use support::{CONVERGE, wait_until};

fn condition_of(mc: &Memcached, type_: &str) -> Option<(String, String)> {
    let status = mc.status.as_ref()?;
    let c = status.conditions.iter().find(|c| c.type_ == type_)?;
    Some((c.status.clone(), c.reason.clone()))
}

fn replicas(d: &Deployment) -> Option<i32> {
    d.spec.as_ref().and_then(|s| s.replicas)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn a_memcached_gets_its_deployment_follows_its_size_and_goes_with_its_deletion() {
    let client = cluster::client();
    memcached_operator::install_crd(&client, CONVERGE)
        .await
        .unwrap();
    let ns = create_namespace(&client, "mc-op").await;
    let options = ManagerOptions {
        cache: memcached_operator::cache_selectors(CacheOptions {
            namespaces: vec![ns.clone()],
            ..CacheOptions::default()
        }),
        ..ManagerOptions::default()
    };
    let manager = Manager::with_config(cluster::config(), options).unwrap();
    memcached_operator::setup(&manager, memcached_operator::DEFAULT_IMAGE).unwrap();
    let (stop, running) = support::run_manager(&manager);

    let memcacheds = Api::<Memcached>::namespaced(client.clone(), &ns);
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns);
    let spec = MemcachedSpec {
        size: Some(2),
        container_port: 11211,
        image: None,
    };
    memcacheds
        .create(&PostParams::default(), &Memcached::new("cache", spec))
        .await
        .unwrap();

    // The Deployment: owned, labelled per resource, restricted, at the size.
    let deployment = wait_until("the deployment is created", CONVERGE, async || {
        let d = deployments
            .get_opt("cache")
            .await
            .map_err(|e| e.to_string())?;
        d.ok_or("not yet".to_owned())
    })
    .await;
    assert_eq!(replicas(&deployment), Some(2));
    let owner = &deployment.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.controller),
        ("Memcached", Some(true))
    );
    let labels = deployment.metadata.labels.clone().unwrap();
    assert_eq!(labels["app.kubernetes.io/instance"], "cache");
    let pod = deployment.spec.unwrap().template.spec.unwrap();
    let container = &pod.containers[0];
    let security = container.security_context.as_ref().unwrap();
    assert_eq!(security.allow_privilege_escalation, Some(false));
    assert_eq!(security.run_as_non_root, Some(true));
    assert_eq!(
        pod.security_context.unwrap().seccomp_profile.unwrap().type_,
        "RuntimeDefault"
    );

    // The status reports what runs: two ready Pods, named.
    let mc = wait_until("two pods ready and available", CONVERGE, async || {
        let mc = memcacheds.get("cache").await.map_err(|e| e.to_string())?;
        let status = mc.status.clone().unwrap_or_default();
        let available = condition_of(&mc, condition::AVAILABLE);
        (status.ready_replicas == Some(2)
            && status.nodes.len() == 2
            && available == Some(("True".to_owned(), "PodsReady".to_owned())))
        .then_some(mc.clone())
        .ok_or(format!("{:?}", mc.status))
    })
    .await;
    assert!(
        mc.metadata
            .finalizers
            .unwrap()
            .contains(&FINALIZER.to_owned())
    );
    assert!(
        mc.status
            .unwrap()
            .nodes
            .iter()
            .all(|n| n.starts_with("cache-"))
    );

    // A size change is followed.
    memcacheds
        .patch(
            "cache",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"size": 3}})),
        )
        .await
        .unwrap();
    wait_until("scaled to three, ready", CONVERGE, async || {
        let mc = memcacheds.get("cache").await.map_err(|e| e.to_string())?;
        let ready = mc.status.as_ref().and_then(|s| s.ready_replicas);
        (ready == Some(3) && mc.status.as_ref().unwrap().nodes.len() == 3)
            .then_some(())
            .ok_or(format!("{:?}", mc.status))
    })
    .await;

    // A second resource in the namespace stays independent of the first.
    let other = MemcachedSpec {
        size: Some(1),
        container_port: 11211,
        image: None,
    };
    memcacheds
        .create(&PostParams::default(), &Memcached::new("other", other))
        .await
        .unwrap();
    wait_until("the other one runs one pod", CONVERGE, async || {
        let mc = memcacheds.get("other").await.map_err(|e| e.to_string())?;
        let status = mc.status.clone().unwrap_or_default();
        (status.ready_replicas == Some(1) && status.nodes.len() == 1)
            .then_some(())
            .ok_or(format!("{status:?}"))
    })
    .await;
    let cache = memcacheds.get("cache").await.unwrap().status.unwrap();
    assert_eq!((cache.ready_replicas, cache.nodes.len()), (Some(3), 3));

    // Sizes outside the schema are refused by the API server with the schema's message.
    for (size, says) in [
        (
            serde_json::json!(-1),
            "should be greater than or equal to 0",
        ),
        (
            serde_json::json!(101),
            "should be less than or equal to 100",
        ),
        (serde_json::json!("three"), "spec.size"),
    ] {
        let refused = memcacheds
            .patch(
                "other",
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"spec": {"size": size}})),
            )
            .await
            .unwrap_err();
        let message = refused.to_string();
        assert!(message.contains(says), "size {size}: {message}");
    }

    // Down to one, then to zero.
    for size in [1, 0] {
        memcacheds
            .patch(
                "cache",
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"spec": {"size": size}})),
            )
            .await
            .unwrap();
        wait_until(&format!("scaled to {size}"), CONVERGE, async || {
            let mc = memcacheds.get("cache").await.map_err(|e| e.to_string())?;
            let status = mc.status.clone().unwrap_or_default();
            let n = usize::try_from(size).unwrap();
            (status.ready_replicas == Some(size) && status.nodes.len() == n)
                .then_some(())
                .ok_or(format!("{status:?}"))
        })
        .await;
    }
    memcacheds
        .patch(
            "cache",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"size": 3}})),
        )
        .await
        .unwrap();

    // A hand edit of the Deployment's replicas is reverted.
    deployments
        .patch(
            "cache",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"replicas": 1}})),
        )
        .await
        .unwrap();
    wait_until("the hand edit is reverted", CONVERGE, async || {
        let d = deployments.get("cache").await.map_err(|e| e.to_string())?;
        (replicas(&d) == Some(3))
            .then_some(())
            .ok_or(format!("{:?}", replicas(&d)))
    })
    .await;

    // Deletion: the finalizer lets go after a Deleting event, and the Deployment follows
    // by garbage collection.
    memcacheds
        .delete("cache", &DeleteParams::default())
        .await
        .unwrap();
    wait_until("the memcached is gone", CONVERGE, async || match memcacheds
        .get_opt("cache")
        .await
        .map_err(|e| e.to_string())?
    {
        None => Ok(()),
        Some(mc) => Err(format!("{:?}", mc.metadata.finalizers)),
    })
    .await;
    wait_until(
        "the deployment is collected",
        CONVERGE,
        async || match deployments
            .get_opt("cache")
            .await
            .map_err(|e| e.to_string())?
        {
            None => Ok(()),
            Some(_) => Err("still there".to_owned()),
        },
    )
    .await;
    let reasons = wait_until("events recorded", CONVERGE, async || {
        let reasons = cluster::event_reasons(&client, &ns).await?;
        (reasons.iter().any(|r| r == "Deleting") && reasons.iter().any(|r| r == "Scaled"))
            .then_some(reasons.clone())
            .ok_or(format!("{reasons:?}"))
    })
    .await;
    assert!(reasons.iter().any(|r| r == "Created"), "{reasons:?}");
    // Only real changes were written: no write re-applied a Deployment that matched.
    assert!(!reasons.iter().any(|r| r == "Updated"), "{reasons:?}");

    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(60), running)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    cluster::delete_namespace(&client, &ns).await;
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_scale_from_a_stale_cache_keeps_the_newer_change_and_sets_the_replicas() {
    let client = cluster::client();
    memcached_operator::install_crd(&client, CONVERGE)
        .await
        .unwrap();
    let ns = create_namespace(&client, "mc-op-stale").await;
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns);
    let mut mc = Memcached::new(
        "cache",
        MemcachedSpec {
            size: Some(0),
            container_port: 11211,
            image: None,
        },
    );
    mc.metadata.namespace = Some(ns.clone());
    let mc = Api::<Memcached>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &mc)
        .await
        .unwrap();
    let want = deployment_for(&mc, memcached_operator::DEFAULT_IMAGE).unwrap();
    let first = write_deployment(&deployments, None, &want).await.unwrap();

    // Someone else changes the Deployment after the cache's copy (`first`) was taken.
    let noted = serde_json::json!({"metadata": {"annotations": {"noted": "by-hand"}}});
    deployments
        .patch("cache", &PatchParams::default(), &Patch::Merge(&noted))
        .await
        .unwrap();

    // The update from the stale copy meets 409; the replicas still land, the note stays.
    let mut scaled = want.clone();
    scaled.spec.as_mut().unwrap().replicas = Some(2);
    let written = write_deployment(&deployments, Some(&first), &scaled)
        .await
        .unwrap();
    assert_eq!(replicas(&written), Some(2));
    let now = deployments.get("cache").await.unwrap();
    assert_eq!(replicas(&now), Some(2));
    let annotations = now.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations.get("noted").map(String::as_str),
        Some("by-hand")
    );

    // From a fresh copy the scale lands as well.
    let mut back = want.clone();
    back.spec.as_mut().unwrap().replicas = Some(1);
    let written = write_deployment(&deployments, Some(&now), &back)
        .await
        .unwrap();
    assert_eq!(replicas(&written), Some(1));
    assert_ne!(
        written.metadata.resource_version,
        now.metadata.resource_version
    );
    support::cluster::delete_namespace(&client, &ns).await;
}
