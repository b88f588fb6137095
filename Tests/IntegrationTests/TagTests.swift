import Foundation
import Glibc
import Testing

// Tags through real mounts (SPEC §3): uses made by programs order the purge, tags follow
// renames, and a killed daemon loses none.

@Suite("Tags", .serialized)
struct TagTests {
    /// Two containers mounted side by side; uses alternate between them a few
    /// milliseconds apart, by opening, reading and writing; purge then deletes in that order.
    @Test func leastRecentlyUsedOrderAcrossTwoStores() throws {
        let a = try MountedContainer(), b = try MountedContainer()
        defer { a.unmount(); b.unmount() }
        try a.mount()
        try b.mount()
        try Purging.seedUserData(a)
        try Purging.seedUserData(b)
        let userA = try Purging.userDataDigest(a), userB = try Purging.userDataDigest(b)
        for name in ["a1", "a2", "a3"] { try Purging.write(a.mounted("Library/Caches/" + name), size: 1000) }
        for name in ["b1", "b2", "b3"] { try Purging.write(b.mounted("Library/Caches/d/" + name), size: 1000) }
        // Oldest first: each use 3 ms after the one before.
        let uses: [(MountedContainer, String, (String) throws -> Void)] = [
            (b, "Library/Caches/d/b2", Purging.read),
            (a, "Library/Caches/a3", Purging.append),
            (a, "Library/Caches/a1", Purging.touchOpen),
            (b, "Library/Caches/d/b3", Purging.read),
            (b, "Library/Caches/d/b1", Purging.append),
            (a, "Library/Caches/a2", Purging.read),
        ]
        for (container, path, use) in uses {
            usleep(3000)
            try use(container.mounted(path))
        }
        a.unmount()
        b.unmount()
        let expected = ["b2", "a3", "a1", "b3", "b1", "a2"]
        let order = try Purging.purge([a, b], ["--caches", "--dry-run"])
        // A daemon still running (an unmount that had to detach lazily) would make purge skip its store.
        #expect((order.json["skipped"] as? [Any])?.isEmpty ?? true, "\(order.json["skipped"] ?? "")")
        #expect(order.paths.map { String($0.split(separator: "/").last!) } == expected)
        #expect(order.stores == uses.map(\.0.store))
        let uses_ = order.deleted.compactMap { $0["lastUseNanoseconds"] as? Int }
        #expect(uses_ == uses_.sorted())

        // --free 2500 of 1000-byte (and one 1001-byte) files: the first three go.
        let purged = try Purging.purge([a, b], ["--caches", "--free", "2500"])
        #expect(purged.paths.map { String($0.split(separator: "/").last!) } == ["b2", "a3", "a1"])
        #expect(purged.freed == 3001)
        #expect(Purging.listing(a.stored("Library/Caches")) == ["CACHEDIR.TAG", "a2"])
        #expect(Purging.listing(b.stored("Library/Caches/d")) == ["b1", "b3"])
        #expect(try Purging.userDataDigest(a) == userA)
        #expect(try Purging.userDataDigest(b) == userB)
    }

