//! An event recorder on events.k8s.io/v1: what a controller tells users about the objects it
//! manages, shown by `kubectl events` and `kubectl describe`.
//!
//! A [`Recorder`] belongs to one controller instance (`reportingController`,
//! `reportingInstance`). Each [`Recorder::event`] says that the controller took an `action`
//! on the `regarding` object, for a `reason`, with a human-readable `note`. A repeat of the
//! same event (same object, type, reason, action and note) within six minutes of the last
//! one does not make a new Event object: it joins the first one's series, so a controller
//! stuck in a failing loop leaves one Event with a count, not thousands of objects. The
//! first repeat is written at once (`series.count` 2); later ones are counted in memory and
//! written at most once per [`SERIES_FLUSH_INTERVAL`], so a busy series costs the API server
//! one write per interval, not one per occurrence. [`Recorder::flush`] writes what is
//! pending now.
//!
//! Recording must never fail a reconcile. [`Recorder::event`] returns the error for callers
//! that want it; [`Recorder::publish`] sends from a spawned task and only logs a failure.
//!
//! ```no_run
//! use controller_runtime::client::{Api, Client};
//! use controller_runtime::runtime::events::{EventType, Recorder, object_reference};
//! use k8s_openapi::api::apps::v1::Deployment;
//!
//! # async fn run(client: Client) -> Result<(), Box<dyn std::error::Error>> {
//! let recorder = Recorder::new(client.clone(), "memcached-controller", "memcached-controller-0")?;
//! let deployment = Api::<Deployment>::namespaced(client, "shop").get("web").await?;
//! recorder
//!     .event(
//!         &object_reference(&deployment),
//!         EventType::Normal,
//!         "Scaled",
//!         "Scale",
//!         "scaled to 3 replicas",
//!     )
//!     .await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Implementation Details
//!
//! client-go's events broadcaster (`tools/events`) keeps, per isomorphic event, the Event it
//! created; the first repeat sets `series` (count 2) and patches it, later repeats only
//! update its cache, and a background loop refreshes live series every thirty minutes and
//! ends those idle for six. This recorder keeps the same cache and the same first two
//! writes, and needs no background loop: the first repeat that finds the series written
//! less than [`SERIES_FLUSH_INTERVAL`] ago spawns one task that sleeps until the interval
//! is up and writes the count reached by then; a series ends when a repeat finds it idle
//! for six minutes or more.
//!
//! The cache maps each isomorphic key to a slot holding the series' Event name, namespace,
//! count, the count last written, and its last observation. A slot's async mutex is held across its write, so the
//! writes of one series happen one at a time and in order, while other series proceed.
//! The cache holds at most [`SERIES_CACHE_CAPACITY`] slots: when full, the least recently
//! used quarter is dropped, and a repeat of a dropped event starts a new Event object.
//!
//! A patch that finds the Event gone (deleted, or expired by the server's event TTL)
//! starts a new series with a new object.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::{Metadata, Resource};
use parking_lot::Mutex;
use serde_json::json;
use tokio::time::Instant;

use crate::client::{self, Api, Client, Patch, PatchParams, PostParams};

/// A repeat this soon after the last occurrence joins its series; a later one starts a new
/// Event (client-go's `finishTime`).
pub const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);

/// A series' repeats after the first are written at most this often (the first repeat is
/// written at once); the count in between waits in memory.
pub const SERIES_FLUSH_INTERVAL: Duration = Duration::from_secs(30);

/// How many series the recorder remembers at most.
pub const SERIES_CACHE_CAPACITY: usize = 4096;

/// The longest note the API accepts, in bytes; longer notes are cut to fit, ending in `...`.
pub const NOTE_LIMIT: usize = 1024;

/// The longest reason, action or reporting instance the API accepts, in bytes.
const FIELD_LIMIT: usize = 128;

/// The longest Event name prefix: 253 for the name, less `.` and 16 hex digits.
const NAME_PREFIX_LIMIT: usize = 253 - 17;

/// `Result` with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why an event could not be recorded.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API server refused the Event or could not be reached.
    #[error(transparent)]
    Client(#[from] client::Error),

    /// A field of the event breaks the API's rules; nothing was sent.
    #[error("invalid event {field}: {problem}")]
    Invalid {
        /// The field: `reason`, `action`, `regarding.name`, `reportingController`, …
        field: &'static str,
        /// What is wrong with it.
        problem: String,
    },
}

