"""The device memory a process holds, from NVML's process list, through
ctypes (no pynvml needed on the GPU machine). None when NVML cannot say.

The shim exports NVML's memory views too: the process list is not one of
them, so this is the driver's own count.
"""
import ctypes


class _Proc(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint),
                ("computeInstanceId", ctypes.c_uint)]


def process_used(pid, index=0):
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    dev = ctypes.c_void_p()
    if nvml.nvmlInit_v2() != 0 or \
            nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(dev)) != 0:
        return None
    procs = (_Proc * 256)()
    n = ctypes.c_uint(256)
    fn = getattr(nvml, "nvmlDeviceGetComputeRunningProcesses_v3", None)
    if fn is None or fn(dev, ctypes.byref(n), procs) != 0:
        return None
    for i in range(n.value):
        if procs[i].pid == pid:
            return procs[i].usedGpuMemory
    return None
