import CLinux
import ContainerPolicy
import Glibc

/// A container's directory on disk: the tree a mount shows, plus the state folder.
///
/// Everything below the root is reached through `rootFD` with `*at` calls that do not
/// follow symlinks, so nothing in the store can lead the daemon outside it.
public final class Store: Sendable {
    /// The path the user named, for messages only.
    public let path: String
    /// An `O_PATH` descriptor of the store's root directory.
    public let rootFD: Int32
    /// An `O_PATH` descriptor of the state folder, `.containerfs/`.
    public let stateFD: Int32
    /// The container's layout, with its bundle's name.
    public let layout: ContainerLayout
    /// What is kept of the app when it is offloaded (`containerfs offload`); nil when installed.
    public let offloaded: OffloadRecord?

    private init(path: String, rootFD: Int32, stateFD: Int32, layout: ContainerLayout, offloaded: OffloadRecord?) {
        self.path = path
        self.rootFD = rootFD
        self.stateFD = stateFD
        self.layout = layout
        self.offloaded = offloaded
    }

    deinit {
        close(stateFD)
        close(rootFD)
    }

    /// The marker a store's state folder holds, so a foreign directory is never taken for one.
    static let formatName = Array(name: "format")
    static let formatContents = Array("containerfs-store 1\n".utf8)
    static let bundleNameFile = Array(name: "bundle-name")
    /// A group container's state folder holds its identifier here instead of a bundle name.
    static let groupIdentifierFile = Array(name: "group-id")

    /// Opens the store at `path` and checks that it is a whole container.
    ///
    /// `changing`: whether the caller may change the bytes the container holds (deliver,
    /// purge, update, offload, run...): then the summary of used space a clean unmount left
    /// is dropped here, before any change, so the next mount counts the store again. Only
    /// commands that change nothing (usage, verify, audit, backup, capacity) pass false.
    /// `replacingCapacity`: a damaged capacity file is no reason to refuse (the capacity
    /// command is about to write it anew).
    public static func open(_ path: String, changing: Bool = true, replacingCapacity: Bool = false) throws(UserError) -> Store {
        let rootFD = Glibc.open(path, clinux_O_PATH | O_DIRECTORY | O_CLOEXEC)
        guard rootFD >= 0 else {
            let error = Errno.current
            switch error.code {
            case ENOENT: throw UserError("no store at \(path): make one with 'containerfs create \(path) --bundle NAME.app'")
            case ENOTDIR: throw UserError("\(path) is not a folder: name a container store made with 'containerfs create'")
            default: throw UserError.failed("cannot open store \(path)", error)
            }
        }
        return try open(rootFD: rootFD, path: path, changing: changing, replacingCapacity: replacingCapacity)
    }

    /// Opens the store `name` inside the folder `parentFD`, following no symlink; `path`
    /// names it for messages.
    public static func open(at parentFD: Int32, _ name: [UInt8], path: String, changing: Bool = true) throws(UserError) -> Store {
        let rootFD: Int32
        do {
            rootFD = try openDirectory(at: parentFD, name)
        } catch {
            throw UserError.failed("cannot open store \(path)", error)
        }
        return try open(rootFD: rootFD, path: path, changing: changing, replacingCapacity: false)
    }

    /// Checks the store whose root is open at `rootFD` (owned: closed on failure).
    private static func open(rootFD: Int32, path: String, changing: Bool, replacingCapacity: Bool) throws(UserError) -> Store {
        do {
            let stateFD = try openDirectory(at: rootFD, ContainerLayout.stateFolderName)
            do {
                guard try readFile(at: stateFD, formatName, limit: smallStateFileLimit) == formatContents else { throw Errno(EINVAL) }
                // An update or offload a crash cut short is finished first (SPEC §12).
                do {
                    try BundleSwitch.recover(rootFD: rootFD, stateFD: stateFD)
                } catch {
                    if error.code == EWOULDBLOCK { throw BundleSwitch.Lock.held(stateFD: stateFD, statePath: path + "/.containerfs") }
                    throw UserError("cannot finish the interrupted update of \(path): \(error); open it again as its owner")
                }
                let layout: ContainerLayout
                let offloaded: OffloadRecord?
                if let group = try? readFile(at: stateFD, groupIdentifierFile, limit: smallStateFileLimit) {
                    guard AppGroup.problem(with: String(decoding: group, as: UTF8.self)) == nil else { throw Errno(EINVAL) }
                    (layout, offloaded) = (ContainerLayout(groupIdentifier: group), nil)
                } else {
                    guard let bundleName = try? readBundleName(at: stateFD) else {
                        // A name that is a path is damage, said so; a missing file is an incomplete store.
                        if let recorded = try? readFile(at: stateFD, bundleNameFile, limit: smallStateFileLimit), !ContainerLayout.isBundleName(recorded) {
                            throw UserError("store \(path) is damaged: .containerfs/bundle-name names no NAME.app folder of the store (a path, or nothing); create the container again")
                        }
                        throw Errno(EINVAL)
                    }
                    (layout, offloaded) = (ContainerLayout(bundleName: bundleName), try OffloadRecord.read(stateFD: stateFD, bundleName: bundleName))
                }
                let store = Store(path: path, rootFD: rootFD, stateFD: stateFD, layout: layout, offloaded: offloaded)
                try store.checkStructure()
                try store.checkSettings(exceptCapacity: replacingCapacity)
                if changing { Capacity.forgetSummary(stateFD: stateFD) }
                return store
            } catch let error as UserError {
                close(stateFD)
                throw error
            } catch {
                close(stateFD)
                throw UserError("\(path) is not a container store (its .containerfs/ is incomplete): make one with 'containerfs create'")
            }
        } catch let error as UserError {
            close(rootFD)
            throw error
        } catch {
            close(rootFD)
            throw UserError("\(path) is not a container store (no .containerfs/ folder): make one with 'containerfs create'")
        }
    }

