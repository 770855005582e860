//! The {{kind}} controller: reconciles each `{{kind}}` ({{api_version}}).
//!
//! One pass, top to bottom, as the runtime's Memcached operator does it:
//!
//! 1. the runtime's [`finalizer`] flow holds deletions: a {{kind}} without the finalizer
//!    gets it, and the pass ends (the write comes back as an event); a {{kind}} being
//!    deleted is cleaned up after, then loses the finalizer, so that its deletion completes;
//! 2. TODO(user): the cluster is brought to what the spec asks;
//! 3. the status says so: condition `Available`, for the generation seen, written only when
//!    it changed.
//!
//! Reads come from the manager's cache; writes go to the API server. The finalizer writes
//! carry the resourceVersion they were computed from, so a stale read fails with 409 and
//! is retried. A pass that changes nothing writes nothing, so the loop settles.

use std::sync::Arc;

use controller_runtime::prelude::*;

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

/// Registers the {{kind}} controller with `manager`, with the RBAC rules of its writes (the
/// runtime adds the list and watch of what it caches, and the events; `make manifests`
/// writes them all to config/rbac/role.yaml).
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
        // `.watches::<K>(map)` for other kinds it depends on, with a `.rbac(..)` rule for
        // each write.
        .rbac(
            Rule::of::<{{kind}}>()
                .verbs([Verb::Patch])
                .because("the finalizer is added and removed by a merge patch"),
        )
        .rbac(
            Rule::status::<{{kind}}>()
                .verbs([Verb::Patch])
                .because("the status is written by a merge patch through the subresource"),
        )
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
    let api = Api::<{{kind}}>::namespaced(ctx.client.clone(), obj.namespace());
    finalizer(&api, FINALIZER, obj, async |event| match event {
        Event::Apply(obj) => apply(&obj, &api).await,
        Event::Cleanup(obj) => {
            // TODO(user): delete what the {{kind}} made that owner references do not
            // collect (objects elsewhere, state outside the cluster).
            let (ns, name) = (obj.namespace(), obj.name());
            ctx.recorder.publish(
                object_reference(&*obj),
                EventType::Normal,
                "Finalizing",
                "Finalize",
                format!("{{kind}} {ns}/{name} is being deleted"),
            );
            Ok(Action::done())
        }
    })
    .await
}

/// Steps 2 and 3 of the [module docs](self), for a live {{kind}} that holds the finalizer.
async fn apply(obj: &{{kind}}, api: &Api<{{kind}}>) -> Result<Action, ReconcileError> {
    // 2. TODO(user): make the cluster match `obj.spec`: create or update what the {{kind}}
    //    owns (with `controller_reference(obj)?` as its owner reference, written with
    //    `ops::apply_cached`), reading it from the cache (`manager.store::<K>()` in `setup`).
    let (namespace, name) = (obj.namespace(), obj.name());
    tracing::debug!(namespace, name, "reconciling");

    // 3. Report what was done, for this generation.
    let mut status = obj.status.clone().unwrap_or_default();
    let message = "the {{kind}} was reconciled";
    let available = Condition {
        observed_generation: obj.metadata.generation,
        ..conditions::new(AVAILABLE, true, "Reconciled", message)
    };
    conditions::set(&mut status.conditions, available);
    status::write(api, obj, &status).await?;
    Ok(Action::done())
}
