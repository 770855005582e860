//! The manager's cache: one informer per kind and scope, holding each object once as
//! [`Raw`] JSON, read back as typed `Arc<K>`s through a [`Store`].
//!
//! # One representation per kind
//!
//! Every kind is cached as [`Raw<K>`]: the object's JSON, validated, with its key fields and
//! its `metadata` located. That holds about half of client-go's bytes per object. A
//! reconciler reads typed objects through a [`Store<K>`], each read decoding the JSON into
//! a fresh `Arc<K>` (a few microseconds for a ConfigMap; controller-runtime deep-copies its
//! cached object on every read instead). Routing facts (owners, generation, labels,
//! annotations, finalizers, deletion) are read from the metadata alone ([`Raw::meta`]), so
//! mapping an event to a queue key never decodes the object.
//!
//! With [`CacheOptions::keep_typed`] the first read of an object keeps its `Arc<K>` beside
//! the JSON ([`Raw::typed`]) and every later read of the same, unchanged object returns that
//! `Arc` without decoding; a changed object arrives as a new `Raw` and is decoded again on
//! its first read. That trades memory for reads: the typed form of a ConfigMap takes about
//! 1,900 bytes beside its 530 bytes of JSON, so it is off by default. The default keeps
//! the cache at its smallest, which is what an operator's memory is made of.
//!
//! By default the cache drops `metadata.managedFields` from every object it receives (it
//! is often most of an object's bytes and controllers do not read it); objects written to
//! the API server are unaffected. [`CacheOptions::transform`] sets a further transform per
//! kind, such as [`metadata_only`] for a kind whose spec and status a controller never
//! reads.
//!
//! # Reads wait for the sync and for this process's own writes
//!
//! A read ([`Store::get`], [`list`](Store::list), [`list_in`](Store::list_in),
//! [`select`](Store::select), [`by_index`](Store::by_index)) is `async` and answers only
//! once it can answer truly:
//!
//! * **after the kind's informer synced.** A read of a kind first used after the start, or
//!   made before its first list ended, waits for the sync, at most
//!   [`CacheOptions::sync_timeout`], and then fails with [`CacheError::NotSynced`] naming
//!   the kind. It never answers "nothing" because nothing was listed yet.
//! * **after the manager's own writes (read-your-own-writes).** The manager's client notes
//!   every write it makes ([`WriteLog`]). A read of an object it wrote waits until the
//!   informer has observed the written `resourceVersion` (or a newer one), or the delete; a
//!   list of the kind in a namespace, or in all, waits for every write of the kind there.
//!   Resource versions compare as integers, as Kubernetes 1.35 allows (KEP-5504). The wait
//!   is bounded by [`CacheOptions::read_your_writes_timeout`]: past it the read answers what
//!   the cache holds and counts it in
//!   `controller_runtime_cache_read_your_writes_timeouts_total{kind}`. So a reconcile that
//!   created a Deployment and runs again at once finds it in the cache, instead of creating
//!   it a second time.
//!
//! Read-your-own-writes is on by default; [`CacheOptions::read_your_writes`] turns it off for
//! the whole cache, and a controller's `read_your_writes(false)` for that controller's
//! reconciles ([`without_read_your_writes`] for any other future). Writes through a client
//! not made by the manager ([`Client::new`]) are not noted, and neither are raw requests
//! ([`Client::request`]).
//!
//! [`Store::now`] reads without waiting, for synchronous places such as an event handler's
//! mapping function: it answers what the cache holds at this instant, which may be before
//! the sync and before this process's writes.
//!
//! Other writers are not waited for: a read may still be older than the server. A write
//! from a stale read fails with 409 Conflict (the server checks the resourceVersion); return
//! the error to be retried with backoff, or wrap the read-modify-write in
//! [`retry_on_conflict`](super::ops::retry_on_conflict).
//!
//! # Implementation Details
//!
//! Each informer keeps a *watermark*, its store's resourceVersion
//! ([`SharedIndexInformer::store_resource_version`]): every event up to it is in its cache. A
//! waiting read checks each write it waits for against the cache (the cached copy's
//! resourceVersion, or the object's absence after a delete) and the watermark, and waits for
//! the watermark to move until every write is seen or its time is up. A task per informer
//! drops the log's entries as the watermark passes them, so that writes no read looks for
//! again do not stay in the log.

