//! The reconciler's helpers against the real local cluster: create-or-update (and proof that
//! an unchanged object is not written), retry on a real conflict, server-side apply, status
//! writes, controller references the garbage collector follows, and the event recorder's
//! series.

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use controller_runtime::client::{
    Api, Client, ClientOptions, DeleteParams, ListParams, Patch, PatchParams, PostParams,
};
use controller_runtime::config::{Auth, Secret};
use controller_runtime::runtime::events::{EventType, Recorder, object_reference};
use controller_runtime::runtime::ops::{self, Backoff, OperationResult};
use controller_runtime::runtime::owner::{self, controller_of, set_controller_reference};
use http::Method;
use k8s_openapi::api::core::v1::{
    ConfigMap, LoadBalancerIngress, LoadBalancerStatus, Namespace, Service, ServiceAccount,
    ServicePort, ServiceSpec, ServiceStatus,
};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::json;
use support::cluster::{client, config, create_namespace, delete_namespace};
use support::{CONVERGE, wait_until};

// === fixtures ===

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        ..ObjectMeta::default()
    }
}

fn data(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
    Some(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    )
}

/// A mutate function setting `size` in a ConfigMap's data.
fn set_size(size: &'static str) -> impl FnOnce(&mut ConfigMap) -> Result<(), ops::BoxError> {
    move |cm| {
        cm.data
            .get_or_insert_with(BTreeMap::new)
            .insert("size".into(), size.into());
        Ok(())
    }
}

/// A client that may only get, list and watch ConfigMaps in `namespace`: a service account
/// bound to such a Role, authenticating with a token from the TokenRequest API. Any write
/// it attempts is refused with 403, which proves a helper did not write.
async fn read_only_client(admin: &Client, namespace: &str) -> Client {
    let sa = ServiceAccount {
        metadata: meta("reader"),
        ..ServiceAccount::default()
    };
    Api::<ServiceAccount>::namespaced(admin.clone(), namespace)
        .create(&PostParams::default(), &sa)
        .await
        .unwrap();
    let role = Role {
        metadata: meta("configmap-reader"),
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["configmaps".into()]),
            verbs: vec!["get".into(), "list".into(), "watch".into()],
            ..PolicyRule::default()
        }]),
    };
    Api::<Role>::namespaced(admin.clone(), namespace)
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding = RoleBinding {
        metadata: meta("reader"),
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name: "configmap-reader".into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: "reader".into(),
            namespace: Some(namespace.to_owned()),
            ..Subject::default()
        }]),
    };
    Api::<RoleBinding>::namespaced(admin.clone(), namespace)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();

    let request = json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": { "expirationSeconds": 600 },
    });
    let answer: serde_json::Value = admin
        .request(
            Method::POST,
            &format!("/api/v1/namespaces/{namespace}/serviceaccounts/reader/token"),
            Some(serde_json::to_vec(&request).unwrap()),
        )
        .await
        .unwrap();
    let token = answer["status"]["token"].as_str().unwrap().to_owned();
    let mut config = config();
    config.identity = None;
    config.auth = Auth::Bearer(Secret::new(token));
    let reader = Client::new(config, ClientOptions::default()).unwrap();

    // The authorizer learns of new bindings through its informers: wait until it has.
    let configmaps = Api::<ConfigMap>::namespaced(reader.clone(), namespace);
    let begin = tokio::time::Instant::now();
    loop {
        match configmaps.list(&ListParams::default()).await {
            Ok(_) => return reader,
            Err(e) if e.is_forbidden() && begin.elapsed() < CONVERGE => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("the read-only client cannot list: {e}"),
        }
    }
}

/// The Events in `namespace` about the object with `uid`.
async fn events_about(client: &Client, namespace: &str, uid: &str) -> Vec<Event> {
    Api::<Event>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.uid.as_deref()) == Some(uid))
        .collect()
}

async fn configmap(client: &Client, namespace: &str, name: &str) -> ConfigMap {
    let cm = ConfigMap {
        metadata: meta(name),
        data: data(&[("k", "v")]),
        ..ConfigMap::default()
    };
    Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap()
}

// === create_or_update ===

