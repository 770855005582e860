//! RBAC from code: the rules a manager's controllers need, declared beside them or inferred by
//! the runtime, merged into a ClusterRole (kubebuilder's `+kubebuilder:rbac` markers and
//! `controller-gen rbac`).
//!
//! A controller author declares only what the reconciler does itself (its writes, and any
//! read that is not from the cache), beside the controller, with
//! [`Controller::rbac`](super::Controller::rbac); everything the runtime does for it is
//! inferred as it is registered with the [`Manager`](super::Manager):
//!
//! | registered | rule | why |
//! |---|---|---|
//! | a controller's `for`, `owns` and `watches` kinds, and every [`Manager::store`](super::Manager::store) | list, watch | the cache's informer lists, then watches the kind (a streaming list is a watch; the list is its fallback). The runtime gets nothing from the API server directly, so no get. |
//! | [`Manager::event_recorder`](super::Manager::event_recorder) | create, patch on `events.k8s.io` events | an event is created; a repeated one's series count is patched |
//! | `owns::<D>()` in a controller for `K` | delete on `D`, update on `K`'s `finalizers` | the OwnerReferencesPermissionEnforcement admission plugin (off by default) lets only who may delete an object set owner references on it, and only who may update the owner's `finalizers` set `blockOwnerDeletion`, which [`controller_reference`](super::owner::controller_reference) does |
//! | admission and conversion webhooks | nothing | the API server calls them; they call nothing |
//!
//! Two roles stay static, as kubebuilder keeps them: the leader election Role (get, create
//! and update on Leases, in the manager's own namespace) and the secure metrics' ClusterRole
//! (create on TokenReviews and SubjectAccessReviews).
//!
//! [`ClusterRole`] merges the rules as controller-gen does (one rule per API group and
//! resource with their verbs together, then resources of one group with the same verbs
//! together, then groups with the same resources and verbs together, sorted) and writes the
//! YAML with a comment saying what each verb is for, from each rule's
//! [`because`](Rule::because).
//!
//! # Example
//!
//! A manager built with [`Manager::offline`](super::Manager::offline) needs no cluster, so a
//! binary can print its role for `make manifests`:
//!
//! ```
//! use std::sync::Arc;
//!
//! use controller_runtime::runtime::rbac::{ClusterRole, Rule, Verb};
//! use controller_runtime::runtime::{Action, Controller, Manager, ManagerOptions, ReconcileError};
//! use k8s_openapi::api::core::v1::{ConfigMap, Secret};
//!
//! async fn reconcile(_cm: Arc<ConfigMap>, _ctx: Arc<()>) -> Result<Action, ReconcileError> {
//!     Ok(Action::done()) // (would apply a Secret for the ConfigMap)
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let manager = Manager::offline(ManagerOptions::default());
//! Controller::<ConfigMap>::new(&manager)
//!     .owns::<Secret>()
//!     .rbac(Rule::of::<Secret>().verbs([Verb::Create, Verb::Patch]).because("server-side apply"))
//!     .complete(reconcile, Arc::new(()))?;
//!
//! let role = ClusterRole::new("manager-role", manager.rbac_rules());
//! let yaml = role.to_yaml();
//! assert!(yaml.contains("kind: ClusterRole"));
//! // The cache's reads, the declared writes, and the owner references' grants, merged:
//! let rules: Vec<(String, Vec<String>)> = role
//!     .policy_rules()
//!     .into_iter()
//!     .map(|r| (r.resources.unwrap().join(","), r.verbs))
//!     .collect();
//! assert_eq!(rules, [
//!     ("configmaps".to_owned(), vec!["list".to_owned(), "watch".to_owned()]),
//!     ("configmaps/finalizers".to_owned(), vec!["update".to_owned()]),
//!     ("secrets".to_owned(), ["create", "delete", "list", "patch", "watch"].map(String::from).to_vec()),
//! ]);
//! # Ok(())
//! # }
//! ```

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::api::rbac::v1::{ClusterRole as ClusterRoleObject, PolicyRule};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

// === Verb ===

