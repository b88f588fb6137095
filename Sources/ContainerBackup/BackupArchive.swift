import CArchive
import ContainerPolicy
import ContainerStore
import Glibc

/// libarchive failed; the message says how (a corrupt archive, a failed write).
struct ArchiveFailure: Error, CustomStringConvertible {
    let description: String
    /// Why the archive's source failed (a download cut off), when it was not the archive.
    var source: UserError? = nil
}

/// The header of one archive entry, as a backup writes it.
struct ArchiveEntryHeader {
    var path: [UInt8]
    /// `S_IFREG`, `S_IFDIR` or `S_IFLNK`.
    var type: mode_t
    var permissions: mode_t
    var size: Int64 = 0
    var modified: timespec
    var accessed: timespec
    var uid: uid_t
    var gid: gid_t
    var symlinkTarget: [UInt8]? = nil
    var hardLinkTarget: [UInt8]? = nil
    var attributes: [ExtendedAttribute] = []
    /// A file with holes: written as a GNU "sparse 1.0" pax entry (`size` is the apparent
    /// size; only the map's regions are stored, each hole passed with `writeHole`).
    var sparseMap: SparseMap? = nil
}

/// Where a backup archive's bytes go, with an exact write position so that an entry can
/// be taken back and a reserved range filled in at the end: a file (`FileArchiveSink`) or
/// an object store's multipart upload (`UploadArchiveSink`).
protocol ArchiveSink: AnyObject {
    /// The offset of the next byte written.
    var position: Int64 { get }
    /// The first write error, reported by `ArchiveWriter`.
    var error: (any Error)? { get set }
    func append(_ data: UnsafeRawBufferPointer) throws
    /// Hands what is buffered on (at the end of the archive).
    func flush() throws
    /// The position, from which the caller may `rewind` until its next mark.
    func markRewindPoint() -> Int64
    /// Forgets everything written from `offset` (at or after the last mark) on.
    func rewind(to offset: Int64) throws
    /// Announces that `count` bytes from `offset` will be overwritten by `patch`.
    func willPatch(from offset: Int64, count: Int)
    /// Overwrites bytes already written at `offset`, before the last mark.
    func patch(_ bytes: [UInt8], at offset: Int64) throws
}

/// A backup archive's bytes into a file: a buffered descriptor whose write position is known
/// exactly (libarchive is set to pass every byte on at once), so that an entry can be
/// taken back and written again, and a reserved range filled in at the end.
final class FileArchiveSink: ArchiveSink {
    let fd: Int32
    private let buffer: UnsafeMutableRawBufferPointer
    private var count = 0
    /// Bytes already handed to the kernel.
    private var flushed: Int64 = 0
    /// The first write error, reported by `ArchiveWriter`.
    var error: (any Error)?

    init(fd: Int32, capacity: Int = 1 << 20) {
        self.fd = fd
        buffer = .allocate(byteCount: capacity, alignment: 4096)
    }

    deinit { buffer.deallocate() }

    /// The offset in the file of the next byte written.
    var position: Int64 { flushed + Int64(count) }

    /// Appends bytes; large writes go straight to the file.
    func append(_ data: UnsafeRawBufferPointer) throws(Errno) {
        if count + data.count > buffer.count { try flush() }
        if data.count >= buffer.count {
            try writeAll(data)
            flushed += Int64(data.count)
        } else {
            UnsafeMutableRawBufferPointer(rebasing: buffer[count..<count + data.count]).copyMemory(from: data)
            count += data.count
        }
    }

