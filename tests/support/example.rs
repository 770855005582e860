//! The `configmap_mirror` example run as a real process: its output lines collected, a wait
//! for a line, SIGTERM, and the wait for its exit.

use std::process::{ExitStatus, Stdio};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::Child;
use tokio::task::JoinHandle;

use super::{CONVERGE, cluster, wait_until};

/// A running `configmap_mirror` with every line it prints kept.
pub struct MirrorProcess {
    child: Child,
    /// Every line printed so far, stdout and (if kept) stderr interleaved as read.
    lines: Arc<Mutex<Vec<String>>>,
    readers: Vec<JoinHandle<()>>,
}

impl MirrorProcess {
    /// Starts the example (built beside the test by `cargo test`) against the test cluster
    /// with `args`, `RUST_LOG` set to `log` if given; stderr is kept only with `stderr`.
    pub fn spawn(args: &[&str], log: Option<&str>, stderr: bool) -> MirrorProcess {
        let example = std::env::current_exe()
            .unwrap()
            .parent()
            .unwrap()
            .parent()
            .unwrap()
            .join("examples/configmap_mirror");
        assert!(example.is_file(), "{} is not built", example.display());
        let mut command = tokio::process::Command::new(&example);
        command
            .args(args)
            .env("KUBECONFIG", cluster::kubeconfig())
            .stdout(Stdio::piped())
            .stderr(if stderr {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .kill_on_drop(true);
        if let Some(log) = log {
            command.env("RUST_LOG", log);
        }
        let mut child = command.spawn().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let mut readers = vec![read(&lines, child.stdout.take().unwrap())];
        if let Some(err) = child.stderr.take() {
            readers.push(read(&lines, err));
        }
        MirrorProcess {
            child,
            lines,
            readers,
        }
    }

    /// Waits until the process has printed `line`.
    pub async fn wait_for_line(&self, what: &str, line: &str) {
        wait_until(what, CONVERGE, async || {
            let seen = self.lines.lock().clone();
            seen.iter()
                .any(|l| l == line)
                .then_some(())
                .ok_or(format!("{seen:?}"))
        })
        .await;
    }

    /// Sends SIGTERM and waits for the exit (`expect` says what the wait was for); returns
    /// the exit status and every line the process printed.
    pub async fn terminate(mut self, expect: &str) -> (ExitStatus, Vec<String>) {
        let pid = self.child.id().unwrap();
        let kill = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .unwrap();
        assert!(kill.success());
        let status = tokio::time::timeout(CONVERGE, self.child.wait())
            .await
            .expect(expect)
            .unwrap();
        for reader in self.readers {
            reader.await.unwrap();
        }
        let seen = self.lines.lock().clone();
        (status, seen)
    }
}

/// Collects the lines of `stream` into `lines` until it ends.
fn read(
    lines: &Arc<Mutex<Vec<String>>>,
    stream: impl AsyncRead + Send + Unpin + 'static,
) -> JoinHandle<()> {
    let lines = lines.clone();
    tokio::spawn(async move {
        let mut out = BufReader::new(stream).lines();
        while let Ok(Some(line)) = out.next_line().await {
            lines.lock().push(line);
        }
    })
}
