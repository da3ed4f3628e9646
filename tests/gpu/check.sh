#!/usr/bin/env bash
# tests/gpu/check.sh - the GPU check, on a machine with an NVIDIA GPU: builds
# the kernels, the shim and the programs that run on the real driver (no
# simulator, no Criterion needed), then runs the kernels' agreement check
# (CUDA forms against host forms), the demo job alone and under a slice, the
# shim's checks on the real driver, PyTorch under a 4 GiB slice, and a trace
# of the entry points the CUDA runtime asks the shim for. Prints one report
# and exits non-zero when a check failed.
#
# Packages the GPU machine lacks (libelf) come from .deps/, made by
# tests/gpu/fetch-deps.sh on a machine with Debian's archive.
set -u
cd "$(dirname "$0")/../.."
build=${BUILD_DIR:-build-gpu}
report=()
failed=0

step() {
	local name=$1
	shift
	local out
	if out=$("$@" 2>&1); then
		report+=("PASS $name")
	else
		report+=("FAIL $name")
		failed=1
	fi
	printf '%s\n' "$out" | sed "s/^/  [$name] /"
}

args=(-Dsim=false -Dtests=disabled -Dkernels=enabled)
if [ -d .deps/usr/include ]; then
	args+=("-Dc_args=-I$PWD/.deps/usr/include")
	libdir=$PWD/.deps/usr/lib/x86_64-linux-gnu
	export PKG_CONFIG_LIBDIR=$libdir/pkgconfig PKG_CONFIG_SYSROOT_DIR=$PWD/.deps
	export LIBRARY_PATH=$libdir${LIBRARY_PATH:+:$LIBRARY_PATH}
	export LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
[ -f "$build/build.ninja" ] || step configure meson setup "$build" "${args[@]}"
step build ninja -C "$build"
step gpu nvidia-smi -L
step kernels-agree "$build/tests/gpu/vgpu-kernels-agree"
step demo "$build/tools/vgpu-demo" --seconds 2

# The shim on the real driver.
shim=$PWD/$build/intercept/libvgpu.so
export VGPU_LEDGER_DIR=$(mktemp -d)/ledger
step shim-needs-only-libc sh -c "readelf -d $shim | grep NEEDED; ! readelf -d $shim | grep NEEDED | grep -v -e 'libc.so.6' -e 'ld-linux'"
step shim-demo-2GiB env LD_PRELOAD=$shim VGPU_MEMORY_LIMIT=2GiB \
	"$build/tools/vgpu-demo" --seconds 1 --memory 1GiB
step shim-demo-past-slice sh -c "! LD_PRELOAD=$shim VGPU_MEMORY_LIMIT=2GiB $build/tools/vgpu-demo --seconds 1 --memory 3GiB"
step shim-real-driver env LD_PRELOAD=$shim "$build/tests/gpu/vgpu-shim-real"
step lifetimes env LD_PRELOAD=$shim "$build/tests/gpu/vgpu-lifetimes-real"
if python3 -c 'import torch' 2>/dev/null; then
	step torch-slice env LD_PRELOAD=$shim VGPU_MEMORY_LIMIT=4GiB \
		python3 tests/gpu/torch_slice.py check
	step torch-expandable-segments env LD_PRELOAD=$shim \
		VGPU_MEMORY_LIMIT=4GiB \
		PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \
		python3 tests/gpu/torch_slice.py expandable
	step torch-speed-without python3 tests/gpu/torch_slice.py 200
	step torch-speed-with env LD_PRELOAD=$shim VGPU_MEMORY_LIMIT=4GiB \
		python3 tests/gpu/torch_slice.py 200
	step runtime-trace tests/gpu/shim_trace.sh "$shim"
else
	report+=("SKIP torch (no PyTorch)")
fi
step bench-shim python3 tests/bench/run-bench.py "$build" --quick

# Compute shares on the real GPU: vgpu_spin at 30, 50 and 70% (the kernels'
# own timers), 1 ms kernels, asynchronous, 3 s each.
for cap in 30 50 70; do
	step "compute-$cap" env LD_PRELOAD=$shim VGPU_COMPUTE_LIMIT=$cap \
		VGPU_CONTEXT_OVERHEAD=0 "$build/tests/gpu/share" --kernel-us 1000 \
		--seconds 3 --style async --expect $cap --tolerance 5
done
step compute-spatial-50 env LD_PRELOAD=$shim VGPU_COMPUTE_LIMIT=50 \
	VGPU_COMPUTE_MODE=spatial VGPU_LOG_LEVEL=info VGPU_CONTEXT_OVERHEAD=0 \
	SHARE_CHECK_THROUGHPUT=1 "$build/tests/gpu/share" --kernel-us 1000 \
	--seconds 3 --style async
if python3 -c 'import torch' 2>/dev/null; then
	# Two processes at 30% and 70% running matmuls: their throughput ratio
	# should be near 30/70 = 0.43.
	matmul_pair() {
		local a b
		LD_PRELOAD=$shim VGPU_TENANT=t30 VGPU_COMPUTE_LIMIT=30 \
			python3 tests/gpu/torch_matmul.py 10 >"$1.30" &
		LD_PRELOAD=$shim VGPU_TENANT=t70 VGPU_COMPUTE_LIMIT=70 \
			python3 tests/gpu/torch_matmul.py 10 >"$1.70"
		wait
		a=$(awk '{print $2}' "$1.30")
		b=$(awk '{print $2}' "$1.70")
		echo "30%: $a matmuls/s, 70%: $b matmuls/s"
		python3 -c "r = $a / $b; print('ratio %.3f (30/70 = 0.429)' % r); exit(0 if abs(r - 0.4286) < 0.07 else 1)"
	}
	step torch-30-70 matmul_pair "$(mktemp)"
fi

# Overcommit: can a kernel use host-located VMM memory; vgpu_touch over
# 1.5x a 2 GiB slice (12 x 256 MiB) in each mode, with its time.
step vmm-host "$build/tests/gpu/overcommit-real" vmm
step touch-unlimited env LD_PRELOAD=$shim VGPU_CONTEXT_OVERHEAD=0 \
	"$build/tests/gpu/overcommit-real" touch 12
for mode in managed host; do
	step "touch-1.5x-$mode" env LD_PRELOAD=$shim VGPU_MEMORY_LIMIT=2GiB \
		VGPU_OVERCOMMIT=$mode VGPU_CONTEXT_OVERHEAD=0 \
		"$build/tests/gpu/overcommit-real" touch 12
done
step touch-1.5x-off sh -c "! LD_PRELOAD=$shim VGPU_MEMORY_LIMIT=2GiB VGPU_CONTEXT_OVERHEAD=0 $build/tests/gpu/overcommit-real touch 12"
if python3 -c 'import torch' 2>/dev/null; then
	for mode in host managed; do
		step "torch-1.5x-$mode" env LD_PRELOAD=$shim VGPU_MEMORY_LIMIT=4GiB \
			VGPU_OVERCOMMIT=$mode python3 tests/gpu/torch_overcommit.py
	done
	# vgpu-ctl on a training job: 30% -> 60%, suspend (its memory off the
	# GPU, no step made), resume (every loss equal to an undisturbed run's).
	step torch-control python3 tests/gpu/torch_control.py "$build"
fi

echo "== libvgpu GPU check: $(date -u +%FT%TZ) =="
printf '%s\n' "${report[@]}"
exit $failed
