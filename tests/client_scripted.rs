//! The client against a scripted server on loopback: the exact bytes of representative
//! requests, error bodies, 429 retries, recorded watch streams with garbage, truncated
//! and `ERROR` frames, and protobuf lists that are malformed or hold a field the client's
//! tables do not know.

mod support;

use std::io::Read;
use std::net::TcpListener;

use controller_runtime::client::{
    Api, ClientOptions, DeleteParams, DeleteResult, Error, ListParams, Patch, PatchParams,
    PostParams, Raw, WatchEvent, WatchObject, WatchParams,
};
use controller_runtime::config::Auth;
use controller_runtime::informer::Object;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;
use support::scripted::{Scripted, http_client};

fn json_response(code: u16, reason: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {code} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// A chunked 200 whose body is `body` cut into chunks of `chunk` bytes, then closed.
fn streamed_response(body: &[u8], chunk: usize) -> Vec<u8> {
    let mut out =
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
            .to_vec();
    for piece in body.chunks(chunk) {
        out.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        out.extend_from_slice(piece);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

fn testdata(name: &str) -> Vec<u8> {
    std::fs::read(format!("{}/testdata/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

const CM: &str = r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"7"},"data":{"k":"v"}}"#;

#[tokio::test]
async fn list_sends_exactly_this_request() {
    let server = Scripted::start(vec![json_response(
        200,
        "OK",
        r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"9","continue":"abc"},"items":[]}"#,
    )]);
    let api: Api<ConfigMap> = Api::namespaced(server.client(), "ns");
    let list = api
        .list(&ListParams::default().labels("app=web").limit(2))
        .await
        .unwrap();
    assert_eq!(list.metadata.continue_.as_deref(), Some("abc"));
    assert_eq!(
        server.requests(),
        [
            "GET /api/v1/namespaces/ns/configmaps?labelSelector=app%3Dweb&limit=2 HTTP/1.1\r\n\
          user-agent: test-agent/1\r\n\
          accept: application/json\r\n\
          authorization: Bearer t0ken\r\n\
          host: server\n"
                .replace("\r\n", "\n")
        ]
    );
}

#[tokio::test]
async fn create_posts_the_object_as_json() {
    let server = Scripted::start(vec![json_response(201, "Created", CM)]);
    let api: Api<ConfigMap> = Api::namespaced(server.client(), "ns");
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some("a".into()),
            ..ObjectMeta::default()
        },
        data: Some([("k".to_owned(), "v".to_owned())].into()),
        ..ConfigMap::default()
    };
    let created = api.create(&PostParams::default(), &cm).await.unwrap();
    assert_eq!(created.metadata.resource_version.as_deref(), Some("7"));
    let body = r#"{"apiVersion":"v1","kind":"ConfigMap","data":{"k":"v"},"metadata":{"name":"a"}}"#;
    assert_eq!(
        server.requests(),
        [format!(
            "POST /api/v1/namespaces/ns/configmaps HTTP/1.1\n\
             user-agent: test-agent/1\n\
             accept: application/json\n\
             content-type: application/json\n\
             authorization: Bearer t0ken\n\
             host: server\n\
             content-length: {}\n\n{body}",
            body.len()
        )]
    );
}

#[tokio::test]
async fn server_side_apply_sends_the_apply_content_type_manager_and_force() {
    let server = Scripted::start(vec![json_response(200, "OK", CM)]);
    let api: Api<ConfigMap> = Api::namespaced(server.client(), "ns");
    let patch = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "v"}});
    api.patch(
        "a",
        &PatchParams::apply("op").force(),
        &Patch::Apply(&patch),
    )
    .await
    .unwrap();
    let req = &server.requests()[0];
    assert!(
        req.starts_with(
            "PATCH /api/v1/namespaces/ns/configmaps/a?fieldManager=op&force=true HTTP/1.1\n"
        ),
        "{req}"
    );
    assert!(
        req.contains("\ncontent-type: application/apply-patch+yaml\n"),
        "{req}"
    );
}

