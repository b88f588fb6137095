import CLinux
import ContainerPolicy
import ContainerStore
import Glibc

/// One item of a container's backup set.
public struct BackupItem: Sendable {
    /// What the item is.
    public enum Kind: String, Sendable {
        case directory, file, symlink
    }

    /// Its path in the container.
    public let path: ContainerPath
    public let kind: Kind
    /// A file's size when the set was made (0 for the rest).
    public let size: Int64
    /// For a file with other names earlier in the set: the first of them.
    public let hardLinkTarget: ContainerPath?
    /// A symlink's target.
    public let symlinkTarget: [UInt8]?
    /// What its archive header needs of its `stat` when the set was made.
    let info: ItemStat
    /// Its `user.*` extended attributes.
    let attributes: [ExtendedAttribute]
}

/// A container's backup set (SPEC §4): `Documents/` (the inbox included) and `Library/`
/// except `Library/Caches/`, minus what the exclusion attribute excludes; never the
/// bundle, `tmp/` or the state folder. Found by walking the store through descriptors
/// opened with `O_NOFOLLOW`: a symlink is an item, never a way elsewhere.
public struct BackupSet: Sendable {
    /// The items, each folder before what it holds, names in byte order.
    public private(set) var items: [BackupItem] = []
    /// Excluded files and folders (a folder stands for its subtree).
    public private(set) var excluded: [(path: ContainerPath, kind: BackupItem.Kind)] = []
    /// Sockets and FIFOs, which a backup cannot hold.
    public private(set) var skipped: [ContainerPath] = []
    /// The bytes of the files (each hard-linked file once): apparent sizes, as `ls -l`.
    public private(set) var totalBytes: Int64 = 0
    /// What the files' data will take in an archive, guessed before any is read: a file
    /// counts its size, but one with fewer blocks than its size (a sparse file, whose holes
    /// an archive does not hold; or one a file system compresses) at most four times its
    /// blocks (compression rarely passes that). Sizes an object store's parts.
    public private(set) var dataEstimate: Int64 = 0

