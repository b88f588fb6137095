import CFuse
import CLinux
import ContainerPolicy
import ContainerPurge
import ContainerStore
import Glibc
import Synchronization

/// The daemon's part of tagging (SPEC §3; `Tags` in ContainerStore says what a tag is).
///
/// When a program opens or creates a regular file below `Library/Caches` or `tmp`, the
/// daemon records the time (real-time clock, nanoseconds) against the file's inode in
/// the store's `UseTable`, a shared mapping: one atomic store, no system call, nothing
/// changed in the tree (a stamped ctime would make `tar` report the file changed as it
/// read it). `open` is synchronous, so uses a few milliseconds apart are ordered as the
/// program made them; writes also move the file's mtime. A file kept open longer than
/// `heldLong` is recorded again when closed, for the reads in between; shorter uses are
/// not, because the kernel sends `RELEASE` asynchronously and that record could land
/// after a later open's. A program setting a tagged file's access time (`touch -a -d`)
/// sets its last use. Files elsewhere pay one atomic load when closed. When the mount
/// ends, `tmp/` is emptied and the tag index is written for purge.
enum Tagging {
    /// The store's use table, mapped when the mount starts (before any request).
    nonisolated(unsafe) private(set) static var uses: UseTable?
    /// When each store descriptor opened on a tagged file was opened.
    static let handles = OpenTimes()
    /// Nanoseconds a file must stay open to be recorded again on close.
    static let heldLong: Int64 = 1_000_000_000

    /// Before the loop starts: maps the store's use table.
    static func mounted(_ store: Store) {
        uses = UseTable.openForWriting(store)
    }

    /// After `open`: records a tagged file's use and remembers its descriptor.
    @inline(__always)
    static func opened(_ opened: (fd: Int32, directIO: Bool), _ node: Inode, _ location: Location) -> (fd: Int32, directIO: Bool) {
        if node.type == S_IFREG, isTagged(location) { use(opened.fd, node.key.number) }
        return opened
    }

    /// After `create`: the new file is a use too (also clearing what an earlier file with
    /// the same inode number left in the table).
    @inline(__always)
    static func created(_ fd: Int32, _ location: Location) {
        guard isTagged(location) else { return }
        var info = stat()
        if fstat(fd, &info) == 0 { use(fd, UInt64(info.st_ino)) }
    }

    /// Before the descriptor of `release` is closed.
    @inline(__always)
    static func released(_ fd: Int32) {
        let openedAt = handles.take(fd)
        guard openedAt != 0 else { return }
        let now = Purge.realtimeNanoseconds()
        var info = stat()
        // Subtracted with overflow reported: the clock may have been set anywhere.
        let (held, overflow) = now.subtractingReportingOverflow(openedAt)
        if overflow || held > heldLong, fstat(fd, &info) == 0 { uses?.record(inode: UInt64(info.st_ino), at: now) }
    }

    /// After `setattr`: an access time set by a program is the file's last use.
    static func timesSet(_ node: Inode, _ location: Location, _ toSet: Int32, _ attr: stat) {
        guard node.type == S_IFREG, isTagged(location) else { return }
        if toSet & FUSE_SET_ATTR_ATIME_NOW != 0 {
            uses?.record(inode: node.key.number, at: Purge.realtimeNanoseconds())
        } else if toSet & FUSE_SET_ATTR_ATIME != 0 {
            uses?.record(inode: node.key.number, at: nanoseconds(attr.st_atim))
        }
    }

    /// A program's time stamp in nanoseconds since the epoch, saturated at the ends of
    /// `Int64` (about the years 1677 and 2262): any second count the kernel accepts
    /// (`utimensat` takes years beyond 2262, and before 1970) orders correctly and never traps.
    static func nanoseconds(_ time: timespec) -> Int64 {
        let (product, overflow) = Int64(time.tv_sec).multipliedReportingOverflow(by: 1_000_000_000)
        guard !overflow else { return time.tv_sec < 0 ? .min : .max }
        let (sum, carried) = product.addingReportingOverflow(Int64(time.tv_nsec))
        return carried ? (time.tv_nsec < 0 ? .min : .max) : sum
    }

    /// When the mount has ended (the loop is over, the kernel gone): the app no longer
    /// runs, so `tmp/` is emptied (SPEC §3), then the tags are indexed for purge.
    static func unmounted(_ store: Store) {
        Purge.emptyTemporary(store)
        TagIndex.rebuild(store)
    }

    @inline(__always)
    private static func isTagged(_ location: Location) -> Bool {
        location == .inside(.cache) || location == .inside(.temporary)
    }

    @inline(__always)
    private static func use(_ fd: Int32, _ inode: UInt64) {
        let now = Purge.realtimeNanoseconds()
        uses?.record(inode: inode, at: now)
        handles.set(fd, now)
    }
}

/// Per store descriptor, when it was opened on a tagged file (0: not tagged), lock-free:
/// threads opening and closing files never wait for each other. One word per descriptor
/// up to the descriptor limit (at most 2^20), in zero pages the kernel fills on first
/// touch; a descriptor beyond is not remembered (its file is recorded when opened only).
final class OpenTimes: @unchecked Sendable {
    private let slots: UnsafeMutablePointer<Atomic<Int64>>
    private let count: Int

    init() {
        var limit = rlimit()
        getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)
        let wanted = Int(clamping: max(64, min(limit.rlim_cur, 1 << 20)))
        // calloc of this size maps fresh zero pages; zeroed memory is Atomic<Int64>(0).
        let memory = calloc(wanted, MemoryLayout<Int64>.stride)
        count = memory == nil ? 0 : wanted
        slots = (memory ?? UnsafeMutableRawPointer.allocate(byteCount: 8, alignment: 8)).bindMemory(to: Atomic<Int64>.self, capacity: max(count, 1))
    }

    @inline(__always)
    func set(_ fd: Int32, _ time: Int64) {
        guard fd >= 0, Int(fd) < count else { return }
        slots[Int(fd)].store(time, ordering: .relaxed)
    }

    /// The time recorded for `fd`, cleared; 0 if none.
    @inline(__always)
    func take(_ fd: Int32) -> Int64 {
        guard fd >= 0, Int(fd) < count else { return 0 }
        guard slots[Int(fd)].load(ordering: .relaxed) != 0 else { return 0 }
        return slots[Int(fd)].exchange(0, ordering: .relaxed)
    }
}
