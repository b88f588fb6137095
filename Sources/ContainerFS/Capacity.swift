import CFuse
import CLinux
import ContainerStore
import Glibc
import Synchronization

/// The space a container with a capacity uses (SPEC §10), kept by the daemon as it
/// changes the store: the bytes in blocks of every node but the state folder's.
///
/// The count is made by a walk of the store when the capacity is read (at mount, or when
/// `containerfs capacity` gives a container one); from then on every change the daemon
/// makes adds the blocks it allocated or freed (`st_blocks` before and after). A growth
/// is reserved before it is made, so that concurrent writes cannot together pass the
/// capacity by more than one request. Without a capacity nothing is counted and no
/// request pays for it.
///
/// The kernel writes passed-through files without asking the daemon, so a container with
/// a capacity opens no file with passthrough: its reads and writes come to the daemon.
final class SpaceAccount: Sendable {
    /// The capacity in bytes; -1: none.
    private let limitBytes = Atomic<Int64>(-1)
    /// The bytes in use, with the growths reserved and not yet settled.
    private let usedBytes = Atomic<Int64>(0)
    /// Files open through the mount, and those of them unlinked while open: their space
    /// is freed when the last program closes them, as natively.
    private let held = Mutex<HeldFiles>(HeldFiles())

    struct HeldFiles {
        var opens: [InodeKey: Int] = [:]
        var unlinked: Set<InodeKey> = []
    }

    /// The blocks of each folder names were added to, as last seen: a folder grows a block
    /// at a time as names are added (ext4 never shrinks one), and each growth is counted
    /// as the difference to what was seen before, so concurrent creations in one folder
    /// count its growth once.
    private let folders = Mutex<[InodeKey: Int64]>([:])

    /// Whether the container has a capacity (then the space is counted).
    @inline(__always)
    var isActive: Bool { limitBytes.load(ordering: .relaxed) >= 0 }

    /// The capacity, if any.
    var capacity: Int64? {
        let limit = limitBytes.load(ordering: .relaxed)
        return limit >= 0 ? limit : nil
    }

    /// The bytes in use (meaningful only with a capacity).
    var used: Int64 { max(0, usedBytes.load(ordering: .relaxed)) }

    /// The bytes left before the capacity (0 when it is reached or passed).
    var free: Int64 {
        guard let capacity else { return .max }
        return max(0, capacity - used)
    }

    /// Reads the store's capacity again; counts the store when it did not have one: from
    /// the summary a clean unmount left, if any (at mount), or by a walk.
    func reload(_ store: Store) {
        let capacity = Capacity.read(store)
        if let capacity, !isActive {
            let used = Capacity.readSummary(stateFD: store.stateFD) ?? Capacity.usedBytes(rootFD: store.rootFD)
            usedBytes.store(used, ordering: .relaxed)
        }
        limitBytes.store(capacity ?? -1, ordering: .relaxed)
    }

    /// At mount, once the count is had: the summary goes, so that a daemon killed from
    /// here on leaves none and the next mount walks the store.
    func mounted(_ store: Store) {
        Capacity.forgetSummary(stateFD: store.stateFD)
    }

    /// At a clean unmount, once nothing is open: records the count for the next mount.
    /// `freedSince`: bytes the daemon deleted itself after the last request (tmp/).
    func unmounted(_ store: Store, freedSince: Int64) {
        guard isActive else { return }
        Capacity.writeSummary(stateFD: store.stateFD, max(0, used.addingSaturating(-freedSince)))
    }

    /// Counts the store again, after containerfs commands changed it behind the mount.
    func recount(_ store: Store) {
        usedBytes.store(Capacity.usedBytes(rootFD: store.rootFD), ordering: .relaxed)
    }

    /// Reserves up to `wanted` bytes of the free space; returns how many it got.
    func reserve(_ wanted: Int64) -> Int64 {
        guard wanted > 0 else { return 0 }
        var current = usedBytes.load(ordering: .relaxed)
        while true {
            let granted = min(wanted, max(0, limitBytes.load(ordering: .relaxed) - current))
            guard granted > 0 else { return 0 }
            let (exchanged, original) = usedBytes.compareExchange(
                expected: current, desired: current.addingSaturating(granted), ordering: .relaxed)
            if exchanged { return granted }
            current = original
        }
    }

    /// Replaces a reservation by what the change really took (negative: freed).
    @inline(__always)
    func settle(reserved: Int64, actual: Int64) {
        let change = actual.addingSaturating(-reserved)
        if change != 0 { usedBytes.add(change, ordering: .relaxed) }
    }

    /// Records that a program opened the file `key`.
    func opened(_ key: InodeKey) {
        held.withLock { $0.opens[key, default: 0] += 1 }
    }

