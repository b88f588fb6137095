import CLinux
import ContainerPolicy
import ContainerStore
import Glibc
import Synchronization

// Tags (SPEC §3). A tag is not a record kept beside the file: it is the file's place.
//
// - tagged: a regular file below `Library/Caches` (cache) or `tmp` (temporary) of the
//   store. A rename into or out of those folders tags or untags the file, a folder's whole
//   subtree with it, because the tag is where the file is, not something to update;
// - size: the file's size;
// - last use: the latest of the use the daemon recorded for the file (`UseTable`: when a
//   program opened or created it, closed it after holding it over a second, or set its
//   times) and the file's own access and modification times, in nanoseconds. Uses a few
//   milliseconds apart are ordered; nothing in the tree changes when a file is used.
//
// Nothing can be lost or invented by a crash: after `kill -9` the store holds the files,
// and the use table lives in the page cache. What a crash can leave stale is only the
// *index* below, a snapshot purge reads instead of walking the stores; it says which
// mount it belongs to and is not trusted otherwise.

/// What a tagged file is: a cache file or a temporary one.
public enum TagKind: UInt8, Sendable, CaseIterable {
    /// Below `Library/Caches`: purged when space is needed.
    case cache = 1
    /// Below `tmp`: purged when the app is not running.
    case temporary = 2

    /// The standard directory holding files of this kind.
    public var directory: StandardDirectory { self == .cache ? .caches : .tmp }

    /// `cache` or `temporary`, as printed.
    public var name: String { self == .cache ? "cache" : "temporary" }
}

/// A tagged file: where it is, how big, when last used.
public struct Tag: Sendable, Equatable {
    public var kind: TagKind
    /// The path relative to the store's root, as bytes (`Library/Caches/a/b.dat`).
    public var path: [UInt8]
    /// The file's size in bytes.
    public var size: Int64
    /// Nanoseconds since the epoch: the later of the store file's atime and mtime.
    public var lastUse: Int64
    /// The store file's inode number, to check a victim is still the file the index saw.
    public var inode: UInt64

    public init(kind: TagKind, path: [UInt8], size: Int64, lastUse: Int64, inode: UInt64) {
        self.kind = kind
        self.path = path
        self.size = size
        self.lastUse = lastUse
        self.inode = inode
    }

    /// The tag of the regular file described by `info`, last used at `recorded` or later.
    /// Times past 2262 (which a program may set) count as the latest time there is.
    init(kind: TagKind, path: [UInt8], _ info: stat, recorded: Int64) {
        let access = Int64(saturatingNanoseconds: info.st_atim)
        let modification = Int64(saturatingNanoseconds: info.st_mtim)
        self.init(kind: kind, path: path, size: Int64(info.st_size), lastUse: max(recorded, access, modification), inode: UInt64(info.st_ino))
    }

    /// The path as a `ContainerPath`.
    public var containerPath: ContainerPath { ContainerPath(bytes: path) ?? .root }
}

public enum Tags {
    /// Every tagged file of `kinds` in the store, by walking `Library/Caches` and `tmp`
    /// (never following a symlink, never leaving those folders).
    public static func scan(_ store: Store, kinds: [TagKind] = TagKind.allCases) -> [Tag] {
        walk(store, kinds: kinds).tags
    }

