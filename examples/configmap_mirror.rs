//! A controller that mirrors every ConfigMap into a Secret of the same name that it owns: the
//! runtime's smallest complete program, used by the cluster tests of graceful shutdown.
//!
//! ```text
//! KUBECONFIG=target/testenv/kubeconfig cargo run --example configmap_mirror -- \
//!     [--namespace NS] [--probe-addr 127.0.0.1:8081] [--metrics-addr 127.0.0.1:8080] \
//!     [--graceful-shutdown-timeout SECONDS]
//! ```
//!
//! A ConfigMap annotated `mirror.example.com/delay-seconds: "N"` makes its reconcile take N
//! seconds, to show that SIGTERM lets a reconcile in flight finish; with
//! `mirror.example.com/block: "true"` it blocks its thread for those seconds instead (never
//! reaching an `.await`), to show that the process exits anyway once the graceful shutdown
//! timeout has passed.

use std::sync::Arc;
use std::time::Duration;

use controller_runtime::client::{Api, Client, Patch, PatchParams};
use controller_runtime::runtime::owner::controller_reference;
use controller_runtime::runtime::server::parse_bind_address;
use controller_runtime::runtime::{
    Action, CacheOptions, Controller, Manager, ManagerOptions, ReconcileError, Store,
};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::prelude::*;

const DELAY: &str = "mirror.example.com/delay-seconds";
const BLOCK: &str = "mirror.example.com/block";

struct Ctx {
    client: Client,
    secrets: Store<Secret>,
}

async fn reconcile(cm: Arc<ConfigMap>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    let ns = cm.metadata.namespace.as_deref().unwrap_or_default();
    let name = cm.metadata.name.as_deref().unwrap_or_default();
    let delay = cm
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(DELAY))
        .and_then(|d| d.parse().ok())
        .map(Duration::from_secs);
    if let Some(delay) = delay {
        println!("reconcile started {ns}/{name}");
        let annotations = cm.metadata.annotations.as_ref();
        if annotations
            .and_then(|a| a.get(BLOCK))
            .is_some_and(|b| b == "true")
        {
            std::thread::sleep(delay);
        } else {
            tokio::time::sleep(delay).await;
        }
    }
    let mirrored = ctx
        .secrets
        .get(ns, name)
        .await?
        .is_some_and(|secret| same_data(&secret, &cm));
    if !mirrored {
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(ns.to_owned()),
                owner_references: Some(vec![controller_reference(&*cm)?]),
                ..ObjectMeta::default()
            },
            string_data: Some(cm.data.clone().unwrap_or_default()),
            ..Secret::default()
        };
        Api::<Secret>::namespaced(ctx.client.clone(), ns)
            .patch(
                name,
                &PatchParams::apply("configmap-mirror").force(),
                &Patch::Apply(&secret),
            )
            .await?;
    }
    if delay.is_some() {
        println!("reconcile finished {ns}/{name}");
    }
    Ok(Action::done())
}

/// Whether the Secret holds exactly the ConfigMap's data.
fn same_data(secret: &Secret, cm: &ConfigMap) -> bool {
    let have = secret.data.clone().unwrap_or_default();
    let want = cm.data.clone().unwrap_or_default();
    have.len() == want.len()
        && want
            .iter()
            .all(|(k, v)| have.get(k).is_some_and(|b| b.0 == v.as_bytes()))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let filter: Targets = std::env::var("RUST_LOG")
        .as_deref()
        .unwrap_or("info")
        .parse()?;
    tracing_subscriber::registry()
        .with(filter)
        .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
        .init();
    let mut options = ManagerOptions::default();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--namespace" => {
                options.cache = CacheOptions {
                    namespaces: vec![value()?],
                    ..CacheOptions::default()
                }
            }
            "--probe-addr" => options.health_probe_bind_address = parse_bind_address(&value()?)?,
            "--metrics-addr" => options.metrics_bind_address = parse_bind_address(&value()?)?,
            "--graceful-shutdown-timeout" => {
                options.graceful_shutdown_timeout = Duration::from_secs(value()?.parse()?)
            }
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    let manager = Manager::new(options).await?;
    let ctx = Arc::new(Ctx {
        client: manager.client(),
        secrets: manager.store()?,
    });
    Controller::<ConfigMap>::new(&manager)
        .owns::<Secret>()
        .complete(reconcile, ctx)?;
    println!("manager starting");
    manager.start().await?;
    println!("manager stopped");
    Ok(())
}