/// A verb of an RBAC rule: what a request does to a resource. Ordered by name, as
/// controller-gen sorts them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Verb {
    /// `create`: POST, and a server-side apply that creates the object.
    Create,
    /// `delete`: DELETE of one object.
    Delete,
    /// `deletecollection`: DELETE of a collection.
    DeleteCollection,
    /// `get`: GET of one object.
    Get,
    /// `list`: GET of a collection.
    List,
    /// `patch`: PATCH, server-side apply included.
    Patch,
    /// `update`: PUT.
    Update,
    /// `watch`: a watch, of one object or a collection (a streaming list too).
    Watch,
}

impl Verb {
    /// The verb as RBAC spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Create => "create",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Patch => "patch",
            Verb::Update => "update",
            Verb::Watch => "watch",
        }
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

// === Rule ===

/// Verbs on one resource of one API group, and what they are for: one line of a kubebuilder
/// `+kubebuilder:rbac` marker.
///
/// ```
/// use controller_runtime::runtime::rbac::{Rule, Verb};
/// use k8s_openapi::api::apps::v1::Deployment;
///
/// let rule = Rule::status::<Deployment>()
///     .verbs([Verb::Patch])
///     .because("the status is written by merge patch");
/// assert_eq!((rule.group(), rule.resource()), ("apps", "deployments/status"));
/// assert_eq!(rule.verb_names(), ["patch"]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rule {
    /// The API group; `""` for the core group.
    group: Cow<'static, str>,
    /// The resource's plural, with `/subresource` for a subresource.
    resource: Cow<'static, str>,
    verbs: BTreeSet<Verb>,
    /// What the verbs are for, written as a comment beside the generated role.
    reason: Option<Cow<'static, str>>,
}

impl Rule {
    /// No verbs yet on `resource` (a plural such as `deployments`, or `deployments/scale`)
    /// of API `group` (`""` or `"core"` for the core group). Prefer [`of`](Self::of), which
    /// takes both from the Rust type.
    pub fn new(
        group: impl Into<Cow<'static, str>>,
        resource: impl Into<Cow<'static, str>>,
    ) -> Rule {
        let mut group = group.into();
        if group == "core" {
            group = Cow::Borrowed("");
        }
        Rule {
            group,
            resource: resource.into(),
            verbs: BTreeSet::new(),
            reason: None,
        }
    }

    /// No verbs yet on the resource of kind `K`.
    pub fn of<K: k8s_openapi::Resource>() -> Rule {
        Rule::new(K::GROUP, K::URL_PATH_SEGMENT)
    }

    /// No verbs yet on subresource `name` of kind `K` (`scale`, `status`, `finalizers`).
    pub fn subresource<K: k8s_openapi::Resource>(name: &str) -> Rule {
        Rule::new(K::GROUP, format!("{}/{name}", K::URL_PATH_SEGMENT))
    }

    /// No verbs yet on the `status` subresource of kind `K`: what a status write (a patch
    /// or update of `…/status`) needs.
    pub fn status<K: k8s_openapi::Resource>() -> Rule {
        Rule::subresource::<K>("status")
    }

    /// No verbs yet on the `finalizers` subresource of kind `K`.
    pub fn finalizers<K: k8s_openapi::Resource>() -> Rule {
        Rule::subresource::<K>("finalizers")
    }

    /// Adds `verbs`. A rule without verbs grants nothing and is left out of the role.
    pub fn verbs(mut self, verbs: impl IntoIterator<Item = Verb>) -> Rule {
        self.verbs.extend(verbs);
        self
    }

    /// Says what the verbs are for: the generated role's comment gives it beside them.
    pub fn because(mut self, reason: impl Into<Cow<'static, str>>) -> Rule {
        self.reason = Some(reason.into());
        self
    }

    /// The API group; `""` for the core group.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// The resource, with `/subresource` for a subresource.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The verbs as RBAC spells them, sorted.
    pub fn verb_names(&self) -> Vec<&'static str> {
        self.verbs.iter().map(|v| v.as_str()).collect()
    }

    /// What the verbs are for, if said.
    pub fn reason(&self) -> Option<&str> {
        self.reason.as_deref()
    }
}

// === what the runtime infers ===

/// What the cache needs of every kind it holds.
pub(crate) fn cache_rule<K: k8s_openapi::Resource>() -> Rule {
    Rule::of::<K>()
        .verbs([Verb::List, Verb::Watch])
        .because("the cache lists, then watches them (a streaming list is a watch)")
}

