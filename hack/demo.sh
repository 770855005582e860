#!/usr/bin/env bash
# `make demo`: the Memcached operator against the real local cluster, start to finish.
#
# The three parts of an operator: the CRD, the admission webhooks and the controller. Installs
# the CRD, starts the operator in the background with its webhooks served on loopback (a
# throwaway CA and serving certificate in target/demo/certs, registered with the API server
# by URL for the demo's namespace only; the operator's pid recorded, its log in
# target/demo/operator.log), shows a Memcached without a size defaulted and one with an image
# from a registry outside the allowed ones refused, creates a Memcached of size 3, scales it
# to 5, hand-edits its Deployment (the operator reverts it), deletes it, and stops the
# operator with SIGTERM by its recorded pid. The cluster is left running (`make
# cluster-down` stops it).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
kubectl=${TESTENV_KUBECTL:-$root/target/testenv/bin/kubectl}
export KUBECONFIG=${TESTENV_KUBECONFIG:-$root/target/testenv/kubeconfig}
dir=$root/target/demo
ns=memcached-demo
# The kind at the version the demo writes, named in full: kubectl would otherwise read the
# preferred version, whose fields may be shaped differently.
mc=memcacheds.v1alpha1.cache.example.com
operator=$root/target/debug/memcached-operator
mkdir -p "$dir"

k() { "$kubectl" "$@"; }
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
# Waits up to 120 s for a jsonpath of the Memcached to print the wanted value.
wait_for() {
  local what=$1 path=$2 want=$3 got=""
  for _ in $(seq 1 240); do
    got=$(k -n "$ns" get "$mc" memcached-sample -o "jsonpath=$path" 2>/dev/null || true)
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
  k -n "$ns" get "$mc" memcached-sample -o jsonpath='{range .status.conditions[*]}  {.type}={.status} ({.reason}): {.message}{"\n"}{end}'
  echo "  nodes: $(k -n "$ns" get "$mc" memcached-sample -o jsonpath='{.status.nodes}')"
}

# Removes the demo's webhook registrations: without the operator, the API server could not
# reach them and would refuse every Memcached write in the namespace.
remove_webhooks() {
  k delete mutatingwebhookconfiguration,validatingwebhookconfiguration \
    -l app.kubernetes.io/part-of=memcached-demo --ignore-not-found >/dev/null 2>&1 || true
}

stop_operator() {
  remove_webhooks
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

step "a serving certificate for the webhooks (127.0.0.1, from a throwaway CA)"
certs=$dir/certs
rm -rf "$certs" && mkdir -p "$certs"
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=memcached-demo-ca \
  -keyout "$certs/ca.key" -out "$certs/ca.crt" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 \
  -keyout "$certs/tls.key" -out "$certs/tls.csr" 2>/dev/null
openssl x509 -req -in "$certs/tls.csr" -CA "$certs/ca.crt" -CAkey "$certs/ca.key" \
  -CAcreateserial -days 1 -out "$certs/tls.crt" \
  -extfile <(printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n') 2>/dev/null
echo "CA and certificate in $certs"
webhook_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
metrics_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
debug_page=http://127.0.0.1:$metrics_port/debug/controllers

step "starting the operator with its webhooks on 127.0.0.1:$webhook_port (log: target/demo/operator.log)"
stop_operator
# Metrics over plain HTTP on loopback, with the debug pages: a browser opens them as they are.
"$operator" --metrics-bind-address=127.0.0.1:"$metrics_port" --metrics-secure=false --enable-debug-pages \
  --health-probe-bind-address=127.0.0.1:0 \
  --enable-webhooks --webhook-host=127.0.0.1 --webhook-port="$webhook_port" --cert-dir="$certs" \
  --allowed-image-prefix=memcached: --allowed-image-prefix=docker.io/library/memcached: \
  >"$dir/operator.log" 2>&1 &
echo $! >"$dir/operator.pid"
echo "operator pid $(cat "$dir/operator.pid")"
echo "debug page (live queues, keys, backoff, caches): $debug_page"
for _ in $(seq 1 120); do
  (exec 3<>"/dev/tcp/127.0.0.1/$webhook_port") 2>/dev/null && break
  kill -0 "$(cat "$dir/operator.pid")" 2>/dev/null || { echo "demo: FAILED: the operator exited" >&2; tail -n 20 "$dir/operator.log" >&2; exit 1; }
  sleep 0.5
done

step "registering the webhooks for namespace $ns"
ca_bundle=$(base64 -w0 <"$certs/ca.crt")
webhook() { # kind, name, path
  cat <<YAML
apiVersion: admissionregistration.k8s.io/v1
kind: $1
metadata:
  name: memcached-demo-$2
  labels: {app.kubernetes.io/part-of: memcached-demo}
webhooks:
- name: $2.memcached.cache.example.com
  clientConfig: {url: "https://127.0.0.1:$webhook_port$3", caBundle: "$ca_bundle"}
  rules:
  - {operations: [CREATE, UPDATE], apiGroups: [cache.example.com], apiVersions: [v1alpha1], resources: [memcacheds], scope: Namespaced}
  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: $ns}}
  failurePolicy: Fail
  sideEffects: None
  admissionReviewVersions: [v1]
YAML
}
{ webhook MutatingWebhookConfiguration default /mutate-cache-example-com-v1alpha1-memcached
  echo ---
  webhook ValidatingWebhookConfiguration validate /validate-cache-example-com-v1alpha1-memcached
} | k apply -f -
k delete namespace "$ns" --ignore-not-found --wait=true --timeout=120s >/dev/null
k create namespace "$ns"
# The API server takes up new webhook configurations within a moment: wait until a
# server-side dry run (which runs admission) shows both at work.
unsized='{"apiVersion":"cache.example.com/v1alpha1","kind":"Memcached","metadata":{"name":"probe"},"spec":{"containerPort":11211}}'
evil='{"apiVersion":"cache.example.com/v1alpha1","kind":"Memcached","metadata":{"name":"probe"},"spec":{"size":1,"containerPort":11211,"image":"evil.example.org/memcached:1"}}'
for i in $(seq 1 120); do
  defaulted=$(k -n "$ns" create --dry-run=server -o 'jsonpath={.spec.size}' -f - <<<"$unsized" 2>/dev/null || true)
  if [[ $defaulted == 1 ]] && ! k -n "$ns" create --dry-run=server -f - <<<"$evil" >/dev/null 2>&1; then break; fi
  [[ $i == 120 ]] && { echo "demo: FAILED: the API server did not take up the webhooks" >&2; exit 1; }
  sleep 0.5
