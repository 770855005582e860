//! The informer factory: one shared informer per kind and namespace, built on the client,
//! started together and waited for together (client-go's `SharedInformerFactory`).
//!
//! Every part of a program that asks the factory for the informer of a kind gets the same
//! [`SharedIndexInformer`]: one LIST and one WATCH per kind and namespace however many
//! controllers look at it, and one cache they all read. Informers are keyed by the kind's
//! group, version and kind, not by Rust type: a kind is cached in one representation, and
//! asking for it in another ([`Raw`](crate::client::Raw) after the typed form, say) is refused
//! ([`FactoryError`]) rather than opening a second watch.
//!
//! ```no_run
//! use std::time::Duration;
//! use controller_runtime::client::Client;
//! use controller_runtime::informers::InformerFactory;
//! use informer::HandlerFns;
//! use k8s_openapi::api::core::v1::{ConfigMap, Node};
//!
//! # async fn run() -> controller_runtime::client::Result<()> {
//! let client = Client::try_default().await?;
//! let factory = InformerFactory::new(client).resync(Duration::from_secs(600));
//! let configmaps = factory.informer::<ConfigMap>(); // every namespace
//! let nodes = factory.informer::<Node>(); // cluster-scoped
//! configmaps
//!     .add_event_handler(HandlerFns::<ConfigMap>::new().with_add(|cm, _| {
//!         println!("{:?}", cm.metadata.name);
//!     }))
//!     .expect("the informer has not stopped");
//!
//! let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
//! factory.start(async { let _ = stopped.await; });
//! assert!(factory.wait_for_cache_sync().await);
//! println!("{} nodes", nodes.lister().list().len());
//! # let _ = stop;
//! # Ok(())
//! # }
//! ```

use std::any::Any;
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use informer::{
    BackoffOptions, FifoKind, InformerOptions, Object, ReflectorOptions, SharedIndexInformer,
};
use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};
use parking_lot::Mutex;
use serde::Serialize;
use tokio::sync::watch;

use crate::client::{
    Api, ApiListerWatcher, ApiResource, Client, FilterSlot, Selector, WatchObject,
};

/// The scope of a kind, as the factory needs it: how to reach its objects.
///
/// Implemented for `k8s_openapi`'s two scopes; it lets one
/// [`InformerFactory::informer`] serve namespaced and cluster-scoped kinds alike.
pub trait InformerScope: Sized + 'static {
    /// Whether objects of this scope live in namespaces.
    const NAMESPACED: bool;

    /// The API for kind `K`, in `namespace` (ignored for cluster-scoped kinds) or across all
    /// namespaces.
    fn api<K>(client: Client, namespace: Option<&str>) -> Api<K>
    where
        K: k8s_openapi::Resource<Scope = Self>;
}

impl InformerScope for NamespaceResourceScope {
    const NAMESPACED: bool = true;

    fn api<K>(client: Client, namespace: Option<&str>) -> Api<K>
    where
        K: k8s_openapi::Resource<Scope = Self>,
    {
        match namespace {
            Some(ns) => Api::namespaced(client, ns),
            None => Api::all(client),
        }
    }
}

impl InformerScope for ClusterResourceScope {
    const NAMESPACED: bool = false;

    fn api<K>(client: Client, _namespace: Option<&str>) -> Api<K>
    where
        K: k8s_openapi::Resource<Scope = Self>,
    {
        Api::cluster(client)
    }
}

/// What a kind needs to be served by the factory: a `k8s_openapi` resource (built-in or
/// custom) that the client can decode.
pub trait FactoryResource:
    k8s_openapi::Resource<Scope: InformerScope> + Object + WatchObject + Serialize
{
}

impl<K> FactoryResource for K where
    K: k8s_openapi::Resource<Scope: InformerScope> + Object + WatchObject + Serialize
{
}

type BoxFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// An informer of any kind, as the factory drives it.
trait Runnable: Send + Sync {
    fn run(self: Arc<Self>, shutdown: BoxFuture) -> BoxFuture;
    fn wait_synced(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
    fn has_synced(&self) -> bool;
}

impl<K: Object> Runnable for SharedIndexInformer<K> {
    fn run(self: Arc<Self>, shutdown: BoxFuture) -> BoxFuture {
        Box::pin(async move { SharedIndexInformer::run(&self, shutdown).await })
    }