    /// As `scan`, with every folder walked (those folders themselves included), for the index.
    static func walk(_ store: Store, kinds: [TagKind] = TagKind.allCases) -> TagIndex.Snapshot {
        let uses = UseTable.openForReading(store)
        var snapshot = TagIndex.Snapshot(tags: [], folders: [])
        for kind in kinds {
            let top = kind.directory.path.bytes
            guard let fd = try? withCName(top, { (name) throws(Errno) in
                try sys { openat(store.rootFD, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
            }) else {
                // Stamped all the same, so that opening or making it later is seen.
                snapshot.folders.append(TagIndex.stamp(store, top) ?? TagIndex.absent(top))
                continue
            }
            let folder = { (path: [UInt8], info: stat) in snapshot.folders.append(TagIndex.folderStamp(path, info)) }
            StoreWalk.regularFiles(in: fd, relative: top, skippingAtTop: [ContainerLayout.cacheTagName], folders: folder) { path, info in
                snapshot.tags.append(Tag(kind: kind, path: path, info, recorded: uses?.lastUse(inode: UInt64(info.st_ino)) ?? 0))
            }
        }
        return snapshot
    }

    /// Whether `path` (from an index, so not trusted) names a file a tag of `kind` may
    /// name: strictly below the kind's folder, no empty, `.` or `..` component, not the
    /// folder's `CACHEDIR.TAG`.
    static func isTaggable(_ path: [UInt8], kind: TagKind) -> Bool {
        let top = kind.directory.path.components
        let parts = path.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false)
        guard parts.count > top.count, isBelow(parts, top) else { return false }
        return !(parts.count == top.count + 1 && parts.last!.elementsEqual(ContainerLayout.cacheTagName))
    }

    /// Whether `path` (from an index) names a folder the index may stamp: the folder of a
    /// kind or one below it, no empty, `.` or `..` component.
    static func isTaggedFolder(_ path: [UInt8]) -> Bool {
        let parts = path.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false)
        return TagKind.allCases.contains { kind in
            let top = kind.directory.path.components
            return parts.count >= top.count && isBelow(parts, top)
        }
    }

    /// `parts` start with `top` and have no empty, `.` or `..` component after it.
    private static func isBelow(_ parts: [ArraySlice<UInt8>], _ top: [[UInt8]]) -> Bool {
        guard zip(parts, top).allSatisfy({ $0.elementsEqual($1) }) else { return false }
        return !parts.dropFirst(top.count).contains { $0.isEmpty || $0.elementsEqual([0x2E]) || $0.elementsEqual([0x2E, 0x2E]) }
    }
}

/// Walks a store folder through descriptors, never following a symlink.
enum StoreWalk {
    /// Calls `body` with the path (`relative` + `/` + names) and `stat` of every regular
    /// file below the directory open at `fd` (which it closes), and `folders` with the path
    /// of that directory and of every folder it meets below (those it cannot enter too).
    /// `skippingAtTop` is a name ignored directly in that directory.
    ///
    /// Iterative, on a `FolderChain`: a chain of folders of any depth neither overflows
    /// the thread's stack nor runs out of descriptors. The path is one buffer that grows
    /// and shrinks with the levels, so a deep chain costs memory in its depth, not its square.
    static func regularFiles(in fd: Int32, relative: [UInt8], skippingAtTop skipped: [[UInt8]] = [],
                             folders: ([UInt8], stat) -> Void = { _, _ in }, _ body: ([UInt8], stat) -> Void) {
        defer { close(fd) }
        var top = stat()
        if fstat(fd, &top) == 0 { folders(relative, top) }
        guard let chain = try? FolderChain(top: fd) else { return }
        // Last first, so that they are visited in the directory's order.
        func entries(_ fd: Int32) -> [(name: [UInt8], type: UInt8)] {
            ((try? Directory.entries(of: fd)) ?? []).filter { $0.type == DT_REG || $0.type == DT_DIR || $0.type == DT_UNKNOWN }.reversed()
        }
        // Each level: the entries still to visit, and the length of `path` that names it.
        var levels: [(entries: [(name: [UInt8], type: UInt8)], pathLength: Int)] = [(entries(fd).filter { !skipped.contains($0.name) }, relative.count)]
        var path = relative
        // The top level is popped in place: a copy of it (`levels.last`) would make each
        // removal copy its entries, quadratic in a folder.
        while !levels.isEmpty {
            guard let entry = levels[levels.count - 1].entries.popLast() else {
                levels.removeLast()
                if levels.isEmpty || (try? chain.leave()) == nil { break }
                continue
            }
            var info = stat()
            guard withCName(entry.name, { fstatat(chain.fd, $0, &info, AT_SYMLINK_NOFOLLOW) }) == 0 else { continue }
            path.removeSubrange(levels[levels.count - 1].pathLength...)
            path.append(UInt8(ascii: "/"))
            path.append(contentsOf: entry.name)
            switch info.st_mode & S_IFMT {
            case S_IFREG:
                body(path, info)
            case S_IFDIR:
                // Even one it cannot enter (mode 000 to an ordinary user): opened later and
                // given files, its ctime is all that tells, its parent's stays.
                folders(path, info)
                if (try? chain.enter(entry.name)) != nil { levels.append((entries(chain.fd), path.count)) }
            default:
                continue
            }
        }
    }
}

