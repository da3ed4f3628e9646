#!/usr/bin/env python3
"""NVML reached the way pynvml, nvitop and gpustat reach it: ctypes.

usage: nvml_ctypes.py      (LD_PRELOAD, VGPU_REAL_LIBCUDA and LD_LIBRARY_PATH
                            come from meson.build)

The test runs itself as a child in a fresh simulated device and ledger, with
a 512 MiB slice. The child allocates 96 MiB through the driver (ctypes over
libcuda.so.1, which is the shim), then opens libnvidia-ml.so.1 with
ctypes.CDLL, as pynvml does, and asserts: the memory info, v1 and v2, says
total 512 MiB, used the tenant's charge (96 MiB), free the rest; the
compute process lists (unversioned, _v2, _v3) name this process with 96
MiB; the graphics list is empty; the utilisation of an idle tenant is 0; a
function the shim does not hook (nvmlDeviceGetName) is NVML's own; after
the free, the process is charged 0 and used is 0.

Then one view for all: a process of the same tenant started without
VGPU_MEMORY_LIMIT (the tenant's terms in the ledger are what binds it), while
a process of the tenant and one of another tenant hold memory, sees the
tenant's slice and only the tenant's processes, whether it never used CUDA
(the ledger read without joining) or joined. And processes of a tenant in
pid namespaces of their own are listed by the pid that names them here, or 0
where none does (not as this namespace's pid 1).

And a monitor that never used CUDA and states no option of its own sees
its tenant's terms from the ledger: a tenant with a compute share alone is
listed alone (other tenants' processes not shown), and a killed process of
a tenant is neither listed nor counted in used (a monitor never reclaims
it), and its utilisation samples are sized and read as its own
processes'. Prints PASS/FAIL lines.
"""
import ctypes
import os
import subprocess
import sys
import tempfile

MiB = 1 << 20
SLICE = 512 * MiB
ALLOC = 96 * MiB
failed = False


def check(name, ok, detail=""):
    global failed
    print("%s %s: %s" % ("PASS" if ok else "FAIL", name, detail), flush=True)
    failed |= not ok


class Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]


class MemoryV2(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("total", ctypes.c_ulonglong),
                ("reserved", ctypes.c_ulonglong),
                ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class ProcV1(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]


class ProcV2(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint),
                ("computeInstanceId", ctypes.c_uint)]


class Util(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


NVML_INSUFFICIENT_SIZE = 7


class UtilSample(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("timeStamp", ctypes.c_ulonglong),
                ("smUtil", ctypes.c_uint), ("memUtil", ctypes.c_uint),
                ("encUtil", ctypes.c_uint), ("decUtil", ctypes.c_uint)]


def open_nvml(name):
    """NVML opened as pynvml opens it, and device 0: (nvml, handle), or
    (None, None) with a failed check called name (none if None)."""
    nvml = ctypes.CDLL("libnvidia-ml.so.1")
    d = ctypes.c_void_p()
    if nvml.nvmlInit_v2() or nvml.nvmlDeviceGetHandleByIndex_v2(
            0, ctypes.byref(d)):
        if name:
            check(name, False, "init or handle failed")
        return None, None
    return nvml, d


def procs(nvml, fn, dev, kind):
    """(rc, [(pid, bytes)]) from one of the process-list functions."""
    arr = (kind * 8)()
    n = ctypes.c_uint(8)
    rc = getattr(nvml, fn)(dev, ctypes.byref(n), arr)
    return rc, [(arr[i].pid, arr[i].usedGpuMemory) for i in range(n.value)]


def child():
    cuda = ctypes.CDLL("libcuda.so.1")
    ctx, dev, ptr = ctypes.c_void_p(), ctypes.c_int(), ctypes.c_ulonglong()
    if (cuda.cuInit(0) or cuda.cuDeviceGet(ctypes.byref(dev), 0) or
            cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) or
            cuda.cuCtxSetCurrent(ctx) or
            cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(ALLOC))):
        check("cuda", False, "could not allocate")
        return 1

    nvml, d = open_nvml("nvml")
    if not nvml:
        return 1
    me = os.getpid()

    m = Memory()
    rc = nvml.nvmlDeviceGetMemoryInfo(d, ctypes.byref(m))
    check("memory-v1", rc == 0 and m.total == SLICE and m.used == ALLOC and
          m.free == SLICE - ALLOC,
          "rc %d total %d used %d free %d" % (rc, m.total, m.used, m.free))
    m2 = MemoryV2(version=ctypes.sizeof(MemoryV2) | (2 << 24))
    rc = nvml.nvmlDeviceGetMemoryInfo_v2(d, ctypes.byref(m2))
    check("memory-v2", rc == 0 and m2.total == SLICE and m2.used == ALLOC and
          m2.free + m2.used + m2.reserved <= SLICE,
          "rc %d total %d used %d" % (rc, m2.total, m2.used))

    for fn, kind in (("nvmlDeviceGetComputeRunningProcesses", ProcV1),
                     ("nvmlDeviceGetComputeRunningProcesses_v2", ProcV2),
                     ("nvmlDeviceGetComputeRunningProcesses_v3", ProcV2)):
        rc, got = procs(nvml, fn, d, kind)
        check(fn, rc == 0 and got == [(me, ALLOC)], "rc %d %r" % (rc, got))
    rc, got = procs(nvml, "nvmlDeviceGetGraphicsRunningProcesses_v3", d,
                    ProcV2)
    check("graphics-v3", rc == 0 and got == [], "rc %d %r" % (rc, got))

    u = Util(1000, 1000)
    rc = nvml.nvmlDeviceGetUtilizationRates(d, ctypes.byref(u))
    check("utilisation", rc == 0 and u.gpu == 0 and u.memory == 0,
          "rc %d gpu %d memory %d" % (rc, u.gpu, u.memory))

    name = ctypes.create_string_buffer(96)
    rc = nvml.nvmlDeviceGetName(d, name, 96)
    check("not-hooked", rc == 0 and b"simulated" in name.value,
          "rc %d name %r" % (rc, name.value))

    cuda.cuMemFree_v2(ptr)
    rc = nvml.nvmlDeviceGetMemoryInfo(d, ctypes.byref(m))
    check("memory-after-free", rc == 0 and m.total == SLICE and m.used == 0,
          "rc %d total %d used %d" % (rc, m.total, m.used))
    rc, got = procs(nvml, "nvmlDeviceGetComputeRunningProcesses_v3", d,
                    ProcV2)
    check("procs-after-free", rc == 0 and got == [(me, 0)],
          "rc %d %r" % (rc, got))
    nvml.nvmlShutdown()
    return 1 if failed else 0


