//! client-go's `tools/cache` in Rust: the machinery that keeps a local, indexed copy of
//! Kubernetes objects in step with the API server, and tells event handlers what changed.
//!
//! # Map
//!
//! * [`Object`] — what the cache holds, seen through its name, namespace, resourceVersion and
//!   labels: every `k8s-openapi` kind through a blanket impl, your own types (or the root
//!   crate's lazily decoded `Raw<K>`) by a four-method impl. Objects travel as
//!   `Arc<K>`, shared by the FIFO, the indexer and every handler — never deep-copied.
//! * [`Key`] — `namespace/name` or `name` ([`meta_key`], [`split_key`]), a shared string.
//! * [`ListerWatcher`] — lists pages and opens watches of one collection. The root crate
//!   implements it with the real client; tests implement it with scripts.
//! * [`Reflector`] — a list/watch state machine with client-go's resourceVersion, paging,
//!   WatchList, backoff and resync rules, writing into a [`ReflectorStore`].
//! * [`RealFifo`] — the informer's queue by default ([`FifoKind::InOrder`]): every watch
//!   event alone, in arrival order, a relist as one [`FifoItem::ReplacedAll`] and a resync as
//!   one [`FifoItem::SyncAll`], popped without its lock held while the informer works —
//!   client-go 1.36's queue.
//! * [`DeltaFifo`] — the classic queue ([`FifoKind::Delta`]): per-key [`Deltas`] in
//!   first-in first-out order of keys, fed by the reflector (`add`, `update`, `delete`,
//!   `replace`, `resync`) and drained by [`pop`](DeltaFifo::pop), which processes under the
//!   FIFO lock; see [Two queues](#two-queues). Both queues'
//!   `snapshot`s show what they hold ([`QueueSnapshot`]).
//! * [`DeletedFinalStateUnknown`] — the tombstone for a deletion a relist discovered.
//! * [`Indexer`] — the thread-safe store with custom indices ([`IndexFunc`], the namespace
//!   index [`NAMESPACE_INDEX`]); the DeltaFIFO reads it back as its [`KnownObjects`].
//! * [`SharedIndexInformer`] — a reflector, a queue and an indexer wired together, plus
//!   its *processor*: one unbounded buffer and one task per registered [`EventHandler`] (or
//!   [`HandlerFns`]), each with its own resync period and [`Registration::has_synced`]. Its
//!   pop hook ([`on_pop`](SharedIndexInformer::on_pop)) shows what each pop did ([`PopTrace`]);
//!   its [store resource version](SharedIndexInformer::store_resource_version) says how far
//!   the cache is up to date; a [`MetricsProvider`](metrics::MetricsProvider) sees its queue
//!   and its staleness ([`metrics`]).
//! * [`Lister`] and [`NamespaceLister`] — read-only queries on the cache: by key, namespace,
//!   index or label selector.
//!
//! ```text
//!  ListerWatcher ─▶ Reflector ─ add/update/delete, replace(list), bookmark ─▶ RealFifo
//!                       │                                                   ▲     │
//!                       └─ timer: handler due? ───────────────── resync() ──┘     │
//!                          (processor.should_resync)                              │
//!         ┌─ pop(process): one event, one whole relist (ReplacedAll) or a SyncAll,┘
//!         │  under the informer's mutex, not the queue's lock
//!         ▼
//!  SharedIndexInformer ─ deltas ─▶ Indexer ──▶ Lister, NamespaceLister
//!         │ (a relist's deletions     │
//!         │  are found here)          └──▶ store resource version (watermark)
//!         │ a Notification per handler (Arc clones, never waits)
//!         ▼
//!  processor ─┬─▶ buffer ─▶ task ─▶ EventHandler A  (Registration A)
//!             └─▶ buffer ─▶ task ─▶ EventHandler B  (Registration B)
//! ```
//!
//! With [`FifoKind::Delta`] the [`DeltaFifo`] sits where the RealFIFO is; it reads the
//! indexer back as its [`KnownObjects`] to find a relist's deletions and to resync, and the
//! informer processes each pop under the FIFO's lock.
//!
//! # One object, from LIST to a handler
//!
//! 1. The informer's [`run`](SharedIndexInformer::run) builds the [`RealFifo`] and starts
//!    the [`Reflector`], which calls [`ListerWatcher::list`]: a [`ListPage`] whose `items`
//!    hold our ConfigMap `ns/app`, an owned `K`.
//! 2. With every page in, the reflector calls [`ReflectorStore::replace`] on the queue.
//!    [`RealFifo::replace`] runs the informer's transform on the object, wraps it in the one
//!    `Arc<K>` everybody will share, allocates its [`Key`] `"ns/app"`, and queues the whole
//!    list as one [`FifoItem::ReplacedAll`].
//! 3. The informer's processing task [`pop`](RealFifo::pop)s it, with
//!    `is_in_initial_list = true`, and releases the queue's lock. Under its own mutex, it
//!    applies the relist in one step: nothing cached is missing from the list, so no
//!    tombstones; for `ns/app`, a `Replaced` [`Delta`]: it [`insert`](Indexer::insert)s the
//!    `Arc` into the indexer (reusing the key), finds the key was not cached, and hands an
//!    *add* notification — an `Arc` clone — to every registered handler's buffer. It never
//!    waits for a handler. Once the item is applied, [`SharedIndexInformer::has_synced`]
//!    turns true and the store resource version moves to the list's.
//! 4. Each handler's task takes the notification and calls
//!    [`EventHandler::on_add`]`(&obj, true)`. Once every initial add of a handler has
//!    returned, that handler's [`Registration::has_synced`] turns true.
//! 5. Meanwhile a [`Lister`] returns the very same `Arc` from the indexer.
//!
//! Later, a watch event `MODIFIED` becomes [`RealFifo::update`] → `Updated` →
//! `on_update(old, new)` for every handler. When some handler's resync period is due, the
//! reflector's timer queues a [`FifoItem::SyncAll`], and the informer re-delivers each cached
//! `Arc` as `Sync`; old and new then carry the same resourceVersion, so only the handlers
//! that are due get that `on_update`. And if the object is deleted while the watch is down,
//! the next relist no longer lists it: applying it, the informer finds `ns/app` cached but
//! not listed, removes it, and every handler gets [`on_delete`](EventHandler::on_delete) with
//! a [`DeletedFinalStateUnknown`] tombstone ([`DeletedObject::Tombstone`](DeltaObject::Tombstone)).
//!
//! # Two queues
//!
//! The queue between the reflector and the cache is chosen per informer by
//! [`InformerOptions::fifo`]. The default, the [`RealFifo`] ([`FifoKind::InOrder`]), is what
//! client-go's informers run since 1.36 (`InOrderInformers` GA, with `AtomicFIFO` and
//! `UnlockWhileProcessingFIFO`): a log of every event, popped one at a time in arrival
//! order. The [`DeltaFifo`] ([`FifoKind::Delta`]) is client-go's classic, kept because it
//! teaches how an informer can fall behind without falling over: one entry per key, holding
//! every delta the key received while it waited, popped together, keys in the order they
//! first arrived. Say the informer is behind the watch while `a` is added, `b` is added,
//! then `a` is updated and deleted:
//!
//! | pop | DeltaFIFO | RealFIFO |
//! |---|---|---|
//! | 1 | `a`: Added, Updated, Deleted | `a`: Added |
//! | 2 | `b`: Added | `b`: Added |
//! | 3 | | `a`: Updated |
//! | 4 | | `a`: Deleted |
//!
//! A handler hears the same notifications for each object — add, update, delete for `a` —
//! but in a different order across objects: with the DeltaFIFO all of `a` before `b`, with
//! the RealFIFO exactly as the server sent them. The RealFIFO also delivers a delete for a
//! key nobody knew (the DeltaFIFO drops it), and a relist deletes what is gone before it
//! applies the listed objects (the DeltaFIFO, after).
//!
//! How they keep the cache consistent differs. The DeltaFIFO finds a relist's deletions and
//! queues resyncs by reading the indexer when `replace` and `resync` are called, so it must
//! hold its lock while the informer applies a pop: otherwise it could read the indexer half
//! way through a pop. The RealFIFO never reads the indexer: a relist and a resync each enter
//! as one item, and the informer works out what they mean when it pops them, against the
//! indexer as every earlier item left it. So the RealFIFO releases its lock while the
//! informer applies an item, and the reflector keeps queueing meanwhile. Either way the
//! informer applies a pop and hands out its notifications under its own mutex, which adding
//! a handler also takes, so `has_synced`, resyncs and late handlers behave alike.
//!
//! They also differ in how far the [store resource
//! version](SharedIndexInformer::store_resource_version) can follow: the RealFIFO's moves
//! with every applied event; the DeltaFIFO's only when its queue empties.
//!
//! # Example
//!
//! An informer over a one-page, in-memory collection:
//!
//! ```
//! use std::sync::Arc;
//! use informer::lister_watcher::{Result, WatchEvent};
//! use informer::{
//!     EventStream, HandlerFns, InformerOptions, ListOptions, ListPage, ListerWatcher,
//!     SharedIndexInformer, WatchOptions,
//! };
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
//!
//! /// Lists two ConfigMaps; its watches never report anything.
//! struct TwoConfigMaps;
//! struct Quiet;
//!
//! impl EventStream<ConfigMap> for Quiet {
//!     async fn next(&mut self) -> Option<Result<WatchEvent<ConfigMap>>> {
//!         std::future::pending().await
//!     }
//! }
//!
//! impl ListerWatcher<ConfigMap> for TwoConfigMaps {
//!     type Stream = Quiet;
//!     async fn list(&self, _: &ListOptions) -> Result<ListPage<ConfigMap>> {
//!         let cm = |name: &str| ConfigMap {
//!             metadata: ObjectMeta {
//!                 namespace: Some("ns".into()),
//!                 name: Some(name.into()),
//!                 resource_version: Some("1".into()),
//!                 ..Default::default()
//!             },
//!             ..Default::default()
//!         };
//!         Ok(ListPage { items: vec![cm("a"), cm("b")], resource_version: "1".into(), continue_token: None })
//!     }
//!     async fn watch(&self, _: &WatchOptions) -> Result<Quiet> {
//!         Ok(Quiet)
//!     }
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! let mut options = InformerOptions::named("configmaps");
//! options.reflector.watch_list = false;
//! let informer = SharedIndexInformer::new(TwoConfigMaps, options);
//! let (seen, mut heard) = tokio::sync::mpsc::unbounded_channel();
//! let registration = informer
//!     .add_event_handler(HandlerFns::<ConfigMap>::new().with_add(move |cm, initial| {
//!         let _ = seen.send((cm.clone(), initial));
//!     }))
//!     .unwrap();
//!
//! let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
//! let run = informer.run(async { let _ = stopped.await; });
//! let check = async {
//!     informer.wait_synced().await;
//!     registration.wait_synced().await;
//!     let lister = informer.lister();
//!     assert_eq!(lister.list().len(), 2);
//!     for _ in 0..2 {
//!         let (cm, initial) = heard.recv().await.unwrap();
//!         assert!(initial, "both came with the first list");
//!         // The handler got the cache's own allocation, not a copy.
//!         let name = cm.metadata.name.as_deref().unwrap();
//!         assert!(Arc::ptr_eq(&cm, &lister.namespaced("ns").get(name).unwrap()));
//!     }
//!     stop.send(()).unwrap();
//! };
//! tokio::join!(run, check);
//! assert!(informer.is_stopped());
//! # });
//! ```

