import Foundation
import Glibc
import Testing

/// Data protection through a real mount (SPEC §11, issue 14): classes, the device state
/// switched by `containerfs lock` and `unlock`, and what programs see.
@Suite("Data protection through a mount", .serialized)
struct ProtectionThroughMountTests {
    static let attribute = "user.containerfs.protection"

    /// A Python program that acts on a mounted container as one user: for each class, a
    /// folder `Documents/<class>` with a file `f`; it opens descriptors before the lock,
    /// then locks with `containerfs lock` and tries each access, then unlocks. It prints
    /// `class state access result` lines, result `ok` or the errno's name.
    static let tableProgram = #"""
    import errno, os, subprocess, sys
    cfs, store, root, state = sys.argv[1:5]
    classes = ["complete", "completeUnlessOpen", "completeUntilFirstUserAuthentication", "none"]
    def ctl(command):
        subprocess.run([cfs, command, store], check=True, stdout=subprocess.DEVNULL)
    def attempt(name, cls, body):
        try:
            body()
            print(cls, state, name, "ok")
        except OSError as error:
            print(cls, state, name, errno.errorcode[error.errno])
    def folder(cls):
        return f"{root}/Documents/{cls}"
    before = {}
    if state == "locked":
        for cls in classes:
            os.makedirs(folder(cls))
            os.setxattr(folder(cls), "user.containerfs.protection", cls.encode())
            with open(f"{folder(cls)}/f", "wb") as f:
                f.write(b"x" * 10000)
            before[cls] = os.open(f"{folder(cls)}/f", os.O_RDWR)
            os.pread(before[cls], 100, 0)   # fills the kernel's page cache
        ctl("lock")
    for cls in classes:
        attempt("openRead", cls, lambda: os.close(os.open(f"{folder(cls)}/f", os.O_RDONLY)))
        attempt("openWrite", cls, lambda: os.close(os.open(f"{folder(cls)}/f", os.O_WRONLY)))
        attempt("truncate", cls, lambda: os.truncate(f"{folder(cls)}/f", 10000))
        def create():
            fd = os.open(f"{folder(cls)}/new-{state}", os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o644)
            os.pwrite(fd, b"new", 0)
            assert os.pread(fd, 3, 0) == b"new"
            os.close(fd)
        attempt("create", cls, create)
        attempt("stat", cls, lambda: os.stat(f"{folder(cls)}/f"))
        attempt("list", cls, lambda: os.listdir(folder(cls)))
        attempt("getxattr", cls, lambda: os.getxattr(f"{folder(cls)}/f", "user.containerfs.protection"))
        if cls in before:
            attempt("readBefore", cls, lambda: os.pread(before[cls], 100, 0))
            attempt("writeBefore", cls, lambda: os.pwrite(before[cls], b"y", 0))
            attempt("ftruncateBefore", cls, lambda: os.ftruncate(before[cls], 10000))
    ctl("unlock")
    for cls in before:
        attempt("readAfterUnlock", cls, lambda: os.pread(before[cls], 1, 0))
    """#

    /// SPEC §11's table as a program sees it: locked (descriptors opened before the lock),
    /// and locked since boot (nothing can have been opened before).
    static let expected: [String: String] = {
        var lines: [String: String] = [:]
        func set(_ cls: String, _ state: String, _ results: [String: String]) {
            for (access, result) in results { lines["\(cls) \(state) \(access)"] = result }
        }
        let always = ["stat": "ok", "list": "ok", "getxattr": "ok"]
        let allOpen = ["openRead": "ok", "openWrite": "ok", "truncate": "ok", "create": "ok"]
        let noOpen = ["openRead": "EPERM", "openWrite": "EPERM", "truncate": "EPERM"]
        let descriptorsWork = ["readBefore": "ok", "writeBefore": "ok", "ftruncateBefore": "ok", "readAfterUnlock": "ok"]
        set("complete", "locked", always.merging(noOpen) { $1 }.merging(["create": "EPERM", "readBefore": "EPERM",
            "writeBefore": "EPERM", "ftruncateBefore": "EPERM", "readAfterUnlock": "ok"]) { $1 })
        set("completeUnlessOpen", "locked", always.merging(noOpen) { $1 }.merging(["create": "ok"]) { $1 }.merging(descriptorsWork) { $1 })
        set("completeUntilFirstUserAuthentication", "locked", always.merging(allOpen) { $1 }.merging(descriptorsWork) { $1 })
        set("none", "locked", always.merging(allOpen) { $1 }.merging(descriptorsWork) { $1 })
        set("complete", "lockedSinceBoot", always.merging(noOpen) { $1 }.merging(["create": "EPERM"]) { $1 })
        set("completeUnlessOpen", "lockedSinceBoot", always.merging(noOpen) { $1 }.merging(["create": "ok"]) { $1 })
        set("completeUntilFirstUserAuthentication", "lockedSinceBoot", always.merging(noOpen) { $1 }.merging(["create": "EPERM"]) { $1 })
        set("none", "lockedSinceBoot", always.merging(allOpen) { $1 })
        return lines
    }()

    /// Runs the table program on `container` in `state` and compares every line.
    private func checkTable(_ container: MountedContainer, state: String, user: String?) throws {
        // Where any user can read it.
        let folder = try makeTemporaryDirectory()
        defer { _ = try? runProgram(["rm", "-rf", folder]) }
        chmod(folder, 0o755)
        let program = folder + "/table.py"
        try Self.tableProgram.write(toFile: program, atomically: true, encoding: .utf8)
        chmod(program, 0o644)
        let result = try runProgram(["/usr/bin/python3", program, containerfsBinary, container.store, container.mountpoint, state],
                                    user: user, directory: "/")
        #expect(result.status == 0, "\(result.stderr.prefix(500))")
        var seen: [String: String] = [:]
        for line in result.stdout.split(separator: "\n") {
            let words = line.split(separator: " ").map(String.init)
            guard words.count == 4 else { continue }
            seen["\(words[0]) \(words[1]) \(words[2])"] = words[3]
        }
        let wanted = Self.expected.filter { $0.key.split(separator: " ")[1] == state }
        let wrong = wanted.keys.sorted().filter { seen[$0] != wanted[$0] }.map { "\($0): \(seen[$0] ?? "missing") instead of \(wanted[$0]!)" }
        #expect(wrong.isEmpty, "\(wrong.joined(separator: "\n"))")
        #expect(seen.count == wanted.count, "\(result.stdout)")
    }

    @Test("the class × state table, root's daemon (passthrough)", arguments: ["locked", "lockedSinceBoot"])
    func tableRoot(_ state: String) throws {
        try withMountedContainer(options: state == "lockedSinceBoot" ? ["locked"] : []) { container in
            if state == "lockedSinceBoot" { try Self.makeFolders(container, user: nil) }
            try checkTable(container, state: state, user: nil)
            // Every denial is in the audit log with its rule.
            let records = try container.waitForAudit(count: 1)
            #expect(!records.isEmpty)
            #expect(records.allSatisfy { $0["rule"] as? String == "protectedDataUnavailable" })
        }
    }

    @Test("the class × state table, an ordinary user's daemon", arguments: ["locked", "lockedSinceBoot"])
    func tableUser(_ state: String) throws {
        try withMountedContainer(user: "cfs-alice", options: state == "lockedSinceBoot" ? ["locked"] : []) { container in
            if state == "lockedSinceBoot" { try Self.makeFolders(container, user: "cfs-alice") }
            try checkTable(container, state: state, user: "cfs-alice")
        }
    }

    /// Locked since boot, nothing can be written through the mount: the folders and files
    /// are made in the store behind its back, the classes with `containerfs protect`.
    private static func makeFolders(_ container: MountedContainer, user: String?) throws {
        for cls in ["complete", "completeUnlessOpen", "completeUntilFirstUserAuthentication", "none"] {
            let script = "mkdir -p '\(container.stored("Documents/\(cls)"))' && head -c 10000 /dev/zero > '\(container.stored("Documents/\(cls)/f"))'"
            let made = try runProgram(["sh", "-c", script], user: user)
            #expect(made.status == 0, "\(made)")
            let protect = try containerfs(["protect", container.stored("Documents/\(cls)"), container.stored("Documents/\(cls)/f"), "--class", cls], user: user)
            #expect(protect.status == 0, "\(protect)")
        }
    }

    /// sqlite3 in Python holding its database open across the lock: with `complete` its next
    /// query fails, and works again after unlock; with `completeUnlessOpen` it keeps working.
    static let sqliteProgram = #"""
    import os, sqlite3, subprocess, sys
    cfs, store, root, cls = sys.argv[1:5]
    folder = f"{root}/Library/Application Support/db-{cls}"
    os.makedirs(folder)
    os.setxattr(folder, "user.containerfs.protection", cls.encode())
    db = sqlite3.connect(f"{folder}/app.sqlite", isolation_level=None)
    db.execute("create table notes (body text)")
    for n in range(200):
        db.execute("insert into notes values (?)", (f"note {n} " * 20,))
    print("before", db.execute("select count(*) from notes").fetchone()[0])
    subprocess.run([cfs, "lock", store], check=True, stdout=subprocess.DEVNULL)
    for query in ["select count(*) from notes", "insert into notes values ('while locked')"]:
        try:
            print("locked", db.execute(query).fetchall())
        except sqlite3.Error as error:
            print("locked error", error)
    subprocess.run([cfs, "unlock", store], check=True, stdout=subprocess.DEVNULL)
    print("after", db.execute("select count(*) from notes").fetchone()[0])
    print("integrity", db.execute("pragma integrity_check").fetchone()[0])
    """#

    @Test("sqlite3 holding its database open: complete fails while locked, then works; completeUnlessOpen keeps working",
          arguments: ["complete", "completeUnlessOpen"])
    func sqlite(_ cls: String) throws {
        try withMountedContainer { container in
            let program = container.base + "/db.py"
            try Self.sqliteProgram.write(toFile: program, atomically: true, encoding: .utf8)
            let result = try runProgram(["python3", program, containerfsBinary, container.store, container.mountpoint, cls])
            #expect(result.status == 0, "\(result)")
            let lines = result.stdout.split(separator: "\n").map(String.init)
            #expect(lines.first == "before 200", "\(result)")
            if cls == "complete" {
                #expect(lines.filter { $0.hasPrefix("locked error") }.count == 2, "\(result)")
                #expect(lines.contains("after 200"), "\(result)")
            } else {
                #expect(lines.contains("locked [(200,)]"), "\(result)")
                #expect(lines.contains("after 201"), "\(result)")
            }
            #expect(lines.contains("integrity ok"), "\(result)")
            let check = try runProgram(["sqlite3", container.stored("Library/Application Support/db-\(cls)/app.sqlite"), "pragma integrity_check"])
            #expect(check.stdout == "ok\n", "\(check)")
        }
    }

    /// The class a store node has (read behind the mount).
    private func storedClass(_ path: String) throws -> String {
        let result = try runProgram(["getfattr", "--only-values", "-n", Self.attribute, path])
        return result.status == 0 ? result.stdout : "none set: \(result.stderr)"
    }

    @Test("new folders and files take their folder's class: mkdir -p, cp, tar -x, git checkout")
    func inheritance() throws {
        try withMountedContainer { container in
            let top = container.mounted("Documents/secret")
            let source = container.base + "/source"
            let script = """
                set -e
                mkdir '\(top)'
                setfattr -n \(Self.attribute) -v complete '\(top)'
                mkdir -p '\(top)/a/b/c'
                mkdir -p '\(source)/tree/sub' && echo one > '\(source)/tree/one' && echo two > '\(source)/tree/sub/two'
                cp '\(source)/tree/one' '\(top)/copied'
                tar -C '\(source)' -cf '\(source)/tree.tar' tree && tar -C '\(top)' -xf '\(source)/tree.tar'
                git init -q '\(source)/repo' && echo hello > '\(source)/repo/hello' && git -C '\(source)/repo' add hello
                git -C '\(source)/repo' -c user.name=t -c user.email=t@t commit -qm one
                git clone -q '\(source)/repo' '\(top)/repo'
                """
            let result = try runProgram(["sh", "-c", script])
            #expect(result.status == 0, "\(result)")
            for path in ["a", "a/b", "a/b/c", "copied", "tree", "tree/one", "tree/sub", "tree/sub/two", "repo", "repo/hello", "repo/.git/HEAD"] {
                #expect(try storedClass(container.stored("Documents/secret/" + path)) == "complete", "\(path)")
            }
            // A file moved in keeps its own class, as on iOS.
            let moved = try runProgram(["sh", "-c", "echo m > '\(container.mounted("Documents/m"))' && setfattr -n \(Self.attribute) -v none '\(container.mounted("Documents/m"))' && mv '\(container.mounted("Documents/m"))' '\(top)/m'"])
            #expect(moved.status == 0, "\(moved)")
            #expect(try storedClass(container.stored("Documents/secret/m")) == "none")
        }
    }

    @Test("a writer streaming into a none file through lock and unlock loses nothing")
    func streamingWriter() throws {
        try withMountedContainer { container in
            let target = container.mounted("Documents/stream")
            let writer = try BackgroundProgram(["/usr/bin/python3", "-c", """
                import sys
                with open(sys.argv[1], "wb", buffering=0) as f:
                    for n in range(4000):
                        f.write(bytes([n % 251]) * 16384)
                print("done")
                """, target])
            for _ in 0..<10 {
                #expect(try containerfs(["lock", container.store]).status == 0)
                usleep(20_000)
                #expect(try containerfs(["unlock", container.store]).status == 0)
                usleep(20_000)
            }
            let result = writer.wait()
            #expect(result.status == 0 && result.stdout == "done\n", "\(result)")
            let data = try Data(contentsOf: URL(fileURLWithPath: container.stored("Documents/stream")))
            #expect(data.count == 4000 * 16384)
            var intact = true
            for n in stride(from: 0, to: 4000, by: 97) where data[n * 16384] != UInt8(n % 251) || data[n * 16384 + 16383] != UInt8(n % 251) {
                intact = false
            }
            #expect(intact)
        }
    }

    /// A mapping made before the lock: the kernel's pages are dropped at lock, so touching a
    /// page of a `complete` file faults to the daemon, which refuses it (SIGBUS, as an iOS
    /// app is killed); a `completeUnlessOpen` mapping keeps working.
    static let mmapProgram = #"""
    import mmap, os, subprocess, sys
    cfs, store, path = sys.argv[1:4]
    fd = os.open(path, os.O_RDONLY)
    m = mmap.mmap(fd, 8192, prot=mmap.PROT_READ)
    assert m[0:1] == b"z"
    subprocess.run([cfs, "lock", store], check=True, stdout=subprocess.DEVNULL)
    print(m[4096:4097].decode(), flush=True)
    """#

    @Test("a mapping made before the lock: complete faults (SIGBUS), completeUnlessOpen keeps working",
          arguments: [("complete", Int32(128 + SIGBUS)), ("completeUnlessOpen", 0)])
    func mapping(_ cls: String, _ status: Int32) throws {
        try withMountedContainer { container in
            let folder = container.mounted("Documents/\(cls)")
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: false)
            #expect(try runProgram(["setfattr", "-n", Self.attribute, "-v", cls, folder]).status == 0)
            try Data(repeating: UInt8(ascii: "z"), count: 8192).write(to: URL(fileURLWithPath: folder + "/mapped"))
            let program = container.base + "/mapping-test.py"
            try Self.mmapProgram.write(toFile: program, atomically: true, encoding: .utf8)
            let result = try runProgram(["sh", "-c", "python3 \"$0\" \"$@\"; echo status $?", program, containerfsBinary, container.store, folder + "/mapped"])
            #expect(result.stdout.hasSuffix("status \(status)\n"), "\(result)")
        }
    }

    /// `mknod` of a regular file is a creation like `open(O_CREAT)`: refused in a `complete`
    /// folder while locked, allowed in a `none` folder (issue 26 §2).
    static let mknodProgram = #"""
    import os, stat, subprocess, sys
    cfs, store, root = sys.argv[1:4]
    for cls in ["complete", "none"]:
        os.makedirs(f"{root}/Documents/{cls}")
        os.setxattr(f"{root}/Documents/{cls}", "user.containerfs.protection", cls.encode())
    subprocess.run([cfs, "lock", store], check=True, stdout=subprocess.DEVNULL)
    for cls in ["complete", "none"]:
        for way, make in [("mknod", lambda p: os.mknod(p, stat.S_IFREG | 0o644)),
                          ("creat", lambda p: os.close(os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)))]:
            try:
                make(f"{root}/Documents/{cls}/{way}")
                print(cls, way, "ok")
            except OSError as error:
                print(cls, way, os.strerror(error.errno))
    """#

    @Test("mknod of a regular file in a complete folder while locked is refused as open(O_CREAT) is")
    func mknodWhileLocked() throws {
        try withMountedContainer { container in
            let program = container.base + "/mknod.py"
            try Self.mknodProgram.write(toFile: program, atomically: true, encoding: .utf8)
            let result = try runProgram(["python3", program, containerfsBinary, container.store, container.mountpoint])
            #expect(result.status == 0, "\(result)")
            #expect(result.stdout == """
                complete mknod Operation not permitted
                complete creat Operation not permitted
                none mknod ok
                none creat ok

                """, "\(result)")
            #expect(!FileManager.default.fileExists(atPath: container.stored("Documents/complete/mknod")))
            let records = try container.waitForAudit(count: 2)
            #expect(records.contains { $0["operation"] as? String == "mknod" && $0["rule"] as? String == "protectedDataUnavailable" }, "\(records)")
        }
    }

    /// A class changed behind the mount while files are open: the daemon reads the class
    /// at every open, and again before it refuses a guarded descriptor, so the data is
    /// served as the class now says; no open fails with EIO because other descriptors of
    /// the file took the kernel's other I/O path (issue 26 §2, docs/protection.md).
    static let classChangeProgram = #"""
    import os, subprocess, sys
    cfs, store, root = sys.argv[1:4]
    def ctl(*words):
        subprocess.run([cfs, *words], check=True, stdout=subprocess.DEVNULL)
    def attempt(label, body):
        try:
            print(label, body())
        except OSError as error:
            print(label, os.strerror(error.errno))
    def read(name):
        with open(f"{root}/Documents/{name}", "rb") as f:
            return f.read().decode()
    for cls in ["complete", "none"]:
        os.makedirs(f"{root}/Documents/{cls}")
        os.setxattr(f"{root}/Documents/{cls}", "user.containerfs.protection", cls.encode())
        with open(f"{root}/Documents/{cls}/f", "w") as f:
            f.write(cls)
    # Downgraded while locked, a descriptor open on it (guarded, through the page cache).
    held = os.open(f"{root}/Documents/complete/f", os.O_RDONLY)
    os.pread(held, 100, 0)
    ctl("lock", store)
    attempt("locked open", lambda: read("complete/f"))
    attempt("locked held", lambda: os.pread(held, 100, 0).decode())
    ctl("protect", f"{store}/Documents/complete/f", "--class", "none")
    attempt("downgraded open", lambda: read("complete/f"))
    attempt("downgraded open again", lambda: read("complete/f"))
    attempt("downgraded held", lambda: os.pread(held, 100, 0).decode())
    os.close(held)
    ctl("unlock", store)
    # Upgraded while unlocked, a descriptor open on it (passed through, when root's).
    held = os.open(f"{root}/Documents/none/f", os.O_RDONLY)
    os.pread(held, 100, 0)
    ctl("protect", f"{store}/Documents/none/f", "--class", "complete")
    attempt("upgraded open", lambda: read("none/f"))
    ctl("lock", store)
    attempt("upgraded locked open", lambda: read("none/f"))
    os.close(held)
    attempt("upgraded locked open after close", lambda: read("none/f"))
    ctl("unlock", store)
    attempt("unlocked open", lambda: read("none/f"))
    """#

    @Test("a class changed from outside applies at the next open, deterministically, whatever is open", arguments: [nil, "cfs-alice"])
    func classChangedBehindTheMount(_ user: String?) throws {
        try withMountedContainer(user: user) { container in
            let folder = try makeTemporaryDirectory()
            defer { _ = try? runProgram(["rm", "-rf", folder]) }
            chmod(folder, 0o755)
            let program = folder + "/class-change.py"
            try Self.classChangeProgram.write(toFile: program, atomically: true, encoding: .utf8)
            chmod(program, 0o644)
            for round in 0..<3 {
                _ = try? runProgram(["sh", "-c", "rm -rf '\(container.mounted("Documents/complete"))' '\(container.mounted("Documents/none"))'"], user: user)
                let result = try runProgram(["/usr/bin/python3", program, containerfsBinary, container.store, container.mountpoint], user: user, directory: "/")
                #expect(result.status == 0, "\(result)")
                #expect(result.stdout == """
                    locked open Operation not permitted
                    locked held Operation not permitted
                    downgraded open complete
                    downgraded open again complete
                    downgraded held complete
                    upgraded open none
                    upgraded locked open Operation not permitted
                    upgraded locked open after close Operation not permitted
                    unlocked open none

                    """, "round \(round): \(result)")
            }
        }
    }

    @Test("run --locked: locked since boot, the denials counted in the summary")
    func runLocked() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        try Data("old".utf8).write(to: URL(fileURLWithPath: container.stored("Documents/old")))
        let result = try containerfs(["run", container.store, "--locked", "--no-confine", "--", "sh", "-c",
                                      "cat Documents/old; echo new > Documents/new; ls Documents/old; exit 3"])
        #expect(result.status == 3, "\(result)")
        #expect(result.stdout == "Documents/old\n", "\(result)")
        #expect(result.stderr.hasSuffix("2 operations denied (2 protected data unavailable while locked): see containerfs audit \(container.store)\n"),
                "\(result)")
        #expect(!FileManager.default.fileExists(atPath: container.stored("Documents/new")))
    }

    /// A client that connects to the control socket and says nothing holds up nobody:
    /// `lock`, `status` and `unlock` complete meanwhile; the socket goes at a clean unmount
    /// (issue #25).
    @Test func anIdleControlClientHoldsUpNobody() throws {
        let container = try MountedContainer()
        try container.mount()
        let socket = container.stored(".containerfs/control.sock")
        // Several idle clients, holding the socket until they are killed.
        let connected = container.base + "/connected"
        let idle = try BackgroundProgram(["/usr/bin/python3", "-c", """
            import socket, sys, time
            clients = []
            for _ in range(20):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                s.connect(sys.argv[1])
                clients.append(s)
            open(sys.argv[2], "w").close()
            time.sleep(60)
            """, socket, connected])
        defer { idle.process.terminate() }
        #expect(waitForFile(connected, seconds: 10), "the idle clients could not connect")
        let started = Date()
        let lock = try runProgram(["timeout", "-s", "KILL", "30", containerfsBinary, "lock", container.store])
        let status = try runProgram(["timeout", "-s", "KILL", "30", containerfsBinary, "status", container.store])
        let unlock = try runProgram(["timeout", "-s", "KILL", "30", containerfsBinary, "unlock", container.store])
        #expect(lock.status == 0 && lock.stdout.hasSuffix(": locked\n"), "\(lock)")
        #expect(status.status == 0 && status.stdout.contains("state: locked"), "\(status)")
        #expect(unlock.status == 0 && unlock.stdout.contains("unlocked"), "\(unlock)")
        #expect(Date().timeIntervalSince(started) < 60)
        idle.process.terminate()
        container.unmount()
        #expect(!FileManager.default.fileExists(atPath: socket), "the socket is left after a clean unmount")
    }

    @Test("status shows the state, mount point, daemon and capacity; --json; a complete file is held to the capacity")
    func status() throws {
        try withMountedContainer(options: ["locked"]) { container in
            let text = try containerfs(["status", container.store])
            #expect(text.status == 0 && text.stdout.contains("state: locked since boot") && text.stdout.contains(container.mountpoint), "\(text)")
            #expect(try containerfs(["unlock", container.store]).stdout.contains("unlocked"))
            #expect(try containerfs(["lock", container.store]).stdout.hasSuffix(": locked\n"))
            let json = try containerfs(["status", container.store, "--json"])
            let object = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any]
            #expect(object?["state"] as? String == "locked")
            #expect(object?["mountpoint"] as? String == container.mountpoint)
            #expect((object?["pid"] as? Int ?? 0) > 0)
            #expect(object?["capacity"] is NSNull, "no capacity: \(json)")
            // The capacity command shares the control socket with lock, unlock and status:
            // `capacity` on the live mount needs the daemon's `ok N` answer.
            let capacity = try containerfs(["capacity", container.store, "8M"])
            #expect(capacity.status == 0, "\(capacity)")
            let sized = try containerfs(["status", container.store])
            #expect(sized.stdout.contains("state: locked\n") && sized.stdout.hasSuffix("capacity: 8.0 MiB\n"), "\(sized)")
            let sizedJSON = try JSONSerialization.jsonObject(with: Data(try containerfs(["status", container.store, "--json"]).stdout.utf8)) as? [String: Any]
            #expect(sizedJSON?["capacity"] as? Int == 8 << 20)
            // A complete file's writes (guarded, never passed through) are held to the capacity too.
            #expect(try containerfs(["unlock", container.store]).status == 0)
            try FileManager.default.createDirectory(atPath: container.mounted("Documents/c"), withIntermediateDirectories: false)
            #expect(try containerfs(["protect", container.stored("Documents/c"), "--class", "complete"]).status == 0)
            let dd = try runProgram(["/usr/bin/dd", "if=/dev/zero", "of=" + container.mounted("Documents/c/big"), "bs=1M", "count=16"])
            #expect(dd.status != 0 && dd.stderr.contains("No space left"), "\(dd)")
            let stored = (try? FileManager.default.attributesOfItem(atPath: container.stored("Documents/c/big"))[.size] as? Int) ?? nil
            #expect((stored ?? Int.max) <= 8 << 20, "the store holds \(String(describing: stored)) bytes")
        }
    }

    /// Names are bytes (SPEC §2): a folder and a file an app named with bytes that are not
    /// UTF-8 are protected from outside as they are (before, "cannot open": the argument
    /// went through a String, which replaced the byte 0xFF).
    @Test("protect names a file whose name is not UTF-8")
    func protectTakesNamesAsBytes() throws {
        let container = try MountedContainer()
        let script = #"""
            odd=$(printf 'r\351\377'); mkdir "$1/Documents/d$odd"; : > "$1/Documents/d$odd/f$odd"
            "$2" protect "$1/Documents/d$odd" "$1/Documents/d$odd/f$odd" --class none || exit 1
            getfattr --only-values -n user.containerfs.protection "$1/Documents/d$odd"; echo
            getfattr --only-values -n user.containerfs.protection "$1/Documents/d$odd/f$odd"; echo
            """#
        let result = try runProgram(["sh", "-c", script, "sh", container.store, containerfsBinary])
        #expect(result.status == 0 && result.stdout == "none\nnone\n", "\(result)")
    }

    @Test("bad input: one line, exit 64 or 1, nothing changed")
    func badInput() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        let unknown = try containerfs(["protect", container.stored("Documents"), "--class", "secret"])
        #expect(unknown.status == 64 && unknown.stderr.split(separator: "\n").count == 1, "\(unknown)")
        let create = try containerfs(["create", container.base + "/other", "--bundle", container.base + "/Demo.app", "--protection", "secret"])
        #expect(create.status == 64 && create.stderr.split(separator: "\n").count == 1, "\(create)")
        #expect(!FileManager.default.fileExists(atPath: container.base + "/other"))
        for command in ["lock", "unlock", "status"] {
            let result = try containerfs([command, container.store])
            #expect(result.status == 1 && result.stderr.split(separator: "\n").count == 1 && result.stderr.contains("not mounted"), "\(result)")
        }
        let outside = try containerfs(["protect", "/etc/hostname", "--class", "none"])
        #expect(outside.status == 1 && outside.stderr.split(separator: "\n").count == 1 && outside.stderr.contains("not inside"), "\(outside)")
        let bundle = try containerfs(["protect", container.stored("Demo.app"), "--class", "complete"])
        #expect(bundle.status == 1 && bundle.stderr.split(separator: "\n").count == 1, "\(bundle)")
        // Inside: setfattr with a value that is no class is EINVAL; in the bundle EPERM, in the Inbox EACCES.
        try container.mount()
        try Data("doc".utf8).write(to: URL(fileURLWithPath: container.base + "/delivered.txt"))
        #expect(try containerfs(["deliver", container.store, container.base + "/delivered.txt"]).status == 0)
        try FileManager.default.createDirectory(atPath: container.mounted("Documents/d"), withIntermediateDirectories: false)
        for (path, value, message) in [("Documents/d", "secret", "Invalid argument"), ("Documents/d", "complete\\n", "Invalid argument"), ("Demo.app", "complete", "Operation not permitted"),
                                       ("Documents/Inbox/delivered.txt", "complete", "Permission denied")] {
            let result = try runProgram(["setfattr", "-n", Self.attribute, "-v", value, container.mounted(path)])
            #expect(result.status != 0 && result.stderr.contains(message), "\(path): \(result)")
        }
        let records = try container.waitForAudit(count: 2).map { "\($0["operation"] ?? "") \($0["rule"] ?? "")" }
        #expect(records.contains("setxattr bundleIsReadOnly") && records.contains("setxattr inboxIsReadDeleteOnly"), "\(records)")
    }

    @Test("create --protection sets the default class; protect from outside; backup and restore keep classes")
    func defaultClassAndBackup() throws {
        let base = try makeTemporaryDirectory()
        defer { _ = try? runProgram(["rm", "-rf", base]) }
        try FileManager.default.createDirectory(atPath: base + "/Demo.app", withIntermediateDirectories: true)
        try Data("app".utf8).write(to: URL(fileURLWithPath: base + "/Demo.app/app"))
        let created = try containerfs(["create", base + "/store", "--bundle", base + "/Demo.app", "--protection", "complete"])
        #expect(created.status == 0, "\(created)")
        try Data("secret".utf8).write(to: URL(fileURLWithPath: base + "/store/Documents/default"))
        try Data("plain".utf8).write(to: URL(fileURLWithPath: base + "/store/Documents/plain"))
        #expect(try containerfs(["protect", base + "/store/Documents/plain", "--class", "none"]).status == 0)
        let usage = try containerfs(["usage", base + "/store", "--json"])
        #expect(usage.stdout.contains("\"bytesByProtection\":{\"complete\":6,\"completeUnlessOpen\":0,\"completeUntilFirstUserAuthentication\":0,\"none\":5}"), "\(usage)")
        try FileManager.default.createDirectory(atPath: base + "/mnt", withIntermediateDirectories: true)
        #expect(try containerfs(["mount", base + "/store", base + "/mnt"]).status == 0)
        defer { _ = try? containerfs(["unmount", base + "/mnt"]) }
        #expect(try containerfs(["status", base + "/store", "--json"]).stdout.contains("\"defaultProtection\":\"complete\""))
        #expect(try containerfs(["lock", base + "/store"]).status == 0)
        #expect(FileManager.default.contents(atPath: base + "/mnt/Documents/default") == nil)
        #expect(FileManager.default.contents(atPath: base + "/mnt/Documents/plain") == Data("plain".utf8))
        // The bundle is the app's, not data: readable while locked.
        #expect(FileManager.default.contents(atPath: base + "/mnt/Demo.app/app") == Data("app".utf8))
        #expect(try containerfs(["unlock", base + "/store"]).status == 0)
        let backup = try containerfs(["backup", base + "/store", base + "/backup.tar"])
        #expect(backup.status == 0, "\(backup)")
        let restore = try containerfs(["restore", base + "/backup.tar", base + "/restored", "--bundle", base + "/Demo.app"])
        #expect(restore.status == 0, "\(restore)")
        #expect(try storedClass(base + "/restored/Documents/plain") == "none")
    }
}
