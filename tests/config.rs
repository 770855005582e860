//! Scripted configuration tests: kubeconfig fixtures in testdata/kubeconfig, the test-only exec
//! plugin testdata/exec-plugin.sh, and in-cluster loading from a scratch directory. No cluster.

mod support;

use std::path::{Path, PathBuf};

use controller_runtime::config::{
    Auth, Config, Credentials, Error, ExecConfig, InteractiveMode, Kubeconfig, KubeconfigOptions,
    Secret,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use support::certs::TempDir;

// === helpers ===

fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata")
}

/// A fixture under testdata/kubeconfig.
fn fixture(name: &str) -> PathBuf {
    testdata().join("kubeconfig").join(name)
}

fn load(name: &str, context: Option<&str>) -> Result<Config, Error> {
    Config::from_kubeconfig(&KubeconfigOptions {
        path: Some(fixture(name)),
        context: context.map(str::to_owned),
        ..KubeconfigOptions::default()
    })
}

fn load_error(name: &str, context: Option<&str>) -> String {
    load(name, context).unwrap_err().to_string()
}

fn pem_certs(name: &str) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_file_iter(fixture(name))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// The test-only plugin, counting its runs in `scratch`, with extra environment `env`.
fn plugin(scratch: &TempDir, env: &[(&str, &str)]) -> ExecConfig {
    let mut all = vec![(
        "EXEC_PLUGIN_COUNTER".to_owned(),
        scratch.join("runs").display().to_string(),
    )];
    all.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    ExecConfig {
        api_version: "client.authentication.k8s.io/v1".to_owned(),
        command: testdata().join("exec-plugin.sh"),
        args: vec![],
        env: all,
        install_hint: None,
        provide_cluster_info: false,
        interactive_mode: InteractiveMode::Never,
        cluster: None,
    }
}

/// How many times the plugin ran.
fn runs(scratch: &TempDir) -> usize {
    std::fs::read_to_string(scratch.join("runs"))
        .map(|text| text.lines().count())
        .unwrap_or(0)
}

async fn header(credentials: &Credentials) -> String {
    let value = credentials.authorization().await.unwrap().unwrap();
    assert!(value.is_sensitive());
    value.to_str().unwrap().to_owned()
}

// === kubeconfig: merging and contexts ===

#[test]
fn merged_kubeconfigs_keep_first_definitions_and_add_the_rest() {
    let missing = fixture("no-such-kubeconfig.yaml");
    let kubeconfig =
        Kubeconfig::read_merged([fixture("first.yaml"), missing, fixture("second.yaml")]).unwrap();

    assert_eq!(kubeconfig.current_context.as_deref(), Some("alpha"));
    assert_eq!(
        kubeconfig.files,
        [fixture("first.yaml"), fixture("second.yaml")]
    );
    let names = |names: Vec<&String>| names.into_iter().cloned().collect::<Vec<_>>();
    assert_eq!(
        names(kubeconfig.clusters.iter().map(|c| &c.name).collect()),
        ["alpha", "shared", "beta"]
    );
    assert_eq!(
        names(kubeconfig.contexts.iter().map(|c| &c.name).collect()),
        ["alpha", "shared", "beta"]
    );
    assert_eq!(
        names(kubeconfig.users.iter().map(|u| &u.name).collect()),
        ["alice", "bob"]
    );

    // "shared" is defined in both: first.yaml's context, cluster and user win.
    let shared = Config::resolve(
        &kubeconfig,
        &KubeconfigOptions {
            context: Some("shared".into()),
            ..KubeconfigOptions::default()
        },
    )
    .unwrap();
    assert_eq!(shared.cluster_url, "https://first.example:6443/");
    assert!(matches!(&shared.auth, Auth::Bearer(t) if t.expose() == "fake-token-alice-first"));
    assert_eq!(
        shared.source,
        format!(
            "kubeconfig {} (context shared)",
            fixture("first.yaml").display()
        )
    );

    // "beta" exists only in second.yaml, and its relative paths resolve against second.yaml.
    let beta = Config::resolve(
        &kubeconfig,
        &KubeconfigOptions {
            context: Some("beta".into()),
            ..KubeconfigOptions::default()
        },
    )
    .unwrap();
    assert_eq!(beta.cluster_url, "https://beta.example:6443/prefix");
    assert_eq!(beta.default_namespace, "team-b");
    assert!(beta.accept_invalid_certs);
    assert_eq!(beta.tls_server_name.as_deref(), Some("beta.internal"));
    assert_eq!(
        beta.identity.unwrap().cert_chain,
        pem_certs("test-only-client.pem")
    );
    assert!(matches!(beta.auth, Auth::None));
}

