#!/usr/bin/env python3
"""Data protection cost (issue 14): the same workloads in a `complete` folder and a `none`
folder of one mount (root's daemon, passthrough), interleaved A B B A … so that drift on a
shared machine hits both alike.

Files of class `complete` are opened without passthrough (the daemon must be able to refuse
every read and write once the device locks), so their data goes through the daemon; `none`
files are read and written by the kernel straight from the store. Per round and folder,
with bench/fsbench.c (timed loops, no process start-up):
  sync; drop_caches; fsbench create DIR N 4096    open(O_CREAT) + write 4 KiB + close
  fsbench readall DIR                             open + read to the end + close, each file

Prints the medians and the ratio complete / none (time: above 1.00 = protection costs).
Root: it mounts and drops caches. Usage: bench/protection.py PATH_TO_containerfs.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def log(message):
    print(message, file=sys.stderr, flush=True)


def drop_caches():
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def fsbench(tool, *args):
    out = subprocess.run([tool, *map(str, args)], check=True, capture_output=True, text=True).stdout
    fields = dict(part.split("=") for part in out.split())
    return float(fields["seconds"])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("binary")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--files", type=int, default=10000)
    parser.add_argument("--root", default=os.environ.get("BENCH_PROTECTION_ROOT", "/var/tmp/cfs-protection-bench"))
    parser.add_argument("--output", default=os.path.join(HERE, "results", "protection.txt"))
    args = parser.parse_args()
    if os.geteuid() != 0:
        log("bench/protection.py: run as root (it mounts and drops caches)")
        return 64
    binary = os.path.abspath(args.binary)
    root, mnt = args.root, args.root + "/mnt"
    if os.path.exists(root):
        subprocess.run(["fusermount3", "-uz", mnt], stderr=subprocess.DEVNULL)
        shutil.rmtree(root)
    os.makedirs(root + "/Bench.app")
    os.makedirs(mnt)
    with open(root + "/Bench.app/Info.plist", "w") as f:
        f.write("<plist>bench</plist>\n")
    tool = root + "/fsbench"
    subprocess.run(["cc", "-O2", "-o", tool, os.path.join(HERE, "fsbench.c")], check=True)
    subprocess.run([binary, "create", root + "/store", "--bundle", root + "/Bench.app", "--key", root + "/key"],
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run([binary, "mount", root + "/store", mnt, "--key", root + "/key"], check=True)
    classes = ["complete", "none"]
    samples = {(cls, step): [] for cls in classes for step in ("create", "readall", "readall warm")}
    began = time.time()
    try:
        for round_ in range(args.rounds):
            for cls in (classes if round_ % 2 == 0 else list(reversed(classes))):
                directory = f"{mnt}/Documents/{cls}"
                os.mkdir(directory)
                os.setxattr(directory, "user.containerfs.protection", cls.encode())
                drop_caches()
                samples[(cls, "create")].append(fsbench(tool, "create", directory, args.files, 4096))
                drop_caches()
                samples[(cls, "readall")].append(fsbench(tool, "readall", directory))
                samples[(cls, "readall warm")].append(fsbench(tool, "readall", directory))
                fsbench(tool, "unlink", directory, args.files)
                os.rmdir(directory)
                log(f"round {round_ + 1} {cls:9s} " + "  ".join(f"{step} {samples[(cls, step)][-1]:.3f}" for step in ("create", "readall", "readall warm")))
    finally:
        subprocess.run([binary, "unmount", mnt])
        shutil.rmtree(root, ignore_errors=True)

    lines = [
        f"data protection: {args.files:,} files of 4 KiB in a complete and a none folder, {args.rounds} rounds (A B B A…), "
        f"one mount (root, passthrough), {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {time.time() - began:.0f} s",
        "  seconds, median (min) of the rounds; ratio complete / none of the medians (of the minimums)",
        f"  {'step':14s}{'complete':>18s}{'none':>18s}  {'ratio':>14s}",
    ]
    for step in ("create", "readall", "readall warm"):
        complete, none = samples[("complete", step)], samples[("none", step)]
        median_c, median_n = statistics.median(complete), statistics.median(none)
        lines.append(f"  {step:14s}{median_c:10.4f} ({min(complete):.3f}){median_n:10.4f} ({min(none):.3f})"
                     f"  {median_c / median_n:6.3f} ({min(complete) / min(none):.3f})")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output, "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
