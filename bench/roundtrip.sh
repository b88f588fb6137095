#!/usr/bin/env bash
# The floor under metadata-heavy rows, after the other figures in `make bench`: what one
# synchronous hop between two processes costs here (a pipe ping-pong, across the two
# CPUs and on one), against one FUSE request a program waits for (getxattr of a name
# that is not there, on native ext4 and through containerfs mounts: requests on /dev/fuse,
# and through io_uring, whose machine-wide kernel switch is put back after). Medians of 5.
# Written to bench/results/roundtrip.txt.
#
#   bench/roundtrip.sh PATH_TO_containerfs
set -euo pipefail
if [[ $# -lt 1 || "$1" == -* ]]; then
  echo "usage: bench/roundtrip.sh PATH_TO_containerfs" >&2
  exit 64
fi
binary=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
scratch=$(mktemp -d /var/tmp/cfs-roundtrip.XXXXXX)
switch=/sys/module/fuse/parameters/enable_uring
before=$(cat "$switch" 2>/dev/null || true)
cleanup() {
  fusermount3 -u "$scratch/mnt" 2>/dev/null || true
  fusermount3 -u "$scratch/mnt-uring" 2>/dev/null || true
  if [[ -n "$before" ]]; then echo "$before" > "$switch"; fi
  rm -rf "$scratch"
}
trap cleanup EXIT
cc -O2 -o "$scratch/roundtrip" "$here/roundtrip.c"
mkdir -p "$scratch/Bench.app" "$scratch/mnt" "$scratch/mnt-uring"
echo x > "$scratch/Bench.app/Info.plist"
"$binary" create "$scratch/store" --bundle "$scratch/Bench.app" > /dev/null
"$binary" create "$scratch/store-uring" --bundle "$scratch/Bench.app" > /dev/null
"$binary" mount "$scratch/store" "$scratch/mnt" -o nouring
"$binary" mount "$scratch/store-uring" "$scratch/mnt-uring" -o uring
touch "$scratch/native" "$scratch/mnt/Documents/probe" "$scratch/mnt-uring/Documents/probe"

median() {   # median of 5 runs of: roundtrip ARGS
  for _ in 1 2 3 4 5; do "$scratch/roundtrip" "$@" | cut -d= -f2; done | sort -n | sed -n 3p
}
{
  echo "One synchronous round trip, microseconds (median of 5 runs of 20,000)"
  printf '  %-44s %8s\n' "pipe ping-pong, processes on CPUs 0 and 1" "$(median pipe 0 1 20000)"
  printf '  %-44s %8s\n' "pipe ping-pong, both processes on CPU 0" "$(median pipe 0 0 20000)"
  printf '  %-44s %8s\n' "getxattr, native ext4 (no hop)" "$(median getxattr "$scratch/native" 20000)"
  printf '  %-44s %8s\n' "getxattr through containerfs, /dev/fuse" "$(median getxattr "$scratch/mnt/Documents/probe" 20000)"
  printf '  %-44s %8s\n' "getxattr through containerfs, io_uring" "$(median getxattr "$scratch/mnt-uring/Documents/probe" 20000)"
} | tee "$here/results/roundtrip.txt"
