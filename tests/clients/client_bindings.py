"""cuda-bindings (cuda.bindings.driver), as a new user would: device
queries, allocation to the slice and past it, copies checked byte for byte,
the project's kernels loaded and vgpu_saxpy launched and checked.

Environment (from clients.py): CLIENT_TOTAL, the bytes the device must
report; CLIENT_FATBIN, the project's kernels. Prints "ok NAME" per check and
exits 1 at the first that fails."""
import ctypes
import os
import struct
import sys

from cuda.bindings import driver as d


def call(r):
    """The value(s) of a driver call, asserting CUDA_SUCCESS."""
    err, rest = r[0], r[1:]
    if err != d.CUresult.CUDA_SUCCESS:
        raise SystemExit("FAIL: %s" % err)
    return rest[0] if len(rest) == 1 else rest


def ok(name, cond, detail=""):
    if not cond:
        print("FAIL %s %s" % (name, detail))
        sys.exit(1)
    print("ok %s" % name)


total_want = int(os.environ["CLIENT_TOTAL"])
call(d.cuInit(0))
n = call(d.cuDeviceGetCount())
ok("device-count", n >= 1, n)
dev = call(d.cuDeviceGet(0))
ok("total-mem", call(d.cuDeviceTotalMem(dev)) == total_want,
   call(d.cuDeviceTotalMem(dev)))
ctx = call(d.cuDevicePrimaryCtxRetain(dev))
call(d.cuCtxSetCurrent(ctx))
free, total = call(d.cuMemGetInfo())
ok("mem-info", total == total_want and 0 < free <= total, (free, total))

# Past what is free: a clean out-of-memory error, nothing charged.
r = d.cuMemAlloc(free + (64 << 20))
ok("past-the-slice", r[0] == d.CUresult.CUDA_ERROR_OUT_OF_MEMORY, r[0])
ok("nothing-charged", call(d.cuMemGetInfo())[0] == free)

# Up to what is free, in 32 MiB buffers, then one more fails.
bufs, chunk = [], 32 << 20
while True:
    r = d.cuMemAlloc(chunk)
    if r[0] != d.CUresult.CUDA_SUCCESS:
        break
    bufs.append(r[1])
ok("to-the-slice", r[0] == d.CUresult.CUDA_ERROR_OUT_OF_MEMORY and
   len(bufs) == free // chunk, (r[0], len(bufs), free // chunk))
for b in bufs:
    call(d.cuMemFree(b))
ok("freed", call(d.cuMemGetInfo())[0] == free)

# A copy there and back, byte for byte.
size = 4 << 20
src = os.urandom(size)
dst = bytearray(size)
p = call(d.cuMemAlloc(size))
call(d.cuMemcpyHtoD(p, src, size))
call(d.cuMemcpyDtoH(dst, p, size))
ok("copy", bytes(dst) == src)
call(d.cuMemFree(p))

# The project's kernels: y = 2 x + y over 1 Mi floats.
with open(os.environ["CLIENT_FATBIN"], "rb") as f:
    image = f.read()
mod = call(d.cuModuleLoadData(image))
fn = call(d.cuModuleGetFunction(mod, b"vgpu_saxpy"))
count = 1 << 20
xs = struct.pack("%df" % count, *[float(i % 97) for i in range(count)])
ys = struct.pack("%df" % count, *[1.0] * count)
x = call(d.cuMemAlloc(count * 4))
y = call(d.cuMemAlloc(count * 4))
call(d.cuMemcpyHtoD(x, xs, count * 4))
call(d.cuMemcpyHtoD(y, ys, count * 4))
args = [ctypes.c_ulonglong(count), ctypes.c_float(2.0),
        ctypes.c_void_p(int(x)), ctypes.c_void_p(int(y))]
ptrs = (ctypes.c_void_p * 4)(*[ctypes.addressof(a) for a in args])
call(d.cuLaunchKernel(fn, 256, 1, 1, 256, 1, 1, 0, 0,
                      ctypes.addressof(ptrs), 0))
call(d.cuCtxSynchronize())
out = bytearray(count * 4)
call(d.cuMemcpyDtoH(out, y, count * 4))
got = struct.unpack("%df" % count, bytes(out))
ok("saxpy", all(got[i] == 2.0 * (i % 97) + 1.0 for i in range(count)))
call(d.cuMemFree(x))
call(d.cuMemFree(y))
call(d.cuModuleUnload(mod))
call(d.cuDevicePrimaryCtxRelease(dev))
