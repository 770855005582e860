//! The shared informer's processor: its registered handlers ("listeners"), each behind its
//! own unbounded buffer and task, the per-handler resync bookkeeping, and [`Registration`].
//!
//! # Implementation Details
//!
//! A listener is an unbounded tokio channel and the task that drains it into one
//! [`EventHandler`]. The informer's processing loop only ever *sends* — a non-blocking push —
//! so a handler that falls behind grows its own buffer and delays nobody: not the other
//! handlers, not the queue. Nothing is dropped (client-go's `processorListener` uses a
//! growing ring buffer for the same reason).
//!
//! The listener list lives in the informer's state mutex, which the processing loop holds
//! while it applies a key's deltas to the indexer *and* hands out the notifications. Adding a
//! handler takes the same mutex, so a handler registered late snapshots the indexer at a point
//! between two pops: it gets every cached object once, as an initial add, and then exactly the
//! notifications of later pops (client-go's `blockDeltas`).
//!
//! Per-registration `has_synced` is a counter: each initial add queued to a listener counts
//! up, under the state mutex, before the queue publishes `has_synced` for the informer; the
//! listener counts down once the handler returned. `has_synced` reads the informer's flag
//! first (acquire), then the counter, so a `true` answer means every initial add was handled.

use std::any::Any;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::handler::{DeletedObject, EventHandler};

/// A handler's resync period below this is raised to it (client-go's `minimumResyncPeriod`).
pub const MINIMUM_RESYNC_PERIOD: Duration = Duration::from_secs(1);

/// How long a listener pauses after its handler panicked, before the next notification.
const PANIC_PAUSE: Duration = Duration::from_secs(1);

/// How often [`Registration::wait_synced`] looks (client-go's `syncedPollPeriod`).
const SYNCED_POLL_PERIOD: Duration = Duration::from_millis(100);

/// A handler's effective resync period, given what it asked for and the informer's resync
/// check period (client-go's `determineResyncPeriod`). [`Duration::ZERO`] means never.
///
/// * asked for zero → zero;
/// * the informer never resyncs (check period zero) → zero, with a warning;
/// * asked for less than the check period → the check period, with a warning;
/// * otherwise what it asked for.
pub fn determine_resync_period(desired: Duration, check: Duration) -> Duration {
    if desired.is_zero() {
        return Duration::ZERO;
    }
    if check.is_zero() {
        tracing::warn!(
            ?desired,
            "the informer does not resync: the handler's resync period is ignored"
        );
        return Duration::ZERO;
    }
    if desired < check {
        tracing::warn!(
            ?desired,
            ?check,
            "the handler's resync period is below the informer's resync check period: raised to it"
        );
        return check;
    }
    desired
}

// === notifications ===

/// What a listener hands its handler.
pub(crate) enum Notification<K> {
    Add {
        obj: Arc<K>,
        is_in_initial_list: bool,
    },
    Update {
        old: Arc<K>,
        new: Arc<K>,
    },
    Delete(DeletedObject<K>),
}

impl<K> Clone for Notification<K> {
    fn clone(&self) -> Self {
        match self {
            Notification::Add {
                obj,
                is_in_initial_list,
            } => Notification::Add {
                obj: obj.clone(),
                is_in_initial_list: *is_in_initial_list,
            },
            Notification::Update { old, new } => Notification::Update {
                old: old.clone(),
                new: new.clone(),
            },
            Notification::Delete(obj) => Notification::Delete(obj.clone()),
        }
    }
}

impl<K: 'static> Notification<K> {
    fn is_initial_add(&self) -> bool {
        matches!(
            self,
            Notification::Add {
                is_in_initial_list: true,
                ..
            }
        )
    }

    fn deliver(&self, handler: &dyn EventHandler<K>) {
        match self {
            Notification::Add {
                obj,
                is_in_initial_list,
            } => handler.on_add(obj, *is_in_initial_list),
            Notification::Update { old, new } => handler.on_update(old, new),
            Notification::Delete(obj) => handler.on_delete(obj),
        }
    }
}

