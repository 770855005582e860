//! What the operator's fault tests share: starting the operator binary, a Memcached spec,
//! the identity a cache must agree on with the server, waiting for every Memcached to settle
//! and for the operator to release them, and a process's resident memory.
//!
//! A test binary using it declares `mod support;` (tests/support) beside `mod common;`.

#![allow(dead_code)] // each test binary uses a part of it

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;

use controller_runtime::client::{Api, Client, DeleteParams, ListParams};
use controller_runtime::informer::SharedIndexInformer;
use k8s_openapi::api::apps::v1::Deployment;
use memcached_operator::api::{Memcached, MemcachedSpec, condition};

use crate::support::{self, CONVERGE, cluster, wait_until};

/// What each test runs in: a client on the cluster with the Memcached CRD installed, a fresh
/// namespace and a scratch directory (kubeconfigs, the operators' logs), both named
/// `prefix-<pid>-<n>`. [`teardown`] removes both.
pub async fn setup(prefix: &str) -> (Client, String, PathBuf) {
    let client = cluster::client();
    memcached_operator::install_crd(&client, CONVERGE)
        .await
        .unwrap();
    let ns = cluster::create_namespace(&client, prefix).await;
    let dir = std::env::temp_dir().join(support::unique(prefix));
    std::fs::create_dir_all(&dir).unwrap();
    (client, ns, dir)
}

/// Deletes what [`setup`] made.
pub async fn teardown(client: &Client, ns: &str, dir: &Path) {
    cluster::delete_namespace(client, ns).await;
    let _ = std::fs::remove_dir_all(dir);
}

/// Starts the operator binary with `--kubeconfig kubeconfig`, scoped to namespace `ns`, its
/// metrics off (unless `args` bind them), logging JSON at `RUST_LOG=rust_log` into the file `log`, with `args` besides;
/// returns once its readiness probe passes (its caches have synced).
pub async fn start_operator(
    kubeconfig: &Path,
    ns: &str,
    log: &Path,
    rust_log: &str,
    args: &[&str],
) -> tokio::process::Child {
    start_operator_env(kubeconfig, ns, log, rust_log, args, &[]).await
}

/// As [`start_operator`], with the environment variables `env` set for the operator.
pub async fn start_operator_env(
    kubeconfig: &Path,
    ns: &str,
    log: &Path,
    rust_log: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> tokio::process::Child {
    let probes = support::free_port();
    // Metrics off, unless `args` serve them.
    let metrics = !args.iter().any(|a| a.starts_with("--metrics-bind-address"));
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_memcached-operator"))
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args([
            "--namespace",
            ns,
            &format!("--health-probe-bind-address=127.0.0.1:{probes}"),
            "--log-format=json",
        ])
        .args(metrics.then_some("--metrics-bind-address=0"))
        .args(args)
        .env("RUST_LOG", rust_log)
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    support::wait_ready(format!("127.0.0.1:{probes}").parse().unwrap()).await;
    child
}

/// What a Memcached must satisfy, given the namespace's Deployments by name: [`settled`] or
/// [`written`].
pub type Check = fn(&Memcached, &BTreeMap<String, Deployment>) -> Result<(), String>;

/// Whether exactly the Memcacheds `names` exist in the namespace, each passing `check`.
pub async fn converged(
    memcacheds: &Api<Memcached>,
    deployments: &Api<Deployment>,
    names: &BTreeSet<String>,
    check: Check,
) -> Result<(), String> {
    let list = memcacheds
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?;
    let listed: BTreeSet<String> = list
        .items
        .iter()
        .filter_map(|m| m.metadata.name.clone())
        .collect();
    if &listed != names {
        return Err(format!("listed {listed:?}, want {names:?}"));
    }
    let deps = deployments_by_name(deployments).await?;
    list.items.iter().try_for_each(|mc| check(mc, &deps))
}

/// The namespace's Deployments, by name.
pub async fn deployments_by_name(
    deployments: &Api<Deployment>,
) -> Result<BTreeMap<String, Deployment>, String> {
    Ok(deployments
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?
        .items
        .into_iter()
        .map(|d| (d.metadata.name.clone().unwrap_or_default(), d))
        .collect())
}

/// Waits until `informer`'s cache holds what a fresh LIST returns: the same names at the same
/// resourceVersions.
pub async fn cache_matches_list(
    memcacheds: &Api<Memcached>,
    informer: &Arc<SharedIndexInformer<Memcached>>,
) {
    wait_until(
        "the informer's cache equals a fresh LIST",
        CONVERGE,
        async || {
            let fresh = memcacheds
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            let fresh = versions(&fresh.items);
            let cached = versions(informer.get_indexer().list().iter().map(|m| &**m));
            (cached == fresh)
                .then_some(())
                .ok_or(format!("cache {cached:?}\nLIST  {fresh:?}"))
        },
    )
    .await;
}

/// Deletes the Memcacheds `names` and waits until the operator, still running, has let go of
/// every one (they carry its finalizer: without it the namespace would stay Terminating).
pub async fn release_all(memcacheds: &Api<Memcached>, names: impl IntoIterator<Item = &str>) {
    for name in names {
        memcacheds
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }
    wait_until(
        "the operator released every Memcached",
        CONVERGE,
        async || {
            let left = memcacheds
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?
                .items
                .len();
            (left == 0).then_some(()).ok_or(format!("{left} left"))
        },
    )
    .await;
}

/// `VmRSS` of process `pid`, in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/<pid>/status")
}

