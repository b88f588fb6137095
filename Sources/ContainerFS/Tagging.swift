import CLinux
import ContainerPolicy
import ContainerStore
import Glibc
import Synchronization

/// The daemon's part of tagging (SPEC §3; `Tags` in ContainerStore says what a tag is).
///
/// A tag's last use is the later of its store file's access and modification times. The
/// daemon stamps the access time with the real-time clock (nanoseconds) when a program
/// opens or creates a file below `Library/Caches` or `tmp`: `open` is synchronous, so uses
/// a few milliseconds apart are ordered as the program made them. Writes move the
/// modification time themselves. A file kept open longer than `heldLong` is stamped again
/// when it is closed, for the reads in between; shorter uses are not, because the kernel
/// sends `RELEASE` asynchronously and its stamp could land after a later open's. Reads
/// and writes cost nothing more, files elsewhere one atomic load when closed. When the
/// mount ends, `tmp/` is emptied and the tag index is written for purge.
enum Tagging {
    /// When each store descriptor opened on a tagged file was stamped.
    static let handles = OpenTimes()
    /// Nanoseconds a file must stay open to be stamped again on close.
    static let heldLong: Int64 = 1_000_000_000

    /// After `open`: stamps a tagged file's last use and remembers its descriptor.
    @inline(__always)
    static func opened(_ opened: (fd: Int32, directIO: Bool), _ node: Inode, _ location: Location) -> (fd: Int32, directIO: Bool) {
        if node.type == S_IFREG, isTagged(location) { use(opened.fd) }
        return opened
    }

    /// After `create`: the new file is a use too.
    @inline(__always)
    static func created(_ fd: Int32, _ location: Location) {
        if isTagged(location) { use(fd) }
    }

    /// Before the descriptor of `release` is closed.
    @inline(__always)
    static func released(_ fd: Int32) {
        let openedAt = handles.take(fd)
        if openedAt != 0 { stamp(fd, ifLaterThan: openedAt + heldLong) }
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

    private static func use(_ fd: Int32) {
        handles.set(fd, stamp(fd, ifLaterThan: 0))
    }

    /// Sets the file's access time to now if now is later than `threshold` (nanoseconds),
    /// leaving its modification time; returns the time set, or 0. An explicit time (finer
    /// than the kernel's clock tick) needs the owner or CAP_FOWNER; otherwise the
    /// kernel's "now" will do.
    @discardableResult
    private static func stamp(_ fd: Int32, ifLaterThan threshold: Int64) -> Int64 {
        var times = (timespec(), timespec(tv_sec: 0, tv_nsec: clinux_UTIME_OMIT))
        clock_gettime(CLOCK_REALTIME, &times.0)
        let now = Int64(times.0.tv_sec) * 1_000_000_000 + Int64(times.0.tv_nsec)
        guard now > threshold else { return 0 }
        let result = withUnsafePointer(to: &times) {
            $0.withMemoryRebound(to: timespec.self, capacity: 2) { futimens(fd, $0) }
        }
        if result != 0, errno == EPERM {
            times.0 = timespec(tv_sec: 0, tv_nsec: clinux_UTIME_NOW)
            _ = withUnsafePointer(to: &times) { $0.withMemoryRebound(to: timespec.self, capacity: 2) { futimens(fd, $0) } }
        }
        return now
    }
}

/// Per store descriptor, when it was opened on a tagged file (0: not tagged), lock-free:
/// threads opening and closing files never wait for each other. One word per descriptor
/// up to the descriptor limit (at most 2^20), in zero pages the kernel fills on first
/// touch; a descriptor beyond is not remembered (its file is stamped when opened only).
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
