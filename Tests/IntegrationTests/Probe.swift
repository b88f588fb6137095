import CLinux
import Foundation
import Glibc
import Testing

// Helpers for the integration tests that act through a mount: a `Probe` that runs one
// syscall at a time and checks its errno, the audit record a denial leaves and that the
// bundle and the named nodes did not change; and small readers of the store.

// MARK: - Mounting a prepared store

/// Makes a store, lets `prepare` change it behind the mount's back (nothing can put files
/// into the inbox through the mount), mounts it, runs `body`, and always unmounts.
func withMountedContainer(
    options: [String] = [], beforeMounting prepare: (MountedContainer) throws -> Void,
    _ body: (MountedContainer) throws -> Void
) throws {
    let container = try MountedContainer()
    defer { container.unmount() }
    try prepare(container)
    try container.mount(options: options)
    try body(container)
}

// MARK: - Denials

/// What a denied operation must look like: the errno the program saw and the record the
/// audit log keeps (SPEC §2).
struct Denial: Sendable {
    var errno: Int32
    /// The audited operation, named after its system call (`open`, `rename`, …).
    var operation: String
    /// The container-relative paths it named, as the audit log prints them.
    var paths: [String]
    /// The area of each path.
    var areas: [String]
    /// The rule that denied it (a `Denial` case of the policy).
    var rule: String
}

/// Runs operations through a mounted container one at a time and checks each outcome.
/// Each operation is a closure returning its errno, 0 for success (see `outcome`).
///
/// Every denial must carry its errno, leave exactly one audit record, and change nothing:
/// neither the nodes the test watches nor the bundle. `finish()` checks that nothing else
/// was audited (an allowed operation is never logged).
final class Probe {
    let container: MountedContainer
    /// Audit records accounted for so far.
    private(set) var audited: Int
    private let bundleBefore: String

    init(_ container: MountedContainer) throws {
        self.container = container
        audited = try container.auditRecords().count
        bundleBefore = try treeState(container.stored(container.bundleName))
    }

    /// Runs `call` and expects it to succeed; returns whether it did.
    @discardableResult
    func allowed(_ label: String, sourceLocation: SourceLocation = #_sourceLocation, _ call: () -> Int32) -> Bool {
        let code = call()
        #expect(code == 0, "\(label): expected success, got \(errnoSymbol(code))", sourceLocation: sourceLocation)
        return code == 0
    }

    /// Runs `call` and expects the store's own errno, passed through (not a denial).
    func fails(_ label: String, with expected: Int32, sourceLocation: SourceLocation = #_sourceLocation, _ call: () -> Int32) {
        let code = call()
        #expect(code == expected, "\(label): expected \(errnoSymbol(expected)), got \(errnoSymbol(code))", sourceLocation: sourceLocation)
    }

