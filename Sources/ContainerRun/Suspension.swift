import CLinux
import ContainerPolicy
import ContainerStore
import Foundation
import Glibc

/// A file lock a suspended program holds, as `Suspension` finds it.
public struct HeldLock: Hashable, Sendable {
    /// The locked file as the program names it: `/groups/ID/…` for a group's file.
    public let path: String
    /// The process holding it: host pid and command name.
    public let pid: pid_t
    public let command: String
    /// Whether the file is in a shared group container (else the app's own container, or elsewhere).
    public let inSharedGroup: Bool
}

/// iOS's rule for a program suspended while it holds a file lock (SPEC §15,
/// docs/groups.md): RunningBoard kills it with the termination code 0xdead10cc when any
/// of its processes holds a lock on a file in a shared (App Group) container; locks in
/// its own data container do not count. Pure: the locks in, the verdict out.
public enum SuspensionRule {
    /// The termination code, as iOS's crash reports show it.
    public static let terminationCode = "0xdead10cc"
    /// `run`'s exit status for a program killed so: 0xcc, the code's last byte; distinct
    /// from a program's own statuses that `run` passes on in practice and from 128+N for
    /// a signal (N ≤ 64).
    public static let exitStatus: Int32 = 204

    /// What happens to a program suspended holding `locks`.
    public enum Verdict: Equatable, Sendable {
        /// It stays suspended.
        case suspended
        /// It is killed for the first lock on a shared file.
        case killed(HeldLock)
    }

    /// The verdict for `locks`, the first shared one (in a stable order) named.
    public static func verdict(_ locks: [HeldLock]) -> Verdict {
        let shared = locks.filter(\.inSharedGroup).sorted { ($0.path, $0.pid) < ($1.path, $1.pid) }
        return shared.first.map(Verdict.killed) ?? .suspended
    }

    /// The one line `run` (and `suspend`) prints for a kill. The file's name and the
    /// process's (`prctl(PR_SET_NAME)`) are the program's choice: their control characters
    /// are escaped, or a confined program would write escape sequences to the terminal of
    /// whoever runs `suspend` (root's, for another user's store), and newlines into the line.
    public static func message(_ lock: HeldLock) -> String {
        let command = ContainerPath.printable(Array(lock.command.utf8), escapingControls: true)
        let path = ContainerPath.printable(Array(lock.path.utf8), escapingControls: true)
        return "\(terminationCode): killed at suspension: \(command) (pid \(lock.pid)) held a file lock on \(path) in a shared group container"
    }
}

/// Suspending and resuming a confined program: every process in its sandbox's pid
/// namespace stopped with SIGSTOP (or continued), and the locks they hold checked against
/// `SuspensionRule`.
public enum Suspension {
    /// The processes of the sandbox whose init (pid 1 inside) is the host pid `initPID`:
    /// those in its pid namespace. None when that is this process's own namespace (never
    /// the host's processes).
    static func processes(ofSandbox initPID: pid_t) -> [pid_t] {
        guard let namespace = pidNamespace(initPID), namespace != pidNamespace(getpid()) else { return [] }
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return entries.compactMap { pid_t($0) }.filter { pidNamespace($0) == namespace }.sorted()
    }

    private static func pidNamespace(_ pid: pid_t) -> String? {
        try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/ns/pid")
    }

    /// Stops every process of the sandbox, again until no new one appears (one may fork
    /// as it is stopped); returns how many were stopped.
    @discardableResult
    static func stop(sandbox initPID: pid_t) -> Int {
        var stopped: Set<pid_t> = []
        for _ in 0..<20 {
            let found = Set(processes(ofSandbox: initPID))
            let new = found.subtracting(stopped)
            if new.isEmpty { break }
            for pid in new { kill(pid, SIGSTOP) }
            stopped.formUnion(new)
        }
        // SIGSTOP takes effect when the process next runs: wait until each is stopped, so
        // that the locks read next are those it holds while suspended.
        let deadline = Date().addingTimeInterval(5)
        for pid in stopped {
            while Date() < deadline, let state = processState(pid), state != "T", state != "t", state != "Z", state != "X" {
                usleep(2_000)
            }
        }
        return stopped.count
    }

    /// Continues every process of the sandbox.
    static func resume(sandbox initPID: pid_t) {
        for pid in processes(ofSandbox: initPID) { kill(pid, SIGCONT) }
    }

