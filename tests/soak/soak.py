#!/usr/bin/env python3
"""soak.py - the soak under faults (docs/soak.md).

    python3 tests/soak/soak.py BUILD_DIR [--processes N] [--seconds T]
                               [--seed S] [--no-fill] [--keep]

N soak-worker processes (tests/soak/worker.c) in 8 tenants, each with a
memory slice and a compute share, on two simulated GPUs, through the shim,
for T seconds: they allocate, write and check data, free, launch and fork.
The simulator injects allocation and launch failures (VGPU_SIM_FAIL); the
driver SIGKILLs random workers at random moments and starts replacements;
the ledger's directory is a 2 MiB tmpfs (in a user and mount namespace of
our own, `unshare -Urm`) that a filler file fills up for the middle part of
the run. At the end the survivors are paused (SIGUSR1), the ledger is read
(soak-ledger, after reclaiming dead processes' slots) and checked:

  - every live slot holds exactly what its process says it holds, the
    tenants' totals are the sums of their live slots, no dead slot is left;
  - no survivor's CUDA call took more than a second;
  - no worker or forked child saw data change (exit 10/11), none crashed;
  - each tenant's GPU time over the run is at most its share + 3 points.

Prints a report; exits 1 when a check fails.
"""
import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

MIB = 1 << 20
TENANTS = [  # (slice MiB, compute share %)
    (32, 10), (48, 10), (64, 10), (32, 10),
    (48, 12), (64, 12), (96, 15), (128, 20),
]
CTX_OVERHEAD = MIB
SLOW_NS = 1_000_000_000
SHARE_TOLERANCE = 3.0
FILL_MIB = 2
EXIT_NOROOM = 4      # the context refused: the tenant's slice is full
EXIT_NAMES = {2: "unexpected CUDA result", 3: "no device",
              10: "DATA LOSS", 11: "a forked child failed"}
# Busy processes per CPU at which the simulated GPU still runs kernels at
# about their own speed; past it workers rest between steps (--duty).
PROCS_PER_CPU = 6
NOROOM_RESPAWN_S = 0.5


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("build")
    p.add_argument("--processes", type=int, default=12)
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--no-fill", action="store_true",
                   help="no tmpfs for the ledger (no user namespaces)")
    p.add_argument("--keep", action="store_true", help="keep the temp dir")
    p.add_argument("--max-mib", type=int, default=None,
                   help="largest ordinary allocation (default: 8, or 2 when "
                   "workers rest: see --duty)")
    p.add_argument("--duty", type=float, default=None,
                   help="fraction of the time each worker is busy (default: "
                   "1, or less when there are more than %d workers per CPU)"
                   % PROCS_PER_CPU)
    p.add_argument("--ci", action="store_true",
                   help="skip (77) unless VGPU_SOAK=1: not yet reliable")
    return p.parse_args()


def in_namespace(args):
    """Re-runs this script in a user and mount namespace of its own, where
    it may mount a small tmpfs; returns None when already there or when
    namespaces are not available (then the run has no fill)."""
    if args.no_fill or os.environ.get("SOAK_IN_NS") == "1":
        return None
    probe = subprocess.run(["unshare", "-Urm", "true"],
                           capture_output=True)
    if probe.returncode != 0:
        print("soak: no user namespaces (unshare -Urm failed): "
              "the ledger directory will not fill up")
        args.no_fill = True
        return None
    env = dict(os.environ, SOAK_IN_NS="1")
    return subprocess.call(["unshare", "-Urm", sys.executable] + sys.argv,
                           env=env)


class Worker:
    def __init__(self, index, tenant, device, path, proc, log):
        self.index, self.tenant, self.device = index, tenant, device
        self.path, self.proc, self.log = path, proc, log
        self.started = time.monotonic()

    def status(self):
        try:
            with open(self.path) as f:
                words = f.read().split()
        except OSError:
            return None
        st = {words[i]: words[i + 1] for i in range(0, len(words) - 1, 2)}
        return {k: v if k == "slowest" else int(v) for k, v in st.items()}


