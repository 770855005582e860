//! The commands: `init`, `create api` and `create webhook`, each checking all of its input
//! and the project's state, then planning every file it writes, before writing any.

use std::path::{Path, PathBuf};

use crate::names::{self, Gvk, InvalidName};
use crate::plan::{Change, Marker, Order, Plan, PlanError};
use crate::project::{self, Project, ProjectError};
use crate::runtime::{RuntimeError, RuntimeSource};
use crate::templates::{self as t, Template, Values};

/// Why a command wrote nothing.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A name breaks a rule.
    #[error(transparent)]
    Name(#[from] InvalidName),
    /// The runtime source is unusable.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The `PROJECT` file is missing or unreadable.
    #[error(transparent)]
    Project(#[from] ProjectError),
    /// A file is in the way, lacks its marker, or cannot be written.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// `init` in a directory holding other files.
    #[error("{} is not empty: {} in the way; init needs an empty directory (dotfiles such as .git, *.md files and LICENSE-style files may stay)", .dir.display(), list(.entries))]
    NotEmpty {
        /// The directory.
        dir: PathBuf,
        /// What is in the way.
        entries: Vec<String>,
    },
    /// `init` where a project is already.
    #[error("{} already holds a project (PROJECT): add kinds to it with `kubebuilder-rs create api`", .0.display())]
    AlreadyInitialized(PathBuf),
    /// Reading the directory failed.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// `create api` for a kind the project has in that version, or in another group.
    #[error(
        "kind {kind} already exists as {api_version} ({file}); kubebuilder-rs creates a kind once per version, all its versions in one group"
    )]
    KindExists {
        /// The kind.
        kind: String,
        /// Its group and version in the project.
        api_version: String,
        /// Its types' file.
        file: String,
    },
    /// `create api --resource=false`.
    #[error(
        "--resource=false is not supported: kubebuilder-rs scaffolds controllers only for kinds it creates"
    )]
    NoResource,
    /// `create webhook` for a kind the project lacks.
    #[error(
        "no kind {kind} in {api_version}: create it first with `kubebuilder-rs create api --group {group} --version {version} --kind {kind}`"
    )]
    NoKind {
        /// The kind asked for.
        kind: String,
        /// Its group and version as asked.
        api_version: String,
        /// The short group asked for.
        group: String,
        /// The version asked for.
        version: String,
    },
    /// `create webhook` for a kind the project has in another group or version.
    #[error("no kind {kind} in {asked}: this project has {kind} in {has}")]
    KindElsewhere {
        /// The kind.
        kind: String,
        /// The group and version asked for.
        asked: String,
        /// Where the project has it.
        has: String,
    },
    /// `create webhook` with no webhook asked for.
    #[error(
        "create webhook needs at least one of --defaulting, --programmatic-validation and --conversion"
    )]
    NoWebhookType,
    /// `create webhook --conversion` for a kind with one version.
    #[error(
        "--conversion: kind {kind} has one version ({api_version}); a conversion webhook converts between versions: add one first with `kubebuilder-rs create api --group {group} --version <version> --kind {kind}`"
    )]
    OneVersion {
        /// The kind.
        kind: String,
        /// Its one group and version.
        api_version: String,
        /// Its short group.
        group: String,
    },
    /// `create webhook` for webhooks the kind has.
    #[error("{kind} already has a {names} webhook ({file}); ask only for the webhooks it lacks")]
    WebhookExists {
        /// The kind.
        kind: String,
        /// The webhook types it has already, e.g. `defaulting and validating`.
        names: String,
        /// Its webhook file.
        file: String,
    },
}

/// `a, b and c` (at most eight, then how many more).
fn list(entries: &[String]) -> String {
    const SHOWN: usize = 8;
    let shown: Vec<&str> = entries.iter().take(SHOWN).map(String::as_str).collect();
    let more = entries.len().saturating_sub(SHOWN);
    let verb = if entries.len() == 1 { "is" } else { "are" };
    let joined = match (shown.as_slice(), more) {
        ([one], 0) => (*one).to_owned(),
        (all, 0) => format!(
            "{} and {}",
            all[..all.len() - 1].join(", "),
            all[all.len() - 1]
        ),
        (all, more) => format!("{} and {more} more", all.join(", ")),
    };
    format!("{joined} {verb}")
}

