//! The shared informer against a fake API server that the test drives: LIST answers are
//! queued, and each WATCH is a channel the test sends events into. Each test proves one
//! semantic: delivery to many handlers, a slow handler delaying nobody, late handlers, resync
//! per handler, has_synced, transforms, removal, panics, tombstones, lifecycle.
//!
//! Most tests run on paused time, where sleeping only lets the runtime go idle. The two that
//! need a handler that really blocks run on a multi-threaded runtime; their waits are bounded
//! by a generous timeout that only turns a hang into a failure.

mod support;

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use informer::lister_watcher::{Error, ErrorKind, Result, WatchEvent};
use informer::{
    DeletedObject, EventHandler, EventStream, FifoKind, HandlerFns, IndexFunc, InformerError,
    InformerOptions, ListOptions, ListPage, ListerWatcher, Registration, SharedIndexInformer,
    WatchOptions, metrics,
};
use k8s_openapi::api::core::v1::ConfigMap;
use parking_lot::Mutex;
use support::cm;
use tokio::sync::mpsc;

// === a fake API server ===

type Event = Result<WatchEvent<ConfigMap>>;

/// What a WATCH request gets: a channel of events, or an error that refuses it.
type WatchReply = std::result::Result<mpsc::UnboundedReceiver<Event>, ErrorKind>;

/// LIST answers come from a queue; each WATCH takes the next queued channel. With nothing
/// queued, the request waits until something is.
#[derive(Clone, Default)]
struct Fake {
    lists: Arc<Mutex<VecDeque<ListPage<ConfigMap>>>>,
    /// Each WATCH takes the next entry: a channel, or an error that refuses the request.
    watches: Arc<Mutex<VecDeque<WatchReply>>>,
    queued: Arc<tokio::sync::Notify>,
    list_calls: Arc<AtomicUsize>,
}

/// The sending end of one watch. Dropping it closes the watch.
struct Watch(mpsc::UnboundedSender<Event>);

impl Watch {
    fn send(&self, event: WatchEvent<ConfigMap>) {
        self.0.send(Ok(event)).expect("the watch is open");
    }

    fn fail(&self, kind: ErrorKind) {
        let _ = self.0.send(Err(Error::new(kind, format!("fake {kind:?}"))));
    }
}

impl Fake {
    fn list(&self, objects: &[(&str, &str)], rv: &str) {
        self.lists.lock().push_back(ListPage {
            items: objects.iter().map(|(n, v)| cm(n, v)).collect(),
            resource_version: rv.into(),
            continue_token: None,
        });
        self.queued.notify_one();
    }

    fn watch(&self) -> Watch {
        let (tx, rx) = mpsc::unbounded_channel();
        self.watches.lock().push_back(Ok(rx));
        self.queued.notify_one();
        Watch(tx)
    }

    /// The next WATCH request fails with `kind`.
    fn refuse_watch(&self, kind: ErrorKind) {
        self.watches.lock().push_back(Err(kind));
        self.queued.notify_one();
    }
}

struct FakeStream(mpsc::UnboundedReceiver<Event>);

impl EventStream<ConfigMap> for FakeStream {
    async fn next(&mut self) -> Option<Event> {
        self.0.recv().await
    }
}

impl ListerWatcher<ConfigMap> for Fake {
    type Stream = FakeStream;

    async fn list(&self, _: &ListOptions) -> Result<ListPage<ConfigMap>> {
        self.list_calls.fetch_add(1, Ordering::SeqCst);
        loop {
            let page = self.lists.lock().pop_front();
            match page {
                Some(page) => return Ok(page),
                None => self.queued.notified().await,
            }
        }
    }

    async fn watch(&self, _: &WatchOptions) -> Result<FakeStream> {
        loop {
            let rx = self.watches.lock().pop_front();
            match rx {
                Some(Ok(rx)) => return Ok(FakeStream(rx)),
                Some(Err(kind)) => return Err(Error::new(kind, format!("fake {kind:?}"))),
                None => self.queued.notified().await,
            }
        }
    }
}

// === a handler that writes down what it hears ===

#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    fn lines(&self) -> Vec<String> {
        self.0.lock().clone()
    }

    fn sorted(&self) -> Vec<String> {
        let mut lines = self.lines();
        lines.sort();
        lines
    }

    fn count(&self, prefix: &str) -> usize {
        self.0
            .lock()
            .iter()
            .filter(|l| l.starts_with(prefix))
            .count()
    }
}

fn name(cm: &ConfigMap) -> &str {
    cm.metadata.name.as_deref().unwrap_or("")
}

fn rv(cm: &ConfigMap) -> &str {
    cm.metadata.resource_version.as_deref().unwrap_or("")
}

impl EventHandler<ConfigMap> for Log {
    fn on_add(&self, obj: &Arc<ConfigMap>, initial: bool) {
        let tag = if initial { " (initial)" } else { "" };
        self.0
            .lock()
            .push(format!("add {}@{}{tag}", name(obj), rv(obj)));
    }

    fn on_update(&self, old: &Arc<ConfigMap>, new: &Arc<ConfigMap>) {
        self.0
            .lock()
            .push(format!("update {}@{}->{}", name(new), rv(old), rv(new)));
    }

    fn on_delete(&self, obj: &DeletedObject<ConfigMap>) {
        let line = match obj {
            DeletedObject::Object(o) => format!("delete {}@{}", name(o), rv(o)),
            DeletedObject::Tombstone(t) => format!(
                "tombstone {} (last @{})",
                t.key,
                t.obj.as_deref().map_or("-", rv)
            ),
        };
        self.0.lock().push(line);
    }
}

// === helpers ===

fn options(resync: Duration, fifo: FifoKind) -> InformerOptions {
    let mut options = InformerOptions::named("test");
    options.resync_period = resync;
    options.fifo = fifo;
    options.reflector.watch_list = false;
    options
}

fn informer(fake: &Fake, resync: Duration, fifo: FifoKind) -> Arc<SharedIndexInformer<ConfigMap>> {
    Arc::new(SharedIndexInformer::new(
        fake.clone(),
        options(resync, fifo),
    ))
}

/// Declares the behaviour test `async fn $name(fifo: FifoKind)` (written below it) as two
/// tests, `$name::delta` and `$name::in_order`: one per queue, with the given attribute.
macro_rules! on_both_queues {
    (#[$attr:meta] $name:ident) => {
        mod $name {
            use super::*;

            #[$attr]
            async fn in_order() {
                super::$name(FifoKind::InOrder).await;
            }

            #[$attr]
            async fn delta() {
                super::$name(FifoKind::Delta).await;
            }
        }
    };
}

