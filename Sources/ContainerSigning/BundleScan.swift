import CLinux
import ContainerPolicy
import ContainerStore
import Crypto
import Dispatch
import Glibc
import Synchronization

/// What the verification cache keys a file's digest on: while none of these change, the
/// contents have not changed either. The ctime cannot be set back by any user (only by
/// changing the clock), so contents changed with their times set back are caught too;
/// `verify --full` rehashes regardless.
struct FileIdentity: Hashable, Sendable {
    var inode: UInt64
    var size: UInt64
    var ctimeSeconds: Int64
    var ctimeNanoseconds: UInt32
    var mtimeSeconds: Int64
    var mtimeNanoseconds: UInt32

    init(_ info: stat) {
        inode = UInt64(info.st_ino)
        size = UInt64(info.st_size)
        ctimeSeconds = Int64(info.st_ctim.tv_sec)
        ctimeNanoseconds = UInt32(info.st_ctim.tv_nsec)
        mtimeSeconds = Int64(info.st_mtim.tv_sec)
        mtimeNanoseconds = UInt32(info.st_mtim.tv_nsec)
    }

    init(inode: UInt64, size: UInt64, ctimeSeconds: Int64, ctimeNanoseconds: UInt32, mtimeSeconds: Int64, mtimeNanoseconds: UInt32) {
        self.inode = inode
        self.size = size
        self.ctimeSeconds = ctimeSeconds
        self.ctimeNanoseconds = ctimeNanoseconds
        self.mtimeSeconds = mtimeSeconds
        self.mtimeNanoseconds = mtimeNanoseconds
    }

    /// True when the ctime lies in an earlier clock tick than `now` (the coarse clock the
    /// kernel stamps ctimes with, read before the contents were): then any later change
    /// gets a later ctime, so a digest of what was read can be trusted for this identity.
    /// A file changed within the tick it was read in could keep its ctime (git's "racily
    /// clean" entries): such a digest is not cached.
    func isSettled(before now: timespec) -> Bool {
        (ctimeSeconds, Int64(ctimeNanoseconds)) < (Int64(now.tv_sec), Int64(now.tv_nsec))
    }
}

/// The bundle as found in a store: every entry, with file contents hashed or taken from
/// the verification cache.
struct BundleScan: Sendable {
    /// Every entry, sorted by path bytes.
    var entries: [BundleEntry] = []
    /// Files whose contents were read and hashed.
    var hashedFiles = 0
    /// Bytes read and hashed.
    var hashedBytes: UInt64 = 0
    /// Files whose digest came from the cache.
    var cachedFiles = 0
    /// The digests worth caching: files read whole with an unchanged, settled identity.
    var cache: [FileIdentity: [UInt8]] = [:]
    /// The files' sizes as signed, when verifying: a file of another size is not read.
    private var signedSizes: [[UInt8]: UInt64]?

    /// Walks the bundle `bundleName` in the store's root `rootFD`.
    ///
    /// Only descriptors are used: each folder is opened with `O_NOFOLLOW` below its parent,
    /// and each file through `openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`, so no
    /// symlink is ever followed. Files are hashed on every core, largest first; a file
    /// whose identity is in `cache` is not read.
    ///
    /// With `signedSizes` (a verification: each file's size in the signed manifest), a file
    /// of another size, or not in it, is a change already and is not read: the store's owner
    /// can make a bundle file a sparse file of terabytes, which root's `mount` would
    /// otherwise hash for hours before refusing it.
    static func scan(rootFD: Int32, bundleName: [UInt8], cache: [FileIdentity: [UInt8]] = [:],
                     signedSizes: [[UInt8]: UInt64]? = nil) -> BundleScan {
        var scan = BundleScan()
        scan.signedSizes = signedSizes
        scan.cache.reserveCapacity(cache.count)
        var jobs: [HashJob] = []
        scan.walk(parentFD: rootFD, name: bundleName, path: bundleName, cache: cache, jobs: &jobs)
        scan.hash(jobs, rootFD: rootFD)
        scan.entries.sort { $0.path.lexicographicallyPrecedes($1.path) }
        return scan
    }

    /// A file to read: its entry's index, its identity as walked.
    struct HashJob: Sendable {
        let index: Int
        let path: [UInt8]
        let identity: FileIdentity
    }

