#!/usr/bin/env python3
"""The capacity soak (SPEC §10, docs/capacity.md): random workloads through a mount with a
capacity, checked against an independent walk of the store.

    scripts/capacity-soak.py SEED [--rounds N] [--workers K] [--ops N] [--capacity SIZE]

Each round, K processes at once run N random operations each (writes to one shared file and
to many files, pwrite at random offsets, O_DIRECT, mmap writes and msync, O_TRUNC rewrites (also of one file in a row),
truncate up and down, fallocate and hole punching, O_TMPFILE closed or linked, hard links,
plain renames, RENAME_EXCHANGE, a rename over an open file, unlink while open, xattrs,
sqlite3 and git, cache and tmp files written whole under their size's name and some
hard-linked into Documents). Meanwhile `containerfs purge --caches --tmp --include-running`
runs against the live mount once or twice a round. After each round, and after an unmount
and a mount:

- the daemon's count (from its control socket; statfs shows no count past the capacity)
  equals the walk: the
  blocks (st_blocks * 512) of every distinct inode of the store but the state folder;
- the store never holds more than the capacity + 1 MiB;
- every ENOSPC came when the walk said the container was near full (within 3 MiB per
  worker + 2 MiB of its capacity: the others write and delete meanwhile);
- every file written and fsynced (and not deleted since by its writer) holds its data;
- each purge deleted only files below Library/Caches and tmp; each whole cache file it
  reports has the size its name gives and frees all of it or, while another name keeps
  it, nothing; its total is the sum of its files; a file caught while written reports no
  more than it was going to hold; and every hard link into Documents still holds its data.

The seed decides every choice; the interleaving of the processes is the machine's. A
failure prints the seed: run the script again with it to replay. With SOAK_TRACE=1 and
--workers 1 the count is checked after every operation, which names the culprit. Needs
root (it mounts); CONTAINERFS names the binary (default: .build/debug/containerfs).
"""
import argparse, ctypes, errno, hashlib, mmap, multiprocessing, os, random, shutil, sqlite3
import json, re, socket, subprocess, sys, tempfile, threading, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = os.environ.get("CONTAINERFS", os.path.join(ROOT, ".build/debug/containerfs"))
MIB = 1 << 20
libc = ctypes.CDLL(None, use_errno=True)
RENAME_EXCHANGE = 2
FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE = 1, 2


class SoakFailure(Exception):
    pass


def run(*arguments):
    result = subprocess.run(list(arguments), capture_output=True, text=True)
    if result.returncode != 0:
        raise SoakFailure("%s: exit %d: %s%s" % (" ".join(arguments), result.returncode, result.stdout, result.stderr))
    return result.stdout


def walk(store):
    """The store's bytes as the capacity counts them, computed here independently: the blocks
    of each distinct inode below the root, the root included, the state folder excluded."""
    total, seen = 0, set()
    try:
        total = os.lstat(store).st_blocks * 512
    except OSError:
        return 0
    stack = [store]
    while stack:
        top = stack.pop()
        try:
            names = os.listdir(top)
        except OSError:
            continue  # a folder renamed or removed meanwhile
        for name in names:
            if top == store and name == ".containerfs":
                continue
            path = os.path.join(top, name)
            try:
                info = os.lstat(path)
            except OSError:
                continue
            if info.st_ino in seen:
                continue
            seen.add(info.st_ino)
            total += info.st_blocks * 512
            if (info.st_mode & 0o170000) == 0o040000:
                stack.append(path)
    return total


