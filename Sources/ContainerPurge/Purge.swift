import CLinux
import ContainerPolicy
import ContainerStore
import Glibc

/// Deleting tagged files (SPEC §3): least recently used first, across stores.
///
/// Safety: only regular files below `Library/Caches` or `tmp` are deleted, reached by
/// opening their folder from the store's root descriptor with `openat2(RESOLVE_BENEATH |
/// RESOLVE_NO_SYMLINKS)` (a symlink anywhere on the way refuses it), checked with
/// `fstatat` to be the regular file the tag names (same inode) and removed with `unlinkat`. Folders, symlinks, other
/// files and the `CACHEDIR.TAG` markers are never deleted. A program writing to a file as
/// it is purged keeps writing to the unlinked inode: no other file is touched.
public enum Purge {
    /// What to purge.
    public struct Options: Sendable {
        /// Which tags: cache, temporary, or both.
        public var kinds: [TagKind]
        /// Stop once this many bytes are freed; nil: everything that qualifies.
        public var free: Int64?
        /// Only files last used at least this many seconds ago.
        public var olderThan: Double?
        /// Purge mounted containers too (their mounts are told at once).
        public var includeRunning = false
        /// Say what would be deleted, delete nothing.
        public var dryRun = false
        /// Walk the purgeable areas even when a store has an index: its last daemon's index
        /// misses what was written into the store since (a purge for low storage must
        /// reach the free space asked for).
        public var walk = false

        public init(kinds: [TagKind], free: Int64? = nil, olderThan: Double? = nil, includeRunning: Bool = false, dryRun: Bool = false) {
            self.kinds = kinds
            self.free = free
            self.olderThan = olderThan
            self.includeRunning = includeRunning
            self.dryRun = dryRun
        }
    }

    /// A file deleted (or that would be, on a dry run).
    public struct Deleted: Sendable {
        /// Index of its store in the list given to `purge`.
        public var store: Int
        public var tag: Tag
        /// What deleting it freed: its size, or 0 when another name of the file (a hard
        /// link) keeps it. A dry run counts its size.
        public var freedBytes: Int64
    }

    /// A store left alone because it is mounted.
    public struct Skipped: Sendable {
        public var store: Int
        public var mountpoint: String
        public var pid: Int32
    }

    /// A file that could not be deleted.
    public struct Failure: Sendable {
        public var store: Int
        public var path: [UInt8]
        public var error: Errno
    }

    /// What a purge did.
    public struct Report: Sendable {
        /// Oldest first.
        public var deleted: [Deleted] = []
        public var freedBytes: Int64 = 0
        public var skipped: [Skipped] = []
        public var failures: [Failure] = []
        /// Stores whose tags were read by walking them (no index to trust), by index.
        public var walked: [Int] = []
        /// Mounted stores whose daemon could not be told of the deletions.
        public var notInvalidated: [(store: Int, message: String)] = []

        /// Nothing purged yet.
        public init() {}
    }

