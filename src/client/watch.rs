//! [`WatchStream`]: the events of one watch, read from the HTTP body as it arrives and
//! decoded one frame at a time by the codec's [`EventReader`], never buffered whole.

use std::marker::PhantomData;
use std::sync::Arc;

use http_body_util::BodyExt;
use hyper::body::Incoming;

use super::codec::{Codec, EventReader, Format, WatchEvent, WatchObject};
use super::error::{Error, Result};

/// The events of one watch, decoded as they arrive.
///
/// The stream ends (`next` returns `None`) when the server closes the watch, normally after
/// its `timeoutSeconds`. After an error, it yields `None`: a watch that went wrong is over,
/// and the caller starts a new one or lists again.
pub struct WatchStream<K> {
    body: Option<Incoming>,
    url: String,
    reader: EventReader,
    /// The client's codec, told of a protobuf field the tables do not know.
    codec: Arc<Codec>,
    _kind: PhantomData<fn() -> K>,
}

impl<K> std::fmt::Debug for WatchStream<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchStream")
            .field("url", &self.url)
            .field("open", &self.body.is_some())
            .finish()
    }
}

impl<K: WatchObject> WatchStream<K> {
    /// A stream of the events in `format` over `body`; a protobuf field the tables do not
    /// know makes `codec` read the kind as JSON from then on.
    pub(crate) fn new(body: Incoming, url: String, format: Format, codec: Arc<Codec>) -> Self {
        WatchStream {
            body: Some(body),
            url,
            reader: EventReader::of(format),
            codec,
            _kind: PhantomData,
        }
    }

    /// Whether the server sends this watch as protobuf.
    pub fn is_protobuf(&self) -> bool {
        self.reader.is_protobuf()
    }

    /// The URL this watch reads.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The next event, or `None` once the watch has ended.
    ///
    /// # Errors
    ///
    /// [`Error::Api`] for an `ERROR` frame (the server's `Status`; a 410 means the requested
    /// resourceVersion is gone), [`Error::Decode`] for a frame that is not a valid event,
    /// [`Error::TruncatedFrame`] if the body ends mid-frame, [`Error::Body`] if the
    /// connection fails. Each ends the stream.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a frame read but not yet returned stays buffered for the next call.
    pub async fn next(&mut self) -> Option<Result<WatchEvent<K>>> {
        loop {
            if let Some(event) = self.reader.next_event(&self.url) {
                if let Err(error) = &event {
                    self.body = None;
                    self.codec.refused(self.reader.format(), error);
                }
                return Some(event);
            }
            let body = self.body.as_mut()?;
            match body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.reader.push(data);
                    }
                }
                Some(Err(source)) => {
                    self.body = None;
                    return Some(Err(Error::Body {
                        url: self.url.clone(),
                        source,
                    }));
                }
                None => {
                    self.body = None;
                    let len = self.reader.pending();
                    if len > 0 {
                        return Some(Err(Error::TruncatedFrame {
                            url: self.url.clone(),
                            len,
                        }));
                    }
                    return None;
                }
            }
        }
    }
}
