//! What a shared informer calls when its cache changes: the [`EventHandler`] trait, the
//! closure-based [`HandlerFns`], and [`DeletedObject`], what a deletion hands over.

use std::fmt;
use std::sync::Arc;

use crate::delta_fifo::DeltaObject;

/// What [`EventHandler::on_delete`] receives: the deleted object as the watch reported it, or
/// a [`DeletedFinalStateUnknown`](crate::DeletedFinalStateUnknown) tombstone when a relist
/// found the object gone (the deletion happened while the watch was down, and its final state
/// is unknown).
///
/// It is the [`DeltaObject`] the deletion's delta carried, handed on unchanged:
/// [`object`](DeltaObject::object) gives the object or the tombstone's last known state,
/// [`key`](DeltaObject::key) the key either way.
///
/// ```
/// use std::sync::Arc;
/// use informer::{DeletedObject, EventHandler};
/// use k8s_openapi::api::core::v1::ConfigMap;
///
/// struct LogDeletes;
///
/// impl EventHandler<ConfigMap> for LogDeletes {
///     fn on_delete(&self, obj: &DeletedObject<ConfigMap>) {
///         match obj {
///             DeletedObject::Object(cm) => println!("deleted {:?}", cm.metadata.name),
///             DeletedObject::Tombstone(t) => println!("{} vanished while we were away", t.key),
///         }
///     }
/// }
/// # let _ = LogDeletes;
/// ```
pub type DeletedObject<K> = DeltaObject<K>;

/// Receives a shared informer's notifications (client-go's `ResourceEventHandler`).
///
/// Register one with
/// [`SharedIndexInformer::add_event_handler`](crate::SharedIndexInformer::add_event_handler).
/// Every method has a default that does nothing, so implement only what you need.
///
/// # Contract
///
/// * **One at a time, in order.** Each registration has its own buffer and its own task:
///   its handler is called by that task only, one notification after another, in the order the
///   informer produced them. Registrations do not wait for each other, and the informer never
///   waits for any of them.
/// * **Runs on the tokio runtime.** A handler is called synchronously from an async task, so
///   it must not block: hand work on (add the key to a workqueue, send on a channel) and
///   return. A handler that blocks holds a runtime worker thread for as long as it blocks,
///   and a task waiting in that worker's queue waits with it. A handler that must block
///   wraps the blocking part in `tokio::task::block_in_place` (multi-threaded runtime),
///   which hands the worker's queue to another thread first.
/// * **Objects are shared.** The `Arc`s are the cache's own: the indexer, the DeltaFIFO and every
///   handler hold the same allocation. Nothing is copied per handler or per event, and nothing
///   can be mutated.
/// * **A panic is contained.** It is caught and logged; the notification is skipped, the
///   registration pauses for a second (as client-go's listener does) and goes on with the next
///   one. Other registrations are not affected.
pub trait EventHandler<K>: Send + 'static {
    /// An object entered the cache. `is_in_initial_list` is true for objects of the
    /// informer's first list, and for the synthetic adds a handler registered late receives
    /// for everything already cached.
    fn on_add(&self, obj: &Arc<K>, is_in_initial_list: bool) {
        let _ = (obj, is_in_initial_list);
    }

    /// A cached object changed. When `old` and `new` have the same `resourceVersion` this is a
    /// resync, which only registrations whose resync period is due receive.
    fn on_update(&self, old: &Arc<K>, new: &Arc<K>) {
        let _ = (old, new);
    }

    /// An object left the cache: its last state, or a tombstone (see [`DeletedObject`]).
    fn on_delete(&self, obj: &DeletedObject<K>) {
        let _ = obj;
    }
}

impl<K, H> EventHandler<K> for Arc<H>
where
    H: EventHandler<K> + Sync,
{
    fn on_add(&self, obj: &Arc<K>, is_in_initial_list: bool) {
        (**self).on_add(obj, is_in_initial_list);
    }

    fn on_update(&self, old: &Arc<K>, new: &Arc<K>) {
        (**self).on_update(old, new);
    }

    fn on_delete(&self, obj: &DeletedObject<K>) {
        (**self).on_delete(obj);
    }
}

type AddFn<K> = Box<dyn Fn(&Arc<K>, bool) + Send>;
type UpdateFn<K> = Box<dyn Fn(&Arc<K>, &Arc<K>) + Send>;
type DeleteFn<K> = Box<dyn Fn(&DeletedObject<K>) + Send>;

/// An [`EventHandler`] made of closures (client-go's `ResourceEventHandlerDetailedFuncs`);
/// a notification without a closure is ignored.
///
/// ```
/// use informer::HandlerFns;
/// use k8s_openapi::api::core::v1::ConfigMap;
///
/// let handler = HandlerFns::<ConfigMap>::new()
///     .with_add(|cm, initial| println!("add {:?} (initial list: {initial})", cm.metadata.name))
///     .with_delete(|obj| println!("delete {}", obj.key()));
/// # let _ = handler;
/// ```
pub struct HandlerFns<K> {
    add: Option<AddFn<K>>,
    update: Option<UpdateFn<K>>,
    delete: Option<DeleteFn<K>>,
}

impl<K> Default for HandlerFns<K> {
    fn default() -> Self {
        HandlerFns {
            add: None,
            update: None,
            delete: None,
        }
    }
}

impl<K> fmt::Debug for HandlerFns<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandlerFns")
            .field("add", &self.add.is_some())
            .field("update", &self.update.is_some())
            .field("delete", &self.delete.is_some())
            .finish()
    }
}

impl<K> HandlerFns<K> {
    /// A handler that ignores everything, until closures are added.
    pub fn new() -> Self {
        Self::default()
    }

    /// Calls `f(obj, is_in_initial_list)` on every add.
    pub fn with_add(mut self, f: impl Fn(&Arc<K>, bool) + Send + 'static) -> Self {
        self.add = Some(Box::new(f));
        self
    }

    /// Calls `f(old, new)` on every update, resyncs included.
    pub fn with_update(mut self, f: impl Fn(&Arc<K>, &Arc<K>) + Send + 'static) -> Self {
        self.update = Some(Box::new(f));
        self
    }

    /// Calls `f(obj)` on every delete.
    pub fn with_delete(mut self, f: impl Fn(&DeletedObject<K>) + Send + 'static) -> Self {
        self.delete = Some(Box::new(f));
        self
    }
}

impl<K: 'static> EventHandler<K> for HandlerFns<K> {
    fn on_add(&self, obj: &Arc<K>, is_in_initial_list: bool) {
        if let Some(f) = &self.add {
            f(obj, is_in_initial_list);
        }
    }

    fn on_update(&self, old: &Arc<K>, new: &Arc<K>) {
        if let Some(f) = &self.update {
            f(old, new);
        }
    }

    fn on_delete(&self, obj: &DeletedObject<K>) {
        if let Some(f) = &self.delete {
            f(obj);
        }
    }
}
