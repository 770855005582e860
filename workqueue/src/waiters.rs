//! The `get` calls parked on an empty queue, and which one of them keeps the delaying timer.
//!
//! # Implementation Details
//!
//! Every `get` that finds the queue empty takes a slot in [`Waiters`] and parks there with its
//! task's [`Waker`]. The slots live in a slab (`slots` plus a free list), so parking allocates
//! nothing once the slab has grown to the number of concurrent getters. All of it sits under the
//! queue's one mutex: there is no second lock and no atomics of its own.
//!
//! A parked getter is in exactly one of two roles:
//!
//! * **idle** — listed in `idle`, oldest first. Each item that enters the FIFO pops one idle
//!   getter and wakes it, so one `add` wakes at most one task and `n` adds never wake more than
//!   `n` (no thundering herd, and no stored "permits" that cause spurious wake-ups later).
//! * **keeper** — at most one getter at a time. It is not in `idle`; besides waiting for items
//!   it sleeps until the earliest deadline of the delaying heap, and when that sleep fires it
//!   moves the due items into the FIFO. This is how the delaying queue runs without a
//!   background task: its timer is driven by the getters, and only one of them holds a timer.
//!   Items go to idle getters first and to the keeper only when no idle getter is left, so the
//!   keeper role rarely changes hands.
//!
//! A getter that is being polled is in neither role (`begin_poll` unparks it), so the promotion
//! it runs itself never wakes its own task.
//!
//! The invariant the queue keeps after every operation: *if the delaying heap is not empty and
//! some getter is parked, there is a keeper or an idle getter has been woken to become one.*
//! Whoever drops the keeper role (it got an item, the queue shut down, or its future was
//! dropped) wakes one idle getter to take it over; a new earliest deadline wakes the keeper so
//! it re-arms its sleep. A getter whose future is dropped after it was woken passes the wake-up
//! on, so cancellation never strands an item.

use std::collections::VecDeque;
use std::task::Waker;

/// Wakers collected under the queue lock, woken when this list is dropped.
///
/// Waking after the lock is released keeps critical sections short and spares the woken task
/// from running straight into the lock we still hold. Declare the list *before* the lock
/// guard: locals drop in reverse order, so the guard is released first.
#[derive(Default)]
pub(crate) struct WakeList {
    /// The first waker; most operations wake at most one task, so this avoids a `Vec`.
    first: Option<Waker>,
    /// Any further wakers (promotions and shutdown can wake several).
    rest: Vec<Waker>,
}

impl WakeList {
    /// Queues `waker` to be woken when the list is dropped.
    pub(crate) fn push(&mut self, waker: Waker) {
        if self.first.is_none() {
            self.first = Some(waker);
        } else {
            self.rest.push(waker);
        }
    }
}

impl Drop for WakeList {
    // Every queue operation drops a list, almost always empty or with one waker: keep that
    // path inline and short (a `drain` of the empty `Vec` alone cost several nanoseconds).
    #[inline]
    fn drop(&mut self) {
        if let Some(waker) = self.first.take() {
            waker.wake();
            // `rest` is only ever filled after `first`.
            if !self.rest.is_empty() {
                wake_rest(&mut self.rest);
            }
        }
    }
}

/// Wakes and removes every waker in `rest`.
#[cold]
fn wake_rest(rest: &mut Vec<Waker>) {
    for waker in rest.drain(..) {
        waker.wake();
    }
}

/// One waiting `get`.
#[derive(Default)]
struct Slot {
    /// `Some` while parked and not yet woken. Taken by whoever wakes the getter.
    waker: Option<Waker>,
    /// Whether the slot is listed in [`Waiters::idle`].
    idle: bool,
}

/// The getters parked on the queue. See the module docs for the roles.
#[derive(Default)]
pub(crate) struct Waiters {
    /// Slab of slots, indexed by the slot number a `get` future holds.
    slots: Vec<Slot>,
    /// Free slot numbers, reused before the slab grows.
    free: Vec<usize>,
    /// Idle getters, oldest first. Every entry has `idle == true` and a waker.
    idle: VecDeque<usize>,
    /// The getter that keeps the delaying timer, if any. Never listed in `idle`.
    keeper: Option<usize>,
    /// The deadline the keeper last armed its sleep for (`None`: it sleeps on items only).
    armed: Option<u64>,
}

impl Waiters {
    /// Allocates a slot for a `get` that is about to park.
    pub(crate) fn register(&mut self) -> usize {
        match self.free.pop() {
            Some(slot) => slot,
            None => {
                self.slots.push(Slot::default());
                self.slots.len() - 1
            }
        }
    }

    /// Unparks `slot` while its getter is being polled, returning its old waker for reuse.
    ///
    /// The getter keeps the keeper role if it has it.
    pub(crate) fn begin_poll(&mut self, slot: usize) -> Option<Waker> {
        self.unlist(slot);
        self.slots[slot].waker.take()
    }

    /// Parks `slot` with `waker`: as the keeper if it holds that role, as idle otherwise.
    ///
    /// `old` is the waker [`begin_poll`](Self::begin_poll) returned; it is kept when it would
    /// wake the same task, which saves a clone.
    pub(crate) fn park(&mut self, slot: usize, old: Option<Waker>, waker: &Waker) {
        let waker = match old {
            Some(old) if old.will_wake(waker) => old,
            _ => waker.clone(),
        };
        self.slots[slot].waker = Some(waker);
        if self.keeper != Some(slot) && !self.slots[slot].idle {
            self.slots[slot].idle = true;
            self.idle.push_back(slot);
        }
    }

    /// Frees `slot` when its `get` finishes or is dropped, giving up the keeper role.
    pub(crate) fn release(&mut self, slot: usize) {
        self.unlist(slot);
        if self.keeper == Some(slot) {
            self.keeper = None;
            self.armed = None;
        }
        self.slots[slot].waker = None;
        self.free.push(slot);
    }

