import CLinux
import ContainerPolicy
import Glibc

/// Switching a store's installed bundle — the folder `Name.app` and the signed state that
/// describes it in `.containerfs/` — as one step that a crash cannot split (SPEC §12).
///
/// The bundle and its manifest live in two folders, so no single rename can switch both.
/// `containerfs update` therefore prepares everything aside in a hidden working folder of
/// the state folder, `.bundle.update-XXXXXXXXXXXX/` (a whole staged container: the new
/// bundle and its signed `.containerfs/`), and then commits by renaming a journal,
/// `.containerfs/update`, into place: one rename. Before it, the store is the old app
/// (a leftover working folder is removed by the next open); after it, `Store.open` rolls
/// the switch forward to the end, whoever opens the store next. Every step of the roll
/// forward can be repeated:
///
/// 1. the new bundle goes into the root: exchanged with the old one when the name is the
///    same (`renameat2(RENAME_EXCHANGE)`: the root always holds a bundle), or renamed in
///    beside it and the old one moved into the working folder. Done when the root's
///    bundle is the staged folder (its inode is in the journal);
/// 2. the signed state files are renamed over the old ones, `bundle-name` last: while it
///    is still in the working folder, step 2 is not finished;
/// 3. the offload record (an offloaded app being reinstalled) and then the journal are
///    removed; the working folder, holding the old bundle, goes last.
///
/// The whole update and every roll forward hold `.containerfs/update.lock`, so an open
/// never works on a switch that a live `update` is making.
public enum BundleSwitch {
    /// The journal: its presence is the commit.
    static let journalName = Array(name: "update")
    /// The lock every change of the installed bundle holds.
    static let lockName = Array(name: "update.lock")
    /// The first line of the journal.
    static let journalMagic = "containerfs update 1"
    /// Hidden working names in the state folder all start so (`StagingName` beside `bundle`).
    static let workingPrefix = Array(".bundle.".utf8)
    /// The state files that describe the installed bundle, switched with it; `bundle-name`
    /// is last on purpose (see above).
    public static let signedStateNames: [[UInt8]] = [
        Array(name: "bundle.manifest"), Array(name: "bundle.sig"), Array(name: "bundle.pub"), Array(name: "bundle.cache"),
        Array(name: "bundle-name"),
    ]

    /// An exclusive hold on `.containerfs/update.lock`.
    public final class Lock: @unchecked Sendable {
        let fd: Int32

        /// Takes the lock, waiting for a holder up to `LockWait.patience` when `wait`; nil
        /// when it is held (`held` then says so, naming the holder).
        init?(stateFD: Int32, wait: Bool) throws(Errno) {
            let fd = try withCName(lockName) { (name) throws(Errno) in
                try sys { openat(stateFD, name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600) }
            }
            ownedLikeTheFolder(fd, stateFD)
            guard LockWait.attempt(fd, LOCK_EX, within: wait ? LockWait.patience : 0) else {
                let error = errno
                close(fd)
                if error == EWOULDBLOCK { return nil }
                throw Errno(error)
            }
            self.fd = fd
        }

        /// The line of a command that waited `LockWait.patience` for the lock of the store
        /// whose state folder is `stateFD` (at `statePath`), naming who holds it.
        static func held(stateFD: Int32, statePath: String) -> UserError {
            let fd = withCName(lockName) { openat(stateFD, $0, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC) }
            defer { if fd >= 0 { close(fd) } }
            let holder = fd >= 0 ? LockWait.holder(of: fd) : nil
            return UserError(LockWait.heldMessage("the lock on \(statePath)/update.lock (an update or offload of the app, which every command lets finish first)",
                                                  waited: LockWait.patience, holder: holder), exitCode: LockWait.exitCode)
        }

        /// Takes the lock of `store`, or fails saying that another update or offload runs.
        public static func take(_ store: Store) throws(UserError) -> Lock {
            let taken: Lock?
            do {
                taken = try Lock(stateFD: store.stateFD, wait: false)
            } catch {
                throw UserError.failed("cannot lock \(store.statePath)/update.lock", error)
            }
            guard let taken else {
                throw UserError("another update or offload of \(store.path) is in progress: wait for it to end")
            }
            return taken
        }

        deinit { close(fd) }
    }

    /// What the journal says: the working folder and the inode of the staged bundle.
    struct Journal: Equatable {
        var working: [UInt8]
        var device: UInt64
        var inode: UInt64

