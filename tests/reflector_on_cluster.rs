//! The reflector against the real cluster, through the real client: its store stays equal
//! to a fresh LIST through creates, updates and deletes, and when its connection is cut
//! while objects change and etcd is compacted, it relists and catches up.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use controller_runtime::client::{
    Api, ApiListerWatcher, Client, ClientOptions, DeleteParams, PostParams,
};
use controller_runtime::informer::{Reflector, ReflectorOptions, ReflectorStore, Trace};
use k8s_openapi::api::core::v1::{ConfigMap, PodTemplate};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use parking_lot::Mutex;
use support::CONVERGE;
use support::cluster::{
    CuttableProxy, client, compact_etcd, create_namespace, delete_namespace, template,
};
use support::versions::{entry, listed};

// === a store that keeps names and versions ===

#[derive(Clone, Default)]
struct VersionStore(Arc<Mutex<BTreeMap<String, String>>>);

impl<K: controller_runtime::informer::Object> ReflectorStore<K> for VersionStore {
    fn add(&self, o: K) {
        let (n, v) = entry(&o);
        self.0.lock().insert(n, v);
    }
    fn update(&self, o: K) {
        let (n, v) = entry(&o);
        self.0.lock().insert(n, v);
    }
    fn delete(&self, o: K) {
        self.0.lock().remove(&entry(&o).0);
    }
    fn replace(&self, objects: Vec<K>, _rv: &str) {
        *self.0.lock() = objects.iter().map(entry).collect();
    }
    fn resync(&self) {}
}

// === helpers ===

/// Waits until `store` holds exactly what a fresh LIST returns.
async fn converges<K>(api: &Api<K>, store: &VersionStore, what: &str)
where
    K: controller_runtime::client::WatchObject
        + serde::Serialize
        + controller_runtime::informer::Object,
{
    let begin = tokio::time::Instant::now();
    loop {
        let fresh = listed(api).await;
        let held = store.0.lock().clone();
        if held == fresh {
            return;
        }
        assert!(
            begin.elapsed() < CONVERGE,
            "{what}: the reflector's store {held:?} never matched the LIST {fresh:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

// === tests ===

#[tokio::test]
#[ignore = "needs cluster"]
async fn reflector_store_follows_configmaps_through_creates_updates_and_deletes() {
    let client = client();
    let ns = create_namespace(&client, "refl-cm").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let store = VersionStore::default();
    let reflector = Reflector::new(
        ApiListerWatcher::new(api.clone()),
        store.clone(),
        ReflectorOptions {
            name: "configmaps".into(),
            ..ReflectorOptions::default()
        },
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(reflector.run(async {
        let _ = stopped.await;
    }));

    converges(&api, &store, "the initial list").await;
    let mk = |n: &str, v: &str| ConfigMap {
        metadata: ObjectMeta {
            name: Some(n.into()),
            ..ObjectMeta::default()
        },
        data: Some([("v".to_owned(), v.to_owned())].into()),
        ..ConfigMap::default()
    };
    for i in 0..20 {
        api.create(&PostParams::default(), &mk(&format!("c{i}"), "1"))
            .await
            .unwrap();
    }
    converges(&api, &store, "after 20 creates").await;
    for i in 0..20 {
        let name = format!("c{i}");
        if i % 2 == 0 {
            api.delete(&name, &DeleteParams::default()).await.unwrap();
        } else {
            api.replace(&name, &PostParams::default(), &mk(&name, "2"))
                .await
                .unwrap();
        }
    }
    converges(&api, &store, "after updates and deletes").await;
    stop.send(()).unwrap();
    task.await.unwrap();
    delete_namespace(&client, &ns).await;
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn cut_connection_and_compaction_lead_to_a_relist_that_catches_up() {
    // Both ways of listing: a streaming list (WatchList), and classic paged LIST.
    for watch_list in [true, false] {
        cut_and_catch_up(watch_list).await;
    }
}

/// A broken watch makes the reflector list again (as client-go does) at its last version;
/// the deletions made meanwhile disappear from the store through that list.
async fn cut_and_catch_up(watch_list: bool) {
    let direct = client();
    let (proxy, proxied) = CuttableProxy::to_cluster().await;
    let through_proxy = Client::new(proxied, ClientOptions::default()).unwrap();

    let ns = create_namespace(&direct, "refl-cut").await;
    // PodTemplates are read from etcd without the watch cache in testenv, so compaction
    // makes the reflector's old version really gone.
    let api: Api<PodTemplate> = Api::namespaced(direct.clone(), &ns);
    let store = VersionStore::default();
    let traces = Arc::new(Mutex::new(Vec::new()));
    let t = traces.clone();
    let reflector = Reflector::new(
        ApiListerWatcher::new(Api::<PodTemplate>::namespaced(through_proxy, &ns)),
        store.clone(),
        ReflectorOptions {
            name: "podtemplates".into(),
            watch_list,
            ..ReflectorOptions::default()
        },
    )
    .on_trace(move |trace| t.lock().push(trace.clone()));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(reflector.run(async {
        let _ = stopped.await;
    }));

    for name in ["a", "b", "c"] {
        api.create(&PostParams::default(), &template(name))
            .await
            .unwrap();
    }
    converges(&api, &store, "before the cut").await;
    let lists_before = traces
        .lock()
        .iter()
        .filter(|t| matches!(t, Trace::Listed { .. }))
        .count();

    // While the reflector cannot reach the server, objects change and history is compacted.
    proxy.cut();
    api.delete("a", &DeleteParams::default()).await.unwrap();
    api.delete("b", &DeleteParams::default()).await.unwrap();
    api.create(&PostParams::default(), &template("d"))
        .await
        .unwrap();
    compact_etcd();
    proxy.restore();

    converges(&api, &store, "after the cut").await;
    assert_eq!(
        store.0.lock().keys().cloned().collect::<Vec<_>>(),
        ["c", "d"],
        "the deletions made during the cut are gone from the store"
    );
    let traces = traces.lock().clone();
    let lists_after = traces
        .iter()
        .filter(|t| matches!(t, Trace::Listed { .. }))
        .count();
    assert!(
        lists_after > lists_before,
        "the reflector caught up without relisting: {traces:#?}"
    );
    stop.send(()).unwrap();
    task.await.unwrap();
    delete_namespace(&direct, &ns).await;
}
