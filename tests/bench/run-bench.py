#!/usr/bin/env python3
"""The shim's benchmarks, with and without libvgpu.so, in one run.

usage: run-bench.py BUILD_DIR [--quick]

Prints a Markdown table of medians: what the shim adds to an unthrottled
cuLaunchKernel and to a cuMemAlloc_v2+cuMemFree_v2 pair (on a driver that
does nothing, so the difference is the shim alone, with 1, 16 and 256
processes registered on the GPU, and on the simulated GPU), and the time
from start to the first allocation of 64 and 256 processes started at once.
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time


def run_calls(bench, lib, env):
    out = subprocess.run([bench, "calls", lib], env=env, check=True,
                         capture_output=True, text=True, timeout=300).stdout
    vals = dict(line.split() for line in out.splitlines())
    return float(vals["launch"]), float(vals["pair"])


def hold(bench, shim, env, n):
    procs = []
    for _ in range(n):
        p = subprocess.Popen([bench, "hold", shim], env=env,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
        procs.append(p)
    for p in procs:
        if p.stdout.readline().strip() != "ready":
            raise SystemExit("run-bench.py: a holding process failed")
    return procs


def release(procs):
    for p in procs:
        p.stdin.close()
    for p in procs:
        p.wait(timeout=30)


def startup(bench, lib, env, n, timeout=60):
    t0 = time.time_ns()
    procs = [subprocess.Popen([bench, "first-alloc", lib, str(t0)], env=env,
                              stdout=subprocess.PIPE, text=True)
             for _ in range(n)]
    times, hung, failed = [], 0, 0
    deadline = time.time() + timeout
    for p in procs:
        try:
            out, _ = p.communicate(timeout=max(1, deadline - time.time()))
            if p.returncode == 0:
                times.append(int(out.strip()) / 1e6)
            else:
                failed += 1
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            hung += 1
    times.sort()
    return times, hung, failed


def pct(v, q):
    return v[min(len(v) - 1, int(q * len(v)))] if v else float("nan")


def main():
    build = os.path.abspath(sys.argv[1])
    quick = "--quick" in sys.argv
    bench = os.path.join(build, "tests", "bench", "bench_shim")
    shim = os.path.join(build, "intercept", "libvgpu.so")
    null = os.path.join(build, "tests", "bench", "libnulldrv.so")
    sim = os.path.join(build, "sim", "libcuda.so.1")
    tmp = tempfile.mkdtemp(prefix="vgpu-bench-")
    env = dict(os.environ)
    env.update(VGPU_LEDGER_DIR=os.path.join(tmp, "ledger"),
               VGPU_SIM_STATE_DIR=os.path.join(tmp, "sim"),
               VGPU_TENANT="bench", VGPU_CONTEXT_OVERHEAD="0",
               VGPU_MEMORY_LIMIT="64GiB")
    env.pop("LD_PRELOAD", None)
    null_env = dict(env, VGPU_REAL_LIBCUDA=null)
    sim_env = dict(env, VGPU_REAL_LIBCUDA=sim)

    rows = []
    base_launch, base_pair = run_calls(bench, null, null_env)
    for n in (1, 16, 256):
        holders = hold(bench, shim, null_env, n - 1) if n > 1 else []
        launch, pair = run_calls(bench, shim, null_env)
        release(holders)
        if n == 1:
            rows.append(("cuLaunchKernel, null driver", base_launch, launch))
        rows.append(("cuMemAlloc+cuMemFree, null driver, %d process%s "
                     "registered" % (n, "es" if n > 1 else ""),
                     base_pair, pair))
    # A compute cap the launches never reach (each takes 10 ns of "GPU
    # time" on the null driver): the throttle's admission, its events and
    # their read-back, amortised over the batch.
    cap_env = dict(null_env, VGPU_COMPUTE_LIMIT="90")
    c_launch, _ = run_calls(bench, shim, cap_env)
    rows.append(("cuLaunchKernel, null driver, a 90% compute cap not "
                 "reached", base_launch, c_launch))
    # VGPU_CONTROL: every launch and copy passes the suspension gate (one
    # shared counter up and down, a load), and a control thread polls.
    ctl_launch, _ = run_calls(bench, shim, dict(null_env, VGPU_CONTROL="1"))
    rows.append(("cuLaunchKernel, null driver, VGPU_CONTROL (the gate)",
                 base_launch, ctl_launch))
    if os.path.exists(sim):
        s_launch, s_pair = run_calls(bench, sim, sim_env)
        v_launch, v_pair = run_calls(bench, shim, sim_env)
        rows.append(("cuLaunchKernel, simulator", s_launch, v_launch))
        rows.append(("cuMemAlloc+cuMemFree, simulator", s_pair, v_pair))

    print("| call (median ns, batches of 10,000) | without shim | "
          "with shim | added |")
    print("|---|---:|---:|---:|")
    for name, a, b in rows:
        print("| %s | %.1f | %.1f | %+.1f |" % (name, a, b, b - a))
    print()

    # A process that never touches CUDA: /bin/true, 200 times, each way.
    def true_ms(preload):
        e = dict(env)
        if preload:
            e["LD_PRELOAD"] = shim
        v = []
        for _ in range(200):
            t = time.perf_counter_ns()
            subprocess.run(["/bin/true"], env=e, check=True)
            v.append((time.perf_counter_ns() - t) / 1e6)
        return statistics.median(v)
    a, b = true_ms(False), true_ms(True)
    print("| a process that never uses CUDA (`/bin/true`, median of 200) | "
          "without shim | with shim | added |")
    print("|---|---:|---:|---:|")
    print("| run time, ms | %.3f | %.3f | %+.3f |" % (a, b, b - a))
    print()

    if not os.path.exists(sim):
        return
    print("| processes started at once (simulator; 1: alone, 30 times) | "
          "without shim: median / p99 / max ms to the first allocation | "
          "with shim: median / p99 / max ms | hung |")
    print("|---|---|---|---:|")
    for n in ((1, 64) if quick else (1, 64, 256)):
        if n == 1:	# one at a time, 30 times
            a, b, hung_a, hung_b, fail_a, fail_b = [], [], 0, 0, 0, 0
            for _ in range(30):
                x = startup(bench, sim, sim_env, 1)
                y = startup(bench, shim, sim_env, 1)
                a += x[0]
                b += y[0]
                hung_a, fail_a = hung_a + x[1], fail_a + x[2]
                hung_b, fail_b = hung_b + y[1], fail_b + y[2]
            a.sort()
            b.sort()
        else:
            a, hung_a, fail_a = startup(bench, sim, sim_env, n)
            b, hung_b, fail_b = startup(bench, shim, sim_env, n)
        if fail_a or fail_b:
            print("run-bench.py: %d/%d processes failed" % (fail_a, fail_b),
                  file=sys.stderr)
        print("| %d | %.1f / %.1f / %.1f | %.1f / %.1f / %.1f | %d |" % (
            n, statistics.median(a), pct(a, .99), a[-1],
            statistics.median(b), pct(b, .99), b[-1], hung_a + hung_b))


if __name__ == "__main__":
    main()