/// The tag index: a snapshot of a store's tags in its state folder (`.containerfs/tags`),
/// so that purge chooses victims without walking the stores.
///
/// The daemon writes it when a mount ends (after emptying `tmp`), and purge rewrites it
/// after deleting. It records the identity of `mount.lock` (inode and ctime), which every
/// mount rewrites: an index written before the store's latest mount (a daemon killed
/// before it could write one, a purge racing a mount) no longer matches and is not
/// trusted; nor is any index while the store is mounted. It also records the inode and
/// ctime of every folder of `Library/Caches` and `tmp` (those two included): a file put
/// into one of them behind containerfs's back, or a folder made or removed there, changes
/// its folder's ctime, and the index is not trusted either (SPEC §10: every file there is
/// a candidate, however it got there). Then purge walks the store and writes a fresh one:
/// that walk is the reconciliation. Checking costs a `stat` per folder, not per file.
///
/// Format (native byte order): `CFSTAGS2`, the lock identity (3 × 8 bytes), the folder
/// count (8 bytes), per folder: inode, ctime seconds and nanoseconds (8 bytes each), path
/// length (4 bytes) and path bytes; then the tag count (8 bytes), per tag: last use, size,
/// inode (8 bytes each), kind (1 byte), path length (4 bytes) and path bytes. An index of
/// an older format is not trusted (the next purge walks and rewrites it).
public enum TagIndex {
    static let fileName = Array(name: "tags")
    static let magic = Array("CFSTAGS2".utf8)

    /// What an index holds: the tags, and the folders whose stamps vouch for them.
    struct Snapshot {
        var tags: [Tag]
        var folders: [FolderStamp]
    }

    /// A folder as the index saw it: its path from the store's root, inode and ctime.
    struct FolderStamp: Equatable {
        var path: [UInt8]
        var inode: UInt64
        var seconds: Int64
        var nanoseconds: Int64
    }

    /// Stamp `path` had as `info` was taken (during a walk, before its entries were read).
    static func folderStamp(_ path: [UInt8], _ info: stat) -> FolderStamp {
        FolderStamp(path: path, inode: UInt64(info.st_ino), seconds: Int64(info.st_ctim.tv_sec), nanoseconds: Int64(info.st_ctim.tv_nsec))
    }

    /// Every folder above the files at `paths` (from the store's root): those a removal changed.
    static func ancestors(of paths: [[UInt8]]) -> Set<[UInt8]> {
        var folders = Set<[UInt8]>()
        for path in paths {
            for (index, byte) in path.enumerated() where byte == UInt8(ascii: "/") { folders.insert(Array(path[..<index])) }
        }
        return folders
    }

    /// The folder at `path` below the store's root now (no symlink followed); nil if gone.
    static func stamp(_ store: Store, _ path: [UInt8]) -> FolderStamp? {
        let fd = withCName(path) { clinux_open_beneath(store.rootFD, $0, clinux_O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0) }
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { return nil }
        return FolderStamp(path: path, inode: UInt64(info.st_ino), seconds: Int64(info.st_ctim.tv_sec), nanoseconds: Int64(info.st_ctim.tv_nsec))
    }

    /// The stamp of a folder of a kind that is missing (a group container has no `tmp/`):
    /// inode 0, which no folder has, so that one made later is seen.
    static func absent(_ path: [UInt8]) -> FolderStamp {
        FolderStamp(path: path, inode: 0, seconds: 0, nanoseconds: 0)
    }

    /// The identity of the store's latest mount: `mount.lock`'s inode and ctime (zeros if
    /// the store was never mounted).
    struct MountIdentity: Equatable {
        var inode: UInt64
        var seconds: Int64
        var nanoseconds: Int64
    }

    static func mountIdentity(_ store: Store) -> MountIdentity {
        var info = stat()
        guard withCName(MountLock.fileName, { fstatat(store.stateFD, $0, &info, AT_SYMLINK_NOFOLLOW) }) == 0 else {
            return MountIdentity(inode: 0, seconds: 0, nanoseconds: 0)
        }
        return MountIdentity(inode: UInt64(info.st_ino), seconds: Int64(info.st_ctim.tv_sec), nanoseconds: Int64(info.st_ctim.tv_nsec))
    }

