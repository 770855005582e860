//! The `kubebuilder-rs` binary on a scratch directory, without a cluster: bad input gets one
//! line on stderr and leaves every file as it was; files the user owns are never
//! overwritten; entries above markers are made once; the generated Rust is rustfmt-clean;
//! the initial RBAC role is what the runtime generates.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

/// A scratch directory, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "kubebuilder-rs-cli-{name}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn run(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kubebuilder-rs"))
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap()
}

/// Runs a command that must succeed.
fn ok(dir: &Path, args: &[&str]) -> String {
    let out = run(dir, args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Every file under `dir` and its bytes.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut dirs = vec![dir.to_owned()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                files.insert(path.strip_prefix(dir).unwrap().to_owned(), Vec::new());
                dirs.push(path);
            } else {
                let bytes = std::fs::read(&path).unwrap();
                files.insert(path.strip_prefix(dir).unwrap().to_owned(), bytes);
            }
        }
    }
    files
}

/// Runs a command that must fail with exactly `Error: <line>` on stderr, nothing on stdout,
/// and no file changed.
fn refused(dir: &Path, args: &[&str], line: &str) {
    let before = snapshot(dir);
    let out = run(dir, args);
    assert_eq!(out.status.code(), Some(1), "{args:?} must fail");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!("Error: {line}\n"),
        "{args:?}"
    );
    assert!(out.stdout.is_empty(), "{args:?}");
    assert!(snapshot(dir) == before, "{args:?} changed files");
}

const INIT: &[&str] = &["init", "--domain", "example.com"];
const API: &[&str] = &[
    "create",
    "api",
    "--group",
    "webapp",
    "--version",
    "v1",
    "--kind",
    "Guestbook",
];
const DEFAULTING: &[&str] = &[
    "create",
    "webhook",
    "--group",
    "webapp",
    "--version",
    "v1",
    "--kind",
    "Guestbook",
    "--defaulting",
];

/// A project `guestbook` with the kind Guestbook and its defaulting webhook.
fn guestbook() -> (Scratch, PathBuf) {
    let scratch = Scratch::new("project");
    let dir = scratch.0.join("guestbook");
    std::fs::create_dir(&dir).unwrap();
    ok(&dir, INIT);
    ok(&dir, API);
    ok(&dir, DEFAULTING);
    (scratch, dir)
}

