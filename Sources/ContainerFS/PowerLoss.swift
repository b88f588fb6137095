import CFuse
import CLinux
import ContainerDurability
import ContainerStore
import Glibc
import Synchronization

/// The bookkeeping of a `power-loss` mount (docs/power-loss.md): the store always holds
/// what was written, which a power failure could also leave if everything happened to
/// reach the disk; beside it, an undo record of what is durable. A power cut applies the
/// records and the store becomes what the disk would hold had the power failed then.
///
/// - A file's data: before the first change since its last sync, its size; before each
///   change, the bytes of its durable content that the change alters, saved once at the
///   same offsets in an unnamed (`O_TMPFILE`) file of the journal folder.
/// - A folder's names: before a name changes for the first time since the folder's last
///   sync, what it named then: nothing, a node (kept alive by a hard link in the journal
///   folder, so that a removed file can be put back), or a folder (its descriptor).
///
/// A daemon killed for real leaves the store as written (a state a power loss could
/// leave) and a journal folder that the next mount empties. The unnamed copies vanish
/// with the daemon.
final class PowerLoss: @unchecked Sendable {
    /// Changes hold it shared while they record and act; a cut holds it alone.
    private let gate = ReadWriteLock()
    private let state = Mutex(State())
    /// `.containerfs/power-loss`: hard links of removed nodes, folders held during a cut.
    private let journalFD: Int32
    /// Set by the cut: from then on every change fails with `EIO`, as a disk without power.
    private let dead = Atomic<Bool>(false)

    static let journalName = Array("power-loss".utf8)
    /// When names become durable: with their folder's fsync, or with any (ext4).
    let model: Durability.NameModel

    fileprivate struct FileRecord {
        /// An `O_PATH` descriptor of the node, to find it again whatever its names.
        var node: Int32
        /// A descriptor that reads it, to save its durable bytes.
        var reader: Int32
        /// The unnamed copy holding the saved bytes at their offsets.
        var copy: Int32
        var durableSize: Int64
        var saved = ByteRanges()
        /// Synced, nothing changed since: kept open for the file's next change (a database
        /// written and synced in turns), up to `cleanKept` such records.
        var clean = false
    }

    /// Records of synced files kept open, at most: three descriptors each.
    static let cleanKept = 64

    private enum DurableName {
        case absent
        /// A node other than a folder, by its hard link in the journal folder.
        case node(link: [UInt8], key: InodeKey)
        /// A folder, by an `O_PATH` descriptor, with what remakes it if it was removed.
        case folder(fd: Int32, key: InodeKey, mode: mode_t, uid: uid_t, gid: gid_t)
    }

    private struct FolderRecord {
        var fd: Int32
        /// In the order first changed (the cut puts names back in that order).
        var names: [[UInt8]: DurableName] = [:]
        /// Folders a rename joined to this one: synced together.
        var partners: Set<InodeKey> = []
        /// Files renamed over a name here: their data becomes durable with the names.
        var ordered: Set<InodeKey> = []
    }

    private struct State {
        var files: [InodeKey: FileRecord] = [:]
        var folders: [InodeKey: FolderRecord] = [:]
        var links = 0
        var untracked = 0
        var cleanCount = 0

        /// Forgets the record of `key`, closing its descriptors.
        mutating func drop(_ key: InodeKey) {
            guard let record = files.removeValue(forKey: key) else { return }
            if record.clean { cleanCount -= 1 }
            PowerLoss.release(record)
        }
    }

