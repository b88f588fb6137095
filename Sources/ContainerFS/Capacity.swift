import ContainerDurability
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
/// capacity by more than one request. The changes to one file take turns (`fileLocks`),
/// so that each sees only its own blocks between its two `fstat`s: page writes of a
/// mapping and concurrent writers arrive as concurrent requests. Without a capacity
/// nothing is counted and no request pays for it.
///
/// Every value from the store (a recorded count, a capacity) is bounded or saturated: a
/// planted one can make the count wrong, never stop the daemon.
///
/// The kernel writes passed-through files without asking the daemon, so a container with
/// a capacity opens no file with passthrough: its reads and writes come to the daemon.
final class SpaceAccount: Sendable {
    /// The capacity in bytes; -1: none.
    private let limitBytes = Atomic<Int64>(-1)
    /// The bytes in use, with the growths reserved and not yet settled.
    private let usedBytes = Atomic<Int64>(0)
    /// Files open through the mount, and those of them unlinked while open or never named
    /// (`O_TMPFILE`): their space is freed when the last program closes them, as natively.
    private let held = Mutex<HeldFiles>(HeldFiles())
    /// Striped by node: the changes to one file's size take turns (see above). Taken
    /// before `held` and `folders`, never while holding them.
    private let fileLocks = (0..<256).map { _ in FileLock() }
    /// Files a removal kept for the kernel (`FileSystem.keptUntilForgotten`), held as open
    /// until it forgets them, by when they were removed (monotonic seconds). The kernel
    /// forgets such a file as the removal returns unless a program holds it, but another
    /// thread may serve the program's next request before the `FORGET`: a refusal for want
    /// of room and `statfs` first wait for the files removed in the last `settlingWindow`
    /// to go, as ext4 commits its journal and tries again before it answers `ENOSPC`. So a
    /// program that deletes a file to make room finds the room at once, as natively.
    private let settling = Mutex<[InodeKey: Double]>([:])
    private static let settlingWindow = 0.05

    /// One stripe: its lock holds the blocks counted of each open file of the stripe. The
    /// store's file system may change them between two requests (ext4 allocates extent
    /// blocks when it writes back a file with holes, at an fsync or later): the next
    /// change to the file, its fsync or its last close counts the difference.
    final class FileLock: Sendable {
        let counted = Mutex<[InodeKey: Int64]>([:])
    }

    struct HeldFiles {
        var opens: [InodeKey: Int] = [:]
        var unlinked: Set<InodeKey> = []
    }

    /// Held shared by each request that may change the count, from its first measure to
    /// its last settling, and exclusively by a recount: the walk then sees the store
    /// between changes, never one reserved and not yet settled (wiped by the new count,
    /// then settled on top of it) or made and not yet counted (counted twice).
    private let changes = ReadWriteLock()

    /// The blocks of each folder names were added to, as last seen: a folder grows a block
    /// at a time as names are added (ext4 never shrinks one), and each growth is counted
    /// as the difference to what was seen before, so concurrent creations in one folder
    /// count its growth once.
    private let folders = Mutex<[InodeKey: Int64]>([:])

    /// The device's capacity this container shares with the others of its device folder
    /// (DeviceLedger), attached at mount; nil: none. Every reservation and change is made
    /// in it too, so a full device refuses growth in any of its containers.
    private let device = Mutex<DeviceLedger?>(nil)
    /// Whether `device` is set: read on every request, without the mutex.
    private let hasDevice = Atomic<Bool>(false)

    @inline(__always)
    private var ledger: DeviceLedger? { hasDevice.load(ordering: .relaxed) ? device.withLock { $0 } : nil }

    /// Whether the container has a capacity, its own or its device's (then the space is counted).
    @inline(__always)
    var isActive: Bool { limitBytes.load(ordering: .relaxed) >= 0 }

    /// The container's own capacity, if any (`Int64.max` stands for none when only the
    /// device has one).
    var capacity: Int64? {
        let limit = limitBytes.load(ordering: .relaxed)
        return limit >= 0 ? limit : nil
    }

    /// The size shown as the simulated device's: the container's capacity, or its
    /// device's when that is smaller.
    var shownCapacity: Int64? {
        guard let own = capacity else { return nil }
        return min(own, ledger?.capacity ?? .max)
    }

