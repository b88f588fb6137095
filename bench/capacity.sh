#!/usr/bin/env bash
# Issue 13: the price of a capacity. Sequential write of 1 GiB and creation of 10,000
# files into a container with a capacity of 2 GiB, next to the same container without
# one, same run; and the mount time of a 100,000-file store with a capacity (the walk
# that counts it) against without. Usage: bench/capacity.sh PATH_TO_containerfs
# Writes bench/results/capacity.txt. Needs root (it drops caches).
set -euo pipefail
cfs=$(realpath "$1")
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=${BENCH_ROOT:-/var/tmp/cfs-bench}/capacity
rm -rf "$root"; mkdir -p "$root/App.app"
echo '<plist/>' > "$root/App.app/Info.plist"
trap 'for m in "$root"/mnt-*; do fusermount3 -uz "$m" 2>/dev/null || true; done; rm -rf "$root"' EXIT

now() { date +%s.%N; }
seconds() { python3 -c "print(f'{$2 - $1:.3f}')"; }

measure() {  # measure NAME CAPACITY: prints "write create"
  local name=$1 capacity=$2 store=$root/$1 mnt=$root/mnt-$1
  "$cfs" create "$store" --bundle "$root/App.app" ${capacity:+--capacity "$capacity"} >/dev/null
  mkdir -p "$mnt"; "$cfs" mount "$store" "$mnt"
  sync; echo 3 > /proc/sys/vm/drop_caches
  local t0 t1 t2
  t0=$(now)
  dd if=/dev/zero of="$mnt/Documents/big" bs=1M count=1024 conv=fsync status=none
  t1=$(now)
  python3 -c "
import os, sys
d = sys.argv[1]
for i in range(10000):
    fd = os.open(f'{d}/f{i}', os.O_CREAT | os.O_WRONLY, 0o644); os.write(fd, b'x' * 100); os.close(fd)
" "$mnt/Documents"
  t2=$(now)
  "$cfs" unmount "$mnt"
  echo "$(seconds "$t0" "$t1") $(seconds "$t1" "$t2")"
}

mounttime() {  # mounttime NAME CAPACITY: seconds to mount a 100,000-file store
  local name=$1 capacity=$2 store=$root/$1 mnt=$root/mnt-$1
  "$cfs" create "$store" --bundle "$root/App.app" >/dev/null
  python3 -c "
import os, sys
d = sys.argv[1] + '/Documents'
for k in range(100):
    os.mkdir(f'{d}/d{k}')
    for i in range(1000): open(f'{d}/d{k}/f{i}', 'wb').write(b'y' * 10)
" "$store"
  [[ -n $capacity ]] && "$cfs" capacity "$store" "$capacity" >/dev/null
  mkdir -p "$mnt"; sync; echo 3 > /proc/sys/vm/drop_caches
  local t0 t1
  t0=$(now); "$cfs" mount "$store" "$mnt"; t1=$(now)
  "$cfs" unmount "$mnt"
  seconds "$t0" "$t1"
}

read -r w_none c_none < <(measure none "")
read -r w_cap c_cap < <(measure cap 2G)
m_none=$(mounttime many-none "")
m_cap=$(mounttime many-cap 2G)
ratio() { python3 -c "print(f'{$1 / $2:.2f}')"; }
{
  echo "capacity (issue 13): container with a 2 GiB capacity vs none, root daemon, same run"
  printf '%-40s %10s %10s %8s\n' workload none capacity ratio
  printf '%-40s %9ss %9ss %8s\n' "sequential write 1 GiB (dd, fsync)" "$w_none" "$w_cap" "$(ratio "$w_cap" "$w_none")"
  printf '%-40s %9ss %9ss %8s\n' "create 10,000 files of 100 bytes" "$c_none" "$c_cap" "$(ratio "$c_cap" "$c_none")"
  printf '%-40s %9ss %9ss %8s\n' "mount a 100,000-file store (cold)" "$m_none" "$m_cap" "$(ratio "$m_cap" "$m_none")"
} | tee "$here/results/capacity.txt"
