//! The {{kind}} controller: reconciles each `{{kind}}` ({{api_version}}).
//!
//! One pass, top to bottom, as the runtime's Memcached operator does it:
//!
//! 1. a {{kind}} being deleted is cleaned up after, then loses the finalizer, so that its
//!    deletion completes;
//! 2. a {{kind}} without the finalizer gets it, and the pass ends (the update comes back);
//! 3. TODO(user): the cluster is brought to what the spec asks;
//! 4. the status says so: condition `Available`, for the generation seen.
//!
//! Reads come from the manager's cache; writes go to the API server. A pass that changes
//! nothing writes nothing, so the loop settles.

use std::sync::Arc;

use controller_runtime::client::{Api, Client, Patch, PatchParams};
use controller_runtime::runtime::events::{EventType, Recorder, object_reference};
use controller_runtime::runtime::finalizer::{add_finalizer, has_finalizer, remove_finalizer};
use controller_runtime::runtime::{Action, Controller, Manager, ReconcileError};

use super::set_condition;
use crate::SetupError;
use crate::api::{{version}}::{{kind}};

/// The finalizer the controller puts on every {{kind}}: a deleted {{kind}} stays until the
/// controller has seen its deletion.
pub const FINALIZER: &str = "{{full_group}}/finalizer";

/// The condition type the status reports.
pub const AVAILABLE: &str = "Available";

/// What every reconcile shares.
pub struct Context {
    /// Writes go through it.
    pub client: Client,
    /// Records events as `{{module}}-controller`.
    pub recorder: Recorder,
}

/// Registers the {{kind}} controller with `manager`.
///
/// # Errors
///
/// If the controller cannot be registered or its event recorder made.
pub fn setup(manager: &Manager) -> Result<(), SetupError> {
    let ctx = Arc::new(Context {
        client: manager.client(),
        recorder: manager.event_recorder("{{module}}-controller")?,
    });
    Controller::<{{kind}}>::new(manager)
        // TODO(user): `.owns::<Deployment>()` for what a {{kind}} creates, and
        // `.watches::<K>(map)` for other kinds it depends on.
        .complete(reconcile, ctx)?;
    Ok(())
}

/// Brings one {{kind}} in step; see the [module docs](self).
///
/// # Errors
///
/// A write the API server refused (a conflict, a 422, RBAC); the controller retries it with
/// backoff.
pub async fn reconcile(obj: Arc<{{kind}}>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    let ns = obj.metadata.namespace.as_deref().unwrap_or_default();
    let name = obj.metadata.name.as_deref().unwrap_or_default();
    let api = Api::<{{kind}}>::namespaced(ctx.client.clone(), ns);

    // 1. Being deleted: clean up, then let go.
    if obj.metadata.deletion_timestamp.is_some() {
        if has_finalizer(&*obj, FINALIZER) {
            // TODO(user): delete what the {{kind}} made that owner references do not
            // collect (objects elsewhere, state outside the cluster).
            ctx.recorder.publish(
                object_reference(&*obj),
                EventType::Normal,
                "Finalizing",
                "Finalize",
                format!("{{kind}} {ns}/{name} is being deleted"),
            );
            let mut released = (*obj).clone();
            remove_finalizer(&mut released, FINALIZER);
            write_finalizers(&api, &released).await?;
        }
        return Ok(Action::done());
    }

    // 2. Hold deletions until the controller has seen them.
    if !has_finalizer(&*obj, FINALIZER) {
        let mut held = (*obj).clone();
        add_finalizer(&mut held, FINALIZER);
        write_finalizers(&api, &held).await?;
        return Ok(Action::done());
    }

    // 3. TODO(user): make the cluster match `obj.spec`: create or update what the {{kind}}
    //    owns (with an owner reference, `controller_runtime::runtime::owner`), reading it
    //    from the cache (`manager.store::<K>()` in `setup`).
    tracing::debug!(namespace = ns, name, "reconciling {{kind}}");

    // 4. Report what was done, for this generation.
    let mut status = obj.status.clone().unwrap_or_default();
    let changed = set_condition(
        &mut status.conditions,
        AVAILABLE,
        true,
        "Reconciled",
        "the {{kind}} was reconciled",
        obj.metadata.generation,
    );
    if changed {
        let patch = serde_json::json!({ "status": status });
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
    }
    Ok(Action::done())
}

/// Writes `obj`'s finalizers, only if the {{kind}} is still at the resourceVersion they were
/// computed from: a merge patch carrying it is refused with 409 Conflict when the object
/// changed since, and the reconcile is retried on a fresh copy.
async fn write_finalizers(api: &Api<{{kind}}>, obj: &{{kind}}) -> Result<(), ReconcileError> {
    let name = obj.metadata.name.as_deref().unwrap_or_default();
    let patch = serde_json::json!({"metadata": {
        "finalizers": obj.metadata.finalizers.clone().unwrap_or_default(),
        "resourceVersion": obj.metadata.resource_version,
    }});
    api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    Ok(())
}
