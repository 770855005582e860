#!/usr/bin/env bash
# Records testdata/watch/configmaps-1200.jsonl and configmaps-1200.pb from the local cluster
# (`make cluster`): two watches on one namespace, one asking for JSON and one for protobuf
# (`application/vnd.kubernetes.protobuf;stream=watch`), both from the same resourceVersion,
# while 300 ConfigMaps are applied, applied twice more with a new `size`, and deleted: the
# same 1,200 events in both encodings, of the shape kube-rs benchmarks (two labels, the
# last-applied annotation, two data keys, one of 128 bytes, one managedFields entry), as the
# apiserver writes them. benches/watch_decode.rs and benches/informer.rs replay them;
# src/client/proto_json.rs checks that each protobuf event transcodes to its JSON twin.
set -euo pipefail
cd "$(dirname "$0")/../.."
kubeconfig=target/testenv/kubeconfig
kubectl="target/testenv/bin/kubectl --kubeconfig $kubeconfig"
ns=watch-record-$$
out=testdata/watch/configmaps-1200.jsonl
pb=testdata/watch/configmaps-1200.pb
pki=$(mktemp -d)
trap 'rm -rf "$pki"' EXIT
. testdata/watch/testenv-pki.sh
server=$(testenv_pki "$kubeconfig" "$pki")
$kubectl create namespace "$ns" >/dev/null
rv=$($kubectl get --raw "/api/v1/namespaces/$ns/configmaps" | python3 -c 'import json,sys; print(json.load(sys.stdin)["metadata"]["resourceVersion"])')
watch="/api/v1/namespaces/$ns/configmaps?watch=true&resourceVersion=$rv&timeoutSeconds=600"
$kubectl get --raw "$watch" >"$out.tmp" &
watcher=$!
curl -sSN --cacert "$pki/ca.pem" --cert "$pki/cert.pem" --key "$pki/key.pem" \
  -H 'Accept: application/vnd.kubernetes.protobuf;stream=watch' -o "$pb.tmp" "$server$watch" &
pb_watcher=$!
sleep 1
x128=$(printf 'x%.0s' $(seq 128))
manifest() {
  for i in $(seq 1 300); do
    printf -- '---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-%05d\n  labels: {app: memcached, bench: decode}\ndata:\n  size: "%d"\n  padding: %s\n' "$i" "$(($i * $1))" "$x128"
  done
}
# Every change goes through the same manager, so each object keeps one managedFields entry.
for round in 1 2 3; do manifest "$round" | $kubectl apply -n "$ns" -f - >/dev/null; done
$kubectl delete configmap -n "$ns" -l bench=decode --wait=false >/dev/null
alive() { kill -0 "$1" 2>/dev/null || { echo "record: a watch ended early" >&2; exit 1; }; }
until [ "$(grep -c '"type":"DELETED"' "$out.tmp" || true)" -ge 300 ]; do alive "$watcher"; sleep 0.2; done
# The protobuf watch has had the same events sent; wait until they are all written.
frames() {
  python3 -c 'import struct,sys
d, at, n = open(sys.argv[1], "rb").read(), 0, 0
while at + 4 <= len(d) and at + 4 + struct.unpack(">I", d[at:at+4])[0] <= len(d):
    at += 4 + struct.unpack(">I", d[at:at+4])[0]; n += 1
print(n)' "$pb.tmp"
}
until [ "$(frames)" -ge "$(grep -vc '"type":"BOOKMARK"' "$out.tmp")" ]; do alive "$pb_watcher"; sleep 0.2; done
kill "$watcher" "$pb_watcher" 2>/dev/null || true
wait "$watcher" "$pb_watcher" 2>/dev/null || true
grep -v '"type":"BOOKMARK"' "$out.tmp" >"$out"
# Whole frames only, and the same number as the JSON recording.
python3 - "$pb.tmp" "$pb" "$(wc -l <"$out")" <<'PY'
import struct, sys
data, frames, at = open(sys.argv[1], "rb").read(), [], 0
while at + 4 <= len(data):
    (n,) = struct.unpack(">I", data[at:at + 4])
    if at + 4 + n > len(data):
        break
    frames.append(data[at:at + 4 + n])
    at += 4 + n
want = int(sys.argv[3])
assert len(frames) >= want, f"{len(frames)} protobuf frames, {want} JSON events"
open(sys.argv[2], "wb").write(b"".join(frames[:want]))
PY
rm "$out.tmp" "$pb.tmp"
$kubectl delete namespace "$ns" --wait=false >/dev/null
echo "recorded $(wc -l <"$out") events, $(wc -c <"$out") bytes of JSON into $out and $(wc -c <"$pb") bytes of protobuf into $pb"