    /// The bytes in use (meaningful only with a capacity).
    var used: Int64 { max(0, usedBytes.load(ordering: .relaxed)) }

    /// The bytes left before the capacity, the container's or its device's, whichever
    /// leaves less (0 when it is reached or passed).
    var free: Int64 {
        guard let capacity else { return .max }
        let own = max(0, capacity.subtractingSaturated(used))
        guard let ledger else { return own }
        return min(own, ledger.free)
    }

    /// Reads the store's capacity again; counts the store when it did not have one: from
    /// the summary a clean unmount left, if any (at mount) and if it is possible (no more
    /// than the store's file system holds), or by a walk.
    func reload(_ store: Store) {
        let capacity = Capacity.read(store) ?? (hasDevice.load(ordering: .relaxed) ? Int64.max : nil)
        if let capacity, !isActive {
            var device = statvfs()
            let size = fstatvfs(store.rootFD, &device) == 0
                ? Int64(clamping: device.f_blocks).multipliedSaturated(by: Int64(clamping: device.f_frsize)) : -1
            let recorded = Capacity.readSummary(stateFD: store.stateFD).flatMap { $0 <= size ? $0 : nil }
            usedBytes.store(recorded ?? Capacity.usedBytes(rootFD: store.rootFD), ordering: .relaxed)
        }
        limitBytes.store(capacity ?? -1, ordering: .relaxed)
    }

    /// At mount, before the first `reload`: attaches to the device's capacity, if the
    /// folder holding the store has one (DeviceLedger). Its capacity is the one found then:
    /// `capacity DEVICE` is refused while a container of the device is mounted. A ledger
    /// that cannot be opened fails the mount: its writes would go uncounted.
    func attachDevice(_ store: Store) throws(UserError) {
        guard !hasDevice.load(ordering: .relaxed), let attached = try DeviceLedger.attach(store) else { return }
        device.withLock { $0 = attached }
        hasDevice.store(true, ordering: .relaxed)
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
        // What the daemon emptied itself (tmp/) is freed on the device too.
        ledger?.add(-max(0, freedSince))
        Capacity.writeSummary(stateFD: store.stateFD, max(0, used.addingSaturated(-freedSince)))
    }

    /// Counts the store again, after containerfs commands changed it behind the mount,
    /// between the changes requests make: the walk, and the bytes of files open with no
    /// name left, which it cannot see, as `heldBytes` gives them.
    func recount(_ store: Store, heldBytes: ([InodeKey]) -> Int64) {
        changes.lock()
        defer { changes.unlock() }
        let open = held.withLock { Array($0.opens.keys) }
        let counted = Capacity.usedBytes(rootFD: store.rootFD).addingSaturated(heldBytes(open))
        let before = usedBytes.exchange(counted, ordering: .relaxed)
        // What the commands changed, in the device's count too.
        ledger?.add(counted.subtractingSaturated(before))
    }

    /// Runs `body`, a request that may change the count, never during a recount.
    @inline(__always)
    func duringChange<R>(_ body: () -> R) -> R {
        changes.lockShared()
        defer { changes.unlock() }
        return body()
    }

    /// Runs `body`, a change to the size of the file `ino`, after the other changes to it.
    /// `body` gets the blocks counted of the open files of its stripe (see `FileLock`).
    @inline(__always)
    func serialized<R, E: Error>(_ ino: fuse_ino_t, _ body: (inout [InodeKey: Int64]) throws(E) -> R) throws(E) -> R {
        // Node ids may be addresses: mixed, so that aligned ones spread over the stripes.
        let stripe = Int(truncatingIfNeeded: (ino &* 0x9E37_79B9_7F4A_7C15) >> 56) % fileLocks.count
        return try fileLocks[stripe].counted.withLock { (counted) throws(E) -> R in try body(&counted) }
    }

    /// The open file `key` has `bytes` in blocks now: counts what the store's file system
    /// changed since the daemon last counted it.
    @inline(__always)
    func catchUp(_ counted: inout [InodeKey: Int64], _ key: InodeKey, _ bytes: Int64) {
        guard let known = counted[key], known != bytes else { return }
        counted[key] = bytes
        settle(reserved: 0, actual: bytes.subtractingSaturated(known))
    }

    /// The file `key`, removed just now, is kept until the kernel forgets it (`settling`).
    func removedAndKept(_ key: InodeKey) {
        settling.withLock { $0[key] = monotonicSeconds() }
    }

