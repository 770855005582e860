//! kubebuilder's manager flags as one clap [`Args`](clap::Args) struct, [`ManagerArgs`], and
//! the one call that runs a manager from them, [`ManagerArgs::run`].
//!
//! An operator's `main.rs` then holds its own flags and its wiring, nothing more.
//!
//! # Example: a complete main.rs
//!
//! ```no_run
//! use std::process::ExitCode;
//! use std::sync::Arc;
//!
//! use clap::Parser;
//! use controller_runtime::runtime::flags::ManagerArgs;
//! use controller_runtime::runtime::{Action, Controller, ReconcileError};
//! use k8s_openapi::api::core::v1::ConfigMap;
//!
//! /// Logs how many keys each ConfigMap holds.
//! #[derive(Parser)]
//! #[command(version)]
//! struct Flags {
//!     #[command(flatten)]
//!     manager: ManagerArgs,
//! }
//!
//! async fn reconcile(cm: Arc<ConfigMap>, _: Arc<()>) -> Result<Action, ReconcileError> {
//!     let keys = cm.data.as_ref().map_or(0, |data| data.len());
//!     tracing::info!(name = cm.metadata.name.as_deref(), keys, "seen");
//!     Ok(Action::done())
//! }
//!
//! #[tokio::main]
//! async fn main() -> ExitCode {
//!     let flags = Flags::parse();
//!     flags
//!         .manager
//!         .run("configmap-keys.example.com", |manager| {
//!             Controller::<ConfigMap>::new(manager).complete(reconcile, Arc::new(()))?;
//!             Ok(())
//!         })
//!         .await
//! }
//! ```
//!
//! `configmap-keys --help` lists the flags below; `--leader-elect` makes the replicas share the
//! Lease `configmap-keys.example.com` (controller-runtime's `LeaderElectionID`).
//!
//! # What `run` does
//!
//! What kubebuilder's scaffolded `main.go` does, in order:
//!
//! 1. installs the logger from `--log-level`, `--log-format` and `RUST_LOG`
//!    ([`logging::init`]);
//! 2. loads the cluster configuration: `--kubeconfig`, else as kubectl finds it
//!    (`KUBECONFIG`, `~/.kube/config`, the in-cluster service account);
//! 3. builds the [`Manager`] with the [`ManagerOptions`] the flags describe
//!    ([`run_with`](ManagerArgs::run_with) lets the operator adjust them first, say its
//!    cache's selectors);
//! 4. calls `setup`, which registers the controllers and webhooks;
//! 5. runs the [preflight](super::preflight): lists each kind they cache once, so that a
//!    configuration that cannot work stops here, saying why;
//! 6. runs the manager until SIGINT or SIGTERM.
//!
//! A failure at any step is logged as one line at error level, with the target `setup` (as
//! kubebuilder's `setupLog`), and the process exits with status 1. The line holds the error
//! and its causes, each once, down to the client's or the configuration's own error, whose
//! message names the cause and the fix.
//!
//! # The flags
//!
//! As kubebuilder's scaffold names them, with its defaults: `--metrics-bind-address`,
//! `--metrics-secure` and `--metrics-cert-path/-name/-key`; `--health-probe-bind-address`;
//! `--leader-elect`, `--leader-election-namespace` and the three lease durations;
//! `--leader-elect-release-on-cancel` (default true) and `--leader-elect-exit-on-lost`
//! (default false: a replica that loses the lease competes again without a restart);
//! `--enable-http2`; `--enable-debug-pages` (ours: see [`debug`](super::debug));
//! `--webhook-cert-path/-name/-key` (`--cert-dir` is the same as
//! `--webhook-cert-path`), `--webhook-port` and `--webhook-host`. Then `--kubeconfig`, `--namespace`,
//! `--kube-api-qps/--kube-api-burst`, `--log-level` and `--log-format`. And ours:
//! `--max-concurrent-reconciles` (default 16, where controller-runtime's is 1),
//! `--read-your-writes` (default true; see [`cache`](super::cache)), and `--shard`,
//! `--shard-identity` and `--shard-namespace` (see [`shard`](super::shard)). Booleans are
//! Go-style (`--metrics-secure=false`), durations are a whole number and a unit (`15s`,
//! `500ms`, `1m`), and an address of `0` turns its server off.

