//! A slow and overloaded server, scripted and real. Scripted: an informer whose LIST meets a burst of 429s and
//! 503s, some with `Retry-After`, some without, waits as it is asked (the client's retry) or
//! backs off (the reflector's), syncs once the server answers, and never sends more than one
//! request per answer: no amplification. Real (on the cluster): the API server's priority
//! and fairness rejecting every request of one account with 429 until it is given seats.
//!
//! Real time on loopback (the scripted server runs on threads), so the test asserts counts
//! (one request per response, in the scripted order) and spacing only from below (each
//! wait at least as long as asked, which a sleep guarantees), never an upper bound.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use controller_runtime::client::{Api, Client, ClientOptions, ListParams, RequestObserver};
use controller_runtime::config::{Auth, Secret};
use controller_runtime::informer::BackoffOptions;
use controller_runtime::informers::InformerFactory;
use http::Method;
use k8s_openapi::api::core::v1::ConfigMap;
use parking_lot::Mutex;
use support::scripted::{Scripted, http_client};

/// When each attempt the client made was answered, and with what.
#[derive(Debug, Default)]
struct Attempts(Mutex<Vec<(Instant, Option<u16>)>>);

impl RequestObserver for Attempts {
    fn observe(&self, _: &Method, _: &str, code: Option<u16>, _: Duration) {
        self.0.lock().push((Instant::now(), code));
    }
}

impl Attempts {
    /// The answers' status codes, in order (`None` for no answer).
    fn codes(&self) -> Vec<Option<u16>> {
        self.0.lock().iter().map(|(_, c)| *c).collect()
    }

    /// The most attempts answered within any one second.
    fn most_in_one_second(&self) -> usize {
        let times: Vec<Instant> = self.0.lock().iter().map(|(t, _)| *t).collect();
        (0..times.len())
            .map(|i| {
                times[i..]
                    .iter()
                    .take_while(|t| t.duration_since(times[i]) < Duration::from_secs(1))
                    .count()
            })
            .max()
            .unwrap_or(0)
    }
}

fn empty_response(code: u16, reason: &str, retry_after: Option<u32>) -> Vec<u8> {
    let retry = retry_after.map_or(String::new(), |s| format!("retry-after: {s}\r\n"));
    format!("HTTP/1.1 {code} {reason}\r\n{retry}content-length: 0\r\n\r\n").into_bytes()
}

fn json_response(body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// A watch that stays open with nothing to say.
fn quiet_watch() -> Vec<u8> {
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
        .to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_informer_under_429s_and_503s_honours_retry_after_backs_off_and_never_amplifies() {
    const CM: &str = r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"7"}}"#;
    let list = format!(
        r#"{{"kind":"ConfigMapList","apiVersion":"v1","metadata":{{"resourceVersion":"9"}},"items":[{CM}]}}"#
    );
    let throttled = || empty_response(429, "Too Many Requests", Some(1));
    let mut script = vec![throttled(), throttled(), throttled(), throttled()];
    // 503 with Retry-After: the client waits and resends; without: the reflector backs off.
    script.push(empty_response(503, "Service Unavailable", Some(1)));
    script.push(empty_response(503, "Service Unavailable", None));
    let overloaded = script.len();
    script.push(json_response(&list));
    script.push(quiet_watch());
    let server = Scripted::start(script);

    let attempts = Arc::new(Attempts::default());
    let options = ClientOptions {
        // No client-side limit: what spaces the retries out must be the server's word.
        rate_limit: None,
        observer: Some(attempts.clone()),
        ..ClientOptions::default()
    };
    let client = http_client(server.addr, Auth::Bearer(Secret::new("t0ken")), options);
    let factory = InformerFactory::new(client)
        .namespace("ns")
        .watch_list(false);
    let informer = factory.informer::<ConfigMap>();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    factory.start(async {
        let _ = stopped.await;
    });
    assert!(factory.wait_for_cache_sync().await);
    assert_eq!(informer.get_indexer().len(), 1);

    // One LIST per scripted answer, then the watch: no request was sent twice at once.
    support::wait_until("the watch is sent", support::CONVERGE, async || {
        let n = server.requests().len();
        (n == overloaded + 2)
            .then_some(())
            .ok_or(format!("{n} requests"))
    })
    .await;
    let requests = server.requests();
    let lines: Vec<&str> = requests
        .iter()
        .map(|r| r.lines().next().unwrap_or(""))
        .collect();
    for line in &lines[..=overloaded] {
        assert!(
            line.starts_with("GET /api/v1/namespaces/ns/configmaps?") && !line.contains("watch="),
            "{line}"
        );
    }
    assert!(lines[overloaded + 1].contains("watch="), "{lines:?}");

    // One request per answer, in the scripted order: nothing is sent twice or in a storm.
    let codes: Vec<Option<u16>> = attempts.0.lock().iter().map(|(_, c)| *c).collect();
    assert_eq!(
        &codes[..overloaded],
        &[
            Some(429),
            Some(429),
            Some(429),
            Some(429),
            Some(503),
            Some(503)
        ]
    );
    // Spacing, from below only (a sleep never ends early, however loaded the machine): each
    // answer with `Retry-After: 1` is followed by at least a second of silence, and the 503
    // without it by at least the reflector's first backoff step (800 ms, jitter only adds).
    let times: Vec<Instant> = attempts.0.lock().iter().map(|(t, _)| *t).collect();
    for (i, pair) in times[..=overloaded].windows(2).enumerate() {
        let least = if i + 1 < overloaded {
            Duration::from_secs(1)
        } else {
            BackoffOptions::default().initial
        };
        let gap = pair[1].duration_since(pair[0]);
        assert!(
            gap >= least,
            "attempt {} came {gap:?} after answer {i} ({:?}), before the {least:?} asked",
            i + 1,
            codes[i]
        );
    }
    let most = attempts.most_in_one_second();
    println!("most attempts in one second during the 429/503 burst: {most} ({codes:?})");
    let _ = stop.send(());
}

