import ContainerPolicy
import Dispatch
import Foundation
import Glibc
import Testing

@testable import ContainerPurge
@testable import ContainerStore

// Values from outside the process that used to stop it (issue 19's trap sites): extreme
// times and sizes in the store, a use table truncated under its mapping, folder chains
// deeper than a thread's stack, state files replaced by FIFOs. Each test failed (trapped,
// crashed or hung) against the code before its fix. The backup set's share is in
// ContainerBackupTests/BackupSetLimitTests.swift.

/// A tmpfs of our own, mounted in a new folder of /tmp and unmounted afterwards. tmpfs
/// allows sparse files of up to 2^63 − 1 bytes, and is another device than /tmp.
final class TemporaryTmpfs {
    let path: String

    init() throws {
        var template = Array("/tmp/containerfs-tmpfs-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw Errno.current }
        path = String(cString: made)
        guard mount("tmpfs", path, "tmpfs", 0, "size=64m,mode=0755") == 0 else {
            let error = Errno.current
            rmdir(path)
            throw error
        }
    }

    deinit {
        umount2(path, Int32(MNT_DETACH))
        rmdir(path)
    }
}

/// Runs `body` on a thread of its own with a `stackKiB` stack; false if it has not
/// returned within `seconds` (the thread is then left behind, blocked).
private func finishes(within seconds: Double, stackKiB: Int = 512, _ body: @escaping () -> Void) -> Bool {
    /// The body runs on the new thread while this one only waits for it.
    struct Body: @unchecked Sendable { let run: () -> Void }
    let work = Body(run: body)
    let done = DispatchSemaphore(value: 0)
    let thread = Thread {
        work.run()
        done.signal()
    }
    thread.stackSize = stackKiB * 1024
    thread.start()
    return done.wait(timeout: .now() + seconds) == .success
}

/// Runs `body` with the process's soft descriptor limit at `limit`, then puts it back.
private func withSoftDescriptorLimit<Result>(_ limit: rlim_t, _ body: () throws -> Result) throws -> Result {
    let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
    var saved = rlimit()
    try #require(getrlimit(resource, &saved) == 0)
    var lowered = saved
    lowered.rlim_cur = min(limit, saved.rlim_max)
    try #require(setrlimit(resource, &lowered) == 0)
    defer { setrlimit(resource, &saved) }
    return try body()
}

/// Makes a chain of `depth` folders named `d` below the folder `top` of the store, with a
/// file `f` of `size` bytes at the bottom; returns the file's path relative to the store.
/// Through descriptors: the chain is far longer than PATH_MAX.
private func makeChain(_ scratch: PurgeScratch, below top: String, depth: Int, size: Int = 1) throws -> String {
    var fd = open(scratch.root + "/" + top, O_RDONLY | O_DIRECTORY)
    guard fd >= 0 else { throw Errno.current }
    for _ in 0..<depth {
        guard mkdirat(fd, "d", 0o755) == 0 else { throw Errno.current }
        let child = openat(fd, "d", O_RDONLY | O_DIRECTORY)
        close(fd)
        guard child >= 0 else { throw Errno.current }
        fd = child
    }
    let file = openat(fd, "f", O_WRONLY | O_CREAT, 0o644)
    close(fd)
    guard file >= 0 else { throw Errno.current }
    // Written, not truncated to size: the file takes blocks, as the capacity counts them.
    _ = [UInt8](repeating: 0x78, count: size).withUnsafeBytes { write(file, $0.baseAddress, size) }
    close(file)
    return top + String(repeating: "/d", count: depth) + "/f"
}

@Suite("Values from outside")
struct OutsideValueTests {
    /// A program may set a file time past 2262 (`touch -d 2300-01-01`); as nanoseconds it
    /// exceeds Int64. Its tag's last use is the latest time there is, and the index of the
    /// end of a mount, purge and usage go on.
    @Test func aFileTimePast2262IsTheLatestLastUse() throws {
        let scratch = try PurgeScratch()
        try scratch.file("Library/Caches/old", size: 1, secondsAgo: 60)
        try scratch.file("Library/Caches/future", size: 1, secondsAgo: 0)
        var times = [timespec(tv_sec: 10_000_000_000, tv_nsec: 0), timespec(tv_sec: 10_000_000_000, tv_nsec: 999_999_999)]
        try #require(utimensat(AT_FDCWD, scratch.root + "/Library/Caches/future", &times, 0) == 0)
        let tags = Tags.scan(scratch.store)
        #expect(tags.first { String(decoding: $0.path, as: UTF8.self) == "Library/Caches/future" }?.lastUse == Int64.max)
        #expect(TagIndex.rebuild(scratch.store).count == 2)
        #expect(TagIndex.load(scratch.store)?.tags.count == 2)
        let report = try Purge.purge([scratch.store], .init(kinds: [.cache], free: 1))
        #expect(report.deleted.map { String(decoding: $0.tag.path, as: UTF8.self) } == ["Library/Caches/old"])
        #expect(scratch.exists("Library/Caches/future"))
    }