use std::any::Any;
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use informer::{
    IndexError, IndexFunc, IndexValues, Indexers, InformerError, Lister, Object, SelectorError,
    SharedIndexInformer,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::client::{ApiResource, Client, Raw, Selector, Write, WriteLog, WrittenKey};
use crate::informers::{FactoryError, InformerFactory, InformerScope};

/// Why a cache read or the cache's start failed.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// A cached object does not decode into its Rust type.
    #[error("cached {kind} {key} does not decode: {source}")]
    Decode {
        /// The kind, e.g. `apps/v1/Deployment`.
        kind: String,
        /// The object's `namespace/name`.
        key: String,
        /// serde's complaint, with its position.
        #[source]
        source: serde_json::Error,
    },
    /// An informer did not sync within the timeout.
    #[error("timed out after {after:?} waiting for the cache of {informer} to sync{}", last_error.as_ref().map(|e| format!(": last error: {e}")).unwrap_or_default())]
    SyncTimeout {
        /// The informer, e.g. `deployments.apps/v1` (and its namespace).
        informer: String,
        /// The timeout.
        after: Duration,
        /// The last list or watch error it met, e.g. a 403 from RBAC.
        last_error: Option<String>,
    },
    /// A read found the kind's informer not synced, and it did not sync in time.
    #[error(
        "cannot read {kind}: its cache has not synced after {after:?} (is its informer started, and can it list the kind?)"
    )]
    NotSynced {
        /// The kind, e.g. `apps/v1/Deployment`.
        kind: String,
        /// How long the read waited ([`CacheOptions::sync_timeout`]).
        after: Duration,
    },
    /// The cache stopped before it synced.
    #[error("the cache stopped before {informer} synced")]
    Stopped {
        /// The informer that had not synced.
        informer: String,
    },
    /// The kind is already cached as another Rust type.
    #[error(transparent)]
    Factory(#[from] FactoryError),
    /// An index is unknown.
    #[error(transparent)]
    Index(#[from] IndexError),
    /// An index could not be added: its name is taken, or the informer stopped.
    #[error(transparent)]
    Informer(#[from] InformerError),
    /// A label selector is not valid.
    #[error(transparent)]
    Selector(#[from] SelectorError),
}

/// What the cache holds, and where.
#[derive(Clone, Debug)]
pub struct CacheOptions {
    /// The namespaces whose namespaced objects are cached; empty (the default) caches every
    /// namespace with one watch per kind, and so does a list naming `""` (all namespaces, as
    /// in controller-runtime). Cluster-scoped kinds are always cached whole.
    pub namespaces: Vec<String>,
    /// Drop `metadata.managedFields` from cached objects. Default true.
    pub strip_managed_fields: bool,
    /// How often every handler is told about every cached object again; zero (the default)
    /// never. controller-runtime's `SyncPeriod`.
    pub resync: Duration,
    /// How long [`Cache::wait_for_sync`] waits for each informer, and a read for the
    /// informer of its kind. Default 2 minutes, as controller-runtime's `CacheSyncTimeout`.
    pub sync_timeout: Duration,
    /// Reads wait for the manager's own writes (see the [module docs](self)). Default true.
    pub read_your_writes: bool,
    /// How long a read waits for the manager's own writes before it answers what the cache
    /// holds (and counts a timeout). Default 5 seconds.
    pub read_your_writes_timeout: Duration,
    /// Per-kind label and field selectors, by (group, kind); set with
    /// [`select`](Self::select).
    pub selectors: HashMap<(&'static str, &'static str), Selector>,
    /// Keep each object's typed form once a read decoded it, until the object changes, so
    /// that later reads of the unchanged object return the same `Arc` without decoding.
    /// Default false: every read decodes afresh and the cache holds the JSON alone. Keeping
    /// costs memory: a decoded `ConfigMap` takes about 1,900 bytes beside its 530 bytes of
    /// JSON, so a cache whose every object was read once holds four times as much. Turn it
    /// on for a controller that reads the same unchanged objects many times (lists a large
    /// kind on every reconcile, say).
    pub keep_typed: bool,
    /// Per-kind transforms, by (group, kind); set with [`transform`](Self::transform).
    pub transforms: HashMap<(&'static str, &'static str), KindTransform>,
    /// Where every informer's metrics go; `None` (the default) records none. A manager sets
    /// its own registry's ([`Metrics::informers`](super::metrics::Metrics::informers)) unless
    /// one is set.
    pub informer_metrics: Option<Arc<dyn informer::metrics::MetricsProvider>>,
}

/// A transform of one kind's cached objects, set by [`CacheOptions::transform`].
#[derive(Clone)]
pub struct KindTransform(Arc<dyn Any + Send + Sync>);

impl fmt::Debug for KindTransform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KindTransform")
    }
}

/// What [`KindTransform`] holds for kind `K`.
type TransformFn<K> = Box<dyn Fn(&mut Raw<K>) + Send + Sync>;

/// A transform for [`CacheOptions::transform`] that keeps only an object's `apiVersion`,
/// `kind` and `metadata`, as the metadata-only API serves them: for a kind whose names,
/// labels, owners or deletion a controller reads, but never its spec or status. Reads of
/// the kind decode with empty spec and status.
pub fn metadata_only<K>(raw: &mut Raw<K>) {
    let Ok(serde_json::Value::Object(mut fields)) = serde_json::from_str(raw.json()) else {
        return; // validated on arrival, so unreachable; leave the object as it is
    };
    fields.retain(|key, _| matches!(key.as_str(), "apiVersion" | "kind" | "metadata"));
    let json = serde_json::Value::Object(fields).to_string();
    if let Ok(kept) = Raw::from_json(&json) {
        *raw = kept;
    }
}

impl Default for CacheOptions {
    fn default() -> Self {
        CacheOptions {
            namespaces: Vec::new(),
            strip_managed_fields: true,
            resync: Duration::ZERO,
            sync_timeout: Duration::from_secs(120),
            read_your_writes: true,
            read_your_writes_timeout: Duration::from_secs(5),
            selectors: HashMap::new(),
            keep_typed: false,
            transforms: HashMap::new(),
            informer_metrics: None,
        }
    }
}

impl CacheOptions {
    /// Caches only the objects of kind `K` that `selector` matches (controller-runtime's
    /// `ByObject`). A read of an object outside the selection finds nothing.
    pub fn select<K: k8s_openapi::Resource>(mut self, selector: Selector) -> Self {
        self.selectors.insert((K::GROUP, K::KIND), selector);
        self
    }

    /// Applies `transform` to every object of kind `K` the cache receives, in place, after
    /// `managedFields` were dropped and before the object is cached or handed to an event
    /// handler (controller-runtime's `ByObject` `Transform`): to keep less of a kind than
    /// the server sends, e.g. [`metadata_only`]. Reads decode what the transform left.
    pub fn transform<K: CachedKind>(
        mut self,
        transform: impl Fn(&mut Raw<K>) + Send + Sync + 'static,
    ) -> Self {
        let boxed: TransformFn<K> = Box::new(transform);
        let erased: Arc<dyn Any + Send + Sync> = Arc::new(boxed);
        self.transforms
            .insert((K::GROUP, K::KIND), KindTransform(erased));
        self
    }

    /// The transform set for kind `K`, if any.
    fn transform_of<K: CachedKind>(&self) -> Option<Arc<TransformFn<K>>> {
        let erased = self.transforms.get(&(K::GROUP, K::KIND))?.0.clone();
        erased.downcast::<TransformFn<K>>().ok()
    }
}

/// What a kind needs to be cached and read typed: a resource the client can list and watch,
/// that decodes from JSON.
pub trait CachedKind:
    k8s_openapi::Resource<Scope: InformerScope> + DeserializeOwned + Send + Sync + 'static
{
}

impl<K> CachedKind for K where
    K: k8s_openapi::Resource<Scope: InformerScope> + DeserializeOwned + Send + Sync + 'static
{
}

/// The shared cache: one informer per kind and namespace, made on first use, started by the
/// manager (or by [`start`](Self::start)). Cheap to clone.
#[derive(Clone)]
pub struct Cache {
    inner: Arc<Inner>,
}

struct Inner {
    /// One factory, for all namespaces or for each cached namespace.
    factories: Vec<InformerFactory>,
    options: CacheOptions,
    /// The cached namespaces, one per factory; empty for all.
    namespaces: Vec<String>,
    /// What every store's reads share: the write log, the bounds, the metrics.
    reads: Arc<Reads>,
    /// The informers whose log entries a task prunes ([`prune`]), by name.
    pruned: Mutex<std::collections::HashSet<String>>,
    /// The informers made so far, for waiting and naming, with their last error.
    informers: Mutex<Vec<Tracked>>,
    /// Set once started: the shutdown later informers start with.
    started: Mutex<Option<watch::Receiver<bool>>>,
    /// Told every step of every reflector, by informer name (the debug pages), if set
    /// before the informers are made.
    reflector_trace: Mutex<Option<ReflectorTrace>>,
}

/// A hook told every step of an informer's reflector, with the informer's name.
pub(crate) type ReflectorTrace = Arc<dyn Fn(&str, &informer::Trace) + Send + Sync>;

/// An informer the cache watches over.
struct Tracked {
    name: String,
    /// What it lists and watches, for [`Cache::informers`].
    listed: CachedInformer,
    synced: Box<dyn Fn() -> bool + Send + Sync>,
    wait: Arc<dyn Fn() -> BoxFuture + Send + Sync>,
    last_error: Arc<Mutex<Option<String>>>,
    /// Objects cached, their JSON bytes and the last resourceVersion, for the debug pages.
    size: Box<dyn Fn() -> (usize, usize, String) + Send + Sync>,
}

type BoxFuture = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

/// What one of the cache's informers lists and watches: a kind, in a namespace or across
/// all, with the selector set for the kind. See [`Cache::informers`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CachedInformer {
    /// The kind's resource.
    pub resource: ApiResource,
    /// The namespace it is limited to; `None` for every namespace, or a cluster-scoped kind.
    pub namespace: Option<String>,
    /// The label and field selectors it lists with ([`CacheOptions::select`]).
    pub selector: Selector,
}

