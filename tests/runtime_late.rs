//! The controller runtime's registration after the start, reconcile timeouts and `on_delete`
//! against the real cluster.

mod support;

use std::sync::Arc;
use std::time::Duration;

use controller_runtime::client::{Api, DeleteParams, Patch, PatchParams, PostParams};
use controller_runtime::runtime::{
    Action, CacheOptions, Controller, Manager, ManagerError, ManagerOptions, ReconcileError,
    ResourceExt,
};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use parking_lot::Mutex;
use support::cluster::{self, create_namespace};
use support::example::MirrorProcess;
use support::{CONVERGE, http_get, run_manager, sample, wait_ready, wait_until};

/// What the controller saw: the names it reconciled (to the end), and for each delete the
/// name and the `v` the last state held.
#[derive(Default)]
struct Seen {
    reconciled: Mutex<Vec<String>>,
    deleted: Mutex<Vec<(String, Option<String>)>>,
}

async fn reconcile(cm: Arc<ConfigMap>, seen: Arc<Seen>) -> Result<Action, ReconcileError> {
    if cm.name().starts_with("slow") {
        // Never returns: the controller's timeout drops it.
        std::future::pending::<()>().await;
    }
    seen.reconciled.lock().push(cm.name().to_owned());
    Ok(Action::done())
}

async fn forget(cm: Arc<ConfigMap>, seen: Arc<Seen>) -> Result<(), ReconcileError> {
    let v = cm.data.as_ref().and_then(|d| d.get("v").cloned());
    seen.deleted.lock().push((cm.name().to_owned(), v));
    Ok(())
}

fn configmap(ns: &str, name: &str, v: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(ns.to_owned()),
            ..ObjectMeta::default()
        },
        data: Some([("v".to_owned(), v.to_owned())].into()),
        ..ConfigMap::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn a_controller_completed_after_the_start_reconciles_times_out_and_sees_deletes() {
    let client = cluster::client();
    let ns = create_namespace(&client, "rt-late").await;
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
    let (stop, task) = run_manager(&manager);
    // Bound, so started: what follows is registered with a running manager.
    let metrics = manager.metrics_addr().await.unwrap();
    wait_ready(manager.probe_addr().await.unwrap()).await;

    let seen = Arc::new(Seen::default());
    Controller::<ConfigMap>::new(&manager)
        .named("late")
        .reconcile_timeout(Duration::from_millis(300))
        .on_delete(forget, seen.clone())
        .complete(reconcile, seen.clone())
        .unwrap();
    wait_until(
        "the late controller reconciles what its new informer listed",
        CONVERGE,
        async || {
            let reconciled = seen.reconciled.lock().clone();
            (reconciled.iter().any(|n| n == "kube-root-ca.crt"))
                .then_some(())
                .ok_or(format!("{reconciled:?}"))
        },
    )
    .await;

    // A reconcile past its timeout is dropped, counted, and retried.
    let configmaps = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    configmaps
        .create(&PostParams::default(), &configmap(&ns, "slow", "1"))
        .await
        .unwrap();
    let timeouts = r#"controller_runtime_reconcile_timeouts_total{controller="late"}"#;
    wait_until("timeouts are counted on /metrics", CONVERGE, async || {
        let (_, scrape) = http_get(metrics, "/metrics").await;
        let n: f64 = sample(&scrape, timeouts)
            .ok_or_else(|| format!("no {timeouts}"))?
            .parse()
            .unwrap();
        (n >= 2.0).then_some(()).ok_or(format!("{n}"))
    })
    .await;

    // A deleted object is handed to on_delete with its last state.
    configmaps
        .create(&PostParams::default(), &configmap(&ns, "gone", "1"))
        .await
        .unwrap();
    configmaps
        .patch(
            "gone",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"data": {"v": "2"}})),
        )
        .await
        .unwrap();
    configmaps
        .delete("gone", &DeleteParams::default())
        .await
        .unwrap();
    wait_until("on_delete gets the last state", CONVERGE, async || {
        let deleted = seen.deleted.lock().clone();
        (deleted == [("gone".to_owned(), Some("2".to_owned()))])
            .then_some(())
            .ok_or(format!("{deleted:?}"))
    })
    .await;
    assert!(
        !seen.reconciled.lock().iter().any(|n| n == "slow"),
        "the slow reconcile never finished"
    );

    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
    let late = manager.add("after-the-stop", false, |_| async {});
    assert!(matches!(late, Err(ManagerError::Stopped)), "{late:?}");
    cluster::delete_namespace(&client, &ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn past_the_graceful_shutdown_timeout_the_process_exits_anyway_and_says_so() {
    let client = cluster::client();
    let ns = create_namespace(&client, "rt-grace").await;
    let mirror = MirrorProcess::spawn(
        &["--namespace", &ns, "--graceful-shutdown-timeout", "1"],
        Some("error"),
        true,
    );

    // A reconcile that outlasts the one-second grace period by far, blocking its thread:
    // dropping its task cannot stop it, and a runtime dropped at the end of `main` would wait
    // for it.
    let mut cm = configmap(&ns, "endless", "1");
    cm.metadata.annotations = Some(
        [
            ("mirror.example.com/delay-seconds", "3600"),
            ("mirror.example.com/block", "true"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .into(),
    );
    Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    let started = format!("reconcile started {ns}/endless");
    mirror
        .wait_for_line("the endless reconcile starts", &started)
        .await;
    let (status, seen) = mirror
        .terminate("the process exits after the grace period")
        .await;
    assert_eq!(status.code(), Some(1), "output {seen:?}");
    assert!(
        seen.iter()
            .any(|l| l.contains("exiting with runnables still running")
                && l.contains("within grace period of 1s")),
        "{seen:?}"
    );
    assert!(
        !seen.iter().any(|l| l.contains("reconcile finished")),
        "{seen:?}"
    );
    cluster::delete_namespace(&client, &ns).await;
}