    /// The file `key` kept after its removal went.
    func letGo(_ key: InodeKey) {
        settling.withLock { _ = $0.removeValue(forKey: key) }
    }

    /// Waits for the files removed in the last `settlingWindow` before the call to go
    /// (`settling`), never longer than that; returns whether there were any. Those kept
    /// longer are held by a program, and those removed since are another request's: not
    /// waited for.
    func awaitRemovals() -> Bool {
        let start = monotonicSeconds()
        var waited = false
        while true {
            let now = monotonicSeconds()
            let pending = settling.withLock { table -> Bool in
                table = table.filter { now - $0.value < Self.settlingWindow }
                return table.values.contains { $0 <= start }
            }
            guard pending, now - start < Self.settlingWindow else { return waited }
            waited = true
            usleep(200)
        }
    }

    /// Reserves up to `wanted` bytes of the free space; returns how many it got, after
    /// waiting for the removals just made when they are not enough (`settling`).
    func reserve(_ wanted: Int64) -> Int64 {
        let granted = reserveNow(wanted)
        guard granted < wanted, awaitRemovals() else { return granted }
        return granted.addingSaturated(reserveNow(wanted.subtractingSaturated(granted)))
    }

    private func reserveNow(_ wanted: Int64) -> Int64 {
        guard wanted > 0 else { return 0 }
        var current = usedBytes.load(ordering: .relaxed)
        var granted: Int64 = 0
        while true {
            granted = min(wanted, max(0, limitBytes.load(ordering: .relaxed).subtractingSaturated(current)))
            guard granted > 0 else { return 0 }
            let (exchanged, original) = usedBytes.compareExchange(
                expected: current, desired: current.addingSaturated(granted), ordering: .relaxed)
            if exchanged { break }
            current = original
        }
        guard let ledger else { return granted }
        // The device grants what is left of it; the rest goes back to the container.
        let shared = ledger.reserve(granted)
        if shared < granted { settleHere(reserved: granted, actual: shared) }
        return shared
    }

    /// Replaces a reservation by what the change really took (negative: freed).
    @inline(__always)
    func settle(reserved: Int64, actual: Int64) {
        let change = actual.subtractingSaturated(reserved)
        guard change != 0 else { return }
        ledger?.add(change)
        settleHere(reserved: reserved, actual: actual)
    }

    /// `settle` in the container's own count only.
    private func settleHere(reserved: Int64, actual: Int64) {
        let change = actual.subtractingSaturated(reserved)
        guard change != 0 else { return }
        // Saturated, and never below nothing: a count made wrong (a false record, a change
        // behind the mount) must not overflow the arithmetic of the next reservation.
        var current = usedBytes.load(ordering: .relaxed)
        while true {
            let (exchanged, original) = usedBytes.compareExchange(
                expected: current, desired: max(0, current.addingSaturated(change)), ordering: .relaxed)
            if exchanged { return }
            current = original
        }
    }

    /// Records that the file `key` has no name (`O_TMPFILE`): freed at its last close,
    /// unless it is linked first.
    func unnamed(_ key: InodeKey) {
        held.withLock { _ = $0.unlinked.insert(key) }
    }

    /// Records that the file `key` got a name (`linkat` of an `O_TMPFILE` file, or of one
    /// unlinked while open): it stays when closed.
    func linked(_ key: InodeKey) {
        held.withLock { _ = $0.unlinked.remove(key) }
    }

    /// Records that the open file `key` has no name, unless that was known; true when it
    /// was not (its blocks were given back at the removal).
    func holdUnlinked(_ key: InodeKey) -> Bool {
        held.withLock { $0.unlinked.insert(key).inserted }
    }

    /// Records that a program opened the file `key`.
    func opened(_ key: InodeKey) {
        held.withLock { $0.opens[key, default: 0] += 1 }
    }

    /// Records that a program closed the file `key`; returns whether that was its last
    /// open, and whether it was unlinked or never named (then its space is free now).
    func closed(_ key: InodeKey) -> (last: Bool, unlinked: Bool) {
        held.withLock { files in
            guard let count = files.opens[key] else { return (false, false) }
            if count > 1 {
                files.opens[key] = count - 1
                return (false, false)
            }
            files.opens[key] = nil
            return (true, files.unlinked.remove(key) != nil)
        }
    }

