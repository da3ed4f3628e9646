#!/usr/bin/env python3
"""Real clients of the driver API and NVML, on the simulated GPU.

usage: clients.py BUILD_DIR HOLDER CLIENT MODE

CLIENT: bindings (cuda-bindings), core (cuda-core), numba (numba-cuda),
nvml (nvidia-ml-py), gpustat. MODE: plain (no shim: the simulator is the
driver), preload (LD_PRELOAD=libvgpu.so, a 512 MiB slice) or run
(vgpu-run --sim --memory 512MiB). HOLDER: tools-holder, which holds 64 MiB
in the same tenant while the client runs, so that NVML's views have a
process and a charge to show.

The clients come from PyPI at the versions of requirements.txt, into a
virtual environment in BUILD_DIR/tests/clients/venv made by the first test
that needs it (under a lock). When it cannot be made (no network, no
venv module), the test says why and exits 77: meson counts it as skipped,
by name, never as passed.
"""
import fcntl
import hashlib
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
MIB = 1 << 20
SIM_MEMORY = 2048 * MIB
SLICE = 512 * MIB
HELD = 64 * MIB


def skip(why):
    print("SKIP: %s" % why)
    sys.exit(77)


def venv(build):
    """The clients' virtual environment, made once per requirements.txt."""
    d = os.path.join(build, "tests", "clients", "venv")
    req = os.path.join(HERE, "requirements.txt")
    with open(req, "rb") as f:
        want = hashlib.sha256(f.read()).hexdigest()
    os.makedirs(os.path.dirname(d), exist_ok=True)
    with open(d + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stamp = os.path.join(d, "requirements.sha256")
        if os.path.exists(stamp) and open(stamp).read() == want:
            return os.path.join(d, "bin", "python")
        r = subprocess.run([sys.executable, "-m", "venv", "--clear", d],
                           capture_output=True, text=True)
        if r.returncode:
            skip("cannot make a virtual environment with %s -m venv "
                 "(install python3-venv): %s" %
                 (sys.executable, r.stderr.strip().splitlines()[-1:]))
        r = subprocess.run([os.path.join(d, "bin", "pip"), "install", "-q",
                            "--disable-pip-version-check", "--timeout", "30",
                            "-r", req], capture_output=True, text=True)
        if r.returncode:
            last = (r.stderr.strip() or r.stdout.strip()).splitlines()[-1:]
            skip("cannot install the clients from PyPI "
                 "(requirements.txt): %s" % " ".join(last))
        with open(stamp, "w") as f:
            f.write(want)
    return os.path.join(d, "bin", "python")


def main():
    build, holder_bin, client, mode = sys.argv[1:5]
    build = os.path.abspath(build)
    py = venv(build)
    sim_dir = os.path.join(build, "sim")
    shim = os.path.join(build, "intercept", "libvgpu.so")
    tmp = tempfile.mkdtemp(prefix="vgpu-clients-")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("VGPU_", "CUDA_", "LD_PRELOAD"))}
    env.update(VGPU_SIM_STATE_DIR=os.path.join(tmp, "sim"),
               VGPU_SIM_MEMORY=str(SIM_MEMORY),
               VGPU_LEDGER_DIR=os.path.join(tmp, "ledger"),
               # the simulator's NVML plays the real one in every mode
               LD_LIBRARY_PATH=sim_dir,
               CLIENT_FATBIN=os.path.join(build, "kernels",
                                          "vgpu_kernels.fatbin"),
               CLIENT_HOLDER_BYTES=str(HELD),
               # each context is charged 64 MiB (the holder's and the
               # client's), so that both fit a 512 MiB slice with room
               VGPU_CONTEXT_OVERHEAD="64MiB",
               NUMBA_CUDA_DRIVER=os.path.join(sim_dir, "libcuda.so.1"))
    prefix = []
    if mode == "plain":
        env["CLIENT_TOTAL"] = str(SIM_MEMORY)
    elif mode == "preload":
        env.update(LD_PRELOAD=shim, VGPU_REAL_LIBCUDA=os.path.join(
            sim_dir, "libcuda.so.1"), VGPU_MEMORY_LIMIT="512MiB",
            VGPU_TENANT="clients", CLIENT_TOTAL=str(SLICE), CLIENT_SLICE="1")
        env.pop("NUMBA_CUDA_DRIVER")	# numba opens libcuda.so.1: the shim
    elif mode == "run":
        prefix = [os.path.join(build, "tools", "vgpu-run"), "--sim",
                  "--memory", "512MiB", "--tenant", "clients", "--"]
        env.update(CLIENT_TOTAL=str(SLICE), CLIENT_SLICE="1")
        env.pop("NUMBA_CUDA_DRIVER")
    else:
        sys.exit("unknown mode %r" % mode)

    holder = subprocess.Popen(prefix + [holder_bin, str(HELD)], env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    line = holder.stdout.readline()
    if not line.startswith("ready"):
        sys.exit("the holder did not start: %r" % line)
    env["CLIENT_HOLDER_PID"] = line.split()[1]
    if client == "gpustat":
        args = [py, os.path.join(HERE, "client_gpustat.py")]
    else:
        args = [py, os.path.join(HERE, "client_%s.py" % client)]
    r = subprocess.run(prefix + args, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=240)
    holder.stdin.close()
    holder.wait(timeout=30)
    print(r.stdout, end="")
    print("%s %s: %s" % (client, mode, "PASS" if r.returncode == 0 else
                         "FAIL (exit %d)" % r.returncode))
    sys.exit(0 if r.returncode == 0 else 1)


if __name__ == "__main__":
    main()
