//! Index functions, and the indices they maintain: index value → keys of matching objects.
//!
//! # Implementation Details
//!
//! An index function does not return a `Vec<String>`: it pushes its values into an
//! [`IndexValues`] sink, which appends them to a reusable text buffer. Updating an object
//! computes the old and the new values into two such buffers owned by [`Indices`] (written
//! under the store's write lock), so keeping an index current allocates nothing unless a value
//! set is created. When the old and new values are the same single value — the common case,
//! e.g. the namespace of an updated object — the index is not touched at all (client-go's
//! shortcut). Otherwise only the values that differ are removed and added.
//!
//! A value's key set is [`KeySet::One`] while it holds one key (no allocation beyond the
//! shared key itself: an index with one value per object, like an owner UID, costs one map
//! entry per object) and a boxed hash set from two keys on. Sets that become empty are removed
//! from the index, so [`list_index_func_values`](crate::Indexer::list_index_func_values) only
//! reports values that still match something.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use crate::object::{Key, Object};

/// The name of the built-in namespace index (client-go's `NamespaceIndex`).
pub const NAMESPACE_INDEX: &str = "namespace";

/// Errors from index queries and from adding indexers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IndexError {
    /// No index function is registered under this name.
    #[error("index with name {0} does not exist")]
    UnknownIndex(String),
    /// `add_indexers` was given names that are already registered; nothing was added.
    #[error("indexer conflict: {}", .0.join(", "))]
    Conflict(Vec<String>),
}

/// Index functions by index name (client-go's `Indexers`).
pub type Indexers<K> = HashMap<String, IndexFunc<K>>;

/// The values an index function computes for one object.
///
/// An index function calls [`push`](Self::push) once per value. Pushing the same value twice
/// is harmless: a key is in a value's set at most once.
pub struct IndexValues<'a> {
    buf: &'a mut ValueBuf,
}

impl IndexValues<'_> {
    /// Adds `value` to the object's index values.
    pub fn push(&mut self, value: &str) {
        self.buf.push(value);
    }
}

/// A function from an object to its index values (client-go's `IndexFunc`).
///
/// ```
/// use informer::{IndexFunc, Object};
/// use k8s_openapi::api::core::v1::Pod;
///
/// // Index pods by the node they run on; unscheduled pods have no value.
/// let by_node = IndexFunc::new(|pod: &Pod, out| {
///     if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
///         out.push(node);
///     }
/// });
/// # let _ = by_node;
/// ```
pub struct IndexFunc<K>(Arc<DynIndexFn<K>>);

/// The function behind an [`IndexFunc`].
type DynIndexFn<K> = dyn Fn(&K, &mut IndexValues<'_>) + Send + Sync;

impl<K> IndexFunc<K> {
    /// Wraps a function that pushes an object's index values into the sink it is given.
    ///
    /// The function must be deterministic: the store calls it again on the stored object to
    /// find which values to remove when the object changes.
    pub fn new<F>(f: F) -> Self
    where
        F: Fn(&K, &mut IndexValues<'_>) + Send + Sync + 'static,
    {
        Self(Arc::new(f))
    }

    /// The index values of `obj`, as owned strings (for tests and debugging; the store does
    /// not allocate them).
    pub fn values(&self, obj: &K) -> Vec<String> {
        let mut buf = ValueBuf::default();
        self.compute(obj, &mut buf);
        buf.iter().map(str::to_owned).collect()
    }

    /// Computes `obj`'s values into `buf`, replacing what it held.
    pub(crate) fn compute(&self, obj: &K, buf: &mut ValueBuf) {
        buf.clear();
        (self.0)(obj, &mut IndexValues { buf });
    }
}

impl<K> Clone for IndexFunc<K> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<K> fmt::Debug for IndexFunc<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("IndexFunc")
    }
}

/// The namespace index function (client-go's `MetaNamespaceIndexFunc`): one value, the
/// object's namespace, which is `""` for a cluster-scoped object.
pub fn namespace_index_func<K: Object>() -> IndexFunc<K> {
    IndexFunc::new(|obj: &K, out| out.push(obj.namespace().unwrap_or("")))
}

/// Indexers holding only the namespace index, under [`NAMESPACE_INDEX`].
pub fn namespace_indexers<K: Object>() -> Indexers<K> {
    HashMap::from([(NAMESPACE_INDEX.to_owned(), namespace_index_func())])
}

// === impl ValueBuf ===

/// A reusable list of strings: their text back to back, and where each one ends.
#[derive(Default)]
pub(crate) struct ValueBuf {
    text: String,
    ends: Vec<usize>,
}

impl ValueBuf {
    fn clear(&mut self) {
        self.text.clear();
        self.ends.clear();
    }

    fn push(&mut self, value: &str) {
        self.text.push_str(value);
        self.ends.push(self.text.len());
    }

    fn len(&self) -> usize {
        self.ends.len()
    }

