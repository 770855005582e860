//! The store's resource-version watermark: how far the indexer is known to be up to date.
//!
//! A [`Watermark`] is a `tokio::sync::watch` channel of a `u64` that only moves up. The
//! queues feed it (each by its own rule, documented on
//! [`SharedIndexInformer::store_resource_version`](crate::SharedIndexInformer::store_resource_version));
//! readers wait on it for read-your-own-writes. Resource versions are compared as integers
//! (KEP-5504); one that does not parse as a `u64` is ignored.

use std::sync::Arc;

use tokio::sync::watch;

/// The highest resource version `R` such that every event with a resource version `<= R` has
/// been applied to the indexer; shared by an informer and its queue.
#[derive(Clone, Debug)]
pub(crate) struct Watermark(Arc<watch::Sender<u64>>);

impl Default for Watermark {
    fn default() -> Self {
        Self(Arc::new(watch::Sender::new(0)))
    }
}

impl Watermark {
    /// The current watermark.
    pub(crate) fn get(&self) -> u64 {
        *self.0.borrow()
    }

    /// A receiver that sees every advance.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.0.subscribe()
    }

    /// Moves the watermark up to `rv`; never down. Receivers are told only of a change.
    pub(crate) fn advance(&self, rv: u64) {
        self.0.send_if_modified(|current| {
            let higher = rv > *current;
            if higher {
                *current = rv;
            }
            higher
        });
    }
}

/// A resource version as an integer; `None` (ignored) when it is not one.
pub(crate) fn parse(rv: Option<&str>) -> Option<u64> {
    rv?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advances_only_upwards_and_ignores_what_is_not_an_integer() {
        let mark = Watermark::default();
        let mut seen = mark.subscribe();
        assert_eq!(mark.get(), 0);
        mark.advance(7);
        assert!(seen.has_changed().unwrap());
        seen.mark_unchanged();
        mark.advance(3);
        assert!(!seen.has_changed().unwrap(), "never down");
        assert_eq!(mark.get(), 7);
        assert_eq!(parse(Some("12")), Some(12));
        assert_eq!(parse(Some("x1")), None);
        assert_eq!(parse(Some("")), None);
        assert_eq!(parse(None), None);
    }
}
