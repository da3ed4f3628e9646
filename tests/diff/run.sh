#!/bin/sh
# run.sh - long runs of the differential test by hand (docs/reliability.md,
# "The differential test"): seed after seed for a while, whatever fails,
# then the failing seeds and the command that replays each.
#
#   tests/diff/run.sh [-b BUILD] [-m MINUTES] [-s FIRST_SEED] [-o OPS]
#                     [-c off,host,managed] [-n STEPS] [-- DIFF ARGS...]
#
# Each seed also picks its shape: 1-4 threads, 1-3 processes, shared or own
# tenants, one of the overcommit modes of -c. Arguments after -- go to every
# run (they win over the picked ones: --align 4096, --limit 128M...).
set -u

build=build
minutes=10
seed=1
ops=all
modes=off,host,managed
steps=3000
while getopts b:m:s:o:c:n:h opt; do
	case $opt in
	b) build=$OPTARG ;;
	m) minutes=$OPTARG ;;
	s) seed=$OPTARG ;;
	o) ops=$OPTARG ;;
	c) modes=$OPTARG ;;
	n) steps=$OPTARG ;;
	*) sed -n 2,12p "$0"; exit 2 ;;
	esac
done
shift $((OPTIND - 1))

root=$(cd "$(dirname "$0")/../.." && pwd)
case $build in /*) ;; *) build=$root/$build ;; esac
exe=$build/tests/diff/vgpu-diff
if [ ! -x "$exe" ]; then
	echo "run.sh: $exe not built (ninja -C $build)" >&2
	exit 2
fi
export LD_PRELOAD=$build/intercept/libvgpu.so
export VGPU_REAL_LIBCUDA=$build/sim/libcuda.so.1

log=$(mktemp -d "${TMPDIR:-/tmp}/vgpu-diff-run-XXXXXX")
end=$(( $(date +%s) + minutes * 60 ))
runs=0
failed=""
nmodes=$(echo "$modes" | tr ',' '\n' | wc -l)

while [ "$(date +%s)" -lt "$end" ]; do
	threads=$(( seed % 4 + 1 ))
	procs=$(( (seed / 4) % 3 + 1 ))
	tenants=$(( (seed / 12) % procs + 1 ))
	mode=$(echo "$modes" | cut -d, -f$(( (seed / 7) % nmodes + 1 )))
	args="--seed $seed --steps $steps --threads $threads --procs $procs"
	args="$args --tenants $tenants --overcommit $mode --ops $ops"
	# shellcheck disable=SC2086
	"$exe" $args "$@" >"$log/$seed.out" 2>&1
	rc=$?
	runs=$((runs + 1))
	if [ $rc -ne 0 ] && [ $rc -ne 77 ]; then
		failed="$failed $seed"
		echo "seed $seed FAILED: $(grep -m1 '^FAIL' "$log/$seed.out")"
		echo "  replay: $exe $args $*"
	else
		rm -f "$log/$seed.out"
	fi
	seed=$((seed + 1))
done

echo "run.sh: $runs seeds, $(echo $failed | wc -w) failed${failed:+:$failed}"
echo "run.sh: outputs of failing seeds (traces) in $log"
[ -z "$failed" ]
