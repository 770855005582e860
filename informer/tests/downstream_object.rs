//! A type from another crate implements `informer::Object` itself, next to `k8s-openapi`
//! types that get it from the blanket impl, and both go through the indexer and the DeltaFIFO.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use informer::{
    DeltaFifo, DeltaFifoOptions, DeltaObject, DeltaType, IndexFunc, Indexer, Lister,
    NAMESPACE_INDEX, Object, namespace_indexers,
};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

/// A local type that does not implement `k8s_openapi::Resource` or `Metadata` and holds no
/// `ObjectMeta`, like the root crate's `Raw<K>`: it answers the four questions the cache asks
/// from its own fields.
#[derive(Debug)]
struct Widget {
    namespace: String,
    name: String,
    tier: &'static str,
    size: u32,
}

impl Object for Widget {
    fn name(&self) -> &str {
        &self.name
    }
    fn namespace(&self) -> Option<&str> {
        Some(&self.namespace)
    }
    fn resource_version(&self) -> Option<&str> {
        None
    }
    fn label(&self, key: &str) -> Option<Cow<'_, str>> {
        (key == "tier").then_some(Cow::Borrowed(self.tier))
    }
}

fn widget(ns: &str, name: &str, size: u32) -> Widget {
    Widget {
        namespace: ns.into(),
        name: name.into(),
        tier: if size.is_multiple_of(2) {
            "even"
        } else {
            "odd"
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

    let selector = LabelSelector {
        match_labels: Some(BTreeMap::from([("tier".to_owned(), "even".to_owned())])),
        ..LabelSelector::default()
    };
    let even = Lister::new(indexer).select(&selector).unwrap();
    assert_eq!(even.len(), 1);
    assert_eq!(even[0].name, "two");
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
