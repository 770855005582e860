//! Where a project's runtime comes from, and its Cargo.toml's dependency lines, taken from
//! the runtime's own workspace manifest so that both build on the same versions.

use std::path::{Path, PathBuf};

/// The workspace manifest this tool was built with: the versions of a runtime from git or a
/// registry, whose checkout is not on this machine.
const BUILT_WITH: &str = include_str!("../../../Cargo.toml");

/// The dependencies a scaffolded project declares besides the runtime, each with the
/// features it needs beyond the workspace's.
const DEPENDENCIES: &[(&str, &[&str])] = &[
    ("clap", &[]),
    ("k8s-openapi", &[]),
    ("schemars", &[]),
    ("serde", &[]),
    ("serde_json", &[]),
    ("thiserror", &[]),
    ("tokio", &["macros", "rt-multi-thread", "time"]),
    ("tracing", &[]),
];

/// Where the runtime crate, `controller-runtime`, comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RuntimeSource {
    /// A checkout on this machine (the default: the one this tool was built from).
    Path(PathBuf),
    /// A git repository, at a branch, tag or revision (or its default branch).
    Git {
        /// The repository's URL.
        url: String,
        /// `branch`, `tag` or `rev`, and its value.
        reference: Option<(&'static str, String)>,
    },
    /// A version from a registry (crates.io).
    Version(String),
}

/// What is wrong with the runtime source.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The path is not a directory.
    #[error("--runtime-path {}: no such directory", .0.display())]
    NoDirectory(PathBuf),
    /// The default checkout has moved or gone.
    #[error("the runtime kubebuilder-rs was built from ({}) is gone: pass --runtime-path, --runtime-git or --runtime-version", .0.display())]
    BuiltFromGone(PathBuf),
    /// The path holds no controller-runtime package.
    #[error("--runtime-path {}: its Cargo.toml is not the controller-runtime package", .0.display())]
    NotTheRuntime(PathBuf),
    /// The runtime's manifest lacks a dependency the project needs.
    #[error("{manifest}: no `{dependency}` in [workspace.dependencies], which the project needs")]
    NoDependency {
        /// Which manifest.
        manifest: String,
        /// The dependency.
        dependency: String,
    },
    /// An empty URL or version.
    #[error("{0} must not be empty")]
    Empty(&'static str),
}

impl RuntimeSource {
    /// The checkout this tool was built from: `<this crate>/../..`.
    pub fn built_from() -> RuntimeSource {
        RuntimeSource::Path(built_from_path())
    }

    /// Checks the source and makes a path absolute and canonical.
    ///
    /// # Errors
    ///
    /// [`RuntimeError`] saying what is wrong.
    pub fn resolve(self) -> Result<RuntimeSource, RuntimeError> {
        match self {
            RuntimeSource::Path(path) => {
                let canonical = match path.canonicalize() {
                    Ok(canonical) if canonical.is_dir() => canonical,
                    _ if path == built_from_path() => {
                        return Err(RuntimeError::BuiltFromGone(path));
                    }
                    _ => return Err(RuntimeError::NoDirectory(path)),
                };
                let manifest =
                    std::fs::read_to_string(canonical.join("Cargo.toml")).unwrap_or_default();
                if package_name(&manifest) != Some("controller-runtime") {
                    return Err(RuntimeError::NotTheRuntime(canonical));
                }
                Ok(RuntimeSource::Path(canonical))
            }
            RuntimeSource::Git { url, .. } if url.trim().is_empty() => {
                Err(RuntimeError::Empty("--runtime-git"))
            }
            RuntimeSource::Version(v) if v.trim().is_empty() => {
                Err(RuntimeError::Empty("--runtime-version"))
            }
            other => Ok(other),
        }
    }

