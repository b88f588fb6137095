import CFuse
import CLinux
import ContainerPolicy
import ContainerStore
import Glibc
import Synchronization

/// A node of the store that the kernel holds a reference to.
///
/// It holds no descriptor of its own: the table lends one (`InodeTable.withDescriptor`),
/// from a bounded cache of `O_PATH` descriptors, reopening a cold node by its file handle
/// (a root daemon) or from its parent's descriptor and its name, checked against the
/// node's store identity. Its location in the container makes the policy one read away.
final class Inode: @unchecked Sendable {
    /// The number the kernel knows the node by: opaque, never an address.
    let id: fuse_ino_t
    /// The node's identity in the store.
    let key: InodeKey
    /// The node's type bits (`S_IFMT`).
    let type: mode_t
    /// The node's passthrough backing id (0: none yet), registered by its first open and
    /// kept while the kernel knows the node and the node has a name: the kernel wants one
    /// per node.
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
    /// Its `O_PATH | O_NOFOLLOW` descriptor while cached (or pinned), else -1.
    var descriptor: Int32 = -1
    /// Requests using `descriptor` right now: it is not closed under them.
    var users: Int32 = 0
    /// Open files (FUSE file handles) of this node.
    var openFiles: Int32 = 0
    /// Kept open whatever the cache's size: the root, a node whose recorded name was
    /// removed while it has other names or open files.
    var pinned = false
    /// Pins made by removals of its names (`InodeTable.removing`): a refused removal
    /// undoes its own, and unpins the node when no other stands (`refused`).
    var removalPins: Int32 = 0
    /// Pinned only because its recorded name was removed while it has other names
    /// (`InodeTable.removing`): counted in `namePins`, which is bounded.
    var pinnedForName = false
    /// Its last name was removed (`nlink` 0): the descriptor goes once no open file needs it.
    var unlinked = false
    /// Its last name went to an unlink or to a rename that replaced it: the descriptor
    /// stays until the kernel forgets the node (`InodeTable.removed`).
    var keptUntilForgotten = false
    /// Counted by the capacity as an open file while kept (`InodeTable.holdKept`).
    var heldAsOpen = false
    /// Still in the table; a node the kernel forgot closes its descriptor when unused.
    var inTable = true
    /// Its file handle (`name_to_handle_at`), taken when first evicted by a root daemon.
    var handle: [UInt8]?
    // The cache's recency list, most recent first.
    unowned(unsafe) var newer: Inode?
    unowned(unsafe) var older: Inode?
    var isCached = false
    // The known nodes below a directory, so that a move reclassifies only its subtree.
    unowned(unsafe) var firstChild: Inode?
    unowned(unsafe) var nextSibling: Inode?
    unowned(unsafe) var previousSibling: Inode?

    init(id: fuse_ino_t, key: InodeKey, type: mode_t, parent: Inode?, name: [UInt8], location: Location) {
        self.id = id
        self.key = key
        self.type = type
        self.parent = parent
        self.name = name
        self.location = location
    }

    deinit {
        let id = backingID.withLock { $0 }
        if id > 0 { cfuse_backing_close(id) }
        if descriptor >= 0 { Glibc.close(descriptor) }
    }

    var isDirectory: Bool { type == S_IFDIR }

    /// Whether its descriptor and backing file may go: it has no name, no open file needs
    /// them, and if it is kept until forgotten, the kernel has forgotten it. Under the table's lock.
    var mayLetGo: Bool { unlinked && openFiles == 0 && !(keptUntilForgotten && inTable) }
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

/// Every node the kernel knows, by identity and by FUSE node id, and the bounded cache
/// of their descriptors.
///
/// Node ids are small numbers handed out from a free list and read without a lock from a
/// two-level slot table, so the hot path costs two loads, and the kernel (and anyone
/// calling `name_to_handle_at` through the mount) learns nothing of the daemon's memory.
/// A node stays in the table while the kernel knows it or while a known node sits below
/// it (its parent chain is how an ordinary user's daemon reopens a cold node).
///
/// Lock order: `moves` before `state`; `state` is a leaf, and no system call is made
/// under it but a root daemon's `name_to_handle_at` of a node it evicts.
final class InodeTable: @unchecked Sendable {
    let root: Inode
    private let layout: ContainerLayout
    private let state: Mutex<State>
    /// Serializes reclassification walks, which take `state` in short batches.
    private let moves = Mutex<Void>(())
    /// How cold nodes are opened again.
    let reopening: Reopening
    /// The most descriptors the cache keeps open (pinned ones and those in use aside).
    let capacity: Int
    /// The most nodes pinned only for a removed recorded name (`removing`): a quarter of
    /// the cache a descriptor limit gives, whatever the test setting.
    let namePinLimit: Int
    private let slots: NodeSlots
    /// A plain (not `O_PATH`) descriptor of the store's root: `open_by_handle_at` wants one.
    private let mountFD: Int32

