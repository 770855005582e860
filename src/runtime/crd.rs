//! CustomResourceDefinitions generated from Rust types: the [`CustomResource`] derive, the
//! structural OpenAPI schema the API server validates with, and the CRD as YAML.
//!
//! An operator declares its kind once, as the spec struct (and a status struct), and derives
//! the rest:
//!
//! ```
//! use controller_runtime::CustomResource;
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//!
//! /// The desired state of a Memcached cluster.
//! #[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
//! #[resource(group = "cache.example.com", version = "v1alpha1", kind = "Memcached",
//!            namespaced, shortname = "mc", status = "MemcachedStatus",
//!            printcolumn(name = "Size", type = "integer", json_path = ".spec.size"),
//!            printcolumn(name = "Age", type = "date", json_path = ".metadata.creationTimestamp"))]
//! #[serde(rename_all = "camelCase")]
//! pub struct MemcachedSpec {
//!     /// Number of memcached pods.
//!     #[schemars(range(min = 0, max = 10))]
//!     pub size: i32,
//!     /// The port memcached listens on.
//!     #[serde(default = "default_port")]
//!     pub container_port: i32,
//!     /// The image to run; the operator's default when unset.
//!     pub image: Option<String>,
//! }
//!
//! fn default_port() -> i32 {
//!     11211
//! }
//!
//! /// What the operator last saw of a Memcached cluster.
//! #[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
//! pub struct MemcachedStatus {
//!     /// Pods ready.
//!     pub ready: i32,
//! }
//!
//! // The derive wrote the kind: `Memcached { metadata, spec, status }`.
//! let mc = Memcached::new("cache", MemcachedSpec { size: 3, ..Default::default() });
//! let json = serde_json::to_value(&mc).unwrap();
//! assert_eq!(json["apiVersion"], "cache.example.com/v1alpha1");
//! assert_eq!(json["kind"], "Memcached");
//! assert_eq!(json["spec"]["size"], 3);
//!
//! // ... and its CustomResourceDefinition, ready to apply or to commit as YAML.
//! let crd = Memcached::crd();
//! assert_eq!(crd.metadata.name.as_deref(), Some("memcacheds.cache.example.com"));
//! let yaml = controller_runtime::runtime::crd::to_yaml(&crd);
//! assert!(yaml.contains("shortNames:"));
//! ```
//!
//! The kind works wherever a k8s-openapi kind does: `Api<Memcached>`, `Api<Raw<Memcached>>`
//! and informers (it implements `k8s_openapi::Resource`, `ListableResource` and
//! `Metadata<Ty = ObjectMeta>`). See [`CustomResource`](macro@CustomResource) for every
//! attribute; `scale(..)` among them gives the kind the `scale` subresource, so that
//! `kubectl scale` works on it.
//!
//! # Several versions
//!
//! A kind that grows a new version keeps the old one served for the clients that use it.
//! Each version is its own derived type (same group and kind, another `version`, usually in
//! a module named after it), and [`merge`] joins their CRDs into one that serves every
//! version and stores one. The API server converts each object between the stored version
//! and the one a client asks for: by a conversion webhook that
//! [`webhook_conversion`] names in the CRD, and that
//! [`runtime::conversion`](crate::runtime::conversion) implements from `From`/`TryFrom`
//! conversions of each version to and from one *hub* version (see its module docs for the
//! whole example).
//!
//! # Structural schemas
//!
//! The API server accepts only *structural* schemas for `apiextensions.k8s.io/v1` CRDs: every
//! field has a type, nothing is reached only through `anyOf`/`oneOf`/`allOf`/`not`, no
//! `$ref`, and `nullable` in place of a `null` type. [`structural_schema`] turns what schemars
//! derives (JSON Schema 2020-12) into that form:
//!
//! - `$ref`s are inlined; a recursive type is cut at its recursion, which then takes any value
//!   (`x-kubernetes-preserve-unknown-fields`), since a structural schema cannot recurse;
//! - `Option<T>` (`type: [T, "null"]`, or `anyOf: [T, {type: null}]`) becomes `T` with
//!   `nullable: true`;
//! - an enum of unit variants becomes `type: string` with its `enum`; an enum whose variants
//!   all carry fields has every variant's fields hoisted into one object, the variants left
//!   as a `oneOf` of `required` sets (a field two variants type differently takes any value);
//!   an enum mixing both kinds takes any value;
//! - `serde_json::Value` and other "any JSON" schemas get
//!   `x-kubernetes-preserve-unknown-fields: true`, `IntOrString` and `Quantity` keep
//!   `x-kubernetes-int-or-string`, and k8s-openapi's `RawExtension` keeps its fields;
//! - k8s-openapi's `metav1.Condition` gets the bounds controller-gen emits for it (see
//!   [`conditions_schema`], which also makes a condition list a map keyed by `type`);
//! - numeric `exclusiveMinimum`/`exclusiveMaximum` become OpenAPI v3.0's boolean form;
//!   `uniqueItems` (which the API server refuses) becomes `x-kubernetes-list-type: set` for a
//!   list of scalars; Rust's integer formats map to `int32` or `int64` (with the bounds
//!   schemars already adds for unsigned and narrow types);
//! - `title`, `$schema`, `additionalProperties: false` and keywords OpenAPI v3.0 lacks are
//!   dropped; `description` (doc comments), `default`, bounds, `pattern`, `enum`, `format`
//!   and every `x-kubernetes-*` extension (`#[schemars(extend(..))]`) are kept.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceColumnDefinition, CustomResourceDefinition, CustomResourceDefinitionNames,
    CustomResourceDefinitionSpec, CustomResourceDefinitionVersion, CustomResourceSubresourceScale,
    CustomResourceSubresourceStatus, CustomResourceSubresources, CustomResourceValidation,
    JSONSchemaProps,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

pub use controller_runtime_derive::CustomResource;

mod versions;

pub use versions::{MergeError, merge, webhook_conversion};

/// A custom resource kind: a type the [`CustomResource`](macro@CustomResource) derive wrote,
/// with its spec, its names and its CustomResourceDefinition.
///
/// The derive implements it; generic code (installing CRDs, tests) asks it for the CRD.
/// Importing `controller_runtime::CustomResource` brings both the derive and this trait, so
/// `Memcached::crd()` works where the derive is used.
pub trait CustomResource:
    k8s_openapi::Resource
    + k8s_openapi::ListableResource
    + k8s_openapi::Metadata<Ty = ObjectMeta>
    + Serialize
    + DeserializeOwned
    + Clone
    + Send
    + Sync
    + 'static
{
    /// The spec type the kind was derived from.
    type Spec;

    /// The kind's names, scope and printer columns, as the derive's attributes gave them.
    const INFO: KindInfo;

    /// The kind's CustomResourceDefinition (`apiextensions.k8s.io/v1`): one version, served
    /// and stored, with the structural schema of the spec and status.
    fn crd() -> CustomResourceDefinition;

    /// The object's spec.
    fn spec(&self) -> &Self::Spec;

    /// The object's spec, to change.
    fn spec_mut(&mut self) -> &mut Self::Spec;
}

// === KindInfo ===