fn with<'a>(base: &[&'a str], more: &[&'a str]) -> Vec<&'a str> {
    base.iter().chain(more).copied().collect()
}

#[test]
fn bad_input_gets_one_line_and_changes_nothing() {
    let (_scratch, dir) = guestbook();
    let gvk = |group: &'static str, version: &'static str, kind: &'static str| {
        vec![
            "create",
            "api",
            "--group",
            group,
            "--version",
            version,
            "--kind",
            kind,
        ]
    };
    refused(
        &dir,
        &gvk("Web_App", "v1", "Book"),
        "invalid group \"Web_App\": a DNS-1123 subdomain holds only lowercase letters, digits, \
         '-' and '.', not 'W'",
    );
    refused(
        &dir,
        &gvk("web.", "v1", "Book"),
        "invalid group \"web.\": a DNS-1123 subdomain has no empty part between dots",
    );
    refused(
        &dir,
        &gvk("webapp", "V1", "Book"),
        "invalid version \"V1\": a version follows Kubernetes' pattern v<number>, optionally \
         followed by alpha<number> or beta<number> (v1, v1alpha1, v2beta3), at most 63 \
         characters",
    );
    refused(
        &dir,
        &gvk("webapp", "v1", "book"),
        "invalid kind \"book\": a kind is PascalCase: an uppercase letter, then letters and \
         digits (Guestbook, CronJob)",
    );
    refused(
        &dir,
        &gvk("library", "v2", "Guestbook"),
        "kind Guestbook already exists as webapp.example.com/v1 (src/api/v1/guestbook.rs); \
         kubebuilder-rs creates a kind once per version, all its versions in one group",
    );
    refused(
        &dir,
        API,
        "kind Guestbook already exists as webapp.example.com/v1 (src/api/v1/guestbook.rs); \
         kubebuilder-rs creates a kind once per version, all its versions in one group",
    );
    refused(
        &dir,
        &with(&gvk("webapp", "v1", "Book"), &["--resource=false"]),
        "--resource=false is not supported: kubebuilder-rs scaffolds controllers only for kinds \
         it creates",
    );
    let webhook = |kind: &'static str, version: &'static str, flags: &[&'static str]| {
        let mut args = vec![
            "create",
            "webhook",
            "--group",
            "webapp",
            "--version",
            version,
            "--kind",
            kind,
        ];
        args.extend(flags);
        args
    };
    refused(
        &dir,
        &webhook("Book", "v1", &["--defaulting"]),
        "no kind Book in webapp.example.com/v1: create it first with `kubebuilder-rs create api \
         --group webapp --version v1 --kind Book`",
    );
    refused(
        &dir,
        &webhook("Guestbook", "v2", &["--defaulting"]),
        "no kind Guestbook in webapp.example.com/v2: this project has Guestbook in \
         webapp.example.com/v1",
    );
    refused(
        &dir,
        &webhook("Guestbook", "v1", &[]),
        "create webhook needs at least one of --defaulting, --programmatic-validation and \
         --conversion",
    );
    refused(
        &dir,
        &webhook("Guestbook", "v1", &["--conversion"]),
        "--conversion: kind Guestbook has one version (webapp.example.com/v1); a conversion \
         webhook converts between versions: add one first with `kubebuilder-rs create api \
         --group webapp --version <version> --kind Guestbook`",
    );
    refused(
        &dir,
        &webhook(
            "Guestbook",
            "v1",
            &["--defaulting", "--programmatic-validation"],
        ),
        "Guestbook already has a defaulting webhook (src/webhook/guestbook.rs); ask only for \
         the webhooks it lacks",
    );
    refused(
        &dir,
        INIT,
        &format!(
            "{} already holds a project (PROJECT): add kinds to it with `kubebuilder-rs create \
             api`",
            dir.display()
        ),
    );

    // A marker the user removed: the command stops before writing any of its files.
    let lib = dir.join("src/lib.rs");
    let text = std::fs::read_to_string(&lib).unwrap();
    std::fs::write(
        &lib,
        text.replace("    // +kubebuilder:scaffold:builder\n", ""),
    )
    .unwrap();
    refused(
        &dir,
        &gvk("webapp", "v1", "Book"),
        "src/lib.rs has no `+kubebuilder:scaffold:builder` line: put it back where new entries \
         should go",
    );
    // A file in the way of one the command creates.
    std::fs::write(&lib, text).unwrap();
    std::fs::write(dir.join("src/api/v1/book.rs"), "// mine\n").unwrap();
    refused(
        &dir,
        &gvk("webapp", "v1", "Book"),
        "src/api/v1/book.rs already exists, and kubebuilder-rs never overwrites a file: move it \
         away first",
    );
}

