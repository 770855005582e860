//! `informer-trace` against the local cluster: it shows the list, the watch, and each change
//! made meanwhile passing through the informer's pops into the indexer, its indices and its
//! handler; and, with pops held back, what the DeltaFIFO holds for each key.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
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
    wait_for_all(lines, seen, &[want]);
}

/// Reads lines until one contains every part of `want`, or fails with everything read.
fn wait_for_all(lines: &mpsc::Receiver<String>, seen: &mut Vec<String>, want: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !seen.iter().any(|l| want.iter().all(|w| l.contains(w))) {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => seen.push(line),
            Err(_) => panic!(
                "no line containing all of {want:?}; the trace so far:\n{}",
                seen.join("\n")
            ),
        }
    }
}

/// Starts `informer-trace` with `args` and a thread forwarding its stdout line by line.
fn spawn_trace(kubeconfig: &PathBuf, args: &[&str]) -> (Child, mpsc::Receiver<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_informer-trace"))
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
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
    (child, lines)
}

/// Creates namespace `ns` holding one ConfigMap, `before`, for the trace's first LIST.
fn create_namespace_with_before(kubectl_bin: &PathBuf, kubeconfig: &PathBuf, ns: &str) {
    kubectl(kubectl_bin, kubeconfig, &["create", "namespace", ns]);
    kubectl(
        kubectl_bin,
        kubeconfig,
        &[
            "-n",
            ns,
            "create",
            "configmap",
            "before",
            "--from-literal=a=1",
        ],
    );
}

#[test]
#[ignore = "needs cluster"]
fn trace_shows_the_list_the_watch_and_each_change_reaching_the_indexer() {
    let (kubeconfig, kubectl_bin) = testenv();
    let ns = format!("trace-{}", std::process::id());
    create_namespace_with_before(&kubectl_bin, &kubeconfig, &ns);

    let (mut child, lines) = spawn_trace(
        &kubeconfig,
        &[
            "ConfigMap",
            "--no-watch-list",
            "--summary-every",
            "1",
            "--index-label",
            "x",
            "-n",
            &ns,
        ],
    );

    let mut seen = Vec::new();
    wait_for(&lines, &mut seen, "indexer indices: namespace (");
    wait_for(&lines, &mut seen, "label:x (by the value of label x;");
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
    wait_for_all(
        &lines,
        &mut seen,
        &[&format!("{ns}/during: [Added@"), "] → add (1 handler)"],
    );
    kubectl(
        &kubectl_bin,
        &kubeconfig,
        &["-n", &ns, "label", "configmap", "before", "x=y"],
    );
    wait_for(&lines, &mut seen, &format!("{ns}/before: [Updated@"));
    // The label index: one value, "y", under which one key.
    wait_for(&lines, &mut seen, "summary   index label:x: y=1");
    kubectl(
        &kubectl_bin,
        &kubeconfig,
        &["-n", &ns, "delete", "configmap", "during"],
    );
    wait_for_all(
        &lines,
        &mut seen,
        &[&format!("{ns}/during: [Deleted@"), "] → delete (1 handler)"],
    );
    wait_for(&lines, &mut seen, "indexer 2 objects");
    wait_for(
        &lines,
        &mut seen,
        &format!("summary   index namespace: {ns}=2"),
    );
    wait_for(&lines, &mut seen, "summary   fifo queue");

    child.kill().unwrap();
    child.wait().unwrap();
    kubectl(
        &kubectl_bin,
        &kubeconfig,
        &["delete", "namespace", &ns, "--wait=false"],
    );
}

#[test]
#[ignore = "needs cluster"]
fn trace_shows_the_deltas_the_fifo_holds_per_key_while_pops_are_held() {
    let (kubeconfig, kubectl_bin) = testenv();
    let ns = format!("trace-fifo-{}", std::process::id());
    create_namespace_with_before(&kubectl_bin, &kubeconfig, &ns);

    // A pop delay longer than the test: nothing leaves the FIFO, so what it holds is certain.
    let (mut child, lines) = spawn_trace(
        &kubeconfig,
        &[
            "ConfigMap",
            "--no-watch-list",
            "--summary-every",
            "1",
            "--pop-delay",
            "3600",
            "--delta-fifo",
            "-n",
            &ns,
        ],
    );

    let mut seen = Vec::new();
    // After the LIST's Replace: the queue, key by key, in pop order.
    wait_for(&lines, &mut seen, "summary   fifo queue (depth ");
    wait_for(&lines, &mut seen, &format!(". {ns}/before  [Replaced@"));
    wait_for(&lines, &mut seen, "WATCH from rv");

    // An update for a key still queued joins its deltas; the key keeps its place.
    kubectl(
        &kubectl_bin,
        &kubeconfig,
        &["-n", &ns, "label", "configmap", "before", "x=y"],
    );
    wait_for_all(
        &lines,
        &mut seen,
        &[
            "summary     ",
            &format!(". {ns}/before  [Replaced@"),
            ", Updated@",
        ],
    );

    // A new key joins the back of the queue, and its deletion is appended to it.
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
    kubectl(
        &kubectl_bin,
        &kubeconfig,
        &["-n", &ns, "delete", "configmap", "during"],
    );
    wait_for_all(
        &lines,
        &mut seen,
        &[
            "summary     ",
            &format!(". {ns}/during  [Added@"),
            ", Deleted@",
        ],
    );
    wait_for(&lines, &mut seen, "summary   fifo queue (depth ");
    // Nothing was popped: the indexer is still empty.
    wait_for(&lines, &mut seen, "synced false; indexer 0 objects");
    wait_for(&lines, &mut seen, "summary   index namespace: no values");

    child.kill().unwrap();
    child.wait().unwrap();
    kubectl(
        &kubectl_bin,
        &kubeconfig,
        &["delete", "namespace", &ns, "--wait=false"],
    );
}
