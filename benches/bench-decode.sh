#!/usr/bin/env bash
# Runs benches/watch_decode.rs on one core and prints, as its last line,
# `watch decode events/s: N` (100,000 events over criterion's median time per iteration).
set -euo pipefail
cd "$(dirname "$0")/.."
pin=()
command -v taskset >/dev/null && pin=(taskset -c 0)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"${pin[@]}" cargo bench --bench watch_decode -- --output-format bencher | tee "$out"
ns=$(grep -oE 'bench: +[0-9,]+ ns/iter' "$out" | grep -oE '[0-9,]+' | tr -d , | head -1)
[ -n "$ns" ] || { echo "bench-decode: no result in criterion's output" >&2; exit 1; }
events=$(grep -oE 'configmaps_[0-9]+_events' "$out" | grep -oE '[0-9]+' | head -1)
echo "watch decode events/s: $(( events * 1000000000 / ns ))"
