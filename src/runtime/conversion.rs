//! CRD conversion webhooks: the `apiextensions.k8s.io/v1` `ConversionReview`, and a typed
//! handler that converts custom resources between versions through one hub version.
//!
//! A CRD serving several versions stores each object in one of them (see
//! [`crd::merge`](super::crd::merge)); the API server converts it to the version a client
//! asks for, and a written object back to the stored one. For versions whose shapes differ,
//! it asks a *conversion webhook*: it POSTs a [`ConversionReview`] naming the version it
//! wants and the objects to convert, and the webhook answers with the converted objects or
//! a failure. This module is controller-runtime's `pkg/webhook/conversion`:
//!
//! * one version of each kind is the **hub** (usually the storage version, the one the
//!   controller reconciles); every other version is a **spoke** that converts to the hub
//!   with `Hub: TryFrom<Spoke>` and from it with `Spoke: TryFrom<Hub>` (a `From` impl is
//!   enough where nothing can fail). Two spokes convert through the hub, so `n` versions
//!   need `n - 1` pairs of conversions, not `n²`;
//! * [`Conversion`] holds them: `Conversion::new().spoke::<Hub, Spoke>()` for each spoke of
//!   each kind;
//! * [`WebhookServer::conversion`](super::webhook::WebhookServer::conversion) serves it on
//!   [`CONVERT_PATH`] (`/convert`), beside the admission webhooks, with the same certificate;
//! * [`crd::webhook_conversion`](super::crd::webhook_conversion) points the CRD at it.
//!
//! ```text
//!  kube-apiserver ──POST ConversionReview{desiredAPIVersion, objects}──▶ /convert
//!                                                                         │ per object:
//!     ◀── ConversionReview{convertedObjects, result: Success | Failure} ──┤ decode as its
//!                                                                         ▼ version's type
//!      spoke ──TryFrom──▶ hub ──TryFrom──▶ desired version (either step skipped at the hub)
//! ```
//!
//! A conversion that fails (a conversion function's `Err`, an object that does not decode
//! as its version's type, a version or kind nobody registered, a panic) fails the whole
//! review: the answer carries `result: {status: Failure, message}`, never an HTTP error, and
//! the API server refuses the client's request with that message (`conversion webhook for
//! example.com/v2, Kind=Widget failed: <message>`). The metadata of each object comes back
//! as it was sent, but for the labels and annotations a conversion set (where a version
//! can keep a field the other version lacks; the API server allows a webhook to change
//! nothing else), and each converted object carries the desired `apiVersion`.
//!
//! # Example: a second version of a kind
//!
//! ```
//! use controller_runtime::CustomResource;
//! use controller_runtime::runtime::conversion::{Conversion, ConversionReview};
//! use controller_runtime::runtime::crd;
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//! use serde_json::json;
//!
//! /// The first version, stored and reconciled: the hub.
//! mod v1 {
//!     use super::*;
//!
//!     /// A widget.
//!     #[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
//!     #[resource(group = "example.com", version = "v1", kind = "Widget", namespaced)]
//!     pub struct WidgetSpec {
//!         /// How many.
//!         pub count: i32,
//!     }
//! }
//!
//! /// The second version, where `count` is called `replicas`: a spoke.
//! mod v2 {
//!     use super::*;
//!
//!     /// A widget.
//!     #[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
//!     #[resource(group = "example.com", version = "v2", kind = "Widget", namespaced)]
//!     pub struct WidgetSpec {
//!         /// How many.
//!         pub replicas: i32,
//!     }
//!
//!     impl From<v1::Widget> for Widget {
//!         fn from(hub: v1::Widget) -> Widget {
//!             Widget { metadata: hub.metadata, spec: WidgetSpec { replicas: hub.spec.count } }
//!         }
//!     }
//!
//!     impl From<Widget> for v1::Widget {
//!         fn from(spoke: Widget) -> v1::Widget {
//!             v1::Widget { metadata: spoke.metadata, spec: v1::WidgetSpec { count: spoke.spec.replicas } }
//!         }
//!     }
//! }
//!
//! fn main() {
//!     // The CRD serves both versions and stores v1 ...
//!     let crd = crd::merge([v1::Widget::crd(), v2::Widget::crd()], "v1").unwrap();
//!     // ... and the webhook converts between them (served with
//!     // `WebhookServer::new(options).conversion(conversion)`).
//!     let conversion = Conversion::new().spoke::<v1::Widget, v2::Widget>();
//!
//!     let review: ConversionReview = serde_json::from_value(json!({
//!         "apiVersion": "apiextensions.k8s.io/v1",
//!         "kind": "ConversionReview",
//!         "request": {
//!             "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
//!             "desiredAPIVersion": "example.com/v2",
//!             "objects": [{
//!                 "apiVersion": "example.com/v1",
//!                 "kind": "Widget",
//!                 "metadata": {"name": "w", "namespace": "default", "uid": "0a5b"},
//!                 "spec": {"count": 3},
//!             }],
//!         },
//!     }))
//!     .unwrap();
//!     let response = conversion.review(&review.request.unwrap());
//!     assert_eq!(response.result.status.as_deref(), Some("Success"));
//!     assert_eq!(
//!         response.converted_objects,
//!         [json!({
//!             "apiVersion": "example.com/v2",
//!             "kind": "Widget",
//!             "metadata": {"name": "w", "namespace": "default", "uid": "0a5b"},
//!             "spec": {"replicas": 3},
//!         })]
//!     );
//! }
//! ```

