import ArgumentParser
import ContainerBackup
import ContainerObjectStore
import ContainerPolicy
import ContainerSigning
import ContainerStore
import Foundation

/// `containerfs backup STORE ARCHIVE [--list] [--json]`.
struct BackupCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "backup",
        abstract: "Back a container up: Documents/ and Library/ (not Library/Caches/), minus excluded items.",
        discussion: """
            Writes a pax tar archive (readable by GNU tar and bsdtar) holding the backup set with \
            modes, times, symlinks, hard links and user.* extended attributes, and as its first \
            entry a manifest with the SHA-256 of every file and the bundle's identity. A file with \
            holes (a sparse file) is stored as its data regions and a map, in GNU tar's sparse \
            format, so its holes take no room in the archive; the sizes printed are apparent \
            sizes (as ls -l shows them), and the data stored is printed apart. Works \
            whether or not the container is mounted; each file is read consistently even while \
            an app writes it. The archive appears only once complete, mode 0600 (it holds files \
            others may not read), built under an unpredictable hidden name. ARCHIVE may be \
            s3://BUCKET/KEY: the archive is streamed to an S3-compatible store as a multipart \
            upload, configured as the AWS tools are (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, \
            AWS_SESSION_TOKEN, AWS_REGION, AWS_ENDPOINT_URL, AWS_PROFILE, AWS_CA_BUNDLE); an \
            interrupted upload leaves nothing at KEY. See docs/backup.md.
            """)

    @Argument(help: "The container's store.")
    var store: String

    @Argument(help: "The archive file to write, or s3://BUCKET/KEY (not needed with --list).")
    var archive: String?

    @Flag(help: "Print what would be backed up, with sizes and the total, and write nothing.")
    var list = false

    @Flag(help: "Print JSON.")
    var json = false

    func validate() throws {
        if !list, archive == nil { throw ValidationError("name the archive file to write, or use --list") }
    }

    func run() throws {
        try reportingErrors {
            let opened = try Store.open(store, changing: false)
            let set = try BackupSet.scan(opened)
            if list {
                printList(set)
                return
            }
            let bar = ProgressBar("backup")
            let summary: ContainerBackup.BackupSummary
            do {
                if ObjectURL.isObjectURL(archive!) {
                    let url = try ObjectURL(parsing: archive!, requireKey: true)
                    summary = try ObjectStoreBackup.upload(opened, set: set, to: url, config: try ObjectStoreConfig.load()) { bar.update($0, $1) }
                } else {
                    summary = try Backup.write(opened, set: set, to: archive!) { bar.update($0, $1) }
                }
                bar.finish()
            } catch {
                bar.finish()
                throw error
            }
            if json {
                printJSON([
                    "archive": archive!, "entries": summary.entries, "files": summary.files, "bytes": summary.bytes,
                    "dataBytes": summary.dataBytes, "sparseFiles": summary.sparseFiles, "archiveBytes": summary.archiveBytes, "manifestSHA256": hex(summary.manifestDigest),
                    "vanished": summary.vanished.map { ContainerPath.printable($0.bytes) }, "excluded": set.excluded.map { ContainerPath.printable($0.path.bytes) },
                ])
            } else {
                FileHandleOutput.standardOutput.write(
                    "backed up \(counted(summary.entries, "entry", "entries")) (\(counted(summary.files, "file")), \(formatBytes(summary.bytes))) of \(store) to \(archive!) (\(formatBytes(summary.archiveBytes)))\n")
                if summary.sparseFiles > 0 {
                    // Sizes above are apparent sizes; holes take no room in the archive.
                    FileHandleOutput.standardOutput.write(
                        "sparse: \(counted(summary.sparseFiles, "file")) with holes, stored as their data (\(formatBytes(summary.dataBytes)) of file data in all)\n")
                }
                if !set.excluded.isEmpty {
                    FileHandleOutput.standardOutput.write("excluded: \(counted(set.excluded.count, "item")) (see --list)\n")
                }
                for path in summary.vanished {
                    FileHandleOutput.standardError.write("containerfs: note: \(path) was deleted during the backup and is not in it\n")
                }
            }
        }
    }

    private func printList(_ set: BackupSet) {
        let files = set.items.filter { $0.kind == .file && $0.hardLinkTarget == nil }
        if json {
            let items: [[String: Any]] = set.items.map { item in
                var entry: [String: Any] = ["path": ContainerPath.printable(item.path.bytes), "type": item.hardLinkTarget == nil ? item.kind.rawValue : "hardlink", "size": item.size]
                if let target = item.hardLinkTarget { entry["target"] = ContainerPath.printable(target.bytes) }
                if let target = item.symlinkTarget { entry["target"] = ContainerPath.printable(target) }
                return entry
            }
            printJSON([
                "store": store, "items": items, "totalBytes": set.totalBytes, "files": files.count,
                "excluded": set.excluded.map { ["path": ContainerPath.printable($0.path.bytes), "type": $0.kind.rawValue] },
                "skipped": set.skipped.map { ContainerPath.printable($0.bytes) },
            ])
            return
        }
        var out = ""
        for item in set.items {
            switch item.kind {
            case .directory: out += pad("-") + "  \(item.path)/\n"
            case .symlink: out += pad("-") + "  \(item.path) -> \(ContainerPath.printable(item.symlinkTarget ?? []))\n"
            case .file:
                if let target = item.hardLinkTarget {
                    out += pad("-") + "  \(item.path) (hard link to \(target))\n"
                } else {
                    out += pad(String(item.size)) + "  \(item.path)\n"
                }
            }
        }
        for (path, kind) in set.excluded { out += pad("excluded") + "  \(path)\(kind == .directory ? "/" : "")\n" }
        for path in set.skipped { out += pad("skipped") + "  \(path) (a FIFO, socket or device: not backed up)\n" }
        out += "total: \(counted(set.totalBytes, "byte")) (\(formatBytes(set.totalBytes))) in \(counted(files.count, "file")), \(counted(set.items.count, "entry", "entries"))\n"
        FileHandleOutput.standardOutput.write(out)
    }

    private func pad(_ text: String) -> String {
        String(repeating: " ", count: max(0, 12 - text.count)) + text
    }
}