    private static func processState(_ pid: pid_t) -> String? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = text.lastIndex(of: ")") else { return nil }
        return text[text.index(after: close)...].split(separator: " ").first.map(String.init)
    }

    /// The file locks the sandbox's processes hold (`lock:` lines of /proc/PID/fdinfo/N,
    /// which name the locks set through that open file: flock, POSIX and OFD), each named
    /// as the program sees it. `groups`: the member groups' host mount points, by identifier.
    static func heldLocks(sandbox initPID: pid_t, groups: [SharedGroupMount]) -> [HeldLock] {
        var groupDevices: [UInt64: SharedGroupMount] = [:]
        for group in groups {
            var info = stat()
            if stat(group.mountpoint, &info) == 0 { groupDevices[UInt64(info.st_dev)] = group }
        }
        var locks: [HeldLock] = []
        let sandbox = processes(ofSandbox: initPID)
        for pid in sandbox {
            let command = ((try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8)) ?? "?").trimmingCharacters(in: .newlines)
            let descriptors = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd")) ?? []
            for fd in descriptors {
                guard let info = try? String(contentsOfFile: "/proc/\(pid)/fdinfo/\(fd)", encoding: .utf8),
                      info.split(separator: "\n").contains(where: { $0.hasPrefix("lock:") }) else { continue }
                let target = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\(fd)")) ?? "?"
                var file = stat()
                let group = stat("/proc/\(pid)/fd/\(fd)", &file) == 0 ? groupDevices[UInt64(file.st_dev)] : nil
                var path = target
                if let group, target.hasPrefix(group.mountpoint) {
                    path = group.inside + target.dropFirst(group.mountpoint.count)
                } else if target.hasPrefix("/tmp/containerfs-run-"), let range = target.range(of: "/container") {
                    path = Sandbox.home + target[range.upperBound...]
                }
                locks.append(HeldLock(path: path, pid: pid, command: command, inSharedGroup: group != nil))
            }
        }
        return locks + unseenGroupLocks(of: sandbox, groupDevices: groupDevices, seen: locks)
    }

    /// The locks in a group that a process of the sandbox took and that no descriptor of
    /// it shows: a flock or POSIX lock lasts as long as its open file, which a descriptor
    /// in flight over a socket (`SCM_RIGHTS`, never received) or a mapping keeps open with
    /// no descriptor left. /proc/locks names the process that took such a lock (an OFD
    /// lock names none: `-1`, left out) and the file by device and inode.
    private static func unseenGroupLocks(of sandbox: [pid_t], groupDevices: [UInt64: SharedGroupMount], seen: [HeldLock]) -> [HeldLock] {
        guard !groupDevices.isEmpty, let table = try? String(contentsOfFile: "/proc/locks", encoding: .utf8) else { return [] }
        let members = Set(sandbox)
        let already = Set(seen.filter(\.inSharedGroup).map(\.pid))
        var found: [HeldLock] = []
        // "1: FLOCK  ADVISORY  WRITE 8457 00:3a:1234 0 EOF"; a waiter's line has "->" after
        // the number: it holds nothing.
        for line in table.split(separator: "\n") {
            let fields = line.split(separator: " ")
            guard fields.count >= 6, fields[1] != "->", let pid = pid_t(fields[4]), members.contains(pid), !already.contains(pid) else { continue }
            let node = fields[5].split(separator: ":")
            guard node.count == 3, let major = UInt32(node[0], radix: 16), let minor = UInt32(node[1], radix: 16),
                  let group = groupDevices[deviceNumber(major: major, minor: minor)] else { continue }
            let command = ((try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8)) ?? "?").trimmingCharacters(in: .newlines)
            found.append(HeldLock(path: "\(group.inside) (inode \(node[2]), no descriptor open)", pid: pid, command: command, inSharedGroup: true))
        }
        return found
    }

    /// glibc's `makedev` (a macro Swift cannot call): a device number from its two parts.
    private static func deviceNumber(major: UInt32, minor: UInt32) -> UInt64 {
        let (major, minor) = (UInt64(major), UInt64(minor))
        return (major & 0xfff) << 8 | (major & 0xffff_f000) << 32 | (minor & 0xff) | (minor & 0xffff_ff00) << 12
    }

    /// Suspends the sandbox: stops it, then applies `SuspensionRule`; a program killed is
    /// killed whole (its init, and with it its pid namespace).
    /// `recording` runs before the kill, so that the run, which wakes at the kill, finds the
    /// termination recorded.
    public static func suspend(sandbox initPID: pid_t, groups: [SharedGroupMount], recording: (HeldLock) -> Void = { _ in }) -> SuspensionRule.Verdict {
        stop(sandbox: initPID)
        let verdict = SuspensionRule.verdict(heldLocks(sandbox: initPID, groups: groups))
        if case .killed(let lock) = verdict {
            recording(lock)
            kill(initPID, SIGKILL)
            resume(sandbox: initPID)
        }
        return verdict
    }
}