/// A running informer and the means to stop it.
struct Running {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

fn run(informer: &Arc<SharedIndexInformer<ConfigMap>>) -> Running {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let informer = informer.clone();
    let task = tokio::spawn(async move {
        informer
            .run(async {
                let _ = stopped.await;
            })
            .await;
    });
    Running { stop, task }
}

impl Running {
    async fn stop(self) {
        let _ = self.stop.send(());
        self.task.await.expect("run returns after shutdown");
    }
}

/// On paused time: lets every task run until all are idle, and the clock move `d` on.
async fn pass(d: Duration) {
    tokio::time::sleep(d).await;
}

async fn settle() {
    pass(Duration::from_millis(1)).await;
}

const SECOND: Duration = Duration::from_secs(1);

/// Bounds a wait: a hang fails the test instead of stalling it (on paused time the bound
/// passes only when nothing else can happen).
async fn bounded<F: std::future::Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(60), f)
        .await
        .unwrap_or_else(|_| panic!("{what}: never happened"))
}

// === delivery ===

on_both_queues!(
    #[tokio::test(start_paused = true)]
    every_handler_receives_every_notification_in_order
);
async fn every_handler_receives_every_notification_in_order(fifo: FifoKind) {
    let fake = Fake::default();
    fake.list(&[("a", "1"), ("b", "1")], "1");
    let watch = fake.watch();
    let informer = informer(&fake, Duration::ZERO, fifo);
    let logs: Vec<Log> = (0..3).map(|_| Log::default()).collect();
    let regs: Vec<Registration> = logs
        .iter()
        .map(|log| informer.add_event_handler(log.clone()).unwrap())
        .collect();
    let running = run(&informer);
    settle().await;
    watch.send(WatchEvent::Added(cm("c", "2")));
    watch.send(WatchEvent::Modified(cm("a", "3")));
    watch.send(WatchEvent::Deleted(cm("b", "4")));
    settle().await;

    for log in &logs {
        assert_eq!(
            log.lines(),
            [
                "add a@1 (initial)",
                "add b@1 (initial)",
                "add c@2",
                "update a@1->3",
                "delete b@4",
            ]
        );
    }
    assert!(informer.has_synced());
    assert!(regs.iter().all(Registration::has_synced));
    let mut keys = informer.get_indexer().list_keys();
    keys.sort();
    assert_eq!(keys, ["ns/a".into(), "ns/c".into()]);
    assert_eq!(informer.last_sync_resource_version(), "4");
    running.stop().await;
}

on_both_queues!(
    #[tokio::test(start_paused = true)]
    objects_are_shared_by_the_cache_and_every_handler_never_copied
);
async fn objects_are_shared_by_the_cache_and_every_handler_never_copied(fifo: FifoKind) {
    let fake = Fake::default();
    fake.list(&[("a", "1")], "1");
    let informer = informer(&fake, Duration::ZERO, fifo);
    let seen: Arc<Mutex<Vec<Arc<ConfigMap>>>> = Arc::default();
    for _ in 0..2 {
        let seen = seen.clone();
        informer
            .add_event_handler(
                HandlerFns::<ConfigMap>::new()
                    .with_add(move |obj, _| seen.lock().push(obj.clone())),
            )
            .unwrap();
    }
    let running = run(&informer);
    settle().await;
    let cached = informer.get_indexer().get_by_key("ns/a").unwrap();
    let seen = seen.lock().clone();
    assert_eq!(seen.len(), 2);
    assert!(seen.iter().all(|obj| Arc::ptr_eq(obj, &cached)));
    running.stop().await;
}

/// Blocks the first handler call until the test opens the gate: a really slow handler.
struct Gated {
    gate: Mutex<Option<std::sync::mpsc::Receiver<()>>>,
    handled: tokio::sync::watch::Sender<usize>,
}

impl EventHandler<ConfigMap> for Gated {
    fn on_add(&self, _: &Arc<ConfigMap>, _: bool) {
        if let Some(gate) = self.gate.lock().take() {
            // A handler that blocks does it as the EventHandler contract says, so the tasks
            // queued behind it on this worker move to another.
            let _ = tokio::task::block_in_place(|| gate.recv());
        }
        self.handled.send_modify(|n| *n += 1);
    }
}

fn counter() -> (
    tokio::sync::watch::Sender<usize>,
    tokio::sync::watch::Receiver<usize>,
) {
    tokio::sync::watch::channel(0)
}

on_both_queues!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    a_slow_handler_delays_neither_the_other_handlers_nor_the_fifo
);
async fn a_slow_handler_delays_neither_the_other_handlers_nor_the_fifo(fifo: FifoKind) {
    let fake = Fake::default();
    let listed: Vec<(String, String)> = (0..100).map(|i| (format!("l{i}"), "1".into())).collect();
    let listed: Vec<(&str, &str)> = listed
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    fake.list(&listed, "1");
    let watch = fake.watch();
    let informer = informer(&fake, Duration::ZERO, fifo);

    let (open_gate, gate) = std::sync::mpsc::channel();
    let (slow_count, mut slow_seen) = counter();
    let slow = informer
        .add_event_handler(Gated {
            gate: Mutex::new(Some(gate)),
            handled: slow_count,
        })
        .unwrap();
    let (fast_count, mut fast_seen) = counter();
    let fast = informer
        .add_event_handler(Gated {
            gate: Mutex::new(None),
            handled: fast_count,
        })
        .unwrap();
    let running = run(&informer);
    for i in 0..100 {
        watch.send(WatchEvent::Added(cm(&format!("w{i}"), "2")));
    }

    // The slow handler is stuck in its first call; everything else goes on.
    bounded(
        "the fast handler sees all 200 adds",
        fast_seen.wait_for(|n| *n == 200),
    )
    .await
    .unwrap();
    bounded("the informer syncs", informer.wait_synced()).await;
    assert_eq!(informer.get_indexer().len(), 200, "the FIFO was drained");
    assert!(fast.has_synced());
    assert_eq!(
        *slow_seen.borrow(),
        0,
        "the slow handler is still in its first call"
    );
    assert!(
        !slow.has_synced(),
        "a handler that has not handled the initial list is not synced"
    );

    // Once it is released, it catches up on everything, in its own time.
    open_gate.send(()).unwrap();
    bounded(
        "the slow handler catches up",
        slow_seen.wait_for(|n| *n == 200),
    )
    .await
    .unwrap();
    bounded("the slow registration syncs", slow.wait_synced()).await;
    running.stop().await;
}

