#!/usr/bin/env python3
"""Head-to-head of our workqueue against client-go's, in one run: `make bench-queue`.

Builds `queue-bench` (cmd/queue-bench, ours plus the MPMC-channel ceiling) and the Go peer
(benches/clientgo), runs them alternately for several rounds (ours first in odd rounds,
client-go first in even ones, so drift in the machine's load hits both alike), takes the
median of every figure over the rounds, and prints a table. The last line is exactly
`min ratio ours/client-go: X.XX`, the smallest ours/client-go ratio over the add → get → done
throughput workloads.

Every JSON line of every round is kept in target/bench-queue/rounds.jsonl.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "target", "bench-queue")
# Honour CARGO_TARGET_DIR, so the build does not contend with others on target/.
TARGET_DIR = os.path.join(ROOT, os.environ.get("CARGO_TARGET_DIR", "target"))
OURS = os.path.join(TARGET_DIR, "release", "queue-bench")
THEIRS = os.path.join(OUT_DIR, "clientgo-bench")
CYCLE_ORDER = [
    f"cycle/{keys}/p{n}w{n}" for keys in ("unique", "repeat") for n in (1, 2, 4, 8)
] + ["cycle/unique/1thread"]


def log(message):
    print(message, file=sys.stderr, flush=True)


def build():
    log("bench-queue: building queue-bench (release) and the client-go peer")
    subprocess.run(
        ["cargo", "build", "--release", "--quiet", "-p", "queue-bench"], cwd=ROOT, check=True
    )
    os.makedirs(OUT_DIR, exist_ok=True)
    subprocess.run(
        ["go", "build", "-trimpath", "-o", THEIRS, "."],
        cwd=os.path.join(ROOT, "benches", "clientgo"),
        check=True,
    )


def run(binary, extra):
    """One round of one program: its JSON lines (progress goes straight to our stderr)."""
    out = subprocess.run([binary, *extra], check=True, stdout=subprocess.PIPE, text=True)
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def median(values):
    return statistics.median(values) if values else None


def fmt_rate(value):
    return "—" if value is None else f"{value / 1e6:.2f} M/s"


def fmt_ratio(a, b):
    return "—" if a is None or not b else f"{a / b:.2f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="rounds of each program (default 7)")
    parser.add_argument("--no-build", action="store_true", help="use the binaries already built")
    parser.add_argument(
        "args", nargs=argparse.REMAINDER, help="after --, flags passed to both programs"
    )
    opts = parser.parse_args()
    extra = [a for a in opts.args if a != "--"]
    if opts.rounds < 1:
        parser.error("--rounds must be at least 1")

    if not opts.no_build:
        build()
    os.makedirs(OUT_DIR, exist_ok=True)

    # (impl, workload) -> field -> [value per round]
    results = defaultdict(lambda: defaultdict(list))
    # (impl, workload) -> round -> record
    by_round = defaultdict(dict)
    with open(os.path.join(OUT_DIR, "rounds.jsonl"), "w") as raw:
        for rnd in range(1, opts.rounds + 1):
            order = [("ours", OURS), ("client-go", THEIRS)]
            if rnd % 2 == 0:
                order.reverse()
            for name, binary in order:
                log(f"bench-queue: round {rnd}/{opts.rounds}: {name}")
                for rec in run(binary, extra):
                    rec["round"] = rnd
                    raw.write(json.dumps(rec) + "\n")
                    by_round[(rec["impl"], rec["workload"])][rnd] = rec
                    for field, value in rec.items():
                        if isinstance(value, (int, float)) and field != "round":
                            results[(rec["impl"], rec["workload"])][field].append(value)

    def get(impl, workload, field):
        return median(results[(impl, workload)][field])

    def spread(workload, field):
        """The range of the per-round ours/client-go ratios, e.g. `2.10–3.40`."""
        ours, theirs = by_round[("ours", workload)], by_round[("client-go", workload)]
        ratios = [
            ours[r][field] / theirs[r][field]
            for r in ours
            if r in theirs and theirs[r].get(field)
        ]
        return f"{min(ratios):.2f}–{max(ratios):.2f}" if ratios else "—"

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
    print(header)
    print("-" * len(header))
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
    if results[("ours", ins)] and results[("client-go", ins)]:
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
    if results[("ours", late)] and results[("client-go", late)]:
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