    /// Runs `call` and expects `denial`: its errno, its audit record, and no change to the
    /// store nodes at `watched` (container-relative) nor to the bundle.
    func denied(
        _ label: String, _ denial: Denial, watching watched: [String] = [],
        sourceLocation: SourceLocation = #_sourceLocation, _ call: () -> Int32
    ) throws {
        let before = watched.map { nodeState(container.stored($0)) }
        let code = call()
        #expect(
            code == denial.errno, "\(label): expected \(errnoSymbol(denial.errno)), got \(errnoSymbol(code))",
            sourceLocation: sourceLocation)
        try expectAuditRecord(label, denial, sourceLocation: sourceLocation)
        for (path, state) in zip(watched, before) {
            #expect(nodeState(container.stored(path)) == state, "\(label): \(path) changed in the store", sourceLocation: sourceLocation)
        }
        try expectBundleUnchanged(label, sourceLocation: sourceLocation)
    }

    /// Expects the next audit record to be `denial` (after a denial made by a program).
    func expectAuditRecord(
        _ label: String, _ denial: Denial, process: String? = nil,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let records = try container.waitForAudit(count: audited + 1)
        guard records.count > audited else {
            Issue.record("\(label): no audit record", sourceLocation: sourceLocation)
            return
        }
        let record = records[audited]
        #expect(record["operation"] as? String == denial.operation, "\(label): audited \(record)", sourceLocation: sourceLocation)
        // Compared as bytes: String's == treats NFC and NFD forms as equal.
        let paths = (record["paths"] as? [String])?.map(rootAsEmpty)
        #expect(
            paths?.map { Array($0.utf8) } == denial.paths.map { Array(rootAsEmpty($0).utf8) },
            "\(label): audited paths \(paths ?? [])", sourceLocation: sourceLocation)
        #expect(record["areas"] as? [String] == denial.areas, "\(label): audited \(record)", sourceLocation: sourceLocation)
        #expect(record["errno"] as? String == errnoSymbol(denial.errno), "\(label): audited \(record)", sourceLocation: sourceLocation)
        #expect(record["rule"] as? String == denial.rule, "\(label): audited \(record)", sourceLocation: sourceLocation)
        #expect((record["uid"] as? NSNumber)?.uint32Value == getuid(), "\(label): audited \(record)", sourceLocation: sourceLocation)
        if let process {
            #expect(record["process"] as? String == process, "\(label): audited \(record)", sourceLocation: sourceLocation)
        }
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        let time = (record["time"] as? String).flatMap(formatter.date(from:))
        #expect(time.map { abs($0.timeIntervalSinceNow) < 300 } == true, "\(label): audited time \(record)", sourceLocation: sourceLocation)
        #expect((record["pid"] as? NSNumber).map { $0.intValue > 0 } == true, "\(label): audited \(record)", sourceLocation: sourceLocation)
        if records.count > audited + 1 {
            Issue.record("\(label): more than one audit record: \(records[(audited + 1)...])", sourceLocation: sourceLocation)
        }
        audited = records.count
    }

    /// Accounts for the audit records a program left — at least `count`, and all that come
    /// until the log stops growing — and returns them for the caller to check.
    func takeAuditRecords(atLeast count: Int) throws -> [[String: Any]] {
        // Throws unless the log reaches `count` new records in time.
        var records = try container.waitForAudit(count: audited + count)
        while true {
            usleep(100_000)
            let again = try container.auditRecords()
            if again.count == records.count { break }
            records = again
        }
        defer { audited = records.count }
        let taken = Array(records[min(audited, records.count)...])
        guard taken.count >= count else { throw TestFailure("expected at least \(count) new audit record(s), found \(taken.count)") }
        return taken
    }

    /// Expects the bundle in the store to be byte-identical, metadata included.
    func expectBundleUnchanged(_ label: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let now = try treeState(container.stored(container.bundleName))
        #expect(now == bundleBefore, "\(label): the bundle changed in the store", sourceLocation: sourceLocation)
    }

    /// Expects no audit record beyond those accounted for, and the bundle unchanged.
    func finish(sourceLocation: SourceLocation = #_sourceLocation) throws {
        // Records are written by a thread of the daemon: give a stray one time to land.
        usleep(150_000)
        let records = try container.auditRecords()
        #expect(records.count == audited, "unexpected audit records: \(records.dropFirst(audited))", sourceLocation: sourceLocation)
        try expectBundleUnchanged("at the end", sourceLocation: sourceLocation)
    }
}

/// The root's path may print as empty, `.` or `/`.
private func rootAsEmpty(_ path: String) -> String {
    path == "." || path == "/" ? "" : path
}

// MARK: - C calls

/// A NUL-terminated C path from raw bytes, for names that are not valid UTF-8.
func cPath(_ bytes: [UInt8]) -> [CChar] {
    bytes.map { CChar(bitPattern: $0) } + [0]
}

