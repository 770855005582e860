//! The duplicate `add` answered without the queue's lock: each thread remembers keys it saw
//! queued, and per-slot pop counters tell it when that may have changed.
//!
//! # Implementation Details
//!
//! Most adds of a busy key find it already queued, and answering that under the lock costs
//! two atomic read-modify-write instructions (lock, unlock) — about 10 ns in our VM, almost
//! the whole duplicate add. This module answers "`item` is certainly still dirty" with plain
//! loads instead, and is allowed only two answers: *certainly dirty* (the add is a no-op) or
//! *don't know* (the add takes the lock as before). A wrong "certainly" would lose an add, so
//! the answer rests on two exact facts rather than on a hash:
//!
//! * **The key is compared, not its hash.** Each thread keeps, per queue, a small table of
//!   keys (in the queue's per-thread storage) indexed by hash, two keys per slot. An entry is only written by its
//!   own thread, with a key that thread has just seen dirty under the lock; a lookup compares
//!   the key with `==`. Keys never cross threads, so `T` need not be `Sync`. The key stored is
//!   the very value that `add` was given and would have dropped: remembering costs no clone.
//!   When an add makes a key dirty again after it was handed out, the entry of an equal key
//!   is renewed (its count re-read) in the same critical section, again without a clone.
//! * **Leaving the dirty state is counted.** An item stops being dirty in exactly one place:
//!   when `get` pops it from the FIFO (`Queued` → `Processing`; every other transition of a
//!   dirty item keeps it dirty, see the table in [`crate::queue`]). Each queue has
//!   [`SLOTS`] counters, and every pop increments the counter of the popped item's slot,
//!   under the lock, before the item is handed out. An entry records the counter of its slot
//!   when its key was seen dirty (read under the same lock); finding the counter unchanged
//!   later proves that no item of that slot — in particular not this key — has been popped
//!   since, so the key is still dirty.
//!
//! The counters are written only under the lock (a load and a store, no read-modify-write)
//! and read with `Relaxed` loads: if a pop *happens before* an add (the worker got the item,
//! then told the producer), coherence makes the add see the new count and take the lock; if
//! the two race, answering "still dirty" places the add just before the pop, which is a
//! valid order of the two calls. Counters are 64-bit, so they never wrap in practice.
//!
//! Costs and bounds. Pops count only once some thread has remembered a key for the queue
//! (`PopCounters::is_counting`), so a queue whose keys are never added twice pays one load
//! of that flag at `add` and at `get`, and nothing else. The tables live in the queue, one
//! per thread that has remembered a key of it ([`thread_local::ThreadLocal`]: found by the
//! thread's id, with no type check), and go when the queue goes: the add path makes no
//! virtual call and no downcast to reach its table. Each holds at most
//! 2 × [`SLOTS`] keys until they are overwritten: a third key of one slot evicts the older
//! of the two; a pop of any key of a slot withdraws the answer for all of them. Either way
//! the answer becomes "don't know", never wrong.

use std::cell::RefCell;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use hashbrown::DefaultHashBuilder;
use thread_local::ThreadLocal;

/// Counters per queue, and sets per thread-local table. A power of two.
pub(crate) const SLOTS: usize = 256;

/// Keys a thread-local table holds per slot, so that two keys of one slot do not evict each
/// other on every add (with 32 busy keys, some pair almost always shares one of 256 slots).
const WAYS: usize = 2;

/// The shared half: the per-slot pop counters of one queue, and how keys map to slots.
///
/// Not aligned to a cache line of its own: the padding would grow and realign the queue's
/// shared allocation, which slows every unique-keys cycle.
pub(crate) struct PopCounters<T: Send> {
    /// Each thread's remembered keys of this queue; a thread's entry is only ever used by
    /// that thread.
    tables: ThreadLocal<RefCell<Table<T>>>,
    /// Hashes keys to slots (independent of the item map's hasher).
    hasher: DefaultHashBuilder,
    /// Some thread has remembered a key of this queue: pops are counted from then on, and
    /// until then `add` does not even look for a table. Set once, under the queue's lock.
    counting: AtomicBool,
    /// Number of pops of items in each slot since the queue was built, while counting.
    /// Written only under the queue's lock.
    pops: Box<[AtomicU64]>,
}

/// One thread's remembered keys for one queue: `WAYS` entries per slot, most recently
/// remembered first, each a key and its slot's pop count when it was seen dirty.
type Table<T> = Box<[Option<(T, u64)>]>;

/// The entries of `slot` in a table.
#[inline]
fn ways<T>(table: &mut Table<T>, slot: usize) -> &mut [Option<(T, u64)>] {
    &mut table[slot * WAYS..(slot + 1) * WAYS]
}

