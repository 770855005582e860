//! [`Lister`] and [`NamespaceLister`]: read-only queries on an informer's cache — by key, by
//! namespace, by index, by label selector (client-go's generated listers).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::index::{IndexError, NAMESPACE_INDEX};
use crate::object::Object;
use crate::store::Indexer;

/// A label selector that cannot be evaluated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// A `matchExpressions` operator other than `In`, `NotIn`, `Exists`, `DoesNotExist`.
    #[error("{0:?} is not a valid label selector operator")]
    UnknownOperator(String),
    /// `In` or `NotIn` without values, or `Exists` or `DoesNotExist` with some.
    #[error("label selector operator {operator} on {key:?}: values must be {}", if *.needs_values { "non-empty" } else { "empty" })]
    BadValues {
        /// The expression's key.
        key: String,
        /// The expression's operator.
        operator: String,
        /// Whether the operator needs values.
        needs_values: bool,
    },
}

/// Whether `labels` match `selector` (an empty selector matches everything): every
/// `matchLabels` pair is present, and every `matchExpressions` requirement holds.
///
/// # Errors
///
/// [`SelectorError`] if an expression is malformed, as the API server would reject it.
///
/// ```
/// use std::collections::BTreeMap;
/// use informer::selector_matches;
/// use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
///
/// let selector = LabelSelector {
///     match_labels: Some(BTreeMap::from([("app".to_owned(), "web".to_owned())])),
///     match_expressions: Some(vec![LabelSelectorRequirement {
///         key: "tier".into(),
///         operator: "NotIn".into(),
///         values: Some(vec!["canary".into()]),
///     }]),
/// };
/// let labels = BTreeMap::from([("app".to_owned(), "web".to_owned())]);
/// assert!(selector_matches(&selector, Some(&labels)).unwrap());
/// assert!(!selector_matches(&selector, None).unwrap());
/// ```
pub fn selector_matches(
    selector: &LabelSelector,
    labels: Option<&BTreeMap<String, String>>,
) -> Result<bool, SelectorError> {
    matches_by(selector, |key| {
        labels
            .and_then(|l| l.get(key))
            .map(|v| Cow::Borrowed(v.as_str()))
    })
}

/// [`selector_matches`] over labels looked up one key at a time.
fn matches_by<'a>(
    selector: &LabelSelector,
    get: impl Fn(&str) -> Option<Cow<'a, str>>,
) -> Result<bool, SelectorError> {
    let mut matched = true;
    for (key, value) in selector.match_labels.iter().flatten() {
        matched &= get(key).as_deref() == Some(value.as_str());
    }
    for req in selector.match_expressions.iter().flatten() {
        let values = req.values.as_deref().unwrap_or_default();
        let needs_values = matches!(req.operator.as_str(), "In" | "NotIn");
        if !matches!(
            req.operator.as_str(),
            "In" | "NotIn" | "Exists" | "DoesNotExist"
        ) {
            return Err(SelectorError::UnknownOperator(req.operator.clone()));
        }
        if needs_values == values.is_empty() {
            return Err(SelectorError::BadValues {
                key: req.key.clone(),
                operator: req.operator.clone(),
                needs_values,
            });
        }
        let value = get(&req.key);
        matched &= match req.operator.as_str() {
            "In" => value.is_some_and(|v| values.iter().any(|x| *x == *v)),
            "NotIn" => value.is_none_or(|v| !values.iter().any(|x| *x == *v)),
            "Exists" => value.is_some(),
            _ => value.is_none(),
        };
    }
    Ok(matched)
}

fn select<K: Object>(
    objects: Vec<Arc<K>>,
    selector: &LabelSelector,
) -> Result<Vec<Arc<K>>, SelectorError> {
    // Every expression is checked, whatever the labels: a malformed selector fails even on an
    // empty cache.
    selector_matches(selector, None)?;
    let mut out = Vec::with_capacity(objects.len());
    for obj in objects {
        if matches_by(selector, |key| obj.label(key))? {
            out.push(obj);
        }
    }
    Ok(out)
}

// === impl Lister ===

