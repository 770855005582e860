//! How the client talks to the real local cluster: HTTP/1.1 when HTTP/2 is declined
//! (`client_http2.rs` proves watches share one HTTP/2 connection), and lists read as protobuf
//! that equal the JSON ones.

mod support;

use controller_runtime::client::{Api, ClientOptions, ListParams, PostParams};
use k8s_openapi::api::core::v1::ConfigMap;
use support::client_suite::{
    AuthMode, client, client_with, configmap, names_of, namespace, under_every_auth,
};

#[tokio::test]
#[ignore = "needs cluster"]
async fn http1_only_client_works_when_http2_is_declined() {
    under_every_auth(http1_only).await;
}

async fn http1_only(mode: AuthMode) {
    let client = client_with(
        mode,
        ClientOptions {
            http2: false,
            ..ClientOptions::default()
        },
    );
    let body = client.get_raw("/readyz").await.unwrap();
    assert_eq!(&body[..], b"ok");
    // An authenticated request too: /readyz is open to anyone.
    let ns = namespace(&client, "http1").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    api.create(&PostParams::default(), &configmap("h", &[]))
        .await
        .unwrap();
    let listed = api
        .list(&ListParams::default().labels("suite=client"))
        .await
        .unwrap();
    assert_eq!(names_of(&listed.items), ["h"]);
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn protobuf_list_reads_the_same_objects_as_json() {
    use controller_runtime::client::Raw;
    use controller_runtime::informer::Object;

    let client = client(AuthMode::ClientCertificate);
    let ns = namespace(&client, "proto").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    for i in 0..3 {
        api.create(
            &PostParams::default(),
            &configmap(&format!("pb{i}"), &[("k", "v")]),
        )
        .await
        .unwrap();
    }
    let json = api.list(&ListParams::default().limit(2)).await.unwrap();

    // `Raw` of a built-in kind is listed as protobuf and transcoded.
    let raw: Api<Raw<ConfigMap>> = Api::namespaced(client.clone(), &ns.name);
    let list = raw.list(&ListParams::default().limit(2)).await.unwrap();
    // Three ConfigMaps and the namespace's kube-root-ca.crt, two to a page.
    assert!(list.metadata.continue_.is_some(), "a continue token");
    assert_eq!(list.metadata.remaining_item_count, Some(2));
    assert_eq!(json.metadata.remaining_item_count, Some(2));
    let got: Vec<_> = list
        .items
        .iter()
        .map(|item| {
            let labels: Vec<_> = item
                .meta()
                .unwrap()
                .labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            (
                item.name().to_owned(),
                item.namespace().unwrap().to_owned(),
                item.uid().unwrap().to_owned(),
                labels,
            )
        })
        .collect();
    let want: Vec<_> = json
        .items
        .iter()
        .map(|cm| {
            let m = &cm.metadata;
            let labels = m
                .labels
                .iter()
                .flatten()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            (
                m.name.clone().unwrap(),
                m.namespace.clone().unwrap(),
                m.uid.clone().unwrap(),
                labels,
            )
        })
        .collect();
    assert_eq!(got, want);

    // An error answer comes in protobuf too, and reads as the same Status.
    let bad_token = ListParams {
        continue_token: Some("not-a-token".into()),
        ..ListParams::default()
    };
    let err = raw.list(&bad_token).await.unwrap_err();
    let status = err.status().expect("a Status");
    assert_eq!(status.code, Some(400), "{err}");
    assert_eq!(status.reason.as_deref(), Some("BadRequest"), "{err}");
}
