#!/usr/bin/env python3
"""The ContainerFS benchmark: the same workloads, in one run, on native ext4, bindfs,
libfuse's passthrough_hp and ContainerFS mounts (Documents/ and Library/Caches/ through
/dev/fuse, Documents/ through io_uring), as medians with min-max and the ratio to native.
Driven by bench/run.sh; docs/benchmarks.md explains the figures.

Only the standard library is used. Must run as root (drop_caches, mounts).
"""

import argparse
import datetime
import json
import math
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

# Issue 7's goals, as ratios to native (higher is better); rows not named have none.
GOALS = {
    "seq_write": 0.9, "seq_read_cold": 0.95, "seq_read_warm": 0.8,
    "create": 0.75, "unlink": 0.75, "stat_warm": 0.3,
    "untar": 0.6, "readall": 0.6, "rmrf": 0.7,
}

NOTES = []  # footnotes for the table (a capped fio job)


class BenchError(Exception):
    """A workload or a target failed; the message says what and why."""


class StepFailed(Exception):
    """One measured step (a table row) failed."""

    def __init__(self, key, message):
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message


class Config:
    def __init__(self, quick, runs):
        self.quick = quick
        self.runs = runs
        self.file_size = (64 << 20) if quick else (1 << 30)
        self.rand_seconds = 1 if quick else 4
        self.fio_cap = 15 if quick else 45
        self.meta_files = 1000 if quick else 10000
        self.meta_size = 4096
        # BENCH_CHAIN_DEPTH: another depth for the deep_move row (to compare with a build
        # that cannot hold 100,000 nodes).
        # The rows of the groups asked for (None: all).
        self.keys = None
        self.chain_depth = int(os.environ.get("BENCH_CHAIN_DEPTH", 10000 if quick else 100000))

    def size_label(self):
        return human_size(self.file_size)


def human_size(n):
    return f"{n >> 30} GiB" if n >= 1 << 30 else f"{n >> 20} MiB"


def workloads(cfg):
    """(key, label, unit, kind): kind 'rate' is higher-better MB/s, 'time' lower-better s."""
    n = f"{cfg.meta_files:,}"
    size = cfg.size_label()
    every = [
        ("seq_write", f"seq write {size}, buffered, fsync at end", "MB/s", "rate"),
        ("seq_read_cold", f"seq read {size}, cold (caches dropped)", "MB/s", "rate"),
        ("seq_read_warm", f"seq read {size}, warm", "MB/s", "rate"),
        ("rand_read", f"random read 4 KiB, warm, {cfg.rand_seconds} s, 1 job", "MB/s", "rate"),
        ("direct_write", f"seq write {size}, O_DIRECT", "MB/s", "rate"),
        ("create", f"create {n} files of 4 KiB", "s", "time"),
        ("stat_cold", f"stat {n} files, 1st pass (caches dropped)", "s", "time"),
        ("stat_warm", f"stat {n} files, 2nd pass (warm)", "s", "time"),
        ("write_stat", f"write 4 KiB then stat, {n} times", "s", "time"),
        ("list", f"list the folder of {n} (readdir), 1st pass", "s", "time"),
        ("list_warm", f"list the folder of {n}, 2nd pass", "s", "time"),
        ("unlink", f"delete {n} files", "s", "time"),
        ("untar", "tree: extract the tarball (tar -xf)", "s", "time"),
        ("readall", "tree: read every file", "s", "time"),
        ("rmrf", "tree: rm -rf", "s", "time"),
        ("deep_move", f"move a {cfg.chain_depth:,}-deep folder chain, 3 times (areas)", "s", "time"),
    ]
    return [row for row in every if cfg.keys is None or row[0] in cfg.keys]


def log(message):
    print(message, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------
# Processes, mounts, caches

def mount_entry(path):
    """(fstype, 'major:minor') of the topmost mount at path, or None."""
    real = os.path.realpath(path)
    found = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            point = fields[4].encode().decode("unicode_escape")
            if point == real:
                found = (fields[fields.index("-") + 1], fields[2])
    return found


def mounts_under(root):
    """Mount points at or below root (a run killed hard may leave some)."""
    real = os.path.realpath(root)
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4].encode().decode("unicode_escape")
            if point == real or point.startswith(real + "/"):
                found.append(point)
    return found


def is_fuse_mount(path):
    entry = mount_entry(path)
    return bool(entry and entry[0].startswith("fuse"))


def fuse_abort(path):
    """Aborts the FUSE connection of the mount at path: unblocks a process stuck on a hung daemon."""
    entry = mount_entry(path)
    if entry and entry[0].startswith("fuse"):
        minor = entry[1].split(":")[1]
        try:
            with open(f"/sys/fs/fuse/connections/{minor}/abort", "w") as f:
                f.write("1")
            log(f"  aborted the FUSE connection of {path}")
        except OSError as e:
            log(f"  could not abort the FUSE connection of {path}: {e}")


def run(cmd, timeout, stuck_mount=None, check=True):
    """Runs cmd; returns (stdout, seconds). A timeout kills it (and aborts stuck_mount if the
    process hangs in the kernel), a non-zero exit raises BenchError with stderr's tail."""
    start = time.perf_counter()
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               stdin=subprocess.DEVNULL, text=True, errors="replace")
    try:
        out, err = process.communicate(timeout=timeout)
    except KeyboardInterrupt:
        # Interrupted (Ctrl-C, SIGTERM): stop the child so that the mount can be released.
        process.kill()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            if stuck_mount:
                fuse_abort(stuck_mount)
        raise
    except subprocess.TimeoutExpired:
        process.kill()
        try:
            process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            if stuck_mount:
                fuse_abort(stuck_mount)
            process.communicate()
        raise BenchError(f"timed out after {timeout} s: {' '.join(cmd)}")
    seconds = time.perf_counter() - start
    if check and process.returncode != 0:
        tail = " | ".join((err or out).strip().splitlines()[-3:])
        raise BenchError(f"{os.path.basename(cmd[0])} exited {process.returncode}: {tail}")
    return out, seconds


