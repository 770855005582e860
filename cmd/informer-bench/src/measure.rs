//! The measurements, generic over the cached object type: a paged LIST decoded page by
//! page; a fresh informer from start to synced, with the heap it holds afterwards; and typed
//! reads of every object a `Raw` informer holds, twice.

use std::sync::Arc;
use std::time::{Duration, Instant};

use controller_runtime::client::{Api, Client, Error, ListParams, Raw, Result};
use controller_runtime::informer::{Object, SharedIndexInformer};
use controller_runtime::informers::{FactoryResource, InformerFactory};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use serde::de::DeserializeOwned;

/// A representation of a namespaced kind that the bench can list and cache: anything the
/// informer factory serves, plus a way to drop `metadata.managedFields`.
///
/// Every measurement is generic over it, so a second representation of the same kind (say,
/// a lazily decoded ConfigMap) needs only an impl of this trait and one more arm where
/// `main.rs` picks the type.
pub trait BenchObject:
    FactoryResource + k8s_openapi::Resource<Scope = NamespaceResourceScope>
{
    /// Drops `metadata.managedFields`: what the stripping transform does to every object
    /// before it is cached.
    fn strip_managed_fields(&mut self);
}

/// Implements [`BenchObject`] for `k8s-openapi` kinds, whose metadata is a plain field.
macro_rules! typed_bench_object {
    ($($kind:ty),*) => {$(
        impl BenchObject for $kind {
            fn strip_managed_fields(&mut self) {
                self.metadata.managed_fields = None;
            }
        }
    )*};
}

typed_bench_object!(ConfigMap, Pod);

impl<K> BenchObject for Raw<K>
where
    K: k8s_openapi::Resource<Scope = NamespaceResourceScope> + Send + Sync + 'static,
{
    fn strip_managed_fields(&mut self) {
        Raw::strip_managed_fields(self);
    }
}

/// What one paged LIST found and how long it took.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ListOutcome {
    /// Pages requested.
    pub pages: usize,
    /// Objects decoded, over all pages.
    pub items: usize,
    /// From the first request to the last page decoded.
    pub elapsed: Duration,
}

/// Lists every `K` in `api`'s namespace, `page_size` at a time following `continue` tokens,
/// decoding each page into typed objects and dropping it before asking for the next: the
/// floor an informer's initial sync is measured against.
///
/// The pages ask for no resourceVersion, so the first one is a consistent read.
///
/// # Errors
///
/// The first error of any page.
///
/// # Cancel safety
///
/// Cancelling abandons the list; nothing is left behind.
pub async fn paged_list<K: BenchObject>(api: &Api<K>, page_size: u32) -> Result<ListOutcome> {
    let start = Instant::now();
    let mut params = ListParams::default().limit(page_size);
    let (mut pages, mut items) = (0, 0);
    loop {
        let page = api.list(&params).await?;
        pages += 1;
        items += page.items.len();
        match page.metadata.continue_.filter(|t| !t.is_empty()) {
            Some(token) => params.continue_token = Some(token),
            None => break,
        }
    }
    Ok(ListOutcome {
        pages,
        items,
        elapsed: start.elapsed(),
    })
}

/// How one informer run is set up.
#[derive(Clone, Debug)]
pub struct SyncParams {
    /// The namespace to watch.
    pub namespace: String,
    /// Strip `managedFields` with the informer's transform.
    pub strip_managed_fields: bool,
    /// How long to wait after the sync before reading the heap, so that work still in
    /// flight (the watch's first frames, handler tasks) settles. The Go peer waits as long.
    pub settle: Duration,
    /// Give up if the informer has not synced by then.
    pub timeout: Duration,
}

/// What one informer run measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SyncOutcome {
    /// Objects in the cache after the sync.
    pub objects: usize,
    /// From starting the informer to its `has_synced`.
    pub elapsed: Duration,
    /// Heap in use after the sync (informer alive) minus before it was made.
    pub heap_bytes: i64,
}

impl SyncOutcome {
    /// [`heap_bytes`](Self::heap_bytes) per cached object.
    pub fn bytes_per_object(&self) -> f64 {
        self.heap_bytes as f64 / self.objects.max(1) as f64
    }
}

