//! Read-your-own-writes against the real cluster: every write through the manager's client
//! is seen by the next read of the manager's cache, and a cache limited to the namespace ""
//! reads every namespace.
//!
//! `READ_YOUR_WRITES=off` runs the first test with the wait turned off, to show by hand
//! that it then fails.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;

use controller_runtime::client::{Api, DeleteParams, DeleteResult, Patch, PatchParams, PostParams};
use controller_runtime::runtime::{Cache, CacheOptions, Manager, ManagerOptions, Store};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{ConfigMap, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use support::cluster::{self, create_namespace};
use support::run_manager;

const PAIRS: usize = 10_000;
const OBJECTS: usize = 4;

fn deployment(ns: &str, name: &str, note: usize) -> Deployment {
    let labels = BTreeMap::from([("app".to_owned(), name.to_owned())]);
    Deployment {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(ns.to_owned()),
            annotations: Some(BTreeMap::from([("note".to_owned(), note.to_string())])),
            ..ObjectMeta::default()
        },
        spec: Some(DeploymentSpec {
            replicas: Some(0),
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![k8s_openapi::api::core::v1::Container {
                        name: "c".to_owned(),
                        image: Some("registry.k8s.io/pause:3.10".to_owned()),
                        ..Default::default()
                    }],
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    }
}

fn rv(d: &Deployment) -> u64 {
    d.metadata
        .resource_version
        .as_deref()
        .unwrap()
        .parse()
        .unwrap()
}

/// Replaces `name` (its status if `status`) after `change`, read afresh from the server and
/// sent again on a conflict (the Deployment controller writes the status too).
async fn replace_with(
    api: &Api<Deployment>,
    name: &str,
    status: bool,
    change: impl Fn(&mut Deployment),
) -> Deployment {
    loop {
        let mut d = api.get(name).await.unwrap();
        change(&mut d);
        let params = PostParams::default();
        let replaced = if status {
            api.replace_status(name, &params, &d).await
        } else {
            api.replace(name, &params, &d).await
        };
        match replaced {
            Ok(d) => return d,
            Err(e) if e.is_conflict() => continue,
            Err(e) => panic!("replacing {name}: {e}"),
        }
    }
}

/// What a write left: the object at a version, or gone (with the uid it had).
#[derive(Clone, Debug)]
enum Written {
    At(u64),
    Gone(Option<String>),
}

/// The reason a cached read is stale against what was written, if it is.
fn stale(written: &Written, cached: Option<&Arc<Deployment>>) -> Option<String> {
    match (written, cached) {
        (Written::At(want), Some(d)) if rv(d) >= *want => None,
        (Written::At(want), Some(d)) => Some(format!("cached at {} < written {want}", rv(d))),
        (Written::At(want), None) => Some(format!("missing, written at {want}")),
        (Written::Gone(_), None) => None,
        (Written::Gone(uid), Some(d)) if uid.is_some() && d.metadata.uid != *uid => None,
        (Written::Gone(_), Some(d)) => Some(format!("deleted, still cached at {}", rv(d))),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn ten_thousand_writes_through_the_manager_are_each_seen_by_the_next_cached_read() {
    let on = std::env::var("READ_YOUR_WRITES").as_deref() != Ok("off");
    let client = cluster::client();
    let ns = create_namespace(&client, "ryw").await;
    let options = ManagerOptions {
        cache: CacheOptions {
            namespaces: vec![ns.clone()],
            read_your_writes: on,
            ..CacheOptions::default()
        },
        client: controller_runtime::client::ClientOptions {
            rate_limit: None,
            ..Default::default()
        },
        ..ManagerOptions::default()
    };
    let manager = Manager::with_config(cluster::config(), options).unwrap();
    let store: Store<Deployment> = manager.store().unwrap();
    let (stop, running) = run_manager(&manager);
    store.wait_synced().await;

    let api: Api<Deployment> = Api::namespaced(manager.client(), &ns);
    let mut written: Vec<Option<Written>> = vec![None; OBJECTS];
    let mut stale_reads = Vec::new();
    let apply = PatchParams::apply("ryw-test").force();
    for step in 0..PAIRS {
        let i = step % OBJECTS;
        let name = format!("d{i}");
        // Each object runs through create, replace, merge patch, apply, status patch,
        // status replace and delete, the objects out of phase with one another.
        let exists = matches!(written[i], Some(Written::At(_)));
        let phase = (step / OBJECTS + i) % 7;
        let result = if !exists {
            Written::At(rv(&api
                .create(&PostParams::default(), &deployment(&ns, &name, step))
                .await
                .unwrap()))
        } else {
            match phase {
                0 | 1 => Written::At(rv(&replace_with(&api, &name, false, |d| {
                    d.metadata.annotations =
                        Some(BTreeMap::from([("note".into(), step.to_string())]));
                })
                .await)),
                2 => {
                    let patch = serde_json::json!({"metadata": {"annotations": {"note": step.to_string()}}});
                    Written::At(rv(&api
                        .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                        .await
                        .unwrap()))
                }
                3 => {
                    let d = deployment(&ns, &name, step);
                    Written::At(rv(&api
                        .patch(&name, &apply, &Patch::Apply(&d))
                        .await
                        .unwrap()))
                }
                4 => {
                    let patch = serde_json::json!({"status": {"observedGeneration": step}});
                    Written::At(rv(&api
                        .patch_status(&name, &PatchParams::default(), &Patch::Merge(patch))
                        .await
                        .unwrap()))
                }
                5 => Written::At(rv(&replace_with(&api, &name, true, |d| {
                    let mut status = d.status.clone().unwrap_or_default();
                    status.observed_generation = Some(step as i64);
                    d.status = Some(status);
                })
                .await)),
                _ => {
                    let uid = api.get(&name).await.unwrap().metadata.uid;
                    match api.delete(&name, &DeleteParams::default()).await.unwrap() {
                        DeleteResult::Deleted(_) => Written::Gone(uid),
                        DeleteResult::Pending(d) => match &d.metadata.finalizers {
                            Some(f) if !f.is_empty() => Written::At(rv(&d)),
                            _ => Written::Gone(uid),
                        },
                    }
                }
            }
        };
        written[i] = Some(result.clone());
        // The read right after the write, and every tenth step a list of the namespace.
        let cached = store.get(&ns, &name).await.unwrap();
        if let Some(why) = stale(&result, cached.as_ref()) {
            stale_reads.push(format!("step {step} {name} get: {why}"));
        }
        if step % 10 == 9 {
            let listed = store.list_in(&ns).await.unwrap();
            for (j, w) in written.iter().enumerate() {
                let Some(w) = w else { continue };
                let name = format!("d{j}");
                let found = listed
                    .iter()
                    .find(|d| d.metadata.name.as_deref() == Some(&name));
                if let Some(why) = stale(w, found) {
                    stale_reads.push(format!("step {step} {name} list: {why}"));
                }
            }
        }
    }
    let _ = stop.send(());
    running.await.unwrap().unwrap();
    cluster::delete_namespace(&client, &ns).await;
    let shown: Vec<_> = stale_reads.iter().take(20).collect();
    assert!(
        stale_reads.is_empty(),
        "{} stale reads of {PAIRS} (read-your-writes {}), first: {shown:#?}",
        stale_reads.len(),
        if on { "on" } else { "off" }
    );
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_cache_limited_to_the_namespace_empty_reads_every_namespace() {
    let client = cluster::client();
    let ns = create_namespace(&client, "ryw-all").await;
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some("cm".to_owned()),
            namespace: Some(ns.clone()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    let cache = Cache::new(
        client.clone(),
        CacheOptions {
            namespaces: vec![String::new()],
            ..CacheOptions::default()
        },
    );
    let store = cache.store::<ConfigMap>().unwrap();
    let (stop, mut stopping) = tokio::sync::watch::channel(false);
    cache.start(async move {
        let _ = stopping.wait_for(|stop| *stop).await;
    });
    cache.wait_for_sync().await.unwrap();
    let listed = store.list().await.unwrap();
    assert!(
        listed
            .iter()
            .any(|c| c.metadata.namespace.as_deref() == Some(&ns)),
        "the list holds the ConfigMap of {ns}"
    );
    let got = store.get(&ns, "cm").await.unwrap();
    assert_eq!(got.unwrap().metadata.name.as_deref(), Some("cm"));
    let names: Vec<_> = (store.list_in(&ns).await.unwrap().iter())
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    assert!(names.contains(&"cm".to_owned()), "{names:?}");
    let _ = stop.send(true);
    cluster::delete_namespace(&client, &ns).await;
}
