import CFuse
import CLinux
import ContainerPolicy
import ContainerStore
import Glibc
import Synchronization

/// Data protection on a live mount (SPEC §11): the device state, and the open files of
/// class `complete`, whose every read and write the daemon must see.
///
/// Such a file is opened without passthrough (the kernel would read and write the store
/// itself) and its handle is marked *guarded* (bit 32 of the FUSE file handle, above the
/// store descriptor), so a read or write of any other file costs nothing extra. Guarded
/// reads and writes run under `gate`'s shared side; `lock` switches the state under its
/// exclusive side, so no read allowed before the lock is still filling the kernel's page
/// cache when, just after, the pages of every open guarded file are invalidated
/// (`fuse_lowlevel_notify_inval_inode`): from then on every read of them reaches the
/// daemon, which refuses it.
final class DataProtection: @unchecked Sendable {
    /// The class of a node without the attribute (the store's `create --protection`).
    private(set) var defaultClass = ProtectionClass.containerDefault
    private let state = Mutex(DeviceState.unlocked)
    /// Open guarded handles per node, to invalidate their pages at lock.
    private let guardedNodes = Mutex<[fuse_ino_t: Int]>([:])
    private let gate: UnsafeMutablePointer<pthread_rwlock_t>

    /// The bit of a FUSE file handle that marks it guarded.
    static let guardedBit: UInt64 = 1 << 32
    /// The bits of a FUSE file handle that say which of the kernel's I/O paths it took
    /// (`OpenPath`), so that its release is counted off the right one.
    static let passthroughBit: UInt64 = 1 << 33
    static let cachedBit: UInt64 = 1 << 34

    /// Open files per node, by the kernel's I/O path: a node's files must all be passed
    /// through, or none (`fs/fuse/iomode.c`), or the open fails with `EIO`.
    private let openPaths = Mutex<[fuse_ino_t: (cached: Int, passthrough: Int)]>([:])

    init() {
        gate = .allocate(capacity: 1)
        pthread_rwlock_init(gate, nil)
    }

    deinit {
        pthread_rwlock_destroy(gate)
        gate.deallocate()
    }

    /// Set once, before the mount serves requests.
    func start(defaultClass: ProtectionClass, lockedSinceBoot: Bool) {
        self.defaultClass = defaultClass
        state.withLock { $0 = lockedSinceBoot ? .lockedSinceBoot : .unlocked }
    }

    var current: DeviceState { state.withLock { $0 } }

    /// Locks or unlocks the device; a lock makes the kernel drop the cached pages of every
    /// open guarded file, after every read allowed before it has finished.
    func switchState(locked: Bool, session: OpaquePointer) -> DeviceState {
        pthread_rwlock_wrlock(gate)
        let new = state.withLock { now in
            now = now.switched(locked: locked)
            return now
        }
        pthread_rwlock_unlock(gate)
        if locked {
            for ino in guardedNodes.withLock({ Array($0.keys) }) {
                _ = fuse_lowlevel_notify_inval_inode(session, ino, 0, 0)
            }
        }
        return new
    }

    /// Runs `body` (a read or write of a guarded handle) if data of class `complete` is
    /// available now; returns false, running nothing, when it is not.
    @inline(__always)
    func whileAvailable(_ body: () -> Void) -> Bool {
        pthread_rwlock_rdlock(gate)
        defer { pthread_rwlock_unlock(gate) }
        guard ProtectionPolicy.decide(.complete, state.withLock { $0 }, .descriptor) == .allow else { return false }
        body()
        return true
    }

    func opened(_ ino: fuse_ino_t) {
        guardedNodes.withLock { $0[ino, default: 0] += 1 }
    }

    func released(_ ino: fuse_ino_t) {
        guardedNodes.withLock { nodes in
            let left = (nodes[ino] ?? 1) - 1
            nodes[ino] = left > 0 ? left : nil
        }
    }

