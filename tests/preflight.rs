//! The manager's preflight against a scripted server: which requests it makes (each cached
//! kind once, custom resources first, one object, in each cached namespace, with the kind's
//! selector) and the one line each exact answer becomes. The same lines from the operator's
//! binary against the real cluster are in cmd/memcached-operator/tests/bad_input.rs.

mod support;

use std::time::{Duration, SystemTime};

use controller_runtime::CustomResource;
use controller_runtime::client::{ClientOptions, Selector};
use controller_runtime::config::{Auth, Config, Identity, Secret};
use controller_runtime::runtime::{
    CacheOptions, CachedInformer, Manager, ManagerOptions, PreflightError,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use support::scripted::Scripted;

/// A custom kind, registered after the built-in ones.
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[resource(
    group = "things.example.com",
    version = "v1",
    kind = "Thing",
    namespaced
)]
struct ThingSpec {
    /// Anything.
    size: i32,
}

fn json_response(code: u16, reason: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {code} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn empty_list() -> Vec<u8> {
    json_response(
        200,
        "OK",
        r#"{"kind":"List","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[]}"#,
    )
}

fn status(code: u16, reason: &str, message: &str) -> Vec<u8> {
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": message, "reason": reason, "code": code,
    });
    json_response(code, reason, &body.to_string())
}

/// A configuration for the scripted server, with `identity` as its client certificate.
fn config(server: &Scripted, identity: Option<Identity>) -> Config {
    Config {
        cluster_url: format!("http://{}", server.addr).parse().unwrap(),
        default_namespace: "default".into(),
        root_certs: Vec::new(),
        accept_invalid_certs: false,
        tls_server_name: None,
        identity,
        auth: Auth::Bearer(Secret::new("t0ken")),
        source: "scripted test".into(),
    }
}

/// A manager over `config` caching, in `namespaces`, Deployments, Pods labelled `app=web`,
/// Namespaces and Things, registered in that order.
fn manager(config: Config, namespaces: &[&str]) -> Manager {
    let options = ManagerOptions {
        cache: CacheOptions {
            namespaces: namespaces.iter().map(|ns| (*ns).to_owned()).collect(),
            ..CacheOptions::default()
        }
        .select::<Pod>(Selector::default().labels("app=web")),
        client: ClientOptions {
            user_agent: "test-agent/1".into(),
            ..ClientOptions::default()
        },
        ..ManagerOptions::default()
    };
    let manager = Manager::with_config(config, options).unwrap();
    manager.store::<Deployment>().unwrap();
    manager.store::<Pod>().unwrap();
    manager.store::<Namespace>().unwrap();
    manager.store::<Thing>().unwrap();
    manager
}

