import CLinux
import Foundation
import Glibc
import Testing

/// Ways a program might try to get around SPEC §2: second names, symlinks into the bundle,
/// renames over the bundle or the structure, `O_RDONLY|O_TRUNC`, and the store's own files.
@Suite("Attacks")
struct AttackTests {
    /// An `EPERM` denial of `operation` on `paths`, by default the bundle's.
    static func bundleDenial(_ operation: String, _ paths: [String], _ areas: [String], rule: String = "bundleIsReadOnly") -> Denial {
        Denial(errno: EPERM, operation: operation, paths: paths, areas: areas, rule: rule)
    }

    @Test("a hard link from the bundle (EPERM) or the inbox (EACCES) is refused")
    func hardLinks() throws {
        try withMountedContainer(beforeMounting: { container in
            try putInStore(container, "Documents/Inbox/handed.txt", "handed\n")
        }) { container in
            let probe = try Probe(container)
            let m = container.mounted
            for (source, target, targetArea) in [
                ("Demo.app/Info.plist", "Documents/plist", "data"),
                ("Demo.app/res/data.txt", "Library/Caches/data.txt", "cache"),
                ("Demo.app/res/data.txt", "tmp/data.txt", "temporary"),
            ] {
                try probe.denied(
                    "link \(source) → \(target)",
                    Self.bundleDenial("link", [source, target], ["bundle", targetArea], rule: "linkWouldExposeReadOnlyFile"),
                    watching: [target]
                ) {
                    outcome(link(m(source), m(target)))
                }
            }
            // A hard link to the bundle's symlink would be a second name for it as well.
            try probe.denied(
                "link Demo.app/link",
                Self.bundleDenial(
                    "link", ["Demo.app/link", "Documents/link"], ["bundle", "data"],
                    rule: "linkWouldExposeReadOnlyFile"), watching: ["Documents/link"]
            ) {
                outcome(linkat(AT_FDCWD, m("Demo.app/link"), AT_FDCWD, m("Documents/link"), 0))
            }
            try probe.denied(
                "link from the inbox",
                Denial(
                    errno: EACCES, operation: "link", paths: ["Documents/Inbox/handed.txt", "Documents/handed.txt"],
                    areas: ["inbox", "data"], rule: "inboxIsReadDeleteOnly"),
                watching: ["Documents/handed.txt", "Documents/Inbox/handed.txt"]
            ) {
                outcome(link(m("Documents/Inbox/handed.txt"), m("Documents/handed.txt")))
            }
            // ln, as a program would do it.
            let ln = try runProgram(["ln", m("Demo.app/Info.plist"), m("Documents/ln-plist")])
            #expect(ln.status != 0 && ln.stderr.contains("Operation not permitted"), "ln: \(ln)")
            let records = try probe.takeAuditRecords(atLeast: 1)
            #expect(records.map { $0["process"] as? String } == ["ln"], "\(records)")
            #expect(status(container.stored("Demo.app/Info.plist"))?.st_nlink == 1)
            try probe.finish()
        }
    }

    @Test("writing through a relative symlink into the bundle is EPERM on the bundle's real path")
    func relativeSymlinkIntoTheBundle() throws {
        try withMountedContainer { container in
            let probe = try Probe(container)
            let m = container.mounted
            probe.allowed("symlink in Documents") { outcome(symlink("../Demo.app/Info.plist", m("Documents/evil"))) }
            probe.allowed("a chain of symlinks") { outcome(symlink("evil", m("Documents/chain"))) }
            probe.allowed("symlink to the bundle folder") { outcome(symlink("../Demo.app", m("Documents/app"))) }
            #expect(contents(m("Documents/evil")) == Scene.bundleFileContent, "reading through the link is allowed")
            try expectWritesThroughSymlinksDenied(probe, file: "Documents/evil", directory: "Documents/app")
            try expectWritesThroughSymlinksDenied(probe, file: "Documents/chain", directory: "Documents/app")

            // Removing the links removes only the links.
            let rm = try runProgram(["rm", "-rf", m("Documents/app"), m("Documents/evil"), m("Documents/chain")])
            #expect(rm.status == 0, "rm -rf the links: \(rm)")
            #expect(status(container.stored("Documents/app")) == nil)
            try probe.finish()
        }
    }

