//! The bodies of the fuzz targets, one function per target: the libFuzzer targets
//! (`fuzz_targets/<name>.rs`) call them, and so does the stable replay of the committed corpus
//! (`tests/fuzz_corpus.rs` in the root crate, which includes this file), so the two cannot
//! drift.
//!
//! A body returns for every input; it panics only when an invariant breaks, and a panic is
//! the crash libFuzzer reports. The invariants:
//!
//! - `watch_decode`: a watch body reads as the same events whether it arrives whole or in
//!   small chunks (frame cutting); every object a JSON or protobuf frame or list yields holds
//!   JSON that `serde_json` reads, with no key twice, and the key fields `serde_json` reads
//!   in it; a JSON frame the typed (serde) path decodes, the `Raw` (scanner) path decodes to
//!   the same event.
//! - `json_scan`: the scanner judges every input as `serde_json` does (except numbers too
//!   large for an `f64`, where `serde_json` gives no verdict on the grammar), and the key
//!   fields a `Raw` picks out are those `serde_json` reads.
//! - `kubeconfig`: kubeconfig bytes parse, resolve for every context and exec-plugin output
//!   parses without panicking.
//! - `status`: an error answer always becomes a `Status` with a code: the body's own when it
//!   holds one, else one made from the HTTP status.
//! - `admission_review`: every body gets 200 with an answering review carrying the request's
//!   uid, or 400 with a text reason, from defaulting and validating handlers.

use std::collections::HashSet;
use std::fmt;
use std::path::Path;
use std::sync::LazyLock;

use controller_runtime::client::{EventReader, Raw, WatchEvent, WatchObject};
use controller_runtime::config::{Config, Kubeconfig, KubeconfigOptions};
use controller_runtime::fuzzing;
use controller_runtime::runtime::webhook::{
    AdmissionReview, Handler, Operation, defaulter, validator,
};
use informer::Object;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// A target's body: takes one input, panics if it breaks an invariant.
pub type Body = fn(&[u8]);

/// Every target: its name (the corpus directory `fuzz/corpus/<name>/` and the
/// `fuzz_targets/<name>.rs` binary) and its body.
pub const TARGETS: &[(&str, Body)] = &[
    ("watch_decode", watch_decode),
    ("json_scan", json_scan),
    ("kubeconfig", kubeconfig),
    ("status", status),
    ("admission_review", admission_review),
];

// === watch_decode ===

/// The first byte chooses the format (bit 0: protobuf), the kind (bits 1–3) and the chunk
/// size the body arrives in (bits 4–7: 1 to 16 bytes); the rest is the watch body, also
/// decoded as one list body.
pub fn watch_decode(data: &[u8]) {
    let Some((&mode, body)) = data.split_first() else {
        return;
    };
    let protobuf = mode & 1 == 1;
    let chunk = usize::from(mode >> 4) + 1;
    match (mode >> 1) % 3 {
        0 => watch::<ConfigMap>(protobuf, chunk, body),
        1 => watch::<Pod>(protobuf, chunk, body),
        _ => watch::<Deployment>(protobuf, chunk, body),
    }
}

fn watch<K>(protobuf: bool, chunk: usize, body: &[u8])
where
    K: k8s_openapi::Resource
        + k8s_openapi::Metadata<Ty = ObjectMeta>
        + WatchObject
        + fmt::Debug
        + Send
        + Sync
        + 'static,
{
    if let Some(Ok(list)) = fuzzing::decode_list::<Raw<K>>(protobuf, body) {
        list.items
            .iter()
            .for_each(|raw| check_raw_alone(raw, protobuf));
    }
    if let Some(Ok(event)) = fuzzing::decode_frame::<Raw<K>>(protobuf, body) {
        check_event(&event, protobuf);
    }

    let (whole, whole_pending) = read::<Raw<K>>(protobuf, body, body.len().max(1));
    let (chunked, chunked_pending) = read::<Raw<K>>(protobuf, body, chunk);
    assert_eq!(
        whole, chunked,
        "events differ when the body comes in {chunk}-byte chunks"
    );
    assert_eq!(whole_pending, chunked_pending, "bytes left pending differ");
    for event in whole.iter().flatten() {
        check_event(event, protobuf);
    }

    // serde_json skips the strings of fields a type ignores without checking their UTF-8,
    // where a Raw must hold text: compare only bodies that are text.
    if protobuf || std::str::from_utf8(body).is_err() {
        return;
    }
    // Where serde decodes a frame into the typed object, the scanner's path agrees.
    let (typed, _) = read::<K>(false, body, body.len().max(1));
    assert_eq!(
        typed.len(),
        whole.len(),
        "typed and raw reads cut different frames"
    );
    for (typed, raw) in typed.iter().zip(&whole) {
        let Ok(typed) = typed else { continue };
        let raw = raw
            .as_ref()
            .unwrap_or_else(|e| panic!("serde decodes {typed:?}, the scanner fails: {e}"));
        let (t, r) = match (typed, raw) {
            (WatchEvent::Added(t), WatchEvent::Added(r))
            | (WatchEvent::Modified(t), WatchEvent::Modified(r))
            | (WatchEvent::Deleted(t), WatchEvent::Deleted(r)) => (t, r),
            (WatchEvent::Bookmark(t), WatchEvent::Bookmark(r)) => {
                assert_eq!(t, r);
                continue;
            }
            _ => panic!("typed {typed:?} but raw {raw:?}"),
        };
        let meta = t.metadata();
        assert_eq!(r.name(), meta.name.as_deref().unwrap_or(""), "name");
        assert_eq!(r.namespace(), meta.namespace.as_deref(), "namespace");
        assert_eq!(r.resource_version(), meta.resource_version.as_deref(), "rv");
        assert_eq!(r.uid(), meta.uid.as_deref(), "uid");
        for (key, value) in meta.labels.iter().flatten() {
            assert_eq!(r.label(key).as_deref(), Some(value.as_str()), "label {key}");
        }
    }
}

