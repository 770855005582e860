//! The Memcached CRD's two versions on the real API server, converted by the operator's
//! webhook server running on loopback: an object written in either version reads back in
//! the other and back again without loss, `kubectl scale` sets `spec.size` through the scale
//! subresource, the v1alpha1 defaulting webhook defaults v1beta1 objects, and a conversion
//! that fails reaches the client with the webhook's message.
//!
//! The CRD is cluster-wide: while this test runs, every client of the Memcached kind that
//! asks for v1beta1 (kubectl does by default) is served by this test's webhook, which
//! converts as the operator would; when it ends, the CRD's conversion goes back to `None`.

#[path = "../../../tests/support/mod.rs"]
mod support;

use std::collections::BTreeMap;

use base64::Engine as _;
use controller_runtime::client::{Api, Patch, PatchParams, PostParams};
use controller_runtime::runtime::conversion::CONVERT_PATH;
use controller_runtime::runtime::webhook::{WebhookOptions, mutate_path};
use k8s_openapi::ByteString;
use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, WebhookClientConfig,
};
use memcached_operator::api::v1beta1::{self, CONTAINER_PORT_ANNOTATION, Container};
use memcached_operator::api::{self, Memcached, MemcachedSpec};
use serde_json::json;
use support::certs::{TempDir, WebhookConfigurations, issue, make_ca};
use support::cluster::{self, create_namespace};
use support::{CONVERGE, Kubectl, Namespace, unique, wait_until};

const CRD: &str = "memcacheds.cache.example.com";

/// Sets the CRD back as `api::crd()` has it (conversion `None`, v1beta1 not served) when
/// dropped (the test's webhook server is about to go), also when the test fails halfway.
struct ResetConversion<'k> {
    kubectl: &'k Kubectl,
}

impl Drop for ResetConversion<'_> {
    fn drop(&mut self) {
        // As api::crd() has it: no webhook, and v1beta1 (versions[1]) not served.
        let reset = r#"[{"op":"replace","path":"/spec/conversion","value":{"strategy":"None"}},
                        {"op":"replace","path":"/spec/versions/1/served","value":false}]"#;
        if let Err(e) = self
            .kubectl
            .try_run(&["patch", "crd", CRD, "--type=json", "-p", reset], None)
        {
            eprintln!("resetting the conversion of {CRD}: {e}");
        }
    }
}

