//! `/debug/controllers`: a live page of what the manager's controllers and informers are
//! doing, and the story of a single key.
//!
//! "Why has my object not been reconciled?" The page answers from the inside, on the metrics
//! server's address (and behind its authentication and authorization with
//! `--metrics-secure`), when the manager is built with
//! [`ManagerOptions::debug_pages`](super::ManagerOptions::debug_pages) (the flag
//! `--enable-debug-pages`). Off by default.
//!
//! * per controller: the queue's depth by priority and the keys waiting in it for a delay
//!   (backoff or `requeue_after`), each with its failure count, next retry and last error
//!   line; the keys in flight and how long each has run; the last reconciles (key, start,
//!   duration, result, error line); reconciles per second over the last 10 s;
//! * per informer: kind, namespace, objects cached, bytes held, last resourceVersion,
//!   seconds since it last heard from the server, relists, watch restarts, synced;
//! * leader election: the holder, this replica's role, the lease's age and term;
//! * with a sharded manager ([`Manager::shard`](super::Manager::shard)): the ranges this
//!   replica reconciles, and every live member with the ranges its Lease says it holds;
//! * with `?key=namespace/name`: that key's story, as each controller saw it: the watch
//!   events that queued it (kind, verb, the object's key and resourceVersion), the ones a
//!   predicate filtered out, how long it waited in the queue, each reconcile and its
//!   outcome, the next retry.
//!
//! `/debug/controllers.json` serves the same [`Snapshot`] as JSON for scripts and tests;
//! the HTML page is rendered on the server and a small inline script polls the JSON every
//! second and redraws it (no front-end build step).
//!
//! Only keys, kinds, resourceVersions, counts and error lines are shown: never an object's
//! contents.
//!
//! # Cost
//!
//! With the pages off, every hook in the controller is one `Option` check on a field that is
//! `None`; nothing is recorded. With them on, each watch event, reconcile and retry takes
//! one short mutex per controller. Memory stays bounded: a story keeps the last
//! [`Limits::events_per_key`] events of at most [`Limits::keys`] keys (the oldest key is
//! dropped first), and [`Limits::recent`] reconciles are kept per controller.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use informer::Key;
use parking_lot::Mutex;
use serde::Serialize;

use super::leader_election::LeaderElector;
use super::shard::Shard;

mod page;

/// The paths the pages are served on.
pub const PAGE_PATH: &str = "/debug/controllers";
/// The JSON twin of [`PAGE_PATH`].
pub const JSON_PATH: &str = "/debug/controllers.json";

/// How much the pages remember.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Keys whose story is kept, per controller; past it the key heard of longest ago is
    /// forgotten. Default 1024.
    pub keys: usize,
    /// Events kept in one key's story (the oldest go first). Default 64.
    pub events_per_key: usize,
    /// Finished reconciles kept per controller. Default 20.
    pub recent: usize,
    /// Keys listed per controller as waiting, the soonest due first. Default 100.
    pub waiting_shown: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            keys: 1024,
            events_per_key: 64,
            recent: 20,
            waiting_shown: 100,
        }
    }
}

/// What the cache tells about one informer (see `Cache::informer_stats`).
#[derive(Clone, Debug)]
pub(crate) struct InformerStats {
    pub name: String,
    pub group: String,
    pub version: String,
    pub kind: String,
    pub namespace: Option<String>,
    pub objects: usize,
    pub bytes: usize,
    pub resource_version: String,
    pub synced: bool,
    pub last_error: Option<String>,
}

type StatsFn = Box<dyn Fn() -> Vec<InformerStats> + Send + Sync>;

/// The recorder behind the pages: every controller's and informer's trace, and the leader
/// elector. Cheap to clone. The manager makes one when its pages are on.
#[derive(Clone)]
pub struct DebugPages {
    inner: Arc<Inner>,
}

struct Inner {
    limits: Limits,
    controllers: Mutex<Vec<Arc<ControllerTrace>>>,
    informers: Mutex<BTreeMap<String, Arc<InformerTrace>>>,
    stats: OnceLock<StatsFn>,
    leader: Mutex<Option<Arc<LeaderElector>>>,
    /// This replica's membership, when the manager is sharded.
    shard: Mutex<Option<Shard>>,
}