/// What a command did: each file and what happened to it, and what to do next.
#[derive(Debug)]
pub struct Summary {
    /// The files, relative to the project, in path order.
    pub changes: Vec<(PathBuf, Change)>,
    /// The next steps, one command or hint per line.
    pub next: Vec<String>,
}

// === init ===

/// What `init` is given.
#[derive(Clone, Debug)]
pub struct InitOptions {
    /// The directory to scaffold in (made if missing).
    pub dir: PathBuf,
    /// The domain of the project's API groups.
    pub domain: String,
    /// The project's name; the directory's name when not given.
    pub project_name: Option<String>,
    /// Where the runtime comes from.
    pub runtime: RuntimeSource,
}

/// Scaffolds a new project in `options.dir`; see the crate docs for what it writes.
///
/// # Errors
///
/// [`Error`], before anything is written: a bad domain or project name, an unusable
/// runtime, a directory that is not empty or holds a project, or a failed write (which
/// removes what it wrote).
pub fn init(options: InitOptions) -> Result<Summary, Error> {
    let dir = absolute(&options.dir);
    names::check_domain(&options.domain)?;
    let project_name = match &options.project_name {
        Some(name) => name.clone(),
        None => dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
    };
    names::check_project_name(&project_name).map_err(|mut e| {
        if options.project_name.is_none() {
            e.rule
                .push_str(" (it is the directory's name: choose one with --project-name)");
        }
        e
    })?;
    let runtime = options.runtime.resolve()?;
    let dependencies = runtime.dependencies()?;
    check_empty(&dir)?;

    let mut values = Values::default();
    values
        .set("project_name", project_name.clone())
        .set("crate_name", names::crate_name(&project_name))
        .set("domain", options.domain.clone())
        .set(
            "leader_election_id",
            format!("{project_name}.{}", options.domain),
        )
        .set("edition", "2024")
        .set("rust_version", runtime.rust_version())
        .set("runtime_dependency", runtime.dependency())
        .set("dependencies", dependencies);
    match &runtime {
        RuntimeSource::Path(path) => {
            values
                .set("runtime_home", path.display().to_string())
                .set(
                    "docker_build_flags",
                    format!("--build-context runtime={} ", path.display()),
                )
                .set(
                    "docker_runtime_mount",
                    format!("    --mount=type=bind,from=runtime,target={} \\\n", path.display()),
                )
                .set(
                    "docker_note",
                    format!(
                        "\n#\n# The runtime is a path dependency ({}): `make docker-build` passes it as the\n# build context `runtime`, mounted at the same path.",
                        path.display()
                    ),
                );
        }
        other => {
            values
                .set("runtime_home", other.describe())
                .set("docker_build_flags", "")
                .set("docker_runtime_mount", "")
                .set("docker_note", "");
        }
    }

    let mut plan = Plan::new(&dir);
    for template in INIT_FILES {
        let path = template
            .path
            .trim_start_matches("init/")
            .trim_end_matches(".tpl");
        plan.create(path, template.render(&values))?;
    }
    plan.create_executable("hack/deploy-overlay.sh", t::DEPLOY_OVERLAY.render(&values))?;
    plan.create_or_keep("README.md", t::README.render(&values));
    plan.create_or_keep(".gitignore", t::GITIGNORE.render(&values));
    plan.create_or_keep(".dockerignore", t::DOCKERIGNORE.render(&values));
    if let Some(lock) = runtime.lock_file() {
        plan.create("Cargo.lock", lock)?;
    }
    let project = Project::new(&options.domain, &project_name, &runtime.describe());
    plan.create(project::FILE, project.to_yaml())?;

    let changes = plan.apply()?;
    let cd = if dir == absolute(Path::new(".")) {
        String::new()
    } else {
        format!("cd {} && ", dir.display())
    };
    Ok(Summary {
        changes,
        next: vec![format!(
            "{cd}kubebuilder-rs create api --group <group> --version <version> --kind <Kind>"
        )],
    })
}