/// The events of a watch `body` fed to a reader in `chunk`-byte pieces, each error as its
/// message, and the bytes left pending at the end. Reads no more after an error that
/// consumed nothing (a framing error, which repeats forever), but still takes the rest of
/// the body.
fn read<T: WatchObject>(
    protobuf: bool,
    body: &[u8],
    chunk: usize,
) -> (Vec<Result<WatchEvent<T>, String>>, usize) {
    let mut reader = if protobuf {
        EventReader::protobuf::<T>().expect("the kinds fuzzed have a protobuf form")
    } else {
        EventReader::json()
    };
    let mut events = Vec::new();
    let mut stuck = false;
    for piece in body.chunks(chunk) {
        reader.push(bytes::Bytes::copy_from_slice(piece));
        while !stuck {
            // Only protobuf framing can stick (and only its `pending` is cheap: JSON's
            // counts every held byte).
            let before = if protobuf { reader.pending() } else { 0 };
            let Some(event) = reader.next_event::<T>("fuzz") else {
                break;
            };
            stuck = protobuf && event.is_err() && reader.pending() == before;
            events.push(event.map_err(|e| e.to_string()));
        }
    }
    (events, reader.pending())
}

fn check_event<K: Send + Sync + 'static>(event: &WatchEvent<Raw<K>>, transcoded: bool) {
    match event {
        WatchEvent::Added(raw) | WatchEvent::Modified(raw) | WatchEvent::Deleted(raw) => {
            check_raw_alone(raw, transcoded)
        }
        WatchEvent::Bookmark(_) => {}
    }
}

/// `raw` holds one JSON object whose key fields are the ones it reports; if `transcoded`
/// (written from protobuf), with no key twice.
fn check_raw_alone<K: Send + Sync + 'static>(raw: &Raw<K>, transcoded: bool) {
    let object: Value = serde_json::from_str(raw.json())
        .unwrap_or_else(|e| panic!("a Raw holds JSON serde_json refuses ({e}): {}", raw.json()));
    if let (true, Err(e)) = (
        transcoded,
        serde_json::from_str::<NoDuplicateKeys>(raw.json()),
    ) {
        panic!(
            "protobuf transcoded into JSON with a key twice ({e}): {}",
            raw.json()
        );
    }
    check_raw(raw, &object);
}

