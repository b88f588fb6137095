#!/usr/bin/env bash
# Runs every test, then the mount suites a second time with FUSE over io_uring switched
# on, then sweeps leftover mounts. A hung mount cannot be interrupted from inside swift
# test, hence the outer timeouts. On failure the failing tests are repeated at the end,
# so that the tail of a CI log names them.
set -uo pipefail
swift=${SWIFT:-swift}
# --node-cache-pass (opt-in): afterwards, the policy suites again with a daemon that keeps
# 16 node descriptors, so nearly every request reopens its node (docs/testing.md).
node_cache_pass=0
arguments=()
for argument in "$@"; do
  if [[ "$argument" == --node-cache-pass ]]; then node_cache_pass=1; else arguments+=("$argument"); fi
done
set -- "${arguments[@]}"
log=$(mktemp /tmp/containerfs-test.XXXXXX.log)
# The differential fuzz runs seeds 1-3 here, 6-8 in the io_uring pass, 9-20 in make soak.
CONTAINERFS_FUZZ_SEEDS=${CONTAINERFS_FUZZ_SEEDS:-3} timeout --kill-after=30 1200 "$swift" test "$@" --no-parallel 2>&1 | tee "$log"
status=${PIPESTATUS[0]}

# The kernel's switch is machine-wide (off by default); it is put back as it was. Without
# it the Uring suite above has already failed, saying so.
switch=/sys/module/fuse/parameters/enable_uring
ring_suites='AttackTests|CrashTests|DeliverTests|DifferentialTests|InboxTests|KernelCacheTests|NameTests|PassthroughTests|PolicyThroughMountTests|ProgramTests|PurgeTests|RunTests|SmokeTests|TagTests|UserTests'
if [[ "$status" -eq 0 && -w "$switch" ]]; then
  before=$(cat "$switch")
  trap 'echo "$before" > "$switch"' EXIT
  echo Y > "$switch"
  echo "== the mount suites again, with FUSE over io_uring on =="
  # Each root mount checks at unmount that its daemon served requests through the rings
  # (MountedContainer.expectRequestsThroughRings): a silent fall-back fails the pass.
  # The differential fuzz takes three seeds of its own here (6-8), not the first pass's 1-3.
  CONTAINERFS_TEST_URING=1 CONTAINERFS_FUZZ_SEED=${CONTAINERFS_FUZZ_SEED:-6} CONTAINERFS_FUZZ_SEEDS=${CONTAINERFS_FUZZ_SEEDS:-3} timeout --kill-after=30 900 "$swift" test "$@" --skip-build --no-parallel --filter "$ring_suites" 2>&1 | tee -a "$log"
  status=${PIPESTATUS[0]}
  echo "$before" > "$switch"
fi

if [[ "$status" -eq 0 && "$node_cache_pass" -eq 1 ]]; then
  echo "== the policy suites again, with a 16-entry node descriptor cache =="
  CONTAINERFS_TEST_NODE_CACHE=16 timeout --kill-after=30 900 "$swift" test "$@" --skip-build --no-parallel \
    --filter 'PolicyThroughMountTests|AttackTests|KernelCacheTests|TagTests|PassthroughTests|NameTests' 2>&1 | tee -a "$log"
  status=${PIPESTATUS[0]}
fi

scripts/sweep-mounts.sh
if [ "$status" -ne 0 ]; then
  echo "== failing tests (full log: $log) =="
  grep -E '✘|error:|Fatal error|Expectation failed|recorded an issue' "$log" | grep -v 'Test run with' | tail -40
else
  rm -f "$log"
fi
exit "$status"
