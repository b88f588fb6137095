import ContainerPolicy
import Glibc

/// The lock a mounted container's daemon holds for its whole life, in the state folder.
///
/// An exclusive `flock` on `.containerfs/mount.lock`: the kernel drops it when the daemon
/// exits or is killed, so a dead daemon never leaves the store looking mounted. The file
/// says who holds it: the daemon's pid, then the mount point.
public final class MountLock: @unchecked Sendable {
    static let fileName = Array(name: "mount.lock")
    private let fd: Int32

    /// Takes the lock, or fails saying where the store is mounted already.
    public init(store: Store, mountpoint: String) throws(UserError) {
        let fd = withCName(Self.fileName) { openat(store.stateFD, $0, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600) }
        guard fd >= 0 else { throw UserError("cannot open \(store.statePath)/mount.lock: \(Errno.current)") }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            close(fd)
            let holder = Self.holder(store).map { " at \($0.mountpoint) (daemon pid \($0.pid))" } ?? ""
            throw UserError("store \(store.path) is already mounted\(holder): unmount it first with 'containerfs unmount'")
        }
        self.fd = fd
        let contents = Array("\(getpid())\n\(mountpoint)\n".utf8)
        ftruncate(fd, 0)
        _ = contents.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
    }

    deinit { close(fd) }

    /// The daemon holding the store's lock now, if any.
    public static func holder(_ store: Store) -> (pid: Int32, mountpoint: String)? {
        let fd = withCName(fileName) { openat(store.stateFD, $0, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) }
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        if flock(fd, LOCK_SH | LOCK_NB) == 0 {
            flock(fd, LOCK_UN)
            return nil
        }
        guard let bytes = try? readFile(at: store.stateFD, fileName) else { return nil }
        let lines = bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
        guard lines.count >= 2, let pid = Int32(String(decoding: lines[0], as: UTF8.self)) else { return nil }
        return (pid, String(decoding: lines[1], as: UTF8.self))
    }

    /// Waits until nobody holds the store's lock, for at most `seconds`; true if free.
    public static func waitUntilFree(_ store: Store, seconds: Double) -> Bool {
        let deadline = monotonicSeconds() + seconds
        while holder(store) != nil {
            if monotonicSeconds() > deadline { return false }
            usleep(20_000)
        }
        return true
    }
}

/// Seconds on the monotonic clock.
public func monotonicSeconds() -> Double {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
}
