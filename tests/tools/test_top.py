#!/usr/bin/env python3
r"""vgpu-top, end to end: real processes under the shim on the simulated GPU.

usage: test_top.py CASE      (the environment comes from meson.build)

json        two tenants, three processes: --json parsed back, every number
            checked against the ledger (read by tools-ledger-dump through
            include/vgpu.h) and against what the processes allocated; the
            ledger's bytes are the same before and after (read-only)
prometheus  the same through --prometheus: the exposition format's rules
            (HELP and TYPE before each family, once), and the values
states      a process killed with SIGKILL shows "exited" with its memory
            still charged; one that left cleanly "exited" with nothing
            (the shim leaves its slot to be reclaimed); the rest alive
compute     a 30% tenant launching kernels: target 30, achieved about 30
            over the interval, GPU time and launches counted
spilled     overcommit (host): the bytes past the slice show as spilled
gpus        two simulated GPUs (two ledgers): both listed, sorted by UUID
empty       no directory / an empty one: a message, exit 0, no GPUs;
            --dir naming a file: exit 1
bad-files   truncated, foreign, other-version, empty, a directory, a FIFO,
            a UUID that is not the name's: one line each, skipped, no crash
args        bad options: exit 2 and a message; the live view off a terminal
live        the live view in tmux: a frame, sort keys, the filter, 'q',
            Ctrl-Z and fg, SIGTERM, the terminal restored (skipped
            without tmux)
escape      a hand-edited ledger whose tenant name and GPU UUID hold
            terminal escapes (ESC ] ... BEL, a C1 CSI, invalid UTF-8), and
            a skipped file so named: no control byte reaches stdout or
            stderr in --once, --json or --prometheus; each shows them
            escaped (\xNN; \u00NN in valid JSON)
damaged     a hand-edited copy of a ledger whose counters read 2^64 - 1
            and 2^63 (one tenant, one process each), and whose sums
            would wrap: USED is a number marked '!', never the word
            "unlimited"; the sums stop at 2^64 - 1; --json and
            --prometheus give the same numbers, a limit still null/+Inf
pidns       live slots rewritten as processes of other pid namespaces:
            pid 1 with host pid 4242 shows 4242 and "1" as its own
            namespace's; pid 1 with no host pid, which vgpu-top cannot
            confirm here, shows "?"; an untouched one shows its pid
control     a tenant's terms changed by vgpu-ctl under a running job: its
            memory limit lowered below what it holds, then its compute
            share, policy and spill limit: "over limit by" and the audit
            (how many changes, the last one's time, uid, user, pid and
            fields) in --json, --prometheus and --once, exactly; a tenant
            never changed shows no last change
Exit 77 is a skip for meson.
"""
import json
import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

SHIM = os.environ["VGPU_SHIM"]
SIM = os.environ["VGPU_SIM_LIBCUDA"]
TOP = os.environ["VGPU_TOP"]
HOLDER = os.environ["TOOLS_HOLDER"]
DUMP = os.environ["LEDGER_DUMP"]
CTL = os.environ["VGPU_CTL"]
KERNELS = os.environ.get("HOLDER_KERNELS") == "1"
MIB = 1 << 20
SKIP = 77
KINDS = ["buffer", "array", "pool", "vmm", "graph", "multicast", "context",
         "managed", "spilled"]