/// The files `init` writes, each at its template's path under `templates/init/` (without
/// `.tpl`); the deploy script, README and ignore files are written apart.
const INIT_FILES: &[Template] = &[
    t::CARGO_TOML,
    t::DOCKERFILE,
    t::MAKEFILE,
    t::MAIN_RS,
    t::LIB_RS,
    t::API_MOD,
    t::CONTROLLER_MOD,
    t::WEBHOOK_MOD,
    t::TEST_SUPPORT,
    t::CRD_KUSTOMIZATION,
    t::SAMPLES_KUSTOMIZATION,
    t::DEFAULT_KUSTOMIZATION,
    t::DEFAULT_METRICS_PATCH,
    t::DEFAULT_METRICS_SERVICE,
    t::MANAGER_KUSTOMIZATION,
    t::MANAGER,
    t::RBAC_KUSTOMIZATION,
    t::RBAC_ROLE,
    t::RBAC_ROLE_BINDING,
    t::RBAC_SERVICE_ACCOUNT,
    t::RBAC_LEADER_ELECTION_ROLE,
    t::RBAC_LEADER_ELECTION_ROLE_BINDING,
    t::RBAC_METRICS_AUTH_ROLE,
    t::RBAC_METRICS_AUTH_ROLE_BINDING,
    t::RBAC_METRICS_READER_ROLE,
];

/// `path` made absolute against the current directory.
fn absolute(path: &Path) -> PathBuf {
    if path.is_absolute() {
        return path.to_owned();
    }
    let joined = std::env::current_dir().unwrap_or_default().join(path);
    joined.canonicalize().unwrap_or(joined)
}

/// Whether `dir` may be scaffolded into: missing, empty, or holding only dotfiles, `*.md`
/// files and LICENSE-style (all-uppercase) files, as kubebuilder allows.
fn check_empty(dir: &Path) -> Result<(), Error> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(Error::Io {
                path: dir.to_owned(),
                source,
            });
        }
    };
    let mut in_the_way = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| Error::Io {
            path: dir.to_owned(),
            source,
        })?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == project::FILE {
            return Err(Error::AlreadyInitialized(dir.to_owned()));
        }
        let is_file = entry.file_type().is_ok_and(|t| t.is_file());
        let allowed = name.starts_with('.')
            || (is_file && name.ends_with(".md"))
            || (is_file && name.chars().all(|c| c.is_ascii_uppercase()));
        if !allowed {
            in_the_way.push(name);
        }
    }
    if in_the_way.is_empty() {
        return Ok(());
    }
    in_the_way.sort();
    Err(Error::NotEmpty {
        dir: dir.to_owned(),
        entries: in_the_way,
    })
}

// === create api ===

/// What `create api` is given.
#[derive(Clone, Debug)]
pub struct ApiOptions {
    /// The project's directory.
    pub dir: PathBuf,
    /// The short group (`webapp`); the project's domain is appended.
    pub group: String,
    /// The version (`v1`).
    pub version: String,
    /// The kind (`Guestbook`).
    pub kind: String,
    /// Scaffold the kind's types (kubebuilder's `--resource`); only `true` is supported.
    pub resource: bool,
    /// Scaffold a controller for it (kubebuilder's `--controller`).
    pub controller: bool,
}

/// The placeholder values of a kind's templates.
fn kind_values(project: &Project, gvk: &Gvk) -> Values {
    let mut values = Values::default();
    values
        .set("project_name", project.project_name.clone())
        .set("crate_name", names::crate_name(&project.project_name))
        .set("group", gvk.group.clone())
        .set("full_group", gvk.full_group())
        .set("version", gvk.version.clone())
        .set("kind", gvk.kind.clone())
        .set("module", gvk.module())
        .set("plural", gvk.plural())
        .set("api_version", gvk.api_version());
    values
}

