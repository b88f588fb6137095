import CFuse
import CLinux
import ContainerDurability
import ContainerPolicy
import ContainerStore
import Glibc

/// Who asked: the identity the kernel attaches to a request.
struct Caller {
    /// The ids as the store records them (`OwnerMapping.recorded`: the store owner's for
    /// the app user of root's `run`).
    let uid: uid_t
    let gid: gid_t
    /// The uid the kernel sent: whose request it is, for the audit log and for root's
    /// privileges (the app user mapped to a root store owner is not root).
    var kernelUID: uid_t
    let pid: pid_t
    /// The caller's umask, sent with creations (0 for other requests). The kernel leaves
    /// applying it to the daemon (`FUSE_CAP_DONT_MASK`), so that the store's own file
    /// system does it as natively: after a folder's default ACL, if it has one.
    var umask: mode_t = 0
    /// The request, to ask for the caller's supplementary groups (`isMember(of:)`).
    var request: fuse_req_t? = nil
}

/// How long the kernel may trust what it was told. Every change to a mounted store goes
/// through the mount or through containerfs commands that invalidate what they change.
struct CacheTimeouts {
    var entry: Double = 86400
    var attributes: Double = 86400
}

/// The container as a filesystem: one handler per FUSE operation, named after its
/// system call. Each handler checks the policy, then acts on the store through
/// descriptors, and returns what the reply needs or throws an errno.
final class FileSystem: @unchecked Sendable {
    let store: Store
    let layout: ContainerLayout
    let inodes: InodeTable
    let audit: AuditLog
    let timeouts: CacheTimeouts
    /// Whether the kernel caches writes (`-o writeback`): then the store file must be
    /// readable to fill pages, and the kernel keeps `O_APPEND` itself.
    var writeback = false
    /// Whether set-user-ID and set-group-ID bits are dropped from every mode a caller gives
    /// a file that is not a folder (`-o nosetid`, which `run` uses).
    var noSetID = false
    /// The ids shown to, and recorded for, the app user of root's `run` (`-o appuser`).
    var ownerMapping: OwnerMapping?
    /// Data protection: the device state and the open files of class `complete` (SPEC §11).
    let protection = DataProtection()
    /// A root daemon creates files as root; they are handed to the caller afterwards.
    private let daemonIsRoot = geteuid() == 0
    /// The space used against the container's capacity, if it has one (Capacity.swift).
    let space = SpaceAccount()
    /// The undo record of what is durable, on a `power-loss` mount (PowerLoss.swift).
    var powerLoss: PowerLoss?

    init(store: Store, audit: AuditLog, timeouts: CacheTimeouts) throws(Errno) {
        self.store = store
        self.layout = store.layout
        self.audit = audit
        self.timeouts = timeouts
        self.inodes = try InodeTable(rootFD: store.rootFD, layout: store.layout)
    }

    /// The attributes of a node as a reply shows them: in the app user's ids under
    /// `ownerMapping`, and the top folder, which `create` makes 0700 to keep other users out
    /// of the store on disk, as 0755: the mount serves them through the rules.
    func shown(_ info: stat) -> stat {
        var info = info
        ownerMapping?.present(&info)
        if InodeKey(info) == inodes.root.key, info.st_mode & 0o777 == 0o700 { info.st_mode |= 0o055 }
        return info
    }

    // MARK: Policy

    /// Throws the denial's errno, after logging it, unless the policy allows `operation`.
    /// `paths` is evaluated only for a denial: building paths takes the table's lock.
    @inline(__always)
    private func check(_ operation: Operation, _ caller: Caller, _ name: StaticString,
                       _ paths: @autoclosure () -> [(ContainerPath, Location)]) throws(Errno) {
        guard case .deny(let denial) = Policy.decide(operation) else { return }
        if denial.isAudited {
            let named = paths()
            audit.record(pid: caller.pid, uid: caller.kernelUID, operation: "\(name)",
                         paths: named.map(\.0), areas: named.map(\.1.area), denial: denial)
        }
        throw Errno(denial.errno)
    }

    private func path(_ node: Inode) -> ContainerPath { inodes.path(of: node) }
    private func path(_ parent: Inode, _ name: [UInt8]) -> ContainerPath { inodes.path(of: parent).appending(name) }

    // MARK: Lookup and attributes

    func lookup(_ caller: Caller, parent: fuse_ino_t, name: UnsafePointer<CChar>) throws(Errno) -> fuse_entry_param {
        let directory = try inodes.inode(parent)
        let childName = try bytes(of: name)
        let location = layout.child(childName, of: inodes.location(of: directory))
        // A hidden name is not there; a negative entry lets the kernel remember that.
        guard location != .hidden else { return negativeEntry() }
        do {
            return try entry(directory, name, childName, location)
        } catch let error where error.code == ENOENT {
            return negativeEntry()
        }
    }

    func forget(_ ino: fuse_ino_t, _ count: UInt64) {
        guard let (key, released, held) = inodes.forget(ino, count) else { return }
        // Counted free before the close frees it: its inode number may come back at once.
        if held { countingChange { releaseHeld(ino, key, released.freedBytes) } }
        released.close()
    }

    /// An open file of `ino` was closed (or its open not delivered).
    func closed(_ ino: fuse_ino_t) {
        guard let node = try? inodes.inode(ino) else { return }
        inodes.closed(node)
    }

    func getattr(_ ino: fuse_ino_t) throws(Errno) -> stat {
        try attributes(inodes.inode(ino))
    }