    /// Hands what is buffered to the kernel.
    func flush() throws(Errno) {
        guard count > 0 else { return }
        try writeAll(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
        flushed += Int64(count)
        count = 0
    }

    func markRewindPoint() -> Int64 { position }

    func willPatch(from offset: Int64, count: Int) {}

    /// Forgets everything written from `offset` on.
    func rewind(to offset: Int64) throws(Errno) {
        if offset >= flushed {
            count = Int(offset - flushed)
            return
        }
        try sys { ftruncate(fd, off_t(offset)) }
        try sys { lseek(fd, off_t(offset), SEEK_SET) }
        flushed = offset
        count = 0
    }

    /// Overwrites bytes already written at `offset`: in the file, or still in the buffer.
    func patch(_ bytes: [UInt8], at offset: Int64) throws(Errno) {
        // The bytes from `flushed` on are in the buffer.
        let inFile = Int(max(0, min(Int64(bytes.count), flushed - offset)))
        var done = 0
        while done < inFile {
            let start = done
            done += try sys { bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress! + start, inFile - start, off_t(offset) + start) } }
        }
        if inFile < bytes.count {
            let start = Int(offset + Int64(inFile) - flushed)
            bytes.withUnsafeBytes { UnsafeMutableRawBufferPointer(rebasing: buffer[start..<start + bytes.count - inFile]).copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[inFile...])) }
        }
    }

    private func writeAll(_ data: UnsafeRawBufferPointer) throws(Errno) {
        var done = 0
        while done < data.count {
            let start = done
            done += try sys { write(fd, data.baseAddress! + start, data.count - start) }
        }
    }
}

/// libarchive's write callback: everything goes to the `ArchiveSink`.
private let sinkWrite: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?, UnsafeRawPointer?, Int) -> Int = { _, client, data, length in
    let sink = Unmanaged<ArchiveWriter>.fromOpaque(client!).takeUnretainedValue().sink
    do {
        try sink.append(UnsafeRawBufferPointer(start: data, count: length))
        return length
    } catch {
        sink.error = error
        return -1
    }
}

/// A pax tar being written with libarchive.
final class ArchiveWriter {
    private let archive: OpaquePointer
    private let entry: OpaquePointer
    let sink: any ArchiveSink

    init(sink: any ArchiveSink) throws(ArchiveFailure) {
        carchive_use_utf8_names()
        self.sink = sink
        archive = archive_write_new()
        entry = archive_entry_new()
        // No blocking: each byte reaches the sink at once, so its position is exact.
        guard archive_write_set_format_pax(archive) == ARCHIVE_OK,
              archive_write_set_bytes_per_block(archive, 0) == ARCHIVE_OK,
              archive_write_open2(archive, Unmanaged.passUnretained(self).toOpaque(), nil, sinkWrite, nil, nil) == ARCHIVE_OK
        else { throw failure("opening", ARCHIVE_FATAL) }
    }

    deinit {
        archive_entry_free(entry)
        archive_write_free(archive)
    }

    /// Writes an entry's header; a file's data follows with `writeData`.
    func writeHeader(_ header: ArchiveEntryHeader) throws(ArchiveFailure) {
        archive_entry_clear(entry)
        withCName(header.path) { archive_entry_copy_pathname(entry, $0) }
        archive_entry_set_filetype(entry, UInt32(header.type))
        archive_entry_set_perm(entry, header.permissions & 0o7777)
        archive_entry_set_size(entry, header.size)
        archive_entry_set_mtime(entry, header.modified.tv_sec, header.modified.tv_nsec)
        archive_entry_set_atime(entry, header.accessed.tv_sec, header.accessed.tv_nsec)
        archive_entry_set_uid(entry, Int64(header.uid))
        archive_entry_set_gid(entry, Int64(header.gid))
        if let target = header.symlinkTarget { withCName(target) { archive_entry_copy_symlink(entry, $0) } }
        if let target = header.hardLinkTarget { withCName(target) { archive_entry_copy_hardlink(entry, $0) } }
        for attribute in header.attributes {
            withCName(attribute.name) { name in
                attribute.value.withUnsafeBytes { archive_entry_xattr_add_entry(entry, name, $0.baseAddress, $0.count) }
            }
        }
        if let map = header.sparseMap {
            // libarchive's pax writer then writes GNU.sparse.major=1, minor=0, name and
            // realsize, the map as decimal lines at the start of the data (ending with the
            // size and 0 when the file ends in a hole), and only the regions' bytes. A file
            // that is all hole gets that one empty region, or it would be written whole.
            for region in map.regions { archive_entry_sparse_add_entry(entry, region.offset, region.length) }
            if map.regions.isEmpty { archive_entry_sparse_add_entry(entry, map.size, 0) }
        }
        let status = archive_write_header(archive, entry)
        // ARCHIVE_WARN: a name that is not UTF-8, written as raw bytes (hdrcharset=BINARY).
        guard status == ARCHIVE_OK || status == ARCHIVE_WARN else { throw failure("writing the header of \(ContainerPath.printable(header.path))", status) }
    }