use std::error::Error as StdError;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use super::leader_election::LeaderElectionConfig;
use super::logging::{self, LogArgs};
use super::preflight::PreflightError;
use super::server::{SecureMetricsOptions, parse_bind_address};
use super::shard::{Shard, ShardConfig};
use super::webhook::WebhookOptions;
use super::{
    CacheOptions, DEFAULT_MAX_CONCURRENT_RECONCILES, Manager, ManagerError, ManagerOptions,
    OnLeaseLost,
};
use crate::client::RateLimit;
use crate::config::{self, Config, KubeconfigOptions};

/// What `setup` in [`ManagerArgs::run`] may fail with: any error (`?` converts it).
pub type BoxError = Box<dyn StdError + Send + Sync>;

/// kubebuilder's manager flags, to flatten into an operator's own (`#[command(flatten)]`);
/// see the [module docs](self). Each field is one flag, documented by its `--help` text.
#[derive(Clone, Debug, clap::Args)]
pub struct ManagerArgs {
    /// The kubeconfig to use; without it, KUBECONFIG, ~/.kube/config, then the in-cluster
    /// service account.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Where /metrics is served ("0" turns it off); default :8443 with --metrics-secure,
    /// :8080 without.
    #[arg(long, value_parser = bind_address)]
    pub metrics_bind_address: Option<BindAddress>,
    /// Serve /metrics over HTTPS, only to callers the API server authenticates
    /// (TokenReview) and authorizes (SubjectAccessReview: get on the non-resource URL
    /// /metrics), as kubebuilder's scaffold does; --metrics-secure=false serves plain HTTP
    /// to anyone who can connect.
    #[arg(long, default_value_t = true, value_parser = go_bool, action = clap::ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true", require_equals = true)]
    pub metrics_secure: bool,
    /// The directory holding the metrics server's certificate and key; when they are
    /// missing a self-signed certificate is made at start. Default
    /// `<temp dir>/k8s-metrics-server/serving-certs`.
    #[arg(long)]
    pub metrics_cert_path: Option<PathBuf>,
    /// The metrics server's certificate file in --metrics-cert-path.
    #[arg(long, default_value = "tls.crt")]
    pub metrics_cert_name: String,
    /// Serve /debug/controllers (and /debug/controllers.json) on the metrics address: a
    /// live page of the controllers' queues, keys, backoff and caches, behind the same
    /// authentication and authorization as /metrics (get on the non-resource URLs).
    #[arg(long, default_value_t = false, value_parser = go_bool, action = clap::ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true", require_equals = true)]
    pub enable_debug_pages: bool,
    /// The metrics server's key file in --metrics-cert-path.
    #[arg(long, default_value = "tls.key")]
    pub metrics_cert_key: String,
    /// Where /healthz and /readyz are served ("0" turns them off).
    #[arg(long, default_value = ":8081", value_parser = bind_address)]
    pub health_probe_bind_address: BindAddress,
    /// Elect a leader, so only one replica runs the controllers.
    #[arg(long, default_value_t = false, value_parser = go_bool, action = clap::ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true", require_equals = true)]
    pub leader_elect: bool,
    /// The namespace of the leader election Lease (default: the configuration's namespace,
    /// in a cluster the Pod's own).
    #[arg(long)]
    pub leader_election_namespace: Option<String>,
    /// How long a lease stays valid unrenewed: after a leader dies, the others take over
    /// within about this long (e.g. 15s, 500ms, 1m).
    #[arg(long, default_value = "15s", value_parser = duration)]
    pub leader_elect_lease_duration: Duration,
    /// How long the leader keeps retrying a renewal before it steps down; less than the
    /// lease duration.
    #[arg(long, default_value = "10s", value_parser = duration)]
    pub leader_elect_renew_deadline: Duration,
    /// The interval between the candidates' attempts to acquire or renew; less than the
    /// renew deadline / 1.2.
    #[arg(long, default_value = "2s", value_parser = duration)]
    pub leader_elect_retry_period: Duration,
    /// Release the lease on SIGTERM once the controllers have stopped, so a standby takes
    /// over at once instead of after the lease duration.
    #[arg(long, default_value_t = true, value_parser = go_bool, action = clap::ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true", require_equals = true)]
    pub leader_elect_release_on_cancel: bool,
    /// Exit when the lease is lost, as controller-runtime does, instead of stopping the
    /// controllers and competing again without a restart.
    #[arg(long, default_value_t = false, value_parser = go_bool, action = clap::ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true", require_equals = true)]
    pub leader_elect_exit_on_lost: bool,
    /// Watch and reconcile only this namespace (default: every namespace).
    #[arg(long)]
    pub namespace: Option<String>,
    /// Client-side limit on requests to the API server, a second sustained. The default,
    /// -1 (as 0 or any value below), sets none, as controller-runtime's GetConfig does,
    /// leaving the API server's priority and fairness to pace the manager.
    #[arg(long, default_value_t = -1.0, allow_negative_numbers = true)]
    pub kube_api_qps: f64,
    /// Requests allowed at once above --kube-api-qps.
    #[arg(long, default_value_t = 30)]
    pub kube_api_burst: u32,
    /// Offer HTTP/2 on the webhook server. Off by default, as kubebuilder's scaffold, against
    /// HTTP/2's rapid-reset and stream-cancellation attacks (CVE-2023-44487,
    /// CVE-2023-39325). The metrics server speaks HTTP/1.1 only.
    #[arg(long, default_value_t = false, value_parser = go_bool, action = clap::ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true", require_equals = true)]
    pub enable_http2: bool,
    /// The port the admission webhooks are served on.
    #[arg(long, default_value_t = 9443)]
    pub webhook_port: u16,
    /// The address the webhook server listens on (controller-runtime's `webhook.Options.Host`);
    /// every address by default, as in a Pod. `127.0.0.1` keeps it on loopback.
    #[arg(long, default_value_t = Ipv4Addr::UNSPECIFIED.into())]
    pub webhook_host: IpAddr,
    /// The directory holding the webhook server's certificate and key (reloaded when they
    /// change). Default `<temp dir>/k8s-webhook-server/serving-certs`.
    #[arg(long, visible_alias = "cert-dir")]
    pub webhook_cert_path: Option<PathBuf>,
    /// The webhook server's certificate file in --webhook-cert-path.
    #[arg(long, default_value = "tls.crt")]
    pub webhook_cert_name: String,
    /// The webhook server's key file in --webhook-cert-path.
    #[arg(long, default_value = "tls.key")]
    pub webhook_cert_key: String,
    /// Split the controllers' objects among every replica run with this flag, by hash
    /// ranges, each replica holding one Lease (see the runtime's `shard` module); turns
    /// leader election off.
    #[arg(long, default_value_t = false, value_parser = go_bool, action = clap::ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true", require_equals = true)]
    pub shard: bool,
    /// This replica's identity among the shards (default: POD_NAME, else the host name,
    /// with a random suffix).
    #[arg(long, env = "SHARD_IDENTITY")]
    pub shard_identity: Option<String>,
    /// The namespace of the shards' Leases (default: --leader-election-namespace, else the
    /// configuration's namespace).
    #[arg(long)]
    pub shard_namespace: Option<String>,
    /// How many keys each controller reconciles at once, for controllers that set no
    /// number of their own (one key is never reconciled by two workers at once).
    #[arg(long, default_value_t = DEFAULT_MAX_CONCURRENT_RECONCILES)]
    pub max_concurrent_reconciles: usize,
    /// Make cache reads wait for this manager's own writes (read-your-own-writes); `false`
    /// answers what the cache holds at once, as controller-runtime does by default.
    #[arg(long, default_value_t = true, value_parser = go_bool, action = clap::ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true", require_equals = true)]
    pub read_your_writes: bool,
    /// --log-level and --log-format.
    #[command(flatten)]
    pub log: LogArgs,
}