// === listeners ===

/// What a listener shares with its task and its [`Registration`]s.
pub(crate) struct ListenerState {
    id: u64,
    /// The informer this listener belongs to.
    informer: u64,
    /// Set when the listener is removed or the informer stops: the task delivers nothing more.
    stopped: AtomicBool,
    /// Initial-list adds queued to this listener whose handler call has not returned yet.
    initial_pending: AtomicUsize,
    /// The effective resync period in nanoseconds (zero: never), for [`Registration`].
    resync_nanos: AtomicU64,
}

impl ListenerState {
    fn set_resync_period(&self, period: Duration) {
        let nanos = u64::try_from(period.as_nanos()).unwrap_or(u64::MAX);
        self.resync_nanos.store(nanos, Ordering::Relaxed);
    }
}

/// A listener's receiving end and handler, waiting for the informer to start.
type Parked<K> = (
    mpsc::UnboundedReceiver<Notification<K>>,
    Box<dyn EventHandler<K>>,
);

/// One registered handler, as the processor holds it.
struct Listener<K> {
    state: Arc<ListenerState>,
    tx: mpsc::UnboundedSender<Notification<K>>,
    /// The handler and the receiving end, until the informer starts and the task takes them.
    parked: Option<Parked<K>>,
    /// The running task, once started.
    task: Option<JoinHandle<()>>,
    /// The period asked for, after the minimum and, once started, the check period applied.
    requested_resync: Duration,
    /// The effective period: `determine_resync_period(requested_resync, check period)`.
    resync_period: Duration,
    /// When this listener is next due for a resync.
    next_resync: Instant,
    /// Marked by the last resync check: same-version updates go to this listener.
    syncing: bool,
}

