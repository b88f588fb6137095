#!/usr/bin/env python3
"""The bundle-verification benchmark of issue 3 (run by bench/verify.sh).

Makes a bundle of 10,000 files / 1 GiB (--quick: 1,000 files / 64 MiB), installs it
with `containerfs create --key` (a key in the scratch folder: no home is touched), then
measures, interleaved, in one run:

  sha256sum      `sha256sum` over the same files (one process, as people run it)
  sha256sum -P2  the same split over two processes (xargs -P2), both cores
  verify --full  `containerfs verify STORE --full`: every file read and hashed
  verify (warm)  `containerfs verify STORE`: the cache vouches for every file

Page cache warm for all (the files were just read), so the figures compare hashing,
not the disk; with --drop (root) one more pair runs after dropping the page cache.
Each row also gives the CPU time (user + system), which other work on the machine does
not inflate; --priority (root) puts the whole run ahead of other sessions' work.
MB/s are 10^6 bytes per second of bundle contents. Prints a table and writes it to
bench/results/verify.txt (quick: verify-quick.txt). Environment: BENCH_QUICK=1,
BENCH_RUNS=N, BENCH_VERIFY_ROOT (scratch folder, default $BENCH_ROOT-verify, that is
/var/tmp/cfs-bench-verify; emptied first, removed after), BENCH_VERIFY_OUTPUT.
"""
import argparse
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def parse():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("containerfs")
    parser.add_argument("--quick", action="store_true", default=os.environ.get("BENCH_QUICK") == "1")
    parser.add_argument("--runs", type=int, default=int(os.environ.get("BENCH_RUNS", "3")))
    parser.add_argument("--drop", action="store_true", help="also measure with the page cache dropped (root)")
    parser.add_argument("--priority", action="store_true", default=os.environ.get("BENCH_VERIFY_PRIORITY") == "1",
                        help="run ahead of other sessions' work on a shared machine (root: autogroup nice -20)")
    # bench/run.sh passes its own options through; ignore those that are not ours (its
    # --root and --output are its own: ours come from the environment).
    args, _ = parser.parse_known_args()
    args.root = os.environ.get("BENCH_VERIFY_ROOT", os.environ.get("BENCH_ROOT", "/var/tmp/cfs-bench") + "-verify")
    args.output = os.environ.get("BENCH_VERIFY_OUTPUT")
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    return args


