"""What the head-to-head bench scripts share: alternating rounds, medians, ratios, tables.

Every `benches/bench-*.py` runs our program and its peer in one invocation, several rounds,
ours first in odd rounds and the peer first in even ones (so drift in the machine's load hits
both alike), keeps every round's JSON record in `target/<bench>/rounds.jsonl`, and reports
the median of each figure over the rounds beside the range of the per-round ratios. The
scripts keep their own measurement steps and tables; this module holds the rest.
"""

import argparse
import base64
import json
import os
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import urllib.parse
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Honour CARGO_TARGET_DIR, so a build into another target directory is the one measured.
TARGET_DIR = os.path.join(ROOT, os.environ.get("CARGO_TARGET_DIR", "target"))
KUBECONFIG = os.path.join(ROOT, "target", "testenv", "kubeconfig")
CLIENTGO = os.path.join(ROOT, "benches", "clientgo")


def log(message):
    """Progress, on stderr, so that stdout holds only the table."""
    print(message, file=sys.stderr, flush=True)


def out_dir(bench):
    """`target/<bench>/`, made if missing: the rounds' records, logs and the Go peer."""
    path = os.path.join(ROOT, "target", bench)
    os.makedirs(path, exist_ok=True)
    return path


def release_bin(name, profile="release"):
    """The path of one of our binaries built with `profile`."""
    return os.path.join(TARGET_DIR, profile, name)


def parser(doc, rounds, what="program"):
    """The options every script takes: `--rounds` (at least 1) and `--no-build`."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--rounds", type=int, default=rounds,
                   help=f"rounds of each {what} (default {rounds})")
    p.add_argument("--no-build", action="store_true", help="use the binaries already built")
    return p


def parse(p):
    """Parses the options, refusing fewer than one round."""
    opts = p.parse_args()
    if opts.rounds < 1:
        p.error("--rounds must be at least 1")
    return opts


def cargo_build(*args):
    """`cargo build --quiet <args>` in the checkout."""
    subprocess.run(["cargo", "build", "--quiet", *args], cwd=ROOT, check=True)


def go_build(out, package="."):
    """Builds a package of benches/clientgo into `out`."""
    os.makedirs(os.path.dirname(out), exist_ok=True)
    subprocess.run(["go", "build", "-trimpath", "-o", out, package], cwd=CLIENTGO, check=True)


def ensure_cluster(bench):
    """`make cluster`, which leaves a running cluster alone; its output goes to stderr."""
    log(f"{bench}: making sure the local cluster runs (make cluster)")
    subprocess.run(["make", "--no-print-directory", "cluster"], cwd=ROOT, check=True,
                   stdout=sys.stderr)


def seed(bench, seeder, opts, pods):
    """`informer-bench seed` of `opts.configmaps` ConfigMaps and `pods` Pods into
    `opts.namespace`; whatever exists is kept."""
    log(f"{bench}: seeding (existing objects are kept)")
    subprocess.run(
        [seeder, "--kubeconfig", opts.kubeconfig, "--namespace", opts.namespace, "seed",
         "--configmaps", str(opts.configmaps), "--pods", str(pods)],
        check=True,
    )


def json_lines(cmd):
    """Runs `cmd` to its end (its stderr goes straight to ours); its stdout's JSON lines."""
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True)
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def alternated(impls, rnd):
    """The order of round `rnd` (from 1): `impls` in odd rounds, reversed in even ones."""
    return list(impls) if rnd % 2 == 1 else list(reversed(impls))


def in_turn(bench, rounds, run):
    """A round that runs each program of its order in turn: `run(name)` returns the records
    of one program's run."""
    def one_round(rnd, order):
        for name in order:
            log(f"{bench}: round {rnd}/{rounds}: {name}")
            yield from run(name)
    return one_round


