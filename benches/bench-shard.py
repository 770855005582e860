#!/usr/bin/env python3
"""Sharded Memcached operators, 3 replicas against 1: `make bench-shard`.

Builds the operator (cmd/memcached-operator; `--profile`, default `dev`, the debug build
the tests use) and, against the local cluster (TESTENV_KUBECONFIG / TESTENV_KUBECTL, else
target/testenv/), installs the Memcached CRD, then runs rounds. Each round runs two
configurations, in alternating order, each in a fresh namespace:

* **1 replica**: one operator process with `--shard` (so it runs the same code, holding
  the whole hash space);
* **3 replicas**: three processes with `--shard`, all the way through: the throughput;
* **3 replicas, failover**: three processes with `--shard`; when a third of the resources
  have converged, one is killed with SIGKILL and a fourth is started: the takeover, and
  that every resource still converges.

Every process gets the same `--max-concurrent-reconciles` (`--concurrency`, default 1: one
reconcile at a time per replica, so that what the replicas divide is the outside wait below,
not the shared API server), and each reconcile first waits 50 ms, the stand-in for a call to
a service outside the cluster (`MEMCACHED_OUTSIDE_SERVICE_DELAY_MS=50`, an operator setting
that exists for this bench).
The operators are started first; then `--resources` (default 3,000) Memcacheds of size 0 are
created, 16 at a time, by bench-operator's driver (`operator-bench seed`; size 0: no Pods,
so that the cluster's own controllers are not what is measured). **Converge time** runs
from just before the first create to the moment every resource has converged, as the
driver's one watch of the namespace sees it (`operator-bench wait-converged`, the same
definition as bench-operator's: the Deployment at the size and observed by its controller,
the finalizer on, the status observing the generation). A watch, not a poll: listing
3,000 resources every second took a third of a core from the machine under test.

From the operators' JSON logs (target/bench-shard/logs/):

* **overlaps**: reconciles of one key in two replicas whose intervals (from "shard reconcile
  started" to "ended"; a killed process's open one until it was seen dead) overlap in time;
* **takeover**: from the SIGKILL until the live replicas' active ranges ("shard ranges
  active") cover the hash space again;
* **largest share**: the largest number of Memcacheds a live replica's cache held at the end
  ("shard cache"), over the resources.

Medians over the rounds; the last line is exactly

    shard 3/1: throughput X.XX, largest share Y.YY, overlaps N, takeover Z.Zs

throughput: the 1-replica converge time over the steady 3-replica one (higher is better;
the ideal is 3); largest share: the larger of the two 3-replica runs'; takeover: the
failover run's; overlaps: the total over every run (anything but 0 is a failure). The
failover run's converge time is printed beside them.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import harness
from harness import free_port, log, median, stop

OUT_DIR = harness.out_dir("bench-shard")
LOG_DIR = os.path.join(OUT_DIR, "logs")
KUBECONFIG = os.environ.get("TESTENV_KUBECONFIG", harness.KUBECONFIG)
KUBECTL = os.environ.get("TESTENV_KUBECTL",
                         os.path.join(harness.ROOT, "target", "testenv", "bin", "kubectl"))
DRIVER = harness.release_bin("operator-bench")
DELAY_MS = 50
SPACE = 1 << 64


def kubectl(*args, stdin=None, check=True):
    out = subprocess.run([KUBECTL, "--kubeconfig", KUBECONFIG, *args], input=stdin,
                         capture_output=True, text=True)
    if check and out.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {out.stderr.strip()}")
    return out.stdout


def now_us():
    return int(time.time() * 1e6)


def micros(ts):
    """Microseconds since the epoch of the JSON log's RFC 3339 UTC timestamp."""
    import datetime
    date, _, frac = ts.rstrip("Z").partition(".")
    base = datetime.datetime.strptime(date, "%Y-%m-%dT%H:%M:%S").replace(
        tzinfo=datetime.timezone.utc)
    return int(base.timestamp()) * 1_000_000 + int((frac + "000000")[:6])


def parse_ranges(text):
    """`0x…-0x…,…` as a list of (start, end)."""
    out = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        a, b = part.split("-")
        out.append((int(a, 16), int(b, 16)))
    return sorted(out)


def covers_all(ranges):
    at = 0
    for a, b in sorted(ranges):
        if a > at:
            return False
        at = max(at, b)
    return at >= SPACE


