#!/usr/bin/env python3
"""The backup soak (docs/backup.md, docs/testing.md): backups of a mounted container taken
while processes change it, each checked against GNU tar and against what the processes did.

    scripts/backup-soak.py SEED [--rounds N] [--workers K] [--backups B] [--capacity MIB] [-o OPTIONS]

Each round, K processes at once change the container through the mount until the round's
backups are done: they create files, rewrite them in place, rewrite them truncating, save
them atomically (a temporary name renamed over), truncate and append, move files and folders
between Documents, Library, Library/Application Support, Library/Caches, tmp and nested
folders, hard-link, delete, make files sparse (truncated up by 1–32 MiB, then written past
the hole), and set and clear the exclude-from-backup attribute (to 1, yes or 0) on files and
folders. Each process has its own names (w0…, w1…) in the shared folders, so
it knows exactly what it made: every file's content is one 16-byte record repeated,
`w1f00042v000007\\n` (the file and its version), so a part of one version beside a part of
another, a shifted or a zero-filled stretch are seen; a sparse file holds zeros exactly in
its hole and the record everywhere else. Every state a file passes through is recorded
(with appends and fresh writes any length on the way, and its hole).

Meanwhile `containerfs backup STORE ARCHIVE --json` runs B times and `backup --list --json`
once; after the round a backup of the still container. Each backup is checked against
GNU tar (`tar -tv --full-time`, names as bytes, and an extraction) and the processes' logs:

- the report's entries, files and bytes are what GNU tar lists;
- nothing in it lies in Library/Caches, tmp or outside Documents and Library; no item that
  was excluded during the whole backup (itself or a folder above it) is in it, and the
  report's "excluded" names each such item whose folder above is not excluded;
- every file in it holds a state its file really had: its name gives the file, its
  content a version of it, whole, and a length that version had (with its hole);
- holes are not stored: the archive is no larger than the report's data bytes (data
  regions) and its headers, and a file that had a hole of 1 MiB or more takes that much
  less room once GNU tar extracted it and once restored;
- every file and folder the processes left alone during the whole backup is in it, with
  the content it had; nothing is in it that did not exist then (the backup of the still
  container is therefore exactly what the processes' model says);
- `containerfs restore` of it (which verifies every file against the manifest) succeeds,
  and the restored container holds what GNU tar extracted, file for file.

A backup during the round may fail naming a file that "kept changing while it was read"
(docs/backup.md: a file written through every read): that is counted and printed, not a
failure, unless more backups end so than are checked; the backup at rest must succeed.

The list form gets the same checks on names and sizes. The seed decides every operation of
every process (each works in its own names, so what it meets is its own doing); the moments
of the backups are drawn from it too; the interleaving is the machine's. A failure prints
the seed and what differed: replay with the same options. Needs root (it mounts); CONTAINERFS
names the binary (default: .build/debug/containerfs).
"""
import argparse, errno, hashlib, json, multiprocessing, os, random, re, shutil, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = os.environ.get("CONTAINERFS", os.path.join(ROOT, ".build/debug/containerfs"))
EXCLUDE = "user.containerfs.exclude-from-backup"
# The shared folders the processes work in: never renamed, removed or excluded by them.
ROOTS = ["Documents", "Library", "Library/Application Support", "Library/Caches", "tmp"]
# The other folders create makes, which the workers leave alone.
STANDARD = ["Documents/Inbox", "Library/Preferences"]
# Leaf names carry the file they are a name of: w<worker>f<serial>, then .h<k> (a hard
# link), .tmp (an atomic save's new version), and a suffix.
LEAF = re.compile(r"^(w\d+f\d{5})")
SUFFIXES = ["", "", "", " two words", "-\u00e9t\u00e9", "-\udcff\udce9"]  # the last: not UTF-8 (bytes ff e9)
MAX_LENGTH = 1 << 20  # one write: the mount's max_write, so a version lands in one request
clock = time.monotonic  # one clock for every process: the backups' and the operations' times compare


class SoakFailure(Exception):
    pass


def record(ident, version):
    return ("%sv%06d\n" % (ident, version)).encode()