#[tokio::test]
async fn delete_sends_delete_options_and_reports_a_deleted_status() {
    let server = Scripted::start(vec![json_response(
        200,
        "OK",
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success","details":{"name":"a","kind":"configmaps","uid":"u1"}}"#,
    )]);
    let api: Api<ConfigMap> = Api::namespaced(server.client(), "ns");
    let result = api
        .delete(
            "a",
            &DeleteParams::background().precondition(Some("u1"), None),
        )
        .await
        .unwrap();
    assert!(matches!(result, DeleteResult::Deleted(_)), "{result:?}");
    let req = &server.requests()[0];
    assert!(
        req.starts_with("DELETE /api/v1/namespaces/ns/configmaps/a HTTP/1.1\n"),
        "{req}"
    );
    assert!(
        req.ends_with(r#"{"propagationPolicy":"Background","preconditions":{"uid":"u1"}}"#),
        "{req}"
    );
}

#[tokio::test]
async fn error_status_is_kept_with_its_code_reason_and_message() {
    let server = Scripted::start(vec![json_response(
        409,
        "Conflict",
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Operation cannot be fulfilled on configmaps \"a\": the object has been modified; please apply your changes to the latest version and try again","reason":"Conflict","details":{"name":"a","kind":"configmaps"},"code":409}"#,
    )]);
    let api: Api<ConfigMap> = Api::namespaced(server.client(), "ns");
    let err = api
        .replace("a", &PostParams::default(), &ConfigMap::default())
        .await
        .unwrap_err();
    assert!(err.is_conflict() && !err.is_already_exists(), "{err}");
    assert_eq!(err.reason(), Some("Conflict"));
    assert!(
        err.to_string()
            .starts_with("409 Conflict: Operation cannot be fulfilled")
    );
}

#[tokio::test]
async fn too_many_requests_is_retried_as_the_server_asks() {
    let throttled =
        b"HTTP/1.1 429 Too Many Requests\r\nretry-after: 0\r\ncontent-length: 0\r\n\r\n".to_vec();
    let server = Scripted::start(vec![
        throttled.clone(),
        throttled,
        json_response(200, "OK", CM),
    ]);
    let api: Api<ConfigMap> = Api::namespaced(server.client(), "ns");
    let cm = api.get("a").await.unwrap();
    assert_eq!(cm.metadata.name.as_deref(), Some("a"));
    assert_eq!(server.requests().len(), 3, "two 429s, then the answer");
}

const UNAUTHORIZED: &str = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}"#;

/// What the scripted server saw of a `GET /version`: the request line and the
/// `Authorization` header.
fn version_request(token: &str) -> String {
    format!(
        "GET /version HTTP/1.1\n\
         user-agent: test-agent/1\n\
         accept: application/json\n\
         authorization: Bearer {token}\n\
         host: server\n"
    )
}

/// A token file holding `token`, in a fresh temporary directory.
fn token_file(token: &str) -> std::path::PathBuf {
    let dir =
        std::env::temp_dir().join(format!("client-scripted-{}-{}", std::process::id(), token));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("token");
    std::fs::write(&path, token).unwrap();
    path
}