    /// `--older-than` past what nanoseconds can count is refused by the parser; given to
    /// the library anyway (or infinite), it saturates: no file is that old.
    @Test func anOlderThanBeyondTimeItselfLeavesEveryFile() throws {
        #expect(Quantity.seconds("10000000000") == nil)
        #expect(Quantity.seconds("292y") == nil)
        #expect(Quantity.seconds("15000w") != nil, "287 years is still a duration")
        let scratch = try PurgeScratch()
        try scratch.file("tmp/old", size: 1, secondsAgo: 86400)
        for seconds in [1e10, 1e300, .infinity, .nan] {
            let report = try Purge.purge([scratch.store], .init(kinds: [.temporary], olderThan: seconds, dryRun: true))
            #expect(report.deleted.isEmpty, "older than \(seconds) s")
        }
        let all = try Purge.purge([scratch.store], .init(kinds: [.temporary], olderThan: -1e300, dryRun: true))
        #expect(all.deleted.count == 1, "a negative duration: every file is older")
    }

    /// Two sparse files of 5 EiB (tmpfs allows them) claim more bytes than Int64 holds:
    /// usage and purge hold their totals at Int64.max.
    @Test func sizesBeyondInt64AreHeldAtItsMaximum() throws {
        let tmpfs = try TemporaryTmpfs()
        let scratch = try PurgeScratch(in: tmpfs.path)
        let fiveEiB: off_t = 5 << 60
        for path in ["Library/Caches/a", "Library/Caches/b", "Documents/a", "Documents/b"] {
            try scratch.file(path, size: 0, secondsAgo: 10)
            try #require(truncate(scratch.root + "/" + path, fiveEiB) == 0, "tmpfs allows a sparse file of 5 EiB")
        }
        let usage = StorageUsage.measure(scratch.store)
        #expect(usage.areas.first { $0.name == "Caches" }?.bytes == Int64.max)
        #expect(usage.areas.first { $0.name == "Documents" }?.bytes == Int64.max)
        #expect(usage.totalBytes == Int64.max)
        let dry = try Purge.purge([scratch.store], .init(kinds: [.cache], dryRun: true))
        #expect(dry.deleted.count == 2 && dry.freedBytes == Int64.max)
        // The same from an index that claims it (sizes are not checked against the files).
        let identity = TagIndex.mountIdentity(scratch.store)
        let planted = dry.deleted.map { ContainerPurge.Tag(kind: .cache, path: $0.tag.path, size: .max, lastUse: 0, inode: $0.tag.inode) }
        TagIndex.write(scratch.store, planted, identity: identity)
        let fromIndex = try Purge.purge([scratch.store], .init(kinds: [.cache], dryRun: true))
        #expect(fromIndex.walked.isEmpty && fromIndex.freedBytes == Int64.max)
        // A negative size is damage: the index is not trusted.
        TagIndex.write(scratch.store, [ContainerPurge.Tag(kind: .cache, path: planted[0].path, size: -1, lastUse: 0, inode: planted[0].inode)], identity: identity)
        #expect(TagIndex.load(scratch.store) == nil)
        #expect(Int64.max.addingSaturated(1) == .max && Int64.min.addingSaturated(-1) == .min)
        #expect(Int64.min.subtractingSaturated(1) == .min && Int64(5).subtractingSaturated(.min) == .max)
        #expect(Int64(saturatingNanoseconds: timespec(tv_sec: -10_000_000_000, tv_nsec: 0)) == .min)
    }

    /// The store's owner can truncate `.containerfs/uses` while it is mapped: the pages past
    /// its end become private zero pages instead of a SIGBUS, for the writer and readers.
    @Test func aUseTableTruncatedWhileMappedDoesNotStopTheProcess() throws {
        let scratch = try PurgeScratch()
        let writer = try #require(UseTable.openForWriting(scratch.store))
        let reader = try #require(UseTable.openForReading(scratch.store))
        writer.record(inode: 42, at: 1000)
        #expect(reader.lastUse(inode: 42) == 1000)
        try #require(truncate(scratch.root + "/.containerfs/uses", 0) == 0)
        #expect(reader.lastUse(inode: 42) == 0, "a truncated table has no record")
        writer.record(inode: 42, at: 2000)
        #expect(writer.lastUse(inode: 42) == 2000, "the writer goes on in memory")
        for inode in stride(from: UInt64(1), to: 1 << 20, by: 997) { writer.record(inode: inode, at: 3) }
        // A table cut short is not trusted by the next reader, and made anew by the next writer.
        #expect(UseTable.openForReading(scratch.store) == nil)
        #expect(UseTable.openForWriting(scratch.store)?.lastUse(inode: 42) == 0)
    }

