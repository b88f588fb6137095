import Foundation
import Glibc
import Testing

/// Locks of the state and device folders held by a stopped or hung process (docs/capacity.md,
/// "Waiting for a lock"): a command waits a bounded time (`CONTAINERFS_LOCK_WAIT`, 1 s
/// here), then gives up with one line naming the holder and exit status 75; the daemon
/// answers a request that needs the device's ledger with `ENOSPC` instead of waiting.
@Suite("Lock waits", .serialized)
struct LockWaitTests {
    static let bound = 1.0
    /// Well above the bound, for a loaded machine; a command that waits forever fails it.
    static let slack = 20.0

    /// `containerfs ARGUMENTS` with the bound, and how long it took.
    static func bounded(_ arguments: [String]) throws -> (result: ProgramResult, seconds: Double) {
        let started = Date()
        let environment = ProcessInfo.processInfo.environment.merging(["CONTAINERFS_LOCK_WAIT": "\(bound)"]) { $1 }
        let result = try runProgram(["timeout", "-s", "KILL", "\(Int(slack))", containerfsBinary] + arguments, environment: environment)
        return (result, Date().timeIntervalSince(started))
    }

    /// Checks the one line of a command that gave up on a lock `holder` holds.
    static func expectGaveUp(_ outcome: (result: ProgramResult, seconds: Double), holder: String, lock: String, stoppedPID: pid_t? = nil,
                             sourceLocation: SourceLocation = #_sourceLocation) {
        let (result, seconds) = outcome
        #expect(result.status == 75, "\(result)", sourceLocation: sourceLocation)
        #expect(seconds >= bound && seconds < slack, "gave up after \(seconds) s", sourceLocation: sourceLocation)
        let lines = result.stderr.split(separator: "\n")
        #expect(lines.count == 1, "one line: \(result.stderr)", sourceLocation: sourceLocation)
        let line = String(lines.first ?? "")
        #expect(line.hasPrefix("containerfs: \(holder) holds ") && line.contains(lock) && line.contains("try again once it ends"),
                "\(line)", sourceLocation: sourceLocation)
        if let stoppedPID {
            #expect(line.contains("it is stopped: 'kill -CONT \(stoppedPID)' continues it"), "\(line)", sourceLocation: sourceLocation)
        }
    }

    /// Starts `containerfs ARGUMENTS` stopped at the test hook `step` (CONTAINERFS_TEST_STOP_AT),
    /// holding the locks it holds there; returns it once it is stopped.
    static func stoppedAt(_ step: String, _ arguments: [String]) throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: containerfsBinary)
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(["CONTAINERFS_TEST_STOP_AT": step]) { $1 }
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline, !((try? String(contentsOfFile: "/proc/\(process.processIdentifier)/stat", encoding: .utf8))?.contains(") T ") ?? false) {
            usleep(20_000)
        }
        return process
    }

    /// Holds an exclusive `flock` on `path` (made if missing) from a python3 process until
    /// it is killed; returns once the lock is held.
    static func pythonHolding(_ path: String, marker: String) throws -> BackgroundProgram {
        let script = """
            import fcntl, os, sys, time
            fd = os.open(sys.argv[1], os.O_RDONLY) if os.path.isdir(sys.argv[1]) else os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)
            open(sys.argv[2], "w").close()
            time.sleep(120)
            """
        let holder = try BackgroundProgram(["/usr/bin/python3", "-c", script, path, marker])
        guard waitForFile(marker) else { throw TestFailure("python3 did not take the lock on \(path)") }
        return holder
    }

    /// A `containerfs update` stopped after its commit holds the store's update lock:
    /// `purge`, `suspend` and `deliver`, which first let an update finish, give up after the
    /// bound naming it (pid, stopped); continued, the update ends well. A `deliver` stopped
    /// between its check and its rename holds the Inbox's lock: another `deliver` gives up.
    @Test func commandsGiveUpOnAStoppedContainerfsCommand() throws {
        let container = try MountedContainer()
        let bundle = container.base + "/v2/Demo.app"
        try FileManager.default.createDirectory(atPath: bundle, withIntermediateDirectories: true)
        try Data("<plist>v2</plist>\n".utf8).write(to: URL(fileURLWithPath: bundle + "/Info.plist"))
        let file = container.base + "/report.txt"
        try Data("report\n".utf8).write(to: URL(fileURLWithPath: file))

        let update = try Self.stoppedAt("committed", ["update", container.store, "--bundle", bundle])
        defer {
            kill(update.processIdentifier, SIGCONT)
            update.waitUntilExit()
        }
        let pid = update.processIdentifier
        for arguments in [["purge", container.store, "--caches"], ["suspend", container.store], ["deliver", container.store, file]] {
            Self.expectGaveUp(try Self.bounded(arguments), holder: "another containerfs command (pid \(pid))",
                              lock: container.stored(".containerfs/update.lock"), stoppedPID: pid)
        }
        kill(pid, SIGCONT)
        update.waitUntilExit()
        #expect(update.terminationStatus == 0, "the update, continued, ends well")
        #expect(try FileManager.default.contentsOfDirectory(atPath: container.stored("Documents/Inbox")).isEmpty)

        let delivery = try Self.stoppedAt("delivery-checked", ["deliver", container.store, file])
        defer {
            kill(delivery.processIdentifier, SIGCONT)
            delivery.waitUntilExit()
        }
        Self.expectGaveUp(try Self.bounded(["deliver", container.store, file]), holder: "another containerfs command (pid \(delivery.processIdentifier))",
                          lock: container.stored(".containerfs/incoming"), stoppedPID: delivery.processIdentifier)
        kill(delivery.processIdentifier, SIGCONT)
        delivery.waitUntilExit()
        #expect(try FileManager.default.contentsOfDirectory(atPath: container.stored("Documents/Inbox")) == ["report.txt"], "one delivery, the first")
    }

    /// python3 holding the device's decide.lock: `mount` of one of its containers gives up
    /// after the bound, naming it, exit 75. Holding its ledger: `purge DEVICE` gives up after the bound naming
    /// it, nothing purged; a mounted container of the device answers a write that needs
    /// the ledger with ENOSPC within the daemon's own bound (1 s) instead of waiting, and
    /// writes again once the ledger is free.
    @Test func deviceLocksHeldByAnotherProcessBlockNeitherCommandsNorTheDaemon() throws {
        let device = try GroupDevice()
        try Data(count: 4096).write(to: URL(fileURLWithPath: device.other + "/Library/Caches/c.bin"))
        #expect(try containerfs(["capacity", device.device, "8M"]).status == 0)
        let mountpoint = device.base + "/mnt"
        try FileManager.default.createDirectory(atPath: mountpoint, withIntermediateDirectories: true)
        // The device's decide.lock held: the daemon gives up attaching, and mount says so.
        let decide = device.device + "/.containerfs-device/decide.lock"
        let deciding = try Self.pythonHolding(decide, marker: device.base + "/deciding")
        Self.expectGaveUp(try Self.bounded(["mount", device.other, mountpoint]), holder: "process \(deciding.pid) (python3)", lock: decide)
        kill(deciding.pid, SIGKILL)
        _ = deciding.wait()
        // The device folder itself held (where create makes its working folder): refused.
        let folder = try Self.pythonHolding(device.device, marker: device.base + "/folder")
        let created = try Self.bounded(["create", device.device + "/New", "--bundle", device.base + "/Demo.app"])
        #expect(created.result.status == 1 && created.result.stderr.contains("another process keeps a lock on its folder"), "\(created)")
        #expect(created.seconds < Self.slack && access(device.device + "/New", F_OK) != 0)
        kill(folder.pid, SIGKILL)
        _ = folder.wait()
        #expect(MountEntryProbe.isMounted(mountpoint) == false)
        let mounted = try containerfs(["mount", device.other, mountpoint])
        try #require(mounted.status == 0, "\(mounted)")
        defer {
            if (try? containerfs(["unmount", mountpoint]))?.status != 0 { _ = try? runProgram(["fusermount3", "-uz", mountpoint]) }
            withExtendedLifetime(device) {}  // its folder is removed only after the unmount
        }
        let ledger = device.device + "/.containerfs-device/ledger"
        #expect(access(ledger, F_OK) == 0, "the mount made the ledger")
        let holder = try Self.pythonHolding(ledger, marker: device.base + "/held")
        defer {
            kill(holder.pid, SIGKILL)
            _ = holder.wait()
        }

        Self.expectGaveUp(try Self.bounded(["purge", device.device, "--caches"]), holder: "process \(holder.pid) (python3)", lock: ledger)
        #expect(access(device.other + "/Library/Caches/c.bin", F_OK) == 0, "nothing purged")

        let started = Date()
        let write = try runProgram(["timeout", "-s", "KILL", "\(Int(Self.slack))", "dd", "if=/dev/zero", "of=\(mountpoint)/Documents/big", "bs=64k", "count=4"])
        let seconds = Date().timeIntervalSince(started)
        #expect(write.status == 1 && write.stderr.contains("No space left on device"), "\(write)")
        #expect(seconds < Self.slack, "the daemon answered after \(seconds) s")

        kill(holder.pid, SIGKILL)
        _ = holder.wait()
        let again = try runProgram(["dd", "if=/dev/zero", "of=\(mountpoint)/Documents/big", "bs=64k", "count=4"])
        #expect(again.status == 0, "the ledger free, writes go on: \(again)")
    }
}

/// Whether `path` is a mount point now, from /proc/self/mountinfo.
enum MountEntryProbe {
    static func isMounted(_ path: String) -> Bool {
        let table = (try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8)) ?? ""
        return table.split(separator: "\n").contains { $0.split(separator: " ").dropFirst(4).first.map(String.init) == path }
    }
}