    /// How a node whose descriptor was evicted is opened again.
    enum Reopening: Equatable {
        /// `open_by_handle_at` of the node's file handle (needs `CAP_DAC_READ_SEARCH`).
        case byHandle
        /// `openat(parent, name, O_PATH | O_NOFOLLOW)`, checked against the node's identity.
        case byName
    }

    private struct State {
        var nodes: [InodeKey: Inode] = [:]
        /// Nodes the kernel still knows whose store identity now names another file (the
        /// store freed the file and reused its inode number): kept alive, by id, until the
        /// kernel forgets them, since the slots do not retain them.
        var displaced: [fuse_ino_t: Inode] = [:]
        var freeIDs: [fuse_ino_t] = []
        var nextID: fuse_ino_t = fuse_ino_t(FUSE_ROOT_ID) + 1
        /// Most and least recently used cached nodes.
        var newest: Inode?
        var oldest: Inode?
        var cached = 0
        /// Nodes pinned only for a removed recorded name (`Inode.pinnedForName`).
        var namePins = 0
    }

    /// - Parameters:
    ///   - capacity: descriptors to cache; nil: half the descriptor limit.
    ///   - reopening: nil: by handle when the daemon may, else by name.
    init(rootFD: Int32, layout: ContainerLayout, capacity: Int? = nil, reopening: Reopening? = nil) throws(Errno) {
        var info = stat()
        try sys { fstatat(rootFD, "", &info, clinux_AT_EMPTY_PATH) }
        let fd = try sys { dup(rootFD) }
        root = Inode(id: fuse_ino_t(FUSE_ROOT_ID), key: InodeKey(info), type: S_IFDIR, parent: nil, name: [], location: .root)
        root.lookups = 1
        root.descriptor = fd
        root.pinned = true
        self.layout = layout
        var nodes = State()
        nodes.nodes[root.key] = root
        state = Mutex(nodes)
        slots = NodeSlots()
        mountFD = clinux_reopen(fd, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        self.capacity = max(capacity ?? Self.testCapacity ?? Self.defaultCapacity(), 1)
        namePinLimit = max(Self.defaultCapacity() / 4, 1)
        self.reopening = reopening ?? Self.testReopening ?? (Self.handlesWork(mountFD) ? .byHandle : .byName)
    }

    /// `CONTAINERFS_TEST_NODE_CACHE=N`: a cache of N descriptors, so that a test suite
    /// runs through the reopen path. For tests only; not a documented setting.
    private static var testCapacity: Int? {
        getenv("CONTAINERFS_TEST_NODE_CACHE").flatMap { Int(String(cString: $0)) }.flatMap { $0 > 0 ? $0 : nil }
    }

    /// `CONTAINERFS_TEST_NODE_REOPEN=names`: a root daemon reopens by name as an ordinary
    /// user's does. For tests only.
    private static var testReopening: Reopening? {
        getenv("CONTAINERFS_TEST_NODE_REOPEN").flatMap { String(cString: $0) == "names" ? .byName : nil }
    }

    /// Half of the descriptor limit: the other half is for open files and folders.
    private static func defaultCapacity() -> Int {
        var limit = rlimit()
        guard getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 512 }
        return Int(clamping: min(limit.rlim_cur, 1 << 22) / 2)
    }

    /// Whether this daemon can open nodes by file handle in this store.
    private static func handlesWork(_ rootFD: Int32) -> Bool {
        guard rootFD >= 0 else { return false }
        var handle = [UInt8](repeating: 0, count: Int(clinux_MAX_HANDLE_SIZE))
        let length = clinux_node_handle(rootFD, &handle, Int32(handle.count))
        guard length > 0 else { return false }
        let fd = clinux_open_handle(rootFD, handle, length, clinux_O_PATH | O_CLOEXEC)
        guard fd >= 0 else { return false }
        Glibc.close(fd)
        return true
    }

    // MARK: Node ids

    /// The node the kernel means by `ino`; ESTALE for an id the table never gave out.
    @inline(__always)
    func inode(_ ino: fuse_ino_t) throws(Errno) -> Inode {
        if ino == FUSE_ROOT_ID { return root }
        guard let node = slots[ino] else { throw Errno(ESTALE) }
        return node
    }

    /// The number the kernel will know `inode` by.
    @inline(__always)
    func ino(_ inode: Inode) -> fuse_ino_t { inode.id }

    // MARK: Lookups and forgets