#[tokio::test]
async fn unauthorized_refreshes_the_credentials_and_retries_once() {
    let server = Scripted::start(vec![
        json_response(200, "OK", "{}"),
        json_response(401, "Unauthorized", UNAUTHORIZED),
        json_response(200, "OK", r#"{"major":"1"}"#),
    ]);
    let path = token_file("old");
    let client = server.client_as(Auth::TokenFile(path.clone()), ClientOptions::default());

    client.get_raw("/version").await.unwrap();
    // The token rotates on disk. The client keeps its cached copy (re-reading at most once a
    // minute) until the server refuses it; then it reads the file afresh and sends again.
    std::fs::write(&path, "new").unwrap();
    let body = client.get_raw("/version").await.unwrap();
    assert_eq!(&body[..], br#"{"major":"1"}"#);
    assert_eq!(
        server.requests(),
        [
            version_request("old"),
            version_request("old"),
            version_request("new")
        ]
    );
}

#[tokio::test]
async fn a_second_unauthorized_is_the_answer() {
    let server = Scripted::start(vec![
        json_response(401, "Unauthorized", UNAUTHORIZED),
        json_response(401, "Unauthorized", UNAUTHORIZED),
        json_response(200, "OK", "{}"),
    ]);
    let path = token_file("revoked");
    let client = server.client_as(Auth::TokenFile(path), ClientOptions::default());
    let err = client.get_raw("/version").await.unwrap_err();
    assert!(err.is_unauthorized(), "{err}");
    assert!(
        err.to_string().starts_with(
            "401 Unauthorized: Unauthorized; the server did not accept the credentials"
        ),
        "{err}"
    );
    assert_eq!(
        server.requests(),
        [version_request("revoked"), version_request("revoked")],
        "one retry after refreshing, no more"
    );
}

#[tokio::test]
async fn a_server_that_never_answers_yields_the_timeout_error() {
    // Accepts connections and reads requests, but never answers.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut buf = [0; 1024];
            let _ = conn.read(&mut buf);
            held.push(conn);
        }
    });
    let client = http_client(
        addr,
        Auth::None,
        ClientOptions {
            timeout: Some(std::time::Duration::from_millis(200)),
            ..ClientOptions::default()
        },
    );
    let err = client.get_raw("/version").await.unwrap_err();
    match &err {
        Error::Timeout { url, after } => {
            assert_eq!(url, &format!("http://{addr}/version"));
            assert_eq!(*after, std::time::Duration::from_millis(200));
        }
        other => panic!("want a timeout, got {other:?}"),
    }
    assert!(err.to_string().contains("/version"), "{err}");
}

#[tokio::test]
async fn not_found_maps_to_none_with_get_opt() {
    let server = Scripted::start(vec![json_response(
        404,
        "Not Found",
        r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"configmaps \"zz\" not found","reason":"NotFound","code":404}"#,
    )]);
    let api: Api<ConfigMap> = Api::namespaced(server.client(), "ns");
    assert_eq!(api.get_opt("zz").await.unwrap(), None);
}

/// Watches a scripted body, as typed objects and as `Raw` ones, checks the two agree, and
/// returns the typed events and the error that ended the watch.
async fn watch_all(body: Vec<u8>, chunk: usize) -> (Vec<WatchEvent<ConfigMap>>, Option<Error>) {
    let (typed, typed_error) = watch_as::<ConfigMap>(body.clone(), chunk).await;
    let (raw, raw_error) = watch_as::<Raw<ConfigMap>>(body, chunk).await;
    assert_eq!(kinds(&raw), kinds(&typed), "chunk {chunk}");
    for (raw, typed) in raw.iter().zip(&typed) {
        if let (
            WatchEvent::Added(r) | WatchEvent::Modified(r) | WatchEvent::Deleted(r),
            WatchEvent::Added(t) | WatchEvent::Modified(t) | WatchEvent::Deleted(t),
        ) = (raw, typed)
        {
            assert_eq!(&r.decode().unwrap(), t);
            assert_eq!(r.resource_version(), t.metadata.resource_version.as_deref());
        }
    }
    assert_eq!(
        raw_error.as_ref().map(std::mem::discriminant),
        typed_error.as_ref().map(std::mem::discriminant),
        "raw {raw_error:?}, typed {typed_error:?}"
    );
    (typed, typed_error)
}

async fn watch_as<K>(body: Vec<u8>, chunk: usize) -> (Vec<WatchEvent<K>>, Option<Error>)
where
    K: WatchObject + Serialize + k8s_openapi::Resource<Scope = NamespaceResourceScope>,
{
    let server = Scripted::start(vec![streamed_response(&body, chunk)]);
    let api: Api<K> = Api::namespaced(server.client(), "rec");
    let mut stream = api.watch(&WatchParams::default()).await.unwrap();
    let mut events = Vec::new();
    let mut error = None;
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(ev) => events.push(ev),
            Err(e) => {
                error = Some(e);
                break;
            }
        }
    }
    // After an error the stream is over.
    assert!(stream.next().await.is_none());
    (events, error)
}

