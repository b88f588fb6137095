import ContainerStore
import Foundation
import Glibc
import Testing

/// FUSE over io_uring: while the kernel's switch is on, requests come through one ring per
/// CPU instead of /dev/fuse, and everything behaves the same. (scripts/run-tests.sh also
/// runs the mount suites a second time with the switch on.)
@Suite("Uring", .serialized)
struct UringTests {
    static let kernelSwitch = "/sys/module/fuse/parameters/enable_uring"

    /// Sets the kernel's switch for `body`, then puts back what it was.
    private func withKernelSwitch(_ on: Bool, _ body: () throws -> Void) throws {
        guard let before = try? String(contentsOfFile: Self.kernelSwitch, encoding: .utf8) else {
            throw TestFailure("\(Self.kernelSwitch) is missing: this kernel has no FUSE over io_uring (Linux 6.14+)")
        }
        try (on ? "Y" : "N").write(toFile: Self.kernelSwitch, atomically: false, encoding: .utf8)
        defer { try? before.write(toFile: Self.kernelSwitch, atomically: false, encoding: .utf8) }
        try body()
    }

    private func kernelSwitchIsOn() -> Bool {
        (try? String(contentsOfFile: Self.kernelSwitch, encoding: .utf8))?.hasPrefix("Y") == true
    }

    /// The daemon's count of requests served through io_uring (printed with `-o debug`).
    private func servedThroughRings(_ log: String) -> Int? {
        guard let line = log.split(separator: "\n").first(where: { $0.hasSuffix("requests served through io_uring") }) else { return nil }
        return line.split(separator: " ").dropFirst().first.flatMap { Int($0) }
    }

    /// Real programs in every kind of area, and the denials the policy owes them.
    private func workload(_ container: MountedContainer) throws {
        let documents = container.mounted("Documents")
        try ProgramTests.shell(
            """
            cp -r /usr/share/doc/tar copied && mv copied "$1/Caches/" && tar -cf ../tmp/t.tar -C "$1/Caches" copied \
            && mkdir unpacked && tar -xf ../tmp/t.tar -C unpacked && diff -r unpacked/copied "$1/Caches/copied" \
            && sqlite3 notes.db 'create table t(x); insert into t values (1), (2); select sum(x) from t' | grep -qx 3 \
            && git init -q repo && git -C repo -c user.email=a@b -c user.name=a commit -q --allow-empty -m one \
            && rm -rf unpacked "$1/Caches/copied"
            """, [container.mounted("Library")], in: documents)
        #expect(try Data(contentsOf: URL(fileURLWithPath: container.stored("tmp/t.tar"))).count > 10_000)
        #expect(FileManager.default.fileExists(atPath: container.stored("Documents/repo/.git/HEAD")))
        #expect(!FileManager.default.fileExists(atPath: container.stored("Documents/unpacked")))
        #expect(errnoOf { open(container.mounted(container.bundleName + "/Info.plist"), O_WRONLY) } == EPERM)
        #expect(errnoOf { mkdir(container.mounted("Documents/Inbox/new"), 0o755) } == EACCES)
        #expect(errnoOf { mkdir(container.mounted("Stray"), 0o755) } == EPERM)
    }

    @Test func withTheKernelSwitchOnRequestsComeThroughTheRings() throws {
        try withKernelSwitch(true) {
            var answered: UInt64?
            let log = try foregroundDaemonLog("debug") { container in
                try workload(container)
                answered = try ControlChannel.requestsServedThroughRings(Store.open(container.store))
            }
            let served = try #require(servedThroughRings(log), "no io_uring line in the daemon's log")
            // Each LOOKUP, CREATE, GETATTR… of cp, tar, sqlite3 and git: hundreds at least.
            #expect(served > 200, "\(served) requests through io_uring")
            #expect((answered ?? 0) > 200, "the control socket's count (used by the io_uring pass of scripts/run-tests.sh): \(String(describing: answered))")
        }
    }

    @Test func nouringKeepsRequestsOnDevFuse() throws {
        try withKernelSwitch(true) {
            let log = try foregroundDaemonLog("debug,nouring") { container in
                try workload(container)
                #expect(try ControlChannel.requestsServedThroughRings(Store.open(container.store)) == 0, "the control socket's count")
            }
            #expect(servedThroughRings(log) == nil, "\(log.suffix(300))")
            #expect(log.contains("opcode: LOOKUP"))
        }
    }

    @Test func theUringOptionTurnsTheKernelSwitchOn() throws {
        try withKernelSwitch(false) {
            let log = try foregroundDaemonLog("debug,uring") { container in
                #expect(kernelSwitchIsOn())
                try ProgramTests.shell("echo hello > note && cat note", in: container.mounted("Documents"))
            }
            #expect((servedThroughRings(log) ?? 0) > 0, "\(log.suffix(300))")
        }
    }

    /// Only root can lift a thread out of SCHED_IDLE, so an ordinary user's daemon stays on
    /// /dev/fuse, and `-o uring` tells that user so in one line.
    @Test func anOrdinaryUsersDaemonIsRefusedTheUringOption() throws {
        let container = try MountedContainer(user: "cfs-alice")
        let result = try containerfs(["mount", container.store, container.mountpoint, "-o", "uring"], user: "cfs-alice")
        #expect(result.status != 0, "\(result)")
        #expect(result.stderr == "containerfs: FUSE over io_uring is for a daemon running as root: mount as root, or without -o uring\n")
        #expect(!isMountPoint(container.mountpoint))
    }

    /// The ring threads run under SCHED_IDLE, pinned to their CPU: a busy loop on the
    /// caller's CPU must not starve them (a starved queue waits seconds per request).
    @Test func aBusyLoopOnTheCallersCPUDoesNotStallRequests() throws {
        try withKernelSwitch(true) {
            let log = try foregroundDaemonLog("debug,uring") { container in
                let busy = try BackgroundProgram(["/usr/bin/taskset", "-c", "0", "sh", "-c", "while :; do :; done"])
                defer {
                    kill(busy.pid, SIGKILL)
                    _ = busy.wait(seconds: 5)
                }
                let script = "import os\nfor i in range(500): open(f'f{i}', 'w').close()\nprint(len(os.listdir('.')))"
                let started = Date()
                let result = try runProgram(["taskset", "-c", "0", "python3", "-c", script], directory: container.mounted("tmp"))
                let seconds = Date().timeIntervalSince(started)
                #expect(result.stdout == "500\n", "\(result)")
                #expect(seconds < 20, "500 creates took \(seconds) s")
            }
            // The creates came through the rings, not a silent fall-back to /dev/fuse.
            let served = try #require(servedThroughRings(log), "no io_uring line in the daemon's log")
            #expect(served > 500, "\(served) requests through io_uring for 500 creates")
        }
    }
}
