//! The reflector: lists a collection, then watches it, feeding every change into a store,
//! and lists again whenever the watch cannot go on, with client-go's rules throughout.
//!
//! # Implementation Details
//!
//! The reflector is a state machine, [`State`], moved by one function, `step`:
//!
//! ```text
//!                      ┌─────────── Start ───────────┐
//!            WatchList │ on                      off │
//!                      ▼                             ▼
//!  ┌─── at once ─── StreamList ── other errors ──▶ List ── error ──▶ Wait ─▶ Start
//!  │ 410, too large,   ▲ │ │ 429, refused:             │ 410 / too large: once more
//!  │ closed early      │ │ └─ Wait, then StreamList    │ at "", at once
//!  └───────────────────┘ │ initial-events-end          │ Replace
//!                        │ bookmark: Replace           │
//!                        ▼                             ▼
//!                     Watch (the same stream)       Watch (a new one) ◀──┐
//!                        └───────────────┬─────────────┘                 │
//!                                        │ closed normally: re-watch ────┘
//!                                        │ 429, refused: Wait, then re-watch
//!                                        └ 410, very short, errors: Wait, then Start
//! ```
//!
//! The resourceVersion rules ([`Reflector::relist_resource_version`]): the first LIST asks
//! for `"0"` (any cached state) with a limit of 500; a relist asks for the last version seen,
//! without a limit, so the watch cache can answer; after a LIST answered 410 or "too large
//! resource version", a LIST at once asks for `""`, a consistent read, with the page size of
//! the list it retries, and lists go on asking for `""` until one succeeds. The pager follows
//! continue tokens with no version, and if a token has expired it lists once more in full.
//! Once a `"0"` list came back in pages (a full list after an expired token included), every
//! later list pages too: no watch cache serves the collection. A watch from `""` or `"0"`
//! (after a list that returned no version) starts with synthetic ADDED events in no version
//! order: they leave the version alone until an event of another kind arrives, after which
//! every event, ADDED included, moves it on.
//!
//! Every wait between attempts comes from [`Backoff`]: 0.8 s doubling to 30 s, jittered,
//! reset after two minutes, unless [`ReflectorOptions::backoff`] says otherwise.
//!
//! A *watch phase* runs from a completed list (or streaming list) to the decision to list
//! again. Its resync timer, client-go's resync goroutine, fires every
//! [`ReflectorOptions::resync_period`] whatever the phase is awaiting: a watch request, an
//! event, or the backoff before a re-watch. Each such await is polled to its end next to the
//! timer, never dropped for it. The timer stops when the reflector relists and restarts,
//! a full period later, when that list completes.
//!
//! The watch error handler ([`Reflector::on_watch_error`]) hears what client-go's
//! `ListAndWatch` returns to its handler: a LIST that failed (after any retry from scratch)
//! and a watch request that failed other than with 429 or a refused connection. What the
//! reflector gets over by itself is only logged, as in client-go: a streaming list that falls
//! back to LIST, and every end of a running watch (410, a very short watch, a broken stream,
//! an error event).
//!
//! One deliberate difference: an [`ErrorKind::Stream`] inside a running watch relists.
//! client-go relists after an undecodable frame too, but its decoder reports a connection
//! that broke off as a normal close, after which it only watches again. The kind covers both
//! cases, so the reflector takes the safe one; the relist asks for the last version, which
//! the watch cache serves.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use crate::backoff::{Backoff, BackoffOptions, Jitter};
use crate::lister_watcher::{
    Error, ErrorKind, EventStream, ListOptions, ListerWatcher, Result, WatchEvent, WatchOptions,
};
use crate::object::{Key, Object, key_of};