/// A Memcached spec of `size` with the default port and image.
pub fn spec(size: i32) -> MemcachedSpec {
    MemcachedSpec {
        size: Some(size),
        container_port: 11211,
        image: None,
    }
}

/// Names and resourceVersions, the identity a cache must agree on with the server.
pub fn versions<'a>(items: impl IntoIterator<Item = &'a Memcached>) -> BTreeMap<String, String> {
    items
        .into_iter()
        .map(|m| {
            (
                m.metadata.name.clone().unwrap_or_default(),
                m.metadata.resource_version.clone().unwrap_or_default(),
            )
        })
        .collect()
}

/// Whether `mc` is settled: [`written`], and its status says Available.
pub fn settled(mc: &Memcached, deployments: &BTreeMap<String, Deployment>) -> Result<(), String> {
    written(mc, deployments)?;
    let status = mc.status.clone().unwrap_or_default();
    let available = status
        .conditions
        .iter()
        .find(|c| c.type_ == condition::AVAILABLE)
        .map(|c| c.status.clone());
    if available.as_deref() != Some("True") {
        let name = mc.metadata.name.clone().unwrap_or_default();
        return Err(format!("{name}: Available {available:?}"));
    }
    Ok(())
}

/// Whether the operator has done its part for `mc`: its Deployment has `spec.size` replicas,
/// and its status was written for its current generation. Whether the Pods then become
/// ready is the cluster's part (the controller manager's and the nodes').
pub fn written(mc: &Memcached, deployments: &BTreeMap<String, Deployment>) -> Result<(), String> {
    let name = mc.metadata.name.clone().unwrap_or_default();
    let size = mc.spec.size();
    let replicas = deployments
        .get(&name)
        .and_then(|d| d.spec.as_ref())
        .and_then(|s| s.replicas);
    if replicas != Some(size) {
        return Err(format!(
            "{name}: deployment replicas {replicas:?}, size {size}"
        ));
    }
    let status = mc.status.clone().unwrap_or_default();
    if status.observed_generation != mc.metadata.generation {
        return Err(format!(
            "{name}: status for generation {:?}, at {:?}",
            status.observed_generation, mc.metadata.generation
        ));
    }
    Ok(())
}

/// Microseconds since the epoch of `ts`, an RFC 3339 timestamp as the operator's JSON log
/// writes it (`2026-11-26T02:08:39.522512Z`).
pub fn micros(ts: &str) -> i64 {
    let at: k8s_openapi::jiff::Timestamp = ts
        .parse()
        .unwrap_or_else(|e| panic!("timestamp {ts:?}: {e}"));
    at.as_microsecond()
}

/// Microseconds since the epoch, now.
pub fn now_micros() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    i64::try_from(since.expect("a clock after 1970").as_micros()).expect("a clock before 2262")
}

/// Microseconds as seconds.
pub fn secs(micros: i64) -> f64 {
    micros as f64 / 1e6
}
