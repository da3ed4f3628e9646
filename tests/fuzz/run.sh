#!/usr/bin/env bash
# tests/fuzz/run.sh - build the libFuzzer targets with clang and run each for
# a while (docs/fuzzing.md).
#
#   tests/fuzz/run.sh                   every target, FUZZ_SECONDS each
#   tests/fuzz/run.sh fuzz_ledger       only the ones named
#
# Environment:
#   FUZZ_SECONDS   seconds per target (default 30)
#   FUZZ_BUILD     the build directory (default build-fuzz), configured here
#                  with CC=clang -Dfuzz=true if it does not exist yet
#   FUZZ_ARGS      more libFuzzer flags (e.g. -jobs=4 -workers=4)
#
# Each target starts from its seeds (tests/fuzz/corpus/<target>, plus
# tests/sim/data for fuzz_image) and keeps what it finds in
# $FUZZ_BUILD/fuzz-corpus/<target>. A crash, leak, sanitizer report or
# timeout is saved under $FUZZ_BUILD/fuzz-artifacts/<target>/; the summary
# names it with the command that reproduces it, and the script exits 1.
# Exit 2: the build failed.
set -uo pipefail

src=$(cd "$(dirname "$0")/../.." && pwd)
seconds=${FUZZ_SECONDS:-30}
build=${FUZZ_BUILD:-build-fuzz}
case $build in /*) ;; *) build=$src/$build ;; esac
all=(fuzz_options fuzz_ledger fuzz_image)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")

# clang, and with it libFuzzer; installed only when missing (Debian CI).
if ! command -v clang >/dev/null; then
	echo "run.sh: clang not found, installing it with apt-get" >&2
	sudo=
	[ "$(id -u)" = 0 ] || sudo=sudo
	if ! { $sudo apt-get update -qq &&
	       $sudo apt-get install -y -qq clang; }; then
		echo "run.sh: cannot install clang" >&2
		exit 2
	fi
fi

if [ ! -f "$build/build.ninja" ]; then
	CC=clang meson setup "$build" "$src" -Dfuzz=true \
		-Dkernels=disabled -Dtests=disabled >"$build.setup.log" 2>&1 ||
		{ cat "$build.setup.log" >&2; exit 2; }
fi
ninja -C "$build" "${targets[@]/#/tests/fuzz/}" >/dev/null ||
	{ ninja -C "$build" "${targets[@]/#/tests/fuzz/}"; exit 2; }

declare -A result
failed=0
for t in "${targets[@]}"; do
	work=$build/fuzz-corpus/$t
	art=$build/fuzz-artifacts/$t
	log=$build/fuzz-logs/$t.log
	mkdir -p "$work" "$art" "$(dirname "$log")"
	seeds=("$src/tests/fuzz/corpus/$t")
	[ "$t" = fuzz_image ] && seeds+=("$src/tests/sim/data")
	echo "== $t: ${seconds}s (log: $log)"
	# -timeout: the ledger's bounded waits are a second each, a few per
	# input at most; anything near this is a hang.
	# shellcheck disable=SC2086
	"$build/tests/fuzz/$t" -max_total_time="$seconds" -timeout=25 \
		-print_final_stats=1 -artifact_prefix="$art/" ${FUZZ_ARGS:-} \
		"$work" "${seeds[@]}" >"$log" 2>&1
	rc=$?
	runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
	cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
	if [ $rc -eq 0 ]; then
		result[$t]="ok: ${runs:-?} runs, ${cov:-?} edges, corpus $(find "$work" -type f | wc -l)"
	else
		failed=1
		# shellcheck disable=SC2012
		found=$(ls -t "$art" 2>/dev/null | head -1)
		result[$t]="FAILED (exit $rc): $(grep -m1 -E 'ERROR|SUMMARY|runtime error|deadly signal' "$log")"
		[ -n "$found" ] && result[$t]+=$'\n'"    input: $art/$found"$'\n'"    reproduce: $build/tests/fuzz/$t $art/$found"
		tail -40 "$log" >&2
	fi
done

echo "== fuzz summary (${seconds}s per target)"
for t in "${targets[@]}"; do
	echo "$t: ${result[$t]}"
done
exit $failed