#[test]
fn init_refuses_bad_names_and_busy_directories() {
    let scratch = Scratch::new("init");
    let busy = scratch.0.join("busy");
    std::fs::create_dir_all(busy.join("src")).unwrap();
    std::fs::create_dir_all(busy.join(".git")).unwrap();
    for file in ["main.go", "README.md", "LICENSE", ".gitignore"] {
        std::fs::write(busy.join(file), "mine\n").unwrap();
    }
    refused(
        &busy,
        INIT,
        &format!(
            "{} is not empty: main.go and src are in the way; init needs an empty directory \
             (dotfiles such as .git, *.md files and LICENSE-style files may stay)",
            busy.display()
        ),
    );
    refused(
        &busy,
        &["init", "--domain", "Example.com"],
        "invalid domain \"Example.com\": a DNS-1123 subdomain holds only lowercase letters, \
         digits, '-' and '.', not 'E'",
    );
    let bad_name = scratch.0.join("My_Operator");
    std::fs::create_dir(&bad_name).unwrap();
    refused(
        &bad_name,
        INIT,
        "invalid project name \"My_Operator\": a project name is a DNS-1123 label that starts \
         with a letter: lowercase letters, digits and '-', ending with a letter or digit, at \
         most 63 characters (it is the directory's name: choose one with --project-name)",
    );
    refused(
        &bad_name,
        &with(INIT, &["--project-name", "serde"]),
        "invalid project name \"serde\": the crate name serde is taken by Rust or by a \
         dependency; choose another",
    );
    refused(
        &bad_name,
        &with(
            INIT,
            &[
                "--project-name",
                "op",
                "--runtime-path",
                "/nonexistent/runtime",
            ],
        ),
        "--runtime-path /nonexistent/runtime: no such directory",
    );
    let empty = scratch.0.join("empty");
    std::fs::create_dir(&empty).unwrap();
    refused(
        &empty,
        API,
        &format!(
            "no PROJECT file in {}: run `kubebuilder-rs init --domain <domain>` there first",
            empty.display()
        ),
    );

    // Dotfiles, *.md and LICENSE-style files may stay, and stay as they were.
    std::fs::remove_file(busy.join("main.go")).unwrap();
    std::fs::remove_dir(busy.join("src")).unwrap();
    let out = ok(&busy, &with(INIT, &["--project-name", "busy"]));
    assert!(out.contains("keep   README.md\n"), "{out}");
    assert!(out.contains("keep   .gitignore\n"), "{out}");
    assert!(out.contains("create Cargo.toml\n"), "{out}");
    for file in ["README.md", "LICENSE", ".gitignore"] {
        assert_eq!(std::fs::read_to_string(busy.join(file)).unwrap(), "mine\n");
    }
    let cargo = std::fs::read_to_string(busy.join("Cargo.toml")).unwrap();
    let runtime = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap();
    assert!(
        cargo.contains(&format!(
            "controller-runtime = {{ path = \"{}\" }}",
            runtime.display()
        )),
        "{cargo}"
    );
    assert_eq!(
        std::fs::read(busy.join("Cargo.lock")).unwrap(),
        std::fs::read(runtime.join("Cargo.lock")).unwrap()
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(busy.join("hack/deploy-overlay.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o111, 0o111, "the deploy script is executable");

    let git = scratch.0.join("git");
    ok(
        &scratch.0,
        &with(
            INIT,
            &[
                "--dir",
                "git",
                "--runtime-git",
                "https://example.com/rt.git",
                "--runtime-tag",
                "v0.1.0",
            ],
        ),
    );
    let cargo = std::fs::read_to_string(git.join("Cargo.toml")).unwrap();
    assert!(
        cargo.contains(
            "controller-runtime = { git = \"https://example.com/rt.git\", tag = \"v0.1.0\" }"
        ),
        "{cargo}"
    );
    assert!(
        !git.join("Cargo.lock").exists(),
        "no lock to copy for a git runtime"
    );
}

#[test]
fn files_the_user_owns_are_never_overwritten() {
    let (_scratch, dir) = guestbook();
    let mine = "// my reconcile\n";
    let owned = [
        "src/api/v1/guestbook.rs",
        "src/controller/guestbook.rs",
        "tests/guestbook.rs",
        "config/samples/webapp_v1_guestbook.yaml",
        "README.md",
    ];
    for file in owned {
        let path = dir.join(file);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, format!("{text}{mine}")).unwrap();
    }
    let webhook = dir.join("src/webhook/guestbook.rs");
    let text = std::fs::read_to_string(&webhook).unwrap();
    let edited = text.replace("Some(\"default\".to_owned())", "Some(\"mine\".to_owned())");
    std::fs::write(&webhook, &edited).unwrap();

    // Another kind, and a validating webhook for the first: the user's edits stay.
    ok(
        &dir,
        &[
            "create",
            "api",
            "--group",
            "batch",
            "--version",
            "v1beta1",
            "--kind",
            "CronJob",
        ],
    );
    let out = ok(
        &dir,
        &with(&DEFAULTING[..8], &["--programmatic-validation"]),
    );
    assert!(out.contains("update src/webhook/guestbook.rs\n"), "{out}");
    for file in owned {
        assert!(
            std::fs::read_to_string(dir.join(file))
                .unwrap()
                .ends_with(mine),
            "{file} lost the user's edit"
        );
    }
    let webhook_now = std::fs::read_to_string(&webhook).unwrap();
    assert!(
        webhook_now.starts_with(
            edited
                .split("// +kubebuilder:scaffold:webhook-kinds")
                .next()
                .unwrap()
        )
    );
    assert!(webhook_now.contains("pub fn validating(server: WebhookServer)"));
    let mod_rs = std::fs::read_to_string(dir.join("src/webhook/mod.rs")).unwrap();
    assert!(mod_rs.contains("    guestbook::defaulting,\n    guestbook::validating,\n    // +kubebuilder:scaffold:webhooks\n"), "{mod_rs}");
    let project = std::fs::read_to_string(dir.join("PROJECT")).unwrap();
    assert!(
        project.contains("    defaulting: true\n    validation: true\n"),
        "{project}"
    );
}

#[test]
fn entries_above_markers_are_made_once() {
    let (_scratch, dir) = guestbook();
    let shared = [
        "src/lib.rs",
        "src/api/mod.rs",
        "src/api/v1/mod.rs",
        "src/controller/mod.rs",
        "src/webhook/mod.rs",
        "config/crd/kustomization.yaml",
        "config/samples/kustomization.yaml",
        "config/default/kustomization.yaml",
        "config/webhook/manifests.yaml",
    ];
    let before: Vec<String> = shared
        .iter()
        .map(|f| std::fs::read_to_string(dir.join(f)).unwrap())
        .collect();
    // The user removes the kind's own files and its PROJECT entry, then creates it again:
    // the entries in the shared files are there already and are not made twice.
    for file in [
        "src/api/v1/guestbook.rs",
        "src/controller/guestbook.rs",
        "src/webhook/guestbook.rs",
        "tests/guestbook.rs",
        "config/samples/webapp_v1_guestbook.yaml",
    ] {
        std::fs::remove_file(dir.join(file)).unwrap();
    }
    let project = std::fs::read_to_string(dir.join("PROJECT")).unwrap();
    let start = project.find("resources:").unwrap();
    let end = project.find("version: \"3\"").unwrap();
    std::fs::write(
        dir.join("PROJECT"),
        format!("{}{}", &project[..start], &project[end..]),
    )
    .unwrap();
    ok(&dir, API);
    ok(&dir, DEFAULTING);
    for (file, was) in shared.iter().zip(&before) {
        assert_eq!(
            &std::fs::read_to_string(dir.join(file)).unwrap(),
            was,
            "{file}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(dir.join("PROJECT")).unwrap(),
        project
    );
}

#[test]
fn the_generated_rust_is_rustfmt_clean() {
    let (_scratch, dir) = guestbook();
    ok(
        &dir,
        &with(&DEFAULTING[..8], &["--programmatic-validation"]),
    );
    // Ark in three versions, converted.
    for (version, kind) in [
        ("v1beta1", "CronJob"),
        ("v1alpha1", "Frigate"),
        ("v10", "Sloop"),
        ("v2", "Ark"),
        ("v3", "Ark"),
        ("v3alpha1", "Ark"),
    ] {
        ok(
            &dir,
            &[
                "create",
                "api",
                "--group",
                "fleet",
                "--version",
                version,
                "--kind",
                kind,
            ],
        );
    }
    ok(
        &dir,
        &[
            "create",
            "webhook",
            "--group",
            "fleet",
            "--version",
            "v2",
            "--kind",
            "Ark",
            "--programmatic-validation",
            "--conversion",
        ],
    );
    let files: Vec<PathBuf> = snapshot(&dir)
        .into_keys()
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    assert!(files.len() >= 12, "{files:?}");
    let out = Command::new("rustfmt")
        .current_dir(&dir)
        .args(["--check", "--edition", "2024"])
        .args(&files)
        .output()
        .expect("rustfmt runs (rustup component add rustfmt)");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `make manifests` on a fresh project changes nothing: the role `init` writes is the one the
/// runtime generates for a manager without controllers.
#[test]
fn the_initial_role_is_the_generated_one() {
    use controller_runtime::runtime::rbac::ClusterRole;
    use controller_runtime::runtime::{Manager, ManagerOptions};

    let scratch = Scratch::new("role");
    let dir = scratch.0.join("harbor");
    std::fs::create_dir(&dir).unwrap();
    ok(&dir, INIT);
    let manager = Manager::offline(ManagerOptions::default());
    let generated = ClusterRole::new("manager-role", manager.rbac_rules())
        .label("app.kubernetes.io/name", "harbor")
        .label("app.kubernetes.io/managed-by", "kustomize")
        .to_yaml();
    let written = std::fs::read_to_string(dir.join("config/rbac/role.yaml")).unwrap();
    assert_eq!(written, generated);
}