    /// Purges `stores` (which must be on one device) as `options` say.
    public static func purge(_ stores: [Store], _ options: Options) throws(UserError) -> Report {
        let duplicates = try checkOneDevice(stores)
        var report = Report()
        // Saturated: a duration longer than time itself (or NaN) leaves no file old enough.
        let cutoff: Int64? = options.olderThan.map {
            $0.isNaN ? .min : realtimeNanoseconds().subtractingSaturated(Int64(saturatingNanosecondsOf: $0))
        }

        // Every candidate, from each store's index or by walking it.
        struct Source {
            var store: Int
            var tags: [Tag]
            var folders: [TagIndex.FolderStamp]
            var identity: TagIndex.MountIdentity
            var indexed: Bool
            var mounted: Bool
        }
        var sources: [Source] = []
        for (number, store) in stores.enumerated() where !duplicates.contains(number) {
            let holder = MountLock.holder(store)
            if let holder, !options.includeRunning {
                report.skipped.append(Skipped(store: number, mountpoint: holder.mountpoint, pid: holder.pid))
                continue
            }
            let identity = TagIndex.mountIdentity(store)
            if holder == nil, !options.walk, let index = TagIndex.load(store) {
                sources.append(Source(store: number, tags: index.tags, folders: index.folders, identity: identity, indexed: true, mounted: false))
            } else {
                report.walked.append(number)
                let walked = Tags.walk(store)
                sources.append(Source(store: number, tags: walked.tags, folders: walked.folders, identity: identity, indexed: false, mounted: holder != nil))
            }
        }

        // Least recently used first; ties in the order the stores were named, then by path.
        // Sorted as small keys (no tag copied per comparison).
        var candidates: [(lastUse: Int64, source: Int32, tag: Int32)] = []
        for (s, source) in sources.enumerated() {
            for (t, tag) in source.tags.enumerated() where options.kinds.contains(tag.kind) {
                if let cutoff, tag.lastUse > cutoff { continue }
                candidates.append((tag.lastUse, Int32(s), Int32(t)))
            }
        }
        candidates.sort { a, b in
            if a.lastUse != b.lastUse { return a.lastUse < b.lastUse }
            if a.source != b.source { return a.source < b.source }
            return sources[Int(a.source)].tags[Int(a.tag)].path.lexicographicallyPrecedes(sources[Int(b.source)].tags[Int(b.tag)].path)
        }

        var removed = sources.map { [Bool](repeating: false, count: $0.tags.count) }
        var gone = sources.map { [Bool](repeating: false, count: $0.tags.count) }
        // Each walker keeps its store's folders open; share the descriptor limit among them.
        var limit = rlimit()
        getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)
        let folders = max(16, (Int(clamping: limit.rlim_cur) - 64) / max(1, sources.count))
        var walkers = sources.map { ParentWalker(rootFD: stores[$0.store].rootFD, capacity: folders) }
        defer { walkers.indices.forEach { walkers[$0].close() } }
        for candidate in candidates {
            if let free = options.free, report.freedBytes >= free { break }
            let (s, t) = (Int(candidate.source), Int(candidate.tag))
            var freed = sources[s].tags[t].size
            if !options.dryRun {
                switch walkers[s].unlink(sources[s].tags[t]) {
                case .success(let removal):
                    removed[s][t] = true
                    // The size it had when removed: the index's may be older (a file
                    // rewritten in place behind the mount changes no folder).
                    sources[s].tags[t].size = removal.size
                    freed = removal.lastName ? removal.size : 0
                case .failure(let error):
                    // Gone already, or no longer the file the tag names: not ours to delete.
                    // A file it could not delete stays in the index, a candidate still.
                    if error.code == ENOENT || error.code == ESTALE {
                        gone[s][t] = true
                    } else {
                        report.failures.append(Failure(store: sources[s].store, path: sources[s].tags[t].path, error: error))
                    }
                    continue
                }
            }
            report.deleted.append(Deleted(store: sources[s].store, tag: sources[s].tags[t], freedBytes: freed))
            // Sizes come from the store or its index: two sparse files of 5 EiB exceed Int64.
            report.freedBytes = report.freedBytes.addingSaturated(freed)
        }
        if options.dryRun { return report }