    func setattr(_ caller: Caller, _ ino: fuse_ino_t, _ attr: stat, _ toSet: Int32, _ fh: Int32?) throws(Errno) -> stat {
        let node = try inodes.inode(ino)
        let location = inodes.location(of: node)
        if toSet & FUSE_SET_ATTR_SIZE != 0 {
            try check(.changeContent(location), caller, "truncate", [(path(node), location)])
        }
        // With the writeback cache the kernel flushes the times it keeps itself (after an
        // unlink of an Inbox file, say: the link count changed its ctime) as an mtime and
        // ctime that change nothing. Nobody's change: nothing to police, nothing to apply.
        if toSet != 0, toSet & ~(FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_CTIME) == 0 {
            let current = try attributes(node)
            if toSet & FUSE_SET_ATTR_MTIME == 0
                || (attr.st_mtim.tv_sec == current.st_mtim.tv_sec && attr.st_mtim.tv_nsec == current.st_mtim.tv_nsec) {
                return current
            }
        }
        let metadata = FUSE_SET_ATTR_MODE | FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID | FUSE_SET_ATTR_ATIME
            | FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_ATIME_NOW | FUSE_SET_ATTR_MTIME_NOW | FUSE_SET_ATTR_CTIME
        if toSet & metadata != 0 {
            let name: StaticString = toSet & FUSE_SET_ATTR_MODE != 0 ? "chmod"
                : toSet & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID) != 0 ? "chown" : "utimens"
            try check(.changeMetadata(location), caller, name, [(path(node), location)])
        }

