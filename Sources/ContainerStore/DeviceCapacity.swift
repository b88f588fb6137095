import CLinux
import ContainerPolicy
import Foundation
import Glibc
import Synchronization

/// One device's capacity (docs/capacity.md, "One device's capacity"): a size shared by
/// every container of a device folder (apps and groups), kept in the device's own state
/// folder `DEVICE/.containerfs-device/`:
///
/// - `capacity`: the bytes, as decimal digits (`containerfs capacity DEVICE SIZE`);
/// - `ledger`: the bytes the device's containers use, 8 bytes little-endian, the one count
///   all daemons of the device change, each change under `flock` of the ledger (and a
///   mutex within a daemon, whose threads share one open file);
/// - `attached.lock`: each daemon counting against the device holds it shared for as long
///   as it is mounted; `decide.lock`: held exclusively while a daemon decides whether it is
///   the first (then it walks every container of the device and writes the ledger afresh).
///
/// So the count is TRUE under concurrent writers in several daemons: every growth is
/// reserved in the ledger before it is made and settled after, as the one-store count does
/// (SpaceAccount), and the first daemon to attach counts from the stores themselves.
public enum DeviceCapacity {
    public static let folderName = Array(".containerfs-device".utf8)
    static let capacityName = Array("capacity".utf8)
    static let ledgerName = Array("ledger".utf8)
    static let attachedName = Array("attached.lock".utf8)
    static let decideName = Array("decide.lock".utf8)

