//! The names a project is made of (domain, project name, group, version, kind), checked as
//! Kubernetes and Cargo check them, and the names the scaffold derives from them.

/// A name that breaks a rule: what it names, the value given, and the rule it breaks.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} {value:?}: {rule}")]
pub struct InvalidName {
    /// What the name is for: `domain`, `project name`, `group`, `version` or `kind`.
    pub what: &'static str,
    /// The name as given.
    pub value: String,
    /// The rule it breaks, and how to meet it.
    pub rule: String,
}

fn invalid(what: &'static str, value: &str, rule: impl Into<String>) -> InvalidName {
    InvalidName {
        what,
        value: value.to_owned(),
        rule: rule.into(),
    }
}

/// Rust's keywords, strict and reserved: none can name a module or a crate.
const RUST_KEYWORDS: &[&str] = &[
    "abstract", "as", "async", "await", "become", "box", "break", "const", "continue", "crate",
    "do", "dyn", "else", "enum", "extern", "false", "final", "fn", "for", "gen", "if", "impl",
    "in", "let", "loop", "macro", "match", "mod", "move", "mut", "override", "priv", "pub", "ref",
    "return", "self", "static", "struct", "super", "trait", "true", "try", "type", "typeof",
    "unsafe", "unsized", "use", "virtual", "where", "while", "yield",
];

/// Crate names a project cannot take: the built-in crates and the project's own dependencies
/// (its `use` lines would become ambiguous).
const TAKEN_CRATE_NAMES: &[&str] = &[
    "alloc",
    "core",
    "proc_macro",
    "std",
    "test",
    "anyhow",
    "clap",
    "controller_runtime",
    "k8s_openapi",
    "schemars",
    "serde",
    "serde_json",
    "thiserror",
    "tokio",
    "tracing",
];

/// Type names the scaffolded files of a kind already use (their imports, their own items
/// and the prelude's types): a kind of that name would clash with them. A unit test keeps
/// this list in step with the templates.
pub const RESERVED_KINDS: &[&str] = &[
    "Action",
    "Api",
    "Arc",
    "Box",
    "Client",
    "Clone",
    "Cluster",
    "Condition",
    "Context",
    "Controller",
    "CustomResource",
    "Debug",
    "Default",
    "DeleteParams",
    "Deserialize",
    "Event",
    "EventType",
    "JsonSchema",
    "Manager",
    "Operation",
    "Option",
    "PartialEq",
    "Patch",
    "PatchParams",
    "PostParams",
    "ReconcileError",
    "Recorder",
    "ResourceExt",
    "Result",
    "Rule",
    "Self",
    "Serialize",
    "SetupError",
    "String",
    "Vec",
    "Verb",
    "WebhookServer",
];

/// Why `s` is not a DNS-1123 subdomain (RFC 1123 labels joined by dots, lowercase, at most
/// 253 characters), naming the rule it breaks; `None` when it is one.
fn subdomain_rule(s: &str) -> Option<String> {
    if s.is_empty() {
        return Some("it is empty; a DNS-1123 subdomain has at least one character".to_owned());
    }
    if let Some(c) = s
        .chars()
        .find(|c| !matches!(c, 'a'..='z' | '0'..='9' | '-' | '.'))
    {
        return Some(format!(
            "a DNS-1123 subdomain holds only lowercase letters, digits, '-' and '.', not {c:?}"
        ));
    }
    if s.len() > 253 {
        return Some(format!(
            "a DNS-1123 subdomain has at most 253 characters, not {}",
            s.len()
        ));
    }
    let mut parts = s.split('.');
    if parts.clone().any(str::is_empty) {
        return Some("a DNS-1123 subdomain has no empty part between dots".to_owned());
    }
    if let Some(part) = parts.find(|p| p.starts_with('-') || p.ends_with('-')) {
        return Some(format!(
            "each dot-separated part of a DNS-1123 subdomain starts and ends with a letter or \
             digit, and {part:?} does not"
        ));
    }
    None
}

/// Checks a project's domain, the suffix of every API group it serves (`example.com`): a
/// DNS-1123 subdomain.
///
/// # Errors
///
/// [`InvalidName`] naming the rule the domain breaks.
pub fn check_domain(domain: &str) -> Result<(), InvalidName> {
    match subdomain_rule(domain) {
        Some(rule) => Err(invalid("domain", domain, rule)),
        None => Ok(()),
    }
}

