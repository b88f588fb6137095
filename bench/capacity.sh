#!/usr/bin/env bash
# Issue 13: the price of a capacity. Sequential write of 1 GiB and creation of 10,000
# files into a container with a capacity of 2 GiB, next to the same container without
# one, same run, runs interleaved; and the mount time of a 100,000-file store: without a
# capacity, with one and the count a clean unmount recorded (the usual case), and with
# one and no record (after a killed daemon: the walk). Medians of RUNS (default 5; 1 with
# BENCH_QUICK=1).
# Usage: bench/capacity.sh PATH_TO_containerfs
# Writes bench/results/capacity.txt. Needs root (it drops caches).
set -euo pipefail
cfs=$(realpath "$1")
runs=${RUNS:-$([[ ${BENCH_QUICK:-} == 1 ]] && echo 1 || echo 5)}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=${BENCH_ROOT:-/var/tmp/cfs-bench}/capacity
rm -rf "$root"; mkdir -p "$root/App.app"
echo '<plist/>' > "$root/App.app/Info.plist"
trap 'for m in "$root"/mnt-*; do fusermount3 -uz "$m" 2>/dev/null || true; done; rm -rf "$root"' EXIT

now() { date +%s.%N; }
seconds() { python3 -c "print(f'{$2 - $1:.3f}')"; }
median() { python3 -c "import statistics, sys; print(f'{statistics.median(map(float, sys.argv[1:])):.3f}')" "$@"; }
ratio() { python3 -c "print(f'{$1 / $2:.2f}')"; }

measure() {  # measure NAME CAPACITY: prints "write create"
  local name=$1 capacity=$2 store=$root/$1 mnt=$root/mnt-$1
  rm -rf "$store"
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

many() {  # many NAME CAPACITY: a store of 100,000 files in 100 folders
  local store=$root/$1
  "$cfs" create "$store" --bundle "$root/App.app" >/dev/null
  python3 -c "
import os, sys
d = sys.argv[1] + '/Documents'
for k in range(100):
    os.mkdir(f'{d}/d{k}')
    for i in range(1000): open(f'{d}/d{k}/f{i}', 'wb').write(b'y' * 10)
" "$store"
  [[ -z $2 ]] || "$cfs" capacity "$store" "$2" >/dev/null
  mkdir -p "$root/mnt-$1"
}

mounttime() {  # mounttime NAME [walk]: seconds to mount, cold cache; walk: no recorded count
  local store=$root/$1 mnt=$root/mnt-$1
  [[ ${2:-} != walk ]] || rm -f "$store/.containerfs/used"
  sync; echo 3 > /proc/sys/vm/drop_caches
  local t0 t1
  t0=$(now); "$cfs" mount "$store" "$mnt"; t1=$(now)
  "$cfs" unmount "$mnt"
  seconds "$t0" "$t1"
}

w_none=(); c_none=(); w_cap=(); c_cap=()
for ((run = 0; run < runs; run++)); do
  read -r w c < <(measure none ""); w_none+=("$w"); c_none+=("$c")
  read -r w c < <(measure cap 2G); w_cap+=("$w"); c_cap+=("$c")
done
many many-none ""
many many-cap 2G
m_none=(); m_cap=(); m_walk=()
for ((run = 0; run < runs; run++)); do
  m_none+=("$(mounttime many-none)")
  m_cap+=("$(mounttime many-cap)")
  m_walk+=("$(mounttime many-cap walk)")
done
W0=$(median "${w_none[@]}"); W1=$(median "${w_cap[@]}")
C0=$(median "${c_none[@]}"); C1=$(median "${c_cap[@]}")
M0=$(median "${m_none[@]}"); M1=$(median "${m_cap[@]}"); M2=$(median "${m_walk[@]}")
{
  echo "capacity (issue 13): container with a 2 GiB capacity vs none, root daemon, same run, median of $runs"
  printf '%-52s %10s %10s %8s\n' workload none capacity ratio
  printf '%-52s %9ss %9ss %8s\n' "sequential write 1 GiB (dd, fsync)" "$W0" "$W1" "$(ratio "$W1" "$W0")"
  printf '%-52s %9ss %9ss %8s\n' "create 10,000 files of 100 bytes" "$C0" "$C1" "$(ratio "$C1" "$C0")"
  printf '%-52s %9ss %9ss %8s\n' "mount 100,000 files (cold), count recorded" "$M0" "$M1" "$(ratio "$M1" "$M0")"
  printf '%-52s %9ss %9ss %8s\n' "mount 100,000 files (cold), no record: walk" "$M0" "$M2" "$(ratio "$M2" "$M0")"
  echo "runs: write none ${w_none[*]} | cap ${w_cap[*]}; create none ${c_none[*]} | cap ${c_cap[*]}"
  echo "runs: mount none ${m_none[*]} | recorded ${m_cap[*]} | walk ${m_walk[*]}"
} | tee "$here/results/capacity.txt"
