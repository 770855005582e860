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
//! # Reads are from the cache; writes go to the server
//!
//! A read returns what the watch last delivered, which may be older than a write this
//! process just made: after `replace` returns resourceVersion 12, the cache may still hold
//! 11 for a few milliseconds. Two things help:
//!
//! * a write returns the object the server stored; use it (and its resourceVersion) rather
//!   than re-reading the cache;
//! * a write from a stale read fails with 409 Conflict (the server checks the
//!   resourceVersion); return the error to be retried with backoff, or wrap the
//!   read-modify-write in [`retry_on_conflict`](super::ops::retry_on_conflict), re-reading
//!   from the API server.
//!
//! A reconcile that returns without writing converges anyway: the watch event of its write
//! queues the object again, and that reconcile reads the newer state.

use std::any::Any;
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use informer::{
    IndexError, IndexFunc, IndexValues, Indexers, InformerError, Lister, SelectorError,
    SharedIndexInformer,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use tokio::sync::watch;

use crate::client::{ApiResource, Client, Raw, Selector};
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
    /// namespace with one watch per kind. Cluster-scoped kinds are always cached whole.
    pub namespaces: Vec<String>,
    /// Drop `metadata.managedFields` from cached objects. Default true.
    pub strip_managed_fields: bool,
    /// How often every handler is told about every cached object again; zero (the default)
    /// never. controller-runtime's `SyncPeriod`.
    pub resync: Duration,
    /// How long [`Cache::wait_for_sync`] waits for each informer. Default 2 minutes, as
    /// controller-runtime's `CacheSyncTimeout`.
    pub sync_timeout: Duration,
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
    /// The informers made so far, for waiting and naming, with their last error.
    informers: Mutex<Vec<Tracked>>,
    /// Set once started: the shutdown later informers start with.
    started: Mutex<Option<watch::Receiver<bool>>>,
}

