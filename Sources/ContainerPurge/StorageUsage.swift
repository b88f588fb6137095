import CLinux
import ContainerPolicy
import ContainerStore
import Glibc

/// The space a container uses per area, as a phone's storage view shows it (SPEC §8 `usage`).
public struct StorageUsage: Sendable {
    /// One line of the view.
    public struct Area: Sendable {
        /// `bundle`, `Documents`, `Inbox`, `Library`, `Caches`, `tmp`.
        public var name: String
        /// The folder counted, relative to the container's root.
        public var path: String
        /// Bytes of the regular files in it (their sizes).
        public var bytes: Int64 = 0
        /// How many regular files.
        public var files: Int = 0
        /// In the backup set (SPEC §4).
        public var backedUp: Bool
        /// Deleted by purge or when the app stops.
        public var purgeable: Bool
        /// The bundle of an offloaded app: removed, its data kept (`containerfs offload`).
        public var offloaded = false
    }

    public var areas: [Area]
    /// Bytes of the data (every area but the bundle) per protection class (SPEC §11): a
    /// file's own `user.containerfs.protection`, or the store's default class.
    public var bytesByClass: [ProtectionClass: Int64] = [:]

    /// Held at `Int64.max`: sparse files can claim more than that between them.
    public var totalBytes: Int64 { areas.saturatedSum(\.bytes) }
    public var totalFiles: Int { areas.reduce(0) { $0 + $1.files } }

    /// Walks the store (following no symlink). `Documents` excludes the Inbox and
    /// `Library` excludes `Caches`, which have their own lines; the markers and the state
    /// folder are not counted. A group container has no bundle, Documents or tmp: its
    /// lines are its root (what its members write there, backed up), `Library` and `Caches`.
    public static func measure(_ store: Store) -> StorageUsage {
        let bundle = String(decoding: store.layout.bundleName, as: UTF8.self)
        let library = ("Library", "Library", StandardDirectory.library.path, [Array(name: "Caches")], true, false)
        let caches = ("Caches", "Library/Caches", StandardDirectory.caches.path, [ContainerLayout.cacheTagName], false, true)
        let lines: [(String, String, ContainerPath, [[UInt8]], Bool, Bool)] = store.layout.isGroup ? [
            ("root", ".", ContainerPath.root, [ContainerLayout.stateFolderName, ContainerLayout.backupFolderName, Array(name: "Library")], true, false),
            library, caches,
        ] : [
            ("bundle", bundle, ContainerPath(components: [store.layout.bundleName]), [], false, false),
            ("Documents", "Documents", StandardDirectory.documents.path, [Array(name: "Inbox")], true, false),
            ("Inbox", "Documents/Inbox", StandardDirectory.inbox.path, [], true, false),
            library, caches,
            ("tmp", "tmp", StandardDirectory.tmp.path, [ContainerLayout.cacheTagName], false, true),
        ]
        var areas: [Area] = []
        var bytesByClass: [ProtectionClass: Int64] = [:]
        let defaultClass = store.defaultProtection
        for (name, path, folder, skipped, backedUp, purgeable) in lines {
            var area = Area(name: name, path: path, backedUp: backedUp, purgeable: purgeable)
            area.offloaded = name == "bundle" && store.offloaded != nil
            // The root itself is ".": openat takes no empty name.
            let fd = withCName(folder.components.isEmpty ? Array(name: ".") : folder.bytes) {
                openat(store.rootFD, $0, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            }
            if fd >= 0 {
                StoreWalk.regularFiles(in: fd, relative: folder.bytes, skippingAtTop: skipped) { relative, info in
                    area.bytes = area.bytes.addingSaturated(Int64(info.st_size))
                    area.files += 1
                    if name != "bundle" {
                        let protection = protectionClass(store, relative) ?? defaultClass
                        bytesByClass[protection] = (bytesByClass[protection] ?? 0).addingSaturated(Int64(info.st_size))
                    }
                }
            }
            areas.append(area)
        }
        return StorageUsage(areas: areas, bytesByClass: bytesByClass)
    }

    /// The class a file of the store holds in its own attribute, reached beneath the root.
    private static func protectionClass(_ store: Store, _ relative: [UInt8]) -> ProtectionClass? {
        // A file of a group's root comes as "/name" (the root's relative path is empty).
        let beneath = relative.first == UInt8(ascii: "/") ? Array(relative.dropFirst()) : relative
        let fd = withCName(beneath) { clinux_open_beneath(store.rootFD, $0, clinux_O_PATH | O_NOFOLLOW | O_CLOEXEC, 0) }
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 48)
        let count = buffer.withUnsafeMutableBytes { clinux_node_getxattr(fd, ProtectionClass.attributeName, $0.baseAddress, $0.count) }
        return count > 0 ? ProtectionClass(value: buffer.prefix(count)) : nil
    }
}

/// A container's space as the device an app sees (SPEC §10): its capacity, what it uses
/// and what is free, and what is available for important usage — free plus the cache
/// and tmp bytes the system could purge (iOS's `volumeAvailableCapacityForImportantUsage`).
public struct DeviceSpace: Sendable {
    /// The capacity in bytes; nil: none, the store's file system is the device.
    public var capacity: Int64?
    /// Bytes in blocks the container holds (the capacity's count).
    public var used: Int64
    /// Bytes free: capacity − used, or the store's file system's available bytes.
    public var free: Int64
    /// `free` plus the purgeable (cache and tmp) bytes.
    public var availableForImportantUsage: Int64

    /// Measures `store`, whose areas `usage` measured.
    public static func measure(_ store: Store, _ usage: StorageUsage) -> DeviceSpace {
        let capacity = Capacity.read(store)
        let used = Capacity.usedBytes(rootFD: store.rootFD)
        var free: Int64
        if let capacity {
            free = max(0, capacity - used)
        } else {
            var info = statvfs()
            free = fstatvfs(store.rootFD, &info) == 0
                ? Int64(clamping: info.f_bavail).multipliedSaturating(by: Int64(clamping: info.f_frsize)) : 0
        }
        let purgeable = usage.areas.filter(\.purgeable).reduce(Int64(0)) { $0.addingSaturating($1.bytes) }
        return DeviceSpace(capacity: capacity, used: used, free: free, availableForImportantUsage: free.addingSaturating(purgeable))
    }
}
