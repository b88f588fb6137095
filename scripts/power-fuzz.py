#!/usr/bin/env python3
"""The power-loss fuzzer (docs/power-loss.md): seeded random programs against a model of what
a power failure must leave, each on a fresh `mount -o power-loss`, then `power-cut`, then every
durable name's bytes compared with the store.

    scripts/power-fuzz.py SEED [--count N] [--kind data|names] [--ops N] [--files N]
                          [--model posix|ext4] [--descriptors N] [--log]

`data`: files in two folders, written past their end, truncated down and up, punched and zeroed
(fallocate), copied into (copy_file_range), rewritten with O_TRUNC and O_SYNC, hard-linked,
renamed (over recorded files, across the folders), removed and made, through fresh and
long-open descriptors, with fsync and fdatasync of files and folders between. `names`: a tree of
folders and files made, renamed (also with RENAME_EXCHANGE), linked, removed, written and
synced. `--descriptors N` runs the daemon with `ulimit -n N`: its records then run out, and a
change refused with EIO must have changed nothing. Prints one line a seed (with each operation
after a failure, `--log` always) and exits 1 if one failed. Needs root or a user who can mount;
CONTAINERFS names the binary (default: .build/debug/containerfs).
"""
import argparse, ctypes, os, random, shutil, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = os.environ.get("CONTAINERFS", os.path.join(ROOT, ".build/debug/containerfs"))
libc = ctypes.CDLL(None, use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
PUNCH, KEEP_SIZE, ZERO = 0x02, 0x01, 0x10
AT_FDCWD, RENAME_EXCHANGE = -100, 2


class Node:
    """A file or folder of the model: what it holds now is read back through the mount."""
    def __init__(self, folder=False):
        self.folder = folder
        self.durable = b""          # a file's bytes as of its last sync
        self.names = {}             # a folder's names now
        self.durable_names = {}     # as of its last fsync
        self.partners = set()       # folders a rename joined it to since
        self.ordered = set()        # files renamed over a name of it since


def fsync_path(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def mounted(model, descriptors):
    """A fresh store mounted with power-loss: (base, store, mountpoint)."""
    base = tempfile.mkdtemp(prefix="containerfs-power-fuzz-")
    os.makedirs(base + "/Fuzz.app")
    with open(base + "/Fuzz.app/Info.plist", "w") as f:
        f.write("<plist>fuzz</plist>\n")
    store, mnt = base + "/store", base + "/mnt"
    os.makedirs(mnt)
    subprocess.run([BINARY, "create", store, "--bundle", base + "/Fuzz.app"], check=True, capture_output=True)
    option = "power-loss=ext4" if model == "ext4" else "power-loss"
    if descriptors:
        subprocess.Popen(["/bin/sh", "-c", 'ulimit -n %d && exec "$0" mount -f -o %s "$1" "$2"' % (descriptors, option),
                          BINARY, store, mnt], stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not os.path.ismount(mnt) and time.monotonic() < deadline:
            time.sleep(0.05)
    else:
        subprocess.run([BINARY, "mount", store, mnt, "-o", option], check=True, capture_output=True)
    return base, store, mnt


class Fuzz:
    def __init__(self, seed, options):
        self.rnd = random.Random(seed)
        self.options = options
        self.ext4 = options.model == "ext4"
        self.count = 0
        self.fds = {}   # descriptor -> Node

    def data(self, n):
        return bytes(self.rnd.randrange(256) for _ in range(n))

    def new_name(self, prefix):
        self.count += 1
        return "%s%d" % (prefix, self.count)

    # The model's folders: (path relative to the top, Node), every name of every folder.
    def folders(self, node=None, path=""):
        node = node or self.top
        found = [(path, node)]
        for name, child in sorted(node.names.items()):
            if child.folder:
                found += self.folders(child, path + "/" + name)
        return found

    def entries(self):
        return [(path + "/" + name, folder, name, child)
                for path, folder in self.folders() for name, child in sorted(folder.names.items())]

    def current(self, node):
        for path, _, _, child in self.entries():
            if child is node:
                with open(self.root + path, "rb") as f:
                    return f.read()
        for fd, other in self.fds.items():
            if other is node:
                return os.pread(fd, os.fstat(fd).st_size, 0)
        return None

    def folder_synced(self, folder):
        """`folder`'s names are durable, with those of the folders renames joined it to (every
        folder under ext4's model), and the data of the files renamed over names there."""
        pending = [node for _, node in self.folders()] if self.ext4 else [folder]
        seen = set()
        while pending:
            node = pending.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            pending += node.partners
            node.durable_names = dict(node.names)
            for moved in node.ordered:
                data = self.current(moved)
                if data is not None:
                    moved.durable = data
            node.ordered, node.partners = set(), set()

    def file_synced(self, node):
        node.durable = self.current(node)
        if self.ext4:
            self.folder_synced(self.top)

    def run(self, root):
        """Sets up, then runs the operations; returns their log."""
        self.root = root
        self.top = Node(folder=True)
        os.mkdir(root)
        fsync_path(os.path.dirname(root))
        self.top.durable_names = {}
        if self.options.kind == "data":
            for name in ["d0", "d1"]:
                os.mkdir(root + "/" + name)
                self.top.names[name] = Node(folder=True)
            for i in range(self.options.files):
                node, folder = Node(), self.rnd.choice(["d0", "d1"])
                node.durable = self.data(self.rnd.choice([0, 10, 4096, 9000]))
                with open("%s/%s/f%d" % (root, folder, i), "wb") as f:
                    f.write(node.durable)
                    f.flush()
                    os.fsync(f.fileno())
                self.top.names[folder].names["f%d" % i] = node
            for path, node in self.folders():
                fsync_path(root + path)
                node.durable_names = dict(node.names)
        log = []
        for step in range(self.options.ops):
            kinds = (["write"] * 5 + ["truncate", "truncate", "fsync", "fsync", "fdatasync", "osync", "fallocate",
                                      "fallocate", "copy", "otrunc", "open", "close"]
                     if self.options.kind == "data" else ["mkdir", "mkdir", "write", "rmdir", "exchange"])
            kinds += ["create", "create", "link", "rename", "rename", "unlink", "dirsync", "dirsync", "fsync"]
            kind = self.rnd.choice(kinds)
            try:
                line = self.operate(kind)
            except OSError as error:
                if error.errno == 5 and self.options.descriptors:
                    line = "%s: refused (EIO)" % kind   # refused: nothing changed
                else:
                    log.append("%d %s: %s" % (step, kind, error))
                    raise AssertionError("step %d %s: %s" % (step, kind, error)) from None
            if line:
                log.append("%d %s" % (step, line))
        for fd in self.fds:
            os.close(fd)
        return log

    def operate(self, kind):
        rnd, root = self.rnd, self.root
        files = [e for e in self.entries() if not e[3].folder]
        folders = [f for f in self.folders() if self.options.kind == "names" or f[0]]
        if kind in ("write", "truncate", "fsync", "fdatasync", "fallocate"):
            if not files and not (kind != "write" and self.fds):
                return None
            if self.fds and (rnd.random() < 0.3 or not files):
                fd = rnd.choice(sorted(self.fds))
                node, label, mine = self.fds[fd], "descriptor %d" % fd, False
            else:
                path, _, _, node = rnd.choice(files)
                fd, label, mine = os.open(root + path, os.O_RDWR), path, True
            try:
                size = os.fstat(fd).st_size
                if kind == "write":
                    offset, count = rnd.randrange(0, size + 9000), rnd.choice([1, 100, 4096, 5000])
                    os.pwrite(fd, self.data(count), offset)
                    label += " @%d +%d" % (offset, count)
                elif kind == "truncate":
                    size = rnd.choice([0, size // 2, size + rnd.randrange(1, 9000)])
                    os.ftruncate(fd, size)
                    label += " to %d" % size
                elif kind == "fallocate":
                    mode = rnd.choice([PUNCH | KEEP_SIZE, ZERO, KEEP_SIZE, 0])
                    offset, count = rnd.randrange(0, size + 3000), rnd.randrange(1, 9000)
                    if libc.fallocate(fd, mode, offset, count) != 0:
                        error = ctypes.get_errno()
                        raise OSError(error, os.strerror(error))
                    label += " mode %#x @%d +%d" % (mode, offset, count)
                else:
                    (os.fsync if kind == "fsync" else os.fdatasync)(fd)
                    self.file_synced(node)
            finally:
                if mine:
                    os.close(fd)
            return "%s %s" % (kind, label)
        if kind == "osync":
            if not files:
                return None
            path, _, _, node = rnd.choice(files)
            fd = os.open(root + path, os.O_WRONLY | rnd.choice([os.O_SYNC, os.O_DSYNC]))
            try:
                os.pwrite(fd, self.data(100), rnd.randrange(0, os.fstat(fd).st_size + 3000))
            finally:
                os.close(fd)
            self.file_synced(node)
            return "osync " + path
        if kind == "copy":
            if len(files) < 2:
                return None
            (source, _, _, a), (target, _, _, b) = rnd.sample(files, 2)
            if a is b:
                return None
            input, output = os.open(root + source, os.O_RDONLY), os.open(root + target, os.O_WRONLY)
            try:
                offset = rnd.randrange(0, os.fstat(input).st_size + 1)
                os.copy_file_range(input, output, rnd.randrange(1, 20000), offset, rnd.randrange(0, os.fstat(output).st_size + 5000))
            finally:
                os.close(input)
                os.close(output)
            return "copy %s %s" % (source, target)
        if kind == "otrunc":
            if not files:
                return None
            path = rnd.choice(files)[0]
            with open(root + path, "wb") as f:
                f.write(self.data(rnd.choice([0, 10, 3000])))
            return "otrunc " + path
        if kind == "open":
            if not files or len(self.fds) >= 4:
                return None
            path, _, _, node = rnd.choice(files)
            fd = os.open(root + path, os.O_RDWR)
            self.fds[fd] = node
            return "open %s: descriptor %d" % (path, fd)
        if kind == "close":
            if not self.fds:
                return None
            fd = rnd.choice(sorted(self.fds))
            os.close(fd)
            del self.fds[fd]
            return "close descriptor %d" % fd
        if kind in ("create", "mkdir"):
            path, folder = rnd.choice(folders)
            name = self.new_name("c" if kind == "create" else "m")
            node, synced = Node(folder=kind == "mkdir"), False
            if kind == "mkdir":
                os.mkdir(root + path + "/" + name)
            else:
                with open(root + path + "/" + name, "wb") as f:
                    f.write(self.data(rnd.choice([0, 5, 4096])))
                    if rnd.random() < 0.3:
                        f.flush()
                        os.fsync(f.fileno())
                        synced = True
            folder.names[name] = node
            if synced:
                self.file_synced(node)
            return "%s %s/%s%s" % (kind, path, name, " (synced)" if synced else "")
        if kind == "dirsync":
            path, folder = rnd.choice(folders)
            fsync_path(root + path)
            self.folder_synced(folder)
            return "dirsync " + (path or "/")
        if kind == "unlink":
            if not files:
                return None
            path, folder, name, _ = rnd.choice(files)
            os.unlink(root + path)
            del folder.names[name]
            return "unlink " + path
        if kind == "rmdir":
            empty = [e for e in self.entries() if e[3].folder and not e[3].names]
            if not empty:
                return None
            path, folder, name, _ = rnd.choice(empty)
            os.rmdir(root + path)
            del folder.names[name]
            return "rmdir " + path
        if kind == "link":
            if not files:
                return None
            path, _, _, node = rnd.choice(files)
            target, folder = rnd.choice(folders)
            name = self.new_name("l")
            os.link(root + path, root + target + "/" + name)
            folder.names[name] = node
            return "link %s %s/%s" % (path, target, name)
        entries = self.entries() if self.options.kind == "names" else files
        if kind == "exchange":
            if len(entries) < 2:
                return None
            (a, fa, ka, na), (b, fb, kb, nb) = rnd.sample(entries, 2)
            if na is nb or (na.folder and self.inside(na, fb)) or (nb.folder and self.inside(nb, fa)):
                return None
            if libc.renameat2(AT_FDCWD, (root + a).encode(), AT_FDCWD, (root + b).encode(), RENAME_EXCHANGE) != 0:
                error = ctypes.get_errno()
                raise OSError(error, os.strerror(error))
            fa.names[ka], fb.names[kb] = nb, na
            self.join(fa, fb)
            return "exchange %s %s" % (a, b)
        if kind == "rename":
            if not entries:
                return None
            path, source, name, node = rnd.choice(entries)
            target_path, target = rnd.choice(folders)
            if node.folder and self.inside(node, target):
                return None
            over = [k for k, v in target.names.items()
                    if v.folder == node.folder and v is not node and not (v.folder and v.names)]
            new = rnd.choice(sorted(over)) if over and rnd.random() < 0.5 else self.new_name("r")
            replaced = target.names.get(new)
            os.rename(root + path, root + target_path + "/" + new)
            del source.names[name]
            target.names[new] = node
            self.join(source, target)
            if replaced is not None and not node.folder:
                target.ordered.add(node)   # ext4's auto_da_alloc: its data with the rename
            return "rename %s %s/%s%s" % (path, target_path, new, " (over)" if replaced is not None else "")
        return None

    def inside(self, folder, node):
        return any(other is node for _, other in self.folders(folder))

    @staticmethod
    def join(a, b):
        if a is not b:
            a.partners.add(b)
            b.partners.add(a)

    def compare(self, stored):
        """What the store holds against the durable tree: a list of differences."""
        problems = []

        def check(node, path):
            have = sorted(os.listdir(stored + path))
            if have != sorted(node.durable_names):
                problems.append("%s: names %s, durable %s" % (path or "/", have, sorted(node.durable_names)))
            for name, child in sorted(node.durable_names.items()):
                if name not in have:
                    continue
                if child.folder:
                    check(child, path + "/" + name)
                    continue
                with open(stored + path + "/" + name, "rb") as f:
                    got = f.read()
                if got != child.durable:
                    problems.append("%s/%s: %d bytes, %d durable" % (path, name, len(got), len(child.durable)))

        check(self.top, "")
        return problems


def fuzz(seed, options):
    base, store, mnt = mounted(options.model, options.descriptors)
    log, failure = [], None
    try:
        pid = int(open(store + "/.containerfs/mount.lock").read().split()[0])
        fuzzer = Fuzz(seed, options)
        try:
            log = fuzzer.run(mnt + "/Documents/fuzz")
        except AssertionError as error:
            failure = str(error)
        cut = subprocess.run([BINARY, "power-cut", store], capture_output=True, text=True)
        again = subprocess.run([BINARY, "power-cut", store], capture_output=True, text=True)
        if cut.returncode != 0 or again.returncode != 0:
            failure = failure or "power-cut failed: %s%s" % (cut.stderr, again.stderr)
        if not os.path.exists("/proc/%d" % pid):
            failure = failure or "the daemon died"
        if not failure:
            problems = fuzzer.compare(store + "/Documents/fuzz")
            failure = "; ".join(problems) if problems else None
        print("%s seed %d: %s" % (options.kind, seed, "FAILED: " + failure if failure else "ok, " + cut.stdout.strip()))
        if failure or options.log:
            print("\n".join("  " + line for line in log))
        return failure is None
    finally:
        subprocess.run([BINARY, "unmount", mnt], capture_output=True)
        subprocess.run(["fusermount3", "-uz", mnt], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("seed", type=int)
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--kind", choices=["data", "names"], default="data")
    parser.add_argument("--ops", type=int, default=200)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--model", choices=["posix", "ext4"], default="posix")
    parser.add_argument("--descriptors", type=int, default=0)
    parser.add_argument("--log", action="store_true")
    options = parser.parse_args()
    ok = True
    for seed in range(options.seed, options.seed + options.count):
        ok = fuzz(seed, options) and ok
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