    /// The runtime's dependency line in the project's Cargo.toml.
    pub fn dependency(&self) -> String {
        let value = match self {
            RuntimeSource::Path(path) => {
                format!("{{ path = {} }}", toml_string(&path.to_string_lossy()))
            }
            RuntimeSource::Git { url, reference } => match reference {
                None => format!("{{ git = {} }}", toml_string(url)),
                Some((key, value)) => format!(
                    "{{ git = {}, {key} = {} }}",
                    toml_string(url),
                    toml_string(value)
                ),
            },
            RuntimeSource::Version(v) => toml_string(v),
        };
        format!("controller-runtime = {value}")
    }

    /// The source in one line, for the PROJECT file: `path:<dir>`, `git:<url>[#rev=..]` or
    /// `version:<req>`.
    pub fn describe(&self) -> String {
        match self {
            RuntimeSource::Path(path) => format!("path:{}", path.display()),
            RuntimeSource::Git { url, reference } => match reference {
                None => format!("git:{url}"),
                Some((key, value)) => format!("git:{url}#{key}={value}"),
            },
            RuntimeSource::Version(v) => format!("version:{v}"),
        }
    }

    /// The runtime's `Cargo.lock`, to copy into the project: only a checkout on this machine
    /// has one, and it makes the project build on exactly the runtime's dependency versions
    /// (so a shared target directory rebuilds none of them).
    pub fn lock_file(&self) -> Option<String> {
        match self {
            RuntimeSource::Path(path) => std::fs::read_to_string(path.join("Cargo.lock")).ok(),
            _ => None,
        }
    }

    /// The project's other dependency lines, one per line, with the runtime workspace's
    /// versions and features (its manifest for a checkout, else the one this tool was
    /// built with).
    ///
    /// # Errors
    ///
    /// [`RuntimeError::NoDependency`] if the manifest lacks one.
    pub fn dependencies(&self) -> Result<String, RuntimeError> {
        let (name, manifest) = match self {
            RuntimeSource::Path(path) => {
                let file = path.join("Cargo.toml");
                let text = std::fs::read_to_string(&file).unwrap_or_default();
                (file.display().to_string(), text)
            }
            _ => (
                "the workspace kubebuilder-rs was built in".to_owned(),
                BUILT_WITH.to_owned(),
            ),
        };
        let mut lines = Vec::new();
        for (dependency, features) in DEPENDENCIES {
            let value = workspace_dependency(&manifest, dependency).ok_or_else(|| {
                RuntimeError::NoDependency {
                    manifest: name.clone(),
                    dependency: (*dependency).to_owned(),
                }
            })?;
            lines.push(format!("{dependency} = {}", with_features(value, features)));
        }
        Ok(lines.join("\n"))
    }

    /// The workspace's `rust-version`, which the project declares too.
    pub fn rust_version(&self) -> String {
        let manifest = match self {
            RuntimeSource::Path(path) => {
                std::fs::read_to_string(path.join("Cargo.toml")).unwrap_or_default()
            }
            _ => BUILT_WITH.to_owned(),
        };
        table_value(&manifest, "[workspace.package]", "rust-version")
            .or_else(|| table_value(BUILT_WITH, "[workspace.package]", "rust-version"))
            .map(|v| v.trim_matches('"').to_owned())
            .unwrap_or_else(|| "1.95".to_owned())
    }
}

/// The checkout this tool was built from.
fn built_from_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `[package] name` of a manifest.
fn package_name(manifest: &str) -> Option<&str> {
    table_value(manifest, "[package]", "name").map(|v| v.trim_matches('"'))
}

/// The value of `key` in `table` of a TOML manifest, as written (one line; Cargo's
/// manifests keep inline tables on one line).
fn table_value<'a>(manifest: &'a str, table: &str, key: &str) -> Option<&'a str> {
    let mut inside = false;
    for line in manifest.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('[') {
            inside = trimmed == table;
            continue;
        }
        if !inside {
            continue;
        }
        if let Some((k, v)) = trimmed.split_once('=')
            && k.trim() == key
        {
            return Some(v.trim());
        }
    }
    None
}

/// The `[workspace.dependencies]` entry of `name`, as written: `"1"` or `{ version = .. }`.
pub fn workspace_dependency<'a>(manifest: &'a str, name: &str) -> Option<&'a str> {
    table_value(manifest, "[workspace.dependencies]", name)
}

