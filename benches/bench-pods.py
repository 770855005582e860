#!/usr/bin/env python3
"""Memory of one informer over 100,000 Pods, ours against client-go's, in one run: `make bench-pods`.

Builds `informer-bench` (cmd/informer-bench) and the Go peer (benches/clientgo/cmd/pods-peer),
makes sure the real local cluster is up, seeds it (`informer-bench pods-seed`: namespace
`pods-100k`, 100,000 Pods bound straight to the kwok nodes, created 64 at a time; the
status kwok would write (Running, Ready, an IP) is written 64 at a time too for the Pods kwok
has not reached, since kwok runs about 20 Pods a second; Pods that exist are kept, so a second
run reuses them), then runs the two programs alternately for several rounds (ours first in odd rounds,
client-go first in even ones), and deletes the Pods and the namespace at the end
(`informer-bench pods-clean`; `--keep` leaves them for the next run).

Each program runs one informer over the namespace's Pods with managedFields stripped by its
transform (ours: `Raw<Pod>`, the runtime's cache, listed and watched as protobuf; client-go:
its typed informer, protobuf too, with a transform that clears managedFields), one fresh
process per round, stepped over stdin and stdout (see `informer-bench pods-run`). This
script reads the process's memory from /proc/<pid>/status every 50 ms and at each step:

* baseline: RSS once the client is connected, before the informer is made;
* peak: the highest RSS up to the end of the settle (VmHWM, the kernel's exact high-water
  mark, which the 50 ms samples never exceed), minus the baseline;
* settled: RSS after the sync and a settle (5 s), minus the baseline;
* heap: the heap the running informer holds after the settle, counted by each side's own
  allocator statistics (ours: glibc malloc chunks, counted by the global allocator; client-go:
  `HeapAlloc` after a `runtime.GC`), minus the same at the baseline.

Bytes per Pod are these divided by the Pods cached. The last line is exactly

    pods 100k ours/client-go: settled X.XX; ours peak/settled Y.YY

where X is the larger of the two ours/client-go ratios of median settled bytes per Pod (RSS
and heap), and Y our median peak RSS above baseline over the smaller of our median settled
RSS and heap (an RSS that never falls back after the sync would hide the peak in the settled
RSS; the heap is what the cache holds).
Targets: X ≤ 0.5, Y ≤ 1.3. Every round's records and RSS samples are kept in
target/bench-pods/rounds.jsonl.
"""

import json
import os
import queue
import subprocess
import sys
import threading
import time

import harness
from harness import KUBECONFIG, fmt_ratio, log

OUT_DIR = os.path.join(harness.ROOT, "target", "bench-pods")
OURS = harness.release_bin("informer-bench")
THEIRS = os.path.join(OUT_DIR, "pods-peer")
SAMPLE_EVERY = 0.05
SETTLED_TARGET = 0.5
PEAK_TARGET = 1.3


def build():
    log("bench-pods: building informer-bench (release) and the client-go peer")
    harness.cargo_build("--release", "-p", "informer-bench")
    harness.go_build(THEIRS, "./cmd/pods-peer")


def status(pid):
    """VmRSS and VmHWM of a process, in bytes."""
    mem = harness.memory_of(pid)
    return mem["VmRSS"], mem["VmHWM"]


def run(name, opts):
    """One fresh process of one program, stepped through its phases while its memory is
    sampled; its record."""
    if name == "ours":
        cmd = [opts.ours, "--kubeconfig", opts.kubeconfig, "--namespace", opts.namespace, "pods-run",
               "--settle-ms", str(opts.settle_ms)]
    else:
        cmd = [THEIRS, "-kubeconfig", opts.kubeconfig, "-namespace", opts.namespace,
               "-settle", f"{opts.settle_ms}ms"]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    lines = queue.Queue()

    def read():
        for line in proc.stdout:
            if line.strip():
                lines.put(json.loads(line))
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    rec = {"impl": name}
    samples = []  # (seconds since go, RSS)
    go_at = None

    def go():
        proc.stdin.write("go\n")
        proc.stdin.flush()

    try:
        while True:
            try:
                msg = lines.get(timeout=SAMPLE_EVERY)
            except queue.Empty:
                msg = False
            if go_at is not None and proc.poll() is None:
                try:
                    rss, _ = status(proc.pid)
                    samples.append((round(time.monotonic() - go_at, 3), rss))
                except (FileNotFoundError, ProcessLookupError, KeyError):
                    pass
            if msg is False:
                continue
            if msg is None:
                break
            phase = msg["phase"]
            if phase == "ready":
                rec["baseline_rss"], _ = status(proc.pid)
                go_at = time.monotonic()
                go()
            elif phase == "synced":
                rss, hwm = status(proc.pid)
                rec.update(objects=msg["objects"], secs=msg["secs"], synced_rss=rss,
                           synced_hwm=hwm, synced_heap=msg["heap_bytes"])
            elif phase == "settled":
                rss, hwm = status(proc.pid)
                rec.update(settled_rss=rss, hwm=hwm)
                go()
            elif phase == "heap":
                rec.update(heap=msg["heap_bytes"], objects=msg["objects"])
                proc.stdin.close()
    finally:
        if proc.wait(timeout=60) != 0:
            raise SystemExit(f"bench-pods: {name} failed (exit {proc.returncode})")
    base = rec["baseline_rss"]
    n = max(rec["objects"], 1)
    rec["sampled_peak_rss"] = max((rss for _, rss in samples), default=0)
    rec["peak_per_pod"] = (rec["hwm"] - base) / n
    rec["settled_per_pod"] = (rec["settled_rss"] - base) / n
    rec["heap_per_pod"] = rec["heap"] / n
    rec["samples"] = samples
    log(f"bench-pods: {name:>9}: {rec['objects']:,} Pods synced in {rec['secs']:.1f} s; per Pod: "
        f"peak {rec['peak_per_pod']:,.0f} B, settled RSS {rec['settled_per_pod']:,.0f} B, "
        f"heap {rec['heap_per_pod']:,.0f} B (baseline {base / 2**20:.1f} MiB)")
    return [rec]