    /// Records that a program closed the file `key`, whose store descriptor is `fd`: when it
    /// was its last open and the file was unlinked meanwhile, its space is free now.
    func closed(_ key: InodeKey, _ fd: Int32) {
        let freed = held.withLock { files -> Bool in
            guard let count = files.opens[key] else { return false }
            if count > 1 {
                files.opens[key] = count - 1
                return false
            }
            files.opens[key] = nil
            return files.unlinked.remove(key) != nil
        }
        var info = stat()
        if freed, fstat(fd, &info) == 0 { settle(reserved: Capacity.blockBytes(info), actual: 0) }
    }

    /// Whether the folder `key`'s blocks were seen since counting began.
    func knowsFolder(_ key: InodeKey) -> Bool {
        folders.withLock { $0[key] != nil }
    }

    /// The folder `key` has `bytes` in blocks now: counts what it gained since last seen
    /// (nothing the first time, which must come before any change the daemon makes).
    func folderSeen(_ key: InodeKey, _ bytes: Int64) {
        let growth = folders.withLock { table -> Int64 in
            let before = table[key] ?? bytes
            table[key] = bytes
            return bytes - before
        }
        settle(reserved: 0, actual: growth)
    }

    /// Records that `info`'s node lost a name; its space is free when that was its last
    /// link, unless a program still holds it open.
    func removed(_ info: stat) {
        guard info.st_mode & S_IFMT == S_IFDIR || info.st_nlink <= 1 else { return }
        let key = InodeKey(info)
        // Its inode number may come back as another folder.
        if info.st_mode & S_IFMT == S_IFDIR { folders.withLock { _ = $0.removeValue(forKey: key) } }
        let isOpen = held.withLock { files -> Bool in
            guard files.opens[key] != nil else { return false }
            files.unlinked.insert(key)
            return true
        }
        if !isOpen { settle(reserved: Capacity.blockBytes(info), actual: 0) }
    }
}

extension FileSystem {
    /// Runs `body`, a change that may grow the file open at `fd` (any descriptor,
    /// `O_PATH` too) by `growth(stat before)` bytes, within the capacity. `body` gets how
    /// many of those bytes fit (all of them, or with `partial` fewer: a short write) and
    /// how many were wanted; nothing fits: `ENOSPC`. Afterwards the blocks the change
    /// really took are counted.
    @inline(__always)
    func withinCapacity<R>(_ fd: Int32, partial: Bool, growth: (stat) -> Int64,
                           _ body: (_ fitting: Int64, _ wanted: Int64) throws(Errno) -> R) throws(Errno) -> R {
        guard space.isActive else { return try body(0, 0) }
        var before = stat()
        try sys { fstat(fd, &before) }
        let wanted = max(0, growth(before))
        let granted = space.reserve(wanted)
        if granted < wanted, granted == 0 || !partial {
            space.settle(reserved: granted, actual: 0)
            throw Errno(ENOSPC)
        }
        defer {
            var after = stat()
            let actual = fstat(fd, &after) == 0 ? Capacity.blockBytes(after).addingSaturating(-Capacity.blockBytes(before)) : granted
            space.settle(reserved: granted, actual: actual)
        }
        return try body(granted, wanted)
    }

    /// The bytes a write of `count` bytes at `offset` may add: the part of it beyond the
    /// blocks the file has (an overwrite of allocated data takes nothing more).
    @inline(__always)
    static func growth(writing count: Int, at offset: off_t, _ info: stat) -> Int64 {
        let end = Int64(offset).addingSaturating(Int64(count))
        let size = Int64(info.st_size)
        // A file with holes may need blocks anywhere: the whole write is reserved.
        if Capacity.blockBytes(info) < size { return Int64(count) }
        // Without holes, the blocks up to the end of the last one the data fills are there;
        // blocks the store's file system keeps past the end (ext4 may) are not counted on.
        let block = max(512, Int64(info.st_blksize))
        let filled = size.addingSaturating(block - 1) / block * block
        return max(0, end - max(Int64(offset), filled))
    }

    /// The bytes `truncate` to `size` is held to: a file made longer takes no blocks (its
    /// end is a hole), but on a full container it fails as a creation does.
    static func growth(truncatingTo size: off_t, _ info: stat, free: Int64) -> Int64 {
        size > info.st_size && free == 0 ? 1 : 0
    }

    /// The bytes `fallocate(mode, offset, length)` may add: what of the range lies beyond
    /// the blocks the file has; nothing for punching or collapsing, which free.
    static func growth(allocating mode: Int32, _ offset: off_t, _ length: off_t, _ info: stat) -> Int64 {
        // FALLOC_FL_PUNCH_HOLE and FALLOC_FL_COLLAPSE_RANGE (linux/falloc.h, stable ABI).
        if mode & (0x02 | 0x08) != 0 { return 0 }
        return min(Int64(length), growth(writing: Int(clamping: length), at: offset, info))
    }

