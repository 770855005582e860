//! The reconciler: keeps a Deployment of memcached Pods in step with each `Memcached`, and
//! reports what runs in the resource's status.
//!
//! One pass, top to bottom:
//!
//! 1. a resource being deleted gets a `Deleting` event and loses our finalizer; its
//!    Deployment goes with it by garbage collection (it is owned);
//! 2. a resource without our finalizer gets it, and the pass ends (its update comes back);
//! 3. the Deployment is compared with what the spec asks for, and applied when it differs:
//!    created, scaled, or a hand edit reverted;
//! 4. the status is computed from what actually runs (the Deployment's ready replicas, the
//!    Pods' names) and written when it changed.
//!
//! Reads come from the manager's cache; writes go to the API server. Finalizer writes carry
//! the resourceVersion they were computed from, so a stale read fails with 409 and is
//! retried with backoff instead of losing someone else's change. A scale, the usual change,
//! updates the cached Deployment with the new replicas (the cheapest write for the API
//! server), carrying its resourceVersion; when the cache was behind, a merge patch of the
//! replicas alone follows at once. Any other change to the Deployment is a server-side
//! apply, which needs no read-modify-write. The status is written through its subresource.
//! A pass that changes nothing writes nothing, so the loop settles.

use std::collections::BTreeMap;
use std::sync::Arc;

use controller_runtime::client::{Api, Client, Patch, PatchParams, PostParams};
use controller_runtime::runtime::events::{EventType, Recorder, object_reference};
use controller_runtime::runtime::finalizer::has_finalizer;
use controller_runtime::runtime::owner::controller_reference;
use controller_runtime::runtime::{Action, ObjectRef, ReconcileError, Store, ops};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, Pod, PodSecurityContext, PodSpec, PodTemplateSpec,
    SeccompProfile, SecurityContext,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;

use crate::api::{Memcached, MemcachedStatus, condition};

/// Our finalizer: a deleted resource is held until the operator has seen its deletion.
pub const FINALIZER: &str = "cache.example.com/finalizer";
/// The field manager of the operator's server-side applies.
pub const FIELD_MANAGER: &str = "memcached-operator";
/// The label every Pod of every memcached cluster carries; the operator caches only Pods
/// with it.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "memcached-operator");
/// The label naming the resource a Pod belongs to.
pub const INSTANCE: &str = "app.kubernetes.io/instance";

/// What every reconcile shares.
pub struct Context {
    /// Writes go through it.
    pub client: Client,
    /// The cached Deployments.
    pub deployments: Store<Deployment>,
    /// The cached memcached Pods (only those labelled [`MANAGED_BY`]).
    pub pods: Store<Pod>,
    /// Records events as `memcached-controller`.
    pub recorder: Recorder,
    /// The image for resources that name none.
    pub default_image: String,
}

/// Brings one `Memcached` and its Deployment in step; see the [module docs](self).
///
/// # Errors
///
/// A write the API server refused (a conflict, a 422, RBAC); the controller retries it with
/// backoff. A finalizer write that met a newer resource version is one of them.
pub async fn reconcile(mc: Arc<Memcached>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    let ns = mc.metadata.namespace.as_deref().unwrap_or_default();
    let name = mc.metadata.name.as_deref().unwrap_or_default();
    let memcacheds = Api::<Memcached>::namespaced(ctx.client.clone(), ns);

    // 1. Being deleted: say so, and let go.
    if mc.metadata.deletion_timestamp.is_some() {
        if has_finalizer(&*mc, FINALIZER) {
            ctx.recorder.publish(
                object_reference(&*mc),
                EventType::Warning,
                "Deleting",
                "DeleteCR",
                format!("Custom Resource {name} is being deleted from the namespace {ns}"),
            );
            let rest = finalizers(&mc).filter(|f| f != FINALIZER).collect();
            set_finalizers(&memcacheds, &mc, rest).await?;
        }
        return Ok(Action::done());
    }

    // 2. Hold deletions until we have seen them.
    if !has_finalizer(&*mc, FINALIZER) {
        let all = finalizers(&mc).chain([FINALIZER.to_owned()]).collect();
        set_finalizers(&memcacheds, &mc, all).await?;
        return Ok(Action::done());
    }

    // 3. The Deployment, as the spec asks.
    let want = deployment_for(&mc, &ctx.default_image)?;
    let cached = ctx.deployments.get(ns, name)?;
    let deployment = match cached.as_deref() {
        Some(have) if !differs(have, &want) => have.clone(),
        have => {
            let deployments = Api::<Deployment>::namespaced(ctx.client.clone(), ns);
            match write_deployment(&deployments, have, &want).await {
                Ok(written) => {
                    announce(&ctx, &mc, have, &want);
                    written
                }
                Err(error) => {
                    ctx.recorder.publish(
                        object_reference(&*mc),
                        EventType::Warning,
                        "FailedWrite",
                        "ApplyDeployment",
                        format!("Failed to write Deployment {ns}/{name}: {error}"),
                    );
                    let degraded = (condition::DEGRADED, true, "DeploymentWriteFailed");
                    let status = status_for(&mc, have, &[], Some((degraded, &error.to_string())));
                    write_status(&memcacheds, &mc, status).await?;
                    return Err(error.into());
                }
            }
        }
    };

    // 4. The status, from what runs.
    let pods = ctx.pods.select(Some(ns), &instance_selector(name))?;
    // Pods on their way out (deletion timestamp set) no longer count.
    let mut nodes: Vec<String> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    nodes.sort();
    let status = status_for(&mc, Some(&deployment), &nodes, None);
    write_status(&memcacheds, &mc, status).await?;
    Ok(Action::done())
}

