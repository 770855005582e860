#!/usr/bin/env bash
# Runs benches/watch_decode.rs on one core and prints events per second (100,000 events over
# criterion's median time per iteration) for each decoding: JSON into typed `ConfigMap`s,
# protobuf transcoded into `Raw<ConfigMap>`, then, as the last line, `watch decode events/s:
# N` for JSON into `Raw<ConfigMap>`, what informers cache.
set -euo pipefail
cd "$(dirname "$0")/.."
pin=()
command -v taskset >/dev/null && pin=(taskset -c 0)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"${pin[@]}" cargo bench --bench watch_decode -- --output-format bencher | tee "$out"
events=$(grep -oE 'configmaps_[0-9]+_events' "$out" | grep -oE '[0-9]+' | head -1)
rate() { # events/s of the bench whose name ends in /$1
  local ns
  ns=$(grep -E "/$1 +\.\.\. bench:" "$out" | grep -oE 'bench: +[0-9,]+ ns/iter' | grep -oE '[0-9,]+' | tr -d , | head -1)
  [ -n "$ns" ] || { echo "bench-decode: no result for $1 in criterion's output" >&2; exit 1; }
  echo $(( events * 1000000000 / ns ))
}
typed=$(rate typed)
protobuf=$(rate protobuf)
raw=$(rate raw)
echo "watch decode events/s into typed ConfigMap: $typed"
echo "watch decode events/s of protobuf into Raw<ConfigMap>: $protobuf"
echo "watch decode events/s: $raw"
