import CLinux
import ContainerPolicy
import ContainerSigning
import ContainerStore
import Foundation
import Glibc

/// What a restore made.
public struct RestoreSummary: Sendable {
    /// Entries restored (folders, files, symlinks, hard links).
    public var entries = 0
    /// The restored files' sizes (apparent sizes, held at `Int64.max`).
    public var bytes: Int64 = 0
    /// The bytes of file data written: a sparse file's data regions, not its holes.
    public var dataBytes: Int64 = 0
    /// The bundle named in the backup.
    public var bundleName: [UInt8] = []
}

/// Makes a container from a backup archive, as a device restored from backup: the data
/// from the archive, empty `Library/Caches` and `tmp`, and a fresh install of the bundle
/// (SPEC §4, docs/backup.md).
///
/// One pass, verifying as it reads: the container is built in a hidden sibling of `STORE`,
/// through descriptors that follow no symlink; each entry is checked against the rules for
/// hostile archives and against the manifest (the archive's first entry), each file's
/// SHA-256 as it is written. Only an archive that verified to its end is renamed into
/// place: a failure at any point leaves nothing behind.
public enum Restore {
    /// The largest manifest read into memory (about ten million entries).
    static let manifestLimit: Int64 = 1 << 30

    /// Restores `archivePath` into a new container at `storePath`, installing the bundle
    /// at `bundlePath` as `create` does (signed with `installerKey`, when given). `admit`
    /// sees the complete container built aside (its root) just before it is renamed into
    /// place, and may refuse it (a full device: `DeviceInstall`); then nothing is written.
    public static func restore(archive archivePath: String, to storePath: String, bundle bundlePath: String?,
                               installerKey: InstallerKey? = nil,
                               progress: ((Int64, Int64) -> Void)? = nil,
                               admit: Admit? = nil) throws(UserError) -> RestoreSummary {
        let fd = Glibc.open(archivePath, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw UserError.failed("cannot read archive \(archivePath)", Errno.current) }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG else {
            throw UserError.usage("\(archivePath) is not a file: name a backup archive made by 'containerfs backup'")
        }
        return try restore(.file(fd), size: Int64(info.st_size), named: archivePath, to: storePath, bundle: bundlePath,
                           installerKey: installerKey, progress: progress, admit: admit)
    }

    /// A last check of the restored container built aside, given its root's descriptor.
    public typealias Admit = (_ rootFD: Int32) throws(UserError) -> Void

