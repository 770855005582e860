//! {{project_name}}: an operator on controller-runtime, scaffolded by kubebuilder-rs.
//!
//! * [`api`] — the kinds it serves, a module per version and a file per kind; each kind's
//!   CustomResourceDefinition is derived from its Rust types;
//! * [`controller`] — a reconciler per kind;
//! * [`webhook`] — the admission webhooks, per kind;
//! * [`setup`] and [`crds`] — every controller and every CRD, as `src/main.rs` and the tests
//!   use them; [`rbac_yaml`] — the manager's ClusterRole, from the controllers' rules.
//!
//! ```text
//!  kube-apiserver ──watch──▶ manager cache ──▶ controller::<kind>::reconcile ──▶ writes
//!        │ admission
//!        ▼
//!  webhook::<kind>::{default, validate}
//! ```
//!
//! `kubebuilder-rs create api` and `create webhook` add their entries above the
//! `+kubebuilder:scaffold:` markers: keep the markers where new entries should go.

pub mod api;
pub mod controller;
pub mod webhook;

use controller_runtime::runtime::crd;
use controller_runtime::runtime::rbac::ClusterRole;
use controller_runtime::runtime::{Manager, ManagerOptions};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// A kind's controller: registers itself with the manager.
type Setup = fn(&Manager) -> Result<(), SetupError>;

/// Each kind's controller, registered with the manager by [`setup`].
const CONTROLLERS: &[Setup] = &[
    // +kubebuilder:scaffold:builder
];

/// Registers every controller with `manager`.
///
/// # Errors
///
/// The first controller that cannot be registered, and why.
pub fn setup(manager: &Manager) -> Result<(), SetupError> {
    CONTROLLERS.iter().try_for_each(|setup| setup(manager))
}

/// Each version of each kind's CRD, derived from its Rust types, in the order created.
const CRD_VERSIONS: &[fn() -> CustomResourceDefinition] = &[
    // +kubebuilder:scaffold:crds
];

/// Every kind's CustomResourceDefinition, derived from its Rust types: what `make manifests`
/// writes to config/crd/bases/ and `make install` applies.
///
/// A kind with several versions has one CRD declaring them all, the first listed (created)
/// stored; only that one is served, until a conversion webhook converts the others
/// (`kubebuilder-rs create webhook --conversion` and config/crd/patches).
///
/// # Panics
///
/// If two versions of a kind differ in their names or scope, or a version is listed twice.
pub fn crds() -> Vec<CustomResourceDefinition> {
    let mut crds: Vec<CustomResourceDefinition> = Vec::new();
    for crd in CRD_VERSIONS.iter().map(|crd| crd()) {
        let name = &crd.metadata.name;
        match crds.iter_mut().find(|c| c.metadata.name == *name) {
            None => crds.push(crd),
            Some(kind) => {
                let storage = kind.spec.versions[0].name.clone();
                let merged = crd::merge([kind.clone(), crd], &storage);
                *kind = merged.unwrap_or_else(|e| panic!("{e}"));
            }
        }
    }
    for version in crds.iter_mut().flat_map(|c| &mut c.spec.versions) {
        version.served = version.storage;
    }
    crds
}

/// The ClusterRole `manager-role` as YAML, what `make manifests` writes to
/// config/rbac/role.yaml: the rules each controller declares in its `setup` and those the
/// runtime infers from it, on a manager that never connects.
///
/// # Errors
///
/// If [`setup`] fails.
pub fn rbac_yaml() -> Result<String, SetupError> {
    let manager = Manager::offline(ManagerOptions::default());
    setup(&manager)?;
    let role = ClusterRole::new("manager-role", manager.rbac_rules())
        .label("app.kubernetes.io/name", "{{project_name}}")
        .label("app.kubernetes.io/managed-by", "kustomize");
    Ok(role.to_yaml())
}

/// Why [`setup`] failed.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// A controller could not be registered (its name is taken, say).
    #[error(transparent)]
    Manager(#[from] controller_runtime::runtime::ManagerError),
    /// A cache could not be made.
    #[error(transparent)]
    Cache(#[from] controller_runtime::runtime::CacheError),
    /// An event recorder could not be made.
    #[error(transparent)]
    Events(#[from] controller_runtime::runtime::events::Error),
}