/// `containerfs restore ARCHIVE STORE --bundle PATH/Name.app`.
struct RestoreCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "restore",
        abstract: "Make a container from a backup, as a device restored from backup.",
        discussion: """
            Builds the container aside — the data, empty Library/Caches and tmp, a fresh install \
            of the bundle — checking every entry against the archive's manifest as it is read, and \
            renames it into place only when the whole archive verified: a corrupt, truncated or \
            hostile archive (.. or absolute paths, entries through symlinks or outside the backup \
            set, device files, FIFOs, a sparse map out of order or past its size) is refused and \
            nothing is written. A sparse file comes back sparse: its apparent size set, only its \
            data written. STORE must not exist, or \
            be an empty folder. Restored files belong to whoever runs restore and keep no \
            set-user-ID, set-group-ID or sticky bit; no folder is writable by others. ARCHIVE may be \
            s3://BUCKET/KEY (configured as for backup): the object is read as it is downloaded, in \
            bounded memory, and a download cut off resumes where it stopped. See docs/backup.md.

            A group container's archive (backup DEVICE/ID) restores without --bundle to a path \
            named by the group's identifier, DEVICE/ID: its root, Library/ and Library/Preferences/ \
            as they were, Library/Caches/ empty (docs/groups.md).

            In a device folder with a capacity ('containerfs capacity DEVICE SIZE'), the restored \
            container built aside is measured in blocks, as du counts, with the group containers \
            --group would make, before it is put in place: when it would not fit in the device's \
            free space it is refused with one line, exit 1, and nothing is written (see \
            docs/capacity.md, "Installing on a full device").
            """)

    @Argument(help: "The backup archive, or s3://BUCKET/KEY.")
    var archive: String

    @Argument(help: "The folder to make the container in.")
    var store: String

    @Option(help: "The app bundle to install: a folder named NAME.app, the app the backup is of (none for a group container's archive).")
    var bundle: String?

    @Option(help: "The installer key that signs the bundle, as for create (default: $XDG_CONFIG_HOME/containerfs/installer.key).")
    var key: String?

    @Option(help: ArgumentHelp("An App Group the restored app belongs to, as for create (a backup holds data, not entitlements); repeat for several.", valueName: "ID"))
    var group: [String] = []

    @Flag(help: "Print JSON.")
    var json = false

    func run() throws {
        try reportingErrors {
            // A device with a capacity refuses what does not fit; what fits goes to its live
            // count (docs/capacity.md, "Installing on a full device").
            let device = DeviceInstall(storePaths: [store] + group.map { Store.groupPath($0, besideStore: store) })
            defer { device.finish() }
            let groups = try Store.checkGroupIdentifiers(group)
            if !groups.isEmpty, bundle == nil { throw UserError.usage("--group goes with --bundle: only an app belongs to groups") }
            // On the restored container built aside, with the groups it will make: what the
            // device gains is exactly what it will count. The target is new or an empty
            // folder (never a container): its whole size is what is added.
            let path = store
            let admit: Restore.Admit = { (rootFD) throws(UserError) in
                let adding = Capacity.usedBytes(rootFD: rootFD).addingSaturated(try Store.missingGroupBytes(groups, besideStore: path))
                try device.admit(adding, "restore into \(path)")
            }
            // As create: the key first, so a key that cannot be had writes nothing.
            let installerKey = try InstallerKey.loadOrCreate(at: key)
            if let note = installerKey.creationNote { FileHandleOutput.standardOutput.write(note + "\n") }
            let bar = ProgressBar("restore")
            let summary: RestoreSummary
            do {
                let update = { (done: Int64, total: Int64) in bar.update(done, total) }
                if ObjectURL.isObjectURL(archive) {
                    let url = try ObjectURL(parsing: archive, requireKey: true)
                    guard let bundle else { throw UserError.usage("name the app's bundle with --bundle: a group container restores from an archive file") }
                    summary = try ObjectStoreBackup.restore(from: url, config: try ObjectStoreConfig.load(), to: store, bundle: bundle,
                                                            installerKey: installerKey, progress: update, admit: admit)
                } else {
                    summary = try Restore.restore(archive: archive, to: store, bundle: bundle, installerKey: installerKey, progress: update, admit: admit)
                }
                bar.finish()
            } catch {
                bar.finish()
                throw error
            }
            if !groups.isEmpty {
                let restored = try Store.open(store)
                do { try restored.recordMembership(groups) } catch {
                    throw UserError("restored \(store), but could not record its groups: \(error); record them with 'containerfs update \(store) --bundle … --group ID'")
                }
                for made in try Store.createMissingGroups(groups, besideStore: store) {
                    FileHandleOutput.standardOutput.write("created group container \(made)\n")
                }
            }
            let bundleName = ContainerPath.printable(summary.bundleName)
            if bundle == nil, !json {
                FileHandleOutput.standardOutput.write("restored \(counted(summary.entries, "entry", "entries")) (\(formatBytes(summary.bytes))) from \(archive) into the group container \(store) (\(bundleName))\n")
                return
            }
            if json {
                printJSON(["store": store, "entries": summary.entries, "bytes": summary.bytes, "dataBytes": summary.dataBytes, "bundle": bundleName])
            } else {
                FileHandleOutput.standardOutput.write(
                    "restored \(counted(summary.entries, "entry", "entries")) (\(formatBytes(summary.bytes))) from \(archive) into \(store), with a fresh install of \(bundleName) signed by \(installerKey.fingerprint); mode 0700: only its owner reads it on disk\n")
            }
        }
    }
}