    /// Records one more reference from the kernel to the node `fd` opens, found as `name`
    /// in `parent`. Takes ownership of `fd` (closing it when the node already has one).
    func remember(fd: Int32, info: stat, parent: Inode, name: [UInt8]) -> Inode {
        // Whether the node has a name now, asked (outside the lock) only of a known node
        // whose last name went: a lookup that found the name just before its removal is
        // no new link, and taking it for one let go of a node kept until forgotten (the
        // capacity then counted a removed folder held for good).
        var linked: Bool?
        while true {
            if let node = remember(fd: fd, info: info, parent: parent, name: name, linked: linked) { return node }
            var now = stat()
            linked = fstat(fd, &now) == 0 && now.st_nlink > 0
        }
    }

    /// `remember`; nil when the node is known, unlinked, and `linked` not yet asked.
    private func remember(fd: Int32, info: stat, parent: Inode, name: [UInt8], linked: Bool?) -> Inode? {
        let key = InodeKey(info)
        var spare: [Int32] = []
        var dropped: [Inode] = []
        let node = state.withLock { s -> Inode? in
            // Computed here, from the parent's location now, so a reclassification walk
            // running meanwhile cannot leave this node behind.
            let location = layout.child(name, of: parent.location)
            if let node = s.nodes[key], !Self.isReused(node, as: info) {
                if node.unlinked, linked == nil { return nil }
                node.lookups += 1
                if node.unlinked, linked == true {
                    // Linked again (an O_TMPFILE file, or one deleted while open): it has a
                    // name to be reopened by.
                    node.unlinked = false
                    node.keptUntilForgotten = false
                    node.pinned = false
                    node.removalPins = 0
                    endNamePin(node, &s)
                    if node.descriptor >= 0 { install(node, node.descriptor, &s) }
                } else if node.pinnedForName {
                    // Found by a name again: it can be reopened by that one.
                    endNamePin(node, &s)
                    node.pinned = false
                    node.removalPins = 0
                    if node.descriptor >= 0 { install(node, node.descriptor, &s) }
                }
                if node.parent !== parent {
                    let old = node.parent
                    detach(node)
                    attach(node, to: parent)
                    if let old { dropped += retireIfUnused(old, &s, &spare) }
                }
                node.name = name
                node.location = location
                if node.descriptor < 0 { install(node, fd, &s) } else { spare.append(fd) }
                spare += evict(&s)
                return node
            }
            let id: fuse_ino_t
            if let free = s.freeIDs.popLast() { id = free } else {
                id = s.nextID
                s.nextID += 1
            }
            let node = Inode(id: id, key: key, type: info.st_mode & S_IFMT, parent: parent, name: name, location: location)
            node.lookups = 1
            if let old = s.nodes[key] { s.displaced[old.id] = old }
            s.nodes[key] = node
            attach(node, to: parent)
            slots.set(id, node)
            install(node, fd, &s)
            spare += evict(&s)
            return node
        }
        closeAll(spare)
        _ = dropped
        return node
    }

    /// Whether the file `info` describes is not `node`'s file but a new one that got its
    /// freed inode number: a node holding a descriptor keeps its file alive, so only a
    /// node without one, whose file lost its last name or whose type differs, can be.
    /// The kernel must get a new node id for it: it refuses a node that changes type.
    private static func isReused(_ node: Inode, as info: stat) -> Bool {
        node.type != info.st_mode & S_IFMT || (node.unlinked && node.descriptor < 0)
    }

    /// Drops `count` of the kernel's references to `ino`; the node goes when none are left
    /// and no known node sits below it.
    /// Returns what a removed node, kept until now, lets go of, for the caller
    /// to close, and whether the capacity held it as an open file.
    func forget(_ ino: fuse_ino_t, _ count: UInt64) -> (key: InodeKey, released: Released, held: Bool)? {
        guard ino != FUSE_ROOT_ID, let node = slots[ino] else { return nil }
        var spare: [Int32] = []
        // Released after the lock, so that descriptors are closed outside it.
        let (kept, held) = state.withLock { s -> (Int32, Bool) in
            node.lookups -= min(count, node.lookups)
            // A removed node, kept for the opens racing its removal (`removed`): its close
            // frees its blocks, which the closer's thread waits for, not this one. A removed
            // folder goes even while a known node still sits below it (a deleted file whose
            // `FORGET` another thread has yet to serve): no name leads through it any more,
            // and left to that node's retirement its close would never be counted.
            let kept = node.unlinked && node.lookups == 0 && node.users == 0 && node.openFiles == 0
                ? dropDescriptor(node, &s) : -1
            // Only the forget that lets it go ends the hold: one of a single lookup (the
            // kernel's answer to a revalidation that found another node) leaves it held.
            let held = kept >= 0 && node.heldAsOpen
            if kept >= 0 { node.heldAsOpen = false }
            _ = retireIfUnused(node, &s, &spare)
            return (kept, held)
        }
        closeAll(spare)
        guard kept >= 0 else { return nil }
        var info = stat()
        let bytes = fstat(kept, &info) == 0 ? UInt64(clamping: info.st_blocks) &* 512 : 0
        return (node.key, Released(descriptor: kept, backingID: takeBacking(node), bytes: bytes), held)
    }

