//! The reconcile helpers that write: the finalizer flow, the status write with its
//! conditions, and `ops::apply_cached`. Against a scripted server, the exact requests each
//! path sends (and that the paths that should write nothing send nothing); against the real
//! cluster, that the optimistic lock holds, a deletion waits for the cleanup, an unchanged
//! status is not written, and each Deployment write lands as the path it took.
//!
//! The cluster tests' `Widget` CRD is shared by every run and left installed (each run's
//! objects go with its namespace), as `tests/crd.rs` does with its kind.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use controller_runtime::client::{DeleteParams, Error as ClientError};
use controller_runtime::prelude::*;
use controller_runtime::runtime::crd::is_established;
use controller_runtime::runtime::finalizer::has_finalizer;
use k8s_openapi::Resource;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Container, PodSpec, PodTemplateSpec};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use support::cluster::{client, create_namespace, delete_namespace};
use support::converge;
use support::scripted::Scripted;

// === the test kind ===

/// A widget: a kind with a status that holds conditions.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[resource(
    group = "helpers.runtime-test.example.com",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus"
)]
#[serde(rename_all = "camelCase")]
struct WidgetSpec {
    /// How many.
    size: i32,
}

/// What the controller saw of a widget.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct WidgetStatus {
    /// How many are ready.
    #[serde(default)]
    ready: i32,
    /// The generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    observed_generation: Option<i64>,
    /// The latest observations of the widget's state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "controller_runtime::runtime::crd::conditions_schema")]
    conditions: Vec<Condition>,
}

const FINALIZER: &str = "helpers.runtime-test.example.com/cleanup";

fn widget(ns: &str, name: &str) -> Widget {
    let mut w = Widget::new(name, WidgetSpec { size: 2 });
    w.metadata.namespace = Some(ns.to_owned());
    w
}

// === scripted ===

fn response(code: u16, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {code} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

const CONFLICT: &str = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","reason":"Conflict","code":409}"#;

/// Each request as its request line, content type and JSON body.
fn requests(server: &Scripted) -> Vec<(String, String, Value)> {
    server
        .requests()
        .iter()
        .map(|r| {
            let (head, body) = r.split_once("\n\n").unwrap();
            let line = head.lines().next().unwrap().to_owned();
            let content_type = head
                .lines()
                .find_map(|l| l.strip_prefix("content-type: "))
                .unwrap_or_default()
                .to_owned();
            let body = serde_json::from_str(body).unwrap_or(Value::Null);
            (line, content_type, body)
        })
        .collect()
}

fn configmap(finalizers: &[&str], deleting: bool) -> Arc<ConfigMap> {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("a".into());
    cm.metadata.namespace = Some("ns".into());
    cm.metadata.resource_version = Some("7".into());
    if !finalizers.is_empty() {
        cm.metadata.finalizers = Some(finalizers.iter().map(|f| (*f).to_owned()).collect());
    }
    if deleting {
        cm.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
    }
    Arc::new(cm)
}

const CM: &str = r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"8"}}"#;
const MERGE: &str = "application/merge-patch+json";

/// Runs the finalizer flow for `cm` against `server`, with a reconcile that records the
/// events it gets and returns `outcome`.
async fn flow(
    server: &Scripted,
    cm: Arc<ConfigMap>,
    outcome: Result<Action, ReconcileError>,
) -> (Result<Action, ReconcileError>, Vec<&'static str>) {
    let api = Api::<ConfigMap>::namespaced(server.client(), "ns");
    let mut seen = Vec::new();
    let result = finalizer(&api, "a/x", cm, async |event| {
        seen.push(match event {
            Event::Apply(_) => "apply",
            Event::Cleanup(_) => "cleanup",
        });
        outcome
    })
    .await;
    (result, seen)
}

