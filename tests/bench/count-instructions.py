#!/usr/bin/env python3
"""Instructions the shim adds to a call, counted: unlike time, the same
on a busy machine as on a quiet one, so two builds compare exactly.

usage: count-instructions.py [BUILD_DIR] [OTHER_LIBVGPU_SO]
       (from the source root; BUILD_DIR defaults to build)

Runs `bench_shim loop` under valgrind's lackey tool (apt-get install
valgrind) for N and for 0 calls and prints (count(N) - count(0)) / N for
cuLaunchKernel, cuLaunchKernel under a 90% compute cap never reached, and
a cuMemAlloc_v2 + cuMemFree_v2 pair: against the null driver alone, and
through libvgpu.so in front of it, both as the benchmark loads it (dlopen:
its thread-local variables are reached through the dynamic TLS path) and
preloaded (LD_PRELOAD, as jobs run it). With OTHER_LIBVGPU_SO, that build
is counted too, as a column of its own.

Instructions are not time (a cache miss or an atomic costs more than an
add), but a change that adds or removes work shows here exactly.
"""
import os
import shutil
import subprocess
import sys
import tempfile

N = {"launch": 20000, "capped": 5000, "pair": 20000}


def count(bench, lib, what, n, env, preload):
    e = dict(env)
    if preload:
        e["LD_PRELOAD"] = lib
    e.pop("VGPU_COMPUTE_LIMIT", None)
    if what == "capped":
        e["VGPU_COMPUTE_LIMIT"] = "90"
    out = subprocess.run(
        ["valgrind", "--tool=lackey", bench, "loop", lib,
         "pair" if what == "pair" else "launch", str(n)],
        env=e, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True, check=True).stderr
    for line in out.splitlines():
        if "guest instrs:" in line:
            return int(line.split(":")[1].replace(",", ""))
    sys.exit("no count from lackey:\n" + out)


def per_call(bench, lib, what, env, preload=False):
    n = N[what]
    return (count(bench, lib, what, n, env, preload) -
            count(bench, lib, what, 0, env, preload)) / n


def main():
    if not shutil.which("valgrind"):
        sys.exit("count-instructions: valgrind is needed "
                 "(apt-get install valgrind)")
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    bench = os.path.join(build, "tests", "bench", "bench_shim")
    null = os.path.abspath(os.path.join(build, "tests", "bench",
                                        "libnulldrv.so"))
    shims = [("this build", os.path.abspath(
        os.path.join(build, "intercept", "libvgpu.so")))]
    if len(sys.argv) > 2:
        shims.insert(0, ("other", os.path.abspath(sys.argv[2])))
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, VGPU_REAL_LIBCUDA=null, VGPU_LEDGER_DIR=d,
                   VGPU_MEMORY_LIMIT="64GiB", VGPU_CONTEXT_OVERHEAD="0",
                   VGPU_TENANT="bench")
        env.pop("LD_PRELOAD", None)
        head = "| instructions per call | null driver |"
        for name, _ in shims:
            head += " %s, dlopen | %s, preloaded |" % (name, name)
        print(head)
        print("|---" + "|---:" * (1 + 2 * len(shims)) + "|")
        for what in ("launch", "capped", "pair"):
            row = "| %s | %.1f |" % (
                {"launch": "cuLaunchKernel",
                 "capped": "cuLaunchKernel, 90% cap not reached",
                 "pair": "cuMemAlloc_v2 + cuMemFree_v2"}[what],
                per_call(bench, null, "pair" if what == "pair"
                         else "launch", env))
            for _, lib in shims:
                row += " %.1f | %.1f |" % (
                    per_call(bench, lib, what, env),
                    per_call(bench, lib, what, env, preload=True))
            print(row, flush=True)


if __name__ == "__main__":
    main()