impl<T: Send> Default for PopCounters<T> {
    fn default() -> Self {
        Self {
            tables: ThreadLocal::new(),
            hasher: DefaultHashBuilder::default(),
            counting: AtomicBool::new(false),
            pops: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl<T: Hash + Eq + Send> PopCounters<T> {
    /// The slot of `item`.
    #[inline]
    pub(crate) fn slot(&self, item: &T) -> usize {
        (self.hasher.hash_one(item) as usize) & (SLOTS - 1)
    }

    /// Whether pops are being counted (some thread remembers a key of this queue). Exact
    /// under the queue's lock; without it, a stale `false` only means "don't know".
    #[inline]
    pub(crate) fn is_counting(&self) -> bool {
        self.counting.load(Ordering::Relaxed)
    }

    /// Starts counting pops; call with the queue's lock held, before remembering a key.
    #[inline]
    pub(crate) fn start_counting(&self) {
        if !self.is_counting() {
            self.counting.store(true, Ordering::Relaxed);
        }
    }

    /// The pop count of `slot`. Under the lock it is exact; without it, it may lag (see the
    /// module docs for why that is enough).
    #[inline]
    pub(crate) fn count(&self, slot: usize) -> u64 {
        self.pops[slot].load(Ordering::Relaxed)
    }

    /// Counts a pop of `item`. Call with the queue's lock held, before `item` is handed out.
    #[inline]
    pub(crate) fn count_pop(&self, item: &T) {
        let counter = &self.pops[self.slot(item)];
        // Only lock holders write: no read-modify-write needed.
        counter.store(counter.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    /// Whether this thread remembers `item` as dirty and no item of its slot has been popped
    /// since: then `item` is certainly still queued or dirty while being processed. `false`
    /// means "don't know".
    #[inline]
    pub(crate) fn is_certainly_dirty(&self, item: &T) -> bool {
        if !self.is_counting() {
            return false; // no thread has a table for this queue
        }
        let Some(table) = self.tables.get() else {
            return false;
        };
        // A reentrant call (from a key's `eq` or `drop`) just answers "don't know".
        let Ok(table) = table.try_borrow() else {
            return false;
        };
        let slot = self.slot(item);
        let count = self.count(slot);
        table[slot * WAYS..(slot + 1) * WAYS]
            .iter()
            .any(|way| matches!(way, Some((key, seen)) if *seen == count && key == item))
    }

    /// If this thread remembers a key equal to `item`, records `slot`'s pop count as seen
    /// now. Call with the queue's lock held, in the same critical section that leaves `item`
    /// dirty: the count cannot change in between, and no other thread reads this table.
    ///
    /// This renews an entry after its item was handed out and added again, without the
    /// clone a fresh entry would need (the item itself goes into the queue).
    #[inline]
    pub(crate) fn refresh(&self, item: &T) {
        let Some(table) = self.tables.get() else {
            return;
        };
        let Ok(mut table) = table.try_borrow_mut() else {
            return;
        };
        let slot = self.slot(item);
        let count = self.count(slot);
        for (key, seen) in ways(&mut table, slot).iter_mut().flatten() {
            if key == item {
                *seen = count;
            }
        }
    }

    /// Remembers on this thread that `item`, of `slot`, was dirty when `slot`'s pop count
    /// was `seen` (read under the lock while `item` was dirty).
    pub(crate) fn remember(&self, item: T, slot: usize, seen: u64) {
        let table = self
            .tables
            .get_or(|| RefCell::new((0..SLOTS * WAYS).map(|_| None).collect()));
        let Ok(mut table) = table.try_borrow_mut() else {
            return;
        };
        let ways = ways(&mut table, slot);
        // Renew the entry of an equal key, or evict the least recently remembered one.
        let replaced = match ways
            .iter()
            .position(|way| matches!(way, Some((key, _)) if *key == item))
        {
            Some(way) => ways[way].replace((item, seen)),
            None => {
                ways.rotate_right(1);
                ways[0].replace((item, seen))
            }
        };
        // The entry replaced is dropped after the table is released: a key's `drop` may
        // add to this queue.
        drop(table);
        drop(replaced);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counters of a queue on which some thread has started remembering keys.
    fn counting<T: Hash + Eq + Send>() -> PopCounters<T> {
        let counters = PopCounters::default();
        counters.start_counting();
        counters
    }

    #[test]
    fn nothing_is_certain_before_counting_starts() {
        let counters = PopCounters::<u64>::default();
        let slot = counters.slot(&7u64);
        counters.remember(7u64, slot, counters.count(slot));
        assert!(!counters.is_certainly_dirty(&7u64));
    }

    /// Two keys of the same slot.
    fn colliding_pair(counters: &PopCounters<u64>) -> (u64, u64) {
        let first = 0;
        let slot = counters.slot(&first);
        let second = (1..).find(|k| counters.slot(k) == slot).unwrap();
        (first, second)
    }

    #[test]
    fn a_remembered_key_is_certainly_dirty_until_its_slot_pops() {
        let counters = counting();
        let slot = counters.slot(&7u64);
        assert!(!counters.is_certainly_dirty(&7u64));
        counters.remember(7u64, slot, counters.count(slot));
        assert!(counters.is_certainly_dirty(&7u64));
        counters.count_pop(&7u64);
        assert!(
            !counters.is_certainly_dirty(&7u64),
            "popped: no longer certain"
        );
    }

    #[test]
    fn a_pop_of_another_key_of_the_slot_also_withdraws_the_answer() {
        let counters = counting();
        let (a, b) = colliding_pair(&counters);
        let slot = counters.slot(&a);
        counters.remember(a, slot, counters.count(slot));
        counters.count_pop(&b);
        assert!(!counters.is_certainly_dirty(&a));
    }

    #[test]
    fn two_keys_of_one_slot_are_both_remembered_and_a_third_evicts_the_older() {
        let counters = counting();
        let slot = counters.slot(&0u64);
        let keys: Vec<u64> = (0..).filter(|k| counters.slot(k) == slot).take(3).collect();
        let seen = counters.count(slot);
        counters.remember(keys[0], slot, seen);
        counters.remember(keys[1], slot, seen);
        assert!(counters.is_certainly_dirty(&keys[0]));
        assert!(counters.is_certainly_dirty(&keys[1]));
        counters.remember(keys[2], slot, seen);
        assert!(
            !counters.is_certainly_dirty(&keys[0]),
            "least recently remembered"
        );
        assert!(counters.is_certainly_dirty(&keys[1]));
        assert!(counters.is_certainly_dirty(&keys[2]));
    }

    #[test]
    fn keys_are_compared_not_their_slots() {
        let counters = counting();
        let (a, b) = colliding_pair(&counters);
        let slot = counters.slot(&a);
        counters.remember(a, slot, counters.count(slot));
        assert!(counters.is_certainly_dirty(&a));
        assert!(!counters.is_certainly_dirty(&b), "same slot, different key");
    }

    #[test]
    fn a_key_remembered_before_an_older_count_is_not_trusted() {
        let counters = counting();
        let slot = counters.slot(&1u64);
        let before = counters.count(slot);
        counters.count_pop(&1u64);
        counters.remember(1u64, slot, before);
        assert!(!counters.is_certainly_dirty(&1u64));
    }

    #[test]
    fn refresh_renews_an_entry_of_an_equal_key_only() {
        let counters = counting();
        let (a, b) = colliding_pair(&counters);
        let slot = counters.slot(&a);
        counters.remember(a, slot, counters.count(slot));
        counters.count_pop(&a);
        counters.refresh(&b);
        assert!(
            !counters.is_certainly_dirty(&a),
            "another key does not renew it"
        );
        assert!(!counters.is_certainly_dirty(&b), "nor is it remembered");
        counters.refresh(&a);
        assert!(counters.is_certainly_dirty(&a));
    }

    #[test]
    fn queues_do_not_share_remembered_keys() {
        let (first, second) = (counting::<u64>(), counting::<u64>());
        let slot = first.slot(&3u64);
        first.remember(3u64, slot, first.count(slot));
        assert!(first.is_certainly_dirty(&3u64));
        assert!(!second.is_certainly_dirty(&3u64));
    }

    #[test]
    fn other_threads_do_not_see_this_threads_keys() {
        let counters = counting();
        let slot = counters.slot(&"key");
        counters.remember("key", slot, counters.count(slot));
        std::thread::scope(|s| {
            s.spawn(|| assert!(!counters.is_certainly_dirty(&"key")));
        });
        assert!(counters.is_certainly_dirty(&"key"));
    }

    #[test]
    fn a_queues_tables_go_with_it() {
        use std::sync::Arc;
        let key = Arc::new(5u64);
        let counters = counting::<Arc<u64>>();
        let slot = counters.slot(&key);
        counters.remember(key.clone(), slot, counters.count(slot));
        assert_eq!(Arc::strong_count(&key), 2);
        drop(counters);
        assert_eq!(Arc::strong_count(&key), 1, "the remembered key was dropped");
    }
}