def make_bundle(bundle, files, total):
    """`files` files in folders of 100, sizes log-uniform from 1 KiB to 1 MiB scaled to
    `total` bytes, random contents (incompressible, as built code and assets are)."""
    rng = random.Random(3)
    weights = [2 ** rng.uniform(10, 20) for _ in range(files)]
    scale = total / sum(weights)
    sizes = [max(1, int(w * scale)) for w in weights]
    sizes[-1] += total - sum(sizes)
    os.makedirs(bundle)
    chunk = os.urandom(1 << 20)
    for index, size in enumerate(sizes):
        folder = os.path.join(bundle, "d%03d" % (index // 100))
        if index % 100 == 0:
            os.mkdir(folder)
        offset = (index * 7919) % (1 << 19)
        with open(os.path.join(folder, "f%05d" % index), "wb") as out:
            # Distinct contents per file: a different window of the random chunk, and the index.
            out.write(index.to_bytes(4, "big"))
            left = size - 4
            while left > 0:
                piece = chunk[offset:offset + min(left, (1 << 20) - offset)]
                out.write(piece)
                left -= len(piece)
                offset = 0
    return sum(sizes)


def timed(command, **kwargs):
    """Runs `command`; returns its wall time, its CPU time (user + system, with its own
    children: unlike the wall time, not inflated when other work shares the cores) and
    its output."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if result.returncode != 0:
        sys.exit("bench/verify: %s failed (%d): %s" % (" ".join(command[:3]), result.returncode, result.stderr.decode(errors="replace").strip()))
    return elapsed, cpu, result.stdout


def drop_caches():
    subprocess.run(["sync"])
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def main():
    args = parse()
    binary = os.path.abspath(args.containerfs)
    files, total = (1000, 64 << 20) if args.quick else (10000, 1 << 30)
    runs = 1 if args.quick else args.runs
    output = args.output or os.path.join(HERE, "results", "verify-quick.txt" if args.quick else "verify.txt")
    root = args.root
    priority = ""
    if args.priority:
        # With autogroup scheduling, plain nice acts only within this session: the
        # session's own weight is what gives it the cores ahead of other sessions' builds.
        try:
            with open("/proc/self/autogroup", "w") as f:
                f.write("-20\n")
            priority = "; run at autogroup nice -20"
        except OSError as error:
            print("bench/verify: cannot raise the priority (%s); measuring as is" % error, file=sys.stderr)
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    try:
        started = time.perf_counter()
        load = os.getloadavg()[0]
        print("bench/verify: making a bundle of %d files / %d MiB in %s" % (files, total >> 20, root), file=sys.stderr)
        size = make_bundle(os.path.join(root, "Bench.app"), files, total)
        key = os.path.join(root, "installer.key")
        store = os.path.join(root, "store")
        create_time, _, _ = timed([binary, "create", store, "--bundle", os.path.join(root, "Bench.app"), "--key", key])
        shutil.rmtree(os.path.join(root, "Bench.app"))
        bundle = os.path.join(store, "Bench.app")
        listing = subprocess.run(["find", bundle, "-type", "f", "-print0"], stdout=subprocess.PIPE, check=True).stdout
        listing_file = os.path.join(root, "files.list")
        with open(listing_file, "wb") as f:
            f.write(listing)
        commands = {
            "sha256sum": ["xargs", "-0", "-a", listing_file, "sha256sum"],
            "sha256sum -P2": ["xargs", "-0", "-a", listing_file, "-P", "2", "-n", str(files // 8), "sha256sum"],
            "verify --full": [binary, "verify", store, "--full", "--key", key],
            "verify (warm)": [binary, "verify", store, "--key", key],
        }
        # Warm the page cache, and check that the bundle verifies at all.
        timed(commands["sha256sum"])
        timed(commands["verify --full"])
        times = {name: [] for name in commands}
        cpus = {name: [] for name in commands}
        for _ in range(runs):
            for name, command in commands.items():
                wall, cpu, _ = timed(command)
                times[name].append(wall)
                cpus[name].append(cpu)
        _, _, warm_json = timed(commands["verify (warm)"][:-2] + ["--json", "--key", key])
        cold = {}
        if args.drop and os.geteuid() == 0:
            for name in ("sha256sum", "verify --full"):
                drop_caches()
                cold[name] = timed(commands[name])[:2]
        elapsed = time.perf_counter() - started
    finally:
        shutil.rmtree(root, ignore_errors=True)

    def row(name, seconds, cpu, note="", rate=True):
        median = statistics.median(seconds)
        speed = "%9.0f" % (size / median / 1e6) if rate else "%9s" % "–"
        return "| %-33s | %8.3f s | %.3f–%.3f | %s | %7.3f s | %s |" % (name, median, min(seconds), max(seconds), speed, statistics.median(cpu), note)

    reference = statistics.median(times["sha256sum"])
    reference2 = statistics.median(times["sha256sum -P2"])
    full = statistics.median(times["verify --full"])
    warm = statistics.median(times["verify (warm)"])
    cached = '"hashed_files":0' in warm_json.decode()
    lines = [
        "Bundle verification (issue 3): %d files, %.0f MiB, %d run%s each, page cache warm; %s; load average at start %.1f on %d cores%s"
        % (files, size / 2**20, runs, "" if runs == 1 else "s", time.strftime("%Y-%m-%d %H:%M %Z", time.localtime()), load, os.cpu_count(), priority),
        "",
        "| what | median wall | min–max (s) | MB/s | CPU (user+sys) | vs sha256sum (wall) |",
        "|---|---|---|---|---|---|",
        row("sha256sum (1 process)", times["sha256sum"], cpus["sha256sum"], "1.00×"),
        row("sha256sum (2 processes)", times["sha256sum -P2"], cpus["sha256sum -P2"], "%.2f×" % (reference / reference2)),
        row("containerfs verify --full", times["verify --full"], cpus["verify --full"], "%.2f× (goal ≥ 0.9×)" % (reference / full)),
        row("containerfs verify (warm)", times["verify (warm)"], cpus["verify (warm)"],
            "goal < 0.2 s: %s%s" % ("met" if warm < 0.2 else "NOT met", "" if cached else "; cache missed"), rate=False),
    ]
    if cold:
        lines.append(row("sha256sum, page cache dropped", [cold["sha256sum"][0]], [cold["sha256sum"][1]], "%.2f×" % (reference / cold["sha256sum"][0])))
        lines.append(row("verify --full, page cache dropped", [cold["verify --full"][0]], [cold["verify --full"][1]],
                         "%.2f× of sha256sum dropped" % (cold["sha256sum"][0] / cold["verify --full"][0])))
    lines += ["", "create (copy + hash + sign): %.2f s; whole benchmark %.0f s" % (create_time, elapsed)]
    text = "\n".join(lines) + "\n"
    print(text)
    os.makedirs(os.path.dirname(output), exist_ok=True)
    with open(output, "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
