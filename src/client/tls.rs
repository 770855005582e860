//! TLS for the client: rustls with the ring provider, the cluster's CA, an optional client
//! certificate, and `insecure-skip-tls-verify` when the configuration asks for it.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use super::error::{Error, Result};
use crate::config::Config;

/// Builds the rustls configuration for `config`. ALPN is left to the connector, which offers
/// `h2` and `http/1.1`. The connector wants one even for a plain-HTTP server, which never
/// uses it: that one trusts nothing.
pub(crate) fn client_config(config: &Config) -> Result<ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Build(format!("TLS protocol versions: {e}")))?;
    if config.cluster_url.scheme_str() != Some("https") {
        return Ok(builder
            .with_root_certificates(RootCertStore::empty())
            .with_no_client_auth());
    }

    let builder = if config.accept_invalid_certs {
        tracing::warn!(
            server = %config.cluster_url,
            "insecure-skip-tls-verify is set: the server's certificate is not checked"
        );
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyServerCert(
                provider.signature_verification_algorithms,
            )))
    } else {
        if config.root_certs.is_empty() {
            return Err(Error::Build(format!(
                "no certificate authority is configured for {} ({}); set certificate-authority \
                 or certificate-authority-data, or insecure-skip-tls-verify",
                config.cluster_url, config.source
            )));
        }
        let mut roots = RootCertStore::empty();
        for (i, cert) in config.root_certs.iter().enumerate() {
            roots.add(cert.clone()).map_err(|e| {
                Error::Build(format!(
                    "certificate authority #{} for {} is not usable: {e}",
                    i + 1,
                    config.source
                ))
            })?;
        }
        builder.with_root_certificates(roots)
    };

    match &config.identity {
        Some(identity) => builder
            .with_client_auth_cert(identity.cert_chain.clone(), identity.key.clone_key())
            .map_err(|e| {
                Error::Build(format!(
                    "client certificate and key for {} do not form a usable identity: {e}",
                    config.source
                ))
            }),
        None => Ok(builder.with_no_client_auth()),
    }
}

/// The server name to verify and send in SNI: `tls-server-name` if set, else the URL's host.
pub(crate) fn server_name(config: &Config) -> Result<Option<ServerName<'static>>> {
    let Some(name) = &config.tls_server_name else {
        return Ok(None);
    };
    ServerName::try_from(name.clone())
        .map(Some)
        .map_err(|e| Error::Build(format!("tls-server-name {name:?}: {e}")))
}

/// Accepts any server certificate, but still checks that the server holds its key: the
/// verifier `insecure-skip-tls-verify` asks for.
#[derive(Debug)]
struct AcceptAnyServerCert(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for AcceptAnyServerCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}