impl<K: 'static> Listener<K> {
    fn due(&self, now: Instant) -> bool {
        !self.resync_period.is_zero() && now >= self.next_resync
    }

    /// Sends `n`, counting an initial add first. A listener whose task is gone is skipped.
    fn send(&self, n: Notification<K>) {
        let initial = n.is_initial_add();
        if initial {
            self.state.initial_pending.fetch_add(1, Ordering::AcqRel);
        }
        if self.tx.send(n).is_err() && initial {
            self.state.initial_pending.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Stops delivering: the task is aborted, and ends (dropping the handler and whatever is
    /// still buffered) once a handler call in progress returns. Returns it, to await.
    fn stop(&mut self) -> Option<JoinHandle<()>> {
        self.state.stopped.store(true, Ordering::Release);
        self.parked = None;
        let task = self.task.take();
        if let Some(task) = &task {
            task.abort();
        }
        task
    }
}

/// The task behind one listener: delivers notifications one at a time until stopped.
async fn run_listener<K: 'static>(
    mut rx: mpsc::UnboundedReceiver<Notification<K>>,
    handler: Box<dyn EventHandler<K>>,
    state: Arc<ListenerState>,
    informer: Arc<str>,
) {
    while let Some(n) = rx.recv().await {
        if state.stopped.load(Ordering::Acquire) {
            return;
        }
        let outcome = catch_unwind(AssertUnwindSafe(|| n.deliver(&*handler)));
        if n.is_initial_add() {
            state.initial_pending.fetch_sub(1, Ordering::AcqRel);
        }
        drop(n);
        if let Err(panic) = outcome {
            tracing::error!(
                informer = %informer,
                listener = state.id,
                panic = panic_message(&*panic),
                "event handler panicked: notification skipped"
            );
            tokio::time::sleep(PANIC_PAUSE).await;
        }
    }
}

fn panic_message(panic: &(dyn Any + Send)) -> &str {
    if let Some(s) = panic.downcast_ref::<&str>() {
        s
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s
    } else {
        "(not a string)"
    }
}

// === the processor ===

/// The registered listeners and the informer's lifecycle, behind the informer's state mutex.
pub(crate) struct Processor<K> {
    informer: u64,
    name: Arc<str>,
    listeners: Vec<Listener<K>>,
    next_id: u64,
    /// The informer's resync check period; zero: the informer never resyncs.
    resync_check_period: Duration,
    /// Where listener tasks run; set when the informer starts.
    runtime: Option<Handle>,
    started: bool,
    stopped: bool,
}

impl<K: 'static> Processor<K> {
    pub(crate) fn new(informer: u64, name: Arc<str>, resync_check_period: Duration) -> Self {
        Processor {
            informer,
            name,
            listeners: Vec::new(),
            next_id: 0,
            resync_check_period,
            runtime: None,
            started: false,
            stopped: false,
        }
    }

    pub(crate) fn is_started(&self) -> bool {
        self.started
    }

    pub(crate) fn is_stopped(&self) -> bool {
        self.stopped
    }

    pub(crate) fn resync_check_period(&self) -> Duration {
        self.resync_check_period
    }

    /// Removes the listener behind `state`; false if it is not (or no longer) registered.
    pub(crate) fn remove(&mut self, state: &ListenerState) -> bool {
        if state.informer != self.informer {
            return false;
        }
        let Some(at) = self.listeners.iter().position(|l| l.state.id == state.id) else {
            return false;
        };
        let mut listener = self.listeners.remove(at);
        // Asynchronous, as in client-go: a handler call in progress finishes on its own.
        drop(listener.stop());
        true
    }

    /// Marks the informer stopped and stops every listener; returns their tasks, to await.
    pub(crate) fn stop(&mut self) -> Vec<JoinHandle<()>> {
        self.stopped = true;
        self.listeners
            .drain(..)
            .filter_map(|mut l| l.stop())
            .collect()
    }

    /// Hands `n` to every listener, or, for a resync (`sync`), to the listeners the last
    /// resync check marked (client-go's `distribute`); returns how many listeners got it.
    pub(crate) fn distribute(&self, n: Notification<K>, sync: bool) -> usize {
        let mut targets = self.listeners.iter().filter(|l| !sync || l.syncing);
        let Some(mut current) = targets.next() else {
            return 0;
        };
        let mut sent = 1;
        for next in targets {
            current.send(n.clone());
            current = next;
            sent += 1;
        }
        current.send(n);
        sent
    }

    /// Marks the listeners whose resync is due at `now`, schedules their next one, and says
    /// whether any is due (client-go's `shouldResync`). The reflector asks before resyncing.
    pub(crate) fn should_resync(&mut self, now: Instant) -> bool {
        let mut any = false;
        for l in &mut self.listeners {
            l.syncing = l.due(now);
            if l.syncing {
                any = true;
                l.next_resync = now + l.resync_period;
            }
        }
        any
    }
}

