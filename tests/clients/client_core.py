"""cuda-core, as a new user would: the device, its default memory resource
(a stream-ordered pool) and a VirtualMemoryResource with its default
(POSIX file-descriptor) handles, allocation to the slice and past it,
copies checked byte for byte, the project's kernels loaded with ObjectCode
and vgpu_saxpy launched with cuda.core's launch().

Environment: CLIENT_TOTAL, CLIENT_FATBIN (clients.py). Prints "ok NAME"
per check; exits 1 at the first that fails."""
import ctypes
import os
import struct
import sys

from cuda.bindings import driver as d
from cuda.core import (Device, LaunchConfig, ObjectCode,
                       VirtualMemoryResource, launch)


def ok(name, cond, detail=""):
    if not cond:
        print("FAIL %s %s" % (name, detail))
        sys.exit(1)
    print("ok %s" % name)


def mem_info():
    err, free, total = d.cuMemGetInfo()
    assert err == d.CUresult.CUDA_SUCCESS, err
    return free, total


def roundtrip(buf, size):
    """Bytes written to buf through the driver come back unchanged."""
    src = os.urandom(size)
    dst = bytearray(size)
    assert d.cuMemcpyHtoD(int(buf.handle), src, size)[0] == 0
    assert d.cuMemcpyDtoH(dst, int(buf.handle), size)[0] == 0
    return bytes(dst) == src


total_want = int(os.environ["CLIENT_TOTAL"])
dev = Device(0)
dev.set_current()
stream = dev.create_stream()
free, total = mem_info()
ok("mem-info", total == total_want, (free, total))

buf = dev.allocate(4 << 20, stream=stream)
stream.sync()
ok("pool-allocate", buf.size == 4 << 20)
ok("pool-copy", roundtrip(buf, 4 << 20))
buf.close(stream)
stream.sync()

try:
    big = dev.allocate(total + (64 << 20), stream=stream)
    stream.sync()
    ok("pool-past-the-slice", False, "allocated %d" % big.size)
except Exception as e:  # cuda.core raises CUDAError
    ok("pool-past-the-slice", "OUT_OF_MEMORY" in str(e), e)

vmr = VirtualMemoryResource(dev)
vbuf = vmr.allocate(8 << 20)
ok("vmm-allocate", vbuf.size >= 8 << 20)
ok("vmm-copy", roundtrip(vbuf, 8 << 20))
vbuf.close()
try:
    vmr.allocate(total + (64 << 20))
    ok("vmm-past-the-slice", False)
except Exception as e:
    ok("vmm-past-the-slice", "OUT_OF_MEMORY" in str(e), e)

with open(os.environ["CLIENT_FATBIN"], "rb") as f:
    code = ObjectCode.from_fatbin(f.read())
kernel = code.get_kernel("vgpu_saxpy")
count = 1 << 18
x = dev.allocate(count * 4, stream=stream)
y = dev.allocate(count * 4, stream=stream)
stream.sync()
xs = struct.pack("%df" % count, *[float(i % 31) for i in range(count)])
ys = struct.pack("%df" % count, *[0.5] * count)
assert d.cuMemcpyHtoD(int(x.handle), xs, count * 4)[0] == 0
assert d.cuMemcpyHtoD(int(y.handle), ys, count * 4)[0] == 0
launch(stream, LaunchConfig(grid=128, block=256), kernel,
       ctypes.c_ulonglong(count), ctypes.c_float(3.0), x, y)
stream.sync()
out = bytearray(count * 4)
assert d.cuMemcpyDtoH(out, int(y.handle), count * 4)[0] == 0
got = struct.unpack("%df" % count, bytes(out))
ok("saxpy", all(got[i] == 3.0 * (i % 31) + 0.5 for i in range(count)))
x.close(stream)
y.close(stream)
stream.sync()
