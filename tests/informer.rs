//! Shared informers from the factory against the real cluster: a ConfigMap informer and a Pod
//! informer stay equal to a fresh LIST — in their cache and in what their handlers heard —
//! through creates, updates and deletes, and so does one caching `Raw<ConfigMap>` (which
//! lists and watches as protobuf); a handler added late receives the full cache; and
//! deletions made while the connection is cut (and etcd compacted) reach the handlers as
//! tombstones after the relist, with a classic LIST, with WatchList, and over protobuf.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use controller_runtime::client::{
    Api, Client, ClientOptions, DeleteParams, ListParams, Patch, PatchParams, PostParams, Raw,
};
use controller_runtime::informer::{
    DeletedObject, EventHandler, FifoKind, Object, SharedIndexInformer,
};
use controller_runtime::informers::{FactoryResource, InformerFactory};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, PodTemplate};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use parking_lot::Mutex;
use serde_json::json;
use support::CONVERGE;
use support::cluster::{
    CuttableProxy, client, compact_etcd, create_namespace, delete_namespace, template,
};
use support::versions::{entry, listed};

// === a handler that mirrors what it hears ===

/// Keeps `name → resourceVersion` from the notifications alone, and notes every initial add,
/// plain delete and tombstone.
#[derive(Clone, Default)]
struct Mirror(Arc<Mutex<Heard>>);

#[derive(Default)]
struct Heard {
    objects: BTreeMap<String, String>,
    initial_adds: Vec<String>,
    later_adds: Vec<String>,
    deletes: Vec<String>,
    tombstones: Vec<String>,
}

impl<K: Object> EventHandler<K> for Mirror {
    fn on_add(&self, obj: &Arc<K>, is_in_initial_list: bool) {
        let (name, rv) = entry(&**obj);
        let mut heard = self.0.lock();
        if is_in_initial_list {
            heard.initial_adds.push(name.clone());
        } else {
            heard.later_adds.push(name.clone());
        }
        heard.objects.insert(name, rv);
    }

    fn on_update(&self, _old: &Arc<K>, new: &Arc<K>) {
        let (name, rv) = entry(&**new);
        self.0.lock().objects.insert(name, rv);
    }

    fn on_delete(&self, obj: &DeletedObject<K>) {
        let mut heard = self.0.lock();
        let name = match obj {
            DeletedObject::Object(o) => {
                let name = entry(&**o).0;
                heard.deletes.push(name.clone());
                name
            }
            DeletedObject::Tombstone(t) => {
                let name = t.key.rsplit('/').next().unwrap_or_default().to_owned();
                heard.tombstones.push(name.clone());
                name
            }
        };
        heard.objects.remove(&name);
    }
}

// === helpers ===

