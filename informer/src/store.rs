//! The thread-safe store with indices ([`Indexer`]): client-go's `threadSafeMap` and `cache`.

use std::fmt;
use std::sync::Arc;

use hashbrown::{HashMap, HashSet};
use parking_lot::RwLock;

use crate::delta_fifo::KnownObjects;
use crate::index::{IndexError, Indexers, Indices, ValueBuf};
use crate::object::{Key, Object, with_object_key};

/// A thread-safe map from [`Key`] to `Arc<K>`, with indices kept current on every write.
///
/// This is the informer's cache: the DeltaFIFO's `process` function writes to it, listers
/// and handlers read from it, and the DeltaFIFO reads it back as its [`KnownObjects`]. It is
/// a cheap handle: clones share the same store.
///
/// Objects are stored as `Arc<K>` and handed out as `Arc<K>` clones — never copied, never to
/// be mutated (the `Arc` enforces that).
///
/// An object's key is `namespace/name` ([`meta_key`](crate::meta_key)). The keyed methods
/// [`insert`](Self::insert) and [`remove`](Self::remove) take the key from the caller instead:
/// applying popped [`Deltas`](crate::Deltas) with them reuses the DeltaFIFO's key allocation
/// and handles tombstones, whose object may be missing.
///
/// Indices map an index value to the keys of the objects that have it; see [`IndexFunc`](crate::IndexFunc).
///
/// ```
/// use std::sync::Arc;
/// use informer::{Indexer, NAMESPACE_INDEX, namespace_indexers};
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
///
/// let cm = |ns: &str, name: &str| Arc::new(ConfigMap {
///     metadata: ObjectMeta { namespace: Some(ns.into()), name: Some(name.into()), ..Default::default() },
///     ..Default::default()
/// });
/// let store = Indexer::new(namespace_indexers());
/// store.add(cm("a", "one"));
/// store.add(cm("a", "two"));
/// store.add(cm("b", "three"));
///
/// assert!(store.get_by_key("a/one").is_some());
/// assert_eq!(store.index_keys(NAMESPACE_INDEX, "a").unwrap(), ["a/one".into(), "a/two".into()]);
/// assert_eq!(store.by_index(NAMESPACE_INDEX, "b").unwrap().len(), 1);
/// ```
pub struct Indexer<K> {
    inner: Arc<RwLock<State<K>>>,
}

/// Everything behind the lock.
struct State<K> {
    /// The objects by key. Every key here is in the indices under each of its object's values.
    items: HashMap<Key, Arc<K>>,
    /// The indices; no value in them maps to an empty set.
    indices: Indices<K>,
}

impl<K> Clone for Indexer<K> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<K> Default for Indexer<K> {
    /// A store with no indices.
    fn default() -> Self {
        Self {
            inner: Arc::new(RwLock::new(State {
                items: HashMap::new(),
                indices: Indices::default(),
            })),
        }
    }
}

impl<K> fmt::Debug for Indexer<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Indexer")
            .field("len", &self.inner.read().items.len())
            .finish_non_exhaustive()
    }
}

// === impl Indexer ===

impl<K: Object> Indexer<K> {
    /// A store maintaining the given indices.
    pub fn new(indexers: Indexers<K>) -> Self {
        let store = Self::default();
        store
            .add_indexers(indexers)
            .expect("an empty store has no indexers to conflict with");
        store
    }

    /// Stores `obj` under its key, replacing any previous object; returns the previous one.
    ///
    /// Same as [`update`](Self::update): client-go's store does not tell them apart.
    pub fn add(&self, obj: Arc<K>) -> Option<Arc<K>> {
        self.update(obj)
    }

    /// Stores `obj` under its key, replacing any previous object; returns the previous one.
    pub fn update(&self, obj: Arc<K>) -> Option<Arc<K>> {
        let mut state = self.inner.write();
        let key = with_object_key(&*obj, |k| match state.items.get_key_value(k) {
            Some((stored, _)) => stored.clone(),
            None => Key::from(k),
        });
        state.upsert(&key, obj)
    }

