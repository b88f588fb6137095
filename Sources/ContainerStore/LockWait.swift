import Foundation
import Glibc
import Synchronization

/// Does nothing: its arrival is what makes a blocked `flock` return `EINTR`.
private let interruptHandler: @convention(c) (Int32) -> Void = { _ in }

/// Waiting for a `flock` of the state or device folder that another process holds, for a
/// bounded time: a stopped or hung holder (a command suspended with Ctrl-Z, a script
/// holding a lock file) must not make every later command, or the daemon, wait forever.
///
/// Commands wait up to `patience` (10 s, or `CONTAINERFS_LOCK_WAIT` seconds), then give up
/// with one line naming the holder, found in `/proc/locks`, and exit status 75 (EX_TEMPFAIL:
/// try again). The daemon never waits that long inside a request: it tries for at most
/// `requestPatience` and answers as if the space were not there (docs/capacity.md).
public enum LockWait {
    /// How long a command waits for a lock another process holds, in seconds.
    public static let patience: Double = {
        guard let text = ProcessInfo.processInfo.environment["CONTAINERFS_LOCK_WAIT"],
              let seconds = Double(text), seconds >= 0, seconds <= 3600 else { return 10 }
        return seconds
    }()

    /// How long the daemon waits within one request: short, since a legitimate holder
    /// keeps the lock for microseconds.
    public static let requestPatience: Double = 1

    /// The exit status of a command that gave up waiting (EX_TEMPFAIL).
    public static let exitCode: Int32 = 75

    /// Takes `operation` (`LOCK_EX` or `LOCK_SH`) on `fd`, waiting at most `patience`
    /// seconds; otherwise throws one line naming `what` ("the device's ledger DEVICE/…")
    /// and the process holding it.
    public static func take(_ fd: Int32, _ operation: Int32, _ what: String, patience: Double = LockWait.patience) throws(UserError) {
        if attempt(fd, operation, within: patience) { return }
        if errno != EWOULDBLOCK {
            throw UserError.failed("cannot lock \(what)", Errno.current)
        }
        throw UserError(heldMessage(what, waited: patience, holder: holder(of: fd)), exitCode: exitCode)
    }

    /// Tries to take `operation` on `fd` for at most `seconds`; whether it was taken. On
    /// false, `errno` is `EWOULDBLOCK` (still held) or the error `flock` met.
    ///
    /// The wait is a real blocking `flock` (in `/proc/locks` as a waiter, served in turn
    /// when the holder lets go, not polled), made by a helper thread that this thread
    /// interrupts with `SIGURG` at the deadline: a handler without `SA_RESTART` makes the
    /// blocked `flock` return `EINTR`. Uncontended, it is one `LOCK_NB` call.
    public static func attempt(_ fd: Int32, _ operation: Int32, within seconds: Double) -> Bool {
        while flock(fd, operation | LOCK_NB) != 0 {
            if errno == EINTR { continue }
            guard errno == EWOULDBLOCK, seconds > 0 else { return false }
            // A legitimate holder (another daemon changing the ledger) lets go within
            // microseconds: a few short tries first spare a thread for each such meeting.
            for _ in 0..<10 {
                usleep(100)
                if flock(fd, operation | LOCK_NB) == 0 { return true }
                guard errno == EWOULDBLOCK || errno == EINTR else { return false }
            }
            return interruptInstalled ? waitBlocking(fd, operation, seconds) : waitPolling(fd, operation, seconds)
        }
        return true
    }

    /// The state the waiting thread and its caller share.
    private final class Waiter: Sendable {
        struct State {
            var thread: pthread_t?
            var cancelled = false
            var finished = false
            var taken = false
            var error: Int32 = EWOULDBLOCK
        }
        let state = Mutex(State())
        let done = DispatchSemaphore(value: 0)
    }

    private static func waitBlocking(_ fd: Int32, _ operation: Int32, _ seconds: Double) -> Bool {
        let waiter = Waiter()
        let thread = Thread {
            // Whatever mask the thread that started it had, the interruption must arrive.
            var interrupt = sigset_t()
            sigemptyset(&interrupt)
            sigaddset(&interrupt, SIGURG)
            pthread_sigmask(SIG_UNBLOCK, &interrupt, nil)
            waiter.state.withLock { $0.thread = pthread_self() }
            var taken = false, error = EWOULDBLOCK
            while !waiter.state.withLock({ $0.cancelled }) {
                if flock(fd, operation) == 0 {
                    taken = true
                    break
                }
                if errno != EINTR {
                    error = errno
                    break
                }
            }
            waiter.state.withLock {
                $0.finished = true
                $0.taken = taken
                $0.error = error
            }
            waiter.done.signal()
        }
        thread.name = "lock wait"
        thread.start()
        if waiter.done.wait(timeout: .now() + seconds) == .timedOut {
            waiter.state.withLock { $0.cancelled = true }
            // Again until it has seen the cancellation: a signal landing just before its
            // `flock` began is lost on it. Sent under the lock, so never to a thread gone.
            // A thread that never started (none could be made) sees the cancellation if it
            // ever does, before any `flock`: not waited for past a second.
            var unstarted = 0
            repeat {
                let started = waiter.state.withLock { state -> Bool in
                    if !state.finished, let thread = state.thread { pthread_kill(thread, SIGURG) }
                    return state.thread != nil
                }
                if !started {
                    unstarted += 1
                    if unstarted > 100 {
                        errno = EWOULDBLOCK
                        return false
                    }
                }
            } while waiter.done.wait(timeout: .now() + .milliseconds(10)) == .timedOut
        }
        // Taken just as the deadline passed: held, and said so.
        let (taken, error) = waiter.state.withLock { ($0.taken, $0.error) }
        if !taken { errno = error }
        return taken
    }

