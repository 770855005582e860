//! A Kubernetes controller runtime on raw HTTP.
//!
//! The crate holds the layers above the informer and the workqueue:
//!
//! - [`config`]: where a client's settings come from: kubeconfig files (merged as kubectl
//!   merges them, contexts, certificates, tokens, exec plugins) and the in-cluster service
//!   account. [`config::Config`] is the resolved result; [`config::Credentials`] refreshes
//!   tokens at request time.
//! - [`client`]: the API client on hyper and rustls: a [`client::Client`] (one pooled
//!   connection, HTTP/2 when offered, a client-side rate limit, 429 retries), the typed
//!   [`client::Api`] with every verb, watches decoded frame by frame, and a dynamic API for
//!   kinds resolved through discovery.
//! - [`informers`]: the [`informers::InformerFactory`], which makes one shared informer per
//!   kind and namespace on the client (a [`informer::SharedIndexInformer`] over an
//!   [`client::ApiListerWatcher`]), starts them together and waits for their caches.
//! - [`runtime`]: the controller runtime: the [`runtime::Manager`] (servers, cache, leader
//!   election, controllers, graceful stop), [`runtime::Controller`] with its predicates and
//!   workers, the typed [`runtime::Store`] over a cache of [`client::Raw`] objects, metrics,
//!   probes, events, owner references, CRDs derived from Rust types ([`CustomResource`]),
//!   and the helpers a reconcile writes with: the finalizer flow, status conditions, status
//!   and owned-object writes that skip what is unchanged.
//! - [`prelude`]: all a controller author imports, in one `use`.
//!
//! ```text
//!  kubeconfig / service account ──▶ Config ──▶ Client ──▶ Api<K> ──▶ kube-apiserver
//!                                                            │ list + watch
//!                                                            ▼
//!                 informer (reflector → DeltaFIFO → indexer) ──▶ handlers ──▶ workqueue
//!                                                                                │
//!                        reconciler ◀── controller workers ◀─────────────────────┘
//!                         (runtime: Manager, Controller, Store)
//! ```
//!
//! A controller, wired in one line (see [`runtime`] for a whole one):
//!
//! ```no_run
//! use std::sync::Arc;
//! use controller_runtime::runtime::{Action, Controller, Manager, ReconcileError};
//! use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
//!
//! async fn reconcile(d: Arc<Deployment>, _ctx: Arc<()>) -> Result<Action, ReconcileError> {
//!     println!("{:?} wants {:?} replicas", d.metadata.name, d.spec.as_ref().and_then(|s| s.replicas));
//!     Ok(Action::done())
//! }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let manager = Manager::new(Default::default()).await?;
//! Controller::<Deployment>::new(&manager).owns::<ReplicaSet>().complete(reconcile, Arc::new(()))?;
//! manager.start().await?; // until SIGINT or SIGTERM
//! # Ok(())
//! # }
//! ```
//!
//! The client alone:
//!
//! ```no_run
//! use controller_runtime::client::{Api, Client, ListParams};
//! use k8s_openapi::api::core::v1::Pod;
//!
//! # async fn run() -> controller_runtime::client::Result<()> {
//! let client = Client::try_default().await?;
//! let pods: Api<Pod> = Api::default_namespaced(client);
//! let page = pods.list(&ListParams::default().limit(10)).await?;
//! println!("{} pods at resourceVersion {:?}", page.items.len(), page.metadata.resource_version);
//! # Ok(())
//! # }
//! ```

pub mod client;
pub mod config;
#[doc(hidden)]
pub mod fuzzing;
pub mod informers;
pub mod runtime;

pub use informer;
pub use runtime::crd::CustomResource;
pub use workqueue;

/// What a controller author needs, in one `use controller_runtime::prelude::*;`: the
/// manager, its standard flags ([`ManagerArgs`](runtime::ManagerArgs)) and controller, the
/// RBAC rules a controller declares, the cache's stores, the client, the `CustomResource` derive and
/// trait, [`ResourceExt`](runtime::ResourceExt)'s `name()` and `namespace()`, and the
/// helpers a reconcile writes with (the [`finalizer`](runtime::finalizer::finalizer) flow,
/// [`conditions`](runtime::conditions), [`status`](runtime::status), [`ops`](runtime::ops),
/// owner references, the events recorder).
///
/// ```no_run
/// use std::sync::Arc;
///
/// use controller_runtime::prelude::*;
/// use k8s_openapi::api::core::v1::{ConfigMap, Secret};
///
/// async fn reconcile(cm: Arc<ConfigMap>, client: Arc<Client>) -> Result<Action, ReconcileError> {
///     let secrets = Api::<Secret>::namespaced((*client).clone(), cm.namespace());
///     let secret = secrets.get_opt(cm.name()).await?;
///     println!("{} has a secret: {}", ObjectRef::from_obj(&*cm).key(), secret.is_some());
///     Ok(Action::done())
/// }
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let manager = Manager::new(ManagerOptions::default()).await?;
/// let ctx = Arc::new(manager.client());
/// Controller::<ConfigMap>::new(&manager).owns::<Secret>().complete(reconcile, ctx)?;
/// manager.start().await?;
/// # Ok(())
/// # }
/// ```
pub mod prelude {
    pub use crate::CustomResource;
    pub use crate::client::{Api, Client, ListParams, Patch, PatchParams, PostParams};
    pub use crate::runtime::events::{EventType, Recorder, object_reference};
    pub use crate::runtime::finalizer::{Event, finalizer};
    pub use crate::runtime::owner::controller_reference;
    pub use crate::runtime::rbac::{Rule, Verb};
    pub use crate::runtime::status::HasStatus;
    pub use crate::runtime::{
        Action, Controller, Manager, ManagerArgs, ManagerOptions, ObjectRef, Predicate,
        ReconcileError, ResourceExt, Store, conditions, ops, status,
    };
    pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
}