#[tokio::test]
#[ignore = "needs cluster"]
async fn create_or_update_creates_then_skips_the_write_then_updates() {
    let client = client();
    let ns = create_namespace(&client, "rt-cou").await;
    let api = Api::<ConfigMap>::namespaced(client.clone(), &ns);

    let (created, result) = ops::create_or_update(&api, "settings", set_size("1"))
        .await
        .unwrap();
    assert_eq!(result, OperationResult::Created);
    assert_eq!(created.metadata.namespace.as_deref(), Some(ns.as_str()));
    assert_eq!(created.data, data(&[("size", "1")]));
    let rv = created.metadata.resource_version.clone();

    // Through a client that may not write: an unchanged object must not be written.
    let reader = read_only_client(&client, &ns).await;
    let read_only = Api::<ConfigMap>::namespaced(reader, &ns);
    let (same, result) = ops::create_or_update(&read_only, "settings", set_size("1"))
        .await
        .unwrap();
    assert_eq!(result, OperationResult::Unchanged);
    assert_eq!(same.metadata.resource_version, rv);
    // The same client is refused as soon as there is something to write.
    let refused = ops::create_or_update(&read_only, "settings", set_size("2"))
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, ops::Error::Client(e) if e.is_forbidden()),
        "{refused}"
    );

    let (updated, result) = ops::create_or_update(&api, "settings", set_size("2"))
        .await
        .unwrap();
    assert_eq!(result, OperationResult::Updated);
    assert_ne!(updated.metadata.resource_version, rv);
    let stored = api.get("settings").await.unwrap();
    assert_eq!(stored.data, data(&[("size", "2")]));
    assert_eq!(
        stored.metadata.resource_version,
        updated.metadata.resource_version
    );

    delete_namespace(&client, &ns).await;
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn create_or_update_refuses_a_rename_and_writes_nothing() {
    let client = client();
    let ns = create_namespace(&client, "rt-cou-key").await;
    let api = Api::<ConfigMap>::namespaced(client.clone(), &ns);

    let err = ops::create_or_update(&api, "settings", |cm: &mut ConfigMap| {
        cm.metadata.name = Some("elsewhere".into());
        Ok(())
    })
    .await
    .unwrap_err();
    assert!(matches!(err, ops::Error::KeyChanged { .. }), "{err}");
    let err = ops::create_or_update(&api, "settings", |_: &mut ConfigMap| {
        Err("no size known yet".into())
    })
    .await
    .unwrap_err();
    assert!(matches!(err, ops::Error::Mutate(_)), "{err}");
    assert!(api.get_opt("settings").await.unwrap().is_none());
    assert!(api.get_opt("elsewhere").await.unwrap().is_none());

    delete_namespace(&client, &ns).await;
}

// === retry_on_conflict ===

#[tokio::test]
#[ignore = "needs cluster"]
async fn retry_on_conflict_recovers_from_a_concurrent_write() {
    let client = client();
    let ns = create_namespace(&client, "rt-retry").await;
    let api = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    configmap(&client, &ns, "shared").await;

    let attempts = AtomicU32::new(0);
    let conflicts = AtomicU32::new(0);
    let written = ops::retry_on_conflict(Backoff::default(), || async {
        let attempt = attempts.fetch_add(1, Ordering::SeqCst);
        let mut ours = api.get("shared").await?;
        if attempt == 0 {
            // Another writer gets in between our read and our write.
            let mut theirs = ours.clone();
            theirs
                .data
                .get_or_insert_with(BTreeMap::new)
                .insert("theirs".into(), "1".into());
            api.replace("shared", &PostParams::default(), &theirs)
                .await?;
        }
        ours.data
            .get_or_insert_with(BTreeMap::new)
            .insert("ours".into(), "1".into());
        let result = api.replace("shared", &PostParams::default(), &ours).await;
        if let Err(e) = &result
            && e.is_conflict()
        {
            conflicts.fetch_add(1, Ordering::SeqCst);
        }
        result
    })
    .await
    .unwrap();

    assert_eq!(attempts.load(Ordering::SeqCst), 2);
    assert_eq!(conflicts.load(Ordering::SeqCst), 1);
    // Neither write is lost.
    assert_eq!(
        written.data,
        data(&[("k", "v"), ("ours", "1"), ("theirs", "1")])
    );

    delete_namespace(&client, &ns).await;
}

// === server-side apply ===

