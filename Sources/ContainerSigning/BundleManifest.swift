import ContainerPolicy
import ContainerStore
import Crypto

/// One entry of an installed bundle: what the signed manifest records of it.
public struct BundleEntry: Equatable, Sendable {
    /// What kind of node it is. Only folders, files and symlinks are ever recorded (a
    /// bundle with anything else is refused at install); `special` is what a scan finds
    /// when a FIFO, socket or device appeared later.
    public enum Kind: UInt8, Sendable, CustomStringConvertible {
        case folder = 1, file = 2, symlink = 3, special = 4

        /// The kind in words, as messages show it.
        public var description: String {
            switch self {
            case .folder: "folder"
            case .file: "file"
            case .symlink: "symlink"
            case .special: "special file"
            }
        }
    }

    /// The path from the store's root, as bytes: the bundle's name, then the names below it.
    public var path: [UInt8]
    /// Folder, file or symlink.
    public var kind: Kind
    /// The permission bits (`st_mode & 07777`).
    public var mode: UInt32
    /// The size in bytes of a file, the length of a symlink's target; 0 for a folder.
    public var size: UInt64
    /// The SHA-256 of a file's contents (32 bytes); empty for anything else, or when the
    /// contents could not be read.
    public var digest: [UInt8]
    /// A symlink's target, as bytes; empty for anything else.
    public var target: [UInt8]
    /// How many names a file has in the store (`st_nlink`), as a scan finds it; not signed.
    /// An install never makes a hard link, so an installed file has one: a second name
    /// outside the bundle would let the app change the file through it.
    public var links: UInt64 = 1

    /// An entry; `digest` for a file, `target` for a symlink.
    public init(path: [UInt8], kind: Kind, mode: UInt32, size: UInt64, digest: [UInt8] = [], target: [UInt8] = []) {
        self.path = path
        self.kind = kind
        self.mode = mode
        self.size = size
        self.digest = digest
        self.target = target
    }

    /// The path, printable.
    public var printablePath: String { ContainerPath.printable(path) }
}

/// The signed record of an installed bundle: every entry, sorted by path bytes.
///
/// Its encoding is canonical — one bundle has exactly one encoding — so the signature is
/// over bytes that anyone can recompute. All integers are big-endian:
///
/// ```
/// "containerfs bundle manifest 1\n"
/// u32 entry count
/// per entry, in increasing order of path bytes (no two equal):
///   u8 kind (1 folder, 2 file, 3 symlink)   u32 mode   u64 size
///   u32 path length, path bytes (a bundle may nest deeper than PATH_MAX)
///   file: 32 bytes SHA-256            symlink: u16 target length, target bytes
/// ```
public struct BundleManifest: Equatable, Sendable {
    /// The entries, sorted by path bytes.
    public let entries: [BundleEntry]

    static let magic = Array("containerfs bundle manifest 1\n".utf8)

    /// A manifest of `entries`, in any order.
    public init(entries: [BundleEntry]) {
        self.entries = entries.sorted { $0.path.lexicographicallyPrecedes($1.path) }
    }

    /// The canonical encoding, the bytes that are signed.
    public func encoded() -> [UInt8] {
        var out = Self.magic
        out.reserveCapacity(entries.count * 80)
        append(UInt32(entries.count), to: &out)
        for entry in entries {
            out.append(entry.kind.rawValue)
            append(entry.mode, to: &out)
            append(entry.size, to: &out)
            append(UInt32(entry.path.count), to: &out)
            out += entry.path
            switch entry.kind {
            case .file: out += entry.digest
            case .symlink:
                append(UInt16(entry.target.count), to: &out)
                out += entry.target
            case .folder, .special: break
            }
        }
        return out
    }

    /// The SHA-256 of the encoding: names this exact bundle (a backup records it).
    public var digest: [UInt8] { Array(SHA256.hash(data: encoded())) }

    /// Decodes a manifest, strictly: anything but the canonical encoding is refused.
    public init(decoding bytes: [UInt8]) throws(ManifestError) {
        var reader = Reader(bytes: bytes)
        guard try reader.take(Self.magic.count) == Self.magic[...] else {
            throw ManifestError("it does not start with the manifest header")
        }
        let count = try reader.integer(UInt32.self)
        var entries: [BundleEntry] = []
        entries.reserveCapacity(min(Int(count), bytes.count / 16))
        for _ in 0..<count {
            guard let kind = BundleEntry.Kind(rawValue: try reader.integer(UInt8.self)), kind != .special else {
                throw ManifestError("an entry has an unknown kind")
            }
            let mode = try reader.integer(UInt32.self)
            let size = try reader.integer(UInt64.self)
            let path = Array(try reader.take(Int(try reader.integer(UInt32.self))))
            var entry = BundleEntry(path: path, kind: kind, mode: mode, size: size)
            switch kind {
            case .file: entry.digest = Array(try reader.take(32))
            case .symlink: entry.target = Array(try reader.take(Int(try reader.integer(UInt16.self))))
            case .folder, .special: break
            }
            guard mode <= 0o7777, !path.isEmpty, ContainerPath(bytes: path)?.bytes == path else {
                throw ManifestError("an entry has a bad mode or path")
            }
            if let last = entries.last, !last.path.lexicographicallyPrecedes(path) {
                throw ManifestError("its entries are not in order")
            }
            entries.append(entry)
        }
        guard reader.isAtEnd else { throw ManifestError("it has bytes after its last entry") }
        self.entries = entries
    }

