import CLinux
import ContainerPolicy
import ContainerStore
import Foundation
import Glibc

/// The extended attribute that keeps a file or folder, and a folder's whole subtree, out
/// of backups (SPEC §4), as `NSURLIsExcludedFromBackupKey` does on iOS.
public enum BackupExclusion {
    /// `user.containerfs.exclude-from-backup`.
    public static let attributeName = "user.containerfs.exclude-from-backup"
    static let attributeBytes = Array(attributeName.utf8)

    /// Whether an attribute value excludes: any value other than `0` does.
    static func excludes(_ value: [UInt8]) -> Bool { value != [UInt8(ascii: "0")] }

    /// Whether `attributes` hold the exclusion attribute with an excluding value.
    static func excludes(_ attributes: [ExtendedAttribute]) -> Bool {
        attributes.contains { $0.name == attributeBytes && excludes($0.value) }
    }

    /// Excludes (`excluded` true) or includes again each path, named from outside: a path
    /// inside a store, or inside a mounted container (then set through the mount, where
    /// the container's rules apply). Returns one note per path that stays excluded
    /// because a folder above it is.
    public static func set(_ excluded: Bool, paths: [String]) throws(UserError) -> [String] {
        try set(excluded, rawPaths: paths.map { Array($0.utf8) })
    }

    /// As `set(_:paths:)`, with each path as the bytes given: names are bytes (SPEC §2),
    /// so a file an app named with bytes that are not UTF-8 can be named.
    public static func set(_ excluded: Bool, rawPaths: [[UInt8]]) throws(UserError) -> [String] {
        var notes: [String] = []
        // Every path found, and its change allowed, before any is changed: a bad one leaves
        // the store as it was (SPEC §9), also when the mount's rules or the permissions
        // refuse it (EACCES, EPERM) rather than it being missing.
        var targets: [ExclusionTarget] = []
        for rawPath in rawPaths { targets.append(try ExclusionTarget.resolve(rawPath)) }
        for target in targets { try target.checkChangeable() }
        for target in targets {
            try target.set(excluded)
            if !excluded, let folder = target.excludedAncestor() {
                notes.append("\(target.path) is included, but still not backed up: the folder \(folder) above it is excluded")
            }
        }
        return notes
    }
}

/// A path the user named for `exclude` / `include`, found in a store or a mount. Paths
/// are bytes throughout; `path` is the printable form for messages.
struct ExclusionTarget {
    /// How the attribute is reached.
    enum Access {
        /// Through a mount: a plain path, the daemon applies the container's rules.
        case mount(mountpoint: [UInt8])
        /// In a store, below its root: reached with `openat2` following no symlink.
        case store(root: [UInt8], relative: ContainerPath)
    }

    let path: String
    let raw: [UInt8]
    let absolute: [UInt8]
    let access: Access

    /// Finds the container holding `raw`; a path outside every container is an error.
    static func resolve(_ raw: [UInt8]) throws(UserError) -> ExclusionTarget {
        let path = ContainerPath.printable(raw)
        var info = stat()
        guard withCName(raw, { lstat($0, &info) }) == 0 else {
            throw UserError("cannot find \(path) (\(Errno.current)): name an existing file or folder of a container; nothing was changed")
        }
        let absolute = absolutePath(raw)
        // The innermost container mount holding the path wins.
        let mounts = MountEntry.all().filter { $0.isContainer && isBelow(absolute, Array($0.mountpoint.utf8)) }
        if let mount = mounts.max(by: { $0.mountpoint.utf8.count < $1.mountpoint.utf8.count }) {
            return ExclusionTarget(path: path, raw: raw, absolute: absolute, access: .mount(mountpoint: Array(mount.mountpoint.utf8)))
        }
        // The nearest folder at or above the path that is a store (holds .containerfs/format).
        let bytes = absolute
        var end = bytes.count
        while end > 0 {
            let root = end == 1 ? [UInt8(ascii: "/")] : Array(bytes[..<end])
            if isStore(root) {
                guard let relative = ContainerPath(bytes: bytes.dropFirst(end)) else { break }
                try checkBackedUpArea(relative, path: path)
                return ExclusionTarget(path: path, raw: raw, absolute: absolute, access: .store(root: root, relative: relative))
            }
            guard let slash = bytes[..<end].lastIndex(of: UInt8(ascii: "/")) else { break }
            end = slash == 0 && end > 1 ? 1 : slash
        }
        throw UserError("\(path) is not inside a container store or a mounted container: name a file or folder in one")
    }