        for (s, source) in sources.enumerated() {
            let store = stores[source.store]
            var deleted = source.tags.indices.filter { removed[s][$0] }.map { source.tags[$0].containerPath }
            deleted += removeEmptiedFolders(store, deleted)
            // The space a daemon recorded at its last unmount is stale now.
            if !deleted.isEmpty { Capacity.forgetSummary(stateFD: store.stateFD) }
            // A store mounted now (also one whose mount started while we were deleting)
            // must drop what its kernel cached about the deleted files.
            if !deleted.isEmpty, MountLock.holder(store) != nil {
                do {
                    try ControlChannel.invalidate(store, deleted)
                } catch {
                    report.notInvalidated.append((source.store, error.message))
                }
            }
            // The rest is the store's new index, still tied to the mount it was made for:
            // if a mount started meanwhile, its identity no longer matches.
            if !source.mounted, !deleted.isEmpty || !source.indexed {
                let kept = source.tags.indices.filter { !removed[s][$0] && !gone[s][$0] }.map { source.tags[$0] }
                let changed = TagIndex.ancestors(of: source.tags.indices.filter { removed[s][$0] }.map { source.tags[$0].path })
                TagIndex.write(store, kept, folders: source.folders, restamping: changed.contains, identity: source.identity)
            }
        }
        return report
    }

    /// Deletes everything in the store's `tmp/` except its `CACHEDIR.TAG`: files, folders,
    /// symlinks (never followed). Called when the app stops running: by the daemon when a
    /// mount ends, and by `containerfs run` when the program has exited. Returns how many
    /// entries of `tmp/` itself were removed and how many could not be. On a mounted store,
    /// tell the daemon (`ControlChannel.invalidate`) or call it after unmounting.
    @discardableResult
    public static func emptyTemporary(_ store: Store) -> (removed: Int, left: Int) {
        guard let fd = try? openDirectory(at: store.rootFD, StandardDirectory.tmp.path.bytes),
              let entries = try? Directory.entries(of: fd) else { return (0, 0) }
        defer { Glibc.close(fd) }
        let isTag = { (name: [UInt8]) in name == ContainerLayout.cacheTagName }
        // Read before the folders change, which would make it untrusted.
        let index = MountLock.holder(store) == nil ? TagIndex.load(store) : nil
        let left = removeContents(of: fd, keeping: isTag)
        // A trusted index must not list what is gone.
        if let index {
            let top = StandardDirectory.tmp.path.bytes
            let emptied = { (path: [UInt8]) in path == top || path.starts(with: top + [UInt8(ascii: "/")]) }
            TagIndex.write(store, index.tags.filter { $0.kind != .temporary }, folders: index.folders, restamping: emptied, identity: TagIndex.mountIdentity(store))
        }
        let removed = max(0, entries.count { !isTag($0.name) } - left)
        // Run's cleanup comes after its daemon recorded the space used: that is stale now.
        if removed > 0 { Capacity.forgetSummary(stateFD: store.stateFD) }
        return (removed, left)
    }

    /// Refuses stores on different file systems: "free SIZE" means space on one device.
    /// Returns the indexes of stores named twice (under any path), to be purged once.
    static func checkOneDevice(_ stores: [Store]) throws(UserError) -> Set<Int> {
        var first: (path: String, device: UInt64)?
        var seen = Set<UInt64>()
        var duplicates = Set<Int>()
        for (number, store) in stores.enumerated() {
            var info = stat()
            guard fstat(store.rootFD, &info) == 0 else { throw UserError.failed("cannot read store \(store.path)", Errno.current) }
            if let first, first.device != UInt64(info.st_dev) {
                throw UserError.usage("stores \(first.path) and \(store.path) are on different devices: purge each device's stores separately")
            }
            if first == nil { first = (store.path, UInt64(info.st_dev)) }
            if !seen.insert(UInt64(info.st_ino)).inserted { duplicates.insert(number) }
        }
        return duplicates
    }

    /// Now on the real-time clock, in nanoseconds since the epoch.
    public static func realtimeNanoseconds() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
    }
}

/// Reaches the parent folders of tagged files from a store's root: one `openat2` per
/// folder with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS` (a symlink anywhere on the path
/// refuses it), keeping up to `capacity` folders open, since purge deletes the files of
/// many folders in an order of their own.
struct ParentWalker {
    private let rootFD: Int32
    private let capacity: Int
    private var open: [[UInt8]: Int32] = [:]

    init(rootFD: Int32, capacity: Int) {
        self.rootFD = rootFD
        self.capacity = capacity
    }

    /// Unlinks the tagged file if it is still the regular file the tag names; returns its
    /// size then, and whether that was its last name (so its blocks are freed, not kept by
    /// a hard link elsewhere).
    mutating func unlink(_ tag: Tag) -> Result<(size: Int64, lastName: Bool), Errno> {
        guard let slash = tag.path.lastIndex(of: UInt8(ascii: "/")) else { return .failure(Errno(EINVAL)) }
        let parent: Int32
        switch directory(Array(tag.path[..<slash])) {
        case .success(let fd): parent = fd
        case .failure(let error): return .failure(error)
        }
        return withCName(Array(tag.path[(slash + 1)...])) { name -> Result<(size: Int64, lastName: Bool), Errno> in
            var info = stat()
            guard fstatat(parent, name, &info, AT_SYMLINK_NOFOLLOW) == 0 else { return .failure(Errno.current) }
            guard info.st_mode & S_IFMT == S_IFREG, UInt64(info.st_ino) == tag.inode else { return .failure(Errno(ESTALE)) }
            return unlinkat(parent, name, 0) == 0 ? .success((Int64(info.st_size), info.st_nlink <= 1)) : .failure(Errno.current)
        }
    }

