#!/usr/bin/env python3
"""A guaranteed tenant's slowdown from an opportunistic neighbour, on the
simulated GPU (docs/performance.md, docs/compute.md "The opportunistic
class"). Run by hand, not a test:

  tests/bench/opp-bench.py BUILD_DIR [--reps N] [--seconds S]
                           [--kernels-us 1000,200] [--styles async,sync]

For each kernel length and launch style, N times: an uncapped
(guaranteed) tenant alone for S seconds, then the same again beside an
opportunistic tenant started 0.5 s earlier (1 ms kernels, async). Each
share is the guaranteed tenant's by the device's own record (`share`'s
"device" line). Prints a table of medians: alone, beside, the slowdown
(1 - beside / alone), and what the opportunistic tenant got meanwhile.
Each run makes its own simulated device and ledger.
"""
import os
import re
import statistics
import sys
import tempfile
import time

from share_run import share


def run(build, d, tenant, us, seconds, style, policy=None):
    return share(build, d, tenant, us, seconds, style, policy=policy)


def device(p):
    out = p.communicate(timeout=120)[0]
    m = re.search(r"^device ([0-9.]+)%", out, re.M)
    if not m:
        sys.exit("no device record in:\n" + out)
    return float(m.group(1))


def once(build, us, style, seconds):
    d = tempfile.mkdtemp(prefix="vgpu-oppbench-")
    alone = device(run(build, os.path.join(d, "alone"), "g", us, seconds,
                       style))
    o = run(build, d, "o", 1000, seconds + 1.5, "async", "opportunistic")
    time.sleep(0.5)
    beside = device(run(build, d, "g", us, seconds, style))
    opp = device(o)
    return alone, beside, opp


def main():
    build = os.path.abspath(sys.argv[1])
    opts = dict(zip(sys.argv[2::2], sys.argv[3::2]))
    reps = int(opts.get("--reps", 5))
    seconds = float(opts.get("--seconds", 2))
    lengths = [int(x) for x in opts.get("--kernels-us", "1000,200").split(",")]
    styles = opts.get("--styles", "async,sync").split(",")
    print("| guaranteed kernels | style | alone % | beside opportunistic % "
          "| slowdown % | opportunistic's share of its run % | runs |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for us in lengths:
        for style in styles:
            rows = [once(build, us, style, seconds) for _ in range(reps)]
            alone = statistics.median(r[0] for r in rows)
            beside = statistics.median(r[1] for r in rows)
            slow = statistics.median(100 * (1 - r[1] / r[0]) for r in rows)
            opp = statistics.median(r[2] for r in rows)
            print("| %d us | %s | %.2f | %.2f | %.2f | %.2f | %d |" %
                  (us, style, alone, beside, slow, opp, reps), flush=True)


if __name__ == "__main__":
    main()
