#!/usr/bin/env python3
"""The Memcached operator beside the same operator on controller-runtime: `make bench-operator`.

Builds our operator (cmd/memcached-operator) as the image ships it (`hack/build-dist.sh`: the
`dist` profile, linked statically), the
driver (cmd/operator-bench, release) and the Go peer (benches/clientgo/cmd/operator-peer: the
same operator on controller-runtime v0.25.2), makes sure the real local cluster is up (`make cluster`, which leaves a running
cluster alone), installs the Memcached CRD (`operator-bench install-crd`), then runs
rounds. In each round both operators run, each with its own namespace, every step done by
the same driver for both; ours goes first in odd rounds, controller-runtime in even ones:

1. for each operator in turn, a fresh namespace with one Memcached (of --size) is created and
   watched (`operator-bench start`); the operator process is spawned (metrics and probes on
   127.0.0.1, free ports; the cache limited to the namespace); **start** is the time from
   spawning it to its Deployment appearing in the watch (the first reconciles' visible
   effect); the driver then waits until the resource has converged (see `converged` in
   cmd/operator-bench);
2. /metrics and /readyz are checked to answer 200; after a settle, **resident memory idle**
   (VmRSS from /proc/<pid>/status);
3. **patch latency**, both operators running: 200 merge patches of each resource's
   spec.size alternating 1 and 2, the two resources taking turns one patch at a time (the
   first to go changing every time), so that both meet the same cluster and machine load;
   each is timed from just before the patch is sent to the Deployment watch event showing
   the new replicas, and the next patch waits until that resource's status has observed the
   previous generation;
4. for each operator in turn, 1,000 more Memcached resources (--size, default 0: no Pods)
   are created, 16 at a time, and waited for until every one has converged (**created →
   all converged**, from just before the first create; the driver's watches of the
   namespace run before it). Size 0 by default so that the row measures the operators and
   not the cluster's Pod pipeline: on this 2-core machine, a thousand Deployments of one
   replica created straight from kubectl take about 39 s to become ready, against 10 s at
   size 0, which would put a floor under both operators' times. After a settle,
   **resident memory with 1,000 CRs** (VmRSS, and the peak VmHWM).
   Meanwhile the driver counts the operator's **writes per resource** by verb and resource
   from its watches (`Writes` in cmd/operator-bench: a finalizer patch, a status patch, a
   Deployment created or its spec updated, an Event created or patched), and the
   operator's own `rest_client_requests_total` (served by both) is read before and after:
   every request it sent, by method, including those that changed nothing;
5. that operator is stopped by its pid (SIGTERM), the driver removes every resource's
   finalizer and deletes the namespace, and waits until it has gone (not timed against
   anything: only so that the next step starts on a quiet cluster).

Medians over the rounds, a table, target lines, and the last line is exactly

    operator ours/controller-runtime: p99 X.XX, rss Y.YY, start Z.ZZ, bulk W.WW

ratios of medians (ours over controller-runtime's; lower is better): the patch latency's p99,
the resident memory with 1,000 CRs, the start, and the 1,000 CRs' created → all converged
(bulk). A patch's p50 is the API server's two writes for both operators, so it has no
target. Every run's JSON is kept in
target/bench-operator/rounds.jsonl, each operator's log in target/bench-operator/logs/.
A step that fails or times out in any round fails the bench, naming the round and the step.
"""

import json
import os
import subprocess
import sys
import time
import urllib.request

import harness
from harness import KUBECONFIG, fmt_mib, fmt_ms, fmt_ratio, free_port, log, memory_of, stop

OUT_DIR = os.path.join(harness.ROOT, "target", "bench-operator")
HOST = subprocess.run(["rustc", "-vV"], capture_output=True, text=True,
                      check=True).stdout.split("host: ")[1].split()[0]
