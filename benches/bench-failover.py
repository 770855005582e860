#!/usr/bin/env python3
"""Leader handover between two Memcached operator processes: `make bench-failover`.

Builds the operator (release, or --profile), makes sure the real local cluster is up (`make
cluster`, which leaves a running cluster alone; or uses the one TESTENV_KUBECONFIG and
TESTENV_KUBECTL name), installs the Memcached CRD, and in a fresh
namespace with one Memcached runs two operator processes with `--leader-elect` and
controller-runtime's default durations (lease 15 s, renew deadline 10 s, retry 2 s; the
release on SIGTERM is the operator's default). Each round:

1. both processes run and are ready (caches synced), one leads
   (`leader_election_master_status` 1 on its /metrics), and the standby has run for 5 s
   plus a random part of the retry period (it is warm: it has seen the leader renew);
2. the leader is stopped, by its pid: SIGTERM (it stops its controllers and releases the
   lease) or SIGKILL (the lease must expire); the stop is timed on the wall clock just
   before the signal;
3. **handover** is the time from the signal to the standby's log line `became the leader`
   (its JSON log's timestamp, on the same machine's clock);
4. the stopped process is started again, as the next round's standby.

The modes alternate, SIGTERM first in odd rounds. Medians, min and max per mode, and the
last line is exactly

    failover handover: sigterm X.XXs, sigkill Y.YYs (lease + retry = Z.ZZs)

Every round's JSON is kept in target/bench-failover/rounds.jsonl, the operators' logs in
target/bench-failover/logs/. A step that fails or times out fails the bench.
"""

import json
import os
import signal
import subprocess
import sys
import random
import time
import urllib.request
from datetime import datetime, timezone

import harness
from harness import free_port, log, median

BENCH = "bench-failover"
LEASE, RENEW, RETRY = 15.0, 10.0, 2.0
LEASE_NAME = "86f835c3.example.com"
# A running cluster named by TESTENV_KUBECONFIG (and TESTENV_KUBECTL) is used as it is;
# otherwise `make cluster` makes sure the local one runs.
KUBECONFIG = os.environ.get("TESTENV_KUBECONFIG", harness.KUBECONFIG)
KUBECTL = os.environ.get("TESTENV_KUBECTL",
                         os.path.join(harness.ROOT, "target", "testenv", "bin", "kubectl"))
MODES = ["sigterm", "sigkill"]
# How long the standby runs, at least, before the leader is stopped.
WARM = 5.0


class StepFailed(Exception):
    pass


def kubectl(*args, stdin=None):
    return subprocess.run([KUBECTL, "--kubeconfig", KUBECONFIG, *args], input=stdin,
                          capture_output=True, text=True, check=True).stdout


def wait(what, timeout, check, every=0.02):
    begin = time.monotonic()
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() - begin > timeout:
            raise StepFailed(f"{what}: not within {timeout:.0f}s")
        time.sleep(every)


