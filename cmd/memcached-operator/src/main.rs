//! The Memcached operator's binary: flags as kubebuilder's main has them, then the manager.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use controller_runtime::config::{Config, KubeconfigOptions};
use controller_runtime::runtime::leader_election::LeaderElectionConfig;
use controller_runtime::runtime::server::parse_bind_address;
use controller_runtime::runtime::{CacheOptions, Manager, ManagerOptions};

/// Keeps a Deployment of memcached Pods scaled to each Memcached resource's spec.size.
#[derive(Debug, Parser)]
#[command(version)]
struct Flags {
    /// The kubeconfig to use; without it, KUBECONFIG, ~/.kube/config, then the in-cluster
    /// service account.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Where /metrics is served ("0" turns it off).
    #[arg(long, default_value = ":8080", value_parser = bind_address)]
    metrics_bind_address: Option<SocketAddr>,
    /// Where /healthz and /readyz are served ("0" turns them off).
    #[arg(long, default_value = ":8081", value_parser = bind_address)]
    health_probe_bind_address: Option<SocketAddr>,
    /// Elect a leader, so only one replica reconciles.
    #[arg(long)]
    leader_elect: bool,
    /// The namespace of the leader election Lease (default: the configuration's namespace).
    #[arg(long)]
    leader_election_namespace: Option<String>,
    /// Watch and reconcile only this namespace (default: every namespace).
    #[arg(long)]
    namespace: Option<String>,
    /// The image for resources that name none (also read from MEMCACHED_IMAGE).
    #[arg(long, env = "MEMCACHED_IMAGE", default_value = memcached_operator::DEFAULT_IMAGE)]
    memcached_image: String,
    /// The log level: error, warn, info, debug or trace (RUST_LOG overrides it).
    #[arg(long, default_value = "info")]
    log_level: String,
    /// The log format: text or json.
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
}

fn bind_address(s: &str) -> Result<Option<SocketAddr>, String> {
    parse_bind_address(s).map_err(|e| e.to_string())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let flags = Flags::parse();
    init_logging(&flags.log_level, &flags.log_format);

    let config = match &flags.kubeconfig {
        Some(path) => Config::from_kubeconfig(&KubeconfigOptions {
            path: Some(path.clone()),
            ..KubeconfigOptions::default()
        }),
        None => Config::infer(),
    }
    .context("loading the cluster configuration")?;
    let leader_election = flags.leader_elect.then(|| {
        let namespace = flags
            .leader_election_namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone());
        LeaderElectionConfig::new("86f835c3.example.com", namespace)
    });
    let options = ManagerOptions {
        metrics_bind_address: flags.metrics_bind_address,
        health_probe_bind_address: flags.health_probe_bind_address,
        leader_election,
        cache: memcached_operator::cache_selectors(CacheOptions {
            namespaces: flags.namespace.iter().cloned().collect(),
            ..CacheOptions::default()
        }),
        graceful_shutdown_timeout: Duration::from_secs(30),
        ..ManagerOptions::default()
    };
    tracing::info!(server = %config.cluster_url, source = %config.source, "starting the memcached operator");
    let manager = Manager::with_config(config, options).context("building the manager")?;
    memcached_operator::setup(&manager, &flags.memcached_image)
        .context("setting up the memcached controller")?;
    manager.start().await.context("running the manager")?;
    tracing::info!("stopped");
    Ok(())
}

fn init_logging(level: &str, format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}
