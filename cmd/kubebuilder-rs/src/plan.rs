//! A plan of file writes, checked whole before any is made: new files, files the user may
//! already have, and insertions above kubebuilder-style marker comments.
//!
//! A command builds its [`Plan`] in memory (reading the files it adds to), so every
//! precondition fails before anything is written; [`Plan::apply`] then writes each file to a
//! temporary beside it and renames them all into place once every one is written.
//!
//! # Markers
//!
//! A marker is a comment line `// +kubebuilder:scaffold:<name>` (or `# +kubebuilder:...` in
//! YAML and Makefiles), as kubebuilder writes them. [`insert_above`] puts a line (or block)
//! above the marker, indented as the marker is, unless the file already holds the block's
//! *key*: a short piece of it, matched as a whole token so that reformatting (rustfmt, a YAML
//! formatter) does not make the insertion happen twice.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// What can stop a plan.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// A file the command creates is already there; it is never overwritten.
    #[error("{} already exists, and kubebuilder-rs never overwrites a file: move it away first", .0.display())]
    Exists(PathBuf),
    /// A file the command adds to is missing.
    #[error("{} is missing: it is where `{marker}` goes (restore the file, or add the lines by hand)", .path.display())]
    NoFile {
        /// The file.
        path: PathBuf,
        /// The marker the command looked for.
        marker: String,
    },
    /// A file the command adds to has lost its marker.
    #[error("{} has no `{marker}` line: put it back where new entries should go", .path.display())]
    NoMarker {
        /// The file.
        path: PathBuf,
        /// The marker comment, e.g. `// +kubebuilder:scaffold:builder`.
        marker: String,
    },
    /// Reading or writing a file failed.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// A marker: `+kubebuilder:scaffold:<name>`, found in any comment style.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Marker(pub &'static str);

impl Marker {
    /// The marker's text without a comment prefix: `+kubebuilder:scaffold:<name>`.
    pub fn text(self) -> String {
        format!("+kubebuilder:scaffold:{}", self.0)
    }

    /// Whether `line` is this marker: the marker's text alone in a `//` or `#` comment.
    fn is(self, line: &str) -> bool {
        let trimmed = line.trim();
        let body = trimmed
            .strip_prefix("//")
            .or_else(|| trimmed.strip_prefix('#'))
            .map(str::trim);
        body == Some(self.text().as_str())
    }
}

/// Inserts `block` above the line holding `marker` in `contents`, each of its lines indented
/// as the marker line is. Returns `Ok(None)` when `contents` already holds `key` as a whole
/// token (the insertion was made before), else the new contents.
///
/// # Errors
///
/// `Err(())` when no line is the marker.
#[allow(clippy::result_unit_err)] // the caller knows the file and marker to report
pub fn insert_above(
    contents: &str,
    marker: Marker,
    key: &str,
    block: &str,
) -> Result<Option<String>, ()> {
    let mut offset = 0;
    let mut at = None;
    for line in contents.split_inclusive('\n') {
        if marker.is(line) {
            at = Some((offset, line));
            break;
        }
        offset += line.len();
    }
    let Some((start, line)) = at else {
        return Err(());
    };
    if contains_token(contents, key) {
        return Ok(None);
    }
    let indent = &line[..line.len() - line.trim_start().len()];
    let mut inserted = String::with_capacity(contents.len() + block.len() + 64);
    inserted.push_str(&contents[..start]);
    for block_line in block.lines() {
        if !block_line.is_empty() {
            inserted.push_str(indent);
            inserted.push_str(block_line);
        }
        inserted.push('\n');
    }
    inserted.push_str(&contents[start..]);
    Ok(Some(inserted))
}

/// How rustfmt orders a run of declarations, by their last word (`v1` in `pub mod v1;`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// `mod` declarations: by name, byte by byte (`v1` < `v10` < `v1alpha1` < `v2`).
    Mods,
    /// `use` declarations: version order, runs of digits as numbers (`v2` < `v10`).
    Uses,
}