/// What a custom resource kind is called and how `kubectl get` shows it: everything of its
/// CustomResourceDefinition except the schema.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KindInfo {
    /// The API group, a DNS subdomain with at least one dot (`cache.example.com`).
    pub group: &'static str,
    /// The version (`v1alpha1`).
    pub version: &'static str,
    /// The kind, in CamelCase (`Memcached`).
    pub kind: &'static str,
    /// The resource name in URLs, lowercase plural (`memcacheds`).
    pub plural: &'static str,
    /// The lowercase singular (`memcached`).
    pub singular: &'static str,
    /// Whether objects live in namespaces (`Namespaced`) or not (`Cluster`).
    pub namespaced: bool,
    /// Short names `kubectl` accepts (`mc`).
    pub short_names: &'static [&'static str],
    /// Categories the kind belongs to (`all` makes `kubectl get all` list it).
    pub categories: &'static [&'static str],
    /// Extra columns of `kubectl get`.
    pub printer_columns: &'static [PrinterColumn],
    /// The `scale` subresource, if the kind has one (`kubectl scale`, autoscalers).
    pub scale: Option<Scale>,
}

/// The `scale` subresource of a kind: where its replica counts live, so that `kubectl scale`
/// and the HorizontalPodAutoscaler work on it (a CRD's `subresources.scale`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scale {
    /// The JSON path of the desired replicas, under `.spec` (`.spec.size`): what a
    /// `Scale`'s `spec.replicas` reads and writes.
    pub spec_replicas_path: &'static str,
    /// The JSON path of the observed replicas, under `.status` (`.status.readyReplicas`):
    /// a `Scale`'s `status.replicas` (0 while it is absent).
    pub status_replicas_path: &'static str,
    /// The JSON path, under `.status` or `.spec`, of a label selector in its string form
    /// (`app=memcached`): a `Scale`'s `status.selector`, which an autoscaler needs.
    pub label_selector_path: Option<&'static str>,
}

/// One extra column of `kubectl get` (a CRD's `additionalPrinterColumns` entry).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrinterColumn {
    /// The column header.
    pub name: &'static str,
    /// The OpenAPI type of the value: `integer`, `number`, `string`, `boolean` or `date`.
    pub column_type: &'static str,
    /// A JSONPath into the object (`.spec.size`).
    pub json_path: &'static str,
    /// What the column shows, for `kubectl explain`-style help.
    pub description: Option<&'static str>,
    /// The OpenAPI format of the value (`int32`, `date-time`, ...).
    pub format: Option<&'static str>,
    /// 0 shows the column in the standard view; higher only with `-o wide`.
    pub priority: i32,
}

impl KindInfo {
    /// The CRD's name: `<plural>.<group>`.
    pub fn crd_name(&self) -> String {
        format!("{}.{}", self.plural, self.group)
    }

    /// The kind's `apiVersion`: `<group>/<version>`.
    pub fn api_version(&self) -> String {
        format!("{}/{}", self.group, self.version)
    }

    /// Builds the CustomResourceDefinition of this kind from the structural schemas of its
    /// spec and, when it has a status subresource, its status (see [`structural_schema`]).
    ///
    /// The object schema is `{apiVersion, kind, metadata: {type: object}, spec, status}` with
    /// `spec` required; the one version is served and stored; a status schema also enables
    /// the `status` subresource, and [`scale`](Self::scale) the `scale` subresource. To
    /// serve several versions of the kind, [`merge`] the CRDs of each.
    pub fn crd(
        &self,
        spec: JSONSchemaProps,
        status: Option<JSONSchemaProps>,
    ) -> CustomResourceDefinition {
        let mut properties = std::collections::BTreeMap::new();
        properties.insert(
            "apiVersion".to_owned(),
            JSONSchemaProps {
                description: Some(
                    "The versioned schema of this representation of an object.".to_owned(),
                ),
                type_: Some("string".to_owned()),
                ..JSONSchemaProps::default()
            },
        );
        properties.insert(
            "kind".to_owned(),
            JSONSchemaProps {
                description: Some("The REST resource this object represents.".to_owned()),
                type_: Some("string".to_owned()),
                ..JSONSchemaProps::default()
            },
        );
        properties.insert(
            "metadata".to_owned(),
            JSONSchemaProps {
                type_: Some("object".to_owned()),
                ..JSONSchemaProps::default()
            },
        );
        properties.insert("spec".to_owned(), spec);
        let has_status = status.is_some();
        if let Some(status) = status {
            properties.insert("status".to_owned(), status);
        }
        let schema = JSONSchemaProps {
            description: Some(format!(
                "{} is a custom resource of {}.",
                self.kind,
                self.api_version()
            )),
            type_: Some("object".to_owned()),
            properties: Some(properties),
            required: Some(vec!["spec".to_owned()]),
            ..JSONSchemaProps::default()
        };

        let columns: Vec<_> = self
            .printer_columns
            .iter()
            .map(|c| CustomResourceColumnDefinition {
                name: c.name.to_owned(),
                type_: c.column_type.to_owned(),
                json_path: c.json_path.to_owned(),
                description: c.description.map(str::to_owned),
                format: c.format.map(str::to_owned),
                priority: (c.priority != 0).then_some(c.priority),
            })
            .collect();
        let strings = |s: &[&str]| -> Option<Vec<String>> {
            (!s.is_empty()).then(|| s.iter().map(|&s| s.to_owned()).collect())
        };

        CustomResourceDefinition {
            metadata: ObjectMeta {
                name: Some(self.crd_name()),
                ..ObjectMeta::default()
            },
            spec: CustomResourceDefinitionSpec {
                group: self.group.to_owned(),
                names: CustomResourceDefinitionNames {
                    kind: self.kind.to_owned(),
                    list_kind: Some(format!("{}List", self.kind)),
                    plural: self.plural.to_owned(),
                    singular: Some(self.singular.to_owned()),
                    short_names: strings(self.short_names),
                    categories: strings(self.categories),
                },
                scope: if self.namespaced {
                    "Namespaced"
                } else {
                    "Cluster"
                }
                .to_owned(),
                versions: vec![CustomResourceDefinitionVersion {
                    name: self.version.to_owned(),
                    served: true,
                    storage: true,
                    schema: Some(CustomResourceValidation {
                        open_api_v3_schema: Some(schema),
                    }),
                    subresources: (has_status || self.scale.is_some()).then(|| {
                        CustomResourceSubresources {
                            status: has_status.then(|| CustomResourceSubresourceStatus(json!({}))),
                            scale: self.scale.map(|s| CustomResourceSubresourceScale {
                                spec_replicas_path: s.spec_replicas_path.to_owned(),
                                status_replicas_path: s.status_replicas_path.to_owned(),
                                label_selector_path: s.label_selector_path.map(str::to_owned),
                            }),
                        }
                    }),
                    additional_printer_columns: (!columns.is_empty()).then_some(columns),
                    ..CustomResourceDefinitionVersion::default()
                }],
                ..CustomResourceDefinitionSpec::default()
            },
            status: None,
        }
    }
}

// === the CRD's outside ===

/// The CRD as YAML, as `controller-gen` writes them to `config/crd/bases/`: one document
/// starting with `---`, keys in a fixed order, so the same types always give the same bytes.
/// Bounds that are whole numbers print as integers (`maximum: 5`, not `5.0`).
pub fn to_yaml(crd: &CustomResourceDefinition) -> String {
    // A CRD holds strings, numbers, booleans, sequences and maps with string keys: each has a
    // JSON form and a YAML form.
    let mut value = serde_json::to_value(crd).expect("a CustomResourceDefinition is JSON");
    whole_numbers_as_integers(&mut value);
    let body = serde_saphyr::to_string(&value).expect("JSON has a YAML form");
    format!("---\n{body}")
}

