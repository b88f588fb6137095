import Foundation
import Glibc
import Testing

/// A chain of folders deeper than the descriptor limit and than recursion on a small stack
/// allows, as a confined program can make one: every command that walks the store, and
/// the daemon's count at mount, go on (they walk on a `FolderChain`). Each command runs
/// under `prlimit` with 256 descriptors and a 1 MiB stack, so the depth that proves it
/// stays small enough for a quick test.
@Suite("Deep trees")
struct DeepTreeTests {
    static let depth = 2_000
    static let limits = ["prlimit", "--nofile=256:256", "--stack=1048576", "--"]

    /// `run`'s cleanup of tmp/ recursed (a crash at about 6,000 levels on the main thread's
    /// stack, tmp never purged and every later run crashing) and held a descriptor per level.
    @Test func aRunThatLeavesADeepChainInTmpIsCleanedUp() throws {
        let container = try MountedContainer()
        let script = """
            import os
            os.chdir(os.environ["TMPDIR"])
            for _ in range(\(Self.depth)):
                os.mkdir("d")
                os.chdir("d")
            open("f", "w").write("bottom")
            """
        let first = try runProgram(Self.limits + [containerfsBinary, "run", container.store, "--", "python3", "-c", script])
        #expect(first.status == 0, "\(first)")
        #expect(first.stderr == "", "no warning of entries left")
        try expectCleanedUp(container)
        let second = try containerfsRun(container, ["true"])
        #expect(second.status == 0, "\(second)")
    }

    /// usage, capacity, backup and restore, purge and the daemon's count at mount, on a store
    /// holding a chain in Documents, Library/Caches and tmp.
    @Test func everyWalkOfTheStoreReachesTheBottom() throws {
        let container = try MountedContainer()
        try makeChain(container.stored("Documents"), bottom: "docs!")
        try makeChain(container.stored("Library/Caches"), bottom: "abc")
        try makeChain(container.stored("tmp"), bottom: "t")

        let usage = try runProgram(Self.limits + [containerfsBinary, "usage", container.store, "--json"])
        #expect(usage.status == 0, "\(usage)")
        let stores = try JSONSerialization.jsonObject(with: Data(usage.stdout.utf8)) as? [[String: Any]]
        let areas = try #require(stores?.first?["areas"] as? [[String: Any]])
        let bytes = Dictionary(uniqueKeysWithValues: areas.map { ($0["area"] as? String ?? "?", $0["bytes"] as? Int ?? -1) })
        #expect(bytes["Documents"] == 5 && bytes["Caches"] == 3 && bytes["tmp"] == 1, "\(bytes)")

        // Each chain's folders take a block or more: the count went all the way down.
        let capacity = try runProgram(Self.limits + [containerfsBinary, "capacity", container.store, "1G"])
        #expect(capacity.status == 0, "\(capacity)")
        let used = try #require(Int(capacity.stdout.split(separator: ";").last?.split(separator: " ")[1] ?? ""))
        #expect(used > 3 * Self.depth * 4096, "\(capacity.stdout)")

        // The daemon counts at mount, with the same limits.
        let mounted = try runProgram(Self.limits + [containerfsBinary, "mount", container.store, container.mountpoint])
        #expect(mounted.status == 0, "\(mounted)")
        var device = statvfs()
        #expect(statvfs(container.mountpoint, &device) == 0)
        let mountUsed = Int(device.f_blocks - device.f_bfree) * Int(device.f_frsize)
        #expect(abs(mountUsed - used) < 1 << 20, "the daemon's count (\(mountUsed)) is the command's (\(used))")
        #expect(try containerfs(["unmount", container.mountpoint]).status == 0)

        let archive = container.base + "/deep.tar"
        let backup = try runProgram(Self.limits + [containerfsBinary, "backup", container.store, archive])
        #expect(backup.status == 0, "\(backup)")
        let restored = container.base + "/restored"
        let restore = try runProgram(Self.limits + [containerfsBinary, "restore", archive, restored, "--bundle", container.base + "/Demo.app"])
        #expect(restore.status == 0, "\(restore)")
        #expect(try readBottom(restored + "/Documents") == "docs!")

        let purge = try runProgram(Self.limits + [containerfsBinary, "purge", container.store, "--caches", "--tmp"])
        #expect(purge.status == 0, "\(purge)")
        #expect(!FileManager.default.fileExists(atPath: container.stored("Library/Caches/d")),
                "the cache file at the bottom is purged, and the folders it emptied with it")
        #expect(try readBottom(container.stored("Documents")) == "docs!")
    }

    /// create copies and signs a bundle holding a deep chain; verify walks it again.
    @Test func aBundleWithADeepChainIsInstalledAndVerified() throws {
        let base = try makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: base) }
        let bundle = base + "/Deep.app"
        try FileManager.default.createDirectory(atPath: bundle, withIntermediateDirectories: true)
        try Data("<plist/>".utf8).write(to: URL(fileURLWithPath: bundle + "/Info.plist"))
        try makeChain(bundle, bottom: "resource")
        let created = try runProgram(Self.limits + [containerfsBinary, "create", base + "/store", "--bundle", bundle])
        #expect(created.status == 0, "\(created)")
        #expect(try readBottom(base + "/store/Deep.app") == "resource")
        let verified = try runProgram(Self.limits + [containerfsBinary, "verify", base + "/store", "--full"])
        #expect(verified.status == 0, "\(verified)")
    }
}

/// Makes a chain of `DeepTreeTests.depth` folders `d` in `folder`, with a file `f` holding
/// `bottom` at the bottom, through descriptors (the chain is longer than PATH_MAX allows).
private func makeChain(_ folder: String, bottom: String) throws {
    var fd = open(folder, O_RDONLY | O_DIRECTORY)
    guard fd >= 0 else { throw TestFailure("open \(folder): \(String(cString: strerror(errno)))") }
    for _ in 0..<DeepTreeTests.depth {
        let child = mkdirat(fd, "d", 0o755) == 0 ? openat(fd, "d", O_RDONLY | O_DIRECTORY) : -1
        close(fd)
        guard child >= 0 else { throw TestFailure("mkdirat: \(String(cString: strerror(errno)))") }
        fd = child
    }
    defer { close(fd) }
    let file = openat(fd, "f", O_WRONLY | O_CREAT | O_EXCL, 0o644)
    guard file >= 0 else { throw TestFailure("create f: \(String(cString: strerror(errno)))") }
    defer { close(file) }
    guard Array(bottom.utf8).withUnsafeBytes({ write(file, $0.baseAddress, $0.count) }) == bottom.utf8.count else {
        throw TestFailure("write f: \(String(cString: strerror(errno)))")
    }
}

/// What the file at the bottom of the chain in `folder` holds, or nil if it is gone.
private func readBottom(_ folder: String) throws -> String? {
    var fd = open(folder, O_RDONLY | O_DIRECTORY)
    guard fd >= 0 else { throw TestFailure("open \(folder): \(String(cString: strerror(errno)))") }
    for _ in 0..<DeepTreeTests.depth {
        let child = openat(fd, "d", O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
        close(fd)
        guard child >= 0 else { throw TestFailure("the chain in \(folder) is cut: \(String(cString: strerror(errno)))") }
        fd = child
    }
    defer { close(fd) }
    let file = openat(fd, "f", O_RDONLY)
    guard file >= 0 else { return nil }
    defer { close(file) }
    var buffer = [UInt8](repeating: 0, count: 64)
    let count = read(file, &buffer, buffer.count)
    return count < 0 ? nil : String(decoding: buffer.prefix(count), as: UTF8.self)
}