class Soak:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        b = os.path.abspath(args.build)
        self.worker_bin = os.path.join(b, "tests/soak/soak-worker")
        self.ledger_bin = os.path.join(b, "tests/soak/soak-ledger")
        self.shim = os.path.join(b, "intercept/libvgpu.so")
        self.sim = os.path.join(b, "sim/libcuda.so.1")
        shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
        self.base = tempfile.mkdtemp(prefix="vgpu-soak.", dir=shm)
        self.ledger = os.path.join(self.base, "ledger")
        self.state = os.path.join(self.base, "sim")
        self.logs = os.path.join(self.base, "logs")
        for d in (self.ledger, self.state, self.logs):
            os.mkdir(d)
        self.workers = {}
        self.spawned = self.kills = 0
        self.failures = []
        self.ended = []      # (worker, returncode, last status)
        self.fill = None     # (when filled, bytes, when freed)
        self.refused = 0     # workers refused a context (slice full)
        self.respawn_at = {}  # index -> when to start it again
        cpus = len(os.sched_getaffinity(0))
        if args.duty is None:
            args.duty = min(1.0, PROCS_PER_CPU * cpus / args.processes)
        if args.max_mib is None:
            args.max_mib = 8 if args.duty >= 1 else 2
        self.cpus = cpus

    def env(self, tenant):
        mem, share = TENANTS[tenant]
        e = dict(os.environ)
        e.pop("SOAK_IN_NS", None)
        e.update({
            "LD_PRELOAD": self.shim, "VGPU_REAL_LIBCUDA": self.sim,
            "VGPU_LEDGER_DIR": self.ledger, "VGPU_SIM_STATE_DIR": self.state,
            "VGPU_SIM_DEVICES": "2", "VGPU_SIM_MEMORY": "448MiB",
            "VGPU_TENANT": "soak-t%d" % tenant,
            "VGPU_MEMORY_LIMIT": "%dMiB" % mem,
            "VGPU_COMPUTE_LIMIT": str(share),
            "VGPU_CONTEXT_OVERHEAD": "%dB" % CTX_OVERHEAD,
            "VGPU_SIM_FAIL": "alloc:%%%d,launch:%%%d" % (
                self.rng.randint(5, 13), self.rng.randint(7, 17)),
        })
        return e

    def spawn(self, index):
        tenant = index % len(TENANTS)
        device = (index // len(TENANTS) + index) % 2
        self.spawned += 1
        path = os.path.join(self.base, "w%d.%d" % (index, self.spawned))
        log = open(os.path.join(self.logs, "w%d.%d" % (index, self.spawned)),
                   "w")
        proc = subprocess.Popen(
            [self.worker_bin, "--device", str(device),
             "--seconds", str(self.args.seconds + 120), "--status", path,
             "--seed", str(self.rng.getrandbits(31)), "--max-mib", str(self.args.max_mib),
             "--duty", "%.4f" % self.args.duty],
            env=self.env(tenant), stdout=log, stderr=subprocess.STDOUT)
        self.workers[index] = Worker(index, tenant, device, path, proc, log)

    def ended_worker(self, w, rc, killed):
        w.log.close()
        self.ended.append((w, rc, w.status(), killed))
        if killed:
            return
        if rc == EXIT_NOROOM:
            self.refused += 1
            return
        what = EXIT_NAMES.get(rc, "signal %d" % -rc if rc < 0 else
                              "exit %d" % rc)
        with open(w.log.name) as f:
            tail = f.read()[-600:]
        self.failures.append("worker %d (pid %d, tenant %d, device %d) "
                             "ended: %s\n%s" % (w.index, w.proc.pid,
                                                w.tenant, w.device, what,
                                                tail))

    def poll(self):
        now = time.monotonic()
        for i, w in list(self.workers.items()):
            rc = w.proc.poll()
            if rc is not None:
                self.ended_worker(w, rc, False)
                del self.workers[i]
                # A full slice stays full for a while: no busy restarts.
                self.respawn_at[i] = now + (NOROOM_RESPAWN_S
                                            if rc == EXIT_NOROOM else 0)
        for i, at in list(self.respawn_at.items()):
            if now >= at:
                del self.respawn_at[i]
                self.spawn(i)

    def kill_one(self):
        if not self.workers:
            return
        i = self.rng.choice(list(self.workers))
        w = self.workers.pop(i)
        w.proc.send_signal(signal.SIGKILL)
        rc = w.proc.wait()
        self.kills += 1
        self.ended_worker(w, rc, rc == -signal.SIGKILL)
        self.spawn(i)

    def mount_ledger(self):
        if self.args.no_fill:
            return
        subprocess.run(["mount", "-t", "tmpfs", "-o",
                        "size=%dm,mode=1777" % FILL_MIB, "soak-ledger",
                        self.ledger], check=True)

    def fill_up(self):
        """Writes a file into the ledger's tmpfs until it is full."""
        written = 0
        with open(os.path.join(self.ledger, "filler"), "wb") as f:
            try:
                while True:
                    written += os.write(f.fileno(), b"\xa5" * 65536)
            except OSError:
                pass
        st = os.statvfs(self.ledger)
        self.fill = [time.monotonic(), written, st.f_bavail, None]

    def free_up(self):
        os.unlink(os.path.join(self.ledger, "filler"))
        self.fill[3] = time.monotonic()

    def run(self):
        a = self.args
        self.mount_ledger()
        self.t0 = time.monotonic()
        for i in range(a.processes):
            self.spawn(i)
        end = self.t0 + a.seconds
        quiet = end - min(3.0, a.seconds / 4)   # no kills: let all start
        fill_at = None if a.no_fill else self.t0 + a.seconds * 0.3
        free_at = self.t0 + a.seconds * 0.7
        mean = max(0.25, 8.0 / a.processes)
        next_kill = self.t0 + self.rng.expovariate(1 / mean)
        while time.monotonic() < end:
            now = time.monotonic()
            if fill_at and now >= fill_at and self.fill is None:
                self.fill_up()
            if self.fill and self.fill[3] is None and now >= free_at:
                self.free_up()
            if now >= next_kill and now < quiet:
                self.kill_one()
                next_kill = now + self.rng.expovariate(1 / mean)
            self.poll()
            time.sleep(0.05)
        self.snapshot()

    def wait_for(self, what, pred, timeout):
        limit = time.monotonic() + timeout
        while time.monotonic() < limit:
            self.poll_no_respawn()
            if all(pred(w) for w in self.workers.values()):
                return True
            time.sleep(0.05)
        late = [w.index for w in self.workers.values() if not pred(w)]
        self.failures.append("workers %s not %s within %d s" %
                             (late, what, timeout))
        return False

    def poll_no_respawn(self):
        for i, w in list(self.workers.items()):
            rc = w.proc.poll()
            if rc is not None:
                self.ended_worker(w, rc, False)
                del self.workers[i]

    def snapshot(self):
        self.wait_for("started", lambda w: w.status() is not None, 20)
        for w in self.workers.values():
            w.proc.send_signal(signal.SIGUSR1)
        self.wait_for("paused", lambda w: (w.status() or {}).get("paused"),
                      30)
        self.wall_ns = int((time.monotonic() - self.t0) * 1e9)
        out = subprocess.run([self.ledger_bin, self.ledger],
                             capture_output=True, text=True)
        if out.returncode != 0:
            self.failures.append("soak-ledger failed: " + out.stderr)
        self.ledger_text = out.stdout
        self.paused = {w.proc.pid: (w, w.status())
                       for w in self.workers.values()}
        for w in self.workers.values():
            w.proc.send_signal(signal.SIGTERM)
        for i, w in list(self.workers.items()):
            try:
                rc = w.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                w.proc.kill()
                rc = w.proc.wait()
            self.ended_worker(w, rc, False) if rc != 0 else \
                self.ended.append((w, rc, w.status(), False))
        self.workers = {}

    def check(self):
        ledgers, tenants, slots = [], [], []
        for line in self.ledger_text.splitlines():
            f = line.split()
            if f[0] == "ledger":
                ledgers.append((f[1], int(f[3])))
            elif f[0] == "tenant":
                tenants.append(dict(uuid=f[1], index=int(f[2]), name=f[3],
                                    used=int(f[5]), kinds=int(f[7]),
                                    limit=int(f[9]), share=int(f[11]),
                                    gpu=int(f[13])))
            elif f[0] == "slot":
                slots.append(dict(uuid=f[1], index=int(f[2]),
                                  tenant=int(f[4]), pid=int(f[6]),
                                  alive=int(f[8]), bytes=int(f[10])))
        if len(ledgers) != 2:
            self.failures.append("%d ledgers, expected 2" % len(ledgers))
        # Each live slot against its paused process.
        seen = set()
        for s in slots:
            if s["alive"] != 1:
                self.failures.append("dead slot left after reclaim: %s" % s)
                continue
            w, st = self.paused.get(s["pid"], (None, None))
            if not st:
                self.failures.append("live slot of no paused worker: %s" % s)
                continue
            expect = st["held"] + st["ctx"] * CTX_OVERHEAD
            seen.add(s["pid"])
            if s["bytes"] != expect:
                self.failures.append(
                    "pid %d (tenant %d) holds %d bytes, the ledger says %d"
                    % (s["pid"], w.tenant, expect, s["bytes"]))
        for pid, (w, st) in self.paused.items():
            if st and st["ctx"] and pid not in seen:
                self.failures.append("pid %d has a context but no live slot"
                                     % pid)
        # Tenants' totals are the sums of their live slots.
        ledger_total = 0
        for t in tenants:
            live = sum(s["bytes"] for s in slots if s["uuid"] == t["uuid"]
                       and s["tenant"] == t["index"])
            ledger_total += t["used"]
            if t["used"] != live or t["kinds"] != live:
                self.failures.append(
                    "tenant %s on %s: used %d, kinds %d, live slots %d"
                    % (t["name"], t["uuid"], t["used"], t["kinds"], live))
            pct = 100.0 * t["gpu"] / self.wall_ns
            t["pct"] = pct
            if pct > t["share"] + SHARE_TOLERANCE:
                self.failures.append("tenant %s on %s used %.1f%% of the GPU,"
                                     " share %d%%" % (t["name"], t["uuid"],
                                                      pct, t["share"]))
        held_total = sum(st["held"] + st["ctx"] * CTX_OVERHEAD
                         for _, st in self.paused.values() if st)
        # No survivor waited more than a second.
        survivors = [(w, st) for w, st in self.paused.values() if st]
        slowest = max([st["max_ns"] for _, st in survivors] or [0])
        for w, st in survivors:
            if st["max_ns"] > SLOW_NS:
                self.failures.append("pid %d (tenant %d): %s took %.3f s"
                                     % (w.proc.pid, w.tenant, st["slowest"],
                                        st["max_ns"] / 1e9))
        return dict(ledgers=ledgers, tenants=tenants, slots=slots,
                    ledger_total=ledger_total, held_total=held_total,
                    slowest=slowest, survivors=len(survivors))

    def report(self, r):
        sts = [st for _, _, st, _ in self.ended if st]
        tot = {k: sum(st.get(k, 0) for st in sts) for k in
               ("calls", "alloc_ok", "ooms", "launches", "launch_fail",
                "checks", "forks", "child_fail", "child_slow")}
        child_slowest = max([st.get("child_max_ns", 0) for st in sts] +
                            [st.get("child_max_ns", 0) for _, st in
                             self.paused.values() if st] or [0])
        killed_slowest = max([st["max_ns"] for _, _, st, k in self.ended
                              if st and k] or [0])
        print("soak: %d processes, 8 tenants, 2 GPUs, %.0f s; seed %s; "
              "%d CPUs, duty %.2f, buffers up to %d MiB"
              % (self.args.processes, self.wall_ns / 1e9, self.args.seed,
                 self.cpus, self.args.duty, self.args.max_mib))
        print("  workers started %d, SIGKILLed %d, refused a context (slice "
              "full) %d, survivors %d"
              % (self.spawned, self.kills, self.refused, r["survivors"]))
        print("  calls %(calls)d: allocations %(alloc_ok)d ok, %(ooms)d OOM "
              "(over the slice or injected); launches %(launches)d, "
              "%(launch_fail)d failed (injected); data checks %(checks)d; "
              "forks %(forks)d, children failed %(child_fail)d" % tot)
        if self.fill:
            print("  ledger tmpfs filled at %.1f s (%d KiB written, %d "
                  "blocks left), freed at %.1f s" % (
                      self.fill[0] - self.t0, self.fill[1] // 1024,
                      self.fill[2], self.fill[3] - self.t0))
        else:
            print("  ledger directory not filled (--no-fill)")
        print("  ledger: %s reclaimed; tenants' used %d bytes, survivors "
              "hold %d" % (", ".join("%s %d" % (u[-8:], n) for u, n in
                                     r["ledgers"]),
                           r["ledger_total"], r["held_total"]))
        print("  slowest call: survivors %.1f ms, killed workers %.1f ms, "
              "forked children %.1f ms (bound 1000 ms)"
              % (r["slowest"] / 1e6, killed_slowest / 1e6,
                 child_slowest / 1e6))
        for t in sorted(r["tenants"], key=lambda t: (t["name"], t["uuid"])):
            print("  %-8s on %s: share %2d%%, used %5.2f%% of the GPU, "
                  "holds %6.1f MiB of %d MiB" % (
                      t["name"], t["uuid"][-8:], t["share"], t.get("pct", 0),
                      t["used"] / MIB, t["limit"] // MIB))
        if tot["child_slow"]:
            self.failures.append(
                "%d forked children had a call wait over 1 s (a new process "
                "of a busy tenant starved at admission)" % tot["child_slow"])
        self.exercised(tot)
        for f in self.failures:
            print("FAIL: " + f)
        print("soak: %s" % ("FAILED" if self.failures else "passed"))

    def exercised(self, tot):
        """A soak that did not do what it is for is not a pass."""
        for what, n in (("kills", self.kills), ("checks", tot["checks"]),
                        ("OOMs", tot["ooms"]),
                        ("injected launch failures", tot["launch_fail"]),
                        ("forks", tot["forks"])):
            if n == 0:
                self.failures.append("no %s happened" % what)

    def cleanup(self):
        for w in self.workers.values():
            w.proc.kill()
            w.proc.wait()
        if not self.args.no_fill:
            subprocess.run(["umount", self.ledger], capture_output=True)
        if not self.args.keep and not self.failures:
            subprocess.run(["rm", "-rf", self.base])
        else:
            print("soak: files kept in " + self.base)


def main():
    args = parse_args()
    if args.ci and os.environ.get("VGPU_SOAK") != "1":
        print("soak: skipped; set VGPU_SOAK=1 to run it (docs/soak.md)")
        return 77
    if args.seed is None:
        args.seed = random.randrange(1 << 30)
    rc = in_namespace(args)
    if rc is not None:
        return rc
    soak = Soak(args)
    try:
        soak.run()
        r = soak.check()
        soak.report(r)
    finally:
        soak.cleanup()
    return 1 if soak.failures else 0


if __name__ == "__main__":
    sys.exit(main())
