#!/usr/bin/env bash
# Builds the cluster's binaries into DIR (default ../target/testenv/bin): kube-apiserver,
# kube-controller-manager, kube-scheduler and kubectl from k8s.io/kubernetes, kwok, and the
# testenv orchestrator (which embeds etcd). The tools and their versions come from go.mod.
# A cold build takes many minutes on a small machine, so progress is printed as it goes.
set -euo pipefail
here=$(dirname "$0")
out=$(realpath -m "${1:-$here/../target/testenv/bin}")
cd "$here"
mkdir -p "$out"

k8s=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)      # e.g. v1.36.3
minor=$(echo "$k8s" | cut -d. -f2)
v=k8s.io/component-base/version
ldflags="-s -w -X $v.gitVersion=$k8s -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean"

echo "testenv: building Kubernetes $k8s, kwok and the orchestrator into $out"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
begin=$(date +%s)
go build -v -ldflags "$ldflags" -o "$out/" tool ./cmd/testenv >"$log" 2>&1 &
pid=$!
tick=0
while kill -0 "$pid" 2>/dev/null; do
  sleep 1
  tick=$((tick + 1))
  if ((tick % 30 == 0)); then
    echo "testenv: still building, $((tick / 60))m$((tick % 60))s, $(grep -vc '^go: ' "$log") packages compiled so far"
  fi
done
if ! wait "$pid"; then
  grep -v '^[a-z0-9./_-]*$' "$log" || cat "$log"
  echo "testenv: build failed" >&2
  exit 1
fi
echo "testenv: built in $(($(date +%s) - begin))s:"
ls -l "$out"