use std::any::TypeId;
use std::collections::BTreeMap;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use bytes::Bytes;
use http::StatusCode;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::crd::CustomResource;
use super::webhook::Endpoint;

/// The path the conversion webhook is served on, as controller-runtime serves it.
pub const CONVERT_PATH: &str = "/convert";

/// The `apiVersion` of the reviews the API server sends (`conversionReviewVersions: [v1]`).
pub const CONVERSION_V1: &str = "apiextensions.k8s.io/v1";

/// The older version, same shape, still accepted and answered in kind.
pub const CONVERSION_V1BETA1: &str = "apiextensions.k8s.io/v1beta1";

// === ConversionReview (apiextensions.k8s.io/v1) ===

/// An `apiextensions.k8s.io/v1` `ConversionReview`: the API server sends one with a
/// `request`, the webhook answers with one holding a `response`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConversionReview {
    /// `apiextensions.k8s.io/v1` (or `v1beta1`); the answer repeats the request's.
    #[serde(default)]
    pub api_version: String,
    /// `ConversionReview`.
    #[serde(default)]
    pub kind: String,
    /// What is asked, in a review from the API server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<ConversionRequest>,
    /// The answer, in a review from the webhook.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<ConversionResponse>,
}

/// The objects the API server asks a webhook to convert.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConversionRequest {
    /// Identifies this call; the response must carry it back.
    pub uid: String,
    /// The `apiVersion` to convert every object to (`example.com/v2`).
    #[serde(rename = "desiredAPIVersion")]
    pub desired_api_version: String,
    /// The objects, each in its own `apiVersion` (all of one kind).
    #[serde(default)]
    pub objects: Vec<Value>,
}

/// A webhook's answer: every object converted, in order, or a failure saying why not.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConversionResponse {
    /// The request's `uid`.
    pub uid: String,
    /// The converted objects, one per object of the request and in its order; empty on
    /// failure. (The API server's request carries an empty response, where this is `null`.)
    #[serde(default, deserialize_with = "null_as_empty")]
    pub converted_objects: Vec<Value>,
    /// `status: Success`, or `status: Failure` with a `message` the API server passes to
    /// the client.
    pub result: Status,
}

impl ConversionResponse {
    /// Every object converted: `converted_objects` with `result.status: Success`.
    pub fn success(uid: &str, converted_objects: Vec<Value>) -> Self {
        ConversionResponse {
            uid: uid.to_owned(),
            converted_objects,
            result: Status {
                status: Some("Success".to_owned()),
                ..Status::default()
            },
        }
    }

    /// No object converted: `result.status: Failure` with `message`.
    pub fn failure(uid: &str, message: impl Into<String>) -> Self {
        ConversionResponse {
            uid: uid.to_owned(),
            converted_objects: Vec::new(),
            result: Status {
                status: Some("Failure".to_owned()),
                message: Some(message.into()),
                ..Status::default()
            },
        }
    }
}

/// Reads `null` as an empty list.
fn null_as_empty<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<Value>, D::Error> {
    Option::<Vec<Value>>::deserialize(d).map(Option::unwrap_or_default)
}

// === Conversion ===

/// One step of a conversion, type-erased: an object of one version, as JSON, to another.
type Step = fn(&Value) -> Result<Value, String>;

/// How one spoke version converts to and from its kind's hub.
struct SpokeSteps {
    to_hub: Step,
    from_hub: Step,
}

/// The versions of one kind: its hub and its spokes.
struct Versions {
    hub_version: &'static str,
    hub_type: TypeId,
    hub_name: &'static str,
    /// Spoke version → its conversions.
    spokes: BTreeMap<&'static str, SpokeSteps>,
}