    /// `raw` from the root: its folder resolved (symlinks, `.`, `..`), its last name kept
    /// as it is (the node itself, even a symlink).
    private static func absolutePath(_ raw: [UInt8]) -> [UInt8] {
        var bytes = raw
        while bytes.count > 1, bytes.last == UInt8(ascii: "/") { bytes.removeLast() }
        let slash = bytes.lastIndex(of: UInt8(ascii: "/"))
        var parent = slash.map { $0 == 0 ? [UInt8(ascii: "/")] : Array(bytes[..<$0]) } ?? [UInt8(ascii: ".")]
        var leaf = slash.map { Array(bytes[($0 + 1)...]) } ?? bytes
        // `.` and `..` name a folder: resolved whole.
        if leaf == [0x2E] || leaf == [0x2E, 0x2E] || leaf == [UInt8(ascii: "/")] { (parent, leaf) = (bytes, []) }
        guard let real = withCName(parent, { realpath($0, nil) }) else { return bytes }
        defer { free(real) }
        let base = Array(UnsafeRawBufferPointer(start: real, count: strlen(real)))
        if leaf.isEmpty { return base }
        return (base == [UInt8(ascii: "/")] ? [] : base) + [UInt8(ascii: "/")] + leaf
    }

    private static func isBelow(_ path: [UInt8], _ folder: [UInt8]) -> Bool {
        path == folder || path.starts(with: folder == [UInt8(ascii: "/")] ? folder : folder + [UInt8(ascii: "/")])
    }

    private static func isStore(_ candidate: [UInt8]) -> Bool {
        var info = stat()
        return withCName(candidate + Array("/.containerfs/format".utf8), { lstat($0, &info) }) == 0 && info.st_mode & S_IFMT == S_IFREG
    }

    /// Only what a backup could hold can be excluded: `Documents/` and `Library/` but
    /// not `Library/Caches/`.
    private static func checkBackedUpArea(_ relative: ContainerPath, path: String) throws(UserError) {
        guard let first = relative.components.first,
              first == Array("Documents".utf8) || first == Array("Library".utf8) else {
            throw UserError("\(path) is not in Documents/ or Library/ of its container, which are all that is backed up: nothing to exclude or include")
        }
        if relative.components.count >= 2, first == Array("Library".utf8), relative.components[1] == Array("Caches".utf8) {
            throw UserError("\(path) is in Library/Caches/, which is never backed up: nothing to exclude or include")
        }
    }

    /// Sets or removes the attribute.
    func set(_ excluded: Bool) throws(UserError) {
        do {
            try withNode { (procPath) throws(Errno) in
                if excluded {
                    try sys { lsetxattr(procPath, BackupExclusion.attributeName, "1", 1, 0) }
                } else if lremovexattr(procPath, BackupExclusion.attributeName) != 0, errno != ENODATA {
                    throw Errno.current
                }
            }
        } catch {
            throw refusal(error, changed: "")
        }
    }

    /// Refuses, changing nothing, a path whose attribute could not be changed
    /// (`attributeChangeRefusal`): through a mount the container's rules answer too, so
    /// `exclude A B` with B in the Inbox changes neither.
    func checkChangeable() throws(UserError) {
        do {
            try withNode { (procPath) throws(Errno) in
                let name = BackupExclusion.attributeName
                if let refusal = attributeChangeRefusal(present: { lgetxattr(procPath, name, nil, 0) },
                                                        probe: { lsetxattr(procPath, name, "1", 1, $0) }) { throw refusal }
            }
        } catch {
            throw refusal(error, changed: "; nothing was changed")
        }
    }

    /// The one line for a change refused with `error`; `changed` says what that left.
    private func refusal(_ error: Errno, changed: String) -> UserError {
        switch error.code {
        case EPERM where isSymlink:
            return UserError("\(path) is a symlink, which cannot carry the attribute on Linux: exclude the folder holding it or its target\(changed)")
        case EPERM, EACCES:
            return UserError("cannot change \(path): \(error) (the container's rules, or this user's permissions, do not allow it)\(changed): leave it out, or name a file or folder the app may change")
        case ENOTSUP:
            return UserError("cannot change \(path): its filesystem does not support user extended attributes\(changed): keep the store on one that does (ext4, xfs, btrfs, tmpfs)")
        default:
            return UserError("cannot change \(path): \(error)\(changed)\(error.advice.map { ": \($0)" } ?? "")")
        }
    }

    private var isSymlink: Bool {
        var info = stat()
        return withCName(raw, { lstat($0, &info) }) == 0 && info.st_mode & S_IFMT == S_IFLNK
    }