impl std::fmt::Debug for DebugPages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DebugPages")
            .field("limits", &self.inner.limits)
            .field("controllers", &self.inner.controllers.lock().len())
            .finish_non_exhaustive()
    }
}

impl Default for DebugPages {
    fn default() -> Self {
        DebugPages::new(Limits::default())
    }
}

impl DebugPages {
    /// A recorder that keeps what `limits` allow.
    pub fn new(limits: Limits) -> Self {
        DebugPages {
            inner: Arc::new(Inner {
                limits,
                controllers: Mutex::new(Vec::new()),
                informers: Mutex::new(BTreeMap::new()),
                stats: OnceLock::new(),
                leader: Mutex::new(None),
                shard: Mutex::new(None),
            }),
        }
    }

    /// The trace of a new controller `name`.
    pub(crate) fn controller(&self, name: &str) -> Arc<ControllerTrace> {
        let trace = Arc::new(ControllerTrace {
            name: name.to_owned(),
            limits: self.inner.limits,
            queue: OnceLock::new(),
            depth: Arc::new(Mutex::new(BTreeMap::new())),
            total: AtomicU64::new(0),
            state: Mutex::new(ControllerState::default()),
        });
        self.inner.controllers.lock().push(trace.clone());
        trace
    }

    /// The trace of the informer `name`, made on first use.
    pub(crate) fn informer(&self, name: &str) -> Arc<InformerTrace> {
        self.inner
            .informers
            .lock()
            .entry(name.to_owned())
            .or_default()
            .clone()
    }

    /// Where the informers' sizes come from (the manager's cache).
    pub(crate) fn set_informer_stats(&self, stats: StatsFn) {
        let _ = self.inner.stats.set(stats);
    }

    /// The elector whose lease the page shows.
    pub(crate) fn set_leader(&self, elector: Arc<LeaderElector>) {
        *self.inner.leader.lock() = Some(elector);
    }

    /// The shard membership whose ranges the page shows.
    pub(crate) fn set_shard(&self, shard: Shard) {
        *self.inner.shard.lock() = Some(shard);
    }

    /// An informer metrics provider that records when each informer heard from the server,
    /// then hands everything to `inner`.
    pub(crate) fn informer_metrics(
        &self,
        inner: Arc<dyn informer::metrics::MetricsProvider>,
    ) -> Arc<dyn informer::metrics::MetricsProvider> {
        Arc::new(HeardProvider {
            pages: self.clone(),
            inner,
        })
    }

    /// Everything the pages show, now; with `key`, that key's story too.
    pub fn snapshot(&self, key: Option<&str>) -> Snapshot {
        let now = Instant::now();
        let wall = SystemTime::now();
        let controllers = self.inner.controllers.lock().clone();
        let views = controllers
            .iter()
            .map(|c| c.view(now, wall, self.inner.limits.waiting_shown))
            .collect();
        let stats = self.inner.stats.get().map(|f| f()).unwrap_or_default();
        let informers = stats
            .into_iter()
            .map(|s| {
                let trace = self.informer(&s.name);
                trace.view(s, now)
            })
            .collect();
        let leader_election = self
            .inner
            .leader
            .lock()
            .as_ref()
            .map(|e| leader_view(e, wall));
        let sharding = self.inner.shard.lock().as_ref().map(shard_view);
        let story = key.filter(|k| !k.is_empty()).map(|key| {
            let mut events: Vec<StoryEvent> =
                controllers.iter().flat_map(|c| c.story(key)).collect();
            events.sort_by_key(|e| e.seq);
            StoryView {
                key: key.to_owned(),
                events,
            }
        });
        Snapshot {
            now: rfc3339(wall),
            controllers: views,
            informers,
            leader_election,
            sharding,
            story,
        }
    }

    /// The answer to `GET path?query` if `path` is one of the pages: the HTML page or its
    /// JSON; `None` for any other path.
    pub(crate) fn respond(
        &self,
        path: &str,
        query: Option<&str>,
    ) -> Option<(String, &'static str)> {
        let key = query.and_then(key_param);
        match path {
            PAGE_PATH => Some((
                page::html(&self.snapshot(key.as_deref())),
                "text/html; charset=utf-8",
            )),
            JSON_PATH => Some((
                serde_json::to_string(&self.snapshot(key.as_deref()))
                    .expect("a snapshot always serializes"),
                "application/json",
            )),
            _ => None,
        }
    }
}