impl fmt::Debug for Cache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cache")
            .field("namespaces", &self.inner.options.namespaces)
            .field("informers", &self.inner.informers.lock().len())
            .finish_non_exhaustive()
    }
}

impl Cache {
    /// A cache over `client` with `options`; nothing is listed until it starts. If `client`
    /// records its writes ([`Client::recording_writes`]) and
    /// [`CacheOptions::read_your_writes`] is on, reads wait for those writes.
    pub fn new(client: Client, options: CacheOptions) -> Self {
        // "" is every namespace, as in controller-runtime.
        let namespaces = if options.namespaces.iter().any(String::is_empty) {
            Vec::new()
        } else {
            options.namespaces.clone()
        };
        let reads = Arc::new(Reads {
            writes: client
                .write_log()
                .filter(|_| options.read_your_writes)
                .cloned(),
            sync_timeout: options.sync_timeout,
            timeout: options.read_your_writes_timeout,
            metrics: ReadMetrics::default(),
        });
        let factory = |namespace: Option<&str>| {
            let mut factory = InformerFactory::new(client.clone()).resync(options.resync);
            if let Some(metrics) = &options.informer_metrics {
                factory = factory.metrics(metrics.clone());
            }
            if let Some(ns) = namespace {
                factory = factory.namespace(ns);
            }
            for ((group, kind), selector) in &options.selectors {
                factory = factory.select_kind(group, kind, selector.clone());
            }
            factory
        };
        let factories = if namespaces.is_empty() {
            vec![factory(None)]
        } else {
            namespaces.iter().map(|ns| factory(Some(ns))).collect()
        };
        Cache {
            inner: Arc::new(Inner {
                factories,
                options,
                namespaces,
                reads,
                pruned: Mutex::new(Default::default()),
                informers: Mutex::new(Vec::new()),
                started: Mutex::new(None),
                reflector_trace: Mutex::new(None),
            }),
        }
    }

    /// The options the cache was made with.
    pub fn options(&self) -> &CacheOptions {
        &self.inner.options
    }

    /// The typed store of kind `K`, making its informers on first use. Made after the cache
    /// started, they start at once; [`Store::wait_synced`] waits for them.
    ///
    /// # Errors
    ///
    /// [`CacheError::Factory`] if the kind is already cached as another Rust type through
    /// the same factory.
    pub fn store<K: CachedKind>(&self) -> Result<Store<K>, CacheError> {
        let namespaced = K::Scope::NAMESPACED;
        let factories: &[InformerFactory] = if namespaced {
            &self.inner.factories
        } else {
            &self.inner.factories[..1]
        };
        let mut parts = Vec::with_capacity(factories.len());
        let mut made = false;
        for factory in factories {
            let informer = factory.try_informer::<Raw<K>>()?;
            let namespace = namespaced
                .then(|| self.inner.namespaces.get(parts.len()).cloned())
                .flatten();
            if !informer.is_started() && self.track(&informer, namespace.clone()) {
                made = true;
            }
            let seen = self.watermark(&informer, namespace.as_deref());
            parts.push(Part {
                namespace,
                informer,
                seen,
            });
        }
        if made && let Some(stopping) = self.inner.started.lock().clone() {
            self.start_factories(stopping);
        }
        if let Some(log) = &self.inner.reads.writes {
            log.watch_kind(K::GROUP, K::KIND);
        }
        Ok(Store {
            parts: parts.into(),
            keep: self.inner.options.keep_typed,
            reads: self.inner.reads.clone(),
        })
    }

    /// Narrows what the informers of kind `K` list and watch by `filter` (a sharded
    /// controller's hash ranges), making them if need be. Set before they start.
    ///
    /// # Errors
    ///
    /// As [`store`](Self::store).
    pub(crate) fn set_filter<K: CachedKind>(
        &self,
        filter: Arc<dyn crate::client::ListFilter<Raw<K>>>,
    ) -> Result<(), CacheError> {
        self.store::<K>()?;
        for (i, factory) in self.inner.factories.iter().enumerate() {
            let namespace = self.inner.namespaces.get(i).map(String::as_str);
            if let Some(slot) = factory.filter_slot::<Raw<K>>(namespace) {
                *slot.lock() = Some(filter.clone());
            }
        }
        Ok(())
    }

