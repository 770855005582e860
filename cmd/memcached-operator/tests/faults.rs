//! The Memcached operator binary and an informer, both talking to the API server through a
//! proxy that resets, stalls, truncates and delays their connections, while the test creates,
//! scales and deletes Memcacheds directly. Once the faults stop, everything converges: the
//! informer's cache equals a fresh LIST, every Memcached's Deployment has its size and the
//! Memcached is Available, and the operator is alive, without a panic, in bounded memory.
//!
//! The bounded run is part of the cluster tests; `make soak` runs the same scenario for
//! `SOAK_SECONDS` (default 300) with heavier faults. The proxy's seed is printed;
//! `FAULT_SEED=<n>` replays the same fault and operation sequence.

#[path = "../../../tests/support/mod.rs"]
mod support;

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::{
    cache_matches_list, converged, deployments_by_name, release_all, rss_kib, settled, setup, spec,
    start_operator, teardown,
};
use controller_runtime::client::{
    Api, Client, ClientOptions, DeleteParams, Patch, PatchParams, PostParams,
};
use controller_runtime::informers::InformerFactory;
use k8s_openapi::api::apps::v1::Deployment;
use memcached_operator::api::Memcached;
use support::cluster;
use support::fault_proxy::{FaultCounts, FaultProxy, FaultRates, Rng};
use support::{CONVERGE, wait_until};

/// The operator's resident memory bound: generous, it catches a leak, not a regression.
const RSS_LIMIT_KIB: u64 = 64 * 1024;

/// What one run does.
struct Scenario {
    /// How long the driver creates, scales and deletes while faults are on.
    drive_for: Duration,
    rates: FaultRates,
    /// The most Memcacheds alive at once.
    max_alive: usize,
}

/// What one run did and saw.
#[derive(Default)]
struct Summary {
    faults: FaultCounts,
    created: u32,
    scaled: u32,
    deleted: u32,
    remaining: usize,
    rss_start_kib: u64,
    rss_end_kib: u64,
    converge_secs: f64,
}

impl Summary {
    fn print(&self, seed: u64) {
        println!("\nfaults survived (seed {seed}):\n{}", self.faults.table());
        println!(
            "| driver       | count |\n|--------------|-------|\n| created      | {:>5} |\n\
             | scaled       | {:>5} |\n| deleted      | {:>5} |\n| remaining    | {:>5} |\n",
            self.created, self.scaled, self.deleted, self.remaining
        );
        println!(
            "| final check                                  | result |\n\
             |----------------------------------------------|--------|\n\
             | informer cache == fresh LIST (names, RVs)    | ok     |\n\
             | Deployment replicas == spec.size, Available  | ok     |\n\
             | operator alive, no panic in its log          | ok     |\n\
             | converged after faults stopped (s)           | {:>6.1} |\n\
             | operator VmRSS at start (MiB)                | {:>6.1} |\n\
             | operator VmRSS at end (MiB)                  | {:>6.1} |\n",
            self.converge_secs,
            self.rss_start_kib as f64 / 1024.0,
            self.rss_end_kib as f64 / 1024.0
        );
    }
}