    fn wait_synced(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(SharedIndexInformer::wait_synced(self))
    }

    fn has_synced(&self) -> bool {
        SharedIndexInformer::has_synced(self)
    }
}

/// One informer the factory made.
struct Entry {
    /// The `Arc<SharedIndexInformer<K>>`, to hand out again.
    typed: Arc<dyn Any + Send + Sync>,
    /// `K`'s name, for the error when another representation of the kind is asked for.
    type_name: &'static str,
    runnable: Arc<dyn Runnable>,
    /// The [`FilterSlot<K>`] its lister-watcher reads.
    filter: Arc<dyn Any + Send + Sync>,
    /// Set once started: turns true when that start's shutdown completes.
    stopping: Option<watch::Receiver<bool>>,
}

/// Which informer: the kind, by group, version and kind, and the namespace it watches
/// (`None`: all, or a cluster-scoped kind). Not the Rust type: `Deployment` and
/// `Raw<Deployment>` are one kind, with one watch and one cache.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct InformerKey {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    namespace: Option<String>,
}

impl InformerKey {
    fn of<K: k8s_openapi::Resource>(namespace: Option<String>) -> Self {
        InformerKey {
            group: K::GROUP,
            version: K::VERSION,
            kind: K::KIND,
            namespace,
        }
    }
}

impl fmt::Display for InformerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.group {
            "" => write!(f, "{}/{}", self.version, self.kind)?,
            group => write!(f, "{group}/{}/{}", self.version, self.kind)?,
        }
        match &self.namespace {
            Some(ns) => write!(f, " in namespace {ns}"),
            None => Ok(()),
        }
    }
}

/// Why the factory refused an informer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FactoryError {
    /// The kind is already cached in another Rust type. One cache holds one representation
    /// of a kind; ask for the same type everywhere (the runtime's cache always uses
    /// [`Raw`](crate::client::Raw) and serves typed reads from it).
    #[error(
        "kind {kind} is already cached as {cached}, not {asked}: one cache holds one representation per kind"
    )]
    Representation {
        /// The kind and scope, e.g. `apps/v1/Deployment in namespace web`.
        kind: String,
        /// The Rust type the factory caches it as.
        cached: &'static str,
        /// The Rust type asked for.
        asked: &'static str,
    },
}

/// Makes and runs shared informers: one per kind and namespace, however often it is asked
/// (client-go's `SharedInformerFactory`). See the [module documentation](self).
pub struct InformerFactory {
    client: Client,
    namespace: Option<String>,
    resync: Duration,
    watch_list: bool,
    backoff: BackoffOptions,
    fifo: FifoKind,
    metrics: Option<Arc<dyn informer::metrics::MetricsProvider>>,
    /// Selectors by (group, kind).
    selectors: HashMap<(&'static str, &'static str), Selector>,
    state: Mutex<FactoryState>,
    /// How many started informers have not returned yet.
    running: Arc<watch::Sender<usize>>,
}

#[derive(Default)]
struct FactoryState {
    informers: HashMap<InformerKey, Entry>,
}

impl fmt::Debug for InformerFactory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InformerFactory")
            .field("namespace", &self.namespace)
            .field("resync", &self.resync)
            .field("informers", &self.state.lock().informers.len())
            .finish_non_exhaustive()
    }
}

impl InformerFactory {
    /// A factory whose informers watch every namespace and never resync.
    pub fn new(client: Client) -> Self {
        InformerFactory {
            client,
            namespace: None,
            resync: Duration::ZERO,
            watch_list: true,
            backoff: BackoffOptions::default(),
            fifo: FifoKind::default(),
            metrics: None,
            selectors: HashMap::new(),
            state: Mutex::default(),
            running: Arc::new(watch::Sender::new(0)),
        }
    }

    /// Namespaced kinds are watched in `namespace` only (client-go's `WithNamespace`).
    /// Cluster-scoped kinds are not affected.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// The default resync period of the informers made from now on ([`Duration::ZERO`],
    /// the default: never); see [`InformerOptions::resync_period`].
    pub fn resync(mut self, period: Duration) -> Self {
        self.resync = period;
        self
    }

    /// Whether informers list with a streaming list (WatchList, the default) or a classic
    /// paged LIST; see [`ReflectorOptions::watch_list`].
    pub fn watch_list(mut self, enabled: bool) -> Self {
        self.watch_list = enabled;
        self
    }