/// Where the reflector writes what it learns. The DeltaFIFO implements it.
pub trait ReflectorStore<K>: Send + Sync {
    /// An object was added.
    fn add(&self, object: K);
    /// An object changed.
    fn update(&self, object: K);
    /// An object was deleted; this is its last known state.
    fn delete(&self, object: K);
    /// The whole collection is `objects`, as of `resource_version`.
    fn replace(&self, objects: Vec<K>, resource_version: &str);
    /// Prepares an object that the reflector holds until a later
    /// [`replace_prepared`](Self::replace_prepared) (an event of a streaming list, an item
    /// of a LIST page), as it arrives: the store's transform. A list of 100,000 objects is
    /// then held as the cache will keep it (managedFields dropped, say), not as the server
    /// sent it, which is most of the peak of an initial sync. Nothing by default.
    fn prepare(&self, object: &mut K) {
        let _ = object;
    }
    /// [`replace`](Self::replace), with objects that went through
    /// [`prepare`](Self::prepare): a store that transforms in `prepare` must not transform
    /// them again. By default `replace`, which is right for a store whose `prepare` does
    /// nothing.
    fn replace_prepared(&self, objects: Vec<K>, resource_version: &str) {
        self.replace(objects, resource_version);
    }
    /// The resync period passed: send every known object to its handlers again.
    fn resync(&self);
    /// A bookmark reached `resource_version`. Nothing changed.
    fn bookmark(&self, resource_version: &str) {
        let _ = resource_version;
    }
}

/// How a reflector behaves.
#[derive(Clone, Debug)]
pub struct ReflectorOptions {
    /// A name for logs and traces, e.g. `configmaps`.
    pub name: String,
    /// Call [`ReflectorStore::resync`] this often during each watch phase; `None` never.
    /// As in client-go, the timer starts when a list completes and runs until the reflector
    /// decides to list again, through watch requests, their backoffs and re-watches; it is
    /// stopped during a relist and the backoff before it.
    pub resync_period: Option<Duration>,
    /// Items per LIST page; `None` follows client-go's rule: 500 for `"0"` and `""` lists,
    /// no limit for lists at a version (so the watch cache can serve them) nor for their
    /// retry from scratch, and 500 for every list once the server paged a `"0"` list.
    pub page_size: Option<u32>,
    /// Use streaming lists (WatchList, `sendInitialEvents`) and fall back to LIST when the
    /// server refuses them. On by default.
    pub watch_list: bool,
    /// Watches ask the server to end them after a random time between this and twice this,
    /// so that watches do not all end together. 5 minutes by default.
    ///
    /// As in client-go, a value below 5 minutes is raised to 5 minutes: only longer
    /// timeouts are honoured, so no reflector makes the control plane serve re-watches more
    /// often than client-go's do. The timeout is a request to the server, never a deadline
    /// the reflector keeps; a test that needs a watch to end sooner ends it from its
    /// [`ListerWatcher`] (a scripted stream that closes, a proxy that cuts the connection).
    pub min_watch_timeout: Duration,
    /// The waits between attempts: before a list-and-watch round after a failed one, and
    /// before a watch request again after 429 or a refused connection (one sequence for
    /// both, as client-go's reflector shares its backoff manager). client-go's 800 ms
    /// doubling to 30 s, fully jittered, reset after 2 minutes, by default.
    pub backoff: BackoffOptions,
}

impl Default for ReflectorOptions {
    fn default() -> Self {
        ReflectorOptions {
            name: "reflector".into(),
            resync_period: None,
            page_size: None,
            watch_list: true,
            min_watch_timeout: DEFAULT_MIN_WATCH_TIMEOUT,
            backoff: BackoffOptions::default(),
        }
    }
}

/// Why a watch ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchEnd {
    /// The server closed it, normally after its timeout: watch again from the last version.
    Closed,
    /// It ended within a second with no events: something is wrong; list again.
    TooShort,
    /// The version it watched from is gone (410): list again.
    Gone,
    /// The server asked to slow down: wait, then watch again.
    TooManyRequests,
    /// Any other error: list again.
    Error(String),
}