#[tokio::test]
async fn a_live_object_gets_the_finalizer_with_its_resource_version_and_the_pass_ends() {
    let server = Scripted::start(vec![response(200, CM)]);
    let (result, seen) = flow(
        &server,
        configmap(&["other/y"], false),
        Ok(Action::requeue()),
    )
    .await;
    assert_eq!(result.unwrap(), Action::done());
    assert!(seen.is_empty(), "{seen:?}");
    assert_eq!(
        requests(&server),
        [(
            "PATCH /api/v1/namespaces/ns/configmaps/a HTTP/1.1".to_owned(),
            MERGE.to_owned(),
            json!({"metadata": {"finalizers": ["other/y", "a/x"], "resourceVersion": "7"}}),
        )]
    );
}

#[tokio::test]
async fn a_live_object_with_the_finalizer_is_applied_and_nothing_written() {
    let server = Scripted::start(vec![]);
    let later = Action::requeue_after(Duration::from_secs(5));
    let (result, seen) = flow(&server, configmap(&["a/x"], false), Ok(later)).await;
    assert_eq!(result.unwrap(), later);
    assert_eq!(seen, ["apply"]);
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn a_deleted_object_is_cleaned_up_then_released_keeping_other_finalizers() {
    let server = Scripted::start(vec![response(200, CM)]);
    let cm = configmap(&["a/x", "other/y"], true);
    let (result, seen) = flow(&server, cm, Ok(Action::done())).await;
    assert_eq!(result.unwrap(), Action::done());
    assert_eq!(seen, ["cleanup"]);
    assert_eq!(
        requests(&server),
        [(
            "PATCH /api/v1/namespaces/ns/configmaps/a HTTP/1.1".to_owned(),
            MERGE.to_owned(),
            json!({"metadata": {"finalizers": ["other/y"], "resourceVersion": "7"}}),
        )]
    );
}

#[tokio::test]
async fn a_failed_cleanup_keeps_the_finalizer() {
    let server = Scripted::start(vec![]);
    let failed = Err(ReconcileError::msg("the DNS record is still there"));
    let (result, seen) = flow(&server, configmap(&["a/x"], true), failed).await;
    assert_eq!(
        result.unwrap_err().to_string(),
        "the DNS record is still there"
    );
    assert_eq!(seen, ["cleanup"]);
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn a_deleted_object_without_the_finalizer_is_left_alone() {
    let server = Scripted::start(vec![]);
    let (result, seen) = flow(
        &server,
        configmap(&["other/y"], true),
        Ok(Action::requeue()),
    )
    .await;
    assert_eq!(result.unwrap(), Action::done());
    assert!(seen.is_empty());
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn a_conflict_on_the_finalizer_write_is_the_flows_error() {
    let server = Scripted::start(vec![response(409, CONFLICT)]);
    let (result, _) = flow(&server, configmap(&[], false), Ok(Action::done())).await;
    let error = result.unwrap_err();
    let source = error.source().downcast_ref::<ops::Error>().unwrap();
    assert!(source.is_conflict(), "{error}");
}

#[tokio::test]
async fn an_unchanged_status_is_not_written_and_a_changed_one_is_merge_patched() {
    let mut w = widget("ns", "w");
    w.status = Some(WidgetStatus {
        ready: 1,
        observed_generation: Some(3),
        conditions: Vec::new(),
    });
    let server = Scripted::start(vec![response(200, &serde_json::to_string(&w).unwrap())]);
    let api = Api::<Widget>::namespaced(server.client(), "ns");
    let same = w.status.clone().unwrap();
    assert!(!status::write(&api, &w, &same).await.unwrap());
    assert!(server.requests().is_empty());

    let new = WidgetStatus {
        ready: 2,
        observed_generation: None,
        conditions: Vec::new(),
    };
    assert!(status::write(&api, &w, &new).await.unwrap());
    assert_eq!(
        requests(&server),
        [(
            "PATCH /apis/helpers.runtime-test.example.com/v1/namespaces/ns/widgets/w/status HTTP/1.1"
                .to_owned(),
            MERGE.to_owned(),
            json!({"status": {"ready": 2, "observedGeneration": null}}),
        )]
    );
}

fn deployment(replicas: i32, image: &str) -> Deployment {
    let labels = Some([("app".to_owned(), "d".to_owned())].into());
    Deployment {
        metadata: ObjectMeta {
            name: Some("d".into()),
            namespace: Some("ns".into()),
            ..ObjectMeta::default()
        },
        spec: Some(DeploymentSpec {
            replicas: Some(replicas),
            selector: LabelSelector {
                match_labels: labels.clone(),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels,
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "c".into(),
                        image: Some(image.into()),
                        ..Container::default()
                    }],
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    }
}

/// `want` as the server would hold it: with a resourceVersion and a defaulted field.
fn stored(want: &Deployment, rv: &str) -> Deployment {
    let mut have = want.clone();
    have.metadata.resource_version = Some(rv.into());
    have.spec.as_mut().unwrap().revision_history_limit = Some(10);
    have
}

#[tokio::test]
async fn apply_cached_scales_by_an_update_and_patches_the_replicas_after_a_conflict() {
    let have = stored(&deployment(1, "a"), "5");
    let body = serde_json::to_string(&stored(&deployment(3, "a"), "6")).unwrap();
    let server = Scripted::start(vec![response(409, CONFLICT), response(200, &body)]);
    let api = Api::<Deployment>::namespaced(server.client(), "ns");
    let (written, result) = ops::apply_cached(&api, Some(&have), &deployment(3, "a"), "op")
        .await
        .unwrap();
    assert_eq!(result, ops::OperationResult::Updated);
    assert_eq!(written.spec.unwrap().replicas, Some(3));
    let sent = requests(&server);
    let (line, _, put) = &sent[0];
    assert_eq!(
        line,
        "PUT /apis/apps/v1/namespaces/ns/deployments/d?fieldManager=op HTTP/1.1"
    );
    // The cached copy, with the new replicas and its resourceVersion and defaults kept.
    let mut scaled = serde_json::to_value(&have).unwrap();
    scaled["spec"]["replicas"] = json!(3);
    assert_eq!(put, &scaled);
    assert_eq!(
        sent[1],
        (
            "PATCH /apis/apps/v1/namespaces/ns/deployments/d?fieldManager=op HTTP/1.1".to_owned(),
            MERGE.to_owned(),
            json!({"spec": {"replicas": 3}}),
        )
    );
    assert_eq!(sent.len(), 2);
}

#[tokio::test]
async fn apply_cached_writes_nothing_for_an_applied_object() {
    let server = Scripted::start(vec![]);
    let api = Api::<Deployment>::namespaced(server.client(), "ns");
    let have = stored(&deployment(2, "a"), "5");
    let (same, result) = ops::apply_cached(&api, Some(&have), &deployment(2, "a"), "op")
        .await
        .unwrap();
    assert_eq!(result, ops::OperationResult::Unchanged);
    assert_eq!(same.metadata.resource_version.as_deref(), Some("5"));
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn apply_cached_applies_a_change_inside_a_list_and_a_new_object() {
    let body = serde_json::to_string(&stored(&deployment(2, "b"), "6")).unwrap();
    let server = Scripted::start(vec![response(200, &body), response(201, &body)]);
    let api = Api::<Deployment>::namespaced(server.client(), "ns");
    let have = stored(&deployment(2, "a"), "5");
    let want = deployment(2, "b");
    let (_, result) = ops::apply_cached(&api, Some(&have), &want, "op")
        .await
        .unwrap();
    assert_eq!(result, ops::OperationResult::Updated);
    let (_, result) = ops::apply_cached(&api, None, &want, "op").await.unwrap();
    assert_eq!(result, ops::OperationResult::Created);
    let apply = (
        "PATCH /apis/apps/v1/namespaces/ns/deployments/d?fieldManager=op&force=true HTTP/1.1"
            .to_owned(),
        "application/apply-patch+yaml".to_owned(),
        serde_json::to_value(&want).unwrap(),
    );
    let create = (
        "POST /apis/apps/v1/namespaces/ns/deployments?fieldManager=op HTTP/1.1".to_owned(),
        "application/json".to_owned(),
        serde_json::to_value(&want).unwrap(),
    );
    assert_eq!(requests(&server), [apply, create]);
}

const ALREADY_EXISTS: &str = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","reason":"AlreadyExists","code":409}"#;

#[tokio::test]
async fn apply_cached_behind_its_own_create_reads_the_object_and_writes_no_more() {
    // The cache holds no Deployment yet, but the server does, as asked for.
    let body = serde_json::to_string(&stored(&deployment(2, "a"), "7")).unwrap();
    let server = Scripted::start(vec![response(409, ALREADY_EXISTS), response(200, &body)]);
    let api = Api::<Deployment>::namespaced(server.client(), "ns");
    let (live, result) = ops::apply_cached(&api, None, &deployment(2, "a"), "op")
        .await
        .unwrap();
    assert_eq!(result, ops::OperationResult::Unchanged);
    assert_eq!(live.metadata.resource_version.as_deref(), Some("7"));
    let requests = server.requests();
    let lines: Vec<&str> = requests.iter().filter_map(|r| r.lines().next()).collect();
    assert_eq!(
        lines,
        [
            "POST /apis/apps/v1/namespaces/ns/deployments?fieldManager=op HTTP/1.1",
            "GET /apis/apps/v1/namespaces/ns/deployments/d HTTP/1.1",
        ]
    );
}

// === on the cluster ===

/// Applies `Widget::crd()` (server-side, so a run with a changed schema updates it) and
/// waits until the kind is served.
async fn install_widget_crd(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::cluster(client.clone());
    let crd = Widget::crd();
    let name = crd.metadata.name.clone().unwrap();
    let apply = PatchParams::apply("reconcile-helpers-test").force();
    converge!("the Widget CRD applied", {
        match crds.get_opt(&name).await.unwrap() {
            // Terminating, left by an interrupted run: wait until it is gone.
            Some(c) if c.metadata.deletion_timestamp.is_some() => None,
            _ => Some(
                crds.patch(&name, &apply, &Patch::Apply(&crd))
                    .await
                    .unwrap(),
            ),
        }
    });
    converge!("the Widget CRD established", {
        is_established(&crds.get(&name).await.unwrap()).then_some(())
    });
    converge!("widgets served", {
        client.resolve(Widget::API_VERSION, Widget::KIND).await.ok()
    });
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn the_finalizer_flow_holds_a_deletion_until_its_cleanup_ran() {
    let client = client();
    install_widget_crd(&client).await;
    let ns = create_namespace(&client, "finalizer-flow").await;
    let api = Api::<Widget>::namespaced(client.clone(), &ns);
    let created = Arc::new(
        api.create(&PostParams::default(), &widget(&ns, "w"))
            .await
            .unwrap(),
    );
    let calls = AtomicU32::new(0);
    let count = async |_: Event<Widget>| {
        calls.fetch_add(1, Ordering::SeqCst);
        Ok::<_, ReconcileError>(Action::done())
    };

    // First pass: the finalizer is added, and nothing else runs.
    finalizer(&api, FINALIZER, created.clone(), &count)
        .await
        .unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    let held = api.get("w").await.unwrap();
    assert!(has_finalizer(&held, FINALIZER));

    // The optimistic lock: someone adds a finalizer of theirs; a flow that read the
    // widget before that (and before ours) is refused, and theirs stays.
    let theirs = json!({"metadata": {"finalizers": [FINALIZER, "example.com/theirs"]}});
    api.patch("w", &PatchParams::default(), &Patch::Merge(&theirs))
        .await
        .unwrap();
    let stale = finalizer(&api, FINALIZER, created, &count)
        .await
        .unwrap_err();
    let stale = stale.source().downcast_ref::<ops::Error>().unwrap();
    assert!(stale.is_conflict(), "{stale}");
    let fresh = Arc::new(api.get("w").await.unwrap());
    assert_eq!(
        fresh.metadata.finalizers.as_deref().unwrap(),
        [FINALIZER, "example.com/theirs"]
    );

    // A live widget that holds the finalizer is applied.
    let mut seen = Vec::new();
    let record = async |event| {
        seen.push(matches!(event, Event::Cleanup(_)));
        Ok::<_, ReconcileError>(Action::done())
    };
    finalizer(&api, FINALIZER, fresh, record).await.unwrap();
    assert_eq!(seen, [false]);

    // Deleted: held until the cleanup ran, then released with the other finalizer kept.
    api.delete("w", &DeleteParams::default()).await.unwrap();
    let deleting = Arc::new(api.get("w").await.unwrap());
    assert!(deleting.metadata.deletion_timestamp.is_some());
    let failed = async |_| Err::<Action, _>(ReconcileError::msg("not yet"));
    finalizer(&api, FINALIZER, deleting.clone(), failed)
        .await
        .unwrap_err();
    assert!(has_finalizer(&api.get("w").await.unwrap(), FINALIZER));
    let mut seen = Vec::new();
    let record = async |event| {
        seen.push(matches!(event, Event::Cleanup(_)));
        Ok::<_, ReconcileError>(Action::done())
    };
    finalizer(&api, FINALIZER, deleting, record).await.unwrap();
    assert_eq!(seen, [true]);
    let left = api.get("w").await.unwrap();
    assert_eq!(
        left.metadata.finalizers.as_deref().unwrap(),
        ["example.com/theirs"]
    );

    // Once theirs goes too, the deletion completes.
    let none = json!({"metadata": {"finalizers": null}});
    api.patch("w", &PatchParams::default(), &Patch::Merge(&none))
        .await
        .unwrap();
    converge!("the widget is gone", {
        api.get_opt("w").await.unwrap().is_none().then_some(())
    });
    delete_namespace(&client, &ns).await;
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_status_with_conditions_is_written_once_and_only_when_it_changes() {
    let client = client();
    install_widget_crd(&client).await;
    let ns = create_namespace(&client, "status-write").await;
    let api = Api::<Widget>::namespaced(client.clone(), &ns);
    let w = api
        .create(&PostParams::default(), &widget(&ns, "w"))
        .await
        .unwrap();

    let mut status = WidgetStatus {
        ready: 1,
        observed_generation: w.metadata.generation,
        ..WidgetStatus::default()
    };
    let ready = conditions::new("Available", false, "NotReady", "1 of 2 ready");
    conditions::set(&mut status.conditions, ready);
    assert!(status::write(&api, &w, &status).await.unwrap());
    let written = api.get("w").await.unwrap();
    assert_eq!(written.status.as_ref(), Some(&status));
    assert_eq!(written.spec, w.spec);

    // The same status again, from the object as written: no write.
    let mut again = written.status.clone().unwrap();
    let same = conditions::new("Available", false, "NotReady", "1 of 2 ready");
    assert!(!conditions::set(&mut again.conditions, same));
    assert!(!status::write(&api, &written, &again).await.unwrap());
    let unchanged = api.get("w").await.unwrap();
    assert_eq!(
        unchanged.metadata.resource_version,
        written.metadata.resource_version
    );

    // Available now, and the observed generation dropped: both land, the transition time
    // is the one set here, and the dropped field is gone from the server's copy.
    let since = Timestamp::from_second(1_700_000_000).unwrap();
    let available = Condition {
        last_transition_time: Time(since),
        ..conditions::new("Available", true, "Ready", "2 of 2 ready")
    };
    assert!(conditions::set(&mut again.conditions, available));
    again.ready = 2;
    again.observed_generation = None;
    assert!(status::write(&api, &unchanged, &again).await.unwrap());
    let last = api.get("w").await.unwrap().status.unwrap();
    assert_eq!((last.ready, last.observed_generation), (2, None));
    assert!(conditions::is_true(&last.conditions, "Available"));
    assert_eq!(last.conditions[0].last_transition_time, Time(since));
    assert_eq!(last.conditions.len(), 1);
    delete_namespace(&client, &ns).await;
}

/// The managers and operations recorded in `d`'s managedFields.
fn managers(d: &Deployment) -> Vec<(String, String)> {
    let fields = d.metadata.managed_fields.iter().flatten();
    fields
        .map(|f| {
            let name = f.manager.clone().unwrap_or_default();
            (name, f.operation.clone().unwrap_or_default())
        })
        .collect()
}

/// The fields `helper` owns in `d` through `operation` (`Apply` or `Update`), as JSON text.
fn owned(d: &Deployment, operation: &str) -> String {
    let fields = d.metadata.managed_fields.iter().flatten();
    let mine = fields.filter(|f| {
        f.manager.as_deref() == Some("helper") && f.operation.as_deref() == Some(operation)
    });
    mine.filter_map(|f| f.fields_v1.as_ref())
        .map(|f| f.0.to_string())
        .collect()
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn apply_cached_creates_skips_scales_by_update_and_applies_list_changes() {
    let client = client();
    let ns = create_namespace(&client, "apply-cached").await;
    let api = Api::<Deployment>::namespaced(client.clone(), &ns);
    let want = |replicas, image| {
        let mut d = deployment(replicas, image);
        d.metadata.namespace = Some(ns.clone());
        d
    };
    let (created, result) = ops::apply_cached(&api, None, &want(1, "a"), "helper")
        .await
        .unwrap();
    assert_eq!(result, ops::OperationResult::Created);
    assert_eq!(managers(&created), [("helper".into(), "Update".into())]);
    // Behind its own create (the cache empty still): no second create, and no spec write
    // (the generation stays; the resourceVersion may move with the controller's status).
    let (again, result) = ops::apply_cached(&api, None, &want(1, "a"), "helper")
        .await
        .unwrap();
    assert_eq!(result, ops::OperationResult::Unchanged);
    assert_eq!(
        (&again.metadata.uid, again.metadata.generation),
        (&created.metadata.uid, created.metadata.generation)
    );

    // The server's copy, with its defaults and the controllers' status, holds everything
    // asked for: nothing is sent (the scripted tests show no request on this path).
    let now = api.get("d").await.unwrap();
    let (same, result) = ops::apply_cached(&api, Some(&now), &want(1, "a"), "helper")
        .await
        .unwrap();
    assert_eq!(result, ops::OperationResult::Unchanged);
    assert_eq!(
        same.metadata.resource_version,
        now.metadata.resource_version
    );

    // A scale is an update.
    let (scaled, result) = ops::apply_cached(&api, Some(&now), &want(3, "a"), "helper")
        .await
        .unwrap();
    assert_eq!(result, ops::OperationResult::Updated);
    assert_eq!(scaled.spec.as_ref().unwrap().replicas, Some(3));
    assert!(
        owned(&scaled, "Update").contains("f:replicas"),
        "{:?}",
        managers(&scaled)
    );

    // From a stale copy, the update meets 409 and a patch of the replicas lands, keeping
    // what was written in between.
    let noted = json!({"metadata": {"annotations": {"noted": "by-hand"}}});
    api.patch("d", &PatchParams::default(), &Patch::Merge(&noted))
        .await
        .unwrap();
    let (patched, _) = ops::apply_cached(&api, Some(&scaled), &want(2, "a"), "helper")
        .await
        .unwrap();
    assert_eq!(patched.spec.as_ref().unwrap().replicas, Some(2));
    let annotations = patched.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations.get("noted").map(String::as_str),
        Some("by-hand")
    );

    // A new image is inside the containers list: an apply, which owns it.
    let (applied, result) = ops::apply_cached(&api, Some(&patched), &want(2, "b"), "helper")
        .await
        .unwrap();
    assert_eq!(result, ops::OperationResult::Updated);
    let pod = applied
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap();
    assert_eq!(pod.containers[0].image.as_deref(), Some("b"));
    assert_eq!(applied.spec.as_ref().unwrap().replicas, Some(2));
    assert!(
        owned(&applied, "Apply").contains("f:image"),
        "{:?}",
        managers(&applied)
    );
    delete_namespace(&client, &ns).await;
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn apply_cached_reports_a_refused_write() {
    let client = client();
    let ns = create_namespace(&client, "apply-cached-refused").await;
    let api = Api::<Deployment>::namespaced(client.clone(), &ns);
    let mut bad = deployment(1, "a");
    bad.metadata.namespace = Some(ns.clone());
    bad.spec.as_mut().unwrap().selector = LabelSelector::default();
    let error = ops::apply_cached(&api, None, &bad, "helper")
        .await
        .unwrap_err();
    assert!(
        matches!(&error, ops::Error::Client(ClientError::Api(s)) if s.code == Some(422)),
        "{error}"
    );
    delete_namespace(&client, &ns).await;
}
