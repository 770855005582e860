//! Owner references: making an object a dependent of its owner, as controllerutil does.
//!
//! An owner reference in a dependent's `metadata.ownerReferences` tells the garbage collector
//! to delete the dependent when its owner goes, and tells a controller watching dependents
//! ([`controller_of`]) which owner to reconcile when a dependent changes. At most one reference
//! is the *controller* reference: the owner that manages the dependent.
//!
//! The rules follow controller-runtime's `SetControllerReference` and `SetOwnerReference`:
//!
//! - an owner in a namespace may only own objects in the same namespace; a cluster-scoped owner
//!   may own anything; a cluster-scoped object cannot have a namespaced owner (the garbage
//!   collector would treat such a reference as unresolvable);
//! - two references name the same owner when their API group, kind and name agree (the version
//!   and uid may differ: setting the reference again brings them up to date in place);
//! - an object another controller already controls is refused with [`Error::AlreadyOwned`].
//!
//! ```
//! use controller_runtime::runtime::owner::{controller_of, set_controller_reference};
//! use k8s_openapi::api::apps::v1::Deployment;
//! use k8s_openapi::api::core::v1::ConfigMap;
//!
//! # fn main() -> Result<(), controller_runtime::runtime::owner::Error> {
//! let mut owner = ConfigMap::default(); // in practice: the object being reconciled
//! owner.metadata.name = Some("web".into());
//! owner.metadata.namespace = Some("shop".into());
//! owner.metadata.uid = Some("0d6e…".into());
//!
//! let mut deployment = Deployment::default();
//! deployment.metadata.name = Some("web".into());
//! deployment.metadata.namespace = Some("shop".into());
//! set_controller_reference(&owner, &mut deployment)?;
//! assert_eq!(controller_of(&deployment.metadata).unwrap().kind, "ConfigMap");
//! # Ok(())
//! # }
//! ```

use std::any::TypeId;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::{ClusterResourceScope, Metadata, NamespaceResourceScope, Resource};

/// `Result` with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why an owner reference could not be set.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The owner lacks a field the reference needs: it was built locally rather than read
    /// from the server, which assigns the uid.
    #[error("the owner {kind} has no metadata.{field}; use the object as read from the server")]
    OwnerIncomplete {
        /// The owner's kind.
        kind: &'static str,
        /// The missing field: `name` or `uid`.
        field: &'static str,
    },

    /// A namespaced object (the owner, or the object) has no `metadata.namespace`, so the
    /// namespace rule cannot be checked.
    #[error("the {which} ({kind}) is namespaced but has no metadata.namespace")]
    NoNamespace {
        /// `owner` or `object`.
        which: &'static str,
        /// Its kind.
        kind: &'static str,
    },

    /// The owner is in another namespace than the object; the API does not allow
    /// references across namespaces.
    #[error(
        "cross-namespace owner references are not allowed: the owner is in {owner_namespace:?}, \
         the object in {object_namespace:?}"
    )]
    CrossNamespace {
        /// The owner's namespace.
        owner_namespace: String,
        /// The object's namespace.
        object_namespace: String,
    },

    /// The object is cluster-scoped and the owner namespaced.
    #[error(
        "a cluster-scoped {kind} cannot have a namespaced owner (the owner is in {owner_namespace:?})"
    )]
    ClusterScopedObject {
        /// The object's kind.
        kind: &'static str,
        /// The owner's namespace.
        owner_namespace: String,
    },

    /// Another owner already controls the object.
    #[error("{kind} {name:?} is already controlled by {} {:?}", .controller.kind, .controller.name)]
    AlreadyOwned {
        /// The object's kind.
        kind: &'static str,
        /// The object's name.
        name: String,
        /// The controller reference it already has.
        controller: Box<OwnerReference>,
    },
}

/// A controller reference to `owner`: its apiVersion, kind, name and uid, with `controller`
/// and `blockOwnerDeletion` true (so a foreground deletion of the owner waits for the
/// dependent).
///
/// # Errors
///
/// [`Error::OwnerIncomplete`] if the owner has no name or uid.
pub fn controller_reference<O>(owner: &O) -> Result<OwnerReference>
where
    O: Resource + Metadata<Ty = ObjectMeta>,
{
    reference(owner, true)
}

