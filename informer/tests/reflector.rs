//! The reflector against a scripted lister-watcher on paused time: the exact sequence of
//! requests (resourceVersions, limits, continue tokens, watches) across list → watch →
//! 410 → relist, pagination and its fallback, WatchList and its fallback, backoff-only
//! retries, very short watches, bookmarks and resync.

mod support;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use informer::lister_watcher::{Error, ErrorKind, Result, WatchEvent};
use informer::{
    BackoffOptions, EventStream, ListOptions, ListPage, ListerWatcher, Reflector, ReflectorOptions,
    ReflectorStore, Trace, WatchOptions,
};
use k8s_openapi::api::core::v1::ConfigMap;
use parking_lot::Mutex;
use support::cm;

// === the script ===

/// One scripted answer.
enum Reply {
    List(Result<ListPage<ConfigMap>>),
    /// A watch that yields these steps, then closes.
    Watch(Result<Vec<Step>>),
    /// This reply, after the request has hung this long.
    Delayed(Duration, Box<Reply>),
}

/// One step of a scripted watch stream.
#[allow(clippy::large_enum_variant)] // a short-lived test script; boxing would only add noise
enum Step {
    Event(WatchEvent<ConfigMap>),
    Fail(ErrorKind),
    /// Let this much time pass.
    Pause(Duration),
}

/// A request the reflector made.
#[derive(Clone, Debug, PartialEq)]
enum Call {
    List(ListOptions),
    Watch(WatchOptions),
}

#[derive(Clone, Default)]
struct Script {
    replies: Arc<Mutex<VecDeque<Reply>>>,
    calls: Arc<Mutex<Vec<Call>>>,
}

impl Script {
    fn new(replies: Vec<Reply>) -> Self {
        Script {
            replies: Arc::new(Mutex::new(replies.into())),
            calls: Arc::default(),
        }
    }

    fn calls(&self) -> Vec<Call> {
        self.calls.lock().clone()
    }

    fn done(&self) -> bool {
        self.replies.lock().is_empty()
    }

    async fn after_any_delay(reply: Option<Reply>) -> Option<Reply> {
        match reply {
            Some(Reply::Delayed(d, reply)) => {
                tokio::time::sleep(d).await;
                Some(*reply)
            }
            other => other,
        }
    }
}

/// A scripted watch. Cancel safe, though the reflector no longer needs it: a pause survives
/// a dropped `next` as a deadline.
struct ScriptedStream {
    steps: VecDeque<Step>,
    paused_until: Option<tokio::time::Instant>,
}

impl EventStream<ConfigMap> for ScriptedStream {
    async fn next(&mut self) -> Option<Result<WatchEvent<ConfigMap>>> {
        loop {
            if let Some(until) = self.paused_until {
                tokio::time::sleep_until(until).await;
                self.paused_until = None;
            }
            match self.steps.pop_front()? {
                Step::Event(e) => return Some(Ok(e)),
                Step::Fail(kind) => {
                    return Some(Err(Error::new(kind, format!("scripted {kind:?}"))));
                }
                Step::Pause(d) => self.paused_until = Some(tokio::time::Instant::now() + d),
            }
        }
    }
}

impl ListerWatcher<ConfigMap> for Script {
    type Stream = ScriptedStream;

    async fn list(&self, options: &ListOptions) -> Result<ListPage<ConfigMap>> {
        self.calls.lock().push(Call::List(options.clone()));
        let reply = self.replies.lock().pop_front();
        match Script::after_any_delay(reply).await {
            Some(Reply::List(r)) => r,
            Some(Reply::Watch(_)) => {
                panic!("the reflector listed ({options:?}) where the script expects a watch")
            }
            Some(Reply::Delayed(..)) => unreachable!("delays are taken off"),
            None => std::future::pending().await,
        }
    }

    async fn watch(&self, options: &WatchOptions) -> Result<ScriptedStream> {
        self.calls.lock().push(Call::Watch(options.clone()));
        let reply = self.replies.lock().pop_front();
        match Script::after_any_delay(reply).await {
            Some(Reply::Watch(r)) => r.map(|steps| ScriptedStream {
                steps: steps.into(),
                paused_until: None,
            }),
            Some(Reply::List(_)) => {
                panic!("the reflector watched ({options:?}) where the script expects a list")
            }
            Some(Reply::Delayed(..)) => unreachable!("delays are taken off"),
            None => std::future::pending().await,
        }
    }
}

// === the store ===

#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<String>>>);

impl Recorder {
    fn ops(&self) -> Vec<String> {
        self.0.lock().clone()
    }
}

fn name(cm: &ConfigMap) -> String {
    cm.metadata.name.clone().unwrap_or_default()
}

impl ReflectorStore<ConfigMap> for Recorder {
    fn add(&self, o: ConfigMap) {
        self.0.lock().push(format!("add {}", name(&o)));
    }
    fn update(&self, o: ConfigMap) {
        self.0.lock().push(format!("update {}", name(&o)));
    }
    fn delete(&self, o: ConfigMap) {
        self.0.lock().push(format!("delete {}", name(&o)));
    }
    fn replace(&self, objects: Vec<ConfigMap>, rv: &str) {
        let mut names: Vec<String> = objects.iter().map(name).collect();
        names.sort();
        self.0
            .lock()
            .push(format!("replace [{}] @{rv}", names.join(",")));
    }
    fn resync(&self) {
        self.0.lock().push("resync".into());
    }
    fn bookmark(&self, rv: &str) {
        self.0.lock().push(format!("bookmark @{rv}"));
    }
}

// === helpers ===

fn page(names: &[&str], rv: &str, cont: Option<&str>) -> Reply {
    Reply::List(Ok(ListPage {
        items: names.iter().map(|n| cm(n, rv)).collect(),
        resource_version: rv.into(),
        continue_token: cont.map(str::to_owned),
    }))
}

fn fail(kind: ErrorKind) -> Error {
    Error::new(kind, format!("scripted {kind:?}"))
}

fn list(rv: Option<&str>, limit: Option<u32>, cont: Option<&str>) -> Call {
    Call::List(ListOptions {
        resource_version: rv.map(str::to_owned),
        limit,
        continue_token: cont.map(str::to_owned),
    })
}