/// Whether an event is routine or calls for attention.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventType {
    /// Things went as intended.
    Normal,
    /// Something may need a person's attention.
    Warning,
}

impl EventType {
    /// `Normal` or `Warning`, as the API spells them.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A reference to `object` for an event's `regarding`: its apiVersion, kind, name,
/// namespace, uid and resourceVersion.
pub fn object_reference<K>(object: &K) -> ObjectReference
where
    K: Resource + Metadata<Ty = ObjectMeta>,
{
    let meta = object.metadata();
    ObjectReference {
        api_version: Some(K::API_VERSION.to_owned()),
        kind: Some(K::KIND.to_owned()),
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        uid: meta.uid.clone(),
        resource_version: meta.resource_version.clone(),
        field_path: None,
    }
}

/// A reporting instance for `controller` on this host, as client-go names it:
/// `<controller>-<hostname>` (the pod's name, in a cluster), cut to the API's 128 bytes.
pub fn default_instance(controller: &str) -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".to_owned());
    let mut instance = format!("{controller}-{host}");
    truncate_at_char(&mut instance, FIELD_LIMIT);
    instance
}

// === Recorder ===

/// Records events on events.k8s.io/v1 for one controller instance, folding repeats into
/// series. Cheap to clone; clones share the series cache.
#[derive(Clone)]
pub struct Recorder {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    reporting_controller: String,
    reporting_instance: String,
    flush_interval: Duration,
    series: Mutex<SeriesCache>,
}

impl fmt::Debug for Recorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recorder")
            .field("reporting_controller", &self.inner.reporting_controller)
            .field("reporting_instance", &self.inner.reporting_instance)
            .finish_non_exhaustive()
    }
}

