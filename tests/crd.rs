//! Cluster tests of the CRDs `#[derive(CustomResource)]` writes: the API server takes the
//! schema as structural, serves the kind through `Api<K>` (status subresource, defaults,
//! printer columns), and rejects objects outside the schema with 422 Invalid naming the field.
//!
//! The typed round trip needs the kind's group as a constant, so its CRD is shared by every
//! run and left installed (each run's objects go with its namespace). Each rejection test
//! installs the same schema under a group of its own and deletes it when done.

mod support;

use std::collections::BTreeMap;

use controller_runtime::CustomResource;
use controller_runtime::client::{
    Api, ApiResource, Client, DeleteParams, DynamicObject, ListParams, Patch, PatchParams,
    PostParams, Raw,
};
use controller_runtime::runtime::crd::is_established;
use k8s_openapi::Resource;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use support::cluster::{client, create_namespace, delete_namespace};
use support::{Kubectl, converge, unique};

// === the test kind ===

fn default_port() -> i32 {
    11211
}

/// A gadget: a kind with a field for each schema rule the tests check.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[resource(
    group = "typed.crd-test.example.com",
    version = "v1",
    kind = "Gadget",
    namespaced,
    shortname = "gdg",
    category = "crd-test",
    status = "GadgetStatus",
    derive = "PartialEq",
    printcolumn(name = "Size", type = "integer", json_path = ".spec.size"),
    printcolumn(name = "Mode", type = "string", json_path = ".spec.mode", priority = 1)
)]
#[serde(rename_all = "camelCase")]
struct GadgetSpec {
    /// Number of replicas, 1 to 5.
    #[schemars(range(min = 1, max = 5))]
    size: i32,
    /// The port; 11211 unless given.
    #[serde(default = "default_port")]
    container_port: i32,
    /// The image; the operator's choice when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    image: Option<String>,
    /// A name prefix: a lowercase DNS label of at most 20 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 20), regex(pattern = r"^[a-z][a-z0-9-]*$"))]
    prefix: Option<String>,
    /// How to run.
    #[serde(default)]
    mode: Mode,
    /// Free-form settings, kept as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    settings: Option<Value>,
    /// The pods' template: a k8s-openapi type, embedded whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    template: Option<PodTemplateSpec>,
    /// What to do next: an enum whose variants carry data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    action: Option<Action>,
    /// The port to probe, by number or name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    probe_port: Option<IntOrString>,
    /// Labels for what the gadget makes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    labels: BTreeMap<String, String>,
}

/// Something for a gadget to do.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", rename_all_fields = "camelCase")]
enum Action {
    /// Restart after a pause.
    Restart { after_seconds: u32 },
    /// Scale to this many.
    Scale(i32),
}

/// How a gadget runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
enum Mode {
    /// As fast as it can.
    #[default]
    Fast,
    /// Carefully.
    Safe,
}

/// What the controller last saw of a gadget.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct GadgetStatus {
    /// Replicas ready.
    #[serde(default)]
    ready: i32,
    /// The latest observations of the gadget's state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "controller_runtime::runtime::crd::conditions_schema")]
    conditions: Vec<Condition>,
}

fn condition(type_: &str, status: &str, reason: &str) -> Condition {
    serde_json::from_value(json!({
        "type": type_, "status": status, "reason": reason, "message": "",
        "lastTransitionTime": "2026-01-02T03:04:05Z", "observedGeneration": 1,
    }))
    .unwrap()
}

// === installing ===

/// Waits until the API server reports `name` Established (its status conditions) and serves
/// `api_version`/`kind`.
async fn wait_established(client: &Client, name: &str, api_version: &str, kind: &str) {
    let crds: Api<CustomResourceDefinition> = Api::cluster(client.clone());
    converge!(format!("{name} established"), {
        let crd = crds.get(name).await.unwrap();
        is_established(&crd).then_some(())
    });
    converge!(format!("{api_version} {kind} served"), {
        client.resolve(api_version, kind).await.ok()
    });
}

