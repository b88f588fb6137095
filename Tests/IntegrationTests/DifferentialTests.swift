import CLinux
import ContainerPolicy
import Foundation
import Glibc
import PolicySpec
import Testing

/// Random sequences of operations, applied through a mount and to a model — a plain copy
/// of the store plus SPEC §2's tables (`PolicySpec`, written independently of the engine)
/// — must agree on every result, on the audit log and on the tree.
///
/// CONTAINERFS_FUZZ_SEEDS=N runs N seeds (default 5), from CONTAINERFS_FUZZ_SEED (default 1;
/// `random` picks one), with CONTAINERFS_FUZZ_OPS operations each (default 200). A failure
/// names its seed and step; rerun it with CONTAINERFS_FUZZ_SEED=S CONTAINERFS_FUZZ_SEEDS=1, and
/// CONTAINERFS_FUZZ_TRACE=1 prints every step.
@Suite("Differential")
struct DifferentialTests {
    /// Each seed runs on a default mount and on one with the kernel's write cache.
    @Test(arguments: FuzzSettings.seeds, [[], ["writeback"]])
    func mountAgreesWithModel(seed: UInt64, options: [String]) throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        try fuzzPopulateStore(container)
        let modelRoot = container.base + "/model"
        let copied = try runProgram(["cp", "-a", container.store, modelRoot])
        guard copied.status == 0 else { throw TestFailure("cp -a of the store failed: \(copied)") }
        // The mount shows the store's top folder, 0700 on disk, as 0755 (docs/policy.md).
        chmod(modelRoot, 0o755)
        try container.mount(options: options)

        let layout = ContainerLayout(bundleName: Array(container.bundleName.utf8))
        let model = FuzzModel(root: Array(modelRoot.utf8), layout: layout)
        let mountRoot = Array(container.mountpoint.utf8)
        var generator = FuzzGenerator(seed: seed, bundleName: container.bundleName)
        var history: [String] = []
        var audited = try container.auditRecords().count
        let rerun = "mount options \(options); rerun with CONTAINERFS_FUZZ_SEED=\(seed) CONTAINERFS_FUZZ_SEEDS=1"

        for step in 1...FuzzSettings.operations {
            let operation = generator.next(existing: model.paths())
            if options.contains("writeback"), operation.writesPastExt4sLargestFile {
                history.append("\(step): \(operation) — skipped (the writeback cache takes it, docs/testing.md)")
                continue
            }
            let expected = model.expect(operation)
            if let inconsistency = model.inconsistency {
                Issue.record("seed \(seed), step \(step): \(operation)\nthe test's model of the kernel is wrong: \(inconsistency)\n\(rerun)")
                return
            }
            guard let expected else {
                history.append("\(step): \(operation) — skipped (would follow a symlink)")
                continue
            }
            let actual = fuzzPerform(operation, in: mountRoot)
            history.append("\(step): \(operation) → \(actual)")
            if FuzzSettings.trace { print("seed \(seed) \(options) \(history.last!)") }
            if actual != expected {
                Issue.record("""
                    seed \(seed), step \(step): \(operation)
                    through the mount: \(actual)
                    model expects:     \(expected)
                    \(rerun)
                    steps so far:
                    \(history.suffix(40).joined(separator: "\n"))
                    """)
                return
            }
            // A denial the filesystem made is audited, under the rule the spec names; the
            // others (allowed, answered by the kernel first, or not in the container) are not.
            if let denial = model.audit {
                let records = try container.waitForAudit(count: audited + 1)
                let rule = records.last?["rule"] as? String, errnoName = records.last?["errno"] as? String
                if case .deny(let named, _) = denial, rule != named.rawValue {
                    Issue.record("seed \(seed), step \(step): \(operation): audited as \(rule ?? "nothing"), the spec says \(denial)\n\(rerun)")
                    return
                }
                if errnoName != denial.errno.map(PolicySpec.errnoName) {
                    Issue.record("seed \(seed), step \(step): \(operation): audited with \(errnoName ?? "no errno"), the spec says \(denial)\n\(rerun)")
                    return
                }
                audited = records.count
            } else {
                let records = try container.auditRecords()
                if records.count != audited {
                    Issue.record("seed \(seed), step \(step): \(operation) → \(actual): audited, the spec says it is not: \(records[audited...])\n\(rerun)")
                    return
                }
            }
        }

        // The mount shows what the model holds, minus what the store keeps for itself, and
        // its top folder, 0700 on disk, as 0755 (docs/policy.md).
        let seen = fuzzSnapshot(mountRoot, skip: { _ in false })
        let wanted = fuzzSnapshot(model.root, skip: { layout.location(of: $0) == .hidden })
        if let difference = fuzzFirstDifference(seen, wanted) {
            Issue.record("seed \(seed): after \(FuzzSettings.operations) steps the mount's tree differs from the model's:\n\(difference)\n\(rerun)\nsteps:\n\(history.suffix(40).joined(separator: "\n"))")
        }
        // The store holds exactly the model's tree (its markers included), state folder aside.
        let isStateFolder = { (path: ContainerPath) in path.components.first == ContainerLayout.stateFolderName }
        chmod(modelRoot, 0o700)
        let stored = fuzzSnapshot(Array(container.store.utf8), skip: isStateFolder)
        let modelled = fuzzSnapshot(model.root, skip: isStateFolder)
        if let difference = fuzzFirstDifference(stored, modelled) {
            Issue.record("seed \(seed): after \(FuzzSettings.operations) steps the store's tree differs from the model's:\n\(difference)\n\(rerun)")
        }
    }
}

