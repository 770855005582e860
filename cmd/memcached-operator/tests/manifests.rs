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
fn the_crd_serves_both_versions_stores_v1alpha1_and_scales_spec_size() {
    let crd = memcached_operator::api::crd();
    let versions: Vec<_> = crd
        .spec
        .versions
        .iter()
        .map(|v| (v.name.as_str(), v.served, v.storage))
        .collect();
    assert_eq!(
        versions,
        [("v1alpha1", true, true), ("v1beta1", true, false)]
    );
    assert_eq!(crd.spec.conversion, None, "config/default adds the webhook");
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
