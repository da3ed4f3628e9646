"""A PyTorch matmul loop for a fixed time; prints its throughput.

usage: torch_matmul.py SECONDS   (run by tests/gpu/check.sh, two at once
under different compute shares, to compare their throughputs)
"""
import sys
import time

import torch

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 10
a = torch.randn(4096, 4096, device="cuda")
b = torch.randn(4096, 4096, device="cuda")
for _ in range(3):
    a @ b
torch.cuda.synchronize()
n, t0 = 0, time.perf_counter()
while time.perf_counter() - t0 < seconds:
    for _ in range(8):
        a @ b
    n += 8
    torch.cuda.synchronize()
dt = time.perf_counter() - t0
print("matmuls/s %.1f" % (n / dt))
