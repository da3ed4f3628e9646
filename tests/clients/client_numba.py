"""numba-cuda, as a new user would: the device and its memory info, device
arrays to the slice and past it (a clean out-of-memory error), copies
checked element for element.

Kernels written with @cuda.jit are not run here: the simulated GPU runs
only kernels it has a host form for (the project's), and says so for any
other (docs/simulator.md).

Environment: CLIENT_TOTAL (clients.py). Prints "ok NAME" per check; exits
1 at the first that fails."""
import os
import sys

import numpy as np
from numba import cuda
from numba.cuda.cudadrv.driver import CudaAPIError


def ok(name, cond, detail=""):
    if not cond:
        print("FAIL %s %s" % (name, detail))
        sys.exit(1)
    print("ok %s" % name)


total_want = int(os.environ["CLIENT_TOTAL"])
ok("detect", cuda.is_available())
ctx = cuda.current_context()
free, total = ctx.get_memory_info()
ok("mem-info", total == total_want and 0 < free <= total, (free, total))

a = np.arange(1 << 20, dtype=np.float32)
da = cuda.to_device(a)
ok("copy", np.array_equal(da.copy_to_host(), a))
del da

try:
    cuda.device_array(free // 4 + (64 << 20), dtype=np.float32)
    ok("past-the-slice", False)
except CudaAPIError as e:
    ok("past-the-slice", "OUT_OF_MEMORY" in str(e) or e.code == 2, e)
