//! Bad input, as a user meets it: each case of the README's "When something is wrong" table,
//! with the one line the user sees checked for its cause and its fix. The operator binary
//! is run with a broken kubeconfig and must exit non-zero with a single error line; the
//! custom resource and webhook rows are kubectl against the real API server.

#[path = "../../../tests/support/mod.rs"]
mod support;

use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};

use base64::Engine;
use support::certs::{TempDir, WebhookConfigurations, make_ca, openssl};
use support::cluster::{self, create_namespace};
use support::{CONVERGE, Kubectl, Namespace, eventually, unique};

/// The operator process, killed if a test gives up on it.
struct Operator(Child);

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs the operator binary with `kubeconfig` on `namespace` until it exits by itself
/// (within [`CONVERGE`]), and returns its exit status and its error lines.
fn run_operator(kubeconfig: &Path, namespace: &str, dir: &TempDir) -> (ExitStatus, Vec<String>) {
    let log = dir.join(&format!("{}.log", unique("operator")));
    let child = Command::new(env!("CARGO_BIN_EXE_memcached-operator"))
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args([
            "--namespace",
            namespace,
            "--metrics-bind-address=127.0.0.1:0",
            "--health-probe-bind-address=127.0.0.1:0",
        ])
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut operator = Operator(child);
    let status = eventually("the operator exits", CONVERGE, || {
        operator
            .0
            .try_wait()
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "still running".to_owned())
    });
    let stderr = std::fs::read_to_string(&log).unwrap();
    let errors = stderr
        .lines()
        .filter(|l| l.contains(" ERROR "))
        .map(str::to_owned)
        .collect();
    (status, errors)
}

/// Asserts the operator failed with exactly one error line, and returns its message (what
/// follows the log line's timestamp, level and target).
fn the_one_line(outcome: (ExitStatus, Vec<String>)) -> String {
    let (status, errors) = outcome;
    assert!(!status.success(), "the operator exited {status}");
    assert_eq!(errors.len(), 1, "one error line, not {errors:#?}");
    let line = errors.into_iter().next().unwrap();
    match line.split_once(" ERROR setup: ") {
        Some((_, message)) => message.to_owned(),
        None => panic!("not the operator's error line: {line}"),
    }
}

/// Asserts the operator failed with exactly one error line starting with `start` and
/// holding every one of `phrases`, and returns its message.
fn one_line_with(outcome: (ExitStatus, Vec<String>), start: &str, phrases: &[&str]) -> String {
    let message = the_one_line(outcome);
    assert!(
        message.starts_with(start),
        "{message} does not start with {start:?}"
    );
    for phrase in phrases {
        assert!(message.contains(phrase), "{phrase:?} is not in {message}");
    }
    message
}

/// A kubeconfig for `server` (no TLS), user by token: for cases that need no cluster.
fn plain_kubeconfig(server: &str, current_context: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n\
         contexts:\n- name: here\n  context:\n    cluster: c\n    user: u\n\
         current-context: {current_context}\nusers:\n- name: u\n  user:\n    token: t0ken\n"
    )
}

/// The test cluster's kubeconfig with the line starting `key:` (indented) given `value`.
fn testenv_kubeconfig_with(replacements: &[(&str, &str)]) -> String {
    let original = std::fs::read_to_string(cluster::kubeconfig()).unwrap();
    let mut out = String::new();
    for line in original.lines() {
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        match replacements
            .iter()
            .find(|(key, _)| trimmed.starts_with(&format!("{key}:")))
        {
            Some((key, value)) => out.push_str(&format!("{indent}{key}: {value}\n")),
            None => out.push_str(&format!("{line}\n")),
        }
    }
    out
}

fn base64_file(path: &Path) -> String {
    base64::engine::general_purpose::STANDARD.encode(std::fs::read(path).unwrap())
}

/// A loopback port with nothing listening on it (bound, then released).
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

// === without a cluster ===

#[test]
fn a_malformed_kubeconfig_names_the_file_line_and_column() {
    let dir = TempDir::new("bad-input");
    let path = dir.write("config", "apiVersion: v1\nclusters: [\n  - name: x\n");
    assert_eq!(
        the_one_line(run_operator(&path, "default", &dir)),
        format!(
            "loading the cluster configuration: kubeconfig {}: invalid YAML: \"-\" is only \
             valid inside a block at line 3, column 3",
            path.display()
        )
    );
}