def flush():
    """sync(2) twice: a FUSE mount's writeback can dirty the store's ext4 pages after the
    first sync has passed ext4, and a delete of data not yet on disk is cheaper."""
    os.sync()
    os.sync()


def drop_caches():
    """sync, then drop the page, dentry and inode caches (the FUSE mounts' and ext4's).

    Also run before every create-heavy step: ext4 without a journal (this machine's root
    fs) avoids reusing an inode deleted in the last minute or more, and checks each
    candidate against the buffer cache, so creating files right after deleting thousands
    runs 5-10 times slower (seen: 5,000 creates 2.9 s instead of 0.43 s). Dropping the
    cache ends that, so every target starts its creates from the same state."""
    flush()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError as e:
        raise BenchError(f"cannot drop caches (root needed): {e}")


def daemon_pids(mountpoint):
    """Processes whose command line names mountpoint: the FUSE daemon serving it."""
    names = {mountpoint, os.path.realpath(mountpoint)}
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                args = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if names.intersection(args):
            pids.append(int(entry))
    return pids


def wait_mounted(mountpoint, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if is_fuse_mount(mountpoint):
            return
        time.sleep(0.05)
    raise BenchError(f"no FUSE mount appeared at {mountpoint} within {seconds} s")


def unmount(mountpoint, commands, daemons):
    """Tries each unmount command until the mount is gone, detaching lazily as a last
    resort, then waits for the daemon to exit (libfuse daemons take 1-2 s)."""
    if not is_fuse_mount(mountpoint):
        return
    fallbacks = [["fusermount3", "-uz", mountpoint], ["umount", "-l", mountpoint]]
    for cmd in list(commands) + fallbacks:
        try:
            run(cmd, timeout=30)
        except (BenchError, OSError) as e:
            log(f"  {' '.join(cmd)}: {e}")
        deadline = time.monotonic() + 10
        while is_fuse_mount(mountpoint) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not is_fuse_mount(mountpoint):
            break
    else:
        log(f"WARNING: {mountpoint} is still mounted")
    deadline = time.monotonic() + 10
    while daemons and time.monotonic() < deadline:
        daemons = [pid for pid in daemons if os.path.exists(f"/proc/{pid}")]
        time.sleep(0.1)
    if daemons:
        log(f"WARNING: daemon(s) {daemons} of {mountpoint} still running 10 s after unmount")


# ---------------------------------------------------------------------------------------
# Targets

class Target:
    """Where the workloads run: a directory, perhaps behind a mount."""
    key = label = ""

    def __init__(self):
        self.workdir = None
        self.error = None      # why this target cannot be measured (any more)
        self.mountpoint = None

    def setup(self):
        pass

    def teardown(self):
        pass

    def requests(self):
        """The requests the target's daemon has served so far, by kind, or None if it does
        not count them."""
        return None

    def alive(self):
        if self.mountpoint is None:
            return True
        return is_fuse_mount(self.mountpoint) and os.path.isdir(self.workdir)


class Native(Target):
    key, label = "native", "native ext4"

    def __init__(self, root):
        super().__init__()
        self.workdir = os.path.join(root, "native")

    def setup(self):
        os.makedirs(self.workdir)


class Mirror(Target):
    """A peer: a FUSE daemon mirroring a plain folder of the same disk."""
    unmount_with = ""   # the fusermount of the daemon's libfuse

    def __init__(self, root, name):
        super().__init__()
        self.source = os.path.join(root, f"{name}-src")
        self.mountpoint = os.path.join(root, f"{name}-mnt")
        self.workdir = self.mountpoint
        self.daemons = []

    def command(self):
        """The mount command, or raises BenchError saying what is missing."""
        raise NotImplementedError

    def setup(self):
        command = self.command()
        os.makedirs(self.source)
        os.makedirs(self.mountpoint)
        run(command, timeout=30)
        wait_mounted(self.mountpoint, 10)
        self.daemons = daemon_pids(self.mountpoint)

    def teardown(self):
        unmount(self.mountpoint, [[self.unmount_with, "-u", self.mountpoint],
                                  ["umount", self.mountpoint]], self.daemons)


class Bindfs(Mirror):
    key, label = "bindfs", "bindfs"
    unmount_with = "fusermount"   # Debian's bindfs links libfuse 2

    def __init__(self, root):
        super().__init__(root, "bindfs")

    def command(self):
        if not shutil.which("bindfs"):
            raise BenchError("bindfs is not installed (scripts/install-deps.sh --bench)")
        return ["bindfs", self.source, self.mountpoint]


class PassthroughHP(Mirror):
    """libfuse's passthrough_hp, as it runs by default (writeback cache, 86,400 s timeouts,
    splice, default_permissions): the peer the speed goals quote."""
    key, label = "passthrough_hp", "passthrough_hp"
    unmount_with = "fusermount3"

    def __init__(self, root, binary):
        super().__init__(root, "hp")
        self.binary = binary

    def command(self):
        if not self.binary or not os.access(self.binary, os.X_OK):
            raise BenchError("passthrough_hp was not built (bench/passthrough_hp.sh; BENCH_PASSTHROUGH_HP)")
        return [self.binary, self.source, self.mountpoint]


class ContainerfsMount:
    """One store, mounted once, shared by the targets in its areas."""

    def __init__(self, root, binary, name, options, counting=False):
        self.root = root
        self.binary = binary
        # -o count-requests: the daemon counts its requests by kind (a flag test per
        # request when off, an atomic add when on), read through the control socket.
        self.counting = counting
        self.options = ",".join(o for o in (options, "count-requests" if counting else "") if o)
        self.store = os.path.join(root, f"{name}-store")
        self.mountpoint = os.path.join(root, f"{name}-mnt")
        self.state = None   # None: not tried; True: mounted; str: the failure
        self.daemons = []

    def ensure(self):
        if self.state is None:
            try:
                self._mount()
                self.state = True
            except (BenchError, OSError) as e:
                self.state = str(e)
        if self.state is not True:
            raise BenchError(self.state)

    def _mount(self):
        if not self.binary or not os.access(self.binary, os.X_OK):
            raise BenchError(f"no containerfs binary at {self.binary} (make release)")
        bundle = os.path.join(self.root, os.path.basename(self.store) + "-bundle", "Bench.app")
        os.makedirs(bundle)
        with open(os.path.join(bundle, "Info.plist"), "w") as f:
            f.write('<?xml version="1.0" encoding="UTF-8"?>\n<plist version="1.0"><dict>'
                    "<key>CFBundleIdentifier</key><string>dev.containerfs.bench</string>"
                    "</dict></plist>\n")
        with open(os.path.join(bundle, "Bench"), "w") as f:
            f.write("#!/bin/sh\necho bench\n")
        os.chmod(os.path.join(bundle, "Bench"), 0o755)
        os.makedirs(self.mountpoint)
        try:
            run([self.binary, "create", self.store, "--bundle", bundle], timeout=60)
        except BenchError as e:
            raise BenchError(f"containerfs create failed: {e}")
        cmd = [self.binary, "mount", self.store, self.mountpoint]
        if self.options:
            cmd += ["-o", self.options]
        try:
            run(cmd, timeout=60)
        except BenchError as e:
            raise BenchError(f"containerfs mount failed: {e}")
        try:
            wait_mounted(self.mountpoint, 10)
        except BenchError as e:
            raise BenchError(f"containerfs mount returned but {e}")
        self.daemons = daemon_pids(self.mountpoint)

    def requests(self):
        """The daemon's answer to the control socket's `requests` command, as a dict."""
        if not self.counting or self.state is not True:
            return None
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as channel:
            channel.settimeout(10)
            channel.connect(os.path.join(self.store, ".containerfs", "control.sock"))
            channel.send(b"\0requests")
            words = channel.recv(65536).decode().split()
        if not words or words[0] != "requests" or words[1:] == ["off"]:
            raise BenchError(f"the daemon of {self.store} did not answer with request counts: {' '.join(words)}")
        return {name: int(count) for name, count in (word.split("=") for word in words[1:])}

    def teardown(self):
        if self.state is None:
            return
        unmount(self.mountpoint, [[self.binary, "unmount", self.mountpoint],
                                  ["fusermount3", "-u", self.mountpoint]], self.daemons)


class Containerfs(Target):
    def __init__(self, mount, area, key, label):
        super().__init__()
        self.mount = mount
        self.area = area
        self.key, self.label = key, label
        self.mountpoint = mount.mountpoint
        self.workdir = os.path.join(mount.mountpoint, area, "cfs-bench")

    def setup(self):
        self.mount.ensure()
        area = os.path.join(self.mount.mountpoint, self.area)
        if not os.path.isdir(area):
            raise BenchError(f"{area} is not a directory in the mounted container")
        os.mkdir(self.workdir)

    def requests(self):
        return self.mount.requests()

    def teardown(self):
        self.mount.teardown()


# ---------------------------------------------------------------------------------------
# The tree job's tarball

def debian_stdlib():
    """The standard library folder of Debian's python3 (stable for a Debian release), or of
    the interpreter running this script if there is no /usr/bin/python3."""
    for python in ("/usr/bin/python3", sys.executable):
        try:
            out = subprocess.run([python, "-c", "import sysconfig;print(sysconfig.get_paths()['stdlib'])"],
                                 capture_output=True, text=True, timeout=30).stdout.strip()
            if out and os.path.isdir(out):
                return out
        except OSError:
            pass
    raise BenchError("no Python standard library found for the tree job's tarball")


def tree_sources():
    """The stdlib folder, and the trees to pack as (host folder, name in the tarball,
    folder names to skip, folder-name prefixes to skip): real sources found on every Debian
    machine that has what install-deps.sh installs."""
    stdlib = debian_stdlib()
    sources = [(stdlib, os.path.basename(stdlib),
                {"__pycache__", "lib-dynload", "site-packages", "dist-packages"}, ("config-",))]
    for sub in ("linux", "asm-generic", "c++"):
        if os.path.isdir(f"/usr/include/{sub}"):
            sources.append((f"/usr/include/{sub}", f"include/{sub}", set(), ()))
    return stdlib, sources


def make_tarball(path):
    """Writes a deterministic tarball (sorted, owner 0, fixed mtime) of Debian's Python
    standard library sources and the C/C++ headers of /usr/include/{*.h,linux,asm-generic,c++}.
    Returns a description with its file count, bytes and SHA-256."""
    stdlib, sources = tree_sources()
    entries = []
    for host, name, skip_dirs, skip_prefixes in sources:
        for dirpath, dirnames, filenames in os.walk(host):
            dirnames[:] = sorted(d for d in dirnames
                                 if d not in skip_dirs and not d.startswith(skip_prefixes))
            rel = os.path.relpath(dirpath, host)
            arc = name if rel == "." else os.path.join(name, rel)
            entries.append((dirpath, arc))
            for filename in sorted(filenames):
                entries.append((os.path.join(dirpath, filename), os.path.join(arc, filename)))
    entries.append(("/usr/include", "include"))
    for filename in sorted(os.listdir("/usr/include")):
        full = os.path.join("/usr/include", filename)
        if filename.endswith(".h") and os.path.isfile(full) and not os.path.islink(full):
            entries.append((full, f"include/{filename}"))
    entries.sort(key=lambda e: e[1])
    files = size = 0
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        for host, arc in entries:
            info = tar.gettarinfo(host, arcname=f"cfs-bench-tree/{arc}")
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mtime = 1700000000
            if info.isreg():
                files += 1
                size += info.size
                with open(host, "rb") as f:
                    tar.addfile(info, f)
            elif info.isdir() or info.issym():
                tar.addfile(info)
    digest = subprocess.run(["sha256sum", path], capture_output=True, text=True).stdout.split()[0]
    return {"path": path, "files": files, "bytes": size, "sha256": digest,
            "tarball_bytes": os.path.getsize(path),
            "content": f"{stdlib} (minus __pycache__, lib-dynload, config-*) and "
                       "/usr/include/{*.h,linux,asm-generic,c++}"}


# ---------------------------------------------------------------------------------------
# Workloads

def fio(cfg, target, name, rw, bs, extra=()):
    timed = "--time_based" in extra
    # A sequential job stops after cfg.fio_cap seconds even if unfinished, which keeps a
    # slow target within the run's time bound; its MB/s is then over what it did.
    cap = () if timed else (f"--runtime={cfg.fio_cap}",)
    # psync, one job: one request at a time, as cp or a build does. --invalidate=0: the
    # harness decides what is cold (drop_caches), not fio. --fallocate=none: a plain
    # write, as cp or dd does, not fio's default preallocation.
    cmd = ["fio", f"--name={name}", f"--filename={os.path.join(target.workdir, 'seq.dat')}",
           f"--rw={rw}", f"--bs={bs}", f"--size={cfg.file_size}", "--ioengine=psync",
           "--numjobs=1", "--invalidate=0", "--fallocate=none", "--output-format=json",
           *cap, *extra]
    out, _ = run(cmd, timeout=cfg.fio_cap + 300, stuck_mount=target.mountpoint)
    report = json.loads(out[out.index("{"):])
    job = report["jobs"][0]
    if job.get("error"):
        raise BenchError(f"fio {name}: error {job['error']}")
    side = job["write"] if rw.endswith("write") else job["read"]
    if side["io_bytes"] <= 0:
        raise BenchError(f"fio {name}: moved no data")
    if not timed and side["io_bytes"] < cfg.file_size:
        NOTES.append(f"{target.label}: {name} stopped at the {cfg.fio_cap} s cap after "
                     f"{side['io_bytes'] >> 20} MiB of {cfg.file_size >> 20} MiB")
    return side["bw_bytes"] / 1e6


def fsbench(tool, target, *args):
    out, _ = run([tool, *map(str, args)], timeout=600, stuck_mount=target.mountpoint)
    values = dict(field.split("=") for field in out.split())
    return float(values["seconds"]), int(values["count"]), int(values["bytes"])


def sequential(cfg, target, record):
    path = os.path.join(target.workdir, "seq.dat")
    if os.path.exists(path):
        os.unlink(path)
    flush()
    record("seq_write", lambda: fio(cfg, target, "seqwrite", "write", "1M", ("--end_fsync=1",)))
    drop_caches()
    record("seq_read_cold", lambda: fio(cfg, target, "seqread-cold", "read", "1M"))
    # The cold read has just filled the caches: this pass is warm.
    record("seq_read_warm", lambda: fio(cfg, target, "seqread-warm", "read", "1M"))
    record("rand_read", lambda: fio(cfg, target, "randread", "randread", "4k",
                                    ("--time_based", f"--runtime={cfg.rand_seconds}",
                                     "--randrepeat=1")))
    os.unlink(path)


def direct(cfg, target, record):
    """A group of its own: a target without O_DIRECT (passthrough_hp answers EINVAL)
    fails this row only, not the other sequential ones."""
    flush()
    record("direct_write", lambda: fio(cfg, target, "directwrite", "write", "1M", ("--direct=1", "--end_fsync=1")))
    os.unlink(os.path.join(target.workdir, "seq.dat"))


def metadata(cfg, tool, target, record):
    folder = os.path.join(target.workdir, "meta")
    os.mkdir(folder)
    n = cfg.meta_files

    def expect(result, what):
        seconds, count, _ = result
        if count != n:
            raise BenchError(f"{what}: {count} entries, expected {n}")
        return seconds

    drop_caches()  # see drop_caches: the previous run's deletes must not slow these creates
    record("create", lambda: expect(fsbench(tool, target, "create", folder, n, cfg.meta_size), "create"))
    drop_caches()
    record("stat_cold", lambda: expect(fsbench(tool, target, "stat", folder, n), "stat"))
    record("stat_warm", lambda: expect(fsbench(tool, target, "stat", folder, n), "stat"))
    record("write_stat", lambda: expect(fsbench(tool, target, "writestat", folder, n, 4096), "write and stat"))
    record("list", lambda: expect(fsbench(tool, target, "list", folder), "list"))
    record("list_warm", lambda: expect(fsbench(tool, target, "list", folder), "list"))
    flush()
    record("unlink", lambda: expect(fsbench(tool, target, "unlink", folder, n), "unlink"))
    os.rmdir(folder)


def tree(tarball, tool, target, record):
    folder = os.path.join(target.workdir, "tree")
    os.mkdir(folder)
    drop_caches()  # see drop_caches: the metadata job's deletes must not slow the untar
    # The tarball is read from native disk: warm it so untar measures the target's writes.
    with open(tarball["path"], "rb") as f:
        while f.read(1 << 20):
            pass
    record("untar", lambda: run(["tar", "-xf", tarball["path"], "-C", folder],
                                timeout=600, stuck_mount=target.mountpoint)[1])

    def readall():
        seconds, count, size = fsbench(tool, target, "readall", folder)
        if (count, size) != (tarball["files"], tarball["bytes"]):
            raise BenchError(f"read {count} files / {size} bytes, the tarball holds "
                             f"{tarball['files']} / {tarball['bytes']}")
        return seconds

    flush()
    record("readall", readall)
    flush()

    def rmrf():
        seconds = run(["rm", "-rf", folder], timeout=600, stuck_mount=target.mountpoint)[1]
        if os.path.exists(folder):
            raise BenchError("rm -rf left the folder in place")
        return seconds

    record("rmrf", rmrf)


def chain_folders(target):
    """Three folders to move a chain between: a container's Documents, Library/Caches and
    tmp (its areas: each move reclassifies every node of the chain), else three siblings."""
    if isinstance(target, Containerfs):
        return [os.path.join(target.mountpoint, area) for area in ("Documents", "Library/Caches", "tmp")]
    return [os.path.join(target.workdir, name) for name in ("chain-a", "chain-b", "chain-c")]


def remove_chain(target):
    for folder in chain_folders(target):
        path = os.path.join(folder, "cfs-bench-chain")
        if os.path.lexists(path):
            run(["rm", "-rf", path], timeout=1800, stuck_mount=target.mountpoint, check=False)
        if folder.startswith(target.workdir) and os.path.isdir(folder):
            os.rmdir(folder)


def deep_move(cfg, target, record):
    """Issue 20 item 5: a folder chain cfg.chain_depth deep, every level known to the
    kernel (made through the target), renamed between three folders; the three renames are
    timed together."""
    folders = chain_folders(target)
    for folder in folders:
        os.makedirs(folder, exist_ok=True)
    fd = os.open(folders[0], os.O_RDONLY | os.O_DIRECTORY)
    first = fd
    try:
        for i in range(cfg.chain_depth):
            name = "cfs-bench-chain" if i == 0 else "d"
            os.mkdir(name, dir_fd=fd)
            child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            if fd != first:
                os.close(fd)
            fd = child
    finally:
        os.close(fd)
        if fd != first:
            os.close(first)

    def moves():
        start = time.monotonic()
        for source, destination in zip(folders, folders[1:] + folders[:1]):
            os.rename(os.path.join(source, "cfs-bench-chain"), os.path.join(destination, "cfs-bench-chain"))
        return time.monotonic() - start

    record("deep_move", moves)
    remove_chain(target)


# ---------------------------------------------------------------------------------------
# Requests per file

# The rows whose requests are counted, and what they are counted per: the metadata rows'
# files (cfg.meta_files) or the tree's (the tarball's files).
PER_FILE = {"create": "meta", "stat_cold": "meta", "stat_warm": "meta", "write_stat": "meta", "list": "meta",
            "list_warm": "meta", "unlink": "meta", "untar": "tree", "readall": "tree", "rmrf": "tree"}
# Requests the program does not wait for: the kernel sends them in the background.
NOT_WAITED = ("RELEASE", "RELEASEDIR", "FORGET", "BATCH_FORGET")


def settled_requests(target):
    """The target's counts once the requests a step left in flight (a RELEASE after the
    last close) have arrived: read until two reads 0.1 s apart agree (2 s at most)."""
    counts = target.requests()
    deadline = time.monotonic() + 2
    while counts is not None and time.monotonic() < deadline:
        time.sleep(0.1)
        again = target.requests()
        if again == counts:
            break
        counts = again
    return counts


def difference(after, before):
    return {name: count - before.get(name, 0) for name, count in after.items() if count > before.get(name, 0)}


def render_requests(cfg, targets, tarball, counted):
    """Requests per file for each row counted, from the first run of each target."""
    if not counted:
        return []
    files = {"meta": cfg.meta_files, "tree": tarball["files"]}
    lines = ["", "Requests per file (first run; counted by the daemon, -o count-requests): waited for,",
             "  then the kinds; RELEASE and FORGET are sent in the background (FORGET when the kernel drops a node)"]
    short = {"create": "create", "stat_cold": "stat cold", "stat_warm": "stat warm", "write_stat": "write+stat", "list": "list",
             "list_warm": "list warm", "unlink": "delete", "untar": "untar", "readall": "read-all", "rmrf": "rm -rf"}
    for target in targets:
        rows = [(key, counted[(target.key, key)]) for key, _, _, _ in workloads(cfg) if (target.key, key) in counted]
        if not rows:
            continue
        lines.append(f"  {target.label}")
        for key, counts in rows:
            n = files[PER_FILE[key]]
            waited = sum(c for name, c in counts.items() if name not in NOT_WAITED) / n
            # Kinds under 0.005 per file (a per-folder OPENDIR of a flat folder) left out.
            kinds = ", ".join(f"{name} {c / n:.2f}" for name, c in sorted(counts.items(), key=lambda item: -item[1])
                              if c / n >= 0.005)
            lines.append(f"    {short[key]:<11}{waited:>6.2f}   {kinds or 'none'}")
    return lines


# ---------------------------------------------------------------------------------------
# Figures and the table

def sig3(value):
    """Three significant digits, never an exponent."""
    if value == 0:
        return "0"
    digits = max(0, 2 - math.floor(math.log10(abs(value))))
    return f"{value:.{digits}f}"


def summarize(samples, kind, native):
    median = statistics.median(samples)
    ratio = None
    if native:
        ratio = median / native if kind == "rate" else native / median
    return median, min(samples), max(samples), ratio


def render(cfg, meta, targets, results, errors, counted=None):
    lines = []
    mode = ("QUICK (development figures: small sizes, 1 run each, not comparable to a full run)"
            if cfg.quick else f"FULL ({cfg.runs} runs per figure)")
    lines += [
        f"ContainerFS benchmark: {mode}",
        f"date        {meta['date']}   total time {meta['elapsed']:.0f} s",
        f"commit      {meta['commit']}",
        f"containerfs {meta['binary']}",
        f"machine     {meta['machine']}",
        f"disk        {meta['disk']}",
        f"tools       {meta['tools']}",
        f"tree        {meta['tarball']['content']}:",
        f"            {meta['tarball']['files']:,} files, {meta['tarball']['bytes'] / 1e6:.1f} MB, "
        f"tar sha256 {meta['tarball']['sha256'][:16]}",
        "",
    ]
    broken = [t for t in targets if t.error]
    if broken:
        lines += [f"*** TARGET FAILED: {t.label}: {t.error}" for t in broken] + [""]
    lines += [
        f"Each figure: median of {cfg.runs} run(s) (min-max). MB/s = 10^6 bytes/s, higher is better;",
        "s = seconds, lower is better. ratio = to native in this same run, higher is always better:",
        "  MB/s rows: target / native;   seconds rows: native / target.",
        "",
    ]
    width = max(len(t.label) for t in targets) + 2
    for key, label, unit, kind in workloads(cfg):
        goal = GOALS.get(key)
        lines.append(f"{label}  [{unit}]" + (f"   goal >= {goal}" if goal else ""))
        native = results.get(("native", key))
        native_median = statistics.median(native) if native else None
        for target in targets:
            samples = results.get((target.key, key))
            error = errors.get((target.key, key))
            if error or not samples:
                lines.append(f"  {target.label:<{width}}FAILED: {error or 'not measured'}")
                continue
            median, low, high, ratio = summarize(samples, kind, native_median)
            spread = f"({sig3(low)}-{sig3(high)})"
            lines.append(f"  {target.label:<{width}}{sig3(median):>8} {spread:<17}"
                         f"{f'{ratio:.2f}' if ratio is not None else '-':>6}")
        lines.append("")

    others = [t for t in targets if t.key != "native"]
    lines.append("Ratios to native (higher is better)")
    header = f"  {'workload':<26}{'goal':>6}" + "".join(f"{t.label:>{max(len(t.label), 6) + 2}}" for t in others)
    lines.append(header)
    short = {"seq_write": "seq write", "seq_read_cold": "seq read cold", "seq_read_warm": "seq read warm",
             "rand_read": "random read 4 KiB", "direct_write": "O_DIRECT write", "create": "create",
             "stat_cold": "stat cold", "stat_warm": "stat warm", "write_stat": "write+stat", "list": "list", "list_warm": "list warm", "unlink": "delete", "untar": "untar",
             "readall": "read-all", "rmrf": "rm -rf", "deep_move": "deep folder move"}
    missed = {t.key: [] for t in others}
    met = {t.key: 0 for t in others}
    ratios = {}
    for key, _, _, kind in workloads(cfg):
        goal = GOALS.get(key)
        row = f"  {short[key]:<26}{(f'{goal:.2f}' if goal else '-'):>6}"
        native = results.get(("native", key))
        for t in others:
            samples = results.get((t.key, key))
            cell = "FAIL"
            if native and samples and not errors.get((t.key, key)) and not errors.get(("native", key)):
                ratio = summarize(samples, kind, statistics.median(native))[3]
                ratios[(t.key, key)] = ratio
                cell = f"{ratio:.2f}"
                if goal is not None:
                    if ratio >= goal:
                        met[t.key] += 1
                    else:
                        missed[t.key].append(f"{short[key]} {ratio:.3f} < {goal}")
            elif goal is not None:
                missed[t.key].append(f"{short[key]} not measured")
            row += f"{cell:>{max(len(t.label), 6) + 2}}"
        lines.append(row)
    lines.append("")
    peers = [t for t in others if not t.key.startswith("containerfs") and not t.error]
    for t in others:
        if t.key.startswith("containerfs"):
            if t.error:
                lines.append(f"{t.label}: not measured: {t.error}")
                continue
            status = f"{met[t.key]}/{len(GOALS)} goals met"
            if missed[t.key]:
                status += "; missed: " + ", ".join(missed[t.key])
            lines.append(f"{t.label}: {status}")
            behind = [f"{short[key]} {ratios[(t.key, key)]:.2f} < {peer.label} {ratios[(peer.key, key)]:.2f}"
                      for key, _, _, _ in workloads(cfg) for peer in peers
                      if (t.key, key) in ratios and (peer.key, key) in ratios
                      and ratios[(t.key, key)] < ratios[(peer.key, key)]]
            compared = any((t.key, key) in ratios and (peer.key, key) in ratios
                           for key, _, _, _ in workloads(cfg) for peer in peers)
            if peers and compared:
                lines.append(f"  behind a peer on: {', '.join(behind)}" if behind else
                             f"  ahead of {' and '.join(p.label for p in peers)} on every row")
    compared = {t.key: t for t in targets}
    if "containerfs-base" in compared and "containerfs-documents" in compared:
        base = compared["containerfs-base"]
        lines += ["", f"containerfs Documents against {base.label} (same run; higher is better, < 1 is a regression)"]
        for key, _, _, kind in workloads(cfg):
            now, then = results.get(("containerfs-documents", key)), results.get(("containerfs-base", key))
            if now and then:
                ratio = summarize(now, kind, statistics.median(then))[3]
                lines.append(f"  {short[key]:<26}{ratio:>6.2f}")
    lines += render_requests(cfg, targets, meta["tarball"], counted or {})
    if NOTES:
        lines += ["", "Notes:"] + [f"  {note}" for note in NOTES]
    labels = {t.key: t.label for t in targets}
    failed = sorted({(labels[t], e) for (t, _), e in errors.items()})
    if failed:
        lines += ["", "Failures:"] + [f"  {t}: {e}" for t, e in failed]
    return "\n".join(lines) + "\n"


def describe(cfg, binary, root, tarball, elapsed):
    def version(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout.strip().splitlines()[0]
        except (OSError, IndexError, subprocess.TimeoutExpired):
            return "missing"

    commit = version(["git", "-C", REPO, "log", "-1", "--format=%h %s"])
    dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--", "Sources", "Package.swift"],
                           capture_output=True, text=True).stdout.strip()
    if dirty:
        commit += "  (+ uncommitted changes in Sources/)"
    if binary and os.path.exists(binary):
        stamp = datetime.datetime.fromtimestamp(os.path.getmtime(binary)).strftime("%Y-%m-%d %H:%M")
        binary_text = f"{binary} (built {stamp})"
    else:
        binary_text = f"{binary} (missing)"
    with open("/proc/meminfo") as f:
        memory = int(f.readline().split()[1]) / (1 << 20)
    fstype = "?"
    with open("/proc/self/mounts") as f:
        best = ""
        for line in f:
            device, point, kind = line.split()[:3]
            if root.startswith(point) and len(point) >= len(best):
                best, fstype = point, f"{kind} on {device}"
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "elapsed": elapsed,
        "commit": commit,
        "binary": binary_text,
        "machine": f"{os.cpu_count()} cores, {memory:.0f} GiB, kernel {platform.release()}",
        "disk": f"{root}: {fstype}",
        "tools": f"{version(['fio', '--version'])}, {version(['bindfs', '--version'])}, "
                 f"{os.path.basename(os.environ.get('BENCH_PASSTHROUGH_HP') or 'passthrough_hp (missing)')}, "
                 f"{version(['tar', '--version'])}",
        "tarball": tarball,
    }