/// Checks a group as `create api --group` takes it (`cache`, kubebuilder's short form): a
/// DNS-1123 subdomain, and one still with the domain appended (`cache.example.com`).
///
/// # Errors
///
/// [`InvalidName`] naming the rule the group breaks.
pub fn check_group(group: &str, domain: &str) -> Result<(), InvalidName> {
    if let Some(rule) = subdomain_rule(group) {
        return Err(invalid("group", group, rule));
    }
    let full = format!("{group}.{domain}");
    if full.len() > 253 {
        return Err(invalid(
            "group",
            group,
            format!(
                "with the domain it is {} characters long ({full}); a DNS-1123 subdomain has at \
                 most 253",
                full.len()
            ),
        ));
    }
    Ok(())
}

/// Checks an API version against Kubernetes' version pattern, `v<n>`, `v<n>alpha<n>` or
/// `v<n>beta<n>` (`^v\d+(?:alpha\d+|beta\d+)?$`), which is how the API server orders a kind's
/// versions.
///
/// # Errors
///
/// [`InvalidName`] saying the pattern.
pub fn check_version(version: &str) -> Result<(), InvalidName> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let matches = version.strip_prefix('v').is_some_and(|rest| {
        let end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (major, suffix) = rest.split_at(end);
        digits(major)
            && (suffix.is_empty()
                || suffix
                    .strip_prefix("alpha")
                    .or_else(|| suffix.strip_prefix("beta"))
                    .is_some_and(digits))
    });
    if !matches || version.len() > 63 {
        return Err(invalid(
            "version",
            version,
            "a version follows Kubernetes' pattern v<number>, optionally followed by \
             alpha<number> or beta<number> (v1, v1alpha1, v2beta3), at most 63 characters",
        ));
    }
    Ok(())
}

/// Checks a kind: PascalCase (an uppercase ASCII letter, then ASCII letters and digits), at
/// most 63 characters, its lowercase form (the module and file name) not a Rust keyword, its
/// name not one the scaffolded code already uses ([`RESERVED_KINDS`]), and its plural a DNS
/// label.
///
/// # Errors
///
/// [`InvalidName`] naming the rule the kind breaks.
pub fn check_kind(kind: &str) -> Result<(), InvalidName> {
    let pascal = kind.starts_with(|c: char| c.is_ascii_uppercase())
        && kind.chars().all(|c| c.is_ascii_alphanumeric());
    if !pascal {
        return Err(invalid(
            "kind",
            kind,
            "a kind is PascalCase: an uppercase letter, then letters and digits (Guestbook, \
             CronJob)",
        ));
    }
    if kind.len() > 63 {
        return Err(invalid(
            "kind",
            kind,
            format!("a kind has at most 63 characters, not {}", kind.len()),
        ));
    }
    let module = kind.to_ascii_lowercase();
    if RUST_KEYWORDS.contains(&module.as_str()) {
        return Err(invalid(
            "kind",
            kind,
            format!("its module name {module} is a Rust keyword; choose another kind"),
        ));
    }
    if RESERVED_KINDS.contains(&kind) {
        return Err(invalid(
            "kind",
            kind,
            format!("the scaffolded code already uses the name {kind}; choose another kind"),
        ));
    }
    let plural = pluralize(&module);
    if plural.len() > 63 {
        return Err(invalid(
            "kind",
            kind,
            format!(
                "its plural {plural} has {} characters; a resource name has at most 63",
                plural.len()
            ),
        ));
    }
    Ok(())
}

/// Checks a project name: a DNS-1123 label starting with a letter (it names the Cargo
/// package, the image and the namespace the manager deploys to), whose crate name (`-` as
/// `_`) is not a Rust keyword, a built-in crate or one of the project's dependencies.
///
/// # Errors
///
/// [`InvalidName`] naming the rule the name breaks.
pub fn check_project_name(name: &str) -> Result<(), InvalidName> {
    let label = name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !label || name.len() > 63 {
        return Err(invalid(
            "project name",
            name,
            "a project name is a DNS-1123 label that starts with a letter: lowercase letters, \
             digits and '-', ending with a letter or digit, at most 63 characters",
        ));
    }
    let krate = crate_name(name);
    if RUST_KEYWORDS.contains(&krate.as_str()) || TAKEN_CRATE_NAMES.contains(&krate.as_str()) {
        return Err(invalid(
            "project name",
            name,
            format!("the crate name {krate} is taken by Rust or by a dependency; choose another"),
        ));
    }
    Ok(())
}

/// The Rust crate name of a package: `-` becomes `_`.
pub fn crate_name(project_name: &str) -> String {
    project_name.replace('-', "_")
}

