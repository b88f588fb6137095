import ContainerStore
import Foundation
import Glibc
import Testing

/// The `containerfs` binary the tests run: `$CONTAINERFS_BIN` (an installed one, say), else
/// a copy of the one SwiftPM built, in a temporary folder every user can reach. The test
/// users run it too, and a clone may sit where they cannot reach (root's home is 0700).
/// The copy is removed when the tests end.
let containerfsBinary: String = {
    if let path = ProcessInfo.processInfo.environment["CONTAINERFS_BIN"] { return path }
    let built = builtContainerfsBinary()
    // If the copy cannot be made, the built binary serves root's tests, and the tests of
    // other users say they cannot reach it.
    guard let folder = try? makeTemporaryDirectory() else { return built }
    let copy = folder + "/containerfs"
    guard chmod(folder, 0o755) == 0, (try? FileManager.default.copyItem(atPath: built, toPath: copy)) != nil else {
        try? FileManager.default.removeItem(atPath: folder)
        return built
    }
    atexit {
        // A daemon still running from the copy keeps running: it holds the file open.
        unlink(containerfsBinary)
        rmdir(URL(fileURLWithPath: containerfsBinary).deletingLastPathComponent().path)
    }
    return copy
}()

/// `containerfs` as SwiftPM built it: beside the test bundle (swift test runs
/// .build/debug/NAME.xctest; the executable sits in .build/debug).
private func builtContainerfsBinary() -> String {
    let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
    var directory = URL(fileURLWithPath: exe).deletingLastPathComponent()
    while !FileManager.default.fileExists(atPath: directory.appendingPathComponent("containerfs").path), directory.path != "/" {
        directory.deleteLastPathComponent()
    }
    return directory.appendingPathComponent("containerfs").path
}

/// What a finished program printed and how it exited.
struct ProgramResult: CustomStringConvertible {
    let status: Int32
    let stdout: String
    let stderr: String
    var description: String { "status \(status)\nstdout: \(stdout)\nstderr: \(stderr)" }
}

/// Runs a program to completion (optionally as another user, through `setpriv`).
@discardableResult
func runProgram(_ arguments: [String], user: String? = nil, directory: String? = nil,
                environment: [String: String]? = nil, input: Data? = nil) throws -> ProgramResult {
    let process = Process()
    var argv = arguments
    if let user {
        // setpriv switches uid, gid and groups without a login shell or PAM.
        argv = ["setpriv", "--reuid=\(user)", "--regid=\(user)", "--init-groups", "--"] + argv
    }
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = argv
    if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
    if let environment { process.environment = environment }
    let out = Pipe(), err = Pipe(), stdin = Pipe()
    process.standardOutput = out
    process.standardError = err
    process.standardInput = stdin
    try process.run()
    if let input { stdin.fileHandleForWriting.write(input) }
    try? stdin.fileHandleForWriting.close()
    // Read both pipes before waiting, so a chatty program cannot block on a full pipe.
    let group = DispatchGroup()
    nonisolated(unsafe) var errData = Data()
    group.enter()
    DispatchQueue.global().async {
        errData = err.fileHandleForReading.readDataToEndOfFile()
        group.leave()
    }
    let outData = out.fileHandleForReading.readDataToEndOfFile()
    group.wait()
    process.waitUntilExit()
    return ProgramResult(status: process.terminationStatus,
                         stdout: String(decoding: outData, as: UTF8.self),
                         stderr: String(decoding: errData, as: UTF8.self))
}

/// Runs `containerfs ARGUMENTS`.
@discardableResult
func containerfs(_ arguments: [String], user: String? = nil) throws -> ProgramResult {
    try runProgram([containerfsBinary] + arguments, user: user)
}

/// A fresh container store, its bundle source and a mount point in a temporary folder.
///
/// `withMountedContainer` mounts it and always unmounts and removes it afterwards.
final class MountedContainer: @unchecked Sendable {
    /// The temporary folder holding everything.
    let base: String
    /// The store, as `containerfs create` made it.
    let store: String
    /// Where it is mounted.
    let mountpoint: String
    /// The bundle's name.
    let bundleName = "Demo.app"
    /// The user the mount belongs to (nil: root, the test runner).
    let user: String?
    /// The `-o` options of the latest `mount`.
    private var mountOptions: [String] = []
    /// Whether `base` is a tmpfs of its own, unmounted at the end.
    private let onTmpfs: Bool

