//! The workers' outcomes on paused time: what each return does to the queue, panics,
//! timeouts, one key at a time, stopping, deleted objects' `on_delete`, and the handler that
//! keeps their last states.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};

use k8s_openapi::api::core::v1::ConfigMap;
use parking_lot::Mutex;
use tokio::sync::Semaphore;

use super::*;
use crate::runtime::ManagerOptions;
use crate::runtime::metrics::Metrics;

/// What a test reconcile sees and does.
#[derive(Default)]
struct Script {
    /// Keys in the order their reconciles started, with when.
    started: Mutex<Vec<(String, tokio::time::Instant)>>,
    /// Bumped when a reconcile starts or ends.
    progress: watch::Sender<usize>,
    /// How many reconciles are running now, and the most ever at once.
    running: AtomicUsize,
    peak: AtomicUsize,
    /// Per key: how many reconciles of it run now (must never exceed 1).
    per_key: Mutex<HashMap<String, usize>>,
    /// What to return, per key, in turn; `done` when the list runs out.
    answers: Mutex<HashMap<String, Vec<Answer>>>,
    /// When set, each reconcile takes a permit from it before returning.
    gate: Option<Arc<Semaphore>>,
    /// How many reconciles were dropped before they returned.
    dropped: AtomicUsize,
}

enum Answer {
    Ok(Action),
    Err,
    Terminal,
    Panic,
    /// Never return: wait until dropped.
    Hang,
}

/// Counts a drop.
struct OnDrop<'a>(&'a AtomicUsize);

impl Drop for OnDrop<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl Script {
    fn answer(&self, key: &str, answers: Vec<Answer>) {
        self.answers.lock().insert(key.to_owned(), answers);
    }

    fn count(&self, key: &str) -> usize {
        self.times(key).len()
    }

    /// The keys in the order their reconciles started.
    fn order(&self) -> Vec<String> {
        self.started.lock().iter().map(|(k, _)| k.clone()).collect()
    }

    fn times(&self, key: &str) -> Vec<tokio::time::Instant> {
        let started = self.started.lock();
        started
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, t)| *t)
            .collect()
    }
}

async fn reconcile(obj: Arc<String>, script: Arc<Script>) -> Result<Action, ReconcileError> {
    let key = obj.to_string();
    script
        .started
        .lock()
        .push((key.clone(), tokio::time::Instant::now()));
    script.progress.send_modify(|n| *n += 1);
    let answer = {
        let mut answers = script.answers.lock();
        let list = answers.entry(key.clone()).or_default();
        (!list.is_empty()).then(|| list.remove(0))
    };
    if let Some(Answer::Hang) = answer {
        let _dropped = OnDrop(&script.dropped);
        std::future::pending::<()>().await;
    }
    let now = script.running.fetch_add(1, Ordering::SeqCst) + 1;
    script.peak.fetch_max(now, Ordering::SeqCst);
    {
        let mut per_key = script.per_key.lock();
        let n = per_key.entry(key.clone()).or_default();
        *n += 1;
        assert_eq!(*n, 1, "{key} is reconciled twice at once");
    }
    if let Some(gate) = &script.gate {
        gate.acquire().await.unwrap().forget();
    }
    *script.per_key.lock().get_mut(&key).unwrap() -= 1;
    script.running.fetch_sub(1, Ordering::SeqCst);
    script.progress.send_modify(|n| *n += 1);
    match answer {
        None | Some(Answer::Hang) => Ok(Action::done()),
        Some(Answer::Ok(action)) => Ok(action),
        Some(Answer::Err) => Err(ReconcileError::msg("boom")),
        Some(Answer::Terminal) => Err(ReconcileError::terminal("cannot")),
        Some(Answer::Panic) => panic!("reconcile panicked on purpose"),
    }
}

/// Workers over objects that are their own keys (every key exists), on a fresh registry.
fn workers(script: &Arc<Script>, max_concurrent: usize) -> (Workers<String, Script>, Metrics) {
    let reconcile: Reconcile<String, Script> =
        Arc::new(|obj, ctx| Box::pin(reconcile(obj, ctx)) as BoxFuture<_>);
    workers_of(script.clone(), reconcile, max_concurrent)
}

/// Workers reconciling with `reconcile` and `context`, every key existing.
fn workers_of<C>(
    context: Arc<C>,
    reconcile: Reconcile<String, C>,
    max_concurrent: usize,
) -> (Workers<String, C>, Metrics) {
    let metrics = Metrics::new();
    let workers = Workers {
        name: "test".to_owned(),
        queue: RateLimitingQueue::new(default_controller_rate_limiter()),
        lookup: Arc::new(|key: &str| {
            let found = Ok(Some(Arc::new(key.to_owned())));
            Box::pin(std::future::ready(found)) as BoxFuture<_>
        }),
        reconcile,
        context,
        metrics: metrics.controller("test", max_concurrent),
        max_concurrent,
        timeout: None,
        on_delete: None,
        trace: None,
        sharding: None,
    };
    (workers, metrics)
}