impl Recorder {
    /// A recorder writing through `client` as `reporting_controller` (a qualified name such
    /// as `memcached-controller` or `example.com/memcached`) and `reporting_instance` (this
    /// replica, e.g. the pod name; see [`default_instance`]).
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] if the controller is not a qualified name or the instance is
    /// empty or longer than 128 bytes.
    pub fn new(
        client: Client,
        reporting_controller: &str,
        reporting_instance: &str,
    ) -> Result<Recorder> {
        if let Err(problem) = check_qualified_name(reporting_controller) {
            return Err(Error::Invalid {
                field: "reportingController",
                problem,
            });
        }
        check_field("reportingInstance", reporting_instance)?;
        Ok(Recorder {
            inner: Arc::new(Inner {
                client,
                reporting_controller: reporting_controller.to_owned(),
                reporting_instance: reporting_instance.to_owned(),
                flush_interval: SERIES_FLUSH_INTERVAL,
                series: Mutex::new(SeriesCache::new(SERIES_CACHE_CAPACITY)),
            }),
        })
    }

    /// The same recorder writing a series' repeats at most once per `interval` instead of
    /// [`SERIES_FLUSH_INTERVAL`]; `Duration::ZERO` writes every repeat at once. Call it
    /// before recording: the returned recorder starts with no series.
    pub fn with_flush_interval(self, interval: Duration) -> Recorder {
        let inner = &self.inner;
        Recorder {
            inner: Arc::new(Inner {
                client: inner.client.clone(),
                reporting_controller: inner.reporting_controller.clone(),
                reporting_instance: inner.reporting_instance.clone(),
                flush_interval: interval,
                series: Mutex::new(SeriesCache::new(SERIES_CACHE_CAPACITY)),
            }),
        }
    }

    /// The `reportingController` of every event.
    pub fn reporting_controller(&self) -> &str {
        &self.inner.reporting_controller
    }

    /// The `reportingInstance` of every event.
    pub fn reporting_instance(&self) -> &str {
        &self.inner.reporting_instance
    }

    /// Records that this controller took `action` (e.g. `Scale`) on `regarding` for `reason`
    /// (e.g. `Scaled`, UpperCamelCase by convention), explained by `note` (cut to 1 KiB).
    ///
    /// The Event goes to `regarding`'s namespace, or `default` for a cluster-scoped object.
    /// A repeat within [`SERIES_WINDOW`] of the last occurrence joins the first Event's
    /// series instead of creating another; its count is written at once for the first
    /// repeat, and at most once per flush interval after that (see the module docs).
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] before any request if `regarding` has no name or `reason` or
    /// `action` is empty or longer than 128 bytes; [`Error::Client`] if the write fails. A
    /// deferred write's failure is logged at `warn`.
    ///
    /// # Cancel safety
    ///
    /// Cancelling may leave the write done or not; the series stays consistent (a repeat
    /// after a lost create starts a new Event, a lost patch is made good by the next one).
    pub async fn event(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: impl Into<String>,
    ) -> Result<()> {
        let name = regarding.name.as_deref().unwrap_or("");
        if name.is_empty() {
            return Err(Error::Invalid {
                field: "regarding.name",
                problem: "the object has no name".into(),
            });
        }
        check_field("reason", reason)?;
        check_field("action", action)?;
        let mut note = note.into();
        truncate_note(&mut note);
        let namespace = regarding
            .namespace
            .as_deref()
            .filter(|ns| !ns.is_empty())
            .unwrap_or("default")
            .to_owned();

        let key = SeriesKey {
            regarding: regarding_key(regarding),
            type_,
            reason: reason.to_owned(),
            action: action.to_owned(),
            note: note.clone(),
        };
        let slot = self.inner.series.lock().slot(key);
        let mut series = slot.lock().await;
        let events: Api<Event> = Api::namespaced(self.inner.client.clone(), &namespace);

        let now = Instant::now();
        if let Some(s) = series.as_mut().filter(|s| s.continues_at(now)) {
            s.count += 1;
            s.last_observed = now;
            s.observed_at = micro_time_now();
            let due = s.last_write + self.inner.flush_interval;
            if s.written >= 2 && now < due {
                if !s.flush_pending {
                    s.flush_pending = true;
                    self.flush_at(slot.clone(), due);
                }
                return Ok(());
            }
            match write_series(&events, s).await {
                Ok(()) => return Ok(()),
                // Gone (deleted, or past the server's TTL): start a new series below.
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.into()),
            }
        }
        *series = None;

        let event_name = event_name(name, unique_stamp());
        let event = Event {
            metadata: ObjectMeta {
                name: Some(event_name.clone()),
                namespace: Some(namespace),
                ..ObjectMeta::default()
            },
            event_time: Some(micro_time_now()),
            type_: Some(type_.as_str().to_owned()),
            reason: Some(reason.to_owned()),
            action: Some(action.to_owned()),
            note: (!note.is_empty()).then_some(note),
            regarding: Some(regarding.clone()),
            reporting_controller: Some(self.inner.reporting_controller.clone()),
            reporting_instance: Some(self.inner.reporting_instance.clone()),
            ..Event::default()
        };
        events.create(&PostParams::default(), &event).await?;
        *series = Some(Series {
            name: event_name,
            namespace: events.namespace().unwrap_or_default().to_owned(),
            count: 1,
            written: 1,
            last_observed: now,
            observed_at: micro_time_now(),
            last_write: now,
            flush_pending: false,
        });
        Ok(())
    }

    /// Writes every series' count that is still waiting for its flush interval, now: for a
    /// controller about to stop, or a test that reads the counts.
    ///
    /// # Errors
    ///
    /// The first write that failed; the others are still tried.
    pub async fn flush(&self) -> Result<()> {
        let slots: Vec<Slot> = self.inner.series.lock().slots();
        let mut first_error = None;
        for slot in slots {
            let mut series = slot.lock().await;
            let Some(s) = series.as_mut().filter(|s| s.count > s.written) else {
                continue;
            };
            let events: Api<Event> = Api::namespaced(self.inner.client.clone(), &s.namespace);
            match write_series(&events, s).await {
                Ok(()) => {}
                Err(e) if e.is_not_found() => *series = None,
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), |e| Err(e.into()))
    }

    /// Spawns the task that writes `slot`'s series count at `due`.
    fn flush_at(&self, slot: Slot, due: Instant) {
        let client = self.inner.client.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(due).await;
            let mut series = slot.lock().await;
            let Some(s) = series.as_mut() else { return };
            s.flush_pending = false;
            if s.count <= s.written {
                return;
            }
            let events: Api<Event> = Api::namespaced(client, &s.namespace);
            match write_series(&events, s).await {
                Ok(()) => {}
                // Gone: the next occurrence starts a new series.
                Err(e) if e.is_not_found() => *series = None,
                Err(error) => tracing::warn!(
                    %error,
                    event = s.name,
                    count = s.count,
                    "could not write an event series' count"
                ),
            }
        });
    }

    /// Records an event as [`Recorder::event`] does, from a spawned task, logging a failure
    /// at `warn` instead of returning it: for reconcilers, which must not fail because an
    /// event could not be written. Outside a tokio runtime the event is logged and dropped.
    pub fn publish(
        &self,
        regarding: ObjectReference,
        type_: EventType,
        reason: impl Into<String>,
        action: impl Into<String>,
        note: impl Into<String>,
    ) {
        let (reason, action, note) = (reason.into(), action.into(), note.into());
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(
                reason,
                action,
                note,
                "event dropped: no tokio runtime to send it from"
            );
            return;
        };
        let recorder = self.clone();
        runtime.spawn(async move {
            if let Err(error) = recorder
                .event(&regarding, type_, &reason, &action, note)
                .await
            {
                tracing::warn!(
                    %error,
                    kind = regarding.kind.as_deref().unwrap_or(""),
                    namespace = regarding.namespace.as_deref().unwrap_or(""),
                    name = regarding.name.as_deref().unwrap_or(""),
                    reason,
                    action,
                    "could not record an event"
                );
            }
        });
    }
}