/// The key fields of `raw` are those `serde_json` reads in `object`, and its JSON is
/// `object`.
fn check_raw<K: Send + Sync + 'static>(raw: &Raw<K>, object: &Value) {
    let json: Value = serde_json::from_str(raw.json()).expect("a Raw holds well-formed JSON");
    assert_eq!(&json, object, "the Raw's JSON is not the object");
    let metadata = object.get("metadata").and_then(Value::as_object);
    let field = |key: &str| metadata.and_then(|m| m.get(key));
    // A null key field is an absent one, as a typed decode reads it.
    let string = |key: &str| {
        field(key).filter(|v| !v.is_null()).map(|v| {
            v.as_str()
                .unwrap_or_else(|| panic!("metadata.{key} is {v}, yet the Raw was made"))
        })
    };
    assert_eq!(raw.name(), string("name").unwrap_or(""), "metadata.name");
    assert_eq!(raw.namespace(), string("namespace"), "metadata.namespace");
    assert_eq!(
        raw.resource_version(),
        string("resourceVersion"),
        "metadata.resourceVersion"
    );
    assert_eq!(raw.uid(), string("uid"), "metadata.uid");
    let parsed = |json: Option<&str>| json.map(|j| serde_json::from_str::<Value>(j).unwrap());
    assert_eq!(
        parsed(raw.metadata_json()).as_ref(),
        object.get("metadata").filter(|m| m.is_object()),
        "metadata"
    );
    let labels = field("labels").filter(|l| l.is_object());
    assert_eq!(
        parsed(raw.labels_json()).as_ref(),
        labels,
        "metadata.labels"
    );
    for (key, value) in labels.and_then(Value::as_object).into_iter().flatten() {
        if let Some(value) = value.as_str() {
            assert_eq!(raw.label(key).as_deref(), Some(value), "label {key:?}");
        }
    }
}

/// Deserializes any JSON, failing on an object that holds a key twice.
struct NoDuplicateKeys;

impl<'de> Deserialize<'de> for NoDuplicateKeys {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NoDuplicateKeys)
    }
}

impl<'de> Visitor<'de> for NoDuplicateKeys {
    type Value = NoDuplicateKeys;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_unit<E>(self) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self, A::Error> {
        while seq.next_element::<NoDuplicateKeys>()?.is_some() {}
        Ok(self)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self, A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                return Err(de::Error::custom(format!("duplicate key {key:?}")));
            }
            map.next_value::<NoDuplicateKeys>()?;
        }
        Ok(self)
    }
}

// === json_scan ===

/// The input is JSON text, judged by the scanner, as a [`Raw`] object and as a watch frame,
/// against `serde_json`.
pub fn json_scan(data: &[u8]) {
    let theirs = serde_json::from_slice::<Value>(data);
    let Ok(text) = std::str::from_utf8(data) else {
        assert!(theirs.is_err(), "serde_json reads bytes that are not UTF-8");
        assert!(Raw::<ConfigMap>::from_slice(data).is_err());
        return;
    };
    // serde_json stops at a number too large for an f64 before judging the rest.
    if theirs
        .as_ref()
        .is_err_and(|e| e.to_string().starts_with("number out of range"))
    {
        let _ = fuzzing::validate_json(text);
        let _ = Raw::<ConfigMap>::from_json(text);
        return;
    }
    let ours = fuzzing::validate_json(text);
    assert_eq!(
        ours.is_ok(),
        theirs.is_ok(),
        "scanner {ours:?}, serde_json {theirs:?}"
    );

    let raw = Raw::<ConfigMap>::from_json(text);
    match (&theirs, &raw) {
        (Ok(object @ Value::Object(_)), Ok(raw)) => check_raw(raw, object),
        // A key field that is not a string, even one a later duplicate replaces.
        (Ok(Value::Object(_)), Err(e)) => assert!(
            e.to_string().starts_with("expected a string"),
            "serde_json reads the object, the scanner refuses it: {e}"
        ),
        (Ok(_), r) => assert!(r.is_err(), "a Raw of JSON that is not an object"),
        (Err(_), r) => assert!(r.is_err(), "a Raw of JSON serde_json refuses"),
    }

    if let Some(Ok(WatchEvent::Added(raw) | WatchEvent::Modified(raw) | WatchEvent::Deleted(raw))) =
        fuzzing::decode_frame::<Raw<ConfigMap>>(false, data)
    {
        let frame = theirs
            .as_ref()
            .expect("serde_json reads a frame the scanner decodes");
        let object = frame.get("object").expect("the frame has an object");
        check_raw(&raw, object);
    }
}

// === kubeconfig ===