/// The `key` parameter of a query string, percent-decoded.
fn key_param(query: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        (name == "key").then(|| percent_decode(value))
    })
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let hex = |b: u8| char::from(b).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(hi), Some(lo)) => {
                    out.push(hi * 16 + lo);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).trim().to_owned()
}

// === what the pages show ===

/// Everything `/debug/controllers.json` answers.
#[derive(Clone, Debug, Serialize)]
pub struct Snapshot {
    /// When it was taken (RFC 3339, UTC).
    pub now: String,
    /// One entry per controller, in the order they were completed.
    pub controllers: Vec<ControllerView>,
    /// One entry per informer of the cache.
    pub informers: Vec<InformerView>,
    /// The lease, when leader election is configured.
    pub leader_election: Option<LeaderView>,
    /// The shards' ranges, when the manager is sharded.
    pub sharding: Option<ShardView>,
    /// The story of the key asked for with `?key=`.
    pub story: Option<StoryView>,
}

/// One controller.
#[derive(Clone, Debug, Serialize)]
pub struct ControllerView {
    /// Its name.
    pub name: String,
    /// Keys ready to be handed to a worker (added again while in flight included).
    pub queue_depth: i64,
    /// [`queue_depth`](Self::queue_depth) by the priority each key was queued at.
    pub depth_by_priority: Vec<PriorityDepth>,
    /// Keys waiting for a delay (backoff or `requeue_after`) before they are ready.
    pub delayed: usize,
    /// Keys a worker is reconciling.
    pub in_flight: Vec<InFlight>,
    /// Keys whose last reconcile failed or asked to be requeued, soonest due first.
    pub waiting: Vec<Waiting>,
    /// How many keys wait, of which [`waiting`](Self::waiting) shows the first.
    pub waiting_total: usize,
    /// The last reconciles, newest first.
    pub recent: Vec<Reconciled>,
    /// Reconciles finished per second, over the last 10 s.
    pub reconciles_per_second: f64,
    /// Reconciles finished since the start.
    pub reconciles_total: u64,
}

/// Keys queued at one priority.
#[derive(Clone, Debug, Serialize)]
pub struct PriorityDepth {
    /// The priority (0 for live changes, -100 for an initial list or a resync).
    pub priority: i32,
    /// Keys queued at it.
    pub depth: i64,
}

/// A key being reconciled.
#[derive(Clone, Debug, Serialize)]
pub struct InFlight {
    /// `namespace/name`.
    pub key: String,
    /// The priority it was taken at.
    pub priority: i32,
    /// How long it has run.
    pub running_seconds: f64,
}

/// A key waiting for its next try.
#[derive(Clone, Debug, Serialize)]
pub struct Waiting {
    /// `namespace/name`.
    pub key: String,
    /// Why it waits: `error`, `requeue` or `requeue_after`.
    pub reason: &'static str,
    /// Failures since its last success (the rate limiter's count).
    pub failures: u32,
    /// When it is due (RFC 3339).
    pub next_retry_at: String,
    /// Seconds until then (negative once due: it waits for a worker).
    pub next_retry_in_seconds: f64,
    /// The first line of its last error.
    pub last_error: Option<String>,
}

/// A finished reconcile.
#[derive(Clone, Debug, Serialize)]
pub struct Reconciled {
    /// `namespace/name`.
    pub key: String,
    /// When it started (RFC 3339).
    pub started_at: String,
    /// How long it ran.
    pub duration_ms: f64,
    /// `success`, `error`, `requeue`, `requeue_after`, or `skipped` (not in the cache).
    pub result: String,
    /// The first line of its error.
    pub error: Option<String>,
}

/// One informer.
#[derive(Clone, Debug, Serialize)]
pub struct InformerView {
    /// Its name.
    pub name: String,
    /// `group/version` (`v1` for the core group).
    pub api_version: String,
    /// The kind.
    pub kind: String,
    /// The namespace it is limited to; `None` for all.
    pub namespace: Option<String>,
    /// Objects in its cache.
    pub objects: usize,
    /// Bytes of JSON those objects hold.
    pub bytes: usize,
    /// The resourceVersion of its last list or watch event.
    pub resource_version: String,
    /// Seconds since it last heard from the server (a list, a watch event, a bookmark).
    pub last_heard_seconds: Option<f64>,
    /// Lists after the first.
    pub relists: u64,
    /// Watches started after the first.
    pub watch_restarts: u64,
    /// Whether its first list is in the cache.
    pub synced: bool,
    /// Its last list or watch error.
    pub last_error: Option<String>,
}