/// Makes a fresh informer for `K` with the factory's defaults (streaming WatchList, falling
/// back to a paged LIST; no resync), starts it, and times it to synced. Then, with the
/// informer still running, reads the heap through `live_bytes`; then stops it, waits for it
/// to end and `params.settle` more, so the next run starts from a clean heap.
///
/// `live_bytes` is read before the factory is made and after the sync; the difference is
/// everything the running informer holds: the cache, its keys and indices, the open watch.
///
/// # Errors
///
/// [`Error::Timeout`] if the informer has not synced within `params.timeout`.
///
/// # Cancel safety
///
/// Cancelling stops the informer, without waiting for it to end.
pub async fn informer_sync<K: BenchObject>(
    client: &Client,
    params: &SyncParams,
    live_bytes: impl Fn() -> usize,
) -> Result<SyncOutcome> {
    let before = live_bytes();
    let running = Running::<K>::start(client, params).await?;
    tokio::time::sleep(params.settle).await;
    let after = live_bytes();
    let objects = running.informer.get_indexer().len();
    let elapsed = running.elapsed;
    running.stop(params.settle).await;
    Ok(SyncOutcome {
        objects,
        elapsed,
        heap_bytes: after as i64 - before as i64,
    })
}

/// A started, synced informer, with what stops it.
pub(crate) struct Running<K> {
    factory: InformerFactory,
    pub(crate) informer: Arc<SharedIndexInformer<K>>,
    stop: tokio::sync::oneshot::Sender<()>,
    /// From starting the factory to synced.
    pub(crate) elapsed: Duration,
}

impl<K: BenchObject> Running<K> {
    /// Makes a fresh factory and informer for `K` (stripping managedFields if asked),
    /// starts it and waits until it has synced.
    pub(crate) async fn start(client: &Client, params: &SyncParams) -> Result<Self> {
        let factory = InformerFactory::new(client.clone()).namespace(params.namespace.clone());
        let informer = factory.informer::<K>();
        if params.strip_managed_fields {
            informer
                .set_transform(K::strip_managed_fields)
                .expect("the informer has not started");
        }
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();

        let start = Instant::now();
        factory.start(async move {
            let _ = stopped.await;
        });
        let synced = tokio::time::timeout(params.timeout, factory.wait_for_cache_sync()).await;
        let elapsed = start.elapsed();
        if !matches!(synced, Ok(true)) {
            return Err(Error::Timeout {
                url: format!("{} (informer sync)", client.base_url()),
                after: params.timeout,
            });
        }
        Ok(Running {
            factory,
            informer,
            stop,
            elapsed,
        })
    }

    /// Stops the informer, waits for it to end and `settle` more.
    pub(crate) async fn stop(self, settle: Duration) {
        let _ = self.stop.send(());
        self.factory.join().await;
        drop(self.informer);
        drop(self.factory);
        // `join` returns once every informer's `run` has; the reflector task it aborted may
        // still hold the DeltaFIFO, and through it the cache, until a worker drops it. Give
        // it the settle time, so the next run's baseline does not see the cache freed midway.
        tokio::time::sleep(settle).await;
    }
}

/// What [`typed_reads`] measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TypedReadsOutcome {
    /// The sync, and the heap held after it: bytes per object before any typed read.
    pub sync: SyncOutcome,
    /// Heap held after every object was read once (the informer's, not the bench's own
    /// scratch), minus the heap before the informer was made.
    pub heap_bytes_after_reads: i64,
    /// The first typed read of every object: a key lookup and a decode each.
    pub first_read: Duration,
    /// The second typed read of every object: a key lookup and the kept `Arc` each.
    pub second_read: Duration,
    /// Objects already decoded before the first read (expected: none).
    pub decoded_before: usize,
    /// Objects decoded after the first read (expected: all).
    pub decoded_after: usize,
    /// Second reads that returned the very `Arc` of the first read (expected: all).
    pub same_arc: usize,
    /// Allocations made, by any thread, while the second read ran (expected: none; a decode
    /// allocates every string and map of the object).
    pub second_read_allocations: usize,
}

impl TypedReadsOutcome {
    /// [`heap_bytes_after_reads`](Self::heap_bytes_after_reads) per cached object.
    pub fn bytes_per_object_after_reads(&self) -> f64 {
        self.heap_bytes_after_reads as f64 / self.sync.objects.max(1) as f64
    }
}

