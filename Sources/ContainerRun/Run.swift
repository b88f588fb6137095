import CLinux
import ContainerPolicy
import ContainerPurge
import ContainerSigning
import ContainerStore
import Foundation
import Glibc

/// `containerfs run`: mounts a container privately, runs a program in it (under
/// bubblewrap unless `noConfine`), and cleans up whatever happens to the program.
public struct Run {
    /// The container's store.
    let store: String
    /// Run without bubblewrap: the program sees the whole host.
    let noConfine: Bool
    /// No network inside: only a loopback interface.
    let noNetwork: Bool
    /// Host paths shown inside, read-only, at the same place.
    let bindReadOnly: [String]
    /// The installer key the bundle was signed with (nil: the default, docs/signing.md).
    let key: String?
    /// The program and its arguments.
    let command: [String]
    /// Variables added to the program's environment (`--env`): a value, or nil to take
    /// this process's (none when it has none).
    let addedEnvironment: [(name: String, value: String?)]
    /// Host files and folders the program may open during the run (`--grant`, Grant.swift).
    public var grants: [GrantRequest] = []
    /// Present the container at iOS's paths (`--layout ios`, `SandboxLayout.ios`).
    public var iosLayout = false
    /// With `iosLayout` and `launches`: new UUIDs at every launch (`--relocate`).
    public var relocate = false
    /// Mount with the device locked since boot (`--locked`, SPEC §11).
    public var locked = false
    /// Several launches, with purges between them (`--launches`, Launches.swift); nil: one.
    public var launches: Launches?
    /// Suspend the program this long after each launch starts (`--suspend-after`, docs/groups.md):
    /// killed with 0xdead10cc if it holds a lock on a shared group's file then, else
    /// resumed `resumeAfter` seconds later. Confined runs only.
    public var suspendAfter: Double?
    /// How long a program suspended by `suspendAfter` stays suspended.
    public var resumeAfter: Double = 1
    /// Called when each launch's program has exited, before the unmount purges `tmp/`: what
    /// `run --check` looks at (ContainerCheck).
    public var atProgramExit: ((ProgramExit) -> Void)?

    /// A run of `command` in the container at `store`; `command` is not empty, and
    /// `noNetwork` and `bindReadOnly` need the confinement (the command line checks both).
    public init(store: String, noConfine: Bool, noNetwork: Bool, bindReadOnly: [String], key: String?, command: [String],
                addedEnvironment: [(name: String, value: String?)] = []) {
        self.store = store
        self.noConfine = noConfine
        self.noNetwork = noNetwork
        self.bindReadOnly = bindReadOnly
        self.key = key
        self.command = command
        self.addedEnvironment = addedEnvironment
    }

