//! The recorder's bookkeeping (waits, stories and their bounds, the queue's depth) and the
//! page's rendering, on hooks called directly.

use std::time::Duration;

use super::*;

fn key(k: &str) -> Key {
    k.into()
}

fn event<'a>(object: &'a str, passed: bool) -> WatchEvent<'a> {
    WatchEvent {
        kind: "Memcached",
        verb: "update",
        object,
        resource_version: Some("42"),
        passed,
        low: false,
    }
}

#[test]
fn a_failing_key_waits_with_its_failures_next_retry_and_error_until_it_succeeds() {
    let pages = DebugPages::default();
    let trace = pages.controller("memcached");
    let k = key("ns/web");
    trace.watch_event(&k, &event("ns/web", true));
    for failures in 1..=3 {
        trace.started(&k, 0);
        let line = Some(format!("quota exceeded ({failures})"));
        trace.retry(
            &k,
            Retry::Error,
            Some(Duration::from_secs(60)),
            failures,
            line,
        );
        trace.finished(&k, "error", Duration::from_millis(3));
        trace.settled(&k);
    }
    let view = &pages.snapshot(None).controllers[0];
    assert_eq!(view.waiting_total, 1);
    let waiting = &view.waiting[0];
    assert_eq!((waiting.key.as_str(), waiting.failures), ("ns/web", 3));
    assert_eq!(waiting.reason, "error");
    assert_eq!(waiting.last_error.as_deref(), Some("quota exceeded (3)"));
    assert!(
        waiting.next_retry_in_seconds > 50.0 && waiting.next_retry_in_seconds <= 60.0,
        "{waiting:?}"
    );
    assert!(!waiting.next_retry_at.is_empty());
    assert_eq!(view.recent.len(), 3);
    assert_eq!(view.recent[0].error.as_deref(), Some("quota exceeded (3)"));

    trace.started(&k, 0);
    assert_eq!(pages.snapshot(None).controllers[0].in_flight.len(), 1);
    trace.finished(&k, "success", Duration::from_millis(2));
    trace.settled(&k);
    let view = &pages.snapshot(None).controllers[0];
    assert_eq!(view.waiting_total, 0);
    assert!(view.in_flight.is_empty());
    assert_eq!(view.recent[0].result, "success");
    assert_eq!(view.recent[0].error, None);
    assert_eq!(view.reconciles_total, 4);
    assert!(view.reconciles_per_second > 0.0);
}

#[test]
fn a_key_the_worker_could_not_find_is_shown_as_skipped() {
    let pages = DebugPages::default();
    let trace = pages.controller("c");
    let k = key("ns/gone");
    trace.started(&k, -100);
    trace.settled(&k);
    let snapshot = pages.snapshot(Some("ns/gone"));
    assert_eq!(snapshot.controllers[0].recent[0].result, "skipped");
    let kinds: Vec<_> = snapshot
        .story
        .unwrap()
        .events
        .iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(kinds, ["started", "skipped"]);
}

#[test]
fn stories_keep_the_last_events_of_the_most_recent_keys_only() {
    let limits = Limits {
        keys: 2,
        events_per_key: 3,
        ..Limits::default()
    };
    let pages = DebugPages::new(limits);
    let trace = pages.controller("c");
    for name in ["ns/a", "ns/b"] {
        for _ in 0..5 {
            trace.watch_event(&key(name), &event(name, true));
        }
    }
    trace.watch_event(&key("ns/a"), &event("ns/a", false));
    let a = pages.snapshot(Some("ns/a")).story.unwrap();
    assert_eq!(a.events.len(), 3, "the ring holds 3 events");
    assert_eq!(a.events[2].kind, "filtered", "the newest is last");
    assert!(a.events[2].what.contains("filtered out by a predicate"));
    // A third key pushes out the one heard of first.
    trace.watch_event(&key("ns/c"), &event("ns/c", true));
    assert!(
        pages
            .snapshot(Some("ns/a"))
            .story
            .unwrap()
            .events
            .is_empty()
    );
    assert_eq!(pages.snapshot(Some("ns/b")).story.unwrap().events.len(), 3);
    assert_eq!(pages.snapshot(Some("ns/c")).story.unwrap().events.len(), 1);
}

