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
//!   keys (in a thread-local) indexed by hash, two keys per slot. An entry is only written by its
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
//! of that flag at `add` and at `get`, and nothing else. A thread keeps tables for at
//! most [`QUEUES_PER_THREAD`] queues (the oldest is dropped, with its keys, when a new one
//! comes) and each table holds at most 2 × [`SLOTS`] keys: a thread may hold that many
//! recently re-added keys of a queue until they are overwritten, the table is dropped or the
//! thread exits. A third key of one slot evicts the older of the two; a pop of any key of a
//! slot withdraws the answer for all of them. Either way the answer becomes "don't know",
//! never wrong.

use std::any::Any;
use std::cell::RefCell;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use hashbrown::DefaultHashBuilder;

/// Counters per queue, and sets per thread-local table. A power of two.
pub(crate) const SLOTS: usize = 256;

/// Keys a thread-local table holds per slot, so that two keys of one slot do not evict each
/// other on every add (with 32 busy keys, some pair almost always shares one of 256 slots).
const WAYS: usize = 2;

/// Queues a thread keeps a table for; the least recently created table is dropped first.
pub(crate) const QUEUES_PER_THREAD: usize = 8;

/// The shared half: the per-slot pop counters of one queue, and how keys map to slots.
///
/// Not aligned to a cache line of its own: that measured 3–5 % slower on every
/// unique-keys cycle (it grows and realigns the queue's shared allocation).
pub(crate) struct PopCounters {
    /// Distinguishes this queue's thread-local tables from other queues' (never reused).
    id: u64,
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

thread_local! {
    /// This thread's tables, by queue id, oldest first.
    static REMEMBERED: RefCell<Vec<(u64, Box<dyn Any>)>> = const { RefCell::new(Vec::new()) };
}

impl Default for PopCounters {
    fn default() -> Self {
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        Self {
            // One read-modify-write per queue built, not per operation.
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            hasher: DefaultHashBuilder::default(),
            counting: AtomicBool::new(false),
            pops: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl PopCounters {
    /// The slot of `item`.
    #[inline]
    pub(crate) fn slot<T: Hash>(&self, item: &T) -> usize {
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
    pub(crate) fn count_pop<T: Hash>(&self, item: &T) {
        let counter = &self.pops[self.slot(item)];
        // Only lock holders write: no read-modify-write needed.
        counter.store(counter.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    /// Whether this thread remembers `item` as dirty and no item of its slot has been popped
    /// since: then `item` is certainly still queued or dirty while being processed. `false`
    /// means "don't know".
    #[inline]
    pub(crate) fn is_certainly_dirty<T: Hash + Eq + 'static>(&self, item: &T) -> bool {
        if !self.is_counting() {
            return false; // no thread has a table for this queue
        }
        REMEMBERED
            .try_with(|tables| {
                // A reentrant call (from a key's `eq` or `drop`) just answers "don't know".
                let Ok(tables) = tables.try_borrow() else {
                    return false;
                };
                let Some(table) = tables
                    .iter()
                    .find(|(id, _)| *id == self.id)
                    .and_then(|(_, table)| table.downcast_ref::<Table<T>>())
                else {
                    return false;
                };
                let slot = self.slot(item);
                let count = self.count(slot);
                table[slot * WAYS..(slot + 1) * WAYS]
                    .iter()
                    .any(|way| matches!(way, Some((key, seen)) if *seen == count && key == item))
            })
            .unwrap_or(false)
    }

    /// If this thread remembers a key equal to `item`, records `slot`'s pop count as seen
    /// now. Call with the queue's lock held, in the same critical section that leaves `item`
    /// dirty: the count cannot change in between, and no other thread reads this table.
    ///
    /// This renews an entry after its item was handed out and added again, without the
    /// clone a fresh entry would need (the item itself goes into the queue).
    #[inline]
    pub(crate) fn refresh<T: Hash + Eq + 'static>(&self, item: &T) {
        let _ = REMEMBERED.try_with(|tables| {
            let Ok(mut tables) = tables.try_borrow_mut() else {
                return;
            };
            let Some(table) = tables
                .iter_mut()
                .find(|(id, _)| *id == self.id)
                .and_then(|(_, table)| table.downcast_mut::<Table<T>>())
            else {
                return;
            };
            let slot = self.slot(item);
            let count = self.count(slot);
            for (key, seen) in ways(table, slot).iter_mut().flatten() {
                if key == item {
                    *seen = count;
                }
            }
        });
    }

    /// Remembers on this thread that `item`, of `slot`, was dirty when `slot`'s pop count
    /// was `seen` (read under the lock while `item` was dirty).
    pub(crate) fn remember<T: Eq + 'static>(&self, item: T, slot: usize, seen: u64) {
        // The entry it replaces is dropped after the table is released (a key's `drop`
        // may add to a queue).
        let _replaced = REMEMBERED.try_with(|tables| {
            let Ok(mut tables) = tables.try_borrow_mut() else {
                return None;
            };
            let pos = match tables.iter().position(|(id, _)| *id == self.id) {
                Some(pos) => pos,
                None => {
                    let table: Table<T> = (0..SLOTS * WAYS).map(|_| None).collect();
                    if tables.len() == QUEUES_PER_THREAD {
                        // Dropped right here, table and keys: rare, and nothing is borrowed
                        // but this thread's list, which a reentrant call skips.
                        drop(tables.remove(0));
                    }
                    tables.push((self.id, Box::new(table)));
                    tables.len() - 1
                }
            };
            let table = tables[pos].1.downcast_mut::<Table<T>>()?;
            let ways = ways(table, slot);
            // Renew the entry of an equal key, or evict the least recently remembered one.
            match ways
                .iter()
                .position(|way| matches!(way, Some((key, _)) if *key == item))
            {
                Some(way) => ways[way].replace((item, seen)),
                None => {
                    ways.rotate_right(1);
                    ways[0].replace((item, seen))
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counters of a queue on which some thread has started remembering keys.
    fn counting() -> PopCounters {
        let counters = PopCounters::default();
        counters.start_counting();
        counters
    }

    #[test]
    fn nothing_is_certain_before_counting_starts() {
        let counters = PopCounters::default();
        let slot = counters.slot(&7u64);
        counters.remember(7u64, slot, counters.count(slot));
        assert!(!counters.is_certainly_dirty(&7u64));
    }

    /// Two keys of the same slot.
    fn colliding_pair(counters: &PopCounters) -> (u64, u64) {
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
        let (first, second) = (counting(), counting());
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
    fn a_thread_keeps_tables_for_a_bounded_number_of_queues() {
        let queues: Vec<_> = (0..=QUEUES_PER_THREAD).map(|_| counting()).collect();
        for counters in &queues {
            let slot = counters.slot(&1u64);
            counters.remember(1u64, slot, counters.count(slot));
        }
        assert!(!queues[0].is_certainly_dirty(&1u64), "oldest table dropped");
        assert!(queues[1..].iter().all(|c| c.is_certainly_dirty(&1u64)));
        REMEMBERED.with(|tables| assert_eq!(tables.borrow().len(), QUEUES_PER_THREAD));
    }
}
