//! The cluster side of the cluster tests: finding testenv, clients on it, namespaces, events,
//! compacting etcd, restarting the API server, and a proxy that cuts a client's connection on
//! demand.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use controller_runtime::client::{
    Api, Client, ClientOptions, DeleteParams, ListParams, PostParams,
};
use controller_runtime::config::{Config, KubeconfigOptions};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, PodTemplate};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tokio::net::{TcpListener, TcpStream};

use super::{CONVERGE, unique};

/// The test cluster's kubeconfig: `TESTENV_KUBECONFIG` (set by the Makefile) or
/// `target/testenv/kubeconfig`. Panics when there is no cluster: a cluster test never
/// passes without one.
pub fn kubeconfig() -> PathBuf {
    let path = std::env::var_os("TESTENV_KUBECONFIG")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/testenv/kubeconfig"));
    assert!(
        path.is_file(),
        "no cluster: {} does not exist; start one with `make cluster`, or run `make test-cluster`",
        path.display()
    );
    path
}

/// testenv's state directory: the kubeconfig's, holding `bin/`, `pki/` and `logs/`.
pub fn testenv_dir() -> PathBuf {
    kubeconfig().parent().unwrap().to_owned()
}

/// The configuration in the test cluster's kubeconfig (admin, by client certificate).
pub fn config() -> Config {
    Config::from_kubeconfig(&KubeconfigOptions {
        path: Some(kubeconfig()),
        ..KubeconfigOptions::default()
    })
    .unwrap()
}

/// A client on the test cluster with default options.
pub fn client() -> Client {
    Client::new(config(), ClientOptions::default()).unwrap()
}

/// Creates a namespace named `prefix-<pid>-<n>` and returns its name once the cluster has
/// settled it: its `kube-root-ca.crt` ConfigMap is published asynchronously, and a test
/// that counts ConfigMaps must not see it arrive midway.
pub async fn create_namespace(client: &Client, prefix: &str) -> String {
    let name = unique(prefix);
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    Api::<Namespace>::cluster(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let configmaps = Api::<ConfigMap>::namespaced(client.clone(), &name);
    let begin = tokio::time::Instant::now();
    while configmaps
        .get_opt("kube-root-ca.crt")
        .await
        .unwrap()
        .is_none()
    {
        assert!(
            begin.elapsed() < CONVERGE,
            "kube-root-ca.crt never appeared in {name}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    name
}

/// Deletes a namespace, without waiting for it to go.
pub async fn delete_namespace(client: &Client, name: &str) {
    Api::<Namespace>::cluster(client.clone())
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
}

/// The reasons of the events in `namespace`, in the order listed; a failed list is an
/// `Err` holding its message, for [`wait_until`](super::wait_until) to retry.
pub async fn event_reasons(client: &Client, namespace: &str) -> Result<Vec<String>, String> {
    let list = Api::<Event>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?;
    Ok(list.items.into_iter().filter_map(|e| e.reason).collect())
}

/// Compacts etcd up to its current revision (`testenv compact`), so every older
/// resourceVersion that reaches etcd is gone.
pub fn compact_etcd() {
    let dir = testenv_dir();
    let out = std::process::Command::new(dir.join("bin/testenv"))
        .args(["compact", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "testenv compact: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A copy of the test cluster's kubeconfig in `dir` whose server is `addr` (a proxy in front
/// of the API server), for a process started with `--kubeconfig`.
pub fn kubeconfig_through(addr: SocketAddr, dir: &Path) -> PathBuf {
    let upstream = super::fault_proxy::api_server_addr();
    let original = std::fs::read_to_string(kubeconfig()).unwrap();
    let from = format!("server: https://{upstream}");
    assert!(original.contains(&from), "kubeconfig has no `{from}`");
    let through = original.replace(&from, &format!("server: https://{addr}"));
    let path = dir.join(format!("kubeconfig-proxy-{}", addr.port()));
    std::fs::write(&path, through).unwrap();
    path
}

/// Stops each of `components` (testenv's names: `kube-apiserver`, `kube-controller-manager`,
/// ...) and starts it again in place, in order (`testenv restart`): the same ports,
/// certificates and etcd. Returns once the last serves again.
pub fn restart(components: &[&str]) {
    let dir = testenv_dir();
    let out = std::process::Command::new(dir.join("bin/testenv"))
        .args(["restart", "--dir"])
        .arg(&dir)
        .args(components)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "testenv restart {components:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A PodTemplate named `name`. testenv serves PodTemplates without the watch cache, straight
/// from etcd, so compaction is what a client sees.
pub fn template(name: &str) -> PodTemplate {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "template": {"spec": {"containers": [{"name": "c", "image": "memcached:1.6"}]}}
    }))
    .unwrap()
}

/// Forwards TCP to the API server, TLS and all, until cut: then every connection is closed
/// and new ones are dropped at once, until restored.
pub struct CuttableProxy {
    /// Where clients connect: `https://<addr>` reaches the API server through the proxy.
    pub addr: SocketAddr,
    cut: Arc<AtomicBool>,
    generation: Arc<tokio::sync::watch::Sender<u64>>,
}

impl CuttableProxy {
    /// A proxy on 127.0.0.1 forwarding to `upstream`.
    pub async fn start(upstream: SocketAddr) -> CuttableProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let cut = Arc::new(AtomicBool::new(false));
        let generation = Arc::new(tokio::sync::watch::channel(0u64).0);
        let (c, g) = (cut.clone(), generation.clone());
        tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                if c.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let mut cut_signal = g.subscribe();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let (mut client, mut server) = (client, server);
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = cut_signal.changed() => {}
                    }
                });
            }
        });
        CuttableProxy {
            addr,
            cut,
            generation,
        }
    }

    /// A proxy to the test cluster's API server, and a client configuration that goes
    /// through it.
    pub async fn to_cluster() -> (CuttableProxy, Config) {
        let upstream: SocketAddr = client()
            .base_url()
            .trim_start_matches("https://")
            .parse()
            .unwrap();
        let proxy = CuttableProxy::start(upstream).await;
        let mut config = config();
        config.cluster_url = format!("https://{}", proxy.addr).parse().unwrap();
        (proxy, config)
    }

    /// Closes every connection and refuses new ones.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        self.generation.send_modify(|g| *g += 1);
    }

    /// Lets connections through again.
    pub fn restore(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}
