//! The reconciler: keeps a Deployment of memcached Pods in step with each `Memcached`, and
//! reports what runs in the resource's status.
//!
//! One pass, top to bottom:
//!
//! 1. the runtime's [`finalizer`] flow holds deletions: a resource without our finalizer
//!    gets it, and the pass ends (its update comes back); a resource being deleted gets a
//!    `Deleting` event and loses our finalizer, and its Deployment goes with it by garbage
//!    collection (it is owned);
//! 2. the Deployment is brought to what the spec asks for: created, scaled, or a hand edit
//!    reverted, each with an event; a refused write leaves the resource `Degraded`;
//! 3. the status is computed from what actually runs (the Deployment's ready replicas, the
//!    Pods' names), its conditions set by Kubernetes' rules, and written when it changed.
//!
//! Reads come from the manager's cache; writes go to the API server. Finalizer writes carry
//! the resourceVersion they were computed from, so a stale read fails with 409 and is
//! retried with backoff instead of losing someone else's change. The Deployment is written
//! by [`ops::apply_cached`]: a new one is created, and a pass whose cache has not yet seen
//! that create finds the name taken and goes on from the server's copy, so it neither
//! creates nor announces it twice; a scale, the usual change, is an update of the cached
//! Deployment (the cheapest write for the API server), followed by a merge patch of the
//! replicas alone when the cache was behind; a change inside a list (the image, the port)
//! is a server-side apply. The status is written through its subresource. A pass that
//! changes nothing writes nothing, so the loop settles.

use std::collections::BTreeMap;
use std::sync::Arc;

use controller_runtime::prelude::*;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, Pod, PodSecurityContext, PodSpec, PodTemplateSpec,
    SeccompProfile, SecurityContext,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use crate::api::{Memcached, MemcachedStatus, condition};

/// Our finalizer: a deleted resource is held until the operator has seen its deletion.
pub const FINALIZER: &str = "cache.example.com/finalizer";
/// The field manager of the operator's writes.
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
    if let Some(delay) = outside_service_delay() {
        // The bench's stand-in for a call to a service outside the cluster.
        tokio::time::sleep(delay).await;
    }
    let memcacheds = Api::<Memcached>::namespaced(ctx.client.clone(), mc.namespace());
    finalizer(&memcacheds, FINALIZER, mc, async |event| match event {
        Event::Apply(mc) => apply(&mc, &ctx, &memcacheds).await,
        Event::Cleanup(mc) => {
            let (ns, name) = (mc.namespace(), mc.name());
            ctx.recorder.publish(
                object_reference(&*mc),
                EventType::Warning,
                "Deleting",
                "DeleteCR",
                format!("Custom Resource {name} is being deleted from the namespace {ns}"),
            );
            Ok(Action::done())
        }
    })
    .await
}

/// For benchmarks only (`make bench-shard`): each reconcile first waits this many
/// milliseconds, as a real operator waits on a service outside the cluster. Unset or 0: no
/// wait.
pub const OUTSIDE_SERVICE_DELAY_ENV: &str = "MEMCACHED_OUTSIDE_SERVICE_DELAY_MS";

/// The wait [`OUTSIDE_SERVICE_DELAY_ENV`] asks for, read once.
fn outside_service_delay() -> Option<std::time::Duration> {
    static DELAY: std::sync::OnceLock<Option<std::time::Duration>> = std::sync::OnceLock::new();
    *DELAY.get_or_init(|| {
        let ms: u64 = std::env::var(OUTSIDE_SERVICE_DELAY_ENV)
            .ok()?
            .trim()
            .parse()
            .ok()?;
        (ms > 0).then(|| std::time::Duration::from_millis(ms))
    })
}

