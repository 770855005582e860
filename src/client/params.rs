//! Parameters of the API verbs (list, watch, patch, delete, …) and how they become query
//! strings and bodies.

use std::fmt::Write;

use serde::Serialize;

/// `resourceVersionMatch` for a list: how `resource_version` is interpreted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VersionMatch {
    /// Any state at least as new as `resource_version`.
    NotOlderThan,
    /// Exactly the state at `resource_version` (a 410 if it was compacted away).
    Exact,
}

impl VersionMatch {
    fn as_str(self) -> &'static str {
        match self {
            VersionMatch::NotOlderThan => "NotOlderThan",
            VersionMatch::Exact => "Exact",
        }
    }
}

/// Which objects a list or watch returns: label and field selectors, written to the query
/// as `labelSelector` and `fieldSelector`. The default selects everything.
///
/// ```
/// use controller_runtime::client::{ListParams, Selector, WatchParams};
///
/// let web = Selector::default().labels("app=web").fields("status.phase=Running");
/// let watch = WatchParams { selector: web, ..WatchParams::default() };
/// let list = ListParams::default().labels("app=web").fields("status.phase=Running");
/// assert_eq!(list.selector, watch.selector);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    /// Only objects whose labels match, e.g. `app=web,tier!=db`.
    pub labels: Option<String>,
    /// Only objects whose fields match, e.g. `metadata.name=x`.
    pub fields: Option<String>,
    /// Only objects whose hash falls in the ranges of a `shardSelector`, e.g.
    /// `shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')`
    /// (Kubernetes 1.36+, feature gate `ShardedListAndWatch`; a server without it ignores
    /// the parameter and returns everything; see
    /// [`runtime::shard`](crate::runtime::shard)).
    pub shards: Option<String>,
}

impl Selector {
    selector_builders!();

    fn write(&self, q: &mut Query) {
        q.opt("labelSelector", self.labels.as_deref());
        q.opt("fieldSelector", self.fields.as_deref());
        q.opt("shardSelector", self.shards.as_deref());
    }
}

/// Options for a list.
///
/// With no `resource_version`, the list is a consistent read of the latest state. `"0"` lets
/// the server answer from its watch cache, which may be slightly stale.
#[derive(Clone, Debug, Default)]
pub struct ListParams {
    /// Which objects are listed.
    pub selector: Selector,
    /// At most this many objects per page; the list's `metadata.continue` resumes it.
    pub limit: Option<u32>,
    /// The token from the previous page's `metadata.continue`.
    pub continue_token: Option<String>,
    /// The state to list from; see the type's docs.
    pub resource_version: Option<String>,
    /// How `resource_version` is interpreted.
    pub version_match: Option<VersionMatch>,
    /// Server-side timeout for the request, in seconds.
    pub timeout_seconds: Option<u32>,
}

impl ListParams {
    selector_builders!(selector);

    /// Pages of at most `limit` objects.
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Resume from a previous page's continue token.
    pub fn continue_from(mut self, token: &str) -> Self {
        self.continue_token = Some(token.to_owned());
        self
    }

    /// List at `rv`, interpreted by `version_match`.
    pub fn at(mut self, rv: &str, version_match: Option<VersionMatch>) -> Self {
        self.resource_version = Some(rv.to_owned());
        self.version_match = version_match;
        self
    }

    pub(crate) fn query(&self) -> Query {
        let mut q = Query::default();
        self.selector.write(&mut q);
        q.opt_num("limit", self.limit);
        q.opt("continue", self.continue_token.as_deref());
        q.opt("resourceVersion", self.resource_version.as_deref());
        q.opt(
            "resourceVersionMatch",
            self.version_match.map(VersionMatch::as_str),
        );
        q.opt_num("timeoutSeconds", self.timeout_seconds);
        q
    }
}

/// Options for a watch.
#[derive(Clone, Debug)]
pub struct WatchParams {
    /// Which objects are watched.
    pub selector: Selector,
    /// Events after this version. `None` or `"0"` starts with synthetic `ADDED` events for
    /// the current state; see the API's resourceVersion rules.
    pub resource_version: Option<String>,
    /// The server ends the watch after this many seconds.
    pub timeout_seconds: Option<u32>,
    /// Ask for `BOOKMARK` events carrying the latest `resourceVersion`. On by default.
    pub bookmarks: bool,
    /// Stream the current state as `ADDED` events first, ended by a bookmark annotated
    /// `k8s.io/initial-events-end` (the WatchList feature). Needs `bookmarks` and
    /// `resourceVersionMatch=NotOlderThan`, which the client sends with it.
    pub send_initial_events: bool,
}

