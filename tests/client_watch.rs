//! Watches against the real local cluster: create, update and delete in order, bookmarks and
//! the initial-events-end bookmark, and 410 Gone for a compacted resourceVersion (a watch
//! and an exact list). Each test runs under every way of authenticating
//! (`support::client_suite`).

mod support;

use controller_runtime::client::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, VersionMatch, WatchEvent,
    WatchParams,
};
use k8s_openapi::api::core::v1::{ConfigMap, PodTemplate};
use serde_json::json;
use support::client_suite::{
    AuthMode, client, configmap, current_version, data_of, namespace, next_event, next_events,
    under_every_auth,
};
use support::cluster::{compact_etcd, template};

#[tokio::test]
#[ignore = "needs cluster"]
async fn watch_sees_create_update_and_delete_in_order_under_every_authentication() {
    under_every_auth(watch_in_order).await;
}

async fn watch_in_order(mode: AuthMode) {
    let client = client(mode);
    let ns = namespace(&client, "watch").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let rv = current_version(&api).await;
    let mut stream = api
        .watch(&WatchParams::default().from_version(&rv).timeout(120))
        .await
        .unwrap();

    api.create(&PostParams::default(), &configmap("w", &[("v", "1")]))
        .await
        .unwrap();
    api.patch(
        "w",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"v": "2"}})),
    )
    .await
    .unwrap();
    api.delete("w", &DeleteParams::default()).await.unwrap();

    // The namespace's kube-root-ca.crt may be published meanwhile; follow "w" only.
    let seen = next_events(&mut stream, 3, |ty, cm: &ConfigMap| {
        (cm.metadata.name.as_deref() == Some("w")).then(|| format!("{ty} {:?}", data_of(cm, "v")))
    })
    .await;
    assert_eq!(
        seen,
        [
            r#"ADDED Some("1")"#,
            r#"MODIFIED Some("2")"#,
            r#"DELETED Some("2")"#
        ]
    );
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn bookmarks_arrive_and_initial_events_end_with_their_bookmark() {
    under_every_auth(bookmarks).await;
}

async fn bookmarks(mode: AuthMode) {
    let client = client(mode);
    let ns = namespace(&client, "bookmark").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    api.create(&PostParams::default(), &configmap("existing", &[]))
        .await
        .unwrap();

    // WatchList: the current state as ADDED events, then the initial-events-end bookmark.
    let mut stream = api
        .watch(&WatchParams::default().initial_events().timeout(60))
        .await
        .unwrap();
    let mut added = Vec::new();
    loop {
        match next_event(&mut stream).await {
            Some(Ok(WatchEvent::Added(cm))) => added.push(cm.metadata.name.unwrap()),
            Some(Ok(WatchEvent::Bookmark(b))) if b.is_initial_events_end() => {
                assert!(!b.metadata.resource_version.is_empty());
                break;
            }
            Some(Ok(WatchEvent::Bookmark(_))) => {}
            other => panic!("before the initial-events-end bookmark: {other:?}"),
        }
    }
    added.sort();
    assert_eq!(added, ["existing", "kube-root-ca.crt"]);

    // A bookmark tells a watcher the collection moved on when none of its own objects
    // changed: a change in another namespace advances the version this watch reports.
    let rv = current_version(&api).await;
    let mut stream = api
        .watch(&WatchParams::default().from_version(&rv).timeout(5))
        .await
        .unwrap();
    let elsewhere = namespace(&client, "bookmark-elsewhere").await;
    Api::<ConfigMap>::namespaced(client.clone(), &elsewhere.name)
        .create(&PostParams::default(), &configmap("unrelated", &[]))
        .await
        .unwrap();
    let mut bookmarks = Vec::new();
    while let Some(ev) = next_event(&mut stream).await {
        match ev.unwrap() {
            WatchEvent::Bookmark(b) => {
                bookmarks.push(b.metadata.resource_version.parse::<u64>().unwrap())
            }
            other => panic!("no object in this namespace changed, yet: {other:?}"),
        }
    }
    let start: u64 = rv.parse().unwrap();
    assert!(
        bookmarks.iter().any(|&v| v > start),
        "no bookmark past {start} before the watch closed: {bookmarks:?}"
    );
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn compacted_versions_are_gone_for_watch_and_exact_list() {
    under_every_auth(compacted_versions).await;
}

async fn compacted_versions(mode: AuthMode) {
    let client = client(mode);
    let ns = namespace(&client, "gone").await;
    // PodTemplates are served straight from etcd in testenv (no watch cache), so etcd's
    // compaction is what the client sees.
    let api: Api<PodTemplate> = Api::namespaced(client.clone(), &ns.name);
    let created = api
        .create(&PostParams::default(), &template("t"))
        .await
        .unwrap();
    let old = created.metadata.resource_version.unwrap();
    for i in 0..2 {
        api.patch(
            "t",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"i": i.to_string()}}})),
        )
        .await
        .unwrap();
    }
    // Blocking, but brief; the other modes' runs wait for it.
    compact_etcd();

    let mut stream = api
        .watch(&WatchParams::default().from_version(&old).timeout(30))
        .await
        .unwrap();
    let err = match next_event(&mut stream).await {
        Some(Err(e)) => e,
        other => panic!("want a 410 from the watch, got {other:?}"),
    };
    assert!(err.is_gone(), "{err}");

    let err = api
        .list(&ListParams::default().at(&old, Some(VersionMatch::Exact)))
        .await
        .unwrap_err();
    assert!(err.is_gone(), "{err}");
}
