//! The Memcached operator's binary: flags as kubebuilder's main has them, then the manager.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use clap::Parser;
use controller_runtime::client::{Api, Client, ListParams, RateLimit};
use controller_runtime::config::{Config, KubeconfigOptions};
use controller_runtime::runtime::leader_election::LeaderElectionConfig;
use controller_runtime::runtime::server::{SecureMetricsOptions, parse_bind_address};
use controller_runtime::runtime::webhook::WebhookOptions;
use controller_runtime::runtime::{CacheOptions, Manager, ManagerOptions};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use memcached_operator::api::Memcached;
use tracing_subscriber::filter::{LevelFilter, Targets};

/// Keeps a Deployment of memcached Pods scaled to each Memcached resource's spec.size.
#[derive(Debug, Parser)]
#[command(version)]
struct Flags {
    /// What to do instead of running the operator.
    #[command(subcommand)]
    command: Option<Command>,
    /// The kubeconfig to use; without it, KUBECONFIG, ~/.kube/config, then the in-cluster
    /// service account.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Where /metrics is served ("0" turns it off); default :8443 with --metrics-secure,
    /// :8080 without.
    #[arg(long, value_parser = bind_address)]
    metrics_bind_address: Option<BindAddress>,
    /// Serve /metrics over HTTPS, only to callers the API server authenticates
    /// (TokenReview) and authorizes (SubjectAccessReview: get on the non-resource URL
    /// /metrics), as kubebuilder's scaffold does; --metrics-secure=false serves plain HTTP
    /// to anyone who can connect.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true", require_equals = true)]
    metrics_secure: bool,
    /// The directory holding the metrics server's certificate and key; when they are
    /// missing a self-signed certificate is made at start. Default
    /// `<temp dir>/k8s-metrics-server/serving-certs`.
    #[arg(long)]
    metrics_cert_path: Option<PathBuf>,
    /// The metrics server's certificate file in --metrics-cert-path.
    #[arg(long, default_value = "tls.crt")]
    metrics_cert_name: String,
    /// The metrics server's key file in --metrics-cert-path.
    #[arg(long, default_value = "tls.key")]
    metrics_cert_key: String,
    /// Where /healthz and /readyz are served ("0" turns them off).
    #[arg(long, default_value = ":8081", value_parser = bind_address)]
    health_probe_bind_address: BindAddress,
    /// Elect a leader, so only one replica reconciles.
    #[arg(long)]
    leader_elect: bool,
    /// The namespace of the leader election Lease (default: the configuration's namespace).
    #[arg(long)]
    leader_election_namespace: Option<String>,
    /// How long a lease stays valid unrenewed: after a leader dies, the others take over
    /// within about this long (e.g. 15s, 500ms, 1m).
    #[arg(long, default_value = "15s", value_parser = duration)]
    leader_elect_lease_duration: Duration,
    /// How long the leader keeps retrying a renewal before it steps down; less than the
    /// lease duration.
    #[arg(long, default_value = "10s", value_parser = duration)]
    leader_elect_renew_deadline: Duration,
    /// The interval between the candidates' attempts to acquire or renew; less than the
    /// renew deadline / 1.2.
    #[arg(long, default_value = "2s", value_parser = duration)]
    leader_elect_retry_period: Duration,
    /// Watch and reconcile only this namespace (default: every namespace).
    #[arg(long)]
    namespace: Option<String>,
    /// The image for resources that name none (also read from MEMCACHED_IMAGE).
    #[arg(long, env = "MEMCACHED_IMAGE", default_value = memcached_operator::DEFAULT_IMAGE)]
    memcached_image: String,
    /// Serve the admission webhooks (needs a serving certificate in --cert-dir).
    #[arg(long, env = "ENABLE_WEBHOOKS")]
    enable_webhooks: bool,
    /// The port the admission webhooks are served on.
    #[arg(long, default_value_t = 9443)]
    webhook_port: u16,
    /// The directory holding the webhook server's tls.crt and tls.key (reloaded when they
    /// change); default `<temp dir>/k8s-webhook-server/serving-certs`.
    #[arg(long)]
    cert_dir: Option<PathBuf>,
    /// An image prefix the validating webhook allows (repeatable); none allows any image.
    #[arg(long = "allowed-image-prefix")]
    allowed_image_prefixes: Vec<String>,
    /// Client-side limit on requests to the API server, a second sustained. The default,
    /// -1 (as 0 or any value below), sets none and sends as fast as the controller asks, as
    /// controller-runtime's `GetConfig` does, leaving the server's priority and fairness to
    /// pace the operator: a limit of 20 made the median scale 3.6 times slower.
    #[arg(long, default_value_t = -1.0, allow_negative_numbers = true)]
    kube_api_qps: f64,
    /// Requests allowed at once above `--kube-api-qps`.
    #[arg(long, default_value_t = 30)]
    kube_api_burst: u32,
    /// The log level: error, warn, info, debug or trace (RUST_LOG overrides it).
    #[arg(long, default_value = "info")]
    log_level: String,
    /// The log format: text or json.
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
}