    /// Writes data of the current entry.
    func writeData(_ data: UnsafeRawBufferPointer) throws(ArchiveFailure) {
        guard data.count > 0 else { return }
        let written = archive_write_data(archive, data.baseAddress, data.count)
        guard written == data.count else { throw failure("writing data", Int32(truncatingIfNeeded: written)) }
    }

    /// Starts a sparse entry's data: libarchive's pax writer puts the map at the start of the
    /// data on the first `archive_write_data` call, and a file that is all hole would make
    /// none (its entry would then claim a map it lacks), so one call of no bytes comes first.
    func startSparseData() throws(ArchiveFailure) {
        let written = archive_write_data(archive, Self.zeroPages ?? UnsafeRawPointer(bitPattern: 1)!, 0)
        guard written == 0 else { throw failure("writing a sparse map", Int32(truncatingIfNeeded: written)) }
    }

    /// Passes a hole of a sparse entry: libarchive's pax writer takes a sparse file's bytes in
    /// order, holes included, and skips the holes' bytes without reading them (as bsdtar
    /// hands it zeros). They come from a mapping of zero pages that is never written, so no
    /// memory is touched; each call passes at most 1 GiB (libarchive takes less than 2 GiB a
    /// call), about 8 ns each: a hole of 16 TiB (ext4's largest file) costs 16,384 calls, one
    /// of 8 EiB (tmpfs, xfs and btrfs allow such a file) about a minute. A hole at the end
    /// of the file needs no call: finishing the entry skips it.
    func writeHole(_ count: Int64) throws(ArchiveFailure) {
        guard let zeros = Self.zeroPages else { throw ArchiveFailure(description: "cannot map zero pages for a sparse file's hole") }
        var left = count
        while left > 0 {
            let length = Int(min(left, Int64(Self.zeroPageBytes)))
            let written = archive_write_data(archive, zeros, length)
            guard written > 0, written <= length else { throw failure("passing a hole", Int32(truncatingIfNeeded: written)) }
            left -= Int64(written)
        }
    }

