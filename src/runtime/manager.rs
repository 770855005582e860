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
//! # Registering after the start
//!
//! Controllers [`complete`](super::Controller::complete)d, runnables
//! [`add`](Manager::add)ed and webhook servers added while the manager runs start at once,
//! as controller-runtime's do: a webhook server at once, a runnable that does not need
//! leadership once the caches have synced, a controller or a leader-only runnable at once
//! if this replica leads, else when it comes to lead (and again at each later term). The
//! informers a late controller asks for start at once, and its workers wait for them to
//! sync (within the cache's `sync_timeout`; a cache that cannot sync stops the manager with
//! the error, naming the kind). Once the manager is stopping, anything added fails with [`ManagerError::Stopped`].
//!
//! # Stopping
//!
//! On SIGINT or SIGTERM ([`Manager::start`]) or when the future given to
//! [`Manager::run_until`] completes: controllers stop taking keys,
//! [`stopping`](super::controller::stopping) completes in every reconcile in flight, and
//! those reconciles finish (within the graceful shutdown timeout, 30 s by default; past it
//! they are dropped, [`run_until`](Manager::run_until) returns
//! [`ManagerError::ShutdownTimeout`], and [`start`](Manager::start) logs it and exits the
//! process). The lease is released if configured, then the cache and the servers stop. A
//! timeout of zero does not wait at all, as in controller-runtime: the runnables are told to
//! stop and finish on their own, and the manager returns at once without an error. A second
//! signal exits the process at once. The lease is released only once the controllers have
//! stopped; with a zero timeout they may still run, and the lease is kept (it expires).
//! A runnable that fails (a late controller whose cache does not sync) stops the manager
//! gracefully with its error.
//!
//! # Losing the lease
//!
//! A replica that loses the lease (no renewal within the renew deadline, or another
//! replica took it) stops leading without a restart, by default
//! ([`OnLeaseLost::Compete`]):
//!
//! 1. what needs leadership stops at once: the controllers' workers take no more keys,
//!    [`stopping`](super::controller::stopping) completes, and every reconcile in flight is
//!    dropped at its next `.await`, without the grace period (another replica may lead
//!    soon); the manager waits until none runs. Each controller's queue goes with its term:
//!    while the replica does not lead its handlers queue nothing and keep no deleted
//!    objects' states;
//! 2. the process, its caches (the informers keep watching), the runnables that do not
//!    need leadership and the servers keep running; `/readyz` stays ready and
//!    `leader_election_master_status` reads 0;
//! 3. it competes for the lease again; when it leads again (a new term: the Lease's
//!    `leaseTransitions` is one more), every controller starts afresh on a new queue that
//!    its caches fill as a fresh process's initial lists would (every cached object
//!    through each watch's filters and mapping, at low priority), and every runnable that
//!    needs leadership is called again.
//!
//! Nothing of a term runs after the elector stops leading, at most `renew_deadline` after
//! the last successful renewal was sent, which is `lease_duration - renew_deadline` (5 s
//! by default) before any other replica can lead: see the
//! [elector's guarantee](super::leader_election#the-guarantee). A reconcile blocked outside
//! an `.await` cannot be dropped: reconciles must not block.
//!
//! [`OnLeaseLost::Exit`] keeps controller-runtime's behaviour instead:
//! [`run_until`](Manager::run_until) drops what needs leadership at once, stops the rest,
//! and returns [`ManagerError::LeaderElectionLost`]; the process is expected to exit and be
//! restarted.

use std::collections::{BTreeSet, HashSet};
use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tracing::{Instrument, Span};

use super::auth::Authorizer;
use super::cache::{Cache, CacheError, CacheOptions, CachedKind, Store};
use super::debug::DebugPages;
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
    /// The lease was lost while leading, with [`OnLeaseLost::Exit`]: the process must
    /// stop.
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
    /// Something was added to a manager that is stopping or has stopped.
    #[error("the manager is stopping or has stopped; nothing more can be added to it")]
    Stopped,
    /// A controller was given an empty name (controller-runtime: "must specify Name for
    /// Controller").
    #[error("a controller needs a name: `named` was given an empty one")]
    EmptyControllerName,
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
    /// What losing the lease does: compete again without a restart (the default), or stop
    /// the manager as controller-runtime does. See the [module docs](self#losing-the-lease).
    pub on_lease_lost: OnLeaseLost,
    /// What the cache holds.
    pub cache: CacheOptions,
    /// How long stopping waits for runnables (reconciles in flight) to finish. Default 30 s.
    /// Zero does not wait: the runnables are told to stop and finish on their own, and
    /// stopping returns at once without an error (controller-runtime's zero).
    pub graceful_shutdown_timeout: Duration,
    /// The longest a reconcile may run, for every controller that sets none of its own
    /// ([`Controller::reconcile_timeout`](super::Controller::reconcile_timeout)); past it,
    /// the reconcile is dropped, counted in `controller_runtime_reconcile_timeouts_total`
    /// and retried with backoff. `None` (the default, as controller-runtime's
    /// `ReconciliationTimeout`): no limit.
    pub reconcile_timeout: Option<Duration>,
    /// Serve [`/debug/controllers`](super::debug) (and its JSON) on the metrics server's
    /// address, behind its authorization when secure: a live page of the controllers'
    /// queues, keys, backoff and caches (kubebuilder-style flag `--enable-debug-pages`).
    /// Default false: nothing is recorded.
    pub debug_pages: bool,
    /// How many keys each controller reconciles at once, for every controller that sets
    /// none of its own
    /// ([`Controller::max_concurrent_reconciles`](super::Controller::max_concurrent_reconciles);
    /// controller-runtime's `Controller.MaxConcurrentReconciles`). Default
    /// [`DEFAULT_MAX_CONCURRENT_RECONCILES`], where controller-runtime's is 1: one key is
    /// never reconciled by two workers at once, so more workers change no reconcile's
    /// view of its own object, and a controller that meets many changes at once (a start,
    /// a mass edit) is not held to one API request at a time.
    pub max_concurrent_reconciles: usize,
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
            on_lease_lost: OnLeaseLost::default(),
            cache: CacheOptions::default(),
            graceful_shutdown_timeout: Duration::from_secs(30),
            reconcile_timeout: None,
            debug_pages: false,
            max_concurrent_reconciles: DEFAULT_MAX_CONCURRENT_RECONCILES,
            client: ClientOptions::default(),
        }
    }
}