#[tokio::test]
#[ignore = "needs cluster"]
async fn apply_creates_reapplies_idempotently_and_takes_fields_back() {
    let client = client();
    let ns = create_namespace(&client, "rt-apply").await;
    let api = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    let desired = ConfigMap {
        metadata: meta("applied"),
        data: data(&[("a", "1")]),
        ..ConfigMap::default()
    };

    let created = ops::apply(&api, &desired, "helpers-test").await.unwrap();
    assert_eq!(created.data, data(&[("a", "1")]));
    let managers: Vec<_> = created
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .map(|m| (m.manager.as_deref(), m.operation.as_deref()))
        .collect();
    assert_eq!(managers, [(Some("helpers-test"), Some("Apply"))]);

    let again = ops::apply(&api, &desired, "helpers-test").await.unwrap();
    assert_eq!(
        again.metadata.resource_version,
        created.metadata.resource_version
    );

    // Another manager changes our field; a forced apply takes it back.
    let intruder = PatchParams {
        field_manager: Some("intruder".into()),
        ..PatchParams::default()
    };
    api.patch(
        "applied",
        &intruder,
        &Patch::Merge(json!({"data": {"a": "2"}})),
    )
    .await
    .unwrap();
    let back = ops::apply(&api, &desired, "helpers-test").await.unwrap();
    assert_eq!(back.data, data(&[("a", "1")]));

    // A field we applied before and leave out now is removed.
    let next = ConfigMap {
        data: data(&[("b", "2")]),
        ..desired.clone()
    };
    let pruned = ops::apply(&api, &next, "helpers-test").await.unwrap();
    assert_eq!(pruned.data, data(&[("b", "2")]));

    delete_namespace(&client, &ns).await;
}

// === status ===

#[tokio::test]
#[ignore = "needs cluster"]
async fn status_helpers_write_the_status_and_nothing_else() {
    let client = client();
    let ns = create_namespace(&client, "rt-status").await;
    let api = Api::<Service>::namespaced(client.clone(), &ns);
    let service = Service {
        metadata: meta("front"),
        spec: Some(ServiceSpec {
            type_: Some("LoadBalancer".into()),
            ports: Some(vec![ServicePort {
                port: 80,
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    };
    let mut stored = api.create(&PostParams::default(), &service).await.unwrap();
    let ingress = |ip: &str| ServiceStatus {
        load_balancer: Some(LoadBalancerStatus {
            ingress: Some(vec![LoadBalancerIngress {
                ip: Some(ip.into()),
                ..LoadBalancerIngress::default()
            }]),
        }),
        ..ServiceStatus::default()
    };
    let ip_of = |s: &Service| {
        s.status
            .as_ref()
            .unwrap()
            .load_balancer
            .as_ref()
            .unwrap()
            .ingress
            .as_ref()
            .unwrap()[0]
            .ip
            .clone()
            .unwrap()
    };

    // A status update ignores the spec change that rides along.
    stored.status = Some(ingress("192.0.2.10"));
    stored.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].port = 81;
    let updated = ops::update_status(&api, &stored).await.unwrap();
    assert_eq!(ip_of(&updated), "192.0.2.10");
    let now = api.get("front").await.unwrap();
    assert_eq!(ip_of(&now), "192.0.2.10");
    assert_eq!(now.spec.unwrap().ports.unwrap()[0].port, 80);

    // Updating from a stale copy is a conflict.
    let stale = ops::update_status(&api, &stored).await.unwrap_err();
    assert!(stale.is_conflict(), "{stale}");

    let patched = ops::patch_status(
        &api,
        "front",
        &json!({"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.11"}]}}}),
    )
    .await
    .unwrap();
    assert_eq!(ip_of(&patched), "192.0.2.11");

    let status_only = Service {
        metadata: meta("front"),
        status: Some(ingress("192.0.2.12")),
        ..Service::default()
    };
    let applied = ops::apply_status(&api, &status_only, "helpers-status")
        .await
        .unwrap();
    assert_eq!(ip_of(&applied), "192.0.2.12");
    assert_eq!(applied.spec.unwrap().ports.unwrap()[0].port, 80);

    delete_namespace(&client, &ns).await;
}

// === owner references ===

