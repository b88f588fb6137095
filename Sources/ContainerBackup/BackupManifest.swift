import ContainerPolicy
import ContainerStore

/// What a backup archive holds, written as its first entry (`.containerfs-backup/manifest`):
/// the bundle it was taken from, then one line per archive entry, in archive order, with
/// the SHA-256 of every file. A restore checks the whole archive against it.
///
/// Text, one record per line, fields separated by one space; paths and names are
/// %-escaped bytes (see `escape`), so any name survives exactly:
///
/// ```
/// containerfs-backup 1
/// bundle Demo.app
/// bundle-manifest-sha256 <hex, or - when the store has no signed manifest>
/// d Documents
/// f <sha256 hex> Documents/notes.txt
/// s <sha256 hex> Documents/disk.img      (a sparse file: the digest covers its map, see `SparseMap`)
/// l Documents/latest notes.txt            (symlink and its target)
/// h Documents/copy.txt Documents/notes.txt  (hard link and the file it names)
/// ```
///
/// Blank lines are padding and mean nothing: the manifest is written first with room
/// reserved, and each line written into it as soon as its entry is in the archive.
public struct BackupManifest: Equatable, Sendable {
    /// One archive entry, as the manifest records it.
    public enum Record: Equatable, Sendable {
        case directory(ContainerPath)
        case file(ContainerPath, sha256: [UInt8])
        /// A file with holes, written as a sparse entry; the SHA-256 is of its map and data
        /// (`SparseMap.digestPrefix`), so a file of a terabyte of holes is hashed at once.
        case sparseFile(ContainerPath, sha256: [UInt8])
        case symlink(ContainerPath, target: [UInt8])
        case hardLink(ContainerPath, target: ContainerPath)

        /// The entry's path.
        public var path: ContainerPath {
            switch self {
            case .directory(let path), .file(let path, _), .sparseFile(let path, _), .symlink(let path, _), .hardLink(let path, _): path
            }
        }
    }

    /// The archive entry that holds the manifest.
    public static let entryPath = Array(".containerfs-backup/manifest".utf8)
    static let formatLine = "containerfs-backup 1"

    /// The bundle's name, such as `Demo.app`.
    public var bundleName: [UInt8]
    /// The SHA-256 of the bundle's signed manifest, when the store has one.
    public var bundleManifestDigest: [UInt8]?
    /// The entries, in archive order.
    public var records: [Record]

    public init(bundleName: [UInt8], bundleManifestDigest: [UInt8]?, records: [Record]) {
        self.bundleName = bundleName
        self.bundleManifestDigest = bundleManifestDigest
        self.records = records
    }

    /// The manifest's header lines, before the records.
    var header: [UInt8] {
        var out: [UInt8] = Array(Self.formatLine.utf8)
        out.append(UInt8(ascii: "\n"))
        out.append(contentsOf: "bundle ".utf8)
        out.append(contentsOf: Self.escape(bundleName))
        out.append(contentsOf: "\nbundle-manifest-sha256 ".utf8)
        if let digest = bundleManifestDigest {
            out.append(contentsOf: lowercaseHex(digest).utf8)
        } else {
            out.append(UInt8(ascii: "-"))
        }
        out.append(UInt8(ascii: "\n"))
        return out
    }

    /// The manifest as bytes, without padding.
    public var bytes: [UInt8] {
        var out = header
        for record in records { out.append(contentsOf: Self.line(record)) }
        return out
    }

    /// One record's line, newline included.
    static func line(_ record: Record) -> [UInt8] {
        let space = UInt8(ascii: " ")
        var out: [UInt8] = []
        switch record {
        case .directory(let path):
            out.append(UInt8(ascii: "d"))
            out.append(space)
            out.append(contentsOf: escape(path.bytes))
        case .file(let path, let sha256), .sparseFile(let path, let sha256):
            if case .sparseFile = record { out.append(UInt8(ascii: "s")) } else { out.append(UInt8(ascii: "f")) }
            out.append(space)
            out.append(contentsOf: lowercaseHex(sha256).utf8)
            out.append(space)
            out.append(contentsOf: escape(path.bytes))
        case .symlink(let path, let target):
            out.append(UInt8(ascii: "l"))
            out.append(space)
            out.append(contentsOf: escape(path.bytes))
            out.append(space)
            out.append(contentsOf: escape(target))
        case .hardLink(let path, let target):
            out.append(UInt8(ascii: "h"))
            out.append(space)
            out.append(contentsOf: escape(path.bytes))
            out.append(space)
            out.append(contentsOf: escape(target.bytes))
        }
        out.append(UInt8(ascii: "\n"))
        return out
    }

    /// Parses a manifest; `nil` when it is not one (a corrupt or foreign archive).
    public init?(parsing bytes: [UInt8]) {
        guard var reader = RecordReader(bytes) else { return nil }
        var records: [Record] = []
        while let record = reader.next() { records.append(record) }
        guard !reader.malformed else { return nil }
        self.init(bundleName: reader.bundleName, bundleManifestDigest: reader.bundleManifestDigest, records: records)
    }

    /// A manifest's records parsed one at a time from its bytes, as a restore takes them:
    /// it never holds them all parsed (about a third of the memory per file).
    struct RecordReader {
        let bundleName: [UInt8]
        let bundleManifestDigest: [UInt8]?
        private let bytes: [UInt8]
        private var position = 0
        /// A line that is not a record was met: the manifest is malformed.
        private(set) var malformed = false