    /// Whether `node`, which lost its last name, is kept until the kernel forgets it.
    func keeps(_ node: Inode) -> Bool {
        state.withLock { _ in node.keptUntilForgotten && node.inTable && node.descriptor >= 0 }
    }

    /// Marks `node`, about to lose a name to an unlink, an rmdir or a rename over it, as
    /// held by the capacity as an open file while the table keeps it; false when it will
    /// not be kept (a file not pinned) or is held already (two removals of it at once).
    func holdKept(_ node: Inode) -> Bool {
        state.withLock { _ in
            guard node.pinned || node.isDirectory, !node.heldAsOpen else { return false }
            node.heldAsOpen = true
            return true
        }
    }

    /// Undoes `holdKept`: the removal failed, or the node is not kept after all.
    func unholdKept(_ node: Inode) {
        state.withLock { _ in node.heldAsOpen = false }
    }

    /// Removes `node` and then each ancestor left with no reference and no child.
    private func retireIfUnused(_ node: Inode, _ s: inout State, _ spare: inout [Int32]) -> [Inode] {
        var dropped: [Inode] = []
        var current: Inode? = node
        while let each = current, each !== root, each.inTable, each.lookups == 0, each.firstChild == nil {
            if s.nodes[each.key] === each {
                s.nodes.removeValue(forKey: each.key)
            } else if s.displaced.removeValue(forKey: each.id) == nil {
                break
            }
            slots.set(each.id, nil)
            s.freeIDs.append(each.id)
            each.inTable = false
            endNamePin(each, &s)
            uncache(each, &s)
            if each.users == 0, each.descriptor >= 0 {
                spare.append(each.descriptor)
                each.descriptor = -1
            }
            current = each.parent
            detach(each)
            each.parent = nil
            dropped.append(each)
        }
        return dropped
    }

    // MARK: Descriptors

    /// Runs `body` with the node's `O_PATH` descriptor, reopening a cold node first; the
    /// descriptor stays open until `body` returns.
    @inline(__always) @discardableResult
    func withDescriptor<R>(_ node: Inode, _ body: (Int32) throws(Errno) -> R) throws(Errno) -> R {
        let fd = try acquire(node)
        defer { relinquish(node) }
        return try body(fd)
    }

    /// Runs `body` holding a use of the node's descriptor when one can be had (a cold node
    /// is opened again; when it cannot be, `body` runs without), so that the cache does not
    /// close it meanwhile.
    func holdingDescriptor<R>(_ node: Inode, _ body: () throws(Errno) -> R) throws(Errno) -> R {
        let held = (try? acquire(node)) != nil
        defer { if held { relinquish(node) } }
        return try body()
    }

    private func acquire(_ node: Inode) throws(Errno) -> Int32 {
        let cached = state.withLock { s -> Int32 in
            guard node.descriptor >= 0 else { return -1 }
            node.users += 1
            touch(node, &s)
            return node.descriptor
        }
        if cached >= 0 { return cached }
        return try reopen(node)
    }

    private func relinquish(_ node: Inode) {
        let fd = state.withLock { s -> Int32 in
            node.users -= 1
            guard node.users == 0, node.descriptor >= 0, !node.inTable || node.mayLetGo else { return -1 }
            return dropDescriptor(node, &s)
        }
        if fd >= 0 { Glibc.close(fd) }
    }

    /// Opens a cold node again; returns with one use of its descriptor held.
    private func reopen(_ node: Inode) throws(Errno) -> Int32 {
        if reopening == .byHandle, let handle = state.withLock({ _ in node.handle }) {
            let fd = try exhaustible { clinux_open_handle(mountFD, handle, Int32(handle.count), clinux_O_PATH | O_CLOEXEC) }
            return try adopt(node, fd)
        }
        var attempts = 0
        while true {
            do throws(Errno) {
                return try reopenByName(node)
            } catch {
                attempts += 1
                // A rename through the mount can change the name while it is being opened.
                guard error.code == ESTALE, attempts < 3 else { throw error }
            }
        }
    }

