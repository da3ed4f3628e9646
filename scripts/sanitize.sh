#!/usr/bin/env bash
# sanitize.sh - the test suites under sanitizers (docs/building.md#sanitizers).
#
#   scripts/sanitize.sh [asan|tsan|all]     (default: all)
#
# asan: a -Db_sanitize=address,undefined build (ASAN_BUILD_DIR, default
#       build-san-asan) runs every suite but compute and soak (timing: its
#       shares and the soak's one-second bound mean nothing at sanitizer
#       speed) and clients (Python from PyPI, whose own allocations the
#       leak checker would report), leaks checked against
#       tests/sanitize/lsan.supp.
# tsan: a -Db_sanitize=thread build (TSAN_BUILD_DIR, default build-san-tsan)
#       runs tests/tsan/, the concurrency checks written as plain programs
#       (Criterion does not start under TSan here), reports checked against
#       tests/sanitize/tsan.supp.
# Each prints one summary line; the exit status is non-zero when a test
# failed or any sanitizer report appears in a test's output (also one a
# child process printed while its parent passed). CI=1 adds -Dwerror=true.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
root=$PWD
what=${1:-all}
asan_dir=${ASAN_BUILD_DIR:-build-san-asan}
tsan_dir=${TSAN_BUILD_DIR:-build-san-tsan}
werror=()
[ -n "${CI:-}" ] && werror=(-Dwerror=true)
reports='ERROR: (Address|Leak)Sanitizer|runtime error:|WARNING: ThreadSanitizer|ThreadSanitizer: reported'

# configure DIR OPTIONS...: a new directory is set up; then built.
configure() {
	local dir=$1 log
	shift
	if [ ! -f "$dir/build.ninja" ]; then
		log=$(mktemp)
		meson setup "$dir" "${werror[@]}" -Db_lundef=false "$@" \
			>"$log" 2>&1 || { cat "$log"; rm -f "$log"; return 1; }
		rm -f "$log"
	fi
	ninja -C "$dir"
}

# check NAME DIR MESON-TEST-ARGS...: runs the tests, prints the summary line.
check() {
	local name=$1 dir=$2 rc=0 found
	shift 2
	meson test -C "$dir" --print-errorlogs "$@" || rc=1
	summary=$(python3 scripts/test-summary.py "$dir/meson-logs/testlog.json") || rc=1
	found=$(grep -cE "$reports" "$dir/meson-logs/testlog.txt")
	[ "$found" -eq 0 ] || rc=1
	echo "sanitize: $name: $summary; $found sanitizer report(s)$([ $rc -eq 0 ] && echo ', clean' || echo ', FAILED')"
	[ $rc -eq 0 ] || python3 scripts/test-summary.py --failures \
		"$dir/meson-logs/testlog.json" >>"$digest"
	return $rc
}

# The preloaded shim is loaded before the ASan runtime that the test
# program needs: verify_asan_link_order=0 lets it (every program the shim is
# preloaded into here is ASan-built, so the runtime's malloc still wins).
run_asan() {
	configure "$asan_dir" -Db_sanitize=address,undefined || return 1
	ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=1:halt_on_error=1:abort_on_error=1:fast_unwind_on_malloc=0 \
	LSAN_OPTIONS=suppressions=$root/tests/sanitize/lsan.supp:print_suppressions=0 \
	UBSAN_OPTIONS=halt_on_error=1:abort_on_error=1:print_stacktrace=1 \
		check "asan+ubsan (all suites but compute, soak and clients)" \
		"$asan_dir" --no-suite compute --no-suite soak \
		--no-suite clients --num-processes 2 \
		--timeout-multiplier 3
}

run_tsan() {
	configure "$tsan_dir" -Db_sanitize=thread -Dtests=disabled \
		-Dkernels=disabled || return 1
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$root/tests/sanitize/tsan.supp \
		check "tsan (tests/tsan)" "$tsan_dir" --suite tsan \
		--timeout-multiplier 3
}

# What failed, with the end of each failed test's stderr, printed last:
# the end of a CI log is what its viewer shows.
digest=$(mktemp)
trap 'rm -f "$digest"' EXIT

rc=0
case $what in
asan) run_asan || rc=1 ;;
tsan) run_tsan || rc=1 ;;
all) run_asan || rc=1; run_tsan || rc=1 ;;
*) echo "usage: scripts/sanitize.sh [asan|tsan|all]" >&2; exit 2 ;;
esac
if [ -s "$digest" ]; then
	echo "sanitize: what failed:"
	cat "$digest"
fi
exit $rc
