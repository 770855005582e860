#!/usr/bin/env python3
"""Head-to-head of our runtime against controller-runtime, in one run: `make bench-runtime`.

Builds `runtime-bench` (cmd/runtime-bench, release) and the Go peer
(benches/clientgo/cmd/runtime-peer, controller-runtime v0.25.2 on client-go v0.36), makes
sure the real local cluster is up (`make cluster`, which leaves a running cluster alone),
seeds it (`informer-bench seed`: namespace `bench-informer`, 10,000 ConfigMaps; whatever
exists is kept), runs each program once to warm up (ours counting the namespace's
ConfigMaps for the rest), then runs the programs alternately for
several rounds (ours first in odd rounds, controller-runtime first in even ones, so drift in
the machine's load hits both alike), takes the median of every figure over the rounds and
prints a table. The last line is exactly

    runtime ours/controller-runtime: start-to-all-reconciled X.XX, rss Y.YY

where X is our median time from the start of `main` until every ConfigMap of the namespace
was reconciled once, divided by controller-runtime's, and Y our median resident memory
(VmRSS) after the run divided by controller-runtime's; lower is better for both.

Each program is a manager with one controller `For` ConfigMaps and a no-op reconciler that
reads the object from the cache and counts distinct keys, the cache limited to the
namespace, no metrics, probes or leader election. Each prints one line on stdout the moment
every key has been reconciled (the harness timestamps it, for the time from spawning the
process, Go's runtime and package initialisation included), then one JSON line with its own
figures. controller-runtime runs twice per round: as its users get it (managedFields kept in
the cache; the last line compares against this one) and with
`cache.TransformStripManagedFields`, as our cache does by default.
Ours runs twice per round as well: with the cache's defaults (each read decodes the cached
JSON afresh; the last line compares this one) and with `CacheOptions::keep_typed` (the first
read of each object keeps its typed form beside the JSON).

Every JSON line of every round is kept in target/bench-runtime/rounds.jsonl.
"""

import json
import os
import subprocess
import sys
import time

import harness
from harness import KUBECONFIG, fmt_mib, fmt_ms, fmt_ratio, log

OUT_DIR = os.path.join(harness.ROOT, "target", "bench-runtime")
OURS = harness.release_bin("runtime-bench")
SEEDER = harness.release_bin("informer-bench")
THEIRS = os.path.join(OUT_DIR, "runtime-peer")
PEER = "controller-runtime"
IMPLS = ["ours", "ours/keep", PEER, f"{PEER}/strip"]
# With --read-your-writes: ours with it off, controller-runtime with it on.
OURS_NO_RYW = "ours/no-ryw"
PEER_RYW = f"{PEER}/ryw"
# Targets: ours at most this fraction of controller-runtime's, for both figures.
TARGET = 0.5


def build():
    log("bench-runtime: building runtime-bench and informer-bench (release) and the Go peer")
    harness.cargo_build("--release", "-p", "runtime-bench", "-p", "informer-bench")
    harness.go_build(THEIRS, "./cmd/runtime-peer")


def run(name, opts, expect):
    """One run of one program: its JSON record, with `wall_secs` (spawn to the moment it
    said every key was reconciled) added. With `expect` 0 the program waits for as many keys
    as its cache holds once synced."""
    if name.startswith("ours"):
        cmd = [OURS, "--kubeconfig", opts.kubeconfig, "--namespace", opts.namespace,
               "--expect", str(expect)]
        if name == "ours/keep":
            cmd.append("--keep-typed")
        if name == OURS_NO_RYW:
            cmd.append("--no-read-your-writes")
    else:
        cmd = [THEIRS, "-kubeconfig", opts.kubeconfig, "-namespace", opts.namespace,
               "-expect", str(expect)]
        if name.endswith("/strip"):
            cmd.append("-strip")
        if name == PEER_RYW:
            cmd.append("-read-your-writes")
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    wall = None
    record = None
    for line in proc.stdout:
        if not line.strip():
            continue
        msg = json.loads(line)
        if msg.get("event") == "reconciled":
            wall = time.perf_counter() - start
        elif "impl" in msg:
            record = msg
    if proc.wait() != 0 or record is None:
        raise SystemExit(f"bench-runtime: {name} failed (exit {proc.returncode})")
    record["wall_secs"] = wall
    record["reconcile_secs"] = record["secs"] - record["synced_secs"]
    return record