/// The lease.
#[derive(Clone, Debug, Serialize)]
pub struct LeaderView {
    /// `namespace/name` of the Lease.
    pub lease: String,
    /// Its holder as last observed (empty when none).
    pub holder: String,
    /// This replica's identity.
    pub identity: String,
    /// `leader` or `candidate`.
    pub role: &'static str,
    /// Seconds since the holder acquired it.
    pub lease_age_seconds: Option<f64>,
    /// `leaseTransitions`: the leader's term.
    pub term: i32,
}

/// The shard set: this replica and the ranges each live member holds.
#[derive(Clone, Debug, Serialize)]
pub struct ShardView {
    /// The set's name.
    pub set: String,
    /// This replica's identity.
    pub identity: String,
    /// The ranges whose keys this replica reconciles now.
    pub active: String,
    /// The term of its Lease that holds them.
    pub term: u64,
    /// Every live member, by identity.
    pub members: Vec<ShardMemberView>,
}

/// One member of the shard set.
#[derive(Clone, Debug, Serialize)]
pub struct ShardMemberView {
    /// Its identity.
    pub identity: String,
    /// The ranges its Lease says it holds.
    pub ranges: String,
    /// Whether it is this replica.
    pub this: bool,
}

/// A key's story.
#[derive(Clone, Debug, Serialize)]
pub struct StoryView {
    /// The key.
    pub key: String,
    /// What happened to it, oldest first.
    pub events: Vec<StoryEvent>,
}

/// One event of a key's story.
#[derive(Clone, Debug, Serialize)]
pub struct StoryEvent {
    /// Orders events across controllers.
    #[serde(skip)]
    seq: u64,
    /// When (RFC 3339).
    pub at: String,
    /// The controller that saw it.
    pub controller: String,
    /// `watch`, `filtered`, `queued`, `started`, `reconciled`, `failed`, `retry`, `skipped`.
    pub kind: &'static str,
    /// What happened, in a line.
    pub what: String,
}

// === the controller's trace ===

/// A watch event, as a controller's handler saw it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WatchEvent<'a> {
    /// The watched object's kind.
    pub kind: &'a str,
    /// `add`, `update` or `delete` (`add (initial list)`, `update (resync)`).
    pub verb: &'a str,
    /// The watched object's key (for `owns` and `watches`, not the key it maps to).
    pub object: &'a str,
    /// Its resourceVersion.
    pub resource_version: Option<&'a str>,
    /// Whether every predicate let it through.
    pub passed: bool,
    /// Whether it was queued at low priority.
    pub low: bool,
}

/// What a retry looks like to the page.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Retry {
    /// After an error, with backoff.
    Error,
    /// `Action::requeue()`: with backoff.
    Requeue,
    /// `Action::requeue_after(d)`.
    After,
}

impl Retry {
    fn label(self) -> &'static str {
        match self {
            Retry::Error => "error",
            Retry::Requeue => "requeue",
            Retry::After => "requeue_after",
        }
    }
}

type QueueFn = Box<dyn Fn() -> usize + Send + Sync>;

/// One controller's recorder; the controller's hooks call it only when the pages are on.
pub(crate) struct ControllerTrace {
    name: String,
    limits: Limits,
    /// How many keys wait for a delay.
    queue: OnceLock<QueueFn>,
    /// Depth by priority, kept by the queue's metrics (see [`Self::queue_metrics`]).
    depth: Arc<Mutex<BTreeMap<i32, i64>>>,
    total: AtomicU64,
    state: Mutex<ControllerState>,
}

#[derive(Default)]
struct ControllerState {
    seq: u64,
    in_flight: HashMap<Key, Running>,
    waiting: HashMap<Key, Wait>,
    /// Since when each key has been ready in the queue (first add, or its due time).
    queued_since: HashMap<Key, Instant>,
    recent: VecDeque<Reconciled>,
    finished: VecDeque<Instant>,
    stories: HashMap<Key, VecDeque<StoryEvent>>,
    /// The story keys, the one heard of longest ago first.
    order: VecDeque<Key>,
}

