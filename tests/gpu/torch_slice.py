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
elif mode == "expandable":
    # PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True maps VMM handles and
    # releases them at once: the slice must still stop it, and the device
    # (the driver's own count, through NVML's process list) must not hold
    # more than the slice.
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import pynvml_lite
    held = []
    try:
        for _ in range(64):
            held.append(torch.empty(256 << 20, dtype=torch.uint8,
                                    device="cuda"))
        check("expandable-oom", False, "16 GiB allocated in a 4 GiB slice")
    except torch.OutOfMemoryError:
        check("expandable-oom", True, "%d x 256 MiB" % len(held))
    used = pynvml_lite.process_used(os.getpid())
    check("expandable-device-held", used is None or used <= 4 * GiB + GiB,
          "NVML: this process holds %s bytes" % used)
    reserved = torch.cuda.memory_reserved()
    check("expandable-reserved", reserved <= 4 * GiB,
          "torch reserved %d bytes" % reserved)
    sys.exit(failed)
else:
    print("steps/s %.2f" % train_steps(int(mode)))
