#!/usr/bin/env python3
"""Start-up of two builds of the shim on the simulator, alternately, in one run.

usage: compare-startup.py OLD_LIBVGPU_SO [NEW_LIBVGPU_SO] [ROUNDS]
(from the source root, with build/ built; NEW defaults to
build/intercept/libvgpu.so, ROUNDS to 60)

Each round starts one process without a shim, one with OLD and one with
NEW (bench_shim first-alloc: load the library, the first 1 MiB
allocation, exit), one after the other. Prints, for each, the median and
p90 of the time from exec to the first allocation and of the whole
process (to its exit, as the parent sees it), and the shims' medians
less the driver's: what each shim adds, measured side by side on a noisy
machine.
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time

bench = os.path.abspath("build/tests/bench/bench_shim")
sim = os.path.abspath("build/sim/libcuda.so.1")


def one(lib, env):
    t0 = time.time_ns()
    out = subprocess.run([bench, "first-alloc", lib, str(t0)], env=env,
                         check=True, capture_output=True, text=True).stdout
    t1 = time.time_ns()
    return int(out.strip()) / 1e6, (t1 - t0) / 1e6


def p90(v):
    v = sorted(v)
    return v[min(len(v) - 1, int(0.9 * len(v)))]


def main():
    old = os.path.abspath(sys.argv[1])
    new = os.path.abspath(sys.argv[2] if len(sys.argv) > 2
                          else "build/intercept/libvgpu.so")
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 60
    libs = (("driver alone", sim), ("old shim", old), ("new shim", new))
    first = {k: [] for k, _ in libs}
    whole = {k: [] for k, _ in libs}
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ)
        env.pop("LD_PRELOAD", None)
        env.update(VGPU_SIM_STATE_DIR=os.path.join(d, "sim"),
                   VGPU_TENANT="bench", VGPU_CONTEXT_OVERHEAD="0",
                   VGPU_MEMORY_LIMIT="64GiB", VGPU_REAL_LIBCUDA=sim)
        for _ in range(rounds):
            for i, (k, lib) in enumerate(libs):
                # A ledger directory each: two builds may not share a
                # ledger's version.
                a, b = one(lib, dict(env, VGPU_LEDGER_DIR=os.path.join(
                    d, "ledger%d" % i)))
                first[k].append(a)
                whole[k].append(b)
    print("| %d rounds | to first allocation: median / p90 ms | whole process: "
          "median / p90 ms |" % rounds)
    print("|---|---|---|")
    for k, _ in libs:
        print("| %s | %.3f / %.3f | %.3f / %.3f |" %
              (k, statistics.median(first[k]), p90(first[k]),
               statistics.median(whole[k]), p90(whole[k])))
    base_f = statistics.median(first["driver alone"])
    base_w = statistics.median(whole["driver alone"])
    for k in ("old shim", "new shim"):
        print("%s adds %+.3f ms to the first allocation, %+.3f ms to the "
              "whole process (medians)" %
              (k, statistics.median(first[k]) - base_f,
               statistics.median(whole[k]) - base_w))


if __name__ == "__main__":
    main()
