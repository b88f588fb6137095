import CLinux
import ContainerPolicy
import ContainerStore
import Foundation
import Glibc

/// A member group's container as one run uses it: mounted once, by one daemon, for every
/// run of its members at the same time (docs/groups.md), so that their writes and file
/// locks meet in one file system as on one disk.
///
/// Who mounts and unmounts: two `flock`s in the group's state folder. `group-mount.lock`
/// is held exclusively around each decision; each run holds `group-users.lock` shared for
/// as long as it uses the group. The first run finds no mount and starts the daemon; the
/// run that leaves and then takes the users' lock exclusively is the last, and unmounts.
/// A killed run's shared lock goes with it, so the mount never outlives its last user by
/// more than that user's run.
public final class GroupMount {
    /// The group's identifier, `group.com.example.shared`.
    public let identifier: String
    /// Where the group is mounted on the host (in `/tmp/containerfs-group-XXXXXX/`).
    public let mountpoint: String
    /// The group's store.
    let store: Store
    /// This run's shared lock on `group-users.lock`.
    private var usersFD: Int32
    /// The daemon, when this run started it (and so reaps it).
    private let startedDaemon: pid_t?
    /// The write end of the started daemon's lifeline (`Lifeline`), closed when this run
    /// leaves: the daemon then unmounts the group once no member's run uses it, so a killed
    /// run's group does not stay mounted.
    private var lifeline: Int32

    static let mountLockName = Array(name: "group-mount.lock")
    static let usersLockName = Array(name: "group-users.lock")

    private init(identifier: String, mountpoint: String, store: Store, usersFD: Int32, startedDaemon: pid_t?, lifeline: Int32 = -1) {
        self.identifier = identifier
        self.mountpoint = mountpoint
        self.store = store
        self.usersFD = usersFD
        self.startedDaemon = startedDaemon
        self.lifeline = lifeline
    }

    deinit { release() }

    /// Mounts (or joins the mount of) each group of the app container `app`; on failure
    /// releases those already taken.
    static func acquireAll(for app: Store, appUser: HostAppUser?, locked: Bool) throws(UserError) -> [GroupMount] {
        var taken: [GroupMount] = []
        for identifier in try app.memberGroups() {
            do {
                taken.append(try acquire(identifier, for: app, appUser: appUser, locked: locked))
            } catch {
                taken.forEach { $0.release() }
                throw error
            }
        }
        return taken
    }

    /// The group `identifier` of `app`, mounted.
    static func acquire(_ identifier: String, for app: Store, appUser: HostAppUser?, locked: Bool) throws(UserError) -> GroupMount {
        let path = app.groupPath(identifier)
        guard let group = try app.openGroup(identifier) else {
            throw UserError("\(app.path) belongs to \(identifier), but there is no group container at \(path): make it with 'containerfs create-group \(path)'")
        }
        let mutex = try lockFile(group, mountLockName)
        defer { close(mutex) }
        // Bounded: a run stopped while it mounts or leaves the group must not hold every
        // other member's run forever.
        try LockWait.take(mutex, LOCK_EX, "the lock on \(group.statePath)/\(String(decoding: mountLockName, as: UTF8.self)) (one member's run mounting or leaving the group at a time)")
        let users = try lockFile(group, usersLockName)
        do throws(UserError) {
            try LockWait.take(users, LOCK_SH, "the lock on \(group.statePath)/\(String(decoding: usersLockName, as: UTF8.self)) (the runs using the group)")
        } catch {
            close(users)
            throw error
        }
        if let holder = MountLock.holder(group) {
            // The record is the group owner's to write: joined only if it is a group folder
            // of ours with this group mounted there, or a planted path (a symlink to another
            // app's mount) would be bound into the sandbox (PrivateMountpoint).
            guard PrivateMountpoint.group.isMade(holder.mountpoint),
                  PrivateMountpoint.mountIsOf(holder.mountpoint, rootFD: group.rootFD, required: true) else {
                close(users)
                if MountEntry.at(holder.mountpoint)?.isContainer != true {
                    throw UserError("the group container \(path) records a mount at \(holder.mountpoint) that is not its group mount (\(group.statePath)/mount.lock, held by pid \(holder.pid)): end that process; runs of its members mount the group themselves")
                }
                throw UserError("the group container \(path) is mounted at \(holder.mountpoint): unmount it first with 'containerfs unmount \(holder.mountpoint)'; runs of its members mount it themselves")
            }
            return GroupMount(identifier: identifier, mountpoint: holder.mountpoint, store: group, usersFD: users, startedDaemon: nil)
        }
        do throws(UserError) {
            let mountpoint = try PrivateMountpoint.group.make(owner: appUser)
            var options = locked ? ["nosetid", "locked"] : ["nosetid"]
            if let appUser { options += ["allow_other", "appuser=\(appUser.uid):\(appUser.gid)"] }
            let daemon: (pid: pid_t, lifeline: Int32)
            do throws(UserError) {
                // The daemon opens the store again by path: the one just opened, by its real path.
                daemon = try MountDaemon.startTied(store: group.resolvedPath, mountpoint: mountpoint, options: options)
            } catch {
                PrivateMountpoint.group.remove(mountpoint)
                throw error
            }
            return GroupMount(identifier: identifier, mountpoint: mountpoint, store: group, usersFD: users, startedDaemon: daemon.pid, lifeline: daemon.lifeline)
        } catch {
            close(users)
            throw error
        }
    }

