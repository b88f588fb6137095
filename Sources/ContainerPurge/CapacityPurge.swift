import CLinux
import ContainerPolicy
import ContainerStore
import Glibc

/// Low storage (SPEC §10): before an app starts, as iOS does when the device runs low,
/// `tmp/` is emptied and caches are purged least recently used first until the container
/// has the free space asked for — and no more is deleted than that.
public enum LowStorage {
    /// What a low-storage purge did.
    public struct Report: Sendable {
        /// Free bytes before the purge.
        public var freeBefore: Int64
        /// Free bytes after it.
        public var freeAfter: Int64
        /// The entries of `tmp/` removed (0: tmp was not touched).
        public var temporaryEntries = 0
        /// What emptying `tmp/` freed, as purge counts bytes: the sizes of its regular
        /// files whose last name went (a file also linked elsewhere frees nothing).
        public var temporaryFreedBytes: Int64 = 0
        /// The cache purge, if caches had to go.
        public var caches: Purge.Report?
        /// Whether anything was deleted.
        public var purged: Bool { temporaryEntries > 0 || !(caches?.deleted.isEmpty ?? true) }
    }

    /// The store's free space: capacity − used, or without a capacity its file system's
    /// available bytes; in a device folder with a capacity of its own (docs/capacity.md,
    /// "One device's capacity"), never more than the device has left (a walk of its
    /// containers).
    public static func freeBytes(_ store: Store) -> Int64 {
        let own = ownFreeBytes(store)
        let devicePath = devicePath(of: store)
        guard let deviceCapacity = DeviceCapacity.read(devicePath: devicePath),
              let used = try? DeviceCapacity.usedBytes(devicePath: devicePath) else { return own }
        return min(own, max(0, deviceCapacity.subtractingSaturated(used)))
    }

    /// The folder holding the store: its device.
    private static func devicePath(of store: Store) -> String {
        let path = store.resolvedPath
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }

    /// The capacity a percentage is of: the store's own, else its device's.
    private static func capacity(of store: Store) -> Int64? {
        Capacity.read(store) ?? DeviceCapacity.read(devicePath: devicePath(of: store))
    }

    private static func ownFreeBytes(_ store: Store) -> Int64 {
        if let capacity = Capacity.read(store) {
            return max(0, capacity - Capacity.usedBytes(rootFD: store.rootFD))
        }
        var info = statvfs()
        guard fstatvfs(store.rootFD, &info) == 0 else { return 0 }
        return Int64(clamping: info.f_bavail).multipliedSaturating(by: Int64(clamping: info.f_frsize))
    }

    /// A threshold from the command line: SIZE, or PERCENT of the capacity (`10%`).
    /// Refused when it does not parse, or exceeds the capacity (nothing could satisfy it).
    public static func threshold(_ text: String, for store: Store, option: String) throws(UserError) -> Int64 {
        let capacity = capacity(of: store)
        var bytes: Int64
        if text.hasSuffix("%") {
            guard let percent = Int64(text.dropLast()), (0...100).contains(percent) else {
                throw UserError.usage("bad \(option) '\(text)': write a size (500M) or a percentage of the capacity (10%)")
            }
            guard let capacity else {
                throw UserError.usage("\(option) \(text) is a percentage of the capacity, and \(store.path) has none: give a size, or set one with 'containerfs capacity'")
            }
            bytes = capacity / 100 * percent + capacity % 100 * percent / 100
        } else {
            guard let size = Quantity.bytes(text) else {
                throw UserError.usage("bad \(option) '\(text)': write a size (500M) or a percentage of the capacity (10%)")
            }
            bytes = size
        }
        if let capacity, bytes > capacity {
            throw UserError.usage("\(option) \(text) is more than the capacity of \(store.path) (\(counted(capacity, "byte"))): nothing could free that much")
        }
        return bytes
    }