/// Steps 2 and 3 of the [module docs](self), for a live resource that holds our finalizer.
async fn apply(
    mc: &Memcached,
    ctx: &Context,
    memcacheds: &Api<Memcached>,
) -> Result<Action, ReconcileError> {
    let (ns, name) = (mc.namespace(), mc.name());
    let want = deployment_for(mc, &ctx.default_image)?;
    let have = ctx.deployments.get(ns, name).await?;
    let deployments = Api::<Deployment>::namespaced(ctx.client.clone(), ns);
    let written = ops::apply_cached(&deployments, have.as_deref(), &want, FIELD_MANAGER).await;
    let deployment = match written {
        Ok((deployment, ops::OperationResult::Unchanged)) => deployment,
        Ok((deployment, done)) => {
            announce(ctx, mc, done, have.as_deref(), &want);
            deployment
        }
        Err(error) => {
            ctx.recorder.publish(
                object_reference(mc),
                EventType::Warning,
                "FailedWrite",
                "ApplyDeployment",
                format!("Failed to write Deployment {ns}/{name}: {error}"),
            );
            let (failed, message) = ("DeploymentWriteFailed", error.to_string());
            let degraded = conditions::new(condition::DEGRADED, true, failed, message);
            let status = status_for(mc, have.as_deref(), None, degraded);
            status::write(memcacheds, mc, &status).await?;
            return Err(error.into());
        }
    };

    // Pods on their way out (deletion timestamp set) no longer count.
    let pods = ctx.pods.select(Some(ns), &instance_selector(name)).await?;
    let live = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none());
    let mut nodes: Vec<String> = live.map(|p| p.name().to_owned()).collect();
    nodes.sort();
    let matches = "the Deployment matches the spec";
    let reconciled = conditions::new(condition::DEGRADED, false, "Reconciled", matches);
    let status = status_for(mc, Some(&deployment), Some(nodes), reconciled);
    status::write(memcacheds, mc, &status).await?;
    Ok(Action::done())
}