/// Applies `Gadget::crd()` (server-side, so a run with a changed schema updates it) and waits
/// until it is served.
async fn install_gadget_crd(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::cluster(client.clone());
    let crd = Gadget::crd();
    let name = crd.metadata.name.clone().unwrap();
    converge!("the Gadget CRD applied", {
        match crds.get_opt(&name).await.unwrap() {
            // Terminating, left by an interrupted run: wait until it is gone.
            Some(c) if c.metadata.deletion_timestamp.is_some() => None,
            _ => Some(
                crds.patch(
                    &name,
                    &PatchParams::apply("crd-test").force(),
                    &Patch::Apply(&crd),
                )
                .await
                .unwrap_or_else(|e| panic!("applying the Gadget CRD: {e}")),
            ),
        }
    });
    wait_established(client, &name, Gadget::API_VERSION, Gadget::KIND).await;
}

/// The Gadget schema installed under a group of its own, deleted when dropped.
struct UniqueCrd {
    name: String,
    resource: ApiResource,
}

impl UniqueCrd {
    async fn install(client: &Client, prefix: &str) -> UniqueCrd {
        let mut crd = Gadget::crd();
        let group = format!("{}.crd-test.example.com", unique(prefix));
        let name = format!("{}.{group}", Gadget::URL_PATH_SEGMENT);
        crd.spec.group = group.clone();
        crd.metadata.name = Some(name.clone());
        // kubectl's short name and category stay the shared Gadget's.
        crd.spec.names.short_names = None;
        crd.spec.names.categories = None;
        Api::<CustomResourceDefinition>::cluster(client.clone())
            .create(&PostParams::default(), &crd)
            .await
            .unwrap_or_else(|e| panic!("the API server refused the derived CRD: {e}"));
        let installed = UniqueCrd {
            name,
            resource: ApiResource {
                group: group.clone(),
                version: Gadget::VERSION.to_owned(),
                api_version: format!("{group}/{}", Gadget::VERSION),
                kind: Gadget::KIND.to_owned(),
                plural: Gadget::URL_PATH_SEGMENT.to_owned(),
                namespaced: true,
            },
        };
        let api_version = installed.resource.api_version.clone();
        wait_established(client, &installed.name, &api_version, Gadget::KIND).await;
        installed
    }

    fn api(&self, client: &Client, ns: &str) -> Api<DynamicObject> {
        Api::dynamic(client.clone(), &self.resource, Some(ns))
    }

    fn object(&self, name: &str, spec: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": self.resource.api_version,
            "kind": Gadget::KIND,
            "metadata": {"name": name},
            "spec": spec,
        }))
        .unwrap()
    }
}

impl Drop for UniqueCrd {
    fn drop(&mut self) {
        // Synchronous, so a failed test cleans up too.
        let _ = Kubectl::from_env().try_run(
            &[
                "delete",
                "crd",
                &self.name,
                "--wait=false",
                "--ignore-not-found",
            ],
            None,
        );
    }
}

// === the typed kind through its CRD ===