/// What the reflector is doing, for tracing tools and tests.
#[derive(Clone, Debug, PartialEq)]
pub enum Trace {
    /// A LIST request for one page.
    ListPage {
        /// The resourceVersion asked for; `None` is a consistent read.
        resource_version: Option<String>,
        /// The page size asked for.
        limit: Option<u32>,
        /// Whether this page continues a previous one.
        continued: bool,
        /// Items returned.
        items: usize,
    },
    /// A full list completed and replaced the store.
    Listed {
        /// Items in the store now.
        items: usize,
        /// The list's resourceVersion.
        resource_version: String,
    },
    /// A LIST failed.
    ListFailed {
        /// The error.
        error: String,
        /// The next LIST asks for a consistent read (`""`).
        from_scratch: bool,
    },
    /// A continue token expired; listing once more in full.
    FullListFallback,
    /// A streaming list (WatchList) started.
    StreamListStarted {
        /// The resourceVersion asked for; `None` for the latest.
        resource_version: Option<String>,
    },
    /// A streaming list failed; `fallback` says the next attempt is a plain LIST.
    StreamListFailed {
        /// The error.
        error: String,
        /// Whether the reflector falls back to LIST.
        fallback: bool,
    },
    /// A watch started.
    WatchStarted {
        /// The resourceVersion it watches from.
        resource_version: String,
        /// The server-side timeout asked for.
        timeout_seconds: u32,
    },
    /// A bookmark moved the version on.
    Bookmark {
        /// The new resourceVersion.
        resource_version: String,
    },
    /// A watch ended.
    WatchEnded {
        /// Events it delivered.
        events: usize,
        /// Why it ended.
        reason: WatchEnd,
    },
    /// The store was asked to resync.
    Resync,
    /// Waiting before the next attempt.
    Backoff {
        /// How long.
        delay: Duration,
    },
}

type Hook<T> = Arc<dyn Fn(&T) + Send + Sync>;

/// Lists and watches one collection through a [`ListerWatcher`], writing into a
/// [`ReflectorStore`]. Run it with [`Reflector::run`].
pub struct Reflector<K, LW: ListerWatcher<K>, S> {
    lister_watcher: LW,
    store: S,
    options: ReflectorOptions,
    last_sync: Arc<Mutex<String>>,
    /// Where `apply` stages the next version, so moving it on does not allocate.
    scratch_version: String,
    /// A LIST answered 410 or "too large": the next asks for a consistent read.
    version_unavailable: bool,
    /// A `"0"` LIST came back in pages (a continue token was followed, even if it then
    /// expired and the pager listed in full): no watch cache serves it, so keep paging.
    paginated: bool,
    backoff: Backoff,
    jitter: Jitter,
    resync: ResyncTimer,
    tracer: Tracer,
    on_error: Option<Hook<Error>>,
    _kind: std::marker::PhantomData<fn() -> K>,
}

/// Where the reflector is; see the module docs for the diagram.
enum State<St> {
    /// A new list-and-watch round: a streaming list if enabled, else a LIST.
    Start,
    /// LIST every page, then replace the store. Success → `Watch`; 410 or too large →
    /// list again at once from scratch; other errors → `Wait`, then `Start`.
    List,
    /// Open a watch with `sendInitialEvents`, collect the initial events, replace the store
    /// at the initial-events-end bookmark. Success → `Watch` on the same stream;
    /// 429/refused → `Wait`, then `StreamList`; 410/too large → `StreamList` at once from
    /// the latest state; closed before the bookmark → `StreamList` at once; a very short
    /// stream, a broken one and other errors → `List`.
    StreamList,
    /// Watch from the last version (or go on with a stream handed over). Closed normally →
    /// `Watch` again; 429/refused → `Wait`, then `Watch`; 410, too short or other errors →
    /// `Wait`, then `Start`, which ends the watch phase and stops the resync timer.
    Watch(Option<St>),
    /// Sleep the next backoff delay, then go to the state inside. Before a re-watch the
    /// resync timer keeps firing meanwhile; before a relist it is stopped.
    Wait(Box<State<St>>),
}

// === impl Reflector ===

