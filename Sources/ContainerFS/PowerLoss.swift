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
    /// An unnamed file of the journal folder: the durable bytes that changes overwrote,
    /// each file's pieces one after the other.
    private let savedBytesFD: Int32
    /// Descriptors the records hold at most (files', folders'): half the daemon's, so that
    /// opening files still works when a program changes more between two syncs than that.
    private let recordLimit: Int
    /// The store's root, which the cut walks for files with no descriptor.
    private let rootFD: Int32
    /// Descriptors held back for the cut, which opens a few to put the durable state back.
    private var reserve: [Int32] = []
    /// Set by the cut: from then on every change fails with `EIO`, as a disk without power.
    private let dead = Atomic<Bool>(false)

    static let journalName = Array("power-loss".utf8)
    /// When names become durable: with their folder's fsync, or with any (ext4).
    let model: Durability.NameModel
    /// Runs its second argument, which removes the journal folder's link of the file (the
    /// first) once the file's removal is durable and returns the file as it is after; the
    /// daemon counts there what that frees (a container with a capacity counted the file
    /// as used until then), in turn with the file's other changes.
    private let removingLink: @Sendable (InodeKey, () -> stat?) -> stat?

    fileprivate struct FileRecord {
        /// An `O_PATH` descriptor of the node, to find it again whatever its names: the
        /// record's only descriptor. -1 for a file with nothing durable (size 0, a new file
        /// most often), which needs no bytes saved: the cut finds it by a walk of the store,
        /// so that a program making thousands of files between two syncs (`tar x`) does
        /// not run the daemon out of descriptors. Without a descriptor the inode number
        /// may be freed and taken again: `born` tells the file from the one taking it.
        var node: Int32
        var durableSize: Int64
        /// A record without a descriptor: the file's birth time (nil if the file system keeps
        /// none). Its number is free once the file is removed, and a file that arrives behind
        /// the mount (`share put`, `deliver`) takes it at once (ext4 gives a folder's next file
        /// the lowest free number): the cut's walk must not empty that one, whose data was
        /// never the program's to change.
        var born: Birth? = nil
        /// The durable bytes saved, by their offsets in the file…
        var saved = ByteRanges()
        /// …and where each piece of them is in the journal's saved-bytes file.
        var pieces: [SavedPiece] = []
        /// Synced, nothing changed since: kept open for the file's next change (a database
        /// written and synced in turns), up to `cleanKept` such records.
        var clean = false
    }

    /// A file's birth time: with its number, which file it is (numbers are taken again).
    fileprivate struct Birth: Equatable {
        var seconds: Int64
        var nanoseconds: UInt32

        /// The birth time of `name` in `folderFD`, or of the node `folderFD` itself with no
        /// name; nil when the file system keeps none, or the node is gone.
        static func of(_ folderFD: Int32, _ name: [UInt8]? = nil) -> Birth? {
            var birth = Birth(seconds: 0, nanoseconds: 0)
            let result = withCName(name ?? []) { clinux_birth_time(folderFD, $0, name == nil ? clinux_AT_EMPTY_PATH : AT_SYMLINK_NOFOLLOW, &birth.seconds, &birth.nanoseconds) }
            return result == 0 ? birth : nil
        }
    }

    fileprivate struct SavedPiece {
        var range: Range<Int64>
        /// Its offset in the saved-bytes file.
        var at: Int64
    }

    /// Records of synced files kept open, at most.
    static let cleanKept = 64
    /// `FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE` (linux/falloc.h, stable ABI).
    fileprivate static let punchHole: Int32 = 0x02 | 0x01

    private enum DurableName {
        case absent
        /// A node other than a folder, by its hard link in the journal folder.
        case node(link: [UInt8], key: InodeKey)
        /// A folder, by an `O_PATH` descriptor, with what remakes it if it was removed.
        case folder(fd: Int32, key: InodeKey, mode: mode_t, uid: uid_t, gid: gid_t)
    }

    private struct FolderRecord {
        /// An `O_PATH` descriptor of the folder; -1 for a folder made through the mount and
        /// never synced since (`State.madeFolders`): nothing in it is durable, so the cut
        /// empties it, found by a walk, and a program making any number of folders between
        /// two syncs (`tar x`) holds no descriptor for them.
        var fd: Int32
        /// Without a descriptor: the folder's birth time, to tell it from another that took
        /// its number (nil if the file system keeps none).
        var born: Birth? = nil
        /// In the order first changed (the cut puts names back in that order).
        var names: [[UInt8]: DurableName] = [:]
        /// Folders a rename joined to this one: synced together.
        var partners: Set<InodeKey> = []
        /// The descriptors it holds: its own, its removed folders', its renamed files'.
        var descriptors: Int {
            (fd >= 0 ? 1 : 0) + ordered.count + names.values.reduce(0) { count, durable in
                if case .folder = durable { count + 1 } else { count }
            }
        }
        /// Files renamed over a name here: their data becomes durable with the names. Each
        /// held by an `O_PATH` descriptor: removed meanwhile, a file would free its number
        /// for a new file, whose data the fsync would then make durable instead.
        var ordered: [InodeKey: Int32] = [:]
    }

    private struct State {
        var files: [InodeKey: FileRecord] = [:]
        var folders: [InodeKey: FolderRecord] = [:]
        /// Folders made through the mount none of whose names became durable since: their
        /// records need no descriptor and save nothing.
        var madeFolders: [InodeKey: Birth?] = [:]
        var links = 0
        var cleanCount = 0
        /// Descriptors the records hold.
        var descriptors = 0
        /// The end of the saved-bytes file, where the next piece goes.
        var savedEnd: Int64 = 0
        /// Pieces that records hold there: none, and the file is emptied.
        var savedPieces = 0

        /// Forgets the record without a descriptor of the folder `key`, made and removed since:
        /// another folder took its number. Its joins go too: a sync of a folder it was joined
        /// to must not make the names of the folder now there durable.
        mutating func dropRemoved(_ key: InodeKey) {
            guard let record = folders[key], record.fd < 0 else { return }
            folders[key] = nil
            for partner in record.partners { folders[partner]?.partners.remove(key) }
        }

        /// Forgets the record of `key`, closing its descriptor and freeing its pieces.
        mutating func drop(_ key: InodeKey, savedBytes: Int32) {
            guard var record = files.removeValue(forKey: key) else { return }
            if record.clean { cleanCount -= 1 }
            forget(&record, savedBytes: savedBytes)
            if record.node >= 0 {
                close(record.node)
                descriptors -= 1
            }
        }

        /// Frees the pieces `record` saved, which no longer matter.
        mutating func forget(_ record: inout FileRecord, savedBytes: Int32) {
            guard !record.pieces.isEmpty else { return }
            savedPieces -= record.pieces.count
            if savedPieces == 0 {
                _ = ftruncate(savedBytes, 0)
                savedEnd = 0
            } else {
                for piece in record.pieces {
                    _ = clinux_fallocate(savedBytes, PowerLoss.punchHole,
                                  off_t(piece.at), off_t(piece.range.upperBound - piece.range.lowerBound))
                }
            }
            record.pieces = []
            record.saved = ByteRanges()
        }
    }

    /// Opens (making it, emptied) the journal folder in the store's state folder.
    init(store: Store, model: Durability.NameModel = .posix,
         removingLink: @escaping @Sendable (InodeKey, () -> stat?) -> stat? = { $1() }) throws(Errno) {
        self.model = model
        self.removingLink = removingLink
        rootFD = store.rootFD
        Self.clear(store)
        _ = withCName(Self.journalName) { mkdirat(store.stateFD, $0, 0o700) }
        let journalFD = try withCName(Self.journalName) { (name) throws(Errno) in
            try sys { openat(store.stateFD, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
        }
        // The owner's, as the rest of the state folder, when root's daemon makes it.
        ownedLikeTheFolder(journalFD, store.stateFD)
        self.journalFD = journalFD
        savedBytesFD = try sys { openat(journalFD, ".", clinux_O_TMPFILE | O_RDWR | O_CLOEXEC, 0o600) }
        var limit = rlimit()
        getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)
        recordLimit = Int(max(16, min(limit.rlim_cur / 2, 1 << 20)))
        reserve = (0..<4).map { _ in fcntl(journalFD, F_DUPFD_CLOEXEC, 0) }.filter { $0 >= 0 }
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

    /// Before `change` to the data of the file `key`, open (or reachable) at `fd`: saves
    /// what the change alters of the durable state. Throws if it cannot, and the change must
    /// then be refused: let through, a cut after it would leave a state no disk could hold.
    func changing(_ key: InodeKey, fd: Int32, _ change: Durability.Change) throws(Errno) {
        try state.withLock { (state) throws(Errno) in
            var record: FileRecord
            // Taken out while it changes: a copy left in the table would make each change
            // copy all its saved ranges and pieces (quadratic in the writes between syncs).
            if let existing = state.files.removeValue(forKey: key), !Self.isStale(existing, fd) { record = existing } else { record = try startRecord(fd, &state) }
            defer { state.files[key] = record }
            if record.clean {
                record.clean = false
                state.cleanCount -= 1
            }
            let missing = record.saved.missing(from: Durability.overwritten(by: change, durableSize: record.durableSize))
            guard !missing.isEmpty else { return }
            try Self.withReader(fd, node: record.node) { (reader) throws(Errno) in
                for range in missing {
                    let count = try Self.copy(from: reader, range, to: savedBytesFD, at: state.savedEnd)
                    if count > 0 {
                        record.pieces.append(SavedPiece(range: range.lowerBound ..< range.lowerBound + count, at: state.savedEnd))
                        state.savedPieces += 1
                        state.savedEnd += count
                    }
                    record.saved.insert(range)   // past the end of the file: nothing to keep
                }
            }
        }
    }

    /// Whether `record`, one without a descriptor, is of a file removed since, whose number
    /// the file open at `fd` took: a new file, whose record starts afresh.
    private static func isStale(_ record: FileRecord, _ fd: Int32) -> Bool {
        guard record.node < 0, let born = record.born else { return false }
        return Birth.of(fd) != born
    }

    private func startRecord(_ fd: Int32, _ state: inout State) throws(Errno) -> FileRecord {
        var info = stat()
        try sys { fstat(fd, &info) }
        if info.st_size == 0 { return FileRecord(node: -1, durableSize: 0, born: Birth.of(fd)) }
        try roomForDescriptor(&state)
        var node = clinux_reopen(fd, clinux_O_PATH | O_CLOEXEC)
        if node < 0, errno == EMFILE || errno == ENFILE {
            dropCleanRecords(&state)
            node = clinux_reopen(fd, clinux_O_PATH | O_CLOEXEC)
        }
        guard node >= 0 else { throw Errno.current }
        state.descriptors += 1
        return FileRecord(node: node, durableSize: Int64(info.st_size))
    }

    /// Room for one more record descriptor within the limit, made by dropping the records of
    /// synced files if need be; `EMFILE` if there is none.
    private func roomForDescriptor(_ state: inout State) throws(Errno) {
        if state.descriptors >= recordLimit { dropCleanRecords(&state) }
        guard state.descriptors < recordLimit else { throw Errno(EMFILE) }
    }

    /// The records of synced files are only kept in case they change again.
    private func dropCleanRecords(_ state: inout State) {
        for (key, record) in state.files where record.clean { state.drop(key, savedBytes: savedBytesFD) }
    }

    /// Runs `body` with a descriptor that reads the file: `fd` if it was opened for reading,
    /// else one opened again from `node`. A daemon that may not read the file (mode 0200,
    /// not root) cannot have one: `EACCES`.
    private static func withReader<R>(_ fd: Int32, node: Int32, _ body: (Int32) throws(Errno) -> R) throws(Errno) -> R {
        let flags = fcntl(fd, F_GETFL)
        if flags >= 0, flags & clinux_O_PATH == 0, flags & O_ACCMODE != O_WRONLY { return try body(fd) }
        let reader = try sys { clinux_reopen(node, O_RDONLY | O_CLOEXEC) }
        defer { close(reader) }
        return try body(reader)
    }

    /// Copies `range` of `source` to `target` from offset `at`; returns the bytes of the
    /// range the source holds (fewer if it is shorter). Only the source's data is read and
    /// written, found by `SEEK_DATA`/`SEEK_HOLE`: a durable sparse file of a terabyte takes no
    /// room, and its holes read as bytes would fill the store's disk with zeros, out of any
    /// capacity. They stay holes in `target`, which is fresh there when saving (and made
    /// long enough to hold the piece); when putting back (`punching`), they are punched in
    /// `target` over whatever was written there since.
    private static func copy(from source: Int32, _ range: Range<Int64>, to target: Int32, at: Int64,
                             punching: Bool = false) throws(Errno) -> Int64 {
        var info = stat()
        try sys { fstat(source, &info) }
        let end = min(range.upperBound, Int64(info.st_size))
        guard end > range.lowerBound else { return 0 }
        // Past what an offset holds (files of 2^63 - 1 bytes on a tmpfs): refused, not a trap.
        guard !at.addingReportingOverflow(end - range.lowerBound).overflow else { throw Errno(EFBIG) }
        let shift = at - range.lowerBound   // from an offset of `source` to one of `target`
        var position = range.lowerBound
        while position < end {
            // The next data and the hole after it; a file system without SEEK_DATA: all data.
            let data = lseek(source, off_t(position), clinux_SEEK_DATA)
            let dataStart = data >= 0 ? min(end, Int64(data)) : errno == ENXIO ? end : position
            if dataStart > position, punching { try zero(target, position + shift ..< dataStart + shift) }
            guard dataStart < end else { break }
            let hole = lseek(source, off_t(dataStart), clinux_SEEK_HOLE)
            let dataEnd = hole > dataStart ? min(end, Int64(hole)) : end
            let copied = try copyBytes(from: source, dataStart ..< dataEnd, to: target, at: dataStart + shift)
            if copied < dataEnd - dataStart { return dataStart + copied - range.lowerBound }   // shorter since
            position = dataEnd
        }
        if !punching {
            var saved = stat()
            try sys { fstat(target, &saved) }
            if Int64(saved.st_size) < end + shift { try sys { ftruncate(target, off_t(end + shift)) } }
        }
        return end - range.lowerBound
    }

    /// Copies the bytes `range` of `source` to `target` at `at`; returns how many, fewer if
    /// the file is shorter.
    private static func copyBytes(from source: Int32, _ range: Range<Int64>, to target: Int32, at: Int64) throws(Errno) -> Int64 {
        var buffer = [UInt8](repeating: 0, count: Int(min(1 << 20, range.upperBound - range.lowerBound)))
        var copied: Int64 = 0
        while copied < range.upperBound - range.lowerBound {
            let wanted = Int(min(Int64(buffer.count), range.upperBound - range.lowerBound - copied))
            let count = try sys { buffer.withUnsafeMutableBytes { pread(source, $0.baseAddress, wanted, off_t(range.lowerBound + copied)) } }
            if count == 0 { break }   // the file is shorter: nothing more to keep
            var written = 0
            while written < count {
                written += try sys { buffer.withUnsafeBytes { pwrite(target, $0.baseAddress! + written, count - written, off_t(at + copied) + off_t(written)) } }
            }
            copied += Int64(count)
        }
        return copied
    }

    /// Makes `range` of `target` read as zeros: a hole punched, else zeros written.
    private static func zero(_ target: Int32, _ range: Range<Int64>) throws(Errno) {
        if clinux_fallocate(target, punchHole, off_t(range.lowerBound), off_t(range.upperBound - range.lowerBound)) == 0 { return }
        let zeros = [UInt8](repeating: 0, count: Int(min(1 << 20, range.upperBound - range.lowerBound)))
        var done: Int64 = 0
        while done < range.upperBound - range.lowerBound {
            let count = Int(min(Int64(zeros.count), range.upperBound - range.lowerBound - done))
            done += Int64(try sys { zeros.withUnsafeBytes { pwrite(target, $0.baseAddress, count, off_t(range.lowerBound + done)) } })
        }
    }

    /// The folder `name` of `folderFD` was just made (`mkdir`): nothing in it is durable.
    func madeFolder(in folderFD: Int32, _ name: UnsafePointer<CChar>) {
        var info = stat()
        guard fstatat(folderFD, name, &info, AT_SYMLINK_NOFOLLOW) == 0 else { return }
        let born = Birth.of(folderFD, Array(UnsafeRawBufferPointer(start: name, count: strlen(name))))
        state.withLock { state in
            let key = InodeKey(info)
            state.madeFolders[key] = born
            state.dropRemoved(key)
        }
    }

    /// Before the name `name` of the folder `folderKey` (reachable at `folderFD`) changes.
    func naming(_ folderKey: InodeKey, folderFD: Int32, _ name: [UInt8]) throws(Errno) {
        try state.withLock { (state) throws(Errno) in
            // A folder made and removed leaves its number, which another may take (ext4 gives
            // it at once), one made behind the mount too: told apart by their birth times.
            if let made = state.madeFolders[folderKey], let born = made, Birth.of(folderFD) != born {
                state.madeFolders[folderKey] = nil
                state.dropRemoved(folderKey)
            }
            if state.folders[folderKey] == nil, let born = state.madeFolders[folderKey] {
                state.folders[folderKey] = FolderRecord(fd: -1, born: born)
            } else if state.folders[folderKey] == nil {
                try roomForDescriptor(&state)
                let fd = clinux_reopen(folderFD, clinux_O_PATH | O_DIRECTORY | O_CLOEXEC)
                guard fd >= 0 else { throw Errno.current }
                state.descriptors += 1
                state.folders[folderKey] = FolderRecord(fd: fd)
            }
            // Taken out while it changes, as a file's record is.
            guard var record = state.folders.removeValue(forKey: folderKey) else { return }
            defer { state.folders[folderKey] = record }
            guard record.names[name] == nil else { return }
            // Nothing there to put back: the cut empties the folder whole.
            guard record.fd >= 0 else {
                record.names[name] = .absent
                return
            }
            var info = stat()
            if withCName(name, { fstatat(folderFD, $0, &info, AT_SYMLINK_NOFOLLOW) }) != 0 {
                guard errno == ENOENT else { throw Errno.current }
                record.names[name] = .absent
            } else if info.st_mode & S_IFMT == S_IFDIR {
                try roomForDescriptor(&state)
                let fd = withCName(name) { openat(folderFD, $0, clinux_O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
                guard fd >= 0 else { throw Errno.current }
                state.descriptors += 1
                record.names[name] = .folder(fd: fd, key: InodeKey(info), mode: info.st_mode & 0o7777, uid: info.st_uid, gid: info.st_gid)
            } else {
                state.links += 1
                let link = Array("n\(state.links)".utf8)
                _ = try withCName(name) { (source) throws(Errno) in
                    try withCName(link) { (target) throws(Errno) in try sys { linkat(folderFD, source, journalFD, target, 0) } }
                }
                record.names[name] = .node(link: link, key: InodeKey(info))
            }
        }
    }

    /// A rename from one folder to another: one change, durable in both with either's sync.
    /// Returns whether they were not joined before, for `parted`.
    func joined(_ first: InodeKey, _ second: InodeKey) -> Bool {
        guard first != second else { return false }
        return state.withLock { state in
            state.folders[second]?.partners.insert(first)
            return state.folders[first]?.partners.insert(second).inserted ?? false
        }
    }

    /// Undoes `joined` for a rename that failed.
    func parted(_ first: InodeKey, _ second: InodeKey) {
        state.withLock { state in
            state.folders[first]?.partners.remove(second)
            state.folders[second]?.partners.remove(first)
        }
    }

    /// A regular file `moved`, open at `fd` (`O_PATH`, which the record takes), is renamed
    /// over a name of `folder`: its data becomes durable when the rename does (ext4's
    /// `auto_da_alloc`). `EMFILE` when the records have no descriptor left for it.
    func renamedOver(_ folder: InodeKey, _ moved: InodeKey, fd: Int32) throws(Errno) {
        try state.withLock { (state) throws(Errno) in
            guard state.folders[folder] != nil, state.folders[folder]?.ordered[moved] == nil else { close(fd); return }
            do throws(Errno) { try roomForDescriptor(&state) } catch {
                close(fd)
                throw error
            }
            state.descriptors += 1
            state.folders[folder]?.ordered[moved] = fd
        }
    }

    /// Runs `sync`, an `fsync` of the file `key` (or a synchronous write to it), and if it
    /// succeeds the file's data is durable. Under the gate, so that a cut comes before the
    /// sync (which then fails with `EIO`) or after it, never between the sync and its record.
    func syncingFile(_ key: InodeKey, _ sync: () -> Int32) -> Int32 {
        gated(sync) { syncedFile(key) }
    }

    /// Runs `sync` under the gate, `EIO` after a cut, and `synced` if it succeeds.
    private func gated(_ sync: () -> Int32, then synced: () -> Void) -> Int32 {
        gate.lockShared()
        defer { gate.unlock() }
        if dead.load(ordering: .acquiring) {
            errno = EIO
            return -1
        }
        let result = sync()
        guard result >= 0 else { return result }
        let error = errno
        synced()
        errno = error
        return result
    }

    /// The data of the file `key` is durable (the caller holds the gate); under ext4's
    /// model, every name change too.
    func syncedFile(_ key: InodeKey) {
        state.withLock { state in
            if var record = state.files[key], !record.clean {
                // Kept, clean, with what is now durable; the bytes saved no longer matter.
                // A record without a descriptor is not worth keeping.
                var info = stat()
                if record.node >= 0, fstat(record.node, &info) == 0 {
                    record.durableSize = Int64(info.st_size)
                    state.forget(&record, savedBytes: savedBytesFD)
                    record.clean = true
                    state.files[key] = record
                    state.cleanCount += 1
                    if state.cleanCount > Self.cleanKept,
                       let other = state.files.first(where: { $0.value.clean && $0.key != key })?.key {
                        state.drop(other, savedBytes: savedBytesFD)
                    }
                } else {
                    state.drop(key, savedBytes: savedBytesFD)
                }
            }
            if model == .ext4 { namesDurable(Array(state.folders.keys), &state) }
        }
    }

    /// Runs `sync`, an `fsync` of the folder `key`; if it succeeds, its names, and those of
    /// the folders renames joined it to, are durable. Under the gate, as `syncingFile`.
    func syncingFolder(_ key: InodeKey, _ sync: () -> Int32) -> Int32 {
        gated(sync) {
            state.withLock { state in namesDurable(model == .ext4 ? Array(state.folders.keys) : [key], &state) }
        }
    }

    /// The names of the folders `keys`, and of those renames joined them to, are durable;
    /// so is the data of the files renamed over names there. The files whose last link was
    /// the journal's are removed for good: their records go too (no durable name is left to
    /// put their data back under, and a record's descriptor would keep their blocks).
    private func namesDurable(_ keys: [InodeKey], _ state: inout State) {
        var pending = keys
        var freed: [InodeKey] = []
        while let next = pending.popLast() {
            state.madeFolders[next] = nil
            guard let record = state.folders.removeValue(forKey: next) else { continue }
            pending += record.partners
            for moved in record.ordered.keys { state.drop(moved, savedBytes: savedBytesFD) }
            state.descriptors -= record.descriptors
            freed += release(record)
        }
        for key in freed { state.drop(key, savedBytes: savedBytesFD) }
    }

    /// Lets go of what `record` holds; returns the files whose last link was the journal's.
    @discardableResult
    private func release(_ record: FolderRecord) -> [InodeKey] {
        if record.fd >= 0 { close(record.fd) }
        record.ordered.values.forEach { close($0) }
        var freed: [InodeKey] = []
        for durable in record.names.values {
            switch durable {
            case .absent: break
            case .node(let link, let key):
                // Measured after the unlink, through a descriptor: whether it was the last link.
                let after = removingLink(key) { () -> stat? in
                    let fd = withCName(link) { openat(journalFD, $0, clinux_O_PATH | O_NOFOLLOW | O_CLOEXEC) }
                    defer { if fd >= 0 { close(fd) } }
                    var info = stat()
                    guard withCName(link, { unlinkat(journalFD, $0, 0) }) == 0, fd >= 0, fstat(fd, &info) == 0 else { return nil }
                    return info
                }
                if let after, after.st_nlink == 0 { freed.append(key) }
            case .folder(let fd, _, _, _, _): close(fd)
            }
        }
        return freed
    }

    /// The bytes in blocks of the removed files that only the journal folder's links keep:
    /// a walk of the store skips the state folder, and the capacity holds them as used
    /// until their removal is durable.
    func journalOnlyBytes() -> Int64 {
        state.withLock { _ in
            var links: [InodeKey: (count: Int, info: stat)] = [:]
            Capacity.forEachNode(below: journalFD, skippingState: false) { _, _, info in
                guard info.st_mode & S_IFMT != S_IFDIR else { return }
                links[InodeKey(info), default: (0, info)].count += 1
            }
            return links.values.reduce(Int64(0)) { total, each in
                each.count == Int(each.info.st_nlink) ? total.addingSaturated(Capacity.blockBytes(each.info)) : total
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
        reserve.forEach { close($0) }
        reserve = []
        return state.withLock { state in
            var report = PowerCutReport()
            // 0. Folders the program closed to their owner are opened for the cut.
            let unlocked = unlockFolders()
            defer { unlocked.forEach { _ = clinux_fchmod_path_fd($0.fd, $0.mode); close($0.fd) } }
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
            //    own durable names go back into it; it gets its mode after, which may not let
            //    its owner (a daemon that is not root) write in it.
            var remade: [InodeKey: (fd: Int32, mode: mode_t)] = [:]
            defer { remade.values.forEach { _ = clinux_fchmod_path_fd($0.fd, $0.mode); close($0.fd) } }
            var pending = Array(state.folders.filter { $0.value.fd >= 0 })
            var progress = true
            while progress, !pending.isEmpty {
                progress = false
                for (index, (key, record)) in pending.enumerated().reversed() {
                    var info = stat()
                    let alive = fstat(record.fd, &info) == 0 && info.st_nlink > 0
                    guard let folderFD = alive ? record.fd : remade[key]?.fd else { continue }
                    pending.remove(at: index)
                    progress = true
                    for (name, durable) in record.names.sorted(by: { $0.key.lexicographicallyPrecedes($1.key) }) {
                        if restore(name, durable, in: folderFD, held: held, remade: &remade) { report.names += 1 }
                    }
                    changed.append(.names(folder: key, Array(record.names.keys)))
                }
            }
            // The names are back: the folders' records let go of their descriptors, which the
            // walk below needs.
            for record in state.folders.values { release(record) }
            // 2b. The folders made since and changed, found by a walk, emptied: nothing in
            //     them is durable. Durable folders moved into them were moved aside in 1.
            let made = state.folders.filter { $0.value.fd < 0 }.mapValues(\.born)
            if !made.isEmpty {
                // A folder made again in 2 may have the number of one of them, removed since.
                let remadeNow = Set(remade.values.compactMap { folder -> InodeKey? in
                    var info = stat()
                    return fstat(folder.fd, &info) == 0 ? InodeKey(info) : nil
                })
                Capacity.forEachNode(below: rootFD, skippingState: true) { folderFD, name, info in
                    let key = InodeKey(info)
                    guard info.st_mode & S_IFMT == S_IFDIR, let born = made[key], !remadeNow.contains(key) else { return }
                    if let born, Birth.of(folderFD, name) != born { return }
                    let fd = withCName(name) { openat(folderFD, $0, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
                    guard fd >= 0 else { return }
                    defer { close(fd) }
                    let names = ((try? Directory.entries(of: fd)) ?? []).map(\.name)
                    guard !names.isEmpty else { return }
                    removeContents(of: fd)   // before the walk enters it: it finds it empty
                    report.names += names.count
                    changed.append(.names(folder: key, names))
                }
            }
            // 3. Each file's data as it was durable, wherever its names are now.
            var unplaced: [InodeKey: Birth?] = [:]
            for (key, record) in state.files where !record.clean {
                guard record.node >= 0 else {
                    unplaced[key] = record.born
                    continue
                }
                var info = stat()
                defer { close(record.node) }   // one descriptor freed for the next
                guard fstat(record.node, &info) == 0, info.st_nlink > 0 else { continue }
                guard let writer = Self.writer(record.node, info) else { report.untracked += 1; continue }
                var restored = true
                for piece in record.pieces {
                    let count = piece.range.upperBound - piece.range.lowerBound
                    if (try? Self.copy(from: savedBytesFD, piece.at ..< piece.at + count, to: writer, at: piece.range.lowerBound,
                                       punching: true)) != count {
                        restored = false
                    }
                }
                if ftruncate(writer, off_t(record.durableSize)) != 0 { restored = false }
                close(writer)
                if !restored { report.untracked += 1 }
                // Saturated: files as long as the file system allows (2^63 - 1 on a tmpfs)
                // add up past an Int64, and a trap here would leave the cut half done.
                let putBack = record.pieces.reduce(Int64(0)) { $0.addingSaturated($1.range.upperBound - $1.range.lowerBound) }
                let grown = max(0, Int64(info.st_size) - record.durableSize)
                if putBack > 0 || Int64(info.st_size) != record.durableSize {
                    report.files += 1
                    report.bytes = report.bytes.addingSaturated(putBack.addingSaturated(grown))
                }
                changed.append(.data(key))
            }
            for record in state.files.values where record.clean { close(record.node) }
            // 4. The files with nothing durable, found by a walk, emptied.
            if !unplaced.isEmpty {
                Capacity.forEachNode(below: rootFD, skippingState: true) { folderFD, name, info in
                    let key = InodeKey(info)
                    guard info.st_mode & S_IFMT == S_IFREG, let born = unplaced.removeValue(forKey: key) else { return }
                    // Another file with the number of one removed: not the program's to empty.
                    if let born, Birth.of(folderFD, name) != born { return }
                    changed.append(.data(key))
                    guard info.st_size > 0 else { return }
                    let node = withCName(name) { openat(folderFD, $0, clinux_O_PATH | O_NOFOLLOW | O_CLOEXEC) }
                    guard node >= 0 else { report.untracked += 1; return }
                    defer { close(node) }
                    // The file the walk found, not what the store's owner put at its name
                    // since: a FIFO opened to write would block the cut, and the daemon, for
                    // good; another file is not the program's to empty.
                    var now = stat()
                    guard fstat(node, &now) == 0, now.st_mode & S_IFMT == S_IFREG, InodeKey(now) == key else { report.untracked += 1; return }
                    guard let writer = Self.writer(node, info) else { report.untracked += 1; return }
                    if ftruncate(writer, 0) != 0 { report.untracked += 1 }
                    close(writer)
                    report.files += 1
                    report.bytes = report.bytes.addingSaturated(Int64(info.st_size))
                }
            }
            state = State()
            _ = ftruncate(savedBytesFD, 0)
            removeContents(of: journalFD)
            return (report, changed)
        }
    }

    /// Gives a daemon that is not root (root may anyway) every right on every folder of the
    /// store for the cut: their owner, the program, may have taken them away (mode 0555,
    /// 000), and the cut must still put the folders' names back and walk into them. Returns
    /// the folders changed, held by `O_PATH` descriptors wherever the cut moves them, with
    /// the modes to put back.
    private func unlockFolders() -> [(fd: Int32, mode: mode_t)] {
        guard geteuid() != 0 else { return [] }
        var unlocked: [(fd: Int32, mode: mode_t)] = []
        Capacity.forEachNode(below: rootFD, skippingState: true) { folderFD, name, info in
            let mode = info.st_mode & 0o7777
            guard info.st_mode & S_IFMT == S_IFDIR, mode & S_IRWXU != S_IRWXU else { return }
            let fd = withCName(name) { openat(folderFD, $0, clinux_O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
            guard fd >= 0 else { return }
            // Before the walk enters it: it enters the folder next.
            if clinux_fchmod_path_fd(fd, mode | S_IRWXU) == 0 { unlocked.append((fd, mode)) } else { close(fd) }
        }
        return unlocked
    }

    /// A descriptor that writes the file open at `node` (`O_PATH`), whose status is `info`.
    /// A file its owner made read-only since is made writable for the moment it takes to
    /// open it: nothing else changes during a cut.
    ///
    /// `O_NONBLOCK`, and only a regular file: the node of a FIFO opened to write with no
    /// reader would block the cut for good (it changes nothing for a file).
    private static func writer(_ node: Int32, _ info: stat) -> Int32? {
        var now = stat()
        guard fstat(node, &now) == 0, now.st_mode & S_IFMT == S_IFREG else { return nil }
        let fd = clinux_reopen(node, O_WRONLY | O_NONBLOCK | O_CLOEXEC)
        if fd >= 0 { return fd }
        let mode = info.st_mode & 0o7777
        guard errno == EACCES, clinux_fchmod_path_fd(node, mode | S_IWUSR) == 0 else { return nil }
        let reopened = clinux_reopen(node, O_WRONLY | O_NONBLOCK | O_CLOEXEC)
        _ = clinux_fchmod_path_fd(node, mode)
        return reopened >= 0 ? reopened : nil
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
                         remade: inout [InodeKey: (fd: Int32, mode: mode_t)]) -> Bool {
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
            } else if withCName(name, { mkdirat(folderFD, $0, S_IRWXU) }) == 0 {
                let fd = withCName(name) { openat(folderFD, $0, clinux_O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
                if fd >= 0 {
                    _ = fchownat(fd, "", uid, gid, clinux_AT_EMPTY_PATH)
                    _ = clinux_fchmod_path_fd(fd, S_IRWXU)
                    remade[key] = (fd, mode)   // its mode once its names are back
                }
            }
        }
        return true
    }
}

extension FileSystem {
    /// Runs `body`, which changes the name `name` of `folder` (and `other`'s, for a
    /// rename), recording what they named first on a `power-loss` mount; `EIO` after a cut.
    @inline(__always)
    func trackingNames<R>(_ folder: Inode, _ name: [UInt8], _ other: (Inode, [UInt8])? = nil,
                          _ extra: () throws(Errno) -> Void = {}, _ body: () throws(Errno) -> R) throws(Errno) -> R {
        guard let powerLoss else { return try body() }
        var joined = false
        return try powerLoss.change({ () throws(Errno) in
            try recording { () throws(Errno) in
                try inodes.withDescriptor(folder) { fd throws(Errno) in try powerLoss.naming(folder.key, folderFD: fd, name) }
                if let (otherFolder, otherName) = other {
                    try inodes.withDescriptor(otherFolder) { fd throws(Errno) in try powerLoss.naming(otherFolder.key, folderFD: fd, otherName) }
                }
            }
            try extra()
            // Joined once nothing can refuse the rename, and parted if it fails: a rename that
            // never happened must not make one folder's names durable with the other's sync.
            if let (otherFolder, _) = other { joined = powerLoss.joined(folder.key, otherFolder.key) }
        }, { () throws(Errno) -> R in
            do throws(Errno) { return try body() } catch {
                if joined, let (otherFolder, _) = other { powerLoss.parted(folder.key, otherFolder.key) }
                throw error
            }
        })
    }

    /// Runs `body`, which makes `change` to the data of `node` (open at `fd`, if given),
    /// saving the durable bytes it alters first on a `power-loss` mount; `EIO` after a cut.
    /// Without a change, only the latter: a change the model does not track (metadata).
    @inline(__always)
    func trackingData<R>(_ node: Inode, _ fd: Int32?, _ change: Durability.Change?, _ body: () throws(Errno) -> R) throws(Errno) -> R {
        guard let powerLoss else { return try body() }
        return try powerLoss.change({ () throws(Errno) in
            guard let change, node.type == S_IFREG else { return }
            if let fd { try recordChange(node.key, fd, change) }
            else { try inodes.withDescriptor(node) { fd throws(Errno) in try recordChange(node.key, fd, change) } }
        }, body)
    }

    /// Saves what `change` alters of the durable data of the file `key`, open at `fd`.
    private func recordChange(_ key: InodeKey, _ fd: Int32, _ change: Durability.Change) throws(Errno) {
        guard let powerLoss else { return }
        try recording { () throws(Errno) in try powerLoss.changing(key, fd: fd, change) }
    }

    /// Runs `record`, again after halving the node cache if descriptors ran out. A change
    /// that cannot be recorded is refused, with `ENOSPC` or `EDQUOT` as the disk gave it,
    /// else with `EIO` (said once in the daemon's log): let through, the next cut would
    /// leave a state no power failure could.
    private func recording(_ record: () throws(Errno) -> Void) throws(Errno) {
        var failure: Errno
        do { return try record() } catch { failure = error }
        if failure.code == EMFILE || failure.code == ENFILE {
            inodes.shrink()
            do { return try record() } catch { failure = error }
        }
        if failure.code == ENOSPC || failure.code == EDQUOT { throw failure }
        if !Self.reportedRefusal.exchange(true, ordering: .relaxed) {
            let line = "containerfs: power-loss: a change to a file was refused with EIO: the daemon could not save its durable content (\(failure)). Give the daemon more descriptors (ulimit -Hn), or read access to the file.\n"
            _ = line.withCString { Glibc.write(2, $0, strlen($0)) }
            line.withCString { text in withVaList([text]) { vsyslog(LOG_WARNING, "%s", $0) } }
        }
        throw Errno(EIO)
    }

    private static let reportedRefusal = Atomic<Bool>(false)

    /// Before a rename of `name` in `from` to `newName` in `to`: a regular file renamed over
    /// another gets its data durable with the rename (`auto_da_alloc`), and its record holds
    /// it by a descriptor; refused as any change that cannot be recorded.
    func recordRenameOver(_ from: Inode, _ name: UnsafePointer<CChar>, _ to: Inode, _ newName: UnsafePointer<CChar>) throws(Errno) {
        guard let powerLoss else { return }
        try recording { () throws(Errno) in
            let fd = try inodes.withDescriptor(from) { fromFD in
                let fd = openat(fromFD, name, clinux_O_PATH | O_NOFOLLOW | O_CLOEXEC)
                return fd >= 0 ? fd : -errno
            }
            guard fd >= 0 else {
                // Out of descriptors: tried again, else refused; nothing there (or no way
                // there): the rename will say why.
                if -fd == EMFILE || -fd == ENFILE { throw Errno(-fd) }
                return
            }
            var moving = stat(), replaced = stat()
            guard fstat(fd, &moving) == 0, moving.st_mode & S_IFMT == S_IFREG,
                  (try? inodes.withDescriptor(to, { toFD in fstatat(toFD, newName, &replaced, AT_SYMLINK_NOFOLLOW) })) == 0,
                  replaced.st_mode & S_IFMT == S_IFREG else {
                close(fd)
                return
            }
            try powerLoss.renamedOver(to.key, InodeKey(moving), fd: fd)
        }
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
    func recordTruncation(_ directory: Inode, _ name: UnsafePointer<CChar>) throws(Errno) {
        guard powerLoss != nil else { return }
        let fd = (try? inodes.withDescriptor(directory) { directoryFD in openat(directoryFD, name, clinux_O_PATH | O_NOFOLLOW | O_CLOEXEC) }) ?? -1
        guard fd >= 0 else { return }   // no file yet (or the open will say why)
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return }
        try recordChange(InodeKey(info), fd, .truncate(to: 0))
    }
}