    /// Opens each cold node from the nearest cached ancestor down, by name, checking each
    /// is the node recorded (a single component with `O_NOFOLLOW`: no symlink is followed).
    private func reopenByName(_ node: Inode) throws(Errno) -> Int32 {
        var chain: [(Inode, [UInt8])] = []
        let top = state.withLock { s -> (Inode, Int32)? in
            var current = node
            while current.descriptor < 0 {
                // A node whose last name went has none to be found by: what has that name
                // now is another file, even with the same inode number, freed and reused.
                guard !current.unlinked, let parent = current.parent else { return nil }
                chain.append((current, current.name))
                current = parent
            }
            current.users += 1
            touch(current, &s)
            return (current, current.descriptor)
        }
        guard let top else { throw Errno(ESTALE) }
        var (parent, parentFD) = top
        for (child, name) in chain.reversed() {
            let opened = withCName(name) { openat(parentFD, $0, clinux_O_PATH | O_NOFOLLOW | O_CLOEXEC) }
            let error = Errno.current
            relinquish(parent)
            guard opened >= 0 else {
                if error.code == EMFILE || error.code == ENFILE { throw exhausted(error) }
                throw Errno(ESTALE)
            }
            parentFD = try adopt(child, opened)
            parent = child
        }
        return parentFD
    }

    /// Checks that `fd` opens `node` and caches it; returns with one use held.
    private func adopt(_ node: Inode, _ fd: Int32) throws(Errno) -> Int32 {
        var info = stat()
        guard fstatat(fd, "", &info, clinux_AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0, InodeKey(info) == node.key,
              info.st_mode & S_IFMT == node.type else {
            Glibc.close(fd)
            throw Errno(ESTALE)
        }
        var spare: [Int32] = []
        let descriptor = state.withLock { s -> Int32 in
            if node.descriptor >= 0 { spare.append(fd) } else { install(node, fd, &s) }
            node.users += 1
            spare += evict(&s)
            return node.descriptor
        }
        closeAll(spare)
        return descriptor
    }

    /// Gives `node` the descriptor `fd`, in the cache unless pinned or forgotten.
    private func install(_ node: Inode, _ fd: Int32, _ s: inout State) {
        node.descriptor = fd
        // Never twice in the list: a node linked again while cached (an open raced its
        // unlink, then a lookup found it) would corrupt the list and free a node still in it.
        uncache(node, &s)
        guard !node.pinned, node.inTable else { return }
        node.isCached = true
        node.older = s.newest
        node.newer = nil
        s.newest?.newer = node
        s.newest = node
        if s.oldest == nil { s.oldest = node }
        s.cached += 1
    }

    /// Marks `node` most recently used.
    @inline(__always)
    private func touch(_ node: Inode, _ s: inout State) {
        guard node.isCached, s.newest !== node else { return }
        uncache(node, &s)
        install(node, node.descriptor, &s)
    }

    private func uncache(_ node: Inode, _ s: inout State) {
        guard node.isCached else { return }
        node.newer?.older = node.older
        node.older?.newer = node.newer
        if s.newest === node { s.newest = node.older }
        if s.oldest === node { s.oldest = node.newer }
        node.newer = nil
        node.older = nil
        node.isCached = false
        s.cached -= 1
    }

    /// Takes the node's descriptor out of it and the cache; the caller closes it.
    private func dropDescriptor(_ node: Inode, _ s: inout State) -> Int32 {
        uncache(node, &s)
        let fd = node.descriptor
        node.descriptor = -1
        return fd
    }

    /// Takes the least recently used descriptors beyond the capacity; the caller closes
    /// them. A root daemon first records each one's file handle, to open it again.
    private func evict(_ s: inout State, keeping capacity: Int? = nil) -> [Int32] {
        let wanted = capacity ?? self.capacity
        var victims: [Int32] = []
        var skipped = 0
        while s.cached > wanted, let oldest = s.oldest, skipped <= s.cached {
            if oldest.users > 0 {
                // In use: its turn comes later.
                touch(oldest, &s)
                skipped += 1
                continue
            }
            if reopening == .byHandle, oldest.handle == nil, oldest.key.device == root.key.device {
                oldest.handle = Self.handle(of: oldest.descriptor)
            }
            victims.append(dropDescriptor(oldest, &s))
        }
        return victims
    }

    /// The file handle of the node `fd` opens, nil if its file system has none. This is
    /// the one system call made under the lock: a root daemon's evictions only.
    private static func handle(of fd: Int32) -> [UInt8]? {
        var buffer = [UInt8](repeating: 0, count: Int(clinux_MAX_HANDLE_SIZE))
        let length = clinux_node_handle(fd, &buffer, Int32(buffer.count))
        guard length > 0 else { return nil }
        return Array(buffer[0..<Int(length)])
    }

    private func closeAll(_ fds: [Int32]) {
        for fd in fds { Glibc.close(fd) }
    }

    // MARK: Running out

    /// Runs an open-like `call`; when the daemon is out of descriptors, halves the cache
    /// and tries once more, then throws the errno (logged once).
    func exhaustible(_ call: () -> Int32) throws(Errno) -> Int32 {
        let fd = call()
        if fd >= 0 { return fd }
        let error = Errno.current
        guard error.code == EMFILE || error.code == ENFILE else { throw error }
        shrink()
        let again = call()
        if again >= 0 { return again }
        throw exhausted(Errno.current)
    }

    /// Closes half of the cached descriptors.
    func shrink() {
        let victims = state.withLock { s in evict(&s, keeping: s.cached / 2) }
        closeAll(victims)
    }

    private static let reportedExhaustion = Atomic<Bool>(false)

    /// `error`, after saying once in the daemon's log what ran out.
    private func exhausted(_ error: Errno) -> Errno {
        if error.code == EMFILE || error.code == ENFILE,
           !Self.reportedExhaustion.exchange(true, ordering: .relaxed) {
            var limit = rlimit()
            getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)
            let what = error.code == EMFILE ? "the daemon's descriptor limit (\(limit.rlim_cur))" : "the system's file table"
            let line = "containerfs: out of file descriptors: \(what) is reached with the node cache halved; the request gets \(error). Raise the hard limit (ulimit -Hn) or close files.\n"
            _ = line.withCString { write(2, $0, strlen($0)) }
            // A daemon in the background has no stderr: the system log too.
            line.withCString { text in withVaList([text]) { vsyslog(LOG_WARNING, "%s", $0) } }
        }
        return error
    }