impl<K, LW, S> Reflector<K, LW, S>
where
    K: Object,
    LW: ListerWatcher<K>,
    S: ReflectorStore<K>,
{
    /// A reflector that lists and watches through `lister_watcher` into `store`.
    pub fn new(lister_watcher: LW, store: S, options: ReflectorOptions) -> Self {
        Reflector {
            lister_watcher,
            store,
            last_sync: Arc::default(),
            scratch_version: String::new(),
            version_unavailable: false,
            paginated: false,
            backoff: Backoff::new(options.backoff),
            jitter: Jitter::new(),
            resync: ResyncTimer {
                period: options.resync_period,
                should: None,
                due: None,
            },
            tracer: Tracer {
                name: options.name.clone(),
                hook: None,
            },
            options,
            on_error: None,
            _kind: std::marker::PhantomData,
        }
    }

    /// Calls `hook` with every step the reflector takes.
    pub fn on_trace(mut self, hook: impl Fn(&Trace) + Send + Sync + 'static) -> Self {
        self.tracer.hook = Some(Arc::new(hook));
        self
    }

    /// Calls `hook` with every error that ends a list-and-watch round before its watch
    /// runs: a failed LIST, or a failed watch request other than 429 or a refused
    /// connection (client-go's watch error handler). Errors the reflector gets over by
    /// itself (a running watch that ends, a streaming list that falls back to LIST) are
    /// only logged, as in client-go. The reflector goes on regardless.
    pub fn on_watch_error(mut self, hook: impl Fn(&Error) + Send + Sync + 'static) -> Self {
        self.on_error = Some(Arc::new(hook));
        self
    }

    /// Resyncs only when `should` answers true (client-go's `ShouldResync`).
    pub fn should_resync(mut self, should: impl Fn() -> bool + Send + Sync + 'static) -> Self {
        self.resync.should = Some(Arc::new(should));
        self
    }

    /// A handle on the last resourceVersion the reflector has synced to; `""` before the
    /// first list.
    pub fn last_sync_resource_version(&self) -> LastSync {
        LastSync(self.last_sync.clone())
    }

    /// Lists and watches until `shutdown` completes.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops the reflector; the store keeps what it was given.
    pub async fn run(mut self, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut state = State::Start;
        loop {
            tokio::select! {
                biased;
                () = &mut shutdown => return,
                next = self.step(state) => state = next,
            }
        }
    }

    /// Moves the state machine one step.
    async fn step(&mut self, state: State<LW::Stream>) -> State<LW::Stream> {
        match state {
            State::Start if self.options.watch_list => State::StreamList,
            State::Start => State::List,
            State::List => match self.list().await {
                Ok(()) => State::Watch(None),
                Err(e) => {
                    self.report(&e);
                    State::Wait(Box::new(State::Start))
                }
            },
            State::StreamList => match self.stream_list().await {
                Ok(stream) => State::Watch(Some(stream)),
                Err(end) => self.after_stream_list(end),
            },
            State::Watch(stream) => self.watch(stream).await,
            State::Wait(then) => {
                let delay = self.backoff.step(Instant::now(), self.jitter.next_f64());
                self.trace(Trace::Backoff { delay });
                // Within a watch phase (before a re-watch) the resync timer goes on.
                let sleep = tokio::time::sleep(delay);
                self.resync.around(&self.store, &self.tracer, sleep).await;
                *then
            }
        }
    }

    /// The resourceVersion the next LIST asks for: `"0"` first, `""` after a 410 or "too
    /// large" on LIST, the last synced version otherwise.
    pub fn relist_resource_version(&self) -> String {
        if self.version_unavailable {
            return String::new();
        }
        let last = self.last_sync.lock();
        if last.is_empty() {
            "0".to_owned()
        } else {
            last.clone()
        }
    }

    /// LIST every page and replace the store; once more from scratch if the version asked
    /// for is unavailable.
    async fn list(&mut self) -> Result<()> {
        let rv = self.relist_resource_version();
        // The page size is chosen once: the retry from scratch keeps it (client-go reuses its
        // pager), so a relist at a version, unpaged for the watch cache, retries unpaged.
        let limit = self.page_limit(&rv);
        let result = match self.list_pages(&rv, limit).await {
            Err(e) if e.is_version_unavailable() => {
                self.version_unavailable = true;
                self.trace(Trace::ListFailed {
                    error: e.to_string(),
                    from_scratch: true,
                });
                self.list_pages(&self.relist_resource_version(), limit)
                    .await
            }
            other => other,
        };
        let listed = result.inspect_err(|e| {
            self.trace(Trace::ListFailed {
                error: e.to_string(),
                from_scratch: false,
            })
        })?;
        // Only a "0" list says something about the server: a paged answer to it means no
        // watch cache serves this collection, so later lists keep paging. A "" list is
        // paged by etcd even when a watch cache exists.
        if rv == "0" && listed.paginated {
            self.paginated = true;
        }
        self.version_unavailable = false;
        self.trace(Trace::Listed {
            items: listed.items.len(),
            resource_version: listed.resource_version.clone(),
        });
        self.store
            .replace_prepared(listed.items, &listed.resource_version);
        self.synced(&listed.resource_version);
        Ok(())
    }

    /// The page size of a list at `rv`: the configured one; else 500 if the server paged a
    /// `"0"` list before, or for `"0"` and `""`; else none, so the watch cache can answer.
    fn page_limit(&self, rv: &str) -> Option<u32> {
        match self.options.page_size {
            Some(size) => Some(size),
            None if self.paginated => Some(500),
            None if rv.is_empty() || rv == "0" => Some(500),
            None => None,
        }
    }

    /// Pages through one full list at `rv`, `limit` items a page (client-go's pager). If a
    /// continue token has expired, lists once more in full at `rv`; the result still counts
    /// as paginated.
    async fn list_pages(&mut self, rv: &str, limit: Option<u32>) -> Result<Listed<K>> {
        let version = (!rv.is_empty()).then(|| rv.to_owned());
        let mut options = ListOptions {
            resource_version: version.clone(),
            limit,
            continue_token: None,
        };
        let mut items = Vec::new();
        let mut paginated = false;
        loop {
            let mut page = match self.lister_watcher.list(&options).await {
                Ok(page) => page,
                Err(e) if e.kind() == ErrorKind::Gone && options.continue_token.is_some() => {
                    // The continue token expired: one unpaginated list at the original version.
                    self.trace(Trace::FullListFallback);
                    let full = ListOptions {
                        resource_version: version,
                        limit: None,
                        continue_token: None,
                    };
                    let mut page = self.lister_watcher.list(&full).await?;
                    page.items
                        .iter_mut()
                        .for_each(|obj| self.store.prepare(obj));
                    self.trace(Trace::ListPage {
                        resource_version: full.resource_version,
                        limit: None,
                        continued: false,
                        items: page.items.len(),
                    });
                    return Ok(Listed {
                        items: page.items,
                        resource_version: page.resource_version,
                        paginated,
                    });
                }
                Err(e) => return Err(e),
            };
            // Each page transformed as it comes, so the pages held until the last one are
            // what the cache keeps.
            page.items
                .iter_mut()
                .for_each(|obj| self.store.prepare(obj));
            self.trace(Trace::ListPage {
                resource_version: options.resource_version.clone(),
                limit: options.limit,
                continued: options.continue_token.is_some(),
                items: page.items.len(),
            });
            if items.is_empty() {
                items = page.items;
            } else {
                items.extend(page.items);
            }
            match page.continue_token.filter(|t| !t.is_empty()) {
                Some(token) => {
                    paginated = true;
                    // Later pages carry the token, and no version: it is in the token.
                    options = ListOptions {
                        resource_version: None,
                        limit,
                        continue_token: Some(token),
                    };
                }
                None => {
                    return Ok(Listed {
                        items,
                        resource_version: page.resource_version,
                        paginated,
                    });
                }
            }
        }
    }

    /// A streaming list: the initial events into a temporary map (kept in arrival order, so
    /// `replace` sees the objects as the server sent them), then `replace` at the
    /// initial-events-end bookmark. Returns the stream, which goes on as a normal watch.
    async fn stream_list(&mut self) -> Result<LW::Stream, StreamListEnd> {
        let version = {
            let last = self.last_sync.lock();
            (!self.version_unavailable && !last.is_empty()).then(|| last.clone())
        };
        self.trace(Trace::StreamListStarted {
            resource_version: version.clone(),
        });
        let options = WatchOptions {
            resource_version: version,
            timeout_seconds: self.watch_timeout(),
            allow_bookmarks: true,
            send_initial_events: true,
        };
        // As in client-go, the clock starts before the request.
        let started = Instant::now();
        let mut stream = self
            .lister_watcher
            .watch(&options)
            .await
            .map_err(StreamListEnd::Failed)?;
        // The initial state in arrival order: a slot per key, emptied by a deletion.
        let mut slots: HashMap<Key, usize> = HashMap::new();
        let mut initial: Vec<Option<K>> = Vec::new();
        let mut events = 0usize;
        loop {
            let event = match stream.next().await {
                Some(Ok(event)) => event,
                Some(Err(e)) => return Err(StreamListEnd::Failed(e)),
                None if events == 0 && started.elapsed() < VERY_SHORT_WATCH => {
                    return Err(StreamListEnd::Failed(very_short_watch()));
                }
                None => return Err(StreamListEnd::ClosedEarly),
            };
            events += 1;
            match event {
                WatchEvent::Added(mut obj) | WatchEvent::Modified(mut obj) => {
                    // Transformed as it comes: the initial state is held as the cache keeps it.
                    self.store.prepare(&mut obj);
                    match slots.entry(key_of(&obj)) {
                        Entry::Occupied(slot) => initial[*slot.get()] = Some(obj),
                        Entry::Vacant(slot) => {
                            slot.insert(initial.len());
                            initial.push(Some(obj));
                        }
                    }
                }
                WatchEvent::Deleted(obj) => {
                    if let Some(i) = slots.remove(&key_of(&obj)) {
                        initial[i] = None;
                    }
                }
                WatchEvent::Bookmark {
                    resource_version,
                    initial_events_end: true,
                } => {
                    let items: Vec<K> = initial.into_iter().flatten().collect();
                    self.version_unavailable = false;
                    self.trace(Trace::Listed {
                        items: items.len(),
                        resource_version: resource_version.clone(),
                    });
                    self.store.replace_prepared(items, &resource_version);
                    self.synced(&resource_version);
                    return Ok(stream);
                }
                WatchEvent::Bookmark { .. } => {}
            }
        }
    }

    /// Where a failed streaming list leads (client-go's `watchList`): 429 and refused
    /// connections back off and try again; 410, "too large" and a stream closed before the
    /// initial-events-end bookmark try again at once, the first two from the latest state;
    /// anything else falls back to a plain LIST.
    fn after_stream_list(&mut self, end: StreamListEnd) -> State<LW::Stream> {
        let (error, next) = match end {
            StreamListEnd::ClosedEarly => (
                "the watch closed before the initial-events-end bookmark".to_owned(),
                State::StreamList,
            ),
            StreamListEnd::Failed(e) => {
                let next = match e.kind() {
                    ErrorKind::TooManyRequests | ErrorKind::ConnectionRefused => {
                        State::Wait(Box::new(State::StreamList))
                    }
                    ErrorKind::Gone | ErrorKind::TooLargeResourceVersion => {
                        self.version_unavailable = true;
                        State::StreamList
                    }
                    _ => {
                        // As in client-go, logged only: the LIST that follows makes progress,
                        // and the handler hears of it if it fails as well.
                        tracing::warn!(
                            reflector = %self.options.name, error = %e,
                            "streaming list failed; falling back to LIST"
                        );
                        State::List
                    }
                };
                (e.to_string(), next)
            }
        };
        self.trace(Trace::StreamListFailed {
            error,
            fallback: matches!(next, State::List),
        });
        next
    }

    /// Watches until the stream ends, and decides what comes next.
    async fn watch(&mut self, stream: Option<LW::Stream>) -> State<LW::Stream> {
        let from = self.last_sync.lock().clone();
        // A watch from "" or "0" begins with synthetic ADDED events for the current state,
        // in no version order: they must not move the version on. The first event of any
        // other kind ends them, and from then on every event moves it, ADDED ones too
        // (client-go's `eventReceivedBesidesAdded`). A stream handed over by a streaming
        // list is past its initial events already.
        let mut in_order = stream.is_some() || !(from.is_empty() || from == "0");
        // As in client-go, the clock starts before the request: some proxies send the
        // response headers only with the first event.
        let started = Instant::now();
        let mut stream = match stream {
            Some(stream) => stream,
            None => {
                let timeout_seconds = self.watch_timeout();
                let options = WatchOptions {
                    resource_version: (!from.is_empty()).then(|| from.clone()),
                    timeout_seconds,
                    allow_bookmarks: true,
                    send_initial_events: false,
                };
                self.trace(Trace::WatchStarted {
                    resource_version: from.clone(),
                    timeout_seconds,
                });
                let request = self.lister_watcher.watch(&options);
                match self.resync.around(&self.store, &self.tracer, request).await {
                    Ok(stream) => stream,
                    Err(e) => {
                        return match e.kind() {
                            // No relist: the server is busy or away; try the watch again.
                            ErrorKind::TooManyRequests | ErrorKind::ConnectionRefused => {
                                State::Wait(Box::new(State::Watch(None)))
                            }
                            _ => {
                                self.report(&e);
                                self.relist()
                            }
                        };
                    }
                }
            }
        };
        let mut events = 0usize;
        loop {
            let next = self
                .resync
                .around(&self.store, &self.tracer, stream.next())
                .await;
            let (end, then) = match next {
                Some(Ok(event)) => {
                    events += 1;
                    self.apply(event, &mut in_order);
                    continue;
                }
                None if events == 0 && started.elapsed() < VERY_SHORT_WATCH => {
                    self.log_watch_end(&very_short_watch());
                    (WatchEnd::TooShort, self.relist())
                }
                None => (WatchEnd::Closed, State::Watch(None)),
                Some(Err(e)) => match e.kind() {
                    // Relist at the last version after the backoff: a LIST at a version is
                    // at least as new as it, so nothing is lost.
                    ErrorKind::Gone => {
                        tracing::debug!(reflector = %self.options.name, error = %e, "watch closed");
                        (WatchEnd::Gone, self.relist())
                    }
                    ErrorKind::TooManyRequests => (
                        WatchEnd::TooManyRequests,
                        State::Wait(Box::new(State::Watch(None))),
                    ),
                    _ => {
                        self.log_watch_end(&e);
                        (WatchEnd::Error(e.to_string()), self.relist())
                    }
                },
            };
            self.trace(Trace::WatchEnded {
                events,
                reason: end,
            });
            return then;
        }
    }

    /// Applies one watch event to the store and moves the version on if the watch's events
    /// are `in_order`, which the first event other than ADDED makes them (see `watch`).
    fn apply(&mut self, event: WatchEvent<K>, in_order: &mut bool) {
        if !matches!(event, WatchEvent::Added(_)) {
            *in_order = true;
        }
        // The version is copied into a scratch buffer before the object is handed on, and
        // swapped in after: no allocation per event, and the store has the object before
        // the version says so.
        let ordered = *in_order;
        let version = match &event {
            WatchEvent::Added(obj) | WatchEvent::Modified(obj) | WatchEvent::Deleted(obj) => {
                obj.resource_version()
            }
            WatchEvent::Bookmark {
                resource_version, ..
            } => Some(resource_version.as_str()),
        };
        let advance = match version.filter(|_| ordered) {
            Some(version) => {
                self.scratch_version.clear();
                self.scratch_version.push_str(version);
                true
            }
            None => false,
        };
        match event {
            WatchEvent::Added(obj) => self.store.add(obj),
            WatchEvent::Modified(obj) => self.store.update(obj),
            WatchEvent::Deleted(obj) => self.store.delete(obj),
            WatchEvent::Bookmark {
                resource_version, ..
            } => {
                self.store.bookmark(&resource_version);
                self.trace(Trace::Bookmark { resource_version });
            }
        }
        if advance {
            std::mem::swap(&mut *self.last_sync.lock(), &mut self.scratch_version);
        }
    }

    /// Records a completed sync at `resource_version`; a watch phase begins, and with it
    /// the resync timer.
    fn synced(&mut self, resource_version: &str) {
        *self.last_sync.lock() = resource_version.to_owned();
        self.resync.start();
    }

    /// Ends the watch phase: the resync timer stops, and after a backoff the reflector
    /// lists again.
    fn relist(&mut self) -> State<LW::Stream> {
        self.resync.stop();
        State::Wait(Box::new(State::Start))
    }

    /// A watch timeout in `[min, 2·min)` seconds, so watches do not all end together; `min`
    /// is [`ReflectorOptions::min_watch_timeout`], at least 5 minutes.
    fn watch_timeout(&mut self) -> u32 {
        let min = self
            .options
            .min_watch_timeout
            .max(DEFAULT_MIN_WATCH_TIMEOUT)
            .as_secs_f64();
        (min + self.jitter.next_f64() * min) as u32
    }

    fn trace(&self, t: Trace) {
        self.tracer.emit(t);
    }

    /// An error inside a running watch: logged, not reported (client-go's `watch` returns
    /// nil for these); the reflector relists.
    fn log_watch_end(&self, e: &Error) {
        tracing::warn!(reflector = %self.options.name, error = %e, "watch ended with error");
    }

    /// An error that ended a list-and-watch round before its watch ran: logged, and handed
    /// to the watch error handler.
    fn report(&self, e: &Error) {
        tracing::warn!(reflector = %self.options.name, error = %e, "list and watch failed");
        if let Some(hook) = &self.on_error {
            hook(e);
        }
    }
}

