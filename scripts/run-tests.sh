#!/usr/bin/env bash
# Runs every test, then sweeps leftover mounts. A hung mount cannot be interrupted
# from inside swift test, hence the outer timeout. On failure the failing tests are
# repeated at the end, so that the tail of a CI log names them.
set -uo pipefail
swift=${SWIFT:-swift}
log=$(mktemp /tmp/containerfs-test.XXXXXX.log)
timeout --kill-after=30 1200 "$swift" test "$@" --no-parallel 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
scripts/sweep-mounts.sh
if [ "$status" -ne 0 ]; then
  echo "== failing tests (full log: $log) =="
  grep -E '✘|error:|Fatal error|Expectation failed|recorded an issue' "$log" | grep -v 'Test run with' | tail -40
else
  rm -f "$log"
fi
exit "$status"