def daemon_used(mountpoint, store):
    """The daemon's count, as its control socket answers an empty batch (`ok SERVED USED`):
    statfs cannot show a count past the capacity (free is then 0), which the store may
    reach by up to a request."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as control:
            control.settimeout(10)
            control.connect(os.path.join(store, ".containerfs", "control.sock"))
            control.send(b"")  # the end of the batch
            words = control.recv(64).decode().split()
        if len(words) == 3 and words[0] == "ok":
            return int(words[2])
    except (OSError, ValueError):
        pass
    device = os.statvfs(mountpoint)
    return (device.f_blocks - device.f_bavail) * device.f_frsize


def digest(data):
    return hashlib.sha256(data).hexdigest()


class Worker:
    """One process of a round: random operations in its own folder and the shared ones."""

    def __init__(self, seed, round, number, mountpoint, store, capacity, ops, near):
        self.random = random.Random("%d/%d/%d" % (seed, round, number))
        self.number, self.mountpoint, self.store, self.capacity, self.ops, self.near = number, mountpoint, store, capacity, ops, near
        self.own = os.path.join(mountpoint, "Documents", "w%d" % number)
        self.kept = os.path.join(self.own, "kept")
        self.shared = os.path.join(mountpoint, "Documents", "shared")
        # Purge candidates, and the other names some of them get in Documents.
        self.purgeable = [os.path.join(mountpoint, "Library", "Caches", "w%d" % number), os.path.join(mountpoint, "tmp", "w%d" % number)]
        self.links = os.path.join(self.own, "links")
        for folder in [self.kept, self.shared, self.links]:
            os.makedirs(folder, exist_ok=True)
        self.enospc, self.far, self.done = 0, [], 0
        # --trace (one worker): the count checked after each operation, to find the culprit.
        self.trace = os.environ.get("SOAK_TRACE") == "1"

    def name(self, folder=None, long=False):
        stem = "%d-%08x" % (self.number, self.random.getrandbits(32))
        return os.path.join(folder or self.own, stem + ("l" * 200 if long else ""))

    def files(self, folder=None):
        folder = folder or self.own
        try:
            return sorted(os.path.join(folder, n) for n in os.listdir(folder)
                          if os.path.isfile(os.path.join(folder, n)) and not os.path.islink(os.path.join(folder, n)))
        except OSError:
            return []

    def some_file(self, folder=None):
        files = self.files(folder)
        return self.random.choice(files) if files else None

    def data(self, size):
        return bytes([self.random.getrandbits(8)]) * size

    # The operations. Each may meet ENOSPC (counted and checked) or, in the shared
    # folders, ENOENT/EEXIST from the other workers (ignored).

    def write_new(self):
        with open(self.name(), "wb") as f:
            f.write(self.data(self.random.randrange(0, 512 << 10)))

    def cache_file(self):
        """A cache or tmp file written whole as `c-RANDOM-SIZE.part`, then renamed to its
        final name: purge checks the sizes it reports against the names."""
        size = self.random.randrange(0, 384 << 10)
        folder = self.random.choice(self.purgeable)
        # Made here, not at the start: purge removes it once emptied, and a full container
        # may refuse it again (ENOSPC, as for any other operation).
        os.makedirs(folder, exist_ok=True)
        final = self.name(folder) + "-%d" % size
        with open(final + ".part", "wb") as f:
            f.write(self.data(size))
        os.rename(final + ".part", final)

    def cache_link(self):
        """A second name in Documents for a whole cache file: purge must free nothing for it."""
        path = self.some_file(self.random.choice(self.purgeable))
        if path and not path.endswith(".part"):
            os.link(path, os.path.join(self.links, os.path.basename(path)))

    def pwrite(self):
        path = self.some_file()
        if not path:
            return self.write_new()
        fd = os.open(path, os.O_WRONLY)
        try:
            for _ in range(self.random.randrange(1, 6)):
                os.pwrite(fd, self.data(self.random.randrange(1, 128 << 10)), self.random.randrange(0, 1 << 20))
        finally:
            os.close(fd)

    def shared_write(self):
        fd = os.open(os.path.join(self.mountpoint, "Documents", "one"), os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            for _ in range(self.random.randrange(1, 8)):
                os.pwrite(fd, self.data(self.random.randrange(1, 256 << 10)), self.random.randrange(0, 4 << 20))
        finally:
            os.close(fd)

    def direct(self):
        size = 4096 * self.random.randrange(1, 64)
        buffer = mmap.mmap(-1, size)  # page aligned, as O_DIRECT wants
        buffer.write(self.data(size))
        fd = os.open(self.name(), os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o644)
        try:
            os.pwrite(fd, buffer, 4096 * self.random.randrange(0, 64))
        finally:
            os.close(fd)
            buffer.close()

    def mapped(self):
        size = 4096 * self.random.randrange(1, 256)
        fd = os.open(self.name(), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, size)
            with mmap.mmap(fd, size) as m:
                for page in range(0, size, 4096):
                    if self.random.random() < 0.8:
                        m[page:page + 4096] = self.data(4096)
                m.flush()
        except (ValueError, BufferError):
            pass
        finally:
            os.close(fd)

    def rewrite(self):
        path = self.some_file() or self.name()
        with open(path, "wb") as f:  # O_TRUNC
            f.write(self.data(self.random.randrange(0, 256 << 10)))

    def rewrites(self):
        # One file rewritten again and again, as a program saving its settings: the close
        # of each makes ext4 allocate the blocks it had reserved while the next truncating
        # open measures the file (a miscount of a whole rewrite, before the fix).
        path = self.some_file() or self.name()
        for _ in range(self.random.randrange(5, 20)):
            with open(path, "wb") as f:  # O_TRUNC
                f.write(self.data(self.random.randrange(64 << 10, 512 << 10)))

    def truncate(self):
        path = self.some_file()
        if path:
            os.truncate(path, self.random.choice([0, 4096, self.random.randrange(0, 2 << 20)]))

    def allocate(self):
        path = self.some_file() or self.name()
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            offset, length = 4096 * self.random.randrange(0, 128), 4096 * self.random.randrange(1, 128)
            mode = self.random.choice([0, FALLOC_FL_KEEP_SIZE, FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE])
            if libc.fallocate(fd, mode, ctypes.c_long(offset), ctypes.c_long(length)) != 0:
                raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
        finally:
            os.close(fd)

    def tmpfile(self):
        fd = os.open(self.own, os.O_TMPFILE | os.O_WRONLY, 0o600)
        try:
            os.write(fd, self.data(self.random.randrange(1, 256 << 10)))
            if self.random.random() < 0.5:
                # linkat(AT_SYMLINK_FOLLOW): os.link would link the /proc link itself.
                if libc.linkat(-100, b"/proc/self/fd/%d" % fd, -100, self.name().encode(), 0x400) != 0:
                    raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
        finally:
            os.close(fd)

    def hard_link(self):
        path = self.some_file()
        if path:
            os.link(path, self.name(self.shared, long=self.random.random() < 0.5))

    def rename(self):
        path = self.some_file(self.random.choice([self.own, self.shared]))
        if path:
            os.rename(path, self.name(self.random.choice([self.own, self.shared]), long=self.random.random() < 0.5))

    def exchange(self):
        a, b = self.some_file(), self.some_file(self.shared)
        if a and b and libc.renameat2(-100, a.encode(), -100, b.encode(), RENAME_EXCHANGE) != 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))

    def rename_over_open(self):
        target, source = self.some_file(), self.some_file()
        if not target or not source or target == source:
            return
        fd = os.open(target, os.O_WRONLY)
        try:
            os.rename(source, target)
            os.pwrite(fd, self.data(self.random.randrange(1, 128 << 10)), 0)
        finally:
            os.close(fd)

    def unlink_open(self):
        path = self.some_file()
        if not path:
            return
        fd = os.open(path, os.O_WRONLY)
        try:
            os.unlink(path)
            os.pwrite(fd, self.data(self.random.randrange(1, 256 << 10)), self.random.randrange(0, 1 << 20))
        finally:
            os.close(fd)

    def xattr(self):
        # Folders too: on ext4 a large value takes a block of its own, which the names
        # added to the folder next must not count again (found by fsstress).
        path = self.own if self.random.random() < 0.3 else self.some_file()
        if path:
            if self.random.random() < 0.7:
                os.setxattr(path, "user.soak", self.data(self.random.randrange(1, 3000)))
            else:
                try:
                    os.removexattr(path, "user.soak")
                except OSError as e:
                    if e.errno != errno.ENODATA:
                        raise

    def delete(self):
        for _ in range(self.random.randrange(1, 4)):
            path = self.some_file(self.random.choice([self.own, self.shared]))
            if path:
                os.unlink(path)

    def keep(self):
        """A file written and fsynced: it must survive everything, a remount too."""
        data = self.data(self.random.randrange(1, 128 << 10))
        path = self.name(self.kept)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            if os.write(fd, data) != len(data):  # a short write: the disk is full
                raise OSError(errno.ENOSPC, "short write")
            os.fsync(fd)
        except OSError:
            os.close(fd)
            os.unlink(path)
            raise
        os.close(fd)
        with open(os.path.join(self.kept, "ledger"), "a") as ledger:
            ledger.write("%s %s\n" % (os.path.basename(path), digest(data)))
            ledger.flush()
            os.fsync(ledger.fileno())

    def database(self):
        os.makedirs(os.path.join(self.own, "db"), exist_ok=True)
        db = sqlite3.connect(os.path.join(self.own, "db", "app.db"), isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=" + self.random.choice(["wal", "delete"]))
            db.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, blob BLOB)")
            for _ in range(self.random.randrange(1, 20)):
                db.execute("INSERT INTO t (blob) VALUES (?)", (self.data(self.random.randrange(1, 16384)),))
            if self.random.random() < 0.3:
                db.execute("DELETE FROM t WHERE id % 2 = 0")
        finally:
            db.close()

    def git(self):
        repository = os.path.join(self.own, "repo")
        git = ["git", "-c", "user.name=s", "-c", "user.email=s@s", "-C", repository]
        if not os.path.isdir(repository):
            subprocess.run(["git", "init", "-q", repository], capture_output=True)
        with open(os.path.join(repository, "f%d" % self.random.randrange(4)), "wb") as f:
            f.write(self.data(self.random.randrange(1, 64 << 10)))
        for step in (["add", "-A"], ["commit", "-qm", "soak"]):
            result = subprocess.run(git + step, capture_output=True, text=True)
            if "No space left" in result.stderr:
                raise OSError(errno.ENOSPC, "git: " + result.stderr.strip())

    OPERATIONS = [
        (write_new, 8), (pwrite, 8), (shared_write, 6), (direct, 4), (mapped, 5), (rewrite, 6), (rewrites, 3),
        (truncate, 4), (allocate, 4), (tmpfile, 4), (hard_link, 3), (rename, 5), (exchange, 3),
        (rename_over_open, 2), (unlink_open, 3), (xattr, 3), (delete, 10), (keep, 3), (database, 2), (git, 1),
        (cache_file, 6), (cache_link, 2),
    ]

    def run(self):
        operations, weights = zip(*self.OPERATIONS)
        for _ in range(self.ops):
            operation = self.random.choices(operations, weights)[0]
            try:
                operation(self)
            except OSError as e:
                if e.errno == errno.ENOSPC:
                    self.enospc += 1
                    # Checked against the walk, the first few times (a walk is slow).
                    if self.enospc <= 3:
                        walked = walk(self.store)
                        if walked < self.capacity - self.near:
                            self.far.append("%s: ENOSPC with %d bytes used of %d" % (operation.__name__, walked, self.capacity))
                    # Full: make room, as an app would.
                    for _ in range(3):
                        try:
                            self.delete()
                        except OSError:
                            pass
                elif e.errno not in (errno.ENOENT, errno.EEXIST, errno.ENOTEMPTY, errno.EISDIR):
                    raise OSError(e.errno, "%s: %s" % (operation.__name__, e.strerror)) from e
            except sqlite3.OperationalError as e:
                # sqlite says "unable to open database file" when it cannot create its journal.
                if "full" in str(e) or "unable to open" in str(e):
                    self.enospc += 1
                elif "locked" not in str(e) and "disk I/O" not in str(e):
                    raise
            except sqlite3.DatabaseError:
                pass  # a database its own ENOSPC left unreadable is the app's problem
            self.done += 1
            if self.trace:
                time.sleep(0.05)
                counted, walked = daemon_used(self.mountpoint, self.store), walk(self.store)
                print("trace: %s: counted %d, walk %d (%+d)" % (operation.__name__, counted, walked, counted - walked), flush=True)
        return self.done, self.enospc, self.far


def work(arguments, results):
    # Always one result, even when the worker cannot start: the round waits for each.
    number, worker = arguments[2], None
    try:
        worker = Worker(*arguments)
        results.put((number,) + worker.run())
    except Exception as e:
        done, enospc = (worker.done, worker.enospc) if worker else (0, 0)
        results.put((number, done, enospc, ["%s: %r" % (type(e).__name__, e)]))


def check_ledgers(mountpoint, workers):
    lost = []
    for number in range(workers):
        own = os.path.join(mountpoint, "Documents", "w%d" % number)
        try:
            lines = open(os.path.join(own, "kept", "ledger")).read().splitlines()
        except FileNotFoundError:
            continue
        for line in lines:
            name, expected = line.split()
            try:
                data = open(os.path.join(own, "kept", name), "rb").read()
            except OSError as e:
                lost.append("%s: %s" % (name, e))
                continue
            if digest(data) != expected:
                lost.append("%s: its data changed" % name)
    return lost


NAMED_SIZE = re.compile(r"-(\d+)(\.part)?$")


def check_purge(report):
    """What one purge --json reported, against the sizes the workers' names give."""
    problems, total = [], 0
    for item in report["deleted"]:
        path, size, freed = item["path"], item["size"], item["freedBytes"]
        total += freed
        if not (path.startswith("Library/Caches/") or path.startswith("tmp/")):
            problems.append("purge deleted %s, outside Library/Caches and tmp" % path)
        named = NAMED_SIZE.search(path)
        if not named or "/w" not in path:
            continue  # not a worker's cache file (sqlite's, git's: none are written there)
        whole = int(named.group(1))
        if named.group(2) and size > whole:
            problems.append("purge reports %s, caught while written, at %d bytes, more than its %d" % (path, size, whole))
        if not named.group(2) and size != whole:
            problems.append("purge reports %s at %d bytes, its name says %d" % (path, size, whole))
        if freed not in (0, size):
            problems.append("purge reports %d bytes freed for %s of %d bytes" % (freed, path, size))
    if total != report["freedBytes"]:
        problems.append("purge reports %d bytes freed in all, its files %d" % (report["freedBytes"], total))
    return problems