        func encoded() -> [UInt8] {
            Array("\(journalMagic)\n".utf8) + working + Array("\n\(device) \(inode)\n".utf8)
        }

        init(working: [UInt8], device: UInt64, inode: UInt64) {
            self.working = working
            self.device = device
            self.inode = inode
        }

        init?(decoding bytes: [UInt8]) {
            let lines = bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
            guard lines.count >= 3, String(decoding: lines[0], as: UTF8.self) == journalMagic,
                lines[1].starts(with: workingPrefix), !lines[1].contains(UInt8(ascii: "/"))
            else { return nil }
            let numbers = lines[2].split(separator: UInt8(ascii: " ")).map { UInt64(String(decoding: $0, as: UTF8.self)) }
            guard numbers.count == 2, let device = numbers[0], let inode = numbers[1] else { return nil }
            self.init(working: Array(lines[1]), device: device, inode: inode)
        }
    }

    /// Commits the switch prepared in the working folder `working` of the state folder
    /// (a staged container: `NEW.app` and `.containerfs/` with the signed state), then
    /// rolls it forward. The caller holds `Lock`, and the store is neither mounted nor run.
    public static func commit(_ store: Store, working: [UInt8], newBundle: [UInt8]) throws(UserError) {
        do {
            let workingFD = try openDirectory(at: store.stateFD, working)
            defer { close(workingFD) }
            var info = stat()
            try withCName(newBundle) { (name) throws(Errno) in _ = try sys { fstatat(workingFD, name, &info, AT_SYMLINK_NOFOLLOW) } }
            let journal = Journal(working: working, device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
            // The staged bundle on the disk before the commit: after a crash the journal
            // must not roll forward to files whose data never got there.
            let syncFD = try sys { openat(workingFD, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC) }  // not O_PATH
            defer { close(syncFD) }
            try sys { clinux_syncfs(syncFD) }
            try writeAtomically(at: store.stateFD, journalName, journal.encoded())
        } catch {
            throw UserError("cannot install the new bundle in \(store.path): \(error); nothing was changed")
        }
        TestCrashPoint.reach("committed")
        do {
            try rollForward(rootFD: store.rootFD, stateFD: store.stateFD)
        } catch {
            throw UserError("the update of \(store.path) stopped half-way (\(error)): it is finished the next time the store is opened")
        }
    }

    /// Finishes a committed switch, clears an offload a crash interrupted, and removes
    /// working folders nothing uses; what `Store.open` calls first. Takes the lock only
    /// when there is something to do.
    static func recover(rootFD: Int32, stateFD: Int32) throws(Errno) {
        let entries = try Directory.entries(of: stateFD)
        let journaled = entries.contains { $0.name == journalName }
        let working = entries.filter { $0.name.starts(with: workingPrefix) }
        let offloadUnfinished = OffloadRecord.isUnfinished(rootFD: rootFD, stateFD: stateFD)
        guard journaled || offloadUnfinished || !working.isEmpty else { return }
        // A live update or offload holds the lock until it is done: wait only for a switch
        // that is committed or half done; a leftover folder can wait for the next open.
        guard let lock = try Lock(stateFD: stateFD, wait: journaled || offloadUnfinished) else {
            // Waited `LockWait.patience` for a live update or offload, or a stopped one.
            guard journaled || offloadUnfinished else { return }
            throw Errno(EWOULDBLOCK)
        }
        try rollForward(rootFD: rootFD, stateFD: stateFD)
        try OffloadRecord.finish(rootFD: rootFD, stateFD: stateFD)
        for entry in (try Directory.entries(of: stateFD)) where entry.name.starts(with: workingPrefix) {
            removeTree(at: stateFD, entry.name)
        }
        withExtendedLifetime(lock) {}
    }

    /// Carries a committed switch to its end; nothing to do without a journal.
    static func rollForward(rootFD: Int32, stateFD: Int32) throws(Errno) {
        let bytes: [UInt8]
        do {
            bytes = try readFile(at: stateFD, journalName, limit: smallStateFileLimit)
        } catch {
            if error.code == ENOENT { return }
            throw error
        }
        guard let journal = Journal(decoding: bytes) else { throw Errno(EBADMSG) }
        let workingFD = try openDirectory(at: stateFD, journal.working)
        defer { close(workingFD) }
        let stagedState = try openDirectory(at: workingFD, ContainerLayout.stateFolderName)
        defer { close(stagedState) }

        if exists(at: stagedState, Store.bundleNameFile) {
            // Both names are single folder names, or the journal is not followed.
            let newName = try readBundleName(at: stagedState)
            let oldName = try readBundleName(at: stateFD)
            // 1. The bundle.
            if !isEntry(at: rootFD, newName, device: journal.device, inode: journal.inode) {
                let flags = newName == oldName && exists(at: rootFD, newName) ? clinux_RENAME_EXCHANGE : clinux_RENAME_NOREPLACE
                try rename(workingFD, newName, rootFD, newName, flags)
            }
            TestCrashPoint.reach("exchanged")
            if newName != oldName, exists(at: rootFD, oldName) {
                try rename(rootFD, oldName, workingFD, oldName, clinux_RENAME_NOREPLACE)
            }
            // 2. The signed state, bundle-name last.
            if !exists(at: stagedState, Array(name: "bundle.cache")) {
                _ = withCName(Array(name: "bundle.cache")) { unlinkat(stateFD, $0, 0) }
            }
            for name in signedStateNames where exists(at: stagedState, name) {
                try rename(stagedState, name, stateFD, name, 0)
                if name == signedStateNames[0] { TestCrashPoint.reach("manifest") }
            }
            fsync(stateFD)
        }
        TestCrashPoint.reach("switched")
        // 3. The offload record, the journal, the old bundle.
        if withCName(OffloadRecord.fileName, { unlinkat(stateFD, $0, 0) }) != 0, errno != ENOENT { throw Errno.current }
        try withCName(journalName) { (name) throws(Errno) in _ = try sys { unlinkat(stateFD, name, 0) } }
        fsync(stateFD)
        TestCrashPoint.reach("journal-removed")
        removeTree(at: stateFD, journal.working)
    }

    /// Writes `contents` to `name` in `folder` by a rename from a hidden working file, so
    /// that `name` appears whole or not at all.
    static func writeAtomically(at folder: Int32, _ name: [UInt8], _ contents: [UInt8]) throws(Errno) {
        let (working, fd) = try StagingName.create(beside: Array(name: "bundle"), "journal") {
            openat(folder, $0, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        }
        do {
            var written = 0
            while written < contents.count {
                let offset = written
                written += try sys { contents.withUnsafeBytes { write(fd, $0.baseAddress! + offset, $0.count - offset) } }
            }
            try sys { fsync(fd) }
            close(fd)
            try rename(folder, working, folder, name, 0)
            fsync(folder)
        } catch {
            close(fd)
            _ = withCName(working) { unlinkat(folder, $0, 0) }
            throw error
        }
    }

    static func rename(_ fromFD: Int32, _ from: [UInt8], _ toFD: Int32, _ to: [UInt8], _ flags: UInt32) throws(Errno) {
        try withCName(from) { (source) throws(Errno) in
            try withCName(to) { (target) throws(Errno) in _ = try sys { clinux_renameat2(fromFD, source, toFD, target, flags) } }
        }
    }

    static func exists(at folder: Int32, _ name: [UInt8]) -> Bool {
        var info = stat()
        return withCName(name) { fstatat(folder, $0, &info, AT_SYMLINK_NOFOLLOW) } == 0
    }

    private static func isEntry(at folder: Int32, _ name: [UInt8], device: UInt64, inode: UInt64) -> Bool {
        var info = stat()
        guard withCName(name, { fstatat(folder, $0, &info, AT_SYMLINK_NOFOLLOW) }) == 0 else { return false }
        return UInt64(info.st_dev) == device && UInt64(info.st_ino) == inode
    }
}

/// A tiny test hook: `CONTAINERFS_TEST_CRASH_AT=STEP` makes the process kill itself with
/// SIGKILL when it reaches the named step of `update` or `offload` (`staged`, `committed`,
/// `exchanged`, `manifest`, `switched`, `journal-removed`, `offload-recorded`), and
/// `CONTAINERFS_TEST_STOP_AT=STEP` stops it there (SIGSTOP), so that a test can act in
/// between. Unset, it costs one `getenv`.
public enum TestCrashPoint {
    /// Acts on the hook when `step` is the one named.
    public static func reach(_ step: String) {
        if let name = getenv("CONTAINERFS_TEST_CRASH_AT"), String(cString: name) == step { raise(SIGKILL) }
        if let name = getenv("CONTAINERFS_TEST_STOP_AT"), String(cString: name) == step { raise(SIGSTOP) }
    }
}
