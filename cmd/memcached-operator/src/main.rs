//! The Memcached operator's binary: its own flags beside kubebuilder's manager flags, then
//! the controller and webhooks wired into the manager.

use std::process::ExitCode;

use clap::Parser;
use controller_runtime::runtime::{ManagerArgs, ManagerOptions};
use memcached_operator::{cache_selectors, crd_yaml, rbac_yaml, setup, webhook};

/// The leader election Lease's name (kubebuilder's `LeaderElectionID`).
const LEADER_ELECTION_ID: &str = "86f835c3.example.com";

/// Keeps a Deployment of memcached Pods scaled to each Memcached resource's spec.size.
#[derive(Debug, Parser)]
#[command(version)]
struct Flags {
    /// What to do instead of running the operator.
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    manager: ManagerArgs,
    /// The image for resources that name none (also read from MEMCACHED_IMAGE).
    #[arg(long, env = "MEMCACHED_IMAGE", default_value = memcached_operator::DEFAULT_IMAGE)]
    memcached_image: String,
    /// Serve the admission webhooks (needs a serving certificate in --webhook-cert-path).
    #[arg(long, env = "ENABLE_WEBHOOKS")]
    enable_webhooks: bool,
    /// An image prefix the validating webhook allows (repeatable); none allows any image.
    #[arg(long = "allowed-image-prefix")]
    allowed_image_prefixes: Vec<String>,
}

/// What the binary can do besides running the operator.
#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Print the Memcached CustomResourceDefinition as YAML (what `make manifests` writes to
    /// config/crd/bases/).
    Crd,
    /// Print the manager's ClusterRole as YAML, generated from the controller's rules (what
    /// `make manifests` writes to config/rbac/role.yaml).
    Rbac,
}

#[tokio::main]
async fn main() -> ExitCode {
    let flags = Flags::parse();
    if let Some(command) = flags.command {
        let yaml = match command {
            Command::Crd => Ok(crd_yaml()),
            Command::Rbac => rbac_yaml(),
        };
        return match yaml {
            Ok(yaml) => {
                print!("{yaml}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("Error: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let cache = |o: ManagerOptions| ManagerOptions {
        cache: cache_selectors(o.cache),
        ..o
    };
    (flags.manager)
        .run_with(LEADER_ELECTION_ID, cache, |manager| {
            setup(manager, &flags.memcached_image)?;
            if flags.enable_webhooks {
                let prefixes = flags.allowed_image_prefixes.clone();
                let webhooks = webhook::server(flags.manager.webhook_options(), prefixes);
                manager.add_webhook_server(webhooks)?;
            }
            Ok(())
        })
        .await
}