/// What an event recorder needs.
pub(crate) fn event_recorder_rule() -> Rule {
    Rule::new("events.k8s.io", "events")
        .verbs([Verb::Create, Verb::Patch])
        .because("the event recorder creates events, and patches a repeated one's count")
}

/// What setting controller references from `D`s to a `K` needs where the
/// OwnerReferencesPermissionEnforcement admission plugin is on.
pub(crate) fn owner_reference_rules<K, D>() -> [Rule; 2]
where
    K: k8s_openapi::Resource,
    D: k8s_openapi::Resource,
{
    let plugin = "where the OwnerReferencesPermissionEnforcement admission plugin is on \
                  (it is off by default)";
    [
        Rule::of::<D>().verbs([Verb::Delete]).because(format!(
            "needed only to set an owner reference on one, {plugin}"
        )),
        Rule::finalizers::<K>()
            .verbs([Verb::Update])
            .because(format!(
                "needed only to set blockOwnerDeletion on an owner reference to one, {plugin}"
            )),
    ]
}

// === merging ===

/// `rules` merged as controller-gen merges its markers: the verbs of each API group and
/// resource together; then the resources of one group that have the same verbs; then the
/// groups that have the same resources and verbs; each list sorted, and the rules sorted by
/// groups, then resources. Rules without verbs are left out.
///
/// ```
/// use controller_runtime::runtime::rbac::{Rule, Verb, merge};
///
/// let merged = merge(&[
///     Rule::new("", "pods").verbs([Verb::Watch]),
///     Rule::new("", "pods").verbs([Verb::List]),
///     Rule::new("", "services").verbs([Verb::List, Verb::Watch]),
///     Rule::new("apps", "deployments").verbs([Verb::Get]),
/// ]);
/// assert_eq!(merged.len(), 2);
/// assert_eq!(merged[0].api_groups, Some(vec!["".to_owned()]));
/// assert_eq!(merged[0].resources, Some(vec!["pods".to_owned(), "services".to_owned()]));
/// assert_eq!(merged[0].verbs, ["list", "watch"]);
/// ```
pub fn merge(rules: &[Rule]) -> Vec<PolicyRule> {
    // 1. The verbs of each (group, resource).
    let mut verbs: BTreeMap<(&str, &str), BTreeSet<Verb>> = BTreeMap::new();
    for rule in rules.iter().filter(|r| !r.verbs.is_empty()) {
        verbs
            .entry((&rule.group, &rule.resource))
            .or_default()
            .extend(&rule.verbs);
    }
    // 2. The resources of one group with the same verbs.
    let mut resources: BTreeMap<(&str, BTreeSet<Verb>), BTreeSet<&str>> = BTreeMap::new();
    for ((group, resource), verbs) in verbs {
        resources
            .entry((group, verbs))
            .or_default()
            .insert(resource);
    }
    // 3. The groups with the same resources and verbs.
    let mut groups: BTreeMap<(BTreeSet<&str>, BTreeSet<Verb>), BTreeSet<&str>> = BTreeMap::new();
    for ((group, verbs), resources) in resources {
        groups.entry((resources, verbs)).or_default().insert(group);
    }
    // 4. Sorted as controller-gen sorts them: by the groups joined with `&`, then by the
    // resources joined so.
    let mut merged: Vec<(String, PolicyRule)> = groups
        .into_iter()
        .map(|((resources, verbs), groups)| {
            let join = |set: &BTreeSet<&str>| set.iter().copied().collect::<Vec<_>>().join("&");
            let key = format!("{} + {}", join(&groups), join(&resources));
            let strings = |set: BTreeSet<&str>| set.into_iter().map(str::to_owned).collect();
            let rule = PolicyRule {
                api_groups: Some(strings(groups)),
                resources: Some(strings(resources)),
                verbs: verbs.iter().map(|v| v.as_str().to_owned()).collect(),
                ..PolicyRule::default()
            };
            (key, rule)
        })
        .collect();
    merged.sort_by(|(a, _), (b, _)| a.cmp(b));
    merged.into_iter().map(|(_, rule)| rule).collect()
}

// === ClusterRole ===