#[test]
fn the_queue_wait_is_told_when_a_worker_takes_the_key() {
    let pages = DebugPages::default();
    let trace = pages.controller("c");
    let k = key("ns/a");
    trace.watch_event(&k, &event("ns/a", true));
    trace.started(&k, 0);
    let story = pages.snapshot(Some("ns/a")).story.unwrap();
    assert!(
        story.events[1].what.contains(" in the queue"),
        "{:?}",
        story.events[1]
    );
    assert!(
        story.events[0]
            .what
            .contains("Memcached update ns/a (rv 42): queued")
    );
}

#[test]
fn the_depth_by_priority_follows_the_queue_metrics() {
    let pages = DebugPages::default();
    let trace = pages.controller("c");
    let provider = trace.queue_metrics(Arc::new(NoopProvider));
    let depth = provider.new_depth_metric_with_priority("c");
    depth.inc(0);
    depth.inc(-100);
    depth.inc(-100);
    depth.dec(-100);
    let view = &pages.snapshot(None).controllers[0];
    assert_eq!(view.queue_depth, 2);
    let by: Vec<_> = view
        .depth_by_priority
        .iter()
        .map(|d| (d.priority, d.depth))
        .collect();
    assert_eq!(by, [(0, 1), (-100, 1)], "highest priority first");
    depth.dec(0);
    depth.dec(-100);
    assert_eq!(pages.snapshot(None).controllers[0].queue_depth, 0);
}

struct NoopProvider;
impl workqueue::MetricsProvider for NoopProvider {}

#[test]
fn the_page_escapes_keys_and_errors_and_carries_its_script() {
    let pages = DebugPages::default();
    let trace = pages.controller("c");
    let k = key("ns/<b>x</b>");
    trace.started(&k, 0);
    let line = Some("<script>alert(1)</script>".to_owned());
    trace.retry(&k, Retry::Error, Some(Duration::from_secs(1)), 1, line);
    trace.finished(&k, "error", Duration::from_millis(1));
    let (html, content_type) = pages
        .respond(PAGE_PATH, Some("key=ns%2F%3Cb%3Ex%3C%2Fb%3E"))
        .unwrap();
    assert_eq!(content_type, "text/html; charset=utf-8");
    assert!(!html.contains("<b>x</b>"), "{html}");
    assert!(!html.contains("<script>alert"), "{html}");
    assert!(html.contains("ns/&lt;b&gt;x&lt;/b&gt;"));
    assert!(html.contains("data-source=\"server\""));
    assert!(html.contains("fetch(url"), "the polling script is inline");
    assert!(html.contains("data-story=\"ns/&lt;b&gt;x&lt;/b&gt;\""));
    assert!(html.contains("<td data-field=\"failures\">1</td>"));
}

#[test]
fn the_json_is_the_snapshot_and_other_paths_are_not_answered() {
    let pages = DebugPages::default();
    let trace = pages.controller("memcached");
    trace.started(&key("ns/a"), 0);
    let (json, content_type) = pages.respond(JSON_PATH, Some("key=ns/a")).unwrap();
    assert_eq!(content_type, "application/json");
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(value["controllers"][0]["name"], "memcached");
    assert_eq!(value["controllers"][0]["in_flight"][0]["key"], "ns/a");
    assert_eq!(value["story"]["key"], "ns/a");
    assert_eq!(value["leader_election"], serde_json::Value::Null);
    assert!(pages.respond("/metrics", None).is_none());
    assert!(pages.respond("/debug/other", None).is_none());
}

