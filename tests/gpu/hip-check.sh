#!/usr/bin/env bash
# tests/gpu/hip-check.sh - the GPU check of the HIP front end, for a machine
# with an AMD GPU or a Hygon DCU and its HIP runtime (docs/hip.md, "The GPU
# check"). Builds hip_job for the local device, then under libvgpu-hip.so
# with a slice: the views show the slice, every allocation path fits it and
# is refused one unit past it, data written by kernels reads back, a 30%
# compute cap slows a stream of 1 ms kernels about 3.3 times (timed by the
# job's events), and rocm-smi, when installed, shows the slice. Prints one
# report and exits non-zero when a check failed.
#
#   tests/gpu/hip-check.sh [BUILD_DIR]      (default: build, already built)
#   HIP_CHECK_SIM=1 tests/gpu/hip-check.sh  (on the simulated HIP device, to
#                                            try the script without a GPU)
set -u
cd "$(dirname "$0")/../.."
build=$(realpath "${1:-build}")
shim=$build/intercept/hip/libvgpu-hip.so
job=$build/tests/hip/hip_job
report=()
failed=0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -m 700 "$work/ledger"

step() {
	local name=$1 out
	shift
	if out=$("$@" 2>&1); then
		report+=("PASS $name")
	else
		report+=("FAIL $name")
		failed=1
	fi
	printf '%s\n' "$out" | sed "s/^/  [$name] /"
}

if [ -n "${HIP_CHECK_SIM:-}" ]; then
	export VGPU_SIM_STATE_DIR=$work/sim VGPU_SIM_MEMORY=8GiB
	export LD_LIBRARY_PATH=$build/sim/hip:$build/sim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
else
	# hip_job for the local device's architecture.
	arch=$(rocm_agent_enumerator 2>/dev/null | grep -v '^gfx000$' | head -1)
	job=$work/hip_job
	step build-job hipcc --offload-arch="${arch:-native}" -Ikernels \
		-o "$job" tests/hip/hip_job.hip kernels/vgpu_kernels.hip
fi

# Runs hip_job's commands (one per argument) under the shim and a slice of
# $limit for tenant $tenant; prints its replies.
limit=2GiB
tenant=check
under() {
	env LD_PRELOAD="$shim" VGPU_MEMORY_LIMIT=$limit VGPU_TENANT=$tenant \
		VGPU_LEDGER_DIR="$work/ledger" "$@"
}
# expect CMD... -- WANT...: the replies, line by line, start with WANT.
expect() {
	local cmds=() want=() i=0 out line
	while [ "$1" != -- ]; do cmds+=("$1"); shift; done
	shift
	want=("$@")
	out=$(under "$job" "${cmds[@]}" exit) || { echo "$out"; return 1; }
	echo "$out"
	while IFS= read -r line; do
		[ $i -lt ${#want[@]} ] || break
		case $line in "${want[$i]}"*) ;; *)
			echo "reply $((i + 1)) '$line', want '${want[$i]}'"
			return 1 ;;
		esac
		i=$((i + 1))
	done <<<"$out"
	[ $i -eq ${#want[@]} ]
}

step device "$job" device exit
step views expect memgetinfo totalmem device -- \
	"memgetinfo 0 free=2147483648 total=2147483648" \
	"totalmem 0 bytes=2147483648" "device 0 count="
# The slice in two parts, then one unit more (arrays: 1 GiB each, rows of
# 4096 floats, within a device's 65,536 rows).
for path in malloc pitch 3d managed ext async array; do
	step "slice-$path" expect "alloc 1024M $path" "alloc 1024M $path" \
		"alloc 16K $path" -- "alloc 0" "alloc 0" "alloc 2"
done
step data expect "alloc 256M" "touch 0 7" "copy 0" -- \
	"alloc 0" "touch 0 bad=0" "copy 0 bad=0"

# 1 ms kernels, 2000 of them: alone, then at 30% (hard); the ratio of the
# times the job's events measure.
spin_ms() {
	"$@" "$job" "spin 1000 2000" exit | awk '/^spin 0/ {
		sub("ms=", "", $3); print $3 }'
}
share() {
	local alone capped
	alone=$(spin_ms env)
	capped=$(spin_ms env LD_PRELOAD="$shim" VGPU_COMPUTE_LIMIT=30 \
		VGPU_COMPUTE_POLICY=hard VGPU_TENANT=cap \
		VGPU_LEDGER_DIR="$work/ledger")
	echo "2000 x 1 ms: alone $alone ms, at 30% $capped ms"
	python3 -c "s = $alone / $capped * 100; print('share %.1f%%' % s)
exit(0 if 28 <= s <= 32 else 1)"
}
step compute-30 share

if command -v rocm-smi >/dev/null && [ -z "${HIP_CHECK_SIM:-}" ]; then
	step rocm-smi-slice sh -c "env LD_PRELOAD=$shim VGPU_MEMORY_LIMIT=$limit \
		VGPU_TENANT=$tenant VGPU_LEDGER_DIR=$work/ledger \
		rocm-smi --showmeminfo vram | tee /dev/stderr | grep -q 2147483648"
else
	report+=("SKIP rocm-smi (not installed, or the simulator)")
fi

echo "== libvgpu HIP GPU check: $(date -u +%FT%TZ) =="
printf '%s\n' "${report[@]}"
exit $failed