async fn run(scenario: Scenario) {
    let (client, ns, dir) = setup("mc-faults").await;
    let (proxy, proxied) = FaultProxy::to_cluster(scenario.rates.clone()).await;
    // Start clean: faults begin once the operator and the informer are up.
    proxy.set_faults(false);
    let kubeconfig = proxy.kubeconfig_in(&dir);
    let log_path = dir.join("operator.log");
    let mut operator = start_operator(&kubeconfig, &ns, &log_path, "info", &[]).await;
    let pid = operator.id().unwrap();

    let through = Client::new(proxied, ClientOptions::default()).unwrap();
    let factory = InformerFactory::new(through).namespace(&ns);
    let informer = factory.informer::<Memcached>();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    factory.start(async {
        let _ = stopped.await;
    });
    assert!(factory.wait_for_cache_sync().await);

    let mut summary = Summary {
        rss_start_kib: rss_kib(pid),
        ..Summary::default()
    };
    proxy.set_faults(true);

    // The driver, straight to the API server: creates, scales and deletes at random.
    let memcacheds = Api::<Memcached>::namespaced(client.clone(), &ns);
    let mut rng = Rng::new(proxy.seed.rotate_left(17));
    let mut alive: Vec<String> = Vec::new();
    let begin = Instant::now();
    let mut next = 0u32;
    while begin.elapsed() < scenario.drive_for {
        let roll = rng.unit();
        if alive.is_empty() || (alive.len() < scenario.max_alive && roll < 0.3) {
            let name = format!("mc-{next}");
            next += 1;
            let size = rng.below(3) as i32;
            memcacheds
                .create(&PostParams::default(), &Memcached::new(&name, spec(size)))
                .await
                .unwrap();
            alive.push(name);
            summary.created += 1;
        } else if roll < 0.85 {
            let name = &alive[rng.below(alive.len() as u64) as usize];
            let size = rng.below(3);
            memcacheds
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(serde_json::json!({"spec": {"size": size}})),
                )
                .await
                .unwrap();
            summary.scaled += 1;
        } else {
            let name = alive.swap_remove(rng.below(alive.len() as u64) as usize);
            memcacheds
                .delete(&name, &DeleteParams::default())
                .await
                .unwrap();
            summary.deleted += 1;
        }
        tokio::time::sleep(Duration::from_millis(200 + rng.below(400))).await;
    }
    assert!(
        operator.try_wait().unwrap().is_none(),
        "the operator exited under faults; its log: {}",
        log_path.display()
    );

    // Faults off: everything must converge.
    proxy.set_faults(false);
    summary.faults = proxy.counts();
    let converging = Instant::now();
    let want: BTreeSet<String> = alive.iter().cloned().collect();
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns);
    wait_until(
        "every Memcached settled, the deleted ones gone",
        CONVERGE,
        async || converged(&memcacheds, &deployments, &want, settled).await,
    )
    .await;
    cache_matches_list(&memcacheds, &informer).await;
    summary.converge_secs = converging.elapsed().as_secs_f64();
    summary.remaining = want.len();

    assert!(
        operator.try_wait().unwrap().is_none(),
        "the operator exited; its log: {}",
        log_path.display()
    );
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        !log.contains("panicked"),
        "the operator panicked: {}",
        log_path.display()
    );
    summary.rss_end_kib = rss_kib(pid);
    assert!(
        summary.rss_end_kib < RSS_LIMIT_KIB,
        "operator VmRSS {} KiB, over {RSS_LIMIT_KIB} KiB",
        summary.rss_end_kib
    );
    summary.print(proxy.seed);

    release_all(&memcacheds, want.iter().map(String::as_str)).await;
    let _ = stop.send(());
    operator.start_kill().unwrap();
    let _ = operator.wait().await;
    drop(proxy);
    teardown(&client, &ns, &dir).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn the_operator_and_an_informer_converge_after_resets_stalls_truncations_and_delays() {
    run(Scenario {
        drive_for: Duration::from_secs(30),
        rates: FaultRates::moderate(),
        max_alive: 4,
    })
    .await;
}

/// Lines of the operator's JSON log from byte `from` on whose `reason` is `reason`, per
/// Memcached (the reconcile span's `object`).
fn reasons_logged(log: &str, from: usize, reason: &str) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for line in log[from..].lines() {
        let Ok(entry) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if entry["fields"]["reason"] == reason {
            let object = entry["span"]["object"].as_str().unwrap_or("?").to_owned();
            *counts.entry(object).or_default() += 1;
        }
    }
    counts
}