/// Writes `s`'s count and last observation to its Event.
async fn write_series(events: &Api<Event>, s: &mut Series) -> client::Result<()> {
    let patch = json!({
        "series": { "count": s.count, "lastObservedTime": s.observed_at }
    });
    events
        .patch(&s.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    s.written = s.count;
    s.last_write = Instant::now();
    Ok(())
}

// === series cache ===

/// What makes two events the same, so that the second joins the first's series.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct SeriesKey {
    /// The regarding object's uid, or its apiVersion, kind, namespace and name without one.
    regarding: String,
    type_: EventType,
    reason: String,
    action: String,
    note: String,
}

fn regarding_key(r: &ObjectReference) -> String {
    match r.uid.as_deref() {
        Some(uid) if !uid.is_empty() => format!("uid:{uid}"),
        _ => format!(
            "{}/{}/{}/{}",
            r.api_version.as_deref().unwrap_or(""),
            r.kind.as_deref().unwrap_or(""),
            r.namespace.as_deref().unwrap_or(""),
            r.name.as_deref().unwrap_or("")
        ),
    }
}

/// The Event written for a series, and how far the series has got.
#[derive(Debug)]
struct Series {
    /// The Event's name.
    name: String,
    /// The Event's namespace.
    namespace: String,
    /// Occurrences so far; the Event's `series.count` once above 1.
    count: i32,
    /// The count the server has. Invariant: `written <= count`.
    written: i32,
    /// When the last occurrence was recorded.
    last_observed: Instant,
    /// The same, on the wall clock, for `series.lastObservedTime`.
    observed_at: MicroTime,
    /// When the count was last written.
    last_write: Instant,
    /// Whether a task will write the count when the flush interval is up.
    flush_pending: bool,
}

impl Series {
    /// Whether an occurrence at `now` joins this series.
    fn continues_at(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.last_observed) < SERIES_WINDOW
    }
}

/// One key's series, locked across its writes.
type Slot = Arc<tokio::sync::Mutex<Option<Series>>>;

/// The remembered series, at most `capacity` of them, least recently used dropped first.
struct SeriesCache {
    /// Each key's slot and the tick it was last used at. Invariant: `len() <= capacity`.
    slots: HashMap<SeriesKey, (Slot, u64)>,
    capacity: usize,
    /// Increases with every use; orders the slots by recency.
    tick: u64,
}

impl SeriesCache {
    fn new(capacity: usize) -> Self {
        SeriesCache {
            slots: HashMap::new(),
            capacity: capacity.max(1),
            tick: 0,
        }
    }

    /// The slot for `key`, made if new, marked as just used.
    fn slot(&mut self, key: SeriesKey) -> Slot {
        self.tick += 1;
        let tick = self.tick;
        if let Some((slot, used)) = self.slots.get_mut(&key) {
            *used = tick;
            return slot.clone();
        }
        if self.slots.len() >= self.capacity {
            self.evict();
        }
        let slot = Slot::default();
        self.slots.insert(key, (slot.clone(), tick));
        slot
    }

    /// Every remembered slot.
    fn slots(&self) -> Vec<Slot> {
        self.slots.values().map(|(slot, _)| slot.clone()).collect()
    }