/// The watch calls' versions and kinds; timeouts are random and checked apart.
fn watch_from(call: &Call) -> Option<(Option<String>, bool)> {
    match call {
        Call::Watch(w) => {
            assert!(
                (300..600).contains(&w.timeout_seconds),
                "timeout {}",
                w.timeout_seconds
            );
            assert!(w.allow_bookmarks, "every watch asks for bookmarks");
            Some((w.resource_version.clone(), w.send_initial_events))
        }
        Call::List(_) => None,
    }
}

fn plain_watch(rv: &str) -> Option<(Option<String>, bool)> {
    Some((Some(rv.to_owned()), false))
}

fn no_watch_list() -> ReflectorOptions {
    ReflectorOptions {
        name: "test".into(),
        watch_list: false,
        ..ReflectorOptions::default()
    }
}

/// Runs the reflector until the script is used up, then 10 s more (on paused time) so the
/// last reply, and any pause in it, is acted on.
async fn run(script: &Script, options: ReflectorOptions) -> (Recorder, Vec<Trace>) {
    run_with(script, options, Duration::from_secs(10)).await
}

async fn run_with(
    script: &Script,
    options: ReflectorOptions,
    after: Duration,
) -> (Recorder, Vec<Trace>) {
    let ran = run_full(script, options, after).await;
    (ran.store, ran.traces)
}

/// What a run left behind.
struct Ran {
    store: Recorder,
    traces: Vec<Trace>,
    /// What the watch error handler heard.
    errors: Vec<ErrorKind>,
}

async fn run_full(script: &Script, options: ReflectorOptions, after: Duration) -> Ran {
    let store = Recorder::default();
    let traces = Arc::new(Mutex::new(Vec::new()));
    let errors = Arc::new(Mutex::new(Vec::new()));
    let (t, e) = (traces.clone(), errors.clone());
    let reflector = Reflector::new(script.clone(), store.clone(), options)
        .on_trace(move |trace| t.lock().push(trace.clone()))
        .on_watch_error(move |error| e.lock().push(error.kind()));
    let handle = tokio::spawn(reflector.run(std::future::pending()));
    // Every wait is on paused time: polling advances the clock only when all is idle.
    let mut idle = 0;
    while !script.done() {
        tokio::time::sleep(Duration::from_millis(100)).await;
        idle += 1;
        assert!(
            idle < 100_000,
            "the reflector stopped before the script ended: {:?}",
            script.calls()
        );
    }
    tokio::time::sleep(after).await;
    handle.abort();
    let traces = traces.lock().clone();
    let errors = errors.lock().clone();
    Ran {
        store,
        traces,
        errors,
    }
}

/// The traces that show the order of attempts and waits, in short.
fn timeline(traces: &[Trace]) -> Vec<String> {
    traces
        .iter()
        .filter_map(|t| match t {
            Trace::StreamListStarted { resource_version } => Some(format!(
                "stream-list from {}",
                resource_version.as_deref().unwrap_or("-")
            )),
            Trace::StreamListFailed { fallback, .. } => Some(
                if *fallback {
                    "stream-list failed: fall back to list"
                } else {
                    "stream-list failed: retry"
                }
                .to_owned(),
            ),
            Trace::ListPage {
                resource_version, ..
            } => Some(format!(
                "list from {}",
                resource_version.as_deref().unwrap_or("-")
            )),
            Trace::Listed {
                resource_version, ..
            } => Some(format!("listed @{resource_version}")),
            Trace::ListFailed { from_scratch, .. } => Some(
                if *from_scratch {
                    "list failed: at once from scratch"
                } else {
                    "list failed"
                }
                .to_owned(),
            ),
            Trace::WatchStarted {
                resource_version, ..
            } => Some(format!("watch from {resource_version}")),
            Trace::WatchEnded { reason, .. } => Some(format!("watch ended: {reason:?}")),
            Trace::Backoff { .. } => Some("backoff".to_owned()),
            Trace::Resync => Some("resync".to_owned()),
            _ => None,
        })
        .collect()
}

fn stream_list_from(rv: Option<&str>) -> Option<(Option<String>, bool)> {
    Some((rv.map(str::to_owned), true))
}

// === tests ===

#[tokio::test(start_paused = true)]
async fn first_list_asks_for_rv_0_in_pages_of_500_then_watches_from_the_list_version() {
    let script = Script::new(vec![
        page(&["a", "b"], "10", None),
        Reply::Watch(Ok(vec![
            Step::Event(WatchEvent::Added(cm("c", "11"))),
            Step::Event(WatchEvent::Modified(cm("a", "12"))),
            Step::Event(WatchEvent::Deleted(cm("b", "13"))),
            Step::Pause(Duration::from_secs(5)),
        ])),
    ]);
    let (store, _) = run(&script, no_watch_list()).await;
    let calls = script.calls();
    assert_eq!(calls[0], list(Some("0"), Some(500), None));
    assert_eq!(watch_from(&calls[1]), plain_watch("10"));
    // The watch closed normally: watch again from the last version, no relist.
    assert_eq!(watch_from(&calls[2]), plain_watch("13"));
    assert_eq!(calls.len(), 3);
    assert_eq!(
        store.ops(),
        ["replace [a,b] @10", "add c", "update a", "delete b"]
    );
}

