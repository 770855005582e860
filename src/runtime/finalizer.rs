//! Finalizers: the flow that holds an object's deletion until its cleanup ran
//! ([`finalizer`]), the writes it makes ([`ensure`], [`release`]), and the in-memory edits
//! controllerutil has ([`add_finalizer`], [`remove_finalizer`], [`has_finalizer`]).
//!
//! A finalizer is a name in `metadata.finalizers` that holds a deleted object in place: the
//! server sets `metadata.deletionTimestamp` but keeps the object until the list is empty. A
//! controller that must clean up outside the object (external resources, dependents in other
//! namespaces), or must see every deletion, adds its finalizer while the object lives, does
//! its cleanup once it sees the deletion timestamp, then removes the finalizer so the
//! deletion completes.
//!
//! [`finalizer`] does all of that around a reconcile, in the shape of kube-rs's
//! `finalizer()`: the reconcile gets [`Event::Apply`] for a live object that holds the
//! finalizer and [`Event::Cleanup`] for one being deleted:
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use controller_runtime::client::{Api, Client};
//! use controller_runtime::runtime::finalizer::{Event, finalizer};
//! use controller_runtime::runtime::{Action, ReconcileError, ResourceExt};
//! use k8s_openapi::api::core::v1::ConfigMap;
//!
//! const FINALIZER: &str = "example.com/cleanup";
//!
//! async fn reconcile(cm: Arc<ConfigMap>, client: Arc<Client>) -> Result<Action, ReconcileError> {
//!     let api = Api::<ConfigMap>::namespaced((*client).clone(), cm.namespace());
//!     finalizer(&api, FINALIZER, cm, async |event| match event {
//!         Event::Apply(cm) => {
//!             println!("{} lives", cm.name());
//!             Ok(Action::done())
//!         }
//!         Event::Cleanup(cm) => {
//!             println!("{} is being deleted: clean up after it", cm.name());
//!             Ok(Action::done())
//!         }
//!     })
//!     .await
//! }
//! ```
//!
//! The in-memory functions change only the object; the caller writes it. Each returns
//! whether it changed anything, so a reconciler writes only when it must:
//!
//! ```
//! use controller_runtime::runtime::finalizer::{add_finalizer, has_finalizer, remove_finalizer};
//! use k8s_openapi::api::core::v1::ConfigMap;
//!
//! const FINALIZER: &str = "cache.example.com/finalizer";
//!
//! let mut cm = ConfigMap::default();
//! assert!(add_finalizer(&mut cm, FINALIZER)); // changed: write it
//! assert!(!add_finalizer(&mut cm, FINALIZER)); // already there: nothing to write
//! assert!(has_finalizer(&cm, FINALIZER));
//! assert!(remove_finalizer(&mut cm, FINALIZER));
//! assert_eq!(cm.metadata.finalizers, None);
//! ```

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::{Metadata, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::controller::Action;
use super::ops::{Error, Result};
use crate::client::{Api, Patch, PatchParams};

// === the flow ===

/// What [`finalizer`] asks its reconcile to do.
#[derive(Debug)]
pub enum Event<K> {
    /// The object lives and holds the finalizer: bring the world in line with it.
    Apply(Arc<K>),
    /// The object is being deleted and still holds the finalizer: clean up after it. When
    /// this returns `Ok`, the finalizer is removed and the deletion goes on; an error keeps
    /// the finalizer, and the cleanup runs again on the retry.
    Cleanup(Arc<K>),
}

/// Runs `reconcile` for `object` behind the finalizer `name` (kube-rs's `finalizer()`):
///
/// | the object | what happens | returns |
/// |---|---|---|
/// | lives, without the finalizer | [`ensure`] adds it; `reconcile` is not called | `Action::done()`: the write comes back as an event, and that pass applies |
/// | lives, with the finalizer | `reconcile(Event::Apply(object))` | what `reconcile` returns |
/// | is being deleted, with the finalizer | `reconcile(Event::Cleanup(object))`, then, if that succeeded, [`release`] removes the finalizer | what `reconcile` returned |
/// | is being deleted, without the finalizer | nothing | `Action::done()` |
///
/// Both writes carry the object's resourceVersion, so they fail with 409 Conflict if the
/// object changed since it was read (a stale cache): retried with backoff, and nobody's
/// finalizer is lost. `api` must serve the object's namespace.
///
/// The pass that adds the finalizer ends there, so that the next one starts from the
/// object as written; the event of that write brings the object back. A
/// [`Predicate::generation_changed`](super::Predicate::generation_changed) alone on the
/// kind drops that event (finalizers are not in the spec): `or` it with a predicate that
/// passes updates whose finalizers changed.
///
/// # Errors
///
/// A finalizer write the API server refused (as `E`, from [`Error`]), or `reconcile`'s own
/// error.
///
/// # Cancel safety
///
/// Dropping the future may leave the finalizer added or the cleanup done and the finalizer
/// still there; the next pass takes it from there.
///
/// ```no_run
/// use std::sync::Arc;
///
/// use controller_runtime::client::Api;
/// use controller_runtime::runtime::finalizer::{Event, finalizer};
/// use controller_runtime::runtime::{Action, ReconcileError};
/// use k8s_openapi::api::core::v1::Service;
///
/// # async fn run(api: Api<Service>, svc: Arc<Service>) -> Result<Action, ReconcileError> {
/// finalizer(&api, "example.com/dns", svc, async |event| match event {
///     Event::Apply(_svc) => Ok(Action::done()),   // publish its DNS record
///     Event::Cleanup(_svc) => Ok(Action::done()), // withdraw it
/// })
/// .await
/// # }
/// ```
pub async fn finalizer<K, F, E>(
    api: &Api<K>,
    name: &str,
    object: Arc<K>,
    reconcile: F,
) -> Result<Action, E>
where
    K: Resource + Metadata<Ty = ObjectMeta> + Serialize + DeserializeOwned,
    F: AsyncFnOnce(Event<K>) -> Result<Action, E>,
    E: From<Error>,
{
    let held = has_finalizer(&*object, name);
    match (object.metadata().deletion_timestamp.is_some(), held) {
        (false, false) => {
            ensure(api, &*object, name).await?;
            Ok(Action::done())
        }
        (false, true) => reconcile(Event::Apply(object)).await,
        (true, true) => {
            let action = reconcile(Event::Cleanup(Arc::clone(&object))).await?;
            release(api, &*object, name).await?;
            Ok(action)
        }
        (true, false) => Ok(Action::done()),
    }
}

/// Adds the finalizer `name` to the object on the server unless it holds it already;
/// returns whether it wrote.
///
/// The write is a merge patch of `metadata.finalizers` carrying the object's
/// resourceVersion (controller-runtime's `MergeFromWithOptimisticLock`): the server refuses
/// it with 409 if the object changed since it was read, instead of losing a finalizer
/// someone else added in between.
///
/// # Errors
///
/// [`Error::NoName`] if the object has no name; [`Error::Client`]: 409 if the object
/// changed since it was read, 404 if it is gone.
///
/// # Cancel safety
///
/// Dropping the future after the patch was sent leaves it applied or not.
///
/// ```no_run
/// use controller_runtime::client::Api;
/// use controller_runtime::runtime::finalizer;
/// use k8s_openapi::api::core::v1::ConfigMap;
///
/// # async fn run(api: Api<ConfigMap>, cm: ConfigMap) -> Result<(), controller_runtime::runtime::ops::Error> {
/// if finalizer::ensure(&api, &cm, "example.com/cleanup").await? {
///     return Ok(()); // written: the object comes back as an event
/// }
/// # Ok(())
/// # }
/// ```
pub async fn ensure<K>(api: &Api<K>, object: &K, name: &str) -> Result<bool>
where
    K: Resource + Metadata<Ty = ObjectMeta> + Serialize + DeserializeOwned,
{
    if has_finalizer(object, name) {
        return Ok(false);
    }
    let held = object.metadata().finalizers.iter().flatten();
    let finalizers: Vec<&str> = held.map(String::as_str).chain([name]).collect();
    set_finalizers(api, object, &finalizers).await?;
    Ok(true)
}

/// Removes the finalizer `name` from the object on the server if it holds it; returns
/// whether it wrote. The write is locked to the object's resourceVersion, as [`ensure`]'s.
///
/// # Errors
///
/// As [`ensure`].
///
/// # Cancel safety
///
/// As [`ensure`].
///
/// ```no_run
/// use controller_runtime::client::Api;
/// use controller_runtime::runtime::finalizer;
/// use k8s_openapi::api::core::v1::ConfigMap;
///
/// # async fn run(api: Api<ConfigMap>, cm: ConfigMap) -> Result<(), controller_runtime::runtime::ops::Error> {
/// if cm.metadata.deletion_timestamp.is_some() {
///     // ... clean up, then let the deletion go on:
///     finalizer::release(&api, &cm, "example.com/cleanup").await?;
/// }
/// # Ok(())
/// # }
/// ```
pub async fn release<K>(api: &Api<K>, object: &K, name: &str) -> Result<bool>
where
    K: Resource + Metadata<Ty = ObjectMeta> + Serialize + DeserializeOwned,
{
    if !has_finalizer(object, name) {
        return Ok(false);
    }
    let held = object.metadata().finalizers.iter().flatten();
    let finalizers: Vec<&str> = held.map(String::as_str).filter(|f| *f != name).collect();
    set_finalizers(api, object, &finalizers).await?;
    Ok(true)
}

/// Sets the object's finalizers to `finalizers` by a merge patch that carries its
/// resourceVersion.
async fn set_finalizers<K>(api: &Api<K>, object: &K, finalizers: &[&str]) -> Result<()>
where
    K: Resource + Metadata<Ty = ObjectMeta> + Serialize + DeserializeOwned,
{
    let meta = object.metadata();
    let name = meta
        .name
        .as_deref()
        .ok_or(Error::NoName { kind: K::KIND })?;
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(finalizers_patch(
            finalizers,
            meta.resource_version.as_deref(),
        )),
    )
    .await?;
    Ok(())
}

