//! What a sharded controller adds to its workers: the hash of a queued key, the gate before
//! each reconcile, and the re-queue of the keys of ranges it has just acquired.

use std::sync::Arc;

use informer::Key;

use super::member::{Permit, Refused, Shard};
use super::ranges::{Ranges, ShardKey, fnv1a64};
use crate::client::Raw;
use crate::runtime::cache::{CachedKind, Store};

/// The shard hash of `raw`: of its uid or its namespace. `None` for an object without a uid
/// (never one the API server sent).
pub fn hash_of<K: Send + Sync + 'static>(key: ShardKey, raw: &Raw<K>) -> Option<u64> {
    match key {
        ShardKey::Uid => raw.uid().map(fnv1a64),
        ShardKey::Namespace => Some(fnv1a64(
            informer::Object::namespace(raw).unwrap_or_default(),
        )),
    }
}

/// The shard hash of a queued key's object, if it is cached.
type HashOfKey = Arc<dyn Fn(&str) -> Option<u64> + Send + Sync>;

/// A controller's side of sharding: its shard and how to hash its keys (the primary
/// object's uid, from the cache).
pub(crate) struct Sharding {
    shard: Shard,
    hash: HashOfKey,
}

impl Sharding {
    /// Sharding for a controller of kind `K`, hashing keys through `store`.
    pub(crate) fn new<K: CachedKind>(shard: Shard, store: Store<K>) -> Sharding {
        let key = shard.key();
        Sharding {
            shard,
            hash: Arc::new(move |k: &str| {
                let (ns, name) = informer::split_key(k).unwrap_or(("", k));
                hash_of(key, &*store.raw(ns, name)?)
            }),
        }
    }

    /// Sharding for keys hashed by `hash`, in tests without a cache.
    #[cfg(test)]
    pub(crate) fn from_fn(
        shard: Shard,
        hash: impl Fn(&str) -> Option<u64> + Send + Sync + 'static,
    ) -> Sharding {
        Sharding {
            shard,
            hash: Arc::new(hash),
        }
    }

    /// This replica's identity.
    pub(crate) fn identity(&self) -> &str {
        self.shard.identity()
    }

    /// A permit to reconcile `key`, or why not: its object is not in a range this replica
    /// holds now (or is not cached), or the renew deadline has passed.
    pub(crate) fn admit(&self, key: &str) -> Result<Permit, Refused> {
        self.shard
            .try_admit((self.hash)(key).ok_or(Refused::NotHeld)?)
    }

    /// A permit for a key whose shard hash is `hash` (a deleted object's, from its last
    /// state), or why not.
    pub(crate) fn admit_hash(&self, hash: u64) -> Result<Permit, Refused> {
        self.shard.try_admit(hash)
    }

    /// The shard hash of `raw`, an object of the controller's own kind.
    pub(crate) fn hash<K: Send + Sync + 'static>(&self, raw: &Raw<K>) -> Option<u64> {
        hash_of(self.shard.key(), raw)
    }

    /// Whether `hash` falls in the ranges this replica has active now (what its caches
    /// keep).
    pub(crate) fn holds(&self, hash: u64) -> bool {
        self.shard.holds(hash)
    }

    /// Whether the primary object `key` names is cached and in this replica's active
    /// ranges: a key that is not could not be admitted, so a watch need not queue it.
    pub(crate) fn may_admit(&self, key: &str) -> bool {
        (self.hash)(key).is_some_and(|hash| self.holds(hash))
    }

    /// Queues, with `enqueue`, every cached object of `store` in the ranges this replica
    /// acquires, each time it acquires some, until the shard's holdings stop changing (the
    /// shard was dropped). The keys of a newly held range were skipped while another
    /// replica held it, so they are queued again here. Logs `shard cache` with the number
    /// of cached objects of the kind whenever it changed, every [`CACHE_REPORT`] at most.
    pub(crate) async fn follow<K: CachedKind>(
        &self,
        store: Store<K>,
        enqueue: impl Fn(Key) + Send + Sync,
    ) {
        let mut holding = self.shard.holding();
        let mut before = Ranges::none();
        let mut report = tokio::time::interval(CACHE_REPORT);
        report.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut reported = None;
        loop {
            let now = holding.borrow_and_update().ranges.clone();
            let gained = now.subtract(&before);
            if !gained.is_empty() {
                for lister in store.listers() {
                    for raw in lister.list() {
                        if hash_of(self.shard.key(), &raw).is_some_and(|h| gained.contains(h)) {
                            enqueue(informer::key_of(&*raw));
                        }
                    }
                }
            }
            before = now;
            loop {
                tokio::select! {
                    changed = holding.changed() => match changed {
                        Ok(()) => break,
                        Err(_) => return,
                    },
                    _ = report.tick() => {
                        let cached: usize = store.listers().iter().map(|l| l.list().len()).sum();
                        if reported != Some(cached) {
                            reported = Some(cached);
                            let ranges = holding.borrow().ranges.clone();
                            tracing::info!(
                                replica = %self.shard.identity(),
                                kind = K::KIND,
                                cached,
                                share = format!("{:.3}", ranges.share()),
                                "shard cache"
                            );
                        }
                    }
                }
            }
        }
    }
}

/// How often a sharded controller looks at the size of its cache, to log it when changed.
pub const CACHE_REPORT: std::time::Duration = std::time::Duration::from_secs(2);