/// Adds a kind to the project: its types, controller, test, sample and CRD entries.
///
/// A kind the project has, in the same group and another version, gets that version: its
/// types and sample, and its place in the kind's CRD. The first version created stays the
/// storage version, the one the controller reconciles; the new one is declared in the CRD
/// but served only once `create webhook --conversion` converts it.
///
/// # Errors
///
/// [`Error`], before anything is written: no project, a bad group, version or kind, a kind
/// the project has in this version or in another group, a file in the way, or a marker
/// missing from a file it adds to.
pub fn create_api(options: ApiOptions) -> Result<Summary, Error> {
    let dir = absolute(&options.dir);
    let mut project = Project::read(&dir)?;
    let gvk = Gvk {
        group: options.group,
        domain: project.domain.clone(),
        version: options.version,
        kind: options.kind,
    };
    gvk.check()?;
    if !options.resource {
        return Err(Error::NoResource);
    }
    let versions = project.versions(&gvk.kind);
    let clash = versions
        .iter()
        .find(|r| r.version == gvk.version || r.group != gvk.group);
    if let Some(existing) = clash {
        let existing = existing.gvk();
        return Err(Error::KindExists {
            kind: existing.kind.clone(),
            api_version: existing.api_version(),
            file: format!("src/api/{}/{}.rs", existing.version, existing.module()),
        });
    }
    // Another version of a kind the project has: its controller stays on the first.
    let new_version = !versions.is_empty();
    let controller = options.controller && !new_version;
    let values = kind_values(&project, &gvk);
    let (version, module, kind, plural) = (
        gvk.version.as_str(),
        gvk.module(),
        gvk.kind.as_str(),
        gvk.plural(),
    );

    let mut plan = Plan::new(&dir);
    plan.create(
        format!("src/api/{version}/{module}.rs"),
        t::API_KIND.render(&values),
    )?;
    let version_mod = format!("src/api/{version}/mod.rs");
    if !dir.join(&version_mod).exists() {
        plan.create(&version_mod, t::API_VERSION_MOD.render(&values))?;
    }
    plan.insert_sorted(
        "src/api/mod.rs",
        Marker("versions"),
        &format!("pub mod {version};"),
        &format!("pub mod {version};"),
        Order::Mods,
    )?;
    plan.insert_sorted(
        &version_mod,
        Marker("kinds"),
        &format!("pub mod {module};"),
        &format!("pub mod {module};"),
        Order::Mods,
    )?;
    plan.insert_sorted(
        &version_mod,
        Marker("kind-exports"),
        &format!("{module}::{kind}"),
        &format!("pub use {module}::{kind};"),
        Order::Uses,
    )?;
    plan.insert(
        "src/lib.rs",
        Marker("crds"),
        &format!("api::{version}::{kind}"),
        &format!("<api::{version}::{kind} as controller_runtime::CustomResource>::crd,"),
    )?;
    if controller {
        plan.create(
            format!("src/controller/{module}.rs"),
            t::API_CONTROLLER.render(&values),
        )?;
        plan.insert_sorted(
            "src/controller/mod.rs",
            Marker("controllers"),
            &format!("pub mod {module};"),
            &format!("pub mod {module};"),
            Order::Mods,
        )?;
        plan.insert(
            "src/lib.rs",
            Marker("builder"),
            &format!("controller::{module}::setup"),
            &format!("controller::{module}::setup,"),
        )?;
        plan.create(format!("tests/{module}.rs"), t::API_TEST.render(&values))?;
    }
    let sample = format!("{}_{version}_{module}.yaml", gvk.group);
    plan.create(
        format!("config/samples/{sample}"),
        t::API_SAMPLE.render(&values),
    )?;
    // A new version is not served until it is converted: its sample waits for that.
    if !new_version {
        plan.insert(
            "config/samples/kustomization.yaml",
            Marker("manifestskustomizesamples"),
            &format!("- {sample}"),
            &format!("- {sample}"),
        )?;
        let crd_file = format!("bases/{}_{plural}.yaml", gvk.full_group());
        plan.insert(
            "config/crd/kustomization.yaml",
            Marker("crdkustomizeresource"),
            &format!("- {crd_file}"),
            &format!("- {crd_file}"),
        )?;
    }
    project.resources.push(project::Resource {
        api: project::Api {
            crd_version: "v1".to_owned(),
            namespaced: true,
        },
        controller,
        domain: gvk.domain.clone(),
        group: gvk.group.clone(),
        kind: gvk.kind.clone(),
        path: format!(
            "{}::api::{version}::{kind}",
            names::crate_name(&project.project_name)
        ),
        version: gvk.version.clone(),
        webhooks: None,
    });
    plan.replace(project::FILE, project.to_yaml());

    let changes = plan.apply()?;
    if new_version {
        let hub = &project.versions(&gvk.kind)[0].version;
        return Ok(Summary {
            changes,
            next: vec![
                format!("edit src/api/{version}/{module}.rs (the spec and status of {version})"),
                format!(
                    "kubebuilder-rs create webhook --group {} --version {hub} --kind {kind} --conversion (serves {version}, converted to and from the storage version {hub})",
                    gvk.group
                ),
            ],
        });
    }
    Ok(Summary {
        changes,
        next: vec![
            format!(
                "edit src/api/{version}/{module}.rs (the spec and status) and src/controller/{module}.rs (the reconcile)"
            ),
            "make manifests install run (manifests: the CRD, and the RBAC rules in config/rbac/role.yaml)".to_owned(),
        ],
    })
}