    /// Opens (making it, emptied) the journal folder in the store's state folder.
    init(store: Store, model: Durability.NameModel = .posix) throws(Errno) {
        self.model = model
        Self.clear(store)
        _ = withCName(Self.journalName) { mkdirat(store.stateFD, $0, 0o700) }
        journalFD = try withCName(Self.journalName) { (name) throws(Errno) in
            try sys { openat(store.stateFD, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
        }
    }

    /// Removes a journal folder left by a daemon killed for real: the store is as written.
    static func clear(_ store: Store) {
        removeTree(at: store.stateFD, journalName)
    }

    // MARK: Changes

    /// Runs `body`, a change, after `record` has saved what it alters; `EIO` after a cut.
    @inline(__always)
    func change<R>(_ record: () throws(Errno) -> Void, _ body: () throws(Errno) -> R) throws(Errno) -> R {
        gate.lockShared()
        defer { gate.unlock() }
        if dead.load(ordering: .acquiring) { throw Errno(EIO) }
        try record()
        return try body()
    }

    /// Before `change` to the data of the file `key`, open (or reachable) at `fd`.
    func changing(_ key: InodeKey, fd: Int32, _ change: Durability.Change) {
        state.withLock { state in
            if state.files[key] == nil {
                guard let record = startRecord(fd) else { state.untracked += 1; return }
                state.files[key] = record
            }
            guard var record = state.files[key] else { return }
            if record.clean {
                record.clean = false
                state.cleanCount -= 1
            }
            let range = Durability.overwritten(by: change, durableSize: record.durableSize)
            for missing in record.saved.missing(from: range) {
                // Not saved: the change goes ahead, and the cut will count it as untracked.
                guard Self.copy(from: record.reader, to: record.copy, missing) else { state.untracked += 1; break }
                record.saved.insert(missing)
            }
            state.files[key] = record
        }
    }

    private func startRecord(_ fd: Int32) -> FileRecord? {
        var info = stat()
        guard fstat(fd, &info) == 0 else { return nil }
        let node = clinux_reopen(fd, clinux_O_PATH | O_CLOEXEC)
        let reader = clinux_reopen(fd, O_RDONLY | O_CLOEXEC)
        let copy = openat(journalFD, ".", clinux_O_TMPFILE | O_RDWR | O_CLOEXEC, 0o600)
        guard node >= 0, reader >= 0, copy >= 0 else {
            for each in [node, reader, copy] where each >= 0 { close(each) }
            return nil
        }
        return FileRecord(node: node, reader: reader, copy: copy, durableSize: Int64(info.st_size))
    }

    /// Copies `range` of `source` to the same offsets of `target`; false if it cannot.
    private static func copy(from source: Int32, to target: Int32, _ range: Range<Int64>) -> Bool {
        var buffer = [UInt8](repeating: 0, count: Int(min(1 << 20, range.upperBound - range.lowerBound)))
        var offset = range.lowerBound
        while offset < range.upperBound {
            let wanted = Int(min(Int64(buffer.count), range.upperBound - offset))
            let count = buffer.withUnsafeMutableBytes { pread(source, $0.baseAddress, wanted, off_t(offset)) }
            if count < 0, errno == EINTR { continue }
            if count < 0 { return false }
            if count == 0 { return true }   // the file is shorter: nothing more to keep
            var written = 0
            while written < count {
                let result = buffer.withUnsafeBytes { pwrite(target, $0.baseAddress! + written, count - written, off_t(offset) + off_t(written)) }
                if result < 0, errno == EINTR { continue }
                if result <= 0 { return false }
                written += result
            }
            offset += Int64(count)
        }
        return true
    }

    /// Before the name `name` of the folder `folderKey` (reachable at `folderFD`) changes.
    func naming(_ folderKey: InodeKey, folderFD: Int32, _ name: [UInt8]) throws(Errno) {
        try state.withLock { (state) throws(Errno) in
            if state.folders[folderKey] == nil {
                let fd = clinux_reopen(folderFD, clinux_O_PATH | O_DIRECTORY | O_CLOEXEC)
                guard fd >= 0 else { throw Errno.current }
                state.folders[folderKey] = FolderRecord(fd: fd)
            }
            guard var record = state.folders[folderKey], record.names[name] == nil else { return }
            var info = stat()
            if withCName(name, { fstatat(folderFD, $0, &info, AT_SYMLINK_NOFOLLOW) }) != 0 {
                guard errno == ENOENT else { throw Errno.current }
                record.names[name] = .absent
            } else if info.st_mode & S_IFMT == S_IFDIR {
                let fd = withCName(name) { openat(folderFD, $0, clinux_O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
                guard fd >= 0 else { throw Errno.current }
                record.names[name] = .folder(fd: fd, key: InodeKey(info), mode: info.st_mode & 0o7777, uid: info.st_uid, gid: info.st_gid)
            } else {
                state.links += 1
                let link = Array("n\(state.links)".utf8)
                _ = try withCName(name) { (source) throws(Errno) in
                    try withCName(link) { (target) throws(Errno) in try sys { linkat(folderFD, source, journalFD, target, 0) } }
                }
                record.names[name] = .node(link: link, key: InodeKey(info))
            }
            state.folders[folderKey] = record
        }
    }

    /// A rename from one folder to another: one change, durable in both with either's sync.
    func joined(_ first: InodeKey, _ second: InodeKey) {
        guard first != second else { return }
        state.withLock { state in
            state.folders[first]?.partners.insert(second)
            state.folders[second]?.partners.insert(first)
        }
    }

    /// A regular file `moved` was renamed over a name of `folder`: its data becomes durable
    /// when the rename does (ext4's `auto_da_alloc`).
    func renamedOver(_ folder: InodeKey, _ moved: InodeKey) {
        state.withLock { state in _ = state.folders[folder]?.ordered.insert(moved) }
    }

    /// Runs `sync`, an `fsync` of the file `key` (or a synchronous write to it), and if it
    /// succeeds the file's data is durable. Under the gate, so that a cut comes before the
    /// sync (which then fails with `EIO`) or after it, never between the sync and its record.
    func syncingFile(_ key: InodeKey, _ sync: () -> Int32) -> Int32 {
        gate.lockShared()
        defer { gate.unlock() }
        if dead.load(ordering: .acquiring) {
            errno = EIO
            return -1
        }
        let result = sync()
        guard result >= 0 else { return result }
        let error = errno
        syncedFile(key)
        errno = error
        return result
    }

    /// The data of the file `key` is durable (the caller holds the gate); under ext4's
    /// model, every name change too.
    func syncedFile(_ key: InodeKey) {
        state.withLock { state in
            if var record = state.files[key], !record.clean {
                // Kept, clean, with what is now durable; the bytes saved no longer matter.
                var info = stat()
                if fstat(record.node, &info) == 0 {
                    record.durableSize = Int64(info.st_size)
                    record.saved = ByteRanges()
                    record.clean = true
                    state.files[key] = record
                    state.cleanCount += 1
                    if state.cleanCount > Self.cleanKept,
                       let other = state.files.first(where: { $0.value.clean && $0.key != key })?.key {
                        state.drop(other)
                    }
                } else {
                    state.drop(key)
                }
            }
            if model == .ext4 { namesDurable(Array(state.folders.keys), &state) }
        }
    }

    /// Runs `sync`, an `fsync` of the folder `key`; if it succeeds, its names, and those of
    /// the folders renames joined it to, are durable. Under the gate, as `syncingFile`.
    func syncingFolder(_ key: InodeKey, _ sync: () -> Int32) -> Int32 {
        gate.lockShared()
        defer { gate.unlock() }
        if dead.load(ordering: .acquiring) {
            errno = EIO
            return -1
        }
        let result = sync()
        guard result == 0 else { return result }
        state.withLock { state in namesDurable(model == .ext4 ? Array(state.folders.keys) : [key], &state) }
        return 0
    }

    /// The names of the folders `keys`, and of those renames joined them to, are durable;
    /// so is the data of the files renamed over names there.
    private func namesDurable(_ keys: [InodeKey], _ state: inout State) {
        var pending = keys
        while let next = pending.popLast() {
            guard let record = state.folders.removeValue(forKey: next) else { continue }
            pending += record.partners
            for moved in record.ordered { state.drop(moved) }
            release(record)
        }
    }

    fileprivate static func release(_ record: FileRecord) {
        close(record.node)
        close(record.reader)
        close(record.copy)
    }

    private func release(_ record: FolderRecord) {
        close(record.fd)
        for durable in record.names.values {
            switch durable {
            case .absent: break
            case .node(let link, _): _ = withCName(link) { unlinkat(journalFD, $0, 0) }
            case .folder(let fd, _, _, _, _): close(fd)
            }
        }
    }

    /// Whether a cut happened: changes fail from then on.
    var isCut: Bool { dead.load(ordering: .acquiring) }

    // MARK: The cut

    /// What the kernel must forget after a cut: a folder and the names changed in it, or a file.
    enum Changed {
        case names(folder: InodeKey, [[UInt8]])
        case data(InodeKey)
    }

    /// Drops everything not durable, as a power failure now would; from then on every
    /// change fails with `EIO`. Returns what changed, for the kernel to forget it once the
    /// changes waiting on the cut have failed: the kernel holds a folder's lock while its
    /// change waits, and forgetting a name there takes that lock.
    func cut() -> (PowerCutReport, [Changed]) {
        gate.lock()
        defer { gate.unlock() }
        if dead.load(ordering: .acquiring) { return (PowerCutReport(), []) }
        var changed: [Changed] = []
        dead.store(true, ordering: .releasing)
        return state.withLock { state in
            var report = PowerCutReport(untracked: state.untracked)
            // 1. Durable folders still present are moved aside, so that removing what is
            //    not durable cannot take them (with what is durable inside them).
            var held: [InodeKey: [UInt8]] = [:]
            var count = 0
            for record in state.folders.values {
                for case .folder(let fd, let key, _, _, _) in record.names.values where held[key] == nil {
                    count += 1
                    let name = Array("h\(count)".utf8)
                    if Self.moveAside(fd, key, to: journalFD, name) { held[key] = name }
                }
            }
            // 2. Each folder's names as they were durable, parents before the folders they
            //    remake: a folder removed and not durably so is made again, empty, then its
            //    own durable names go back into it.
            var remade: [InodeKey: Int32] = [:]
            defer { remade.values.forEach { close($0) } }
            var pending = Array(state.folders)
            var progress = true
            while progress, !pending.isEmpty {
                progress = false
                for (index, (key, record)) in pending.enumerated().reversed() {
                    var info = stat()
                    let alive = fstat(record.fd, &info) == 0 && info.st_nlink > 0
                    guard let folderFD = alive ? record.fd : remade[key] else { continue }
                    pending.remove(at: index)
                    progress = true
                    for (name, durable) in record.names.sorted(by: { $0.key.lexicographicallyPrecedes($1.key) }) {
                        if restore(name, durable, in: folderFD, held: held, remade: &remade) { report.names += 1 }
                    }
                    changed.append(.names(folder: key, Array(record.names.keys)))
                }
            }
            // 3. Each file's data as it was durable, wherever its names are now.
            for (key, record) in state.files where !record.clean {
                var info = stat()
                guard fstat(record.node, &info) == 0, info.st_nlink > 0 else { continue }
                let writer = clinux_reopen(record.node, O_WRONLY | O_CLOEXEC)
                guard writer >= 0 else { report.untracked += 1; continue }
                var restored = true
                for range in record.saved.ranges where !Self.copy(from: record.copy, to: writer, range) { restored = false }
                if ftruncate(writer, off_t(record.durableSize)) != 0 { restored = false }
                close(writer)
                if !restored { report.untracked += 1 }
                let grown = max(0, Int64(info.st_size) - record.durableSize)
                if record.saved.count > 0 || grown > 0 || Int64(info.st_size) != record.durableSize {
                    report.files += 1
                    report.bytes += record.saved.count + grown
                }
                changed.append(.data(key))
            }
            for record in state.files.values { Self.release(record) }
            for record in state.folders.values { release(record) }
            state = State()
            removeContents(of: journalFD)
            return (report, changed)
        }
    }

    /// Moves the folder open at `fd` (`O_PATH`) to `name` in `target`, found by its
    /// identity in its parent; false if it is gone.
    private static func moveAside(_ fd: Int32, _ key: InodeKey, to target: Int32, _ name: [UInt8]) -> Bool {
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_nlink > 0 else { return false }
        let parent = openat(fd, "..", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard parent >= 0 else { return false }
        defer { close(parent) }
        for entry in (try? Directory.entries(of: parent)) ?? [] where entry.type == UInt8(DT_DIR) || entry.type == UInt8(DT_UNKNOWN) {
            var found = stat()
            guard withCName(entry.name, { fstatat(parent, $0, &found, AT_SYMLINK_NOFOLLOW) }) == 0, InodeKey(found) == key else { continue }
            return withCName(entry.name) { source in withCName(name) { renameat(parent, source, target, $0) } } == 0
        }
        return false
    }

    /// Puts `name` in the folder `folderFD` back as it was durable; true if that changed it.
    private func restore(_ name: [UInt8], _ durable: DurableName, in folderFD: Int32, held: [InodeKey: [UInt8]],
                         remade: inout [InodeKey: Int32]) -> Bool {
        var info = stat()
        let present = withCName(name) { fstatat(folderFD, $0, &info, AT_SYMLINK_NOFOLLOW) } == 0
        switch durable {
        case .absent where !present: return false
        case .node(_, let key) where present && InodeKey(info) == key: return false
        default: break
        }
        if present { removeTree(at: folderFD, name) }
        switch durable {
        case .absent:
            break
        case .node(let link, _):
            _ = withCName(link) { source in withCName(name) { linkat(journalFD, source, folderFD, $0, 0) } }
        case .folder(_, let key, let mode, let uid, let gid):
            if let aside = held[key] {
                _ = withCName(aside) { source in withCName(name) { renameat(journalFD, source, folderFD, $0) } }
            } else if withCName(name, { mkdirat(folderFD, $0, mode) }) == 0 {
                let fd = withCName(name) { openat(folderFD, $0, clinux_O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
                if fd >= 0 {
                    _ = fchownat(fd, "", uid, gid, clinux_AT_EMPTY_PATH)
                    _ = clinux_fchmod_path_fd(fd, mode)
                    remade[key] = fd
                }
            }
        }
        return true
    }
}

/// A `pthread_rwlock_t` at a fixed address, preferring the writer: a cut waits for the
/// changes under way, not for a stream of new ones. Never taken twice by one thread.
final class ReadWriteLock: @unchecked Sendable {
    private let raw = UnsafeMutablePointer<pthread_rwlock_t>.allocate(capacity: 1)
    init() {
        var attributes = pthread_rwlockattr_t()
        pthread_rwlockattr_init(&attributes)
        pthread_rwlockattr_setkind_np(&attributes, Int32(PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP))
        pthread_rwlock_init(raw, &attributes)
        pthread_rwlockattr_destroy(&attributes)
    }
    deinit {
        pthread_rwlock_destroy(raw)
        raw.deallocate()
    }
    func lockShared() { pthread_rwlock_rdlock(raw) }
    func lock() { pthread_rwlock_wrlock(raw) }
    func unlock() { pthread_rwlock_unlock(raw) }
}

extension FileSystem {
    /// Runs `body`, which changes the name `name` of `folder` (and `other`'s, for a
    /// rename), recording what they named first on a `power-loss` mount; `EIO` after a cut.
    @inline(__always)
    func trackingNames<R>(_ folder: Inode, _ name: [UInt8], _ other: (Inode, [UInt8])? = nil,
                          _ extra: () throws(Errno) -> Void = {}, _ body: () throws(Errno) -> R) throws(Errno) -> R {
        guard let powerLoss else { return try body() }
        return try powerLoss.change({ () throws(Errno) in
            try inodes.withDescriptor(folder) { fd throws(Errno) in try powerLoss.naming(folder.key, folderFD: fd, name) }
            if let (otherFolder, otherName) = other {
                try inodes.withDescriptor(otherFolder) { fd throws(Errno) in try powerLoss.naming(otherFolder.key, folderFD: fd, otherName) }
                powerLoss.joined(folder.key, otherFolder.key)
            }
            try extra()
        }, body)
    }

    /// Runs `body`, which makes `change` to the data of `node` (open at `fd`, if given),
    /// saving the durable bytes it alters first on a `power-loss` mount; `EIO` after a cut.
    /// Without a change, only the latter: a change the model does not track (metadata).
    @inline(__always)
    func trackingData<R>(_ node: Inode, _ fd: Int32?, _ change: Durability.Change?, _ body: () throws(Errno) -> R) throws(Errno) -> R {
        guard let powerLoss else { return try body() }
        return try powerLoss.change({ () throws(Errno) in
            guard let change, node.type == S_IFREG else { return }
            if let fd { powerLoss.changing(node.key, fd: fd, change) }
            else { try inodes.withDescriptor(node) { fd in powerLoss.changing(node.key, fd: fd, change) } }
        }, body)
    }

    /// Before a rename of `name` in `from` to `newName` in `to`: a regular file renamed over
    /// another gets its data durable with the rename (`auto_da_alloc`).
    func recordRenameOver(_ from: Inode, _ name: UnsafePointer<CChar>, _ to: Inode, _ newName: UnsafePointer<CChar>) {
        guard let powerLoss else { return }
        var moving = stat(), replaced = stat()
        guard (try? inodes.withDescriptor(from, { fd in fstatat(fd, name, &moving, AT_SYMLINK_NOFOLLOW) })) == 0,
              (try? inodes.withDescriptor(to, { fd in fstatat(fd, newName, &replaced, AT_SYMLINK_NOFOLLOW) })) == 0,
              moving.st_mode & S_IFMT == S_IFREG, replaced.st_mode & S_IFMT == S_IFREG else { return }
        powerLoss.renamedOver(to.key, InodeKey(moving))
    }

    /// `fsync`/`fdatasync` of the file `ino` open at `fd`: its data durable once it succeeded.
    func syncFile(_ ino: fuse_ino_t, _ fd: Int32, dataOnly: Bool) -> Int32 {
        guard let powerLoss, let node = try? inodes.inode(ino) else { return sync(ino, fd, dataOnly: dataOnly) }
        return powerLoss.syncingFile(node.key) { sync(ino, fd, dataOnly: dataOnly) }
    }

    /// `fsync`/`fdatasync` of the folder `node` open at `fd`: its names durable once it succeeded.
    func syncFolder(_ node: Inode, _ fd: Int32, dataOnly: Bool) -> Int32 {
        let sync = { dataOnly ? fdatasync(fd) : fsync(fd) }
        guard let powerLoss else { return sync() }
        return powerLoss.syncingFolder(node.key, sync)
    }

    /// The power cut: drops what is not durable, then makes the kernel forget what it
    /// cached of what changed. Nil when the mount does not track durability.
    func powerCut(session: OpaquePointer) -> PowerCutReport? {
        guard let powerLoss else { return nil }
        let (report, changed) = powerLoss.cut()
        for each in changed {
            switch each {
            case .data(let key):
                if let node = inodes.node(key) { _ = fuse_lowlevel_notify_inval_inode(session, inodes.ino(node), 0, 0) }
            case .names(let folder, let names):
                guard let directory = inodes.node(folder) else { continue }
                for name in names {
                    _ = name.withUnsafeBufferPointer { bytes in
                        bytes.withMemoryRebound(to: CChar.self) {
                            fuse_lowlevel_notify_inval_entry(session, inodes.ino(directory), $0.baseAddress, name.count)
                        }
                    }
                }
                _ = fuse_lowlevel_notify_inval_inode(session, inodes.ino(directory), 0, 0)
            }
        }
        return report
    }
}

extension FileSystem {
    /// Before `open(O_CREAT | O_TRUNC)` of `name` in `directory`: an existing file's data
    /// is about to be truncated.
    func recordTruncation(_ directory: Inode, _ name: UnsafePointer<CChar>) {
        guard let powerLoss else { return }
        let fd = (try? inodes.withDescriptor(directory) { directoryFD in openat(directoryFD, name, clinux_O_PATH | O_NOFOLLOW | O_CLOEXEC) }) ?? -1
        guard fd >= 0 else { return }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return }
        powerLoss.changing(InodeKey(info), fd: fd, .truncate(to: 0))
    }
}