impl Default for WatchParams {
    fn default() -> Self {
        WatchParams {
            selector: Selector::default(),
            resource_version: None,
            timeout_seconds: None,
            bookmarks: true,
            send_initial_events: false,
        }
    }
}

impl WatchParams {
    selector_builders!(selector);

    /// Events after `rv`.
    pub fn from_version(mut self, rv: &str) -> Self {
        self.resource_version = Some(rv.to_owned());
        self
    }

    /// End the watch after `seconds`.
    pub fn timeout(mut self, seconds: u32) -> Self {
        self.timeout_seconds = Some(seconds);
        self
    }

    /// Stream the current state first (WatchList).
    pub fn initial_events(mut self) -> Self {
        self.send_initial_events = true;
        self.bookmarks = true;
        self
    }

    pub(crate) fn query(&self) -> Query {
        let mut q = Query::default();
        q.pair("watch", "true");
        self.selector.write(&mut q);
        q.opt("resourceVersion", self.resource_version.as_deref());
        q.opt_num("timeoutSeconds", self.timeout_seconds);
        q.opt("allowWatchBookmarks", self.bookmarks.then_some("true"));
        if self.send_initial_events {
            q.pair("sendInitialEvents", "true");
            q.pair("resourceVersionMatch", "NotOlderThan");
        }
        q
    }
}

/// Options for create, replace and patch.
#[derive(Clone, Debug, Default)]
pub struct PostParams {
    /// Validate and default without persisting.
    pub dry_run: bool,
    /// The field manager recorded in `managedFields`.
    pub field_manager: Option<String>,
}

impl PostParams {
    pub(crate) fn query(&self) -> Query {
        let mut q = Query::default();
        q.opt("dryRun", self.dry_run.then_some("All"));
        q.opt("fieldManager", self.field_manager.as_deref());
        q
    }
}

/// A patch, in one of the four kinds the API accepts.
#[derive(Clone, Debug)]
pub enum Patch<T: Serialize> {
    /// A JSON merge patch (RFC 7386): fields given replace, `null` deletes, lists are replaced.
    Merge(T),
    /// A JSON patch (RFC 6902): a list of operations.
    Json(T),
    /// A strategic merge patch: like merge, but lists merge by key where the API says so.
    /// Built-in kinds only.
    Strategic(T),
    /// Server-side apply: the fields this manager owns. Needs
    /// [`PatchParams::field_manager`].
    Apply(T),
}

impl<T: Serialize> Patch<T> {
    pub(crate) fn content_type(&self) -> &'static str {
        match self {
            Patch::Merge(_) => "application/merge-patch+json",
            Patch::Json(_) => "application/json-patch+json",
            Patch::Strategic(_) => "application/strategic-merge-patch+json",
            Patch::Apply(_) => "application/apply-patch+yaml",
        }
    }

    pub(crate) fn body(&self) -> &T {
        match self {
            Patch::Merge(b) | Patch::Json(b) | Patch::Strategic(b) | Patch::Apply(b) => b,
        }
    }
}

/// Options for a patch.
#[derive(Clone, Debug, Default)]
pub struct PatchParams {
    /// Validate and default without persisting.
    pub dry_run: bool,
    /// The field manager; required for server-side apply.
    pub field_manager: Option<String>,
    /// Server-side apply only: take ownership of fields other managers own instead of
    /// failing with a conflict.
    pub force: bool,
}

impl PatchParams {
    /// Server-side apply as `manager`.
    pub fn apply(manager: &str) -> Self {
        PatchParams {
            field_manager: Some(manager.to_owned()),
            ..Self::default()
        }
    }

    /// Take ownership of conflicting fields (server-side apply).
    pub fn force(mut self) -> Self {
        self.force = true;
        self
    }

    pub(crate) fn query(&self) -> Query {
        let mut q = Query::default();
        q.opt("dryRun", self.dry_run.then_some("All"));
        q.opt("fieldManager", self.field_manager.as_deref());
        q.opt("force", self.force.then_some("true"));
        q
    }
}

/// How a delete treats the object's dependents.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum PropagationPolicy {
    /// Leave dependents in place, removing their owner reference.
    Orphan,
    /// Delete the object now; the garbage collector deletes dependents afterwards.
    Background,
    /// Delete dependents first; the object stays, with a `foregroundDeletion` finalizer,
    /// until they are gone.
    Foreground,
}

