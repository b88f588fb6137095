import CLinux
import ContainerStore
import Glibc
import Synchronization

/// When the daemon last saw each tagged file used, by inode: `.containerfs/uses`, a
/// fixed-size hash table the daemon maps shared and writes with plain atomic stores.
///
/// Why not the file's own access time: setting it (`futimens`) changes the file's ctime,
/// and programs such as `tar` take a ctime that moves while they read for a file changed
/// under them. The table changes nothing in the tree. Its writes go to the page cache at
/// once, so a daemon killed with `kill -9` loses none; no system call is made on the
/// hot path.
///
/// 2^18 slots of (inode, nanoseconds), 4 MiB, sparse: pages are only allocated where
/// slots are used. A slot is found by linear probing from the inode's hash, at most
/// `probes` slots; when they are all taken by other inodes the oldest is replaced, and the
/// file it described falls back to its own times. What the table says only orders
/// purge's victims: which files may be deleted never depends on it.
///
/// The file is the store's, so its owner may truncate it while it is mapped; an access
/// past its new end would be a SIGBUS. The mapping is registered with
/// `clinux_guard_mapping`, which turns such a page into a private zero-filled one: the
/// access goes through, and what it records is not kept.
public final class UseTable: @unchecked Sendable {
    static let fileName = Array(name: "uses")
    static let magic: UInt64 = 0x3153_4553_5553_4643  // "CFSUSES1"
    static let slotCount = 1 << 18
    static let headerBytes = 64
    static let probes = 32
    static var fileBytes: Int { headerBytes + slotCount * 16 }

    private let base: UnsafeMutableRawPointer
    private let words: UnsafeMutablePointer<Atomic<UInt64>>

    private init(base: UnsafeMutableRawPointer) {
        self.base = base
        words = (base + Self.headerBytes).bindMemory(to: Atomic<UInt64>.self, capacity: Self.slotCount * 2)
    }

    deinit {
        clinux_unguard_mapping(base)
        munmap(base, Self.fileBytes)
    }

    /// The store's table for the daemon, made (or made anew, if damaged) as needed.
    public static func openForWriting(_ store: Store) -> UseTable? {
        map(store, writable: true)
    }

    /// The store's table for reading, or nil if there is none.
    public static func openForReading(_ store: Store) -> UseTable? {
        map(store, writable: false)
    }

    private static func map(_ store: Store, writable: Bool) -> UseTable? {
        // O_NONBLOCK: a table replaced by a FIFO must not block the open.
        let flags = (writable ? O_RDWR | O_CREAT : O_RDONLY) | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC
        let fd = withCName(fileName) { openat(store.stateFD, $0, flags, 0o600) }
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var info = stat()
        // Truncated and written through a shared mapping: never a second name of another file.
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG, !writable || isSoleName(fd) else { return nil }
        if writable { ownedLikeTheFolder(fd, store.stateFD) }
        var header: (UInt64, UInt64) = (0, 0)
        let valid = Int(info.st_size) == fileBytes && pread(fd, &header, 16, 0) == 16
            && header.0 == magic && header.1 == UInt64(slotCount)
        if !valid {
            guard writable, ftruncate(fd, 0) == 0, ftruncate(fd, off_t(fileBytes)) == 0 else { return nil }
            header = (magic, UInt64(slotCount))
            guard pwrite(fd, &header, 16, 0) == 16 else { return nil }
        }
        let protection = writable ? PROT_READ | PROT_WRITE : PROT_READ
        let memory = mmap(nil, fileBytes, protection, MAP_SHARED, fd, 0)
        guard let memory, memory != MAP_FAILED else { return nil }
        // Registered before the first access: the file may be truncated already.
        guard clinux_guard_mapping(memory, fileBytes, protection) == 0 else {
            munmap(memory, fileBytes)
            return nil
        }
        return UseTable(base: memory)
    }

    @inline(__always)
    private func start(_ inode: UInt64) -> Int {
        Int(truncatingIfNeeded: (inode &* 0x9E37_79B9_7F4A_7C15) >> 46)
    }

    /// Records that the file with `inode` was used at `nanoseconds` (since the epoch).
    public func record(inode: UInt64, at nanoseconds: Int64) {
        guard inode != 0 else { return }
        let mask = Self.slotCount - 1
        var oldest = -1
        var oldestUse = Int64.max
        for probe in 0..<Self.probes {
            let slot = (start(inode) + probe) & mask
            let key = words[2 * slot].load(ordering: .relaxed)
            if key == 0 {
                let (taken, found) = words[2 * slot].compareExchange(expected: 0, desired: inode, ordering: .relaxed)
                if !taken, found != inode { continue }
            } else if key != inode {
                let use = Int64(bitPattern: words[2 * slot + 1].load(ordering: .relaxed))
                if use < oldestUse { (oldest, oldestUse) = (slot, use) }
                continue
            }
            words[2 * slot + 1].store(UInt64(bitPattern: nanoseconds), ordering: .relaxed)
            return
        }
        guard oldest >= 0 else { return }
        words[2 * oldest].store(inode, ordering: .relaxed)
        words[2 * oldest + 1].store(UInt64(bitPattern: nanoseconds), ordering: .relaxed)
    }

    /// The last use recorded for `inode`, or 0.
    public func lastUse(inode: UInt64) -> Int64 {
        guard inode != 0 else { return 0 }
        let mask = Self.slotCount - 1
        for probe in 0..<Self.probes {
            let slot = (start(inode) + probe) & mask
            let key = words[2 * slot].load(ordering: .relaxed)
            if key == inode { return Int64(bitPattern: words[2 * slot + 1].load(ordering: .relaxed)) }
            if key == 0 { return 0 }
        }
        return 0
    }
}