    /// How the reflectors of informers made from now on wait between attempts (client-go's
    /// by default); see [`ReflectorOptions::backoff`].
    pub fn backoff(mut self, backoff: BackoffOptions) -> Self {
        self.backoff = backoff;
        self
    }

    /// The queue of the informers made from now on: the in-order RealFIFO (the default, as
    /// client-go 1.36 runs its informers) or the DeltaFIFO; see [`InformerOptions::fifo`].
    pub fn fifo(mut self, kind: FifoKind) -> Self {
        self.fifo = kind;
        self
    }

    /// Where the metrics of the informers made from now on go (none by default); see
    /// [`InformerOptions::metrics`].
    pub fn metrics(mut self, provider: Arc<dyn informer::metrics::MetricsProvider>) -> Self {
        self.metrics = Some(provider);
        self
    }

    /// Informers of kind `K` made from now on list and watch only the objects `selector`
    /// matches (controller-runtime's `ByObject` label and field selectors).
    pub fn select<K: k8s_openapi::Resource>(self, selector: Selector) -> Self {
        self.select_kind(K::GROUP, K::KIND, selector)
    }

    /// As [`select`](Self::select), for the kind `group`/`kind` named at run time.
    pub fn select_kind(
        mut self,
        group: &'static str,
        kind: &'static str,
        selector: Selector,
    ) -> Self {
        self.selectors.insert((group, kind), selector);
        self
    }

    /// The shared informer for kind `K`: in the factory's namespace (or all namespaces) for
    /// a namespaced kind, cluster-wide for a cluster-scoped one. The first call makes it;
    /// later calls return the same informer.
    ///
    /// Register handlers, transforms and indexers on it before [`start`](Self::start) where
    /// they must be (see [`SharedIndexInformer`]).
    ///
    /// # Panics
    ///
    /// If the kind is already cached as another Rust type; see [`try_informer`](Self::try_informer).
    pub fn informer<K: FactoryResource>(&self) -> Arc<SharedIndexInformer<K>> {
        self.try_informer().unwrap_or_else(|e| panic!("{e}"))
    }

    /// As [`informer`](Self::informer), refusing rather than panicking.
    ///
    /// # Errors
    ///
    /// [`FactoryError::Representation`] if the kind (say `Raw<Deployment>`) is already cached
    /// as another Rust type (`Deployment`): one kind has one watch and one cache.
    pub fn try_informer<K: FactoryResource>(
        &self,
    ) -> Result<Arc<SharedIndexInformer<K>>, FactoryError> {
        let namespace = if K::Scope::NAMESPACED {
            self.namespace.clone()
        } else {
            None
        };
        self.get_or_make::<K>(namespace)
    }

