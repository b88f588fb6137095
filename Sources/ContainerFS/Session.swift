import CFuse
import CLinux
import ContainerDurability
import ContainerPolicy
import ContainerStore
import Glibc

/// How a container is mounted.
public struct MountOptions: Sendable {
    /// Let other users enter the mount (needs `user_allow_other` in /etc/fuse.conf for non-root).
    public var allowOther = false
    /// Let the kernel cache writes (faster small writes; written data reaches the store
    /// only when the kernel flushes it, so a killed daemon can lose what was not fsynced).
    public var writeback = false
    /// Let the kernel read and write open files straight from the store (FUSE passthrough,
    /// Linux 6.9+, daemon with CAP_SYS_ADMIN); `nopassthrough` turns it off.
    public var passthrough = true
    /// Whether requests come through one io_uring per CPU instead of /dev/fuse.
    public var uring = Uring.whenOffered
    /// Seconds the kernel may cache names and attributes.
    public var cacheTimeout: Double = 86400
    /// Worker threads at most.
    public var maxThreads: UInt32 = 16
    /// Print every FUSE request (libfuse's `-d`).
    public var debug = false
    /// Count the requests served, by kind (`count-requests`): the control socket's
    /// `requests` command answers with the counts (`ControlChannel.requestCounts`; the
    /// bench reads them to print requests per file).
    public var countRequests = false
    /// Never set a set-user-ID or set-group-ID bit on a file that is not a folder (`nosetid`):
    /// chmod, create and mknod drop them. `run` mounts with it, so that a program root ran
    /// cannot leave a root set-user-ID program in the store.
    public var noSetID = false
    /// Start locked since boot (`locked`; SPEC §11): data of classes other than `none`
    /// stays unavailable until `containerfs unlock`.
    public var locked = false
    /// The host user root's `run` program is (`appuser=UID:GID`): shown the store owner's
    /// files as its own, and what it makes recorded as the owner's (OwnerMapping.swift).
    public var appUser: (uid: uid_t, gid: gid_t)?
    /// Track what is durable, for power cuts (`power-loss`, docs/power-loss.md): writes then
    /// all come through the daemon (no passthrough, no writeback cache).
    public var powerLoss = false
    /// When names become durable (`power-loss=ext4`: with any fsync).
    public var powerLossModel = Durability.NameModel.posix
    /// Further options for libfuse (`allow_root`, `auto_unmount`, `noexec`, `fsname=`).
    public var fuseOptions: [String] = []

    public init() {}

    /// FUSE over io_uring (Linux 6.14+): the kernel offers it only while the fuse module's
    /// `enable_uring` parameter is on, a switch for the whole machine that is off by default.
    public enum Uring: Sendable {
        /// Requests through /dev/fuse (`nouring`).
        case off
        /// Through io_uring if the kernel offers it and the daemon runs as root (the default).
        case whenOffered
        /// As `whenOffered`, turning the kernel's switch on if needed (`uring`, root only).
        case on
    }

    /// Parses `-o a,b=c` options. mount(8) and fstab words that mean nothing to a FUSE
    /// daemon are accepted and ignored; anything unknown is a usage error.
    public static func parse(_ text: [String]) throws(UserError) -> MountOptions {
        var options = MountOptions()
        for item in text.flatMap({ $0.split(separator: ",").map(String.init) }) {
            // Empty pieces kept: "=" is a name "" and a value "", refused below, not a trap.
            let parts = item.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
            switch parts.first ?? "" {
            case "allow_other": options.allowOther = true
            case "writeback", "writeback_cache": options.writeback = true
            case "nopassthrough": options.passthrough = false
            case "nosetid": options.noSetID = true
            case "locked": options.locked = true
            case "power-loss":
                options.powerLoss = true
                if parts.count == 2 {
                    guard let model = Durability.NameModel(rawValue: parts[1]) else {
                        throw UserError.usage("bad mount option '\(item)': power-loss takes posix or ext4, as power-loss=ext4")
                    }
                    options.powerLossModel = model
                }
            case "uring": options.uring = .on
            case "nouring": options.uring = .off
            case "debug": options.debug = true
            case "count-requests": options.countRequests = true
            case "appuser":
                let ids = parts.count == 2 ? parts[1].split(separator: ":", omittingEmptySubsequences: false) : []
                guard ids.count == 2, let uid = uid_t(ids[0]), let gid = gid_t(ids[1]), uid != 0, gid != 0, uid != uid_t.max, gid != gid_t.max else {
                    throw UserError.usage("bad mount option '\(item)': appuser takes a user's uid and gid, neither 0, as appuser=994:993")
                }
                options.appUser = (uid, gid)
            case "timeout":
                guard parts.count == 2, let seconds = Double(parts[1]), seconds >= 0 else {
                    throw UserError.usage("bad mount option '\(item)': timeout takes seconds, as timeout=1")
                }
                options.cacheTimeout = seconds
            case "threads":
                guard parts.count == 2, let count = UInt32(parts[1]), count > 0 else {
                    throw UserError.usage("bad mount option '\(item)': threads takes a count, as threads=8")
                }
                options.maxThreads = count
            case "default_permissions", "nodev", "nosuid", "rw", "dev", "suid", "exec", "noexec", "noatime", "relatime", "auto", "noauto", "nofail", "_netdev", "user", "users":
                // mount(8) and fstab words: ours are fixed (permissions always checked,
                // no devices, no set-user-ID), the rest mean nothing to a FUSE daemon.
                if parts.first == "noexec" { options.fuseOptions.append("noexec") }
            case "ro":
                throw UserError.usage("mount option 'ro' is not supported: the container's rules already decide what is writable")
            case "allow_root", "auto_unmount":
                options.fuseOptions.append(item)
            default:
                // Checked here, not by libfuse in the daemon: the user gets the one bad word.
                throw UserError.usage("unknown mount option '\(item)': see 'containerfs mount --help'")
            }
        }
        if options.powerLoss {
            // The daemon must see every write to know what is durable.
            guard !options.writeback else {
                throw UserError.usage("mount options 'power-loss' and 'writeback' do not go together: the kernel would hold back writes the daemon must see")
            }
            options.passthrough = false
        }
        return options
    }
}