class Replica:
    def __init__(self, binary, ns, identity, rnd, config, concurrency):
        self.identity = identity
        self.log = os.path.join(LOG_DIR, f"round{rnd}-{config}-{identity}.log")
        self.dead = None
        env = dict(os.environ, RUST_LOG="info",
                   MEMCACHED_OUTSIDE_SERVICE_DELAY_MS=str(DELAY_MS))
        self.proc = subprocess.Popen(
            [binary, "--kubeconfig", KUBECONFIG, "--namespace", ns, "--shard",
             "--shard-identity", identity, "--shard-namespace", ns,
             f"--max-concurrent-reconciles={concurrency}", "--metrics-bind-address=0",
             f"--health-probe-bind-address=127.0.0.1:{free_port()}", "--log-format=json"],
            stdout=subprocess.DEVNULL, stderr=open(self.log, "w"), env=env)

    def kill(self):
        sent = now_us()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.dead = now_us()
        return sent

    def read(self):
        """(reconcile intervals, active-range changes, cache sizes) from the log."""
        intervals, active, cached, open_ = [], [], [], {}
        with open(self.log) as f:
            for line in f:
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                fields = entry.get("fields", {})
                message = fields.get("message")
                at = micros(entry["timestamp"])
                span = next((s for s in entry.get("spans", []) if s.get("name") == "reconcile"),
                            None)
                if message == "shard ranges active":
                    active.append((at, parse_ranges(fields.get("ranges", ""))))
                elif message == "shard cache" and fields.get("kind") == "Memcached":
                    cached.append((at, int(fields["cached"])))
                elif message == "shard reconcile started" and span:
                    open_[span["reconcile_id"]] = (f"{span['namespace']}/{span['object']}", at)
                elif message == "shard reconcile ended" and span:
                    key, start = open_.pop(span["reconcile_id"])
                    intervals.append((key, start, at))
        for key, start in open_.values():
            intervals.append((key, start, self.dead or 2**62))
        return intervals, active, cached


def driver(ns, *args, **popen):
    """`operator-bench` (cmd/operator-bench, bench-operator's driver) on the namespace."""
    return subprocess.Popen([DRIVER, "--kubeconfig", KUBECONFIG, "--namespace", ns, *args],
                            **popen)


class Converged:
    """`operator-bench wait-converged --progress` on the namespace: one list and watch of its
    Memcacheds and Deployments, read on a thread. `count` is how many have converged (the
    driver's definition, as in bench-operator: Deployment at the size and observed, the
    finalizer on, the status observing the generation); `done` the moment all had, in
    microseconds."""

    def __init__(self, ns, n, timeout):
        self.count, self.done, self.error = 0, None, None
        self.proc = driver(ns, "wait-converged", "--count", str(n), "--prefix", "mc-",
                           "--timeout-secs", str(timeout), "--progress",
                           stdout=subprocess.PIPE, text=True)
        first = self.proc.stdout.readline()
        if not first or json.loads(first).get("event") != "watching":
            self.proc.wait()
            raise RuntimeError(f"operator-bench could not watch {ns} (its error is above)")
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            event = json.loads(line)
            if event.get("event") == "progress":
                self.count = event["converged"]
            elif event.get("event") == "converged":
                self.done = int(event["unix_secs"] * 1e6)
        if self.proc.wait() != 0 and self.done is None:
            self.error = f"operator-bench wait-converged exited {self.proc.returncode}"


def release(ns):
    """The operators are gone: drops every Memcached's finalizer (one replace of the whole
    list) so that the namespace can go, and deletes it without waiting."""
    listed = json.loads(kubectl("get", "memcacheds", "-n", ns, "-o", "json"))
    for item in listed["items"]:
        item["metadata"].pop("finalizers", None)
    if listed["items"]:
        kubectl("replace", "-f", "-", stdin=json.dumps(listed), check=False)
    kubectl("delete", "namespace", ns, "--wait=false", check=False)


# The configurations a round runs: name, replicas, whether one is killed and one added.
CONFIGS = {"1": (1, False), "3": (3, False), "3-failover": (3, True)}


