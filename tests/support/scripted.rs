//! A scripted HTTP/1.1 server on loopback for client tests without a cluster: it answers
//! each request with the next scripted response and records every request as received.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use controller_runtime::client::{Client, ClientOptions};
use controller_runtime::config::{Auth, Config, Secret};

/// A server that answers each request, over any number of connections, with the next
/// scripted response, and records every request exactly as received.
pub struct Scripted {
    /// Where it listens.
    pub addr: SocketAddr,
    requests: Arc<Mutex<Vec<String>>>,
}

impl Scripted {
    /// Starts the server on 127.0.0.1 with `responses`, to be given out in order.
    pub fn start(responses: Vec<Vec<u8>>) -> Scripted {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = requests.clone();
        let responses = Arc::new(Mutex::new(responses.into_iter()));
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                let (seen, responses) = (seen.clone(), responses.clone());
                std::thread::spawn(move || serve(conn, &seen, &responses));
            }
        });
        Scripted { addr, requests }
    }

    /// A client authenticating with a bearer token.
    pub fn client(&self) -> Client {
        self.client_as(Auth::Bearer(Secret::new("t0ken")), ClientOptions::default())
    }

    /// A client authenticating with `auth`, with `options` but a fixed user agent.
    pub fn client_as(&self, auth: Auth, options: ClientOptions) -> Client {
        http_client(self.addr, auth, options)
    }

    /// Every request so far, its `host` header fixed to `server`.
    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

/// A client for the plain-HTTP server at `addr`, authenticating with `auth`, with `options`
/// but a fixed user agent.
pub fn http_client(addr: SocketAddr, auth: Auth, options: ClientOptions) -> Client {
    let config = Config {
        cluster_url: format!("http://{addr}").parse().unwrap(),
        default_namespace: "default".into(),
        root_certs: Vec::new(),
        accept_invalid_certs: false,
        tls_server_name: None,
        identity: None,
        auth,
        source: "scripted test".into(),
    };
    let options = ClientOptions {
        user_agent: "test-agent/1".into(),
        ..options
    };
    Client::new(config, options).unwrap()
}

/// Answers the requests on `conn` in turn, recording each, until the script or the
/// connection ends.
fn serve(
    conn: TcpStream,
    seen: &Mutex<Vec<String>>,
    responses: &Mutex<std::vec::IntoIter<Vec<u8>>>,
) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut writer = conn;
    loop {
        let mut head = String::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            head.push_str(&line);
            if line == "\r\n" {
                break;
            }
        }
        let len = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .map_or(0, |v| v.trim().parse::<usize>().unwrap());
        let mut body = vec![0; len];
        reader.read_exact(&mut body).unwrap();
        head.push_str(&String::from_utf8(body).unwrap());
        // Host carries the ephemeral port; fix it so requests compare exactly.
        let head = head
            .lines()
            .map(|l| {
                if l.starts_with("host: ") {
                    "host: server"
                } else {
                    l
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        seen.lock().unwrap().push(head);
        let Some(response) = responses.lock().unwrap().next() else {
            return;
        };
        if writer.write_all(&response).is_err() {
            return;
        }
    }
}
