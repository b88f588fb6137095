import CLinux
import Foundation
import Glibc
import Testing

/// `Documents/Inbox` (SPEC §1, §2): files handed over from outside are read, deleted or
/// moved out into a writable area, where they can be edited; nothing gets in or changes.
@Suite("Inbox")
struct InboxTests {
    /// What another app handed over, put in the store before mounting: nothing can create
    /// in the inbox through the mount.
    static func deliver(_ container: MountedContainer) throws {
        try putInStore(container, "Documents/Inbox/report.txt", "report v1\n")
        try putInStore(container, "Documents/Inbox/photos/a.jpg", "A")
        try putInStore(container, "Documents/Inbox/photos/sub/b.jpg", "B")
        try putInStore(container, "Documents/Inbox/old.txt", "old\n")
        try putInStore(container, "Documents/Inbox/trash/x", "x")
        try putInStore(container, "Documents/Inbox/trash/y/z", "z")
        try makeStoredDirectory(container, "Documents/Inbox/empty")
        for name in ["to-caches", "to-tmp", "to-preferences", "over", "evil", "evil2", "evil3", "swap", "linked"] {
            try putInStore(container, "Documents/Inbox/\(name).txt", "\(name)\n")
        }
        _ = setxattr(container.stored("Documents/Inbox/report.txt"), "user.from", "mail", 4, 0)
        try putInStore(container, "Documents/mine.txt", "mine\n")
        try putInStore(container, "Documents/existing.txt", "existing\n")
        try makeStoredDirectory(container, "Documents/folder/inner")
        try putInStore(container, "Library/Caches/cached.txt", "cached\n")
        try putInStore(container, "tmp/temp.txt", "temp\n")
    }

    /// The inbox's denial of `operation` on `paths`.
    static func inboxDenial(_ operation: String, _ paths: [String], _ areas: [String]) -> Denial {
        Denial(errno: EACCES, operation: operation, paths: paths, areas: areas, rule: "inboxIsReadDeleteOnly")
    }

    @Test("handed-over files and folders can be read, listed and deleted")
    func readAndDelete() throws {
        try withMountedContainer(beforeMounting: Self.deliver) { container in
            let probe = try Probe(container)
            let m = container.mounted
            #expect(contents(m("Documents/Inbox/report.txt")) == bytes("report v1\n"))
            #expect(contents(m("Documents/Inbox/photos/sub/b.jpg")) == bytes("B"))
            #expect(extendedAttribute(m("Documents/Inbox/report.txt"), "user.from") == bytes("mail"))
            let listed = try FileManager.default.contentsOfDirectory(atPath: m("Documents/Inbox"))
            #expect(Set(listed).isSuperset(of: ["report.txt", "photos", "old.txt", "trash", "empty"]))

            probe.allowed("unlink a file") { outcome(unlink(m("Documents/Inbox/old.txt"))) }
            probe.allowed("rmdir an empty folder") { outcome(rmdir(m("Documents/Inbox/empty"))) }
            let removed = try runProgram(["rm", "-rf", m("Documents/Inbox/trash")])
            #expect(removed.status == 0, "rm -rf a folder: \(removed)")
            probe.allowed("unlink a file in a folder") { outcome(unlink(m("Documents/Inbox/photos/sub/b.jpg"))) }
            probe.allowed("rmdir a folder in a folder") { outcome(rmdir(m("Documents/Inbox/photos/sub"))) }
            for gone in ["old.txt", "empty", "trash", "photos/sub"] {
                #expect(status(container.stored("Documents/Inbox/\(gone)")) == nil, "\(gone) is still in the store")
            }
            #expect(contents(container.stored("Documents/Inbox/report.txt")) == bytes("report v1\n"))

            // Emptied, the inbox itself stays: it is part of the structure.
            let emptied = try runProgram(["sh", "-c", "rm -rf \"$1\"/* && ls -A \"$1\"", "sh", m("Documents/Inbox")])
            #expect(emptied.status == 0 && emptied.stdout.isEmpty, "emptying the inbox: \(emptied)")
            try probe.denied(
                "rmdir the empty inbox",
                Denial(errno: EPERM, operation: "rmdir", paths: ["Documents/Inbox"], areas: ["structure"], rule: "structureIsFixed"),
                watching: ["Documents/Inbox"]
            ) {
                outcome(rmdir(m("Documents/Inbox")))
            }
            #expect(status(container.stored("Documents/Inbox")).map { $0.st_mode & S_IFMT == S_IFDIR } == true)
            try probe.finish()
        }
    }

