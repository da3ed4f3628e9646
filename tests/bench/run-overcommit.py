#!/usr/bin/env python3
"""Overcommit's cost on the simulator: vgpu_touch over working sets of 0.5x,
1x, 1.5x and 2x a slice, streaming and random, in each mode.

usage: run-overcommit.py BUILD_DIR [--slice MIB] [--bus SIZE/s]

Runs tests/bench/bench_overcommit under libvgpu.so with the simulated driver,
once with no slice ("unlimited") and once per VGPU_OVERCOMMIT mode (off,
managed, host) with a slice, each run with a simulator state directory and
a ledger directory of its own. Prints Markdown tables of each run's median
time relative to the unlimited run of the same working set and pattern, and
a second table of two phases in a job's life: a 1x working set allocated
while a 0.5x staging buffer is held, then the staging buffer freed; a 1.5x
working set of which every other buffer is freed before the timed rounds
(what host mode promotes, what managed mode leaves on the host).
"""
import os
import shutil
import subprocess
import sys
import tempfile

MIB = 1 << 20
CHUNK = 16 * MIB
ROUNDS = 3
REPS = 3
FACTORS = (0.5, 1, 1.5, 2)
MODES = ("off", "managed", "host")


def run(build, slice_mib, bus, mode, wbytes, pattern, extra=()):
    """One bench_overcommit run; its "key value" lines as a dict, or
    {"oom": ...} when an allocation failed."""
    bench = os.path.join(build, "tests", "bench", "bench_overcommit")
    tmp = tempfile.mkdtemp(prefix="vgpu-bench-oc-")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("VGPU_", "CUDA_"))}
    env.update(LD_PRELOAD=os.path.join(build, "intercept", "libvgpu.so"),
               VGPU_REAL_LIBCUDA=os.path.join(build, "sim", "libcuda.so.1"),
               VGPU_SIM_STATE_DIR=os.path.join(tmp, "sim"),
               VGPU_LEDGER_DIR=os.path.join(tmp, "ledger"),
               VGPU_SIM_MEMORY="%dMiB" % (8 * slice_mib),
               VGPU_SIM_BUS_BANDWIDTH=bus,
               VGPU_CONTEXT_OVERHEAD="0", VGPU_TENANT="bench")
    if mode != "unlimited":
        env.update(VGPU_MEMORY_LIMIT="%dMiB" % slice_mib,
                   VGPU_OVERCOMMIT=mode)
    args = [bench, "-w", "%dK" % (wbytes >> 10), "-c", "%dK" % (CHUNK >> 10),
            "-r", str(ROUNDS), "-n", str(REPS), "-p", pattern]
    args += extra
    try:
        p = subprocess.run(args, env=env, capture_output=True, text=True,
                           timeout=300)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out = dict(line.split(" ", 1) for line in p.stdout.splitlines())
    if p.returncode == 3 and "oom" in out:
        return out
    if p.returncode != 0:
        sys.exit("run-overcommit.py: %s %s %d bytes: exit %d\n%s%s" % (
            mode, pattern, wbytes, p.returncode, p.stdout, p.stderr))
    return out


def cell(r, base):
    if "oom" in r:
        return "OOM"
    ms = float(r["ms"])
    return "%.2f× (%.0f ms)" % (ms / base, ms)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    build = os.path.abspath(sys.argv[1])
    slice_mib, bus = 256, "2GiB/s"
    if "--slice" in sys.argv:
        slice_mib = int(sys.argv[sys.argv.index("--slice") + 1])
    if "--bus" in sys.argv:
        bus = sys.argv[sys.argv.index("--bus") + 1]
    slice_b = slice_mib * MIB

    print("| pattern | working set | unlimited | off | managed | host | "
          "buffers spilled |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for pattern in ("streaming", "random"):
        for f in FACTORS:
            w = int(f * slice_b) // CHUNK * CHUNK
            base = run(build, slice_mib, bus, "unlimited", w, pattern)
            b_ms = float(base["ms"])
            cells, spilled = [], "0"
            for mode in MODES:
                r = run(build, slice_mib, bus, mode, w, pattern)
                cells.append(cell(r, b_ms))
                if mode == "host":
                    spilled = "%s of %s" % (r["spilled"], r["buffers"])
            print("| %s | %g× (%d MiB) | %.0f ms | %s | %s |" % (
                pattern, f, w // MIB, b_ms, " | ".join(cells), spilled))
    print()

    phases = (
        ("1× working set allocated while a 0.5× staging buffer is held, "
         "then the staging buffer freed",
         slice_b, ["-s", "%dK" % (slice_b // 2 >> 10)]),
        ("1.5× working set allocated and written once, then every other "
         "buffer freed (0.75× left)", slice_b * 3 // 2, ["-h"]))
    print("| phase (streaming) | mode | time | buffers on the host after "
          "allocating | on the host in the timed rounds |")
    print("|---|---|---:|---:|---:|")
    for name, w, extra in phases:
        base = None
        for mode in ("unlimited", "managed", "host"):
            r = run(build, slice_mib, bus, mode, w, "streaming", extra)
            base = base or float(r["ms"])
            print("| %s | %s | %s | %s of %s | %s of %s |" % (
                name, mode, cell(r, base), r["spilled"], r["allocated"],
                r["host"], r["buffers"]))
            name = ""


if __name__ == "__main__":
    main()