    /// The watermark of `informer` (its store's resourceVersion: every event up to it is in
    /// its cache), and, the first time with a write log, a task that prunes the log as it
    /// moves ([`prune`]; only inside a tokio runtime: without one, reads alone prune).
    fn watermark<K: CachedKind>(
        &self,
        informer: &Arc<SharedIndexInformer<Raw<K>>>,
        namespace: Option<&str>,
    ) -> watch::Receiver<u64> {
        let seen = informer.watch_store_resource_version();
        if let Some(log) = &self.inner.reads.writes
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
            && self.inner.pruned.lock().insert(informer.name().to_owned())
        {
            let weak = Arc::downgrade(informer);
            let namespace = namespace.map(str::to_owned);
            runtime.spawn(prune(weak, namespace, seen.clone(), log.clone()));
        }
        seen
    }

    /// Registers the cache's read metrics in `metrics`: the read-your-own-writes timeouts
    /// per kind and the time reads waited for writes.
    pub(crate) fn register_metrics(&self, metrics: &super::metrics::Metrics) {
        let reads = &self.inner.reads.metrics;
        metrics.register(
            "controller_runtime_cache_read_your_writes_timeouts",
            "Cache reads that stopped waiting for the manager's own writes and answered what the cache held, per kind",
            reads.timeouts.clone(),
        );
        metrics.register(
            "controller_runtime_cache_read_your_writes_wait_seconds",
            "How long cache reads waited for the manager's own writes, for reads that had any to wait for",
            reads.waited.clone(),
        );
    }

    /// Registers a new informer for waiting and error reporting, and sets its transform.
    /// False if it was tracked already.
    fn track<K: CachedKind>(
        &self,
        informer: &Arc<SharedIndexInformer<Raw<K>>>,
        namespace: Option<String>,
    ) -> bool {
        let mut informers = self.inner.informers.lock();
        let name = informer.name().to_owned();
        if informers.iter().any(|t| t.name == name) {
            return false;
        }
        let listed = CachedInformer {
            resource: ApiResource::of::<K>(),
            namespace,
            selector: (self.inner.options.selectors)
                .get(&(K::GROUP, K::KIND))
                .cloned()
                .unwrap_or_default(),
        };
        let strip = self.inner.options.strip_managed_fields;
        let custom = self.inner.options.transform_of::<K>();
        // Refused only once started, which an untracked informer is not.
        let _ = match (strip, custom) {
            (false, None) => Ok(()),
            (true, None) => informer.set_transform(Raw::strip_managed_fields),
            (strip, Some(custom)) => informer.set_transform(move |raw: &mut Raw<K>| {
                if strip {
                    raw.strip_managed_fields();
                }
                custom(raw);
            }),
        };
        let last_error = Arc::new(Mutex::new(None));
        let errors = last_error.clone();
        let _ = informer.set_watch_error_handler(move |e| *errors.lock() = Some(e.to_string()));
        if let Some(hook) = self.inner.reflector_trace.lock().clone() {
            let name = name.clone();
            let _ = informer.on_reflector_trace(move |trace| hook(&name, trace));
        }
        let (synced, waited, sized) = (informer.clone(), informer.clone(), informer.clone());
        informers.push(Tracked {
            name,
            listed,
            synced: Box::new(move || synced.has_synced()),
            wait: Arc::new(move || {
                let informer = waited.clone();
                Box::pin(async move { informer.wait_synced().await })
            }),
            last_error,
            size: Box::new(move || {
                let objects = sized.get_indexer().list();
                let bytes = objects.iter().map(|o| o.json().len()).sum();
                (objects.len(), bytes, sized.last_sync_resource_version())
            }),
        });
        true
    }

    fn start_factories(&self, stopping: watch::Receiver<bool>) {
        for factory in &self.inner.factories {
            let mut stopping = stopping.clone();
            factory.start(async move {
                let _ = stopping.wait_for(|stop| *stop).await;
            });
        }
    }

    /// Starts every informer made so far, and every one made later, until `shutdown`
    /// completes. Call it once; the manager does.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn start(&self, shutdown: impl Future<Output = ()> + Send + 'static) {
        let (stop, stopping) = watch::channel(false);
        *self.inner.started.lock() = Some(stopping.clone());
        self.start_factories(stopping);
        tokio::spawn(async move {
            shutdown.await;
            let _ = stop.send(true);
        });
    }

    /// What each informer made so far lists and watches, in the order they were made: one
    /// per kind for every namespace, or one per kind and cached namespace.
    pub fn informers(&self) -> Vec<CachedInformer> {
        let informers = self.inner.informers.lock();
        informers.iter().map(|t| t.listed.clone()).collect()
    }

    /// Has `hook` told every step of the reflectors of informers made from now on.
    pub(crate) fn trace_reflectors(&self, hook: ReflectorTrace) {
        *self.inner.reflector_trace.lock() = Some(hook);
    }

    /// What each informer made so far holds, for the debug pages: objects, bytes, last
    /// resourceVersion, synced, last error. Counting the bytes walks the cache.
    pub(crate) fn informer_stats(&self) -> Vec<super::debug::InformerStats> {
        let informers = self.inner.informers.lock();
        informers
            .iter()
            .map(|t| {
                let (objects, bytes, resource_version) = (t.size)();
                let resource = &t.listed.resource;
                super::debug::InformerStats {
                    name: t.name.clone(),
                    group: resource.group.clone(),
                    version: resource.version.clone(),
                    kind: resource.kind.clone(),
                    namespace: t.listed.namespace.clone(),
                    objects,
                    bytes,
                    resource_version,
                    synced: (t.synced)(),
                    last_error: t.last_error.lock().clone(),
                }
            })
            .collect()
    }

    /// Whether every informer made so far has synced.
    pub fn has_synced(&self) -> bool {
        self.inner.informers.lock().iter().all(|t| (t.synced)())
    }

    /// Waits until every informer made so far has synced, each within the configured
    /// `sync_timeout`.
    ///
    /// # Errors
    ///
    /// [`CacheError::SyncTimeout`] naming the first informer that did not sync in time and
    /// the last error it met (a 403 from RBAC, a 404 for a CRD not installed).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe.
    pub async fn wait_for_sync(&self) -> Result<(), CacheError> {
        let timeout = self.inner.options.sync_timeout;
        let pending: Vec<_> = self
            .inner
            .informers
            .lock()
            .iter()
            .filter(|t| !(t.synced)())
            .map(|t| (t.name.clone(), t.wait.clone(), t.last_error.clone()))
            .collect();
        for (name, wait, last_error) in pending {
            if tokio::time::timeout(timeout, wait()).await.is_err() {
                return Err(CacheError::SyncTimeout {
                    informer: name,
                    after: timeout,
                    last_error: last_error.lock().clone(),
                });
            }
        }
        Ok(())
    }
}

