import ContainerPolicy
import ContainerPurge
import ContainerSigning
import ContainerStore
import Glibc

/// The app's lifecycle on the device (SPEC §12): `update` installs a new version over the
/// data of the old one, `offload` removes the bundle and keeps the data.
///
/// Its own target because it combines two domains of one level — signing the new bundle
/// (ContainerSigning) and emptying `tmp/` (ContainerPurge) — which must not import each
/// other. The switch itself, which `Store.open` must be able to finish after a crash, is
/// ContainerStore's `BundleSwitch`; the offload record is its `OffloadRecord`.
public enum Lifecycle {
    /// What an update did.
    public struct UpdateSummary: Sendable {
        /// The bundle installed before (offloaded or not), and the new one.
        public var oldName: [UInt8], newName: [UInt8]
        /// True when the app was offloaded: a reinstall.
        public var reinstalled: Bool
        /// True when the reinstall made the store's top folder 0700.
        public var closedToOthers = false
        /// The new bundle as signed.
        public var entries: Int, files: Int, bytes: UInt64
        /// Entries removed from `tmp/`.
        public var temporaryEntries: Int
    }

    /// Installs the bundle at `bundlePath` as the new version of the app in the store at
    /// `path` (or reinstalls an offloaded app): copied and signed aside, checked, then
    /// switched in by `BundleSwitch`. `Documents`, `Library` and the caches stay; `tmp/` is
    /// emptied. Refused while the container is mounted or a program runs in it.
    ///
    /// `admit` decides, last before the switch, whether the device has room for what the
    /// update adds (SPEC §15, `DeviceInstall`): it gets the bytes in blocks the new bundle
    /// takes beyond the old one and `tmp/` (negative: it frees some) and the change's name
    /// for a message; what it throws refuses the update, the old app left installed.
    public static func update(
        store path: String, bundle bundlePath: String, keyPath: String?,
        admit: (_ growth: Int64, _ what: String) throws(UserError) -> Void = { _, _ in }
    ) throws(UserError) -> UpdateSummary {
        let newName = try Store.checkBundle(bundlePath)
        let store = try Store.open(path)
        try refuseGroup(store, "update")
        let key = try InstallerKey.load(at: keyPath)
        let hold = try Hold(store, doing: "update")
        let oldName = store.layout.bundleName
        if newName != oldName, access(at: store.rootFD, newName) {
            throw UserError(
                "\(path) already holds an entry named \(ContainerPath.printable(newName)) beside its app: remove it from the store first; nothing was changed"
            )
        }
        // Root updating another user's store installs the app as the owner's, as the rest
        // of the store: the owner's offload and update must be able to replace it.
        let working = try Store.buildAside(
            in: store.stateFD, beside: Array(name: "bundle"), "update", bundle: bundlePath,
            seal: Store.seal(key), path: path, owner: Owner.handingTo(rootFD: store.rootFD))
        TestCrashPoint.reach("staged")
        // The staged copy is checked against its fresh signature, so that nothing changed
        // in it between signing and switching (a writer of the store, a bundle changing as
        // it was copied) is ever installed.
        let signed: BundleVerification
        let staged: Store
        do {
            staged = try Store.open(at: store.stateFD, working, path: path, changing: false)
            signed = BundleSignature.verify(staged, key: key, full: true)
        } catch {
            removeTree(at: store.stateFD, working)
            throw error
        }
        if !signed.isIntact {
            removeTree(at: store.stateFD, working)
            let what = signed.problem?.description ?? signed.changes.prefix(3).map(\.summary).joined(separator: ", ")
            throw UserError(
                "the new bundle \(ContainerPath.printable(newName)) changed while it was being installed (\(what)): nothing was changed; run the update again"
            )
        }
        TestCrashPoint.reach("verified")
        // Within the capacity (SPEC §10), and the device's (§15): the new bundle replaces
        // the old one and tmp/ goes.
        do {
            let temporary = StandardDirectory.tmp.path.bytes
            let old = store.offloaded == nil ? Capacity.freedBytes(at: store.rootFD, oldName) : 0
            // What emptying tmp/ frees: all but its CACHEDIR.TAG, which stays.
            var tmpContents = Capacity.contentBytes(at: store.rootFD, temporary)
            if let tmpFD = try? openDirectory(at: store.rootFD, temporary) {
                tmpContents = max(0, tmpContents.subtractingSaturated(Capacity.treeBytes(at: tmpFD, ContainerLayout.cacheTagName)))
                close(tmpFD)
            }
            // The new bundle alone: the rest of the staged container (its folders, its
            // signed state) does not move into the store.
            let new = Capacity.treeBytes(at: staged.rootFD, newName)
            let what = "install \(ContainerPath.printable(newName)) in \(path)"
            try Capacity.checkFits(store, adding: new, removing: old + tmpContents, what)
            try admit(new.subtractingSaturated(old.addingSaturated(tmpContents)), what)
        } catch {
            removeTree(at: store.stateFD, working)
            throw error
        }
        // As iOS terminates the app to update it: its tmp/ goes.
        let emptied = Purge.emptyTemporary(store).removed
        try BundleSwitch.commit(store, working: working, newBundle: newName)
        // As iOS moves an updated or reinstalled app: new UUIDs at the next run (ContainerUUIDs).
        ContainerUUIDs.forget(store)
        withExtendedLifetime(hold) {}
        // A store made before stores were private is closed to other users at a reinstall,
        // as `create` and `restore` make new ones (docs/policy.md).
        var top = stat()
        let closed = store.offloaded != nil && fstat(store.rootFD, &top) == 0 && top.st_mode & 0o077 != 0
            && fchmod(store.rootFD, top.st_mode & 0o700) == 0
        return UpdateSummary(
            oldName: oldName, newName: newName, reinstalled: store.offloaded != nil, closedToOthers: closed,
            entries: signed.entries, files: signed.files, bytes: signed.bytes, temporaryEntries: emptied)
    }

