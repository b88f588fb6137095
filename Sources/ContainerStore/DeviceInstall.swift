import ContainerPolicy
import Glibc

/// Installing on a full device (docs/capacity.md, "Installing on a full device"): `create`,
/// `create-group` and `restore` into a device folder with a capacity refuse a container
/// that would not fit in the device's free space, as an App Store install on a full iPhone
/// is refused, and leave nothing behind; `update`, `deliver` and `share put` so refuse what
/// they add.
///
/// The container is built aside first (a hidden sibling, which no count of the device
/// includes) and measured there exactly as the device counts it (`Capacity.usedBytes`:
/// allocated blocks, as `du`); `admit` then decides, and holds the device's `decide.lock`
/// until `finish`, after the container (and the groups made with it) is in place:
///
/// - a daemon of the device attached: its ledger is the count (it holds growth in flight
///   and files open unlinked); the bytes are checked and reserved in it in one step under
///   its `flock`, as a daemon reserves a write, and `finish` settles the reservation to
///   what the paths really changed by;
/// - none: a walk of the device's containers is the count; holding `decide.lock` keeps
///   every other install out until this one is in place (and a daemon's first attach,
///   which walks), so two installs never both take the last free space.
///
/// `update`, `deliver` and `share put` admit the same way what they add to an existing
/// container (the new bundle less the old one and `tmp/`; the files for the Inbox, or for
/// `Documents/` less the file replaced, copied aside in the state folder, which no count
/// includes). A container mounted itself is counted by its daemon: `deliver` and `share
/// put` have it recount before `finish` gives the reservation back, so that the ledger
/// never misses the file meanwhile.
///
/// It replaces `markChange`/`settleChange` for these commands: the change goes to the
/// ledger once, net of the reservation.
public final class DeviceInstall {
    /// The device folder: the folder holding the paths.
    public let devicePath: String
    private let paths: [String]
    private var decide: Int32 = -1
    private var marks: [DeviceCapacity.ChangeMark?] = []
    private var reserved: Int64 = 0

    /// For a command that makes the stores at `paths` (a container and the groups beside
    /// it: one device folder, the first path's).
    public init(storePaths paths: [String]) {
        self.paths = paths
        devicePath = Directory.holding(paths.first ?? ".")
    }

    deinit { finish() }

