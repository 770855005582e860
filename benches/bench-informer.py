#!/usr/bin/env python3
"""Head-to-head of our informer against client-go's, in one run: `make bench-informer`.

Builds `informer-bench` (cmd/informer-bench) and the Go peer
(benches/clientgo/cmd/informer-peer), makes sure the real local cluster is up (`make
cluster`, which leaves a running cluster alone), seeds it (`informer-bench seed`: namespace
`bench-informer`, 10,000 ConfigMaps, 1,000 Running Pods; whatever exists is kept), then runs
the two programs alternately for several rounds (ours first in odd rounds, client-go first in
even ones, so drift in the machine's load hits both alike), takes the median of every figure
over the rounds, and prints a table. The last line is exactly

    informer sync ours/client-go: X.XX, bytes per object ours/client-go: Y.YY

where X is our median initial-sync time of the ConfigMaps informer divided by client-go's
(lower is better), and Y the largest ours/client-go ratio of median bytes per cached object
over the four cases (ConfigMaps and Pods, managedFields kept and stripped).

Ours runs three times per round: caching `Raw<K>` (JSON, decoded on demand; the
representation the last line reports), which lists and watches built-in kinds as protobuf
and transcodes it; the same asking for JSON only (`--json`); and caching k8s-openapi's typed
structs (over JSON), shown for comparison. client-go runs twice: as its users get it (typed
clients of built-in kinds ask the server for protobuf; the last line compares against this
one) and asking for JSON, beside our JSON run.

Ours (caching `Raw<K>`) also runs `informer/configmaps/strip/typed-reads`: the runtime's
cache (managedFields stripped) synced, then every ConfigMap read twice through the typed path
(`Raw::typed`, which decodes on the first read and keeps the result); the table shows the
bytes per object after every object was read once, beside client-go's stripped informer,
and what a read costs the first and the second time.

Every JSON line of every round is kept in target/bench-informer/rounds.jsonl.
"""

import os
import sys

import harness
from harness import KUBECONFIG, fmt_ms, fmt_ratio, log

OUT_DIR = os.path.join(harness.ROOT, "target", "bench-informer")
OURS = harness.release_bin("informer-bench")
THEIRS = os.path.join(OUT_DIR, "informer-peer")
SYNC = "informer/configmaps"
# Ours only: the runtime's cache (Raw, managedFields stripped) after every object was read
# once through the typed path, and the cost of a second read.
TYPED_READS = "informer/configmaps/strip/typed-reads"
LIST = "list/configmaps"
MEMORY = [
    ("informer/configmaps", "ConfigMaps, managedFields kept"),
    ("informer/configmaps/strip", "ConfigMaps, managedFields stripped"),
    ("informer/pods", "Pods, managedFields kept"),
    ("informer/pods/strip", "Pods, managedFields stripped"),
]
# Targets: our sync within this factor of our own paged LIST + decode, and no slower than
# client-go's informer.
SYNC_OVER_LIST_TARGET = 1.2


def build():
    log("bench-informer: building informer-bench (release) and the client-go peer")
    harness.cargo_build("--release", "-p", "informer-bench")
    harness.go_build(THEIRS, "./cmd/informer-peer")


def run(name, opts):
    """One round of one program: its JSON lines (progress goes straight to our stderr)."""
    if name.startswith("ours"):
        repr_ = name.split("/")[1]
        cmd = [OURS, "--kubeconfig", opts.kubeconfig, "--namespace", opts.namespace, "run",
               "--repr", repr_.removesuffix("-json")]
        if repr_.endswith("-json"):
            cmd.append("--json")
        if opts.only:
            cmd += ["--only", opts.only]
    else:
        cmd = [THEIRS, "-kubeconfig", opts.kubeconfig, "-namespace", opts.namespace]
        if name == "client-go/json":
            cmd.append("-json")
        if opts.only:
            cmd += ["-only", opts.only]
    records = harness.json_lines(cmd)
    for rec in records:
        if rec["impl"] == "ours":
            wire = "-json" if rec["repr"] == "raw" and rec["wire"] == "json" else ""
            rec["impl"] = f"ours/{rec['repr']}{wire}"
    return records


