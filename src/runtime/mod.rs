//! The controller runtime: a manager that runs controllers over a shared cache, with leader
//! election, metrics, health probes, events and the helpers a reconciler writes with
//! (controller-runtime's `manager`, `builder`, `controller`, `cache` and `controllerutil`).
//!
//! # Map
//!
//! * [`Manager`] — owns the [`Client`](crate::client::Client), the shared [`Cache`], the
//!   [`Metrics`] and every controller; starts them in controller-runtime's order (servers,
//!   caches, leader election, controllers) and stops them gracefully on SIGINT/SIGTERM.
//! * [`Cache`] and [`Store<K>`] — one informer per kind and namespace, holding each object
//!   once as [`Raw`](crate::client::Raw) JSON; typed reads return `Arc<K>`, decoded afresh
//!   (or kept, with [`CacheOptions::keep_typed`]). Reads wait for the kind's sync and for the
//!   manager's own writes (read-your-own-writes, on by default: a reconcile that just
//!   created an object finds it in the cache).
//! * [`Controller<K>`] — `for` kind `K`, [`owns`](Controller::owns) kinds it controls,
//!   [`watches`](Controller::watches) others through a mapping, filtered by [`Predicate`]s;
//!   [`complete`](Controller::complete) hands it to the manager with a reconcile function
//!   `async fn(Arc<K>, Arc<Ctx>) -> Result<Action, ReconcileError>`. Its queue puts live
//!   changes before an initial list or a resync ([`LOW_PRIORITY`]) and ages what waits, so
//!   nothing starves; [`reconcile_timeout`](Controller::reconcile_timeout) bounds a
//!   reconcile, [`stopping`] lets one see the manager stop, and
//!   [`on_delete`](Controller::on_delete) hands over the last state of an object that is
//!   gone. Controllers, runnables and webhook servers registered after the start run at once.
//! * [`flags`], [`logging`], [`preflight`] — kubebuilder's manager flags as one clap struct
//!   an operator flattens into its own, with a one-call run ([`ManagerArgs::run`]); logging
//!   set-up (text or JSON, `RUST_LOG`); and the check before start that every cached kind
//!   can be listed, which stops a configuration that cannot work with one line.
//! * [`leader_election`] — Lease-based leader election (15 s / 10 s / 2 s).
//! * [`debug`] — `/debug/controllers` on the metrics address (off by default;
//!   [`ManagerOptions::debug_pages`], `--enable-debug-pages`): a live page, and its JSON, of
//!   each controller's queue, keys in flight and waiting with their backoff, last reconciles,
//!   each informer's cache, the lease, and one key's story (`debug/page.rs`: the HTML and
//!   its polling script).
//! * [`metrics`] and [`server`] — `/metrics` with controller-runtime's metric names, and
//!   `/healthz` and `/readyz` with its response format (`server/{health, metrics,
//!   address}.rs`: the checks, the metrics server, the bind-address flags); [`auth`] —
//!   `/metrics` over HTTPS for scrapers the API server authenticates and authorizes
//!   (kubebuilder's `--metrics-secure`).
//! * The helpers a reconcile writes with: [`finalizer`] (the flow that holds a deletion
//!   until cleanup ran, with its optimistically locked writes), [`conditions`]
//!   (`metav1.Condition`s set by apimachinery's rules), [`status`] (a status write that
//!   skips an unchanged status), [`ops`] (`apply_cached` for owned objects,
//!   `create_or_update`, `retry_on_conflict`, server-side apply), [`owner`] (owner
//!   references), [`events`] (an events.k8s.io recorder) and [`ResourceExt`] (`name()` and
//!   `namespace()` on every typed object). [`crate::prelude`] imports them all at once.
//! * [`crd`] — CustomResourceDefinitions generated from Rust types, one version or
//!   several merged; [`conversion`] — the conversion webhook between those versions,
//!   through a hub version; [`rbac`] — the manager's ClusterRole generated from what its
//!   controllers declare and the runtime infers (kubebuilder's RBAC markers).
//! * [`webhook`] — admission webhooks over TLS: typed defaulting and validating functions,
//!   served with a certificate reloaded as its files change (`webhook/{admission, patch,
//!   handler, server}.rs`).
//! * [`shard`] — sharded controllers: replicas split a controller's objects by hash ranges,
//!   with one Lease per replica and a hand-over that never runs a key in two at once.
//! * `serve` and `certwatcher` (internal) — the one accept loop every server above runs on
//!   (TLS, HTTP/1.1 or HTTP/2 by ALPN, graceful stop), and the serving certificate reloaded
//!   when its files change, shared by the webhook and metrics servers.
//!
//! ```text
//!  kube-apiserver ──list/watch──▶ Cache: one informer per kind (Raw JSON) ──▶ Store<K>: Arc<K>
//!        ▲                               │ events                               ▲ typed reads
//!        │                               ▼                                      │
//!        │                  for / owns / watches ─▶ predicates ─▶ queue of keys │
//!        │                                                           │          │
//!        │                                       workers ─▶ reconcile(Arc<K>, ctx)
//!        └─────────────── writes (Client: apply, replace, status, events) ◀──┘
//! ```
//!
//! # Example: mirror every ConfigMap into a Secret it owns
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use controller_runtime::prelude::*;
//! use k8s_openapi::api::core::v1::{ConfigMap, Secret};
//! use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
//!
//! struct Ctx {
//!     client: Client,
//!     secrets: Store<Secret>,
//! }
//!
//! async fn reconcile(cm: Arc<ConfigMap>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
//!     let (ns, name) = (cm.namespace(), cm.name());
//!     let current = ctx.secrets.get(ns, name).await?;
//!     if current.is_some_and(|s| s.string_data.is_none() && same_data(&s, &cm)) {
//!         return Ok(Action::done()); // already mirrored
//!     }
//!     let secret = Secret {
//!         metadata: ObjectMeta {
//!             name: Some(name.to_owned()),
//!             namespace: Some(ns.to_owned()),
//!             owner_references: Some(vec![controller_reference(&*cm)?]),
//!             ..ObjectMeta::default()
//!         },
//!         string_data: cm.data.clone(),
//!         ..Secret::default()
//!     };
//!     Api::<Secret>::namespaced(ctx.client.clone(), ns)
//!         .patch(name, &PatchParams::apply("mirror").force(), &Patch::Apply(&secret))
//!         .await?;
//!     Ok(Action::done())
//! }
//!
//! fn same_data(secret: &Secret, cm: &ConfigMap) -> bool {
//!     let data = secret.data.clone().unwrap_or_default();
//!     let want = cm.data.clone().unwrap_or_default();
//!     data.len() == want.len()
//!         && want.iter().all(|(k, v)| data.get(k).is_some_and(|b| b.0 == v.as_bytes()))
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let manager = Manager::new(ManagerOptions::default()).await?;
//!     let ctx = Arc::new(Ctx { client: manager.client(), secrets: manager.store()? });
//!     Controller::<ConfigMap>::new(&manager).owns::<Secret>().complete(reconcile, ctx)?;
//!     manager.start().await?; // until SIGINT or SIGTERM
//!     Ok(())
//! }
//! ```
//!
//! The same wiring is one line in controller-runtime
//! (`NewControllerManagedBy(mgr).For(&ConfigMap{}).Owns(&Secret{}).Complete(r)`) and three in
//! kube-rs (`Controller::new(..).owns(..).run(reconcile, error_policy, ctx)`).
//!
//! # Speed that pays
//!
//! This layer adds no optimisation of its own beyond keeping one cached copy of each object,
//! as compact JSON, and decoding it only when read; an optimisation belongs here only if it moves
//! an end-to-end row of `make bench-runtime` (start to every object reconciled, memory) by
//! 10 % or more, with no `unsafe` and no hidden thread.

pub mod auth;
pub mod cache;
mod certwatcher;
pub mod conditions;
pub mod controller;
pub mod conversion;
pub mod crd;
pub mod debug;
pub mod events;
pub mod finalizer;
pub mod flags;
pub mod leader_election;
pub mod logging;
pub mod manager;
pub mod metrics;
pub mod ops;
pub mod owner;
pub mod predicate;
pub mod preflight;
pub mod rbac;
pub mod resource;
mod serve;
pub mod server;
pub mod shard;
pub mod status;
pub mod webhook;

pub use cache::{
    Cache, CacheError, CacheOptions, CachedInformer, KindTransform, Store, StoreNow, metadata_only,
    without_read_your_writes,
};
pub use controller::{
    Action, Controller, LOW_PRIORITY, ObjectRef, ReconcileError, deadline, is_stopping, stopping,
};
pub use flags::ManagerArgs;
pub use manager::{
    DEFAULT_MAX_CONCURRENT_RECONCILES, Manager, ManagerError, ManagerOptions, OnLeaseLost,
};
pub use metrics::Metrics;
pub use predicate::Predicate;
pub use preflight::PreflightError;
pub use resource::ResourceExt;
