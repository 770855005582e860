//! A loopback TCP proxy to the API server that injects faults at random: it resets
//! connections, stalls them, truncates a response mid-frame, and delays bytes.
//!
//! It works below TLS: bytes pass through untouched, so the client still verifies the API
//! server's certificate (testenv's is valid for 127.0.0.1, where the proxy listens) and the
//! proxy never sees HTTP. A fault therefore lands wherever a read boundary falls: inside a
//! TLS record, an HTTP/2 frame, a watch event. What each fault does to the connection:
//!
//! - reset: both sides are closed with an RST (zero linger), as a crashed peer or a
//!   middlebox that forgot the connection would;
//! - stall: nothing moves in that direction for a while, then forwarding resumes;
//! - truncation (server to client only): part of a chunk is forwarded, then both sides are
//!   closed with a FIN: the client reads a clean end of stream in the middle of a frame;
//! - delay: the chunk is held back for a few milliseconds.
//!
//! Faults are drawn per chunk read, from a seeded generator: the seed is printed, and
//! `FAULT_SEED=<n>` reuses it. The same seed gives every connection the same sequence of
//! draws; timing still varies between runs (what a read returns depends on the scheduler),
//! so a replay repeats the fault mix, not the exact byte offsets.
//!
//! Invariant: with faults off ([`FaultProxy::set_faults`]) the proxy forwards every byte in
//! both directions, half-closes included, so a test can let the system converge through it.
//!
//! Apart from the random faults, [`FaultProxy::set_cut`] cuts the connection to the API
//! server as a network partition does: while cut, every byte either side sends is dropped
//! (connections hang, new ones are accepted and hang too); when the cut ends, every
//! connection that lived through it is reset, as a peer whose connections timed out would,
//! so nothing sent during the cut ever reaches the other side.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use controller_runtime::config::Config;
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// How often each fault strikes, as a probability per chunk read (a chunk is up to 16 KiB,
/// whatever one read returned), and how long stalls and delays last.
#[derive(Clone, Debug)]
pub struct FaultRates {
    /// Reset both sides of the connection.
    pub reset: f64,
    /// Stop forwarding in this direction for a while, between `stall.0` and `stall.1`.
    pub stall: f64,
    /// Forward part of a server-to-client chunk, then close.
    pub truncate: f64,
    /// Hold the chunk back for up to `max_delay`.
    pub delay: f64,
    /// The shortest and the longest stall.
    pub stall_for: (Duration, Duration),
    /// The longest delay.
    pub max_delay: Duration,
}

impl FaultRates {
    /// Rates that keep the system working between faults: a test that lasts tens of seconds
    /// sees dozens of each.
    pub fn moderate() -> Self {
        FaultRates {
            reset: 0.01,
            stall: 0.01,
            truncate: 0.01,
            delay: 0.05,
            stall_for: (Duration::from_millis(500), Duration::from_secs(4)),
            max_delay: Duration::from_millis(150),
        }
    }

    /// Rates for a soak: several times the moderate ones, and longer stalls.
    pub fn heavy() -> Self {
        FaultRates {
            reset: 0.03,
            stall: 0.03,
            truncate: 0.03,
            delay: 0.15,
            stall_for: (Duration::from_millis(500), Duration::from_secs(8)),
            max_delay: Duration::from_millis(300),
        }
    }
}

/// How many of each fault the proxy has injected, and how many connections it took.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// Connections accepted.
    pub connections: u64,
    /// Connections reset.
    pub resets: u64,
    /// Stalls.
    pub stalls: u64,
    /// Responses truncated mid-chunk.
    pub truncations: u64,
    /// Chunks delayed.
    pub delays: u64,
}

impl FaultCounts {
    /// The counts as a two-column table, one fault per row.
    pub fn table(&self) -> String {
        format!(
            "| fault        | count |\n|--------------|-------|\n\
             | connections  | {:>5} |\n| resets       | {:>5} |\n| stalls       | {:>5} |\n\
             | truncations  | {:>5} |\n| delays       | {:>5} |\n",
            self.connections, self.resets, self.stalls, self.truncations, self.delays
        )
    }
}

#[derive(Default)]
struct Counters {
    connections: AtomicU64,
    resets: AtomicU64,
    stalls: AtomicU64,
    truncations: AtomicU64,
    delays: AtomicU64,
}

