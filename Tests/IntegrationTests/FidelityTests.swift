import ContainerSigning
import ContainerStore
import Foundation
import Glibc
import Testing

// Fidelity to a native folder: the same calls through a mount and in a plain folder on
// the store's own file system give the same results and leave the same nodes. The calls
// run in python (one process per side), so each side sees exactly the same requests.

/// The writable areas of a container, each as a folder of the store.
let writableAreas = ["Documents", "Library/Application Support", "Library/Caches", "tmp"]

/// Python run before every probe: `check(label, fn)` records what `fn` returned ("ok"
/// for nothing) or the errno name it failed with; `libc` reaches calls python lacks.
private let probePrelude = """
    import ctypes, errno, hashlib, json, os, stat, sys
    libc = ctypes.CDLL(None, use_errno=True)
    results = {}
    def check(label, fn):
        try:
            value = fn()
            results[label] = "ok" if value is None else str(value)
        except OSError as error:
            results[label] = errno.errorcode.get(error.errno, str(error.errno))
        except Exception as error:   # python refusing an argument: the same on both sides
            results[label] = "python " + type(error).__name__
    def c_call(result):
        if result < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
        return result
    def make(path, data=b"data", mode=0o644):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
    def link_fd(fd, path):
        # linkat with AT_SYMLINK_FOLLOW: python's os.link calls link(), which would link
        # the /proc symlink itself (EXDEV), not the file it names.
        c_call(libc.linkat(-100, ("/proc/self/fd/%d" % fd).encode(), -100, path.encode(), 0x400))
    def on_open(path, flags, fn):
        fd = os.open(path, flags)
        try:
            return fn(fd)
        finally:
            os.close(fd)

    """

/// Runs python `code` with `sys.argv[1:]` = `arguments` (as `user`, under `umask` if
/// given) and returns the `results` it recorded.
func pythonProbe(_ code: String, _ arguments: [String], user: String? = nil) throws -> [String: String] {
    let program = probePrelude + code + "\nprint(json.dumps(results))\n"
    let result = try runProgram(["/usr/bin/python3", "-c", program] + arguments, user: user, directory: "/")
    guard result.status == 0, let data = result.stdout.data(using: .utf8),
          let decoded = try? JSONSerialization.jsonObject(with: data) as? [String: String] else {
        throw TestFailure("python probe failed: \(result)")
    }
    return decoded
}

/// What a tree holds, node by node, as python sees it: type, mode, owner, size, link
/// count, extended attributes, a digest of small files' content and symlink targets,
/// and the times of nodes whose names start with `t-` (the ones a test set).
func treeFacts(_ path: String) throws -> [String: String] {
    try pythonProbe("""
        root = sys.argv[1]
        for folder, folders, files in os.walk(root):
            for name in folders + files:
                path = os.path.join(folder, name)
                info = os.lstat(path)
                facts = "%o %d:%d size %d links %d" % (info.st_mode, info.st_uid, info.st_gid, info.st_size, info.st_nlink)
                if name.startswith("t-"):
                    facts += " atime %d mtime %d" % (info.st_atime_ns, info.st_mtime_ns)
                if stat.S_ISREG(info.st_mode) and info.st_size < 1 << 20:
                    with open(path, "rb") as f:
                        facts += " sha " + hashlib.sha256(f.read()).hexdigest()[:16]
                if stat.S_ISLNK(info.st_mode):
                    facts += " -> " + os.readlink(path)
                if not stat.S_ISFIFO(info.st_mode):
                    for attribute in sorted(os.listxattr(path, follow_symlinks=False)):
                        value = os.getxattr(path, attribute, follow_symlinks=False)
                        facts += " %s=%s" % (attribute, hashlib.sha256(value).hexdigest()[:16])
                results[os.path.relpath(path, root)] = facts
        """, [path])
}

/// The daemon serving `container`: the pid its mount lock names, if that process lives.
func daemonIsAlive(_ container: MountedContainer) -> Bool {
    guard let lock = try? String(contentsOfFile: container.stored(".containerfs/mount.lock"), encoding: .utf8),
          let pid = lock.split(separator: "\n").first.flatMap({ pid_t($0) }) else { return false }
    var info = statvfs()
    return kill(pid, 0) == 0 && !isDeadMount(container.mountpoint) && statvfs(container.mountpoint, &info) == 0
}

