//! The 100,000-Pod workload of `make bench-pods`: Pods bound straight to the cluster's kwok
//! nodes (no scheduler, no kubelet: kwok makes them Running), created and deleted many at a
//! time, and one informer over them whose memory the bench script watches from outside.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use controller_runtime::client::{
    Api, Client, DeleteParams, Error, ListParams, Patch, PatchParams, PostParams, Raw, Result,
};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::json;

use crate::measure::{Running, SyncParams};
use crate::seed::in_parallel;

/// The label every Pod of the workload carries, and the label of the kwok nodes.
pub const PODS_LABEL: (&str, &str) = ("app", "pods-bench");

/// The name of the `i`th Pod of the workload.
///
/// ```
/// assert_eq!(informer_bench::pods_pod_name(7), "pods-000007");
/// ```
pub fn pods_pod_name(i: usize) -> String {
    format!("pods-{i:06}")
}

/// The `i`th Pod of the workload, bound to `node`: shaped like a Deployment's Pod (two
/// labels, one container with a port, requests and an environment variable), so that with
/// what admission adds (the service-account volume, tolerations) and kwok's status it is
/// about the size of a real one.
pub fn pods_pod(i: usize, node: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {
            "name": pods_pod_name(i),
            "labels": {PODS_LABEL.0: PODS_LABEL.1, "pod-template-hash": "5d8f7c9b6"},
        },
        "spec": {
            "nodeName": node,
            "containers": [{
                "name": "memcached",
                "image": "memcached:1.6.38-alpine",
                "ports": [{"name": "memcached", "containerPort": 11211, "protocol": "TCP"}],
                "env": [{"name": "INDEX", "value": i.to_string()}],
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
            }],
        }
    }))
    .expect("a valid Pod")
}

/// What [`pods_seed`] creates.
#[derive(Clone, Debug)]
pub struct PodsSeedParams {
    /// The namespace, made if missing.
    pub namespace: String,
    /// Pods `pods-000000` … in it.
    pub pods: usize,
    /// Creates in flight at once.
    pub concurrency: usize,
    /// Give up waiting for the service account or for the Pods to run after this long.
    pub timeout: Duration,
}

