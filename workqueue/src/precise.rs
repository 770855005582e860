//! Sub-millisecond wake-ups for the delaying queue's keeper: one shared thread that sleeps on the OS clock.
//!
//! # Implementation Details
//!
//! tokio's timer counts whole milliseconds and rounds deadlines up, so a tokio sleep fires up
//! to about a millisecond late, and more when the runtime thread it needs is busy. The
//! delaying queue wants its items within a fraction of that, without spinning. So for the
//! last stretch before a deadline the keeper `get` (see [`crate::waiters`]) also registers
//! its waker here, with [`wake_at`].
//!
//! One process-wide thread, `workqueue-timer`, started on first use, holds the registrations
//! in a short list (one per queue whose keeper is within a few milliseconds of a deadline)
//! and blocks on a [`Condvar`] until the earliest of them. A timed condvar wait is a futex
//! wait with a nanosecond timeout, so it ends within the kernel's timer slack (50 µs by
//! default) and, because the thread was asleep, the scheduler runs it promptly even when other
//! processes keep the cores busy — unlike a thread that spins, which gets preempted. When the
//! time comes it removes the registration and wakes the waker; tokio then runs the keeper on
//! one of its threads.
//!
//! A registration is cancelled when its [`PreciseWake`] is dropped, so a keeper that got its
//! item, re-armed for another deadline or was dropped leaves nothing behind. A wake-up that
//! races with the cancellation is spurious, and harmless: the keeper polls and parks again.
//! If the thread cannot be started, [`wake_at`] returns `None` and the keeper relies on the
//! tokio timer alone.

use std::sync::OnceLock;
use std::task::Waker;
use std::time::Instant;

use parking_lot::{Condvar, Mutex, MutexGuard};

/// A registered wake-up; dropping it cancels the wake-up if it has not happened yet.
pub(crate) struct PreciseWake {
    id: u64,
    at: Instant,
    waker: Waker,
}

impl PreciseWake {
    /// Whether this registration wakes `waker` at `at` already.
    pub(crate) fn is_for(&self, at: Instant, waker: &Waker) -> bool {
        self.at == at && self.waker.will_wake(waker)
    }
}

impl Drop for PreciseWake {
    fn drop(&mut self) {
        let mut state = REGISTRATIONS.lock();
        if let Some(pos) = state.entries.iter().position(|entry| entry.id == self.id) {
            state.entries.swap_remove(pos);
        }
    }
}

/// Wakes `waker` at `at` (an OS-clock instant), from the shared timer thread.
///
/// Returns `None`, having registered nothing, if the thread could not be started.
pub(crate) fn wake_at(at: Instant, waker: &Waker) -> Option<PreciseWake> {
    if !started() {
        return None;
    }
    Some(REGISTRATIONS.lock().register(at, waker))
}

/// Starts the timer thread on first use; whether it runs.
fn started() -> bool {
    *STARTED.get_or_init(|| {
        std::thread::Builder::new()
            .name("workqueue-timer".into())
            .spawn(run)
            .is_ok()
    })
}

impl Registrations {
    /// Adds a wake-up of `waker` at `at`, waking the timer thread if it sleeps past `at`.
    fn register(&mut self, at: Instant, waker: &Waker) -> PreciseWake {
        let id = self.next_id;
        self.next_id += 1;
        self.entries.push(Registration {
            id,
            at,
            waker: waker.clone(),
        });
        if let Some(until) = self.asleep
            && until.is_none_or(|until| at < until)
        {
            self.asleep = None;
            WAKEUP.notify_one();
        }
        PreciseWake {
            id,
            at,
            waker: waker.clone(),
        }
    }
}

/// Whether the timer thread is running (set once, by the first [`wake_at`]).
static STARTED: OnceLock<bool> = OnceLock::new();

/// The pending wake-ups.
static REGISTRATIONS: Mutex<Registrations> = Mutex::new(Registrations {
    entries: Vec::new(),
    next_id: 0,
    asleep: None,
});

/// Signalled when a registration is earlier than what the timer thread sleeps until.
static WAKEUP: Condvar = Condvar::new();

/// Everything behind the timer thread's lock.
struct Registrations {
    /// Pending wake-ups, unordered: there is about one per queue whose keeper is near a
    /// deadline, so scanning beats keeping a heap.
    entries: Vec<Registration>,
    /// Number of the next registration.
    next_id: u64,
    /// While the thread waits: the instant it waits until (`None`: until signalled). `Some`
    /// only while it waits, so a registration signals only when the thread would sleep past it.
    asleep: Option<Option<Instant>>,
}

