/// One stretch of a sparse file that holds data; everything between stretches is a hole
/// (reads as zeros, takes no block).
public struct SparseRegion: Equatable, Sendable {
    public var offset: Int64
    public var length: Int64

    public init(offset: Int64, length: Int64) {
        self.offset = offset
        self.length = length
    }
}

/// A sparse file's map: where its data lies, and its size (the apparent size, `ls -l`'s).
/// A backup writes a file with holes as a GNU "sparse 1.0" pax entry carrying this map;
/// a restore takes the map from an archive, which may be hostile, so `problem` checks it
/// before anything is written, and `DataFollower` checks that the data that comes is
/// exactly what the map announced. Pure: no I/O.
public struct SparseMap: Equatable, Sendable {
    /// The most data regions a file may have in an archive. A backup refuses a file with
    /// more (one line naming it); a restore refuses an entry with more. Every region takes
    /// at least a block on disk, so a file reaching this holds a gigabyte in 262,144
    /// fragments; the map itself is then about 10 MB, held in memory by libarchive.
    public static let regionLimit = 1 << 18

    public var regions: [SparseRegion]
    public var size: Int64

    public init(regions: [SparseRegion], size: Int64) {
        self.regions = regions
        self.size = size
    }

    /// The bytes of data the regions hold (what the archive stores of the file).
    public var dataBytes: Int64 {
        regions.reduce(Int64(0)) { $0.addingReportingOverflow($1.length).overflow ? Int64.max : $0 + $1.length }
    }

    /// The map with every region widened to whole 512-byte blocks (the last one ends at the
    /// size), regions that then touch merged. GNU tar reads each region from a tar block of
    /// its own while libarchive writes and reads them back to back; with whole blocks both
    /// agree. A file system's regions are whole blocks of its own already (4 KiB); what a
    /// region gains is zeros from the hole beside it. For a map of the file system's (regions
    /// within the size), not for one from an archive.
    public var alignedToTarBlocks: SparseMap {
        var aligned: [SparseRegion] = []
        for region in regions where region.length > 0 {
            // Regions from the file system: within the size, so no sum here overflows.
            let start = region.offset & ~511
            let regionEnd = region.offset + region.length
            let end = regionEnd >= size - 511 ? size : (regionEnd + 511) & ~511
            if let last = aligned.last, start <= last.offset + last.length {
                aligned[aligned.count - 1].length = max(last.length, end - last.offset)
            } else {
                aligned.append(SparseRegion(offset: start, length: end - start))
            }
        }
        return SparseMap(regions: aligned, size: size)
    }

    /// What is wrong with the map, as a phrase ("its map …"), or nil when it is sound:
    /// a size that is negative; too many regions; a region with a negative offset or
    /// length, one whose end overflows or lies past the size, one that starts before the
    /// previous one ends (overlapping or out of order), one that is not whole 512-byte
    /// blocks (but for the last, ending at the size). GNU tar reads each region from tar
    /// blocks of its own and libarchive back to back: only with whole blocks do both read
    /// the same file, as a backup writes it (`alignedToTarBlocks`). That also bounds what a
    /// region costs on disk: a block of the file system for at least 512 bytes of archive.
    public var problem: String? {
        guard size >= 0 else { return "its size \(size) is negative" }
        guard regions.count <= Self.regionLimit else {
            return "its map has \(regions.count) data regions, more than the \(Self.regionLimit) a backup writes"
        }
        var end: Int64 = 0
        for (index, region) in regions.enumerated() {
            let which = "its map's region \(index + 1) (offset \(region.offset), length \(region.length))"
            guard region.offset >= 0, region.length >= 0 else { return "\(which) is negative" }
            guard region.offset <= size, region.length <= size - region.offset else { return "\(which) ends past the file's size \(size)" }
            guard region.offset >= end else { return "\(which) starts before the previous region ends (overlapping or out of order)" }
            guard region.length == 0 || (region.offset % 512 == 0 && (region.length % 512 == 0 || region.offset + region.length == size)) else {
                return "\(which) is not whole 512-byte blocks (GNU tar would read its data from elsewhere than libarchive does)"
            }
            end = region.offset + region.length
        }
        return nil
    }

    /// What the manifest's SHA-256 of a sparse file covers before its data: the size, the
    /// number of regions and each region's offset and length, one line each, so that the
    /// digest says where the data lies as well as what it is. Empty regions are left out:
    /// GNU's format ends a map with one (the size, 0) when the file ends in a hole.
    public var digestPrefix: [UInt8] {
        let data = regions.filter { $0.length > 0 }
        var text = "sparse \(size) \(data.count)\n"
        for region in data { text += "\(region.offset) \(region.length)\n" }
        return Array(text.utf8)
    }

    /// Follows the data blocks of a sparse entry as they come (offset and length each)
    /// against its checked map: each block must continue the current region where the
    /// last ended, or start the next region; at the end every region must be complete.
    public struct DataFollower: Sendable {
        private let map: SparseMap
        private var index = 0
        private var filled: Int64 = 0

        public init(_ map: SparseMap) {
            self.map = map
            skipEmpty()
        }

        /// Whether a block of `length` bytes at `offset` is the map's next data; if so, it
        /// is counted.
        public mutating func accept(offset: Int64, length: Int64) -> Bool {
            guard length > 0 else { return true }
            guard index < map.regions.count else { return false }
            let region = map.regions[index]
            guard offset == region.offset + filled, length <= region.length - filled else { return false }
            filled += length
            if filled == region.length {
                index += 1
                filled = 0
                skipEmpty()
            }
            return true
        }

        /// Every region's data has come.
        public var isComplete: Bool { index == map.regions.count }

        private mutating func skipEmpty() {
            while index < map.regions.count, map.regions[index].length == 0 { index += 1 }
        }
    }
}