/// Maps a memcached Pod to the resource it belongs to, by its instance label.
pub fn pod_owner(pod: &Pod) -> Vec<ObjectRef> {
    let labels = pod.metadata.labels.as_ref();
    let Some(instance) = labels.and_then(|l| l.get(INSTANCE)) else {
        return Vec::new();
    };
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    vec![ObjectRef::new(instance.clone()).within(ns)]
}

// === the Deployment ===

/// The labels of one resource's Pods: unique per resource, so two resources in one
/// namespace never select each other's Pods.
fn labels(name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".to_owned(), "memcached".to_owned()),
        (INSTANCE.to_owned(), name.to_owned()),
        (MANAGED_BY.0.to_owned(), MANAGED_BY.1.to_owned()),
    ])
}

fn instance_selector(name: &str) -> LabelSelector {
    LabelSelector {
        match_labels: Some(labels(name)),
        ..LabelSelector::default()
    }
}

/// The Deployment the resource asks for: named after it, owned by it, its Pods restricted
/// (non-root, seccomp RuntimeDefault, no privilege escalation, no capabilities).
pub fn deployment_for(mc: &Memcached, default_image: &str) -> Result<Deployment, ReconcileError> {
    let name = mc.metadata.name.clone().unwrap_or_default();
    let image = mc
        .spec
        .image
        .clone()
        .unwrap_or_else(|| default_image.to_owned());
    Ok(Deployment {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: mc.metadata.namespace.clone(),
            labels: Some(labels(&name)),
            owner_references: Some(vec![controller_reference(mc)?]),
            ..ObjectMeta::default()
        },
        spec: Some(DeploymentSpec {
            replicas: Some(mc.spec.size()),
            selector: instance_selector(&name),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels(&name)),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(true),
                        seccomp_profile: Some(SeccompProfile {
                            type_: "RuntimeDefault".to_owned(),
                            ..SeccompProfile::default()
                        }),
                        ..PodSecurityContext::default()
                    }),
                    containers: vec![Container {
                        name: "memcached".to_owned(),
                        image: Some(image),
                        image_pull_policy: Some("IfNotPresent".to_owned()),
                        command: Some(
                            ["memcached", "--memory-limit=64", "-o", "modern", "-v"]
                                .map(str::to_owned)
                                .to_vec(),
                        ),
                        ports: Some(vec![ContainerPort {
                            container_port: mc.spec.container_port,
                            name: Some("memcached".to_owned()),
                            ..ContainerPort::default()
                        }]),
                        security_context: Some(SecurityContext {
                            run_as_non_root: Some(true),
                            run_as_user: Some(1001),
                            allow_privilege_escalation: Some(false),
                            capabilities: Some(Capabilities {
                                drop: Some(vec!["ALL".to_owned()]),
                                ..Capabilities::default()
                            }),
                            ..SecurityContext::default()
                        }),
                        ..Container::default()
                    }],
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    })
}

/// Whether the Deployment lacks something the operator sets: its replicas, image, port,
/// labels or owner.
fn differs(have: &Deployment, want: &Deployment) -> bool {
    let spec = |d: &Deployment| d.spec.clone().unwrap_or_default();
    let container = |d: &Deployment| {
        let pod = spec(d).template.spec.unwrap_or_default();
        pod.containers.into_iter().next().unwrap_or_default()
    };
    // The server fills in defaults (a port's protocol, say): compare what we set.
    let ports = |c: &Container| -> Vec<(i32, Option<String>)> {
        let ports = c.ports.iter().flatten();
        ports.map(|p| (p.container_port, p.name.clone())).collect()
    };
    let (h, w) = (container(have), container(want));
    spec(have).replicas != spec(want).replicas
        || h.image != w.image
        || ports(&h) != ports(&w)
        || have.metadata.labels != want.metadata.labels
        || have.metadata.owner_references != want.metadata.owner_references
}

