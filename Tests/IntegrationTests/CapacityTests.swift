import CLinux
import Foundation
import Glibc
import Testing

/// A container with a capacity is a full disk to its programs (SPEC §10): ENOSPC (or a
/// short write first) at the capacity, the store never past it by more than one request,
/// df showing it, space freed by deletion at once, live changes, and bad input refused.
@Suite("Capacity", .serialized)
struct CapacityTests {
    static let capacity = 8 << 20
    /// One write request (max_write): the most the store may pass the capacity by.
    static let request = 1 << 20

    /// Fills `path` by `method` until the disk is full; returns the bytes it holds then and
    /// the error it met ("ENOSPC" expected).
    static func fill(_ method: String, _ path: String, user: String? = nil) throws -> (bytes: Int, error: String) {
        let script = """
            import errno, os, subprocess, sys
            method, path = sys.argv[1], sys.argv[2]
            error = "none"
            if method == "python":
                try:
                    with open(path, "wb") as f:
                        while True:
                            f.write(b"p" * 65536)
                            f.flush()
                except OSError as e:
                    error = errno.errorcode[e.errno]
            elif method == "dd":
                r = subprocess.run(["dd", "if=/dev/zero", "of=" + path, "bs=64k"], capture_output=True, text=True)
                error = "ENOSPC" if "No space left" in r.stderr else "dd: " + r.stderr
            elif method == "cp":
                source = path + ".src"
                src = "/tmp/cfs-capacity-source-%d" % os.getuid()
                with open(src, "wb") as f: f.write(b"c" * (16 << 20))
                r = subprocess.run(["cp", src, path], capture_output=True, text=True)
                os.unlink(src)
                error = "ENOSPC" if "No space left" in r.stderr else "cp: " + r.stderr
            elif method == "fallocate":
                r = subprocess.run(["fallocate", "-l", "16M", path], capture_output=True, text=True)
                error = "ENOSPC" if "No space left" in r.stderr else "fallocate: " + r.stderr
            print(os.stat(path).st_size if os.path.exists(path) else 0, error)
            """
        let result = try runProgram(["/usr/bin/python3", "-c", script, method, path], user: user)
        let words = result.stdout.split(separator: " ").map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
        guard result.status == 0, words.count == 2, let bytes = Int(words[0]) else { throw TestFailure("\(method): \(result)") }
        return (bytes, words[1])
    }

    /// The bytes in blocks of everything in the store but its state folder (its root too).
    static func storeBytes(_ store: String) throws -> Int {
        let script = """
            import os, sys
            total, seen = os.lstat(sys.argv[1]).st_blocks * 512, set()
            for top, dirs, files in os.walk(sys.argv[1]):
                if top == sys.argv[1]: dirs[:] = [d for d in dirs if d != ".containerfs"]
                for name in dirs + files:
                    info = os.lstat(os.path.join(top, name))
                    if info.st_ino in seen: continue
                    seen.add(info.st_ino)
                    total += info.st_blocks * 512
            print(total)
            """
        let result = try runProgram(["/usr/bin/python3", "-c", script, store])
        guard let bytes = Int(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) else { throw TestFailure("\(result)") }
        return bytes
    }

    static func setCapacity(_ container: MountedContainer, _ size: String) throws {
        let result = try containerfs(["capacity", container.store, size], user: container.user)
        guard result.status == 0 else { throw TestFailure("capacity \(size): \(result)") }
    }

    /// dd, cp, python and fallocate meet ENOSPC (after a short write) at the same byte
    /// count give or take one request; the store never holds more than capacity + one
    /// request; df sees the capacity. For a daemon with passthrough, and without.
    func fillsToTheCapacity(user: String?) throws {
        let container = try MountedContainer(user: user)
        defer {
            if user != nil { _ = try? containerfs(["unmount", container.mountpoint], user: user) }
            container.unmount()
        }
        try Self.setCapacity(container, "8M")
        let mounted = try containerfs(["mount", container.store, container.mountpoint], user: user)
        try #require(mounted.status == 0, "\(mounted)")

        let df = try runProgram(["df", "-B1", "--output=size,avail", container.mountpoint], user: user)
        let figures = df.stdout.split(separator: "\n").last?.split(separator: " ").compactMap { Int($0) } ?? []
        #expect(figures.first == Self.capacity, "df: \(df)")
        #expect((figures.last ?? 0) > Self.capacity - Self.request, "df: \(df)")

        var counts: [String: Int] = [:]
        for method in ["dd", "python", "cp"] {
            let path = container.mounted("Documents/\(method)")
            let (bytes, error) = try Self.fill(method, path, user: user)
            #expect(error == "ENOSPC", "\(method): \(error)")
            counts[method] = bytes
            let stored = try Self.storeBytes(container.store)
            #expect(stored <= Self.capacity + Self.request, "\(method): the store holds \(stored) bytes")
            #expect(stored >= Self.capacity - Self.request, "\(method): the store holds only \(stored) bytes")
            #expect(unlink(path) == 0 || user != nil)
            if user != nil { try runProgram(["rm", "-f", path], user: user) }
        }
        let values = counts.values
        #expect((values.max() ?? 0) - (values.min() ?? 0) <= Self.request, "byte counts \(counts)")
        let (allocated, error) = try Self.fill("fallocate", container.mounted("Documents/fallocate"), user: user)
        #expect(error == "ENOSPC" && allocated == 0, "fallocate: \(allocated) \(error)")
        let small = try runProgram(["fallocate", "-l", "1M", container.mounted("Documents/small")], user: user)
        #expect(small.status == 0, "a fallocate that fits: \(small)")
    }

    @Test func rootDaemonFillsToTheCapacity() throws {
        try fillsToTheCapacity(user: nil)
    }

    @Test func ordinaryUsersDaemonFillsToTheCapacity() throws {
        guard getpwnam("cfs-alice") != nil else { throw TestFailure("user cfs-alice does not exist: run scripts/install-deps.sh") }
        try fillsToTheCapacity(user: "cfs-alice")
    }