/// One informer behind a store: all namespaces, or one.
struct Part<K> {
    /// The namespace it caches, when the cache is limited to namespaces.
    namespace: Option<String>,
    informer: Arc<SharedIndexInformer<Raw<K>>>,
    /// The informer's watermark ([`Cache::watermark`]).
    seen: watch::Receiver<u64>,
}

/// What every store of one cache shares for its reads.
struct Reads {
    /// The manager client's write log; `None` when read-your-own-writes is off.
    writes: Option<Arc<WriteLog>>,
    /// How long a read waits for its kind to sync.
    sync_timeout: Duration,
    /// How long a read waits for the manager's own writes.
    timeout: Duration,
    metrics: ReadMetrics,
}

/// The cache's read metrics; see [`Cache::register_metrics`].
#[derive(Clone)]
struct ReadMetrics {
    timeouts: Family<Vec<(String, String)>, Counter>,
    waited: Histogram,
}

impl Default for ReadMetrics {
    fn default() -> Self {
        ReadMetrics {
            timeouts: Family::default(),
            // 1 ms to about 8 s.
            waited: Histogram::new(exponential_buckets(0.001, 2.0, 14)),
        }
    }
}

tokio::task_local! {
    /// Whether reads made by this task wait for the manager's own writes; unset is yes.
    static READ_YOUR_WRITES: bool;
}

/// Runs `future` with cache reads that do not wait for the manager's own writes (they still
/// wait for the sync): for a piece of code that reads the cache right after writing and
/// wants what the cache holds, not what it wrote. A controller's
/// `read_your_writes(false)` does this around each of its reconciles.
pub async fn without_read_your_writes<F: Future>(future: F) -> F::Output {
    READ_YOUR_WRITES.scope(false, future).await
}

/// Runs `future` with read-your-own-writes as `enabled` says (a controller's setting).
pub(crate) async fn with_read_your_writes<F: Future>(enabled: bool, future: F) -> F::Output {
    READ_YOUR_WRITES.scope(enabled, future).await
}

fn reads_wait_for_writes() -> bool {
    READ_YOUR_WRITES.try_with(|on| *on).unwrap_or(true)
}

/// Drops the entries of kind `K` in `log` that the cache of `informer` shows observed, each
/// time its watermark moves, so that writes nobody reads back do not stay in the log. Ends
/// with the informer.
async fn prune<K: CachedKind>(
    informer: std::sync::Weak<SharedIndexInformer<Raw<K>>>,
    namespace: Option<String>,
    mut seen: watch::Receiver<u64>,
    log: Arc<WriteLog>,
) {
    while seen.changed().await.is_ok() {
        let Some(informer) = informer.upgrade() else {
            return;
        };
        let watermark = *seen.borrow_and_update();
        let part = Part {
            namespace: namespace.clone(),
            informer,
            seen: seen.clone(),
        };
        for (key, write) in log.pending(K::GROUP, K::KIND, namespace.as_deref(), None) {
            if observed(&part, &key, &write, watermark) {
                log.observed(K::GROUP, K::KIND, &key, &write);
            }
        }
    }
}

/// Whether `part` shows the write of `key` observed: its watermark or its cached copy is at
/// the written resourceVersion or newer, or, for a delete, it no longer holds the object
/// deleted.
fn observed<K: CachedKind>(
    part: &Part<K>,
    key: &WrittenKey,
    write: &Write,
    watermark: u64,
) -> bool {
    let lister = part.informer.lister();
    let cached = if key.0.is_empty() {
        lister.get(&key.1)
    } else {
        lister.namespaced(&key.0).get(&key.1)
    };
    if write.gone {
        return match cached {
            None => true,
            Some(obj) => write.uid.is_some() && write.uid != uid_of(&obj),
        };
    }
    let cached_rv = cached
        .as_ref()
        .and_then(|obj| obj.resource_version()?.parse::<u64>().ok());
    watermark >= write.resource_version || cached_rv.is_some_and(|rv| rv >= write.resource_version)
}

/// The `metadata.uid` of a cached object.
fn uid_of<K>(obj: &Raw<K>) -> Option<String> {
    obj.meta().ok()?.uid.map(|u| u.into_owned())
}

/// Typed reads of one kind from the cache: `Arc<K>`s decoded from the cached JSON, and kept
/// beside it if [`CacheOptions::keep_typed`] says so.
///
/// Reads are `async`: they wait for the kind's informer to sync and for the manager's own
/// writes of the kind (see the [module docs](self)); [`now`](Self::now) reads without
/// waiting. Obtained from [`Cache::store`] (or the manager's `store`). Cheap to clone.
///
/// ```no_run
/// # use controller_runtime::runtime::cache::{Cache, CacheError};
/// use k8s_openapi::api::apps::v1::Deployment;
/// # async fn run(cache: &Cache) -> Result<(), CacheError> {
/// let deployments = cache.store::<Deployment>()?;
/// if let Some(web) = deployments.get("prod", "web").await? {
///     println!("{:?}", web.spec.as_ref().and_then(|s| s.replicas));
/// }
/// # Ok(())
/// # }
/// ```
pub struct Store<K> {
    parts: Arc<[Part<K>]>,
    /// Whether reads keep the typed form beside the JSON ([`CacheOptions::keep_typed`]).
    keep: bool,
    reads: Arc<Reads>,
}

impl<K> Clone for Store<K> {
    fn clone(&self) -> Self {
        Store {
            parts: self.parts.clone(),
            keep: self.keep,
            reads: self.reads.clone(),
        }
    }
}