    /// Renaming into Library/Caches tags a file, or a folder's whole subtree; renaming out
    /// untags it. Seen both by walking a mounted store and through the index after unmount.
    @Test func renamesIntoAndOutOfCaches() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        try container.mount()
        let m = container.mounted
        try Purging.write(m("Documents/in.txt"), size: 1)
        try Purging.write(m("Documents/dir/a"), size: 2)
        try Purging.write(m("Documents/dir/sub/b"), size: 3)
        try Purging.write(m("Library/Caches/out.txt"), size: 4)
        try Purging.write(m("Library/Caches/odir/c"), size: 5)
        try Purging.write(m("Library/Caches/odir/sub/d"), size: 6)
        try Purging.write(m("tmp/t.txt"), size: 7)
        try Purging.write(m("Library/Caches/stays"), size: 8)
        for (from, to) in [("Documents/in.txt", "Library/Caches/in.txt"), ("Documents/dir", "Library/Caches/dir"),
                           ("Library/Caches/out.txt", "Documents/out.txt"), ("Library/Caches/odir", "Library/Application Support/odir"),
                           ("tmp/t.txt", "Library/Caches/t.txt")] {
            #expect(rename(m(from), m(to)) == 0, "\(from) -> \(to): \(String(cString: strerror(errno)))")
        }
        let tagged: Set = ["Library/Caches/in.txt", "Library/Caches/dir/a", "Library/Caches/dir/sub/b", "Library/Caches/t.txt", "Library/Caches/stays"]
        let walked = try Purging.purge([container], ["--caches", "--tmp", "--dry-run", "--include-running"])
        #expect(Set(walked.paths) == tagged)
        #expect(walked.freed == 1 + 2 + 3 + 7 + 8)
        container.unmount()
        let indexed = try Purging.purge([container], ["--caches", "--tmp", "--dry-run"])
        #expect(Set(indexed.paths) == tagged)
        #expect((indexed.json["walked"] as? [String])?.isEmpty == true, "after an unmount the index is used")
        let purged = try Purging.purge([container], ["--caches"])
        #expect(Set(purged.paths) == tagged)
        #expect(Purging.size(container.stored("Documents/out.txt")) == 4)
        #expect(Purging.size(container.stored("Library/Application Support/odir/c")) == 5)
        #expect(Purging.size(container.stored("Library/Application Support/odir/sub/d")) == 6)
        #expect(Purging.listing(container.stored("Library/Caches/dir/sub")) == [], "folders stay")
    }

    /// A cache file whose time is past 2262 (set in the store, behind the mount) is the
    /// latest used: the daemon indexes it at unmount and exits cleanly, and purge goes on.
    @Test func aFileTimePast2262DoesNotStopTheUnmountOrPurge() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        try container.mount()
        try Purging.write(container.mounted("Library/Caches/old"), size: 10)
        try Purging.write(container.mounted("Library/Caches/future"), size: 20)
        let touched = try runProgram(["touch", "-m", "-d", "2300-01-01", container.stored("Library/Caches/future")])
        try #require(touched.status == 0, "\(touched)")
        let pid = try Purging.daemonPID(container)
        let unmounted = try containerfs(["unmount", container.mountpoint])
        #expect(unmounted.status == 0, "\(unmounted)")
        for _ in 0..<200 where kill(pid, 0) == 0 { usleep(10_000) }
        #expect(!isMountPoint(container.mountpoint))
        #expect(FileManager.default.fileExists(atPath: container.stored(".containerfs/tags")), "the daemon wrote its index at unmount")
        let purged = try Purging.purge([container], ["--caches", "--free", "1"])
        #expect(purged.paths == ["Library/Caches/old"])
        #expect((purged.json["walked"] as? [String])?.isEmpty == true, "the daemon wrote the index at unmount")
        #expect(FileManager.default.fileExists(atPath: container.stored("Library/Caches/future")))
    }

    /// The store's owner truncates the use table while the daemon has it mapped: the next
    /// opens of Caches and tmp files (each recorded in the table) must not kill the daemon
    /// with SIGBUS, and the tags are all still there after the unmount.
    @Test func aUseTableTruncatedWhileMountedDoesNotStopTheDaemon() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        try container.mount()
        try Purging.write(container.mounted("Library/Caches/before"), size: 10)
        #expect(truncate(container.stored(".containerfs/uses"), 0) == 0)
        for number in 0..<20 {
            try Purging.write(container.mounted("Library/Caches/c\(number)"), size: 1)
            try Purging.write(container.mounted("tmp/t\(number)"), size: 1)
            try Purging.read(container.mounted("Library/Caches/before"))
        }
        #expect(!isDeadMount(container.mountpoint), "the daemon died")
        #expect(Purging.listing(container.mounted("Library/Caches")).count == 21)
        container.unmount()
        let purged = try Purging.purge([container], ["--caches", "--dry-run"])
        #expect(purged.paths.count == 21)
    }

    /// After `kill -9` of the daemon the tags are exactly the files the store holds, in
    /// the order they were used; the next mount and unmount index them again.
    @Test func tagsSurviveKillingTheDaemon() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        // A clean mount and unmount first: its index lists `gone1` and `gone2`.
        try container.mount()
        try Purging.write(container.mounted("Library/Caches/k/gone1"), size: 1000)
        try Purging.write(container.mounted("Library/Caches/k/gone2"), size: 1000)
        container.unmount()
        let indexed = try Purging.purge([container], ["--caches", "--tmp", "--dry-run"])
        #expect(indexed.paths == ["Library/Caches/k/gone1", "Library/Caches/k/gone2"])
        #expect((indexed.json["walked"] as? [String])?.isEmpty == true, "the index of the clean unmount is used")
        let index = container.stored(".containerfs/tags")
        let indexBefore = try Data(contentsOf: URL(fileURLWithPath: index))

        // The next mount changes the caches, then its daemon is killed: the index on disk
        // is the old one, and would be wrong.
        try container.mount()
        #expect(unlink(container.mounted("Library/Caches/k/gone1")) == 0)
        #expect(unlink(container.mounted("Library/Caches/k/gone2")) == 0)
        let names = ["c1", "c2", "c3", "c4"]
        for (index, name) in names.enumerated() {
            try Purging.write(container.mounted("Library/Caches/k/" + name), size: 100 * (index + 1))
            usleep(3000)
        }
        try Purging.write(container.mounted("tmp/t1"), size: 11)
        usleep(3000)
        try Purging.read(container.mounted("Library/Caches/k/c1"))
        // An index from an earlier clean unmount exists; the killed mount makes it stale.
        let pid = try Purging.daemonPID(container)
        #expect(kill(pid, SIGKILL) == 0)
        for _ in 0..<200 where kill(pid, 0) == 0 { usleep(10_000) }
        container.unmount()
        #expect(!isMountPoint(container.mountpoint))
        #expect(try Data(contentsOf: URL(fileURLWithPath: index)) == indexBefore, "the killed daemon left the old index")

        let expected = ["Library/Caches/k/c2", "Library/Caches/k/c3", "Library/Caches/k/c4", "tmp/t1", "Library/Caches/k/c1"]
        let after = try Purging.purge([container], ["--caches", "--tmp", "--dry-run"])
        #expect(after.paths == expected, "none lost, none invented, same order")
        #expect(after.deleted.compactMap { $0["size"] as? Int } == [200, 300, 400, 11, 100])
        #expect((after.json["walked"] as? [String]) == [container.store], "a stale index is not trusted: the store is walked")

        // The next mount: the app runs again; at its end tmp is emptied and tags indexed.
        try container.mount()
        #expect(Purging.listing(container.mounted("Library/Caches/k")) == ["c1", "c2", "c3", "c4"])
        container.unmount()
        let remounted = try Purging.purge([container], ["--caches", "--tmp", "--dry-run"])
        #expect(remounted.paths == expected.filter { $0 != "tmp/t1" })
        #expect((remounted.json["walked"] as? [String])?.isEmpty == true)
    }
}
