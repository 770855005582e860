#!/usr/bin/env bash
# Records testdata/watch/configmaps-1200.jsonl from the local cluster (`make cluster`):
# a watch on one namespace while 300 ConfigMaps are applied, applied twice more with a new
# `size`, and deleted: 1,200 events of the shape kube-rs benchmarks (two labels, the
# last-applied annotation, two data keys, one of 128 bytes, one managedFields entry), as
# the apiserver writes them. benches/watch_decode.rs replays it.
set -euo pipefail
cd "$(dirname "$0")/../.."
kubectl="target/testenv/bin/kubectl --kubeconfig target/testenv/kubeconfig"
ns=watch-record-$$
out=testdata/watch/configmaps-1200.jsonl
$kubectl create namespace "$ns" >/dev/null
rv=$($kubectl get --raw "/api/v1/namespaces/$ns/configmaps" | python3 -c 'import json,sys; print(json.load(sys.stdin)["metadata"]["resourceVersion"])')
$kubectl get --raw "/api/v1/namespaces/$ns/configmaps?watch=true&resourceVersion=$rv&timeoutSeconds=60" >"$out.tmp" &
watcher=$!
x128=$(printf 'x%.0s' $(seq 128))
manifest() {
  for i in $(seq 1 300); do
    printf -- '---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-%05d\n  labels: {app: memcached, bench: decode}\ndata:\n  size: "%d"\n  padding: %s\n' "$i" "$(($i * $1))" "$x128"
  done
}
# Every change goes through the same manager, so each object keeps one managedFields entry.
for round in 1 2 3; do manifest "$round" | $kubectl apply -n "$ns" -f - >/dev/null; done
$kubectl delete configmap -n "$ns" -l bench=decode --wait=false >/dev/null
until [ "$(grep -c '"type":"DELETED"' "$out.tmp" || true)" -ge 300 ]; do sleep 0.2; done
kill "$watcher" 2>/dev/null || true
wait "$watcher" 2>/dev/null || true
grep -v '"type":"BOOKMARK"' "$out.tmp" >"$out"
rm "$out.tmp"
$kubectl delete namespace "$ns" --wait=false >/dev/null
echo "recorded $(wc -l <"$out") events, $(wc -c <"$out") bytes, into $out"