    /// Runs `body` with a path naming the node that follows no symlink: the plain path
    /// through a mount, or `/proc/self/fd/N/NAME` with N its parent, opened in the store
    /// with openat2 refusing every symlink.
    private func withNode(_ body: (UnsafePointer<CChar>) throws(Errno) -> Void) throws(Errno) {
        switch access {
        case .mount:
            try withCName(absolute) { (path) throws(Errno) in try body(path) }
        case .store(let root, let relative):
            let rootFD = withCName(root) { Glibc.open($0, clinux_O_PATH | O_DIRECTORY | O_CLOEXEC) }
            guard rootFD >= 0 else { throw Errno.current }
            defer { close(rootFD) }
            let parent = ContainerPath(components: Array(relative.components.dropLast()))
            let parentFD = try withCName(parent.bytes.isEmpty ? [0x2E] : parent.bytes) { (name) throws(Errno) in
                try sys { clinux_open_beneath(rootFD, name, clinux_O_PATH | O_DIRECTORY | O_CLOEXEC, 0) }
            }
            defer { close(parentFD) }
            var procPath: [UInt8] = Array("/proc/self/fd/\(parentFD)/".utf8)
            procPath.append(contentsOf: relative.components.last!)
            try withCName(procPath) { (procPath) throws(Errno) in
                try body(procPath)
            }
        }
    }

    /// The nearest folder above the path (inside the container) that is excluded.
    func excludedAncestor() -> String? {
        let stop: [UInt8]
        switch access {
        case .mount(let mountpoint): stop = mountpoint
        case .store(let root, _): stop = root
        }
        var folder = absolute
        while let slash = folder.lastIndex(of: UInt8(ascii: "/")) {
            folder = Array(folder[..<slash])
            guard folder.count > stop.count else { return nil }
            var value = [UInt8](repeating: 0, count: 256)
            let count = value.withUnsafeMutableBytes { buffer in
                withCName(folder) { lgetxattr($0, BackupExclusion.attributeName, buffer.baseAddress, buffer.count) }
            }
            if count >= 0, BackupExclusion.excludes(Array(value[0..<count])) { return ContainerPath.printable(folder) }
        }
        return nil
    }
}

/// One extended attribute of a node: its name and raw value.
struct ExtendedAttribute: Equatable, Sendable {
    let name: [UInt8]
    let value: [UInt8]
}

/// Reading a node's `user.*` extended attributes, the only ones a backup keeps.
enum ExtendedAttributes {
    /// The `user.*` attributes of the node open at `fd` (not an `O_PATH` descriptor).
    static func user(of fd: Int32) throws(Errno) -> [ExtendedAttribute] {
        try read(
            list: { flistxattr(fd, $0, $1) },
            get: { fgetxattr(fd, $0, $1, $2) })
    }

    /// The `user.*` attributes of the entry `name` in the directory open at `directoryFD`,
    /// the entry itself even if it is a symlink.
    static func user(at directoryFD: Int32, _ name: [UInt8]) throws(Errno) -> [ExtendedAttribute] {
        var procPath: [UInt8] = Array("/proc/self/fd/\(directoryFD)/".utf8)
        procPath.append(contentsOf: name)
        return try withCName(procPath) { (path) throws(Errno) in
            try read(
                list: { llistxattr(path, $0, $1) },
                get: { lgetxattr(path, $0, $1, $2) })
        }
    }

    private static func read(
        list: (UnsafeMutablePointer<CChar>?, Int) -> Int,
        get: (UnsafePointer<CChar>, UnsafeMutableRawPointer?, Int) -> Int
    ) throws(Errno) -> [ExtendedAttribute] {
        var names = [CChar](repeating: 0, count: 1024)
        var length: Int
        while true {
            length = names.withUnsafeMutableBufferPointer { list($0.baseAddress, $0.count) }
            if length >= 0 { break }
            switch errno {
            case ERANGE: names = [CChar](repeating: 0, count: max(names.count * 4, list(nil, 0)))
            case ENOTSUP, EPERM: return []
            case EINTR: continue
            default: throw Errno.current
            }
        }
        var result: [ExtendedAttribute] = []
        let prefix = Array("user.".utf8)
        for raw in names[0..<length].split(separator: 0) {
            let name = raw.map { UInt8(bitPattern: $0) }
            guard name.starts(with: prefix) else { continue }
            var value = [UInt8](repeating: 0, count: 256)
            while true {
                let count = withCName(name) { cname in value.withUnsafeMutableBytes { get(cname, $0.baseAddress, $0.count) } }
                if count >= 0 {
                    result.append(ExtendedAttribute(name: name, value: Array(value[0..<count])))
                    break
                }
                if errno == ERANGE {
                    value = [UInt8](repeating: 0, count: max(value.count * 4, withCName(name) { get($0, nil, 0) }))
                    continue
                }
                if errno == ENODATA { break }  // removed since it was listed
                if errno == EINTR { continue }
                throw Errno.current
            }
        }
        return result
    }
}