/// Script workers with `on_delete` (the script's reconcile, on the state's own name), whose
/// objects exist only when in `existing`, and the deleted states waiting for `on_delete`.
fn deleting_workers(
    script: &Arc<Script>,
    existing: &[&str],
    graves: &[(&str, &[&str])],
) -> (Workers<String, Script>, Graves<String>, Metrics) {
    let (mut workers, metrics) = workers(script, 1);
    let existing: HashSet<String> = existing.iter().map(|k| k.to_string()).collect();
    workers.lookup = Arc::new(move |key: &str| {
        let found = existing.contains(key).then(|| Arc::new(key.to_owned()));
        Box::pin(std::future::ready(Ok(found)))
    });
    let kept: Graves<String> = Graves::default();
    for (key, states) in graves {
        let states = states
            .iter()
            .map(|s| Grave {
                last: Arc::new(s.to_string()),
                hash: None,
            })
            .collect();
        kept.lock().insert((*key).into(), states);
    }
    let script = script.clone();
    let on_delete: OnDelete<String> = Arc::new(move |last| {
        let script = script.clone();
        Box::pin(async move { reconcile(last, script).await.map(|_| ()) })
    });
    workers.on_delete = Some((on_delete, kept.clone()));
    (workers, kept, metrics)
}

fn metric(metrics: &Metrics, series: &str) -> f64 {
    let text = metrics.encode();
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
}

/// Runs the workers until `until` holds (checked whenever a reconcile starts or ends), then
/// stops them.
async fn run_until(
    workers: Workers<String, Script>,
    script: &Script,
    mut until: impl FnMut() -> bool,
) {
    let mut progress = script.progress.subscribe();
    let (stop, stopping) = watch::channel(false);
    let run = tokio::spawn(workers.run(stopping));
    while !until() {
        progress.changed().await.unwrap();
    }
    stop.send(true).unwrap();
    run.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_error_is_retried_with_growing_backoff_and_success_forgets_it() {
    let script = Arc::new(Script::default());
    script.answer("ns/a", vec![Answer::Err, Answer::Err, Answer::Err]);
    let (workers, metrics) = workers(&script, 1);
    let queue = workers.queue.clone();
    queue.add("ns/a".into());
    run_until(workers, &script, || script.count("ns/a") == 4).await;
    // 5 ms, 10 ms, 20 ms between the attempts: the per-key backoff doubles.
    let seen = script.times("ns/a");
    let gaps: Vec<_> = seen.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps[0] < gaps[1] && gaps[1] < gaps[2], "gaps {gaps:?}");
    assert_eq!(
        queue.num_requeues(&"ns/a".into()),
        0,
        "success forgets the backoff"
    );
    assert_eq!(
        metric(
            &metrics,
            r#"controller_runtime_reconcile_errors_total{controller="test"}"#
        ),
        3.0
    );
    assert_eq!(
        metric(
            &metrics,
            r#"controller_runtime_reconcile_total{controller="test",result="success"}"#
        ),
        1.0
    );
}

#[tokio::test(start_paused = true)]
async fn a_terminal_error_is_counted_and_not_retried() {
    let script = Arc::new(Script::default());
    script.answer("ns/a", vec![Answer::Terminal]);
    let (workers, metrics) = workers(&script, 1);
    let queue = workers.queue.clone();
    queue.add("ns/a".into());
    queue.add_after("ns/marker".into(), Duration::from_secs(3600));
    // The marker runs an hour later; the terminal key must not have run again by then.
    run_until(workers, &script, || script.count("ns/marker") == 1).await;
    assert_eq!(script.count("ns/a"), 1);
    assert_eq!(
        metric(
            &metrics,
            r#"controller_runtime_terminal_reconcile_errors_total{controller="test"}"#
        ),
        1.0
    );
}

#[tokio::test(start_paused = true)]
async fn a_panic_is_caught_counted_and_retried_while_other_keys_flow() {
    let script = Arc::new(Script::default());
    script.answer("ns/bad", vec![Answer::Panic, Answer::Panic]);
    let (workers, metrics) = workers(&script, 1);
    let queue = workers.queue.clone();
    queue.add("ns/bad".into());
    for i in 0..5 {
        queue.add(format!("ns/good-{i}").into());
    }
    run_until(workers, &script, || script.count("ns/bad") == 3).await;
    for i in 0..5 {
        assert_eq!(script.count(&format!("ns/good-{i}")), 1);
    }
    assert_eq!(
        metric(
            &metrics,
            r#"controller_runtime_reconcile_panics_total{controller="test"}"#
        ),
        2.0
    );
}

#[tokio::test(start_paused = true)]
async fn requeue_after_runs_again_after_the_delay() {
    let script = Arc::new(Script::default());
    script.answer(
        "ns/a",
        vec![Answer::Ok(Action::requeue_after(Duration::from_secs(60)))],
    );
    let (workers, _) = workers(&script, 1);
    workers.queue.add("ns/a".into());
    run_until(workers, &script, || script.count("ns/a") == 2).await;
    let times = script.times("ns/a");
    assert!(times[1] - times[0] >= Duration::from_secs(60));
}

#[tokio::test(start_paused = true)]
async fn an_event_before_the_requeue_reconciles_at_once_and_cancels_the_requeue() {
    let script = Arc::new(Script::default());
    // First: come back in a minute. Then (the event's reconcile): done.
    script.answer(
        "ns/a",
        vec![Answer::Ok(Action::requeue_after(Duration::from_secs(60)))],
    );
    let (workers, _) = workers(&script, 1);
    let queue = workers.queue.clone();
    queue.add("ns/a".into());
    queue.add_after("ns/marker".into(), Duration::from_secs(600));
    let mut event_sent = false;
    run_until(workers, &script, || {
        if script.count("ns/a") == 1 && !event_sent {
            // An event for the object ten seconds later.
            event_sent = true;
            let queue = queue.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(10)).await;
                queue.add("ns/a".into());
            });
        }
        script.count("ns/marker") == 1
    })
    .await;
    // Once for the add, once for the event; the minute's requeue was cancelled by the event,
    // and the event's reconcile did not ask for another.
    assert_eq!(script.count("ns/a"), 2);
}

