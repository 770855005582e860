//! No credential reaches the operator's log, at any level: the binary runs at trace level
//! through a Memcached's create, scale and delete, and scrapes of its HTTPS `/metrics` with
//! and without bearer tokens, once authenticated by a service account's bearer token and once
//! by the test cluster's client certificate. Everything it writes (stdout and stderr) is then
//! searched for the token, `Bearer ` followed by it, the scraper's token, and any 40-character
//! run of the base64 of the client certificate or its key.

#[path = "../../../tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use base64::Engine as _;
use controller_runtime::client::{Client, ClientOptions};
use controller_runtime::config::{Auth, Secret as Token};
use serde_json::{Value, json};
use support::cluster::{self, create_namespace};
use support::{CONVERGE, Kubectl, unique, wait_until};

/// The 40-character runs of the base64 body of each PEM block in `pem`, and of `pem`'s own
/// base64 (as a kubeconfig's `*-data` fields hold it).
fn runs_of_pem(pem: &str) -> Vec<String> {
    let body: String = pem
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect::<Vec<_>>()
        .concat();
    let data = base64::engine::general_purpose::STANDARD.encode(pem);
    let mut runs = Vec::new();
    for text in [body, data] {
        let bytes = text.as_bytes();
        for start in 0..bytes.len().saturating_sub(40) {
            runs.push(text[start..start + 40].to_owned());
        }
    }
    runs
}

/// Runs the operator with `kubeconfig` at trace level through a Memcached's life in a new
/// namespace, scraping its metrics with `scrape_tokens` on the way; returns all it wrote.
async fn run_scenario(kubectl: &Kubectl, kubeconfig: &Path, scrape_tokens: &[&str]) -> String {
    let admin = cluster::client();
    memcached_operator::install_crd(&admin, CONVERGE)
        .await
        .unwrap();
    let ns = create_namespace(&admin, "mc-log-secrets").await;
    let _guard = support::Namespace::guard(kubectl, ns.clone());
    let (metrics, probes) = (support::free_port(), support::free_port());
    let mut operator = tokio::process::Command::new(env!("CARGO_BIN_EXE_memcached-operator"))
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args([
            "--namespace",
            &ns,
            &format!("--metrics-bind-address=127.0.0.1:{metrics}"),
            &format!("--health-probe-bind-address=127.0.0.1:{probes}"),
            "--log-level=trace",
        ])
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = operator.id().unwrap();
    let read_all = |pipe: Option<Box<dyn tokio::io::AsyncRead + Send + Unpin>>| {
        tokio::spawn(async move {
            use tokio::io::AsyncReadExt;
            let mut out = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut out).await;
            }
            String::from_utf8_lossy(&out).into_owned()
        })
    };
    let stdout = read_all(operator.stdout.take().map(|p| Box::new(p) as _));
    let stderr = read_all(operator.stderr.take().map(|p| Box::new(p) as _));

    let probe_addr = format!("127.0.0.1:{probes}").parse().unwrap();
    support::wait_ready(probe_addr).await;

    // Scrapes over HTTPS, with each token and with none.
    for token in scrape_tokens.iter().map(Some).chain([None]) {
        let mut config = cluster::config();
        config.cluster_url = format!("https://127.0.0.1:{metrics}").parse().unwrap();
        config.root_certs.clear();
        config.accept_invalid_certs = true;
        config.identity = None;
        config.auth = match token {
            Some(t) => Auth::Bearer(Token::new((*t).to_owned())),
            None => Auth::None,
        };
        let client = Client::new(config, ClientOptions::default()).unwrap();
        let answer = client.get_raw("/metrics").await;
        assert!(
            answer.is_ok() || answer.as_ref().unwrap_err().code().is_some(),
            "the metrics server answers: {:?}",
            answer.err()
        );
    }

    // Create, scale, delete.
    let name = "cache";
    kubectl.apply(&format!(
        "apiVersion: cache.example.com/v1alpha1\nkind: Memcached\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  size: 1\n"
    ));
    let replicas = async |want: &str| {
        let what = format!("the deployment has {want} replicas");
        wait_until(&what, CONVERGE, async || {
            let got = kubectl.jsonpath(&ns, &format!("deployment/{name}"), "{.spec.replicas}");
            (got == want).then_some(()).ok_or(got)
        })
        .await
    };
    replicas("1").await;
    kubectl.run(&[
        "-n",
        &ns,
        "patch",
        &format!("memcached/{name}"),
        "--type=merge",
        "-p",
        r#"{"spec":{"size":2}}"#,
    ]);
    replicas("2").await;
    kubectl.run(&[
        "-n",
        &ns,
        "delete",
        &format!("memcached/{name}"),
        "--wait=true",
    ]);

    let kill = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = tokio::time::timeout(std::time::Duration::from_secs(60), operator.wait())
        .await
        .expect("the operator stops on SIGTERM")
        .unwrap();
    assert!(status.success(), "{status}");
    let out = stdout.await.unwrap() + &stderr.await.unwrap();
    assert!(
        out.contains("TRACE") && out.contains(&ns) && out.contains("unauthorized"),
        "the log is at trace level, and tells of the reconciles and the refused scrape: {}",
        &out[..out.len().min(2000)]
    );
    out
}

