#!/usr/bin/env python3
"""Head-to-head of our workqueue against client-go's, in one run: `make bench-queue`.

Builds `queue-bench` (cmd/queue-bench, ours plus the MPMC-channel ceiling) and the Go peer
(benches/clientgo), runs them alternately for several rounds (ours first in odd rounds,
client-go first in even ones, so drift in the machine's load hits both alike), takes the
median of every figure over the rounds, and prints a table. The last line is exactly
`min ratio ours/client-go: X.XX`, the smallest ours/client-go ratio over the add → get → done
throughput workloads. The `cycle/prio` rows add half the keys at priority -100 and half at 0;
their peer (in the client-go column) is controller-runtime's priority queue, the queue a
controller gets by default on either side.

Every JSON line of every round is kept in target/bench-queue/rounds.jsonl.
"""

import argparse
import os
import sys

import harness
from harness import fmt_ratio, log

OUT_DIR = os.path.join(harness.ROOT, "target", "bench-queue")
OURS = harness.release_bin("queue-bench")
THEIRS = os.path.join(OUT_DIR, "clientgo-bench")
CYCLE_ORDER = (
    [f"cycle/{keys}/p{n}w{n}" for keys in ("unique", "repeat") for n in (1, 2, 4, 8)]
    + ["cycle/unique/1thread"]
    + [f"cycle/prio/p{n}w{n}" for n in (1, 2)]
)


def build():
    log("bench-queue: building queue-bench (release) and the client-go peer")
    harness.cargo_build("--release", "-p", "queue-bench")
    harness.go_build(THEIRS)


def fmt_rate(value):
    return "—" if value is None else f"{value / 1e6:.2f} M/s"


def main():
    parser = harness.parser(__doc__, rounds=7)
    parser.add_argument(
        "args", nargs=argparse.REMAINDER, help="after --, flags passed to both programs"
    )
    opts = harness.parse(parser)
    extra = [a for a in opts.args if a != "--"]

    if not opts.no_build:
        build()
    out_dir = harness.out_dir("bench-queue")
    binaries = {"ours": OURS, "client-go": THEIRS}
    one_round = harness.in_turn(
        "bench-queue", opts.rounds, lambda name: harness.json_lines([binaries[name], *extra])
    )
    results = harness.run_rounds(
        out_dir, opts.rounds, ["ours", "client-go"], one_round, key=("impl", "workload")
    )
    by_round = results.by_round

    def get(impl, workload, field):
        return results.get((impl, workload), field)

    def spread(workload, field):
        """The range of the per-round ours/client-go ratios, e.g. `2.10–3.40`."""
        return results.spread(field, ("ours", workload), ("client-go", workload))

    print(
        f"Workqueue: ours vs client-go, medians of {opts.rounds} alternating rounds "
        "(throughput in adds/s)"
    )
    print()
    header = (
        f"{'workload':<24} {'ours':>11} {'client-go':>11} {'ours/client-go':>15} "
        f"{'(per round)':>12} {'channel':>11} {'ours/channel':>13}  "
        f"{'processed ours / client-go':>27}"
    )
    harness.print_header(header)
    ratios = []
    for workload in CYCLE_ORDER:
        ours = get("ours", workload, "adds_per_sec")
        theirs = get("client-go", workload, "adds_per_sec")
        chan = get("channel", workload, "adds_per_sec")
        if ours is None or theirs is None:
            continue
        ratios.append(ours / theirs)
        processed = (
            f"{get('ours', workload, 'processed'):,.0f} / "
            f"{get('client-go', workload, 'processed'):,.0f}"
        )
        print(
            f"{workload:<24} {fmt_rate(ours):>11} {fmt_rate(theirs):>11} "
            f"{fmt_ratio(ours, theirs):>15} {spread(workload, 'adds_per_sec'):>12} "
            f"{fmt_rate(chan):>11} {fmt_ratio(ours, chan):>13}  {processed:>27}"
        )

    ins = "add_after/insert"
    if by_round[("ours", ins)] and by_round[("client-go", ins)]:
        items = get("ours", ins, "items")
        ours, theirs = get("ours", ins, "inserts_per_sec"), get("client-go", ins, "inserts_per_sec")
        print()
        print(f"add_after with {items:,.0f} pending (u64 keys in Rust, int keys in Go):")
        print(
            f"  {'insert rate':<28} {fmt_rate(ours):>11} {fmt_rate(theirs):>11} "
            f"{fmt_ratio(ours, theirs):>15} {spread(ins, 'inserts_per_sec'):>12}"
        )
        ours, theirs = get("ours", ins, "bytes_per_item"), get("client-go", ins, "bytes_per_item")
        print(
            f"  {'bytes per pending item':<28} {ours:>11.1f} {theirs:>11.1f} "
            f"{fmt_ratio(ours, theirs):>15}  (lower is better)"
        )

    late = "add_after/lateness"
    if by_round[("ours", late)] and by_round[("client-go", late)]:
        items = get("ours", late, "items")
        print()
        print(f"firing lateness, one worker waiting in get, {items:,.0f} pending:")
        for field, label in (("p50_us", "p50"), ("p99_us", "p99"), ("max_us", "max")):
            ours, theirs = get("ours", late, field), get("client-go", late, field)
            print(f"  {label:<28} {ours:>8.0f} µs {theirs:>8.0f} µs")
        rounds = ", ".join(
            f"{by_round[('ours', late)][r]['p99_us']:.0f}" for r in sorted(by_round[("ours", late)])
        )
        print(f"  ours p99 by round (µs): {rounds}")

    print()
    if not ratios:
        print("min ratio ours/client-go: n/a")
        return 1
    print(f"min ratio ours/client-go: {min(ratios):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
