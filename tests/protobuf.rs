//! Protobuf on the wire, against the real local cluster: for every built-in kind the cluster
//! holds (and fixtures made to reach the awkward types: inline structs, IntOrString,
//! Quantity, MicroTime, RawExtension, bytes, packed numbers), the protobuf list transcoded
//! into `Raw<K>` decodes to exactly what the JSON list decodes to; and a watch of `Raw<K>`
//! runs over protobuf and ends its WatchList with the bookmark.
#![cfg(feature = "protobuf")]

mod support;

use std::collections::BTreeMap;
use std::fmt::Debug;

use controller_runtime::client::{
    Api, Client, ClientOptions, ListParams, Raw, WatchEvent, WatchObject, WatchParams,
};
use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy;
use k8s_openapi::api::apps::v1::{
    ControllerRevision, DaemonSet, Deployment, ReplicaSet, StatefulSet,
};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ConfigMap, Endpoints, Event, LimitRange, Namespace, Node, PersistentVolume,
    PersistentVolumeClaim, Pod, PodTemplate, ResourceQuota, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::events::v1::Event as EventsV1;
use k8s_openapi::api::flowcontrol::v1::{FlowSchema, PriorityLevelConfiguration};
use k8s_openapi::api::networking::v1::{Ingress, IngressClass, NetworkPolicy};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::storage::v1::StorageClass;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use support::cluster::client;
use support::{Kubectl, Namespace as TestNamespace};

/// Objects that reach the types with a JSON form of their own, or an unusual encoding.
const FIXTURES: &str = r#"
apiVersion: v1
kind: Secret
metadata: {name: pb-secret, labels: {app: pb}}
type: Opaque
data: {key: AAEC/w==, empty: ""}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: pb-binary, annotations: {note: "quote \" backslash \\ newline \n tab \t"}}
data: {text: "ünïcode ✓"}
binaryData: {blob: AAEC/w==}
---
apiVersion: v1
kind: Service
metadata: {name: pb-svc}
spec:
  selector: {app: pb}
  ports:
  - {name: http, port: 80, targetPort: web}
  - {name: metrics, port: 9090, targetPort: 9091, protocol: UDP}
---
apiVersion: v1
kind: Pod
metadata: {name: pb-pod, labels: {app: pb}}
spec:
  securityContext: {supplementalGroups: [1, 2000, 2147483647], runAsUser: 0, fsGroup: 2000}
  terminationGracePeriodSeconds: 0
  volumes:
  - {name: config, configMap: {name: pb-binary, defaultMode: 0644}}
  - {name: scratch, emptyDir: {sizeLimit: 64Mi}}
  containers:
  - name: app
    image: memcached:1.6
    ports: [{containerPort: 11211, name: memcached}]
    resources: {limits: {cpu: 500m, memory: 1Gi}, requests: {cpu: "0.1", memory: "128974848"}}
    readinessProbe: {tcpSocket: {port: memcached}, periodSeconds: 3}
    livenessProbe: {httpGet: {path: /healthz, port: 8080}, initialDelaySeconds: 0}
    env: [{name: EMPTY, value: ""}, {name: NEG, value: "-1"}]
---
apiVersion: apps/v1
kind: ControllerRevision
metadata: {name: pb-revision}
revision: 3
data: {spec: {template: {metadata: {labels: {app: pb}}}, nested: [1, 2.5, null, true]}}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: pb-sts}
spec:
  serviceName: pb-svc
  replicas: 0
  selector: {matchLabels: {app: pb-sts}}
  template:
    metadata: {labels: {app: pb-sts}}
    spec: {containers: [{name: c, image: memcached:1.6}]}
  volumeClaimTemplates:
  - metadata: {name: data}
    spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: pb-ds}
spec:
  selector: {matchLabels: {app: pb-ds}}
  updateStrategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: 25%, maxSurge: 0}}
  template:
    metadata: {labels: {app: pb-ds}}
    spec: {containers: [{name: c, image: memcached:1.6}], nodeSelector: {none: none}}
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: pb-cron}
spec:
  schedule: "*/5 * * * *"
  suspend: true
  jobTemplate:
    spec:
      template:
        spec: {restartPolicy: Never, containers: [{name: c, image: busybox, command: [sh, -c, "echo \"hi\""]}]}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: pb-pdb}
