//! The client's wire codec: frame cutting, the JSON scanner, [`Raw`], protobuf and its
//! transcoder into JSON with the tables generated from k8s.io/api.

mod event;
#[cfg(feature = "protobuf")]
pub(crate) mod proto_json;
#[cfg(feature = "protobuf")]
mod proto_schema;
#[cfg(feature = "protobuf")]
mod proto_tables;
#[cfg(feature = "protobuf")]
pub(crate) mod protobuf;
mod raw;
mod scan;

pub use event::{
    Bookmark, BookmarkMeta, EventReader, FrameDecoder, INITIAL_EVENTS_END, WatchEvent, WatchObject,
    WatchStream, decode_event,
};
#[cfg(feature = "protobuf")]
pub use proto_json::ProtoKind;
pub use raw::{MetaView, OwnerRefView, Raw};