/// Extreme but legal arguments (issue 12): times at both ends of their range, sizes and
/// offsets near 2^63, truncate and fallocate past any disk, huge copy_file_range lengths,
/// 64 KiB xattr values, 255- and 256-byte xattr names, modes 07777, uid and gid 2^32−2.
/// Each call must give what it gives in a native folder, the daemon must stay up, and
/// the store must hold what the native folder holds.
@Suite("Extreme arguments")
struct ExtremeArgumentTests {
    /// One python program of about a hundred calls, run in a folder (sys.argv[1]).
    static let calls = """
        D = sys.argv[1]
        os.umask(0)
        def f(name): return os.path.join(D, name)
        def stamps(name): 
            info = os.lstat(f(name))
            return "%d %d" % (info.st_atime_ns, info.st_mtime_ns)

        # Times: nanoseconds at both ends of int64, seconds far past 2262 and before 1970.
        time_cases = [
            ("ns-min", dict(ns=(-2**63, -2**63))), ("ns-max", dict(ns=(2**63 - 1, 2**63 - 1))),
            ("ns-mixed", dict(ns=(-2**63, 2**63 - 1))), ("ns-999999999", dict(ns=(999999999, 999999999))),
            ("ns-minus-1", dict(ns=(-1, -1))), ("epoch", dict(ns=(0, 0))),
            ("s-1e10", dict(times=(1e10, 1e10))), ("s-minus-1e10", dict(times=(-1e10, -1e10))),
            ("s-2^40", dict(times=(2.0**40, 2.0**40))), ("s-2^62", dict(times=(2.0**62, 2.0**62))),
            ("s-minus-2^62", dict(times=(-2.0**62, -2.0**62))),
        ]
        for label, arguments in time_cases:
            make(f("t-" + label))
            check("utime " + label, lambda: os.utime(f("t-" + label), **arguments))
            check("stamps " + label, lambda: stamps("t-" + label))
        # The access time alone (mtime omitted): what the tag records as the last use.
        class timespec(ctypes.Structure):
            _fields_ = [("tv_sec", ctypes.c_int64), ("tv_nsec", ctypes.c_long)]
        UTIME_OMIT = (1 << 30) - 2
        # (Their mtime is when they were made, which differs between the two sides.)
        for label, seconds in [("atime-max", 2**62), ("atime-min", -2**62), ("atime-2300", 10413792000)]:
            make(f("a-" + label))
            pair = (timespec * 2)(timespec(seconds, 0), timespec(0, UTIME_OMIT))
            check("utimensat " + label, lambda: c_call(libc.utimensat(-100, f("a-" + label).encode(), pair, 0)) and None)
            check("atime " + label, lambda: os.stat(f("a-" + label)).st_atime_ns)
        pair = (timespec * 2)(timespec(0, 10**9), timespec(0, 0))
        make(f("bad-nsec"))
        check("utimensat nsec 1e9", lambda: c_call(libc.utimensat(-100, f("bad-nsec").encode(), pair, 0)) and None)
        # A symlink's atime moves when it is read: its mtime only.
        os.symlink("nowhere", f("link"))
        check("utime symlink ns-max", lambda: os.utime(f("link"), ns=(2**63 - 1, 2**63 - 1), follow_symlinks=False))
        check("mtime symlink", lambda: os.lstat(f("link")).st_mtime_ns)

        # Sizes: truncate near 2^63, past any disk, sparse; negative.
        for size in [2**63 - 1, 2**62, 2**50, 2**44, 2**40, 0, -1]:
            make(f("size-%d" % size))
            check("truncate %d" % size, lambda: os.truncate(f("size-%d" % size), size))
            check("ftruncate %d" % size, lambda: on_open(f("size-%d" % size), os.O_WRONLY, lambda fd: os.ftruncate(fd, size)))
            check("size after %d" % size, lambda: os.stat(f("size-%d" % size)).st_size)
        # Offsets: writes and reads near 2^63.
        make(f("offsets"))
        for offset in [2**63 - 2, 2**63 - 1, 2**62, 2**44, 2**43]:
            check("pwrite %d" % offset, lambda: on_open(f("offsets"), os.O_WRONLY, lambda fd: os.pwrite(fd, b"x", offset)))
            check("pread %d" % offset, lambda: on_open(f("offsets"), os.O_RDONLY, lambda fd: os.pread(fd, 16, offset)))
            check("seek data %d" % offset, lambda: on_open(f("offsets"), os.O_RDONLY, lambda fd: os.lseek(fd, offset, os.SEEK_DATA)))
        check("size of offsets", lambda: os.stat(f("offsets")).st_size)

        # fallocate: every range ends past any disk (over 16 TiB), so none allocates anything.
        libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
        make(f("allocated"))
        modes = [("plain", 0), ("keep-size", 1), ("punch-hole", 3), ("zero-range", 16), ("collapse", 8), ("insert", 32)]
        ranges = [(0, 2**63 - 1), (2**63 - 2, 1), (2**62, 2**62), (0, 2**50), (2**62, 1), (-1, 1), (0, -1), (0, 0)]
        for name, mode in modes:
            for offset, length in ranges:
                check("fallocate %s %d+%d" % (name, offset, length), lambda: on_open(f("allocated"), os.O_RDWR,
                      lambda fd: c_call(libc.fallocate(fd, mode, offset, length)) and None))
        check("size of allocated", lambda: os.stat(f("allocated")).st_size)

        # copy_file_range: huge lengths, offsets at the end of the range.
        make(f("copy-source"), b"0123456789")
        make(f("copy-target"), b"")
        copies = [("len-max", 2**63 - 1, None, None), ("len-2^62", 2**62, None, None), ("in-max", 4, 2**63 - 1, None),
                  ("out-near-max", 4, None, 2**63 - 4), ("out-2^62", 4, None, 2**62), ("both-2^62", 2**62, 2**62, 2**62)]
        for label, count, offset_in, offset_out in copies:
            def copy(count=count, offset_in=offset_in, offset_out=offset_out):
                source = os.open(f("copy-source"), os.O_RDONLY)
                target = os.open(f("copy-target"), os.O_WRONLY)
                try:
                    return os.copy_file_range(source, target, count, offset_in, offset_out)
                finally:
                    os.close(source)
                    os.close(target)
            check("copy_file_range " + label, copy)
        check("size of copy-target", lambda: os.stat(f("copy-target")).st_size)

        # Extended attributes: 64 KiB values, 255- and 256-byte names, small buffers, flags.
        make(f("attributes"))
        for size in [65536, 65537, 4000, 0]:
            check("setxattr value %d" % size, lambda: os.setxattr(f("attributes"), "user.v%d" % size, b"v" * size))
        for length in [255, 256]:
            name = "user." + "n" * (length - 5)
            check("setxattr name %d" % length, lambda: os.setxattr(f("attributes"), name, b"x"))
            check("getxattr name %d" % length, lambda: len(os.getxattr(f("attributes"), name)))
            check("removexattr name %d" % length, lambda: os.removexattr(f("attributes"), name))
        check("setxattr create existing", lambda: os.setxattr(f("attributes"), "user.v4000", b"y", os.XATTR_CREATE))
        check("setxattr replace missing", lambda: os.setxattr(f("attributes"), "user.none", b"y", os.XATTR_REPLACE))
        check("setxattr bad flags", lambda: c_call(libc.setxattr(f("attributes").encode(), b"user.flags", b"x", 1, 4)) and None)
        buffer = ctypes.create_string_buffer(65536)
        check("getxattr size 0", lambda: c_call(libc.getxattr(f("attributes").encode(), b"user.v4000", None, 0)))
        check("getxattr size 1", lambda: c_call(libc.getxattr(f("attributes").encode(), b"user.v4000", buffer, 1)))
        check("getxattr size 64k", lambda: c_call(libc.getxattr(f("attributes").encode(), b"user.v4000", buffer, 65536)))
        check("getxattr size 2^32+1", lambda: c_call(libc.getxattr(f("attributes").encode(), b"user.v4000", buffer, ctypes.c_size_t(2**32 + 1))))
        check("listxattr size 1", lambda: c_call(libc.listxattr(f("attributes").encode(), buffer, 1)))
        check("listxattr size 0", lambda: c_call(libc.listxattr(f("attributes").encode(), None, 0)))
        check("removexattr missing", lambda: os.removexattr(f("attributes"), "user.none"))
        check("trusted xattr", lambda: os.setxattr(f("attributes"), "trusted.x", b"t"))

        # Modes 07777 and beyond, on every kind of node made with them.
        for mode in [0o7777, 0o4755, 0o2755, 0o1777, 0o2745, 0xFFFFFFFF]:
            make(f("mode-%o" % mode))
            check("chmod %o" % mode, lambda: os.chmod(f("mode-%o" % mode), mode))
        check("open 07777", lambda: os.close(os.open(f("made-07777"), os.O_WRONLY | os.O_CREAT, 0o7777)))
        check("mkdir 07777", lambda: os.mkdir(f("dir-07777"), 0o7777))
        check("chmod dir 07777", lambda: os.chmod(f("dir-07777"), 0o7777))
        check("mkfifo 07777", lambda: os.mkfifo(f("fifo-07777"), 0o7777))
        check("mknod regular 07777", lambda: os.mknod(f("node-07777"), stat.S_IFREG | 0o7777))

        # Owners: uid and gid 2^32-2 (2^32-1 means "leave as is").
        for label, uid, gid in [("max", 2**32 - 2, 2**32 - 2), ("keep", 2**32 - 1, 2**32 - 1), ("uid-only", 2**32 - 2, 2**32 - 1)]:
            make(f("owner-" + label))
            check("chown " + label, lambda: os.chown(f("owner-" + label), uid, gid))
        os.symlink("owner-max", f("owner-link"))
        check("lchown max", lambda: os.chown(f("owner-link"), 2**32 - 2, 2**32 - 2, follow_symlinks=False))
        check("chown dir max", lambda: os.chown(f("dir-07777"), 2**32 - 2, 2**32 - 2))

        # Names at the limit: 255 bytes is the longest a name can be.
        check("create name 255", lambda: make(f("n" * 255)))
        check("create name 256", lambda: make(f("n" * 256)))
        check("mkdir name 256", lambda: os.mkdir(f("d" * 256)))
        check("rename to name 256", lambda: os.rename(f("n" * 255), f("n" * 256)))

        # Directory offsets near 2^63: seek, then read what is there.
        def listing_from(offset):
            fd = os.open(D, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.lseek(fd, offset, os.SEEK_SET)
                buffer = ctypes.create_string_buffer(65536)
                return c_call(libc.syscall(217, fd, buffer, 65536))
            finally:
                os.close(fd)
        for offset in [2**63 - 1, 2**62, 2**31]:
            check("getdents from %d" % offset, lambda: listing_from(offset))
        """