/// The default of [`ManagerOptions::max_concurrent_reconciles`]: how many keys a controller
/// reconciles at once unless told otherwise.
pub const DEFAULT_MAX_CONCURRENT_RECONCILES: usize = 16;

pub(crate) type BoxFuture = Pin<Box<dyn Future<Output = Result<(), ManagerError>> + Send>>;
/// A runnable: given a stop signal (true once stopping, or, for one that needs leadership,
/// once this replica's term as leader ends), runs until it has stopped. An error stops the
/// manager. One that needs leadership is called again for each term.
type RunFn = Arc<dyn Fn(watch::Receiver<bool>) -> BoxFuture + Send + Sync>;

#[derive(Clone)]
struct Runnable {
    name: String,
    run: RunFn,
}

/// What a replica does when it loses the leader election's lease while it leads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnLeaseLost {
    /// Stop the controllers and the runnables that need leadership at once (reconciles in
    /// flight are dropped), keep the process, its caches and its servers, and compete for
    /// the lease again; on leading again, start them afresh. The default.
    #[default]
    Compete,
    /// Stop the manager: [`Manager::run_until`] returns
    /// [`ManagerError::LeaderElectionLost`] and the process is expected to exit, as
    /// controller-runtime's does (its users restart it, kubernetes-sigs/controller-runtime#1774).
    Exit,
}

/// Something to run: before the start it waits in [`Phase::Setup`]; after, the running
/// manager starts it at once (or when it can: see [`Run::accept`]).
enum Registration {
    /// A runnable or a controller's workers.
    Runnable {
        runnable: Runnable,
        needs_leader: bool,
    },
    /// An admission webhook server (boxed: it is much larger than a runnable).
    Webhooks(Box<WebhookServer>),
}

/// Where the manager is in its life, as registrations see it.
enum Phase {
    /// Not started: registrations wait here, in order.
    Setup(Vec<Registration>),
    /// Running: registrations go to the run loop, which starts them.
    Running(mpsc::UnboundedSender<Registration>),
    /// Stopping or stopped: nothing more is accepted.
    Stopped,
}

impl Default for Phase {
    fn default() -> Self {
        Phase::Setup(Vec::new())
    }
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
    /// The shard set this replica's controllers split their objects with, if any.
    shard: Mutex<Option<super::shard::Shard>>,
    /// When the configuration's client certificate expires, if it has one: the server
    /// answers an expired one with a bare 401, which the preflight explains with this.
    client_cert_not_after: Option<SystemTime>,
    /// The debug pages' recorder, when they are on.
    debug: Option<DebugPages>,
}

/// Where the servers listen, once they do.
#[derive(Clone, Copy, Debug, Default)]
struct Bound {
    metrics: Option<SocketAddr>,
    probes: Option<SocketAddr>,
    /// The first webhook server's address.
    webhooks: Option<SocketAddr>,
    /// Set once the servers given before the start have bound (or were not configured).
    done: bool,
    /// Webhook servers added after the start and not bound yet.
    binding: usize,
}