impl<K: Send + Sync + 'static> fmt::Debug for Store<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("kind", &std::any::type_name::<K>())
            .field(
                "informers",
                &self
                    .parts
                    .iter()
                    .map(|p| p.informer.name())
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// The reads of a [`Store`] that do not wait: what the cache holds at this instant, perhaps
/// before the kind's informer synced and before the manager's own latest writes are in it.
/// For synchronous places, such as a `watches` mapping or an index function; a reconcile
/// reads through the waiting [`Store`] methods. Obtained from [`Store::now`].
pub struct StoreNow<'a, K> {
    store: &'a Store<K>,
}

impl<K: CachedKind> Store<K> {
    /// Reads without waiting; see [`StoreNow`].
    ///
    /// ```no_run
    /// # use controller_runtime::runtime::Store;
    /// # use k8s_openapi::api::core::v1::ConfigMap;
    /// # fn map(configmaps: &Store<ConfigMap>) -> Result<(), controller_runtime::runtime::CacheError> {
    /// let held = configmaps.now().get("prod", "settings")?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn now(&self) -> StoreNow<'_, K> {
        StoreNow { store: self }
    }

    /// The object `namespace/name` (`name` alone, with `namespace` empty, for a
    /// cluster-scoped kind), once the kind synced and the cache holds the manager's own
    /// writes of it.
    ///
    /// # Errors
    ///
    /// [`CacheError::NotSynced`] if the kind's informer does not sync in time;
    /// [`CacheError::Decode`] if the cached object does not decode into `K`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a cancelled read leaves the write log as it was.
    pub async fn get(&self, namespace: &str, name: &str) -> Result<Option<Arc<K>>, CacheError> {
        self.ready(Some(namespace), Some(name)).await?;
        self.now().get(namespace, name)
    }

    /// The object under `key` (`namespace/name` or `name`).
    ///
    /// # Errors
    ///
    /// As [`get`](Self::get).
    pub async fn get_key(&self, key: &str) -> Result<Option<Arc<K>>, CacheError> {
        let (namespace, name) = informer::split_key(key).unwrap_or(("", key));
        self.get(namespace, name).await
    }

    /// Every cached object, once the kind synced and the cache holds the manager's own
    /// writes of it.
    ///
    /// # Errors
    ///
    /// As [`get`](Self::get), for the first object that does not decode.
    pub async fn list(&self) -> Result<Vec<Arc<K>>, CacheError> {
        self.ready(None, None).await?;
        self.now().list()
    }

    /// The cached objects in `namespace`, once the kind synced and the cache holds the
    /// manager's own writes of it in `namespace`.
    ///
    /// # Errors
    ///
    /// As [`list`](Self::list).
    pub async fn list_in(&self, namespace: &str) -> Result<Vec<Arc<K>>, CacheError> {
        self.ready(Some(namespace), None).await?;
        self.now().list_in(namespace)
    }

    /// The cached objects whose labels match `selector`, in `namespace` or (with `None`)
    /// everywhere, waiting as [`list_in`](Self::list_in) or [`list`](Self::list) do.
    ///
    /// # Errors
    ///
    /// [`CacheError::Selector`] for an invalid selector; otherwise as [`list`](Self::list).
    pub async fn select(
        &self,
        namespace: Option<&str>,
        selector: &LabelSelector,
    ) -> Result<Vec<Arc<K>>, CacheError> {
        self.ready(namespace, None).await?;
        self.now().select(namespace, selector)
    }

    /// The cached objects whose index `index` holds `value`, waiting as
    /// [`list`](Self::list) does.
    ///
    /// # Errors
    ///
    /// [`CacheError::Index`] if there is no such index; otherwise as [`list`](Self::list).
    pub async fn by_index(&self, index: &str, value: &str) -> Result<Vec<Arc<K>>, CacheError> {
        self.ready(None, None).await?;
        self.now().by_index(index, value)
    }

    /// The cached JSON of `namespace/name`, for reading routing facts without a decode; it
    /// does not wait, as [`now`](Self::now).
    pub fn raw(&self, namespace: &str, name: &str) -> Option<Arc<Raw<K>>> {
        let part = self.part_for(namespace)?;
        let lister = part.informer.lister();
        if namespace.is_empty() {
            lister.get(name)
        } else {
            lister.namespaced(namespace).get(name)
        }
    }

    /// Adds an index named `name`: `f` gives the values an object is indexed under. It sees
    /// the cached [`Raw`]; read facts with [`Raw::meta`] or decode with [`Raw::typed`] (the
    /// decode is kept for later reads).
    ///
    /// # Errors
    ///
    /// [`CacheError::Index`] if the name is taken.
    pub fn add_index(
        &self,
        name: &str,
        f: impl Fn(&Raw<K>, &mut IndexValues<'_>) + Send + Sync + 'static,
    ) -> Result<(), CacheError> {
        let f = IndexFunc::new(f);
        for part in self.parts.iter() {
            let mut indexers = Indexers::new();
            indexers.insert(name.to_owned(), f.clone());
            part.informer.add_indexers(indexers)?;
        }
        Ok(())
    }

    /// Whether every informer behind the store has synced.
    pub fn has_synced(&self) -> bool {
        self.parts.iter().all(|p| p.informer.has_synced())
    }

    /// Waits until every informer behind the store has synced.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe.
    pub async fn wait_synced(&self) {
        for part in self.parts.iter() {
            part.informer.wait_synced().await;
        }
    }

    /// The informers behind the store: one, or one per cached namespace.
    pub fn informers(&self) -> impl Iterator<Item = &Arc<SharedIndexInformer<Raw<K>>>> {
        self.parts.iter().map(|p| &p.informer)
    }

    /// The listers behind the store, over the cached JSON.
    pub fn listers(&self) -> Vec<Lister<Raw<K>>> {
        self.parts.iter().map(|p| p.informer.lister()).collect()
    }

    fn typed(&self, raw: &Raw<K>) -> Result<Arc<K>, CacheError> {
        typed(raw, self.keep)
    }

    fn part_for(&self, namespace: &str) -> Option<&Part<K>> {
        self.parts.iter().find(|p| p.covers(namespace))
    }

    /// Waits until the informers a read of `namespace` (all with `None`) looks at have
    /// synced, then until the cache holds the manager's own writes there (of `name`, if
    /// given), within their bounds.
    async fn ready(&self, namespace: Option<&str>, name: Option<&str>) -> Result<(), CacheError> {
        let looked_at = |p: &&Part<K>| namespace.is_none_or(|ns| p.covers(ns));
        for part in self.parts.iter().filter(looked_at) {
            if !part.informer.has_synced() {
                let after = self.reads.sync_timeout;
                if tokio::time::timeout(after, part.informer.wait_synced())
                    .await
                    .is_err()
                {
                    let kind = kind_name::<K>();
                    return Err(CacheError::NotSynced { kind, after });
                }
            }
        }
        if let Some(log) = &self.reads.writes
            && reads_wait_for_writes()
        {
            self.settle(log, namespace, name).await;
        }
        Ok(())
    }

    /// Waits until every write of the log in scope is observed by the cache, or the read's
    /// time is up; drops the entries seen observed, and on time-out those waited for.
    async fn settle(&self, log: &WriteLog, namespace: Option<&str>, name: Option<&str>) {
        let mut pending = log.pending(K::GROUP, K::KIND, namespace, name);
        if pending.is_empty() {
            return;
        }
        let started = Instant::now();
        let deadline = started + self.reads.timeout;
        let mut timed_out = false;
        for part in self.parts.iter() {
            let mut seen = part.seen.clone();
            loop {
                let watermark = *seen.borrow_and_update();
                let mut left = false;
                pending.retain(|(key, write)| match self.part_for(&key.0) {
                    Some(p) if !std::ptr::eq(p, part) => true,
                    Some(_) if !observed(part, key, write, watermark) => {
                        left = true;
                        true
                    }
                    // Observed, or in a namespace no informer caches: nothing to wait for.
                    _ => {
                        log.observed(K::GROUP, K::KIND, key, write);
                        false
                    }
                });
                if !left {
                    break;
                }
                match tokio::time::timeout_at(deadline, seen.changed()).await {
                    Ok(Ok(())) => {}
                    // The time is up, or the informer is gone: answer what is there.
                    Ok(Err(_)) | Err(_) => {
                        timed_out = true;
                        break;
                    }
                }
            }
            if timed_out {
                break;
            }
        }
        let metrics = &self.reads.metrics;
        if timed_out {
            // Waited for once: a later read answers at once rather than wait again.
            for (key, write) in &pending {
                log.observed(K::GROUP, K::KIND, key, write);
            }
            let kind = vec![("kind".to_owned(), kind_name::<K>())];
            metrics.timeouts.get_or_create(&kind).inc();
        }
        metrics.waited.observe(started.elapsed().as_secs_f64());
    }
}

