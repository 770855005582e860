//! The two measurements, generic over the cached object type: a paged LIST decoded page by
//! page, and a fresh informer from start to synced, with the heap it holds afterwards.

use std::time::{Duration, Instant};

use controller_runtime::client::{Api, Client, Error, ListParams, Raw, Result};
use controller_runtime::informers::{FactoryResource, InformerFactory};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};

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

    tokio::time::sleep(params.settle).await;
    let after = live_bytes();
    let objects = informer.get_indexer().len();

    let _ = stop.send(());
    factory.join().await;
    drop(informer);
    drop(factory);
    // `join` returns once every informer's `run` has; the reflector task it aborted may
    // still hold the DeltaFIFO, and through it the cache, until a worker drops it. Give it
    // the settle time, so the next run's baseline does not see the cache freed midway.
    tokio::time::sleep(params.settle).await;
    Ok(SyncOutcome {
        objects,
        elapsed,
        heap_bytes: after as i64 - before as i64,
    })
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
