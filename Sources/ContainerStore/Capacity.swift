import CLinux
import ContainerPolicy
import Glibc

/// A container's capacity (SPEC §10): the size of the simulated device, kept in the state
/// folder as `.containerfs/capacity` (the bytes, as decimal digits). No file: no capacity,
/// the store's own file system is the limit.
public enum Capacity {
    static let fileName = Array(name: "capacity")
    static let temporaryName = Array(name: "capacity.new")

    /// The store's capacity in bytes; nil when it has none. (A file that does not parse
    /// keeps the store from opening, `Store.open`, but for `capacity STORE SIZE`.)
    public static func read(_ store: Store) -> Int64? {
        read(stateFD: store.stateFD)
    }

    /// As `read(_:)`, from the state folder's descriptor.
    public static func read(stateFD: Int32) -> Int64? {
        readNumber(stateFD, fileName)
    }

    /// Whether the capacity file is there but holds no number of bytes.
    static func isDamaged(stateFD: Int32) -> Bool {
        stateFileIsDamaged(stateFD, fileName) { read(stateFD: stateFD) }
    }

    /// The number of bytes the small state file `name` holds as decimal digits; nil when
    /// it is missing or does not parse.
    private static func readNumber(_ stateFD: Int32, _ name: [UInt8]) -> Int64? {
        guard var bytes = try? readFile(at: stateFD, name, limit: smallStateFileLimit), bytes.count <= 32 else { return nil }
        while bytes.last == UInt8(ascii: "\n") { bytes.removeLast() }
        guard let value = Int64(String(decoding: bytes, as: UTF8.self)), value >= 0 else { return nil }
        return value
    }

    /// Sets the capacity (nil: none). Atomic: a new file renamed over the old one.
    public static func write(_ store: Store, _ capacity: Int64?) throws(UserError) {
        do throws(Errno) {
            try write(stateFD: store.stateFD, capacity)
        } catch {
            throw UserError.failed("cannot set the capacity of \(store.path)", error)
        }
    }

    /// As `write(_:_:)`, into the state folder `stateFD` (a store being created).
    public static func write(stateFD: Int32, _ capacity: Int64?) throws(Errno) {
        guard let capacity else {
            let removed = withCName(fileName) { unlinkat(stateFD, $0, 0) }
            if removed != 0, errno != ENOENT { throw Errno.current }
            return
        }
        _ = withCName(temporaryName) { unlinkat(stateFD, $0, 0) }
        try writeNewFile(at: stateFD, temporaryName, Array("\(capacity)\n".utf8))
        try withCName(temporaryName) { (from) throws(Errno) in
            try withCName(fileName) { (to) throws(Errno) in
                _ = try sys { renameat(stateFD, from, stateFD, to) }
            }
        }
    }

    /// The bytes the container holds, as its capacity counts them: the blocks
    /// (`st_blocks` × 512) of every node below its root — bundle, data areas, folders,
    /// links — except the state folder; a file with several links once. A walk of the
    /// store: the daemon does it once per mount, then keeps the count as it changes things.
    public static func usedBytes(rootFD: Int32) -> Int64 {
        treeBytes(rootFD, skippingState: true)
    }

    /// The bytes in blocks of the file or folder `name` in the folder `parent` and all
    /// it holds, as `usedBytes` counts them (a delivery or a new bundle before it goes in).
    public static func treeBytes(at parent: Int32, _ name: [UInt8]) -> Int64 {
        var info = stat()
        guard withCName(name, { fstatat(parent, $0, &info, AT_SYMLINK_NOFOLLOW) }) == 0 else { return 0 }
        guard info.st_mode & S_IFMT == S_IFDIR, let fd = try? openDirectory(at: parent, name) else { return blockBytes(info) }
        defer { close(fd) }
        return treeBytes(fd, skippingState: false)
    }

    /// What `freedBytes` counts of the folder `name` but the folder itself: what emptying it frees.
    public static func contentBytes(at parent: Int32, _ name: [UInt8]) -> Int64 {
        var info = stat()
        guard withCName(name, { fstatat(parent, $0, &info, AT_SYMLINK_NOFOLLOW) }) == 0 else { return 0 }
        return max(0, freedBytes(at: parent, name) - blockBytes(info))
    }

    /// What removing the file or folder `name` in the folder `parent` frees: as `treeBytes`,
    /// but a file that also has a name outside it (a hard link an app made) frees nothing,
    /// its blocks stay with that name.
    public static func freedBytes(at parent: Int32, _ name: [UInt8]) -> Int64 {
        var info = stat()
        guard withCName(name, { fstatat(parent, $0, &info, AT_SYMLINK_NOFOLLOW) }) == 0 else { return 0 }
        guard info.st_mode & S_IFMT == S_IFDIR, let fd = try? openDirectory(at: parent, name) else {
            return info.st_mode & S_IFMT != S_IFDIR && info.st_nlink > 1 ? 0 : blockBytes(info)
        }
        defer { close(fd) }
        var total = blockBytes(info)
        // Linked files: freed only when every one of their names is in the tree.
        var linked: [UInt64: (names: UInt, links: UInt, bytes: Int64)] = [:]
        forEachNode(below: fd, skippingState: false) { _, _, info in
            if info.st_mode & S_IFMT != S_IFDIR, info.st_nlink > 1 {
                let seen = linked[UInt64(info.st_ino)]?.names ?? 0
                linked[UInt64(info.st_ino)] = (seen + 1, UInt(info.st_nlink), blockBytes(info))
                return
            }
            total = total.addingSaturating(blockBytes(info))
        }
        for file in linked.values where file.names >= file.links { total = total.addingSaturating(file.bytes) }
        return total
    }