#[test]
fn current_context_and_its_namespace_are_used_by_default() {
    let config = load("first.yaml", None).unwrap();
    assert_eq!(config.cluster_url, "https://alpha.example:6443/");
    assert_eq!(config.default_namespace, "team-a");
    assert_eq!(config.root_certs, pem_certs("test-only-ca.pem"));
    assert!(!config.accept_invalid_certs);
    assert!(config.identity.is_none());
    assert!(matches!(&config.auth, Auth::Bearer(t) if t.expose() == "fake-token-alice-first"));
    assert_eq!(
        config.source,
        format!(
            "kubeconfig {} (context alpha)",
            fixture("first.yaml").display()
        )
    );
}

#[test]
fn context_chosen_by_name_overrides_current_context() {
    let config = load("first.yaml", Some("shared")).unwrap();
    assert_eq!(config.cluster_url, "https://first.example:6443/");
    assert_eq!(config.default_namespace, "default");
    assert!(config.root_certs.is_empty());
}

#[test]
fn missing_context_lists_the_known_ones() {
    assert_eq!(
        load_error("first.yaml", Some("nope")),
        format!(
            r#"kubeconfig {}: context "nope" not found (known: alpha, shared)"#,
            fixture("first.yaml").display()
        )
    );
}

// === kubeconfig: certificates and keys ===

#[test]
fn data_and_file_forms_give_identical_certificates() {
    let files = load("files.yaml", None).unwrap();
    let data = load("data.yaml", None).unwrap();

    assert_eq!(files.root_certs, pem_certs("test-only-ca.pem"));
    assert_eq!(data.root_certs, files.root_certs);

    let (files, data) = (files.identity.unwrap(), data.identity.unwrap());
    assert_eq!(files.cert_chain, pem_certs("test-only-client.pem"));
    assert_eq!(data.cert_chain, files.cert_chain);
    let key = PrivateKeyDer::from_pem_file(fixture("test-only-client-key.pem")).unwrap();
    assert_eq!(files.key.secret_der(), key.secret_der());
    assert_eq!(data.key.secret_der(), key.secret_der());
}

#[test]
fn relative_paths_resolve_against_the_kubeconfig_directory() {
    let config = load("nested/relative.yaml", None).unwrap();
    assert_eq!(config.root_certs, pem_certs("test-only-ca.pem"));
    let identity = config.identity.unwrap();
    assert_eq!(identity.cert_chain, pem_certs("test-only-client.pem"));
}

#[test]
fn bad_base64_names_file_and_field() {
    assert_eq!(
        load_error("bad-base64.yaml", None),
        format!(
            "kubeconfig {}: users[admin].client-certificate-data: invalid base64: \
             Invalid symbol 42, offset 3.",
            fixture("bad-base64.yaml").display()
        )
    );
}

#[test]
fn missing_referenced_file_names_field_and_path() {
    assert_eq!(
        load_error("missing-file.yaml", None),
        format!(
            "kubeconfig {}: clusters[dev].certificate-authority {}: no such file",
            fixture("missing-file.yaml").display(),
            fixture("no-such-ca.pem").display()
        )
    );
}

#[test]
fn missing_kubeconfig_file_is_named() {
    let error = load("no-such-kubeconfig.yaml", None).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "kubeconfig {}: no such file",
            fixture("no-such-kubeconfig.yaml").display()
        )
    );
    assert!(matches!(error, Error::ReadFile { .. }));
}