/// Puts entries in the store before it is mounted and copied: the inbox in particular can
/// only be filled from outside.
private func fuzzPopulateStore(_ container: MountedContainer) throws {
    let files: [(String, String)] = [
        ("Documents/a", "hello\n"),
        ("Documents/b/c", "nested\n"),
        ("Documents/Inbox/a", "handed over a\n"),
        ("Documents/Inbox/b/a", "handed over b/a\n"),
        ("Documents/Inbox/c", "handed over c\n"),
        ("Documents/Inbox/d", "handed over d\n"),
        ("Library/Caches/a", "cached\n"),
        ("Library/Preferences/c", "prefs\n"),
    ]
    for (path, contents) in files {
        let url = URL(fileURLWithPath: container.stored(path))
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data(contents.utf8).write(to: url)
    }
    for directory in ["Documents/Inbox/b/c", "Documents/Inbox/e", "tmp/b"] {
        try FileManager.default.createDirectory(atPath: container.stored(directory), withIntermediateDirectories: true)
    }
    let tagged = try runProgram(["setfattr", "-n", "user.a", "-v", "inbox", container.stored("Documents/Inbox/d")])
    guard tagged.status == 0 else { throw TestFailure("setfattr failed: \(tagged)") }
}

// MARK: - Settings and randomness

enum FuzzSettings {
    private static let environment = ProcessInfo.processInfo.environment

    /// The seeds to run, from the environment.
    static let seeds: [UInt64] = {
        let count = environment["CONTAINERFS_FUZZ_SEEDS"].flatMap { Int($0) } ?? 5
        let start: UInt64 = environment["CONTAINERFS_FUZZ_SEED"] == "random"
            ? UInt64.random(in: 1...UInt64(UInt32.max))
            : environment["CONTAINERFS_FUZZ_SEED"].flatMap { UInt64($0) } ?? 1
        return (0..<UInt64(max(count, 0))).map { start + $0 }
    }()

    /// Whether every step is printed.
    static let trace = environment["CONTAINERFS_FUZZ_TRACE"] != nil

    /// Operations per seed.
    static let operations: Int = max(1, environment["CONTAINERFS_FUZZ_OPS"].flatMap { Int($0) } ?? 200)
}

/// FuzzRandom: small, fast, and the same sequence for a seed on every machine.
private struct FuzzRandom: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

// MARK: - Operations

private typealias FuzzBytes = [UInt8]
/// A path relative to the container's root, as its components.
private typealias FuzzPath = [FuzzBytes]

private func fuzzText(_ path: FuzzPath) -> String {
    path.isEmpty ? "/" : ContainerPath(components: path).description
}

private func fuzzJoined(_ root: FuzzBytes, _ path: FuzzPath) -> FuzzBytes {
    path.reduce(root) { $0 + [UInt8(ascii: "/")] + $1 }
}

/// One step of a sequence. Calls never follow a symlink at the last component, except
/// `truncate` and `chmod`, which the model skips when they would.
private enum FuzzOperation: CustomStringConvertible {
    case createFile(FuzzPath, flags: Int32, data: FuzzBytes)
    case write(FuzzPath, offset: Int, data: FuzzBytes)
    case append(FuzzPath, data: FuzzBytes)
    case truncate(FuzzPath, size: Int)
    case mkdir(FuzzPath, mode: mode_t)
    case rmdir(FuzzPath)
    case unlink(FuzzPath)
    case rename(FuzzPath, FuzzPath, flags: UInt32)
    case link(FuzzPath, FuzzPath)
    case symlink(target: FuzzBytes, FuzzPath)
    case chmod(FuzzPath, mode: mode_t)
    case setxattr(FuzzPath, name: String, value: FuzzBytes, flags: Int32)
    case removexattr(FuzzPath, name: String)
    case open(FuzzPath, flags: Int32)
    case read(FuzzPath)
    case stat(FuzzPath)
    case list(FuzzPath)
    case utimens(FuzzPath, seconds: Int)
    case fallocate(FuzzPath, offset: Int, length: Int)
    case copyRange(from: FuzzPath, to: FuzzPath, length: Int)

    /// A write ending past ext4's largest file (16 TiB). With the kernel's writeback cache
    /// the page cache takes it and only the write-back fails (`EIO` at close, where ext4
    /// answers `EFBIG`): a divergence of the cache's design (docs/testing.md), not asked of
    /// a writeback mount.
    var writesPastExt4sLargestFile: Bool {
        guard case .write(_, let offset, _) = self else { return false }
        return offset >= 1 << 44
    }

    /// The system call that fails when the kernel or the policy refuses the step.
    var firstCall: String {
        switch self {
        case .createFile, .write, .append, .open, .read: "open"
        case .truncate: "truncate"
        case .mkdir: "mkdir"
        case .rmdir: "rmdir"
        case .unlink: "unlink"
        case .rename: "renameat2"
        case .link: "link"
        case .symlink: "symlink"
        case .chmod: "chmod"
        case .setxattr: "lsetxattr"
        case .removexattr: "lremovexattr"
        case .stat: "lstat"
        case .list: "opendir"
        case .utimens: "utimensat"
        case .fallocate, .copyRange: "open"
        }
    }

    var description: String {
        switch self {
        case .createFile(let path, let flags, let data): "create \(fuzzText(path)) \(fuzzOpenFlagsText(O_WRONLY | O_CREAT | flags)) + write \(data.count) bytes"
        case .write(let path, let offset, let data): "write \(fuzzText(path)) \(data.count) bytes at \(offset)"
        case .append(let path, let data): "append \(fuzzText(path)) \(data.count) bytes"
        case .truncate(let path, let size): "truncate \(fuzzText(path)) to \(size)"
        case .mkdir(let path, let mode): "mkdir \(fuzzText(path)) \(String(mode, radix: 8))"
        case .rmdir(let path): "rmdir \(fuzzText(path))"
        case .unlink(let path): "unlink \(fuzzText(path))"
        case .rename(let from, let to, let flags):
            "rename \(fuzzText(from)) -> \(fuzzText(to))" + (flags == clinux_RENAME_NOREPLACE ? " NOREPLACE" : flags == clinux_RENAME_EXCHANGE ? " EXCHANGE" : "")
        case .link(let from, let to): "link \(fuzzText(from)) -> \(fuzzText(to))"
        case .symlink(let target, let path): "symlink \(fuzzText(path)) -> \(ContainerPath.printable(target))"
        case .chmod(let path, let mode): "chmod \(String(mode, radix: 8)) \(fuzzText(path))"
        case .setxattr(let path, let name, let value, let flags):
            "setxattr \(fuzzText(path)) \(name)=\(value.count) bytes" + (flags == Int32(XATTR_CREATE) ? " CREATE" : flags == Int32(XATTR_REPLACE) ? " REPLACE" : "")
        case .removexattr(let path, let name): "removexattr \(fuzzText(path)) \(name)"
        case .open(let path, let flags): "open \(fuzzText(path)) \(fuzzOpenFlagsText(flags))"
        case .read(let path): "read \(fuzzText(path))"
        case .stat(let path): "lstat \(fuzzText(path))"
        case .list(let path): "list \(fuzzText(path))"
        case .utimens(let path, let seconds): "utimensat \(fuzzText(path)) \(seconds) (no follow)"
        case .fallocate(let path, let offset, let length): "fallocate \(fuzzText(path)) \(length) bytes at \(offset)"
        case .copyRange(let from, let to, let length): "copy_file_range \(fuzzText(from)) -> \(fuzzText(to)) \(length) bytes"
        }
    }
}

