import ContainerPolicy

/// The durability model of a `power-loss` mount (docs/power-loss.md): which operation
/// makes what durable, which bytes of a file's durable content a change overwrites, and
/// the report of a power cut. Pure: no FUSE, no I/O.
public enum Durability {
    /// Something a program does that may make earlier changes durable.
    public enum Event: CaseIterable, Sendable {
        /// `fsync` of a file.
        case fsync
        /// `fdatasync` of a file.
        case fdatasync
        /// A write through a descriptor opened with `O_SYNC` or `O_DSYNC` (or `RWF_DSYNC`).
        case synchronousWrite
        /// `fsync` or `fdatasync` of a folder.
        case folderFsync
        /// `sync_file_range`, even with `SYNC_FILE_RANGE_WAIT_AFTER`: the kernel never tells
        /// a FUSE daemon, and on ext4 it writes data back without committing the metadata
        /// that reaches it (a file's size), so it makes nothing durable.
        case syncFileRange
        /// `sync` and `syncfs`: the kernel sends a FUSE daemon no request for them.
        case sync
        /// `close`: never a durability point (POSIX; ext4's `auto_da_alloc` flush after a
        /// truncate is not modelled).
        case close
    }

    /// When a name change becomes durable.
    public enum NameModel: String, CaseIterable, Sendable {
        /// With an fsync of its folder (POSIX, and ALICE's abstract model): `power-loss`.
        case posix
        /// With any fsync, of a file or a folder: ext4's journal commits every name change
        /// made before it, in every folder (`power-loss=ext4`).
        case ext4
    }

    /// What an event makes durable.
    public struct Effect: OptionSet, Sendable, Hashable {
        public let rawValue: UInt8
        public init(rawValue: UInt8) { self.rawValue = rawValue }
        /// The data (content and size) of the file the event is about, all of it.
        public static let fileData = Effect(rawValue: 1)
        /// The names created, removed and renamed in the folder the event is about; a rename
        /// across folders is durable in both once either folder is synced (it is one
        /// transaction of ext4's or xfs's journal), and so is the data of a file renamed
        /// over another name (ext4's `auto_da_alloc`, data=ordered).
        public static let folderNames = Effect(rawValue: 2)
        /// Every name change so far, in every folder (ext4's journal commit).
        public static let allNames = Effect(rawValue: 4)
    }

    /// The table: what each event makes durable under `model`. Under ext4's, `fdatasync`
    /// counts as `fsync` (ext4 commits the journal when the size or the blocks changed, as
    /// they do for the appends and new files that matter here).
    public static func effect(of event: Event, model: NameModel = .posix) -> Effect {
        let effect: Effect = switch event {
        case .fsync, .fdatasync, .synchronousWrite: .fileData
        case .folderFsync: .folderNames
        case .syncFileRange, .sync, .close: []
        }
        return model == .ext4 && !effect.isEmpty ? effect.union(.allNames) : effect
    }

    /// A change to a file's data.
    public enum Change: Equatable, Sendable {
        /// `count` bytes written at `offset` (a write, `copy_file_range` into the file, a
        /// written page of a shared mapping).
        case write(offset: Int64, count: Int64)
        /// The size set to `size` (`truncate`, or an `O_TRUNC` open: 0).
        case truncate(to: Int64)
        /// `fallocate` with `mode` over `length` bytes at `offset`.
        case allocate(mode: Int32, offset: Int64, length: Int64)
    }

    /// `FALLOC_FL_KEEP_SIZE` (linux/falloc.h, a stable ABI): alone, `fallocate` changes no
    /// byte a program reads.
    static let keepSize: Int32 = 0x01
    /// `FALLOC_FL_COLLAPSE_RANGE` and `FALLOC_FL_INSERT_RANGE`: they move every byte after `offset`.
    static let shifting: Int32 = 0x08 | 0x20

    /// The bytes of a file's durable content, `0..<durableSize`, that `change` may alter:
    /// what must be saved before it, so that a power cut can put it back. Empty when the
    /// change touches only bytes past the durable size, which the cut drops by truncating.
    public static func overwritten(by change: Change, durableSize: Int64) -> Range<Int64> {
        let range: Range<Int64>
        switch change {
        case .write(let offset, let count):
            range = clamped(offset, count)
        case .truncate(let size):
            range = max(0, size)..<Int64.max
        case .allocate(let mode, let offset, let length):
            if mode == 0 || mode == keepSize { return 0..<0 }   // plain allocation: no byte changes
            range = mode & shifting != 0 ? max(0, offset)..<Int64.max : clamped(offset, length)
        }
        let upper = min(range.upperBound, max(0, durableSize))
        return range.lowerBound < upper ? range.lowerBound..<upper : 0..<0
    }

