import ContainerStore
import Foundation
import Glibc
import Testing

/// `run --grant PATH[:rw]` (issue #30, docs/run.md "Documents opened in place"): one host
/// file or folder visible inside at /grants/NAME, read-only unless `:rw`, nothing around it
/// reachable, recorded in the audit log, gone after the run. As root (whose program is
/// `_containerfs` on the host) and as an ordinary user.
@Suite("RunGrant", .serialized)
struct RunGrantTests {
    static let runners: [String?] = [nil, "cfs-alice"]

    /// A folder granted read-only: its files and subfolders read; a write, a create and a
    /// chmod fail with EROFS; its symlinks that point out (`../secret.txt`, the secret's
    /// absolute path) and its `..` lead to nothing of the host; /grants holds it alone. The
    /// grant is printed and audited, the host folder is unchanged, and the next run without
    /// the grant has no /grants.
    @Test(arguments: runners)
    func aFolderGrantedReadOnlyIsReadableAndNothingAroundItIs(runner: String?) throws {
        let container = try MountedContainer(user: runner)
        let outside = try makeOutside(container)
        let docs = outside + "/docs"
        try FileManager.default.createDirectory(atPath: docs + "/sub", withIntermediateDirectories: true)
        try write("granted\n", to: docs + "/a.txt")
        try write("below\n", to: docs + "/sub/b.txt")
        try write("secret\n", to: outside + "/secret.txt")
        try FileManager.default.createSymbolicLink(atPath: docs + "/up", withDestinationPath: "../secret.txt")
        try FileManager.default.createSymbolicLink(atPath: docs + "/abs", withDestinationPath: outside + "/secret.txt")
        // The program's own files on the host (root's is `_containerfs`): only the grant's
        // read-only mount can stop its writes.
        try handOver(outside, to: runner ?? "_containerfs")

        let result = try runProgram([containerfsBinary, "run", container.store, "--grant", docs, "--", "sh", "-c", """
            cat /grants/docs/a.txt /grants/docs/sub/b.txt
            ls -A /grants | tr '\\n' ' '; echo
            cat /grants/docs/up 2>/dev/null && echo "read through up"
            cat /grants/docs/abs 2>/dev/null && echo "read through abs"
            cat /grants/docs/../secret.txt 2>/dev/null && echo "read through .."
            cat \(outside)/secret.txt 2>/dev/null && echo "read by its host path"
            echo changed > /grants/docs/a.txt 2>/dev/null && echo "wrote a.txt"
            touch /grants/docs/new 2>/dev/null && echo "created new"
            chmod 0777 /grants/docs/a.txt 2>/dev/null && echo "chmodded a.txt"
            python3 -c 'import os, errno
            try:
                os.open("/grants/docs/a.txt", os.O_WRONLY)
            except OSError as e:
                print("open for writing:", errno.errorcode[e.errno])'
            """], user: runner)
        #expect(result.status == 0, "\(result)")
        #expect(result.stdout == "granted\nbelow\ndocs \nopen for writing: EROFS\n", "\(result)")
        #expect(result.stderr.contains("containerfs: granted \(docs) read-only at /grants/docs\n"), "\(result)")
        #expect(!result.stderr.contains("denied"), "a grant is not a denial: \(result)")
        #expect(try String(contentsOfFile: docs + "/a.txt", encoding: .utf8) == "granted\n")
        #expect(!FileManager.default.fileExists(atPath: docs + "/new"))
        let audit = try containerfs(["audit", container.store], user: runner)
        #expect(audit.stdout.contains("grant \(docs) [host] -> /grants/docs [sandbox]  - (granted read-only)"), "\(audit)")
        try expectCleanedUp(container)

        let after = try runProgram([containerfsBinary, "run", container.store, "--", "sh", "-c",
                                    "test -e /grants && echo present; grep -c /grants /proc/self/mountinfo"], user: runner)
        #expect(after.stdout == "0\n", "the grant outlived its run: \(after)")
    }

