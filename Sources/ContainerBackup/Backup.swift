import CLinux
import ContainerPolicy
import ContainerSigning
import ContainerStore
import Crypto
import Glibc

/// What a backup wrote.
public struct BackupSummary: Sendable {
    /// Entries written (folders, files, symlinks, hard links), the manifest not counted.
    public var entries = 0
    /// Files whose data was written (a hard link's other names not counted).
    public var files = 0
    /// The files' sizes (apparent sizes, as `ls -l` and `tar -tv` show them; held at
    /// `Int64.max`, which sparse files can pass between them).
    public var bytes: Int64 = 0
    /// The bytes of file data the archive holds: a plain file's size, a sparse file's data
    /// regions (its holes take no room).
    public var dataBytes: Int64 = 0
    /// Files written as sparse entries (they have holes).
    public var sparseFiles = 0
    /// Files that were deleted or replaced between the scan and their turn.
    public var vanished: [ContainerPath] = []
    /// The archive's size.
    public var archiveBytes: Int64 = 0
    /// The SHA-256 of the manifest, which names every file's SHA-256.
    public var manifestDigest: [UInt8] = []
}

/// Writes a container's backup set as a pax tar archive (SPEC §4, docs/backup.md).
public enum Backup {
    /// How often a file that changes while it is read is read again before giving up.
    static let attempts = 5
    /// Files from this size on are hashed on a second thread.
    static let backgroundHashSize = 256 * 1024