/// What the accept loop and every connection share.
struct Shared {
    rates: Mutex<FaultRates>,
    faults_on: AtomicBool,
    counters: Counters,
    /// True while the connection is cut ([`FaultProxy::set_cut`]).
    cut: watch::Sender<bool>,
}

/// The proxy: listening on 127.0.0.1, forwarding to one upstream, until dropped (which closes
/// every connection it holds).
pub struct FaultProxy {
    /// Where clients connect: `https://<addr>` reaches the API server through the proxy.
    pub addr: SocketAddr,
    /// The generator's seed, printed at start; `FAULT_SEED` sets it.
    pub seed: u64,
    shared: Arc<Shared>,
    closed: watch::Sender<bool>,
}

impl FaultProxy {
    /// A proxy on 127.0.0.1 forwarding to `upstream`, with faults on at `rates`. The seed
    /// comes from `FAULT_SEED`, else from the clock; either way it is printed.
    pub async fn start(upstream: SocketAddr, rates: FaultRates) -> FaultProxy {
        let seed = std::env::var("FAULT_SEED")
            .ok()
            .map(|s| s.trim().parse().expect("FAULT_SEED is a u64"))
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
            });
        println!("fault proxy seed: {seed} (replay with FAULT_SEED={seed})");
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            rates: Mutex::new(rates),
            faults_on: AtomicBool::new(true),
            counters: Counters::default(),
            cut: watch::Sender::new(false),
        });
        let (closed, closed_rx) = watch::channel(false);
        let s = shared.clone();
        tokio::spawn(async move {
            let mut closing = closed_rx.clone();
            let mut n = 0u64;
            loop {
                let accepted = tokio::select! {
                    a = listener.accept() => a,
                    _ = fired(&mut closing) => return,
                };
                let Ok((client, _)) = accepted else { return };
                n += 1;
                s.counters.connections.fetch_add(1, Ordering::Relaxed);
                let (s, closing) = (s.clone(), closed_rx.clone());
                let rng = Rng::new(seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15));
                tokio::spawn(connection(client, upstream, s, rng, closing));
            }
        });
        FaultProxy {
            addr,
            seed,
            shared,
            closed,
        }
    }

    /// A proxy to the test cluster's API server, and a client configuration that goes
    /// through it.
    pub async fn to_cluster(rates: FaultRates) -> (FaultProxy, Config) {
        let proxy = FaultProxy::start(api_server_addr(), rates).await;
        let mut config = super::cluster::config();
        config.cluster_url = format!("https://{}", proxy.addr).parse().unwrap();
        (proxy, config)
    }

    /// Writes a copy of the test cluster's kubeconfig into `dir` whose server is this proxy,
    /// for a process (kubectl, an operator binary) to go through it; returns its path.
    pub fn kubeconfig_in(&self, dir: &Path) -> PathBuf {
        super::cluster::kubeconfig_through(self.addr, dir)
    }

    /// Turns faults on or off; connections already open follow at their next chunk (a stall
    /// under way runs out first).
    pub fn set_faults(&self, on: bool) {
        self.shared.faults_on.store(on, Ordering::SeqCst);
    }

    /// Cuts the connection (`true`) or ends the cut (`false`); see the [module docs](self).
    pub fn set_cut(&self, cut: bool) {
        self.shared.cut.send_replace(cut);
    }

    /// Changes the rates, for connections open and to come.
    pub fn set_rates(&self, rates: FaultRates) {
        *self.shared.rates.lock() = rates;
    }

    /// The faults injected so far.
    pub fn counts(&self) -> FaultCounts {
        let c = &self.shared.counters;
        FaultCounts {
            connections: c.connections.load(Ordering::Relaxed),
            resets: c.resets.load(Ordering::Relaxed),
            stalls: c.stalls.load(Ordering::Relaxed),
            truncations: c.truncations.load(Ordering::Relaxed),
            delays: c.delays.load(Ordering::Relaxed),
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        let _ = self.closed.send(true);
    }
}

/// The test cluster's API server, as `host:port`.
pub fn api_server_addr() -> SocketAddr {
    super::cluster::config()
        .cluster_url
        .authority()
        .expect("the cluster's URL has a host and port")
        .as_str()
        .parse()
        .unwrap()
}