    @Test("a file or folder moved out into a writable area becomes editable")
    func moveOutThenEdit() throws {
        try withMountedContainer(beforeMounting: Self.deliver) { container in
            let probe = try Probe(container)
            let m = container.mounted
            let s = container.stored

            // A file: out to Documents, then changed in every way.
            probe.allowed("rename a file out") { outcome(rename(m("Documents/Inbox/report.txt"), m("Documents/report.txt"))) }
            probe.allowed("append") { withOpened(m("Documents/report.txt"), O_WRONLY | O_APPEND) { writeAll($0, bytes("v2\n")) } }
            probe.allowed("chmod") { outcome(chmod(m("Documents/report.txt"), 0o600)) }
            probe.allowed("setxattr") { outcome(setxattr(m("Documents/report.txt"), "user.read", "1", 1, 0)) }
            probe.allowed("removexattr") { outcome(removexattr(m("Documents/report.txt"), "user.from")) }
            probe.allowed("utimensat") { outcome(utimensat(AT_FDCWD, m("Documents/report.txt"), times(1_000_000_000), 0)) }
            #expect(contents(s("Documents/report.txt")) == bytes("report v1\nv2\n"))
            #expect(status(s("Documents/report.txt")).map { $0.st_mode & 0o7777 } == 0o600)
            #expect(status(s("Documents/report.txt"))?.st_mtim.tv_sec == 1_000_000_000)
            #expect(extendedAttribute(s("Documents/report.txt"), "user.read") == bytes("1"))
            #expect(extendedAttribute(s("Documents/report.txt"), "user.from") == nil)
            #expect(status(s("Documents/Inbox/report.txt")) == nil)

            // A folder: out to Documents, then its insides are writable too — also those the
            // kernel already knew, and a descriptor opened before the move.
            #expect(contents(m("Documents/Inbox/photos/a.jpg")) == bytes("A"))
            #expect(status(m("Documents/Inbox/photos/sub/b.jpg")) != nil)
            let early = open(m("Documents/Inbox/photos/sub/b.jpg"), O_RDONLY | O_CLOEXEC)
            defer { close(early) }
            probe.allowed("rename a folder out") { outcome(rename(m("Documents/Inbox/photos"), m("Documents/photos"))) }
            probe.allowed("fchmod through a descriptor opened before the move") { outcome(fchmod(early, 0o640)) }
            #expect(status(s("Documents/photos/sub/b.jpg")).map { $0.st_mode & 0o7777 } == 0o640)
            probe.allowed("write inside it") { withOpened(m("Documents/photos/a.jpg"), O_WRONLY | O_TRUNC) { writeAll($0, bytes("A2")) } }
            probe.allowed("create inside it") {
                withOpened(m("Documents/photos/new.jpg"), O_CREAT | O_EXCL | O_WRONLY) { writeAll($0, bytes("N")) }
            }
            probe.allowed("mkdir inside it") { outcome(mkdir(m("Documents/photos/sub/more"), 0o755)) }
            probe.allowed("delete inside it") { outcome(unlink(m("Documents/photos/sub/b.jpg"))) }
            #expect(contents(s("Documents/photos/a.jpg")) == bytes("A2"))
            #expect(contents(s("Documents/photos/new.jpg")) == bytes("N"))
            #expect(status(s("Documents/photos/sub/more")) != nil)
            #expect(status(s("Documents/photos/sub/b.jpg")) == nil)
            #expect(status(s("Documents/Inbox/photos")) == nil)

            // Out to the other writable areas, and over an existing file.
            probe.allowed("rename out to Caches") { outcome(rename(m("Documents/Inbox/to-caches.txt"), m("Library/Caches/to-caches.txt"))) }
            probe.allowed("rename out to tmp") { outcome(rename(m("Documents/Inbox/to-tmp.txt"), m("tmp/to-tmp.txt"))) }
            probe.allowed("rename out to Preferences") {
                outcome(rename(m("Documents/Inbox/to-preferences.txt"), m("Library/Preferences/to-preferences.txt")))
            }
            probe.allowed("rename out over an existing file") {
                outcome(rename(m("Documents/Inbox/over.txt"), m("Documents/existing.txt")))
            }
            probe.allowed("edit in Caches") {
                withOpened(m("Library/Caches/to-caches.txt"), O_WRONLY | O_APPEND) { writeAll($0, bytes("+")) }
            }
            #expect(contents(s("Library/Caches/to-caches.txt")) == bytes("to-caches\n+"))
            #expect(contents(s("tmp/to-tmp.txt")) == bytes("to-tmp\n"))
            #expect(contents(s("Library/Preferences/to-preferences.txt")) == bytes("to-preferences\n"))
            #expect(contents(s("Documents/existing.txt")) == bytes("over\n"))

            // mv, as a person would.
            let moved = try runProgram(["mv", m("Documents/Inbox/swap.txt"), m("Documents/")])
            #expect(moved.status == 0, "mv out of the inbox: \(moved)")
            #expect(contents(s("Documents/swap.txt")) == bytes("swap\n"))
            expectMountAgreesWithStore(container, "Documents")
            try probe.finish()
        }
    }