impl Order {
    fn compare(self, a: &str, b: &str) -> std::cmp::Ordering {
        let name = |line: &str| {
            let line = line.trim().trim_end_matches(';');
            line.rsplit(' ').next().unwrap_or(line).to_owned()
        };
        let (a, b) = (name(a), name(b));
        match self {
            Order::Mods => a.cmp(&b),
            Order::Uses => version_order(&a, &b),
        }
    }
}

/// Inserts the one-line `entry` into the run of entry lines directly above `marker`, where
/// rustfmt sorts it (see [`Order`]), so that a formatter never reorders what was inserted.
/// Returns `Ok(None)` when `contents` holds `key` already.
///
/// # Errors
///
/// `Err(())` when no line is the marker.
#[allow(clippy::result_unit_err)] // the caller knows the file and marker to report
pub fn insert_sorted(
    contents: &str,
    marker: Marker,
    key: &str,
    entry: &str,
    order: Order,
) -> Result<Option<String>, ()> {
    let lines: Vec<&str> = contents.split_inclusive('\n').collect();
    let Some(at) = lines.iter().position(|line| marker.is(line)) else {
        return Err(());
    };
    if contains_token(contents, key) {
        return Ok(None);
    }
    let line = lines[at];
    let indent = &line[..line.len() - line.trim_start().len()];
    // The run of entries above the marker: non-blank lines that are not comments.
    let mut start = at;
    while start > 0 {
        let above = lines[start - 1].trim();
        if above.is_empty() || above.starts_with("//") || above.starts_with('#') {
            break;
        }
        start -= 1;
    }
    let position = (start..at)
        .find(|&i| order.compare(lines[i], entry).is_gt())
        .unwrap_or(at);
    let mut out = String::with_capacity(contents.len() + entry.len() + 8);
    for line in &lines[..position] {
        out.push_str(line);
    }
    out.push_str(indent);
    out.push_str(entry.trim());
    out.push('\n');
    for line in &lines[position..] {
        out.push_str(line);
    }
    Ok(Some(out))
}

/// Orders two strings as rustfmt's version sort does for plain paths: runs of digits
/// compare as numbers, the rest character by character.
fn version_order(a: &str, b: &str) -> std::cmp::Ordering {
    fn chunks(s: &str) -> Vec<(bool, &str)> {
        let mut out = Vec::new();
        let mut rest = s;
        while let Some(first) = rest.chars().next() {
            let digit = first.is_ascii_digit();
            let end = rest
                .find(|c: char| c.is_ascii_digit() != digit)
                .unwrap_or(rest.len());
            out.push((digit, &rest[..end]));
            rest = &rest[end..];
        }
        out
    }
    let (a, b) = (chunks(a), chunks(b));
    for (x, y) in a.iter().zip(&b) {
        let order = match (x, y) {
            ((true, x), (true, y)) => {
                let (x, y) = (x.trim_start_matches('0'), y.trim_start_matches('0'));
                x.len().cmp(&y.len()).then_with(|| x.cmp(y))
            }
            ((_, x), (_, y)) => x.cmp(y),
        };
        if order.is_ne() {
            return order;
        }
    }
    a.len().cmp(&b.len())
}

/// Whether `haystack` holds `token` with no identifier character (letter, digit, `_`) right
/// before or after it: `guestbook::setup` is found in `[guestbook::setup,` but not in
/// `my_guestbook::setup_all`.
pub fn contains_token(haystack: &str, token: &str) -> bool {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    haystack.match_indices(token).any(|(at, _)| {
        let before = haystack[..at].chars().next_back();
        let after = haystack[at + token.len()..].chars().next();
        !before.is_some_and(ident) && !after.is_some_and(ident)
    })
}

/// How a planned file came to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// A new file.
    Create,
    /// An existing file, added to above a marker (or rewritten, for files the tool owns).
    Update,
    /// An existing file the command would have written; the user's copy stays.
    Keep,
}