#[test]
fn bad_pem_names_field_and_problem() {
    let file = fixture("bad-pem.yaml").display().to_string();
    assert_eq!(
        load_error("bad-pem.yaml", Some("no-key")),
        format!("kubeconfig {file}: users[no-key].client-key-data: no private key in PEM")
    );
    assert_eq!(
        load_error("bad-pem.yaml", Some("no-cert")),
        format!("kubeconfig {file}: users[no-cert].client-certificate-data: no certificate in PEM")
    );
    assert_eq!(
        load_error("bad-pem.yaml", Some("truncated-ca")),
        format!(
            "kubeconfig {file}: clusters[truncated-ca].certificate-authority-data: invalid PEM: \
             no END line for the CERTIFICATE section"
        )
    );
}

#[test]
fn bad_yaml_names_the_file() {
    assert_eq!(
        load_error("bad-yaml.yaml", None),
        format!(
            "kubeconfig {}: invalid YAML: unclosed bracket '{{' at line 3, column 12",
            fixture("bad-yaml.yaml").display()
        )
    );
}

// === exec credential plugins ===

#[tokio::test]
async fn exec_plugin_from_kubeconfig_runs_relative_command_with_cluster_info() {
    let scratch = TempDir::new("cr-config-test");
    let config = load("exec.yaml", None).unwrap();
    let Auth::Exec(mut exec) = config.auth else {
        panic!("expected exec auth, got {:?}", config.auth);
    };
    assert_eq!(exec.command, fixture("../exec-plugin.sh"));
    let request = scratch.join("request.json");
    exec.env
        .push(("EXEC_PLUGIN_REQUEST".into(), request.display().to_string()));

    let credentials = Credentials::new(Auth::Exec(exec));
    assert_eq!(header(&credentials).await, "Bearer fake-token-from-exec");

    let request: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(request).unwrap()).unwrap();
    assert_eq!(
        request,
        serde_json::json!({
            "apiVersion": "client.authentication.k8s.io/v1",
            "kind": "ExecCredential",
            "spec": {
                "interactive": false,
                "cluster": {
                    "server": "https://127.0.0.1:6443",
                    "tls-server-name": "kubernetes.test",
                    "config": {"audience": "test-only"},
                },
            },
        })
    );
}

#[tokio::test]
async fn exec_token_is_cached_until_invalidated_when_far_from_expiry() {
    let scratch = TempDir::new("cr-config-test");
    let credentials = Credentials::new(Auth::Exec(plugin(
        &scratch,
        &[
            ("EXEC_PLUGIN_TOKEN", "fake-cached"),
            ("EXEC_PLUGIN_EXPIRY", "2999-01-01T00:00:00Z"),
        ],
    )));
    for _ in 0..3 {
        assert_eq!(header(&credentials).await, "Bearer fake-cached");
    }
    assert_eq!(runs(&scratch), 1);

    credentials.invalidate();
    assert_eq!(header(&credentials).await, "Bearer fake-cached");
    assert_eq!(runs(&scratch), 2);
}

#[tokio::test]
async fn exec_token_without_expiry_is_cached() {
    let scratch = TempDir::new("cr-config-test");
    let credentials = Credentials::new(Auth::Exec(plugin(
        &scratch,
        &[("EXEC_PLUGIN_TOKEN", "fake-forever")],
    )));
    header(&credentials).await;
    header(&credentials).await;
    assert_eq!(runs(&scratch), 1);
}

#[tokio::test]
async fn expired_exec_token_runs_the_plugin_again() {
    let scratch = TempDir::new("cr-config-test");
    let credentials = Credentials::new(Auth::Exec(plugin(
        &scratch,
        &[
            ("EXEC_PLUGIN_TOKEN", "fake-expired"),
            ("EXEC_PLUGIN_EXPIRY", "2000-01-01T00:00:00Z"),
        ],
    )));
    for expected_runs in 1..=3 {
        assert_eq!(header(&credentials).await, "Bearer fake-expired");
        assert_eq!(runs(&scratch), expected_runs);
    }
}