    /// Whether the folder `key`'s blocks were seen since counting began.
    func knowsFolder(_ key: InodeKey) -> Bool {
        folders.withLock { $0[key] != nil }
    }

    /// The folder `key` has `bytes` in blocks now: counts what it gained since last seen
    /// (nothing the first time, which must come before any change the daemon makes).
    func folderSeen(_ key: InodeKey, _ bytes: Int64, reserved: Int64) {
        // A folder never shrinks: a measure older than the last one counted (two creations
        // at once, measured in the other order) adds nothing.
        let growth = folders.withLock { table -> Int64 in
            let before = table[key] ?? bytes
            table[key] = max(before, bytes)
            return max(0, bytes.subtractingSaturated(before))
        }
        settle(reserved: reserved, actual: growth)
    }

    /// The folder `key`'s blocks changed by `change` through a change counted apart from
    /// its names (an extended attribute that took a block of its own, or gave it back):
    /// its last measure moves with them, so that the next name added counts only what the
    /// names grew the folder by. Without it, an attribute's block was counted twice (once
    /// by the attribute, again by the next creation in the folder) and a block given back
    /// left the measure too high, so that the folder's next real growth went uncounted.
    func folderChanged(_ key: InodeKey, by change: Int64) {
        guard change != 0 else { return }
        folders.withLock { table in
            if let before = table[key] { table[key] = max(0, before.addingSaturated(change)) }
        }
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
    /// Runs `body`, which removes the name `name` of `directory` (unlink, or a rename over
    /// it), counting what that frees. `node` is what the table knows at that name: a file
    /// is measured after the removal, through its own descriptor, while the changes to
    /// it take turns: its link count then says whether that was its last name, even when
    /// other names of it go at the same time, and its blocks are those it has, not those
    /// it had before a write that came in between.
    func countingRemoval(_ directory: Inode, _ name: UnsafePointer<CChar>, _ node: Inode?, _ body: () throws(Errno) -> Void) throws(Errno) {
        guard space.isActive else { return try body() }
        let before = nodeBeforeRemoval(directory, name)
        guard let node, let before, before.st_mode & S_IFMT != S_IFDIR, InodeKey(before) == node.key else {
            try body()
            return countRemoved(before)
        }
        try space.serialized(inodes.ino(node)) { (counted) throws(Errno) in
            try body()
            var after = stat()
            let found = try? inodes.withDescriptor(node) { fd in fstatat(fd, "", &after, clinux_AT_EMPTY_PATH) }
            guard found == 0 else { return countRemoved(before) }
            guard after.st_nlink == 0 else { return }
            space.catchUp(&counted, node.key, Capacity.blockBytes(after))
            space.removed(after)
        }
    }
}

extension FileSystem {
    /// On a `power-loss` mount, runs `unlink`, which removes the journal's link of the file
    /// `key` once its removal is durable and returns the file as it is after; counts what
    /// that frees when it was the file's last link. In the file's turn, as a removal
    /// through the mount: a name of the file removed at the same moment would otherwise
    /// see it freed twice, or never (fsstress with hard links under `power-loss=ext4`).
    func removingJournalLink(_ key: InodeKey, _ unlink: () -> stat?) -> stat? {
        guard space.isActive, let node = inodes.node(key) else {
            let after = unlink()
            if space.isActive, let after, after.st_nlink == 0 { space.removed(after) }
            return after
        }
        return space.serialized(inodes.ino(node)) { counted in
            let after = unlink()
            if let after, after.st_nlink == 0 {
                space.catchUp(&counted, key, Capacity.blockBytes(after))
                space.removed(after)
            }
            return after
        }
    }

