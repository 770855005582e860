//! What the operator's fault tests share: a Memcached spec, the identity a cache must agree
//! on with the server, whether a Memcached has settled, and a process's resident memory.

#![allow(dead_code)] // each test binary uses a part of it

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use memcached_operator::api::{Memcached, MemcachedSpec, condition};

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