    /// Metadata takes blocks too, and counts: empty files with long names (their folder
    /// grows a block at a time) and large extended attributes (a block of their own on
    /// ext4) meet ENOSPC at the capacity, and the count stays the store's own (an
    /// adversarial review filled a 4 MiB container to 35 MiB with empty files).
    @Test func foldersAndAttributesCountToo() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        try Self.setCapacity(container, "1M")
        try container.mount()
        let fill = """
            import errno, os, sys
            d = sys.argv[1]
            os.mkdir(d + "/names"); os.mkdir(d + "/attributes")
            def until_full(step):
                try:
                    for i in range(100000): step(i)
                except OSError as e:
                    return errno.errorcode[e.errno]
                return "none"
            def name(i): open(d + "/names/" + "n" * 240 + "%06d" % i, "w").close()
            def attribute(i):
                path = d + "/attributes/f%d" % i
                open(path, "w").close()
                os.setxattr(path, "user.big", b"v" * 3000)
            print(until_full(name), until_full(attribute))
            """
        let result = try runProgram(["/usr/bin/python3", "-c", fill, container.mounted("Documents")])
        #expect(result.status == 0 && result.stdout == "ENOSPC ENOSPC\n", "\(result)")
        container.unmount()
        let stored = try Self.storeBytes(container.store)
        #expect(stored <= (1 << 20) + Self.request, "the store holds \(stored) bytes")
        let recorded = try String(contentsOfFile: container.stored(".containerfs/used"), encoding: .utf8)
        #expect(Int(recorded.trimmingCharacters(in: .whitespacesAndNewlines)) == stored, "the daemon's count: \(recorded)")
    }

    /// Deleting while full frees space at once; a deleted file another program holds open
    /// is freed when it is closed, as natively.
    @Test func deletingFreesSpaceAtOnce() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        try Self.setCapacity(container, "8M")
        try container.mount()
        let script = """
            import errno, os, sys, time
            M = sys.argv[1]
            def fill(path):
                try:
                    with open(path, "wb") as f:
                        while True: f.write(b"x" * 65536); f.flush()
                except OSError as e:
                    return errno.errorcode[e.errno]
            def write(path, size):
                try:
                    with open(path, "wb") as f: f.write(b"y" * size)
                    return "ok"
                except OSError as e:
                    return errno.errorcode[e.errno]
            print("fill", fill(M + "/Documents/a"))
            print("full", write(M + "/Documents/b", 1 << 20))
            os.unlink(M + "/Documents/a")
            print("after-rm", write(M + "/Documents/b", 1 << 20))
            print("refill", fill(M + "/Documents/c"))
            held = open(M + "/Documents/c", "rb")
            os.unlink(M + "/Documents/c")
            print("held", write(M + "/Documents/d", 1 << 20))
            held.close()
            time.sleep(0.3)  # the kernel sends RELEASE after close returns
            print("closed", write(M + "/Documents/d", 1 << 20))
            """
        let result = try runProgram(["/usr/bin/python3", "-c", script, container.mountpoint])
        let lines = result.stdout.split(separator: "\n").map(String.init)
        #expect(lines == ["fill ENOSPC", "full ENOSPC", "after-rm ok", "refill ENOSPC", "held ENOSPC", "closed ok"], "\(result)")
    }

    /// A capacity set on a live mount takes effect at the next write; shrinking below what
    /// is used deletes nothing and makes growth fail; `none` lifts it.
    @Test func capacityChangesOnALiveMount() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        try container.mount()
        let file = container.mounted("Documents/kept")
        try Data(repeating: 1, count: 2 << 20).write(to: URL(fileURLWithPath: file))
        try Self.setCapacity(container, "1M")
        let append = try runProgram(["sh", "-c", "head -c 65536 /dev/zero >> \(file)"])
        #expect(append.status != 0 && append.stderr.contains("No space left"), "\(append)")
        #expect(mkdir(container.mounted("Documents/new"), 0o755) != 0 && errno == ENOSPC)
        var info = stat()
        #expect(stat(container.stored("Documents/kept"), &info) == 0 && info.st_size == 2 << 20, "nothing deleted")
        var device = statvfs()
        #expect(statvfs(container.mountpoint, &device) == 0 && Int(device.f_blocks) * Int(device.f_frsize) == 1 << 20)
        try Self.setCapacity(container, "none")
        let again = try runProgram(["sh", "-c", "head -c 65536 /dev/zero >> \(file)"])
        #expect(again.status == 0, "\(again)")
    }

    /// sqlite in WAL and rollback-journal modes inserts until SQLITE_FULL; after space is
    /// freed the database is intact and holds every committed row.
    @Test(arguments: ["wal", "delete"]) func sqliteSurvivesAFullDisk(mode: String) throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        try Self.setCapacity(container, "8M")
        try container.mount()
        let script = """
            import os, sqlite3, sys
            M, mode = sys.argv[1], sys.argv[2]
            filler = M + "/Documents/filler"
            with open(filler, "wb") as f: f.write(b"f" * (1 << 20))
            db = sqlite3.connect(M + "/Documents/app.db", isolation_level=None)
            db.execute("PRAGMA journal_mode=" + mode)
            db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, blob BLOB)")
            committed = 0
            try:
                while True:
                    db.execute("BEGIN")
                    db.execute("INSERT INTO t (blob) VALUES (?)", (os.urandom(16384),))
                    db.execute("COMMIT")
                    committed += 1
            except sqlite3.OperationalError as e:
                print("error", e)
                try: db.execute("ROLLBACK")
                except sqlite3.OperationalError: pass
            db.close()
            os.unlink(filler)
            db = sqlite3.connect(M + "/Documents/app.db")
            print("integrity", db.execute("PRAGMA integrity_check").fetchone()[0])
            print("rows", db.execute("SELECT count(*) FROM t").fetchone()[0], committed)
            """
        let result = try runProgram(["/usr/bin/python3", "-c", script, container.mountpoint, mode])
        let lines = result.stdout.split(separator: "\n").map(String.init)
        #expect(lines.first == "error database or disk is full", "\(result)")
        #expect(lines.contains("integrity ok"), "\(result)")
        let rows = lines.first { $0.hasPrefix("rows ") }?.split(separator: " ") ?? []
        #expect(rows.count == 3 && rows[1] == rows[2] && (Int(rows[1]) ?? 0) > 100, "\(result)")
        let stored = try Self.storeBytes(container.store)
        #expect(stored <= Self.capacity + Self.request, "the store holds \(stored) bytes")
    }

    /// Bad input gets one line, exit 64 or 1, and leaves the store as it was.
    @Test func badCapacityInputIsRefused() throws {
        let container = try MountedContainer()
        let before = try runProgram(["ls", "-laR", container.store]).stdout
        for (arguments, status) in [(["capacity", container.store, "eight"], Int32(64)), (["capacity", container.store, "-5M"], 64),
                                    (["capacity", container.store, "0"], 64), (["capacity", container.base + "/missing", "8M"], 1)] {
            let result = try containerfs(arguments)
            #expect(result.status == status, "\(arguments): \(result)")
            #expect(result.stderr.split(separator: "\n").count == 1, "\(arguments): \(result)")
        }
        #expect(try runProgram(["ls", "-laR", container.store]).stdout == before)
        let created = try containerfs(["create", container.base + "/other", "--bundle", container.base + "/Demo.app", "--capacity", "lots"])
        #expect(created.status == 64 && created.stderr.split(separator: "\n").count == 1, "\(created)")
        #expect(access(container.base + "/other", F_OK) != 0, "no store made")
    }

    /// Writes `size` MiB of zeros with dd to `path`.
    static func ddFile(_ path: String, mebibytes: Int) throws {
        let made = try runProgram(["dd", "if=/dev/zero", "of=" + path, "bs=1M", "count=\(mebibytes)", "status=none"])
        guard made.status == 0 else { throw TestFailure("dd: \(made)") }
    }

    /// The free bytes statvfs shows at `path`.
    static func freeBytes(_ path: String) -> Int {
        var device = statvfs()
        guard statvfs(path, &device) == 0 else { return -1 }
        return Int(device.f_bfree) * Int(device.f_frsize)
    }

    /// Two deliveries at once that each fit alone but not together: the second waits for
    /// the first from its check to its rename, then sees it and is refused. The first is
    /// held stopped right after its check (CONTAINERFS_TEST_STOP_AT) to open the window;
    /// the second is seen waiting for the delivery lock in /proc/locks (a blocked `flock`
    /// on the state folder's `incoming`, held by the first), not assumed after a sleep.
    @Test func twoDeliveriesAtOnceAreHeldToTheCapacityTogether() throws {
        let container = try MountedContainer()
        try Self.setCapacity(container, "4M")
        try Self.ddFile(container.base + "/a.bin", mebibytes: 2)
        try Self.ddFile(container.base + "/b.bin", mebibytes: 2)
        let first = Process()
        first.executableURL = URL(fileURLWithPath: containerfsBinary)
        first.arguments = ["deliver", container.store, container.base + "/a.bin"]
        first.environment = ProcessInfo.processInfo.environment.merging(["CONTAINERFS_TEST_STOP_AT": "delivery-checked"]) { $1 }
        try first.run()
        defer {
            if first.isRunning { kill(first.processIdentifier, SIGKILL) }
            first.waitUntilExit()
        }
        // Stopped after its check, before its rename.
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline, !((try? String(contentsOfFile: "/proc/\(first.processIdentifier)/stat", encoding: .utf8))?.contains(") T ") ?? false) {
            usleep(20_000)
        }
        let second = Process()
        second.executableURL = URL(fileURLWithPath: containerfsBinary)
        second.arguments = ["deliver", container.store, container.base + "/b.bin"]
        try second.run()
        defer {
            if second.isRunning { kill(second.processIdentifier, SIGKILL) }
            second.waitUntilExit()
        }
        // The lock is the state folder's `incoming`: the first holds it, the second waits.
        var lockFolder = stat()
        try #require(stat(container.stored(".containerfs/incoming"), &lockFolder) == 0)
        let inode = ":\(lockFolder.st_ino) "
        func locks() -> [Substring] {
            let text = (try? String(contentsOfFile: "/proc/locks", encoding: .utf8)) ?? ""
            return text.split(separator: "\n").filter { $0.contains("FLOCK") && $0.contains(inode) }
        }
        let waiting = Date().addingTimeInterval(30)
        while Date() < waiting, second.isRunning, !locks().contains(where: { $0.contains("-> FLOCK") && $0.contains(" \(second.processIdentifier) ") }) {
            usleep(5_000)
        }
        let seen = locks()
        #expect(seen.contains { !$0.contains("->") && $0.contains(" \(first.processIdentifier) ") }, "the first holds the lock: \(seen)")
        #expect(seen.contains { $0.contains("-> FLOCK") && $0.contains(" \(second.processIdentifier) ") }, "the second waits for it: \(seen)")
        #expect(second.isRunning, "the second must wait for the first, not finish")
        kill(first.processIdentifier, SIGCONT)
        first.waitUntilExit()
        second.waitUntilExit()
        #expect(first.terminationStatus == 0)
        #expect(second.terminationStatus == 1, "the second delivery must see the first")
        let inbox = try FileManager.default.contentsOfDirectory(atPath: container.stored("Documents/Inbox"))
        #expect(inbox == ["a.bin"], "\(inbox)")
    }

    /// `deliver` (mounted or not), `update` and `create --capacity` are held to the
    /// capacity as the app's own writes are: what would not fit is refused in one line,
    /// exit 1, the store untouched; a delivery into a mounted container counts at once.
    @Test func deliverUpdateAndCreateAreHeldToTheCapacity() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        try Self.setCapacity(container, "4M")
        try Self.ddFile(container.base + "/big.bin", mebibytes: 6)
        try Self.ddFile(container.base + "/small.bin", mebibytes: 1)
        let before = try Self.storeBytes(container.store)

        // Offline: refused whole, one line, nothing left in the Inbox or the staging folder.
        let refused = try containerfs(["deliver", container.store, container.base + "/big.bin"])
        #expect(refused.status == 1 && refused.stderr.split(separator: "\n").count == 1
                && refused.stderr.contains("capacity"), "\(refused)")
        #expect(access(container.stored("Documents/Inbox/big.bin"), F_OK) != 0)
        #expect(try FileManager.default.contentsOfDirectory(atPath: container.stored(".containerfs/incoming")).isEmpty)
        #expect(try Self.storeBytes(container.store) == before, "store untouched")
        let two = try containerfs(["deliver", container.store, container.base + "/small.bin", container.base + "/big.bin"])
        #expect(two.status == 1 && access(container.stored("Documents/Inbox/small.bin"), F_OK) != 0, "nothing of a batch that does not fit: \(two)")

        // Mounted: what fits goes in and counts toward used at once; what does not is refused.
        try container.mount()
        let freeBefore = Self.freeBytes(container.mountpoint)
        let delivered = try containerfs(["deliver", container.store, container.base + "/small.bin"])
        #expect(delivered.status == 0, "\(delivered)")
        #expect(Self.freeBytes(container.mountpoint) <= freeBefore - (1 << 20), "the daemon counted the delivery")
        let refusedMounted = try containerfs(["deliver", container.store, container.base + "/big.bin"])
        #expect(refusedMounted.status == 1 && refusedMounted.stderr.contains("capacity"), "\(refusedMounted)")
        container.unmount()

        // update: a new bundle that would not fit is refused; the old one stays.
        let bundle = container.base + "/v2/Demo.app"
        try FileManager.default.createDirectory(atPath: bundle, withIntermediateDirectories: true)
        try Data("<plist>v2</plist>\n".utf8).write(to: URL(fileURLWithPath: bundle + "/Info.plist"))
        try Self.ddFile(bundle + "/huge.bin", mebibytes: 6)
        let storeBefore = try Self.storeBytes(container.store)
        let updated = try containerfs(["update", container.store, "--bundle", bundle])
        #expect(updated.status == 1 && updated.stderr.split(separator: "\n").count == 1
                && updated.stderr.contains("capacity"), "\(updated)")
        #expect(access(container.stored("Demo.app/huge.bin"), F_OK) != 0 && access(container.stored("Demo.app/res/data.txt"), F_OK) == 0)
        #expect(try Self.storeBytes(container.store) == storeBefore, "store untouched")
        let verified = try containerfs(["verify", container.store])
        #expect(verified.status == 0, "\(verified)")

        // create: a bundle larger than the capacity makes no container.
        let created = try containerfs(["create", container.base + "/other", "--bundle", bundle, "--capacity", "2M"])
        #expect(created.status == 1 && created.stderr.split(separator: "\n").count == 1
                && created.stderr.contains("capacity"), "\(created)")
        #expect(access(container.base + "/other", F_OK) != 0, "no store made")
    }

    /// A clean unmount records the space used, and the next mount takes it instead of
    /// walking the store; a mount drops it (a killed daemon leaves none); a command that
    /// changes the store drops it; `containerfs capacity STORE` counts afresh.
    @Test func mountTakesTheCountOfTheLastCleanUnmount() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        try Self.setCapacity(container, "8M")
        let summary = container.stored(".containerfs/used")
        try container.mount()
        #expect(access(summary, F_OK) != 0, "none while mounted")
        try Self.ddFile(container.mounted("Documents/one"), mebibytes: 1)
        let freeMounted = Self.freeBytes(container.mountpoint)
        container.unmount()
        let recorded = try String(contentsOfFile: summary, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(Int(recorded) == (8 << 20) - freeMounted, "the daemon's count: \(recorded)")

        // The summary is what the next mount believes (a false one proves no walk was made).
        try Data("0\n".utf8).write(to: URL(fileURLWithPath: summary))
        try container.mount()
        #expect(Self.freeBytes(container.mountpoint) == 8 << 20, "taken from the summary")
        // Killed: no summary is left, the next mount walks.
        let pid = try runProgram(["sh", "-c", "head -1 \(container.stored(".containerfs/mount.lock"))"])
        _ = try runProgram(["kill", "-KILL", pid.stdout.trimmingCharacters(in: .whitespacesAndNewlines)])
        usleep(300_000)
        container.unmount()
        #expect(access(summary, F_OK) != 0, "a killed daemon leaves no summary")
        try container.mount()
        #expect(Self.freeBytes(container.mountpoint) == freeMounted, "counted by a walk")
        container.unmount()

        // A command that changes the store drops the summary; `capacity` counts afresh.
        #expect(access(summary, F_OK) == 0)
        try Self.ddFile(container.base + "/small.bin", mebibytes: 1)
        let delivered = try containerfs(["deliver", container.store, container.base + "/small.bin"])
        #expect(delivered.status == 0 && access(summary, F_OK) != 0, "\(delivered)")
        _ = try containerfs(["capacity", container.store])
        try Self.ddFile(container.stored("Library/Caches/c.bin"), mebibytes: 1)
        #expect(access(summary, F_OK) == 0)
        let purged = try containerfs(["purge", container.store, "--caches"])
        #expect(purged.status == 0 && access(summary, F_OK) != 0, "\(purged)")
        try Data("0\n".utf8).write(to: URL(fileURLWithPath: summary))
        let shown = try containerfs(["capacity", container.store])
        #expect(shown.status == 0, "\(shown)")
        let recounted = try String(contentsOfFile: summary, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(Int(recounted) == (try Self.storeBytes(container.store)), "recounted: \(recounted)")

        // A purge for low storage before a mount drops the record: the daemon counts anew.
        try container.mount()
        try Self.ddFile(container.mounted("Library/Caches/big"), mebibytes: 4)
        container.unmount()
        #expect(access(summary, F_OK) == 0)
        let low = try containerfs(["mount", container.store, container.mountpoint, "--low-storage", "5M"])
        try #require(low.status == 0 && low.stdout.contains("Library/Caches/big"), "\(low)")
        #expect(Self.freeBytes(container.mountpoint) == (8 << 20) - (try Self.storeBytes(container.store)), "counted after the purge")
    }

    /// `run` leaves a true count for the next mount: its daemon records what it counted
    /// less the `tmp/` it emptied; purges between launches drop what is stale.
    @Test func runLeavesATrueCount() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        try Self.setCapacity(container, "8M")
        let summary = container.stored(".containerfs/used")
        let ran = try containerfs(["run", container.store, "--", "/bin/sh", "-c",
                                   "dd if=/dev/zero of=Documents/a bs=1M count=1 status=none && dd if=/dev/zero of=tmp/t bs=1M count=1 status=none && dd if=/dev/zero of=Library/Caches/c bs=1M count=1 status=none"])
        try #require(ran.status == 0, "\(ran)")
        let recorded = try String(contentsOfFile: summary, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(Int(recorded) == (try Self.storeBytes(container.store)), "recorded \(recorded)")

        let launches = try containerfs(["run", container.store, "--launches", "2", "--purge-between", "caches", "--", "true"])
        try #require(launches.status == 0, "\(launches)")
        #expect(access(container.stored("Library/Caches/c"), F_OK) != 0, "purged between launches")
        // The summary must be there: no summary is a failure, not a pass.
        let after = try String(contentsOfFile: summary, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(Int(after) == (try Self.storeBytes(container.store)), "recorded \(after)")
    }

    /// A file of `tmp/` the app also linked into Documents/ keeps its blocks when the
    /// unmount empties `tmp/`: the count recorded for the next mount still holds them.
    /// Against a daemon that counts all of `tmp/` as freed, the summary is short by the
    /// file and the next mount lets the app write past the capacity.
    @Test func aTmpFileLinkedIntoDocumentsStaysCounted() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        try Self.setCapacity(container, "8M")
        let ran = try containerfs(["run", container.store, "--", "/bin/sh", "-c",
                                   "dd if=/dev/zero of=tmp/t bs=1M count=1 status=none && ln tmp/t Documents/kept"])
        try #require(ran.status == 0, "\(ran)")
        #expect(access(container.stored("Documents/kept"), F_OK) == 0 && access(container.stored("tmp/t"), F_OK) != 0)
        let recorded = try String(contentsOfFile: container.stored(".containerfs/used"), encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(Int(recorded) == (try Self.storeBytes(container.store)), "recorded \(recorded)")
    }

    /// A store of capacity 8M holding 7M: 1M in tmp, two 2M caches (old, then new), 2M of documents.
    static func fillForLowStorage(_ container: MountedContainer) throws {
        try setCapacity(container, "8M")
        let write = """
            import os, sys
            store = sys.argv[1]
            def put(path, size, age):
                full = os.path.join(store, path)
                os.makedirs(os.path.dirname(full), exist_ok=True)
                with open(full, "wb") as f: f.write(b"z" * size)
                when = 1_000_000_000 + age
                os.utime(full, (when, when))
            put("tmp/scratch", 1 << 20, 0)
            put("Library/Caches/old/a", 2 << 20, 10)
            put("Library/Caches/new/b", 2 << 20, 20)
            put("Documents/d", 2 << 20, 0)
            """
        let made = try runProgram(["/usr/bin/python3", "-c", write, container.store])
        guard made.status == 0 else { throw TestFailure("\(made)") }
    }

    /// Low storage before launch: tmp first, then caches least recently used first, only
    /// as much as needed, printed; folders emptied below Library/Caches go too; a running
    /// container is never purged; a threshold above the capacity is refused.
    @Test func lowStoragePurgesOnlyWhatIsNeeded() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        try Self.fillForLowStorage(container)

        let tooMuch = try containerfs(["mount", container.store, container.mountpoint, "--low-storage", "9M"])
        #expect(tooMuch.status == 64 && tooMuch.stderr.split(separator: "\n").count == 1, "\(tooMuch)")
        #expect(access(container.stored("tmp/scratch"), F_OK) == 0, "nothing purged on bad input")

        let mounted = try containerfs(["mount", container.store, container.mountpoint, "--low-storage", "3M"])
        try #require(mounted.status == 0, "\(mounted)")
        #expect(mounted.stdout.contains("emptied") && mounted.stdout.contains("Library/Caches/old/a"), "\(mounted)")
        #expect(!mounted.stdout.contains("new/b"), "\(mounted)")
        #expect(access(container.stored("tmp/scratch"), F_OK) != 0)
        #expect(access(container.stored("Library/Caches/old"), F_OK) != 0, "the emptied folder went")
        #expect(access(container.stored("Library/Caches/new/b"), F_OK) == 0, "only what was needed")
        #expect(access(container.stored("Library/Caches"), F_OK) == 0 && access(container.stored("tmp"), F_OK) == 0)
        #expect(access(container.stored("Documents/d"), F_OK) == 0)

        // Running: never purged.
        let running = try containerfs(["purge", container.store, "--caches", "--until-free", "7M"])
        #expect(running.status == 1 && running.stderr.contains("in use"), "\(running)")
        #expect(access(container.stored("Library/Caches/new/b"), F_OK) == 0)
        container.unmount()
        let purged = try containerfs(["purge", container.store, "--caches", "--until-free", "5M"])
        #expect(purged.status == 0 && purged.stdout.contains("new/b"), "\(purged)")
        #expect(access(container.stored("Library/Caches/new"), F_OK) != 0 && access(container.stored("Library/Caches"), F_OK) == 0)
    }

    /// `run --low-storage` purges as `mount --low-storage` does, before the program starts:
    /// the program never sees what went, and sees what was kept.
    @Test func runWithLowStoragePurgesBeforeTheProgramStarts() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        try Self.fillForLowStorage(container)

        let tooMuch = try containerfs(["run", container.store, "--low-storage", "9M", "--", "true"])
        #expect(tooMuch.status == 64 && tooMuch.stderr.split(separator: "\n").count == 1, "\(tooMuch)")
        #expect(access(container.stored("tmp/scratch"), F_OK) == 0, "nothing purged on bad input")

        let ran = try containerfs(["run", container.store, "--low-storage", "3M", "--",
                                   "/bin/sh", "-c", "echo START; ls Library/Caches; ls -A tmp; echo END"])
        try #require(ran.status == 0, "\(ran)")
        let output = ran.stdout
        let start = try #require(output.range(of: "START\n"), "\(ran)")
        let purged = output[..<start.lowerBound], seen = output[start.upperBound...]
        #expect(purged.contains("emptied") && purged.contains("Library/Caches/old/a"), "printed before the program: \(ran)")
        #expect(!purged.contains("new/b"), "only what was needed: \(ran)")
        #expect(seen == "new\nEND\n", "the program sees the kept cache folder and an empty tmp: \(ran)")
        #expect(access(container.stored("Library/Caches/new/b"), F_OK) == 0)
        #expect(access(container.stored("Documents/d"), F_OK) == 0)
    }

    /// usage gives capacity, used, free and availableForImportantUsage (free + the cache
    /// and tmp bytes), in --json and in the table.
    @Test func usageReportsTheDevice() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        try Self.setCapacity(container, "8M")
        try container.mount()
        try Data(repeating: 1, count: 1 << 20).write(to: URL(fileURLWithPath: container.mounted("Documents/d")))
        try Data(repeating: 2, count: 300_000).write(to: URL(fileURLWithPath: container.mounted("Library/Caches/c")))
        try Data(repeating: 3, count: 5000).write(to: URL(fileURLWithPath: container.mounted("tmp/t")))
        let result = try containerfs(["usage", container.store, "--json"])
        let object = try #require((try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [[String: Any]])?.first, "\(result)")
        let used = try Self.storeBytes(container.store)
        #expect(object["capacity"] as? Int == Self.capacity)
        #expect(object["used"] as? Int == used)
        #expect(object["free"] as? Int == Self.capacity - used)
        #expect(object["availableForImportantUsage"] as? Int == Self.capacity - used + 305_000)
        var device = statvfs()
        #expect(statvfs(container.mountpoint, &device) == 0)
        #expect(abs(Int(device.f_bavail) * Int(device.f_frsize) - (Self.capacity - used)) <= 4096, "statfs agrees with usage")
        let table = try containerfs(["usage", container.store])
        #expect(table.stdout.contains("capacity  8.0 MiB") && table.stdout.contains("available for important usage"), "\(table)")
    }

    /// `git commit` of a file larger than the space left fails cleanly, and the repository
    /// stays valid (`git fsck`); after freeing space a commit succeeds.
    @Test func gitCommitOnAFullDiskLeavesTheRepositoryValid() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        try Self.setCapacity(container, "8M")
        try container.mount()
        let repository = container.mounted("Documents/repo")
        let git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", repository]
        #expect(try runProgram(["git", "init", "-q", repository]).status == 0)
        try Data("first\n".utf8).write(to: URL(fileURLWithPath: repository + "/small.txt"))
        #expect(try runProgram(git + ["add", "small.txt"]).status == 0)
        #expect(try runProgram(git + ["commit", "-qm", "first"]).status == 0)
        // Random data does not compress: the object cannot fit.
        let big = try runProgram(["sh", "-c", "head -c 12582912 /dev/urandom > /tmp/cfs-capacity-big && cp /tmp/cfs-capacity-big \(repository)/big.bin; echo $?; rm -f /tmp/cfs-capacity-big"])
        #expect(big.stdout.hasPrefix("1") || big.stderr.contains("No space left"), "\(big)")
        try? FileManager.default.removeItem(atPath: repository + "/big.bin")
        let filler = try runProgram(["sh", "-c", "head -c 7000000 /dev/urandom > \(repository)/big.bin"])
        #expect(filler.status == 0, "\(filler)")
        let added = try runProgram(git + ["add", "big.bin"])
        let commit = added.status == 0 ? try runProgram(git + ["commit", "-qm", "big"]) : added
        #expect(commit.status != 0 && commit.stderr.contains("No space left"), "\(commit)")
        let fsck = try runProgram(git + ["fsck", "--no-dangling"])
        #expect(fsck.status == 0, "\(fsck)")
        #expect(try runProgram(git + ["log", "--oneline"]).stdout.split(separator: "\n").count == 1)
        try FileManager.default.removeItem(atPath: repository + "/big.bin")
        try Data("second\n".utf8).write(to: URL(fileURLWithPath: repository + "/small.txt"))
        #expect(try runProgram(git + ["commit", "-qam", "second"]).status == 0)
        #expect(try runProgram(git + ["fsck"]).status == 0)
    }
}

