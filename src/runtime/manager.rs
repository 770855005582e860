//! The manager: owns the client, the cache, the metrics and the controllers, starts them in
//! controller-runtime's order and stops them gracefully.
//!
//! # Start order
//!
//! 1. the HTTP servers: metrics, health probes (`/readyz` fails until step 2 is done) and
//!    admission webhooks;
//! 2. the cache: every informer made so far starts, and the manager waits for each to sync
//!    (2 minutes by default; the error names the kind and the last error, e.g. a 403);
//! 3. runnables that do not need leadership;
//! 4. leader election, when configured; then, while leading, the controllers and the
//!    runnables that need leadership.
//!
//! # Logs
//!
//! While leading, the controllers run inside a `leading{identity, term}` span (`term` is the
//! Lease's `leaseTransitions`), and each reconcile inside a
//! `reconcile{controller, namespace, object, reconcile_id}` span that logs `reconciling` and
//! `reconciled` at debug: every line a reconcile writes says which object, and under which
//! leader, so two leaders' work can be told apart afterwards.
//!
//! # Stopping
//!
//! On SIGINT or SIGTERM ([`Manager::start`]) or when the future given to
//! [`Manager::run_until`] completes: controllers stop taking keys, reconciles in flight
//! finish (within the graceful shutdown timeout, 30 s by default), the lease is released if
//! configured, then the cache and the servers stop. A second signal exits the process at
//! once. Losing the lease returns [`ManagerError::LeaderElectionLost`] without waiting: another
//! replica leads now, and nothing of this one may keep writing.

use std::collections::{BTreeSet, HashSet};
use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::{Instrument, Span};

use super::auth::Authorizer;
use super::cache::{Cache, CacheError, CacheOptions, CachedKind, Store};
use super::events::{Recorder, default_instance};
use super::leader_election::{LeaderElectionConfig, LeaderElector};
use super::metrics::Metrics;
use super::rbac::{self, Rule};
use super::server::{self, Checks, MetricsTls, SecureMetricsOptions};
use super::webhook::WebhookServer;
use crate::client::{Client, ClientOptions};
use crate::config::Config;