/// The English plural of a lowercase kind, formed as the runtime's `CustomResource` derive
/// forms it (so the RBAC rules and webhook rules name the resource the CRD serves): `-y`
/// after a consonant becomes `-ies`; `-s`, `-x`, `-z`, `-ch`, `-sh` take `-es`; the rest `-s`.
pub fn pluralize(singular: &str) -> String {
    let consonant_y = singular.ends_with('y')
        && !["ay", "ey", "oy", "uy"]
            .iter()
            .any(|end| singular.ends_with(end));
    if consonant_y {
        format!("{}ies", &singular[..singular.len() - 1])
    } else if ["s", "x", "z", "ch", "sh"]
        .iter()
        .any(|end| singular.ends_with(end))
    {
        format!("{singular}es")
    } else {
        format!("{singular}s")
    }
}

/// A kind of the project and what the scaffold names after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gvk {
    /// The short group (`webapp`), as `create api --group` takes it.
    pub group: String,
    /// The project's domain (`example.com`).
    pub domain: String,
    /// The version (`v1`).
    pub version: String,
    /// The kind (`Guestbook`).
    pub kind: String,
}

impl Gvk {
    /// The API group: `<group>.<domain>` (`webapp.example.com`).
    pub fn full_group(&self) -> String {
        format!("{}.{}", self.group, self.domain)
    }

    /// The lowercase kind (`guestbook`): its module and file names.
    pub fn module(&self) -> String {
        self.kind.to_ascii_lowercase()
    }

    /// The resource name (`guestbooks`).
    pub fn plural(&self) -> String {
        pluralize(&self.module())
    }

    /// `<group>/<version>` (`webapp.example.com/v1`).
    pub fn api_version(&self) -> String {
        format!("{}/{}", self.full_group(), self.version)
    }

    /// kubebuilder's path of a webhook of this kind, as the runtime's `mutate_path` and
    /// `validate_path` form it: `/<prefix>-<group with dots as dashes>-<version>-<kind>`.
    pub fn webhook_path(&self, prefix: &str) -> String {
        format!(
            "/{prefix}-{}-{}-{}",
            self.full_group().replace('.', "-"),
            self.version,
            self.module()
        )
    }