fn kinds<K: Object>(events: &[WatchEvent<K>]) -> Vec<String> {
    events
        .iter()
        .map(|e| match e {
            WatchEvent::Added(o) => format!("ADDED {}", o.name()),
            WatchEvent::Modified(o) => format!("MODIFIED {}", o.name()),
            WatchEvent::Deleted(o) => format!("DELETED {}", o.name()),
            WatchEvent::Bookmark(b) => format!("BOOKMARK {}", b.metadata.resource_version),
        })
        .collect()
}

#[tokio::test]
async fn recorded_watch_decodes_in_order_whatever_the_chunking() {
    for chunk in [1, 7, 100, 1 << 20] {
        let (events, error) = watch_all(testdata("watch/configmaps.jsonl"), chunk).await;
        assert!(error.is_none(), "chunk {chunk}: {error:?}");
        assert_eq!(
            kinds(&events),
            [
                "ADDED kube-root-ca.crt",
                "BOOKMARK 220",
                "ADDED settings",
                "MODIFIED settings",
                "ADDED other",
                "DELETED settings",
                "BOOKMARK 224"
            ],
            "chunk {chunk}"
        );
        let WatchEvent::Bookmark(b) = &events[1] else {
            unreachable!()
        };
        assert!(b.is_initial_events_end());
    }
}

#[tokio::test]
async fn watch_request_asks_for_bookmarks() {
    let server = Scripted::start(vec![streamed_response(b"", 1)]);
    let api: Api<ConfigMap> = Api::namespaced(server.client(), "rec");
    let mut stream = api
        .watch(&WatchParams::default().from_version("5").timeout(290))
        .await
        .unwrap();
    assert!(stream.next().await.is_none());
    assert!(
        server.requests()[0].starts_with(
            "GET /api/v1/namespaces/rec/configmaps?watch=true&resourceVersion=5&timeoutSeconds=290&allowWatchBookmarks=true HTTP/1.1\n"
        ),
        "{}",
        server.requests()[0]
    );
}

#[tokio::test]
async fn garbage_frame_ends_the_watch_with_a_decode_error_after_the_good_frames() {
    let (events, error) = watch_all(testdata("watch/garbage.jsonl"), 64).await;
    assert_eq!(kinds(&events), ["ADDED kube-root-ca.crt", "BOOKMARK 220"]);
    let error = error.expect("a decode error");
    assert!(matches!(error, Error::Decode { .. }), "{error}");
    assert!(
        error
            .to_string()
            .contains("the data began: {\"type\":\"ADDED\",\"object\":{\"kind\":\"ConfigMap\" this is not JSON"),
        "{error}"
    );
    // The raw path names the byte where the frame stops being JSON.
    let (_, raw_error) = watch_as::<Raw<ConfigMap>>(testdata("watch/garbage.jsonl"), 64).await;
    let raw_error = raw_error.expect("a decode error").to_string();
    assert!(
        raw_error.contains("expected ',' or '}' in an object at byte 45"),
        "{raw_error}"
    );
}

#[tokio::test]
async fn truncated_body_ends_the_watch_with_a_truncated_frame_error() {
    let (events, error) = watch_all(testdata("watch/truncated.jsonl"), 50).await;
    assert_eq!(
        kinds(&events),
        ["ADDED kube-root-ca.crt", "BOOKMARK 220", "ADDED settings"]
    );
    match error {
        Some(Error::TruncatedFrame { len, .. }) => assert_eq!(len, 150),
        other => panic!("want a truncated frame, got {other:?}"),
    }
}

#[tokio::test]
async fn error_frame_becomes_a_gone_error_carrying_the_status() {
    let (events, error) = watch_all(testdata("watch/error-410.jsonl"), 1 << 20).await;
    assert!(events.is_empty());
    let error = error.expect("the ERROR frame");
    assert!(error.is_gone() && error.is_expired(), "{error}");
    assert_eq!(
        error.to_string(),
        "410 Expired: The resourceVersion for the provided watch is too old."
    );
}

// === protobuf ===

#[cfg(feature = "protobuf")]
mod protobuf {
    use super::*;

