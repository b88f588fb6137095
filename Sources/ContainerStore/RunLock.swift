import ContainerPolicy
import Glibc

/// The lock `containerfs run` holds while a program runs in a container: one app, one
/// process, as on iOS.
///
/// An exclusive `flock` on `.containerfs/run.lock`, which the kernel drops when `run` exits
/// or is killed. The file says who holds it (pid) and where that run mounted the container,
/// so that the next run can clear what a run killed with SIGKILL left mounted.
public final class RunLock: @unchecked Sendable {
    /// The lock's file in the state folder.
    public static let fileName = Array(name: "run.lock")
    private let lock: StateLock
    /// The mount point a previous run recorded and never cleared: it was killed before
    /// cleaning up, and may have left the container mounted there.
    public let abandonedMountpoint: String?

    /// Takes the lock, or fails saying which run holds it.
    public init(store: Store) throws(UserError) {
        guard let lock = try StateLock(store: store, name: Self.fileName) else {
            let holder = StateLock.recorded(store, Self.fileName).map { " (containerfs run, pid \($0.pid))" } ?? ""
            throw UserError("a program is already running in \(store.path)\(holder): one app runs as one process at a time; wait for it to end")
        }
        self.lock = lock
        abandonedMountpoint = StateLock.recorded(store, Self.fileName)?.mountpoint
        lock.record(mountpoint: nil)
    }

    /// Records where this run mounts the container (nil: nothing of this run is left to clear).
    public func record(mountpoint: String?) {
        lock.record(mountpoint: mountpoint)
    }
}

extension RunLock {
    /// Whether a `containerfs run` holds the store's run lock now.
    public static func isHeld(_ store: Store) -> Bool {
        StateLock.isHeld(store, fileName)
    }
}
