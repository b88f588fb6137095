import ArgumentParser
import CLinux
import ContainerFS
import ContainerRun
import ContainerSigning
import ContainerStore
import Foundation
import Glibc

struct Mount: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Mount a container, enforcing its rules on every operation.",
        discussion: """
            Returns once the mount is ready, with the daemon in the background; -f keeps it in \
            the foreground. Options (-o, comma-separated): allow_other (let other users in), \
            writeback (kernel write cache: faster small writes, unsynced data lost if the daemon \
            is killed; turns passthrough off), nopassthrough (file data through the daemon even \
            when it could go straight to the store), uring (turn on the kernel's FUSE over \
            io_uring, root: requests served on the caller's CPU; used by default when already \
            on), nouring (requests through /dev/fuse), nosetid (chmod, create and mknod drop \
            set-user-ID and set-group-ID bits from files; run uses it), appuser=UID:GID (root: show \
            the store owner's files to that host user as its own and record what it makes as the \
            owner's; root's run uses it for _containerfs), locked (start with the \
            device locked since boot: see containerfs lock, docs/protection.md), power-loss (track \
            what fsync made durable, so that 'containerfs power-cut' can drop the rest as a power \
            failure would; writes come through the daemon: no passthrough, no writeback; \
            power-loss=ext4: any fsync makes every name change durable, as ext4's journal does, \
            instead of its folder's fsync; see docs/power-loss.md), timeout=SECONDS (kernel cache of names and \
            attributes, default 86400), threads=N (default 16), debug, count-requests (count the \
            requests served by kind, for the bench's requests per file: see docs/benchmarks.md); \
            allow_root and auto_unmount go to libfuse; the fstab words rw, auto, noauto, nofail, _netdev, \
            user, users, noatime, relatime, dev, nodev, suid, nosuid, exec and noexec are accepted; \
            any other option is refused.

            A container with a capacity (see 'containerfs capacity') is a device of that size: \
            writes past it fail with ENOSPC and df shows it; its files open without passthrough. \
            --low-storage first frees space as iOS does on a full device, e.g. \
            'containerfs mount ~/C ~/mnt --low-storage 10%' empties tmp/ and purges caches, \
            least recently used first, until 10 % of the capacity is free. See docs/capacity.md.
            """)

    @Argument(help: "The container's store.")
    var store: String

    @Argument(help: "An existing empty folder to mount it on.")
    var mountpoint: String

    @Flag(name: .customShort("f"), help: "Stay in the foreground.")
    var foreground = false

    @Option(name: .customShort("o"), help: "Mount options, comma-separated.")
    var options: [String] = []

    @Option(help: "The installer key the bundle was signed with (default: see docs/signing.md).")
    var key: String?

    @Option(name: .customLong("low-storage"), help: ArgumentHelp("Before mounting, if less than this is free (a size, or a percentage of the capacity), empty tmp and purge caches least recently used first until it is, printing what went.", valueName: "SIZE|PERCENT"))
    var lowStorage: String?

    @Option(help: .hidden)
    var readyFD: Int32?

    /// The read end of a pipe only the starting `run` writes to (`MountDaemon.startTied`).
    @Option(help: .hidden)
    var lifelineFD: Int32?

    func run() throws {
        try reportingErrors {
            let parsed = try MountOptions.parse(options)
            // Only a purge for low storage changes the store before the daemon counts it, and
            // what it deletes drops the recorded count itself (ContainerPurge).
            let opened = try Store.open(store, changing: false)
            // A tampered bundle does not launch (SPEC §5); the daemon's parent has checked.
            if readyFD == nil { try BundleVerification.requireIntact(opened, keyPath: key) }
            try MountDaemon.checkMountpoint(mountpoint)
            if let holder = MountLock.holder(opened) {
                throw UserError("store \(store) is already mounted at \(holder.mountpoint) (daemon pid \(holder.pid)): unmount it first with 'containerfs unmount'")
            }
            if let lowStorage { try purgeForLowStorage(opened, lowStorage, option: "--low-storage") }
            if foreground {
                try serve(opened, parsed)
            } else {
                try MountDaemon.start(store: store, mountpoint: mountpoint, options: options)
            }
        }
    }

    /// Runs the daemon in this process until the container is unmounted.
    private func serve(_ opened: Store, _ parsed: MountOptions) throws(UserError) {
        // Before the mount: looking at the mount point then would wait for this daemon itself.
        let absoluteMountpoint = MountEntry.absolute(mountpoint)
        // Refused here, the reason goes to the waiting parent (mount, run) as its one line:
        // a lock file the store's owner replaced by a FIFO or a folder said only "the
        // daemon exited before the mount was ready".
        let lock: MountLock
        do { lock = try MountLock(store: opened, mountpoint: absoluteMountpoint) } catch {
            report(ready: false, error.message)
            throw error
        }
        let audit = AuditLog(stateFD: opened.stateFD)
        defer { audit.close() }
        var parsed = parsed
        // The store's path names the mount in `mount` and `df`, and lets `unmount` find it.
        parsed.fuseOptions.append("fsname=" + escapeOption(URL(fileURLWithPath: opened.path).standardizedFileURL.path))
        let session: Session
        do {
            session = try Session(store: opened, mountpoint: mountpoint, options: parsed, audit: audit)
        } catch {
            report(ready: false, error.message)
            throw error
        }
        var lifeline: Lifeline?
        if let lifelineFD {
            // A starter killed before it reads "ready" must not kill this daemon with SIGPIPE.
            signal(SIGPIPE, SIG_IGN)
            lifeline = Lifeline(watching: lifelineFD, store: opened, mountpoint: absoluteMountpoint)
        }
        report(ready: true, "")
        session.run()
        lifeline?.finish()
        withExtendedLifetime(lock) {}
    }

    /// Tells the parent waiting in `startDaemon` how the mount went, then detaches from it.
    private func report(ready: Bool, _ message: String) {
        guard let readyFD else { return }
        let line = Array((ready ? "ready\n" : "error: \(message)\n").utf8)
        _ = line.withUnsafeBytes { write(readyFD, $0.baseAddress, $0.count) }
        close(readyFD)
    }

    /// libfuse splits -o at commas; a comma inside a value is escaped.
    private func escapeOption(_ value: String) -> String {
        value.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: ",", with: "\\,")
    }
}