/// Why the manager could not be built, or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ManagerError {
    /// The client could not be built from the configuration.
    #[error("building the client: {0}")]
    Client(#[source] crate::client::Error),
    /// A cache operation failed: a sync timeout, or a kind cached in two Rust types.
    #[error(transparent)]
    Cache(#[from] CacheError),
    /// Two controllers were given one name.
    #[error("a controller named {0:?} is already registered; names must be unique (use `named`)")]
    DuplicateController(String),
    /// The metrics server's certificate could not be loaded or made.
    #[error("starting the metrics server: {0}")]
    Metrics(#[source] server::Error),
    /// The webhook server could not start: its certificate, or its address.
    #[error("starting the webhook server: {0}")]
    Webhook(#[source] super::webhook::Error),
    /// A server could not bind its address.
    #[error("binding the {what} server to {addr}: {source}")]
    Bind {
        /// Which server: `metrics` or `health probe`.
        what: &'static str,
        /// The address.
        addr: SocketAddr,
        /// The operating system's refusal.
        #[source]
        source: std::io::Error,
    },
    /// Leader election could not start (bad durations) or failed while acquiring.
    #[error("leader election: {0}")]
    LeaderElection(#[source] super::leader_election::Error),
    /// The lease was lost while leading: the process must stop.
    #[error("leader election lost: {0}")]
    LeaderElectionLost(#[source] super::leader_election::Error),
    /// Runnables did not finish within the graceful shutdown timeout.
    #[error("failed waiting for all runnables to end within grace period of {0:?}")]
    ShutdownTimeout(Duration),
    /// A signal handler could not be installed.
    #[error("installing the signal handlers: {0}")]
    Signal(#[source] std::io::Error),
    /// The manager was started twice.
    #[error("the manager has already been started")]
    AlreadyStarted,
    /// The manager was built with [`Manager::offline`], which only collects what its
    /// controllers need, and cannot run.
    #[error("the manager was built offline, to generate manifests; it cannot be started")]
    Offline,
}

/// How a manager runs. The defaults follow controller-runtime's.
#[derive(Clone, Debug)]
pub struct ManagerOptions {
    /// Where `/metrics` is served; `None` (the default) serves no metrics.
    pub metrics_bind_address: Option<SocketAddr>,
    /// Serve `/metrics` over HTTPS, for scrapers the API server authenticates and
    /// authorizes (kubebuilder's `--metrics-secure`); `None` (the default, as
    /// controller-runtime's) serves plain HTTP to anyone who can connect.
    pub metrics_secure: Option<SecureMetricsOptions>,
    /// Where `/healthz` and `/readyz` are served; `None` (the default) serves no probes.
    pub health_probe_bind_address: Option<SocketAddr>,
    /// Leader election, when the controllers must run in one replica only. `None` (the
    /// default): every replica runs them.
    pub leader_election: Option<LeaderElectionConfig>,
    /// What the cache holds.
    pub cache: CacheOptions,
    /// How long stopping waits for runnables (reconciles in flight) to finish. Default 30 s.
    pub graceful_shutdown_timeout: Duration,
    /// The client's options (rate limit, timeouts). Default [`ClientOptions::default`]: 20
    /// QPS with bursts of 30 (controller-runtime v0.24's `GetConfig` sets no client-side
    /// limit; set `client.rate_limit` to `None` for the same).
    pub client: ClientOptions,
}

impl Default for ManagerOptions {
    fn default() -> Self {
        ManagerOptions {
            metrics_bind_address: None,
            metrics_secure: None,
            health_probe_bind_address: None,
            leader_election: None,
            cache: CacheOptions::default(),
            graceful_shutdown_timeout: Duration::from_secs(30),
            client: ClientOptions::default(),
        }
    }
}

type BoxFuture = Pin<Box<dyn Future<Output = ()> + Send>>;
/// A runnable: given a stop signal (true once stopping), runs until it has stopped.
type RunFn = Box<dyn FnOnce(watch::Receiver<bool>) -> BoxFuture + Send>;

struct Runnable {
    name: String,
    run: RunFn,
}

/// Owns the client, the shared cache, the metrics and every controller; see the
/// [module docs](self). Cheap to clone: clones share everything.
#[derive(Clone)]
pub struct Manager {
    shared: Arc<Shared>,
}

/// How long a stopping manager tries to write the event counts its recorders hold.
const EVENT_FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

struct Shared {
    client: Client,
    cache: Cache,
    metrics: Metrics,
    options: ManagerOptions,
    healthz: Checks,
    readyz: Checks,
    /// The addresses the servers bound, once bound.
    bound: watch::Sender<Bound>,
    state: Mutex<State>,
    /// The recorders handed out, flushed once the reconciles have stopped.
    recorders: Mutex<Vec<Recorder>>,
    /// When the configuration's client certificate expires, if it has one: the server
    /// answers an expired one with a bare 401, which the preflight explains with this.
    client_cert_not_after: Option<SystemTime>,
}

/// Where the servers listen, once they do.
#[derive(Clone, Copy, Debug, Default)]
struct Bound {
    metrics: Option<SocketAddr>,
    probes: Option<SocketAddr>,
    webhooks: Option<SocketAddr>,
    /// Set once both have bound (or were not configured).
    done: bool,
}

#[derive(Default)]
struct State {
    /// Built by [`Manager::offline`]: never started.
    offline: bool,
    controller_names: HashSet<String>,
    /// Run while leading (or always, without leader election).
    leader_runnables: Vec<Runnable>,
    /// Run from the start, leader or not.
    runnables: Vec<Runnable>,
    /// The admission webhook server, served from the start, leader or not.
    webhooks: Option<WebhookServer>,
    started: bool,
    /// The RBAC rules of everything registered so far, declared and inferred.
    rbac: BTreeSet<Rule>,
}

impl fmt::Debug for Manager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Manager")
            .field("client", &self.shared.client)
            .field("options", &self.shared.options)
            .finish_non_exhaustive()
    }
}

impl Manager {
    /// A manager for the cluster found as kubectl finds it (`--kubeconfig`-less: the
    /// `KUBECONFIG` files, `~/.kube/config`, or the in-cluster service account).
    ///
    /// # Errors
    ///
    /// [`ManagerError::Client`] if no configuration is found or it makes no client.
    pub async fn new(options: ManagerOptions) -> Result<Manager, ManagerError> {
        let config = tokio::task::spawn_blocking(Config::infer)
            .await
            .map_err(|e| {
                ManagerError::Client(crate::client::Error::Build(format!(
                    "loading the configuration: {e}"
                )))
            })?
            .map_err(|e| ManagerError::Client(e.into()))?;
        Manager::with_config(config, options)
    }

    /// A manager for the cluster `config` describes.
    ///
    /// # Errors
    ///
    /// [`ManagerError::Client`] if the configuration makes no client.
    pub fn with_config(config: Config, options: ManagerOptions) -> Result<Manager, ManagerError> {
        let metrics = Metrics::new();
        let client_cert_not_after = config.identity.as_ref().and_then(|i| i.not_after());
        let mut client_options = options.client.clone();
        client_options.observer = Some(metrics.request_observer());
        let mut client = Client::new(config, client_options).map_err(ManagerError::Client)?;
        if options.cache.read_your_writes {
            // The cache's reads wait for what this client writes.
            client = client.recording_writes(Default::default());
        }
        let mut cache_options = options.cache.clone();
        cache_options
            .informer_metrics
            .get_or_insert_with(|| metrics.informers());
        let cache = Cache::new(client.clone(), cache_options);
        cache.register_metrics(&metrics);
        let healthz = Checks::new();
        let readyz = Checks::new();
        let synced = cache.clone();
        let fresh = "a new set of checks has no names taken";
        healthz.add("ping", server::ping()).expect(fresh);
        readyz
            .add(
                "cache-sync",
                server::check(move || {
                    if synced.has_synced() {
                        Ok(())
                    } else {
                        Err("the caches have not synced yet".to_owned())
                    }
                }),
            )
            .expect(fresh);
        Ok(Manager {
            shared: Arc::new(Shared {
                client,
                cache,
                metrics,
                options,
                healthz,
                readyz,
                bound: watch::Sender::new(Bound::default()),
                state: Mutex::new(State::default()),
                recorders: Mutex::new(Vec::new()),
                client_cert_not_after,
            }),
        })
    }

    /// A manager that never reaches a cluster, for generating manifests where there may be
    /// none: register the controllers on it as the binary does (`setup(&manager)`), then read
    /// what they need with [`rbac_rules`](Self::rbac_rules). Nothing connects: its client
    /// points at `http://offline.invalid`, and [`start`](Self::start) fails with
    /// [`ManagerError::Offline`].
    pub fn offline(options: ManagerOptions) -> Manager {
        let config = Config {
            cluster_url: http::Uri::from_static("http://offline.invalid"),
            default_namespace: "default".to_owned(),
            root_certs: Vec::new(),
            accept_invalid_certs: false,
            tls_server_name: None,
            identity: None,
            auth: crate::config::Auth::None,
            source: "offline (no cluster)".to_owned(),
        };
        let manager = Manager::with_config(config, options)
            .expect("a plain-HTTP configuration without credentials always makes a client");
        manager.shared.state.lock().offline = true;
        manager
    }

    /// The RBAC rules of everything registered so far, sorted: what the controllers
    /// declared ([`Controller::rbac`](super::Controller::rbac)) and what the runtime infers
    /// (list and watch for every cached kind, the event recorders' events, owner
    /// references); see [`rbac`]. Give them to [`rbac::ClusterRole`] for the manager's role.
    pub fn rbac_rules(&self) -> Vec<Rule> {
        self.shared.state.lock().rbac.iter().cloned().collect()
    }

    /// Adds a rule to [`rbac_rules`](Self::rbac_rules): for what the binary does outside any
    /// controller (a runnable's writes, say). A controller's own belong on it:
    /// [`Controller::rbac`](super::Controller::rbac).
    pub fn add_rbac(&self, rule: Rule) {
        self.shared.state.lock().rbac.insert(rule);
    }

    /// The API client: writes go to the API server with it. Its requests are counted in
    /// the manager's `rest_client_*` metrics.
    pub fn client(&self) -> Client {
        self.shared.client.clone()
    }

    /// The shared cache.
    pub fn cache(&self) -> &Cache {
        &self.shared.cache
    }

    /// Typed reads of kind `K` from the shared cache; see [`Store`]. Ask for stores while
    /// setting up, before [`start`](Self::start): the manager waits for their caches to
    /// sync before any controller runs. The cache lists and watches `K`, so
    /// [`rbac_rules`](Self::rbac_rules) grants that (a store taken straight from
    /// [`cache`](Self::cache) is not counted there).
    ///
    /// # Errors
    ///
    /// [`CacheError::Factory`] if the kind is already cached as another Rust type.
    pub fn store<K: CachedKind>(&self) -> Result<Store<K>, CacheError> {
        let store = self.shared.cache.store::<K>()?;
        self.add_rbac(rbac::cache_rule::<K>());
        Ok(store)
    }

    /// The manager's metrics registry, served on `/metrics`.
    pub fn metrics(&self) -> &Metrics {
        &self.shared.metrics
    }

    /// An event recorder reporting as `controller` (e.g. `memcached-controller`), with
    /// `<controller>-<hostname>` as its instance. Series counts it still holds when the
    /// manager stops are written once the reconciles have finished. It creates and patches
    /// `events.k8s.io` events, so [`rbac_rules`](Self::rbac_rules) grants that.
    ///
    /// # Errors
    ///
    /// If `controller` is not a valid reporting controller name.
    pub fn event_recorder(&self, controller: &str) -> Result<Recorder, super::events::Error> {
        let recorder = Recorder::new(self.client(), controller, &default_instance(controller))?;
        self.shared.recorders.lock().push(recorder.clone());
        self.add_rbac(rbac::event_recorder_rule());
        Ok(recorder)
    }

    /// Adds a liveness check served on `/healthz` (a `ping` check is there already).
    ///
    /// # Errors
    ///
    /// If the name is taken, empty or holds a `/`.
    pub fn add_healthz_check(
        &self,
        name: &str,
        check: impl Fn() -> Result<(), String> + Send + Sync + 'static,
    ) -> Result<(), server::Error> {
        self.shared.healthz.add(name, server::check(check))
    }

    /// Adds a readiness check served on `/readyz` (a `cache-sync` check, which passes once
    /// every cache has synced, is there already).
    ///
    /// # Errors
    ///
    /// If the name is taken, empty or holds a `/`.
    pub fn add_readyz_check(
        &self,
        name: &str,
        check: impl Fn() -> Result<(), String> + Send + Sync + 'static,
    ) -> Result<(), server::Error> {
        self.shared.readyz.add(name, server::check(check))
    }

    /// Adds a runnable: `run` is given a stop signal (it turns true when the manager stops)
    /// and must return soon after. With `needs_leader`, it runs only while this replica
    /// leads, like controllers; otherwise from the start.
    pub fn add<F, Fut>(&self, name: &str, needs_leader: bool, run: F)
    where
        F: FnOnce(watch::Receiver<bool>) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let runnable = Runnable {
            name: name.to_owned(),
            run: Box::new(move |stop| Box::pin(run(stop))),
        };
        let mut state = self.shared.state.lock();
        if needs_leader {
            state.leader_runnables.push(runnable);
        } else {
            state.runnables.push(runnable);
        }
    }

    /// The address `/metrics` is served on, once the manager has bound it (useful with port
    /// 0); `None` when no metrics address is configured.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe.
    pub async fn metrics_addr(&self) -> Option<SocketAddr> {
        self.bound().await.metrics
    }

    /// The address the admission webhooks are served on, once bound; see
    /// [`metrics_addr`](Self::metrics_addr).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe.
    pub async fn webhook_addr(&self) -> Option<SocketAddr> {
        self.bound().await.webhooks
    }

    /// Serves `server`'s admission webhooks (over TLS, from its certificate directory) from
    /// the start, whether or not this replica leads, as controller-runtime does. One server
    /// per manager; a second replaces the first.
    pub fn add_webhook_server(&self, server: WebhookServer) {
        self.shared.state.lock().webhooks = Some(server);
    }

    /// The address the probes are served on, once bound; see
    /// [`metrics_addr`](Self::metrics_addr).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe.
    pub async fn probe_addr(&self) -> Option<SocketAddr> {
        self.bound().await.probes
    }

    async fn bound(&self) -> Bound {
        let mut bound = self.shared.bound.subscribe();
        let ready = bound.wait_for(|b| b.done).await.map(|b| *b);
        ready.unwrap_or_default()
    }

    /// When the configuration's client certificate expires, if it has one.
    pub(crate) fn client_cert_not_after(&self) -> Option<SystemTime> {
        self.shared.client_cert_not_after
    }

    pub(crate) fn claim_controller_name(&self, name: &str) -> Result<(), ManagerError> {
        let mut state = self.shared.state.lock();
        if !state.controller_names.insert(name.to_owned()) {
            return Err(ManagerError::DuplicateController(name.to_owned()));
        }
        Ok(())
    }

    pub(crate) fn add_controller(
        &self,
        name: String,
        run: impl FnOnce(watch::Receiver<bool>) -> BoxFuture + Send + 'static,
    ) {
        self.shared.state.lock().leader_runnables.push(Runnable {
            name,
            run: Box::new(run),
        });
    }

    /// Runs everything until SIGINT or SIGTERM, then stops gracefully; a second signal exits
    /// the process at once with status 1.
    ///
    /// # Errors
    ///
    /// As [`run_until`](Self::run_until), and [`ManagerError::Signal`] if the signal
    /// handlers cannot be installed.
    pub async fn start(&self) -> Result<(), ManagerError> {
        let signals = Signals::new().map_err(ManagerError::Signal)?;
        self.run_until(signals.first()).await
    }

    /// Runs everything until `shutdown` completes, then stops gracefully; see the
    /// [module docs](self).
    ///
    /// # Errors
    ///
    /// [`ManagerError::Bind`] if a server cannot bind, [`ManagerError::Cache`] if a cache
    /// does not sync in time, [`ManagerError::LeaderElectionLost`] when the lease is lost,
    /// [`ManagerError::ShutdownTimeout`] if reconciles outlast the grace period.
    pub async fn run_until(
        &self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ManagerError> {
        let (runnables, leader_runnables, webhooks) = {
            let mut state = self.shared.state.lock();
            if state.offline {
                return Err(ManagerError::Offline);
            }
            if std::mem::replace(&mut state.started, true) {
                return Err(ManagerError::AlreadyStarted);
            }
            (
                std::mem::take(&mut state.runnables),
                std::mem::take(&mut state.leader_runnables),
                state.webhooks.take(),
            )
        };
        let options = &self.shared.options;
        let (stop_all, stopping_all) = watch::channel(false);
        let (stop_runnables, stopping_runnables) = watch::channel(false);
        let shutdown = {
            let (tx, rx) = watch::channel(false);
            tokio::spawn(async move {
                shutdown.await;
                let _ = tx.send(true);
            });
            rx
        };
        let mut servers = tokio::task::JoinSet::new();

        // 1. The servers.
        if let Some(addr) = options.metrics_bind_address {
            let tls = match &options.metrics_secure {
                Some(secure) => Some(MetricsTls::load(secure).await.map_err(|e| {
                    self.shared.bound.send_modify(|b| b.done = true);
                    ManagerError::Metrics(e)
                })?),
                None => None,
            };
            let listener = self.bind("metrics", addr).await?;
            let addr = listener.local_addr().unwrap_or(addr);
            self.shared.bound.send_modify(|b| b.metrics = Some(addr));
            tracing::info!(%addr, secure = tls.is_some(), "serving metrics");
            let metrics = self.shared.metrics.clone();
            let stop = stopped(&stopping_all);
            match (tls, &options.metrics_secure) {
                (Some(tls), Some(secure)) => {
                    let authorizer = secure.authorize.then(|| Authorizer::new(self.client()));
                    servers.spawn(server::serve_metrics_secure(
                        listener, metrics, tls, authorizer, stop,
                    ));
                }
                _ => {
                    servers.spawn(server::serve_metrics(listener, metrics, stop));
                }
            }
        }
        if let Some(addr) = options.health_probe_bind_address {
            let listener = self.bind("health probe", addr).await?;
            let addr = listener.local_addr().unwrap_or(addr);
            self.shared.bound.send_modify(|b| b.probes = Some(addr));
            tracing::info!(%addr, "serving health probes");
            servers.spawn(server::serve_probes(
                listener,
                self.shared.healthz.clone(),
                self.shared.readyz.clone(),
                stopped(&stopping_all),
            ));
        }

        if let Some(webhooks) = webhooks {
            let bound = webhooks.bind().await.map_err(|e| {
                self.shared.bound.send_modify(|b| b.done = true);
                ManagerError::Webhook(e)
            })?;
            let addr = bound.local_addr();
            self.shared.bound.send_modify(|b| b.webhooks = Some(addr));
            tracing::info!(%addr, "serving admission webhooks");
            let stop = stopped(&stopping_all);
            servers.spawn(async move {
                bound.serve(stop).await;
                Ok(())
            });
        }
        self.shared.bound.send_modify(|b| b.done = true);

        let result = self
            .run_phases(
                shutdown,
                runnables,
                leader_runnables,
                &stop_runnables,
                stopping_runnables,
                &stopping_all,
            )
            .await;

        // The cache and the servers stop last.
        let _ = stop_all.send(true);
        while servers.join_next().await.is_some() {}
        result
    }

    /// Steps 2 to 4, and stopping the runnables.
    async fn run_phases(
        &self,
        mut shutdown: watch::Receiver<bool>,
        runnables: Vec<Runnable>,
        leader_runnables: Vec<Runnable>,
        stop_runnables: &watch::Sender<bool>,
        stopping_runnables: watch::Receiver<bool>,
        stopping_all: &watch::Receiver<bool>,
    ) -> Result<(), ManagerError> {
        let options = &self.shared.options;
        let mut running = tokio::task::JoinSet::new();
        let spawn = |running: &mut tokio::task::JoinSet<String>, r: Runnable, span: Span| {
            let stop = stopping_runnables.clone();
            running.spawn(
                async move {
                    (r.run)(stop).await;
                    r.name
                }
                .instrument(span),
            );
        };

        // 2. The cache.
        let cache = &self.shared.cache;
        cache.start(stopped(stopping_all));
        tokio::select! {
            synced = cache.wait_for_sync() => synced?,
            () = signalled(&mut shutdown) => return Ok(()),
        }
        tracing::info!("caches synced");

        // 3. Runnables that do not need leadership.
        for r in runnables {
            spawn(&mut running, r, Span::none());
        }

        // 4. Leader election, then the controllers.
        let elector = match &options.leader_election {
            Some(config) => {
                let elector = LeaderElector::new(self.client(), config.clone())
                    .map_err(ManagerError::LeaderElection)?
                    .with_status(self.shared.metrics.leader_status(&config.lease_name));
                Some(Arc::new(elector))
            }
            None => None,
        };
        let mut election = tokio::task::JoinSet::new();
        // The elector stops (releasing the lease, if configured) only after every
        // controller has stopped.
        let (stop_election, stopping_election) = watch::channel(false);
        if let Some(elector) = &elector {
            let mut leading = elector.leading();
            let (running_elector, mut stop) = (elector.clone(), stopping_election.clone());
            election.spawn(async move {
                running_elector
                    .run(async move {
                        let _ = stop.wait_for(|s| *s).await;
                    })
                    .await
            });
            tracing::info!(
                identity = elector.identity(),
                "waiting to become the leader"
            );
            tokio::select! {
                () = signalled(&mut leading) => {}
                outcome = election.join_next() => {
                    return match outcome {
                        Some(Ok(Err(e))) => Err(ManagerError::LeaderElection(e)),
                        _ => Ok(()),
                    };
                }
                () = signalled(&mut shutdown) => {
                    let _ = stop_runnables.send(true);
                    let drained = self.drain(running).await;
                    let _ = stop_election.send(true);
                    while election.join_next().await.is_some() {}
                    return drained;
                }
            }
            tracing::info!(identity = elector.identity(), "became the leader");
        }
        // While leading, everything the controllers log (each reconcile's span among it)
        // carries this leader's identity and term: an audit can tell two leaders apart.
        let leading = match &elector {
            Some(elector) => tracing::info_span!(
                "leading",
                identity = elector.identity(),
                term = elector.term()
            ),
            None => Span::none(),
        };
        for r in leader_runnables {
            spawn(&mut running, r, leading.clone());
        }

        // Run until shutdown or a lost lease.
        tokio::select! {
            () = signalled(&mut shutdown) => {}
            Some(outcome) = election.join_next() => {
                if let Ok(Err(e)) = outcome {
                    // Another replica may lead already: stop at once, without the grace period.
                    let _ = stop_runnables.send(true);
                    running.abort_all();
                    return Err(ManagerError::LeaderElectionLost(e));
                }
            }
        }
        tracing::info!("stopping: waiting for reconciles in flight to finish");
        let _ = stop_runnables.send(true);
        let drained = self.drain(running).await;
        self.flush_events().await;
        let _ = stop_election.send(true);
        while election.join_next().await.is_some() {}
        drained
    }

    /// Binds a server's listener; a failure also ends the wait of
    /// [`metrics_addr`](Self::metrics_addr).
    async fn bind(
        &self,
        what: &'static str,
        addr: SocketAddr,
    ) -> Result<TcpListener, ManagerError> {
        TcpListener::bind(addr).await.map_err(|source| {
            self.shared.bound.send_modify(|b| b.done = true);
            ManagerError::Bind { what, addr, source }
        })
    }

    /// Writes the series counts the recorders still hold, giving up after a few seconds.
    async fn flush_events(&self) {
        let recorders = self.shared.recorders.lock().clone();
        for recorder in recorders {
            let controller = recorder.reporting_controller();
            match tokio::time::timeout(EVENT_FLUSH_TIMEOUT, recorder.flush()).await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => {
                    tracing::warn!(%error, controller, "could not write pending event counts");
                }
                Err(_) => tracing::warn!(
                    controller,
                    "gave up writing pending event counts after {EVENT_FLUSH_TIMEOUT:?}"
                ),
            }
        }
    }

    /// Waits for `running` to finish, within the graceful shutdown timeout.
    async fn drain(&self, mut running: tokio::task::JoinSet<String>) -> Result<(), ManagerError> {
        let timeout = self.shared.options.graceful_shutdown_timeout;
        let all = async {
            while let Some(done) = running.join_next().await {
                if let Ok(name) = done {
                    tracing::debug!(runnable = %name, "stopped");
                }
            }
        };
        match tokio::time::timeout(timeout, all).await {
            Ok(()) => Ok(()),
            Err(_) => {
                running.abort_all();
                Err(ManagerError::ShutdownTimeout(timeout))
            }
        }
    }
}

/// Completes when `flag` turns true (or its sender is gone); holds no borrow of the value.
async fn signalled(flag: &mut watch::Receiver<bool>) {
    let _ = flag.wait_for(|f| *f).await;
}

/// A future that completes when `stopping` turns true (or its sender is gone).
fn stopped(stopping: &watch::Receiver<bool>) -> impl Future<Output = ()> + Send + 'static {
    let mut stopping = stopping.clone();
    async move { signalled(&mut stopping).await }
}

/// SIGINT and SIGTERM: the first starts a graceful stop, the second exits at once.
struct Signals {
    first: tokio::sync::oneshot::Receiver<()>,
}

impl Signals {
    fn new() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        let mut interrupt = signal(SignalKind::interrupt())?;
        let mut terminate = signal(SignalKind::terminate())?;
        let (tx, first) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            tokio::select! {
                _ = interrupt.recv() => {}
                _ = terminate.recv() => {}
            }
            tracing::info!("signal received: stopping gracefully (a second signal exits at once)");
            let _ = tx.send(());
            tokio::select! {
                _ = interrupt.recv() => {}
                _ = terminate.recv() => {}
            }
            tracing::warn!("second signal received: exiting at once");
            std::process::exit(1);
        });
        Ok(Signals { first })
    }

    async fn first(self) {
        let _ = self.first.await;
    }
}