#[test]
fn a_missing_context_names_the_contexts_there_are() {
    let dir = TempDir::new("bad-input");
    let path = dir.write("config", &plain_kubeconfig("http://127.0.0.1:1", "nowhere"));
    assert_eq!(
        the_one_line(run_operator(&path, "default", &dir)),
        format!(
            r#"loading the cluster configuration: kubeconfig {}: context "nowhere" not found (known: here)"#,
            path.display()
        )
    );
}

#[test]
fn an_unreachable_server_names_the_address_tried() {
    let dir = TempDir::new("bad-input");
    let port = closed_port();
    let path = dir.write(
        "config",
        &plain_kubeconfig(&format!("http://127.0.0.1:{port}"), "here"),
    );
    assert_eq!(
        the_one_line(run_operator(&path, "default", &dir)),
        format!(
            "listing memcacheds.cache.example.com: request to \
             http://127.0.0.1:{port}/apis/cache.example.com/v1alpha1/namespaces/default/memcacheds?limit=1 \
             failed: connection refused: nothing listens at 127.0.0.1:{port}; check that the API \
             server is running and that the configuration's server address is right"
        )
    );
}

#[test]
fn a_crd_not_installed_says_how_to_install_it() {
    // The shared cluster has the CRD (other tests install it), so a scripted server gives
    // the API server's answer for a group it does not serve.
    let server = support::scripted::Scripted::start(vec![
        b"HTTP/1.1 404 Not Found\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: 19\r\n\r\n404 page not found\n"
            .to_vec(),
    ]);
    let dir = TempDir::new("bad-input");
    let path = dir.write(
        "config",
        &plain_kubeconfig(&format!("http://{}", server.addr), "here"),
    );
    assert_eq!(
        the_one_line(run_operator(&path, "default", &dir)),
        "the Memcached CRD is not installed (the server does not serve \
         memcacheds.cache.example.com/v1alpha1): install it with `kubectl apply -k config/crd`"
    );
    assert!(
        server.requests()[0]
            .starts_with("GET /apis/cache.example.com/v1alpha1/namespaces/default/memcacheds?"),
        "{:?}",
        server.requests()
    );
}

// === against the cluster ===

#[test]
#[ignore = "needs cluster"]
fn a_server_certificate_from_another_ca_says_the_kubeconfig_ca_did_not_sign_it() {
    let dir = TempDir::new("bad-input");
    let other_ca = make_ca(dir.path(), "other-ca");
    let path = dir.write(
        "config",
        &testenv_kubeconfig_with(&[("certificate-authority-data", &base64_file(&other_ca))]),
    );
    let message = one_line_with(
        run_operator(&path, "default", &dir),
        "listing memcacheds.cache.example.com: request to https://",
        &[],
    );
    assert!(
        message.ends_with(
            "/apis/cache.example.com/v1alpha1/namespaces/default/memcacheds?limit=1 failed: \
             the server's certificate is not signed by the kubeconfig's certificate-authority: \
             set certificate-authority(-data) to the CA that issued the API server's certificate"
        ),
        "{message}"
    );
}