/// Rewrites every float with no fractional part (JSONSchemaProps keeps bounds as `f64`) as an
/// integer.
fn whole_numbers_as_integers(value: &mut Value) {
    match value {
        Value::Number(n) => {
            if let Some(f) = n.as_f64().filter(|_| n.is_f64())
                && f.fract() == 0.0
                && f.abs() < 9.0e15
            {
                #[allow(clippy::cast_possible_truncation)] // whole and well within i64
                let whole = f as i64;
                *value = Value::from(whole);
            }
        }
        Value::Array(values) => values.iter_mut().for_each(whole_numbers_as_integers),
        Value::Object(map) => map.values_mut().for_each(whole_numbers_as_integers),
        _ => {}
    }
}

/// Whether the API server reports the CRD `Established`: it serves the kind, and objects of
/// it can be created.
pub fn is_established(crd: &CustomResourceDefinition) -> bool {
    crd.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        })
}

/// Applies `crd` server-side as `field_manager` (forced, so a changed schema updates it) and
/// waits until the API server serves its kind: established, and a list of its first served
/// version answers (discovery may lag the condition a moment). What `make install` does with
/// kubectl, for tests and for an operator that installs its own CRDs.
///
/// # Errors
///
/// The apply refused (RBAC, an invalid schema), or the kind not served within `timeout`
/// ([`client::Error::Build`](crate::client::Error::Build), naming the CRD).
///
/// # Cancel safety
///
/// Dropping the future stops the wait; the apply, once sent, stands.
pub async fn install(
    client: &crate::client::Client,
    crd: &CustomResourceDefinition,
    field_manager: &str,
    timeout: std::time::Duration,
) -> Result<(), crate::client::Error> {
    use crate::client::{Api, Patch, PatchParams};
    let crds: Api<CustomResourceDefinition> = Api::cluster(client.clone());
    let name = crd.metadata.name.clone().unwrap_or_default();
    crds.patch(
        &name,
        &PatchParams::apply(field_manager).force(),
        &Patch::Apply(crd),
    )
    .await?;
    let served = crd.spec.versions.iter().find(|v| v.served);
    let version = served.map_or("", |v| v.name.as_str());
    let path = format!(
        "/apis/{}/{version}/{}?limit=1",
        crd.spec.group, crd.spec.names.plural
    );
    let begin = tokio::time::Instant::now();
    loop {
        if is_established(&crds.get(&name).await?) && client.get_raw(&path).await.is_ok() {
            return Ok(());
        }
        if begin.elapsed() > timeout {
            return Err(crate::client::Error::Build(format!(
                "the CRD {name} was not established within {timeout:?}"
            )));
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

// === structural schemas ===

/// The structural OpenAPI v3 schema of `T`, as a CRD's `openAPIV3Schema` property (see the
/// [module docs](self#structural-schemas) for what is rewritten and why).
pub fn structural_schema<T: JsonSchema>() -> JSONSchemaProps {
    let schema = generator().into_root_schema_for::<T>();
    structural(schema)
}

/// The generator [`structural_schema`] uses: JSON Schema 2020-12 with references kept (they
/// are inlined afterwards, which lets known k8s-openapi types be recognised by name) and
/// schemas describing what deserializes (so a `#[serde(default)]` field is optional).
pub fn generator() -> SchemaGenerator {
    SchemaSettings::draft2020_12()
        .with(|s| {
            s.meta_schema = None;
            s.inline_subschemas = false;
        })
        .into_generator()
}

/// Turns a root schema from [`generator`] into a structural schema (see the
/// [module docs](self#structural-schemas)).
pub fn structural(schema: Schema) -> JSONSchemaProps {
    let value = structural_value(schema.to_value());
    // Every key `structural_value` keeps is a field of JSONSchemaProps with the JSON type it
    // expects, so this cannot fail on any input.
    serde_json::from_value(value).expect("a structural schema is a JSONSchemaProps")
}

/// The list-of-conditions schema controller-gen emits for `[]metav1.Condition` with
/// `+listType=map` and `+listMapKey=type`, for
/// `#[schemars(schema_with = "controller_runtime::runtime::crd::conditions_schema")]` on a
/// `Vec<Condition>` field.
///
/// Each condition requires `lastTransitionTime` (date-time), `message` (at most 32768 bytes),
/// `reason` (1–1024, CamelCase-like pattern), `status` (`True`, `False`, `Unknown`) and
/// `type` (at most 316, a qualified name); the list is a map keyed by `type`, so server-side
/// apply merges conditions one by one.
///
/// A field with `schema_with` is required unless serde can leave it out: give it
/// `#[serde(default)]` (and `skip_serializing_if = "Vec::is_empty"` to leave an empty list
/// out). Without `schema_with`, a `Vec<Condition>` still gets these bounds (a plain list).
///
/// ```
/// use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
/// use schemars::JsonSchema;
/// use serde::{Deserialize, Serialize};
///
/// /// What the operator saw.
/// #[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
/// pub struct WidgetStatus {
///     /// The latest observations of the widget's state.
///     #[serde(default, skip_serializing_if = "Vec::is_empty")]
///     #[schemars(schema_with = "controller_runtime::runtime::crd::conditions_schema")]
///     pub conditions: Vec<Condition>,
/// }
///
/// let schema = controller_runtime::runtime::crd::structural_schema::<WidgetStatus>();
/// let conditions = &schema.properties.unwrap()["conditions"];
/// assert_eq!(conditions.x_kubernetes_list_type.as_deref(), Some("map"));
/// ```
pub fn conditions_schema(_: &mut SchemaGenerator) -> Schema {
    let value = json!({
        "type": "array",
        "items": condition_value(),
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
    });
    Schema::try_from(value).expect("an object is a schema")
}

/// The name k8s-openapi gives `metav1.Condition`'s schema.
const CONDITION: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Condition";
/// The name k8s-openapi gives `runtime.RawExtension`'s schema.
const RAW_EXTENSION: &str = "io.k8s.apimachinery.pkg.runtime.RawExtension";

/// `metav1.Condition` with the validation markers of its Go type, as controller-gen emits it.
fn condition_value() -> Value {
    json!({
        "description": "One aspect of the current state of this object.",
        "type": "object",
        "properties": {
            "lastTransitionTime": {
                "description": "When the condition last changed from one status to another.",
                "type": "string",
                "format": "date-time",
            },
            "message": {
                "description": "A human-readable message about the last transition; may be empty.",
                "type": "string",
                "maxLength": 32768,
            },
            "observedGeneration": {
                "description": "The .metadata.generation the condition was set from.",
                "type": "integer",
                "format": "int64",
                "minimum": 0,
            },
            "reason": {
                "description": "A CamelCase identifier of why the condition last changed.",
                "type": "string",
                "minLength": 1,
                "maxLength": 1024,
                "pattern": "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
            },
            "status": {
                "description": "The status of the condition: True, False or Unknown.",
                "type": "string",
                "enum": ["True", "False", "Unknown"],
            },
            "type": {
                "description": "The condition's type, in CamelCase or foo.example.com/CamelCase.",
                "type": "string",
                "maxLength": 316,
                "pattern": "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
            },
        },
        "required": ["lastTransitionTime", "message", "reason", "status", "type"],
    })
}

/// The structural form of a root schema from [`generator`], as JSON.
fn structural_value(root: Value) -> Value {
    let (root, defs) = match root {
        Value::Object(mut root) => match root.remove("$defs") {
            Some(Value::Object(defs)) => (Value::Object(root), defs),
            _ => (Value::Object(root), Map::new()),
        },
        other => (other, Map::new()),
    };
    let mut rewriter = Rewriter {
        root: &root,
        defs: &defs,
        // A recursive root type refers to itself as `#`.
        inlining: vec!["#".to_owned()],
    };
    Value::Object(rewriter.rewrite(&root))
}

type Object = Map<String, Value>;

const PRESERVE: &str = "x-kubernetes-preserve-unknown-fields";
const INT_OR_STRING: &str = "x-kubernetes-int-or-string";

/// Rewrites JSON Schema 2020-12 from schemars into a structural OpenAPI v3 schema.
///
/// # Implementation Details
///
/// Each schema is rewritten bottom-up: its own keywords first (`rewrite_parts`), with
/// `properties`, `items` and `additionalProperties` rewritten recursively, then the branches
/// of `allOf` (merged in: a conjunction of disjoint objects is their union) and of
/// `anyOf`/`oneOf` (null branches become `nullable`; one branch left is merged in; string
/// enums are unioned; objects are hoisted). `finalize` then gives every node what structure
/// demands: a type, or `x-kubernetes-preserve-unknown-fields` where none can be said. A
/// `$ref` is replaced by its rewritten definition, the referring schema's own keywords
/// (a field's description, its default) winning; the names being inlined are kept on a stack
/// so a recursive type ends in "any value" rather than looping.
struct Rewriter<'d> {
    /// The root schema, without its `$defs`.
    root: &'d Value,
    /// The root schema's `$defs`.
    defs: &'d Object,
    /// Definitions being inlined, outermost first.
    inlining: Vec<String>,
}

impl Rewriter<'_> {
    /// The structural form of `schema`, finalized.
    fn rewrite(&mut self, schema: &Value) -> Object {
        let mut out = self.rewrite_parts(schema);
        finalize(&mut out);
        out
    }

    /// The structural form of `schema`'s keywords, not yet given a type where it lacks one.
    fn rewrite_parts(&mut self, schema: &Value) -> Object {
        let Value::Object(schema) = schema else {
            // `true`, `false` or not a schema at all: any value.
            return Object::new();
        };
        let mut out = Object::new();
        if let Some(Value::String(reference)) = schema.get("$ref") {
            out = self.reference(reference);
        }
        let mut nullable = false;
        let mut unique = false;
        for (key, value) in schema {
            match key.as_str() {
                "description" | "format" | "pattern" | "minLength" | "maxLength" | "minItems"
                | "maxItems" | "minProperties" | "maxProperties" | "multipleOf" | "minimum"
                | "maximum" | "required" => {
                    out.insert(key.clone(), value.clone());
                }
                "default" if !value.is_null() => {
                    out.insert(key.clone(), value.clone());
                }
                "nullable" => nullable |= value == &Value::Bool(true),
                "type" => {
                    let (ty, null) = rewrite_type(value);
                    nullable |= null;
                    match ty {
                        Type::One(ty) => {
                            out.insert("type".to_owned(), Value::String(ty));
                        }
                        Type::IntOrString => {
                            out.insert(INT_OR_STRING.to_owned(), Value::Bool(true));
                        }
                        Type::Any => {
                            out.insert(PRESERVE.to_owned(), Value::Bool(true));
                        }
                        Type::None => {}
                    }
                }
                "const" | "enum" => {
                    let values = match value {
                        Value::Array(values) if key == "enum" => values.clone(),
                        other => vec![other.clone()],
                    };
                    nullable |= values.iter().any(Value::is_null);
                    let values: Vec<_> = values.into_iter().filter(|v| !v.is_null()).collect();
                    if !values.is_empty() {
                        out.insert("enum".to_owned(), Value::Array(values));
                    }
                }
                "exclusiveMinimum" | "exclusiveMaximum" => {
                    let bound = if key == "exclusiveMinimum" {
                        "minimum"
                    } else {
                        "maximum"
                    };
                    match value {
                        Value::Number(_) => {
                            out.insert(bound.to_owned(), value.clone());
                            out.insert(key.clone(), Value::Bool(true));
                        }
                        Value::Bool(_) => {
                            out.insert(key.clone(), value.clone());
                        }
                        _ => {}
                    }
                }
                "properties" => {
                    if let Value::Object(properties) = value {
                        let properties = properties
                            .iter()
                            .map(|(name, schema)| {
                                (name.clone(), Value::Object(self.rewrite(schema)))
                            })
                            .collect();
                        out.insert(key.clone(), Value::Object(properties));
                    }
                }
                "additionalProperties" => match value {
                    Value::Bool(false) => {}
                    Value::Object(_) => {
                        out.insert(key.clone(), Value::Object(self.rewrite(value)));
                    }
                    _ => {
                        out.insert(PRESERVE.to_owned(), Value::Bool(true));
                    }
                },
                "items" | "prefixItems" => {
                    let items = match value {
                        Value::Array(tuple) => tuple.clone(),
                        single => vec![single.clone()],
                    };
                    self.items(&mut out, &items);
                }
                "uniqueItems" => unique = value == &Value::Bool(true),
                _ if key.starts_with("x-kubernetes-") => {
                    out.insert(key.clone(), value.clone());
                }
                // `$ref` is handled above; `allOf`, `anyOf` and `oneOf` below. Everything
                // else is noise (`title`, `$schema`, `examples`) or not OpenAPI v3.0.
                _ => {}
            }
        }

        if let Some(Value::Array(branches)) = schema.get("allOf") {
            for branch in branches {
                let branch = self.rewrite_parts(branch);
                merge_into(&mut out, branch);
            }
        }
        for junction in ["anyOf", "oneOf"] {
            if let Some(Value::Array(branches)) = schema.get(junction) {
                nullable |= self.junction(&mut out, junction, branches);
            }
        }

        if nullable {
            out.insert("nullable".to_owned(), Value::Bool(true));
        }
        if unique && !out.contains_key("x-kubernetes-list-type") {
            let scalar = out
                .get("items")
                .and_then(|items| items.get("type"))
                .and_then(Value::as_str)
                .is_some_and(|ty| matches!(ty, "string" | "integer" | "number" | "boolean"));
            if scalar {
                out.insert("x-kubernetes-list-type".to_owned(), json!("set"));
            }
        }
        if let Some(Value::String(format)) = out.get("format") {
            let format = match format.as_str() {
                "int8" | "int16" | "uint8" | "uint16" => Some("int32"),
                "uint32" | "uint64" | "uint" | "int" | "int128" | "uint128" => Some("int64"),
                _ => None,
            };
            if let Some(format) = format {
                out.insert("format".to_owned(), json!(format));
            }
        }
        out
    }

    /// The rewritten definition `reference` points to.
    fn reference(&mut self, reference: &str) -> Object {
        let name = reference
            .strip_prefix("#/$defs/")
            .or_else(|| reference.strip_prefix("#/definitions/"))
            .unwrap_or(reference)
            .replace("~1", "/")
            .replace("~0", "~");
        match name.as_str() {
            CONDITION => return self.rewrite(&condition_value()),
            RAW_EXTENSION => return any_object(),
            _ => {}
        }
        let definition = if name == "#" {
            Some(self.root)
        } else {
            self.defs.get(&name)
        };
        let Some(definition) = definition else {
            return Object::new();
        };
        if self.inlining.contains(&name) {
            // A recursive type: a structural schema is a finite tree, so the recursion takes
            // any value.
            return Object::new();
        }
        self.inlining.push(name);
        let out = self.rewrite(definition);
        self.inlining.pop();
        out
    }

    /// Rewrites `items` (one schema, or a tuple's schemas) into `out`.
    fn items(&mut self, out: &mut Object, items: &[Value]) {
        let mut rewritten: Vec<Object> = items.iter().map(|item| self.rewrite(item)).collect();
        rewritten.dedup();
        match (rewritten.pop(), rewritten.is_empty()) {
            // One schema for every item (a list, or a tuple of one type).
            (Some(item), true) => {
                out.insert("items".to_owned(), Value::Object(item));
            }
            // A tuple of different types: a list cannot say that, so its items take any value.
            (Some(_), false) => {
                out.insert("items".to_owned(), Value::Object(any_value()));
            }
            (None, _) => {}
        }
    }

    /// Folds the branches of an `anyOf`/`oneOf` into `out`; returns whether one of them was
    /// the null type.
    fn junction(&mut self, out: &mut Object, junction: &str, branches: &[Value]) -> bool {
        let (nulls, branches): (Vec<&Value>, Vec<&Value>) =
            branches.iter().partition(|branch| is_null_schema(branch));
        let branches: Vec<Object> = branches.into_iter().map(|b| self.rewrite(b)).collect();
        let nullable = !nulls.is_empty();

        if branches.len() == 1 {
            let branch = branches.into_iter().next().expect("one branch");
            merge_into(out, branch);
            return nullable;
        }
        if branches.is_empty() {
            return nullable;
        }

        let is_type = |b: &Object, ty: &str| b.get("type").and_then(Value::as_str) == Some(ty);
        if branches.iter().all(|b| {
            is_type(b, "string") && b.contains_key("enum") && !b.contains_key("properties")
        }) {
            // An enum of unit variants, some documented: one string enum.
            let mut values = Vec::new();
            for branch in &branches {
                if let Some(Value::Array(these)) = branch.get("enum") {
                    for value in these {
                        if !values.contains(value) {
                            values.push(value.clone());
                        }
                    }
                }
            }
            out.insert("type".to_owned(), json!("string"));
            out.insert("enum".to_owned(), Value::Array(values));
            return nullable;
        }
        if branches.iter().all(|b| is_type(b, "object")) {
            hoist(out, junction, branches);
            return nullable;
        }
        // Variants of different types (a unit variant beside data-carrying ones, an untagged
        // enum of a string and a number): no structural schema says that.
        out.remove("type");
        out.remove("properties");
        out.remove("items");
        out.remove("enum");
        out.insert(PRESERVE.to_owned(), Value::Bool(true));
        nullable
    }
}

/// What a `type` keyword becomes.
enum Type {
    /// One type.
    One(String),
    /// Integer or string: `x-kubernetes-int-or-string`.
    IntOrString,
    /// Several types structure cannot say: any value.
    Any,
    /// No type but null.
    None,
}

/// Splits a `type` (a string or an array of them) into its structural form and whether it
/// allowed null.
fn rewrite_type(value: &Value) -> (Type, bool) {
    let types: Vec<&str> = match value {
        Value::String(ty) => vec![ty.as_str()],
        Value::Array(types) => types.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let null = types.contains(&"null");
    let mut rest: Vec<&str> = types.into_iter().filter(|&ty| ty != "null").collect();
    rest.sort_unstable();
    rest.dedup();
    let ty = match rest.as_slice() {
        [] => Type::None,
        [ty] => Type::One((*ty).to_owned()),
        ["integer", "string"] => Type::IntOrString,
        _ => Type::Any,
    };
    (ty, null)
}

/// Whether a schema only admits null: `{type: null}`, `{const: null}` or `{enum: [null]}`.
fn is_null_schema(schema: &Value) -> bool {
    let Value::Object(schema) = schema else {
        return false;
    };
    match (schema.get("type"), schema.get("const"), schema.get("enum")) {
        (Some(Value::String(ty)), _, _) => ty == "null",
        (Some(Value::Array(types)), _, _) => types.iter().all(|t| t == "null"),
        (None, Some(Value::Null), _) => true,
        (None, None, Some(Value::Array(values))) => values.iter().all(Value::is_null),
        _ => false,
    }
}

/// Merges `branch` into `out`: `out`'s keywords win, except that properties and required
/// fields are united and `nullable` or preserve-unknown-fields from either holds.
fn merge_into(out: &mut Object, branch: Object) {
    for (key, value) in branch {
        match (key.as_str(), out.get_mut(&key)) {
            ("properties", Some(Value::Object(mine))) => {
                if let Value::Object(theirs) = value {
                    for (name, schema) in theirs {
                        mine.entry(name).or_insert(schema);
                    }
                }
            }
            ("required", Some(Value::Array(mine))) => {
                if let Value::Array(theirs) = value {
                    for name in theirs {
                        if !mine.contains(&name) {
                            mine.push(name);
                        }
                    }
                }
            }
            ("nullable" | PRESERVE, Some(mine)) => {
                if value == Value::Bool(true) {
                    *mine = value;
                }
            }
            (_, Some(_)) => {}
            (_, None) => {
                out.insert(key, value);
            }
        }
    }
}

/// Hoists the properties of object `branches` into `out`, leaving the junction as a choice
/// between the branches' `required` sets (which is all a structural junction may hold).
fn hoist(out: &mut Object, junction: &str, branches: Vec<Object>) {
    let mut properties = match out.remove("properties") {
        Some(Value::Object(properties)) => properties,
        _ => Object::new(),
    };
    let mut choices: Vec<Value> = Vec::new();
    let mut every_branch_requires = true;
    for mut branch in branches {
        if let Some(Value::String(description)) = branch.get("description").cloned()
            && let Some(Value::Object(theirs)) = branch.get_mut("properties")
            && theirs.len() == 1
        {
            // An externally tagged variant: its doc comment describes its one property.
            if let Some(Value::Object(only)) = theirs.values_mut().next() {
                only.entry("description")
                    .or_insert(Value::String(description));
            }
        }
        if let Some(Value::Object(theirs)) = branch.remove("properties") {
            for (name, schema) in theirs {
                match properties.get_mut(&name) {
                    Some(mine) => merge_property(mine, schema),
                    None => {
                        properties.insert(name, schema);
                    }
                }
            }
        }
        match branch.remove("required") {
            Some(Value::Array(required)) if !required.is_empty() => {
                let choice = json!({ "required": required });
                if !choices.contains(&choice) {
                    choices.push(choice);
                }
            }
            _ => every_branch_requires = false,
        }
        if branch.get(PRESERVE) == Some(&Value::Bool(true)) {
            out.insert(PRESERVE.to_owned(), Value::Bool(true));
        }
    }
    out.insert("type".to_owned(), json!("object"));
    out.insert("properties".to_owned(), Value::Object(properties));
    // A branch with nothing required admits every object, and so does the junction.
    if every_branch_requires && choices.len() > 1 {
        out.insert(junction.to_owned(), Value::Array(choices));
    }
}

/// Merges a property that two variants both have: the same schema stays; two string enums
/// (internal tags) are united; anything else takes any value.
fn merge_property(mine: &mut Value, theirs: Value) {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Value::Object(o) = &mut v {
            o.remove("description");
            o.remove("enum");
        }
        v
    };
    if strip(mine) != strip(&theirs) {
        let description = mine.get("description").cloned();
        let mut any = any_value();
        if let Some(description) = description {
            any.insert("description".to_owned(), description);
        }
        *mine = Value::Object(any);
        return;
    }
    if let (Some(Value::Array(mine)), Some(Value::Array(theirs))) =
        (mine.get_mut("enum"), theirs.get("enum"))
    {
        for value in theirs {
            if !mine.contains(value) {
                mine.push(value.clone());
            }
        }
    }
}

/// Gives a rewritten node what structure demands.
fn finalize(out: &mut Object) {
    let preserve = out.get(PRESERVE) == Some(&Value::Bool(true));
    if out.contains_key("properties") && out.contains_key("additionalProperties") {
        // A struct with a flattened map: structure cannot say both, so the extra fields are
        // kept as they come.
        out.remove("additionalProperties");
        out.insert(PRESERVE.to_owned(), Value::Bool(true));
    }
    if out.contains_key("type") || out.contains_key(INT_OR_STRING) {
        return;
    }
    if out.contains_key("properties") || out.contains_key("additionalProperties") {
        out.insert("type".to_owned(), json!("object"));
    } else if out.contains_key("items") {
        out.insert("type".to_owned(), json!("array"));
    } else if out
        .get("enum")
        .and_then(Value::as_array)
        .is_some_and(|values| values.iter().all(Value::is_string))
    {
        out.insert("type".to_owned(), json!("string"));
    } else if !preserve {
        out.remove("enum");
        out.insert(PRESERVE.to_owned(), Value::Bool(true));
    }
}

/// A schema admitting any JSON value, kept as it comes.
fn any_value() -> Object {
    let mut any = Object::new();
    any.insert(PRESERVE.to_owned(), Value::Bool(true));
    any
}

/// A schema admitting any JSON object, kept as it comes.
fn any_object() -> Object {
    let mut any = any_value();
    any.insert("type".to_owned(), json!("object"));
    any
}

/// Re-exports for the code the derive generates, so users need no direct dependency on the
/// crates it names.
#[doc(hidden)]
pub mod __private {
    pub use k8s_openapi;
    pub use serde;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    use k8s_openapi::Resource as _;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    use serde::Deserialize;

    fn value<T: JsonSchema>() -> Value {
        structural_value(generator().into_root_schema_for::<T>().to_value())
    }

    fn refs(value: &Value, found: &mut Vec<String>) {
        match value {
            Value::Object(o) => {
                for (k, v) in o {
                    if k.starts_with('$') || k == "title" {
                        found.push(k.clone());
                    }
                    refs(v, found);
                }
            }
            Value::Array(a) => a.iter().for_each(|v| refs(v, found)),
            _ => {}
        }
    }

    fn default_port() -> i32 {
        11211
    }

    /// A small spec.
    #[derive(Deserialize, Serialize, JsonSchema)]
    #[serde(rename_all = "camelCase")]
    struct Small {
        /// Number of pods.
        #[schemars(range(min = 0, max = 10))]
        size: i32,
        #[serde(default = "default_port")]
        container_port: i32,
        image: Option<String>,
        #[schemars(length(min = 1, max = 63), regex(pattern = r"^[a-z]+$"))]
        name: String,
        mode: Mode,
        mode_opt: Option<Mode>,
        inner: Option<Inner>,
        replicas: u32,
        small: u8,
        any: serde_json::Value,
        labels: BTreeMap<String, String>,
        tags: BTreeSet<String>,
        port: Option<IntOrString>,
        #[serde(default)]
        conditions: Vec<Condition>,
        /// A note: with a colon, a # hash and "quotes".
        ///
        /// - A second paragraph, as a list.
        #[serde(default)]
        note: String,
    }

    /// How to run.
    #[derive(Deserialize, Serialize, JsonSchema)]
    enum Mode {
        /// Fast.
        Fast,
        /// Safe.
        Safe,
    }

    /// Inner doc.
    #[derive(Deserialize, Serialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    struct Inner {
        x: i64,
    }

    #[test]
    fn small_spec_schema_has_no_refs_and_keeps_bounds_defaults_and_descriptions() {
        let schema = value::<Small>();
        let mut found = Vec::new();
        refs(&schema, &mut found);
        assert!(found.is_empty(), "{found:?} in {schema:#}");
        let p = &schema["properties"];
        assert_eq!(schema["type"], "object");
        assert_eq!(
            p["size"],
            json!({"description": "Number of pods.", "type": "integer", "format": "int32",
                   "minimum": 0, "maximum": 10})
        );
        assert_eq!(
            p["containerPort"],
            json!({"type": "integer", "format": "int32", "default": 11211})
        );
        assert_eq!(p["image"], json!({"type": "string", "nullable": true}));
        assert_eq!(
            p["name"],
            json!({"type": "string", "minLength": 1, "maxLength": 63, "pattern": "^[a-z]+$"})
        );
        assert_eq!(
            p["mode"],
            json!({"description": "How to run.", "type": "string", "enum": ["Fast", "Safe"]})
        );
        assert_eq!(p["modeOpt"]["enum"], json!(["Fast", "Safe"]));
        assert_eq!(p["modeOpt"]["nullable"], true);
        assert_eq!(
            p["inner"],
            json!({"description": "Inner doc.", "type": "object", "nullable": true,
                   "properties": {"x": {"type": "integer", "format": "int64"}},
                   "required": ["x"]})
        );
        assert_eq!(
            p["replicas"],
            json!({"type": "integer", "format": "int64", "minimum": 0})
        );
        assert_eq!(
            p["small"],
            json!({"type": "integer", "format": "int32", "minimum": 0, "maximum": 255})
        );
        assert_eq!(p["any"], json!({PRESERVE: true}));
        assert_eq!(
            p["labels"],
            json!({"type": "object", "additionalProperties": {"type": "string"}})
        );
        assert_eq!(
            p["tags"],
            json!({"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"})
        );
        assert_eq!(p["port"][INT_OR_STRING], true);
        assert_eq!(p["port"]["nullable"], true);
        let condition = &p["conditions"]["items"];
        assert_eq!(condition["properties"]["reason"]["minLength"], 1);
        assert_eq!(
            condition["properties"]["status"]["enum"],
            json!(["True", "False", "Unknown"])
        );
        let required: Vec<&str> = schema["required"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert!(required.contains(&"size"));
        assert!(
            !required.contains(&"containerPort"),
            "a defaulted field is optional"
        );
        assert!(!required.contains(&"image"));
        assert!(!required.contains(&"conditions"));
    }

    #[test]
    fn structural_json_survives_the_trip_through_jsonschemaprops() {
        let json = value::<Small>();
        let props: JSONSchemaProps = serde_json::from_value(json.clone()).unwrap();
        let back = serde_json::to_value(&props).unwrap();
        // JSONSchemaProps holds bounds as f64: compare numbers as numbers.
        fn norm(v: Value) -> Value {
            match v {
                Value::Number(n) => json!(n.as_f64().unwrap()),
                Value::Object(o) => o.into_iter().map(|(k, v)| (k, norm(v))).collect(),
                Value::Array(a) => a.into_iter().map(norm).collect(),
                v => v,
            }
        }
        assert_eq!(norm(back), norm(json));
    }

    /// Variants carrying data.
    #[derive(Deserialize, Serialize, JsonSchema)]
    #[allow(dead_code)]
    enum External {
        /// An A.
        A { a: i32 },
        /// A B.
        B(String),
    }

    /// Internally tagged.
    #[derive(Deserialize, Serialize, JsonSchema)]
    #[serde(tag = "type")]
    #[allow(dead_code)]
    enum Tagged {
        P { a: i32 },
        Q { b: String },
    }

    /// A unit variant beside a data-carrying one.
    #[derive(Deserialize, Serialize, JsonSchema)]
    #[allow(dead_code)]
    enum Mixed {
        Unit,
        Data(i32),
    }

    #[derive(Deserialize, Serialize, JsonSchema)]
    #[allow(dead_code)]
    struct Enums {
        external: External,
        tagged: Tagged,
        mixed: Option<Mixed>,
    }

    #[test]
    fn data_carrying_enums_hoist_their_fields_and_keep_a_choice_of_required_sets() {
        let p = &value::<Enums>()["properties"];
        assert_eq!(
            p["external"],
            json!({
                "description": "Variants carrying data.",
                "type": "object",
                "properties": {
                    "A": {"description": "An A.", "type": "object",
                          "properties": {"a": {"type": "integer", "format": "int32"}},
                          "required": ["a"]},
                    "B": {"description": "A B.", "type": "string"},
                },
                "oneOf": [{"required": ["A"]}, {"required": ["B"]}],
            })
        );
        assert_eq!(p["tagged"]["properties"]["type"]["enum"], json!(["P", "Q"]));
        assert_eq!(p["tagged"]["properties"]["a"]["type"], "integer");
        assert_eq!(p["tagged"]["properties"]["b"]["type"], "string");
        assert_eq!(
            p["mixed"],
            json!({"description": "A unit variant beside a data-carrying one.",
                   PRESERVE: true, "nullable": true})
        );
    }

    /// A list that ends.
    #[derive(Deserialize, Serialize, JsonSchema)]
    #[allow(dead_code)]
    struct Node {
        value: i32,
        next: Option<Box<Node>>,
    }

    #[derive(Deserialize, Serialize, JsonSchema)]
    #[allow(dead_code)]
    struct Holder {
        node: Node,
        pair: (i32, String),
        same: (i32, i32),
    }

    #[test]
    fn recursion_and_mixed_tuples_take_any_value() {
        let p = &value::<Holder>()["properties"];
        assert_eq!(p["node"]["type"], "object", "the first level is inlined");
        assert_eq!(
            p["node"]["properties"]["next"],
            json!({PRESERVE: true, "nullable": true}),
            "the recursion is cut"
        );
        assert_eq!(p["pair"]["items"], json!({PRESERVE: true}));
        assert_eq!(
            p["same"]["items"],
            json!({"type": "integer", "format": "int32"})
        );

        let root = value::<Node>();
        assert_eq!(
            root["properties"]["next"],
            json!({PRESERVE: true, "nullable": true})
        );
    }

    #[test]
    fn exclusive_bounds_take_the_openapi_v3_0_form() {
        let schema = Schema::try_from(json!({
            "type": "object",
            "properties": {"ratio": {"type": "number", "exclusiveMinimum": 0, "maximum": 1}},
        }))
        .unwrap();
        let ratio = &structural_value(schema.to_value())["properties"]["ratio"];
        assert_eq!(
            ratio,
            &json!({"type": "number", "minimum": 0, "exclusiveMinimum": true, "maximum": 1})
        );
    }

    const MC: KindInfo = KindInfo {
        group: "cache.example.com",
        version: "v1alpha1",
        kind: "Memcached",
        plural: "memcacheds",
        singular: "memcached",
        namespaced: true,
        short_names: &["mc"],
        categories: &[],
        printer_columns: &[
            PrinterColumn {
                name: "Size",
                column_type: "integer",
                json_path: ".spec.size",
                description: None,
                format: None,
                priority: 0,
            },
            PrinterColumn {
                name: "Image",
                column_type: "string",
                json_path: ".spec.image",
                description: Some("The image run"),
                format: None,
                priority: 1,
            },
        ],
        scale: None,
    };

    #[test]
    fn crd_carries_names_scope_columns_and_the_status_subresource() {
        let crd = MC.crd(
            structural_schema::<Small>(),
            Some(structural_schema::<Inner>()),
        );
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some("memcacheds.cache.example.com")
        );
        let spec = &crd.spec;
        assert_eq!(spec.group, "cache.example.com");
        assert_eq!(spec.scope, "Namespaced");
        assert_eq!(spec.names.kind, "Memcached");
        assert_eq!(spec.names.list_kind.as_deref(), Some("MemcachedList"));
        assert_eq!(spec.names.plural, "memcacheds");
        assert_eq!(spec.names.singular.as_deref(), Some("memcached"));
        assert_eq!(spec.names.short_names, Some(vec!["mc".to_owned()]));
        assert_eq!(spec.names.categories, None);
        let [version] = spec.versions.as_slice() else {
            panic!("one version: {:?}", spec.versions)
        };
        assert!(version.served && version.storage);
        assert_eq!(version.name, "v1alpha1");
        assert!(version.subresources.as_ref().unwrap().status.is_some());
        let columns = version.additional_printer_columns.as_ref().unwrap();
        assert_eq!(columns[0].name, "Size");
        assert_eq!(columns[0].type_, "integer");
        assert_eq!(columns[0].json_path, ".spec.size");
        assert_eq!(columns[0].priority, None);
        assert_eq!(columns[1].priority, Some(1));
        assert_eq!(columns[1].description.as_deref(), Some("The image run"));

        let root = version
            .schema
            .as_ref()
            .unwrap()
            .open_api_v3_schema
            .as_ref()
            .unwrap();
        let properties = root.properties.as_ref().unwrap();
        assert_eq!(
            properties.keys().collect::<Vec<_>>(),
            ["apiVersion", "kind", "metadata", "spec", "status"]
        );
        assert_eq!(properties["metadata"].type_.as_deref(), Some("object"));
        assert_eq!(properties["metadata"].properties, None);
        assert_eq!(root.required, Some(vec!["spec".to_owned()]));

        let without_status = MC.crd(structural_schema::<Small>(), None);
        let version = &without_status.spec.versions[0];
        assert!(version.subresources.is_none());
        let root = version
            .schema
            .as_ref()
            .unwrap()
            .open_api_v3_schema
            .as_ref()
            .unwrap();
        assert!(!root.properties.as_ref().unwrap().contains_key("status"));
    }

    #[test]
    fn a_scale_gives_the_scale_subresource_with_or_without_a_status() {
        let scale = Scale {
            spec_replicas_path: ".spec.size",
            status_replicas_path: ".status.readyReplicas",
            label_selector_path: Some(".status.selector"),
        };
        let scaled = KindInfo {
            scale: Some(scale),
            ..MC
        };
        let expected = CustomResourceSubresourceScale {
            spec_replicas_path: ".spec.size".to_owned(),
            status_replicas_path: ".status.readyReplicas".to_owned(),
            label_selector_path: Some(".status.selector".to_owned()),
        };
        let with_status = scaled.crd(
            structural_schema::<Small>(),
            Some(structural_schema::<Inner>()),
        );
        let subresources = with_status.spec.versions[0].subresources.clone().unwrap();
        assert_eq!(subresources.scale, Some(expected.clone()));
        assert!(subresources.status.is_some());

        let without_status = scaled.crd(structural_schema::<Small>(), None);
        let subresources = without_status.spec.versions[0]
            .subresources
            .clone()
            .unwrap();
        assert_eq!(subresources.scale, Some(expected));
        assert!(subresources.status.is_none());
        let yaml = to_yaml(&without_status);
        assert!(
            yaml.contains(
                "  subresources:\n      scale:\n        labelSelectorPath: .status.selector\n        specReplicasPath: .spec.size\n        statusReplicasPath: .status.readyReplicas\n"
            ),
            "{yaml}"
        );
    }

    #[test]
    fn yaml_is_deterministic_and_reads_back() {
        let crd = || {
            MC.crd(
                structural_schema::<Small>(),
                Some(structural_schema::<Inner>()),
            )
        };
        let yaml = to_yaml(&crd());
        assert_eq!(yaml, to_yaml(&crd()));
        assert!(
            yaml.contains(" maximum: 10\n") && !yaml.contains(".0\n"),
            "{yaml}"
        );
        assert!(
            yaml.starts_with(
                "---\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n"
            ),
            "{yaml}"
        );
        let back: CustomResourceDefinition = serde_saphyr::from_str(&yaml).unwrap();
        assert_eq!(back, crd());
        let schema = &back.spec.versions[0]
            .schema
            .as_ref()
            .unwrap()
            .open_api_v3_schema;
        let note = &schema.as_ref().unwrap().properties.as_ref().unwrap()["spec"]
            .properties
            .as_ref()
            .unwrap()["note"];
        assert_eq!(
            note.description.as_deref(),
            Some(
                "A note: with a colon, a # hash and \"quotes\".\n\n- A second paragraph, as a list."
            )
        );
    }

    /// A cluster-scoped kind with no status, derived inside this crate.
    #[derive(
        CustomResource, Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema,
    )]
    #[resource(
        group = "unit.example.com",
        version = "v1beta1",
        kind = "Policy",
        category = "all",
        derive = "PartialEq",
        crate = "crate"
    )]
    pub struct PolicySpec {
        /// Rules.
        pub rules: Vec<String>,
    }

    /// A namespaced kind with a status.
    #[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
    #[resource(
        group = "unit.example.com",
        version = "v1",
        kind = "Thing",
        namespaced,
        status = "ThingStatus",
        plural = "thingies",
        singular = "thingy",
        scale(
            spec_replicas_path = ".spec.size",
            status_replicas_path = ".status.replicas"
        ),
        crate = "crate"
    )]
    pub struct ThingSpec {
        /// Size.
        pub size: i32,
    }

    /// Thing status.
    #[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
    pub struct ThingStatus {
        /// Ready.
        pub ready: bool,
    }

    fn cacheable<K: informer::Object + crate::client::WatchObject>() {}

    #[test]
    fn derived_kinds_implement_what_the_client_and_informers_need() {
        use k8s_openapi::{ClusterResourceScope, ListableResource, NamespaceResourceScope};
        cacheable::<Thing>();
        cacheable::<crate::client::Raw<Thing>>();
        cacheable::<Policy>();

        assert_eq!(Thing::API_VERSION, "unit.example.com/v1");
        assert_eq!(Thing::URL_PATH_SEGMENT, "thingies");
        assert_eq!(Thing::LIST_KIND, "ThingList");
        let same = |a: std::any::TypeId, b: std::any::TypeId| a == b;
        assert!(same(
            std::any::TypeId::of::<<Thing as k8s_openapi::Resource>::Scope>(),
            std::any::TypeId::of::<NamespaceResourceScope>()
        ));
        assert!(same(
            std::any::TypeId::of::<<Policy as k8s_openapi::Resource>::Scope>(),
            std::any::TypeId::of::<ClusterResourceScope>()
        ));
        assert_eq!(Policy::URL_PATH_SEGMENT, "policies");
        assert_eq!(Thing::INFO.crd_name(), "thingies.unit.example.com");

        let crd = Thing::crd();
        assert_eq!(crd.spec.names.singular.as_deref(), Some("thingy"));
        let scale = crd.spec.versions[0]
            .subresources
            .clone()
            .unwrap()
            .scale
            .unwrap();
        assert_eq!(
            (
                scale.spec_replicas_path.as_str(),
                scale.status_replicas_path.as_str()
            ),
            (".spec.size", ".status.replicas")
        );
        assert_eq!(scale.label_selector_path, None);
        assert_eq!(crd.spec.scope, "Namespaced");
        let crd = Policy::crd();
        assert_eq!(crd.spec.scope, "Cluster");
        assert_eq!(crd.spec.names.categories, Some(vec!["all".to_owned()]));
        assert!(crd.spec.versions[0].subresources.is_none());
    }

    #[test]
    fn derived_kinds_write_their_type_and_leave_out_an_absent_status() {
        let mut thing = Thing::new("t", ThingSpec { size: 2 });
        assert_eq!(thing.metadata.name.as_deref(), Some("t"));
        assert_eq!(
            serde_json::to_value(&thing).unwrap(),
            json!({"apiVersion": "unit.example.com/v1", "kind": "Thing",
                   "metadata": {"name": "t"}, "spec": {"size": 2}})
        );
        thing.status = Some(ThingStatus { ready: true });
        let json = serde_json::to_string(&thing).unwrap();
        assert!(json.starts_with(r#"{"apiVersion":"unit.example.com/v1","kind":"Thing","#));
        assert!(json.ends_with(r#""status":{"ready":true}}"#), "{json}");

        let read: Thing = serde_json::from_str(
            r#"{"apiVersion": "other/v9", "kind": "Other", "spec": {"size": 5}, "extra": 1}"#,
        )
        .unwrap();
        assert_eq!(read.spec.size, 5);
        assert!(read.status.is_none());
        assert_eq!(read.metadata, ObjectMeta::default());
        assert!(
            serde_json::from_str::<Thing>(r#"{"metadata": {}}"#).is_err(),
            "spec is required"
        );

        let policy = Policy::new("p", PolicySpec::default());
        let back: Policy = serde_json::from_value(serde_json::to_value(&policy).unwrap()).unwrap();
        assert_eq!(back, policy);
        assert_eq!(CustomResource::spec(&back), &PolicySpec::default());
    }

    #[test]
    fn conditions_schema_is_a_map_keyed_by_type() {
        let schema = conditions_schema(&mut generator()).to_value();
        let value = structural_value(schema);
        assert_eq!(value["x-kubernetes-list-type"], "map");
        assert_eq!(value["x-kubernetes-list-map-keys"], json!(["type"]));
        assert_eq!(
            value["items"]["required"],
            json!(["lastTransitionTime", "message", "reason", "status", "type"])
        );
        assert_eq!(value["items"]["properties"]["type"]["maxLength"], 316);
    }

    #[test]
    fn established_needs_the_condition_true() {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
            CustomResourceDefinitionCondition, CustomResourceDefinitionStatus,
        };
        let with = |status: &str| CustomResourceDefinition {
            status: Some(CustomResourceDefinitionStatus {
                conditions: Some(vec![CustomResourceDefinitionCondition {
                    type_: "Established".to_owned(),
                    status: status.to_owned(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(is_established(&with("True")));
        assert!(!is_established(&with("False")));
        assert!(!is_established(&CustomResourceDefinition::default()));
    }
}