/// One pending wake-up.
struct Registration {
    id: u64,
    at: Instant,
    waker: Waker,
}

/// The timer thread: wakes the due registrations, then sleeps until the earliest one left.
fn run() {
    let mut due = Vec::new();
    let mut state = REGISTRATIONS.lock();
    loop {
        let now = Instant::now();
        let mut i = 0;
        while i < state.entries.len() {
            if state.entries[i].at <= now {
                let entry = state.entries.swap_remove(i);
                due.push((entry.at, entry.waker));
            } else {
                i += 1;
            }
        }
        if !due.is_empty() {
            due.sort_unstable_by_key(|&(at, _)| at);
            MutexGuard::unlocked(&mut state, || {
                for (_, waker) in due.drain(..) {
                    waker.wake();
                }
            });
            continue;
        }
        let until = state.entries.iter().map(|entry| entry.at).min();
        state.asleep = Some(until);
        match until {
            Some(until) => {
                WAKEUP.wait_until(&mut state, until);
            }
            None => WAKEUP.wait(&mut state),
        }
        state.asleep = None;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::mpsc::{self, Receiver, Sender};
    use std::task::Wake;
    use std::time::Duration;

    use super::*;

    // These tests follow the real clock, which is what the timer thread is for. They check
    // which wake-ups happen and in what order, never how late: the only time limit is a
    // generous guard against hanging.

    /// Sends its tag on a channel when woken.
    struct Tagged(Mutex<Sender<&'static str>>, &'static str);

    impl Wake for Tagged {
        fn wake(self: Arc<Self>) {
            let _ = self.0.lock().send(self.1);
        }
    }

    fn wakers(tags: &[&'static str]) -> (Vec<Waker>, Receiver<&'static str>) {
        let (tx, rx) = mpsc::channel();
        let wakers = tags
            .iter()
            .map(|&tag| Waker::from(Arc::new(Tagged(Mutex::new(tx.clone()), tag))))
            .collect();
        (wakers, rx)
    }

    fn next(rx: &Receiver<&'static str>) -> &'static str {
        rx.recv_timeout(Duration::from_secs(60))
            .expect("a registration was never woken")
    }

    #[test]
    fn registrations_wake_in_deadline_order_each_once() {
        let (w, rx) = wakers(&["late", "early"]);
        assert!(started());
        let base = Instant::now();
        // Registered later but due sooner. Both go in under one hold of the lock, so the
        // thread finds "early" no later than "late", however the threads are scheduled.
        let (_late, _early) = {
            let mut state = REGISTRATIONS.lock();
            let late = state.register(base + Duration::from_millis(2), &w[0]);
            let early = state.register(base + Duration::from_micros(100), &w[1]);
            (late, early)
        };
        assert_eq!(next(&rx), "early");
        assert_eq!(next(&rx), "late");
        // Once a later registration has fired, the thread is past both deadlines.
        let (m, marker) = wakers(&["marker"]);
        let _marker = wake_at(Instant::now() + Duration::from_millis(1), &m[0]).unwrap();
        assert_eq!(next(&marker), "marker");
        assert!(rx.try_recv().is_err(), "woken twice");
    }

    #[test]
    fn an_earlier_registration_is_not_held_up_by_a_later_one() {
        let (w, rx) = wakers(&["hour", "soon"]);
        let _hour = wake_at(Instant::now() + Duration::from_secs(3600), &w[0]).unwrap();
        let _soon = wake_at(Instant::now() + Duration::from_micros(100), &w[1]).unwrap();
        assert_eq!(next(&rx), "soon");
    }

    #[test]
    fn a_dropped_registration_never_wakes() {
        let (w, rx) = wakers(&["cancelled", "kept"]);
        // Far enough away that only the cancellation can remove it: no race with the thread.
        let far = Instant::now() + Duration::from_secs(3600);
        let cancelled = wake_at(far, &w[0]).unwrap();
        assert!(cancelled.is_for(far, &w[0]));
        let id = cancelled.id;
        drop(cancelled);
        let registered = |id| REGISTRATIONS.lock().entries.iter().any(|e| e.id == id);
        assert!(!registered(id), "the dropped registration is still pending");
        // The thread goes on serving the others.
        let _kept = wake_at(Instant::now() + Duration::from_micros(100), &w[1]).unwrap();
        assert_eq!(next(&rx), "kept");
        assert!(rx.try_recv().is_err(), "woken twice");
    }
}