    /// Without the interruption (another handler owns `SIGURG`): `LOCK_NB` tries, apart
    /// from 1 ms to 50 ms, until the deadline.
    private static func waitPolling(_ fd: Int32, _ operation: Int32, _ seconds: Double) -> Bool {
        let deadline = now() + seconds
        var pause: UInt32 = 1000
        while true {
            if flock(fd, operation | LOCK_NB) == 0 { return true }
            guard errno == EWOULDBLOCK || errno == EINTR else { return false }
            let left = deadline - now()
            if left <= 0 {
                errno = EWOULDBLOCK
                return false
            }
            usleep(min(pause, UInt32(left * 1_000_000) + 1))
            pause = min(pause * 2, 50_000)
        }
    }

    /// A handler for `SIGURG` (ignored by default, and by the kernel sent only to a
    /// socket's owner, which no process of ours sets) that does nothing, installed without
    /// `SA_RESTART`: what interrupts a waiting `flock`. Not installed over another's.
    private static let interruptInstalled: Bool = {
        var current = sigaction()
        guard sigaction(SIGURG, nil, &current) == 0 else { return false }
        let handler = unsafeBitCast(current.__sigaction_handler.sa_handler, to: Int.self)
        if handler == unsafeBitCast(interruptHandler, to: Int.self) { return true }
        guard handler == 0 || handler == 1 else { return false }  // SIG_DFL, SIG_IGN
        var action = sigaction()
        action.__sigaction_handler.sa_handler = interruptHandler
        action.sa_flags = 0
        sigemptyset(&action.sa_mask)
        return sigaction(SIGURG, &action, nil) == 0
    }()

    /// A process holding a lock: its pid, its name, and whether it is stopped.
    public struct Holder: Equatable, Sendable {
        /// Its pid, as `/proc/locks` gives it in this process's pid namespace.
        public var pid: pid_t
        /// Its name (`/proc/PID/comm`), controls left out; empty when it is gone.
        public var name: String
        /// Whether it is stopped (SIGSTOP, Ctrl-Z, a debugger).
        public var stopped: Bool
    }

    /// The process holding a `flock` on the file open at `fd`, as `/proc/locks` names it
    /// (nil when it names none this process can see, or only this process).
    public static func holder(of fd: Int32) -> Holder? {
        var info = stat()
        guard fstat(fd, &info) == 0, let table = try? String(contentsOfFile: "/proc/locks", encoding: .utf8) else { return nil }
        let device = UInt64(info.st_dev)
        let major = ((device >> 8) & 0xfff) | ((device >> 32) & ~UInt64(0xfff))
        let minor = (device & 0xff) | ((device >> 12) & ~UInt64(0xff))
        for line in table.split(separator: "\n") where !line.contains("->") {
            // `1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF`
            let fields = line.split(separator: " ")
            guard fields.count >= 6, fields[1] == "FLOCK", let pid = pid_t(fields[4]), pid > 0, pid != getpid() else { continue }
            let place = fields[5].split(separator: ":")
            guard place.count == 3, UInt64(place[0], radix: 16) == major, UInt64(place[1], radix: 16) == minor,
                  UInt64(place[2]) == UInt64(info.st_ino) else { continue }
            return Holder(pid: pid, name: processName(pid), stopped: isStopped(pid))
        }
        return nil
    }

    /// The one line of a command that gave up: who holds `what`, how long it waited, and
    /// what to do.
    public static func heldMessage(_ what: String, waited seconds: Double, holder: Holder?) -> String {
        let who: String
        switch holder {
        case .some(let holder) where holder.name == "containerfs": who = "another containerfs command (pid \(holder.pid))"
        case .some(let holder): who = "process \(holder.pid) (\(holder.name.isEmpty ? "gone" : holder.name))"
        case .none: who = "another process"
        }
        let shown = seconds == seconds.rounded() ? String(Int(seconds)) : String(seconds)
        var line = "\(who) holds \(what) and did not release it within \(shown) s; try again once it ends"
        if let holder, holder.stopped { line += " (it is stopped: 'kill -CONT \(holder.pid)' continues it)" }
        return line
    }

    private static func processName(_ pid: pid_t) -> String {
        let text = (try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8)) ?? ""
        // A name is the process's own choice: nothing in it may drive the terminal.
        return String(text.trimmingCharacters(in: .newlines).unicodeScalars.filter { $0.value >= 0x20 && $0.value != 0x7F }.map(Character.init))
    }

    private static func isStopped(_ pid: pid_t) -> Bool {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8), let close = text.lastIndex(of: ")") else { return false }
        let state = text[text.index(after: close)...].split(separator: " ").first
        return state == "T" || state == "t"
    }

    private static func now() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }
}