impl Flags {
    /// `--metrics-bind-address`, defaulting by `--metrics-secure`.
    fn metrics_address(&self) -> Option<SocketAddr> {
        match self.metrics_bind_address {
            Some(address) => address.0,
            None => Some(([0, 0, 0, 0], if self.metrics_secure { 8443 } else { 8080 }).into()),
        }
    }

    /// How metrics are served over HTTPS; `None` for plain HTTP.
    fn secure_metrics(&self) -> Option<SecureMetricsOptions> {
        let mut options = SecureMetricsOptions {
            cert_name: self.metrics_cert_name.clone(),
            key_name: self.metrics_cert_key.clone(),
            ..SecureMetricsOptions::default()
        };
        if let Some(dir) = &self.metrics_cert_path {
            options.cert_dir = dir.clone();
        }
        self.metrics_secure.then_some(options)
    }
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

/// A server's address, or none for "0" (the server is off).
#[derive(Clone, Copy, Debug, PartialEq)]
struct BindAddress(Option<SocketAddr>);

fn bind_address(s: &str) -> Result<BindAddress, String> {
    parse_bind_address(s)
        .map(BindAddress)
        .map_err(|e| e.to_string())
}

#[tokio::main]
async fn main() -> ExitCode {
    let flags = Flags::parse();
    if let Some(Command::Crd) = flags.command {
        print!("{}", memcached_operator::crd_yaml());
        return ExitCode::SUCCESS;
    }
    if let Some(Command::Rbac) = flags.command {
        return match memcached_operator::rbac_yaml() {
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
    if let Err(e) = init_logging(&flags.log_level, &flags.log_format) {
        eprintln!("Error: {}", one_line(&e));
        return ExitCode::FAILURE;
    }
    match run(flags).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{}", one_line(&e));
            ExitCode::FAILURE
        }
    }
}

/// An error and its causes as one line, for the log: each cause is added unless the text
/// has it already, and the causes under the library's own errors are left out, since their
/// messages name the cause and the fix themselves.
fn one_line(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if !line.contains(&text) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&text);
        }
        if cause.is::<controller_runtime::client::Error>()
            || cause.is::<controller_runtime::config::Error>()
        {
            break;
        }
    }
    line
}

/// Loads the configuration, checks it reaches the cluster, and runs the manager until a
/// signal stops it.
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
        let namespace = flags
            .leader_election_namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone());
        LeaderElectionConfig {
            lease_duration: flags.leader_elect_lease_duration,
            renew_deadline: flags.leader_elect_renew_deadline,
            retry_period: flags.leader_elect_retry_period,
            ..LeaderElectionConfig::new("86f835c3.example.com", namespace)
        }
    });
    let mut options = ManagerOptions {
        metrics_bind_address: flags.metrics_address(),
        metrics_secure: flags.secure_metrics(),
        health_probe_bind_address: flags.health_probe_bind_address.0,
        leader_election,
        cache: memcached_operator::cache_selectors(CacheOptions {
            namespaces: flags.namespace.iter().cloned().collect(),
            ..CacheOptions::default()
        }),
        graceful_shutdown_timeout: Duration::from_secs(30),
        ..ManagerOptions::default()
    };
    options.client.rate_limit = rate_limit(flags.kube_api_qps, flags.kube_api_burst)?;
    let client_cert_expired = config
        .identity
        .as_ref()
        .and_then(|identity| identity.not_after())
        .is_some_and(|t| t < SystemTime::now());
    tracing::info!(server = %config.cluster_url, source = %config.source, "starting the memcached operator");
    let manager = Manager::with_config(config, options).context("building the manager")?;
    preflight(
        &manager.client(),
        flags.namespace.as_deref(),
        client_cert_expired,
    )
    .await?;
    memcached_operator::setup(&manager, &flags.memcached_image)
        .context("setting up the memcached controller")?;
    if flags.enable_webhooks {
        let mut options = WebhookOptions {
            bind_address: SocketAddr::from(([0, 0, 0, 0], flags.webhook_port)),
            ..WebhookOptions::default()
        };
        if let Some(dir) = flags.cert_dir.clone() {
            options.cert_dir = dir;
        }
        let server = memcached_operator::webhook::server(options, flags.allowed_image_prefixes);
        manager.add_webhook_server(server);
    }
    manager.start().await.context("running the manager")?;
    tracing::info!("stopped");
    Ok(())
}

