#!/usr/bin/env bash
# The benchmark of issue 7: native ext4, bindfs, libfuse's passthrough_hp and ContainerFS
# (Documents/ and Library/Caches/, and Documents/ through io_uring), same workloads, one
# run. `make bench` calls this after installing fio, bindfs and g++. Usage:
#
#   bench/run.sh PATH_TO_containerfs [--quick] [--runs N] [--targets native,bindfs,...]
#
# BENCH_QUICK=1 is the same as --quick (small sizes, 1 run: development figures only).
# The table is printed and written to bench/results/latest.txt (quick: quick.txt).
# docs/benchmarks.md explains every figure. Needs root: it mounts and drops caches.
set -euo pipefail

if [[ $# -lt 1 || "$1" == -* ]]; then
  echo "usage: bench/run.sh PATH_TO_containerfs [--quick] [--runs N] [--targets LIST]" >&2
  exit 64
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export BENCH_ROOT=${BENCH_ROOT:-/var/tmp/cfs-bench}
export PYTHONDONTWRITEBYTECODE=1

# bench.py unmounts everything itself; this is the backstop for when it cannot (killed
# with SIGKILL, or python crashing): detach every mount left below the bench root,
# deepest first, lazily if it is busy.
sweep() {
  local point
  awk -v root="$BENCH_ROOT/" 'index($5, root) == 1 { print $5 }' /proc/self/mountinfo | sort -r |
    while read -r point; do
      echo "bench/run.sh: unmounting leftover $point" >&2
      fusermount3 -u "$point" 2>/dev/null || umount "$point" 2>/dev/null || umount -l "$point" || true
    done
}
trap sweep EXIT
trap 'exit 130' INT TERM HUP

# libfuse's passthrough_hp, the peer the speed goals quote, built from Debian's source
# package; if it cannot be built its column says why and the rest is still measured.
if hp=$("$here/passthrough_hp.sh"); then export BENCH_PASSTHROUGH_HP=$hp; fi

status=0
python3 "$here/bench.py" "$@" || status=$?
# Bundle verification (issue 3): verify --full against sha256sum, and a warm verify.
"$here/verify.sh" "$@" || status=$?
# Backup and restore (issue 5): against tar -c / tar -x of the same files.
"$here/backup.sh" "$@" || status=$?
# Backups to an object store (issue 16): against rclone copying the same archive.
"$here/objectstore.sh" "$@" || status=$?
# Tags and purge (issue 4): tagging overhead, and purge against rm of the same files.
"$here/purge.sh" "$1" || status=$?
# Data protection (issue 14): a complete folder (no passthrough) against a none folder.
python3 "$here/protection.py" "$1" || status=$?
# Capacity (issue 13): the price of the accounting, and mount with a recorded count or a walk.
"$here/capacity.sh" "$1" || status=$?
# A container of many files (issue 18): create, stat, read-all at 10k, 100k and 1M nodes.
python3 "$here/scale.py" "$1" || status=$?
# Bundles of many files (issue 26): create, update, verify of 10k-100k files, one folder
# and deep, against cp -a and sha256sum of the same tree.
python3 "$here/bundle_scale.py" "$@" || status=$?
# What one synchronous hop costs here: the floor under the metadata rows.
"$here/roundtrip.sh" "$1" || status=$?
exit "$status"