/// Syncs a fresh informer of `Raw<K>` as [`informer_sync`] does (the runtime's cache), reads
/// the heap, then reads every cached object through the typed path twice, as a reconciler
/// reads the cache: the object's key looked up in the lister, then [`Raw::typed`]. The first
/// read decodes each object and keeps the `Arc<K>` beside its JSON; the second must find it.
///
/// The keys and a slot per object for the first read's pointer are allocated before the
/// first read and subtracted from the heap after it, so the bytes per object after the reads
/// are the informer's own.
///
/// # Errors
///
/// As [`informer_sync`]; and the first object that does not decode into `K`.
///
/// # Cancel safety
///
/// Cancelling stops the informer, without waiting for it to end.
pub async fn typed_reads<K>(
    client: &Client,
    params: &SyncParams,
    alloc: &alloc_counter::CountingAlloc,
) -> Result<TypedReadsOutcome>
where
    K: k8s_openapi::Resource<Scope = NamespaceResourceScope>
        + DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let before = alloc.live_bytes();
    let running = Running::<Raw<K>>::start(client, params).await?;
    tokio::time::sleep(params.settle).await;
    let after_sync = alloc.live_bytes();
    let lister = running.informer.lister();
    let objects = running.informer.get_indexer().len();

    // The bench's scratch: every key, and a slot per object for the first read's pointer.
    let scratch_before = alloc.live_bytes();
    let (keys, decoded_before) = {
        let all = lister.list();
        let decoded = all.iter().filter(|raw| raw.is_decoded()).count();
        let keys: Vec<String> = all
            .iter()
            .map(|raw| format!("{}/{}", raw.namespace().unwrap_or_default(), raw.name()))
            .collect();
        (keys, decoded)
    };
    let mut first: Vec<usize> = Vec::with_capacity(keys.len());
    let scratch = alloc.live_bytes() - scratch_before;

    let start = Instant::now();
    for key in &keys {
        if let Some(raw) = lister.get(key) {
            first.push(Arc::as_ptr(&typed(&raw, key)?) as usize);
        }
    }
    let first_read = start.elapsed();
    let after_reads = alloc.live_bytes() - scratch;
    let decoded_after = lister.list().iter().filter(|raw| raw.is_decoded()).count();

    let (mut same_arc, mut slot) = (0, 0);
    let allocations = alloc.allocations();
    let start = Instant::now();
    for key in &keys {
        if let Some(raw) = lister.get(key) {
            let typed = typed(&raw, key)?;
            same_arc += usize::from(first.get(slot) == Some(&(Arc::as_ptr(&typed) as usize)));
            slot += 1;
        }
    }
    let second_read = start.elapsed();
    let second_read_allocations = alloc.allocations() - allocations;

    let elapsed = running.elapsed;
    drop((keys, first, lister));
    running.stop(params.settle).await;
    Ok(TypedReadsOutcome {
        sync: SyncOutcome {
            objects,
            elapsed,
            heap_bytes: after_sync as i64 - before as i64,
        },
        heap_bytes_after_reads: after_reads as i64 - before as i64,
        first_read,
        second_read,
        decoded_before,
        decoded_after,
        same_arc,
        second_read_allocations,
    })
}

/// [`Raw::typed`], its error in the bench's error type.
fn typed<K: DeserializeOwned>(raw: &Raw<K>, key: &str) -> Result<Arc<K>> {
    raw.typed()
        .map_err(|e| Error::Build(format!("cached {key} does not decode: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};

    #[test]
    fn strip_managed_fields_drops_them_and_nothing_else() {
        let mut cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some("a".into()),
                managed_fields: Some(vec![ManagedFieldsEntry::default()]),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        };
        cm.strip_managed_fields();
        assert_eq!(cm.metadata.managed_fields, None);
        assert_eq!(cm.metadata.name.as_deref(), Some("a"));
    }

    #[test]
    fn bytes_per_object_never_divides_by_zero() {
        let outcome = SyncOutcome {
            objects: 0,
            elapsed: Duration::ZERO,
            heap_bytes: 10,
        };
        assert_eq!(outcome.bytes_per_object(), 10.0);
    }
}
