import ContainerPolicy
import Dispatch
import Foundation
import Glibc
import Testing

@testable import ContainerBackup
@testable import ContainerStore

// The backup set's share of issue 19's trap sites: sizes whose sum exceeds Int64, and a
// folder chain deeper than a thread's stack allows recursion for. Both failed (trapped,
// overflowed the stack) against the code before their fix.

/// A store on a tmpfs of its own (sparse files of up to 2^63 − 1 bytes, and thousands of
/// folders made and removed fast), unmounted afterwards.
private final class TmpfsStore {
    let path: String
    let store: Store

    init() throws {
        var template = Array("/tmp/containerfs-backup-tmpfs-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw Errno.current }
        path = String(cString: made)
        guard mount("tmpfs", path, "tmpfs", 0, "size=64m,mode=0755") == 0 else {
            let error = Errno.current
            rmdir(path)
            throw error
        }
        try FileManager.default.createDirectory(atPath: path + "/Demo.app", withIntermediateDirectories: true)
        try Data("plist".utf8).write(to: URL(fileURLWithPath: path + "/Demo.app/Info.plist"))
        store = try Store.create(at: path + "/store", bundle: path + "/Demo.app")
    }

    deinit {
        umount2(path, Int32(MNT_DETACH))
        rmdir(path)
    }
}

@Suite("Backup set limits")
struct BackupSetLimitTests {
    /// Two sparse files of 5 EiB claim more bytes than Int64 holds: the total is held at
    /// Int64.max, each file keeps its own size.
    @Test func sizesBeyondInt64AreHeldAtItsMaximum() throws {
        let scratch = try TmpfsStore()
        for name in ["a", "b"] {
            let fd = open(scratch.path + "/store/Documents/" + name, O_WRONLY | O_CREAT, 0o644)
            try #require(fd >= 0)
            defer { close(fd) }
            try #require(ftruncate(fd, 5 << 60) == 0, "tmpfs allows a sparse file of 5 EiB")
        }
        let set = try BackupSet.scan(scratch.store)
        #expect(set.totalBytes == Int64.max)
        #expect(set.items.filter { $0.kind == .file }.map(\.size) == [5 << 60, 5 << 60])
    }

    /// A chain of 3000 folders in Documents, walked on a thread with a 128 KiB stack: every
    /// folder before what it holds, the file at the bottom last.
    @Test func aFolderChainDeeperThanTheStackIsWalked() throws {
        let scratch = try TmpfsStore()
        let depth = 3000
        var fd = open(scratch.path + "/store/Documents", O_RDONLY | O_DIRECTORY)
        try #require(fd >= 0)
        for _ in 0..<depth {
            try #require(mkdirat(fd, "d", 0o755) == 0)
            let child = openat(fd, "d", O_RDONLY | O_DIRECTORY)
            close(fd)
            try #require(child >= 0)
            fd = child
        }
        let file = openat(fd, "f", O_WRONLY | O_CREAT, 0o644)
        close(fd)
        try #require(file >= 0)
        close(file)

        /// The walk runs on the new thread while this one only waits for it.
        struct Walk: @unchecked Sendable { let store: Store; let done = DispatchSemaphore(value: 0) }
        let walk = Walk(store: scratch.store)
        nonisolated(unsafe) var set: BackupSet?
        let thread = Thread {
            set = try? BackupSet.scan(walk.store)
            walk.done.signal()
        }
        thread.stackSize = 128 * 1024
        thread.start()
        try #require(walk.done.wait(timeout: .now() + 120) == .success)
        let chain = set?.items.filter { $0.path.bytes.starts(with: Array("Documents/d".utf8)) } ?? []
        #expect(chain.count == depth + 1, "the chain's folders and its file")
        #expect(chain.last.map { $0.kind == .file && $0.path.bytes == Array(("Documents" + String(repeating: "/d", count: depth) + "/f").utf8) } == true)
        #expect(chain.dropLast().allSatisfy { $0.kind == .directory })
    }
}