    // MARK: Open files and removed names

    /// A file handle of `node` was opened.
    func opened(_ node: Inode) {
        state.withLock { _ in node.openFiles += 1 }
    }

    /// A file handle of `node` was closed: the last one of an unlinked node frees it.
    func closed(_ node: Inode) {
        let fd = state.withLock { s -> Int32 in
            node.openFiles -= min(node.openFiles, 1)
            guard node.mayLetGo else { return -1 }
            node.pinned = false
            endNamePin(node, &s)
            return node.users == 0 && node.descriptor >= 0 ? dropDescriptor(node, &s) : -1
        }
        if fd >= 0 { Glibc.close(fd) }
        if state.withLock({ _ in node.mayLetGo }) { closeBacking(node) }
    }

    /// A node with no name (`O_TMPFILE`): kept open until its last open file closes, since
    /// nothing could reopen it.
    func unnamed(_ node: Inode) {
        state.withLock { s in
            uncache(node, &s)
            node.pinned = true
            node.unlinked = true
        }
    }

    /// Before `name` in `directory` is removed or replaced: a known node that has other
    /// names or open files is pinned, since an ordinary user's daemon could not open it
    /// again by a name it no longer has; so is a file to be kept until forgotten
    /// (`keeping`) that loses its last name, for the opens racing its removal (`removed`;
    /// a folder is pinned there, once removed: an `rmdir` refused must pin nothing).
    /// Returns the node, for `removed`, and whether this removal pinned it, for `refused`.
    ///
    /// A pin for other names alone costs no program anything (`ln a b; rm b`, no file
    /// open) and lasts until the kernel forgets the node, which it may never do: at most
    /// `namePinLimit` are kept, or a loop of those ran the daemon out of descriptors and
    /// every later create and lookup failed with `EMFILE`. Past the bound the node stays in
    /// the cache; once evicted, a request by its node id gets `ESTALE` until a lookup by
    /// its other name finds it (the kernel retries a path walk that way).
    func removing(_ key: InodeKey, links: UInt, from directory: Inode, name: [UInt8], keeping: Bool = false) -> (node: Inode, pinned: Bool)? {
        guard let node = node(key) else { return nil }
        let (pin, forNameOnly) = state.withLock { _ -> (Bool, Bool) in
            if node.openFiles > 0 || (keeping && links <= 1 && !node.isDirectory) { return (true, false) }
            let forName = reopening == .byName && links > 1 && node.parent === directory && node.name == name
            return (forName, forName)
        }
        guard pin, (try? acquire(node)) != nil else { return (node, false) }
        let pinned = state.withLock { s -> Bool in
            if forNameOnly, !node.pinned {
                guard s.namePins < namePinLimit else { return false }
                node.pinnedForName = true
                s.namePins += 1
            }
            uncache(node, &s)
            node.pinned = true
            node.removalPins += 1
            return true
        }
        relinquish(node)
        return (node, pinned)
    }

