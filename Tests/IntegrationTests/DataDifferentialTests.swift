import CLinux
import Foundation
import Glibc
import Testing

/// Seeded random data operations on one file — `pwrite`, `ftruncate`, `fallocate` (allocate,
/// punch a hole, zero a range), `copy_file_range` within the file, writes through a shared
/// mapping, reads, closing and opening again — applied through the mount and to a native
/// file beside the store: every result must agree, and at each checkpoint every byte, as
/// the mount shows it and as the store holds it. In the modes where every read and write
/// is a request to the daemon (`nopassthrough`, `power-loss`), as fsx checks a file system.
///
/// CONTAINERFS_DATA_SEED=S runs that seed instead of seed 1 (make test keeps to one, for its
/// time); a failure names its seed, step and the steps before it.
@Suite("DataDifferential", .serialized)
struct DataDifferentialTests {
    static let seeds: [UInt64] = ProcessInfo.processInfo.environment["CONTAINERFS_DATA_SEED"].flatMap(UInt64.init).map { [$0] } ?? [1]

    @Test(arguments: [["nopassthrough"], ["power-loss"]], seeds)
    func oneFileAgreesWithANativeFile(options: [String], seed: UInt64) throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        try container.mount(options: options)
        let mountedPath = container.mounted("Documents/data"), nativePath = container.base + "/native-data"
        let storedPath = container.stored("Documents/data")
        var mounted = open(mountedPath, O_RDWR | O_CREAT | O_TRUNC, 0o644)
        var native = open(nativePath, O_RDWR | O_CREAT | O_TRUNC, 0o644)
        try #require(mounted >= 0 && native >= 0, "open: errno \(errno)")
        defer { close(mounted); close(native) }

        var random = DataRandom(seed: seed)
        var history: [String] = []
        let rerun = "options \(options), seed \(seed); rerun with CONTAINERFS_DATA_SEED=\(seed)"
        for step in 1...1500 {
            let operation = random.operation(size: Self.size(native))
            history.append("\(step): \(operation)")
            let expected = operation.apply(native)
            let actual = operation.apply(mounted)
            if actual != expected {
                Issue.record("\(rerun)\nstep \(step): \(operation)\nthrough the mount: \(actual)\nnative: \(expected)\n\(history.suffix(30).joined(separator: "\n"))")
                return
            }
            if step % 200 == 0 {
                // Closed and opened again: what the mount shows then comes from the daemon.
                close(mounted)
                close(native)
                mounted = open(mountedPath, O_RDWR)
                native = open(nativePath, O_RDWR)
                try #require(mounted >= 0 && native >= 0, "reopen: errno \(errno)")
            }
            if step % 100 == 0 || step == 1500 {
                let want = try Self.contents(nativePath)
                for (what, path) in [("through the mount", mountedPath), ("in the store", storedPath)] {
                    let got = try Self.contents(path)
                    if got != want {
                        let at = zip(got, want).enumerated().first { $0.element.0 != $0.element.1 }?.offset ?? min(got.count, want.count)
                        Issue.record("\(rerun)\nafter step \(step), \(what): \(got.count) bytes against \(want.count) natively, first difference at byte \(at)\n\(history.suffix(30).joined(separator: "\n"))")
                        return
                    }
                }
            }
        }
    }

    static func size(_ fd: Int32) -> Int {
        var info = stat()
        return fstat(fd, &info) == 0 ? Int(info.st_size) : 0
    }

    static func contents(_ path: String) throws -> [UInt8] {
        try [UInt8](Data(contentsOf: URL(fileURLWithPath: path)))
    }
}

/// SplitMix64: the same seed gives the same operations on every machine.
private struct DataRandom {
    var state: UInt64
    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    mutating func below(_ bound: Int) -> Int { bound <= 0 ? 0 : Int(next() % UInt64(bound)) }

    /// Operations start below 2 MiB; one write or copy in 20 is longer than a 1 MiB request.
    static let limit = 2 << 20

    mutating func length() -> Int { below(20) == 0 ? 1 + below(1_300_000) : 1 + below(96 << 10) }

