import ArgumentParser
import ContainerPolicy
import ContainerSigning
import ContainerStore

struct Create: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Make a container: the standard folders and a copy of an app bundle.",
        discussion: """
            STORE must not exist, or be an empty folder. Nothing is left behind on failure. The \
            bundle's copy keeps no set-user-ID, set-group-ID or sticky bit, and no folder of it is \
            writable by others.
            """)

    @Argument(help: "The folder to make the container in.")
    var store: String

    @Option(help: "The app bundle to install: a folder named NAME.app.")
    var bundle: String

    @Option(help: "The installer key that signs the bundle; made if missing (default: $XDG_CONFIG_HOME/containerfs/installer.key, see docs/signing.md).")
    var key: String?

    @Option(help: ArgumentHelp("The class of files and folders without their own (default \(ProtectionClass.containerDefault.rawValue)): \(protectionClassNames).", valueName: "CLASS"))
    var protection: ProtectionClass?

    @Option(help: ArgumentHelp("Give the container a capacity, a simulated device size (see 'containerfs capacity').", valueName: "SIZE"))
    var capacity: String?

    func run() throws {
        try reportingErrors {
            let choice = try capacity.map { (text) throws(UserError) in try parseCapacity(text) }
            // The key first: a key that cannot be had leaves no container behind.
            let installerKey = try InstallerKey.loadOrCreate(at: key)
            if let note = installerKey.creationNote { FileHandleOutput.standardOutput.write(note + "\n") }
            let sign = Store.seal(installerKey)
            let protection = protection
            let path = store
            let created = try Store.create(at: store, bundle: bundle, seal: { rootFD, stateFD, bundleName in
                if let protection { try Store.writeDefaultProtection(protection, stateFD: stateFD) }
                // On the staged copy: a container that would start past its capacity is not made.
                if let bytes = choice?.bytes {
                    let used = Capacity.usedBytes(rootFD: rootFD)
                    if used > bytes {
                        throw UserError("the bundle makes a container of \(used) bytes (\(humanBytes(used))), more than the capacity of \(bytes) bytes asked for: give a larger --capacity; nothing was created at \(path)")
                    }
                    try Capacity.write(stateFD: stateFD, bytes)
                }
                try sign?(rootFD, stateFD, bundleName)
            })
            FileHandleOutput.standardOutput.write("created container \(store) with bundle \(String(decoding: created.layout.bundleName, as: UTF8.self)), signed by \(installerKey.fingerprint); mode 0700: only its owner reads it on disk\n")
        }
    }
}