def content(ident, version, start, end):
    """Bytes [start, end) of the file `ident` at `version`: its record repeated from offset 0."""
    if end <= start:
        return b""
    first = start - start % 16
    return (record(ident, version) * ((end - first + 15) // 16))[start - first:end - first]


def expected(ident, version, length, hole):
    """A file's bytes at a state: its record from offset 0, zeros in its hole."""
    data = content(ident, version, 0, length)
    if hole and hole[0] < length:
        end = min(hole[1], length)
        data = data[:hole[0]] + bytes(end - hole[0]) + data[end:]
    return data


def in_set(path):
    """Whether a path is in Documents or Library but not Library/Caches."""
    top = path.split("/")
    return (top[0] == "Documents" or top[0] == "Library") and not (len(top) > 1 and top[0] == "Library" and top[1] == "Caches")


def printable(path):
    """A path as containerfs prints it in JSON: bytes that are not UTF-8 as \\xNN."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


class Inode:
    counter = 0

    def __init__(self, ident, version, length):
        Inode.counter += 1
        self.key = "%s#%d" % (ident, Inode.counter)
        self.ident, self.version, self.length, self.excluded = ident, version, length, False
        self.hole = None  # (start, end): zeros there, no block (a sparse file)


class Model:
    """One process's files and folders, as it made them: exact, for only it touches them."""

    def __init__(self, number):
        self.number = number
        self.dirs = {}   # path -> excluded (its own folders; the shared ones are implicit)
        self.files = {}  # path -> Inode
        self.serial = 0
        self.versions = {}  # ident -> the last version number used
        self.history = {}   # ident -> [(version, shortest, longest, hole)]: every state it had

    def snapshot(self):
        return ({p: (i.ident, i.version, i.length, i.key, i.excluded, i.hole) for p, i in self.files.items()}, dict(self.dirs))

    def names(self, inode):
        return sorted(p for p, i in self.files.items() if i is inode)

    def state(self, ident, version, shortest, longest, hole=None):
        self.history.setdefault(ident, []).append((version, shortest, longest, hole))

    def new_version(self, ident):
        self.versions[ident] = self.versions.get(ident, 0) + 1
        return self.versions[ident]


class Worker:
    def __init__(self, seed, round, model, mountpoint):
        self.random = random.Random("%d/%d/%d" % (seed, round, model.number))
        self.model, self.mountpoint, self.number = model, mountpoint, model.number

    def real(self, path):
        return os.path.join(self.mountpoint, path)

    def folders(self):
        return ROOTS + sorted(self.model.dirs)

    def some_file(self):
        files = sorted(self.model.files)
        return self.random.choice(files) if files else None

    def size(self):
        kind = self.random.random()
        if kind < 0.15:
            return self.random.randrange(0, 40)
        if kind < 0.7:
            return self.random.randrange(0, 64 << 10)
        return self.random.randrange(64 << 10, MAX_LENGTH)

    def write_all(self, fd, data, offset=None):
        written = os.write(fd, data) if offset is None else os.pwrite(fd, data, offset)
        if written != len(data):
            raise OSError(errno.EIO, "short write: %d of %d bytes" % (written, len(data)))

    # The operations: each returns the paths it changed (a folder stands for what it holds).

    def create(self):
        m = self.model
        folder = self.random.choice(self.folders())
        m.serial += 1
        ident = "w%df%05d" % (self.number, m.serial)
        path = folder + "/" + ident + self.random.choice(SUFFIXES)
        version, size = m.new_version(ident), self.size()
        fd = os.open(self.real(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            m.files[path] = inode = Inode(ident, version, 0)
            m.state(ident, version, 0, size)
            self.write_all(fd, content(ident, version, 0, size))
            inode.length = size
        finally:
            os.close(fd)
        return [path]

    def append(self, path=None):
        path = path or self.some_file()
        inode = path and self.model.files[path]
        if not inode or inode.length > MAX_LENGTH - (64 << 10):
            return None
        more = self.random.randrange(1, 64 << 10)
        fd = os.open(self.real(path), os.O_WRONLY | os.O_APPEND)
        try:
            self.model.state(inode.ident, inode.version, inode.length, inode.length + more, inode.hole)
            self.write_all(fd, content(inode.ident, inode.version, inode.length, inode.length + more))
            inode.length += more
        finally:
            os.close(fd)
        return self.model.names(inode)

    def truncate(self, path=None):
        path = path or self.some_file()
        if not path:
            return None
        inode = self.model.files[path]
        length = self.random.randrange(0, inode.length + 1)
        os.truncate(self.real(path), length)
        inode.length = length
        if inode.hole and length <= inode.hole[0]:
            inode.hole = None
        elif inode.hole and length < inode.hole[1]:
            inode.hole = (inode.hole[0], length)
        self.model.state(inode.ident, inode.version, length, length, inode.hole)
        return self.model.names(inode)

    def rewrite_in_place(self, path=None):
        """A new version over the old one, same length, one pwrite: never seen half and half."""
        path = path or self.some_file()
        if not path:
            return None
        inode = self.model.files[path]
        if inode.length > MAX_LENGTH:
            return None  # a sparse file: more than one write request, which a backup may see half done
        version = self.model.new_version(inode.ident)
        fd = os.open(self.real(path), os.O_WRONLY)
        try:
            self.model.state(inode.ident, version, inode.length, inode.length)
            self.write_all(fd, content(inode.ident, version, 0, inode.length), 0)
            inode.version, inode.hole = version, None
        finally:
            os.close(fd)
        return self.model.names(inode)

    def busy(self):
        """One file changed again and again in place, as a program saving as it goes: a
        backup reading it meanwhile must see one version, whole."""
        path = self.some_file()
        if not path:
            return None
        inode, changed = self.model.files[path], set()
        for _ in range(self.random.randrange(5, 30)):
            operation = self.random.choice([self.rewrite_in_place] * 4 + [self.append, self.truncate])
            changed.update(operation(path) or [])
        return sorted(changed)

    def rewrite_truncating(self):
        path = self.some_file()
        if not path:
            return None
        inode = self.model.files[path]
        fd = os.open(self.real(path), os.O_WRONLY | os.O_TRUNC)
        try:
            inode.length, inode.hole = 0, None
            self.model.state(inode.ident, inode.version, 0, 0)
            version, size = self.model.new_version(inode.ident), self.size()
            self.model.state(inode.ident, version, 0, size)
            inode.version = version
            self.write_all(fd, content(inode.ident, version, 0, size))
            inode.length = size
        finally:
            os.close(fd)
        return self.model.names(inode)

    def atomic_save(self):
        """The new version under NAME.tmp beside the file, then renamed over it."""
        m = self.model
        path = self.some_file()
        if not path:
            return None
        old = m.files[path]
        temporary = path.rsplit("/", 1)[0] + "/" + old.ident + ".tmp"
        if temporary in m.files:
            return None
        version, size = m.new_version(old.ident), self.size()
        fd = os.open(self.real(temporary), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            m.files[temporary] = inode = Inode(old.ident, version, 0)
            m.state(old.ident, version, 0, size)
            self.write_all(fd, content(old.ident, version, 0, size))
            inode.length = size
            if self.random.random() < 0.3:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(self.real(temporary), self.real(path))
        m.files[path] = m.files.pop(temporary)
        return [temporary, path]

    def sparse(self):
        """A hole: a new file, or one without a hole, truncated up by 1–32 MiB (sparse: no
        block), then a stretch of its record written past the hole, as a program that
        preallocates with ftruncate or writes at an offset does."""
        m = self.model
        path = self.some_file() if self.random.random() < 0.6 else None
        if path is None or m.files[path].hole or m.files[path].length > MAX_LENGTH:
            path = self.create()[0]
        inode = m.files[path]
        start, gap, tail = inode.length, self.random.randrange(1 << 20, 32 << 20), self.random.randrange(1, 64 << 10)
        fd = os.open(self.real(path), os.O_WRONLY)
        try:
            inode.hole = (start, start + gap)
            m.state(inode.ident, inode.version, start + gap, start + gap, inode.hole)
            os.ftruncate(fd, start + gap)
            inode.length = start + gap
            m.state(inode.ident, inode.version, start + gap, start + gap + tail, inode.hole)
            self.write_all(fd, content(inode.ident, inode.version, start + gap, start + gap + tail), start + gap)
            inode.length = start + gap + tail
        finally:
            os.close(fd)
        return m.names(inode)

    def move_file(self):
        m = self.model
        path = self.some_file()
        if not path:
            return None
        target = self.random.choice(self.folders()) + "/" + path.rsplit("/", 1)[1]
        if target in m.files or target in m.dirs:
            return None
        os.rename(self.real(path), self.real(target))
        m.files[target] = m.files.pop(path)
        return [path, target]

    def hard_link(self):
        m = self.model
        path = self.some_file()
        if not path:
            return None
        inode = m.files[path]
        target = "%s/%s.h%d%s" % (self.random.choice(self.folders()), inode.ident, self.random.randrange(100), self.random.choice(SUFFIXES))
        if target in m.files or target in m.dirs:
            return None
        os.link(self.real(path), self.real(target))
        m.files[target] = inode
        return [target]

    def delete(self):
        path = self.some_file()
        if not path:
            return None
        os.unlink(self.real(path))
        del self.model.files[path]
        return [path]

    def make_folder(self):
        m = self.model
        parent = self.random.choice(self.folders())
        if parent.count("/") > 5:
            return None
        m.serial += 1
        path = "%s/w%dd%05d%s" % (parent, self.number, m.serial, self.random.choice(SUFFIXES))
        os.mkdir(self.real(path))
        m.dirs[path] = False
        return [path]

    def move_folder(self):
        m = self.model
        if not m.dirs:
            return None
        folder = self.random.choice(sorted(m.dirs))
        parent = self.random.choice(self.folders())
        target = parent + "/" + folder.rsplit("/", 1)[1]
        if parent == folder or parent.startswith(folder + "/") or target in m.dirs or target in m.files or target.count("/") > 6:
            return None
        os.rename(self.real(folder), self.real(target))
        moved = lambda p: target + p[len(folder):] if p == folder or p.startswith(folder + "/") else p
        m.dirs = {moved(p): e for p, e in m.dirs.items()}
        m.files = {moved(p): i for p, i in m.files.items()}
        return [folder, target]

    def remove_folder(self):
        """A folder and all it holds, deepest first, the model following each call."""
        m = self.model
        if not m.dirs:
            return None
        folder = self.random.choice(sorted(m.dirs))
        for path in sorted((p for p in m.files if p.startswith(folder + "/")), reverse=True):
            os.unlink(self.real(path))
            del m.files[path]
        for path in sorted((p for p in m.dirs if p == folder or p.startswith(folder + "/")), key=len, reverse=True):
            os.rmdir(self.real(path))
            del m.dirs[path]
        return [folder]

    def set_exclusion(self):
        """Sets the attribute (1, yes, or 0: not excluded) or removes it, on a file or a
        folder in the backup set."""
        m = self.model
        candidates = sorted(p for p in list(m.files) + list(m.dirs) if in_set(p))
        if not candidates:
            return None
        path = self.random.choice(candidates)
        value = self.random.choice([b"1", b"1", b"yes", b"0", None, None])
        if value is None:
            try:
                os.removexattr(self.real(path), EXCLUDE)
            except OSError as e:
                if e.errno != errno.ENODATA:
                    raise
        else:
            os.setxattr(self.real(path), EXCLUDE, value)
        excluded = value is not None and value != b"0"
        if path in m.dirs:
            m.dirs[path] = excluded
            return [path]
        m.files[path].excluded = excluded
        return m.names(m.files[path])

    OPERATIONS = [
        (create, 14), (append, 8), (truncate, 4), (rewrite_in_place, 10), (busy, 3), (rewrite_truncating, 5),
        (atomic_save, 6), (move_file, 8), (hard_link, 4), (delete, 7), (make_folder, 3),
        (move_folder, 3), (remove_folder, 1), (set_exclusion, 6), (sparse, 4),
    ]

    def run(self, stop, progress, most):
        """Operations until told to stop: a log entry (start, end, paths changed, the
        model after) for each that changed something."""
        log, done = [], 0
        operations, weights = zip(*self.OPERATIONS)
        while not stop.is_set() and done < most:
            operation = self.random.choices(operations, weights)[0]
            start = clock()
            try:
                changed = operation(self)
            except OSError as e:
                raise SoakFailure("worker %d, operation %d (%s): %s" % (self.number, done, operation.__name__, e)) from e
            end = clock()
            if changed:
                log.append((start, end, changed, self.model.snapshot()))
            done += 1
            with progress.get_lock():
                progress.value += 1
        return log, done


def work(seed, round, model, mountpoint, stop, progress, most, results):
    # Always one result, even when the worker fails: the round waits for each.
    try:
        log, done = Worker(seed, round, model, mountpoint).run(stop, progress, most)
        results.put((model.number, model, log, done, None))
    except Exception as e:
        stop.set()
        results.put((model.number, model, [], 0, "%s: %s" % (type(e).__name__, e)))


def run(*arguments, env=None):
    result = subprocess.run(list(arguments), capture_output=True, env=env)
    if result.returncode != 0:
        raise SoakFailure("%s: exit %d: %s%s" % (" ".join(arguments), result.returncode,
                          result.stdout.decode(errors="replace"), result.stderr.decode(errors="replace")))
    return result.stdout


TAR_LINE = re.compile(rb"^(\S)\S+ \S+ +(\d+) \d{4}-\d\d-\d\d \d\d:\d\d(?::\d\d(?:\.\d+)?)? +(.*)$")


def tar_listing(archive):
    """GNU tar's listing: (type, size, name, link target) per entry, names as bytes."""
    out = run("tar", "--list", "--verbose", "--full-time", "--numeric-owner", "--quoting-style=literal", "-f", archive)
    entries = []
    for line in out.split(b"\n"):
        if not line:
            continue
        match = TAR_LINE.match(line)
        if not match:
            raise SoakFailure("GNU tar listed a line this soak cannot read: %r" % line)
        kind, size, rest = match.group(1).decode(), int(match.group(2)), match.group(3)
        target = None
        if kind == "h":
            rest, _, target = rest.partition(b" link to ")
        elif kind == "l":
            rest, _, target = rest.partition(b" -> ")
        name = os.fsdecode(rest).rstrip("/")
        entries.append((kind, size, name, target and os.fsdecode(target)))
    return entries


class Expectation:
    """What a backup taken between `start` and `end` must and must not hold: the models
    as they were when it started, and the paths changed while it ran."""

    def __init__(self, start, end, states, logs):
        self.files, self.dirs, self.changed = {}, {}, []
        for number, (initial, log) in enumerate(zip(states, logs)):
            files, dirs = initial
            for entry_start, entry_end, changed, snapshot in log:
                if entry_end < start:
                    files, dirs = snapshot
                elif entry_start <= end:
                    self.changed.extend(changed)
            self.files.update(files)
            self.dirs.update(dirs)
        self.touched_set = set(self.changed)

    def touched(self, path):
        # A path, or a folder above it, changed (moved, excluded, removed) during the backup.
        parts = path.split("/")
        return any("/".join(parts[:n]) in self.touched_set for n in range(1, len(parts) + 1))

    def excluded(self, path):
        parts = path.split("/")
        if any(self.dirs.get("/".join(parts[:n]), False) for n in range(1, len(parts) + 1)):
            return True
        info = self.files.get(path)
        return bool(info and info[4])

    def backed_up(self):
        """Paths that must be in the backup (untouched, in the set, not excluded): a file's
        (ident, version, length), a folder's None."""
        wanted = {}
        for path, info in self.files.items():
            if in_set(path) and not self.excluded(path) and not self.touched(path):
                wanted[path] = info
        for path in self.dirs:
            if in_set(path) and not self.excluded(path) and not self.touched(path):
                wanted[path] = None
        return wanted

    def excluded_tops(self):
        """Untouched items excluded by their own attribute, with no excluded folder above:
        the report's list of excluded items must name each."""
        tops = []
        for path in list(self.files) + list(self.dirs):
            parent = path.rsplit("/", 1)[0]
            own = self.dirs[path] if path in self.dirs else self.files[path][4]
            if own and in_set(path) and not self.excluded(parent) and not self.touched(path):
                tops.append(path)
        return sorted(tops)

    def own(self, path):
        return path not in ROOTS + STANDARD and not self.touched(path)


def check_content(path, data, history):
    """The data of an archived file: a state its file had. Returns what is wrong (or None)
    and the hole of the state it matched."""
    leaf = LEAF.match(path.rsplit("/", 1)[-1])
    if not leaf:
        return "%s is no file the workers made" % path, None
    ident = leaf.group(1)
    states = history.get(ident, [])
    match = re.match(rb"^(w\d+f\d{5})v(\d{6})\n", data[:16])
    if len(data) >= 16 and 0 not in data[:16]:
        if not match or match.group(1).decode() != ident:
            return "%s begins with %r, not a record of %s" % (path, data[:16], ident), None
        versions = [int(match.group(2))]
    else:
        versions = sorted({state[0] for state in states})  # short, or a hole in its first record
    lengths = []
    for version in versions:
        of_version = [state for state in states if state[0] == version]
        for hole in {state[3] for state in of_version}:
            if data == expected(ident, version, len(data), hole):
                if any(low <= len(data) <= high and h == hole for _, low, high, h in of_version):
                    return None, hole
                lengths.append((version, of_version))
    if lengths:
        return "%s holds %d bytes of a version, a length it never had: %s" % (path, len(data), lengths), None
    if len(data) >= 16 and versions:
        holes = [state[3] for state in states if state[0] == versions[0]] or [None]
        wanted = expected(ident, versions[0], len(data), holes[-1])
        at = next((i for i in range(len(data)) if data[i] != wanted[i]), len(data))
        return "%s (%d bytes) is torn: version %d (hole %s) up to byte %d, then %r" % (
            path, len(data), versions[0], holes[-1], at, data[at - at % 16:at - at % 16 + 16]), None
    return "%s holds %r, no state of %s" % (path, data[:64], ident), None


def digest(data):
    return hashlib.sha256(data).digest()


def file_digest(path):
    with open(path, "rb") as f:
        return digest(f.read())


def check_backup(name, report, archive, expect, history, workdir, bundle, env):
    """One archive against GNU tar, the models and a restore. Returns (problems, figures)."""
    problems = []
    listed = tar_listing(archive)
    entries = [e for e in listed if not e[2].startswith(".containerfs-backup")]
    files = [e for e in entries if e[0] == "-"]
    figures = (len(files), sum(e[1] for e in files))
    if report["entries"] != len(entries):
        problems.append("%s: the report says %d entries, GNU tar lists %d" % (name, report["entries"], len(entries)))
    if report["files"] != figures[0] or report["bytes"] != figures[1]:
        problems.append("%s: the report says %d files of %d bytes, GNU tar lists %d of %d"
                        % (name, report["files"], report["bytes"], figures[0], figures[1]))
    names = {}
    for kind, size, path, target in entries:
        if path in names:
            problems.append("%s: %s is in the archive twice" % (name, path))
        names[path] = (kind, size, target)
        if not in_set(path):
            problems.append("%s: %s is outside Documents and Library, or in Library/Caches" % (name, path))
    # Holes are not stored: the archive is its data regions and headers (4 KiB an entry is
    # plenty: a pax header, a ustar header, a sparse map of two regions, padding).
    manifest_size = sum(e[1] for e in listed if e[2] == ".containerfs-backup/manifest")
    room = report["dataBytes"] + manifest_size + 4096 * (len(entries) + 2) + (64 << 10)
    if os.path.getsize(archive) > room or report["dataBytes"] > report["bytes"]:
        problems.append("%s: the archive has %d bytes, more than its %d bytes of data regions (of %d bytes of files) and headers"
                        % (name, os.path.getsize(archive), report["dataBytes"], report["bytes"]))
    extracted = os.path.join(workdir, "extracted")
    os.makedirs(extracted)
    run("tar", "-xf", archive, "-C", extracted)
    contents, holes = {}, {}
    for path, (kind, size, target) in names.items():
        if kind in "-h":
            with open(os.path.join(extracted, path), "rb") as f:
                data = f.read()
            contents[path] = digest(data)
            if kind == "-" and len(data) != size:
                problems.append("%s: %s is listed at %d bytes and extracts to %d" % (name, path, size, len(data)))
            wrong, hole = check_content(path, data, history)
            if wrong:
                problems.append("%s: %s" % (name, wrong))
            elif hole and min(hole[1], len(data)) - hole[0] >= 1 << 20:
                holes[path] = (min(hole[1], len(data)) - hole[0], len(data))
            del data
        elif kind != "d":
            problems.append("%s: %s is of type %s, which no worker makes" % (name, path, kind))
    wanted = expect.backed_up()
    for path, info in sorted(wanted.items()):
        if path not in names:
            problems.append("%s: %s was left alone during the backup and is not in it" % (name, path))
        elif info is not None and contents.get(path) != digest(expected(info[0], info[1], info[2], info[5])):
            problems.append("%s: %s was left alone during the backup at version %d, %d bytes (hole %s), and is archived otherwise"
                            % (name, path, info[1], info[2], info[5]))
    for path in sorted(names):
        if path in wanted or not expect.own(path):
            continue
        if expect.excluded(path):
            problems.append("%s: %s was excluded during the whole backup and is in it" % (name, path))
        elif path not in expect.files and path not in expect.dirs:
            problems.append("%s: %s did not exist during the whole backup and is in it" % (name, path))
    reported = set(report["excluded"])
    for path in expect.excluded_tops():
        if printable(path) not in reported:
            problems.append("%s: %s was excluded during the whole backup and the report does not name it" % (name, path))
    # The restore verifies every file against the manifest; it then holds what tar extracted.
    restored = os.path.join(workdir, "restored")
    result = subprocess.run([BINARY, "restore", archive, restored, "--bundle", bundle, "--json"], capture_output=True, env=env)
    if result.returncode != 0:
        problems.append("%s: restore failed: %s" % (name, result.stderr.decode(errors="replace").strip()))
    else:
        for path, data in contents.items():
            try:
                if file_digest(os.path.join(restored, path)) != data:
                    problems.append("%s: the restored %s differs from GNU tar's extraction" % (name, path))
            except OSError as e:
                problems.append("%s: the restored container lacks %s: %s" % (name, path, e))
        # A hole of 1 MiB or more takes no room, extracted by GNU tar or restored.
        for path, (hole, length) in sorted(holes.items()):
            for where, root in (("GNU tar's extraction", extracted), ("the restored container", restored)):
                used = os.lstat(os.path.join(root, path)).st_blocks * 512
                if used > length - hole + (64 << 10):
                    problems.append("%s: %s has a hole of %d of its %d bytes and takes %d bytes in %s"
                                    % (name, path, hole, length, used, where))
        restored_count = json.loads(result.stdout)["entries"]
        if restored_count != len(entries):
            problems.append("%s: restore says %d entries, GNU tar lists %d" % (name, restored_count, len(entries)))
    if not problems:
        shutil.rmtree(workdir, ignore_errors=True)
    return problems, figures


def check_list(name, listing, expect):
    """The list form: sizes and names, checked as a backup's are."""
    problems = []
    items = {item["path"]: item for item in listing["items"]}
    files = [i for i in listing["items"] if i["type"] == "file"]
    if listing["files"] != len(files) or listing["totalBytes"] != sum(i["size"] for i in files):
        problems.append("%s: it says %d files, %d bytes; its items are %d files, %d bytes"
                        % (name, listing["files"], listing["totalBytes"], len(files), sum(i["size"] for i in files)))
    for path in items:
        if not in_set(path):
            problems.append("%s: lists %s, outside the backup set" % (name, path))
    for path, info in sorted(expect.backed_up().items()):
        item = items.get(printable(path))
        if item is None:
            problems.append("%s: %s was left alone during the listing and is not listed" % (name, path))
        elif info is not None and item["type"] == "file" and item["size"] != info[2]:
            problems.append("%s: %s is listed at %d bytes, it had %d" % (name, path, item["size"], info[2]))
    reported = {item["path"] for item in listing["excluded"]}
    for path in expect.excluded_tops():
        if printable(path) not in reported:
            problems.append("%s: %s was excluded during the whole listing and it does not name it" % (name, path))
    for path in expect.files:
        if expect.own(path) and in_set(path) and expect.excluded(path) and printable(path) in items:
            problems.append("%s: %s was excluded during the whole listing and is listed" % (name, path))
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("seed", type=int)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--backups", type=int, default=3, help="backups during each round (and one listing)")
    parser.add_argument("--most", type=int, default=1500, help="operations per worker and round at most")
    parser.add_argument("--capacity", type=int, default=0, help="create the container with this capacity in MiB")
    parser.add_argument("-o", dest="options", default="", help="mount options, e.g. power-loss")
    options = parser.parse_args()
    if options.workers > 9:
        parser.error("at most 9 workers (their names have one digit)")
    started = clock()

    base = tempfile.mkdtemp(prefix="containerfs-backup-soak-")
    store, mountpoint, bundle = base + "/store", base + "/mnt", base + "/Soak.app"
    env = dict(os.environ, XDG_CONFIG_HOME=base + "/config")
    os.makedirs(bundle)
    os.makedirs(mountpoint)
    with open(bundle + "/Info.plist", "w") as f:
        f.write("<plist>soak</plist>\n")
    failures, figures, operations, gave_up = [], [], 0, []
    models = [Model(n) for n in range(options.workers)]
    history = {}
    chance = random.Random("backups/%d" % options.seed)
    try:
        create = [BINARY, "create", store, "--bundle", bundle]
        if options.capacity:
            create += ["--capacity", "%dM" % options.capacity]
        run(*create, env=env)
        run(BINARY, "mount", store, mountpoint, *(["-o", options.options] if options.options else []), env=env)
        for round in range(options.rounds):
            stop, progress, results = multiprocessing.Event(), multiprocessing.Value("l", 0), multiprocessing.Queue()
            states = [m.snapshot() for m in models]
            processes = [multiprocessing.Process(target=work, args=(options.seed, round, m, mountpoint, stop, progress, options.most, results))
                         for m in models]
            for process in processes:
                process.start()
            # The backups, while the workers run: a listing at a drawn place among them.
            taken = []
            listing_at = chance.randrange(options.backups + 1)
            for number in range(options.backups + 1):
                wait_until = clock() + 30
                goal = progress.value + chance.randrange(20, 120)
                while progress.value < goal and not stop.is_set() and clock() < wait_until:
                    time.sleep(0.01)
                if stop.is_set():
                    break  # a worker failed
                start = clock()
                if number == listing_at:
                    result = subprocess.run([BINARY, "backup", store, "--list", "--json"], capture_output=True, env=env)
                    taken.append(("round %d, listing" % round, None, start, clock(), result))
                else:
                    archive = "%s/r%d-b%d.tar" % (base, round, number)
                    result = subprocess.run([BINARY, "backup", store, archive, "--json"], capture_output=True, env=env)
                    taken.append(("round %d, backup %d" % (round, number), archive, start, clock(), result))
            stop.set()
            outcomes = sorted(results.get(timeout=600) for _ in processes)
            for process in processes:
                process.join()
            logs = []
            for number, model, log, done, error in outcomes:
                if error:
                    failures.append("round %d, worker %d: %s" % (round, number, error))
                models[number] = model
                logs.append(log)
                operations += done
                for ident, states_of in model.history.items():
                    history[ident] = states_of
            if failures:
                break
            # And one of the still container: exactly what the models say.
            start = clock()
            archive = "%s/r%d-still.tar" % (base, round)
            result = subprocess.run([BINARY, "backup", store, archive, "--json"], capture_output=True, env=env)
            taken.append(("round %d, still backup" % round, archive, start, clock(), result))
            for name, archive, start, end, result in taken:
                error = result.stderr.decode(errors="replace").strip()
                if result.returncode == 1 and "kept changing while it was read" in error and "still" not in name:
                    gave_up.append("%s: %s" % (name, error))  # documented: a file busy through every read
                    continue
                if result.returncode != 0:
                    failures.append("%s: exit %d: %s" % (name, result.returncode, error))
                    continue
                expect = Expectation(start, end, states, logs)
                report = json.loads(result.stdout)
                if archive is None:
                    failures.extend(check_list(name, report, expect))
                    continue
                problems, counted = check_backup(name, report, archive, expect, history, "%s/check-%d" % (base, len(figures)), bundle, env)
                failures.extend(problems)
                figures.append(counted + (len(expect.touched_set), report["sparseFiles"]))
                os.unlink(archive)
            if failures:
                break
    except SoakFailure as e:
        failures.append(str(e))
    finally:
        subprocess.run([BINARY, "unmount", mountpoint], capture_output=True)
        if os.path.ismount(mountpoint):
            subprocess.run(["fusermount3", "-uz", mountpoint], capture_output=True)
        if os.environ.get("SOAK_KEEP") == "1":
            print("kept %s" % base)
        else:
            shutil.rmtree(base, ignore_errors=True)

    def spread(values, scale=1):
        values = [v / scale for v in values] or [0]
        return "%.1f–%.1f (mean %.1f)" % (min(values), max(values), sum(values) / len(values))
    print("seed %d%s: %d rounds, %d workers, %d operations; %d backups checked: files %s (sparse %s), MiB %s, "
          "paths changed during each %s; %.0f s"
          % (options.seed, (" -o %s" % options.options if options.options else "") + (" capacity %d MiB" % options.capacity if options.capacity else ""),
             options.rounds, options.workers, operations, len(figures), spread([f[0] for f in figures]), spread([f[3] for f in figures]),
             spread([f[1] for f in figures], 1 << 20), spread([f[2] for f in figures]), clock() - started))
    for note in gave_up:
        print("note (seed %d): gave up on a busy file, as documented: %s" % (options.seed, note))
    if len(gave_up) > len(figures):
        failures.append("more backups gave up on a busy file (%d) than were checked (%d)" % (len(gave_up), len(figures)))
    if failures:
        for failure in failures[:40]:
            print("FAIL (seed %d): %s" % (options.seed, failure))
        if len(failures) > 40:
            print("FAIL (seed %d): … and %d more" % (options.seed, len(failures) - 40))
        print("replay: %s" % " ".join([sys.argv[0]] + sys.argv[1:]))
        sys.exit(1)


if __name__ == "__main__":
    main()
