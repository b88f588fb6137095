import ContainerPolicy
import Foundation
import Glibc
import Synchronization

/// One denied operation (SPEC §2).
public struct AuditRecord: Codable, Sendable, Equatable {
    /// When it was denied, ISO 8601 with milliseconds, UTC.
    public var time: String
    public var pid: Int32
    /// The process's name (`/proc/PID/comm`), or `?` when it is gone.
    public var process: String
    public var uid: UInt32
    /// The operation, named after its system call (`unlink`, `open`, `setxattr`…).
    public var operation: String
    /// The path or paths it named, relative to the container; bytes that are not UTF-8 as `\xNN`.
    public var paths: [String]
    /// The area of each path.
    public var areas: [String]
    /// The errno the program saw, as `EPERM`.
    public var errno: String
    /// The rule that denied it: a `Denial` case.
    public var rule: String
}

extension AuditRecord {
    /// The rules of the records `run --grant` writes: not denials, but what a run let its
    /// program open outside the container (who granted what, where).
    public static let grantRules: Set<String> = ["granted read-only", "granted read-write"]

    /// Whether this records a grant rather than a denial.
    public var isGrant: Bool { Self.grantRules.contains(rule) }

    /// The record as one line for people (`containerfs audit`): time, process, user,
    /// operation, path(s) with their area, errno and the rule. Every field goes through
    /// `printable`, so a name (or a doctored log) cannot start a line of its own or send
    /// the terminal a control sequence.
    public var textLine: String {
        let shown = zip(paths, areas).map { "\(Self.printable($0)) [\(Self.printable($1))]" }.joined(separator: " -> ")
        // `process` is the raw name of the process; the paths already show `\` as `\\`.
        let process = Self.printable(ContainerPath.printable(Array(self.process.utf8)))
        return "\(Self.printable(time))  \(process)[\(pid)] uid \(uid)  \(Self.printable(operation)) \(shown)  "
            + "\(Self.printable(errno)) (\(Self.printable(rule)))"
    }

    /// `text` with every control character (C0, DEL, C1) as `\xNN` per UTF-8 byte, and the
    /// characters that break a line or reorder it on screen (line and paragraph
    /// separators, bidirectional controls) as `\u{NNNN}`; all else as it is.
    public static func printable(_ text: String) -> String {
        var out = ""
        for scalar in text.unicodeScalars {
            if let escaped = ContainerPath.escapedControl(scalar) { out += escaped } else { out.unicodeScalars.append(scalar) }
        }
        return out
    }
}

/// The log of denials in the state folder: bounded and never in the filesystem's way.
///
/// `record` only appends to a bounded queue and wakes a writer thread; when the queue is
/// full the record is counted and dropped rather than making a filesystem call wait.
/// The file is rotated at `maximumBytes` to `audit.log.1`.
public final class AuditLog: @unchecked Sendable {
    public static let fileName = Array(name: "audit.log")
    public static let previousFileName = Array(name: "audit.log.1")

    private struct Pending {
        var time: timespec
        var pid: Int32
        var process: String
        var uid: UInt32
        var operation: String
        var paths: [ContainerPath]
        var areas: [Area]
        var denial: Denial
    }

    private struct Queue {
        var pending: [Pending] = []
        var dropped = 0
        var stopping = false
    }

    private let stateFD: Int32
    private let maximumBytes: Int
    private let capacity: Int
    private let queue = Mutex(Queue())
    private let wake = DispatchSemaphore(value: 0)
    private let finished = DispatchSemaphore(value: 0)

    /// Starts the writer for the log in the state folder open at `stateFD` (not owned).
    public init(stateFD: Int32, maximumBytes: Int = 1 << 20, capacity: Int = 4096) {
        self.stateFD = stateFD
        self.maximumBytes = maximumBytes
        self.capacity = capacity
        let thread = Thread { [self] in writeLoop() }
        thread.name = "audit-log"
        thread.start()
    }

