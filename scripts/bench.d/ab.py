#!/usr/bin/env python3
"""bench ab driver (see ab.sh): paired rounds of xs-pingpong -S 64 for two library builds."""
import argparse
import os
import statistics
import subprocess
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--apps", required=True)
p.add_argument("--rounds", type=int, required=True)
p.add_argument("--iters", type=int, required=True)
p.add_argument("--cpu", default="0")
p.add_argument("--pin", default="1")
p.add_argument("lib_a")
p.add_argument("lib_b")
a = p.parse_args()

MODES = ["ddp", "ext"]
SLOW = 1.3  # a ratio above this is the VM's slow state (docs/performance.md, session 16)
prog = os.path.join(a.apps, "xs-pingpong")


def pinned(argv):
    return (["taskset", "-c", a.cpu] if a.pin == "1" else []) + argv


def run(lib, mode):
    """One xs-pingpong pair; the client's median round trip in µs."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if mode != "tcp":
        env["LD_PRELOAD"] = lib
    smode = "tcp" if mode == "tcp" else "ddp"
    srv = subprocess.Popen(["timeout", "60"] + pinned([prog, "-s", "-a", "127.0.0.1", "-p", "0", "-m", smode]),
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    first = srv.stdout.readline()  # "...: listening on 127.0.0.1:PORT ..."
    port = None
    for word in first.replace("(", " ").split():
        if word.startswith("127.0.0.1:"):
            port = word.split(":")[1].rstrip(",)")
    if not port:
        srv.kill()
        sys.exit(f"bench ab: the server did not say its port: {first.strip()}")
    out = subprocess.run(["timeout", "60"] + pinned([prog, "-c", "127.0.0.1", "-p", port, "-m", mode, "-S", "64",
                                                     "-n", str(a.iters), "-w", "200"]),
                         env=env, capture_output=True, text=True)
    srv.communicate(timeout=60)
    for line in out.stdout.splitlines():
        f = line.split()
        if f and f[0] == "64":
            return float(f[2])
    sys.exit(f"bench ab: {mode} run failed: {(out.stdout + out.stderr).strip()[-300:]}")


libs = {"A": a.lib_a, "B": a.lib_b}
ratios = {(k, m): [] for k in libs for m in MODES}
tcp = {k: [] for k in libs}
t0 = time.time()
for r in range(a.rounds):
    order = ["A", "B"] if r % 2 == 0 else ["B", "A"]
    line = []
    for k in order:
        t = run(libs[k], "tcp")
        tcp[k].append(t)
        got = {m: run(libs[k], m) / t for m in MODES}
        for m in MODES:
            ratios[(k, m)].append(got[m])
        line.append(f"{k}: TCP {t:.2f} us, plain {got['ddp']:.3f}x, ext {got['ext']:.3f}x")
    print(f"  [{time.time() - t0:5.0f}s] round {r + 1}/{a.rounds}: " + " | ".join(line), file=sys.stderr, flush=True)

print(f"bench ab: {a.rounds} rounds of xs-pingpong -S 64 -n {a.iters} (TCP, plain, ext per library; order flipped every round)")
print(f"  A = {a.lib_a}\n  B = {a.lib_b}")
print(f"  TCP round trip, median: A's rounds {statistics.median(tcp['A']):.2f} us, B's {statistics.median(tcp['B']):.2f} us")
for m, name in (("ddp", "plain calls"), ("ext", "extension calls")):
    ra, rb = ratios[("A", m)], ratios[("B", m)]
    pairs = [(x, y) for x, y in zip(ra, rb) if x <= SLOW and y <= SLOW]
    diffs = [y - x for x, y in pairs]
    better = sum(1 for d in diffs if d < 0)
    med = statistics.median(diffs) if diffs else float("nan")
    print(f"  {name:16} A {statistics.median(ra):.3f}x  B {statistics.median(rb):.3f}x  "
          f"paired B-A {med:+.4f} (median of {len(diffs)} rounds), B better in {better} of {len(diffs)}")