// === late handlers ===

on_both_queues!(
    #[tokio::test(start_paused = true)]
    a_handler_added_late_receives_the_whole_cache_then_later_changes
);
async fn a_handler_added_late_receives_the_whole_cache_then_later_changes(fifo: FifoKind) {
    let fake = Fake::default();
    fake.list(&[("a", "1"), ("b", "1"), ("c", "1")], "1");
    let watch = fake.watch();
    let informer = informer(&fake, Duration::ZERO, fifo);
    let early = Log::default();
    informer.add_event_handler(early.clone()).unwrap();
    let running = run(&informer);
    settle().await;
    assert!(informer.has_synced());

    let late = Log::default();
    let reg = informer.add_event_handler(late.clone()).unwrap();
    assert!(
        !reg.has_synced(),
        "not synced before its initial adds are handled"
    );
    settle().await;
    assert_eq!(
        late.sorted(),
        [
            "add a@1 (initial)",
            "add b@1 (initial)",
            "add c@1 (initial)"
        ]
    );
    assert!(reg.has_synced());

    watch.send(WatchEvent::Modified(cm("a", "2")));
    settle().await;
    assert_eq!(late.lines().last().unwrap(), "update a@1->2");
    assert_eq!(late.lines().len(), 4, "nothing doubled");
    assert_eq!(
        early.lines(),
        [
            "add a@1 (initial)",
            "add b@1 (initial)",
            "add c@1 (initial)",
            "update a@1->2"
        ],
        "the early handler got nothing extra"
    );
    running.stop().await;
}

// === resync ===

on_both_queues!(
    #[tokio::test(start_paused = true)]
    periodic_resync_reaches_only_the_handlers_whose_period_is_due
);
async fn periodic_resync_reaches_only_the_handlers_whose_period_is_due(fifo: FifoKind) {
    let fake = Fake::default();
    fake.list(&[("a", "1"), ("b", "1")], "1");
    let _watch = fake.watch();
    let informer = informer(&fake, 10 * SECOND, fifo);
    let every10 = Log::default();
    let every30 = Log::default();
    let never = Log::default();
    informer.add_event_handler(every10.clone()).unwrap();
    let r30 = informer
        .add_event_handler_with_resync(every30.clone(), 30 * SECOND)
        .unwrap();
    let r0 = informer
        .add_event_handler_with_resync(never.clone(), Duration::ZERO)
        .unwrap();
    assert_eq!(r30.resync_period(), 30 * SECOND);
    assert_eq!(r0.resync_period(), Duration::ZERO);
    let running = run(&informer);
    pass(65 * SECOND).await;

    // Resyncs are same-version updates: at 10, 20, … 60 s, and at 30 and 60 s; two objects.
    assert_eq!(every10.count("update a@1->1"), 6);
    assert_eq!(every10.count("update b@1->1"), 6);
    assert_eq!(every30.count("update "), 4);
    assert_eq!(never.count("update "), 0);
    assert_eq!(never.lines().len(), 2, "only the initial adds");
    running.stop().await;
}

on_both_queues!(
    #[tokio::test(start_paused = true)]
    a_relist_of_unchanged_objects_reaches_only_the_handlers_marked_for_resync
);
async fn a_relist_of_unchanged_objects_reaches_only_the_handlers_marked_for_resync(fifo: FifoKind) {
    let fake = Fake::default();
    fake.list(&[("a", "1"), ("b", "1")], "1");
    let first = fake.watch();
    let informer = informer(&fake, 10 * SECOND, fifo);
    let due = Log::default();
    let not_due = Log::default();
    informer.add_event_handler(due.clone()).unwrap();
    informer
        .add_event_handler_with_resync(not_due.clone(), 60 * SECOND)
        .unwrap();
    let running = run(&informer);

    // At 10 s the resync check marks `due` and resyncs it, key by key in the cache's own
    // (unspecified) order.
    pass(15 * SECOND).await;
    let mut resynced = due.lines()[2..].to_vec();
    resynced.sort();
    assert_eq!(resynced, ["update a@1->1", "update b@1->1"]);
    assert_eq!(not_due.count("update "), 0);

    // The watch breaks; the relist returns `a` unchanged and `b` changed. The unchanged one is
    // a resync (same resourceVersion): only the handler the last check marked gets it.
    fake.list(&[("a", "1"), ("b", "5")], "5");
    let _second = fake.watch();
    first.fail(ErrorKind::Gone);
    pass(4 * SECOND).await;
    // The relist's deltas come in the list's order.
    assert_eq!(due.lines()[4..], ["update a@1->1", "update b@1->5"]);
    assert_eq!(
        not_due.lines(),
        ["add a@1 (initial)", "add b@1 (initial)", "update b@1->5"]
    );
    running.stop().await;
}

on_both_queues!(
    #[tokio::test(start_paused = true)]
    without_resync_a_relist_of_unchanged_objects_notifies_nobody
);
async fn without_resync_a_relist_of_unchanged_objects_notifies_nobody(fifo: FifoKind) {
    let fake = Fake::default();
    fake.list(&[("a", "1"), ("b", "1")], "1");
    let first = fake.watch();
    let informer = informer(&fake, Duration::ZERO, fifo);
    let log = Log::default();
    informer.add_event_handler(log.clone()).unwrap();
    let running = run(&informer);
    settle().await;
    fake.list(&[("a", "1"), ("b", "2")], "2");
    let _second = fake.watch();
    first.fail(ErrorKind::Gone);
    pass(5 * SECOND).await;
    assert_eq!(fake.list_calls.load(Ordering::SeqCst), 2, "it relisted");
    assert_eq!(
        log.lines(),
        ["add a@1 (initial)", "add b@1 (initial)", "update b@1->2"]
    );
    running.stop().await;
}