#[tokio::test]
#[ignore = "needs cluster"]
async fn controller_reference_lets_the_garbage_collector_delete_dependents() {
    let client = client();
    let ns = create_namespace(&client, "rt-owner").await;
    let api = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    let owner = configmap(&client, &ns, "owner").await;
    let other = configmap(&client, &ns, "other").await;

    let mut dependent = ConfigMap {
        metadata: ObjectMeta {
            namespace: Some(ns.clone()),
            ..meta("dependent")
        },
        ..ConfigMap::default()
    };
    set_controller_reference(&owner, &mut dependent).unwrap();
    let mut stored = api
        .create(&PostParams::default(), &dependent)
        .await
        .unwrap();
    let reference = controller_of(&stored.metadata).unwrap();
    assert_eq!(reference.uid, owner.metadata.uid.clone().unwrap());
    assert_eq!(reference.block_owner_deletion, Some(true));

    // A second controller is refused; the owner itself again changes nothing.
    let err = set_controller_reference(&other, &mut stored).unwrap_err();
    assert!(matches!(err, owner::Error::AlreadyOwned { .. }), "{err}");
    let before = stored.clone();
    set_controller_reference(&owner, &mut stored).unwrap();
    assert_eq!(stored, before);

    api.delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    let begin = tokio::time::Instant::now();
    while api.get_opt("dependent").await.unwrap().is_some() {
        assert!(
            begin.elapsed() < CONVERGE,
            "the garbage collector never deleted the dependent"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(api.get_opt("other").await.unwrap().is_some());

    delete_namespace(&client, &ns).await;
}

// === events ===

#[tokio::test]
#[ignore = "needs cluster"]
async fn repeated_events_fold_into_one_series() {
    let client = client();
    let ns = create_namespace(&client, "rt-events").await;
    let cm = configmap(&client, &ns, "watched").await;
    let uid = cm.metadata.uid.clone().unwrap();
    let recorder = Recorder::new(client.clone(), "memcached-controller", "memcached-0").unwrap();
    let regarding = object_reference(&cm);

    for _ in 0..3 {
        recorder
            .event(
                &regarding,
                EventType::Normal,
                "Synced",
                "Sync",
                "synced the settings",
            )
            .await
            .unwrap();
    }
    // The first repeat is written at once; the second waits for the flush interval.
    let events = events_about(&client, &ns, &uid).await;
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(events[0].series.as_ref().unwrap().count, 2);
    recorder.flush().await.unwrap();
    let events = events_about(&client, &ns, &uid).await;
    assert_eq!(events.len(), 1, "{events:#?}");
    let event = &events[0];
    let name = event.metadata.name.as_deref().unwrap();
    let (prefix, stamp) = name.rsplit_once('.').unwrap();
    assert_eq!(prefix, "watched");
    assert_eq!(stamp.len(), 16);
    let series = event.series.as_ref().unwrap();
    assert_eq!(series.count, 3);
    assert!(series.last_observed_time > *event.event_time.as_ref().unwrap());
    assert_eq!(event.type_.as_deref(), Some("Normal"));
    assert_eq!(event.reason.as_deref(), Some("Synced"));
    assert_eq!(event.action.as_deref(), Some("Sync"));
    assert_eq!(event.note.as_deref(), Some("synced the settings"));
    assert_eq!(
        event.reporting_controller.as_deref(),
        Some("memcached-controller")
    );
    assert_eq!(event.reporting_instance.as_deref(), Some("memcached-0"));
    let r = event.regarding.as_ref().unwrap();
    assert_eq!(r.kind.as_deref(), Some("ConfigMap"));
    assert_eq!(r.name.as_deref(), Some("watched"));
    assert_eq!(r.namespace.as_deref(), Some(ns.as_str()));

    // Another reason is another event; a long note is cut to fit.
    recorder
        .event(
            &regarding,
            EventType::Warning,
            "SyncFailed",
            "Sync",
            "x".repeat(5000),
        )
        .await
        .unwrap();
    let mut events = events_about(&client, &ns, &uid).await;
    assert_eq!(events.len(), 2, "{events:#?}");
    events.retain(|e| e.reason.as_deref() == Some("SyncFailed"));
    assert_eq!(events[0].type_.as_deref(), Some("Warning"));
    assert_eq!(events[0].series, None);
    assert_eq!(events[0].note.as_ref().unwrap().len(), 1024);

    delete_namespace(&client, &ns).await;
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_series_count_waiting_for_its_interval_is_written_when_it_is_up() {
    let client = client();
    let ns = create_namespace(&client, "rt-events-flush").await;
    let cm = configmap(&client, &ns, "watched").await;
    let uid = cm.metadata.uid.clone().unwrap();
    let recorder = Recorder::new(client.clone(), "memcached-controller", "memcached-0")
        .unwrap()
        .with_flush_interval(Duration::from_millis(300));
    let regarding = object_reference(&cm);
    for _ in 0..5 {
        recorder
            .event(&regarding, EventType::Normal, "Synced", "Sync", "ok")
            .await
            .unwrap();
    }
    // Nothing else writes: the spawned flush brings the count from 2 to 5.
    wait_until("the series count reaches 5", CONVERGE, async || {
        let events = events_about(&client, &ns, &uid).await;
        assert_eq!(events.len(), 1, "{events:#?}");
        let count = events[0].series.as_ref().map_or(1, |s| s.count);
        assert!((2..=5).contains(&count), "{events:#?}");
        if count == 5 {
            Ok(())
        } else {
            Err(format!("count {count}"))
        }
    })
    .await;
    delete_namespace(&client, &ns).await;
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_series_whose_event_was_deleted_starts_again() {
    let client = client();
    let ns = create_namespace(&client, "rt-events-gone").await;
    let cm = configmap(&client, &ns, "watched").await;
    let uid = cm.metadata.uid.clone().unwrap();
    // Every repeat written at once, so the third meets the deleted Event.
    let recorder = Recorder::new(client.clone(), "memcached-controller", "memcached-0")
        .unwrap()
        .with_flush_interval(Duration::ZERO);
    let regarding = object_reference(&cm);
    let record = || recorder.event(&regarding, EventType::Normal, "Synced", "Sync", "ok");

    record().await.unwrap();
    record().await.unwrap();
    let first = events_about(&client, &ns, &uid).await.remove(0);
    let first_name = first.metadata.name.unwrap();
    Api::<Event>::namespaced(client.clone(), &ns)
        .delete(&first_name, &DeleteParams::default())
        .await
        .unwrap();

    record().await.unwrap();
    let events = events_about(&client, &ns, &uid).await;
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_ne!(
        events[0].metadata.name.as_deref(),
        Some(first_name.as_str())
    );
    assert_eq!(events[0].series, None);

    delete_namespace(&client, &ns).await;
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn events_about_cluster_scoped_objects_go_to_default() {
    let client = client();
    let ns = create_namespace(&client, "rt-events-cluster").await;
    let namespace = Api::<Namespace>::cluster(client.clone())
        .get(&ns)
        .await
        .unwrap();
    let uid = namespace.metadata.uid.clone().unwrap();
    let recorder = Recorder::new(client.clone(), "example.com/helpers", "helpers-0").unwrap();

    recorder
        .event(
            &object_reference(&namespace),
            EventType::Normal,
            "Noticed",
            "Inspect",
            "",
        )
        .await
        .unwrap();
    let events = events_about(&client, "default", &uid).await;
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(events[0].note, None);
    Api::<Event>::namespaced(client.clone(), "default")
        .delete(
            events[0].metadata.name.as_deref().unwrap(),
            &DeleteParams::default(),
        )
        .await
        .unwrap();

    delete_namespace(&client, &ns).await;
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn publish_records_in_the_background() {
    let client = client();
    let ns = create_namespace(&client, "rt-events-publish").await;
    let cm = configmap(&client, &ns, "watched").await;
    let uid = cm.metadata.uid.clone().unwrap();
    let recorder = Recorder::new(client.clone(), "memcached-controller", "memcached-0").unwrap();

    recorder.publish(
        object_reference(&cm),
        EventType::Normal,
        "Synced",
        "Sync",
        "from a task",
    );
    // An invalid event is logged, not returned: nothing to wait for.
    recorder.publish(object_reference(&cm), EventType::Normal, "", "Sync", "");

    let begin = tokio::time::Instant::now();
    loop {
        let events = events_about(&client, &ns, &uid).await;
        if let [event] = events.as_slice() {
            assert_eq!(event.note.as_deref(), Some("from a task"));
            break;
        }
        assert!(
            begin.elapsed() < CONVERGE,
            "the published event never appeared: {events:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    delete_namespace(&client, &ns).await;
}
