#!/usr/bin/env python3
"""What the local cluster spends on each write a Memcached operator makes: CPU-seconds per 1,000.

    python3 benches/cluster-cost.py [--count 1000] [--rounds 2] [--writes finalizer,status]

The bulk row of bench-operator runs both operators on the same 2 cores as the cluster, which
they keep saturated; the row is then bounded by what the cluster spends per resource. This
script measures that alone, with no operator running: in a fresh namespace per write and
round (deleted at the end), it makes `--count` writes of one kind, 16 at a time on kept-alive
HTTPS connections, and reads the CPU time (/proc, user + system) of the cluster's processes,
found by the pids in target/testenv/state.json, before the writes and after they have
settled (`--settle` seconds; the controller manager's reaction to a Deployment takes longer:
`--settle-deployment`), less what the idle cluster spent over as long (measured for 5 s just
before). Writes:

* `memcached`: create a Memcached of size 0 (as bench-operator's driver does);
* `finalizer`: a JSON merge patch adding the operator's finalizer to an existing one;
* `status`: a JSON merge patch of its status subresource, conditions as the operator's;
* `event`: create an events.k8s.io/v1 Event about it, as the operator's recorder does;
* `deployment`: create the operator's Deployment of size 0, with everything the
  controller manager does about it (its ReplicaSet, both status writes).

Prints, per write, the median over the rounds per process and in total. Needs the local
cluster (`make cluster`) and the Memcached CRD (installed from config/crd/bases if absent).
"""

import argparse
import http.client
import json
import os
import subprocess
import threading
import time

import harness

WRITES = ("memcached", "finalizer", "status", "event", "deployment")
GROUP = "/apis/cache.example.com/v1alpha1"
FINALIZER = "cache.example.com/finalizer"
IDLE_SECONDS = 5
LABELS = ("app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/managed-by")


class Cluster:
    """HTTPS requests to the API server of a kubeconfig with client certificates."""

    def __init__(self, kubeconfig):
        self.host, self.port, self.ctx = harness.load_kubeconfig(kubeconfig)

    def connect(self):
        return http.client.HTTPSConnection(self.host, self.port, context=self.ctx)