/// What a system call's result means: 0 when it succeeded, else its errno. Probe closures
/// return this, as in `probe.allowed("chmod") { outcome(chmod(path, 0o600)) }`.
func outcome(_ result: Int32) -> Int32 {
    result < 0 ? errno : 0
}

/// What a call returning a byte count means (`write`, `copy_file_range`): 0 or its errno.
func outcome(_ result: Int) -> Int32 {
    result < 0 ? errno : 0
}

/// Opens `path`, runs `body` on the descriptor and closes it; the first errno, or 0.
func withOpened(_ path: String, _ flags: Int32, mode: mode_t = 0o644, _ body: (Int32) -> Int32 = { _ in 0 }) -> Int32 {
    let fd = open(path, flags | O_CLOEXEC, mode)
    guard fd >= 0 else { return errno }
    defer { close(fd) }
    return body(fd)
}

/// Writes all of `bytes` at the descriptor's position; 0 or the errno.
func writeAll(_ fd: Int32, _ bytes: [UInt8]) -> Int32 {
    outcome(bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) })
}

/// Writes all of `bytes` at `offset`; 0 or the errno.
func writeAll(_ fd: Int32, _ bytes: [UInt8], at offset: off_t) -> Int32 {
    outcome(bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, offset) })
}

/// Everything a descriptor reads until end of file.
func readAll(_ fd: Int32) -> [UInt8] {
    var result: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 65536)
    while true {
        let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if count <= 0 { return result }
        result += buffer[0..<count]
    }
}

/// A file's bytes (through the mount or in the store), or nil when it cannot be opened.
func contents(_ path: [CChar]) -> [UInt8]? {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    return readAll(fd)
}

/// A file's bytes, or nil when it cannot be opened.
func contents(_ path: String) -> [UInt8]? {
    contents(Array(path.utf8CString))
}

/// `lstat` of a path, or nil.
func status(_ path: String) -> stat? {
    var info = stat()
    return lstat(path, &info) == 0 ? info : nil
}

/// An extended attribute's value (not following symlinks), or nil.
func extendedAttribute(_ path: String, _ name: String) -> [UInt8]? {
    var buffer = [UInt8](repeating: 0, count: 4096)
    let count = buffer.withUnsafeMutableBytes { lgetxattr(path, name, $0.baseAddress, $0.count) }
    return count >= 0 ? Array(buffer[0..<count]) : nil
}

