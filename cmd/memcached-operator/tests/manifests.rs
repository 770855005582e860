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
