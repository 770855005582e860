//! `/debug/controllers` in a real browser: headless Chromium loads the operator's page, its
//! inline script polls the JSON and redraws the tables, and the test reads the DOM the
//! browser rendered (`--dump-dom`), never the server's HTML.
//!
//! The story it follows: a Memcached whose image is empty makes the operator write a
//! Deployment the API server refuses (422, `image: Required value`); the page shows the key
//! waiting with a growing failure count, a next-retry time and the error line. Fixing the
//! image reconciles it: the page shows `success`, the queue drains to 0, and the informer
//! table holds as many Memcacheds and Deployments as kubectl lists, and the lease shows this
//! replica leading. Screenshots of both states go to `target/debug-page/`.
//!
//! Run by `make test-browser`; needs the local cluster and Chromium (`chromium`, or the
//! binary `CHROMIUM` names).

mod common;
#[path = "../../../tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use controller_runtime::client::{Api, Patch, PatchParams, PostParams};
use memcached_operator::api::{Memcached, MemcachedSpec};

use crate::support::{CONVERGE, Kubectl, free_port, wait_until};

/// The longest one browser run may take (start, load, a few polls, dump).
const BROWSER_LIMIT: Duration = Duration::from_secs(90);

/// Chromium: `CHROMIUM`, else `chromium` on `PATH`.
fn chromium() -> PathBuf {
    std::env::var_os("CHROMIUM").map_or_else(|| PathBuf::from("chromium"), PathBuf::from)
}

