import CArchive
import ContainerObjectStore
import ContainerPolicy
import ContainerSigning
import ContainerStore
import Foundation
import Glibc

/// Backups in an S3-compatible object store (SPEC §13, docs/backup.md): the same pax
/// archive as on disk, streamed as a multipart upload while it is written, and read by the
/// ordinary restore as it is downloaded.
public enum ObjectStoreBackup {
    /// Parts are at least this large, S3's minimum: the parts in memory (the one being
    /// filled, the one being sent, the manifest's, and the one the current file's entry
    /// started in) stay at 20 MiB at most.
    static let minimumPartSize = 5 << 20
    /// S3 allows 10,000 parts; the estimate leaves room for an archive that grows.
    static let plannedParts: Int64 = 9000

    /// The part size for a backup of `set`: 5 MiB, or more for an archive that would
    /// need more than 9,000 parts (above about 44 GiB). From the data the archive will hold,
    /// not the files' apparent sizes: a sparse file of 8 EiB would ask for parts of 5 GiB.
    static func partSize(for set: BackupSet) -> Int {
        let estimate = set.dataEstimate.addingReportingOverflow(Int64(set.items.count).multipliedReportingOverflow(by: 4096).partialValue).partialValue
        let perPart = estimate / plannedParts + 1
        let rounded = (perPart + (1 << 20) - 1) / (1 << 20) * (1 << 20)
        return Int(clamping: max(Int64(minimumPartSize), min(rounded, 5 << 30)))
    }

    /// Writes `set`, taken from `store`, as an object at `url`. The object appears only
    /// when the whole archive is uploaded; any failure, SIGINT or SIGTERM aborts the
    /// multipart upload and leaves nothing at `url`.
    public static func upload(_ store: Store, set: BackupSet, to url: ObjectURL, config: ObjectStoreConfig,
                              progress: ((Int64, Int64) -> Void)? = nil) throws(UserError) -> BackupSummary {
        let client = try ObjectStoreClient(config: config)
        Interruption.catchSignals()
        defer { Interruption.restoreSignals() }
        let upload: MultipartUpload
        do {
            upload = try MultipartUpload(url: url, client: client)
        } catch {
            throw userError(error, doing: "cannot back up to \(url)", nothingStored: url)
        }
        let sink: UploadArchiveSink
        do {
            sink = try UploadArchiveSink(upload: upload, partSize: partSize(for: set), uploader: try PartUploader(upload: upload, config: config))
        } catch {
            upload.abort(client: client)
            throw UserError("cannot back up to \(url): \(error)")
        }
        do {
            var backup = try BackupWriter(store: store, set: set, sink: sink, progress: progress)
            var summary = try backup.run()
            try sink.complete(client: client)
            summary.archiveBytes = sink.position
            return summary
        } catch {
            sink.stop()
            upload.abort(client: client)
            let cause: any Error = sink.error ?? error
            if let userError = cause as? UserError { throw UserError("\(userError.message); nothing was stored at \(url)", exitCode: userError.exitCode) }
            throw userError(cause, doing: "cannot back up to \(url)", nothingStored: url)
        }
    }

    /// Restores the backup at `url` into a new container at `storePath`, as a local archive
    /// is restored, reading the object as it is downloaded (at most 8 MiB ahead): nothing
    /// is put in place unless the whole object came and verified.
    public static func restore(from url: ObjectURL, config: ObjectStoreConfig, to storePath: String, bundle bundlePath: String,
                               installerKey: InstallerKey? = nil, progress: ((Int64, Int64) -> Void)? = nil,
                               admit: Restore.Admit? = nil) throws(UserError) -> RestoreSummary {
        var bundleInfo = stat()
        guard lstat(bundlePath, &bundleInfo) == 0, bundleInfo.st_mode & S_IFMT == S_IFDIR else {
            throw UserError.usage("no bundle folder at \(bundlePath): name the app's NAME.app folder with --bundle")
        }
        Interruption.catchSignals()
        defer { Interruption.restoreSignals() }
        let stream = DownloadSource(stream: try ObjectStream(url: url, config: config))
        defer { stream.stream.stop() }
        let size: Int64
        do {
            size = try stream.stream.waitForSize()
        } catch {
            throw userError(error, doing: "cannot restore from \(url)", nothingStored: nil)
        }
        return try Restore.restore(.source(stream), size: size, named: url.description, to: storePath, bundle: bundlePath,
                                   installerKey: installerKey, progress: progress, admit: admit)
    }