on_both_queues!(
    #[tokio::test]
    handler_resync_periods_follow_client_go_rules
);
async fn handler_resync_periods_follow_client_go_rules(fifo: FifoKind) {
    let fake = Fake::default();
    let informer = informer(&fake, 30 * SECOND, fifo);
    let default = informer.add_event_handler(Log::default()).unwrap();
    assert_eq!(default.resync_period(), 30 * SECOND);

    // Before the start, a shorter period lowers the check period; longer ones are kept.
    let fast = informer
        .add_event_handler_with_resync(Log::default(), 10 * SECOND)
        .unwrap();
    assert_eq!(informer.resync_check_period(), 10 * SECOND);
    assert_eq!(fast.resync_period(), 10 * SECOND);
    assert_eq!(default.resync_period(), 30 * SECOND);
    // Below the one-second minimum: raised to it.
    let tiny = informer
        .add_event_handler_with_resync(Log::default(), Duration::from_millis(10))
        .unwrap();
    assert_eq!(tiny.resync_period(), SECOND);
    assert_eq!(informer.resync_check_period(), SECOND);

    // After the start, the check period is fixed: a shorter period is raised to it.
    let informer = self::informer(&fake, 30 * SECOND, fifo);
    let running = run(&informer);
    settle().await;
    let late = informer
        .add_event_handler_with_resync(Log::default(), 10 * SECOND)
        .unwrap();
    assert_eq!(late.resync_period(), 30 * SECOND);
    assert_eq!(informer.resync_check_period(), 30 * SECOND);

    // An informer that never resyncs ignores what handlers ask.
    let never = self::informer(&fake, Duration::ZERO, fifo);
    let asked = never
        .add_event_handler_with_resync(Log::default(), 10 * SECOND)
        .unwrap();
    assert_eq!(asked.resync_period(), Duration::ZERO);
    assert_eq!(never.resync_check_period(), Duration::ZERO);
    running.stop().await;
}

// === has_synced ===

on_both_queues!(
    #[tokio::test(start_paused = true)]
    has_synced_waits_for_the_first_list_to_be_processed
);
async fn has_synced_waits_for_the_first_list_to_be_processed(fifo: FifoKind) {
    let fake = Fake::default();
    let informer = informer(&fake, Duration::ZERO, fifo);
    let reg = informer.add_event_handler(Log::default()).unwrap();
    assert!(!informer.has_synced(), "not before run");
    assert!(!reg.has_synced());
    let running = run(&informer);
    settle().await;
    assert!(!informer.has_synced(), "not before the first list");
    assert!(!reg.has_synced());

    fake.list(&[("a", "1"), ("b", "1")], "1");
    let _watch = fake.watch();
    bounded("the informer syncs", informer.wait_synced()).await;
    assert_eq!(informer.get_indexer().len(), 2, "synced means cached");
    bounded("the registration syncs", reg.wait_synced()).await;
    running.stop().await;
}

on_both_queues!(
    #[tokio::test(start_paused = true)]
    an_empty_first_list_syncs_at_once
);
async fn an_empty_first_list_syncs_at_once(fifo: FifoKind) {
    let fake = Fake::default();
    fake.list(&[], "7");
    let _watch = fake.watch();
    let informer = informer(&fake, Duration::ZERO, fifo);
    let reg = informer.add_event_handler(Log::default()).unwrap();
    let running = run(&informer);
    settle().await;
    assert!(informer.has_synced());
    assert!(reg.has_synced());
    assert_eq!(informer.last_sync_resource_version(), "7");
    running.stop().await;
}

// === transform ===

on_both_queues!(
    #[tokio::test(start_paused = true)]
    the_transform_runs_once_per_object_before_it_is_cached_and_handed_out
);
async fn the_transform_runs_once_per_object_before_it_is_cached_and_handed_out(fifo: FifoKind) {
    let fake = Fake::default();
    fake.list(&[("a", "1"), ("b", "1")], "1");
    let watch = fake.watch();
    let informer = informer(&fake, Duration::ZERO, fifo);
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    informer
        .set_transform(move |cm: &mut ConfigMap| {
            c.fetch_add(1, Ordering::SeqCst);
            cm.metadata.managed_fields = None;
            cm.metadata
                .labels
                .get_or_insert_default()
                .insert("transformed".into(), "yes".into());
        })
        .unwrap();
    let seen: Arc<Mutex<Vec<Arc<ConfigMap>>>> = Arc::default();
    let s = seen.clone();
    informer
        .add_event_handler(
            HandlerFns::<ConfigMap>::new().with_add(move |obj, _| s.lock().push(obj.clone())),
        )
        .unwrap();
    let running = run(&informer);
    settle().await;
    watch.send(WatchEvent::Added(cm("c", "2")));
    settle().await;

    let transformed = |cm: &ConfigMap| {
        cm.metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.get("transformed").is_some_and(|v| v == "yes"))
    };
    assert_eq!(calls.load(Ordering::SeqCst), 3, "once per object received");
    assert_eq!(seen.lock().len(), 3);
    assert!(seen.lock().iter().all(|o| transformed(o)));
    assert!(informer.get_indexer().list().iter().all(|o| transformed(o)));
    assert_eq!(
        informer.set_transform(|_| {}),
        Err(InformerError::Started),
        "only before the start"
    );
    assert_eq!(
        informer.set_watch_error_handler(|_| {}),
        Err(InformerError::Started)
    );
    running.stop().await;
}

// === watch errors ===

on_both_queues!(
    #[tokio::test(start_paused = true)]
    the_watch_error_handler_hears_a_refused_watch_and_the_informer_recovers
);
async fn the_watch_error_handler_hears_a_refused_watch_and_the_informer_recovers(fifo: FifoKind) {
    let fake = Fake::default();
    fake.list(&[("a", "1")], "1");
    fake.refuse_watch(ErrorKind::Other);
    let informer = informer(&fake, Duration::ZERO, fifo);
    let errors: Arc<Mutex<Vec<(ErrorKind, String)>>> = Arc::default();
    let e = errors.clone();
    informer
        .set_watch_error_handler(move |err| e.lock().push((err.kind(), err.to_string())))
        .unwrap();
    let log = Log::default();
    informer.add_event_handler(log.clone()).unwrap();
    let running = run(&informer);
    settle().await;
    assert_eq!(
        *errors.lock(),
        [(ErrorKind::Other, "fake Other".to_owned())],
        "the handler hears why the watch failed"
    );

    // After a backoff the informer lists again and goes on watching.
    fake.list(&[("a", "1"), ("b", "2")], "2");
    let watch = fake.watch();
    pass(3 * SECOND).await;
    assert_eq!(fake.list_calls.load(Ordering::SeqCst), 2);
    watch.send(WatchEvent::Added(cm("c", "3")));
    settle().await;
    assert_eq!(log.count("add c"), 1, "{:?}", log.lines());
    assert_eq!(errors.lock().len(), 1, "nothing more went wrong");
    running.stop().await;
}

