import CLinux
import ContainerPolicy
import Glibc

/// A device (SPEC §15, docs/groups.md): the folder that holds app containers and the group
/// containers they belong to. A single store is a one-app device, with its groups.
public enum Device {
    /// The stores a command naming `path` acts on as one device:
    /// - a store: that store, and for an app container the group containers it belongs
    ///   to that exist beside it (its groups share its device);
    /// - a device folder (not a store, holding at least one group container): every
    ///   container store directly in it, apps and groups, by name; entries that are not
    ///   stores are passed over. Any other folder is refused as no store, as before.
    /// `withGroups`: false to take a store alone (a device folder is expanded either way).
    public static func stores(_ path: String, changing: Bool = false, withGroups: Bool = true) throws(UserError) -> [Store] {
        let rootFD = Glibc.open(path, clinux_O_PATH | O_DIRECTORY | O_CLOEXEC)
        // Not a folder: the store's own one line (no store at PATH…).
        guard rootFD >= 0 else { return [try Store.open(path, changing: changing)] }
        var info = stat()
        let isStore = withCName(ContainerLayout.stateFolderName) { fstatat(rootFD, $0, &info, AT_SYMLINK_NOFOLLOW) } == 0
        close(rootFD)
        if isStore {
            let store = try Store.open(path, changing: changing)
            var stores = [store]
            guard withGroups else { return stores }
            for group in try store.memberGroups() {
                if let member = try? store.openGroup(group, changing: changing) { stores.append(member) }
            }
            return stores
        }
        let folderFD = Glibc.open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard folderFD >= 0 else { throw UserError.failed("cannot open the device folder \(path)", Errno.current) }
        defer { close(folderFD) }
        let names = ((try? Directory.entries(of: folderFD)) ?? []).map(\.name)
            .filter { $0.first != UInt8(ascii: ".") }
            .sorted { $0.lexicographicallyPrecedes($1) }
        let base = path.hasSuffix("/") ? path : path + "/"
        let stores = names.compactMap { name in
            try? Store.open(at: folderFD, name, path: base + String(decoding: name, as: UTF8.self), changing: changing)
        }
        // A device folder holds a group container; any other folder is no store, as before.
        guard stores.contains(where: { $0.layout.isGroup }) else { return [try Store.open(path, changing: changing)] }
        return stores
    }
}

extension Device {
    /// `stores` of each path, each store once (by its device and inode), in order.
    public static func stores(_ paths: [String], changing: Bool = false, withGroups: Bool = true) throws(UserError) -> [Store] {
        var seen: Set<[UInt64]> = []
        var result: [Store] = []
        for path in paths {
            for store in try stores(path, changing: changing, withGroups: withGroups) {
                var info = stat()
                guard fstat(store.rootFD, &info) == 0 else { continue }
                if seen.insert([UInt64(info.st_dev), UInt64(info.st_ino)]).inserted { result.append(store) }
            }
        }
        return result
    }
}
