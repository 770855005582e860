//! The `PROJECT` file: what `init` and each `create` recorded, in kubebuilder's shape, so
//! later commands know the domain, the kinds and their webhooks.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::names::Gvk;

/// The layout this tool writes, as kubebuilder records its plugin (`go.kubebuilder.io/v4`).
pub const LAYOUT: &str = "rust.kubebuilder-rs/v1";

/// The file's name at the project's root.
pub const FILE: &str = "PROJECT";

/// What stops reading the `PROJECT` file.
#[derive(Debug, thiserror::Error)]
pub enum ProjectError {
    /// There is none: the directory holds no project.
    #[error("no PROJECT file in {}: run `kubebuilder-rs init --domain <domain>` there first", .0.display())]
    Missing(std::path::PathBuf),
    /// It cannot be read.
    #[error("reading {}: {source}", .path.display())]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// It does not parse.
    #[error("{} is not a PROJECT file kubebuilder-rs can read: {message}", .path.display())]
    Parse {
        /// The file.
        path: std::path::PathBuf,
        /// The parser's message, on one line.
        message: String,
    },
    /// Another tool (kubebuilder itself, say) wrote it.
    #[error("{} was written for layout {layout:?}, not {LAYOUT}: this is not a kubebuilder-rs project", .path.display())]
    Layout {
        /// The file.
        path: std::path::PathBuf,
        /// The layout it names.
        layout: String,
    },
}

/// The `PROJECT` file.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Project {
    /// The domain every group of the project ends in.
    pub domain: String,
    /// The tool and layout that wrote the project.
    pub layout: Vec<String>,
    /// The project's name: its package, image and namespace name.
    pub project_name: String,
    /// Where the runtime comes from, as `init` was told.
    #[serde(default)]
    pub runtime: String,
    /// The kinds, in the order they were created.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<Resource>,
    /// The file format's version: kubebuilder's "3".
    pub version: String,
}

/// One kind of the project.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Resource {
    /// Its API: the CRD and the Rust types.
    pub api: Api,
    /// Whether it has a controller.
    #[serde(default)]
    pub controller: bool,
    /// The project's domain.
    pub domain: String,
    /// The short group (`webapp`).
    pub group: String,
    /// The kind (`Guestbook`).
    pub kind: String,
    /// The Rust path of its type (`guestbook::api::v1::Guestbook`).
    pub path: String,
    /// The version (`v1`).
    pub version: String,
    /// Its admission webhooks, once it has any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhooks: Option<Webhooks>,
}

/// A kind's API.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Api {
    /// The CRD's API version: `v1`.
    pub crd_version: String,
    /// Whether its objects live in namespaces.
    pub namespaced: bool,
}

/// A kind's admission webhooks.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Webhooks {
    /// A defaulting (mutating) webhook.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub defaulting: bool,
    /// A validating webhook.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub validation: bool,
    /// A conversion webhook.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub conversion: bool,
    /// The AdmissionReview version: `v1`.
    pub webhook_version: String,
}

impl Resource {
    /// The resource's group, version and kind.
    pub fn gvk(&self) -> Gvk {
        Gvk {
            group: self.group.clone(),
            domain: self.domain.clone(),
            version: self.version.clone(),
            kind: self.kind.clone(),
        }
    }
}

impl Project {
    /// A new project's file.
    pub fn new(domain: &str, project_name: &str, runtime: &str) -> Project {
        Project {
            domain: domain.to_owned(),
            layout: vec![LAYOUT.to_owned()],
            project_name: project_name.to_owned(),
            runtime: runtime.to_owned(),
            resources: Vec::new(),
            version: "3".to_owned(),
        }
    }

    /// Reads `<root>/PROJECT`.
    ///
    /// # Errors
    ///
    /// [`ProjectError`]: missing, unreadable, not YAML of this shape, or another layout.
    pub fn read(root: &Path) -> Result<Project, ProjectError> {
        let path = root.join(FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(ProjectError::Missing(root.to_owned()));
            }
            Err(source) => return Err(ProjectError::Read { path, source }),
        };
        let options = serde_saphyr::options! { with_snippet: false };
        let project: Project =
            serde_saphyr::from_str_with_options(&text, options).map_err(|e| {
                ProjectError::Parse {
                    path: path.clone(),
                    message: e.to_string().lines().collect::<Vec<_>>().join(" "),
                }
            })?;
        if !project.layout.iter().any(|l| l == LAYOUT) {
            return Err(ProjectError::Layout {
                path,
                layout: project.layout.join(", "),
            });
        }
        Ok(project)
    }

    /// The file's text.
    pub fn to_yaml(&self) -> String {
        let body = serde_saphyr::to_string(self).expect("a Project is plain data");
        format!(
            "# Written by kubebuilder-rs, which reads it back: it records the project's domain \
             and\n# kinds. Edit it only to undo a `create` whose files you removed.\n{body}"
        )
    }

    /// The resource of kind `kind` (compared case-insensitively, as its file names are).
    pub fn resource(&self, kind: &str) -> Option<&Resource> {
        self.resources
            .iter()
            .find(|r| r.kind.eq_ignore_ascii_case(kind))
    }

    /// Every version of kind `kind`, in the order they were created: the first is the
    /// storage version (the conversion hub).
    pub fn versions(&self, kind: &str) -> Vec<&Resource> {
        self.resources
            .iter()
            .filter(|r| r.kind.eq_ignore_ascii_case(kind))
            .collect()
    }

    /// The resource of `gvk`, to change.
    pub fn resource_mut(&mut self, gvk: &Gvk) -> Option<&mut Resource> {
        self.resources.iter_mut().find(|r| r.gvk() == *gvk)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_project_reads_back_what_it_wrote() {
        let mut project = Project::new("example.com", "guestbook", "path:/src/runtime");
        project.resources.push(Resource {
            api: Api {
                crd_version: "v1".into(),
                namespaced: true,
            },
            controller: true,
            domain: "example.com".into(),
            group: "webapp".into(),
            kind: "Guestbook".into(),
            path: "guestbook::api::v1::Guestbook".into(),
            version: "v1".into(),
            webhooks: Some(Webhooks {
                defaulting: true,
                webhook_version: "v1".into(),
                ..Webhooks::default()
            }),
        });
        let dir =
            std::env::temp_dir().join(format!("kubebuilder-rs-project-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(FILE), project.to_yaml()).unwrap();
        assert_eq!(Project::read(&dir).unwrap(), project);
        assert!(project.to_yaml().contains("projectName: guestbook\n"));
        assert!(!project.to_yaml().contains("validation"));

        std::fs::write(dir.join(FILE), "domain: [").unwrap();
        let e = Project::read(&dir).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!(
                "{} is not a PROJECT file",
                dir.join(FILE).display()
            )),
            "{e}"
        );
        assert!(!e.contains('\n'), "{e}");

        std::fs::write(
            dir.join(FILE),
            "domain: example.com\nlayout:\n- go.kubebuilder.io/v4\nprojectName: x\nversion: \"3\"\n",
        )
        .unwrap();
        assert_eq!(
            Project::read(&dir).unwrap_err().to_string(),
            format!(
                "{} was written for layout \"go.kubebuilder.io/v4\", not rust.kubebuilder-rs/v1: \
                 this is not a kubebuilder-rs project",
                dir.join(FILE).display()
            )
        );
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            Project::read(&dir).unwrap_err().to_string(),
            format!(
                "no PROJECT file in {}: run `kubebuilder-rs init --domain <domain>` there first",
                dir.display()
            )
        );
    }
}