    /// Writes `set`, taken from `store`, to a new archive at `archivePath`, mode 0600
    /// (replacing a file there only once the archive is complete). `progress` is called with the bytes of
    /// file data done so far and the total.
    public static func write(_ store: Store, set: BackupSet, to archivePath: String,
                             progress: ((Int64, Int64) -> Void)? = nil) throws(UserError) -> BackupSummary {
        let (parentPath, leaf) = Store.splitParent(archivePath)
        let parentFD = Glibc.open(parentPath, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard parentFD >= 0 else {
            throw UserError.folderUnavailable("cannot write \(archivePath)", folder: parentPath, Errno.current)
        }
        defer { close(parentFD) }
        try checkOutsideStore(parentPath, store: store, archivePath: archivePath)
        var existing = stat()
        if withCName(leaf, { fstatat(parentFD, $0, &existing, AT_SYMLINK_NOFOLLOW) }) == 0, existing.st_mode & S_IFMT != S_IFREG {
            throw UserError.usage("\(archivePath) exists and is not a file: name a new archive file")
        }

        // What an earlier backup to this archive left when it was killed goes first.
        StagingName.removeAbandoned(in: parentFD, beside: leaf, "partial")
        // Mode 0600 from the start: the archive holds files other users may not read. A
        // fresh unpredictable name, so nobody sharing the folder can block or pre-create it,
        // held locked while this backup lives.
        let partial: [UInt8]
        let fd: Int32
        do {
            (partial, fd) = try StagingName.createHeld(in: parentFD, beside: leaf, "partial", folder: false, mode: 0o600)
        } catch {
            throw UserError.failed("cannot write \(archivePath)", error)
        }
        var done = false
        defer {
            close(fd)
            if !done { _ = withCName(partial) { unlinkat(parentFD, $0, 0) } }
        }
        var summary: BackupSummary
        do {
            var backup = try BackupWriter(store: store, set: set, sink: FileArchiveSink(fd: fd), progress: progress)
            summary = try backup.run()
            try sys { fsync(fd) }
            try withCName(partial) { (from) throws(Errno) in
                try withCName(leaf) { (to) throws(Errno) in _ = try sys { renameat(parentFD, from, parentFD, to) } }
            }
            done = true
        } catch let error as UserError {
            throw error
        } catch {
            throw UserError.failed("cannot write \(archivePath)", error)
        }
        var info = stat()
        if fstat(fd, &info) == 0 { summary.archiveBytes = Int64(info.st_size) }
        return summary
    }

    /// An archive written inside the container would end up in its own backup.
    private static func checkOutsideStore(_ parentPath: String, store: Store, archivePath: String) throws(UserError) {
        guard let parent = realpath(parentPath, nil), let root = realpath(store.path, nil) else { return }
        defer { free(parent); free(root) }
        let (folder, storeRoot) = (String(cString: parent), String(cString: root))
        if folder == storeRoot || folder.hasPrefix(storeRoot + "/") {
            throw UserError.usage("\(archivePath) is inside the container \(store.path): write the archive outside it")
        }
    }
}

/// One backup being written: the manifest's room first, then every item, then the manifest.
struct BackupWriter {
    let store: Store
    let set: BackupSet
    let writer: ArchiveWriter
    let progress: ((Int64, Int64) -> Void)?
    var summary = BackupSummary()
    /// Where the manifest's room is in the archive, and how much of it is filled: each
    /// record line goes there as soon as its entry is written, so no list of records is
    /// kept (in an upload, the room's parts are held in memory until the end anyway).
    var manifestOffset: Int64 = 0
    var manifestRoom = 0
    var manifestFilled = 0
    var manifestHasher = SHA256()
    /// The first path written for each hard-linked file, and its change time then: an
    /// inode number freed during the backup can go to a new file, which must not become a
    /// hard link to the old one's entry (nor may a file changed since its first name).
    var written: [InodeIdentity: (path: ContainerPath, changed: timespec)] = [:]
    /// Two buffers: one is read into while the other's chunk is being hashed.
    let buffers = [UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 4096),
                   UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 4096)]
    let backgroundHasher = BackgroundHasher()

    init(store: Store, set: BackupSet, sink: any ArchiveSink, progress: ((Int64, Int64) -> Void)?) throws {
        self.store = store
        self.set = set
        self.progress = progress
        writer = try ArchiveWriter(sink: sink)
    }

    mutating func run() throws -> BackupSummary {
        defer {
            backgroundHasher.drain()
            buffers.forEach { $0.deallocate() }
        }
        let manifestHeader = BackupManifest(bundleName: store.layout.groupIdentifier ?? store.layout.bundleName, bundleManifestDigest: BundleSignature.manifestDigest(of: store), records: []).header
        manifestRoom = reservedRoom(manifestHeader)
        let now = currentTime()
        try writer.writeHeader(ArchiveEntryHeader(
            path: BackupManifest.entryPath, type: S_IFREG, permissions: 0o644, size: Int64(manifestRoom),
            modified: now, accessed: now, uid: getuid(), gid: getgid()))
        // The manifest's header, then newlines (blank lines mean nothing) that the record
        // lines overwrite as they come.
        manifestOffset = writer.sink.position
        writer.sink.willPatch(from: manifestOffset, count: manifestRoom)
        try manifestHeader.withUnsafeBytes { try writer.writeData($0) }
        manifestHasher.update(data: manifestHeader)
        manifestFilled = manifestHeader.count
        try writeNewlines(manifestRoom - manifestHeader.count) { try writer.writeData($0) }
        try writer.finishEntry()

        progress?(0, set.totalBytes)
        for item in set.items {
            switch item.kind {
            case .directory:
                try writer.writeHeader(header(item, info: item.info))
                try writer.finishEntry()
                try record(.directory(item.path))
            case .symlink:
                var header = header(item, info: item.info)
                header.symlinkTarget = item.symlinkTarget
                try writer.writeHeader(header)
                try writer.finishEntry()
                try record(.symlink(item.path, target: item.symlinkTarget ?? []))
            case .file:
                guard try writeFile(item) else {
                    summary.vanished.append(item.path)
                    continue
                }
            }
            summary.entries += 1
        }

        try writer.finish()
        writeNewlines(manifestRoom - manifestFilled) { manifestHasher.update(bufferPointer: $0) }
        summary.manifestDigest = Array(manifestHasher.finalize())
        return summary
    }

    /// Puts an entry's line in the manifest's room.
    private mutating func record(_ record: BackupManifest.Record) throws {
        let line = BackupManifest.line(record)
        guard line.count <= manifestRoom - manifestFilled else {
            throw ArchiveFailure(description: "the manifest outgrew its room (\(manifestRoom) bytes): the container changed a lot during the backup; try again")
        }
        try writer.sink.patch(line, at: manifestOffset + Int64(manifestFilled))
        manifestHasher.update(data: line)
        manifestFilled += line.count
    }

    /// The manifest's size, known before any file is read: its header, a line per item as
    /// the scan predicts it, and room for hard links that turn out otherwise (a file whose
    /// first name vanished) — each such line can grow to a file line or name a longer path.
    private func reservedRoom(_ header: [UInt8]) -> Int {
        var room = header.count + 4096
        var longestLinkedPath: [InodeIdentity: Int] = [:]
        for item in set.items where item.kind == .file && item.info.links > 1 {
            longestLinkedPath[item.info.identity, default: 0] = max(longestLinkedPath[item.info.identity] ?? 0, BackupManifest.escape(item.path.bytes).count)
        }
        for item in set.items {
            switch item.kind {
            case .directory: room += BackupManifest.line(.directory(item.path)).count
            case .symlink: room += BackupManifest.line(.symlink(item.path, target: item.symlinkTarget ?? [])).count
            case .file:
                let fileLine = BackupManifest.line(.file(item.path, sha256: [UInt8](repeating: 0, count: 32))).count
                if let longest = longestLinkedPath[item.info.identity] {
                    room += max(fileLine, BackupManifest.escape(item.path.bytes).count + longest + 4)
                } else {
                    room += fileLine
                }
            }
        }
        return room
    }

    private func header(_ item: BackupItem, info: ItemStat) -> ArchiveEntryHeader {
        ArchiveEntryHeader(
            path: item.path.bytes, type: info.mode & S_IFMT, permissions: info.mode & 0o7777,
            modified: info.modified, accessed: info.accessed, uid: info.uid, gid: info.gid,
            attributes: item.attributes)
    }

    /// Whether `path` is below Documents/Inbox.
    private func isInInbox(_ path: ContainerPath) -> Bool {
        store.layout.location(of: path) == .inside(.inbox)
    }

    /// Writes a file, consistent with itself: read through one descriptor while hashing,
    /// then checked unchanged (size, times); if it changed, its entry is taken back and it
    /// is read again. Returns false if it is gone or no longer a file.
    private mutating func writeFile(_ item: BackupItem) throws -> Bool {
        // openat2 refusing every symlink on the way; O_NONBLOCK in case it became a FIFO.
        let fd = withCName(item.path.bytes) { clinux_open_beneath(store.rootFD, $0, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0) }
        if fd < 0 {
            if [ENOENT, ENOTDIR, ELOOP, ENXIO, EXDEV].contains(errno) { return false }  // gone or replaced
            if errno == ENAMETOOLONG {
                throw UserError("cannot back up \(item.path): its path is longer than \(PATH_MAX) bytes, which an archive cannot restore; move it up or exclude its folder from backup")
            }
            throw Errno.current
        }
        defer { close(fd) }
        for _ in 0..<Backup.attempts {
            var before = stat()
            try sys { fstat(fd, &before) }
            guard before.st_mode & S_IFMT == S_IFREG else { return false }
            let identity = InodeIdentity(before)
            // A name across Documents/Inbox from the first is written as a copy: a restore
            // refuses such a link, which would let the app change a handed-over file.
            if before.st_nlink > 1, let first = written[identity], same(first.changed, before.st_ctim),
               isInInbox(first.path) == isInInbox(item.path) {
                var header = header(item, info: ItemStat(before))
                header.hardLinkTarget = first.path.bytes
                try writer.writeHeader(header)
                try writer.finishEntry()
                try record(.hardLink(item.path, target: first.path))
                return true
            }
            // A write in the same tick of the kernel's coarse clock as the last one leaves
            // the times as they are: wait until that tick is over, so any write from now on
            // shows. ctime, because no program can set it.
            if !waitForTickAfter(before.st_ctim) { continue }
            // A write that began before that (its times stamped in the tick now over) may
            // still be copying its data: wait for it. The file system holds the inode's lock
            // through a whole write, and SEEK_HOLE takes it (ext4, btrfs, tmpfs); any
            // write from here on stamps a later time, which the check after the read sees.
            // Its answer also says whether the file has a hole: one before its end.
            let firstHole = Int64(lseek(fd, 0, seekHole))
            let mark = writer.sink.markRewindPoint()
            var fileHeader = header(item, info: ItemStat(before))
            fileHeader.size = Int64(before.st_size)
            if firstHole >= 0, firstHole < fileHeader.size {
                let map = try Self.dataRegions(fd, size: fileHeader.size, firstHole: firstHole, path: item.path)
                fileHeader.sparseMap = map
                try writer.writeHeader(fileHeader)
                guard let digest = try writeSparseData(fd, map) else {
                    try writer.finishEntry()
                    try writer.sink.rewind(to: mark)
                    continue
                }
                var after = stat()
                try sys { fstat(fd, &after) }
                if after.st_size != before.st_size || !same(after.st_mtim, before.st_mtim) || !same(after.st_ctim, before.st_ctim) {
                    try writer.finishEntry()
                    try writer.sink.rewind(to: mark)
                    continue
                }
                try writer.finishEntry()
                try record(.sparseFile(item.path, sha256: digest))
                if before.st_nlink > 1 { written[identity] = (item.path, before.st_ctim) }
                summary.files += 1
                summary.sparseFiles += 1
                summary.bytes = summary.bytes.addingSaturated(Int64(before.st_size))
                summary.dataBytes = summary.dataBytes.addingSaturated(map.dataBytes)
                return true
            }
            try writer.writeHeader(fileHeader)
            // Hashed while it is read and written (a large file on the second core).
            var digest = DigestStream(size: Int64(before.st_size), background: backgroundHasher, buffers: buffers)
            var changed = false
            while digest.count < Int64(before.st_size) {
                let buffer = digest.nextBuffer()
                let offset = digest.count
                let count = try sys { pread(fd, buffer.baseAddress, Int(min(Int64(buffer.count), Int64(before.st_size) - offset)), off_t(offset)) }
                if count == 0 {
                    changed = true  // it shrank
                    break
                }
                let chunk = UnsafeRawBufferPointer(rebasing: buffer[0..<count])
                digest.update(inBuffer: chunk)
                try writer.writeData(chunk)
                progress?(summary.bytes + digest.count, set.totalBytes)
            }
            var after = stat()
            try sys { fstat(fd, &after) }
            if changed || after.st_size != before.st_size || !same(after.st_mtim, before.st_mtim) || !same(after.st_ctim, before.st_ctim) {
                // Take the entry back (libarchive fills a short entry with zeros as it
                // finishes it); the sink still holds every byte since `mark`, or truncates.
                digest.abandon()  // the buffers are read into again at once
                try writer.finishEntry()
                try writer.sink.rewind(to: mark)
                continue
            }
            try writer.finishEntry()
            try record(.file(item.path, sha256: digest.finalize()))
            if before.st_nlink > 1 { written[identity] = (item.path, before.st_ctim) }
            summary.files += 1
            summary.bytes = summary.bytes.addingSaturated(Int64(before.st_size))
            summary.dataBytes = summary.dataBytes.addingSaturated(Int64(before.st_size))
            return true
        }
        throw UserError("\(item.path) kept changing while it was read (\(Backup.attempts) tries): back up when the app is not writing it, or exclude it (containerfs exclude)")
    }
}