done

step "creating memcached-unsized without a size: the defaulting webhook sets 1"
k -n "$ns" apply -f - <<'YAML'
apiVersion: cache.example.com/v1alpha1
kind: Memcached
metadata:
  name: memcached-unsized
spec:
  containerPort: 11211
YAML
size=$(k -n "$ns" get "$mc" memcached-unsized -o jsonpath='{.spec.size}')
echo "stored spec.size: $size"
[[ $size == 1 ]] || { echo "demo: FAILED: the defaulting webhook did not set the size" >&2; exit 1; }
k -n "$ns" delete "$mc" memcached-unsized --wait=false >/dev/null

step "creating memcached-evil with an image from another registry: the validating webhook refuses it"
if refused=$(k -n "$ns" apply -f - 2>&1 <<'YAML'
apiVersion: cache.example.com/v1alpha1
kind: Memcached
metadata:
  name: memcached-evil
spec:
  size: 1
  containerPort: 11211
  image: evil.example.org/memcached:1
YAML
); then
  echo "demo: FAILED: the validating webhook let it through" >&2; exit 1
fi
echo "$refused"
grep -q 'is not from an allowed registry' <<<"$refused" \
  || { echo "demo: FAILED: refused, but not by the webhook" >&2; exit 1; }

step "creating memcached-sample (size 3) in namespace $ns (its story: $debug_page?key=$ns/memcached-sample)"
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
k -n "$ns" get "$mc" memcached-sample
show


for size in 5 1; do
  step "scaling to $size"
  k -n "$ns" patch "$mc" memcached-sample --type=merge -p "{\"spec\":{\"size\":$size}}"
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
k -n "$ns" delete "$mc" memcached-sample --wait=true --timeout=60s
for _ in $(seq 1 120); do
  k -n "$ns" get deployment memcached-sample >/dev/null 2>&1 || break
  sleep 0.5
done
k -n "$ns" get deployment memcached-sample 2>&1 | tail -n 1 || true

step "the debug page while the operator runs: $debug_page"
curl -sf "$debug_page.json" | python3 -c 'import json,sys
s=json.load(sys.stdin)
for c in s["controllers"]:
    print("controller %s: queue depth %d, %d reconciles, %.1f/s" % (c["name"], c["queue_depth"], c["reconciles_total"], c["reconciles_per_second"]))
for i in s["informers"]:
    print("informer %s %s: %d objects, %d bytes, rv %s" % (i["kind"], i["namespace"] or "(all)", i["objects"], i["bytes"], i["resource_version"]))' \
  || echo "demo: (could not read $debug_page.json)"

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