    /// Stores `obj` under `key`, replacing any previous object; returns the previous one.
    ///
    /// `key` must be the object's key ([`meta_key`](crate::meta_key)). This is the method to
    /// apply `Sync`, `Replaced`, `Added` and `Updated` deltas with: a `Some` result means the
    /// object was known (an update notification), `None` that it is new (an add).
    pub fn insert(&self, key: &Key, obj: Arc<K>) -> Option<Arc<K>> {
        self.inner.write().upsert(key, obj)
    }

    /// Removes the object with `obj`'s key; returns it. Removing an absent key does nothing.
    pub fn delete(&self, obj: &K) -> Option<Arc<K>> {
        let mut state = self.inner.write();
        with_object_key(obj, |k| state.remove(k))
    }

    /// Removes the object stored under `key`; returns it. Removing an absent key does nothing.
    ///
    /// This is the method to apply `Deleted` deltas with, tombstones included.
    pub fn remove(&self, key: &str) -> Option<Arc<K>> {
        self.inner.write().remove(key)
    }

    /// Replaces the whole contents with `list` and rebuilds every index.
    ///
    /// The resource version is accepted for client-go parity and not recorded. Later objects
    /// win over earlier ones with the same key.
    pub fn replace(&self, list: impl IntoIterator<Item = Arc<K>>, _resource_version: &str) {
        let mut state = self.inner.write();
        let old = std::mem::take(&mut state.items);
        let mut items = HashMap::with_capacity(old.len());
        for obj in list {
            let key = with_object_key(&*obj, |k| match old.get_key_value(k) {
                Some((stored, _)) => stored.clone(),
                None => Key::from(k),
            });
            items.insert(key, obj);
        }
        drop(old);
        let State {
            items: slot,
            indices,
        } = &mut *state;
        *slot = items;
        indices.rebuild(slot.iter().map(|(k, v)| (k, &**v)));
    }

    /// The stored object with `obj`'s key.
    pub fn get(&self, obj: &K) -> Option<Arc<K>> {
        let state = self.inner.read();
        with_object_key(obj, |k| state.items.get(k).cloned())
    }

    /// The object stored under `key`.
    pub fn get_by_key(&self, key: &str) -> Option<Arc<K>> {
        self.inner.read().items.get(key).cloned()
    }

    /// Whether an object is stored under `key`.
    pub fn contains_key(&self, key: &str) -> bool {
        self.inner.read().items.contains_key(key)
    }

    /// Every stored object, in no particular order.
    pub fn list(&self) -> Vec<Arc<K>> {
        self.inner.read().items.values().cloned().collect()
    }

    /// Every key, in no particular order.
    pub fn list_keys(&self) -> Vec<Key> {
        self.inner.read().items.keys().cloned().collect()
    }

    /// The number of stored objects.
    pub fn len(&self) -> usize {
        self.inner.read().items.len()
    }

    /// Whether the store is empty.
    pub fn is_empty(&self) -> bool {
        self.inner.read().items.is_empty()
    }

    /// The stored objects that share at least one value of index `name` with `obj`.
    ///
    /// `obj` need not be stored: its values are computed with the index function. With
    /// several values the result is the union, each object once, in no particular order.
    ///
    /// # Errors
    ///
    /// [`IndexError::UnknownIndex`] if no index is named `name`.
    pub fn index(&self, name: &str, obj: &K) -> Result<Vec<Arc<K>>, IndexError> {
        let state = self.inner.read();
        let func = state.indices.func(name)?;
        let index = state.indices.get(name)?;
        let mut buf = ValueBuf::default();
        func.compute(obj, &mut buf);
        let values: Vec<&str> = buf.iter().collect();
        let mut out = Vec::new();
        if values.len() == 1 {
            if let Some(set) = index.get(values[0]) {
                out.reserve(set.len());
                out.extend(set.iter().filter_map(|k| state.items.get(k).cloned()));
            }
        } else {
            let mut seen: HashSet<&str> = HashSet::new();
            for value in values {
                for key in index.get(value).into_iter().flat_map(|s| s.iter()) {
                    if seen.insert(key) {
                        out.extend(state.items.get(key).cloned());
                    }
                }
            }
        }
        Ok(out)
    }