    /// A length-delimited protobuf field.
    fn pb_field(number: u8, bytes: &[u8]) -> Vec<u8> {
        assert!(number < 16 && bytes.len() < 128, "a short field");
        let mut out = vec![number << 3 | 2, bytes.len() as u8];
        out.extend_from_slice(bytes);
        out
    }

    /// A protobuf answer: `k8s\0`, then `runtime.Unknown` holding `raw`.
    fn protobuf_response(kind: &str, raw: &[u8]) -> Vec<u8> {
        let type_meta = [pb_field(1, b"v1"), pb_field(2, kind.as_bytes())].concat();
        let mut body = b"k8s\0".to_vec();
        body.extend([pb_field(1, &type_meta), pb_field(2, raw)].concat());
        let mut out = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/vnd.kubernetes.protobuf\r\ncontent-length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        out.extend(body);
        out
    }

    /// The `accept` header of each request the server saw.
    fn accepts(server: &Scripted) -> Vec<String> {
        server
            .requests()
            .iter()
            .map(|r| {
                r.lines()
                    .find(|l| l.starts_with("accept: "))
                    .unwrap()
                    .to_owned()
            })
            .collect()
    }

    #[tokio::test]
    async fn a_protobuf_list_holding_an_unknown_field_is_read_again_as_json_by_that_client_only() {
        use k8s_openapi::api::core::v1::PodTemplate;
        // A PodTemplate whose field 15 this client's tables do not have: a newer server.
        let item = [pb_field(1, &pb_field(1, b"t")), pb_field(15, b"new")].concat();
        let list = [pb_field(1, &pb_field(2, b"9")), pb_field(2, &item)].concat();
        let json_list = json_response(
            200,
            "OK",
            r#"{"kind":"PodTemplateList","apiVersion":"v1","metadata":{"resourceVersion":"9"},"items":[{"metadata":{"name":"t","namespace":"ns"}}]}"#,
        );
        let server = Scripted::start(vec![
            protobuf_response("PodTemplateList", &list),
            json_list.clone(),
            json_list.clone(),
            json_list,
        ]);
        let api: Api<Raw<PodTemplate>> = Api::namespaced(server.client(), "ns");
        let list = api.list(&ListParams::default()).await.unwrap();
        assert_eq!(list.items.len(), 1);
        assert_eq!(list.items[0].name(), "t");
        // The kind stays on JSON for this client: its next list asks for JSON only.
        api.list(&ListParams::default()).await.unwrap();
        // Another client (another cluster, say) still asks for protobuf.
        let other: Api<Raw<PodTemplate>> = Api::namespaced(server.client(), "ns");
        other.list(&ListParams::default()).await.unwrap();
        let protobuf = "accept: application/vnd.kubernetes.protobuf, application/json";
        let json = "accept: application/json";
        assert_eq!(accepts(&server), [protobuf, json, json, protobuf]);
    }

    #[tokio::test]
    async fn a_malformed_protobuf_list_is_an_error_naming_it() {
        use k8s_openapi::api::core::v1::Secret as SecretKind;
        let truncated = [pb_field(1, &pb_field(2, b"9")), vec![2 << 3 | 2, 40, 1, 2]].concat();
        let server = Scripted::start(vec![
            protobuf_response("SecretList", &truncated),
            protobuf_response("SecretList", &truncated),
        ]);
        let api: Api<Raw<SecretKind>> = Api::namespaced(server.client(), "ns");
        let err = api.list(&ListParams::default()).await.unwrap_err();
        assert!(matches!(err, Error::Protobuf { .. }), "{err:?}");
        assert_eq!(
            err.to_string(),
            "decoding the list /api/v1/namespaces/ns/secrets: malformed protobuf: length-delimited bytes at byte 7"
        );
        // A malformed body is not a newer schema: the kind keeps asking for protobuf.
        assert!(api.list(&ListParams::default()).await.is_err());
        let protobuf = "accept: application/vnd.kubernetes.protobuf, application/json";
        assert_eq!(accepts(&server), [protobuf, protobuf]);
    }
}
