import ContainerPolicy
import Glibc

/// The lock a mounted container's daemon holds for its whole life, in the state folder.
///
/// An exclusive `flock` on `.containerfs/mount.lock`: the kernel drops it when the daemon
/// exits or is killed, so a dead daemon never leaves the store looking mounted. The file
/// says who holds it: the daemon's pid, then the mount point.
public final class MountLock: @unchecked Sendable {
    /// The lock's file in the state folder; a new mount makes it anew, so its inode and ctime
    /// tell one mount from the next (the tag index uses that).
    public static let fileName = Array(name: "mount.lock")
    private let lock: StateLock

    /// Takes the lock, or fails saying where the store is mounted already.
    public init(store: Store, mountpoint: String) throws(UserError) {
        guard let lock = try StateLock(store: store, name: Self.fileName) else {
            let holder = Self.holder(store).map { " at \($0.mountpoint) (daemon pid \($0.pid))" } ?? ""
            throw UserError("store \(store.path) is already mounted\(holder): unmount it first with 'containerfs unmount'")
        }
        lock.record(mountpoint: mountpoint)
        self.lock = lock
    }

    /// The daemon holding the store's lock now, if any.
    public static func holder(_ store: Store) -> (pid: Int32, mountpoint: String)? {
        guard StateLock.isHeld(store, fileName), let record = StateLock.recorded(store, fileName) else { return nil }
        return (record.pid, record.mountpoint ?? "")
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