#[tokio::test(start_paused = true)]
async fn one_key_never_runs_twice_at_once_while_distinct_keys_run_in_parallel() {
    let gate = Arc::new(Semaphore::new(0));
    let script = Arc::new(Script {
        gate: Some(gate.clone()),
        ..Script::default()
    });
    let (workers, metrics) = workers(&script, 4);
    let queue = workers.queue.clone();
    for name in ["a", "b", "c", "d"] {
        queue.add(format!("ns/{name}").into());
    }
    let mut released = false;
    run_until(workers, &script, || {
        if script.running.load(Ordering::SeqCst) == 4 && !released {
            // All four at once; now an event for "a" while it runs, then let them all go.
            queue.add("ns/a".into());
            released = true;
            gate.add_permits(5);
        }
        script.count("ns/a") == 2 && script.running.load(Ordering::SeqCst) == 0
    })
    .await;
    assert_eq!(script.peak.load(Ordering::SeqCst), 4);
    assert_eq!(
        metric(
            &metrics,
            r#"controller_runtime_max_concurrent_reconciles{controller="test"}"#
        ),
        4.0
    );
}

#[tokio::test(start_paused = true)]
async fn stopping_lets_the_reconcile_in_flight_finish_and_starts_no_other() {
    let gate = Arc::new(Semaphore::new(0));
    let script = Arc::new(Script {
        gate: Some(gate.clone()),
        ..Script::default()
    });
    let (workers, _) = workers(&script, 1);
    let queue = workers.queue.clone();
    queue.add("ns/a".into());
    queue.add("ns/b".into());
    let (stop, stopping) = watch::channel(false);
    let mut progress = script.progress.subscribe();
    let run = tokio::spawn(workers.run(stopping));
    while script.running.load(Ordering::SeqCst) == 0 {
        progress.changed().await.unwrap();
    }
    stop.send(true).unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(!run.is_finished(), "the reconcile in flight holds the stop");
    gate.add_permits(1);
    run.await.unwrap();
    assert_eq!(script.count("ns/a"), 1, "the one in flight finished");
    assert_eq!(script.count("ns/b"), 0, "no new one started");
}

#[test]
fn reconcile_ids_look_like_uuids_and_differ() {
    let (a, b) = (reconcile_id(), reconcile_id());
    assert_ne!(a, b);
    assert_eq!(a.len(), 36);
    assert_eq!(a.as_bytes()[14], b'4');
}

#[test]
fn object_refs_make_queue_keys() {
    assert_eq!(&*ObjectRef::new("web").within("prod").key(), "prod/web");
    assert_eq!(&*ObjectRef::new("node-1").key(), "node-1");
    assert_eq!(Action::requeue_after(Duration::ZERO), Action::done());
}