        let resized: Durability.Change? = toSet & FUSE_SET_ATTR_SIZE != 0 ? .truncate(to: Int64(attr.st_size)) : nil
        try trackingData(node, fh, resized) { () throws(Errno) in try inodes.withDescriptor(node) { fd throws(Errno) in
            if toSet & FUSE_SET_ATTR_MODE != 0 {
                // Linux has no mode on symlinks; fchmodat2 on the O_PATH descriptor changes
                // the node itself and never follows it.
                let mode = permittedMode(attr.st_mode, type: node.type)
                if let fh { try sys { fchmod(fh, mode) } }
                else { try sys { clinux_fchmod_path_fd(fd, mode) } }
            }
            if toSet & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID) != 0 {
                let uid = toSet & FUSE_SET_ATTR_UID != 0 ? attr.st_uid : uid_t.max
                let gid = toSet & FUSE_SET_ATTR_GID != 0 ? attr.st_gid : gid_t.max
                try sys { fchownat(fd, "", uid, gid, clinux_AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) }
            }
            if toSet & FUSE_SET_ATTR_SIZE != 0 {
                guard node.type == S_IFREG else { throw Errno(EINVAL) }
                _ = try withinCapacity(ino, fh ?? fd, partial: false, growth: { Self.growth(truncatingTo: attr.st_size, $0, free: space.free) }) { (_, _) throws(Errno) in
                    if let fh { try sys { ftruncate(fh, attr.st_size) } }
                    else { try sys { clinux_node_truncate(fd, attr.st_size) } }
                }
            }
            if toSet & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_ATIME_NOW | FUSE_SET_ATTR_MTIME_NOW) != 0 {
                var times = [timespec(tv_sec: 0, tv_nsec: clinux_UTIME_OMIT), timespec(tv_sec: 0, tv_nsec: clinux_UTIME_OMIT)]
                if toSet & FUSE_SET_ATTR_ATIME_NOW != 0 { times[0].tv_nsec = clinux_UTIME_NOW }
                else if toSet & FUSE_SET_ATTR_ATIME != 0 { times[0] = attr.st_atim }
                if toSet & FUSE_SET_ATTR_MTIME_NOW != 0 { times[1].tv_nsec = clinux_UTIME_NOW }
                else if toSet & FUSE_SET_ATTR_MTIME != 0 { times[1] = attr.st_mtim }
                if let fh { try sys { futimens(fh, &times) } }
                else { try sys { utimensat(fd, "", &times, clinux_AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) } }
                Tagging.timesSet(node, location, toSet, attr)
            }
        } }
        // A truncate or chown by a caller without CAP_FSETID carries the kill flag, after
        // an operation the policy allowed.
        if toSet & FUSE_SET_ATTR_KILL_SUID != 0 { dropSetIDBits(caller, ino) }
        if toSet == 0 { try clearSetIDBitsAsked(caller, node, location) }
        return try attributes(node)
    }

    /// A SETATTR with nothing to set: how the kernel asks the daemon to clear set-ID bits
    /// before a passthrough write by a caller without CAP_FSETID (`file_remove_privs`),
    /// and what `chown(path, -1, -1)` becomes, which Linux turns into that mode change
    /// when the file has a set-ID bit. The two look the same, so the bits are cleared
    /// only for whom Linux would clear them: the owner, root, or a caller who may write
    /// the file (only a writer gets as far as a write). Anyone else gets `EPERM`, as a
    /// chown of such a file natively; and clearing them is a change of metadata the
    /// policy decides like any other (bundle `EPERM`, inbox `EACCES`, audited).
    private func clearSetIDBitsAsked(_ caller: Caller, _ node: Inode, _ location: Location) throws(Errno) {
        guard node.type == S_IFREG else { return }
        let info = try attributes(node)
        let mode = Self.modeWithoutSetIDBits(info, for: caller)
        guard mode != info.st_mode & 0o7777 else { return }
        guard caller.kernelUID == 0 || caller.uid == info.st_uid || Self.mayWrite(caller, info) else { throw Errno(EPERM) }
        try check(.changeMetadata(location), caller, "chown", [(path(node), location)])
        try inodes.withDescriptor(node) { fd throws(Errno) in try sys { clinux_fchmod_path_fd(fd, mode) } }
    }

    /// Whether the permission bits let `caller` write a file (root is handled apart).
    private static func mayWrite(_ caller: Caller, _ info: stat) -> Bool {
        if info.st_uid == caller.uid { return info.st_mode & S_IWUSR != 0 }
        if caller.gid == info.st_gid || caller.isMember(of: info.st_gid) { return info.st_mode & S_IWGRP != 0 }
        return info.st_mode & S_IWOTH != 0
    }

    /// A file's permission bits without the set-ID bits Linux clears for `caller` (who
    /// lacks CAP_FSETID) when it writes, truncates or chowns the file
    /// (`setattr_should_drop_suidgid`): set-user-ID always; set-group-ID when the file is
    /// group-executable, or when the caller is not in the file's group.
    private static func modeWithoutSetIDBits(_ info: stat, for caller: Caller) -> mode_t {
        var result = info.st_mode & 0o7777 & ~S_ISUID
        if result & S_ISGID != 0,
           result & S_IXGRP != 0 || (caller.gid != info.st_gid && !caller.isMember(of: info.st_gid)) {
            result &= ~S_ISGID
        }
        return result
    }

    /// Clears the set-ID bits Linux clears when `caller`, without CAP_FSETID, writes,
    /// truncates or chowns a file: the kernel leaves it to the daemon
    /// (FUSE_HANDLE_KILLPRIV_V2), whose own calls keep the bits. Best effort, like the
    /// kernel's: the change itself has happened; a daemon that may not chmod the file (an
    /// ordinary user's, on another user's file) leaves them.
    func dropSetIDBits(_ caller: Caller, _ ino: fuse_ino_t) {
        guard let node = try? inodes.inode(ino), node.type == S_IFREG else { return }
        _ = try? inodes.withDescriptor(node) { fd in
            var info = stat()
            guard fstatat(fd, "", &info, clinux_AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0 else { return }
            let mode = Self.modeWithoutSetIDBits(info, for: caller)
            if mode != info.st_mode & 0o7777 { _ = clinux_fchmod_path_fd(fd, mode) }
        }
    }

    /// The permission bits of `mode` a node of `type` may get: without set-user-ID and
    /// set-group-ID on anything but a folder under `nosetid`.
    private func permittedMode(_ mode: mode_t, type: mode_t) -> mode_t {
        let bits = mode & 0o7777
        return noSetID && type != S_IFDIR ? bits & ~(S_ISUID | S_ISGID) : bits
    }

    func readlink(_ ino: fuse_ino_t) throws(Errno) -> [CChar] {
        let node = try inodes.inode(ino)
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = try inodes.withDescriptor(node) { fd throws(Errno) in try sys { readlinkat(fd, "", &buffer, buffer.count - 1) } }
        buffer[count] = 0
        return buffer
    }

    func statfs() throws(Errno) -> statvfs {
        var info = statvfs()
        try sys { fstatvfs(store.rootFD, &info) }
        return capacityStatistics(info)
    }

    // MARK: Making and removing names

    func mknod(_ caller: Caller, _ parent: fuse_ino_t, _ name: UnsafePointer<CChar>, _ mode: mode_t, _ device: dev_t) throws(Errno) -> fuse_entry_param {
        let (directory, childName, location) = try child(parent, name)
        try check(.create(location), caller, "mknod", [(path(directory, childName), location)])
        // A container holds no device files, as an iOS app's cannot.
        let type = mode & S_IFMT
        guard type == S_IFREG || type == S_IFIFO || type == S_IFSOCK else { throw Errno(EPERM) }
        // A regular file made by name is made as `open(O_CREAT)` makes it (SPEC §11): not in
        // a `complete` folder while the device is locked.
        if type == S_IFREG { _ = try admitCreation(caller, in: parent, "mknod") }
        try checkSpaceForCreation()
        try useUmask(of: caller)
        _ = try trackingNames(directory, childName) { () throws(Errno) in try countingFolderGrowth(directory) { () throws(Errno) in
            try inodes.withDescriptor(directory) { fd throws(Errno) in try sys { mknodat(fd, name, type | permittedMode(mode, type: type), device) } }
        } }
        return try created(caller, directory, name, childName, location)
    }

    func mkdir(_ caller: Caller, _ parent: fuse_ino_t, _ name: UnsafePointer<CChar>, _ mode: mode_t) throws(Errno) -> fuse_entry_param {
        let (directory, childName, location) = try child(parent, name)
        try check(.create(location), caller, "mkdir", [(path(directory, childName), location)])
        try checkSpaceForCreation()
        try useUmask(of: caller)
        try trackingNames(directory, childName) { () throws(Errno) in try countingFolderGrowth(directory) { () throws(Errno) in
            try inodes.withDescriptor(directory) { fd throws(Errno) in
                try sys { mkdirat(fd, name, mode) }
                powerLoss?.madeFolder(in: fd, name)
            }
        } }
        let param = try created(caller, directory, name, childName, location)
        countCreated(param.attr)
        return param
    }

    func symlink(_ caller: Caller, _ target: UnsafePointer<CChar>, _ parent: fuse_ino_t, _ name: UnsafePointer<CChar>) throws(Errno) -> fuse_entry_param {
        let (directory, childName, location) = try child(parent, name)
        try check(.create(location), caller, "symlink", [(path(directory, childName), location)])
        try checkSpaceForCreation()
        _ = try trackingNames(directory, childName) { () throws(Errno) in try countingFolderGrowth(directory) { () throws(Errno) in
            try inodes.withDescriptor(directory) { fd throws(Errno) in try sys { symlinkat(target, fd, name) } }
        } }
        let param = try created(caller, directory, name, childName, location)
        countCreated(param.attr)
        return param
    }

    func link(_ caller: Caller, _ ino: fuse_ino_t, _ parent: fuse_ino_t, _ name: UnsafePointer<CChar>) throws(Errno) -> fuse_entry_param {
        let node = try inodes.inode(ino)
        let source = inodes.location(of: node)
        let (directory, childName, location) = try child(parent, name)
        try check(.link(from: source, to: location), caller, "link",
                  [(path(node), source), (path(directory, childName), location)])
        try checkSpaceForCreation()
        // Linking the /proc/self/fd magic link links the node itself, not a path to it.
        _ = try trackingNames(directory, childName) { () throws(Errno) in try countingFolderGrowth(directory) { () throws(Errno) in
            try inodes.withDescriptor(node) { fd throws(Errno) in
                try inodes.withDescriptor(directory) { directoryFD throws(Errno) in try sys { clinux_node_link(fd, directoryFD, name) } }
            }
        } }
        // An O_TMPFILE file (or one unlinked while open) named again stays when closed.
        if space.isActive { space.linked(node.key) }
        return try entry(directory, name, childName, location)
    }

    /// Returns what the removal let go of, to close after the reply.
    func unlink(_ caller: Caller, _ parent: fuse_ino_t, _ name: UnsafePointer<CChar>) throws(Errno) -> InodeTable.Released {
        let (directory, childName, location) = try child(parent, name)
        try check(.delete(location), caller, "unlink", [(path(directory, childName), location)])
        return try remove(directory, name, childName, 0)
    }

    /// Returns what the removal let go of, to close after the reply.
    func rmdir(_ caller: Caller, _ parent: fuse_ino_t, _ name: UnsafePointer<CChar>) throws(Errno) -> InodeTable.Released {
        let (directory, childName, location) = try child(parent, name)
        try check(.delete(location), caller, "rmdir", [(path(directory, childName), location)])
        return try remove(directory, name, childName, AT_REMOVEDIR)
    }

    func rename(_ caller: Caller, _ parent: fuse_ino_t, _ name: UnsafePointer<CChar>,
                _ newParent: fuse_ino_t, _ newName: UnsafePointer<CChar>, _ flags: UInt32) throws(Errno) -> InodeTable.Released {
        guard flags & ~(clinux_RENAME_NOREPLACE | clinux_RENAME_EXCHANGE) == 0 else { throw Errno(EINVAL) }
        let exchange = flags & clinux_RENAME_EXCHANGE != 0
        let (from, fromName, source) = try child(parent, name)
        let (to, toName, target) = try child(newParent, newName)
        try check(.rename(from: source, to: target, exchange: exchange), caller, "rename",
                  [(path(from, fromName), source), (path(to, toName), target)])
        // A node the rename replaces loses a name, as with unlink.
        let removal = exchange ? nil : removing(to, newName, toName, keeping: true)
        let replaced = removal?.node
        // A new name in the target folder may grow it: refused when the container is full.
        // An exchange reuses both names, but either folder may still change: both counted.
        func renamed() throws(Errno) {
            try inodes.withDescriptor(from) { fromFD throws(Errno) in
                try inodes.withDescriptor(to) { toFD throws(Errno) in try sys { clinux_renameat2(fromFD, name, toFD, newName, flags) } }
            }
        }
        let released = try removingName(of: removal, keeping: true) { () throws(Errno) in
            try trackingNames(from, fromName, (to, toName), { () throws(Errno) in if !exchange { try recordRenameOver(from, name, to, newName) } }) { () throws(Errno) in
                if exchange {
                    try countingFolderGrowth(from, reserving: false) { () throws(Errno) in try countingFolderGrowth(to, reserving: false, renamed) }
                } else {
                    let replacing = nodeBeforeRemoval(to, newName) != nil
                    try countingRemoval(to, newName, replaced) { () throws(Errno) in try countingFolderGrowth(to, reserving: !replacing, renamed) }
                }
            }
        }
        track(movedTo: to, newName, toName)
        if exchange { track(movedTo: from, name, fromName) }
        return released
    }

    /// Removes `name` from `directory`; a node that loses its last name lets go of its
    /// descriptor when no open file needs it, so its blocks are freed as natively.
    private func remove(_ directory: Inode, _ name: UnsafePointer<CChar>, _ childName: [UInt8], _ flags: Int32) throws(Errno) -> InodeTable.Released {
        let removal = removing(directory, name, childName, keeping: true)
        let node = removal?.node
        return try removingName(of: removal, keeping: true) { () throws(Errno) in
            try trackingNames(directory, childName) { () throws(Errno) in try countingRemoval(directory, name, node) { () throws(Errno) in
                try inodes.withDescriptor(directory) { fd throws(Errno) in try sys { unlinkat(fd, name, flags) } }
            } }
        }
    }

    /// Runs `removal`, which takes a name from `node` (nil: not known); with `keeping`, one
    /// that loses its last name is kept until the kernel forgets it (InodeTable.removed),
    /// and with a capacity held as an open file is, its blocks counted as long as they are kept.
    /// A folder's descriptor is held in use across the removal (a file's is pinned before
    /// it, `removing`): once removed, no reopen could find it, and the cache must not
    /// close it before the table keeps it.
    /// A refused removal undoes the pin `removing` made for it (`InodeTable.refused`).
    private func removingName(of known: (node: Inode, pinned: Bool)?, keeping: Bool, _ removal: () throws(Errno) -> Void) throws(Errno) -> InodeTable.Released {
        let node = known?.node
        do {
            guard keeping, let folder = node, folder.isDirectory else { return try removingNameNow(of: node, keeping: keeping, removal) }
            return try inodes.holdingDescriptor(folder) { () throws(Errno) in try removingNameNow(of: node, keeping: keeping, removal) }
        } catch {
            if let known, known.pinned { inodes.refused(known.node) }
            throw error
        }
    }

    private func removingNameNow(of node: Inode?, keeping: Bool, _ removal: () throws(Errno) -> Void) throws(Errno) -> InodeTable.Released {
        let held = keeping ? node.flatMap { space.isActive && inodes.holdKept($0) ? $0 : nil } : nil
        if let held {
            space.opened(held.key)
            // Before the removal: the kernel's `FORGET` may come before it returns.
            space.removedAndKept(held.key)
        }
        do {
            try removal()
        } catch {
            if let held {
                inodes.unholdKept(held)
                space.letGo(held.key)
                _ = space.closed(held.key)
            }
            throw error
        }
        let released = node.map { inodes.removed($0, keptUntilForgotten: keeping) } ?? InodeTable.Released()
        if let held, !inodes.keeps(held) {
            inodes.unholdKept(held)
            // A file that kept a name (a hard link) frees nothing: its blocks are measured.
            releaseHeld(inodes.ino(held), held.key, released.keptAName ? nil : released.freedBytes)
        }
        return released
    }

    /// The known node at `name` in `directory`, about to lose that name; a file to be kept
    /// until the kernel forgets it (`keeping`) is pinned (a folder once removed, `removed`).
    private func removing(_ directory: Inode, _ name: UnsafePointer<CChar>, _ childName: [UInt8], keeping: Bool = false) -> (node: Inode, pinned: Bool)? {
        var info = stat()
        guard (try? inodes.withDescriptor(directory, { fd in fstatat(fd, name, &info, AT_SYMLINK_NOFOLLOW) })) == 0 else { return nil }
        return inodes.removing(InodeKey(info), links: UInt(info.st_nlink), from: directory, name: childName, keeping: keeping)
    }

    /// Tells the table that whatever is now at `name` in `directory` moved there.
    private func track(movedTo directory: Inode, _ name: UnsafePointer<CChar>, _ nameBytes: [UInt8]) {
        var info = stat()
        guard (try? inodes.withDescriptor(directory, { fd in fstatat(fd, name, &info, AT_SYMLINK_NOFOLLOW) })) == 0,
              let node = inodes.node(InodeKey(info)) else { return }
        inodes.moved(node, to: directory, name: nameBytes)
    }

    // MARK: Files

    /// Opens the node for the flags the program asked for; returns the store descriptor.
    func open(_ caller: Caller, _ ino: fuse_ino_t, _ flags: Int32) throws(Errno) -> (fd: Int32, directIO: Bool) {
        let node = try inodes.inode(ino)
        let location = inodes.location(of: node)
        if Self.isMutation(flags) {
            try check(.changeContent(location), caller, "open", [(path(node), location)])
        }
        // A truncating open frees the file's blocks: counted, as a truncate is.
        let opened = flags & O_TRUNC != 0 && node.type == S_IFREG
            ? try trackingData(node, nil, .truncate(to: 0)) { () throws(Errno) in
                try countingTruncation(ino, node) { () throws(Errno) in try Tagging.opened(reopen(node, flags), node, location) }
            }
            : try Tagging.opened(reopen(node, flags), node, location)
        inodes.opened(node)
        return opened
    }

    func create(_ caller: Caller, _ parent: fuse_ino_t, _ name: UnsafePointer<CChar>, _ mode: mode_t, _ flags: Int32) throws(Errno) -> (fuse_entry_param, fd: Int32, directIO: Bool) {
        let (directory, childName, location) = try child(parent, name)
        try check(.create(location), caller, "create", [(path(directory, childName), location)])
        try checkSpaceForCreation(exists: { nodeBeforeRemoval(directory, name) != nil })
        try useUmask(of: caller)
        let permitted = permittedMode(mode, type: S_IFREG)
        let fd = try trackingNames(directory, childName, nil, { () throws(Errno) in if flags & O_TRUNC != 0 { try recordTruncation(directory, name) } }) { () throws(Errno) in
            try countingFolderGrowth(directory) { () throws(Errno) in
                try inodes.withDescriptor(directory) { directoryFD throws(Errno) in
                    try inodes.exhaustible { openat(directoryFD, name, storeFlags(flags) | O_CREAT | O_NOFOLLOW | O_CLOEXEC, permitted) }
                }
            }
        }
        Tagging.created(fd, location)
        do {
            let entry = try created(caller, directory, name, childName, location)
            inodes.opened(try inodes.inode(entry.ino))
            return (entry, fd, flags & clinux_O_DIRECT != 0)
        } catch {
            Glibc.close(fd)
            throw error
        }
    }

    /// `open(folder, O_TMPFILE)`: an unnamed file in the folder, which a program may
    /// name later with `linkat`. A creation in the folder's area, decided as any other
    /// (and linking it into the inbox or the bundle is denied as any link there).
    func tmpfile(_ caller: Caller, _ parent: fuse_ino_t, _ mode: mode_t, _ flags: Int32) throws(Errno) -> (fuse_entry_param, fd: Int32, directIO: Bool) {
        let directory = try inodes.inode(parent)
        // Any name that means nothing special gives the location of a new file there.
        let location = layout.child(Array("#tmpfile".utf8), of: inodes.location(of: directory))
        // The audit log names the folder: the file has no name (nor inode) yet.
        try check(.create(location), caller, "open", [(path(directory), location)])
        try checkSpaceForCreation()
        try useUmask(of: caller)
        // Never O_EXCL in the store: whether the file may be linked is for the kernel to
        // decide on the mount's inode (it refuses linkat for O_EXCL there).
        let fd = try inodes.withDescriptor(directory) { directoryFD throws(Errno) in
            try inodes.exhaustible { openat(directoryFD, ".", storeFlags(flags) | clinux_O_TMPFILE | O_CLOEXEC, permittedMode(mode, type: S_IFREG)) }
        }
        Tagging.created(fd, location)
        do throws(Errno) {
            let pathFD = try sys { clinux_reopen(fd, clinux_O_PATH | O_CLOEXEC) }
            var param = try entry(holding: pathFD, in: directory, named: nil, location)
            let node = try inodes.inode(param.ino)
            inheritProtection(from: directory, to: node)
            // It has no name to be reopened by: its descriptor stays until its last open
            // file closes.
            inodes.unnamed(node)
            inodes.opened(node)
            // Nameless, its space is freed at its last close unless it is linked first.
            if space.isActive { space.unnamed(node.key) }
            try handOver(caller, directory, node, &param)
            return (param, fd, flags & clinux_O_DIRECT != 0)
        } catch {
            Glibc.close(fd)
            throw error
        }
    }

    /// Creations below run under the caller's umask (on this thread only).
    @inline(__always)
    private func useUmask(of caller: Caller) throws(Errno) {
        try sys { clinux_use_umask(caller.umask) }
    }

    /// The passthrough backing id for an open file of `ino`, or 0 when the daemon serves
    /// the file's reads and writes itself: passthrough off or refused (a daemon without
    /// CAP_SYS_ADMIN), or not a regular file. Writes need no check of their own either
    /// way: the policy was applied to the open's flags.
    func passthrough(_ ino: fuse_ino_t) -> Int32 {
        guard cfuse_passthrough_active(), !space.isActive, powerLoss == nil else { return 0 }
        guard let node = try? inodes.inode(ino), node.type == S_IFREG else { return 0 }
        return (try? inodes.withDescriptor(node) { nodeFD in node.backingID.withLock { id in
            guard id == 0 else { return id }
            // The kernel opens the store file again for each open file, with that file's
            // own flags: it needs the node, not an open mode. Recent kernels take the O_PATH
            // descriptor itself; older ones want an open file, registered read-only so the
            // node keeps no write access (which would make the store file busy for exec).
            id = cfuse_backing_open(nodeFD)
            if id == -EBADF {
                let fd = clinux_reopen(nodeFD, O_RDONLY | O_CLOEXEC)
                guard fd >= 0 else { return 0 }
                id = cfuse_backing_open(fd)
                Glibc.close(fd)
            }
            id = max(id, 0)
            return id
        } }) ?? 0
    }

    func fallocate(_ caller: Caller, _ ino: fuse_ino_t, _ fh: Int32, _ mode: Int32, _ offset: off_t, _ length: off_t) throws(Errno) {
        let node = try inodes.inode(ino)
        let location = inodes.location(of: node)
        try check(.changeContent(location), caller, "fallocate", [(path(node), location)])
        try trackingData(node, fh, .allocate(mode: mode, offset: Int64(offset), length: Int64(length))) { () throws(Errno) in try withinCapacity(ino, fh, partial: false, growth: { Self.growth(allocating: mode, offset, length, $0) }) { (_, _) throws(Errno) in
            if clinux_fallocate(fh, mode, offset, length) != 0 { throw Errno.current }
        } }
    }

    func copyFileRange(_ caller: Caller, from input: fuse_ino_t, _ inputFD: Int32, _ inputOffset: off_t,
                       to output: fuse_ino_t, _ outputFD: Int32, _ outputOffset: off_t, _ length: Int, _ flags: UInt32) throws(Errno) -> Int {
        let node = try inodes.inode(output)
        let location = inodes.location(of: node)
        try check(.changeContent(location), caller, "copy_file_range", [(path(node), location)])
        var inOffset = inputOffset
        var outOffset = outputOffset
        // What can be copied: the length asked (cp asks for far more than the file holds),
        // cut at the input's end. Past the capacity, ENOSPC and nothing copied
        // (docs/capacity.md); a write, not a copy, is what writes the part that fits.
        var input = stat()
        let copied = fstat(inputFD, &input) == 0 ? min(Int64(length), max(0, Int64(input.st_size).subtractingSaturated(Int64(inputOffset)))) : Int64(length)
        return try trackingData(node, outputFD, .write(offset: Int64(outputOffset), count: copied)) { () throws(Errno) in
            try withinCapacity(output, outputFD, partial: false, growth: { Self.growth(writing: Int(clamping: copied), at: outputOffset, $0) }) { (_, _) throws(Errno) in
                try sys { clinux_copy_file_range(inputFD, &inOffset, outputFD, &outOffset, length, flags) }
            }
        }
    }

    // MARK: Extended attributes

    func setxattr(_ caller: Caller, _ ino: fuse_ino_t, _ name: UnsafePointer<CChar>, _ value: UnsafePointer<CChar>?, _ size: Int, _ flags: Int32) throws(Errno) {
        let node = try inodes.inode(ino)
        let location = inodes.location(of: node)
        try check(.changeMetadata(location), caller, "setxattr", [(path(node), location)])
        // User attributes are not allowed on symlinks; reaching one through /proc could follow it.
        guard !node.isSymlink else { throw Errno(EPERM) }
        try checkProtectionAttribute(caller, node, location, name, UnsafeRawBufferPointer(start: value, count: value == nil ? 0 : size))
        // An ACL naming root's program is recorded naming the store's owner, as its chowns are.
        var recorded: [UInt8] = []
        if let ownerMapping, let value, OwnerMapping.isACL(name) {
            recorded = Array(UnsafeRawBufferPointer(start: value, count: size))
            recorded.withUnsafeMutableBytes { ownerMapping.recordACL($0) }
        }
        try trackingData(node, nil, nil) { () throws(Errno) in try countingAttributeBlocks(node, adding: true) { () throws(Errno) in
            try inodes.withDescriptor(node) { fd throws(Errno) in
                try sys {
                    recorded.isEmpty ? clinux_node_setxattr(fd, name, value, size, flags)
                        : recorded.withUnsafeBytes { clinux_node_setxattr(fd, name, $0.baseAddress, size, flags) }
                }
            }
        } }
    }

    func removexattr(_ caller: Caller, _ ino: fuse_ino_t, _ name: UnsafePointer<CChar>) throws(Errno) {
        let node = try inodes.inode(ino)
        let location = inodes.location(of: node)
        try check(.changeMetadata(location), caller, "removexattr", [(path(node), location)])
        guard !node.isSymlink else { throw Errno(EPERM) }
        try checkProtectionAttribute(caller, node, location, name, nil)
        try trackingData(node, nil, nil) { () throws(Errno) in try countingAttributeBlocks(node, adding: false) { () throws(Errno) in
            try inodes.withDescriptor(node) { fd throws(Errno) in try sys { clinux_node_removexattr(fd, name) } }
        } }
    }

    /// Reads an attribute's value into `buffer` (or its size when `buffer` is empty).
    func getxattr(_ ino: fuse_ino_t, _ name: UnsafePointer<CChar>, _ buffer: UnsafeMutableRawBufferPointer) throws(Errno) -> Int {
        let node = try inodes.inode(ino)
        guard !node.isSymlink else { throw Errno(ENODATA) }
        let count = try inodes.withDescriptor(node) { fd throws(Errno) in try sys { clinux_node_getxattr(fd, name, buffer.baseAddress, buffer.count) } }
        if let ownerMapping, !buffer.isEmpty, OwnerMapping.isACL(name) {
            ownerMapping.presentACL(UnsafeMutableRawBufferPointer(rebasing: buffer[..<min(count, buffer.count)]))
        }
        return count
    }

    func listxattr(_ ino: fuse_ino_t, _ buffer: UnsafeMutableRawBufferPointer) throws(Errno) -> Int {
        let node = try inodes.inode(ino)
        guard !node.isSymlink else { return 0 }
        return try inodes.withDescriptor(node) { fd throws(Errno) in
            try sys { clinux_node_listxattr(fd, buffer.baseAddress?.assumingMemoryBound(to: CChar.self), buffer.count) }
        }
    }

    // MARK: Directories

    func opendir(_ ino: fuse_ino_t) throws(Errno) -> DirectoryHandle {
        let node = try inodes.inode(ino)
        let fd = try inodes.withDescriptor(node) { nodeFD throws(Errno) in
            try inodes.exhaustible { clinux_reopen(nodeFD, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
        }
        guard let stream = fdopendir(fd) else {
            let error = Errno.current
            Glibc.close(fd)
            throw error
        }
        let location = inodes.location(of: node)
        return DirectoryHandle(node: node, stream: stream, location: location, hidesNames: layout.hidesNames(in: location))
    }

    /// Fills `buffer` with entries from `offset` on, as `fuse_add_direntry(_plus)` lays
    /// them out; returns the bytes used. With `plus`, each entry is also looked up.
    func readdir(_ request: fuse_req_t?, _ handle: DirectoryHandle, _ offset: off_t, _ buffer: UnsafeMutablePointer<CChar>, _ size: Int, plus: Bool) throws(Errno) -> Int {
        if offset != handle.offset {
            seekdir(handle.stream, Int(offset))
            handle.pending = nil
            handle.offset = offset
        }
        var used = 0
        while true {
            if handle.pending == nil {
                errno = 0
                guard let entry = Glibc.readdir(handle.stream) else {
                    if errno != 0, used == 0 { throw Errno.current }
                    break
                }
                handle.pending = entry
            }
            let dirent = handle.pending!
            let nextOffset = dirent.pointee.d_off
            let skipped = try withEntryName(dirent) { (name, bytes) throws(Errno) -> Bool in
                let isDot = bytes.count <= 2 && bytes.allSatisfy { $0 == UInt8(ascii: ".") }
                if !isDot, handle.hidesNames, layout.child(Array(bytes), of: handle.location) == .hidden { return true }
                let remaining = size - used
                if plus {
                    var param = fuse_entry_param()
                    if isDot {
                        param.attr.st_ino = dirent.pointee.d_ino
                        param.attr.st_mode = mode_t(dirent.pointee.d_type) << 12
                    } else {
                        param = try entry(handle.node, name, Array(bytes), layout.child(Array(bytes), of: handle.location))
                    }
                    param.attr = shown(param.attr)
                    let needed = fuse_add_direntry_plus(request, buffer + used, remaining, name, &param, nextOffset)
                    if needed > remaining {
                        if param.ino != 0 { forget(param.ino, 1) }
                        return false
                    }
                    used += needed
                } else {
                    var info = stat()
                    info.st_ino = dirent.pointee.d_ino
                    info.st_mode = mode_t(dirent.pointee.d_type) << 12
                    let needed = fuse_add_direntry(request, buffer + used, remaining, name, &info, nextOffset)
                    if needed > remaining { return false }
                    used += needed
                }
                return true
            }
            if !skipped { break }
            handle.pending = nil
            handle.offset = nextOffset
        }
        return used
    }

    // MARK: Helpers

    /// Open flags that can change a file (SPEC §2): `O_TRUNC` counts even with `O_RDONLY`.
    @inline(__always)
    static func isMutation(_ flags: Int32) -> Bool {
        flags & O_ACCMODE != O_RDONLY || flags & (O_TRUNC | O_APPEND) != 0
    }

    /// The flags to open the store file with. `O_DIRECT` is served by `direct_io` instead:
    /// the kernel's buffers are not aligned as the store would require.
    @inline(__always)
    private func storeFlags(_ flags: Int32) -> Int32 {
        var result = flags & ~(clinux_O_DIRECT | O_NOFOLLOW | O_CREAT | O_EXCL | O_NOCTTY)
        if writeback {
            if result & O_ACCMODE == O_WRONLY { result = (result & ~O_ACCMODE) | O_RDWR }
            result &= ~O_APPEND
        }
        return result
    }

    private func reopen(_ node: Inode, _ flags: Int32) throws(Errno) -> (fd: Int32, directIO: Bool) {
        let fd = try inodes.withDescriptor(node) { nodeFD throws(Errno) in
            try inodes.exhaustible { clinux_reopen(nodeFD, storeFlags(flags) | O_CLOEXEC) }
        }
        return (fd, flags & clinux_O_DIRECT != 0)
    }

    private func child(_ parent: fuse_ino_t, _ name: UnsafePointer<CChar>) throws(Errno) -> (Inode, [UInt8], Location) {
        let directory = try inodes.inode(parent)
        let childName = try bytes(of: name)
        return (directory, childName, layout.child(childName, of: inodes.location(of: directory)))
    }

    /// A name from the kernel as bytes; never `.`, `..` or containing `/`.
    private func bytes(of name: UnsafePointer<CChar>) throws(Errno) -> [UInt8] {
        let count = strlen(name)
        let bytes = Array(UnsafeRawBufferPointer(start: name, count: count))
        guard count > 0, !bytes.contains(UInt8(ascii: "/")), bytes != [0x2E], bytes != [0x2E, 0x2E] else { throw Errno(EINVAL) }
        return bytes
    }

    private func attributes(_ node: Inode) throws(Errno) -> stat {
        var info = stat()
        try inodes.withDescriptor(node) { fd throws(Errno) in try sys { fstatat(fd, "", &info, clinux_AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) } }
        return info
    }

    /// Looks `name` up in `directory` and tells the kernel about it.
    private func entry(_ directory: Inode, _ name: UnsafePointer<CChar>, _ childName: [UInt8], _ location: Location) throws(Errno) -> fuse_entry_param {
        let fd = try inodes.withDescriptor(directory) { directoryFD throws(Errno) in
            try inodes.exhaustible { openat(directoryFD, name, clinux_O_PATH | O_NOFOLLOW | O_CLOEXEC) }
        }
        return try entry(holding: fd, in: directory, named: childName, location)
    }

    /// Tells the kernel about the node `fd` (an `O_PATH` descriptor, owned from here on)
    /// found in `directory`. An unnamed node (`O_TMPFILE`) is named as Linux names it in
    /// /proc, `#INODE`, until it is linked somewhere.
    private func entry(holding fd: Int32, in directory: Inode, named name: [UInt8]?, _ location: Location) throws(Errno) -> fuse_entry_param {
        var info = stat()
        if fstatat(fd, "", &info, clinux_AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0 {
            let error = Errno.current
            Glibc.close(fd)
            throw error
        }
        let node = inodes.remember(fd: fd, info: info, parent: directory, name: name ?? Array("#\(info.st_ino)".utf8))
        var param = fuse_entry_param()
        param.ino = inodes.ino(node)
        param.attr = info
        param.attr_timeout = timeouts.attributes
        param.entry_timeout = timeouts.entry
        return param
    }

    private func negativeEntry() -> fuse_entry_param {
        var param = fuse_entry_param()
        param.entry_timeout = timeouts.entry
        return param
    }

    /// After creating `name`: looks it up and, when the daemon is root, gives it to the caller.
    /// The change goes through the new node's own descriptor, never its name, which
    /// another request could already have moved.
    private func created(_ caller: Caller, _ directory: Inode, _ name: UnsafePointer<CChar>, _ childName: [UInt8], _ location: Location) throws(Errno) -> fuse_entry_param {
        var param = try entry(directory, name, childName, location)
        let node = try inodes.inode(param.ino)
        inheritProtection(from: directory, to: node)
        try handOver(caller, directory, node, &param)
        return param
    }

    /// When the daemon is root, gives the new `node` of `directory` to the caller and
    /// updates `param`'s attributes.
    private func handOver(_ caller: Caller, _ directory: Inode, _ node: Inode, _ param: inout fuse_entry_param) throws(Errno) {
        guard daemonIsRoot, caller.uid != 0 || caller.gid != 0 else { return }
        var parentInfo = stat()
        try inodes.withDescriptor(directory) { fd throws(Errno) in try sys { fstatat(fd, "", &parentInfo, clinux_AT_EMPTY_PATH) } }
        // In a set-group-ID directory the new node keeps the directory's group.
        let gid = parentInfo.st_mode & S_ISGID != 0 ? gid_t.max : caller.gid
        try inodes.withDescriptor(node) { fd throws(Errno) in
            try sys { fchownat(fd, "", caller.uid, gid, clinux_AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) }
            // chown clears set-user/group-ID bits on files; put back what was asked for.
            if param.attr.st_mode & (S_ISUID | S_ISGID) != 0, node.type == S_IFREG {
                try sys { clinux_fchmod_path_fd(fd, param.attr.st_mode & 0o7777) }
            }
        }
        param.attr = try attributes(node)
    }
}

/// An open directory: the stream and where the kernel is in it.
final class DirectoryHandle {
    let node: Inode
    let stream: OpaquePointer
    /// The directory's location when opened, to hide the store's own names.
    let location: Location
    /// Whether any of its names can be hidden; most directories' cannot.
    let hidesNames: Bool
    var offset: off_t = 0
    /// An entry read but not yet returned because the kernel's buffer was full.
    var pending: UnsafeMutablePointer<dirent>?

    init(node: Inode, stream: OpaquePointer, location: Location, hidesNames: Bool) {
        self.node = node
        self.stream = stream
        self.location = location
        self.hidesNames = hidesNames
    }

    deinit { closedir(stream) }
}

/// Calls `body` with a `dirent`'s name as a C string and as bytes, without copying.
@inline(__always)
private func withEntryName<R>(_ entry: UnsafeMutablePointer<dirent>, _ body: (UnsafePointer<CChar>, UnsafeRawBufferPointer) throws(Errno) -> R) throws(Errno) -> R {
    let raw = UnsafeRawPointer(entry) + MemoryLayout<dirent>.offset(of: \.d_name)!
    let name = raw.assumingMemoryBound(to: CChar.self)
    return try body(name, UnsafeRawBufferPointer(start: raw, count: strlen(name)))
}