/// A member group as a run shows it: its identifier, its host mount point and where the
/// program sees it (`/groups/ID`, or under `--layout ios` the group's iOS path).
public typealias SharedGroupMount = (identifier: String, mountpoint: String, inside: String)

/// What a running `containerfs run` records for `containerfs suspend` and `resume`, in its
/// store's state folder (`.containerfs/sandbox`), and what a suspension reports back
/// (`.containerfs/terminated`): `run` removes both when it ends.
public enum SandboxRecord {
    static let fileName = Array(name: "sandbox")
    static let terminatedName = Array(name: "terminated")

    /// Records the sandbox's init and the member groups' mounts.
    static func write(_ store: Store, initPID: pid_t, groups: [SharedGroupMount]) {
        // The mount points are ours (no space); the inside path names a lock as the program sees it.
        let text = "\(initPID)\n" + groups.map { "\($0.identifier) \($0.mountpoint) \($0.inside)\n" }.joined()
        let aside = fileName + Array(".new".utf8)
        _ = withCName(aside) { unlinkat(store.stateFD, $0, 0) }
        guard (try? writeNewFile(at: store.stateFD, aside, Array(text.utf8), mode: 0o600)) != nil else { return }
        _ = withCName(aside) { from in withCName(fileName) { to in renameat(store.stateFD, from, store.stateFD, to) } }
    }

    /// The recorded sandbox of `store`, if a run records one.
    static func read(_ store: Store) -> (initPID: pid_t, groups: [SharedGroupMount])? {
        guard let bytes = try? readFile(at: store.stateFD, fileName, limit: smallStateFileLimit) else { return nil }
        let lines = String(decoding: bytes, as: UTF8.self).split(separator: "\n").map(String.init)
        guard let first = lines.first, let pid = pid_t(first), pid > 1 else { return nil }
        let groups = lines.dropFirst().compactMap { line -> SharedGroupMount? in
            let fields = line.split(separator: " ", maxSplits: 2).map(String.init)
            guard fields.count >= 2, AppGroup.problem(with: fields[0]) == nil else { return nil }
            return (fields[0], fields[1], fields.count == 3 ? fields[2] : AppGroup.sandboxPath(of: fields[0]))
        }
        return (pid, groups)
    }

    static func clear(_ store: Store) {
        _ = withCName(fileName) { unlinkat(store.stateFD, $0, 0) }
        _ = withCName(terminatedName) { unlinkat(store.stateFD, $0, 0) }
    }

    /// Records that the program was killed at suspension, with `run`'s one line.
    static func recordTermination(_ store: Store, _ line: String) {
        _ = withCName(terminatedName) { unlinkat(store.stateFD, $0, 0) }
        try? writeNewFile(at: store.stateFD, terminatedName, Array((line + "\n").utf8), mode: 0o600)
    }

    /// The line of a kill at suspension, if one happened in this run.
    static func termination(_ store: Store) -> String? {
        guard let bytes = try? readFile(at: store.stateFD, terminatedName, limit: smallStateFileLimit) else { return nil }
        return String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: .newlines)
    }
}

extension Suspension {
    /// `containerfs suspend STORE`: suspends the program running in the container at `path`
    /// (its `run` recorded its sandbox). Returns the verdict.
    public static func suspend(store path: String) throws(UserError) -> SuspensionRule.Verdict {
        let (store, sandbox) = try runningSandbox(path)
        return suspend(sandbox: sandbox.initPID, groups: sandbox.groups) { lock in
            SandboxRecord.recordTermination(store, SuspensionRule.message(lock))
        }
    }

    /// `containerfs resume STORE`.
    public static func resume(store path: String) throws(UserError) {
        let sandbox = try runningSandbox(path).1
        resume(sandbox: sandbox.initPID)
    }