    /// The store's tags from its index, or nil when there is no index it can trust: none,
    /// another mount's, or one of its folders changed since.
    static func load(_ store: Store) -> Snapshot? {
        guard MountLock.holder(store) == nil, let bytes = try? readFile(at: store.stateFD, fileName) else { return nil }
        return bytes.withUnsafeBytes { raw -> Snapshot? in
            guard let (identity, folders, tags) = decode(raw), identity == mountIdentity(store),
                  folders.allSatisfy({ (stamp(store, $0.path) ?? absent($0.path)) == $0 }) else { return nil }
            return Snapshot(tags: tags, folders: folders)
        }
    }

    /// Walks the store and writes a fresh index; returns the tags. The daemon calls it at
    /// the end of a mount, while it still holds the mount lock.
    @discardableResult
    public static func rebuild(_ store: Store) -> [Tag] {
        let identity = mountIdentity(store)
        let snapshot = Tags.walk(store)
        write(store, snapshot.tags, folders: snapshot.folders, identity: identity)
        return snapshot.tags
    }

    /// The folders of the kinds themselves: all an index of tags from elsewhere can vouch for.
    static var topFolders: [[UInt8]] { TagKind.allCases.map(\.directory.path.bytes) }

    /// Writes `tags` as the store's index (a new file renamed over the old one), with the
    /// stamps of `folders` (all those of `Library/Caches` and `tmp`, as a walk or a trusted
    /// index saw them; without them, the kinds' own folders as they are now): call it once
    /// the store is as the tags say. The folders `changed` names, which the writer changed
    /// itself, are restamped (`restamp`); if one of them holds anything else, no index is
    /// left and the next purge walks.
    static func write(_ store: Store, _ tags: [Tag], folders: [FolderStamp]? = nil, restamping changed: (([UInt8]) -> Bool)? = nil,
                      identity: MountIdentity) {
        let stamps: [FolderStamp]
        if let folders {
            // A stamp taken before (by the walk, or checked by `load`) is kept unless the
            // writer changed that folder itself: a file put there meanwhile is then still seen.
            guard let restamped = restamp(store, tags, folders: folders, changed: changed ?? { _ in false }) else {
                remove(store)
                return
            }
            stamps = restamped
        } else {
            stamps = topFolders.map { stamp(store, $0) ?? absent($0) }
        }
        let temporary = Array("tags.new-\(getpid())".utf8)
        _ = withCName(temporary) { unlinkat(store.stateFD, $0, 0) }
        do {
            try writeNewFile(at: store.stateFD, temporary, encode(tags, folders: stamps, identity: identity), mode: 0o600)
            try withCName(temporary) { (from) throws(Errno) in
                try withCName(fileName) { (to) throws(Errno) in _ = try sys { renameat(store.stateFD, from, store.stateFD, to) } }
            }
        } catch {
            _ = withCName(temporary) { unlinkat(store.stateFD, $0, 0) }
        }
    }

