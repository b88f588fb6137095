import CLinux
import ContainerPolicy
import Glibc

/// File sharing (SPEC §1): the user lists, adds, replaces, renames and deletes files in
/// the container's `Documents/` from outside, as Finder and the Files app do — only when
/// the bundle's `Info.plist` allows it, and only what they show: no hidden file (a name
/// starting with `.`), nothing of `Documents/Inbox/`, only regular files and folders.
///
/// Every step goes through descriptors of the store opened with openat2 following no
/// symlink (`clinux_open_beneath`): a symlink the app made in `Documents/` is never
/// followed out of it. A file arrives whole in one rename from the state folder (same
/// filesystem), replacing the old one atomically. Names are bytes throughout.
public enum FileSharing {
    /// The `Info.plist` keys that enable it (either, with the value true).
    public static let keys = ["UIFileSharingEnabled", "LSSupportsOpeningDocumentsInPlace"]
    /// An `Info.plist` larger than this is refused rather than read.
    static let plistLimit = 1 << 20
    static let documents = StandardDirectory.documents.path.components
    static let inbox = StandardDirectory.inbox.path.components.last ?? []

    /// An entry as `ls` shows it.
    public struct Entry: Equatable, Sendable {
        /// Its name, as bytes.
        public let name: [UInt8]
        /// A folder (else a regular file).
        public let isFolder: Bool
        /// A file's size in bytes; 0 for a folder.
        public let size: Int64
    }

    /// Refuses, with one line, a store whose app does not enable file sharing: no bundle
    /// (offloaded), no readable `Info.plist`, one that does not parse, or neither key true.
    public static func requireEnabled(_ store: Store) throws(UserError) {
        let name = String(decoding: store.layout.bundleName, as: UTF8.self)
        if store.offloaded != nil {
            throw UserError(
                "\(store.path): the app is offloaded: file sharing reads its Info.plist; reinstall it with 'containerfs update'")
        }
        let bytes: [UInt8]
        do {
            // Neither the bundle folder nor the file may be a symlink; a FIFO is not read.
            let bundle = try openDirectory(at: store.rootFD, store.layout.bundleName)
            defer { close(bundle) }
            bytes = try readFile(at: bundle, Array("Info.plist".utf8), limit: plistLimit)
        } catch {
            throw UserError("\(store.path): cannot read \(name)/Info.plist: \(error); file sharing needs it")
        }
        // How to turn it on: the bundle is signed, so a changed plist is a new version.
        let fix = "add <key>UIFileSharingEnabled</key><true/> to \(name)/Info.plist and install it with 'containerfs update \(store.path) --bundle PATH/\(name)'"
        let plist: PropertyListValue
        do { plist = try PropertyList.parse(bytes) } catch {
            throw UserError("\(store.path): \(name)/Info.plist cannot be parsed (\(error)): file sharing is off; \(fix)")
        }
        guard case .dictionary(let entries) = plist, keys.contains(where: { entries[$0] == .bool(true) }) else {
            throw UserError(
                "\(store.path): file sharing is off: \(name)/Info.plist sets neither UIFileSharingEnabled nor LSSupportsOpeningDocumentsInPlace to true; \(fix)"
            )
        }
    }

    /// A path relative to `Documents/` as bytes, split; refuses with one line what file
    /// sharing does not show: `.`, `..`, hidden names, `Inbox` at the top. Empty (or only
    /// slashes) is `Documents/` itself, allowed only when `allowingTop`.
    public static func components(_ path: [UInt8], allowingTop: Bool = false) throws(UserError) -> [[UInt8]] {
        let components = path.split(separator: UInt8(ascii: "/")).map(Array.init)
        let shown = ContainerPath.printable(path, escapingControls: true)
        if components.isEmpty, !allowingTop { throw UserError.usage("name a file or folder in Documents/, not '\(shown)'") }
        for component in components where component.first == UInt8(ascii: ".") {
            throw UserError("'\(shown)': file sharing shows no hidden file or folder (a name starting with .)")
        }
        if components.first == inbox {
            throw UserError("'\(shown)': Documents/Inbox belongs to the app (files other apps hand over); file sharing does not show it")
        }
        return components
    }