/// Writes the Deployment (see the [module docs](self)): a scale alone is an update of the
/// cached Deployment, as the Go sample writes it, or a merge patch of `spec.replicas` if
/// the update meets a newer version (409); anything else, or a Deployment not there yet, is
/// a server-side apply of the whole of `want`.
///
/// # Errors
///
/// The write the API server refused.
pub async fn write_deployment(
    api: &Api<Deployment>,
    have: Option<&Deployment>,
    want: &Deployment,
) -> Result<Deployment, ops::Error> {
    let replicas = want.spec.as_ref().and_then(|s| s.replicas);
    let Some(mut scaled) = have.cloned() else {
        return ops::apply(api, want, FIELD_MANAGER).await;
    };
    if let Some(spec) = scaled.spec.as_mut() {
        spec.replicas = replicas;
    }
    if differs(&scaled, want) {
        return ops::apply(api, want, FIELD_MANAGER).await;
    }
    let name = want.metadata.name.as_deref().unwrap_or_default();
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PostParams::default()
    };
    match api.replace(name, &params, &scaled).await {
        Err(e) if e.is_conflict() => {
            let patch = serde_json::json!({ "spec": { "replicas": replicas } });
            let params = PatchParams {
                field_manager: Some(FIELD_MANAGER.to_owned()),
                ..PatchParams::default()
            };
            Ok(api.patch(name, &params, &Patch::Merge(patch)).await?)
        }
        written => Ok(written?),
    }
}

/// Records what a write of the Deployment did.
fn announce(ctx: &Context, mc: &Memcached, have: Option<&Deployment>, want: &Deployment) {
    let replicas = |d: &Deployment| d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let name = mc.metadata.name.as_deref().unwrap_or_default();
    let (reason, action, note) = match have {
        None => (
            "Created",
            "CreateDeployment",
            format!("Created Deployment {name} with {} replicas", replicas(want)),
        ),
        Some(have) if replicas(have) != replicas(want) => (
            "Scaled",
            "ScaleDeployment",
            format!(
                "Scaled Deployment {name} from {} to {} replicas",
                replicas(have),
                replicas(want)
            ),
        ),
        Some(_) => (
            "Updated",
            "UpdateDeployment",
            format!("Updated Deployment {name} to match the spec"),
        ),
    };
    tracing::info!(reason, "{note}");
    ctx.recorder.publish(
        object_reference(mc),
        EventType::Normal,
        reason,
        action,
        note,
    );
}

// === the status ===

type Fault<'a> = ((&'static str, bool, &'static str), &'a str);

/// The status that describes `deployment` and `nodes`, or a failure to write the
/// Deployment.
fn status_for(
    mc: &Memcached,
    deployment: Option<&Deployment>,
    nodes: &[String],
    fault: Option<Fault<'_>>,
) -> MemcachedStatus {
    let size = mc.spec.size();
    let ready = deployment
        .and_then(|d| d.status.as_ref())
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0);
    let generation = mc.metadata.generation;
    let old = mc.status.clone().unwrap_or_default();
    let mut conditions = old.conditions.clone();
    let mut set = |type_: &str, status: bool, reason: &str, message: String| {
        set_condition(&mut conditions, type_, status, reason, message, generation);
    };
    let counted = format!("{ready} of {size} memcached pods are ready");
    if ready >= size {
        set(condition::AVAILABLE, true, "PodsReady", counted.clone());
        set(condition::PROGRESSING, false, "Stable", counted);
    } else {
        set(condition::AVAILABLE, false, "PodsNotReady", counted.clone());
        set(condition::PROGRESSING, true, "PodsStarting", counted);
    }
    match fault {
        Some(((type_, status, reason), message)) => set(type_, status, reason, message.to_owned()),
        None => set(
            condition::DEGRADED,
            false,
            "Reconciled",
            "the Deployment matches the spec".to_owned(),
        ),
    }
    MemcachedStatus {
        conditions,
        observed_generation: generation,
        nodes: if fault.is_some() {
            old.nodes
        } else {
            nodes.to_vec()
        },
        ready_replicas: Some(ready),
    }
}

/// Sets a condition as apimachinery's `meta.SetStatusCondition` does: the transition time
/// moves only when the status changes.
fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
) {
    let status = if status { "True" } else { "False" }.to_owned();
    let now = Time(now());
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != status {
                c.last_transition_time = now;
            }
            c.status = status;
            c.reason = reason.to_owned();
            c.message = message;
            c.observed_generation = generation;
        }
        None => conditions.push(Condition {
            type_: type_.to_owned(),
            status,
            reason: reason.to_owned(),
            message,
            observed_generation: generation,
            last_transition_time: now,
        }),
    }
}