/// Runs headless Chromium on `url` with `args`, letting the page's script run for 2.5 s of
/// virtual time (its polls and their fetches included); returns stdout.
async fn browse(url: &str, profile: &Path, args: &[&str]) -> Result<String, String> {
    let run = tokio::process::Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--hide-scrollbars",
            "--virtual-time-budget=2500",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(BROWSER_LIMIT, run)
        .await
        .map_err(|_| format!("chromium did not finish within {BROWSER_LIMIT:?}"))?
        .map_err(|e| {
            format!(
                "running {} (install Debian's chromium): {e}",
                chromium().display()
            )
        })?;
    if !out.status.success() {
        return Err(format!(
            "chromium failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The DOM as the browser rendered it, once the page's script has redrawn it at least once.
async fn rendered(url: &str, profile: &Path) -> Result<Dom, String> {
    let dom = browse(url, profile, &["--dump-dom"]).await?;
    if !dom.contains("data-source=\"live\"") {
        return Err(format!(
            "the page's script did not redraw it: {}",
            head(&dom)
        ));
    }
    Ok(Dom(dom))
}

async fn screenshot(url: &str, profile: &Path, to: &Path) {
    let shot = format!("--screenshot={}", to.display());
    browse(url, profile, &[&shot, "--window-size=1280,1500"])
        .await
        .unwrap_or_else(|e| panic!("screenshot of {url}: {e}"));
    assert!(
        to.is_file(),
        "chromium wrote no screenshot to {}",
        to.display()
    );
}

fn head(text: &str) -> String {
    text.chars().take(2000).collect()
}

/// A DOM dump, read by the page's `data-` markers.
struct Dom(String);

impl Dom {
    /// The markup from `start` to the next `end` after it.
    fn between<'a>(text: &'a str, start: &str, end: &str) -> Option<&'a str> {
        let from = text.find(start)?;
        let rest = &text[from..];
        let to = rest.find(end)?;
        Some(&rest[..to + end.len()])
    }

    /// The section of controller `name`.
    fn controller(&self, name: &str) -> Option<&str> {
        Self::between(
            &self.0,
            &format!("data-controller=\"{name}\""),
            "</section>",
        )
    }

    /// A summary field of controller `name` (`queue_depth`, `waiting_total`).
    fn summary(&self, name: &str, field: &str) -> Option<String> {
        let section = self.controller(name)?;
        Self::text(section, field)
    }

    /// The row of `key` in the table of class `table` of controller `name`.
    fn row(&self, name: &str, table: &str, key: &str) -> Option<&str> {
        let section = self.controller(name)?;
        let table = Self::between(section, &format!("<table class=\"{table}\">"), "</table>")?;
        Self::between(table, &format!("<tr data-key=\"{key}\">"), "</tr>")
    }

    /// The informer row whose kind is `kind`.
    fn informer(&self, kind: &str) -> Option<&str> {
        let table = Self::between(&self.0, "<table class=\"informers\">", "</table>")?;
        table
            .split("<tr data-informer=")
            .skip(1)
            .find(|row| row.contains(&format!("data-field=\"kind\">{kind}<")))
    }

    /// The text of the first element with `data-field="field"` in `markup`.
    fn text(markup: &str, field: &str) -> Option<String> {
        let start = format!("data-field=\"{field}\">");
        let from = markup.find(&start)? + start.len();
        let rest = &markup[from..];
        Some(rest[..rest.find('<')?].to_owned())
    }
}

fn number(text: Option<String>, what: &str) -> Result<u64, String> {
    let text = text.ok_or(format!("no {what} on the page"))?;
    text.trim()
        .parse()
        .map_err(|_| format!("{what} is {text:?}, not a number"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster and chromium"]
async fn the_debug_page_shows_a_failing_key_its_backoff_its_recovery_and_the_caches() {
    let (client, ns, dir) = common::setup("debug-page").await;
    let kubectl = Kubectl::from_env();
    let shots = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/debug-page");
    std::fs::create_dir_all(&shots).unwrap();
    let profile = dir.join("chromium");

    let metrics = free_port();
    let probes = free_port();
    let log = dir.join("operator.log");
    let mut operator = tokio::process::Command::new(env!("CARGO_BIN_EXE_memcached-operator"))
        .arg("--kubeconfig")
        .arg(support::cluster::kubeconfig())
        .args([
            "--namespace",
            &ns,
            &format!("--metrics-bind-address=127.0.0.1:{metrics}"),
            "--metrics-secure=false",
            "--enable-debug-pages",
            "--leader-elect",
            &format!("--leader-election-namespace={ns}"),
            &format!("--health-probe-bind-address=127.0.0.1:{probes}"),
        ])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    support::wait_ready(format!("127.0.0.1:{probes}").parse().unwrap()).await;

    // An empty image: the schema lets it through, the API server refuses the Deployment.
    let memcacheds = Api::<Memcached>::namespaced(client.clone(), &ns);
    let spec = MemcachedSpec {
        image: Some(String::new()),
        ..common::spec(1)
    };
    let broken = Memcached::new("web", spec);
    memcacheds
        .create(&PostParams::default(), &broken)
        .await
        .unwrap();
    let key = format!("{ns}/web");
    let url = format!("http://127.0.0.1:{metrics}/debug/controllers?key={ns}%2Fweb");

    // The key waits with a failure count that grows, a next retry and the API's refusal.
    let first = wait_until("the key waiting after failures", CONVERGE, async || {
        let dom = rendered(&url, &profile).await?;
        let row = dom
            .row("memcached", "waiting", &key)
            .ok_or(format!("no waiting row for {key}: {}", head(&dom.0)))?;
        let failures = number(Dom::text(row, "failures"), "failures")?;
        let next = Dom::text(row, "next_retry_at").unwrap_or_default();
        let error = Dom::text(row, "last_error").unwrap_or_default();
        if failures < 2 || next.is_empty() || !error.contains("Required value") {
            return Err(format!("row {row}"));
        }
        Ok(failures)
    })
    .await;
    wait_until("the failure count growing", CONVERGE, async || {
        let dom = rendered(&url, &profile).await?;
        let row = dom
            .row("memcached", "waiting", &key)
            .ok_or("no waiting row".to_owned())?;
        let failures = number(Dom::text(row, "failures"), "failures")?;
        (failures > first)
            .then_some(())
            .ok_or(format!("failures {failures}, first seen {first}"))
    })
    .await;
    let story = rendered(&url, &profile).await.unwrap();
    let story = Dom::between(&story.0, "<section class=\"story\"", "</section>")
        .expect("the key's story")
        .to_owned();
    assert!(
        story.contains("Memcached add") && story.contains("next retry in"),
        "{story}"
    );
    screenshot(&url, &profile, &shots.join("failing.png")).await;

    // The fix: a real image. The update queues the key at once.
    let fix = serde_json::json!({"spec": {"image": "memcached:1.6"}});
    memcacheds
        .patch("web", &PatchParams::default(), &Patch::Merge(&fix))
        .await
        .unwrap();
    wait_until("success and a drained queue", CONVERGE, async || {
        let dom = rendered(&url, &profile).await?;
        let last = dom
            .row("memcached", "recent", &key)
            .ok_or("no reconcile of the key shown".to_owned())?;
        let result = Dom::text(last, "result").unwrap_or_default();
        let depth = number(dom.summary("memcached", "queue_depth"), "queue depth")?;
        let waiting = number(dom.summary("memcached", "waiting_total"), "waiting")?;
        let still = dom.row("memcached", "waiting", &key).is_some();
        if result == "success" && depth == 0 && waiting == 0 && !still {
            Ok(())
        } else {
            Err(format!(
                "last result {result:?}, depth {depth}, waiting {waiting}"
            ))
        }
    })
    .await;

    // The informer table holds what the API server lists.
    for (kind, resource) in [
        ("Memcached", "memcacheds.cache.example.com"),
        ("Deployment", "deployments"),
    ] {
        wait_until(
            &format!("{kind}s cached as kubectl lists them"),
            CONVERGE,
            async || {
                let listed = kubectl.run(&["-n", &ns, "get", resource, "-o", "name"]);
                let want = listed.lines().filter(|l| !l.is_empty()).count() as u64;
                let dom = rendered(&url, &profile).await?;
                let row = dom.informer(kind).ok_or(format!("no {kind} informer"))?;
                let cached = number(Dom::text(row, "objects"), "objects")?;
                let synced = Dom::text(row, "synced").unwrap_or_default();
                (want > 0 && cached == want && synced == "true")
                    .then_some(())
                    .ok_or(format!(
                        "cached {cached}, kubectl lists {want}, synced {synced}"
                    ))
            },
        )
        .await;
    }
    // This replica leads, and the page says so.
    let dom = rendered(&url, &profile).await.unwrap();
    let leader = Dom::between(&dom.0, "<section class=\"leader\">", "</section>").unwrap();
    assert_eq!(
        Dom::text(leader, "role").as_deref(),
        Some("leader"),
        "{leader}"
    );
    let holder = Dom::text(leader, "holder").unwrap_or_default();
    assert_eq!(
        Some(holder.as_str()),
        Dom::text(leader, "identity").as_deref(),
        "{leader}"
    );
    screenshot(&url, &profile, &shots.join("recovered.png")).await;

    common::release_all(&memcacheds, ["web"]).await;
    operator.start_kill().unwrap();
    let _ = operator.wait().await;
    common::teardown(&client, &ns, &dir).await;
}