    /// Runs `body`, a change that may grow the file `ino` open at `fd` (any descriptor,
    /// `O_PATH` too) by `growth(stat before)` bytes, within the capacity. `body` gets how
    /// many of those bytes fit (all of them, or with `partial` fewer: a short write) and
    /// how many were wanted; nothing fits: `ENOSPC`. Afterwards the blocks the change
    /// really took are counted. The changes to one file take turns: between the two
    /// `fstat`s the file's blocks change by this change alone.
    @inline(__always)
    func withinCapacity<R>(_ ino: fuse_ino_t, _ fd: Int32, partial: Bool, growth: (stat) -> Int64,
                           _ body: (_ fitting: Int64, _ wanted: Int64) throws(Errno) -> R) throws(Errno) -> R {
        guard space.isActive else { return try body(0, 0) }
        return try space.serialized(ino) { (counted) throws(Errno) -> R in
            var before = stat()
            try sys { fstat(fd, &before) }
            let key = InodeKey(before)
            space.catchUp(&counted, key, Capacity.blockBytes(before))
            let wanted = max(0, growth(before))
            let granted = space.reserve(wanted)
            if granted < wanted, granted == 0 || !partial {
                space.settle(reserved: granted, actual: 0)
                throw Errno(ENOSPC)
            }
            defer {
                var after = stat()
                let found = fstat(fd, &after) == 0
                let actual = found ? Capacity.blockBytes(after).subtractingSaturated(Capacity.blockBytes(before)) : granted
                space.settle(reserved: granted, actual: actual)
                if found, counted[key] != nil { counted[key] = Capacity.blockBytes(after) }
            }
            return try body(granted, wanted)
        }
    }

    /// Runs `body`, which opens the file `node` (`ino`) with `O_TRUNC`, counting what the
    /// truncation frees.
    @inline(__always)
    func countingTruncation<R>(_ ino: fuse_ino_t, _ node: Inode, _ body: () throws(Errno) -> R) throws(Errno) -> R {
        guard space.isActive else { return try body() }
        return try space.serialized(ino) { (counted) throws(Errno) -> R in
            let before = blockBytes(of: node)
            if let before { space.catchUp(&counted, node.key, before) }
            let result = try body()
            if let before, let after = blockBytes(of: node) {
                space.settle(reserved: 0, actual: after.subtractingSaturated(before))
                if counted[node.key] != nil { counted[node.key] = after }
            }
            return result
        }
    }

    /// `fsync` of the file `ino` open at `fd`: the store's file system may allocate blocks
    /// as it writes the file back (extent blocks of a file with holes), counted here.
    func sync(_ ino: fuse_ino_t, _ fd: Int32, dataOnly: Bool) -> Int32 {
        let synced = { dataOnly ? fdatasync(fd) : fsync(fd) }
        guard space.isActive, let node = try? inodes.inode(ino) else { return synced() }
        return space.serialized(ino) { counted in
            let result = synced()
            let error = errno
            var info = stat()
            if fstat(fd, &info) == 0 { space.catchUp(&counted, node.key, Capacity.blockBytes(info)) }
            errno = error
            return result
        }
    }

    /// Counts the store again (a change behind the mount, or `containerfs capacity`),
    /// keeping the open files with no name, which a walk cannot see: unlinked through the
    /// mount, never named, or removed behind it (a purge of a file a program writes);
    /// those are held from here on, freed at their last close. On a `power-loss` mount,
    /// also the removed files the journal keeps until their removal is durable.
    func recount() {
        guard space.isActive else { return }
        space.recount(store) { open in
            open.reduce(Int64(0)) { total, key in
                var info = stat()
                guard let node = inodes.node(key),
                      (try? inodes.withDescriptor(node) { fd in fstatat(fd, "", &info, clinux_AT_EMPTY_PATH) }) == 0,
                      info.st_nlink == 0 else { return total }
                _ = space.holdUnlinked(key)
                return total.addingSaturated(Capacity.blockBytes(info))
            }.addingSaturated(powerLoss?.journalOnlyBytes() ?? 0)
        }
    }

    /// Runs `body`, a request that may change the space a container with a capacity uses,
    /// never while the daemon counts the store again (`recount`).
    @inline(__always)
    func countingChange(_ body: () -> Void) {
        guard space.isActive else { return body() }
        space.duringChange(body)
    }

