#!/usr/bin/env bash
# Unmounts any containerfs mount a test left behind (a test stuck on a hung mount
# cannot clean up after itself).
awk '$3 == "fuse.containerfs" {print $2}' /proc/mounts | while read -r mountpoint; do
  mountpoint=$(printf '%b' "$mountpoint")   # /proc/mounts escapes spaces as \040
  echo "sweeping leftover mount: $mountpoint" >&2
  fusermount3 -u "$mountpoint" 2>/dev/null || fusermount3 -uz "$mountpoint" 2>/dev/null || umount -l "$mountpoint"
done
exit 0