/// Maps a memcached Pod to the resource it belongs to, by its instance label.
pub fn pod_owner(pod: &Pod) -> Vec<ObjectRef> {
    let labels = pod.metadata.labels.as_ref();
    let Some(instance) = labels.and_then(|l| l.get(INSTANCE)) else {
        return Vec::new();
    };
    vec![ObjectRef::new(instance.clone()).within(pod.namespace())]
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

/// Writes the Deployment as [`reconcile`] does, with [`ops::apply_cached`] (see the
/// [module docs](self)), given the cached copy `have`; returns it as written.
///
/// # Errors
///
/// The write the API server refused.
pub async fn write_deployment(
    api: &Api<Deployment>,
    have: Option<&Deployment>,
    want: &Deployment,
) -> Result<Deployment, ops::Error> {
    Ok(ops::apply_cached(api, have, want, FIELD_MANAGER).await?.0)
}

/// Records what a write of the Deployment did (`done`), from `have`, the cached copy.
fn announce(
    ctx: &Context,
    mc: &Memcached,
    done: ops::OperationResult,
    have: Option<&Deployment>,
    want: &Deployment,
) {
    let replicas = |d: &Deployment| d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let name = mc.name();
    let (reason, action, note) = match (done, have) {
        (ops::OperationResult::Created, _) => (
            "Created",
            "CreateDeployment",
            format!("Created Deployment {name} with {} replicas", replicas(want)),
        ),
        (_, Some(have)) if replicas(have) != replicas(want) => (
            "Scaled",
            "ScaleDeployment",
            format!(
                "Scaled Deployment {name} from {} to {} replicas",
                replicas(have),
                replicas(want)
            ),
        ),
        _ => (
            "Updated",
            "UpdateDeployment",
            format!("Updated Deployment {name} to match the spec"),
        ),
    };
    tracing::info!(reason, "{note}");
    let regarding = object_reference(mc);
    ctx.recorder
        .publish(regarding, EventType::Normal, reason, action, note);
}

// === the status ===

/// The status that describes `deployment` and the Pods `nodes` (`None`: the names shown
/// before), with `degraded` as the `Degraded` condition.
fn status_for(
    mc: &Memcached,
    deployment: Option<&Deployment>,
    nodes: Option<Vec<String>>,
    degraded: Condition,
) -> MemcachedStatus {
    let (size, generation) = (mc.spec.size(), mc.metadata.generation);
    let ready = deployment
        .and_then(|d| d.status.as_ref()?.ready_replicas)
        .unwrap_or(0);
    let counted = format!("{ready} of {size} memcached pods are ready");
    let (available, progressing) = (condition::AVAILABLE, condition::PROGRESSING);
    let pods = if ready >= size {
        [
            (available, true, "PodsReady"),
            (progressing, false, "Stable"),
        ]
    } else {
        [
            (available, false, "PodsNotReady"),
            (progressing, true, "PodsStarting"),
        ]
    };
    let pods = pods.map(|(type_, ok, reason)| conditions::new(type_, ok, reason, &counted));
    let mut status = mc.status.clone().unwrap_or_default();
    for c in pods.into_iter().chain([degraded]) {
        let c = Condition {
            observed_generation: generation,
            ..c
        };
        conditions::set(&mut status.conditions, c);
    }
    status.observed_generation = generation;
    status.ready_replicas = Some(ready);
    if let Some(nodes) = nodes {
        status.nodes = nodes;
    }
    status
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

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
        assert!(ops::is_applied(&have, &want));
    }

    #[test]
    fn labels_others_add_do_not_count_as_a_difference() {
        let want = deployment_for(&memcached(3), "memcached:1").unwrap();
        let mut have = want.clone();
        let labels = have.metadata.labels.as_mut().unwrap();
        labels.insert("team".to_owned(), "cache".to_owned());
        assert!(ops::is_applied(&have, &want));
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
            assert!(!ops::is_applied(&have, &want));
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

    fn with_ready(ready: i32) -> Deployment {
        let mut d = Deployment::default();
        d.status.get_or_insert_default().ready_replicas = Some(ready);
        d
    }

    #[test]
    fn a_condition_keeps_its_transition_time_until_its_status_changes() {
        let mut mc = memcached(2);
        mc.metadata.generation = Some(1);
        let fine = || conditions::new(condition::DEGRADED, false, "Reconciled", "fine");
        let nodes = Some(vec!["cache-a".to_owned()]);
        let mut status = status_for(&mc, Some(&with_ready(0)), nodes.clone(), fine());
        let available = |s: &MemcachedStatus| {
            conditions::find(&s.conditions, condition::AVAILABLE)
                .unwrap()
                .clone()
        };
        assert!(available(&status).last_transition_time.0 > Timestamp::UNIX_EPOCH);
        status.conditions[0].last_transition_time = Time(Timestamp::UNIX_EPOCH);
        mc.status = Some(status);
        mc.metadata.generation = Some(2);

        // Still not available: only the message and the generation move.
        let status = status_for(&mc, Some(&with_ready(1)), nodes.clone(), fine());
        let still = available(&status);
        assert_eq!(still.last_transition_time, Time(Timestamp::UNIX_EPOCH));
        assert_eq!(still.message, "1 of 2 memcached pods are ready");
        assert_eq!(still.observed_generation, Some(2));
        mc.status = Some(status);

        // Available now: the transition time moves.
        let status = status_for(&mc, Some(&with_ready(2)), nodes, fine());
        let now = available(&status);
        assert_eq!(
            (now.status.as_str(), now.reason.as_str()),
            ("True", "PodsReady")
        );
        assert_ne!(now.last_transition_time, Time(Timestamp::UNIX_EPOCH));
        assert_eq!(status.conditions.len(), 3);
        assert_eq!(status.ready_replicas, Some(2));
    }

    #[test]
    fn a_failed_write_is_degraded_and_keeps_the_pods_shown() {
        let mut mc = memcached(1);
        mc.status = Some(MemcachedStatus {
            nodes: vec!["cache-a".to_owned()],
            ..MemcachedStatus::default()
        });
        let refused = conditions::new(condition::DEGRADED, true, "DeploymentWriteFailed", "no");
        let status = status_for(&mc, None, None, refused);
        let degraded = conditions::find(&status.conditions, condition::DEGRADED).unwrap();
        assert_eq!(
            (degraded.status.as_str(), degraded.reason.as_str()),
            ("True", "DeploymentWriteFailed")
        );
        assert_eq!(status.nodes, ["cache-a"]);
        assert!(conditions::is_false(
            &status.conditions,
            condition::AVAILABLE
        ));
    }
}
