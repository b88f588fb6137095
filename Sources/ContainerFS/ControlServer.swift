import CFuse
import ContainerPolicy
import ContainerStore
import Foundation
import Glibc
import Synchronization

/// Serves the state folder's control socket (see `ControlChannel`): for each path a
/// containerfs command changed in the store, tells the kernel to drop its cached entry
/// and the node's cached attributes and pages.
final class ControlServer: @unchecked Sendable {
    private let listener: Int32
    private let fileSystem: FileSystem
    private let session: OpaquePointer
    private let store: Store

    init(store: Store, fileSystem: FileSystem, session: OpaquePointer) throws(Errno) {
        self.store = store
        self.fileSystem = fileSystem
        self.session = session
        _ = withCName(ControlChannel.socketName) { unlinkat(store.stateFD, $0, 0) }
        listener = try sys { socket(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0) }
        var address = ControlChannel.address(stateFD: store.stateFD)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0, listen(listener, 8) == 0 else {
            let error = Errno.current
            close(listener)
            throw error
        }
        let thread = Thread { [self] in serve() }
        thread.name = "control"
        thread.start()
    }

    /// Clients served at once at most; more wait in the listen queue.
    static let maxClients = 64
    /// How long a client may stay silent before it is dropped, and how long it is served at
    /// most, so that clients that keep talking cannot hold every place either.
    static let clientTimeout = timeval(tv_sec: 10, tv_usec: 0)
    static let clientDeadline: Double = 60
    private let clients = Mutex(0)
    /// What clients ask is done one at a time, as when one client was served at a time;
    /// only their waiting overlaps.
    private let acting = Mutex(())

    /// Each client on a thread of its own, so that one that connects and says nothing holds
    /// up nobody (`status`, `lock` and `capacity` answer meanwhile).
    private func serve() {
        while true {
            let client = accept(listener, nil, nil)
            if client < 0 {
                switch errno {
                case EINTR, ECONNABORTED: continue
                case EMFILE, ENFILE, ENOBUFS, ENOMEM: usleep(100_000); continue   // out of descriptors for now
                default: return
                }
            }
            _ = fcntl(client, F_SETFD, FD_CLOEXEC)
            var timeout = Self.clientTimeout
            _ = setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            _ = setsockopt(client, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            while clients.withLock({ count in
                guard count < Self.maxClients else { return true }
                count += 1
                return false
            }) { usleep(10_000) }
            let thread = Thread { [self] in
                handle(client)
                close(client)
                clients.withLock { $0 -= 1 }
            }
            thread.name = "control client"
            thread.start()
        }
    }

    /// ` NAME=COUNT` for each kind of request served at least once (`-o count-requests`).
    private static func requestCounts() -> String {
        var text = ""
        for opcode in UInt32(0)..<64 {
            let count = cfuse_requests_counted(opcode)
            if count > 0, let name = cfuse_opcode_name(opcode) { text += " \(String(cString: name))=\(count)" }
        }
        return text
    }

    /// At a clean unmount: the socket's name goes, so that no command finds a socket nobody serves.
    func remove() {
        _ = withCName(ControlChannel.socketName) { unlinkat(store.stateFD, $0, 0) }
    }

    private func handle(_ client: Int32) {
        var buffer = [UInt8](repeating: 0, count: Int(PATH_MAX) + 1)
        var changedBehind = false
        let start = monotonicSeconds()
        while monotonicSeconds() - start < Self.clientDeadline {
            let count = buffer.withUnsafeMutableBytes { recv(client, $0.baseAddress, $0.count, 0) }
            if count < 0, errno == EINTR { continue }
            if count <= 0 { break }
            if buffer[0..<count].elementsEqual(ControlChannel.capacityCommand) {
                acting.withLock { _ in fileSystem.space.reload(store) }
                continue
            }
            if buffer[0..<count].elementsEqual(ControlChannel.recountCommand) {
                changedBehind = true
                continue
            }
            if buffer[0..<count].elementsEqual(ControlChannel.powerCutCommand) {
                // The cut changed the store behind the count of a container with a capacity.
                let report = acting.withLock { _ in
                    let report = fileSystem.powerCut(session: session)
                    if report != nil { fileSystem.recount() }
                    return report
                }
                let answer = report.map { "cut \($0.wire)" } ?? "not power-loss"
                _ = answer.withCString { send(client, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
                return
            }
            if buffer[0..<count].elementsEqual(ControlChannel.requestsCommand) {
                let answer = cfuse_counting_requests() ? "requests" + Self.requestCounts() : "requests off"
                _ = answer.withCString { send(client, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
                return
            }
            if let command = DeviceControl.command(in: buffer[0..<count]) {
                // lock, unlock, status (SPEC §11): answered with the state, nothing else follows.
                let state = acting.withLock { _ in
                    command == .status ? fileSystem.protection.current
                        : fileSystem.protection.switchState(locked: command == .lock, session: session)
                }
                _ = state.rawValue.withCString { send(client, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
                return
            }
            guard let path = ContainerPath(bytes: buffer[0..<count]) else { continue }
            acting.withLock { _ in fileSystem.invalidate(path, session: session) }
            changedBehind = true
        }
        // A delivery or a purge changed the store behind the mount: count it again.
        if changedBehind { acting.withLock { _ in fileSystem.recount() } }
        // `ok`, then how many requests came through io_uring so far (`ok 0` without rings):
        // the test suite's io_uring pass checks from it that the rings served its mounts;
        // then, with a capacity, the bytes the daemon counts as used.
        let used = fileSystem.space.isActive ? " \(fileSystem.space.used)" : ""
        let reply = Array("ok \(cfuse_uring_requests())\(used)".utf8)
        _ = reply.withUnsafeBytes { send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }
}

private func monotonicSeconds() -> Double {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
}

extension FileSystem {
    /// Makes the kernel forget `path`'s entry in its parent and the node's attributes and
    /// pages, as far as the kernel knows them: a parent it never looked up has nothing cached.
    func invalidate(_ path: ContainerPath, session: OpaquePointer) {
        guard let name = path.components.last else { return }
        var directory = inodes.root
        for component in path.components.dropLast() {
            var info = stat()
            guard (try? inodes.withDescriptor(directory, { fd in withCName(component) { fstatat(fd, $0, &info, AT_SYMLINK_NOFOLLOW) } })) == 0,
                  let next = inodes.node(InodeKey(info)) else { return }
            directory = next
        }
        var info = stat()
        let found = try? inodes.withDescriptor(directory) { fd in withCName(name) { fstatat(fd, $0, &info, AT_SYMLINK_NOFOLLOW) } }
        let node = found == 0 ? inodes.node(InodeKey(info)) : nil
        _ = name.withUnsafeBufferPointer { bytes in
            bytes.withMemoryRebound(to: CChar.self) {
                fuse_lowlevel_notify_inval_entry(session, inodes.ino(directory), $0.baseAddress, name.count)
            }
        }
        if let node { _ = fuse_lowlevel_notify_inval_inode(session, inodes.ino(node), 0, 0) }
        // The directory's attributes and the listing the kernel keeps (cache_readdir): the
        // entry alone is not enough when the kernel never looked the name up.
        _ = fuse_lowlevel_notify_inval_inode(session, inodes.ino(directory), 0, 0)
    }
}