struct Running {
    priority: i32,
    since: Instant,
    at: SystemTime,
    error: Option<String>,
}

struct Wait {
    reason: Retry,
    failures: u32,
    due: Instant,
    due_wall: SystemTime,
    error: Option<String>,
}

/// How many finished reconciles the rate keeps at most (beyond, the rate is measured over a
/// shorter window).
const RATE_SAMPLES: usize = 10_000;
const RATE_WINDOW: Duration = Duration::from_secs(10);

impl ControllerTrace {
    /// The controller's queue metrics: `inner`'s, with the depth by priority kept too.
    pub(crate) fn queue_metrics(
        &self,
        inner: Arc<dyn workqueue::MetricsProvider>,
    ) -> Arc<dyn workqueue::MetricsProvider> {
        Arc::new(DepthProvider {
            depth: self.depth.clone(),
            inner,
        })
    }

    /// Where the count of delayed keys comes from.
    pub(crate) fn set_delayed(&self, delayed: impl Fn() -> usize + Send + Sync + 'static) {
        let _ = self.queue.set(Box::new(delayed));
    }

    /// A watch event mapped to `key`.
    pub(crate) fn watch_event(&self, key: &Key, event: &WatchEvent<'_>) {
        let WatchEvent {
            kind,
            verb,
            object,
            resource_version,
            passed,
            low,
        } = *event;
        let rv = resource_version.unwrap_or("?");
        let mut state = self.state.lock();
        if passed {
            let now = Instant::now();
            let since = state.queued_since.entry(key.clone()).or_insert(now);
            *since = (*since).min(now);
            let priority = if low { " at low priority" } else { "" };
            let what = format!("{kind} {verb} {object} (rv {rv}): queued{priority}");
            self.push(&mut state, key, "watch", what);
        } else {
            let what = format!("{kind} {verb} {object} (rv {rv}): filtered out by a predicate");
            self.push(&mut state, key, "filtered", what);
        }
    }

    /// A worker took `key` at `priority`.
    pub(crate) fn started(&self, key: &Key, priority: i32) {
        let now = Instant::now();
        let mut state = self.state.lock();
        state.waiting.remove(key);
        let waited = state
            .queued_since
            .remove(key)
            .map(|s| now.saturating_duration_since(s));
        state.in_flight.insert(
            key.clone(),
            Running {
                priority,
                since: now,
                at: SystemTime::now(),
                error: None,
            },
        );
        let what = match waited {
            Some(w) => format!(
                "taken by a worker at priority {priority} after {} in the queue",
                human(w)
            ),
            None => format!("taken by a worker at priority {priority}"),
        };
        self.push(&mut state, key, "started", what);
    }

    /// `key`'s reconcile asked for another try after `delay` (`None`: never, a terminal
    /// error), its `failures`-th; `error` is its error's first line.
    pub(crate) fn retry(
        &self,
        key: &Key,
        reason: Retry,
        delay: Option<Duration>,
        failures: u32,
        error: Option<String>,
    ) {
        let mut state = self.state.lock();
        if let Some(running) = state.in_flight.get_mut(key) {
            running.error.clone_from(&error);
        }
        let Some(delay) = delay else {
            let what = format!(
                "terminal error, not retried: {}",
                error.as_deref().unwrap_or("")
            );
            self.push(&mut state, key, "failed", what);
            return;
        };
        let due = Instant::now() + delay;
        let due_wall = SystemTime::now() + delay;
        state.queued_since.insert(key.clone(), due);
        let what = match (&error, reason) {
            (Some(e), _) => format!(
                "failed ({} so far): {e}; next retry in {} at {}",
                failures,
                human(delay),
                rfc3339(due_wall)
            ),
            (None, _) => format!(
                "{}: next try in {} at {}",
                reason.label(),
                human(delay),
                rfc3339(due_wall)
            ),
        };
        self.push(&mut state, key, "retry", what);
        state.waiting.insert(
            key.clone(),
            Wait {
                reason,
                failures,
                due,
                due_wall,
                error,
            },
        );
    }