    @Test("writing through an absolute symlink to the mount's bundle is EPERM")
    func absoluteSymlinkIntoTheBundle() throws {
        try withMountedContainer { container in
            let probe = try Probe(container)
            let m = container.mounted
            probe.allowed("absolute symlink to a bundle file") { outcome(symlink(m("Demo.app/Info.plist"), m("Library/Caches/evil"))) }
            probe.allowed("absolute symlink to the bundle") { outcome(symlink(m("Demo.app"), m("tmp/app"))) }
            try expectWritesThroughSymlinksDenied(probe, file: "Library/Caches/evil", directory: "tmp/app")
            // The bundle's own symlink leads to a bundle file as well.
            try probe.denied("open O_WRONLY through Demo.app/link", Self.bundleDenial("open", ["Demo.app/Info.plist"], ["bundle"])) {
                withOpened(m("Demo.app/link"), O_WRONLY)
            }
            try probe.finish()
        }
    }

    /// Every write through `file` (a symlink to `Demo.app/Info.plist`) and into `directory`
    /// (a symlink to `Demo.app`) reaches the bundle's real path, and is denied there.
    func expectWritesThroughSymlinksDenied(
        _ probe: Probe, file: String, directory: String,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let m = probe.container.mounted
        let plist = ["Demo.app/Info.plist"]
        let watched = [file, directory]
        func denied(
            _ label: String, _ operation: String, _ paths: [String] = plist, _ areas: [String] = ["bundle"],
            _ call: () -> Int32
        ) throws {
            try probe.denied(
                "\(label) via \(file)", Self.bundleDenial(operation, paths, areas), watching: watched,
                sourceLocation: sourceLocation, call)
        }
        try denied("open O_WRONLY", "open") { withOpened(m(file), O_WRONLY) { writeAll($0, bytes("pwned")) } }
        try denied("open O_RDWR", "open") { withOpened(m(file), O_RDWR) }
        try denied("open O_APPEND", "open") { withOpened(m(file), O_WRONLY | O_APPEND) }
        try denied("open O_RDONLY|O_TRUNC", "open") { withOpened(m(file), O_RDONLY | O_TRUNC) }
        try denied("creat", "open") { withOpened(m(file), O_CREAT | O_WRONLY | O_TRUNC) }
        try denied("truncate", "truncate") { outcome(truncate(m(file), 0)) }
        try denied("chmod", "chmod") { outcome(chmod(m(file), 0o666)) }
        try denied("chown", "chown") { outcome(chown(m(file), 1000, 1000)) }
        try denied("utimensat", "utimens") { outcome(utimensat(AT_FDCWD, m(file), nil, 0)) }
        try denied("setxattr", "setxattr") { outcome(setxattr(m(file), "user.evil", "1", 1, 0)) }
        try denied("create in", "create", ["Demo.app/new"]) { withOpened(m(directory + "/new"), O_CREAT | O_WRONLY) }
        try denied("mkdir in", "mkdir", ["Demo.app/newdir"]) { outcome(mkdir(m(directory + "/newdir"), 0o755)) }
        try denied("unlink in", "unlink", ["Demo.app/res/data.txt"]) { outcome(unlink(m(directory + "/res/data.txt"))) }
        try denied("rename out of", "rename", ["Demo.app/Info.plist", "Documents/stolen"], ["bundle", "data"]) {
            outcome(rename(m(directory + "/Info.plist"), m("Documents/stolen")))
        }
        // A shell redirection and rm -rf through the link to the folder fail too.
        let shell = try runProgram(["sh", "-c", "echo pwned > \"$1\"", "sh", m(file)])
        #expect(shell.status != 0, "echo > \(file): \(shell)", sourceLocation: sourceLocation)
        _ = try probe.takeAuditRecords(atLeast: 1)
        let rm = try runProgram(["rm", "-rf", m(directory) + "/"])
        #expect(rm.status != 0, "rm -rf \(directory)/: \(rm)", sourceLocation: sourceLocation)
        _ = try probe.takeAuditRecords(atLeast: 1)
        try probe.expectBundleUnchanged("after rm -rf \(directory)/", sourceLocation: sourceLocation)
    }