spec: {minAvailable: 50%, selector: {matchLabels: {app: pb}}}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: pb-netpol}
spec:
  podSelector: {matchLabels: {app: pb}}
  ingress: [{ports: [{port: 80}, {port: web, protocol: TCP}, {port: 3000, endPort: 3100}]}]
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: pb-ingress}
spec:
  rules:
  - host: pb.example.com
    http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: pb-svc, port: {number: 80}}}}]}
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: pb-hpa}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: StatefulSet, name: pb-sts}
  minReplicas: 1
  maxReplicas: 3
  metrics:
  - type: Resource
    resource: {name: cpu, target: {type: AverageValue, averageValue: 250m}}
---
apiVersion: v1
kind: LimitRange
metadata: {name: pb-limits}
spec: {limits: [{type: Container, default: {cpu: 200m}, max: {memory: 2Gi}}]}
---
apiVersion: v1
kind: ResourceQuota
metadata: {name: pb-quota}
spec: {hard: {pods: "10", requests.cpu: "4"}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: pb-pvc}
spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}, storageClassName: none}
---
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: pb-lease}
spec: {holderIdentity: pb, leaseDurationSeconds: 15, acquireTime: "2026-01-02T03:04:05.123456Z", renewTime: "2026-01-02T03:04:06.000001Z", leaseTransitions: 2}
---
apiVersion: v1
kind: Endpoints
metadata: {name: pb-manual}
subsets: [{addresses: [{ip: 10.0.0.1}], ports: [{port: 80, name: http}]}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: pb-slice, labels: {kubernetes.io/service-name: pb-manual}}
addressType: IPv4
endpoints: [{addresses: [10.0.0.1], conditions: {ready: true}}]
ports: [{name: http, port: 80, protocol: TCP}]
---
apiVersion: v1
kind: PodTemplate
metadata: {name: pb-template}
template: {spec: {containers: [{name: c, image: memcached:1.6}]}}
---
apiVersion: events.k8s.io/v1
kind: Event
metadata: {name: pb-event}
eventTime: "2026-01-02T03:04:05.654321Z"
reportingController: example.com/pb
reportingInstance: pb-1
action: Scale
reason: Scaled
type: Normal
note: "scaled to 3"
regarding: {kind: Pod, name: pb-pod, namespace: NAMESPACE}
"#;

/// Cluster-scoped fixtures, named per run.
fn cluster_fixtures(suffix: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: PersistentVolume
metadata: {{name: pb-pv-{suffix}}}
spec:
  capacity: {{storage: 1Gi}}
  accessModes: [ReadWriteOnce]
  hostPath: {{path: /tmp/pb, type: DirectoryOrCreate}}
  storageClassName: none
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {{name: pb-priority-{suffix}}}
value: -5
preemptionPolicy: Never
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {{name: pb-storage-{suffix}}}
provisioner: example.com/none
parameters: {{a: "1"}}
allowVolumeExpansion: false
---
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {{name: pb-ingress-class-{suffix}}}
spec: {{controller: example.com/ingress}}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: pb-policy-{suffix}}}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules: [{{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}}]
  validations: [{{expression: "object.metadata.name != 'forbidden'"}}]
"#
    )
}

/// JSON with every `null` member removed, and the `apiVersion` and `kind` of every object
/// that has `metadata`: what is left is what both forms must agree on. An object's type
/// (`TypeMeta`) has no protobuf field: the envelope carries the top object's, which JSON
/// list items lack, and an embedded object's (a StatefulSet's `volumeClaimTemplates`) is
/// filled in by the server for JSON only.
fn normalized(mut v: Value) -> Value {
    fn normalize(v: &mut Value) {
        match v {
            Value::Object(map) => {
                map.retain(|_, v| !v.is_null());
                if map.contains_key("metadata") {
                    map.remove("apiVersion");
                    map.remove("kind");
                }
                map.values_mut().for_each(normalize);
            }
            Value::Array(items) => items.iter_mut().for_each(normalize),
            _ => {}
        }
    }
    normalize(&mut v);
    v
}