    private static let zeroPageBytes = 1 << 30
    /// 1 GiB of zero pages, read-only and never touched (no memory, no swap reserved).
    private nonisolated(unsafe) static let zeroPages: UnsafeRawPointer? = {
        let address = mmap(nil, zeroPageBytes, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
        guard let address, address != MAP_FAILED else { return nil }
        return UnsafeRawPointer(address)
    }()

    /// Ends the current entry (its padding is written).
    func finishEntry() throws(ArchiveFailure) {
        let status = archive_write_finish_entry(archive)
        guard status == ARCHIVE_OK else { throw failure("finishing an entry", status) }
    }

    /// Writes the end of the archive and hands everything to the kernel.
    func finish() throws(ArchiveFailure) {
        let status = archive_write_close(archive)
        guard status == ARCHIVE_OK else { throw failure("closing", status) }
        do { try sink.flush() } catch { throw ArchiveFailure(description: "\(error)") }
    }

    private func failure(_ doing: String, _ status: Int32) -> ArchiveFailure {
        if let error = sink.error { return ArchiveFailure(description: "\(error)") }
        let message = archive_error_string(archive).map { String(cString: $0) } ?? "libarchive status \(status)"
        return ArchiveFailure(description: "\(doing): \(message)")
    }
}

/// One entry read from an archive.
struct ArchiveEntryRead {
    var path: [UInt8]
    var type: mode_t
    var permissions: mode_t
    var size: Int64
    var modified: timespec?
    var accessed: timespec?
    var symlinkTarget: [UInt8]?
    var hardLinkTarget: [UInt8]?
    var attributes: [ExtendedAttribute]
    /// How many data regions libarchive read from a sparse entry's map (0: not sparse).
    var sparseRegionCount: Int
    /// A sparse entry's map as libarchive kept it (regions in order; it drops, without a
    /// word, a region that overlaps the one before, comes before it or ends past the size,
    /// whose data then does not follow the map), when it has at most
    /// `SparseMap.regionLimit` regions.
    var sparseMap: SparseMap?
}

/// Where an archive is read from: a file, or bytes in order from a source.
enum ArchiveInput {
    case file(Int32)
    case source(any ArchiveSource)
}

/// An archive's bytes in order, when they do not come from a file (an object being
/// downloaded).
protocol ArchiveSource: AnyObject {
    /// The next bytes, valid until the next call; empty at the end. A failure says
    /// what went wrong, in one line.
    func nextBytes() throws(UserError) -> UnsafeRawBufferPointer
}

/// libarchive's read callback for an `ArchiveSource`.
private let sourceRead: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?, UnsafeMutablePointer<UnsafeRawPointer?>?) -> Int = { _, client, buffer in
    let reader = Unmanaged<ArchiveReader>.fromOpaque(client!).takeUnretainedValue()
    guard let source = reader.source else { return -1 }
    do throws(UserError) {
        let bytes = try source.nextBytes()
        buffer?.pointee = bytes.baseAddress
        return bytes.count
    } catch {
        reader.sourceFailure = error
        return -1
    }
}

/// A tar archive being read with libarchive.
final class ArchiveReader {
    private let archive: OpaquePointer
    fileprivate var source: (any ArchiveSource)?
    fileprivate var sourceFailure: UserError?

    init(_ input: ArchiveInput) throws(ArchiveFailure) {
        carchive_use_utf8_names()
        archive = archive_read_new()
        // Only tar (pax, ustar, GNU), plain or with a common compression: nothing that
        // makes libarchive start an outside program.
        archive_read_support_format_tar(archive)
        archive_read_support_filter_none(archive)
        archive_read_support_filter_gzip(archive)
        archive_read_support_filter_xz(archive)
        archive_read_support_filter_zstd(archive)
        let status: Int32
        switch input {
        case .file(let fd):
            status = archive_read_open_fd(archive, fd, 1 << 20)
        case .source(let source):
            self.source = source
            status = archive_read_open(archive, Unmanaged.passUnretained(self).toOpaque(), nil, sourceRead, nil)
        }
        guard status == ARCHIVE_OK else { throw failure() }
    }

    deinit { archive_read_free(archive) }

    /// Bytes read from the file so far.
    var bytesRead: Int64 { archive_filter_bytes(archive, -1) }