    /// The shared informer for namespaced kind `K` in `namespace`, whatever the factory's
    /// own namespace.
    ///
    /// # Panics
    ///
    /// As [`informer`](Self::informer).
    pub fn informer_in<K>(&self, namespace: &str) -> Arc<SharedIndexInformer<K>>
    where
        K: FactoryResource + k8s_openapi::Resource<Scope = NamespaceResourceScope>,
    {
        self.try_informer_in(namespace)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// As [`informer_in`](Self::informer_in), refusing rather than panicking.
    ///
    /// # Errors
    ///
    /// As [`try_informer`](Self::try_informer).
    pub fn try_informer_in<K>(
        &self,
        namespace: &str,
    ) -> Result<Arc<SharedIndexInformer<K>>, FactoryError>
    where
        K: FactoryResource + k8s_openapi::Resource<Scope = NamespaceResourceScope>,
    {
        self.get_or_make::<K>(Some(namespace.to_owned()))
    }

    fn get_or_make<K: FactoryResource>(
        &self,
        namespace: Option<String>,
    ) -> Result<Arc<SharedIndexInformer<K>>, FactoryError> {
        let key = InformerKey::of::<K>(namespace);
        let mut state = self.state.lock();
        if let Some(entry) = state.informers.get(&key) {
            return entry
                .typed
                .clone()
                .downcast::<SharedIndexInformer<K>>()
                .map_err(|_| FactoryError::Representation {
                    kind: key.to_string(),
                    cached: entry.type_name,
                    asked: std::any::type_name::<K>(),
                });
        }
        let namespace = key.namespace.as_deref();
        let api = K::Scope::api::<K>(self.client.clone(), namespace);
        let resource = ApiResource::of::<K>();
        let name = match namespace {
            Some(ns) => format!("{}.{}/{ns}", resource.plural, resource.api_version),
            None => format!("{}.{}", resource.plural, resource.api_version),
        };
        let selector = self.selectors.get(&(K::GROUP, K::KIND)).cloned();
        let filter = FilterSlot::<K>::default();
        let lister_watcher = ApiListerWatcher::new(api)
            .selector(selector.unwrap_or_default())
            .filtered(filter.clone());
        let informer = Arc::new(SharedIndexInformer::new(
            lister_watcher,
            InformerOptions {
                resync_period: self.resync,
                reflector: ReflectorOptions {
                    name,
                    watch_list: self.watch_list,
                    backoff: self.backoff,
                    ..ReflectorOptions::default()
                },
                fifo: self.fifo,
                metrics: self.metrics.clone(),
                ..InformerOptions::default()
            },
        ));
        state.informers.insert(
            key,
            Entry {
                typed: informer.clone(),
                type_name: std::any::type_name::<K>(),
                runnable: informer.clone(),
                filter: Arc::new(filter),
                stopping: None,
            },
        );
        Ok(informer)
    }

    /// Where the informer of kind `K` in `namespace` (`None`: all, or a cluster-scoped kind)
    /// finds its [`ListFilter`](crate::client::ListFilter): set it before the informer
    /// starts; each list and watch after reads it. `None` if no such informer was made.
    pub fn filter_slot<K: FactoryResource>(
        &self,
        namespace: Option<&str>,
    ) -> Option<FilterSlot<K>> {
        let namespace = namespace
            .filter(|_| K::Scope::NAMESPACED)
            .map(str::to_owned);
        let state = self.state.lock();
        let entry = state.informers.get(&InformerKey::of::<K>(namespace))?;
        entry
            .filter
            .clone()
            .downcast::<FilterSlot<K>>()
            .ok()
            .map(|slot| (*slot).clone())
    }

    /// Starts every informer made so far and not yet started, each on its own task, until
    /// `shutdown` completes. Call it again after making more informers; each call's informers
    /// stop with that call's `shutdown`.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn start(&self, shutdown: impl Future<Output = ()> + Send + 'static) {
        let mut state = self.state.lock();
        let (stop, stopping) = watch::channel(false);
        let mut started = 0;
        for entry in state.informers.values_mut() {
            if entry.stopping.is_some() {
                continue;
            }
            entry.stopping = Some(stopping.clone());
            let mut stopping = stopping.clone();
            let shutdown: BoxFuture = Box::pin(async move {
                let _ = stopping.wait_for(|stop| *stop).await;
            });
            let run = entry.runnable.clone().run(shutdown);
            self.running.send_modify(|n| *n += 1);
            let counted = Counted(self.running.clone());
            tokio::spawn(async move {
                run.await;
                drop(counted);
            });
            started += 1;
        }
        drop(state);
        if started == 0 {
            return;
        }
        tokio::spawn(async move {
            shutdown.await;
            let _ = stop.send(true);
        });
    }

    /// Waits until every started informer has synced; true if they all did, false if a
    /// shutdown came first (client-go's `WaitForCacheSync`). Informers made but not started
    /// are not waited for.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe.
    pub async fn wait_for_cache_sync(&self) -> bool {
        let started: Vec<(Arc<dyn Runnable>, watch::Receiver<bool>)> = self
            .state
            .lock()
            .informers
            .values()
            .filter_map(|e| Some((e.runnable.clone(), e.stopping.clone()?)))
            .collect();
        for (informer, mut stopping) in started {
            if informer.has_synced() {
                continue;
            }
            tokio::select! {
                () = informer.wait_synced() => {}
                _ = stopping.wait_for(|stop| *stop) => return false,
            }
        }
        true
    }

    /// Waits until every informer started so far has stopped (client-go's `Shutdown`, which
    /// waits the same way; the stop itself comes from the `shutdown` given to
    /// [`start`](Self::start)). Returns at once if none runs.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe.
    pub async fn join(&self) {
        let mut running = self.running.subscribe();
        let _ = running.wait_for(|n| *n == 0).await;
    }
}

/// Counts one running informer; uncounts it when dropped, however its task ends.
struct Counted(Arc<watch::Sender<usize>>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n -= 1);
    }
}
