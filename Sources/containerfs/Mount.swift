import ArgumentParser
import CLinux
import ContainerFS
import ContainerStore
import Foundation
import Glibc

struct Mount: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Mount a container, enforcing its rules on every operation.",
        discussion: """
            Returns once the mount is ready, with the daemon in the background; -f keeps it in
            the foreground. Options (-o, comma-separated): allow_other (let other users in),
            writeback (kernel write cache: faster small writes, unsynced data lost if the daemon
            is killed), timeout=SECONDS (kernel cache of names and attributes, default 86400),
            threads=N (default 16), debug; others are passed to libfuse.
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

    @Option(help: .hidden)
    var readyFD: Int32?

    func run() throws {
        try reportingErrors {
            let parsed = try MountOptions.parse(options)
            let opened = try Store.open(store)
            // A tampered bundle does not launch (SPEC §5); the daemon's parent has checked.
            if readyFD == nil { try BundleVerification.requireIntact(opened, keyPath: key) }
            try checkMountpoint()
            if let holder = MountLock.holder(opened) {
                throw UserError("store \(store) is already mounted at \(holder.mountpoint) (daemon pid \(holder.pid)): unmount it first with 'containerfs unmount'")
            }
            if foreground {
                try serve(opened, parsed)
            } else {
                try startDaemon()
            }
        }
    }

    private func checkMountpoint() throws(UserError) {
        var info = stat()
        guard stat(mountpoint, &info) == 0 else {
            if errno == ENOTCONN {
                throw UserError("\(mountpoint) is a mount whose daemon died: clear it with 'containerfs unmount \(mountpoint)'")
            }
            throw UserError("mount point \(mountpoint) does not exist: create the folder first (mkdir -p \(mountpoint))")
        }
        guard info.st_mode & S_IFMT == S_IFDIR else {
            throw UserError("mount point \(mountpoint) is not a folder: name an empty folder")
        }
        if let existing = MountEntry.at(mountpoint) {
            throw UserError("\(mountpoint) is already a mount point (\(existing.type) from \(existing.source)): unmount it first")
        }
        guard access("/dev/fuse", R_OK | W_OK) == 0 else {
            throw UserError("/dev/fuse is missing or not usable by this user: load FUSE (modprobe fuse) and apt-get install fuse3")
        }
        if geteuid() != 0, access("/usr/bin/fusermount3", X_OK) != 0, access("/bin/fusermount3", X_OK) != 0 {
            throw UserError("fusermount3 is not installed, so an ordinary user cannot mount: apt-get install fuse3")
        }
    }

    /// Runs the daemon in this process until the container is unmounted.
    private func serve(_ opened: Store, _ parsed: MountOptions) throws(UserError) {
        let lock = try MountLock(store: opened, mountpoint: MountEntry.absolute(mountpoint))
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
        report(ready: true, "")
        session.run()
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

    /// Starts this program again as a daemon in its own session (`mount -f`), and waits
    /// until it says the mount is ready or why it is not.
    private func startDaemon() throws(UserError) {
        var pipeFDs: [Int32] = [0, 0]
        guard pipe(&pipeFDs) == 0 else { throw UserError("cannot start the daemon: \(Errno.current)") }
        let (readEnd, writeEnd) = (pipeFDs[0], pipeFDs[1])
        // Neither end may leak into other children; the spawn's dup2 gives the daemon its copy.
        _ = fcntl(readEnd, F_SETFD, FD_CLOEXEC)
        _ = fcntl(writeEnd, F_SETFD, FD_CLOEXEC)
        let childReadyFD: Int32 = 3
        var arguments = ["containerfs", "mount", store, mountpoint, "-f", "--ready-fd", "\(childReadyFD)"]
        for option in options { arguments += ["-o", option] }

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, writeEnd, childReadyFD)
        for fd: Int32 in 0...2 { posix_spawn_file_actions_addopen(&actions, fd, "/dev/null", fd == 0 ? O_RDONLY : O_WRONLY, 0) }
        // A daemon holding a copy of its starter's output pipe would keep that reader waiting.
        clinux_spawn_close_from(&actions, childReadyFD + 1)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        // Its own session: the daemon outlives this terminal and its Ctrl-C.
        posix_spawnattr_setflags(&attributes, clinux_POSIX_SPAWN_SETSID)

        let argv = arguments.map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var pid: pid_t = 0
        let status = posix_spawn(&pid, "/proc/self/exe", &actions, &attributes, argv, environ)
        close(writeEnd)
        defer { close(readEnd) }
        guard status == 0 else { throw UserError("cannot start the daemon: \(Errno(status))") }

        var reply: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(readEnd, $0.baseAddress, $0.count) }
            if count < 0, errno == EINTR { continue }
            if count <= 0 { break }
            reply += buffer[0..<count]
        }
        let text = String(decoding: reply, as: UTF8.self)
        if text.hasPrefix("ready") { return }
        if text.hasPrefix("error: ") {
            throw UserError(String(text.dropFirst(7)).trimmingCharacters(in: .newlines))
        }
        var exitStatus: Int32 = 0
        waitpid(pid, &exitStatus, 0)
        throw UserError("the daemon exited before the mount was ready (status \(exitStatus)): run 'containerfs mount -f -o debug' to see why")
    }
}