def cuda_up(alloc):
    """The driver up in a primary context, alloc bytes held: (cuda, ptr)."""
    cuda = ctypes.CDLL("libcuda.so.1")
    ctx, dev, ptr = ctypes.c_void_p(), ctypes.c_int(), ctypes.c_ulonglong()
    if (cuda.cuInit(0) or cuda.cuDeviceGet(ctypes.byref(dev), 0) or
            cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) or
            cuda.cuCtxSetCurrent(ctx) or
            (alloc and cuda.cuMemAlloc_v2(ctypes.byref(ptr),
                                          ctypes.c_size_t(alloc)))):
        return None, None
    return cuda, ptr


def host_pid():
    """This process's pid in the outermost namespace /proc shows."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("NSpid:"):
                return int(line.split()[1])
    return os.getpid()


def hold(alloc):
    """Holds alloc bytes until stdin closes."""
    cuda, _ = cuda_up(alloc)
    print("READY %d" % host_pid() if cuda else "FAILED", flush=True)
    sys.stdin.read()
    return 0


def pid_namespaces(tmp):
    """Three holders of one tenant in pid namespaces of their own, each
    pid 1 there: two with their own /proc (no host pid known to them), one
    seeing the host's (its host pid recorded). Seen from here, the first
    two have no pid that names them (0, not this namespace's pid 1), the
    third its host pid."""
    probe = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc",
                            "true"], capture_output=True)
    if probe.returncode != 0:
        print("SKIP pid-namespaces: unshare refused (%s)" %
              probe.stderr.decode().strip())
        return 0
    env = dict(os.environ, VGPU_SIM_STATE_DIR=tmp,
               VGPU_LEDGER_DIR=os.path.join(tmp, "ledger"),
               VGPU_CONTEXT_OVERHEAD="0", VGPU_TENANT="spread",
               VGPU_MEMORY_LIMIT="512MiB")
    me = [sys.executable, os.path.abspath(__file__)]
    holders, want = [], []
    try:
        for size, ns in ((16 * MiB, ["--mount-proc"]),
                         (32 * MiB, ["--mount-proc"]), (48 * MiB, [])):
            h = subprocess.Popen(["unshare", "--pid", "--fork"] + ns + me +
                                 ["--hold", str(size)], env=env,
                                 stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
            holders.append(h)
            line = h.stdout.readline().split()
            if not line or line[0] != "READY":
                print("FAIL setup: a holder in a pid namespace")
                return 1
            want.append((int(line[1]) if not ns else 0, size))
        env.pop("VGPU_MEMORY_LIMIT")
        r = subprocess.run(me + ["--procs", repr(sorted(want))], env=env,
                           timeout=60)
        return r.returncode
    finally:
        for h in holders:
            h.stdin.close()
            h.wait(timeout=60)


def procs_seen(want):
    """The tenant's process list as this process sees it, against want."""
    nvml, d = open_nvml("procs-nvml")
    if not nvml:
        return 1
    rc, got = procs(nvml, "nvmlDeviceGetComputeRunningProcesses_v3", d,
                    ProcV2)
    check("pid-namespaces", rc == 0 and sorted(got) == want,
          "rc %d %r, expected %r" % (rc, sorted(got), want))
    nvml.nvmlShutdown()
    return 1 if failed else 0


def late(joined, holder):
    """The view of a process of the tenant with no limit of its own."""
    if joined and cuda_up(0)[0] is None:
        check("late-cuda", False, "could not start")
        return 1
    nvml, d = open_nvml("late-nvml")
    if not nvml:
        return 1
    tag = "joined" if joined else "not-joined"
    m = Memory()
    rc = nvml.nvmlDeviceGetMemoryInfo(d, ctypes.byref(m))
    check("late-memory-" + tag, rc == 0 and m.total == SLICE and
          m.used == ALLOC,
          "rc %d total %d used %d" % (rc, m.total, m.used))
    want = [(holder, ALLOC)] + ([(os.getpid(), 0)] if joined else [])
    rc, got = procs(nvml, "nvmlDeviceGetComputeRunningProcesses_v3", d,
                    ProcV2)
    check("late-procs-" + tag, rc == 0 and sorted(got) == sorted(want),
          "rc %d %r, expected %r" % (rc, got, want))
    nvml.nvmlShutdown()
    return 1 if failed else 0


def base_env(tmp):
    """The environment of a fresh device and ledger in tmp."""
    return dict(os.environ, VGPU_SIM_STATE_DIR=tmp,
                VGPU_LEDGER_DIR=os.path.join(tmp, "ledger"),
                VGPU_CONTEXT_OVERHEAD="0")


def start_holder(holders, env, size):
    """A process of this file holding size bytes (--hold), appended to
    holders; returned once it is ready, else None."""
    h = subprocess.Popen([sys.executable, os.path.abspath(__file__),
                          "--hold", str(size)], env=env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    holders.append(h)
    return h if h.stdout.readline().startswith("READY") else None


def one_view(tmp):
    """Holders of two tenants, then the late process of the first."""
    base = base_env(tmp)
    me = [sys.executable, os.path.abspath(__file__)]
    holders = []
    try:
        for tenant, limit, size in (("mine", "512MiB", ALLOC),
                                    ("other", "256MiB", 32 * MiB)):
            if not start_holder(holders, dict(base, VGPU_TENANT=tenant,
                                              VGPU_MEMORY_LIMIT=limit),
                                size):
                print("FAIL setup: holder of %s" % tenant)
                return 1
        env = dict(base, VGPU_TENANT="mine")
        env.pop("VGPU_MEMORY_LIMIT", None)
        rc = 0
        for joined in ("0", "1"):
            r = subprocess.run(me + ["--late", joined,
                                     str(holders[0].pid)],
                               env=env, timeout=60)
            rc |= r.returncode
        return rc
    finally:
        for h in holders:
            h.stdin.close()
            h.wait(timeout=60)


def monitor(tenant, used, want):
    """The view of a process that never used CUDA, of tenant, with no
    option of its own: used bytes (None: not checked) and the list."""
    nvml, d = open_nvml("monitor-nvml")
    if not nvml:
        return 1
    if used is not None:
        m = Memory()
        rc = nvml.nvmlDeviceGetMemoryInfo(d, ctypes.byref(m))
        check("monitor-memory-" + tenant, rc == 0 and m.total == SLICE and
              m.used == used, "rc %d total %d used %d, expected %d" %
              (rc, m.total, m.used, used))
    rc, got = procs(nvml, "nvmlDeviceGetComputeRunningProcesses_v3", d,
                    ProcV2)
    check("monitor-procs-" + tenant, rc == 0 and sorted(got) == want,
          "rc %d %r, expected %r" % (rc, sorted(got), want))
    # The utilisation samples: sized and read as the tenant's alone (the
    # sizing call said the device's count once).
    n = ctypes.c_uint(0)
    rc = nvml.nvmlDeviceGetProcessUtilization(d, None, ctypes.byref(n),
                                              ctypes.c_ulonglong(0))
    check("monitor-util-sizing-" + tenant,
          rc == NVML_INSUFFICIENT_SIZE and n.value == len(want),
          "rc %d count %d, expected %d and %d" %
          (rc, n.value, NVML_INSUFFICIENT_SIZE, len(want)))
    buf = (UtilSample * len(want))()
    n = ctypes.c_uint(len(want))
    rc = nvml.nvmlDeviceGetProcessUtilization(d, buf, ctypes.byref(n),
                                              ctypes.c_ulonglong(0))
    pids = sorted(buf[i].pid for i in range(n.value)) if rc == 0 else []
    check("monitor-util-" + tenant, rc == 0 and
          pids == sorted(p for p, _ in want),
          "rc %d %r, expected %r" % (rc, pids, sorted(p for p, _ in want)))
    nvml.nvmlShutdown()
    return 1 if failed else 0


def monitors(tmp):
    """Tenant "share" (a compute share, no memory limit), "lim" (a
    512 MiB slice) and "other"; one holder of each of the first two is
    killed; then a monitor of each of the first two."""
    base = base_env(tmp)
    base.pop("VGPU_MEMORY_LIMIT", None)
    me = [sys.executable, os.path.abspath(__file__)]
    terms = {"share": {"VGPU_COMPUTE_LIMIT": "50"},
             "lim": {"VGPU_MEMORY_LIMIT": "512MiB"}, "other": {}}
    holders, live = [], {}
    try:
        for tenant, size, killed in (("share", 32 * MiB, False),
                                     ("share", 64 * MiB, True),
                                     ("lim", 48 * MiB, False),
                                     ("lim", 80 * MiB, True),
                                     ("other", 16 * MiB, False)):
            h = start_holder(holders, dict(base, VGPU_TENANT=tenant,
                                           **terms[tenant]), size)
            if not h:
                print("FAIL setup: holder of %s" % tenant)
                return 1
            if killed:
                h.kill()
                h.wait(timeout=60)
            else:
                live[tenant] = [(h.pid, size)]
        rc = 0
        for tenant, used in (("share", None), ("lim", 48 * MiB)):
            r = subprocess.run(me + ["--monitor", tenant, repr(used),
                                     repr(live[tenant])],
                               env=dict(base, VGPU_TENANT=tenant),
                               timeout=60)
            rc |= r.returncode
        # A ledger group that does not exist: the views cannot read the
        # ledger, and say so once (they said nothing).
        r = subprocess.run(me + ["--memory-twice"], timeout=60,
                           env=dict(base, VGPU_TENANT="lim",
                                    VGPU_LEDGER_GROUP="no-such-group-vgpu"),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
        said = [l for l in r.stderr.splitlines() if "NVML views:" in l]
        check("monitor-unread-ledger-said", r.returncode == 0 and
              len(said) == 1 and "no-such-group-vgpu" in said[0],
              "rc %d, stderr %r" % (r.returncode, r.stderr[-400:]))
        return rc | (1 if failed else 0)
    finally:
        for h in holders:
            if h.poll() is None:
                h.stdin.close()
                h.wait(timeout=60)


def memory_twice():
    """NVML's memory info, twice (for the warnings it gives)."""
    nvml, d = open_nvml(None)
    m = Memory()
    if not nvml:
        return 1
    for _ in range(2):
        if nvml.nvmlDeviceGetMemoryInfo(d, ctypes.byref(m)):
            return 1
    return 0


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--memory-twice":
        return memory_twice()
    if len(sys.argv) > 4 and sys.argv[1] == "--monitor":
        import ast
        return monitor(sys.argv[2], ast.literal_eval(sys.argv[3]),
                       ast.literal_eval(sys.argv[4]))
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        return child()
    if len(sys.argv) > 2 and sys.argv[1] == "--hold":
        return hold(int(sys.argv[2]))
    if len(sys.argv) > 3 and sys.argv[1] == "--late":
        return late(sys.argv[2] == "1", int(sys.argv[3]))
    if len(sys.argv) > 2 and sys.argv[1] == "--procs":
        import ast
        return procs_seen(ast.literal_eval(sys.argv[2]))
    for var in ("LD_PRELOAD", "VGPU_REAL_LIBCUDA", "LD_LIBRARY_PATH"):
        if not os.environ.get(var):
            print("FAIL setup: %s is not set (run by meson)" % var)
            return 1
    with tempfile.TemporaryDirectory(prefix="vgpu-nvml-ctypes.") as tmp:
        env = dict(os.environ,
                   VGPU_SIM_STATE_DIR=tmp,
                   VGPU_LEDGER_DIR=os.path.join(tmp, "ledger"),
                   VGPU_MEMORY_LIMIT="512MiB",
                   VGPU_CONTEXT_OVERHEAD="0")
        r = subprocess.run([sys.executable, os.path.abspath(__file__),
                            "--child"], env=env, timeout=60)
    with tempfile.TemporaryDirectory(prefix="vgpu-nvml-ctypes.") as tmp:
        rc = r.returncode | one_view(tmp)
    with tempfile.TemporaryDirectory(prefix="vgpu-nvml-ctypes.") as tmp:
        rc |= monitors(tmp)
    with tempfile.TemporaryDirectory(prefix="vgpu-nvml-ctypes.") as tmp:
        return rc | pid_namespaces(tmp)


if __name__ == "__main__":
    sys.exit(main())