    /// A setting in the state folder that is there but does not parse is one clear line,
    /// never a silent default (no capacity, iOS's class): a test of a full device must not
    /// pass on an unlimited one.
    private func checkSettings(exceptCapacity: Bool) throws(UserError) {
        if !exceptCapacity, Capacity.isDamaged(stateFD: stateFD) {
            throw UserError("the capacity of \(path) is damaged (.containerfs/capacity holds no number of bytes): set it again with 'containerfs capacity \(path) SIZE' (or none)")
        }
        if Self.defaultProtectionIsDamaged(stateFD: stateFD) {
            throw UserError("the default protection class of \(path) is damaged (.containerfs/protection names no class): write the class it should have (\(ProtectionClass.allCases.map(\.rawValue).joined(separator: ", "))) into that file")
        }
    }

    /// Fails unless the bundle and every standard directory are real directories.
    private func checkStructure() throws(UserError) {
        let bundle = offloaded == nil && !layout.isGroup ? [ContainerPath(components: [layout.bundleName])] : []
        let required = bundle + layout.standardDirectories.map(\.path)
        for directory in required {
            var info = stat()
            let found = withCName(directory.bytes) { fstatat(rootFD, $0, &info, AT_SYMLINK_NOFOLLOW) } == 0
            guard found, info.st_mode & S_IFMT == S_IFDIR else {
                throw UserError("store \(path) is damaged: \(directory) is missing or not a folder; restore it or create the container again")
            }
        }
    }

    /// The group's identifier when this is an App Group container, else nil.
    public var groupIdentifier: String? { layout.groupIdentifier.map { String(decoding: $0, as: UTF8.self) } }

    /// The path of the store's state folder, for messages.
    public var statePath: String { path + "/.containerfs" }
}

/// Opens the directory `name` inside `parent` as an `O_PATH` descriptor, following no symlink.
public func openDirectory(at parent: Int32, _ name: [UInt8]) throws(Errno) -> Int32 {
    try withCName(name) { (cname) throws(Errno) in
        try sys { openat(parent, cname, clinux_O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
    }
}

/// Opens the regular file `name` inside `parent` for reading, following no symlink in its
/// last component (`parent` may be `AT_FDCWD` and `name` a path); anything but a regular
/// file is `EINVAL`, closed again without a byte read. The one way a command or the daemon
/// opens a file that someone else may swap (the store's owner, a user handing a file over)
/// to read it.
///
/// `O_NONBLOCK`: a FIFO put in the file's place between a check of its type and the open
/// would otherwise block the open (for good, with no writer) and every read after it; a
/// device would be read as data. The flag changes nothing for a regular file. `O_NOCTTY`: a
/// terminal never becomes the command's controlling one.
public func openRegularFile(at parent: Int32, _ name: [UInt8]) throws(Errno) -> Int32 {
    let fd = try withCName(name) { (cname) throws(Errno) in
        try sys { openat(parent, cname, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC) }
    }
    guard isRegularFile(fd) else {
        close(fd)
        throw Errno(EINVAL)
    }
    return fd
}

/// The error that would refuse setting an extended attribute, asked without setting it,
/// or nil: `present` (a `getxattr` of its size) says whether it is there, then `probe` (a
/// `setxattr` given its flags) can only fail: `XATTR_CREATE` while it is there, `XATTR_REPLACE`
/// while it is not. The permission checks (and through a mount, the container's rules)
/// answer it as they would the change, so a command naming several paths can refuse them
/// all before it changes any. A full device (`ENOSPC`, `EDQUOT`) is no refusal: it refuses
/// a new attribute, not a change or a removal.
public func attributeChangeRefusal(present: () -> Int, probe: (Int32) -> Int32) -> Errno? {
    let isThere = present() >= 0
    guard isThere || errno == ENODATA else { return Errno.current }
    guard probe(isThere ? Int32(XATTR_CREATE) : Int32(XATTR_REPLACE)) != 0 else { return nil }
    return [EEXIST, ENODATA, ENOSPC, EDQUOT].contains(errno) ? nil : Errno.current
}

/// Whether `fd` is open on a regular file (else a FIFO, socket, device, folder or symlink).
public func isRegularFile(_ fd: Int32) -> Bool {
    var info = stat()
    return fstat(fd, &info) == 0 && info.st_mode & S_IFMT == S_IFREG
}

/// The most a state file of one line (a format, a name, a number) may hold.
public let smallStateFileLimit = 4096

/// Reads the regular file `name` inside `parent` whole; anything but a regular file is
/// `EINVAL`, one longer than `limit` bytes `EFBIG` (a planted state file of 100 GB must
/// not take the command's memory).
///
/// Opened with `O_NONBLOCK`: a state file replaced by a FIFO (or a device) must not block
/// the daemon or the command in `open` or `read`. The flag changes nothing for a regular
/// file.
public func readFile(at parent: Int32, _ name: [UInt8], limit: Int = 1 << 30) throws(Errno) -> [UInt8] {
    // (The /proc files MountTable and AuditLog read are regular files too.)
    let fd = try openRegularFile(at: parent, name)
    defer { close(fd) }
    var info = stat()
    try sys { fstat(fd, &info) }
    guard info.st_size <= limit else { throw Errno(EFBIG) }
    var contents: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 65536)
    while true {
        let count = try sys { chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) } }
        if count == 0 { return contents }
        // Files of /proc say size 0; and a file may grow as it is read.
        guard contents.count + count <= limit else { throw Errno(EFBIG) }
        contents += chunk[0..<count]
    }
}

