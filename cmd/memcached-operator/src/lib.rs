//! The Memcached operator: it watches `Memcached` custom resources and keeps a Deployment of
//! memcached Pods scaled to each resource's `spec.size`, reporting what runs in its status.
//!
//! * [`api`] — the `cache.example.com` `Memcached` kind and its CRD, derived from Rust
//!   types: `v1alpha1`, stored and reconciled, and `v1beta1`, converted.
//! * [`reconcile`] — the reconciler, one pass top to bottom.
//! * [`webhook`] — the defaulting and validating admission webhooks, and the conversion
//!   webhook between the versions.
//! * [`setup`] — the controller wired into a manager, as the binary runs it, with the RBAC
//!   rules of its writes; [`rbac_yaml`] and [`crd_yaml`] — the manifests generated from them.
//!
//! ```text
//!  Memcached ──for──▶ ┐
//!  Deployment ─owns─▶ ├─▶ queue ─▶ reconcile ─▶ apply Deployment, patch status, events
//!  Pod ─by label────▶ ┘
//! ```

pub mod api;
pub mod reconcile;
pub mod webhook;

use std::sync::Arc;

use controller_runtime::client::Selector;
use controller_runtime::runtime::rbac::{ClusterRole, Rule, Verb};
use controller_runtime::runtime::{Controller, Manager, ManagerError, ManagerOptions};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;

use api::Memcached;
use reconcile::{Context, MANAGED_BY};

/// The image a `Memcached` without `spec.image` runs.
pub const DEFAULT_IMAGE: &str = "memcached:1.6.26-alpine";

/// The cache options the operator needs: Pods only with its own label, so it never holds
/// the cluster's other Pods, and only their metadata, since it reads no more of them than
/// their names and deletion (a third of the bytes of a Pod).
pub fn cache_selectors(
    options: controller_runtime::runtime::CacheOptions,
) -> controller_runtime::runtime::CacheOptions {
    options
        .select::<Pod>(Selector::default().labels(&format!("{}={}", MANAGED_BY.0, MANAGED_BY.1)))
        .transform::<Pod>(controller_runtime::runtime::metadata_only)
}

/// Registers the Memcached controller with `manager`: for `Memcached`, owning Deployments,
/// and watching the memcached Pods (for the status's Pod names).
///
/// Its RBAC rules are what [`reconcile`] writes, declared here; the runtime adds what it
/// does for the controller (the cache's list and watch of the three kinds, the event
/// recorder's events, and the owner references' grants). [`rbac_yaml`] writes them all.
///
/// # Errors
///
/// If the controller cannot be registered (its name is taken, or a kind is cached as
/// another type) or the event recorder cannot be made.
pub fn setup(manager: &Manager, default_image: &str) -> Result<(), SetupError> {
    let ctx = Arc::new(Context {
        client: manager.client(),
        deployments: manager.store::<Deployment>()?,
        pods: manager.store::<Pod>()?,
        recorder: manager.event_recorder("memcached-controller")?,
        default_image: default_image.to_owned(),
    });
    Controller::<Memcached>::new(manager)
        .owns::<Deployment>()
        .watches::<Pod>(reconcile::pod_owner)
        .rbac(Rule::of::<Memcached>().verbs([Verb::Patch]).because(
            "the finalizer is added and removed by a merge patch carrying the resourceVersion; \
             it never creates, reads directly or deletes one",
        ))
        .rbac(
            Rule::status::<Memcached>()
                .verbs([Verb::Patch])
                .because("the status is written by a merge patch through the subresource"),
        )
        .rbac(
            Rule::of::<Deployment>()
                .verbs([Verb::Create, Verb::Patch, Verb::Update])
                .because(
                    "a new Deployment is created; a change inside a list (the image, the \
                     port) is a server-side apply, a patch; a scale is an update of the \
                     cached Deployment, or a merge patch when the cache was behind",
                ),
        )
        .complete(reconcile::reconcile, ctx)?;
    Ok(())
}

/// Why [`setup`] failed.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The controller could not be registered.
    #[error(transparent)]
    Manager(#[from] ManagerError),
    /// A cache could not be made.
    #[error(transparent)]
    Cache(#[from] controller_runtime::runtime::CacheError),
    /// The event recorder could not be made.
    #[error(transparent)]
    Events(#[from] controller_runtime::runtime::events::Error),
}

/// The `Memcached` CRD as YAML, as committed in `config/crd/bases/`.
pub fn crd_yaml() -> String {
    controller_runtime::runtime::crd::to_yaml(&api::crd())
}

/// The ClusterRole `manager-role` as YAML, as committed in `config/rbac/role.yaml`: the rules
/// of the controller [`setup`] registers, on a manager that never connects.
///
/// # Errors
///
/// If [`setup`] fails.
pub fn rbac_yaml() -> Result<String, SetupError> {
    let manager = Manager::offline(ManagerOptions::default());
    setup(&manager, DEFAULT_IMAGE)?;
    let role = ClusterRole::new("manager-role", manager.rbac_rules())
        .label("app.kubernetes.io/name", "memcached-operator")
        .label("app.kubernetes.io/managed-by", "kustomize");
    Ok(role.to_yaml())
}

/// Applies the `Memcached` CRD (server-side, so a changed schema updates it) and waits until
/// the API server serves the kind: what `make install` does with kubectl, for tests and
/// for an operator that installs its own CRD.
///
/// # Errors
///
/// If the apply is refused (RBAC, an invalid schema) or the CRD is not established within
/// `timeout`.
pub async fn install_crd(
    client: &controller_runtime::client::Client,
    timeout: std::time::Duration,
) -> Result<(), controller_runtime::client::Error> {
    let crd = api::crd();
    controller_runtime::runtime::crd::install(client, &crd, reconcile::FIELD_MANAGER, timeout).await
}
