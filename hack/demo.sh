#!/usr/bin/env bash
# `make demo`: the Memcached operator against the real local cluster, start to finish.
#
# Installs the CRD, starts the operator in the background (its pid recorded, its log in
# target/demo/operator.log), creates a Memcached of size 3, scales it to 5, hand-edits its
# Deployment (the operator reverts it), deletes it, and stops the operator with SIGTERM by
# its recorded pid. The cluster is left running (`make cluster-down` stops it).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
kubectl=${TESTENV_KUBECTL:-$root/target/testenv/bin/kubectl}
export KUBECONFIG=${TESTENV_KUBECONFIG:-$root/target/testenv/kubeconfig}
dir=$root/target/demo
ns=memcached-demo
operator=$root/target/debug/memcached-operator
mkdir -p "$dir"

k() { "$kubectl" "$@"; }
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
# Waits up to 120 s for a jsonpath of the Memcached to print the wanted value.
wait_for() {
  local what=$1 path=$2 want=$3 got=""
  for _ in $(seq 1 240); do
    got=$(k -n "$ns" get memcached memcached-sample -o "jsonpath=$path" 2>/dev/null || true)
    [[ "$got" == "$want" ]] && { echo "$what: $got"; return 0; }
    sleep 0.5
  done
  echo "demo: FAILED: $what did not reach $want (last: $got)" >&2
  echo "demo: the operator's last log lines ($dir/operator.log):" >&2
  tail -n 20 "$dir/operator.log" >&2
  exit 1
}

show() {
  k -n "$ns" get deployment memcached-sample
  k -n "$ns" get pods -l app.kubernetes.io/instance=memcached-sample -o wide
  k -n "$ns" get memcached memcached-sample -o jsonpath='{range .status.conditions[*]}  {.type}={.status} ({.reason}): {.message}{"\n"}{end}'
  echo "  nodes: $(k -n "$ns" get memcached memcached-sample -o jsonpath='{.status.nodes}')"
}

stop_operator() {
  if [[ -f $dir/operator.pid ]]; then
    local pid
    pid=$(cat "$dir/operator.pid")
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid"
      for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    fi
    rm -f "$dir/operator.pid"
  fi
}
trap stop_operator EXIT

step "building the operator"
cargo build -p memcached-operator   # cargo shows its progress on a first build

step "installing the Memcached CRD"
k apply -f "$root/config/crd/bases/cache.example.com_memcacheds.yaml"
k wait --for=condition=Established crd/memcacheds.cache.example.com --timeout=60s

step "starting the operator (log: target/demo/operator.log)"
stop_operator
"$operator" --metrics-bind-address=127.0.0.1:0 --health-probe-bind-address=127.0.0.1:0 \
  >"$dir/operator.log" 2>&1 &
echo $! >"$dir/operator.pid"
echo "operator pid $(cat "$dir/operator.pid")"

step "creating memcached-sample (size 3) in namespace $ns"
k delete namespace "$ns" --ignore-not-found --wait=true --timeout=120s >/dev/null
k create namespace "$ns"
k -n "$ns" apply -f - <<'YAML'
apiVersion: cache.example.com/v1alpha1
kind: Memcached
metadata:
  name: memcached-sample
spec:
  size: 3
  containerPort: 11211
YAML
wait_for "ready replicas" '{.status.readyReplicas}' 3
k -n "$ns" get memcached memcached-sample
show


for size in 5 1; do
  step "scaling to $size"
  k -n "$ns" patch memcached memcached-sample --type=merge -p "{\"spec\":{\"size\":$size}}"
  wait_for "ready replicas" '{.status.readyReplicas}' "$size"
  wait_for "pod names in the status" '{.status.nodes[*]}' \
    "$(k -n "$ns" get pods -l app.kubernetes.io/instance=memcached-sample -o jsonpath='{.items[*].metadata.name}' --sort-by=.metadata.name)"
  show
done

step "hand-editing the Deployment to 4 replicas: the operator puts it back to 1"
k -n "$ns" scale deployment memcached-sample --replicas=4
for _ in $(seq 1 120); do
  r=$(k -n "$ns" get deployment memcached-sample -o jsonpath='{.spec.replicas}')
  [[ "$r" == 1 ]] && break
  sleep 0.5
done
echo "deployment replicas: $(k -n "$ns" get deployment memcached-sample -o jsonpath='{.spec.replicas}')"

step "events"
k -n "$ns" get events.events.k8s.io --sort-by=.metadata.creationTimestamp \
  -o custom-columns=BY:.reportingController,TYPE:.type,REASON:.reason,NOTE:.note \
  | grep -E '^(BY|memcached-controller)' || true

step "deleting memcached-sample: the finalizer lets go, the Deployment follows"
k -n "$ns" delete memcached memcached-sample --wait=true --timeout=60s
for _ in $(seq 1 120); do
  k -n "$ns" get deployment memcached-sample >/dev/null 2>&1 || break
  sleep 0.5
done
k -n "$ns" get deployment memcached-sample 2>&1 | tail -n 1 || true

step "stopping the operator (SIGTERM)"
stop_operator
tail -n 5 "$dir/operator.log"
cat <<EOF2

demo: done, every step converged. The cluster is still up. To go on:
  export KUBECONFIG=$KUBECONFIG
  make run                                   # the operator in the foreground
  kubectl apply -f config/samples/cache_v1alpha1_memcached.yaml
  kubectl get memcached,deployments,pods
  kubectl patch memcached memcached-sample --type=merge -p '{"spec":{"size":2}}'
Stop the cluster with \`make cluster-down\`.
EOF2