#[derive(Default)]
struct State {
    /// Built by [`Manager::offline`]: never started.
    offline: bool,
    controller_names: HashSet<String>,
    /// What is registered to run, and whether the manager has started.
    phase: Phase,
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
        let debug = options.debug_pages.then(DebugPages::default);
        if let (Some(debug), Some(provider)) = (&debug, &mut cache_options.informer_metrics) {
            *provider = debug.informer_metrics(provider.clone());
        }
        let cache = Cache::new(client.clone(), cache_options);
        if let Some(debug) = &debug {
            let traced = debug.clone();
            cache.trace_reflectors(Arc::new(move |name, trace| {
                traced.informer(name).reflector(trace);
            }));
            let sized = cache.clone();
            debug.set_informer_stats(Box::new(move || sized.informer_stats()));
        }
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
                shard: Mutex::new(None),
                client_cert_not_after,
                debug,
            }),
        })
    }

    /// A manager that never reaches a cluster, for generating manifests where there may be
    /// none: register the controllers on it as the binary does (`setup(&manager)`), then read
    /// what they need with [`rbac_rules`](Self::rbac_rules). Nothing connects: its client
    /// points at `http://offline.invalid`, and [`start`](Self::start) fails with
    /// [`ManagerError::Offline`].
    pub fn offline(options: ManagerOptions) -> Manager {
        let manager = Manager::with_config(offline_config(), options)
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

    /// The recorder behind [`/debug/controllers`](super::debug), when
    /// [`ManagerOptions::debug_pages`] is on.
    pub fn debug_pages(&self) -> Option<&DebugPages> {
        self.shared.debug.as_ref()
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
    /// leads, like controllers: `run` is called at the start of each term as leader, and
    /// its signal also turns true when the term ends (then the runnable is dropped at once,
    /// see [losing the lease](self#losing-the-lease)). Otherwise it is called once, when
    /// the caches have synced. Added after the start, it starts at once (a leader-only one
    /// when this replica leads).
    ///
    /// # Errors
    ///
    /// [`ManagerError::Stopped`] if the manager is stopping or has stopped.
    pub fn add<F, Fut>(&self, name: &str, needs_leader: bool, run: F) -> Result<(), ManagerError>
    where
        F: Fn(watch::Receiver<bool>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let runnable = Runnable {
            name: name.to_owned(),
            run: Arc::new(move |stop| {
                let run = run(stop);
                Box::pin(async move {
                    run.await;
                    Ok(())
                })
            }),
        };
        self.register(Registration::Runnable {
            runnable,
            needs_leader,
        })
    }

    /// Hands `registration` to the manager: kept for the start, or sent to the running
    /// manager, or refused once it stops.
    fn register(&self, registration: Registration) -> Result<(), ManagerError> {
        let mut state = self.shared.state.lock();
        match &mut state.phase {
            Phase::Setup(pending) => pending.push(registration),
            Phase::Running(late) => {
                let webhooks = matches!(registration, Registration::Webhooks(_));
                if webhooks {
                    // `webhook_addr` waits until it is bound.
                    self.shared.bound.send_modify(|b| b.binding += 1);
                }
                if late.send(registration).is_err() {
                    if webhooks {
                        self.shared.bound.send_modify(|b| b.binding -= 1);
                    }
                    return Err(ManagerError::Stopped);
                }
            }
            Phase::Stopped => return Err(ManagerError::Stopped),
        }
        Ok(())
    }

    /// Fails with [`ManagerError::Stopped`] once the manager is stopping.
    pub(crate) fn accepting(&self) -> Result<(), ManagerError> {
        match self.shared.state.lock().phase {
            Phase::Stopped => Err(ManagerError::Stopped),
            _ => Ok(()),
        }
    }

    /// Shards every controller completed after this call by `shard`'s hash ranges (see
    /// [`shard`](super::shard)), and runs `shard`'s membership (its Lease) while the
    /// manager runs, without leader election.
    ///
    /// # Errors
    ///
    /// [`ManagerError::Stopped`] if the manager is stopping or has stopped.
    pub fn shard(&self, shard: super::shard::Shard) -> Result<(), ManagerError> {
        *self.shared.shard.lock() = Some(shard.clone());
        if let Some(pages) = self.debug_pages() {
            pages.set_shard(shard.clone());
        }
        self.add("shard-membership", false, move |mut stop| {
            let shard = shard.clone();
            async move {
                shard
                    .run(async move {
                        let _ = stop.wait_for(|s| *s).await;
                    })
                    .await
            }
        })
    }

    /// The shard set given to [`shard`](Self::shard), if any.
    pub fn sharding(&self) -> Option<super::shard::Shard> {
        self.shared.shard.lock().clone()
    }

    /// The options the manager was built with.
    pub fn options(&self) -> &ManagerOptions {
        &self.shared.options
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
    /// the start, whether or not this replica leads, as controller-runtime does. Every
    /// server added is served; [`webhook_addr`](Self::webhook_addr) answers the first's
    /// address. Added after the start, it is bound and served at once (a bind that fails
    /// stops the manager with [`ManagerError::Webhook`]).
    ///
    /// # Errors
    ///
    /// [`ManagerError::Stopped`] if the manager is stopping or has stopped.
    pub fn add_webhook_server(&self, server: WebhookServer) -> Result<(), ManagerError> {
        self.register(Registration::Webhooks(Box::new(server)))
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
        let ready = bound
            .wait_for(|b| b.done && b.binding == 0)
            .await
            .map(|b| *b);
        ready.unwrap_or_default()
    }

    /// When the configuration's client certificate expires, if it has one.
    pub(crate) fn client_cert_not_after(&self) -> Option<SystemTime> {
        self.shared.client_cert_not_after
    }

    pub(crate) fn claim_controller_name(&self, name: &str) -> Result<(), ManagerError> {
        if name.is_empty() {
            return Err(ManagerError::EmptyControllerName);
        }
        let mut state = self.shared.state.lock();
        if !state.controller_names.insert(name.to_owned()) {
            return Err(ManagerError::DuplicateController(name.to_owned()));
        }
        Ok(())
    }

    /// Registers a controller's workers: `run` is called at the start of each term as
    /// leader (once, without leader election).
    pub(crate) fn add_controller(
        &self,
        name: String,
        run: impl Fn(watch::Receiver<bool>) -> BoxFuture + Send + Sync + 'static,
    ) -> Result<(), ManagerError> {
        self.register(Registration::Runnable {
            runnable: Runnable {
                name,
                run: Arc::new(run),
            },
            needs_leader: true,
        })
    }

    /// Runs everything until SIGINT or SIGTERM, then stops gracefully. A second signal exits
    /// the process at once with status 1; so does a graceful stop that outlasts the
    /// graceful shutdown timeout, with the error logged (a reconcile stuck outside an
    /// `.await` would otherwise keep the process alive).
    ///
    /// # Errors
    ///
    /// As [`run_until`](Self::run_until) (but for [`ManagerError::ShutdownTimeout`], which
    /// exits), and [`ManagerError::Signal`] if the signal handlers cannot be installed.
    pub async fn start(&self) -> Result<(), ManagerError> {
        let signals = Signals::new().map_err(ManagerError::Signal)?;
        let result = self.run_until(signals.first()).await;
        if let Err(error @ ManagerError::ShutdownTimeout(_)) = &result {
            tracing::error!(%error, "exiting with runnables still running");
            std::process::exit(1);
        }
        result
    }

    /// Runs everything until `shutdown` completes, then stops gracefully; see the
    /// [module docs](self).
    ///
    /// # Errors
    ///
    /// [`ManagerError::Bind`] if a server cannot bind, [`ManagerError::Cache`] if a cache
    /// does not sync in time, [`ManagerError::LeaderElectionLost`] when the lease is lost
    /// with [`OnLeaseLost::Exit`],
    /// [`ManagerError::ShutdownTimeout`] if reconciles outlast the grace period (a nonzero
    /// one), or the error of a runnable that failed.
    pub async fn run_until(
        &self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ManagerError> {
        let (late_tx, mut late) = mpsc::unbounded_channel();
        let pending = {
            let mut state = self.shared.state.lock();
            if state.offline {
                return Err(ManagerError::Offline);
            }
            match std::mem::replace(&mut state.phase, Phase::Running(late_tx)) {
                Phase::Setup(pending) => pending,
                other => {
                    state.phase = other;
                    return Err(ManagerError::AlreadyStarted);
                }
            }
        };
        let shutdown = {
            let (tx, rx) = watch::channel(false);
            tokio::spawn(async move {
                shutdown.await;
                let _ = tx.send(true);
            });
            rx
        };
        let mut run = Run {
            manager: self.clone(),
            servers: JoinSet::new(),
            running: JoinSet::new(),
            leading: JoinSet::new(),
            stop_runnables: watch::Sender::new(false),
            stop_term: watch::Sender::new(false),
            elector: None,
            term: 0,
            stop_all: watch::Sender::new(false),
            election: JoinSet::new(),
            stop_election: watch::Sender::new(false),
            stage: Stage::Syncing,
            unsynced: Vec::new(),
            led: Vec::new(),
        };
        let started = run.serve(pending).await;
        self.shared.bound.send_modify(|b| b.done = true);
        let end = match started {
            Ok(()) => run.run(shutdown, &mut late).await,
            Err(e) => End::Stop(Err(e)),
        };
        // From here on nothing more is accepted; what was sent just before is not started.
        self.shared.state.lock().phase = Phase::Stopped;
        late.close();
        while let Ok(registration) = late.try_recv() {
            run.refuse(registration);
        }
        run.stop(end).await
    }

    /// Binds a server's listener.
    async fn bind(
        &self,
        what: &'static str,
        addr: SocketAddr,
    ) -> Result<TcpListener, ManagerError> {
        TcpListener::bind(addr)
            .await
            .map_err(|source| ManagerError::Bind { what, addr, source })
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
}

// === the run ===

/// A running manager's moving parts, from [`Manager::run_until`] until it returns.
struct Run {
    manager: Manager,
    /// The HTTP servers (metrics, probes, webhooks): they stop last.
    servers: JoinSet<()>,
    /// The runnables that do not need leadership running now, by name.
    running: JoinSet<(String, Result<(), ManagerError>)>,
    /// The controllers and runnables of this term as leader running now, by name.
    leading: JoinSet<(String, Result<(), ManagerError>)>,
    /// Turns true when the runnables are to stop.
    stop_runnables: watch::Sender<bool>,
    /// Turns true when this term as leader ends (or the manager stops): the stop signal of
    /// what runs in `leading`. A new one for each term.
    stop_term: watch::Sender<bool>,
    /// The elector, with leader election.
    elector: Option<Arc<LeaderElector>>,
    /// The lease's term this replica leads in, while it does.
    term: i32,
    /// Turns true when the cache and the servers are to stop.
    stop_all: watch::Sender<bool>,
    /// The leader elector's task, when configured.
    election: JoinSet<Result<(), super::leader_election::Error>>,
    /// Turns true when the elector is to stop (and release the lease, if configured): once
    /// every controller has stopped.
    stop_election: watch::Sender<bool>,
    stage: Stage,
    /// Runnables waiting for the caches to sync.
    unsynced: Vec<Runnable>,
    /// Every runnable that needs leadership: started at each term's start.
    led: Vec<Runnable>,
}

/// How far the start has come; each stage starts what waited for it.
enum Stage {
    /// The caches are syncing: every runnable waits.
    Syncing,
    /// Synced, and waiting to lead: what needs leadership waits.
    Electing,
    /// Leading (or no leader election): everything starts at once, what needs leadership
    /// inside this span.
    Leading(Span),
}

/// How the run loop ended.
enum End {
    /// Stop gracefully, then return this.
    Stop(Result<(), ManagerError>),
    /// The lease was lost: stop at once, without the grace period.
    LeaseLost(super::leader_election::Error),
}

impl Run {
    /// Step 1: the servers, then what was registered before the start (webhook servers are
    /// served now; runnables wait for their stage).
    async fn serve(&mut self, pending: Vec<Registration>) -> Result<(), ManagerError> {
        let shared = self.manager.shared.clone();
        let options = &shared.options;
        if let Some(addr) = options.metrics_bind_address {
            let tls = match &options.metrics_secure {
                Some(secure) => Some(
                    MetricsTls::load(secure)
                        .await
                        .map_err(ManagerError::Metrics)?,
                ),
                None => None,
            };
            let listener = self.manager.bind("metrics", addr).await?;
            let addr = listener.local_addr().unwrap_or(addr);
            shared.bound.send_modify(|b| b.metrics = Some(addr));
            tracing::info!(%addr, secure = tls.is_some(), "serving metrics");
            if shared.debug.is_some() {
                let scheme = if tls.is_some() { "https" } else { "http" };
                let page = format!("{scheme}://{addr}{}", super::debug::PAGE_PATH);
                tracing::info!(%page, "serving the debug pages");
            }
            let metrics = shared.metrics.clone();
            let debug = shared.debug.clone();
            let stop = self.stopped_all();
            match (tls, &options.metrics_secure) {
                (Some(tls), Some(secure)) => {
                    let authorizer = secure
                        .authorize
                        .then(|| Authorizer::new(self.manager.client()));
                    let serve = server::serve_metrics_secure_with(
                        listener, metrics, debug, tls, authorizer, stop,
                    );
                    self.servers.spawn(ignore(serve));
                }
                _ => {
                    self.servers.spawn(ignore(server::serve_metrics_with(
                        listener, metrics, debug, stop,
                    )));
                }
            }
        }
        if let Some(addr) = options.health_probe_bind_address {
            let listener = self.manager.bind("health probe", addr).await?;
            let addr = listener.local_addr().unwrap_or(addr);
            shared.bound.send_modify(|b| b.probes = Some(addr));
            tracing::info!(%addr, "serving health probes");
            self.servers.spawn(ignore(server::serve_probes(
                listener,
                shared.healthz.clone(),
                shared.readyz.clone(),
                self.stopped_all(),
            )));
        }
        for registration in pending {
            self.accept(registration, false).await?;
        }
        Ok(())
    }

    /// Steps 2 to 4, and whatever is registered meanwhile, until shutdown, a lost lease or
    /// a failure.
    async fn run(
        &mut self,
        mut shutdown: watch::Receiver<bool>,
        late: &mut mpsc::UnboundedReceiver<Registration>,
    ) -> End {
        let shared = self.manager.shared.clone();
        // 2. The cache.
        let cache = &shared.cache;
        cache.start(self.stopped_all());
        let synced = cache.wait_for_sync();
        tokio::pin!(synced);
        let elector = match &shared.options.leader_election {
            Some(config) => match LeaderElector::new(self.manager.client(), config.clone()) {
                Ok(elector) => {
                    let status = shared.metrics.leader_status(&config.lease_name);
                    let elector = Arc::new(elector.with_status(status));
                    if let Some(debug) = &shared.debug {
                        debug.set_leader(elector.clone());
                    }
                    Some(elector)
                }
                Err(e) => return End::Stop(Err(ManagerError::LeaderElection(e))),
            },
            None => None,
        };
        self.elector = elector.clone();
        let mut leading = match &elector {
            Some(elector) => elector.leading(),
            None => watch::channel(true).1,
        };
        loop {
            let electing = matches!(self.stage, Stage::Electing);
            tokio::select! {
                () = signalled(&mut shutdown) => return End::Stop(Ok(())),
                outcome = &mut synced, if matches!(self.stage, Stage::Syncing) => {
                    if let Err(e) = outcome {
                        return End::Stop(Err(e.into()));
                    }
                    tracing::info!("caches synced");
                    // 3. Runnables that do not need leadership.
                    self.stage = Stage::Electing;
                    for runnable in std::mem::take(&mut self.unsynced) {
                        self.spawn(runnable);
                    }
                    // 4. Leader election, when configured.
                    self.campaign();
                }
                () = signalled(&mut leading), if electing => self.start_term(),
                Some(outcome) = self.election.join_next() => match outcome {
                    Ok(Err(super::leader_election::Error::Lost { .. }))
                        if shared.options.on_lease_lost == OnLeaseLost::Compete =>
                    {
                        // A term so short that it never started has nothing to stop.
                        if matches!(self.stage, Stage::Leading(_)) {
                            self.end_term().await;
                        }
                        self.campaign();
                    }
                    Ok(Err(e)) if matches!(self.stage, Stage::Leading(_)) => {
                        return End::LeaseLost(e);
                    }
                    Ok(Err(e)) => return End::Stop(Err(ManagerError::LeaderElection(e))),
                    _ => {}
                },
                Some(registration) = late.recv() => {
                    if let Err(e) = self.accept(registration, true).await {
                        return End::Stop(Err(e));
                    }
                }
                Some(done) = self.running.join_next() => {
                    if let Err(error) = returned(done) {
                        return End::Stop(Err(error));
                    }
                }
                Some(done) = self.leading.join_next() => {
                    if let Err(error) = returned(done) {
                        return End::Stop(Err(error));
                    }
                }
            }
        }
    }

    /// Step 4: competes for the lease, when leader election is configured (again after a
    /// term ended).
    fn campaign(&mut self) {
        if let Some(elector) = &self.elector {
            let running = elector.clone();
            let mut stop = self.stop_election.subscribe();
            self.election
                .spawn(async move { running.run(async move { signalled(&mut stop).await }).await });
            let identity = elector.identity();
            tracing::info!(identity, "waiting to become the leader");
        }
    }

    /// This replica leads (or there is no leader election): starts every runnable that
    /// needs leadership, with a fresh stop signal, in a span naming the term.
    fn start_term(&mut self) {
        // While leading, everything the controllers log (each reconcile's span among it)
        // carries this leader's identity and term.
        let span = match &self.elector {
            Some(elector) => {
                let (identity, term) = (elector.identity(), elector.term());
                self.term = term;
                tracing::info!(identity, term, "became the leader");
                tracing::info_span!("leading", identity, term)
            }
            None => Span::none(),
        };
        self.stop_term = watch::Sender::new(false);
        self.stage = Stage::Leading(span);
        for runnable in self.led.clone() {
            self.spawn_leading(runnable);
        }
    }

    /// The lease is lost: drops every runnable of the term at once (each reconcile in
    /// flight is dropped at its next `.await`) and waits until none runs, then waits to
    /// lead again. The caches and what does not need leadership keep running.
    async fn end_term(&mut self) {
        let identity = match &self.elector {
            Some(elector) => elector.identity().to_owned(),
            None => String::new(),
        };
        let term = self.term;
        let _ = self.stop_term.send(true);
        self.leading.abort_all();
        let mut runnables = 0usize;
        while let Some(done) = self.leading.join_next().await {
            runnables += 1;
            match done {
                Err(e) if e.is_cancelled() => {}
                Err(error) => tracing::error!(%error, "a runnable panicked"),
                Ok((name, Err(error))) => tracing::error!(runnable = %name, %error, "failed"),
                Ok(_) => {}
            }
        }
        self.stage = Stage::Electing;
        tracing::warn!(
            identity,
            term,
            runnables,
            "lost the lease: stopped the controllers, competing again"
        );
    }

    /// Starts `registration` now if its stage has come, or keeps it for its stage.
    async fn accept(&mut self, registration: Registration, late: bool) -> Result<(), ManagerError> {
        match registration {
            Registration::Webhooks(webhooks) => {
                let bound = webhooks.bind().await;
                let shared = &self.manager.shared;
                let bound = bound.map_err(ManagerError::Webhook);
                let addr = bound.as_ref().ok().map(|b| b.local_addr());
                shared.bound.send_modify(|b| {
                    b.webhooks = b.webhooks.or(addr);
                    b.binding -= usize::from(late);
                });
                let bound = bound?;
                tracing::info!(addr = %bound.local_addr(), "serving admission webhooks");
                let stop = self.stopped_all();
                self.servers.spawn(async move { bound.serve(stop).await });
            }
            Registration::Runnable {
                runnable,
                needs_leader,
            } => match (&self.stage, needs_leader) {
                (Stage::Leading(_), true) => {
                    self.led.push(runnable.clone());
                    self.spawn_leading(runnable);
                }
                (_, true) => self.led.push(runnable),
                (Stage::Syncing, false) => self.unsynced.push(runnable),
                (_, false) => self.spawn(runnable),
            },
        }
        Ok(())
    }

    /// Logs a registration that came as the manager began to stop: it is not started.
    fn refuse(&mut self, registration: Registration) {
        match registration {
            Registration::Webhooks(_) => {
                self.manager.shared.bound.send_modify(|b| b.binding -= 1);
                tracing::warn!("the manager is stopping: a webhook server added now is not served");
            }
            Registration::Runnable { runnable, .. } => tracing::warn!(
                runnable = %runnable.name,
                "the manager is stopping: a runnable added now is not started"
            ),
        }
    }

    /// Starts a runnable that does not need leadership.
    fn spawn(&mut self, runnable: Runnable) {
        let stop = self.stop_runnables.subscribe();
        self.running.spawn(async move {
            let result = (runnable.run)(stop).await;
            (runnable.name, result)
        });
    }

    /// Starts a runnable that needs leadership, for this term, in the term's span.
    fn spawn_leading(&mut self, runnable: Runnable) {
        let Stage::Leading(span) = &self.stage else {
            return;
        };
        let stop = self.stop_term.subscribe();
        self.leading.spawn(
            async move {
                let result = (runnable.run)(stop).await;
                (runnable.name, result)
            }
            .instrument(span.clone()),
        );
    }

    /// A future that completes when the cache and the servers are to stop.
    fn stopped_all(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut stopping = self.stop_all.subscribe();
        async move { signalled(&mut stopping).await }
    }

    /// Stops everything: the runnables (within the grace period, or at once when the lease
    /// is lost), the lease, then the cache and the servers.
    async fn stop(mut self, end: End) -> Result<(), ManagerError> {
        let result = match end {
            End::LeaseLost(e) => {
                // Another replica may lead already: stop at once, without the grace period.
                let _ = self.stop_runnables.send(true);
                let _ = self.stop_term.send(true);
                self.running.abort_all();
                self.leading.abort_all();
                Err(ManagerError::LeaderElectionLost(e))
            }
            End::Stop(result) => {
                if !self.running.is_empty() || !self.leading.is_empty() {
                    tracing::info!("stopping: waiting for reconciles in flight to finish");
                }
                let _ = self.stop_runnables.send(true);
                let _ = self.stop_term.send(true);
                let drained = self.drain().await;
                // The lease is released (if configured) once the controllers have stopped,
                // before the events are flushed, so that a standby takes over at once. Past
                // the grace period a reconcile stuck outside an `.await` may still run: the
                // lease is kept then, and expires.
                if let (Err(_), Some(elector)) = (&drained, &self.elector) {
                    elector.keep_lease();
                }
                let _ = self.stop_election.send(true);
                while self.election.join_next().await.is_some() {}
                if !self
                    .manager
                    .shared
                    .options
                    .graceful_shutdown_timeout
                    .is_zero()
                {
                    self.manager.flush_events().await;
                }
                result.and(drained)
            }
        };
        let _ = self.stop_all.send(true);
        if self
            .manager
            .shared
            .options
            .graceful_shutdown_timeout
            .is_zero()
        {
            self.servers.detach_all();
        }
        while self.servers.join_next().await.is_some() {}
        result
    }

    /// Waits for the runnables to finish, within the graceful shutdown timeout: past it,
    /// they are dropped. A zero timeout waits for nothing: they finish on their own.
    async fn drain(&mut self) -> Result<(), ManagerError> {
        let timeout = self.manager.shared.options.graceful_shutdown_timeout;
        if timeout.is_zero() {
            if !self.running.is_empty() || !self.leading.is_empty() {
                tracing::info!("graceful shutdown timeout is zero: not waiting for runnables");
                // They may still write: the lease is not released, it expires.
                if let Some(elector) = &self.elector {
                    elector.keep_lease();
                }
            }
            self.running.detach_all();
            self.leading.detach_all();
            return Ok(());
        }
        let all = async {
            for set in [&mut self.running, &mut self.leading] {
                while let Some(done) = set.join_next().await {
                    match done {
                        Ok((name, Ok(()))) => tracing::debug!(runnable = %name, "stopped"),
                        Ok((name, Err(error))) => {
                            tracing::error!(runnable = %name, %error, "failed");
                        }
                        Err(error) => tracing::error!(%error, "a runnable panicked"),
                    }
                }
            }
        };
        match tokio::time::timeout(timeout, all).await {
            Ok(()) => Ok(()),
            Err(_) => {
                tracing::error!(
                    still_running = self.running.len() + self.leading.len(),
                    "graceful shutdown timed out after {timeout:?}: dropping what still runs"
                );
                self.running.abort_all();
                self.leading.abort_all();
                Err(ManagerError::ShutdownTimeout(timeout))
            }
        }
    }
}

/// Logs how a runnable returned while the manager runs; its error, to stop the manager.
fn returned(
    done: Result<(String, Result<(), ManagerError>), tokio::task::JoinError>,
) -> Result<(), ManagerError> {
    match done {
        Ok((name, Ok(()))) => tracing::debug!(runnable = %name, "returned"),
        Ok((name, Err(error))) => {
            tracing::error!(runnable = %name, %error, "failed; stopping the manager");
            return Err(error);
        }
        Err(e) => tracing::error!(error = %e, "a runnable panicked"),
    }
    Ok(())
}

/// A server's future, its `Ok(())` dropped: the servers log their own failures, per
/// connection, and return only once stopped.
async fn ignore<E>(serve: impl Future<Output = Result<(), E>>) {
    let _ = serve.await;
}

/// A configuration that reaches no cluster: plain HTTP to a name that does not resolve.
fn offline_config() -> Config {
    Config {
        cluster_url: http::Uri::from_static("http://offline.invalid"),
        default_namespace: "default".to_owned(),
        root_certs: Vec::new(),
        accept_invalid_certs: false,
        tls_server_name: None,
        identity: None,
        auth: crate::config::Auth::None,
        source: "offline (no cluster)".to_owned(),
    }
}

/// Completes when `flag` turns true (or its sender is gone); holds no borrow of the value.
async fn signalled(flag: &mut watch::Receiver<bool>) {
    let _ = flag.wait_for(|f| *f).await;
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

#[cfg(test)]
mod tests {
    //! The manager's life on a cache with nothing to list: registering after the start and
    //! after the stop, the graceful shutdown timeout (zero and past), failing runnables and
    //! controller names.

    use std::sync::atomic::{AtomicUsize, Ordering};

    use k8s_openapi::api::core::v1::ConfigMap;
    use tokio::sync::{Semaphore, oneshot};

    use super::*;
    use crate::runtime::{Action, Controller, ReconcileError};

    /// A manager that caches nothing, so it never reaches a cluster.
    fn manager(graceful_shutdown_timeout: Duration) -> Manager {
        let options = ManagerOptions {
            graceful_shutdown_timeout,
            ..ManagerOptions::default()
        };
        Manager::with_config(offline_config(), options).unwrap()
    }

    /// Runs `manager` until the returned sender sends.
    fn run(
        manager: &Manager,
    ) -> (
        oneshot::Sender<()>,
        tokio::task::JoinHandle<Result<(), ManagerError>>,
    ) {
        let (stop, stopped) = oneshot::channel::<()>();
        let manager = manager.clone();
        let task = tokio::spawn(async move {
            manager
                .run_until(async move {
                    let _ = stopped.await;
                })
                .await
        });
        (stop, task)
    }

    async fn reconcile(_: Arc<ConfigMap>, _: Arc<()>) -> Result<Action, ReconcileError> {
        Ok(Action::done())
    }

    /// Counts a drop.
    struct OnDrop(Arc<AtomicUsize>);

    impl Drop for OnDrop {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[tokio::test]
    async fn runnables_added_after_the_start_run_at_once_and_stop_with_the_manager() {
        let manager = manager(Duration::from_secs(30));
        let (tx, mut rx) = mpsc::unbounded_channel::<String>();
        let early = tx.clone();
        manager
            .add("early", false, move |_| {
                let early = early.clone();
                async move {
                    early.send("early".to_owned()).unwrap();
                }
            })
            .unwrap();
        let (stop, task) = run(&manager);
        assert_eq!(rx.recv().await.as_deref(), Some("early"));
        for (name, needs_leader) in [("late", false), ("late-leader", true)] {
            let tx = tx.clone();
            manager
                .add(name, needs_leader, move |mut stop| {
                    let tx = tx.clone();
                    async move {
                        tx.send(name.to_owned()).unwrap();
                        let _ = stop.wait_for(|s| *s).await;
                        tx.send(format!("{name} stopped")).unwrap();
                    }
                })
                .unwrap();
            assert_eq!(rx.recv().await.as_deref(), Some(name));
        }
        stop.send(()).unwrap();
        task.await.unwrap().unwrap();
        let mut stopped = vec![rx.recv().await.unwrap(), rx.recv().await.unwrap()];
        stopped.sort();
        assert_eq!(stopped, ["late stopped", "late-leader stopped"]);
    }

    #[tokio::test]
    async fn a_webhook_server_added_after_the_start_is_bound_at_once() {
        let dir = std::env::temp_dir().join(format!("late-webhooks-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        let cert = params.self_signed(&key).unwrap();
        let pem = |label: &str, der: &[u8]| {
            use base64::Engine as _;
            let text = base64::engine::general_purpose::STANDARD.encode(der);
            let lines: Vec<&str> = text
                .as_bytes()
                .chunks(64)
                .map(|l| std::str::from_utf8(l).unwrap())
                .collect();
            format!(
                "-----BEGIN {label}-----\n{}\n-----END {label}-----\n",
                lines.join("\n")
            )
        };
        std::fs::write(dir.join("tls.crt"), pem("CERTIFICATE", cert.der())).unwrap();
        let key_pem = pem("PRIVATE KEY", &key.serialize_der());
        std::fs::write(dir.join("tls.key"), key_pem).unwrap();
        let manager = manager(Duration::from_secs(30));
        let (stop, task) = run(&manager);
        assert_eq!(
            manager.webhook_addr().await,
            None,
            "started without webhooks"
        );
        let options = crate::runtime::webhook::WebhookOptions {
            bind_address: "127.0.0.1:0".parse().unwrap(),
            cert_dir: dir.clone(),
            ..Default::default()
        };
        manager
            .add_webhook_server(WebhookServer::new(options))
            .unwrap();
        let addr = manager
            .webhook_addr()
            .await
            .expect("the late server is bound");
        tokio::net::TcpStream::connect(addr).await.unwrap();
        stop.send(()).unwrap();
        task.await.unwrap().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn adding_to_a_stopped_manager_fails_clearly() {
        let manager = manager(Duration::from_secs(30));
        let (stop, task) = run(&manager);
        stop.send(()).unwrap();
        task.await.unwrap().unwrap();
        let added = manager.add("late", false, |_| async {});
        assert!(matches!(added, Err(ManagerError::Stopped)), "{added:?}");
        let completed = Controller::<ConfigMap>::new(&manager).complete(reconcile, Arc::new(()));
        let error = completed.unwrap_err();
        assert!(matches!(error, ManagerError::Stopped), "{error:?}");
        assert_eq!(
            error.to_string(),
            "the manager is stopping or has stopped; nothing more can be added to it"
        );
        let again = manager.run_until(async {}).await;
        assert!(
            matches!(again, Err(ManagerError::AlreadyStarted)),
            "{again:?}"
        );
    }

    #[tokio::test]
    async fn a_zero_grace_period_returns_at_once_and_lets_runnables_finish_on_their_own() {
        let manager = manager(Duration::ZERO);
        let gate = Arc::new(Semaphore::new(0));
        let (began, has_begun) = oneshot::channel();
        let (finished, has_finished) = oneshot::channel();
        let held = gate.clone();
        let once = Mutex::new(Some((began, finished)));
        manager
            .add("slow", true, move |mut stop| {
                let (began, finished) = once.lock().take().expect("called once");
                let held = held.clone();
                async move {
                    began.send(()).unwrap();
                    let _ = stop.wait_for(|s| *s).await;
                    held.acquire().await.unwrap().forget();
                    finished.send(()).unwrap();
                }
            })
            .unwrap();
        let (stop, task) = run(&manager);
        has_begun.await.unwrap();
        stop.send(()).unwrap();
        // The runnable still waits for the gate: the manager did not wait for it.
        task.await.unwrap().unwrap();
        gate.add_permits(1);
        has_finished
            .await
            .expect("the runnable finished on its own");
    }

    #[tokio::test(start_paused = true)]
    async fn past_a_nonzero_grace_period_runnables_are_dropped_and_the_timeout_returned() {
        let manager = manager(Duration::from_secs(5));
        let dropped = Arc::new(AtomicUsize::new(0));
        let (began, has_begun) = oneshot::channel();
        let once = Mutex::new(Some((OnDrop(dropped.clone()), began)));
        manager
            .add("stuck", false, move |_| {
                let (guard, began) = once.lock().take().expect("called once");
                async move {
                    let _guard = guard;
                    began.send(()).unwrap();
                    std::future::pending::<()>().await;
                }
            })
            .unwrap();
        let (stop, task) = run(&manager);
        has_begun.await.unwrap();
        stop.send(()).unwrap();
        let result = task.await.unwrap();
        assert!(
            matches!(result, Err(ManagerError::ShutdownTimeout(t)) if t == Duration::from_secs(5)),
            "{result:?}"
        );
        assert_eq!(
            dropped.load(Ordering::SeqCst),
            1,
            "the stuck runnable was dropped"
        );
    }

    #[tokio::test]
    async fn a_failing_runnable_stops_the_manager_with_its_error_after_stopping_the_rest() {
        let manager = manager(Duration::from_secs(30));
        let (stopped, has_stopped) = oneshot::channel();
        let once = Mutex::new(Some(stopped));
        manager
            .add("other", false, move |mut stop| {
                let stopped = once.lock().take().expect("called once");
                async move {
                    let _ = stop.wait_for(|s| *s).await;
                    stopped.send(()).unwrap();
                }
            })
            .unwrap();
        let (stop, task) = run(&manager);
        manager
            .add_controller("bad".to_owned(), |_| {
                Box::pin(async { Err(ManagerError::EmptyControllerName) })
            })
            .unwrap();
        let result = task.await.unwrap();
        assert!(
            matches!(result, Err(ManagerError::EmptyControllerName)),
            "{result:?}"
        );
        has_stopped
            .await
            .expect("the other runnable was stopped gracefully");
        drop(stop);
    }

    #[tokio::test]
    async fn controller_names_must_be_given_and_unique() {
        let manager = manager(Duration::from_secs(30));
        let empty = Controller::<ConfigMap>::new(&manager)
            .named("")
            .complete(reconcile, Arc::new(()));
        let error = empty.unwrap_err();
        assert!(
            matches!(error, ManagerError::EmptyControllerName),
            "{error:?}"
        );
        assert_eq!(
            error.to_string(),
            "a controller needs a name: `named` was given an empty one"
        );
        Controller::<ConfigMap>::new(&manager)
            .complete(reconcile, Arc::new(()))
            .unwrap();
        let twice = Controller::<ConfigMap>::new(&manager).complete(reconcile, Arc::new(()));
        assert!(
            matches!(&twice, Err(ManagerError::DuplicateController(name)) if name == "configmap"),
            "{twice:?}"
        );
    }
}
