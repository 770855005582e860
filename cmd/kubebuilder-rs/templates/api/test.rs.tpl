//! The {{kind}} controller on a real cluster, the one KUBECONFIG names: a {{kind}} gets the
//! finalizer and the `Available` condition, and deleting it completes.

mod support;

use controller_runtime::client::{Api, DeleteParams, PostParams};
use {{crate_name}}::api::{{version}}::{{kind}};
use {{crate_name}}::controller::{{module}}::{AVAILABLE, FINALIZER};

use support::{Cluster, wait_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn a_{{module}}_is_reconciled_and_its_deletion_completes() {
    let cluster = Cluster::start("{{module}}-test").await;
    let api = Api::<{{kind}}>::namespaced(cluster.client.clone(), &cluster.namespace);
    let sample = {{kind}}::new("sample", Default::default());
    // The API server may take a moment to serve a kind it has just installed.
    wait_until("the {{kind}} created", async || {
        api.create(&PostParams::default(), &sample)
            .await
            .map_err(|e| e.to_string())
    })
    .await;

    wait_until("the {{kind}} reconciled", async || {
        let obj = api.get("sample").await.map_err(|e| e.to_string())?;
        let finalizers = obj.metadata.finalizers.clone().unwrap_or_default();
        let conditions = obj.status.clone().unwrap_or_default().conditions;
        let available = conditions.iter().find(|c| c.type_ == AVAILABLE);
        let reconciled = available.is_some_and(|c| {
            c.status == "True" && c.observed_generation == obj.metadata.generation
        });
        if reconciled && finalizers.iter().any(|f| f == FINALIZER) {
            return Ok(());
        }
        Err(format!("{finalizers:?} {conditions:?}"))
    })
    .await;

    api.delete("sample", &DeleteParams::default())
        .await
        .expect("deleting the {{kind}}");
    wait_until("the {{kind}} gone", async || {
        match api.get_opt("sample").await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(obj) => Err(format!("finalizers {:?}", obj.metadata.finalizers)),
        }
    })
    .await;
    cluster.stop().await;
}