OURS = harness.release_bin("memcached-operator", profile=os.path.join(HOST, "dist"))
DRIVER = harness.release_bin("operator-bench")
THEIRS = os.path.join(OUT_DIR, "operator-peer")
PEER = "controller-runtime"
IMPLS = ["ours", PEER]
# With --read-your-writes: ours with it off, controller-runtime with it on.
OURS_NO_RYW = "ours/no-ryw"
PEER_RYW = f"{PEER}/ryw"
# Targets: ours at most this fraction of controller-runtime's.
TARGETS = {"p99_ms": 0.8, "rss_idle_bytes": 0.25, "rss_bytes": 0.25, "start_secs": 0.5,
           "converge_secs": 0.5}


# Names this run's namespaces apart from those of earlier runs.
RUN_ID = f"{int(time.time()) % 100000:05d}"


class StepFailed(Exception):
    pass


def build():
    log("bench-operator: building memcached-operator (hack/build-dist.sh, as the image ships "
        "it), operator-bench (release) and the Go peer")
    subprocess.run([os.path.join(harness.ROOT, "hack", "build-dist.sh"), "--quiet"],
                   cwd=harness.ROOT, check=True, stdout=subprocess.DEVNULL)
    harness.cargo_build("--release", "-p", "operator-bench")
    harness.go_build(THEIRS, "./cmd/operator-peer")


def driver_lines(opts, ns, *args, step, timeout=900):
    """Runs one driver subcommand to its end; returns its JSON lines."""
    cmd = [DRIVER, "--kubeconfig", opts.kubeconfig, "--namespace", ns, *args]
    try:
        done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise StepFailed(f"{step}: the driver did not finish within {timeout} s")
    if done.returncode != 0:
        raise StepFailed(f"{step}: operator-bench {' '.join(args)} exited {done.returncode} "
                         "(its error is above)")
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def driver(opts, ns, *args, step, timeout=900):
    """Runs one driver subcommand to its end; returns its last JSON line."""
    lines = driver_lines(opts, ns, *args, step=step, timeout=timeout)
    return lines[-1] if lines else {}


