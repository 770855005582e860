//! The committed manifests match what the code generates (no cluster needed).

use std::path::Path;

#[test]
fn the_committed_crd_is_what_the_types_generate() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../config/crd/bases/cache.example.com_memcacheds.yaml");
    let committed = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    assert!(
        committed == memcached_operator::crd_yaml(),
        "{} is stale: run `make manifests`",
        path.display()
    );
}

#[test]
fn the_committed_role_is_what_the_controllers_rules_generate() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/rbac/role.yaml");
    let committed = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let generated = memcached_operator::rbac_yaml().expect("the operator's setup registers");
    assert!(
        committed == generated,
        "{} is stale: run `make manifests`",
        path.display()
    );
}

#[test]
fn the_subcommands_print_the_generated_manifests() {
    for (command, generated) in [
        ("crd", memcached_operator::crd_yaml()),
        ("rbac", memcached_operator::rbac_yaml().unwrap()),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_memcached-operator"))
            .arg(command)
            // No cluster configuration is read: generating needs none.
            .env("KUBECONFIG", "/nonexistent/kubeconfig")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{command}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8(out.stdout).unwrap(),
            generated,
            "{command}"
        );
    }
}

#[test]
fn the_schema_bounds_the_size_as_documented() {
    use controller_runtime::runtime::crd::CustomResource;
    let crd = memcached_operator::api::Memcached::crd();
    let schema = crd.spec.versions[0].schema.clone().unwrap();
    let spec = &schema.open_api_v3_schema.unwrap().properties.unwrap()["spec"];
    let size = &spec.properties.as_ref().unwrap()["size"];
    assert_eq!(size.minimum, Some(0.0));
    assert_eq!(
        size.maximum,
        Some(f64::from(memcached_operator::api::MAX_SIZE))
    );
}

#[test]
fn the_crd_serves_v1beta1_only_with_the_webhook_stores_v1alpha1_and_scales_spec_size() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::WebhookClientConfig;
    let versions = |crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition| -> Vec<(String, bool, bool)> {
        let versions = crd.spec.versions.iter();
        versions.map(|v| (v.name.clone(), v.served, v.storage)).collect()
    };
    let crd = memcached_operator::api::crd();
    assert_eq!(
        versions(&crd),
        [
            ("v1alpha1".into(), true, true),
            ("v1beta1".into(), false, false)
        ]
    );
    assert_eq!(crd.spec.conversion, None, "config/default adds the webhook");
    let converted = memcached_operator::api::crd_with_conversion(WebhookClientConfig::default());
    assert_eq!(
        versions(&converted),
        [
            ("v1alpha1".into(), true, true),
            ("v1beta1".into(), true, false)
        ]
    );
    let conversion = converted.spec.conversion.as_ref().unwrap();
    assert_eq!(conversion.strategy, "Webhook");
    for version in &crd.spec.versions {
        let scale = version
            .subresources
            .as_ref()
            .and_then(|s| s.scale.clone())
            .unwrap_or_else(|| panic!("{} has no scale subresource", version.name));
        assert_eq!(
            (
                scale.spec_replicas_path.as_str(),
                scale.status_replicas_path.as_str()
            ),
            (".spec.size", ".status.readyReplicas"),
            "{}",
            version.name
        );
        let columns: Vec<_> = version
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(
            columns,
            ["Size", "Ready", "Available", "Age"],
            "{}",
            version.name
        );
    }
}