    /// The folder at `path` (relative to the root), never through a symlink.
    private mutating func directory(_ path: [UInt8]) -> Result<Int32, Errno> {
        if let fd = open[path] { return .success(fd) }
        if open.count >= capacity { close() }
        let (fd, error) = withCName(path) { name -> (Int32, Errno) in
            let opened = clinux_open_beneath(rootFD, name, clinux_O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0)
            return (opened, Errno.current)
        }
        guard fd >= 0 else { return .failure(error) }
        open[path] = fd
        return .success(fd)
    }

    mutating func close() {
        for fd in open.values { Glibc.close(fd) }
        open.removeAll()
    }
}

/// Sizes and durations as the command line writes them.
public enum Quantity {
    /// `123`, `10K`, `5M`, `2G`, `1T` (powers of 1024; a trailing `B` or `iB` is allowed).
    public static func bytes(_ text: String) -> Int64? {
        var digits = Substring(text.uppercased())
        if digits.hasSuffix("IB") { digits = digits.dropLast(2) } else if digits.hasSuffix("B") { digits = digits.dropLast() }
        var multiplier: Int64 = 1
        if let unit = digits.last, let shift = ["K": 10, "M": 20, "G": 30, "T": 40][unit] {
            multiplier = 1 << shift
            digits = digits.dropLast()
        }
        guard !digits.isEmpty, digits.allSatisfy(\.isASCII), let value = Int64(digits), value >= 0 else { return nil }
        let (product, overflow) = value.multipliedReportingOverflow(by: multiplier)
        return overflow ? nil : product
    }

    /// The longest duration `seconds` accepts: what nanoseconds since the epoch can count
    /// (2^63 ns, about 292 years).
    public static let maximumSeconds = 0x1p63 / 1e9

    /// `45` or `45s`, `10m`, `2h`, `3d`, `1w`, in seconds; nil for anything else, and for
    /// more than `maximumSeconds`.
    public static func seconds(_ text: String) -> Double? {
        var digits = Substring(text.lowercased())
        var multiplier = 1.0
        if let unit = digits.last, let factor = ["s": 1.0, "m": 60, "h": 3600, "d": 86400, "w": 604_800][unit] {
            multiplier = factor
            digits = digits.dropLast()
        }
        guard !digits.isEmpty, digits.allSatisfy({ $0.isASCII && ($0.isNumber || $0 == ".") }), let value = Double(digits) else { return nil }
        let seconds = value * multiplier
        return seconds.isFinite && seconds <= maximumSeconds ? seconds : nil
    }
}

extension Purge {
    /// Deletes the tagged files `tags` of a store that is not mounted (each checked to be
    /// the regular file its tag names, as purge does), and drops them from a trusted
    /// index. Returns how many files went and the bytes that freed (a file another name
    /// keeps frees none), and removes the folders that left empty as `purge` does.
    /// `run --launches` calls it between launches with the share of the caches it drew.
    public static func remove(_ tags: [Tag], from store: Store) -> (files: Int, bytes: Int64) {
        var walker = ParentWalker(rootFD: store.rootFD, capacity: 64)
        defer { walker.close() }
        // Read before the folders change, which would make it untrusted.
        let index = MountLock.holder(store) == nil ? TagIndex.load(store) : nil
        var removed: [Tag] = []
        var bytes: Int64 = 0
        for tag in tags {
            if case .success(let removal) = walker.unlink(tag) {
                removed.append(tag)
                if removal.lastName { bytes = bytes.addingSaturated(removal.size) }
            }
        }
        // As `purge` does (SPEC §10): no stale empty cache folder for the next launch.
        _ = removeEmptiedFolders(store, removed.map(\.containerPath))
        // Between run's launches, after a daemon recorded the space used: stale now.
        if !removed.isEmpty { Capacity.forgetSummary(stateFD: store.stateFD) }
        if let index {
            let gone = Set(removed.map(\.inode))
            TagIndex.write(store, index.tags.filter { !gone.contains($0.inode) }, folders: index.folders,
                           restamping: TagIndex.ancestors(of: removed.map(\.path)).contains, identity: TagIndex.mountIdentity(store))
        }
        return (removed.count, bytes)
    }
}