    private func append<T: FixedWidthInteger>(_ value: T, to out: inout [UInt8]) {
        withUnsafeBytes(of: value.bigEndian) { out += $0 }
    }
}

/// Why a manifest could not be decoded.
public struct ManifestError: Error, CustomStringConvertible, Sendable {
    /// What is wrong with it, as part of a sentence.
    public let description: String
    init(_ description: String) { self.description = description }
}

/// Reads big-endian integers and byte runs from an array, failing at its end.
struct Reader {
    let bytes: [UInt8]
    var offset = 0

    var isAtEnd: Bool { offset == bytes.count }

    mutating func take(_ count: Int) throws(ManifestError) -> ArraySlice<UInt8> {
        guard count >= 0, bytes.count - offset >= count else { throw ManifestError("it is truncated") }
        defer { offset += count }
        return bytes[offset..<offset + count]
    }

    mutating func integer<T: FixedWidthInteger>(_: T.Type) throws(ManifestError) -> T {
        var value: T = 0
        for byte in try take(MemoryLayout<T>.size) { value = value << 8 | T(byte) }
        return value
    }
}

// MARK: Comparing

/// A difference between the signed manifest and the bundle in the store.
public struct BundleChange: Equatable, Sendable {
    /// What differs.
    public enum Kind: String, Sendable, Codable {
        case added, removed, content, mode, type
        case linkTarget = "link target"
        case hardLink = "hard link"
    }

    /// The entry's path from the store's root.
    public let path: [UInt8]
    /// What differs; `added` and `removed` stand alone.
    public let kinds: [Kind]
    /// The entry as signed, unless added.
    public let expected: BundleEntry?
    /// The entry as found, unless removed.
    public let found: BundleEntry?

    /// One line: the path, what changed and how.
    public var description: String {
        let path = ContainerPath.printable(self.path)
        let details = kinds.map { kind -> String in
            switch kind {
            case .added: "added (\(found!.kind))"
            case .removed: "removed (\(expected!.kind))"
            case .content:
                found!.digest.isEmpty && found!.size == expected!.size
                    ? "content unreadable"
                    : "content changed" + (found!.size == expected!.size ? "" : " (size \(expected!.size) -> \(found!.size))")
            case .mode: "mode changed \(octal(expected!.mode)) -> \(octal(found!.mode))"
            case .type: "type changed \(expected!.kind) -> \(found!.kind)"
            case .linkTarget:
                "link target changed \"\(ContainerPath.printable(expected!.target))\" -> \"\(ContainerPath.printable(found!.target))\""
            case .hardLink: "has \(counted(found!.links, "name")) (a hard link elsewhere could change it)"
            }
        }
        return "\(path): " + details.joined(separator: ", ")
    }

    /// The path and the kinds of change only: `Demo.app/Info.plist (content)`.
    public var summary: String {
        "\(ContainerPath.printable(path)) (\(kinds.map(\.rawValue).joined(separator: ", ")))"
    }
}

func octal(_ mode: UInt32) -> String {
    let digits = String(mode, radix: 8)
    return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
}

extension BundleManifest {
    /// Every difference between this manifest and the entries `found` (sorted by path).
    public func changes(to found: [BundleEntry]) -> [BundleChange] {
        var result: [BundleChange] = []
        var i = 0, j = 0
        while i < entries.count || j < found.count {
            if j == found.count || (i < entries.count && entries[i].path.lexicographicallyPrecedes(found[j].path)) {
                result.append(BundleChange(path: entries[i].path, kinds: [.removed], expected: entries[i], found: nil))
                i += 1
            } else if i == entries.count || found[j].path.lexicographicallyPrecedes(entries[i].path) {
                result.append(BundleChange(path: found[j].path, kinds: [.added], expected: nil, found: found[j]))
                j += 1
            } else {
                let (expected, actual) = (entries[i], found[j])
                var kinds: [BundleChange.Kind] = []
                if expected.kind != actual.kind {
                    kinds.append(.type)
                } else {
                    if expected.kind == .file, expected.size != actual.size || expected.digest != actual.digest { kinds.append(.content) }
                    if expected.kind == .symlink, expected.target != actual.target { kinds.append(.linkTarget) }
                    if expected.kind == .file, actual.links > 1 { kinds.append(.hardLink) }
                }
                if expected.mode != actual.mode { kinds.append(.mode) }
                if !kinds.isEmpty { result.append(BundleChange(path: expected.path, kinds: kinds, expected: expected, found: actual)) }
                i += 1
                j += 1
            }
        }
        return result
    }

    /// The symlinks whose target leads outside the bundle: absolute, or climbing above it.
    /// Recorded as they are; `verify` warns about them (the mount would follow them out).
    public var linksLeavingTheBundle: [BundleEntry] {
        entries.filter { entry in
            guard entry.kind == .symlink else { return false }
            if entry.target.first == UInt8(ascii: "/") { return true }
            // Lexically, from the link's folder; above the store's root is outside the mount.
            var folder = entry.path.split(separator: UInt8(ascii: "/")).dropLast().map(Array.init)
            for component in entry.target.split(separator: UInt8(ascii: "/")) {
                if component.elementsEqual([0x2E]) { continue }
                if component.elementsEqual([0x2E, 0x2E]) {
                    if folder.popLast() == nil { return true }
                } else {
                    folder.append(Array(component))
                }
            }
            return folder.first != entry.path.split(separator: UInt8(ascii: "/")).first.map(Array.init)
        }
    }
}