/// `containerfs exclude PATH…`.
struct ExcludeCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "exclude",
        abstract: "Keep files or folders out of backups (a folder: its whole subtree).",
        discussion: """
            Sets the extended attribute \(BackupExclusion.attributeName) to 1. PATH is in a \
            container's store, or in a mounted container (then set through the mount). Programs \
            inside a container can do the same: setfattr -n \(BackupExclusion.attributeName) -v 1 FILE.

            All or none: every PATH is found and its change asked for before any is changed, so \
            one missing or refused (an Inbox file through the mount, a file this user may not \
            change) leaves them all as they were.
            """)

    @Argument(help: "Files or folders in a container.")
    var paths: [String]

    func run() throws {
        try reportingErrors {
            _ = try BackupExclusion.set(true, rawPaths: rawArguments(paths))   // names are bytes
        }
    }
}

/// `containerfs include PATH…`.
struct IncludeCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "include",
        abstract: "Back up files or folders again (removes the exclusion attribute).",
        discussion: "Says so when a folder above PATH is still excluded. All or none, as exclude: one PATH missing or refused leaves them all as they were.")

    @Argument(help: "Files or folders in a container.")
    var paths: [String]

    func run() throws {
        try reportingErrors {
            for note in try BackupExclusion.set(false, rawPaths: rawArguments(paths)) {
                FileHandleOutput.standardError.write("containerfs: note: \(note)\n")
            }
        }
    }
}

/// Prints a JSON object on one line, keys sorted.
func printJSON(_ object: [String: Any]) {
    let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data()
    FileHandleOutput.standardOutput.write(String(decoding: data, as: UTF8.self) + "\n")
}

private func hex(_ bytes: [UInt8]) -> String {
    bytes.map { String($0, radix: 16).count == 1 ? "0" + String($0, radix: 16) : String($0, radix: 16) }.joined()
}