impl<K: Send + Sync + 'static> Processor<K> {
    /// Registers `handler` with the resync period it asked for, applying client-go's rules
    /// (see [`SharedIndexInformer::add_event_handler_with_resync`]); returns its state.
    /// `initial` is the cache's content, queued as initial adds if the informer has started.
    ///
    /// [`SharedIndexInformer::add_event_handler_with_resync`]: crate::SharedIndexInformer::add_event_handler_with_resync
    pub(crate) fn add(
        &mut self,
        handler: Box<dyn EventHandler<K>>,
        mut requested: Duration,
        initial: impl FnOnce() -> Vec<Arc<K>>,
    ) -> Arc<ListenerState> {
        if !requested.is_zero() {
            if requested < MINIMUM_RESYNC_PERIOD {
                tracing::warn!(
                    informer = %self.name,
                    ?requested,
                    "resync period too small: raised to {MINIMUM_RESYNC_PERIOD:?}"
                );
                requested = MINIMUM_RESYNC_PERIOD;
            }
            if requested < self.resync_check_period {
                if self.started {
                    tracing::warn!(
                        informer = %self.name,
                        ?requested,
                        check = ?self.resync_check_period,
                        "the informer has started: a handler cannot lower its resync check period; raised to it"
                    );
                    requested = self.resync_check_period;
                } else {
                    self.resync_check_period = requested;
                    for l in &mut self.listeners {
                        l.resync_period = determine_resync_period(l.requested_resync, requested);
                        l.state.set_resync_period(l.resync_period);
                    }
                }
            }
        }
        let resync_period = determine_resync_period(requested, self.resync_check_period);
        let state = Arc::new(ListenerState {
            id: self.next_id,
            informer: self.informer,
            stopped: AtomicBool::new(false),
            initial_pending: AtomicUsize::new(0),
            resync_nanos: AtomicU64::new(0),
        });
        state.set_resync_period(resync_period);
        self.next_id += 1;
        let (tx, rx) = mpsc::unbounded_channel();
        let mut listener = Listener {
            state: state.clone(),
            tx,
            parked: Some((rx, handler)),
            task: None,
            requested_resync: requested,
            resync_period,
            next_resync: Instant::now() + resync_period,
            syncing: false,
        };
        if self.started {
            for obj in initial() {
                listener.send(Notification::Add {
                    obj,
                    is_in_initial_list: true,
                });
            }
            self.spawn(&mut listener);
        }
        self.listeners.push(listener);
        state
    }

    /// Marks the informer started on `runtime` and starts every listener registered so far.
    pub(crate) fn start(&mut self, runtime: Handle) {
        self.started = true;
        self.runtime = Some(runtime);
        let mut listeners = std::mem::take(&mut self.listeners);
        for l in &mut listeners {
            self.spawn(l);
        }
        self.listeners = listeners;
    }

    fn spawn(&self, listener: &mut Listener<K>) {
        let (Some(runtime), Some((rx, handler))) = (&self.runtime, listener.parked.take()) else {
            return;
        };
        let task = run_listener(rx, handler, listener.state.clone(), self.name.clone());
        listener.task = Some(runtime.spawn(task));
    }
}

// === impl Registration ===

/// The handle [`add_event_handler`](crate::SharedIndexInformer::add_event_handler) returns
/// (client-go's `ResourceEventHandlerRegistration`): to ask whether that handler has seen the
/// initial list, and to remove it.
#[derive(Clone)]
pub struct Registration {
    state: Arc<ListenerState>,
    upstream_synced: Arc<dyn Fn() -> bool + Send + Sync>,
}

impl fmt::Debug for Registration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registration")
            .field("informer", &self.state.informer)
            .field("listener", &self.state.id)
            .field("has_synced", &self.has_synced())
            .finish()
    }
}

impl Registration {
    pub(crate) fn new(
        state: Arc<ListenerState>,
        upstream_synced: Arc<dyn Fn() -> bool + Send + Sync>,
    ) -> Self {
        Registration {
            state,
            upstream_synced,
        }
    }

    pub(crate) fn state(&self) -> &ListenerState {
        &self.state
    }

    /// Whether this handler has seen the informer's initial state: the informer has synced,
    /// and every initial-list add queued to this handler has returned (or panicked) — the
    /// objects of the first list, or, for a handler registered late, everything cached when it
    /// was added.
    ///
    /// Never true before the informer runs; never turns false again, except that a removed
    /// handler with initial adds still undelivered stays false.
    pub fn has_synced(&self) -> bool {
        (self.upstream_synced)() && self.state.initial_pending.load(Ordering::Acquire) == 0
    }

    /// Resolves once [`has_synced`](Self::has_synced) is true, looking every 100 ms as
    /// client-go's `WaitForCacheSync` does; never, if it never is, so race it against your
    /// shutdown signal.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe.
    pub async fn wait_synced(&self) {
        while !self.has_synced() {
            tokio::time::sleep(SYNCED_POLL_PERIOD).await;
        }
    }