class Results:
    """Every record of every round, by key (a tuple of record fields, or one field)."""

    def __init__(self, key):
        self._key = key
        self.by_round = defaultdict(dict)  # key -> round -> record

    def add(self, rec):
        key = (tuple(rec[k] for k in self._key) if isinstance(self._key, tuple)
               else rec[self._key])
        self.by_round[key][rec["round"]] = rec

    def get(self, key, field):
        """The median of `field` over the rounds of `key`, or None if it never appeared."""
        return median([r[field] for r in self.by_round[key].values()
                       if isinstance(r.get(field), (int, float))])

    def spread(self, field, ours, theirs, theirs_field=None):
        """The range of the per-round ratios ours/theirs, e.g. `0.90–1.40`."""
        theirs_field = theirs_field or field
        mine, other = self.by_round[ours], self.by_round[theirs]
        ratios = [mine[r][field] / other[r][theirs_field] for r in mine
                  if r in other and mine[r].get(field) is not None
                  and other[r].get(theirs_field)]
        return f"{min(ratios):.2f}–{max(ratios):.2f}" if ratios else "—"


def run_rounds(bench_dir, rounds, impls, one_round, key):
    """Runs `rounds` rounds of `one_round(rnd, order)`, alternating the order of `impls`;
    writes each record, its round added, to `bench_dir/rounds.jsonl` as it comes, and
    returns them all as [`Results`] by `key`."""
    results = Results(key)
    with open(os.path.join(bench_dir, "rounds.jsonl"), "w") as raw:
        for rnd in range(1, rounds + 1):
            for rec in one_round(rnd, alternated(impls, rnd)):
                rec["round"] = rnd
                raw.write(json.dumps(rec) + "\n")
                raw.flush()
                results.add(rec)
    return results


def median(values):
    return statistics.median(values) if values else None


def fmt_ratio(a, b):
    return "—" if a is None or not b else f"{a / b:.2f}"


def or_na(ratio):
    """A ratio for a script's last line: `n/a` where the table shows `—`."""
    return "n/a" if ratio == "—" else ratio


def fmt_ms(secs):
    return "—" if secs is None else f"{secs * 1e3:.0f} ms"


def fmt_mib(b):
    return "—" if b is None else f"{b / 2**20:.1f} MiB"


def print_header(header):
    """A table's header line, underlined."""
    print(header)
    print("-" * len(header))


def target_line(what, ratio, target, peer):
    """`target: <what> ≤ <target>× <peer>'s: <ratio>× — met` (or `NOT met`)."""
    met = "met" if ratio <= target else "NOT met"
    print(f"target: {what} ≤ {target}× {peer}'s: {ratio:.2f}× — {met}")


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load_kubeconfig(path):
    """(host, port, ssl context) for the current context of a kubeconfig with client certs."""
    doc = json.loads(subprocess.run(
        ["kubectl", "--kubeconfig", path, "config", "view", "--raw", "--minify", "-o", "json"],
        check=True, stdout=subprocess.PIPE, text=True).stdout)
    cluster, user = doc["clusters"][0]["cluster"], doc["users"][0]["user"]
    url = urllib.parse.urlparse(cluster["server"])
    tmp = tempfile.mkdtemp()
    files = {}
    for field in ("certificate-authority-data", "client-certificate-data", "client-key-data"):
        files[field] = os.path.join(tmp, field)
        with open(files[field], "wb") as f:
            f.write(base64.b64decode(cluster.get(field) or user[field]))
    ctx = ssl.create_default_context(cafile=files["certificate-authority-data"])
    ctx.load_cert_chain(files["client-certificate-data"], files["client-key-data"])
    return url.hostname, url.port, ctx


def memory_of(pid):
    """VmRSS, VmHWM, RssAnon and RssFile of a process, in bytes, from /proc/<pid>/status."""
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                fields[name] = int(value.split()[0]) * 1024
    return fields


def stop(proc):
    """Stops a process we spawned, by its pid: SIGTERM, then SIGKILL after 30 s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
