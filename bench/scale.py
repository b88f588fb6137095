#!/usr/bin/env python3
"""Issue 18: a container of many files. Create, stat and read-all of N files of 1 KiB
at 10,000, 100,000 and 1,000,000 nodes, on native ext4, ContainerFS (Documents/, a daemon
started from a shell with `ulimit -S -n 1024`) and libfuse's passthrough_hp (started as it
is, it raises its soft limit to the hard one), same run: time per file, ratio to native,
and each daemon's resident memory per node and descriptor count once all N files are
created (the kernel then knows N nodes).

    bench/scale.py PATH_TO_containerfs [--sizes 10000,100000,1000000] [--runs N]

A size that does not fit the free disk space (with room to spare) is skipped, said.
Each (target, size) gets a fresh mount; caches are dropped before every step (which
also ends ext4's slow inode reuse after mass deletes: see bench.py's drop_caches), so
stat and read-all are cold: every file costs the daemon a LOOKUP, an OPEN and a read.
Writes bench/results/scale.txt. Needs root. PASSTHROUGH_HP: the binary (bench/run.sh
builds it with bench/passthrough_hp.sh).
"""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402  (the harness: run, drop_caches, mounts)

ROOT = os.path.join(os.environ.get("BENCH_ROOT", "/var/tmp/cfs-bench"), "scale")
FILE_SIZE = 1024
# What one file of 1 KiB takes on ext4 (a 4 KiB block, its inode, its name), twice over.
BYTES_PER_FILE = 2 * (4096 + 256 + 64)


def daemon_figures(pids):
    """(resident bytes, open descriptors) of the first live pid."""
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                rss = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
            return rss, len(os.listdir(f"/proc/{pid}/fd"))
        except (OSError, StopIteration):
            continue
    return None, None


def soft_limit(pids):
    for pid in pids:
        try:
            with open(f"/proc/{pid}/limits") as f:
                return next(line.split()[3] for line in f if line.startswith("Max open files"))
        except (OSError, StopIteration):
            continue
    return "?"


class Place:
    """Where the files go: a folder, perhaps behind a FUSE mount with its daemon."""

    def __init__(self, key, label):
        self.key, self.label = key, label
        self.workdir = None
        self.mountpoint = None
        self.daemons = []
        self.unmount_commands = []
        self.cleanup = []

    def teardown(self):
        if self.mountpoint:
            bench.unmount(self.mountpoint, self.unmount_commands, self.daemons)
        for path in self.cleanup:
            subprocess.run(["rm", "-rf", path])


def native(run_dir):
    place = Place("native", "native ext4")
    place.workdir = os.path.join(run_dir, "native")
    os.makedirs(place.workdir)
    place.cleanup = [place.workdir]
    return place


def containerfs(run_dir, binary):
    place = Place("containerfs", "ContainerFS Documents/")
    store, mnt, bundle = (os.path.join(run_dir, name) for name in ("store", "mnt", "Bench.app"))
    os.makedirs(bundle)
    os.makedirs(mnt)
    with open(os.path.join(bundle, "Info.plist"), "w") as f:
        f.write("<plist/>\n")
    bench.run([binary, "create", store, "--bundle", bundle], timeout=60)
    # A login shell's soft limit; the daemon raises it to the hard one itself.
    bench.run(["sh", "-c", 'ulimit -S -n 1024 && exec "$0" mount "$1" "$2"', binary, store, mnt], timeout=60)
    bench.wait_mounted(mnt, 10)
    place.mountpoint = mnt
    with open(os.path.join(store, ".containerfs", "mount.lock")) as f:
        place.daemons = [int(f.readline())]
    place.unmount_commands = [[binary, "unmount", mnt]]
    place.workdir = os.path.join(mnt, "Documents", "scale")
    os.mkdir(place.workdir)
    place.cleanup = [store, mnt, bundle]
    return place


def passthrough_hp(run_dir, binary):
    place = Place("passthrough_hp", "passthrough_hp")
    source, mnt = os.path.join(run_dir, "hp-src"), os.path.join(run_dir, "hp-mnt")
    os.makedirs(source)
    os.makedirs(mnt)
    bench.run(["sh", "-c", 'ulimit -S -n 1024 && exec "$0" "$1" "$2"', binary, source, mnt], timeout=30)
    bench.wait_mounted(mnt, 10)
    place.mountpoint = mnt
    place.daemons = bench.daemon_pids(mnt)
    place.unmount_commands = [["fusermount3", "-u", mnt]]
    place.workdir = mnt
    place.cleanup = [source, mnt]
    return place


def fsbench(tool, place, *args, timeout):
    """(seconds, None) or (None, what failed)."""
    try:
        out, _ = bench.run([tool, *args], timeout=timeout, stuck_mount=place.mountpoint)
    except bench.BenchError as e:
        return None, str(e)
    return float(re.search(r"seconds=([0-9.]+)", out).group(1)), None


