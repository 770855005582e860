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
//! - `runtime` (to come): the manager, controllers, leader election, metrics, health probes,
//!   events, finalizers and admission webhooks.
//!
//! ```text
//!  kubeconfig / service account ──▶ Config ──▶ Client ──▶ Api<K> ──▶ kube-apiserver
//!                                                            │ list + watch
//!                                                            ▼
//!                 informer (reflector → DeltaFIFO → indexer) ──▶ handlers ──▶ workqueue
//!                                                                                │
//!                        reconciler ◀── controller workers ◀─────────────────────┘
//! ```
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
pub mod informers;
pub mod runtime;

pub use informer;
pub use runtime::crd::CustomResource;
pub use workqueue;