/// `{"metadata": {"finalizers": [..], "resourceVersion": ".."}}`: the finalizers, written only
/// at that resourceVersion.
fn finalizers_patch(finalizers: &[&str], resource_version: Option<&str>) -> serde_json::Value {
    serde_json::json!({ "metadata": {
        "finalizers": finalizers,
        "resourceVersion": resource_version,
    }})
}

// === in memory ===

/// Adds `name` to the object's finalizers unless it is there already. Returns whether the
/// list changed.
pub fn add_finalizer<K>(object: &mut K, name: &str) -> bool
where
    K: Metadata<Ty = ObjectMeta>,
{
    let finalizers = object
        .metadata_mut()
        .finalizers
        .get_or_insert_with(Vec::new);
    if finalizers.iter().any(|f| f == name) {
        return false;
    }
    finalizers.push(name.to_owned());
    true
}

/// Removes every occurrence of `name` from the object's finalizers. Returns whether the list
/// changed. An emptied list becomes `None`, as the server returns it.
pub fn remove_finalizer<K>(object: &mut K, name: &str) -> bool
where
    K: Metadata<Ty = ObjectMeta>,
{
    let meta = object.metadata_mut();
    let Some(finalizers) = meta.finalizers.as_mut() else {
        return false;
    };
    let before = finalizers.len();
    finalizers.retain(|f| f != name);
    let changed = finalizers.len() != before;
    if finalizers.is_empty() {
        meta.finalizers = None;
    }
    changed
}