// === create webhook ===

/// A type of webhook `create webhook` adds: its flag, the template of the functions it adds
/// to the kind's webhook file, and how it is registered. Adding a type (conversion, once the
/// runtime has multi-version CRDs) is a template and an entry in [`WEBHOOK_TYPES`].
struct WebhookType {
    /// Whether the options ask for it.
    asked: fn(&WebhookOptions) -> bool,
    /// Its name in messages: `defaulting`, `validating`.
    name: &'static str,
    /// The functions it adds to `src/webhook/<kind>.rs`; `None` for the conversion, whose
    /// functions depend on the kind's versions.
    fragment: Option<Template>,
    /// The function in that file that registers it with the server.
    register: &'static str,
    /// Its configuration and entries in `config/webhook/manifests.yaml`.
    manifest: Option<Manifest>,
    /// Whether the kind has one, by the PROJECT file.
    has: fn(&project::Webhooks) -> bool,
    /// Records it in the PROJECT file.
    record: fn(&mut project::Webhooks),
}

/// A webhook type's place in `config/webhook/manifests.yaml`.
struct Manifest {
    /// The configuration's kind (`MutatingWebhookConfiguration`).
    kind: &'static str,
    /// The configuration's name.
    name: &'static str,
    /// The marker its entries go above.
    entries: Marker,
    /// The prefix of an entry's name (`m` in `mguestbook-v1.kb.io`).
    name_prefix: &'static str,
    /// The prefix of its path (`mutate` in `/mutate-<group>-<version>-<kind>`).
    path_prefix: &'static str,
}

