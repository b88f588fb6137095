#!/usr/bin/env python3
"""Tagging overhead (issue 4): the same metadata workloads in Documents/ (untagged) and
Library/Caches/ (tagged: the daemon stamps the last use of each file opened or created)
of one mount, interleaved A B B A … so that drift on a shared machine hits both alike.

Per round and folder, with bench/fsbench.c (timed loops, no process start-up):
  sync; drop_caches; fsbench create DIR N 4096    open(O_CREAT) + write 4 KiB + close
  fsbench readall DIR                             open + read to the end + close, each file
  fsbench unlink DIR N

Prints the medians and the ratio Caches / Documents (time: above 1.00 = tagging costs).
bench/bench.py's full table has the same comparison on every workload; this isolates the
ones where tagging does work. Root: it mounts and drops caches. Driven by bench/purge.sh.
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
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--root", default=os.environ.get("BENCH_TAGGING_ROOT", "/var/tmp/cfs-tagging-bench"))
    parser.add_argument("--output", default=os.path.join(HERE, "results", "tagging.txt"))
    args = parser.parse_args()
    if os.geteuid() != 0:
        log("bench/tagging.py: run as root (it mounts and drops caches)")
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
    subprocess.run([binary, "create", root + "/store", "--bundle", root + "/Bench.app"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([binary, "mount", root + "/store", mnt], check=True)
    folders = {"Documents": mnt + "/Documents/bench", "Library/Caches": mnt + "/Library/Caches/bench"}
    samples = {(folder, step): [] for folder in folders for step in ("create", "readall", "unlink")}
    began = time.time()
    try:
        for round_ in range(args.rounds):
            order = list(folders) if round_ % 2 == 0 else list(reversed(folders))
            for folder in order:
                directory = folders[folder]
                os.mkdir(directory)
                drop_caches()
                samples[(folder, "create")].append(fsbench(tool, "create", directory, args.files, 4096))
                samples[(folder, "readall")].append(fsbench(tool, "readall", directory))
                samples[(folder, "unlink")].append(fsbench(tool, "unlink", directory, args.files))
                os.rmdir(directory)
                log(f"round {round_ + 1} {folder:15s} " + "  ".join(f"{step} {samples[(folder, step)][-1]:.3f}" for step in ("create", "readall", "unlink")))
    finally:
        subprocess.run([binary, "unmount", mnt])
        shutil.rmtree(root, ignore_errors=True)

    lines = [
        f"tagging overhead: {args.files:,} files of 4 KiB, {args.rounds} rounds (A B B A…), one mount, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {time.time() - began:.0f} s",
        "  seconds, median (min) of the rounds; ratio Caches / Documents of the medians (of the",
        "  minimums: the least disturbed rounds, on a machine shared with other work)",
        f"  {'step':10s}{'Documents':>18s}{'Library/Caches':>18s}  {'ratio':>14s}",
    ]
    for step in ("create", "readall", "unlink"):
        documents, caches = samples[("Documents", step)], samples[("Library/Caches", step)]
        median_d, median_c = statistics.median(documents), statistics.median(caches)
        lines.append(f"  {step:10s}{median_d:10.4f} ({min(documents):.3f}){median_c:10.4f} ({min(caches):.3f})"
                     f"  {median_c / median_d:6.3f} ({min(caches) / min(documents):.3f})")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output, "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