/// How a connection ended, as seen by one direction.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum End {
    /// End of stream or an error: passed on as a half-close.
    Closed,
    /// A fault ends the whole connection; `rst` says whether with an RST.
    Fault { rst: bool },
    /// The proxy is closing, or the other direction ended the connection.
    Killed,
}

async fn connection(
    mut client: TcpStream,
    upstream: SocketAddr,
    shared: Arc<Shared>,
    mut rng: Rng,
    mut closing: watch::Receiver<bool>,
) {
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    let (kill, killed) = watch::channel(false);
    let mut down_rng = Rng::new(rng.next());
    let (mut cr, mut cw) = client.split();
    let (mut sr, mut sw) = server.split();
    let up = pump(
        &mut cr,
        &mut sw,
        false,
        &shared,
        &mut rng,
        &kill,
        killed.clone(),
    );
    let down = pump(
        &mut sr,
        &mut cw,
        true,
        &shared,
        &mut down_rng,
        &kill,
        killed,
    );
    let mut cut = shared.cut.subscribe();
    let ends = tokio::select! {
        ends = async { tokio::join!(up, down) } => ends,
        _ = fired(&mut closing) => (End::Killed, End::Killed),
        () = lived_through_a_cut(&mut cut) => (End::Fault { rst: true }, End::Fault { rst: true }),
    };
    if matches!(
        ends,
        (End::Fault { rst: true }, _) | (_, End::Fault { rst: true })
    ) {
        let _ = (client.set_zero_linger(), server.set_zero_linger());
    }
}

/// Forwards `from` to `to`, injecting faults; `down` is the server-to-client direction, the
/// only one truncated.
async fn pump<R, W>(
    from: &mut R,
    to: &mut W,
    down: bool,
    shared: &Shared,
    rng: &mut Rng,
    kill: &watch::Sender<bool>,
    mut killed: watch::Receiver<bool>,
) -> End
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = tokio::select! {
            r = from.read(&mut buf) => match r {
                Ok(0) | Err(_) => {
                    let _ = to.shutdown().await;
                    return End::Closed;
                }
                Ok(n) => n,
            },
            _ = fired(&mut killed) => return End::Killed,
        };
        if *shared.cut.borrow() {
            // Cut: the bytes are lost.
            continue;
        }
        let mut chunk = &buf[..n];
        let mut end = None;
        if shared.faults_on.load(Ordering::SeqCst) {
            let rates = shared.rates.lock().clone();
            let c = &shared.counters;
            let roll = rng.unit();
            let mut wait = None;
            if roll < rates.reset {
                c.resets.fetch_add(1, Ordering::Relaxed);
                let _ = kill.send(true);
                return End::Fault { rst: true };
            } else if roll < rates.reset + rates.stall {
                c.stalls.fetch_add(1, Ordering::Relaxed);
                let (lo, hi) = rates.stall_for;
                wait = Some(lo + (hi.saturating_sub(lo)).mul_f64(rng.unit()));
            } else if down && roll < rates.reset + rates.stall + rates.truncate {
                c.truncations.fetch_add(1, Ordering::Relaxed);
                let keep = if n > 1 {
                    1 + (rng.next() as usize) % (n - 1)
                } else {
                    0
                };
                chunk = &buf[..keep];
                end = Some(End::Fault { rst: false });
            } else if roll < rates.reset + rates.stall + rates.truncate + rates.delay {
                c.delays.fetch_add(1, Ordering::Relaxed);
                wait = Some(rates.max_delay.mul_f64(rng.unit()));
            }
            if let Some(wait) = wait {
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = fired(&mut killed) => return End::Killed,
                }
            }
        }
        if to.write_all(chunk).await.is_err() {
            let _ = kill.send(true);
            return End::Closed;
        }
        if let Some(end) = end {
            let _ = to.flush().await;
            let _ = kill.send(true);
            return end;
        }
    }
}

/// Resolves once a cut has begun and ended.
async fn lived_through_a_cut(cut: &mut watch::Receiver<bool>) {
    if cut.wait_for(|c| *c).await.is_ok() {
        let _ = cut.wait_for(|c| !*c).await;
    }
}

/// Resolves once `flag` is true (or its sender is gone).
async fn fired(flag: &mut watch::Receiver<bool>) {
    let _ = flag.wait_for(|f| *f).await.map(|_| ());
}

/// splitmix64: small, seedable, and good enough to draw faults.
pub struct Rng(u64);

impl Rng {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
