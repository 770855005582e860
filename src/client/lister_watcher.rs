//! The informer's [`ListerWatcher`] on the real client: LIST and WATCH of one collection
//! through an [`Api`], with client errors sorted into the kinds the reflector acts on.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use informer::lister_watcher::{
    Error as LwError, ErrorKind, Result as LwResult, WatchEvent as LwEvent,
};
use informer::{EventStream, ListOptions, ListPage, ListerWatcher, WatchOptions};
use parking_lot::Mutex;
use serde::Serialize;

use super::{Api, Error, ListParams, Selector, WatchObject, WatchParams, WatchStream};

/// A narrowing of a list and watch that can change while the informer runs (a sharded
/// cache's hash ranges): a `shardSelector` sent with each request, a filter over what comes
/// back (for servers that ignore the selector, and for what no selector can express), and
/// a generation that moves with each change.
///
/// A list is made with the narrowing of its first page; a watch continues it only while
/// the generation is still the list's, and ends (as `Gone`) when it moves, so that the
/// reflector lists again: objects that entered the narrowing without changing would never
/// reach a watch begun from the older list.
pub trait ListFilter<K>: Send + Sync {
    /// The narrowing's generation now.
    fn generation(&self) -> u64;
    /// The `shardSelector` to send now, if any.
    fn shard_selector(&self) -> Option<String>;
    /// Whether `object` belongs in the cache now.
    fn keep(&self, object: &K) -> bool;
    /// Completes once the generation differs from `generation`.
    fn changed(&self, generation: u64) -> Pin<Box<dyn Future<Output = ()> + Send>>;
}

/// Where a lister-watcher finds its [`ListFilter`]; settable until the informer starts.
pub type FilterSlot<K> = Arc<Mutex<Option<Arc<dyn ListFilter<K>>>>>;

/// Lists and watches the objects an [`Api`] serves, optionally narrowed by a [`Selector`]
/// and a [`ListFilter`], for a reflector.
#[derive(Clone)]
pub struct ApiListerWatcher<K> {
    api: Api<K>,
    selector: Selector,
    filter: FilterSlot<K>,
    /// With a filter: the generation and the selector of the last list's first page.
    listed: Arc<Mutex<(u64, Selector)>>,
}

impl<K> std::fmt::Debug for ApiListerWatcher<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiListerWatcher")
            .field("api", &self.api)
            .field("selector", &self.selector)
            .field("filtered", &self.filter.lock().is_some())
            .finish()
    }
}

impl<K> ApiListerWatcher<K> {
    /// Every object `api` serves.
    pub fn new(api: Api<K>) -> Self {
        let selector = Selector::default();
        let filter = FilterSlot::default();
        ApiListerWatcher {
            api,
            listed: Arc::new(Mutex::new((0, selector.clone()))),
            selector,
            filter,
        }
    }

    /// Narrowed further by the filter `slot` holds at each list and watch.
    pub fn filtered(mut self, slot: FilterSlot<K>) -> Self {
        self.filter = slot;
        self
    }

    /// The filter, if any, and the selector for a list's page: for a first page, the
    /// narrowing now (noted with its generation); for a later page, the first page's.
    fn list_narrowing(&self, first: bool) -> (Selector, Option<Arc<dyn ListFilter<K>>>) {
        let Some(filter) = self.filter.lock().clone() else {
            return (self.selector.clone(), None);
        };
        let mut listed = self.listed.lock();
        if first {
            let generation = filter.generation();
            let mut selector = self.selector.clone();
            selector.shards = filter.shard_selector();
            *listed = (generation, selector);
        }
        (listed.1.clone(), Some(filter))
    }

    /// Only the objects `selector` matches, in place of any selection before.
    pub fn selector(mut self, selector: Selector) -> Self {
        self.selector = selector;
        self
    }

    selector_builders!(selector);
}

impl<K> ListerWatcher<K> for ApiListerWatcher<K>
where
    K: WatchObject + Serialize + Send + Sync + 'static,
{
    type Stream = ApiEventStream<K>;

    async fn list(&self, options: &ListOptions) -> LwResult<ListPage<K>> {
        let (selector, filter) = self.list_narrowing(options.continue_token.is_none());
        let params = ListParams {
            selector,
            limit: options.limit,
            continue_token: options.continue_token.clone(),
            resource_version: options.resource_version.clone(),
            ..ListParams::default()
        };
        let list = self.api.list(&params).await.map_err(classify)?;
        let mut items = list.items;
        if let Some(filter) = &filter {
            items.retain(|object| filter.keep(object));
        }
        Ok(ListPage {
            items,
            resource_version: list.metadata.resource_version.unwrap_or_default(),
            continue_token: list.metadata.continue_.filter(|t| !t.is_empty()),
        })
    }

    async fn watch(&self, options: &WatchOptions) -> LwResult<ApiEventStream<K>> {
        let filter = self.filter.lock().clone();
        let (generation, selector) = match &filter {
            // A streaming list (WatchList) is the list: it takes the narrowing now.
            Some(filter) if options.send_initial_events => {
                let mut selector = self.selector.clone();
                let generation = filter.generation();
                selector.shards = filter.shard_selector();
                *self.listed.lock() = (generation, selector.clone());
                (generation, selector)
            }
            Some(_) => self.listed.lock().clone(),
            None => (0, self.selector.clone()),
        };
        // The narrowing moved since the list: list again rather than watch on from it.
        if let Some(filter) = &filter
            && filter.generation() != generation
        {
            return Err(LwError::new(ErrorKind::Gone, FilterChanged));
        }
        let changed = filter.as_ref().map(|f| f.changed(generation));
        let params = WatchParams {
            selector,
            resource_version: options.resource_version.clone(),
            timeout_seconds: Some(options.timeout_seconds),
            bookmarks: options.allow_bookmarks,
            send_initial_events: options.send_initial_events,
        };
        let stream = self.api.watch(&params).await.map_err(classify)?;
        Ok(ApiEventStream {
            stream,
            filter: filter.zip(changed),
        })
    }
}