    /// Whether some getter holds the keeper role.
    pub(crate) fn has_keeper(&self) -> bool {
        self.keeper.is_some()
    }

    /// Whether `slot` holds the keeper role.
    pub(crate) fn is_keeper(&self, slot: usize) -> bool {
        self.keeper == Some(slot)
    }

    /// Gives the keeper role to `slot`. The caller checked that nobody holds it.
    pub(crate) fn claim_keeper(&mut self, slot: usize) {
        debug_assert!(self.keeper.is_none(), "two keepers");
        self.unlist(slot);
        self.keeper = Some(slot);
        self.armed = None;
    }

    /// Records the deadline the keeper is about to sleep until.
    pub(crate) fn set_armed(&mut self, at: Option<u64>) {
        self.armed = at;
    }

    /// Wakes one getter for an item that just entered the FIFO: the oldest idle getter, or
    /// the keeper when no getter is idle.
    pub(crate) fn wake_for_item(&mut self, wake: &mut WakeList) {
        if self.wake_idle(wake) {
            return;
        }
        if let Some(keeper) = self.keeper
            && let Some(waker) = self.slots[keeper].waker.take()
        {
            wake.push(waker);
        }
    }

    /// Whether [`wake_for_deadline`](Self::wake_for_deadline) would wake a getter for an
    /// entry due at `at`.
    #[inline]
    pub(crate) fn wakes_for_deadline(&self, at: u64) -> bool {
        match self.keeper {
            Some(keeper) => {
                self.armed.is_none_or(|armed| at < armed) && self.slots[keeper].waker.is_some()
            }
            None => !self.idle.is_empty(),
        }
    }

    /// Reacts to a new delaying-heap entry due at `at`: wakes the keeper if it sleeps past
    /// `at`, or wakes an idle getter to become the keeper if there is none.
    pub(crate) fn wake_for_deadline(&mut self, at: u64, wake: &mut WakeList) {
        match self.keeper {
            Some(keeper) => {
                if self.armed.is_none_or(|armed| at < armed)
                    && let Some(waker) = self.slots[keeper].waker.take()
                {
                    wake.push(waker);
                }
            }
            None => {
                self.wake_idle(wake);
            }
        }
    }

    /// Wakes the oldest idle getter, if any. Returns whether one was woken.
    pub(crate) fn wake_idle(&mut self, wake: &mut WakeList) -> bool {
        let Some(slot) = self.idle.pop_front() else {
            return false;
        };
        let slot = &mut self.slots[slot];
        slot.idle = false;
        if let Some(waker) = slot.waker.take() {
            wake.push(waker);
        }
        true
    }

    /// Wakes every parked getter (shutdown).
    pub(crate) fn wake_all(&mut self, wake: &mut WakeList) {
        while self.wake_idle(wake) {}
        if let Some(keeper) = self.keeper
            && let Some(waker) = self.slots[keeper].waker.take()
        {
            wake.push(waker);
        }
    }

    /// Removes `slot` from the idle list if it is listed there.
    fn unlist(&mut self, slot: usize) {
        if self.slots[slot].idle {
            self.slots[slot].idle = false;
            // Only a getter polled without being woken is still listed; the list is as long
            // as the number of parked workers, so a scan is cheap.
            if let Some(pos) = self.idle.iter().position(|&s| s == slot) {
                self.idle.remove(pos);
            }
        }
    }

    /// Number of parked idle getters (tests only).
    #[cfg(test)]
    pub(crate) fn idle_len(&self) -> usize {
        self.idle.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::CountingWaker;

    #[test]
    fn wake_for_item_prefers_idle_getters_over_the_keeper() {
        let (keeper_waker, keeper_count) = CountingWaker::pair();
        let (idle_waker, idle_count) = CountingWaker::pair();
        let mut waiters = Waiters::default();
        let keeper = waiters.register();
        waiters.claim_keeper(keeper);
        waiters.park(keeper, None, &keeper_waker);
        let idle = waiters.register();
        waiters.park(idle, None, &idle_waker);

        drop({
            let mut wake = WakeList::default();
            waiters.wake_for_item(&mut wake);
            wake
        });
        assert_eq!((idle_count.get(), keeper_count.get()), (1, 0));

        drop({
            let mut wake = WakeList::default();
            waiters.wake_for_item(&mut wake);
            wake
        });
        assert_eq!((idle_count.get(), keeper_count.get()), (1, 1));

        // Both are woken and not yet polled again: a third item wakes nobody twice.
        drop({
            let mut wake = WakeList::default();
            waiters.wake_for_item(&mut wake);
            wake
        });
        assert_eq!((idle_count.get(), keeper_count.get()), (1, 1));
    }

    #[test]
    fn released_slots_are_reused() {
        let mut waiters = Waiters::default();
        let a = waiters.register();
        let b = waiters.register();
        waiters.release(a);
        assert_eq!(waiters.register(), a);
        assert_ne!(a, b);
    }

    #[test]
    fn keeper_is_woken_only_for_an_earlier_deadline() {
        let (waker, count) = CountingWaker::pair();
        let mut waiters = Waiters::default();
        let keeper = waiters.register();
        waiters.claim_keeper(keeper);
        waiters.park(keeper, None, &waker);
        waiters.set_armed(Some(100));

        drop({
            let mut wake = WakeList::default();
            waiters.wake_for_deadline(150, &mut wake);
            wake
        });
        assert_eq!(count.get(), 0);

        drop({
            let mut wake = WakeList::default();
            waiters.wake_for_deadline(50, &mut wake);
            wake
        });
        assert_eq!(count.get(), 1);
    }
}