    /// Makes the store. The bundle holds `Info.plist`, `res/data.txt`, a symlink `link`.
    /// `tmpfs` (a size, as "2g"): everything sits on a tmpfs of its own, so that what is
    /// measured is the daemon, not the host's disk (see NodeTests).
    /// `infoPlist`: the bundle's `Info.plist` instead of a stub (file sharing reads it).
    init(user: String? = nil, tmpfs: String? = nil, infoPlist: [UInt8]? = nil) throws {
        base = try makeTemporaryDirectory()
        onTmpfs = tmpfs != nil
        if let tmpfs {
            let mounted = try runProgram(["mount", "-t", "tmpfs", "-o", "size=\(tmpfs),mode=0755", "tmpfs", base])
            guard mounted.status == 0 else { throw TestFailure("cannot mount a tmpfs on \(base): \(mounted)") }
        }
        store = base + "/store"
        mountpoint = base + "/mnt"
        self.user = user
        let bundle = base + "/" + bundleName
        try FileManager.default.createDirectory(atPath: bundle + "/res", withIntermediateDirectories: true)
        try Data(infoPlist ?? Array("<plist>demo</plist>\n".utf8)).write(to: URL(fileURLWithPath: bundle + "/Info.plist"))
        try Data("resource\n".utf8).write(to: URL(fileURLWithPath: bundle + "/res/data.txt"))
        try FileManager.default.createSymbolicLink(atPath: bundle + "/link", withDestinationPath: "Info.plist")
        try FileManager.default.createDirectory(atPath: mountpoint, withIntermediateDirectories: true)
        if let user {
            // The user needs to reach its folder; the parent temp dir is root's.
            try runProgram(["chown", "-R", "\(user):\(user)", base])
            chmod(base, 0o755)
        }
        let created = try containerfs(["create", store, "--bundle", bundle], user: user)
        guard created.status == 0 else { throw TestFailure("containerfs create failed: \(created)") }
    }

    /// Host path of `relative` through the mount.
    func mounted(_ relative: String) -> String { mountpoint + "/" + relative }
    /// Host path of `relative` in the store (behind the mount's back).
    func stored(_ relative: String) -> String { store + "/" + relative }

    /// Mounts the store; returns once `containerfs mount` says it is ready, and checks that
    /// the kernel agrees (the mount point is on another device than its parent).
    func mount(options: [String] = []) throws {
        let result = try containerfs(["mount", store, mountpoint] + options.flatMap { ["-o", $0] }, user: user)
        guard result.status == 0 else { throw TestFailure("containerfs mount failed: \(result)") }
        mountOptions = options
        guard isMountPoint(mountpoint) else { throw TestFailure("mount returned but \(mountpoint) is not a mount point") }
    }

    /// Unmounts, tolerating a busy mount for a while, then lazily; never throws.
    func unmount() {
        expectRequestsThroughRings()
        for _ in 0..<20 {
            guard isMountPoint(mountpoint) || isDeadMount(mountpoint) else { return }
            if (try? containerfs(["unmount", mountpoint], user: user))?.status == 0 { return }
            usleep(100_000)
        }
        _ = try? runProgram(["fusermount3", "-uz", mountpoint])
    }

    /// In the io_uring pass of `scripts/run-tests.sh` (`CONTAINERFS_TEST_URING=1`), a live
    /// root daemon mounted without `nouring` must have served requests through the rings: a
    /// silent fall-back to /dev/fuse fails the test instead of passing it on /dev/fuse.
    private func expectRequestsThroughRings() {
        guard ProcessInfo.processInfo.environment["CONTAINERFS_TEST_URING"] == "1", user == nil,
              !mountOptions.contains(where: { $0.contains("nouring") }), isMountPoint(mountpoint), !isDeadMount(mountpoint),
              let opened = try? Store.open(store), let served = try? ControlChannel.requestsServedThroughRings(opened)
        else { return }
        #expect(served > 0, "the io_uring pass: the daemon of \(mountpoint) served no request through io_uring")
    }

    /// The store's audit records, decoded from `containerfs audit --json`.
    func auditRecords() throws -> [[String: Any]] {
        let result = try containerfs(["audit", store, "--json"])
        guard result.status == 0 else { throw TestFailure("containerfs audit failed: \(result)") }
        return try result.stdout.split(separator: "\n").map {
            try JSONSerialization.jsonObject(with: Data($0.utf8)) as! [String: Any]
        }
    }

    /// Waits until the audit log has at least `count` records (it is written
    /// asynchronously); throws if it has fewer after `seconds`.
    func waitForAudit(count: Int, seconds: Double = 5) throws -> [[String: Any]] {
        let deadline = Date().addingTimeInterval(seconds)
        while true {
            let records = try auditRecords()
            if records.count >= count { return records }
            if Date() > deadline {
                throw TestFailure("the audit log has \(records.count) record(s) after \(seconds) s, not the \(count) expected: \(records)")
            }
            usleep(20_000)
        }
    }

    deinit {
        unmount()
        if onTmpfs { _ = try? runProgram(["umount", "-l", base]) }
        _ = try? runProgram(["rm", "-rf", base])
    }
}