/// The operator cut off from the API server while Memcacheds and Deployments change and etcd
/// is compacted: once it reconnects and relists, deletions it missed arrive as tombstones
/// (a Deployment deleted in the gap is created again, exactly once; a Memcached gone in the
/// gap leaves nothing behind), and every other change is reconciled: a missed scale, a missed
/// create, a deletion that waits on the finalizer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn what_changes_during_a_disconnect_and_compaction_is_reconciled_once_reconnected() {
    let (client, ns, dir) = setup("mc-gap").await;
    let (proxy, _) = cluster::CuttableProxy::to_cluster().await;
    let log_path = dir.join("operator.log");
    let kubeconfig = cluster::kubeconfig_through(proxy.addr, &dir);
    let mut operator = start_operator(&kubeconfig, &ns, &log_path, "info", &[]).await;

    let memcacheds = Api::<Memcached>::namespaced(client.clone(), &ns);
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns);
    for name in ["scaled", "terminating", "redeployed", "vanished"] {
        memcacheds
            .create(&PostParams::default(), &Memcached::new(name, spec(1)))
            .await
            .unwrap();
    }
    // Exactly these Memcacheds settled, and exactly their Deployments left.
    let settled_as = async |want: &[&str]| {
        let want: BTreeSet<String> = want.iter().map(|s| s.to_string()).collect();
        wait_until(&format!("exactly {want:?} settled"), CONVERGE, async || {
            converged(&memcacheds, &deployments, &want, settled).await?;
            let deployed: BTreeSet<String> = deployments_by_name(&deployments)
                .await?
                .into_keys()
                .collect();
            (deployed == want)
                .then_some(())
                .ok_or(format!("Deployments {deployed:?}"))
        })
        .await
    };
    settled_as(&["redeployed", "scaled", "terminating", "vanished"]).await;

    // The gap: the operator cannot reach the server while things change and etcd forgets
    // the history it would have watched.
    proxy.cut();
    let delete = DeleteParams::default();
    deployments.delete("redeployed", &delete).await.unwrap();
    let scale = Patch::Merge(serde_json::json!({"spec": {"size": 2}}));
    memcacheds
        .patch("scaled", &PatchParams::default(), &scale)
        .await
        .unwrap();
    memcacheds
        .create(&PostParams::default(), &Memcached::new("created", spec(1)))
        .await
        .unwrap();
    // Kept by the operator's finalizer until it reconnects.
    memcacheds.delete("terminating", &delete).await.unwrap();
    // Gone for good before the operator hears of it: a tombstone with nothing to do (the
    // garbage collector takes its Deployment).
    let unfinalize = Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}}));
    memcacheds
        .patch("vanished", &PatchParams::default(), &unfinalize)
        .await
        .unwrap();
    memcacheds.delete("vanished", &delete).await.unwrap();
    cluster::compact_etcd();
    let mark = std::fs::metadata(&log_path).unwrap().len() as usize;
    proxy.restore();

    settled_as(&["created", "redeployed", "scaled"]).await;
    // A create's log line follows the write that `settled_as` saw: wait for both.
    let log = wait_until("both creates logged", CONVERGE, async || {
        let log = std::fs::read_to_string(&log_path).map_err(|e| e.to_string())?;
        let created = reasons_logged(&log, mark, "Created");
        let both = created.contains_key("created") && created.contains_key("redeployed");
        both.then_some(log).ok_or(format!("{created:?}"))
    })
    .await;
    let mut created = reasons_logged(&log, mark, "Created");
    // Not counted: Deployments created for `vanished`. The Deployment informer may relist
    // first and hand over the tombstone of the Deployment the garbage collector took from
    // `vanished` while the Memcached cache still holds `vanished`; that reconcile creates a
    // Deployment owned by a Memcached that is gone, the garbage collector removes it, its
    // deletion queues `vanished` again, and so on until the Memcached informer has relisted
    // too: how many times depends on when each informer reconnects (one to five seen). Each
    // is collected (`settled_as` saw none left). Two caches at different points in time
    // race so in controller-runtime alike. Read-your-own-writes does not end it: no write of
    // the operator's is involved. Reads consistent across kinds would, by waiting until the
    // Memcached informer has observed the resourceVersion the Deployment cache is at; but
    // an informer of a kind that does not change observes newer versions only at its next
    // bookmark (about a minute apart), so every such read would wait that long.
    let vanished = created.remove("vanished").unwrap_or(0);
    eprintln!("Deployments created for the Memcached gone in the gap, each collected: {vanished}");
    assert_eq!(
        created,
        BTreeMap::from([("created".into(), 1), ("redeployed".into(), 1)]),
        "Deployments created after the gap, per Memcached; the operator's log: {}",
        log_path.display()
    );
    let reasons = cluster::event_reasons(&client, &ns).await.unwrap();
    assert!(
        reasons.iter().any(|r| r == "Deleting"),
        "no Deleting event for the Memcached deleted in the gap: {reasons:?}"
    );
    assert!(
        operator.try_wait().unwrap().is_none(),
        "the operator exited: {}",
        log_path.display()
    );
    println!(
        "after the gap: Created {created:?} (and {vanished} for vanished), Scaled {:?}",
        reasons_logged(&log, mark, "Scaled"),
    );

    release_all(&memcacheds, ["created", "redeployed", "scaled"]).await;
    operator.start_kill().unwrap();
    let _ = operator.wait().await;
    teardown(&client, &ns, &dir).await;
}

/// `make soak`: the same for `SOAK_SECONDS` (default 300) with heavy faults. Skipped (it
/// says so) unless `SOAK_SECONDS` is set, so the cluster tier stays bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "soak: make soak"]
async fn soak_the_operator_and_an_informer_under_heavy_faults() {
    let Some(seconds) = std::env::var("SOAK_SECONDS").ok() else {
        println!("soak skipped: set SOAK_SECONDS (make soak) to run it");
        return;
    };
    let seconds: u64 = seconds.trim().parse().expect("SOAK_SECONDS is a number");
    run(Scenario {
        drive_for: Duration::from_secs(seconds),
        rates: FaultRates::heavy(),
        max_alive: 6,
    })
    .await;
}