    /// `folders` with those `changed` names stamped anew, once a writer changed them (a
    /// changed folder gone is left out, a kind's own recorded as absent). Each is stamped
    /// from an `fstat` made *before* reading its entries, and only if they are exactly
    /// those `tags` and the other stamps name (same names, same inodes; the walk's
    /// `CACHEDIR.TAG` and what is neither file nor folder aside): a file put there before
    /// the `fstat` is among the entries, one put there after moves the ctime past the
    /// stamp. Nil if a folder holds anything else (a file another program put there while
    /// the writer worked, one it could not delete): only a walk can say what is there.
    static func restamp(_ store: Store, _ tags: [Tag], folders: [FolderStamp], changed: ([UInt8]) -> Bool) -> [FolderStamp]? {
        var numbers: [[UInt8]: Int] = [:]
        var paths: [[UInt8]] = []
        for folder in folders where changed(folder.path) && numbers[folder.path] == nil {
            numbers[folder.path] = paths.count
            paths.append(folder.path)
        }
        guard !paths.isEmpty else { return folders }
        // What each changed folder must hold. Tags of one folder mostly come in runs (the
        // walk's order): the folder is looked up once a run.
        let key = UInt64.random(in: .min ... .max)
        var expected = [FolderContents](repeating: FolderContents(key: key), count: paths.count)
        var run: (parent: ArraySlice<UInt8>, number: Int?)?
        func expect(_ path: [UInt8], _ inode: UInt64) {
            guard let slash = lastSlash(path) else { return }
            let parent = path[..<slash]
            if !(run.map { bytesEqual($0.parent, parent) } ?? false) { run = (parent, numbers[Array(parent)]) }
            if let number = run?.number { path[(slash + 1)...].withUnsafeBytes { expected[number].add($0, inode) } }
        }
        for tag in tags { expect(tag.path, tag.inode) }
        for folder in folders where numbers[folder.path] == nil && folder.inode != 0 { expect(folder.path, folder.inode) }
        let hook = restampHook.withLock { $0 }
        var fresh: [[UInt8]: FolderStamp?] = [:]
        // Deepest first: a folder's own stamp is known before its parent's entries are checked.
        for path in paths.sorted(by: { $0.count > $1.count }) {
            hook?(store.path, path, .beforeStamp)
            let fd = withCName(path) { clinux_open_beneath(store.rootFD, $0, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0) }
            guard fd >= 0 else {
                // Gone (its parent, changed too, is checked not to hold it), or unreadable.
                guard stamp(store, path) == nil else { return nil }
                let gone: FolderStamp? = topFolders.contains(path) ? absent(path) : nil
                fresh[path] = .some(gone)
                continue
            }
            defer { close(fd) }
            var info = stat()
            guard fstat(fd, &info) == 0 else { return nil }
            hook?(store.path, path, .beforeEntries)
            let isTop = topFolders.contains(path)
            var held = FolderContents(key: key)
            var unreadable = false
            let read: Void? = try? Directory.forEachEntry(of: fd) { name, type, inode in
                if isTop, name.elementsEqual(ContainerLayout.cacheTagName) { return }
                // What the walk does not index is no surprise.
                var type = type
                if type == DT_UNKNOWN {
                    var child = stat()
                    guard withCName(Array(name), { fstatat(fd, $0, &child, AT_SYMLINK_NOFOLLOW) }) == 0 else { return unreadable = true }
                    type = child.st_mode & S_IFMT == S_IFREG ? UInt8(DT_REG) : child.st_mode & S_IFMT == S_IFDIR ? UInt8(DT_DIR) : 0
                }
                if type == DT_REG || type == DT_DIR { held.add(UnsafeRawBufferPointer(name), inode) }
            }
            guard read != nil, !unreadable else { return nil }
            guard let number = numbers[path], held == expected[number] else { return nil }
            let stamp = folderStamp(path, info)
            fresh[path] = stamp
            expect(path, stamp.inode)
        }
        return folders.compactMap { folder in fresh[folder.path] ?? folder }
    }

    /// Where the last `/` of `path` is (`lastIndex(of:)` costs a closure call a byte in a
    /// debug build).
    private static func lastSlash(_ path: [UInt8]) -> Int? {
        path.withUnsafeBufferPointer { bytes in
            var index = bytes.count
            while index > 0 {
                index -= 1
                if bytes[index] == UInt8(ascii: "/") { return index }
            }
            return nil
        }
    }

    /// Whether two byte strings are equal, by `memcmp` (`elementsEqual` costs an iterator a
    /// byte in a debug build).
    private static func bytesEqual(_ a: ArraySlice<UInt8>, _ b: ArraySlice<UInt8>) -> Bool {
        a.count == b.count && a.withUnsafeBytes { a in
            b.withUnsafeBytes { b in
                guard let x = a.baseAddress, let y = b.baseAddress else { return true }
                return memcmp(x, y, a.count) == 0
            }
        }
    }

    /// What a folder holds, order aside: how many entries, and the sum of a keyed hash of
    /// each (name, inode). Two folders holding other entries differ in it but by a 64-bit
    /// collision, and the key is random (from the system's generator, whatever
    /// `SWIFT_DETERMINISTIC_HASHING` says): no name can be chosen to make one. Summed, not
    /// kept, so that checking costs no allocation a file.
    struct FolderContents: Equatable {
        let key: UInt64
        var count = 0
        var sum: UInt64 = 0

        init(key: UInt64) { self.key = key }

        mutating func add(_ name: UnsafeRawBufferPointer, _ inode: UInt64) {
            var hasher = Hasher()
            hasher.combine(key)
            hasher.combine(bytes: name)
            hasher.combine(inode)
            sum &+= UInt64(truncatingIfNeeded: hasher.finalize())
            count += 1
        }
    }