    /// Drops the least recently used quarter (at least one slot). Ticks are distinct, so
    /// the cut is exact.
    fn evict(&mut self) {
        let drop = (self.slots.len() / 4).max(1);
        let mut ticks: Vec<u64> = self.slots.values().map(|(_, t)| *t).collect();
        let (_, cut, _) = ticks.select_nth_unstable(drop - 1);
        let cut = *cut;
        self.slots.retain(|_, (_, t)| *t > cut);
    }
}

// === fields ===

/// The API's rule for reason, action and reporting instance: present, at most 128 bytes.
fn check_field(field: &'static str, value: &str) -> Result<()> {
    if value.is_empty() {
        return Err(Error::Invalid {
            field,
            problem: "must not be empty".into(),
        });
    }
    if value.len() > FIELD_LIMIT {
        return Err(Error::Invalid {
            field,
            problem: format!(
                "is {} bytes; at most {FIELD_LIMIT} are allowed",
                value.len()
            ),
        });
    }
    Ok(())
}

/// A Kubernetes qualified name: `name` or `prefix/name`, the prefix a DNS subdomain, the name
/// at most 63 characters of `[A-Za-z0-9_.-]` starting and ending alphanumeric.
fn check_qualified_name(value: &str) -> std::result::Result<(), String> {
    let (prefix, name) = match value.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, value),
    };
    if let Some(prefix) = prefix
        && !is_dns_subdomain(prefix)
    {
        return Err(format!("{value:?}: the prefix must be a DNS subdomain"));
    }
    let ends_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    let ok = !name.is_empty()
        && name.len() <= 63
        && ends_ok(name.chars().next())
        && ends_ok(name.chars().last())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{value:?} is not a qualified name (at most 63 of [A-Za-z0-9_.-], alphanumeric at \
             both ends, with an optional DNS-subdomain prefix and '/')"
        ))
    }
}

fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        })
}

/// Cuts `note` to [`NOTE_LIMIT`] bytes at a character boundary, marking the cut with `...`.
fn truncate_note(note: &mut String) {
    if note.len() > NOTE_LIMIT {
        truncate_at_char(note, NOTE_LIMIT - 3);
        note.push_str("...");
    }
}

fn truncate_at_char(s: &mut String, max: usize) {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
}

/// `<prefix>.<stamp as 16 hex digits>`, the prefix being the regarding object's name made
/// into a DNS subdomain of at most 236 bytes (most names already are one).
fn event_name(regarding_name: &str, stamp: u64) -> String {
    let mut prefix = regarding_name
        .split('.')
        .map(|label| {
            label
                .chars()
                .map(|c| {
                    let c = c.to_ascii_lowercase();
                    if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' {
                        c
                    } else {
                        '-'
                    }
                })
                .collect::<String>()
                .trim_matches('-')
                .to_owned()
        })
        .filter(|label| !label.is_empty())
        .collect::<Vec<_>>()
        .join(".");
    if prefix.len() > NAME_PREFIX_LIMIT {
        prefix.truncate(NAME_PREFIX_LIMIT);
        prefix.truncate(prefix.trim_end_matches(['-', '.']).len());
    }
    if prefix.is_empty() {
        prefix.push_str("event");
    }
    format!("{prefix}.{stamp:016x}")
}

/// Nanoseconds since the epoch, made unique within the process: never the same value twice
/// (client-go uses the bare time, which two events in one nanosecond would share).
fn unique_stamp() -> u64 {
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    let mut last = LAST.load(Ordering::Relaxed);
    loop {
        let next = now.max(last + 1);
        match LAST.compare_exchange_weak(last, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return next,
            Err(seen) => last = seen,
        }
    }
}

