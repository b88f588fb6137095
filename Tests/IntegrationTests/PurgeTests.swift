import Foundation
import Glibc
import Testing

// Purge through real mounts (SPEC §3): what it deletes, what it never touches, how a
// mount sees it. Helpers shared by TagTests and UsageTests are at the end (`Purging`).

@Suite("Purge", .serialized)
struct PurgeTests {
    @Test func freeStopsAtTheFileThatReachesTheSize() throws {
        let container = try MountedContainer()
        try container.mount()
        try Purging.seedUserData(container)
        let before = try Purging.userDataDigest(container)
        // Oldest first: 1000, 2000, 3000, 4000 bytes.
        for (index, size) in [1000, 2000, 3000, 4000].enumerated() {
            try Purging.write(container.mounted("Library/Caches/f\(index)"), size: size)
            usleep(3000)
        }
        container.unmount()
        let result = try Purging.purge([container], ["--caches", "--free", "2500"])
        #expect(result.paths == ["Library/Caches/f0", "Library/Caches/f1"], "1000 + 2000 reaches 2500: stop there")
        #expect(result.freed == 3000)
        #expect(Purging.listing(container.stored("Library/Caches")) == ["CACHEDIR.TAG", "f2", "f3"])
        #expect(try Purging.userDataDigest(container) == before)
        // Text output names each file and the total.
        let text = try containerfs(["purge", container.store, "--caches", "--free", "1"])
        #expect(text.status == 0)
        #expect(text.stdout.contains("deleted \(container.store)/Library/Caches/f2  3000 bytes"))
        #expect(text.stdout.contains("freed 3000 bytes"))
    }

    /// A cache file an app named with an escape sequence (a window title, a screen clear)
    /// is listed with its controls escaped: the developer's terminal never receives them.
    /// `--json` keeps the name exactly (JSON escapes it itself).
    @Test func namesAnAppChoseCannotDriveTheTerminal() throws {
        let container = try MountedContainer()
        try container.mount()
        let name = "\u{1B}]0;pwned\u{7}\u{1B}[2Jx"
        try Purging.write(container.mounted("Library/Caches/" + name), size: 10)
        container.unmount()
        let text = try containerfs(["purge", container.store, "--caches", "--dry-run"])
        #expect(text.status == 0, "\(text)")
        #expect(!text.stdout.utf8.contains(0x1B) && !text.stdout.utf8.contains(0x07), "\(text.stdout.debugDescription)")
        #expect(text.stdout.contains("Library/Caches/\\x1b]0;pwned\\x07\\x1b[2Jx"), "\(text.stdout.debugDescription)")
        let result = try Purging.purge([container], ["--caches", "--dry-run"])
        #expect(result.paths == ["Library/Caches/" + name])
    }

    /// One file of one byte from one store: "1 byte … in 1 file from 1 store", not
    /// "1 bytes" or "file(s)".
    @Test func purgeCountsInWords() throws {
        let container = try MountedContainer()
        try Purging.write(container.stored("Library/Caches/one"), size: 1)
        let text = try containerfs(["purge", container.store, "--caches"])
        #expect(text.status == 0, "\(text)")
        #expect(text.stdout.contains("Library/Caches/one  1 byte  last used"), "\(text)")
        #expect(text.stdout.contains("freed 1 byte (1 B) in 1 file from 1 store\n"), "\(text)")
    }

