import CLinux
import ContainerPolicy
import Glibc

extension Store {
    /// The state folder's file naming the container's default protection class.
    static let protectionFile = Array(name: "protection")

    /// The class of every node without its own `user.containerfs.protection` (SPEC §11):
    /// what `create --protection` recorded, iOS's default otherwise (a store made before
    /// classes existed; a file that names no class keeps the store from opening).
    public var defaultProtection: ProtectionClass {
        Self.readDefaultProtection(stateFD: stateFD) ?? ProtectionClass.containerDefault
    }

    /// Whether the protection file is there but names no class.
    static func defaultProtectionIsDamaged(stateFD: Int32) -> Bool {
        stateFileIsDamaged(stateFD, protectionFile) { readDefaultProtection(stateFD: stateFD) }
    }

    static func readDefaultProtection(stateFD: Int32) -> ProtectionClass? {
        // readFile: a FIFO planted there must not block the daemon or the command.
        guard var value = try? readFile(at: stateFD, protectionFile, limit: smallStateFileLimit), !value.isEmpty else { return nil }
        if value.last == UInt8(ascii: "\n") { value.removeLast() }
        return ProtectionClass(value: value)
    }

    /// Records `protection` as the default class of the store whose state folder is
    /// `stateFD` (written aside, then renamed into place). Used while creating a store.
    public static func writeDefaultProtection(_ protection: ProtectionClass, stateFD: Int32) throws(Errno) {
        let aside = protectionFile + Array(".new".utf8)
        let fd = try withCName(aside) { (name) throws(Errno) in
            try sys { openat(stateFD, name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0o644) }
        }
        let text = Array((protection.rawValue + "\n").utf8)
        let written = text.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        let error = Errno.current
        close(fd)
        guard written == text.count else { throw written < 0 ? error : Errno(EIO) }
        try withCName(aside) { (from) throws(Errno) in
            try withCName(protectionFile) { (to) throws(Errno) in _ = try sys { renameat(stateFD, from, stateFD, to) } }
        }
    }
}

/// The device state of a live mount (SPEC §11), switched through the control socket
/// (`ControlChannel`): `containerfs lock`, `unlock` and `status`.
///
/// Protocol: one message, a NUL byte (which no path holds) and the command's name; the
/// daemon answers with the state after the command (a `DeviceState` raw value).
public enum DeviceControl {
    /// What a command asks the daemon.
    public enum Command: String, Sendable {
        case lock, unlock, status
    }

    /// The message for `command`.
    public static func message(_ command: Command) -> [UInt8] { [0] + Array(command.rawValue.utf8) }

    /// The command a message names, if it is one (a path message never starts with NUL).
    public static func command(in message: some Collection<UInt8>) -> Command? {
        guard message.first == 0 else { return nil }
        return Command(rawValue: String(decoding: message.dropFirst(), as: UTF8.self))
    }

    /// The state of the mount of `store` and who serves it.
    public struct Status: Sendable {
        public var state: DeviceState
        public var mountpoint: String
        public var daemonPID: Int32
    }

    /// Sends `command` to the daemon serving `store`; one clear line when there is none.
    public static func send(_ command: Command, to store: Store) throws(UserError) -> Status {
        guard let holder = MountLock.holder(store) else {
            throw UserError("the container \(store.path) is not mounted: the device state belongs to a live mount (containerfs mount \(store.path) MOUNTPOINT, or run --locked)")
        }
        // A daemon from before device states reads paths until the end: it then answers "ok".
        let reply = try ControlChannel.converse(store, [message(command)], replyCapacity: 64, closingWrites: true)
        guard !reply.isEmpty, let state = DeviceState(rawValue: String(decoding: reply, as: UTF8.self)) else {
            throw UserError("the daemon of \(store.path) does not know device states: unmount it and mount it again with this containerfs")
        }
        return Status(state: state, mountpoint: holder.mountpoint, daemonPID: holder.pid)
    }
}

/// `containerfs protect`: sets the protection class of files and folders of a store from
/// outside any mount, as the system would.
public enum ProtectionSetting {
    /// Sets `protection` on the node at `path`, which must lie in a container's store (its
    /// folder or the store itself); the node is reached from the store's root with
    /// `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, never through a symlink.
    /// Returns the node's path in the container.
    @discardableResult
    public static func protect(_ rawPath: [UInt8], _ protection: ProtectionClass) throws(UserError) -> ContainerPath {
        try protect([rawPath], protection)[0]
    }