mod backoff;
mod delta_fifo;
mod handler;
mod index;
mod lister;
pub mod lister_watcher;
pub mod metrics;
mod object;
mod processor;
mod real_fifo;
mod reflector;
mod shared_informer;
mod store;
mod synced;
mod watermark;

pub use backoff::{Backoff, BackoffOptions};
pub use delta_fifo::{
    Delta, DeltaFifo, DeltaFifoOptions, DeltaObject, DeltaType, Deltas, DeltasIntoIter,
    KnownObjects, PopError, QueueSnapshot, QueuedDelta, Transformer,
};
pub use handler::{DeletedObject, EventHandler, HandlerFns};
pub use index::{
    IndexError, IndexFunc, IndexValues, Indexers, NAMESPACE_INDEX, namespace_index_func,
    namespace_indexers,
};
pub use lister::{Lister, NamespaceLister, SelectorError, selector_matches};
pub use lister_watcher::{EventStream, ListOptions, ListPage, ListerWatcher, WatchOptions};
pub use object::{
    DeletedFinalStateUnknown, Key, KeyError, Object, key_of, meta, meta_key, split_key,
};
pub use processor::{MINIMUM_RESYNC_PERIOD, Registration, determine_resync_period};
pub use real_fifo::{FifoItem, RealFifo};
pub use reflector::{LastSync, Reflector, ReflectorOptions, ReflectorStore, Trace, WatchEnd};
pub use shared_informer::{
    FifoKind, InformerError, InformerOptions, PopAction, PopStep, PopTrace, SharedIndexInformer,
    WatchErrorHandler,
};
pub use store::Indexer;
