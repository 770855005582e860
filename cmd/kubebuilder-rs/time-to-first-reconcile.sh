#!/usr/bin/env bash
# Times README.md's "Your own operator" commands, from `kubebuilder-rs init` to the sample's
# first reconcile (its Available condition True), against the cluster in KUBECONFIG (default:
# this repository's local cluster, target/testenv/kubeconfig):
#
#   cmd/kubebuilder-rs/time-to-first-reconcile.sh
#
# The project is built with CARGO_TARGET_DIR (default: this repository's target/), so only its
# own crate compiles once a first project has been built there. Everything it makes (the
# project in a temporary directory, a namespace, the CRD) is removed at the end. The last
# line is `init to first reconcile: <seconds> s`.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export KUBECONFIG=${KUBECONFIG:-$root/target/testenv/kubeconfig}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}
kubectl=${KUBECTL:-$root/target/testenv/bin/kubectl}
[ -x "$kubectl" ] || kubectl=kubectl
export KUBECTL=$kubectl
[ -f "${KUBECONFIG%%:*}" ] || { echo "no cluster: $KUBECONFIG does not exist (make cluster)" >&2; exit 1; }

cargo build -q -p kubebuilder-rs --manifest-path "$root/Cargo.toml"
kb=$CARGO_TARGET_DIR/debug/kubebuilder-rs

work=$(mktemp -d)
ns=kb-time-$$
run_pid=
cleanup() {
  if [ -n "$run_pid" ]; then
    kill -TERM -- "-$run_pid" 2>/dev/null || true
    wait "$run_pid" 2>/dev/null || true
  fi
  if [ -f "$work/guestbook/Makefile" ]; then
    "$kubectl" -n "$ns" patch guestbook guestbook-sample --type=merge \
      -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1 || true
    make -C "$work/guestbook" uninstall >/dev/null 2>&1 || true
  fi
  "$kubectl" delete namespace "$ns" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

mkdir "$work/guestbook"
cd "$work/guestbook"
start=$(date +%s.%N)
"$kb" init --domain "t$$.example.com" >/dev/null
"$kb" create api --group webapp --version v1 --kind Guestbook >/dev/null
"$kb" create webhook --group webapp --version v1 --kind Guestbook --defaulting \
  --programmatic-validation >/dev/null
make manifests >/dev/null
make install >/dev/null
"$kubectl" create namespace "$ns" >/dev/null
# In a process group of its own (make, cargo, the manager), to stop it whole at the end.
setsid make run RUN_ARGS="--namespace=$ns --health-probe-bind-address=0" >run.log 2>&1 &
run_pid=$!
"$kubectl" -n "$ns" apply -k config/samples >/dev/null
available='{.status.conditions[?(@.type=="Available")].status}'
until [ "$("$kubectl" -n "$ns" get guestbook guestbook-sample -o jsonpath="$available" 2>/dev/null)" = True ]; do
  if ! kill -0 "$run_pid" 2>/dev/null || [ "$SECONDS" -gt 600 ]; then
    echo "no reconcile (make run stopped, or 10 minutes passed); its output:" >&2
    cat run.log >&2
    exit 1
  fi
  sleep 0.2
done
end=$(date +%s.%N)
"$kubectl" -n "$ns" delete guestbook guestbook-sample --wait=true >/dev/null
awk -v s="$start" -v e="$end" 'BEGIN { printf "init to first reconcile: %.1f s\n", e - s }'
