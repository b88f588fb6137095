import CLinux
import ContainerPolicy
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
    ///
    /// The store, `/` and `/tmp` are compared by device and inode, walking up from the
    /// descriptors (NodeAncestry): a bind mount shows a folder at another path. A folder
    /// with a mount beneath it is refused: bubblewrap's bind would show that mount too.
    static func open(_ requests: [GrantRequest], store: Store, appUser: HostAppUser?) throws(UserError) -> [OpenedGrant] {
        var opened: [OpenedGrant] = []
        let mounts = NodeAncestry.mounts()
        for request in requests {
            let option = "--grant \(request.path)\(request.writable ? ":rw" : "")"
            guard !request.path.isEmpty else { throw UserError.usage("\(option) names no path") }
            guard let host = resolved(request.path) else {
                let error = Errno.current
                throw UserError("cannot grant \(request.path) (\(error)): \(error.advice(whenMissing: "name an existing host file or folder with --grant"))")
            }
            let name = String(host[host.index(after: host.lastIndex(of: "/") ?? host.startIndex)...])
            let inside = GrantRequest.folder + "/" + name
            if opened.contains(where: { $0.insidePath == inside }) {
                throw UserError.usage("two grants are named \(name) (\(inside)): grant one of them, or their common folder")
            }
            let root = Glibc.open("/", clinux_O_PATH | O_DIRECTORY | O_CLOEXEC)
            guard root >= 0 else { throw UserError.failed("cannot grant \(host): /", Errno.current) }
            // `/` itself is refused below, by its node: openat2 opens no empty path.
            let fd = host == "/" ? fcntl(root, F_DUPFD_CLOEXEC, 0) : clinux_open_beneath(root, String(host.dropFirst()), clinux_O_PATH | O_CLOEXEC, 0)
            let openError = Errno.current
            close(root)
            guard fd >= 0 else {
                if openError.code == ELOOP || openError.code == EXDEV {
                    throw UserError("cannot grant \(host): \(openError) (a component became a symlink while it was being granted): name the real path, and try again")
                }
                throw UserError.failed("cannot grant \(host)", openError)
            }
            var info = stat()
            guard fstat(fd, &info) == 0, [S_IFREG, S_IFDIR].contains(info.st_mode & S_IFMT) else {
                close(fd)
                throw UserError("cannot grant \(host): only a regular file or a folder can be granted")
            }
            do throws(UserError) {
                try checkPlace(fd, host: host, isFolder: info.st_mode & S_IFMT == S_IFDIR, store: store, mounts: mounts)
            } catch {
                close(fd)
                throw error
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

    /// Refuses the grant `fd` (at `host`) when it is `/` or `/tmp`, the store, inside it or
    /// above it, by device and inode; or a folder with a mount beneath it.
    private static func checkPlace(_ fd: Int32, host: String, isFolder: Bool, store: Store, mounts: [NodeAncestry.Mount]) throws(UserError) {
        guard let grant = NodeAncestry.node(fd), let storeRoot = NodeAncestry.node(store.rootFD) else {
            throw UserError.failed("cannot grant \(host)", Errno.current)
        }
        for forbidden in ["/", "/tmp"] {
            let other = NodeAncestry.openPath(Array(forbidden.utf8), flags: 0)
            defer { if other >= 0 { close(other) } }
            if other >= 0, NodeAncestry.node(other) == grant {
                throw UserError("cannot grant \(host): every run's container is mounted below it; grant the file or folder the program needs")
            }
        }
        func refuse(_ relation: String) -> UserError {
            UserError("cannot grant \(host): it \(relation) the container's store, which the program reaches only through the container's rules")
        }
        if grant == storeRoot { throw refuse("is") }
        if isFolder, NodeAncestry.isAtOrAbove(grant, openat(store.rootFD, ".", clinux_O_PATH | O_DIRECTORY | O_CLOEXEC), mounts: mounts) {
            throw refuse("holds")
        }
        // A file is inside the store when its folder is.
        let folder = isFolder ? openat(fd, ".", clinux_O_PATH | O_DIRECTORY | O_CLOEXEC)
            : NodeAncestry.openPath(Array(Directory.holding(host).utf8))
        // A file bound over another (its own mount) may be any file, the store's too: its folder tells nothing.
        if !isFolder, folder >= 0, NodeAncestry.mountID(fd) != NodeAncestry.mountID(folder) {
            close(folder)
            throw UserError("cannot grant \(host): it is a mount point itself (another file bound there), which could be any file of the host; grant the file itself")
        }
        if folder >= 0, NodeAncestry.isAtOrAbove(storeRoot, folder, mounts: mounts) { throw refuse("is inside") }
        if isFolder, let mountpoint = NodeAncestry.mountBeneath(fd, mounts: mounts) {
            throw UserError("cannot grant \(host): \(ContainerPath.printable(mountpoint)) is a mount point beneath it, which the program would reach through the grant; grant a folder with no mount below it")
        }
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
