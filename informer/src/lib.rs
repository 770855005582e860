//! client-go's `tools/cache` in Rust: the machinery that keeps a local, indexed copy of
//! Kubernetes objects in step with the API server.
//!
//! This crate will hold, with client-go's exact semantics:
//!
//! - the thread-safe store and indexer, with custom index functions;
//! - the DeltaFIFO, which queues per-object deltas in first-in first-out order of keys;
//! - the reflector, a documented list-and-watch state machine;
//! - the shared index informer, which fans notifications out to many handlers;
//! - the lister, and a factory that shares one informer per resource.
//!
//! ```text
//!  ListerWatcher ──▶ Reflector ──▶ DeltaFIFO ──pop──▶ Indexer ──▶ handlers
//! ```
//!
//! It knows nothing of HTTP: the `ListerWatcher` trait it defines is implemented by the root
//! crate with the real client, and by scripted fakes in tests.

mod backoff;
pub mod lister_watcher;
mod object;
mod reflector;

pub use backoff::Backoff;
pub use lister_watcher::{EventStream, ListOptions, ListPage, ListerWatcher, WatchOptions};
pub use object::{DeletedFinalStateUnknown, Key, KeyError, Object, key_of, meta_key, split_key};
pub use reflector::{LastSync, Reflector, ReflectorOptions, ReflectorStore, Trace, WatchEnd};
