import Foundation
import Glibc
import Testing

/// The mount works for an ordinary user through fusermount3; nobody else can enter it
/// unless `allow_other` is asked for; files made through a mount belong to their caller.
@Suite("Users")
struct UserTests {
    static let alice = "cfs-alice"
    static let bob = "cfs-bob"

    @Test func ordinaryUserMountsUsesAndUnmountsTheirContainer() throws {
        try requireUsers()
        let alice = try account(Self.alice)
        let container = try MountedContainer(user: Self.alice)
        // Root cannot stat alice's mount, so the harness's mount() and unmount(), which check
        // from root's side, cannot be used: mount as alice, and clear it from root at the end.
        defer {
            if mountInfoLine(container.mountpoint) != nil { _ = try? containerfs(["unmount", container.mountpoint], user: Self.alice) }
            if mountInfoLine(container.mountpoint) != nil { _ = try? runProgram(["fusermount3", "-uz", container.mountpoint]) }
        }
        let bundleBefore = try treeDigest(container.stored("Demo.app"))
        let mounted = try containerfs(["mount", container.store, container.mountpoint], user: Self.alice)
        try #require(mounted.status == 0, "mount as alice: \(mounted)")

        // The mount and its daemon are alice's, not root's.
        let entry = try #require(mountInfoLine(container.mountpoint), "no mountinfo line for \(container.mountpoint)")
        #expect(entry.contains("user_id=\(alice.uid),"), "mount owner: \(entry)")
        let lock = try String(contentsOfFile: container.stored(".containerfs/mount.lock"), encoding: .utf8)
        let daemon = try #require(lock.split(separator: "\n").first.flatMap { pid_t($0) })
        #expect(processUID(daemon) == alice.uid, "the daemon runs as alice")

        let results = try probe(as: Self.alice, root: container.mountpoint, """
            check("write", lambda: write(M + "/Documents/alice.txt", b"from alice\\n"))
            check("append", lambda: write(M + "/Documents/alice.txt", b"more\\n", os.O_WRONLY | os.O_APPEND))
            check("read", lambda: read(M + "/Documents/alice.txt"))
            check("mkdir", lambda: os.mkdir(M + "/Documents/folder"))
            check("rename", lambda: os.rename(M + "/Documents/alice.txt", M + "/Documents/folder/alice.txt"))
            check("reread", lambda: read(M + "/Documents/folder/alice.txt"))
            check("symlink", lambda: os.symlink("alice.txt", M + "/Documents/folder/link"))
            check("list", lambda: ",".join(sorted(os.listdir(M + "/Documents/folder"))))
            check("cache", lambda: write(M + "/Library/Caches/cached", b"c"))
            check("tmp", lambda: write(M + "/tmp/scratch", b"t"))
            check("tmp-unlink", lambda: os.unlink(M + "/tmp/scratch"))
            check("bundle-read", lambda: read(M + "/Demo.app/Info.plist"))
            check("bundle-open-write", lambda: os.open(M + "/Demo.app/Info.plist", os.O_WRONLY))
            check("bundle-truncate", lambda: os.truncate(M + "/Demo.app/Info.plist", 0))
            check("bundle-create", lambda: write(M + "/Demo.app/new", b"x"))
            check("bundle-mkdir", lambda: os.mkdir(M + "/Demo.app/res/new"))
            check("bundle-unlink", lambda: os.unlink(M + "/Demo.app/res/data.txt"))
            check("bundle-chmod", lambda: os.chmod(M + "/Demo.app/Info.plist", 0o666))
            check("structure-rmdir", lambda: os.rmdir(M + "/tmp"))
            check("inbox-create", lambda: write(M + "/Documents/Inbox/x", b"x"))
            check("state-folder", lambda: os.stat(M + "/.containerfs"))
            """)
        #expect(results["write"] == "ok")
        #expect(results["append"] == "ok")
        #expect(results["read"] == "from alice\nmore\n")
        #expect(results["mkdir"] == "ok")
        #expect(results["rename"] == "ok")
        #expect(results["reread"] == "from alice\nmore\n")
        #expect(results["symlink"] == "ok")
        #expect(results["list"] == "alice.txt,link")
        #expect(results["cache"] == "ok")
        #expect(results["tmp"] == "ok")
        #expect(results["tmp-unlink"] == "ok")
        #expect(results["bundle-read"] == "<plist>demo</plist>\n")
        // Alice owns the bundle's files in her store, so only the policy stops her: EPERM, as root.
        for denied in ["bundle-open-write", "bundle-truncate", "bundle-create", "bundle-mkdir", "bundle-unlink", "bundle-chmod", "structure-rmdir"] {
            #expect(results[denied] == "EPERM", "\(denied): \(results[denied] ?? "no result")")
        }
        #expect(results["inbox-create"] == "EACCES")
        #expect(results["state-folder"] == "ENOENT")

        // What she made is hers in the store.
        for path in ["Documents/folder/alice.txt", "Documents/folder", "Documents/folder/link", "Library/Caches/cached"] {
            var info = stat()
            #expect(lstat(container.stored(path), &info) == 0, "\(path) is in the store")
            #expect(info.st_uid == alice.uid && info.st_gid == alice.gid, "\(path) belongs to \(info.st_uid):\(info.st_gid)")
        }
        #expect(try treeDigest(container.stored("Demo.app")) == bundleBefore)

        // Nobody else gets in: not bob, not even root. (Bob can reach the folder around it.)
        try expectReachable(container, by: Self.bob)
        let bobs = try probe(as: Self.bob, root: container.mountpoint, """
            check("stat", lambda: os.stat(M))
            check("list", lambda: os.listdir(M))
            check("read", lambda: read(M + "/Documents/folder/alice.txt"))
            """)
        #expect(bobs == ["stat": "EACCES", "list": "EACCES", "read": "EACCES"])
        let ls = try runProgram(["ls", container.mountpoint], user: Self.bob)
        #expect(ls.status != 0 && ls.stderr.contains("Permission denied"), "\(ls)")
        #expect(errnoOfStat(container.mountpoint) == EACCES, "root is another user too")

        // She unmounts it herself, even from a folder she cannot enter (as after `sudo -u`
        // in root's home): fusermount3 needs no working folder.
        let closed = try makeTemporaryDirectory()  // root's, mode 0700
        defer { rmdir(closed) }
        let unmounted = try runProgram([containerfsBinary, "unmount", container.mountpoint], user: Self.alice, directory: closed)
        #expect(unmounted.status == 0, "\(unmounted)")
        #expect(mountInfoLine(container.mountpoint) == nil, "the mount is gone")
        #expect(errnoOfStat(container.mountpoint) == 0, "the mount point is a plain folder again")
    }

