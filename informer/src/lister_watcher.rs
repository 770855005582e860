//! The reflector's view of the API server: [`ListerWatcher`] lists pages and opens watches.
//! The root crate implements it with the real client; tests implement it with scripts.

use std::fmt;
use std::future::Future;

/// Options for one LIST request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListOptions {
    /// `resourceVersion`: `None` for a consistent read, `"0"` for any cached state, or a
    /// version to read at least as new as.
    pub resource_version: Option<String>,
    /// `limit`: at most this many items per page.
    pub limit: Option<u32>,
    /// `continue`: the token from the previous page.
    pub continue_token: Option<String>,
}

/// Options for one WATCH request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WatchOptions {
    /// Events after this `resourceVersion`; `None` or `"0"` starts with the current state.
    pub resource_version: Option<String>,
    /// The server ends the watch after this many seconds.
    pub timeout_seconds: u32,
    /// Ask for bookmarks. The reflector always does.
    pub allow_bookmarks: bool,
    /// Stream the current state first, ended by the initial-events-end bookmark
    /// (WatchList); sent with `resourceVersionMatch=NotOlderThan`.
    pub send_initial_events: bool,
}

/// One page of a list.
#[derive(Clone, Debug, PartialEq)]
pub struct ListPage<K> {
    /// The objects.
    pub items: Vec<K>,
    /// The list's `resourceVersion`.
    pub resource_version: String,
    /// The token for the next page, if there is one.
    pub continue_token: Option<String>,
}

/// One watch event, as the reflector needs it.
#[derive(Clone, Debug, PartialEq)]
pub enum WatchEvent<K> {
    /// The object was created, or is part of the initial state.
    Added(K),
    /// The object changed.
    Modified(K),
    /// The object was deleted; this is its last state.
    Deleted(K),
    /// The collection reached `resource_version`; `initial_events_end` marks the end of a
    /// WatchList's initial events.
    Bookmark {
        /// The collection's resourceVersion.
        resource_version: String,
        /// The bookmark carries `k8s.io/initial-events-end: "true"`.
        initial_events_end: bool,
    },
}

/// What kind of failure a list or watch met: the reflector's next step depends on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// 410 Gone or `Expired`: the resourceVersion asked for is no longer kept.
    Gone,
    /// The server has not yet seen the resourceVersion asked for.
    TooLargeResourceVersion,
    /// 429: the server asks the client to slow down.
    TooManyRequests,
    /// The server could not be reached.
    ConnectionRefused,
    /// 500 InternalError.
    InternalError,
    /// A watch frame could not be decoded, or the stream broke off.
    Stream,
    /// Anything else.
    Other,
}

/// A failed list or watch: its kind, and the error that caused it.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    source: Box<dyn std::error::Error + Send + Sync>,
}

impl Error {
    /// An error of `kind`, caused by `source`.
    pub fn new(
        kind: ErrorKind,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Error {
            kind,
            source: source.into(),
        }
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// Gone, or a resourceVersion the server has not reached: list again from scratch.
    pub fn is_version_unavailable(&self) -> bool {
        matches!(
            self.kind,
            ErrorKind::Gone | ErrorKind::TooLargeResourceVersion
        )
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.source.fmt(f)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.source.as_ref())
    }
}

/// `Result` with a list/watch [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A running watch.
pub trait EventStream<K>: Send {
    /// The next event; `None` when the server closed the watch. After an error the stream
    /// is over.
    ///
    /// # Cancel safety
    ///
    /// Need not be cancel safe: the reflector polls each `next` to its end (its resync timer
    /// fires beside it) and drops a pending one only when it stops, with the stream.
    fn next(&mut self) -> impl Future<Output = Option<Result<WatchEvent<K>>>> + Send;
}

/// Lists and watches one collection of objects of type `K`.
pub trait ListerWatcher<K>: Send + Sync {
    /// The stream a watch returns.
    type Stream: EventStream<K>;

    /// Lists one page.
    fn list(&self, options: &ListOptions) -> impl Future<Output = Result<ListPage<K>>> + Send;

    /// Opens a watch.
    fn watch(&self, options: &WatchOptions) -> impl Future<Output = Result<Self::Stream>> + Send;
}
