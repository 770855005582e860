#!/usr/bin/env python3
"""Live edits against a draining initial list, ours against controller-runtime: `make bench-latency`.

Builds `latency-bench` (cmd/latency-bench, release: our controller and the edit driver) and
the Go peer (benches/clientgo/cmd/latency-peer, controller-runtime v0.25.2 with its default
priority queue), makes sure the real local cluster is up (`make cluster`, which leaves a
running cluster alone), seeds it (`informer-bench seed`: namespace `bench-latency`, 10,000
ConfigMaps; whatever exists is kept), then runs each controller alternately for several
rounds (ours first in odd rounds, controller-runtime first in even ones). One run:

1. the controller process is spawned: a manager with one controller `For` ConfigMaps, the
   cache limited to the namespace, one worker (both runtimes' default); it lists the
   namespace, and every ConfigMap enters its queue as part of the initial list;
2. once it says its cache has synced, the driver (`latency-bench edit`, the same for both)
   stamps the annotation `bench-latency/seq: <run>.<seq>` on one seeded ConfigMap after
   another, at --rate edits a second (default 20), each on a different object, spread over
   the namespace; every edit is a live change for the controller;
3. once the controller says every ConfigMap has been reconciled once (the initial list has
   drained), the driver stops; the run ends when every edit has been reconciled.

The reconcile is the same on both sides: it takes the time on entry (the reconcile-start),
reads the object from the cache, reports the stamp it carries, and does one GET of the object
from the API server: the fixed work that makes 10,000 initial items take a while to drain
with one worker. Neither client is rate limited on the client side.

Figures, per run:

* **live edit → reconcile-start**: for each edit sent while the initial list drained, from
  just before the driver sent the patch to the start of the first reconcile that saw it (or
  a later stamp of the same object); p50, p99 and max. Driver and controller read the same
  machine clock (Unix time).
* **initial wait**: for each ConfigMap, from the start of the controller's `main` to the start
  of its first reconcile; the longest of them is when the initial list had drained. It counts
  from the controller's start, not from the item's enqueue, which neither runtime's public
  API shows; the list itself (the cache's sync, also reported) is part of it on both sides.

Medians over the rounds, a table, and the last line is exactly

    latency ours/controller-runtime: live p99 X.XX, longest initial wait Y.YY

ratios of medians (ours over controller-runtime's; lower is better). Every run's record is kept
in target/bench-latency/rounds.jsonl, each key's first reconcile-start in
target/bench-latency/initial-<impl>-round<n>.json, each process's stderr in
target/bench-latency/logs/. A run that fails, times out or loses an edit fails the bench.
"""

import json
import math
import os
import subprocess
import sys
import threading
import time

import harness
from harness import KUBECONFIG, fmt_ms, fmt_ratio, log

OUT_DIR = os.path.join(harness.ROOT, "target", "bench-latency")
OURS = harness.release_bin("latency-bench")
SEEDER = harness.release_bin("informer-bench")
THEIRS = os.path.join(OUT_DIR, "latency-peer")
PEER = "controller-runtime"
IMPLS = ["ours", PEER]
# The seeded ConfigMaps carry this label (informer-bench's); only they are edited.
SELECTOR = "app=bench-informer"
# Target: the live edits' p99 while the initial list drains, in seconds.
TARGET_P99_SECS = 1.0


class RunFailed(Exception):
    pass


def build():
    log("bench-latency: building latency-bench and informer-bench (release) and the Go peer")
    harness.cargo_build("--release", "-p", "latency-bench", "-p", "informer-bench")
    harness.go_build(THEIRS, "./cmd/latency-peer")


