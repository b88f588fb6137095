import ContainerPolicy
import Glibc

/// The lock `containerfs run` holds while a program runs in a container: one app, one
/// process, as on iOS.
///
/// An exclusive `flock` on `.containerfs/run.lock`, which the kernel drops when `run` exits
/// or is killed. The file says who holds it (pid) and where that run mounted the container,
/// so that the next run can clear what a run killed with SIGKILL left mounted.
public final class RunLock: @unchecked Sendable {
    static let fileName = Array(name: "run.lock")
    private let fd: Int32
    /// The mount point a previous run recorded and never cleared: it was killed before
    /// cleaning up, and may have left the container mounted there.
    public let abandonedMountpoint: String?

    /// Takes the lock, or fails saying which run holds it.
    public init(store: Store) throws(UserError) {
        let fd = withCName(Self.fileName) { openat(store.stateFD, $0, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600) }
        guard fd >= 0 else { throw UserError("cannot open \(store.statePath)/run.lock: \(Errno.current)") }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            close(fd)
            let holder = Self.contents(store).map { " (containerfs run, pid \($0.pid))" } ?? ""
            throw UserError("a program is already running in \(store.path)\(holder): one app runs as one process at a time; wait for it to end")
        }
        self.fd = fd
        abandonedMountpoint = Self.contents(store)?.mountpoint
        record(mountpoint: nil)
    }

    deinit { close(fd) }

    /// Records where this run mounts the container (nil: nothing of this run is left to clear).
    public func record(mountpoint: String?) {
        let contents = Array("\(getpid())\n\(mountpoint ?? "")\n".utf8)
        ftruncate(fd, 0)
        _ = contents.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
    }

    /// The pid and mount point the file names, if it names any.
    private static func contents(_ store: Store) -> (pid: Int32, mountpoint: String?)? {
        guard let bytes = try? readFile(at: store.stateFD, fileName) else { return nil }
        let lines = bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
        guard lines.count >= 2, let pid = Int32(String(decoding: lines[0], as: UTF8.self)) else { return nil }
        return (pid, lines[1].isEmpty ? nil : String(decoding: lines[1], as: UTF8.self))
    }
}
