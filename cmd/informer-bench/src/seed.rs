//! Seeding: the namespace, its ConfigMaps and Pods, created concurrently and idempotently.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use controller_runtime::client::{Api, Client, Error, ListParams, PostParams, Result};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::json;

/// What [`seed`] creates.
#[derive(Clone, Debug)]
pub struct SeedParams {
    /// The namespace, made if missing.
    pub namespace: String,
    /// ConfigMaps `cm-00000` … in it.
    pub configmaps: usize,
    /// Pods `pod-00000` … in it, each waited for until Running.
    pub pods: usize,
    /// Creates in flight at once.
    pub concurrency: usize,
    /// Give up waiting for the namespace's service account or the Pods after this long.
    pub timeout: Duration,
}

/// The label every seeded object carries.
pub const LABEL: (&str, &str) = ("app", "bench-informer");

/// The name of the `i`th seeded ConfigMap.
///
/// ```
/// assert_eq!(informer_bench::configmap_name(7), "cm-00007");
/// ```
pub fn configmap_name(i: usize) -> String {
    format!("cm-{i:05}")
}

/// The name of the `i`th seeded Pod.
///
/// ```
/// assert_eq!(informer_bench::pod_name(7), "pod-00007");
/// ```
pub fn pod_name(i: usize) -> String {
    format!("pod-{i:05}")
}

/// The `i`th seeded ConfigMap: two short data keys and one label.
pub fn configmap(i: usize) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(configmap_name(i)),
            labels: Some([(LABEL.0.to_owned(), LABEL.1.to_owned())].into()),
            ..ObjectMeta::default()
        },
        data: Some(
            [
                ("index".to_owned(), i.to_string()),
                ("mode".to_owned(), "bench".to_owned()),
            ]
            .into(),
        ),
        ..ConfigMap::default()
    }
}

/// The `i`th seeded Pod: one container, one label. The scheduler binds it to a kwok node,
/// and kwok makes it Running.
pub fn pod(i: usize) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": pod_name(i), "labels": {LABEL.0: LABEL.1}},
        "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}
    }))
    .expect("a valid Pod")
}

