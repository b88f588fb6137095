#!/usr/bin/env bash
# The regression guard of issue 31: the benchmark's main table with a given commit's
# release build measured beside this tree's, same run, same disk, interleaved rounds.
#
#   bench/compare.sh COMMIT PATH_TO_containerfs [bench.py options, e.g. --groups metadata,tree]
#
# The commit is built once, in a detached worktree under /var/tmp/cfs-bench-base (kept for
# the next run). `make bench-compare BASE=COMMIT` calls this. Needs root, as bench/run.sh.
set -euo pipefail
if [[ $# -lt 2 || "$1" == -* ]]; then
  echo "usage: bench/compare.sh COMMIT PATH_TO_containerfs [bench.py options]" >&2
  exit 64
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
commit=$(git -C "$repo" rev-parse --verify --quiet "$1^{commit}") || {
  echo "bench/compare.sh: $1 is not a commit of this repository" >&2
  exit 64
}
binary=$2
shift 2
short=$(git -C "$repo" rev-parse --short "$commit")
tree=/var/tmp/cfs-bench-base/$commit
if [[ ! -x "$tree/.build/release/containerfs" ]]; then
  mkdir -p /var/tmp/cfs-bench-base
  [[ -d "$tree" ]] || git -C "$repo" worktree add --detach "$tree" "$commit" >&2
  echo "bench/compare.sh: building $short (release) in $tree" >&2
  (cd "$tree" && "${SWIFT:-swift}" build -c release >&2)
fi
if hp=$("$here/passthrough_hp.sh"); then export BENCH_PASSTHROUGH_HP=$hp; fi
export BENCH_OUTPUT=${BENCH_OUTPUT:-$here/results/compare-$short.txt}
exec python3 "$here/bench.py" "$binary" --base "$tree/.build/release/containerfs" --base-label "$short" \
  --targets native,passthrough_hp,cfs-documents "$@"