    @Test func rootMountIsClosedToOtherUsersByDefault() throws {
        try requireUsers()
        try withMountedContainer { container in
            try openToEveryone(container)
            for user in [Self.alice, Self.bob] {
                let results = try probe(as: user, root: container.mountpoint, """
                    check("stat", lambda: os.stat(M))
                    check("list", lambda: os.listdir(M))
                    check("read", lambda: read(M + "/Demo.app/Info.plist"))
                    """)
                #expect(results == ["stat": "EACCES", "list": "EACCES", "read": "EACCES"], "\(user): \(results)")
            }
        }
    }

    @Test func withAllowOtherUsersComeInAndOwnWhatTheyCreate() throws {
        try requireUsers()
        let alice = try account(Self.alice)
        try withMountedContainer(options: ["allow_other"]) { container in
            try openToEveryone(container)
            // A folder everyone may write in, made through the mount by root.
            #expect(mkdir(container.mounted("Documents/shared"), 0o777) == 0)
            #expect(chmod(container.mounted("Documents/shared"), 0o777) == 0)

            let results = try probe(as: Self.alice, root: container.mountpoint, """
                check("stat", lambda: os.stat(M) and None)
                check("bundle-read", lambda: read(M + "/Demo.app/Info.plist"))
                check("write", lambda: write(M + "/Documents/shared/alice.txt", b"from alice\\n"))
                check("mkdir", lambda: os.mkdir(M + "/Documents/shared/folder"))
                check("symlink", lambda: os.symlink("alice.txt", M + "/Documents/shared/link"))
                check("fifo", lambda: os.mkfifo(M + "/Documents/shared/fifo"))
                check("in-root-folder", lambda: write(M + "/Documents/not-hers.txt", b"x"))
                """)
            #expect(results["stat"] == "ok")
            #expect(results["bundle-read"] == "<plist>demo</plist>\n")
            #expect(results["write"] == "ok")
            #expect(results["mkdir"] == "ok")
            #expect(results["symlink"] == "ok")
            #expect(results["fifo"] == "ok")
            // Permission bits still hold: Documents is root's, mode 755.
            #expect(results["in-root-folder"] == "EACCES")

            for path in ["Documents/shared/alice.txt", "Documents/shared/folder", "Documents/shared/link", "Documents/shared/fifo"] {
                var info = stat()
                #expect(lstat(container.stored(path), &info) == 0, "\(path) is in the store")
                #expect(info.st_uid == alice.uid && info.st_gid == alice.gid,
                        "\(path) belongs to \(info.st_uid):\(info.st_gid), not to alice (\(alice.uid):\(alice.gid))")
            }

            let bobs = try probe(as: Self.bob, root: container.mountpoint, """
                check("read", lambda: read(M + "/Documents/shared/alice.txt"))
                check("write", lambda: os.open(M + "/Documents/shared/alice.txt", os.O_WRONLY))
                """)
            #expect(bobs == ["read": "from alice\n", "write": "EACCES"])
        }
    }

    /// An ordinary user's write, truncate, truncating open or chown of a set-ID file clears
    /// set-user-ID (and set-group-ID, the file being group-executable), root's write does
    /// not (CAP_FSETID): the same modes as the same calls on native ext4. Writes pass
    /// through to the store, reach the daemon, or go through the kernel's writeback cache.
    @Test(arguments: [[], ["nopassthrough"], ["writeback"]])
    func changingASetIDFileClearsItsSetIDBitsAsNativeDoes(options: [String]) throws {
        try requireUsers()
        let alice = try account(Self.alice)
        try withMountedContainer(options: ["allow_other"] + options) { container in
            try openToEveryone(container)
            let native = container.base + "/native"
            let ways = ["write", "append", "truncate", "open-trunc", "chown", "root-write"]
            var modes: [String: [String: mode_t]] = [:]
            for (label, folder, stored) in [("native", native, native), ("mount", container.mounted("Documents/shared"), container.stored("Documents/shared"))] {
                #expect(mkdir(folder, 0o777) == 0 && chmod(folder, 0o777) == 0)
                for way in ways {
                    let path = folder + "/" + way
                    let fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0o644)
                    #expect(fd >= 0 && write(fd, "data", 4) == 4 && close(fd) == 0)
                    #expect(chown(path, alice.uid, alice.gid) == 0)
                    #expect(chmod(path, 0o6777) == 0)
                }
                let results = try probe(as: Self.alice, root: folder, """
                    check("write", lambda: write(M + "/write", b"x", os.O_WRONLY))
                    check("append", lambda: write(M + "/append", b"x", os.O_WRONLY | os.O_APPEND))
                    check("truncate", lambda: os.truncate(M + "/truncate", 1))
                    check("open-trunc", lambda: os.close(os.open(M + "/open-trunc", os.O_WRONLY | os.O_TRUNC)))
                    check("chown", lambda: os.chown(M + "/chown", os.getuid(), os.getgid()))
                    """)
                #expect(results == ["write": "ok", "append": "ok", "truncate": "ok", "open-trunc": "ok", "chown": "ok"], "\(label): \(results)")
                let fd = open(folder + "/root-write", O_WRONLY)
                #expect(fd >= 0 && write(fd, "x", 1) == 1 && close(fd) == 0)
                for way in ways {
                    var info = stat()
                    #expect(stat(stored + "/" + way, &info) == 0)
                    modes[label, default: [:]][way] = info.st_mode & 0o7777
                }
            }
            #expect(modes["native"]?["write"] == 0o777, "native clears both bits: \(modes)")
            #expect(modes["native"]?["root-write"] == 0o6777, "native keeps them for root: \(modes)")
            #expect(modes["mount"] == modes["native"])
        }
    }
}