    private static func clamped(_ offset: Int64, _ count: Int64) -> Range<Int64> {
        let start = max(0, offset)
        let (end, overflow) = start.addingReportingOverflow(max(0, count))
        return start..<(overflow ? Int64.max : end)
    }
}

/// A set of byte ranges, kept sorted and disjoint: the parts of a file's durable content
/// saved so far.
public struct ByteRanges: Equatable, Sendable {
    /// The ranges, sorted, disjoint, none empty, none touching the next.
    public private(set) var ranges: [Range<Int64>] = []

    public init() {}

    /// The bytes in the set.
    public var count: Int64 { ranges.reduce(0) { $0 + ($1.upperBound - $1.lowerBound) } }

    /// The parts of `range` not in the set, in order.
    public func missing(from range: Range<Int64>) -> [Range<Int64>] {
        guard !range.isEmpty else { return [] }
        var result: [Range<Int64>] = []
        var start = range.lowerBound
        var index = firstIndex { $0.upperBound > start }
        while index < ranges.count, ranges[index].lowerBound < range.upperBound {
            if ranges[index].lowerBound > start { result.append(start..<ranges[index].lowerBound) }
            start = max(start, ranges[index].upperBound)
            if start >= range.upperBound { return result }
            index += 1
        }
        if start < range.upperBound { result.append(start..<range.upperBound) }
        return result
    }

    /// Adds `range`, merging it with the ranges it overlaps or touches.
    public mutating func insert(_ range: Range<Int64>) {
        guard !range.isEmpty else { return }
        // The ranges it merges with: from the first ending where it starts, or after.
        let first = firstIndex { $0.upperBound >= range.lowerBound }
        var lower = range.lowerBound, upper = range.upperBound
        var end = first
        while end < ranges.count, ranges[end].lowerBound <= upper {
            lower = min(lower, ranges[end].lowerBound)
            upper = max(upper, ranges[end].upperBound)
            end += 1
        }
        ranges.replaceSubrange(first..<end, with: CollectionOfOne(lower..<upper))
    }

    /// The index of the first range `isPast` holds for (false for a first part of the
    /// ranges, true for the rest), by a binary search: a database rewriting every other page
    /// between two syncs saves thousands of ranges, and a walk through them all for each
    /// save made the daemon quadratic.
    private func firstIndex(where isPast: (Range<Int64>) -> Bool) -> Int {
        var low = 0, high = ranges.count
        while low < high {
            let middle = low + (high - low) / 2
            if isPast(ranges[middle]) { high = middle } else { low = middle + 1 }
        }
        return low
    }
}

/// What a power cut dropped: one line of `run`'s report, or an object of its JSON.
public struct PowerCutReport: Codable, Equatable, Sendable {
    /// Files whose data went back to what was durable.
    public var files = 0
    /// Bytes those files lost or got back: the durable bytes put back, and the bytes
    /// written past the durable size, dropped.
    public var bytes: Int64 = 0
    /// Names put back as they were durable: created ones removed, removed ones restored,
    /// renamed ones moved back.
    public var names = 0
    /// Files whose durable data the cut could not put back (the daemon could not write
    /// them): their changes stayed. A change that cannot be recorded is refused instead.
    public var untracked = 0

    public init(files: Int = 0, bytes: Int64 = 0, names: Int = 0, untracked: Int = 0) {
        self.files = files
        self.bytes = bytes
        self.names = names
        self.untracked = untracked
    }

    /// `dropped 2 files (8192 bytes), 3 names` (a part that is 0 left out), or `nothing to drop`.
    public var summary: String {
        var parts: [String] = []
        if files > 0 { parts.append("\(counted(files, "file")) (\(counted(bytes, "byte")))") }
        if names > 0 { parts.append(counted(names, "name")) }
        var text = parts.isEmpty ? "nothing to drop" : "dropped " + parts.joined(separator: ", ")
        if untracked > 0 { text += "; \(counted(untracked, "change")) could not be undone and stayed" }
        return text
    }

    /// The report as the daemon sends it through the control socket: `files bytes names untracked`.
    public var wire: String { "\(files) \(bytes) \(names) \(untracked)" }

    /// Reads `wire`'s form; nil for anything else.
    public init?(wire: String) {
        let words = wire.split(separator: " ")
        guard words.count == 4, let files = Int(words[0]), let bytes = Int64(words[1]), let names = Int(words[2]),
              let untracked = Int(words[3]), files >= 0, bytes >= 0, names >= 0, untracked >= 0 else { return nil }
        self.init(files: files, bytes: bytes, names: names, untracked: untracked)
    }
}
