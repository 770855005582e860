//! The admission webhook server over real TLS: on loopback (reviews answered, bad requests
//! refused, ALPN, the serving certificate reloaded as its files change and kept when the new
//! files are bad), and with the real API server calling it (`#[ignore = "needs cluster"]`):
//! defaults applied, bad objects refused with our message, updates, warnings, and requests
//! that keep succeeding through two certificate rotations.

mod support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use controller_runtime::client::{Api, Client, Patch, PatchParams, PostParams};
use controller_runtime::runtime::webhook::{
    AdmissionReview, Error, Operation, PatchOperation, WebhookOptions, WebhookServer,
};
use http_body_util::{BodyExt, Full};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use serde_json::{Value, json};
use support::certs::{TempDir, WebhookConfigurations, fixture, issue, make_ca};
use support::{CONVERGE, Kubectl, cluster, unique, wait_until};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_rustls::TlsConnector;

// === files ===

/// Writes `contents` to `dir/name` as a rotation does: to a temporary file, then renamed
/// over the old one.
fn replace_file(dir: &Path, name: &str, contents: &[u8]) {
    let staged = dir.join(format!(".{name}.new"));
    std::fs::write(&staged, contents).unwrap();
    std::fs::rename(&staged, dir.join(name)).unwrap();
}

/// Installs a certificate and key (PEM files) as `tls.crt` and `tls.key` in `cert_dir`,
/// certificate first.
fn install(cert_dir: &Path, cert: &Path, key: &Path) {
    replace_file(cert_dir, "tls.crt", &std::fs::read(cert).unwrap());
    replace_file(cert_dir, "tls.key", &std::fs::read(key).unwrap());
}

fn der(pem_file: &Path) -> Vec<u8> {
    CertificateDer::from_pem_file(pem_file).unwrap().to_vec()
}

// === TLS clients ===

/// Accepts any server certificate: for looking at what a server presents, not for trust.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A client that trusts any certificate, offering `alpn`.
fn looking_client(alpn: &[&[u8]]) -> ClientConfig {
    let provider = provider();
    let mut config = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    config
}

/// A client that trusts only the CA in `ca_pem`, offering HTTP/1.1.
fn verifying_client(ca_pem: &Path) -> ClientConfig {
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(ca_pem).unwrap())
        .unwrap();
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config
}

async fn connect(
    addr: SocketAddr,
    config: ClientConfig,
    name: &str,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from(name.to_owned()).unwrap(), tcp)
        .await
        .unwrap()
}

/// The leaf certificate `addr` presents to a new connection.
async fn served_leaf(addr: SocketAddr) -> Vec<u8> {
    let tls = connect(addr, looking_client(&[b"http/1.1"]), "127.0.0.1").await;
    tls.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

/// The protocol `addr` agrees to by ALPN when offered HTTP/2 and HTTP/1.1.
async fn agreed_protocol(addr: SocketAddr) -> Option<Vec<u8>> {
    let tls = connect(addr, looking_client(&[b"h2", b"http/1.1"]), "127.0.0.1").await;
    tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec)
}

/// One request over a new TLS connection: the status and body.
async fn send(
    addr: SocketAddr,
    config: ClientConfig,
    name: &str,
    request: http::Request<Full<Bytes>>,
) -> (u16, Bytes) {
    let tls = connect(addr, config, name).await;
    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
    let io = hyper_util::rt::TokioIo::new(tls);
    let response = if h2 {
        let (mut sender, conn) =
            hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io)
                .await
                .unwrap();
        tokio::spawn(conn);
        sender.send_request(request).await.unwrap()
    } else {
        let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
        tokio::spawn(conn);
        sender.send_request(request).await.unwrap()
    };
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, body)
}

fn post(path: &str, content_type: &str, body: Vec<u8>) -> http::Request<Full<Bytes>> {
    http::Request::post(path)
        .header("host", "webhook")
        .header("content-type", content_type)
        .body(Full::new(Bytes::from(body)))
        .unwrap()
}

/// A ConfigMap create, as the API server would send it.
fn review_body(data: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "uid-1",
            "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "name": "cm",
            "namespace": "ns",
            "operation": "CREATE",
            "userInfo": {"username": "admin"},
            "object": {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "cm", "namespace": "ns"},
                "data": data
            }
        }
    }))
    .unwrap()
}

