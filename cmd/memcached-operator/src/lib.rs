//! The Memcached operator: it will watch `Memcached` custom resources and keep a Deployment of
//! memcached Pods scaled to each resource's `spec.size`, reporting progress in its status.
//!
//! This crate will hold the API types, the reconciler and the binary that runs them on the
//! controller runtime.
