//! The controller runtime against the real cluster: a mirroring controller converging,
//! retries and their metrics, concurrency, readiness, a cache that cannot sync, typed reads
//! with and without kept typed forms, and graceful
//! shutdown on SIGTERM.

mod support;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use controller_runtime::client::{Api, Client, DeleteParams, Patch, PatchParams, PostParams};
use controller_runtime::config::{Auth, Config, Secret as Token};
use controller_runtime::runtime::leader_election::LeaderElectionConfig;
use controller_runtime::runtime::owner::controller_reference;
use controller_runtime::runtime::{
    Action, CacheError, CacheOptions, Controller, Manager, ManagerError, ManagerOptions,
    ReconcileError, Store,
};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use parking_lot::Mutex;
use support::cluster::{self, create_namespace};
use support::example::MirrorProcess;
use support::{CONVERGE, http_get, run_manager, sample, wait_until};

/// Manager options caching namespace `ns` only, with servers on free loopback ports.
fn options(ns: &str) -> ManagerOptions {
    ManagerOptions {
        cache: CacheOptions {
            namespaces: vec![ns.to_owned()],
            ..CacheOptions::default()
        },
        metrics_bind_address: Some("127.0.0.1:0".parse().unwrap()),
        health_probe_bind_address: Some("127.0.0.1:0".parse().unwrap()),
        ..ManagerOptions::default()
    }
}

fn configmap(ns: &str, name: &str, data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(ns.to_owned()),
            ..ObjectMeta::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..ConfigMap::default()
    }
}

// === the mirror controller ===

struct Mirror {
    client: Client,
    secrets: Store<Secret>,
}

async fn mirror(cm: Arc<ConfigMap>, ctx: Arc<Mirror>) -> Result<Action, ReconcileError> {
    let ns = cm.metadata.namespace.as_deref().unwrap_or_default();
    let name = cm.metadata.name.as_deref().unwrap_or_default();
    if name == "kube-root-ca.crt" {
        return Ok(Action::done());
    }
    let want = cm.data.clone().unwrap_or_default();
    if let Some(secret) = ctx.secrets.get(ns, name).await? {
        let have: BTreeMap<String, String> = secret
            .data
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
            .collect();
        if have == want {
            return Ok(Action::done());
        }
    }
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(ns.to_owned()),
            owner_references: Some(vec![controller_reference(&*cm)?]),
            ..ObjectMeta::default()
        },
        string_data: Some(want),
        ..Secret::default()
    };
    Api::<Secret>::namespaced(ctx.client.clone(), ns)
        .patch(
            name,
            &PatchParams::apply("mirror").force(),
            &Patch::Apply(&secret),
        )
        .await?;
    Ok(Action::done())
}

