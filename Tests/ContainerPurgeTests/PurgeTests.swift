import ContainerPolicy
import Foundation
import Glibc
import Testing

@testable import ContainerPurge
@testable import ContainerStore

/// A fresh store in a temporary folder, removed afterwards, with helpers to place tagged
/// files behind any mount's back (as a crashed daemon leaves them) and to set their use.
final class PurgeScratch {
    let base: String
    let store: Store

    /// In a new folder inside `parent`.
    init(in parent: String = "/tmp") throws {
        var template = Array((parent + "/containerfs-purge-XXXXXX").utf8CString)
        base = String(cString: mkdtemp(&template)!)
        try FileManager.default.createDirectory(atPath: base + "/Demo.app", withIntermediateDirectories: true)
        try Data("plist".utf8).write(to: URL(fileURLWithPath: base + "/Demo.app/Info.plist"))
        store = try Store.create(at: base + "/store", bundle: base + "/Demo.app")
    }

    deinit { try? FileManager.default.removeItem(atPath: base) }

    var root: String { base + "/store" }

    /// Writes `size` bytes at `relative` in the store, last used `secondsAgo` ago.
    func file(_ relative: String, size: Int, secondsAgo: Double) throws {
        let path = root + "/" + relative
        try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try Data(repeating: 0x61, count: size).write(to: URL(fileURLWithPath: path))
        try setUse(relative, secondsAgo: secondsAgo)
    }

    func setUse(_ relative: String, secondsAgo: Double) throws {
        let when = Purge.realtimeNanoseconds() - Int64(secondsAgo * 1e9)
        let time = timespec(tv_sec: Int(when / 1_000_000_000), tv_nsec: Int(when % 1_000_000_000))
        var times = [time, time]
        guard utimensat(AT_FDCWD, root + "/" + relative, &times, AT_SYMLINK_NOFOLLOW) == 0 else { throw Errno.current }
    }

    func exists(_ relative: String) -> Bool {
        var info = stat()
        return lstat(root + "/" + relative, &info) == 0
    }
}

private func paths(_ report: Purge.Report) -> [String] {
    report.deleted.map { String(decoding: $0.tag.path, as: UTF8.self) }
}

@Suite("Purge (store)")
struct PurgeStoreTests {
    @Test(arguments: [
        ("123", 123), ("0", 0), ("10K", 10 << 10), ("5M", 5 << 20), ("2G", 2 << 30), ("1t", 1 << 40),
        ("5MB", 5 << 20), ("5MiB", 5 << 20),
    ] as [(String, Int64)])
    func sizesParse(_ text: String, _ bytes: Int64) {
        #expect(Quantity.bytes(text) == bytes)
    }

    @Test(arguments: ["", "K", "-5", "1.5G", "5X", "ten", "99999999999999999999", "9999999999T"])
    func badSizesAreRefused(_ text: String) {
        #expect(Quantity.bytes(text) == nil)
    }

    @Test(arguments: [("30s", 30), ("30", 30), ("10m", 600), ("2h", 7200), ("3d", 259_200), ("1w", 604_800), ("1.5m", 90)] as [(String, Double)])
    func durationsParse(_ text: String, _ seconds: Double) {
        #expect(Quantity.seconds(text) == seconds)
    }

    /// Beyond what nanoseconds since the epoch can count (about 292 years), or not finite.
    @Test(arguments: ["", "d", "3y", "-1d", "three days", "10000000000", "10000000000s", "1000000w", String(repeating: "9", count: 400)])
    func badDurationsAreRefused(_ text: String) {
        #expect(Quantity.seconds(text) == nil)
    }

