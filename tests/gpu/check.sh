#!/usr/bin/env bash
# tests/gpu/check.sh - the foundation's GPU check, on a machine with an NVIDIA
# GPU: builds the kernels and the programs that run on the real driver (no
# simulator, no Criterion needed), then runs the kernels' agreement check
# (CUDA forms against host forms) and the demo job. Prints one report and
# exits non-zero when a check failed.
#
# Headers the GPU machine lacks (uthash) come from .deps/, made by
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
[ -d .deps/usr/include ] && args+=("-Dc_args=-I$PWD/.deps/usr/include")
[ -f "$build/build.ninja" ] || step configure meson setup "$build" "${args[@]}"
step build ninja -C "$build"
step gpu nvidia-smi -L
step kernels-agree "$build/tests/gpu/vgpu-kernels-agree"
step demo "$build/tools/vgpu-demo" --seconds 2

echo "== libvgpu GPU check: $(date -u +%FT%TZ) =="
printf '%s\n' "${report[@]}"
exit $failed
