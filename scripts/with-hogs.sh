#!/usr/bin/env bash
# with-hogs.sh - a command run beside CPU-bound processes
# (docs/compute.md, "Tests on a busy machine").
#
#   scripts/with-hogs.sh [-n N] COMMAND [ARG...]
#
# Starts N (default 4) busy loops, each a shell spinning on one core,
# runs COMMAND, stops the loops, and exits with COMMAND's status. The
# way to check that the test suites do not depend on an idle machine:
#
#   scripts/with-hogs.sh ./quickstart test
#   scripts/with-hogs.sh meson test -C build --suite compute --num-processes 1
set -uo pipefail
n=4
if [ "${1:-}" = "-n" ]; then
	n=${2:-}
	shift 2 || true
fi
case $n in
'' | *[!0-9]*)
	echo "with-hogs.sh: -n wants a whole number of loops, got '$n'" >&2
	exit 2
	;;
esac
if [ $# -eq 0 ]; then
	echo "usage: with-hogs.sh [-n N] COMMAND [ARG...]" >&2
	exit 2
fi
pids=()
stop() {
	[ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null
	wait "${pids[@]}" 2>/dev/null
}
trap stop EXIT
trap 'exit 130' INT TERM
for _ in $(seq "$n"); do
	(while :; do :; done) &
	pids+=($!)
done
echo "with-hogs.sh: $n busy loops (pids ${pids[*]}) beside: $*" >&2
"$@"
