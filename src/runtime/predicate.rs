//! Predicates: which watch events reach a controller's queue (controller-runtime's
//! `predicate` package).
//!
//! A [`Predicate`] looks at an [`Event`] (a create, an update with the old and new object, or
//! a delete) through the object's metadata, whatever its kind, and says whether the event
//! should queue a reconcile. None are applied by default: every event queues. The stock ones
//! cover the usual filters, and they compose:
//!
//! ```
//! use controller_runtime::runtime::predicate::Predicate;
//!
//! // Reconcile on spec changes, or when the "tier" label changes, but not for status writes.
//! let filter = Predicate::generation_changed().or(Predicate::labels_changed());
//! # let _ = filter;
//! ```

use std::fmt;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::client::{MetaView, Raw};

/// An object as a predicate sees it: its key fields and its metadata, whatever its kind.
/// Every cached object ([`Raw<K>`]) is one.
pub trait Meta: Send + Sync {
    /// `metadata.name`.
    fn name(&self) -> &str;
    /// `metadata.namespace`.
    fn namespace(&self) -> Option<&str>;
    /// `metadata.resourceVersion`.
    fn resource_version(&self) -> Option<&str>;
    /// The routing facts of the metadata; see [`Raw::meta`].
    ///
    /// # Errors
    ///
    /// If a routing field has the wrong type.
    fn meta(&self) -> serde_json::Result<MetaView<'_>>;
}

impl<K: Send + Sync + 'static> Meta for Raw<K> {
    fn name(&self) -> &str {
        informer::Object::name(self)
    }
    fn namespace(&self) -> Option<&str> {
        informer::Object::namespace(self)
    }
    fn resource_version(&self) -> Option<&str> {
        informer::Object::resource_version(self)
    }
    fn meta(&self) -> serde_json::Result<MetaView<'_>> {
        Raw::meta(self)
    }
}

/// A watch event, as predicates see it.
#[derive(Clone, Copy)]
pub enum Event<'a> {
    /// The object appeared: created, or listed when the cache started.
    Create(&'a dyn Meta),
    /// The object changed (or a resync re-delivered it unchanged).
    Update {
        /// The object before.
        old: &'a dyn Meta,
        /// The object after.
        new: &'a dyn Meta,
    },
    /// The object was deleted; for a deletion missed while disconnected, the last state the
    /// cache knew.
    Delete(&'a dyn Meta),
}

impl fmt::Debug for Event<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (what, obj) = match self {
            Event::Create(o) => ("Create", o),
            Event::Update { new, .. } => ("Update", new),
            Event::Delete(o) => ("Delete", o),
        };
        write!(
            f,
            "{what}({}/{})",
            obj.namespace().unwrap_or_default(),
            obj.name()
        )
    }
}

/// Whether an event should queue a reconcile. Cheap to clone; combine with
/// [`and`](Self::and), [`or`](Self::or) and [`not`](Self::not).
#[derive(Clone)]
pub struct Predicate(Arc<dyn Fn(&Event<'_>) -> bool + Send + Sync>);

impl fmt::Debug for Predicate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Predicate")
    }
}

