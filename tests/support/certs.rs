//! Certificates for TLS tests, from `testdata/tls/` or made with the `openssl` command line,
//! and guards for the temporary files and cluster-wide webhook configurations they go with.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{Kubectl, unique};

/// A file of the TLS fixtures in `testdata/tls/` (see its README).
pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/tls")
        .join(name)
}

/// A directory under the system's temp dir, named `prefix-<pid>-<n>`, removed when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    /// Creates the directory.
    pub fn new(prefix: &str) -> TempDir {
        let dir = std::env::temp_dir().join(unique(prefix));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// The path of `name` in the directory.
    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// Writes `contents` to `name` in the directory and returns its path.
    pub fn write(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.join(name);
        std::fs::write(&path, contents).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `openssl` with `args` in `dir`; panics with its stderr when it fails.
pub fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "openssl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A throwaway CA (`<name>.crt`, `<name>.key` in `dir`), EC P-256, valid for a day.
pub fn make_ca(dir: &Path, name: &str) -> PathBuf {
    let (crt, key) = (format!("{name}.crt"), format!("{name}.key"));
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "1",
            "-subj",
            &format!("/CN=webhook test {name}"),
            "-keyout",
            &key,
            "-out",
            &crt,
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign",
        ],
    );
    dir.join(crt)
}

/// A serving certificate for IP 127.0.0.1 that CA `ca` signs: `(<name>.crt, <name>.key)`.
pub fn issue(dir: &Path, ca: &str, name: &str) -> (PathBuf, PathBuf) {
    let (crt, key, csr, ext) = (
        format!("{name}.crt"),
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.ext"),
    );
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            &key,
            "-out",
            &csr,
        ],
    );
    std::fs::write(
        dir.join(&ext),
        "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &format!("{ca}.crt"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            &ext,
            "-out",
            &crt,
        ],
    );
    (dir.join(crt), dir.join(key))
}

/// Deletes the webhook configurations (cluster-wide objects) when dropped, even when the
/// test fails.
pub struct WebhookConfigurations<'k> {
    /// kubectl on the cluster.
    pub kubectl: &'k Kubectl,
    /// The configurations' name (the same for both kinds).
    pub name: String,
}

impl Drop for WebhookConfigurations<'_> {
    fn drop(&mut self) {
        for kind in [
            "mutatingwebhookconfiguration",
            "validatingwebhookconfiguration",
        ] {
            if let Err(e) = self
                .kubectl
                .try_run(&["delete", kind, &self.name, "--ignore-not-found"], None)
            {
                eprintln!("cleaning up {kind} {}: {e}", self.name);
            }
        }
    }
}
