import ContainerStore
import Foundation
import Glibc
import Testing

/// `-o count-requests`: the daemon counts the requests it serves by kind, and the control
/// socket's `requests` command answers with the counts (the bench's requests per file,
/// docs/benchmarks.md). Through them, what each file costs: no FLUSH on close.
@Suite("RequestCounts", .serialized)
struct RequestCountTests {
    static let files = 200

    /// The daemon's counts once a background RELEASE has had time to arrive: polled until
    /// `settled` holds (20 s at most), then returned as they are.
    private func counts(_ store: Store, until settled: ([String: UInt64]) -> Bool) throws -> [String: UInt64] {
        let deadline = Date().addingTimeInterval(20)
        var counts = try #require(try ControlChannel.requestCounts(store), "the daemon does not count its requests")
        while !settled(counts), Date() < deadline {
            usleep(50_000)
            counts = try #require(try ControlChannel.requestCounts(store))
        }
        return counts
    }

    private func difference(_ after: [String: UInt64], _ before: [String: UInt64]) -> [String: UInt64] {
        after.reduce(into: [:]) { result, item in
            let earlier = before[item.key] ?? 0
            if item.value > earlier { result[item.key] = item.value - earlier }
        }
    }

    @Test func createsAndReadsAreCountedAndCloseSendsNoFlush() throws {
        try withMountedContainer(options: ["count-requests"]) { container in
            let store = try Store.open(container.store)
            let folder = container.mounted("Documents/many")
            #expect(mkdir(folder, 0o755) == 0)
            let before = try counts(store) { _ in true }
            // Real programs: python3 creates and writes each file, then reads each one.
            try ProgramTests.shell(
                """
                python3 -c 'import os
                for i in range(\(Self.files)):
                    with open("f%d" % i, "wb") as f: f.write(b"x" * 4096)
                for i in range(\(Self.files)):
                    with open("f%d" % i, "rb") as f: assert len(f.read()) == 4096'
                """, in: folder)
            let made = difference(try counts(store) { difference($0, before)["RELEASE", default: 0] >= UInt64(2 * Self.files) }, before)
            #expect(made["CREATE"] == UInt64(Self.files), "\(made)")
            #expect(made["OPEN"] == UInt64(Self.files), "\(made)")
            #expect(made["RELEASE"] == UInt64(2 * Self.files), "\(made)")
            // FOPEN_NOFLUSH: closing a file the daemon opened costs no request it waits for.
            #expect(made["FLUSH"] == nil, "\(made)")
            // Lookups of the new names (and of the folder): about one per file, not more.
            #expect(made["LOOKUP", default: 0] >= UInt64(Self.files) && made["LOOKUP", default: 0] <= UInt64(Self.files + 10), "\(made)")
            #expect(try Data(contentsOf: URL(fileURLWithPath: container.stored("Documents/many/f7"))).count == 4096)
        }
    }

    /// Locks are the kernel's: without FLUSH, a close still releases the closer's POSIX
    /// locks (the kernel drops them itself), so another process can take the lock.
    @Test func closeWithoutFlushStillReleasesLocks() throws {
        try withMountedContainer(options: ["count-requests"]) { container in
            let store = try Store.open(container.store)
            try ProgramTests.shell(
                """
                python3 -c 'import fcntl, os, subprocess
                fd = os.open("locked", os.O_RDWR | os.O_CREAT, 0o644)
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                probe = "import fcntl, os, sys\\nfd = os.open(\\"locked\\", os.O_RDWR)\\ntry:\\n    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\\nexcept OSError:\\n    sys.exit(3)"
                assert subprocess.run(["python3", "-c", probe]).returncode == 3, "the lock was not held"
                other = os.open("locked", os.O_RDONLY)
                os.close(other)   # POSIX: closing any descriptor of the file drops the locks
                assert subprocess.run(["python3", "-c", probe]).returncode == 0, "close left the lock held"
                os.close(fd)'
                """, in: container.mounted("Documents"))
            let counted = try #require(try ControlChannel.requestCounts(store))
            #expect(counted["FLUSH"] == nil, "\(counted)")
        }
    }

    /// With the writeback cache the kernel flushes on close whatever the daemon said: FLUSH
    /// comes, and is answered.
    @Test func withTheWritebackCacheCloseFlushes() throws {
        try withMountedContainer(options: ["count-requests", "writeback", "nopassthrough"]) { container in
            let store = try Store.open(container.store)
            try ProgramTests.shell("printf 'data' > written && cat written > /dev/null", in: container.mounted("Documents"))
            let counted = try counts(store) { $0["FLUSH", default: 0] > 0 }
            #expect(counted["FLUSH", default: 0] > 0, "\(counted)")
            #expect(try String(contentsOfFile: container.stored("Documents/written"), encoding: .utf8) == "data")
        }
    }

    @Test func withoutTheOptionNothingIsCounted() throws {
        try withMountedContainer { container in
            let counted = try ControlChannel.requestCounts(Store.open(container.store))
            #expect(counted == nil)
        }
    }
}