/// Creates the namespace, the ConfigMaps and the Pods that do not exist yet, `concurrency`
/// at a time, printing progress on stderr; then waits until every seeded Pod is Running.
/// Objects that exist already are left as they are.
///
/// Give the client a high rate limit: at the default 20 requests a second, 11,000 creates
/// take nine minutes.
///
/// # Errors
///
/// The first error of any request but an `AlreadyExists`; [`Error::Timeout`] when the
/// service account or the Pods take longer than `params.timeout`.
pub async fn seed(client: &Client, params: &SeedParams) -> Result<()> {
    let ns = &params.namespace;
    let namespaces = Api::<Namespace>::cluster(client.clone());
    if namespaces.get_opt(ns).await?.is_none() {
        let namespace = Namespace {
            metadata: ObjectMeta {
                name: Some(ns.clone()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        ignore_exists(namespaces.create(&PostParams::default(), &namespace).await)?;
        eprintln!("seed: created namespace {ns}");
    }

    let configmaps = Api::<ConfigMap>::namespaced(client.clone(), ns);
    create_missing(
        &configmaps,
        "configmaps",
        params.configmaps,
        params.concurrency,
        configmap_name,
        configmap,
    )
    .await?;

    // Pods are admitted only once the namespace's default service account exists.
    let accounts = Api::<ServiceAccount>::namespaced(client.clone(), ns);
    wait_until(
        client,
        "the default service account",
        params.timeout,
        async || Ok(accounts.get_opt("default").await?.is_some()),
    )
    .await?;
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    create_missing(
        &pods,
        "pods",
        params.pods,
        params.concurrency,
        pod_name,
        pod,
    )
    .await?;

    let want = params.pods;
    let mut reported = usize::MAX;
    wait_until(client, "the Pods Running", params.timeout, async || {
        let list = pods.list_all(&ListParams::default().limit(500)).await?;
        let running = list
            .items
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        if running != reported {
            eprintln!("seed: pods Running: {running}/{}", list.items.len());
            reported = running;
        }
        Ok(running >= want)
    })
    .await
}

/// Creates, among `make(0..count)`, the objects whose names are not in the namespace yet,
/// `concurrency` at a time.
async fn create_missing<K>(
    api: &Api<K>,
    what: &str,
    count: usize,
    concurrency: usize,
    name: fn(usize) -> String,
    make: fn(usize) -> K,
) -> Result<()>
where
    K: serde::de::DeserializeOwned + serde::Serialize + Send + Sync + 'static,
{
    let existing: HashSet<String> = api
        .list_metadata(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|m| m.metadata.name)
        .collect();
    let missing: Vec<usize> = (0..count)
        .filter(|&i| !existing.contains(&name(i)))
        .collect();
    eprintln!(
        "seed: {what}: {} of {count} exist, creating {}",
        count - missing.len(),
        missing.len()
    );
    let api = api.clone();
    in_parallel(
        &format!("seed: {what}: created"),
        1_000,
        missing,
        concurrency,
        move |i| {
            let api = api.clone();
            async move { ignore_exists(api.create(&PostParams::default(), &make(i)).await) }
        },
    )
    .await
}

/// `Ok` for a create that succeeded or found the name taken.
fn ignore_exists<T>(result: Result<T>) -> Result<()> {
    match result {
        Ok(_) => Ok(()),
        Err(e) if e.is_already_exists() => Ok(()),
        Err(e) => Err(e),
    }
}

/// Polls `done` every half second until it says true, for at most `timeout`.
async fn wait_until(
    client: &Client,
    what: &str,
    timeout: Duration,
    mut done: impl AsyncFnMut() -> Result<bool>,
) -> Result<()> {
    let start = Instant::now();
    while !done().await? {
        if start.elapsed() > timeout {
            return Err(Error::Timeout {
                url: format!("{} (waiting for {what})", client.base_url()),
                after: timeout,
            });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(())
}

/// Runs `work(i)` for every `i` of `items`, `concurrency` at a time, printing
/// `<what> <finished>/<total> (<rate>/s)` on stderr every `every` and at the end; stops at
/// the first error.
pub(crate) async fn in_parallel<F, Fut>(
    what: &str,
    every: usize,
    items: Vec<usize>,
    concurrency: usize,
    work: F,
) -> Result<()>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<()>> + Send,
{
    let total = items.len();
    if total == 0 {
        return Ok(());
    }
    let (items, work) = (Arc::new(items), Arc::new(work));
    let next = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut workers = tokio::task::JoinSet::<Result<()>>::new();
    for _ in 0..concurrency.max(1) {
        let (items, work, next, done) = (items.clone(), work.clone(), next.clone(), done.clone());
        let what = what.to_owned();
        workers.spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                let Some(&i) = items.get(n) else {
                    return Ok(());
                };
                work(i).await?;
                let finished = done.fetch_add(1, Ordering::Relaxed) + 1;
                if finished % every == 0 || finished == total {
                    eprintln!(
                        "{what} {finished}/{total} ({:.0}/s)",
                        finished as f64 / start.elapsed().as_secs_f64()
                    );
                }
            }
        });
    }
    while let Some(joined) = workers.join_next().await {
        if let Err(e) = joined.expect("a worker panicked") {
            workers.abort_all();
            return Err(e);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_configmaps_carry_two_keys_and_the_label() {
        let cm = configmap(42);
        assert_eq!(cm.metadata.name.as_deref(), Some("cm-00042"));
        assert_eq!(cm.data.as_ref().map(|d| d.len()), Some(2));
        assert_eq!(
            cm.metadata.labels.unwrap().get(LABEL.0).map(String::as_str),
            Some(LABEL.1)
        );
    }

    #[test]
    fn seeded_pods_have_one_container() {
        let pod = pod(3);
        assert_eq!(pod.metadata.name.as_deref(), Some("pod-00003"));
        assert_eq!(pod.spec.unwrap().containers.len(), 1);
    }
}
