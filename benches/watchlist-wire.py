#!/usr/bin/env python3
"""How long the apiserver takes to stream an informer's initial sync, by wire format.

Opens the WatchList an informer's sync makes (`sendInitialEvents=true`) on the seeded
namespace of `make bench-informer`, once asking for JSON and once for protobuf, alternately
for several rounds, and reads each response until the initial-events-end bookmark without
decoding anything. The time is the server's (plus TLS and a socket read loop): a floor under
any client's sync over that format on this cluster.

    python3 benches/watchlist-wire.py [--kubeconfig target/testenv/kubeconfig] [--rounds 7]
"""

import argparse
import base64
import http.client
import os
import ssl
import statistics
import tempfile
import time
import urllib.parse

import yaml

FORMATS = {
    "json": "application/json",
    "protobuf": "application/vnd.kubernetes.protobuf;stream=watch",
}


def tls_context(kubeconfig, workdir):
    """The server address and a TLS context from the kubeconfig's first cluster and user."""
    config = yaml.safe_load(open(kubeconfig))
    cluster = config["clusters"][0]["cluster"]
    user = config["users"][0]["user"]
    paths = {}
    for name, field in [("ca", cluster["certificate-authority-data"]),
                        ("cert", user["client-certificate-data"]),
                        ("key", user["client-key-data"])]:
        paths[name] = os.path.join(workdir, name + ".pem")
        with open(paths[name], "wb") as f:
            f.write(base64.b64decode(field))
    context = ssl.create_default_context(cafile=paths["ca"])
    context.load_cert_chain(paths["cert"], paths["key"])
    return urllib.parse.urlsplit(cluster["server"]), context


def sync_once(server, context, path, accept):
    """Seconds from sending the request to reading the initial-events-end bookmark."""
    conn = http.client.HTTPSConnection(server.hostname, server.port, context=context)
    conn.connect()
    try:
        start = time.perf_counter()
        conn.request("GET", path, headers={"Accept": accept})
        response = conn.getresponse()
        if response.status != 200:
            raise SystemExit(f"watch-list: HTTP {response.status}: {response.read(300)!r}")
        tail, received = b"", 0
        while True:
            chunk = response.read1(1 << 20)
            if not chunk:
                raise SystemExit("watch-list: the stream ended before its bookmark")
            received += len(chunk)
            if b"initial-events-end" in tail + chunk:
                return time.perf_counter() - start, received
            tail = chunk[-64:]
    finally:
        conn.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", default="target/testenv/kubeconfig")
    parser.add_argument("--namespace", default="bench-informer")
    parser.add_argument("--rounds", type=int, default=7)
    opts = parser.parse_args()
    path = (f"/api/v1/namespaces/{opts.namespace}/configmaps?watch=1&sendInitialEvents=true"
            "&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=60")
    with tempfile.TemporaryDirectory() as workdir:
        server, context = tls_context(opts.kubeconfig, workdir)
        times = {name: [] for name in FORMATS}
        sizes = {}
        for _ in range(opts.rounds):
            for name, accept in FORMATS.items():
                secs, sizes[name] = sync_once(server, context, path, accept)
                times[name].append(secs)
    for name, values in times.items():
        rounds = " ".join(f"{v * 1000:.0f}" for v in values)
        print(f"{name:9s} median {statistics.median(values) * 1000:5.0f} ms  "
              f"{sizes[name]:>10,} bytes  rounds (ms): {rounds}")
    ratio = statistics.median(times["json"]) / statistics.median(times["protobuf"])
    print(f"json/protobuf: {ratio:.2f}")


if __name__ == "__main__":
    main()
