//! What the cluster tests share: the cluster KUBECONFIG names (a test without one fails,
//! saying so), the project's CRDs installed there, a fresh namespace, and the manager with
//! every controller running against that namespace.

#![allow(dead_code)] // each test uses a part of it

use std::time::{Duration, Instant};

use controller_runtime::client::{Api, Client, DeleteParams, PostParams};
use controller_runtime::config::Config;
use controller_runtime::runtime::crd;
use controller_runtime::runtime::{CacheOptions, Manager, ManagerOptions};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// How long a test waits for the cluster to get somewhere before it fails: it bounds a hang,
/// it does not measure speed.
pub const CONVERGE: Duration = Duration::from_secs(120);

/// A namespace on the cluster with the project's CRDs installed and its manager running,
/// scoped to the namespace.
pub struct Cluster {
    /// A client on the cluster.
    pub client: Client,
    /// The test's namespace, `<prefix>-<pid>`.
    pub namespace: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    manager: Option<Stopped>,
}

/// The manager's task: what `run_until` returned.
type Stopped = tokio::task::JoinHandle<Result<(), controller_runtime::runtime::ManagerError>>;

impl Cluster {
    /// Installs the CRDs, creates the namespace and starts the manager. Panics when
    /// KUBECONFIG names no cluster. The namespace is deleted when the `Cluster` is dropped.
    pub async fn start(prefix: &str) -> Cluster {
        let config = config();
        let client = Client::new(config.clone(), Default::default()).expect("a client");
        install_crds(&client).await;
        let namespace = format!("{prefix}-{}", std::process::id());
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(namespace.clone()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        Api::<Namespace>::cluster(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .expect("creating the test namespace");
        let options = ManagerOptions {
            cache: CacheOptions {
                namespaces: vec![namespace.clone()],
                ..CacheOptions::default()
            },
            ..ManagerOptions::default()
        };
        let manager = Manager::with_config(config, options).expect("a manager");
        {{crate_name}}::setup(&manager).expect("the controllers register");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let manager = tokio::spawn(async move {
            manager
                .run_until(async move {
                    let _ = stopped.await;
                })
                .await
        });
        Cluster {
            client,
            namespace,
            stop: Some(stop),
            manager: Some(manager),
        }
    }

    /// Stops the manager, which must stop cleanly; the namespace goes when `self` is dropped.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(manager) = self.manager.take() {
            let stopped = manager.await.expect("the manager task");
            stopped.expect("the manager stopped cleanly");
        }
    }
}

impl Drop for Cluster {
    /// Deletes the namespace, whether the test passed or panicked: on a runtime and client of
    /// its own, since the test's runtime may be unwinding.
    fn drop(&mut self) {
        let namespace = self.namespace.clone();
        let deleted = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(async {
                let client = Client::new(config(), Default::default())?;
                Api::<Namespace>::cluster(client)
                    .delete(&namespace, &DeleteParams::default())
                    .await?;
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
            })
        })
        .join();
        if let Ok(Err(e)) = deleted {
            eprintln!("deleting the test namespace {}: {e}", self.namespace);
        }
    }
}

/// The configuration of the cluster KUBECONFIG names. Panics when it is not set: a cluster
/// test never passes without a cluster.
pub fn config() -> Config {
    let set = std::env::var_os("KUBECONFIG").is_some_and(|v| !v.is_empty());
    assert!(
        set,
        "no cluster: KUBECONFIG is not set; the cluster tests run against the cluster it names \
         (e.g. KUBECONFIG=~/.kube/config make test)"
    );
    Config::infer().unwrap_or_else(|e| panic!("no cluster: KUBECONFIG: {e}"))
}

/// Applies every CRD of the project (server-side, so a changed schema updates it) and waits
/// until the API server serves each kind: what `make install` does.
pub async fn install_crds(client: &Client) {
    for crd in {{crate_name}}::crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        crd::install(client, &crd, "{{project_name}}-test", CONVERGE)
            .await
            .unwrap_or_else(|e| panic!("installing the CRD {name}: {e}"));
    }
}

/// Polls `check` every 100 ms until it returns `Ok`, and returns that value; panics with the
/// last observation if [`CONVERGE`] passes first.
pub async fn wait_until<T>(what: &str, mut check: impl AsyncFnMut() -> Result<T, String>) -> T {
    let begin = Instant::now();
    loop {
        match check().await {
            Ok(value) => return value,
            Err(last) if begin.elapsed() > CONVERGE => {
                panic!("{what}: not within {CONVERGE:?}; last seen: {last}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}
