import CLinux
import ContainerPolicy
import Glibc

extension Store {
    /// Makes a new container at `path` holding a copy of the bundle at `bundlePath`.
    ///
    /// The container is built in a hidden sibling with an unpredictable name and renamed
    /// into place only when complete, so a failure leaves nothing behind. `path` must not exist or be empty.
    /// `seal` runs on the complete staging store just before its format marker is written
    /// (ContainerSigning's `create(at:bundle:installerKey:)` records and signs the bundle there).
    public static func create(at path: String, bundle bundlePath: String, seal: Seal? = nil) throws(UserError) -> Store {
        _ = try checkBundle(bundlePath)
        let (parentPath, leaf) = splitParent(path)
        let parentFD = Glibc.open(parentPath, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard parentFD >= 0 else {
            throw UserError.folderUnavailable("cannot create \(path)", folder: parentPath, role: "parent folder", Errno.current)
        }
        defer { close(parentFD) }
        try checkTargetIsFree(parentFD, leaf, path: path)

        // What an earlier create of this path left when it was killed goes first.
        StagingName.removeAbandoned(in: parentFD, beside: leaf, "creating")
        let (staging, lock) = try buildAsideHeld(in: parentFD, beside: leaf, "creating", bundle: bundlePath, seal: seal, path: path)
        defer { close(lock) }
        do {
            try withCName(staging) { (from) throws(Errno) in
                try withCName(leaf) { (to) throws(Errno) in _ = try sys { renameat(parentFD, from, parentFD, to) } }
            }
        } catch {
            removeTree(at: parentFD, staging)
            throw UserError.failed("cannot create \(path)", error)
        }
        return try open(path)
    }

    /// Builds a whole container in a new hidden folder of `parentFD` beside `leaf`, under
    /// an unpredictable name (`.LEAF.PURPOSE-XXXXXXXXXXXX`, see `StagingName`), and returns
    /// that name; a failure leaves nothing behind. `path` names the target for messages.
    /// `owner`: the ids everything built is given once it is whole (root updating another
    /// user's store: `Owner.handingTo`), else it stays the builder's.
    public static func buildAside(in parentFD: Int32, beside leaf: [UInt8], _ purpose: String, bundle bundlePath: String,
                                  seal: Seal?, path: String, owner: Owner? = nil) throws(UserError) -> [UInt8] {
        let built = try buildAsideHeld(in: parentFD, beside: leaf, purpose, bundle: bundlePath, seal: seal, path: path, owner: owner)
        close(built.lock)
        return built.name
    }

    /// `buildAside`, also returning a descriptor of the folder that holds this run's lock on
    /// it (`StagingName.createHeld`): the caller closes it once the folder is renamed into
    /// place or removed, and until then no later run takes the folder for abandoned.
    public static func buildAsideHeld(in parentFD: Int32, beside leaf: [UInt8], _ purpose: String, bundle bundlePath: String,
                                      seal: Seal?, path: String, owner: Owner? = nil) throws(UserError) -> (name: [UInt8], lock: Int32) {
        let bundleName = try checkBundle(bundlePath)
        return try stageHeld(in: parentFD, beside: leaf, purpose, path: path) { stagingFD in
            try populate(stagingFD, bundlePath: bundlePath, bundleName: bundleName, seal: seal, owner: owner)
            if let owner { try give(stagingFD, to: owner) }
        }
    }

    /// Gives the staged folder open at `stagingFD` and everything in it to `owner`, the top
    /// last. Walked by name, following no symlink, and safe so: until the top is given, it
    /// is the builder's with mode 0700, and nobody else can reach inside.
    static func give(_ stagingFD: Int32, to owner: Owner) throws(Errno) {
        var failure: Errno?
        Capacity.forEachNode(below: stagingFD, skippingState: false) { folderFD, name, _ in
            let changed = withCName(name) { fchownat(folderFD, $0, owner.uid, owner.gid, AT_SYMLINK_NOFOLLOW) }
            if changed != 0, failure == nil { failure = Errno.current }
        }
        if let failure { throw failure }
        try sys { fchownat(stagingFD, "", owner.uid, owner.gid, clinux_AT_EMPTY_PATH) }
    }

    /// Makes a new hidden folder beside `leaf` (`StagingName.createHeld`) and runs `build`
    /// in it, given its descriptor; returns its name and the lock that keeps it from being
    /// taken for abandoned. A failure leaves nothing behind.
    static func stageHeld(in parentFD: Int32, beside leaf: [UInt8], _ purpose: String, path: String,
                          _ build: (_ stagingFD: Int32) throws -> Void) throws(UserError) -> (name: [UInt8], lock: Int32) {
        let staging: [UInt8]
        let lock: Int32
        do {
            (staging, lock) = try StagingName.createHeld(in: parentFD, beside: leaf, purpose, folder: true, mode: 0o700)
        } catch {
            throw UserError.failed("cannot create \(path)", error)
        }
        do {
            let stagingFD = try openDirectory(at: parentFD, staging)
            defer { close(stagingFD) }
            try build(stagingFD)
        } catch {
            removeTree(at: parentFD, staging)
            close(lock)
            if let error = error as? UserError { throw error }
            throw UserError.failed("cannot create \(path)", error)
        }
        return (staging, lock)
    }

    /// A last step of `create` on the staging store: its root and state folder descriptors
    /// and the bundle's name.
    public typealias Seal = (_ rootFD: Int32, _ stateFD: Int32, _ bundleName: [UInt8]) throws -> Void

    /// Checks the bundle path and returns the bundle's name.
    public static func checkBundle(_ bundlePath: String) throws(UserError) -> [UInt8] {
        var info = stat()
        guard lstat(bundlePath, &info) == 0 else {
            throw UserError.usage("no bundle at \(bundlePath): name an existing NAME.app folder with --bundle")
        }
        if info.st_mode & S_IFMT == S_IFLNK {
            throw UserError.usage("bundle \(bundlePath) is a symlink: name the real NAME.app folder")
        }
        guard info.st_mode & S_IFMT == S_IFDIR else {
            throw UserError.usage("bundle \(bundlePath) is not a folder: name a NAME.app folder")
        }
        let name = splitParent(bundlePath).leaf
        guard ContainerLayout.isBundleName(name) else {
            throw UserError.usage("bundle \(bundlePath) must be a folder named NAME.app, as an iOS app bundle is")
        }
        return name
    }

    private static func checkTargetIsFree(_ parentFD: Int32, _ leaf: [UInt8], path: String) throws(UserError) {
        var info = stat()
        let exists = withCName(leaf) { fstatat(parentFD, $0, &info, AT_SYMLINK_NOFOLLOW) } == 0
        guard exists else { return }
        let isEmptyDirectory: Bool
        if info.st_mode & S_IFMT == S_IFDIR, let fd = try? openDirectory(at: parentFD, leaf) {
            isEmptyDirectory = (try? Directory.entries(of: fd).isEmpty) ?? false
            close(fd)
        } else {
            isEmptyDirectory = false
        }
        guard isEmptyDirectory else {
            throw UserError.usage("\(path) already exists and is not an empty folder: choose a new path for the container")
        }
    }

    /// Fills the staging folder: bundle copy, structure, state folder.
    /// `owner`: who the bundle is copied for, who must be able to read every file of it
    /// (`Owner.mayRead`).
    private static func populate(_ rootFD: Int32, bundlePath: String, bundleName: [UInt8], seal: Seal?, owner: Owner? = nil) throws {
        let sourceFD = Glibc.open(bundlePath, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard sourceFD >= 0 else { throw UserError.failed("cannot read bundle \(bundlePath)", Errno.current) }
        defer { close(sourceFD) }
        try TreeCopy.copyDirectory(from: sourceFD, toNew: bundleName, in: rootFD, .everything(what: "bundle \(bundlePath)"), owner: owner)

        for directory in StandardDirectory.allCases {
            try withCName(directory.path.bytes) { (name) throws(Errno) in _ = try sys { mkdirat(rootFD, name, 0o755) } }
        }
        for directory in [StandardDirectory.caches, .tmp] {
            let fd = try openDirectory(at: rootFD, directory.path.bytes)
            defer { close(fd) }
            try writeNewFile(at: fd, ContainerLayout.cacheTagName, cacheDirectoryTag)
        }
        try withCName(ContainerLayout.stateFolderName) { (name) throws(Errno) in _ = try sys { mkdirat(rootFD, name, 0o700) } }
        let stateFD = try openDirectory(at: rootFD, ContainerLayout.stateFolderName)
        defer { close(stateFD) }
        try writeNewFile(at: stateFD, bundleNameFile, bundleName)
        if let seal { try seal(rootFD, stateFD, bundleName) }
        // The marker goes last: a store without it is never opened.
        try writeNewFile(at: stateFD, formatName, formatContents)
    }

    /// The Cache Directory Tagging marker (bford.info/cachedir), so outside backup tools skip it.
    static let cacheDirectoryTag = Array("""
        Signature: 8a477f597d28d172789f06886806bc55
        # This file is a cache directory tag created by containerfs.
        # For information about cache directory tags, see https://bford.info/cachedir/

        """.utf8)

    /// Splits a host path into its parent (for opening) and its last component (as bytes).
    public static func splitParent(_ path: String) -> (parent: String, leaf: [UInt8]) {
        var bytes = Array(path.utf8)
        while bytes.count > 1, bytes.last == UInt8(ascii: "/") { bytes.removeLast() }
        guard let slash = bytes.lastIndex(of: UInt8(ascii: "/")) else { return (".", bytes) }
        let parent = slash == 0 ? "/" : String(decoding: bytes[..<slash], as: UTF8.self)
        return (parent, Array(bytes[(slash + 1)...]))
    }
}

/// Removes `name` inside `parent` and all below it, following no symlink; best effort.
///
/// A folder made unwritable (by a program in `tmp/`, say) is made writable first, so that
/// its contents can go. Iterative, on a `FolderChain`: a chain of folders of any depth
/// neither overflows the thread's stack nor runs out of descriptors.
public func removeTree(at parent: Int32, _ name: [UInt8]) {
    if withCName(name, { unlinkat(parent, $0, 0) }) == 0 { return }
    guard let top = try? withCName(name, { (cname) throws(Errno) in
        try sys { openat(parent, cname, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
    }) else { return }
    removeContents(of: top)
    close(top)
    _ = withCName(name) { unlinkat(parent, $0, AT_REMOVEDIR) }
}

/// Removes everything inside the folder open at `fd` for which `keep` is false at its top,
/// following no symlink; best effort. Returns how many entries at the top are left.
@discardableResult
public func removeContents(of fd: Int32, keeping keep: ([UInt8]) -> Bool = { _ in false }) -> Int {
    func names(_ fd: Int32) -> [[UInt8]] {
        var info = stat()
        if fstat(fd, &info) == 0, info.st_mode & 0o700 != 0o700 { fchmod(fd, info.st_mode & 0o7777 | 0o700) }
        return ((try? Directory.entries(of: fd)) ?? []).map(\.name)
    }
    guard let chain = try? FolderChain(top: fd) else { return 0 }
    // Each level: its name in the level above, and its entries still to remove.
    var levels: [(name: [UInt8], entries: [[UInt8]])] = [([], names(fd).filter { !keep($0) })]
    var left = 0
    // The top level is popped in place: a copy of it (`levels.last`) would make each
    // removal copy its entries, quadratic in a folder.
    while !levels.isEmpty {
        if let entry = levels[levels.count - 1].entries.popLast() {
            if withCName(entry, { unlinkat(chain.fd, $0, 0) }) == 0 { continue }
            guard (try? chain.enter(entry)) != nil else {
                if levels.count == 1 { left += 1 }
                continue
            }
            levels.append((entry, names(chain.fd)))
        } else if levels.count > 1 {
            let level = levels.removeLast()
            guard (try? chain.leave()) != nil else { return left + 1 }  // moved while removed
            if withCName(level.name, { unlinkat(chain.fd, $0, AT_REMOVEDIR) }) != 0, levels.count == 1 { left += 1 }
        } else {
            break
        }
    }
    return left
}