    /// Checks every part, and the CRD name they make (`<plural>.<group>`, at most 253).
    ///
    /// # Errors
    ///
    /// The first [`InvalidName`], in the order group, version, kind.
    pub fn check(&self) -> Result<(), InvalidName> {
        check_group(&self.group, &self.domain)?;
        check_version(&self.version)?;
        check_kind(&self.kind)?;
        let crd = format!("{}.{}", self.plural(), self.full_group());
        if crd.len() > 253 {
            return Err(invalid(
                "kind",
                &self.kind,
                format!(
                    "its CRD name {crd} has {} characters; a DNS-1123 subdomain has at most 253",
                    crd.len()
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(result: Result<(), InvalidName>) -> String {
        result.unwrap_err().to_string()
    }

    #[test]
    fn each_bad_group_names_the_rule_it_breaks() {
        assert_eq!(
            message(check_group("Cache", "example.com")),
            "invalid group \"Cache\": a DNS-1123 subdomain holds only lowercase letters, \
             digits, '-' and '.', not 'C'"
        );
        assert_eq!(
            message(check_group("", "example.com")),
            "invalid group \"\": it is empty; a DNS-1123 subdomain has at least one character"
        );
        assert_eq!(
            message(check_group("web..app", "example.com")),
            "invalid group \"web..app\": a DNS-1123 subdomain has no empty part between dots"
        );
        assert_eq!(
            message(check_group("-web", "example.com")),
            "invalid group \"-web\": each dot-separated part of a DNS-1123 subdomain starts \
             and ends with a letter or digit, and \"-web\" does not"
        );
        assert_eq!(
            message(check_group("web_app", "example.com")),
            "invalid group \"web_app\": a DNS-1123 subdomain holds only lowercase letters, \
             digits, '-' and '.', not '_'"
        );
        let long = "a".repeat(250);
        assert_eq!(
            message(check_group(&long, "example.com")),
            format!(
                "invalid group \"{long}\": with the domain it is 262 characters long \
                 ({long}.example.com); a DNS-1123 subdomain has at most 253"
            )
        );
        let longer = "a".repeat(254);
        assert_eq!(
            message(check_group(&longer, "example.com")),
            format!(
                "invalid group \"{longer}\": a DNS-1123 subdomain has at most 253 characters, \
                 not 254"
            )
        );
        for good in ["cache", "web-app", "batch.tutorial", "a1"] {
            assert_eq!(check_group(good, "example.com"), Ok(()), "{good}");
        }
    }

    #[test]
    fn bad_domains_are_refused_with_the_rule() {
        assert_eq!(
            message(check_domain("Example.com")),
            "invalid domain \"Example.com\": a DNS-1123 subdomain holds only lowercase \
             letters, digits, '-' and '.', not 'E'"
        );
        assert_eq!(
            message(check_domain("example.com.")),
            "invalid domain \"example.com.\": a DNS-1123 subdomain has no empty part between \
             dots"
        );
        assert_eq!(
            message(check_domain("example-.com")),
            "invalid domain \"example-.com\": each dot-separated part of a DNS-1123 subdomain \
             starts and ends with a letter or digit, and \"example-\" does not"
        );
        for good in [
            "example.com",
            "my.domain",
            "tutorial.kubebuilder.io",
            "local",
        ] {
            assert_eq!(check_domain(good), Ok(()), "{good}");
        }
    }

    #[test]
    fn versions_follow_the_kubernetes_pattern() {
        for good in ["v1", "v1alpha1", "v2beta3", "v10", "v1beta12", "v0"] {
            assert_eq!(check_version(good), Ok(()), "{good}");
        }
        for bad in [
            "1",
            "V1",
            "v",
            "v1alpha",
            "v1gamma1",
            "vone",
            "v1-alpha1",
            "v1Alpha1",
            "",
            "v1beta1a",
        ] {
            assert_eq!(
                message(check_version(bad)),
                format!(
                    "invalid version {bad:?}: a version follows Kubernetes' pattern v<number>, \
                     optionally followed by alpha<number> or beta<number> (v1, v1alpha1, \
                     v2beta3), at most 63 characters"
                )
            );
        }
    }

    #[test]
    fn kinds_are_pascal_case_and_free() {
        for good in ["Guestbook", "CronJob", "Memcached", "V2Thing", "A"] {
            assert_eq!(check_kind(good), Ok(()), "{good}");
        }
        for bad in [
            "guestbook",
            "Guest_book",
            "Guest-book",
            "",
            "1Guest",
            "Guestbök",
        ] {
            assert_eq!(
                message(check_kind(bad)),
                format!(
                    "invalid kind {bad:?}: a kind is PascalCase: an uppercase letter, then \
                     letters and digits (Guestbook, CronJob)"
                )
            );
        }
        assert_eq!(
            message(check_kind("Type")),
            "invalid kind \"Type\": its module name type is a Rust keyword; choose another kind"
        );
        assert_eq!(
            message(check_kind("Context")),
            "invalid kind \"Context\": the scaffolded code already uses the name Context; \
             choose another kind"
        );
        let long = format!("A{}", "b".repeat(63));
        assert_eq!(
            message(check_kind(&long)),
            format!("invalid kind {long:?}: a kind has at most 63 characters, not 64")
        );
        let plural_too_long = format!("A{}s", "b".repeat(61));
        assert_eq!(
            message(check_kind(&plural_too_long)),
            format!(
                "invalid kind {plural_too_long:?}: its plural {}es has 65 characters; a \
                 resource name has at most 63",
                plural_too_long.to_ascii_lowercase()
            )
        );
    }

    #[test]
    fn project_names_are_dns_labels_and_free_crate_names() {
        for good in ["guestbook", "memcached-operator", "op2"] {
            assert_eq!(check_project_name(good), Ok(()), "{good}");
        }
        for bad in ["Guestbook", "2op", "op-", "my_op", "", "my.op"] {
            assert_eq!(
                message(check_project_name(bad)),
                format!(
                    "invalid project name {bad:?}: a project name is a DNS-1123 label that \
                     starts with a letter: lowercase letters, digits and '-', ending with a \
                     letter or digit, at most 63 characters"
                )
            );
        }
        assert_eq!(
            message(check_project_name("controller-runtime")),
            "invalid project name \"controller-runtime\": the crate name controller_runtime \
             is taken by Rust or by a dependency; choose another"
        );
        assert_eq!(
            message(check_project_name("match")),
            "invalid project name \"match\": the crate name match is taken by Rust or by a \
             dependency; choose another"
        );
    }

    #[test]
    fn plurals_match_the_derive() {
        for (singular, plural) in [
            ("memcached", "memcacheds"),
            ("guestbook", "guestbooks"),
            ("policy", "policies"),
            ("gateway", "gateways"),
            ("bus", "buses"),
            ("box", "boxes"),
            ("batch", "batches"),
            ("mesh", "meshes"),
            ("quiz", "quizes"),
        ] {
            assert_eq!(pluralize(singular), plural);
        }
    }

    #[test]
    fn a_gvk_names_its_parts() {
        let gvk = Gvk {
            group: "webapp".into(),
            domain: "example.com".into(),
            version: "v1".into(),
            kind: "CronJob".into(),
        };
        assert_eq!(gvk.full_group(), "webapp.example.com");
        assert_eq!(gvk.api_version(), "webapp.example.com/v1");
        assert_eq!(
            (gvk.module(), gvk.plural()),
            ("cronjob".into(), "cronjobs".into())
        );
        assert_eq!(gvk.check(), Ok(()));
    }
}