/// A symlink's target, or nil.
func linkTarget(_ path: String) -> String? {
    var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
    let count = readlink(path, &buffer, buffer.count - 1)
    guard count >= 0 else { return nil }
    return String(decoding: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

/// `timespec` values for `utimensat`.
func times(_ seconds: Int) -> [timespec] {
    [timespec(tv_sec: seconds, tv_nsec: 0), timespec(tv_sec: seconds, tv_nsec: 0)]
}

/// The UTF-8 bytes of a text.
func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

/// `base` with `patch` written over it at `offset` (extending it as a write would).
func overlay(_ base: [UInt8], _ patch: String, at offset: Int) -> [UInt8] {
    var result = base
    if result.count < offset { result += [UInt8](repeating: 0, count: offset - result.count) }
    for (index, byte) in bytes(patch).enumerated() {
        if offset + index < result.count { result[offset + index] = byte } else { result.append(byte) }
    }
    return result
}

/// The symbolic name of an errno, for messages and to compare with the audit log.
func errnoSymbol(_ code: Int32) -> String {
    let names: [Int32: String] = [
        0: "success", EPERM: "EPERM", ENOENT: "ENOENT", EIO: "EIO", EBADF: "EBADF", EACCES: "EACCES",
        EBUSY: "EBUSY", EEXIST: "EEXIST", EXDEV: "EXDEV", ENOTDIR: "ENOTDIR", EISDIR: "EISDIR",
        EINVAL: "EINVAL", EROFS: "EROFS", ENAMETOOLONG: "ENAMETOOLONG", ENOSYS: "ENOSYS",
        ENOTEMPTY: "ENOTEMPTY", ELOOP: "ELOOP", ENODATA: "ENODATA", ENOTCONN: "ENOTCONN", EOPNOTSUPP: "EOPNOTSUPP",
    ]
    return names[code] ?? "errno \(code)"
}

// MARK: - Store state

/// Everything about one node that an operation could change — type, mode, owner, size,
/// link count, inode, modification and change times, content or target, extended
/// attributes — or nil when there is none.
func nodeState(_ path: String) -> String? {
    guard let info = status(path) else { return nil }
    var state =
        "mode \(String(info.st_mode, radix: 8)) owner \(info.st_uid):\(info.st_gid) size \(info.st_size)"
        + " links \(info.st_nlink) inode \(info.st_ino)"
        + " mtime \(info.st_mtim.tv_sec).\(info.st_mtim.tv_nsec) ctime \(info.st_ctim.tv_sec).\(info.st_ctim.tv_nsec)"
    switch info.st_mode & S_IFMT {
    case S_IFREG: state += " content \(contents(path).map { $0.map { String($0, radix: 16) }.joined(separator: ",") } ?? "?")"
    case S_IFLNK: state += " target \(linkTarget(path) ?? "?")"
    default: break
    }
    var names = [CChar](repeating: 0, count: 4096)
    let size = llistxattr(path, &names, names.count)
    if size > 0 {
        for name in names[0..<size].split(separator: 0).map({ String(decoding: $0.map { UInt8(bitPattern: $0) }, as: UTF8.self) }).sorted()
        {
            state += " xattr \(name)=\(extendedAttribute(path, name) ?? [])"
        }
    }
    return state
}

/// A tree's contents (`treeDigest`) plus what that leaves out: owners, link counts, times,
/// symlink targets and extended attributes of every node.
func treeState(_ path: String) throws -> String {
    let metadata = try runProgram([
        "bash", "-o", "pipefail", "-c",
        "cd \"$1\" && find . -printf '%p %y %U:%G %m %n %T@ %C@ %l\\n' | LC_ALL=C sort && getfattr -R -h -d -m - .",
        "bash", path,
    ])
    // Fails on an error: "unchanged" must not mean "unreadable both times".
    guard metadata.status == 0 else { throw TestFailure("cannot read the metadata of \(path): \(metadata)") }
    return try treeDigest(path) + metadata.stdout
}

/// Puts a file with `text` in the store (behind the mount's back), making its folders.
func putInStore(_ container: MountedContainer, _ relative: String, _ text: String, mode: mode_t = 0o644) throws {
    let path = container.stored(relative)
    try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
    guard FileManager.default.createFile(atPath: path, contents: Data(text.utf8)) else { throw TestFailure("cannot write \(path)") }
    chmod(path, mode)
}

/// Makes a folder in the store (behind the mount's back), with its parents.
func makeStoredDirectory(_ container: MountedContainer, _ relative: String) throws {
    try FileManager.default.createDirectory(atPath: container.stored(relative), withIntermediateDirectories: true)
}

/// The names in a directory as raw bytes (Python's `os.listdir` of a bytes path), sorted.
func listingAsBytes(_ path: [UInt8]) throws -> [[UInt8]] {
    let script = "import os, sys; print('\\n'.join(sorted(n.hex() for n in os.listdir(bytes.fromhex(sys.argv[1])))))"
    let result = try runProgram(["python3", "-c", script, path.map { String(format: "%02x", $0) }.joined()])
    guard result.status == 0 else { throw TestFailure("listing \(path) failed: \(result)") }
    return result.stdout.split(separator: "\n").map { hex in
        stride(from: 0, to: hex.count, by: 2).map { offset in
            let start = hex.index(hex.startIndex, offsetBy: offset)
            return UInt8(hex[start..<hex.index(start, offsetBy: 2)], radix: 16)!
        }
    }
}
