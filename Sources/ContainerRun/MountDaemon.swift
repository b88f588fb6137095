import CLinux
import ContainerStore
import Foundation
import Glibc

/// Starting a mount's daemon in the background, and unmounting: shared by `mount`, `unmount` and `run`.
public enum MountDaemon {
    /// Fails unless `mountpoint` is an existing folder with nothing mounted on it, and FUSE is usable.
    public static func checkMountpoint(_ mountpoint: String) throws(UserError) {
        if let existing = MountEntry.at(mountpoint) {
            // statvfs always reaches the daemon; stat may be answered from the kernel's cache.
            var info = statvfs()
            if existing.isContainer, statvfs(mountpoint, &info) != 0, errno == ENOTCONN {
                throw UserError("\(mountpoint) is a mount whose daemon died: clear it with 'containerfs unmount \(mountpoint)'")
            }
            throw UserError("\(mountpoint) is already a mount point (\(existing.type) from \(existing.source)): unmount it first")
        }
        var info = stat()
        guard stat(mountpoint, &info) == 0 else {
            throw UserError("mount point \(mountpoint) does not exist: create the folder first (mkdir -p \(mountpoint))")
        }
        guard info.st_mode & S_IFMT == S_IFDIR else {
            throw UserError("mount point \(mountpoint) is not a folder: name an empty folder")
        }
        try checkFUSE()
    }

    /// Fails unless this user can mount: `/dev/fuse`, and `fusermount3` for an ordinary user.
    static func checkFUSE() throws(UserError) {
        guard access("/dev/fuse", R_OK | W_OK) == 0 else {
            throw UserError("/dev/fuse is missing or not usable by this user: load FUSE (modprobe fuse) and apt-get install fuse3")
        }
        if geteuid() != 0, access("/usr/bin/fusermount3", X_OK) != 0, access("/bin/fusermount3", X_OK) != 0 {
            throw UserError("fusermount3 is not installed, so an ordinary user cannot mount: apt-get install fuse3")
        }
    }

    /// Starts this program again as `containerfs mount STORE MOUNTPOINT -f` in its own
    /// session, and waits until it says the mount is ready or why it is not.
    ///
    /// Returns the daemon's pid. It is a child of this process: a caller that outlives the
    /// mount (`run`) reaps it with `waitpid` after unmounting.
    @discardableResult
    public static func start(store: String, mountpoint: String, options: [String]) throws(UserError) -> pid_t {
        try start(store: store, mountpoint: mountpoint, options: options, lifeline: nil)
    }

    /// `start`, the daemon tied to this process: it gets the read end of a pipe whose only
    /// write end is returned, and unmounts when that end closes (`Lifeline`), however this
    /// process ends, SIGKILL included. The caller closes the write end once it has unmounted.
    public static func startTied(store: String, mountpoint: String, options: [String]) throws(UserError) -> (pid: pid_t, lifeline: Int32) {
        var lifelineFDs: [Int32] = [0, 0]
        guard pipe(&lifelineFDs) == 0 else { throw UserError.failed("cannot start the daemon", Errno.current) }
        // No program this process starts may hold the write end (`run` spawns from this thread only).
        _ = fcntl(lifelineFDs[0], F_SETFD, FD_CLOEXEC)
        _ = fcntl(lifelineFDs[1], F_SETFD, FD_CLOEXEC)
        defer { close(lifelineFDs[0]) }
        do {
            let pid = try start(store: store, mountpoint: mountpoint, options: options, lifeline: lifelineFDs[0])
            return (pid, lifelineFDs[1])
        } catch {
            close(lifelineFDs[1])
            throw error
        }
    }

