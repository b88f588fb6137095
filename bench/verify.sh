#!/usr/bin/env bash
# The bundle-verification benchmark of issue 3: `containerfs verify --full` against
# sha256sum over the same 10,000 files / 1 GiB in one run, and a warm (cached) verify.
# `make bench` runs it after the file-system benchmark (bench/run.sh). Usage:
#
#   bench/verify.sh PATH_TO_containerfs [--quick] [--runs N] [--drop] [--priority]
#
# --drop (root) adds a pair of runs with the page cache dropped; --priority (root) runs
# ahead of other sessions' work on a shared machine (BENCH_VERIFY_PRIORITY=1 too). The table is printed and
# written to bench/results/verify.txt; docs/benchmarks.md explains it. The table says
# whether each goal is met; the exit status is non-zero only when something failed.
set -euo pipefail
if [[ $# -lt 1 || "$1" == -* ]]; then
  echo "usage: bench/verify.sh PATH_TO_containerfs [--quick] [--runs N] [--drop] [--priority]" >&2
  exit 64
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export PYTHONDONTWRITEBYTECODE=1
exec python3 "$here/verify.py" "$@"