    /// The stored objects whose index `name` has `value`, in no particular order.
    ///
    /// # Errors
    ///
    /// [`IndexError::UnknownIndex`] if no index is named `name`.
    pub fn by_index(&self, name: &str, value: &str) -> Result<Vec<Arc<K>>, IndexError> {
        let state = self.inner.read();
        let Some(set) = state.indices.get(name)?.get(value) else {
            return Ok(Vec::new());
        };
        let mut out = Vec::with_capacity(set.len());
        out.extend(set.iter().filter_map(|k| state.items.get(k).cloned()));
        Ok(out)
    }

    /// The keys of the objects whose index `name` has `value`, sorted.
    ///
    /// # Errors
    ///
    /// [`IndexError::UnknownIndex`] if no index is named `name`.
    pub fn index_keys(&self, name: &str, value: &str) -> Result<Vec<Key>, IndexError> {
        let state = self.inner.read();
        let mut keys: Vec<Key> = match state.indices.get(name)?.get(value) {
            Some(set) => set.iter().cloned().collect(),
            None => Vec::new(),
        };
        drop(state);
        keys.sort_unstable();
        Ok(keys)
    }

    /// Every value of index `name` that at least one object has, in no particular order.
    ///
    /// An unknown index name gives an empty list, as in client-go.
    pub fn list_index_func_values(&self, name: &str) -> Vec<Arc<str>> {
        let state = self.inner.read();
        match state.indices.get(name) {
            Ok(index) => index.values().cloned().collect(),
            Err(_) => Vec::new(),
        }
    }

    /// Registers more indices, and indexes the objects already stored with them.
    ///
    /// # Errors
    ///
    /// [`IndexError::Conflict`] if any name is already registered; then nothing is added.
    pub fn add_indexers(&self, indexers: Indexers<K>) -> Result<(), IndexError> {
        let mut state = self.inner.write();
        let State { items, indices } = &mut *state;
        indices.add_indexers(indexers, items.iter().map(|(k, v)| (k, &**v)))
    }

    /// The registered index functions, by name.
    pub fn get_indexers(&self) -> Indexers<K> {
        self.inner.read().indices.indexers()
    }
}

// === impl State ===

impl<K> State<K> {
    fn upsert(&mut self, key: &Key, obj: Arc<K>) -> Option<Arc<K>> {
        let State { items, indices } = self;
        let old = match items.get_mut(&**key) {
            Some(slot) => Some(std::mem::replace(slot, obj.clone())),
            None => {
                items.insert(key.clone(), obj.clone());
                None
            }
        };
        indices.update(key, old.as_deref(), Some(&*obj), || {
            items
                .get_key_value(&**key)
                .map_or_else(|| key.clone(), |(stored, _)| stored.clone())
        });
        old
    }

    fn remove(&mut self, key: &str) -> Option<Arc<K>> {
        let old = self.items.remove(key)?;
        self.indices
            .update(key, Some(&*old), None, || Key::from(key));
        Some(old)
    }
}

// === impl KnownObjects for Indexer ===

impl<K: Object> KnownObjects<K> for Indexer<K> {
    fn list_keys(&self) -> Vec<Key> {
        Indexer::list_keys(self)
    }