    /// Iterative, on a `FolderChain`: a chain of folders of any depth neither overflows the
    /// thread's stack nor runs out of descriptors.
    private mutating func walk(parentFD: Int32, name: [UInt8], path: [UInt8], cache: [FileIdentity: [UInt8]], jobs: inout [HashJob]) {
        guard let chain = try? FolderChain(top: parentFD) else { return }
        func names(_ fd: Int32) -> [[UInt8]] { ((try? Directory.entries(of: fd)) ?? []).map(\.name) }
        // Each level: the names still to visit, and the length of `path` that names it.
        var levels: [(names: [[UInt8]], pathLength: Int)] = []
        var path = path
        // A folder that cannot be opened shows its contents as removed.
        if visit(parentFD: chain.fd, name: name, path: path, cache: cache, jobs: &jobs), (try? chain.enter(name)) != nil {
            levels.append((names(chain.fd), path.count))
        }
        // The top level is popped in place, never through a copy of it (`levels.last`
        // would share its names, and each removal would copy them: quadratic in a folder).
        while !levels.isEmpty {
            guard let child = levels[levels.count - 1].names.popLast() else {
                levels.removeLast()
                // A folder moved while walked: what is left shows as removed.
                if levels.isEmpty || (try? chain.leave()) == nil { break }
                continue
            }
            path.removeSubrange(levels[levels.count - 1].pathLength...)
            path.append(UInt8(ascii: "/"))
            path.append(contentsOf: child)
            if visit(parentFD: chain.fd, name: child, path: path, cache: cache, jobs: &jobs), (try? chain.enter(child)) != nil {
                levels.append((names(chain.fd), path.count))
            }
        }
    }

    /// Adds the entry `name` of the folder open at `parentFD`; true if it is a folder.
    private mutating func visit(parentFD: Int32, name: [UInt8], path: [UInt8], cache: [FileIdentity: [UInt8]], jobs: inout [HashJob]) -> Bool {
        var info = stat()
        guard withCName(name, { fstatat(parentFD, $0, &info, AT_SYMLINK_NOFOLLOW) }) == 0 else { return false }
        let mode = UInt32(info.st_mode) & 0o7777
        switch info.st_mode & S_IFMT {
        case S_IFDIR:
            entries.append(BundleEntry(path: path, kind: .folder, mode: mode, size: 0))
            return true
        case S_IFREG:
            let identity = FileIdentity(info)
            var entry = BundleEntry(path: path, kind: .file, mode: mode, size: identity.size)
            entry.links = UInt64(info.st_nlink)
            if let signedSizes, signedSizes[path] != identity.size {
                // Not the signed size: a change, whatever the bytes; no digest.
            } else if let digest = cache[identity] {
                entry.digest = digest
                self.cache[identity] = digest
                cachedFiles += 1
            } else if path.count < Int(PATH_MAX) {
                jobs.append(HashJob(index: entries.count, path: path, identity: identity))
            } else {
                // Too long a path for openat2 from the root: hashed here, from its folder.
                let job = HashJob(index: entries.count, path: path, identity: identity)
                let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: Self.chunkSize, alignment: 4096)
                defer { buffer.deallocate() }
                let result = Self.hashFile(job, buffer: buffer) {
                    withCName(name) { openat(parentFD, $0, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC) }
                }
                entries.append(entry)
                record(job, result)
                return false
            }
            entries.append(entry)
        case S_IFLNK:
            let target = (try? readLink(at: parentFD, name)) ?? []
            entries.append(BundleEntry(path: path, kind: .symlink, mode: mode, size: UInt64(target.count), target: target))
        default:
            entries.append(BundleEntry(path: path, kind: .special, mode: mode, size: 0))
        }
        return false
    }

    /// What hashing one file gave: its digest (empty if unreadable), and whether it may be cached.
    private struct HashResult: Sendable {
        var digest: [UInt8] = []
        var cacheable = false
    }

    private mutating func hash(_ jobs: [HashJob], rootFD: Int32) {
        guard !jobs.isEmpty else { return }
        // Largest first, so the last file to finish is a small one and the cores end together.
        let order = jobs.indices.sorted { jobs[$0].identity.size > jobs[$1].identity.size }
        let workers = min(jobs.count, max(1, min(8, sysconf(Int32(_SC_NPROCESSORS_ONLN)))))
        let next = Atomic<Int>(0)
        let results = Mutex([HashResult](repeating: HashResult(), count: jobs.count))
        DispatchQueue.concurrentPerform(iterations: workers) { _ in
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: Self.chunkSize, alignment: 4096)
            defer { buffer.deallocate() }
            while true {
                let taken = next.add(1, ordering: .relaxed).oldValue
                guard taken < order.count else { return }
                let job = jobs[order[taken]]
                let result = Self.hashFile(job, buffer: buffer) {
                    withCName(job.path) { clinux_open_beneath(rootFD, $0, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0) }
                }
                results.withLock { $0[order[taken]] = result }
            }
        }
        results.withLock { results in
            for (job, result) in zip(jobs, results) { record(job, result) }
        }
    }

    private mutating func record(_ job: HashJob, _ result: HashResult) {
        entries[job.index].digest = result.digest
        if !result.digest.isEmpty {
            hashedFiles += 1
            hashedBytes += job.identity.size
        }
        if result.cacheable { cache[job.identity] = result.digest }
    }

    static let chunkSize = 1 << 20

    /// Reads and hashes one file. Cacheable when its identity was the same when walked,
    /// when opened and when read to the end, and settled before it was read.
    /// `open` opens the file without following a symlink, and with `O_NONBLOCK`: should a
    /// FIFO have replaced the file since the walk, open must not wait.
    private static func hashFile(_ job: HashJob, buffer: UnsafeMutableRawBufferPointer, open: () -> Int32) -> HashResult {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME_COARSE, &now)
        let fd = open()
        guard fd >= 0 else { return HashResult() }
        defer { close(fd) }
        var before = stat()
        guard fstat(fd, &before) == 0, before.st_mode & S_IFMT == S_IFREG else { return HashResult() }
        _ = posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL)
        var hasher = SHA256()
        var read: UInt64 = 0
        while true {
            let count = Glibc.read(fd, buffer.baseAddress, buffer.count)
            if count == 0 { break }
            if count < 0 {
                if errno == EINTR { continue }
                return HashResult()
            }
            // Grown past its size as walked (made huge meanwhile): changed, not read on.
            read += UInt64(count)
            if read > job.identity.size { return HashResult() }
            hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
        }
        var after = stat()
        fstat(fd, &after)
        let digest = Array(hasher.finalize())
        let unchanged = FileIdentity(before) == job.identity && FileIdentity(after) == job.identity
        return HashResult(digest: digest, cacheable: unchanged && job.identity.isSettled(before: now))
    }
}

