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

            --group names an App Group the app belongs to (its entitlement), once per group: \
            the group container is kept beside STORE in the same folder (the device), named by \
            the group's identifier, and made there if missing, as installing a member app makes \
            it on iOS. 'containerfs run' shows each of the app's groups inside the sandbox at \
            /groups/ID and names it in APP_GROUP_NAME (docs/groups.md).

            In a device folder with a capacity ('containerfs capacity DEVICE SIZE'), a container \
            that would not fit in the device's free space is refused, as an App Store install on \
            a full iPhone: the copy built aside is measured in blocks, as du counts, with the \
            group containers --group would make; when the device has less free (its capacity \
            less what all its containers use), one line says how much each is and nothing is \
            left behind (exit 1). See docs/capacity.md, "Installing on a full device".
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

    @Option(help: ArgumentHelp("An App Group the app belongs to, such as group.com.example.shared; repeat for several (docs/groups.md).", valueName: "ID"))
    var group: [String] = []

    func run() throws {
        try reportingErrors {
            // A device with a capacity refuses what does not fit; what fits goes to its live
            // count (docs/capacity.md, "Installing on a full device").
            let device = DeviceInstall(storePaths: [store] + group.map { Store.groupPath($0, besideStore: store) })
            defer { device.finish() }
            let groups = try Store.checkGroupIdentifiers(group)
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
                        throw UserError("the bundle makes a container of \(counted(used, "byte")) (\(humanBytes(used))), more than the capacity of \(counted(bytes, "byte")) asked for: give a larger --capacity; nothing was created at \(path)")
                    }
                    try Capacity.write(stateFD: stateFD, bytes)
                }
                if !groups.isEmpty { try Store.writeMembership(groups, stateFD: stateFD) }
                try sign?(rootFD, stateFD, bundleName)
                // Last, on the complete staged copy and the groups it will make: what the
                // device gains is exactly what it will count (docs/capacity.md).
                let adding = Capacity.usedBytes(rootFD: rootFD).addingSaturated(try Store.missingGroupBytes(groups, besideStore: path))
                try device.admit(adding, "install \(ContainerPath.printable(bundleName)) at \(path)")
            })
            FileHandleOutput.standardOutput.write("created container \(store) with bundle \(String(decoding: created.layout.bundleName, as: UTF8.self)), signed by \(installerKey.fingerprint); mode 0700: only its owner reads it on disk\n")
            for made in try Store.createMissingGroups(groups, besideStore: store) {
                FileHandleOutput.standardOutput.write("created group container \(made)\n")
            }
        }
    }
}

struct CreateGroup: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "create-group",
        abstract: "Make an App Group container: Library/, Library/Caches/, Library/Preferences/ and a root its members write.",
        discussion: """
            The last component of PATH is the group's identifier (group.com.example.shared), and \
            PATH's folder is the device that holds it with its member apps: an app container \
            made in the same folder with '--group ID' is a member, and its 'containerfs run' \
            shows the group at /groups/ID. 'create --group' makes a missing group by itself; \
            this command makes one ahead, with its own protection class or capacity. The group \
            container is mounted, purged, protected, excluded, locked and backed up with the same commands \
            as an app's; backup writes its root down, and restore ARCHIVE DEVICE/ID (no --bundle) makes it again. \
            In a device with a capacity, a group that would not fit in the device's free space \
            is refused and nothing is made, as for create. See docs/groups.md.

              containerfs create-group device/group.com.example.shared
            """)

    @Argument(help: ArgumentHelp("DEVICE/ID: the group container to make, named by the group's identifier.", valueName: "PATH"))
    var path: String

    @Option(help: ArgumentHelp("The class of files and folders without their own (default \(ProtectionClass.containerDefault.rawValue)): \(protectionClassNames).", valueName: "CLASS"))
    var protection: ProtectionClass?

    @Option(help: ArgumentHelp("Give the group container a capacity, a simulated device size (see 'containerfs capacity').", valueName: "SIZE"))
    var capacity: String?

    func run() throws {
        try reportingErrors {
            // A device with a capacity refuses what does not fit; what fits goes to its live
            // count (docs/capacity.md, "Installing on a full device").
            let device = DeviceInstall(storePaths: [path])
            defer { device.finish() }
            let choice = try capacity.map { (text) throws(UserError) in try parseCapacity(text) }
            let protection = protection
            let path = path
            let created = try Store.createGroup(at: path, configure: { rootFD, stateFD in
                if let protection { try Store.writeDefaultProtection(protection, stateFD: stateFD) }
                if let bytes = choice?.bytes { try Capacity.write(stateFD: stateFD, bytes) }
                try device.admit(Capacity.usedBytes(rootFD: rootFD), "make the group container \(path)")
            })
            FileHandleOutput.standardOutput.write("created group container \(created.path) for \(created.groupIdentifier ?? "")\n")
        }
    }
}