    /// The store refused the removal that pinned `node` (`removing`): its names are as
    /// they were, so unless another removal's pin stands, it goes back to the cache. Left
    /// pinned, every refused removal (an immutable file, a change power-loss could not
    /// record) held one more descriptor for as long as the kernel knew the node.
    func refused(_ node: Inode) {
        let spare = state.withLock { s -> [Int32] in
            node.removalPins -= min(node.removalPins, 1)
            guard node.removalPins == 0, node.pinned, !node.unlinked, node.inTable else { return [] }
            endNamePin(node, &s)
            node.pinned = false
            guard node.descriptor >= 0 else { return [] }
            install(node, node.descriptor, &s)
            return evict(&s)
        }
        closeAll(spare)
    }

    /// Ends `node`'s pin for a removed recorded name, if it has one (the caller unpins it).
    private func endNamePin(_ node: Inode, _ s: inout State) {
        guard node.pinnedForName else { return }
        node.pinnedForName = false
        s.namePins -= 1
    }

    /// After a name of `node` was removed: with no name left, its descriptor (and the
    /// passthrough backing file) go as soon as no open file needs them, so that its
    /// blocks are freed when the last program closes it, as natively. They are taken
    /// from the node here and closed by the caller after its reply (`Released.close`):
    /// the last close frees the blocks, which on ext4 waits for the discard, and the
    /// program need not wait for that.
    ///
    /// A file unlinked or replaced by a rename, or a folder removed (`keptUntilForgotten`),
    /// keeps them until the kernel forgets it, which it does at once unless something holds
    /// it: an `open` the kernel resolved to it just before the removal then opens it, as
    /// on ext4. Let go at once, that open got `ESTALE`, and so did the kernel's one retry
    /// when a second removal raced it: a reader of a file saved atomically in a loop, 1
    /// open in 70; of a file deleted and made again in a loop (a lock file, SQLite's
    /// journal), 1 in 130; of a folder made and removed in a loop, 1 `opendir` in 12 to
    /// 30 and 1 `chdir` in 4 to 15. Kept, it is pinned: no reopen could find it.
    func removed(_ node: Inode, keptUntilForgotten: Bool = false) -> Released {
        var info = stat()
        let links = (try? withDescriptor(node) { fd in fstatat(fd, "", &info, clinux_AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) }) == 0 ? info.st_nlink : 0
        guard links == 0 else { return Released(keptAName: true) }
        let (fd, free) = state.withLock { s -> (Int32, Bool) in
            node.unlinked = true
            node.keptUntilForgotten = keptUntilForgotten
            guard node.mayLetGo else {
                if keptUntilForgotten, node.inTable, node.descriptor >= 0 {
                    uncache(node, &s)
                    node.pinned = true
                }
                return (-1, false)
            }
            node.pinned = false
            endNamePin(node, &s)
            return (node.users == 0 && node.descriptor >= 0 ? dropDescriptor(node, &s) : -1, true)
        }
        return Released(descriptor: fd, backingID: free ? takeBacking(node) : 0, bytes: UInt64(clamping: info.st_blocks) &* 512)
    }

    /// What a removal let go of, closed once the reply is sent: by the closer's thread
    /// when it has room (CFuse's closer.h), so that this thread is free for the next request.
    struct Released {
        fileprivate var descriptor: Int32 = -1
        fileprivate var backingID: Int32 = 0
        fileprivate var bytes: UInt64 = 0   // what the close frees
        /// The node still has a name (a hard link): nothing is let go, nothing freed.
        fileprivate(set) var keptAName = false

        /// The blocks the removed node had, which its close frees.
        var freedBytes: Int64 { Int64(clamping: bytes) }

        func close() {
            guard descriptor >= 0 || backingID > 0, !cfuse_close_later(descriptor, backingID, bytes) else { return }
            if descriptor >= 0 { Glibc.close(descriptor) }
            if backingID > 0 { cfuse_backing_close(backingID) }
        }
    }

    private func takeBacking(_ node: Inode) -> Int32 {
        node.backingID.withLock { id in
            defer { id = 0 }
            return id
        }
    }

    private func closeBacking(_ node: Inode) {
        let id = takeBacking(node)
        if id > 0 { cfuse_backing_close(id) }
    }

    // MARK: Locations

    /// The node's current location.
    @inline(__always)
    func location(of node: Inode) -> Location {
        state.withLock { _ in node.location }
    }

    /// The node known by `key`, if the kernel holds it.
    func node(_ key: InodeKey) -> Inode? {
        state.withLock { $0.nodes[key] }
    }