    /// One backup in a listing.
    public struct Listing: Sendable {
        public let object: ObjectSummary
        /// The bundle named in the manifest.
        public let bundleName: [UInt8]
    }

    /// The containerfs backups under `prefix` in `bucket`, and how many other objects
    /// are there. Each object's first bytes are read for its manifest's bundle name.
    public static func list(bucket: String, prefix: String, config: ObjectStoreConfig) throws(UserError) -> (backups: [Listing], others: Int) {
        let client = try ObjectStoreClient(config: config)
        do {
            var backups: [Listing] = []
            var others = 0
            for object in try client.list(bucket: bucket, prefix: prefix) {
                guard object.size >= 1024, let url = try? ObjectURL(parsing: "s3://\(bucket)/\(object.key)", requireKey: true) else {
                    others += 1
                    continue
                }
                let start: [UInt8]
                do {
                    start = try client.head(of: url, count: 16 * 1024)
                } catch where error.code == "NoSuchKey" {
                    continue  // deleted since the listing
                }
                if let name = bundleName(inArchiveStart: start) {
                    backups.append(Listing(object: object, bundleName: name))
                } else {
                    others += 1
                }
            }
            return (backups, others)
        } catch {
            throw userError(error, doing: "cannot list \(ObjectURL.shown(bucket: bucket, key: prefix))", nothingStored: nil)
        }
    }

    /// The bundle name in the manifest at the start of an archive, or nil when these
    /// bytes do not start a containerfs backup.
    static func bundleName(inArchiveStart bytes: [UInt8]) -> [UInt8]? {
        carchive_use_utf8_names()
        guard let archive = archive_read_new() else { return nil }
        defer { archive_read_free(archive) }
        archive_read_support_format_tar(archive)
        archive_read_support_filter_none(archive)
        return bytes.withUnsafeBytes { buffer -> [UInt8]? in
            guard archive_read_open_memory(archive, buffer.baseAddress, buffer.count) == ARCHIVE_OK else { return nil }
            var entry: OpaquePointer?
            guard archive_read_next_header(archive, &entry) == ARCHIVE_OK, let entry, let path = archive_entry_pathname(entry),
                  Array(UnsafeRawBufferPointer(start: path, count: strlen(path))) == BackupManifest.entryPath
            else { return nil }
            var head = [UInt8](repeating: 0, count: 4096)
            let count = head.withUnsafeMutableBytes { archive_read_data(archive, $0.baseAddress, $0.count) }
            guard count > 0 else { return nil }
            let lines = head[..<count].split(separator: UInt8(ascii: "\n"), maxSplits: 2, omittingEmptySubsequences: false)
            guard lines.count >= 2, Array(lines[0]) == Array("containerfs-backup 1".utf8), lines[1].starts(with: "bundle ".utf8) else { return nil }
            return BackupManifest.unescape(lines[1].dropFirst("bundle ".utf8.count))
        }
    }

    static func userError(_ error: any Error, doing: String, nothingStored url: ObjectURL?) -> UserError {
        let nothing = url.map { "; nothing was stored at \($0)" } ?? ""
        if let error = error as? ObjectStoreError, error.interruption != 0 {
            let name = error.interruption == SIGINT ? "SIGINT" : "SIGTERM"
            return UserError("\(doing): interrupted by \(name)\(nothing)", exitCode: 128 + error.interruption)
        }
        return UserError("\(doing): \(error)\(nothing)")
    }
}

/// An object being downloaded, as a restore reads it.
private final class DownloadSource: ArchiveSource {
    let stream: ObjectStream

    init(stream: ObjectStream) {
        self.stream = stream
    }

    func nextBytes() throws(UserError) -> UnsafeRawBufferPointer {
        do {
            return try stream.next()
        } catch {
            throw ObjectStoreBackup.userError(error, doing: "cannot restore from \(stream.url)", nothingStored: nil)
        }
    }
}

