//! The client's TLS against real TLS servers on loopback: `tls-server-name` for a certificate
//! issued to another name, `insecure-skip-tls-verify` for a self-signed one, refusal of
//! untrusted certificates, no platform roots, and HTTP/1.1 when the server's ALPN offers
//! nothing else. Certificates come from `testdata/tls/` (see its README).

mod support;

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use controller_runtime::client::{Client, ClientOptions, Error};
use controller_runtime::config::{Auth, Config};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use support::certs::fixture;

fn cert(name: &str) -> CertificateDer<'static> {
    CertificateDer::from_pem_file(fixture(name)).unwrap()
}

/// What a [`TlsServer`] saw of one request.
#[derive(Clone, Debug, PartialEq)]
struct Seen {
    /// The request line, e.g. `GET /version HTTP/1.1`.
    request_line: String,
    /// The protocols the client offered by ALPN, in its order of preference.
    offered: Vec<String>,
    /// The protocol agreed by ALPN, if any.
    alpn: Option<String>,
}

/// An HTTP/1.1 server over TLS on 127.0.0.1, presenting `cert`, offering `alpn`. It answers
/// every request `200 {"ok":true}` and records it; a failed handshake records nothing.
struct TlsServer {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl TlsServer {
    fn start(cert: &str, key: &str, alpn: &[&[u8]]) -> TlsServer {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![self::cert(cert)],
                PrivateKeyDer::from_pem_file(fixture(key)).unwrap(),
            )
            .unwrap();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let config = Arc::new(config);

        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for tcp in listener.incoming() {
                let Ok(mut tcp) = tcp else { return };
                let (config, log) = (config.clone(), log.clone());
                std::thread::spawn(move || {
                    let Some((tls, offered)) = handshake_start(&mut tcp, config) else {
                        return;
                    };
                    serve(rustls::StreamOwned::new(tls, tcp), &offered, &log);
                });
            }
        });
        TlsServer { addr, seen }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// Reads the client's hello and starts the server side of the handshake; returns the
/// connection and the protocols the client offered by ALPN.
fn handshake_start(
    tcp: &mut TcpStream,
    config: Arc<rustls::ServerConfig>,
) -> Option<(rustls::ServerConnection, Vec<String>)> {
    let mut acceptor = rustls::server::Acceptor::default();
    let accepted = loop {
        if acceptor.read_tls(tcp).ok()? == 0 {
            return None;
        }
        if let Some(accepted) = acceptor.accept().ok()? {
            break accepted;
        }
    };
    let offered = accepted
        .client_hello()
        .alpn()
        .map(|protocols| {
            protocols
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .collect()
        })
        .unwrap_or_default();
    let tls = accepted.into_connection(config).ok()?;
    Some((tls, offered))
}

fn serve(
    stream: rustls::StreamOwned<rustls::ServerConnection, TcpStream>,
    offered: &[String],
    log: &Mutex<Vec<Seen>>,
) {
    let mut reader = BufReader::new(stream);
    loop {
        // Requests carry no body here: read the head, answer, repeat.
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if line == "\r\n" {
                break;
            }
        }
        let stream = reader.get_mut();
        log.lock().unwrap().push(Seen {
            request_line: request_line.trim_end().to_owned(),
            offered: offered.to_vec(),
            alpn: stream
                .conn
                .alpn_protocol()
                .map(|p| String::from_utf8_lossy(p).into_owned()),
        });
        let body = r#"{"ok":true}"#;
        let response = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        if stream
            .write_all(response.as_bytes())
            .and_then(|()| stream.flush())
            .is_err()
        {
            return;
        }
    }
}

/// A configuration for `https://` `server`, trusting `roots`.
fn config(server: &TlsServer, roots: Vec<CertificateDer<'static>>) -> Config {
    Config {
        cluster_url: format!("https://{}", server.addr).parse().unwrap(),
        default_namespace: "default".into(),
        root_certs: roots,
        accept_invalid_certs: false,
        tls_server_name: None,
        identity: None,
        auth: Auth::None,
        source: "tls test".into(),
    }
}