#[test]
fn informers_show_relists_and_watch_restarts_after_the_first() {
    let pages = DebugPages::default();
    let trace = pages.informer("memcacheds");
    let listed = informer::Trace::Listed {
        items: 1,
        resource_version: "5".into(),
    };
    let watching = informer::Trace::WatchStarted {
        resource_version: "5".into(),
        timeout_seconds: 300,
    };
    trace.reflector(&listed);
    for _ in 0..3 {
        trace.reflector(&watching);
    }
    trace.reflector(&listed);
    pages.set_informer_stats(Box::new(|| {
        vec![InformerStats {
            name: "memcacheds".into(),
            group: "cache.example.com".into(),
            version: "v1alpha1".into(),
            kind: "Memcached".into(),
            namespace: None,
            objects: 2,
            bytes: 900,
            resource_version: "7".into(),
            synced: true,
            last_error: None,
        }]
    }));
    let view = &pages.snapshot(None).informers[0];
    assert_eq!((view.relists, view.watch_restarts), (1, 2));
    assert_eq!(view.api_version, "cache.example.com/v1alpha1");
    assert_eq!((view.objects, view.bytes), (2, 900));
    assert_eq!(view.last_heard_seconds, None, "nothing heard yet");
}

#[test]
fn error_lines_keep_the_first_line_only_and_stay_short() {
    assert_eq!(error_line(&"first\nsecond"), "first");
    let long = "x".repeat(1000);
    assert_eq!(error_line(&long).chars().count(), 301);
}

#[test]
fn timestamps_are_rfc3339_in_utc() {
    let at = SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
    assert_eq!(rfc3339(at), "2023-11-14T22:13:20.123Z");
}

/// GETs `path` from the plain-HTTP server on `addr`: the status line and the body.
async fn get(addr: std::net::SocketAddr, path: &str) -> (String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    let response = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    (head.lines().next().unwrap().to_owned(), body.to_owned())
}

#[tokio::test]
async fn the_metrics_server_serves_the_pages_only_when_they_are_on() {
    let pages = DebugPages::default();
    pages.controller("memcached").started(&key("ns/a"), 0);
    let mut addrs = Vec::new();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    for debug in [Some(pages.clone()), None] {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        addrs.push(listener.local_addr().unwrap());
        let mut stopped = stopped.clone();
        let shutdown = async move {
            let _ = stopped.wait_for(|s| *s).await;
        };
        let metrics = crate::runtime::Metrics::new();
        tokio::spawn(crate::runtime::server::serve_metrics_with(
            listener, metrics, debug, shutdown,
        ));
    }
    let (status, body) = get(addrs[0], "/debug/controllers.json?key=ns%2Fa").await;
    assert!(status.contains("200"), "{status}");
    let value: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(value["controllers"][0]["in_flight"][0]["key"], "ns/a");
    assert_eq!(value["story"]["events"][0]["kind"], "started");
    let (status, body) = get(addrs[0], "/debug/controllers").await;
    assert!(status.contains("200") && body.contains("data-controller=\"memcached\""));
    let (status, _) = get(addrs[0], "/metrics").await;
    assert!(status.contains("200"), "metrics still served: {status}");
    let (status, _) = get(addrs[1], "/debug/controllers").await;
    assert!(status.contains("404"), "off: {status}");
    stop.send(true).unwrap();
}

#[tokio::test]
async fn a_sharded_manager_shows_its_shard_set_and_members() {
    use crate::runtime::shard::{Shard, ShardConfig};
    let manager = crate::runtime::Manager::offline(crate::runtime::ManagerOptions {
        debug_pages: true,
        ..Default::default()
    });
    let shard = Shard::new(
        manager.client(),
        ShardConfig::new("memcached", "ns", "replica-<0>"),
    )
    .unwrap();
    manager.shard(shard).unwrap();
    let pages = manager.debug_pages().expect("debug pages on");
    let snapshot = pages.snapshot(None);
    let shards = snapshot.sharding.expect("sharded");
    assert_eq!(shards.set, "memcached");
    assert_eq!(shards.identity, "replica-<0>");
    assert_eq!(
        shards.members.len(),
        1,
        "before it runs it knows only itself"
    );
    assert!(shards.members[0].this);
    let (html, _) = pages.respond(PAGE_PATH, None).unwrap();
    assert!(html.contains("shards of memcached"), "{html}");
    assert!(html.contains("replica-&lt;0&gt; (this replica)"), "{html}");
    let (json, _) = pages.respond(JSON_PATH, None).unwrap();
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(value["sharding"]["members"][0]["identity"], "replica-<0>");
}