#[tokio::test(start_paused = true)]
async fn gone_in_the_watch_relists_at_the_last_version_and_gone_on_that_list_relists_from_scratch()
{
    let script = Script::new(vec![
        page(&["a"], "10", None),
        Reply::Watch(Ok(vec![
            Step::Event(WatchEvent::Modified(cm("a", "15"))),
            Step::Fail(ErrorKind::Gone),
        ])),
        Reply::List(Err(fail(ErrorKind::Gone))),
        Reply::List(Err(fail(ErrorKind::Other))),
        page(&["a", "z"], "40", None),
    ]);
    let (store, traces) = run(&script, no_watch_list()).await;
    let calls = script.calls();
    assert_eq!(calls[0], list(Some("0"), Some(500), None));
    assert_eq!(watch_from(&calls[1]), plain_watch("10"));
    assert_eq!(
        calls[2..5],
        [
            // Relist at the last version seen, no limit, so the watch cache can serve it ...
            list(Some("15"), None, None),
            // ... and after a 410 on that list, at once a consistent read, with the page
            // size of the list it retries (client-go's pager is reused) ...
            list(None, None, None),
            // ... and after that failed too and the backoff, a new list from scratch, which
            // pages as every "" list does.
            list(None, Some(500), None),
        ]
    );
    assert_eq!(watch_from(&calls[5]), plain_watch("40"));
    assert_eq!(
        store.ops(),
        ["replace [a] @10", "update a", "replace [a,z] @40"]
    );
    assert_eq!(
        timeline(&traces),
        [
            "list from 0",
            "listed @10",
            "watch from 10",
            "watch ended: Gone",
            "backoff",
            "list failed: at once from scratch",
            "list failed",
            "backoff",
            "list from -",
            "listed @40",
            "watch from 40",
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn too_large_resource_version_on_list_lists_again_at_once_from_scratch() {
    let script = Script::new(vec![
        Reply::List(Err(fail(ErrorKind::TooLargeResourceVersion))),
        page(&["a"], "10", None),
        Reply::Watch(Ok(vec![
            Step::Event(WatchEvent::Modified(cm("a", "11"))),
            Step::Fail(ErrorKind::Gone),
        ])),
        page(&["a"], "12", None),
    ]);
    let (store, traces) = run(&script, no_watch_list()).await;
    let calls = script.calls();
    assert_eq!(
        calls[..2],
        [
            list(Some("0"), Some(500), None),
            // The server has not reached the version asked for: a consistent read.
            list(None, Some(500), None),
        ]
    );
    assert_eq!(watch_from(&calls[2]), plain_watch("10"));
    // That list succeeded: the next relist is at the last version again, not "".
    assert_eq!(calls[3], list(Some("11"), None, None));
    assert_eq!(watch_from(&calls[4]), plain_watch("12"));
    assert_eq!(calls.len(), 5);
    assert_eq!(
        store.ops(),
        ["replace [a] @10", "update a", "replace [a] @12"]
    );
    // The retry from scratch follows its failure at once, without a backoff.
    let failed = traces
        .iter()
        .position(|t| {
            matches!(
                t,
                Trace::ListFailed {
                    from_scratch: true,
                    ..
                }
            )
        })
        .expect("the too-large list is traced");
    assert!(
        matches!(
            &traces[failed + 1],
            Trace::ListPage {
                resource_version: None,
                ..
            }
        ),
        "{traces:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_broken_watch_stream_ends_the_watch_and_relists_at_the_last_version() {
    let script = Script::new(vec![
        page(&["a"], "10", None),
        Reply::Watch(Ok(vec![
            Step::Event(WatchEvent::Modified(cm("a", "11"))),
            Step::Fail(ErrorKind::Stream),
        ])),
        page(&["a", "b"], "14", None),
    ]);
    let (store, traces) = run(&script, no_watch_list()).await;
    let calls = script.calls();
    assert_eq!(calls[0], list(Some("0"), Some(500), None));
    assert_eq!(watch_from(&calls[1]), plain_watch("10"));
    assert_eq!(calls[2], list(Some("11"), None, None));
    assert_eq!(watch_from(&calls[3]), plain_watch("14"));
    assert_eq!(calls.len(), 4);
    assert_eq!(
        store.ops(),
        ["replace [a] @10", "update a", "replace [a,b] @14"]
    );
    let ended = traces
        .iter()
        .position(|t| {
            matches!(
                t,
                Trace::WatchEnded {
                    events: 1,
                    reason: informer::WatchEnd::Error(_)
                }
            )
        })
        .expect("the watch ended with the stream error");
    assert!(
        matches!(traces[ended + 1], Trace::Backoff { .. }),
        "the relist waits a backoff first: {traces:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn pages_follow_continue_tokens_and_an_expired_token_falls_back_to_one_full_list() {
    let script = Script::new(vec![
        page(&["a", "b"], "20", Some("c1")),
        page(&["c", "d"], "20", Some("c2")),
        Reply::List(Err(fail(ErrorKind::Gone))),
        page(&["a", "b", "c", "d", "e"], "25", None),
    ]);
    let (store, traces) = run(&script, no_watch_list()).await;
    let calls = script.calls();
    assert_eq!(
        calls[..4],
        [
            list(Some("0"), Some(500), None),
            // Continued pages carry the token and no version.
            list(None, Some(500), Some("c1")),
            list(None, Some(500), Some("c2")),
            // The token expired: one full list at the original version, without a limit.
            list(Some("0"), None, None),
        ]
    );
    assert_eq!(watch_from(&calls[4]), plain_watch("25"));
    assert_eq!(store.ops(), ["replace [a,b,c,d,e] @25"]);
    assert!(traces.contains(&Trace::FullListFallback));
}

#[tokio::test(start_paused = true)]
async fn a_paginated_rv_0_list_keeps_paging_on_relist() {
    let script = Script::new(vec![
        page(&["a"], "20", Some("c1")),
        page(&["b"], "20", None),
        Reply::Watch(Ok(vec![Step::Fail(ErrorKind::Other)])),
        page(&["a", "b"], "30", None),
    ]);
    run(&script, no_watch_list()).await;
    let calls = script.calls();
    // A relist at a version normally has no limit, but the server pages this collection.
    assert_eq!(calls[3], list(Some("20"), Some(500), None));
}

#[tokio::test(start_paused = true)]
async fn a_rv_0_list_that_fell_back_to_a_full_list_still_counts_as_paginated() {
    let script = Script::new(vec![
        page(&["a"], "20", Some("c1")),
        Reply::List(Err(fail(ErrorKind::Gone))),
        page(&["a", "b"], "25", None),
        Reply::Watch(Ok(vec![Step::Fail(ErrorKind::Other)])),
        page(&["a", "b"], "30", None),
    ]);
    run(&script, no_watch_list()).await;
    let calls = script.calls();
    assert_eq!(
        calls[..3],
        [
            list(Some("0"), Some(500), None),
            list(None, Some(500), Some("c1")),
            list(Some("0"), None, None),
        ]
    );
    assert_eq!(watch_from(&calls[3]), plain_watch("25"));
    // The server paged a "0" list: the collection is not served from a watch cache, so
    // relists keep paging, as after a list that completed in pages.
    assert_eq!(calls[4], list(Some("25"), Some(500), None));
}

#[tokio::test(start_paused = true)]
async fn too_many_requests_on_watch_backs_off_and_watches_again_without_relisting() {
    let script = Script::new(vec![
        page(&["a"], "10", None),
        Reply::Watch(Err(fail(ErrorKind::TooManyRequests))),
        Reply::Watch(Err(fail(ErrorKind::ConnectionRefused))),
        Reply::Watch(Err(fail(ErrorKind::TooManyRequests))),
        Reply::Watch(Ok(vec![Step::Fail(ErrorKind::TooManyRequests)])),
        Reply::Watch(Ok(vec![Step::Pause(Duration::from_secs(5))])),
    ]);
    let (_, traces) = run(&script, no_watch_list()).await;
    let calls = script.calls();
    let lists = calls.iter().filter(|c| matches!(c, Call::List(_))).count();
    assert_eq!(lists, 1, "{calls:?}");
    assert!(
        calls[1..]
            .iter()
            .all(|c| watch_from(c) == plain_watch("10"))
    );
    let backoffs: Vec<Duration> = traces
        .iter()
        .filter_map(|t| match t {
            Trace::Backoff { delay } => Some(*delay),
            _ => None,
        })
        .collect();
    // 0.8 s, 1.6 s, 3.2 s, 6.4 s, each jittered up to double.
    assert_eq!(backoffs.len(), 4);
    for (delay, base) in backoffs.iter().zip([800u64, 1600, 3200, 6400]) {
        let base = Duration::from_millis(base);
        assert!(
            *delay >= base && *delay < base * 2,
            "{delay:?} outside [{base:?}, 2×)"
        );
    }
}

/// Runs the reflector as `run` does, noting when (on paused time, from the start) each
/// trace came.
async fn run_timed(script: &Script, options: ReflectorOptions) -> Vec<(Duration, Trace)> {
    let start = tokio::time::Instant::now();
    let traces = Arc::new(Mutex::new(Vec::new()));
    let t = traces.clone();
    let reflector = Reflector::new(script.clone(), Recorder::default(), options)
        .on_trace(move |trace| t.lock().push((start.elapsed(), trace.clone())));
    let handle = tokio::spawn(reflector.run(std::future::pending()));
    while !script.done() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(10)).await;
    handle.abort();
    traces.lock().clone()
}

/// The time between one watch or list request and the next.
fn gaps_between_requests(traces: &[(Duration, Trace)]) -> Vec<Duration> {
    let starts: Vec<Duration> = traces
        .iter()
        .filter(|(_, t)| {
            matches!(
                t,
                Trace::WatchStarted { .. }
                    | Trace::ListPage {
                        continued: false,
                        ..
                    }
            )
        })
        .map(|(at, _)| *at)
        .collect();
    starts.windows(2).map(|w| w[1] - w[0]).collect()
}

fn secs(s: &[u64]) -> Vec<Duration> {
    s.iter().map(|&s| Duration::from_secs(s)).collect()
}

#[tokio::test(start_paused = true)]
async fn the_reflector_waits_the_configured_backoff() {
    let script = Script::new(vec![
        page(&["a"], "10", None),
        Reply::Watch(Err(fail(ErrorKind::TooManyRequests))),
        Reply::Watch(Err(fail(ErrorKind::ConnectionRefused))),
        Reply::Watch(Err(fail(ErrorKind::TooManyRequests))),
        Reply::Watch(Err(fail(ErrorKind::TooManyRequests))),
        Reply::Watch(Err(fail(ErrorKind::TooManyRequests))),
        Reply::Watch(Ok(vec![Step::Pause(Duration::from_secs(5))])),
    ]);
    let options = ReflectorOptions {
        backoff: BackoffOptions {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(4),
            factor: 2.0,
            jitter: 0.0,
            reset_after: Duration::from_secs(600),
        },
        ..no_watch_list()
    };
    let traces = run_timed(&script, options).await;
    // The list, then each watch after the one before failed: 1 s doubling to 4 s; the last
    // watch closes after 5 s and is watched again at once.
    assert_eq!(gaps_between_requests(&traces), secs(&[0, 1, 2, 4, 4, 4, 5]));
    let delays: Vec<Duration> = traces
        .iter()
        .filter_map(|(_, t)| match t {
            Trace::Backoff { delay } => Some(*delay),
            _ => None,
        })
        .collect();
    assert_eq!(delays, secs(&[1, 2, 4, 4, 4]));
}

#[tokio::test(start_paused = true)]
async fn the_configured_jitter_stretches_each_backoff_at_most_that_much() {
    let mut replies = vec![page(&["a"], "10", None)];
    replies.extend((0..8).map(|_| Reply::Watch(Err(fail(ErrorKind::TooManyRequests)))));
    replies.push(Reply::Watch(Ok(vec![Step::Pause(Duration::from_secs(5))])));
    let script = Script::new(replies);
    let options = ReflectorOptions {
        backoff: BackoffOptions {
            initial: Duration::from_secs(2),
            max: Duration::from_secs(2),
            jitter: 0.5,
            ..BackoffOptions::default()
        },
        ..no_watch_list()
    };
    let gaps = gaps_between_requests(&run_timed(&script, options).await);
    // The list, nine watches, and the re-watch after the last closed normally.
    assert_eq!(gaps.len(), 10);
    for gap in &gaps[1..9] {
        assert!(
            *gap >= Duration::from_secs(2) && *gap < Duration::from_secs(3),
            "{gaps:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn the_backoff_starts_again_after_the_configured_reset() {
    let script = Script::new(vec![
        page(&["a"], "10", None),
        Reply::Watch(Err(fail(ErrorKind::TooManyRequests))),
        Reply::Watch(Err(fail(ErrorKind::TooManyRequests))),
        // A watch that runs for half a minute, then fails: the relist waits the initial
        // delay again, the sequence having started more than 10 s before.
        Reply::Watch(Ok(vec![
            Step::Pause(Duration::from_secs(30)),
            Step::Fail(ErrorKind::Other),
        ])),
        page(&["a"], "20", None),
        Reply::Watch(Ok(vec![Step::Pause(Duration::from_secs(5))])),
    ]);
    let options = ReflectorOptions {
        backoff: BackoffOptions {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(8),
            factor: 2.0,
            jitter: 0.0,
            reset_after: Duration::from_secs(10),
        },
        ..no_watch_list()
    };
    let traces = run_timed(&script, options).await;
    // List, watch, 1 s, watch, 2 s, watch (30 s), 1 s, list, watch (5 s), watch.
    assert_eq!(gaps_between_requests(&traces), secs(&[0, 1, 2, 31, 0, 5]));
}

#[tokio::test(start_paused = true)]
async fn a_watch_ending_at_once_without_events_is_too_short_and_relists() {
    let script = Script::new(vec![
        page(&["a"], "10", None),
        Reply::Watch(Ok(vec![])),
        page(&["a"], "12", None),
    ]);
    let ran = run_full(&script, no_watch_list(), Duration::from_secs(1)).await;
    assert_eq!(script.calls()[2], list(Some("10"), None, None));
    assert_eq!(ran.store.ops(), ["replace [a] @10", "replace [a] @12"]);
    assert!(ran.traces.iter().any(|t| matches!(
        t,
        Trace::WatchEnded {
            reason: informer::WatchEnd::TooShort,
            ..
        }
    )));
    assert_eq!(
        ran.errors,
        [],
        "as in client-go, a very short watch is logged, not reported"
    );
}

#[tokio::test(start_paused = true)]
async fn a_watch_that_took_a_second_to_open_and_closed_at_once_is_not_too_short() {
    let script = Script::new(vec![
        page(&["a"], "10", None),
        // As in client-go, the clock starts before the request: some proxies send the
        // headers only with the first event.
        Reply::Delayed(Duration::from_secs(2), Box::new(Reply::Watch(Ok(vec![])))),
        Reply::Watch(Ok(vec![Step::Pause(Duration::from_secs(5))])),
    ]);
    run(&script, no_watch_list()).await;
    let calls = script.calls();
    assert_eq!(watch_from(&calls[1]), plain_watch("10"));
    // Closed normally: watched again, no relist.
    assert_eq!(watch_from(&calls[2]), plain_watch("10"));
}

/// The `timeoutSeconds` of every watch request the script saw.
fn watch_timeouts(script: &Script) -> Vec<u32> {
    script
        .calls()
        .iter()
        .filter_map(|c| match c {
            Call::Watch(w) => Some(w.timeout_seconds),
            Call::List(_) => None,
        })
        .collect()
}

/// A list, then `n` watches that each close normally after a few seconds.
fn list_then_watches(n: usize) -> Script {
    let mut replies = vec![page(&["a"], "10", None)];
    replies.extend((0..n).map(|_| Reply::Watch(Ok(vec![Step::Pause(Duration::from_secs(5))]))));
    Script::new(replies)
}

#[tokio::test(start_paused = true)]
async fn a_min_watch_timeout_below_five_minutes_is_raised_to_five_minutes() {
    for short in [
        Duration::ZERO,
        Duration::from_secs(1),
        Duration::from_secs(299),
    ] {
        let script = list_then_watches(8);
        let options = ReflectorOptions {
            min_watch_timeout: short,
            ..no_watch_list()
        };
        run(&script, options).await;
        let timeouts = watch_timeouts(&script);
        assert!(timeouts.len() >= 8, "{timeouts:?}");
        // As in client-go: only values above the 5-minute default are taken.
        assert!(
            timeouts.iter().all(|t| (300..600).contains(t)),
            "{short:?}: {timeouts:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_min_watch_timeout_above_five_minutes_is_honoured() {
    let script = list_then_watches(8);
    let options = ReflectorOptions {
        min_watch_timeout: Duration::from_secs(900),
        ..no_watch_list()
    };
    run(&script, options).await;
    let timeouts = watch_timeouts(&script);
    assert!(timeouts.len() >= 8, "{timeouts:?}");
    assert!(
        timeouts.iter().all(|t| (900..1800).contains(t)),
        "{timeouts:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_watch_error_handler_hears_failed_lists_and_watch_requests_only() {
    let script = Script::new(vec![
        // Heard: the LIST failed.
        Reply::List(Err(fail(ErrorKind::InternalError))),
        page(&["a"], "10", None),
        // Not heard: throttled, the watch is tried again.
        Reply::Watch(Err(fail(ErrorKind::TooManyRequests))),
        // Heard: the WATCH request failed.
        Reply::Watch(Err(fail(ErrorKind::Other))),
        page(&["a"], "11", None),
        // Not heard: errors inside a running watch, and a very short one. Each relists.
        Reply::Watch(Ok(vec![Step::Fail(ErrorKind::Stream)])),
        page(&["a"], "12", None),
        Reply::Watch(Ok(vec![Step::Fail(ErrorKind::Gone)])),
        page(&["a"], "13", None),
        Reply::Watch(Ok(vec![Step::Fail(ErrorKind::InternalError)])),
        page(&["a"], "14", None),
        Reply::Watch(Ok(vec![])),
        page(&["a"], "15", None),
        Reply::Watch(Ok(vec![Step::Pause(Duration::from_secs(5))])),
    ]);
    let ran = run_full(&script, no_watch_list(), Duration::from_secs(10)).await;
    assert_eq!(ran.errors, [ErrorKind::InternalError, ErrorKind::Other]);
    assert_eq!(ran.store.ops().len(), 6, "{:?}", ran.store.ops());

    // With WatchList: a streaming list that falls back to LIST is not heard; the LIST is.
    let script = Script::new(vec![
        Reply::Watch(Err(fail(ErrorKind::Other))),
        Reply::List(Err(fail(ErrorKind::InternalError))),
        Reply::Watch(Ok(vec![
            Step::Event(WatchEvent::Added(cm("a", "5"))),
            Step::Fail(ErrorKind::Stream),
        ])),
        page(&["a"], "10", None),
    ]);
    let ran = run_full(&script, ReflectorOptions::default(), Duration::from_secs(1)).await;
    assert_eq!(ran.errors, [ErrorKind::InternalError]);
    assert_eq!(ran.store.ops(), ["replace [a] @10"]);
}

#[tokio::test(start_paused = true)]
async fn bookmarks_move_the_version_on_without_touching_objects() {
    let script = Script::new(vec![
        page(&["a"], "10", None),
        Reply::Watch(Ok(vec![
            Step::Event(WatchEvent::Bookmark {
                resource_version: "30".into(),
                initial_events_end: false,
            }),
            Step::Pause(Duration::from_secs(5)),
        ])),
    ]);
    let (store, _) = run(&script, no_watch_list()).await;
    assert_eq!(watch_from(&script.calls()[2]), plain_watch("30"));
    assert_eq!(store.ops(), ["replace [a] @10", "bookmark @30"]);
}

#[tokio::test(start_paused = true)]
async fn after_a_list_without_a_version_added_events_move_it_once_another_event_came() {
    for list_rv in ["", "0"] {
        let script = Script::new(vec![
            page(&["a"], list_rv, None),
            // Only the synthetic ADDED events of the current state, in no version order: the
            // version stays where the list left it.
            Reply::Watch(Ok(vec![
                Step::Event(WatchEvent::Added(cm("b", "9"))),
                Step::Event(WatchEvent::Added(cm("c", "4"))),
                Step::Pause(Duration::from_secs(5)),
            ])),
            // A change ends them: from there on every event moves the version, ADDED too.
            Reply::Watch(Ok(vec![
                Step::Event(WatchEvent::Added(cm("d", "3"))),
                Step::Event(WatchEvent::Modified(cm("a", "11"))),
                Step::Event(WatchEvent::Added(cm("e", "12"))),
                Step::Pause(Duration::from_secs(5)),
            ])),
            Reply::Watch(Ok(vec![Step::Pause(Duration::from_secs(5))])),
        ]);
        let (store, _) = run(&script, no_watch_list()).await;
        let watches: Vec<_> = script.calls().iter().filter_map(watch_from).collect();
        let from_list = (!list_rv.is_empty()).then(|| list_rv.to_owned());
        assert_eq!(
            watches[..3],
            [
                (from_list.clone(), false),
                (from_list, false),
                // Not "11": the re-watch does not replay the ADDED event of "e".
                plain_watch("12").unwrap(),
            ],
            "list at {list_rv:?}"
        );
        assert_eq!(
            store.ops(),
            [
                format!("replace [a] @{list_rv}").as_str(),
                "add b",
                "add c",
                "add d",
                "update a",
                "add e"
            ]
        );
    }
}

#[tokio::test(start_paused = true)]
async fn watch_list_replaces_at_the_initial_events_end_bookmark_and_keeps_the_stream() {
    let script = Script::new(vec![Reply::Watch(Ok(vec![
        Step::Event(WatchEvent::Added(cm("a", "5"))),
        Step::Event(WatchEvent::Added(cm("b", "7"))),
        Step::Event(WatchEvent::Modified(cm("a", "9"))),
        Step::Event(WatchEvent::Added(cm("gone", "3"))),
        Step::Event(WatchEvent::Deleted(cm("gone", "10"))),
        // "false" does not end the initial events.
        Step::Event(WatchEvent::Bookmark {
            resource_version: "11".into(),
            initial_events_end: false,
        }),
        Step::Event(WatchEvent::Bookmark {
            resource_version: "12".into(),
            initial_events_end: true,
        }),
        Step::Event(WatchEvent::Added(cm("c", "13"))),
        Step::Pause(Duration::from_secs(5)),
    ]))]);
    let (store, _) = run(&script, ReflectorOptions::default()).await;
    let calls = script.calls();
    assert_eq!(
        watch_from(&calls[0]),
        Some((None, true)),
        "a streaming list of the latest state"
    );
    // The same stream went on as the watch; the next watch starts from where it ended.
    assert_eq!(watch_from(&calls[1]), plain_watch("13"));
    assert_eq!(store.ops(), ["replace [a,b] @12", "add c"]);
}

#[tokio::test(start_paused = true)]
async fn watch_list_refused_falls_back_to_a_plain_list() {
    let script = Script::new(vec![
        Reply::Watch(Err(fail(ErrorKind::Other))),
        page(&["a"], "10", None),
    ]);
    let (store, traces) = run(&script, ReflectorOptions::default()).await;
    assert_eq!(script.calls()[1], list(Some("0"), Some(500), None));
    assert_eq!(store.ops(), ["replace [a] @10"]);
    assert!(
        traces
            .iter()
            .any(|t| matches!(t, Trace::StreamListFailed { fallback: true, .. }))
    );
}

#[tokio::test(start_paused = true)]
async fn watch_list_closed_before_its_bookmark_is_tried_again_from_scratch() {
    let script = Script::new(vec![
        Reply::Watch(Ok(vec![Step::Event(WatchEvent::Added(cm("a", "5")))])),
        Reply::Watch(Ok(vec![
            Step::Event(WatchEvent::Added(cm("b", "6"))),
            Step::Event(WatchEvent::Bookmark {
                resource_version: "8".into(),
                initial_events_end: true,
            }),
            Step::Pause(Duration::from_secs(5)),
        ])),
    ]);
    let (store, traces) = run(&script, ReflectorOptions::default()).await;
    let calls = script.calls();
    assert_eq!(watch_from(&calls[1]), Some((None, true)));
    // The first attempt's "a" never reached the store.
    assert_eq!(store.ops(), ["replace [b] @8"]);
    assert!(
        !traces.iter().any(|t| matches!(t, Trace::Backoff { .. })),
        "tried again at once: {traces:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn watch_list_retries_at_once_after_gone_too_large_or_an_early_close_and_backs_off_when_throttled()
 {
    let synced = |rv: &str| {
        Step::Event(WatchEvent::Bookmark {
            resource_version: rv.into(),
            initial_events_end: true,
        })
    };
    let script = Script::new(vec![
        // Synced at 8, then the watch on the same stream is gone: relist from 8.
        Reply::Watch(Ok(vec![
            Step::Event(WatchEvent::Added(cm("a", "5"))),
            synced("8"),
            Step::Fail(ErrorKind::Gone),
        ])),
        // 8 is too new for this server: at once, from the latest state.
        Reply::Watch(Err(fail(ErrorKind::TooLargeResourceVersion))),
        // Throttled: back off, then the same request.
        Reply::Watch(Err(fail(ErrorKind::TooManyRequests))),
        // Gone inside the initial events: at once, from the latest state.
        Reply::Watch(Ok(vec![
            Step::Event(WatchEvent::Added(cm("a", "9"))),
            Step::Fail(ErrorKind::Gone),
        ])),
        // Closed after an event, before the bookmark: at once, with an empty slate.
        Reply::Watch(Ok(vec![Step::Event(WatchEvent::Added(cm("b", "10")))])),
        // The server is away: back off.
        Reply::Watch(Err(fail(ErrorKind::ConnectionRefused))),
        Reply::Watch(Ok(vec![
            Step::Event(WatchEvent::Added(cm("a", "11"))),
            synced("12"),
            Step::Pause(Duration::from_secs(5)),
        ])),
    ]);
    let (store, traces) = run(&script, ReflectorOptions::default()).await;
    let calls: Vec<_> = script.calls().iter().map(watch_from).collect();
    assert_eq!(
        calls,
        [
            stream_list_from(None),
            stream_list_from(Some("8")),
            stream_list_from(None),
            stream_list_from(None),
            stream_list_from(None),
            stream_list_from(None),
            stream_list_from(None),
            plain_watch("12"),
        ]
    );
    assert_eq!(
        timeline(&traces),
        [
            "stream-list from -",
            "listed @8",
            "watch ended: Gone",
            "backoff",
            "stream-list from 8",
            "stream-list failed: retry",
            "stream-list from -",
            "stream-list failed: retry",
            "backoff",
            "stream-list from -",
            "stream-list failed: retry",
            "stream-list from -",
            "stream-list failed: retry",
            "stream-list from -",
            "stream-list failed: retry",
            "backoff",
            "stream-list from -",
            "listed @12",
            "watch ended: Closed",
            "watch from 12",
        ]
    );
    assert_eq!(store.ops(), ["replace [a] @8", "replace [a] @12"]);
}

#[tokio::test(start_paused = true)]
async fn watch_list_falls_back_to_list_after_a_very_short_stream_or_a_broken_one() {
    let script = Script::new(vec![
        // Closed at once without an event: very short; not retried as a stream.
        Reply::Watch(Ok(vec![])),
        page(&["a"], "10", None),
        Reply::Watch(Ok(vec![Step::Fail(ErrorKind::Other)])),
        // The relist tries a streaming list again; the stream breaks: LIST.
        Reply::Watch(Ok(vec![
            Step::Event(WatchEvent::Added(cm("a", "11"))),
            Step::Fail(ErrorKind::Stream),
        ])),
        page(&["a"], "12", None),
    ]);
    let (store, traces) = run(&script, ReflectorOptions::default()).await;
    let calls = script.calls();
    assert_eq!(watch_from(&calls[0]), stream_list_from(None));
    assert_eq!(calls[1], list(Some("0"), Some(500), None));
    assert_eq!(watch_from(&calls[2]), plain_watch("10"));
    assert_eq!(watch_from(&calls[3]), stream_list_from(Some("10")));
    assert_eq!(calls[4], list(Some("10"), None, None));
    assert_eq!(watch_from(&calls[5]), plain_watch("12"));
    assert_eq!(calls.len(), 6);
    assert_eq!(store.ops(), ["replace [a] @10", "replace [a] @12"]);
    assert_eq!(
        timeline(&traces),
        [
            "stream-list from -",
            "stream-list failed: fall back to list",
            "list from 0",
            "listed @10",
            "watch from 10",
            "watch ended: Error(\"scripted Other\")",
            "backoff",
            "stream-list from 10",
            "stream-list failed: fall back to list",
            "list from 10",
            "listed @12",
            "watch from 12",
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn resync_runs_every_period_while_watching_when_allowed() {
    let script = Script::new(vec![
        page(&["a"], "10", None),
        Reply::Watch(Ok(vec![Step::Pause(Duration::from_secs(100))])),
    ]);
    let options = ReflectorOptions {
        resync_period: Some(Duration::from_secs(30)),
        ..no_watch_list()
    };
    let (store, _) = run_with(&script, options, Duration::from_secs(95)).await;
    assert_eq!(
        store.ops(),
        ["replace [a] @10", "resync", "resync", "resync"]
    );

    // ShouldResync says no: no resync.
    let script = Script::new(vec![
        page(&["a"], "10", None),
        Reply::Watch(Ok(vec![Step::Pause(Duration::from_secs(100))])),
    ]);
    let store = Recorder::default();
    let reflector = Reflector::new(
        script.clone(),
        store.clone(),
        ReflectorOptions {
            resync_period: Some(Duration::from_secs(30)),
            ..no_watch_list()
        },
    )
    .should_resync(|| false);
    let handle = tokio::spawn(reflector.run(std::future::pending()));
    tokio::time::sleep(Duration::from_secs(95)).await;
    handle.abort();
    assert_eq!(store.ops(), ["replace [a] @10"]);
}

#[tokio::test(start_paused = true)]
async fn resync_goes_on_through_watch_requests_and_their_backoffs() {
    let script = Script::new(vec![
        page(&["a"], "10", None),
        Reply::Watch(Err(fail(ErrorKind::TooManyRequests))),
        Reply::Watch(Err(fail(ErrorKind::TooManyRequests))),
        Reply::Watch(Err(fail(ErrorKind::TooManyRequests))),
        // A watch request the server sits on for a minute.
        Reply::Delayed(
            Duration::from_secs(60),
            Box::new(Reply::Watch(Ok(vec![Step::Pause(Duration::from_secs(
                100,
            ))]))),
        ),
    ]);
    let options = ReflectorOptions {
        resync_period: Some(Duration::from_secs(2)),
        ..no_watch_list()
    };
    // The script ends when the last request is made; stop 9 s into it.
    let (_, traces) = run_with(&script, options, Duration::from_secs(9)).await;
    let timeline = timeline(&traces);
    // The backoffs after 429 (0.8 s, 1.6 s, 3.2 s, each stretched up to double) last
    // longer than the period: the store resyncs during them.
    let backoffs = || timeline.iter().enumerate().filter(|(_, t)| *t == "backoff");
    assert!(
        backoffs().any(|(i, _)| timeline[i + 1] == "resync"),
        "{timeline:?}"
    );
    // And during the hanging request: every 2 s for 9 s.
    let last_watch = timeline.iter().rposition(|t| t.starts_with("watch from"));
    let hanging = &timeline[last_watch.unwrap() + 1..];
    assert!(
        hanging.len() >= 4 && hanging.iter().all(|t| t == "resync"),
        "{timeline:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn resync_stops_while_relisting_and_restarts_a_period_after_the_list() {
    let script = Script::new(vec![
        page(&["a"], "10", None),
        Reply::Watch(Ok(vec![
            Step::Pause(Duration::from_secs(40)),
            Step::Fail(ErrorKind::Other),
        ])),
        // The relist hangs for 100 s: as in client-go, no resync meanwhile.
        Reply::Delayed(Duration::from_secs(100), Box::new(page(&["a"], "20", None))),
        Reply::Watch(Ok(vec![Step::Pause(Duration::from_secs(100))])),
    ]);
    let options = ReflectorOptions {
        resync_period: Some(Duration::from_secs(30)),
        ..no_watch_list()
    };
    // Stop 25 s after the relist: before the first resync of the new watch phase.
    let (store, _) = run_with(&script, options, Duration::from_secs(25)).await;
    assert_eq!(
        store.ops(),
        ["replace [a] @10", "resync", "replace [a] @20"]
    );
}

#[tokio::test(start_paused = true)]
async fn shutdown_stops_the_reflector() {
    let script = Script::new(vec![page(&["a"], "10", None)]);
    let store = Recorder::default();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let reflector = Reflector::new(script.clone(), store.clone(), no_watch_list());
    let handle = tokio::spawn(reflector.run(async {
        let _ = rx.await;
    }));
    tokio::time::sleep(Duration::from_secs(1)).await;
    tx.send(()).unwrap();
    handle.await.expect("run returns after shutdown");
    assert_eq!(store.ops(), ["replace [a] @10"]);
}

// === prepare: the store's transform as objects arrive ===

/// A store that transforms in `prepare`, logging every call: `prepare a@5`, then which
/// replace it got.
#[derive(Clone, Default)]
struct Preparing(Recorder);

impl ReflectorStore<ConfigMap> for Preparing {
    fn add(&self, o: ConfigMap) {
        self.0.add(o);
    }
    fn update(&self, o: ConfigMap) {
        self.0.update(o);
    }
    fn delete(&self, o: ConfigMap) {
        self.0.delete(o);
    }
    fn replace(&self, objects: Vec<ConfigMap>, rv: &str) {
        self.0
            .0
            .lock()
            .push(format!("replace unprepared ({}) @{rv}", objects.len()));
    }
    fn prepare(&self, o: &mut ConfigMap) {
        let rv = o.metadata.resource_version.clone().unwrap_or_default();
        self.0.0.lock().push(format!("prepare {}@{rv}", name(o)));
        o.metadata
            .labels
            .get_or_insert_default()
            .insert("prepared".into(), "yes".into());
    }
    fn replace_prepared(&self, objects: Vec<ConfigMap>, rv: &str) {
        let all_prepared = objects.iter().all(|o| {
            o.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key("prepared"))
        });
        let mut names: Vec<String> = objects.iter().map(name).collect();
        names.sort();
        self.0.0.lock().push(format!(
            "replace_prepared [{}] @{rv}, all prepared: {all_prepared}",
            names.join(",")
        ));
    }
    fn resync(&self) {
        self.0.resync();
    }
}

/// Runs the reflector over `script` into a [`Preparing`] store until the script is used
/// up, and 10 s more; the store's log.
async fn run_preparing(script: &Script, options: ReflectorOptions) -> Vec<String> {
    let store = Preparing::default();
    let reflector = Reflector::new(script.clone(), store.clone(), options);
    let handle = tokio::spawn(reflector.run(std::future::pending()));
    while !script.done() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(10)).await;
    handle.abort();
    store.0.ops()
}

#[tokio::test(start_paused = true)]
async fn a_streaming_list_prepares_each_object_as_it_arrives_and_replaces_with_them() {
    let script = Script::new(vec![Reply::Watch(Ok(vec![
        Step::Event(WatchEvent::Added(cm("a", "5"))),
        Step::Event(WatchEvent::Added(cm("b", "7"))),
        Step::Event(WatchEvent::Modified(cm("a", "9"))),
        Step::Event(WatchEvent::Bookmark {
            resource_version: "12".into(),
            initial_events_end: true,
        }),
        Step::Event(WatchEvent::Added(cm("c", "13"))),
        Step::Pause(Duration::from_secs(5)),
    ]))]);
    let ops = run_preparing(&script, ReflectorOptions::default()).await;
    // Held prepared until the bookmark, handed over without a second transform; a live
    // event goes to the store as it is, which transforms it itself.
    assert_eq!(
        ops,
        [
            "prepare a@5",
            "prepare b@7",
            "prepare a@9",
            "replace_prepared [a,b] @12, all prepared: true",
            "add c",
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_paged_list_prepares_each_page_as_it_arrives_and_replaces_with_them() {
    let script = Script::new(vec![
        page(&["a", "b"], "20", Some("c1")),
        page(&["c"], "20", None),
        Reply::Watch(Ok(vec![Step::Pause(Duration::from_secs(5))])),
    ]);
    let ops = run_preparing(&script, no_watch_list()).await;
    assert_eq!(
        ops,
        [
            "prepare a@20",
            "prepare b@20",
            "prepare c@20",
            "replace_prepared [a,b,c] @20, all prepared: true",
        ]
    );
}