def http_ok(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


def operator_command(name, opts, ns, metrics, probes):
    common = ["--kubeconfig", opts.kubeconfig, "--namespace", ns,
              f"--metrics-bind-address=127.0.0.1:{metrics}",
              f"--health-probe-bind-address=127.0.0.1:{probes}"]
    if name.startswith("ours"):
        # Plain HTTP metrics, as the peer serves them (both scaffolds default to HTTPS with
        # TokenReview and SubjectAccessReview per scrape).
        ryw = ["--read-your-writes=false"] if name == OURS_NO_RYW else []
        workers = ([f"--max-concurrent-reconciles={opts.ours_workers}"]
                   if opts.ours_workers else [])
        return [opts.ours_bin, *common, "--metrics-secure=false",
                f"--kube-api-qps={opts.ours_qps}", *ryw, *workers]
    extra = ["--strip-managed-fields"] if opts.peer_strip else []
    if name == PEER_RYW:
        extra.append("--read-your-writes")
    return [THEIRS, *common, "--zap-log-level=info", *extra]


def requests_by_method(url):
    """The operator's API requests so far, by method (its `rest_client_requests_total`, as
    client-go and ours both serve it), `{}` if /metrics does not answer."""
    counts = {}
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return counts
    for line in text.splitlines():
        if not line.startswith("rest_client_requests_total{"):
            continue
        labels, value = line[len("rest_client_requests_total{"):].rsplit("} ", 1)
        method = dict(part.split("=", 1) for part in labels.split(",")).get("method", '""')
        method = method.strip('"')
        counts[method] = counts.get(method, 0) + float(value)
    return counts


def alive(proc, step):
    if proc.poll() is not None:
        raise StepFailed(f"{step}: the operator exited ({proc.returncode})")


class Run:
    """One operator in one round: its namespace, process and record."""

    def __init__(self, name, rnd, opts):
        self.name, self.opts = name, opts
        slug = name.replace(PEER, "cr").replace("/", "-")
        # The run's id in the name: a namespace an earlier run left terminating on a busy
        # cluster never holds this one up.
        self.ns = f"bench-operator-{RUN_ID}-r{rnd}-{slug}"
        self.rec = {"impl": name, "round": rnd, "namespace": self.ns, "crs": opts.crs,
                    "size": opts.size}
        os.makedirs(os.path.join(OUT_DIR, "logs"), exist_ok=True)
        self.log_path = os.path.join(OUT_DIR, "logs", f"{slug}-round{rnd}.log")
        self.proc = None
        self.waiter = None
        self.done = False

    def start(self):
        """1. One resource, watched; then the operator; start; 2. probes, memory idle."""
        opts, rec = self.opts, self.rec
        step = "start"
        watcher = subprocess.Popen(
            [DRIVER, "--kubeconfig", opts.kubeconfig, "--namespace", self.ns, "start",
             "--size", str(opts.size)],
            stdout=subprocess.PIPE, text=True)
        first = watcher.stdout.readline()
        if not first or json.loads(first).get("event") != "watching":
            watcher.wait()
            raise StepFailed("start: the driver could not create and watch the first "
                             "Memcached (its error is above)")
        metrics, probes = free_port(), free_port()
        self.metrics_url = f"http://127.0.0.1:{metrics}/metrics"
        cmd = operator_command(self.name, opts, self.ns, metrics, probes)
        with open(self.log_path, "w") as log_file:
            spawned = time.time()
            self.proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT)
        events = {}
        for line in watcher.stdout:
            if line.strip():
                msg = json.loads(line)
                events[msg["event"]] = msg
        if watcher.wait() != 0 or "converged" not in events:
            exited = "" if self.proc.poll() is None else f"; the operator exited ({self.proc.returncode})"
            raise StepFailed(f"{step}: the first Memcached did not converge under {self.name} "
                             f"(driver exit {watcher.returncode}{exited}; operator log "
                             f"{self.log_path})")
        rec["start_secs"] = events["deployment"]["unix_secs"] - spawned
        rec["first_converged_secs"] = events["converged"]["unix_secs"] - spawned
        log(f"bench-operator:   {self.name}: start {rec['start_secs'] * 1e3:.0f} ms "
            f"(converged at {rec['first_converged_secs'] * 1e3:.0f} ms)")

        step = "metrics and probes"
        for url in (f"http://127.0.0.1:{metrics}/metrics",
                    f"http://127.0.0.1:{probes}/readyz",
                    f"http://127.0.0.1:{probes}/healthz"):
            if not http_ok(url):
                raise StepFailed(f"{step}: {url} did not answer 200")
        step = "memory idle"
        time.sleep(opts.settle)
        alive(self.proc, step)
        memory = memory_of(self.proc.pid)
        rec["rss_idle_bytes"] = memory["VmRSS"]
        rec["anon_idle_bytes"] = memory["RssAnon"]
        rec["file_idle_bytes"] = memory["RssFile"]

    def grow(self):
        """4. A thousand resources, memory with them; 5. stop and clean up."""
        opts, rec = self.opts, self.rec
        step = f"waiting for {opts.crs} Memcached resources to converge"
        # The watches that count the operator's writes run before the first create.
        waiter = self.waiter = subprocess.Popen(
            [DRIVER, "--kubeconfig", opts.kubeconfig, "--namespace", self.ns,
             "wait-converged", "--count", str(opts.crs), "--prefix", "mc-",
             "--timeout-secs", str(opts.converge_timeout), "--count-writes"],
            stdout=subprocess.PIPE, text=True)
        first = waiter.stdout.readline()
        if not first or json.loads(first).get("event") != "watching":
            waiter.wait()
            raise StepFailed(f"{step}: the driver could not watch {self.ns} (its error is above)")
        requests_before = requests_by_method(self.metrics_url)
        seeding = time.time()
        seeded = driver(opts, self.ns, "seed", "--count", str(opts.crs), "--size",
                        str(opts.size), step=f"seeding {opts.crs} Memcached resources")
        rec["seed_secs"] = seeded["secs"]
        lines = [json.loads(line) for line in waiter.stdout if line.strip()]
        if waiter.wait() != 0 or not lines or lines[-1].get("event") != "converged":
            raise StepFailed(f"{step}: operator-bench wait-converged exited "
                             f"{waiter.returncode} (its error is above)")
        converged = lines[-1]
        rec["converge_secs"] = converged["unix_secs"] - seeding
        requests_after = requests_by_method(self.metrics_url)
        rec["writes"] = converged.get("writes", {})
        rec["requests"] = {m: requests_after.get(m, 0) - requests_before.get(m, 0)
                           for m in sorted(set(requests_after) | set(requests_before))}
        # Per resource, flat, so that medians and ratios come as for every other figure.
        for what, n in rec["writes"].items():
            rec[f"writes/{what}"] = n / opts.crs
        for method, n in rec["requests"].items():
            rec[f"requests/{method}"] = n / opts.crs
        log(f"bench-operator:   {self.name}: writes seen {rec['writes']}; "
            f"requests sent {rec['requests']}")
        step = "memory with the resources"
        time.sleep(opts.settle)
        alive(self.proc, step)
        memory = memory_of(self.proc.pid)
        rec["rss_bytes"], rec["hwm_bytes"] = memory["VmRSS"], memory["VmHWM"]
        rec["anon_bytes"], rec["file_bytes"] = memory["RssAnon"], memory["RssFile"]
        log(f"bench-operator:   {self.name}: {opts.crs:,} more converged in "
            f"{rec['converge_secs']:.1f} s (created in {rec['seed_secs']:.1f} s); rss idle {fmt_mib(rec['rss_idle_bytes'])}, "
            f"with them {fmt_mib(rec['rss_bytes'])}")
        stop(self.proc)
        try:
            cleaned = driver(opts, self.ns, "cleanup", "--strip-finalizers", "--timeout-secs",
                             str(opts.cleanup_timeout), step="cleanup")
            rec["cleanup_secs"] = cleaned["secs"]
            rec["cleanup_phases"] = cleaned.get("phases")
        except StepFailed as failure:
            # Nothing is measured past this point: a namespace still terminating (a
            # cluster busy with others' work) is left to the cluster.
            log(f"bench-operator:   {self.name}: {failure}; going on")
        self.done = True

    def abandon(self):
        """Stops the operator; after a failure, leaves no namespace behind."""
        if self.proc is not None:
            stop(self.proc)
        if self.waiter is not None and self.waiter.poll() is None:
            stop(self.waiter)
        if not self.done:
            subprocess.run([DRIVER, "--kubeconfig", self.opts.kubeconfig, "--namespace",
                            self.ns, "cleanup", "--strip-finalizers"], stdout=subprocess.DEVNULL)