    /// Where the kernel's FUSE layer answers before the daemon is asked, and differently
    /// from ext4, whatever a daemon does: the mount's answer. FUSE has no collapse or insert
    /// range (`fuse_file_fallocate` refuses them), and its largest file size is 2^63−1
    /// where ext4's is 16 TiB, so a copy of nothing to an offset ext4 could never reach is 0
    /// bytes copied, not `EFBIG` (a copy of something reaches the store, which refuses it).
    static func kernelAnswer(_ label: String) -> String? {
        if label.hasPrefix("fallocate collapse") || label.hasPrefix("fallocate insert") {
            // vfs_fallocate's own checks come first: a negative or empty range is EINVAL, one
            // whose end overflows is EFBIG, on both sides.
            let range = label.split(separator: " ").last?.split(separator: "+").compactMap { Int64($0) } ?? []
            guard range.count == 2, range[0] >= 0, range[1] > 0, !range[0].addingReportingOverflow(range[1]).overflow else { return nil }
            return "ENOTSUP"
        }
        if label == "copy_file_range both-2^62" { return "0" }
        return nil
    }

    /// Every call above, in every writable area, with the kernel passing file data through
    /// to the store (root's default) and with the daemon serving it.
    @Test(arguments: [[], ["nopassthrough"]])
    func extremeArgumentsGiveWhatNativeGives(options: [String]) throws {
        try withMountedContainer(options: options) { container in
            var cases = 0
            for area in writableAreas {
                let native = container.base + "/native/" + area
                try FileManager.default.createDirectory(atPath: native, withIntermediateDirectories: true)
                #expect(mkdir(container.mounted(area + "/extreme"), 0o755) == 0)
                #expect(mkdir(native + "/extreme", 0o755) == 0)
                let expected = try pythonProbe(Self.calls, [native + "/extreme"])
                let got = try pythonProbe(Self.calls, [container.mounted(area + "/extreme")])
                cases += expected.count
                #expect(expected.count > 150, "\(area): only \(expected.count) calls ran")
                for (label, value) in expected.sorted(by: { $0.key < $1.key }) {
                    let wanted = Self.kernelAnswer(label) ?? value
                    if got[label] != wanted {
                        Issue.record("\(area) \(options): \(label): native \(value), expected \(wanted), mount \(got[label] ?? "nothing")")
                    }
                }
                #expect(Set(got.keys) == Set(expected.keys), "\(area): the same calls ran")
                #expect(daemonIsAlive(container), "\(area): the daemon died")
                let nativeFacts = try treeFacts(native + "/extreme")
                let storedFacts = try treeFacts(container.stored(area + "/extreme"))
                for (path, facts) in nativeFacts.sorted(by: { $0.key < $1.key }) where storedFacts[path] != facts {
                    Issue.record("\(area) \(options): \(path): native \(facts), store \(storedFacts[path] ?? "missing")")
                }
                #expect(Set(storedFacts.keys) == Set(nativeFacts.keys), "\(area): the same nodes")
            }
            #expect(cases > 600, "cases run: \(cases)")
            print("extreme arguments \(options): \(cases) cases in \(writableAreas.count) areas")
        }
    }