    /// Chooses the I/O path of a new open file of `ino` and counts it: the one `wanted`
    /// (what its class asks: `complete` is never passed through), unless the node's other
    /// open files took the other path, which the kernel then requires. `backingID` is the
    /// node's registered backing file (nonzero while any of its files is passed through).
    func choosePath(_ ino: fuse_ino_t, wanted: OpenPath, backingID: () -> Int32) -> OpenPath {
        openPaths.withLock { paths in
            var counts = paths[ino] ?? (0, 0)
            var path = wanted
            if case .passthrough = wanted, counts.cached > 0 {
                path = .cached
            } else if counts.passthrough > 0, case let id = backingID(), id > 0 {
                switch wanted {
                case .cached, .direct: path = .passthrough(id)
                case .passthrough: break
                }
            }
            switch path {
            case .passthrough: counts.passthrough += 1
            case .cached: counts.cached += 1
            case .direct: break
            }
            paths[ino] = counts.cached == 0 && counts.passthrough == 0 ? nil : counts
            return path
        }
    }

    /// After an open file whose handle is `fh` was released.
    func releasedPath(_ ino: fuse_ino_t, _ fh: UInt64) {
        guard fh & (Self.passthroughBit | Self.cachedBit) != 0 else { return }
        openPaths.withLock { paths in
            guard var counts = paths[ino] else { return }
            if fh & Self.passthroughBit != 0 { counts.passthrough = max(0, counts.passthrough - 1) }
            if fh & Self.cachedBit != 0 { counts.cached = max(0, counts.cached - 1) }
            paths[ino] = counts.cached == 0 && counts.passthrough == 0 ? nil : counts
        }
    }

    /// Whether a FUSE file handle is guarded.
    @inline(__always)
    static func isGuarded(_ info: UnsafeMutablePointer<fuse_file_info>?) -> Bool {
        guard let info else { return false }
        return info.pointee.fh & guardedBit != 0
    }
}

/// How the kernel serves an open file: passed through to the store file (the backing
/// ID), through its page cache with every miss a `READ` to the daemon, or direct I/O (every
/// read and write a request; the kernel keeps no I/O mode for it).
enum OpenPath: Equatable {
    case passthrough(Int32)
    case cached
    case direct
}

extension FileSystem {
    /// The I/O path of a new open file of `ino`, as its class asks (`guarded`: never passed
    /// through) unless the node's other open files hold the other path, and counted until
    /// release. A class changed while the file is open (from outside with `containerfs
    /// protect`, or by `setxattr` through the mount) therefore never makes an open fail
    /// with `EIO`: a file no longer `complete` opened beside guarded files is served
    /// through the cache as they are; a file become `complete` opened beside files passed
    /// through is passed through too, so it is not guarded until they are all closed
    /// (docs/protection.md). Returns the path; `guarded` is cleared if it was passed through.
    func openPath(_ ino: fuse_ino_t, guarded: inout Bool, directIO: Bool) -> OpenPath {
        let offered = guarded ? 0 : passthrough(ino)
        let wanted: OpenPath = offered != 0 ? .passthrough(offered) : directIO ? .direct : .cached
        let path = protection.choosePath(ino, wanted: wanted) {
            guard let node = try? inodes.inode(ino) else { return 0 }
            return node.backingID.withLock { $0 }
        }
        if case .passthrough = path { guarded = false }
        return path
    }

    /// The protection class of `node`: its attribute, or the container's default.
    func protectionClass(of node: Inode) -> ProtectionClass {
        guard node.type == S_IFREG || node.type == S_IFDIR else { return protection.defaultClass }
        var buffer = [UInt8](repeating: 0, count: 48)
        let count = (try? inodes.withDescriptor(node) { fd in
            buffer.withUnsafeMutableBytes { clinux_node_getxattr(fd, ProtectionClass.attributeName, $0.baseAddress, $0.count) }
        }) ?? -1
        guard count > 0 else { return protection.defaultClass }
        return ProtectionClass(value: buffer.prefix(count)) ?? protection.defaultClass
    }

    /// Whether the data of a node at `location` is protected at all: the bundle and the
    /// container's structure are the app's and the system's, readable in any state (a
    /// locked iPhone still launches apps in the background).
    private static func isProtected(_ location: Location) -> Bool {
        switch location.area {
        case .data, .cache, .temporary, .inbox: true
        case .bundle, .structure: false
        }
    }

    /// Checks that the data of `ino` may be opened (or, by name, truncated) in the device's
    /// state; returns whether its handle must be guarded (`complete`).
    func admitOpen(_ caller: Caller, _ ino: fuse_ino_t, _ operation: StaticString) throws(Errno) -> Bool {
        let node = try inodes.inode(ino)
        let location = inodes.location(of: node)
        guard node.type == S_IFREG, Self.isProtected(location) else { return false }
        let protectionClass = protectionClass(of: node)
        try admit(protectionClass, .open, caller, operation, node, location)
        return ProtectionPolicy.guardsDescriptors(protectionClass)
    }