    /// Queues a denial. Never blocks on I/O.
    public func record(pid: Int32, uid: UInt32, operation: String, paths: [ContainerPath], areas: [Area], denial: Denial) {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        // Read now: the process may be gone by the time the writer gets to it. The kernel
        // names the calling thread; the log names its process.
        let process = Self.processID(ofThread: pid)
        let item = Pending(time: now, pid: process, process: Self.processName(process), uid: uid, operation: operation, paths: paths, areas: areas, denial: denial)
        let queued = queue.withLock { queue in
            guard queue.pending.count < capacity else {
                queue.dropped += 1
                return false
            }
            queue.pending.append(item)
            return true
        }
        if queued { wake.signal() }
    }

    /// Appends the record of a `run --grant`: `pid` and `uid` are the caller's, `paths` the
    /// host path and the path inside the sandbox. Written directly (no daemon is running
    /// yet), with the same care as the writer's (no symlink, a regular file only).
    public static func recordGrant(stateFD: Int32, pid: Int32, uid: UInt32, hostPath: String, insidePath: String, writable: Bool) {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        let record = AuditRecord(time: timestamp(now), pid: pid, process: processName(pid), uid: uid, operation: "grant",
                                 paths: [hostPath, insidePath], areas: ["host", "sandbox"], errno: "-",
                                 rule: writable ? "granted read-write" : "granted read-only")
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        guard let data = try? encoder.encode(record) else { return }
        let fd = withCName(fileName) { openat(stateFD, $0, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0o600) }
        guard fd >= 0 else { return }
        defer { Glibc.close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG, isSoleName(fd) else { return }
        ownedLikeTheFolder(fd, stateFD)
        let line = Array(data) + [UInt8(ascii: "\n")]
        _ = line.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
    }

    /// Writes what is queued and stops the writer.
    public func close() {
        queue.withLock { $0.stopping = true }
        wake.signal()
        finished.wait()
    }

    private func writeLoop() {
        while true {
            wake.wait()
            let (batch, dropped, stopping) = queue.withLock { queue in
                defer { queue.pending.removeAll(keepingCapacity: true); queue.dropped = 0 }
                return (queue.pending, queue.dropped, queue.stopping)
            }
            var lines = batch.map { Self.line(for: $0) }
            if dropped > 0 {
                lines.append("{\"dropped\":\(dropped)}\n")
            }
            append(lines)
            if stopping {
                finished.signal()
                return
            }
        }
    }

    private static func line(for item: Pending) -> String {
        let record = AuditRecord(
            time: timestamp(item.time), pid: item.pid, process: item.process, uid: item.uid,
            operation: item.operation, paths: item.paths.map { ContainerPath.printable($0.bytes) }, areas: item.areas.map(\.rawValue),
            errno: errnoName(item.denial.errno), rule: item.denial.rawValue)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let data = (try? encoder.encode(record)) ?? Data()
        return String(decoding: data, as: UTF8.self) + "\n"
    }

    /// Appends `lines`, rotating whenever the next line would take the file past
    /// `maximumBytes`: a burst is spread over rotations, so no file exceeds the bound (a
    /// single line longer than it aside).
    private func append(_ lines: [String]) {
        var info = stat()
        let found = withCName(Self.fileName) { fstatat(stateFD, $0, &info, AT_SYMLINK_NOFOLLOW) } == 0
        // Held at the bound: the log's size is a store file's, and may be 2^63 − 1.
        var size = found ? min(Int(info.st_size), maximumBytes) : 0
        var chunk: [UInt8] = []
        for line in lines {
            let bytes = Array(line.utf8)
            // Compared without adding: size + chunk.count never exceeds maximumBytes.
            if size + chunk.count > 0, bytes.count > maximumBytes - size - chunk.count {
                write(chunk)
                chunk.removeAll(keepingCapacity: true)
                _ = withCName(Self.fileName) { from in withCName(Self.previousFileName) { to in renameat(stateFD, from, stateFD, to) } }
                size = 0
            }
            chunk += bytes
        }
        write(chunk)
    }

    /// Appends `bytes` to the current file.
    private func write(_ bytes: [UInt8]) {
        guard !bytes.isEmpty else { return }
        // O_NONBLOCK and a regular file only: a log replaced by a FIFO must not stall the
        // writer, and with it the unmount that waits for it.
        let fd = withCName(Self.fileName) { openat(stateFD, $0, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0o600) }
        guard fd >= 0 else { return }
        defer { Glibc.close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG, isSoleName(fd) else { return }
        ownedLikeTheFolder(fd, stateFD)
        _ = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
    }

    /// `2026-11-21T10:53:15.982Z`.
    private static func timestamp(_ time: timespec) -> String {
        var seconds = time.tv_sec
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let millis = Int(time.tv_nsec / 1_000_000)
        let fraction = String(repeating: "0", count: 3 - String(millis).count) + String(millis)
        return "\(parts.tm_year + 1900)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))T\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)).\(fraction)Z"
    }

    /// The process (thread group) a thread belongs to, from `/proc/TID/status`; the
    /// thread's own id when that cannot be read.
    private static func processID(ofThread thread: Int32) -> Int32 {
        guard let status = try? readFile(at: AT_FDCWD, Array("/proc/\(thread)/status".utf8)) else { return thread }
        for line in status.split(separator: UInt8(ascii: "\n")) where line.starts(with: Array("Tgid:".utf8)) {
            let digits = line.dropFirst(5).filter { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }
            return Int32(String(decoding: digits, as: UTF8.self)) ?? thread
        }
        return thread
    }

    /// The process's name from `/proc/PID/comm`, or `?` when it is gone.
    private static func processName(_ pid: Int32) -> String {
        guard let comm = try? readFile(at: AT_FDCWD, Array("/proc/\(pid)/comm".utf8)), !comm.isEmpty else { return "?" }
        return String(decoding: comm.prefix { $0 != UInt8(ascii: "\n") }, as: UTF8.self)
    }

    /// The symbolic name of the errno values the policy uses.
    public static func errnoName(_ code: Int32) -> String {
        switch code {
        case EPERM: "EPERM"
        case EACCES: "EACCES"
        case ENOENT: "ENOENT"
        default: "E\(code)"
        }
    }

    /// The most of each file `read` takes: its last bytes, from the first whole line. The
    /// writer rotates at `maximumBytes` (1 MiB), so a longer file was put there by the
    /// store's owner (a sparse one of a gigabyte costs no disk): read whole, it held root's
    /// `audit` and `check` 20 s and 2 GB of memory, `audit --follow` five times a second.
    static let readLimit = 8 << 20

    /// Every record in the store's log, oldest first (the rotated file, then the current).
    public static func read(stateFD: Int32) -> [AuditRecord] {
        let decoder = JSONDecoder()
        return [previousFileName, fileName].flatMap { name -> [AuditRecord] in
            guard let bytes = tail(at: stateFD, name, limit: readLimit) else { return [] }
            return bytes.split(separator: UInt8(ascii: "\n")).compactMap { try? decoder.decode(AuditRecord.self, from: Data($0)) }
        }
    }

    /// The regular file `name` in `stateFD` whole, or its last `limit` bytes from the first
    /// line that starts in them; nil if it cannot be read.
    static func tail(at stateFD: Int32, _ name: [UInt8], limit: Int) -> [UInt8]? {
        guard let fd = try? openRegularFile(at: stateFD, name) else { return nil }
        defer { Glibc.close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { return nil }
        let start = max(0, Int64(info.st_size) - Int64(limit))
        var bytes = [UInt8](repeating: 0, count: limit)
        var count = 0
        while count < limit {
            let read = bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress! + count, limit - count, off_t(start) + off_t(count)) }
            if read < 0, errno == EINTR { continue }
            guard read > 0 else { break }
            count += read
        }
        var kept = bytes[0..<count]
        if start > 0, let newline = kept.firstIndex(of: UInt8(ascii: "\n")) { kept = kept[(newline + 1)...] }
        return Array(kept)
    }
}