    @Test("the bundle's own symlink cannot be changed, replaced or removed")
    func bundleSymlinkItself() throws {
        try withMountedContainer(beforeMounting: { container in
            try putInStore(container, "Documents/file", "file\n")
        }) { container in
            let probe = try Probe(container)
            let link = container.mounted("Demo.app/link")
            func denied(
                _ label: String, _ operation: String, _ paths: [String] = ["Demo.app/link"], _ areas: [String] = ["bundle"],
                _ call: () -> Int32
            ) throws {
                try probe.denied(label, Self.bundleDenial(operation, paths, areas), watching: ["Demo.app/link", "Documents/file"], call)
            }
            #expect(linkTarget(link) == "Info.plist")
            try denied("lchown", "chown") { outcome(lchown(link, 1000, 1000)) }
            try denied("utimensat without following", "utimens") {
                outcome(utimensat(AT_FDCWD, link, times(1_000_000_000), AT_SYMLINK_NOFOLLOW))
            }
            try denied("lsetxattr", "setxattr") { outcome(lsetxattr(link, "trusted.x", "1", 1, 0)) }
            try denied("unlink", "unlink") { outcome(unlink(link)) }
            try denied("rename over it", "rename", ["Documents/file", "Demo.app/link"], ["data", "bundle"]) {
                outcome(rename(container.mounted("Documents/file"), link))
            }
            try denied("rename it away", "rename", ["Demo.app/link", "Documents/link"], ["bundle", "data"]) {
                outcome(rename(link, container.mounted("Documents/link")))
            }
            let ln = try runProgram(["ln", "-sfn", "/etc/passwd", link])
            #expect(ln.status != 0, "ln -sfn over the bundle's symlink: \(ln)")
            _ = try probe.takeAuditRecords(atLeast: 1)
            #expect(linkTarget(container.stored("Demo.app/link")) == "Info.plist")
            try probe.finish()
        }
    }