/// An informer the cache watches over.
struct Tracked {
    name: String,
    /// What it lists and watches, for [`Cache::informers`].
    listed: CachedInformer,
    synced: Box<dyn Fn() -> bool + Send + Sync>,
    wait: Arc<dyn Fn() -> BoxFuture + Send + Sync>,
    last_error: Arc<Mutex<Option<String>>>,
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
    /// A cache over `client` with `options`; nothing is listed until it starts.
    pub fn new(client: Client, options: CacheOptions) -> Self {
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
        let factories = if options.namespaces.is_empty() {
            vec![factory(None)]
        } else {
            options
                .namespaces
                .iter()
                .map(|ns| factory(Some(ns)))
                .collect()
        };
        Cache {
            inner: Arc::new(Inner {
                factories,
                options,
                informers: Mutex::new(Vec::new()),
                started: Mutex::new(None),
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
                .then(|| self.inner.options.namespaces.get(parts.len()).cloned())
                .flatten();
            if !informer.is_started() && self.track(&informer, namespace.clone()) {
                made = true;
            }
            parts.push(Part {
                namespace,
                informer,
            });
        }
        if made && let Some(stopping) = self.inner.started.lock().clone() {
            self.start_factories(stopping);
        }
        Ok(Store {
            parts: parts.into(),
            keep: self.inner.options.keep_typed,
        })
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
        let (synced, waited) = (informer.clone(), informer.clone());
        informers.push(Tracked {
            name,
            listed,
            synced: Box::new(move || synced.has_synced()),
            wait: Arc::new(move || {
                let informer = waited.clone();
                Box::pin(async move { informer.wait_synced().await })
            }),
            last_error,
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
}

/// Typed reads of one kind from the cache: `Arc<K>`s decoded from the cached JSON, and kept
/// beside it if [`CacheOptions::keep_typed`] says so.
///
/// Obtained from [`Cache::store`] (or the manager's `store`). Cheap to clone.
///
/// ```no_run
/// # use controller_runtime::runtime::cache::{Cache, CacheError};
/// use k8s_openapi::api::apps::v1::Deployment;
/// # fn run(cache: &Cache) -> Result<(), CacheError> {
/// let deployments = cache.store::<Deployment>()?;
/// if let Some(web) = deployments.get("prod", "web")? {
///     println!("{:?}", web.spec.as_ref().and_then(|s| s.replicas));
/// }
/// # Ok(())
/// # }
/// ```
pub struct Store<K> {
    parts: Arc<[Part<K>]>,
    /// Whether reads keep the typed form beside the JSON ([`CacheOptions::keep_typed`]).
    keep: bool,
}

impl<K> Clone for Store<K> {
    fn clone(&self) -> Self {
        Store {
            parts: self.parts.clone(),
            keep: self.keep,
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

impl<K: CachedKind> Store<K> {
    /// The object `namespace/name` (`name` alone, with `namespace` empty, for a
    /// cluster-scoped kind).
    ///
    /// # Errors
    ///
    /// [`CacheError::Decode`] if the cached object does not decode into `K`.
    pub fn get(&self, namespace: &str, name: &str) -> Result<Option<Arc<K>>, CacheError> {
        self.raw(namespace, name)
            .map(|raw| self.typed(&raw))
            .transpose()
    }

    /// The object under `key` (`namespace/name` or `name`).
    ///
    /// # Errors
    ///
    /// As [`get`](Self::get).
    pub fn get_key(&self, key: &str) -> Result<Option<Arc<K>>, CacheError> {
        let (namespace, name) = informer::split_key(key).unwrap_or(("", key));
        self.get(namespace, name)
    }

    /// The cached JSON of `namespace/name`, for reading routing facts without a decode.
    pub fn raw(&self, namespace: &str, name: &str) -> Option<Arc<Raw<K>>> {
        let part = self.part_for(namespace)?;
        let lister = part.informer.lister();
        if namespace.is_empty() {
            lister.get(name)
        } else {
            lister.namespaced(namespace).get(name)
        }
    }

    /// Every cached object.
    ///
    /// # Errors
    ///
    /// As [`get`](Self::get), for the first object that does not decode.
    pub fn list(&self) -> Result<Vec<Arc<K>>, CacheError> {
        let mut out = Vec::new();
        for part in self.parts.iter() {
            for raw in part.informer.lister().list() {
                out.push(self.typed(&raw)?);
            }
        }
        Ok(out)
    }

    /// The cached objects in `namespace`.
    ///
    /// # Errors
    ///
    /// As [`list`](Self::list).
    pub fn list_in(&self, namespace: &str) -> Result<Vec<Arc<K>>, CacheError> {
        let Some(part) = self.part_for(namespace) else {
            return Ok(Vec::new());
        };
        part.informer
            .lister()
            .namespaced(namespace)
            .list()
            .iter()
            .map(|raw| self.typed(raw))
            .collect()
    }

    /// The cached objects whose labels match `selector`, in `namespace` or (with `None`)
    /// everywhere.
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
        for part in self.parts.iter() {
            let lister = part.informer.lister();
            let found = match namespace {
                Some(ns) if part.covers(ns) => lister.namespaced(ns).select(selector)?,
                Some(_) => continue,
                None => lister.select(selector)?,
            };
            for raw in found {
                out.push(self.typed(&raw)?);
            }
        }
        Ok(out)
    }

    /// The cached objects whose index `index` holds `value`.
    ///
    /// # Errors
    ///
    /// [`CacheError::Index`] if there is no such index; otherwise as [`list`](Self::list).
    pub fn by_index(&self, index: &str, value: &str) -> Result<Vec<Arc<K>>, CacheError> {
        let mut out = Vec::new();
        for part in self.parts.iter() {
            for raw in part.informer.lister().by_index(index, value)? {
                out.push(self.typed(&raw)?);
            }
        }
        Ok(out)
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