    /// Mounts the container, runs the program, cleans up; returns the program's exit status.
    public func runInContainer() throws(UserError) -> Int32 {
        // The space its daemon records is dropped by what changes the store after it: the
        // purges of tmp/ and caches (ContainerPurge), not this open.
        let opened = try Store.open(store, changing: false)
        try opened.requireApp(for: "run")
        // A tampered app does not launch (SPEC §5): the check `mount` makes, before anything else.
        try BundleVerification.requireIntact(opened, keyPath: key)
        var sandbox = noConfine ? nil : try Sandbox(network: !noNetwork, readOnlyBinds: bindReadOnly)
        // Under iOS's paths, /private and /var are the sandbox's own: a bind there would hide the container.
        if iosLayout, let hiding = sandbox?.readOnlyBinds.first(where: { bind in ["/private", "/var"].contains { bind == $0 || bind.hasPrefix($0 + "/") } }) {
            throw UserError.usage("--bind-ro \(hiding) would hide the container under --layout ios (/private/var): name a path outside /private and /var")
        }
        let openedGrants = try OpenedGrant.open(grants, store: opened, appUser: sandbox?.appUser)
        sandbox?.grants = openedGrants
        for grant in openedGrants {
            grant.record(in: opened)
            FileHandleOutput.standardError.write("containerfs: \(grant.announcement)\n")
        }
        // Stores are made 0700 now; an older one lets other users in through what the program makes.
        var top = stat()
        if fstat(opened.rootFD, &top) == 0, top.st_mode & 0o007 != 0 {
            warn("other users can read \(store) on disk (mode \(String(top.st_mode & 0o777, radix: 8))): close it with 'chmod 700 \(store)'")
        }
        // From here on a SIGINT, SIGTERM or SIGHUP cannot end `run` before it has cleaned up.
        let relay = SignalRelay()
        let lock = try RunLock(store: opened)
        // Only a run folder of ours, mounted (if at all) from this store: the record is the
        // store owner's to write, and `/container` would detach the host's /dev (PrivateMountpoint).
        if let abandoned = lock.abandonedMountpoint, PrivateMountpoint.run.isMade(abandoned),
           PrivateMountpoint.mountIsOf(abandoned, rootFD: opened.rootFD) {
            clearAbandonedRun(at: abandoned, opened)
        }
        if let holder = MountLock.holder(opened) {
            throw UserError("store \(store) is mounted at \(holder.mountpoint) (daemon pid \(holder.pid)): unmount it first with 'containerfs unmount \(holder.mountpoint)'; run mounts the container itself")
        }
        try MountDaemon.checkFUSE()
        // The app's groups, mounted once for all their members' runs (GroupMount), for the
        // whole run: a group's files stay as the other members see them between launches.
        let groups = try GroupMount.acquireAll(for: opened, appUser: sandbox?.appUser, locked: locked)
        defer { groups.forEach { $0.release() } }
        guard let launches else { return try launch(opened, sandbox: sandbox, relay: relay, lock: lock, groups: groups) }
        return try launch(launches, opened, sandbox: sandbox, relay: relay, lock: lock, groups: groups)
    }

    /// One launch: mounts the container, runs the program, unmounts and purges `tmp/`;
    /// returns the program's exit status. `number` and `purgedBefore` are for `atProgramExit`.
    func launch(_ opened: Store, sandbox: Sandbox?, relay: SignalRelay, lock: RunLock, groups: [GroupMount] = [], number: Int = 1,
                purgedBefore: String? = nil, armed: ArmedEvent? = nil) throws(UserError) -> Int32 {
        let appUser = sandbox?.appUser
        let mountpoint = try PrivateMountpoint.run.make(owner: appUser)
        lock.record(mountpoint: mountpoint)
        let since = AuditLog.now()
        var daemon: pid_t?
        // The write end of the daemon's lifeline: closed only after the unmount (Lifeline).
        var lifeline: Int32 = -1
        var status: Int32?
        defer {
            relay.detach()
            // Only a launch whose mount started: its tmp/ is the program's.
            if daemon != nil, let atProgramExit {
                atProgramExit(ProgramExit(store: opened, launch: number, status: status, purgedBefore: purgedBefore))
            }
            finish(opened, mountpoint: mountpoint, daemon: daemon, since: since)
            if lifeline >= 0 { close(lifeline) }
            lock.record(mountpoint: nil)
        }
        // No set-ID file may come out of a run: one made by a program root ran would be a
        // root set-user-ID program in the store, which any local user can execute.
        var options = locked ? ["nosetid", "locked"] : ["nosetid"]
        // Every launch of a run with power cuts tracks what is durable (docs/power-loss.md).
        if let event = launches?.event, event.kind == .powerCut { options.append("power-loss=\(event.model.rawValue)") }
        // Root's program is the host app user: it reaches the mount as another user would,
        // and owns the store owner's files there (OwnerMapping). Only it can enter the run folder.
        if let appUser { options += ["allow_other", "appuser=\(appUser.uid):\(appUser.gid)"] }
        // Tied to this process: if it is killed with SIGKILL, the daemon unmounts by itself.
        let started = try MountDaemon.startTied(store: store, mountpoint: mountpoint, options: options)
        (daemon, lifeline) = (started.pid, started.lifeline)
        if let signal = relay.signalBeforeStart { return 128 + signal }
        if appUser != nil { try Sandbox.makeDevices(in: Self.devicesFolder(of: mountpoint)) }

        let sharesTerminal = isatty(0) == 1 || isatty(1) == 1 || isatty(2) == 1
        // Before the unmount: no event fires once the launch is over.
        defer { armed?.exited() }
        if let sandbox {
            let layout = try layout(opened, launch: number)
            // A drawn moment (`--suspend-after random`) for this launch, or the fixed one.
            let suspendAt = launches?.suspensionMoment(ofLaunch: number) ?? suspendAfter
            let ended = try runConfined(sandbox, opened, mountpoint: mountpoint, newSession: !sharesTerminal, relay: relay, layout: layout,
                                        bundleName: String(decoding: opened.layout.bundleName, as: UTF8.self), armed: armed, groups: groups,
                                        suspendAt: suspendAt)
            status = ended
            return ended
        }
        let environment = Sandbox.environment(home: mountpoint, added: addedEnvironment,
                                              groups: groups.map { ($0.identifier, $0.mountpoint) })
        // An event kills the program's whole process group: it gets one of its own.
        let pid = try spawn(command[0], command, environment: environment,
                            directory: mountpoint, newGroup: armed != nil)
        relay.attach(.process(pid, sharesTerminal: true))
        armed?.start(pid: pid, group: true)
        let ended = waitForExit(pid)
        status = ended
        return ended
    }