# ---------------------------------------------------------------------------------------

def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("binary", help="the containerfs binary (e.g. .build/release/containerfs)")
    parser.add_argument("--quick", action="store_true", default=os.environ.get("BENCH_QUICK") == "1",
                        help="small sizes and 1 run, for development (also BENCH_QUICK=1)")
    parser.add_argument("--runs", type=int, default=int(os.environ.get("BENCH_RUNS", "0")),
                        help="runs per figure (default 3, quick 1; also BENCH_RUNS)")
    parser.add_argument("--targets", default=os.environ.get("BENCH_TARGETS", "native,bindfs,passthrough_hp,cfs-documents,cfs-caches,cfs-uring"),
                        help="comma-separated subset of native,bindfs,passthrough_hp,cfs-documents,cfs-caches,cfs-uring, "
                             "and cfs-power (Documents with -o power-loss; not in the default set)")
    parser.add_argument("--root", default=os.environ.get("BENCH_ROOT", "/var/tmp/cfs-bench"),
                        help="scratch folder on the disk under test (emptied first)")
    parser.add_argument("--output", default=os.environ.get("BENCH_OUTPUT"),
                        help="results file (default bench/results/latest.txt, quick: quick.txt)")
    parser.add_argument("--groups", default=os.environ.get("BENCH_GROUPS", ""),
                        help="only these workload groups: sequential,direct,metadata,tree,deep (also BENCH_GROUPS)")
    parser.add_argument("--base", default=os.environ.get("BENCH_BASE"),
                        help="another containerfs binary (an older commit's, bench/compare.sh builds one) "
                             "measured beside BINARY in Documents/, in the same run (also BENCH_BASE)")
    parser.add_argument("--base-label", default=os.environ.get("BENCH_BASE_LABEL", "base"),
                        help="what the base binary is called in the table (its commit)")
    parser.add_argument("--options", default=os.environ.get("BENCH_CFS_OPTIONS", ""),
                        help="extra -o options for containerfs mount (also BENCH_CFS_OPTIONS)")
    args = parser.parse_args()

    if os.geteuid() != 0:
        sys.exit("bench: must run as root (drop_caches, mounts)")
    only_deep = args.groups.replace(" ", "") == "deep"
    for tool in ("cc", "tar") if only_deep else ("fio", "cc", "tar"):
        if not shutil.which(tool):
            sys.exit(f"bench: {tool} is missing (scripts/install-deps.sh --bench)")
    cfg = Config(args.quick, args.runs or (1 if args.quick else 3))
    if not cfg.quick and cfg.runs < 3:
        sys.exit("bench: a full run needs at least 3 runs per figure")
    binary = os.path.abspath(args.binary) if args.binary else None
    root = os.path.abspath(args.root)
    output = args.output or os.path.join(HERE, "results", "quick.txt" if cfg.quick else "latest.txt")

    started = time.monotonic()
    if os.path.exists(root):
        # A previous run killed hard may have left mounts: never rm -rf through them.
        for leftover in reversed(mounts_under(root)):
            unmount(leftover, [["umount", leftover]], [])
        if mounts_under(root):
            sys.exit(f"bench: cannot clear {root}: still mounted: {', '.join(mounts_under(root))}")
        shutil.rmtree(root)
    scratch = os.path.join(root, "run")
    os.makedirs(scratch)

    tool = os.path.join(scratch, "fsbench")
    run(["cc", "-O2", "-Wall", "-o", tool, os.path.join(HERE, "fsbench.c")], timeout=120)
    log("bench: making the tree tarball")
    tarball = make_tarball(os.path.join(scratch, "tree.tar"))
    log(f"bench: tarball {tarball['files']} files, {tarball['bytes'] / 1e6:.1f} MB")

    every = {"native": lambda: Native(root), "bindfs": lambda: Bindfs(root),
             "passthrough_hp": lambda: PassthroughHP(root, os.environ.get("BENCH_PASSTHROUGH_HP"))}
    # Requests through /dev/fuse (the kernel's default), and through io_uring: -o uring
    # turns the kernel's machine-wide switch on, put back as it was at the end.
    extra = "," + args.options if args.options else ""
    device = ContainerfsMount(root, binary, "cfs", "nouring" + extra, counting=True)
    rings = ContainerfsMount(root, binary, "cfs-uring", "uring" + extra, counting=True)
    every["cfs-documents"] = lambda: Containerfs(device, "Documents", "containerfs-documents", "containerfs Documents")
    every["cfs-caches"] = lambda: Containerfs(device, "Library/Caches", "containerfs-caches", "containerfs Library/Caches")
    every["cfs-uring"] = lambda: Containerfs(rings, "Documents", "containerfs-uring", "containerfs Documents io_uring")
    # Opt-in: a third mount with the power-loss mode (docs/power-loss.md), for its cost.
    durable = ContainerfsMount(root, binary, "cfs-power", "nouring,power-loss" + extra, counting=True)
    every["cfs-power"] = lambda: Containerfs(durable, "Documents", "containerfs-power", "containerfs Documents power-loss")
    if args.base:
        # Same options but io_uring's: the base may predate -o uring/nouring.
        base = ContainerfsMount(root, os.path.abspath(args.base), "cfs-base", args.options)
        every["cfs-base"] = lambda: Containerfs(base, "Documents", "containerfs-base", f"containerfs Documents {args.base_label}")
        if "cfs-base" not in args.targets.split(","):
            args.targets += ",cfs-base"
    uring_switch = "/sys/module/fuse/parameters/enable_uring"
    uring_before = open(uring_switch).read() if os.path.exists(uring_switch) else None
    wanted = [name.strip() for name in args.targets.split(",") if name.strip()]
    unknown = [name for name in wanted if name not in every]
    if unknown or "native" not in wanted:
        sys.exit(f"bench: --targets must include native and be among {', '.join(every)}")
    targets = [every[name]() for name in wanted]

    groups = {"sequential": ("seq_write", "seq_read_cold", "seq_read_warm", "rand_read"),
              "direct": ("direct_write",),
              "metadata": ("create", "stat_cold", "stat_warm", "write_stat", "list", "list_warm", "unlink"),
              "tree": ("untar", "readall", "rmrf"),
              "deep": ("deep_move",)}
    only = [name.strip() for name in args.groups.split(",") if name.strip()] if args.groups else list(groups)
    if any(name not in groups for name in only):
        sys.exit(f"bench: --groups must be among {', '.join(groups)}")
    groups = {name: keys for name, keys in groups.items() if name in only}
    cfg.keys = {key for keys in groups.values() for key in keys}
    results, errors = {}, {}
    counted = {}   # (target, row): the requests the row's first run cost, by kind
    try:
        for target in targets:
            try:
                target.setup()
                log(f"bench: {target.label} ready at {target.workdir}")
            except (BenchError, OSError) as e:
                target.error = f"{e}"
                log(f"bench: FAILED to set up {target.label}: {e}")
        for round_ in range(1, cfg.runs + 1):
            # Each round starts one target later, so that no target always follows the
            # same one: the disk is faster or slower depending on what was just deleted.
            shift = (round_ - 1) % len(targets)
            for target in targets[shift:] + targets[:shift]:
                for group, keys in groups.items():
                    if target.error or any((target.key, key) in errors for key in keys):
                        continue  # a failed group is not retried: its rows stay failed

                    def record(key, measure, target=target, round_=round_):
                        try:
                            # Counted outside the timing, in the first run only.
                            count = round_ == 1 and key in PER_FILE
                            before = settled_requests(target) if count else None
                            value = measure()
                            if before is not None:
                                counted[(target.key, key)] = difference(settled_requests(target), before)
                        except (BenchError, OSError, ValueError, KeyError) as e:
                            raise StepFailed(key, str(e)) from e
                        results.setdefault((target.key, key), []).append(value)
                        log(f"  [{round_}/{cfg.runs}] {target.label}: {key} {sig3(value)}")

                    try:
                        if group == "sequential":
                            sequential(cfg, target, record)
                        elif group == "direct":
                            direct(cfg, target, record)
                        elif group == "metadata":
                            metadata(cfg, tool, target, record)
                        elif group == "tree":
                            tree(tarball, tool, target, record)
                        else:
                            deep_move(cfg, target, record)
                    except (StepFailed, BenchError, OSError) as e:
                        failed = e.key if isinstance(e, StepFailed) else None
                        message = e.message if isinstance(e, StepFailed) else str(e)
                        log(f"  [{round_}/{cfg.runs}] {target.label}: {failed or group} FAILED: {message}")
                        for key in keys:
                            if key == failed or failed is None:
                                errors[(target.key, key)] = message
                            elif len(results.get((target.key, key), [])) < round_:
                                errors[(target.key, key)] = f"not measured: {failed} failed"
                        # Leave nothing behind for the next group or run.
                        for leftover in ("seq.dat", "meta", "tree"):
                            try:
                                run(["rm", "-rf", os.path.join(target.workdir, leftover)],
                                    timeout=300, stuck_mount=target.mountpoint, check=False)
                            except (BenchError, OSError):
                                pass
                        try:
                            remove_chain(target)
                        except (BenchError, OSError):
                            pass
                    if not target.alive():
                        target.error = "the mount went away (did the daemon die?)"
                        log(f"bench: {target.label}: {target.error}")
    finally:
        log("bench: unmounting")
        seen = set()
        for target in reversed(targets):
            owner = getattr(target, "mount", target)
            if id(owner) in seen:
                continue
            seen.add(id(owner))
            try:
                target.teardown()
            except Exception as e:  # keep tearing down the others
                log(f"bench: teardown of {target.label}: {e}")
        left = mounts_under(root)
        if left:
            log(f"bench: WARNING: still mounted: {', '.join(left)}")
        if uring_before is not None:
            with open(uring_switch, "w") as f:
                f.write(uring_before)

    for target in targets:
        for key, _, _, _ in workloads(cfg):
            samples = results.get((target.key, key), [])
            if target.error:
                errors.setdefault((target.key, key), target.error)
            elif len(samples) < cfg.runs:
                errors.setdefault((target.key, key), f"only {len(samples)} of {cfg.runs} runs succeeded")

    meta = describe(cfg, binary, root, tarball, time.monotonic() - started)
    table = render(cfg, meta, targets, results, errors, counted)
    print(table, end="")
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    with open(output, "w") as f:
        f.write(table)
    with open(os.path.splitext(output)[0] + ".json", "w") as f:
        json.dump({"meta": meta, "quick": cfg.quick, "runs": cfg.runs,
                   "samples": {f"{t}/{w}": v for (t, w), v in sorted(results.items())},
                   "requests": {f"{t}/{w}": v for (t, w), v in sorted(counted.items())},
                   "errors": {f"{t}/{w}": e for (t, w), e in sorted(errors.items())}}, f, indent=1)
        f.write("\n")
    log(f"bench: wrote {output}")
    if not mounts_under(root):   # never delete through a mount left behind
        shutil.rmtree(root, ignore_errors=True)
    if errors:
        log(f"bench: FAILED: {len(errors)} figure(s) could not be measured (see Failures above)")
        return 1
    return 0


def on_signal(number, _frame):
    raise KeyboardInterrupt(f"signal {number}")


if __name__ == "__main__":
    # SIGINT too: a shell starting this in the background without job control ignores
    # SIGINT, and python would then inherit the ignoring and never clean up on Ctrl-C.
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    try:
        sys.exit(main())
    except KeyboardInterrupt as e:
        log(f"bench: interrupted ({e})")
        sys.exit(130)
