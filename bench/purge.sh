#!/usr/bin/env bash
# Issue 4's figures, after bench/run.sh in `make bench`:
#  - tagging overhead: bench/tagging.py, the same create/read/unlink loops in Documents/ and
#    Library/Caches/ of one mount, interleaved (bench/results/tagging.txt);
#  - purge speed: bench/purge.py, 100,000 cache files over 10 stores, `containerfs purge
#    --free` half their bytes, against `rm` of the same files (bench/results/purge.txt).
#
#   bench/purge.sh PATH_TO_containerfs [--runs N] [--files PER_STORE] [--root DIR --cold]
#
# The options are purge.py's: stores on tmpfs (/dev/shm) by default; --root DIR --cold for
# a disk, dropping caches before each timed step. Root: tagging.py mounts and drops caches.
set -euo pipefail
if [[ $# -lt 1 || "$1" == -* ]]; then
  echo "usage: bench/purge.sh PATH_TO_containerfs [--runs N] [--files PER_STORE] [--root DIR --cold]" >&2
  exit 64
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export PYTHONDONTWRITEBYTECODE=1
python3 "$here/tagging.py" "$1"
python3 "$here/purge.py" "$@"
