//! Lists against the real local cluster: pages and continue tokens, field selectors judged
//! by the server, and a list not older than a given resourceVersion. Each test runs under
//! every way of authenticating (`support::client_suite`).

mod support;

use controller_runtime::client::{Api, ListParams, Patch, PatchParams, PostParams, VersionMatch};
use k8s_openapi::api::core::v1::ConfigMap;
use serde_json::json;
use support::client_suite::{
    AuthMode, client, configmap, data_of, names_of, namespace, under_every_auth,
};

#[tokio::test]
#[ignore = "needs cluster"]
async fn pagination_spans_several_pages_under_every_authentication() {
    under_every_auth(pagination).await;
}

async fn pagination(mode: AuthMode) {
    let client = client(mode);
    let ns = namespace(&client, "pages").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    for i in 0..5 {
        api.create(&PostParams::default(), &configmap(&format!("p{i}"), &[]))
            .await
            .unwrap();
    }
    let params = ListParams::default().labels("suite=client").limit(2);
    let first = api.list(&params).await.unwrap();
    assert_eq!(first.items.len(), 2);
    let token = first.metadata.continue_.clone().expect("a continue token");
    let second = api
        .list(&params.clone().continue_from(&token))
        .await
        .unwrap();
    assert_eq!(second.items.len(), 2);
    assert_ne!(first.items[0].metadata.name, second.items[0].metadata.name);

    let all = api.list_all(&params).await.unwrap();
    assert_eq!(names_of(&all.items), ["p0", "p1", "p2", "p3", "p4"]);
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn field_selector_filters_on_the_server() {
    under_every_auth(field_selector).await;
}

async fn field_selector(mode: AuthMode) {
    let client = client(mode);
    let ns = namespace(&client, "fields").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    for name in ["a", "b", "c"] {
        api.create(&PostParams::default(), &configmap(name, &[]))
            .await
            .unwrap();
    }
    let one = api
        .list(&ListParams::default().fields("metadata.name=b"))
        .await
        .unwrap();
    assert_eq!(names_of(&one.items), ["b"]);
    let others = api
        .list(
            &ListParams::default()
                .labels("suite=client")
                .fields("metadata.name!=b"),
        )
        .await
        .unwrap();
    assert_eq!(names_of(&others.items), ["a", "c"]);

    // The server, not the client, judges the selector: a field it does not index is refused.
    let err = api
        .list(&ListParams::default().fields("data.k=v"))
        .await
        .unwrap_err();
    assert!(err.is_bad_request(), "{err}");
    assert!(err.to_string().contains("data.k"), "{err}");
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn list_not_older_than_a_version_includes_every_change_up_to_it() {
    under_every_auth(list_not_older_than).await;
}

async fn list_not_older_than(mode: AuthMode) {
    let client = client(mode);
    let ns = namespace(&client, "notolder").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    api.create(&PostParams::default(), &configmap("n", &[("v", "1")]))
        .await
        .unwrap();
    let patched = api
        .patch(
            "n",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"v": "2"}})),
        )
        .await
        .unwrap();
    let rv = patched.metadata.resource_version.unwrap();

    let list = api
        .list(
            &ListParams::default()
                .labels("suite=client")
                .at(&rv, Some(VersionMatch::NotOlderThan)),
        )
        .await
        .unwrap();
    let listed_at: u64 = list.metadata.resource_version.unwrap().parse().unwrap();
    assert!(
        listed_at >= rv.parse().unwrap(),
        "listed at {listed_at}, older than {rv}"
    );
    assert_eq!(list.items.len(), 1);
    assert_eq!(data_of(&list.items[0], "v").as_deref(), Some("2"));
}
