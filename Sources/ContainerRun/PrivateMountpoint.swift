import ContainerStore
import Foundation
import Glibc

/// A private folder to mount in, `/tmp/PREFIXXXXXXX/LEAF`: its parent is 0700 so that
/// nobody else can reach the mount. For root's program the parent is `root:_containerfs`
/// 0750: its user can enter it, but not change what root works on in it.
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
        guard let base = mkdtemp(&template) else { throw UserError("cannot make a \(purpose) mount point in /tmp: \(Errno.current)") }
        let mountpoint = MountEntry.absolute(String(cString: base) + "/" + leaf)
        guard mkdir(mountpoint, 0o700) == 0 else { throw UserError("cannot make a \(purpose) mount point in /tmp: \(Errno.current)") }
        if let owner, chown(base, 0, owner.gid) != 0 || chmod(base, 0o750) != 0 {
            let error = Errno.current
            remove(mountpoint)
            throw UserError("cannot open the \(purpose) folder \(String(cString: base)) to \(HostAppUser.name): \(error)")
        }
        return mountpoint
    }

    /// Removes the mount point and its parent, if the parent is one of these folders.
    func remove(_ mountpoint: String) {
        rmdir(mountpoint)
        if isOurs(Directory.holding(mountpoint)) { rmdir(Directory.holding(mountpoint)) }
    }

    /// Whether `folder` is a parent folder made by `make`.
    func isOurs(_ folder: String) -> Bool {
        (folder as NSString).lastPathComponent.hasPrefix(prefix)
    }
}