/// Makes `owner` the controller of `object`, adding a controller reference or bringing an
/// existing reference to the same owner up to date in place. Other references are kept.
/// Setting it twice changes nothing the second time.
///
/// # Errors
///
/// [`Error::AlreadyOwned`] if another owner controls the object; [`Error::CrossNamespace`],
/// [`Error::ClusterScopedObject`] or [`Error::NoNamespace`] if the owner may not own it (see
/// the module docs); [`Error::OwnerIncomplete`] if the owner has no name or uid. The object
/// is unchanged on error.
pub fn set_controller_reference<O, K>(owner: &O, object: &mut K) -> Result<()>
where
    O: Resource + Metadata<Ty = ObjectMeta>,
    O::Scope: 'static,
    K: Resource + Metadata<Ty = ObjectMeta>,
    K::Scope: 'static,
{
    check_placement(owner, object)?;
    let wanted = reference(owner, true)?;
    let meta = object.metadata();
    if let Some(existing) = controller_of(meta)
        && !same_owner(existing, &wanted)
    {
        return Err(Error::AlreadyOwned {
            kind: K::KIND,
            name: meta.name.clone().unwrap_or_default(),
            controller: Box::new(existing.clone()),
        });
    }
    upsert(object.metadata_mut(), wanted);
    Ok(())
}

/// Adds a plain (non-controller) owner reference to `owner`, or brings an existing reference
/// to the same owner up to date in place. Idempotent.
///
/// Unlike controller-runtime, which overwrites the flags, an existing reference keeps its
/// `controller` and `blockOwnerDeletion` flags: adding an owner never demotes the object's
/// controller.
///
/// # Errors
///
/// As [`set_controller_reference`], except that an object controlled by another owner is
/// accepted.
pub fn set_owner_reference<O, K>(owner: &O, object: &mut K) -> Result<()>
where
    O: Resource + Metadata<Ty = ObjectMeta>,
    O::Scope: 'static,
    K: Resource + Metadata<Ty = ObjectMeta>,
    K::Scope: 'static,
{
    check_placement(owner, object)?;
    let mut wanted = reference(owner, false)?;
    let refs = object.metadata().owner_references.as_deref().unwrap_or(&[]);
    if let Some(existing) = refs.iter().find(|r| same_owner(r, &wanted)) {
        wanted.controller = existing.controller;
        wanted.block_owner_deletion = existing.block_owner_deletion;
    }
    upsert(object.metadata_mut(), wanted);
    Ok(())
}

/// Removes the object's references to `owner` (matched by group, kind and name, as the
/// setters match). Returns whether anything was removed. An emptied list becomes `None`.
pub fn remove_owner_reference<O, K>(owner: &O, object: &mut K) -> bool
where
    O: Resource + Metadata<Ty = ObjectMeta>,
    K: Metadata<Ty = ObjectMeta>,
{
    let target = OwnerReference {
        api_version: O::API_VERSION.to_owned(),
        kind: O::KIND.to_owned(),
        name: owner.metadata().name.clone().unwrap_or_default(),
        ..OwnerReference::default()
    };
    let meta = object.metadata_mut();
    let Some(refs) = meta.owner_references.as_mut() else {
        return false;
    };
    let before = refs.len();
    refs.retain(|r| !same_owner(r, &target));
    let changed = refs.len() != before;
    if refs.is_empty() {
        meta.owner_references = None;
    }
    changed
}

/// The object's controller reference: the owner reference with `controller: true`, if any.
pub fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .as_deref()?
        .iter()
        .find(|r| r.controller == Some(true))
}

/// Whether `owner` is the controller of the object whose metadata is `object`: its controller
/// reference carries the owner's uid (metav1's `IsControlledBy`).
pub fn is_controlled_by(object: &ObjectMeta, owner: &ObjectMeta) -> bool {
    match (controller_of(object), owner.uid.as_deref()) {
        (Some(r), Some(uid)) => !uid.is_empty() && r.uid == uid,
        _ => false,
    }
}

// === rules ===

fn reference<O>(owner: &O, controller: bool) -> Result<OwnerReference>
where
    O: Resource + Metadata<Ty = ObjectMeta>,
{
    let meta = owner.metadata();
    let field = |value: &Option<String>, field| {
        value
            .clone()
            .filter(|v| !v.is_empty())
            .ok_or(Error::OwnerIncomplete {
                kind: O::KIND,
                field,
            })
    };
    Ok(OwnerReference {
        api_version: O::API_VERSION.to_owned(),
        kind: O::KIND.to_owned(),
        name: field(&meta.name, "name")?,
        uid: field(&meta.uid, "uid")?,
        controller: controller.then_some(true),
        block_owner_deletion: controller.then_some(true),
    })
}

