//! The `kubebuilder-rs` command: kubebuilder's `init`, `create api` and `create webhook`,
//! with kubebuilder's flags, for operators on this runtime.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{ArgAction, Args, Parser, Subcommand};
use kubebuilder_rs::plan::Change;
use kubebuilder_rs::{ApiOptions, InitOptions, RuntimeSource, Summary, WebhookOptions};

/// Scaffolds Kubernetes operators on controller-runtime for Rust, as kubebuilder does for Go.
#[derive(Debug, Parser)]
#[command(version)]
struct Cli {
    /// The project's directory (default: the current one).
    #[arg(long, global = true, default_value = ".")]
    dir: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Write a new project: Cargo.toml, src/, config/, Makefile, Dockerfile, README.md.
    Init(Init),
    /// Add an API (a kind) or its webhooks to the project.
    #[command(subcommand)]
    Create(Create),
}

#[derive(Debug, Args)]
struct Init {
    /// The domain of the project's API groups (a group `webapp` becomes
    /// `webapp.<domain>`).
    #[arg(long)]
    domain: String,
    /// The project's name: its package, binary, image and namespace (default: the
    /// directory's name).
    #[arg(long)]
    project_name: Option<String>,
    /// The runtime checkout to depend on by path (default: the one kubebuilder-rs was built
    /// from).
    #[arg(long, conflicts_with_all = ["runtime_git", "runtime_version"])]
    runtime_path: Option<PathBuf>,
    /// Depend on the runtime from this git repository instead.
    #[arg(long, conflicts_with = "runtime_version")]
    runtime_git: Option<String>,
    /// With --runtime-git: the revision.
    #[arg(long, requires = "runtime_git", conflicts_with_all = ["runtime_branch", "runtime_tag"])]
    runtime_rev: Option<String>,
    /// With --runtime-git: the branch.
    #[arg(long, requires = "runtime_git", conflicts_with = "runtime_tag")]
    runtime_branch: Option<String>,
    /// With --runtime-git: the tag.
    #[arg(long, requires = "runtime_git")]
    runtime_tag: Option<String>,
    /// Depend on this version of the runtime from the registry instead.
    #[arg(long)]
    runtime_version: Option<String>,
}

#[derive(Debug, Subcommand)]
enum Create {
    /// Add a kind: its types and CRD, a controller, a test, a sample, RBAC rules.
    Api(Api),
    /// Add admission webhooks to a kind.
    Webhook(Webhook),
}

#[derive(Debug, Args)]
struct Gvk {
    /// The group, without the domain (`webapp`).
    #[arg(long)]
    group: String,
    /// The version (`v1`, `v1alpha1`, `v2beta3`).
    #[arg(long)]
    version: String,
    /// The kind, in PascalCase (`Guestbook`).
    #[arg(long)]
    kind: String,
}

#[derive(Debug, Args)]
struct Api {
    #[command(flatten)]
    gvk: Gvk,
    /// Scaffold the kind's types (only true is supported).
    #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1,
          default_missing_value = "true", require_equals = true)]
    resource: bool,
    /// Scaffold a controller for the kind.
    #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1,
          default_missing_value = "true", require_equals = true)]
    controller: bool,
}

#[derive(Debug, Args)]
struct Webhook {
    #[command(flatten)]
    gvk: Gvk,
    /// A defaulting (mutating) webhook.
    #[arg(long)]
    defaulting: bool,
    /// A validating webhook.
    #[arg(long)]
    programmatic_validation: bool,
    /// A conversion webhook (not supported yet).
    #[arg(long)]
    conversion: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Init(init) => {
            let runtime = match (init.runtime_path, init.runtime_git, init.runtime_version) {
                (Some(path), _, _) => RuntimeSource::Path(path),
                (None, Some(url), _) => RuntimeSource::Git {
                    url,
                    reference: init
                        .runtime_rev
                        .map(|r| ("rev", r))
                        .or(init.runtime_branch.map(|b| ("branch", b)))
                        .or(init.runtime_tag.map(|t| ("tag", t))),
                },
                (None, None, Some(version)) => RuntimeSource::Version(version),
                (None, None, None) => RuntimeSource::built_from(),
            };
            kubebuilder_rs::init(InitOptions {
                dir: cli.dir,
                domain: init.domain,
                project_name: init.project_name,
                runtime,
            })
        }
        Command::Create(Create::Api(api)) => kubebuilder_rs::create_api(ApiOptions {
            dir: cli.dir,
            group: api.gvk.group,
            version: api.gvk.version,
            kind: api.gvk.kind,
            resource: api.resource,
            controller: api.controller,
        }),
        Command::Create(Create::Webhook(webhook)) => {
            kubebuilder_rs::create_webhook(WebhookOptions {
                dir: cli.dir,
                group: webhook.gvk.group,
                version: webhook.gvk.version,
                kind: webhook.gvk.kind,
                defaulting: webhook.defaulting,
                programmatic_validation: webhook.programmatic_validation,
                conversion: webhook.conversion,
            })
        }
    };
    match result {
        Ok(summary) => {
            report(&summary);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("Error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Prints each file and what happened to it, then the next steps.
fn report(summary: &Summary) {
    for (path, change) in &summary.changes {
        let what = match change {
            Change::Create => "create",
            Change::Update => "update",
            Change::Keep => "keep  ",
        };
        println!("{what} {}", path.display());
    }
    if let Some((first, rest)) = summary.next.split_first() {
        println!("Next: {first}");
        for line in rest {
            println!("      {line}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flags_are_kubebuilders() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from([
            "kubebuilder-rs",
            "create",
            "api",
            "--group",
            "webapp",
            "--version",
            "v1",
            "--kind",
            "Guestbook",
            "--resource",
            "--controller=false",
        ])
        .unwrap();
        let Command::Create(Create::Api(api)) = cli.command else {
            panic!("create api");
        };
        assert!(api.resource && !api.controller);
        assert_eq!(api.gvk.version, "v1");
        let git_and_path = Cli::try_parse_from([
            "kubebuilder-rs",
            "init",
            "--domain",
            "d",
            "--runtime-path",
            "/x",
            "--runtime-git",
            "u",
        ]);
        assert!(git_and_path.is_err());
        let rev_alone = Cli::try_parse_from([
            "kubebuilder-rs",
            "init",
            "--domain",
            "d",
            "--runtime-rev",
            "r",
        ]);
        assert!(rev_alone.is_err());
    }
}
