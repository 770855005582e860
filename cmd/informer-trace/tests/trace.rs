//! `informer-trace` against the local cluster: it shows the list, the watch, and each change
//! made meanwhile passing through the DeltaFIFO into the indexer.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn testenv() -> (PathBuf, PathBuf) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let kubeconfig = std::env::var_os("TESTENV_KUBECONFIG")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target/testenv/kubeconfig"));
    assert!(
        kubeconfig.is_file(),
        "no cluster: {} does not exist; start one with `make cluster`",
        kubeconfig.display()
    );
    let kubectl = kubeconfig.parent().unwrap().join("bin/kubectl");
    (kubeconfig, kubectl)
}

fn kubectl(kubectl: &PathBuf, kubeconfig: &PathBuf, args: &[&str]) {
    let out = Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Reads lines until one contains `want`, or fails with everything read.
fn wait_for(lines: &mpsc::Receiver<String>, seen: &mut Vec<String>, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !seen.iter().any(|l| l.contains(want)) {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => seen.push(line),
            Err(_) => panic!(
                "no line containing {want:?}; the trace so far:\n{}",
                seen.join("\n")
            ),
        }
    }
}

#[test]
#[ignore = "needs cluster"]
fn trace_shows_the_list_the_watch_and_each_change_reaching_the_indexer() {
    let (kubeconfig, kubectl_bin) = testenv();
    let ns = format!("trace-{}", std::process::id());
    kubectl(&kubectl_bin, &kubeconfig, &["create", "namespace", &ns]);
    kubectl(
        &kubectl_bin,
        &kubeconfig,
        &[
            "-n",
            &ns,
            "create",
            "configmap",
            "before",
            "--from-literal=a=1",
        ],
    );

    let mut child = Command::new(env!("CARGO_BIN_EXE_informer-trace"))
        .args([
            "ConfigMap",
            "--no-watch-list",
            "--summary-every",
            "1",
            "-n",
            &ns,
            "--kubeconfig",
        ])
        .arg(&kubeconfig)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });

    let mut seen = Vec::new();
    // The classic LIST: a first page at rv "0", the Replace, the initial pops.
    wait_for(
        &lines,
        &mut seen,
        "LIST first page rv=\"0\" limit=500 → 2 items",
    );
    wait_for(&lines, &mut seen, &format!("{ns}/before: [Replaced@"));
    wait_for(&lines, &mut seen, "WATCH from rv");

    kubectl(
        &kubectl_bin,
        &kubeconfig,
        &[
            "-n",
            &ns,
            "create",
            "configmap",
            "during",
            "--from-literal=a=2",
        ],
    );
    wait_for(&lines, &mut seen, &format!("← Added {ns}/during@"));
    wait_for(&lines, &mut seen, &format!("{ns}/during: [Added@"));
    kubectl(
        &kubectl_bin,
        &kubeconfig,
        &["-n", &ns, "label", "configmap", "before", "x=y"],
    );
    wait_for(&lines, &mut seen, &format!("{ns}/before: [Updated@"));
    kubectl(
        &kubectl_bin,
        &kubeconfig,
        &["-n", &ns, "delete", "configmap", "during"],
    );
    wait_for(&lines, &mut seen, &format!("{ns}/during: [Deleted@"));
    wait_for(
        &lines,
        &mut seen,
        &format!("indexer 2 objects; namespace index: {ns}=2"),
    );

    child.kill().unwrap();
    child.wait().unwrap();
    kubectl(
        &kubectl_bin,
        &kubeconfig,
        &["delete", "namespace", &ns, "--wait=false"],
    );
}