    /// `--until-free --json`: plain purge's object plus the goal, every figure true against
    /// the store: free before and after are the capacity less an independent walk, the files
    /// listed deleted are exactly those gone, each with the size it had, tmp's bytes are its
    /// files', and the goal says whether it was reached (first yes, then, asking more than
    /// Documents and the bundle leave, no).
    @Test func untilFreeJSONReportsTrueFigures() throws {
        let container = try MountedContainer()
        try CapacityTests.fillForLowStorage(container)  // 8M: tmp 1M, caches old 2M and new 2M, Documents 2M
        let capacity = 8 << 20
        func regularFiles() -> [String: Int] {
            var found: [String: Int] = [:]
            for area in ["Library/Caches", "tmp"] {
                let top = container.stored(area)
                for case let relative as String in FileManager.default.enumerator(atPath: top) ?? NSEnumerator() {
                    var info = stat()
                    if lstat(top + "/" + relative, &info) == 0, info.st_mode & S_IFMT == S_IFREG, relative != "CACHEDIR.TAG" {
                        found[area + "/" + relative] = Int(info.st_size)
                    }
                }
            }
            return found
        }
        for (asked, reached) in [("3M", true), ("7M", false)] {
            let before = regularFiles(), usedBefore = try CapacityTests.storeBytes(container.store)
            let result = try containerfs(["purge", container.store, "--caches", "--tmp", "--until-free", asked, "--json"])
            try #require(result.status == 0, "\(result)")
            let json = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any], "\(result)")
            let after = regularFiles(), usedAfter = try CapacityTests.storeBytes(container.store)
            let goal = try #require(json["untilFree"] as? [String: Any], "\(json)")
            #expect(goal["asked"] as? String == asked && goal["reached"] as? Bool == reached, "\(goal)")
            let store = try #require((goal["stores"] as? [[String: Any]])?.first, "\(goal)")
            let wanted = Int(asked.dropLast())! << 20
            #expect(store["store"] as? String == container.store && store["wantedBytes"] as? Int == wanted, "\(store)")
            #expect(store["freeBeforeBytes"] as? Int == capacity - usedBefore, "walk: \(usedBefore) used before; \(store)")
            #expect(store["freeAfterBytes"] as? Int == capacity - usedAfter, "walk: \(usedAfter) used after; \(store)")
            #expect(store["reached"] as? Bool == (capacity - usedAfter >= wanted), "\(store)")
            // The files gone are those listed, with their sizes; tmp's apart.
            let gone = Set(before.keys).subtracting(after.keys)
            let deleted = json["deleted"] as? [[String: Any]] ?? []
            let listed = deleted.compactMap { $0["path"] as? String }
            #expect(Set(listed) == gone.filter { $0.hasPrefix("Library/Caches/") } && listed.count == deleted.count, "\(listed) vs \(gone)")
            for item in deleted {
                let path = item["path"] as? String ?? "?"
                #expect(item["size"] as? Int == before[path] && item["freedBytes"] as? Int == before[path] && item["kind"] as? String == "cache", "\(item)")
            }
            let temporary = gone.filter { $0.hasPrefix("tmp/") }
            #expect(store["tmpEntriesRemoved"] as? Int == temporary.count, "\(store)")
            #expect(store["tmpFreedBytes"] as? Int == temporary.reduce(0) { $0 + before[$1]! }, "\(store)")
            let freed = deleted.reduce(0) { $0 + ($1["freedBytes"] as? Int ?? 0) } + (store["tmpFreedBytes"] as? Int ?? 0)
            #expect(json["freedBytes"] as? Int == freed && freed == gone.reduce(0) { $0 + before[$1]! }, "\(json)")
            #expect(json["dryRun"] as? Bool == false && (json["failed"] as? [Any])?.isEmpty == true && (json["skipped"] as? [Any])?.isEmpty == true)
            #expect(access(container.stored("Documents/d"), F_OK) == 0)
        }
        #expect(regularFiles().isEmpty, "asking more than can be freed purges everything purgeable")
    }

    @Test func dryRunDeletesNothing() throws {
        let container = try MountedContainer()
        try container.mount()
        try Purging.write(container.mounted("Library/Caches/a"), size: 10)
        try Purging.write(container.mounted("tmp/b"), size: 20)
        let mounted = try Purging.purge([container], ["--caches", "--tmp", "--all", "--dry-run", "--include-running"])
        #expect(Set(mounted.paths) == ["Library/Caches/a", "tmp/b"])
        #expect(mounted.freed == 30)
        container.unmount()
        let caches = try treeDigest(container.stored("Library/Caches"))
        let result = try Purging.purge([container], ["--caches", "--dry-run"])
        #expect(result.paths == ["Library/Caches/a"])
        #expect(try treeDigest(container.stored("Library/Caches")) == caches)
        let text = try containerfs(["purge", container.store, "--caches", "--dry-run"])
        #expect(text.stdout.contains("would delete \(container.store)/Library/Caches/a"))
        #expect(text.stdout.contains("would free 10 bytes"))
    }

    /// `--until-free` refuses a mounted store (exit 1, docs/purge.md) even when nothing would
    /// have to go, and touches no store named with it (issue 26 §3).
    @Test func untilFreeRefusesAMountedStoreEvenWhenNothingWouldGo() throws {
        let idle = try MountedContainer()
        try Purging.write(idle.stored("tmp/scratch"), size: 100)
        try withMountedContainer { container in
            try Purging.write(container.mounted("Library/Caches/a"), size: 100)
            for stores in [[container.store], [idle.store, container.store]] {
                let result = try containerfs(["purge"] + stores + ["--caches", "--tmp", "--until-free", "1K"])
                #expect(result.status == 1 && result.stderr.contains("\(container.store) is in use"), "\(result)")
                #expect(result.stderr.split(separator: "\n").count == 1 && result.stdout.isEmpty, "\(result)")
            }
            #expect(access(container.stored("Library/Caches/a"), F_OK) == 0)
            #expect(access(idle.stored("tmp/scratch"), F_OK) == 0)
        }
        // Not mounted, with that much free: nothing goes, exit 0.
        let idleAlone = try containerfs(["purge", idle.store, "--caches", "--tmp", "--until-free", "1K"])
        #expect(idleAlone.status == 0 && idleAlone.stdout.isEmpty, "\(idleAlone)")
        #expect(access(idle.stored("tmp/scratch"), F_OK) == 0)
    }

    @Test func mountedContainersAreSkippedUnlessIncludedAndThenTheMountSeesThePurgeAtOnce() throws {
        try withMountedContainer { container in
            try Purging.seedUserData(container)
            let before = try Purging.userDataDigest(container)
            for name in ["a", "b", "sub/c"] { try Purging.write(container.mounted("Library/Caches/" + name), size: 100) }
            // The kernel has them cached: stat and list them first.
            #expect(Purging.listing(container.mounted("Library/Caches")) == ["a", "b", "sub"])
            #expect(errnoOf { access(container.mounted("Library/Caches/sub/c"), F_OK) } == 0)
            let skipped = try Purging.purge([container], ["--caches"])
            #expect(skipped.paths.isEmpty)
            #expect((skipped.json["skipped"] as? [[String: Any]])?.first?["store"] as? String == container.store)
            #expect(Purging.listing(container.stored("Library/Caches")) == ["CACHEDIR.TAG", "a", "b", "sub"])
            let text = try containerfs(["purge", container.store, "--caches"])
            #expect(text.stdout.contains("skipped \(container.store): mounted at"))

            // A program keeps writing to a file while it is purged: its writes go to the
            // unlinked file, nothing else changes.
            let writer = open(container.mounted("Library/Caches/a"), O_WRONLY | O_APPEND | O_CLOEXEC)
            #expect(writer >= 0)
            let purged = try Purging.purge([container], ["--caches", "--include-running"])
            #expect(Set(purged.paths) == ["Library/Caches/a", "Library/Caches/b", "Library/Caches/sub/c"])
            #expect(Purging.writeAll(writer, count: 64 << 10))
            close(writer)
            #expect(errnoOf { access(container.mounted("Library/Caches/a"), F_OK) } == ENOENT)
            #expect(errnoOf { access(container.mounted("Library/Caches/sub/c"), F_OK) } == ENOENT)
            // The folders it emptied go too (SPEC §10), and the mount sees it at once.
            #expect(Purging.listing(container.mounted("Library/Caches")) == [], "emptied folders go")
            #expect(Purging.listing(container.stored("Library/Caches")) == ["CACHEDIR.TAG"])
            #expect(try Purging.userDataDigest(container) == before)
            // The mount goes on working in the purged folder.
            try Purging.write(container.mounted("Library/Caches/a"), size: 5)
            #expect(Purging.size(container.stored("Library/Caches/a")) == 5)
        }
    }

    @Test func tmpIsEmptiedAtUnmount() throws {
        let container = try MountedContainer()
        try container.mount()
        try Purging.write(container.mounted("tmp/file"), size: 10)
        try FileManager.default.createDirectory(atPath: container.mounted("tmp/dir/deeper"), withIntermediateDirectories: true)
        try Purging.write(container.mounted("tmp/dir/deeper/file"), size: 10)
        symlink("/etc", container.mounted("tmp/link"))
        try Purging.write(container.mounted("Library/Caches/kept"), size: 10)
        try Purging.seedUserData(container)
        let before = try Purging.userDataDigest(container)
        container.unmount()
        #expect(Purging.listing(container.stored("tmp")) == ["CACHEDIR.TAG"])
        #expect(Purging.listing(container.stored("Library/Caches")) == ["CACHEDIR.TAG", "kept"])
        #expect(try Purging.userDataDigest(container) == before)
        #expect(FileManager.default.fileExists(atPath: "/etc/passwd"))
    }

    /// SPEC §10: a file written straight into the store's caches after the last mount (the
    /// daemon's index says nothing of it) is purged all the same.
    @Test func aCacheFileWrittenIntoTheStoreDirectlyIsPurged() throws {
        let container = try MountedContainer()
        try container.mount()
        try FileManager.default.createDirectory(atPath: container.mounted("Library/Caches/images"), withIntermediateDirectories: true)
        try Purging.write(container.mounted("Library/Caches/images/a"), size: 1000)
        container.unmount()
        try Purging.write(container.stored("Library/Caches/images/direct"), size: 2000)
        let result = try Purging.purge([container], ["--caches"])
        #expect(result.paths.sorted() == ["Library/Caches/images/a", "Library/Caches/images/direct"])
        #expect(result.freed == 3000)
        #expect(Purging.listing(container.stored("Library/Caches")) == ["CACHEDIR.TAG"])
    }

    /// A cache folder an ordinary user's purge could not enter (mode 000) is stamped in the
    /// index all the same: opened to read again and given a file, it is walked, and the
    /// file purged. Against an index that stamps only the folders it entered, the file
    /// stays, the index trusted (its parent's ctime never changed).
    @Test func aFolderPurgeCouldNotEnterIsStillWatched() throws {
        let user = "cfs-alice"
        let container = try MountedContainer(user: user)
        let folder = container.stored("Library/Caches/locked")
        #expect(try runProgram(["mkdir", folder], user: user).status == 0)
        #expect(try runProgram(["chmod", "000", folder], user: user).status == 0)
        let first = try containerfs(["purge", container.store, "--caches", "--all", "--json"], user: user)
        #expect(first.status == 0, "\(first)")
        #expect(try runProgram(["chmod", "755", folder], user: user).status == 0)
        #expect(try runProgram(["sh", "-c", "echo data > \"$1\"", "sh", folder + "/late"], user: user).status == 0)
        let second = try containerfs(["purge", container.store, "--caches", "--all", "--json"], user: user)
        #expect(second.status == 0, "\(second)")
        #expect(second.stdout.contains("\"path\":\"Library\\/Caches\\/locked\\/late\"") || second.stdout.contains("\"path\":\"Library/Caches/locked/late\""), "\(second)")
        #expect(access(folder + "/late", F_OK) != 0, "the file put into the folder once it opened is purged")
    }

    /// A group container has no tmp/: its index records that, and a tmp/ made behind
    /// containerfs's back with a file in it is walked and purged, as a walk would find it.
    /// Against an index that leaves a missing folder unstamped, the file is never a candidate.
    @Test func aTmpFolderMadeInAGroupContainerIsWatched() throws {
        let base = try makeTemporaryDirectory()
        defer { _ = try? runProgram(["rm", "-rf", base]) }
        let group = base + "/group.com.example.purge"
        #expect(try containerfs(["create-group", group]).status == 0)
        #expect(try containerfs(["purge", group, "--caches", "--tmp", "--all"]).status == 0)
        try Purging.write(group + "/tmp/late", size: 10)
        let result = try containerfs(["purge", group, "--tmp", "--all", "--json"])
        #expect(result.status == 0 && result.stdout.contains("late"), "\(result)")
        #expect(access(group + "/tmp/late", F_OK) != 0)
    }

    @Test func olderThanMimicsThePeriodicSweepOfTmp() throws {
        try withMountedContainer { container in
            try Purging.write(container.mounted("tmp/old"), size: 10)
            try Purging.write(container.mounted("tmp/new"), size: 10)
            #expect(try runProgram(["touch", "-d", "4 days ago", container.mounted("tmp/old")]).status == 0)
            let result = try Purging.purge([container], ["--tmp", "--older-than", "3d", "--include-running"])
            #expect(result.paths == ["tmp/old"])
            #expect(Purging.listing(container.mounted("tmp")) == ["new"])
        }
    }

    @Test func symlinksInCachesAreNeverFollowed() throws {
        let outside = try makeTemporaryDirectory()
        defer { _ = try? runProgram(["rm", "-rf", outside]) }
        try FileManager.default.createDirectory(atPath: outside + "/dir", withIntermediateDirectories: true)
        try Data("precious".utf8).write(to: URL(fileURLWithPath: outside + "/dir/file"))
        try Data("precious".utf8).write(to: URL(fileURLWithPath: outside + "/file"))
        let digest = try treeDigest(outside)
        try withMountedContainer { container in
            symlink(outside + "/dir", container.mounted("Library/Caches/dirlink"))
            symlink(outside + "/file", container.mounted("Library/Caches/filelink"))
            symlink(outside, container.mounted("tmp/link"))
            try Purging.write(container.mounted("Library/Caches/real"), size: 10)
            let result = try Purging.purge([container], ["--caches", "--tmp", "--include-running"])
            #expect(result.paths == ["Library/Caches/real"])
            #expect(Purging.listing(container.stored("Library/Caches")) == ["CACHEDIR.TAG", "dirlink", "filelink"])
        }
        #expect(try treeDigest(outside) == digest)
    }

    @Test func badArgumentsAndMissingStoresGiveOneLine() throws {
        let container = try MountedContainer()
        let cases: [([String], Int32, String)] = [
            ([container.store, "--caches", "--free", "12Q"], 64, "bad size '12Q'"),
            ([container.store, "--caches", "--free=-5"], 64, "bad size"),
            ([container.store, "--caches", "--older-than", "3y"], 64, "bad duration '3y'"),
            ([container.store], 64, "--caches"),
            ([container.store, "--caches", "--all", "--free", "1K"], 64, "--all and --free"),
            ([container.base + "/missing", "--caches"], 1, "no store at \(container.base)/missing"),
            ([container.base, "--caches"], 1, "not a container store"),
        ]
        for (arguments, status, message) in cases {
            let result = try containerfs(["purge"] + arguments)
            #expect(result.status == status, "\(arguments): \(result)")
            #expect(result.stderr.contains(message), "\(arguments): \(result.stderr)")
            #expect(result.stderr.split(separator: "\n").count == 1, "\(arguments): \(result.stderr)")
            #expect(result.stdout.isEmpty)
        }
    }
}

