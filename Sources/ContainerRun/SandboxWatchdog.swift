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
            switch findProgram(of: initPID, initFD: initFD) {
            case nil:
                return
            case .reaped:
                // The init collected it before it was stopped: its status went with it.
                break
            case .running(let program, let programFD):
                defer { close(programFD) }
                // Until the program ends, or the run ends without us.
                while !stopped.load(ordering: .relaxed), !ended(programFD, within: 0.2) {}
                // Not reaped yet (the init is what reaps it): /proc still has its status.
                let status = Self.exitStatus(of: program)
                programStatus.withLock { $0 = status }
            }
            let deadline = Date().addingTimeInterval(Self.grace)
            while !stopped.load(ordering: .relaxed), Date() < deadline { usleep(50_000) }
            guard !stopped.load(ordering: .relaxed) else { return }
            if clinux_pidfd_send_signal(initFD, SIGKILL) == 0 { killed.store(true, ordering: .relaxed) }
        }
        thread.name = "sandbox watchdog"
        thread.start()
    }

    /// The program's exit status (128+N for a signal) when the watchdog had to end the
    /// sandbox, whose own status then says only that it was killed: .some(nil) when it was
    /// lost (the init collected it, then was stopped); nil when the watchdog ended nothing.
    var statusOfEndedProgram: Int32?? {
        guard killed.load(ordering: .relaxed) else { return nil }
        return .some(programStatus.withLock { $0 })
    }

    /// The run is over (bubblewrap was reaped): the watchdog must not signal anything now.
    func stop() {
        stopped.store(true, ordering: .relaxed)
        done.wait()
    }

    private enum Program {
        /// Running, or ended and not yet reaped: its pid and a pidfd of it.
        case running(pid_t, Int32)
        /// Ended and reaped by the init before the watchdog saw it.
        case reaped
    }

    /// The program: the init's child that is pid 2 in the sandbox (the init forks it first;
    /// an orphan the program left is the init's child too, and may be listed before it).
    /// nil when the run or the init ends first. No time limit: on a loaded machine the init
    /// can take seconds to fork, and a watchdog that gave up would leave a stopped init
    /// unwatched.
    private func findProgram(of initPID: pid_t, initFD: Int32) -> Program? {
        while !stopped.load(ordering: .relaxed), !ended(initFD, within: 0) {
            let children = ((try? String(contentsOfFile: "/proc/\(initPID)/task/\(initPID)/children", encoding: .utf8)) ?? "")
                .split(separator: " ").compactMap { pid_t($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
            if let program = children.first(where: { Self.sandboxPID(of: $0) == 2 }) {
                let fd = clinux_pidfd_open(program)
                if fd >= 0 { return .running(program, fd) }
            } else if !children.isEmpty || Self.isStopped(initPID) {
                // Children, none of them the program, or none at all and the init stopped:
                // the program ended and the init reaped it, then was stopped.
                return .reaped
            }
            usleep(20_000)
        }
        return nil
    }

    /// Whether `pid` is stopped, by a signal or a tracer (state T or t in /proc/PID/stat).
    static func isStopped(_ pid: pid_t) -> Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let end = stat.lastIndex(of: ")") else { return false }
        let state = stat[stat.index(after: end)...].drop(while: { $0 == " " }).first
        return state == "T" || state == "t"
    }

    /// The pid of `pid` in its innermost pid namespace (the last field of NSpid).
    static func sandboxPID(of pid: pid_t) -> pid_t? {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("NSpid:") }) else { return nil }
        return line.split(whereSeparator: { $0 == " " || $0 == "\t" }).last.flatMap { pid_t($0) }
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