/// Where traces go: the log, and the hook if one is set.
struct Tracer {
    name: String,
    hook: Option<Hook<Trace>>,
}

impl Tracer {
    fn emit(&self, t: Trace) {
        tracing::debug!(reflector = %self.name, ?t);
        if let Some(hook) = &self.hook {
            hook(&t);
        }
    }
}

/// client-go's resync goroutine (`startResync`) as a timer that the watch phase polls
/// alongside whatever it awaits.
struct ResyncTimer {
    /// [`ReflectorOptions::resync_period`]; `None` never resyncs.
    period: Option<Duration>,
    /// client-go's `ShouldResync`; `None` always resyncs.
    should: Option<Arc<dyn Fn() -> bool + Send + Sync>>,
    /// When the next resync is due. `Some` only within a watch phase: from the list that
    /// began it (`start`) to the decision to list again (`stop`).
    due: Option<Instant>,
}

impl ResyncTimer {
    /// Arms the timer a period from now.
    fn start(&mut self) {
        self.due = self.period.map(|period| Instant::now() + period);
    }

    fn stop(&mut self) {
        self.due = None;
    }

    /// Awaits `work` to its end, resyncing `store` whenever the timer falls due meanwhile.
    /// `work` is never dropped early, so it need not be cancel safe.
    async fn around<K, T>(
        &mut self,
        store: &impl ReflectorStore<K>,
        tracer: &Tracer,
        work: impl Future<Output = T>,
    ) -> T {
        let mut work = std::pin::pin!(work);
        loop {
            let Some(due) = self.due else {
                return work.await;
            };
            tokio::select! {
                biased;
                out = &mut work => return out,
                () = tokio::time::sleep_until(due) => {
                    if self.should.as_ref().is_none_or(|should| should()) {
                        tracer.emit(Trace::Resync);
                        store.resync();
                    }
                    // As client-go's fresh timer: a full period after this resync, so a
                    // late timer never fires in a burst.
                    self.start();
                }
            }
        }
    }
}