def scrape(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            body = r.read().decode()
    except OSError:
        return None
    series = f'leader_election_master_status{{name="{LEASE_NAME}"}} '
    for line in body.splitlines():
        if line.startswith(series):
            return line[len(series):].strip()
    return None


def ready(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def wall(ts):
    """Seconds since the epoch of a JSON log's RFC 3339 UTC timestamp."""
    ts = ts.rstrip("Z")
    base, _, frac = ts.partition(".")
    t = datetime.strptime(base, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc)
    return t.timestamp() + (float("0." + frac) if frac else 0.0)


def led_at(log_path, after):
    """The timestamp of the first `became the leader` line after `after`, if any."""
    try:
        with open(log_path) as f:
            lines = f.readlines()
    except OSError:
        return None
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("fields", {}).get("message") == "became the leader":
            at = wall(entry["timestamp"])
            if at > after:
                return at
    return None


class Operator:
    def __init__(self, binary, ns, logs, name):
        self.binary, self.ns, self.logs, self.name = binary, ns, logs, name
        self.proc = None
        self.starts = 0

    def start(self):
        self.starts += 1
        self.metrics, self.probes = free_port(), free_port()
        self.log = os.path.join(self.logs, f"{self.name}-{self.starts}.log")
        self.proc = subprocess.Popen(
            [self.binary, "--kubeconfig", KUBECONFIG, "--namespace", self.ns,
             "--leader-elect", "--leader-election-namespace", self.ns,
             f"--leader-elect-lease-duration={LEASE:.0f}s",
             f"--leader-elect-renew-deadline={RENEW:.0f}s",
             f"--leader-elect-retry-period={RETRY:.0f}s",
             f"--metrics-bind-address=127.0.0.1:{self.metrics}", "--metrics-secure=false",
             f"--health-probe-bind-address=127.0.0.1:{self.probes}", "--log-format=json"],
            stdout=subprocess.DEVNULL, stderr=open(self.log, "w"),
            env={**os.environ, "RUST_LOG": "info"})
        wait(f"{self.name} ready", 120, lambda: ready(self.probes), every=0.1)

    def leading(self):
        return scrape(self.metrics) == "1"

    def stop(self, sig):
        """Sends `sig` by pid; returns the wall time just before it."""
        at = time.time()
        self.proc.send_signal(sig)
        return at

    def reap(self):
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def one_round(rnd, mode, ops):
    leader = wait("a leader", 120, lambda: next((o for o in ops if o.leading()), None), 0.1)
    standby = next(o for o in ops if o is not leader)
    if not ready(standby.probes):
        raise StepFailed("the standby is not ready")
    # A warm standby has watched the leader renew for a while: without this, one started
    # just now would count the lease from its first sight of it. The signal then lands at
    # a random point of the leader's renewal period.
    time.sleep(WARM + random.uniform(0, RETRY))
    sig = signal.SIGTERM if mode == "sigterm" else signal.SIGKILL
    sent = leader.stop(sig)
    took = wait("the standby leads", LEASE + 4 * RETRY + 30,
                lambda: led_at(standby.log, sent)) - sent
    leader.reap()
    record = {"round": rnd, "mode": mode, "handover_secs": took,
              "exit_code": leader.proc.returncode}
    log(f"{BENCH}: round {rnd} {mode}: handover {took:.2f}s (exit {leader.proc.returncode})")
    leader.start()
    return record


def main():
    p = harness.parser(__doc__, rounds=5, what="mode")
    p.add_argument("--profile", default="release",
                   help="cargo profile of the operator (default release; dev for a debug build)")
    opts = harness.parse(p)
    # Cargo writes the `dev` profile's binaries to target/debug.
    out_profile = "debug" if opts.profile == "dev" else opts.profile
    binary = harness.release_bin("memcached-operator", profile=out_profile)
    if not opts.no_build:
        log(f"{BENCH}: building memcached-operator ({opts.profile})")
        harness.cargo_build("--profile", opts.profile, "-p", "memcached-operator")
    if "TESTENV_KUBECONFIG" not in os.environ:
        harness.ensure_cluster(BENCH)
    out = harness.out_dir(BENCH)
    logs = os.path.join(out, "logs")
    os.makedirs(logs, exist_ok=True)
    have = subprocess.run([KUBECTL, "--kubeconfig", KUBECONFIG, "get", "crd",
                           "memcacheds.cache.example.com"], capture_output=True)
    if have.returncode != 0:
        crd = subprocess.run([binary, "crd"], capture_output=True, text=True,
                             check=True).stdout
        kubectl("apply", "--server-side", "-f", "-", stdin=crd)
    kubectl("wait", "--for=condition=Established", "crd/memcacheds.cache.example.com",
            "--timeout=60s")
    ns = f"bench-failover-{os.getpid()}"
    kubectl("create", "namespace", ns)
    ops = []
    records = []
    try:
        kubectl("apply", "-n", ns, "-f", "-", stdin=json.dumps({
            "apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached",
            "metadata": {"name": "mc"}, "spec": {"size": 0}}))
        ops = [Operator(binary, ns, logs, name) for name in ("a", "b")]
        for o in ops:
            o.start()
        for rnd in range(1, opts.rounds + 1):
            for mode in harness.alternated(MODES, rnd):
                records.append(one_round(rnd, mode, ops))
    except StepFailed as e:
        log(f"{BENCH}: FAILED: {e}")
        sys.exit(1)
    finally:
        for o in ops:
            if o.proc and o.proc.poll() is None:
                o.proc.send_signal(signal.SIGTERM)
                o.reap()
        with open(os.path.join(out, "rounds.jsonl"), "a") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")
        subprocess.run([KUBECTL, "--kubeconfig", KUBECONFIG, "patch", "-n", ns, "memcached",
                        "mc", "--type=merge", "-p", '{"metadata":{"finalizers":null}}'],
                       capture_output=True)
        subprocess.run([KUBECTL, "--kubeconfig", KUBECONFIG, "delete", "namespace", ns,
                        "--wait=false"], capture_output=True)

    harness.print_header(f"{'handover':<10} {'rounds':>6} {'median':>8} {'min':>8} {'max':>8}")
    medians = {}
    for mode in MODES:
        times = [r["handover_secs"] for r in records if r["mode"] == mode]
        medians[mode] = median(times)
        print(f"{mode:<10} {len(times):>6} {medians[mode]:>7.2f}s {min(times):>7.2f}s "
              f"{max(times):>7.2f}s")
    print(f"failover handover: sigterm {medians['sigterm']:.2f}s, "
          f"sigkill {medians['sigkill']:.2f}s (lease + retry = {LEASE + RETRY:.2f}s)")


if __name__ == "__main__":
    main()
