//! The templates a project is written from (the files under `templates/`, compiled in) and
//! their one substitution: `{{name}}` becomes the value of `name`.
//!
//! A template is the file as the project gets it, with placeholders; `{{` that does not
//! start a placeholder (`{{name}}`, lowercase letters and `_`) stays as written. Switching
//! the scaffold to a new runtime API is an edit of the template files alone.

/// One template file.
#[derive(Clone, Copy, Debug)]
pub struct Template {
    /// Its path under `templates/`.
    pub path: &'static str,
    /// Its text.
    pub text: &'static str,
}

macro_rules! templates {
    ($($name:ident = $path:literal;)*) => {
        $(
            #[doc = concat!("`templates/", $path, "`.")]
            pub const $name: Template = Template {
                path: $path,
                text: include_str!(concat!("../templates/", $path)),
            };
        )*
        /// Every template.
        #[cfg(test)]
        pub const ALL: &[Template] = &[$($name),*];
    };
}

templates! {
    CARGO_TOML = "init/Cargo.toml.tpl";
    GITIGNORE = "init/gitignore.tpl";
    DOCKERIGNORE = "init/dockerignore.tpl";
    DOCKERFILE = "init/Dockerfile.tpl";
    MAKEFILE = "init/Makefile.tpl";
    README = "init/README.md.tpl";
    MAIN_RS = "init/src/main.rs.tpl";
    LIB_RS = "init/src/lib.rs.tpl";
    API_MOD = "init/src/api/mod.rs.tpl";
    CONTROLLER_MOD = "init/src/controller/mod.rs.tpl";
    WEBHOOK_MOD = "init/src/webhook/mod.rs.tpl";
    TEST_SUPPORT = "init/tests/support/mod.rs.tpl";
    DEPLOY_OVERLAY = "init/hack/deploy-overlay.sh.tpl";
    CRD_KUSTOMIZATION = "init/config/crd/kustomization.yaml.tpl";
    SAMPLES_KUSTOMIZATION = "init/config/samples/kustomization.yaml.tpl";
    DEFAULT_KUSTOMIZATION = "init/config/default/kustomization.yaml.tpl";
    DEFAULT_METRICS_PATCH = "init/config/default/manager_metrics_patch.yaml.tpl";
    DEFAULT_METRICS_SERVICE = "init/config/default/metrics_service.yaml.tpl";
    MANAGER_KUSTOMIZATION = "init/config/manager/kustomization.yaml.tpl";
    MANAGER = "init/config/manager/manager.yaml.tpl";
    RBAC_KUSTOMIZATION = "init/config/rbac/kustomization.yaml.tpl";
    RBAC_ROLE = "init/config/rbac/role.yaml.tpl";
    RBAC_ROLE_BINDING = "init/config/rbac/role_binding.yaml.tpl";
    RBAC_SERVICE_ACCOUNT = "init/config/rbac/service_account.yaml.tpl";
    RBAC_LEADER_ELECTION_ROLE = "init/config/rbac/leader_election_role.yaml.tpl";
    RBAC_LEADER_ELECTION_ROLE_BINDING = "init/config/rbac/leader_election_role_binding.yaml.tpl";
    RBAC_METRICS_AUTH_ROLE = "init/config/rbac/metrics_auth_role.yaml.tpl";
    RBAC_METRICS_AUTH_ROLE_BINDING = "init/config/rbac/metrics_auth_role_binding.yaml.tpl";
    RBAC_METRICS_READER_ROLE = "init/config/rbac/metrics_reader_role.yaml.tpl";
    API_VERSION_MOD = "api/version_mod.rs.tpl";
    API_KIND = "api/kind.rs.tpl";
    API_CONTROLLER = "api/controller.rs.tpl";
    API_TEST = "api/test.rs.tpl";
    API_SAMPLE = "api/sample.yaml.tpl";
    WEBHOOK_KIND = "webhook/kind.rs.tpl";
    WEBHOOK_DEFAULTING = "webhook/defaulting.rs.tpl";
    WEBHOOK_VALIDATION = "webhook/validation.rs.tpl";
    WEBHOOK_CONVERSION = "webhook/conversion.rs.tpl";
    WEBHOOK_CONVERTING = "webhook/converting.rs.tpl";
    CONVERSION_PATCH = "webhook/crd_conversion_patch.yaml.tpl";
    CONVERSION_COMPONENT = "webhook/crd_patches_kustomization.yaml.tpl";
    CONVERSION_COMPONENT_ENTRY = "webhook/crd_patches_entry.yaml.tpl";
    CRD_KUSTOMIZECONFIG = "webhook/crd_kustomizeconfig.yaml.tpl";
    WEBHOOK_MANIFESTS = "webhook/manifests.yaml.tpl";
    WEBHOOK_CONFIGURATION = "webhook/configuration.yaml.tpl";
    WEBHOOK_ENTRY = "webhook/entry.yaml.tpl";
    WEBHOOK_KUSTOMIZATION = "webhook/kustomization.yaml.tpl";
    WEBHOOK_KUSTOMIZECONFIG = "webhook/kustomizeconfig.yaml.tpl";
    WEBHOOK_SERVICE = "webhook/service.yaml.tpl";
    WEBHOOK_MANAGER_PATCH = "webhook/manager_webhook_patch.yaml.tpl";
}