class Lines:
    """A process's stdout JSON lines, read on a thread as they come."""

    def __init__(self, proc, what):
        self.lines, self.what, self.proc = [], what, proc
        self.ended = False
        self.cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            if line.strip():
                msg = json.loads(line)
                with self.cond:
                    self.lines.append(msg)
                    self.cond.notify_all()
        with self.cond:
            self.ended = True
            self.cond.notify_all()

    def wait_for(self, done, timeout, step):
        """Waits until `done(lines)` is true; fails on timeout or if the stream ends first."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while not done(self.lines):
                left = deadline - time.monotonic()
                if self.ended or left <= 0:
                    why = "exited" if self.ended else f"did not within {timeout:.0f} s"
                    raise RunFailed(f"{step}: the {self.what} {why}")
                self.cond.wait(min(left, 1.0))

    def event(self, name):
        """The first line of event `name`, or None."""
        with self.cond:
            return next((m for m in self.lines if m.get("event") == name), None)

    def events(self, name):
        with self.cond:
            return [m for m in self.lines if m.get("event") == name]


def percentile(sorted_values, q):
    """The nearest-rank percentile `q` (0–1) of a sorted list."""
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


def served(edits, lives):
    """For each edit, the start of the first reconcile of its object that saw its stamp or a
    later one (unix ns), or None."""
    by_key = {}
    for live in lives:
        by_key.setdefault(live["key"], []).append(live)
    out = {}
    for e in edits:
        times = [l["unix_ns"] for l in by_key.get(e["key"], []) if l["seq"] >= e["seq"]]
        out[e["seq"]] = min(times) if times else None
    return out


def spawn(cmd, log_path):
    with open(log_path, "w") as log_file:
        return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=log_file, text=True)


def run(name, rnd, opts):
    """One run of one controller; its record."""
    tag = "ours" if name == "ours" else "cr"
    run_id = f"r{rnd}-{tag}-{time.time_ns()}"
    logs = os.path.join(OUT_DIR, "logs")
    os.makedirs(logs, exist_ok=True)
    if name == "ours":
        cmd = [OURS, "--kubeconfig", opts.kubeconfig, "--namespace", opts.namespace,
               "--run", run_id, "controller", "--timeout-secs", str(opts.drain_timeout)]
    else:
        cmd = [THEIRS, "-kubeconfig", opts.kubeconfig, "-namespace", opts.namespace,
               "-run", run_id, "-timeout", f"{opts.drain_timeout}s"]
    controller_log = os.path.join(logs, f"{tag}-round{rnd}.log")
    driver_log = os.path.join(logs, f"driver-{tag}-round{rnd}.log")
    controller = None
    # The driver first lists what it will edit, then waits for a line on its stdin.
    driver = spawn([OURS, "--kubeconfig", opts.kubeconfig, "--namespace", opts.namespace,
                    "--run", run_id, "edit", "--rate", str(opts.rate), "--selector", SELECTOR],
                   driver_log)
    try:
        edits_out = Lines(driver, f"driver ({driver_log})")
        edits_out.wait_for(lambda ls: any(m.get("event") == "ready" for m in ls), 60,
                           "the driver's start")
        controller = spawn(cmd, controller_log)
        out = Lines(controller, f"controller ({controller_log})")
        out.wait_for(lambda ls: any(m.get("event") == "synced" for m in ls),
                     opts.drain_timeout, "cache sync")
        synced = out.event("synced")
        driver.stdin.write("go\n")
        driver.stdin.flush()
        out.wait_for(lambda ls: any(m.get("event") == "drained" for m in ls),
                     opts.drain_timeout, "draining the initial list")
        drained = out.event("drained")
        driver.stdin.close()
        edits_out.wait_for(lambda ls: any(m.get("event") == "edits-done" for m in ls), 60,
                           "stopping the edits")
        if driver.wait(timeout=30) != 0:
            raise RunFailed(f"the driver exited {driver.returncode} (see {driver_log})")
        edits = edits_out.events("edit")

        def all_served(lines):
            lives = [m for m in lines if m.get("event") == "live"]
            return all(t is not None for t in served(edits, lives).values())
        try:
            out.wait_for(all_served, opts.settle_timeout, "reconciling every edit")
        except RunFailed:
            lost = [s for s, t in served(edits, out.events("live")).items() if t is None]
            raise RunFailed(f"{len(lost)} of {len(edits)} edits never reconciled "
                            f"(seqs {lost[:10]}…)")
        controller.stdin.close()
        if controller.wait(timeout=60) != 0:
            raise RunFailed(f"the controller exited {controller.returncode} "
                            f"(see {controller_log})")
    except RunFailed as failure:
        raise SystemExit(f"bench-latency: round {rnd}: {name}: {failure}")
    finally:
        for proc in (driver, controller):
            if proc is not None:
                harness.stop(proc)

    times = served(edits, out.events("live"))
    during = [e for e in edits if e["sent_unix_ns"] <= drained["unix_ns"]]
    live = sorted((times[e["seq"]] - e["sent_unix_ns"]) / 1e9 for e in during)
    first = drained["first_start_secs"]
    with open(os.path.join(OUT_DIR, f"initial-{tag}-round{rnd}.json"), "w") as f:
        json.dump(first, f)
    waits = sorted(first.values())
    rec = {
        "impl": name, "run": run_id, "objects": synced["objects"], "rate": opts.rate,
        "edits": len(during), "edits_after_drain": len(edits) - len(during),
        "synced_secs": synced["secs"], "drained_secs": drained["secs"],
        "initial_max_secs": waits[-1], "initial_p50_secs": percentile(waits, 0.5),
        "live_p50_secs": percentile(live, 0.5) if live else None,
        "live_p99_secs": percentile(live, 0.99) if live else None,
        "live_max_secs": live[-1] if live else None,
    }
    log(f"bench-latency:   {name}: {len(during)} live edits, p50 {fmt_ms(rec['live_p50_secs'])}, "
        f"p99 {fmt_ms(rec['live_p99_secs'])}; longest initial wait "
        f"{fmt_ms(rec['initial_max_secs'])} ({len(waits):,} keys, synced at "
        f"{fmt_ms(rec['synced_secs'])})")
    return rec


def main():
    parser = harness.parser(__doc__, rounds=3, what="controller")
    parser.add_argument("--no-seed", action="store_true", help="skip the cluster check and seeding")
    parser.add_argument("--kubeconfig", default=KUBECONFIG, help="default: the local cluster's")
    parser.add_argument("--namespace", default="bench-latency")
    parser.add_argument("--configmaps", type=int, default=10_000, help="ConfigMaps to seed")
    parser.add_argument("--rate", type=float, default=20.0, help="live edits a second")
    parser.add_argument("--drain-timeout", type=int, default=900,
                        help="seconds for the cache to sync and the initial list to drain")
    parser.add_argument("--settle-timeout", type=int, default=120,
                        help="seconds for the last edits to be reconciled after the drain")
    opts = harness.parse(parser)
    if opts.rate <= 0:
        parser.error("--rate must be positive")

    if not opts.no_build:
        build()
    if not opts.no_seed:
        if opts.kubeconfig == KUBECONFIG:
            harness.ensure_cluster("bench-latency")
        harness.seed("bench-latency", SEEDER, opts, 0)
    out_dir = harness.out_dir("bench-latency")

    def one_round(rnd, order):
        for name in order:
            log(f"bench-latency: round {rnd}/{opts.rounds}: {name}")
            yield run(name, rnd, opts)

    results = harness.run_rounds(out_dir, opts.rounds, IMPLS, one_round, key="impl")
    get, spread = results.get, results.spread

    objects = get("ours", "objects")
    print(f"Latency: ours vs controller-runtime v0.25.2, medians of {opts.rounds} alternating "
          f"rounds ({objects:,.0f} ConfigMaps in namespace {opts.namespace}, live edits at "
          f"{opts.rate:g}/s while the initial list drains; one worker, one GET per reconcile)")
    print()
    header = f"{'':<44} {'ours':>10} {'c-r':>10} {'ours/c-r':>10} {'(per round)':>12}"
    harness.print_header(header)
    rows = [
        ("live edit → reconcile-start p50", "live_p50_secs", fmt_ms),
        ("live edit → reconcile-start p99", "live_p99_secs", fmt_ms),
        ("live edit → reconcile-start max", "live_max_secs", fmt_ms),
        ("initial item: longest wait, from main", "initial_max_secs", fmt_ms),
        ("initial item: median wait, from main", "initial_p50_secs", fmt_ms),
        ("  cache synced, from main", "synced_secs", fmt_ms),
        ("live edits sent while draining", "edits", lambda n: "—" if n is None else f"{n:.0f}"),
    ]
    for label, field, fmt in rows:
        ours, other = get("ours", field), get(PEER, field)
        print(f"{label:<44} {fmt(ours):>10} {fmt(other):>10} "
              f"{fmt_ratio(ours, other):>10} {spread(field, 'ours', PEER):>12}")
    print()
    p99_ours, p99_theirs = get("ours", "live_p99_secs"), get(PEER, "live_p99_secs")
    if p99_ours is not None:
        met = "met" if p99_ours <= TARGET_P99_SECS else "NOT met"
        print(f"target: ours live p99 ≤ {TARGET_P99_SECS:g} s while the initial list drains: "
              f"{p99_ours:.2f} s — {met}")
    print()
    p99_ratio = fmt_ratio(p99_ours, p99_theirs)
    wait_ratio = fmt_ratio(get("ours", "initial_max_secs"), get(PEER, "initial_max_secs"))
    print(f"latency ours/controller-runtime: live p99 {harness.or_na(p99_ratio)}, "
          f"longest initial wait {harness.or_na(wait_ratio)}")
    return 0 if p99_ratio != "—" and wait_ratio != "—" else 1


if __name__ == "__main__":
    sys.exit(main())