    fn get_by_key(&self, key: &str) -> Option<Arc<K>> {
        Indexer::get_by_key(self, key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::{IndexFunc, NAMESPACE_INDEX, namespace_indexers};
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, BTreeSet};

    /// A ConfigMap with labels; cluster-scoped when `ns` is empty.
    fn cm(ns: &str, name: &str, labels: &[&str]) -> Arc<ConfigMap> {
        Arc::new(ConfigMap {
            metadata: ObjectMeta {
                namespace: (!ns.is_empty()).then(|| ns.to_owned()),
                name: Some(name.to_owned()),
                labels: Some(
                    labels
                        .iter()
                        .map(|l| (l.to_string(), String::new()))
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        })
    }

    /// Index by label name: several values per object, or none.
    fn by_label() -> IndexFunc<ConfigMap> {
        IndexFunc::new(|obj: &ConfigMap, out| {
            for label in obj.metadata.labels.iter().flatten() {
                out.push(label.0);
            }
        })
    }

    fn store() -> Indexer<ConfigMap> {
        let mut indexers = namespace_indexers();
        indexers.insert("label".into(), by_label());
        Indexer::new(indexers)
    }

    fn keys(objs: &[Arc<ConfigMap>]) -> Vec<String> {
        let mut keys: Vec<String> = objs
            .iter()
            .map(|o| crate::key_of(&**o).to_string())
            .collect();
        keys.sort();
        keys
    }

    fn strs(keys: &[Key]) -> Vec<&str> {
        keys.iter().map(|k| &**k).collect()
    }

    fn values(store: &Indexer<ConfigMap>, name: &str) -> Vec<String> {
        let mut values: Vec<String> = store
            .list_index_func_values(name)
            .iter()
            .map(|v| v.to_string())
            .collect();
        values.sort();
        values
    }

    #[test]
    fn get_returns_the_stored_arc_not_a_copy() {
        let store = store();
        let obj = cm("a", "x", &[]);
        assert!(store.add(obj.clone()).is_none());
        assert!(Arc::ptr_eq(&store.get_by_key("a/x").unwrap(), &obj));
        assert!(Arc::ptr_eq(
            &store.get(&cm("a", "x", &["other"])).unwrap(),
            &obj
        ));
        assert!(store.contains_key("a/x"));
        assert_eq!(store.len(), 1);
    }

    #[test]
    fn update_replaces_and_returns_the_previous_object() {
        let store = store();
        let first = cm("a", "x", &[]);
        store.add(first.clone());
        let previous = store.update(cm("a", "x", &["l"])).unwrap();
        assert!(Arc::ptr_eq(&previous, &first));
        assert_eq!(store.len(), 1);
    }

    #[test]
    fn delete_of_an_absent_key_does_nothing() {
        let store = store();
        store.add(cm("a", "x", &["l"]));
        assert!(store.delete(&cm("a", "y", &[])).is_none());
        assert!(store.remove("b/x").is_none());
        assert_eq!(store.len(), 1);
        assert_eq!(values(&store, "label"), ["l"]);
    }

    #[test]
    fn update_moves_the_key_between_index_values() {
        let store = store();
        store.add(cm("a", "x", &["old", "both"]));
        store.update(cm("a", "x", &["both", "new"]));
        assert!(store.index_keys("label", "old").unwrap().is_empty());
        assert_eq!(strs(&store.index_keys("label", "both").unwrap()), ["a/x"]);
        assert_eq!(strs(&store.index_keys("label", "new").unwrap()), ["a/x"]);
    }

    #[test]
    fn delete_removes_emptied_value_sets_from_the_index() {
        let store = store();
        store.add(cm("a", "x", &["l"]));
        store.add(cm("b", "y", &["l"]));
        store.delete(&cm("a", "x", &[]));
        assert_eq!(values(&store, NAMESPACE_INDEX), ["b"]);
        assert_eq!(values(&store, "label"), ["l"]);
        store.remove("b/y");
        assert!(values(&store, NAMESPACE_INDEX).is_empty());
        assert!(values(&store, "label").is_empty());
    }

    #[test]
    fn update_removes_a_value_set_it_empties() {
        let store = store();
        store.add(cm("a", "x", &["old"]));
        store.update(cm("a", "x", &[]));
        assert!(values(&store, "label").is_empty());
    }

    #[test]
    fn index_keys_are_sorted() {
        let store = store();
        for name in ["m", "c", "x", "a", "q"] {
            store.add(cm("ns", name, &[]));
        }
        assert_eq!(
            strs(&store.index_keys(NAMESPACE_INDEX, "ns").unwrap()),
            ["ns/a", "ns/c", "ns/m", "ns/q", "ns/x"]
        );
    }

    #[test]
    fn by_index_returns_the_objects_with_the_value() {
        let store = store();
        store.add(cm("a", "x", &["l"]));
        store.add(cm("a", "y", &[]));
        store.add(cm("b", "z", &["l"]));
        assert_eq!(
            keys(&store.by_index(NAMESPACE_INDEX, "a").unwrap()),
            ["a/x", "a/y"]
        );
        assert_eq!(keys(&store.by_index("label", "l").unwrap()), ["a/x", "b/z"]);
        assert!(store.by_index("label", "absent").unwrap().is_empty());
    }

    #[test]
    fn index_returns_the_union_for_several_values_each_object_once() {
        let store = store();
        store.add(cm("a", "x", &["p", "q"]));
        store.add(cm("a", "y", &["q"]));
        store.add(cm("a", "z", &["r"]));
        let probe = cm("elsewhere", "probe", &["p", "q"]);
        assert_eq!(keys(&store.index("label", &probe).unwrap()), ["a/x", "a/y"]);
        let single = cm("a", "probe", &[]);
        assert_eq!(
            keys(&store.index(NAMESPACE_INDEX, &single).unwrap()).len(),
            3
        );
    }

    #[test]
    fn unknown_index_name_is_an_error_for_queries() {
        let store = store();
        let err = IndexError::UnknownIndex("nope".into());
        assert_eq!(store.by_index("nope", "v").unwrap_err(), err);
        assert_eq!(store.index_keys("nope", "v").unwrap_err(), err);
        assert_eq!(store.index("nope", &cm("a", "x", &[])).unwrap_err(), err);
        assert_eq!(err.to_string(), "index with name nope does not exist");
    }

    #[test]
    fn list_index_func_values_of_an_unknown_index_is_empty() {
        let store = store();
        store.add(cm("a", "x", &[]));
        assert!(store.list_index_func_values("nope").is_empty());
    }

    #[test]
    fn namespace_index_files_cluster_scoped_objects_under_the_empty_value() {
        let store = store();
        store.add(cm("", "node-1", &[]));
        assert_eq!(
            strs(&store.index_keys(NAMESPACE_INDEX, "").unwrap()),
            ["node-1"]
        );
    }

    #[test]
    fn add_indexers_on_a_non_empty_store_indexes_the_existing_objects() {
        let store: Indexer<ConfigMap> = Indexer::default();
        store.add(cm("a", "x", &["l"]));
        store.add(cm("b", "y", &[]));
        store
            .add_indexers(Indexers::from([("label".to_owned(), by_label())]))
            .unwrap();
        assert_eq!(strs(&store.index_keys("label", "l").unwrap()), ["a/x"]);
        store.add(cm("b", "y", &["l"]));
        assert_eq!(
            strs(&store.index_keys("label", "l").unwrap()),
            ["a/x", "b/y"]
        );
    }

    #[test]
    fn add_indexers_with_a_registered_name_fails_and_adds_nothing() {
        let store = store();
        let err = store
            .add_indexers(Indexers::from([
                ("label".to_owned(), by_label()),
                ("fresh".to_owned(), by_label()),
            ]))
            .unwrap_err();
        assert_eq!(err, IndexError::Conflict(vec!["label".into()]));
        assert_eq!(err.to_string(), "indexer conflict: label");
        let mut names: Vec<String> = store.get_indexers().into_keys().collect();
        names.sort();
        assert_eq!(names, ["label", NAMESPACE_INDEX]);
    }

    #[test]
    fn replace_swaps_the_contents_and_rebuilds_the_indices() {
        let store = store();
        store.add(cm("a", "x", &["old"]));
        store.add(cm("a", "y", &[]));
        store.replace([cm("b", "z", &["new"]), cm("a", "y", &["new"])], "7");
        let mut listed = strs(&store.list_keys())
            .iter()
            .map(|k| k.to_string())
            .collect::<Vec<_>>();
        listed.sort();
        assert_eq!(listed, ["a/y", "b/z"]);
        assert_eq!(keys(&store.list()), ["a/y", "b/z"]);
        assert_eq!(values(&store, "label"), ["new"]);
        assert_eq!(values(&store, NAMESPACE_INDEX), ["a", "b"]);
    }

    #[test]
    fn insert_keeps_the_callers_key_allocation_for_the_store_and_its_indices() {
        let store = store();
        let key = Key::from("a/x");
        store.insert(&key, cm("a", "x", &["l"]));
        assert!(Arc::ptr_eq(&store.list_keys()[0], &key));
        assert!(Arc::ptr_eq(
            &store.index_keys("label", "l").unwrap()[0],
            &key
        ));
        // A later update with a fresh key allocation still indexes under the stored one.
        store.insert(&Key::from("a/x"), cm("a", "x", &["m"]));
        assert!(Arc::ptr_eq(
            &store.index_keys("label", "m").unwrap()[0],
            &key
        ));
    }

    #[test]
    fn clones_share_one_store() {
        let store = store();
        let other = store.clone();
        other.add(cm("a", "x", &[]));
        assert_eq!(store.len(), 1);
        assert!(!store.is_empty());
    }

    // --- model check: the indices always equal a from-scratch computation ---

    #[derive(Debug, Clone)]
    enum Op {
        Upsert(usize, usize, Vec<usize>),
        Delete(usize, usize),
        Replace(Vec<(usize, usize, Vec<usize>)>),
        AddIndexer,
    }

    const NAMESPACES: [&str; 3] = ["", "a", "b"];
    const NAMES: [&str; 3] = ["x", "y", "z"];
    const LABELS: [&str; 4] = ["p", "q", "r", "s"];

    fn object() -> impl Strategy<Value = (usize, usize, Vec<usize>)> {
        (0..3usize, 0..3usize, prop::collection::vec(0..4usize, 0..4))
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => object().prop_map(|(n, m, l)| Op::Upsert(n, m, l)),
            3 => (0..3usize, 0..3usize).prop_map(|(n, m)| Op::Delete(n, m)),
            1 => prop::collection::vec(object(), 0..5).prop_map(Op::Replace),
            1 => Just(Op::AddIndexer),
        ]
    }

    fn build(n: usize, m: usize, l: &[usize]) -> Arc<ConfigMap> {
        let labels: Vec<&str> = l.iter().map(|&i| LABELS[i]).collect();
        cm(NAMESPACES[n], NAMES[m], &labels)
    }

    /// Index `func` recomputed from `model`: value → sorted keys.
    fn expected(
        model: &BTreeMap<String, Arc<ConfigMap>>,
        func: &IndexFunc<ConfigMap>,
    ) -> BTreeMap<String, Vec<String>> {
        let mut index: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (key, obj) in model {
            for value in func.values(obj) {
                index.entry(value).or_default().insert(key.clone());
            }
        }
        index
            .into_iter()
            .map(|(v, keys)| (v, keys.into_iter().collect()))
            .collect()
    }

    proptest! {
        #[test]
        fn indices_always_match_a_recomputation_from_the_objects(ops in prop::collection::vec(op(), 1..40)) {
            let store: Indexer<ConfigMap> = Indexer::new(namespace_indexers());
            let mut model: BTreeMap<String, Arc<ConfigMap>> = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Upsert(n, m, l) => {
                        let obj = build(n, m, &l);
                        model.insert(crate::key_of(&*obj).to_string(), obj.clone());
                        store.update(obj);
                    }
                    Op::Delete(n, m) => {
                        let obj = build(n, m, &[]);
                        model.remove(&*crate::key_of(&*obj));
                        store.delete(&obj);
                    }
                    Op::Replace(objs) => {
                        let objs: Vec<_> = objs.iter().map(|(n, m, l)| build(*n, *m, l)).collect();
                        model = objs.iter().map(|o| (crate::key_of(&**o).to_string(), o.clone())).collect();
                        store.replace(objs, "1");
                    }
                    Op::AddIndexer => {
                        // Also an index whose function repeats values and gives every object
                        // a shared one.
                        let repeating = IndexFunc::new(|obj: &ConfigMap, out| {
                            out.push("all");
                            for label in obj.metadata.labels.iter().flatten() {
                                out.push(label.0);
                                out.push(label.0);
                            }
                        });
                        let _ = store.add_indexers(Indexers::from([
                            ("label".to_owned(), by_label()),
                            ("repeating".to_owned(), repeating),
                        ]));
                    }
                }
                let mut stored: Vec<String> = store.list_keys().iter().map(|k| k.to_string()).collect();
                stored.sort();
                prop_assert_eq!(stored, model.keys().cloned().collect::<Vec<_>>());
                for (name, func) in store.get_indexers() {
                    let want = expected(&model, &func);
                    prop_assert_eq!(values(&store, &name), want.keys().cloned().collect::<Vec<_>>());
                    for (value, keys) in want {
                        let got: Vec<String> = store.index_keys(&name, &value).unwrap().iter().map(|k| k.to_string()).collect();
                        prop_assert_eq!(got, keys);
                    }
                }
            }
        }
    }
}
