//! Finalizers: add, remove and test the names in `metadata.finalizers`, as controllerutil does.
//!
//! A finalizer is a name in `metadata.finalizers` that holds a deleted object in place: the
//! server sets `metadata.deletionTimestamp` but keeps the object until the list is empty. A
//! controller that must clean up outside the object (external resources, dependents in other
//! namespaces) adds its finalizer while the object lives, does its cleanup once it sees the
//! deletion timestamp, then removes the finalizer so the deletion completes.
//!
//! These functions change only the object in memory; the caller writes it (an update, or a
//! patch of `metadata.finalizers`). Each returns whether it changed anything, so a reconciler
//! writes only when it must:
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

use k8s_openapi::Metadata;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

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
    fn has_matches_exact_names_only() {
        let cm = with_finalizers(&["a/x"]);
        assert!(has_finalizer(&cm, "a/x"));
        assert!(!has_finalizer(&cm, "a/"));
        assert!(!has_finalizer(&ConfigMap::default(), "a/x"));
    }
}