    /// The store's backup set now.
    public static func scan(_ store: Store) throws(UserError) -> BackupSet {
        var set = BackupSet()
        var seen: [InodeIdentity: ContainerPath] = [:]
        do {
            // A group's set starts at its root, which its members write (docs/groups.md):
            // everything but the state folder and Library/Caches; the root itself is no item.
            if store.layout.isGroup {
                let fd = try sys { openat(store.rootFD, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
                defer { close(fd) }
                try set.walk(fd, path: ContainerPath(components: []), location: .root, layout: store.layout, seen: &seen)
                set.items.removeAll { $0.path.components.isEmpty }
                return set
            }
            for directory in [StandardDirectory.documents, .library] {
                let name = directory.path.bytes
                let fd = try withCName(name) { (cname) throws(Errno) in
                    try sys { openat(store.rootFD, cname, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
                }
                defer { close(fd) }
                try set.walk(fd, path: directory.path, location: .standard(directory), layout: store.layout, seen: &seen)
            }
        } catch {
            throw UserError.failed("cannot read the backup set of \(store.path)", error)
        }
        return set
    }

    /// Adds the directory open at `fd` and, unless excluded, what it holds.
    ///
    /// Iterative, on a `FolderChain`: a chain of folders of any depth neither overflows the
    /// thread's stack nor runs out of descriptors. Folders are visited before what they
    /// hold, names in byte order.
    private mutating func walk(_ fd: Int32, path: ContainerPath, location: Location, layout: ContainerLayout, seen: inout [InodeIdentity: ContainerPath]) throws(Errno) {
        let chain = try FolderChain(top: fd)
        // Each level: its path and location, and the names still to visit, last first.
        var stack: [(path: ContainerPath, location: Location, names: [[UInt8]])] = []
        if let names = try enter(fd, path: path) { stack.append((path, location, names)) }
        // The top level is popped in place: a copy of it (`stack.last`) would make each
        // removal copy its names, quadratic in a folder.
        while !stack.isEmpty {
            guard let name = stack[stack.count - 1].names.popLast() else {
                stack.removeLast()
                if !stack.isEmpty { try chain.leave() }
                continue
            }
            let level = (path: stack[stack.count - 1].path, location: stack[stack.count - 1].location)
            let fd = chain.fd
            let childLocation = layout.child(name, of: level.location)
            switch childLocation {
            case .standard(.caches), .hidden, .bundle, .foreign, .root: continue
            case .standard, .inside: break
            }
            if case .inside(let area) = childLocation, area != .data, area != .inbox { continue }
            let childPath = level.path.appending(name)
            var childInfo = stat()
            let found = withCName(name) { fstatat(fd, $0, &childInfo, AT_SYMLINK_NOFOLLOW) }
            guard found == 0 else {
                if errno == ENOENT { continue }  // deleted while we walk: not in the set
                throw Errno.current
            }
            switch childInfo.st_mode & S_IFMT {
            case S_IFDIR:
                do {
                    try chain.enter(name)
                } catch where [ENOENT, ENOTDIR, ELOOP].contains(error.code) {
                    continue  // replaced while we walk
                }
                guard let names = try enter(chain.fd, path: childPath) else {
                    try chain.leave()
                    continue
                }
                stack.append((childPath, childLocation, names))
            case S_IFREG:
                let childAttributes: [ExtendedAttribute]
                do {
                    childAttributes = try ExtendedAttributes.user(at: fd, name)
                } catch where error.code == ENOENT {
                    continue  // deleted or moved since its stat: not in the set
                }
                if BackupExclusion.excludes(childAttributes) {
                    excluded.append((childPath, .file))
                    continue
                }
                var target: ContainerPath? = nil
                if childInfo.st_nlink > 1 {
                    let identity = InodeIdentity(childInfo)
                    target = seen[identity]
                    if target == nil { seen[identity] = childPath }
                }
                // Held at Int64.max: sparse files can claim more than that between them.
                if target == nil {
                    totalBytes = totalBytes.addingSaturated(Int64(childInfo.st_size))
                    let blocks = Int64(childInfo.st_blocks).multipliedReportingOverflow(by: 512 * 4)
                    let data = blocks.overflow ? Int64(childInfo.st_size) : min(Int64(childInfo.st_size), blocks.partialValue + 4096)
                    dataEstimate = dataEstimate.addingSaturated(data)
                }
                items.append(BackupItem(path: childPath, kind: .file, size: Int64(childInfo.st_size), hardLinkTarget: target,
                                        symlinkTarget: nil, info: ItemStat(childInfo), attributes: childAttributes))
            case S_IFLNK:
                let target: [UInt8]
                do { target = try readLink(at: fd, name) } catch where error.code == ENOENT || error.code == EINVAL { continue }
                // Linux keeps no user.* attributes on symlinks: only a folder can exclude one.
                items.append(BackupItem(path: childPath, kind: .symlink, size: 0, hardLinkTarget: nil,
                                        symlinkTarget: target, info: ItemStat(childInfo), attributes: []))
            default:
                skipped.append(childPath)
            }
        }
    }

    /// Adds the directory open at `fd` as an item and returns the names it holds, last
    /// first; nil if the exclusion attribute excludes it (then it is listed as excluded).
    private mutating func enter(_ fd: Int32, path: ContainerPath) throws(Errno) -> [[UInt8]]? {
        var info = stat()
        try sys { fstat(fd, &info) }
        let attributes = try ExtendedAttributes.user(of: fd)
        if BackupExclusion.excludes(attributes) {
            excluded.append((path, .directory))
            return nil
        }
        items.append(BackupItem(path: path, kind: .directory, size: 0, hardLinkTarget: nil, symlinkTarget: nil, info: ItemStat(info), attributes: attributes))
        return try Directory.entries(of: fd).map(\.name).sorted { $1.lexicographicallyPrecedes($0) }
    }
}

/// What a backup needs of an item's `stat`: a third of its size, for it is kept for every
/// item of the set.
struct ItemStat: Sendable {
    let mode: mode_t
    let uid: uid_t
    let gid: gid_t
    let links: UInt64
    let modified: timespec
    let accessed: timespec
    let identity: InodeIdentity

    init(_ info: stat) {
        mode = info.st_mode
        uid = info.st_uid
        gid = info.st_gid
        links = UInt64(info.st_nlink)
        modified = info.st_mtim
        accessed = info.st_atim
        identity = InodeIdentity(info)
    }
}

/// A file's identity on its filesystem, to find its other names (hard links).
struct InodeIdentity: Hashable, Sendable {
    let device: UInt64
    let inode: UInt64

    init(_ info: stat) {
        device = UInt64(info.st_dev)
        inode = UInt64(info.st_ino)
    }
}