    /// The handler's effective resync period; [`Duration::ZERO`] if it is never resynced.
    pub fn resync_period(&self) -> Duration {
        Duration::from_nanos(self.state.resync_nanos.load(Ordering::Relaxed))
    }

    /// Whether the handler was removed, or its informer stopped.
    pub fn is_stopped(&self) -> bool {
        self.state.stopped.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn resync_period_rules_follow_client_go() {
        assert_eq!(
            determine_resync_period(Duration::ZERO, S(10)),
            Duration::ZERO
        );
        assert_eq!(
            determine_resync_period(S(30), Duration::ZERO),
            Duration::ZERO
        );
        assert_eq!(determine_resync_period(S(5), S(10)), S(10));
        assert_eq!(determine_resync_period(S(30), S(10)), S(30));
        assert_eq!(determine_resync_period(S(10), S(10)), S(10));
    }

    struct Nop;
    impl EventHandler<u32> for Nop {}

    fn add(p: &mut Processor<u32>, period: Duration) -> Arc<ListenerState> {
        p.add(Box::new(Nop), period, Vec::new)
    }

    fn period(state: &ListenerState) -> Duration {
        Duration::from_nanos(state.resync_nanos.load(Ordering::Relaxed))
    }

    #[test]
    fn before_start_a_shorter_handler_period_lowers_the_check_period_for_everyone() {
        let mut p = Processor::<u32>::new(0, "t".into(), S(30));
        let default = add(&mut p, S(30));
        let never = add(&mut p, Duration::ZERO);
        let fast = add(&mut p, S(10));
        assert_eq!(p.resync_check_period(), S(10));
        assert_eq!(period(&default), S(30), "a longer period is kept");
        assert_eq!(period(&never), Duration::ZERO);
        assert_eq!(period(&fast), S(10));
        // Below the minimum: raised to one second, which becomes the check period.
        let tiny = add(&mut p, Duration::from_millis(200));
        assert_eq!(period(&tiny), MINIMUM_RESYNC_PERIOD);
        assert_eq!(p.resync_check_period(), MINIMUM_RESYNC_PERIOD);
        assert_eq!(period(&fast), S(10));
    }

    #[tokio::test]
    async fn after_start_a_shorter_handler_period_is_raised_to_the_check_period() {
        let mut p = Processor::<u32>::new(0, "t".into(), S(30));
        p.start(Handle::current());
        let fast = add(&mut p, S(10));
        assert_eq!(
            p.resync_check_period(),
            S(30),
            "the check period is fixed once started"
        );
        assert_eq!(period(&fast), S(30));
        let slow = add(&mut p, S(90));
        assert_eq!(period(&slow), S(90));
        p.stop();
    }

    #[test]
    fn an_informer_that_never_resyncs_ignores_handler_periods() {
        let mut p = Processor::<u32>::new(0, "t".into(), Duration::ZERO);
        let h = add(&mut p, S(30));
        assert_eq!(p.resync_check_period(), Duration::ZERO);
        assert_eq!(period(&h), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn should_resync_marks_exactly_the_due_listeners() {
        let mut p = Processor::<u32>::new(0, "t".into(), S(10));
        add(&mut p, S(10));
        add(&mut p, S(20));
        add(&mut p, Duration::ZERO);
        let start = Instant::now();
        let marks = |p: &Processor<u32>| p.listeners.iter().map(|l| l.syncing).collect::<Vec<_>>();
        assert!(!p.should_resync(start + S(5)));
        assert_eq!(marks(&p), [false, false, false]);
        assert!(p.should_resync(start + S(10)));
        assert_eq!(marks(&p), [true, false, false]);
        assert!(p.should_resync(start + S(20)));
        assert_eq!(marks(&p), [true, true, false]);
        assert!(p.should_resync(start + S(30)));
        assert_eq!(marks(&p), [true, false, false]);
    }
}