    @Test func scanFindsRegularFilesBelowCachesAndTmpOnly() throws {
        let scratch = try PurgeScratch()
        try scratch.file("Library/Caches/a", size: 10, secondsAgo: 30)
        try scratch.file("Library/Caches/deep/er/b", size: 20, secondsAgo: 20)
        try scratch.file("tmp/t", size: 5, secondsAgo: 10)
        try scratch.file("Library/keep", size: 7, secondsAgo: 100)
        try scratch.file("Documents/keep", size: 7, secondsAgo: 100)
        symlink("/etc", scratch.root + "/Library/Caches/etc")
        symlink("/etc/passwd", scratch.root + "/Library/Caches/passwd")
        mkfifo(scratch.root + "/tmp/fifo", 0o600)
        let tags = Tags.scan(scratch.store).sorted { $0.lastUse < $1.lastUse }
        #expect(tags.map { String(decoding: $0.path, as: UTF8.self) } == ["Library/Caches/a", "Library/Caches/deep/er/b", "tmp/t"])
        #expect(tags.map(\.size) == [10, 20, 5])
        #expect(tags.map(\.kind) == [.cache, .cache, .temporary])
    }

    @Test func lastUseIsTheLaterOfAccessAndModification() throws {
        let scratch = try PurgeScratch()
        try scratch.file("Library/Caches/a", size: 1, secondsAgo: 100)
        // UTIME_NOW and UTIME_OMIT (Linux's values; Glibc's Swift module lacks them).
        var times = [timespec(tv_sec: 0, tv_nsec: (1 << 30) - 1), timespec(tv_sec: 0, tv_nsec: (1 << 30) - 2)]
        utimensat(AT_FDCWD, scratch.root + "/Library/Caches/a", &times, 0)
        let tag = try #require(Tags.scan(scratch.store).first)
        #expect(abs(tag.lastUse - Purge.realtimeNanoseconds()) < 5_000_000_000)
    }

    @Test func theUseTableOrdersBeyondTheFilesOwnTimes() throws {
        let scratch = try PurgeScratch()
        try scratch.file("Library/Caches/a", size: 1, secondsAgo: 30)
        try scratch.file("Library/Caches/b", size: 1, secondsAgo: 20)
        var info = stat()
        stat(scratch.root + "/Library/Caches/a", &info)
        // The daemon saw `a` used a moment ago: it is now the more recent.
        let table = try #require(UseTable.openForWriting(scratch.store))
        table.record(inode: UInt64(info.st_ino), at: Purge.realtimeNanoseconds())
        #expect(table.lastUse(inode: UInt64(info.st_ino)) > 0)
        #expect(table.lastUse(inode: UInt64(info.st_ino) + 1) == 0)
        let report = try Purge.purge([scratch.store], .init(kinds: [.cache], dryRun: true))
        #expect(paths(report) == ["Library/Caches/b", "Library/Caches/a"])
        // A damaged table is made anew by the daemon, and ignored by readers.
        truncate(scratch.root + "/.containerfs/uses", 100)
        #expect(UseTable.openForReading(scratch.store) == nil)
        #expect(UseTable.openForWriting(scratch.store)?.lastUse(inode: UInt64(info.st_ino)) == 0)
    }

    @Test func leastRecentlyUsedFirstAndFreeStopsOnceEnoughIsFreed() throws {
        let scratch = try PurgeScratch()
        try scratch.file("Library/Caches/newest", size: 1000, secondsAgo: 1)
        try scratch.file("Library/Caches/oldest", size: 1000, secondsAgo: 40)
        try scratch.file("Library/Caches/old", size: 3000, secondsAgo: 30)
        try scratch.file("Library/Caches/middle", size: 1000, secondsAgo: 20)
        try scratch.file("tmp/other-kind", size: 99999, secondsAgo: 100)
        let dry = try Purge.purge([scratch.store], .init(kinds: [.cache], free: 3500, dryRun: true))
        #expect(paths(dry) == ["Library/Caches/oldest", "Library/Caches/old"])
        #expect(dry.freedBytes == 4000)
        #expect(scratch.exists("Library/Caches/oldest"), "a dry run deletes nothing")
        let report = try Purge.purge([scratch.store], .init(kinds: [.cache], free: 3500))
        #expect(paths(report) == ["Library/Caches/oldest", "Library/Caches/old"])
        #expect(!scratch.exists("Library/Caches/oldest") && !scratch.exists("Library/Caches/old"))
        #expect(scratch.exists("Library/Caches/middle") && scratch.exists("tmp/other-kind"))
        #expect(scratch.exists("Library/Caches/CACHEDIR.TAG"))
    }