impl Versions {
    fn spoke(&self, version: &str, kind: &str, group: &str) -> Result<&SpokeSteps, String> {
        self.spokes.get(version).ok_or_else(|| {
            let mut known = vec![self.hub_version];
            known.extend(self.spokes.keys());
            format!(
                "no conversion is registered for version {version} of {kind}.{group}; the \
                 webhook converts {}",
                known.join(", ")
            )
        })
    }
}

/// The conversions a conversion webhook performs: for each kind, a hub version and the spoke
/// versions that convert to and from it (see the [module docs](self)).
///
/// Build it with [`spoke`](Self::spoke) for each spoke, and serve it with
/// [`WebhookServer::conversion`](super::webhook::WebhookServer::conversion); one
/// `Conversion` holds every kind the server converts, since the API server calls one path.
#[derive(Default)]
pub struct Conversion {
    /// (group, kind) → its versions.
    kinds: BTreeMap<(String, String), Versions>,
}

impl fmt::Debug for Conversion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut map = f.debug_map();
        for ((group, kind), versions) in &self.kinds {
            let spokes: Vec<&str> = versions.spokes.keys().copied().collect();
            map.entry(
                &format!("{kind}.{group}"),
                &format!("hub {}, spokes {spokes:?}", versions.hub_version),
            );
        }
        map.finish()
    }
}

impl Conversion {
    /// No conversions yet.
    pub fn new() -> Self {
        Conversion::default()
    }

    /// Converts between `Hub` and `Spoke`, two versions of one kind: a `Spoke` object
    /// becomes a `Hub` through `Hub::try_from`, a `Hub` becomes a `Spoke` through
    /// `Spoke::try_from`, and two spokes of the kind convert through their hub. An `Err`
    /// of either fails the review with the error's text.
    ///
    /// Each conversion builds the whole target object, its `metadata` too (move the
    /// source's in); of the metadata it returns, only the labels and annotations are kept
    /// (see the [module docs](self)).
    ///
    /// # Panics
    ///
    /// When `Hub` and `Spoke` are not two versions of one kind (another group or kind, or
    /// the same version), when the kind already has another hub, or when `Spoke` is
    /// registered twice: mistakes in the program, caught when it builds its webhook server.
    #[must_use]
    pub fn spoke<Hub, Spoke>(mut self) -> Self
    where
        Hub: CustomResource + TryFrom<Spoke>,
        <Hub as TryFrom<Spoke>>::Error: fmt::Display,
        Spoke: CustomResource + TryFrom<Hub>,
        <Spoke as TryFrom<Hub>>::Error: fmt::Display,
    {
        let (hub, spoke) = (std::any::type_name::<Hub>(), std::any::type_name::<Spoke>());
        assert!(
            Hub::GROUP == Spoke::GROUP && Hub::KIND == Spoke::KIND,
            "Conversion::spoke::<{hub}, {spoke}>: {} and {} are not versions of one kind",
            Hub::API_VERSION,
            Spoke::API_VERSION,
        );
        assert!(
            Hub::VERSION != Spoke::VERSION,
            "Conversion::spoke::<{hub}, {spoke}>: both are version {}",
            Hub::VERSION,
        );
        let versions = self
            .kinds
            .entry((Hub::GROUP.to_owned(), Hub::KIND.to_owned()))
            .or_insert_with(|| Versions {
                hub_version: Hub::VERSION,
                hub_type: TypeId::of::<Hub>(),
                hub_name: hub,
                spokes: BTreeMap::new(),
            });
        assert!(
            versions.hub_type == TypeId::of::<Hub>(),
            "Conversion::spoke::<{hub}, {spoke}>: {}.{} already has the hub {}",
            Hub::KIND,
            Hub::GROUP,
            versions.hub_name,
        );
        let steps = SpokeSteps {
            to_hub: to_hub::<Hub, Spoke>,
            from_hub: from_hub::<Hub, Spoke>,
        };
        let previous = versions.spokes.insert(Spoke::VERSION, steps);
        assert!(
            previous.is_none(),
            "Conversion::spoke::<{hub}, {spoke}>: version {} of {}.{} is registered twice",
            Spoke::VERSION,
            Hub::KIND,
            Hub::GROUP,
        );
        self
    }