#[tokio::test]
async fn concurrent_callers_share_one_plugin_run() {
    let scratch = TempDir::new("cr-config-test");
    // Expired on arrival, so only sharing (not caching) can keep this to one run.
    let credentials = Credentials::new(Auth::Exec(plugin(
        &scratch,
        &[
            ("EXEC_PLUGIN_TOKEN", "fake-shared"),
            ("EXEC_PLUGIN_EXPIRY", "2000-01-01T00:00:00Z"),
        ],
    )));
    let clone = credentials.clone();
    let (a, b, c, d) = tokio::join!(
        credentials.authorization(),
        credentials.authorization(),
        credentials.authorization(),
        clone.authorization(),
    );
    for value in [a, b, c, d] {
        assert_eq!(value.unwrap().unwrap(), "Bearer fake-shared");
    }
    assert_eq!(runs(&scratch), 1);
}

#[tokio::test]
async fn exec_token_file_change_is_picked_up_after_invalidate() {
    let scratch = TempDir::new("cr-config-test");
    let token = scratch.write("token", "fake-one\n");
    let credentials = Credentials::new(Auth::Exec(plugin(
        &scratch,
        &[("EXEC_PLUGIN_TOKEN_FILE", &token.display().to_string())],
    )));
    assert_eq!(header(&credentials).await, "Bearer fake-one");
    std::fs::write(&token, "fake-two\n").unwrap();
    assert_eq!(header(&credentials).await, "Bearer fake-one");
    credentials.invalidate();
    assert_eq!(header(&credentials).await, "Bearer fake-two");
}

#[tokio::test]
async fn failing_plugin_reports_command_status_and_stderr() {
    let scratch = TempDir::new("cr-config-test");
    let exec = plugin(&scratch, &[("EXEC_PLUGIN_FAIL", "  login expired  ")]);
    let command = exec.command.display().to_string();
    let credentials = Credentials::new(Auth::Exec(exec));
    let error = credentials.authorization().await.unwrap_err();
    assert_eq!(
        error.to_string(),
        format!("exec plugin {command} failed (exit status: 3): login expired")
    );
}

#[tokio::test]
async fn plugin_output_that_is_not_a_credential_is_named() {
    let scratch = TempDir::new("cr-config-test");
    let exec = plugin(&scratch, &[("EXEC_PLUGIN_OUTPUT", "Please log in")]);
    let command = exec.command.display().to_string();
    let error = Credentials::new(Auth::Exec(exec))
        .authorization()
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "exec plugin {command}: output is not an ExecCredential: \
             expected value at line 1 column 1"
        )
    );
}

#[tokio::test]
async fn missing_plugin_shows_the_install_hint() {
    let scratch = TempDir::new("cr-config-test");
    let mut exec = plugin(&scratch, &[]);
    exec.command = scratch.join("kubectl-login");
    exec.install_hint = Some("install kubectl-login from the test-only shelf".into());
    let error = Credentials::new(Auth::Exec(exec))
        .authorization()
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "exec plugin {}: command not found; install kubectl-login from the test-only shelf",
            scratch.join("kubectl-login").display()
        )
    );
}

// === token files ===

#[tokio::test(start_paused = true)]
async fn token_file_is_reread_after_invalidate() {
    let scratch = TempDir::new("cr-config-test");
    let token = scratch.write("token", "fake-first\n");
    let credentials = Credentials::new(Auth::TokenFile(token.clone()));
    assert_eq!(header(&credentials).await, "Bearer fake-first");

    // The clock is paused, so no minute passes: the cached token is still used.
    std::fs::write(&token, "fake-second").unwrap();
    assert_eq!(header(&credentials).await, "Bearer fake-first");

    credentials.invalidate();
    assert_eq!(header(&credentials).await, "Bearer fake-second");
}

#[tokio::test]
async fn basic_auth_from_kubeconfig_sends_base64_user_and_password() {
    let config = load("secrets.yaml", None).unwrap();
    let credentials = Credentials::new(config.auth);
    // base64("fake-user:fake-password-123")
    assert_eq!(
        header(&credentials).await,
        "Basic ZmFrZS11c2VyOmZha2UtcGFzc3dvcmQtMTIz"
    );
}

// === secrets stay secret ===