    /// The crash of issue 12 as reported: python setting a time of year 2286 in
    /// `Library/Caches` and `tmp` (tagged areas, whose last use the daemon records).
    @Test func aTimeOfYear2286InATaggedAreaKeepsTheDaemonUp() throws {
        try withMountedContainer { container in
            let results = try pythonProbe("""
                for area in ["Library/Caches", "tmp"]:
                    path = os.path.join(sys.argv[1], area, "f")
                    make(path)
                    check(area + " seconds", lambda: os.utime(path, (1e10, 1e10)))
                    check(area + " ns min", lambda: os.utime(path, ns=(-2**63, -2**63)))
                    check(area + " ns max", lambda: os.utime(path, ns=(2**63 - 1, 2**63 - 1)))
                    check(area + " stat", lambda: os.stat(path) and None)
                """, [container.mountpoint])
            #expect(results.values.allSatisfy { $0 == "ok" }, "\(results)")
            #expect(daemonIsAlive(container))
        }
    }
}

/// The caller's umask (issue 12 §2): under umasks 000, 002, 022 and 077, files, folders,
/// FIFOs, nodes, symlinks and O_TMPFILE files get the modes they get natively, for
/// root's daemon and for an ordinary user's.
@Suite("Umask")
struct UmaskTests {
    static let calls = """
        D = sys.argv[1]
        def mode(path): return "%o" % stat.S_IMODE(os.lstat(path).st_mode)
        for mask in [0o000, 0o002, 0o022, 0o077]:
            os.umask(mask)
            sub = os.path.join(D, "umask-%03o" % mask)
            def made(label, fn, name):
                check(label, fn)
                check(label + " mode", lambda: mode(os.path.join(sub, name)))
            made("%03o mkdir 0777" % mask, lambda: os.mkdir(sub, 0o777), "")
            made("%03o create 0666" % mask, lambda: make(os.path.join(sub, "file"), mode=0o666), "file")
            made("%03o create 0777" % mask, lambda: os.close(os.open(os.path.join(sub, "exe"), os.O_WRONLY | os.O_CREAT, 0o777)), "exe")
            made("%03o mkfifo 0666" % mask, lambda: os.mkfifo(os.path.join(sub, "fifo"), 0o666), "fifo")
            made("%03o mknod 0666" % mask, lambda: os.mknod(os.path.join(sub, "node"), stat.S_IFREG | 0o666), "node")
            made("%03o symlink" % mask, lambda: os.symlink("file", os.path.join(sub, "link")), "link")
            made("%03o mkdir 0755" % mask, lambda: os.mkdir(os.path.join(sub, "dir"), 0o755), "dir")
            def tmpfile():
                fd = os.open(sub, os.O_TMPFILE | os.O_WRONLY, 0o666)
                try:
                    link_fd(fd, os.path.join(sub, "tmpfile"))
                finally:
                    os.close(fd)
            made("%03o O_TMPFILE 0666" % mask, tmpfile, "tmpfile")
        """

