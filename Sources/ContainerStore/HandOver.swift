import Glibc

/// The mode a file or folder gets when a command copies it into a store: `restore` from an
/// archive, `deliver` and `create` from the host (docs/backup.md, "Modes").
///
/// The copy belongs to whoever runs the command (or, root handing files to another user's
/// store, to that store's owner: `Owner`), not to the owner the source had (or, in an
/// archive, claims), so the bits that lend an owner's rights to others or weaken a folder
/// are dropped, as `cp` drops set-ID bits when the owner changes. They are dropped whoever
/// runs the command, even for a user copying their own files: the mount is `nosuid` and an
/// iOS app holds no set-ID programs, so in a store the bits only ever act outside the
/// mount, where a root-run copy would make them root's. One rule, whoever runs it.
public enum HandedOverMode {
    /// A file keeps read, write and execute for owner, group and others; never
    /// set-user-ID, set-group-ID or sticky.
    public static func file(_ mode: mode_t) -> mode_t { mode & 0o777 }

    /// A folder keeps read, write and search for owner and group, read and search for
    /// others; never writable by others, set-user-ID, set-group-ID or sticky.
    public static func folder(_ mode: mode_t) -> mode_t { mode & 0o775 }
}

/// The user and group ids a file copied into a store by root is given: the store's owner's
/// (its top folder's), as the files the app makes are (docs/lifecycle.md, "File sharing").
///
/// The app runs as that owner (or, under root's `run`, as an unprivileged user the mount
/// maps to it): a file root copied in and left root's could be read but never changed,
/// renamed over or given another mode by the app it was handed to. The copy's mode is the
/// one `HandedOverMode` allows, never set-ID, so nothing of root's is lent to anybody.
public struct Owner: Equatable, Sendable {
    public let uid: uid_t
    public let gid: gid_t

    /// For a copy into the store open at `rootFD`: its owner when root copies into a store of
    /// another user; nil when the copier is the owner (or cannot give files away anyway).
    public static func handingTo(rootFD: Int32) -> Owner? {
        var info = stat()
        guard geteuid() == 0, fstat(rootFD, &info) == 0, info.st_uid != 0 || info.st_gid != getegid() else { return nil }
        return Owner(uid: info.st_uid, gid: info.st_gid)
    }

    /// Whether this user may read a node of status `info` by its mode bits (owner, its
    /// primary group, others). Root hands a user only what that user could read: a path
    /// the user controls (a hard link to `/etc/shadow`, a folder swapped for a symlink
    /// into `/root`) must not turn root's copy into the user's copy of a secret.
    public func mayRead(_ info: stat) -> Bool {
        let bit: mode_t = info.st_uid == uid ? S_IRUSR : info.st_gid == gid ? S_IRGRP : S_IROTH
        return info.st_mode & bit != 0
    }
}

/// Hidden working names in a folder others may share (a sticky `/tmp`):
/// `.LEAF.PURPOSE-XXXXXXXXXXXX`, twelve random letters and digits from the kernel's
/// random source, as `mkdtemp` and `mkstemp` make them, so that nobody can predict a name
/// to pre-create or block it. A taken name is never reused: another is drawn.
public enum StagingName {
    static let alphabet = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789".utf8)
    /// Room left for the prefix, the purpose and the random part within `NAME_MAX`.
    static let leafLimit = 200

    /// A fresh name for `purpose` beside `leaf` (shortened to fit).
    static func random(beside leaf: [UInt8], _ purpose: String) -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        let suffix = (0..<12).map { _ in alphabet.randomElement(using: &generator) ?? UInt8(ascii: "x") }
        return [UInt8(ascii: ".")] + leaf.prefix(leafLimit) + Array(".\(purpose)-".utf8) + suffix
    }

    /// Calls `make` (a `mkdirat` or an `openat` with `O_CREAT | O_EXCL`) with fresh names
    /// until one is not taken; returns the name and what `make` returned.
    public static func create(beside leaf: [UInt8], _ purpose: String,
                              _ make: (UnsafePointer<CChar>) -> Int32) throws(Errno) -> (name: [UInt8], result: Int32) {
        for _ in 0..<100 {
            let name = random(beside: leaf, purpose)
            let result = withCName(name, make)
            if result >= 0 { return (name, result) }
            if errno != EEXIST && errno != EINTR { throw Errno.current }
        }
        throw Errno(EEXIST)
    }
}

