//! Replays the committed fuzz corpus (`fuzz/corpus/<target>/`) through every fuzz target's
//! body on stable Rust, no libFuzzer needed: every seed, and every input a fuzzing run found
//! worth keeping (crashes fixed included), stays a test. The bodies are `fuzz/src/lib.rs`,
//! the very functions the libFuzzer targets call.

#[allow(dead_code)]
#[path = "../fuzz/src/lib.rs"]
mod targets;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

/// Runs every file of `target`'s corpus through its body; fails naming every file that
/// panics, or if the corpus is missing or empty.
fn replay(target: &str) {
    let (_, body) = targets::TARGETS
        .iter()
        .find(|(name, _)| *name == target)
        .unwrap_or_else(|| panic!("no fuzz target {target}"));
    let dir = fuzz_dir().join("corpus").join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("the corpus {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "the corpus {} is empty", dir.display());
    let failed: Vec<String> = files
        .iter()
        .filter(|file| {
            let data = std::fs::read(file).expect("a corpus file reads");
            catch_unwind(AssertUnwindSafe(|| body(&data))).is_err()
        })
        .map(|file| file.display().to_string())
        .collect();
    assert!(
        failed.is_empty(),
        "{target}: {} of {} corpus inputs fail: {failed:#?}",
        failed.len(),
        files.len()
    );
}

#[test]
fn the_watch_decode_corpus_passes() {
    replay("watch_decode");
}

#[test]
fn the_json_scan_corpus_passes() {
    replay("json_scan");
}

#[test]
fn the_kubeconfig_corpus_passes() {
    replay("kubeconfig");
}

#[test]
fn the_status_corpus_passes() {
    replay("status");
}

#[test]
fn the_admission_review_corpus_passes() {
    replay("admission_review");
}

/// The targets listed, the libFuzzer binaries and the corpus directories are the same set,
/// so no target goes unreplayed or unfuzzed.
#[test]
fn every_target_has_a_binary_and_a_corpus() {
    let names = |dir: &str, strip: &str| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(fuzz_dir().join(dir))
            .unwrap_or_else(|e| panic!("fuzz/{dir}: {e}"))
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter_map(|n| n.strip_suffix(strip).map(str::to_owned))
            .collect();
        names.sort();
        names
    };
    let mut listed: Vec<String> = targets::TARGETS
        .iter()
        .map(|(n, _)| n.to_string())
        .collect();
    listed.sort();
    assert_eq!(names("fuzz_targets", ".rs"), listed);
    assert_eq!(names("corpus", ""), listed);
}