    /// Where a writer that restamps is, for `restampHook`.
    enum RestampStep: Sendable {
        /// Its change made, the folder not yet stamped.
        case beforeStamp
        /// The folder stamped, its entries not yet read.
        case beforeEntries
    }

    /// For tests: called with the store's path and a folder's as a writer restamps a folder
    /// it changed, at each step where another program may put a file into that folder.
    static let restampHook = Mutex<(@Sendable (String, [UInt8], RestampStep) -> Void)?>(nil)

    /// Forgets the index (the next purge walks the store).
    static func remove(_ store: Store) {
        _ = withCName(fileName) { unlinkat(store.stateFD, $0, 0) }
    }

    static func encode(_ tags: [Tag], folders: [FolderStamp], identity: MountIdentity) -> [UInt8] {
        var bytes = magic
        bytes.reserveCapacity(64 + folders.reduce(0) { $0 + 28 + $1.path.count } + tags.reduce(0) { $0 + 29 + $1.path.count })
        func append<T: FixedWidthInteger>(_ value: T) {
            withUnsafeBytes(of: value) { bytes.append(contentsOf: $0) }
        }
        append(identity.inode)
        append(identity.seconds)
        append(identity.nanoseconds)
        append(UInt64(folders.count))
        for folder in folders {
            append(folder.inode)
            append(folder.seconds)
            append(folder.nanoseconds)
            append(UInt32(folder.path.count))
            bytes.append(contentsOf: folder.path)
        }
        append(UInt64(tags.count))
        for tag in tags {
            append(tag.lastUse)
            append(tag.size)
            append(tag.inode)
            append(tag.kind.rawValue)
            append(UInt32(tag.path.count))
            bytes.append(contentsOf: tag.path)
        }
        return bytes
    }

    /// Decodes an index; nil if it is truncated, damaged or names a path no tag or stamp
    /// may have.
    static func decode(_ raw: UnsafeRawBufferPointer) -> (MountIdentity, [FolderStamp], [Tag])? {
        var offset = 0
        func read<T: FixedWidthInteger>(_: T.Type) -> T? {
            guard offset + MemoryLayout<T>.size <= raw.count else { return nil }
            defer { offset += MemoryLayout<T>.size }
            return raw.loadUnaligned(fromByteOffset: offset, as: T.self)
        }
        guard raw.count >= magic.count, raw.prefix(magic.count).elementsEqual(magic) else { return nil }
        offset = magic.count
        guard let inode = read(UInt64.self), let seconds = read(Int64.self), let nanoseconds = read(Int64.self),
              let folderCount = read(UInt64.self), folderCount <= UInt64(raw.count) else { return nil }
        var folders: [FolderStamp] = []
        for _ in 0..<folderCount {
            guard let node = read(UInt64.self), let seconds = read(Int64.self), let nanoseconds = read(Int64.self),
                  let length = read(UInt32.self), Int(length) <= raw.count - offset else { return nil }
            let path = Array(raw[offset..<offset + Int(length)])
            offset += Int(length)
            guard Tags.isTaggedFolder(path) else { return nil }
            folders.append(FolderStamp(path: path, inode: node, seconds: seconds, nanoseconds: nanoseconds))
        }
        guard let count = read(UInt64.self), count <= UInt64(raw.count) else { return nil }
        var tags: [Tag] = []
        tags.reserveCapacity(Int(count))
        for _ in 0..<count {
            guard let lastUse = read(Int64.self), let size = read(Int64.self), size >= 0, let node = read(UInt64.self),
                  let kindByte = read(UInt8.self), let kind = TagKind(rawValue: kindByte),
                  let length = read(UInt32.self), offset + Int(length) <= raw.count else { return nil }
            let path = Array(raw[offset..<offset + Int(length)])
            offset += Int(length)
            guard Tags.isTaggable(path, kind: kind) else { return nil }
            tags.append(Tag(kind: kind, path: path, size: size, lastUse: lastUse, inode: node))
        }
        guard offset == raw.count else { return nil }
        return (MountIdentity(inode: inode, seconds: seconds, nanoseconds: nanoseconds), folders, tags)
    }
}