/// Working items a run holds while it lives, so that a later run can tell what a dead one
/// (`kill -9`, a power cut) left behind from what a live one is still writing
/// (docs/backup.md, "Working names").
///
/// The run holds an exclusive `flock` on its working file or folder as long as it lives;
/// the kernel drops it when the process dies, however it dies. Making the item and
/// locking it are one step under a shared `flock` on the folder that holds it, and a sweep
/// takes that folder's lock exclusively: so a sweep never sees an item made but not yet
/// locked. An item of another user is never touched.
extension StagingName {
    /// Makes a working file (`O_CREAT | O_EXCL`, mode `mode`, opened `O_RDWR`) or folder
    /// named as `create` names it, in `parentFD`, and returns its name and a descriptor of
    /// it holding the run's lock. The caller closes the descriptor when the item is renamed
    /// into place or removed.
    public static func createHeld(in parentFD: Int32, beside leaf: [UInt8], _ purpose: String,
                                  folder: Bool, mode: mode_t) throws(Errno) -> (name: [UInt8], fd: Int32) {
        // Bounded (`LockWait`): a sweep holds the folder only for a moment, but another
        // program holding it (a device folder, a backup folder) must not hang the command.
        if !LockWait.attempt(parentFD, LOCK_SH, within: LockWait.patience), errno == EWOULDBLOCK {
            throw Errno(EWOULDBLOCK)
        }  // a folder that cannot be locked otherwise: no sweep can either
        defer { flock(parentFD, LOCK_UN) }
        if !folder {
            let made = try create(beside: leaf, purpose) { openat(parentFD, $0, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode) }
            _ = flock(made.result, LOCK_EX)
            return (made.name, made.result)
        }
        let name = try create(beside: leaf, purpose) { mkdirat(parentFD, $0, mode) }.name
        do {
            let fd = try withCName(name) { (cname) throws(Errno) in
                try sys { openat(parentFD, cname, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
            }
            _ = flock(fd, LOCK_EX)
            return (name, fd)
        } catch {
            _ = withCName(name) { unlinkat(parentFD, $0, AT_REMOVEDIR) }
            throw error
        }
    }

    /// Whether `name` is a working name for `purpose` beside `leaf`.
    static func isWorkingName(_ name: [UInt8], beside leaf: [UInt8], _ purpose: String) -> Bool {
        let prefix = [UInt8(ascii: ".")] + leaf.prefix(leafLimit) + Array(".\(purpose)-".utf8)
        return name.count == prefix.count + 12 && name.starts(with: prefix) && name.suffix(12).allSatisfy(alphabet.contains)
    }

    /// Removes the working items for `purpose` beside `leaf` in `parentFD` that no live run
    /// holds and that belong to the user running this; returns their names. Best effort:
    /// if the folder's lock is taken, nothing is swept this time.
    @discardableResult
    public static func removeAbandoned(in parentFD: Int32, beside leaf: [UInt8], _ purpose: String) -> [[UInt8]] {
        guard flock(parentFD, LOCK_EX | LOCK_NB) == 0 else { return [] }
        defer { flock(parentFD, LOCK_UN) }
        let candidates = ((try? Directory.entries(of: parentFD)) ?? []).map(\.name).filter { isWorkingName($0, beside: leaf, purpose) }
        var removed: [[UInt8]] = []
        for name in candidates {
            let fd = withCName(name) { openat(parentFD, $0, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC) }
            guard fd >= 0 else { continue }
            var info = stat()
            let abandoned = fstat(fd, &info) == 0 && info.st_uid == geteuid()
                && (info.st_mode & S_IFMT == S_IFREG || info.st_mode & S_IFMT == S_IFDIR)
                && flock(fd, LOCK_EX | LOCK_NB) == 0
            close(fd)
            guard abandoned else { continue }
            removeTree(at: parentFD, name)
            removed.append(name)
        }
        return removed
    }
}