/// Read-only queries on an informer's cache
/// ([`SharedIndexInformer::lister`](crate::SharedIndexInformer::lister)); a cheap handle.
///
/// Every answer is a snapshot of shared `Arc<K>`s: cheap to take, never copied, never to be
/// mutated. Results come in no particular order.
///
/// ```
/// use std::sync::Arc;
/// use informer::{Indexer, Lister, namespace_indexers};
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
///
/// let cm = |ns: &str, name: &str| Arc::new(ConfigMap {
///     metadata: ObjectMeta { namespace: Some(ns.into()), name: Some(name.into()), ..Default::default() },
///     ..Default::default()
/// });
/// let indexer = Indexer::new(namespace_indexers());
/// indexer.add(cm("a", "one"));
/// indexer.add(cm("b", "two"));
///
/// let lister = Lister::new(indexer);
/// assert_eq!(lister.list().len(), 2);
/// assert!(lister.get("a/one").is_some());
/// assert!(lister.namespaced("b").get("two").is_some());
/// assert!(lister.namespaced("b").get("one").is_none());
/// ```
pub struct Lister<K> {
    indexer: Indexer<K>,
}

impl<K> Clone for Lister<K> {
    fn clone(&self) -> Self {
        Lister {
            indexer: self.indexer.clone(),
        }
    }
}

impl<K> fmt::Debug for Lister<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lister")
            .field("indexer", &self.indexer)
            .finish()
    }
}

impl<K: Object> Lister<K> {
    /// A lister over `indexer`.
    pub fn new(indexer: Indexer<K>) -> Self {
        Lister { indexer }
    }

    /// Every cached object.
    pub fn list(&self) -> Vec<Arc<K>> {
        self.indexer.list()
    }

    /// The cached objects whose labels match `selector`.
    ///
    /// # Errors
    ///
    /// [`SelectorError`] if the selector is malformed.
    pub fn select(&self, selector: &LabelSelector) -> Result<Vec<Arc<K>>, SelectorError> {
        select(self.list(), selector)
    }

    /// The object under `key`: `namespace/name`, or `name` for a cluster-scoped object.
    pub fn get(&self, key: &str) -> Option<Arc<K>> {
        self.indexer.get_by_key(key)
    }

    /// The objects whose index `index` has `value`.
    ///
    /// # Errors
    ///
    /// [`IndexError::UnknownIndex`] if there is no such index.
    pub fn by_index(&self, index: &str, value: &str) -> Result<Vec<Arc<K>>, IndexError> {
        self.indexer.by_index(index, value)
    }

    /// The objects in `namespace`.
    pub fn namespaced(&self, namespace: &str) -> NamespaceLister<K> {
        NamespaceLister {
            indexer: self.indexer.clone(),
            namespace: namespace.to_owned(),
        }
    }

    /// The indexer behind this lister.
    pub fn indexer(&self) -> &Indexer<K> {
        &self.indexer
    }
}

// === impl NamespaceLister ===

/// Read-only queries on the objects of one namespace
/// ([`Lister::namespaced`]). Uses the namespace index when the cache has one.
pub struct NamespaceLister<K> {
    indexer: Indexer<K>,
    namespace: String,
}

impl<K> Clone for NamespaceLister<K> {
    fn clone(&self) -> Self {
        NamespaceLister {
            indexer: self.indexer.clone(),
            namespace: self.namespace.clone(),
        }
    }
}