// === the webhooks under test ===

/// Sets `data.defaulted` to `mark`.
fn defaulted(mark: &'static str) -> impl Fn(&mut ConfigMap) + Send + Sync + 'static {
    move |cm| {
        cm.data
            .get_or_insert_default()
            .insert("defaulted".into(), mark.into());
    }
}

const REGISTRY: &str = "registry.example.com/";

/// Refuses a ConfigMap whose `data.image` is not from [`REGISTRY`]; warns when it has no tag.
fn image_policy(
    cm: &ConfigMap,
    _old: Option<&ConfigMap>,
    op: Operation,
) -> Result<Vec<String>, String> {
    match cm.data.as_ref().and_then(|d| d.get("image")) {
        Some(image) if !image.starts_with(REGISTRY) => Err(format!(
            "{op}: image {image:?} is not from the allowed registry {REGISTRY}"
        )),
        Some(image) if !image.rsplit('/').next().unwrap_or("").contains(':') => {
            Ok(vec![format!("image {image:?} has no tag")])
        }
        _ => Ok(vec![]),
    }
}

/// A webhook server running on 127.0.0.1 until stopped.
struct Running {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl Running {
    async fn start(cert_dir: &Path, enable_http2: bool) -> Running {
        let server = WebhookServer::new(WebhookOptions {
            bind_address: "127.0.0.1:0".parse().unwrap(),
            cert_dir: cert_dir.to_owned(),
            enable_http2,
            ..WebhookOptions::default()
        })
        .defaulting::<ConfigMap>("/default-a", defaulted("a"))
        .defaulting::<ConfigMap>("/default-b", defaulted("b"))
        .validating::<ConfigMap>("/validate", image_policy);
        let bound = server.bind().await.unwrap();
        let addr = bound.local_addr();
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(bound.serve(async {
            let _ = stopped.await;
        }));
        Running {
            addr,
            stop: Some(stop),
            task,
        }
    }

    async fn stop(mut self) {
        self.stop.take().unwrap().send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("the server stops")
            .unwrap();
    }
}

// === loopback ===

#[tokio::test]
async fn serves_reviews_over_tls_and_reloads_a_rotated_certificate() {
    let tmp = TempDir::new("webhook-loopback");
    let certs = tmp.path();
    install(certs, &fixture("server.pem"), &fixture("server-key.pem"));
    let server = Running::start(certs, false).await;
    let addr = server.addr;
    let trusted = || verifying_client(&fixture("ca.pem"));

    // A review, over a connection verified against the CA.
    let (status, body) = send(
        addr,
        trusted(),
        "server.test",
        post(
            "/default-a",
            "application/json",
            review_body(json!({"x": "1"})),
        ),
    )
    .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let review: AdmissionReview = serde_json::from_slice(&body).unwrap();
    let response = review.response.unwrap();
    assert_eq!(response.uid, "uid-1");
    assert!(response.allowed);
    assert_eq!(
        response.patch_operations().unwrap(),
        [PatchOperation::Add {
            path: "/data/defaulted".into(),
            value: json!("a")
        }]
    );

    // A refusal.
    let (status, body) = send(
        addr,
        trusted(),
        "server.test",
        post(
            "/validate",
            "application/json",
            review_body(json!({"image": "evil.test/x:1"})),
        ),
    )
    .await;
    assert_eq!(status, 200);
    let response = serde_json::from_slice::<AdmissionReview>(&body)
        .unwrap()
        .response
        .unwrap();
    assert!(!response.allowed);
    assert_eq!(
        response.message(),
        Some(
            r#"CREATE: image "evil.test/x:1" is not from the allowed registry registry.example.com/"#
        )
    );

    // Requests that are not reviews.
    let (status, body) = send(
        addr,
        trusted(),
        "server.test",
        post("/validate", "application/json", b"{not json".to_vec()),
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        String::from_utf8_lossy(&body).starts_with("the request body is not an AdmissionReview"),
        "{}",
        String::from_utf8_lossy(&body)
    );
    let (status, _) = send(
        addr,
        trusted(),
        "server.test",
        post("/nowhere", "application/json", review_body(json!({}))),
    )
    .await;
    assert_eq!(status, 404);
    let get = http::Request::get("/validate")
        .header("host", "webhook")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let (status, _) = send(addr, trusted(), "server.test", get).await;
    assert_eq!(status, 405);

    // HTTP/1.1 only, unless HTTP/2 is enabled.
    assert_eq!(
        agreed_protocol(addr).await.as_deref(),
        Some(&b"http/1.1"[..])
    );

    // A half-written key, then a key for another certificate: the old pair stays.
    let original = der(&fixture("server.pem"));
    assert_eq!(served_leaf(addr).await, original);
    replace_file(certs, "tls.key", b"-----BEGIN PRIVATE KEY-----\nAAAA");
    assert_eq!(served_leaf(addr).await, original);
    install(
        certs,
        &fixture("server.pem"),
        &fixture("self-signed-key.pem"),
    );
    assert_eq!(served_leaf(addr).await, original);
    let (status, _) = send(
        addr,
        trusted(),
        "server.test",
        post("/default-a", "application/json", review_body(json!({}))),
    )
    .await;
    assert_eq!(status, 200, "the old pair still serves");

    // A good new pair is served from the next connection on.
    install(
        certs,
        &fixture("self-signed.pem"),
        &fixture("self-signed-key.pem"),
    );
    assert_eq!(served_leaf(addr).await, der(&fixture("self-signed.pem")));
    let (status, _) = send(
        addr,
        looking_client(&[b"http/1.1"]),
        "self-signed.test",
        post("/default-a", "application/json", review_body(json!({}))),
    )
    .await;
    assert_eq!(status, 200);

    server.stop().await;
}

#[tokio::test]
async fn serves_http2_when_enabled() {
    let tmp = TempDir::new("webhook-h2");
    install(
        tmp.path(),
        &fixture("server.pem"),
        &fixture("server-key.pem"),
    );
    let server = Running::start(tmp.path(), true).await;
    assert_eq!(
        agreed_protocol(server.addr).await.as_deref(),
        Some(&b"h2"[..])
    );
    let (status, body) = send(
        server.addr,
        looking_client(&[b"h2"]),
        "server.test",
        post("/default-b", "application/json", review_body(json!({}))),
    )
    .await;
    assert_eq!(status, 200);
    let response = serde_json::from_slice::<AdmissionReview>(&body)
        .unwrap()
        .response
        .unwrap();
    assert!(response.allowed);
    server.stop().await;
}

#[tokio::test]
async fn bind_fails_naming_a_missing_or_bad_certificate_file() {
    let tmp = TempDir::new("webhook-missing");
    let options = WebhookOptions {
        bind_address: "127.0.0.1:0".parse().unwrap(),
        cert_dir: tmp.path().to_owned(),
        ..WebhookOptions::default()
    };
    let err = WebhookServer::new(options.clone())
        .bind()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::ReadFile { .. }), "{err:?}");
    let crt = tmp.path().join("tls.crt");
    assert!(
        err.to_string()
            .starts_with(&format!("reading {}: ", crt.display())),
        "{err}"
    );

    std::fs::copy(fixture("server.pem"), &crt).unwrap();
    std::fs::write(tmp.path().join("tls.key"), "not a key").unwrap();
    let err = WebhookServer::new(options).bind().await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "{}: no private key in PEM",
            tmp.path().join("tls.key").display()
        )
    );
}