def measure(tool, place, n):
    """One pass: {step: seconds or error}, plus the daemon's figures after creating."""
    result = {}
    timeout = max(120, n // 200)   # at most 5 ms a file
    bench.drop_caches()
    baseline = daemon_figures(place.daemons)
    seconds, error = fsbench(tool, place, "create", place.workdir, str(n), str(FILE_SIZE), timeout=timeout)
    result["create"] = seconds if error is None else error
    if error is not None:
        # Where it stopped: fsbench names the file (f00000 is the first); a daemon out of
        # descriptors could not even list the folder.
        failed = re.search(r" f(\d+): (.*)", error)
        result["create"] = (f"stops at file {int(failed.group(1)) + 1:,}: {failed.group(2)}" if failed
                            else error)
        return result, baseline, daemon_figures(place.daemons)
    after = daemon_figures(place.daemons)
    for step, args in (("stat", ("stat", place.workdir, str(n))), ("readall", ("readall", place.workdir))):
        bench.drop_caches()
        seconds, error = fsbench(tool, place, *args, timeout=timeout)
        result[step] = seconds if error is None else error
    return result, baseline, after


def free_bytes(path):
    s = os.statvfs(path)
    return s.f_bavail * s.f_frsize


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("binary")
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--runs", type=int, default=3, help="runs at 10,000 files (one at larger sizes)")
    args = parser.parse_args()
    binary = os.path.realpath(args.binary)
    hp = os.environ.get("BENCH_PASSTHROUGH_HP") or os.environ.get("PASSTHROUGH_HP")
    shutil.rmtree(ROOT, ignore_errors=True)
    os.makedirs(ROOT)
    tool = os.path.join(ROOT, "fsbench")
    bench.run(["cc", "-O2", "-o", tool, os.path.join(HERE, "fsbench.c")], timeout=120)
    hard = subprocess.run(["sh", "-c", "ulimit -H -n"], capture_output=True, text=True).stdout.strip()

    lines = [f"# Scale (issue 18): files of {FILE_SIZE} B, caches dropped before each step; "
             f"daemons started with soft limit 1024, hard {hard}",
             f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs, "
             f"{os.path.realpath(binary)}",
             f"{'size':>9}  {'target':<24} {'create':>16} {'stat':>16} {'readall':>16}  "
             f"{'RSS/node':>9} {'fds':>7} {'limit':>7}"]
    print("\n".join(lines), flush=True)
    results = os.path.join(HERE, "results", "scale.txt")

    def emit(line):
        """Prints a row and rewrites the results file, so that an interrupted run keeps its rows."""
        print(line, flush=True)
        lines.append(line)
        with open(results, "w") as f:
            f.write("\n".join(lines) + "\n")

    makers = [("native", native), ("containerfs", lambda d: containerfs(d, binary))]
    if hp:
        makers.append(("passthrough_hp", lambda d: passthrough_hp(d, hp)))
    else:
        lines.append("# passthrough_hp: not built (bench/passthrough_hp.sh)")
    try:
        for n in (int(s) for s in args.sizes.split(",")):
            need = n * BYTES_PER_FILE
            if free_bytes(ROOT) < need:
                line = f"{n:>9,}  skipped: needs {need >> 30} GiB free, {free_bytes(ROOT) >> 30} GiB left"
                emit(line)
                continue
            runs = args.runs if n <= 10000 else 1
            native_median = {}
            for key, make in makers:
                samples = {"create": [], "stat": [], "readall": []}
                errors, per_node, fds, limit = {}, None, None, ""
                for r in range(runs):
                    run_dir = os.path.join(ROOT, f"{key}-{n}-{r}")
                    os.makedirs(run_dir)
                    place = None
                    try:
                        place = make(run_dir)
                        result, baseline, after = measure(tool, place, n)
                        limit = soft_limit(place.daemons) if place.daemons else ""
                    except bench.BenchError as e:
                        result, baseline, after = {"create": str(e)}, (None, None), (None, None)
                    finally:
                        if place:
                            place.teardown()
                        shutil.rmtree(run_dir, ignore_errors=True)
                    for step, value in result.items():
                        if isinstance(value, float):
                            samples[step].append(value)
                        else:
                            errors[step] = value
                    if baseline[0] is not None and after[0] is not None:
                        per_node = (after[0] - baseline[0]) / n
                        fds = after[1]
                cells = []
                for step in ("create", "stat", "readall"):
                    if samples[step]:
                        per_file = statistics.median(samples[step]) / n
                        if key == "native":
                            native_median[step] = per_file
                        ratio = native_median.get(step, 0) / per_file if per_file else 0
                        cells.append(f"{per_file * 1e6:7.1f} µs {ratio:5.2f}x")
                    else:
                        cells.append(f"{'failed':>16}")
                memory = f"{per_node:7.0f} B" if per_node is not None else f"{'-':>9}"
                line = (f"{n:>9,}  {place.label if place else key:<24} {cells[0]:>16} {cells[1]:>16} "
                        f"{cells[2]:>16}  {memory:>9} {fds if fds is not None else '-':>7} {limit or '-':>7}")
                emit(line)
                for step, error in errors.items():
                    emit(f"{'':>11}{key} {step}: {error}")
    finally:
        for point in sorted(bench.mounts_under(ROOT), reverse=True):
            subprocess.run(["umount", "-l", point])
        shutil.rmtree(ROOT, ignore_errors=True)
    emit("# per file: median time / N (µs), and native's time over the target's "
         "(1.00x = as fast as native); RSS/node: the daemon's resident memory "
         "growth from mount to N nodes known, over N; fds: its open descriptors then")


if __name__ == "__main__":
    main()