/// One part of an upload, in memory.
private final class PartBuffer: @unchecked Sendable {
    /// Its place: part number `index + 1`, at offset `index * capacity` of the archive.
    let index: Int
    let memory: UnsafeMutableRawBufferPointer
    var count = 0

    /// Mapped, not malloc'ed: freed parts go back to the system at once, where malloc
    /// would keep them in its arenas (its mmap threshold grows to 32 MiB after a free).
    init(index: Int, capacity: Int) throws {
        self.index = index
        let address = mmap(nil, capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
        guard let address, address != MAP_FAILED else { throw Errno.current }
        memory = UnsafeMutableRawBufferPointer(start: address, count: capacity)
    }

    deinit { munmap(memory.baseAddress, memory.count) }

    var bytes: UnsafeRawBufferPointer { UnsafeRawBufferPointer(rebasing: memory[0..<count]) }
}

/// An archive's bytes into a multipart upload, in parts of a fixed size so that a part's
/// number follows from its offset. A full part is handed to the `PartUploader` thread,
/// except the parts the manifest will be patched into (kept until the end), and the
/// part in which the current file's entry started is kept until the next mark, so that
/// a rewind to it can send it again (a part sent again replaces the earlier one).
final class UploadArchiveSink: ArchiveSink {
    let upload: MultipartUpload
    let partSize: Int
    private let uploader: PartUploader
    private(set) var position: Int64 = 0
    var error: (any Error)?
    private var current: PartBuffer
    /// Parts that `patch` will write into, kept until `complete`.
    private var held: [Int: PartBuffer] = [:]
    private var heldParts: ClosedRange<Int>?
    /// The last mark, and its part once that part is no longer the current one.
    private var mark: Int64 = 0
    private var markPart: PartBuffer?

    init(upload: MultipartUpload, partSize: Int, uploader: PartUploader) throws {
        self.upload = upload
        self.partSize = partSize
        self.uploader = uploader
        current = try PartBuffer(index: 0, capacity: partSize)
    }

    func append(_ data: UnsafeRawBufferPointer) throws {
        if Interruption.signal != 0 { throw ObjectStoreError.interrupted(Interruption.signal) }
        var done = 0
        while done < data.count {
            let length = min(partSize - current.count, data.count - done)
            UnsafeMutableRawBufferPointer(rebasing: current.memory[current.count..<current.count + length])
                .copyMemory(from: UnsafeRawBufferPointer(rebasing: data[done..<done + length]))
            current.count += length
            done += length
            position += Int64(length)
            if current.count == partSize { try cut() }
        }
    }

    /// The current part is full: send it (or keep it), and start the next.
    private func cut() throws {
        let part = current
        if heldParts?.contains(part.index) == true {
            held[part.index] = part
        } else {
            try uploader.send(part)
        }
        if Int(mark / Int64(partSize)) == part.index { markPart = part }
        guard part.index + 1 < 10_000 else {
            throw UserError("the archive outgrew S3's 10,000 parts of \(partSize >> 20) MiB: the container grew a lot during the backup; try again")
        }
        current = try PartBuffer(index: part.index + 1, capacity: partSize)
    }

    func flush() throws {}

    func markRewindPoint() -> Int64 {
        mark = position
        markPart = nil  // the mark is in the current part
        return position
    }

    func rewind(to offset: Int64) throws {
        guard offset >= mark, offset <= position else { throw UserError("internal error: a rewind before the last mark") }
        let index = Int(offset / Int64(partSize))
        if index != current.index {
            guard let part = markPart, part.index == index else { throw UserError("internal error: the rewound part is gone") }
            // The part may be being sent: wait until nothing is, then fill it again.
            try uploader.drain()
            current = part
            markPart = nil
        }
        current.count = Int(offset - Int64(index) * Int64(partSize))
        position = offset
    }

    func willPatch(from offset: Int64, count: Int) {
        heldParts = Int(offset / Int64(partSize))...Int((offset + Int64(max(count, 1)) - 1) / Int64(partSize))
    }

