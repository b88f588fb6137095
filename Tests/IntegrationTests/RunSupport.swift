import ContainerStore
import Foundation
import Glibc
import Testing

/// `containerfs run STORE OPTIONS… -- PROGRAM…` on a container made by `MountedContainer`
/// (and not mounted by it: `run` mounts it itself).
@discardableResult
func containerfsRun(_ container: MountedContainer, _ options: [String], _ program: [String]) throws -> ProgramResult {
    try runProgram([containerfsBinary, "run", container.store] + options + ["--"] + program)
}

/// `containerfs run STORE -- PROGRAM…`.
@discardableResult
func containerfsRun(_ container: MountedContainer, _ program: [String]) throws -> ProgramResult {
    try containerfsRun(container, [], program)
}

/// A program started in the background, its output collected in files (so that it never
/// blocks on a full pipe and the test can read it after the end).
final class BackgroundProgram {
    let process = Process()
    private let outputPath: String
    private let errorPath: String

    init(_ arguments: [String], stdinPipe: Pipe? = nil) throws {
        let base = try makeTemporaryDirectory()
        outputPath = base + "/stdout"
        errorPath = base + "/stderr"
        guard FileManager.default.createFile(atPath: outputPath, contents: nil),
              FileManager.default.createFile(atPath: errorPath, contents: nil) else {
            throw TestFailure("cannot make the output files in \(base)")
        }
        process.executableURL = URL(fileURLWithPath: arguments[0])
        process.arguments = Array(arguments.dropFirst())
        process.standardOutput = FileHandle(forWritingAtPath: outputPath)
        process.standardError = FileHandle(forWritingAtPath: errorPath)
        process.standardInput = stdinPipe ?? FileHandle.nullDevice
        try process.run()
    }

    var pid: pid_t { process.processIdentifier }

    /// Waits for the end (at most `seconds`, then SIGKILL) and returns what it did.
    func wait(seconds: Double = 60) -> ProgramResult {
        let deadline = Date().addingTimeInterval(seconds)
        while process.isRunning, Date() < deadline { usleep(20_000) }
        if process.isRunning { kill(pid, SIGKILL) }
        process.waitUntilExit()
        let result = ProgramResult(status: process.terminationReason == .exit ? process.terminationStatus : 128 + process.terminationStatus,
                                   stdout: (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? "",
                                   stderr: (try? String(contentsOfFile: errorPath, encoding: .utf8)) ?? "")
        _ = try? runProgram(["rm", "-rf", (outputPath as NSString).deletingLastPathComponent])
        return result
    }
}

/// Waits until `path` exists (on the host), for at most `seconds`.
func waitForFile(_ path: String, seconds: Double = 30) -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while access(path, F_OK) != 0 {
        if Date() > deadline { return false }
        usleep(20_000)
    }
    return true
}

/// The mount points of containerfs mounts whose source is `store`.
func containerMounts(of store: String) -> [String] {
    // Read to the end through a handle: a /proc file has no size to go by.
    guard let handle = FileHandle(forReadingAtPath: "/proc/self/mounts") else { return [] }
    defer { try? handle.close() }
    let text = String(decoding: (try? handle.readToEnd()) ?? Data(), as: UTF8.self)
    return text.split(separator: "\n").compactMap { line in
        let fields = line.split(separator: " ").map(String.init)
        guard fields.count >= 3, fields[2] == "fuse.containerfs", fields[0] == store else { return nil }
        return fields[1]
    }
}

/// The names in the store's `tmp/` other than its `CACHEDIR.TAG`.
func temporaryEntries(_ container: MountedContainer) -> [String] {
    ((try? FileManager.default.contentsOfDirectory(atPath: container.stored("tmp"))) ?? []).filter { $0 != "CACHEDIR.TAG" }.sorted()
}

/// What `run` promises whatever happened to the program: tmp/ purged (its CACHEDIR.TAG
/// kept), nothing of the container mounted, the store's daemon gone.
func expectCleanedUp(_ container: MountedContainer, sourceLocation: SourceLocation = #_sourceLocation) throws {
    #expect(temporaryEntries(container) == [], "tmp/ must be purged", sourceLocation: sourceLocation)
    #expect(FileManager.default.fileExists(atPath: container.stored("tmp/CACHEDIR.TAG")), sourceLocation: sourceLocation)
    #expect(containerMounts(of: container.store) == [], "nothing may stay mounted", sourceLocation: sourceLocation)
    let store = try Store.open(container.store)
    #expect(MountLock.holder(store) == nil, "the daemon must have exited", sourceLocation: sourceLocation)
}

/// The line `run` prints on stderr when `count` operations were denied.
func denialSummary(_ count: Int, _ container: MountedContainer) -> String {
    "\(count) operation\(count == 1 ? "" : "s") denied: see containerfs audit \(container.store)"
}
