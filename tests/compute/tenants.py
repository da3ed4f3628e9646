#!/usr/bin/env python3
"""Two tenants on one simulated GPU, through the shim.

usage: tenants.py SHARE_BINARY split|elastic

split:   tenants at 30% and 70% (hard caps) saturating one device with
         10 ms kernels for 3 s: each within 3 points of its cap.
elastic: a 30% elastic tenant alone gets more than 90%; 1.5 s in, a 70%
         tenant arrives, and from 200 ms after that the elastic tenant is
         back at its share (every 100 ms window within 5 points of 30%,
         their mean within 3).
spatial: VGPU_COMPUTE_MODE=spatial, 25% and 50% tenants on one device
         of 128 SMs at once, each on a green context of its share: their
         throughput (kernels x nominal length / wall) within 3 points of
         25 and 50, and a message saying which green context each got.
The environment (LD_PRELOAD, VGPU_REAL_LIBCUDA) comes from meson.
"""
import os
import re
import subprocess
import sys
import tempfile
import time


def start(share, d, tenant, cap, seconds, policy="hard", windows=False,
          us=1000, extra=None):
    env = dict(os.environ, VGPU_SIM_STATE_DIR=d,
               VGPU_LEDGER_DIR=os.path.join(d, "ledger"), VGPU_TENANT=tenant,
               VGPU_COMPUTE_LIMIT=str(cap), VGPU_COMPUTE_POLICY=policy,
               VGPU_CONTEXT_OVERHEAD="0", **(extra or {}))
    args = [share, "--kernel-us", str(us), "--seconds", str(seconds),
            "--style", "async"]
    if windows:
        args += ["--window-ms", "100"]
    return subprocess.Popen(args, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def achieved(out):
    return float(re.search(r"achieved ([0-9.]+)%", out).group(1))


def main():
    share, mode = sys.argv[1], sys.argv[2]
    d = tempfile.mkdtemp(prefix="vgpu-tenants-")
    failed = False
    if mode == "spatial":
        extra = dict(VGPU_COMPUTE_MODE="spatial", VGPU_SIM_SM_COUNT="128",
                     VGPU_LOG_LEVEL="info")
        a = start(share, d, "a", 25, 3, extra=extra)
        b = start(share, d, "b", 50, 3, extra=extra)
        for name, p, cap, sms in (("a", a, 25, 32), ("b", b, 50, 64)):
            out = p.communicate(timeout=60)[0]
            got = float(re.search(r"throughput ([0-9.]+)%", out).group(1))
            green = "a green context of %d of 128 SMs" % sms in out
            ok = abs(got - cap) <= 3 and green
            failed |= not ok
            print("%s tenant %s spatial at %d%%: throughput %.2f%%, %s" %
                  ("PASS" if ok else "FAIL", name, cap, got,
                   "on a green context of %d SMs" % sms if green
                   else "no green context"))
    elif mode == "split":
        a = start(share, d, "a", 30, 3, us=10000)
        b = start(share, d, "b", 70, 3, us=10000)
        for name, p, cap in (("a", a, 30), ("b", b, 70)):
            out = p.communicate(timeout=60)[0]
            got = achieved(out)
            ok = abs(got - cap) <= 3
            failed |= not ok
            print("%s tenant %s at %d%%: achieved %.2f%%" %
                  ("PASS" if ok else "FAIL", name, cap, got))
    else:
        a = start(share, d, "a", 30, 3, policy="elastic", windows=True)
        time.sleep(1.5)
        b_start = time.clock_gettime(time.CLOCK_MONOTONIC) * 1e3
        b = start(share, d, "b", 70, 1.5)
        b.communicate(timeout=60)
        out = a.communicate(timeout=60)[0]
        wins = [(float(m.group(1)), float(m.group(2))) for m in
                re.finditer(r"window ([0-9.]+) ([0-9.]+)", out)]
        alone = [s for t, s in wins if t + 100 <= b_start - 100]
        after = [s for t, s in wins if t >= b_start + 200 and
                 t + 100 <= b_start + 1400]
        ok_alone = bool(alone) and min(alone) > 90
        mean = sum(after) / len(after) if after else 0
        ok_after = bool(after) and abs(mean - 30) <= 3 and \
            all(abs(s - 30) <= 5 for s in after)
        failed = not (ok_alone and ok_after)
        print("%s alone: windows %s" % ("PASS" if ok_alone else "FAIL",
                                        " ".join("%.0f" % s for s in alone)))
        print("%s with a competitor, from 200 ms after it arrived: mean "
              "%.2f%%, windows %s" % ("PASS" if ok_after else "FAIL", mean,
                                     " ".join("%.0f" % s for s in after)))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