def run_round(rnd, order, opts):
    """Both operators in one round; their records. Each starts alone (the other idle); their
    size patches take turns, one at a time (3.); each then grows to its thousand resources
    alone and is stopped."""
    runs = [Run(name, rnd, opts) for name in order]
    try:
        for r in runs:
            r.start()
        step = "patch latency"
        lines = driver_lines(opts, runs[0].ns, "patch-latency", "--count", str(opts.patches),
                             "--paired-with", ",".join(r.ns for r in runs[1:]), step=step)
        by_ns = {line.get("namespace"): line for line in lines}
        for r in runs:
            latency = by_ns.get(r.ns)
            if latency is None:
                raise StepFailed(f"{step}: the driver reported nothing for {r.ns}")
            r.rec.update({k: v for k, v in latency.items() if k not in ("event", "namespace")})
            log(f"bench-operator:   {r.name}: patch → Deployment p50 {r.rec['p50_ms']:.1f} ms, "
                f"p99 {r.rec['p99_ms']:.1f} ms, max {r.rec['max_ms']:.1f} ms")
        for r in runs:
            r.grow()
        return [r.rec for r in runs]
    except StepFailed as failure:
        raise SystemExit(f"bench-operator: round {rnd}: {failure}")
    finally:
        for r in runs:
            r.abandon()


