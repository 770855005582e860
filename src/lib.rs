//! A Kubernetes controller runtime on raw HTTP.
//!
//! This crate will hold the layers above the informer and the workqueue:
//!
//! - `client`: the Kubernetes API client on hyper, with TLS, HTTP/2, rate limiting and typed
//!   and dynamic APIs;
//! - `config`: kubeconfig and in-cluster configuration, loaded as kubectl does;
//! - `runtime`: the manager, controllers, leader election, metrics, health probes, events,
//!   finalizers and admission webhooks.
//!
//! ```text
//!  kube-apiserver ◀── client ◀── informer (reflector → DeltaFIFO → indexer) ──▶ handlers
//!                                                                          │
//!        ▲                                                                 ▼
//!        └────────── reconciler ◀── controller workers ◀── workqueue ◀─── keys
//! ```
//!
//! Today the repository holds the real local cluster it is tested against (`testenv/`, started
//! by `make cluster`) and the tests that prove that cluster behaves; the layers above arrive
//! one issue at a time.