def check_links(mountpoint, workers):
    """Every hard link into Documents of a cache file still holds its whole size."""
    wrong = []
    for number in range(workers):
        links = os.path.join(mountpoint, "Documents", "w%d" % number, "links")
        for name in os.listdir(links) if os.path.isdir(links) else []:
            named = NAMED_SIZE.search(name)
            size = os.lstat(os.path.join(links, name)).st_size
            if named and size != int(named.group(1)):
                wrong.append("%s holds %d bytes, its name says %s" % (name, size, named.group(1)))
    return wrong


def check_kept_names(mountpoint, reports):
    """A deleted cache file whose hard link into Documents is still there freed nothing.
    (Workers never remove those links; one made after purge checked the file's link
    count and before it removed the name would pass unseen: a window of microseconds.)"""
    wrong = []
    for report in reports:
        for item in report["deleted"]:
            folder = item["path"].split("/")
            worker = next((part for part in folder if re.fullmatch(r"w\d+", part)), None)
            link = os.path.join(mountpoint, "Documents", worker or "-", "links", folder[-1])
            if worker and item["freedBytes"] != 0 and os.path.lexists(link):
                wrong.append("purge reports %d bytes freed for %s, which Documents/%s/links keeps"
                             % (item["freedBytes"], item["path"], worker))
    return wrong


