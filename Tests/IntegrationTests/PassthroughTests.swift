import Foundation
import Glibc
import Testing

/// Kernel FUSE passthrough: a root daemon lets the kernel read and write open files
/// straight from the store, so file data never reaches the daemon; the policy still
/// decides every open.
@Suite("Passthrough", .serialized)
struct PassthroughTests {
    /// Mounts with libfuse's request log, runs `body`, unmounts, and returns how many
    /// requests of each kind the daemon received.
    private func requestCounts(_ options: String, _ body: (MountedContainer) throws -> Void) throws -> [String: Int] {
        var counts: [String: Int] = [:]
        for line in try foregroundDaemonLog(options, body).split(separator: "\n") {
            guard let range = line.range(of: "opcode: ") else { continue }
            counts[String(line[range.upperBound...].prefix { $0 != " " }), default: 0] += 1
        }
        return counts
    }

    /// Writes, appends, reads back and changes a file through a shared mapping, checking
    /// the store after each step.
    private func useAFile(_ container: MountedContainer) throws {
        let path = container.mounted("Documents/data.bin")
        let data = Data((0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        try data.write(to: URL(fileURLWithPath: path))
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == data)
        #expect(try Data(contentsOf: URL(fileURLWithPath: container.stored("Documents/data.bin"))) == data)
        let script = """
            import mmap, os, sys
            fd = os.open(sys.argv[1], os.O_RDWR)
            with mmap.mmap(fd, 4096) as m:
                m[0:6] = b"MAPPED"
                m.flush()
            os.close(fd)
            with open(sys.argv[1], "ab") as f:
                f.write(b"tail")
            """
        let python = try runProgram(["python3", "-c", script, path])
        #expect(python.status == 0, "\(python)")
        let stored = try Data(contentsOf: URL(fileURLWithPath: container.stored("Documents/data.bin")))
        #expect(stored.prefix(6) == Data("MAPPED".utf8))
        #expect(stored.suffix(4) == Data("tail".utf8))
        #expect(stored.count == data.count + 4)
        #expect(stored.dropFirst(6).dropLast(4) == data.dropFirst(6))
        // The policy still decides at open: the bundle stays read-only.
        #expect(errnoOf { open(container.mounted(container.bundleName + "/Info.plist"), O_WRONLY) } == EPERM)
    }

    @Test func aRootDaemonNeverSeesFileData() throws {
        let counts = try requestCounts("debug", useAFile)
        #expect(counts["OPEN", default: 0] + counts["CREATE", default: 0] >= 3, "\(counts)")
        #expect(counts["WRITE"] == nil, "writes went through the daemon: \(counts)")
        #expect(counts["READ"] == nil, "reads went through the daemon: \(counts)")
    }

    @Test func withNopassthroughTheDaemonServesFileData() throws {
        let counts = try requestCounts("debug,nopassthrough", useAFile)
        #expect(counts["WRITE", default: 0] > 0, "\(counts)")
    }
}