/// The wall-clock time now, as the API's MicroTime.
fn micro_time_now() -> MicroTime {
    let micros = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
    MicroTime(k8s_openapi::jiff::Timestamp::from_microsecond(micros).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: usize) -> SeriesKey {
        SeriesKey {
            regarding: format!("uid:{n}"),
            type_: EventType::Normal,
            reason: "Scaled".into(),
            action: "Scale".into(),
            note: String::new(),
        }
    }

    #[test]
    fn event_names_are_the_object_name_and_sixteen_hex_digits() {
        assert_eq!(event_name("web", 0x1234), "web.0000000000001234");
        assert_eq!(
            event_name("web-1.example", 0x187a_0c3d_9e00_0000),
            "web-1.example.187a0c3d9e000000"
        );
    }

    #[test]
    fn event_names_are_valid_for_names_that_are_not_subdomains() {
        assert_eq!(
            event_name("system:Controller:x", 1),
            "system-controller-x.0000000000000001"
        );
        assert_eq!(event_name("-a..b-", 1), "a.b.0000000000000001");
        assert_eq!(event_name("::", 1), "event.0000000000000001");
        let long = event_name(&format!("{}-x", "a".repeat(235)), 1);
        assert_eq!(long.len(), 235 + 17);
        assert!(long.starts_with(&"a".repeat(235)) && !long.contains("-."));
    }

    #[test]
    fn stamps_never_repeat() {
        let stamps: Vec<u64> = (0..10_000).map(|_| unique_stamp()).collect();
        assert!(stamps.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn notes_are_cut_to_one_kibibyte_at_a_character_boundary() {
        let mut short = "x".repeat(NOTE_LIMIT);
        truncate_note(&mut short);
        assert_eq!(short.len(), NOTE_LIMIT);
        let mut long = "é".repeat(NOTE_LIMIT); // two bytes each
        truncate_note(&mut long);
        assert!(long.len() <= NOTE_LIMIT, "{}", long.len());
        assert!(long.ends_with("é..."));
    }

    #[test]
    fn reason_and_action_must_be_present_and_short() {
        assert!(check_field("reason", "Scaled").is_ok());
        let err = check_field("reason", "").unwrap_err();
        assert_eq!(err.to_string(), "invalid event reason: must not be empty");
        let err = check_field("action", &"a".repeat(129)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid event action: is 129 bytes; at most 128 are allowed"
        );
    }

    #[test]
    fn reporting_controller_must_be_a_qualified_name() {
        for good in [
            "memcached-controller",
            "example.com/memcached",
            "Memcached_Controller.v1",
        ] {
            assert!(check_qualified_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "-x",
            "x-",
            "a b",
            "Example.com/x",
            "/x",
            "example.com/",
            &"a".repeat(64),
        ] {
            assert!(check_qualified_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn default_instance_fits_the_api_limit() {
        let instance = default_instance(&"c".repeat(200));
        assert_eq!(instance.len(), FIELD_LIMIT);
        assert!(default_instance("ctl").starts_with("ctl-"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_series_continues_for_six_minutes_after_its_last_occurrence() {
        let series = Series {
            name: "web.1".into(),
            namespace: "shop".into(),
            count: 3,
            written: 3,
            last_observed: Instant::now(),
            observed_at: micro_time_now(),
            last_write: Instant::now(),
            flush_pending: false,
        };
        tokio::time::advance(SERIES_WINDOW - Duration::from_millis(1)).await;
        assert!(series.continues_at(Instant::now()));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(!series.continues_at(Instant::now()));
    }

    #[test]
    fn the_same_key_gets_the_same_slot() {
        let mut cache = SeriesCache::new(8);
        let a = cache.slot(key(1));
        let b = cache.slot(key(1));
        assert!(Arc::ptr_eq(&a, &b));
        let other = SeriesKey {
            note: "different".into(),
            ..key(1)
        };
        assert!(!Arc::ptr_eq(&a, &cache.slot(other)));
    }

    #[test]
    fn the_cache_is_bounded_and_keeps_recently_used_series() {
        let mut cache = SeriesCache::new(100);
        let first = cache.slot(key(0));
        for n in 1..1000 {
            cache.slot(key(n));
            // Key 0 stays in use.
            assert!(Arc::ptr_eq(&first, &cache.slot(key(0))));
            assert!(cache.slots.len() <= 100);
        }
        assert!(cache.slots.contains_key(&key(999)));
        assert!(!cache.slots.contains_key(&key(1)));
    }

    #[test]
    fn regarding_key_prefers_the_uid() {
        let mut r = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("ConfigMap".into()),
            namespace: Some("shop".into()),
            name: Some("web".into()),
            uid: Some("u-1".into()),
            resource_version: Some("7".into()),
            field_path: None,
        };
        assert_eq!(regarding_key(&r), "uid:u-1");
        r.uid = None;
        assert_eq!(regarding_key(&r), "v1/ConfigMap/shop/web");
    }

    #[test]
    fn micro_time_serializes_with_microseconds() {
        let json = serde_json::to_string(&micro_time_now()).unwrap();
        // "2025-01-02T03:04:05.123456Z"
        assert_eq!(json.len(), 29, "{json}");
        assert!(json.ends_with("Z\""));
    }
}
