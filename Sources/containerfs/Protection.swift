import ArgumentParser
import ContainerPolicy
import ContainerStore

extension ProtectionClass: ExpressibleByArgument {
    public init?(argument: String) { self.init(rawValue: argument) }
}

/// The classes, for help texts.
let protectionClassNames = ProtectionClass.allCases.map(\.rawValue).joined(separator: ", ")

struct Protect: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Set the data protection class of files and folders of a container's store.",
        discussion: """
            Classes: \(protectionClassNames). While the device is locked (containerfs lock), a \
            complete file cannot be opened, read or written, even through a descriptor already \
            open; completeUnlessOpen cannot be opened, but what was open keeps working; \
            completeUntilFirstUserAuthentication is unavailable only while locked since boot \
            (mount -o locked, run --locked); none always works. New files and folders take their \
            folder's class. Inside a mount a program sets it with setfattr -n \
            \(ProtectionClass.attributeName). See docs/protection.md.
            """)

    @Argument(help: "Files or folders inside a container's store.")
    var paths: [String] = []

    @Option(name: .customLong("class"), help: ArgumentHelp("The class: \(protectionClassNames).", valueName: "CLASS"))
    var protection: ProtectionClass

    func run() throws {
        try reportingErrors {
            if paths.isEmpty { throw UserError.usage("name at least one file or folder inside a container's store") }
            try ProtectionSetting.protect(rawArguments(paths), protection)   // names are bytes; all or none
        }
    }
}

struct Lock: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Lock the device of a mounted container: protected data becomes unavailable at once.",
        discussion: """
            The device is the container and the group containers it belongs to, mounted by its \
            runs or by hand ('create --group', docs/groups.md): locking an app locks its groups \
            too. A device folder (the folder holding app and group containers) locks every \
            mounted container in it. See 'containerfs protect --help' and docs/protection.md.
            """)

    @Argument(help: "The container's store (mounted, or in a run), or a device folder: see the discussion.")
    var store: String

    func run() throws {
        try reportingErrors { try switchDevice(.lock, store) }
    }
}

struct Unlock: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Unlock the device of a mounted container: protected data is available again.",
        discussion: "As lock: the container and its mounted groups, or every mounted container of a device folder.")

    @Argument(help: "The container's store (mounted, or in a run), or a device folder: see the discussion.")
    var store: String

    func run() throws {
        try reportingErrors { try switchDevice(.unlock, store) }
    }
}

struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show a mounted container's device state, mount point and daemon.")

    @Argument(help: "The container's store (mounted, or in a run).")
    var store: String

    @Flag(help: "Print one JSON object.")
    var json = false

    func run() throws {
        try reportingErrors {
            let opened = try Store.open(store, changing: false)
            let status = try DeviceControl.send(.status, to: opened)
            // The capacity, when the container has one (SPEC §10): the device it simulates.
            let capacity = Capacity.read(opened)
            if json {
                FileHandleOutput.standardOutput.write("{\"store\":\(jsonString(opened.path)),\"state\":\(jsonString(status.state.rawValue)),"
                    + "\"mountpoint\":\(jsonString(status.mountpoint)),\"pid\":\(status.daemonPID),"
                    + "\"defaultProtection\":\(jsonString(opened.defaultProtection.rawValue)),"
                    + "\"capacity\":\(capacity.map(String.init) ?? "null")}\n")
            } else {
                FileHandleOutput.standardOutput.write("""
                    state: \(status.state.text)
                    mount point: \(status.mountpoint)
                    daemon pid: \(status.daemonPID)
                    default protection: \(opened.defaultProtection.rawValue)

                    """ + (capacity.map { "capacity: \(humanBytes($0))\n" } ?? ""))
            }
        }
    }
}

/// Locks or unlocks a device (`Device.stores`): the named store must be mounted; its
/// groups and a device folder's containers are switched where they are mounted.
private func switchDevice(_ command: DeviceControl.Command, _ path: String) throws(UserError) {
    let stores = try Device.stores(path)
    var switched = 0
    for (index, store) in stores.enumerated() {
        let namedStore = index == 0 && stores[0].path == path
        if !namedStore, MountLock.holder(store) == nil { continue }
        let status = try DeviceControl.send(command, to: store)
        FileHandleOutput.standardOutput.write("\(store.path): \(status.state.text)\n")
        switched += 1
    }
    if switched == 0 {
        throw UserError("no container of the device folder \(path) is mounted: the device state belongs to live mounts; start one with 'containerfs mount \(path)/NAME MOUNTPOINT' or 'containerfs run \(path)/NAME --locked -- PROGRAM'")
    }
}