    /// Folder chains deeper than a thread's stack allows recursion for, and deeper than the
    /// descriptor limit: the walks of purge, usage, the capacity's count and emptying tmp
    /// iterate on a `FolderChain` (and removeTree, which emptying tmp uses).
    @Test func folderChainsDeeperThanTheStackAndTheDescriptorLimitAreWalked() throws {
        // On a tmpfs: thousands of rmdir on a busy disk take seconds each hundred.
        let tmpfs = try TemporaryTmpfs()
        let scratch = try PurgeScratch(in: tmpfs.path)
        let depth = 3000
        let cache = try makeChain(scratch, below: "Library/Caches", depth: depth, size: 3)
        _ = try makeChain(scratch, below: "Documents", depth: depth, size: 5)
        _ = try makeChain(scratch, below: "tmp", depth: depth)
        let store = scratch.store
        var tags: [ContainerPurge.Tag] = []
        var usage: StorageUsage?
        var removed = 0
        var used: (before: Int64, after: Int64) = (0, 0)
        // 128 KiB of stack: the recursive walks needed far more than 44 bytes a level. And
        // 256 descriptors: the walks that held one per level ran out.
        let walked = try withSoftDescriptorLimit(256) {
            finishes(within: 120, stackKiB: 128) {
                tags = Tags.scan(store)
                usage = StorageUsage.measure(store)
                used.before = Capacity.usedBytes(rootFD: store.rootFD)
                removed = Purge.emptyTemporary(store).removed
                used.after = Capacity.usedBytes(rootFD: store.rootFD)
            }
        }
        try #require(walked)
        // tmpfs gives folders no blocks: the difference is the file at the bottom of tmp's chain.
        #expect(used.before - used.after == 4096, "the capacity's count reached the bottom")
        #expect(tags.map { String(decoding: $0.path, as: UTF8.self) }.sorted() == [cache, "tmp" + String(repeating: "/d", count: depth) + "/f"])
        #expect(usage?.areas.first { $0.name == "Caches" }?.bytes == 3)
        #expect(usage?.areas.first { $0.name == "Documents" }?.bytes == 5)
        #expect(removed == 1)
        #expect(try FileManager.default.contentsOfDirectory(atPath: scratch.root + "/tmp") == ["CACHEDIR.TAG"])
        let documents = open(scratch.root + "/Documents", O_RDONLY | O_DIRECTORY)
        let caches = open(scratch.root + "/Library/Caches", O_RDONLY | O_DIRECTORY)
        defer { close(documents); close(caches) }
        let removedTrees = try withSoftDescriptorLimit(256) {
            finishes(within: 120, stackKiB: 128) {
                removeTree(at: documents, Array("d".utf8))
                removeTree(at: caches, Array("d".utf8))
            }
        }
        try #require(removedTrees)
        #expect(!scratch.exists("Library/Caches/d") && !scratch.exists("Documents/d"))
    }

    /// A state file replaced by a FIFO: reading it fails at once (`EINVAL`) instead of
    /// blocking the daemon or the command for ever, and the audit writer does not stall.
    @Test(arguments: ["tags", "format", "uses", "mount.lock", "audit.log"])
    func aStateFileReplacedByAFIFODoesNotBlock(_ name: String) throws {
        let scratch = try PurgeScratch()
        let path = scratch.root + "/.containerfs/" + name
        unlink(path)
        try #require(mkfifo(path, 0o600) == 0)
        let store = scratch.store
        let root = scratch.root
        var readError: Errno?
        var table: UseTable?
        let finished = finishes(within: 10) {
            do { _ = try readFile(at: store.stateFD, Array(name.utf8)) } catch { readError = error as? Errno }
            _ = TagIndex.load(store)
            _ = Tags.scan(store)
            _ = MountLock.holder(store)
            table = UseTable.openForReading(store)
            _ = try? Store.open(root)
            let log = AuditLog(stateFD: store.stateFD)
            log.record(pid: getpid(), uid: 0, operation: "unlink", paths: [.root], areas: [.bundle], denial: .bundleIsReadOnly)
            log.close()
        }
        #expect(finished, "\(name) as a FIFO blocked")
        guard finished else { return }
        #expect(readError == Errno(EINVAL))
        #expect(table == nil || name != "uses")
    }
}