/// Lists each kind the operator caches once, one object at most, before the manager starts:
/// a configuration that cannot work (no server there, a wrong CA, refused credentials, no
/// RBAC rights, the CRD not installed) then stops the operator at once with one line that
/// says why, where the informers would retry in the background until the cache's sync
/// timeout.
///
/// `client_cert_expired` says whether the configuration's client certificate is past its
/// `notAfter`: the server answers such a certificate with a bare 401.
async fn preflight(
    client: &Client,
    namespace: Option<&str>,
    client_cert_expired: bool,
) -> anyhow::Result<()> {
    let one = ListParams {
        limit: Some(1),
        ..ListParams::default()
    };
    macro_rules! first_error {
        ($kind:ty) => {
            match namespace {
                Some(ns) => Api::<$kind>::namespaced(client.clone(), ns),
                None => Api::<$kind>::all(client.clone()),
            }
            .list(&one)
            .await
            .err()
        };
    }
    if let Some(e) = first_error!(Memcached) {
        return Err(explain(
            e,
            "memcacheds.cache.example.com",
            client_cert_expired,
        ));
    }
    if let Some(e) = first_error!(Deployment) {
        return Err(explain(e, "deployments.apps", client_cert_expired));
    }
    if let Some(e) = first_error!(Pod) {
        return Err(explain(e, "pods", client_cert_expired));
    }
    Ok(())
}

/// The preflight's failure to list `resource` as one line: the client's message, which
/// names the cause, with this operator's own fix where there is one.
fn explain(
    e: controller_runtime::client::Error,
    resource: &str,
    client_cert_expired: bool,
) -> anyhow::Error {
    match e.code() {
        Some(404) if resource.starts_with("memcacheds.") && e.reason() == Some("NotFound") => {
            anyhow::anyhow!(
                "the Memcached CRD is not installed (the server does not serve \
                 {resource}/v1alpha1): install it with `kubectl apply -k config/crd`"
            )
        }
        Some(401) if client_cert_expired => anyhow::anyhow!(
            "401 Unauthorized: the kubeconfig's client certificate has expired: issue a new \
             one from the cluster's client CA and set the user's client-certificate(-data) \
             and client-key(-data) to it"
        ),
        Some(403) => anyhow::anyhow!(
            "{e}; for this operator, bind the ClusterRole in config/rbac/role.yaml \
             (`kubectl apply -k config/rbac` does, for its ServiceAccount)"
        ),
        _ => anyhow::Error::new(e).context(format!("listing {resource}")),
    }
}

/// A duration flag: a whole number with a unit, `ms`, `s` or `m` (as Go's flags write
/// the common ones).
fn duration(s: &str) -> Result<Duration, String> {
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?}: expected a whole number and a unit, e.g. 15s or 500ms"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        _ => Err(format!("{s:?}: the unit must be ms, s or m, e.g. 15s")),
    }
}

/// The client's rate limit for `--kube-api-qps` and `--kube-api-burst`: none for a QPS of 0
/// or less.
fn rate_limit(qps: f64, burst: u32) -> anyhow::Result<Option<RateLimit>> {
    if qps <= 0.0 {
        return Ok(None);
    }
    Ok(Some(
        RateLimit::new(qps, burst).context("--kube-api-qps and --kube-api-burst")?,
    ))
}

/// Logs to stderr, filtered by [`log_filter`].
fn init_logging(level: &str, format: &str) -> anyhow::Result<()> {
    use tracing_subscriber::{fmt, prelude::*};
    let filter = log_filter(std::env::var("RUST_LOG").ok().as_deref(), level)?;
    let json = format == "json";
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::registry()
        .with(filter)
        .with(json.then(|| fmt::layer().json().with_writer(std::io::stderr)))
        .with((!json).then(|| fmt::layer().with_ansi(ansi).with_writer(std::io::stderr)))
        .init();
    Ok(())
}

