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
    }

    public var areas: [Area]
    /// Bytes of the data (every area but the bundle) per protection class (SPEC §11): a
    /// file's own `user.containerfs.protection`, or the store's default class.
    public var bytesByClass: [ProtectionClass: Int64] = [:]

    public var totalBytes: Int64 { areas.reduce(0) { $0 + $1.bytes } }
    public var totalFiles: Int { areas.reduce(0) { $0 + $1.files } }

    /// Walks the store (following no symlink). `Documents` excludes the Inbox and
    /// `Library` excludes `Caches`, which have their own lines; the markers and the state
    /// folder are not counted.
    public static func measure(_ store: Store) -> StorageUsage {
        let bundle = String(decoding: store.layout.bundleName, as: UTF8.self)
        let lines: [(String, String, ContainerPath, [UInt8]?, Bool, Bool)] = [
            ("bundle", bundle, ContainerPath(components: [store.layout.bundleName]), nil, false, false),
            ("Documents", "Documents", StandardDirectory.documents.path, Array(name: "Inbox"), true, false),
            ("Inbox", "Documents/Inbox", StandardDirectory.inbox.path, nil, true, false),
            ("Library", "Library", StandardDirectory.library.path, Array(name: "Caches"), true, false),
            ("Caches", "Library/Caches", StandardDirectory.caches.path, ContainerLayout.cacheTagName, false, true),
            ("tmp", "tmp", StandardDirectory.tmp.path, ContainerLayout.cacheTagName, false, true),
        ]
        var areas: [Area] = []
        var bytesByClass: [ProtectionClass: Int64] = [:]
        let defaultClass = store.defaultProtection
        for (name, path, folder, skipped, backedUp, purgeable) in lines {
            var area = Area(name: name, path: path, backedUp: backedUp, purgeable: purgeable)
            let fd = withCName(folder.bytes) { openat(store.rootFD, $0, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
            if fd >= 0 {
                StoreWalk.regularFiles(in: fd, relative: folder.bytes, skippingAtTop: skipped) { relative, info in
                    area.bytes += Int64(info.st_size)
                    area.files += 1
                    if name != "bundle" {
                        let protection = protectionClass(store, relative) ?? defaultClass
                        bytesByClass[protection, default: 0] += Int64(info.st_size)
                    }
                }
            }
            areas.append(area)
        }
        return StorageUsage(areas: areas, bytesByClass: bytesByClass)
    }

    /// The class a file of the store holds in its own attribute, reached beneath the root.
    private static func protectionClass(_ store: Store, _ relative: [UInt8]) -> ProtectionClass? {
        let fd = withCName(relative) { clinux_open_beneath(store.rootFD, $0, clinux_O_PATH | O_NOFOLLOW | O_CLOEXEC, 0) }
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 48)
        let count = buffer.withUnsafeMutableBytes { clinux_node_getxattr(fd, ProtectionClass.attributeName, $0.baseAddress, $0.count) }
        return count > 0 ? ProtectionClass(value: buffer.prefix(count)) : nil
    }
}