/// Where an object lives, as far as the namespace rule is concerned.
enum Placement<'a> {
    /// A cluster-scoped object.
    Cluster,
    /// A namespaced object, in this namespace (`None`: not set).
    Namespace(Option<&'a str>),
}

/// The placement of a `K`: its kind's scope says whether it is namespaced; a kind of another
/// scope is taken as namespaced exactly when it carries a namespace.
fn placement<K>(meta: &ObjectMeta) -> Placement<'_>
where
    K: Resource,
    K::Scope: 'static,
{
    let namespace = meta.namespace.as_deref().filter(|ns| !ns.is_empty());
    let scope = TypeId::of::<K::Scope>();
    if scope == TypeId::of::<ClusterResourceScope>() {
        Placement::Cluster
    } else if scope == TypeId::of::<NamespaceResourceScope>() || namespace.is_some() {
        Placement::Namespace(namespace)
    } else {
        Placement::Cluster
    }
}

/// controller-runtime's `validateOwner`: a namespaced owner owns only objects in its own
/// namespace.
fn check_placement<O, K>(owner: &O, object: &K) -> Result<()>
where
    O: Resource + Metadata<Ty = ObjectMeta>,
    O::Scope: 'static,
    K: Resource + Metadata<Ty = ObjectMeta>,
    K::Scope: 'static,
{
    let owner_namespace = match placement::<O>(owner.metadata()) {
        Placement::Cluster => return Ok(()),
        Placement::Namespace(None) => {
            return Err(Error::NoNamespace {
                which: "owner",
                kind: O::KIND,
            });
        }
        Placement::Namespace(Some(ns)) => ns,
    };
    match placement::<K>(object.metadata()) {
        Placement::Cluster => Err(Error::ClusterScopedObject {
            kind: K::KIND,
            owner_namespace: owner_namespace.to_owned(),
        }),
        Placement::Namespace(None) => Err(Error::NoNamespace {
            which: "object",
            kind: K::KIND,
        }),
        Placement::Namespace(Some(ns)) if ns != owner_namespace => Err(Error::CrossNamespace {
            owner_namespace: owner_namespace.to_owned(),
            object_namespace: ns.to_owned(),
        }),
        Placement::Namespace(Some(_)) => Ok(()),
    }
}