    /// The store and its run's sandbox: only while a run holds the store's run lock, and
    /// only a sandbox in a pid namespace of its own whose processes run as the app user
    /// (root's runs) or as this user, so a planted record cannot aim the signals elsewhere.
    private static func runningSandbox(_ path: String) throws(UserError) -> (Store, (initPID: pid_t, groups: [SharedGroupMount])) {
        let store = try Store.open(path, changing: false)
        try store.requireApp(for: "suspend and resume")
        guard RunLock.isHeld(store), let sandbox = SandboxRecord.read(store) else {
            throw UserError("no program runs confined in \(path): suspend and resume act on a running 'containerfs run' (not --no-confine)")
        }
        let owner: uid_t = geteuid() == 0 ? ((try? HostAppUser.find())?.uid ?? 0) : geteuid()
        var info = stat()
        guard stat("/proc/\(sandbox.initPID)", &info) == 0, info.st_uid == owner || info.st_uid == geteuid(),
              isStartedByRun(sandbox.initPID, of: store), !processes(ofSandbox: sandbox.initPID).isEmpty else {
            throw UserError("the program recorded for \(path) is not running confined (its run is ending): nothing to suspend or resume")
        }
        return (store, sandbox)
    }
}

extension Suspension {
    /// Whether the sandbox init `initPID` descends from the process holding the store's run
    /// lock open (its `run`: bubblewrap is its child, the init bubblewrap's). The record
    /// naming the init is the store owner's to write: without this, root's `suspend` of
    /// another user's store stopped, and could kill, whatever process the owner named in
    /// a pid namespace of its own — another app's sandbox, a container of the host.
    static func isStartedByRun(_ initPID: pid_t, of store: Store) -> Bool {
        var lock = stat()
        guard withCName(RunLock.fileName, { fstatat(store.stateFD, $0, &lock, AT_SYMLINK_NOFOLLOW) }) == 0 else { return false }
        // The init's parent is bubblewrap, and bubblewrap's `run` (setpriv and env exec
        // bubblewrap: no process of their own). Nothing further up: a process of the
        // owner's that started the other app's run would be.
        guard let bubblewrap = parentPID(initPID), bubblewrap > 1, let run = parentPID(bubblewrap), run > 1 else { return false }
        return holdsOpen(run, device: lock.st_dev, inode: lock.st_ino)
    }

    private static func parentPID(_ pid: pid_t) -> pid_t? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8), let close = text.lastIndex(of: ")") else { return nil }
        let fields = text[text.index(after: close)...].split(separator: " ")
        return fields.count > 1 ? pid_t(fields[1]) : nil
    }

    private static func holdsOpen(_ pid: pid_t, device: dev_t, inode: ino_t) -> Bool {
        let descriptors = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd")) ?? []
        return descriptors.contains { fd in
            var info = stat()
            return stat("/proc/\(pid)/fd/\(fd)", &info) == 0 && info.st_dev == device && info.st_ino == inode
        }
    }
}

/// `run --suspend-after`: suspends the sandbox once, at a moment after the launch started,
/// unless the program ends first; resumes it later if it survived.
final class SuspensionTimer: @unchecked Sendable {
    private let ended = DispatchSemaphore(value: 0)
    private let thread: Thread

    init(after delay: Double, resumeAfter: Double, initPID: pid_t, store: Store, groups: [SharedGroupMount]) {
        let ended = ended
        thread = Thread {
            guard ended.wait(timeout: .now() + delay) == .timedOut else { return }
            switch Suspension.suspend(sandbox: initPID, groups: groups, recording: { SandboxRecord.recordTermination(store, SuspensionRule.message($0)) }) {
            case .killed:
                break
            case .suspended:
                FileHandleOutput.standardError.write("containerfs: suspended the program after \(formatSeconds(delay)), holding no lock in a shared group container; resuming it \(formatSeconds(resumeAfter)) later\n")
                _ = ended.wait(timeout: .now() + resumeAfter)
                Suspension.resume(sandbox: initPID)
            }
        }
        thread.name = "suspension"
        thread.start()
    }

    /// The program ended: no suspension from now on (one under way completes).
    func stop() {
        ended.signal()
    }
}

private func formatSeconds(_ seconds: Double) -> String {
    seconds == seconds.rounded() ? "\(Int(seconds)) s" : "\(seconds) s"
}