    @Test("nothing gets into the inbox (EACCES)")
    func nothingGetsIn() throws {
        try withMountedContainer(beforeMounting: Self.deliver) { container in
            let probe = try Probe(container)
            let m = container.mounted
            let watched = [
                "Documents/Inbox", "Documents/Inbox/photos", "Documents/mine.txt", "Documents/folder", "Documents/Inbox/report.txt",
            ]
            func denied(_ label: String, _ operation: String, _ paths: [String], _ areas: [String], _ call: () -> Int32) throws {
                try probe.denied(label, Self.inboxDenial(operation, paths, areas), watching: watched + paths, call)
            }
            try denied("rename a file in", "rename", ["Documents/mine.txt", "Documents/Inbox/mine.txt"], ["data", "inbox"]) {
                outcome(rename(m("Documents/mine.txt"), m("Documents/Inbox/mine.txt")))
            }
            try denied(
                "rename a file into a folder of the inbox", "rename", ["Documents/mine.txt", "Documents/Inbox/photos/mine.txt"],
                ["data", "inbox"]
            ) {
                outcome(rename(m("Documents/mine.txt"), m("Documents/Inbox/photos/mine.txt")))
            }
            try denied("rename a folder in", "rename", ["Documents/folder", "Documents/Inbox/folder"], ["data", "inbox"]) {
                outcome(rename(m("Documents/folder"), m("Documents/Inbox/folder")))
            }
            try denied("rename from Caches in", "rename", ["Library/Caches/cached.txt", "Documents/Inbox/cached.txt"], ["cache", "inbox"]) {
                outcome(rename(m("Library/Caches/cached.txt"), m("Documents/Inbox/cached.txt")))
            }
            try denied(
                "rename from tmp over an inbox file", "rename", ["tmp/temp.txt", "Documents/Inbox/report.txt"], ["temporary", "inbox"]
            ) {
                outcome(rename(m("tmp/temp.txt"), m("Documents/Inbox/report.txt")))
            }
            try denied("RENAME_NOREPLACE in", "rename", ["Documents/mine.txt", "Documents/Inbox/mine.txt"], ["data", "inbox"]) {
                outcome(
                    clinux_renameat2(AT_FDCWD, m("Documents/mine.txt"), AT_FDCWD, m("Documents/Inbox/mine.txt"), clinux_RENAME_NOREPLACE))
            }
            try denied(
                "RENAME_EXCHANGE with an inbox file", "rename", ["Documents/mine.txt", "Documents/Inbox/report.txt"], ["data", "inbox"]
            ) {
                outcome(
                    clinux_renameat2(AT_FDCWD, m("Documents/mine.txt"), AT_FDCWD, m("Documents/Inbox/report.txt"), clinux_RENAME_EXCHANGE))
            }
            try denied("hard link in", "link", ["Documents/mine.txt", "Documents/Inbox/mine.txt"], ["data", "inbox"]) {
                outcome(link(m("Documents/mine.txt"), m("Documents/Inbox/mine.txt")))
            }
            try denied("hard link out", "link", ["Documents/Inbox/linked.txt", "Documents/linked.txt"], ["inbox", "data"]) {
                outcome(link(m("Documents/Inbox/linked.txt"), m("Documents/linked.txt")))
            }
            try denied("create", "create", ["Documents/Inbox/new.txt"], ["inbox"]) {
                withOpened(m("Documents/Inbox/new.txt"), O_CREAT | O_WRONLY)
            }
            try denied("create in a folder", "create", ["Documents/Inbox/photos/new.jpg"], ["inbox"]) {
                withOpened(m("Documents/Inbox/photos/new.jpg"), O_CREAT | O_EXCL | O_WRONLY)
            }
            try denied("mkdir", "mkdir", ["Documents/Inbox/dir"], ["inbox"]) { outcome(mkdir(m("Documents/Inbox/dir"), 0o755)) }
            try denied("mkfifo", "mknod", ["Documents/Inbox/fifo"], ["inbox"]) { outcome(mkfifo(m("Documents/Inbox/fifo"), 0o644)) }
            try denied("symlink", "symlink", ["Documents/Inbox/link"], ["inbox"]) {
                outcome(symlink("../mine.txt", m("Documents/Inbox/link")))
            }
            // Moving within the inbox puts a file into it.
            try denied("rename within", "rename", ["Documents/Inbox/report.txt", "Documents/Inbox/renamed.txt"], ["inbox", "inbox"]) {
                outcome(rename(m("Documents/Inbox/report.txt"), m("Documents/Inbox/renamed.txt")))
            }
            try denied(
                "rename into a folder of the inbox", "rename", ["Documents/Inbox/report.txt", "Documents/Inbox/photos/report.txt"],
                ["inbox", "inbox"]
            ) {
                outcome(rename(m("Documents/Inbox/report.txt"), m("Documents/Inbox/photos/report.txt")))
            }
            #expect(status(container.stored("Documents/mine.txt")) != nil)
            #expect(status(container.stored("Documents/folder/inner")) != nil)
            try probe.finish()
        }
    }