/// The API group of an `apiVersion`: `apps` for `apps/v1`, empty for the core `v1`.
fn group(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// controller-runtime's `referSameObject`: same group, kind and name.
fn same_owner(a: &OwnerReference, b: &OwnerReference) -> bool {
    group(&a.api_version) == group(&b.api_version) && a.kind == b.kind && a.name == b.name
}

/// Replaces the reference to the same owner in place, or appends `wanted`.
fn upsert(meta: &mut ObjectMeta, wanted: OwnerReference) {
    let refs = meta.owner_references.get_or_insert_with(Vec::new);
    match refs.iter_mut().find(|r| same_owner(r, &wanted)) {
        Some(existing) => *existing = wanted,
        None => refs.push(wanted),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
    use k8s_openapi::api::rbac::v1::ClusterRole;

    use super::*;

    fn meta(name: &str, namespace: Option<&str>, uid: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.to_owned()),
            namespace: namespace.map(str::to_owned),
            uid: (!uid.is_empty()).then(|| uid.to_owned()),
            ..ObjectMeta::default()
        }
    }

    fn configmap(name: &str, namespace: &str, uid: &str) -> ConfigMap {
        ConfigMap {
            metadata: meta(name, Some(namespace), uid),
            ..ConfigMap::default()
        }
    }

    fn deployment(name: &str, namespace: &str) -> Deployment {
        Deployment {
            metadata: meta(name, Some(namespace), ""),
            ..Deployment::default()
        }
    }

    fn foreign_controller() -> OwnerReference {
        OwnerReference {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: "other".into(),
            uid: "u-other".into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }

    #[test]
    fn controller_reference_carries_type_name_uid_and_both_flags() {
        let owner = configmap("web", "shop", "u-1");
        let r = controller_reference(&owner).unwrap();
        assert_eq!(
            r,
            OwnerReference {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                name: "web".into(),
                uid: "u-1".into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }
        );
    }

    #[test]
    fn controller_reference_refuses_an_owner_without_uid_or_name() {
        let err = controller_reference(&configmap("web", "shop", "")).unwrap_err();
        assert!(
            matches!(err, Error::OwnerIncomplete { field: "uid", .. }),
            "{err}"
        );
        let mut nameless = configmap("web", "shop", "u-1");
        nameless.metadata.name = None;
        let err = controller_reference(&nameless).unwrap_err();
        assert!(
            matches!(err, Error::OwnerIncomplete { field: "name", .. }),
            "{err}"
        );
    }

    #[test]
    fn set_controller_reference_appends_after_other_owners() {
        let owner = configmap("web", "shop", "u-1");
        let mut dep = deployment("web", "shop");
        let plain = OwnerReference {
            controller: None,
            block_owner_deletion: None,
            ..foreign_controller()
        };
        dep.metadata.owner_references = Some(vec![plain.clone()]);
        set_controller_reference(&owner, &mut dep).unwrap();
        let refs = dep.metadata.owner_references.as_ref().unwrap();
        assert_eq!(refs.len(), 2);
        assert_eq!(refs[0], plain);
        assert_eq!(controller_of(&dep.metadata).unwrap().uid, "u-1");
    }

    #[test]
    fn set_controller_reference_twice_changes_nothing() {
        let owner = configmap("web", "shop", "u-1");
        let mut dep = deployment("web", "shop");
        set_controller_reference(&owner, &mut dep).unwrap();
        let once = dep.clone();
        set_controller_reference(&owner, &mut dep).unwrap();
        assert_eq!(dep, once);
        assert_eq!(dep.metadata.owner_references.unwrap().len(), 1);
    }

    #[test]
    fn set_controller_reference_updates_the_same_owner_in_place() {
        // Same group, kind and name: a recreated owner (new uid) or a plain reference to it
        // is brought up to date where it stands.
        let mut dep = deployment("web", "shop");
        let stale = OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "web".into(),
            uid: "u-old".into(),
            controller: None,
            block_owner_deletion: None,
        };
        dep.metadata.owner_references = Some(vec![stale]);
        set_controller_reference(&configmap("web", "shop", "u-new"), &mut dep).unwrap();
        let refs = dep.metadata.owner_references.unwrap();
        assert_eq!(refs.len(), 1);
        assert_eq!(refs[0].uid, "u-new");
        assert_eq!(refs[0].controller, Some(true));
    }

    #[test]
    fn set_controller_reference_refuses_an_object_another_controller_owns() {
        let mut dep = deployment("web", "shop");
        dep.metadata.owner_references = Some(vec![foreign_controller()]);
        let before = dep.clone();
        let err = set_controller_reference(&configmap("web", "shop", "u-1"), &mut dep).unwrap_err();
        match &err {
            Error::AlreadyOwned {
                kind, controller, ..
            } => {
                assert_eq!(*kind, "Deployment");
                assert_eq!(controller.name, "other");
            }
            other => panic!("unexpected {other}"),
        }
        assert_eq!(
            err.to_string(),
            r#"Deployment "web" is already controlled by ReplicaSet "other""#
        );
        assert_eq!(dep, before);
    }

    #[test]
    fn owner_in_another_namespace_is_refused() {
        let mut dep = deployment("web", "shop");
        let err =
            set_controller_reference(&configmap("web", "other", "u-1"), &mut dep).unwrap_err();
        assert!(matches!(err, Error::CrossNamespace { .. }), "{err}");
        let err = set_owner_reference(&configmap("web", "other", "u-1"), &mut dep).unwrap_err();
        assert!(matches!(err, Error::CrossNamespace { .. }), "{err}");
        assert_eq!(dep.metadata.owner_references, None);
    }

    #[test]
    fn cluster_scoped_object_with_a_namespaced_owner_is_refused() {
        let mut role = ClusterRole {
            metadata: meta("reader", None, ""),
            ..ClusterRole::default()
        };
        let err =
            set_controller_reference(&configmap("web", "shop", "u-1"), &mut role).unwrap_err();
        assert!(
            matches!(
                err,
                Error::ClusterScopedObject {
                    kind: "ClusterRole",
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn namespaced_object_without_a_namespace_is_refused() {
        let mut dep = Deployment {
            metadata: meta("web", None, ""),
            ..Deployment::default()
        };
        let err = set_controller_reference(&configmap("web", "shop", "u-1"), &mut dep).unwrap_err();
        assert!(
            matches!(
                err,
                Error::NoNamespace {
                    which: "object",
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn cluster_scoped_owner_may_own_namespaced_and_cluster_scoped_objects() {
        let owner = Namespace {
            metadata: meta("shop", None, "u-ns"),
            ..Namespace::default()
        };
        let mut dep = deployment("web", "shop");
        set_controller_reference(&owner, &mut dep).unwrap();
        assert_eq!(controller_of(&dep.metadata).unwrap().kind, "Namespace");
        let mut role = ClusterRole {
            metadata: meta("reader", None, ""),
            ..ClusterRole::default()
        };
        set_owner_reference(&owner, &mut role).unwrap();
        assert_eq!(role.metadata.owner_references.unwrap()[0].controller, None);
    }

    #[test]
    fn set_owner_reference_adds_a_plain_reference_once() {
        let owner = configmap("web", "shop", "u-1");
        let mut dep = deployment("web", "shop");
        set_owner_reference(&owner, &mut dep).unwrap();
        set_owner_reference(&owner, &mut dep).unwrap();
        let refs = dep.metadata.owner_references.as_ref().unwrap();
        assert_eq!(refs.len(), 1);
        assert_eq!(refs[0].controller, None);
        assert_eq!(refs[0].block_owner_deletion, None);
        assert!(controller_of(&dep.metadata).is_none());
    }

    #[test]
    fn set_owner_reference_accepts_an_object_another_controller_owns() {
        let mut dep = deployment("web", "shop");
        dep.metadata.owner_references = Some(vec![foreign_controller()]);
        set_owner_reference(&configmap("web", "shop", "u-1"), &mut dep).unwrap();
        assert_eq!(dep.metadata.owner_references.as_ref().unwrap().len(), 2);
        assert_eq!(controller_of(&dep.metadata).unwrap().name, "other");
    }

    #[test]
    fn set_owner_reference_never_demotes_the_controller() {
        let owner = configmap("web", "shop", "u-1");
        let mut dep = deployment("web", "shop");
        set_controller_reference(&owner, &mut dep).unwrap();
        set_owner_reference(&owner, &mut dep).unwrap();
        assert!(is_controlled_by(&dep.metadata, &owner.metadata));
        assert_eq!(
            controller_of(&dep.metadata).unwrap().block_owner_deletion,
            Some(true)
        );
    }

    #[test]
    fn remove_owner_reference_drops_only_that_owner() {
        let owner = configmap("web", "shop", "u-1");
        let mut dep = deployment("web", "shop");
        dep.metadata.owner_references = Some(vec![foreign_controller()]);
        set_owner_reference(&owner, &mut dep).unwrap();
        assert!(remove_owner_reference(&owner, &mut dep));
        assert!(!remove_owner_reference(&owner, &mut dep));
        assert_eq!(
            dep.metadata.owner_references,
            Some(vec![foreign_controller()])
        );
        let mut only = deployment("web", "shop");
        set_owner_reference(&owner, &mut only).unwrap();
        assert!(remove_owner_reference(&owner, &mut only));
        assert_eq!(only.metadata.owner_references, None);
    }

    #[test]
    fn controller_of_finds_the_controller_among_plain_owners() {
        let plain = OwnerReference {
            name: "plain".into(),
            controller: Some(false),
            ..foreign_controller()
        };
        let mut m = meta("web", Some("shop"), "");
        m.owner_references = Some(vec![plain, foreign_controller()]);
        assert_eq!(controller_of(&m).unwrap().name, "other");
        assert!(controller_of(&meta("web", Some("shop"), "")).is_none());
    }

    #[test]
    fn is_controlled_by_compares_the_owner_uid() {
        let mut m = meta("web", Some("shop"), "");
        m.owner_references = Some(vec![foreign_controller()]);
        assert!(is_controlled_by(
            &m,
            &meta("other", Some("shop"), "u-other")
        ));
        assert!(!is_controlled_by(
            &m,
            &meta("other", Some("shop"), "u-recreated")
        ));
        assert!(!is_controlled_by(&m, &meta("other", Some("shop"), "")));
    }

    #[test]
    fn the_group_of_an_api_version_ignores_its_version() {
        assert_eq!(group("v1"), "");
        assert_eq!(group("apps/v1"), "apps");
        let a = OwnerReference {
            api_version: "cache.example.com/v1alpha1".into(),
            ..foreign_controller()
        };
        let b = OwnerReference {
            api_version: "cache.example.com/v1".into(),
            ..foreign_controller()
        };
        assert!(same_owner(&a, &b));
    }
}
