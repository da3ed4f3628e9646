"""gpustat (a monitoring tool built on NVML) as an administrator runs it:
`gpustat --json`, read back. The device's total must be what it reports
inside the slice, and the holder's process must be listed with its
memory.

Environment: CLIENT_TOTAL, CLIENT_HOLDER_PID, CLIENT_HOLDER_BYTES
(clients.py). Prints "ok NAME" per check; exits 1 at the first that
fails."""
import json
import os
import subprocess
import sys


def ok(name, cond, detail=""):
    if not cond:
        print("FAIL %s %s" % (name, detail))
        sys.exit(1)
    print("ok %s" % name)


exe = os.path.join(os.path.dirname(sys.executable), "gpustat")
r = subprocess.run([exe, "--json"], capture_output=True, text=True,
                   timeout=60)
ok("runs", r.returncode == 0, r.stderr[-500:])
gpu = json.loads(r.stdout)["gpus"][0]
total_mib = int(os.environ["CLIENT_TOTAL"]) >> 20
ok("memory-total", gpu["memory.total"] == total_mib,
   (gpu["memory.total"], total_mib))
ok("memory-used", 0 < gpu["memory.used"] <= gpu["memory.total"],
   gpu["memory.used"])
pid = int(os.environ["CLIENT_HOLDER_PID"])
procs = {p["pid"]: p for p in gpu.get("processes") or []}
ok("process-listed", pid in procs, list(procs))
ok("process-memory", procs[pid]["gpu_memory_usage"] >=
   int(os.environ["CLIENT_HOLDER_BYTES"]) >> 20, procs[pid])