/// A server's address from a flag, or none for `0` (the server is off); see
/// [`parse_bind_address`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BindAddress(pub Option<SocketAddr>);

/// Why the flags do not make [`ManagerOptions`].
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `--kube-api-qps` is positive but the pair makes no rate limit.
    #[error("--kube-api-qps {qps} and --kube-api-burst {burst}: {source}")]
    RateLimit {
        /// `--kube-api-qps`.
        qps: f64,
        /// `--kube-api-burst`.
        burst: u32,
        /// Why the client refused them.
        #[source]
        source: crate::client::Error,
    },
}

// === impl ManagerArgs ===

impl ManagerArgs {
    /// The cluster configuration: the file `--kubeconfig` names, else as kubectl finds it
    /// ([`Config::infer`]).
    ///
    /// # Errors
    ///
    /// The configuration's error, which names the file and field at fault.
    pub fn load_config(&self) -> Result<Config, config::Error> {
        match &self.kubeconfig {
            Some(path) => Config::from_kubeconfig(&KubeconfigOptions {
                path: Some(path.clone()),
                ..KubeconfigOptions::default()
            }),
            None => Config::infer(),
        }
    }

    /// The manager's options as the flags say; with `--leader-elect`, the Lease is named
    /// `leader_election_id` and lives in `--leader-election-namespace`, else in `config`'s
    /// namespace.
    ///
    /// # Errors
    ///
    /// [`Error::RateLimit`] when `--kube-api-qps` and `--kube-api-burst` make no limit.
    pub fn manager_options(
        &self,
        leader_election_id: &str,
        config: &Config,
    ) -> Result<ManagerOptions, Error> {
        let mut options = ManagerOptions {
            metrics_bind_address: self.metrics_address(),
            metrics_secure: self.secure_metrics(),
            health_probe_bind_address: self.health_probe_bind_address.0,
            leader_election: self.leader_election(leader_election_id, config),
            debug_pages: self.enable_debug_pages,
            on_lease_lost: if self.leader_elect_exit_on_lost {
                OnLeaseLost::Exit
            } else {
                OnLeaseLost::Compete
            },
            cache: CacheOptions {
                namespaces: self.namespace.iter().cloned().collect(),
                read_your_writes: self.read_your_writes,
                ..CacheOptions::default()
            },
            max_concurrent_reconciles: self.max_concurrent_reconciles,
            ..ManagerOptions::default()
        };
        options.client.rate_limit = self.rate_limit()?;
        Ok(options)
    }