    private static func treeBytes(_ rootFD: Int32, skippingState: Bool) -> Int64 {
        var info = stat()
        guard fstatat(rootFD, "", &info, clinux_AT_EMPTY_PATH) == 0 else { return 0 }
        var seen = Set<UInt64>()
        var total = blockBytes(info)
        forEachNode(below: rootFD, skippingState: skippingState) { _, _, info in
            if info.st_mode & S_IFMT != S_IFDIR, info.st_nlink > 1, !seen.insert(UInt64(info.st_ino)).inserted { return }
            total = total.addingSaturating(blockBytes(info))
        }
        return total
    }

    /// Calls `visit` with each node below the folder `rootFD` (not following symlinks),
    /// its folder's descriptor, its name and its status; the state folder is skipped
    /// with `skippingState`. Descriptors held: a bounded window of the folders above.
    public static func forEachNode(below rootFD: Int32, skippingState: Bool, _ visit: (_ folderFD: Int32, _ name: [UInt8], _ info: stat) -> Void) {
        guard let chain = try? FolderChain(top: rootFD) else { return }
        var info = stat()
        // Each level: the names still to visit.
        var levels: [[[UInt8]]] = [names(rootFD).filter { !skippingState || $0 != ContainerLayout.stateFolderName }]
        // Popped in place: a copy of the level (`levels.last`) makes each removal copy it.
        while !levels.isEmpty {
            guard let name = levels[levels.count - 1].popLast() else {
                levels.removeLast()
                if levels.isEmpty || (try? chain.leave()) == nil { break }
                continue
            }
            guard withCName(name, { fstatat(chain.fd, $0, &info, AT_SYMLINK_NOFOLLOW) }) == 0 else { continue }
            visit(chain.fd, name, info)
            if info.st_mode & S_IFMT == S_IFDIR, (try? chain.enter(name)) != nil { levels.append(names(chain.fd)) }
        }
    }

    /// Refuses a change made outside a mount that would take the container past its
    /// capacity: `adding` bytes come in, `removing` go. No capacity: anything fits.
    /// `what` names the change for the message ("deliver report.pdf into STORE").
    public static func checkFits(_ store: Store, adding: Int64, removing: Int64 = 0, _ what: String) throws(UserError) {
        guard let capacity = read(store) else { return }
        let used = usedBytes(rootFD: store.rootFD)
        let after = used.addingSaturating(-removing).addingSaturating(adding)
        guard after > capacity, adding > removing else { return }
        throw UserError(
            "cannot \(what): it needs \(counted(adding, "byte")) and the container has \(max(0, capacity - used.addingSaturating(-removing))) free of its capacity of \(counted(capacity, "byte")); nothing was changed: free space in it, or raise the capacity with 'containerfs capacity \(store.path) SIZE'")
    }

    // MARK: The summary of a clean unmount

    static let summaryName = Array(name: "used")

    /// The bytes in use a daemon recorded when it was last unmounted cleanly, if no
    /// command changed the store since (see docs/capacity.md, "Mount without a walk").
    public static func readSummary(stateFD: Int32) -> Int64? {
        readNumber(stateFD, summaryName)
    }

    /// Records `used` for the next mount: written atomically, at a clean unmount only.
    public static func writeSummary(stateFD: Int32, _ used: Int64) {
        let temporary = Array(name: "used.new")
        _ = withCName(temporary) { unlinkat(stateFD, $0, 0) }
        guard (try? writeNewFile(at: stateFD, temporary, Array("\(used)\n".utf8), mode: 0o600)) != nil else { return }
        _ = withCName(temporary) { from in withCName(summaryName) { to in renameat(stateFD, from, stateFD, to) } }
    }

    /// Drops the summary: the store is about to change, or a daemon serves it. Made
    /// durable, so that a crash after the change cannot bring a stale summary back.
    public static func forgetSummary(stateFD: Int32) {
        guard withCName(summaryName, { unlinkat(stateFD, $0, 0) }) == 0 else { return }
        let folder = Glibc.openat(stateFD, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if folder >= 0 {
            fsync(folder)
            close(folder)
        }
    }

    private static func names(_ fd: Int32) -> [[UInt8]] {
        ((try? Directory.entries(of: fd)) ?? []).map(\.name)
    }

    /// The bytes in blocks of the node `info` describes.
    @inline(__always)
    public static func blockBytes(_ info: stat) -> Int64 {
        Int64(clamping: info.st_blocks).multipliedSaturating(by: 512)
    }
}

extension Int64 {
    /// `self + other`, stopping at the bounds instead of overflowing.
    @inline(__always)
    public func addingSaturating(_ other: Int64) -> Int64 {
        let (sum, overflow) = addingReportingOverflow(other)
        return overflow ? (other > 0 ? .max : .min) : sum
    }

    /// `self × other`, stopping at the bounds instead of overflowing.
    @inline(__always)
    public func multipliedSaturating(by other: Int64) -> Int64 {
        let (product, overflow) = multipliedReportingOverflow(by: other)
        return overflow ? ((self < 0) != (other < 0) ? .min : .max) : product
    }
}
