//! client-go's `util/workqueue` in Rust, on tokio.
//!
//! This crate will hold a deduplicating work queue, a delaying queue (`add_after`), rate
//! limiters and a rate-limited queue, with client-go's exact semantics and metrics hooks. It
//! has no Kubernetes dependency and can be used on its own.
//!
//! ```text
//!  producers ──add / add_after / add_rate_limited──▶ queue ──get──▶ workers ──done──▶ queue
//! ```
