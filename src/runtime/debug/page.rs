//! The HTML of `/debug/controllers`: rendered here from a [`Snapshot`], then redrawn by its
//! inline script from `/debug/controllers.json` every second.
//!
//! The script's `render` draws the same markup as [`content`]: every value sits in an
//! element named by `data-field` (and each row by `data-key` or `data-informer`), so a
//! script or a browser test reads the page the same way whichever drew it. The `<body>`'s
//! `data-source` says which did (`server`, then `live`), and `data-polls` counts the
//! script's redraws.

use std::fmt::Write as _;

use super::{Snapshot, escape, one_decimal};

/// The whole page for `snapshot`.
pub(super) fn html(snapshot: &Snapshot) -> String {
    let key = snapshot.story.as_ref().map_or("", |s| s.key.as_str());
    let mut out = String::with_capacity(8192);
    out.push_str(HEAD);
    let _ = write!(
        out,
        "<body data-source=\"server\" data-polls=\"0\">\n<h1>Controllers</h1>\n\
         <p id=\"status\">as of <span data-field=\"now\">{}</span> (rendered by the server)</p>\n\
         <form method=\"get\" action=\"{}\"><label>Story of a key \
         <input id=\"key\" name=\"key\" placeholder=\"namespace/name\" size=\"40\" value=\"{}\"></label> \
         <button>Show</button></form>\n<div id=\"content\">",
        escape(&snapshot.now),
        super::PAGE_PATH,
        escape(key),
    );
    out.push_str(&content(snapshot));
    out.push_str("</div>\n<script>\n");
    out.push_str(SCRIPT);
    out.push_str("</script>\n</body>\n</html>\n");
    out
}

