//! End to end: the operator binary and kubectl against the real cluster, as a user runs
//! them. The binary is started with its flags, serves its probes and metrics, converges a
//! sample applied with kubectl, reports a Deployment it may not write as Degraded, and stops
//! on SIGTERM.

#[path = "../../../tests/support/mod.rs"]
mod support;

use std::process::Stdio;
use std::time::Duration;

use support::cluster::{self, create_namespace};
use support::{CONVERGE, Kubectl, http_get, sample, wait_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn the_binary_converges_a_sample_reports_faults_and_stops_on_sigterm() {
    let client = cluster::client();
    memcached_operator::install_crd(&client, CONVERGE)
        .await
        .unwrap();
    let ns = create_namespace(&client, "mc-e2e").await;
    let kubectl = Kubectl::from_env();
    let (metrics, probes) = (support::free_port(), support::free_port());
    let mut operator = tokio::process::Command::new(env!("CARGO_BIN_EXE_memcached-operator"))
        .arg("--kubeconfig")
        .arg(cluster::kubeconfig())
        .args([
            "--namespace",
            &ns,
            &format!("--metrics-bind-address=127.0.0.1:{metrics}"),
            "--metrics-secure=false",
            &format!("--health-probe-bind-address=127.0.0.1:{probes}"),
            "--log-format=json",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = operator.id().unwrap();
    let stderr = operator.stderr.take().unwrap();
    let log = tokio::spawn(async move {
        use tokio::io::AsyncReadExt;
        let mut out = String::new();
        let mut stderr = stderr;
        let _ = stderr.read_to_string(&mut out).await;
        out
    });

    let probe_addr = format!("127.0.0.1:{probes}").parse().unwrap();
    support::wait_ready(probe_addr).await;

    // A sample applied with kubectl converges.
    kubectl.run(&[
        "-n",
        &ns,
        "apply",
        "-f",
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../config/samples/cache_v1alpha1_memcached.yaml"
        ),
    ]);
    let name = "memcached-sample";
    wait_until("the sample is available", CONVERGE, async || {
        let available = kubectl.jsonpath(
            &ns,
            &format!("memcached/{name}"),
            r#"{.status.conditions[?(@.type=="Available")].status}"#,
        );
        let size = kubectl.jsonpath(&ns, &format!("memcached/{name}"), "{.spec.size}");
        let ready = kubectl.jsonpath(&ns, &format!("memcached/{name}"), "{.status.readyReplicas}");
        (available == "True" && !size.is_empty() && ready == size)
            .then_some(())
            .ok_or(format!(
                "available {available:?}, ready {ready:?} of {size:?}"
            ))
    })
    .await;
    let columns = kubectl.run(&["-n", &ns, "get", "mc", name]);
    assert!(
        columns.contains("SIZE") && columns.contains("AVAILABLE"),
        "{columns}"
    );

    // A Deployment the operator may not write is Degraded: one of that name exists already,
    // controlled by something else (here the namespace's root-CA ConfigMap), so the API
    // server refuses a second controller reference.
    let owner_uid = kubectl.jsonpath(&ns, "configmap/kube-root-ca.crt", "{.metadata.uid}");
    kubectl.apply(&format!(
        r#"{{"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {{"name": "broken", "namespace": "{ns}",
                "ownerReferences": [{{"apiVersion": "v1", "kind": "ConfigMap",
                    "name": "kube-root-ca.crt", "uid": "{owner_uid}", "controller": true}}]}},
            "spec": {{"replicas": 0, "selector": {{"matchLabels": {{"app": "other"}}}},
                "template": {{"metadata": {{"labels": {{"app": "other"}}}},
                    "spec": {{"containers": [{{"name": "c", "image": "other"}}]}}}}}}}}"#
    ));
    kubectl.apply(&format!(
        "apiVersion: cache.example.com/v1alpha1\nkind: Memcached\nmetadata:\n  name: broken\n  namespace: {ns}\nspec:\n  size: 1\n"
    ));
    wait_until("the broken one is degraded", CONVERGE, async || {
        let degraded = kubectl.jsonpath(&ns,
            "memcached/broken",
            r#"{.status.conditions[?(@.type=="Degraded")].status}/{.status.conditions[?(@.type=="Degraded")].reason}"#,
        );
        (degraded == "True/DeploymentWriteFailed")
            .then_some(())
            .ok_or(degraded)
    })
    .await;

    // The metrics endpoint counts the reconciles and the errors.
    let (code, scrape) =
        http_get(format!("127.0.0.1:{metrics}").parse().unwrap(), "/metrics").await;
    assert_eq!(code, 200);
    assert!(
        scrape.contains(
            r#"controller_runtime_reconcile_total{controller="memcached",result="success"}"#
        ),
        "{scrape}"
    );
    let errors = sample(
        &scrape,
        r#"controller_runtime_reconcile_errors_total{controller="memcached"}"#,
    )
    .and_then(|v| v.parse::<f64>().ok());
    assert!(errors.is_some_and(|e| e >= 1.0), "{scrape}");

    // SIGTERM: a clean exit.
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = tokio::time::timeout(Duration::from_secs(60), operator.wait())
        .await
        .expect("the operator exits after SIGTERM")
        .unwrap();
    let log = log.await.unwrap();
    assert!(status.success(), "exit {status}; log:\n{log}");
    assert!(
        log.lines().all(|l| l.starts_with('{')),
        "JSON logs only:\n{log}"
    );
    assert!(
        log.contains("stopping: waiting for reconciles in flight to finish"),
        "{log}"
    );
    cluster::delete_namespace(&client, &ns).await;
}

