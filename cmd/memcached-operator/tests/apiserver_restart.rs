//! kube-apiserver restarted in place (`testenv restart`: the same port, certificates and
//! etcd) under the operator binary and in-process informers, then kube-controller-manager
//! after it, as a control-plane upgrade does. Their watches break, they wait out the refused
//! connections and the new server's starting watch caches, and resume: each reflector starts
//! at most three lists (the watch cache starts at etcd's newest revision, so resuming from an
//! older version takes one relist, which the cache may answer 429 once more while it starts;
//! a relist storm would be one list per retry, dozens over the restart). The operator writes
//! what changes after the restart, and the informer's cache equals a fresh LIST.
//!
//! Why the controller manager is restarted too, and Pod readiness left out: a 1.36
//! controller manager left running through an API server restart can stall ReplicaSets
//! (its read-your-writes check waits on versions its cache then skips), during this test and
//! in the tests after it; none of that is the operator's doing.
//!
//! The only test in its binary: the restart would break whatever else ran beside it.

#[path = "../../../tests/support/mod.rs"]
mod support;

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{
    cache_matches_list, converged, release_all, settled, setup, spec, start_operator, teardown,
    written,
};
use controller_runtime::client::{Api, DeleteParams, Patch, PatchParams, PostParams};
use controller_runtime::informer::Trace;
use controller_runtime::informers::InformerFactory;
use k8s_openapi::api::apps::v1::Deployment;
use memcached_operator::api::Memcached;
use support::cluster;
use support::{CONVERGE, wait_until};

/// The most lists one reflector may start because of one restart (one seen here, each run).
const LISTS_PER_RESTART: usize = 3;

/// Whether a reflector step starts a list: a streaming list, or a LIST's first page.
fn starts_a_list(t: &Trace) -> bool {
    matches!(
        t,
        Trace::StreamListStarted { .. }
            | Trace::ListPage {
                continued: false,
                ..
            }
    )
}

/// Lists started per reflector in `log`, lines of the operator's JSON log (its reflectors
/// trace each step at debug).
fn operator_lists(log: &str) -> BTreeMap<String, usize> {
    let mut lists = BTreeMap::new();
    for line in log.lines() {
        let Ok(entry) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let fields = &entry["fields"];
        let Some(t) = fields["t"].as_str() else {
            continue;
        };
        if t.starts_with("StreamListStarted")
            || (t.starts_with("ListPage") && t.contains("continued: false"))
        {
            let reflector = fields["reflector"].as_str().unwrap_or("?").to_owned();
            *lists.entry(reflector).or_default() += 1;
        }
    }
    lists
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn informers_and_the_operator_resume_after_an_api_server_restart_without_a_relist_storm() {
    let (client, ns, dir) = setup("mc-restart").await;
    let log_path = dir.join("operator.log");
    let rust_log = "info,informer::reflector=debug";
    let mut operator = start_operator(&cluster::kubeconfig(), &ns, &log_path, rust_log, &[]).await;

    // In-process informers on the same kinds, counting the lists they start.
    let factory = InformerFactory::new(client.clone()).namespace(&ns);
    let informer = factory.informer::<Memcached>();
    let mc_lists = Arc::new(AtomicUsize::new(0));
    let deploy_lists = Arc::new(AtomicUsize::new(0));
    let count = |counter: &Arc<AtomicUsize>| {
        let counter = counter.clone();
        move |t: &Trace| {
            if starts_a_list(t) {
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }
    };
    informer.on_reflector_trace(count(&mc_lists)).unwrap();
    factory
        .informer::<Deployment>()
        .on_reflector_trace(count(&deploy_lists))
        .unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    factory.start(async {
        let _ = stopped.await;
    });
    assert!(factory.wait_for_cache_sync().await);

    let memcacheds = Api::<Memcached>::namespaced(client.clone(), &ns);
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns);
    for (name, size) in [("mc-0", 1), ("mc-1", 2)] {
        memcacheds
            .create(&PostParams::default(), &Memcached::new(name, spec(size)))
            .await
            .unwrap();
    }
    let mut names: BTreeSet<String> = ["mc-0".into(), "mc-1".into()].into();
    wait_until("both Memcacheds settled", CONVERGE, async || {
        converged(&memcacheds, &deployments, &names, settled).await
    })
    .await;

    let before = [
        mc_lists.load(Ordering::Relaxed),
        deploy_lists.load(Ordering::Relaxed),
    ];
    let log_mark = std::fs::metadata(&log_path).unwrap().len() as usize;
    // The counting itself is proven by the first sync: each reflector listed once.
    assert!(
        before.iter().all(|&n| n >= 1),
        "lists before the restart: {before:?}"
    );
    let initial = operator_lists(&std::fs::read_to_string(&log_path).unwrap()[..log_mark]);
    assert!(
        initial.len() >= 3 && initial.values().all(|&n| n >= 1),
        "the operator's reflectors (Memcached, Deployment, Pod) each listed: {initial:?}"
    );
    tokio::task::spawn_blocking(|| {
        cluster::restart(&["kube-apiserver", "kube-controller-manager"])
    })
    .await
    .unwrap();

    // Changes made after the restart reach the operator through its resumed watches.
    memcacheds
        .patch(
            "mc-0",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"size": 3}})),
        )
        .await
        .unwrap();
    memcacheds
        .delete("mc-1", &DeleteParams::default())
        .await
        .unwrap();
    memcacheds
        .create(&PostParams::default(), &Memcached::new("mc-2", spec(1)))
        .await
        .unwrap();
    names = ["mc-0".into(), "mc-2".into()].into();
    wait_until(
        "the operator wrote the changes made after the restart",
        CONVERGE,
        async || converged(&memcacheds, &deployments, &names, written).await,
    )
    .await;
    cache_matches_list(&memcacheds, &informer).await;

    let log = std::fs::read_to_string(&log_path).unwrap();
    let lists: Vec<(String, usize)> = [
        ("Memcached (in process)", &mc_lists, before[0]),
        ("Deployment (in process)", &deploy_lists, before[1]),
    ]
    .into_iter()
    .map(|(name, counter, was)| (name.to_owned(), counter.load(Ordering::Relaxed) - was))
    .chain(operator_lists(&log[log_mark..]))
    .collect();
    println!("lists started after the restart, per reflector (the operator's by name):");
    for (name, n) in &lists {
        println!("  {name:<40} {n}");
    }
    for (name, n) in lists {
        assert!(
            n <= LISTS_PER_RESTART,
            "{name} listed {n} times after one restart (at most {LISTS_PER_RESTART}); \
             the operator's log: {}",
            log_path.display()
        );
    }
    assert!(
        operator.try_wait().unwrap().is_none(),
        "the operator exited; its log: {}",
        log_path.display()
    );
    assert!(
        !log.contains("panicked"),
        "the operator panicked: {}",
        log_path.display()
    );

    release_all(&memcacheds, names.iter().map(String::as_str)).await;
    let _ = stop.send(());
    operator.start_kill().unwrap();
    let _ = operator.wait().await;
    teardown(&client, &ns, &dir).await;
}