/// The count is true under any workload (SPEC §10, issue #26): each finding of the
/// adversarial review, replayed. The oracle is an independent walk of the store
/// (`storeBytes`); the daemon's count is what `statfs` shows through the mount.
extension CapacityTests {
    /// The bytes the daemon counts as used: the capacity less the free space `statfs` shows.
    static func daemonUsed(_ container: MountedContainer) -> Int {
        var device = statvfs()
        guard statvfs(container.mountpoint, &device) == 0 else { return -1 }
        return (Int(device.f_blocks) - Int(device.f_bavail)) * Int(device.f_frsize)
    }

    /// Runs a Python script with the mount point and the store as its arguments; returns its
    /// output lines, throwing when it fails.
    static func python(_ container: MountedContainer, _ script: String) throws -> [String] {
        var environment = ProcessInfo.processInfo.environment
        environment["CONTAINERFS"] = containerfsBinary
        let result = try runProgram(["/usr/bin/python3", "-c", script, container.mountpoint, container.store], environment: environment)
        guard result.status == 0 else { throw TestFailure("the script failed: \(result)") }
        return result.stdout.split(separator: "\n").map(String.init)
    }

    /// Expects the daemon's count to be the store's blocks, exactly.
    static func expectTrueCount(_ container: MountedContainer, _ when: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let walked = try storeBytes(container.store)
        #expect(daemonUsed(container) == walked, "\(when): the daemon counts \(daemonUsed(container)), the store holds \(walked)", sourceLocation: sourceLocation)
    }

