import ContainerPolicy
import Glibc

/// The socket in the state folder through which containerfs commands ask a running daemon
/// to make the kernel forget what it cached about paths they changed in the store
/// (delivery into the Inbox, purge of a mounted container's caches).
///
/// Protocol (`SOCK_SEQPACKET`): one message per path, relative to the container's root,
/// as bytes; an empty message ends the batch; the daemon answers `ok N` once the kernel
/// has been told, N being the requests it has served through io_uring so far (0 without
/// rings; an empty batch only asks for it). A message that starts with a zero byte is a
/// command instead of a path: `capacityCommand` makes the daemon read the store's capacity
/// again; `DeviceControl`'s lock, unlock and status come alone and are answered with the
/// device state instead; `requestsCommand` comes alone and is answered with the counts of
/// requests served. Only the daemon's user (and root) can connect: the state folder is 0700.
public enum ControlChannel {
    public static let socketName = Array(name: "control.sock")
    /// The message that makes the daemon read `.containerfs/capacity` again.
    public static let capacityCommand: [UInt8] = [0] + Array("capacity".utf8)

    /// The socket's address, reached through the state folder's descriptor: a store's own
    /// path may be longer than the 108 bytes a socket address holds.
    public static func address(stateFD: Int32) -> sockaddr_un {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let path = Array("/proc/self/fd/\(stateFD)/".utf8) + socketName + [0]
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: path.prefix(raw.count))
        }
        return address
    }

    /// Tells the daemon serving `store`, if any, that `paths` changed behind the mount.
    /// Returns false when no daemon is running (then nothing is cached to forget).
    @discardableResult
    public static func invalidate(_ store: Store, _ paths: [ContainerPath]) throws(UserError) -> Bool {
        // The store changed: a daemon that ended meanwhile may have recorded its count
        // before the change (or never got this message): its summary goes.
        defer { Capacity.forgetSummary(stateFD: store.stateFD) }
        return try exchange(store, paths.map(\.bytes)) != nil
    }

    /// How many requests the daemon serving `store` has served through io_uring so far
    /// (0 when it serves none from rings); nil when no daemon is running.
    public static func requestsServedThroughRings(_ store: Store) throws(UserError) -> UInt64? {
        try exchange(store, [])
    }

    /// The message that makes the daemon count the store again (a walk, and the files
    /// unlinked but still open, which a walk cannot see).
    public static let recountCommand: [UInt8] = [0] + Array("recount".utf8)

    /// Makes the daemon serving `store` count the space used afresh; returns its count, or
    /// nil when no daemon is running or the container has no capacity.
    public static func recount(_ store: Store) throws(UserError) -> Int64? {
        guard MountLock.holder(store) != nil else { return nil }
        return try reply(store, [recountCommand])?.used
    }

    /// Tells the daemon serving `store`, if any, that its capacity changed (SPEC §10): it
    /// takes effect at the next write. Returns false when no daemon is running.
    @discardableResult
    public static func capacityChanged(_ store: Store) throws(UserError) -> Bool {
        try exchange(store, [capacityCommand]) != nil
    }

    /// The message that makes a `power-loss` daemon drop everything not durable
    /// (docs/power-loss.md); answered, alone, with `cut FILES BYTES NAMES UNTRACKED`, or
    /// `not power-loss` when the mount does not track durability.
    public static let powerCutCommand: [UInt8] = [0] + Array("power-cut".utf8)

    /// Cuts the power of the mount of `store`: returns the daemon's answer after `cut `
    /// (`FILES BYTES NAMES UNTRACKED`). Fails when nothing serves the store or its mount
    /// does not track durability.
    public static func powerCut(_ store: Store) throws(UserError) -> String {
        guard MountLock.holder(store) != nil else {
            throw UserError("store \(store.path) is not mounted: a power cut needs a live mount with -o power-loss; mount it with 'containerfs mount \(store.path) MOUNTPOINT -o power-loss'")
        }
        let reply = try converse(store, [powerCutCommand], replyCapacity: 128)
        let text = String(decoding: reply, as: UTF8.self)
        if text.hasPrefix("cut ") { return String(text.dropFirst(4)) }
        if text == "not power-loss" {
            throw UserError("the mount of \(store.path) does not track durability: mount it with -o power-loss")
        }
        throw UserError("the daemon of \(store.path) did not confirm the power cut")
    }

    /// The message that asks a daemon mounted with `-o count-requests` how many requests of
    /// each kind it has served; answered, alone, with `requests NAME=COUNT ...` (the kinds
    /// served at least once, named as the kernel names them: `LOOKUP`, `CREATE`), or
    /// `requests off` when the mount does not count.
    public static let requestsCommand: [UInt8] = [0] + Array("requests".utf8)

    /// The requests the daemon serving `store` has served so far, by kind; nil when it
    /// does not count them (mounted without `-o count-requests`).
    public static func requestCounts(_ store: Store) throws(UserError) -> [String: UInt64]? {
        guard MountLock.holder(store) != nil else {
            throw UserError("store \(store.path) is not mounted: its daemon counts the requests; mount it with 'containerfs mount \(store.path) MOUNTPOINT -o count-requests'")
        }
        let reply = try converse(store, [requestsCommand], replyCapacity: 4096)
        let words = String(decoding: reply, as: UTF8.self).split(separator: " ")
        guard words.first == "requests" else { throw UserError("the daemon of \(store.path) did not answer with its request counts") }
        if words.dropFirst().first == "off" { return nil }
        var counts: [String: UInt64] = [:]
        for word in words.dropFirst() {
            let parts = word.split(separator: "=")
            guard parts.count == 2, let value = UInt64(parts[1]) else {
                throw UserError("the daemon of \(store.path) answered with a bad request count '\(word)'")
            }
            counts[String(parts[0])] = value
        }
        return counts
    }

    /// Sends `messages` and the end of the batch; returns the count the daemon answers
    /// with, or nil when no daemon is running.
    private static func exchange(_ store: Store, _ messages: [[UInt8]]) throws(UserError) -> UInt64? {
        try reply(store, messages)?.served
    }

    /// As `exchange`, with the whole answer: `ok SERVED [USED]`.
    private static func reply(_ store: Store, _ messages: [[UInt8]]) throws(UserError) -> (served: UInt64, used: Int64?)? {
        guard MountLock.holder(store) != nil else { return nil }
        let reply = try converse(store, messages + [ContainerPath.root.bytes], replyCapacity: 32)
        let words = reply.count > 3 && reply.prefix(3).elementsEqual("ok ".utf8) ? reply.dropFirst(3).split(separator: UInt8(ascii: " ")) : []
        guard let first = words.first, let served = UInt64(String(decoding: first, as: UTF8.self)) else {
            throw UserError("the daemon of \(store.path) did not confirm the change")
        }
        return (served, words.dropFirst().first.flatMap { Int64(String(decoding: $0, as: UTF8.self)) })
    }

    /// Connects to the daemon serving `store`, sends `messages` one by one and returns its
    /// one answer (at most `replyCapacity` bytes). `closingWrites`: the daemon learns the
    /// end of the batch from the closed write side instead of an empty message.
    static func converse(_ store: Store, _ messages: [[UInt8]], replyCapacity: Int, closingWrites: Bool = false) throws(UserError) -> [UInt8] {
        let fd = socket(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else {
            let error = Errno.current
            throw UserError("cannot reach the daemon of \(store.path): \(error); \(error.advice ?? "check that it runs with 'containerfs status \(store.path)', and try again")")
        }
        defer { close(fd) }
        // The socket is in the store, whose owner could serve one that never answers in the
        // daemon's place: root's command gives up rather than wait for it forever.
        var timeout = timeval(tv_sec: answerSeconds, tv_usec: 0)
        for option in [SO_RCVTIMEO, SO_SNDTIMEO] {
            setsockopt(fd, SOL_SOCKET, option, &timeout, socklen_t(MemoryLayout<timeval>.size))
        }
        var address = address(stateFD: store.stateFD)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard connected == 0 else {
            throw UserError("the container \(store.path) is mounted but its daemon does not answer (\(Errno.current)): unmount and mount it again")
        }
        for bytes in messages {
            let sent = bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard sent == bytes.count else {
                throw UserError("the daemon of \(store.path) stopped answering (\(Errno.current)): see 'containerfs status \(store.path)'; if it does not recover, unmount and mount it again")
            }
        }
        if closingWrites { shutdown(fd, Int32(SHUT_WR)) }
        var reply = [UInt8](repeating: 0, count: replyCapacity)
        let count = reply.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        if count < 0, errno == EAGAIN || errno == EWOULDBLOCK {
            throw UserError("the daemon of \(store.path) did not answer within \(answerSeconds) s: if its mount is stuck, detach it with 'containerfs unmount -z MOUNTPOINT'")
        }
        return Array(reply.prefix(max(0, count)))
    }

    /// How long a daemon may take to answer: a recount walks the whole store, which takes
    /// seconds for a million files. `CONTAINERFS_TEST_CONTROL_TIMEOUT` shortens it for tests.
    static let answerSeconds: Int = {
        guard let text = getenv("CONTAINERFS_TEST_CONTROL_TIMEOUT"), let seconds = Int(String(cString: text)), seconds > 0 else { return 300 }
        return min(seconds, 300)
    }()
}