async fn secret_data(
    secrets: &Api<Secret>,
    name: &str,
) -> Result<BTreeMap<String, String>, String> {
    match secrets.get_opt(name).await.map_err(|e| e.to_string())? {
        Some(s) => Ok(s
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
            .collect()),
        None => Err(format!("secret {name} does not exist")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn a_mirror_controller_converges_through_creates_updates_and_deletes() {
    let client = cluster::client();
    let ns = create_namespace(&client, "rt-mirror").await;
    let manager = Manager::with_config(cluster::config(), options(&ns)).unwrap();
    let ctx = Arc::new(Mirror {
        client: manager.client(),
        secrets: manager.store().unwrap(),
    });
    Controller::<ConfigMap>::new(&manager)
        .owns::<Secret>()
        .complete(mirror, ctx)
        .unwrap();
    let (stop, task) = run_manager(&manager);

    let configmaps = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    let secrets = Api::<Secret>::namespaced(client.clone(), &ns);
    configmaps
        .create(
            &PostParams::default(),
            &configmap(&ns, "app", &[("k", "v1")]),
        )
        .await
        .unwrap();
    let want = |v: &str| BTreeMap::from([("k".to_owned(), v.to_owned())]);
    wait_until("the secret is created", CONVERGE, async || {
        let data = secret_data(&secrets, "app").await?;
        (data == want("v1"))
            .then_some(())
            .ok_or(format!("{data:?}"))
    })
    .await;

    // An update of the ConfigMap is mirrored.
    configmaps
        .patch(
            "app",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"data": {"k": "v2"}})),
        )
        .await
        .unwrap();
    wait_until("the update is mirrored", CONVERGE, async || {
        let data = secret_data(&secrets, "app").await?;
        (data == want("v2"))
            .then_some(())
            .ok_or(format!("{data:?}"))
    })
    .await;

    // A hand edit of the owned Secret is reverted: its event reaches the owner.
    secrets
        .patch(
            "app",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"stringData": {"k": "tampered"}})),
        )
        .await
        .unwrap();
    wait_until("the tampered secret is restored", CONVERGE, async || {
        let data = secret_data(&secrets, "app").await?;
        (data == want("v2"))
            .then_some(())
            .ok_or(format!("{data:?}"))
    })
    .await;

    // A deleted Secret is re-created.
    let old_uid = secrets.get("app").await.unwrap().metadata.uid;
    secrets
        .delete("app", &DeleteParams::default())
        .await
        .unwrap();
    wait_until("the deleted secret is re-created", CONVERGE, async || {
        let secret = secrets.get_opt("app").await.map_err(|e| e.to_string())?;
        match secret {
            Some(s) if s.metadata.uid != old_uid => Ok(()),
            other => Err(format!("{:?}", other.map(|s| s.metadata.uid))),
        }
    })
    .await;

    // Deleting the ConfigMap takes the Secret with it, by garbage collection.
    configmaps
        .delete("app", &DeleteParams::default())
        .await
        .unwrap();
    wait_until(
        "the secret is garbage-collected",
        CONVERGE,
        async || match secrets.get_opt("app").await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(_) => Err("still there".to_owned()),
        },
    )
    .await;

    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
    cluster::delete_namespace(&client, &ns).await;
}

// === failures, panics, and their metrics ===

/// Fails, panics or succeeds per ConfigMap, as its name says: `fail-N` fails N times then
/// succeeds, `terminal` fails terminally, `panic` panics once, anything else succeeds.
#[derive(Default)]
struct Flaky {
    attempts: Mutex<HashMap<String, usize>>,
}

impl Flaky {
    fn attempts(&self, name: &str) -> usize {
        self.attempts.lock().get(name).copied().unwrap_or(0)
    }
}

