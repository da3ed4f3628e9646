#!/usr/bin/env python3
"""Shares of several hard-capped tenants saturating one simulated GPU,
judged by the device's own record (docs/compute.md, "Several tenants at
once"). Run by hand, not a test:

  tests/bench/tenants-bench.py BUILD_DIR [--reps N] [--seconds S]
          [--tenants 2,4,8] [--kernels-us 100,200,1000,10000]
          [--styles async,sync,threads,graph]

For each number of tenants, kernel length and launch style: N runs of
that many `share` processes (tests/compute/share.c) started together on
one simulated device, each a tenant of its own under a hard cap (2: 30
and 70; 4: 10, 20, 30, 40; 8: four at 12 and four at 13), for S seconds;
and one run of the same processes uncapped, for the idle time the
simulator leaves by itself. Every share is read from the device's record
(`sim-record`) over the time all tenants ran (the latest first kernel to
the earliest last one). Prints a Markdown table:

  worst miss   the largest |share - cap| of any tenant, the medians'
               worst over the runs
  worst window the largest (share - cap) of any tenant in any 1-second
               window sliding by 100 ms, over all runs (the issue's "no
               window more than 1 point above a hard cap")
  idle         100 - the tenants' shares summed, median of the runs, and
               the same uncapped

Each run makes its own simulated device and ledger in a temporary
directory. The processes share the machine's cores with the simulator:
compare rows of one run of the script, not runs on different days.
"""
import os
import re
import statistics
import subprocess
import sys
import tempfile

from share_run import share

CAPS = {2: [30, 70], 4: [10, 20, 30, 40], 8: [12, 12, 12, 12, 13, 13, 13, 13]}


def start(build, d, tenant, cap, us, seconds, style):
    return share(build, d, tenant, us, seconds, style, cap=cap,
                 policy=None if cap is None else "hard")


def record(build, d, args=()):
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    return subprocess.run(
        [os.path.join(build, "tests", "compute", "sim-record"), d] +
        list(args), env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, timeout=120).stdout


def once(build, caps, us, seconds, style):
    """Each tenant's share over the common span, its worst sliding
    1-second window above its cap, and the idle share; by the record."""
    d = tempfile.mkdtemp(prefix="vgpu-tenantsbench-")
    procs = [start(build, d, "t%d" % i, cap, us, seconds, style)
             for i, cap in enumerate(caps)]
    pids = [p.pid for p in procs]
    for p in procs:
        out = p.communicate(timeout=seconds + 120)[0]
        if p.returncode != 0:
            sys.exit("share failed (%d):\n%s" % (p.returncode, out))
    whole = record(build, d, ["--window-ms", "0"])
    spans = {int(m.group(1)): (int(m.group(2)), int(m.group(3))) for m in
             re.finditer(r"^pid (\d+) .* first (\d+) last (\d+)", whole,
                         re.M)}
    if sorted(spans) != sorted(pids):
        sys.exit("the record does not name every tenant:\n" + whole)
    lo = max(s[0] for s in spans.values())
    hi = min(s[1] for s in spans.values())
    if hi - lo < 1.5e9:
        sys.exit("the tenants ran together for under 1.5 s")
    out = record(build, d, ["--from", str(lo), "--to", str(hi),
                            "--window-ms", "100"])
    if "incomplete" in out or re.search(r"^record \d+ lost [1-9]", out, re.M):
        sys.exit("the record lost intervals:\n" + out.splitlines()[0])
    share = {int(m.group(1)): float(m.group(2)) for m in
             re.finditer(r"^pid (\d+) .* share ([0-9.]+)", out, re.M)}
    wins = {}
    for m in re.finditer(r"^window \S+ (\d+) ([0-9.]+)", out, re.M):
        wins.setdefault(int(m.group(1)), []).append(float(m.group(2)))
    shares, worst = [], -100.0
    for pid, cap in zip(pids, caps):
        shares.append(share.get(pid, 0.0))
        w = wins.get(pid, [])
        for i in range(len(w) - 9):
            if cap is not None:
                worst = max(worst, sum(w[i:i + 10]) / 10 - cap)
    return shares, worst, 100 - sum(shares)


def main():
    build = os.path.abspath(sys.argv[1])
    opts = dict(zip(sys.argv[2::2], sys.argv[3::2]))
    reps = int(opts.get("--reps", 3))
    seconds = float(opts.get("--seconds", 3))
    counts = [int(x) for x in opts.get("--tenants", "2,4,8").split(",")]
    lengths = [int(x) for x in
               opts.get("--kernels-us", "100,200,1000,10000").split(",")]
    styles = opts.get("--styles", "async,sync,threads,graph").split(",")
    print("| tenants | kernels | style | caps | shares by the record "
          "(medians) | worst miss | worst window | idle | idle uncapped "
          "| runs |")
    print("|---:|---:|---|---|---|---:|---:|---:|---:|---:|")
    for n in counts:
        caps = CAPS[n]
        for us in lengths:
            for style in styles:
                runs = [once(build, caps, us, seconds, style)
                        for _ in range(reps)]
                base = once(build, [None] * n, us, seconds, style)
                med = [statistics.median(r[0][i] for r in runs)
                       for i in range(n)]
                miss = max(abs(m - c) for m, c in zip(med, caps))
                worst = max(r[1] for r in runs)
                idle = statistics.median(r[2] for r in runs)
                print("| %d | %d us | %s | %s | %s | %.2f | %+.2f | %.2f | "
                      "%.2f | %d |" %
                      (n, us, style, "/".join(map(str, caps)),
                       " / ".join("%.2f" % m for m in med), miss, worst,
                       idle, base[2], reps), flush=True)


if __name__ == "__main__":
    main()