#[tokio::test]
#[ignore = "needs cluster"]
async fn derived_crd_serves_the_typed_kind_with_status_defaults_and_columns() {
    let client = client();
    install_gadget_crd(&client).await;
    let ns = create_namespace(&client, "crd-typed").await;
    let api: Api<Gadget> = Api::namespaced(client.clone(), &ns);

    let spec = GadgetSpec {
        size: 3,
        container_port: 8080,
        image: Some("memcached:1.6".to_owned()),
        prefix: Some("web".to_owned()),
        mode: Mode::Safe,
        settings: Some(json!({"cache": {"sizes": [1, "two", {"three": 3.5}]}, "on": true})),
        labels: BTreeMap::from([("app".to_owned(), "gadget".to_owned())]),
        // Labels in an embedded ObjectMeta survive (controller-gen's `type: object` drops them).
        template: Some(
            serde_json::from_value(json!({
                "metadata": {"labels": {"app": "gadget"}},
                "spec": {"containers": [{
                    "name": "memcached", "image": "memcached:1.6",
                    "ports": [{"containerPort": 11211, "name": "memcached"}],
                    "resources": {"limits": {"cpu": "500m", "memory": "64Mi"}},
                    "readinessProbe": {"tcpSocket": {"port": "memcached"}},
                }]},
            }))
            .unwrap(),
        ),
        action: Some(Action::Restart { after_seconds: 3 }),
        probe_port: Some(IntOrString::String("memcached".to_owned())),
    };
    let created = api
        .create(&PostParams::default(), &Gadget::new("g1", spec.clone()))
        .await
        .unwrap();
    assert_eq!(
        created.spec, spec,
        "every field survives, free-form settings included"
    );
    assert_eq!(created.status, None);
    assert!(created.metadata.uid.is_some());
    let got = api.get("g1").await.unwrap();
    assert_eq!(got.spec, spec);
    assert_eq!(got.metadata.uid, created.metadata.uid);

    // The status goes through the status subresource, and only there.
    let mut with_status = got.clone();
    let status = GadgetStatus {
        ready: 2,
        conditions: vec![condition("Available", "True", "Ready")],
    };
    with_status.status = Some(status.clone());
    let replaced = api
        .replace_status("g1", &PostParams::default(), &with_status)
        .await
        .unwrap();
    assert_eq!(replaced.status.as_ref(), Some(&status));
    assert_eq!(replaced.spec, spec);
    let got = api.get("g1").await.unwrap();
    assert_eq!(got.status.as_ref(), Some(&status));
    let mut through_main = got.clone();
    through_main.status = Some(GadgetStatus::default());
    through_main.spec.size = 4;
    let replaced = api
        .replace("g1", &PostParams::default(), &through_main)
        .await
        .unwrap();
    assert_eq!(replaced.spec.size, 4);
    assert_eq!(
        replaced.status.as_ref(),
        Some(&status),
        "the main resource ignores status"
    );

    // The CRD's defaults fill what a client leaves out.
    let bare = serde_json::from_value::<DynamicObject>(json!({
        "apiVersion": Gadget::API_VERSION, "kind": Gadget::KIND,
        "metadata": {"name": "g2"}, "spec": {"size": 1},
    }))
    .unwrap();
    let resource = client
        .resolve(Gadget::API_VERSION, Gadget::KIND)
        .await
        .unwrap();
    Api::dynamic(client.clone(), &resource, Some(&ns))
        .create(&PostParams::default(), &bare)
        .await
        .unwrap();
    let defaulted = api.get("g2").await.unwrap();
    assert_eq!(defaulted.spec.container_port, 11211);
    assert_eq!(defaulted.spec.mode, Mode::Fast);

    // The same objects as the informers' raw form.
    let raw: Api<Raw<Gadget>> = Api::namespaced(client.clone(), &ns);
    let mut names: Vec<String> = raw
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|g| g.decode().unwrap().metadata.name.unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["g1", "g2"]);

    // kubectl finds the kind by its short name and shows the printer columns. A discovery
    // cache of its own keeps it from resolving the name through CRDs since deleted.
    let kubectl = Kubectl::from_env();
    let cache = std::env::temp_dir().join(unique("crd-test-kubectl-cache"));
    let cache_dir = format!("--cache-dir={}", cache.display());
    let table = kubectl.run(&["get", "gdg", "-n", &ns, &cache_dir]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    // Custom columns replace the default ones (AGE too), priority 1 waits for `-o wide`.
    assert_eq!(header, ["NAME", "SIZE"], "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.split_whitespace().take(2).eq(["g1", "4"])),
        "{table}"
    );
    let wide = kubectl.run(&["get", "gdg", "-n", &ns, "-o", "wide", &cache_dir]);
    assert!(wide.lines().next().unwrap().contains("MODE"), "{wide}");
    let _ = std::fs::remove_dir_all(&cache);

    api.delete("g1", &DeleteParams::default()).await.unwrap();
    delete_namespace(&client, &ns).await;
}

// === objects outside the schema ===