    mutating func operation(size: Int) -> DataOperation {
        let offset = below(Self.limit)
        switch below(16) {
        case 0..<5:
            let count = min(length(), Self.limit - offset)
            let tag = next()
            return .write(offset: offset, bytes: (0..<max(1, count)).map { UInt8(truncatingIfNeeded: (tag >> (($0 % 8) * 8)) &+ UInt64($0 / 8)) })
        case 5: return .truncate(size: below(Self.limit))
        case 6: return .allocate(mode: 0x02 | 0x01, offset: offset, length: length())   // PUNCH_HOLE | KEEP_SIZE
        case 7: return .allocate(mode: 0x10, offset: offset, length: length())          // ZERO_RANGE
        case 8: return .allocate(mode: Int32(below(2)), offset: offset, length: length())      // allocate, KEEP_SIZE or not
        case 9, 10:
            // Within one file the two ranges must not overlap (EINVAL otherwise, natively too).
            let count = length(), source = below(max(1, size)), target = below(Self.limit)
            guard source + count <= target || target + count <= source else { return .read(offset: source, count: count) }
            return .copy(source: source, target: target, count: count)
        case 11, 12:
            guard size > 0 else { return .truncate(size: below(Self.limit)) }
            let start = below(size), count = min(1 + below(64 << 10), size - start)
            let tag = UInt8(truncatingIfNeeded: next())
            return .mappedWrite(offset: start, bytes: (0..<count).map { tag &+ UInt8(truncatingIfNeeded: $0 / 512) })
        default: return .read(offset: below(max(1, size + 4096)), count: length())
        }
    }
}

private enum DataOperation: CustomStringConvertible {
    case write(offset: Int, bytes: [UInt8])
    case truncate(size: Int)
    case allocate(mode: Int32, offset: Int, length: Int)
    case copy(source: Int, target: Int, count: Int)
    case mappedWrite(offset: Int, bytes: [UInt8])
    case read(offset: Int, count: Int)

    var description: String {
        switch self {
        case .write(let offset, let bytes): "pwrite \(bytes.count) bytes at \(offset)"
        case .truncate(let size): "ftruncate to \(size)"
        case .allocate(let mode, let offset, let length): "fallocate mode 0x\(String(mode, radix: 16)) \(length) bytes at \(offset)"
        case .copy(let source, let target, let count): "copy_file_range \(count) bytes from \(source) to \(target)"
        case .mappedWrite(let offset, let bytes): "mmap write \(bytes.count) bytes at \(offset), msync"
        case .read(let offset, let count): "pread \(count) bytes at \(offset)"
        }
    }

    /// Applies the operation to `fd`; returns what a program sees of it: counts, errno, bytes read.
    func apply(_ fd: Int32) -> String {
        func outcome(_ result: Int) -> String { result < 0 ? "errno \(errno)" : "\(result)" }
        switch self {
        case .write(let offset, let bytes):
            return outcome(bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, off_t(offset)) })
        case .truncate(let size):
            return outcome(Int(ftruncate(fd, off_t(size))))
        case .allocate(let mode, let offset, let length):
            return outcome(Int(clinux_fallocate(fd, mode, off_t(offset), off_t(length))))
        case .copy(let source, let target, let count):
            var from = off_t(source), to = off_t(target)
            return outcome(clinux_copy_file_range(fd, &from, fd, &to, count, 0))
        case .mappedWrite(let offset, let bytes):
            let page = Int(sysconf(Int32(_SC_PAGESIZE)))
            let start = offset / page * page, length = offset - start + bytes.count
            guard let map = mmap(nil, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, off_t(start)), map != UnsafeMutableRawPointer(bitPattern: -1) else { return "mmap errno \(errno)" }
            defer { munmap(map, length) }
            bytes.withUnsafeBytes { (map + (offset - start)).copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
            return msync(map, length, MS_SYNC) == 0 ? "mapped" : "msync errno \(errno)"
        case .read(let offset, let count):
            var buffer = [UInt8](repeating: 0, count: count)
            let read = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, count, off_t(offset)) }
            guard read >= 0 else { return "errno \(errno)" }
            return "\(read) bytes, \(buffer.prefix(read).reduce(UInt64(14_695_981_039_346_656_037)) { ($0 ^ UInt64($1)) &* 1_099_511_628_211 })"
        }
    }
}
