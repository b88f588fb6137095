import ContainerStore
import Foundation
import Glibc
import Synchronization

/// Catches the signals that would end `containerfs run` (SIGINT, SIGTERM, SIGHUP, SIGQUIT)
/// and passes each on to the program, so that `run` itself always lives to clean up.
///
/// The handler only writes the signal to a pipe (async-signal-safe); a thread reads it and
/// forwards it. A signal the kernel sent for the terminal (Ctrl-C, hangup) reached the
/// program too when it shares our terminal's process group, so it is not sent twice.
final class SignalRelay: @unchecked Sendable {
    /// Where forwarded signals go.
    enum Target {
        /// The program itself (`--no-confine`).
        case process(pid_t, sharesTerminal: Bool)
        /// The program inside bubblewrap, whose first process in the sandbox is `initPID`
        /// (bubblewrap's own init, pid 1 there). The program is its child, pid 2 there.
        case sandbox(initPID: pid_t, sharesTerminal: Bool)
    }

    private enum Phase {
        /// No program yet: remember the first signal, the program will not be started.
        case starting(first: Int32?)
        case running(Target)
        /// The program is gone: signals are ignored while `run` cleans up.
        case finishing
    }

    /// The signals relayed. SIGINT, SIGHUP or SIGQUIT ignored when `run` started stays
    /// ignored and is not caught, as a shell passes on `nohup` or a background job's SIGINT.
    let caught: [Int32]
    private let phase = Mutex(Phase.starting(first: nil))
    /// The first signal caught at any moment, for `--launches`: no launch starts after one.
    private let firstCaught = Mutex<Int32?>(nil)

    /// Installs the handlers and starts the forwarding thread.
    init() {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { fatalError("pipe: \(String(cString: strerror(errno)))") }
        for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        // The write end never blocks: a signal handler must not wait (a full pipe drops it).
        _ = fcntl(fds[1], F_SETFL, O_NONBLOCK)
        relayPipe = fds[1]
        // A closed stderr must not kill `run` before it cleans up; the program gets SIGPIPE back.
        signal(SIGPIPE, SIG_IGN)
        var caught: [Int32] = []
        var unblocked = sigset_t()
        sigemptyset(&unblocked)
        for signal in [SIGINT, SIGTERM, SIGHUP, SIGQUIT] {
            var current = sigaction()
            sigaction(signal, nil, &current)
            let ignored = unsafeBitCast(current.__sigaction_handler.sa_handler, to: Int.self) == 1  // SIG_IGN
            if ignored, signal != SIGTERM { continue }
            var action = sigaction()
            action.__sigaction_handler.sa_sigaction = relayHandler
            action.sa_flags = SA_SIGINFO | SA_RESTART
            sigemptyset(&action.sa_mask)
            sigaction(signal, &action, nil)
            sigaddset(&unblocked, signal)
            caught.append(signal)
        }
        // A parent may have started us with these blocked (Foundation's Process does, from
        // a Dispatch thread): they would stay pending and never reach the program. Threads
        // started from here on inherit this thread's mask.
        pthread_sigmask(SIG_UNBLOCK, &unblocked, nil)
        self.caught = caught
        let readEnd = fds[0]
        let thread = Thread { [self] in
            var message: (UInt8, UInt8) = (0, 0)
            while true {
                let count = withUnsafeMutableBytes(of: &message) { read(readEnd, $0.baseAddress, 2) }
                if count == 2 { relay(Int32(message.0), fromKernel: message.1 == 1) }
                if count < 0, errno != EINTR { return }
            }
        }
        thread.name = "signal-relay"
        thread.start()
    }

    /// The first signal that arrived before a program started, if any.
    var signalBeforeStart: Int32? {
        phase.withLock { if case .starting(let first) = $0 { first } else { nil } }
    }

    /// From now on signals go to `target`; one that arrived meanwhile is sent at once.
    func attach(_ target: Target) {
        let pending = phase.withLock { phase -> Int32? in
            defer { phase = .running(target) }
            if case .starting(let first) = phase { return first }
            return nil
        }
        if let pending { forward(pending, fromKernel: false, to: target) }
    }

    /// The program is gone: ignore signals from now on.
    func detach() {
        phase.withLock { $0 = .finishing }
    }

    /// Another launch of the program is about to start (`--launches`).
    func rearm() {
        phase.withLock { $0 = .starting(first: nil) }
    }

    /// The first signal caught since `run` started, whatever was running then.
    var caughtAny: Int32? { firstCaught.withLock { $0 } }

    private func relay(_ signal: Int32, fromKernel: Bool) {
        firstCaught.withLock { if $0 == nil { $0 = signal } }
        let target = phase.withLock { phase -> Target? in
            switch phase {
            case .starting(nil):
                phase = .starting(first: signal)
                return nil
            case .running(let target): return target
            case .starting, .finishing: return nil
            }
        }
        if let target { forward(signal, fromKernel: fromKernel, to: target) }
    }

    private func forward(_ signal: Int32, fromKernel: Bool, to target: Target) {
        switch target {
        case .process(let pid, let sharesTerminal):
            if fromKernel, sharesTerminal { return }
            kill(pid, signal)
        case .sandbox(let initPID, let sharesTerminal):
            if fromKernel, sharesTerminal { return }
            // bubblewrap's init ignores signals from outside its namespace: reach the
            // program itself. It may not be forked yet just after the start, which on a
            // loaded machine can take seconds.
            let deadline = monotonicSeconds() + 15
            while true {
                if let pid = Self.program(initPID: initPID) {
                    kill(pid, signal)
                    return
                }
                if monotonicSeconds() > deadline || kill(initPID, 0) != 0 { return }
                usleep(5_000)
            }
        }
    }

    /// The host pid of the child of `initPID` that is pid 2 in the sandbox's namespace.
    static func program(initPID: pid_t) -> pid_t? {
        guard let children = procFile("/proc/\(initPID)/task/\(initPID)/children") else { return nil }
        for child in children.split(separator: " ").compactMap({ pid_t($0) }) {
            guard let status = procFile("/proc/\(child)/status"),
                  let line = status.split(separator: "\n").first(where: { $0.hasPrefix("NSpid:") })
            else { continue }
            if line.split(whereSeparator: { $0 == "\t" || $0 == " " }).last == "2" { return child }
        }
        return nil
    }

    /// A /proc file read to the end (it has no size to go by), nil when it is gone.
    private static func procFile(_ path: String) -> String? {
        guard let handle = FileHandle(forReadingAtPath: path) else { return nil }
        defer { try? handle.close() }
        return (try? handle.readToEnd()).map { String(decoding: $0, as: UTF8.self) }
    }
}

/// The write end of the relay's pipe: a signal handler can reach only globals.
nonisolated(unsafe) private var relayPipe: Int32 = -1

/// Writes the signal and whether the kernel sent it (`SI_KERNEL`: the terminal) to the pipe.
private func relayHandler(_ signal: Int32, _ info: UnsafeMutablePointer<siginfo_t>?, _: UnsafeMutableRawPointer?) {
    let savedErrno = errno
    var message: (UInt8, UInt8) = (UInt8(truncatingIfNeeded: signal), info?.pointee.si_code == Int32(SI_KERNEL) ? 1 : 0)
    _ = withUnsafeBytes(of: &message) { write(relayPipe, $0.baseAddress, 2) }
    errno = savedErrno
}
