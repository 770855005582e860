//! The {{project_name}} manager: its controllers and webhooks, run on kubebuilder's manager
//! flags; `crd` and `rbac` print the manifests generated from the code (`make manifests`
//! writes them).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use controller_runtime::runtime::crd::to_yaml;
use controller_runtime::runtime::flags::ManagerArgs;

/// The leader election Lease's name (kubebuilder's `LeaderElectionID`).
const LEADER_ELECTION_ID: &str = "{{leader_election_id}}";

/// Runs the {{project_name}} controllers against a cluster.
#[derive(Debug, Parser)]
#[command(version)]
struct Flags {
    /// What to do instead of running the manager.
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    manager: ManagerArgs,
    /// Serve the webhooks (their certificate is read from --webhook-cert-path).
    #[arg(long, env = "ENABLE_WEBHOOKS")]
    enable_webhooks: bool,
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
    /// Print the manager's ClusterRole as YAML, generated from the controllers' rules, or
    /// write it to a file.
    Rbac {
        /// The file to write it to (`make manifests`: config/rbac/role.yaml).
        #[arg(long)]
        file: Option<PathBuf>,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    let flags = Flags::parse();
    let written = match &flags.command {
        None => {
            return (flags.manager)
                .run(LEADER_ELECTION_ID, |manager| {
                    {{crate_name}}::setup(manager)?;
                    if flags.enable_webhooks {
                        let options = flags.manager.webhook_options();
                        manager.add_webhook_server({{crate_name}}::webhook::server(options))?;
                    }
                    Ok(())
                })
                .await;
        }
        Some(Command::Crd { dir }) => write_crds(dir.as_deref()),
        Some(Command::Rbac { file }) => {{crate_name}}::rbac_yaml()
            .map_err(|e| e.to_string())
            .and_then(|yaml| write(file.as_deref(), &yaml)),
    };
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Prints every CRD, or writes each to `dir` under controller-gen's file name.
fn write_crds(dir: Option<&Path>) -> Result<(), String> {
    for crd in {{crate_name}}::crds() {
        let name = format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural);
        let file = dir.map(|dir| dir.join(name));
        write(file.as_deref(), &to_yaml(&crd))?;
    }
    Ok(())
}

/// Prints `yaml`, or writes it to `file` (its directory made if missing).
fn write(file: Option<&Path>, yaml: &str) -> Result<(), String> {
    let Some(file) = file else {
        print!("{yaml}");
        return Ok(());
    };
    file.parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::write(file, yaml))
        .map_err(|e| format!("writing {}: {e}", file.display()))
}
