//! The queues' "has synced" latch: set once, read without a lock, awaited.

use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

/// A flag that turns true once and never back, with a way to wait for it.
#[derive(Debug, Default)]
pub(crate) struct SyncedLatch {
    set: AtomicBool,
    changed: Notify,
}

impl SyncedLatch {
    /// Whether the latch is set.
    pub(crate) fn is_set(&self) -> bool {
        self.set.load(Ordering::Acquire)
    }

    /// Sets the latch if it is not set yet and `now_synced()` says so; returns whether this
    /// call set it, in which case the caller calls [`wake`](Self::wake) after releasing its
    /// own lock. Callers serialise calls under that lock.
    pub(crate) fn set_if(&self, now_synced: impl FnOnce() -> bool) -> bool {
        if self.set.load(Ordering::Relaxed) || !now_synced() {
            return false;
        }
        self.set.store(true, Ordering::Release);
        true
    }

    /// Wakes the tasks in [`wait`](Self::wait).
    pub(crate) fn wake(&self) {
        self.changed.notify_waiters();
    }

    /// Resolves once the latch is set; never, if it never is. Cancel-safe.
    pub(crate) async fn wait(&self) {
        loop {
            let mut notified = pin!(self.changed.notified());
            notified.as_mut().enable();
            if self.is_set() {
                return;
            }
            notified.await;
        }
    }
}