    /// The device's state folder in the device folder `deviceFD`; made when `creating`.
    /// nil when it is not there.
    static func stateFolder(_ deviceFD: Int32, creating: Bool) throws(UserError) -> Int32? {
        if creating {
            let made = withCName(folderName) { mkdirat(deviceFD, $0, 0o700) }
            if made != 0, errno != EEXIST { throw UserError.failed("cannot make the device's state folder", Errno.current) }
            var device = stat()
            if made == 0, geteuid() == 0, fstat(deviceFD, &device) == 0 {
                _ = withCName(folderName) { fchownat(deviceFD, $0, device.st_uid, device.st_gid, AT_SYMLINK_NOFOLLOW) }
            }
        }
        let fd = withCName(folderName) { openat(deviceFD, $0, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
        guard fd >= 0 else {
            if errno == ENOENT, !creating { return nil }
            throw UserError.failed("cannot open the device's state folder", Errno.current)
        }
        return fd
    }

    /// The capacity of the device whose state folder is `stateFD`; nil: none (or damaged).
    static func read(stateFD: Int32) -> Int64? {
        guard let bytes = try? readFile(at: stateFD, capacityName, limit: 32),
              let text = String(bytes: bytes, encoding: .utf8)?.trimmingCharacters(in: .newlines),
              let value = Int64(text), value > 0 else { return nil }
        return value
    }

    /// The capacity of the device folder at `path`; nil when it has none.
    public static func read(devicePath path: String) -> Int64? {
        let deviceFD = Glibc.open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard deviceFD >= 0 else { return nil }
        defer { close(deviceFD) }
        guard let state = try? stateFolder(deviceFD, creating: false) else { return nil }
        defer { close(state) }
        return read(stateFD: state)
    }

    /// Gives the device folder at `path` the capacity `bytes` (nil: removes it). Refused
    /// while a container of the device is mounted: its daemon counts against the capacity
    /// it found at mount.
    public static func write(devicePath path: String, _ bytes: Int64?) throws(UserError) {
        let deviceFD = Glibc.open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard deviceFD >= 0 else { throw UserError.failed("cannot open the device folder \(path)", Errno.current) }
        defer { close(deviceFD) }
        guard let state = try stateFolder(deviceFD, creating: bytes != nil) else { return }
        defer { close(state) }
        let attached = try openLock(state, attachedName)
        defer { close(attached) }
        // A daemon mounted before the device had a capacity counts nothing in the ledger:
        // any mounted container refuses the change, attached or not.
        let mounted = (try? Device.stores(path)).flatMap { $0.first { MountLock.holder($0) != nil } }
        guard flock(attached, LOCK_EX | LOCK_NB) == 0, mounted == nil else {
            throw UserError("a container of the device \(path) is mounted: unmount them all (end their runs) before changing the device's capacity")
        }
        do {
            if let bytes {
                let aside = capacityName + Array(".new".utf8)
                _ = withCName(aside) { unlinkat(state, $0, 0) }
                try writeNewFile(at: state, aside, Array("\(bytes)\n".utf8), mode: 0o600)
                try withCName(aside) { (from) throws(Errno) in
                    try withCName(capacityName) { (to) throws(Errno) in _ = try sys { renameat(state, from, state, to) } }
                }
            } else {
                _ = withCName(capacityName) { unlinkat(state, $0, 0) }
            }
        } catch {
            throw UserError.failed("cannot record the device's capacity in \(path)/.containerfs-device", error)
        }
    }

    /// The bytes the containers of the device folder at `path` use, by a walk of each, as
    /// each one's capacity counts them (`Capacity.usedBytes`).
    /// Every container directly in the folder is counted, apps and groups: not
    /// `Device.stores`, which takes a folder without a group for no device and refuses it
    /// (a device whose last group was removed would count as empty, and take any install).
    public static func usedBytes(devicePath path: String) throws(UserError) -> Int64 {
        let folderFD = Glibc.open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard folderFD >= 0 else { throw UserError.failed("cannot open the device folder \(path)", Errno.current) }
        defer { close(folderFD) }
        let base = path.hasSuffix("/") ? path : path + "/"
        // Hidden names are not containers: the state folder, and containers being built aside.
        let names: [[UInt8]]
        do { names = try Directory.entries(of: folderFD).map(\.name).filter { $0.first != UInt8(ascii: ".") } } catch {
            throw UserError.failed("cannot read the device folder \(path)", error)
        }
        return names.reduce(Int64(0)) { total, name in
            guard let store = try? Store.open(at: folderFD, name, path: base + String(decoding: name, as: UTF8.self), changing: false) else { return total }
            return total.addingSaturated(Capacity.usedBytes(rootFD: store.rootFD))
        }
    }

    /// The device's count as its daemons keep it (the ledger), and whether a daemon is
    /// attached now; nil when the device has no ledger yet. Refused, with one line naming
    /// the holder, when another process keeps the ledger locked past `LockWait.patience`.
    public static func ledger(devicePath path: String) throws(UserError) -> (used: Int64, attached: Bool)? {
        let deviceFD = Glibc.open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard deviceFD >= 0 else { return nil }
        defer { close(deviceFD) }
        guard let state = try? stateFolder(deviceFD, creating: false) else { return nil }
        defer { close(state) }
        // A FIFO in its place must not block the command or a daemon: never opened.
        guard let fd = try? openRegularFile(at: state, ledgerName) else { return nil }
        defer { close(fd) }
        try LockWait.take(fd, LOCK_SH, ledgerDescription(path))
        var bytes = [UInt8](repeating: 0, count: 8)
        guard bytes.withUnsafeMutableBytes({ pread(fd, $0.baseAddress, 8, 0) }) == 8 else { return nil }
        flock(fd, LOCK_UN)
        let value = bytes.enumerated().reduce(UInt64(0)) { $0 | UInt64($1.element) << (8 * UInt64($1.offset)) }
        var attached = true
        if let lock = try? openLock(state, attachedName) {
            attached = flock(lock, LOCK_EX | LOCK_NB) != 0
            close(lock)
        }
        return (Int64(clamping: min(value, UInt64(Int64.max))), attached)
    }

    /// What `settleChange` needs: the store's bytes before a command changes it behind
    /// the mounts, when its device has a capacity that a mounted container's daemon counts
    /// (otherwise nil: the next first mount walks the device anyway).
    public struct ChangeMark {
        let devicePath: String
        let before: Int64
    }

    /// Marks `store` (not mounted) before a command changes it.
    public static func markChange(_ store: Store) throws(UserError) -> ChangeMark? {
        let path = Directory.holding(store.resolvedPath)
        guard read(devicePath: path) != nil, try ledger(devicePath: path)?.attached == true else { return nil }
        return ChangeMark(devicePath: path, before: Capacity.usedBytes(rootFD: store.rootFD))
    }

    /// After the change: what it took or freed goes into the device's ledger, under its lock.
    public static func settleChange(_ mark: ChangeMark?, _ store: Store) {
        guard let mark else { return }
        addToLedger(mark.devicePath, Capacity.usedBytes(rootFD: store.rootFD).subtractingSaturated(mark.before))
    }

    /// Adds `change` to the ledger of the device folder at `devicePath`, under its lock.
    static func addToLedger(_ devicePath: String, _ change: Int64) {
        guard change != 0 else { return }
        let deviceFD = Glibc.open(devicePath, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard deviceFD >= 0 else { return }
        defer { close(deviceFD) }
        guard let state = try? stateFolder(deviceFD, creating: false) else { return }
        defer { close(state) }
        let fd = withCName(ledgerName) { openat(state, $0, O_RDWR | O_NOFOLLOW | O_CLOEXEC) }
        guard fd >= 0 else { return }
        defer { close(fd) }
        guard isOwnFile(fd) else { return }
        // The change is made: only a note when the ledger stays locked, not a failure.
        if DeviceLedger.change(fd, within: LockWait.patience, { max(0, $0.addingSaturated(change)) }) == nil {
            let held = LockWait.heldMessage(ledgerDescription(devicePath), waited: LockWait.patience, holder: LockWait.holder(of: fd))
            FileHandleOutput.standardError.write("containerfs: note: \(held); the device's live count misses this change (\(counted(change, "byte"))) until none of its containers is mounted\n")
        }
    }

    /// The ledger of the device folder at `path`, for the line of a command that waited for it.
    static func ledgerDescription(_ path: String) -> String {
        "the device's ledger \(path)/.containerfs-device/ledger"
    }

    /// As `markChange(_:)`, for a command that makes, replaces or changes the store at
    /// `path` (which need not exist yet: then it had nothing). nil when the store is
    /// mounted (its daemon counts its own changes) or its device keeps no live count. The
    /// mount lock held by this very process is no daemon's: `update` holds it to keep
    /// mounts out while it changes the store, and counts what it changed itself.
    public static func markChange(storePath path: String) throws(UserError) -> ChangeMark? {
        if let store = try? Store.open(path, changing: false) {
            let mounted = MountLock.holder(store).map { $0.pid != getpid() } ?? false
            return mounted ? nil : try markChange(store)
        }
        let device = Directory.holding(path)
        guard read(devicePath: device) != nil, try ledger(devicePath: device)?.attached == true else { return nil }
        return ChangeMark(devicePath: device, before: 0)
    }

    /// After the change to the store at `path`.
    public static func settleChange(_ mark: ChangeMark?, storePath path: String) {
        guard let mark else { return }
        let after = (try? Store.open(path, changing: false)).map { Capacity.usedBytes(rootFD: $0.rootFD) } ?? 0
        addToLedger(mark.devicePath, after.subtractingSaturated(mark.before))
    }

    /// Marks the stores at `paths` (made or not yet) before a command changes them behind the
    /// mounts of their device; the closure returned gives what changed to the device's live
    /// count, when a mounted container's daemon keeps one (docs/capacity.md). A store mounted
    /// is left to its daemon. For changes that add nothing to admit (`offload`, `share rm`
    /// and `mv`, the user's deletions and renames of `run --share-edits`); what adds goes
    /// through `DeviceInstall`.
    public static func markChanges(storePaths paths: [String]) throws(UserError) -> () -> Void {
        var marks: [(String, ChangeMark?)] = []
        for path in paths { marks.append((path, try markChange(storePath: path))) }
        return { for (path, mark) in marks { settleChange(mark, storePath: path) } }
    }

    static func openLock(_ state: Int32, _ name: [UInt8]) throws(UserError) -> Int32 {
        let fd = withCName(name) { openat(state, $0, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0o600) }
        guard fd >= 0 else {
            throw UserError.failed("cannot open the device's \(String(decoding: name, as: UTF8.self)) in .containerfs-device", Errno.current)
        }
        guard isOwnFile(fd) else {
            close(fd)
            throw notOwnFile(name)
        }
        ownedLikeTheFolder(fd, state)
        return fd
    }

    /// Whether the file open at `fd` is the device's own: a regular file with no other
    /// name. The device's state folder is its owner's to write: a hard link planted there
    /// to a file of root's (which the kernel allows with `fs.protected_hardlinks` off)
    /// must be neither written (the ledger) nor given to the owner (`ownedLikeTheFolder`)
    /// by root's daemon or command.
    static func isOwnFile(_ fd: Int32) -> Bool { isSoleName(fd) }

    static func notOwnFile(_ name: [UInt8]) -> UserError {
        UserError("the device's \(String(decoding: name, as: UTF8.self)) in .containerfs-device is not a plain file of its own (a FIFO, a device, or a file another name links to): remove it, the next mount makes it anew")
    }

    /// A file root made in the device's state folder belongs to the folder's owner, as the
    /// rest of the device does: the owner's own daemons open it too.
    static func ownedLikeTheFolder(_ fd: Int32, _ state: Int32) {
        ContainerStore.ownedLikeTheFolder(fd, state)
    }
}

/// A daemon's share of its device's capacity (`DeviceCapacity`): the ledger it reserves
/// growth in and settles changes to. Values read from the ledger are bounded: a planted
/// one makes the count wrong, never stops the daemon.
public final class DeviceLedger: Sendable {
    /// The device's capacity in bytes, as found at attach.
    public let capacity: Int64
    private let ledger: Int32
    private let attached: Int32
    /// What a request may not wait for: the ledger's lock held by another process past
    /// `LockWait.requestPatience` (a stopped command, a script holding the file).
    private struct Stall {
        /// Changes made while the ledger was held, given to it at the next change.
        var pending: Int64 = 0
        /// The count last read.
        var lastSeen: Int64 = 0
        /// Whether the last try timed out: the next ones do not wait again, until one succeeds.
        var held = false
    }
    /// The daemon's threads share one open file, which `flock` does not tell apart: one
    /// at a time, under this mutex, which also keeps the stall.
    private let turn = Mutex<Stall>(Stall())
    private let devicePath: String

    private init(capacity: Int64, ledger: Int32, attached: Int32, devicePath: String) {
        self.capacity = capacity
        self.ledger = ledger
        self.attached = attached
        self.devicePath = devicePath
    }

    deinit {
        close(ledger)
        close(attached)
    }

    /// Attaches to the device of `store` (the folder holding it) when it has a capacity;
    /// nil when it has none. The first daemon to attach counts every container of the
    /// device afresh into the ledger; later ones take the ledger as it is.
    public static func attach(_ store: Store) throws(UserError) -> DeviceLedger? {
        let devicePath = Directory.holding(store.resolvedPath)
        let deviceFD = Glibc.open(devicePath, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard deviceFD >= 0 else { return nil }
        defer { close(deviceFD) }
        guard let state = try DeviceCapacity.stateFolder(deviceFD, creating: false) else { return nil }
        defer { close(state) }
        guard let capacity = DeviceCapacity.read(stateFD: state) else { return nil }
        let decide = try DeviceCapacity.openLock(state, DeviceCapacity.decideName)
        defer { close(decide) }
        try LockWait.take(decide, LOCK_EX, "the device's lock \(devicePath)/.containerfs-device/decide.lock (one mount or install deciding at a time)")
        let attached = try DeviceCapacity.openLock(state, DeviceCapacity.attachedName)
        let ledger = withCName(DeviceCapacity.ledgerName) { openat(state, $0, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600) }
        guard ledger >= 0 else {
            close(attached)
            throw UserError.failed("cannot open the device's ledger in \(devicePath)/.containerfs-device", Errno.current)
        }
        guard DeviceCapacity.isOwnFile(ledger) else {
            close(ledger)
            close(attached)
            throw DeviceCapacity.notOwnFile(DeviceCapacity.ledgerName)
        }
        DeviceCapacity.ownedLikeTheFolder(ledger, state)
        let account = DeviceLedger(capacity: capacity, ledger: ledger, attached: attached, devicePath: devicePath)
        if flock(attached, LOCK_EX | LOCK_NB) == 0 {
            // No other daemon counts: the ledger may be stale; the stores say what is used.
            let used = (try? DeviceCapacity.usedBytes(devicePath: devicePath)) ?? 0
            // At mount, not in a request: a ledger held too long fails the mount, as a
            // command's wait does, rather than leave the stale count.
            guard change(ledger, within: LockWait.patience, { _ in used }) != nil else {
                throw UserError(LockWait.heldMessage(DeviceCapacity.ledgerDescription(devicePath), waited: LockWait.patience, holder: LockWait.holder(of: ledger)),
                                exitCode: LockWait.exitCode)
            }
        }
        try LockWait.take(attached, LOCK_SH, "the device's lock \(devicePath)/.containerfs-device/attached.lock")
        return account
    }

    /// The bytes the device's containers use, as the ledger says (while another process
    /// holds it: as it last said, with this daemon's changes since).
    public var used: Int64 { changing { $0 } ?? turn.withLock { max(0, $0.lastSeen.addingSaturated($0.pending)) } }

    /// The bytes left on the device.
    public var free: Int64 { max(0, capacity.subtractingSaturated(used)) }

    /// Reserves up to `wanted` bytes of the device's free space; returns how many it got:
    /// none while another process holds the ledger past a request's patience, so growth
    /// fails with ENOSPC rather than wait, and the capacity is never passed.
    public func reserve(_ wanted: Int64) -> Int64 {
        guard wanted > 0 else { return 0 }
        var granted: Int64 = 0
        _ = changing { used in
            granted = min(wanted, max(0, capacity.subtractingSaturated(used)))
            return used.addingSaturated(granted)
        }
        return granted
    }

    /// Adds `change` bytes (negative: freed) to the count, never below nothing; kept for
    /// the next change while another process holds the ledger.
    public func add(_ change: Int64) {
        guard change != 0 else { return }
        if changing({ max(0, $0.addingSaturated(change)) }) == nil {
            turn.withLock { $0.pending = $0.pending.addingSaturated(change) }
        }
    }

    /// Reads the count, writes back what `update` makes of it, all under the ledger's
    /// lock; returns the new count, or nil when another process holds the lock past a
    /// request's patience (then said once on stderr, and not waited for again until it
    /// is free). An unreadable ledger counts as empty.
    @discardableResult
    private func changing(_ update: (Int64) -> Int64) -> Int64? {
        turn.withLock { stall in
            let patience = stall.held ? 0 : LockWait.requestPatience
            let pending = stall.pending
            guard let count = Self.change(ledger, within: patience, { update(max(0, $0.addingSaturated(pending))) }) else {
                if !stall.held {
                    let line = LockWait.heldMessage(DeviceCapacity.ledgerDescription(devicePath), waited: patience, holder: LockWait.holder(of: ledger))
                    FileHandleOutput.standardError.write("containerfs: \(line); until then growth fails with ENOSPC\n")
                }
                stall.held = true
                return nil
            }
            stall = Stall(pending: 0, lastSeen: count, held: false)
            return count
        }
    }

    /// `changing` on the ledger open at `ledger`, under its `flock`, taken within
    /// `seconds`; nil when it was not.
    static func change(_ ledger: Int32, within seconds: Double, _ update: (Int64) -> Int64) -> Int64? {
        do {
            guard LockWait.attempt(ledger, LOCK_EX, within: seconds) else { return nil }
            defer { flock(ledger, LOCK_UN) }
            var bytes = [UInt8](repeating: 0, count: 8)
            let read = bytes.withUnsafeMutableBytes { pread(ledger, $0.baseAddress, 8, 0) }
            var value: UInt64 = 0
            if read == 8 { for (index, byte) in bytes.enumerated() { value |= UInt64(byte) << (8 * UInt64(index)) } }
            let current = Int64(clamping: min(value, UInt64(Int64.max)))
            let next = update(current)
            guard next != current || read != 8 else { return current }
            let out = (0..<8).map { UInt8(truncatingIfNeeded: UInt64(max(0, next)) >> (8 * UInt64($0))) }
            _ = out.withUnsafeBytes { pwrite(ledger, $0.baseAddress, 8, 0) }
            return next
        }
    }
}