    /// The next entry's header, or `nil` at the end of the archive.
    func next() throws(ArchiveFailure) -> ArchiveEntryRead? {
        var pointer: OpaquePointer?
        let status = archive_read_next_header(archive, &pointer)
        if status == ARCHIVE_EOF { return nil }
        // ARCHIVE_WARN: something libarchive could not convert (a name that claims UTF-8
        // and is not, an odd pax record); what it read is then checked against the manifest.
        guard status == ARCHIVE_OK || status == ARCHIVE_WARN, let entry = pointer else { throw failure() }
        var attributes: [ExtendedAttribute] = []
        if archive_entry_xattr_reset(entry) > 0 {
            var name: UnsafePointer<CChar>?
            var value: UnsafeRawPointer?
            var size = 0
            while archive_entry_xattr_next(entry, &name, &value, &size) == ARCHIVE_OK, let name {
                let bytes = value.map { Array(UnsafeRawBufferPointer(start: $0, count: size)) } ?? []
                attributes.append(ExtendedAttribute(name: cBytes(name) ?? [], value: bytes))
            }
        }
        let size = archive_entry_size_is_set(entry) != 0 ? archive_entry_size(entry) : 0
        // For a sparse entry libarchive gives the apparent size (GNU.sparse.realsize).
        let regionCount = Int(archive_entry_sparse_reset(entry))
        var sparseMap: SparseMap?
        if regionCount > 0, regionCount <= SparseMap.regionLimit {
            var regions: [SparseRegion] = []
            regions.reserveCapacity(regionCount)
            var offset: Int64 = 0, length: Int64 = 0
            while archive_entry_sparse_next(entry, &offset, &length) == ARCHIVE_OK {
                regions.append(SparseRegion(offset: offset, length: length))
            }
            sparseMap = SparseMap(regions: regions, size: size)
        }
        return ArchiveEntryRead(
            path: cBytes(archive_entry_pathname(entry)) ?? [],
            type: archive_entry_filetype(entry),
            permissions: archive_entry_perm(entry),
            size: size,
            modified: archive_entry_mtime_is_set(entry) != 0 ? timespec(tv_sec: archive_entry_mtime(entry), tv_nsec: archive_entry_mtime_nsec(entry)) : nil,
            accessed: archive_entry_atime_is_set(entry) != 0 ? timespec(tv_sec: archive_entry_atime(entry), tv_nsec: archive_entry_atime_nsec(entry)) : nil,
            symlinkTarget: cBytes(archive_entry_symlink(entry)),
            hardLinkTarget: cBytes(archive_entry_hardlink(entry)),
            attributes: attributes,
            sparseRegionCount: regionCount,
            sparseMap: sparseMap)
    }

    /// Hands the current entry's data to `body` block by block, in order. Fails on a gap
    /// (a sparse entry read as a plain one) or a read error (a corrupt or truncated archive).
    func readData(_ body: (UnsafeRawBufferPointer) throws -> Void) throws {
        var expected: Int64 = 0
        while true {
            var block: UnsafeRawPointer?
            var size = 0
            var offset: Int64 = 0
            let status = archive_read_data_block(archive, &block, &size, &offset)
            if status == ARCHIVE_EOF { return }
            guard status == ARCHIVE_OK else { throw failure() }
            guard offset == expected else { throw ArchiveFailure(description: "an entry's data has a gap (a sparse file)") }
            if size > 0 { try body(UnsafeRawBufferPointer(start: block, count: size)) }
            expected += Int64(size)
        }
    }

    /// Hands the current entry's data blocks to `body` with their offsets in the file, as
    /// libarchive delivers them from a sparse entry (holes skipped); the caller checks that
    /// they follow the map.
    func readBlocks(_ body: (Int64, UnsafeRawBufferPointer) throws -> Void) throws {
        while true {
            var block: UnsafeRawPointer?
            var size = 0
            var offset: Int64 = 0
            let status = archive_read_data_block(archive, &block, &size, &offset)
            if status == ARCHIVE_EOF { return }
            guard status == ARCHIVE_OK else { throw failure() }
            if size > 0 { try body(offset, UnsafeRawBufferPointer(start: block, count: size)) }
        }
    }

    private func failure() -> ArchiveFailure {
        ArchiveFailure(description: archive_error_string(archive).map { String(cString: $0) } ?? "libarchive error \(archive_errno(archive))",
                       source: sourceFailure)
    }
}

/// A C string's bytes, never decoded.
private func cBytes(_ string: UnsafePointer<CChar>?) -> [UInt8]? {
    string.map { Array(UnsafeRawBufferPointer(start: $0, count: strlen($0))) }
}