        /// Reads the header lines; `nil` when `bytes` does not start a manifest.
        init?(_ bytes: [UInt8]) {
            self.bytes = bytes
            var position = 0
            guard Self.line(in: bytes, at: &position)?.elementsEqual(BackupManifest.formatLine.utf8) == true,
                  let bundleFields = Self.line(in: bytes, at: &position)?.split(separator: 0x20, omittingEmptySubsequences: false),
                  let digestFields = Self.line(in: bytes, at: &position)?.split(separator: 0x20, omittingEmptySubsequences: false),
                  bundleFields.count == 2, bundleFields[0].elementsEqual("bundle".utf8),
                  let bundleName = BackupManifest.unescape(bundleFields[1]), !bundleName.isEmpty,
                  digestFields.count == 2, digestFields[0].elementsEqual("bundle-manifest-sha256".utf8)
            else { return nil }
            self.bundleName = bundleName
            if digestFields[1].elementsEqual([UInt8(ascii: "-")]) {
                bundleManifestDigest = nil
            } else {
                guard let digest = unhex(digestFields[1]), digest.count == 32 else { return nil }
                bundleManifestDigest = digest
            }
            self.position = position
        }

        /// The next record; nil at the end, or at a line that is not one (then `malformed`).
        mutating func next() -> Record? {
            guard !malformed, let line = Self.line(in: bytes, at: &position) else { return nil }
            guard let record = BackupManifest.record(parsing: line) else {
                malformed = true
                return nil
            }
            return record
        }

        /// The next line from `position` that is not empty (blank lines are padding).
        private static func line(in bytes: [UInt8], at position: inout Int) -> ArraySlice<UInt8>? {
            while position < bytes.count {
                let end = bytes[position...].firstIndex(of: UInt8(ascii: "\n")) ?? bytes.count
                let line = bytes[position..<end]
                position = end + 1
                if !line.isEmpty { return line }
            }
            return nil
        }
    }

    /// One record line, without its newline; nil when it is not one.
    static func record(parsing line: ArraySlice<UInt8>) -> Record? {
        let fields = line.split(separator: 0x20, omittingEmptySubsequences: false)
        guard fields.count == 2 || fields.count == 3, fields[0].count == 1, let kind = fields[0].first else { return nil }
        func path(_ field: ArraySlice<UInt8>) -> ContainerPath? {
            guard let bytes = unescape(field) else { return nil }
            return ContainerPath(strict: bytes)
        }
        switch (kind, fields.count) {
        case (UInt8(ascii: "d"), 2):
            return path(fields[1]).map { .directory($0) }
        case (UInt8(ascii: "f"), 3):
            guard let digest = unhex(fields[1]), digest.count == 32, let p = path(fields[2]) else { return nil }
            return .file(p, sha256: digest)
        case (UInt8(ascii: "s"), 3):
            guard let digest = unhex(fields[1]), digest.count == 32, let p = path(fields[2]) else { return nil }
            return .sparseFile(p, sha256: digest)
        case (UInt8(ascii: "l"), 3):
            guard let p = path(fields[1]), let target = unescape(fields[2]), !target.isEmpty else { return nil }
            return .symlink(p, target: target)
        case (UInt8(ascii: "h"), 3):
            guard let p = path(fields[1]), let target = path(fields[2]) else { return nil }
            return .hardLink(p, target: target)
        default:
            return nil
        }
    }

    /// Bytes 0x21…0x7E except `%` stand for themselves; every other byte is `%XX`.
    static func escape(_ bytes: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        let digits = Array("0123456789ABCDEF".utf8)
        for byte in bytes {
            if byte > 0x20, byte < 0x7F, byte != UInt8(ascii: "%") {
                out.append(byte)
            } else {
                out.append(UInt8(ascii: "%"))
                out.append(digits[Int(byte >> 4)])
                out.append(digits[Int(byte & 0xF)])
            }
        }
        return out
    }

    /// The inverse of `escape`; `nil` for a malformed escape or a byte `escape` never leaves.
    static func unescape(_ field: some Collection<UInt8>) -> [UInt8]? {
        var out: [UInt8] = []
        var iterator = field.makeIterator()
        while let byte = iterator.next() {
            if byte == UInt8(ascii: "%") {
                guard let high = iterator.next().flatMap(hexValue), let low = iterator.next().flatMap(hexValue) else { return nil }
                out.append(high << 4 | low)
            } else {
                guard byte > 0x20, byte < 0x7F else { return nil }
                out.append(byte)
            }
        }
        return out
    }
}

extension ContainerPath {
    /// A path from archive bytes, strictly: relative, components separated by single
    /// slashes, none empty, `.` or `..`; `nil` otherwise. (The lenient `init(bytes:)`
    /// drops empty and `.` components, which an archive has no reason to hold.)
    init?(strict bytes: [UInt8]) {
        guard !bytes.isEmpty else { return nil }
        let parts = bytes.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false)
        for part in parts {
            if part.isEmpty || part.elementsEqual([0x2E]) || part.elementsEqual([0x2E, 0x2E]) { return nil }
        }
        self.init(components: parts.map(Array.init))
    }
}

/// Lowercase hexadecimal.
func lowercaseHex(_ bytes: some Sequence<UInt8>) -> String {
    let digits = Array("0123456789abcdef".utf8)
    var out: [UInt8] = []
    for byte in bytes {
        out.append(digits[Int(byte >> 4)])
        out.append(digits[Int(byte & 0xF)])
    }
    return String(decoding: out, as: UTF8.self)
}

private func hexValue(_ byte: UInt8) -> UInt8? {
    switch byte {
    case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
    case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
    case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
    default: nil
    }
}

private func unhex(_ field: some Collection<UInt8>) -> [UInt8]? {
    guard field.count % 2 == 0 else { return nil }
    var out: [UInt8] = []
    var iterator = field.makeIterator()
    while let high = iterator.next() {
        guard let h = hexValue(high), let l = iterator.next().flatMap(hexValue) else { return nil }
        out.append(h << 4 | l)
    }
    return out
}
