import CLinux
import ContainerPolicy
import Glibc

/// A container's capacity (SPEC §10): the size of the simulated device, kept in the state
/// folder as `.containerfs/capacity` (the bytes, as decimal digits). No file: no capacity,
/// the store's own file system is the limit.
public enum Capacity {
    static let fileName = Array(name: "capacity")
    static let temporaryName = Array(name: "capacity.new")

    /// The store's capacity in bytes; nil when it has none. A file that does not parse
    /// counts as none: the store stays usable, and `capacity STORE SIZE` writes it anew.
    public static func read(_ store: Store) -> Int64? {
        read(stateFD: store.stateFD)
    }

    /// As `read(_:)`, from the state folder's descriptor.
    public static func read(stateFD: Int32) -> Int64? {
        guard var bytes = try? readFile(at: stateFD, fileName), bytes.count <= 32 else { return nil }
        while bytes.last == UInt8(ascii: "\n") { bytes.removeLast() }
        guard let value = Int64(String(decoding: bytes, as: UTF8.self)), value >= 0 else { return nil }
        return value
    }

    /// Sets the capacity (nil: none). Atomic: a new file renamed over the old one.
    public static func write(_ store: Store, _ capacity: Int64?) throws(UserError) {
        do throws(Errno) {
            guard let capacity else {
                let removed = withCName(fileName) { unlinkat(store.stateFD, $0, 0) }
                if removed != 0, errno != ENOENT { throw Errno.current }
                return
            }
            _ = withCName(temporaryName) { unlinkat(store.stateFD, $0, 0) }
            try writeNewFile(at: store.stateFD, temporaryName, Array("\(capacity)\n".utf8))
            try withCName(temporaryName) { (from) throws(Errno) in
                try withCName(fileName) { (to) throws(Errno) in
                    _ = try sys { renameat(store.stateFD, from, store.stateFD, to) }
                }
            }
        } catch {
            throw UserError("cannot set the capacity of \(store.path): \(error)")
        }
    }

    /// The bytes the container holds, as its capacity counts them: the blocks
    /// (`st_blocks` × 512) of every node below its root — bundle, data areas, folders,
    /// links — except the state folder; a file with several links once. A walk of the
    /// store: the daemon does it once per mount, then keeps the count as it changes things.
    public static func usedBytes(rootFD: Int32) -> Int64 {
        var info = stat()
        guard fstatat(rootFD, "", &info, clinux_AT_EMPTY_PATH) == 0, let chain = try? FolderChain(top: rootFD) else { return 0 }
        var seen = Set<UInt64>()
        var total = blockBytes(info)
        // Each level: the names still to count.
        var levels: [[[UInt8]]] = [names(rootFD).filter { $0 != ContainerLayout.stateFolderName }]
        while let level = levels.last {
            guard let name = level.last else {
                levels.removeLast()
                if levels.isEmpty || (try? chain.leave()) == nil { break }
                continue
            }
            levels[levels.count - 1].removeLast()
            guard withCName(name, { fstatat(chain.fd, $0, &info, AT_SYMLINK_NOFOLLOW) }) == 0 else { continue }
            if info.st_mode & S_IFMT != S_IFDIR, info.st_nlink > 1, !seen.insert(UInt64(info.st_ino)).inserted { continue }
            total = total.addingSaturating(blockBytes(info))
            if info.st_mode & S_IFMT == S_IFDIR, (try? chain.enter(name)) != nil { levels.append(names(chain.fd)) }
        }
        return total
    }

    private static func names(_ fd: Int32) -> [[UInt8]] {
        ((try? Directory.entries(of: fd)) ?? []).map(\.name)
    }

    /// The bytes in blocks of the node `info` describes.
    @inline(__always)
    public static func blockBytes(_ info: stat) -> Int64 {
        Int64(clamping: info.st_blocks).multipliedSaturating(by: 512)
    }
}

extension Int64 {
    /// `self + other`, stopping at the bounds instead of overflowing.
    @inline(__always)
    public func addingSaturating(_ other: Int64) -> Int64 {
        let (sum, overflow) = addingReportingOverflow(other)
        return overflow ? (other > 0 ? .max : .min) : sum
    }

    /// `self × other`, stopping at the bounds instead of overflowing.
    @inline(__always)
    public func multipliedSaturating(by other: Int64) -> Int64 {
        let (product, overflow) = multipliedReportingOverflow(by: other)
        return overflow ? ((self < 0) != (other < 0) ? .min : .max) : product
    }
}
