//! client-go's `tools/cache` in Rust: the machinery that keeps a local, indexed copy of
//! Kubernetes objects in step with the API server.
//!
//! # Map
//!
//! * [`Object`] — what the cache holds: any type with an `ObjectMeta` (every `k8s-openapi`
//!   kind through a blanket impl; your own types by a one-line impl). Objects travel as
//!   `Arc<K>`, shared by the FIFO, the indexer and every handler — never deep-copied.
//! * [`Key`] — `namespace/name` or `name` ([`meta_key`], [`split_key`]), a shared string.
//! * [`DeletedFinalStateUnknown`] — the tombstone for a deletion a relist discovered.
//! * [`DeltaFifo`] — per-key [`Deltas`] in first-in first-out order of keys, fed by the
//!   reflector (`add`, `update`, `delete`, `replace`, `resync`) and drained by
//!   [`pop`](DeltaFifo::pop), which processes under the FIFO lock.
//! * [`Indexer`] — the thread-safe store with custom indices ([`IndexFunc`], the namespace
//!   index [`NAMESPACE_INDEX`]); the FIFO reads it back as its [`KnownObjects`].
//!
//! ```text
//!  ListerWatcher ──▶ Reflector ── add/update/delete ──▶ DeltaFifo ◀── resync (timer)
//!                         └────── replace(list) ──────▶  │  ▲
//!                                                         │  │ KnownObjects: list_keys,
//!                                       pop(process) ─────┘  │ get_by_key (deletions on
//!                                       under the FIFO lock  │ relist, resync)
//!                                                ▼           │
//!                            process: Deltas ──▶ Indexer ────┘ ──▶ listers, handlers
//! ```
//!
//! It knows nothing of HTTP: the `ListerWatcher` trait it defines is implemented by the root
//! crate with the real client, and by scripted fakes in tests.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use informer::{DeltaFifo, DeltaFifoOptions, DeltaType, Indexer, namespace_indexers};
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
//!
//! let cm = |ns: &str, name: &str| ConfigMap {
//!     metadata: ObjectMeta { namespace: Some(ns.into()), name: Some(name.into()), ..Default::default() },
//!     ..Default::default()
//! };
//! let indexer = Indexer::new(namespace_indexers());
//! let fifo = DeltaFifo::with_options(DeltaFifoOptions {
//!     known_objects: Some(Arc::new(indexer.clone())),
//!     emit_delta_type_replaced: true,
//!     ..DeltaFifoOptions::default()
//! });
//!
//! // The reflector lists two objects, then the watch reports a deletion.
//! fifo.replace([cm("a", "x"), cm("b", "y")], "10");
//! fifo.delete(cm("a", "x"));
//!
//! // The informer applies each key's deltas to the indexer, oldest first.
//! while let Some(()) = fifo.try_pop(|deltas, _is_in_initial_list| {
//!     for delta in &deltas {
//!         match (delta.kind, delta.object.object()) {
//!             (DeltaType::Deleted, _) => {
//!                 indexer.remove(deltas.key());
//!             }
//!             (_, Some(obj)) => {
//!                 indexer.insert(deltas.key(), obj.clone());
//!             }
//!             (_, None) => unreachable!("only Deleted deltas carry tombstones"),
//!         }
//!     }
//! }) {}
//!
//! assert!(fifo.has_synced());
//! assert_eq!(indexer.list_keys(), ["b/y".into()]);
//! assert_eq!(indexer.list_index_func_values("namespace"), ["b".into()]);
//! ```

mod backoff;
mod delta_fifo;
mod index;
pub mod lister_watcher;
mod object;
mod reflector;
mod store;

pub use backoff::Backoff;
pub use delta_fifo::{
    Delta, DeltaFifo, DeltaFifoOptions, DeltaObject, DeltaType, Deltas, DeltasIntoIter,
    KnownObjects, PopError, Transformer,
};
pub use index::{
    IndexError, IndexFunc, IndexValues, Indexers, NAMESPACE_INDEX, namespace_index_func,
    namespace_indexers,
};
pub use lister_watcher::{EventStream, ListOptions, ListPage, ListerWatcher, WatchOptions};
pub use object::{DeletedFinalStateUnknown, Key, KeyError, Object, key_of, meta_key, split_key};
pub use reflector::{LastSync, Reflector, ReflectorOptions, ReflectorStore, Trace, WatchEnd};
pub use store::Indexer;