    @Test func aStoreNamedTwiceIsPurgedOnce() throws {
        let scratch = try PurgeScratch()
        try scratch.file("Library/Caches/a", size: 1, secondsAgo: 10)
        let again = try Store.open(scratch.root + "/")
        let report = try Purge.purge([scratch.store, again], .init(kinds: [.cache], dryRun: true))
        #expect(paths(report) == ["Library/Caches/a"])
    }

    @Test func olderThanLeavesRecentFiles() throws {
        let scratch = try PurgeScratch()
        try scratch.file("tmp/week-old", size: 1, secondsAgo: 7 * 86400)
        try scratch.file("tmp/fresh", size: 1, secondsAgo: 60)
        let report = try Purge.purge([scratch.store], .init(kinds: [.temporary], olderThan: 3 * 86400))
        #expect(paths(report) == ["tmp/week-old"])
        #expect(scratch.exists("tmp/fresh"))
    }

    @Test func theIndexIsUsedWhenItMatchesTheLastMountAndRebuiltOtherwise() throws {
        let scratch = try PurgeScratch()
        try scratch.file("Library/Caches/a", size: 1, secondsAgo: 10)
        // First purge: no index, the store is walked and an index written.
        let first = try Purge.purge([scratch.store], .init(kinds: [.cache], free: 0))
        #expect(first.walked == [0])
        #expect(TagIndex.load(scratch.store)?.tags.count == 1)
        let second = try Purge.purge([scratch.store], .init(kinds: [.cache], dryRun: true))
        #expect(second.walked.isEmpty, "the index matches: no walk")
        #expect(paths(second) == ["Library/Caches/a"])
        // A mount (here: its lock being taken and released) makes the index stale.
        try scratch.file("Library/Caches/b", size: 1, secondsAgo: 5)
        do { _ = try MountLock(store: scratch.store, mountpoint: "/nowhere") }
        #expect(TagIndex.load(scratch.store) == nil)
        let third = try Purge.purge([scratch.store], .init(kinds: [.cache], dryRun: true))
        #expect(third.walked == [0])
        #expect(paths(third) == ["Library/Caches/a", "Library/Caches/b"])
    }

    /// SPEC §10: every file in Library/Caches and tmp is a candidate, however it got there.
    /// Files put into the store behind containerfs's back after its index was written (into
    /// the top folder, a folder below it, a new folder; in tmp) make the index untrusted,
    /// and purge walks and finds them; an index nothing changed is still used.
    @Test(arguments: ["Library/Caches/late", "Library/Caches/sub/late", "Library/Caches/sub/new/late", "tmp/late", "tmp/sub/late"])
    func filesPutBehindTheIndexAreStillPurged(late: String) throws {
        let scratch = try PurgeScratch()
        try scratch.file("Library/Caches/sub/a", size: 1, secondsAgo: 10)
        try scratch.file("tmp/sub/b", size: 1, secondsAgo: 10)
        TagIndex.rebuild(scratch.store)
        let untouched = try Purge.purge([scratch.store], .init(kinds: [.cache, .temporary], dryRun: true))
        #expect(untouched.walked.isEmpty, "nothing changed: the index is used")
        try scratch.file(late, size: 1, secondsAgo: 20)
        #expect(TagIndex.load(scratch.store) == nil)
        let report = try Purge.purge([scratch.store], .init(kinds: [.cache, .temporary]))
        #expect(report.walked == [0])
        #expect(Set(paths(report)) == ["Library/Caches/sub/a", "tmp/sub/b", late])
        #expect(!scratch.exists(late))
        // The index purge wrote is trusted again, and empty.
        #expect(TagIndex.load(scratch.store)?.tags.isEmpty == true)
    }