    /// `key`'s reconcile ended with `result` after `elapsed`.
    pub(crate) fn finished(&self, key: &Key, result: &str, elapsed: Duration) {
        let now = Instant::now();
        self.total.fetch_add(1, Ordering::Relaxed);
        let mut state = self.state.lock();
        let running = state.in_flight.remove(key);
        let error = running.as_ref().and_then(|r| r.error.clone());
        let started_at = running.map_or_else(|| SystemTime::now() - elapsed, |r| r.at);
        self.record(&mut state, key, started_at, elapsed, result, error.clone());
        if state.finished.len() == RATE_SAMPLES {
            state.finished.pop_front();
        }
        state.finished.push_back(now);
        let what = match &error {
            Some(e) => format!("reconciled in {}: {result}: {e}", human(elapsed)),
            None => format!("reconciled in {}: {result}", human(elapsed)),
        };
        let kind = if error.is_some() {
            "failed"
        } else {
            "reconciled"
        };
        self.push(&mut state, key, kind, what);
    }

    /// The worker is done with `key`; if no reconcile finished, it was not reconciled (its
    /// object is not in the cache, or does not decode).
    pub(crate) fn settled(&self, key: &Key) {
        let mut state = self.state.lock();
        if let Some(running) = state.in_flight.remove(key) {
            let elapsed = running.since.elapsed();
            self.record(&mut state, key, running.at, elapsed, "skipped", None);
            let what =
                "not reconciled: the object is not in the cache (deleted) or does not decode";
            self.push(&mut state, key, "skipped", what.to_owned());
        }
    }

    fn record(
        &self,
        state: &mut ControllerState,
        key: &Key,
        started_at: SystemTime,
        elapsed: Duration,
        result: &str,
        error: Option<String>,
    ) {
        if state.recent.len() == self.limits.recent {
            state.recent.pop_back();
        }
        state.recent.push_front(Reconciled {
            key: key.to_string(),
            started_at: rfc3339(started_at),
            duration_ms: elapsed.as_secs_f64() * 1000.0,
            result: result.to_owned(),
            error,
        });
    }

    /// Adds an event to `key`'s story, forgetting the oldest key past the bound.
    fn push(&self, state: &mut ControllerState, key: &Key, kind: &'static str, what: String) {
        state.seq += 1;
        let event = StoryEvent {
            seq: state.seq,
            at: rfc3339(SystemTime::now()),
            controller: self.name.clone(),
            kind,
            what,
        };
        if !state.stories.contains_key(key) {
            if state.order.len() >= self.limits.keys
                && let Some(oldest) = state.order.pop_front()
            {
                state.stories.remove(&oldest);
            }
            state.order.push_back(key.clone());
            state.stories.insert(key.clone(), VecDeque::new());
        }
        let story = state.stories.get_mut(key).expect("inserted above");
        if story.len() >= self.limits.events_per_key {
            story.pop_front();
        }
        story.push_back(event);
    }

    fn story(&self, key: &str) -> Vec<StoryEvent> {
        let state = self.state.lock();
        state
            .stories
            .get(key)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    fn view(&self, now: Instant, wall: SystemTime, shown: usize) -> ControllerView {
        let depth = self.depth.lock();
        let depth_by_priority: Vec<PriorityDepth> = depth
            .iter()
            .rev()
            .filter(|(_, d)| **d != 0)
            .map(|(p, d)| PriorityDepth {
                priority: *p,
                depth: *d,
            })
            .collect();
        drop(depth);
        let delayed = self.queue.get().map_or(0, |f| f());
        let mut state = self.state.lock();
        while state
            .finished
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) > RATE_WINDOW)
        {
            state.finished.pop_front();
        }
        let reconciles_per_second = match state.finished.front() {
            Some(first) if state.finished.len() == RATE_SAMPLES => {
                let span = now
                    .saturating_duration_since(*first)
                    .as_secs_f64()
                    .max(0.001);
                state.finished.len() as f64 / span
            }
            _ => state.finished.len() as f64 / RATE_WINDOW.as_secs_f64(),
        };
        let mut in_flight: Vec<InFlight> = state
            .in_flight
            .iter()
            .map(|(key, r)| InFlight {
                key: key.to_string(),
                priority: r.priority,
                running_seconds: now.saturating_duration_since(r.since).as_secs_f64(),
            })
            .collect();
        in_flight.sort_by(|a, b| b.running_seconds.total_cmp(&a.running_seconds));
        let mut waiting: Vec<(&Key, &Wait)> = state.waiting.iter().collect();
        waiting.sort_by_key(|(_, w)| w.due);
        let waiting_total = waiting.len();
        let waiting = waiting
            .into_iter()
            .take(shown)
            .map(|(key, w)| Waiting {
                key: key.to_string(),
                reason: w.reason.label(),
                failures: w.failures,
                next_retry_at: rfc3339(w.due_wall),
                next_retry_in_seconds: signed_seconds(w.due, now),
                last_error: w.error.clone(),
            })
            .collect();
        let _ = wall;
        ControllerView {
            name: self.name.clone(),
            queue_depth: depth_by_priority.iter().map(|d| d.depth).sum(),
            depth_by_priority,
            delayed,
            in_flight,
            waiting,
            waiting_total,
            recent: state.recent.iter().cloned().collect(),
            reconciles_per_second,
            reconciles_total: self.total.load(Ordering::Relaxed),
        }
    }
}