/// Makes the namespace and the Pods of it that are missing, `concurrency` at a time, each
/// bound to one of the kwok nodes in turn; writes the Running status of those kwok has not
/// reached yet; then waits until none is left not Running.
/// Progress goes to stderr.
///
/// # Errors
///
/// No kwok node; the first failed request other than an `AlreadyExists`; [`Error::Timeout`].
pub async fn pods_seed(client: &Client, params: &PodsSeedParams) -> Result<()> {
    let ns = &params.namespace;
    let nodes: Vec<String> = Api::<Node>::cluster(client.clone())
        .list_metadata(&ListParams::default().labels("type=kwok"))
        .await?
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    if nodes.is_empty() {
        return Err(Error::Build(
            "no kwok node (label type=kwok) in the cluster".into(),
        ));
    }
    let namespaces = Api::<Namespace>::cluster(client.clone());
    if namespaces.get_opt(ns).await?.is_none() {
        let namespace = Namespace {
            metadata: ObjectMeta {
                name: Some(ns.clone()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        ignore(
            namespaces.create(&PostParams::default(), &namespace).await,
            Error::is_already_exists,
        )?;
        eprintln!("pods-seed: created namespace {ns}");
    }
    // Pods are admitted only once the namespace's default service account exists.
    let accounts = Api::<ServiceAccount>::namespaced(client.clone(), ns);
    let start = Instant::now();
    while accounts.get_opt("default").await?.is_none() {
        check_timeout(client, "the default service account", start, params.timeout)?;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let existing: HashSet<String> = names(&pods).await?.into_iter().collect();
    let missing: Vec<usize> = (0..params.pods)
        .filter(|&i| !existing.contains(&pods_pod_name(i)))
        .collect();
    eprintln!(
        "pods-seed: {} of {} Pods exist in {ns}, creating {} on {} kwok nodes",
        params.pods - missing.len(),
        params.pods,
        missing.len(),
        nodes.len()
    );
    let nodes = Arc::new(nodes);
    in_parallel(
        "pods: created",
        5_000,
        missing,
        params.concurrency,
        move |i| {
            let (pods, nodes) = (pods.clone(), nodes.clone());
            async move {
                let pod = pods_pod(i, &nodes[i % nodes.len()]);
                ignore(
                    pods.create(&PostParams::default(), &pod).await,
                    Error::is_already_exists,
                )
            }
        },
    )
    .await?;

    // kwok writes each Pod's status, but at some 20 a second: 100,000 would take over an
    // hour. Write the status kwok would (Running, Ready, an IP) of the Pods it has not
    // reached yet, as many at a time as the creates; kwok leaves a Pod with an IP alone.
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let pending = Arc::new(names_where(&pods, "status.phase!=Running").await?);
    eprintln!(
        "pods-seed: writing the status of {} Pods kwok has not run yet",
        pending.len()
    );
    let indices: Vec<usize> = (0..pending.len()).collect();
    let writer = pods.clone();
    in_parallel(
        "pods: made Running",
        5_000,
        indices,
        params.concurrency,
        move |i| {
            let (pods, pending) = (writer.clone(), pending.clone());
            async move {
                let patch = Patch::Merge(running_status(i));
                ignore(
                    pods.patch_status(&pending[i], &PatchParams::default(), &patch)
                        .await,
                    Error::is_not_found,
                )
            }
        },
    )
    .await?;

    // Wait until every Pod is Running.
    let start = Instant::now();
    let mut reported = None;
    loop {
        let left = names_where(&pods, "status.phase!=Running").await?.len();
        if reported != Some(left) {
            eprintln!("pods-seed: Pods not Running yet: {left}");
            reported = Some(left);
        }
        if left == 0 {
            return Ok(());
        }
        check_timeout(client, "the Pods Running", start, params.timeout)?;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Deletes every Pod of the namespace at once (grace period 0), `concurrency` at a time, then
/// the namespace, and waits until it is gone. Progress goes to stderr.
///
/// # Errors
///
/// The first failed request other than a `NotFound`; [`Error::Timeout`] if the namespace is
/// still there after `timeout`.
pub async fn pods_clean(
    client: &Client,
    namespace: &str,
    concurrency: usize,
    timeout: Duration,
) -> Result<()> {
    let namespaces = Api::<Namespace>::cluster(client.clone());
    if namespaces.get_opt(namespace).await?.is_none() {
        eprintln!("pods-clean: no namespace {namespace}");
        return Ok(());
    }
    let pods = Api::<Pod>::namespaced(client.clone(), namespace);
    let names = Arc::new(names(&pods).await?);
    eprintln!("pods-clean: deleting {} Pods in {namespace}", names.len());
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    let indices: Vec<usize> = (0..names.len()).collect();
    in_parallel("pods: deleted", 5_000, indices, concurrency, move |i| {
        let (pods, names, now) = (pods.clone(), names.clone(), now.clone());
        async move { ignore(pods.delete(&names[i], &now).await, Error::is_not_found) }
    })
    .await?;
    ignore(
        namespaces
            .delete(namespace, &DeleteParams::background())
            .await,
        Error::is_not_found,
    )?;
    let start = Instant::now();
    while namespaces.get_opt(namespace).await?.is_some() {
        check_timeout(client, "the namespace to go", start, timeout)?;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eprintln!("pods-clean: namespace {namespace} is gone");
    Ok(())
}

/// What [`pods_run`] is told.
#[derive(Clone, Debug)]
pub struct PodsRunParams {
    /// The namespace holding the Pods.
    pub namespace: String,
    /// How long to wait after the sync before the settled figures.
    pub settle: Duration,
    /// Give up if the informer has not synced by then.
    pub timeout: Duration,
}

/// One run of the Pods informer for `make bench-pods`, driven over stdin and stdout by the
/// script that samples this process's memory from outside. Each step prints one JSON line
/// with a `phase`:
///
/// 1. `ready`: the client is connected (one small LIST went through); the script reads the
///    baseline, and says go (a line on stdin).
/// 2. `synced`: a fresh informer of `Raw<Pod>` over the namespace, managedFields stripped
///    by its transform (the runtime's cache), has synced; with the sync time, the objects
///    cached and the heap then held.
/// 3. `settled`: `settle` later, the informer still running; the script reads the settled
///    memory, and says go.
/// 4. `heap`: the heap the running informer holds (live bytes now minus at `ready`).
///
/// `live_bytes` is the counting allocator's reading.
///
/// # Errors
///
/// A failed request; [`Error::Timeout`] if the informer does not sync in time; stdin closed.
pub async fn pods_run(
    client: &Client,
    params: &PodsRunParams,
    live_bytes: impl Fn() -> usize,
) -> Result<()> {
    let pods = Api::<Pod>::namespaced(client.clone(), &params.namespace);
    let probe = pods.list_metadata(&ListParams::default().limit(1)).await?;
    if probe.items.is_empty() {
        return Err(Error::Build(format!(
            "namespace {} holds no Pods: run `informer-bench pods-seed` first",
            params.namespace
        )));
    }
    drop(probe);
    let before = live_bytes();
    say(json!({"phase": "ready"}));
    wait_for_go().await?;

    let sync = SyncParams {
        namespace: params.namespace.clone(),
        strip_managed_fields: true,
        settle: params.settle,
        timeout: params.timeout,
    };
    let running = Running::<Raw<Pod>>::start(client, &sync).await?;
    let (informer, elapsed) = (&running.informer, running.elapsed);
    let objects = informer.get_indexer().len();
    say(json!({
        "phase": "synced",
        "secs": elapsed.as_secs_f64(),
        "objects": objects,
        "heap_bytes": live_bytes() as i64 - before as i64,
    }));
    tokio::time::sleep(params.settle).await;
    say(json!({"phase": "settled", "objects": informer.get_indexer().len()}));
    wait_for_go().await?;
    say(json!({
        "phase": "heap",
        "objects": informer.get_indexer().len(),
        "heap_bytes": live_bytes() as i64 - before as i64,
    }));
    running.stop(Duration::ZERO).await;
    Ok(())
}

/// One JSON line on stdout, flushed.
fn say(line: serde_json::Value) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Waits for a line on stdin: the script's go-ahead.
async fn wait_for_go() -> Result<()> {
    let read = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|n| n > 0)
    })
    .await
    .expect("reading stdin does not panic");
    match read {
        Ok(true) => Ok(()),
        _ => Err(Error::Build("stdin closed before the go-ahead".into())),
    }
}

/// The status kwok gives a running Pod of the workload (the `i`th to get one here).
fn running_status(i: usize) -> serde_json::Value {
    let now = "2026-01-01T00:00:00Z";
    let condition = |kind: &str| json!({"type": kind, "status": "True", "lastProbeTime": null, "lastTransitionTime": now});
    let ip = format!("10.{}.{}.{}", 200 + i / 65_536, (i / 256) % 256, i % 256);
    json!({"status": {
        "phase": "Running",
        "conditions": [condition("Initialized"), condition("Ready"), condition("ContainersReady")],
        "containerStatuses": [{
            "name": "memcached", "image": "memcached:1.6.38-alpine", "imageID": "",
            "ready": true, "restartCount": 0, "lastState": {},
            "state": {"running": {"startedAt": now}},
        }],
        "hostIP": "127.0.0.1", "hostIPs": [{"ip": "127.0.0.1"}],
        "podIP": ip, "podIPs": [{"ip": ip}],
        "startTime": now,
    }})
}

/// The names of every Pod in `pods`' namespace, listed 5,000 at a time.
async fn names(pods: &Api<Pod>) -> Result<Vec<String>> {
    names_where(pods, "").await
}

/// The names of the Pods in `pods`' namespace whose fields match `fields` (all with `""`),
/// listed 5,000 at a time.
async fn names_where(pods: &Api<Pod>, fields: &str) -> Result<Vec<String>> {
    let mut params = ListParams::default().limit(5_000);
    if !fields.is_empty() {
        params = params.fields(fields);
    }
    let mut names = Vec::new();
    loop {
        let page = pods.list_metadata(&params).await?;
        names.extend(page.items.into_iter().filter_map(|m| m.metadata.name));
        match page.metadata.continue_.filter(|t| !t.is_empty()) {
            Some(token) => params.continue_token = Some(token),
            None => return Ok(names),
        }
    }
}

/// `Ok` for a success or for an error `skip` accepts.
fn ignore<T>(result: Result<T>, skip: fn(&Error) -> bool) -> Result<()> {
    match result {
        Ok(_) => Ok(()),
        Err(e) if skip(&e) => Ok(()),
        Err(e) => Err(e),
    }
}

fn check_timeout(client: &Client, what: &str, start: Instant, timeout: Duration) -> Result<()> {
    if start.elapsed() > timeout {
        return Err(Error::Timeout {
            url: format!("{} (waiting for {what})", client.base_url()),
            after: timeout,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workload_pods_are_bound_to_their_node_and_labelled() {
        let pod = pods_pod(12, "kwok-node-1");
        assert_eq!(pod.metadata.name.as_deref(), Some("pods-000012"));
        let spec = pod.spec.unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("kwok-node-1"));
        assert_eq!(
            spec.containers[0].env.as_ref().unwrap()[0].value.as_deref(),
            Some("12")
        );
        assert_eq!(
            pod.metadata
                .labels
                .unwrap()
                .get(PODS_LABEL.0)
                .map(String::as_str),
            Some(PODS_LABEL.1)
        );
    }
}
