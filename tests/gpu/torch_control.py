"""vgpu-ctl on a PyTorch training job, on a real GPU: run by tests/gpu/check.sh
as `python3 tests/gpu/torch_control.py BUILD_DIR`.

A small deterministic training loop runs twice under libvgpu
(VGPU_CONTROL=1): once undisturbed (the reference losses), once while this
script changes it from outside with vgpu-ctl:

  1. its compute share set to 30% and then to 60%: the step rate under 60%
     must be above the one under 30%;
  2. suspended: no step is made for 2 s, and its memory on the GPU (as
     nvidia-smi reports the process) falls by at least 3/4 of the model's
     and batch's bytes;
  3. resumed: it goes on, and every loss of the run equals the reference
     run's (the loss curve continues where it stopped).

Prints one PASS/FAIL line per check; exits non-zero on a failure.
"""
import os
import subprocess
import sys
import tempfile
import time

STEPS = 400
failed = 0


def check(name, ok, detail=""):
    global failed
    print("%s %s %s" % ("PASS" if ok else "FAIL", name, detail), flush=True)
    if not ok:
        failed = 1


def train():
    import torch

    torch.manual_seed(0)
    torch.backends.cudnn.deterministic = True
    torch.backends.cuda.matmul.allow_tf32 = False
    model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
                                torch.nn.Linear(4096, 4096)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(1024, 4096, device="cuda")
    y = torch.randn(1024, 4096, device="cuda")
    print("ready %d" % os.getpid(), flush=True)
    for i in range(STEPS):
        opt.zero_grad()
        loss = (model(x) - y).square().mean()
        loss.backward()
        opt.step()
        print("step %d %.9e %.6f" % (i, loss.item(), time.monotonic()),
              flush=True)


def gpu_mib(pid):
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                          "--format=csv,noheader,nounits"],
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        p, _, m = line.partition(",")
        if p.strip() == str(pid):
            return int(m)
    return 0


def run(build, env, control):
    """Starts a training run; control(proc, lines) drives it. Returns the
    losses by step."""
    shim = os.path.join(build, "intercept", "libvgpu.so")
    e = dict(os.environ, LD_PRELOAD=shim, VGPU_CONTROL="1", **env)
    p = subprocess.Popen([sys.executable, __file__, "--train"], env=e,
                         stdout=subprocess.PIPE, text=True)
    lines = []

    def next_line():
        line = p.stdout.readline()
        if line:
            lines.append(line.split())
        return line

    assert next_line().startswith("ready")
    control(p, next_line)
    while next_line():
        pass
    p.wait()
    check("train-exit-%s" % env.get("VGPU_TENANT", "?"), p.returncode == 0,
          "status %d" % p.returncode)
    return {int(f[1]): f[2] for f in lines if f[0] == "step"}, lines


def rate(next_line, n):
    t = []
    for _ in range(n):
        f = next_line().split()
        t.append(float(f[3]))
    return (n - 1) / (t[-1] - t[0])


def main():
    build = sys.argv[1]
    ctl = os.path.join(build, "tools", "vgpu-ctl")
    d = tempfile.mkdtemp(prefix="vgpu-gpu-ctl-")
    env = {"VGPU_LEDGER_DIR": d, "VGPU_TENANT": "ref"}
    ref, _ = run(build, env, lambda p, nl: None)

    def drive(p, nl):
        for _ in range(20):
            nl()
        cmd = [ctl, "set", "train", "--ledger-dir", d, "--compute"]
        subprocess.run(cmd + ["30"], check=True)
        nl()
        r30 = rate(nl, 30)
        subprocess.run(cmd + ["60"], check=True)
        nl()
        r60 = rate(nl, 30)
        subprocess.run(cmd + ["100"], check=True)
        check("resize-30-60", r60 > r30 * 1.3,
              "steps/s at 30%%: %.1f, at 60%%: %.1f" % (r30, r60))
        before = gpu_mib(p.pid)
        s = subprocess.run([ctl, "suspend", "train", "--ledger-dir", d],
                           capture_output=True, text=True)
        check("suspend", s.returncode == 0, s.stdout.strip() + s.stderr)
        after = gpu_mib(p.pid)
        # model 2 x 64 MiB, grads and batch: about 512 MiB movable
        check("suspend-frees-gpu", before - after >= 384,
              "nvidia-smi: %d MiB before, %d MiB suspended" % (before, after))
        import select
        r, _, _ = select.select([p.stdout], [], [], 2.0)
        check("suspend-holds", not r, "a step was made while suspended")
        s = subprocess.run([ctl, "resume", "train", "--ledger-dir", d],
                           capture_output=True, text=True)
        check("resume", s.returncode == 0, s.stdout.strip() + s.stderr)
        check("resume-gpu-back", gpu_mib(p.pid) >= before - 64,
              "nvidia-smi: %d MiB" % gpu_mib(p.pid))

    env = {"VGPU_LEDGER_DIR": d, "VGPU_TENANT": "train"}
    got, _ = run(build, env, drive)
    same = [i for i in range(STEPS) if got.get(i) == ref.get(i)]
    check("loss-curve-continues", len(same) == STEPS,
          "%d of %d losses equal the undisturbed run's" % (len(same), STEPS))
    return failed


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--train":
        train()
    else:
        sys.exit(main())