    /// Sets `protection` on each of `rawPaths`, as `protect(_:_:)`, after every one was
    /// found and checked: a bad path leaves every node as it was (SPEC §9).
    @discardableResult
    public static func protect(_ rawPaths: [[UInt8]], _ protection: ProtectionClass) throws(UserError) -> [ContainerPath] {
        var nodes: [(fd: Int32, relative: ContainerPath, path: String)] = []
        defer { nodes.forEach { close($0.fd) } }
        for rawPath in rawPaths { nodes.append(try node(rawPath)) }
        let value = Array(protection.rawValue.utf8)
        // Each change asked for first: a node the user may not change (EACCES) leaves every
        // node as it was, as a missing one does.
        for node in nodes {
            let name = ProtectionClass.attributeName
            if let refusal = attributeChangeRefusal(present: { clinux_node_getxattr(node.fd, name, nil, 0) },
                                                    probe: { flags in value.withUnsafeBytes { clinux_node_setxattr(node.fd, name, $0.baseAddress, $0.count, flags) } }) {
                throw UserError("cannot set the protection class of \(node.path): \(refusal); nothing was changed: leave it out, or have its owner (or root) set it")
            }
        }
        for node in nodes {
            guard value.withUnsafeBytes({ clinux_node_setxattr(node.fd, ProtectionClass.attributeName, $0.baseAddress, $0.count, 0) }) == 0 else {
                throw UserError.failed("cannot set the protection class of \(node.path)", Errno.current)
            }
        }
        return nodes.map(\.relative)
    }

    /// The file or folder of a store's data at `rawPath`, opened (`O_PATH`) beneath the
    /// store's root, with its path in the container and its printable name.
    private static func node(_ rawPath: [UInt8]) throws(UserError) -> (fd: Int32, relative: ContainerPath, path: String) {
        // Names are bytes (SPEC §2): one an app made that is not UTF-8 is named as it is.
        let path = ContainerPath.printable(rawPath)
        let (store, relative) = try locate(rawPath, shown: path)
        let location = store.layout.location(of: relative)
        switch location.area {
        case .bundle: throw UserError("\(path) is in the app bundle, which holds no data to protect: name a file or folder of Documents, Library or tmp")
        case .structure where location == .hidden || location == .foreign || location == .root:
            throw UserError("\(path) is not part of the container's data: name a file or folder of Documents, Library or tmp")
        default: break
        }
        let fd = relative.components.isEmpty ? -1
            : withCName(relative.bytes) { clinux_open_beneath(store.rootFD, $0, clinux_O_PATH | O_NOFOLLOW | O_CLOEXEC, 0) }
        guard fd >= 0 else {
            throw UserError("cannot open \(path) inside \(store.path) (\(Errno.current)): name an existing file or folder, not a symlink; nothing was changed")
        }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG || info.st_mode & S_IFMT == S_IFDIR else {
            close(fd)
            throw UserError("\(path) is neither a file nor a folder: only those hold a protection class")
        }
        return (fd, relative, path)
    }

    /// The store `path` lies in, and its path in the container: the nearest folder up from
    /// `path`'s parent (symlinks resolved) that holds a store's state folder.
    private static func locate(_ rawPath: [UInt8], shown path: String) throws(UserError) -> (Store, ContainerPath) {
        var bytes = rawPath
        while bytes.count > 1, bytes.last == UInt8(ascii: "/") { bytes.removeLast() }
        let slash = bytes.lastIndex(of: UInt8(ascii: "/"))
        let parent = slash.map { $0 == 0 ? [UInt8(ascii: "/")] : Array(bytes[..<$0]) } ?? [UInt8(ascii: ".")]
        let leaf = slash.map { Array(bytes[($0 + 1)...]) } ?? bytes
        guard let resolved = withCName(parent, { realpath($0, nil) }) else {
            throw UserError("no folder \(ContainerPath.printable(parent)) (\(Errno.current)): name a file or folder inside a container's store")
        }
        defer { free(resolved) }
        var folder = Array(UnsafeRawBufferPointer(start: resolved, count: strlen(resolved)))
        var below: [[UInt8]] = leaf == Array(".".utf8) ? [] : [leaf]
        while true {
            let candidate = String(decoding: folder, as: UTF8.self)
            if let store = try? Store.open(candidate, changing: false) {
                guard let relative = ContainerPath(bytes: below.joined(separator: [UInt8(ascii: "/")])) else {
                    throw UserError("\(path) names '..': name the file or folder directly")
                }
                return (store, relative)
            }
            guard folder.count > 1, let slash = folder.lastIndex(of: UInt8(ascii: "/")) else {
                throw UserError("\(path) is not inside a container's store: name a file or folder of a store made with 'containerfs create'")
            }
            below.insert(Array(folder[(slash + 1)...]), at: 0)
            folder = slash == 0 ? [UInt8(ascii: "/")] : Array(folder[..<slash])
        }
    }
}
