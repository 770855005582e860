//! Status writes: [`HasStatus`] for kinds with a status, and [`write()`], which patches the
//! status subresource only when the status changed.
//!
//! A reconciler computes the whole status from what it sees on every pass; writing it every
//! time would make each pass an API request and each request a watch event that runs the
//! reconciler again. [`write()`] compares the new status with the one the object shows and
//! sends nothing when they match, so a pass that changes nothing writes nothing and the
//! loop settles.
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use controller_runtime::CustomResource;
//! use controller_runtime::client::{Api, Client};
//! use controller_runtime::runtime::{ReconcileError, ResourceExt, status};
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
//! #[resource(group = "example.com", version = "v1", kind = "Website", namespaced,
//!            status = "WebsiteStatus")]
//! pub struct WebsiteSpec {
//!     pub replicas: i32,
//! }
//!
//! #[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
//! pub struct WebsiteStatus {
//!     pub ready: i32,
//! }
//!
//! async fn report(site: Arc<Website>, client: Client, ready: i32) -> Result<(), ReconcileError> {
//!     let sites = Api::<Website>::namespaced(client, site.namespace());
//!     let written = status::write(&sites, &site, &WebsiteStatus { ready }).await?;
//!     println!("status {}", if written { "written" } else { "unchanged" });
//!     Ok(())
//! }
//! ```

use k8s_openapi::Metadata;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::ops::{Error, Result};
use crate::client::{Api, Patch, PatchParams};

/// A kind with a status: `#[derive(CustomResource)]` implements it for kinds declared with
/// `status = ".."` (kube-rs's `HasStatus`).
///
/// ```
/// use controller_runtime::CustomResource;
/// use controller_runtime::runtime::status::HasStatus;
/// use schemars::JsonSchema;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
/// #[resource(group = "example.com", version = "v1", kind = "Job", namespaced, status = "JobStatus")]
/// pub struct JobSpec {
///     pub runs: i32,
/// }
///
/// #[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
/// pub struct JobStatus {
///     pub done: i32,
/// }
///
/// let mut job = Job::new("nightly", JobSpec { runs: 1 });
/// assert!(job.status().is_none());
/// job.status_mut().get_or_insert_default().done = 1;
/// assert_eq!(job.status().map(|s| s.done), Some(1));
/// ```
pub trait HasStatus {
    /// The status type.
    type Status;

    /// The status; `None` until the controller first writes one.
    fn status(&self) -> Option<&Self::Status>;

    /// The status, to change.
    fn status_mut(&mut self) -> &mut Option<Self::Status>;
}

/// Writes `status` as `object`'s status through the status subresource, unless `object`
/// already shows it; returns whether it wrote.
///
/// The write is a JSON merge patch from the status `object` shows to `status` (client
/// `Status().Patch(ctx, obj, client.MergeFrom(old))` in controller-runtime): every field of
/// `status`, and `null` for each field the old status had and the new one leaves out, so
/// the object ends with exactly `status` even though a merge patch keeps what it does not
/// mention. It carries no resourceVersion: the status is this controller's own, computed
/// whole on every pass, and the last pass wins.
///
/// "Shows it" compares the two as JSON, so the status type needs no `PartialEq`.
///
/// # Errors
///
/// [`Error::NoName`] if the object has no name, [`Error::Serialize`] if a status does not
/// serialize, [`Error::Client`] if the patch is refused: 404 if the object is gone (or the
/// kind has no status subresource), 422 if the status breaks the schema.
///
/// # Cancel safety
///
/// Dropping the future after the patch was sent leaves it applied or not.
///
/// ```no_run
/// # use controller_runtime::CustomResource;
/// # use schemars::JsonSchema;
/// # use serde::{Deserialize, Serialize};
/// # #[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
/// # #[resource(group = "example.com", version = "v1", kind = "Job", namespaced, status = "JobStatus")]
/// # pub struct JobSpec { pub runs: i32 }
/// # #[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
/// # pub struct JobStatus { pub done: i32 }
/// use controller_runtime::client::Api;
/// use controller_runtime::runtime::status;
///
/// # async fn run(jobs: Api<Job>, job: Job) -> Result<(), controller_runtime::runtime::ops::Error> {
/// let mut next = job.status.clone().unwrap_or_default();
/// next.done += 1;
/// assert!(status::write(&jobs, &job, &next).await?); // changed: written
/// # Ok(())
/// # }
/// ```
pub async fn write<K>(api: &Api<K>, object: &K, status: &K::Status) -> Result<bool>
where
    K: HasStatus + k8s_openapi::Resource + Metadata<Ty = ObjectMeta> + Serialize + DeserializeOwned,
    K::Status: Serialize,
{
    let to_json = |status| {
        serde_json::to_value(status).map_err(|source| Error::Serialize {
            kind: K::KIND,
            source,
        })
    };
    let new = to_json(status)?;
    let old = match object.status() {
        Some(old) => to_json(old)?,
        None => Value::Null,
    };
    if old == new {
        return Ok(false);
    }
    let name = object
        .metadata()
        .name
        .as_deref()
        .ok_or(Error::NoName { kind: K::KIND })?;
    let patch = serde_json::json!({ "status": merge_patch(&old, new) });
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    Ok(true)
}

/// The merge patch (RFC 7386) that turns `old` into `new`, naming every field of `new`: for
/// two objects, each field of `new` (objects patched recursively) and `null` for each field
/// only `old` has; otherwise `new` itself.
fn merge_patch(old: &Value, new: Value) -> Value {
    let (Value::Object(old), Value::Object(new)) = (old, new.clone()) else {
        return new;
    };
    let mut patch: Map<String, Value> = old
        .keys()
        .filter(|key| !new.contains_key(*key))
        .map(|key| (key.clone(), Value::Null))
        .collect();
    for (key, value) in new {
        let value = match old.get(&key) {
            Some(old) => merge_patch(old, value),
            None => value,
        };
        patch.insert(key, value);
    }
    Value::Object(patch)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_merge_patch_names_every_new_field_and_nulls_the_removed_ones() {
        let old = json!({"ready": 1, "nodes": ["a"], "gone": 3, "inner": {"a": 1, "b": 2}});
        let new = json!({"ready": 2, "nodes": ["a"], "inner": {"a": 1}});
        assert_eq!(
            merge_patch(&old, new),
            json!({"ready": 2, "nodes": ["a"], "gone": null, "inner": {"a": 1, "b": null}})
        );
    }

    #[test]
    fn a_merge_patch_from_nothing_or_to_a_scalar_is_the_new_value() {
        assert_eq!(merge_patch(&Value::Null, json!({"a": 1})), json!({"a": 1}));
        assert_eq!(merge_patch(&json!({"a": 1}), json!(3)), json!(3));
    }
}
