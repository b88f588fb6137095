import ArgumentParser
import ContainerPolicy
import ContainerPurge
import ContainerStore
import Glibc

struct CapacityCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "capacity",
        abstract: "Give a container a capacity (a simulated device size), change it, or remove it.",
        discussion: """
            With a capacity, everything in the container counts against it (bundle and data, in \
            blocks; not the state folder): a write past it fails with ENOSPC as on a full disk, and \
            df inside the container shows it. On a mounted container the change takes effect at the \
            next write. Shrinking below what is used deletes nothing: growth fails until space is \
            freed. Without SIZE, prints the capacity and the space used, counted afresh (on a mounted \
            store by its daemon, which keeps that count): on a store not mounted the count is recorded, so the next mount need not walk the store (run it \
            after changing the store's files by hand). deliver, update and create --capacity refuse \
            what would not fit. mount and run --low-storage, purge --until-free free space before \
            a launch. See docs/capacity.md.

            On a device folder (one holding app and group containers, docs/groups.md) the \
            capacity is the device's, shared by all its containers: a full device refuses growth \
            in any of them, and df in each shows the device's free space. It is changed only while \
            none of them is mounted. A container's own capacity still applies within it. create, \
            create-group, restore, update and deliver into a full device are refused with one line \
            and leave nothing, as an App Store install on a full iPhone. See docs/capacity.md.

            Examples: 'containerfs capacity ~/C 8M'; 'containerfs capacity ~/C none'; \
            'containerfs capacity ~/C' (show, recount).
            """)

    @Argument(help: "The container store, or a device folder (its containers share the capacity).")
    var store: String

    @Argument(help: ArgumentHelp("Bytes, or a number with K, M, G or T (powers of 1024); 'none' removes the capacity.", valueName: "SIZE|none"))
    var size: String?

    func run() throws {
        try reportingErrors {
            // Parsed before the store is opened: bad input leaves it untouched.
            let capacity = try size.map { (text) throws(UserError) in try parseCapacity(text) }
            // A device folder (no store itself): the capacity all its containers share.
            var state = stat()
            // One whose groups were all removed still is, when it has a capacity: shown, changed, removed.
            if lstat(store + "/.containerfs", &state) != 0,
               (try? Device.stores(store)) != nil || DeviceCapacity.read(devicePath: store) != nil {
                return try device(capacity)
            }
            let opened = try Store.open(store, changing: false, replacingCapacity: capacity != nil)
            if let capacity {
                try Capacity.write(opened, capacity.bytes)
                try ControlChannel.capacityChanged(opened)
            }
            let current = Capacity.read(opened)
            // A fresh count; recorded for the next mount, which then need not walk the store
            // (the way to recount after the store was changed by hand: docs/capacity.md). A
            // mounted store's daemon counts afresh itself, and its count is shown: the two
            // agree, and the files it holds open unlinked count, as they do for it.
            let used = try (current != nil ? ControlChannel.recount(opened) : nil) ?? Capacity.usedBytes(rootFD: opened.rootFD)
            if current != nil, MountLock.holder(opened) == nil { Capacity.writeSummary(stateFD: opened.stateFD, used) }
            let shown = current.map { "\(counted($0, "byte")) (\(humanBytes($0)))" } ?? "none"
            FileHandleOutput.standardOutput.write("capacity of \(store): \(shown); used \(counted(used, "byte")) (\(humanBytes(used)))\n")
        }
    }

    /// `capacity DEVICE [SIZE|none]`: the device's capacity, shared by its containers.
    private func device(_ capacity: CapacityChoice?) throws(UserError) {
        if let capacity { try DeviceCapacity.write(devicePath: store, capacity.bytes) }
        let current = DeviceCapacity.read(devicePath: store)
        let used = try DeviceCapacity.usedBytes(devicePath: store)
        let shown = current.map { "\(counted($0, "byte")) (\(humanBytes($0)))" } ?? "none"
        var line = "capacity of the device \(store): \(shown); used \(counted(used, "byte")) (\(humanBytes(used))) in its containers"
        if current != nil, let ledger = try DeviceCapacity.ledger(devicePath: store), ledger.attached {
            line += "; \(counted(ledger.used, "byte")) as its mounted containers' daemons count it"
        }
        FileHandleOutput.standardOutput.write(line + "\n")
    }
}

/// A capacity the command line asks for.
struct CapacityChoice {
    /// The bytes; nil: no capacity.
    var bytes: Int64?
}

/// A capacity from the command line: SIZE, or `none`.
func parseCapacity(_ text: String) throws(UserError) -> CapacityChoice {
    if text == "none" { return CapacityChoice(bytes: nil) }
    guard let bytes = Quantity.bytes(text), bytes > 0 else {
        throw UserError.usage("bad capacity '\(text)': write bytes or a number with K, M, G or T (powers of 1024), as 8M, or 'none'")
    }
    return CapacityChoice(bytes: bytes)
}

/// Frees space in `store` before an app starts, as `--low-storage TEXT` (or
/// `--until-free`) asks, and prints what went.
func purgeForLowStorage(_ store: Store, _ text: String, option: String, kinds: [TagKind] = [.temporary, .cache]) throws(UserError) {
    let wanted = try LowStorage.threshold(text, for: store, option: option)
    printLowStorage(store, wanted, try LowStorage.purge(store, until: wanted, kinds: kinds))
}

/// What a low-storage purge of `store` to `wanted` bytes free did, as lines.
func printLowStorage(_ store: Store, _ wanted: Int64, _ report: LowStorage.Report) {
    let output = FileHandleOutput.standardOutput
    guard report.freeBefore < wanted else { return }
    if report.temporaryEntries > 0 { output.write("low storage: emptied \(store.path)/tmp (\(counted(report.temporaryEntries, "entry", "entries")))\n") }
    for item in report.caches?.deleted ?? [] {
        output.write("low storage: purged \(store.path)/\(shownPath(item.tag.path))  \(counted(item.tag.size, "byte"))\n")
    }
    output.write("low storage: \(store.path) had \(humanBytes(report.freeBefore)) free, now \(humanBytes(report.freeAfter)) (asked for \(humanBytes(wanted)))\n")
}