    /// Converts one object (JSON, with its `apiVersion` and `kind`) to
    /// `desired_api_version`, through its kind's hub; an object already in that version
    /// comes back unchanged.
    ///
    /// # Errors
    ///
    /// A message naming the object and why it could not be converted: no `apiVersion` or
    /// `kind`, another group, a kind or version not registered, an object that does not
    /// decode as its version's type, or a conversion's own error.
    pub fn convert(&self, object: &Value, desired_api_version: &str) -> Result<Value, String> {
        let text = |key: &str| object.get(key).and_then(Value::as_str);
        let (Some(api_version), Some(kind)) = (text("apiVersion"), text("kind")) else {
            return Err("an object without apiVersion and kind cannot be converted".to_owned());
        };
        let meta = |key: &str| object.pointer(&format!("/metadata/{key}"))?.as_str();
        let name = match (meta("namespace"), meta("name")) {
            (Some(ns), Some(name)) => format!("{ns}/{name}"),
            (None, Some(name)) => name.to_owned(),
            _ => "(unnamed)".to_owned(),
        };
        self.convert_kind(object, api_version, kind, desired_api_version)
            .map_err(|e| {
                format!("converting {kind} {name} from {api_version} to {desired_api_version}: {e}")
            })
    }

    fn convert_kind(
        &self,
        object: &Value,
        api_version: &str,
        kind: &str,
        desired_api_version: &str,
    ) -> Result<Value, String> {
        let (group, from) = split_api_version(api_version);
        let (desired_group, to) = split_api_version(desired_api_version);
        if group != desired_group {
            return Err(format!(
                "a conversion keeps the group; {desired_api_version} is in another"
            ));
        }
        let versions = self
            .kinds
            .get(&(group.to_owned(), kind.to_owned()))
            .ok_or_else(|| format!("no conversion is registered for {kind}.{group}"))?;
        if from == to {
            return Ok(object.clone());
        }
        let hub = if from == versions.hub_version {
            object.clone()
        } else {
            (versions.spoke(from, kind, group)?.to_hub)(object)?
        };
        let mut converted = if to == versions.hub_version {
            hub
        } else {
            (versions.spoke(to, kind, group)?.from_hub)(&hub)?
        };
        keep_metadata(object, &mut converted);
        Ok(converted)
    }

    /// Answers a review: every object of `request` converted, or the first failure (a
    /// panicking conversion included) as `result: {status: Failure, message}`.
    pub fn review(&self, request: &ConversionRequest) -> ConversionResponse {
        let converted = catch_unwind(AssertUnwindSafe(|| {
            request
                .objects
                .iter()
                .map(|object| self.convert(object, &request.desired_api_version))
                .collect::<Result<Vec<_>, _>>()
        }))
        .unwrap_or_else(|panic| {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a non-string payload".to_owned());
            Err(format!("the conversion panicked: {what}"))
        });
        match converted {
            Ok(objects) => {
                tracing::debug!(
                    uid = %request.uid,
                    desired = %request.desired_api_version,
                    objects = objects.len(),
                    "conversion reviewed"
                );
                ConversionResponse::success(&request.uid, objects)
            }
            Err(message) => {
                tracing::warn!(
                    uid = %request.uid,
                    desired = %request.desired_api_version,
                    %message,
                    "conversion failed"
                );
                ConversionResponse::failure(&request.uid, message)
            }
        }
    }

    /// The webhook server's endpoint for these conversions.
    pub(crate) fn endpoint(self) -> Endpoint {
        Arc::new(move |content_type: &str, body: &[u8]| answer(&self, content_type, body))
    }
}

/// `group/version` (or `version` for the core group) as (group, version).
fn split_api_version(api_version: &str) -> (&str, &str) {
    api_version.rsplit_once('/').unwrap_or(("", api_version))
}

fn to_hub<Hub, Spoke>(object: &Value) -> Result<Value, String>
where
    Hub: CustomResource + TryFrom<Spoke>,
    <Hub as TryFrom<Spoke>>::Error: fmt::Display,
    Spoke: CustomResource,
{
    let spoke: Spoke = decode(object)?;
    let hub = Hub::try_from(spoke).map_err(|e| e.to_string())?;
    encode(&hub)
}

fn from_hub<Hub, Spoke>(object: &Value) -> Result<Value, String>
where
    Hub: CustomResource,
    Spoke: CustomResource + TryFrom<Hub>,
    <Spoke as TryFrom<Hub>>::Error: fmt::Display,
{
    let hub: Hub = decode(object)?;
    let spoke = Spoke::try_from(hub).map_err(|e| e.to_string())?;
    encode(&spoke)
}