/// One operator process started as a user would, on free loopback ports, in `ns`.
struct Operator {
    child: tokio::process::Child,
    metrics: std::net::SocketAddr,
}

impl Operator {
    fn start(ns: &str, extra: &[&str]) -> Operator {
        let (metrics, probes) = (support::free_port(), support::free_port());
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_memcached-operator"))
            .arg("--kubeconfig")
            .arg(cluster::kubeconfig())
            .args([
                "--namespace",
                ns,
                &format!("--metrics-bind-address=127.0.0.1:{metrics}"),
                "--metrics-secure=false",
                &format!("--health-probe-bind-address=127.0.0.1:{probes}"),
            ])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        Operator {
            child,
            metrics: format!("127.0.0.1:{metrics}").parse().unwrap(),
        }
    }

    /// Whether its metrics say it leads (false while it cannot be reached).
    async fn leads(&self) -> bool {
        if tokio::net::TcpStream::connect(self.metrics).await.is_err() {
            return false;
        }
        let (_, scrape) = http_get(self.metrics, "/metrics").await;
        sample(
            &scrape,
            r#"leader_election_master_status{name="86f835c3.example.com"}"#,
        ) == Some("1")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn two_operators_elect_one_leader_and_the_other_takes_over_when_it_is_killed() {
    let client = cluster::client();
    memcached_operator::install_crd(&client, CONVERGE)
        .await
        .unwrap();
    let ns = create_namespace(&client, "mc-failover").await;
    let kubectl = Kubectl::from_env();
    let elect = ["--leader-elect", "--leader-election-namespace", ns.as_str()];
    let mut operators = [Operator::start(&ns, &elect), Operator::start(&ns, &elect)];

    let leader = wait_until("one operator leads", CONVERGE, async || {
        let leads = [operators[0].leads().await, operators[1].leads().await];
        match leads {
            [true, false] => Ok(0),
            [false, true] => Ok(1),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let size = |n: u32| {
        format!(
            "apiVersion: cache.example.com/v1alpha1\nkind: Memcached\nmetadata:\n  name: cache\n  namespace: {ns}\nspec:\n  size: {n}\n"
        )
    };
    let ready = |n: u32| {
        let (kubectl, ns) = (&kubectl, &ns);
        async move {
            wait_until(&format!("{n} pods ready"), CONVERGE, async || {
                let got = kubectl.jsonpath(ns, "memcached/cache", "{.status.readyReplicas}");
                (got == n.to_string()).then_some(()).ok_or(got)
            })
            .await
        }
    };
    kubectl.apply(&size(2));
    ready(2).await;

    // Kill the leader outright (no release): the other takes over once the lease expires,
    // and the scenario goes on.
    operators[leader].child.start_kill().unwrap();
    operators[leader].child.wait().await.unwrap();
    kubectl.apply(&size(4));
    ready(4).await;
    let other = 1 - leader;
    assert!(operators[other].leads().await, "the survivor leads");

    let pid = operators[other].child.id().unwrap();
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = tokio::time::timeout(Duration::from_secs(60), operators[other].child.wait())
        .await
        .expect("the survivor exits after SIGTERM")
        .unwrap();
    assert!(status.success(), "{status}");
    cluster::delete_namespace(&client, &ns).await;
}
