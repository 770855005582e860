#!/usr/bin/env bash
# Records testdata/watch/configmaps-3.pb from the local cluster (`make cluster`): a
# protobuf watch (`application/vnd.kubernetes.protobuf;stream=watch`) with initial events
# over a namespace holding three labelled ConfigMaps, as the apiserver writes it: ADDED
# events for them and for kube-root-ca.crt, then the initial-events-end BOOKMARK. The
# protobuf module's tests read it (src/client/protobuf.rs).
set -euo pipefail
cd "$(dirname "$0")/../.."
kubeconfig=target/testenv/kubeconfig
kubectl="target/testenv/bin/kubectl --kubeconfig $kubeconfig"
ns=pb-record-$$
out=testdata/watch/configmaps-3.pb
pki=$(mktemp -d)
trap 'rm -rf "$pki"' EXIT
. testdata/watch/testenv-pki.sh
server=$(testenv_pki "$kubeconfig" "$pki")
$kubectl create namespace "$ns" >/dev/null
for i in 1 2 3; do
  $kubectl create configmap -n "$ns" "cm-$i" --from-literal=size="$i" >/dev/null
  $kubectl label configmap -n "$ns" "cm-$i" app=memcached >/dev/null
done
# timeoutSeconds ends the watch on the server's side, after the bookmark.
curl -sS --cacert "$pki/ca.pem" --cert "$pki/cert.pem" --key "$pki/key.pem" \
  -H 'Accept: application/vnd.kubernetes.protobuf;stream=watch' -o "$out" \
  "$server/api/v1/namespaces/$ns/configmaps?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=2"
$kubectl delete namespace "$ns" --wait=false >/dev/null
echo "recorded $(wc -c <"$out") bytes into $out"