    /// The bytes a write of `count` bytes at `offset` may add: the part of it beyond the
    /// blocks the file has (an overwrite of allocated data takes nothing more).
    @inline(__always)
    static func growth(writing count: Int, at offset: off_t, _ info: stat) -> Int64 {
        let end = Int64(offset).addingSaturated(Int64(count))
        let size = Int64(info.st_size)
        // A file with holes may need blocks anywhere: the whole write is reserved.
        if Capacity.blockBytes(info) < size { return Int64(count) }
        // Without holes, the blocks up to the end of the last one the data fills are there;
        // blocks the store's file system keeps past the end (ext4 may) are not counted on.
        let block = max(512, Int64(info.st_blksize))
        let filled = size.addingSaturated(block - 1) / block * block
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
    /// On a `power-loss` mount a `synchronous` write (`O_SYNC`, `O_DSYNC`) makes the file's data durable.
    @inline(__always)
    func write(_ ino: fuse_ino_t, _ fd: Int32, _ buffer: UnsafeRawPointer?, _ size: Int, _ offset: off_t, synchronous: Bool = false) throws(Errno) -> Int {
        if let powerLoss {
            let node = try inodes.inode(ino)
            return try trackingData(node, fd, .write(offset: Int64(offset), count: Int64(size))) { () throws(Errno) in
                let count = try written(ino, fd, buffer, size, offset)
                if synchronous { powerLoss.syncedFile(node.key) }
                return count
            }
        }
        return try written(ino, fd, buffer, size, offset)
    }

    @inline(__always)
    private func written(_ ino: fuse_ino_t, _ fd: Int32, _ buffer: UnsafeRawPointer?, _ size: Int, _ offset: off_t) throws(Errno) -> Int {
        try withinCapacity(ino, fd, partial: true, growth: { Self.growth(writing: size, at: offset, $0) }) { (fitting, wanted) throws(Errno) in
            // The growth that does not fit is cut from the end of the write.
            let cut = Int(clamping: max(0, wanted - fitting))
            return try sys { pwrite(fd, buffer, size - cut, offset) }
        }
    }

    /// Fails a creation with `ENOSPC` when the capacity is reached, as a full disk.
    /// `exists` tells whether the name is already there (then nothing is created).
    @inline(__always)
    func checkSpaceForCreation(exists: () -> Bool = { false }) throws(Errno) {
        guard space.isActive, space.free == 0, !space.awaitRemovals() || space.free == 0, !exists() else { return }
        throw Errno(ENOSPC)
    }

    /// Runs `body`, which adds a name to `directory`, counting the blocks the folder grows
    /// by: without it, empty files with long names pass the capacity unseen. With
    /// `reserving`, a block is reserved first and nothing free means `ENOSPC`, as a full
    /// disk refuses a name its folder has no room for (renames too, or hard links moved
    /// from folder to folder would grow the store without bound).
    @inline(__always)
    func countingFolderGrowth<Result>(_ directory: Inode, reserving: Bool = true, _ body: () throws(Errno) -> Result) throws(Errno) -> Result {
        guard space.isActive else { return try body() }
        if !space.knowsFolder(directory.key), let bytes = blockBytes(of: directory) { space.folderSeen(directory.key, bytes, reserved: 0) }
        let granted = reserving ? space.reserve(Self.folderBlock) : 0
        if reserving, granted == 0 { throw Errno(ENOSPC) }
        let result: Result
        do {
            result = try body()
        } catch {
            space.settle(reserved: granted, actual: 0)
            throw error
        }
        if let bytes = blockBytes(of: directory) { space.folderSeen(directory.key, bytes, reserved: granted) }
        else { space.settle(reserved: granted, actual: 0) }
        return result
    }

    /// What a folder grows by at most when a name is added: one block (ext4's 4 KiB).
    static let folderBlock: Int64 = 4096

    /// Runs `body`, which sets or removes an extended attribute of `node`, within the
    /// capacity: refused when it is reached, and the blocks the attributes take counted
    /// (on ext4 a large value takes a block of its own).
    @inline(__always)
    func countingAttributeBlocks(_ node: Inode, adding: Bool, _ body: () throws(Errno) -> Void) throws(Errno) {
        guard space.isActive else { return try body() }
        if adding, space.free == 0, !space.awaitRemovals() || space.free == 0 { throw Errno(ENOSPC) }
        try space.serialized(inodes.ino(node)) { (counted) throws(Errno) in
            let before = blockBytes(of: node)
            if let before { space.catchUp(&counted, node.key, before) }
            try body()
            if let before, let after = blockBytes(of: node) {
                let change = after.subtractingSaturated(before)
                space.settle(reserved: 0, actual: change)
                if counted[node.key] != nil { counted[node.key] = after }
                // A folder's blocks are also measured as names are added to it.
                if node.type == S_IFDIR { space.folderChanged(node.key, by: change) }
            }
        }
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

    /// The node `ino`, held as an open file while the table kept it (`rename`), goes with
    /// the `bytes` it has (nil: measured here, a file that kept a name): as at a last
    /// close, counted and freed when it has no name left and no program holds it open.
    func releaseHeld(_ ino: fuse_ino_t, _ key: InodeKey, _ bytes: Int64?) {
        // Counted before it stops being waited for (`SpaceAccount.settling`).
        defer { space.letGo(key) }
        space.serialized(ino) { counted in
            let (last, unlinked) = space.closed(key)
            guard last else { return }
            // The last close of a file that keeps a name counts the blocks it has: taken as
            // none, a program's writes counted before it closed (not the last close then,
            // with the hold) were given back while the file kept them.
            let bytes = bytes ?? (try? inodes.inode(ino)).flatMap { blockBytes(of: $0) } ?? 0
            space.catchUp(&counted, key, bytes)
            counted[key] = nil
            if unlinked { space.settle(reserved: bytes, actual: 0) }
        }
    }

    /// After a node lost the name `nodeBeforeRemoval` described.
    @inline(__always)
    func countRemoved(_ info: stat?) {
        if let info { space.removed(info) }
    }

    /// After a program opened (or created) the file `ino` as the store descriptor `fd`.
    @inline(__always)
    func countOpened(_ ino: fuse_ino_t, _ fd: Int32) {
        guard space.isActive, let node = try? inodes.inode(ino) else { return }
        space.serialized(ino) { counted in
            space.opened(node.key)
            // Its last name went before this open was recorded (an open racing an unlink):
            // the removal gave its blocks back, but they stay until its last close, which
            // frees them: they count as held until then.
            var info = stat()
            if node.type == S_IFREG, fstat(fd, &info) == 0, info.st_nlink == 0, space.holdUnlinked(node.key) {
                space.settle(reserved: 0, actual: Capacity.blockBytes(info))
            }
            if counted[node.key] == nil, let bytes = blockBytes(of: node) { counted[node.key] = bytes }
        }
    }

    /// Closes the store descriptor `fd` of the file `ino`, after the changes to it still
    /// under way. Its last close counts what the store's file system changed meanwhile,
    /// and frees it when it has no name. A file whose blocks are not just its data's (holes,
    /// blocks allocated past its end) is written back first: ext4 allocates its extent
    /// blocks then, which would otherwise come later, unseen. The close takes the file's
    /// turn too: closing a file truncated since it was written makes ext4 allocate the
    /// blocks it had only reserved (`auto_da_alloc`), and an `fstat` meanwhile can see them
    /// neither reserved nor allocated; a truncating open measuring the file then counted
    /// nothing freed (about 1 rewrite in 50 of a 1 MiB file).
    @inline(__always)
    func closeCounted(_ ino: fuse_ino_t, _ fd: Int32) {
        guard space.isActive, let node = try? inodes.inode(ino) else {
            close(fd)
            return
        }
        space.serialized(ino) { counted in
            defer { close(fd) }
            let (last, unlinked) = space.closed(node.key)
            var info = stat()
            guard last, fstat(fd, &info) == 0 else { return }
            let block = max(512, Int64(info.st_blksize))
            let plain = Capacity.blockBytes(info) == Int64(info.st_size).addingSaturated(block - 1) / block * block
            if !unlinked, !plain, fdatasync(fd) == 0 { fstat(fd, &info) }
            space.catchUp(&counted, node.key, Capacity.blockBytes(info))
            counted[node.key] = nil
            if unlinked { space.settle(reserved: Capacity.blockBytes(info), actual: 0) }
        }
    }

    /// The store's statistics as the simulated device shows them: the capacity as the
    /// size, what is left of it as free and available (never more than the store's own).
    func capacityStatistics(_ info: statvfs) -> statvfs {
        guard let capacity = space.shownCapacity else { return info }
        _ = space.awaitRemovals()
        var result = info
        let unit = Int64(max(1, info.f_frsize))
        let total = capacity / unit
        let free = space.free / unit
        result.f_blocks = UInt(clamping: total)
        // Free is what the capacity leaves, so that size − free is what the container uses
        // (df's "Used") even when the disk has less room; available is what can really be had.
        result.f_bfree = UInt(clamping: free)
        result.f_bavail = min(info.f_bavail, UInt(clamping: free))
        return result
    }
}