#[test]
fn debug_output_never_shows_secrets() {
    let key_pem = std::fs::read_to_string(fixture("test-only-client-key.pem")).unwrap();
    let key_line = key_pem.lines().nth(1).unwrap().to_owned();
    let key = PrivateKeyDer::from_pem_file(fixture("test-only-client-key.pem")).unwrap();
    let key_bytes = format!("{:?}", &key.secret_der()[..8]);
    let key_bytes = key_bytes.trim_end_matches(']');

    let basic = load("secrets.yaml", None).unwrap();
    let token = load("secrets.yaml", Some("token")).unwrap();
    let data = load("data.yaml", None).unwrap();
    let kubeconfig = Kubeconfig::read(fixture("secrets.yaml")).unwrap();
    let data_kubeconfig = Kubeconfig::read(fixture("data.yaml")).unwrap();
    let exec = load("exec.yaml", None).unwrap();
    let text = format!(
        "{basic:?}\n{token:?}\n{data:?}\n{kubeconfig:?}\n{data_kubeconfig:?}\n{exec:?}\n{:?}\n{:?}\n{:?}",
        Credentials::new(basic.auth.clone()),
        Credentials::new(token.auth.clone()),
        Secret::new("fake-token-456"),
    );

    for secret in [
        "fake-password-123",
        "fake-token-456",
        "fake-token-from-exec",
        key_line.as_str(),
        key_bytes,
    ] {
        assert!(!text.contains(secret), "{secret:?} appears in:\n{text}");
    }
    // Names that are not secret stay visible, so Debug is still useful.
    assert!(text.contains("fake-user"));
    assert!(text.contains("EXEC_PLUGIN_TOKEN=***"));
}

// === in-cluster ===

fn service_account(scratch: &TempDir, namespace: Option<&str>) {
    scratch.write("token", "fake-sa-token\n");
    std::fs::copy(fixture("test-only-ca.pem"), scratch.join("ca.crt")).unwrap();
    if let Some(namespace) = namespace {
        scratch.write("namespace", namespace);
    }
}

#[test]
fn in_cluster_reads_the_service_account_directory() {
    let scratch = TempDir::new("cr-config-test");
    service_account(&scratch, Some("operators\n"));
    let config = Config::incluster_from(scratch.path(), "10.96.0.1", "443").unwrap();
    assert_eq!(config.cluster_url, "https://10.96.0.1:443/");
    assert_eq!(config.default_namespace, "operators");
    assert_eq!(config.root_certs, pem_certs("test-only-ca.pem"));
    assert!(config.identity.is_none());
    assert!(matches!(&config.auth, Auth::TokenFile(path) if *path == scratch.join("token")));
    assert_eq!(config.source, "in-cluster");
}

#[test]
fn in_cluster_brackets_ipv6_and_defaults_the_namespace() {
    let scratch = TempDir::new("cr-config-test");
    service_account(&scratch, None);
    let config = Config::incluster_from(scratch.path(), "fd00::1", "6443").unwrap();
    assert_eq!(config.cluster_url, "https://[fd00::1]:6443/");
    assert_eq!(config.default_namespace, "default");
}

#[tokio::test(start_paused = true)]
async fn in_cluster_token_rotation_is_seen_after_invalidate() {
    let scratch = TempDir::new("cr-config-test");
    service_account(&scratch, None);
    let config = Config::incluster_from(scratch.path(), "10.96.0.1", "443").unwrap();
    let credentials = Credentials::new(config.auth);
    assert_eq!(header(&credentials).await, "Bearer fake-sa-token");
    scratch.write("token", "fake-sa-token-rotated");
    credentials.invalidate();
    assert_eq!(header(&credentials).await, "Bearer fake-sa-token-rotated");
}

#[test]
fn in_cluster_without_token_or_ca_says_which_file() {
    let scratch = TempDir::new("cr-config-test");
    let error = Config::incluster_from(scratch.path(), "10.96.0.1", "443").unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "in-cluster {}: no such file",
            scratch.join("token").display()
        )
    );

    scratch.write("token", "fake-sa-token");
    let error = Config::incluster_from(scratch.path(), "10.96.0.1", "443").unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "in-cluster {}: no such file",
            scratch.join("ca.crt").display()
        )
    );

    scratch.write("ca.crt", "not a certificate");
    let error = Config::incluster_from(scratch.path(), "10.96.0.1", "443").unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "in-cluster: {}: no certificate in PEM",
            scratch.join("ca.crt").display()
        )
    );
}
