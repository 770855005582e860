//! The cache's informer metrics on a running manager's `/metrics`, against the real cluster.

mod support;

use std::sync::Arc;
use std::time::Instant;

use controller_runtime::client::{Api, PostParams};
use controller_runtime::runtime::{
    Action, CacheOptions, Controller, Manager, ManagerOptions, ReconcileError,
};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use parking_lot::Mutex;
use support::cluster::{self, create_namespace, delete_namespace};
use support::{CONVERGE, http_get, run_manager, sample, wait_until};

/// The names of the ConfigMaps reconciled so far.
#[derive(Default)]
struct Seen(Mutex<Vec<String>>);

async fn record(cm: Arc<ConfigMap>, seen: Arc<Seen>) -> Result<Action, ReconcileError> {
    seen.0
        .lock()
        .push(cm.metadata.name.clone().unwrap_or_default());
    Ok(Action::done())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn a_manager_exports_its_informers_queue_latency_resource_version_and_staleness() {
    let client = cluster::client();
    let ns = create_namespace(&client, "inf-metrics").await;
    let options = ManagerOptions {
        cache: CacheOptions {
            namespaces: vec![ns.clone()],
            ..CacheOptions::default()
        },
        metrics_bind_address: Some("127.0.0.1:0".parse().unwrap()),
        ..ManagerOptions::default()
    };
    let manager = Manager::with_config(cluster::config(), options).unwrap();
    let seen = Arc::new(Seen::default());
    Controller::<ConfigMap>::new(&manager)
        .named("inf-metrics")
        .complete(record, seen.clone())
        .unwrap();
    let started = Instant::now();
    let (stop, task) = run_manager(&manager);
    let metrics = manager.metrics_addr().await.unwrap();

    let created = Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .create(
            &PostParams::default(),
            &ConfigMap {
                metadata: ObjectMeta {
                    name: Some("watched".into()),
                    namespace: Some(ns.clone()),
                    ..ObjectMeta::default()
                },
                ..ConfigMap::default()
            },
        )
        .await
        .unwrap();
    let written: f64 = created.metadata.resource_version.unwrap().parse().unwrap();
    wait_until("the new ConfigMap is reconciled", CONVERGE, async || {
        let seen = seen.0.lock().clone();
        seen.iter()
            .any(|n| n == "watched")
            .then_some(())
            .ok_or(format!("{seen:?}"))
    })
    .await;

    // The informer of ConfigMaps in `ns`, as the cache names it.
    let name = format!(r#"{{name="configmaps.v1/{ns}"}}"#);
    let series = |family: &str| format!("{family}{name}");
    let scrape = wait_until(
        "the store's resource version reaches the write, the queue drained",
        CONVERGE,
        async || {
            let (code, body) = http_get(metrics, "/metrics").await;
            let value =
                |family: &str| -> Option<f64> { sample(&body, &series(family))?.parse().ok() };
            let reached = value("informer_store_resource_version").is_some_and(|rv| rv >= written);
            let drained = value("informer_queued_items") == Some(0.0);
            (code == 200 && reached && drained)
                .then(|| body.clone())
                .ok_or_else(|| format!("{code}: {}", informer_lines(&body)))
        },
    )
    .await;
    let value = |family: &str| -> f64 {
        sample(&scrape, &series(family))
            .unwrap_or_else(|| panic!("{family} missing:\n{}", informer_lines(&scrape)))
            .parse()
            .unwrap()
    };
    // The list took a pop at least (the create came with it, or as an event after it).
    let pops = value("informer_processing_latency_seconds_count");
    assert!(pops >= 1.0, "{pops}");
    let sum = value("informer_processing_latency_seconds_sum");
    assert!(sum >= 0.0 && sum.is_finite(), "{sum}");
    // Heard from the server since the manager started, so no staler than that.
    let staleness = value("informer_staleness_seconds");
    assert!(
        (0.0..=started.elapsed().as_secs_f64()).contains(&staleness),
        "staleness {staleness}"
    );

    let _ = stop.send(());
    task.await.unwrap().unwrap();
    delete_namespace(&client, &ns).await;
}

/// The scrape's `informer_*` lines, for failure messages.
fn informer_lines(scrape: &str) -> String {
    scrape
        .lines()
        .filter(|l| l.starts_with("informer_"))
        .collect::<Vec<_>>()
        .join("\n")
}