    @Test("nothing in the inbox changes (EACCES)")
    func nothingChangesInside() throws {
        try withMountedContainer(beforeMounting: Self.deliver) { container in
            let probe = try Probe(container)
            let m = container.mounted
            for target in ["Documents/Inbox/report.txt", "Documents/Inbox/photos", "Documents/Inbox/photos/sub/b.jpg"] {
                let path = m(target)
                let isFile = !target.hasSuffix("photos")
                func denied(_ label: String, _ operation: String, _ call: () -> Int32) throws {
                    try probe.denied("\(label) \(target)", Self.inboxDenial(operation, [target], ["inbox"]), watching: [target], call)
                }
                if isFile {
                    try denied("open O_WRONLY", "open") { withOpened(path, O_WRONLY) { writeAll($0, bytes("x")) } }
                    try denied("open O_RDWR", "open") { withOpened(path, O_RDWR) }
                    try denied("open O_APPEND", "open") { withOpened(path, O_WRONLY | O_APPEND) }
                    try denied("open O_RDONLY|O_TRUNC", "open") { withOpened(path, O_RDONLY | O_TRUNC) }
                    try denied("truncate", "truncate") { outcome(truncate(path, 0)) }
                }
                try denied("chmod", "chmod") { outcome(chmod(path, 0o777)) }
                try denied("fchmod", "chmod") { withOpened(path, O_RDONLY) { outcome(fchmod($0, 0o777)) } }
                try denied("chown", "chown") { outcome(chown(path, 1000, 1000)) }
                try denied("utimensat", "utimens") { outcome(utimensat(AT_FDCWD, path, nil, 0)) }
                try denied("setxattr", "setxattr") { outcome(setxattr(path, "user.x", "1", 1, 0)) }
                try denied("removexattr", "removexattr") { outcome(removexattr(path, "user.from")) }
            }
            #expect(contents(container.stored("Documents/Inbox/report.txt")) == bytes("report v1\n"))
            #expect(extendedAttribute(container.stored("Documents/Inbox/report.txt"), "user.from") == bytes("mail"))
            try probe.finish()
        }
    }