extension FileSystem {
    /// Chooses the kernel features the filesystem runs with (FUSE `init`).
    func configure(_ connection: UnsafeMutablePointer<fuse_conn_info>) {
        var wanted = UInt32(FUSE_CAP_ASYNC_READ | FUSE_CAP_ATOMIC_O_TRUNC
            | FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE | FUSE_CAP_READDIRPLUS | FUSE_CAP_READDIRPLUS_AUTO
            | FUSE_CAP_PARALLEL_DIROPS | FUSE_CAP_AUTO_INVAL_DATA | FUSE_CAP_CACHE_SYMLINKS
            | FUSE_CAP_DONT_MASK)
        if writeback { wanted |= UInt32(FUSE_CAP_WRITEBACK_CACHE) }
        let taken = cfuse_want(connection, wanted)
        writeback = taken & UInt32(FUSE_CAP_WRITEBACK_CACHE) != 0
        cfuse_set_limits(connection, 1 << 20, 1 << 20)
    }
}

/// A mounted container, from mount to unmount.
public final class Session {
    private let fileSystem: FileSystem
    private let session: OpaquePointer
    private let mountpoint: String
    private let options: MountOptions
    private var control: ControlServer?

    /// Mounts `store` at `mountpoint`. When this returns the mount is visible.
    public init(store: Store, mountpoint: String, options: MountOptions, audit: AuditLog) throws(UserError) {
        self.mountpoint = mountpoint
        self.options = options
        // Before the node cache sizes itself by it.
        DescriptorLimit.raise()
        do {
            fileSystem = try FileSystem(store: store, audit: audit,
                                        timeouts: CacheTimeouts(entry: options.cacheTimeout, attributes: options.cacheTimeout))
        } catch {
            throw UserError.failed("cannot read store \(store.path)", error)
        }
        fileSystem.writeback = options.writeback
        fileSystem.noSetID = options.noSetID
        if let app = options.appUser {
            var top = stat()
            guard fstat(store.rootFD, &top) == 0 else { throw UserError.failed("cannot read store \(store.path)", Errno.current) }
            fileSystem.ownerMapping = OwnerMapping(owner: (top.st_uid, top.st_gid), app: app)
        }
        fileSystem.protection.start(defaultClass: store.defaultProtection, lockedSinceBoot: options.locked)
        // A journal a daemon killed for real left goes; the store is as written.
        if options.powerLoss {
            // A removed file the journal kept is free once its removal is durable.
            let removingLink: @Sendable (InodeKey, () -> stat?) -> stat? = { [unowned fileSystem] key, unlink in
                fileSystem.removingJournalLink(key, unlink)
            }
            do { fileSystem.powerLoss = try PowerLoss(store: store, model: options.powerLossModel, removingLink: removingLink) } catch {
                throw UserError.failed("cannot make the power-loss journal in \(store.statePath)", error)
            }
        } else {
            PowerLoss.clear(store)
        }
        // With a capacity, the store is counted here: from the summary of the last clean
        // unmount, or by a walk (see docs/capacity.md).
        try fileSystem.space.attachDevice(store)
        fileSystem.space.reload(store)
        fileSystem.space.mounted(store)
        if options.uring == .on { try Self.switchOnKernelUring() }
        Tagging.mounted(store)

        // Permission bits are always checked by the kernel: the daemon may run as root.
        var mountOptions = ["default_permissions", "nodev", "nosuid", "subtype=containerfs", "fsname=containerfs"]
        if options.allowOther { mountOptions.append("allow_other") }
        mountOptions += options.fuseOptions
        var arguments = ["containerfs", "-o", mountOptions.joined(separator: ",")]
        if options.debug { arguments.append("-d") }
        cfuse_count_requests(options.countRequests)

        var ops = makeOperations()
        let userdata = Unmanaged.passRetained(fileSystem).toOpaque()
        let argv = arguments.map { strdup($0) } + [nil]
        var args = argv.withUnsafeBufferPointer { cfuse_args(Int32(arguments.count), UnsafeMutablePointer(mutating: $0.baseAddress)) }
        defer {
            fuse_opt_free_args(&args)
            argv.forEach { free($0) }
        }
        guard let session = cfuse_session_new(&args, &ops, MemoryLayout<fuse_lowlevel_ops>.size, userdata) else {
            Unmanaged<FileSystem>.fromOpaque(userdata).release()
            throw UserError.usage("bad mount options '\(mountOptions.joined(separator: ","))': see 'containerfs mount --help'")
        }
        self.session = session
        guard fuse_session_mount(session, mountpoint) == 0 else {
            fuse_session_destroy(session)
            throw UserError("cannot mount on \(mountpoint): is /dev/fuse there and fusermount3 installed? (apt-get install fuse3)")
        }
        // Asked for in INIT when the kernel offers them; passthrough not with the writeback
        // cache (CFuse checks the reply).
        cfuse_use_kernel_features(session, options.passthrough, options.uring != .off)
        do {
            control = try ControlServer(store: store, fileSystem: fileSystem, session: session)
        } catch {
            fuse_session_unmount(session)
            fuse_session_destroy(session)
            throw UserError.failed("cannot open the control socket in \(store.statePath)", error)
        }
    }

