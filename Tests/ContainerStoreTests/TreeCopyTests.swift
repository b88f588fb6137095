import ContainerPolicy
import Foundation
import Glibc
import Synchronization
import Testing

@testable import ContainerStore

/// `TreeCopy`, which `share get`/`put`, `deliver` and installing a bundle copy with, often
/// as root, from folders another user owns (docs/lifecycle.md, "File sharing").
@Suite("TreeCopy", .serialized)
struct TreeCopyTests {
    /// A name in the copied folder that its owner keeps swapping between a file and a FIFO:
    /// the copy looked at the name (a file), then opened it, by then a FIFO, and waited in
    /// open(2) for a writer that never came: root's `share get` hung for good. Every copy
    /// now ends at once: the file copied, or the FIFO refused (`openRegularFile`).
    @Test func aFIFOSwappedInDuringACopyIsNeverWaitedOn() throws {
        let base = try FileManager.default.url(for: .itemReplacementDirectory, in: .userDomainMask,
                                               appropriateFor: URL(fileURLWithPath: "/tmp"), create: true).path
        defer { try? FileManager.default.removeItem(atPath: base) }
        for folder in ["source", "spare", "copies"] { try FileManager.default.createDirectory(atPath: base + "/" + folder, withIntermediateDirectories: true) }
        try Data("data".utf8).write(to: URL(fileURLWithPath: base + "/spare/file"))
        try #require(mkfifo(base + "/spare/fifo", 0o600) == 0)
        try Data("data".utf8).write(to: URL(fileURLWithPath: base + "/source/f"))
        // The owner: `source/f` becomes the FIFO, then the file, by renames, as fast as it can.
        let stop = Atomic<Bool>(false)
        let stopped = DispatchSemaphore(value: 0)
        let swapper = Thread {
            while !stop.load(ordering: .relaxed) {
                for (spare, link) in [("fifo", "t1"), ("file", "t2")] {
                    _ = Glibc.link(base + "/spare/" + spare, base + "/spare/" + link)
                    _ = rename(base + "/spare/" + link, base + "/source/f")
                }
            }
            stopped.signal()
        }
        swapper.start()
        // Stopped before the folder goes: nothing of this test runs on into the next.
        defer {
            stop.store(true, ordering: .relaxed)
            stopped.wait()
        }
        let sourceFD = open(base + "/source", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        let copiesFD = open(base + "/copies", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        defer { close(sourceFD); close(copiesFD) }
        // Enough tries to meet the window (a few microseconds) many times on a busy machine.
        let attempts = 1000
        var copied = 0, refused = 0
        for attempt in 0..<attempts {
            let done = DispatchSemaphore(value: 0)
            let outcome = Mutex<Bool?>(nil)
            Thread {
                let result = try? TreeCopy.copyDirectory(from: sourceFD, toNew: Array("c\(attempt)".utf8), in: copiesFD, .everything(what: "the source"))
                outcome.withLock { $0 = result != nil }
                done.signal()
            }.start()
            guard done.wait(timeout: .now() + 10) == .success else {
                stop.store(true, ordering: .relaxed)
                // Lets the stuck copy go: a writer opens the FIFO it waits on.
                let writer = open(base + "/spare/fifo", O_WRONLY | O_NONBLOCK | O_CLOEXEC)
                if writer >= 0 { close(writer) }
                Issue.record("copy \(attempt) waited on the FIFO for 10 s (\(copied) copied, \(refused) refused before)")
                return
            }
            if outcome.withLock({ $0 }) == true { copied += 1 } else { refused += 1 }
        }
        #expect(copied + refused == attempts)
    }

    /// Handed a descriptor of something that is not a regular file (a pipe with a byte in
    /// it, here), `copyFile` refuses it: it read a FIFO, or a device, as data.
    @Test func copyFileCopiesOnlyARegularFile() throws {
        var fds: [Int32] = [0, 0]
        try #require(pipe(&fds) == 0)
        defer { close(fds[0]) }
        _ = write(fds[1], "x", 1)
        close(fds[1])   // so that a copy reading it ends
        let target = open("/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        defer { close(target) }
        let name = Array(".treecopy-test-\(getpid())".utf8)
        defer { _ = withCName(name) { unlinkat(target, $0, 0) } }
        #expect(throws: Errno(EINVAL)) { try TreeCopy.copyFile(from: fds[0], toNew: name, in: target) }
    }
}