async fn flaky(cm: Arc<ConfigMap>, ctx: Arc<Flaky>) -> Result<Action, ReconcileError> {
    let name = cm.metadata.name.clone().unwrap_or_default();
    let attempt = {
        let mut attempts = ctx.attempts.lock();
        let n = attempts.entry(name.clone()).or_default();
        *n += 1;
        *n
    };
    if let Some(times) = name.strip_prefix("fail-") {
        let times: usize = times.parse().unwrap();
        if attempt <= times {
            return Err(ReconcileError::msg(format!(
                "attempt {attempt} of {name} fails"
            )));
        }
    }
    match name.as_str() {
        "terminal" => Err(ReconcileError::terminal("cannot ever work")),
        "panic" if attempt == 1 => panic!("first attempt of {name} panics"),
        _ => Ok(Action::done()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn failures_are_retried_with_backoff_panics_are_counted_and_metrics_move() {
    let client = cluster::client();
    let ns = create_namespace(&client, "rt-flaky").await;
    let manager = Manager::with_config(cluster::config(), options(&ns)).unwrap();
    let ctx = Arc::new(Flaky::default());
    Controller::<ConfigMap>::new(&manager)
        .named("flaky")
        .complete(flaky, ctx.clone())
        .unwrap();
    let (stop, task) = run_manager(&manager);
    let metrics = manager.metrics_addr().await.unwrap();
    let probes = manager.probe_addr().await.unwrap();

    wait_until("ready once the caches synced", CONVERGE, async || {
        let (code, body) = http_get(probes, "/readyz").await;
        (code == 200 && body == "ok")
            .then_some(())
            .ok_or(format!("{code} {body}"))
    })
    .await;
    wait_until(
        "the namespace's own ConfigMap is reconciled",
        CONVERGE,
        async || {
            let n = ctx.attempts("kube-root-ca.crt");
            (n == 1).then_some(()).ok_or(format!("{n}"))
        },
    )
    .await;
    let (_, before) = http_get(metrics, "/metrics").await;
    let success = r#"controller_runtime_reconcile_total{controller="flaky",result="success"}"#;
    let errors = r#"controller_runtime_reconcile_errors_total{controller="flaky"}"#;
    let terminal = r#"controller_runtime_terminal_reconcile_errors_total{controller="flaky"}"#;
    let panics = r#"controller_runtime_reconcile_panics_total{controller="flaky"}"#;
    for series in [success, errors, terminal, panics] {
        assert!(
            sample(&before, series).is_some(),
            "{series} missing before any work:\n{before}"
        );
    }
    let before_success: f64 = sample(&before, success).unwrap().parse().unwrap();

    let configmaps = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    for name in ["fail-3", "terminal", "panic", "fine-1", "fine-2"] {
        configmaps
            .create(&PostParams::default(), &configmap(&ns, name, &[]))
            .await
            .unwrap();
    }
    wait_until("every key settles", CONVERGE, async || {
        let counts = ["fail-3", "terminal", "panic", "fine-1", "fine-2"].map(|n| ctx.attempts(n));
        (counts == [4, 1, 2, 1, 1])
            .then_some(())
            .ok_or(format!("{counts:?}"))
    })
    .await;

    let (_, after) = http_get(metrics, "/metrics").await;
    let get = |series: &str| -> f64 {
        let value = sample(&after, series).unwrap_or_else(|| panic!("{series}:\n{after}"));
        value.parse().unwrap()
    };
    // fail-3: three errors then a success; terminal: one error; panic: one error then success.
    assert_eq!(get(errors), 5.0);
    assert_eq!(get(terminal), 1.0);
    assert_eq!(get(panics), 1.0);
    // fail-3, panic, fine-1 and fine-2 succeeded once each.
    assert_eq!(get(success) - before_success, 4.0);
    for series in [
        r#"controller_runtime_reconcile_time_seconds_count{controller="flaky"}"#,
        r#"controller_runtime_active_workers{controller="flaky"}"#,
        r#"controller_runtime_max_concurrent_reconciles{controller="flaky"}"#,
        r#"workqueue_adds_total{name="flaky",controller="flaky"}"#,
        r#"workqueue_retries_total{name="flaky",controller="flaky"}"#,
        r#"workqueue_depth{name="flaky",controller="flaky",priority="0"}"#,
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
    ] {
        assert!(
            sample(&after, series).is_some(),
            "{series} missing:\n{after}"
        );
    }
    assert_eq!(
        get(r#"workqueue_retries_total{name="flaky",controller="flaky"}"#),
        4.0
    );
    assert!(
        after
            .lines()
            .any(|l| l.starts_with("rest_client_requests_total{")
                && l.contains(r#"code="200""#)
                && l.contains(r#"method="GET""#)),
        "no rest_client_requests_total for GET 200:\n{after}"
    );
    assert!(
        after
            .lines()
            .any(|l| l.starts_with("controller_runtime_reconcile_time_seconds_bucket{")),
        "no reconcile time histogram:\n{after}"
    );

    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
    cluster::delete_namespace(&client, &ns).await;
}

// === concurrency ===

/// Records how many reconciles run at once, overall and per key.
#[derive(Default)]
struct Slow {
    running: AtomicUsize,
    peak: AtomicUsize,
    per_key: Mutex<HashMap<String, usize>>,
    overlap: AtomicUsize,
    done: Mutex<HashMap<String, usize>>,
}

async fn slow(cm: Arc<ConfigMap>, ctx: Arc<Slow>) -> Result<Action, ReconcileError> {
    let name = cm.metadata.name.clone().unwrap_or_default();
    let now = ctx.running.fetch_add(1, Ordering::SeqCst) + 1;
    ctx.peak.fetch_max(now, Ordering::SeqCst);
    {
        let mut per_key = ctx.per_key.lock();
        let n = per_key.entry(name.clone()).or_default();
        *n += 1;
        if *n > 1 {
            ctx.overlap.fetch_add(1, Ordering::SeqCst);
        }
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    *ctx.per_key.lock().get_mut(&name).unwrap() -= 1;
    ctx.running.fetch_sub(1, Ordering::SeqCst);
    *ctx.done.lock().entry(name).or_default() += 1;
    Ok(Action::done())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn four_workers_run_four_keys_at_once_and_never_one_key_twice() {
    let client = cluster::client();
    let ns = create_namespace(&client, "rt-slow").await;
    let configmaps = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    for i in 0..8 {
        configmaps
            .create(
                &PostParams::default(),
                &configmap(&ns, &format!("cm-{i}"), &[]),
            )
            .await
            .unwrap();
    }
    let manager = Manager::with_config(cluster::config(), options(&ns)).unwrap();
    let ctx = Arc::new(Slow::default());
    Controller::<ConfigMap>::new(&manager)
        .max_concurrent_reconciles(4)
        .complete(slow, ctx.clone())
        .unwrap();
    let (stop, task) = run_manager(&manager);

    // While cm-0 is being reconciled, change it twice: it must run again, after, not beside.
    wait_until("cm-0 is being reconciled", CONVERGE, async || {
        let running = ctx.per_key.lock().get("cm-0").copied().unwrap_or(0);
        (running == 1).then_some(()).ok_or(format!("{running}"))
    })
    .await;
    for v in ["a", "b"] {
        configmaps
            .patch(
                "cm-0",
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"data": {"v": v}})),
            )
            .await
            .unwrap();
    }
    wait_until(
        "every ConfigMap reconciled, cm-0 again",
        CONVERGE,
        async || {
            let done = ctx.done.lock().clone();
            let all = (0..8).all(|i| done.get(&format!("cm-{i}")).is_some_and(|n| *n >= 1));
            let again = done.get("cm-0").is_some_and(|n| *n >= 2);
            (all && again).then_some(()).ok_or(format!("{done:?}"))
        },
    )
    .await;
    assert_eq!(ctx.peak.load(Ordering::SeqCst), 4, "four keys at once");
    assert_eq!(
        ctx.overlap.load(Ordering::SeqCst),
        0,
        "one key never twice at once"
    );

    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
    cluster::delete_namespace(&client, &ns).await;
}

// === a cache that cannot sync ===

/// A configuration for service account `name` of `ns` (which has no RBAC permissions),
/// authenticated by a token from the TokenRequest API.
async fn service_account_config(client: &Client, ns: &str, name: &str) -> Config {
    let account = ServiceAccount {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(ns.to_owned()),
            ..ObjectMeta::default()
        },
        ..ServiceAccount::default()
    };
    Api::<ServiceAccount>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &account)
        .await
        .unwrap();
    let request = serde_json::json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": 3600}
    });
    let answer: serde_json::Value = client
        .request(
            http::Method::POST,
            &format!("/api/v1/namespaces/{ns}/serviceaccounts/{name}/token"),
            Some(serde_json::to_vec(&request).unwrap()),
        )
        .await
        .unwrap();
    let token = answer["status"]["token"].as_str().unwrap().to_owned();
    let mut config = cluster::config();
    config.identity = None;
    config.auth = Auth::Bearer(Token::new(token));
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn a_forbidden_kind_fails_the_sync_naming_the_kind_and_the_403() {
    let client = cluster::client();
    let ns = create_namespace(&client, "rt-rbac").await;
    let config = service_account_config(&client, &ns, "no-rights").await;
    let mut options = options(&ns);
    options.cache.sync_timeout = Duration::from_secs(5);
    let manager = Manager::with_config(config, options).unwrap();
    Controller::<ConfigMap>::new(&manager)
        .complete(
            |_: Arc<ConfigMap>, _: Arc<()>| async { Ok(Action::done()) },
            Arc::new(()),
        )
        .unwrap();
    let (_stop, task) = run_manager(&manager);
    let probes = manager.probe_addr().await.unwrap();
    let (code, body) = http_get(probes, "/readyz?verbose").await;
    assert_eq!(code, 500, "not ready while the cache cannot sync: {body}");
    assert!(body.contains("[-]cache-sync failed"), "{body}");

    let error = task.await.unwrap().unwrap_err();
    let message = error.to_string();
    assert!(
        matches!(error, ManagerError::Cache(CacheError::SyncTimeout { .. })),
        "{error:?}"
    );
    assert!(message.contains("configmaps"), "names the kind: {message}");
    assert!(
        message.contains("forbidden") && message.contains("403"),
        "names the 403: {message}"
    );
    cluster::delete_namespace(&client, &ns).await;
}

// === graceful shutdown of a real process ===

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn sigterm_lets_the_reconcile_in_flight_finish() {
    let client = cluster::client();
    let ns = create_namespace(&client, "rt-sigterm").await;
    let mirror = MirrorProcess::spawn(&["--namespace", &ns], None, false);

    let mut cm = configmap(&ns, "slow", &[("k", "v")]);
    cm.metadata.annotations = Some(BTreeMap::from([(
        "mirror.example.com/delay-seconds".to_owned(),
        "3".to_owned(),
    )]));
    Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    let started = format!("reconcile started {ns}/slow");
    mirror
        .wait_for_line("the slow reconcile starts", &started)
        .await;
    let (status, seen) = mirror.terminate("the operator exits after SIGTERM").await;
    assert!(status.success(), "exit status {status}; output {seen:?}");
    let finished = format!("reconcile finished {ns}/slow");
    let order: Vec<_> = seen
        .iter()
        .filter(|l| **l == finished || *l == "manager stopped")
        .collect();
    assert_eq!(
        order,
        [&finished, &"manager stopped".to_owned()],
        "{seen:?}"
    );
    // The reconcile that finished did its write.
    let secret = Api::<Secret>::namespaced(client.clone(), &ns)
        .get_opt("slow")
        .await
        .unwrap();
    assert!(secret.is_some(), "the in-flight reconcile wrote its Secret");
    cluster::delete_namespace(&client, &ns).await;
}

// === leader election between two managers ===

/// Records which manager reconciled, and whether two ever reconciled at once.
#[derive(Default)]
struct Audit {
    /// Manager ids in reconcile order.
    seen: Mutex<Vec<&'static str>>,
    running: Mutex<Vec<&'static str>>,
    overlap: AtomicUsize,
}

/// A reconcile of manager `id` in progress, in `Audit::running` until it ends, also when
/// its future is dropped (a manager whose task is aborted dies mid-reconcile: that reconcile
/// stops, and must not count as running beside the next leader's).
struct Running<'a>(&'a Audit, &'static str);

impl<'a> Running<'a> {
    fn enter(audit: &'a Audit, id: &'static str) -> Self {
        let mut running = audit.running.lock();
        if running.iter().any(|other| *other != id) {
            audit.overlap.fetch_add(1, Ordering::SeqCst);
        }
        running.push(id);
        Running(audit, id)
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        let mut running = self.0.running.lock();
        let at = running.iter().position(|r| *r == self.1).unwrap();
        running.remove(at);
    }
}

/// A manager `id` electing on lease `rt-lease` in `ns`, reconciling ConfigMaps into `audit`.
fn elected(ns: &str, id: &'static str, release: bool, audit: &Arc<Audit>) -> Manager {
    let mut election = LeaderElectionConfig::new("rt-lease", ns);
    election.identity = format!("{id}-{}", std::process::id());
    election.lease_duration = LEASE;
    election.renew_deadline = Duration::from_secs(3);
    election.retry_period = RETRY;
    election.release_on_cancel = release;
    let mut options = options(ns);
    options.leader_election = Some(election);
    let manager = Manager::with_config(cluster::config(), options).unwrap();
    let audit = audit.clone();
    Controller::<ConfigMap>::new(&manager)
        .complete(
            move |_: Arc<ConfigMap>, audit: Arc<Audit>| async move {
                let _running = Running::enter(&audit, id);
                audit.seen.lock().push(id);
                tokio::time::sleep(Duration::from_millis(50)).await;
                Ok(Action::done())
            },
            audit,
        )
        .unwrap();
    manager
}

const LEASE: Duration = Duration::from_secs(4);
const RETRY: Duration = Duration::from_secs(1);
/// client-go spaces attempts `retry × [1, 2.2)` apart (jitter 1.2), and a waiting candidate
/// measures expiry from when it saw the last renewal.
const JITTERED_RETRY: Duration = Duration::from_millis(2200);
/// Requests take time on a loaded machine. The bound after a release (3.2 s) stays under the
/// lease duration, so it still tells a release from an expiry.
const SLACK: Duration = Duration::from_millis(1000);

fn leading(manager: &Manager) -> bool {
    let series = r#"leader_election_master_status{name="rt-lease"}"#;
    sample(&manager.metrics().encode(), series) == Some("1")
}

async fn touch(configmaps: &Api<ConfigMap>, name: &str, value: &str) {
    configmaps
        .patch(
            name,
            &PatchParams::apply("rt-test").force(),
            &Patch::Apply(serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name}, "data": {"v": value}
            })),
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn one_of_two_managers_leads_and_hands_over_on_release_and_on_death() {
    let client = cluster::client();
    let ns = create_namespace(&client, "rt-leader").await;
    let configmaps = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    let audit = Arc::new(Audit::default());
    let first = elected(&ns, "first", true, &audit);
    let (stop_first, first_task) = run_manager(&first);
    wait_until("the first manager leads", CONVERGE, async || {
        leading(&first).then_some(()).ok_or("not yet".to_owned())
    })
    .await;
    let second = elected(&ns, "second", false, &audit);
    let (_stop_second, second_task) = run_manager(&second);
    touch(&configmaps, "probe", "1").await;
    wait_until("the leader reconciles", CONVERGE, async || {
        let seen = audit.seen.lock().clone();
        seen.contains(&"first")
            .then_some(())
            .ok_or(format!("{seen:?}"))
    })
    .await;
    // The second has synced its cache (it is ready) but does not lead or reconcile.
    let probes = second.probe_addr().await.unwrap();
    wait_until("the second is ready", CONVERGE, async || {
        let (code, body) = http_get(probes, "/readyz").await;
        (code == 200).then_some(()).ok_or(body)
    })
    .await;
    assert!(!leading(&second));
    assert!(!audit.seen.lock().contains(&"second"));

    // Stop the first with release: the second takes over within a jittered retry period.
    stop_first.send(()).unwrap();
    first_task.await.unwrap().unwrap();
    let released = std::time::Instant::now();
    wait_until("the second leads after the release", CONVERGE, async || {
        leading(&second).then_some(()).ok_or("not yet".to_owned())
    })
    .await;
    let handover = released.elapsed();
    assert!(
        handover <= JITTERED_RETRY + SLACK,
        "release handover took {handover:?}"
    );
    touch(&configmaps, "probe", "2").await;
    wait_until("the new leader reconciles", CONVERGE, async || {
        let seen = audit.seen.lock().clone();
        seen.contains(&"second")
            .then_some(())
            .ok_or(format!("{seen:?}"))
    })
    .await;

    // A third waits; the second dies without releasing (its task is aborted): the third
    // takes over once the lease has expired.
    let third = elected(&ns, "third", false, &audit);
    let (_stop_third, third_task) = run_manager(&third);
    let probes = third.probe_addr().await.unwrap();
    wait_until("the third is ready", CONVERGE, async || {
        let (code, body) = http_get(probes, "/readyz").await;
        (code == 200).then_some(()).ok_or(body)
    })
    .await;
    second_task.abort();
    let died = std::time::Instant::now();
    wait_until("the third leads after the death", CONVERGE, async || {
        leading(&third).then_some(()).ok_or("not yet".to_owned())
    })
    .await;
    let takeover = died.elapsed();
    assert!(
        takeover <= LEASE + 2 * JITTERED_RETRY + SLACK,
        "takeover after a death took {takeover:?}"
    );
    touch(&configmaps, "probe", "3").await;
    wait_until("the third reconciles", CONVERGE, async || {
        let seen = audit.seen.lock().clone();
        seen.contains(&"third")
            .then_some(())
            .ok_or(format!("{seen:?}"))
    })
    .await;
    assert_eq!(
        audit.overlap.load(Ordering::SeqCst),
        0,
        "two leaders reconciled at once"
    );

    third_task.abort();
    cluster::delete_namespace(&client, &ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn readyz_fails_until_the_caches_sync_and_passes_after() {
    let client = cluster::client();
    let ns = create_namespace(&client, "rt-ready").await;
    let config = service_account_config(&client, &ns, "late-rights").await;
    let manager = Manager::with_config(config, options(&ns)).unwrap();
    Controller::<ConfigMap>::new(&manager)
        .complete(
            |_: Arc<ConfigMap>, _: Arc<()>| async { Ok(Action::done()) },
            Arc::new(()),
        )
        .unwrap();
    let (stop, task) = run_manager(&manager);
    let probes = manager.probe_addr().await.unwrap();
    let (code, body) = http_get(probes, "/readyz").await;
    assert_eq!(code, 500, "not ready before the cache syncs: {body}");
    let (code, body) = http_get(probes, "/healthz").await;
    assert_eq!((code, body.as_str()), (200, "ok"), "alive all the same");

    // Grant the rights; the informer's next list succeeds and the cache syncs.
    let kubectl = support::Kubectl::from_env();
    kubectl.run(&[
        "-n",
        &ns,
        "create",
        "role",
        "read-configmaps",
        "--verb=get,list,watch",
        "--resource=configmaps",
    ]);
    kubectl.run(&[
        "-n",
        &ns,
        "create",
        "rolebinding",
        "read-configmaps",
        "--role=read-configmaps",
        &format!("--serviceaccount={ns}:late-rights"),
    ]);
    wait_until("ready once the cache synced", CONVERGE, async || {
        let (code, body) = http_get(probes, "/readyz?verbose").await;
        (code == 200 && body.contains("[+]cache-sync ok"))
            .then_some(())
            .ok_or(format!("{code} {body}"))
    })
    .await;
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
    cluster::delete_namespace(&client, &ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn typed_reads_decode_afresh_unless_the_cache_keeps_typed_forms() {
    let client = cluster::client();
    let ns = create_namespace(&client, "rt-keep").await;
    let configmaps = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    configmaps
        .create(&PostParams::default(), &configmap(&ns, "cm", &[("v", "1")]))
        .await
        .unwrap();
    let cache = |keep_typed| {
        let cache = controller_runtime::runtime::Cache::new(
            client.clone(),
            CacheOptions {
                namespaces: vec![ns.clone()],
                keep_typed,
                ..CacheOptions::default()
            },
        );
        let store = cache.store::<ConfigMap>().unwrap();
        (cache, store)
    };
    let (fresh, fresh_store) = cache(false);
    let (keeping, kept_store) = cache(true);
    let (stop, stopping) = tokio::sync::watch::channel(false);
    for cache in [&fresh, &keeping] {
        let mut stopping = stopping.clone();
        cache.start(async move {
            let _ = stopping.wait_for(|stop| *stop).await;
        });
    }
    fresh.wait_for_sync().await.unwrap();
    keeping.wait_for_sync().await.unwrap();

    let a = fresh_store.get(&ns, "cm").await.unwrap().unwrap();
    let b = fresh_store.get(&ns, "cm").await.unwrap().unwrap();
    assert_eq!(a, b);
    assert!(!Arc::ptr_eq(&a, &b), "each read decodes afresh by default");
    assert!(!fresh_store.raw(&ns, "cm").unwrap().is_decoded());

    let a = kept_store.get(&ns, "cm").await.unwrap().unwrap();
    let b = kept_store.get(&ns, "cm").await.unwrap().unwrap();
    assert!(Arc::ptr_eq(&a, &b), "the second read returns the kept form");

    // A changed object is a new one: read afresh, then kept again.
    configmaps
        .patch(
            "cm",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"data": {"v": "2"}})),
        )
        .await
        .unwrap();
    wait_until("the kept store sees the change", CONVERGE, async || {
        let cm = kept_store.get(&ns, "cm").await.unwrap().unwrap();
        match cm.data.as_ref().unwrap()["v"].as_str() {
            "2" => Ok(()),
            v => Err(format!("v is still {v}")),
        }
    })
    .await;
    let c = kept_store.get(&ns, "cm").await.unwrap().unwrap();
    assert!(!Arc::ptr_eq(&a, &c));
    assert!(Arc::ptr_eq(
        &c,
        &kept_store.get(&ns, "cm").await.unwrap().unwrap()
    ));

    let _ = stop.send(true);
    cluster::delete_namespace(&client, &ns).await;
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_kind_transform_shapes_what_the_cache_holds_and_other_kinds_stay_whole() {
    let client = cluster::client();
    let ns = create_namespace(&client, "rt-transform").await;
    Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &configmap(&ns, "cm", &[("v", "1")]))
        .await
        .unwrap();
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some("s".to_owned()),
            ..ObjectMeta::default()
        },
        string_data: Some([("k".to_owned(), "v".to_owned())].into()),
        ..Secret::default()
    };
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let cache = controller_runtime::runtime::Cache::new(
        client.clone(),
        CacheOptions {
            namespaces: vec![ns.clone()],
            ..CacheOptions::default()
        }
        .transform::<ConfigMap>(controller_runtime::runtime::metadata_only),
    );
    let configmaps = cache.store::<ConfigMap>().unwrap();
    let secrets = cache.store::<Secret>().unwrap();
    let (stop, mut stopping) = tokio::sync::watch::channel(false);
    cache.start(async move {
        let _ = stopping.wait_for(|stop| *stop).await;
    });
    cache.wait_for_sync().await.unwrap();

    // The ConfigMap's metadata is there, its data is not; nor are managedFields.
    let cm = configmaps.get(&ns, "cm").await.unwrap().unwrap();
    assert_eq!(cm.metadata.name.as_deref(), Some("cm"));
    assert!(cm.metadata.uid.is_some());
    assert_eq!(cm.data, None);
    assert_eq!(cm.metadata.managed_fields, None);
    let raw = configmaps.raw(&ns, "cm").unwrap();
    assert!(!raw.json().contains("\"data\""), "{}", raw.json());
    // Another kind keeps its body, stripped of managedFields alone.
    let s = secrets.get(&ns, "s").await.unwrap().unwrap();
    assert_eq!(
        s.data.as_ref().map(|d| d["k"].0.as_slice()),
        Some(&b"v"[..])
    );
    assert_eq!(s.metadata.managed_fields, None);

    let _ = stop.send(true);
    cluster::delete_namespace(&client, &ns).await;
}
