import CLinux
import Glibc

/// The folders from a walk's top down to where it is, held with a bounded number of
/// descriptors, so that every walk of a store is iterative and survives a chain of folders
/// deeper than the descriptor limit (a confined program can make one).
///
/// The innermost `window` levels stay open. A walk climbing above them reopens the parent
/// through `..` and checks it against the identity recorded on the way down: a folder
/// moved during the walk ends it with `ESTALE` instead of leading it out of the store.
/// Folders are entered with `O_NOFOLLOW`: no symlink is ever followed.
public final class FolderChain {
    private struct Level {
        var fd: Int32
        let device: UInt64
        let inode: UInt64
    }

    /// Level 0 is the top, the caller's descriptor, never closed here.
    private var levels: [Level]
    private let window: Int

    /// A chain starting at the folder open at `top`, which stays the caller's.
    public init(top: Int32, window: Int = 64) throws(Errno) {
        var info = stat()
        try sys { fstat(top, &info) }
        levels = [Level(fd: top, device: UInt64(info.st_dev), inode: UInt64(info.st_ino))]
        self.window = max(1, window)
    }

    deinit {
        for level in levels.dropFirst() where level.fd >= 0 { close(level.fd) }
    }

    /// The folder the walk is in (always open).
    public var fd: Int32 { levels[levels.count - 1].fd }

    /// How many folders below the top the walk is.
    public var depth: Int { levels.count - 1 }

    /// Goes down into the folder `name` of the current one.
    public func enter(_ name: [UInt8]) throws(Errno) {
        let child = try withCName(name) { (cname) throws(Errno) in
            try sys { openat(fd, cname, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
        }
        var info = stat()
        guard fstat(child, &info) == 0 else {
            let error = Errno.current
            close(child)
            throw error
        }
        levels.append(Level(fd: child, device: UInt64(info.st_dev), inode: UInt64(info.st_ino)))
        let leaving = levels.count - 1 - window
        if leaving >= 1, levels[leaving].fd >= 0 {
            close(levels[leaving].fd)
            levels[leaving].fd = -1
        }
    }

    /// Goes back up to the parent of the current folder (nothing at the top).
    public func leave() throws(Errno) {
        guard levels.count > 1 else { return }
        let child = levels.removeLast()
        defer { close(child.fd) }
        let parent = levels.count - 1
        guard levels[parent].fd < 0 else { return }
        let fd = try sys { openat(child.fd, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
        var info = stat()
        guard fstat(fd, &info) == 0, UInt64(info.st_dev) == levels[parent].device, UInt64(info.st_ino) == levels[parent].inode else {
            close(fd)
            throw Errno(ESTALE)
        }
        levels[parent].fd = fd
    }
}