fn strings(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
    Some(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn both_versions_convert_through_the_webhook_scale_default_and_report_failures() {
    let client = cluster::client();
    memcached_operator::install_crd(&client, CONVERGE)
        .await
        .unwrap();
    let kubectl = Kubectl::from_env();
    let ns = Namespace::guard(&kubectl, create_namespace(&client, "mc-conversion").await);

    // The operator's webhook server on loopback, with a serving certificate for 127.0.0.1
    // from a throwaway CA.
    let certs = TempDir::new("mc-conversion-certs");
    let ca = make_ca(certs.path(), "ca");
    let (crt, key) = issue(certs.path(), "ca", "serving");
    std::fs::copy(&crt, certs.path().join("tls.crt")).unwrap();
    std::fs::copy(&key, certs.path().join("tls.key")).unwrap();
    let options = WebhookOptions {
        bind_address: "127.0.0.1:0".parse().unwrap(),
        cert_dir: certs.path().to_owned(),
        ..WebhookOptions::default()
    };
    let server = memcached_operator::webhook::server(options, Vec::new())
        .bind()
        .await
        .unwrap();
    let addr = server.local_addr();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.serve(async {
        let _ = stopped.await;
    }));

    // The CRD serves v1beta1 and converts through it: api::crd_with_conversion, by URL with
    // the CA.
    let reset = ResetConversion { kubectl: &kubectl };
    let ca_pem = std::fs::read(&ca).unwrap();
    let converted = api::crd_with_conversion(WebhookClientConfig {
        url: Some(format!("https://{addr}{CONVERT_PATH}")),
        ca_bundle: Some(ByteString(ca_pem.clone())),
        service: None,
    });
    Api::<CustomResourceDefinition>::cluster(client.clone())
        .patch(
            CRD,
            &PatchParams {
                field_manager: Some("memcached-conversion-test".to_owned()),
                ..PatchParams::default()
            },
            &Patch::Merge(json!({"spec": {
                "conversion": converted.spec.conversion,
                "versions": converted.spec.versions,
            }})),
        )
        .await
        .unwrap();
    let stored = kubectl.json(&["get", "crd", CRD]);
    assert_eq!(
        stored["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"],
        base64::engine::general_purpose::STANDARD.encode(&ca_pem)
    );

    let alphas = Api::<Memcached>::namespaced(client.clone(), &ns.name);
    let betas = Api::<v1beta1::Memcached>::namespaced(client.clone(), &ns.name);

    // Written as v1alpha1, with a port v1beta1 has no field for ...
    let mut alpha = Memcached::new(
        "alpha",
        MemcachedSpec {
            size: Some(2),
            container_port: 11311,
            image: Some("memcached:1.6.26-alpine".to_owned()),
        },
    );
    alpha.metadata.labels = strings(&[("tier", "cache")]);
    let alpha = alphas.create(&PostParams::default(), &alpha).await.unwrap();
    // ... read as v1beta1: the image under spec.container, the port in the annotation. (The
    // API server takes a moment to use the new conversion; until then, converting by
    // apiVersion alone, it shows no image.)
    let beta = wait_until(
        "alpha read as v1beta1 by the webhook",
        CONVERGE,
        async || {
            let beta = betas.get("alpha").await.map_err(|e| e.to_string())?;
            match beta.spec.container.image {
                Some(_) => Ok(beta),
                None => Err(format!("not converted yet: {:?}", beta.spec)),
            }
        },
    )
    .await;
    assert_eq!(
        beta.spec,
        v1beta1::MemcachedSpec {
            size: Some(2),
            container: Container {
                image: Some("memcached:1.6.26-alpine".to_owned()),
            },
        }
    );
    assert_eq!(
        beta.metadata.annotations,
        strings(&[(CONTAINER_PORT_ANNOTATION, "11311")])
    );
    assert_eq!(beta.metadata.labels, alpha.metadata.labels);
    assert_eq!(beta.metadata.uid, alpha.metadata.uid);
    assert_eq!(
        beta.metadata.resource_version,
        alpha.metadata.resource_version
    );
    // ... and written back as v1beta1 (with a label more): stored as it was, port and all.
    let mut relabelled = beta.clone();
    relabelled
        .metadata
        .labels
        .get_or_insert_default()
        .insert("written-as".to_owned(), "v1beta1".to_owned());
    betas
        .replace("alpha", &PostParams::default(), &relabelled)
        .await
        .unwrap();
    let back = alphas.get("alpha").await.unwrap();
    assert_eq!(back.spec, alpha.spec);
    assert_eq!(
        back.metadata.annotations, None,
        "the annotation became the port"
    );
    assert_eq!(
        back.metadata.labels,
        strings(&[("tier", "cache"), ("written-as", "v1beta1")])
    );

    // Written as v1beta1, with a port in the annotation ...
    let mut beta = v1beta1::Memcached::new(
        "beta",
        v1beta1::MemcachedSpec {
            size: Some(3),
            container: Container {
                image: Some("memcached:1.6.25".to_owned()),
            },
        },
    );
    beta.metadata.annotations = strings(&[("note", "hello"), (CONTAINER_PORT_ANNOTATION, "11400")]);
    let beta = betas.create(&PostParams::default(), &beta).await.unwrap();
    // ... read as v1alpha1: the port is a field again, the image at the top ...
    let mut as_alpha = alphas.get("beta").await.unwrap();
    assert_eq!(
        as_alpha.spec,
        MemcachedSpec {
            size: Some(3),
            container_port: 11400,
            image: Some("memcached:1.6.25".to_owned()),
        }
    );
    assert_eq!(as_alpha.metadata.annotations, strings(&[("note", "hello")]));
    // ... and written back as v1alpha1: it reads as it was written.
    as_alpha.metadata.labels = strings(&[("written-as", "v1alpha1")]);
    alphas
        .replace("beta", &PostParams::default(), &as_alpha)
        .await
        .unwrap();
    let back = betas.get("beta").await.unwrap();
    assert_eq!(back.spec, beta.spec);
    assert_eq!(back.metadata.annotations, beta.metadata.annotations);
    assert_eq!(back.metadata.labels, strings(&[("written-as", "v1alpha1")]));

    // kubectl scales it (through v1beta1, the version kubectl prefers): spec.size changes,
    // and nothing v1beta1 lacks is lost on the way.
    kubectl.run(&["-n", &ns.name, "scale", "memcached/alpha", "--replicas=5"]);
    let alpha_path = "memcacheds.v1alpha1.cache.example.com/alpha";
    assert_eq!(kubectl.jsonpath(&ns.name, alpha_path, "{.spec.size}"), "5");
    assert_eq!(
        alphas.get("alpha").await.unwrap().spec,
        MemcachedSpec {
            size: Some(5),
            ..alpha.spec.clone()
        }
    );
    // The scale subresource of each version reads spec.size and status.readyReplicas.
    alphas
        .patch_status(
            "alpha",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"readyReplicas": 4, "nodes": []}})),
        )
        .await
        .unwrap();
    for version in ["v1alpha1", "v1beta1"] {
        let path = format!(
            "/apis/cache.example.com/{version}/namespaces/{}/memcacheds/alpha/scale",
            ns.name
        );
        let scale: Scale = serde_json::from_slice(&client.get_raw(&path).await.unwrap()).unwrap();
        assert_eq!(
            (
                scale.spec.and_then(|s| s.replicas),
                scale.status.map(|s| s.replicas)
            ),
            (Some(5), Some(4)),
            "{version}"
        );
    }

    // The defaulting webhook, registered for v1alpha1 only, defaults v1beta1 objects too:
    // the API server converts them to v1alpha1 for it (matchPolicy Equivalent).
    let label = unique("w");
    Api::<k8s_openapi::api::core::v1::Namespace>::cluster(client.clone())
        .patch(
            &ns.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"mc-conversion-test": label}}})),
        )
        .await
        .unwrap();
    let configurations = WebhookConfigurations {
        kubectl: &kubectl,
        name: unique("mc-conversion"),
    };
    kubectl.apply(
        &json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": configurations.name},
            "webhooks": [{
                "name": "default.memcached.cache.example.com",
                "clientConfig": {
                    "url": format!("https://{addr}{}", mutate_path::<Memcached>()),
                    "caBundle": base64::engine::general_purpose::STANDARD.encode(&ca_pem),
                },
                "rules": [{
                    "operations": ["CREATE"],
                    "apiGroups": ["cache.example.com"],
                    "apiVersions": ["v1alpha1"],
                    "resources": ["memcacheds"],
                }],
                "namespaceSelector": {"matchLabels": {"mc-conversion-test": label}},
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
            }],
        })
        .to_string(),
    );
    let mut attempt = 0;
    wait_until("a v1beta1 object defaulted", CONVERGE, async || {
        attempt += 1;
        let sizeless = v1beta1::Memcached::new(&format!("sizeless-{attempt}"), Default::default());
        let stored = betas
            .create(&PostParams::default(), &sizeless)
            .await
            .map_err(|e| e.to_string())?;
        match stored.spec.size {
            Some(1) => Ok(()),
            other => Err(format!("stored with size {other:?}")),
        }
    })
    .await;
    drop(configurations);

    // A conversion that fails refuses the request with the webhook's message: a port
    // annotation without a port cannot become a v1alpha1 containerPort.
    let bad = json!({
        "apiVersion": "cache.example.com/v1beta1",
        "kind": "Memcached",
        "metadata": {"name": "bad", "namespace": ns.name,
                     "annotations": {CONTAINER_PORT_ANNOTATION: "eleven"}},
        "spec": {"size": 1},
    });
    let refused = kubectl
        .try_run(&["create", "-f", "-"], Some(&bad.to_string()))
        .unwrap_err();
    assert!(
        refused.contains(&format!(
            "conversion webhook for cache.example.com/v1beta1, Kind=Memcached failed: \
             converting Memcached {}/bad from cache.example.com/v1beta1 to \
             cache.example.com/v1alpha1: annotation {CONTAINER_PORT_ANNOTATION}=\"eleven\" \
             is not a port from 1 to 65535",
            ns.name
        )),
        "{refused}"
    );
    assert!(alphas.get_opt("bad").await.unwrap().is_none());

    drop(reset);
    stop.send(()).unwrap();
    serving.await.unwrap();
}
