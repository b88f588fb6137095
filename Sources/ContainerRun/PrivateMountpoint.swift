import ContainerStore
import Foundation
import Glibc

/// A private folder to mount in, `/tmp/PREFIXXXXXXX/LEAF`, the folder made by `mkdtemp`
/// as the user running `run` or mounting a group: 0700 so that nobody else can reach the
/// mount. For root's program it is `root:_containerfs` 0750: its user can enter it, but
/// not change what root works on in it.
///
/// Where one was, a later run finds it only by what a state file of a store records (the
/// run lock's abandoned mount point, a group's mount lock), and the store's owner can write
/// those files. So a recorded path is acted on — unmounted, its `dev` beside it detached,
/// bound into a sandbox — only when `isMade` says it has this shape and its folder is a
/// real one (no symlink) owned by root or by this user: nobody else can make such a folder
/// in `/tmp`. A path such as `/container` would otherwise make root's `run` of another
/// user's store detach the host's `/dev`.
struct PrivateMountpoint {
    /// `containerfs-run-` or `containerfs-group-`: what `Lifeline` recognises as ours.
    let prefix: String
    /// `container` or `group`.
    let leaf: String
    /// How an error names the folder: `run` or `group`.
    let purpose: String

    static let run = PrivateMountpoint(prefix: "containerfs-run-", leaf: "container", purpose: "run")
    static let group = PrivateMountpoint(prefix: "containerfs-group-", leaf: "group", purpose: "group")

    func make(owner: HostAppUser?) throws(UserError) -> String {
        var template = Array("/tmp/\(prefix)XXXXXX".utf8CString)
        guard let base = mkdtemp(&template) else { throw UserError.failed("cannot make a \(purpose) mount point in /tmp", Errno.current) }
        let mountpoint = MountEntry.absolute(String(cString: base) + "/" + leaf)
        guard mkdir(mountpoint, 0o700) == 0 else { throw UserError.failed("cannot make a \(purpose) mount point in /tmp", Errno.current) }
        if let owner, chown(base, 0, owner.gid) != 0 || chmod(base, 0o750) != 0 {
            let error = Errno.current
            remove(mountpoint)
            throw UserError.failed("cannot open the \(purpose) folder \(String(cString: base)) to \(HostAppUser.name)", error)
        }
        return mountpoint
    }

    /// Removes the mount point and its parent, if the parent is one of these folders.
    func remove(_ mountpoint: String) {
        rmdir(mountpoint)
        if isOurs(Directory.holding(mountpoint)) { rmdir(Directory.holding(mountpoint)) }
    }

    /// Whether `folder` is named as a parent folder made by `make` (for paths this process
    /// knows; a recorded one needs `isMade`).
    func isOurs(_ folder: String) -> Bool {
        (folder as NSString).lastPathComponent.hasPrefix(prefix)
    }

    /// Whether `mountpoint` is `/tmp/PREFIXXXXXXX/LEAF` (mkdtemp's six characters), its
    /// folder a real folder owned by root or by this process's user.
    func isMade(_ mountpoint: String) -> Bool {
        let temporary = Self.realTemporaryFolder()
        let parent = Directory.holding(mountpoint)
        guard mountpoint == parent + "/" + leaf, Directory.holding(parent) == temporary else { return false }
        let name = (parent as NSString).lastPathComponent
        guard name.hasPrefix(prefix), name.utf8.count == prefix.utf8.count + 6,
              name.utf8.dropFirst(prefix.utf8.count).allSatisfy({ isalnum(Int32($0)) != 0 }) else { return false }
        var info = stat()
        guard lstat(parent, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else { return false }
        return info.st_uid == 0 || info.st_uid == geteuid()
    }

    /// `/tmp` with its symlinks resolved, as `MountEntry.absolute` records mount points.
    private static func realTemporaryFolder() -> String {
        guard let resolved = realpath("/tmp", nil) else { return "/tmp" }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    /// Whether the mount at `mountpoint` is a container mount of the store whose root is
    /// open at `rootFD` (its source names that folder); when nothing is mounted there, true
    /// unless a mount is `required`.
    static func mountIsOf(_ mountpoint: String, rootFD: Int32, required: Bool = false) -> Bool {
        guard let entry = MountEntry.at(mountpoint) else { return !required }
        var mine = stat(), theirs = stat()
        return entry.isContainer && fstat(rootFD, &mine) == 0 && stat(entry.source, &theirs) == 0
            && mine.st_dev == theirs.st_dev && mine.st_ino == theirs.st_ino
    }
}