    func patch(_ bytes: [UInt8], at offset: Int64) throws {
        var done = 0
        while done < bytes.count {
            let at = offset + Int64(done)
            let index = Int(at / Int64(partSize))
            guard let part = index == current.index ? current : held[index] else { throw UserError("internal error: the patched part is gone") }
            let start = Int(at - Int64(index) * Int64(partSize))
            let length = min(bytes.count - done, part.count - start)
            guard length > 0 else { throw UserError("internal error: a patch beyond the archive") }
            bytes.withUnsafeBytes { UnsafeMutableRawBufferPointer(rebasing: part.memory[start..<start + length]).copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[done..<done + length])) }
            done += length
        }
    }

    /// Sends the held parts and the last one, waits for every part, and completes the
    /// upload: only now does the object appear.
    func complete(client: ObjectStoreClient) throws {
        for part in held.values.sorted(by: { $0.index < $1.index }) where part !== current { try uploader.send(part) }
        held = [:]
        markPart = nil
        if current.count > 0 || current.index == 0 { try uploader.send(current) }
        let count = current.count > 0 || current.index == 0 ? current.index + 1 : current.index
        let etags = try uploader.finish()
        var parts: [(number: Int, etag: String)] = []
        for number in 1...count {
            guard let etag = etags[number] else { throw UserError("internal error: part \(number) was not sent") }
            parts.append((number, etag))
        }
        try upload.complete(parts, client: client)
    }

    /// Stops the uploader thread (after a failure).
    func stop() { uploader.stop() }
}

/// Sends parts on a thread of its own (with its own connection), so that reading files
/// and sending parts overlap: one part is sent while the next is filled.
final class PartUploader: @unchecked Sendable {
    private let upload: MultipartUpload
    private let client: ObjectStoreClient
    private let condition = NSCondition()
    private var queue: [PartBuffer] = []
    private var sending = false
    private var stopped = false
    private var failure: (any Error)?
    private var etags: [Int: String] = [:]
    private var thread: Thread?

    init(upload: MultipartUpload, config: ObjectStoreConfig) throws(UserError) {
        self.upload = upload
        client = try ObjectStoreClient(config: config)
        let thread = Thread { [unowned self] in self.run() }
        thread.stackSize = 1 << 20
        self.thread = thread
        thread.start()
    }

    /// Hands a part over; waits while the one before is still being sent (the store is
    /// slower than the archive is written: a part waiting would only cost memory).
    /// Throws the first failure of a part sent before.
    fileprivate func send(_ part: PartBuffer) throws {
        condition.lock()
        defer { condition.unlock() }
        while !queue.isEmpty || sending, failure == nil { condition.wait() }
        if let failure { throw failure }
        queue.append(part)
        condition.broadcast()
    }

    /// Waits until every queued part is sent.
    func drain() throws {
        condition.lock()
        defer { condition.unlock() }
        while !queue.isEmpty || sending, failure == nil { condition.wait() }
        if let failure { throw failure }
    }

    /// Waits for every part, stops the thread, and returns the ETags by part number.
    func finish() throws -> [Int: String] {
        try drain()
        stop()
        condition.lock()
        defer { condition.unlock() }
        return etags
    }

    /// Ends the thread once the part being sent is done; drops what waits.
    func stop() {
        condition.lock()
        stopped = true
        queue.removeAll()
        condition.broadcast()
        while sending { condition.wait() }
        condition.unlock()
    }

    private func run() {
        while true {
            condition.lock()
            while queue.isEmpty, !stopped { condition.wait() }
            if stopped {
                condition.unlock()
                return
            }
            let part = queue.removeFirst()
            sending = true
            condition.unlock()
            let result: Result<String, ObjectStoreError>
            do throws(ObjectStoreError) {
                result = .success(try upload.send(part: part.index + 1, part.bytes, client: client))
            } catch {
                result = .failure(error)
            }
            condition.lock()
            sending = false
            switch result {
            case .success(let etag): etags[part.index + 1] = etag
            case .failure(let error): if failure == nil { failure = error }
            }
            condition.broadcast()
            condition.unlock()
        }
    }
}
