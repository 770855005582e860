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
