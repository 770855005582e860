//! The operator's admission webhooks with the real API server calling them: a Memcached
//! without a size is stored with size 1 (and reconciled at that size), and one whose image
//! comes from a registry outside the allowed prefixes is refused with our message.

#[path = "../../../tests/support/mod.rs"]
mod support;

use base64::Engine;
use controller_runtime::client::{Api, Patch, PatchParams, PostParams};
use controller_runtime::runtime::webhook::{WebhookOptions, mutate_path, validate_path};
use controller_runtime::runtime::{CacheOptions, Manager, ManagerOptions};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use memcached_operator::api::{Memcached, MemcachedSpec};
use serde_json::{Value, json};
use support::certs::{TempDir, WebhookConfigurations, issue, make_ca};
use support::cluster::{self, create_namespace};
use support::{CONVERGE, Kubectl, unique, wait_until};

/// One webhook entry for Memcached creates and updates in namespaces labelled `label=value`.
fn entry(name: &str, url: String, ca: &[u8], label: &str, value: &str) -> Value {
    json!({
        "name": name,
        "clientConfig": {
            "url": url,
            "caBundle": base64::engine::general_purpose::STANDARD.encode(ca),
        },
        "rules": [{
            "operations": ["CREATE", "UPDATE"],
            "apiGroups": ["cache.example.com"],
            "apiVersions": ["v1alpha1"],
            "resources": ["memcacheds"],
            "scope": "Namespaced",
        }],
        "namespaceSelector": {"matchLabels": {label: value}},
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 10,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn the_api_server_defaults_and_validates_memcacheds_through_our_webhooks() {
    let client = cluster::client();
    memcached_operator::install_crd(&client, CONVERGE)
        .await
        .unwrap();
    let kubectl = Kubectl::from_env();
    let ns = create_namespace(&client, "mc-webhook").await;
    // Label the namespace so only it is sent to our webhooks.
    let (label, value) = ("mc-webhook-test", unique("w"));
    Api::<Namespace>::cluster(client.clone())
        .patch(
            &ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {label: value}}})),
        )
        .await
        .unwrap();

    // A serving certificate for 127.0.0.1 from a throwaway CA.
    let certs = TempDir::new("mc-webhook-certs");
    let ca = make_ca(certs.path(), "ca");
    let (crt, key) = issue(certs.path(), "ca", "serving");
    std::fs::copy(&crt, certs.path().join("tls.crt")).unwrap();
    std::fs::copy(&key, certs.path().join("tls.key")).unwrap();

    let options = ManagerOptions {
        cache: memcached_operator::cache_selectors(CacheOptions {
            namespaces: vec![ns.clone()],
            ..CacheOptions::default()
        }),
        ..ManagerOptions::default()
    };
    let manager = Manager::with_config(cluster::config(), options).unwrap();
    memcached_operator::setup(&manager, memcached_operator::DEFAULT_IMAGE).unwrap();
    let webhooks = WebhookOptions {
        bind_address: "127.0.0.1:0".parse().unwrap(),
        cert_dir: certs.path().to_owned(),
        ..WebhookOptions::default()
    };
    manager
        .add_webhook_server(memcached_operator::webhook::server(
            webhooks,
            vec!["registry.example.com/".to_owned()],
        ))
        .unwrap();
    let (stop, running) = support::run_manager(&manager);
    let addr = manager
        .webhook_addr()
        .await
        .expect("the webhooks are served");

    let name = unique("mc-webhook");
    let _guard = WebhookConfigurations {
        kubectl: &kubectl,
        name: name.clone(),
    };
    let ca_pem = std::fs::read(&ca).unwrap();
    let url = |path: String| format!("https://{addr}{path}");
    kubectl.apply(
        &json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [entry("default.memcached.cache.example.com",
                url(mutate_path::<Memcached>()), &ca_pem, label, &value)],
        })
        .to_string(),
    );
    kubectl.apply(
        &json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [entry("validate.memcached.cache.example.com",
                url(validate_path::<Memcached>()), &ca_pem, label, &value)],
        })
        .to_string(),
    );

    // Without a size: the API server stores the default our webhook patched in. (The
    // configurations take a moment to reach the API server: try until one is defaulted.)
    let memcacheds = Api::<Memcached>::namespaced(client.clone(), &ns);
    let mut attempt = 0;
    let defaulted = wait_until(
        "a memcached defaulted by the webhook",
        CONVERGE,
        async || {
            attempt += 1;
            let mc = Memcached::new(
                &format!("sized-{attempt}"),
                MemcachedSpec {
                    size: None,
                    container_port: 11211,
                    image: None,
                },
            );
            let stored = memcacheds
                .create(&PostParams::default(), &mc)
                .await
                .map_err(|e| e.to_string())?;
            match stored.spec.size {
                Some(1) => Ok(stored),
                other => Err(format!("stored with size {other:?}")),
            }
        },
    )
    .await;
    // ... and the operator runs it at that size.
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns);
    let dname = defaulted.metadata.name.clone().unwrap();
    wait_until("its deployment at size 1", CONVERGE, async || {
        let d = deployments
            .get_opt(&dname)
            .await
            .map_err(|e| e.to_string())?;
        let replicas = d.and_then(|d| d.spec).and_then(|s| s.replicas);
        (replicas == Some(1))
            .then_some(())
            .ok_or(format!("{replicas:?}"))
    })
    .await;

    // An image from elsewhere is refused with our message; one from the allowed registry is not.
    let image = |name: &str, image: &str| {
        Memcached::new(
            name,
            MemcachedSpec {
                size: Some(1),
                container_port: 11211,
                image: Some(image.to_owned()),
            },
        )
    };
    let refused = wait_until(
        "a foreign image refused",
        CONVERGE,
        async || match memcacheds
            .create(
                &PostParams::default(),
                &image("foreign", "evil.example.org/memcached"),
            )
            .await
        {
            Err(e) => Ok(e.to_string()),
            Ok(_) => {
                let _ = memcacheds.delete("foreign", &Default::default()).await;
                Err("created".to_owned())
            }
        },
    )
    .await;
    assert!(
        refused.contains("is not from an allowed registry")
            && refused.contains("registry.example.com/"),
        "{refused}"
    );
    memcacheds
        .create(
            &PostParams::default(),
            &image("allowed", "registry.example.com/memcached:1"),
        )
        .await
        .unwrap();

    stop.send(()).unwrap();
    running.await.unwrap().unwrap();
    cluster::delete_namespace(&client, &ns).await;
}