/// The values a template's placeholders take.
#[derive(Clone, Debug, Default)]
pub struct Values(Vec<(&'static str, String)>);

impl Values {
    /// Sets (or replaces) the value of `name`.
    pub fn set(&mut self, name: &'static str, value: impl Into<String>) -> &mut Self {
        let value = value.into();
        match self.0.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = value,
            None => self.0.push((name, value)),
        }
        self
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The placeholder name at the start of `s` (just after `{{`), if `s` starts with
/// `name}}`.
fn placeholder(s: &str) -> Option<&str> {
    let end = s.find(|c: char| !(c.is_ascii_lowercase() || c == '_'))?;
    (end > 0 && s[end..].starts_with("}}")).then(|| &s[..end])
}

impl Template {
    /// The template with every placeholder replaced.
    ///
    /// # Panics
    ///
    /// On a placeholder `values` has no value for: a template and the code that fills it
    /// disagree (the tests render every template).
    pub fn render(&self, values: &Values) -> String {
        let mut out = String::with_capacity(self.text.len() + 256);
        let mut rest = self.text;
        while let Some(at) = rest.find("{{") {
            out.push_str(&rest[..at]);
            let after = &rest[at + 2..];
            match placeholder(after) {
                Some(name) => {
                    let value = values.get(name).unwrap_or_else(|| {
                        panic!("templates/{}: no value for {{{{{name}}}}}", self.path)
                    });
                    out.push_str(value);
                    rest = &after[name.len() + 2..];
                }
                None => {
                    out.push('{');
                    rest = &rest[at + 1..];
                }
            }
        }
        out.push_str(rest);
        out
    }

    /// The placeholders the template uses.
    #[cfg(test)]
    pub fn placeholders(&self) -> Vec<&'static str> {
        let mut names = Vec::new();
        let mut rest = self.text;
        while let Some(at) = rest.find("{{") {
            match placeholder(&rest[at + 2..]) {
                Some(name) => {
                    names.push(name);
                    rest = &rest[at + 2 + name.len() + 2..];
                }
                None => rest = &rest[at + 1..],
            }
        }
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_replaced_and_other_braces_kept() {
        let t = Template {
            path: "t",
            text: "{{a}} {{{b}} format!(\"{{}}\") {{ c }} {{a}}",
        };
        let mut values = Values::default();
        values.set("a", "1").set("b", "2");
        assert_eq!(t.render(&values), "1 {2 format!(\"{{}}\") {{ c }} 1");
        assert_eq!(t.placeholders(), vec!["a", "b", "a"]);
    }

    #[test]
    #[should_panic(expected = "templates/t: no value for {{b}}")]
    fn a_placeholder_without_a_value_is_a_bug() {
        let t = Template {
            path: "t",
            text: "{{b}}",
        };
        t.render(&Values::default());
    }

    /// The type names a template brings into scope: its `use` lines' last segments and
    /// brace lists, and the types it declares (placeholders aside).
    fn names_in_scope(text: &str) -> Vec<String> {
        let mut names = Vec::new();
        for line in text.lines().map(str::trim) {
            let declared = ["pub struct ", "struct ", "pub enum ", "type ", "pub type "]
                .iter()
                .find_map(|p| line.strip_prefix(p));
            if let Some(rest) = declared {
                names.push(
                    rest.split(|c: char| !c.is_alphanumeric())
                        .next()
                        .unwrap_or("")
                        .to_owned(),
                );
            }
            let Some(path) = line
                .strip_prefix("use ")
                .or_else(|| line.strip_prefix("pub use "))
            else {
                continue;
            };
            let path = path.trim_end_matches(';');
            let items = match path.split_once('{') {
                Some((_, list)) => list
                    .trim_end_matches('}')
                    .split(',')
                    .map(str::trim)
                    .collect(),
                None => vec![path.rsplit("::").next().unwrap_or(path)],
            };
            for item in items {
                let name = item
                    .rsplit(" as ")
                    .next()
                    .unwrap_or(item)
                    .rsplit("::")
                    .next()
                    .unwrap_or(item);
                names.push(name.trim().to_owned());
            }
        }
        // Types (constants, all capitals, live in the value namespace: no clash).
        names.retain(|n| {
            n.starts_with(|c: char| c.is_ascii_uppercase())
                && n.contains(|c: char| c.is_ascii_lowercase())
                && !n.contains("{{")
        });
        names
    }

    #[test]
    fn a_kind_cannot_take_a_name_its_files_use() {
        for template in [
            API_KIND,
            API_CONTROLLER,
            API_TEST,
            WEBHOOK_KIND,
            WEBHOOK_DEFAULTING,
            WEBHOOK_VALIDATION,
            WEBHOOK_CONVERSION,
            WEBHOOK_CONVERTING,
        ] {
            for name in names_in_scope(template.text) {
                assert!(
                    crate::names::RESERVED_KINDS.contains(&name.as_str()),
                    "templates/{} uses {name}: add it to names::RESERVED_KINDS",
                    template.path
                );
            }
        }
        assert!(names_in_scope(API_CONTROLLER.text).contains(&"Context".to_owned()));
        assert!(names_in_scope(API_TEST.text).contains(&"Cluster".to_owned()));
    }

    #[test]
    fn every_template_file_is_listed() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("templates");
        let mut on_disk = Vec::new();
        let mut dirs = vec![root.clone()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else {
                    on_disk.push(path.strip_prefix(&root).unwrap().display().to_string());
                }
            }
        }
        on_disk.sort();
        let mut listed: Vec<String> = ALL.iter().map(|t| t.path.to_owned()).collect();
        listed.sort();
        assert_eq!(listed, on_disk);
    }
}