    @Test("renames over the bundle or a standard directory, of the bundle or a standard directory, and exchanges with them are EPERM")
    func renamesOverTheBundleAndTheStructure() throws {
        try withMountedContainer(beforeMounting: { container in
            try putInStore(container, "Documents/Fake.app/Info.plist", "<plist>fake</plist>\n")
            try putInStore(container, "Documents/file", "file\n")
            try makeStoredDirectory(container, "Documents/dir")
            try makeStoredDirectory(container, "tmp/Documents")
        }) { container in
            let probe = try Probe(container)
            let m = container.mounted
            let watched = ["Documents/Fake.app", "Documents/file", "Documents/dir", "Documents", "Library", "Library/Caches", "Demo.app"]
            func denied(_ label: String, _ from: String, _ to: String, _ areas: [String], _ rule: String, exchange: Bool = false) throws {
                try probe.denied(label, Self.bundleDenial("rename", [from, to], areas, rule: rule), watching: watched + [to]) {
                    outcome(clinux_renameat2(AT_FDCWD, m(from), AT_FDCWD, m(to), exchange ? clinux_RENAME_EXCHANGE : 0))
                }
            }
            try denied("a folder over the bundle", "Documents/Fake.app", "Demo.app", ["data", "bundle"], "bundleIsReadOnly")
            try denied("a file over a bundle file", "Documents/file", "Demo.app/Info.plist", ["data", "bundle"], "bundleIsReadOnly")
            try denied("a folder over a bundle folder", "Documents/dir", "Demo.app/res", ["data", "bundle"], "bundleIsReadOnly")
            try denied("the bundle into Documents", "Demo.app", "Documents/Demo.app", ["bundle", "data"], "bundleIsReadOnly")
            try denied("the bundle to another name", "Demo.app", "Other.app", ["bundle", "structure"], "bundleIsReadOnly")
            try denied(
                "exchange a file with a bundle file", "Documents/file", "Demo.app/Info.plist", ["data", "bundle"], "bundleIsReadOnly",
                exchange: true)
            try denied(
                "exchange a folder with the bundle", "Documents/Fake.app", "Demo.app", ["data", "bundle"], "bundleIsReadOnly",
                exchange: true)
            try denied("a folder over Library/Caches", "Documents/dir", "Library/Caches", ["data", "structure"], "structureIsFixed")
            try denied("a folder over Documents/Inbox", "Documents/dir", "Documents/Inbox", ["data", "structure"], "structureIsFixed")
            try denied("a folder over Documents", "tmp/Documents", "Documents", ["temporary", "structure"], "structureIsFixed")
            try denied("Library/Caches away", "Library/Caches", "Documents/Caches", ["structure", "data"], "structureIsFixed")
            try denied("Documents to another name", "Documents", "Docs", ["structure", "structure"], "structureIsFixed")
            try denied(
                "exchange a folder with Library/Caches", "Documents/dir", "Library/Caches", ["data", "structure"], "structureIsFixed",
                exchange: true)
            try denied(
                "exchange Documents with Library", "Documents", "Library", ["structure", "structure"], "structureIsFixed", exchange: true)

            let mv = try runProgram(["mv", "-T", m("Documents/Fake.app"), m("Demo.app")])
            #expect(mv.status != 0, "mv -T over the bundle: \(mv)")
            _ = try probe.takeAuditRecords(atLeast: 1)
            for directory in [
                "Documents", "Documents/Inbox", "Library", "Library/Caches", "Library/Preferences", "Library/Application Support", "tmp",
            ] {
                #expect(status(container.stored(directory)).map { $0.st_mode & S_IFMT == S_IFDIR } == true, "\(directory) is gone")
            }
            #expect(contents(container.stored("Documents/Fake.app/Info.plist")) == bytes("<plist>fake</plist>\n"))
            try probe.finish()
        }
    }

    @Test("O_RDONLY|O_TRUNC on a bundle file is EPERM and truncates nothing")
    func readOnlyTruncate() throws {
        try withMountedContainer { container in
            let probe = try Probe(container)
            for file in ["Demo.app/Info.plist", "Demo.app/res/data.txt"] {
                try probe.denied("O_RDONLY|O_TRUNC \(file)", Self.bundleDenial("open", [file], ["bundle"]), watching: [file]) {
                    withOpened(container.mounted(file), O_RDONLY | O_TRUNC)
                }
                #expect(status(container.stored(file))?.st_size != 0)
            }
            let truncate = try runProgram(["truncate", "-s", "0", container.mounted("Demo.app/Info.plist")])
            #expect(truncate.status != 0, "truncate -s 0: \(truncate)")
            _ = try probe.takeAuditRecords(atLeast: 1)
            try probe.finish()
        }
    }

    @Test("a read-only descriptor of a bundle file cannot be reopened for writing through /proc/self/fd")
    func reopenThroughProc() throws {
        try withMountedContainer { container in
            let probe = try Probe(container)
            let plist = container.mounted("Demo.app/Info.plist")
            let readOnly = open(plist, O_RDONLY | O_CLOEXEC)
            let pathOnly = open(plist, clinux_O_PATH | O_CLOEXEC)
            #expect(readOnly >= 0 && pathOnly >= 0)
            defer {
                close(readOnly)
                close(pathOnly)
            }
            for fd in [readOnly, pathOnly] {
                for (flags, label) in [(O_WRONLY, "O_WRONLY"), (O_RDWR, "O_RDWR"), (O_RDONLY | O_TRUNC, "O_RDONLY|O_TRUNC")] {
                    try probe.denied(
                        "reopen \(fd == readOnly ? "a read" : "an O_PATH") descriptor \(label)",
                        Self.bundleDenial("open", ["Demo.app/Info.plist"], ["bundle"])
                    ) {
                        withOpened("/proc/self/fd/\(fd)", flags) { writeAll($0, bytes("pwned")) }
                    }
                }
            }
            try probe.finish()
        }
    }