/// The error and every cause under it, one per line.
fn chain(err: &Error) -> String {
    let mut out = err.to_string();
    let mut cause = std::error::Error::source(err);
    while let Some(c) = cause {
        out.push('\n');
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}

fn get_version_request() -> Seen {
    Seen {
        request_line: "GET /version HTTP/1.1".into(),
        offered: vec!["h2".into(), "http/1.1".into()],
        alpn: Some("http/1.1".into()),
    }
}

#[tokio::test]
async fn a_certificate_for_another_name_is_refused_without_tls_server_name() {
    let server = TlsServer::start("server.pem", "server-key.pem", &[b"http/1.1"]);
    let client = Client::new(
        config(&server, vec![cert("ca.pem")]),
        ClientOptions::default(),
    )
    .unwrap();
    let err = client.get_raw("/version").await.unwrap_err();
    assert!(matches!(err, Error::Transport { .. }), "{err}");
    let chain = chain(&err);
    assert!(chain.contains("certificate"), "{chain}");
    assert!(
        chain.contains("certificate not valid for name \"127.0.0.1\""),
        "{chain}"
    );
    assert_eq!(
        server.seen(),
        [],
        "a request got through the refused handshake"
    );
}

#[tokio::test]
async fn tls_server_name_verifies_the_certificate_against_that_name() {
    let server = TlsServer::start("server.pem", "server-key.pem", &[b"http/1.1"]);
    let mut config = config(&server, vec![cert("ca.pem")]);
    config.tls_server_name = Some("server.test".into());
    let client = Client::new(config, ClientOptions::default()).unwrap();
    let body = client.get_raw("/version").await.unwrap();
    assert_eq!(&body[..], br#"{"ok":true}"#);
    assert_eq!(server.seen(), [get_version_request()]);
}

#[tokio::test]
async fn tls_server_name_does_not_make_an_untrusted_certificate_acceptable() {
    let server = TlsServer::start("self-signed.pem", "self-signed-key.pem", &[b"http/1.1"]);
    let mut config = config(&server, vec![cert("ca.pem")]);
    config.tls_server_name = Some("self-signed.test".into());
    let client = Client::new(config, ClientOptions::default()).unwrap();
    let err = client.get_raw("/version").await.unwrap_err();
    assert!(chain(&err).contains("UnknownIssuer"), "{}", chain(&err));
    assert_eq!(server.seen(), []);
}

#[tokio::test]
async fn insecure_skip_tls_verify_connects_to_a_self_signed_server() {
    let server = TlsServer::start("self-signed.pem", "self-signed-key.pem", &[b"http/1.1"]);
    // Neither the name (127.0.0.1) nor the issuer would pass verification, and no CA is
    // configured at all.
    let mut config = config(&server, Vec::new());
    config.accept_invalid_certs = true;
    let client = Client::new(config, ClientOptions::default()).unwrap();
    let body = client.get_raw("/version").await.unwrap();
    assert_eq!(&body[..], br#"{"ok":true}"#);
    assert_eq!(server.seen(), [get_version_request()]);
}

#[tokio::test]
async fn https_without_a_certificate_authority_is_refused_when_building_the_client() {
    // Only configured CAs are trusted; there is no fallback to the platform's roots.
    let server = TlsServer::start("server.pem", "server-key.pem", &[b"http/1.1"]);
    let err = Client::new(config(&server, Vec::new()), ClientOptions::default()).unwrap_err();
    assert!(matches!(err, Error::Build(_)), "{err}");
    assert!(
        err.to_string()
            .contains("no certificate authority is configured"),
        "{err}"
    );
}

#[tokio::test]
async fn default_client_speaks_http1_when_the_server_offers_only_http1_by_alpn() {
    // The client offers h2 first (see `Seen::offered`); the server agrees to http/1.1 only,
    // and the server reads nothing but HTTP/1.1.
    let server = TlsServer::start("server.pem", "server-key.pem", &[b"http/1.1"]);
    let mut config = config(&server, vec![cert("ca.pem")]);
    config.tls_server_name = Some("server.test".into());
    let options = ClientOptions::default();
    let client = Client::new(config, options).unwrap();
    for _ in 0..2 {
        let body = client.get_raw("/version").await.unwrap();
        assert_eq!(&body[..], br#"{"ok":true}"#);
    }
    assert_eq!(
        server.seen(),
        [get_version_request(), get_version_request()]
    );
}