/// Makes a store, mounts it, runs `body`, and always unmounts.
func withMountedContainer(user: String? = nil, options: [String] = [], _ body: (MountedContainer) throws -> Void) throws {
    let container = try MountedContainer(user: user)
    defer { container.unmount() }
    try container.mount(options: options)
    try body(container)
}

/// A new empty folder under /tmp (on the same disk as the tests' stores).
func makeTemporaryDirectory() throws -> String {
    var template = Array("/tmp/containerfs-test-XXXXXX".utf8CString)
    guard let path = mkdtemp(&template) else { throw TestFailure("mkdtemp: \(String(cString: strerror(errno)))") }
    return String(cString: path)
}

/// True when something is mounted at `path`, by the kernel's mount table: `stat` would
/// not do, as root may not enter a user's mount and a dead mount's attributes are cached.
/// Mounts a new container with `containerfs mount -f -o OPTIONS`, runs `body`, unmounts,
/// and returns what the daemon wrote to stderr.
func foregroundDaemonLog(_ options: String, _ body: (MountedContainer) throws -> Void) throws -> String {
    let container = try MountedContainer()
    let daemon = try BackgroundProgram([containerfsBinary, "mount", container.store, container.mountpoint, "-f", "-o", options])
    let deadline = Date().addingTimeInterval(10)
    while !isMountPoint(container.mountpoint), Date() < deadline { usleep(20_000) }
    guard isMountPoint(container.mountpoint) else {
        throw TestFailure("the daemon did not mount: \(daemon.wait(seconds: 1))")
    }
    do {
        try body(container)
    } catch {
        container.unmount()
        throw error
    }
    container.unmount()
    return daemon.wait(seconds: 10).stderr
}

/// `containerfs mount -f` of `container` in the background under `ulimit -n descriptors`,
/// with `-o options` and `environment` (NAME=VALUE words), returned once the mount is up.
func limitedDaemon(_ container: MountedContainer, descriptors: Int, options: String? = nil, environment: String = "") throws -> BackgroundProgram {
    let mountOptions = options.map { "-o \($0) " } ?? ""
    let daemon = try BackgroundProgram(["/bin/sh", "-c", "ulimit -n \(descriptors) && \(environment) exec \"$0\" mount -f \(mountOptions)\"$1\" \"$2\"",
                                        containerfsBinary, container.store, container.mountpoint])
    let deadline = Date().addingTimeInterval(10)
    while !isMountPoint(container.mountpoint), Date() < deadline { usleep(20_000) }
    try #require(isMountPoint(container.mountpoint), "\(daemon.wait(seconds: 1))")
    return daemon
}

func isMountPoint(_ path: String) -> Bool {
    mountTable().contains { $0.mountpoint == path }
}

/// True when `path` is a containerfs mount whose daemon died: `statvfs` always asks the
/// daemon, and a dead one answers "Transport endpoint is not connected".
func isDeadMount(_ path: String) -> Bool {
    guard isMountPoint(path) else { return false }
    var info = statvfs()
    return statvfs(path, &info) != 0 && errno == ENOTCONN
}

/// `/proc/self/mountinfo`, read to the end, as (mount point, type) pairs.
func mountTable() -> [(mountpoint: String, type: String)] {
    guard let handle = FileHandle(forReadingAtPath: "/proc/self/mountinfo") else { return [] }
    defer { try? handle.close() }
    let text = String(decoding: (try? handle.readToEnd()) ?? Data(), as: UTF8.self)
    return text.split(separator: "\n").compactMap { line in
        let halves = line.components(separatedBy: " - ")
        let left = halves[0].split(separator: " ")
        guard halves.count >= 2, left.count >= 5, let type = halves[1].split(separator: " ").first else { return nil }
        let mountpoint = String(left[4]).replacingOccurrences(of: "\\040", with: " ")
        return (mountpoint, String(type))
    }
}

/// A failure with a message, for setup steps that are not assertions.
struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// The errno of a C call that should fail, or 0 if it succeeded.
func errnoOf(_ call: () -> Int32) -> Int32 {
    errno = 0
    return call() < 0 ? errno : 0
}

/// The SHA-256 of every file under `path` (via sha256sum), to show a tree did not change.
/// Throws if any part fails: "unchanged" must not mean "unreadable both times".
func treeDigest(_ path: String) throws -> String {
    let result = try runProgram(["bash", "-o", "pipefail", "-c", "cd \"$1\" && find . -print0 | LC_ALL=C sort -z | xargs -0 stat -c '%n %s %a %F' && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum", "bash", path])
    guard result.status == 0, result.stderr.isEmpty else { throw TestFailure("cannot digest \(path): \(result)") }
    return result.stdout
}