def purge_during(store, seed, round, reports, problems):
    """One or two purges of the live mount at moments drawn from the seed."""
    chance = random.Random("purge/%d/%d" % (seed, round))
    for _ in range(chance.choice([1, 2])):
        time.sleep(chance.uniform(0.05, 1.5))
        result = subprocess.run([BINARY, "purge", store, "--caches", "--tmp", "--include-running", "--json"],
                                capture_output=True, text=True)
        if result.returncode != 0:
            problems.append("purge: exit %d: %s" % (result.returncode, result.stderr.strip()))
            return
        report = json.loads(result.stdout)
        reports.append(report)
        problems.extend(check_purge(report))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("seed", type=int)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--ops", type=int, default=60, help="operations per worker and round")
    parser.add_argument("--capacity", type=int, default=12, help="the capacity in MiB")
    parser.add_argument("--tolerance", type=int, default=0,
                        help="bytes the count may be off the walk (default 0: to the block; docs/capacity.md)")
    options = parser.parse_args()
    capacity = options.capacity * MIB
    near = options.workers * 3 * MIB + 2 * MIB

    base = tempfile.mkdtemp(prefix="containerfs-soak-")
    store, mountpoint, bundle = base + "/store", base + "/mnt", base + "/Soak.app"
    os.makedirs(bundle)
    os.makedirs(mountpoint)
    with open(bundle + "/Info.plist", "w") as f:
        f.write("<plist>soak</plist>\n")
    failures, divergence, operations, enospc, purges = [], 0, 0, 0, []

    def check(when):
        nonlocal divergence
        # The kernel sends RELEASE after close returns: give the last ones a moment.
        deadline = time.time() + 3
        while True:
            counted, walked = daemon_used(mountpoint, store), walk(store)
            if counted == walked or time.time() > deadline:
                break
            time.sleep(0.1)
        divergence = max(divergence, abs(counted - walked))
        if abs(counted - walked) > options.tolerance:
            failures.append("%s: the daemon counts %d bytes, the walk %d (%+d)" % (when, counted, walked, counted - walked))
        if walked > capacity + MIB:
            failures.append("%s: the store holds %d bytes, past the capacity %d + 1 MiB" % (when, walked, capacity))
        lost = check_ledgers(mountpoint, options.workers)
        if lost:
            failures.append("%s: fsynced data lost: %s" % (when, "; ".join(lost[:5])))
        wrong = check_links(mountpoint, options.workers)
        if wrong:
            failures.append("%s: a cache file's other name lost data: %s" % (when, "; ".join(wrong[:5])))

    try:
        run(BINARY, "create", store, "--bundle", bundle, "--capacity", "%dM" % options.capacity)
        run(BINARY, "mount", store, mountpoint)
        check("after the mount")
        for round in range(options.rounds):
            results = multiprocessing.Queue()
            processes = [multiprocessing.Process(target=work, args=((options.seed, round, n, mountpoint, store, capacity, options.ops, near), results))
                         for n in range(options.workers)]
            for process in processes:
                process.start()
            purge_problems, first_purge = [], len(purges)
            purger = threading.Thread(target=purge_during, args=(store, options.seed, round, purges, purge_problems))
            purger.start()
            outcomes = [results.get(timeout=600) for _ in processes]
            for process in processes:
                process.join()
            purger.join()
            failures.extend("round %d: %s" % (round, p) for p in purge_problems)
            failures.extend("round %d: %s" % (round, p) for p in check_kept_names(mountpoint, purges[first_purge:]))
            for number, done, spaces, problems in outcomes:
                operations += done
                enospc += spaces
                failures.extend("round %d, worker %d: %s" % (round, number, p) for p in problems)
            check("after round %d" % round)
            if failures:
                break
        if not failures:
            run(BINARY, "unmount", mountpoint)
            run(BINARY, "mount", store, mountpoint)
            check("after a remount")
    except SoakFailure as e:
        failures.append(str(e))
    finally:
        subprocess.run([BINARY, "unmount", mountpoint], capture_output=True)
        if os.path.ismount(mountpoint):
            subprocess.run(["fusermount3", "-uz", mountpoint], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)

    print("seed %d: %d rounds, %d workers, %d operations, %d ENOSPC, largest divergence %d bytes; "
          "%d purges deleted %d files, %d bytes freed"
          % (options.seed, options.rounds, options.workers, operations, enospc, divergence,
             len(purges), sum(len(r["deleted"]) for r in purges), sum(r["freedBytes"] for r in purges)))
    if failures:
        for failure in failures:
            print("FAIL (seed %d): %s" % (options.seed, failure))
        print("replay: %s %d --rounds %d --workers %d --ops %d --capacity %d"
              % (sys.argv[0], options.seed, options.rounds, options.workers, options.ops, options.capacity))
        sys.exit(1)


if __name__ == "__main__":
    main()