/// What is logged: `RUST_LOG`'s directives when it is set (e.g. `info`, or
/// `memcached_operator=debug,info`: a default level and levels per module), else `--log-level`.
///
/// # Errors
///
/// When either does not parse: a typo must not silently change what is logged.
fn log_filter(rust_log: Option<&str>, level: &str) -> anyhow::Result<Targets> {
    match rust_log {
        Some(directives) if !directives.trim().is_empty() => directives.parse().with_context(|| {
            format!("RUST_LOG={directives:?}: expected `level` or `module=level` directives, comma-separated")
        }),
        _ => {
            let level = level.parse::<LevelFilter>().with_context(|| {
                format!("--log-level {level:?}: expected error, warn, info, debug or trace")
            })?;
            Ok(Targets::new().with_default(level))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_follow_kubebuilder_defaults() {
        let flags = Flags::try_parse_from(["memcached-operator"]).unwrap();
        assert_eq!(flags.metrics_address(), Some(([0, 0, 0, 0], 8443).into()));
        let secure = flags.secure_metrics().expect("secure by default");
        assert!(secure.authorize);
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
        assert!(flags.command.is_none());
        assert!(
            rate_limit(flags.kube_api_qps, flags.kube_api_burst)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn a_qps_of_zero_or_less_lifts_the_client_side_rate_limit() {
        for qps in ["0", "-1"] {
            let flags =
                Flags::try_parse_from(["memcached-operator", "--kube-api-qps", qps]).unwrap();
            assert!(
                rate_limit(flags.kube_api_qps, flags.kube_api_burst)
                    .unwrap()
                    .is_none()
            );
        }
        let flags = Flags::try_parse_from(["memcached-operator", "--kube-api-qps=20"]).unwrap();
        let limit = rate_limit(flags.kube_api_qps, flags.kube_api_burst).unwrap();
        let limit = limit.unwrap();
        assert_eq!((limit.qps(), limit.burst()), (20.0, 30));
        let flags = Flags::try_parse_from([
            "memcached-operator",
            "--kube-api-qps=50",
            "--kube-api-burst=0",
        ])
        .unwrap();
        assert!(rate_limit(flags.kube_api_qps, flags.kube_api_burst).is_err());
    }

    #[test]
    fn lease_durations_take_a_unit_and_refuse_anything_else() {
        let flags = Flags::try_parse_from([
            "memcached-operator",
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
        ] {
            let err = Flags::try_parse_from([
                "memcached-operator",
                &format!("--leader-elect-lease-duration={bad}"),
            ])
            .unwrap_err()
            .to_string();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }

    #[test]
    fn zero_turns_a_server_off_and_bad_addresses_are_refused() {
        let flags = Flags::try_parse_from([
            "memcached-operator",
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
        let bad = Flags::try_parse_from(["memcached-operator", "--metrics-bind-address=nowhere"]);
        assert!(
            bad.unwrap_err()
                .to_string()
                .contains("metrics-bind-address")
        );
    }

    #[test]
    fn metrics_secure_is_a_go_style_boolean_flag() {
        let plain =
            Flags::try_parse_from(["memcached-operator", "--metrics-secure=false"]).unwrap();
        assert!(plain.secure_metrics().is_none());
        assert_eq!(plain.metrics_address(), Some(([0, 0, 0, 0], 8080).into()));
        let on = Flags::try_parse_from([
            "memcached-operator",
            "--metrics-secure",
            "--metrics-bind-address=127.0.0.1:9443",
            "--metrics-cert-path=/certs",
        ])
        .unwrap();
        assert_eq!(on.metrics_address(), Some(([127, 0, 0, 1], 9443).into()));
        assert_eq!(
            on.secure_metrics().unwrap().cert_dir,
            PathBuf::from("/certs")
        );
        assert!(Flags::try_parse_from(["memcached-operator", "--metrics-secure=maybe"]).is_err());
    }

    #[test]
    fn the_crd_subcommand_parses() {
        let flags = Flags::try_parse_from(["memcached-operator", "crd"]).unwrap();
        assert!(matches!(flags.command, Some(Command::Crd)));
    }

    #[test]
    fn rust_log_overrides_the_log_level_and_typos_in_either_are_errors() {
        use tracing::Level;
        let from_flag = log_filter(None, "warn").unwrap();
        assert!(from_flag.would_enable("memcached_operator", &Level::WARN));
        assert!(!from_flag.would_enable("memcached_operator", &Level::INFO));

        let from_env = log_filter(Some("memcached_operator=debug,error"), "warn").unwrap();
        assert!(from_env.would_enable("memcached_operator::reconcile", &Level::DEBUG));
        assert!(!from_env.would_enable("controller_runtime", &Level::WARN));
        assert!(
            log_filter(Some(" "), "info")
                .unwrap()
                .would_enable("x", &Level::INFO)
        );

        let bad_flag = log_filter(None, "infoo").unwrap_err();
        assert!(format!("{bad_flag:#}").contains("--log-level \"infoo\""));
        let bad_env = log_filter(Some("memcached_operator=loud"), "info").unwrap_err();
        assert!(format!("{bad_env:#}").contains("RUST_LOG=\"memcached_operator=loud\""));
    }
}