    /// The container path of `components` in `Documents/`.
    public static func containerPath(_ components: [[UInt8]]) -> ContainerPath {
        ContainerPath(components: documents + components)
    }

    /// The folder `Documents/components…`, opened for reading, following no symlink.
    static func openFolder(_ store: Store, _ components: [[UInt8]]) throws(UserError) -> Int32 {
        let path = containerPath(components)
        let fd = withCName(path.bytes) { clinux_open_beneath(store.rootFD, $0, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0) }
        guard fd >= 0 else { throw UserError("cannot open \(path): \(Errno.current); \(listAdvice(store))") }
        return fd
    }

    /// What to do about a path of `Documents/` that is not there.
    static func listAdvice(_ store: Store) -> String {
        "'containerfs share \(store.path) ls' lists what Documents/ holds"
    }

    /// The type of `name` in the folder `fd` (nil when absent), not following a symlink.
    static func type(of name: [UInt8], in fd: Int32) -> mode_t? {
        var info = stat()
        guard withCName(name, { fstatat(fd, $0, &info, AT_SYMLINK_NOFOLLOW) }) == 0 else { return nil }
        return info.st_mode & S_IFMT
    }

    /// The files and folders in `Documents/components…` that file sharing shows, by name.
    public static func list(_ store: Store, _ components: [[UInt8]]) throws(UserError) -> [Entry] {
        let folder = try openFolder(store, components)
        defer { close(folder) }
        let names: [[UInt8]]
        do { names = try Directory.entries(of: folder).map(\.name) } catch {
            throw UserError.failed("cannot list \(containerPath(components))", error)
        }
        var entries: [Entry] = []
        for name in names where name.first != UInt8(ascii: ".") && !(components.isEmpty && name == inbox) {
            var info = stat()
            guard withCName(name, { fstatat(folder, $0, &info, AT_SYMLINK_NOFOLLOW) }) == 0 else { continue }
            let type = info.st_mode & S_IFMT
            guard type == S_IFREG || type == S_IFDIR else { continue }
            entries.append(Entry(name: name, isFolder: type == S_IFDIR, size: type == S_IFREG ? Int64(info.st_size) : 0))
        }
        return entries.sorted { $0.name.lexicographicallyPrecedes($1.name) }
    }