    /// Offloads the app of the store at `path`: records its name, manifest digest and size,
    /// then removes its bundle; the data stays. Refused while it is mounted or running.
    public static func offload(store path: String) throws(UserError) -> OffloadRecord {
        let store = try Store.open(path)
        try refuseGroup(store, "offload")
        if store.offloaded != nil {
            throw UserError(
                "the app \(ContainerPath.printable(store.layout.bundleName)) of \(path) is offloaded already: reinstall it with 'containerfs update \(path) --bundle PATH/\(ContainerPath.printable(store.layout.bundleName))'"
            )
        }
        let hold = try Hold(store, doing: "offload")
        let bundle = StorageUsage.measure(store).areas.first { $0.name == "bundle" }
        let digest =
            BundleSignature.manifestDigest(of: store).map { $0.map { byte in String(byte, radix: 16).leftPadded(2) }.joined() } ?? ""
        let record = OffloadRecord(
            bundleName: store.layout.bundleName, manifestDigest: digest,
            bytes: UInt64(clamping: bundle?.bytes ?? 0), files: bundle?.files ?? 0)
        try OffloadRecord.offload(store, record)
        withExtendedLifetime(hold) {}
        return record
    }

    /// The locks a change of the installed app holds: no other update or offload, no run,
    /// no mount, for its whole length.
    struct Hold {
        let update: BundleSwitch.Lock
        let run: RunLock
        let mount: MountLock

        init(_ store: Store, doing verb: String) throws(UserError) {
            update = try BundleSwitch.Lock.take(store)
            run = try RunLock(store: store)
            // What a run killed with SIGKILL left mounted stays recorded for the next run to clear.
            if let abandoned = run.abandonedMountpoint { run.record(mountpoint: abandoned) }
            if let holder = MountLock.holder(store) {
                throw UserError(
                    "store \(store.path) is mounted at \(holder.mountpoint) (daemon pid \(holder.pid)): unmount it first with 'containerfs unmount \(holder.mountpoint)'; \(verb) changes the app only while it is not running"
                )
            }
            mount = try MountLock(store: store, mountpoint: "(containerfs \(verb), pid \(getpid()))")
        }
    }

    private static func access(at folder: Int32, _ name: [UInt8]) -> Bool {
        var info = stat()
        return withCName(name) { fstatat(folder, $0, &info, AT_SYMLINK_NOFOLLOW) } == 0
    }
}

extension String {
    fileprivate func leftPadded(_ width: Int) -> String {
        String(repeating: "0", count: max(0, width - count)) + self
    }
}

/// A group container has no app to update or offload.
private func refuseGroup(_ store: Store, _ command: String) throws(UserError) {
    guard let group = store.groupIdentifier else { return }
    throw UserError.usage("\(store.path) is the group container of \(group), which has no app to \(command): name a member app's container")
}