    /// Restores the archive read from `input` (`size` bytes, for the progress; `archivePath`
    /// names it in messages).
    static func restore(_ input: ArchiveInput, size: Int64, named archivePath: String, to storePath: String, bundle bundlePath: String?,
                        installerKey: InstallerKey?, progress: ((Int64, Int64) -> Void)?, admit: Admit?) throws(UserError) -> RestoreSummary {
        let (parentPath, leaf) = Store.splitParent(storePath)
        // No bundle: the target is a group container, named by its identifier (docs/groups.md).
        let isGroup = bundlePath == nil
        if isGroup, let problem = AppGroup.problem(with: String(decoding: leaf, as: UTF8.self)) {
            throw UserError.usage("restore \(storePath) without --bundle makes a group container, named by its identifier: \(problem); for an app's, name its bundle with --bundle")
        }
        var bundleName = leaf
        if let bundlePath { bundleName = try checkBundle(bundlePath) }
        let parentFD = Glibc.open(parentPath, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard parentFD >= 0 else {
            throw UserError.folderUnavailable("cannot restore into \(storePath)", folder: parentPath, role: "parent folder", Errno.current)
        }
        defer { close(parentFD) }
        try checkTargetIsFree(parentFD, leaf, path: storePath)

        // What an earlier restore to this path left when it was killed goes first.
        StagingName.removeAbandoned(in: parentFD, beside: leaf, "restoring")
        let staging: [UInt8], lock: Int32
        if let bundlePath {
            (staging, lock) = try Store.buildAsideHeld(in: parentFD, beside: leaf, "restoring", bundle: bundlePath,
                                                       seal: Store.seal(installerKey), path: storePath)
        } else {
            (staging, lock) = try Store.buildGroupAsideHeld(in: parentFD, leaf, "restoring", path: storePath)
        }
        defer { close(lock) }
        var summary = RestoreSummary()
        do {
            let store = try Store.open(at: parentFD, staging, path: storePath)
            var pass = try ArchivePass(input, total: size, into: store, progress: progress)
            summary.bundleName = try pass.run()
            summary.entries = pass.entries
            summary.bytes = pass.bytes
            summary.dataBytes = pass.dataBytes
            let rootFD = try sys { openat(store.rootFD, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
            defer { close(rootFD) }
            try sys { clinux_syncfs(rootFD) }
            try admit?(rootFD)
            try withCName(staging) { (from) throws(Errno) in
                try withCName(leaf) { (to) throws(Errno) in _ = try sys { renameat(parentFD, from, parentFD, to) } }
            }
        } catch {
            removeTree(at: parentFD, staging)
            switch error {
            case let error as UserError: throw error
            case let other as AnotherApp:
                throw UserError.usage("\(archivePath) is a backup of \(ContainerPath.printable(other.bundleName)), not \(ContainerPath.printable(bundleName)): name that app's bundle with --bundle (a group's archive restores to DEVICE/ID, without --bundle); nothing was written")
            case let refusal as Refusal: throw UserError("refused \(archivePath): \(refusal.reason); nothing was written")
            case let failure as ArchiveFailure:
                if let source = failure.source { throw UserError("\(source.message); nothing was written", exitCode: source.exitCode) }
                throw UserError("refused \(archivePath): it is corrupt or truncated (\(failure)); nothing was written")
            case let error as Errno where error.code == ENOTEMPTY || error.code == EEXIST:
                throw UserError("cannot restore into \(storePath): something was put there during the restore; nothing was written")
            default: throw UserError("cannot restore into \(storePath): \(error); nothing was written")
            }
        }
        return summary
    }

    /// The bundle's name, after the checks `create` makes, so that they come before the
    /// long first pass.
    private static func checkBundle(_ bundlePath: String) throws(UserError) -> [UInt8] {
        var info = stat()
        guard lstat(bundlePath, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else {
            throw UserError.usage("no bundle folder at \(bundlePath): name the app's NAME.app folder with --bundle")
        }
        return Store.splitParent(bundlePath).leaf
    }

    private static func checkTargetIsFree(_ parentFD: Int32, _ leaf: [UInt8], path: String) throws(UserError) {
        var info = stat()
        guard withCName(leaf, { fstatat(parentFD, $0, &info, AT_SYMLINK_NOFOLLOW) }) == 0 else { return }
        if info.st_mode & S_IFMT == S_IFDIR, let fd = try? withCName(leaf, { (name) throws(Errno) in
            try sys { openat(parentFD, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
        }) {
            defer { close(fd) }
            if (try? Directory.entries(of: fd).isEmpty) == true { return }
        }
        throw UserError.usage("\(path) already exists and is not an empty folder: restore into a new path")
    }
}

/// Why an archive is refused: one phrase naming the entry and the rule.
struct Refusal: Error {
    let reason: String
    init(_ reason: String) { self.reason = reason }
}

/// The archive is a backup of another app than the bundle given.
struct AnotherApp: Error {
    let bundleName: [UInt8]
}

/// The one pass over an archive: every entry checked against the rules and the manifest,
/// then written below the store's root, every file's SHA-256 checked as it is written.
private struct ArchivePass {
    let reader: ArchiveReader
    let total: Int64
    let store: Store
    let progress: ((Int64, Int64) -> Void)?
    var entries = 0
    var bytes: Int64 = 0
    var dataBytes: Int64 = 0

    /// Paths of the entries so far, by kind: a path may appear once, an entry's parent
    /// must be an earlier folder, a hard link must name an earlier file.
    private var directories: Set<ContainerPath> = []
    private var files: Set<ContainerPath> = []
    private var others: Set<ContainerPath> = []
    /// Folders made, to set their modes and times last (children first).
    private var madeDirectories: [(path: ContainerPath, entry: ArchiveEntryRead)] = []
    /// The folder entries are written into, kept open while siblings follow.
    private var parent: (path: ContainerPath, fd: Int32)?
    private let layout: ContainerLayout
    /// Two buffers for chunks of a large file being hashed on the second core.
    private let buffers = [UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 4096),
                           UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 4096)]
    private let backgroundHasher = BackgroundHasher()

    init(_ input: ArchiveInput, total: Int64, into store: Store, progress: ((Int64, Int64) -> Void)?) throws {
        reader = try ArchiveReader(input)
        self.total = total
        self.store = store
        self.progress = progress
        layout = store.layout
    }

    /// Returns the bundle name the manifest gives.
    mutating func run() throws -> [UInt8] {
        defer {
            if let parent { close(parent.fd) }
            backgroundHasher.drain()
            buffers.forEach { $0.deallocate() }
        }
        progress?(0, total)
        guard let first = try reader.next(), first.path == BackupManifest.entryPath, first.type == S_IFREG, first.hardLinkTarget == nil else {
            throw Refusal("it is not a containerfs backup (its first entry is not \(String(decoding: BackupManifest.entryPath, as: UTF8.self)))")
        }
        guard first.size <= Restore.manifestLimit else { throw Refusal("its manifest is implausibly large") }
        var manifestBytes: [UInt8] = []
        manifestBytes.reserveCapacity(Int(first.size))
        try reader.readData { manifestBytes += $0 }
        guard var manifest = BackupManifest.RecordReader(manifestBytes) else { throw Refusal("its manifest is malformed") }
        guard manifest.bundleName == (layout.groupIdentifier ?? layout.bundleName) else { throw AnotherApp(bundleName: manifest.bundleName) }

        // Each entry with the manifest's next record, parsed as it is needed.
        while var entry = try reader.next() {
            let record = manifest.next()
            if manifest.malformed { throw Refusal("its manifest is malformed") }
            if let record { entry.adoptExactNames(from: record) }
            let (path, kind) = try check(entry)
            guard let record else { throw Refusal("entry \(path) is not in the manifest") }
            try extract(entry, path: path, kind: kind, record: record)
            entries += 1
            progress?(reader.bytesRead, total)
        }
        if let missing = manifest.next() {
            throw Refusal("it ends before \(missing.path), which the manifest lists: it is truncated")
        }
        if manifest.malformed { throw Refusal("its manifest is malformed") }
        try finishDirectories()
        progress?(total, total)
        return manifest.bundleName
    }

    /// The rules every entry must pass (docs/backup.md, "Hostile archives"); returns the
    /// entry's path and what it is.
    private mutating func check(_ entry: ArchiveEntryRead) throws -> (ContainerPath, BackupItem.Kind?) {
        let shown = ContainerPath.printable(entry.path)
        var bytes = entry.path
        if entry.type == S_IFDIR { while bytes.count > 1, bytes.last == UInt8(ascii: "/") { bytes.removeLast() } }
        if bytes.first == UInt8(ascii: "/") { throw Refusal("entry \(shown) has an absolute path") }
        let parts = bytes.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false)
        if parts.contains(where: { $0.elementsEqual([0x2E, 0x2E]) }) { throw Refusal("entry \(shown) has '..' in its path") }
        guard let path = ContainerPath(strict: bytes) else { throw Refusal("entry \(shown) has a malformed path") }

        // What it is: a hard link (to an earlier file), a file, a folder or a symlink.
        let kind: BackupItem.Kind?
        if entry.hardLinkTarget != nil {
            guard entry.type == S_IFREG || entry.type == 0 else { throw Refusal("entry \(path) is a hard link of an odd type") }
            kind = nil
        } else {
            switch entry.type {
            case S_IFREG: kind = .file
            case S_IFDIR: kind = .directory
            case S_IFLNK: kind = .symlink
            case S_IFCHR, S_IFBLK: throw Refusal("entry \(path) is a device file")
            case S_IFIFO: throw Refusal("entry \(path) is a FIFO")
            case S_IFSOCK: throw Refusal("entry \(path) is a socket")
            default: throw Refusal("entry \(path) is of an unknown type")
            }
        }
        // A sparse entry's size is its GNU.sparse.realsize, which libarchive takes as written.
        if entry.size < 0 { throw Refusal("entry \(path) has a negative size (\(entry.size))") }
        if entry.sparseRegionCount > 0 {
            // GNU's "sparse 1.0" entry, as a backup writes a file with holes; its map is
            // checked here, its data against the map as it comes (`extract`).
            guard kind == .file else { throw Refusal("entry \(path) has a sparse map but is not a file") }
            guard let map = entry.sparseMap else {
                throw Refusal("entry \(path) is a sparse file whose map has \(entry.sparseRegionCount) data regions, more than the \(SparseMap.regionLimit) a backup writes")
            }
            if let problem = map.problem { throw Refusal("entry \(path) is a sparse file: \(problem)") }
        }

        // Where it is: only the backup set.
        switch layout.location(of: path) {
        case .standard(.documents), .standard(.inbox), .standard(.library), .standard(.applicationSupport), .standard(.preferences):
            guard kind == .directory else { throw Refusal("entry \(path) would replace a standard folder") }
        case .inside(.data), .inside(.inbox):
            break
        case .standard(.caches), .inside(.cache): throw Refusal("entry \(path) is in Library/Caches, which is never backed up")
        case .standard(.tmp), .inside(.temporary): throw Refusal("entry \(path) is in tmp, which is never backed up")
        case .bundle: throw Refusal("entry \(path) is in the bundle, which a backup never holds")
        case .hidden: throw Refusal("entry \(path) is in the state folder, which a backup never holds")
        case .root, .foreign, .inside, .standard: throw Refusal("entry \(path) is outside the backup set (Documents/ and Library/)")
        }
        if directories.contains(path) || files.contains(path) || others.contains(path) {
            throw Refusal("entry \(path) appears twice")
        }
        let parentPath = ContainerPath(components: Array(path.components.dropLast()))
        if !parentPath.components.isEmpty, !directories.contains(parentPath) {
            if others.contains(parentPath) || isBelowSymlinkOrFile(path) {
                throw Refusal("entry \(path) passes through a symlink or a file")
            }
            throw Refusal("entry \(path) comes before its folder")
        }
        if let target = entry.hardLinkTarget {
            guard let targetPath = ContainerPath(strict: target), files.contains(targetPath) else {
                throw Refusal("entry \(path) is a hard link to \(ContainerPath.printable(target)), which is not an earlier file of the archive")
            }
            // Through the mount such a link is denied (SPEC §2): the app could change the
            // handed-over file under its other name. A backup writes such a name as a copy.
            if (layout.location(of: targetPath) == .inside(.inbox)) != (layout.location(of: path) == .inside(.inbox)) {
                throw Refusal("entry \(path) is a hard link to \(targetPath) across Documents/Inbox, which would let the app change a handed-over file under its other name")
            }
        }
        if kind == .symlink, (entry.symlinkTarget ?? []).isEmpty { throw Refusal("entry \(path) is a symlink without a target") }
        for attribute in entry.attributes where !attribute.name.starts(with: Array("user.".utf8)) {
            throw Refusal("entry \(path) carries the extended attribute \(ContainerPath.printable(attribute.name)); a backup holds only user.* attributes")
        }
        switch kind {
        case .directory: directories.insert(path)
        case .file, nil: files.insert(path)
        case .symlink: others.insert(path)
        }
        return (path, kind)
    }

    private func isBelowSymlinkOrFile(_ path: ContainerPath) -> Bool {
        (1..<path.components.count).contains { count in
            let ancestor = ContainerPath(components: Array(path.components.prefix(count)))
            return others.contains(ancestor) || files.contains(ancestor)
        }
    }

    /// Writes the entry, once it is what the manifest says; a file's data must hash to its
    /// SHA-256 there (checked when it is written, before the next entry).
    private mutating func extract(_ entry: ArchiveEntryRead, path: ContainerPath, kind: BackupItem.Kind?, record: BackupManifest.Record) throws {
        switch (kind, record) {
        case (.directory, .directory(let p)) where p == path: break
        case (.file, .file(let p, _)) where p == path && entry.sparseMap == nil: break
        case (.file, .sparseFile(let p, _)) where p == path && entry.sparseMap != nil: break
        case (.symlink, .symlink(let p, let target)) where p == path && target == entry.symlinkTarget: break
        case (nil, .hardLink(let p, let target)) where p == path && target.bytes == entry.hardLinkTarget: break
        default: throw Refusal("entry \(path) does not match its manifest (which lists \(record.path) there): the archive was changed or damaged")
        }
        let parentFD = try openParent(of: path)
        let name = path.components.last!
        switch kind {
        case .directory:
            if case .standard = layout.location(of: path) {
                // Made by the fresh install already.
            } else {
                try withCName(name) { (cname) throws(Errno) in _ = try sys { mkdirat(parentFD, cname, 0o700) } }
            }
            if !entry.attributes.isEmpty {
                let fd = try withCName(name) { (cname) throws(Errno) in
                    try sys { openat(parentFD, cname, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
                }
                defer { close(fd) }
                try setAttributes(entry.attributes, fd)
            }
            madeDirectories.append((path, entry))
        case .file:
            let fd = try withCName(name) { (cname) throws(Errno) in
                try sys { openat(parentFD, cname, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600) }
            }
            defer { close(fd) }
            if let map = entry.sparseMap {
                try extractSparse(fd, map, path: path, record: record)
                try setAttributes(entry.attributes, fd)
                try sys { fchmod(fd, HandedOverMode.file(entry.permissions)) }
                var times = self.times(entry)
                try sys { futimens(fd, &times) }
                return
            }
            // A large file is hashed on the second core: each chunk copied out of
            // libarchive's buffer (valid only until the next read).
            var digest = DigestStream(size: entry.size, background: backgroundHasher, buffers: buffers)
            try reader.readData { chunk in
                digest.update(copying: chunk)
                var done = 0
                while done < chunk.count {
                    let start = done
                    done += try sys { write(fd, chunk.baseAddress! + start, chunk.count - start) }
                }
            }
            guard digest.count == entry.size else { throw ArchiveFailure(description: "entry \(path) is shorter than its header says") }
            guard BackupManifest.Record.file(path, sha256: digest.finalize()) == record else {
                throw Refusal("file \(path) does not match the SHA-256 in its manifest (the archive was changed or damaged)")
            }
            bytes = bytes.addingSaturated(digest.count)
            dataBytes = dataBytes.addingSaturated(digest.count)
            try setAttributes(entry.attributes, fd)
            try sys { fchmod(fd, HandedOverMode.file(entry.permissions)) }
            var times = self.times(entry)
            try sys { futimens(fd, &times) }
        case .symlink:
            try withCName(entry.symlinkTarget!) { (target) throws(Errno) in
                try withCName(name) { (cname) throws(Errno) in _ = try sys { symlinkat(target, parentFD, cname) } }
            }
            var times = self.times(entry)
            try withCName(name) { (cname) throws(Errno) in _ = try sys { utimensat(parentFD, cname, &times, AT_SYMLINK_NOFOLLOW) } }
        case nil:
            let target = ContainerPath(strict: entry.hardLinkTarget!)!
            let targetParent = ContainerPath(components: Array(target.components.dropLast()))
            // A group's files lie at its root too: openat2 opens no empty path.
            let targetParentFD = try withCName(targetParent.components.isEmpty ? [0x2E] : targetParent.bytes) { (cname) throws(Errno) in
                try sys { clinux_open_beneath(store.rootFD, cname, clinux_O_PATH | O_DIRECTORY | O_CLOEXEC, 0) }
            }
            defer { close(targetParentFD) }
            // linkat without AT_SYMLINK_FOLLOW links the named entry itself, never what it points to.
            try withCName(target.components.last!) { (from) throws(Errno) in
                try withCName(name) { (to) throws(Errno) in _ = try sys { linkat(targetParentFD, from, parentFD, to, 0) } }
            }
        }
    }

    /// Writes a sparse entry's file: its apparent size first (`ftruncate`, no block taken),
    /// then only its data regions, each block checked to be the map's next data before it
    /// is written; the digest (map and data) must be the manifest's.
    private mutating func extractSparse(_ fd: Int32, _ map: SparseMap, path: ContainerPath, record: BackupManifest.Record) throws {
        if ftruncate(fd, off_t(map.size)) != 0 {
            if errno == EFBIG || errno == EINVAL {
                throw Refusal("entry \(path) is a sparse file of \(map.size) bytes, more than the file system restored into allows (\(Errno.current))")
            }
            throw Errno.current
        }
        // The map first, then the data (much of it hashed on the second core), as backed up.
        var digest = DigestStream(size: map.dataBytes, prefix: map.digestPrefix, background: backgroundHasher, buffers: buffers)
        var follower = SparseMap.DataFollower(map)
        try reader.readBlocks { offset, chunk in
            guard follower.accept(offset: offset, length: Int64(chunk.count)) else {
                throw Refusal("entry \(path) is a sparse file whose data (\(chunk.count) bytes at offset \(offset)) is not where its map puts data: its regions overlap, are out of order or end past its size \(map.size)")
            }
            digest.update(copying: chunk)
            var done = 0
            while done < chunk.count {
                let start = done
                done += try sys { pwrite(fd, chunk.baseAddress! + start, chunk.count - start, off_t(offset) + off_t(start)) }
            }
        }
        guard follower.isComplete else {
            throw Refusal("entry \(path) is a sparse file whose data ends before its map does (the map announces more data than the entry holds)")
        }
        guard BackupManifest.Record.sparseFile(path, sha256: digest.finalize()) == record else {
            throw Refusal("file \(path) does not match the SHA-256 in its manifest (the archive was changed or damaged)")
        }
        bytes = bytes.addingSaturated(map.size)
        dataBytes = dataBytes.addingSaturated(map.dataBytes)
    }

    /// The folder holding `path`, opened below the store's root with openat2 refusing
    /// every symlink; kept open for the siblings that follow.
    private mutating func openParent(of path: ContainerPath) throws(Errno) -> Int32 {
        let parentPath = ContainerPath(components: Array(path.components.dropLast()))
        if let parent, parent.path == parentPath { return parent.fd }
        if let parent { close(parent.fd) }
        parent = nil
        let fd = try withCName(parentPath.components.isEmpty ? [0x2E] : parentPath.bytes) { (cname) throws(Errno) in
            try sys { clinux_open_beneath(store.rootFD, cname, clinux_O_PATH | O_DIRECTORY | O_CLOEXEC, 0) }
        }
        parent = (parentPath, fd)
        return fd
    }

    /// Sets folders' modes and times once everything inside them is written, deepest first.
    private mutating func finishDirectories() throws {
        if let parent { close(parent.fd) }
        parent = nil
        for (path, entry) in madeDirectories.reversed() {
            let fd = try withCName(path.bytes) { (cname) throws(Errno) in
                try sys { clinux_open_beneath(store.rootFD, cname, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0) }
            }
            defer { close(fd) }
            try sys { fchmod(fd, HandedOverMode.folder(entry.permissions)) }
            var times = self.times(entry)
            try sys { futimens(fd, &times) }
        }
    }

    private func setAttributes(_ attributes: [ExtendedAttribute], _ fd: Int32) throws(Errno) {
        for attribute in attributes {
            try withCName(attribute.name) { (name) throws(Errno) in
                _ = try sys { attribute.value.withUnsafeBytes { fsetxattr(fd, name, $0.baseAddress, $0.count, 0) } }
            }
        }
    }

    /// Access and modification times for utimensat; a time the archive lacks is left as is.
    private func times(_ entry: ArchiveEntryRead) -> [timespec] {
        let omit = timespec(tv_sec: 0, tv_nsec: clinux_UTIME_OMIT)
        return [entry.accessed ?? entry.modified ?? omit, entry.modified ?? omit]
    }
}

extension ArchiveEntryRead {
    /// Takes the manifest's exact bytes for the entry's names where libarchive changed
    /// them. Reading a pax name recorded as UTF-8, libarchive normalizes it to Unicode NFC
    /// (so that `café` typed two ways is one name, on purpose); the archive holds the exact
    /// bytes — GNU tar extracts them — and so does the manifest, which this entry is then
    /// checked against. Only a name whose NFC form is libarchive's is taken.
    mutating func adoptExactNames(from record: BackupManifest.Record) {
        func adopt(_ read: [UInt8], _ exact: [UInt8]) -> [UInt8] {
            guard read != exact, let text = String(validating: exact, as: UTF8.self),
                  Array(text.precomposedStringWithCanonicalMapping.utf8) == read else { return read }
            return exact
        }
        var readPath = path
        if type == S_IFDIR { while readPath.count > 1, readPath.last == UInt8(ascii: "/") { readPath.removeLast() } }
        let adopted = adopt(readPath, record.path.bytes)
        if adopted != readPath { path = adopted }
        switch record {
        case .symlink(_, let target): if let read = symlinkTarget { symlinkTarget = adopt(read, target) }
        case .hardLink(_, let target): if let read = hardLinkTarget { hardLinkTarget = adopt(read, target.bytes) }
        case .directory, .file, .sparseFile: break
        }
    }
}