extension BackupWriter {
    /// Where a file of `size` bytes whose first hole is at `firstHole` holds data, found
    /// with `lseek(SEEK_DATA)` and `lseek(SEEK_HOLE)` on the descriptor it is read through
    /// (a region the file system reports as data may hold zeros: it is stored as it is).
    /// A file with more regions than an archive may hold (`limit`) fails the backup, naming it.
    static func dataRegions(_ fd: Int32, size: Int64, firstHole: Int64, path: ContainerPath,
                            limit: Int = SparseMap.regionLimit) throws -> SparseMap {
        var regions: [SparseRegion] = []
        if firstHole > 0 { regions.append(SparseRegion(offset: 0, length: firstHole)) }
        var position = firstHole
        while position < size {
            let data = Int64(lseek(fd, off_t(position), seekData))
            if data < 0 {
                if errno == ENXIO { break }  // no data after `position`: a hole to the end
                throw Errno.current
            }
            if data >= size { break }
            var hole = Int64(lseek(fd, off_t(data), seekHole))
            if hole < 0 {
                if errno != ENXIO { throw Errno.current }
                hole = size  // it shrank meanwhile: the check after the read sees it
            }
            let end = min(hole, size)
            regions.append(SparseRegion(offset: data, length: end - data))
            guard regions.count <= limit else {
                throw UserError("cannot back up \(path): it has more than \(limit) data regions between its holes, more than an archive holds of one file; exclude it from backup (containerfs exclude)")
            }
            position = end
        }
        return SparseMap(regions: regions, size: size).alignedToTarBlocks
    }