    /// The webhook server's options: `--webhook-port` on `--webhook-host`, the certificate in
    /// `--webhook-cert-path`, HTTP/2 as `--enable-http2` says.
    pub fn webhook_options(&self) -> WebhookOptions {
        let defaults = WebhookOptions::default();
        WebhookOptions {
            bind_address: SocketAddr::from((self.webhook_host, self.webhook_port)),
            cert_dir: self.webhook_cert_path.clone().unwrap_or(defaults.cert_dir),
            cert_name: self.webhook_cert_name.clone(),
            key_name: self.webhook_cert_key.clone(),
            enable_http2: self.enable_http2,
        }
    }

    /// Runs a manager from these flags: logging, configuration, manager, `setup` (register
    /// the controllers and webhooks there), preflight, then until SIGINT or SIGTERM; see the
    /// [module docs](self). `leader_election_id` names the Lease `--leader-elect` uses.
    ///
    /// Returns the process's exit status: success once the manager stopped on a signal,
    /// failure after logging the error as one line.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub async fn run<S>(&self, leader_election_id: &str, setup: S) -> ExitCode
    where
        S: FnOnce(&Manager) -> Result<(), BoxError>,
    {
        self.run_with(leader_election_id, |options| options, setup)
            .await
    }

    /// As [`run`](Self::run), with the manager's options passed through `options` before the
    /// manager is built: for what flags do not set, such as the cache's per-kind selectors
    /// and transforms.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub async fn run_with<O, S>(&self, leader_election_id: &str, options: O, setup: S) -> ExitCode
    where
        O: FnOnce(ManagerOptions) -> ManagerOptions,
        S: FnOnce(&Manager) -> Result<(), BoxError>,
    {
        if let Err(e) = logging::init(&self.log) {
            // No logger to say it with.
            eprintln!("Error: {}", one_line(&e));
            return ExitCode::FAILURE;
        }
        match self.try_run(leader_election_id, options, setup).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                tracing::error!(target: "setup", "{}", one_line(&e));
                ExitCode::FAILURE
            }
        }
    }

    async fn try_run<O, S>(
        &self,
        leader_election_id: &str,
        options: O,
        setup: S,
    ) -> Result<(), RunError>
    where
        O: FnOnce(ManagerOptions) -> ManagerOptions,
        S: FnOnce(&Manager) -> Result<(), BoxError>,
    {
        let config = self.load_config().map_err(RunError::Config)?;
        let options = options(self.manager_options(leader_election_id, &config)?);
        tracing::info!(target: "setup", server = %config.cluster_url, source = %config.source, "starting the manager");
        let shard = self.shard_config(leader_election_id, &config);
        let manager = Manager::with_config(config, options).map_err(RunError::Manager)?;
        if let Some(shard) = shard {
            let shard =
                Shard::new(manager.client(), shard).map_err(|e| RunError::Setup(e.into()))?;
            tracing::info!(target: "setup", replica = %shard.identity(), set = %shard.config().set, "sharding the controllers");
            manager.shard(shard).map_err(RunError::Manager)?;
        }
        setup(&manager).map_err(RunError::Setup)?;
        manager.preflight().await?;
        manager.start().await.map_err(RunError::Run)?;
        tracing::info!(target: "setup", "stopped");
        Ok(())
    }

    /// `--metrics-bind-address`, defaulting by `--metrics-secure`.
    fn metrics_address(&self) -> Option<SocketAddr> {
        match self.metrics_bind_address {
            Some(address) => address.0,
            None => Some(([0, 0, 0, 0], if self.metrics_secure { 8443 } else { 8080 }).into()),
        }
    }

    /// How metrics are served over HTTPS; `None` for plain HTTP.
    fn secure_metrics(&self) -> Option<SecureMetricsOptions> {
        let defaults = SecureMetricsOptions::default();
        self.metrics_secure.then(|| SecureMetricsOptions {
            cert_dir: self.metrics_cert_path.clone().unwrap_or(defaults.cert_dir),
            cert_name: self.metrics_cert_name.clone(),
            key_name: self.metrics_cert_key.clone(),
            ..defaults
        })
    }

    /// The Lease, with `--leader-elect`.
    fn leader_election(&self, id: &str, config: &Config) -> Option<LeaderElectionConfig> {
        (self.leader_elect && !self.shard).then(|| {
            let namespace = (self.leader_election_namespace.clone())
                .unwrap_or_else(|| config.default_namespace.clone());
            LeaderElectionConfig {
                lease_duration: self.leader_elect_lease_duration,
                renew_deadline: self.leader_elect_renew_deadline,
                retry_period: self.leader_elect_retry_period,
                release_on_cancel: self.leader_elect_release_on_cancel,
                ..LeaderElectionConfig::new(id, namespace)
            }
        })
    }

    /// With `--shard`: the shard set named `id`, its Leases in `--shard-namespace` (else the
    /// leader election's namespace), this replica named by `--shard-identity` (else
    /// `POD_NAME` or the host name, with a random suffix), with the leader election's
    /// timings.
    fn shard_config(&self, id: &str, config: &Config) -> Option<ShardConfig> {
        self.shard.then(|| {
            let namespace = (self.shard_namespace.clone())
                .or_else(|| self.leader_election_namespace.clone())
                .unwrap_or_else(|| config.default_namespace.clone());
            let identity = self.shard_identity.clone().unwrap_or_else(default_identity);
            ShardConfig {
                lease_duration: self.leader_elect_lease_duration,
                renew_deadline: self.leader_elect_renew_deadline,
                retry_period: self.leader_elect_retry_period,
                ..ShardConfig::new(id, namespace, identity)
            }
        })
    }

    /// The client's rate limit: none for a QPS of 0 or less.
    fn rate_limit(&self) -> Result<Option<RateLimit>, Error> {
        let (qps, burst) = (self.kube_api_qps, self.kube_api_burst);
        if qps <= 0.0 {
            return Ok(None);
        }
        RateLimit::new(qps, burst)
            .map(Some)
            .map_err(|source| Error::RateLimit { qps, burst, source })
    }
}