#[derive(Debug)]
struct Pending {
    contents: String,
    change: Change,
    executable: bool,
}

/// The files one command writes, relative to the project's root; see the [module
/// docs](self).
#[derive(Debug)]
pub struct Plan {
    root: PathBuf,
    files: BTreeMap<PathBuf, Pending>,
}

impl Plan {
    /// An empty plan for the project in `root`.
    pub fn new(root: impl Into<PathBuf>) -> Plan {
        Plan {
            root: root.into(),
            files: BTreeMap::new(),
        }
    }

    /// The project's root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Plans a new file the user owns from now on.
    ///
    /// # Errors
    ///
    /// [`PlanError::Exists`] if it is on disk, or planned already.
    pub fn create(&mut self, path: impl Into<PathBuf>, contents: String) -> Result<(), PlanError> {
        let path = path.into();
        if self.files.contains_key(&path) || self.root.join(&path).exists() {
            return Err(PlanError::Exists(path));
        }
        self.files.insert(
            path,
            Pending {
                contents,
                change: Change::Create,
                executable: false,
            },
        );
        Ok(())
    }

    /// Plans a new file, marked executable (a script).
    ///
    /// # Errors
    ///
    /// As [`create`](Self::create).
    pub fn create_executable(
        &mut self,
        path: impl Into<PathBuf>,
        contents: String,
    ) -> Result<(), PlanError> {
        let path = path.into();
        self.create(path.clone(), contents)?;
        if let Some(pending) = self.files.get_mut(&path) {
            pending.executable = true;
        }
        Ok(())
    }

    /// Plans a new file unless the user has one there already, which then stays as it is
    /// (a README, a `.gitignore`).
    pub fn create_or_keep(&mut self, path: impl Into<PathBuf>, contents: String) {
        let path = path.into();
        let change = if self.root.join(&path).exists() {
            Change::Keep
        } else {
            Change::Create
        };
        self.files.insert(
            path,
            Pending {
                contents,
                change,
                executable: false,
            },
        );
    }

    /// Plans the whole of a file the tool owns (the `PROJECT` file), created or replaced.
    pub fn replace(&mut self, path: impl Into<PathBuf>, contents: String) {
        let path = path.into();
        let change = match self.files.get(&path) {
            Some(pending) => pending.change,
            None if self.root.join(&path).exists() => Change::Update,
            None => Change::Create,
        };
        self.files.insert(
            path,
            Pending {
                contents,
                change,
                executable: false,
            },
        );
    }

    /// Plans `block` above `marker` in `path` (a planned file, or one on disk), unless the
    /// file holds `key` already; see [`insert_above`].
    ///
    /// # Errors
    ///
    /// [`PlanError::NoFile`] or [`PlanError::NoMarker`] when there is nowhere to insert;
    /// [`PlanError::Io`] if the file cannot be read.
    pub fn insert(
        &mut self,
        path: impl Into<PathBuf>,
        marker: Marker,
        key: &str,
        block: &str,
    ) -> Result<(), PlanError> {
        self.edit(path.into(), marker, |contents| {
            insert_above(contents, marker, key, block)
        })
    }

