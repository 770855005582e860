//! Every request of a client, watches included, shares one HTTP/2 connection to the API
//! server. Alone in its test binary: it counts this process's sockets, and other tests'
//! clients would be counted too.

mod support;

use controller_runtime::client::{Api, ListParams, WatchParams};
use k8s_openapi::api::core::v1::ConfigMap;

#[tokio::test]
#[ignore = "needs cluster"]
async fn many_watches_share_one_http2_connection() {
    let client = support::cluster::client();

    // The first request learns by ALPN that the server speaks HTTP/2.
    client.get_raw("/version").await.unwrap();
    let port: u16 = client
        .base_url()
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(established_connections_to(port), 1);

    // Watch from the current resourceVersion: without one the server would replay every
    // ConfigMap into each watch, and ten unread replays of a busy cluster fill the shared
    // connection's flow-control window, stalling the GET below.
    let api: Api<ConfigMap> = Api::all(client.clone());
    let now = api.list(&ListParams::default().limit(1)).await.unwrap();
    let version = now.metadata.resource_version.unwrap();
    let mut watches = Vec::new();
    for _ in 0..10 {
        let params = WatchParams::default().from_version(&version).timeout(60);
        watches.push(api.watch(&params).await.unwrap());
    }
    client.get_raw("/readyz").await.unwrap();
    assert_eq!(
        established_connections_to(port),
        1,
        "10 watches and two GETs should share one HTTP/2 connection"
    );
    drop(watches);
}

/// How many of this process's TCP sockets are connected to 127.0.0.1:`port`.
fn established_connections_to(port: u16) -> usize {
    let inodes: std::collections::HashSet<String> = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            l.to_str()?
                .strip_prefix("socket:[")?
                .strip_suffix(']')
                .map(str::to_owned)
        })
        .collect();
    let table = std::fs::read_to_string("/proc/self/net/tcp").unwrap();
    // Local and remote addresses are hex, little-endian: 127.0.0.1 is 0100007F.
    let remote = format!("0100007F:{port:04X}");
    table
        .lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 9 && f[2] == remote && f[3] == "01" && inodes.contains(f[9])
        })
        .count()
}