    /// Writes a sparse entry's data: each hole passed to libarchive (which skips it), each
    /// region read and hashed. Returns the manifest's digest, or nil if the file shrank.
    mutating func writeSparseData(_ fd: Int32, _ map: SparseMap) throws -> [UInt8]? {
        // The map first, then the data (much of it hashed on the second core).
        var digest = DigestStream(size: map.dataBytes, prefix: map.digestPrefix, background: backgroundHasher, buffers: buffers)
        var position: Int64 = 0
        try writer.startSparseData()
        for region in map.regions {
            try writer.writeHole(region.offset - position)
            var offset = region.offset
            let end = region.offset + region.length
            while offset < end {
                let buffer = digest.nextBuffer()
                let count = try sys { pread(fd, buffer.baseAddress, Int(min(Int64(buffer.count), end - offset)), off_t(offset)) }
                if count == 0 {  // it shrank
                    digest.abandon()  // the buffers are read into again at once
                    return nil
                }
                let chunk = UnsafeRawBufferPointer(rebasing: buffer[0..<count])
                digest.update(inBuffer: chunk)
                try writer.writeData(chunk)
                offset += Int64(count)
                progress?(summary.bytes.addingSaturated(offset), set.totalBytes)
            }
            position = end
        }
        return digest.finalize()
    }
}