    /// Pages written through a shared mapping arrive as many concurrent writes to one
    /// file: each is counted once (two 40 MiB files in 200M met ENOSPC at 83 MB stored,
    /// and deleting them left 200 MB counted).
    @Test func mappedWritesCountEachPageOnce() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        try Self.setCapacity(container, "200M")
        try container.mount()
        let lines = try Self.python(container, """
            import mmap, os, sys
            for name in ("a", "b"):
                fd = os.open(sys.argv[1] + "/Documents/" + name, os.O_RDWR | os.O_CREAT, 0o644)
                os.ftruncate(fd, 40 << 20)
                with mmap.mmap(fd, 40 << 20) as m:
                    for page in range(0, 40 << 20, 4096): m[page:page + 4096] = b"m" * 4096
                    m.flush()
                os.close(fd)
            print("written")
            """)
        #expect(lines == ["written"])
        try Self.expectTrueCount(container, "after the mapped writes")
        #expect(unlink(container.mounted("Documents/a")) == 0 && unlink(container.mounted("Documents/b")) == 0)
        try Self.expectTrueCount(container, "after deleting them")
    }

    /// An extended attribute too large for the inode takes a block of its own on ext4; on
    /// a folder that block is counted once, and given back when the attribute goes. Found
    /// by fsstress (its attr_set on folders, then a creat there): the next creation in the
    /// folder took the attribute's block for the folder's growth and counted it again, and
    /// after a removal the folder's next growth went uncounted.
    @Test func aFoldersAttributeBlockCountsOnce() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        try Self.setCapacity(container, "64M")
        try container.mount()
        let folder = container.mounted("Documents/folder")
        func create(_ name: String) {
            let fd = open(folder + "/" + name, O_CREAT | O_WRONLY | O_EXCL, 0o644)
            #expect(fd >= 0, "create \(name): errno \(errno)")
            if fd >= 0 { close(fd) }
        }
        #expect(mkdir(folder, 0o755) == 0)
        create("first")
        try Self.expectTrueCount(container, "after a creation")
        let value = [UInt8](repeating: UInt8(ascii: "v"), count: 1000)
        #expect(setxattr(folder, "user.big", value, value.count, 0) == 0, "setxattr: errno \(errno)")
        try Self.expectTrueCount(container, "after setting a large attribute on the folder")
        create("second")
        try Self.expectTrueCount(container, "after a creation in the folder with the attribute")
        #expect(removexattr(folder, "user.big") == 0, "removexattr: errno \(errno)")
        create("third")
        try Self.expectTrueCount(container, "after removing the attribute and a creation")
        // Enough long names to grow the folder past its first block: that growth is counted.
        for index in 0..<120 { create(String(repeating: "n", count: 60) + String(index)) }
        try Self.expectTrueCount(container, "after the folder grew")
    }

    /// Opens racing unlinks of the same names, from several processes at once: the daemon
    /// lives (a node linked again while still in the descriptor cache was inserted twice,
    /// and freed while listed: a crash) and the count is true (an open recorded after the
    /// unlink kept its blocks counted for good). Both found by an adversarial review; a
    /// one-block miscount under this race is left (docs/capacity.md).
    @Test func opensRacingUnlinksKeepTheDaemonAndTheCount() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        try Self.setCapacity(container, "512M")
        try container.mount(options: ["nopassthrough"])
        let script = """
            import os, sys, threading
            D = sys.argv[1] + "/Documents"
            def creator(k):
                for i in range(300):
                    p = f"{D}/race{k}"
                    try: open(p, "wb").write(b"x" * 4096)
                    except OSError: pass
                    try: os.unlink(p)
                    except OSError: pass
            def opener(k):
                for i in range(900):
                    try: fd = os.open(f"{D}/race{k}", os.O_RDWR)
                    except OSError: continue
                    try: os.pwrite(fd, b"y" * 65536, 4096)
                    except OSError: pass
                    os.close(fd)
            threads = [threading.Thread(target=f, args=(k,)) for k in range(4) for f in (creator, opener)]
            [t.start() for t in threads]; [t.join() for t in threads]
            """
        for round in 1...4 {
            let workers = try (0..<4).map { _ in try BackgroundProgram(["/usr/bin/python3", "-c", script, container.mountpoint]) }
            for worker in workers { _ = worker.wait(seconds: 120) }
            var device = statvfs()
            try #require(statvfs(container.mountpoint, &device) == 0, "round \(round): the daemon died (\(String(cString: strerror(errno))))")
            // Within four blocks: a race left is known to miss one block at times (docs/capacity.md);
            // before the fix the count drifted by hundreds of KiB a round.
            let walked = try Self.storeBytes(container.store), counted = Self.daemonUsed(container)
            #expect(abs(counted - walked) <= 16384, "after round \(round): the daemon counts \(counted), the store holds \(walked)")
        }
    }

    /// A capacity larger than the disk's free space: df's "Used" (size − free) is still
    /// what the container uses, and "Avail" what the disk can really give (a review found
    /// 847 GB "used" for a container of 84 KiB with a capacity of 1T).
    @Test func aCapacityBeyondTheDiskShowsTheTrueUse() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        var disk = statvfs()
        try #require(statvfs(container.store, &disk) == 0)
        let beyond = Int(disk.f_blocks) * Int(disk.f_frsize) * 2
        try Self.setCapacity(container, "\(beyond)")
        try container.mount()
        var device = statvfs()
        try #require(statvfs(container.mountpoint, &device) == 0)
        let shownUsed = (Int(device.f_blocks) - Int(device.f_bfree)) * Int(device.f_frsize)
        let walked = try Self.storeBytes(container.store)
        #expect(abs(shownUsed - walked) <= Int(device.f_frsize), "df's Used \(shownUsed), the store holds \(walked)")
        // Other work on the disk frees space meanwhile: the larger of the disk's two figures,
        // and room for what it frees, which is far below the capacity's doubled disk size.
        var diskAfter = statvfs()
        try #require(statvfs(container.store, &diskAfter) == 0)
        let diskAvailable = max(Int(disk.f_bavail), Int(diskAfter.f_bavail)) * Int(disk.f_frsize)
        #expect(Int(device.f_bavail) * Int(device.f_frsize) <= diskAvailable + (64 << 20), "Avail is no more than the disk has")
    }

    /// Rewriting a file with O_TRUNC gives its blocks back: ten 1 MiB rewrites fit in 8M
    /// (rewrites 8-10 failed and left the file empty; the wrong count survived unmount).
    /// Then 300 more, quickly: each close of the previous rewrite makes ext4 allocate the
    /// blocks it had reserved while the next truncating open measures the file, and a
    /// measure caught between the two counted nothing freed (about 1 rewrite in 50).
    @Test func truncatingOpensGiveTheirBlocksBack() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        try Self.setCapacity(container, "8M")
        try container.mount()
        let file = container.mounted("Documents/settings")
        let rewrites = try runProgram(["sh", "-c", "for i in $(seq 10); do head -c 1M /dev/zero > \(file) || exit 1; done"])
        #expect(rewrites.status == 0, "\(rewrites)")
        try Self.expectTrueCount(container, "after ten rewrites")
        let quick = "import sys\nfor _ in range(300):\n    with open(sys.argv[1], 'wb') as f: f.write(bytes(1 << 20))"
        let more = try runProgram(["/usr/bin/python3", "-c", quick, file])
        #expect(more.status == 0, "\(more)")
        try Self.expectTrueCount(container, "after 300 more")
        container.unmount()
        try container.mount()
        try Self.expectTrueCount(container, "after a remount")
    }

    /// An O_TMPFILE file closed without a name is freed at its close; one linked stays
    /// counted as any file.
    @Test func closedTemporaryFilesAreFreed() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        try Self.setCapacity(container, "2M")
        try container.mount()
        let lines = try Self.python(container, """
            import ctypes, errno, os, sys, time
            M = sys.argv[1]
            libc = ctypes.CDLL(None, use_errno=True)
            for _ in range(2):
                fd = os.open(M + "/Documents", os.O_TMPFILE | os.O_WRONLY, 0o600)
                os.write(fd, b"t" * (1 << 20))
                os.close(fd)
            time.sleep(0.3)  # the kernel sends RELEASE after close returns
            try:
                with open(M + "/Documents/y", "wb") as f: f.write(b"y" * 65536)
                print("ok")
            except OSError as e:
                print(errno.errorcode[e.errno])
            fd = os.open(M + "/Documents", os.O_TMPFILE | os.O_WRONLY, 0o600)
            os.write(fd, b"l" * 65536)
            AT_FDCWD, AT_SYMLINK_FOLLOW = -100, 0x400
            assert libc.linkat(AT_FDCWD, b"/proc/self/fd/%d" % fd, AT_FDCWD, (M + "/Documents/linked").encode(), AT_SYMLINK_FOLLOW) == 0
            os.close(fd)
            """)
        #expect(lines == ["ok"])
        usleep(300_000)
        try Self.expectTrueCount(container, "after the temporary files")
        #expect(unlink(container.mounted("Documents/linked")) == 0)
        try Self.expectTrueCount(container, "after the linked one went")
    }

    /// Renames that grow a folder are refused with ENOSPC when the container is full, so
    /// the store stays within its capacity (hard links with long names moved folder to
    /// folder took a full 4 MiB container to 47 MB); RENAME_EXCHANGE counts both folders.
    @Test func renamesAreHeldToTheCapacity() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        try Self.setCapacity(container, "4M")
        try container.mount()
        let lines = try Self.python(container, """
            import errno, os, sys
            M = sys.argv[1] + "/Documents"
            for round in range(40): os.mkdir(M + "/d%d" % round)
            with open(M + "/seed", "wb") as f: f.write(b"s")
            names = ["%03d" % i + "n" * 242 for i in range(600)]
            for name in names: os.link(M + "/seed", M + "/d0/" + name)
            try:
                with open(M + "/fill", "wb") as f:
                    while True: f.write(b"f" * 65536); f.flush()
            except OSError as e:
                print("fill", errno.errorcode[e.errno])
            refused = 0
            for round in range(1, 40):
                for name in names:
                    try: os.rename(M + "/d%d/%s" % (round - 1, name), M + "/d%d/%s" % (round, name))
                    except OSError as e:
                        assert e.errno == errno.ENOSPC, e
                        refused += 1
                        break
                if refused: break
            print("refused", refused > 0)
            """)
        #expect(lines == ["fill ENOSPC", "refused True"], "\(lines)")
        let stored = try Self.storeBytes(container.store)
        #expect(stored <= (4 << 20) + Self.request, "the store holds \(stored) bytes")
        try Self.expectTrueCount(container, "after the renames")
    }

    /// A planted `.containerfs/used` of Int64.max is not believed (it is more than the
    /// store's file system holds: the mount walks), and a folder's growth on it never
    /// overflows the count: the daemon lives on (it died with SIGILL, the mount dead).
    @Test func aPlantedCountCannotKillTheDaemon() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        try Self.setCapacity(container, "8M")
        try Data("9223372036854775807\n".utf8).write(to: URL(fileURLWithPath: container.stored(".containerfs/used")))
        try container.mount()
        let lines = try Self.python(container, """
            import os, sys
            M = sys.argv[1] + "/Documents"
            os.mkdir(M + "/a"); os.mkdir(M + "/b")
            for i in range(100):
                name = "%03d" % i + "r" * 240
                open(M + "/a/" + name, "wb").close()
                os.rename(M + "/a/" + name, M + "/b/" + name)
            with open(M + "/written", "wb") as f: f.write(b"w" * (1 << 20))
            print("ok")
            """)
        #expect(lines == ["ok"])
        #expect(!isDeadMount(container.mountpoint), "the daemon died")
        try Self.expectTrueCount(container, "after the planted count")
    }

    /// A capacity near Int64.max with a count that went below zero (a file removed that a
    /// false record never had) never overflows `capacity - used`: the write goes through.
    @Test func aCapacityNearTheLimitCannotKillTheDaemon() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        try Self.setCapacity(container, "9223372036854775807")
        try Data(repeating: 7, count: 1 << 20).write(to: URL(fileURLWithPath: container.stored("Documents/unrecorded")))
        try Data("0\n".utf8).write(to: URL(fileURLWithPath: container.stored(".containerfs/used")))
        try container.mount()
        #expect(unlink(container.mounted("Documents/unrecorded")) == 0)
        let write = try runProgram(["sh", "-c", "head -c 65536 /dev/zero > \(container.mounted("Documents/after"))"])
        #expect(write.status == 0, "\(write)")
        #expect(!isDeadMount(container.mountpoint), "the daemon died")
    }

    /// copy_file_range past the capacity fails with ENOSPC and copies nothing, as
    /// docs/capacity.md says (it copied part).
    @Test func copyFileRangePastTheCapacityFails() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        try Self.setCapacity(container, "8M")
        try container.mount()
        let lines = try Self.python(container, """
            import errno, os, sys
            M = sys.argv[1] + "/Documents"
            with open(M + "/source", "wb") as f: f.write(b"c" * (3 << 20))
            with open(M + "/ballast", "wb") as f: f.write(b"b" * (3 << 20))
            source = os.open(M + "/source", os.O_RDONLY)
            target = os.open(M + "/copy", os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                print("copied", os.copy_file_range(source, target, 3 << 20))
            except OSError as e:
                print(errno.errorcode[e.errno], os.fstat(target).st_size)
            """)
        #expect(lines == ["ENOSPC 0"], "\(lines)")
        try Self.expectTrueCount(container, "after the copy")
    }

    /// `containerfs capacity STORE` on a mounted store counts afresh and the daemon takes
    /// that count: the two agree (it printed a walk while the daemon kept a false count).
    @Test func capacityCommandAndTheDaemonAgree() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        try Self.setCapacity(container, "8M")
        try Data(repeating: 7, count: 1 << 20).write(to: URL(fileURLWithPath: container.stored("Documents/unrecorded")))
        // A record that is false but possible: the daemon believes it.
        try Data("0\n".utf8).write(to: URL(fileURLWithPath: container.stored(".containerfs/used")))
        try container.mount()
        let shown = try containerfs(["capacity", container.store])
        #expect(shown.status == 0, "\(shown)")
        let walked = try Self.storeBytes(container.store)
        #expect(shown.stdout.contains("used \(walked) bytes"), "\(shown) against \(walked)")
        #expect(Self.daemonUsed(container) == walked, "the daemon counts \(Self.daemonUsed(container)), the store holds \(walked)")
    }

    /// A recount on a live mount (a delivery behind it, or `capacity STORE`) keeps a file
    /// unlinked but still open, which a walk cannot see: freed at its close, it must not be
    /// taken off a count that never had it.
    @Test func aRecountKeepsFilesHeldOpen() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        try Self.setCapacity(container, "8M")
        try container.mount()
        let lines = try Self.python(container, """
            import os, subprocess, sys, time
            M, store = sys.argv[1], sys.argv[2]
            held = open(M + "/Documents/held", "wb")
            held.write(b"h" * (2 << 20)); held.flush()
            os.unlink(M + "/Documents/held")
            with open(store + "/../small.bin", "wb") as f: f.write(b"d" * 4096)
            subprocess.run([os.environ["CONTAINERFS"], "deliver", store, store + "/../small.bin"], check=True, capture_output=True)
            subprocess.run([os.environ["CONTAINERFS"], "capacity", store], check=True, capture_output=True)
            held.close()
            time.sleep(0.3)  # the kernel sends RELEASE after close returns
            print("ok")
            """)
        #expect(lines == ["ok"])
        try Self.expectTrueCount(container, "after the held file's close")
    }

    /// A purge of a live mount deletes a cache file a program still writes: the recount
    /// after it keeps the file as held, and its close frees what it holds by then (its
    /// writes after the purge were counted on top of a count that no longer had it).
    @Test func aCacheFilePurgedWhileWrittenIsFreedAtItsClose() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        try Self.setCapacity(container, "16M")
        try container.mount()
        let lines = try Self.python(container, """
            import os, subprocess, sys, time
            M, store = sys.argv[1], sys.argv[2]
            f = open(M + "/Library/Caches/written", "wb")
            f.write(b"c" * (1 << 20)); f.flush()
            purged = subprocess.run([os.environ["CONTAINERFS"], "purge", store, "--caches", "--include-running"], capture_output=True, text=True)
            print("purged" if "Library/Caches/written" in purged.stdout else "kept: " + purged.stdout + purged.stderr)
            f.write(b"d" * (2 << 20)); f.flush()
            f.close()
            time.sleep(0.3)  # the kernel sends RELEASE after close returns
            """)
        #expect(lines == ["purged"])
        try Self.expectTrueCount(container, "after the purged file's close")
    }

    /// A file a rename replaced stays in the store while something holds it (an `O_PATH`
    /// descriptor sends the daemon no open), until the kernel forgets it: so long it
    /// counts, a recount too, and the program cannot write past the capacity meanwhile.
    /// Counted as freed at the rename, three such files let a program store 45 MiB more
    /// than the count said, and write past the capacity.
    @Test func aReplacedFileKeptForTheKernelCountsUntilItGoes() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        try Self.setCapacity(container, "64M")
        try container.mount()
        let lines = try Self.python(container, """
            import errno, os, subprocess, sys, time
            M, store = sys.argv[1], sys.argv[2]
            def used():
                s = os.statvfs(M); return (s.f_blocks - s.f_bavail) * s.f_frsize
            def write(path, mib):
                with open(path, "wb") as f:
                    for _ in range(mib): f.write(b"r" * (1 << 20))
            write(M + "/Documents/doc", 20)
            holders = []
            for mib in (15, 10, 5):   # each version held, then replaced by a smaller one
                holders.append(os.open(M + "/Documents/doc", os.O_PATH))
                write(M + "/Documents/new", mib)
                os.rename(M + "/Documents/new", M + "/Documents/doc")
            print("held", used() >> 20)
            subprocess.run([os.environ["CONTAINERFS"], "capacity", store], check=True, capture_output=True)
            print("recounted", used() >> 20)
            try:
                write(M + "/Documents/more", 30)
                print("wrote past the capacity")
            except OSError as e:
                print("refused", errno.errorcode[e.errno])
            os.unlink(M + "/Documents/more")
            for fd in holders: os.close(fd)
            deadline = time.monotonic() + 5
            while used() >> 20 > 6 and time.monotonic() < deadline: time.sleep(0.01)
            print("let go", used() >> 20)
            """)
        #expect(lines == ["held 50", "recounted 50", "refused ENOSPC", "let go 5"], "\(lines)")
        try Self.expectTrueCount(container, "after the replaced files went")
    }

    /// A name of a file open elsewhere removed while the file keeps another (a hard link):
    /// the removal holds the file as an open one, and when that hold was the last to go
    /// (the program closed it meanwhile) its close was counted as if the file had no
    /// blocks left: two writers and a `ln a b; rm b` loop took the count of a 64 KiB file
    /// that stayed to 0 within two seconds, so the capacity held nothing back.
    @Test func removingAHardLinkOfAnOpenFileKeepsItsBlocksCounted() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        try Self.setCapacity(container, "64M")
        try container.mount(options: ["nopassthrough"])
        let lines = try Self.python(container, """
            import os, sys, time, multiprocessing
            D = sys.argv[1] + "/Documents"
            with open(D + "/a", "wb") as f: f.write(b"w" * 65536)
            def writer():
                end = time.monotonic() + 2
                while time.monotonic() < end:
                    fd = os.open(D + "/a", os.O_RDWR); os.pwrite(fd, b"w" * 65536, 0); os.close(fd)
            def linker():
                end = time.monotonic() + 2
                while time.monotonic() < end:
                    os.link(D + "/a", D + "/b"); os.unlink(D + "/b")
            workers = [multiprocessing.Process(target=f) for f in (writer, writer, linker)]
            [w.start() for w in workers]; [w.join() for w in workers]
            print(all(w.exitcode == 0 for w in workers))
            """)
        #expect(lines == ["True"])
        try Self.expectTrueCount(container, "after the hard link loop")
    }

    /// A deleted file is kept until the kernel forgets it (for the opens racing the
    /// unlink), and counted meanwhile; the `FORGET` comes as the unlink returns, but may be
    /// served after the program's next request. That request still finds the room: a
    /// `statfs` right after the unlink shows it free (27 % of 200 did not, up to 6 ms,
    /// before `statfs` and refusals waited for such removals), and a file as big as the
    /// one deleted, written at once, fits. One a program holds (`O_PATH`) stays counted
    /// until it is let go.
    @Test func aDeletedFilesRoomIsThereWhenTheUnlinkReturns() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        try Self.setCapacity(container, "64M")
        try container.mount()
        let lines = try Self.python(container, """
            import errno, os, sys, time
            M = sys.argv[1]
            def used():
                s = os.statvfs(M); return (s.f_blocks - s.f_bavail) * s.f_frsize
            def write(path, mib):
                with open(path, "wb") as f:
                    for _ in range(mib): f.write(b"d" * (1 << 20))
            late = 0
            for _ in range(200):
                write(M + "/Documents/f", 10)
                before = used()
                os.unlink(M + "/Documents/f")
                if used() > before - (9 << 20): late += 1
            print("late", late)
            refused = 0
            for _ in range(20):
                try:
                    write(M + "/Documents/big", 50)
                except OSError:
                    refused += 1
                os.unlink(M + "/Documents/big")
            print("refused", refused)
            write(M + "/Documents/held", 30)
            holder = os.open(M + "/Documents/held", os.O_PATH)
            os.unlink(M + "/Documents/held")
            print("held", used() >> 20)
            os.close(holder)
            deadline = time.monotonic() + 5
            while used() >> 20 > 1 and time.monotonic() < deadline: time.sleep(0.01)
            print("let go", used() >> 20)
            """)
        #expect(lines == ["late 0", "refused 0", "held 30", "let go 0"], "\(lines)")
        try Self.expectTrueCount(container, "after the deletions")
    }

    /// A full container still lets `include` remove the exclusion attribute through the
    /// mount: the check that asks each path first (a `setxattr` that can only fail) meets
    /// `ENOSPC` there, which refuses a new attribute, not a removal.
    @Test func includeThroughAFullContainerRemovesTheAttribute() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        try Self.setCapacity(container, "4M")
        try container.mount()
        let file = container.mounted("Documents/kept.txt")
        try Data("kept\n".utf8).write(to: URL(fileURLWithPath: file))
        #expect(try containerfs(["exclude", file]).status == 0)
        let filled = try runProgram(["dd", "if=/dev/zero", "of=" + container.mounted("Documents/ballast"), "bs=64k", "status=none"])
        #expect(filled.status != 0 && filled.stderr.contains("No space left"), "\(filled)")
        let included = try containerfs(["include", file])
        #expect(included.status == 0, "\(included)")
        #expect(try runProgram(["getfattr", "-n", "user.containerfs.exclude-from-backup", container.stored("Documents/kept.txt")]).status != 0)
    }

    /// A recount (each `containerfs capacity STORE` makes one) while programs write: the
    /// walk sees the store between changes, so a write reserved but not yet settled is
    /// neither lost nor counted twice (a purge racing writes left the count 460 KiB short).
    /// Six rounds, each a recount amid writes, then the count against the store; the
    /// build before failed in three runs of three (1-3 rounds of 8 each).
    @Test func recountsDuringWritesKeepTheCountTrue() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        try Self.setCapacity(container, "64M")
        // Files enough that each walk takes a while, as a store in use: writes finish during it.
        let many = container.stored("Library/many")
        try FileManager.default.createDirectory(atPath: many, withIntermediateDirectories: true)
        for index in 0..<4000 { FileManager.default.createFile(atPath: many + "/\(index)", contents: Data([1])) }
        try container.mount()
        for round in 1...6 {
            let lines = try Self.python(container, """
                import os, subprocess, sys, threading, time
                M, store = sys.argv[1], sys.argv[2]
                recounted = False
                def writer(k):
                    while not recounted:
                        with open(f"{M}/Documents/w{k}", "wb") as f:
                            for _ in range(16): f.write(b"w" * (192 << 10))
                threads = [threading.Thread(target=writer, args=(k,)) for k in range(3)]
                [t.start() for t in threads]
                subprocess.run([os.environ["CONTAINERFS"], "capacity", store], check=True, capture_output=True)
                recounted = True
                [t.join() for t in threads]
                time.sleep(0.3)  # the kernel sends RELEASE after close returns
                print("ok")
                """)
            #expect(lines == ["ok"])
            try Self.expectTrueCount(container, "round \(round), a recount during writes")
        }
    }

    /// `mount --low-storage` purges every file of `Library/Caches`, however it got there,
    /// not only those the daemon tagged (it stopped with five untagged 1 MiB files left).
    @Test func lowStoragePurgesCachesTheDaemonNeverSaw() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        try Self.setCapacity(container, "8M")
        try container.mount()
        try Self.ddFile(container.mounted("Library/Caches/tagged"), mebibytes: 1)
        container.unmount()
        try FileManager.default.createDirectory(atPath: container.stored("Library/Caches/untagged"), withIntermediateDirectories: true)
        for index in 0..<5 { try Self.ddFile(container.stored("Library/Caches/untagged/\(index)"), mebibytes: 1) }
        let mounted = try containerfs(["mount", container.store, container.mountpoint, "--low-storage", "4M"])
        try #require(mounted.status == 0, "\(mounted)")
        #expect(Self.freeBytes(container.mountpoint) >= 4 << 20, "\(mounted)")
        #expect(mounted.stdout.contains("Library/Caches/untagged/"), "\(mounted)")
    }

    /// The soak that decides the count (issue #26): random workloads of several processes
    /// at once through a mount with a capacity, checked after each round and after a
    /// remount against an independent walk (scripts/capacity-soak.py). Three fixed seeds
    /// here; `make soak` runs more, longer.
    @Test(arguments: [1, 2, 3]) func soakKeepsTheCountTrue(seed: Int) throws {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("scripts/capacity-soak.py").path
        var environment = ProcessInfo.processInfo.environment
        environment["CONTAINERFS"] = containerfsBinary
        let result = try runProgram(["/usr/bin/python3", script, "\(seed)", "--rounds", "4", "--workers", "3", "--ops", "60"],
                                    environment: environment)
        #expect(result.status == 0, "\(result)")
        #expect(result.stdout.contains("largest divergence 0 bytes"), "\(result)")
    }
}