impl Predicate {
    /// A predicate from a function (controller-runtime's `predicate.Funcs`).
    pub fn new(f: impl Fn(&Event<'_>) -> bool + Send + Sync + 'static) -> Self {
        Predicate(Arc::new(f))
    }

    /// Whether `event` passes.
    pub fn matches(&self, event: &Event<'_>) -> bool {
        (self.0)(event)
    }

    /// Passes creates and deletes, and updates for which `changed(old, new)` holds.
    fn on_update(changed: impl Fn(&dyn Meta, &dyn Meta) -> bool + Send + Sync + 'static) -> Self {
        Predicate::new(move |event| match *event {
            Event::Update { old, new } => changed(old, new),
            Event::Create(_) | Event::Delete(_) => true,
        })
    }

    /// Updates pass only when `metadata.generation` changed, i.e. the spec changed: status
    /// and metadata-only writes, and resyncs, are filtered out. Creates and deletes pass.
    /// Kinds whose server never sets a generation (ConfigMaps, Secrets) never pass an update.
    pub fn generation_changed() -> Self {
        Predicate::on_update(|old, new| {
            let generation = |o: &dyn Meta| o.meta().ok().and_then(|m| m.generation);
            match (generation(old), generation(new)) {
                (Some(a), Some(b)) => a != b,
                _ => false,
            }
        })
    }

    /// Updates pass only when the resourceVersion changed: resyncs are filtered out.
    pub fn resource_version_changed() -> Self {
        Predicate::on_update(|old, new| old.resource_version() != new.resource_version())
    }

    /// Updates pass only when the labels changed.
    pub fn labels_changed() -> Self {
        Predicate::on_update(|old, new| {
            let labels = |o: &dyn Meta| o.meta().map(|m| m.labels).ok();
            labels(old) != labels(new)
        })
    }

    /// Updates pass only when the annotations changed.
    pub fn annotations_changed() -> Self {
        Predicate::on_update(|old, new| {
            let annotations = |o: &dyn Meta| o.meta().map(|m| m.annotations).ok();
            annotations(old) != annotations(new)
        })
    }

    /// Events pass when the object's labels match `selector` (for an update, the new
    /// object's). An invalid selector matches nothing.
    pub fn label_selector(selector: LabelSelector) -> Self {
        Predicate::new(move |event| {
            let obj = match *event {
                Event::Create(o) | Event::Delete(o) | Event::Update { new: o, .. } => o,
            };
            let Ok(meta) = obj.meta() else {
                return false;
            };
            informer::selector_matches(&selector, Some(&meta.labels)).unwrap_or(false)
        })
    }

    /// Passes when both pass.
    pub fn and(self, other: Predicate) -> Self {
        Predicate::new(move |e| self.matches(e) && other.matches(e))
    }

    /// Passes when either passes.
    pub fn or(self, other: Predicate) -> Self {
        Predicate::new(move |e| self.matches(e) || other.matches(e))
    }

    /// Passes when `self` does not.
    #[allow(clippy::should_implement_trait)]
    pub fn not(self) -> Self {
        Predicate::new(move |e| !self.matches(e))
    }
}

/// Whether `event` passes every predicate of `predicates`.
pub(crate) fn all(predicates: &[Predicate], event: &Event<'_>) -> bool {
    predicates.iter().all(|p| p.matches(event))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::Deployment;

    fn deployment(rv: &str, generation: i64, labels: &str) -> Raw<Deployment> {
        Raw::from_json(&format!(
            r#"{{"metadata":{{"name":"web","namespace":"ns","resourceVersion":"{rv}","generation":{generation},"labels":{labels},"annotations":{{"a":"1"}}}}}}"#
        ))
        .unwrap()
    }

    fn update(p: &Predicate, old: &Raw<Deployment>, new: &Raw<Deployment>) -> bool {
        p.matches(&Event::Update { old, new })
    }

    #[test]
    fn generation_changed_passes_spec_changes_only() {
        let p = Predicate::generation_changed();
        let a = deployment("1", 1, "{}");
        let status_write = deployment("2", 1, "{}");
        let spec_write = deployment("3", 2, "{}");
        assert!(!update(&p, &a, &status_write));
        assert!(update(&p, &status_write, &spec_write));
        assert!(p.matches(&Event::Create(&a)));
        assert!(p.matches(&Event::Delete(&a)));
    }

    #[test]
    fn resource_version_changed_filters_resyncs() {
        let p = Predicate::resource_version_changed();
        let a = deployment("1", 1, "{}");
        assert!(!update(&p, &a, &a.clone()));
        assert!(update(&p, &a, &deployment("2", 1, "{}")));
    }

    #[test]
    fn labels_and_annotations_changed_compare_the_maps() {
        let a = deployment("1", 1, r#"{"tier":"a"}"#);
        let b = deployment("2", 1, r#"{"tier":"b"}"#);
        let c = deployment("3", 1, r#"{"tier":"b"}"#);
        assert!(update(&Predicate::labels_changed(), &a, &b));
        assert!(!update(&Predicate::labels_changed(), &b, &c));
        assert!(!update(&Predicate::annotations_changed(), &a, &b));
    }

    #[test]
    fn label_selector_matches_the_new_object() {
        let selector = LabelSelector {
            match_labels: Some([("tier".to_owned(), "b".to_owned())].into()),
            ..LabelSelector::default()
        };
        let p = Predicate::label_selector(selector);
        let a = deployment("1", 1, r#"{"tier":"a"}"#);
        let b = deployment("2", 1, r#"{"tier":"b"}"#);
        assert!(!p.matches(&Event::Create(&a)));
        assert!(update(&p, &a, &b));
        assert!(!update(&p, &b, &a));
    }

    #[test]
    fn combinators_follow_boolean_logic() {
        let yes = Predicate::new(|_| true);
        let no = Predicate::new(|_| false);
        let a = deployment("1", 1, "{}");
        let e = Event::Create(&a);
        assert!(yes.clone().and(yes.clone()).matches(&e));
        assert!(!yes.clone().and(no.clone()).matches(&e));
        assert!(yes.clone().or(no.clone()).matches(&e));
        assert!(!no.clone().or(no.clone()).matches(&e));
        assert!(no.not().matches(&e));
        assert!(all(&[], &e));
        assert!(!all(&[yes, Predicate::new(|_| false)], &e));
    }
}
