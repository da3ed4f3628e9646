"""PyTorch under a libvgpu slice: run by tests/gpu/check.sh with
LD_PRELOAD=libvgpu.so and VGPU_MEMORY_LIMIT=4GiB.

Checks that torch sees the slice as the device's memory, that allocating
past it raises torch.OutOfMemoryError and the process carries on, and
prints the speed of a small training loop (run once with and once without
the shim by check.sh). Prints one line per result; exits non-zero on a
failed check.
"""
import os
import sys
import time

import torch

GiB = 1 << 30
mode = sys.argv[1] if len(sys.argv) > 1 else "check"
failed = 0


def check(name, ok, detail=""):
    global failed
    print("%s %s %s" % ("PASS" if ok else "FAIL", name, detail))
    if not ok:
        failed = 1


def train_steps(n):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
                                torch.nn.Linear(4096, 4096)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(256, 4096, device="cuda")
    for _ in range(5):
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
    torch.cuda.synchronize()
    return n / (time.perf_counter() - t0)


if mode == "check":
    free, total = torch.cuda.mem_get_info()
    want = int(os.environ.get("EXPECT_TOTAL", 4 * GiB))
    check("mem_get_info-total", total == want,
          "total=%d free=%d expected total %d" % (total, free, want))
    try:
        big = torch.empty(5 * GiB, dtype=torch.uint8, device="cuda")
        check("oom-past-slice", False, "5 GiB allocated in a 4 GiB slice")
        del big
    except torch.OutOfMemoryError as e:
        check("oom-past-slice", True, str(e).splitlines()[0][:120])
    torch.cuda.empty_cache()
    try:
        ok = torch.ones(GiB // 4, device="cuda").sum().item() == GiB // 4
        check("carries-on", ok, "1 GiB tensor after the OOM")
    except Exception as e:  # noqa: BLE001 - any failure is the finding
        check("carries-on", False, repr(e))
    sys.exit(failed)
else:
    print("steps/s %.2f" % train_steps(int(mode)))