/// A table: `columns` as its header, then `rows`, each `(row attributes, cells)` with each
/// cell `(field, text)`.
fn table(class: &str, columns: &[&str], rows: &[(String, Vec<(&str, String)>)]) -> String {
    let mut out = format!("<table class=\"{class}\"><thead><tr>");
    for c in columns {
        let _ = write!(out, "<th>{}</th>", escape(c));
    }
    out.push_str("</tr></thead><tbody>");
    if rows.is_empty() {
        let _ = write!(
            out,
            "<tr class=\"none\"><td colspan=\"{}\">none</td></tr>",
            columns.len()
        );
    }
    for (attrs, cells) in rows {
        let _ = write!(out, "<tr {attrs}>");
        for (field, text) in cells {
            let _ = write!(out, "<td data-field=\"{field}\">{}</td>", escape(text));
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table>");
    out
}

fn opt(value: Option<&str>) -> String {
    value.unwrap_or("").to_owned()
}

/// The page's live part: the story asked for, the controllers, the informers, the lease.
pub(super) fn content(s: &Snapshot) -> String {
    let mut out = String::new();
    if let Some(story) = &s.story {
        let _ = write!(
            out,
            "<section class=\"story\" data-story=\"{}\"><h2>story of {}</h2>",
            escape(&story.key),
            escape(&story.key)
        );
        let rows: Vec<_> = story
            .events
            .iter()
            .map(|e| {
                let attrs = format!("data-kind=\"{}\"", e.kind);
                let cells = vec![
                    ("at", e.at.clone()),
                    ("controller", e.controller.clone()),
                    ("kind", e.kind.to_owned()),
                    ("what", e.what.clone()),
                ];
                (attrs, cells)
            })
            .collect();
        out.push_str("<div class=\"scroll\">");
        out.push_str(&table("story", &["at", "controller", "", "what"], &rows));
        out.push_str("</div></section>");
    }
    for c in &s.controllers {
        let by_priority = c
            .depth_by_priority
            .iter()
            .map(|d| format!("{}: {}", d.priority, d.depth))
            .collect::<Vec<_>>()
            .join(", ");
        let by_priority = if by_priority.is_empty() {
            "none".to_owned()
        } else {
            by_priority
        };
        let _ = write!(
            out,
            "<section class=\"controller\" data-controller=\"{name}\"><h2>controller {name}</h2>\
             <p>queue depth <b data-field=\"queue_depth\">{depth}</b> \
             (by priority: <span data-field=\"depth_by_priority\">{by_priority}</span>), \
             delayed <b data-field=\"delayed\">{delayed}</b>, \
             waiting <b data-field=\"waiting_total\">{waiting}</b>, \
             in flight <b data-field=\"in_flight\">{flying}</b>, \
             <b data-field=\"reconciles_per_second\">{rate}</b> reconciles/s, \
             <b data-field=\"reconciles_total\">{total}</b> in all</p>",
            name = escape(&c.name),
            depth = c.queue_depth,
            by_priority = escape(&by_priority),
            delayed = c.delayed,
            waiting = c.waiting_total,
            flying = c.in_flight.len(),
            rate = one_decimal(c.reconciles_per_second),
            total = c.reconciles_total,
        );
        out.push_str("<h3>in flight</h3>");
        let rows: Vec<_> = c
            .in_flight
            .iter()
            .map(|f| {
                let attrs = format!("data-key=\"{}\"", escape(&f.key));
                let cells = vec![
                    ("key", f.key.clone()),
                    ("priority", f.priority.to_string()),
                    ("running_seconds", one_decimal(f.running_seconds)),
                ];
                (attrs, cells)
            })
            .collect();
        out.push_str(&table(
            "in-flight",
            &["key", "priority", "running (s)"],
            &rows,
        ));
        out.push_str("<h3>waiting</h3>");
        let rows: Vec<_> = c
            .waiting
            .iter()
            .map(|w| {
                let attrs = format!("data-key=\"{}\"", escape(&w.key));
                let cells = vec![
                    ("key", w.key.clone()),
                    ("reason", w.reason.to_owned()),
                    ("failures", w.failures.to_string()),
                    ("next_retry_at", w.next_retry_at.clone()),
                    (
                        "next_retry_in_seconds",
                        one_decimal(w.next_retry_in_seconds),
                    ),
                    ("last_error", opt(w.last_error.as_deref())),
                ];
                (attrs, cells)
            })
            .collect();
        let columns = [
            "key",
            "why",
            "failures",
            "next retry",
            "in (s)",
            "last error",
        ];
        out.push_str(&table("waiting", &columns, &rows));
        out.push_str("<h3>last reconciles</h3>");
        let rows: Vec<_> = c
            .recent
            .iter()
            .map(|r| {
                let attrs = format!("data-key=\"{}\"", escape(&r.key));
                let cells = vec![
                    ("key", r.key.clone()),
                    ("started_at", r.started_at.clone()),
                    ("duration_ms", one_decimal(r.duration_ms)),
                    ("result", r.result.clone()),
                    ("error", opt(r.error.as_deref())),
                ];
                (attrs, cells)
            })
            .collect();
        let columns = ["key", "started", "ms", "result", "error"];
        out.push_str(&table("recent", &columns, &rows));
        out.push_str("</section>");
    }
    out.push_str("<section class=\"informers\"><h2>informers</h2>");
    let rows: Vec<_> = s
        .informers
        .iter()
        .map(|i| {
            let attrs = format!("data-informer=\"{}\"", escape(&i.name));
            let cells = vec![
                ("api_version", i.api_version.clone()),
                ("kind", i.kind.clone()),
                ("namespace", opt(i.namespace.as_deref())),
                ("objects", i.objects.to_string()),
                ("bytes", i.bytes.to_string()),
                ("resource_version", i.resource_version.clone()),
                (
                    "last_heard_seconds",
                    i.last_heard_seconds.map(one_decimal).unwrap_or_default(),
                ),
                ("relists", i.relists.to_string()),
                ("watch_restarts", i.watch_restarts.to_string()),
                ("synced", i.synced.to_string()),
                ("last_error", opt(i.last_error.as_deref())),
            ];
            (attrs, cells)
        })
        .collect();
    let columns = [
        "api version",
        "kind",
        "namespace",
        "objects",
        "bytes",
        "resourceVersion",
        "heard (s ago)",
        "relists",
        "watch restarts",
        "synced",
        "last error",
    ];
    out.push_str(&table("informers", &columns, &rows));
    out.push_str("</section>");
    out.push_str("<section class=\"leader\"><h2>leader election</h2>");
    match &s.leader_election {
        Some(l) => {
            let _ = write!(
                out,
                "<p>lease <span data-field=\"lease\">{}</span> held by \
                 <b data-field=\"holder\">{}</b>; this replica (<span data-field=\"identity\">{}</span>) \
                 is <b data-field=\"role\">{}</b>; lease age \
                 <span data-field=\"lease_age_seconds\">{}</span> s, term \
                 <span data-field=\"term\">{}</span></p>",
                escape(&l.lease),
                escape(&l.holder),
                escape(&l.identity),
                l.role,
                l.lease_age_seconds.map(one_decimal).unwrap_or_default(),
                l.term,
            );
        }
        None => out.push_str("<p data-field=\"role\">not configured: every replica leads</p>"),
    }
    out.push_str("</section>");
    if let Some(shards) = &s.sharding {
        let _ = write!(
            out,
            "<section class=\"shards\"><h2>shards of {}</h2><p>this replica \
             (<span data-field=\"shard_identity\">{}</span>) reconciles \
             <b data-field=\"shard_active\">{}</b>, term <span data-field=\"shard_term\">{}</span></p>",
            escape(&shards.set),
            escape(&shards.identity),
            escape(&shards.active),
            shards.term,
        );
        let rows: Vec<_> = shards
            .members
            .iter()
            .map(|m| {
                let this = if m.this { " (this replica)" } else { "" };
                (
                    format!("data-member=\"{}\"", escape(&m.identity)),
                    vec![
                        ("identity", format!("{}{this}", m.identity)),
                        ("ranges", m.ranges.clone()),
                    ],
                )
            })
            .collect();
        out.push_str(&table("members", &["replica", "ranges held"], &rows));
        out.push_str("</section>");
    }
    out
}

const HEAD: &str = "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
<title>controllers</title>\n<style>\n\
body{font:13px/1.4 system-ui,sans-serif;margin:1em 2em;color:#222}\n\
h1{font-size:20px;margin:0 0 .2em}h2{font-size:16px;margin:1.2em 0 .3em}h3{font-size:13px;margin:.6em 0 .2em;color:#555}\n\
table{border-collapse:collapse;margin-bottom:.5em}th,td{border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top}\n\
th{background:#f0f0f0}tr.none td{color:#999}td[data-field=at],td[data-field=started_at],td[data-field=next_retry_at]{white-space:nowrap}td[data-field=error],td[data-field=last_error]{color:#b00;max-width:40em}\n\
section.controller{border-left:4px solid #48c;padding-left:.8em}#status{color:#666}\n\
section.story{border-left:4px solid #c84;padding-left:.8em}div.scroll{max-height:16em;overflow:auto;display:inline-block}\n\
</style>\n</head>\n";

/// Polls the JSON and redraws `#content` with the markup [`content`] makes.
const SCRIPT: &str = r#"(function () {
  var esc = function (t) {
    return String(t == null ? "" : t).replace(/[&<>"']/g, function (c) {
      return {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c];
    });
  };
  var one = function (v) { return v == null ? "" : Number(v).toFixed(1); };
  function table(cls, cols, rows) {
    var h = '<table class="' + cls + '"><thead><tr>';
    cols.forEach(function (c) { h += "<th>" + esc(c) + "</th>"; });
    h += "</tr></thead><tbody>";
    if (!rows.length) h += '<tr class="none"><td colspan="' + cols.length + '">none</td></tr>';
    rows.forEach(function (r) {
      h += "<tr " + r[0] + ">";
      r[1].forEach(function (c) { h += '<td data-field="' + c[0] + '">' + esc(c[1]) + "</td>"; });
      h += "</tr>";
    });
    return h + "</tbody></table>";
  }
  function render(s) {
    var h = "";
    if (s.story) {
      h += '<section class="story" data-story="' + esc(s.story.key) + '"><h2>story of ' + esc(s.story.key) + "</h2>" +
        '<div class="scroll">' + table("story", ["at", "controller", "", "what"], s.story.events.map(function (e) {
          return ['data-kind="' + esc(e.kind) + '"', [["at", e.at], ["controller", e.controller], ["kind", e.kind], ["what", e.what]]];
        })) + "</div></section>";
    }
    s.controllers.forEach(function (c) {
      var bp = c.depth_by_priority.map(function (d) { return d.priority + ": " + d.depth; }).join(", ") || "none";
      h += '<section class="controller" data-controller="' + esc(c.name) + '"><h2>controller ' + esc(c.name) + "</h2>" +
        '<p>queue depth <b data-field="queue_depth">' + c.queue_depth + "</b> " +
        '(by priority: <span data-field="depth_by_priority">' + esc(bp) + "</span>), " +
        'delayed <b data-field="delayed">' + c.delayed + "</b>, " +
        'waiting <b data-field="waiting_total">' + c.waiting_total + "</b>, " +
        'in flight <b data-field="in_flight">' + c.in_flight.length + "</b>, " +
        '<b data-field="reconciles_per_second">' + one(c.reconciles_per_second) + "</b> reconciles/s, " +
        '<b data-field="reconciles_total">' + c.reconciles_total + "</b> in all</p>";
      h += "<h3>in flight</h3>" + table("in-flight", ["key", "priority", "running (s)"], c.in_flight.map(function (f) {
        return ['data-key="' + esc(f.key) + '"', [["key", f.key], ["priority", f.priority], ["running_seconds", one(f.running_seconds)]]];
      }));
      h += "<h3>waiting</h3>" + table("waiting", ["key", "why", "failures", "next retry", "in (s)", "last error"], c.waiting.map(function (w) {
        return ['data-key="' + esc(w.key) + '"', [["key", w.key], ["reason", w.reason], ["failures", w.failures],
          ["next_retry_at", w.next_retry_at], ["next_retry_in_seconds", one(w.next_retry_in_seconds)], ["last_error", w.last_error]]];
      }));
      h += "<h3>last reconciles</h3>" + table("recent", ["key", "started", "ms", "result", "error"], c.recent.map(function (r) {
        return ['data-key="' + esc(r.key) + '"', [["key", r.key], ["started_at", r.started_at], ["duration_ms", one(r.duration_ms)],
          ["result", r.result], ["error", r.error]]];
      }));
      h += "</section>";
    });
    h += '<section class="informers"><h2>informers</h2>' + table("informers", ["api version", "kind", "namespace", "objects", "bytes",
      "resourceVersion", "heard (s ago)", "relists", "watch restarts", "synced", "last error"], s.informers.map(function (i) {
      return ['data-informer="' + esc(i.name) + '"', [["api_version", i.api_version], ["kind", i.kind], ["namespace", i.namespace],
        ["objects", i.objects], ["bytes", i.bytes], ["resource_version", i.resource_version], ["last_heard_seconds", one(i.last_heard_seconds)],
        ["relists", i.relists], ["watch_restarts", i.watch_restarts], ["synced", String(i.synced)], ["last_error", i.last_error]]];
    })) + "</section>";
    h += '<section class="leader"><h2>leader election</h2>';
    var l = s.leader_election;
    if (l) {
      h += '<p>lease <span data-field="lease">' + esc(l.lease) + '</span> held by <b data-field="holder">' + esc(l.holder) +
        '</b>; this replica (<span data-field="identity">' + esc(l.identity) + '</span>) is <b data-field="role">' + esc(l.role) +
        '</b>; lease age <span data-field="lease_age_seconds">' + one(l.lease_age_seconds) + '</span> s, term <span data-field="term">' +
        l.term + "</span></p>";
    } else {
      h += '<p data-field="role">not configured: every replica leads</p>';
    }
    h += "</section>";
    var sh = s.sharding;
    if (sh) {
      h += '<section class="shards"><h2>shards of ' + esc(sh.set) + '</h2><p>this replica (<span data-field="shard_identity">' +
        esc(sh.identity) + '</span>) reconciles <b data-field="shard_active">' + esc(sh.active) +
        '</b>, term <span data-field="shard_term">' + sh.term + "</span></p>" +
        table("members", ["replica", "ranges held"], sh.members.map(function (m) {
          return ['data-member="' + esc(m.identity) + '"', [["identity", m.identity + (m.this ? " (this replica)" : "")], ["ranges", m.ranges]]];
        })) + "</section>";
    }
    return h;
  }
  var polls = 0;
  function poll() {
    var key = document.getElementById("key").value.trim();
    var url = "controllers.json" + (key ? "?key=" + encodeURIComponent(key) : "");
    fetch(url, {cache: "no-store", credentials: "same-origin"}).then(function (r) {
      if (!r.ok) throw new Error("HTTP " + r.status);
      return r.json();
    }).then(function (s) {
      document.getElementById("content").innerHTML = render(s);
      // The newest events of the story are its last: keep them in view.
      var story = document.querySelector("section.story div.scroll");
      if (story) story.scrollTop = story.scrollHeight;
      polls += 1;
      document.body.setAttribute("data-source", "live");
      document.body.setAttribute("data-polls", String(polls));
      document.getElementById("status").innerHTML = 'as of <span data-field="now">' + esc(s.now) + "</span> (live, every second)";
    }).catch(function (e) {
      document.getElementById("status").textContent = "live updates failed: " + e.message + " (retrying)";
    }).then(function () { setTimeout(poll, 1000); });
  }
  poll();
})();
"#;