/// One full list, as the pager returns it.
struct Listed<K> {
    items: Vec<K>,
    resource_version: String,
    /// A continue token was followed, even if an expired one then led to a full list.
    paginated: bool,
}

/// Why a streaming list did not reach its initial-events-end bookmark.
enum StreamListEnd {
    /// The stream closed after an event, or after a second: try again at once.
    ClosedEarly,
    /// The request or the stream failed (a very short stream included).
    Failed(Error),
}

/// client-go's `defaultMinWatchTimeout`, and the floor of
/// [`ReflectorOptions::min_watch_timeout`].
const DEFAULT_MIN_WATCH_TIMEOUT: Duration = Duration::from_secs(300);

/// A watch that closes sooner than this without an event is "very short": something is
/// wrong, and it is not simply watched again.
const VERY_SHORT_WATCH: Duration = Duration::from_secs(1);

fn very_short_watch() -> Error {
    Error::new(
        ErrorKind::Stream,
        "very short watch: the watch closed within a second without an event",
    )
}

/// A shared view of a reflector's last synced resourceVersion.
#[derive(Clone, Debug)]
pub struct LastSync(Arc<Mutex<String>>);

impl LastSync {
    /// The version; `""` before the first list.
    pub fn get(&self) -> String {
        self.0.lock().clone()
    }
}

// === impl ReflectorStore for DeltaFifo ===

impl<K: Object> ReflectorStore<K> for crate::DeltaFifo<K> {
    fn add(&self, object: K) {
        crate::DeltaFifo::add(self, object);
    }

    fn update(&self, object: K) {
        crate::DeltaFifo::update(self, object);
    }

    fn delete(&self, object: K) {
        crate::DeltaFifo::delete(self, object);
    }

    fn replace(&self, objects: Vec<K>, resource_version: &str) {
        crate::DeltaFifo::replace(self, objects, resource_version);
    }

    fn prepare(&self, object: &mut K) {
        crate::DeltaFifo::transform(self, object);
    }

    fn replace_prepared(&self, objects: Vec<K>, resource_version: &str) {
        crate::DeltaFifo::replace_transformed(self, objects, resource_version);
    }

    fn resync(&self) {
        crate::DeltaFifo::resync(self);
    }

    fn bookmark(&self, resource_version: &str) {
        crate::DeltaFifo::bookmark(self, resource_version);
    }
}
