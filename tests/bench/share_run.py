"""One `share` process (tests/compute/share.c) under the shim on the
simulated GPU of a state directory: what the benchmarks that run tenants
side by side start (opp-bench.py, tenants-bench.py)."""
import os
import subprocess


def share(build, d, tenant, us, seconds, style, cap=None, policy=None):
    """Starts `share` as tenant `tenant` on the device of state directory d
    (its ledger in d/ledger): kernels of `us` microseconds for `seconds`,
    launched in `style`. cap: VGPU_COMPUTE_LIMIT (None: unset); policy:
    VGPU_COMPUTE_POLICY (None: unset). Returns the Popen, its output
    piped."""
    env = dict(os.environ, VGPU_SIM_STATE_DIR=d,
               VGPU_LEDGER_DIR=os.path.join(d, "ledger"), VGPU_TENANT=tenant,
               VGPU_CONTEXT_OVERHEAD="0",
               LD_PRELOAD=os.path.join(build, "intercept", "libvgpu.so"),
               VGPU_REAL_LIBCUDA=os.path.join(build, "sim", "libcuda.so.1"))
    env.pop("VGPU_COMPUTE_LIMIT", None)
    env.pop("VGPU_COMPUTE_POLICY", None)
    if cap is not None:
        env["VGPU_COMPUTE_LIMIT"] = str(cap)
    if policy:
        env["VGPU_COMPUTE_POLICY"] = policy
    return subprocess.Popen(
        [os.path.join(build, "tests", "gpu", "share"), "--kernel-us",
         str(us), "--seconds", str(seconds), "--style", style], env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
