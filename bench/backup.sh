#!/usr/bin/env bash
# Backup and restore against GNU tar (issue 5): a container holding a 1 GiB set of mixed
# files, backed up with `containerfs backup` and archived with `tar -c`, restored with
# `containerfs restore` and extracted with `tar -x`, in the same run, alternating, each
# timed RUNS times; medians. Usage:
#
#   bench/backup.sh PATH_TO_containerfs [--quick] [--runs N]
#
# bench/run.sh (make bench) calls it with its own arguments, after the other benchmarks.
# --quick (or BENCH_QUICK=1): 64 MiB instead of 1 GiB, 1 run (development figures only).
# docs/benchmarks.md ("Backup and restore") explains the figures.
set -euo pipefail

if [[ $# -lt 1 || "$1" == -* ]]; then
  echo "usage: bench/backup.sh PATH_TO_containerfs [--quick] [--runs N]" >&2
  exit 64
fi
bin=$(realpath "$1"); shift
quick=${BENCH_QUICK:-0}; runs=${BENCH_RUNS:-3}
while (($#)); do
  case "$1" in
    --quick) quick=1 ;;
    --runs) runs=$2; shift ;;
    --targets | --options | --root | --output | --priority) shift ;;  # bench/run.sh's, not ours
    *) ;;
  esac
  shift
done
if [[ $quick == 1 ]]; then runs=1; scale=16; else scale=1; fi

root=${BENCH_ROOT:-/var/tmp/cfs-bench}/backup
rm -rf "$root"
mkdir -p "$root"
trap 'rm -rf "$root"' EXIT
export XDG_CONFIG_HOME="$root/config"

mkdir -p "$root/Bench.app"
echo '<plist/>' > "$root/Bench.app/Info.plist"
"$bin" create "$root/store" --bundle "$root/Bench.app" >/dev/null

# The set: 4 × 128 MiB, 224 × 1 MiB, 8,192 × 32 KiB, 8,192 × 4 KiB in 64 folders
# (1 GiB, 16,612 files), half in Documents, half in Library/Application Support; some
# user.* xattrs; plus 64 MiB in Library/Caches that a backup leaves out.
python3 "$(dirname "$0")/mixed_set.py" "$root/store" "$scale"
bytes=$(du -sb --apparent-size "$root/store/Documents" "$root/store/Library/Application Support" | awk '{s += $1} END {print s}')
files=$(find "$root/store/Documents" "$root/store/Library/Application Support" -type f | wc -l)

now() { date +%s.%N; }
# Seconds taken by a command; a sync first so that earlier dirty pages are not charged to it.
timed() {
  sync
  local start end
  start=$(now)
  "$@" >/dev/null
  end=$(now)
  echo "$end - $start" | bc
}
tar_create() { tar --format=pax --xattrs -cf "$root/tar.tar" -C "$root/store" Documents Library/Preferences "Library/Application Support" && sync "$root/tar.tar"; }
tar_extract() { mkdir "$root/tar-out" && tar --xattrs -xf "$root/tar.tar" -C "$root/tar-out" && sync -f "$root/tar-out"; }
cfs_backup() { "$bin" backup "$root/store" "$root/cfs.tar"; }
cfs_restore() { "$bin" restore "$root/cfs.tar" "$root/cfs-out" --bundle "$root/Bench.app"; }

declare -A samples
for ((run = 1; run <= runs; run++)); do
  rm -f "$root/tar.tar" "$root/cfs.tar"
  # Warm the page cache with the set, so both read it from memory.
  cat "$root"/store/Documents/*/* "$root/store/Library/Application Support"/*/* >/dev/null
  samples[tar_c]+=" $(timed tar_create)"
  samples[cfs_b]+=" $(timed cfs_backup)"
  rm -rf "$root/tar-out" "$root/cfs-out"
  samples[tar_x]+=" $(timed tar_extract)"
  samples[cfs_r]+=" $(timed cfs_restore)"
  rm -rf "$root/tar-out" "$root/cfs-out"
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
rate() { echo "scale=1; $bytes / $1 / 1000000" | bc; }
tc=$(echo "${samples[tar_c]}" | median); cb=$(echo "${samples[cfs_b]}" | median)
tx=$(echo "${samples[tar_x]}" | median); cr=$(echo "${samples[cfs_r]}" | median)

echo "Backup and restore: $files files, $bytes bytes, $runs run(s), medians (seconds; MB/s = 10^6 bytes/s)"
printf '| %-40s | %8s | %8s | %12s |\n' "operation" "seconds" "MB/s" "vs GNU tar"
printf '|%s|%s|%s|%s|\n' "------------------------------------------" "----------" "----------" "--------------"
printf '| %-40s | %8.2f | %8s | %12s |\n' "tar -c (pax, --xattrs) + fsync" "$tc" "$(rate "$tc")" "1.00x"
printf '| %-40s | %8.2f | %8s | %12s |\n' "containerfs backup (SHA-256, fsync)" "$cb" "$(rate "$cb")" "$(printf %.2fx "$(echo "scale=4; $tc / $cb" | bc)")"
printf '| %-40s | %8.2f | %8s | %12s |\n' "tar -x (--xattrs) + syncfs" "$tx" "$(rate "$tx")" "1.00x"
printf '| %-40s | %8.2f | %8s | %12s |\n' "containerfs restore (verify, syncfs)" "$cr" "$(rate "$cr")" "$(printf %.2fx "$(echo "scale=4; $tx / $cr" | bc)")"
