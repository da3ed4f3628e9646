#!/usr/bin/env python3
"""Two builds of the shim against the null driver, alternately, in one run.

usage: compare-shims.py OLD_LIBVGPU_SO [NEW_LIBVGPU_SO]   (from the source root,
with build/ built; NEW defaults to build/intercept/libvgpu.so)

Prints the median of five calls-runs each (cuLaunchKernel, and a
cuMemAlloc+cuMemFree pair; and cuLaunchKernel under a 90% compute cap
never reached), without a shim, with OLD and with NEW: the ratio
between two shims measured side by side on a noisy machine.
"""
import sys
import os, subprocess, tempfile, statistics
bench = "build/tests/bench/bench_shim"
null = "build/tests/bench/libnulldrv.so"
def env_for(d):
    e = dict(os.environ)
    e.update({"VGPU_REAL_LIBCUDA": os.path.abspath(null), "VGPU_LEDGER_DIR": d,
              "VGPU_MEMORY_LIMIT": "64GiB", "VGPU_CONTEXT_OVERHEAD": "0",
              "VGPU_TENANT": "bench"})
    return e
def calls(lib, e):
    out = subprocess.run([bench, "calls", lib], env=e, check=True, capture_output=True, text=True).stdout
    v = dict(l.split() for l in out.splitlines())
    return float(v["launch"]), float(v["pair"])
new = os.path.abspath(sys.argv[2] if len(sys.argv) > 2 else "build/intercept/libvgpu.so")
res = {"none": [], "old": [], "new": []}
capped = {"none": [], "old": [], "new": []}
with tempfile.TemporaryDirectory() as d:
    e = env_for(d)
    ec = dict(e, VGPU_COMPUTE_LIMIT="90")
    for _ in range(5):
        for k, lib in (("none", os.path.abspath(null)), ("old", sys.argv[1]), ("new", new)):
            res[k].append(calls(lib, e))
            capped[k].append(calls(lib, ec)[0])
for k, v in res.items():
    print(k, "launch median %.1f ns, alloc+free median %.1f ns, capped launch median %.1f ns" %
          (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v), statistics.median(capped[k])))
