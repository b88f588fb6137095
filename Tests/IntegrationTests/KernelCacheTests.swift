import Foundation
import Glibc
import Testing

/// The kernel keeps pages, attributes and names for a day (`keep_cache`, 86400 s
/// timeouts): whatever changes a file must never leave it serving the old state.
@Suite("Kernel cache", .serialized)
struct KernelCacheTests {
    /// `pread` of up to 64 bytes at 0, as text; nil on error.
    private func contents(_ fd: Int32) -> String? {
        var buffer = [UInt8](repeating: 0, count: 64)
        let count = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
        return count < 0 ? nil : String(decoding: buffer[..<count], as: UTF8.self)
    }

    private func contents(_ path: String) -> String? {
        try? String(contentsOfFile: path, encoding: .utf8)
    }

    @Test(arguments: [[], ["nopassthrough"], ["writeback"]])
    func aWriteThroughAnotherDescriptorIsSeenAtOnce(options: [String]) throws {
        try withMountedContainer(options: options) { container in
            let path = container.mounted("Documents/shared.txt")
            try Data("old contents".utf8).write(to: URL(fileURLWithPath: path))
            let reader = open(path, O_RDONLY)
            let writer = open(path, O_WRONLY)
            #expect(reader >= 0 && writer >= 0)
            defer { close(reader); close(writer) }
            #expect(contents(reader) == "old contents", "now in the page cache")

            #expect(pwrite(writer, "NEW", 3, 0) == 3)
            #expect(contents(reader) == "NEW contents")
            #expect(contents(path) == "NEW contents", "a new open")
            #expect(ftruncate(writer, 3) == 0)
            #expect(contents(reader) == "NEW")
            var info = stat()
            #expect(stat(path, &info) == 0 && info.st_size == 3)
            #expect(fsync(writer) == 0)
            #expect(contents(container.stored("Documents/shared.txt")) == "NEW")
        }
    }

    @Test func aPurgedFileMadeAgainUnderItsNameShowsItsNewContents() throws {
        try withMountedContainer { container in
            let path = container.mounted("Library/Caches/thumb.png")
            try Data("old thumbnail".utf8).write(to: URL(fileURLWithPath: path))
            #expect(contents(path) == "old thumbnail", "now in the page cache")
            var info = stat()
            #expect(stat(path, &info) == 0 && info.st_size == 13, "attributes cached")

            let purged = try Purging.purge([container], ["--caches", "--include-running"])
            #expect(purged.paths == ["Library/Caches/thumb.png"])
            #expect(errnoOf { access(path, F_OK) } == ENOENT)
            try Data("new".utf8).write(to: URL(fileURLWithPath: path))
            #expect(contents(path) == "new")
            #expect(stat(path, &info) == 0 && info.st_size == 3)
        }
    }

    /// The kernel keeps listings (cache_readdir); one read before a change made outside the
    /// mount must not be served after it, even for a name the kernel never looked up.
    @Test func aCachedListingShowsDeliveriesAndPurges() throws {
        try withMountedContainer { container in
            let inbox = container.mounted("Documents/Inbox")
            let caches = container.mounted("Library/Caches")
            try Data("old".utf8).write(to: URL(fileURLWithPath: caches + "/old.cache"))
            for _ in 0..<2 {
                #expect(Purging.listing(inbox) == [])
                #expect(Purging.listing(caches) == ["old.cache"])
            }
            let source = container.base + "/never-looked-up.txt"
            try Data("new".utf8).write(to: URL(fileURLWithPath: source))
            #expect(try containerfs(["deliver", container.store, source]).status == 0)
            #expect(Purging.listing(inbox) == ["never-looked-up.txt"])
            #expect(try Purging.purge([container], ["--caches", "--include-running"]).paths == ["Library/Caches/old.cache"])
            #expect(Purging.listing(caches) == [])
        }
    }

    @Test func aNameDeliveredAgainShowsTheNewFile() throws {
        try withMountedContainer { container in
            let outside = container.base + "/outside"
            try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
            let source = outside + "/letter.txt"
            let path = container.mounted("Documents/Inbox/letter.txt")
            try Data("first letter".utf8).write(to: URL(fileURLWithPath: source))
            #expect(try containerfs(["deliver", container.store, source]).status == 0)
            #expect(contents(path) == "first letter", "now in the page cache")
            #expect(unlink(path) == 0)
            #expect(errnoOf { access(path, F_OK) } == ENOENT, "the kernel now remembers the name as absent")

            try Data("second".utf8).write(to: URL(fileURLWithPath: source))
            #expect(try containerfs(["deliver", container.store, source]).status == 0)
            #expect(contents(path) == "second")
            var info = stat()
            #expect(stat(path, &info) == 0 && info.st_size == 6)
        }
    }
}