    /// A write from the kernel to the store descriptor `fd`: within the capacity, what
    /// fits is written and its count returned (a short write); nothing fits: `ENOSPC`.
    @inline(__always)
    func write(_ fd: Int32, _ buffer: UnsafeRawPointer?, _ size: Int, _ offset: off_t) throws(Errno) -> Int {
        try withinCapacity(fd, partial: true, growth: { Self.growth(writing: size, at: offset, $0) }) { (fitting, wanted) throws(Errno) in
            // The growth that does not fit is cut from the end of the write.
            let cut = Int(clamping: max(0, wanted - fitting))
            return try sys { pwrite(fd, buffer, size - cut, offset) }
        }
    }

    /// Fails a creation with `ENOSPC` when the capacity is reached, as a full disk.
    /// `exists` tells whether the name is already there (then nothing is created).
    @inline(__always)
    func checkSpaceForCreation(exists: () -> Bool = { false }) throws(Errno) {
        guard space.isActive, space.free == 0, !exists() else { return }
        throw Errno(ENOSPC)
    }

    /// Runs `body`, which adds a name to `directory`, counting the blocks the folder grows
    /// by: without it, empty files with long names pass the capacity unseen.
    @inline(__always)
    func countingFolderGrowth<Result>(_ directory: Inode, _ body: () throws(Errno) -> Result) throws(Errno) -> Result {
        guard space.isActive else { return try body() }
        if !space.knowsFolder(directory.key), let bytes = blockBytes(of: directory) { space.folderSeen(directory.key, bytes) }
        let result = try body()
        if let bytes = blockBytes(of: directory) { space.folderSeen(directory.key, bytes) }
        return result
    }

    /// Runs `body`, which sets or removes an extended attribute of `node`, within the
    /// capacity: refused when it is reached, and the blocks the attributes take counted
    /// (on ext4 a large value takes a block of its own).
    @inline(__always)
    func countingAttributeBlocks(_ node: Inode, adding: Bool, _ body: () throws(Errno) -> Void) throws(Errno) {
        guard space.isActive else { return try body() }
        if adding, space.free == 0 { throw Errno(ENOSPC) }
        let before = blockBytes(of: node)
        try body()
        if let before, let after = blockBytes(of: node) { space.settle(reserved: 0, actual: after - before) }
    }

    private func blockBytes(of node: Inode) -> Int64? {
        var info = stat()
        let found = try? inodes.withDescriptor(node) { fd in fstatat(fd, "", &info, clinux_AT_EMPTY_PATH) }
        return found == 0 ? Capacity.blockBytes(info) : nil
    }

    /// Counts the blocks of a node just created.
    @inline(__always)
    func countCreated(_ info: stat) {
        guard space.isActive else { return }
        space.settle(reserved: 0, actual: Capacity.blockBytes(info))
    }

    /// The node at `name` in `directory` before it is removed or replaced, when the
    /// container has a capacity.
    @inline(__always)
    func nodeBeforeRemoval(_ directory: Inode, _ name: UnsafePointer<CChar>) -> stat? {
        guard space.isActive else { return nil }
        var info = stat()
        let found = try? inodes.withDescriptor(directory) { fd in fstatat(fd, name, &info, AT_SYMLINK_NOFOLLOW) }
        return found == 0 ? info : nil
    }

    /// After a node lost the name `nodeBeforeRemoval` described.
    @inline(__always)
    func countRemoved(_ info: stat?) {
        if let info { space.removed(info) }
    }

    /// After a program opened (or created) the file `ino`.
    @inline(__always)
    func countOpened(_ ino: fuse_ino_t) {
        guard space.isActive, let node = try? inodes.inode(ino) else { return }
        space.opened(node.key)
    }

    /// Before the store descriptor `fd` of the file `ino` is closed.
    @inline(__always)
    func countClosed(_ ino: fuse_ino_t, _ fd: Int32) {
        guard space.isActive, let node = try? inodes.inode(ino) else { return }
        space.closed(node.key, fd)
    }

    /// The store's statistics as the simulated device shows them: the capacity as the
    /// size, what is left of it as free and available (never more than the store's own).
    func capacityStatistics(_ info: statvfs) -> statvfs {
        guard let capacity = space.capacity else { return info }
        var result = info
        let unit = Int64(max(1, info.f_frsize))
        let total = capacity / unit
        let free = space.free / unit
        result.f_blocks = UInt(clamping: total)
        result.f_bfree = min(info.f_bfree, UInt(clamping: free))
        result.f_bavail = min(info.f_bavail, UInt(clamping: free))
        return result
    }
}
