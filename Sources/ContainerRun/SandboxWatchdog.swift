import CLinux
import Foundation
import Glibc
import Synchronization

/// Ends the sandbox when the program has ended and the sandbox has not, within a grace
/// period. bubblewrap's init (the sandbox's pid 1) ends the sandbox when the program ends;
/// but the program runs as the init's user and may `ptrace` it and stop it, and then a
/// child it left would keep the run, and the mount, alive for ever (an adversarial
/// review's finding). Killing the init kills everything in the sandbox's pid namespace.
///
/// Processes are held by pidfds, so no signal can reach another process reusing a pid.
final class SandboxWatchdog: @unchecked Sendable {
    /// How long the sandbox may outlive the program: its init reaps it and exits at once.
    static let grace: Double = 5
    private let stopped = Atomic<Bool>(false)
    private let killed = Atomic<Bool>(false)
    /// The program's exit status as its unreaped process showed it, once it has ended.
    private let programStatus = Mutex<Int32?>(nil)
    private let done = DispatchSemaphore(value: 0)

    /// Watches the program, the first child of the sandbox's init `initPID`. Without it
    /// (already gone, or no pidfds on this kernel) there is nothing to watch.
    init?(initPID: pid_t) {
        let initFD = clinux_pidfd_open(initPID)
        guard initFD >= 0 else { return nil }
        let thread = Thread { [self] in
            defer {
                close(initFD)
                done.signal()
            }
            guard let (program, programFD) = openProgram(of: initPID, initFD: initFD) else { return }
            defer { close(programFD) }
            // Until the program ends, or the run ends without us.
            while !stopped.load(ordering: .relaxed), !ended(programFD, within: 0.2) {}
            // Not reaped yet (the init is what reaps it): /proc still has its status.
            let status = Self.exitStatus(of: program)
            programStatus.withLock { $0 = status }
            let deadline = Date().addingTimeInterval(Self.grace)
            while !stopped.load(ordering: .relaxed), Date() < deadline { usleep(50_000) }
            guard !stopped.load(ordering: .relaxed) else { return }
            if clinux_pidfd_send_signal(initFD, SIGKILL) == 0 { killed.store(true, ordering: .relaxed) }
        }
        thread.name = "sandbox watchdog"
        thread.start()
    }

    /// The program's exit status (128+N for a signal) when the watchdog had to end the
    /// sandbox, whose own status then says only that it was killed; nil otherwise.
    var statusOfEndedProgram: Int32?? {
        guard killed.load(ordering: .relaxed) else { return nil }
        return .some(programStatus.withLock { $0 })
    }

    /// The run is over (bubblewrap was reaped): the watchdog must not signal anything now.
    func stop() {
        stopped.store(true, ordering: .relaxed)
        done.wait()
    }

    /// The init's first child and a pidfd of it, once the init has started it; nil when
    /// the run or the init ends first. No time limit: on a loaded machine the init can take
    /// seconds to fork, and a watchdog that gave up would leave a stopped init unwatched.
    private func openProgram(of initPID: pid_t, initFD: Int32) -> (pid_t, Int32)? {
        while !stopped.load(ordering: .relaxed), !ended(initFD, within: 0) {
            let children = (try? String(contentsOfFile: "/proc/\(initPID)/task/\(initPID)/children", encoding: .utf8)) ?? ""
            if let first = children.split(separator: " ").first.flatMap({ pid_t($0) }) {
                let fd = clinux_pidfd_open(first)
                return fd >= 0 ? (first, fd) : nil
            }
            usleep(20_000)
        }
        return nil
    }

    /// The exit status of the ended, unreaped process `pid` (the last field of
    /// /proc/PID/stat, a wait status), as `waitpid` would give it: N, or 128+N for signal N.
    static func exitStatus(of pid: pid_t) -> Int32? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let end = stat.lastIndex(of: ")"),
              let raw = stat[stat.index(after: end)...].split(separator: " ").last.flatMap({ Int32($0.trimmingCharacters(in: .whitespacesAndNewlines)) })
        else { return nil }
        let signal = raw & 0x7f
        return signal == 0 ? (raw >> 8) & 0xff : 128 + signal
    }

    /// Whether the process of `fd` has ended (its pidfd polls readable), waiting `seconds`.
    private func ended(_ fd: Int32, within seconds: Double) -> Bool {
        var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        return poll(&entry, 1, Int32(seconds * 1000)) > 0
    }
}
