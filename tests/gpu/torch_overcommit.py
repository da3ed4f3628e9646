"""A PyTorch training step whose working set is 1.5x a 4 GiB slice, under
VGPU_OVERCOMMIT (set by tests/gpu/check.sh): it must complete. Prints the
step time."""
import time

import torch

GiB = 1 << 30
# About 6 GiB: a 24576 x 24576 fp32 weight (2.25 GiB), its gradient and the
# SGD momentum buffer, plus activations.
torch.manual_seed(0)
w = torch.nn.Parameter(torch.randn(24576, 24576, device="cuda") * 1e-3)
opt = torch.optim.SGD([w], lr=1e-3, momentum=0.9)
x = torch.randn(2048, 24576, device="cuda")
t0 = time.perf_counter()
for _ in range(2):
    opt.zero_grad()
    (x @ w).square().mean().backward()
    opt.step()
torch.cuda.synchronize()
print("steps done in %.2f s; allocated %.2f GiB (slice 4 GiB)" %
      (time.perf_counter() - t0, torch.cuda.max_memory_allocated() / GiB))