    fn get(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.text[start..self.ends[i]]
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &str> {
        (0..self.len()).map(|i| self.get(i))
    }

    fn contains(&self, value: &str) -> bool {
        self.iter().any(|v| v == value)
    }
}

// === impl KeySet ===

/// The keys of the objects that have one index value.
pub(crate) enum KeySet {
    /// Exactly one key: no allocation of its own.
    One(Key),
    /// Two keys or more. Boxed so a `KeySet` is 16 bytes, not the 40 or more of a hash set: most
    /// values of a per-object index (an owner UID) hold a single key.
    Many(Box<hashbrown::HashSet<Key>>),
}

impl KeySet {
    fn insert(&mut self, key: &Key) {
        match self {
            KeySet::One(existing) if **existing == **key => {}
            KeySet::One(existing) => {
                let set = hashbrown::HashSet::from([existing.clone(), key.clone()]);
                *self = KeySet::Many(Box::new(set));
            }
            KeySet::Many(set) => {
                if !set.contains(&**key) {
                    set.insert(key.clone());
                }
            }
        }
    }

    /// Removes `key`; returns true if the set is now empty (the caller drops it).
    fn remove(&mut self, key: &str) -> bool {
        match self {
            KeySet::One(existing) => &**existing == key,
            KeySet::Many(set) => {
                set.remove(key);
                if set.len() == 1 {
                    let last = set.iter().next().cloned();
                    if let Some(last) = last {
                        *self = KeySet::One(last);
                    }
                }
                set_is_empty(self)
            }
        }
    }

    /// The keys, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Key> {
        let (one, many) = match self {
            KeySet::One(key) => (Some(key), None),
            KeySet::Many(set) => (None, Some(set.iter())),
        };
        one.into_iter().chain(many.into_iter().flatten())
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            KeySet::One(_) => 1,
            KeySet::Many(set) => set.len(),
        }
    }
}

fn set_is_empty(set: &KeySet) -> bool {
    match set {
        KeySet::One(_) => false,
        KeySet::Many(set) => set.is_empty(),
    }
}

// === impl Index ===

/// One index: value → keys of the objects that have it. No value maps to an empty set.
#[derive(Default)]
pub(crate) struct Index {
    values: hashbrown::HashMap<Arc<str>, KeySet>,
}

impl Index {
    fn add(&mut self, value: &str, key: &Key) {
        match self.values.get_mut(value) {
            Some(set) => set.insert(key),
            None => {
                self.values
                    .insert(Arc::from(value), KeySet::One(key.clone()));
            }
        }
    }

    fn remove(&mut self, value: &str, key: &str) {
        if let Some(set) = self.values.get_mut(value)
            && set.remove(key)
        {
            self.values.remove(value);
        }
    }

    /// The keys that have `value`, if any.
    pub(crate) fn get(&self, value: &str) -> Option<&KeySet> {
        self.values.get(value)
    }

    /// Every value that some object has.
    pub(crate) fn values(&self) -> impl Iterator<Item = &Arc<str>> {
        self.values.keys()
    }
}

// === impl Indices ===

/// One registered index: its name, its function and its contents.
struct Entry<K> {
    name: String,
    func: IndexFunc<K>,
    index: Index,
}

/// All indices of a store, with the scratch buffers used to update them.
///
/// Indices are few (one to three in practice), so they live in a vector searched by name.
pub(crate) struct Indices<K> {
    entries: Vec<Entry<K>>,
    old: ValueBuf,
    new: ValueBuf,
}

impl<K> Default for Indices<K> {
    fn default() -> Self {
        Self {
            entries: Vec::new(),
            old: ValueBuf::default(),
            new: ValueBuf::default(),
        }
    }
}