class Fail(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Fail(what)
    print("ok: " + what)


class World:
    """A ledger directory and simulator state of its own; the processes."""

    def __init__(self):
        self.root = tempfile.mkdtemp(prefix="vgpu-top-test-")
        self.ledger = os.path.join(self.root, "ledger")
        self.procs = []

    def env(self, tenant, limit=None, sim="sim", **extra):
        e = dict(os.environ, LD_PRELOAD=SHIM, VGPU_REAL_LIBCUDA=SIM,
                 VGPU_LEDGER_DIR=self.ledger, VGPU_TENANT=tenant,
                 VGPU_SIM_STATE_DIR=os.path.join(self.root, sim),
                 VGPU_SIM_MEMORY="1GiB", VGPU_CONTEXT_OVERHEAD="0")
        if limit:
            e["VGPU_MEMORY_LIMIT"] = limit
        for k in ("VGPU_SHIM", "VGPU_TOP", "VGPU_CTL"):  # the test's own
            e.pop(k, None)
        e.update(extra)
        return e

    def hold(self, tenant, sizes, limit=None, us=0, **extra):
        """Starts a holder; returns (process, pid) once it is ready."""
        args = [HOLDER, ",".join(str(s) for s in sizes) or "0", str(us)]
        p = subprocess.Popen(args, env=self.env(tenant, limit, **extra),
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        self.procs.append(p)
        line = p.stdout.readline()
        while line.startswith("alloc "):
            line = p.stdout.readline()
        m = re.match(r"ready (\d+)", line)
        if not m:
            p.kill()
            raise Fail("holder did not start: %r %s" %
                       (line, p.stderr.read()))
        return p, int(m.group(1))

    def stop(self, p):
        p.stdin.close()
        check(p.wait(timeout=20) == 0, "holder %d left cleanly" % p.pid)

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(self.root, ignore_errors=True)

    def top(self, *args, rc=0, dir=None):
        r = subprocess.run([TOP, "--dir", dir or self.ledger] + list(args),
                           capture_output=True, text=True, timeout=30,
                           stdin=subprocess.DEVNULL)
        if rc is not None and r.returncode != rc:
            raise Fail("vgpu-top %s exited %d, expected %d: %s" %
                       (" ".join(args), r.returncode, rc, r.stderr))
        return r

    def ledgers(self):
        return sorted(os.path.join(self.ledger, f)
                      for f in os.listdir(self.ledger)
                      if f.endswith(".ledger") and not f.startswith("."))


def dump(path):
    """The ledger as tools-ledger-dump prints it (include/vgpu.h)."""
    out = subprocess.run([DUMP, path], capture_output=True, text=True,
                         check=True).stdout
    d = {"tenants": {}, "slots": {}}
    for line in out.splitlines():
        f = line.split()
        if f[0] == "gpu":
            d["uuid"], d["physical"], d["joins"] = f[1], int(f[2]), int(f[3])
        elif f[0] == "tenant":
            n = [int(x) for x in f[3:]]
            d["tenants"][f[2]] = dict(
                index=int(f[1]), limit=n[0], used=n[1], spill_limit=n[2],
                share=n[3], policy=n[4], gpu_time=n[5], wait=n[6],
                usage=n[7:])
        elif f[0] == "slot":
            n = [int(x) for x in f[1:]]
            d["slots"][n[2]] = dict(
                index=n[0], tenant=n[1], pid=n[2], generation=n[3],
                launches=n[4], throttled=n[5], wait=n[6], gpu_time=n[7],
                usage=n[8:])
    return d


def limit_json(v):
    return None if v == (1 << 64) - 1 else v


def layout():
    """Where the fields the tests rewrite lie (tools-ledger-dump --layout)."""
    f = subprocess.run([DUMP, "--layout"], capture_output=True, text=True,
                       check=True).stdout.split()
    names = ["uuid", "tenants", "tenant_size", "name", "slots", "slot_size",
             "pid", "host_pid", "tenant_used", "tenant_usage", "slot_usage"]
    return dict(zip(names, (int(x) for x in f[1:])))


# ---- the cases ----------------------------------------------------------------


def three_holders(w):
    a1 = w.hold("team-a", [64 * MIB], "256MiB")
    a2 = w.hold("team-a", [32 * MIB], "256MiB")
    b1 = w.hold("team-b", [16 * MIB, 16 * MIB], "128MiB")
    return {a1[1]: ("team-a", 64 * MIB), a2[1]: ("team-a", 32 * MIB),
            b1[1]: ("team-b", 32 * MIB)}


def case_json(w):
    held = three_holders(w)
    path = w.ledgers()[0]
    before = open(path, "rb").read()
    doc = json.loads(w.top("--json", "--interval", "0.3").stdout)
    after = open(path, "rb").read()
    check(before == after, "the ledger's bytes did not change (read-only)")
    d = dump(path)
    check(doc["schema_version"] == 1, "schema_version 1")
    check(doc["ledger_dir"] == w.ledger, "ledger_dir")
    check(len(doc["gpus"]) == 1, "one GPU")
    g = doc["gpus"][0]
    check(g["uuid"] == d["uuid"] and g["path"] == path, "uuid and path")
    check(g["physical_bytes"] == d["physical"] == 1 << 30,
          "physical bytes: the simulator's 1 GiB")
    check(g["joins"] == d["joins"] == 3, "joins 3")
    check(g["slices_bytes"] == 384 * MIB, "slices 256 + 128 MiB")
    check(g["memory_used_bytes"] == 128 * MIB, "GPU used 128 MiB")
    check(g["utilization_pct_1s"] == 0, "no GPU time: utilisation 0")
    check(abs(doc["window_1s_s"] - 0.3) < 0.2, "the window is the interval")
    tenants = {t["name"]: t for t in g["tenants"]}
    check(sorted(tenants) == ["team-a", "team-b"], "two tenants")
    for name, t in tenants.items():
        dt = d["tenants"][name]
        check(t["index"] == dt["index"], name + " index")
        check(t["memory_limit_bytes"] == limit_json(dt["limit"]),
              name + " limit = ledger")
        check(t["memory_used_bytes"] == dt["used"], name + " used = ledger")
        check(t["spill_limit_bytes"] == limit_json(dt["spill_limit"]),
              name + " spill limit = ledger")
        check([t["usage_bytes"][k] for k in KINDS] == dt["usage"],
              name + " usage per kind = ledger")
        check(t["compute_share_target_pct"] == dt["share"], name + " share")
        check(t["gpu_time_ns"] == dt["gpu_time"] and
              t["admission_wait_ns"] == dt["wait"], name + " compute totals")
        check(t["processes"] == t["processes_alive"] ==
              sum(1 for v in held.values() if v[0] == name),
              name + " processes, all alive")
        for k in ("compute_share_achieved_pct_1s", "launches_per_s_1s",
                  "admission_wait_pct_1s"):
            check(t[k] == 0, name + " " + k + " 0 (no launches)")
        check(t["over_limit_bytes"] == 0 and t["control_changes"] == 0 and
              t["last_change"] is None,
              name + " within its limit, never changed: no last change")
    check(tenants["team-a"]["memory_limit_bytes"] == 256 * MIB and
          tenants["team-a"]["memory_used_bytes"] == 96 * MIB,
          "team-a: 96 MiB of 256 MiB")
    check(tenants["team-b"]["usage_bytes"]["buffer"] == 32 * MIB,
          "team-b: 32 MiB of buffers")
    procs = {p["pid"]: p for p in g["processes"]}
    check(sorted(procs) == sorted(held), "the processes are the holders")
    for pid, (tenant, size) in held.items():
        p, s = procs[pid], d["slots"][pid]
        check(p["tenant"] == tenant and p["state"] == "alive",
              "pid %d: tenant %s, alive" % (pid, tenant))
        check(p["pid_namespace"] == "same" and p["host_pid"] is None,
              "pid %d: confirmed in vgpu-top's pid namespace" % pid)
        check(p["memory_used_bytes"] == size and
              p["usage_bytes"]["buffer"] == size,
              "pid %d: holds %d MiB" % (pid, size // MIB))
        check([p["usage_bytes"][k] for k in KINDS] == s["usage"] and
              p["slot"] == s["index"] and p["generation"] == s["generation"]
              and p["launches"] == s["launches"],
              "pid %d: slot = ledger" % pid)
    text = w.top("--once", "--interval", "0").stdout
    check("\033" not in text, "--once to a pipe: no escape codes")
    check("team-a" in text and "team-b" in text and
          all(str(pid) in text for pid in held), "--once shows them all")
    check("changes" not in text and "the last at" not in text,
          "--once: no change made, no last-change line")
    for p in list(w.procs):
        w.stop(p)
    doc = json.loads(w.top("--json", "--interval", "0").stdout)
    g = doc["gpus"][0]
    check(all(p["state"] == "exited" and p["memory_used_bytes"] == 0
              for p in g["processes"]) and g["memory_used_bytes"] == 0,
          "all left: exited (until reclaimed), nothing used")


METRIC = re.compile(r'^([a-z_]+)(\{[^}]*\})? (\S+)$')


def parse_prom(text):
    """{(name, frozenset(labels)): value}, checking the format's rules."""
    samples, helped, typed, seen, last = {}, set(), set(), set(), None
    for line in text.splitlines():
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            name = line.split()[2]
            (helped if line[2] == "H" else typed).add(name)
            if line[2] == "T":
                check(name not in seen, name + " has one TYPE line")
                seen.add(name)
                last = name
            continue
        m = METRIC.match(line)
        if not m:
            raise Fail("not a sample line: %r" % line)
        name, labels, value = m.groups()
        if name != last:
            raise Fail("%s sampled outside its family" % name)
        lab = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"',
                                   labels or ""))
        samples[(name, lab)] = float(value)
    check(helped == typed, "every family has HELP and TYPE")
    return samples


def prom_get(s, name, **labels):
    want = set(labels.items())
    got = [v for (n, lab), v in s.items() if n == name and want <= set(lab)]
    if len(got) != 1:
        raise Fail("%s%s: %d samples" % (name, labels, len(got)))
    return got[0]


def case_prometheus(w):
    held = three_holders(w)
    w.hold("free", [8 * MIB])          # no limit
    r = w.top("--prometheus")
    check(r.stderr == "", "no messages")
    s = parse_prom(r.stdout)
    d = dump(w.ledgers()[0])
    gpu = d["uuid"]
    check(prom_get(s, "vgpu_top_ledgers") == 1, "one ledger")
    check(prom_get(s, "vgpu_gpu_memory_bytes", gpu=gpu) == d["physical"],
          "GPU memory")
    check(prom_get(s, "vgpu_gpu_slices_bytes", gpu=gpu) == 384 * MIB and
          prom_get(s, "vgpu_gpu_unlimited_tenants", gpu=gpu) == 1,
          "slices 384 MiB, one unlimited tenant")
    for name, t in d["tenants"].items():
        lim = float("inf") if t["limit"] == (1 << 64) - 1 else t["limit"]
        check(prom_get(s, "vgpu_memory_used_bytes", gpu=gpu, tenant=name)
              == t["used"], name + " used = ledger")
        check(prom_get(s, "vgpu_memory_limit_bytes", gpu=gpu, tenant=name)
              == lim, name + " limit = ledger")
        check(prom_get(s, "vgpu_spilled_bytes", gpu=gpu, tenant=name) ==
              t["usage"][8], name + " spilled = ledger")
        for k, kind in enumerate(KINDS):
            check(prom_get(s, "vgpu_memory_usage_bytes", gpu=gpu,
                           tenant=name, kind=kind) == t["usage"][k],
                  "%s %s = ledger" % (name, kind))
        check(prom_get(s, "vgpu_compute_share_target_percent", gpu=gpu,
                       tenant=name) == t["share"], name + " share")
        check(prom_get(s, "vgpu_gpu_time_seconds_total", gpu=gpu,
                       tenant=name) == t["gpu_time"] / 1e9 and
              prom_get(s, "vgpu_admission_wait_seconds_total", gpu=gpu,
                       tenant=name) == t["wait"] / 1e9,
              name + " compute counters")
    check(prom_get(s, "vgpu_memory_limit_bytes", tenant="free") ==
          float("inf"), "an unlimited tenant's limit is +Inf")
    for name in ("team-a", "team-b", "free"):
        check(prom_get(s, "vgpu_tenant_over_limit_bytes", gpu=gpu,
                       tenant=name) == 0 and
              prom_get(s, "vgpu_tenant_control_changes_total", gpu=gpu,
                       tenant=name) == 0 and
              not any(n == "vgpu_tenant_control_last_change_time_seconds"
                      for n, _ in s),
              name + ": not over its limit, no change, no change time")
    for pid, (tenant, size) in held.items():
        check(prom_get(s, "vgpu_process_memory_used_bytes", gpu=gpu,
                       tenant=tenant, pid=str(pid)) == size,
              "pid %d holds %d MiB" % (pid, size // MIB))
        check(prom_get(s, "vgpu_process_alive", pid=str(pid)) == 1,
              "pid %d alive" % pid)


def case_states(w):
    a, apid = w.hold("team", [16 * MIB], "256MiB")
    b, bpid = w.hold("team", [8 * MIB], "256MiB")
    c, cpid = w.hold("team", [4 * MIB], "256MiB")
    os.kill(apid, signal.SIGKILL)
    a.wait()
    w.stop(b)
    doc = json.loads(w.top("--json", "--interval", "0").stdout)
    procs = {p["pid"]: p for p in doc["gpus"][0]["processes"]}
    check(procs[apid]["state"] == "exited" and
          procs[apid]["memory_used_bytes"] == 16 * MIB,
          "killed: exited, its 16 MiB still charged")
    check(bpid not in procs,
          "left cleanly: its slot given back at exit, not listed")
    check(procs[cpid]["state"] == "alive", "the other one: alive")
    t = doc["gpus"][0]["tenants"][0]
    check(t["processes"] == 2 and t["processes_alive"] == 1,
          "tenant: 2 slots (the killed one's and the live one's), 1 alive")
    s = parse_prom(w.top("--prometheus").stdout)
    check(prom_get(s, "vgpu_process_alive", pid=str(apid)) == 0,
          "prometheus: the killed one is not alive")
    text = w.top("--once", "--interval", "0").stdout
    check(re.search(r"%d\s+team\s+exited" % apid, text) is not None,
          "--once shows it exited")


def case_compute(w):
    if not KERNELS:
        print("SKIP: tools-holder was built without the kernels (no nvcc)")
        return SKIP
    w.hold("busy", [], us=1000, VGPU_COMPUTE_LIMIT="30")
    time.sleep(0.5)
    doc = json.loads(w.top("--json", "--interval", "1").stdout)
    d = dump(w.ledgers()[0])
    t = doc["gpus"][0]["tenants"][0]
    p = doc["gpus"][0]["processes"][0]
    check(t["compute_share_target_pct"] == 30 == d["tenants"]["busy"]["share"],
          "target 30%")
    check(0 < t["gpu_time_ns"] <= d["tenants"]["busy"]["gpu_time"],
          "GPU time counted, not past the ledger's later value")
    check(0 < p["launches"] <= d["slots"][p["pid"]]["launches"],
          "launches counted")
    a = t["compute_share_achieved_pct_1s"]
    check(15 <= a <= 40, "achieved %.1f%%: about 30" % a)
    check(abs(doc["gpus"][0]["utilization_pct_1s"] - a) < 0.01,
          "utilisation: the only tenant's share")
    check(p["launches_per_s_1s"] > 50, "launches per second %.0f"
          % p["launches_per_s_1s"])
    check(t["admission_wait_pct_1s"] > 30, "waited %.0f%% of the time"
          % t["admission_wait_pct_1s"])


def case_spilled(w):
    w.hold("oc", [48 * MIB, 48 * MIB], "64MiB", VGPU_OVERCOMMIT="host")
    doc = json.loads(w.top("--json", "--interval", "0").stdout)
    d = dump(w.ledgers()[0])
    t = doc["gpus"][0]["tenants"][0]
    check(t["spilled_bytes"] == d["tenants"]["oc"]["usage"][8] == 48 * MIB,
          "48 MiB spilled")
    check(t["memory_used_bytes"] == 48 * MIB, "48 MiB on the device")
    check(doc["gpus"][0]["processes"][0]["spilled_bytes"] == 48 * MIB,
          "the process's spilled bytes")
    s = parse_prom(w.top("--prometheus").stdout)
    check(prom_get(s, "vgpu_spilled_bytes", tenant="oc") == 48 * MIB,
          "prometheus: vgpu_spilled_bytes")
    check(prom_get(s, "vgpu_process_spilled_bytes", tenant="oc") ==
          48 * MIB, "prometheus: vgpu_process_spilled_bytes")
    check("48.0 MiB" in w.top("--once", "--interval", "0").stdout,
          "--once shows it")


def case_gpus(w):
    w.hold("one", [8 * MIB], "64MiB", sim="s1", VGPU_SIM_NAME="gpu one")
    w.hold("two", [4 * MIB], "32MiB", sim="s2", VGPU_SIM_NAME="gpu two")
    doc = json.loads(w.top("--json", "--interval", "0").stdout)
    uuids = [g["uuid"] for g in doc["gpus"]]
    check(len(uuids) == 2 and uuids == sorted(uuids), "two GPUs, by UUID")
    for g in doc["gpus"]:
        d = dump(g["path"])
        check(g["uuid"] == d["uuid"] and len(g["tenants"]) == 1 and
              g["tenants"][0]["memory_used_bytes"] ==
              d["tenants"][g["tenants"][0]["name"]]["used"],
              "GPU %s = its ledger" % g["uuid"])


def case_empty(w):
    missing = os.path.join(w.root, "none")
    for d in (missing, w.root):
        r = w.top("--json", "--interval", "0", dir=d)
        check(json.loads(r.stdout)["gpus"] == [], d + ": no GPUs, exit 0")
        check("no usable ledger files in '%s'" % d in r.stderr,
              "a message naming the directory")
        r = w.top("--once", "--interval", "0", dir=d)
        check("0 GPUs" in r.stdout, "--once: 0 GPUs, exit 0")
        s = parse_prom(w.top("--prometheus", dir=d).stdout)
        check(prom_get(s, "vgpu_top_ledgers") == 0, "prometheus: 0 ledgers")
    f = os.path.join(w.root, "file")
    open(f, "w").close()
    r = w.top("--json", rc=1, dir=f)
    check("cannot list the ledger directory '%s'" % f in r.stderr,
          "--dir naming a file: exit 1 and a message")


def case_bad_files(w):
    w.hold("good", [8 * MIB], "64MiB")
    good = w.ledgers()[0]
    data = open(good, "rb").read()
    d = w.ledger
    bad = {
        "GPU-trunc.v3.ledger": (data[:100000], "expected 397312 (truncated)"),
        "GPU-short.v3.ledger": (data[:100], "too short for a ledger header"),
        "GPU-foreign.v3.ledger": (b"not a ledger at all" * 20000,
                                  "not a libvgpu ledger"),
        "GPU-v7.v3.ledger": (data[:8] + (7).to_bytes(4, "little") +
                             data[12:], "layout version 7, expected 3"),
        "GPU-empty.v3.ledger": (b"", "an empty file"),
        "GPU-other.v2.ledger": (data, "its name has layout version 2"),
        "GPU-renamed.v3.ledger": (data, "expected the UUID of its name"),
        "GPU-padded.v3.ledger": (data + b"\0" * 4096, "(padded)"),
        "GPU-nouuidend.v3.ledger": (
            data[:layout()["uuid"]] + b"A" * 64 +
            data[layout()["uuid"] + 64:],
            "a GPU UUID of 64 bytes with no end, expected a NUL-terminated "
            "UUID"),
    }
    for name, (content, _) in bad.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(content)
    os.mkdir(os.path.join(d, "GPU-dir.v3.ledger"))
    bad["GPU-dir.v3.ledger"] = (None, "a directory, expected a regular file")
    os.mkfifo(os.path.join(d, "GPU-fifo.v3.ledger"))
    bad["GPU-fifo.v3.ledger"] = (None, "not a regular file")
    if os.geteuid() != 0:
        p = os.path.join(d, "GPU-secret.v3.ledger")
        with open(p, "wb") as f:
            f.write(data)
        os.chmod(p, 0)
        bad["GPU-secret.v3.ledger"] = (None, "cannot be opened for reading")
    open(os.path.join(d, "notes.txt"), "w").close()   # not a ledger name
    for mode in ("--json", "--once", "--prometheus"):
        r = w.top(mode, "--interval", "0")
        lines = r.stderr.splitlines()
        check(len(lines) == len(bad), "%s: one line per bad file (%d)" %
              (mode, len(lines)))
        for name, (_, why) in bad.items():
            path = os.path.join(d, name)
            hit = [l for l in lines if "'%s'" % path in l]
            check(len(hit) == 1 and why in hit[0],
                  "%s: %s: %s" % (mode, name, why))
    doc = json.loads(w.top("--json", "--interval", "0").stdout)
    check([g["path"] for g in doc["gpus"]] == [good],
          "only the good ledger is read")
    skipped = {x["path"]: x["reason"] for x in doc["skipped_files"]}
    check(sorted(skipped) == sorted(os.path.join(d, n) for n in bad) and
          all(why in skipped[os.path.join(d, n)]
              for n, (_, why) in bad.items()),
          "JSON: skipped_files, each with its reason")
    s = parse_prom(w.top("--prometheus").stdout)
    check(prom_get(s, "vgpu_top_skipped_files") == len(bad),
          "prometheus: vgpu_top_skipped_files")
    text = w.top("--once", "--interval", "0").stdout
    check("%d files skipped" % len(bad) in text, "--once: the count")


def case_args(w):
    for args, msg in ((["--interval", "x"], "--interval 'x'"),
                      (["--interval", "-1"], "--interval '-1'"),
                      (["--bogus"], "unknown argument '--bogus'"),
                      (["--once", "--json"], "exclude each other"),
                      (["--sort", "z"], "--sort 'z'"),
                      (["--dir"], "--dir needs a value")):
        r = subprocess.run([TOP] + args, capture_output=True, text=True)
        check(r.returncode == 2 and msg in r.stderr and "usage:" in r.stderr,
              "%s: exit 2, %r" % (" ".join(args), msg))
    r = subprocess.run([TOP, "--help"], capture_output=True, text=True)
    check(r.returncode == 0 and "usage:" in r.stdout, "--help")
    r = subprocess.run([TOP, "--dir", w.root], capture_output=True,
                       text=True, stdin=subprocess.DEVNULL)
    check(r.returncode == 2 and "needs a terminal" in r.stderr,
          "the live view off a terminal: exit 2 and a message")
    r = w.top("--once", "--interval", "0", "--sort", "p", "--filter", "zz")
    check("sort: pid  filter: zz" in r.stdout, "--sort and --filter")


# ---- the live view, in tmux ---------------------------------------------------


class Tmux:
    def __init__(self, root):
        self.sock = os.path.join(root, "tmux.sock")
        env = dict(os.environ, TERM="xterm-256color")
        env.pop("TMUX", None)
        self.run("-f", "/dev/null", "new-session", "-d", "-s", "t", "-x",
                 "180", "-y", "40", "env PS1='$ ' sh", env=env)

    def run(self, *args, env=None):
        return subprocess.run(["tmux", "-S", self.sock] + list(args),
                              capture_output=True, text=True, check=True,
                              env=env, timeout=10).stdout

    def keys(self, *keys):
        self.run("send-keys", "-t", "t", *keys)

    def screen(self):
        return self.run("capture-pane", "-p", "-t", "t")

    def wait_for(self, pred, what, timeout=10):
        end = time.time() + timeout
        while time.time() < end:
            s = self.screen()
            if pred(s):
                check(True, what)
                return s
            time.sleep(0.1)
        raise Fail("%s; the screen:\n%s" % (what, self.screen()))

    def kill(self):
        subprocess.run(["tmux", "-S", self.sock, "kill-server"],
                       capture_output=True)


def tty_modes(tm, tag):
    """The terminal's icanon and echo flags, from stty in the pane (the
    output line cannot be mistaken for the command line typed)."""
    tm.keys("clear; stty -a | tr ' ;' '\\n\\n' | grep -x -e -icanon -e "
            "icanon -e -echo -e echo | tr '\\n' ' ' | sed 's/^/MODES /'; "
            "echo ':'%s" % tag, "Enter")
    pat = r"^MODES (.*):%s$" % tag
    s = tm.wait_for(lambda s: re.search(pat, s, re.M), "stty ran (%s)" % tag)
    return re.search(pat, s, re.M).group(1).split()


def case_live(w):
    if not shutil.which("tmux"):
        print("SKIP: tmux is not installed (apt-get install tmux; "
              "./quickstart installs it)")
        return SKIP
    _, apid = w.hold("tenant-alpha", [64 * MIB], "256MiB")
    _, bpid = w.hold("tenant-beta", [96 * MIB], "512MiB")
    tm = Tmux(w.root)
    try:
        check(sorted(tty_modes(tm, "BEFORE")) == ["echo", "icanon"],
              "the shell's terminal: icanon echo")
        pidfile = os.path.join(w.root, "top.pid")
        tm.keys("clear; sh -c 'echo $$ > %s; exec %s --dir %s --interval "
                "0.3'; echo TOP-EXIT=$?" % (pidfile, TOP, w.ledger), "Enter")
        s = tm.wait_for(lambda s: "tenant-alpha" in s and "tenant-beta" in s
                        and "sort: memory" in s, "a frame with both tenants")
        check(str(apid) in s and str(bpid) in s and "alive" in s,
              "their pids, alive")
        check("64.0 MiB / 256.0 MiB" in s, "alpha: used / limit")
        check(s.index("%d " % bpid) < s.index("%d " % apid),
              "by memory: beta (96 MiB) first")
        check("q quit" in s, "the key help line")
        tm.keys("p")
        s = tm.wait_for(lambda s: "sort: pid" in s, "'p': sorted by pid")
        lo, hi = sorted([apid, bpid])
        check(s.index("%d " % lo, s.index("PID")) <
              s.index("%d " % hi, s.index("PID")), "lower pid first")
        tm.keys("t")
        tm.wait_for(lambda s: "sort: tenant" in s, "'t': sorted by tenant")
        tm.keys("/", "beta", "Enter")
        s = tm.wait_for(lambda s: "filter: beta" in s and
                        "tenant-alpha" not in s, "'/beta': only beta shown")
        tm.keys("/", "Escape")
        tm.wait_for(lambda s: "filter: -" in s and "tenant-alpha" in s,
                    "'/' then Esc: the filter cleared")
        tm.keys("q")
        s = tm.wait_for(lambda s: "TOP-EXIT=0" in s, "'q': exits 0")
        check("tenant-alpha" not in s, "the alternate screen is left")
        check(sorted(tty_modes(tm, "AFTER-Q")) == ["echo", "icanon"],
              "after 'q': icanon echo restored")
        os.unlink(pidfile)
        tm.keys("clear; sh -c 'echo $$ > %s; exec %s --dir %s'; "
                "echo TOP-EXIT=$?" % (pidfile, TOP, w.ledger), "Enter")
        tm.wait_for(lambda s: "tenant-alpha" in s, "running again")
        pid = int(open(pidfile).read())
        os.kill(pid, signal.SIGTERM)
        tm.wait_for(lambda s: "TOP-EXIT=0" in s, "SIGTERM: exits 0")
        check(sorted(tty_modes(tm, "AFTER-TERM")) == ["echo", "icanon"],
              "after SIGTERM: icanon echo restored")
        tm.keys("clear; %s --dir %s" % (TOP, w.ledger), "Enter")
        tm.wait_for(lambda s: "tenant-alpha" in s, "running again")
        tm.keys("C-z")
        tm.wait_for(lambda s: "Stopped" in s or "stopped" in s,
                    "Ctrl-Z: stopped")
        check(sorted(tty_modes(tm, "STOPPED")) == ["echo", "icanon"],
              "stopped: icanon echo restored")
        tm.keys("clear; fg", "Enter")
        tm.wait_for(lambda s: "tenant-alpha" in s and "q quit" in s,
                    "fg: the view again")
        tm.keys("q")
        tm.wait_for(lambda s: "tenant-alpha" not in s, "'q' after fg: gone")
        check(sorted(tty_modes(tm, "AFTER-FG")) == ["echo", "icanon"],
              "after fg and 'q': icanon echo restored")
    finally:
        tm.kill()


# ---- names and pids from a hand-edited ledger ---------------------------------

HOSTILE_NAME = (b"ev\x1b]0;pwned\x07il\x9b\xc2\x9bz\xe2\x82\xac\\\xe2\x80\xae"
                b"\xe2\x80\x8b\xe2\x80\x8d\xc2\xad\xf3\xa0\x81\x81\xef\xb8\x8f")
HOSTILE_UUID = b"GPU-\x1b[31mred\x07"
HOSTILE_FILE = b"GPU-\x1b]0;x\x07.v3.ledger"


def assert_clean(out, what):
    """Valid UTF-8 with no control character but newlines: nothing that a
    terminal would act on (C0, DEL, C1 as UTF-8; a raw 0x9b is invalid)."""
    try:
        text = out.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Fail("%s: not valid UTF-8: %s" % (what, e))
    bad = [c for c in text if (ord(c) < 0x20 and c != "\n") or
           0x7f <= ord(c) <= 0x9f]
    check(not bad, "%s: no control character (%d bytes)" % (what, len(out)))


# What reorders or breaks a terminal's line, or shows nothing: escaped
# like a control.
BIDI_MARKS = {0x00ad, 0x034f, 0x061c, 0x115f, 0x1160, 0x17b4, 0x17b5,
              *range(0x180b, 0x1810), *range(0x200b, 0x2010),
              *range(0x2028, 0x202f), *range(0x2060, 0x2070), 0x3164,
              *range(0xfe00, 0xfe10), 0xfeff, 0xffa0,
              *range(0xfff0, 0xfffc), *range(0x1bca0, 0x1bca4),
              *range(0x1d173, 0x1d17b), *range(0xe0000, 0xe1000)}


def text_escaped(b):
    """What vgpu-top's text escape makes of bytes b (top_escape)."""
    out, i = "", 0
    while i < len(b):
        for n in (4, 3, 2, 1):
            try:
                ch = b[i:i + n].decode("utf-8")
            except UnicodeDecodeError:
                continue
            if len(ch) == 1 and (ord(ch) >= 0xa0 or 0x20 <= ord(ch) < 0x7f) \
                    and ord(ch) not in BIDI_MARKS:
                out += "\\\\" if ch == "\\" else ch
                i += n
                break
        else:
            out += "\\x%02x" % b[i]
            i += 1
    return out


def run_bytes(args):
    r = subprocess.run([TOP] + args, capture_output=True, timeout=30,
                       stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise Fail("vgpu-top %s exited %d: %r" % (args, r.returncode,
                                                   r.stderr))
    return r


def case_escape(w):
    w.hold("evil", [8 * MIB], "64MiB")
    good = w.ledgers()[0]
    d, lay = dump(good), layout()
    data = bytearray(open(good, "rb").read())
    t = lay["tenants"] + d["tenants"]["evil"]["index"] * lay["tenant_size"]
    data[t + lay["name"]:t + lay["name"] + len(HOSTILE_NAME) + 1] = \
        HOSTILE_NAME + b"\0"
    data[lay["uuid"]:lay["uuid"] + len(HOSTILE_UUID) + 1] = \
        HOSTILE_UUID + b"\0"
    hostile = os.path.join(w.root, "hostile")
    os.mkdir(hostile)
    name = HOSTILE_UUID + os.path.basename(good)[len(d["uuid"]):].encode()
    with open(os.path.join(hostile.encode(), name), "wb") as f:
        f.write(data)
    with open(os.path.join(hostile.encode(), HOSTILE_FILE), "wb") as f:
        f.write(b"not a ledger")
    outs = {}
    for mode in ("--once", "--json", "--prometheus"):
        r = run_bytes(["--dir", hostile, mode, "--interval", "0"])
        assert_clean(r.stdout, mode + " stdout")
        assert_clean(r.stderr, mode + " stderr")
        outs[mode] = r
    name_t, uuid_t = text_escaped(HOSTILE_NAME), text_escaped(HOSTILE_UUID)
    check(name_t == "ev\\x1b]0;pwned\\x07il\\x9b\\xc2\\x9bz\u20ac\\\\"
          "\\xe2\\x80\\xae\\xe2\\x80\\x8b\\xe2\\x80\\x8d\\xc2\\xad"
          "\\xf3\\xa0\\x81\\x81\\xef\\xb8\\x8f",
          "the text escape of the name: %s" % name_t)
    skip_t = "skipping '%s/%s': " % (hostile, text_escaped(HOSTILE_FILE))
    for mode, r in outs.items():
        check(r.stderr.decode().count(skip_t) == 1,
              "%s: the skipped file named, escaped" % mode)
    text = outs["--once"].stdout.decode()
    for mode in ("--once", "--prometheus"):
        check(not any(m in outs[mode].stdout.decode() for m in
                      ("\u202e", "\u200b", "\u200d", "\u00ad",
                       "\U000e0041", "\ufe0f")),
              mode + ": no override or invisible mark reaches the "
              "terminal")
    check("GPU %s  memory" % uuid_t in text, "--once: the UUID escaped")
    check("  ev\\x1b]0;pwned  " in text,
          "--once: the name escaped, cut at 16 columns between escapes")
    check(text.count("ev\\x1b]0;pwned") == 2, "--once: tenant and process")
    check("1 file skipped" in text and text_escaped(HOSTILE_FILE) in text,
          "--once: the skipped file's name escaped")
    doc = json.loads(outs["--json"].stdout.decode())
    g = doc["gpus"][0]
    want = ("ev\x1b]0;pwned\x07il\x9b\x9bz\u20ac\\\u202e\u200b\u200d\u00ad"
            "\U000e0041\ufe0f")
    check(g["uuid"] == HOSTILE_UUID.decode(), "JSON: the UUID, \\u escaped")
    check(g["tenants"][0]["name"] == want and
          g["processes"][0]["tenant"] == want,
          "JSON: the name (C1 and stray bytes as U+0080..U+009F): %r" %
          g["tenants"][0]["name"])
    check(doc["skipped_files"][0]["path"].endswith(
        HOSTILE_FILE.decode("latin-1")), "JSON: the skipped path")
    check(b"\\udb40\\udc41" in outs["--json"].stdout,
          "JSON: a tag character as a surrogate pair")
    check(b"\\u001b" in outs["--json"].stdout and
          b"\\u009b" in outs["--json"].stdout, "JSON: \\u00NN escapes")
    s = parse_prom(outs["--prometheus"].stdout.decode())
    label = name_t.replace("\\", "\\\\")
    check(prom_get(s, "vgpu_memory_used_bytes", tenant=label,
                   gpu=uuid_t.replace("\\", "\\\\")) == 8 * MIB,
          "prometheus: tenant and gpu labels escaped as text")


def case_pidns(w):
    held = [w.hold("ns", [4 * MIB], "64MiB") for _ in range(3)]
    (_, apid), (_, bpid), (_, cpid) = held
    path, lay = w.ledgers()[0], layout()
    slots = dump(path)["slots"]
    fd = os.open(path, os.O_RDWR)

    def put(pid, field, value):
        off = (lay["slots"] + slots[pid]["index"] * lay["slot_size"] +
               lay[field])
        os.pwrite(fd, value.to_bytes(4, "little", signed=True), off)

    try:
        put(apid, "pid", 1)
        put(apid, "host_pid", 4242)
        put(bpid, "pid", 1)
        put(bpid, "host_pid", 0)
        doc = json.loads(w.top("--json", "--interval", "0").stdout)
        procs = {p["slot"]: p for p in doc["gpus"][0]["processes"]}
        a, b, c = (procs[slots[p]["index"]] for p in (apid, bpid, cpid))
        check(a["pid"] == 1 and a["host_pid"] == 4242 and
              a["pid_namespace"] == "other" and a["state"] == "alive",
              "JSON: pid 1 with host pid 4242: another namespace")
        check(b["pid"] == 1 and b["host_pid"] is None and
              b["pid_namespace"] == "unknown" and b["state"] == "alive",
              "JSON: pid 1 with no host pid, not ours: unknown")
        check(c["pid"] == cpid and c["pid_namespace"] == "same",
              "JSON: the untouched one: vgpu-top's namespace")
        text = w.top("--once", "--interval", "0").stdout
        check(re.search(r"^  4242\s+1\s+ns\s+alive", text, re.M),
              "--once: PID 4242, NS PID 1")
        check(re.search(r"^  \?\s+1\s+ns\s+alive", text, re.M),
              "--once: PID ?, NS PID 1")
        check(re.search(r"^  %d\s+-\s+ns\s+alive" % cpid, text, re.M),
              "--once: PID %d, NS PID -" % cpid)
        text = w.top("--once", "--interval", "0", "--filter", "4242").stdout
        check(len(re.findall(r"\salive\s", text)) == 1 and "4242" in text,
              "--filter matches the host pid")
        s = parse_prom(w.top("--prometheus").stdout)
        check(prom_get(s, "vgpu_process_alive", pid="1", host_pid="4242")
              == 1, "prometheus: host_pid label where known")
        bare = [k for k in s if k[0] == "vgpu_process_alive" and
                ("pid", "1") in k[1] and
                not any(n == "host_pid" for n, _ in k[1])]
        check(len(bare) == 1, "prometheus: no host_pid label where unknown")
        # A job in another namespace whose pid is that of another job of
        # this ledger here (small container pids collide): that process
        # maps the ledger and is pid in its own namespace, but does not
        # hold the slot's lock, so the pid is not confirmed as ours.
        put(apid, "pid", apid)
        put(apid, "host_pid", 0)
        put(bpid, "pid", cpid)
        doc = json.loads(w.top("--json", "--interval", "0").stdout)
        procs = {p["slot"]: p for p in doc["gpus"][0]["processes"]}
        a, b, c = (procs[slots[p]["index"]] for p in (apid, bpid, cpid))
        check(b["pid"] == cpid and b["pid_namespace"] == "unknown",
              "JSON: a colliding pid of another job is not ours: %s" %
              b["pid_namespace"])
        check(a["pid_namespace"] == "same" and c["pid_namespace"] == "same",
              "JSON: the owners of the pids: vgpu-top's namespace")
        text = w.top("--once", "--interval", "0").stdout
        check(len(re.findall(r"^  %d\s+-\s+ns\s+alive" % cpid, text,
                             re.M)) == 1 and
              re.search(r"^  \?\s+%d\s+ns\s+alive" % cpid, text, re.M),
              "--once: the owner as PID %d, the other as NS PID %d" %
              (cpid, cpid))
        # vgpu-top in a pid namespace of its own that still sees the
        # host's /proc (unshare -p -f without --mount-proc): the pids it
        # reads there are not its namespace's; none is confirmed.
        if os.geteuid() == 0 and shutil.which("unshare"):
            r = subprocess.run(["unshare", "-p", "-f", TOP, "--dir",
                                w.ledger, "--json", "--interval", "0"],
                               capture_output=True, text=True, timeout=30,
                               stdin=subprocess.DEVNULL)
            if r.returncode == 0:
                doc = json.loads(r.stdout)
                ns = [p["pid_namespace"]
                      for p in doc["gpus"][0]["processes"]]
                check("same" not in ns,
                      "in a new pid namespace with the host's /proc, no "
                      "pid confirmed: %s" % ns)
    finally:
        put(apid, "pid", apid)
        put(apid, "host_pid", 0)
        put(bpid, "pid", bpid)
        os.close(fd)
    for p, _ in held:
        w.stop(p)


def case_damaged(w):
    a, apid = w.hold("dmg-a", [4 * MIB], "64MiB")
    b, bpid = w.hold("dmg-b", [4 * MIB])
    good = w.ledgers()[0]
    d, lay = dump(good), layout()
    data = bytearray(open(good, "rb").read())
    top, half = (1 << 64) - 1, 1 << 63

    def put(off, v):
        data[off:off + 8] = v.to_bytes(8, "little")

    def tenant(name):
        return lay["tenants"] + d["tenants"][name]["index"] * \
            lay["tenant_size"]

    def slot(pid):
        return lay["slots"] + d["slots"][pid]["index"] * lay["slot_size"]

    put(tenant("dmg-a") + lay["tenant_used"], top)
    put(tenant("dmg-b") + lay["tenant_used"], half)
    # Process a's kinds sum to 2^64 - 1 exactly; b's past it.
    put(slot(apid) + lay["slot_usage"], half)
    put(slot(apid) + lay["slot_usage"] + 8, half - 1)
    put(slot(bpid) + lay["slot_usage"], half)
    put(slot(bpid) + lay["slot_usage"] + 6 * 8, half)
    bad = os.path.join(w.root, "damaged")
    os.mkdir(bad)
    with open(os.path.join(bad, os.path.basename(good)), "wb") as f:
        f.write(data)
    text = w.top("--once", "--interval", "0", dir=bad).stdout
    check("unlimited" in text.split("TENANT", 1)[0],
          "--once: dmg-b's limit is still 'unlimited' (the GPU line)")
    rows = {l.split()[0]: l for l in text.splitlines()
            if l.startswith("  dmg-")}
    check(re.search(r"16\.0 EiB! / 64\.0 MiB", rows["dmg-a"]),
          "--once: used 2^64 - 1 is a number, marked: %s" % rows["dmg-a"])
    check(re.search(r"8\.0 EiB! / unlimited", rows["dmg-b"]),
          "--once: used 2^63 is a number, marked: %s" % rows["dmg-b"])
    procs = [l for l in text.splitlines()
             if re.match(r"  (\d+|\?)\s+\d+\s+dmg-", l)]
    check(len(procs) == 2 and
          all(re.search(r"\s16\.0 EiB!\s", l) and "unlimited" not in l
              for l in procs),
          "--once: each process's sum stops at 2^64 - 1, marked: %s" % procs)
    check(re.search(r"used 16\.0 EiB!", text),
          "--once: the GPU's sum stops at 2^64 - 1, marked")
    doc = json.loads(w.top("--json", "--interval", "0", dir=bad).stdout)
    g = doc["gpus"][0]
    ts = {t["name"]: t for t in g["tenants"]}
    check(ts["dmg-a"]["memory_used_bytes"] == top and
          ts["dmg-b"]["memory_used_bytes"] == half,
          "JSON: the tenants' used bytes as numbers")
    check(ts["dmg-a"]["memory_limit_bytes"] == 64 * MIB and
          ts["dmg-b"]["memory_limit_bytes"] is None,
          "JSON: limits as before (null: none)")
    check(g["memory_used_bytes"] == top and
          all(p["memory_used_bytes"] == top for p in g["processes"]),
          "JSON: the sums stop at 2^64 - 1")
    raw = w.top("--prometheus", dir=bad).stdout
    s = parse_prom(raw)
    gpu = g["uuid"]
    for name in ("dmg-a", "dmg-b"):
        check(prom_get(s, "vgpu_memory_used_bytes", gpu=gpu, tenant=name)
              == float(ts[name]["memory_used_bytes"]),
              "prometheus: %s's used bytes as JSON has them" % name)
    check(re.search(r'^vgpu_memory_used_bytes\{[^}]*dmg-a"\} '
                    r'18446744073709551615$', raw, re.M) and
          re.search(r'^vgpu_gpu_memory_used_bytes\{[^}]*\} '
                    r'18446744073709551615$', raw, re.M),
          "prometheus: the exact numbers, never +Inf for a usage")
    check(re.search(r'^vgpu_memory_limit_bytes\{[^}]*dmg-b"\} \+Inf$',
                    raw, re.M), "prometheus: an absent limit is still +Inf")
    w.stop(a)
    w.stop(b)


def ctl_set(w, tenant, *args):
    """vgpu-ctl set; returns (its pid, CLOCK_REALTIME before, after)."""
    before = time.time_ns()
    p = subprocess.Popen([CTL, "set", tenant, "--ledger-dir", w.ledger] +
                         list(args), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         stdin=subprocess.DEVNULL)
    out, err = p.communicate(timeout=30)
    if p.returncode != 0:
        raise Fail("vgpu-ctl set %s %s exited %d: %s" %
                   (tenant, " ".join(args), p.returncode, err))
    return p.pid, before, time.time_ns()


def user_of(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


def case_control(w):
    w.hold("ctl-team", [64 * MIB, 32 * MIB], "256MiB",
           VGPU_COMPUTE_LIMIT="30")
    w.hold("calm", [8 * MIB], "64MiB")
    _, t0, t1 = ctl_set(w, "ctl-team", "--memory", "64MiB")
    doc = json.loads(w.top("--json", "--interval", "0").stdout)
    t = {x["name"]: x for x in doc["gpus"][0]["tenants"]}["ctl-team"]
    check(t["memory_limit_bytes"] == 64 * MIB and
          t["memory_used_bytes"] == 96 * MIB and
          t["over_limit_bytes"] == 32 * MIB,
          "JSON: 96 MiB held under a 64 MiB limit: over_limit_bytes 32 MiB")
    check(t["control_changes"] == 1 and
          t["last_change"]["fields"] == ["memory"] and
          t0 <= t["last_change"]["time_unix_ns"] <= t1,
          "JSON: one change, of the memory limit, made just now")
    pid, t0, t1 = ctl_set(w, "ctl-team", "--compute", "40", "--policy",
                          "elastic", "--host-spill", "1GiB")
    uid = os.getuid()
    doc = json.loads(w.top("--json", "--interval", "0").stdout)
    ts = {x["name"]: x for x in doc["gpus"][0]["tenants"]}
    t, calm = ts["ctl-team"], ts["calm"]
    check(t["over_limit_bytes"] == 32 * MIB and
          t["memory_limit_bytes"] == 64 * MIB, "JSON: still over by 32 MiB")
    check(t["compute_share_target_pct"] == 40 and
          t["compute_policy"] == "elastic" and
          t["spill_limit_bytes"] == 1 << 30,
          "JSON: the new terms: 40%, elastic, spill limit 1 GiB")
    last = t["last_change"]
    when = last["time_unix_ns"]
    check(t["control_changes"] == 2 and t0 <= when <= t1,
          "JSON: control_changes 2, the last between the command's start "
          "and end")
    check(last == {"time_unix_ns": when, "uid": uid, "user": user_of(uid),
                   "pid": pid, "host_pid": None,
                   "fields": ["compute", "policy", "host-spill"]},
          "JSON: last_change: uid %d (%s), pid %d, its fields: %s" %
          (uid, user_of(uid), pid, last))
    check(calm["over_limit_bytes"] == 0 and calm["control_changes"] == 0 and
          calm["last_change"] is None,
          "JSON: the tenant never changed: not over, no last change")

    raw = w.top("--prometheus").stdout
    s = parse_prom(raw)
    for name, typ in (("vgpu_tenant_over_limit_bytes", "gauge"),
                      ("vgpu_tenant_control_changes_total", "counter"),
                      ("vgpu_tenant_control_last_change_time_seconds",
                       "gauge"),
                      ("vgpu_tenant_compute_policy", "gauge")):
        check("# TYPE %s %s\n" % (name, typ) in raw, "%s is a %s" %
              (name, typ))
    check(prom_get(s, "vgpu_tenant_over_limit_bytes", tenant="ctl-team") ==
          32 * MIB and prom_get(s, "vgpu_tenant_over_limit_bytes",
                                tenant="calm") == 0,
          "prometheus: over limit by 32 MiB, and 0")
    check(prom_get(s, "vgpu_tenant_control_changes_total",
                   tenant="ctl-team") == 2 and
          prom_get(s, "vgpu_tenant_control_changes_total",
                   tenant="calm") == 0, "prometheus: 2 changes, and 0")
    check(re.search(r'^vgpu_tenant_control_last_change_time_seconds\{[^}]*'
                    r'tenant="ctl-team"\} %d\.%09d$' %
                    (when // 10**9, when % 10**9), raw, re.M) and
          not re.search(r'^vgpu_tenant_control_last_change_time_seconds'
                        r'\{[^}]*tenant="calm"', raw, re.M),
          "prometheus: the last change's time, exactly; none for calm")
    check([prom_get(s, "vgpu_tenant_compute_policy", tenant="ctl-team",
                    policy=p) for p in ("hard", "elastic", "off")] ==
          [0, 1, 0] and prom_get(s, "vgpu_tenant_compute_policy",
                                 tenant="calm", policy="hard") == 1,
          "prometheus: the policies as a state set")
    check(prom_get(s, "vgpu_spill_limit_bytes", tenant="ctl-team") ==
          1 << 30 and prom_get(s, "vgpu_compute_share_target_percent",
                               tenant="ctl-team") == 40,
          "prometheus: the new spill limit and share")

    text = w.top("--once", "--interval", "0").stdout
    lines = text.splitlines()
    head = [l for l in lines if l.startswith("  TENANT")]
    check(len(head) == 1 and re.match(
        r"  TENANT\s+USED / LIMIT\s+OVER LIMIT\s+TARGET\s+SPILLED / LIMIT"
        r"\s+GPU 1s", head[0]), "--once: the tenant columns")
    row = [i for i, l in enumerate(lines) if l.startswith("  ctl-team ")]
    check(len(row) == 1 and re.match(
        r"  ctl-team\s+96\.0 MiB / 64\.0 MiB\s+32\.0 MiB\s+40% elastic\s+"
        r"0 B / 1\.0 GiB\s", lines[row[0]]),
        "--once: used / limit, over limit by 32 MiB, 40%% elastic, "
        "spilled / limit: %s" % lines[row[0]])
    col = head[0].index("OVER LIMIT")
    check(lines[row[0]][col:col + 8] == "32.0 MiB",
          "--once: 32.0 MiB under OVER LIMIT")
    user = user_of(uid)
    want = "    changes 2; the last at %s by uid %d%s pid %d: compute " \
           "policy host-spill" % (
               time.strftime("%Y-%m-%d %H:%M:%S UTC",
                             time.gmtime(when // 10**9)),
               uid, " (%s)" % text_escaped(user.encode()) if user else "",
               pid)
    check(lines[row[0] + 1] == want, "--once: the last change under it: %r"
          % lines[row[0] + 1])
    calm_row = [i for i, l in enumerate(lines) if l.startswith("  calm ")]
    check(len(calm_row) == 1 and
          re.match(r"  calm\s+8\.0 MiB / 64\.0 MiB\s+-\s+-\s+"
                   r"0 B / unlimited\s", lines[calm_row[0]]) and
          "changes" not in lines[calm_row[0] + 1],
          "--once: calm: not over ('-'), no share, no last change: %s" %
          lines[calm_row[0]])
    check(text.count("changes ") == 1, "--once: one last-change line")

    # A suspend and a resume are named as such (a resume read
    # "suspension", as a suspend did). The holders cannot be suspended
    # (no VGPU_CONTROL), which vgpu-ctl says; the change is recorded.
    for cmd, want in (("suspend", True), ("resume", False)):
        subprocess.run([CTL, cmd, "calm", "--ledger-dir", w.ledger,
                        "--wait", "0"], stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        doc = json.loads(w.top("--json", "--interval", "0").stdout)
        calm = {x["name"]: x for x in doc["gpus"][0]["tenants"]}["calm"]
        check(calm["suspended"] is want and
              calm["last_change"]["fields"] == [cmd],
              "JSON: after %s, fields %s" % (cmd, calm["last_change"]))
        lines = w.top("--once", "--interval", "0").stdout.splitlines()
        row = [i for i, l in enumerate(lines) if l.startswith("  calm ")]
        check(len(row) == 1, "--once: calm's row")
        nxt = row[0] + 1
        if want:
            # Nothing could move (no VGPU_CONTROL): it says so.
            check(lines[nxt] == "    SUSPENDED by vgpu-ctl: 0 of 1 live "
                  "processes hold their launches; 8.0 MiB charged on the "
                  "device, "
                  "0 B on the host", "--once: %r" % lines[nxt])
            nxt += 1
        check(lines[nxt].endswith(": " + cmd),
              "--once: after %s: %r" % (cmd, lines[nxt]))
    for p in list(w.procs):
        w.stop(p)


CASES = {"json": case_json, "prometheus": case_prometheus,
         "states": case_states, "compute": case_compute,
         "spilled": case_spilled, "gpus": case_gpus, "empty": case_empty,
         "bad-files": case_bad_files, "args": case_args, "live": case_live,
         "escape": case_escape, "pidns": case_pidns,
         "damaged": case_damaged, "control": case_control}


def main():
    w = World()
    try:
        rc = CASES[sys.argv[1]](w) or 0
    except Fail as e:
        print("FAIL: %s" % e)
        rc = 1
    finally:
        w.close()
    sys.exit(rc)


if __name__ == "__main__":
    main()