#[test]
#[ignore = "needs cluster"]
fn an_expired_client_certificate_is_named_as_expired() {
    // testenv signs client certificates with its CA, whose key is in its pki directory.
    let pki = cluster::testenv_dir().join("pki");
    let dir = TempDir::new("bad-input");
    let d = dir.path();
    openssl(
        d,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-subj",
            "/O=system:masters/CN=expired-admin",
            "-keyout",
            "client.key",
            "-out",
            "client.csr",
        ],
    );
    // `openssl ca` (unlike `x509` before 3.4) takes a start and end date in the past.
    std::fs::create_dir(d.join("issued")).unwrap();
    std::fs::write(d.join("index.txt"), "").unwrap();
    std::fs::write(d.join("serial"), "01\n").unwrap();
    std::fs::write(
        d.join("ca.cnf"),
        "[ca]\ndefault_ca = c\n[c]\ndatabase = index.txt\nnew_certs_dir = issued\n\
         serial = serial\ndefault_md = sha256\npolicy = p\nunique_subject = no\n\
         [p]\norganizationName = optional\ncommonName = supplied\n\
         [client]\nextendedKeyUsage = clientAuth\nkeyUsage = critical,digitalSignature\n\
         basicConstraints = CA:FALSE\n",
    )
    .unwrap();
    let (ca_crt, ca_key) = (pki.join("ca.crt"), pki.join("ca.key"));
    openssl(
        d,
        &[
            "ca",
            "-batch",
            "-config",
            "ca.cnf",
            "-cert",
            ca_crt.to_str().unwrap(),
            "-keyfile",
            ca_key.to_str().unwrap(),
            "-in",
            "client.csr",
            "-out",
            "client.crt",
            "-startdate",
            "20200101000000Z",
            "-enddate",
            "20200102000000Z",
            "-extensions",
            "client",
            "-notext",
        ],
    );
    let path = dir.write(
        "config",
        &testenv_kubeconfig_with(&[
            (
                "client-certificate-data",
                &base64_file(&d.join("client.crt")),
            ),
            ("client-key-data", &base64_file(&d.join("client.key"))),
        ]),
    );
    assert_eq!(
        the_one_line(run_operator(&path, "default", &dir)),
        "401 Unauthorized: the kubeconfig's client certificate has expired: issue a new one \
         from the cluster's client CA and set the user's client-certificate(-data) and \
         client-key(-data) to it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn a_user_without_rbac_rights_is_named_with_the_verb_resource_and_fix() {
    let client = cluster::client();
    memcached_operator::install_crd(&client, CONVERGE)
        .await
        .unwrap();
    let kubectl = Kubectl::from_env();
    let ns = Namespace::guard(&kubectl, create_namespace(&client, "bad-rbac").await);
    kubectl.run(&["-n", &ns.name, "create", "serviceaccount", "norights"]);
    let token = kubectl.run(&["-n", &ns.name, "create", "token", "norights"]);
    // The admin's certificate replaced by the ServiceAccount's token.
    let original = std::fs::read_to_string(cluster::kubeconfig()).unwrap();
    let (head, _) = original.split_once("users:").unwrap();
    let kubeconfig = format!(
        "{head}users:\n- name: admin\n  user:\n    token: {}\n",
        token.trim()
    );
    let dir = TempDir::new("bad-input");
    let path = dir.write("config", &kubeconfig);
    let (path, namespace) = (path.clone(), ns.name.clone());
    let outcome = tokio::task::spawn_blocking(move || run_operator(&path, &namespace, &dir))
        .await
        .unwrap();
    assert_eq!(
        the_one_line(outcome),
        format!(
            r#"403 Forbidden: memcacheds.cache.example.com is forbidden: User "system:serviceaccount:{ns}:norights" cannot list resource "memcacheds" in API group "cache.example.com" in the namespace "{ns}"; RBAC allows the user no such request: bind a Role or ClusterRole that grants it; for this operator, bind the ClusterRole in config/rbac/role.yaml (`kubectl apply -k config/rbac` does, for its ServiceAccount)"#,
            ns = ns.name
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn a_size_outside_the_schema_is_refused_by_kubectl_with_the_schema_message() {
    let client = cluster::client();
    memcached_operator::install_crd(&client, CONVERGE)
        .await
        .unwrap();
    let kubectl = Kubectl::from_env();
    let ns = Namespace::guard(&kubectl, create_namespace(&client, "bad-cr").await);
    let manifest = "apiVersion: cache.example.com/v1alpha1\nkind: Memcached\n\
                    metadata:\n  name: negative\nspec:\n  size: -1\n";
    let refused = kubectl
        .try_run(&["-n", &ns.name, "apply", "-f", "-"], Some(manifest))
        .unwrap_err();
    // The schema's bound, then the scale subresource's own check of the replicas it reads.
    assert!(
        refused.trim_end().ends_with(
            ": The Memcached \"negative\" is invalid: \n\
             * spec.size: Invalid value: -1: spec.size in body should be greater than or equal to 0\n\
             * .spec.size: Invalid value: -1: should be a non-negative integer"
        ),
        "{refused}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn a_webhook_that_is_down_is_named_by_the_api_server() {
    let client = cluster::client();
    memcached_operator::install_crd(&client, CONVERGE)
        .await
        .unwrap();
    let kubectl = Kubectl::from_env();
    let ns = Namespace::guard(&kubectl, create_namespace(&client, "bad-webhook").await);
    // Only this namespace is sent to the webhook, so other tests' creates are untouched.
    let value = unique("w");
    kubectl.run(&[
        "label",
        "namespace",
        &ns.name,
        &format!("bad-input-webhook={value}"),
    ]);
    let dir = TempDir::new("bad-input");
    let ca = make_ca(dir.path(), "ca");
    let port = closed_port();
    let name = unique("bad-input-webhook");
    let configuration = serde_json::json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{
            "name": "vmemcached.bad-input.example.com",
            "clientConfig": {
                "url": format!("https://127.0.0.1:{port}/validate"),
                "caBundle": base64_file(&ca),
            },
            "rules": [{
                "operations": ["CREATE"],
                "apiGroups": ["cache.example.com"],
                "apiVersions": ["v1alpha1"],
                "resources": ["memcacheds"],
            }],
            "namespaceSelector": {"matchLabels": {"bad-input-webhook": value}},
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 5,
        }],
    });
    let _cleanup = WebhookConfigurations {
        kubectl: &kubectl,
        name: name.clone(),
    };
    kubectl.apply(&configuration.to_string());
    let manifest = "apiVersion: cache.example.com/v1alpha1\nkind: Memcached\n\
                    metadata:\n  name: blocked\nspec:\n  size: 1\n";
    // The API server may take a moment to pick the configuration up: until it has, the
    // create goes through, so each try uses a new name.
    let refused = eventually("the webhook is called", CONVERGE, || {
        let manifest = manifest.replace("blocked", &unique("blocked"));
        match kubectl.try_run(&["-n", &ns.name, "create", "-f", "-"], Some(&manifest)) {
            Ok(out) => Err(format!("created: {out}")),
            Err(refused) => Ok(refused),
        }
    });
    assert!(
        refused.trim_end().ends_with(&format!(
            r#": Internal error occurred: failed calling webhook "vmemcached.bad-input.example.com": failed to call webhook: Post "https://127.0.0.1:{port}/validate?timeout=5s": dial tcp 127.0.0.1:{port}: connect: connection refused"#
        )),
        "{refused}"
    );
}

/// A kind whose CRD no test installs, for a controller on a cluster that does not serve it.
#[derive(
    controller_runtime::CustomResource,
    Clone,
    Debug,
    Default,
    serde::Deserialize,
    serde::Serialize,
    schemars::JsonSchema,
)]
#[resource(
    group = "absent.bad-input.example.com",
    version = "v1",
    kind = "Absent",
    namespaced
)]
struct AbsentSpec {
    /// Anything.
    size: i32,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn a_controller_for_a_kind_the_server_does_not_serve_stops_naming_the_crd() {
    use controller_runtime::runtime::{Action, CacheOptions, Controller, Manager, ManagerOptions};
    use std::sync::Arc;

    let client = cluster::client();
    let ns = create_namespace(&client, "bad-crd").await;
    let options = ManagerOptions {
        cache: CacheOptions {
            namespaces: vec![ns.clone()],
            sync_timeout: std::time::Duration::from_secs(5),
            ..CacheOptions::default()
        },
        metrics_bind_address: None,
        health_probe_bind_address: None,
        ..ManagerOptions::default()
    };
    let manager = Manager::with_config(cluster::config(), options).unwrap();
    Controller::<Absent>::new(&manager)
        .complete(
            |_: Arc<Absent>, _: Arc<()>| async { Ok(Action::done()) },
            Arc::new(()),
        )
        .unwrap();
    let (_stop, task) = support::run_manager(&manager);
    let message = task.await.unwrap().unwrap_err().to_string();
    for phrase in [
        "waiting for the cache of absents.absent.bad-input.example.com/v1",
        "404 NotFound",
        "the server does not serve this resource: for a custom resource, install its CustomResourceDefinition",
    ] {
        assert!(message.contains(phrase), "{phrase:?} is not in {message}");
    }
    cluster::delete_namespace(&client, &ns).await;
}