const WEBHOOK_TYPES: &[WebhookType] = &[
    WebhookType {
        asked: |o| o.defaulting,
        name: "defaulting",
        fragment: Some(t::WEBHOOK_DEFAULTING),
        register: "defaulting",
        manifest: Some(Manifest {
            kind: "MutatingWebhookConfiguration",
            name: "mutating-webhook-configuration",
            entries: Marker("mutating-webhooks"),
            name_prefix: "m",
            path_prefix: "mutate",
        }),
        has: |w| w.defaulting,
        record: |w| w.defaulting = true,
    },
    WebhookType {
        asked: |o| o.programmatic_validation,
        name: "validating",
        fragment: Some(t::WEBHOOK_VALIDATION),
        register: "validating",
        manifest: Some(Manifest {
            kind: "ValidatingWebhookConfiguration",
            name: "validating-webhook-configuration",
            entries: Marker("validating-webhooks"),
            name_prefix: "v",
            path_prefix: "validate",
        }),
        has: |w| w.validation,
        record: |w| w.validation = true,
    },
    WebhookType {
        asked: |o| o.conversion,
        name: "conversion",
        // Made from WEBHOOK_CONVERSION per spoke and WEBHOOK_CONVERTING.
        fragment: None,
        register: "converting",
        manifest: None,
        has: |w| w.conversion,
        record: |w| w.conversion = true,
    },
];

/// What `create webhook` is given.
#[derive(Clone, Debug)]
pub struct WebhookOptions {
    /// The project's directory.
    pub dir: PathBuf,
    /// The short group.
    pub group: String,
    /// The version.
    pub version: String,
    /// The kind.
    pub kind: String,
    /// Add a defaulting webhook.
    pub defaulting: bool,
    /// Add a validating webhook.
    pub programmatic_validation: bool,
    /// Add a conversion webhook between the kind's versions.
    pub conversion: bool,
}