/// Seconds from `now` to `at`, negative if `at` has passed.
fn signed_seconds(at: Instant, now: Instant) -> f64 {
    if at >= now {
        (at - now).as_secs_f64()
    } else {
        -(now - at).as_secs_f64()
    }
}

/// The first line of an error, at most 300 characters.
pub(crate) fn error_line(error: &dyn std::fmt::Display) -> String {
    let text = error.to_string();
    let line = text.lines().next().unwrap_or("");
    match line.char_indices().nth(300) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.to_owned(),
    }
}

fn human(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms < 1000.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{:.1} s", ms / 1000.0)
    }
}

pub(crate) fn rfc3339(at: SystemTime) -> String {
    let millis = match at.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_millis()).unwrap_or(i64::MAX),
    };
    k8s_openapi::jiff::Timestamp::from_millisecond(millis)
        .map(|t| format!("{t:.3}"))
        .unwrap_or_default()
}

// === informers ===

/// What an informer's reflector did, as the page counts it.
#[derive(Default)]
pub(crate) struct InformerTrace {
    heard: Mutex<Option<Instant>>,
    lists: AtomicU64,
    watches: AtomicU64,
}

impl InformerTrace {
    /// Counts a step of the reflector.
    pub(crate) fn reflector(&self, trace: &informer::Trace) {
        match trace {
            informer::Trace::Listed { .. } => {
                self.lists.fetch_add(1, Ordering::Relaxed);
            }
            informer::Trace::WatchStarted { .. } => {
                self.watches.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
    }

    fn view(&self, s: InformerStats, now: Instant) -> InformerView {
        let heard = *self.heard.lock();
        InformerView {
            name: s.name,
            api_version: if s.group.is_empty() {
                s.version
            } else {
                format!("{}/{}", s.group, s.version)
            },
            kind: s.kind,
            namespace: s.namespace,
            objects: s.objects,
            bytes: s.bytes,
            resource_version: s.resource_version,
            last_heard_seconds: heard.map(|h| now.saturating_duration_since(h).as_secs_f64()),
            relists: self.lists.load(Ordering::Relaxed).saturating_sub(1),
            watch_restarts: self.watches.load(Ordering::Relaxed).saturating_sub(1),
            synced: s.synced,
            last_error: s.last_error,
        }
    }
}

/// The informer metrics provider with the time each informer last heard kept too.
#[derive(Debug)]
struct HeardProvider {
    pages: DebugPages,
    inner: Arc<dyn informer::metrics::MetricsProvider>,
}

struct Heard {
    trace: Arc<InformerTrace>,
    inner: Box<dyn informer::metrics::StalenessMetric>,
}

impl informer::metrics::StalenessMetric for Heard {
    fn heard(&self, at: std::time::Instant) {
        *self.trace.heard.lock() = Some(at);
        self.inner.heard(at);
    }
}

impl informer::metrics::MetricsProvider for HeardProvider {
    fn new_queued_items_metric(&self, name: &str) -> Box<dyn informer::metrics::GaugeMetric> {
        self.inner.new_queued_items_metric(name)
    }

    fn new_processing_latency_metric(
        &self,
        name: &str,
    ) -> Box<dyn informer::metrics::HistogramMetric> {
        self.inner.new_processing_latency_metric(name)
    }

    fn new_store_resource_version_metric(
        &self,
        name: &str,
    ) -> Box<dyn informer::metrics::GaugeMetric> {
        self.inner.new_store_resource_version_metric(name)
    }

    fn new_staleness_metric(&self, name: &str) -> Box<dyn informer::metrics::StalenessMetric> {
        Box::new(Heard {
            trace: self.pages.informer(name),
            inner: self.inner.new_staleness_metric(name),
        })
    }
}

// === the queue's depth by priority ===

/// The workqueue metrics provider with the depth by priority kept too.
struct DepthProvider {
    depth: Arc<Mutex<BTreeMap<i32, i64>>>,
    inner: Arc<dyn workqueue::MetricsProvider>,
}

struct Depth {
    depth: Arc<Mutex<BTreeMap<i32, i64>>>,
    inner: Box<dyn workqueue::PriorityGaugeMetric>,
}

impl workqueue::PriorityGaugeMetric for Depth {
    fn inc(&self, priority: i32) {
        *self.depth.lock().entry(priority).or_default() += 1;
        self.inner.inc(priority);
    }

    fn dec(&self, priority: i32) {
        *self.depth.lock().entry(priority).or_default() -= 1;
        self.inner.dec(priority);
    }
}

impl workqueue::MetricsProvider for DepthProvider {
    fn new_depth_metric_with_priority(
        &self,
        name: &str,
    ) -> Box<dyn workqueue::PriorityGaugeMetric> {
        Box::new(Depth {
            depth: self.depth.clone(),
            inner: self.inner.new_depth_metric_with_priority(name),
        })
    }

    fn new_adds_metric(&self, name: &str) -> Box<dyn workqueue::CounterMetric> {
        self.inner.new_adds_metric(name)
    }

    fn new_latency_metric(&self, name: &str) -> Box<dyn workqueue::HistogramMetric> {
        self.inner.new_latency_metric(name)
    }

    fn new_work_duration_metric(&self, name: &str) -> Box<dyn workqueue::HistogramMetric> {
        self.inner.new_work_duration_metric(name)
    }

    fn new_unfinished_work_seconds_metric(
        &self,
        name: &str,
    ) -> Box<dyn workqueue::SettableGaugeMetric> {
        self.inner.new_unfinished_work_seconds_metric(name)
    }

    fn new_longest_running_processor_seconds_metric(
        &self,
        name: &str,
    ) -> Box<dyn workqueue::SettableGaugeMetric> {
        self.inner
            .new_longest_running_processor_seconds_metric(name)
    }

    fn new_retries_metric(&self, name: &str) -> Box<dyn workqueue::CounterMetric> {
        self.inner.new_retries_metric(name)
    }
}

// === leader election ===

fn leader_view(elector: &LeaderElector, wall: SystemTime) -> LeaderView {
    let config = elector.config();
    let leading = *elector.leading().borrow();
    LeaderView {
        lease: format!("{}/{}", config.namespace, config.lease_name),
        holder: elector.leader(),
        identity: elector.identity().to_owned(),
        role: if leading { "leader" } else { "candidate" },
        lease_age_seconds: elector
            .acquired_at()
            .and_then(|at| wall.duration_since(at).ok())
            .map(|d| d.as_secs_f64()),
        term: elector.term(),
    }
}

// === sharding ===

fn shard_view(shard: &Shard) -> ShardView {
    let holding = shard.holding().borrow().clone();
    ShardView {
        set: shard.config().set.clone(),
        identity: shard.identity().to_owned(),
        active: holding.ranges.to_string(),
        term: holding.term,
        members: shard
            .members()
            .into_iter()
            .map(|m| ShardMemberView {
                identity: m.identity,
                ranges: m.ranges.to_string(),
                this: m.this,
            })
            .collect(),
    }
}

/// Escapes `text` for HTML text and attribute values.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Formats `value` with one decimal.
pub(crate) fn one_decimal(value: f64) -> String {
    let mut s = String::new();
    let _ = write!(s, "{value:.1}");
    s
}

#[cfg(test)]
mod tests;