    /// The daemon never follows a symlink while touching the store (SPEC §2): changing a
    /// symlink itself changes the link, never what it points to — here a bundle file, through
    /// the mount and directly in the store.
    @Test("changing a symlink itself never reaches its target")
    func symlinkItselfNotItsTarget() throws {
        try withMountedContainer { container in
            let probe = try Probe(container)
            let m = container.mounted
            let targets = [
                ("Documents/relative", "../Demo.app/Info.plist"),
                ("Documents/into-store", container.stored("Demo.app/Info.plist")),
                ("Documents/into-mount", m("Demo.app/Info.plist")),
            ]
            for (link, target) in targets {
                probe.allowed("symlink \(link)") { outcome(symlink(target, m(link))) }
                probe.allowed("lchown \(link)") { outcome(lchown(m(link), 1000, 1000)) }
                probe.allowed("utimensat without following \(link)") {
                    outcome(utimensat(AT_FDCWD, m(link), times(1_000_000_000), AT_SYMLINK_NOFOLLOW))
                }
                // A hard link without AT_SYMLINK_FOLLOW names the symlink, not its target.
                probe.allowed("linkat the symlink \(link)") { outcome(linkat(AT_FDCWD, m(link), AT_FDCWD, m(link + ".hard"), 0)) }
                #expect(linkTarget(container.stored(link + ".hard")) == target, "\(link).hard is not the symlink")
                probe.allowed("rename \(link)") { outcome(rename(m(link), m(link + ".moved"))) }
                #expect(status(container.stored(link + ".moved")).map { $0.st_mode & S_IFMT == S_IFLNK && $0.st_uid == 1000 } == true)
                #expect(status(container.stored(link + ".moved"))?.st_mtim.tv_sec == 1_000_000_000)
                try probe.expectBundleUnchanged("after changing \(link)")
            }
            // With AT_SYMLINK_FOLLOW the link's target is the source: the bundle file.
            try probe.denied(
                "linkat following a symlink into the bundle",
                Self.bundleDenial(
                    "link", ["Demo.app/Info.plist", "Documents/followed"], ["bundle", "data"], rule: "linkWouldExposeReadOnlyFile"),
                watching: ["Documents/followed"]
            ) {
                outcome(linkat(AT_FDCWD, m("Documents/relative.moved"), AT_FDCWD, m("Documents/followed"), AT_SYMLINK_FOLLOW))
            }
            #expect(status(container.stored("Demo.app/Info.plist"))?.st_nlink == 1)
            try probe.finish()
        }
    }