    /// A file put into a folder after the walk that makes an index, before the index is
    /// written (a copy racing a purge or an unmount), leaves the index untrusted: the stamps
    /// are the walk's, not the folders' as the index is written. Against a write that
    /// restamps every folder, the index is trusted and the file never a candidate.
    @Test func aFilePutWhileTheIndexIsMadeIsStillSeen() throws {
        let scratch = try PurgeScratch()
        try scratch.file("Library/Caches/sub/a", size: 1, secondsAgo: 10)
        let identity = TagIndex.mountIdentity(scratch.store)
        let walked = Tags.walk(scratch.store)
        try scratch.file("Library/Caches/sub/late", size: 1, secondsAgo: 20)
        TagIndex.write(scratch.store, walked.tags, folders: walked.folders, identity: identity)
        #expect(TagIndex.load(scratch.store) == nil)
        let report = try Purge.purge([scratch.store], .init(kinds: [.cache]))
        #expect(Set(paths(report)) == ["Library/Caches/sub/a", "Library/Caches/sub/late"])
        // What purge wrote after deleting is trusted again.
        #expect(TagIndex.load(scratch.store)?.tags.isEmpty == true)
    }

    /// What purge reports freed is true: a cache file with another name (a hard link into
    /// Documents/) frees nothing; of two tagged names of one file, only the last frees it.
    @Test func aHardLinkedCacheFileFreesNothingUntilItsLastName() throws {
        let scratch = try PurgeScratch()
        try scratch.file("Library/Caches/kept-elsewhere", size: 1000, secondsAgo: 30)
        try scratch.file("Library/Caches/alone", size: 300, secondsAgo: 20)
        try scratch.file("Library/Caches/twice-a", size: 50, secondsAgo: 10)
        try FileManager.default.createDirectory(atPath: scratch.root + "/Documents", withIntermediateDirectories: true)
        #expect(link(scratch.root + "/Library/Caches/kept-elsewhere", scratch.root + "/Documents/kept") == 0)
        #expect(link(scratch.root + "/Library/Caches/twice-a", scratch.root + "/Library/Caches/twice-b") == 0)
        let report = try Purge.purge([scratch.store], .init(kinds: [.cache]))
        let freed = Dictionary(uniqueKeysWithValues: report.deleted.map { (String(decoding: $0.tag.path, as: UTF8.self), $0.freedBytes) })
        #expect(freed == ["Library/Caches/kept-elsewhere": 0, "Library/Caches/alone": 300, "Library/Caches/twice-a": 0, "Library/Caches/twice-b": 50]
                || freed == ["Library/Caches/kept-elsewhere": 0, "Library/Caches/alone": 300, "Library/Caches/twice-a": 50, "Library/Caches/twice-b": 0])
        #expect(report.freedBytes == 350)
        #expect(scratch.exists("Documents/kept"))
    }

    /// A cache file rewritten in place behind the mount changes no folder, so the index
    /// stays trusted with the size it recorded; what purge reports freed is the size the
    /// file had when it went.
    @Test func aCacheFileRewrittenBehindTheIndexCountsItsSizeWhenDeleted() throws {
        let scratch = try PurgeScratch()
        try scratch.file("Library/Caches/grown", size: 100, secondsAgo: 30)
        try scratch.file("Library/Caches/shrunk", size: 5000, secondsAgo: 20)
        TagIndex.rebuild(scratch.store)
        #expect(truncate(scratch.root + "/Library/Caches/grown", 7000) == 0)
        #expect(truncate(scratch.root + "/Library/Caches/shrunk", 40) == 0)
        #expect(TagIndex.load(scratch.store) != nil, "no folder changed: the index is trusted")
        let dryRun = try Purge.purge([scratch.store], .init(kinds: [.cache], dryRun: true))
        #expect(dryRun.walked.isEmpty)
        let report = try Purge.purge([scratch.store], .init(kinds: [.cache]))
        #expect(report.walked.isEmpty)
        let sizes = Dictionary(uniqueKeysWithValues: report.deleted.map { (String(decoding: $0.tag.path, as: UTF8.self), [$0.tag.size, $0.freedBytes]) })
        #expect(sizes == ["Library/Caches/grown": [7000, 7000], "Library/Caches/shrunk": [40, 40]])
        #expect(report.freedBytes == 7040)
    }

    @Test func anIndexNamingOtherFilesIsNeverTrustedToDeleteThem() throws {
        let scratch = try PurgeScratch()
        try scratch.file("Documents/precious", size: 1, secondsAgo: 100)
        var info = stat()
        stat(scratch.root + "/Documents/precious", &info)
        let identity = TagIndex.mountIdentity(scratch.store)
        for path in ["Documents/precious", "Library/Caches/../../Documents/precious", "Library/Caches/CACHEDIR.TAG", "Library/Caches"] {
            let tag = Tag(kind: .cache, path: Array(path.utf8), size: 1, lastUse: 0, inode: UInt64(info.st_ino))
            TagIndex.write(scratch.store, [tag], identity: identity)
            #expect(TagIndex.load(scratch.store) == nil, "\(path)")
            _ = try Purge.purge([scratch.store], .init(kinds: [.cache]))
            #expect(scratch.exists("Documents/precious") && scratch.exists("Library/Caches/CACHEDIR.TAG"))
        }
        // A well-formed entry whose file was replaced (other inode) is skipped too.
        try scratch.file("Library/Caches/x", size: 1, secondsAgo: 1)
        TagIndex.write(scratch.store, [Tag(kind: .cache, path: Array("Library/Caches/x".utf8), size: 1, lastUse: 0, inode: UInt64(info.st_ino))], identity: identity)
        let report = try Purge.purge([scratch.store], .init(kinds: [.cache]))
        #expect(report.deleted.isEmpty && scratch.exists("Library/Caches/x"))
    }

    @Test func symlinkedFoldersAreNotFollowed() throws {
        let scratch = try PurgeScratch()
        try FileManager.default.createDirectory(atPath: scratch.base + "/outside/sub", withIntermediateDirectories: true)
        try Data("x".utf8).write(to: URL(fileURLWithPath: scratch.base + "/outside/sub/file"))
        symlink(scratch.base + "/outside", scratch.root + "/Library/Caches/out")
        // An index pointing through the symlink, as if the folder had been swapped for it.
        var info = stat()
        stat(scratch.base + "/outside/sub/file", &info)
        TagIndex.write(scratch.store, [Tag(kind: .cache, path: Array("Library/Caches/out/sub/file".utf8), size: 1, lastUse: 0, inode: UInt64(info.st_ino))],
                       identity: TagIndex.mountIdentity(scratch.store))
        let report = try Purge.purge([scratch.store], .init(kinds: [.cache]))
        #expect(report.deleted.isEmpty)
        #expect(FileManager.default.fileExists(atPath: scratch.base + "/outside/sub/file"))
        #expect(scratch.exists("Library/Caches/out"), "the symlink itself is not tagged either")
    }

    @Test func emptyTemporaryRemovesAllButTheMarker() throws {
        let scratch = try PurgeScratch()
        try scratch.file("tmp/a", size: 1, secondsAgo: 1)
        try scratch.file("tmp/d/e/f", size: 1, secondsAgo: 1)
        try FileManager.default.createDirectory(atPath: scratch.base + "/outside", withIntermediateDirectories: true)
        try Data("x".utf8).write(to: URL(fileURLWithPath: scratch.base + "/outside/file"))
        symlink(scratch.base + "/outside", scratch.root + "/tmp/link")
        #expect(Purge.emptyTemporary(scratch.store).removed == 3)
        #expect(try FileManager.default.contentsOfDirectory(atPath: scratch.root + "/tmp") == ["CACHEDIR.TAG"])
        #expect(FileManager.default.fileExists(atPath: scratch.base + "/outside/file"))
    }

    @Test func storesOnDifferentDevicesAreRefused() throws {
        let scratch = try PurgeScratch()
        // A file system of our own, so the two stores are on different devices whatever
        // /tmp and /dev/shm are here.
        let other = try TemporaryTmpfs()
        try FileManager.default.createDirectory(atPath: other.path + "/Demo.app", withIntermediateDirectories: true)
        let second = try Store.create(at: other.path + "/store", bundle: other.path + "/Demo.app")
        var first = stat(), device = stat()
        #expect(fstat(scratch.store.rootFD, &first) == 0 && fstat(second.rootFD, &device) == 0)
        try #require(first.st_dev != device.st_dev)
        let error = #expect(throws: UserError.self) { _ = try Purge.purge([scratch.store, second], .init(kinds: [.cache])) }
        #expect(error?.message.contains("different devices") == true)
    }

    @Test func usageCountsEachAreaOnce() throws {
        let scratch = try PurgeScratch()
        try scratch.file("Documents/a", size: 100, secondsAgo: 1)
        try scratch.file("Documents/Inbox/b", size: 200, secondsAgo: 1)
        try scratch.file("Library/Preferences/c", size: 300, secondsAgo: 1)
        try scratch.file("Library/Caches/d", size: 400, secondsAgo: 1)
        try scratch.file("tmp/e", size: 500, secondsAgo: 1)
        let usage = StorageUsage.measure(scratch.store)
        let byName = Dictionary(uniqueKeysWithValues: usage.areas.map { ($0.name, ($0.bytes, $0.files)) })
        #expect(byName["bundle"]! == (5, 1))
        #expect(byName["Documents"]! == (100, 1))
        #expect(byName["Inbox"]! == (200, 1))
        #expect(byName["Library"]! == (300, 1))
        #expect(byName["Caches"]! == (400, 1))
        #expect(byName["tmp"]! == (500, 1))
        #expect(usage.areas.filter(\.purgeable).map(\.name) == ["Caches", "tmp"])
        #expect(usage.areas.filter(\.backedUp).map(\.name) == ["Documents", "Inbox", "Library"])
    }
}