/// The time now, to the second (metav1.Time's precision).
fn now() -> Timestamp {
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    Timestamp::from_second(seconds).unwrap_or_default()
}

/// Writes `status` through the status subresource, unless it is what the resource shows.
async fn write_status(
    api: &Api<Memcached>,
    mc: &Memcached,
    status: MemcachedStatus,
) -> Result<(), ReconcileError> {
    if mc.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let name = mc.metadata.name.as_deref().unwrap_or_default();
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({ "status": status })),
    )
    .await?;
    Ok(())
}

// === the finalizer ===

fn finalizers(mc: &Memcached) -> impl Iterator<Item = String> + '_ {
    mc.metadata.finalizers.iter().flatten().cloned()
}

/// Sets the finalizers, only if the resource is still at the version they were computed
/// from: a merge patch carrying the resourceVersion is refused with 409 Conflict when the
/// resource has changed since (controller-runtime's `MergeFromWithOptimisticLock`).
async fn set_finalizers(
    api: &Api<Memcached>,
    mc: &Memcached,
    finalizers: Vec<String>,
) -> Result<(), ReconcileError> {
    let name = mc.metadata.name.as_deref().unwrap_or_default();
    let patch = serde_json::json!({"metadata": {
        "finalizers": finalizers,
        "resourceVersion": mc.metadata.resource_version,
    }});
    api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::MemcachedSpec;

    fn memcached(size: i32) -> Memcached {
        let mut mc = Memcached::new(
            "cache",
            MemcachedSpec {
                size: Some(size),
                container_port: 11211,
                image: None,
            },
        );
        mc.metadata.namespace = Some("prod".to_owned());
        mc.metadata.uid = Some("u-1".to_owned());
        mc
    }

    #[test]
    fn server_defaults_do_not_count_as_a_difference() {
        let want = deployment_for(&memcached(3), "memcached:1").unwrap();
        let mut have = want.clone();
        let pod = have.spec.as_mut().unwrap().template.spec.as_mut().unwrap();
        pod.containers[0].ports.as_mut().unwrap()[0].protocol = Some("TCP".to_owned());
        pod.containers[0].termination_message_path = Some("/dev/termination-log".to_owned());
        have.spec.as_mut().unwrap().revision_history_limit = Some(10);
        assert!(!differs(&have, &want));
    }

    #[test]
    fn size_image_and_port_changes_are_differences() {
        let want = deployment_for(&memcached(3), "memcached:1").unwrap();
        let scaled = deployment_for(&memcached(1), "memcached:1").unwrap();
        let other_image = deployment_for(&memcached(3), "memcached:2").unwrap();
        let mut other_port = memcached(3);
        other_port.spec.container_port = 11212;
        let other_port = deployment_for(&other_port, "memcached:1").unwrap();
        for have in [scaled, other_image, other_port] {
            assert!(differs(&have, &want));
        }
    }

    #[test]
    fn each_resource_selects_only_its_own_pods() {
        let a = deployment_for(&memcached(1), "m").unwrap();
        let mut other = memcached(1);
        other.metadata.name = Some("other".to_owned());
        let b = deployment_for(&other, "m").unwrap();
        assert_ne!(a.spec.unwrap().selector, b.spec.unwrap().selector);
    }

    #[test]
    fn a_condition_keeps_its_transition_time_until_its_status_changes() {
        let mut conditions = Vec::new();
        set_condition(
            &mut conditions,
            "Available",
            false,
            "PodsNotReady",
            "0 of 1".into(),
            Some(1),
        );
        let first = conditions[0].last_transition_time.clone();
        conditions[0].last_transition_time = Time(Timestamp::UNIX_EPOCH);
        set_condition(
            &mut conditions,
            "Available",
            false,
            "PodsNotReady",
            "0 of 2".into(),
            Some(2),
        );
        assert_eq!(
            conditions[0].last_transition_time,
            Time(Timestamp::UNIX_EPOCH)
        );
        assert_eq!(conditions[0].message, "0 of 2");
        set_condition(
            &mut conditions,
            "Available",
            true,
            "PodsReady",
            "2 of 2".into(),
            Some(2),
        );
        assert_ne!(
            conditions[0].last_transition_time,
            Time(Timestamp::UNIX_EPOCH)
        );
        assert!(first.0 > Timestamp::UNIX_EPOCH);
        assert_eq!(conditions.len(), 1);
    }
}