def fmt_millis(ms):
    return "—" if ms is None else f"{ms:.1f} ms"


def fmt_count(n):
    return "—" if n is None else f"{n:.2f}"


def fmt_secs(secs):
    return "—" if secs is None else f"{secs:.1f} s"


def main():
    parser = harness.parser(__doc__, rounds=3, what="operator")
    parser.add_argument("--no-cluster", action="store_true",
                        help="skip `make cluster` (the kubeconfig's cluster runs)")
    parser.add_argument("--kubeconfig", default=KUBECONFIG, help="default: the local cluster's")
    parser.add_argument("--patches", type=int, default=200, help="size patches per run")
    parser.add_argument("--crs", type=int, default=1000, help="Memcached resources to add")
    parser.add_argument("--size", type=int, default=0,
                        help="their spec.size (default 0: no Pods, so that the cluster's "
                             "Pod pipeline does not set the pace; 1 for a Pod each)")
    parser.add_argument("--settle", type=float, default=2.0,
                        help="seconds between convergence and reading VmRSS (default 2)")
    parser.add_argument("--converge-timeout", type=int, default=300,
                        help="seconds the resources may take to converge (default 300)")
    parser.add_argument("--ours-qps", type=float, default=-1,
                        help="our operator's --kube-api-qps (default -1: no client-side "
                             "limit, its default, as controller-runtime's GetConfig)")
    parser.add_argument("--cleanup-timeout", type=int, default=120,
                        help="seconds to wait for a run's namespace to go (default 120; "
                             "past it the bench goes on and leaves it to the cluster)")
    parser.add_argument("--ours-workers", type=int, default=0,
                        help="our operator's --max-concurrent-reconciles (default: its own)")
    parser.add_argument("--ours-bin", default=OURS,
                        help="our operator's binary (default: hack/build-dist.sh's), e.g. one "
                             "built with another profile")
    parser.add_argument("--peer-strip", action="store_true",
                        help="run the peer with --strip-managed-fields "
                             "(cache.TransformStripManagedFields), as our cache does by default")
    parser.add_argument("--read-your-writes", action="store_true",
                        help="also run ours with read-your-own-writes off "
                             "(--read-your-writes=false) and controller-runtime with it on "
                             "(EnableReadYourWritesConsistency), and report each on and off")
    opts = harness.parse(parser)
    impls = IMPLS + ([OURS_NO_RYW, PEER_RYW] if opts.read_your_writes else [])

    began = time.time()
    if not opts.no_build:
        build()
    if not opts.no_cluster and opts.kubeconfig == KUBECONFIG:
        harness.ensure_cluster("bench-operator")
    out_dir = harness.out_dir("bench-operator")
    log("bench-operator: installing the Memcached CRD; removing namespaces of earlier runs")
    driver(opts, "default", "install-crd", step="installing the CRD")
    try:
        driver(opts, "default", "cleanup-stale", "--timeout-secs", "60",
               step="removing namespaces of earlier runs")
    except StepFailed as failure:
        log(f"bench-operator: {failure}; going on (this run's namespaces have their own names)")

    def one_round(rnd, order):
        log(f"bench-operator: round {rnd}/{opts.rounds}: {' then '.join(order)} "
            f"({time.time() - began:.0f} s in)")
        return run_round(rnd, order, opts)

    results = harness.run_rounds(out_dir, opts.rounds, impls, one_round, key="impl")
    get = results.get

    def spread(field):
        return results.spread(field, "ours", PEER)

    crs = f"{opts.crs:,}"
    rows = [
        ("start to first reconcile (spawn → Deployment)", "start_secs", fmt_ms),
        ("  … to the first resource converged", "first_converged_secs", fmt_ms),
        ("patch → Deployment replicas, p50", "p50_ms", fmt_millis),
        ("patch → Deployment replicas, p99", "p99_ms", fmt_millis),
        ("patch → Deployment replicas, max", "max_ms", fmt_millis),
        ("  the patch request alone, p50 (driver's)", "patch_rtt_p50_ms", fmt_millis),
        ("resident memory idle (VmRSS)", "rss_idle_bytes", fmt_mib),
        ("  anonymous (heap, stacks: RssAnon)", "anon_idle_bytes", fmt_mib),
        ("  file-backed (the binary: RssFile)", "file_idle_bytes", fmt_mib),
        (f"resident memory with {crs} CRs (VmRSS)", "rss_bytes", fmt_mib),
        ("  anonymous (RssAnon)", "anon_bytes", fmt_mib),
        ("  file-backed (RssFile)", "file_bytes", fmt_mib),
        (f"peak resident memory with {crs} CRs (VmHWM)", "hwm_bytes", fmt_mib),
        (f"{crs} CRs: created → all converged", "converge_secs", fmt_secs),
    ]
    # Writes per resource while they converged, by verb and resource (seen in the watches),
    # and every request the operator sent, by method (its rest_client_requests_total).
    fields = sorted({f for by_round in results.by_round.values() for rec in by_round.values()
                     for f in rec if f.startswith(("writes/", "requests/"))},
                    key=lambda f: (f.startswith("requests/"), f))
    per = "per resource"
    rows += [(f"  {'writes' if f.startswith('writes/') else 'requests'} {per}: "
              f"{f.split('/', 1)[1]}", f, fmt_count) for f in fields]
    print(f"Operator: ours vs controller-runtime v0.25.2, medians of {opts.rounds} alternating "
          f"rounds ({opts.patches} size patches 1↔2; {crs} Memcached resources of size "
          f"{opts.size}; ours with --kube-api-qps={opts.ours_qps:g}"
          f"{'; c-r stripping managedFields' if opts.peer_strip else ''})")
    print()
    header = f"{'':<48} {'ours':>10} {'c-r':>10} {'ours/c-r':>10} {'(per round)':>12}"
    harness.print_header(header)
    for label, field, fmt in rows:
        ours, other = get("ours", field), get(PEER, field)
        print(f"{label:<48} {fmt(ours):>10} {fmt(other):>10} "
              f"{fmt_ratio(ours, other):>10} {spread(field):>12}")
    print()
    for field, what in [("p99_ms", "patch → Deployment p99"),
                        ("rss_idle_bytes", "resident memory idle"),
                        ("rss_bytes", f"resident memory with {crs} CRs"),
                        ("start_secs", "start to first reconcile"),
                        ("converge_secs", f"{crs} CRs created → all converged")]:
        ours, other = get("ours", field), get(PEER, field)
        if ours is not None and other:
            harness.target_line(what, ours / other, TARGETS[field], "controller-runtime")
    if opts.read_your_writes:
        print()
        print("read-your-own-writes: on (ours' default) and off (controller-runtime's default)")
        header = (f"{'':<48} {'ours on':>10} {'ours off':>10} {'on/off':>8} "
                  f"{'c-r on':>10} {'c-r off':>10} {'on/off':>8}")
        harness.print_header(header)
        for label, field, fmt in rows:
            on, off = get("ours", field), get(OURS_NO_RYW, field)
            their_on, their_off = get(PEER_RYW, field), get(PEER, field)
            print(f"{label:<48} {fmt(on):>10} {fmt(off):>10} {fmt_ratio(on, off):>8} "
                  f"{fmt(their_on):>10} {fmt(their_off):>10} {fmt_ratio(their_on, their_off):>8}")
    print()
    log(f"bench-operator: done in {time.time() - began:.0f} s")
    ratios = [fmt_ratio(get("ours", f), get(PEER, f))
              for f in ("p99_ms", "rss_bytes", "start_secs", "converge_secs")]
    p99, rss, start, bulk = (harness.or_na(r) for r in ratios)
    print(f"operator ours/controller-runtime: p99 {p99}, rss {rss}, start {start}, bulk {bulk}")
    return 0 if "—" not in ratios else 1


if __name__ == "__main__":
    sys.exit(main())
