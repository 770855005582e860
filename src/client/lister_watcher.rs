//! The informer's [`ListerWatcher`] on the real client: LIST and WATCH of one collection
//! through an [`Api`], with client errors sorted into the kinds the reflector acts on.

use informer::lister_watcher::{
    Error as LwError, ErrorKind, Result as LwResult, WatchEvent as LwEvent,
};
use informer::{EventStream, ListOptions, ListPage, ListerWatcher, WatchOptions};
use serde::Serialize;

use super::{Api, Error, ListParams, Selector, WatchObject, WatchParams, WatchStream};

/// Lists and watches the objects an [`Api`] serves, optionally narrowed by a [`Selector`],
/// for a reflector.
#[derive(Clone, Debug)]
pub struct ApiListerWatcher<K> {
    api: Api<K>,
    selector: Selector,
}

impl<K> ApiListerWatcher<K> {
    /// Every object `api` serves.
    pub fn new(api: Api<K>) -> Self {
        let selector = Selector::default();
        ApiListerWatcher { api, selector }
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
        let params = ListParams {
            selector: self.selector.clone(),
            limit: options.limit,
            continue_token: options.continue_token.clone(),
            resource_version: options.resource_version.clone(),
            ..ListParams::default()
        };
        let list = self.api.list(&params).await.map_err(classify)?;
        Ok(ListPage {
            items: list.items,
            resource_version: list.metadata.resource_version.unwrap_or_default(),
            continue_token: list.metadata.continue_.filter(|t| !t.is_empty()),
        })
    }

    async fn watch(&self, options: &WatchOptions) -> LwResult<ApiEventStream<K>> {
        let params = WatchParams {
            selector: self.selector.clone(),
            resource_version: options.resource_version.clone(),
            timeout_seconds: Some(options.timeout_seconds),
            bookmarks: options.allow_bookmarks,
            send_initial_events: options.send_initial_events,
        };
        let stream = self.api.watch(&params).await.map_err(classify)?;
        Ok(ApiEventStream(stream))
    }
}

/// A watch through the client, as the reflector sees it.
#[derive(Debug)]
pub struct ApiEventStream<K>(WatchStream<K>);

impl<K: WatchObject + Send> EventStream<K> for ApiEventStream<K> {
    async fn next(&mut self) -> Option<LwResult<LwEvent<K>>> {
        Some(self.0.next().await?.map(LwEvent::from).map_err(classify))
    }
}

/// Sorts a client error into the kind the reflector acts on.
pub(crate) fn classify(error: Error) -> LwError {
    let kind = if error.is_gone() {
        ErrorKind::Gone
    } else if error.is_resource_version_too_large() {
        ErrorKind::TooLargeResourceVersion
    } else if error.is_too_many_requests() {
        ErrorKind::TooManyRequests
    } else if error.code() == Some(500) {
        ErrorKind::InternalError
    } else {
        match &error {
            Error::Transport { .. } if refused(&error) => ErrorKind::ConnectionRefused,
            Error::Decode { .. } | Error::TruncatedFrame { .. } | Error::Body { .. } => {
                ErrorKind::Stream
            }
            #[cfg(feature = "protobuf")]
            Error::Protobuf { .. } => ErrorKind::Stream,
            _ => ErrorKind::Other,
        }
    };
    LwError::new(kind, error)
}

/// Whether a connection was refused, somewhere in the error's causes.
fn refused(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return true;
        }
        cause = e.source();
    }
    false
}
