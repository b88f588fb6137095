import Foundation
import Glibc
import Testing

/// `kill -9` of the daemon while a program writes: what was fsynced is in the store, the
/// dead mount answers ENOTCONN, `containerfs unmount` clears it, and a new mount works.
@Suite("Crash")
struct CrashTests {
    /// Writes 64 KiB chunks to FILE, fsyncs each, and after every fsync records the total
    /// fsynced in REPORT (atomically, outside the mount). Byte k of the file is k*7 mod 251.
    static let writer = """
        import os, sys
        path, report = sys.argv[1], sys.argv[2]
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        total = 0
        while True:
            view = memoryview(bytes((k * 7) % 251 for k in range(total, total + 65536)))
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
            total += 65536
            with open(report + ".tmp", "w") as out:
                out.write(str(total))
            os.rename(report + ".tmp", report)
        """

    static func pattern(_ count: Int) -> [UInt8] {
        (0..<count).map { UInt8(($0 * 7) % 251) }
    }

    @Test(arguments: [[], ["writeback"]])
    func fsyncedDataSurvivesKillingTheDaemon(options: [String]) throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        try container.mount(options: options)
        let report = container.base + "/fsynced"

        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["/usr/bin/python3", "-c", Self.writer, container.mounted("Documents/crash.bin"), report]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }

        // Let it write a while, then kill the daemon between two of its writes.
        let deadline = Date().addingTimeInterval(30)
        while (fsyncedCount(report) ?? 0) < 1 << 20 {
            guard process.isRunning else { throw TestFailure("the writer stopped before the daemon was killed (status \(process.terminationStatus))") }
            guard Date() < deadline else { throw TestFailure("the writer fsynced only \(fsyncedCount(report) ?? 0) bytes in 30 s") }
            usleep(20_000)
        }
        try killDaemon(container)
        let exitDeadline = Date().addingTimeInterval(10)
        while process.isRunning, Date() < exitDeadline { usleep(20_000) }
        #expect(!process.isRunning, "the writer must fail once the daemon is gone")
        #expect(process.isRunning || process.terminationStatus != 0, "the writer cannot have finished normally")

        let fsynced = try #require(fsyncedCount(report))
        #expect(fsynced >= 1 << 20)
        // Everything reported as fsynced is in the store, byte for byte.
        let stored = try Data(contentsOf: URL(fileURLWithPath: container.stored("Documents/crash.bin")))
        #expect(stored.count >= fsynced, "store holds \(stored.count) bytes, \(fsynced) were fsynced")
        #expect(Array(stored.prefix(fsynced)) == Self.pattern(fsynced), "the fsynced bytes differ in the store")

        // The dead mount answers ENOTCONN until it is cleared. (stat(2) of the mount point
        // itself may still be answered from the kernel's attribute cache.)
        let deadDeadline = Date().addingTimeInterval(5)
        while listErrno(container.mountpoint) != ENOTCONN, Date() < deadDeadline { usleep(20_000) }
        #expect(listErrno(container.mountpoint) == ENOTCONN)
        #expect(errnoOf { open(container.mounted("Documents/crash.bin"), O_RDONLY) } == ENOTCONN)
        var fsInfo = statvfs()
        #expect(errnoOf { statvfs(container.mountpoint, &fsInfo) } == ENOTCONN)

        let unmounted = try containerfs(["unmount", container.mountpoint])
        #expect(unmounted.status == 0, "\(unmounted)")
        #expect(CrashMountTable.find(container.mountpoint) == nil, "the dead mount is gone from the mount table")
        #expect(!isMountPoint(container.mountpoint))
        #expect(listErrno(container.mountpoint) == 0, "the mount point is a plain folder again")

        // The store mounts again and shows the data.
        try container.mount(options: options)
        let seen = try Data(contentsOf: URL(fileURLWithPath: container.mounted("Documents/crash.bin")))
        #expect(seen.count >= fsynced)
        #expect(Array(seen.prefix(fsynced)) == Self.pattern(fsynced), "the fsynced bytes differ through the new mount")
        #expect(seen == stored, "the new mount shows the store's file")
    }

    /// A dead mount is cleared even when its store was mounted again elsewhere meanwhile
    /// (the store's lock then belongs to the new daemon, not to the dead one).
    @Test func deadMountIsClearedWhileItsStoreIsMountedElsewhere() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        try container.mount()
        #expect(FileManager.default.createFile(atPath: container.mounted("Documents/before.txt"), contents: Data("before\n".utf8)))
        try killDaemon(container)
        let deadline = Date().addingTimeInterval(5)
        while listErrno(container.mountpoint) != ENOTCONN, Date() < deadline { usleep(20_000) }
        #expect(listErrno(container.mountpoint) == ENOTCONN)

        let elsewhere = container.base + "/elsewhere"
        try FileManager.default.createDirectory(atPath: elsewhere, withIntermediateDirectories: true)
        let remounted = try containerfs(["mount", container.store, elsewhere])
        #expect(remounted.status == 0, "the store is free once its daemon died: \(remounted)")
        defer { _ = try? containerfs(["unmount", elsewhere]) }

        let started = Date()
        let unmounted = try containerfs(["unmount", container.mountpoint])
        #expect(unmounted.status == 0, "\(unmounted)")
        #expect(Date().timeIntervalSince(started) < 5, "clearing a dead mount must not wait for another mount's daemon")
        #expect(CrashMountTable.find(container.mountpoint) == nil)
        #expect(listErrno(container.mountpoint) == 0)
        // The other mount is untouched.
        #expect((try? String(contentsOfFile: elsewhere + "/Documents/before.txt", encoding: .utf8)) == "before\n")
        let unmountedElsewhere = try containerfs(["unmount", elsewhere])
        #expect(unmountedElsewhere.status == 0, "\(unmountedElsewhere)")
    }

    /// `kill -9` of the container's daemon (its pid is the first line of the mount lock).
    private func killDaemon(_ container: MountedContainer) throws {
        let lock = try String(contentsOfFile: container.stored(".containerfs/mount.lock"), encoding: .utf8)
        guard let daemon = lock.split(separator: "\n").first.flatMap({ pid_t($0) }), daemon > 0 else {
            throw TestFailure("no daemon pid in mount.lock: \(lock)")
        }
        guard kill(daemon, SIGKILL) == 0 else { throw TestFailure("kill -9 \(daemon) failed") }
    }

    /// The errno of listing `path` (0 if it lists).
    private func listErrno(_ path: String) -> Int32 {
        errno = 0
        guard let stream = opendir(path) else { return errno }
        closedir(stream)
        return 0
    }

    /// The fsynced byte count the writer last reported, if it has.
    private func fsyncedCount(_ report: String) -> Int? {
        (try? String(contentsOfFile: report, encoding: .utf8)).flatMap { Int($0) }
    }
}

/// The kernel's mount table, for whether a mount point is still in it.
private enum CrashMountTable {
    static func find(_ mountpoint: String) -> String? {
        let text = (try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8)) ?? ""
        return text.split(separator: "\n").last { $0.split(separator: " ").dropFirst(4).first == Substring(mountpoint) }.map(String.init)
    }
}