    /// Applies `edit` to the file at `path` (its planned contents, or the file on disk).
    fn edit(
        &mut self,
        path: PathBuf,
        marker: Marker,
        edit: impl FnOnce(&str) -> Result<Option<String>, ()>,
    ) -> Result<(), PlanError> {
        let current = match self.files.get(&path) {
            Some(pending) if pending.change != Change::Keep => pending.contents.clone(),
            _ => {
                let full = self.root.join(&path);
                match fs::read_to_string(&full) {
                    Ok(contents) => contents,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        return Err(PlanError::NoFile {
                            path,
                            marker: marker.text(),
                        });
                    }
                    Err(source) => return Err(PlanError::Io { path, source }),
                }
            }
        };
        let Ok(edited) = edit(&current) else {
            return Err(PlanError::NoMarker {
                path,
                marker: marker.text(),
            });
        };
        if let Some(contents) = edited {
            let change = match self.files.get(&path) {
                Some(pending) if pending.change == Change::Create => Change::Create,
                _ => Change::Update,
            };
            self.files.insert(
                path,
                Pending {
                    contents,
                    change,
                    executable: false,
                },
            );
        }
        Ok(())
    }

    /// Plans the one-line `entry` above `marker` in `path`, in rustfmt's order among the
    /// entries there, unless the file holds `key` already; see [`insert_sorted`].
    ///
    /// # Errors
    ///
    /// As [`insert`](Self::insert).
    pub fn insert_sorted(
        &mut self,
        path: impl Into<PathBuf>,
        marker: Marker,
        key: &str,
        entry: &str,
        order: Order,
    ) -> Result<(), PlanError> {
        self.edit(path.into(), marker, |contents| {
            insert_sorted(contents, marker, key, entry, order)
        })
    }

    /// The planned files and what happens to each, in path order.
    pub fn changes(&self) -> Vec<(&Path, Change)> {
        self.files
            .iter()
            .map(|(path, pending)| (path.as_path(), pending.change))
            .collect()
    }

    /// The contents planned for `path`, if any.
    pub fn contents(&self, path: impl AsRef<Path>) -> Option<&str> {
        self.files.get(path.as_ref()).map(|p| p.contents.as_str())
    }

    /// Writes the plan: every file to a temporary beside it first, then each renamed into
    /// place. Returns what happened to each file, in path order.
    ///
    /// # Errors
    ///
    /// [`PlanError::Io`] naming the file. A failure while writing the temporaries removes
    /// them and every directory this call made, leaving the project as it was.
    pub fn apply(self) -> Result<Vec<(PathBuf, Change)>, PlanError> {
        let mut made_dirs: Vec<PathBuf> = Vec::new();
        let mut temps: Vec<(PathBuf, PathBuf)> = Vec::new();
        let result = self.write_temporaries(&mut made_dirs, &mut temps);
        if let Err(e) = result {
            for (temp, _) in &temps {
                let _ = fs::remove_file(temp);
            }
            for dir in made_dirs.iter().rev() {
                let _ = fs::remove_dir(dir);
            }
            return Err(e);
        }
        for (temp, target) in &temps {
            fs::rename(temp, target).map_err(|source| PlanError::Io {
                path: target.clone(),
                source,
            })?;
        }
        Ok(self
            .files
            .into_iter()
            .map(|(path, pending)| (path, pending.change))
            .collect())
    }

    fn write_temporaries(
        &self,
        made_dirs: &mut Vec<PathBuf>,
        temps: &mut Vec<(PathBuf, PathBuf)>,
    ) -> Result<(), PlanError> {
        for (path, pending) in &self.files {
            if pending.change == Change::Keep {
                continue;
            }
            let target = self.root.join(path);
            let io = |source| PlanError::Io {
                path: path.clone(),
                source,
            };
            if let Some(parent) = target.parent() {
                let mut missing = Vec::new();
                let mut dir = parent;
                while !dir.exists() {
                    missing.push(dir.to_owned());
                    match dir.parent() {
                        Some(up) => dir = up,
                        None => break,
                    }
                }
                fs::create_dir_all(parent).map_err(io)?;
                made_dirs.extend(missing.into_iter().rev());
            }
            let mut name = target.file_name().unwrap_or_default().to_owned();
            name.push(".kubebuilder-rs.tmp");
            let temp = target.with_file_name(name);
            fs::write(&temp, &pending.contents).map_err(io)?;
            temps.push((temp.clone(), target));
            if pending.executable {
                use std::os::unix::fs::PermissionsExt;
                fs::set_permissions(&temp, fs::Permissions::from_mode(0o755)).map_err(io)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUILDER: Marker = Marker("builder");

    #[test]
    fn a_block_goes_above_the_marker_with_its_indentation() {
        let file =
            "fn main() {\n    let x = [\n        // +kubebuilder:scaffold:builder\n    ];\n}\n";
        let once = insert_above(file, BUILDER, "a::setup", "a::setup,")
            .unwrap()
            .unwrap();
        assert_eq!(
            once,
            "fn main() {\n    let x = [\n        a::setup,\n        // +kubebuilder:scaffold:builder\n    ];\n}\n"
        );
        let twice = insert_above(&once, BUILDER, "b::setup", "b::setup,\n\n// b")
            .unwrap()
            .unwrap();
        assert_eq!(
            twice,
            "fn main() {\n    let x = [\n        a::setup,\n        b::setup,\n\n        // b\n        // +kubebuilder:scaffold:builder\n    ];\n}\n"
        );
    }

    #[test]
    fn inserting_again_changes_nothing_even_after_reformatting() {
        let file = "resources:\n- a.yaml\n# +kubebuilder:scaffold:crdkustomizeresource\n";
        let marker = Marker("crdkustomizeresource");
        let once = insert_above(file, marker, "- b.yaml", "- b.yaml")
            .unwrap()
            .unwrap();
        assert_eq!(
            insert_above(&once, marker, "- b.yaml", "- b.yaml"),
            Ok(None)
        );
        // rustfmt may rewrap what was inserted; the key still finds it.
        let code =
            "const C: &[F] = &[\n    guestbook::setup,\n    // +kubebuilder:scaffold:builder\n];\n";
        let reformatted =
            code.replace("    guestbook::setup,\n", "    guestbook::setup, // mine\n");
        assert_eq!(
            insert_above(
                &reformatted,
                BUILDER,
                "guestbook::setup",
                "guestbook::setup,"
            ),
            Ok(None)
        );
    }

    #[test]
    fn sorted_entries_go_where_rustfmt_puts_them() {
        let kinds = Marker("kinds");
        let file = "//! Doc.\n\npub mod b;\npub mod d;\n// +kubebuilder:scaffold:kinds\n";
        let sorted = |file: &str, entry: &str| {
            insert_sorted(file, kinds, entry, entry, Order::Mods)
                .unwrap()
                .unwrap()
        };
        let file = sorted(file, "pub mod c;");
        let file = sorted(&file, "pub mod a;");
        let file = sorted(&file, "pub mod e;");
        assert_eq!(
            file,
            "//! Doc.\n\npub mod a;\npub mod b;\npub mod c;\npub mod d;\npub mod e;\n\
             // +kubebuilder:scaffold:kinds\n"
        );
        assert_eq!(
            insert_sorted(&file, kinds, "pub mod c;", "pub mod c;", Order::Mods),
            Ok(None)
        );
        let empty = "//! Doc.\n\n// +kubebuilder:scaffold:kinds\n";
        assert_eq!(
            sorted(empty, "pub mod a;"),
            "//! Doc.\n\npub mod a;\n// +kubebuilder:scaffold:kinds\n"
        );
        let mut mods = vec![
            "pub mod v2;",
            "pub mod v10;",
            "pub mod v1beta1;",
            "pub mod v1;",
            "pub mod v1alpha1;",
        ];
        mods.sort_by(|a, b| Order::Mods.compare(a, b));
        assert_eq!(
            mods,
            [
                "pub mod v1;",
                "pub mod v10;",
                "pub mod v1alpha1;",
                "pub mod v1beta1;",
                "pub mod v2;"
            ]
        );
        let mut uses = vec![
            "pub use ship10::Ship10;",
            "pub use ship2::Ship2;",
            "pub use ark::Ark;",
        ];
        uses.sort_by(|a, b| Order::Uses.compare(a, b));
        assert_eq!(
            uses,
            [
                "pub use ark::Ark;",
                "pub use ship2::Ship2;",
                "pub use ship10::Ship10;"
            ]
        );
    }

    #[test]
    fn markers_are_found_in_either_comment_style_and_only_alone() {
        assert!(BUILDER.is("    // +kubebuilder:scaffold:builder\n"));
        assert!(BUILDER.is("//+kubebuilder:scaffold:builder"));
        assert!(BUILDER.is("# +kubebuilder:scaffold:builder"));
        assert!(!BUILDER.is("// +kubebuilder:scaffold:builders"));
        assert!(!BUILDER.is("let x = 1; // +kubebuilder:scaffold:builder"));
        assert_eq!(insert_above("no marker\n", BUILDER, "k", "k"), Err(()));
    }

    #[test]
    fn tokens_match_whole() {
        assert!(contains_token("[guestbook::setup,", "guestbook::setup"));
        assert!(contains_token("guestbook::setup", "guestbook::setup"));
        assert!(!contains_token("my_guestbook::setup", "guestbook::setup"));
        assert!(!contains_token("guestbook::setup_all", "guestbook::setup"));
        assert!(contains_token("- guestbooks\n", "- guestbooks"));
        assert!(!contains_token("- guestbooksx\n", "- guestbooks"));
    }

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("kubebuilder-rs-plan-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn an_existing_file_is_never_overwritten() {
        let dir = scratch("exists");
        fs::write(dir.join("mine.rs"), "mine").unwrap();
        let mut plan = Plan::new(&dir);
        let e = plan.create("mine.rs", "theirs".into()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "mine.rs already exists, and kubebuilder-rs never overwrites a file: move it away first"
        );
        plan.create_or_keep("mine.rs", "theirs".into());
        plan.create("new/deep/file.rs", "new".into()).unwrap();
        let changes = plan.apply().unwrap();
        assert_eq!(
            changes,
            vec![
                (PathBuf::from("mine.rs"), Change::Keep),
                (PathBuf::from("new/deep/file.rs"), Change::Create)
            ]
        );
        assert_eq!(fs::read_to_string(dir.join("mine.rs")).unwrap(), "mine");
        assert_eq!(
            fs::read_to_string(dir.join("new/deep/file.rs")).unwrap(),
            "new"
        );
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn insertions_apply_to_planned_files_and_report_a_missing_marker() {
        let dir = scratch("insert");
        let mut plan = Plan::new(&dir);
        plan.create("lib.rs", "// +kubebuilder:scaffold:builder\n".into())
            .unwrap();
        plan.insert("lib.rs", BUILDER, "a", "a").unwrap();
        assert_eq!(
            plan.contents("lib.rs"),
            Some("a\n// +kubebuilder:scaffold:builder\n")
        );
        assert_eq!(plan.changes(), vec![(Path::new("lib.rs"), Change::Create)]);
        fs::write(dir.join("main.rs"), "fn main() {}\n").unwrap();
        let e = plan.insert("main.rs", BUILDER, "a", "a").unwrap_err();
        assert_eq!(
            e.to_string(),
            "main.rs has no `+kubebuilder:scaffold:builder` line: put it back where new entries \
             should go"
        );
        let e = plan.insert("gone.rs", BUILDER, "a", "a").unwrap_err();
        assert_eq!(
            e.to_string(),
            "gone.rs is missing: it is where `+kubebuilder:scaffold:builder` goes (restore the \
             file, or add the lines by hand)"
        );
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_failed_write_leaves_nothing_behind() {
        let dir = scratch("fail");
        // A file where a directory must go makes the second write fail.
        fs::write(dir.join("blocked"), "").unwrap();
        let mut plan = Plan::new(&dir);
        plan.create("a/first.rs", "1".into()).unwrap();
        plan.create("blocked/second.rs", "2".into()).unwrap();
        assert!(matches!(plan.apply(), Err(PlanError::Io { .. })));
        let left: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, vec![std::ffi::OsString::from("blocked")]);
        let _ = fs::remove_dir_all(&dir);
    }
}