    /// Where launch `number` shows the container: iOS's paths under the recorded UUIDs
    /// (drawn anew for each launch after the first with `relocate`), said on stderr.
    private func layout(_ store: Store, launch number: Int) throws(UserError) -> SandboxLayout {
        guard iosLayout else { return .home }
        let bundleName = String(decoding: store.layout.bundleName, as: UTF8.self)
        guard Array(bundleName.utf8) == store.layout.bundleName, !bundleName.contains("\n") else {
            throw UserError("the bundle's name \(ContainerPath.printable(store.layout.bundleName)) is not UTF-8: --layout ios cannot name its path")
        }
        let layout = SandboxLayout.ios(try ContainerUUIDs.current(store, renewing: relocate && number > 1))
        FileHandleOutput.standardError.write("containerfs: HOME \(layout.home), bundle \(layout.bundle(bundleName))\n")
        return layout
    }

    /// Runs the program under bubblewrap and returns its exit status (bubblewrap's, which
    /// is the program's, 128+N for a signal).
    private func runConfined(_ sandbox: Sandbox, _ store: Store, mountpoint: String, newSession: Bool, relay: SignalRelay,
                             layout: SandboxLayout, bundleName: String, armed: ArmedEvent?,
                             groups: [GroupMount], suspendAt: Double?) throws(UserError) -> Int32 {
        // Where each group is shown: under iOS's paths, at the group's own recorded UUID
        // (drawn before any descriptor of the sandbox is open: a failure leaks none).
        var shown: [SharedGroupMount] = []
        for group in groups {
            let uuid: String? = iosLayout ? try ContainerUUIDs.group(group.store) : nil
            shown.append((group.identifier, group.mountpoint, layout.groupPath(group.identifier, groupUUID: uuid)))
        }
        if iosLayout, !shown.isEmpty {
            FileHandleOutput.standardError.write("containerfs: " + shown.map { "\($0.identifier) at \($0.inside)" }.joined(separator: ", ") + "\n")
        }
        var info: [Int32] = [0, 0], filter: [Int32] = [0, 0]
        guard pipe(&info) == 0 else { throw UserError.failed("cannot start bubblewrap", Errno.current) }
        guard pipe(&filter) == 0 else {
            info.forEach { close($0) }
            throw UserError.failed("cannot start bubblewrap", Errno.current)
        }
        // Only bubblewrap gets bubblewrap's ends, through the spawn's dup2.
        for fd in info + filter { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        // The filter is a few hundred bytes: it fits in the pipe, and bubblewrap reads it to the end.
        let written = clinux_write_terminal_filter(filter[1])
        let writeError = Errno.current
        close(filter[1])
        guard written == 0 else {
            (info + [filter[0]]).forEach { close($0) }
            throw UserError("cannot make the sandbox's seccomp filter: \(writeError)")
        }
        let infoFD: Int32 = 3, filterFD: Int32 = 4, passwdFD: Int32 = 5, groupFD: Int32 = 6
        let asRoot = sandbox.appUser != nil
        // Root's program runs as 501: `mobile` in the passwd and group files it sees. Files
        // without a name (freed with the last descriptor): bubblewrap reads them at its pace.
        let accounts = asRoot ? accountFiles(home: layout.home) : nil
        defer { if let accounts { close(accounts.passwd); close(accounts.group) } }
        // The grants' descriptors follow, with no gap (the spawn closes only those above the last).
        let firstGrantFD = accounts == nil ? passwdFD : groupFD + 1
        let grantFDs = sandbox.grants.indices.map { firstGrantFD + Int32($0) }
        let line = sandbox.commandLine(mountpoint: mountpoint, command: command,
                                       environment: Sandbox.environment(home: layout.home, bundle: iosLayout ? layout.bundle(bundleName) : nil,
                                                                        added: addedEnvironment,
                                                                        groups: shown.map { ($0.identifier, $0.inside) }),
                                       newSession: newSession, terminalSignals: relay.caught, infoFD: infoFD,
                                       filterFD: filterFD, devicesFolder: asRoot ? Self.devicesFolder(of: mountpoint) : nil,
                                       accountFDs: accounts.map { _ in (passwdFD, groupFD) }, grantFDs: grantFDs,
                                       layout: layout, bundleName: bundleName, groups: shown)
        var passing: [(fd: Int32, as: Int32)] = [(info[1], infoFD), (filter[0], filterFD)]
        if let accounts { passing += [(accounts.passwd, passwdFD), (accounts.group, groupFD)] }
        passing += zip(sandbox.grants, grantFDs).map { ($0.fd, $1) }
        let pid: pid_t
        do {
            // From /: the caller's folder may be one the host app user cannot enter.
            pid = try spawn(line.executable, line.arguments, environment: Sandbox.hostEnvironment, directory: "/", passing: passing)
        } catch {
            (info + [filter[0]]).forEach { close($0) }
            throw error
        }
        close(info[1])
        close(filter[0])
        // bubblewrap runs with --die-with-parent: killing it ends the sandbox and all in it.
        armed?.start(pid: pid, group: false)
        // bubblewrap writes `{"child-pid": N, …}` once the sandbox exists, then closes it.
        let text = String(decoding: readAll(info[0]), as: UTF8.self)
        close(info[0])
        var watchdog: SandboxWatchdog?
        var suspender: SuspensionTimer?
        SandboxRecord.clear(store)
        defer { SandboxRecord.clear(store) }
        if let data = text.data(using: .utf8),
           let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
           let initPID = (object["child-pid"] as? NSNumber)?.int32Value {
            // For `containerfs suspend` and `resume` (Suspension.swift).
            SandboxRecord.write(store, initPID: initPID, groups: shown)
            relay.attach(.sandbox(initPID: initPID, sharesTerminal: !newSession))
            watchdog = SandboxWatchdog(initPID: initPID)
            if let suspendAt {
                suspender = SuspensionTimer(after: suspendAt, resumeAfter: resumeAfter, initPID: initPID, store: store, groups: shown)
            }
        }
        let status = waitForExit(pid)
        suspender?.stop()
        watchdog?.stop()
        // Killed at suspension for a shared lock (here or by `containerfs suspend`): one line, its own status.
        if let line = SandboxRecord.termination(store) {
            // Read back from the state folder, which the store's owner can write: a line with
            // control characters (the one written has them escaped) is printed as text.
            let controls = line.unicodeScalars.contains { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) }
            FileHandleOutput.standardError.write("containerfs: \(controls ? ContainerPath.printable(Array(line.utf8), escapingControls: true) : line)\n")
            return SuspensionRule.exitStatus
        }
        if let ended = watchdog?.statusOfEndedProgram {
            warn("the sandbox went on after the program ended (its init stopped, a child left behind): ended it"
                 + (ended == nil ? "; the program's exit status was lost with the init" : ""))
            return ended ?? status
        }
        return status
    }

