import ArgumentParser
import ContainerLifecycle
import ContainerPolicy
import ContainerStore

struct Update: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Install a new version of a container's app, keeping its data (or reinstall an offloaded app).",
        discussion: """
            The new bundle is copied and signed aside in the store's state folder, checked \
            against its signature, then switched in with the signed manifest as one step: a \
            failure or a crash at any point leaves the old app or the new one installed and \
            verifying, never neither (an interrupted switch is finished the next time the \
            store is opened). Documents, Library and Library/Caches stay; tmp/ is emptied, as \
            iOS terminates an app to update it. The new version may have another bundle name \
            (Notes.app → Notes2.app): the container's layout follows it. Refused while the \
            container is mounted or a program runs in it. See docs/lifecycle.md.

            The new bundle must fit: what it takes in blocks beyond the old bundle and tmp/ is \
            held to the container's capacity, and, in a device folder with a capacity, to the \
            device's free space (with the group containers --group makes), even while other \
            containers of the device are mounted. Otherwise one line says how much it adds and \
            how much is free, the copy aside is removed and the old app stays installed (exit 1). \
            See docs/capacity.md, "Installing on a full device".

            --group replaces the app's App Groups with those named (the new version's \
            entitlements), making a missing group container beside STORE; without it the \
            groups stay as they were. See docs/groups.md.
            """)

    @Argument(help: "The container's store.")
    var store: String

    @Option(help: "The new version's bundle: a folder named NAME.app.")
    var bundle: String

    @Option(help: ArgumentHelp("An App Group the new version belongs to; repeat for several. Replaces the groups recorded before (docs/groups.md).", valueName: "ID"))
    var group: [String] = []

    @Option(help: "The installer key the container was installed with (default: see docs/signing.md).")
    var key: String?

    func run() throws {
        try reportingErrors {
            // A device with a capacity refuses an update that does not fit, with the groups it
            // makes; what fits goes to its live count (docs/capacity.md, "Installing on a
            // full device").
            let device = DeviceInstall(storePaths: [store] + group.map { Store.groupPath($0, besideStore: store) })
            defer { device.finish() }
            let groups = try Store.checkGroupIdentifiers(group)
            let path = store
            let summary = try Lifecycle.update(store: store, bundle: bundle, keyPath: key) { (growth, what) throws(UserError) in
                try device.admit(growth.addingSaturated(try Store.missingGroupBytes(groups, besideStore: path)), what, need: "the update adds")
            }
            if !group.isEmpty {
                let opened = try Store.open(store)
                do { try opened.recordMembership(groups) } catch {
                    throw UserError("updated \(store), but could not record its groups: \(error); run the update again")
                }
                for made in try Store.createMissingGroups(groups, besideStore: store) {
                    FileHandleOutput.standardOutput.write("created group container \(made)\n")
                }
            }
            let new = ContainerPath.printable(summary.newName), old = ContainerPath.printable(summary.oldName)
            let what = summary.reinstalled ? "reinstalled \(new) in \(store)" : "updated \(store): \(old) replaced by \(new)"
            FileHandleOutput.standardOutput.write(
                "\(what) (\(counted(summary.files, "file")), \(counted(summary.bytes, "byte")), signed); Documents, Library and caches kept; tmp/ emptied (\(counted(summary.temporaryEntries, "entry", "entries")))\n"
                + (summary.closedToOthers ? "made \(store) mode 0700: other users no longer read it on disk (mounts still serve them through the rules)\n" : "")
            )
        }
    }
}

struct Offload: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Remove a container's app bundle and keep its data, as iOS's Offload App.",
        discussion: """
            Keeps a record of the bundle (name, signed manifest digest, size) in the state \
            folder. Until 'containerfs update STORE --bundle PATH/NAME.app' reinstalls it, \
            mount, run and verify refuse, naming update; usage shows the bundle offloaded; \
            backup and restore work as before. Refused while the container is mounted or a \
            program runs in it. See docs/lifecycle.md.
            """)

    @Argument(help: "The container's store.")
    var store: String

    func run() throws {
        try reportingErrors {
            // Changed behind the device's mounts: given to its live count (docs/capacity.md).
            let settle = try DeviceCapacity.markChanges(storePaths: [store])
            defer { settle() }
            let record = try Lifecycle.offload(store: store)
            FileHandleOutput.standardOutput.write(
                "offloaded \(ContainerPath.printable(record.bundleName)) from \(store) (\(counted(record.files, "file")), \(counted(record.bytes, "byte")); manifest SHA-256 \(record.manifestDigest)); its data is kept: reinstall it with 'containerfs update \(store) --bundle PATH/\(ContainerPath.printable(record.bundleName))'\n"
            )
        }
    }
}
