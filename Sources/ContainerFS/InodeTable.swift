import CFuse
import CLinux
import ContainerPolicy
import ContainerStore
import Glibc
import Synchronization

/// A node of the store that the kernel holds a reference to.
///
/// It keeps an `O_PATH` descriptor of the node, so every later operation reaches the
/// very same node without resolving a path again, and the node's location in the
/// container, so the policy is one table look-up away.
final class Inode: @unchecked Sendable {
    /// `O_PATH | O_NOFOLLOW` descriptor of the node in the store.
    let fd: Int32
    /// The node's identity in the store.
    let key: InodeKey
    /// The node's type bits (`S_IFMT`).
    let type: mode_t
    /// The node's passthrough backing id (0: none yet), registered by its first open and
    /// kept until the kernel forgets the node: the kernel wants one per node.
    let backingID = Mutex<Int32>(0)

    // Guarded by InodeTable.state's lock.
    /// How many times the kernel has been told of this node and not yet forgotten it.
    var lookups: UInt64 = 0
    /// The directory this node was last reached through; nil for the root.
    var parent: Inode?
    /// Its name in `parent`, as bytes.
    var name: [UInt8]
    /// Where it sits in the container.
    var location: Location

    init(fd: Int32, key: InodeKey, type: mode_t, parent: Inode?, name: [UInt8], location: Location) {
        self.fd = fd
        self.key = key
        self.type = type
        self.parent = parent
        self.name = name
        self.location = location
    }

    deinit {
        let id = backingID.withLock { $0 }
        if id > 0 { cfuse_backing_close(id) }
        close(fd)
    }

    var isDirectory: Bool { type == S_IFDIR }
    var isSymlink: Bool { type == S_IFLNK }
}

/// The store's identity of a node: device and inode number.
struct InodeKey: Hashable {
    let device: UInt64
    let number: UInt64

    init(_ info: stat) {
        device = UInt64(info.st_dev)
        number = UInt64(info.st_ino)
    }
}

/// Every node the kernel knows, by identity, and the map from FUSE inode numbers to them.
///
/// A node's FUSE inode number is the address of its `Inode` object, as in libfuse's
/// passthrough_hp: no look-up on the hot path. The table holds the strong reference
/// that keeps the object alive until the kernel forgets the node.
///
/// Lock order: this table's lock is a leaf; nothing else is taken while it is held.
final class InodeTable: @unchecked Sendable {
    let root: Inode
    private let layout: ContainerLayout
    private let state = Mutex<[InodeKey: Inode]>([:])

    init(rootFD: Int32, layout: ContainerLayout) throws(Errno) {
        var info = stat()
        try sys { fstatat(rootFD, "", &info, clinux_AT_EMPTY_PATH) }
        let fd = try sys { dup(rootFD) }
        root = Inode(fd: fd, key: InodeKey(info), type: S_IFDIR, parent: nil, name: [], location: .root)
        root.lookups = 1
        self.layout = layout
    }

    /// The node the kernel means by `ino`.
    @inline(__always)
    func inode(_ ino: fuse_ino_t) -> Inode {
        if ino == FUSE_ROOT_ID { return root }
        return Unmanaged<Inode>.fromOpaque(UnsafeRawPointer(bitPattern: UInt(ino))!).takeUnretainedValue()
    }

    /// The number the kernel will know `inode` by.
    @inline(__always)
    func ino(_ inode: Inode) -> fuse_ino_t {
        inode === root ? fuse_ino_t(FUSE_ROOT_ID) : fuse_ino_t(UInt(bitPattern: Unmanaged.passUnretained(inode).toOpaque()))
    }

    /// Records one more reference from the kernel to the node `fd` opens, found as `name`
    /// in `parent`. Takes ownership of `fd` (closing it when the node is already known).
    func remember(fd: Int32, info: stat, parent: Inode, name: [UInt8], location: Location) -> Inode {
        let key = InodeKey(info)
        let (node, isKnown) = state.withLock { nodes in
            if let node = nodes[key] {
                node.lookups += 1
                node.parent = parent
                node.name = name
                node.location = location
                return (node, true)
            }
            let node = Inode(fd: fd, key: key, type: info.st_mode & S_IFMT, parent: parent, name: name, location: location)
            node.lookups = 1
            nodes[key] = node
            return (node, false)
        }
        if isKnown { close(fd) }
        return node
    }

    /// Drops `count` of the kernel's references to `ino`; the node goes when none are left.
    func forget(_ ino: fuse_ino_t, _ count: UInt64) {
        if ino == FUSE_ROOT_ID { return }
        let node = inode(ino)
        // Released after the lock, so the descriptor is closed outside it.
        var released: Inode?
        state.withLock { nodes in
            node.lookups -= min(count, node.lookups)
            if node.lookups == 0, nodes[node.key] === node {
                released = nodes.removeValue(forKey: node.key)
                node.parent = nil
            }
        }
        _ = released
    }

    /// The node's current location.
    @inline(__always)
    func location(of node: Inode) -> Location {
        state.withLock { _ in node.location }
    }

    /// The node known by `key`, if the kernel holds it.
    func node(_ key: InodeKey) -> Inode? {
        state.withLock { $0[key] }
    }

    /// Records that `node` is now `name` in `parent`. When a directory changes area, every
    /// node below it does too, so all known nodes are classified again.
    func moved(_ node: Inode, to parent: Inode, name: [UInt8]) {
        state.withLock { nodes in
            let old = node.location
            node.parent = parent
            node.name = name
            node.location = layout.child(name, of: parent.location)
            guard node.isDirectory, node.location != old else { return }
            for other in nodes.values where other !== node {
                other.location = classify(other)
            }
        }
    }

    /// A node's location from its chain of parents; called with the lock held.
    private func classify(_ node: Inode) -> Location {
        guard let parent = node.parent else { return node.location }
        return layout.child(node.name, of: classify(parent))
    }

    /// The node's path in the container, for the audit log.
    func path(of node: Inode) -> ContainerPath {
        state.withLock { _ in
            var components: [[UInt8]] = []
            var current: Inode? = node
            while let each = current, each !== root {
                components.append(each.name)
                current = each.parent
            }
            return ContainerPath(components: components.reversed())
        }
    }
}