/// A dependency's value with `features` added: `"1"` becomes `{ version = "1", features =
/// [..] }`; an inline table gets them in its `features` list, or a new one.
fn with_features(value: &str, features: &[&str]) -> String {
    if features.is_empty() {
        return value.to_owned();
    }
    let quoted: Vec<String> = features.iter().map(|f| format!("\"{f}\"")).collect();
    let list = quoted.join(", ");
    if value.starts_with('"') {
        return format!("{{ version = {value}, features = [{list}] }}");
    }
    if let Some(at) = value.find("features = [") {
        let at = at + "features = [".len();
        return format!("{}{list}, {}", &value[..at], &value[at..]);
    }
    match value.rfind('}') {
        Some(end) => format!(
            "{}, features = [{list}] }}",
            value[..end].trim_end().trim_end_matches(',')
        ),
        None => value.to_owned(),
    }
}

/// A TOML basic string.
fn toml_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dependency_is_in_the_workspace_manifest() {
        let lines = RuntimeSource::Version("0.1".into()).dependencies().unwrap();
        assert_eq!(lines.lines().count(), DEPENDENCIES.len());
        assert!(
            lines.contains("k8s-openapi = { version = \"0.29\", features = [\"v1_36\"] }"),
            "{lines}"
        );
        assert!(
            lines.contains(
                "tokio = { version = \"1\", default-features = false, features = [\"macros\", \
                 \"rt-multi-thread\", \"time\"] }"
            ),
            "{lines}"
        );
    }

    #[test]
    fn features_are_added_to_any_form_of_dependency() {
        assert_eq!(
            with_features("\"1\"", &["a"]),
            "{ version = \"1\", features = [\"a\"] }"
        );
        assert_eq!(
            with_features("{ version = \"4\", features = [\"derive\"] }", &["env"]),
            "{ version = \"4\", features = [\"env\", \"derive\"] }"
        );
        assert_eq!(
            with_features("{ version = \"1\", default-features = false }", &["rt"]),
            "{ version = \"1\", default-features = false, features = [\"rt\"] }"
        );
        assert_eq!(with_features("\"1\"", &[]), "\"1\"");
    }

    #[test]
    fn each_source_is_written_as_cargo_reads_it() {
        let git = RuntimeSource::Git {
            url: "https://example.com/rt.git".into(),
            reference: Some(("rev", "abc123".into())),
        };
        assert_eq!(
            git.dependency(),
            "controller-runtime = { git = \"https://example.com/rt.git\", rev = \"abc123\" }"
        );
        assert_eq!(git.describe(), "git:https://example.com/rt.git#rev=abc123");
        assert_eq!(
            RuntimeSource::Version("0.1".into()).dependency(),
            "controller-runtime = \"0.1\""
        );
        assert_eq!(
            RuntimeSource::Path("/a \"b\"".into()).dependency(),
            "controller-runtime = { path = \"/a \\\"b\\\"\" }"
        );
    }

    #[test]
    fn the_built_from_checkout_is_the_runtime() {
        let RuntimeSource::Path(path) = RuntimeSource::built_from().resolve().unwrap() else {
            panic!("a path");
        };
        assert!(path.join("src/runtime").is_dir());
        let here = Path::new(env!("CARGO_MANIFEST_DIR")).to_owned();
        assert_eq!(
            RuntimeSource::Path(here.clone())
                .resolve()
                .unwrap_err()
                .to_string(),
            format!(
                "--runtime-path {}: its Cargo.toml is not the controller-runtime package",
                here.display()
            )
        );
        assert_eq!(
            RuntimeSource::Path("/nonexistent/rt".into())
                .resolve()
                .unwrap_err()
                .to_string(),
            "--runtime-path /nonexistent/rt: no such directory"
        );
        assert_eq!(
            RuntimeSource::Git {
                url: " ".into(),
                reference: None
            }
            .resolve()
            .unwrap_err()
            .to_string(),
            "--runtime-git must not be empty"
        );
    }
}