def main():
    parser = harness.parser(__doc__, rounds=7)
    parser.add_argument("--no-seed", action="store_true", help="skip the cluster check and seeding")
    parser.add_argument("--kubeconfig", default=KUBECONFIG, help="default: the local cluster's")
    parser.add_argument("--namespace", default="bench-informer")
    parser.add_argument("--configmaps", type=int, default=10_000, help="ConfigMaps to seed")
    parser.add_argument("--read-your-writes", action="store_true",
                        help="also run ours with read-your-own-writes off "
                             "(--no-read-your-writes) and controller-runtime with it on "
                             "(-read-your-writes), and report each on and off")
    opts = harness.parse(parser)
    impls = IMPLS + ([OURS_NO_RYW, PEER_RYW] if opts.read_your_writes else [])

    if not opts.no_build:
        build()
    if not opts.no_seed:
        if opts.kubeconfig == KUBECONFIG:
            harness.ensure_cluster("bench-runtime")
        harness.seed("bench-runtime", SEEDER, opts, 0)
    # A warm-up run of each program, not counted: it loads the binaries into the page cache
    # and warms the server, and ours counts the namespace's ConfigMaps (the seeded ones and
    # kube-root-ca.crt), which every later run then waits for.
    log("bench-runtime: warm-up (not counted)")
    expect = run("ours", opts, 0)["objects"]
    run(PEER, opts, expect)
    log(f"bench-runtime: {expect} ConfigMaps in namespace {opts.namespace}")
    out_dir = harness.out_dir("bench-runtime")

    one_round = harness.in_turn("bench-runtime", opts.rounds,
                                lambda name: [run(name, opts, expect)])
    results = harness.run_rounds(out_dir, opts.rounds, impls, one_round, key="impl")
    get, spread = results.get, results.spread

    rows = [
        ("start to all reconciled, from main", "secs", fmt_ms),
        ("  … from spawning the process", "wall_secs", fmt_ms),
        ("  manager built, from main", "built_secs", fmt_ms),
        ("  cache synced, from main", "synced_secs", fmt_ms),
        ("  then reconciling every object", "reconcile_secs", fmt_ms),
        ("resident memory after the run (VmRSS)", "rss_bytes", fmt_mib),
        ("peak resident memory (VmHWM)", "hwm_bytes", fmt_mib),
    ]
    print(
        f"Runtime: ours vs controller-runtime v0.25.2, medians of {opts.rounds} alternating "
        f"rounds ({expect:,} ConfigMaps in namespace {opts.namespace}, no-op reconciler)"
    )
    print()
    header = (f"{'':<40} {'ours':>10} {'c-r':>10} {'ours/c-r':>10} {'(per round)':>12}")
    harness.print_header(header)
    sections = [
        ("ours", PEER, "controller-runtime (c-r) as shipped: managedFields kept"),
        ("ours", f"{PEER}/strip",
         "c-r stripping managedFields (TransformStripManagedFields), as our cache does"),
        ("ours/keep", PEER, "ours keeping typed forms (CacheOptions::keep_typed) against c-r "
                            "as shipped"),
    ]
    for i, (mine, theirs, title) in enumerate(sections):
        if i:
            print()
        print(title)
        for label, field, fmt in rows:
            ours, other = get(mine, field), get(theirs, field)
            print(f"{label:<40} {fmt(ours):>10} {fmt(other):>10} "
                  f"{fmt_ratio(ours, other):>10} {spread(field, mine, theirs):>12}")
    if opts.read_your_writes:
        print()
        print("read-your-own-writes: on (ours' default) and off (controller-runtime's default)")
        header = (f"{'':<40} {'ours on':>10} {'ours off':>10} {'on/off':>8} "
                  f"{'c-r on':>10} {'c-r off':>10} {'on/off':>8}")
        harness.print_header(header)
        for label, field, fmt in rows:
            on, off = get("ours", field), get(OURS_NO_RYW, field)
            their_on, their_off = get(PEER_RYW, field), get(PEER, field)
            print(f"{label:<40} {fmt(on):>10} {fmt(off):>10} {fmt_ratio(on, off):>8} "
                  f"{fmt(their_on):>10} {fmt(their_off):>10} {fmt_ratio(their_on, their_off):>8}")
    print()
    time_ours, time_theirs = get("ours", "secs"), get(PEER, "secs")
    rss_ours, rss_theirs = get("ours", "rss_bytes"), get(PEER, "rss_bytes")
    for what, ours, theirs in [("start to all reconciled", time_ours, time_theirs),
                               ("resident memory after the run", rss_ours, rss_theirs)]:
        if ours is not None and theirs:
            harness.target_line(what, ours / theirs, TARGET, "controller-runtime")
    print()
    time_ratio = fmt_ratio(time_ours, time_theirs)
    rss_ratio = fmt_ratio(rss_ours, rss_theirs)
    print(f"runtime ours/controller-runtime: start-to-all-reconciled "
          f"{harness.or_na(time_ratio)}, rss {harness.or_na(rss_ratio)}")
    return 0 if time_ratio != "—" and rss_ratio != "—" else 1


if __name__ == "__main__":
    sys.exit(main())