/// The state folder is the store owner's to write. Where the kernel lets anyone hard-link
/// a file they do not own (`fs.protected_hardlinks` off), a state file planted as a second
/// name of root's file made root's run truncate and rewrite it (run.lock, mount.lock),
/// its daemon truncate and map it (the use table) or append to it (the audit log). Here
/// root's own file, linked by root, stands for it: none of them touches it.
@Suite("Planted state files")
struct PlantedStateFileTests {
    @Test func aStateFileLinkedToAnotherFileIsNeitherTruncatedNorWritten() throws {
        let scratch = try PurgeScratch()
        let contents = Data("root's own file\n".utf8)
        for name in ["run.lock", "mount.lock", "uses", "audit.log"] {
            let victim = scratch.base + "/victim-" + name
            try contents.write(to: URL(fileURLWithPath: victim))
            let planted = scratch.root + "/.containerfs/" + name
            unlink(planted)
            #expect(link(victim, planted) == 0)
            switch name {
            case "run.lock": #expect(throws: UserError.self) { _ = try RunLock(store: scratch.store) }
            case "mount.lock": #expect(throws: UserError.self) { _ = try MountLock(store: scratch.store, mountpoint: "/x") }
            case "uses": #expect(UseTable.openForWriting(scratch.store) == nil)
            default:
                AuditLog.recordGrant(stateFD: scratch.store.stateFD, pid: 1, uid: 0, hostPath: "/h", insidePath: "/grants/h", writable: false)
            }
            #expect(FileManager.default.contents(atPath: victim) == contents, "\(name): the linked file was changed")
            unlink(planted)
        }
    }
}
