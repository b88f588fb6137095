#!/usr/bin/env python3
"""Bundles of many files (issue 26 §4): `containerfs create`, `update` and `verify --full`
of a bundle of N small files, all in one folder ("flat") or spread over a tree ("deep",
folders of 100 files four levels down), against `cp -a` and `sha256sum` of the same tree.

Every walk over a bundle (scan, copy, verify) must be linear in the files of one folder:
a walk that copied a folder's list of names for each entry took 1.3 s for 10,000 files
in one folder, 5.1 s for 20,000 and 121 s for 100,000. The rows at 10k, 20k and 100k
show the growth: linear is about 2× from 10k to 20k and 10× to 100k, as `cp -a` is.

  cp -a            `cp -a BUNDLE COPY`: the copy `create` and `update` make
  sha256sum        `find BUNDLE -type f -print0 | xargs -0 sha256sum`: the hashing `verify --full` does
  create           `containerfs create STORE --bundle BUNDLE --key KEY`: copy, scan, hash, sign
  update           `containerfs update STORE --bundle BUNDLE --key KEY`: the same beside the old, then switch
  verify --full    `containerfs verify STORE --full --key KEY`: walk, read and hash every file

Each cell is wall seconds, then user and system CPU seconds in brackets: user CPU is
where a quadratic walk shows (copying names), and what other work on a shared machine
does not inflate; system CPU is the file system's (on a busy shared disk, `openat` of a
new file in a large folder varies several-fold from run to run: point BENCH_ROOT at a
tmpfs for steadier figures). One run each. Usage:

  bench/bundle_scale.py PATH_TO_containerfs [--before OLD_containerfs] [--sizes 10000,20000,100000]
                        [--shapes flat,deep] [--quick]

--before adds the same rows for another build (the one before a change). --quick: sizes
1000,2000. Scratch in $BENCH_ROOT-bundles (default /var/tmp/cfs-bench-bundles), removed
after. Prints a table and writes it to bench/results/bundle-scale.txt (quick:
bundle-scale-quick.txt).
"""
import argparse
import os
import resource
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def parse():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("containerfs")
    parser.add_argument("--before", help="another containerfs build to measure the same way")
    parser.add_argument("--quick", action="store_true", default=os.environ.get("BENCH_QUICK") == "1")
    parser.add_argument("--sizes")
    parser.add_argument("--shapes", default="flat,deep")
    # bench/run.sh passes its own options through; ignore those that are not ours.
    args, _ = parser.parse_known_args()
    sizes = args.sizes or ("1000,2000" if args.quick else "10000,20000,100000")
    args.sizes = [int(n) for n in sizes.split(",")]
    args.shapes = args.shapes.split(",")
    args.root = os.environ.get("BENCH_ROOT", "/var/tmp/cfs-bench") + "-bundles"
    return args


def make_bundle(bundle, files, shape):
    """`files` files of 100 bytes each (distinct contents): all in `bundle` (flat), or in
    folders of 100 files, four levels of folders down (deep)."""
    os.makedirs(bundle)
    with open(os.path.join(bundle, "Info.plist"), "w") as out:
        out.write("<plist>bench</plist>\n")
    for index in range(files):
        if shape == "flat":
            folder = bundle
        else:
            group = index // 100
            folder = os.path.join(bundle, "a%d" % (group // 1000), "b%d" % (group // 100 % 10), "c%d" % (group // 10 % 10), "d%d" % (group % 10))
            if index % 100 == 0:
                os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "f%06d" % index), "wb") as out:
            out.write(b"%099d\n" % index)


def timed(command, shell=False):
    """Wall, user CPU and system CPU seconds (of the children) of one run; fails loudly."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    result = subprocess.run(command, shell=shell, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        sys.exit("bundle_scale: %s failed (%d): %s" % (command, result.returncode, result.stderr.strip()[:300]))
    return wall, after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime


def measure(binary, root, bundle):
    """create, update and verify --full of `bundle` with `binary`, in a fresh scratch folder."""
    work = os.path.join(root, "work")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    store, key = os.path.join(work, "store"), os.path.join(work, "installer.key")
    cells = {}
    cells["create"] = timed([binary, "create", store, "--bundle", bundle, "--key", key])
    cells["update"] = timed([binary, "update", store, "--bundle", bundle, "--key", key])
    cells["verify --full"] = timed([binary, "verify", store, "--full", "--key", key])
    shutil.rmtree(work, ignore_errors=True)
    return cells


def main():
    args = parse()
    binaries = [("containerfs", os.path.abspath(args.containerfs))]
    if args.before:
        binaries.insert(0, ("before", os.path.abspath(args.before)))
    shutil.rmtree(args.root, ignore_errors=True)
    os.makedirs(args.root)
    lines = ["Bundles of many files (issue 26 §4): wall s (user CPU s + system CPU s), one run each, page cache warm",
             "scratch: %s" % args.root,
             "", "| shape | files | cp -a | sha256sum | build | create | update | verify --full |",
             "|---|---|---|---|---|---|---|---|"]
    try:
        for shape in args.shapes:
            for files in args.sizes:
                bundle = os.path.join(args.root, "Bench.app")
                shutil.rmtree(bundle, ignore_errors=True)
                make_bundle(bundle, files, shape)
                copy = os.path.join(args.root, "copy")
                cp = timed(["cp", "-a", bundle, copy])
                shutil.rmtree(copy)
                sha = timed("find '%s' -type f -print0 | xargs -0 sha256sum > /dev/null" % bundle, shell=True)
                for name, binary in binaries:
                    cells = measure(binary, args.root, bundle)
                    cell = lambda times: "%.2f (%.2f + %.2f)" % times
                    line = "| %s | %d | %s | %s | %s | %s | %s | %s |" % (
                        shape, files, cell(cp), cell(sha), name, cell(cells["create"]), cell(cells["update"]), cell(cells["verify --full"]))
                    print(line, flush=True)
                    lines.append(line)
                shutil.rmtree(bundle)
    finally:
        shutil.rmtree(args.root, ignore_errors=True)
    text = "\n".join(lines) + "\n"
    print()
    print(text)
    output = os.path.join(HERE, "results", "bundle-scale-quick.txt" if args.quick else "bundle-scale.txt")
    with open(output, "w") as out:
        out.write(text)


if __name__ == "__main__":
    main()