def main():
    parser = harness.parser(__doc__, rounds=3)
    parser.add_argument("--no-seed", action="store_true", help="skip the cluster check and seeding")
    parser.add_argument("--keep", action="store_true", help="leave the Pods for the next run")
    parser.add_argument("--kubeconfig", default=KUBECONFIG, help="default: the local cluster's")
    parser.add_argument("--namespace", default="pods-100k")
    parser.add_argument("--pods", type=int, default=100_000, help="Pods to seed")
    parser.add_argument("--settle-ms", type=int, default=5_000)
    parser.add_argument("--ours", default=OURS,
                        help="the informer-bench binary whose pods-run is measured (default: "
                             "the release build), e.g. a copy built before a change")
    opts = harness.parse(parser)

    if not opts.no_build:
        build()
    if not opts.no_seed:
        if opts.kubeconfig == KUBECONFIG:
            harness.ensure_cluster("bench-pods")
        log(f"bench-pods: seeding {opts.pods:,} Pods in {opts.namespace} (existing ones are kept)")
        subprocess.run([OURS, "--kubeconfig", opts.kubeconfig, "--namespace", opts.namespace,
                        "pods-seed", "--pods", str(opts.pods)], check=True)
    out_dir = harness.out_dir("bench-pods")
    try:
        one_round = harness.in_turn("bench-pods", opts.rounds, lambda name: run(name, opts))
        results = harness.run_rounds(out_dir, opts.rounds, ["ours", "client-go"], one_round,
                                     key="impl")
    finally:
        if not opts.keep:
            log(f"bench-pods: deleting the Pods and namespace {opts.namespace}")
            subprocess.run([OURS, "--kubeconfig", opts.kubeconfig, "--namespace",
                            opts.namespace, "pods-clean"], check=True)

    def get(impl, field):
        return results.get(impl, field)

    pods = get("ours", "objects")
    print(f"Pods informer, managedFields stripped: ours vs client-go, medians of {opts.rounds} "
          f"alternating rounds ({pods or 0:,.0f} Pods in namespace {opts.namespace})")
    print()
    header = f"{'':<36} {'ours':>10} {'client-go':>10} {'ours/client-go':>15} {'(per round)':>12}"
    harness.print_header(header)
    rows = [("settled RSS, bytes per Pod", "settled_per_pod"),
            ("settled heap, bytes per Pod", "heap_per_pod"),
            ("peak RSS, bytes per Pod", "peak_per_pod")]
    for label, field in rows:
        ours, theirs = get("ours", field), get("client-go", field)
        print(f"{label:<36} {ours:>10,.0f} {theirs:>10,.0f} {fmt_ratio(ours, theirs):>15} "
              f"{results.spread(field, 'ours', 'client-go'):>12}")
    ours_base, theirs_base = get("ours", "baseline_rss"), get("client-go", "baseline_rss")
    print(f"{'baseline RSS':<36} {harness.fmt_mib(ours_base):>10} "
          f"{harness.fmt_mib(theirs_base):>10}")
    ours_secs, theirs_secs = get("ours", "secs"), get("client-go", "secs")
    print(f"{'initial sync':<36} {ours_secs:>8.1f} s {theirs_secs:>8.1f} s "
          f"{fmt_ratio(ours_secs, theirs_secs):>15} {results.spread('secs', 'ours', 'client-go'):>12}")
    print()
    # A process's RSS rarely falls back after a peak (glibc keeps freed chunks, Go returns
    # pages slowly), so peak ÷ settled RSS alone would hide the peak in the settled figure;
    # peak ÷ settled heap compares the peak with what the cache holds. The target takes the
    # larger of the two.
    peak_ratio = {}
    for impl in ("ours", "client-go"):
        peak = get(impl, "peak_per_pod")
        over_rss, over_heap = peak / get(impl, "settled_per_pod"), peak / get(impl, "heap_per_pod")
        peak_ratio[impl] = max(over_rss, over_heap)
        print(f"{impl + ': peak RSS ÷ settled RSS':<36} {over_rss:>10.2f}   ÷ settled heap {over_heap:.2f}")
    settled = max(get("ours", f) / get("client-go", f) for f in ("settled_per_pod", "heap_per_pod"))
    harness.target_line("settled bytes per Pod (the larger of RSS and heap)", settled,
                        SETTLED_TARGET, "client-go")
    met = "met" if peak_ratio["ours"] <= PEAK_TARGET else "NOT met"
    print(f"target: our peak ≤ {PEAK_TARGET}× our settled: {peak_ratio['ours']:.2f}× — {met}")
    print()
    print(f"pods 100k ours/client-go: settled {settled:.2f}; ours peak/settled {peak_ratio['ours']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