    /// Root's daemon, for root.
    @Test func rootsFilesFollowTheCallersUmask() throws {
        try withMountedContainer { container in
            let native = container.base + "/native"
            #expect(mkdir(native, 0o755) == 0)
            let expected = try pythonProbe(Self.calls, [native])
            let got = try pythonProbe(Self.calls, [container.mounted("Documents")])
            Self.expectSame(got, expected)
        }
    }

    /// An ordinary user's daemon, for that user.
    @Test func anOrdinaryUsersFilesFollowTheirUmask() throws {
        let user = "cfs-alice"
        try withMountedContainer(user: user) { container in
            let native = container.base + "/native"
            #expect(mkdir(native, 0o755) == 0)
            #expect(chown(native, try uidOf(user), try gidOf(user)) == 0)
            let expected = try pythonProbe(Self.calls, [native], user: user)
            let got = try pythonProbe(Self.calls, [container.mounted("Documents")], user: user)
            Self.expectSame(got, expected)
        }
    }

    static func expectSame(_ got: [String: String], _ expected: [String: String], sourceLocation: SourceLocation = #_sourceLocation) {
        // Natively, as documented: what the umask leaves of the mode asked for.
        #expect(expected["002 create 0666 mode"] == "664" && expected["002 mkdir 0777 mode"] == "775", "native: \(expected)",
                sourceLocation: sourceLocation)
        #expect(expected["000 create 0777 mode"] == "777" && expected["077 create 0666 mode"] == "600", "native: \(expected)",
                sourceLocation: sourceLocation)
        #expect(expected.count == 64, "native: \(expected)", sourceLocation: sourceLocation)
        for (label, value) in expected.sorted(by: { $0.key < $1.key }) where got[label] != value {
            Issue.record("\(label): native \(value), mount \(got[label] ?? "nothing")", sourceLocation: sourceLocation)
        }
    }
}