/// Gives the file or folder open at `fd`, which the caller just made (or opened to write) in
/// the folder `folderFD`, to that folder's owner when root made it: a store's state folder
/// and its files are the owner's, whose own commands and daemons open them (a lock, the
/// audit log, the tag index, the staging folder). Root's `run`, `mount`, `deliver` or
/// `share put` of another user's store left them root's, mode 0600, and the owner's next
/// `run`, `update` or `deliver` failed with "Permission denied".
///
/// A file with another name (a hard link planted to a file of root's, which the kernel
/// allows with `fs.protected_hardlinks` off) is never given away; a folder has none.
public func ownedLikeTheFolder(_ fd: Int32, _ folderFD: Int32) {
    guard geteuid() == 0 else { return }
    var folder = stat(), node = stat()
    guard fstat(folderFD, &folder) == 0, fstat(fd, &node) == 0, node.st_uid != folder.st_uid || node.st_gid != folder.st_gid else { return }
    let type = node.st_mode & S_IFMT
    guard type == S_IFDIR || (type == S_IFREG && node.st_nlink == 1) else { return }
    _ = fchown(fd, folder.st_uid, folder.st_gid)
}

/// Whether the file open at `fd` is a regular file with no other name: what a state file
/// must be before it is truncated, written or chowned. The state folder is the store
/// owner's to write; a hard link planted there to a file of root's (which the kernel
/// allows with `fs.protected_hardlinks` off) would otherwise have root's daemon or command
/// wipe or overwrite that file.
public func isSoleName(_ fd: Int32) -> Bool {
    var info = stat()
    return fstat(fd, &info) == 0 && info.st_mode & S_IFMT == S_IFREG && info.st_nlink == 1
}

/// The bundle's name recorded in the state folder `stateFD` (a store's, or a staged one);
/// `EBADMSG` unless it is one `NAME.app` folder name (`ContainerLayout.isBundleName`): a
/// recorded path would lead the `*at` calls naming the bundle out of the store.
func readBundleName(at stateFD: Int32) throws(Errno) -> [UInt8] {
    let name = try readFile(at: stateFD, Store.bundleNameFile, limit: smallStateFileLimit)
    guard ContainerLayout.isBundleName(name) else { throw Errno(EBADMSG) }
    return name
}

/// Whether the small state file `name` in `stateFD` is there but unusable: it cannot be
/// read (a FIFO, too large), or `parse` finds nothing in it.
func stateFileIsDamaged(_ stateFD: Int32, _ name: [UInt8], parse: () -> Any?) -> Bool {
    do {
        _ = try readFile(at: stateFD, name, limit: smallStateFileLimit)
    } catch {
        return error.code != ENOENT
    }
    return parse() == nil
}

/// Writes `contents` to a new file `name` inside `parent` (which must not exist), with `mode`,
/// owned by `owner` if given, else by `parent`'s owner when root writes it
/// (`ownedLikeTheFolder`).
public func writeNewFile(at parent: Int32, _ name: [UInt8], _ contents: [UInt8], mode: mode_t = 0o644, owner: Owner? = nil) throws(Errno) {
    let fd = try withCName(name) { (cname) throws(Errno) in
        try sys { openat(parent, cname, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode) }
    }
    defer { close(fd) }
    if let owner { try sys { fchown(fd, owner.uid, owner.gid) } } else { ownedLikeTheFolder(fd, parent) }
    var written = 0
    while written < contents.count {
        let offset = written
        written += try sys { contents.withUnsafeBytes { write(fd, $0.baseAddress! + offset, $0.count - offset) } }
    }
}