impl<K> fmt::Debug for NamespaceLister<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NamespaceLister")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl<K: Object> NamespaceLister<K> {
    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Every cached object in the namespace.
    pub fn list(&self) -> Vec<Arc<K>> {
        match self.indexer.by_index(NAMESPACE_INDEX, &self.namespace) {
            Ok(objects) => objects,
            Err(_) => {
                let mut all = self.indexer.list();
                all.retain(|o| o.namespace().unwrap_or("") == self.namespace);
                all
            }
        }
    }

    /// The cached objects in the namespace whose labels match `selector`.
    ///
    /// # Errors
    ///
    /// [`SelectorError`] if the selector is malformed.
    pub fn select(&self, selector: &LabelSelector) -> Result<Vec<Arc<K>>, SelectorError> {
        select(self.list(), selector)
    }

    /// The object `name` in the namespace.
    pub fn get(&self, name: &str) -> Option<Arc<K>> {
        if self.namespace.is_empty() {
            return self.indexer.get_by_key(name);
        }
        self.indexer
            .get_by_key(&format!("{}/{name}", self.namespace))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::{IndexFunc, namespace_indexers};
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelectorRequirement, ObjectMeta};

    fn cm(ns: &str, name: &str, labels: &[(&str, &str)]) -> Arc<ConfigMap> {
        Arc::new(ConfigMap {
            metadata: ObjectMeta {
                namespace: (!ns.is_empty()).then(|| ns.to_owned()),
                name: Some(name.into()),
                labels: (!labels.is_empty()).then(|| {
                    labels
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                        .collect()
                }),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        })
    }

    fn names(mut objs: Vec<Arc<ConfigMap>>) -> Vec<String> {
        objs.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        objs.iter()
            .map(|o| o.metadata.name.clone().unwrap_or_default())
            .collect()
    }

    fn lister(indexers: crate::Indexers<ConfigMap>) -> Lister<ConfigMap> {
        let indexer = Indexer::new(indexers);
        indexer.add(cm("a", "one", &[("app", "web"), ("tier", "front")]));
        indexer.add(cm("a", "two", &[("app", "db")]));
        indexer.add(cm("b", "three", &[("app", "web")]));
        indexer.add(cm("", "global", &[]));
        Lister::new(indexer)
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| (*v).to_owned()).collect()),
        }
    }

    fn selector(labels: &[(&str, &str)], exprs: Vec<LabelSelectorRequirement>) -> LabelSelector {
        LabelSelector {
            match_labels: (!labels.is_empty()).then(|| {
                labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect()
            }),
            match_expressions: (!exprs.is_empty()).then_some(exprs),
        }
    }

    #[test]
    fn list_get_and_namespaced_queries_see_the_cache() {
        let l = lister(namespace_indexers());
        assert_eq!(names(l.list()), ["global", "one", "three", "two"]);
        assert!(l.get("a/one").is_some());
        assert!(l.get("global").is_some());
        assert!(l.get("b/one").is_none());
        assert_eq!(names(l.namespaced("a").list()), ["one", "two"]);
        assert_eq!(names(l.namespaced("").list()), ["global"]);
        assert!(l.namespaced("b").get("three").is_some());
        assert!(l.namespaced("").get("global").is_some());
        assert!(l.namespaced("zzz").list().is_empty());
    }

    #[test]
    fn namespaced_list_works_without_the_namespace_index() {
        let l = lister(crate::Indexers::new());
        assert_eq!(names(l.namespaced("a").list()), ["one", "two"]);
    }

    #[test]
    fn by_index_uses_the_registered_index_and_rejects_unknown_ones() {
        let mut indexers = namespace_indexers();
        indexers.insert(
            "app".into(),
            IndexFunc::new(|cm: &ConfigMap, out| {
                if let Some(app) = cm.metadata.labels.as_ref().and_then(|l| l.get("app")) {
                    out.push(app);
                }
            }),
        );
        let l = lister(indexers);
        assert_eq!(names(l.by_index("app", "web").unwrap()), ["one", "three"]);
        assert!(l.by_index("app", "none").unwrap().is_empty());
        assert!(matches!(
            l.by_index("nope", "x"),
            Err(IndexError::UnknownIndex(_))
        ));
    }

    #[test]
    fn label_selectors_filter_by_match_labels_and_expressions() {
        let l = lister(namespace_indexers());
        let all = selector(&[], vec![]);
        assert_eq!(
            l.select(&all).unwrap().len(),
            4,
            "an empty selector selects everything"
        );
        let web = selector(&[("app", "web")], vec![]);
        assert_eq!(names(l.select(&web).unwrap()), ["one", "three"]);
        assert_eq!(names(l.namespaced("a").select(&web).unwrap()), ["one"]);
        let cases = [
            (
                expr("app", "In", &["web", "db"]),
                vec!["one", "three", "two"],
            ),
            (expr("app", "NotIn", &["web"]), vec!["global", "two"]),
            (expr("tier", "Exists", &[]), vec!["one"]),
            (expr("app", "DoesNotExist", &[]), vec!["global"]),
        ];
        for (req, want) in cases {
            let got = names(l.select(&selector(&[], vec![req.clone()])).unwrap());
            assert_eq!(got, want, "{req:?}");
        }
        let both = selector(&[("app", "web")], vec![expr("tier", "DoesNotExist", &[])]);
        assert_eq!(names(l.select(&both).unwrap()), ["three"]);
    }

    #[test]
    fn malformed_selectors_are_errors() {
        let l = lister(namespace_indexers());
        let bad_op = selector(&[], vec![expr("app", "Matches", &["x"])]);
        assert_eq!(
            l.select(&bad_op).unwrap_err(),
            SelectorError::UnknownOperator("Matches".into())
        );
        let no_values = selector(&[], vec![expr("app", "In", &[])]);
        assert!(matches!(
            l.select(&no_values),
            Err(SelectorError::BadValues {
                needs_values: true,
                ..
            })
        ));
        let values = selector(&[], vec![expr("app", "Exists", &["x"])]);
        assert!(matches!(
            l.select(&values),
            Err(SelectorError::BadValues {
                needs_values: false,
                ..
            })
        ));
    }
}
