"""nvidia-ml-py (pynvml), as monitoring tools use it: the device, its
memory (v1 and v2) and the processes on it.

Environment: CLIENT_TOTAL, the bytes the device must report as total;
CLIENT_SLICE=1 under a slice, where used must be what the tenant is
charged (CLIENT_HOLDER_BYTES, held by a process clients.py started, which
must be listed). Prints "ok NAME" per check; exits 1 at the first that
fails."""
import os
import sys

import pynvml as n


def ok(name, cond, detail=""):
    if not cond:
        print("FAIL %s %s" % (name, detail))
        sys.exit(1)
    print("ok %s" % name)


total_want = int(os.environ["CLIENT_TOTAL"])
holder = int(os.environ.get("CLIENT_HOLDER_PID", "0"))
n.nvmlInit()
ok("count", n.nvmlDeviceGetCount() >= 1)
h = n.nvmlDeviceGetHandleByIndex(0)
m1 = n.nvmlDeviceGetMemoryInfo(h)
ok("memory-v1", m1.total == total_want and m1.used <= m1.total and
   m1.free == m1.total - m1.used, (m1.total, m1.used, m1.free))
m2 = n.nvmlDeviceGetMemoryInfo(h, version=n.nvmlMemory_v2)
ok("memory-v2", m2.total == total_want and m2.used <= m2.total,
   (m2.total, m2.used))
procs = n.nvmlDeviceGetComputeRunningProcesses(h)
pids = [p.pid for p in procs]
ok("processes", not holder or holder in pids, pids)
if holder:
    held = [p.usedGpuMemory for p in procs if p.pid == holder][0]
    ok("process-memory", held and held >= int(os.environ["CLIENT_HOLDER_BYTES"]),
       held)
    ok("used-is-charge", m1.used >= int(os.environ["CLIENT_HOLDER_BYTES"]),
       m1.used)
    if os.environ.get("CLIENT_SLICE"):
        # Inside a slice the list is the tenant's processes, and what they
        # are charged adds up to the slice's used memory.
        ok("list-is-the-tenant", sum(p.usedGpuMemory for p in procs) ==
           m1.used, ([(p.pid, p.usedGpuMemory) for p in procs], m1.used))
n.nvmlShutdown()
