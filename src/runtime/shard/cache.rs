//! Caches that hold only a replica's ranges: the [`ListFilter`] a sharded controller sets
//! on the informers of its kinds.
//!
//! * The controller's own kind is narrowed by the hash of each object's shard key (its uid
//!   or namespace): the API server applies the same `shardSelector` where it serves it
//!   (Kubernetes 1.36 with `ShardedListAndWatch`), and the filter drops what a server that
//!   ignores it sends anyway.
//! * An owned kind (a Deployment of a Memcached) is narrowed by the hash of its
//!   **controller owner reference's uid**, with the uid key: an owned object's own uid says
//!   nothing of its owner's shard, and the owner's uid is exactly what places the owner.
//!   The server's selector reads only `metadata.uid` and `metadata.namespace`, so this
//!   filter runs in the client alone (the whole kind still crosses the wire; only the
//!   cache is smaller). An owned object without a controller owner is not cached. With the
//!   namespace key, an owned object shares its owner's namespace and the server's selector
//!   applies to it as well.
//!
//! * A watched kind (`watches`) is not filtered: its objects name their primaries only
//!   through the user's mapping (see [Watched kinds](super#watched-kinds-watches)).
//!
//! When the replica's active ranges change, the filter's generation moves: each informer's
//! watch ends and its reflector lists again with the new ranges, so objects of a range
//! just acquired arrive (as additions) and those of a range given up leave the cache.

use std::future::Future;
use std::pin::Pin;

use tokio::sync::watch;

use super::member::{Holding, Shard};
use super::ranges::{HashRange, Ranges, ShardKey, fnv1a64};
use crate::client::{ListFilter, Raw};

/// Which hash places an object of a kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum By {
    /// The object's own shard key: the controller's own kind.
    Own,
    /// Its controller owner's uid (or, with the namespace key, its namespace): an owned
    /// kind.
    ControllerOwner,
}

/// The filter of one kind of a sharded cache; see the [module docs](self).
pub(crate) struct ShardFilter {
    key: ShardKey,
    by: By,
    holding: watch::Receiver<Holding>,
}

impl ShardFilter {
    pub(crate) fn new(shard: &Shard, by: By) -> ShardFilter {
        ShardFilter {
            key: shard.key(),
            by,
            holding: shard.holding(),
        }
    }

    fn hash<K: Send + Sync + 'static>(&self, raw: &Raw<K>) -> Option<u64> {
        match (self.by, self.key) {
            (By::ControllerOwner, ShardKey::Uid) => {
                let meta = raw.meta().ok()?;
                Some(fnv1a64(&meta.controller()?.uid))
            }
            _ => super::controller::hash_of(self.key, raw),
        }
    }
}

impl<K: Send + Sync + 'static> ListFilter<Raw<K>> for ShardFilter {
    fn generation(&self) -> u64 {
        self.holding.borrow().generation
    }

    fn shard_selector(&self) -> Option<String> {
        if self.by == By::ControllerOwner && self.key == ShardKey::Uid {
            return None;
        }
        let ranges = self.holding.borrow().ranges.clone();
        if ranges.is_empty() {
            // Nothing held: ask for the smallest range rather than for everything.
            let least = HashRange::new(0, 1).map(|r| Ranges::from_ranges([r]));
            return least.and_then(|r| r.selector(self.key));
        }
        ranges.selector(self.key)
    }

    fn keep(&self, object: &Raw<K>) -> bool {
        let holding = self.holding.borrow();
        self.hash(object)
            .is_some_and(|hash| holding.ranges.contains(hash))
    }

    fn changed(&self, generation: u64) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let mut holding = self.holding.clone();
        Box::pin(async move {
            let _ = holding.wait_for(|h| h.generation != generation).await;
        })
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::Deployment;

    use super::*;

    fn filter(by: By, ranges: &str) -> (ShardFilter, watch::Sender<Holding>) {
        let (tx, holding) = watch::channel(Holding {
            ranges: ranges.parse().unwrap(),
            term: 1,
            generation: 1,
        });
        let filter = ShardFilter {
            key: ShardKey::Uid,
            by,
            holding,
        };
        (filter, tx)
    }

    fn deployment(uid: &str, owner_uid: Option<&str>) -> Raw<Deployment> {
        let owners = owner_uid
            .map(|o| {
                format!(
                    r#","ownerReferences":[{{"apiVersion":"cache.example.com/v1alpha1","kind":"Memcached","name":"m","uid":"{o}","controller":true}}]"#
                )
            })
            .unwrap_or_default();
        Raw::from_json(&format!(
            r#"{{"apiVersion":"apps/v1","kind":"Deployment","metadata":{{"name":"d","namespace":"ns","uid":"{uid}"{owners}}}}}"#
        ))
        .unwrap()
    }

    /// A uid whose hash falls in the lower half, and one in the upper half.
    fn uids() -> (String, String) {
        let low = (0..)
            .map(|i| format!("uid-{i}"))
            .find(|u| fnv1a64(u) < 1 << 63);
        let high = (0..)
            .map(|i| format!("uid-{i}"))
            .find(|u| fnv1a64(u) >= 1 << 63);
        (low.unwrap(), high.unwrap())
    }

    const LOW: &str = "0x0-0x8000000000000000";

    #[test]
    fn the_own_kind_is_kept_by_its_uid_and_selected_on_the_server() {
        let (f, _tx) = filter(By::Own, LOW);
        let (low, high) = uids();
        assert!(f.keep(&deployment(&low, Some(&high))));
        assert!(!f.keep(&deployment(&high, Some(&low))));
        assert_eq!(
            ListFilter::<Raw<Deployment>>::shard_selector(&f).unwrap(),
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"
        );
    }

    #[test]
    fn an_owned_kind_is_kept_by_its_controller_owners_uid_in_the_client_alone() {
        let (f, _tx) = filter(By::ControllerOwner, LOW);
        let (low, high) = uids();
        assert!(f.keep(&deployment(&high, Some(&low))));
        assert!(!f.keep(&deployment(&low, Some(&high))));
        assert!(
            !f.keep(&deployment(&low, None)),
            "no controller owner: not cached"
        );
        assert_eq!(ListFilter::<Raw<Deployment>>::shard_selector(&f), None);
    }

    #[test]
    fn nothing_held_selects_the_least_range_and_keeps_nothing() {
        let (f, _tx) = filter(By::Own, "");
        let (low, high) = uids();
        assert!(!f.keep(&deployment(&low, None)) && !f.keep(&deployment(&high, None)));
        assert_eq!(
            ListFilter::<Raw<Deployment>>::shard_selector(&f).unwrap(),
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x0000000000000001')"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn changed_completes_once_the_generation_moves() {
        let (f, tx) = filter(By::Own, LOW);
        let generation = ListFilter::<Raw<Deployment>>::generation(&f);
        let mut changed = ListFilter::<Raw<Deployment>>::changed(&f, generation);
        assert!(futures_poll(&mut changed).is_pending());
        tx.send_replace(Holding {
            ranges: Ranges::all(),
            term: 2,
            generation: generation + 1,
        });
        changed.await;
        // Asked with an older generation, it completes at once.
        ListFilter::<Raw<Deployment>>::changed(&f, generation).await;
    }

    fn futures_poll<F: Future + Unpin>(f: &mut F) -> std::task::Poll<F::Output> {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        Pin::new(f).poll(&mut cx)
    }
}