/// `open(folder, O_TMPFILE)` (issue 12 §3): an unnamed file a program can name with
/// `linkat`, a creation in its folder's area; the inbox, the bundle and the structure
/// refuse it as any creation, and a link of one into the inbox or the bundle is refused
/// as any link there.
@Suite("O_TMPFILE")
struct TmpfileTests {
    @Test(arguments: [[], ["nopassthrough"]])
    func aTmpfileIsACreationInItsFoldersArea(options: [String]) throws {
        try withMountedContainer(options: options) { container in
            let probe = try Probe(container)
            let results = try pythonProbe("""
                M = sys.argv[1]
                os.umask(0o022)
                def tmpfile(folder, name=None, flags=os.O_RDWR, data=b"unnamed"):
                    fd = os.open(os.path.join(M, folder), os.O_TMPFILE | flags, 0o640)
                    try:
                        os.write(fd, data)
                        os.lseek(fd, 0, os.SEEK_SET)
                        if flags == os.O_RDWR and os.read(fd, 100) != data: return "read back wrong"
                        if os.fstat(fd).st_nlink != 0: return "linked"
                        if name: link_fd(fd, os.path.join(M, name))
                    finally:
                        os.close(fd)
                for area in ["Documents", "Library/Application Support", "Library/Caches", "tmp"]:
                    check(area + " named", lambda: tmpfile(area, area + "/named"))
                    check(area + " unnamed", lambda: tmpfile(area))
                    check(area + " excl", lambda: tmpfile(area, area + "/excl", os.O_WRONLY | os.O_EXCL))
                check("in inbox", lambda: tmpfile("Documents/Inbox"))
                check("in bundle", lambda: tmpfile("Demo.app"))
                check("in bundle folder", lambda: tmpfile("Demo.app/res"))
                check("in root", lambda: tmpfile(""))
                check("linked into inbox", lambda: tmpfile("Documents", "Documents/Inbox/named"))
                check("linked into bundle", lambda: tmpfile("Documents", "Demo.app/named"))
                """, [container.mountpoint])
            for area in writableAreas {
                #expect(results[area + " named"] == "ok", "\(area): \(results)")
                #expect(results[area + " unnamed"] == "ok", "\(area): \(results)")
                // O_EXCL: never linkable (natively ENOENT too).
                #expect(results[area + " excl"] == "ENOENT", "\(area): \(results)")
                let stored = container.stored(area + "/named")
                #expect(contents(stored) == bytes("unnamed"), "\(area): the named tmpfile is in the store")
                #expect(status(stored).map { $0.st_mode & 0o7777 } == 0o640, "\(area): mode of the tmpfile")
                #expect(status(container.stored(area + "/excl")) == nil)
            }
            #expect(results["in inbox"] == "EACCES", "\(results)")
            #expect(results["in bundle"] == "EPERM", "\(results)")
            #expect(results["in bundle folder"] == "EPERM", "\(results)")
            #expect(results["in root"] == "EPERM", "\(results)")
            #expect(results["linked into inbox"] == "EACCES", "\(results)")
            #expect(results["linked into bundle"] == "EPERM", "\(results)")
            #expect(status(container.stored("Documents/Inbox/named")) == nil)
            // The unnamed ones left nothing behind: each area holds its named file only.
            for area in writableAreas {
                let names = try FileManager.default.contentsOfDirectory(atPath: container.stored(area)).filter { $0 != "CACHEDIR.TAG" && $0 != "Inbox" }
                #expect(names == ["named"], "\(area): \(names)")
            }
            let records = try probe.takeAuditRecords(atLeast: 6)
            let denials = records.map { record in
                let areas = (record["areas"] as? [String] ?? []).joined(separator: ",")
                return "\(record["operation"] as? String ?? "?") \(areas) \(record["errno"] as? String ?? "?")"
            }
            #expect(denials.sorted() == ["link data,bundle EPERM", "link data,inbox EACCES", "open bundle EPERM", "open bundle EPERM",
                                         "open inbox EACCES", "open structure EPERM"], "\(denials)")
            try probe.expectBundleUnchanged("tmpfiles")
        }
    }

    /// Another user's tmpfile belongs to that user, as any file they create.
    @Test func anotherUsersTmpfileIsTheirs() throws {
        try withMountedContainer(options: ["allow_other"]) { container in
            #expect(chmod(container.base, 0o755) == 0)
            #expect(mkdir(container.mounted("Documents/shared"), 0o777) == 0 && chmod(container.mounted("Documents/shared"), 0o777) == 0)
            let results = try pythonProbe("""
                fd = os.open(sys.argv[1], os.O_TMPFILE | os.O_WRONLY, 0o600)
                check("link", lambda: link_fd(fd, sys.argv[1] + "/hers"))
                """, [container.mounted("Documents/shared")], user: "cfs-alice")
            #expect(results["link"] == "ok", "\(results)")
            let info = status(container.stored("Documents/shared/hers"))
            let alice = (uid: try uidOf("cfs-alice"), gid: try gidOf("cfs-alice"))
            #expect(info?.st_uid == alice.uid && info?.st_gid == alice.gid, "owner \(String(describing: info))")
        }
    }
}

