import ContainerPurge
import ContainerStore
import Foundation
import Glibc
import Testing

// How the daemon holds nodes (issue 18, docs/architecture.md "Nodes, not paths"): more
// nodes than descriptors, from a login shell's limit; cold nodes reopened, never as another
// file; a deleted file's blocks freed at once; a deep folder chain moved between areas.
//
// Sizes: 40,000 files per area by default (CONTAINERFS_TEST_SCALE_FILES; the issue's
// 100,000 passes too, in 262 s for the four cases here, which the suite's budget
// has no room for: each file costs 6 to 8 round trips to the daemon, about 40 µs each on
// /dev/fuse); 40,000 is still 20 times the daemon's cache under the hard limit the test
// sets. Git and tar trees of 50,000 files, as the issue asks (CONTAINERFS_TEST_SCALE_TREE),
// a chain 20,000 deep (CONTAINERFS_TEST_SCALE_DEPTH). The many-files and tree tests keep
// their stores on a tmpfs of their own: on an ext4 without a journal (this machine's),
// creating files soon after deleting as many costs time quadratic in their number,
// natively too (its inode allocator checks every inode deleted in the last 30 seconds, a
// buffer lookup each: 5,000 creates after 5,000 deletes took 7.7 times as long as before
// them, and 100,000 ran at 420 a second), which would measure the disk, not the daemon.

/// A number from the environment, or `fallback`.
private func scale(_ name: String, _ fallback: Int) -> Int {
    ProcessInfo.processInfo.environment[name].flatMap { Int($0) } ?? fallback
}

/// The shell words that give the daemon a login shell's soft limit of 1024 descriptors,
/// with a hard limit of at most 4096, so that the daemon's cache (half the hard limit
/// it raises itself to) stays far below the files of the test on any machine.
private let loginShellLimits = #"ulimit -S -n 1024 && h=$(ulimit -H -n) && { { [ "$h" != unlimited ] && [ "$h" -le 4096 ]; } || ulimit -H -n 4096; }"#

/// The environment of this test process with `extra` added (for the daemon).
private func environment(_ extra: [String: String]) -> [String: String] {
    ProcessInfo.processInfo.environment.merging(extra) { $1 }
}

/// Creates, stats, lists, reads and deletes N files in Documents/scale and
/// Library/Caches/scale below argv[1]; prints the rate of each step; exits 1 on any error.
/// With argv[3], the store, the daemon (its pid in the store's mount lock) must have
/// raised its soft descriptor limit above the shell's 1024 and hold fewer descriptors
/// than the nodes the kernel knows once all files are created.
private let manyFilesScript = #"""
import os, sys, time
base, n = sys.argv[1], int(sys.argv[2])
def check_daemon():
    if len(sys.argv) < 4: return
    with open(sys.argv[3] + "/.containerfs/mount.lock") as f: pid = f.readline().strip()
    with open(f"/proc/{pid}/limits") as f:
        soft = [line.split()[3] for line in f if line.startswith("Max open files")][0]
    held = len(os.listdir(f"/proc/{pid}/fd"))
    print(f"daemon: soft limit {soft}, {held} descriptors for {n} files")
    assert soft == "unlimited" or int(soft) > 1024, f"the daemon kept the shell's soft limit: {soft}"
    assert held < n, f"the daemon holds {held} descriptors for {n} files"
