//! `informer-bench` measures our informer on the workloads that
//! `benches/clientgo/cmd/informer-peer/` runs on client-go's, so that `make bench-informer`
//! can compare the two against the same cluster in one run.
//!
//! # Map
//!
//! * [`seed`] — makes the namespace, 10,000 small ConfigMaps and 1,000 Pods, concurrently and
//!   idempotently.
//! * [`paged_list`] — the floor: a paged LIST (limit 500, following `continue`) decoded into
//!   typed objects, no informer.
//! * [`informer_sync`] — a fresh informer from start to synced, and the heap it then holds,
//!   with or without `managedFields` stripped by its transform.
//! * [`typed_reads`] — an informer of `Raw<K>` (the runtime's cache) synced, then every
//!   object read twice through the typed path ([`Raw::typed`](controller_runtime::client::Raw::typed)):
//!   the bytes per object after the first read, and proof that the second decodes nothing.
//! * [`pods_seed`], [`pods_run`], [`pods_clean`] — `make bench-pods`: 100,000 Pods bound to
//!   kwok nodes, one informer over them driven step by step by the script that samples the
//!   process's memory, and the clean-up.
//! * [`BenchObject`] — what the measurements are generic over: a representation of a
//!   namespaced kind. `main.rs` picks the type in one `match`; a second representation of
//!   ConfigMaps is one more arm.
//! * [`alloc_counter::CountingAlloc`] — the global allocator that counts live bytes as
//!   glibc's malloc chunks, comparable with Go's `HeapAlloc`, and the allocations made.
//!
//! ```text
//!  main.rs ── seed ──▶ seed() ──▶ creates ──▶ kube-apiserver
//!          └─ run ──▶ warm-up LIST ─▶ paged_list::<K> / informer_sync::<K> ─▶ outcome
//!                                          │                                    ├─ JSON line ─▶ stdout
//!                                          └── CountingAlloc::live_bytes        └─ progress ──▶ stderr
//! ```
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//! use controller_runtime::client::{Api, Client};
//! use informer_bench::{SyncParams, informer_sync, paged_list};
//! use k8s_openapi::api::core::v1::ConfigMap;
//!
//! static ALLOC: alloc_counter::CountingAlloc = alloc_counter::CountingAlloc::new();
//!
//! # async fn run() -> controller_runtime::client::Result<()> {
//! let client = Client::try_default().await?;
//! let list = paged_list(&Api::<ConfigMap>::namespaced(client.clone(), "bench-informer"), 500).await?;
//! let params = SyncParams {
//!     namespace: "bench-informer".into(),
//!     strip_managed_fields: false,
//!     settle: Duration::from_millis(200),
//!     timeout: Duration::from_secs(120),
//! };
//! let sync = informer_sync::<ConfigMap>(&client, &params, || ALLOC.live_bytes()).await?;
//! println!("LIST {:?}, sync {:?}, {:.0} B/object", list.elapsed, sync.elapsed, sync.bytes_per_object());
//! # Ok(())
//! # }
//! ```

mod measure;
mod pods;
mod seed;

pub use measure::{
    BenchObject, ListOutcome, SyncOutcome, SyncParams, TypedReadsOutcome, informer_sync,
    paged_list, typed_reads,
};
pub use pods::{
    PODS_LABEL, PodsRunParams, PodsSeedParams, pods_clean, pods_pod, pods_pod_name, pods_run,
    pods_seed,
};
pub use seed::{LABEL, SeedParams, configmap, configmap_name, pod, pod_name, seed};
