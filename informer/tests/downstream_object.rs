//! A type from another crate implements `informer::Object` itself, next to `k8s-openapi`
//! types that get it from the blanket impl, and both go through the indexer and the DeltaFIFO.

use std::collections::HashMap;
use std::sync::Arc;

use informer::{
    DeltaFifo, DeltaFifoOptions, DeltaObject, DeltaType, IndexFunc, Indexer, NAMESPACE_INDEX,
    Object, namespace_indexers,
};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// A local type that does not implement `k8s_openapi::Resource` or `Metadata`, like the root
/// crate's `DynamicObject` and `PartialObjectMetadata`.
#[derive(Debug)]
struct Widget {
    metadata: ObjectMeta,
    size: u32,
}

impl Object for Widget {
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
}

fn widget(ns: &str, name: &str, size: u32) -> Widget {
    Widget {
        metadata: ObjectMeta {
            namespace: Some(ns.into()),
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        size,
    }
}

#[test]
fn a_downstream_type_goes_through_the_fifo_into_an_indexed_store() {
    let mut indexers = namespace_indexers();
    indexers.insert(
        "size".to_owned(),
        IndexFunc::new(|w: &Widget, out| out.push(&w.size.to_string())),
    );
    let indexer: Indexer<Widget> = Indexer::new(indexers);
    let fifo = DeltaFifo::with_options(DeltaFifoOptions {
        known_objects: Some(Arc::new(indexer.clone())),
        emit_delta_type_replaced: true,
        transformer: Some(Arc::new(|w: &mut Widget| w.size *= 10)),
    });

    fifo.replace([widget("a", "one", 1), widget("b", "two", 2)], "1");
    fifo.update(widget("a", "one", 3));
    while fifo
        .try_pop(|deltas, _| {
            for delta in &deltas {
                match (delta.kind, &delta.object) {
                    (DeltaType::Deleted, _) => {
                        indexer.remove(deltas.key());
                    }
                    (_, DeltaObject::Object(obj)) => {
                        indexer.insert(deltas.key(), obj.clone());
                    }
                    (_, DeltaObject::Tombstone(_)) => unreachable!(),
                }
            }
        })
        .is_some()
    {}

    assert!(fifo.has_synced());
    assert_eq!(indexer.get_by_key("a/one").unwrap().size, 30);
    assert_eq!(
        indexer.index_keys("size", "20").unwrap(),
        [Arc::<str>::from("b/two")]
    );
    assert_eq!(indexer.by_index(NAMESPACE_INDEX, "a").unwrap().len(), 1);
}

#[test]
fn k8s_openapi_types_still_use_the_blanket_impl_in_the_same_crate() {
    let store: Indexer<ConfigMap> = Indexer::new(HashMap::new());
    store.add(Arc::new(ConfigMap {
        metadata: ObjectMeta {
            name: Some("cluster-wide".into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    }));
    assert!(store.get_by_key("cluster-wide").is_some());
    assert_eq!(informer::key_of(&widget("ns", "w", 0)).as_ref(), "ns/w");
}