impl<K: CachedKind> StoreNow<'_, K> {
    /// The object `namespace/name` as the cache holds it now.
    ///
    /// # Errors
    ///
    /// [`CacheError::Decode`] if the cached object does not decode into `K`.
    pub fn get(&self, namespace: &str, name: &str) -> Result<Option<Arc<K>>, CacheError> {
        (self.store.raw(namespace, name))
            .map(|raw| self.store.typed(&raw))
            .transpose()
    }

    /// The object under `key` (`namespace/name` or `name`) as the cache holds it now.
    ///
    /// # Errors
    ///
    /// As [`get`](Self::get).
    pub fn get_key(&self, key: &str) -> Result<Option<Arc<K>>, CacheError> {
        let (namespace, name) = informer::split_key(key).unwrap_or(("", key));
        self.get(namespace, name)
    }

    /// Every object the cache holds now.
    ///
    /// # Errors
    ///
    /// As [`get`](Self::get), for the first object that does not decode.
    pub fn list(&self) -> Result<Vec<Arc<K>>, CacheError> {
        let mut out = Vec::new();
        for part in self.store.parts.iter() {
            for raw in part.informer.lister().list() {
                out.push(self.store.typed(&raw)?);
            }
        }
        Ok(out)
    }

    /// The objects in `namespace` the cache holds now.
    ///
    /// # Errors
    ///
    /// As [`list`](Self::list).
    pub fn list_in(&self, namespace: &str) -> Result<Vec<Arc<K>>, CacheError> {
        let Some(part) = self.store.part_for(namespace) else {
            return Ok(Vec::new());
        };
        (part.informer.lister().namespaced(namespace).list())
            .iter()
            .map(|raw| self.store.typed(raw))
            .collect()
    }

    /// The objects whose labels match `selector`, in `namespace` or (with `None`)
    /// everywhere, that the cache holds now.
    ///
    /// # Errors
    ///
    /// [`CacheError::Selector`] for an invalid selector; otherwise as [`list`](Self::list).
    pub fn select(
        &self,
        namespace: Option<&str>,
        selector: &LabelSelector,
    ) -> Result<Vec<Arc<K>>, CacheError> {
        let mut out = Vec::new();
        for part in self.store.parts.iter() {
            let lister = part.informer.lister();
            let found = match namespace {
                Some(ns) if part.covers(ns) => lister.namespaced(ns).select(selector)?,
                Some(_) => continue,
                None => lister.select(selector)?,
            };
            for raw in found {
                out.push(self.store.typed(&raw)?);
            }
        }
        Ok(out)
    }

    /// The objects whose index `index` holds `value`, that the cache holds now.
    ///
    /// # Errors
    ///
    /// [`CacheError::Index`] if there is no such index; otherwise as [`list`](Self::list).
    pub fn by_index(&self, index: &str, value: &str) -> Result<Vec<Arc<K>>, CacheError> {
        let mut out = Vec::new();
        for part in self.store.parts.iter() {
            for raw in part.informer.lister().by_index(index, value)? {
                out.push(self.store.typed(&raw)?);
            }
        }
        Ok(out)
    }
}

impl<K> Part<K> {
    fn covers(&self, namespace: &str) -> bool {
        self.namespace.as_deref().is_none_or(|ns| ns == namespace)
    }
}

/// The typed form of a cached object: the kept one if a read kept it, otherwise decoded,
/// and kept if `keep`.
pub(crate) fn typed<K: CachedKind>(raw: &Raw<K>, keep: bool) -> Result<Arc<K>, CacheError> {
    let typed = if keep || raw.is_decoded() {
        raw.typed()
    } else {
        raw.decode().map(Arc::new)
    };
    typed.map_err(|source| CacheError::Decode {
        kind: kind_name::<K>(),
        key: informer::key_of(raw).to_string(),
        source,
    })
}