extension UserTests {
    /// An ordinary user's `power-loss` daemon may not read a file its owner made write-only
    /// (mode 0200): a change that needs the file's durable bytes saved is refused with `EIO`
    /// rather than let through untracked, an append (which needs nothing saved) goes ahead,
    /// and the cut puts the durable content back.
    @Test func aPowerLossMountRefusesAChangeItCannotRecord() throws {
        try requireUsers()
        let container = try MountedContainer(user: Self.alice)
        defer {
            if mountInfoLine(container.mountpoint) != nil { _ = try? containerfs(["unmount", container.mountpoint], user: Self.alice) }
            if mountInfoLine(container.mountpoint) != nil { _ = try? runProgram(["fusermount3", "-uz", container.mountpoint]) }
        }
        let mounted = try containerfs(["mount", "-o", "power-loss", container.store, container.mountpoint], user: Self.alice)
        try #require(mounted.status == 0, "mount as alice: \(mounted)")
        let script = #"""
            import errno, os, sys
            path = sys.argv[1] + "/Documents/secret"
            with open(path, "w") as f: f.write("durable")
            os.chmod(path, 0o200)
            for name, flags in [(path, os.O_WRONLY), (os.path.dirname(path), os.O_RDONLY)]:
                fd = os.open(name, flags); os.fsync(fd); os.close(fd)
            def attempt(label, flags, data):
                try:
                    fd = os.open(path, flags)
                    if data: os.write(fd, data)
                    os.close(fd)
                    print(label, "ok")
                except OSError as e:
                    print(label, errno.errorcode[e.errno])
            attempt("append", os.O_WRONLY | os.O_APPEND, b" and more")
            attempt("rewrite", os.O_WRONLY, b"X")
            attempt("truncate", os.O_WRONLY | os.O_TRUNC, None)
            """#
        let result = try runProgram(["/usr/bin/python3", "-c", script, container.mountpoint], user: Self.alice, directory: "/")
        #expect(result.status == 0, "\(result)")
        #expect(result.stdout == "append ok\nrewrite EIO\ntruncate EIO\n", "\(result)")
        let cut = try containerfs(["power-cut", container.store], user: Self.alice)
        #expect(cut.status == 0, "\(cut)")
        #expect(cut.stdout.hasPrefix("power cut: dropped 1 file") && !cut.stdout.contains("could not"), "\(cut)")
        #expect((try? String(contentsOfFile: container.stored("Documents/secret"), encoding: .utf8)) == "durable")
        var info = stat()
        #expect(lstat(container.stored("Documents/secret"), &info) == 0 && info.st_mode & 0o7777 == 0o200)
    }
}

extension UserTests {
    /// An ordinary user's daemon is refused what the folder's owner refused itself: after a
    /// program made folders read-only (0555), closed (000) or write-only (0300), the cut
    /// must still put their durable names back and empty the new files it finds by its walk,
    /// then leave the folders' modes as the program set them.
    @Test func aPowerCutRestoresFoldersTheProgramLockedUp() throws {
        try requireUsers()
        let container = try MountedContainer(user: Self.alice)
        defer {
            if mountInfoLine(container.mountpoint) != nil { _ = try? containerfs(["unmount", container.mountpoint], user: Self.alice) }
            if mountInfoLine(container.mountpoint) != nil { _ = try? runProgram(["fusermount3", "-uz", container.mountpoint]) }
        }
        let mounted = try containerfs(["mount", "-o", "power-loss", container.store, container.mountpoint], user: Self.alice)
        try #require(mounted.status == 0, "mount as alice: \(mounted)")
        let script = #"""
            import os, sys
            d = sys.argv[1] + "/Documents"
            def sync(path):
                fd = os.open(path, os.O_RDONLY); os.fsync(fd); os.close(fd)
            for folder in ["ro", "closed", "wo"]: os.mkdir(f"{d}/{folder}")
            with open(f"{d}/ro/durable", "w") as f: f.write("durable")
            sync(f"{d}/ro/durable")
            for folder in ["ro", "closed", "wo", "."]: sync(f"{d}/{folder}")
            with open(f"{d}/ro/new", "w") as f: f.write("a name never durable")
            os.unlink(f"{d}/ro/durable")
            os.chmod(f"{d}/ro", 0o555)
            for folder, mode in [("closed", 0o000), ("wo", 0o300)]:
                with open(f"{d}/{folder}/new", "w") as f: f.write("never synced")
                sync(f"{d}/{folder}")
                os.chmod(f"{d}/{folder}", mode)
            """#
        let result = try runProgram(["/usr/bin/python3", "-c", script, container.mountpoint], user: Self.alice, directory: "/")
        #expect(result.status == 0, "\(result)")
        let cut = try containerfs(["power-cut", container.store], user: Self.alice)
        #expect(cut.status == 0, "\(cut)")
        let read = { (relative: String) in (try? String(contentsOfFile: container.stored("Documents/" + relative), encoding: .utf8)) }
        #expect(read("ro/durable") == "durable")
        #expect(read("ro/new") == nil)
        #expect(read("closed/new") == "")
        #expect(read("wo/new") == "")
        for (folder, mode) in [("ro", 0o555), ("closed", 0o000), ("wo", 0o300)] as [(String, mode_t)] {
            var info = stat()
            #expect(lstat(container.stored("Documents/" + folder), &info) == 0 && info.st_mode & 0o7777 == mode, "\(folder): \(String(info.st_mode & 0o7777, radix: 8))")
        }
    }
}

extension UserTests {
    /// A durable read-only folder (0555) renamed, then emptied and removed: the cut makes it
    /// again and must put its durable file back in it before giving it its mode, which an
    /// ordinary user's daemon could not do after.
    @Test func aReadOnlyFolderTheCutMakesAgainGetsItsFilesBack() throws {
        try requireUsers()
        let container = try MountedContainer(user: Self.alice)
        defer {
            if mountInfoLine(container.mountpoint) != nil { _ = try? containerfs(["unmount", container.mountpoint], user: Self.alice) }
            if mountInfoLine(container.mountpoint) != nil { _ = try? runProgram(["fusermount3", "-uz", container.mountpoint]) }
        }
        let mounted = try containerfs(["mount", "-o", "power-loss", container.store, container.mountpoint], user: Self.alice)
        try #require(mounted.status == 0, "mount as alice: \(mounted)")
        let script = #"""
            import os, sys
            d = sys.argv[1] + "/Documents"
            def sync(path):
                fd = os.open(path, os.O_RDONLY); os.fsync(fd); os.close(fd)
            os.mkdir(f"{d}/kept")
            with open(f"{d}/kept/file", "w") as f: f.write("durable")
            for path in ["kept/file", "kept"]: sync(f"{d}/{path}")
            os.chmod(f"{d}/kept", 0o555)
            sync(d)
            os.rename(f"{d}/kept", f"{d}/moved")
            os.chmod(f"{d}/moved", 0o755)
            os.unlink(f"{d}/moved/file")
            os.rmdir(f"{d}/moved")
            """#
        let result = try runProgram(["/usr/bin/python3", "-c", script, container.mountpoint], user: Self.alice, directory: "/")
        #expect(result.status == 0, "\(result)")
        let cut = try containerfs(["power-cut", container.store], user: Self.alice)
        #expect(cut.status == 0, "\(cut)")
        #expect((try? String(contentsOfFile: container.stored("Documents/kept/file"), encoding: .utf8)) == "durable")
        var info = stat()
        #expect(lstat(container.stored("Documents/kept"), &info) == 0 && info.st_mode & 0o7777 == 0o555, "\(String(info.st_mode & 0o7777, radix: 8))")
    }
}

/// Lets everyone reach the mount point's parent folder (mkdtemp made it 0700), so that
/// what stops another user is the mount itself; checks that it does reach.
private func openToEveryone(_ container: MountedContainer) throws {
    guard chmod(container.base, 0o755) == 0 else { throw TestFailure("chmod \(container.base) failed") }
    for user in [UserTests.alice, UserTests.bob] { try expectReachable(container, by: user) }
}

/// `user` can list the folder holding the mount point: a refusal then comes from the mount.
private func expectReachable(_ container: MountedContainer, by user: String) throws {
    let listed = try runProgram(["ls", container.base], user: user)
    guard listed.status == 0, listed.stdout.contains("mnt") else {
        throw TestFailure("\(user) cannot list \(container.base): \(listed)")
    }
}

/// A user's ids.
private struct Account {
    let uid: uid_t
    let gid: gid_t
}

private func account(_ name: String) throws -> Account {
    guard let entry = getpwnam(name) else { throw TestFailure("user \(name) does not exist: run scripts/install-deps.sh") }
    return Account(uid: entry.pointee.pw_uid, gid: entry.pointee.pw_gid)
}

/// The test users exist, /dev/fuse is open to them, and they can run the binary.
private func requireUsers() throws {
    for user in [UserTests.alice, UserTests.bob] { _ = try account(user) }
    var info = stat()
    guard stat("/dev/fuse", &info) == 0, info.st_mode & 0o006 == 0o006 else {
        throw TestFailure("/dev/fuse is not open to ordinary users (mode 0666 needed): run scripts/install-deps.sh")
    }
    let reach = try runProgram(["test", "-x", containerfsBinary], user: UserTests.alice)
    guard reach.status == 0 else {
        throw TestFailure("\(containerfsBinary) cannot be run by \(UserTests.alice): every folder above it must be world-searchable")
    }
}

/// Runs python `code` as `user` with `M` the mount point and `check(label, fn)` recording
/// what `fn` returned ("ok" for nothing) or the errno name it failed with.
func probe(as user: String, root: String, _ code: String) throws -> [String: String] {
    let program = """
        import errno, json, os, sys
        M = sys.argv[1]
        results = {}
        def check(label, fn):
            try:
                value = fn()
                results[label] = "ok" if value is None or isinstance(value, int) else str(value)
            except OSError as error:
                results[label] = errno.errorcode.get(error.errno, str(error.errno))
        def write(path, data, flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC):
            fd = os.open(path, flags, 0o644)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        def read(path):
            with open(path, "rb") as f:
                return f.read().decode()

        """ + code + "\nprint(json.dumps(results))\n"
    let result = try runProgram(["/usr/bin/python3", "-c", program, root], user: user, directory: "/")
    guard result.status == 0, let data = result.stdout.data(using: .utf8),
          let decoded = try? JSONSerialization.jsonObject(with: data) as? [String: String] else {
        throw TestFailure("probe as \(user) failed: \(result)")
    }
    return decoded
}

/// The line of /proc/self/mountinfo for `mountpoint`.
private func mountInfoLine(_ mountpoint: String) -> String? {
    let text = (try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8)) ?? ""
    return text.split(separator: "\n").last { $0.split(separator: " ").dropFirst(4).first == Substring(mountpoint) }.map(String.init)
}

/// The real uid of a running process.
private func processUID(_ pid: pid_t) -> uid_t? {
    guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
          let line = status.split(separator: "\n").first(where: { $0.hasPrefix("Uid:") }) else { return nil }
    return line.split(whereSeparator: { $0 == "\t" || $0 == " " }).dropFirst().first.flatMap { uid_t($0) }
}

private func errnoOfStat(_ path: String) -> Int32 {
    var info = stat()
    return errnoOf { stat(path, &info) }
}
