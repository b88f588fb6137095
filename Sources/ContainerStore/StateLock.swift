import ContainerPolicy
import Glibc

/// An exclusive `flock` on a file in the state folder that names its holder: a pid, then a
/// mount point. The kernel drops the lock when the holder exits or is killed; the record
/// stays, so the next holder can see what a killed one left. `MountLock` and `RunLock`
/// are the two uses.
final class StateLock {
    private let fd: Int32

    /// Takes the lock on `name`; nil when another process holds it.
    init?(store: Store, name: [UInt8]) throws(UserError) {
        let fd = withCName(name) { openat(store.stateFD, $0, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600) }
        guard fd >= 0 else {
            throw UserError.failed("cannot open \(store.statePath)/\(ContainerPath.printable(name))", Errno.current)
        }
        // Its record is truncated and rewritten: never through a second name of another file.
        guard isSoleName(fd) else {
            close(fd)
            throw UserError("\(store.statePath)/\(ContainerPath.printable(name)) is not a plain file of the store (a FIFO, a device, or a file another name links to): remove it, it is made anew")
        }
        ownedLikeTheFolder(fd, store.stateFD)
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            close(fd)
            return nil
        }
        self.fd = fd
    }

    deinit { close(fd) }

    /// Records this process as the holder, with `mountpoint` (nil: none).
    func record(mountpoint: String?) {
        let contents = Array("\(getpid())\n\(mountpoint ?? "")\n".utf8)
        ftruncate(fd, 0)
        _ = contents.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
    }

    /// Whether some process holds the lock on `name` now.
    static func isHeld(_ store: Store, _ name: [UInt8]) -> Bool {
        // O_NONBLOCK: a lock file replaced by a FIFO must not block the open.
        let fd = withCName(name) { openat(store.stateFD, $0, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC) }
        guard fd >= 0 else { return false }
        defer { close(fd) }
        guard flock(fd, LOCK_SH | LOCK_NB) == 0 else { return true }
        flock(fd, LOCK_UN)
        return false
    }

    /// The pid and mount point last recorded in `name`, held or not.
    static func recorded(_ store: Store, _ name: [UInt8]) -> (pid: Int32, mountpoint: String?)? {
        guard let bytes = try? readFile(at: store.stateFD, name, limit: smallStateFileLimit) else { return nil }
        let lines = bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
        guard lines.count >= 2, let pid = Int32(String(decoding: lines[0], as: UTF8.self)) else { return nil }
        return (pid, lines[1].isEmpty ? nil : String(decoding: lines[1], as: UTF8.self))
    }
}