/// `group/version/Kind`, or `version/Kind` for the core group.
pub(crate) fn kind_name<K: k8s_openapi::Resource>() -> String {
    match K::GROUP {
        "" => format!("{}/{}", K::VERSION, K::KIND),
        group => format!("{group}/{}/{}", K::VERSION, K::KIND),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn raw() -> Raw<ConfigMap> {
        Raw::from_json(r#"{"metadata":{"name":"web","namespace":"prod"},"data":{"a":"1"}}"#)
            .unwrap()
    }

    fn offline_client() -> Client {
        let config = crate::config::Config {
            cluster_url: http::Uri::from_static("http://offline.invalid"),
            default_namespace: "default".to_owned(),
            root_certs: Vec::new(),
            accept_invalid_certs: false,
            tls_server_name: None,
            identity: None,
            auth: crate::config::Auth::None,
            source: "test".to_owned(),
        };
        Client::new(config, Default::default()).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_of_a_kind_that_never_syncs_fails_naming_it_never_answers_empty() {
        let options = CacheOptions {
            sync_timeout: Duration::from_secs(3),
            ..CacheOptions::default()
        };
        let cache = Cache::new(offline_client(), options);
        let store = cache.store::<ConfigMap>().unwrap();
        let err = store.get("prod", "web").await.unwrap_err();
        assert!(
            matches!(&err, CacheError::NotSynced { kind, after }
                if kind == "v1/ConfigMap" && *after == Duration::from_secs(3)),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .starts_with("cannot read v1/ConfigMap: its cache has not synced after 3s"),
            "{err}"
        );
        assert!(matches!(
            store.list().await,
            Err(CacheError::NotSynced { .. })
        ));
        // The read that does not wait answers what is there: nothing yet.
        assert!(store.now().list().unwrap().is_empty());
    }

    #[test]
    fn the_empty_namespace_means_every_namespace() {
        let options = CacheOptions {
            namespaces: vec![String::new()],
            ..CacheOptions::default()
        };
        let cache = Cache::new(offline_client(), options);
        let store = cache.store::<ConfigMap>().unwrap();
        assert_eq!(store.parts.len(), 1);
        assert!(store.parts[0].namespace.is_none());
        assert!(store.part_for("prod").is_some());
        assert_eq!(cache.informers()[0].namespace, None);
    }

    #[test]
    fn a_recording_client_makes_reads_wait_unless_turned_off() {
        let client = offline_client().recording_writes(Default::default());
        let on = Cache::new(client.clone(), CacheOptions::default());
        on.store::<ConfigMap>().unwrap();
        assert!(on.inner.reads.writes.is_some());
        let off = CacheOptions {
            read_your_writes: false,
            ..CacheOptions::default()
        };
        assert!(Cache::new(client, off).inner.reads.writes.is_none());
        let plain = Cache::new(offline_client(), CacheOptions::default());
        assert!(plain.inner.reads.writes.is_none());
    }

    #[test]
    fn the_read_metrics_are_exported_under_their_names() {
        let cache = Cache::new(offline_client(), CacheOptions::default());
        let metrics = crate::runtime::metrics::Metrics::new();
        cache.register_metrics(&metrics);
        let kind = vec![("kind".to_owned(), "v1/ConfigMap".to_owned())];
        cache
            .inner
            .reads
            .metrics
            .timeouts
            .get_or_create(&kind)
            .inc();
        let text = metrics.encode();
        assert!(
            text.contains(
                r#"controller_runtime_cache_read_your_writes_timeouts_total{kind="v1/ConfigMap"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains("controller_runtime_cache_read_your_writes_wait_seconds_count 0"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn the_task_local_switch_turns_the_wait_off_for_its_future_only() {
        assert!(reads_wait_for_writes());
        assert!(!without_read_your_writes(async { reads_wait_for_writes() }).await);
        assert!(with_read_your_writes(true, async { reads_wait_for_writes() }).await);
        assert!(reads_wait_for_writes());
    }

    #[test]
    fn metadata_only_keeps_the_type_and_the_metadata() {
        let mut raw: Raw<k8s_openapi::api::core::v1::Pod> = Raw::from_json(
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-1","namespace":"prod","labels":{"app":"web"}},"spec":{"containers":[{"name":"c"}]},"status":{"phase":"Running"}}"#,
        )
        .unwrap();
        metadata_only(&mut raw);
        assert_eq!(
            raw.json(),
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"labels":{"app":"web"},"name":"web-1","namespace":"prod"}}"#
        );
        use informer::Object;
        assert_eq!((raw.namespace(), raw.name()), (Some("prod"), "web-1"));
        let pod = typed(&raw, false).unwrap();
        assert_eq!(pod.spec, None);
        assert_eq!(pod.metadata.labels.as_ref().unwrap()["app"], "web");
    }

    #[test]
    fn a_transform_is_found_for_its_kind_only() {
        use k8s_openapi::api::core::v1::Pod;
        let options = CacheOptions::default().transform::<Pod>(metadata_only);
        assert!(options.transform_of::<Pod>().is_some());
        assert!(options.transform_of::<ConfigMap>().is_none());
    }

    #[test]
    fn reads_decode_afresh_and_keep_nothing_by_default() {
        let raw = raw();
        let first = typed(&raw, false).unwrap();
        let second = typed(&raw, false).unwrap();
        assert_eq!(first, second);
        assert!(!Arc::ptr_eq(&first, &second));
        assert!(!raw.is_decoded());
    }

    #[test]
    fn keeping_reads_return_the_kept_form_to_every_reader() {
        let raw = raw();
        let kept = typed(&raw, true).unwrap();
        assert!(raw.is_decoded());
        assert!(Arc::ptr_eq(&kept, &typed(&raw, true).unwrap()));
        // A store that does not keep still uses a form another one kept.
        assert!(Arc::ptr_eq(&kept, &typed(&raw, false).unwrap()));
    }

    #[test]
    fn an_object_that_does_not_decode_is_named_in_the_error() {
        let raw: Raw<ConfigMap> =
            Raw::from_json(r#"{"metadata":{"name":"web","namespace":"prod"},"data":7}"#).unwrap();
        let err = typed(&raw, false).unwrap_err().to_string();
        assert!(
            err.starts_with("cached v1/ConfigMap prod/web does not decode"),
            "{err}"
        );
    }
}