/// Adds admission webhooks to a kind: their functions, their registration, and the webhook
/// manifests under config/.
///
/// # Errors
///
/// [`Error`], before anything is written: no webhook asked for, one not supported yet, no
/// project, a bad group, version or kind, a kind the project lacks or has a webhook of that
/// type for, or a marker missing from a file it adds to.
pub fn create_webhook(options: WebhookOptions) -> Result<Summary, Error> {
    let asked: Vec<&WebhookType> = WEBHOOK_TYPES
        .iter()
        .filter(|w| (w.asked)(&options))
        .collect();
    if asked.is_empty() {
        return Err(Error::NoWebhookType);
    }
    let dir = absolute(&options.dir);
    let mut project = Project::read(&dir)?;
    let gvk = Gvk {
        group: options.group,
        domain: project.domain.clone(),
        version: options.version,
        kind: options.kind,
    };
    gvk.check()?;
    let versions: Vec<Gvk> = project
        .versions(&gvk.kind)
        .iter()
        .map(|r| r.gvk())
        .collect();
    if versions.is_empty() {
        return Err(Error::NoKind {
            kind: gvk.kind.clone(),
            api_version: gvk.api_version(),
            group: gvk.group.clone(),
            version: gvk.version.clone(),
        });
    }
    let Some(resource) = project.resources.iter().find(|r| r.gvk() == gvk) else {
        let has: Vec<String> = versions.iter().map(Gvk::api_version).collect();
        return Err(Error::KindElsewhere {
            kind: gvk.kind.clone(),
            asked: gvk.api_version(),
            has: has.join(", "),
        });
    };
    if options.conversion && versions.len() < 2 {
        return Err(Error::OneVersion {
            kind: gvk.kind.clone(),
            api_version: gvk.api_version(),
            group: gvk.group.clone(),
        });
    }
    let module = gvk.module();
    let kind_file = format!("src/webhook/{module}.rs");
    let had = resource.webhooks.clone();
    let existing: Vec<&str> = asked
        .iter()
        .filter(|w| had.as_ref().is_some_and(|h| (w.has)(h)))
        .map(|w| w.name)
        .collect();
    if !existing.is_empty() {
        return Err(Error::WebhookExists {
            kind: gvk.kind.clone(),
            names: existing.join(" and "),
            file: kind_file,
        });
    }

    let mut values = kind_values(&project, &gvk);
    values
        .set("mutate_path", gvk.webhook_path("mutate"))
        .set("validate_path", gvk.webhook_path("validate"));
    let mut plan = Plan::new(&dir);
    // The conversion's fragment: each spoke's conversions to and from the hub (the storage
    // version, created first), then the function registering them.
    let (hub, spokes) = (&versions[0].version, &versions[1..]);
    let conversion = || {
        let mut text = String::new();
        let mut chain = String::new();
        for spoke in spokes {
            let mut v = values.clone();
            v.set("hub", hub.clone())
                .set("spoke", spoke.version.clone());
            text.push_str(&t::WEBHOOK_CONVERSION.render(&v));
            // On one line when it is the only one, as rustfmt writes it.
            let indent = if spokes.len() == 1 { "" } else { "\n        " };
            chain.push_str(&format!(
                "{indent}.spoke::<crate::api::{hub}::{}, crate::api::{}::{}>()",
                gvk.kind, spoke.version, gvk.kind
            ));
        }
        let mut v = values.clone();
        v.set("hub", hub.clone()).set("spokes", chain);
        text.push_str(&t::WEBHOOK_CONVERTING.render(&v));
        text
    };
    let fragment = |w: &WebhookType| match w.fragment {
        Some(f) => f.render(&values),
        None => conversion(),
    };
    let first_of_kind = had.is_none() && !dir.join(&kind_file).exists();
    if first_of_kind {
        let mut header = values.clone();
        header.set(
            "fragments",
            asked.iter().map(|w| fragment(w)).collect::<String>(),
        );
        plan.create(&kind_file, t::WEBHOOK_KIND.render(&header))?;
        plan.insert_sorted(
            "src/webhook/mod.rs",
            Marker("webhook-modules"),
            &format!("pub mod {module};"),
            &format!("pub mod {module};"),
            Order::Mods,
        )?;
    } else {
        for w in &asked {
            plan.insert(
                &kind_file,
                Marker("webhook-kinds"),
                &format!("pub fn {}", w.register),
                &fragment(w),
            )?;
        }
    }
    for w in &asked {
        let list = if w.manifest.is_some() {
            "webhooks"
        } else {
            "conversions"
        };
        plan.insert(
            "src/webhook/mod.rs",
            Marker(list),
            &format!("{module}::{}", w.register),
            &format!("{module}::{},", w.register),
        )?;
    }
    if options.conversion {
        conversion_manifests(&mut plan, &values, &versions)?;
    }

    // The manifests: shared files once, then each webhook's entry.
    for (path, template) in [
        (
            "config/webhook/kustomization.yaml",
            t::WEBHOOK_KUSTOMIZATION,
        ),
        (
            "config/webhook/kustomizeconfig.yaml",
            t::WEBHOOK_KUSTOMIZECONFIG,
        ),
        ("config/webhook/service.yaml", t::WEBHOOK_SERVICE),
        ("config/webhook/manifests.yaml", t::WEBHOOK_MANIFESTS),
        (
            "config/default/manager_webhook_patch.yaml",
            t::WEBHOOK_MANAGER_PATCH,
        ),
    ] {
        if !dir.join(path).exists() {
            plan.create(path, template.render(&values))?;
        }
    }
    plan.insert(
        "config/default/kustomization.yaml",
        Marker("default-resources"),
        "- ../webhook",
        "- ../webhook",
    )?;
    plan.insert(
        "config/default/kustomization.yaml",
        Marker("default-patches"),
        "manager_webhook_patch.yaml",
        "# The manager serves the webhooks on 9443 with the certificate from the Secret\n\
         # webhook-server-cert.\n\
         - path: manager_webhook_patch.yaml\n  target:\n    kind: Deployment",
    )?;
    for w in &asked {
        let Some(manifest) = &w.manifest else {
            continue;
        };
        // The configuration once (an empty one would break kustomize), then the entry.
        let mut entry = values.clone();
        entry
            .set("configuration_kind", manifest.kind)
            .set("configuration_name", manifest.name)
            .set("entries_marker", manifest.entries.0);
        plan.insert(
            "config/webhook/manifests.yaml",
            Marker("webhook-configurations"),
            &format!("kind: {}", manifest.kind),
            &t::WEBHOOK_CONFIGURATION.render(&entry),
        )?;
        let name = format!("{}{module}-{}.kb.io", manifest.name_prefix, gvk.version);
        entry
            .set("webhook_name", name.clone())
            .set("webhook_path", gvk.webhook_path(manifest.path_prefix));
        plan.insert(
            "config/webhook/manifests.yaml",
            manifest.entries,
            &name,
            &t::WEBHOOK_ENTRY.render(&entry),
        )?;
    }

    let resource = project
        .resource_mut(&gvk)
        .expect("the kind was found above");
    let webhooks = resource.webhooks.get_or_insert_with(|| project::Webhooks {
        webhook_version: "v1".to_owned(),
        ..project::Webhooks::default()
    });
    for w in &asked {
        (w.record)(webhooks);
    }
    plan.replace(project::FILE, project.to_yaml());

    let changes = plan.apply()?;
    Ok(Summary {
        changes,
        next: vec![
            format!("edit {kind_file} (the webhook functions)"),
            "make run RUN_ARGS=--enable-webhooks (with tls.crt and tls.key in --cert-dir), or make deploy".to_owned(),
        ],
    })
}

