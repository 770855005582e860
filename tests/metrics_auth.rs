//! `/metrics` over HTTPS against the real cluster, as kubebuilder's `--metrics-secure` serves
//! it: a manager running as a service account with nothing but the rendered
//! `config/rbac/metrics_auth_role.yaml` answers a scrape without a token with 401, one by a
//! service account without `metrics-reader` with 403, and one by a service account bound to
//! the rendered `metrics-reader` with 200 and the metrics text. Both certificate sources are
//! served: a self-signed one made at start, and one from a directory, verified against its
//! CA.

mod support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use controller_runtime::client::{Client, ClientOptions};
use controller_runtime::config::{Auth, Secret as Token};
use controller_runtime::runtime::server::SecureMetricsOptions;
use controller_runtime::runtime::{Manager, ManagerOptions};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use serde_json::{Value, json};
use support::cluster;
use support::{Kubectl, unique};

/// The rules of `name` (a ClusterRole) in the rendered `config/rbac`.
fn rendered_rules(kubectl: &Kubectl, name: &str) -> Value {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/rbac");
    let yaml = kubectl.run(&["kustomize", dir.to_str().unwrap()]);
    let objects: Vec<Value> = serde_saphyr::from_multiple(&yaml).unwrap();
    objects
        .into_iter()
        .find(|o| o["kind"] == "ClusterRole" && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no ClusterRole {name} in config/rbac"))["rules"]
        .clone()
}

/// Service accounts in a namespace, each optionally bound cluster-wide to a uniquely named
/// copy of some rules; everything is deleted when dropped.
struct Accounts {
    kubectl: Kubectl,
    ns: String,
    cluster_objects: Vec<String>,
}

impl Accounts {
    fn new(kubectl: &Kubectl) -> Accounts {
        let ns = unique("metrics-auth");
        kubectl.run(&["create", "namespace", &ns]);
        Accounts {
            kubectl: kubectl.clone(),
            ns,
            cluster_objects: Vec::new(),
        }
    }

    /// Creates service account `name`, bound to `rules` when given, and returns a token for
    /// it (from the TokenRequest API).
    fn account(&mut self, name: &str, rules: Option<&Value>) -> String {
        let ns = &self.ns;
        let mut items = vec![json!({"apiVersion": "v1", "kind": "ServiceAccount",
                                    "metadata": {"name": name, "namespace": ns}})];
        if let Some(rules) = rules {
            let role = unique(&format!("metrics-auth-{name}"));
            self.cluster_objects.push(format!("clusterrole/{role}"));
            self.cluster_objects
                .push(format!("clusterrolebinding/{role}"));
            items.push(
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                              "metadata": {"name": role}, "rules": rules}),
            );
            items.push(json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": role},
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}],
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": role},
            }));
        }
        self.kubectl
            .apply(&json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string());
        let token = self
            .kubectl
            .run(&["-n", ns, "create", "token", name, "--duration=1h"]);
        token.trim().to_owned()
    }
}

impl Drop for Accounts {
    fn drop(&mut self) {
        for object in &self.cluster_objects {
            let _ = self.kubectl.try_run(
                &["delete", object, "--ignore-not-found", "--wait=false"],
                None,
            );
        }
        let _ = self.kubectl.try_run(
            &[
                "delete",
                "namespace",
                &self.ns,
                "--ignore-not-found",
                "--wait=false",
            ],
            None,
        );
    }
}

/// A client for the metrics server at `addr`: trusting `ca` (checking the name
/// `server_name`), or any certificate when `ca` is `None`; sending `token`, if any.
fn scraper(addr: SocketAddr, ca: Option<(&Path, &str)>, token: Option<&str>) -> Client {
    let mut config = cluster::config();
    config.cluster_url = format!("https://{addr}").parse().unwrap();
    config.identity = None;
    config.auth = match token {
        Some(t) => Auth::Bearer(Token::new(t.to_owned())),
        None => Auth::None,
    };
    match ca {
        Some((ca, name)) => {
            config.root_certs = CertificateDer::pem_file_iter(ca)
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            config.accept_invalid_certs = false;
            config.tls_server_name = Some(name.to_owned());
        }
        None => {
            config.root_certs.clear();
            config.accept_invalid_certs = true;
            config.tls_server_name = None;
        }
    }
    Client::new(config, ClientOptions::default()).unwrap()
}

/// Scrapes `path`: the status code and the body (the error's message for a refusal).
async fn scrape(client: &Client, path: &str) -> (u16, String) {
    match client.get_raw(path).await {
        Ok(body) => (200, String::from_utf8_lossy(&body).into_owned()),
        Err(e) => match e.code() {
            Some(code) => (code, e.to_string()),
            None => panic!("scraping {path}: {e}"),
        },
    }
}

/// A manager serving secure metrics on a free local port, its client authenticated with
/// `token`; returns it running, with its metrics address.
async fn secure_manager(
    token: &str,
    secure: SecureMetricsOptions,
    debug_pages: bool,
) -> (
    SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<(), controller_runtime::runtime::ManagerError>>,
) {
    let mut config = cluster::config();
    config.identity = None;
    config.auth = Auth::Bearer(Token::new(token.to_owned()));
    let options = ManagerOptions {
        metrics_bind_address: Some("127.0.0.1:0".parse().unwrap()),
        metrics_secure: Some(secure),
        debug_pages,
        ..ManagerOptions::default()
    };
    let manager = Manager::with_config(config, options).unwrap();
    let (stop, running) = support::run_manager(&manager);
    let addr = manager.metrics_addr().await.expect("metrics are served");
    (addr, stop, running)
}