    @Test("out of the inbox into the bundle or the root is EPERM: EPERM beats EACCES")
    func strictestDenialWins() throws {
        try withMountedContainer(beforeMounting: Self.deliver) { container in
            let probe = try Probe(container)
            let m = container.mounted
            func bundle(_ operation: String, _ paths: [String], _ areas: [String]) -> Denial {
                Denial(errno: EPERM, operation: operation, paths: paths, areas: areas, rule: "bundleIsReadOnly")
            }
            try probe.denied(
                "rename inbox → bundle", bundle("rename", ["Documents/Inbox/evil.txt", "Demo.app/evil.txt"], ["inbox", "bundle"]),
                watching: ["Documents/Inbox/evil.txt"]
            ) {
                outcome(rename(m("Documents/Inbox/evil.txt"), m("Demo.app/evil.txt")))
            }
            try probe.denied(
                "rename inbox → over a bundle file",
                bundle("rename", ["Documents/Inbox/evil.txt", "Demo.app/res/data.txt"], ["inbox", "bundle"]),
                watching: ["Documents/Inbox/evil.txt"]
            ) {
                outcome(rename(m("Documents/Inbox/evil.txt"), m("Demo.app/res/data.txt")))
            }
            try probe.denied(
                "exchange inbox ↔ bundle", bundle("rename", ["Documents/Inbox/evil.txt", "Demo.app/Info.plist"], ["inbox", "bundle"]),
                watching: ["Documents/Inbox/evil.txt"]
            ) {
                outcome(
                    clinux_renameat2(AT_FDCWD, m("Documents/Inbox/evil.txt"), AT_FDCWD, m("Demo.app/Info.plist"), clinux_RENAME_EXCHANGE))
            }
            try probe.denied(
                "link inbox → bundle", bundle("link", ["Documents/Inbox/evil.txt", "Demo.app/evil.txt"], ["inbox", "bundle"]),
                watching: ["Documents/Inbox/evil.txt"]
            ) {
                outcome(link(m("Documents/Inbox/evil.txt"), m("Demo.app/evil.txt")))
            }
            try probe.denied(
                "rename inbox → root",
                Denial(
                    errno: EPERM, operation: "rename", paths: ["Documents/Inbox/evil2.txt", "evil2.txt"],
                    areas: ["inbox", "structure"], rule: "structureIsFixed"),
                watching: ["Documents/Inbox/evil2.txt", "evil2.txt"]
            ) {
                outcome(rename(m("Documents/Inbox/evil2.txt"), m("evil2.txt")))
            }
            try probe.denied(
                "rename inbox → over a standard directory",
                Denial(
                    errno: EPERM, operation: "rename", paths: ["Documents/Inbox/photos", "Library/Caches"],
                    areas: ["inbox", "structure"], rule: "structureIsFixed"),
                watching: ["Documents/Inbox/photos", "Library/Caches"]
            ) {
                outcome(rename(m("Documents/Inbox/photos"), m("Library/Caches")))
            }
            #expect(contents(container.stored("Documents/Inbox/evil.txt")) == bytes("evil\n"))
            try probe.finish()
        }
    }

    @Test("programs: cat, mv and rm work on the inbox; cp, touch and sed -i into it fail")
    func programs() throws {
        try withMountedContainer(beforeMounting: Self.deliver) { container in
            let probe = try Probe(container)
            let m = container.mounted
            let cat = try runProgram(["cat", m("Documents/Inbox/report.txt")])
            #expect(cat.status == 0 && cat.stdout == "report v1\n", "cat: \(cat)")

            for (arguments, process) in [
                (["cp", "/etc/hostname", m("Documents/Inbox/hostname")], "cp"),
                (["cp", m("Documents/mine.txt"), m("Documents/Inbox/report.txt")], "cp"),
                (["touch", m("Documents/Inbox/report.txt")], "touch"),
                (["sed", "-i", "s/v1/v9/", m("Documents/Inbox/report.txt")], "sed"),
            ] {
                let result = try runProgram(arguments)
                #expect(result.status != 0, "\(arguments.joined(separator: " ")) must fail: \(result)")
                #expect(result.stderr.contains("Permission denied"), "\(arguments.joined(separator: " ")): \(result.stderr)")
                let records = try probe.takeAuditRecords(atLeast: 1)
                #expect(!records.isEmpty, "\(arguments.joined(separator: " ")): no audit record")
                for record in records {
                    #expect(
                        record["errno"] as? String == "EACCES" && record["rule"] as? String == "inboxIsReadDeleteOnly"
                            && record["process"] as? String == process, "\(arguments.joined(separator: " ")): \(record)")
                }
            }
            #expect(contents(container.stored("Documents/Inbox/report.txt")) == bytes("report v1\n"))
            #expect(status(container.stored("Documents/Inbox/hostname")) == nil)

            let mv = try runProgram(["mv", m("Documents/Inbox/photos"), m("Documents/photos")])
            #expect(mv.status == 0, "mv a folder out: \(mv)")
            let rm = try runProgram(["rm", "-r", m("Documents/Inbox/trash"), m("Documents/Inbox/old.txt")])
            #expect(rm.status == 0, "rm: \(rm)")
            #expect(contents(container.stored("Documents/photos/sub/b.jpg")) == bytes("B"))
            #expect(status(container.stored("Documents/Inbox/trash")) == nil)
            #expect(status(container.stored("Documents/Inbox/old.txt")) == nil)
            try probe.finish()
        }
    }
}