/// Helpers for the purge, tag and usage tests.
/// Every descriptor here is opened with `O_CLOEXEC`. The tests of a parallel run spawn
/// programs from other threads, and Foundation's `Process` closes in the child only the
/// descriptors open when it looked (`/proc/self/fd`): one opened meanwhile without it
/// stays open in that program (a mount's daemon, say) for as long as it runs. The file is
/// then released only when that program exits, seconds later, and the daemon records a
/// descriptor held over a second as a use when released (`Tagging.released`): the use
/// lands after later ones, and the order purge follows is not the order of the uses.
enum Purging {
    /// What `containerfs purge … --json` reported.
    struct Result {
        var json: [String: Any]
        var deleted: [[String: Any]] { json["deleted"] as? [[String: Any]] ?? [] }
        var paths: [String] { deleted.map { $0["path"] as? String ?? "?" } }
        var stores: [String] { deleted.map { $0["store"] as? String ?? "?" } }
        var freed: Int { json["freedBytes"] as? Int ?? -1 }
    }

    /// Runs `containerfs purge STORES… ARGUMENTS --json` and expects success.
    static func purge(_ containers: [MountedContainer], _ arguments: [String]) throws -> Result {
        let result = try containerfs(["purge"] + containers.map(\.store) + arguments + ["--json"])
        guard result.status == 0 else { throw TestFailure("containerfs purge failed: \(result)") }
        guard let json = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any] else {
            throw TestFailure("purge printed no JSON object: \(result)")
        }
        return Result(json: json)
    }

    /// Creates (or replaces) `path` with `size` bytes.
    static func write(_ path: String, size: Int) throws {
        let directory = (path as NSString).deletingLastPathComponent
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw TestFailure("open \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        guard writeAll(fd, count: size) else { throw TestFailure("write \(path): \(String(cString: strerror(errno)))") }
    }

    /// Writes `count` bytes of `x` to `fd`.
    static func writeAll(_ fd: Int32, count: Int) -> Bool {
        let bytes = [UInt8](repeating: UInt8(ascii: "x"), count: count)
        var offset = 0
        while offset < count {
            let written = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + offset, count - offset) }
            if written <= 0 { return false }
            offset += written
        }
        return true
    }

    /// Uses an existing file as a program would: open it, read it whole, close it.
    static func read(_ path: String) throws {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw TestFailure("open \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 65536)
        while buffer.withUnsafeMutableBytes({ Glibc.read(fd, $0.baseAddress, $0.count) }) > 0 {}
    }

    /// Appends one byte to an existing file.
    static func append(_ path: String) throws {
        let fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC)
        guard fd >= 0 else { throw TestFailure("open \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        _ = writeAll(fd, count: 1)
    }

    /// Opens and closes a file without reading it.
    static func touchOpen(_ path: String) throws {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw TestFailure("open \(path): \(String(cString: strerror(errno)))") }
        close(fd)
    }

    /// The names in a folder, sorted; empty if it cannot be read.
    static func listing(_ path: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted()
    }

    static func size(_ path: String) -> Int {
        var info = stat()
        return lstat(path, &info) == 0 ? Int(info.st_size) : -1
    }

    /// Puts user data in every backed-up folder through the mount, and a delivered file
    /// in the Inbox, for `userDataDigest` to watch.
    static func seedUserData(_ container: MountedContainer) throws {
        for path in ["Documents/notes.txt", "Documents/sub/deep.bin", "Library/own.db",
                     "Library/Application Support/state.json", "Library/Preferences/prefs.plist"] {
            try write(container.mounted(path), size: 321)
        }
        let source = container.base + "/handed-over.pdf"
        try Data(repeating: 0x25, count: 99).write(to: URL(fileURLWithPath: source))
        let delivered = try containerfs(["deliver", container.store, source])
        guard delivered.status == 0 else { throw TestFailure("deliver failed: \(delivered)") }
    }

    /// The user's data and the bundle, in the store: what no purge may change.
    static func userDataDigest(_ container: MountedContainer) throws -> String {
        let folders = ["Documents", "Documents/Inbox", "Library", "Library/Application Support", "Library/Preferences"]
        var digest = try treeDigest(container.stored(container.bundleName))
        for folder in folders {
            // Library's own digest leaves Caches out: that is what purge changes.
            let result = try runProgram(["bash", "-o", "pipefail", "-c", """
                cd "$1" && find . -path ./Caches -prune -o -path ./Inbox -prune -o -print0 | LC_ALL=C sort -z | xargs -0 stat -c '%n %s %a %F %Y' \
                && find . -path ./Caches -prune -o -path ./Inbox -prune -o -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum
                """, "bash", container.stored(folder)])
            // An unreadable folder is a failure, not an empty digest that matches another.
            guard result.status == 0, result.stderr.isEmpty else { throw TestFailure("cannot digest \(folder): \(result)") }
            digest += folder + ":\n" + result.stdout
        }
        return digest
    }

    /// The daemon's pid: the first line of the store's mount lock.
    static func daemonPID(_ container: MountedContainer) throws -> pid_t {
        let text = try String(contentsOfFile: container.stored(".containerfs/mount.lock"), encoding: .utf8)
        guard let pid = pid_t(text.split(separator: "\n").first ?? "") else { throw TestFailure("no pid in mount.lock: \(text)") }
        return pid
    }
}
