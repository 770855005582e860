//! Proof that the local cluster (`testenv/`) is a real, working Kubernetes: the apiserver is
//! ready, the controller manager, scheduler and kwok turn a Deployment into Running and Ready
//! Pods, the garbage collector and namespace controller clean up, and CRDs get served.
//!
//! Run by `make test` (or `make test-cluster`) against the cluster it starts.

mod support;

use serde_json::Value;
use support::{CONVERGE, Kubectl, Namespace, eventually, unique};

#[test]
#[ignore = "needs cluster"]
fn apiserver_readyz_answers_ok() {
    let k = Kubectl::from_env();
    assert_eq!(k.run(&["get", "--raw", "/readyz"]).trim(), "ok");
}

#[test]
#[ignore = "needs cluster"]
fn kwok_nodes_are_ready() {
    let k = Kubectl::from_env();
    let nodes = k.json(&["get", "nodes", "-l", "type=kwok"]);
    let ready = items(&nodes)
        .iter()
        .filter(|n| condition_true(n, "Ready"))
        .count();
    assert!(
        ready >= 2,
        "want at least 2 Ready kwok nodes, have {ready}: {nodes:#}"
    );
}

#[test]
#[ignore = "needs cluster"]
fn deployment_rolls_out_scales_and_is_garbage_collected() {
    let k = Kubectl::from_env();
    let ns = Namespace::create(&k, "deploy");
    let app = unique("web");
    k.apply(&deployment(&ns.name, &app, 3));

    // The deployment controller creates one ReplicaSet owned by the Deployment ...
    let deploy_uid = k.json(&["get", "deployment", &app, "-n", &ns.name])["metadata"]["uid"]
        .as_str()
        .expect("deployment has a uid")
        .to_owned();
    let rs = eventually("a ReplicaSet owned by the Deployment", CONVERGE, || {
        let list = k.try_json(&["get", "rs", "-n", &ns.name, "-l", &format!("app={app}")])?;
        match items(&list) {
            [rs] if owned_by(rs, &deploy_uid) => Ok(rs.clone()),
            other => Err(format!("{} ReplicaSets", other.len())),
        }
    });
    let rs_uid = rs["metadata"]["uid"].as_str().expect("rs uid").to_owned();

    // ... whose Pods the scheduler binds to kwok nodes and kwok makes Running and Ready.
    let first = eventually("3 Running and Ready Pods", CONVERGE, || {
        ready_pods(&k, &ns.name, &app, 3)
    });
    for pod in &first {
        assert!(
            owned_by(pod, &rs_uid),
            "pod not owned by the ReplicaSet: {pod:#}"
        );
        let node = pod["spec"]["nodeName"].as_str().unwrap_or_default();
        assert!(node.starts_with("kwok-node-"), "pod bound to {node:?}");
    }

    // Scaling to 5 keeps the 3 Pods and adds 2.
    k.run(&["scale", "deployment", &app, "-n", &ns.name, "--replicas=5"]);
    let scaled = eventually("5 Running and Ready Pods", CONVERGE, || {
        ready_pods(&k, &ns.name, &app, 5)
    });
    let names = |pods: &[Value]| -> Vec<String> {
        pods.iter()
            .map(|p| p["metadata"]["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let scaled_names = names(&scaled);
    for name in names(&first) {
        assert!(
            scaled_names.contains(&name),
            "pod {name} was replaced while scaling up"
        );
    }

    // Deleting the Deployment leaves the ReplicaSet and Pods to the garbage collector.
    k.run(&[
        "delete",
        "deployment",
        &app,
        "-n",
        &ns.name,
        "--cascade=background",
    ]);
    eventually(
        "the ReplicaSet and Pods garbage-collected",
        CONVERGE,
        || {
            let rs = k.try_json(&["get", "rs", "-n", &ns.name, "-l", &format!("app={app}")])?;
            let pods = k.try_json(&["get", "pods", "-n", &ns.name, "-l", &format!("app={app}")])?;
            match (items(&rs).len(), items(&pods).len()) {
                (0, 0) => Ok(()),
                (r, p) => Err(format!("{r} ReplicaSets and {p} Pods left")),
            }
        },
    );
}

#[test]
#[ignore = "needs cluster"]
fn deleting_a_namespace_with_running_pods_completes() {
    let k = Kubectl::from_env();
    let ns = Namespace::create(&k, "nsdel");
    let app = unique("doomed");
    k.apply(&deployment(&ns.name, &app, 2));
    k.run(&[
        "create",
        "configmap",
        "settings",
        "-n",
        &ns.name,
        "--from-literal=a=b",
    ]);
    eventually("2 Running and Ready Pods", CONVERGE, || {
        ready_pods(&k, &ns.name, &app, 2)
    });

    k.run(&["delete", "namespace", &ns.name, "--wait=false"]);
    // One request per look: the namespace can vanish between two.
    eventually("the namespace gone", CONVERGE, || {
        match k.try_json(&["get", "namespace", &ns.name]) {
            Err(e) if e.contains("NotFound") => Ok(()),
            Err(e) => Err(e),
            Ok(namespace) => Err(format!(
                "namespace still present, phase {}",
                namespace["status"]["phase"]
            )),
        }
    });
}

#[test]
#[ignore = "needs cluster"]
fn crd_becomes_established_and_serves_its_resource() {
    let k = Kubectl::from_env();
    // CRDs are cluster-scoped: a group of its own per run keeps runs apart.
    let group = format!("{}.testenv.example.com", unique("g"));
    let crd = format!("widgets.{group}");
    k.apply(&format!(
        r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: {crd}
spec:
  group: {group}
  scope: Namespaced
  names: {{plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {{type: integer, minimum: 0}}
"#
    ));
    k.run(&[
        "wait",
        "--for=condition=Established",
        "--timeout=180s",
        &format!("crd/{crd}"),
    ]);

    let ns = Namespace::create(&k, "crd");
    // Discovery may lag the Established condition by a moment; apply until it is served.
    let widget = format!(
        "apiVersion: {group}/v1\nkind: Widget\nmetadata: {{name: w1, namespace: {}}}\nspec: {{size: 3}}\n",
        ns.name
    );
    eventually("a Widget created", CONVERGE, || {
        k.try_run(&["apply", "-f", "-"], Some(&widget))
    });
    let raw = k.run(&[
        "get",
        "--raw",
        &format!("/apis/{group}/v1/namespaces/{}/widgets/w1", ns.name),
    ]);
    let got: Value = serde_json::from_str(&raw).expect("widget JSON");
    assert_eq!(got["spec"]["size"], 3);
    assert_eq!(got["kind"], "Widget");

    // The schema is enforced: a negative size is rejected by the apiserver.
    let bad = widget.replace("size: 3", "size: -1").replace("w1", "w2");
    let err = k
        .try_run(&["apply", "-f", "-"], Some(&bad))
        .expect_err("a Widget outside its schema must be rejected");
    assert!(err.contains("spec.size"), "unexpected rejection: {err}");

    k.run(&["delete", "crd", &crd, "--wait=true", "--timeout=180s"]);
}

// === helpers ===

fn deployment(ns: &str, app: &str, replicas: u32) -> String {
    format!(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {app}, namespace: {ns}, labels: {{app: {app}}}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {app}}}}}
  template:
    metadata: {{labels: {{app: {app}}}}}
    spec:
      containers:
      - name: memcached
        image: memcached:1.6-alpine
"#
    )
}

fn items(list: &Value) -> &[Value] {
    list["items"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
}

fn condition_true(obj: &Value, kind: &str) -> bool {
    obj["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == kind && c["status"] == "True")
    })
}

fn owned_by(obj: &Value, uid: &str) -> bool {
    obj["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|refs| {
            refs.iter()
                .any(|r| r["uid"] == uid && r["controller"] == true)
        })
}

/// The app's Pods once exactly `want` exist, all Running and Ready.
fn ready_pods(k: &Kubectl, ns: &str, app: &str, want: usize) -> Result<Vec<Value>, String> {
    let list = k.try_json(&["get", "pods", "-n", ns, "-l", &format!("app={app}")])?;
    let pods: Vec<Value> = items(&list)
        .iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .cloned()
        .collect();
    let ready = pods
        .iter()
        .filter(|p| p["status"]["phase"] == "Running" && condition_true(p, "Ready"))
        .count();
    if pods.len() == want && ready == want {
        Ok(pods)
    } else {
        Err(format!("{} pods, {ready} Running and Ready", pods.len()))
    }
}
