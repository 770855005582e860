//! A record of the writes a client made, so that a cache can wait to have seen them.
//!
//! A client made with [`Client::recording_writes`](super::Client::recording_writes) notes
//! every successful create, replace, patch (apply included), delete and status or scale
//! write it makes: the object's kind, namespace, name and uid, the `resourceVersion` the
//! server returned, and whether the object is gone. The manager's cache reads the record
//! (see `runtime::cache`) and answers a read of a written object only once its informer has
//! observed that version, or the delete. An entry leaves the record once a read saw it
//! observed, or a newer write of the same object replaces it, so the record holds at most
//! one entry per object written and not seen since. Only kinds a cache reads
//! ([`WriteLog::watch_kind`]) are noted: a write of any other kind (an Event, say) has no
//! read to wait for it.

use std::collections::HashMap;

use parking_lot::Mutex;
use serde::Deserialize;

use super::dynamic::ApiResource;

/// One recorded write: what the server answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Write {
    /// The object's `metadata.uid`, if the answer carried it.
    pub uid: Option<String>,
    /// The `resourceVersion` the server returned, as an integer (KEP-5504: resource versions
    /// compare as integers); 0 for a delete that returned a `Status`.
    pub resource_version: u64,
    /// The write deleted the object: the server answered with a `Status`, or with an object
    /// that nothing holds (no finalizers, no grace period).
    pub gone: bool,
}

/// Where a written object lives: its namespace (empty for a cluster-scoped kind) and name.
pub type WrittenKey = (String, String);

/// `(group, kind)`, as `k8s_openapi::Resource` names them.
type KindKey = (String, String);

/// The writes a client made that no cache has been seen to observe yet: the record behind
/// read-your-own-writes.
///
/// A client made with [`Client::recording_writes`](super::Client::recording_writes) notes
/// here every successful create, replace, patch (apply included), delete and status write of
/// a kind a cache reads ([`watch_kind`](Self::watch_kind)): the object's namespace, name and
/// uid, the `resourceVersion` the server returned, and whether the object is gone. The
/// manager's cache answers a read of a written object only once its informer has observed
/// that version, or the delete. An entry leaves once seen observed, or when a newer write of
/// the same object replaces it. Shared by the client's clones and the cache that reads it.
#[derive(Debug, Default)]
pub struct WriteLog {
    kinds: Mutex<HashMap<KindKey, HashMap<WrittenKey, Write>>>,
}

impl WriteLog {
    /// An empty record.
    pub fn new() -> Self {
        WriteLog::default()
    }

    /// Notes writes of kind `group`/`kind` from now on: a cache reads the kind.
    pub fn watch_kind(&self, group: &str, kind: &str) {
        let mut kinds = self.kinds.lock();
        kinds
            .entry((group.to_owned(), kind.to_owned()))
            .or_default();
    }

    /// Notes a write of `namespace/name` of kind `group`/`kind`, if the kind is watched. A
    /// write with an older resource version than the one noted (two writers racing) is not
    /// noted: the newer one holds.
    pub fn record(&self, group: &str, kind: &str, namespace: &str, name: &str, write: Write) {
        let mut kinds = self.kinds.lock();
        let Some(objects) = kinds.get_mut(&(group.to_owned(), kind.to_owned())) else {
            return;
        };
        let key = (namespace.to_owned(), name.to_owned());
        match objects.get(&key) {
            Some(old) if !write.gone && old.resource_version > write.resource_version => {}
            _ => {
                objects.insert(key, write);
            }
        }
    }

    /// The writes of kind `group`/`kind` not yet seen observed: in `namespace` (all with
    /// `None`), and of `name` alone if given.
    pub fn pending(
        &self,
        group: &str,
        kind: &str,
        namespace: Option<&str>,
        name: Option<&str>,
    ) -> Vec<(WrittenKey, Write)> {
        let kinds = self.kinds.lock();
        let Some(objects) = kinds.get(&(group.to_owned(), kind.to_owned())) else {
            return Vec::new();
        };
        if let (Some(ns), Some(name)) = (namespace, name) {
            let key = (ns.to_owned(), name.to_owned());
            return objects
                .get(&key)
                .map(|w| (key, w.clone()))
                .into_iter()
                .collect();
        }
        objects
            .iter()
            .filter(|((ns, n), _)| {
                namespace.is_none_or(|want| want == ns) && name.is_none_or(|want| want == n)
            })
            .map(|(k, w)| (k.clone(), w.clone()))
            .collect()
    }

    /// Drops the entry of `key` if it is still `write` (a newer write stays).
    pub fn observed(&self, group: &str, kind: &str, key: &WrittenKey, write: &Write) {
        let mut kinds = self.kinds.lock();
        if let Some(objects) = kinds.get_mut(&(group.to_owned(), kind.to_owned()))
            && objects.get(key) == Some(write)
        {
            objects.remove(key);
        }
    }

    /// How many writes are waiting to be seen observed.
    pub fn len(&self) -> usize {
        self.kinds.lock().values().map(HashMap::len).sum()
    }