/// Waits until the informer's cache, and what `mirror` heard, both equal a fresh LIST.
async fn converges<K>(api: &Api<K>, informer: &SharedIndexInformer<K>, mirror: &Mirror, what: &str)
where
    K: controller_runtime::client::WatchObject + serde::Serialize + Object,
{
    let begin = tokio::time::Instant::now();
    loop {
        let fresh = listed(api).await;
        let cached: BTreeMap<String, String> = informer
            .get_indexer()
            .list()
            .iter()
            .map(|o| entry(&**o))
            .collect();
        let heard = mirror.0.lock().objects.clone();
        if cached == fresh && heard == fresh {
            return;
        }
        assert!(
            begin.elapsed() < CONVERGE,
            "{what}: never matched the LIST {fresh:?}\ncache: {cached:?}\nhandler: {heard:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Polls `check` until it holds, for at most [`CONVERGE`].
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let begin = tokio::time::Instant::now();
    while !check() {
        assert!(begin.elapsed() < CONVERGE, "{what}: never happened");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn configmap(name: &str, value: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        data: Some([("v".to_owned(), value.to_owned())].into()),
        ..ConfigMap::default()
    }
}

/// A stop signal for the factory, and the means to fire it.
fn stop_signal() -> (
    tokio::sync::oneshot::Sender<()>,
    impl std::future::Future<Output = ()> + Send + 'static,
) {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    (stop, async {
        let _ = stopped.await;
    })
}

// === tests ===

#[tokio::test]
#[ignore = "needs cluster"]
async fn configmap_informer_matches_a_fresh_list_through_creates_updates_and_deletes() {
    configmaps_through_creates_updates_and_deletes(FifoKind::Delta, "inf-cm").await;
}

/// The same with the in-order queue (client-go's RealFIFO): every event popped alone.
#[tokio::test]
#[ignore = "needs cluster"]
async fn in_order_configmap_informer_matches_a_fresh_list_through_creates_updates_and_deletes() {
    configmaps_through_creates_updates_and_deletes(FifoKind::InOrder, "inf-cm-in-order").await;
}

async fn configmaps_through_creates_updates_and_deletes(fifo: FifoKind, prefix: &str) {
    let client = client();
    let ns = create_namespace(&client, prefix).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let factory = InformerFactory::new(client.clone())
        .namespace(&ns)
        .fifo(fifo);
    let informer = factory.informer::<ConfigMap>();
    assert!(
        Arc::ptr_eq(&informer, &factory.informer::<ConfigMap>()),
        "one informer per kind and namespace"
    );
    let mirror = Mirror::default();
    let reg = informer.add_event_handler(mirror.clone()).unwrap();
    let (stop, shutdown) = stop_signal();
    factory.start(shutdown);
    assert!(factory.wait_for_cache_sync().await);
    reg.wait_synced().await;
    converges(&api, &informer, &mirror, "the initial list").await;

    for i in 0..20 {
        api.create(&PostParams::default(), &configmap(&format!("c{i}"), "1"))
            .await
            .unwrap();
    }
    converges(&api, &informer, &mirror, "after 20 creates").await;
    for i in 0..20 {
        let name = format!("c{i}");
        match i % 3 {
            0 => {
                api.delete(&name, &DeleteParams::default()).await.unwrap();
            }
            1 => {
                api.replace(&name, &PostParams::default(), &configmap(&name, "2"))
                    .await
                    .unwrap();
            }
            _ => {
                let patch = json!({"metadata": {"labels": {"patched": "yes"}}});
                api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .unwrap();
            }
        }
    }
    converges(&api, &informer, &mirror, "after updates and deletes").await;
    let lister = informer.lister().namespaced(&ns);
    assert_eq!(lister.list().len(), informer.get_indexer().len());
    assert!(lister.get("c1").is_some() && lister.get("c0").is_none());
    let deletes = mirror.0.lock().deletes.len();
    assert_eq!(deletes, 7, "every deletion was heard as a plain delete");

    stop.send(()).unwrap();
    factory.join().await;
    assert!(informer.is_stopped());
    delete_namespace(&client, &ns).await;
}

/// The same through an informer that caches `Raw<ConfigMap>`: the lazily decoded form must
/// track the cluster exactly as the typed one does, answer label queries, and decode to what
/// a typed GET returns.
#[tokio::test]
#[ignore = "needs cluster"]
async fn raw_configmap_informer_matches_a_fresh_list_and_decodes_to_the_typed_object() {
    let client = client();
    let ns = create_namespace(&client, "inf-raw").await;
    let typed: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let raw: Api<Raw<ConfigMap>> = Api::namespaced(client.clone(), &ns);
    let factory = InformerFactory::new(client.clone()).namespace(&ns);
    let informer = factory.informer::<Raw<ConfigMap>>();
    let mirror = Mirror::default();
    informer.add_event_handler(mirror.clone()).unwrap();
    let (stop, shutdown) = stop_signal();
    factory.start(shutdown);
    assert!(factory.wait_for_cache_sync().await);
    converges(&raw, &informer, &mirror, "the initial list").await;

    for i in 0..12 {
        typed
            .create(&PostParams::default(), &configmap(&format!("r{i}"), "1"))
            .await
            .unwrap();
    }
    for i in (0..12).step_by(2) {
        let patch = json!({"metadata": {"labels": {"half": "even"}}, "data": {"value": "2"}});
        typed
            .patch(
                &format!("r{i}"),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .unwrap();
    }
    typed.delete("r11", &DeleteParams::default()).await.unwrap();
    converges(
        &raw,
        &informer,
        &mirror,
        "after creates, patches and a delete",
    )
    .await;

    let selector = LabelSelector {
        match_labels: Some(BTreeMap::from([("half".to_owned(), "even".to_owned())])),
        ..LabelSelector::default()
    };
    let lister = informer.lister().namespaced(&ns);
    let mut even: Vec<String> = lister
        .select(&selector)
        .unwrap()
        .iter()
        .map(|o| o.name().to_owned())
        .collect();
    even.sort();
    assert_eq!(even, ["r0", "r10", "r2", "r4", "r6", "r8"]);
    let cached = lister.get("r4").expect("r4 is cached").decode().unwrap();
    assert_eq!(cached, typed.get("r4").await.unwrap());
    assert_eq!(mirror.0.lock().deletes, ["r11"]);

    stop.send(()).unwrap();
    factory.join().await;
    delete_namespace(&client, &ns).await;
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn pod_informer_matches_a_fresh_list_as_a_deployment_scales_and_pods_come_and_go() {
    let client = client();
    let ns = create_namespace(&client, "inf-pod").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let factory = InformerFactory::new(client.clone()).namespace(&ns);
    let informer = factory.informer::<Pod>();
    let mirror = Mirror::default();
    informer.add_event_handler(mirror.clone()).unwrap();
    let (stop, shutdown) = stop_signal();
    factory.start(shutdown);
    assert!(factory.wait_for_cache_sync().await);

    let deploy: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                         "spec": {"containers": [{"name": "m", "image": "memcached:1.6"}]}}
        }
    }))
    .unwrap();
    deployments
        .create(&PostParams::default(), &deploy)
        .await
        .unwrap();
    // The pods are created, scheduled, and made Running by kwok: many updates each.
    let running = |n: usize| {
        let informer = informer.clone();
        move || {
            informer
                .get_indexer()
                .list()
                .iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .count()
                == n
        }
    };
    eventually("three pods running in the cache", running(3)).await;
    converges(&pods, &informer, &mirror, "after the deployment came up").await;

    let scale = |replicas: i32| json!({"spec": {"replicas": replicas}});
    deployments
        .patch("web", &PatchParams::default(), &Patch::Merge(&scale(5)))
        .await
        .unwrap();
    eventually("five pods running in the cache", running(5)).await;
    converges(&pods, &informer, &mirror, "after scaling to five").await;

    // Delete two pods: the ReplicaSet replaces them.
    let names: Vec<String> = informer
        .get_indexer()
        .list()
        .iter()
        .take(2)
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    for name in &names {
        pods.delete(name, &DeleteParams::default()).await.unwrap();
    }
    eventually("the deleted pods were replaced", || {
        let cached = informer.get_indexer();
        names
            .iter()
            .all(|n| !cached.contains_key(&format!("{ns}/{n}")))
    })
    .await;
    eventually("five pods running again", running(5)).await;
    converges(&pods, &informer, &mirror, "after deleting two pods").await;

    deployments
        .patch("web", &PatchParams::default(), &Patch::Merge(&scale(1)))
        .await
        .unwrap();
    eventually("one pod left", {
        let informer = informer.clone();
        move || informer.get_indexer().len() == 1
    })
    .await;
    converges(&pods, &informer, &mirror, "after scaling to one").await;
    let by_label = informer
        .lister()
        .namespaced(&ns)
        .select(&deploy.spec.as_ref().unwrap().selector)
        .unwrap();
    assert_eq!(
        by_label.len(),
        1,
        "the lister selects by the deployment's selector"
    );
    assert!(
        mirror.0.lock().deletes.len() >= 6,
        "two deleted, four scaled away"
    );

    stop.send(()).unwrap();
    factory.join().await;
    delete_namespace(&client, &ns).await;
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_handler_added_late_receives_the_full_cache() {
    let client = client();
    let ns = create_namespace(&client, "inf-late").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    for i in 0..10 {
        api.create(&PostParams::default(), &configmap(&format!("c{i}"), "1"))
            .await
            .unwrap();
    }
    let factory = InformerFactory::new(client.clone()).namespace(&ns);
    let informer = factory.informer::<ConfigMap>();
    let early = Mirror::default();
    informer.add_event_handler(early.clone()).unwrap();
    let (stop, shutdown) = stop_signal();
    factory.start(shutdown);
    assert!(factory.wait_for_cache_sync().await);
    converges(&api, &informer, &early, "before the late handler").await;

    let late = Mirror::default();
    let reg = informer.add_event_handler(late.clone()).unwrap();
    reg.wait_synced().await;
    converges(&api, &informer, &late, "the late handler's view").await;
    let mut initial = late.0.lock().initial_adds.clone();
    initial.sort();
    let mut listed: Vec<String> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|o| entry(o).0)
        .collect();
    listed.sort();
    assert_eq!(initial, listed, "the whole cache, as initial adds");

    api.create(&PostParams::default(), &configmap("after", "1"))
        .await
        .unwrap();
    converges(&api, &informer, &late, "after a create").await;
    assert_eq!(late.0.lock().later_adds, ["after"]);
    assert_eq!(early.0.lock().later_adds, ["after"]);

    stop.send(()).unwrap();
    factory.join().await;
    delete_namespace(&client, &ns).await;
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn deletions_made_while_the_connection_is_cut_arrive_as_tombstones_after_the_relist() {
    // Both ways of listing: a classic paged LIST, and a streaming list (WatchList).
    for watch_list in [false, true] {
        tombstones_after_cut::<PodTemplate>(watch_list).await;
    }
    // And over protobuf: an informer of Raw<PodTemplate> lists and watches as protobuf, so
    // the 410 arrives as a protobuf ERROR event or answer and the relist is protobuf too.
    tombstones_after_cut::<Raw<PodTemplate>>(false).await;
}

async fn tombstones_after_cut<K>(watch_list: bool)
where
    K: FactoryResource<Scope = NamespaceResourceScope> + Send + Sync + 'static,
{
    let direct = client();
    let (proxy, proxied) = CuttableProxy::to_cluster().await;
    let through_proxy = Client::new(proxied, ClientOptions::default()).unwrap();

    let ns = create_namespace(&direct, "inf-cut").await;
    // PodTemplates are read from etcd without the watch cache in testenv, so compaction
    // makes the informer's old version really gone.
    let api: Api<PodTemplate> = Api::namespaced(direct.clone(), &ns);
    let watched: Api<K> = Api::namespaced(direct.clone(), &ns);
    let factory = InformerFactory::new(through_proxy)
        .namespace(&ns)
        .watch_list(watch_list);
    let informer = factory.informer::<K>();
    let mirror = Mirror::default();
    informer.add_event_handler(mirror.clone()).unwrap();
    let (stop, shutdown) = stop_signal();
    factory.start(shutdown);
    assert!(factory.wait_for_cache_sync().await);

    for name in ["a", "b", "c"] {
        api.create(&PostParams::default(), &template(name))
            .await
            .unwrap();
    }
    converges(&watched, &informer, &mirror, "before the cut").await;

    // While the informer cannot reach the server, objects change and history is compacted.
    proxy.cut();
    api.delete("a", &DeleteParams::default()).await.unwrap();
    api.delete("b", &DeleteParams::default()).await.unwrap();
    api.create(&PostParams::default(), &template("d"))
        .await
        .unwrap();
    compact_etcd();
    proxy.restore();

    converges(&watched, &informer, &mirror, "after the cut").await;
    {
        let heard = mirror.0.lock();
        let mut tombstones = heard.tombstones.clone();
        tombstones.sort();
        assert_eq!(
            tombstones,
            ["a", "b"],
            "watch_list={watch_list}: the deletions made during the cut arrive as tombstones"
        );
        assert!(
            heard.deletes.is_empty(),
            "watch_list={watch_list}: no plain delete was seen: {:?}",
            heard.deletes
        );
        assert_eq!(heard.later_adds, ["a", "b", "c", "d"]);
    }

    stop.send(()).unwrap();
    factory.join().await;
    delete_namespace(&direct, &ns).await;
}