/// Where two JSON values first differ.
fn first_difference(path: &str, a: &Value, b: &Value) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for key in x.keys().chain(y.keys()) {
                let (xa, yb) = (x.get(key), y.get(key));
                match (xa, yb) {
                    (Some(xa), Some(yb)) => {
                        if let Some(d) = first_difference(&format!("{path}.{key}"), xa, yb) {
                            return Some(d);
                        }
                    }
                    _ => return Some(format!("{path}.{key}: {xa:?} vs {yb:?}")),
                }
            }
            None
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (xa, yb))| first_difference(&format!("{path}[{i}]"), xa, yb)),
        _ if a == b => None,
        _ => Some(format!("{path}: {a} vs {b}")),
    }
}

/// Lists `K` both ways and checks that every object at the same resourceVersion in both
/// lists is the same object; returns how many were compared.
async fn same_as_json<K>(client: &Client, api: Api<Raw<K>>) -> usize
where
    K: k8s_openapi::Resource
        + DeserializeOwned
        + Serialize
        + PartialEq
        + Debug
        + Send
        + Sync
        + 'static,
    Raw<K>: WatchObject,
{
    let what = format!("{}/{}", K::API_VERSION, K::KIND);
    assert!(
        Raw::<K>::protobuf_kind().is_some(),
        "{what}: Raw has no protobuf form"
    );
    let path = api.collection_path();

    // The server does answer protobuf for what `Api<Raw<K>>` asks.
    let params = WatchParams {
        timeout_seconds: Some(1),
        ..WatchParams::default()
    };
    assert!(
        api.watch(&params).await.unwrap().is_protobuf(),
        "{what}: not protobuf"
    );

    let transcoded = api.list_all(&ListParams::default()).await.unwrap().items;
    let json: Value = serde_json::from_slice(&client.get_raw(&path).await.unwrap()).unwrap();
    let by_version: BTreeMap<String, Value> = json["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| {
            let rv = item["metadata"]["resourceVersion"].as_str().unwrap();
            (format!("{}/{rv}", item["metadata"]["uid"]), item.clone())
        })
        .collect();
    // Other tests create and delete objects meanwhile: the two lists need not match.
    assert!(!transcoded.is_empty(), "{what}: nothing transcoded");

    let mut compared = 0;
    for raw in &transcoded {
        use informer::Object;
        let key = format!(
            "\"{}\"/{}",
            raw.uid().unwrap(),
            raw.resource_version().unwrap()
        );
        let Some(from_json) = by_version.get(&key) else {
            continue; // changed between the two lists
        };
        let ours: Value = serde_json::from_str(raw.json()).unwrap();
        let (ours, theirs) = (normalized(ours), normalized(from_json.clone()));
        if let Some(diff) = first_difference("", &ours, &theirs) {
            panic!(
                "{what} {}: transcoded JSON differs from the server's at {diff}",
                raw.name()
            );
        }
        let typed: K = serde_json::from_value(from_json.clone()).unwrap();
        assert_eq!(raw.decode().unwrap(), typed, "{what} {}", raw.name());
        compared += 1;
    }
    compared
}