// === with the API server ===

/// A webhook entry for ConfigMap creates and updates in the namespaces labelled
/// `label=value`, failing closed.
fn webhook_entry(name: &str, url: String, ca_bundle: &[u8], label: &str, value: &str) -> Value {
    use base64::Engine;
    json!({
        "name": name,
        "clientConfig": {
            "url": url,
            "caBundle": base64::engine::general_purpose::STANDARD.encode(ca_bundle),
        },
        "rules": [{
            "operations": ["CREATE", "UPDATE"],
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["configmaps"],
            "scope": "Namespaced",
        }],
        "namespaceSelector": {"matchLabels": {label: value}},
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 10,
    })
}

fn configmap(name: &str, data: Value) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": data})).unwrap()
}

fn data<'c>(cm: &'c ConfigMap, key: &str) -> Option<&'c str> {
    cm.data.as_ref()?.get(key).map(String::as_str)
}

/// Creates ConfigMaps until the API server has picked up the mutating webhook at `mark`:
/// until one comes back with `data.defaulted == mark`.
async fn until_defaulted_with(configmaps: &Api<ConfigMap>, mark: &str) {
    let mut attempt = 0;
    wait_until(
        &format!("a ConfigMap defaulted with {mark:?}"),
        CONVERGE,
        async || {
            attempt += 1;
            let name = format!("probe-{mark}-{attempt}");
            let cm = configmaps
                .create(&PostParams::default(), &configmap(&name, json!({})))
                .await
                .map_err(|e| e.to_string())?;
            match data(&cm, "defaulted") {
                Some(m) if m == mark => Ok(()),
                other => Err(format!("{name} came back with defaulted = {other:?}")),
            }
        },
    )
    .await;
}