#[tokio::test(start_paused = true)]
async fn a_reconcile_past_its_timeout_is_dropped_counted_and_retried_with_backoff() {
    let script = Arc::new(Script::default());
    script.answer("ns/a", vec![Answer::Hang]);
    let (mut workers, metrics) = workers(&script, 1);
    workers.timeout = Some(Duration::from_secs(10));
    workers.queue.add("ns/a".into());
    run_until(workers, &script, || script.count("ns/a") == 2).await;
    let times = script.times("ns/a");
    assert!(times[1] - times[0] >= Duration::from_secs(10));
    assert_eq!(
        script.dropped.load(Ordering::SeqCst),
        1,
        "the hung reconcile was dropped"
    );
    let one = |name: &str| metric(&metrics, &format!(r#"{name}{{controller="test"}}"#));
    assert_eq!(one("controller_runtime_reconcile_timeouts_total"), 1.0);
    assert_eq!(one("controller_runtime_reconcile_errors_total"), 1.0);
    assert_eq!(one("controller_runtime_active_workers"), 0.0);
    assert_eq!(
        metric(
            &metrics,
            r#"controller_runtime_reconcile_total{controller="test",result="error"}"#
        ),
        1.0
    );
}

/// What a reconcile that waits for the manager to stop saw.
#[derive(Default)]
struct Waiter {
    /// When it started, and the deadline it read.
    started: Mutex<Option<(tokio::time::Instant, Option<tokio::time::Instant>)>>,
    begun: watch::Sender<bool>,
    /// `is_stopping()` before and after `stopping()` completed.
    seen: Mutex<Option<(bool, bool)>>,
}

async fn wait_for_stop(_obj: Arc<String>, ctx: Arc<Waiter>) -> Result<Action, ReconcileError> {
    *ctx.started.lock() = Some((tokio::time::Instant::now(), deadline()));
    let before = is_stopping();
    ctx.begun.send_replace(true);
    stopping().await;
    *ctx.seen.lock() = Some((before, is_stopping()));
    Ok(Action::done())
}

#[tokio::test(start_paused = true)]
async fn stopping_completes_inside_a_reconcile_when_the_manager_stops_and_deadline_tells_its_end() {
    let ctx = Arc::new(Waiter::default());
    let reconcile: Reconcile<String, Waiter> =
        Arc::new(|obj, ctx| Box::pin(wait_for_stop(obj, ctx)) as BoxFuture<_>);
    let (mut workers, _) = workers_of(ctx.clone(), reconcile, 1);
    workers.timeout = Some(Duration::from_secs(600));
    workers.queue.add("ns/a".into());
    let (stop, stopping_rx) = watch::channel(false);
    let run = tokio::spawn(workers.run(stopping_rx));
    ctx.begun.subscribe().wait_for(|b| *b).await.unwrap();
    assert!(ctx.seen.lock().is_none(), "waits while the manager runs");
    stop.send(true).unwrap();
    run.await.unwrap();
    assert_eq!(*ctx.seen.lock(), Some((false, true)));
    let (started, deadline) = ctx.started.lock().unwrap();
    assert_eq!(deadline, Some(started + Duration::from_secs(600)));
}

#[tokio::test(start_paused = true)]
async fn outside_a_reconcile_stopping_never_completes_and_there_is_no_deadline() {
    assert!(!is_stopping());
    assert_eq!(deadline(), None);
    let waited = tokio::time::timeout(Duration::from_secs(3600), stopping()).await;
    assert!(waited.is_err());
}

#[tokio::test(start_paused = true)]
async fn a_deleted_object_gets_on_delete_with_its_last_state_and_its_errors_are_retried() {
    let script = Arc::new(Script::default());
    script.answer("ns/a#2", vec![Answer::Err]);
    let (workers, graves, metrics) = deleting_workers(&script, &[], &[("ns/a", &["ns/a#2"])]);
    workers.queue.add("ns/a".into());
    run_until(workers, &script, || script.count("ns/a#2") == 2).await;
    assert_eq!(
        script.order(),
        ["ns/a#2", "ns/a#2"],
        "the object itself is not reconciled"
    );
    assert!(
        graves.lock().is_empty(),
        "the state is dropped once on_delete succeeded"
    );
    let one = |name: &str| metric(&metrics, &format!(r#"{name}{{controller="test"}}"#));
    assert_eq!(one("controller_runtime_reconcile_errors_total"), 1.0);
}

#[tokio::test(start_paused = true)]
async fn pending_deletes_run_oldest_first_then_an_object_that_came_back_is_reconciled() {
    let script = Arc::new(Script::default());
    let graves: &[(&str, &[&str])] = &[("ns/a", &["ns/a#1", "ns/a#2"])];
    let (workers, kept, _) = deleting_workers(&script, &["ns/a"], graves);
    workers.queue.add("ns/a".into());
    run_until(workers, &script, || script.count("ns/a") == 1).await;
    assert_eq!(script.order(), ["ns/a#1", "ns/a#2", "ns/a"]);
    assert!(kept.lock().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_terminal_on_delete_error_drops_the_state_and_a_gone_object_without_one_is_skipped() {
    let script = Arc::new(Script::default());
    script.answer("ns/a#1", vec![Answer::Terminal]);
    let graves: &[(&str, &[&str])] = &[("ns/a", &["ns/a#1"])];
    let (workers, graves, metrics) = deleting_workers(&script, &["ns/marker"], graves);
    let queue = workers.queue.clone();
    queue.add("ns/a".into());
    queue.add("ns/gone".into());
    queue.add_after("ns/marker".into(), Duration::from_secs(3600));
    run_until(workers, &script, || script.count("ns/marker") == 1).await;
    // An hour later, ns/a#1 ran once, and ns/gone (no object, no deleted state) never.
    assert_eq!(script.order(), ["ns/a#1", "ns/marker"]);
    assert!(graves.lock().is_empty());
    let one = |name: &str| metric(&metrics, &format!(r#"{name}{{controller="test"}}"#));
    assert_eq!(
        one("controller_runtime_terminal_reconcile_errors_total"),
        1.0
    );
}

fn configmap_raw(name: &str, data: &str) -> Arc<Raw<ConfigMap>> {
    let json =
        format!(r#"{{"metadata":{{"name":"{name}","namespace":"ns"}},"data":{{"v":"{data}"}}}}"#);
    Arc::new(Raw::from_json(&json).unwrap())
}

#[tokio::test]
async fn the_delete_handler_keeps_last_states_tombstones_included_as_predicates_allow() {
    let queue: Queue = RateLimitingQueue::new(default_controller_rate_limiter());
    let graves: Graves<ConfigMap> = Graves::default();
    let not_b = Predicate::new(|e| !matches!(e, Event::Delete(o) if o.name() == "b"));
    let handler = RecordDeletes {
        queue: Slot::holding(queue.clone()),
        filters: Arc::from(Vec::new()),
        predicate: Some(not_b),
        graves: graves.clone(),
        keep: false,
        sharding: None,
    };
    handler.on_delete(&DeletedObject::Object(configmap_raw("a", "1")));
    handler.on_delete(&DeletedObject::Tombstone(
        informer::DeletedFinalStateUnknown {
            key: "ns/a".into(),
            obj: Some(configmap_raw("a", "2")),
        },
    ));
    handler.on_delete(&DeletedObject::Tombstone(
        informer::DeletedFinalStateUnknown {
            key: "ns/c".into(),
            obj: None,
        },
    ));
    handler.on_delete(&DeletedObject::Object(configmap_raw("b", "1")));
    let graves = graves.lock();
    let kept: Vec<_> = graves["ns/a"]
        .iter()
        .map(|g| g.last.data.as_ref().unwrap()["v"].clone())
        .collect();
    assert_eq!(kept, ["1", "2"], "both last states, oldest first");
    assert_eq!(
        graves.len(),
        1,
        "no state for the unknown tombstone, nor the filtered delete"
    );
    assert_eq!(queue.len(), 1, "ns/a is queued, once");
}

// === priorities ===

/// The `for` kind's map: an object to its own key.
fn own_key(obj: &Raw<ConfigMap>, out: &mut dyn FnMut(Key)) {
    out(informer::key_of(obj));
}

type Handler = Enqueue<ConfigMap, fn(&Raw<ConfigMap>, &mut dyn FnMut(Key))>;

/// A handler for the `for` kind over a queue, as `complete` wires it.
fn handler(priorities: bool) -> (Queue, Handler) {
    let queue = RateLimitingQueue::new(default_controller_rate_limiter());
    let handler = Enqueue {
        kind: "ConfigMap",
        target: Target {
            queue: Slot::holding(queue.clone()),
            filters: Arc::new([]),
            priorities,
            trace: None,
            skip_unchanged: false,
            replays: Arc::default(),
        },
        predicate: None,
        both_on_update: false,
        map: own_key as fn(&Raw<ConfigMap>, &mut dyn FnMut(Key)),
        _kind: std::marker::PhantomData,
    };
    (queue, handler)
}

fn config_map(name: &str, version: &str) -> Arc<Raw<ConfigMap>> {
    Arc::new(
        Raw::from_json(&format!(
            r#"{{"metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"{version}"}}}}"#
        ))
        .unwrap(),
    )
}

/// Takes every queued key with its priority, in order.
async fn drain(queue: &Queue) -> Vec<(String, i32)> {
    let mut out = Vec::new();
    while !queue.is_empty() {
        let (key, priority) = queue.get_with_priority().await.unwrap();
        queue.done(&key);
        out.push((key.to_string(), priority));
    }
    out
}

#[tokio::test(start_paused = true)]
async fn a_live_change_goes_before_an_initial_list_of_many_objects() {
    let (queue, handler) = handler(true);
    for i in 0..10_000 {
        handler.add(&config_map(&format!("listed-{i}"), "1"), true);
    }
    handler.on_add(&config_map("created", "2"), false);
    let edited = (config_map("listed-7", "1"), config_map("listed-7", "3"));
    handler.on_update(&edited.0, &edited.1);
    let order = drain(&queue).await;
    assert_eq!(order.len(), 10_000 + 1);
    assert_eq!(
        order[..3],
        [
            ("ns/created".to_owned(), 0),
            ("ns/listed-7".to_owned(), 0),
            ("ns/listed-0".to_owned(), LOW_PRIORITY),
        ]
    );
    assert!(order[2..].iter().all(|(_, p)| *p == LOW_PRIORITY));
}

#[tokio::test(start_paused = true)]
async fn a_resync_of_an_unchanged_object_enters_at_low_priority() {
    let (queue, handler) = handler(true);
    let same = config_map("resynced", "5");
    handler.on_update(&same, &same);
    handler.on_update(&config_map("changed", "5"), &config_map("changed", "6"));
    handler.on_delete(&DeletedObject::Object(config_map("deleted", "5")));
    assert_eq!(
        drain(&queue).await,
        [
            ("ns/changed".to_owned(), 0),
            ("ns/deleted".to_owned(), 0),
            ("ns/resynced".to_owned(), LOW_PRIORITY),
        ]
    );
}

/// The replay queued the listed object and a worker took it; the informer's own initial
/// add, delivered only now, must not queue it a second time.
#[tokio::test(start_paused = true)]
async fn an_initial_add_trailing_the_replay_queues_nothing() {
    let (queue, handler) = handler(true);
    let listed = config_map("listed", "1");
    handler.add(&listed, true);
    let taken = queue.get().await.unwrap();
    handler.on_add(&listed, true);
    queue.done(&taken);
    assert!(queue.is_empty(), "not queued again");
    handler.on_add(&config_map("created", "2"), false);
    assert_eq!(drain(&queue).await, [("ns/created".to_owned(), 0)]);
}

#[tokio::test(start_paused = true)]
async fn without_the_priority_queue_events_keep_their_order() {
    let (queue, handler) = handler(false);
    handler.add(&config_map("listed", "1"), true);
    handler.on_add(&config_map("created", "2"), false);
    assert_eq!(
        drain(&queue).await,
        [("ns/listed".to_owned(), 0), ("ns/created".to_owned(), 0)]
    );
}

#[tokio::test(start_paused = true)]
async fn a_requeue_keeps_the_priority_unless_the_action_sets_one() {
    let script = Arc::new(Script::default());
    let (workers, _) = workers(&script, 1);
    let key: Key = "ns/a".into();
    let cases = [
        (
            Answer::Ok(Action::requeue_after(Duration::from_secs(1))),
            LOW_PRIORITY,
        ),
        (
            Answer::Ok(Action::requeue_after(Duration::from_secs(1)).priority(7)),
            7,
        ),
        (Answer::Ok(Action::requeue().priority(-3)), -3),
        (Answer::Err, LOW_PRIORITY),
        (Answer::Panic, LOW_PRIORITY),
    ];
    let (_running, running) = watch::channel(false);
    for (answer, expected) in cases {
        script.answer("ns/a", vec![answer]);
        workers.process(&key, LOW_PRIORITY, &running).await;
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(
            workers.queue.get_with_priority().await,
            Some((key.clone(), expected))
        );
        workers.queue.done(&key);
    }
}

#[tokio::test(start_paused = true)]
async fn the_debug_pages_follow_a_key_through_failures_backoff_and_success() {
    let script = Arc::new(Script::default());
    script.answer("ns/a", vec![Answer::Err, Answer::Err]);
    let pages = crate::runtime::debug::DebugPages::default();
    let (mut workers, _) = workers(&script, 1);
    workers.trace = Some(pages.controller("test"));
    let queue = workers.queue.clone();
    queue.add("ns/a".into());
    run_until(workers, &script, || script.count("ns/a") == 3).await;
    let snapshot = pages.snapshot(Some("ns/a"));
    let controller = &snapshot.controllers[0];
    let results: Vec<_> = controller
        .recent
        .iter()
        .map(|r| r.result.as_str())
        .collect();
    assert_eq!(results, ["success", "error", "error"], "newest first");
    assert_eq!(controller.recent[1].error.as_deref(), Some("boom"));
    assert!(controller.waiting.is_empty(), "success clears the wait");
    assert!(controller.in_flight.is_empty());
    assert_eq!(controller.reconciles_total, 3);
    let story = snapshot.story.expect("asked for a key");
    let kinds: Vec<_> = story.events.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [
            "started",
            "retry",
            "failed",
            "started",
            "retry",
            "failed",
            "started",
            "reconciled"
        ]
    );
    assert!(
        story.events[1].what.contains("failed (1 so far): boom"),
        "{story:?}"
    );
    assert!(
        story.events[4].what.contains("failed (2 so far): boom"),
        "{story:?}"
    );
}

/// The `controller_runtime_max_concurrent_reconciles` gauge of `controller`, as `manager`
/// serves it: the number of workers the controller was built with.
fn workers_of_controller(manager: &Manager, controller: &str) -> Option<f64> {
    let series =
        format!(r#"controller_runtime_max_concurrent_reconciles{{controller="{controller}"}} "#);
    let text = manager.metrics().encode();
    let line = text.lines().find(|l| l.starts_with(&series))?;
    line[series.len()..].trim().parse().ok()
}

#[tokio::test]
async fn a_controller_takes_the_managers_worker_count_unless_it_sets_its_own() {
    async fn reconcile(_: Arc<ConfigMap>, _: Arc<()>) -> Result<Action, ReconcileError> {
        Ok(Action::done())
    }
    let shipped = Manager::offline(ManagerOptions::default());
    Controller::<ConfigMap>::new(&shipped)
        .complete(reconcile, Arc::new(()))
        .unwrap();
    let default = crate::runtime::DEFAULT_MAX_CONCURRENT_RECONCILES as f64;
    assert_eq!(workers_of_controller(&shipped, "configmap"), Some(default));

    let options = ManagerOptions {
        max_concurrent_reconciles: 3,
        ..ManagerOptions::default()
    };
    let manager = Manager::offline(options);
    Controller::<ConfigMap>::new(&manager)
        .complete(reconcile, Arc::new(()))
        .unwrap();
    Controller::<ConfigMap>::new(&manager)
        .named("own")
        .max_concurrent_reconciles(5)
        .complete(reconcile, Arc::new(()))
        .unwrap();
    Controller::<ConfigMap>::new(&manager)
        .named("none")
        .max_concurrent_reconciles(0)
        .complete(reconcile, Arc::new(()))
        .unwrap();
    assert_eq!(workers_of_controller(&manager, "configmap"), Some(3.0));
    assert_eq!(workers_of_controller(&manager, "own"), Some(5.0));
    assert_eq!(workers_of_controller(&manager, "none"), Some(1.0));
}

// === sharding ===

use crate::runtime::shard::{Ranges, Shard, fnv1a64};

/// The lower half of the hash space: what the sharded workers below hold.
const LOW: &str = "0x0-0x8000000000000000";
const LOW_HASH: u64 = 1;
const HIGH_HASH: u64 = u64::MAX - 1;

/// The shard hash of a test key's object: `ns/low…` in the lower half, `ns/high…` in the
/// upper, anything else not cached.
fn test_hash(key: &str) -> Option<u64> {
    let name = key.strip_prefix("ns/")?;
    if name.starts_with("low") {
        Some(LOW_HASH)
    } else if name.starts_with("high") {
        Some(HIGH_HASH)
    } else {
        None
    }
}

/// A shard holding the lower half, its fence `fence` from now.
fn low_shard(fence: Duration) -> Shard {
    let low: Ranges = LOW.parse().unwrap();
    Shard::fixed("r0", low, tokio::time::Instant::now() + fence)
}

fn shard_workers(script: &Arc<Script>, shard: &Shard) -> (Workers<String, Script>, Metrics) {
    let (mut workers, metrics) = workers(script, 2);
    workers.sharding = Some(Arc::new(Sharding::from_fn(shard.clone(), test_hash)));
    (workers, metrics)
}

/// Waits (on paused time) until `done` holds, checking every 10 ms; panics after `limit`.
async fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let until = tokio::time::Instant::now() + limit;
    while !done() {
        assert!(
            tokio::time::Instant::now() < until,
            "{what}: not within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_sharded_worker_never_reconciles_a_key_outside_its_active_ranges() {
    let script = Arc::new(Script::default());
    let shard = low_shard(Duration::from_secs(7200));
    let (workers, _) = shard_workers(&script, &shard);
    let queue = workers.queue.clone();
    // A key a watch mapped to a primary of another replica's range, one whose primary is
    // not cached here, and one of this replica's.
    queue.add("ns/high-a".into());
    queue.add("ns/uncached".into());
    queue.add("ns/low-a".into());
    queue.add_after("ns/low-marker".into(), Duration::from_secs(3600));
    run_until(workers, &script, || script.count("ns/low-marker") == 1).await;
    assert_eq!(script.order(), ["ns/low-a", "ns/low-marker"]);
    assert_eq!(queue.num_requeues(&Key::from("ns/high-a")), 0, "forgotten");
}

#[test]
fn a_watched_objects_keys_outside_the_active_ranges_are_not_queued() {
    // The ConfigMap names, in its data, the primaries it concerns.
    let map = |cm: &ConfigMap| {
        let data = cm.data.clone().unwrap_or_default();
        data.values()
            .map(|name| ObjectRef::new(name).within("ns"))
            .collect::<Vec<_>>()
    };
    let json = r#"{"metadata":{"name":"w","namespace":"ns"},"data":{"a":"low-1","b":"high-1","c":"uncached","d":"low-2"}}"#;
    let watched: Raw<ConfigMap> = Raw::from_json(json).unwrap();
    let keys = |sharding| {
        let mut keys = Vec::new();
        watch_map(false, sharding, map)(&watched, &mut |k| keys.push(k.to_string()));
        keys
    };
    let shard = low_shard(Duration::from_secs(7200));
    let sharded = keys(Some(Sharding::from_fn(shard, test_hash)));
    assert_eq!(sharded, ["ns/low-1", "ns/low-2"]);
    let all = keys(None);
    assert_eq!(all, ["ns/low-1", "ns/high-1", "ns/uncached", "ns/low-2"]);
}

#[tokio::test(start_paused = true)]
async fn a_sharded_reconcile_is_dropped_at_the_renew_deadline_before_its_range_can_move() {
    let script = Arc::new(Script::default());
    script.answer("ns/low-a", vec![Answer::Hang]);
    let fence = Duration::from_secs(10);
    let shard = low_shard(fence);
    let started = tokio::time::Instant::now();
    let (workers, metrics) = shard_workers(&script, &shard);
    workers.queue.add("ns/low-a".into());
    let (stop, stopping) = watch::channel(false);
    let run = tokio::spawn(workers.run(stopping));

    tokio::time::sleep(fence - Duration::from_millis(100)).await;
    assert_eq!(script.count("ns/low-a"), 1);
    assert_eq!(
        script.dropped.load(Ordering::SeqCst),
        0,
        "runs while the fence holds"
    );
    assert_eq!(shard.in_flight(), 1, "its permit holds the range");

    // Another member may start on the key lease_duration - renew_deadline (5 s) after the
    // fence, at the earliest.
    wait_for("the reconcile dropped", Duration::from_secs(5), || {
        script.dropped.load(Ordering::SeqCst) == 1 && shard.in_flight() == 0
    })
    .await;
    assert!(
        tokio::time::Instant::now() >= started + fence,
        "not before the fence"
    );
    assert!(
        shard.admit(LOW_HASH).is_none(),
        "nothing admitted past the fence"
    );
    let one = |name: &str| metric(&metrics, &format!(r#"{name}{{controller="test"}}"#));
    assert_eq!(one("controller_runtime_reconcile_errors_total"), 1.0);

    // Retried with backoff, it is refused by the gate: it never runs again here.
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(script.count("ns/low-a"), 1);
    stop.send(true).unwrap();
    run.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_long_sharded_reconcile_runs_to_its_end_while_renewals_move_the_fence() {
    let gate = Arc::new(Semaphore::new(0));
    let script = Arc::new(Script {
        gate: Some(gate.clone()),
        ..Script::default()
    });
    let renew = Duration::from_secs(10);
    let shard = low_shard(renew);
    let (workers, metrics) = shard_workers(&script, &shard);
    workers.queue.add("ns/low-a".into());
    let renewer = {
        let shard = shard.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(2)).await;
                shard.set_fence(tokio::time::Instant::now() + renew);
            }
        })
    };
    let releaser = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(30)).await;
        gate.add_permits(1);
    });
    run_until(workers, &script, || {
        script.count("ns/low-a") == 1 && script.running.load(Ordering::SeqCst) == 0
    })
    .await;
    renewer.abort();
    releaser.await.unwrap();
    assert_eq!(script.dropped.load(Ordering::SeqCst), 0);
    let one = |name: &str| metric(&metrics, &format!(r#"{name}{{controller="test"}}"#));
    assert_eq!(one("controller_runtime_reconcile_errors_total"), 0.0);
    assert_eq!(shard.in_flight(), 0);
}

/// Sharded workers with `on_delete`, whose objects exist only when in `existing`, and
/// deleted states (with their shard hashes) waiting for it.
fn sharded_deleting_workers(
    script: &Arc<Script>,
    shard: &Shard,
    existing: &[&str],
    graves: &[(&str, &[(&str, u64)])],
) -> (Workers<String, Script>, Graves<String>) {
    let (mut workers, kept, _) = deleting_workers(script, existing, &[]);
    workers.sharding = Some(Arc::new(Sharding::from_fn(shard.clone(), test_hash)));
    for (key, states) in graves {
        let states = states
            .iter()
            .map(|(s, hash)| Grave {
                last: Arc::new(s.to_string()),
                hash: Some(*hash),
            })
            .collect();
        kept.lock().insert((*key).into(), states);
    }
    (workers, kept)
}

#[tokio::test(start_paused = true)]
async fn a_sharded_on_delete_runs_only_for_a_state_of_a_held_range() {
    let script = Arc::new(Script::default());
    let shard = low_shard(Duration::from_secs(7200));
    // ns/low-a was deleted twice: once as an object of another replica's range (a uid
    // placed high), once of this one's; it exists again, in this replica's range.
    let graves: &[(&str, &[(&str, u64)])] = &[(
        "ns/low-a",
        &[("ns/low-a#high", HIGH_HASH), ("ns/low-a#low", LOW_HASH)],
    )];
    let (workers, kept) = sharded_deleting_workers(&script, &shard, &["ns/low-a"], graves);
    workers.queue.add("ns/low-a".into());
    run_until(workers, &script, || script.count("ns/low-a") == 1).await;
    assert_eq!(script.order(), ["ns/low-a#low", "ns/low-a"]);
    assert!(kept.lock().is_empty(), "the other range's state is dropped");
}

#[tokio::test(start_paused = true)]
async fn a_sharded_on_delete_holds_its_range_and_is_dropped_at_the_renew_deadline() {
    let script = Arc::new(Script::default());
    script.answer("ns/low-a#1", vec![Answer::Hang]);
    let fence = Duration::from_secs(10);
    let shard = low_shard(fence);
    let graves: &[(&str, &[(&str, u64)])] = &[("ns/low-a", &[("ns/low-a#1", LOW_HASH)])];
    let (workers, kept) = sharded_deleting_workers(&script, &shard, &[], graves);
    workers.queue.add("ns/low-a".into());
    let (stop, stopping) = watch::channel(false);
    let run = tokio::spawn(workers.run(stopping));
    tokio::time::sleep(fence - Duration::from_millis(100)).await;
    assert_eq!(script.count("ns/low-a#1"), 1);
    assert_eq!(
        shard.in_flight(),
        1,
        "an on_delete in flight holds its range"
    );
    wait_for("the on_delete dropped", Duration::from_secs(5), || {
        script.dropped.load(Ordering::SeqCst) == 1 && shard.in_flight() == 0
    })
    .await;
    // Its state is kept and retried with backoff, refused while the fence stands...
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(script.count("ns/low-a#1"), 1);
    assert_eq!(kept.lock().len(), 1, "the state is kept");
    // ...and run again once a renewal moves the fence with the range still held.
    shard.set_fence(tokio::time::Instant::now() + Duration::from_secs(3600));
    wait_for("the on_delete run again", Duration::from_secs(60), || {
        kept.lock().is_empty()
    })
    .await;
    assert_eq!(script.count("ns/low-a#1"), 2);
    stop.send(true).unwrap();
    run.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_key_refused_at_the_fence_is_retried_and_runs_once_a_renewal_moves_it() {
    let script = Arc::new(Script::default());
    // The renew deadline has just passed; the range is still active.
    let shard = low_shard(Duration::ZERO);
    let (workers, _) = shard_workers(&script, &shard);
    let queue = workers.queue.clone();
    queue.add("ns/low-a".into());
    let (stop, stopping) = watch::channel(false);
    let run = tokio::spawn(workers.run(stopping));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(script.count("ns/low-a"), 0, "nothing runs past the fence");
    assert!(queue.num_requeues(&Key::from("ns/low-a")) > 0, "retried");
    shard.set_fence(tokio::time::Instant::now() + Duration::from_secs(3600));
    wait_for("the key reconciled", Duration::from_secs(60), || {
        script.count("ns/low-a") == 1
    })
    .await;
    stop.send(true).unwrap();
    run.await.unwrap();
}

#[test]
fn a_sharded_delete_handler_keeps_only_deletes_of_its_active_ranges() {
    // Uids whose hashes fall in the lower and the upper half.
    let uid = |low: bool| {
        (0..)
            .map(|i| format!("uid-{i}"))
            .find(|u| (fnv1a64(u) < 1 << 63) == low)
            .unwrap()
    };
    let raw = |name: &str, uid: &str| {
        let json = format!(r#"{{"metadata":{{"name":"{name}","namespace":"ns","uid":"{uid}"}}}}"#);
        Arc::new(Raw::<ConfigMap>::from_json(&json).unwrap())
    };
    let queue: Queue = RateLimitingQueue::new(default_controller_rate_limiter());
    let graves: Graves<ConfigMap> = Graves::default();
    let shard = low_shard(Duration::from_secs(7200));
    let handler = RecordDeletes {
        queue: Slot::holding(queue.clone()),
        filters: Arc::from(Vec::new()),
        predicate: None,
        graves: graves.clone(),
        keep: false,
        sharding: Some(Arc::new(Sharding::from_fn(shard, |_| None))),
    };
    let (low, high) = (uid(true), uid(false));
    handler.on_delete(&DeletedObject::Object(raw("a", &low)));
    // What a relist drops from the cache once the upper half was given up: not deleted.
    handler.on_delete(&DeletedObject::Tombstone(
        informer::DeletedFinalStateUnknown {
            key: "ns/b".into(),
            obj: Some(raw("b", &high)),
        },
    ));
    let graves = graves.lock();
    assert_eq!(graves.len(), 1);
    assert_eq!(graves["ns/a"][0].hash, Some(fnv1a64(&low)));
    assert_eq!(queue.len(), 1, "only ns/a is queued");
}