// === removal ===

on_both_queues!(
    #[tokio::test(start_paused = true)]
    a_removed_handler_receives_nothing_more_and_removal_is_idempotent
);
async fn a_removed_handler_receives_nothing_more_and_removal_is_idempotent(fifo: FifoKind) {
    let fake = Fake::default();
    fake.list(&[("a", "1")], "1");
    let watch = fake.watch();
    let informer = informer(&fake, Duration::ZERO, fifo);
    let removed = Log::default();
    let kept = Log::default();
    let reg = informer.add_event_handler(removed.clone()).unwrap();
    informer.add_event_handler(kept.clone()).unwrap();
    let running = run(&informer);
    settle().await;

    informer.remove_event_handler(&reg);
    assert!(reg.is_stopped());
    informer.remove_event_handler(&reg);
    // A registration from another informer is not this informer's business.
    let other = self::informer(&Fake::default(), Duration::ZERO, fifo);
    let foreign = other.add_event_handler(Log::default()).unwrap();
    informer.remove_event_handler(&foreign);
    assert!(!foreign.is_stopped());

    watch.send(WatchEvent::Added(cm("b", "2")));
    settle().await;
    assert_eq!(removed.lines(), ["add a@1 (initial)"]);
    assert_eq!(kept.lines(), ["add a@1 (initial)", "add b@2"]);
    running.stop().await;
}

// === panics ===

on_both_queues!(
    #[tokio::test(start_paused = true)]
    a_panicking_handler_is_isolated_and_goes_on_with_the_next_notification
);
async fn a_panicking_handler_is_isolated_and_goes_on_with_the_next_notification(fifo: FifoKind) {
    let fake = Fake::default();
    fake.list(&[("a", "1"), ("boom", "1"), ("c", "1")], "1");
    let watch = fake.watch();
    let informer = informer(&fake, Duration::ZERO, fifo);
    let survivor = Log::default();
    let s = survivor.clone();
    let panicky = informer
        .add_event_handler(
            HandlerFns::new().with_add(move |obj: &Arc<ConfigMap>, initial| {
                assert_ne!(name(obj), "boom", "the handler panics on boom");
                s.on_add(obj, initial);
            }),
        )
        .unwrap();
    let bystander = Log::default();
    informer.add_event_handler(bystander.clone()).unwrap();
    let running = run(&informer);
    pass(5 * SECOND).await;
    watch.send(WatchEvent::Added(cm("d", "2")));
    pass(5 * SECOND).await;

    assert_eq!(
        survivor.lines(),
        ["add a@1 (initial)", "add c@1 (initial)", "add d@2"],
        "the panicking notification is skipped, the next ones delivered"
    );
    assert_eq!(
        bystander.lines(),
        [
            "add a@1 (initial)",
            "add boom@1 (initial)",
            "add c@1 (initial)",
            "add d@2"
        ]
    );
    assert!(
        panicky.has_synced(),
        "an initial add that panicked still counts as handled"
    );
    running.stop().await;
}

// === tombstones ===

#[tokio::test(start_paused = true)]
async fn a_deletion_missed_while_disconnected_arrives_as_a_tombstone_after_the_relist() {
    for fifo in [FifoKind::Delta, FifoKind::InOrder] {
        for watch_list in [false, true] {
            tombstone_after_relist(watch_list, fifo).await;
        }
    }
}

async fn tombstone_after_relist(watch_list: bool, fifo: FifoKind) {
    let fake = Fake::default();
    let first = fake.watch();
    let mut options = options(Duration::ZERO, fifo);
    options.reflector.watch_list = watch_list;
    options.fifo = fifo;
    let informer = Arc::new(SharedIndexInformer::new(fake.clone(), options));
    let log = Log::default();
    informer.add_event_handler(log.clone()).unwrap();
    if watch_list {
        // A streaming list: the initial state as events, ended by a bookmark.
        first.send(WatchEvent::Added(cm("a", "1")));
        first.send(WatchEvent::Added(cm("b", "1")));
        first.send(WatchEvent::Bookmark {
            resource_version: "1".into(),
            initial_events_end: true,
        });
    } else {
        fake.list(&[("a", "1"), ("b", "1")], "1");
    }
    let running = run(&informer);
    settle().await;
    first.send(WatchEvent::Modified(cm("a", "2")));
    settle().await;

    // The watch breaks; meanwhile `b` is deleted. The relist no longer has it.
    let second = fake.watch();
    if watch_list {
        second.send(WatchEvent::Added(cm("a", "2")));
        second.send(WatchEvent::Bookmark {
            resource_version: "5".into(),
            initial_events_end: true,
        });
    } else {
        fake.list(&[("a", "2")], "5");
    }
    first.fail(ErrorKind::Gone);
    pass(5 * SECOND).await;

    let mut want = vec!["add a@1 (initial)", "add b@1 (initial)"];
    if watch_list {
        // The streaming list's events come in no fixed order.
        let mut initial = log.lines()[..2].to_vec();
        initial.sort();
        assert_eq!(initial, want, "watch_list={watch_list}");
    }
    want.extend(["update a@1->2", "tombstone ns/b (last @1)"]);
    assert_eq!(
        log.sorted()[..],
        sorted(&want)[..],
        "watch_list={watch_list}"
    );
    assert_eq!(
        log.lines()[2..],
        want[2..],
        "in order after the initial list; watch_list={watch_list}"
    );
    assert!(informer.get_indexer().get_by_key("ns/b").is_none());
    running.stop().await;
}

// === the two queues ===

/// What a handler hears from an informer on `fifo` whose pops lag a second each, so that the
/// watch's events are all queued before the first pop.
async fn heard_while_behind(fifo: FifoKind) -> Vec<String> {
    let fake = Fake::default();
    fake.list(&[("a", "1"), ("b", "1")], "1");
    let watch = fake.watch();
    let mut options = options(Duration::ZERO, fifo);
    (options.fifo, options.pop_delay) = (fifo, SECOND);
    let informer = Arc::new(SharedIndexInformer::new(fake.clone(), options));
    let log = Log::default();
    informer.add_event_handler(log.clone()).unwrap();
    let running = run(&informer);
    settle().await;
    watch.send(WatchEvent::Added(cm("c", "2")));
    watch.send(WatchEvent::Modified(cm("a", "3")));
    watch.send(WatchEvent::Modified(cm("c", "4")));
    watch.send(WatchEvent::Deleted(cm("b", "5")));
    pass(10 * SECOND).await;
    assert!(informer.has_synced(), "{fifo:?}");
    let mut keys = informer.get_indexer().list_keys();
    keys.sort();
    assert_eq!(keys, ["ns/a".into(), "ns/c".into()], "{fifo:?}");
    running.stop().await;
    log.lines()
}