    /// A folder granted `:rw`: sqlite3 writes a database in it (with its journal beside
    /// it) and the host reads the row; a file granted `:rw` is appended to by python3, and
    /// its siblings are not there. Root's program writes as `_containerfs`, so root's test
    /// hands the granted nodes to it, as docs/run.md says.
    @Test(arguments: runners)
    func whatIsGrantedReadWriteIsWrittenThroughTheSandbox(runner: String?) throws {
        let container = try MountedContainer(user: runner)
        let outside = try makeOutside(container)
        let work = outside + "/work"
        try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)
        #expect(try runProgram(["sqlite3", work + "/notes.db", "create table t(x); insert into t values('host');"]).status == 0)
        try write("line 1\n", to: outside + "/log.txt")
        try write("sibling\n", to: outside + "/sibling.txt")
        try handOver(outside, to: runner ?? "_containerfs")

        let result = try runProgram([containerfsBinary, "run", container.store, "--grant", work + ":rw",
                                     "--grant", outside + "/log.txt:rw", "--", "sh", "-c", """
            sqlite3 /grants/work/notes.db "insert into t values('inside'); select count(*) from t;"
            python3 -c 'open("/grants/log.txt", "a").write("line 2\\n")'
            ls -A /grants | tr '\\n' ' '; echo
            """], user: runner)
        #expect(result.status == 0, "\(result)")
        #expect(result.stdout == "2\nlog.txt work \n", "\(result)")
        #expect(result.stderr.contains("containerfs: granted \(work) read-write at /grants/work\n"), "\(result)")
        let rows = try runProgram(["sqlite3", work + "/notes.db", "select x from t order by rowid;"])
        #expect(rows.stdout == "host\ninside\n", "\(rows)")
        #expect(try String(contentsOfFile: outside + "/log.txt", encoding: .utf8) == "line 1\nline 2\n")
        let audit = try containerfs(["audit", container.store], user: runner)
        #expect(audit.stdout.contains("grant \(outside)/log.txt [host] -> /grants/log.txt [sandbox]  - (granted read-write)"), "\(audit)")
        try expectCleanedUp(container)
    }

    /// What cannot be granted is refused with one line before anything runs: a missing
    /// path, a FIFO, the store, a folder inside it, its parent, / and /tmp (1); two grants
    /// of one name and --grant with --no-confine (64); for root, a path `_containerfs` cannot
    /// reach (1). A path through a symlink is granted
    /// as its target, named as such.
    @Test func whatCannotBeGrantedIsRefusedWithOneLine() throws {
        let container = try MountedContainer()
        let outside = try makeOutside(container)
        try FileManager.default.createDirectory(atPath: outside + "/one/same", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: outside + "/two/same", withIntermediateDirectories: true)
        #expect(mkfifo(outside + "/fifo", 0o600) == 0)
        let cases: [(grants: [String], extra: [String], status: Int32, says: String)] = [
            ([outside + "/missing"], [], 1, "No such file or directory"),
            ([outside + "/fifo"], [], 1, "only a regular file or a folder"),
            ([container.store], [], 1, "is the container's store"),
            ([container.store + "/Documents:rw"], [], 1, "is inside the container's store"),
            ([container.base], [], 1, "holds the container's store"),
            (["/"], [], 1, "every run's container is mounted below it"),
            (["/tmp"], [], 1, "every run's container is mounted below it"),
            ([outside + "/one/same", outside + "/two/same"], [], 64, "two grants are named same"),
            ([outside + "/one"], ["--no-confine"], 64, "--grant needs the confinement"),
        ]
        for item in cases {
            let result = try runProgram([containerfsBinary, "run", container.store] + item.extra + item.grants.flatMap { ["--grant", $0] }
                                        + ["--", "touch", "Documents/ran"])
            #expect(result.status == item.status, "\(item.grants): \(result)")
            #expect(result.stderr.contains(item.says), "\(item.grants): \(result)")
            if item.status == 1 { #expect(result.stderr.split(separator: "\n").count == 1, "one line: \(result)") }
            #expect(!FileManager.default.fileExists(atPath: container.stored("Documents/ran")), "\(item.grants) ran the program")
        }
        // Root's program is `_containerfs`: a grant it could not reach is refused, naming the folder.
        chmod(container.base, 0o700)
        let unreachable = try runProgram([containerfsBinary, "run", container.store, "--grant", outside + "/one", "--", "true"])
        #expect(unreachable.status == 1 && unreachable.stderr.contains("cannot search \(container.base) to reach it"), "\(unreachable)")
        chmod(container.base, 0o755)
        try FileManager.default.createSymbolicLink(atPath: outside + "/link", withDestinationPath: "one")
        let linked = try runProgram([containerfsBinary, "run", container.store, "--grant", outside + "/link", "--", "ls", "/grants"])
        #expect(linked.status == 0 && linked.stdout == "one\n", "\(linked)")
        #expect(linked.stderr.contains("granted \(outside)/one read-only at /grants/one"), "\(linked)")
        try expectCleanedUp(container)
    }

    /// The checks are made on the opened node, not its path: a bind mount showing the store's
    /// folder, or a folder of the store, at another path is refused as the store's; a folder
    /// with a mount beneath it (here at a name with a space, escaped in mountinfo) is refused,
    /// as bubblewrap's bind would show that mount too, and so is a file bound over another.
    @Test func bindMountsAndMountsBeneathAreSeenThrough() throws {
        let container = try MountedContainer()
        let outside = try makeOutside(container)
        let beneath = outside + "/share/sub dir"
        try FileManager.default.createDirectory(atPath: beneath, withIntermediateDirectories: true)
        let aliases = try makeTemporaryDirectory()
        chmod(aliases, 0o755)
        let holder = aliases + "/holder", documents = aliases + "/documents", file = aliases + "/file"
        for folder in [holder, documents] { try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true) }
        try write("theirs\n", to: container.stored("Documents/theirs.txt"))
        try write("", to: file)
        var made: [String] = []
        defer {
            for mountpoint in made.reversed() { _ = try? runProgram(["umount", "-l", mountpoint]) }
            _ = try? runProgram(["rm", "-rf", aliases])
        }
        for (arguments, mountpoint) in [(["-t", "tmpfs", "tmpfs"], beneath), (["--bind", container.base], holder), (["--bind", container.stored("Documents")], documents),
                                           (["--bind", container.stored("Documents/theirs.txt")], file)] {
            let mounted = try runProgram(["mount"] + arguments + [mountpoint])
            guard mounted.status == 0 else { throw TestFailure("mount \(mountpoint): \(mounted)") }
            made.append(mountpoint)
        }
        let cases: [(grant: String, says: String)] = [
            (outside + "/share", "cannot grant \(outside)/share: \(beneath) is a mount point beneath it"),
            (holder, "cannot grant \(holder): it holds the container's store"),
            (documents + ":rw", "cannot grant \(documents): it is inside the container's store"),
            (file, "cannot grant \(file): it is a mount point itself"),
        ]
        for item in cases {
            let result = try runProgram([containerfsBinary, "run", container.store, "--grant", item.grant, "--", "touch", "Documents/ran"])
            #expect(result.status == 1 && result.stderr.hasPrefix("containerfs: " + item.says), "\(item.grant): \(result)")
            #expect(result.stderr.split(separator: "\n").count == 1, "one line: \(result)")
            #expect(!FileManager.default.fileExists(atPath: container.stored("Documents/ran")), "\(item.grant) ran the program")
        }
        // The folder beside it, with no mount below, is granted.
        try FileManager.default.createDirectory(atPath: outside + "/plain", withIntermediateDirectories: true)
        let plain = try runProgram([containerfsBinary, "run", container.store, "--grant", outside + "/plain", "--", "ls", "/grants"])
        #expect(plain.status == 0 && plain.stdout == "plain\n", "\(plain)")
        try expectCleanedUp(container)
    }

    // MARK: Helpers

    /// A folder beside the store, for what is granted (the container's base is the user's,
    /// and searchable by all, as root's program, `_containerfs`, must reach what it gets).
    private func makeOutside(_ container: MountedContainer) throws -> String {
        chmod(container.base, 0o755)
        let outside = container.base + "/outside"
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
        return outside
    }

    /// Gives `path` and everything below it (symlinks themselves) to `user`.
    private func handOver(_ path: String, to user: String) throws {
        let chowned = try runProgram(["chown", "-hR", "\(user):\(user)", path])
        guard chowned.status == 0 else { throw TestFailure("chown: \(chowned)") }
    }

    private func write(_ text: String, to path: String) throws {
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
    }
}