/// kubectl's stderr for `kubectl apply -f -` of `manifest` (warnings land there).
async fn kubectl_apply_stderr(manifest: String) -> String {
    tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let dir = cluster::testenv_dir();
        let bin = std::env::var_os("TESTENV_KUBECTL")
            .map(PathBuf::from)
            .unwrap_or_else(|| dir.join("bin/kubectl"));
        let mut child = Command::new(bin)
            .arg("--kubeconfig")
            .arg(cluster::kubeconfig())
            .args(["apply", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(manifest.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "kubectl apply: {stderr}");
        stderr
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs cluster"]
async fn the_api_server_calls_our_webhooks_through_certificate_rotations() {
    let kubectl = Kubectl::from_env();
    let client: Client = cluster::client();
    let ns = cluster::create_namespace(&client, "webhook").await;
    let _namespace = support::Namespace::guard(&kubectl, ns.clone());
    let (label, scope) = ("webhook-test.example.com/scope", unique("scope"));
    Api::<Namespace>::cluster(client.clone())
        .patch(
            &ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {label: &scope}}})),
        )
        .await
        .unwrap();

    // Two CAs, and a first serving certificate from the first.
    let tmp = TempDir::new("webhook-cluster");
    let pki = tmp.path().join("pki");
    let certs = tmp.path().join("certs");
    std::fs::create_dir_all(&pki).unwrap();
    std::fs::create_dir_all(&certs).unwrap();
    let ca1 = make_ca(&pki, "ca1");
    let ca2 = make_ca(&pki, "ca2");
    let (crt1, key1) = issue(&pki, "ca1", "leaf1");
    install(&certs, &crt1, &key1);

    let server = Running::start(&certs, false).await;
    let base = format!("https://127.0.0.1:{}", server.addr.port());

    // The configurations: mutating trusts CA 1 only; validating trusts both CAs.
    let name = unique("webhook-test");
    let _configurations = WebhookConfigurations {
        kubectl: &kubectl,
        name: name.clone(),
    };
    let ca1_pem = std::fs::read(&ca1).unwrap();
    let both_pem = [ca1_pem.clone(), std::fs::read(&ca2).unwrap()].concat();
    let mutating: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": &name},
        "webhooks": [webhook_entry(
            "default.webhook-test.example.com",
            format!("{base}/default-a"),
            &ca1_pem,
            label,
            &scope,
        )],
    }))
    .unwrap();
    let validating: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": &name},
        "webhooks": [webhook_entry(
            "validate.webhook-test.example.com",
            format!("{base}/validate"),
            &both_pem,
            label,
            &scope,
        )],
    }))
    .unwrap();
    let mutating_api = Api::<MutatingWebhookConfiguration>::cluster(client.clone());
    mutating_api
        .create(&PostParams::default(), &mutating)
        .await
        .unwrap();
    Api::<ValidatingWebhookConfiguration>::cluster(client.clone())
        .create(&PostParams::default(), &validating)
        .await
        .unwrap();

    let configmaps = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    until_defaulted_with(&configmaps, "a").await;
    let refused = |image: &'static str| {
        let configmaps = configmaps.clone();
        async move {
            let bad = configmap(&unique("bad"), json!({ "image": image }));
            configmaps.create(&PostParams::default(), &bad).await
        }
    };
    wait_until(
        "the validating webhook refuses",
        CONVERGE,
        async || match refused("evil.example.com/memcached:1.6").await {
            Err(e) if e.code() == Some(403) => Ok(()),
            other => Err(format!("{other:?}")),
        },
    )
    .await;

    // Create: the default is applied by the API server.
    let good = configmaps
        .create(
            &PostParams::default(),
            &configmap(
                "good",
                json!({"image": "registry.example.com/memcached:1.6"}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(data(&good, "defaulted"), Some("a"));
    assert_eq!(
        data(&good, "image"),
        Some("registry.example.com/memcached:1.6")
    );
    let stored = configmaps.get("good").await.unwrap();
    assert_eq!(
        data(&stored, "defaulted"),
        Some("a"),
        "the default is stored"
    );

    // Create: a bad image is refused with our message.
    let err = refused("evil.example.com/memcached:1.6").await.unwrap_err();
    assert_eq!(err.code(), Some(403), "{err}");
    let message = err.status().and_then(|s| s.message.clone()).unwrap();
    assert_eq!(
        message,
        r#"admission webhook "validate.webhook-test.example.com" denied the request: CREATE: image "evil.example.com/memcached:1.6" is not from the allowed registry registry.example.com/"#
    );

    // Update: the default comes back when removed; the old object reaches the validator.
    let mut update = stored.clone();
    let d = update.data.as_mut().unwrap();
    d.remove("defaulted");
    d.insert("image".into(), "registry.example.com/memcached:1.7".into());
    let updated = configmaps
        .replace("good", &PostParams::default(), &update)
        .await
        .unwrap();
    assert_eq!(data(&updated, "defaulted"), Some("a"));
    assert_eq!(
        data(&updated, "image"),
        Some("registry.example.com/memcached:1.7")
    );
    let mut bad_update = updated.clone();
    bad_update
        .data
        .as_mut()
        .unwrap()
        .insert("image".into(), "evil.example.com/memcached:1.7".into());
    let err = configmaps
        .replace("good", &PostParams::default(), &bad_update)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(403), "{err}");
    assert!(
        err.to_string()
            .contains("denied the request: UPDATE: image"),
        "{err}"
    );
    assert_eq!(
        data(&configmaps.get("good").await.unwrap(), "image"),
        Some("registry.example.com/memcached:1.7"),
        "the refused update left the object as it was"
    );

    // Warnings reach the client.
    let stderr = kubectl_apply_stderr(format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: untagged\n  namespace: {ns}\ndata:\n  image: registry.example.com/memcached\n"
    ))
    .await;
    assert!(
        stderr.contains(r#"Warning: image "registry.example.com/memcached" has no tag"#),
        "{stderr}"
    );

    // Rotation within the same CA: the server presents the new certificate, and the API
    // server's requests keep succeeding.
    let (crt2, key2) = issue(&pki, "ca1", "leaf2");
    assert_eq!(served_leaf(server.addr).await, der(&crt1));
    install(&certs, &crt2, &key2);
    assert_eq!(served_leaf(server.addr).await, der(&crt2));
    assert_ne!(der(&crt1), der(&crt2));
    let after = configmaps
        .create(
            &PostParams::default(),
            &configmap("after-rotation", json!({})),
        )
        .await
        .unwrap();
    assert_eq!(data(&after, "defaulted"), Some("a"));
    let err = refused("evil.example.com/x:1").await.unwrap_err();
    assert_eq!(err.code(), Some(403), "{err}");

    // Rotation to a certificate from another CA, with the mutating webhook now trusting only
    // that CA (and pointed at another path, so we can tell when the API server uses the new
    // configuration): a ConfigMap defaulted with "b" proves the API server made a new
    // connection and accepted the certificate read from the rotated files.
    let (crt3, key3) = issue(&pki, "ca2", "leaf3");
    install(&certs, &crt3, &key3);
    assert_eq!(served_leaf(server.addr).await, der(&crt3));
    let mut current = mutating_api.get(&name).await.unwrap();
    let entry = &mut current.webhooks.as_mut().unwrap()[0];
    entry.client_config.url = Some(format!("{base}/default-b"));
    entry.client_config.ca_bundle = Some(k8s_openapi::ByteString(std::fs::read(&ca2).unwrap()));
    mutating_api
        .replace(&name, &PostParams::default(), &current)
        .await
        .unwrap();
    until_defaulted_with(&configmaps, "b").await;
    let err = refused("evil.example.com/x:2").await.unwrap_err();
    assert_eq!(err.code(), Some(403), "{err}");

    server.stop().await;
}
