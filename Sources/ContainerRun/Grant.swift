import CLinux
import ContainerStore
import Foundation
import Glibc

/// A host file or folder the program may open for one run (`run --grant PATH[:rw]`), as
/// iOS's document picker hands an app a security-scoped URL to a document outside its
/// container: visible inside at `/grants/NAME` (NAME: the last component of the path),
/// read-only unless `:rw`, gone with the sandbox.
public struct GrantRequest: Sendable, Equatable {
    /// The folder inside the sandbox that holds every grant.
    public static let folder = "/grants"

    /// The host path as given.
    public let path: String
    /// Whether the program may write it (`:rw`).
    public let writable: Bool

    /// `PATH`, `PATH:ro` or `PATH:rw`.
    public init(parsing item: String) {
        if item.hasSuffix(":rw") {
            path = String(item.dropLast(3))
            writable = true
        } else {
            path = item.hasSuffix(":ro") ? String(item.dropLast(3)) : item
            writable = false
        }
    }

    /// `path`, read-write when `writable`.
    public init(path: String, writable: Bool) {
        self.path = path
        self.writable = writable
    }
}

/// A grant opened for the run: the descriptor bubblewrap binds (`--ro-bind-fd` or
/// `--bind-fd`), so that what the program gets is the node that was checked, whatever
/// happens to the path afterwards.
final class OpenedGrant {
    /// The host path, absolute, with no symlink in it.
    let hostPath: String
    /// Where the program finds it: `/grants/NAME`.
    let insidePath: String
    let writable: Bool
    /// An `O_PATH` descriptor of the file or folder.
    let fd: Int32

    private init(hostPath: String, insidePath: String, writable: Bool, fd: Int32) {
        self.hostPath = hostPath
        self.insidePath = insidePath
        self.writable = writable
        self.fd = fd
    }

    deinit { close(fd) }

    /// Opens each grant, refusing with one line what cannot be granted: a path that does
    /// not exist, that is neither a regular file nor a folder, whose name is not UTF-8,
    /// that is the store, inside it or above it (the program would reach the store behind
    /// the container's rules), `/` or `/tmp` (where every run's mount is), or two grants
    /// with the same name.
    ///
    /// The path is resolved once (`realpath`), then opened from `/` with openat2 following
    /// no symlink at all: if anyone swaps a component for a symlink in between, the grant is
    /// refused rather than pointing elsewhere. The descriptor pins the node; bubblewrap
    /// binds it through `/proc/self/fd` and checks that its mount is that node.
    ///
    /// bubblewrap turns the descriptor back into a path, binds that, and aborts when the
    /// mount is not the descriptor's node: so for root's program, which bubblewrap sets up as
    /// `appUser`, every folder above a grant must be searchable by that user (checked here).
    static func open(_ requests: [GrantRequest], storePath: String, appUser: HostAppUser?) throws(UserError) -> [OpenedGrant] {
        var opened: [OpenedGrant] = []
        let store = resolved(storePath) ?? storePath
        let forbidden = ["/", resolved("/tmp") ?? "/tmp"]
        for request in requests {
            let option = "--grant \(request.path)\(request.writable ? ":rw" : "")"
            guard !request.path.isEmpty else { throw UserError.usage("\(option) names no path") }
            guard let host = resolved(request.path) else {
                throw UserError("cannot grant \(request.path): \(Errno.current)")
            }
            if forbidden.contains(host) {
                throw UserError(
                    "cannot grant \(host): every run's container is mounted below it; grant the file or folder the program needs")
            }
            if host == store || host.hasPrefix(store + "/") || store.hasPrefix(host + "/") {
                throw UserError(
                    "cannot grant \(host): it \(host == store ? "is" : host.hasPrefix(store + "/") ? "is inside" : "holds") the container's store, which the program reaches only through the container's rules"
                )
            }
            let name = String(host[host.index(after: host.lastIndex(of: "/") ?? host.startIndex)...])
            let inside = GrantRequest.folder + "/" + name
            if opened.contains(where: { $0.insidePath == inside }) {
                throw UserError.usage("two grants are named \(name) (\(inside)): grant one of them, or their common folder")
            }
            let root = Glibc.open("/", clinux_O_PATH | O_DIRECTORY | O_CLOEXEC)
            guard root >= 0 else { throw UserError("cannot grant \(host): /: \(Errno.current)") }
            let fd = clinux_open_beneath(root, String(host.dropFirst()), clinux_O_PATH | O_CLOEXEC, 0)
            let openError = Errno.current
            close(root)
            guard fd >= 0 else {
                throw UserError(
                    "cannot grant \(host): \(openError)\(openError.code == ELOOP || openError.code == EXDEV ? " (a component became a symlink while it was being granted)" : "")"
                )
            }
            var info = stat()
            guard fstat(fd, &info) == 0, [S_IFREG, S_IFDIR].contains(info.st_mode & S_IFMT) else {
                close(fd)
                throw UserError("cannot grant \(host): only a regular file or a folder can be granted")
            }
            if let appUser, let blocked = firstUnsearchableFolder(above: host, by: appUser) {
                close(fd)
                throw UserError(
                    "cannot grant \(host): root's program runs as \(HostAppUser.name), which cannot search \(blocked) to reach it; grant a path it can reach (chmod o+x the folders above, or run as the user who owns it)"
                )
            }
            opened.append(OpenedGrant(hostPath: host, insidePath: inside, writable: request.writable, fd: fd))
        }
        return opened
    }

    /// The first folder above `path` (absolute, no symlink) that `user` may not search by
    /// its mode bits (owner, its primary group — it has no other — or others), if any.
    private static func firstUnsearchableFolder(above path: String, by user: HostAppUser) -> String? {
        var folder = ""
        for component in path.split(separator: "/").dropLast() {
            folder += "/" + component
            var info = stat()
            guard stat(folder, &info) == 0 else { return folder }
            let bit: mode_t = info.st_uid == user.uid ? 0o100 : info.st_gid == user.gid ? 0o010 : 0o001
            if info.st_mode & bit == 0 { return folder }
        }
        return nil
    }

    /// `path` absolute with every symlink resolved, as UTF-8; nil (errno set) when it does
    /// not exist or its resolved name is not UTF-8 (EILSEQ).
    private static func resolved(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        let length = strlen(resolved)
        let bytes = UnsafeBufferPointer(start: UnsafeRawPointer(resolved).assumingMemoryBound(to: UInt8.self), count: length)
        guard let text = String(validating: bytes, as: UTF8.self) else {
            errno = EILSEQ
            return nil
        }
        return text
    }

    /// The line `run` prints when the sandbox starts: what the program may open, and how.
    var announcement: String {
        "granted \(hostPath) \(writable ? "read-write" : "read-only") at \(insidePath)"
    }

    /// Records the grant in the store's audit log: who (the caller) granted what, where, how.
    func record(in store: Store) {
        AuditLog.recordGrant(
            stateFD: store.stateFD, pid: getpid(), uid: getuid(), hostPath: hostPath, insidePath: insidePath,
            writable: writable)
    }
}