/// The conversion webhook's manifests: the kustomize component that points the CRD at it and
/// serves the versions besides the storage one (`versions[0]`), the kustomize configuration
/// that renames its Service with the rest, and the component in config/default.
fn conversion_manifests(plan: &mut Plan, values: &Values, versions: &[Gvk]) -> Result<(), Error> {
    let gvk = &versions[0];
    let plural = gvk.plural();
    let patch = format!("webhook_in_{plural}.yaml");
    let served: String = (1..versions.len())
        .map(|i| {
            format!("    - op: replace\n      path: /spec/versions/{i}/served\n      value: true\n")
        })
        .collect();
    let mut v = values.clone();
    v.set("crd_name", format!("{plural}.{}", gvk.full_group()))
        .set("hub", gvk.version.clone())
        .set("patch", patch.clone())
        .set("served", served.trim_end().to_owned());
    plan.create(
        format!("config/crd/patches/{patch}"),
        t::CONVERSION_PATCH.render(&v),
    )?;
    let component = "config/crd/patches/kustomization.yaml";
    if plan.root().join(component).exists() {
        plan.insert(
            component,
            Marker("crdkustomizewebhookpatch"),
            &format!("path: {patch}"),
            t::CONVERSION_COMPONENT_ENTRY.render(&v).trim_end(),
        )?;
    } else {
        let entry = t::CONVERSION_COMPONENT_ENTRY.render(&v);
        v.set("entry", entry.trim_end().to_owned());
        plan.create(component, t::CONVERSION_COMPONENT.render(&v))?;
    }
    if !plan.root().join("config/crd/kustomizeconfig.yaml").exists() {
        plan.create(
            "config/crd/kustomizeconfig.yaml",
            t::CRD_KUSTOMIZECONFIG.render(&v),
        )?;
    }
    append_once(
        plan,
        "config/crd/kustomization.yaml",
        "configurations:",
        "# Renames the conversion webhook's Service with the rest (config/default).\nconfigurations:\n- kustomizeconfig.yaml\n",
    )?;
    append_once(
        plan,
        "config/default/kustomization.yaml",
        "components:",
        "# The CRDs' conversion webhooks, and the versions they serve.\ncomponents:\n- ../crd/patches\n",
    )
}

/// Appends `text` to the file at `path` unless it holds `key` already.
fn append_once(plan: &mut Plan, path: &str, key: &str, text: &str) -> Result<(), Error> {
    let current = match plan.contents(path) {
        Some(pending) => pending.to_owned(),
        None => std::fs::read_to_string(plan.root().join(path)).map_err(|source| Error::Io {
            path: plan.root().join(path),
            source,
        })?,
    };
    if !current.lines().any(|l| l.trim_start() == key) {
        plan.replace(path, format!("{current}{text}"));
    }
    Ok(())
}