// MARK: The verification cache

/// `.containerfs/bundle.cache`: file identity → SHA-256 of its contents, so that verifying
/// an unchanged bundle reads no file. It holds facts about files, not about the manifest,
/// and is authenticated with a key derived from the installer key, so whoever can write
/// the store cannot make it vouch for changed contents. A cache that does not
/// authenticate is ignored. Big-endian:
///
/// ```
/// "containerfs verification cache 1\n"   u32 count
/// per file: u64 inode  u64 size  i64 ctime s  u32 ctime ns  i64 mtime s  u32 mtime ns  32 bytes SHA-256
/// 32 bytes HMAC-SHA256 of all the above
/// ```
enum VerificationCache {
    static let fileName = Array(name: "bundle.cache")
    static let magic = Array("containerfs verification cache 1\n".utf8)

    /// The cache in the state folder; empty when missing or not authentic.
    static func read(stateFD: Int32, key: SymmetricKey) -> [FileIdentity: [UInt8]] {
        guard let bytes = try? readFile(at: stateFD, fileName), bytes.count >= magic.count + 4 + 32 else { return [:] }
        let body = bytes.dropLast(32)
        guard HMAC<SHA256>.isValidAuthenticationCode(Array(bytes.suffix(32)), authenticating: body, using: key) else { return [:] }
        var reader = Reader(bytes: Array(body))
        var cache: [FileIdentity: [UInt8]] = [:]
        do {
            guard try reader.take(magic.count) == magic[...] else { return [:] }
            let count = try reader.integer(UInt32.self)
            cache.reserveCapacity(min(Int(count), bytes.count / 76))
            for _ in 0..<count {
                let identity = FileIdentity(
                    inode: try reader.integer(UInt64.self), size: try reader.integer(UInt64.self),
                    ctimeSeconds: try reader.integer(Int64.self), ctimeNanoseconds: try reader.integer(UInt32.self),
                    mtimeSeconds: try reader.integer(Int64.self), mtimeNanoseconds: try reader.integer(UInt32.self))
                cache[identity] = Array(try reader.take(32))
            }
        } catch {
            return [:]
        }
        return cache
    }

    /// Replaces the cache (written aside and renamed over it). Best effort: a user who may
    /// verify but not write the store simply gets no cache.
    static func write(_ cache: [FileIdentity: [UInt8]], stateFD: Int32, key: SymmetricKey) {
        var out = magic
        out.reserveCapacity(magic.count + 4 + cache.count * 76 + 32)
        func append<T: FixedWidthInteger>(_ value: T) { withUnsafeBytes(of: value.bigEndian) { out += $0 } }
        append(UInt32(cache.count))
        for (identity, digest) in cache {
            append(identity.inode)
            append(identity.size)
            append(identity.ctimeSeconds)
            append(identity.ctimeNanoseconds)
            append(identity.mtimeSeconds)
            append(identity.mtimeNanoseconds)
            out += digest
        }
        out += Array(HMAC<SHA256>.authenticationCode(for: out, using: key))
        let staging = fileName + Array(".new-\(getpid())-\(UInt32.random(in: 0...UInt32.max))".utf8)
        _ = withCName(staging) { unlinkat(stateFD, $0, 0) }
        guard (try? writeNewFile(at: stateFD, staging, out, mode: 0o600)) != nil else {
            _ = withCName(staging) { unlinkat(stateFD, $0, 0) }
            return
        }
        let renamed = withCName(staging) { from in withCName(fileName) { to in renameat(stateFD, from, stateFD, to) } }
        if renamed != 0 { _ = withCName(staging) { unlinkat(stateFD, $0, 0) } }
    }
}