/// Panics naming the first of `secrets` found in `log`, with the line it is on.
fn assert_absent(log: &str, secrets: &[(String, &str)]) {
    for (secret, what) in secrets {
        if let Some(at) = log.find(secret.as_str()) {
            let line_start = log[..at].rfind('\n').map_or(0, |i| i + 1);
            let line_end = log[at..].find('\n').map_or(log.len(), |i| at + i);
            panic!(
                "{what} is in the log ({} bytes), on this line: {}",
                log.len(),
                &log[line_start..line_end]
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn a_bearer_token_never_reaches_the_log_at_trace_level() {
    let kubectl = Kubectl::from_env();
    // A service account allowed everything (this test is about the log, not the rights).
    let ns = unique("mc-log-token");
    kubectl.run(&["create", "namespace", &ns]);
    let _ns = support::Namespace::guard(&kubectl, ns.clone());
    let binding = unique("mc-log-token");
    kubectl.run(&["-n", &ns, "create", "serviceaccount", "operator"]);
    kubectl.run(&[
        "create",
        "clusterrolebinding",
        &binding,
        "--clusterrole=cluster-admin",
        &format!("--serviceaccount={ns}:operator"),
    ]);
    struct Unbind<'k>(&'k Kubectl, String);
    impl Drop for Unbind<'_> {
        fn drop(&mut self) {
            let _ = self.0.try_run(
                &[
                    "delete",
                    "clusterrolebinding",
                    &self.1,
                    "--ignore-not-found",
                ],
                None,
            );
        }
    }
    let _unbind = Unbind(&kubectl, binding);
    let token = kubectl
        .run(&["-n", &ns, "create", "token", "operator", "--duration=1h"])
        .trim()
        .to_owned();

    let mut config: Value = kubectl.json(&["config", "view", "--raw", "--minify"]);
    config["users"][0]["user"] = json!({ "token": token });
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(unique("log-token"));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, config.to_string()).unwrap();

    let bogus = "bogus-scrape-token-0123456789abcdef";
    let log = run_scenario(&kubectl, &kubeconfig, &[&token, bogus]).await;
    let _ = std::fs::remove_dir_all(&dir);

    let signature = token.rsplit('.').next().unwrap().to_owned();
    assert!(signature.len() >= 40, "a JWT's signature");
    assert_absent(
        &log,
        &[
            (format!("Bearer {token}"), "\"Bearer \" and the token"),
            (token.clone(), "the token"),
            (signature, "the token's signature"),
            (bogus.to_owned(), "the scraper's bad token"),
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn a_client_certificate_and_key_never_reach_the_log_at_trace_level() {
    let kubectl = Kubectl::from_env();
    let kubeconfig = cluster::kubeconfig();
    let config: Value = kubectl.json(&["config", "view", "--raw", "--minify"]);
    let user = &config["users"][0]["user"];
    let pem = |field: &str, file_field: &str| -> String {
        match user[field].as_str() {
            Some(data) => String::from_utf8(
                base64::engine::general_purpose::STANDARD
                    .decode(data)
                    .unwrap(),
            )
            .unwrap(),
            None => std::fs::read_to_string(user[file_field].as_str().unwrap_or_else(|| {
                panic!("the test cluster's user has no {field} nor {file_field}: {user}")
            }))
            .unwrap(),
        }
    };
    let key = pem("client-key-data", "client-key");
    let cert = pem("client-certificate-data", "client-certificate");

    let log = run_scenario(&kubectl, &kubeconfig, &[]).await;

    let mut secrets: Vec<(String, &str)> = Vec::new();
    secrets.extend(
        runs_of_pem(&key)
            .into_iter()
            .map(|r| (r, "a run of the client key")),
    );
    secrets.extend(
        runs_of_pem(&cert)
            .into_iter()
            .map(|r| (r, "a run of the client certificate")),
    );
    assert_absent(&log, &secrets);
}