/// The input is a kubeconfig file's bytes, and also an exec plugin's output.
pub fn kubeconfig(data: &[u8]) {
    let _ = fuzzing::exec_credential(data, "client.authentication.k8s.io/v1");
    let Some(text) = fuzzing::kubeconfig_text(data) else {
        assert!(std::str::from_utf8(data).is_err(), "UTF-8 that is not text");
        return;
    };
    let path = Path::new("/fuzz/kubeconfig");
    let kubeconfig = match Kubeconfig::from_yaml(&text, path) {
        Ok(kubeconfig) => kubeconfig,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    assert_eq!(kubeconfig.files, vec![path.to_path_buf()]);
    let twice = kubeconfig.clone().merge(kubeconfig.clone());
    assert_eq!(
        twice.clusters.len(),
        kubeconfig.clusters.len(),
        "merge with itself"
    );
    if reads_files(&kubeconfig) {
        return; // resolving would read whatever files the input names
    }
    let contexts = kubeconfig.contexts.iter().map(|c| Some(c.name.clone()));
    for context in std::iter::once(None).chain(contexts) {
        let options = KubeconfigOptions {
            context,
            ..KubeconfigOptions::default()
        };
        match Config::resolve(&kubeconfig, &options) {
            Ok(config) => {
                let _ = format!("{config:?}");
            }
            Err(e) => {
                let _ = e.to_string();
            }
        }
    }
}

/// Whether resolving `kubeconfig` may read a file it names.
fn reads_files(kubeconfig: &Kubeconfig) -> bool {
    let clusters = kubeconfig
        .clusters
        .iter()
        .filter_map(|c| c.cluster.as_ref());
    let users = kubeconfig.users.iter().filter_map(|u| u.user.as_ref());
    clusters.clone().any(|c| c.certificate_authority.is_some())
        || users.clone().any(|u| {
            u.client_certificate.is_some() || u.client_key.is_some() || u.token_file.is_some()
        })
}

// === status ===

/// The first byte chooses the format (bit 0: protobuf), the next two the HTTP status code;
/// the rest is the error answer's body.
pub fn status(data: &[u8]) {
    let [mode, hi, lo, body @ ..] = data else {
        return;
    };
    let code = u16::from_be_bytes([*hi, *lo]);
    let protobuf = mode & 1 == 1;
    let Some(status) = fuzzing::status_from_response(code, protobuf, body) else {
        return;
    };
    let given = status.code.expect("a Status always has a code");
    let from_body = !protobuf
        && serde_json::from_slice::<k8s_openapi::apimachinery::pkg::apis::meta::v1::Status>(body)
            .is_ok_and(|s| s.code.is_some() || s.reason.is_some() || s.message.is_some());
    if !from_body && !protobuf {
        assert_eq!(
            given,
            i32::from(code),
            "the HTTP status when the body has none"
        );
        let reason = status
            .reason
            .as_deref()
            .expect("a made Status has a reason");
        assert!(!reason.contains(' '), "reason {reason:?}");
    }
    let error = controller_runtime::client::Error::Api(Box::new(status));
    let _ = error.to_string();
    assert_eq!(error.is_not_found(), given == 404);
    assert_eq!(error.is_gone(), given == 410);
    let _ = (
        error.is_resource_version_too_large(),
        error.is_server_timeout(),
    );
}

// === admission_review ===

/// Handlers over the kinds fuzzed: defaulting and validating, ConfigMaps and Deployments.
static HANDLERS: LazyLock<Vec<Handler>> = LazyLock::new(|| {
    vec![
        defaulter::<ConfigMap>(|cm| {
            cm.data
                .get_or_insert_default()
                .insert("defaulted".into(), "true".into());
        }),
        validator::<ConfigMap>(|cm, old, operation| {
            let size = |cm: &ConfigMap| cm.data.as_ref().map_or(0, |d| d.len());
            match old {
                Some(old) if size(cm) < size(old) => Err("data may only grow".into()),
                _ => Ok(vec![format!("{operation} checked")]),
            }
        }),
        defaulter::<Deployment>(|d| {
            d.spec.get_or_insert_default().replicas.get_or_insert(3);
        }),
        validator::<Deployment>(|d, _, operation| {
            if operation == Operation::Delete {
                return Ok(vec![]);
            }
            match d.spec.as_ref().and_then(|s| s.replicas) {
                Some(n) if n % 2 == 0 => Err(format!("replicas must be odd, not {n}")),
                _ => Ok(vec![]),
            }
        }),
    ]
});

/// The input is the body of a POST to an admission webhook.
pub fn admission_review(data: &[u8]) {
    let sent = serde_json::from_slice::<AdmissionReview>(data).ok();
    let uid = sent
        .as_ref()
        .and_then(|r| r.request.as_ref())
        .map(|r| r.uid.clone());
    for handler in HANDLERS.iter() {
        let (status, answer) = fuzzing::admission_review(handler, "application/json", data);
        match status {
            200 => {
                let answer: AdmissionReview =
                    serde_json::from_slice(&answer).expect("the answer is a review");
                assert!(answer.request.is_none());
                let response = answer.response.expect("the answer has a response");
                assert_eq!(Some(response.uid.clone()), uid, "the answer's uid");
                if response.patch.is_some() {
                    response
                        .patch_operations()
                        .expect("the patch is JSON Patch");
                }
            }
            400 => assert!(answer.ends_with(b"\n"), "a text reason"),
            other => panic!("HTTP {other}"),
        }
    }
}
