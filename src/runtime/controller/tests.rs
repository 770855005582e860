//! The workers' outcomes on paused time: what each return does to the queue, panics, one key
//! at a time, and stopping.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use k8s_openapi::api::core::v1::ConfigMap;
use parking_lot::Mutex;
use tokio::sync::Semaphore;

use super::*;
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
}

enum Answer {
    Ok(Action),
    Err,
    Terminal,
    Panic,
}

impl Script {
    fn answer(&self, key: &str, answers: Vec<Answer>) {
        self.answers.lock().insert(key.to_owned(), answers);
    }

    fn count(&self, key: &str) -> usize {
        self.times(key).len()
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
    let answer = {
        let mut answers = script.answers.lock();
        let list = answers.entry(key).or_default();
        (!list.is_empty()).then(|| list.remove(0))
    };
    match answer {
        None => Ok(Action::done()),
        Some(Answer::Ok(action)) => Ok(action),
        Some(Answer::Err) => Err(ReconcileError::msg("boom")),
        Some(Answer::Terminal) => Err(ReconcileError::terminal("cannot")),
        Some(Answer::Panic) => panic!("reconcile panicked on purpose"),
    }
}

/// Workers over objects that are their own keys (every key exists), on a fresh registry.
fn workers(script: &Arc<Script>, max_concurrent: usize) -> (Workers<String, Script>, Metrics) {
    let metrics = Metrics::new();
    let reconcile: Reconcile<String, Script> =
        Arc::new(|obj, ctx| Box::pin(reconcile(obj, ctx)) as BoxFuture<_>);
    let workers = Workers {
        name: "test".to_owned(),
        queue: RateLimitingQueue::new(default_controller_rate_limiter()),
        lookup: Arc::new(|key: &str| {
            let found = Ok(Some(Arc::new(key.to_owned())));
            Box::pin(std::future::ready(found)) as BoxFuture<_>
        }),
        reconcile,
        context: script.clone(),
        metrics: metrics.controller("test", max_concurrent),
        max_concurrent,
    };
    (workers, metrics)
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
        target: Target {
            queue: queue.clone(),
            filters: Arc::new([]),
            priorities,
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
        handler.on_add(&config_map(&format!("listed-{i}"), "1"), true);
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

#[tokio::test(start_paused = true)]
async fn without_the_priority_queue_events_keep_their_order() {
    let (queue, handler) = handler(false);
    handler.on_add(&config_map("listed", "1"), true);
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
    for (answer, expected) in cases {
        script.answer("ns/a", vec![answer]);
        workers.process(&key, LOW_PRIORITY).await;
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(
            workers.queue.get_with_priority().await,
            Some((key.clone(), expected))
        );
        workers.queue.done(&key);
    }
}