/// Completes when a [`ListFilter`]'s generation moves.
type Changed = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A watch through the client, as the reflector sees it.
pub struct ApiEventStream<K> {
    stream: WatchStream<K>,
    /// The filter, and the signal of its change, which ends the watch as `Gone` so that
    /// the reflector lists again.
    filter: Option<(Arc<dyn ListFilter<K>>, Changed)>,
}

impl<K> std::fmt::Debug for ApiEventStream<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiEventStream")
            .field("filtered", &self.filter.is_some())
            .finish_non_exhaustive()
    }
}

/// Why a filtered watch ended: its filter changed.
#[derive(Debug, thiserror::Error)]
#[error("the watch's filter changed (shard ranges moved); listing again")]
struct FilterChanged;

impl<K: WatchObject + Send> EventStream<K> for ApiEventStream<K> {
    async fn next(&mut self) -> Option<LwResult<LwEvent<K>>> {
        let Some((filter, changed)) = &mut self.filter else {
            return Some(
                self.stream
                    .next()
                    .await?
                    .map(LwEvent::from)
                    .map_err(classify),
            );
        };
        loop {
            let event = tokio::select! {
                biased;
                _ = changed.as_mut() => {
                    return Some(Err(LwError::new(ErrorKind::Gone, FilterChanged)));
                }
                event = self.stream.next() => event,
            };
            let event = match event?.map(LwEvent::from) {
                Ok(event) => event,
                Err(error) => return Some(Err(classify(error))),
            };
            // What the filter drops never reaches the cache; an object that leaves the
            // selection in place (its owner changed) leaves the cache as a deletion.
            return Some(Ok(match event {
                LwEvent::Added(object) if !filter.keep(&object) => continue,
                LwEvent::Deleted(object) if !filter.keep(&object) => continue,
                LwEvent::Modified(object) if !filter.keep(&object) => LwEvent::Deleted(object),
                event => event,
            }));
        }
    }
}

/// Sorts a client error into the kind the reflector acts on.
pub(crate) fn classify(error: Error) -> LwError {
    let kind = match &error {
        _ if error.is_gone() => ErrorKind::Gone,
        _ if error.is_resource_version_too_large() => ErrorKind::TooLargeResourceVersion,
        _ if error.is_too_many_requests() => ErrorKind::TooManyRequests,
        _ if error.code() == Some(500) => ErrorKind::InternalError,
        Error::Transport { .. } if error.is_connection_refused() => ErrorKind::ConnectionRefused,
        Error::Decode { .. } | Error::TruncatedFrame { .. } | Error::Body { .. } => {
            ErrorKind::Stream
        }
        #[cfg(feature = "protobuf")]
        Error::Protobuf { .. } => ErrorKind::Stream,
        _ => ErrorKind::Other,
    };
    LwError::new(kind, error)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(status: &str) -> Error {
        Error::Api(Box::new(serde_json::from_str(status).unwrap()))
    }

    #[test]
    fn too_large_resource_version_from_servers_1_17_to_1_18_5_is_recognised_by_its_cause_message() {
        // A Timeout whose cause carries the message and no reason; the status message does
        // not name the condition.
        let error = api_error(
            r#"{"kind":"Status","status":"Failure","message":"Timeout: request did not complete within the allowed duration","reason":"Timeout","details":{"causes":[{"message":"Too large resource version"}],"retryAfterSeconds":1},"code":504}"#,
        );
        assert_eq!(classify(error).kind(), ErrorKind::TooLargeResourceVersion);
    }

    #[test]
    fn too_large_resource_version_is_recognised_by_its_cause_reason() {
        let error = api_error(
            r#"{"kind":"Status","status":"Failure","message":"Timeout: request did not complete within the allowed duration","reason":"Timeout","details":{"causes":[{"reason":"ResourceVersionTooLarge","message":"Too large resource version"}],"retryAfterSeconds":1},"code":504}"#,
        );
        assert_eq!(classify(error).kind(), ErrorKind::TooLargeResourceVersion);
    }

    #[test]
    fn other_timeouts_are_not_too_large_resource_versions() {
        for status in [
            r#"{"kind":"Status","status":"Failure","message":"Timeout: request did not complete within the allowed duration","reason":"Timeout","details":{"causes":[{"message":"etcd is slow"}]},"code":504}"#,
            r#"{"kind":"Status","status":"Failure","message":"Timeout: request did not complete within the allowed duration","reason":"Timeout","code":504}"#,
        ] {
            assert_eq!(
                classify(api_error(status)).kind(),
                ErrorKind::Other,
                "{status}"
            );
        }
        // The cause message alone counts only in a Timeout, as in client-go.
        let conflict = api_error(
            r#"{"kind":"Status","status":"Failure","message":"conflict","reason":"Conflict","details":{"causes":[{"message":"Too large resource version"}]},"code":409}"#,
        );
        assert_eq!(classify(conflict).kind(), ErrorKind::Other);
    }
}