/// Creates a Gadget with `spec` under a CRD of its own, expects 422 Invalid, and returns the
/// fields the server blamed and its message.
async fn rejected_spec(prefix: &str, spec: Value) -> (Vec<String>, String) {
    let client = client();
    let crd = UniqueCrd::install(&client, prefix).await;
    let ns = create_namespace(&client, prefix).await;
    let err = crd
        .api(&client, &ns)
        .create(&PostParams::default(), &crd.object("bad", spec.clone()))
        .await
        .expect_err(&format!("{spec} was accepted"));
    delete_namespace(&client, &ns).await;
    invalid_fields(err)
}

fn invalid_fields(err: controller_runtime::client::Error) -> (Vec<String>, String) {
    assert!(err.is_invalid(), "{err}");
    assert_eq!(err.code(), Some(422), "{err}");
    let status = err.status().unwrap();
    let fields = status
        .details
        .iter()
        .flat_map(|d| d.causes.iter().flatten())
        .filter_map(|c| c.field.clone())
        .collect();
    (fields, status.message.clone().unwrap_or_default())
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn size_below_the_minimum_is_invalid() {
    let (fields, message) = rejected_spec("crd-min", json!({"size": 0})).await;
    assert_eq!(fields, ["spec.size"], "{message}");
    assert!(message.contains("greater than or equal to 1"), "{message}");
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn size_above_the_maximum_is_invalid() {
    let (fields, message) = rejected_spec("crd-max", json!({"size": 6})).await;
    assert_eq!(fields, ["spec.size"], "{message}");
    assert!(message.contains("less than or equal to 5"), "{message}");
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_field_of_the_wrong_type_is_invalid() {
    let (fields, message) = rejected_spec("crd-type", json!({"size": "three"})).await;
    assert_eq!(fields, ["spec.size"], "{message}");
    assert!(message.contains("must be of type integer"), "{message}");
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_missing_required_field_is_invalid() {
    let (fields, message) = rejected_spec("crd-required", json!({"image": "x"})).await;
    assert_eq!(fields, ["spec.size"], "{message}");
    assert!(message.contains("Required value"), "{message}");
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_string_off_its_pattern_is_invalid() {
    let (fields, message) =
        rejected_spec("crd-pattern", json!({"size": 1, "prefix": "Web_1"})).await;
    assert_eq!(fields, ["spec.prefix"], "{message}");
    assert!(message.contains("should match"), "{message}");
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn an_enum_value_naming_two_variants_is_invalid() {
    let spec = json!({"size": 1, "action": {"restart": {"afterSeconds": 1}, "scale": 2}});
    let (_, message) = rejected_spec("crd-variants", spec).await;
    assert!(
        message.contains(r#""spec.action" must validate one and only one schema"#),
        "{message}"
    );
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_value_outside_the_enum_is_invalid() {
    let (fields, message) = rejected_spec("crd-enum", json!({"size": 1, "mode": "Turbo"})).await;
    assert_eq!(fields, ["spec.mode"], "{message}");
    assert!(message.contains("Unsupported value"), "{message}");
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_condition_outside_metav1_condition_bounds_is_invalid() {
    let client = client();
    let crd = UniqueCrd::install(&client, "crd-cond").await;
    let ns = create_namespace(&client, "crd-cond").await;
    let api = crd.api(&client, &ns);
    let mut created = api
        .create(&PostParams::default(), &crd.object("g", json!({"size": 1})))
        .await
        .unwrap();
    let mut bad = condition("Available", "Maybe", "has space");
    bad.message = "x".repeat(32769);
    created.data.insert(
        "status".to_owned(),
        json!({"ready": 0, "conditions": [serde_json::to_value(bad).unwrap()]}),
    );
    let err = api
        .replace_status("g", &PostParams::default(), &created)
        .await
        .expect_err("an out-of-bounds condition was accepted");
    let (mut fields, message) = invalid_fields(err);
    fields.sort();
    assert_eq!(
        fields,
        [
            "status.conditions[0].message",
            "status.conditions[0].reason",
            "status.conditions[0].status",
        ],
        "{message}"
    );
    delete_namespace(&client, &ns).await;
}