#[tokio::test(start_paused = true)]
async fn both_queues_deliver_every_change_the_delta_fifo_by_key_the_real_fifo_as_it_came() {
    assert_eq!(
        heard_while_behind(FifoKind::Delta).await,
        [
            "add a@1 (initial)",
            "update a@1->3",
            "add b@1 (initial)",
            "delete b@5",
            "add c@2",
            "update c@2->4",
        ]
    );
    assert_eq!(
        heard_while_behind(FifoKind::InOrder).await,
        [
            "add a@1 (initial)",
            "add b@1 (initial)",
            "add c@2",
            "update a@1->3",
            "update c@2->4",
            "delete b@5",
        ]
    );
}

// === the pop hook ===

on_both_queues!(
    #[tokio::test(start_paused = true)]
    the_pop_hook_sees_each_pop_and_what_the_informer_did_in_order
);
async fn the_pop_hook_sees_each_pop_and_what_the_informer_did_in_order(fifo: FifoKind) {
    let fake = Fake::default();
    fake.list(&[("a", "1"), ("b", "1")], "1");
    let first = fake.watch();
    let informer = informer(&fake, Duration::ZERO, fifo);
    informer.add_event_handler(Log::default()).unwrap();
    let pops = Log::default();
    let (heard, cache) = (pops.clone(), informer.get_indexer().clone());
    informer.on_pop(move |pop| {
        let steps: Vec<String> = pop
            .steps
            .iter()
            .map(|step| {
                let delta = &step.delta;
                let rv = delta.object.object().map_or("-", |o| rv(o));
                let tombstone = if delta.object.is_tombstone() {
                    " (tombstone)"
                } else {
                    ""
                };
                let action = step.action;
                format!(
                    "{}@{rv}{tombstone} → {action:?} to {}",
                    delta.kind, step.notified
                )
            })
            .collect();
        let initial = if pop.is_in_initial_list {
            " (initial)"
        } else {
            ""
        };
        let line = format!(
            "{}{initial}: {}; cache {}",
            pop.key,
            steps.join(", "),
            cache.len()
        );
        heard.0.lock().push(line);
    });
    let running = run(&informer);
    settle().await;
    for event in [
        WatchEvent::Added(cm("c", "2")),
        WatchEvent::Modified(cm("c", "3")),
        WatchEvent::Deleted(cm("c", "4")),
    ] {
        first.send(event);
        settle().await;
    }
    // The watch breaks; the relist has `a` unchanged and `b` gone.
    let _second = fake.watch();
    fake.list(&[("a", "1")], "5");
    first.fail(ErrorKind::Gone);
    pass(5 * SECOND).await;

    let mut expected = vec![
        "ns/a (initial): Replaced@1 → Add to 1; cache 1",
        "ns/b (initial): Replaced@1 → Add to 1; cache 2",
        "ns/c: Added@2 → Add to 1; cache 3",
        "ns/c: Updated@3 → Update to 1; cache 3",
        "ns/c: Deleted@4 → Delete to 1; cache 2",
    ];
    // The relist: the in-order queue applies what is gone first, the DeltaFIFO last.
    let gone = "ns/b: Deleted@1 (tombstone) → Delete to 1; cache 1";
    match fifo {
        FifoKind::InOrder => expected.extend([gone, "ns/a: Replaced@1 → Resync to 0; cache 1"]),
        FifoKind::Delta => expected.extend(["ns/a: Replaced@1 → Resync to 0; cache 2", gone]),
    }
    assert_eq!(pops.lines(), expected);
    running.stop().await;
}

fn sorted(lines: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = lines.iter().map(|s| (*s).to_owned()).collect();
    v.sort();
    v
}

// === lifecycle ===