/// Deletes the cluster-scoped flow-control objects it names when dropped, test failed or not.
struct FlowControl {
    kubectl: support::Kubectl,
    names: Vec<String>,
}

impl Drop for FlowControl {
    fn drop(&mut self) {
        for name in &self.names {
            let _ = self
                .kubectl
                .try_run(&["delete", name, "--ignore-not-found"], None);
        }
    }
}

/// Real 429s: the API server's priority and fairness given one account a level with no
/// seats of its own (zero concurrency shares, nothing borrowed, rejecting instead of
/// queueing), which admits a request only while none of that level's runs. Waves of eight
/// simultaneous LISTs as that account meet 429s; each client waits at least as long as asked
/// (`Retry-After`, whole seconds) before its next attempt, and every LIST gets through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn real_429s_from_priority_and_fairness_are_retried_no_sooner_than_asked() {
    let kubectl = support::Kubectl::from_env();
    let ns = support::Namespace::create(&kubectl, "overload");
    let (account, level, schema) = (
        "throttled",
        support::unique("overload-level"),
        support::unique("overload-schema"),
    );
    let flow = FlowControl {
        kubectl: kubectl.clone(),
        names: vec![
            format!("flowschema.flowcontrol.apiserver.k8s.io/{schema}"),
            format!("prioritylevelconfiguration.flowcontrol.apiserver.k8s.io/{level}"),
        ],
    };
    let manifests = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": account, "namespace": ns.name}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "read-configmaps", "namespace": ns.name},
         "rules": [{"apiGroups": [""], "resources": ["configmaps"],
                    "verbs": ["get", "list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "read-configmaps", "namespace": ns.name},
         "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": ns.name}],
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                     "name": "read-configmaps"}},
        {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
         "metadata": {"name": level},
         "spec": {"type": "Limited", "limited": {
             "nominalConcurrencyShares": 0, "lendablePercent": 0, "borrowingLimitPercent": 0,
             "limitResponse": {"type": "Reject"}}}},
        {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
         "metadata": {"name": schema},
         "spec": {"priorityLevelConfiguration": {"name": level}, "matchingPrecedence": 100,
                  "rules": [{"subjects": [{"kind": "ServiceAccount", "serviceAccount":
                                {"name": account, "namespace": ns.name}}],
                             "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"],
                                                "resources": ["*"], "namespaces": ["*"],
                                                "clusterScope": true}]}]}},
    ]});
    kubectl.apply(&manifests.to_string());
    let token = kubectl.run(&["-n", &ns.name, "create", "token", account, "--duration=1h"]);
    let mut config = support::cluster::config();
    config.identity = None;
    config.auth = Auth::Bearer(Secret::new(token.trim()));

    // Waves until the level has rejected something: the configuration takes effect a moment
    // after it is written, and a wave whose LISTs happen not to overlap meets no 429.
    const WAVE: usize = 8;
    let mut clients: Vec<Arc<Attempts>> = Vec::new();
    let mut waves = 0;
    support::wait_until(
        "a 429 from the account's level",
        support::CONVERGE,
        async || {
            waves += 1;
            let mut lists = tokio::task::JoinSet::new();
            for _ in 0..WAVE {
                let attempts = Arc::new(Attempts::default());
                clients.push(attempts.clone());
                let options = ClientOptions {
                    rate_limit: None,
                    observer: Some(attempts),
                    ..ClientOptions::default()
                };
                let api = Api::<ConfigMap>::namespaced(
                    Client::new(config.clone(), options).unwrap(),
                    &ns.name,
                );
                lists.spawn(async move { api.list(&ListParams::default()).await.map(|_| ()) });
            }
            while let Some(listed) = lists.join_next().await {
                listed
                    .unwrap()
                    .map_err(|e| format!("a LIST failed after its retries: {e}"))?;
            }
            let rejected = clients
                .iter()
                .flat_map(|c| c.codes())
                .filter(|c| *c == Some(429))
                .count();
            (rejected > 0).then_some(()).ok_or("no 429 yet".to_owned())
        },
    )
    .await;

    // From below only (a sleep never ends early): after each 429, a second of silence.
    let (mut attempts, mut rejected, mut most) = (0, 0, 0);
    for client in &clients {
        let seen = client.0.lock().clone();
        for pair in seen.windows(2) {
            let gap = pair[1].0.duration_since(pair[0].0);
            assert_eq!(
                pair[0].1,
                Some(429),
                "only a 429 is followed by another attempt"
            );
            assert!(
                gap >= Duration::from_secs(1),
                "an attempt {gap:?} after a 429"
            );
        }
        assert_eq!(seen.last().map(|a| a.1), Some(Some(200)), "{seen:?}");
        attempts += seen.len();
        rejected += seen.len() - 1;
        most = most.max(client.most_in_one_second());
    }
    println!(
        "{waves} waves of {WAVE} LISTs: {attempts} attempts, {rejected} answered 429; \
         most attempts by one client in one second: {most}"
    );
    drop(flow);
}