    private static func start(store: String, mountpoint: String, options: [String], lifeline: Int32?) throws(UserError) -> pid_t {
        // Above 4, so that the dup2 to 3 below cannot overwrite it before it is moved to 4.
        let lifelineCopy = lifeline.map { fcntl($0, F_DUPFD_CLOEXEC, 10) } ?? -1
        defer { if lifelineCopy >= 0 { close(lifelineCopy) } }
        if lifeline != nil, lifelineCopy < 0 { throw UserError.failed("cannot start the daemon", Errno.current) }
        var pipeFDs: [Int32] = [0, 0]
        guard pipe(&pipeFDs) == 0 else { throw UserError.failed("cannot start the daemon", Errno.current) }
        let (readEnd, writeEnd) = (pipeFDs[0], pipeFDs[1])
        // Neither end may leak into other children; the spawn's dup2 gives the daemon its copy.
        _ = fcntl(readEnd, F_SETFD, FD_CLOEXEC)
        _ = fcntl(writeEnd, F_SETFD, FD_CLOEXEC)
        let childReadyFD: Int32 = 3, childLifelineFD: Int32 = 4
        var arguments = ["containerfs", "mount", store, mountpoint, "-f", "--ready-fd", "\(childReadyFD)"]
        if lifeline != nil { arguments += ["--lifeline-fd", "\(childLifelineFD)"] }
        for option in options { arguments += ["-o", option] }

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, writeEnd, childReadyFD)
        if lifeline != nil { posix_spawn_file_actions_adddup2(&actions, lifelineCopy, childLifelineFD) }
        for fd: Int32 in 0...2 { posix_spawn_file_actions_addopen(&actions, fd, "/dev/null", fd == 0 ? O_RDONLY : O_WRONLY, 0) }
        // A daemon holding a copy of its starter's output pipe would keep that reader waiting.
        clinux_spawn_close_from(&actions, childLifelineFD + 1)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        // Its own session: the daemon outlives this terminal and its Ctrl-C. Signals `run`
        // catches or ignores go back to their defaults, and none stays blocked.
        var defaults = sigset_t(), none = sigset_t()
        sigemptyset(&none)
        sigemptyset(&defaults)
        for signal in [SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE] { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setflags(&attributes, clinux_POSIX_SPAWN_SETSID | Int16(POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK))

        let argv = arguments.map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var pid: pid_t = 0
        let status = posix_spawn(&pid, "/proc/self/exe", &actions, &attributes, argv, environ)
        close(writeEnd)
        defer { close(readEnd) }
        guard status == 0 else { throw UserError.cannotStart("cannot start the daemon", Errno(status)) }

        var reply: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(readEnd, $0.baseAddress, $0.count) }
            if count < 0, errno == EINTR { continue }
            if count <= 0 { break }
            reply += buffer[0..<count]
            // The answer is one line. Not EOF: with -o auto_unmount libfuse leaves
            // fusermount3 running, holding the pipe's write end open as long as the mount.
            if reply.contains(UInt8(ascii: "\n")) { break }
        }
        let text = String(decoding: reply, as: UTF8.self)
        if text.hasPrefix("ready") { return pid }
        var exitStatus: Int32 = 0
        while waitpid(pid, &exitStatus, 0) < 0, errno == EINTR {}
        if text.hasPrefix("error: ") {
            // The daemon's own exit status says which error it was: a misuse (64), a lock
            // held too long (75, try again), or anything else (1).
            let exited = exitStatus & 0x7f == 0, code = (exitStatus >> 8) & 0xff
            throw UserError(String(text.dropFirst(7)).trimmingCharacters(in: .newlines), exitCode: exited && (code == 64 || code == LockWait.exitCode) ? code : 1)
        }
        throw UserError("the daemon exited before the mount was ready (status \(exitStatus)): run 'containerfs mount -f -o debug' to see why")
    }
}

extension MountDaemon {
    /// Unmounts the container at `mountpoint` and waits for its daemon (unless `lazy`).
    ///
    /// `waitForDaemon: false` is for the daemon itself (`Lifeline`), which would wait for its own lock.
    public static func unmount(_ mountpoint: String, lazy: Bool, waitForDaemon: Bool = true) throws(UserError) {
        guard let entry = MountEntry.at(mountpoint), entry.isContainer else {
            throw UserError("\(mountpoint) is not a containerfs mount: nothing to unmount (see 'mount -t fuse.containerfs')")
        }
        let result = try fusermount(lazy ? ["-uz", entry.mountpoint] : ["-u", entry.mountpoint])
        guard result.status == 0 else {
            if result.output.contains("busy") {
                throw UserError("\(mountpoint) is busy: a program still uses it ('fuser -vm \(mountpoint)' lists them); close it, or use -z to detach lazily")
            }
            throw UserError("cannot unmount \(mountpoint): \(result.output.trimmingCharacters(in: .whitespacesAndNewlines))")
        }
        // A run's mount unmounted by hand (its `run` was killed): its /dev nodes and run
        // folder go with it, as the run would have removed them.
        let parent = Directory.holding(entry.mountpoint)
        if PrivateMountpoint.run.isOurs(parent), Directory.holding(parent) == "/tmp" {
            Sandbox.removeDevices(in: parent + "/dev")
            if !lazy { rmdir(entry.mountpoint); rmdir(parent) }
        }
        // The daemon takes a moment to exit after the kernel lets go; wait for its lock, but
        // only if it is this mount's daemon: a dead mount's store may be mounted elsewhere now.
        guard !lazy, waitForDaemon, let store = try? Store.open(entry.source, changing: false),
              let holder = MountLock.holder(store), holder.mountpoint == entry.mountpoint else { return }
        if !MountLock.waitUntilFree(store, seconds: 10) {
            throw UserError("unmounted \(mountpoint), but its daemon (pid \(holder.pid)) has not exited after 10 s: kill it")
        }
    }

    private static func fusermount(_ arguments: [String]) throws(UserError) -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/fusermount3")
        process.arguments = arguments
        // It needs no working folder, and the caller's may be one this user cannot enter
        // (after `sudo -u` in root's home), where Process could not start it.
        process.currentDirectoryURL = URL(fileURLWithPath: "/")
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        do { try process.run() } catch {
            if access("/bin/fusermount3", X_OK) != 0 { throw UserError("fusermount3 is not installed: apt-get install fuse3") }
            throw UserError("cannot run /bin/fusermount3: \(error.localizedDescription)")
        }
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return (process.terminationStatus, output)
    }
}