// === running ===

/// `POD_NAME`, else the host name, then `_` and a random suffix, as client-go's leader
/// election identities.
fn default_identity() -> String {
    use std::hash::{BuildHasher, Hasher};
    let host = std::env::var("POD_NAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "replica".to_owned());
    let suffix = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    format!("{host}_{:08x}", suffix as u32)
}

/// Why [`ManagerArgs::run`] stopped with an error.
#[derive(Debug, thiserror::Error)]
enum RunError {
    #[error("loading the cluster configuration: {0}")]
    Config(#[source] config::Error),
    #[error(transparent)]
    Flags(#[from] Error),
    #[error("building the manager: {0}")]
    Manager(#[source] ManagerError),
    #[error("setting up the controllers: {0}")]
    Setup(#[source] BoxError),
    #[error(transparent)]
    Preflight(#[from] PreflightError),
    #[error("running the manager: {0}")]
    Run(#[source] ManagerError),
}

/// An error and its causes as one line, for the log: each cause is added unless the line
/// holds its text already, and the causes under the client's and the configuration's own
/// errors are left out, since their messages name the cause and the fix themselves.
fn one_line(error: &(dyn StdError + 'static)) -> String {
    let mut line = String::new();
    let mut next = Some(error);
    while let Some(cause) = next {
        let text = cause.to_string();
        if !line.contains(&text) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&text);
        }
        if cause.is::<crate::client::Error>() || cause.is::<config::Error>() {
            break;
        }
        next = cause.source();
    }
    line
}

// === value parsers ===

fn bind_address(s: &str) -> Result<BindAddress, String> {
    parse_bind_address(s)
        .map(BindAddress)
        .map_err(|e| e.to_string())
}

/// A boolean as Go's flags read one: `1`, `t`, `true` (any case Go accepts), or `0`, `f`,
/// `false`.
fn go_bool(s: &str) -> Result<bool, String> {
    match s {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(format!("{s:?}: expected true or false")),
    }
}

/// A duration flag: a whole number with a unit, `ms`, `s` or `m` (as Go's flags write the
/// common ones).
fn duration(s: &str) -> Result<Duration, String> {
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?}: expected a whole number and a unit, e.g. 15s or 500ms"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        "m" => n
            .checked_mul(60)
            .map(Duration::from_secs)
            .ok_or_else(|| format!("{s:?}: too long")),
        _ => Err(format!("{s:?}: the unit must be ms, s or m, e.g. 15s")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// An operator's flags: the manager's, flattened.
    #[derive(Debug, Parser)]
    struct Flags {
        #[command(flatten)]
        manager: ManagerArgs,
    }

    fn parse(args: &[&str]) -> Result<ManagerArgs, clap::Error> {
        let argv = std::iter::once("operator").chain(args.iter().copied());
        Flags::try_parse_from(argv).map(|flags| flags.manager)
    }

    /// A configuration for `manager_options`; nothing is dialled.
    fn config() -> Config {
        Config {
            cluster_url: "https://127.0.0.1:6443".parse().unwrap(),
            default_namespace: "from-config".into(),
            root_certs: Vec::new(),
            accept_invalid_certs: true,
            tls_server_name: None,
            identity: None,
            auth: config::Auth::None,
            source: "test".into(),
        }
    }

    #[test]
    fn flags_follow_kubebuilder_defaults() {
        let flags = parse(&[]).unwrap();
        assert_eq!(flags.metrics_address(), Some(([0, 0, 0, 0], 8443).into()));
        let secure = flags.secure_metrics().expect("secure by default");
        assert!(secure.authorize);
        assert_eq!(secure.cert_dir, SecureMetricsOptions::default().cert_dir);
        assert_eq!(
            (secure.cert_name.as_str(), secure.key_name.as_str()),
            ("tls.crt", "tls.key")
        );
        assert_eq!(
            flags.health_probe_bind_address.0,
            Some(([0, 0, 0, 0], 8081).into())
        );
        assert!(!flags.leader_elect);
        assert_eq!(
            (
                flags.leader_elect_lease_duration,
                flags.leader_elect_renew_deadline,
                flags.leader_elect_retry_period
            ),
            (
                Duration::from_secs(15),
                Duration::from_secs(10),
                Duration::from_secs(2)
            )
        );
        assert!(flags.rate_limit().unwrap().is_none());
        assert!(!flags.enable_http2);
        let options = flags.manager_options("id.example.com", &config()).unwrap();
        assert!(options.leader_election.is_none());
        assert!(options.cache.namespaces.is_empty());
        assert!(options.client.rate_limit.is_none());
        assert_eq!(options.graceful_shutdown_timeout, Duration::from_secs(30));
    }

    #[test]
    fn a_qps_of_zero_or_less_lifts_the_client_side_rate_limit() {
        for qps in ["0", "-1"] {
            let flags = parse(&["--kube-api-qps", qps]).unwrap();
            assert!(flags.rate_limit().unwrap().is_none());
        }
        let flags = parse(&["--kube-api-qps=20"]).unwrap();
        let limit = flags.rate_limit().unwrap().unwrap();
        assert_eq!((limit.qps(), limit.burst()), (20.0, 30));
        let options = flags.manager_options("id", &config()).unwrap();
        assert_eq!(options.client.rate_limit, Some(limit));
        let flags = parse(&["--kube-api-qps=50", "--kube-api-burst=0"]).unwrap();
        let err = flags.manager_options("id", &config()).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("--kube-api-qps 50 and --kube-api-burst 0: "),
            "{err}"
        );
    }

    #[test]
    fn lease_durations_take_a_unit_and_refuse_anything_else() {
        let flags = parse(&[
            "--leader-elect-lease-duration=1m",
            "--leader-elect-renew-deadline=4s",
            "--leader-elect-retry-period=500ms",
        ])
        .unwrap();
        assert_eq!(flags.leader_elect_lease_duration, Duration::from_secs(60));
        assert_eq!(flags.leader_elect_renew_deadline, Duration::from_secs(4));
        assert_eq!(flags.leader_elect_retry_period, Duration::from_millis(500));
        for (bad, says) in [
            ("15", "unit must be"),
            ("1.5s", "unit must be"),
            ("s", "whole number"),
            ("307445734561825861m", "too long"),
        ] {
            let err = parse(&[&format!("--leader-elect-lease-duration={bad}")])
                .unwrap_err()
                .to_string();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }

    #[test]
    fn zero_turns_a_server_off_and_bad_addresses_are_refused() {
        let flags = parse(&[
            "--metrics-bind-address=0",
            "--health-probe-bind-address=127.0.0.1:9000",
            "--leader-elect",
            "--namespace=prod",
        ])
        .unwrap();
        assert_eq!(flags.metrics_address(), None);
        assert_eq!(
            flags.health_probe_bind_address.0,
            Some(([127, 0, 0, 1], 9000).into())
        );
        assert_eq!(flags.namespace.as_deref(), Some("prod"));
        let options = flags.manager_options("id", &config()).unwrap();
        assert_eq!(options.cache.namespaces, ["prod"]);
        assert_eq!(options.metrics_bind_address, None);
        let bad = parse(&["--metrics-bind-address=nowhere"]);
        assert!(
            bad.unwrap_err()
                .to_string()
                .contains("metrics-bind-address")
        );
    }

    #[test]
    fn metrics_secure_is_a_go_style_boolean_flag() {
        let plain = parse(&["--metrics-secure=false"]).unwrap();
        assert!(plain.secure_metrics().is_none());
        assert_eq!(plain.metrics_address(), Some(([0, 0, 0, 0], 8080).into()));
        let on = parse(&[
            "--metrics-secure",
            "--metrics-bind-address=127.0.0.1:9443",
            "--metrics-cert-path=/certs",
            "--metrics-cert-name=serving.crt",
            "--metrics-cert-key=serving.key",
        ])
        .unwrap();
        assert_eq!(on.metrics_address(), Some(([127, 0, 0, 1], 9443).into()));
        let secure = on.secure_metrics().unwrap();
        assert_eq!(secure.cert_dir, PathBuf::from("/certs"));
        assert_eq!(
            (secure.cert_name.as_str(), secure.key_name.as_str()),
            ("serving.crt", "serving.key")
        );
        assert!(parse(&["--metrics-secure=maybe"]).is_err());
    }

    #[test]
    fn booleans_read_as_go_reads_them_and_need_an_equals_sign() {
        for (value, want) in [
            ("true", true),
            ("1", true),
            ("T", true),
            ("False", false),
            ("0", false),
        ] {
            let flags = parse(&[
                &format!("--leader-elect={value}"),
                &format!("--enable-http2={value}"),
            ])
            .unwrap();
            assert_eq!(
                (flags.leader_elect, flags.enable_http2),
                (want, want),
                "{value}"
            );
        }
        let flags = parse(&["--leader-elect", "--enable-http2"]).unwrap();
        assert!(flags.leader_elect && flags.enable_http2);
        // As in Go, a value must follow `=`: a word after the flag is not its value.
        assert!(parse(&["--leader-elect", "false"]).is_err());
        let err = parse(&["--enable-http2=yes"]).unwrap_err().to_string();
        assert!(err.contains("\"yes\": expected true or false"), "{err}");
    }

    #[test]
    fn debug_pages_are_off_unless_the_flag_turns_them_on() {
        let off = parse(&[])
            .unwrap()
            .manager_options("id", &config())
            .unwrap();
        assert!(!off.debug_pages);
        let on = parse(&["--enable-debug-pages"]).unwrap();
        assert!(on.manager_options("id", &config()).unwrap().debug_pages);
        let explicit = parse(&["--enable-debug-pages=false"]).unwrap();
        assert!(
            !explicit
                .manager_options("id", &config())
                .unwrap()
                .debug_pages
        );
    }

    #[test]
    fn leader_election_names_the_lease_and_finds_its_namespace() {
        let flags = parse(&["--leader-elect", "--leader-elect-lease-duration=30s"]).unwrap();
        let options = flags
            .manager_options("86f835c3.example.com", &config())
            .unwrap();
        let lease = options.leader_election.unwrap();
        assert_eq!(
            (lease.lease_name.as_str(), lease.namespace.as_str()),
            ("86f835c3.example.com", "from-config")
        );
        assert_eq!(
            (
                lease.lease_duration,
                lease.renew_deadline,
                lease.retry_period
            ),
            (
                Duration::from_secs(30),
                Duration::from_secs(10),
                Duration::from_secs(2)
            )
        );
        let elsewhere = parse(&["--leader-elect", "--leader-election-namespace=system"]).unwrap();
        let lease = elsewhere
            .manager_options("id", &config())
            .unwrap()
            .leader_election
            .unwrap();
        assert_eq!(lease.namespace, "system");
    }

    #[test]
    fn webhook_flags_keep_cert_dir_and_default_to_kubebuilders_paths_without_http2() {
        let defaults = parse(&[]).unwrap().webhook_options();
        let want = WebhookOptions::default();
        assert_eq!(defaults.bind_address, want.bind_address);
        assert_eq!(defaults.cert_dir, want.cert_dir);
        assert_eq!(
            (defaults.cert_name.as_str(), defaults.key_name.as_str()),
            ("tls.crt", "tls.key")
        );
        assert!(!defaults.enable_http2);

        let old = parse(&["--cert-dir=/old", "--webhook-port=10443"])
            .unwrap()
            .webhook_options();
        assert_eq!(old.cert_dir, PathBuf::from("/old"));
        assert_eq!(old.bind_address, SocketAddr::from(([0, 0, 0, 0], 10443)));
        let local = parse(&["--webhook-host=127.0.0.1", "--webhook-port=10443"])
            .unwrap()
            .webhook_options();
        assert_eq!(
            local.bind_address,
            SocketAddr::from(([127, 0, 0, 1], 10443))
        );
        assert!(parse(&["--webhook-host=nowhere"]).is_err());
        let new = parse(&[
            "--webhook-cert-path=/new",
            "--webhook-cert-name=w.crt",
            "--webhook-cert-key=w.key",
            "--enable-http2",
        ])
        .unwrap()
        .webhook_options();
        assert_eq!(new.cert_dir, PathBuf::from("/new"));
        assert_eq!(
            (new.cert_name.as_str(), new.key_name.as_str()),
            ("w.crt", "w.key")
        );
        assert!(new.enable_http2);
    }

    #[test]
    fn one_line_holds_each_cause_once_and_stops_at_the_clients_error() {
        #[derive(Debug, thiserror::Error)]
        #[error("outer")]
        struct Outer(#[source] crate::client::Error);
        let transport = crate::client::Error::Transport {
            url: "http://x/".into(),
            source: "deep cause".into(),
        };
        let client_text = transport.to_string();
        let setup = RunError::Setup(Box::new(Outer(transport)));
        assert_eq!(
            one_line(&setup),
            format!("setting up the controllers: outer: {client_text}")
        );
        // A cause the line holds already is not repeated.
        let flags = RunError::Flags(Error::RateLimit {
            qps: 1.0,
            burst: 0,
            source: crate::client::Error::Build("burst".into()),
        });
        assert_eq!(
            one_line(&flags),
            "--kube-api-qps 1 and --kube-api-burst 0: building the client: burst"
        );
    }
}
