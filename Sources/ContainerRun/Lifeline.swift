import ContainerStore
import Foundation
import Glibc

/// A run's daemon watching the run that started it (`MountDaemon.startTied`).
///
/// The daemon has the read end of a pipe whose only write end its `run` holds: when the
/// read returns end of file, that `run` has closed it — after unmounting — or has died,
/// SIGKILL included, which no handler of its own could have seen. The daemon then takes
/// its mount away itself, so that a killed run leaves nothing mounted (docs/run.md). The
/// program confined with it dies with its bubblewrap (`--die-with-parent`); the kernel
/// keeps the file system for as long as a process still uses it, so the daemon exits once
/// the last one is gone.
///
/// A group's mount is shared by every member's run (`GroupMount`): the daemon unmounts it
/// only once no run holds `group-users.lock` any more, deciding under `group-mount.lock`
/// as the runs do.
public final class Lifeline: @unchecked Sendable {
    private let state = NSCondition()
    /// The run is gone and the watcher is taking the mount away (guarded by `state`).
    private var clearing = false
    private var cleared = false

    /// Watches `fd` on a thread of its own, for the daemon of `store` mounted at `mountpoint`.
    public init(watching fd: Int32, store: Store, mountpoint: String) {
        let isGroup = store.layout.isGroup
        Thread.detachNewThread { [self] in
            Self.waitForEndOfFile(fd)
            close(fd)
            if isGroup {
                unmountWhenUnused(store, mountpoint)
            } else {
                state.withLock { clearing = true }
                Self.unmount(mountpoint)
            }
            state.withLock {
                cleared = true
                state.broadcast()
            }
        }
    }

    /// Called when the mount has gone: if the watcher is taking it away, waits (at most 30 s)
    /// until it has removed the run's folder, which the process's exit would cut short. A
    /// run that unmounted itself closes its end only after this process has exited.
    public func finish() {
        state.withLock {
            guard clearing else { return }
            let deadline = Date().addingTimeInterval(30)
            while !cleared, state.wait(until: deadline) {}
        }
    }

    private static func waitForEndOfFile(_ fd: Int32) {
        var byte: UInt8 = 0
        while true {
            let count = read(fd, &byte, 1)
            if count < 0, errno == EINTR { continue }
            if count <= 0 { return }
        }
    }

    /// Every quarter second, the group is unmounted if no member's run uses it any more.
    ///
    /// The decision lock is only tried: a run that leaves last holds it while it unmounts
    /// and waits for this daemon to exit, which must not wait for this thread in turn.
    private func unmountWhenUnused(_ group: Store, _ mountpoint: String) {
        while MountEntry.at(mountpoint) != nil {
            guard let mutex = try? GroupMount.lockFile(group, GroupMount.mountLockName) else { return }
            if flock(mutex, LOCK_EX | LOCK_NB) == 0, let users = try? GroupMount.lockFile(group, GroupMount.usersLockName) {
                if flock(users, LOCK_EX | LOCK_NB) == 0 {
                    // The mutex stays held until this process exits: no run may join a
                    // mount that is going away (`GroupMount.acquire` waits for it).
                    state.withLock { clearing = true }
                    Self.unmount(mountpoint)
                    return
                }
                close(users)
            }
            close(mutex)
            usleep(250_000)
        }
    }

    /// Unmounts, retrying a moment while it is busy, then detaching it lazily; then removes
    /// the run's (or group's) private folder.
    private static func unmount(_ mountpoint: String) {
        for _ in 0..<20 {
            guard MountEntry.at(mountpoint) != nil else { break }
            if (try? MountDaemon.unmount(mountpoint, lazy: false, waitForDaemon: false)) != nil { break }
            usleep(100_000)
        }
        if MountEntry.at(mountpoint) != nil { _ = try? MountDaemon.unmount(mountpoint, lazy: true, waitForDaemon: false) }
        rmdir(mountpoint)
        let parent = Directory.holding(mountpoint)
        if Directory.holding(parent) == "/tmp", PrivateMountpoint.group.isOurs(parent) || PrivateMountpoint.run.isOurs(parent) {
            rmdir(parent)
        }
    }
}