    @Test(".containerfs cannot be seen, reached, made or replaced through the mount")
    func stateFolderIsUnreachable() throws {
        try withMountedContainer(beforeMounting: { container in
            try putInStore(container, "Documents/file", "file\n")
            try makeStoredDirectory(container, "Documents/dir")
        }) { container in
            let probe = try Probe(container)
            let m = container.mounted
            let stateBefore = try runProgram(["ls", "-A", container.stored(".containerfs")]).stdout
            #expect(!stateBefore.isEmpty, "the store has its state folder")
            #expect(try !FileManager.default.contentsOfDirectory(atPath: container.mountpoint).contains(".containerfs"))
            let find = try runProgram(["find", container.mountpoint])
            #expect(find.status == 0 && !find.stdout.contains(".containerfs"), "find: \(find)")

            var info = stat()
            probe.fails("stat", with: ENOENT) { outcome(lstat(m(".containerfs"), &info)) }
            probe.fails("stat inside", with: ENOENT) { outcome(lstat(m(".containerfs/audit.log"), &info)) }
            probe.fails("open a file inside", with: ENOENT) { withOpened(m(".containerfs/audit.log"), O_RDONLY) }
            probe.fails("open it as a folder", with: ENOENT) { withOpened(m(".containerfs"), O_RDONLY | O_DIRECTORY) }
            probe.fails("write a file inside", with: ENOENT) { withOpened(m(".containerfs/audit.log"), O_WRONLY | O_APPEND) }
            probe.fails("rename it away", with: ENOENT) { outcome(rename(m(".containerfs"), m("Documents/state"))) }
            probe.fails("link from inside", with: ENOENT) { outcome(link(m(".containerfs/audit.log"), m("Documents/log"))) }
            probe.fails("unlink it", with: ENOENT) { outcome(unlink(m(".containerfs"))) }
            probe.fails("rmdir it", with: ENOENT) { outcome(rmdir(m(".containerfs"))) }
            probe.fails("through a symlink", with: ENOENT) {
                symlink("../.containerfs/audit.log", m("Documents/state-link"))
                return withOpened(m("Documents/state-link"), O_RDONLY)
            }

            func reserved(_ operation: String, _ paths: [String] = [".containerfs"], _ areas: [String] = ["structure"]) -> Denial {
                Denial(errno: EPERM, operation: operation, paths: paths, areas: areas, rule: "nameIsReserved")
            }
            try probe.denied("mkdir it", reserved("mkdir")) { outcome(mkdir(m(".containerfs"), 0o755)) }
            try probe.denied("create it", reserved("create")) { withOpened(m(".containerfs"), O_CREAT | O_WRONLY) }
            try probe.denied("symlink it", reserved("symlink")) { outcome(symlink("Documents", m(".containerfs"))) }
            try probe.denied(
                "rename a folder onto it", reserved("rename", ["Documents/dir", ".containerfs"], ["data", "structure"]),
                watching: ["Documents/dir"]
            ) {
                outcome(rename(m("Documents/dir"), m(".containerfs")))
            }
            try probe.denied(
                "rename a file onto it", reserved("rename", ["Documents/file", ".containerfs"], ["data", "structure"]),
                watching: ["Documents/file"]
            ) {
                outcome(rename(m("Documents/file"), m(".containerfs")))
            }
            try probe.denied(
                "link onto it", reserved("link", ["Documents/file", ".containerfs"], ["data", "structure"]),
                watching: ["Documents/file"]
            ) {
                outcome(link(m("Documents/file"), m(".containerfs")))
            }
            // The state folder is still the store's, and still works.
            // (The denials above started its audit log.)
            let stateAfter = try runProgram(["ls", "-A", container.stored(".containerfs")]).stdout
            #expect(
                Set(stateAfter.split(separator: "\n")).subtracting(["audit.log"])
                    == Set(stateBefore.split(separator: "\n")).subtracting(["audit.log"]),
                "the state folder changed: \(stateBefore) → \(stateAfter)")
            #expect(try containerfs(["audit", container.store]).status == 0)

            // The name means nothing elsewhere.
            probe.allowed("Documents/.containerfs is ordinary") { outcome(mkdir(m("Documents/.containerfs"), 0o755)) }
            probe.allowed("a file in it") {
                withOpened(m("Documents/.containerfs/audit.log"), O_CREAT | O_WRONLY) { writeAll($0, bytes("mine")) }
            }
            #expect(contents(container.stored("Documents/.containerfs/audit.log")) == bytes("mine"))
            try probe.finish()
        }
    }

    @Test("CACHEDIR.TAG is hidden in Library/Caches and tmp", arguments: [("Library/Caches", "cache"), ("tmp", "temporary")])
    func cacheTagIsHidden(_ directory: String, _ area: String) throws {
        try withMountedContainer(beforeMounting: { container in
            try putInStore(container, "\(directory)/file", "file\n")
        }) { container in
            let probe = try Probe(container)
            let m = container.mounted
            let tag = "\(directory)/CACHEDIR.TAG"
            let stored = nodeState(container.stored(tag))
            #expect(stored != nil, "the store tags \(directory)")
            #expect(try FileManager.default.contentsOfDirectory(atPath: m(directory)) == ["file"])
            var info = stat()
            probe.fails("stat", with: ENOENT) { outcome(lstat(m(tag), &info)) }
            probe.fails("open", with: ENOENT) { withOpened(m(tag), O_RDONLY) }
            probe.fails("unlink", with: ENOENT) { outcome(unlink(m(tag))) }
            probe.fails("rename away", with: ENOENT) { outcome(rename(m(tag), m("\(directory)/moved"))) }
            try probe.denied(
                "create", Denial(errno: EPERM, operation: "create", paths: [tag], areas: ["structure"], rule: "nameIsReserved")
            ) {
                withOpened(m(tag), O_CREAT | O_WRONLY)
            }
            try probe.denied(
                "rename onto",
                Denial(
                    errno: EPERM, operation: "rename", paths: ["\(directory)/file", tag], areas: [area, "structure"],
                    rule: "nameIsReserved"), watching: ["\(directory)/file"]
            ) {
                outcome(rename(m("\(directory)/file"), m(tag)))
            }
            #expect(nodeState(container.stored(tag)) == stored, "the store's tag changed")
            // Deeper down, or elsewhere, the name is ordinary.
            probe.allowed("in a subfolder") {
                outcome(mkdir(m("\(directory)/sub"), 0o755)) == 0
                    ? withOpened(m("\(directory)/sub/CACHEDIR.TAG"), O_CREAT | O_WRONLY) : errno
            }
            probe.allowed("in Documents") { withOpened(m("Documents/CACHEDIR.TAG"), O_CREAT | O_WRONLY) }
            probe.allowed("a lookalike beside it") { withOpened(m("\(directory)/CACHEDIR.tag"), O_CREAT | O_WRONLY) }
            #expect(nodeState(container.stored(tag)) == stored, "the store's tag changed")
            try probe.finish()
        }
    }

    /// The control socket is in the store, which its owner can serve with the mount lock
    /// held: a "daemon" of theirs answering root's `power-cut` with terminal escapes (here
    /// one that sets the window title and one that clears the screen) must not get them to
    /// root's terminal. The answer that cannot be read is shown as text, controls escaped.
    @Test func aPowerCutAnswerFromTheStoreOwnersSocketIsShownAsText() throws {
        let container = try MountedContainer()
        let result = try runProgram(["/usr/bin/python3", "-c", """
            import fcntl, os, socket, subprocess, sys, threading
            state, binary, store = sys.argv[1:4]
            lock = open(state + "/mount.lock", "w")
            fcntl.flock(lock, fcntl.LOCK_EX)
            lock.write(f"{os.getpid()}\\n/nowhere\\n"); lock.flush()
            server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            server.bind(state + "/control.sock"); server.listen(8)
            def serve():
                client, _ = server.accept()
                client.recv(4096)
                client.send(b"cut \\x1b]0;owned\\x07\\x1b[2J\\n1 2 3 4")
            threading.Thread(target=serve, daemon=True).start()
            done = subprocess.run([binary, "power-cut", store], capture_output=True, timeout=60)
            sys.stdout.buffer.write(done.stderr)
            print(done.returncode)
            """, container.stored(".containerfs"), containerfsBinary, container.store])
        #expect(result.status == 0, "\(result)")
        #expect(!result.stdout.contains("\u{1B}"), "a raw escape reached root's terminal: \(result.stdout.debugDescription)")
        // One line (the answer's newline escaped too), then the exit status.
        let lines = result.stdout.split(separator: "\n", omittingEmptySubsequences: false)
        #expect(lines.count == 3 && lines[1] == "1" && lines[2] == "", "\(result.stdout.debugDescription)")
        #expect(lines[0].hasPrefix("containerfs: the daemon of \(container.store) sent a report that cannot be read: "), "\(result.stdout.debugDescription)")
        #expect(lines[0].contains("]0;owned"), "\(result.stdout.debugDescription)")
    }
}