    /// Copies the host file or folder `source` to `Documents/components…`. A file replaces
    /// a file of that name atomically (the app sees the old or the new, whole); anything
    /// else already there is refused. Of a folder, only what file sharing shows is copied
    /// (`TreeCopy.Selection.shown`). Run by root, the copy is the store owner's (`Owner`).
    /// Returns the container path, for the kernel to forget, and how many entries of a
    /// folder were left out.
    /// In a device folder with a capacity, `device` (made for this store) admits what the
    /// copy adds, less the file it replaces (SPEC §15), as `deliver` does; its caller
    /// finishes it once a mounted store's daemon has recounted.
    public static func put(_ sourcePath: [UInt8], to components: [[UInt8]], in store: Store, device: DeviceInstall? = nil) throws(UserError)
        -> (path: ContainerPath, leftOut: Int)
    {
        // The host path is bytes, as given: a name that is not UTF-8 is a name like any other.
        let source = ContainerPath.printable(sourcePath)
        guard let name = components.last else { throw UserError.usage("name where in Documents/ to put \(source)") }
        let target = containerPath(components)
        var info = stat()
        guard withCName(sourcePath, { lstat($0, &info) }) == 0 else {
            let error = Errno.current
            throw UserError("cannot read \(source) (\(error)): \(error.advice(whenMissing: "name an existing file or folder to put"))")
        }
        let sourceType = info.st_mode & S_IFMT
        guard sourceType == S_IFREG || sourceType == S_IFDIR else {
            throw UserError("\(source) is not a file or folder: file sharing copies files and folders")
        }
        let parent = try openFolder(store, Array(components.dropLast()))
        defer { close(parent) }
        let existing = type(of: name, in: parent)
        if let existing, existing != S_IFREG || sourceType != S_IFREG {
            throw UserError(
                "\(target) exists\(existing == S_IFDIR ? " as a folder" : existing == S_IFREG ? "" : " and is not a file"): only a file replaces a file; remove it first with 'share STORE rm'"
            )
        }
        do {
            let staging = try stagingFolder(store)
            defer { close(staging) }
            let temporary = StagingName.random(beside: name, "sharing")
            let owner = Owner.handingTo(rootFD: store.rootFD)
            var leftOut = 0
            do {
                if sourceType == S_IFDIR {
                    let sourceFD = withCName(sourcePath) { Glibc.open($0, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
                    guard sourceFD >= 0 else { throw Errno.current }
                    defer { close(sourceFD) }
                    leftOut = try TreeCopy.copyDirectory(from: sourceFD, toNew: temporary, in: staging, .shown, owner: owner)
                } else {
                    let sourceFD = try openRegularFile(at: AT_FDCWD, sourcePath)
                    defer { close(sourceFD) }
                    try TreeCopy.copyFile(from: sourceFD, toNew: temporary, in: staging, owner: owner)
                }
                try place(temporary, from: staging, as: name, in: parent, replacing: existing != nil, store, device: device,
                          "put \(source) into \(store.path)", need: "the copy adds")
            } catch {
                removeTree(at: staging, temporary)
                throw error
            }
            return (target, leftOut)
        } catch let error as UserError {
            throw error
        } catch {
            throw UserError.failed("cannot put \(source) as \(target)", error)
        }
    }

    /// Copies `Documents/components…` (a file or folder) to the new host path `destination`
    /// (an existing folder: into it, under the same name). Never overwrites; the copy
    /// appears whole, by a rename from a hidden name beside it. Of a folder, only what file
    /// sharing shows is copied (`TreeCopy.Selection.shown`): a hidden file the app keeps in
    /// a shared folder (`.git`, a lock, a database's journal) stays the app's. The last
    /// component of `destination` is never followed: a symlink there is a path that exists,
    /// not a folder to write into (whoever owns the host folder may have put it there, to
    /// a folder of root's). The host path is bytes, as given (a name that is not UTF-8 is
    /// kept as it is); returns the path written and how many entries were left out.
    public static func get(_ components: [[UInt8]], from store: Store, to destination: [UInt8]) throws(UserError)
        -> (written: [UInt8], leftOut: Int)
    {
        guard let name = components.last else { throw UserError.usage("name the file or folder in Documents/ to get") }
        let source = containerPath(components)
        let shown = ContainerPath.printable(destination)
        let sourceFD = withCName(source.bytes) { clinux_open_beneath(store.rootFD, $0, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0) }
        guard sourceFD >= 0 else { throw UserError("cannot read \(source): \(Errno.current); \(listAdvice(store))") }
        defer { close(sourceFD) }
        var info = stat()
        guard fstat(sourceFD, &info) == 0, info.st_mode & S_IFMT == S_IFREG || info.st_mode & S_IFMT == S_IFDIR else {
            throw UserError("\(source) is not a file or folder")
        }
        let slash = UInt8(ascii: "/"), here: [UInt8] = [0x2E]
        // Trailing slashes would make lstat follow a symlink there.
        var path = destination
        while path.count > 1, path.last == slash { path.removeLast() }
        var folder = path, leaf = Array(path.split(separator: slash).last ?? [])
        var existing = stat()
        let exists = withCName(path, { lstat($0, &existing) }) == 0
        if exists {
            guard existing.st_mode & S_IFMT == S_IFDIR else {
                let symlink = existing.st_mode & S_IFMT == S_IFLNK
                throw UserError("\(shown) exists\(symlink ? " (a symlink: never followed)" : ""): get never overwrites; name a new path")
            }
            leaf = name
        } else {
            folder = path.lastIndex(of: slash).map { Array(path[..<$0]) } ?? here
            if folder.isEmpty { folder = [slash] }
        }
        guard !leaf.isEmpty, leaf != [0x2E], leaf != [0x2E, 0x2E] else { throw UserError.usage("\(shown) names no file") }
        // The folder found above, not a symlink put in its place since.
        let parent = withCName(folder) { Glibc.open($0, O_RDONLY | O_DIRECTORY | O_CLOEXEC | (exists ? O_NOFOLLOW : 0)) }
        guard parent >= 0 else { throw UserError.failed("cannot write into \(ContainerPath.printable(folder))", Errno.current) }
        defer { close(parent) }
        let temporary = StagingName.random(beside: leaf, "getting")
        var leftOut = 0
        do {
            if info.st_mode & S_IFMT == S_IFDIR {
                leftOut = try TreeCopy.copyDirectory(from: sourceFD, toNew: temporary, in: parent, .shown)
            } else {
                try TreeCopy.copyFile(from: sourceFD, toNew: temporary, in: parent)
            }
            let renamed = withCName(temporary) { from in
                withCName(leaf) { to in clinux_renameat2(parent, from, parent, to, clinux_RENAME_NOREPLACE) }
            }
            guard renamed == 0 else { throw Errno.current }
        } catch {
            removeTree(at: parent, temporary)
            throw UserError.failed("cannot get \(source) into \(shown)", error)
        }
        if folder == here { return (leaf, leftOut) }
        return ((folder.last == slash ? folder : folder + [slash]) + leaf, leftOut)
    }

    /// Deletes the file or folder `Documents/components…`; returns its container path.
    public static func remove(_ components: [[UInt8]], from store: Store) throws(UserError) -> ContainerPath {
        guard let name = components.last else { throw UserError.usage("name the file or folder in Documents/ to remove") }
        let target = containerPath(components)
        let parent = try openFolder(store, Array(components.dropLast()))
        defer { close(parent) }
        switch type(of: name, in: parent) {
        case S_IFREG:
            guard withCName(name, { unlinkat(parent, $0, 0) }) == 0 else { throw UserError.failed("cannot remove \(target)", Errno.current) }
        case S_IFDIR:
            removeTree(at: parent, name)
            if type(of: name, in: parent) != nil { throw UserError("cannot remove all of \(target): some entries could not be deleted") }
        case nil:
            throw UserError("cannot remove \(target): \(Errno(ENOENT)); \(listAdvice(store))")
        default:
            throw UserError("\(target) is not a file or folder: file sharing does not show it")
        }
        return target
    }

    /// Renames `Documents/from…` to `Documents/to…`, never replacing; returns both paths.
    public static func move(_ from: [[UInt8]], to: [[UInt8]], in store: Store) throws(UserError) -> [ContainerPath] {
        guard let fromName = from.last, let toName = to.last else { throw UserError.usage("name what to move and where in Documents/") }
        let source = containerPath(from), target = containerPath(to)
        let fromParent = try openFolder(store, Array(from.dropLast()))
        defer { close(fromParent) }
        let toParent = try openFolder(store, Array(to.dropLast()))
        defer { close(toParent) }
        guard let type = type(of: fromName, in: fromParent) else { throw UserError("cannot move \(source): \(Errno(ENOENT)); \(listAdvice(store))") }
        guard type == S_IFREG || type == S_IFDIR else {
            throw UserError("\(source) is not a file or folder: file sharing does not show it")
        }
        let renamed = withCName(fromName) { old in
            withCName(toName) { new in clinux_renameat2(fromParent, old, toParent, new, clinux_RENAME_NOREPLACE) }
        }
        guard renamed == 0 else { throw UserError.failed("cannot move \(source) to \(target)", Errno.current) }
        return [source, target]
    }

    /// Every file file sharing shows in `Documents/`, as paths below it, in byte order;
    /// folders are walked to `depth` levels, and at most `limit` files are returned.
    public static func files(_ store: Store, depth: Int = 32, limit: Int = 10_000) -> [[[UInt8]]] {
        var found: [[[UInt8]]] = []
        var folders: [[[UInt8]]] = [[]]
        while let folder = folders.popLast(), found.count < limit {
            guard let entries = try? list(store, folder) else { continue }
            for entry in entries {
                if entry.isFolder {
                    if folder.count < depth { folders.append(folder + [entry.name]) }
                } else if found.count < limit {
                    found.append(folder + [entry.name])
                }
            }
        }
        return found.sorted { $0.joined(separator: [0]).lexicographicallyPrecedes($1.joined(separator: [0])) }
    }

    /// Writes `contents` as the file `Documents/components…`, through the staging area and
    /// one rename: replacing the file there (`replacing`) or taking a free name. Held to
    /// the container's capacity and, through `device` (made for this store; its caller
    /// finishes it), to its device's free space, exactly as `put` is (the same step): an
    /// edit that does not fit is refused with one line and nothing is written.
    public static func write(_ contents: [UInt8], to components: [[UInt8]], in store: Store, replacing: Bool,
                             device: DeviceInstall? = nil) throws(UserError) -> ContainerPath
    {
        guard let name = components.last else { throw UserError.usage("name the file in Documents/ to write") }
        let target = containerPath(components)
        let parent = try openFolder(store, Array(components.dropLast()))
        defer { close(parent) }
        if replacing, type(of: name, in: parent) != S_IFREG { throw UserError("\(target) is not a file to replace") }
        do {
            let staging = try stagingFolder(store)
            defer { close(staging) }
            let temporary = StagingName.random(beside: name, "sharing")
            do {
                try writeNewFile(at: staging, temporary, contents, owner: Owner.handingTo(rootFD: store.rootFD))
                try place(temporary, from: staging, as: name, in: parent, replacing: replacing, store, device: device,
                          "\(replacing ? "replace" : "add") \(target) in \(store.path)", need: "the edit adds")
            } catch {
                removeTree(at: staging, temporary)
                throw error
            }
        } catch let error as UserError {
            throw error
        } catch {
            throw UserError.failed("cannot write \(target)", error)
        }
        return target
    }

    /// Puts `temporary`, made whole in the staging folder, in place as `name` in `parent`:
    /// over the file there (`replacing`) or only under a free name. Before the rename, what
    /// it adds (its blocks, less the file it replaces) is checked against the container's
    /// capacity and admitted by `device` (SPEC §10, §15): a refusal (one line naming
    /// `what`, `need` saying what takes the bytes) throws before anything changes. The one
    /// step of `put` and of the edits of `run --share-edits`.
    private static func place(_ temporary: [UInt8], from staging: Int32, as name: [UInt8], in parent: Int32, replacing: Bool,
                              _ store: Store, device: DeviceInstall?, _ what: String, need: String) throws {
        // One change at a time from the capacity check to the rename, as `deliver`.
        try LockWait.take(staging, LOCK_EX, Delivery.stagingDescription(store))
        // A replaced file with another name (a hard link) frees nothing.
        let replaced = replacing ? Capacity.freedBytes(at: parent, name) : 0
        let added = Capacity.treeBytes(at: staging, temporary)
        try Capacity.checkFits(store, adding: added, removing: replaced, what)
        try device?.admit(added.subtractingSaturated(replaced), what, need: need)
        let renamed = withCName(temporary) { from in
            withCName(name) { to in
                replacing ? renameat(staging, from, parent, to) : clinux_renameat2(staging, from, parent, to, clinux_RENAME_NOREPLACE)
            }
        }
        guard renamed == 0 else { throw Errno.current }
    }

    /// The state folder's staging folder (as `deliver`'s, the same one and its lock).
    private static func stagingFolder(_ store: Store) throws(Errno) -> Int32 {
        try Delivery.stagingFolder(store)
    }
}