/// A ClusterRole made of rules, as `controller-gen rbac` writes `config/rbac/role.yaml`.
///
/// ```
/// use controller_runtime::runtime::rbac::{ClusterRole, Rule, Verb};
///
/// let role = ClusterRole::new(
///     "manager-role",
///     [Rule::new("", "pods").verbs([Verb::List, Verb::Watch]).because("its cache")],
/// )
/// .label("app.kubernetes.io/name", "example");
/// let yaml = role.to_yaml();
/// assert!(yaml.contains("#   - list, watch: its cache\n"));
/// assert!(yaml.ends_with("rules:\n- apiGroups:\n  - \"\"\n  resources:\n  - pods\n  verbs:\n  - list\n  - watch\n"));
/// ```
#[derive(Clone, Debug)]
pub struct ClusterRole {
    name: String,
    labels: BTreeMap<String, String>,
    rules: Vec<Rule>,
}

impl ClusterRole {
    /// The ClusterRole `name` granting `rules` (typically
    /// [`Manager::rbac_rules`](super::Manager::rbac_rules)).
    pub fn new(name: impl Into<String>, rules: impl IntoIterator<Item = Rule>) -> ClusterRole {
        ClusterRole {
            name: name.into(),
            labels: BTreeMap::new(),
            rules: rules.into_iter().collect(),
        }
    }

    /// Adds a label to the role's metadata.
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> ClusterRole {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// The rules, merged and sorted; see [`merge`].
    pub fn policy_rules(&self) -> Vec<PolicyRule> {
        merge(&self.rules)
    }

    /// The role as a Kubernetes object.
    pub fn to_object(&self) -> ClusterRoleObject {
        ClusterRoleObject {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                labels: (!self.labels.is_empty()).then(|| self.labels.clone()),
                ..ObjectMeta::default()
            },
            rules: Some(self.policy_rules()),
            aggregation_rule: None,
        }
    }

    /// The role as YAML, keys in a fixed order so that the same rules always give the same
    /// bytes, after a comment listing each resource's verbs and what they are for.
    pub fn to_yaml(&self) -> String {
        let value = serde_json::to_value(self.to_object()).expect("a ClusterRole is JSON");
        let body = serde_saphyr::to_string(&value).expect("JSON has a YAML form");
        format!("{}{body}", self.comment())
    }

    /// The comment above the YAML: per API group and resource, sorted, each set of verbs with
    /// what it is for.
    fn comment(&self) -> String {
        /// What each reason (if given) is for: its verbs.
        type Reasons<'a> = BTreeMap<Option<&'a str>, BTreeSet<Verb>>;
        let mut out = String::from(
            "# Generated from the code (`make manifests`): the rules the controllers declare,\n\
             # and those the runtime infers from them. Do not edit; what each verb is for:\n#\n",
        );
        // (group, resource) → reason → verbs.
        let mut by_resource: BTreeMap<(&str, &str), Reasons> = BTreeMap::new();
        for rule in self.rules.iter().filter(|r| !r.verbs.is_empty()) {
            by_resource
                .entry((&rule.group, &rule.resource))
                .or_default()
                .entry(rule.reason())
                .or_default()
                .extend(&rule.verbs);
        }
        for ((group, resource), reasons) in by_resource {
            match group {
                "" => out.push_str(&format!("# * {resource}\n")),
                _ => out.push_str(&format!("# * {group}/{resource}\n")),
            }
            let mut lines: Vec<(BTreeSet<Verb>, Option<&str>)> =
                reasons.into_iter().map(|(r, v)| (v, r)).collect();
            lines.sort();
            for (verbs, reason) in lines {
                let verbs: Vec<&str> = verbs.iter().map(|v| v.as_str()).collect();
                let text = match reason {
                    Some(reason) => format!("{}: {reason}", verbs.join(", ")),
                    None => verbs.join(", "),
                };
                wrap(&mut out, &text, "#   - ", "#     ");
            }
        }
        out
    }
}

/// Column comment lines are wrapped at.
const WIDTH: usize = 96;

