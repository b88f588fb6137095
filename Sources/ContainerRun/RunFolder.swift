import ContainerStore
import Foundation
import Glibc

/// The private folders `run` and the group mounts make their mount points in:
/// `/tmp/PREFIXXXXXXX/LEAF`, the folder made by `mkdtemp` as the user running them.
///
/// Where one was, a later run finds it only by what a state file of a store records (the
/// run lock's abandoned mount point, a group's mount lock), and the store's owner can write
/// those files. So a recorded path is acted on — unmounted, its `dev` beside it detached,
/// bound into a sandbox — only when it has this shape and its folder is a real one (no
/// symlink) owned by root or by this user: nobody else can make such a folder in `/tmp`.
/// A path such as `/container` would otherwise make root's `run` of another user's store
/// detach the host's `/dev`.
enum RunFolder {
    static let runPrefix = "containerfs-run-"
    static let groupPrefix = GroupMount.folderPrefix

    /// Whether `mountpoint` is `/tmp/PREFIXXXXXXX/LEAF` (mkdtemp's six characters), its
    /// folder a real folder owned by root or by this process's user.
    static func isMade(_ mountpoint: String, prefix: String, leaf: String) -> Bool {
        let temporary = realTemporaryFolder()
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