fn decode<K: CustomResource>(object: &Value) -> Result<K, String> {
    K::deserialize(object).map_err(|e| format!("decoding it as {}: {e}", K::API_VERSION))
}

fn encode<K: CustomResource>(object: &K) -> Result<Value, String> {
    serde_json::to_value(object).map_err(|e| format!("encoding it as {}: {e}", K::API_VERSION))
}

/// Gives `converted` the metadata of `original`, but for labels and annotations the
/// conversion changed: the API server takes nothing else from a webhook, and a typed round
/// trip could respell what it does not model.
fn keep_metadata(original: &Value, converted: &mut Value) {
    let Some(Value::Object(mut metadata)) = original.get("metadata").cloned() else {
        return;
    };
    let set = |value: Option<&Value>| -> Option<Value> {
        value
            .filter(|v| v.as_object().is_some_and(|o| !o.is_empty()))
            .cloned()
    };
    for key in ["labels", "annotations"] {
        let new = set(converted.pointer(&format!("/metadata/{key}")));
        if new != set(metadata.get(key)) {
            match new {
                Some(value) => metadata.insert(key.to_owned(), value),
                None => metadata.remove(key),
            };
        }
    }
    if let Some(object) = converted.as_object_mut() {
        object.insert("metadata".to_owned(), Value::Object(metadata));
    }
}

// === HTTP ===