    /// Frees space in the store (not mounted) until `wanted` bytes are free: first `tmp/`
    /// (when `kinds` has temporary files), then caches least recently used first (when it
    /// has caches), only as many as needed.
    public static func purge(_ store: Store, until wanted: Int64, kinds: [TagKind] = [.temporary, .cache]) throws(UserError) -> Report {
        var report = Report(freeBefore: freeBytes(store), freeAfter: 0)
        report.freeAfter = report.freeBefore
        guard report.freeBefore < wanted else { return report }
        if let holder = MountLock.holder(store) {
            throw UserError("\(store.path) is in use (pid \(holder.pid)): a running container's caches are never purged")
        }
        if kinds.contains(.temporary) {
            let before = TemporaryFiles(store)
            report.temporaryEntries = Purge.emptyTemporary(store).removed
            report.temporaryFreedBytes = before.freedBytes(leaving: TemporaryFiles(store))
            report.freeAfter = freeBytes(store)
        }
        if report.freeAfter < wanted, kinds.contains(.cache) {
            // Every file in Library/Caches is a candidate, however it got there (SPEC §10).
            var options = Purge.Options(kinds: [.cache], free: wanted - report.freeAfter)
            options.walk = true
            report.caches = try Purge.purge([store], options)
            report.freeAfter = freeBytes(store)
        }
        return report
    }
}

/// The regular files below a store's `tmp/`, by inode, to count what emptying it freed.
struct TemporaryFiles {
    /// Size, names in the store, names below `tmp/`.
    private var files: [UInt64: (size: Int64, links: UInt, names: UInt)] = [:]

    init(_ store: Store) {
        guard let fd = try? openDirectory(at: store.rootFD, StandardDirectory.tmp.path.bytes) else { return }
        defer { close(fd) }
        Capacity.forEachNode(below: fd, skippingState: false) { _, _, info in
            guard info.st_mode & S_IFMT == S_IFREG else { return }
            let seen = files[UInt64(info.st_ino)]?.names ?? 0
            files[UInt64(info.st_ino)] = (Int64(info.st_size), UInt(info.st_nlink), seen + 1)
        }
    }

    /// The sizes of the files here with every name below `tmp/` that `after` no longer holds.
    func freedBytes(leaving after: TemporaryFiles) -> Int64 {
        files.reduce(Int64(0)) { total, file in
            file.value.names >= file.value.links && after.files[file.key] == nil ? total.addingSaturated(file.value.size) : total
        }
    }
}

extension Purge {
    /// Removes the folders that deleting `paths` (files, relative to the root) left empty,
    /// below `Library/Caches` and `tmp` but never those two: iOS leaves an app no stale,
    /// empty cache folders. Each folder is reached beneath the root without symlinks, and
    /// removed only if empty (`rmdir` refuses otherwise). Returns the folders removed.
    static func removeEmptiedFolders(_ store: Store, _ paths: [ContainerPath]) -> [ContainerPath] {
        let tops = [StandardDirectory.caches.path.components, StandardDirectory.tmp.path.components]
        var folders = Set<[[UInt8]]>()
        for path in paths {
            var components = path.components
            components.removeLast()
            while let top = tops.first(where: { components.count > $0.count && Array(components.prefix($0.count)) == $0 }),
                  components.count > top.count {
                folders.insert(components)
                components.removeLast()
            }
        }
        // Deepest first, so a parent is tried after its children.
        var removed: [ContainerPath] = []
        for folder in folders.sorted(by: { $0.count > $1.count }) {
            let parent = ContainerPath(components: Array(folder.dropLast()))
            guard let name = folder.last else { continue }
            let fd = withCName(parent.bytes) { clinux_open_beneath(store.rootFD, $0, clinux_O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0) }
            guard fd >= 0 else { continue }
            if withCName(name, { unlinkat(fd, $0, AT_REMOVEDIR) }) == 0 { removed.append(ContainerPath(components: folder)) }
            close(fd)
        }
        return removed
    }
}