    /// Refuses, with one line, `bytes` more on the device when they do not fit in its free
    /// space; otherwise counts them in. `what` names the install ("install Demo.app at
    /// device/App"), `need` what takes the bytes ("the container needs", "the delivery
    /// adds"). Nothing to do on a device without a capacity. Call it once, on the complete
    /// container (bundle, delivery) built aside, just before it is renamed into place. A
    /// change that adds nothing (an update to a smaller bundle) always fits, even on a
    /// device already past its capacity, and is still settled by `finish`.
    public func admit(_ bytes: Int64, _ what: String, need: String = "the container needs") throws(UserError) {
        guard decide < 0, let capacity = DeviceCapacity.read(devicePath: devicePath) else { return }
        let bytes = max(0, bytes)  // so that `finish` can negate the reservation
        let deviceFD = Glibc.open(devicePath, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard deviceFD >= 0 else { throw UserError.failed("cannot open the device folder \(devicePath)", Errno.current) }
        defer { close(deviceFD) }
        guard let state = try DeviceCapacity.stateFolder(deviceFD, creating: false) else { return }
        defer { close(state) }
        decide = try DeviceCapacity.openLock(state, DeviceCapacity.decideName)
        // Held until finish: no other install decides, and no daemon attaches first (and
        // walks a device that lacks this container), before this one is in place.
        try LockWait.take(decide, LOCK_EX, "the device's lock \(devicePath)/.containerfs-device/decide.lock (one install or first mount deciding at a time)")
        var used: Int64
        if try DeviceCapacity.ledger(devicePath: devicePath)?.attached == true {
            let ledger = withCName(DeviceCapacity.ledgerName) { openat(state, $0, O_RDWR | O_NOFOLLOW | O_CLOEXEC) }
            guard ledger >= 0 else {
                throw UserError.failed("cannot open the device's ledger in \(devicePath)/.containerfs-device", Errno.current)
            }
            defer { close(ledger) }
            var fits = false
            used = 0
            let changed = DeviceLedger.change(ledger, within: LockWait.patience) { count in
                used = count
                fits = bytes == 0 || count.addingSaturated(bytes) <= capacity
                return fits ? count.addingSaturated(bytes) : count
            }
            guard changed != nil else {
                throw UserError(LockWait.heldMessage(DeviceCapacity.ledgerDescription(devicePath), waited: LockWait.patience, holder: LockWait.holder(of: ledger)),
                                exitCode: LockWait.exitCode)
            }
            if fits {
                reserved = bytes
                // What the daemons did not count: the paths not mounted, as they are now.
                for path in paths { marks.append(try DeviceCapacity.markChange(storePath: path)) }
                return
            }
        } else {
            // A change that adds nothing fits without a count.
            if bytes == 0 { return }
            // As a first daemon counts the device: a walk of each of its containers.
            used = (try? DeviceCapacity.usedBytes(devicePath: devicePath)) ?? 0
            if used.addingSaturated(bytes) <= capacity { return }
        }
        throw refusal(bytes, what, need: need, capacity: capacity, used: used)
    }

    /// Refuses `bytes` more that do not fit in the device's free space now, without
    /// reserving them or holding any lock: a first look, so that a batch (`deliver` of
    /// several files) that cannot fit together changes nothing; each part is then admitted
    /// exactly by `admit`.
    public func check(_ bytes: Int64, _ what: String, need: String) throws(UserError) {
        guard bytes > 0, let capacity = DeviceCapacity.read(devicePath: devicePath) else { return }
        let used = try DeviceCapacity.ledger(devicePath: devicePath).flatMap { $0.attached ? $0.used : nil }
            ?? (try? DeviceCapacity.usedBytes(devicePath: devicePath)) ?? 0
        guard used.addingSaturated(bytes) > capacity else { return }
        throw refusal(bytes, what, need: need, capacity: capacity, used: used)
    }

    private func refusal(_ bytes: Int64, _ what: String, need: String, capacity: Int64, used: Int64) -> UserError {
        let free = max(0, capacity.subtractingSaturated(used))
        return UserError(
            "cannot \(what): \(need) \(counted(bytes, "byte")) (\(humanBytes(bytes))) and the device \(devicePath) has \(counted(free, "byte")) (\(humanBytes(free))) free of its capacity of \(counted(capacity, "byte")); nothing was written: free space on the device ('containerfs purge \(devicePath) --caches --tmp --until-free \(bytes)', its containers not running) or raise its capacity ('containerfs capacity \(devicePath) SIZE')")
    }

    /// Settles what the install changed into the device's live count (net of what `admit`
    /// reserved: a failed install gives it all back) and lets the next install decide.
    /// Called once the container is in place or the command failed; idempotent.
    public func finish() {
        guard decide >= 0 else { return }
        if reserved != 0 || marks.contains(where: { $0 != nil }) {
            var change = -reserved
            for (path, mark) in zip(paths, marks) {
                guard let mark else { continue }
                let after = (try? Store.open(path, changing: false)).map { Capacity.usedBytes(rootFD: $0.rootFD) } ?? 0
                change = change.addingSaturated(after.subtractingSaturated(mark.before))
            }
            DeviceCapacity.addToLedger(devicePath, change)
        }
        reserved = 0
        marks = []
        close(decide)
        decide = -1
    }
}

extension Store {
    /// The bytes the group containers of `identifiers` missing beside `storePath` will
    /// take once made: each built aside as `createGroup` builds it, measured as the
    /// capacity counts, and removed. What `create --group` adds to a device beyond the app.
    public static func missingGroupBytes(_ identifiers: [String], besideStore storePath: String) throws(UserError) -> Int64 {
        guard !identifiers.isEmpty else { return 0 }
        let parentPath = splitParent(storePath).parent
        let parentFD = Glibc.open(parentPath, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard parentFD >= 0 else { throw UserError.failed("cannot open the device folder \(parentPath)", Errno.current) }
        defer { close(parentFD) }
        var total: Int64 = 0
        for identifier in identifiers {
            let leaf = Array(identifier.utf8)
            var info = stat()
            if withCName(leaf, { fstatat(parentFD, $0, &info, AT_SYMLINK_NOFOLLOW) }) == 0 { continue }
            // What a measure killed halfway left goes first.
            _ = StagingName.removeAbandoned(in: parentFD, beside: leaf, "measuring")
            let path = groupPath(identifier, besideStore: storePath)
            let (staging, lock) = try buildGroupAsideHeld(in: parentFD, leaf, "measuring", path: path)
            if let rootFD = try? openDirectory(at: parentFD, staging) {
                total = total.addingSaturated(Capacity.usedBytes(rootFD: rootFD))
                close(rootFD)
            }
            removeTree(at: parentFD, staging)
            close(lock)
        }
        return total
    }
}
