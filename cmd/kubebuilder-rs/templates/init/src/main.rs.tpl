//! The {{project_name}} manager: its controllers and webhooks, run on kubebuilder's flags;
//! `{{project_name}} crd` prints the CustomResourceDefinitions (`make manifests` writes them).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser;
use controller_runtime::config::{Config, KubeconfigOptions};
use controller_runtime::runtime::leader_election::LeaderElectionConfig;
use controller_runtime::runtime::server::{SecureMetricsOptions, parse_bind_address};
use controller_runtime::runtime::webhook::WebhookOptions;
use controller_runtime::runtime::{CacheOptions, Manager, ManagerOptions};
use tracing_subscriber::filter::{LevelFilter, Targets};

/// Runs the {{project_name}} controllers against a cluster.
#[derive(Debug, Parser)]
#[command(version)]
struct Flags {
    /// What to do instead of running the manager.
    #[command(subcommand)]
    command: Option<Command>,
    /// The kubeconfig to use; without it, KUBECONFIG, ~/.kube/config, then the in-cluster
    /// service account.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Where /metrics is served, e.g. :8443; "0" serves none.
    #[arg(long, default_value = "0", value_parser = bind_address)]
    metrics_bind_address: BindAddress,
    /// Serve /metrics over HTTPS to callers the API server authorizes; --metrics-secure=false
    /// serves plain HTTP.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1,
          default_missing_value = "true", require_equals = true)]
    metrics_secure: bool,
    /// Where /healthz and /readyz are served ("0" serves none).
    #[arg(long, default_value = ":8081", value_parser = bind_address)]
    health_probe_bind_address: BindAddress,
    /// Elect a leader, so that only one replica reconciles.
    #[arg(long)]
    leader_elect: bool,
    /// Watch and reconcile only this namespace (default: every namespace).
    #[arg(long)]
    namespace: Option<String>,
    /// Serve the admission webhooks (their certificate is read from --cert-dir).
    #[arg(long, env = "ENABLE_WEBHOOKS")]
    enable_webhooks: bool,
    /// The port the admission webhooks are served on.
    #[arg(long, default_value_t = 9443)]
    webhook_port: u16,
    /// The directory holding the webhook server's tls.crt and tls.key (reloaded when they
    /// change); default `<temp dir>/k8s-webhook-server/serving-certs`.
    #[arg(long)]
    cert_dir: Option<PathBuf>,
    /// The log level: error, warn, info, debug or trace (RUST_LOG overrides it).
    #[arg(long, default_value = "info")]
    log_level: String,
}

/// What the binary does besides running the manager.
#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Print the CustomResourceDefinitions as YAML, or write each to `<dir>/<group>_<plural>.yaml`.
    Crd {
        /// The directory to write them to (`make manifests`: config/crd/bases).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

/// A server's address, or none for "0" (the server is off).
#[derive(Clone, Copy, Debug)]
struct BindAddress(Option<SocketAddr>);

fn bind_address(s: &str) -> Result<BindAddress, String> {
    parse_bind_address(s)
        .map(BindAddress)
        .map_err(|e| e.to_string())
}

#[tokio::main]
async fn main() -> ExitCode {
    let flags = Flags::parse();
    let result = match &flags.command {
        Some(Command::Crd { dir }) => write_crds(dir.as_deref()),
        None => match init_logging(&flags.log_level) {
            Ok(()) => run(flags).await,
            Err(e) => Err(e),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Loads the configuration and runs the manager until SIGINT or SIGTERM.
async fn run(flags: Flags) -> anyhow::Result<()> {
    let config = match &flags.kubeconfig {
        Some(path) => Config::from_kubeconfig(&KubeconfigOptions {
            path: Some(path.clone()),
            ..KubeconfigOptions::default()
        }),
        None => Config::infer(),
    }
    .context("loading the cluster configuration")?;
    let leader_election = flags.leader_elect.then(|| {
        LeaderElectionConfig::new("{{leader_election_id}}", config.default_namespace.clone())
    });
    let options = ManagerOptions {
        metrics_bind_address: flags.metrics_bind_address.0,
        metrics_secure: flags.metrics_secure.then(SecureMetricsOptions::default),
        health_probe_bind_address: flags.health_probe_bind_address.0,
        leader_election,
        cache: CacheOptions {
            namespaces: flags.namespace.iter().cloned().collect(),
            ..CacheOptions::default()
        },
        ..ManagerOptions::default()
    };
    tracing::info!(server = %config.cluster_url, "starting {{project_name}}");
    let manager = Manager::with_config(config, options).context("building the manager")?;
    {{crate_name}}::setup(&manager).context("setting up the controllers")?;
    if flags.enable_webhooks {
        let mut options = WebhookOptions {
            bind_address: SocketAddr::from(([0, 0, 0, 0], flags.webhook_port)),
            ..WebhookOptions::default()
        };
        if let Some(dir) = flags.cert_dir {
            options.cert_dir = dir;
        }
        manager.add_webhook_server({{crate_name}}::webhook::server(options));
    }
    manager.start().await.context("running the manager")?;
    tracing::info!("stopped");
    Ok(())
}

/// Prints every CRD, or writes each to `dir` under controller-gen's file name.
fn write_crds(dir: Option<&Path>) -> anyhow::Result<()> {
    use controller_runtime::runtime::crd::to_yaml;
    for crd in {{crate_name}}::crds() {
        match dir {
            None => print!("{}", to_yaml(&crd)),
            Some(dir) => {
                let file = dir.join(format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural));
                std::fs::create_dir_all(dir)
                    .and_then(|()| std::fs::write(&file, to_yaml(&crd)))
                    .with_context(|| format!("writing {}", file.display()))?;
            }
        }
    }
    Ok(())
}

/// Logs to stderr at `--log-level`, or as `RUST_LOG` says (`info`, or
/// `{{crate_name}}=debug,info`: levels per module).
fn init_logging(level: &str) -> anyhow::Result<()> {
    use tracing_subscriber::prelude::*;
    let filter: Targets = match std::env::var("RUST_LOG") {
        Ok(directives) if !directives.trim().is_empty() => directives
            .parse()
            .with_context(|| format!("RUST_LOG={directives:?}"))?,
        _ => Targets::new().with_default(
            level
                .parse::<LevelFilter>()
                .with_context(|| format!("--log-level {level:?}"))?,
        ),
    };
    tracing_subscriber::registry()
        .with(filter)
        .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
        .init();
    Ok(())
}
