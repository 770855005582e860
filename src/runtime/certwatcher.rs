//! The serving certificate of the webhook and metrics servers, reloaded when its files change.
//!
//! # Implementation Details
//!
//! The TLS configuration resolves its certificate through a [`CertWatcher`] that holds the
//! current pair. Before each new connection's handshake the watcher compares the two files'
//! modification time, length and inode with those it saw last; when either changed it reads
//! and parses both, checks that the key matches the certificate, and swaps the pair in. A
//! pair that does not load (a half-written file, a key for another certificate) is logged
//! with the file it came from and the old pair stays; since the file stamps are remembered,
//! the error is logged once per change, and the next write is tried again. Connections
//! already open keep the certificate they were made with. No thread or timer is involved: a
//! server nobody connects to has no use for a fresh certificate.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use parking_lot::{Mutex, RwLock};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::webhook::{Error, Result};

/// What a certificate or key file looked like when last read: modification time, length,
/// inode (a renamed-in file has a new one). `None` when it could not be examined.
type Stamp = Option<(Option<SystemTime>, u64, u64)>;

async fn stamp(path: &Path) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    let metadata = tokio::fs::metadata(path).await.ok()?;
    Some((metadata.modified().ok(), metadata.len(), metadata.ino()))
}

/// The serving certificate: the current pair, reloaded from its files when they change.
pub(crate) struct CertWatcher {
    cert_path: PathBuf,
    key_path: PathBuf,
    provider: Arc<CryptoProvider>,
    /// The pair served to new handshakes; always a pair that loaded.
    current: RwLock<Arc<CertifiedKey>>,
    /// The files' stamps when last read (successfully or not).
    seen: Mutex<(Stamp, Stamp)>,
}

impl fmt::Debug for CertWatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertWatcher")
            .field("cert_path", &self.cert_path)
            .field("key_path", &self.key_path)
            .finish_non_exhaustive()
    }
}

impl ResolvesServerCert for CertWatcher {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.read().clone())
    }
}

impl CertWatcher {
    /// Loads the pair; fails, naming the file at fault, if it does not load.
    pub(crate) async fn new(cert_path: PathBuf, key_path: PathBuf) -> Result<CertWatcher> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let stamps = (stamp(&cert_path).await, stamp(&key_path).await);
        let pair = load_pair(&cert_path, &key_path, &provider).await?;
        Ok(CertWatcher {
            cert_path,
            key_path,
            provider,
            current: RwLock::new(Arc::new(pair)),
            seen: Mutex::new(stamps),
        })
    }

    /// Reloads the pair if either file changed since it was last read; keeps the current
    /// pair (and logs why) if the new one does not load.
    pub(crate) async fn refresh(&self) {
        let stamps = (stamp(&self.cert_path).await, stamp(&self.key_path).await);
        if *self.seen.lock() == stamps {
            return;
        }
        // Stamped before reading: a write during the read shows as a new stamp next time.
        let loaded = load_pair(&self.cert_path, &self.key_path, &self.provider).await;
        *self.seen.lock() = stamps;
        match loaded {
            Ok(pair) => {
                let mut current = self.current.write();
                if current.cert != pair.cert {
                    *current = Arc::new(pair);
                    tracing::info!(cert = %self.cert_path.display(), "reloaded the serving certificate");
                }
            }
            Err(e) => tracing::error!(
                error = %e,
                "the serving certificate did not reload; serving the previous one"
            ),
        }
    }
}

async fn read(path: &Path) -> Result<Vec<u8>> {
    tokio::fs::read(path)
        .await
        .map_err(|source| Error::ReadFile {
            path: path.to_owned(),
            source,
        })
}

async fn load_pair(
    cert_path: &Path,
    key_path: &Path,
    provider: &CryptoProvider,
) -> Result<CertifiedKey> {
    let cert_pem = read(cert_path).await?;
    let key_pem = read(key_path).await?;
    parse_pair(cert_path, &cert_pem, key_path, &key_pem, provider)
}

/// Parses a PEM certificate chain and key, and checks that the key is the certificate's.
fn parse_pair(
    cert_path: &Path,
    cert_pem: &[u8],
    key_path: &Path,
    key_pem: &[u8],
    provider: &CryptoProvider,
) -> Result<CertifiedKey> {
    let pem_error = |path: &Path, what: &'static str, source: pem::Error| match source {
        pem::Error::NoItemsFound => Error::Missing {
            path: path.to_owned(),
            what,
        },
        source => Error::Pem {
            path: path.to_owned(),
            source,
        },
    };
    let certs = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(cert_path, "certificate", e))?;
    if certs.is_empty() {
        return Err(Error::Missing {
            path: cert_path.to_owned(),
            what: "certificate",
        });
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| pem_error(key_path, "private key", e))?;
    CertifiedKey::from_der(certs, key, provider).map_err(|source| Error::KeyPair {
        cert: cert_path.to_owned(),
        key: key_path.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CERT: &[u8] = include_bytes!("../../testdata/tls/server.pem");
    const KEY: &[u8] = include_bytes!("../../testdata/tls/server-key.pem");
    const OTHER_KEY: &[u8] = include_bytes!("../../testdata/tls/self-signed-key.pem");

    fn parse(cert: &[u8], key: &[u8]) -> Result<CertifiedKey> {
        let provider = rustls::crypto::ring::default_provider();
        parse_pair(
            Path::new("/certs/tls.crt"),
            cert,
            Path::new("/certs/tls.key"),
            key,
            &provider,
        )
    }

    #[test]
    fn a_matching_pair_loads() {
        let pair = parse(CERT, KEY).unwrap();
        assert_eq!(pair.cert.len(), 1);
    }

    #[test]
    fn a_bad_pair_names_the_file_at_fault() {
        let message = |r: Result<CertifiedKey>| r.expect_err("must fail").to_string();
        assert_eq!(
            message(parse(b"", KEY)),
            "/certs/tls.crt: no certificate in PEM"
        );
        assert_eq!(
            message(parse(CERT, b"garbage")),
            "/certs/tls.key: no private key in PEM"
        );
        assert_eq!(
            message(parse(KEY, KEY)),
            "/certs/tls.crt: no certificate in PEM"
        );
        let truncated = &CERT[..CERT.len() / 2];
        assert!(
            message(parse(truncated, KEY)).starts_with("parsing /certs/tls.crt: "),
            "{}",
            message(parse(truncated, KEY))
        );
        let mismatch = message(parse(CERT, OTHER_KEY));
        assert!(
            mismatch.starts_with("loading the key pair /certs/tls.crt and /certs/tls.key: "),
            "{mismatch}"
        );
    }
}