    /// Whether no write is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Notes the write whose answer is `body`, made through an API of `resource` bound to
    /// `namespace`; `deleting` for a DELETE. An answer that is neither an object nor a
    /// `Status` naming one is not noted.
    pub(crate) fn record_answer(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: Option<&str>,
        deleting: bool,
        body: &[u8],
    ) {
        let Ok(answer) = serde_json::from_slice::<Answer>(body) else {
            return;
        };
        let (name, namespace, write) = if answer.kind.as_deref() == Some("Status") {
            let details = answer.details.unwrap_or_default();
            let Some(name) = details.name.as_deref().or(name) else {
                return;
            };
            let write = Write {
                uid: details.uid,
                resource_version: 0,
                gone: true,
            };
            (
                name.to_owned(),
                namespace.unwrap_or_default().to_owned(),
                write,
            )
        } else {
            let meta = answer.metadata;
            let Some(name) = meta.name.or(name.map(str::to_owned)) else {
                return;
            };
            let held = !meta.finalizers.is_empty()
                || meta.deletion_grace_period_seconds.is_some_and(|s| s > 0);
            let write = Write {
                uid: meta.uid,
                resource_version: meta
                    .resource_version
                    .as_deref()
                    .and_then(|rv| rv.parse().ok())
                    .unwrap_or(0),
                gone: deleting && !held,
            };
            let namespace = meta
                .namespace
                .or(namespace.map(str::to_owned))
                .unwrap_or_default();
            (name, namespace, write)
        };
        self.record(&resource.group, &resource.kind, &namespace, &name, write);
    }
}

/// The parts of a write's answer the record reads.
#[derive(Deserialize)]
struct Answer {
    kind: Option<String>,
    #[serde(default)]
    metadata: AnswerMeta,
    details: Option<StatusDetails>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AnswerMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    #[serde(default)]
    finalizers: Vec<String>,
    deletion_grace_period_seconds: Option<i64>,
}

#[derive(Default, Deserialize)]
struct StatusDetails {
    name: Option<String>,
    uid: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ConfigMap, Pod};

    fn log() -> WriteLog {
        let log = WriteLog::new();
        log.watch_kind("", "ConfigMap");
        log.watch_kind("", "Pod");
        log
    }

    fn answer(log: &WriteLog, deleting: bool, body: &str) {
        let resource = ApiResource::of::<ConfigMap>();
        log.record_answer(
            &resource,
            Some("prod"),
            Some("web"),
            deleting,
            body.as_bytes(),
        );
    }

    fn only(log: &WriteLog) -> Write {
        let pending = log.pending("", "ConfigMap", Some("prod"), Some("web"));
        assert_eq!(pending.len(), 1, "{pending:?}");
        pending[0].1.clone()
    }

    #[test]
    fn an_answered_object_is_noted_with_its_version_and_uid() {
        let log = log();
        answer(
            &log,
            false,
            r#"{"kind":"ConfigMap","metadata":{"name":"web","namespace":"prod","uid":"u1","resourceVersion":"42"}}"#,
        );
        let want = Write {
            uid: Some("u1".into()),
            resource_version: 42,
            gone: false,
        };
        assert_eq!(only(&log), want);
        assert!(log.pending("", "ConfigMap", Some("dev"), None).is_empty());
        assert_eq!(log.pending("", "ConfigMap", None, None).len(), 1);
        assert!(log.pending("", "Pod", None, None).is_empty());
    }

    #[test]
    fn a_delete_answered_with_a_status_or_an_unheld_object_is_gone() {
        let log = log();
        answer(
            &log,
            true,
            r#"{"kind":"Status","status":"Success","details":{"name":"web","kind":"configmaps","uid":"u1"}}"#,
        );
        assert_eq!(
            only(&log),
            Write {
                uid: Some("u1".into()),
                resource_version: 0,
                gone: true
            }
        );
        answer(
            &log,
            true,
            r#"{"metadata":{"name":"web","namespace":"prod","uid":"u2","resourceVersion":"50"}}"#,
        );
        assert!(only(&log).gone);
    }

    #[test]
    fn a_delete_held_by_finalizers_or_a_grace_period_is_a_write() {
        let log = log();
        for held in [
            r#""finalizers":["x"]"#,
            r#""deletionGracePeriodSeconds":30"#,
        ] {
            answer(
                &log,
                true,
                &format!(
                    r#"{{"metadata":{{"name":"web","namespace":"prod","resourceVersion":"7",{held}}}}}"#
                ),
            );
            assert!(!only(&log).gone, "{held}");
        }
    }

    #[test]
    fn an_older_write_does_not_replace_a_newer_one_and_observing_an_older_keeps_the_newer() {
        let log = log();
        let at = |rv| Write {
            uid: None,
            resource_version: rv,
            gone: false,
        };
        log.record("", "ConfigMap", "prod", "web", at(9));
        log.record("", "ConfigMap", "prod", "web", at(8));
        assert_eq!(only(&log).resource_version, 9);
        let key = ("prod".to_owned(), "web".to_owned());
        log.observed("", "ConfigMap", &key, &at(8));
        assert_eq!(log.len(), 1);
        log.observed("", "ConfigMap", &key, &at(9));
        assert!(log.is_empty());
    }

    #[test]
    fn a_cluster_scoped_write_is_noted_under_the_empty_namespace() {
        let log = log();
        let resource = ApiResource::of::<Pod>();
        log.record_answer(
            &resource,
            None,
            None,
            false,
            br#"{"metadata":{"name":"n1","resourceVersion":"3"}}"#,
        );
        assert_eq!(log.pending("", "Pod", Some(""), Some("n1")).len(), 1);
    }

    #[test]
    fn a_kind_no_cache_reads_is_not_noted() {
        let log = WriteLog::new();
        answer(
            &log,
            false,
            r#"{"metadata":{"name":"web","namespace":"prod","resourceVersion":"1"}}"#,
        );
        assert!(log.is_empty());
    }

    #[test]
    fn an_answer_that_is_not_json_is_not_noted() {
        let log = log();
        answer(&log, false, "not json");
        assert!(log.is_empty());
    }
}