    static let kernelUringSwitch = "/sys/module/fuse/parameters/enable_uring"

    /// Turns on the kernel's FUSE over io_uring (it stays on until reboot; it only lets
    /// FUSE daemons that ask for io_uring use it).
    static func switchOnKernelUring() throws(UserError) {
        guard geteuid() == 0 else {
            throw UserError("FUSE over io_uring is for a daemon running as root: mount as root, or without -o uring")
        }
        let fd = open(kernelUringSwitch, O_RDWR | O_CLOEXEC)
        if fd < 0, errno == ENOENT {
            throw UserError("this kernel has no FUSE over io_uring (Linux 6.14+ built with CONFIG_FUSE_IO_URING): mount without -o uring")
        }
        defer { if fd >= 0 { close(fd) } }
        var state: UInt8 = 0
        if fd >= 0, read(fd, &state, 1) == 1, state == UInt8(ascii: "Y") { return }
        var on = UInt8(ascii: "Y")
        if fd < 0 || pwrite(fd, &on, 1, 0) != 1 {
            throw UserError("cannot turn on FUSE over io_uring (\(Errno.current)): echo Y > \(kernelUringSwitch), or mount without -o uring")
        }
    }

    /// Serves requests until the mount is unmounted or a signal (INT, TERM, HUP) arrives.
    public func run() {
        _ = fuse_set_signal_handlers(session)
        let config = fuse_loop_cfg_create()
        fuse_loop_cfg_set_clone_fd(config, 1)
        fuse_loop_cfg_set_max_threads(config, options.maxThreads)
        fuse_loop_cfg_set_idle_threads(config, options.maxThreads)
        _ = cfuse_session_loop_mt(session, config)
        fuse_loop_cfg_destroy(config)
        fuse_remove_signal_handlers(session)
        cfuse_end_kernel_features()
        if options.debug, cfuse_uring_active() {
            let line = "containerfs: \(cfuse_uring_requests()) requests served through io_uring\n"
            _ = line.withCString { write(2, $0, strlen($0)) }
        }
        fuse_session_unmount(session)
        fuse_session_destroy(session)
        control?.remove()
        let store = fileSystem.store
        let temporary = StandardDirectory.tmp.path.bytes
        // What emptying tmp/ frees: not a file also named elsewhere (a hard link), whose blocks stay.
        let before = fileSystem.space.isActive ? Capacity.freedBytes(at: store.rootFD, temporary) : 0
        Tagging.unmounted(store)
        let freed = fileSystem.space.isActive ? before - Capacity.freedBytes(at: store.rootFD, temporary) : 0
        fileSystem.space.unmounted(store, freedSince: freed)
    }
}