/// Answers a request body on [`CONVERT_PATH`]: `200` and the answering review, or `400` and
/// why the body is not a review.
pub(crate) fn answer(
    conversion: &Conversion,
    content_type: &str,
    body: &[u8],
) -> (StatusCode, Bytes) {
    let bad = |message: String| (StatusCode::BAD_REQUEST, Bytes::from(message + "\n"));
    let media_type = content_type.split(';').next().unwrap_or("").trim();
    if !media_type.eq_ignore_ascii_case("application/json") {
        return bad(format!(
            "contentType={content_type:?}, expected application/json"
        ));
    }
    let review: ConversionReview = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) => return bad(format!("the request body is not a ConversionReview: {e}")),
    };
    if review.kind != "ConversionReview"
        || (review.api_version != CONVERSION_V1 && review.api_version != CONVERSION_V1BETA1)
    {
        return bad(format!(
            "expected a {CONVERSION_V1} ConversionReview, got apiVersion {:?} kind {:?}",
            review.api_version, review.kind
        ));
    }
    let Some(request) = review.request else {
        return bad("the ConversionReview holds no request".to_owned());
    };
    let answer = ConversionReview {
        api_version: review.api_version,
        kind: review.kind,
        request: None,
        response: Some(conversion.review(&request)),
    };
    let bytes = serde_json::to_vec(&answer).expect("a ConversionReview always encodes");
    (StatusCode::OK, Bytes::from(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A kind in three versions: v1 the hub; v2 renames `volume` to `capacity` and keeps
    /// v1's `color`, which it lacks, in an annotation; v3 counts in liters.
    mod flask {
        use std::collections::BTreeMap;

        use schemars::JsonSchema;
        use serde::{Deserialize, Serialize};

        pub const COLOR: &str = "unit.example.com/color";

        pub mod v1 {
            use super::*;

            /// The hub.
            #[derive(
                crate::CustomResource, Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema,
            )]
            #[resource(
                group = "unit.example.com",
                version = "v1",
                kind = "Flask",
                namespaced,
                crate = "crate"
            )]
            pub struct FlaskSpec {
                /// Millilitres.
                pub volume: i32,
                /// The color, if any.
                #[serde(default, skip_serializing_if = "Option::is_none")]
                pub color: Option<String>,
            }
        }

        pub mod v2 {
            use super::*;

            /// A spoke.
            #[derive(
                crate::CustomResource, Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema,
            )]
            #[resource(
                group = "unit.example.com",
                version = "v2",
                kind = "Flask",
                namespaced,
                crate = "crate"
            )]
            pub struct FlaskSpec {
                /// Millilitres.
                pub capacity: i32,
            }

            impl From<v1::Flask> for Flask {
                fn from(hub: v1::Flask) -> Flask {
                    let mut metadata = hub.metadata;
                    if let Some(color) = hub.spec.color {
                        metadata
                            .annotations
                            .get_or_insert_with(BTreeMap::new)
                            .insert(COLOR.to_owned(), color);
                    }
                    Flask {
                        metadata,
                        spec: FlaskSpec {
                            capacity: hub.spec.volume,
                        },
                    }
                }
            }

            impl TryFrom<Flask> for v1::Flask {
                type Error = String;

                fn try_from(spoke: Flask) -> Result<v1::Flask, String> {
                    if spoke.spec.capacity < 0 {
                        return Err(format!("capacity {} is negative", spoke.spec.capacity));
                    }
                    assert!(spoke.spec.capacity != 13, "unlucky capacity");
                    let mut metadata = spoke.metadata;
                    let color = metadata.annotations.as_mut().and_then(|a| a.remove(COLOR));
                    if metadata
                        .annotations
                        .as_ref()
                        .is_some_and(BTreeMap::is_empty)
                    {
                        metadata.annotations = None;
                    }
                    Ok(v1::Flask {
                        metadata,
                        spec: v1::FlaskSpec {
                            volume: spoke.spec.capacity,
                            color,
                        },
                    })
                }
            }
        }

        pub mod v3 {
            use super::*;

            /// Another spoke.
            #[derive(
                crate::CustomResource, Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema,
            )]
            #[resource(
                group = "unit.example.com",
                version = "v3",
                kind = "Flask",
                namespaced,
                crate = "crate"
            )]
            pub struct FlaskSpec {
                /// Litres.
                pub liters: i32,
            }

            impl From<v1::Flask> for Flask {
                fn from(hub: v1::Flask) -> Flask {
                    Flask {
                        metadata: hub.metadata,
                        spec: FlaskSpec {
                            liters: hub.spec.volume / 1000,
                        },
                    }
                }
            }

            impl From<Flask> for v1::Flask {
                fn from(spoke: Flask) -> v1::Flask {
                    v1::Flask {
                        metadata: spoke.metadata,
                        spec: v1::FlaskSpec {
                            volume: spoke.spec.liters * 1000,
                            color: None,
                        },
                    }
                }
            }

            // Direct conversions between two spokes, for a test that registers v3 as a
            // second hub (which is refused).
            impl From<v2::Flask> for Flask {
                fn from(_: v2::Flask) -> Flask {
                    unreachable!("never registered")
                }
            }

            impl From<Flask> for v2::Flask {
                fn from(_: Flask) -> v2::Flask {
                    unreachable!("never registered")
                }
            }
        }
    }

    use flask::{v1, v2, v3};

    fn conversion() -> Conversion {
        Conversion::new()
            .spoke::<v1::Flask, v2::Flask>()
            .spoke::<v1::Flask, v3::Flask>()
    }

    /// POSTs `review` as the API server does and returns the HTTP status and the answer.
    fn post(review: &Value) -> (StatusCode, Value) {
        let (status, body) = answer(
            &conversion(),
            "application/json",
            &serde_json::to_vec(review).unwrap(),
        );
        (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
    }

    /// A review as the API server sends it: with an empty `response`, whose
    /// `convertedObjects` is `null`.
    fn review(desired: &str, objects: Value) -> Value {
        json!({
            "kind": "ConversionReview",
            "apiVersion": "apiextensions.k8s.io/v1",
            "request": {
                "uid": "7f0ae93b-2c4d-4b7e-9f1a-3c2d1e0f9a8b",
                "desiredAPIVersion": desired,
                "objects": objects,
            },
            "response": {"uid": "", "convertedObjects": null, "result": {"metadata": {}}},
        })
    }

    #[test]
    fn a_review_converts_every_object_through_the_hub_and_keeps_their_metadata() {
        let request = review(
            "unit.example.com/v2",
            json!([
                {
                    "apiVersion": "unit.example.com/v1",
                    "kind": "Flask",
                    "metadata": {
                        "name": "a", "namespace": "lab", "uid": "u-a",
                        "resourceVersion": "41", "generation": 2,
                        "creationTimestamp": "2026-11-28T10:00:00Z",
                        "labels": {"shelf": "top"},
                        "aFieldObjectMetaLacks": "kept",
                    },
                    "spec": {"volume": 750, "color": "amber"},
                },
                {
                    "apiVersion": "unit.example.com/v3",
                    "kind": "Flask",
                    "metadata": {"name": "b", "namespace": "lab", "annotations": {"note": "x"}},
                    "spec": {"liters": 2},
                },
            ]),
        );
        let (status, answer) = post(&request);
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            answer,
            json!({
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "ConversionReview",
                "response": {
                    "uid": "7f0ae93b-2c4d-4b7e-9f1a-3c2d1e0f9a8b",
                    "convertedObjects": [
                        {
                            "apiVersion": "unit.example.com/v2",
                            "kind": "Flask",
                            "metadata": {
                                "name": "a", "namespace": "lab", "uid": "u-a",
                                "resourceVersion": "41", "generation": 2,
                                "creationTimestamp": "2026-11-28T10:00:00Z",
                                "labels": {"shelf": "top"},
                                "annotations": {flask::COLOR: "amber"},
                                "aFieldObjectMetaLacks": "kept",
                            },
                            "spec": {"capacity": 750},
                        },
                        {
                            "apiVersion": "unit.example.com/v2",
                            "kind": "Flask",
                            "metadata": {"name": "b", "namespace": "lab", "annotations": {"note": "x"}},
                            "spec": {"capacity": 2000},
                        },
                    ],
                    "result": {"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Success"},
                },
            })
        );
    }

    #[test]
    fn a_failed_conversion_fails_the_whole_review_with_its_message() {
        let request = review(
            "unit.example.com/v1",
            json!([
                {"apiVersion": "unit.example.com/v2", "kind": "Flask",
                 "metadata": {"name": "fine", "namespace": "lab"}, "spec": {"capacity": 1}},
                {"apiVersion": "unit.example.com/v2", "kind": "Flask",
                 "metadata": {"name": "b", "namespace": "lab"}, "spec": {"capacity": -1}},
            ]),
        );
        let (status, answer) = post(&request);
        assert_eq!(
            status,
            StatusCode::OK,
            "a failure is reported in the review"
        );
        assert_eq!(
            answer,
            json!({
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "ConversionReview",
                "response": {
                    "uid": "7f0ae93b-2c4d-4b7e-9f1a-3c2d1e0f9a8b",
                    "convertedObjects": [],
                    "result": {
                        "apiVersion": "v1", "kind": "Status", "metadata": {},
                        "status": "Failure",
                        "message": "converting Flask lab/b from unit.example.com/v2 to unit.example.com/v1: capacity -1 is negative",
                    },
                },
            })
        );
    }

    fn failure(desired: &str, object: Value) -> String {
        let response = conversion().review(&ConversionRequest {
            uid: "u".to_owned(),
            desired_api_version: desired.to_owned(),
            objects: vec![object],
        });
        assert_eq!(response.result.status.as_deref(), Some("Failure"));
        assert!(response.converted_objects.is_empty());
        response.result.message.unwrap()
    }

    #[test]
    fn what_cannot_be_converted_is_named_with_the_reason() {
        let flask = |api_version: &str, spec: Value| {
            json!({"apiVersion": api_version, "kind": "Flask",
                   "metadata": {"name": "f"}, "spec": spec})
        };
        let cases = [
            (
                "unit.example.com/v9",
                flask("unit.example.com/v1", json!({"volume": 1})),
                "converting Flask f from unit.example.com/v1 to unit.example.com/v9: no conversion is registered for version v9 of Flask.unit.example.com; the webhook converts v1, v2, v3",
            ),
            (
                "unit.example.com/v1",
                flask("unit.example.com/v2", json!({"volume": 1})),
                "converting Flask f from unit.example.com/v2 to unit.example.com/v1: decoding it as unit.example.com/v2: missing field `capacity`",
            ),
            (
                "other.example.com/v1",
                flask("unit.example.com/v2", json!({"capacity": 1})),
                "converting Flask f from unit.example.com/v2 to other.example.com/v1: a conversion keeps the group; other.example.com/v1 is in another",
            ),
            (
                "unit.example.com/v1",
                json!({"apiVersion": "unit.example.com/v2", "kind": "Beaker", "metadata": {"name": "f"}}),
                "converting Beaker f from unit.example.com/v2 to unit.example.com/v1: no conversion is registered for Beaker.unit.example.com",
            ),
            (
                "unit.example.com/v1",
                json!({"kind": "Flask"}),
                "an object without apiVersion and kind cannot be converted",
            ),
            (
                "unit.example.com/v1",
                flask("unit.example.com/v2", json!({"capacity": 13})),
                "the conversion panicked: unlucky capacity",
            ),
        ];
        for (desired, object, expected) in cases {
            assert_eq!(failure(desired, object), expected);
        }
    }

    #[test]
    fn conversions_round_trip_without_loss_both_ways() {
        let c = conversion();
        let hub = json!({"apiVersion": "unit.example.com/v1", "kind": "Flask",
                         "metadata": {"name": "f", "namespace": "lab", "annotations": {"keep": "me"}},
                         "spec": {"volume": 250, "color": "blue"}});
        let spoke = c.convert(&hub, "unit.example.com/v2").unwrap();
        assert_eq!(
            spoke["metadata"]["annotations"],
            json!({"keep": "me", flask::COLOR: "blue"})
        );
        assert_eq!(c.convert(&spoke, "unit.example.com/v1").unwrap(), hub);

        let spoke = json!({"apiVersion": "unit.example.com/v2", "kind": "Flask",
                           "metadata": {"name": "f", "annotations": {flask::COLOR: "red"}},
                           "spec": {"capacity": 5}});
        let hub = c.convert(&spoke, "unit.example.com/v1").unwrap();
        assert_eq!(hub["spec"], json!({"volume": 5, "color": "red"}));
        assert_eq!(
            hub["metadata"],
            json!({"name": "f"}),
            "the annotation became a field"
        );
        assert_eq!(c.convert(&hub, "unit.example.com/v2").unwrap(), spoke);

        // The same version: unchanged, even where the types would not decode it.
        let odd = json!({"apiVersion": "unit.example.com/v2", "kind": "Flask", "spec": {}});
        assert_eq!(c.convert(&odd, "unit.example.com/v2").unwrap(), odd);
    }

    #[test]
    fn bodies_that_are_not_conversion_reviews_get_400_and_v1beta1_is_answered_in_kind() {
        let c = conversion();
        let (status, body) = answer(&c, "text/plain", b"{}");
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(
            body,
            "contentType=\"text/plain\", expected application/json\n"
        );
        let (status, body) = answer(&c, "application/json", b"[1]");
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(
            String::from_utf8_lossy(&body)
                .starts_with("the request body is not a ConversionReview: "),
            "{body:?}"
        );
        let admission = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                               "request": {"uid": "u", "desiredAPIVersion": "x/v1"}});
        let (status, body) = answer(&c, "application/json", admission.to_string().as_bytes());
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(
            body,
            "expected a apiextensions.k8s.io/v1 ConversionReview, got apiVersion \"admission.k8s.io/v1\" kind \"AdmissionReview\"\n"
        );
        let empty = json!({"apiVersion": CONVERSION_V1, "kind": "ConversionReview"});
        let (status, body) = answer(&c, "application/json", empty.to_string().as_bytes());
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(body, "the ConversionReview holds no request\n");

        let mut old = review("unit.example.com/v3", json!([]));
        old["apiVersion"] = json!(CONVERSION_V1BETA1);
        let (status, answer) = post(&old);
        assert_eq!(status, StatusCode::OK);
        assert_eq!(answer["apiVersion"], CONVERSION_V1BETA1);
        assert_eq!(answer["response"]["convertedObjects"], json!([]));
        assert_eq!(answer["response"]["result"]["status"], "Success");
    }

    /// Another kind, convertible to a Flask (wrongly).
    #[derive(crate::CustomResource, Clone, Debug, Deserialize, Serialize, schemars::JsonSchema)]
    #[resource(
        group = "unit.example.com",
        version = "v1",
        kind = "Beaker",
        crate = "crate"
    )]
    pub struct BeakerSpec {}

    impl From<Beaker> for v1::Flask {
        fn from(_: Beaker) -> v1::Flask {
            unreachable!("never registered")
        }
    }

    impl From<v1::Flask> for Beaker {
        fn from(_: v1::Flask) -> Beaker {
            unreachable!("never registered")
        }
    }

    #[test]
    #[should_panic(
        expected = "unit.example.com/v1 and unit.example.com/v1 are not versions of one kind"
    )]
    fn a_spoke_of_another_kind_is_refused() {
        let _ = Conversion::new().spoke::<v1::Flask, Beaker>();
    }

    #[test]
    #[should_panic(expected = "Flask.unit.example.com already has the hub")]
    fn a_kind_has_one_hub() {
        let _ = conversion().spoke::<v3::Flask, v2::Flask>();
    }

    #[tokio::test]
    async fn a_webhook_server_serves_one_conversion_on_convert() {
        use crate::runtime::webhook::{Error, WebhookOptions, WebhookServer};
        let server = WebhookServer::new(WebhookOptions::default()).conversion(conversion());
        assert_eq!(server.paths(), [CONVERT_PATH]);
        let twice = server.conversion(Conversion::new());
        assert!(matches!(
            twice.bind().await,
            Err(Error::DuplicatePath(path)) if path == "/convert"
        ));
    }

    #[test]
    fn the_debug_form_lists_each_kinds_hub_and_spokes() {
        assert_eq!(
            format!("{:?}", conversion()),
            r#"{"Flask.unit.example.com": "hub v1, spokes [\"v2\", \"v3\"]"}"#
        );
    }
}