def main():
    parser = harness.parser(__doc__, rounds=7)
    parser.add_argument("--no-seed", action="store_true", help="skip the cluster check and seeding")
    parser.add_argument("--kubeconfig", default=KUBECONFIG, help="default: the local cluster's")
    parser.add_argument("--namespace", default="bench-informer")
    parser.add_argument("--configmaps", type=int, default=10_000, help="ConfigMaps to seed")
    parser.add_argument("--pods", type=int, default=1_000, help="Pods to seed")
    parser.add_argument("--only", help="run only the workloads whose name contains this text")
    opts = harness.parse(parser)

    if not opts.no_build:
        build()
    if not opts.no_seed:
        if opts.kubeconfig == KUBECONFIG:
            harness.ensure_cluster("bench-informer")
        harness.seed("bench-informer", OURS, opts, opts.pods)
    out_dir = harness.out_dir("bench-informer")

    impls = ["ours/raw", "ours/raw-json", "ours/typed", "client-go", "client-go/json"]
    one_round = harness.in_turn("bench-informer", opts.rounds, lambda name: run(name, opts))
    results = harness.run_rounds(out_dir, opts.rounds, impls, one_round, key=("impl", "workload"))
    by_round = results.by_round

    def get(impl, workload, field):
        return results.get((impl, workload), field)

    def spread(workload, field, ours_impl="ours/raw", theirs_impl="client-go", theirs_workload=None,
               theirs_field=None):
        """The range of the per-round ratios, e.g. `0.90–1.40`."""
        return results.spread(field, (ours_impl, workload),
                              (theirs_impl, theirs_workload or workload), theirs_field)

    objects = get("ours/raw", SYNC, "objects")
    pods = get("ours/raw", "informer/pods", "objects")
    print(
        f"Informer: ours vs client-go, medians of {opts.rounds} alternating rounds "
        f"({objects or 0:,.0f} ConfigMaps, {pods or 0:,.0f} Pods in namespace {opts.namespace})"
    )
    print()
    header = f"{'':<40} {'ours':>10} {'client-go':>10} {'ours/client-go':>15} {'(per round)':>12}"
    harness.print_header(header)

    sync_ours, sync_theirs = get("ours/raw", SYNC, "secs"), get("client-go", SYNC, "secs")
    list_ours, list_theirs = get("ours/raw", LIST, "secs"), get("client-go", LIST, "secs")
    print(
        f"{'initial sync, ConfigMaps informer':<40} {fmt_ms(sync_ours):>10} "
        f"{fmt_ms(sync_theirs):>10} {fmt_ratio(sync_ours, sync_theirs):>15} "
        f"{spread(SYNC, 'secs'):>12}"
    )
    print(
        f"{'paged LIST (500) + decode, ConfigMaps':<40} {fmt_ms(list_ours):>10} "
        f"{fmt_ms(list_theirs):>10} {fmt_ratio(list_ours, list_theirs):>15} "
        f"{spread(LIST, 'secs'):>12}"
    )
    print(
        f"{'sync ÷ own paged LIST':<40} {fmt_ratio(sync_ours, list_ours):>10} "
        f"{fmt_ratio(sync_theirs, list_theirs):>10} {'':>15} "
        f"{spread(SYNC, 'secs', 'ours/raw', 'ours/raw', LIST):>12}"
    )
    print()
    print(f"{'bytes per cached object (lower is better)':<40} {'ours':>10} {'client-go':>10} "
          f"{'ours/client-go':>15} {'(per round)':>12}")
    memory_ratios = []
    for workload, label in MEMORY:
        ours, theirs = get("ours/raw", workload, "bytes_per_object"), get(
            "client-go", workload, "bytes_per_object"
        )
        if ours is None or theirs is None:
            continue
        memory_ratios.append(ours / theirs)
        print(
            f"{label:<40} {ours:>10,.0f} {theirs:>10,.0f} {fmt_ratio(ours, theirs):>15} "
            f"{spread(workload, 'bytes_per_object'):>12}"
        )
    reads = TYPED_READS
    after_reads = get("ours/raw", reads, "bytes_per_object_after_reads")
    theirs_strip = get("client-go", "informer/configmaps/strip", "bytes_per_object")
    if after_reads is not None and theirs_strip is not None:
        print(
            f"{'ConfigMaps, stripped, every one read':<40} {after_reads:>10,.0f} "
            f"{theirs_strip:>10,.0f} {fmt_ratio(after_reads, theirs_strip):>15} "
            f"{spread(reads, 'bytes_per_object_after_reads', theirs_workload='informer/configmaps/strip', theirs_field='bytes_per_object'):>12}"
        )
        first = get("ours/raw", reads, "first_read_ns_per_object")
        second = get("ours/raw", reads, "second_read_ns_per_object")
        allocs = max(r["second_read_allocations"] for r in by_round[("ours/raw", reads)].values())
        print(f"  ours: the cached JSON plus the typed object each first read decoded and kept;")
        print(f"  a typed read takes {first:,.0f} ns/object the first time, {second:,.0f} ns the "
              f"second (allocations in it, worst round: {allocs})")
    for workload, label in MEMORY[2:3]:
        ours, theirs = get("ours/raw", workload, "secs"), get("client-go", workload, "secs")
        if ours is not None and theirs is not None:
            print()
            print(
                f"{'initial sync, Pods informer':<40} {fmt_ms(ours):>10} {fmt_ms(theirs):>10} "
                f"{fmt_ratio(ours, theirs):>15} {spread(workload, 'secs'):>12}"
            )

    print()
    print("ours caching typed k8s-openapi objects instead of Raw<K>, for comparison:")
    typed_rows = [("initial sync, ConfigMaps informer", SYNC, "secs", fmt_ms),
                  ("paged LIST (500) + decode, ConfigMaps", LIST, "secs", fmt_ms)]
    typed_rows += [(label, w, "bytes_per_object", lambda v: f"{v:,.0f}") for w, label in MEMORY]
    for label, workload, field, fmt in typed_rows:
        typed, theirs = get("ours/typed", workload, field), get("client-go", workload, field)
        if typed is None or theirs is None:
            continue
        print(
            f"{label:<40} {fmt(typed):>10} {fmt(theirs):>10} {fmt_ratio(typed, theirs):>15} "
            f"{spread(workload, field, 'ours/typed'):>12}"
        )

    print()
    print("both asking for JSON only (ours caching Raw<K>; client-go's default is protobuf):")
    for label, workload in [("initial sync, ConfigMaps informer", SYNC),
                            ("paged LIST (500) + decode, ConfigMaps", LIST),
                            ("initial sync, Pods informer", "informer/pods")]:
        ours = get("ours/raw-json", workload, "secs")
        json_ = get("client-go/json", workload, "secs")
        if ours is None or json_ is None:
            continue
        print(
            f"{label:<40} {fmt_ms(ours):>10} {fmt_ms(json_):>10} {fmt_ratio(ours, json_):>15} "
            f"{spread(workload, 'secs', 'ours/raw-json', 'client-go/json'):>12}"
        )

    print()
    if sync_ours is not None and list_ours:
        met = sync_ours / list_ours <= SYNC_OVER_LIST_TARGET
        print(
            f"target: our sync ≤ {SYNC_OVER_LIST_TARGET}× our paged LIST + decode: "
            f"{sync_ours / list_ours:.2f}× — {'met' if met else 'NOT met'}"
        )
    if sync_ours is not None and sync_theirs:
        met = sync_ours <= sync_theirs
        print(
            f"target: our sync no slower than client-go's: {sync_ours / sync_theirs:.2f}× — "
            f"{'met' if met else 'NOT met'}"
        )
    print()
    sync_ratio = harness.or_na(fmt_ratio(sync_ours, sync_theirs))
    mem_ratio = f"{max(memory_ratios):.2f}" if memory_ratios else "n/a"
    print(f"informer sync ours/client-go: {sync_ratio}, bytes per object ours/client-go: {mem_ratio}")
    return 0 if memory_ratios and sync_ratio != "n/a" else 1


if __name__ == "__main__":
    sys.exit(main())