for area in ("Documents/scale", "Library/Caches/scale"):
    d = os.path.join(base, area)
    os.mkdir(d)
    steps = []
    t = time.monotonic()
    for i in range(n):
        fd = os.open(f"{d}/f{i}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, b"%d\n" % i)
        os.close(fd)
    steps.append(("create", time.monotonic()))
    check_daemon()
    for i in range(n):
        assert os.stat(f"{d}/f{i}").st_size == len(b"%d\n" % i)
    steps.append(("stat", time.monotonic()))
    names = os.listdir(d)
    assert len(names) == n, len(names)
    steps.append(("list", time.monotonic()))
    for i in range(n):
        with open(f"{d}/f{i}", "rb") as f:
            assert f.read() == b"%d\n" % i
    steps.append(("read", time.monotonic()))
    for i in range(n):
        os.unlink(f"{d}/f{i}")
    os.rmdir(d)
    steps.append(("delete", time.monotonic()))
    for name, end in steps:
        print(f"{area} {name}: {n / max(end - t, 1e-9):.0f} files/s")
        t = end
"""#

@Suite("Nodes", .serialized)
struct NodeTests {
    static let alice = "cfs-alice"

    /// From a shell whose soft limit is 1024, through `mount` and through `run`, as root and
    /// as an ordinary user: many more files than the daemon has descriptors are created,
    /// stated, listed, read and deleted, in Documents and in Library/Caches (tagged).
    @Test(arguments: [(String?.none, false), (String?.none, true), (alice, false), (alice, true)])
    func manyFilesFromALoginShell(user: String?, throughRun: Bool) throws {
        let count = scale("CONTAINERFS_TEST_SCALE_FILES", 40_000)
        let container = try MountedContainer(user: user, tmpfs: "2g")
        defer { container.unmount() }
        let limits = loginShellLimits
        let started = Date()
        let result: ProgramResult
        if throughRun {
            result = try runProgram(["sh", "-c", "\(limits) && exec \"$0\" run \"$1\" -- /usr/bin/python3 -c \"$2\" . \"$3\"",
                                     containerfsBinary, container.store, manyFilesScript, "\(count)"], user: user)
        } else {
            let mounted = try runProgram(["sh", "-c", "\(limits) && exec \"$0\" mount \"$1\" \"$2\"",
                                          containerfsBinary, container.store, container.mountpoint], user: user)
            try #require(mounted.status == 0, "\(mounted)")
            result = try runProgram(["/usr/bin/python3", "-c", manyFilesScript, container.mountpoint, "\(count)", container.store], user: user)
        }
        #expect(result.status == 0, "\(result)")
        print("manyFiles user=\(user ?? "root") run=\(throughRun) n=\(count) \(String(format: "%.1f", Date().timeIntervalSince(started)))s\n\(result.stdout)")
        if !throughRun { container.unmount() }
        // Nothing left behind in the store, and the store is whole.
        #expect(access(container.stored("Documents/scale"), F_OK) != 0)
        #expect(access(container.stored("Library/Caches/scale"), F_OK) != 0)
    }

    /// `git clone` of a large local repository and `tar -x` of a large tree into a
    /// container mounted from a login shell's limit: `git status` and `git fsck` are clean
    /// and `tar --compare` finds every entry as archived.
    @Test func gitCloneAndTarOfLargeTrees() throws {
        let count = scale("CONTAINERFS_TEST_SCALE_TREE", 50_000)
        let container = try MountedContainer(tmpfs: "3g")
        defer { container.unmount() }
        let source = container.base + "/source"
        // A tree of `count` files in folders of 100, as a repository and as a tarball.
        let make = try runProgram(["/usr/bin/python3", "-c", """
            import os, sys
            root, n = sys.argv[1], int(sys.argv[2])
            for i in range(n):
                d = os.path.join(root, "d%03d" % (i // 100))
                os.makedirs(d, exist_ok=True)
                with open(os.path.join(d, "f%05d.txt" % i), "w") as f: f.write("file %d\\n" % i)
            """, source, "\(count)"])
        try #require(make.status == 0, "\(make)")
        let git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
        for step in [git + ["-C", source, "init", "-q"], git + ["-C", source, "add", "-A"],
                     git + ["-C", source, "commit", "-qm", "tree"],
                     git + ["clone", "-q", "--bare", source, container.base + "/repo.git"],
                     ["tar", "-cf", container.base + "/tree.tar", "-C", source, "."]] {
            let done = try runProgram(step)
            try #require(done.status == 0, "\(step): \(done)")
        }
        let mounted = try runProgram(["sh", "-c", "\(loginShellLimits) && exec \"$0\" mount \"$1\" \"$2\"",
                                      containerfsBinary, container.store, container.mountpoint])
        try #require(mounted.status == 0, "\(mounted)")

        var started = Date()
        let clone = try runProgram(git + ["clone", "-q", "--no-hardlinks", "file://" + container.base + "/repo.git", container.mounted("Documents/clone")])
        #expect(clone.status == 0, "\(clone)")
        let cloneSeconds = Date().timeIntervalSince(started)
        let status = try runProgram(git + ["-C", container.mounted("Documents/clone"), "status", "--porcelain"])
        #expect(status.status == 0 && status.stdout.isEmpty, "\(status)")
        let fsck = try runProgram(git + ["-C", container.mounted("Documents/clone"), "fsck", "--full", "--strict"])
        #expect(fsck.status == 0, "\(fsck)")

        started = Date()
        try FileManager.default.createDirectory(atPath: container.mounted("Library/Caches/tree"), withIntermediateDirectories: false)
        let untar = try runProgram(["tar", "-xf", container.base + "/tree.tar", "-C", container.mounted("Library/Caches/tree")])
        #expect(untar.status == 0, "\(untar)")
        let untarSeconds = Date().timeIntervalSince(started)
        let compare = try runProgram(["tar", "--compare", "-f", container.base + "/tree.tar", "-C", container.mounted("Library/Caches/tree")])
        #expect(compare.status == 0 && compare.stdout.isEmpty, "\(compare)")
        print("gitClone n=\(count): clone \(String(format: "%.1f", cloneSeconds))s, tar -x \(String(format: "%.1f", untarSeconds))s")
    }

    /// A cold node (its descriptor evicted from a 16-entry cache), held by a program as an
    /// `O_PATH` descriptor through the mount, whose file is renamed or replaced behind the
    /// daemon is served as itself or refused (ENOENT, ESTALE), never as the other file;
    /// one renamed through the mount from another folder is served. By file handle (root)
    /// and by name (root told to, and an ordinary user's daemon). `timeout=0`, so the
    /// kernel asks the daemon every time.
    @Test(arguments: [(String?.none, "handles"), (String?.none, "names"), (alice, "names")])
    func coldNodesAreNeverAnotherFile(user: String?, reopening: String) throws {
        let container = try MountedContainer(user: user)
        defer { container.unmount() }
        var extra = ["CONTAINERFS_TEST_NODE_CACHE": "16"]
        if reopening == "names" { extra["CONTAINERFS_TEST_NODE_REOPEN"] = "names" }
        let mounted = try runProgram([containerfsBinary, "mount", container.store, container.mountpoint, "-o", "timeout=0"],
                                     user: user, environment: environment(extra))
        try #require(mounted.status == 0, "\(mounted)")
        let script = #"""
            import errno, os, sys
            mnt, store = sys.argv[1], sys.argv[2]
            docs = mnt + "/Documents"
            for d in ("a", "b", "other"): os.mkdir(f"{docs}/{d}")
            for name in ("x", "y", "m"):
                with open(f"{docs}/a/{name}", "w") as f: f.write(name + "-content")
            held = {name: os.open(f"{docs}/a/{name}", os.O_PATH) for name in ("x", "y", "m")}
            inode = {name: os.fstat(fd).st_ino for name, fd in held.items()}
            def cool():
                for i in range(64):
                    with open(f"{docs}/other/f{i}", "w") as f: f.write("o")
            def check(name):
                # The node itself: fstat of the O_PATH descriptor and an open through it.
                try:
                    st = os.fstat(held[name])
                    with open(f"/proc/self/fd/{held[name]}") as f: content = f.read()
                except OSError as e:
                    if e.errno in (errno.ENOENT, errno.ESTALE): return "refused"
                    raise
                assert content == name + "-content", (name, content)
                assert st.st_ino == inode[name], (name, st.st_ino, inode)
                return "served"
            cool()
            # Behind the daemon: x is renamed to z, then y replaces x.
            os.rename(f"{store}/Documents/a/x", f"{store}/Documents/a/z")
            os.rename(f"{store}/Documents/a/y", f"{store}/Documents/a/x")
            print("x", check("x"))
            cool()
            print("y", check("y"))
            # Through the mount, from another folder: m moves to b while cold.
            cool()
            os.rename(f"{docs}/a/m", f"{docs}/b/m2")
            cool()
            assert check("m") == "served"
            with open(f"{docs}/b/m2") as f: assert f.read() == "m-content"
            print("m served")
            """#
        let result = try runProgram(["/usr/bin/python3", "-c", script, container.mountpoint, container.store], user: user)
        #expect(result.status == 0, "\(result)")
        if reopening == "handles" {
            // A file handle names the node wherever it went: both are served as themselves.
            #expect(result.stdout.contains("x served") && result.stdout.contains("y served"), "\(result)")
        }
        print("coldNodes user=\(user ?? "root") \(reopening): \(result.stdout)")
    }

    /// A folder deleted while a program stays in it keeps its node in the kernel, while the
    /// store frees its inode number for the next file or folder made beside it: that one is
    /// a new node, never the deleted folder again (which the kernel refuses as a file,
    /// EINVAL on truncate, and serves as a dead folder, ENOENT on a create in it).
    @Test(arguments: [String?.none, alice])
    func aFreedInodeNumberMakesANewNode(user: String?) throws {
        try withMountedContainer(user: user) { container in
            let script = #"""
                import errno, os, sys
                docs = sys.argv[1] + "/Documents"
                failures, reused = [], 0
                for i in range(40):
                    gone = docs + "/gone"
                    os.mkdir(gone); os.chdir(gone); old = os.stat(gone).st_ino; os.rmdir(gone)
                    try:
                        if i % 2:
                            path = docs + "/file"
                            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)); os.truncate(path, 10)
                            new = os.stat(path).st_ino; os.unlink(path)
                        else:
                            path = docs + "/folder"
                            os.mkdir(path); os.close(os.open(path + "/x", os.O_CREAT | os.O_WRONLY, 0o644))
                            new = os.stat(path).st_ino; os.unlink(path + "/x"); os.rmdir(path)
                        reused += new == old
                    except OSError as e:
                        failures.append((i, errno.errorcode[e.errno]))
                    os.chdir("/")
                print("reused", reused, "failures", failures)
                sys.exit(1 if failures else 0)
                """#
            let result = try runProgram(["/usr/bin/python3", "-c", script, container.mountpoint], user: user)
            #expect(result.status == 0, "\(result)")
            print("freedInodeNumber user=\(user ?? "root"): \(result.stdout)")
        }
    }

    /// A program opening a file while another replaces it in a loop (`os.replace` of a
    /// new version, as atomic saves do) opens the old version or the new one, as on ext4,
    /// never `ESTALE`; so do programs opening, and creating with `O_CREAT`, a file others
    /// delete and make again in a loop (a lock file, SQLite's journal), or get `ENOENT`:
    /// a file that loses its last name keeps its descriptor until the kernel forgets it.
    /// For an ordinary user's daemon and root's, with a capacity (whose count holds the
    /// removed file while a racing open has it) and without.
    @Test(arguments: [(String?.none, false), (String?.none, true), (alice, false)])
    func opensRacingRemovalsOpenAVersion(user: String?, capacity: Bool) throws {
        let container = try MountedContainer(user: user)
        defer { container.unmount() }
        if capacity { try CapacityTests.setCapacity(container, "200M") }
        try container.mount()
        do {
            let script = #"""
                import errno, os, sys, threading
                d = sys.argv[1] + "/Documents/atomic"
                os.mkdir(d)
                name = d + "/settings.json"
                with open(name, "w") as f: f.write("v0 " * 100)
                done = threading.Event()
                def replace(t):
                    i = 0
                    while not done.is_set():
                        i += 1
                        with open(f"{d}/.tmp{t}", "w") as f: f.write(f"v{i} " * 100)
                        os.replace(f"{d}/.tmp{t}", name)
                replacers = [threading.Thread(target=replace, args=(t,)) for t in range(2)]
                for t in replacers: t.start()
                failures = []
                try:
                    for _ in range(3000):
                        try:
                            with open(name) as f: text = f.read()
                            words = text.split()
                            if len(words) != 100 or len(set(words)) != 1: failures.append("mixed")
                        except OSError as e:
                            failures.append(errno.errorcode[e.errno])
                finally:
                    done.set()
                    for t in replacers: t.join()
                # A lock file deleted and made again by two threads while two others open it.
                lock = d + "/lock"
                done.clear()
                def churn():
                    while not done.is_set():
                        try:
                            fd = os.open(lock, os.O_CREAT | os.O_WRONLY, 0o644)
                            os.write(fd, b"pid")
                            os.close(fd)
                            os.unlink(lock)
                        except FileNotFoundError: pass
                        except OSError as e: failures.append("churn " + errno.errorcode[e.errno])
                def probe(opened):
                    while not done.is_set() and opened[0] < 3000:
                        try:
                            os.close(os.open(lock, os.O_RDONLY))
                            opened[0] += 1
                        except FileNotFoundError: pass
                        except OSError as e: failures.append("open " + errno.errorcode[e.errno])
                opened = [0]
                churners = [threading.Thread(target=churn) for _ in range(2)]
                probes = [threading.Thread(target=probe, args=(opened,)) for _ in range(2)]
                for t in churners + probes: t.start()
                for t in probes: t.join(timeout=60)
                done.set()
                for t in churners + probes: t.join()
                print("failures", len(failures), sorted(set(failures)), "lock opened", opened[0])
                sys.exit(1 if failures else 0)
                """#
            let result = try runProgram(["/usr/bin/python3", "-c", script, container.mountpoint], user: user)
            #expect(result.status == 0, "\(result)")
            if capacity { try CapacityTests.expectTrueCount(container, "after the replacements") }
        }
    }

    /// Programs opening, listing, stating and entering a folder (`chdir`, then `stat(".")`
    /// and a listing there) while others make and remove it in a loop get what ext4 gives:
    /// success (a removed folder lists empty) or `ENOENT`, never `ESTALE`. A folder that
    /// `rmdir` or a rename over it removes is kept until the kernel forgets it, as a file is. For root's daemon
    /// (attributes cached, and with `timeout=0` and a capacity, whose count stays true) and
    /// an ordinary user's.
    @Test(arguments: [(String?.none, false), (String?.none, true), (alice, false)])
    func foldersRacingRmdirAreThereOrGone(user: String?, uncached: Bool) throws {
        let container = try MountedContainer(user: user)
        defer { container.unmount() }
        if uncached { try CapacityTests.setCapacity(container, "200M") }
        try container.mount(options: uncached ? ["timeout=0"] : [])
        let result = try runProgram(["/usr/bin/python3", "-c", Self.folderRaceScript, container.mountpoint + "/Documents", "2.5"], user: user)
        #expect(result.status == 0, "\(result)")
        print("foldersRacingRmdir user=\(user ?? "root") uncached=\(uncached): \(result.stdout)")
        if uncached { try CapacityTests.expectTrueCount(container, "after the folder races") }
    }

    /// Below argv[1], for argv[2] seconds: two processes make and remove the folder `race/d`
    /// (one of them also renames another empty folder over it) while four open it (and list the descriptor), list it, stat it, and `chdir` into it
    /// (then stat and list `.`); prints what each got, by errno; exits 1 on anything but
    /// success or ENOENT, or on a maker's error.
    static let folderRaceScript = #"""
        import errno, json, os, sys, time
        base, seconds = sys.argv[1] + "/race", float(sys.argv[2])
        os.mkdir(base)
        name = base + "/d"
        def churn(replacing):
            spare = f"{base}/spare{os.getpid()}"
            while time.monotonic() < deadline:
                try: os.mkdir(name)
                except FileExistsError: pass
                if replacing:
                    # A rename over the empty folder removes it too.
                    os.mkdir(spare)
                    try: os.rename(spare, name)
                    except OSError as e:
                        os.rmdir(spare)
                        if e.errno != errno.ENOTEMPTY: raise
                try: os.rmdir(name)
                except FileNotFoundError: pass
            return {}
        def probe(kind):
            counts = {}
            while time.monotonic() < deadline:
                try:
                    if kind == "opendir":
                        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY)
                        try: listed = os.listdir(fd)
                        finally: os.close(fd)
                    elif kind == "listdir": listed = os.listdir(name)
                    elif kind == "stat": os.stat(name); listed = []
                    else:
                        os.chdir(name)
                        try: os.stat("."); listed = os.listdir(".")
                        finally: os.chdir("/")
                    result = "ok" if listed == [] else "listed " + repr(listed)
                except OSError as e:
                    result = errno.errorcode.get(e.errno, str(e.errno))
                counts[result] = counts.get(result, 0) + 1
            return counts
        deadline = time.monotonic() + seconds
        children = {}
        for kind in ("churn", "replace", "opendir", "listdir", "stat", "chdir"):
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(read)
                try: counts = churn(kind == "replace") if kind in ("churn", "replace") else probe(kind)
                except BaseException as e: counts = {"churn " + repr(e): 1}
                os.write(write, json.dumps(counts).encode()); os._exit(0)
            os.close(write)
            children[pid] = (kind, read)
        bad = 0
        for pid, (kind, read) in children.items():
            data = b""
            while chunk := os.read(read, 65536): data += chunk
            os.waitpid(pid, 0)
            counts = json.loads(data or b"{}")
            bad += sum(n for result, n in counts.items() if result not in ("ok", "ENOENT"))
            if kind not in ("churn", "replace"): print(kind, dict(sorted(counts.items())))
        print("unexpected", bad)
        sys.exit(1 if bad else 0)
        """#

    /// Removals the store refuses (files made immutable behind the mount: `EPERM` to
    /// `unlink` and to a rename over them) leave the daemon's descriptors a bounded cache:
    /// a file about to lose its last name is pinned for the opens racing its removal, and a
    /// refused removal unpins it. Before, each one stayed pinned while the kernel knew it:
    /// 300 refusals, 300 more descriptors.
    @Test func refusedRemovalsPinNothing() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        let folder = container.stored("Documents/kept")
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: false)
        let names = (0..<300).map { "f\($0)" }
        for name in names { try Data("x".utf8).write(to: URL(fileURLWithPath: folder + "/" + name)) }
        let immutable = try runProgram(["chattr", "+i"] + names.map { folder + "/" + $0 })
        try #require(immutable.status == 0, "\(immutable)")
        defer { _ = try? runProgram(["chattr", "-i"] + names.map { folder + "/" + $0 }) }
        let mounted = try runProgram([containerfsBinary, "mount", container.store, container.mountpoint],
                                     environment: environment(["CONTAINERFS_TEST_NODE_CACHE": "16"]))
        try #require(mounted.status == 0, "\(mounted)")
        let script = #"""
            import errno, os, sys
            mnt, store = sys.argv[1], sys.argv[2]
            folder = mnt + "/Documents/kept"
            with open(store + "/.containerfs/mount.lock") as f: pid = f.readline().strip()
            def held(): return len(os.listdir(f"/proc/{pid}/fd"))
            before = held()
            refused = 0
            with open(mnt + "/Documents/new", "w") as f: f.write("new")
            for i in range(300):
                for attempt in ("unlink", "rename"):
                    try:
                        if attempt == "unlink": os.unlink(f"{folder}/f{i}")
                        else: os.rename(mnt + "/Documents/new", f"{folder}/f{i}")
                    except PermissionError: refused += 1
            after = held()
            print("refused", refused, "descriptors", before, "->", after)
            assert refused == 600, refused
            assert after - before < 40, f"{after - before} more descriptors after {refused} refused removals"
            """#
        let result = try runProgram(["/usr/bin/python3", "-c", script, container.mountpoint, container.store])
        #expect(result.status == 0, "\(result)")
        print("refusedRemovals: \(result.stdout)")
    }

    /// Deleting a 100 MiB file through the mount, or replacing it by a rename, frees its
    /// blocks in the store at once (when the kernel forgets it, as the removal returns)
    /// when no program holds it; one held open keeps them until it is closed; 100 MiB in
    /// 400 small files deleted in a row are freed within moments too. The store
    /// sits on a tmpfs of its own, so that no other writer moves its free space.
    @Test(arguments: [[String](), ["nopassthrough"]])
    func deletingAFileFreesItsBlocks(options: [String]) throws {
        let base = try makeTemporaryDirectory()
        let bundle = base + "/Demo.app", store = base + "/fs/store", mountpoint = base + "/mnt"
        try FileManager.default.createDirectory(atPath: base + "/fs", withIntermediateDirectories: false)
        try FileManager.default.createDirectory(atPath: bundle, withIntermediateDirectories: false)
        try FileManager.default.createDirectory(atPath: mountpoint, withIntermediateDirectories: false)
        try Data("<plist>demo</plist>\n".utf8).write(to: URL(fileURLWithPath: bundle + "/Info.plist"))
        let tmpfs = try runProgram(["mount", "-t", "tmpfs", "-o", "size=400m", "tmpfs", base + "/fs"])
        try #require(tmpfs.status == 0, "\(tmpfs)")
        defer {
            _ = try? containerfs(["unmount", mountpoint])
            _ = try? runProgram(["umount", "-l", base + "/fs"])
            _ = try? runProgram(["rm", "-rf", base])
        }
        let created = try containerfs(["create", store, "--bundle", bundle])
        try #require(created.status == 0, "\(created)")
        let mounted = try containerfs(["mount", store, mountpoint] + options.flatMap { ["-o", $0] })
        try #require(mounted.status == 0, "\(mounted)")
        let container = (mountpoint: mountpoint, store: store)
        let script = #"""
            import os, sys, time
            mnt, store = sys.argv[1], sys.argv[2]
            def free():
                s = os.statvfs(store)
                return s.f_bfree * s.f_frsize
            def written(path):
                with open(path, "wb") as f:
                    for _ in range(100): f.write(b"\x5a" * (1 << 20))
                    f.flush(); os.fsync(f.fileno())
                os.stat(path)
            def freed_within(before, seconds, size=90 << 20):
                deadline = time.monotonic() + seconds
                while time.monotonic() < deadline:
                    if free() - before >= size: return True
                    time.sleep(0.01)
                return False
            path = mnt + "/Documents/big"
            written(path)
            with open(path, "rb") as f: f.read(4096)
            before = free()
            os.unlink(path)
            assert freed_within(before, 1), ("not freed at once", free() - before)
            # Replaced by a rename (an atomic save): freed as soon as the kernel forgets it.
            written(path)
            written(path + ".new")
            before = free()
            os.replace(path + ".new", path)
            assert freed_within(before, 1), ("replaced, not freed at once", free() - before)
            before = free()
            os.unlink(path)
            assert freed_within(before, 1), ("deleted after the rename, not freed at once", free() - before)
            # Held open while deleted: kept until closed, then freed.
            written(path)
            held = open(path, "rb")
            before = free()
            os.unlink(path)
            assert not freed_within(before, 0.3), "freed while held open"
            assert len(held.read(1 << 20)) == 1 << 20
            assert os.fstat(held.fileno()).st_size == 100 << 20
            held.close()
            # RELEASE reaches the daemon just after close(2) returns.
            assert freed_within(before, 2), ("not freed at close", free() - before)
            # Many small files deleted in a row: their closes wait on the daemon's closer
            # thread, a bounded number at a time, and are all done within moments.
            os.mkdir(mnt + "/Documents/small")
            for i in range(400):
                with open(f"{mnt}/Documents/small/{i}", "wb") as f: f.write(b"\x5a" * (256 << 10))
            os.sync()
            before = free()
            for i in range(400): os.unlink(f"{mnt}/Documents/small/{i}")
            assert freed_within(before, 2, 90 << 20), ("small files not freed", free() - before)
            """#
        let result = try runProgram(["/usr/bin/python3", "-c", script, container.mountpoint, container.store])
        #expect(result.status == 0, "\(result)")
    }

    /// A folder chain 20,000 deep, known to the kernel, moves between Documents,
    /// Library/Caches and tmp; each move is quick and the deepest file's area follows
    /// (a use of it is recorded in Caches, not in Documents).
    @Test func deepChainMovesBetweenAreas() throws {
        let depth = scale("CONTAINERFS_TEST_SCALE_DEPTH", 20_000)
        let container = try MountedContainer()
        defer { container.unmount() }
        try container.mount()
        let script = #"""
            import os, sys, time
            mnt, depth = sys.argv[1], int(sys.argv[2])
            fd = os.open(mnt + "/Documents", os.O_RDONLY | os.O_DIRECTORY)
            os.mkdir("chain", dir_fd=fd)
            top = fd
            for i in range(depth):
                name = "chain" if i == 0 else "d"
                if i > 0: os.mkdir(name, dir_fd=fd)
                nfd = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
                if fd != top: os.close(fd)
                fd = nfd
            leaf = os.open("leaf", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
            os.write(leaf, b"leaf"); os.close(leaf)
            os.utime("leaf", (978307200, 978307200), dir_fd=fd)    # 2001: older than any use
            print("inode", os.stat("leaf", dir_fd=fd).st_ino)
            def use():
                t = time.time_ns()
                f = os.open("leaf", os.O_RDONLY, dir_fd=fd); os.read(f, 4); os.close(f)
                return t
            def move(source, target):
                t = time.monotonic()
                os.rename(mnt + "/" + source + "/chain", mnt + "/" + target + "/chain")
                seconds = time.monotonic() - t
                print("move", source, "->", target, f"{seconds:.3f}")
                # Linear: milliseconds here; quadratic, it took 5 s at this depth.
                assert seconds < 2, f"moving the chain took {seconds:.1f} s"
            move("Documents", "Library/Caches")
            print("cached", use())
            move("Library/Caches", "tmp")
            print("temporary", use())
            move("tmp", "Documents")
            print("documents", use())
            """#
        let result = try runProgram(["/usr/bin/python3", "-c", script, container.mountpoint, "\(depth)"])
        try #require(result.status == 0, "\(result)")
        print("deepChain depth=\(depth):\n\(result.stdout)")
        container.unmount()
        var values: [String: Int64] = [:]
        for line in result.stdout.split(separator: "\n") {
            let words = line.split(separator: " ")
            if words.count == 2, let value = Int64(words[1]) { values[String(words[0])] = value }
        }
        let inode = try #require(values["inode"])
        let cached = try #require(values["cached"]), temporary = try #require(values["temporary"]), documents = try #require(values["documents"])
        let uses = try #require(UseTable.openForReading(try Store.open(container.store)))
        let last = uses.lastUse(inode: UInt64(inode))
        // Recorded in tmp (after the one in Caches), not in Documents.
        #expect(last >= temporary && last < documents, "last use \(last); Caches \(cached), tmp \(temporary), Documents \(documents)")
    }

    /// With a descriptor limit of 64, a program holding 200 files open gets EMFILE for the
    /// opens beyond what the daemon can hold; the daemon keeps serving (every file reads
    /// back once closed) and says once in its log what ran out.
    @Test func runningOutOfDescriptorsFailsOneRequestAndIsLoggedOnce() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        let daemon = try limitedDaemon(container, descriptors: 64)
        let script = #"""
            import errno, os, sys
            docs = sys.argv[1] + "/Documents"
            held, refused = [], 0
            for i in range(200):
                try:
                    held.append(os.open(f"{docs}/f{i}", os.O_RDWR | os.O_CREAT, 0o644))
                except OSError as e:
                    assert e.errno == errno.EMFILE, e
                    refused += 1
            for fd in held: os.write(fd, b"kept"); os.close(fd)
            print("held", len(held), "refused", refused)
            assert refused > 0 and len(held) > 0
            # The daemon still serves: more files than its limit, one at a time.
            for i in range(300):
                with open(f"{docs}/g{i}", "w") as f: f.write(str(i))
            for i in range(300):
                with open(f"{docs}/g{i}") as f: assert f.read() == str(i)
            """#
        let result = try runProgram(["/usr/bin/python3", "-c", script, container.mountpoint])
        #expect(result.status == 0, "\(result)")
        container.unmount()
        let log = daemon.wait(seconds: 10).stderr
        let lines = log.split(separator: "\n").filter { $0.contains("out of file descriptors") }
        #expect(lines.count == 1, "daemon log: \(log)")
        print("exhaustion: \(result.stdout)\(lines.first ?? "")")
    }

    /// An ordinary user's daemon (it reopens nodes by name) pins a node whose recorded name
    /// is removed while it has another; `ln a b; rm b` in a loop, no file open, pinned one
    /// descriptor each until the kernel forgot the node, which it need never do: with a
    /// limit of 128, the 105th such file met EMFILE, and so did every create after. The pins
    /// are bounded now; every file still reads back, by its name and by a descriptor.
    @Test func removedHardLinksCannotRunTheDaemonOutOfDescriptors() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        let daemon = try limitedDaemon(container, descriptors: 128, environment: "CONTAINERFS_TEST_NODE_REOPEN=names")
        let script = #"""
            import os, sys
            docs = sys.argv[1] + "/Documents"
            kept = [os.open(f"{docs}/held", os.O_RDWR | os.O_CREAT, 0o644)]
            for i in range(400):
                with open(f"{docs}/a{i}", "w") as f: f.write(str(i))
                os.link(f"{docs}/a{i}", f"{docs}/b{i}")
                os.unlink(f"{docs}/b{i}")
                if i % 50 == 0: kept.append(os.open(f"{docs}/a{i}", os.O_PATH))
            with open(f"{docs}/after", "w") as f: f.write("created")
            for i in range(400):
                with open(f"{docs}/a{i}") as f: assert f.read() == str(i), i
            for fd in kept[1:]: assert os.fstat(fd).st_nlink == 1
            print("ok")
            """#
        let result = try runProgram(["/usr/bin/python3", "-c", script, container.mountpoint])
        #expect(result.status == 0 && result.stdout == "ok\n", "\(result)")
        container.unmount()
        _ = daemon.wait(seconds: 10)
    }
}