private func fuzzOpenFlagsText(_ flags: Int32) -> String {
    var words = [flags & O_ACCMODE == O_WRONLY ? "O_WRONLY" : flags & O_ACCMODE == O_RDWR ? "O_RDWR" : "O_RDONLY"]
    for (flag, name) in [(O_CREAT, "O_CREAT"), (O_EXCL, "O_EXCL"), (O_TRUNC, "O_TRUNC"), (O_APPEND, "O_APPEND"), (O_DIRECTORY, "O_DIRECTORY")]
    where flags & flag != 0 { words.append(name) }
    return words.joined(separator: "|")
}

/// What a step did: the same on both sides, or they disagree.
private enum FuzzOutcome: Equatable, CustomStringConvertible {
    case done
    case failed(String, Int32)
    case contents(FuzzBytes)
    case attributes(FuzzNodeSummary)
    case names([FuzzBytes])
    case count(Int)

    var description: String {
        switch self {
        case .done: "ok"
        case .failed(let call, let code): "\(call): \(fuzzErrnoName(code))"
        case .contents(let bytes): "read \(bytes.count) bytes (hash \(String(fuzzHash(bytes), radix: 16)))"
        case .attributes(let summary): "\(summary)"
        case .names(let names): "[" + names.map { ContainerPath.printable($0) }.joined(separator: ", ") + "]"
        case .count(let count): "\(count) bytes"
        }
    }
}

/// The attributes a step compares: type, size (not for folders, whose size depends on
/// their history), permission bits (not for symlinks) and link count.
private struct FuzzNodeSummary: Equatable, CustomStringConvertible {
    let type: String
    let size: Int
    let mode: mode_t
    let links: Int

    init(_ info: stat) {
        switch info.st_mode & S_IFMT {
        case S_IFDIR: type = "dir"
        case S_IFREG: type = "file"
        case S_IFLNK: type = "symlink"
        default: type = "other \(String(info.st_mode & S_IFMT, radix: 8))"
        }
        size = type == "dir" ? 0 : Int(info.st_size)
        mode = type == "symlink" ? 0 : info.st_mode & 0o7777
        links = Int(info.st_nlink)
    }

    var description: String { "\(type) size \(size) mode \(String(mode, radix: 8)) links \(links)" }
}

private func fuzzErrnoName(_ code: Int32) -> String {
    let names: [Int32: String] = [
        EPERM: "EPERM", ENOENT: "ENOENT", EACCES: "EACCES", EEXIST: "EEXIST", ENOTDIR: "ENOTDIR",
        EISDIR: "EISDIR", EINVAL: "EINVAL", ENOTEMPTY: "ENOTEMPTY", ELOOP: "ELOOP", ENODATA: "ENODATA",
        ENAMETOOLONG: "ENAMETOOLONG", EXDEV: "EXDEV", EBUSY: "EBUSY", ENOSYS: "ENOSYS", EIO: "EIO",
        EMLINK: "EMLINK", EBADF: "EBADF", ENOTCONN: "ENOTCONN", EROFS: "EROFS",
    ]
    return names[code] ?? "errno \(code)"
}

private func fuzzHash(_ bytes: FuzzBytes) -> UInt64 {
    bytes.reduce(0xcbf2_9ce4_8422_2325) { ($0 ^ UInt64($1)) &* 0x100_0000_01b3 }
}

// MARK: - Doing a step

private func fuzzWithCPath<R>(_ bytes: FuzzBytes, _ body: (UnsafePointer<CChar>) -> R) -> R {
    (bytes + [0]).withUnsafeBufferPointer { buffer in
        buffer.withMemoryRebound(to: CChar.self) { body($0.baseAddress!) }
    }
}

/// Runs `call`; its errno if it fails.
private func fuzzAttempt(_ name: String, _ call: () -> Int) -> FuzzOutcome? {
    errno = 0
    return call() < 0 ? .failed(name, errno) : nil
}