def request(conn, method, path, body=None, ctype="application/json"):
    conn.request(method, path, body=None if body is None else json.dumps(body),
                 headers={"Content-Type": ctype, "Accept": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    if resp.status >= 300:
        raise RuntimeError(f"{method} {path}: {resp.status} {data[:300]!r}")
    return json.loads(data)


def in_parallel(cluster, count, write, workers=16):
    """Calls write(conn, i) for i in 0..count, `workers` at a time; raises the first error."""
    todo, lock, errors = list(range(count)), threading.Lock(), []

    def worker():
        conn = cluster.connect()
        while not errors:
            with lock:
                if not todo:
                    return
                i = todo.pop()
            try:
                write(conn, i)
            except Exception as e:  # noqa: BLE001 - reported by the caller
                errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def cpu_seconds(procs):
    """User + system CPU seconds of each named cluster process."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for proc in procs:
        with open(f"/proc/{proc['pid']}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        out[proc["name"]] = (int(fields[11]) + int(fields[12])) / tick
    return out


def memcached(ns, i):
    return {"apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached",
            "metadata": {"name": f"mc-{i}", "namespace": ns}, "spec": {"size": 0}}


def deployment(ns, i):
    labels = dict(zip(LABELS, ("memcached", f"mc-{i}", "memcached-operator")))
    container = {
        "name": "memcached", "image": "memcached:1.6.26-alpine",
        "imagePullPolicy": "IfNotPresent",
        "command": ["memcached", "--memory-limit=64", "-o", "modern", "-v"],
        "ports": [{"containerPort": 11211, "name": "memcached"}],
        "securityContext": {"runAsNonRoot": True, "runAsUser": 1001,
                            "allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"]}},
    }
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": f"mc-{i}", "namespace": ns, "labels": labels},
        "spec": {
            "replicas": 0, "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {
                "securityContext": {"runAsNonRoot": True,
                                    "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [container]}},
        },
    }


def status(i):
    at = "2026-01-01T00:00:00Z"
    note = "0 of 0 memcached pods are ready"
    conditions = [
        {"type": "Available", "status": "True", "reason": "PodsReady", "message": note,
         "lastTransitionTime": at, "observedGeneration": 1},
        {"type": "Progressing", "status": "False", "reason": "Stable", "message": note,
         "lastTransitionTime": at, "observedGeneration": 1},
        {"type": "Degraded", "status": "False", "reason": "Reconciled",
         "message": "the Deployment matches the spec", "lastTransitionTime": at,
         "observedGeneration": 1},
    ]
    return {"status": {"conditions": conditions, "observedGeneration": 1, "readyReplicas": 0,
                       "nodes": []}}


def event(ns, i):
    return {
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": f"mc-{i}.{i:016x}", "namespace": ns},
        "eventTime": "2026-01-01T00:00:00.000000Z", "type": "Normal",
        "reportingController": "memcached-controller", "reportingInstance": "cluster-cost",
        "action": "CreateDeployment", "reason": "Created",
        "regarding": {"apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached",
                      "namespace": ns, "name": f"mc-{i}"},
        "note": f"Created Deployment mc-{i} with 0 replicas",
    }


def one(cluster, procs, kind, count, settle):
    """CPU seconds per 1,000 writes of `kind`, per process."""
    ns = f"cluster-cost-{kind}-{os.getpid()}-{int(time.time())}"
    conn = cluster.connect()
    request(conn, "POST", "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    mcs = f"{GROUP}/namespaces/{ns}/memcacheds"
    merge = "application/merge-patch+json"
    writes = {
        "memcached": lambda c, i: request(c, "POST", mcs, memcached(ns, i)),
        "finalizer": lambda c, i: request(
            c, "PATCH", f"{mcs}/mc-{i}", {"metadata": {"finalizers": [FINALIZER]}}, merge),
        "status": lambda c, i: request(c, "PATCH", f"{mcs}/mc-{i}/status", status(i), merge),
        "event": lambda c, i: request(
            c, "POST", f"/apis/events.k8s.io/v1/namespaces/{ns}/events", event(ns, i)),
        "deployment": lambda c, i: request(
            c, "POST", f"/apis/apps/v1/namespaces/{ns}/deployments", deployment(ns, i)),
    }
    try:
        if kind in ("finalizer", "status"):
            in_parallel(cluster, count, writes["memcached"])
            time.sleep(settle)
        # The cluster's idle rate, subtracted over the measured span.
        idle_from, idle_at = cpu_seconds(procs), time.monotonic()
        time.sleep(IDLE_SECONDS)
        before, started = cpu_seconds(procs), time.monotonic()
        idle = {n: (before[n] - idle_from[n]) / (started - idle_at) for n in before}
        in_parallel(cluster, count, writes[kind])
        took = time.monotonic() - started
        time.sleep(settle)
        after, span = cpu_seconds(procs), time.monotonic() - started
    finally:
        if kind == "finalizer":
            in_parallel(cluster, count, lambda c, i: request(
                c, "PATCH", f"{mcs}/mc-{i}", {"metadata": {"finalizers": None}}, merge))
        request(conn, "DELETE", f"/api/v1/namespaces/{ns}")
    harness.log(f"  {kind}: {count} writes in {took:.1f} s")
    spent = {n: after[n] - before[n] - idle[n] * span for n in after}
    return {n: max(v, 0.0) * 1000 / count for n, v in spent.items()}


def wait_gone(kubeconfig, prefix):
    """Waits until no namespace named `prefix`… is left: deleting one costs CPU too."""
    while True:
        names = subprocess.run(
            ["kubectl", "--kubeconfig", kubeconfig, "get", "namespaces", "-o", "name"],
            check=True, stdout=subprocess.PIPE, text=True).stdout.split()
        if not any(n.startswith(f"namespace/{prefix}") for n in names):
            return
        time.sleep(1)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kubeconfig", default=os.environ.get("TESTENV_KUBECONFIG", harness.KUBECONFIG))
    p.add_argument("--count", type=int, default=1000, help="writes per kind and round (1000)")
    p.add_argument("--rounds", type=int, default=2, help="rounds (2)")
    p.add_argument("--writes", default=",".join(WRITES),
                   help=f"a comma list of {', '.join(WRITES)} (all)")
    p.add_argument("--settle", type=float, default=3, help="seconds after the writes (3)")
    p.add_argument("--settle-deployment", type=float, default=25,
                   help="seconds after Deployment creates, for the controller manager (25)")
    opts = p.parse_args()
    kinds = [k.strip() for k in opts.writes.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in WRITES]
    if unknown:
        p.error(f"unknown writes {unknown}; known: {', '.join(WRITES)}")
    state = os.path.join(os.path.dirname(os.path.abspath(opts.kubeconfig)), "state.json")
    if not os.path.exists(state):
        raise SystemExit(f"cluster-cost: no {state}: start the local cluster (make cluster)")
    with open(state) as f:
        procs = [{"name": proc["name"], "pid": proc["pid"]} for proc in json.load(f)["procs"]]
    subprocess.run(["kubectl", "--kubeconfig", opts.kubeconfig, "apply", "-f",
                    os.path.join(harness.ROOT, "config", "crd", "bases")],
                   check=True, stdout=subprocess.DEVNULL)
    cluster = Cluster(opts.kubeconfig)
    results = {k: [] for k in kinds}
    for rnd in range(1, opts.rounds + 1):
        for kind in kinds:
            harness.log(f"cluster-cost: round {rnd}, {kind}")
            settle = opts.settle_deployment if kind == "deployment" else opts.settle
            results[kind].append(one(cluster, procs, kind, opts.count, settle))
            wait_gone(opts.kubeconfig, "cluster-cost-")
    names = [proc["name"] for proc in procs]
    print(f"CPU-seconds of the cluster per 1,000 writes, median of {opts.rounds} round(s)")
    print("| write | " + " | ".join(names) + " | total |")
    print("|---" * (len(names) + 2) + "|")
    for kind in kinds:
        per = [harness.median([r[n] for r in results[kind]]) for n in names]
        total = harness.median([sum(r.values()) for r in results[kind]])
        print(f"| {kind} | " + " | ".join(f"{v:.2f}" for v in per) + f" | {total:.2f} |")


if __name__ == "__main__":
    main()