func uidOf(_ user: String) throws -> uid_t {
    guard let entry = getpwnam(user) else { throw TestFailure("user \(user) does not exist: run scripts/install-deps.sh") }
    return entry.pointee.pw_uid
}

func gidOf(_ user: String) throws -> gid_t {
    guard let entry = getpwnam(user) else { throw TestFailure("user \(user) does not exist: run scripts/install-deps.sh") }
    return entry.pointee.pw_gid
}

/// `chown(path, -1, -1)` reaches the daemon as a SETATTR with nothing to set, the request
/// the kernel also sends before a passthrough write to clear set-ID bits (issue 20 §4).
/// The bits go only where Linux clears them (the owner, root, a writer), never for
/// another user, and never in the bundle or the inbox, which the policy refuses.
@Suite("Set-ID bits on request")
struct SetIDRequestTests {
    @Test func aNoOpChownClearsSetIDBitsOnlyWhereLinuxWould() throws {
        let base = try makeTemporaryDirectory()
        defer { _ = try? runProgram(["rm", "-rf", base]) }
        #expect(chmod(base, 0o755) == 0)
        let bundle = base + "/Demo.app", store = base + "/store", mountpoint = base + "/mnt", native = base + "/native"
        for folder in [bundle, mountpoint, native] { #expect(mkdir(folder, 0o755) == 0) }
        try Data("<plist/>\n".utf8).write(to: URL(fileURLWithPath: bundle + "/Info.plist"))
        try Data("#!/bin/sh\n".utf8).write(to: URL(fileURLWithPath: bundle + "/tool"))
        #expect(chmod(bundle + "/tool", 0o4755) == 0)
        let created = try containerfs(["create", store, "--bundle", bundle])
        try #require(created.status == 0, "\(created)")
        // create installs no set-ID file any more (issue 20 §2); a store made before it could
        // hold one, signed as it was: re-sign the bundle with the bits back.
        try #require(status(store + "/Demo.app/tool").map { $0.st_mode & 0o7777 } == 0o755, "create drops the set-ID bits")
        #expect(chmod(store + "/Demo.app/tool", 0o4755) == 0)
        try resignBundle(store)
        try Data("delivered\n".utf8).write(to: URL(fileURLWithPath: store + "/Documents/Inbox/delivered"))
        #expect(chmod(store + "/Documents/Inbox/delivered", 0o4755) == 0)
        let mounted = try containerfs(["mount", store, mountpoint, "-o", "allow_other"])
        try #require(mounted.status == 0, "\(mounted)")
        defer {
            if (try? containerfs(["unmount", mountpoint]))?.status != 0 { _ = try? runProgram(["fusermount3", "-uz", mountpoint]) }
        }
        let alice = (uid: try uidOf("cfs-alice"), gid: try gidOf("cfs-alice"))
        // root's set-user-ID file and alice's own, through the mount and natively.
        #expect(mkdir(mountpoint + "/Documents/shared", 0o777) == 0 && chmod(mountpoint + "/Documents/shared", 0o777) == 0)
        for folder in [mountpoint + "/Documents/shared", native] {
            for name in ["roots", "hers", "roots-by-root"] {
                #expect(withOpened(folder + "/" + name, O_WRONLY | O_CREAT, mode: 0o755) == 0)
                if name == "hers" { #expect(chown(folder + "/" + name, alice.uid, alice.gid) == 0) }
                #expect(chmod(folder + "/" + name, 0o4755) == 0)
            }
        }
        let auditedBefore = try auditCount(store)

        let results = try pythonProbe("""
            M, N = sys.argv[1], sys.argv[2]
            for label, path in [("bundle", M + "/Demo.app/tool"), ("inbox", M + "/Documents/Inbox/delivered"),
                                ("root's", M + "/Documents/shared/roots"), ("native root's", N + "/roots"),
                                ("hers", M + "/Documents/shared/hers"), ("native hers", N + "/hers")]:
                check(label, lambda: os.chown(path, -1, -1))
            """, [mountpoint, native], user: "cfs-alice")
        #expect(results["bundle"] == "EPERM", "\(results)")
        #expect(results["inbox"] == "EPERM", "\(results)")
        #expect(results["native root's"] == "EPERM" && results["root's"] == results["native root's"], "\(results)")
        #expect(results["native hers"] == "ok" && results["hers"] == "ok", "\(results)")

        // Root may change its own file, but not the bundle (EPERM) nor the inbox (EACCES).
        #expect(errnoOf { chown(mountpoint + "/Demo.app/tool", uid_t.max, gid_t.max) } == EPERM)
        #expect(errnoOf { chown(mountpoint + "/Documents/Inbox/delivered", uid_t.max, gid_t.max) } == EACCES)
        #expect(errnoOf { chown(mountpoint + "/Documents/shared/roots-by-root", uid_t.max, gid_t.max) } == 0)
        #expect(errnoOf { chown(native + "/roots-by-root", uid_t.max, gid_t.max) } == 0)

        func mode(_ path: String) -> mode_t? { status(path).map { $0.st_mode & 0o7777 } }
        #expect(mode(store + "/Demo.app/tool") == 0o4755, "the bundle is unchanged")
        #expect(mode(store + "/Documents/Inbox/delivered") == 0o4755, "the inbox is unchanged")
        #expect(mode(store + "/Documents/shared/roots") == 0o4755 && mode(native + "/roots") == 0o4755)
        #expect(mode(store + "/Documents/shared/hers") == 0o755 && mode(native + "/hers") == 0o755)
        #expect(mode(store + "/Documents/shared/roots-by-root") == mode(native + "/roots-by-root"))
        #expect(mode(native + "/roots-by-root") == 0o755)

        // Root's two refusals are audited as chowns; alice's were refused before the policy.
        let records = try auditRecordsOf(store).dropFirst(auditedBefore)
        let denials = records.map { "\($0["operation"] as? String ?? "?") \(($0["areas"] as? [String] ?? []).joined()) \($0["errno"] as? String ?? "?")" }
        #expect(denials == ["chown bundle EPERM", "chown inbox EACCES"], "\(denials)")
        let verified = try containerfs(["verify", store])
        #expect(verified.status == 0, "the bundle still verifies: \(verified)")
    }
}

/// Signs the store's bundle again as it is now, with the installer key (the default one):
/// a store as `create` made it before it dropped set-ID bits.
func resignBundle(_ storePath: String) throws {
    let store = try Store.open(storePath)
    for name in ["bundle.manifest", "bundle.sig", "bundle.pub", "bundle.cache"] { unlinkat(store.stateFD, name, 0) }
    try BundleSignature.sign(rootFD: store.rootFD, stateFD: store.stateFD, bundleName: store.layout.bundleName,
                             key: try InstallerKey.load(at: nil))
}

/// The audit records of a store (`containerfs audit --json`), waiting a little for the
/// daemon's writer thread.
func auditRecordsOf(_ store: String) throws -> [[String: Any]] {
    usleep(300_000)
    let result = try containerfs(["audit", store, "--json"])
    guard result.status == 0 else { throw TestFailure("containerfs audit failed: \(result)") }
    return try result.stdout.split(separator: "\n").map {
        guard let record = try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] else { throw TestFailure("bad record \($0)") }
        return record
    }
}

func auditCount(_ store: String) throws -> Int { try auditRecordsOf(store).count }