/// Counts the live copies of a handler: the count drops when its task is gone.
struct Tracked(#[allow(dead_code)] Arc<()>);
impl EventHandler<ConfigMap> for Tracked {}

on_both_queues!(
    #[tokio::test(start_paused = true)]
    run_twice_returns_at_once_and_a_stopped_informer_refuses_handlers
);
async fn run_twice_returns_at_once_and_a_stopped_informer_refuses_handlers(fifo: FifoKind) {
    let fake = Fake::default();
    fake.list(&[("a", "1")], "1");
    let _watch = fake.watch();
    let informer = informer(&fake, Duration::ZERO, fifo);
    let alive = Arc::new(());
    let reg = informer.add_event_handler(Tracked(alive.clone())).unwrap();
    let running = run(&informer);
    settle().await;
    assert!(informer.is_started());
    // A second run is refused at once.
    informer.run(std::future::pending()).await;
    assert!(!informer.is_stopped());
    assert_eq!(Arc::strong_count(&alive), 2, "the handler's task holds it");
    informer
        .add_indexers(
            [(
                "name".to_owned(),
                IndexFunc::new(|cm: &ConfigMap, out| out.push(name(cm))),
            )]
            .into(),
        )
        .unwrap();
    assert_eq!(informer.lister().by_index("name", "a").unwrap().len(), 1);

    running.stop().await;
    assert!(informer.is_stopped());
    assert!(reg.is_stopped());
    assert_eq!(
        Arc::strong_count(&alive),
        1,
        "the handler's task ended with the informer"
    );
    assert_eq!(
        informer.add_event_handler(Log::default()).unwrap_err(),
        InformerError::Stopped
    );
    assert_eq!(
        informer.add_indexers(Default::default()).unwrap_err(),
        InformerError::Stopped
    );
    assert!(informer.has_synced(), "the cache stays readable");
    assert_eq!(informer.lister().list().len(), 1);
}

on_both_queues!(
    #[tokio::test(start_paused = true)]
    dropping_the_run_future_stops_the_informer
);
async fn dropping_the_run_future_stops_the_informer(fifo: FifoKind) {
    let fake = Fake::default();
    fake.list(&[("a", "1")], "1");
    let _watch = fake.watch();
    let informer = informer(&fake, Duration::ZERO, fifo);
    let running = run(&informer);
    settle().await;
    running.task.abort();
    let _ = running.task.await;
    assert!(informer.is_stopped());
}

// === the store's resource-version watermark ===

/// Runs an informer on `fifo` whose pops lag a second each, through a list, a burst of watch
/// events queued before they pop (a bookmark among them), and a relist. Returns, per pop, its
/// key and the watermark when the pop began (what the pops before it had earned), then the
/// watermark at the end.
async fn watermark_per_pop(fifo: FifoKind) -> Vec<String> {
    let fake = Fake::default();
    fake.list(&[("x", "1")], "2");
    let watch = fake.watch();
    let mut options = options(Duration::ZERO, fifo);
    (options.fifo, options.pop_delay) = (fifo, SECOND);
    let informer = Arc::new(SharedIndexInformer::new(fake.clone(), options));
    let mut watermark = informer.watch_store_resource_version();
    assert_eq!(informer.store_resource_version(), 0, "nothing applied yet");
    let pops = Log::default();
    let (heard, reader) = (pops.clone(), informer.clone());
    informer.on_pop(move |pop| {
        let line = format!("{}@{}", pop.key, reader.store_resource_version());
        heard.0.lock().push(line);
    });
    let running = run(&informer);
    bounded("the first list", watermark.wait_for(|&rv| rv == 2))
        .await
        .unwrap();
    for event in [
        WatchEvent::Added(cm("b", "3")),
        WatchEvent::Added(cm("a", "5")),
        WatchEvent::Modified(cm("b", "7")),
        // Not an integer: moves nothing, breaks nothing.
        WatchEvent::Added(cm("c", "x9")),
        WatchEvent::Bookmark {
            resource_version: "9".into(),
            initial_events_end: false,
        },
    ] {
        watch.send(event);
    }
    bounded("the burst", watermark.wait_for(|&rv| rv == 9))
        .await
        .unwrap();
    // The watch breaks; the relist has `d` new and `x` gone.
    let _second = fake.watch();
    fake.list(&[("a", "5"), ("b", "7"), ("c", "x9"), ("d", "11")], "12");
    watch.fail(ErrorKind::Gone);
    bounded("the relist", watermark.wait_for(|&rv| rv == 12))
        .await
        .unwrap();
    let mut lines = pops.lines();
    lines.push(format!("end@{}", informer.store_resource_version()));
    running.stop().await;
    lines
}

#[tokio::test(start_paused = true)]
async fn with_the_in_order_fifo_the_watermark_follows_each_applied_event() {
    assert_eq!(
        watermark_per_pop(FifoKind::InOrder).await,
        [
            "ns/x@0", "ns/b@2", "ns/a@3", "ns/b@5", "ns/c@7",
            // The relist: tombstones first, then the listed objects; the list's version
            // counts once all of it is applied.
            "ns/x@9", "ns/a@9", "ns/b@9", "ns/c@9", "ns/d@9", "end@12",
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn with_the_delta_fifo_the_watermark_moves_only_when_the_queue_is_drained() {
    // `b` is popped first with both its deltas (3 and 7) while `a@5` still waits: keys pop in
    // first-arrival order, so 7 is not safe until `a` is applied, nor even 3 once the queue
    // holds deltas of unknown order. The watermark waits for the queue to empty.
    assert_eq!(
        watermark_per_pop(FifoKind::Delta).await,
        [
            "ns/x@0", "ns/b@2", "ns/a@2", "ns/c@2", "ns/a@9", "ns/b@9", "ns/c@9", "ns/d@9",
            "ns/x@9", "end@12",
        ]
    );
}

/// Threads that keep adding handlers (resynced every second) and removing one of theirs
/// until the informer refuses one, as client-go's `TestSharedInformerHandlerAbuse` does;
/// each returns how many registrations it made.
fn churn_handlers(
    informer: &Arc<SharedIndexInformer<ConfigMap>>,
    threads: usize,
    added: &Arc<AtomicUsize>,
) -> Vec<std::thread::JoinHandle<usize>> {
    (0..threads)
        .map(|seed| {
            let (informer, added) = (informer.clone(), added.clone());
            std::thread::spawn(move || {
                let mut registrations = Vec::new();
                // A small xorshift: which step to take, and which handler to remove.
                let mut x = (seed as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                let mut made = 0;
                loop {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    if x % 2 == 1 && !registrations.is_empty() {
                        let at = (x / 2) as usize % registrations.len();
                        informer.remove_event_handler(&registrations.swap_remove(at));
                        continue;
                    }
                    match informer.add_event_handler_with_resync(Tracked(Arc::default()), SECOND) {
                        Ok(registration) => {
                            made += 1;
                            added.fetch_add(1, Ordering::SeqCst);
                            registrations.push(registration);
                        }
                        Err(error) => {
                            assert_eq!(error, InformerError::Stopped);
                            assert_eq!(error.to_string(), "informer has stopped already");
                            return made;
                        }
                    }
                }
            })
        })
        .collect()
}

on_both_queues!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    stopping_while_threads_add_and_remove_handlers_returns_and_refuses_them
);
async fn stopping_while_threads_add_and_remove_handlers_returns_and_refuses_them(fifo: FifoKind) {
    let fake = Fake::default();
    let objects: Vec<(String, String)> = (0..50)
        .map(|i| (format!("cm{i}"), "1".to_owned()))
        .collect();
    let objects: Vec<(&str, &str)> = objects
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    fake.list(&objects, "1");
    let watch = fake.watch();
    let informer = informer(&fake, SECOND, fifo);
    let running = run(&informer);
    bounded("the first list", informer.wait_synced()).await;
    let added = Arc::new(AtomicUsize::new(0));
    let threads = churn_handlers(&informer, 64, &added);
    // Events keep flowing while handlers come and go.
    for i in 0..10_000 {
        let name = format!("cm{}", i % 50);
        let version = format!("{}", i + 2);
        watch.send(match i % 3 {
            0 => WatchEvent::Modified(cm(&name, &version)),
            1 => WatchEvent::Deleted(cm(&name, &version)),
            _ => WatchEvent::Added(cm(&name, &version)),
        });
        if i % 100 == 0 {
            tokio::task::yield_now().await;
        }
    }
    // Stop only once the churn is well under way, with a backlog still queued.
    bounded("handlers to pile up", async {
        while added.load(Ordering::SeqCst) < 10_000 {
            tokio::task::yield_now().await;
        }
    })
    .await;
    bounded("run to return while handlers churn", running.stop()).await;
    assert!(informer.is_stopped());
    let made = tokio::task::spawn_blocking(move || {
        threads
            .into_iter()
            .map(|thread| thread.join().expect("no thread panicked"))
            .sum::<usize>()
    })
    .await
    .unwrap();
    assert_eq!(made, added.load(Ordering::SeqCst));
    assert!(made > 0, "handlers were added while the informer ran");
}

// === metrics ===

/// Writes down what an informer's metrics are told: per series, the last value (gauges),
/// the number of observations (the histogram), and every time the informer heard from the
/// server, as an offset from `epoch`.
#[derive(Debug, Default)]
struct Recorded {
    queued: Mutex<Vec<f64>>,
    latencies: AtomicUsize,
    resource_version: Mutex<Vec<f64>>,
    heard: Mutex<Vec<Duration>>,
    names: Mutex<Vec<String>>,
}

#[derive(Debug)]
struct Recorder(Arc<Recorded>, tokio::time::Instant);

struct Series(Arc<Recorded>, &'static str, tokio::time::Instant);

impl metrics::GaugeMetric for Series {
    fn set(&self, value: f64) {
        match self.1 {
            "queued" => self.0.queued.lock().push(value),
            _ => self.0.resource_version.lock().push(value),
        }
    }
}

impl metrics::HistogramMetric for Series {
    fn observe(&self, value: f64) {
        assert!(value >= 0.0);
        self.0.latencies.fetch_add(1, Ordering::SeqCst);
    }
}

impl metrics::StalenessMetric for Series {
    fn heard(&self, at: std::time::Instant) {
        // Paused tokio time and the clock the informer reads agree on differences only.
        let _ = at;
        self.0
            .heard
            .lock()
            .push(tokio::time::Instant::now() - self.2);
    }
}

impl metrics::MetricsProvider for Recorder {
    fn new_queued_items_metric(&self, name: &str) -> Box<dyn metrics::GaugeMetric> {
        self.0.names.lock().push(name.to_owned());
        Box::new(Series(self.0.clone(), "queued", self.1))
    }
    fn new_processing_latency_metric(&self, _: &str) -> Box<dyn metrics::HistogramMetric> {
        Box::new(Series(self.0.clone(), "latency", self.1))
    }
    fn new_store_resource_version_metric(&self, _: &str) -> Box<dyn metrics::GaugeMetric> {
        Box::new(Series(self.0.clone(), "rv", self.1))
    }
    fn new_staleness_metric(&self, _: &str) -> Box<dyn metrics::StalenessMetric> {
        Box::new(Series(self.0.clone(), "staleness", self.1))
    }
}

on_both_queues!(
    #[tokio::test(start_paused = true)]
    metrics_follow_the_queue_the_store_and_what_the_server_said
);
async fn metrics_follow_the_queue_the_store_and_what_the_server_said(fifo: FifoKind) {
    let fake = Fake::default();
    fake.list(&[("a", "1"), ("b", "2")], "3");
    let watch = fake.watch();
    let recorded = Arc::new(Recorded::default());
    let epoch = tokio::time::Instant::now();
    let mut options = options(Duration::ZERO, fifo);
    options.metrics = Some(Arc::new(Recorder(recorded.clone(), epoch)));
    options.pop_delay = SECOND;
    let informer = Arc::new(SharedIndexInformer::new(fake.clone(), options));
    assert_eq!(*recorded.names.lock(), ["test"], "asked once, by name");
    let running = run(&informer);
    bounded("the first list", informer.wait_synced()).await;
    pass(10 * SECOND).await;
    let events = epoch.elapsed();
    watch.send(WatchEvent::Modified(cm("a", "4")));
    watch.send(WatchEvent::Added(cm("c", "5")));
    pass(10 * SECOND).await;
    let bookmark = epoch.elapsed();
    watch.send(WatchEvent::Bookmark {
        resource_version: "9".into(),
        initial_events_end: false,
    });
    settle().await;
    running.stop().await;

    // Heard: at the start, the list (at once), the two events and the bookmark as they came.
    let zero = Duration::ZERO;
    assert_eq!(
        *recorded.heard.lock(),
        [zero, zero, events, events, bookmark]
    );
    // The queue grew with each event and emptied with each pop.
    let queued = recorded.queued.lock().clone();
    assert_eq!(
        queued.first(),
        Some(&match fifo {
            FifoKind::InOrder => 1.0, // the relist is one item
            FifoKind::Delta => 2.0,   // a key per object
        })
    );
    assert_eq!(queued.last(), Some(&0.0));
    assert!(
        queued.contains(&2.0),
        "both events queued before the first pop: {queued:?}"
    );
    // One observation per pop: the list's (one item, or two keys), then one per event.
    let pops = match fifo {
        FifoKind::InOrder => 1 + 2,
        FifoKind::Delta => 2 + 2,
    };
    assert_eq!(recorded.latencies.load(Ordering::SeqCst), pops);
    assert_eq!(recorded.resource_version.lock().last(), Some(&9.0));
    assert_eq!(informer.store_resource_version(), 9);
}

#[tokio::test(start_paused = true)]
async fn a_shutdown_is_seen_while_a_backlog_remains() {
    // The DeltaFIFO turns a list of 2,000 objects into 2,000 pops, none of which awaits.
    let fake = Fake::default();
    let names: Vec<String> = (0..2_000).map(|i| format!("cm{i}")).collect();
    let objects: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "1")).collect();
    fake.list(&objects, "1");
    let _watch = fake.watch();
    let informer = informer(&fake, Duration::ZERO, FifoKind::Delta);
    // The first pop asks the informer to stop.
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let stop = Mutex::new(Some(stop));
    let pops = Arc::new(AtomicUsize::new(0));
    let counted = pops.clone();
    informer.on_pop(move |_| {
        counted.fetch_add(1, Ordering::SeqCst);
        if let Some(stop) = stop.lock().take() {
            let _ = stop.send(());
        }
    });
    bounded(
        "run to return",
        informer.run(async {
            let _ = stopped.await;
        }),
    )
    .await;
    assert!(informer.is_stopped());
    // One task, so the pops could only starve `run` if `run` drove them itself: it sees the
    // signal once the processing task spends its cooperative budget.
    let pops = pops.load(Ordering::SeqCst);
    assert!(
        pops < 2_000,
        "the whole backlog was applied before stopping"
    );
    assert!(pops > 0);
}