    /// Records that `node` is now `name` in `parent`. When a directory changes area, the
    /// known nodes below it do too: they are classified again top-down, each from its
    /// parent's new location, stopping where nothing changes; linear in the nodes whose
    /// location changes, iterative, and in batches, so other requests wait at most one
    /// batch for the table's lock.
    func moved(_ node: Inode, to parent: Inode, name: [UInt8]) {
        moves.withLock { _ in
            var pending: [Inode] = []
            var dropped: [Inode] = []
            var spare: [Int32] = []
            state.withLock { s in
                let old = node.location
                let previous = node.parent
                if previous !== parent {
                    detach(node)
                    attach(node, to: parent)
                }
                node.name = name
                node.location = layout.child(name, of: parent.location)
                if let previous, previous !== parent { dropped = retireIfUnused(previous, &s, &spare) }
                if node.isDirectory, node.location != old { pushChildren(of: node, to: &pending) }
            }
            closeAll(spare)
            while !pending.isEmpty {
                state.withLock { _ in
                    for _ in 0..<Self.batch {
                        guard let each = pending.popLast() else { break }
                        guard let parent = each.parent, each.inTable else { continue }
                        let location = layout.child(each.name, of: parent.location)
                        guard location != each.location else { continue }
                        each.location = location
                        pushChildren(of: each, to: &pending)
                    }
                }
            }
            _ = dropped
        }
    }

    /// Nodes reclassified per hold of the lock.
    private static let batch = 512

    private func pushChildren(of node: Inode, to pending: inout [Inode]) {
        var child = node.firstChild
        while let each = child {
            pending.append(each)
            child = each.nextSibling
        }
    }

    private func attach(_ node: Inode, to parent: Inode) {
        node.parent = parent
        node.previousSibling = nil
        node.nextSibling = parent.firstChild
        parent.firstChild?.previousSibling = node
        parent.firstChild = node
    }

    private func detach(_ node: Inode) {
        guard let parent = node.parent else { return }
        if parent.firstChild === node { parent.firstChild = node.nextSibling }
        node.previousSibling?.nextSibling = node.nextSibling
        node.nextSibling?.previousSibling = node.previousSibling
        node.previousSibling = nil
        node.nextSibling = nil
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

    /// Descriptors the cache holds now, and nodes known (for tests and the bench).
    var counts: (cached: Int, nodes: Int) {
        state.withLock { ($0.cached, $0.nodes.count) }
    }
}

/// FUSE node id to node, read without a lock: a fixed table of chunks, each allocated
/// once and never freed, of atomic words holding an unretained `Inode` (the table's
/// dictionary holds the reference). The kernel only sends ids it was given and has not
/// forgotten, so a slot it names is set; any other id reads as nil.
final class NodeSlots: @unchecked Sendable {
    private static let chunkBits = 16
    private static let chunkCount = 1 << 16
    private let chunks: UnsafeMutablePointer<Atomic<UInt>>

    init() {
        // Zero pages; zeroed memory is Atomic<UInt>(0).
        let memory = calloc(Self.chunkCount, MemoryLayout<UInt>.stride)
            ?? UnsafeMutableRawPointer.allocate(byteCount: Self.chunkCount * 8, alignment: 8)
        chunks = memory.bindMemory(to: Atomic<UInt>.self, capacity: Self.chunkCount)
    }

    @inline(__always)
    subscript(_ id: fuse_ino_t) -> Inode? {
        let index = UInt64(id)
        let chunkIndex = Int(truncatingIfNeeded: index >> UInt64(Self.chunkBits))
        guard chunkIndex < Self.chunkCount else { return nil }
        let chunk = chunks[chunkIndex].load(ordering: .acquiring)
        guard chunk != 0, let base = UnsafeMutablePointer<Atomic<UInt>>(bitPattern: chunk) else { return nil }
        let bits = base[Int(truncatingIfNeeded: index & UInt64((1 << Self.chunkBits) - 1))].load(ordering: .acquiring)
        guard let pointer = UnsafeRawPointer(bitPattern: bits) else { return nil }
        return Unmanaged<Inode>.fromOpaque(pointer).takeUnretainedValue()
    }

    /// Sets or clears `id`'s slot (called under the table's lock).
    func set(_ id: fuse_ino_t, _ node: Inode?) {
        let index = UInt64(id)
        let chunkIndex = Int(truncatingIfNeeded: index >> UInt64(Self.chunkBits))
        guard chunkIndex < Self.chunkCount else { return }
        var chunk = chunks[chunkIndex].load(ordering: .acquiring)
        if chunk == 0 {
            guard node != nil, let memory = calloc(1 << Self.chunkBits, MemoryLayout<UInt>.stride) else { return }
            chunk = UInt(bitPattern: memory)
            chunks[chunkIndex].store(chunk, ordering: .releasing)
        }
        guard let base = UnsafeMutablePointer<Atomic<UInt>>(bitPattern: chunk) else { return }
        let bits = node.map { UInt(bitPattern: Unmanaged.passUnretained($0).toOpaque()) } ?? 0
        base[Int(truncatingIfNeeded: index & UInt64((1 << Self.chunkBits) - 1))].store(bits, ordering: .releasing)
    }
}
