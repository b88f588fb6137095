#!/usr/bin/env python3
"""Purge speed (issue 4): 100,000 cache files over 10 stores, `containerfs purge --caches
--free HALF` against `rm` of the very same files, same run, same state.

Each round builds the same 10 stores afresh (same seed: same names, sizes and last-use
times), then times one of:

  purge-index  containerfs purge S1..S10 --caches --free HALF    (tag index valid: no walk)
  purge-walk   the same with every store's index removed first   (purge walks Caches)
  rm           xargs -0 rm -f < VICTIMS                          (the files purge deletes)

VICTIMS is what `purge --dry-run --json` lists for the same call.

The stores live on tmpfs by default (/dev/shm): an unlink there is pure CPU, so the
ratio to rm shows purge's own overhead at its largest (on a disk each unlink also waits
for the device, which both pay alike). --root DIR --cold runs on a disk instead, with
sync and drop_caches before each timed step (root needed). Standard library only.
Driven by bench/purge.sh.
"""

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time

STORES = 10
FILES_PER_STORE = 10_000
FOLDERS_PER_STORE = 100


def log(message):
    print(message, file=sys.stderr, flush=True)


def drop_caches():
    subprocess.run(["sync"], check=True)
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def fs_type(path):
    """The type of the file system holding path (its parent, before it exists)."""
    path = os.path.dirname(os.path.realpath(path))
    best = ("", "?")
    with open("/proc/self/mounts") as f:
        for line in f:
            fields = line.split()
            point = fields[1].encode().decode("unicode_escape")
            if (path == point or path.startswith(point.rstrip("/") + "/")) and len(point) >= len(best[0]):
                best = (point, fields[2])
    return best[1]


def populate(binary, root, stores, files, seed, cold):
    """Makes `stores` containers with `files` cache files each; returns (paths, total bytes)."""
    if os.path.exists(root):
        shutil.rmtree(root)
    if cold:
        # ext4 without a journal avoids reusing inodes freed in the last minute, which makes
        # creates after mass deletes slow until the cache is dropped (docs/benchmarks.md).
        drop_caches()
    os.makedirs(root + "/Bench.app")
    with open(root + "/Bench.app/Info.plist", "w") as f:
        f.write("<plist>bench</plist>\n")
    rng = random.Random(seed)
    now = time.time_ns()
    payload = os.urandom(16384)
    total = 0
    paths = []
    for s in range(stores):
        store = f"{root}/store{s:02d}"
        subprocess.run([binary, "create", store, "--bundle", root + "/Bench.app"], check=True, stdout=subprocess.DEVNULL)
        caches = store + "/Library/Caches"
        for d in range(FOLDERS_PER_STORE):
            os.mkdir(f"{caches}/d{d:03d}")
        for i in range(files):
            path = f"{caches}/d{i % FOLDERS_PER_STORE:03d}/f{i:05d}.cache"
            size = rng.randint(512, 8192)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.write(fd, payload[:size])
            os.close(fd)
            used = now - rng.randint(0, 30 * 86400) * 1_000_000_000 - rng.randint(0, 999_999_999)
            os.utime(path, ns=(used, used))
            total += size
        paths.append(store)
    return paths, total


def index(binary, stores):
    """Writes each store's tag index as a clean unmount would (purge walks and writes it)."""
    subprocess.run([binary, "purge", *stores, "--caches", "--free", "0"], check=True, stdout=subprocess.DEVNULL)


def victims(binary, stores, half):
    out = subprocess.run([binary, "purge", *stores, "--caches", "--free", str(half), "--dry-run", "--json"],
                         check=True, capture_output=True).stdout
    report = json.loads(out)
    return [f"{d['store']}/{d['path']}" for d in report["deleted"]], report["freedBytes"]


def timed(cmd, stdin=None):
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdin=stdin, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def remaining(stores):
    return sum(len(files) for s in stores for _, _, files in os.walk(s + "/Library/Caches")) - len(stores)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("binary")
    parser.add_argument("--runs", type=int, default=int(os.environ.get("BENCH_RUNS", "3")))
    parser.add_argument("--root", default=os.environ.get("BENCH_PURGE_ROOT", "/dev/shm/cfs-purge-bench"))
    parser.add_argument("--files", type=int, default=FILES_PER_STORE, help="cache files per store (10 stores)")
    parser.add_argument("--cold", action="store_true", help="sync and drop caches before each timed step (a disk root)")
    parser.add_argument("--output", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "purge.txt"))
    args = parser.parse_args()
    if os.geteuid() != 0 and args.cold:
        log("bench/purge.py: root is needed to drop caches (--cold)")
        return 64
    binary = os.path.abspath(args.binary)
    results = {"purge-index": [], "purge-walk": [], "rm": []}
    counts = {}
    began = time.time()
    try:
        for run in range(args.runs):
            for variant in ("purge-index", "purge-walk", "rm"):
                stores, total = populate(binary, args.root, STORES, args.files, seed=7, cold=args.cold)
                index(binary, stores)
                half = total // 2
                files, freed = victims(binary, stores, half)
                if variant == "purge-walk":
                    for store in stores:
                        os.unlink(store + "/.containerfs/tags")
                if args.cold:
                    drop_caches()
                if variant == "rm":
                    listing = args.root + "/victims"
                    with open(listing, "wb") as f:
                        f.write(b"\0".join(p.encode() for p in files) + b"\0")
                    with open(listing, "rb") as f:
                        seconds = timed(["xargs", "-0", "rm", "-f"], stdin=f)
                else:
                    seconds = timed([binary, "purge", *stores, "--caches", "--free", str(half)])
                left = remaining(stores)
                if left != STORES * args.files - len(files):
                    raise SystemExit(f"{variant}: {left} files left, expected {STORES * args.files - len(files)}")
                counts = {"files": STORES * args.files, "bytes": total, "victims": len(files), "freed": freed}
                results[variant].append(seconds)
                log(f"run {run + 1} {variant:12s} {seconds:.3f} s  ({len(files)} files, {freed} bytes)")
    finally:
        if os.path.exists(args.root):
            shutil.rmtree(args.root)

    rm = statistics.median(results["rm"])
    lines = [
        f"purge: {counts['files']:,} cache files in {STORES} stores, {counts['bytes']:,} bytes; "
        f"--free {counts['bytes'] // 2:,} deletes {counts['victims']:,} files ({counts['freed']:,} bytes)",
        f"{args.root} ({fs_type(args.root)}), {'cold: caches dropped before each step' if args.cold else 'warm'}, {args.runs} runs, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {time.time() - began:.0f} s in all",
        f"  {'':14s}{'median s':>10s}  {'min-max':>15s}  {'x rm':>6s}",
    ]
    for variant, label in (("rm", "rm"), ("purge-index", "purge (index)"), ("purge-walk", "purge (walk)")):
        samples = results[variant]
        median = statistics.median(samples)
        lines.append(f"  {label:14s}{median:10.3f}  {min(samples):7.3f}-{max(samples):<7.3f}  {median / rm:6.2f}")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output, "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