    /// The `Sandbox.accounts` files, each in an unnamed file in /tmp at offset 0; nil when
    /// they cannot be made (the program then sees the host's files, without `mobile`).
    private func accountFiles(home: String) -> (passwd: Int32, group: Int32)? {
        let tables = Sandbox.accounts(passwd: (try? readFile(at: AT_FDCWD, Array("/etc/passwd".utf8))) ?? [],
                                      group: (try? readFile(at: AT_FDCWD, Array("/etc/group".utf8))) ?? [], home: home)
        func unnamedFile(_ contents: [UInt8]) -> Int32? {
            let fd = open("/tmp", clinux_O_TMPFILE | O_RDWR | O_CLOEXEC, 0o600)
            guard fd >= 0 else { return nil }
            let written = contents.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            guard written == contents.count, lseek(fd, 0, SEEK_SET) == 0 else {
                close(fd)
                return nil
            }
            return fd
        }
        guard let passwd = unnamedFile(tables.passwd) else { return nil }
        guard let group = unnamedFile(tables.group) else {
            close(passwd)
            return nil
        }
        return (passwd, group)
    }

    /// Starts `path` (looked up on PATH when it has no slash) with `arguments`, the standard
    /// streams and nothing else open but `passing` (each dup'ed to the given number, from 3 up).
    private func spawn(_ path: String, _ arguments: [String], environment: [String: String], directory: String? = nil,
                       passing: [(fd: Int32, as: Int32)] = [], newGroup: Bool = false) throws(UserError) -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        // Copies above every target first, so that no dup2 overwrites a descriptor still to be passed.
        let sources = passing.map { fcntl($0.fd, F_DUPFD_CLOEXEC, 64) }
        defer { sources.forEach { if $0 >= 0 { close($0) } } }
        if let failed = sources.firstIndex(where: { $0 < 0 }) {
            throw UserError.failed("cannot run \(path): descriptor \(passing[failed].fd)", Errno.current)
        }
        for (source, item) in zip(sources, passing) { posix_spawn_file_actions_adddup2(&actions, source, item.as) }
        clinux_spawn_close_from(&actions, (passing.map(\.as).max() ?? 2) + 1)
        if let directory { clinux_spawn_chdir(&actions, directory) }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        // What `run` catches goes back to the default for the program; nothing stays blocked.
        var defaults = sigset_t(), none = sigset_t()
        sigemptyset(&defaults)
        sigemptyset(&none)
        for signal in [SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE] { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK | (newGroup ? POSIX_SPAWN_SETPGROUP : 0)))

        let argv = arguments.map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { envp.forEach { free($0) } }
        var pid: pid_t = 0
        let status = DescriptorLimit.asFound { posix_spawnp(&pid, path, &actions, &attributes, argv, envp) }
        guard status == 0 else { throw UserError.cannotStart("cannot run \(path)", Errno(status)) }
        return pid
    }

    /// Reaps the child `pid` if it exits within `seconds`; whether it did (or is gone).
    private static func reap(_ pid: pid_t, within seconds: Double) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        var status: Int32 = 0
        while true {
            let result = waitpid(pid, &status, WNOHANG)
            if result == pid || (result < 0 && errno != EINTR) { return true }
            if Date() > deadline { return false }
            usleep(10_000)
        }
    }

    /// Waits for `pid` and returns its exit status, 128+N when signal N killed it.
    private func waitForExit(_ pid: pid_t) -> Int32 {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 {
            if errno != EINTR { return 1 }
        }
        let signal = status & 0x7f
        return signal == 0 ? (status >> 8) & 0xff : 128 + signal
    }

    /// Unmounts, purges tmp/ and reports the run's denials: whatever happened to the program.
    private func finish(_ store: Store, mountpoint: String, daemon: pid_t?, since: timespec) {
        if let daemon {
            let unmounted = Self.unmount(mountpoint)
            // The daemon is our child: reap it once it has exited (it has when its lock is free).
            // Within a bound: out of descriptors, the mount table reads as empty, so the mount
            // looks gone while the daemon still serves it, and `run` waited for it forever
            // (`ulimit -n 32`). Asked to stop, the daemon unmounts itself.
            if unmounted, !Self.reap(daemon, within: 5) {
                kill(daemon, SIGTERM)
                _ = Self.reap(daemon, within: 10)
            } else if !unmounted {
                var status: Int32 = 0
                while waitpid(daemon, &status, WNOHANG) < 0, errno == EINTR {}
            }
        }
        // Only what this run mounted: a daemon that failed to start may have lost a race
        // with another mount of the store, whose app is running.
        if daemon != nil {
            let left = Purge.emptyTemporary(store).left
            if left > 0 { warn("\(counted(left, "entry", "entries")) of \(store.path)/tmp could not be deleted: delete them by hand") }
        }
        Self.removeMountpoint(mountpoint)
        let denials = AuditLog.read(stateFD: store.stateFD).filter { $0.time >= AuditLog.recordTime(since) && !$0.isGrant }
        if !denials.isEmpty {
            let denied = denials.count
            let protected = denials.count { $0.rule == Denial.protectedDataUnavailable.rawValue }
            let note = protected > 0 ? " (\(protected) protected data unavailable while locked)" : ""
            FileHandleOutput.standardError.write("\(counted(denied, "operation")) denied\(note): see containerfs audit \(self.store)\n")
        }
    }

    /// A run killed with SIGKILL could not clean up: unmount what it left and purge tmp/.
    private func clearAbandonedRun(at mountpoint: String, _ store: Store) {
        if let entry = MountEntry.at(mountpoint), entry.isContainer,
           MountLock.holder(store).map({ $0.mountpoint == mountpoint }) ?? true {
            warn("clearing the mount a killed run left at \(mountpoint)")
            _ = Self.unmount(mountpoint)
        }
        if MountLock.holder(store) == nil { Purge.emptyTemporary(store) }
        Self.removeMountpoint(mountpoint)
    }

    /// Unmounts, retrying while the mount is busy (a program's last children leaving),
    /// then detaching it lazily. True when the daemon has exited.
    private static func unmount(_ mountpoint: String) -> Bool {
        var lastError: UserError?
        for _ in 0..<20 {
            guard MountEntry.at(mountpoint) != nil else { return true }
            do {
                try MountDaemon.unmount(mountpoint, lazy: false)
                return true
            } catch {
                lastError = error
                usleep(100_000)
            }
        }
        if let lastError { warn(lastError.message + " (detaching it lazily)") }
        _ = try? MountDaemon.unmount(mountpoint, lazy: true)
        return false
    }

    /// Where root's program's `/dev` nodes are: beside the mount point.
    private static func devicesFolder(of mountpoint: String) -> String {
        Directory.holding(mountpoint) + "/dev"
    }

    /// Removes the mount point, the `/dev` nodes and their private parent, once nothing is mounted there.
    private static func removeMountpoint(_ mountpoint: String) {
        Sandbox.removeDevices(in: devicesFolder(of: mountpoint))
        PrivateMountpoint.run.remove(mountpoint)
    }

    private func readAll(_ fd: Int32) -> [UInt8] {
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0, errno == EINTR { continue }
            if count <= 0 { return bytes }
            bytes += buffer[0..<count]
        }
    }
}

/// A launch's end, as `Run.atProgramExit` is told of it.
public struct ProgramExit {
    /// The store, still mounted (the unmount empties `tmp/`), read directly as `backup` reads it.
    public let store: Store
    /// Which launch: 1 for the first (and for a single run).
    public let launch: Int
    /// The program's exit status; nil when it never started.
    public let status: Int32?
    /// What was purged before this launch (`--launches`); nil for the first.
    public let purgedBefore: String?
}

/// One line on stderr about the clean-up, which goes on regardless.
private func warn(_ message: String) {
    FileHandleOutput.standardError.write("containerfs: \(message)\n")
}