/// Conditions a delete must meet, or the server answers 409.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Preconditions {
    /// The object must have this uid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// The object must be at this resourceVersion.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
}

/// Options for a delete, sent as a `DeleteOptions` body.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeleteParams {
    /// How dependents are treated; the kind's default if unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub propagation_policy: Option<PropagationPolicy>,
    /// Conditions the object must meet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preconditions: Option<Preconditions>,
    /// Seconds of grace before the object is removed; 0 deletes at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grace_period_seconds: Option<u32>,
    /// Validate without deleting.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dry_run: Vec<String>,
}

impl DeleteParams {
    /// Delete dependents in the background.
    pub fn background() -> Self {
        Self::with_policy(PropagationPolicy::Background)
    }

    /// Delete dependents first.
    pub fn foreground() -> Self {
        Self::with_policy(PropagationPolicy::Foreground)
    }

    /// Leave dependents.
    pub fn orphan() -> Self {
        Self::with_policy(PropagationPolicy::Orphan)
    }

    fn with_policy(policy: PropagationPolicy) -> Self {
        DeleteParams {
            propagation_policy: Some(policy),
            ..Self::default()
        }
    }

    /// Only if the object still has this uid and, if given, resourceVersion.
    pub fn precondition(mut self, uid: Option<&str>, resource_version: Option<&str>) -> Self {
        self.preconditions = Some(Preconditions {
            uid: uid.map(str::to_owned),
            resource_version: resource_version.map(str::to_owned),
        });
        self
    }
}

/// A query string being built, percent-encoded as the API server expects.
#[derive(Default)]
pub(crate) struct Query(String);

impl Query {
    pub(crate) fn pair(&mut self, key: &str, value: &str) {
        self.0.push(if self.0.is_empty() { '?' } else { '&' });
        self.0.push_str(key);
        self.0.push('=');
        encode_into(&mut self.0, value);
    }

    fn opt(&mut self, key: &str, value: Option<&str>) {
        if let Some(v) = value {
            self.pair(key, v);
        }
    }

    fn opt_num(&mut self, key: &str, value: Option<u32>) {
        if let Some(v) = value {
            self.pair(key, &v.to_string());
        }
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

/// Percent-encodes `value` for a query string: unreserved characters pass, all else is
/// `%XX`.
fn encode_into(out: &mut String, value: &str) {
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selector_writes_both_parts_escaped_and_nothing_when_empty() {
        let both = Selector::default()
            .labels("app=web,tier in (a,b)")
            .fields("metadata.name=x");
        let (mut q, mut none) = (Query::default(), Query::default());
        both.write(&mut q);
        Selector::default().write(&mut none);
        assert_eq!(
            q.as_str(),
            "?labelSelector=app%3Dweb%2Ctier%20in%20%28a%2Cb%29&fieldSelector=metadata.name%3Dx"
        );
        assert_eq!(none.as_str(), "");
    }

    #[test]
    fn list_params_encode_every_field_in_order() {
        let q = ListParams::default()
            .labels("app=web")
            .fields("metadata.name=x")
            .limit(500)
            .continue_from("tok/en=")
            .at("42", Some(VersionMatch::NotOlderThan))
            .query();
        assert_eq!(
            q.as_str(),
            "?labelSelector=app%3Dweb&fieldSelector=metadata.name%3Dx\
             &limit=500&continue=tok%2Fen%3D&resourceVersion=42&resourceVersionMatch=NotOlderThan"
        );
    }

    #[test]
    fn watch_params_ask_for_bookmarks_by_default() {
        let q = WatchParams::default()
            .from_version("7")
            .timeout(300)
            .query();
        assert_eq!(
            q.as_str(),
            "?watch=true&resourceVersion=7&timeoutSeconds=300&allowWatchBookmarks=true"
        );
    }

    #[test]
    fn initial_events_watch_sends_the_watchlist_parameters() {
        assert_eq!(
            WatchParams::default().initial_events().query().as_str(),
            "?watch=true&allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
        );
    }

    #[test]
    fn delete_params_serialize_as_delete_options() {
        let body =
            serde_json::to_string(&DeleteParams::foreground().precondition(Some("u-1"), Some("9")))
                .unwrap();
        assert_eq!(
            body,
            r#"{"propagationPolicy":"Foreground","preconditions":{"uid":"u-1","resourceVersion":"9"}}"#
        );
    }

    #[test]
    fn patch_params_for_forced_apply() {
        let q = PatchParams::apply("op").force().query();
        assert_eq!(q.as_str(), "?fieldManager=op&force=true");
    }
}