/// Hands `count` newlines to `body`, 64 KiB at a time.
private func writeNewlines(_ count: Int, _ body: (UnsafeRawBufferPointer) throws -> Void) rethrows {
    let newlines = [UInt8](repeating: UInt8(ascii: "\n"), count: min(count, 1 << 16))
    var left = count
    while left > 0 {
        let length = min(left, newlines.count)
        try newlines.withUnsafeBytes { try body(UnsafeRawBufferPointer(rebasing: $0[0..<length])) }
        left -= length
    }
}

/// `SEEK_HOLE` (Linux's value): Swift's Glibc module leaves it out (it is a GNU extension).
private let seekHole: Int32 = 4
/// `SEEK_DATA`, likewise.
private let seekData: Int32 = 3

private func same(_ a: timespec, _ b: timespec) -> Bool { a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec }

func currentTime() -> timespec {
    var now = timespec()
    clock_gettime(CLOCK_REALTIME, &now)
    return now
}

/// Waits (a few milliseconds at most) until the kernel's coarse clock, which stamps file
/// times, has moved past `time`; false if it has not after a second (a clock set back).
private func waitForTickAfter(_ time: timespec) -> Bool {
    for _ in 0..<1000 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME_COARSE, &now)
        if (now.tv_sec, now.tv_nsec) > (time.tv_sec, time.tv_nsec) { return true }
        usleep(1000)
    }
    return false
}