    /// Checks that a new file may be made in folder `parent` (it takes the folder's class);
    /// returns whether its handle must be guarded.
    func admitCreation(_ caller: Caller, in parent: fuse_ino_t, _ operation: StaticString) throws(Errno) -> Bool {
        let directory = try inodes.inode(parent)
        let location = inodes.location(of: directory)
        let protectionClass = protectionClass(of: directory)
        guard Self.isProtected(location) || location.area == .structure && location != .root else { return false }
        try admit(protectionClass, .create, caller, operation, directory, location)
        return ProtectionPolicy.guardsDescriptors(protectionClass)
    }

    /// Refuses a read, write or truncate through a guarded handle while its data is unavailable.
    func refuseGuarded(_ caller: Caller, _ ino: fuse_ino_t, _ operation: StaticString) -> Int32 {
        if let node = try? inodes.inode(ino) { record(caller, operation, node, inodes.location(of: node)) }
        return Denial.protectedDataUnavailable.errno
    }

    /// Checks a guarded handle's access now (truncate, fallocate, copy_file_range).
    func admitGuarded(_ caller: Caller, _ ino: fuse_ino_t, _ operation: StaticString) throws(Errno) {
        guard ProtectionPolicy.decide(.complete, protection.current, .descriptor) != .allow, isStillComplete(ino) else { return }
        throw Errno(refuseGuarded(caller, ino, operation))
    }

    /// Whether a node opened as `complete` still is: read again before a guarded handle is
    /// refused, so that a class changed from outside (`containerfs protect`) applies to
    /// descriptors already open too, whatever the kernel still caches.
    func isStillComplete(_ ino: fuse_ino_t) -> Bool {
        guard let node = try? inodes.inode(ino) else { return true }
        return protectionClass(of: node) == .complete
    }

    /// A `setxattr` or `removexattr` of the protection attribute: the value must name a
    /// class (`EINVAL`), and the class of data that is unavailable now cannot be changed
    /// (a locked device cannot downgrade a `complete` file to read it).
    func checkProtectionAttribute(_ caller: Caller, _ node: Inode, _ location: Location,
                                  _ name: UnsafePointer<CChar>, _ value: UnsafeRawBufferPointer?) throws(Errno) {
        guard strcmp(name, ProtectionClass.attributeName) == 0 else { return }
        if let value, ProtectionClass(value: value) == nil { throw Errno(EINVAL) }
        guard Self.isProtected(location) else { return }
        try admit(protectionClass(of: node), .open, caller, value == nil ? "removexattr" : "setxattr", node, location)
    }

    /// Gives a new file or folder its parent folder's class (SPEC §11). Only regular files
    /// and folders hold user attributes on Linux; a node without one has the default class,
    /// so nothing is written below a folder without the attribute.
    func inheritProtection(from directory: Inode, to node: Inode) {
        guard node.type == S_IFREG || node.type == S_IFDIR else { return }
        var buffer = [UInt8](repeating: 0, count: 48)
        let count = (try? inodes.withDescriptor(directory) { fd in
            buffer.withUnsafeMutableBytes { clinux_node_getxattr(fd, ProtectionClass.attributeName, $0.baseAddress, $0.count) }
        }) ?? -1
        guard count > 0, ProtectionClass(value: buffer.prefix(count)) != nil else { return }
        _ = try? inodes.withDescriptor(node) { fd in
            buffer.withUnsafeBytes { clinux_node_setxattr(fd, ProtectionClass.attributeName, $0.baseAddress, count, 0) }
        }
    }

    private func admit(_ protectionClass: ProtectionClass, _ access: ProtectedAccess, _ caller: Caller,
                       _ operation: StaticString, _ node: Inode, _ location: Location) throws(Errno) {
        guard case .deny(let denial) = ProtectionPolicy.decide(protectionClass, protection.current, access) else { return }
        record(caller, operation, node, location)
        throw Errno(denial.errno)
    }

    private func record(_ caller: Caller, _ operation: StaticString, _ node: Inode, _ location: Location) {
        audit.record(pid: caller.pid, uid: caller.kernelUID, operation: "\(operation)", paths: [inodes.path(of: node)],
                     areas: [location.area], denial: .protectedDataUnavailable)
    }
}