def run(binary, rnd, config, n, timeout, concurrency):
    count, failover = CONFIGS[config]
    ns = f"shard-bench-{os.getpid()}-{rnd}-{config}"
    kubectl("create", "namespace", ns)
    replicas = [Replica(binary, ns, f"r{i}", rnd, config, concurrency) for i in range(count)]
    converged = Converged(ns, n, timeout)
    time.sleep(5)  # caches synced, ranges settled
    start = now_us()
    seeding = driver(ns, "seed", "--count", str(n), "--size", "0", "--prefix", "mc",
                     stdout=subprocess.DEVNULL)
    kill_at = None
    while converged.done is None:
        if seeding.poll() not in (None, 0):
            raise RuntimeError(f"round {rnd}, {config}: operator-bench seed exited "
                               f"{seeding.returncode} (its error is above)")
        if converged.error:
            raise RuntimeError(f"round {rnd}, {config}: {converged.count}/{n} converged: "
                               f"{converged.error}")
        if failover and kill_at is None and converged.count >= n // 3:
            kill_at = replicas[1].kill()
            replicas.append(Replica(binary, ns, f"r{count}", rnd, config, concurrency))
            log(f"  round {rnd}, {config}: SIGKILL r1 at {converged.count}/{n}, "
                f"started r{count}")
        time.sleep(0.1)
    seeding.wait()
    elapsed = (converged.done - start) / 1e6
    time.sleep(2 * 2)  # let the "shard cache" reports catch up
    reads = [r.read() for r in replicas]
    # Overlaps: one key in two replicas at once.
    by_key = {}
    for i, (intervals, _, _) in enumerate(reads):
        for key, a, b in intervals:
            by_key.setdefault(key, []).append((i, a, b))
    overlaps = 0
    for spans in by_key.values():
        for x in range(len(spans)):
            for y in range(x + 1, len(spans)):
                (i, a1, b1), (j, a2, b2) = spans[x], spans[y]
                if i != j and a1 < b2 and a2 < b1:
                    overlaps += 1
    # Takeover: from the kill until the live replicas' active ranges cover the space.
    takeover = None
    if kill_at is not None:
        live = [r for r, rep in zip(reads, replicas) if rep.dead is None]
        times = sorted(t for _, active, _ in live for t, _ in active if t >= kill_at)
        for t in times:
            ranges = []
            for _, active, _ in live:
                now = [rs for at, rs in active if at <= t]
                ranges += now[-1] if now else []
            if covers_all(ranges):
                takeover = (t - kill_at) / 1e6
                break
    shares = [cached[-1][1] / n for (_, _, cached), rep in zip(reads, replicas)
              if rep.dead is None and cached]
    for r in replicas:
        if r.dead is None:
            stop(r.proc)
    release(ns)
    return {"round": rnd, "config": config, "replicas": count, "concurrency": concurrency,
            "converge_s": elapsed, "overlaps": overlaps,
            "takeover_s": takeover, "largest_share": max(shares) if shares else None,
            "shares": shares, "reconciles": sum(len(r[0]) for r in reads)}


def main():
    p = harness.parser(__doc__, rounds=1, what="configuration")
    p.add_argument("--resources", type=int, default=3000, help="Memcacheds (default 3000)")
    p.add_argument("--profile", default="dev", help="cargo profile of the operator (dev)")
    p.add_argument("--timeout", type=int, default=1800, help="seconds a run may take")
    p.add_argument("--concurrency", type=int, default=1,
                   help="--max-concurrent-reconciles of every operator process (default 1)")
    opts = harness.parse(p)
    if opts.concurrency < 1:
        p.error("--concurrency must be at least 1")
    os.makedirs(LOG_DIR, exist_ok=True)
    if not opts.no_build:
        log("bench-shard: building the operator")
        harness.cargo_build("-p", "memcached-operator", "--profile", opts.profile)
        harness.cargo_build("--release", "-p", "operator-bench")
    binary = harness.release_bin("memcached-operator",
                                 profile="debug" if opts.profile == "dev" else opts.profile)
    crd = subprocess.run([binary, "crd"], capture_output=True, text=True, check=True).stdout
    kubectl("apply", "-f", "-", stdin=crd)
    results = []
    with open(os.path.join(OUT_DIR, "rounds.jsonl"), "a") as record:
        for rnd in range(1, opts.rounds + 1):
            for config in harness.alternated(list(CONFIGS), rnd):
                log(f"bench-shard: round {rnd}, configuration {config}, {opts.resources} resources, "
                    f"concurrency {opts.concurrency} per replica")
                result = run(binary, rnd, config, opts.resources, opts.timeout, opts.concurrency)
                log(f"  {json.dumps(result)}")
                record.write(json.dumps(result) + "\n")
                results.append(result)
    def of(config, field):
        values = [r[field] for r in results if r["config"] == config and r[field] is not None]
        return median(values) if values else None

    one, t3 = of("1", "converge_s"), of("3", "converge_s")
    share = max(of(c, "largest_share") or 0 for c in ("3", "3-failover"))
    takeover = of("3-failover", "takeover_s") or 0
    overlaps = sum(r["overlaps"] for r in results)
    print(f"{opts.resources} Memcacheds, {opts.rounds} round(s), --max-concurrent-reconciles "
          f"{opts.concurrency} per replica, {DELAY_MS} ms outside wait per reconcile")
    print("| replicas | converge (s, median) | 1 / this | reconciles | largest share |")
    print("|---|---|---|---|---|")
    for config in CONFIGS:
        t = of(config, "converge_s")
        largest = of(config, "largest_share")
        print(f"| {config} | {t:.1f} | {one / t:.2f} | {of(config, 'reconciles'):.0f} | "
              f"{'' if largest is None else f'{largest:.2f}'} |")
    print(f"shard 3/1: throughput {one / t3:.2f}, largest share {share:.2f}, "
          f"overlaps {overlaps}, takeover {takeover:.1f}s")
    return 0 if overlaps == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