/// Performs `operation` on the tree at `root` with real system calls.
private func fuzzPerform(_ operation: FuzzOperation, in root: FuzzBytes) -> FuzzOutcome {
    func path(_ relative: FuzzPath) -> FuzzBytes { fuzzJoined(root, relative) }

    /// Opens, lets `body` work on the descriptor, closes; close errors count too.
    func withOpened(_ relative: FuzzPath, _ flags: Int32, _ body: (Int32) -> FuzzOutcome) -> FuzzOutcome {
        errno = 0
        let fd = fuzzWithCPath(path(relative)) { Glibc.open($0, flags | O_NOFOLLOW | O_CLOEXEC, 0o644) }
        guard fd >= 0 else { return .failed("open", errno) }
        let result = body(fd)
        errno = 0
        if close(fd) != 0, result == .done { return .failed("close", errno) }
        return result
    }

    func writeAll(_ fd: Int32, _ data: FuzzBytes, at offset: Int?) -> FuzzOutcome {
        var done = 0
        while done < data.count {
            let count = data.withUnsafeBytes { buffer in
                offset.map { pwrite(fd, buffer.baseAddress! + done, data.count - done, off_t($0 + done)) }
                    ?? Glibc.write(fd, buffer.baseAddress! + done, data.count - done)
            }
            if count < 0 { return .failed(offset == nil ? "write" : "pwrite", errno) }
            if count == 0 { return .failed("write returned 0", 0) }
            done += count
        }
        return .done
    }

    switch operation {
    case .createFile(let relative, let flags, let data):
        return withOpened(relative, O_WRONLY | O_CREAT | flags) { writeAll($0, data, at: nil) }
    case .write(let relative, let offset, let data):
        return withOpened(relative, O_WRONLY) { writeAll($0, data, at: offset) }
    case .append(let relative, let data):
        return withOpened(relative, O_WRONLY | O_APPEND) { writeAll($0, data, at: nil) }
    case .truncate(let relative, let size):
        return fuzzAttempt("truncate") { Int(fuzzWithCPath(path(relative)) { Glibc.truncate($0, off_t(size)) }) } ?? .done
    case .mkdir(let relative, let mode):
        return fuzzAttempt("mkdir") { Int(fuzzWithCPath(path(relative)) { Glibc.mkdir($0, mode) }) } ?? .done
    case .rmdir(let relative):
        return fuzzAttempt("rmdir") { Int(fuzzWithCPath(path(relative)) { Glibc.rmdir($0) }) } ?? .done
    case .unlink(let relative):
        return fuzzAttempt("unlink") { Int(fuzzWithCPath(path(relative)) { Glibc.unlink($0) }) } ?? .done
    case .rename(let from, let to, let flags):
        return fuzzAttempt("renameat2") {
            Int(fuzzWithCPath(path(from)) { old in fuzzWithCPath(path(to)) { new in clinux_renameat2(AT_FDCWD, old, AT_FDCWD, new, flags) } })
        } ?? .done
    case .link(let from, let to):
        return fuzzAttempt("link") {
            Int(fuzzWithCPath(path(from)) { old in fuzzWithCPath(path(to)) { new in linkat(AT_FDCWD, old, AT_FDCWD, new, 0) } })
        } ?? .done
    case .symlink(let target, let relative):
        return fuzzAttempt("symlink") {
            Int(fuzzWithCPath(target) { target in fuzzWithCPath(path(relative)) { Glibc.symlink(target, $0) } })
        } ?? .done
    case .chmod(let relative, let mode):
        return fuzzAttempt("chmod") { Int(fuzzWithCPath(path(relative)) { Glibc.chmod($0, mode) }) } ?? .done
    case .setxattr(let relative, let name, let value, let flags):
        return fuzzAttempt("lsetxattr") {
            Int(fuzzWithCPath(path(relative)) { file in value.withUnsafeBytes { lsetxattr(file, name, $0.baseAddress, value.count, flags) } })
        } ?? .done
    case .removexattr(let relative, let name):
        return fuzzAttempt("lremovexattr") { Int(fuzzWithCPath(path(relative)) { lremovexattr($0, name) }) } ?? .done
    case .open(let relative, let flags):
        return withOpened(relative, flags) { _ in .done }
    case .read(let relative):
        return withOpened(relative, O_RDONLY) { fd in
            var contents: FuzzBytes = []
            var buffer = FuzzBytes(repeating: 0, count: 65536)
            while true {
                let count = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
                if count < 0 { return .failed("read", errno) }
                if count == 0 { return .contents(contents) }
                contents += buffer[0..<count]
            }
        }
    case .utimens(let relative, let seconds):
        var times = [timespec(tv_sec: seconds, tv_nsec: 0), timespec(tv_sec: seconds, tv_nsec: 0)]
        return fuzzAttempt("utimensat") { Int(fuzzWithCPath(path(relative)) { utimensat(AT_FDCWD, $0, &times, AT_SYMLINK_NOFOLLOW) }) } ?? .done
    case .fallocate(let relative, let offset, let length):
        return withOpened(relative, O_WRONLY) { fd in
            // fallocate(2) returns the error itself, not in errno.
            let result = clinux_fallocate(fd, 0, off_t(offset), off_t(length))
            return result == 0 ? .done : .failed("fallocate", result < 0 ? errno : result)
        }
    case .copyRange(let from, let to, let length):
        return withOpened(from, O_RDONLY) { input in
            withOpened(to, O_WRONLY) { output in
                var copied = 0
                while copied < length {
                    let count = clinux_copy_file_range(input, nil, output, nil, length - copied, 0)
                    if count < 0 { return .failed("copy_file_range", errno) }
                    if count == 0 { break }
                    copied += count
                }
                return .count(copied)
            }
        }
    case .stat(let relative):
        var info = stat()
        if let failure = fuzzAttempt("lstat", { Int(fuzzWithCPath(path(relative)) { lstat($0, &info) }) }) { return failure }
        return .attributes(FuzzNodeSummary(info))
    case .list(let relative):
        errno = 0
        let fd = fuzzWithCPath(path(relative)) { Glibc.open($0, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
        guard fd >= 0 else { return .failed("opendir", errno) }
        return .names(fuzzDirectoryNames(fd))
    }
}

/// The names in the folder open as `fd` (which is consumed), sorted by their bytes.
private func fuzzDirectoryNames(_ fd: Int32) -> [FuzzBytes] {
    guard let stream = fdopendir(fd) else {
        close(fd)
        return []
    }
    defer { closedir(stream) }
    var names: [FuzzBytes] = []
    while let entry = readdir(stream) {
        let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in FuzzBytes(raw.prefix { $0 != 0 }) }
        if name == [0x2E] || name == [0x2E, 0x2E] { continue }
        names.append(name)
    }
    return names.sorted { $0.lexicographicallyPrecedes($1) }
}

// MARK: - The model

/// Why the model stops early: the kernel (or the policy) answers before the store is touched,
/// or nil when the step would follow a symlink and is skipped.
private struct FuzzEarly: Error {
    let outcome: FuzzOutcome?
}

/// A plain directory laid out like the store, changed only where the policy allows, plus
/// what the kernel decides before a FUSE filesystem is asked.
private final class FuzzModel {
    let root: FuzzBytes
    let layout: ContainerLayout
    /// Set when the model's own prediction of a kernel error disagrees with the kernel.
    var inconsistency: String?
    /// The audited denial the latest step must leave in the audit log, if any.
    private(set) var audit: Expected?

    init(root: FuzzBytes, layout: ContainerLayout) {
        self.root = root
        self.layout = layout
    }

    enum Kind: Equatable { case absent, file, directory, symlink, other }

    /// Every path in the model's directory (the state folder's contents aside), and
    /// whether it is a folder, in a stable order.
    func paths() -> [(path: FuzzPath, isFolder: Bool)] {
        var result: [(path: FuzzPath, isFolder: Bool)] = []
        func visit(_ path: FuzzPath) {
            let isFolder = nativeKind(path) == .directory
            result.append((path, isFolder))
            guard isFolder, path.first != ContainerLayout.stateFolderName else { return }
            let fd = fuzzWithCPath(fuzzJoined(root, path)) { Glibc.open($0, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
            guard fd >= 0 else { return }
            for name in fuzzDirectoryNames(fd) { visit(path + [name]) }
        }
        visit([])
        return result
    }

    private func location(_ path: FuzzPath) -> ContainerPolicy.Location {
        layout.location(of: ContainerPath(components: path))
    }

    /// The outcome the mount must give, or nil to skip the step.
    func expect(_ operation: FuzzOperation) -> FuzzOutcome? {
        audit = nil
        do {
            return try predict(operation)
        } catch {
            return error.outcome
        }
    }

    /// The parent folders of `path`, as the kernel walks them: each looked up (a hidden
    /// name is not there), each a folder. A symlink on the way would be followed: skip.
    private func walkParent(_ path: FuzzPath, _ call: String) throws(FuzzEarly) {
        for index in path.indices.dropLast() {
            let prefix = Array(path[...index])
            switch try lookup(prefix, call) {
            case .absent: throw FuzzEarly(outcome: .failed(call, ENOENT))
            case .symlink: throw FuzzEarly(outcome: nil)
            case .directory: continue
            case .file, .other: throw FuzzEarly(outcome: .failed(call, ENOTDIR))
            }
        }
    }

    /// The last component of `path`, as a lookup through the mount finds it.
    private func lookup(_ path: FuzzPath, _ call: String) throws(FuzzEarly) -> Kind {
        if let last = path.last, last.count > Int(NAME_MAX) { throw FuzzEarly(outcome: .failed(call, ENAMETOOLONG)) }
        if location(path) == .hidden { return .absent }
        return nativeKind(path)
    }

    private func nativeKind(_ path: FuzzPath) -> Kind {
        var info = stat()
        guard fuzzWithCPath(fuzzJoined(root, path), { lstat($0, &info) }) == 0 else { return .absent }
        switch info.st_mode & S_IFMT {
        case S_IFREG: return .file
        case S_IFDIR: return .directory
        case S_IFLNK: return .symlink
        default: return .other
        }
    }

    private func inode(_ path: FuzzPath) -> (UInt, UInt)? {
        var info = stat()
        guard fuzzWithCPath(fuzzJoined(root, path), { lstat($0, &info) }) == 0 else { return nil }
        return (UInt(info.st_dev), UInt(info.st_ino))
    }

    /// Applies SPEC §2's tables: a denial answers with its errno unless the kernel answers
    /// first (`early`); one the filesystem makes is audited. When allowed, the step runs on
    /// the model's directory, whose kernel gives the same early answers; the model checks
    /// that it does.
    private func gate(_ operation: ContainerPolicy.Operation, _ step: FuzzOperation, early: FuzzOutcome? = nil) throws(FuzzEarly) -> FuzzOutcome {
        let specified = PolicySpec.specified(operation)
        if let errno = specified.errno {
            if early == nil, specified.isAudited { audit = specified }
            throw FuzzEarly(outcome: early ?? .failed(step.firstCall, errno))
        }
        let outcome = fuzzPerform(step, in: root)
        if let early, outcome != early {
            inconsistency = "predicted the kernel's \(early) before the filesystem is asked; the model's own directory says \(outcome)"
        }
        return outcome
    }

    private func predict(_ step: FuzzOperation) throws(FuzzEarly) -> FuzzOutcome {
        let call = step.firstCall
        switch step {
        case .createFile(let path, let flags, _):
            try walkParent(path, call)
            let kind = try lookup(path, call)
            if kind == .absent { return try gate(.create(location(path)), step) }
            let early: Int32? = flags & O_EXCL != 0 ? EEXIST : kind == .symlink ? ELOOP : kind == .directory ? EISDIR : nil
            return try gate(.changeContent(location(path)), step, early: early.map { .failed(call, $0) })

        case .write(let path, _, _), .append(let path, _):
            try walkParent(path, call)
            let kind = try lookup(path, call)
            if kind == .absent { throw FuzzEarly(outcome: .failed(call, ENOENT)) }
            let early: Int32? = kind == .symlink ? ELOOP : kind == .directory ? EISDIR : nil
            return try gate(.changeContent(location(path)), step, early: early.map { .failed(call, $0) })

        case .truncate(let path, _):
            try walkParent(path, call)
            switch try lookup(path, call) {
            case .absent: throw FuzzEarly(outcome: .failed(call, ENOENT))
            case .symlink: throw FuzzEarly(outcome: nil)
            case .directory: return try gate(.changeContent(location(path)), step, early: .failed(call, EISDIR))
            case .file, .other: return try gate(.changeContent(location(path)), step)
            }

        case .mkdir(let path, _), .symlink(_, let path):
            try walkParent(path, call)
            let exists = try lookup(path, call) != .absent
            return try gate(.create(location(path)), step, early: exists ? .failed(call, EEXIST) : nil)

        case .rmdir(let path):
            try walkParent(path, call)
            let kind = try lookup(path, call)
            if kind == .absent { throw FuzzEarly(outcome: .failed(call, ENOENT)) }
            return try gate(.delete(location(path)), step, early: kind == .directory ? nil : .failed(call, ENOTDIR))

        case .unlink(let path):
            try walkParent(path, call)
            let kind = try lookup(path, call)
            if kind == .absent { throw FuzzEarly(outcome: .failed(call, ENOENT)) }
            return try gate(.delete(location(path)), step, early: kind == .directory ? .failed(call, EISDIR) : nil)

        case .rename(let from, let to, let flags):
            // do_renameat2: both parents, the source, the target, the flags, the ancestry
            // traps; then vfs_rename: same inode, the types; then the filesystem.
            try walkParent(from, call)
            try walkParent(to, call)
            let source = try lookup(from, call)
            if source == .absent { throw FuzzEarly(outcome: .failed(call, ENOENT)) }
            let target = try lookup(to, call)
            let exchange = flags & clinux_RENAME_EXCHANGE != 0
            var early: FuzzOutcome?
            if flags & clinux_RENAME_NOREPLACE != 0, target != .absent {
                early = .failed(call, EEXIST)
            } else if exchange, target == .absent {
                early = .failed(call, ENOENT)
            } else if to.dropLast().starts(with: from) {
                early = .failed(call, EINVAL)
            } else if from.dropLast().starts(with: to) {
                early = .failed(call, exchange ? EINVAL : ENOTEMPTY)
            } else if target != .absent, let a = inode(from), let b = inode(to), a == b {
                early = .done
            } else if !exchange, target != .absent, (source == .directory) != (target == .directory) {
                early = .failed(call, source == .directory ? ENOTDIR : EISDIR)
            }
            return try gate(.rename(from: location(from), to: location(to), exchange: exchange), step, early: early)

        case .link(let from, let to):
            try walkParent(from, call)
            let source = try lookup(from, call)
            if source == .absent { throw FuzzEarly(outcome: .failed(call, ENOENT)) }
            try walkParent(to, call)
            let exists = try lookup(to, call) != .absent
            let early: Int32? = exists ? EEXIST : source == .directory ? EPERM : nil
            return try gate(.link(from: location(from), to: location(to)), step, early: early.map { .failed(call, $0) })

        case .chmod(let path, _):
            try walkParent(path, call)
            switch try lookup(path, call) {
            case .absent: throw FuzzEarly(outcome: .failed(call, ENOENT))
            case .symlink: throw FuzzEarly(outcome: nil)
            default: return try gate(.changeMetadata(location(path)), step)
            }

        case .setxattr(let path, _, _, _), .removexattr(let path, _):
            try walkParent(path, call)
            let kind = try lookup(path, call)
            if kind == .absent { throw FuzzEarly(outcome: .failed(call, ENOENT)) }
            // User attributes exist only on files and folders; the VFS says so first.
            return try gate(.changeMetadata(location(path)), step, early: kind == .symlink ? .failed(call, EPERM) : nil)

        case .open(let path, let flags):
            try walkParent(path, call)
            let kind = try lookup(path, call)
            let creating = flags & O_CREAT != 0
            if kind == .absent {
                guard creating else { throw FuzzEarly(outcome: .failed(call, ENOENT)) }
                return try gate(.create(location(path)), step)
            }
            let writes = flags & O_ACCMODE != O_RDONLY || flags & O_TRUNC != 0
            var early: Int32?
            if creating, flags & O_EXCL != 0 { early = EEXIST }
            else if kind == .directory, creating || writes { early = EISDIR }
            else if kind != .directory, flags & O_DIRECTORY != 0 { early = ENOTDIR }
            else if kind == .symlink { early = ELOOP }
            // A folder is opened with opendir, which changes nothing.
            let mutates = kind != .directory && (writes || flags & O_APPEND != 0)
            let operation: ContainerPolicy.Operation = mutates ? .changeContent(location(path)) : .read(location(path))
            return try gate(operation, step, early: early.map { .failed(call, $0) })

        case .utimens(let path, _):
            try walkParent(path, call)
            if try lookup(path, call) == .absent { throw FuzzEarly(outcome: .failed(call, ENOENT)) }
            return try gate(.changeMetadata(location(path)), step)

        case .fallocate(let path, _, _):
            try walkParent(path, call)
            let kind = try lookup(path, call)
            if kind == .absent { throw FuzzEarly(outcome: .failed(call, ENOENT)) }
            let early: Int32? = kind == .symlink ? ELOOP : kind == .directory ? EISDIR : nil
            return try gate(.changeContent(location(path)), step, early: early.map { .failed(call, $0) })

        case .copyRange(let from, let to, _):
            // The source is opened for reading first, then the target for writing.
            try walkParent(from, call)
            let source = try lookup(from, call)
            if source == .absent { throw FuzzEarly(outcome: .failed(call, ENOENT)) }
            if source == .symlink { throw FuzzEarly(outcome: .failed(call, ELOOP)) }
            try walkParent(to, call)
            let target = try lookup(to, call)
            if target == .absent { throw FuzzEarly(outcome: .failed(call, ENOENT)) }
            let early: Int32? = target == .symlink ? ELOOP : target == .directory ? EISDIR : nil
            return try gate(.changeContent(location(to)), step, early: early.map { .failed(call, $0) })

        case .read(let path), .stat(let path):
            try walkParent(path, call)
            if try lookup(path, call) == .absent { throw FuzzEarly(outcome: .failed(call, ENOENT)) }
            return try gate(.read(location(path)), step)

        case .list(let path):
            try walkParent(path, call)
            if try lookup(path, call) == .absent { throw FuzzEarly(outcome: .failed(call, ENOENT)) }
            let outcome = try gate(.read(location(path)), step)
            guard case .names(let names) = outcome else { return outcome }
            return .names(names.filter { location(path + [$0]) != .hidden })
        }
    }
}

// MARK: - Generating steps

/// Draws steps from a seed: paths in every area, names that collide often, the standard
/// names themselves, names that are not UTF-8 or differ only by normalization.
private struct FuzzGenerator {
    private var random: FuzzRandom
    private let bundle: FuzzBytes

    init(seed: UInt64, bundleName: String) {
        random = FuzzRandom(state: seed)
        bundle = Array(bundleName.utf8)
    }

    private static let common: [FuzzBytes] = ["a", "b", "c", "d", "e"].map { Array($0.utf8) }
    private static let exotic: [FuzzBytes] = [
        [0xFF, 0xFE, 0x61],              // not UTF-8
        [0xC3, 0xA9],                    // é, composed (NFC)
        [0x65, 0xCC, 0x81],              // é, decomposed (NFD)
        FuzzBytes(repeating: UInt8(ascii: "n"), count: 255),
        FuzzBytes(repeating: UInt8(ascii: "n"), count: 256),
    ]

    /// The folders paths start from, with weights, and the names special in each.
    private var bases: [(FuzzPath, Int, [String])] {
        let b = { (text: String) in Array(text.utf8) }
        return [
            ([], 1, [String(decoding: bundle, as: UTF8.self), "Documents", "Library", "tmp", ".containerfs"]),
            ([bundle], 2, ["Info.plist", "res", "link"]),
            ([bundle, b("res")], 1, ["data.txt"]),
            ([b("Documents")], 5, ["Inbox"]),
            ([b("Documents"), b("Inbox")], 4, []),
            ([b("Library")], 1, ["Caches", "Application Support", "Preferences"]),
            ([b("Library"), b("Application Support")], 1, []),
            ([b("Library"), b("Preferences")], 1, []),
            ([b("Library"), b("Caches")], 3, ["CACHEDIR.TAG"]),
            ([b("tmp")], 3, ["CACHEDIR.TAG"]),
            ([b(".containerfs")], 1, ["format", "mount.lock", "bundle-name"]),
        ]
    }

    private mutating func chance(_ percent: Int) -> Bool { Int.random(in: 0..<100, using: &random) < percent }
    private mutating func pick<T>(_ items: [T]) -> T { items[Int.random(in: 0..<items.count, using: &random)] }

    /// The model's paths at this step, and its folders, to draw from.
    private var existing: [FuzzPath] = []
    private var folders: [FuzzPath] = []

    /// A path that names something (mostly something that exists): for steps that act on a node.
    private mutating func path(allowRoot: Bool = false) -> FuzzPath {
        let candidates = allowRoot ? existing : existing.filter { !$0.isEmpty }
        if chance(65), !candidates.isEmpty { return pick(candidates) }
        if chance(30), !folders.isEmpty { return newName(in: pick(folders)) }
        return randomPath(allowRoot: allowRoot)
    }

    /// A path for something new (mostly in an existing folder): for steps that make a node.
    private mutating func target() -> FuzzPath {
        if chance(55), !folders.isEmpty { return newName(in: pick(folders)) }
        if chance(50), existing.count > 1 { return pick(existing.filter { !$0.isEmpty }) }
        return randomPath(allowRoot: false)
    }

    private mutating func newName(in folder: FuzzPath) -> FuzzPath {
        if chance(5) { return folder + [pick(Self.exotic)] }
        return folder + [pick(Self.common)]
    }

    /// A path drawn from the layout alone; `allowRoot` lets it be the container's root.
    private mutating func randomPath(allowRoot: Bool = false) -> FuzzPath {
        let all = bases
        var roll = Int.random(in: 0..<all.reduce(0) { $0 + $1.1 }, using: &random)
        var chosen = all[0]
        for base in all {
            if roll < base.1 { chosen = base; break }
            roll -= base.1
        }
        var path = chosen.0
        if chance(8), allowRoot || !path.isEmpty { return path }
        // Now and then a deep path, most of it not there.
        let depth = chance(65) ? 0 : chance(75) ? 1 : chance(85) ? 2 : 9
        for _ in 0..<depth { path.append(pick(Array(Self.common.prefix(4)))) }
        if depth == 0, !chosen.2.isEmpty, chance(15) {
            path.append(Array(pick(chosen.2).utf8))
        } else if chance(4) {
            path.append(pick(Self.exotic))
        } else {
            path.append(pick(Self.common))
        }
        return path
    }

    private mutating func data() -> FuzzBytes {
        let count = chance(70) ? Int.random(in: 0...300, using: &random)
            : chance(85) ? Int.random(in: 300...9000, using: &random)
            : Int.random(in: 100_000...300_000, using: &random)
        return (0..<count).map { _ in UInt8.random(in: 0...255, using: &random) }
    }

    mutating func next(existing paths: [(path: FuzzPath, isFolder: Bool)]) -> FuzzOperation {
        existing = paths.map(\.path)
        folders = paths.filter(\.isFolder).map(\.path)
        let weights: [(Int, Int)] = [(0, 12), (1, 8), (2, 6), (3, 5), (4, 10), (5, 5), (6, 7), (7, 14), (8, 5), (17, 3), (18, 3), (19, 3),
                                     (9, 4), (10, 5), (11, 5), (12, 2), (13, 9), (14, 6), (15, 4), (16, 4)]
        var roll = Int.random(in: 0..<weights.reduce(0) { $0 + $1.1 }, using: &random)
        var kind = 0
        for (candidate, weight) in weights {
            if roll < weight { kind = candidate; break }
            roll -= weight
        }
        switch kind {
        case 0: return .createFile(chance(60) ? target() : path(), flags: pick([0, O_EXCL, O_TRUNC]), data: data())
        // Boundary values (issue 19): offsets, sizes and lengths near 2^63, times past 2^33 s and
        // before 1970, each drawn now and then among the ordinary ones.
        case 1: return .write(path(), offset: chance(90) ? Int.random(in: 0...12000, using: &random) : pick([1 << 62, Int.max - 10]), data: data())
        case 2: return .append(path(), data: data())
        case 3: return .truncate(path(allowRoot: true), size: pick([0, 1, 100, 5000, 70000, 1 << 62, Int.max]))
        case 4: return .mkdir(target(), mode: pick([0o755, 0o700, 0o777]))
        case 5: return .rmdir(path())
        case 6: return .unlink(path())
        case 7:
            let flags = chance(70) ? 0 : chance(50) ? clinux_RENAME_NOREPLACE : clinux_RENAME_EXCHANGE
            return .rename(path(), chance(50) ? target() : path(), flags: flags)
        case 8: return .link(path(), target())
        case 9:
            let target = pick(["a", "../b", "/etc/passwd", "Info.plist", "../../Demo.app/Info.plist", String(repeating: "t", count: 300)])
            return .symlink(target: Array(target.utf8), self.target())
        case 10: return .chmod(path(allowRoot: true), mode: pick([0o755, 0o700, 0o644, 0o600, 0o444, 0o777, 0o000, 0o2755]))
        case 11:
            let name = pick(["user.a", "user.b", "user.containerfs.exclude-from-backup"])
            let value = (0..<Int.random(in: 0...40, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
            return .setxattr(path(allowRoot: true), name: name, value: value, flags: pick([0, 0, Int32(XATTR_CREATE), Int32(XATTR_REPLACE)]))
        case 12: return .removexattr(path(allowRoot: true), name: pick(["user.a", "user.b"]))
        case 13:
            let flags = pick([O_RDONLY, O_WRONLY, O_RDWR, O_RDONLY | O_TRUNC, O_WRONLY | O_TRUNC, O_WRONLY | O_APPEND,
                              O_RDONLY | O_APPEND, O_RDWR | O_CREAT, O_WRONLY | O_CREAT | O_EXCL, O_RDONLY | O_DIRECTORY,
                              O_RDONLY | O_CREAT])
            return .open(path(allowRoot: true), flags: flags)
        case 14: return .read(path(allowRoot: true))
        case 15: return .stat(path(allowRoot: true))
        case 16: return .list(path(allowRoot: true))
        case 17:
            let seconds = chance(75) ? Int.random(in: 1_000_000_000...1_700_000_000, using: &random) : pick([-1, -(1 << 31), 1 << 33, 1 << 34])
            return .utimens(path(allowRoot: true), seconds: seconds)
        case 18: return .fallocate(path(), offset: pick([0, 100, 4096, 70000, Int.max - 10]), length: pick([1, 4096, 10000, Int.max]))
        default: return .copyRange(from: path(), to: path(), length: pick([1, 100, 5000, 200_000, Int.max]))
        }
    }
}

// MARK: - Trees

/// One node of a tree, with everything the comparison looks at.
private struct FuzzTreeNode: Equatable, CustomStringConvertible {
    let path: FuzzBytes
    let summary: FuzzNodeSummary
    let contents: FuzzBytes?
    let target: FuzzBytes?
    let attributes: [String: FuzzBytes]

    var description: String {
        var text = "\(ContainerPath.printable(path).isEmpty ? "/" : ContainerPath.printable(path)): \(summary)"
        if let contents { text += " contents hash \(String(fuzzHash(contents), radix: 16))" }
        if let target { text += " -> \(ContainerPath.printable(target))" }
        if !attributes.isEmpty {
            text += " xattrs " + attributes.keys.sorted().map { "\($0)=\(String(fuzzHash(attributes[$0]!), radix: 16))" }.joined(separator: ",")
        }
        return text
    }
}

/// Every node under `root` (the root included), sorted by path bytes, leaving out (with
/// what is below) each path `skip` names.
private func fuzzSnapshot(_ root: FuzzBytes, skip: (ContainerPath) -> Bool) -> [FuzzTreeNode] {
    var nodes: [FuzzTreeNode] = []
    func visit(_ relative: FuzzPath) {
        let full = fuzzJoined(root, relative)
        var info = stat()
        guard fuzzWithCPath(full, { lstat($0, &info) }) == 0 else {
            nodes.append(FuzzTreeNode(path: ContainerPath(components: relative).bytes, summary: FuzzNodeSummary(stat()),
                                  contents: Array("lstat failed: \(fuzzErrnoName(errno))".utf8), target: nil, attributes: [:]))
            return
        }
        let summary = FuzzNodeSummary(info)
        var contents: FuzzBytes?
        var target: FuzzBytes?
        var children: [FuzzBytes] = []
        switch info.st_mode & S_IFMT {
        case S_IFREG:
            if case .contents(let bytes) = fuzzPerform(.read(relative), in: root) { contents = bytes } else { contents = Array("unreadable".utf8) }
        case S_IFLNK:
            var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
            let count = fuzzWithCPath(full) { readlink($0, &buffer, buffer.count) }
            target = count < 0 ? [] : buffer[0..<count].map { UInt8(bitPattern: $0) }
        case S_IFDIR:
            let fd = fuzzWithCPath(full) { Glibc.open($0, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
            children = fd >= 0 ? fuzzDirectoryNames(fd) : []
        default:
            break
        }
        let isLink = info.st_mode & S_IFMT == S_IFLNK
        nodes.append(FuzzTreeNode(path: ContainerPath(components: relative).bytes, summary: summary, contents: contents,
                              target: target, attributes: isLink ? [:] : fuzzUserAttributes(full)))
        for child in children where !skip(ContainerPath(components: relative + [child])) {
            visit(relative + [child])
        }
    }
    visit([])
    return nodes.sorted { $0.path.lexicographicallyPrecedes($1.path) }
}

/// The `user.` extended attributes of the file or folder at `path`.
private func fuzzUserAttributes(_ path: FuzzBytes) -> [String: FuzzBytes] {
    fuzzWithCPath(path) { file in
        let size = llistxattr(file, nil, 0)
        guard size > 0 else { return [:] }
        var list = [CChar](repeating: 0, count: size)
        let count = llistxattr(file, &list, size)
        guard count > 0 else { return [:] }
        var result: [String: FuzzBytes] = [:]
        for raw in list[0..<count].split(separator: 0) {
            let name = String(decoding: raw.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            guard name.hasPrefix("user.") else { continue }
            var value = FuzzBytes(repeating: 0, count: 65536)
            let length = value.withUnsafeMutableBytes { lgetxattr(file, name, $0.baseAddress, $0.count) }
            result[name] = length < 0 ? Array("getxattr failed: \(fuzzErrnoName(errno))".utf8) : Array(value[0..<length])
        }
        return result
    }
}

/// The first node where two trees differ, described, or nil when they are the same.
private func fuzzFirstDifference(_ actual: [FuzzTreeNode], _ expected: [FuzzTreeNode]) -> String? {
    let actualByPath = Dictionary(actual.map { ($0.path, $0) }, uniquingKeysWith: { first, _ in first })
    let expectedByPath = Dictionary(expected.map { ($0.path, $0) }, uniquingKeysWith: { first, _ in first })
    var differences: [String] = []
    for node in expected where actualByPath[node.path] != node {
        differences.append("expected \(node)\n   found \(actualByPath[node.path].map(\.description) ?? "nothing")")
    }
    for node in actual where expectedByPath[node.path] == nil {
        differences.append("unexpected \(node)")
    }
    return differences.isEmpty ? nil : differences.prefix(10).joined(separator: "\n")
}