/// Appends `text` as lines of at most [`WIDTH`] columns (a longer word gets a line of its
/// own), the first after `first`, the others after `rest`.
fn wrap(out: &mut String, text: &str, first: &str, rest: &str) {
    let mut line = String::from(first);
    let mut empty = true;
    for word in text.split_whitespace() {
        if !empty && line.len() + 1 + word.len() > WIDTH {
            out.push_str(&line);
            out.push('\n');
            line = String::from(rest);
            empty = true;
        }
        if !empty {
            line.push(' ');
        }
        line.push_str(word);
        empty = false;
    }
    out.push_str(&line);
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::Pod;

    fn flat(rules: &[PolicyRule]) -> Vec<(Vec<String>, Vec<String>, Vec<String>)> {
        rules
            .iter()
            .map(|r| {
                (
                    r.api_groups.clone().unwrap_or_default(),
                    r.resources.clone().unwrap_or_default(),
                    r.verbs.clone(),
                )
            })
            .collect()
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn verbs_order_as_their_names_do() {
        let verbs = [
            Verb::Watch,
            Verb::Update,
            Verb::Patch,
            Verb::List,
            Verb::Get,
            Verb::DeleteCollection,
            Verb::Delete,
            Verb::Create,
        ];
        let mut by_order = verbs;
        by_order.sort();
        let mut by_name = verbs.map(Verb::as_str);
        by_name.sort();
        assert_eq!(by_order.map(Verb::as_str), by_name);
    }

    #[test]
    fn typed_rules_name_the_group_and_plural_and_core_is_the_empty_group() {
        let rule = Rule::of::<Deployment>();
        assert_eq!((rule.group(), rule.resource()), ("apps", "deployments"));
        assert_eq!(Rule::of::<Pod>().group(), "");
        assert_eq!(Rule::new("core", "pods"), Rule::of::<Pod>());
        assert_eq!(Rule::finalizers::<Pod>().resource(), "pods/finalizers");
        assert_eq!(
            Rule::subresource::<Deployment>("scale").resource(),
            "deployments/scale"
        );
    }

    #[test]
    fn verbs_of_one_resource_merge_and_sort_and_duplicates_go() {
        let merged = merge(&[
            Rule::of::<Deployment>().verbs([Verb::Watch, Verb::List]),
            Rule::of::<Deployment>().verbs([Verb::Update, Verb::List]),
            Rule::of::<Deployment>()
                .verbs([Verb::Create])
                .because("apply"),
        ]);
        assert_eq!(
            flat(&merged),
            [(
                strings(&["apps"]),
                strings(&["deployments"]),
                strings(&["create", "list", "update", "watch"])
            )]
        );
    }

    #[test]
    fn resources_of_a_group_with_the_same_verbs_share_a_rule_and_others_do_not() {
        let merged = merge(&[
            Rule::new("", "services").verbs([Verb::List, Verb::Watch]),
            Rule::new("", "pods").verbs([Verb::List, Verb::Watch]),
            Rule::new("", "secrets").verbs([Verb::List]),
            Rule::new("apps", "deployments").verbs([Verb::List, Verb::Watch]),
        ]);
        assert_eq!(
            flat(&merged),
            [
                (
                    strings(&[""]),
                    strings(&["pods", "services"]),
                    strings(&["list", "watch"])
                ),
                (strings(&[""]), strings(&["secrets"]), strings(&["list"])),
                (
                    strings(&["apps"]),
                    strings(&["deployments"]),
                    strings(&["list", "watch"])
                ),
            ]
        );
    }

    #[test]
    fn groups_with_the_same_resources_and_verbs_share_a_rule() {
        let merged = merge(&[
            Rule::new("events.k8s.io", "events").verbs([Verb::Create, Verb::Patch]),
            Rule::new("", "events").verbs([Verb::Patch, Verb::Create]),
            Rule::new("", "pods").verbs([Verb::Get]),
        ]);
        assert_eq!(
            flat(&merged),
            [
                (strings(&[""]), strings(&["pods"]), strings(&["get"])),
                (
                    strings(&["", "events.k8s.io"]),
                    strings(&["events"]),
                    strings(&["create", "patch"])
                ),
            ]
        );
    }

    #[test]
    fn rules_sort_by_groups_then_resources_with_subresources_after_their_resource() {
        let merged = merge(&[
            Rule::new("events.k8s.io", "events").verbs([Verb::Create]),
            Rule::new("cache.example.com", "memcacheds/status").verbs([Verb::Patch]),
            Rule::new("cache.example.com", "memcacheds").verbs([Verb::List]),
            Rule::new("cache.example.com", "memcacheds/finalizers").verbs([Verb::Update]),
            Rule::new("apps", "deployments").verbs([Verb::Create]),
            Rule::new("", "pods").verbs([Verb::List]),
        ]);
        let order: Vec<String> = merged
            .iter()
            .map(|r| {
                format!(
                    "{:?} {:?}",
                    r.api_groups.as_ref().unwrap(),
                    r.resources.as_ref().unwrap()
                )
            })
            .collect();
        assert_eq!(
            order,
            [
                r#"[""] ["pods"]"#,
                r#"["apps"] ["deployments"]"#,
                r#"["cache.example.com"] ["memcacheds"]"#,
                r#"["cache.example.com"] ["memcacheds/finalizers"]"#,
                r#"["cache.example.com"] ["memcacheds/status"]"#,
                r#"["events.k8s.io"] ["events"]"#,
            ]
        );
    }

    #[test]
    fn a_rule_without_verbs_grants_nothing_and_is_left_out() {
        assert!(merge(&[Rule::of::<Pod>()]).is_empty());
        let yaml = ClusterRole::new("r", [Rule::of::<Pod>().because("nothing")]).to_yaml();
        assert!(!yaml.contains("pods"), "{yaml}");
    }

    #[test]
    fn the_same_rules_in_any_order_give_the_same_bytes() {
        let rules = [
            Rule::of::<Pod>()
                .verbs([Verb::List, Verb::Watch])
                .because("cache"),
            Rule::of::<Deployment>()
                .verbs([Verb::Patch])
                .because("apply"),
            Rule::of::<Deployment>()
                .verbs([Verb::List])
                .because("cache"),
            event_recorder_rule(),
        ];
        let mut reversed = rules.clone();
        reversed.reverse();
        assert_eq!(
            ClusterRole::new("r", rules).to_yaml(),
            ClusterRole::new("r", reversed).to_yaml()
        );
    }

    #[test]
    fn the_comment_gives_each_resource_its_verbs_and_reasons() {
        let yaml = ClusterRole::new(
            "manager-role",
            [
                Rule::of::<Deployment>()
                    .verbs([Verb::List, Verb::Watch])
                    .because("the cache"),
                Rule::of::<Deployment>()
                    .verbs([Verb::Patch])
                    .because("apply"),
                Rule::of::<Deployment>()
                    .verbs([Verb::Create])
                    .because("apply"),
                Rule::of::<Pod>().verbs([Verb::Get]),
            ],
        )
        .to_yaml();
        let comment: Vec<&str> = yaml
            .lines()
            .skip(3)
            .take_while(|l| l.starts_with('#'))
            .collect();
        assert_eq!(
            comment,
            [
                "# * pods",
                "#   - get",
                "# * apps/deployments",
                "#   - create, patch: apply",
                "#   - list, watch: the cache",
            ]
        );
    }

    #[test]
    fn long_reasons_wrap_under_their_bullet() {
        let mut out = String::new();
        let words = ["word"; 40].join(" ");
        wrap(&mut out, &words, "#   - ", "#     ");
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines.len() > 1);
        assert!(lines.iter().all(|l| l.len() <= WIDTH), "{out}");
        assert!(
            lines[1..].iter().all(|l| l.starts_with("#     word")),
            "{out}"
        );
        assert_eq!(out.split_whitespace().filter(|w| *w == "word").count(), 40);
    }

    /// `(group, resource, verbs)` of each of the manager's rules, reasons left out.
    fn grants(manager: &crate::runtime::Manager) -> BTreeSet<(String, String, Vec<&'static str>)> {
        manager
            .rbac_rules()
            .iter()
            .map(|r| {
                (
                    r.group().to_owned(),
                    r.resource().to_owned(),
                    r.verb_names(),
                )
            })
            .collect()
    }

    fn grant(
        group: &str,
        resource: &str,
        verbs: &[&'static str],
    ) -> (String, String, Vec<&'static str>) {
        (group.to_owned(), resource.to_owned(), verbs.to_vec())
    }

    async fn noop<K>(
        _: std::sync::Arc<K>,
        _: std::sync::Arc<()>,
    ) -> Result<crate::runtime::Action, crate::runtime::ReconcileError> {
        Ok(crate::runtime::Action::done())
    }

    #[test]
    fn a_controller_gets_list_and_watch_of_its_kinds_and_its_declared_rules() {
        use k8s_openapi::api::core::v1::{ConfigMap, Secret};
        let manager = crate::runtime::Manager::offline(Default::default());
        assert!(manager.rbac_rules().is_empty());
        crate::runtime::Controller::<Deployment>::new(&manager)
            .watches::<ConfigMap>(|_| Vec::new())
            .rbac(Rule::status::<Deployment>().verbs([Verb::Patch]))
            .rbac(
                Rule::of::<Secret>()
                    .verbs([Verb::Get])
                    .because("reads one directly"),
            )
            .complete(noop::<Deployment>, std::sync::Arc::new(()))
            .unwrap();
        assert_eq!(
            grants(&manager),
            BTreeSet::from([
                grant("", "configmaps", &["list", "watch"]),
                grant("", "secrets", &["get"]),
                grant("apps", "deployments", &["list", "watch"]),
                grant("apps", "deployments/status", &["patch"]),
            ])
        );
    }

    #[test]
    fn owning_a_kind_adds_what_owner_references_need_under_the_admission_plugin() {
        let manager = crate::runtime::Manager::offline(Default::default());
        crate::runtime::Controller::<Deployment>::new(&manager)
            .owns::<Pod>()
            .complete(noop::<Deployment>, std::sync::Arc::new(()))
            .unwrap();
        assert_eq!(
            grants(&manager),
            BTreeSet::from([
                grant("", "pods", &["delete"]),
                grant("", "pods", &["list", "watch"]),
                grant("apps", "deployments", &["list", "watch"]),
                grant("apps", "deployments/finalizers", &["update"]),
            ])
        );
    }

    #[test]
    fn stores_and_event_recorders_add_their_rules_once_however_often_asked_for() {
        let manager = crate::runtime::Manager::offline(Default::default());
        for _ in 0..3 {
            manager.store::<Pod>().unwrap();
            manager.event_recorder("example-controller").unwrap();
        }
        assert_eq!(
            grants(&manager),
            BTreeSet::from([
                grant("", "pods", &["list", "watch"]),
                grant("events.k8s.io", "events", &["create", "patch"]),
            ])
        );
        assert_eq!(manager.rbac_rules().len(), 2);
    }

    #[test]
    fn a_controller_that_fails_to_register_adds_no_declared_rules() {
        let manager = crate::runtime::Manager::offline(Default::default());
        let controller = || {
            crate::runtime::Controller::<Pod>::new(&manager)
                .rbac(Rule::of::<Pod>().verbs([Verb::Delete]).because("evicts"))
        };
        controller()
            .complete(noop::<Pod>, std::sync::Arc::new(()))
            .unwrap();
        let before = manager.rbac_rules();
        let again = controller()
            .rbac(Rule::of::<Deployment>().verbs([Verb::Create]))
            .complete(noop::<Pod>, std::sync::Arc::new(()));
        assert!(matches!(
            again,
            Err(crate::runtime::ManagerError::DuplicateController(_))
        ));
        assert_eq!(manager.rbac_rules(), before);
    }

    #[tokio::test]
    async fn an_offline_manager_refuses_to_start() {
        let manager = crate::runtime::Manager::offline(Default::default());
        let started = manager.run_until(std::future::ready(())).await;
        assert!(
            matches!(started, Err(crate::runtime::ManagerError::Offline)),
            "{started:?}"
        );
    }

    #[test]
    fn the_yaml_is_a_cluster_role_in_controller_gen_shape() {
        let yaml = ClusterRole::new(
            "manager-role",
            [Rule::of::<Deployment>().verbs([Verb::Update, Verb::Create])],
        )
        .label("app.kubernetes.io/name", "x")
        .to_yaml();
        let body: String = yaml
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(
            body,
            "apiVersion: rbac.authorization.k8s.io/v1\n\
             kind: ClusterRole\n\
             metadata:\n  labels:\n    app.kubernetes.io/name: x\n  name: manager-role\n\
             rules:\n- apiGroups:\n  - apps\n  resources:\n  - deployments\n  verbs:\n  - create\n  - update\n"
        );
    }
}