/// Whether the object's finalizers include `name` (controllerutil's `ContainsFinalizer`).
pub fn has_finalizer<K>(object: &K, name: &str) -> bool
where
    K: Metadata<Ty = ObjectMeta>,
{
    object
        .metadata()
        .finalizers
        .as_ref()
        .is_some_and(|fs| fs.iter().any(|f| f == name))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;

    fn with_finalizers(names: &[&str]) -> ConfigMap {
        let mut cm = ConfigMap::default();
        cm.metadata.finalizers = Some(names.iter().map(|s| (*s).to_owned()).collect());
        cm
    }

    #[test]
    fn add_appends_once_and_reports_the_change() {
        let mut cm = ConfigMap::default();
        assert!(add_finalizer(&mut cm, "a/x"));
        assert!(!add_finalizer(&mut cm, "a/x"));
        assert!(add_finalizer(&mut cm, "b/y"));
        assert_eq!(
            cm.metadata.finalizers,
            Some(vec!["a/x".to_owned(), "b/y".to_owned()])
        );
    }

    #[test]
    fn add_keeps_other_finalizers_in_order() {
        let mut cm = with_finalizers(&["kubernetes.io/pv-protection"]);
        assert!(add_finalizer(&mut cm, "a/x"));
        assert_eq!(
            cm.metadata.finalizers.unwrap(),
            ["kubernetes.io/pv-protection", "a/x"]
        );
    }

    #[test]
    fn remove_reports_no_change_when_absent() {
        let mut cm = ConfigMap::default();
        assert!(!remove_finalizer(&mut cm, "a/x"));
        assert_eq!(cm.metadata.finalizers, None);
        let mut cm = with_finalizers(&["b/y"]);
        assert!(!remove_finalizer(&mut cm, "a/x"));
        assert_eq!(cm.metadata.finalizers.unwrap(), ["b/y"]);
    }

    #[test]
    fn remove_drops_every_copy_and_keeps_the_rest() {
        let mut cm = with_finalizers(&["a/x", "b/y", "a/x"]);
        assert!(remove_finalizer(&mut cm, "a/x"));
        assert_eq!(cm.metadata.finalizers.unwrap(), ["b/y"]);
    }

    #[test]
    fn removing_the_last_finalizer_leaves_none() {
        let mut cm = with_finalizers(&["a/x"]);
        assert!(remove_finalizer(&mut cm, "a/x"));
        assert_eq!(cm.metadata.finalizers, None);
    }

    #[test]
    fn a_finalizers_patch_carries_the_resource_version_and_the_whole_list() {
        assert_eq!(
            finalizers_patch(&["b/y", "a/x"], Some("7")),
            serde_json::json!({"metadata": {"finalizers": ["b/y", "a/x"], "resourceVersion": "7"}})
        );
        // No version known: no lock (null leaves the field out of the merge).
        assert_eq!(
            finalizers_patch(&[], None),
            serde_json::json!({"metadata": {"finalizers": [], "resourceVersion": null}})
        );
    }

    #[test]
    fn has_matches_exact_names_only() {
        let cm = with_finalizers(&["a/x"]);
        assert!(has_finalizer(&cm, "a/x"));
        assert!(!has_finalizer(&cm, "a/"));
        assert!(!has_finalizer(&ConfigMap::default(), "a/x"));
    }
}
