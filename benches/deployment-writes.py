#!/usr/bin/env python3
"""What each way of scaling a Deployment costs the API server: update, merge patch, apply.

    python3 benches/deployment-writes.py [--kubeconfig target/testenv/kubeconfig] [--rounds 150]

The Memcached operator scales a Deployment more often than it makes any other write, so the
request it scales with is the one users wait for. In a fresh namespace (deleted at the end)
this script creates one Deployment, then times, alternately and on one kept-alive HTTPS
connection, each way of setting its replicas: a server-side apply of the whole Deployment
(as the operator writes a new or changed one), a JSON merge patch of `spec.replicas`, and an
update (PUT) of the object last read with new replicas, as the operator scales. Each request
is sent after the same pause, so the controllers' reactions to the previous one have settled
alike; an update that meets 409 (the Deployment controller wrote in between) is read again and
retried, and only the try that succeeded is timed. Prints p50 and p90 of each, in ms.
"""

import argparse
import http.client
import json
import os
import subprocess
import time

import harness

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAMESPACE = "bench-deployment-writes"


def deployment(replicas):
    labels = {"app.kubernetes.io/name": "write-cost"}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "d", "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{
                    "name": "memcached", "image": "memcached:1.6.26-alpine",
                    "ports": [{"containerPort": 11211, "name": "memcached"}]}]},
            },
        },
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", default=os.path.join(ROOT, "target", "testenv", "kubeconfig"))
    parser.add_argument("--rounds", type=int, default=150)
    parser.add_argument("--pause", type=float, default=0.05, help="seconds before each request")
    opts = parser.parse_args()

    host, port, ctx = harness.load_kubeconfig(opts.kubeconfig)
    kubectl = ["kubectl", "--kubeconfig", opts.kubeconfig]
    subprocess.run(kubectl + ["create", "namespace", NAMESPACE], check=True, stdout=subprocess.DEVNULL)
    conn = http.client.HTTPSConnection(host, port, context=ctx)
    path = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/d"

    def send(method, url, body, content_type):
        """(seconds, status, object)."""
        began = time.perf_counter()
        conn.request(method, url, body=body,
                     headers={"Content-Type": content_type, "Accept": "application/json"})
        response = conn.getresponse()
        data = response.read()
        took = time.perf_counter() - began
        if response.status not in (200, 201, 409):
            raise SystemExit(f"{method} {url}: {response.status} {data[:300]!r}")
        return took, response.status, json.loads(data)

    times = {"apply": [], "merge patch": [], "update": []}
    try:
        send("PATCH", path + "?fieldManager=bench&force=true", json.dumps(deployment(0)),
             "application/apply-patch+yaml")
        for i in range(opts.rounds):
            time.sleep(opts.pause)
            took, _, _ = send("PATCH", path + "?fieldManager=bench&force=true",
                              json.dumps(deployment(1)), "application/apply-patch+yaml")
            times["apply"].append(took)
            time.sleep(opts.pause)
            took, _, _ = send("PATCH", path + "?fieldManager=bench",
                              json.dumps({"spec": {"replicas": 0}}), "application/merge-patch+json")
            times["merge patch"].append(took)
            while True:
                time.sleep(opts.pause)
                _, _, current = send("GET", path, None, "application/json")
                current["spec"]["replicas"] = 1
                took, status, _ = send("PUT", path + "?fieldManager=bench", json.dumps(current),
                                       "application/json")
                if status != 409:
                    times["update"].append(took)
                    break
            time.sleep(opts.pause)
            send("PATCH", path + "?fieldManager=bench", json.dumps({"spec": {"replicas": 0}}),
                 "application/merge-patch+json")
            if (i + 1) % 50 == 0:
                print(f"deployment-writes: {i + 1} of {opts.rounds} rounds", flush=True)
    finally:
        conn.close()
        subprocess.run(kubectl + ["delete", "namespace", NAMESPACE, "--wait=false"],
                       stdout=subprocess.DEVNULL)

    for name, xs in times.items():
        xs.sort()
        print(f"{name:<12} p50 {xs[len(xs) // 2] * 1e3:6.2f} ms   p90 {xs[int(len(xs) * 0.9)] * 1e3:6.2f} ms")


if __name__ == "__main__":
    main()
