#!/usr/bin/env bash
# One setup step, one line: "longhaul setup: WHAT ... done (N s)", written whole once the step ends
# (make runs two steps at once, and their lines must not interleave). The step's whole output goes to
# LOG; on failure the line says so, names LOG and shows its last lines. A step that cannot run on
# this machine (an optional build without its toolchain) prints "skipped: REASON" as its last
# line and exits 0: the line shows the reason.
#
#   appliance/setup/step.sh WHAT LOG COMMAND...
set -uo pipefail
what=${1:?usage: step.sh WHAT LOG COMMAND...}
log=${2:?usage: step.sh WHAT LOG COMMAND...}
shift 2
mkdir -p "$(dirname "$log")"
start=$(date +%s)
"$@" >"$log" 2>&1
rc=$?
took=$(( $(date +%s) - start ))
if [ "$rc" -ne 0 ]; then
  echo "longhaul setup: $what ... FAILED (exit $rc after ${took} s); the whole output is in $log, its end:"
  tail -n 15 "$log" | sed 's/^/  | /'
  exit "$rc"
fi
last=$(tail -n 1 "$log")
case "$last" in
  skipped:*) echo "longhaul setup: $what ... skipped (${last#skipped: })" ;;
  *) echo "longhaul setup: $what ... done (${took} s)" ;;
esac