    /// Leaves the group: the last run to leave unmounts it. Idempotent.
    public func release() {
        guard usersFD >= 0 else { return }
        let users = usersFD
        usersFD = -1
        // After the unmount, or after leaving a mount others still use.
        defer {
            if lifeline >= 0 { close(lifeline) }
            lifeline = -1
        }
        guard let mutex = try? Self.lockFile(store, Self.mountLockName) else {
            close(users)
            return
        }
        defer { close(mutex) }
        guard LockWait.attempt(mutex, LOCK_EX, within: LockWait.patience) else {
            // Leaving without the mutex: never unmounting what another run may be joining.
            close(users)
            let held = LockWait.heldMessage("the lock on \(store.statePath)/\(String(decoding: Self.mountLockName, as: UTF8.self))", waited: LockWait.patience, holder: LockWait.holder(of: mutex))
            FileHandleOutput.standardError.write("containerfs: note: \(held); if this run was the group's last user, it stays mounted at \(mountpoint): unmount it with 'containerfs unmount \(mountpoint)'\n")
            return
        }
        flock(users, LOCK_UN)
        let last = flock(users, LOCK_EX | LOCK_NB) == 0
        close(users)
        guard last, MountLock.holder(store)?.mountpoint == mountpoint else { return }
        var unmounted = false
        for _ in 0..<50 {
            if (try? MountDaemon.unmount(mountpoint, lazy: false)) != nil {
                unmounted = true
                break
            }
            if MountEntry.at(mountpoint) == nil { break }
            usleep(100_000)
        }
        if !unmounted, MountEntry.at(mountpoint) != nil { _ = try? MountDaemon.unmount(mountpoint, lazy: true) }
        if let startedDaemon {
            var status: Int32 = 0
            while waitpid(startedDaemon, &status, unmounted ? 0 : WNOHANG) < 0, errno == EINTR {}
        }
        PrivateMountpoint.group.remove(mountpoint)
    }

    /// Opens (making it) the lock file `name` in the group's state folder, following no symlink.
    static func lockFile(_ store: Store, _ name: [UInt8]) throws(UserError) -> Int32 {
        let fd = withCName(name) { openat(store.stateFD, $0, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0o600) }
        guard fd >= 0 else { throw UserError.failed("cannot open \(store.statePath)/\(ContainerPath.printable(name))", Errno.current) }
        ownedLikeTheFolder(fd, store.stateFD)
        return fd
    }

}