/// The request lines the server received.
fn request_lines(server: &Scripted) -> Vec<String> {
    let requests = server.requests();
    requests
        .iter()
        .map(|r| r.lines().next().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn each_cached_kind_is_listed_once_per_namespace_custom_resources_first() {
    let server = Scripted::start(vec![empty_list(); 7]);
    let manager = manager(config(&server, None), &["ns1", "ns2"]);
    let informers = manager.cache().informers();
    assert_eq!(informers.len(), 7, "{informers:#?}");
    assert!(informers.contains(&CachedInformer {
        resource: controller_runtime::client::ApiResource::of::<Pod>(),
        namespace: Some("ns2".into()),
        selector: Selector::default().labels("app=web"),
    }));

    manager.preflight().await.unwrap();
    assert_eq!(
        request_lines(&server),
        [
            "GET /apis/things.example.com/v1/namespaces/ns1/things?limit=1 HTTP/1.1",
            "GET /apis/things.example.com/v1/namespaces/ns2/things?limit=1 HTTP/1.1",
            "GET /apis/apps/v1/namespaces/ns1/deployments?limit=1 HTTP/1.1",
            "GET /apis/apps/v1/namespaces/ns2/deployments?limit=1 HTTP/1.1",
            "GET /api/v1/namespaces/ns1/pods?labelSelector=app%3Dweb&limit=1 HTTP/1.1",
            "GET /api/v1/namespaces/ns2/pods?labelSelector=app%3Dweb&limit=1 HTTP/1.1",
            "GET /api/v1/namespaces?limit=1 HTTP/1.1",
        ]
    );
}

#[tokio::test]
async fn without_namespaces_each_kind_is_listed_once_across_all() {
    let server = Scripted::start(vec![empty_list(); 4]);
    manager(config(&server, None), &[])
        .preflight()
        .await
        .unwrap();
    assert_eq!(
        request_lines(&server),
        [
            "GET /apis/things.example.com/v1/things?limit=1 HTTP/1.1",
            "GET /apis/apps/v1/deployments?limit=1 HTTP/1.1",
            "GET /api/v1/pods?labelSelector=app%3Dweb&limit=1 HTTP/1.1",
            "GET /api/v1/namespaces?limit=1 HTTP/1.1",
        ]
    );
}

#[tokio::test]
async fn a_custom_resource_the_server_does_not_serve_names_the_crd_to_install() {
    let server = Scripted::start(vec![
        b"HTTP/1.1 404 Not Found\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: 19\r\n\r\n404 page not found\n"
            .to_vec(),
    ]);
    let err = manager(config(&server, None), &[])
        .preflight()
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "the Thing CRD is not installed (the server does not serve \
         things.things.example.com/v1): install it with `kubectl apply -k config/crd`"
    );
    assert_eq!(server.requests().len(), 1, "stops at the first failure");
}

#[tokio::test]
async fn a_403_keeps_the_servers_words_and_names_the_rbac_role() {
    let forbidden = r#"deployments.apps is forbidden: User "u" cannot list resource "deployments" in API group "apps" at the cluster scope"#;
    let server = Scripted::start(vec![empty_list(), status(403, "Forbidden", forbidden)]);
    let err = manager(config(&server, None), &[])
        .preflight()
        .await
        .unwrap_err();
    assert!(
        matches!(&err, PreflightError::Forbidden { resource, .. } if resource == "deployments.apps")
    );
    assert_eq!(
        err.to_string(),
        format!(
            "403 Forbidden: {forbidden}; RBAC allows the user no such request: bind a Role or \
             ClusterRole that grants it; for this operator, bind the ClusterRole in \
             config/rbac/role.yaml (`kubectl apply -k config/rbac` does, for its ServiceAccount)"
        )
    );
}

/// A client certificate and key whose validity ends at `not_after`.
fn identity(not_after: (i32, u8, u8)) -> Identity {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["client".to_owned()]).unwrap();
    params.not_before = rcgen::date_time_ymd(2020, 1, 1);
    params.not_after = rcgen::date_time_ymd(not_after.0, not_after.1, not_after.2);
    let cert = params.self_signed(&key).unwrap();
    Identity {
        cert_chain: vec![cert.der().clone()],
        key: rustls_pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
    }
}

#[tokio::test]
async fn a_401_with_an_expired_client_certificate_says_it_expired() {
    // The client refreshes its credentials and retries a 401 once.
    let server = Scripted::start(vec![status(401, "Unauthorized", "Unauthorized"); 2]);
    let err = manager(config(&server, Some(identity((2020, 1, 2)))), &[])
        .preflight()
        .await
        .unwrap_err();
    let line = err.to_string();
    let PreflightError::ClientCertificateExpired { not_after } = err else {
        panic!("{err:?}");
    };
    assert_eq!(
        not_after,
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_577_923_200)
    );
    assert_eq!(
        line,
        "401 Unauthorized: the kubeconfig's client certificate has expired: issue a new one \
         from the cluster's client CA and set the user's client-certificate(-data) and \
         client-key(-data) to it"
    );
}

#[tokio::test]
async fn a_401_with_a_valid_client_certificate_is_the_clients_error() {
    // The client refreshes its credentials and retries a 401 once.
    let server = Scripted::start(vec![status(401, "Unauthorized", "Unauthorized"); 2]);
    let err = manager(config(&server, Some(identity((4000, 1, 1)))), &[])
        .preflight()
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("listing things.things.example.com: 401 Unauthorized: Unauthorized; "),
        "{err}"
    );
}
