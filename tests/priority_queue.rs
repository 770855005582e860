//! The controllers' priority queue against the real cluster: a live change is reconciled
//! before an initial list of many objects, and the list is still reconciled after it.

mod support;

use std::sync::Arc;

use controller_runtime::client::{Api, PostParams};
use controller_runtime::runtime::{
    Action, CacheOptions, Controller, Manager, ManagerOptions, ReconcileError,
};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use parking_lot::Mutex;
use support::cluster::{self, create_namespace};
use support::{CONVERGE, http_get, run_manager, sample, wait_until};
use tokio::sync::Semaphore;

/// ConfigMaps listed when the controller starts.
const LISTED: usize = 300;

/// Records the order of reconciles; the first one waits until `release` has a permit.
struct Order {
    started: Mutex<Vec<String>>,
    release: Semaphore,
}

async fn record(cm: Arc<ConfigMap>, ctx: Arc<Order>) -> Result<Action, ReconcileError> {
    let name = cm.metadata.name.clone().unwrap_or_default();
    let first = {
        let mut started = ctx.started.lock();
        started.push(name);
        started.len() == 1
    };
    if first {
        ctx.release.acquire().await.unwrap().forget();
    }
    Ok(Action::done())
}

fn configmap(ns: &str, name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(ns.to_owned()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    }
}

/// With one worker held in its first reconcile, the informer's initial list queues every
/// other listed object at low priority; a ConfigMap created then is queued at priority 0,
/// and it is the next one reconciled, ahead of all the listed ones, which all follow.
///
/// Deterministic: the worker is released only once the metrics show the live change
/// queued. (The queue ages the listed objects one level per second; the live change would
/// lose its head start only if it came 100 s after the list.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn a_live_change_is_reconciled_before_an_initial_list_of_many_objects() {
    let client = cluster::client();
    let ns = create_namespace(&client, "rt-prio").await;
    let configmaps = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    for i in 0..LISTED {
        configmaps
            .create(
                &PostParams::default(),
                &configmap(&ns, &format!("listed-{i}")),
            )
            .await
            .unwrap();
    }
    // The namespace's own ConfigMap, so that it is in the list, not a live change.
    wait_until(
        "kube-root-ca.crt exists",
        CONVERGE,
        async || match configmaps.get_opt("kube-root-ca.crt").await {
            Ok(Some(_)) => Ok(()),
            other => Err(format!("{other:?}")),
        },
    )
    .await;

    let options = ManagerOptions {
        cache: CacheOptions {
            namespaces: vec![ns.clone()],
            ..CacheOptions::default()
        },
        metrics_bind_address: Some("127.0.0.1:0".parse().unwrap()),
        health_probe_bind_address: Some("127.0.0.1:0".parse().unwrap()),
        ..ManagerOptions::default()
    };
    let manager = Manager::with_config(cluster::config(), options).unwrap();
    let ctx = Arc::new(Order {
        started: Mutex::new(Vec::new()),
        release: Semaphore::new(0),
    });
    // One worker, so that a single reconcile held open keeps the rest of the list queued.
    Controller::<ConfigMap>::new(&manager)
        .named("prio")
        .max_concurrent_reconciles(1)
        .complete(record, ctx.clone())
        .unwrap();
    let (stop, task) = run_manager(&manager);
    let metrics = manager.metrics_addr().await.unwrap();
    let depth = async |priority: &str| {
        let (_, scrape) = http_get(metrics, "/metrics").await;
        let series =
            format!(r#"workqueue_depth{{name="prio",controller="prio",priority="{priority}"}}"#);
        sample(&scrape, &series).map(|value| value.parse::<f64>().unwrap())
    };

    // All listed but the one being reconciled wait at low priority.
    let listed = LISTED + 1; // and kube-root-ca.crt
    wait_until("the initial list is queued", CONVERGE, async || {
        let low = depth("-100").await;
        let started = ctx.started.lock().len();
        (started == 1 && low == Some((listed - 1) as f64))
            .then_some(())
            .ok_or(format!("{started} started, {low:?} queued at -100"))
    })
    .await;

    configmaps
        .create(&PostParams::default(), &configmap(&ns, "live"))
        .await
        .unwrap();
    wait_until("the live change is queued", CONVERGE, async || {
        let live = depth("0").await;
        (live == Some(1.0))
            .then_some(())
            .ok_or(format!("{live:?} queued at 0"))
    })
    .await;
    ctx.release.add_permits(1);

    wait_until("every object is reconciled", CONVERGE, async || {
        let n = ctx.started.lock().len();
        (n == listed + 1).then_some(()).ok_or(format!("{n}"))
    })
    .await;
    let started = ctx.started.lock().clone();
    assert_eq!(started[1], "live", "reconciled right after the held one");
    assert!(started[2..].iter().all(|name| name != "live"));
    assert_eq!(depth("-100").await, Some(0.0));

    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
    cluster::delete_namespace(&client, &ns).await;
}