impl<K> Indices<K> {
    /// Registers `indexers` and indexes every object of `items` with them.
    ///
    /// # Errors
    ///
    /// [`IndexError::Conflict`] if a name is already registered; nothing is added then.
    pub(crate) fn add_indexers<'a>(
        &mut self,
        indexers: Indexers<K>,
        items: impl Iterator<Item = (&'a Key, &'a K)> + Clone,
    ) -> Result<(), IndexError>
    where
        K: 'a,
    {
        let mut conflicts: Vec<String> = indexers
            .keys()
            .filter(|name| self.position(name).is_some())
            .cloned()
            .collect();
        if !conflicts.is_empty() {
            conflicts.sort();
            return Err(IndexError::Conflict(conflicts));
        }
        for (name, func) in indexers {
            let mut index = Index::default();
            for (key, obj) in items.clone() {
                func.compute(obj, &mut self.new);
                for value in self.new.iter() {
                    index.add(value, key);
                }
            }
            self.entries.push(Entry { name, func, index });
        }
        Ok(())
    }

    /// Clears every index and indexes `items` from scratch.
    pub(crate) fn rebuild<'a>(&mut self, items: impl Iterator<Item = (&'a Key, &'a K)> + Clone)
    where
        K: 'a,
    {
        for entry in &mut self.entries {
            entry.index = Index::default();
            for (key, obj) in items.clone() {
                entry.func.compute(obj, &mut self.new);
                for value in self.new.iter() {
                    entry.index.add(value, key);
                }
            }
        }
    }

    /// Moves `key` from the index values of `old` to those of `new`.
    ///
    /// `old` is `None` for an insert, `new` is `None` for a delete. `stored_key` gives the
    /// store's own `Arc` for `key`, and is only called when a value gains the key, so index
    /// sets share the store's allocation.
    pub(crate) fn update(
        &mut self,
        key: &str,
        old: Option<&K>,
        new: Option<&K>,
        stored_key: impl Fn() -> Key,
    ) {
        let Indices {
            entries,
            old: old_values,
            new: new_values,
        } = self;
        let mut shared: Option<Key> = None;
        for entry in entries {
            old_values.clear();
            if let Some(old) = old {
                entry.func.compute(old, old_values);
            }
            new_values.clear();
            if let Some(new) = new {
                entry.func.compute(new, new_values);
            }
            if old_values.len() == 1
                && new_values.len() == 1
                && old_values.get(0) == new_values.get(0)
            {
                continue;
            }
            // Diff small lists pairwise; past that, remove everything and add everything back
            // (client-go's approach), which ends in the same state without quadratic work.
            let diff = old_values.len() * new_values.len() <= 64;
            for value in old_values.iter() {
                if !diff || !new_values.contains(value) {
                    entry.index.remove(value, key);
                }
            }
            for value in new_values.iter() {
                if !diff || !old_values.contains(value) {
                    let key = shared.get_or_insert_with(&stored_key);
                    entry.index.add(value, key);
                }
            }
        }
    }

    fn position(&self, name: &str) -> Option<usize> {
        self.entries.iter().position(|e| e.name == name)
    }

    /// The index registered as `name`.
    pub(crate) fn get(&self, name: &str) -> Result<&Index, IndexError> {
        self.position(name)
            .map(|i| &self.entries[i].index)
            .ok_or_else(|| IndexError::UnknownIndex(name.to_owned()))
    }

    /// The function registered as `name`.
    pub(crate) fn func(&self, name: &str) -> Result<&IndexFunc<K>, IndexError> {
        self.position(name)
            .map(|i| &self.entries[i].func)
            .ok_or_else(|| IndexError::UnknownIndex(name.to_owned()))
    }

    /// A copy of the registered index functions.
    pub(crate) fn indexers(&self) -> Indexers<K> {
        self.entries
            .iter()
            .map(|e| (e.name.clone(), e.func.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> Key {
        Key::from(s)
    }

    #[test]
    fn key_set_grows_from_one_to_many_and_collapses_back() {
        let mut set = KeySet::One(key("a"));
        set.insert(&key("a"));
        assert_eq!(set.len(), 1);
        set.insert(&key("b"));
        assert!(matches!(set, KeySet::Many(_)));
        assert_eq!(set.len(), 2);
        assert!(!set.remove("a"));
        assert!(matches!(&set, KeySet::One(k) if &**k == "b"));
        assert!(set.remove("b"));
    }

    #[test]
    fn removing_an_absent_key_keeps_the_set() {
        let mut set = KeySet::One(key("a"));
        assert!(!set.remove("zzz"));
        assert_eq!(set.len(), 1);
    }

    #[test]
    fn index_drops_value_when_its_last_key_leaves() {
        let mut index = Index::default();
        index.add("v", &key("a"));
        index.add("v", &key("b"));
        index.remove("v", "a");
        assert_eq!(index.values().count(), 1);
        index.remove("v", "b");
        assert_eq!(index.values().count(), 0);
        assert!(index.get("v").is_none());
    }

    #[test]
    fn index_func_values_lists_what_the_function_pushed() {
        let f = IndexFunc::new(|s: &String, out| {
            for part in s.split(',') {
                out.push(part);
            }
        });
        assert_eq!(f.values(&"x,y,".to_owned()), ["x", "y", ""]);
    }

    #[test]
    fn update_with_many_values_ends_in_the_same_state_as_a_diff() {
        // 9 × 9 values takes the remove-all/add-all path.
        let f = IndexFunc::new(|v: &Vec<String>, out| v.iter().for_each(|s| out.push(s)));
        let mut indices = Indices::default();
        let k = key("k");
        indices
            .add_indexers(HashMap::from([("i".to_owned(), f)]), std::iter::empty())
            .unwrap();
        let old: Vec<String> = (0..9).map(|i| i.to_string()).collect();
        let new: Vec<String> = (5..14).map(|i| i.to_string()).collect();
        indices.update("k", None, Some(&old), || k.clone());
        indices.update("k", Some(&old), Some(&new), || k.clone());
        let index = indices.get("i").unwrap();
        let mut values: Vec<&str> = index.values().map(|v| &**v).collect();
        values.sort_by_key(|v| v.parse::<u32>().unwrap());
        let expected: Vec<String> = (5..14).map(|i| i.to_string()).collect();
        assert_eq!(values, expected);
    }
}