async fn stop_manager(
    stop: tokio::sync::oneshot::Sender<()>,
    running: tokio::task::JoinHandle<Result<(), controller_runtime::runtime::ManagerError>>,
) {
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(60), running)
        .await
        .expect("the manager stops")
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn only_a_service_account_bound_to_metrics_reader_may_scrape() {
    let kubectl = Kubectl::from_env();
    let mut accounts = Accounts::new(&kubectl);
    let operator = accounts.account(
        "operator",
        Some(&rendered_rules(&kubectl, "metrics-auth-role")),
    );
    let reader = accounts.account("reader", Some(&rendered_rules(&kubectl, "metrics-reader")));
    let stranger = accounts.account("stranger", None);

    // No certificate in the directory: a self-signed one.
    let secure = SecureMetricsOptions {
        cert_dir: std::env::temp_dir().join(unique("no-metrics-certs")),
        ..SecureMetricsOptions::default()
    };
    let (addr, stop, running) = secure_manager(&operator, secure, false).await;

    let (code, body) = scrape(&scraper(addr, None, None), "/metrics").await;
    assert_eq!(code, 401, "no token: {body}");
    assert!(body.contains("Unauthorized"), "{body}");
    let (code, body) = scrape(&scraper(addr, None, Some("not-a-token")), "/metrics").await;
    assert_eq!(code, 401, "a bad token: {body}");

    let (code, body) = scrape(&scraper(addr, None, Some(&stranger)), "/metrics").await;
    assert_eq!(
        code, 403,
        "a service account without metrics-reader: {body}"
    );
    let who = format!("system:serviceaccount:{}:stranger", accounts.ns);
    assert!(
        body.contains(&format!("Authorization denied for user {who}")),
        "{body}"
    );

    let allowed = scraper(addr, None, Some(&reader));
    let (code, body) = scrape(&allowed, "/metrics").await;
    assert_eq!(
        code, 200,
        "a service account bound to metrics-reader: {body}"
    );
    assert!(body.contains("# TYPE rest_client_requests_total"), "{body}");
    // Served from the cache the second time, the same.
    assert_eq!(scrape(&allowed, "/metrics").await.0, 200);
    // Other paths are not metrics, whoever asks.
    assert_eq!(scrape(&allowed, "/other").await.0, 404);

    stop_manager(stop, running).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn a_certificate_from_the_cert_path_is_served_and_verifies() {
    let kubectl = Kubectl::from_env();
    let mut accounts = Accounts::new(&kubectl);
    let operator = accounts.account(
        "operator",
        Some(&rendered_rules(&kubectl, "metrics-auth-role")),
    );
    let reader = accounts.account("reader", Some(&rendered_rules(&kubectl, "metrics-reader")));

    let tls = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/tls");
    let secure = SecureMetricsOptions {
        cert_dir: tls.clone(),
        cert_name: "server.pem".into(),
        key_name: "server-key.pem".into(),
        ..SecureMetricsOptions::default()
    };
    let (addr, stop, running) = secure_manager(&operator, secure, false).await;
    let verified = scraper(
        addr,
        Some((&tls.join("ca.pem"), "server.test")),
        Some(&reader),
    );
    let (code, body) = scrape(&verified, "/metrics").await;
    assert_eq!(code, 200, "{body}");
    // A client that trusts another CA refuses the certificate.
    let wrong = scraper(
        addr,
        Some((&tls.join("self-signed.pem"), "server.test")),
        Some(&reader),
    );
    let refused = wrong.get_raw("/metrics").await.unwrap_err();
    assert!(
        refused.code().is_none(),
        "a TLS failure, not an answer: {refused}"
    );

    stop_manager(stop, running).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn the_debug_pages_are_behind_the_same_authorization_as_metrics() {
    let kubectl = Kubectl::from_env();
    let mut accounts = Accounts::new(&kubectl);
    let operator = accounts.account(
        "operator",
        Some(&rendered_rules(&kubectl, "metrics-auth-role")),
    );
    let reader = accounts.account("reader", Some(&rendered_rules(&kubectl, "metrics-reader")));
    let stranger = accounts.account("stranger", None);
    let secure = SecureMetricsOptions {
        cert_dir: std::env::temp_dir().join(unique("no-metrics-certs")),
        ..SecureMetricsOptions::default()
    };
    let (addr, stop, running) = secure_manager(&operator, secure, true).await;

    for path in ["/debug/controllers", "/debug/controllers.json"] {
        let (code, body) = scrape(&scraper(addr, None, None), path).await;
        assert_eq!(code, 401, "{path}, no token: {body}");
        let (code, body) = scrape(&scraper(addr, None, Some(&stranger)), path).await;
        assert_eq!(code, 403, "{path}, without metrics-reader: {body}");
        let (code, body) = scrape(&scraper(addr, None, Some(&reader)), path).await;
        assert_eq!(code, 200, "{path}, bound to metrics-reader: {body}");
        assert!(body.contains("controllers"), "{body}");
    }
    stop_manager(stop, running).await;
}