/// Runs [`same_as_json`] for each kind and collects what it compared.
macro_rules! compare_kinds {
    ($client:expr, $counts:expr, $scope:ident: $($kind:ty),* $(,)?) => {{
        $($counts.push((
            stringify!($kind),
            same_as_json::<$kind>($client, Api::$scope($client.clone())).await,
        ));)*
    }};
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn every_builtin_kind_transcodes_to_the_json_the_server_sends() {
    let kubectl = Kubectl::from_env();
    let ns = TestNamespace::create(&kubectl, "pb");
    let fixtures = FIXTURES.replace("NAMESPACE", &ns.name);
    kubectl
        .try_run(&["apply", "-n", &ns.name, "-f", "-"], Some(&fixtures))
        .unwrap_or_else(|e| panic!("{e}"));
    let suffix = ns.name.clone();
    kubectl
        .try_run(&["apply", "-f", "-"], Some(&cluster_fixtures(&suffix)))
        .unwrap_or_else(|e| panic!("{e}"));
    // A Deployment, so ReplicaSets and Pods with controller-set fields exist too.
    kubectl.run(&[
        "create",
        "deployment",
        "pb-deploy",
        "-n",
        &ns.name,
        "--image=memcached:1.6",
        "--replicas=2",
    ]);
    kubectl.run(&[
        "create",
        "job",
        "pb-job",
        "-n",
        &ns.name,
        "--image=busybox",
        "--",
        "true",
    ]);

    let client = client();
    let mut counts = Vec::new();
    compare_kinds!(&client, counts, all:
        ConfigMap, Secret, Pod, Service, Endpoints, ServiceAccount, Event, PodTemplate,
        LimitRange, ResourceQuota, PersistentVolumeClaim, Deployment, ReplicaSet, StatefulSet,
        DaemonSet, ControllerRevision, Job, CronJob, Lease, EventsV1, EndpointSlice,
        NetworkPolicy, Ingress, HorizontalPodAutoscaler, PodDisruptionBudget, Role, RoleBinding,
    );
    compare_kinds!(&client, counts, cluster:
        PersistentVolume, Namespace, Node, IngressClass, ClusterRole, ClusterRoleBinding,
        PriorityClass, StorageClass, FlowSchema, PriorityLevelConfiguration,
        ValidatingAdmissionPolicy,
    );
    let _ = kubectl.try_run(
        &["delete", "-f", "-", "--wait=false", "--ignore-not-found"],
        Some(&cluster_fixtures(&suffix)),
    );
    for (kind, compared) in &counts {
        assert!(*compared > 0, "no {kind} was compared: {counts:?}");
    }
    eprintln!("compared: {counts:?}");
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_raw_watch_list_runs_over_protobuf_to_its_bookmark() {
    let kubectl = Kubectl::from_env();
    let ns = TestNamespace::create(&kubectl, "pb-watch");
    for i in 0..3 {
        kubectl.run(&[
            "create",
            "configmap",
            &format!("cm-{i}"),
            "-n",
            &ns.name,
            &format!("--from-literal=size={i}"),
        ]);
    }
    let client = client();
    let api: Api<Raw<ConfigMap>> = Api::namespaced(client.clone(), &ns.name);
    let params = WatchParams {
        send_initial_events: true,
        bookmarks: true,
        timeout_seconds: Some(30),
        ..WatchParams::default()
    };
    let mut stream = api.watch(&params).await.unwrap();
    assert!(stream.is_protobuf(), "the server did not answer protobuf");
    let mut names = Vec::new();
    loop {
        match stream
            .next()
            .await
            .expect("the stream ended early")
            .unwrap()
        {
            WatchEvent::Added(cm) => {
                use informer::Object;
                let typed = cm.decode().unwrap();
                assert_eq!(typed.metadata.name.as_deref(), Some(cm.name()));
                names.push(cm.name().to_owned());
            }
            WatchEvent::Bookmark(b) if b.is_initial_events_end() => {
                assert!(!b.metadata.resource_version.is_empty());
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    names.sort();
    assert_eq!(names, ["cm-0", "cm-1", "cm-2", "kube-root-ca.crt"]);

    // A change after the initial events arrives as protobuf too.
    kubectl.run(&["label", "configmap", "cm-1", "-n", &ns.name, "changed=yes"]);
    loop {
        match stream
            .next()
            .await
            .expect("the stream ended early")
            .unwrap()
        {
            WatchEvent::Modified(cm) => {
                use informer::Object;
                assert_eq!(cm.label("changed").as_deref(), Some("yes"));
                break;
            }
            WatchEvent::Bookmark(_) => continue,
            other => panic!("unexpected {other:?}"),
        }
    }

    // A client told not to use protobuf watches and lists the same objects as JSON.
    let json_only = Client::new(
        support::cluster::config(),
        ClientOptions {
            protobuf: false,
            ..ClientOptions::default()
        },
    )
    .unwrap();
    let api: Api<Raw<ConfigMap>> = Api::namespaced(json_only, &ns.name);
    assert!(!api.watch(&params).await.unwrap().is_protobuf());
    assert_eq!(
        api.list(&ListParams::default()).await.unwrap().items.len(),
        4
    );
}
