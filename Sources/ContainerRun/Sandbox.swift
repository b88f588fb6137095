import ContainerPolicy
import ContainerStore
import Foundation
import Glibc

/// Where a confined program finds its container (`run --layout`).
public enum SandboxLayout: Sendable, Equatable {
    /// The container at `Sandbox.home`, the bundle inside it, as always.
    case home
    /// iOS's paths (docs/run.md, "The iOS layout"): the data container as HOME at
    /// `/private/var/mobile/Containers/Data/Application/<data>`, the bundle at
    /// `/private/var/containers/Bundle/Application/<bundle>/Name.app`, `/var` a symlink to
    /// `/private/var`.
    case ios(ContainerUUIDs)

    /// Where iOS keeps apps' data containers.
    public static let dataFolder = "/private/var/mobile/Containers/Data/Application"
    /// Where iOS keeps App Group containers, each under the group's UUID.
    public static let groupFolder = "/private/var/mobile/Containers/Shared/AppGroup"

    /// Where a member group is shown: `/groups/ID`, or under iOS's paths
    /// `groupFolder/<UUID>` (`groupUUID`, the group's recorded one).
    public func groupPath(_ identifier: String, groupUUID: String?) -> String {
        switch self {
        case .home: AppGroup.sandboxPath(of: identifier)
        case .ios: Self.groupFolder + "/" + (groupUUID ?? identifier)
        }
    }

    /// Where iOS keeps apps' bundle containers.
    public static let bundleFolder = "/private/var/containers/Bundle/Application"

    /// The program's HOME: where the container's Documents/, Library/ and tmp/ are.
    public var home: String {
        switch self {
        case .home: Sandbox.home
        case .ios(let uuids): Self.dataFolder + "/" + uuids.data
        }
    }

    /// Where the bundle `bundleName` is.
    public func bundle(_ bundleName: String) -> String {
        switch self {
        case .home: Sandbox.home + "/" + bundleName
        case .ios(let uuids): Self.bundleFolder + "/" + uuids.bundle + "/" + bundleName
        }
    }
}

/// What a program run by `containerfs run` sees of the host: the bubblewrap command line
/// (Debian's `bubblewrap`, as Flatpak confines apps) and the environment.
public struct Sandbox {
    /// Where the container is inside the sandbox: the program's home. Fixed, so that paths
    /// a program records (a virtualenv, a git worktree) stay valid from one run to the next.
    public static let home = "/home/app"

    /// The system folders shown read-only. On a merged-/usr system /bin, /sbin and /lib*
    /// are symlinks into /usr and are recreated as such.
    static let systemFolders = ["/usr", "/etc"]
    static let systemLinks = ["/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"]

    /// The uid and gid a program started by root runs as inside, as an iOS app runs as
    /// `mobile` (501). Outside it is `HostAppUser`, never root: see docs/run.md.
    public static let appUserID = 501

    /// The device nodes a program gets in `/dev`. bubblewrap binds the host's, which root's
    /// program could `touch`; root's gets fresh nodes of its own instead (`makeDevices`).
    static let devices = ["null", "zero", "full", "random", "urandom", "tty"]

    /// The host's `/etc/passwd` and `/etc/group` as a program root started sees them: its
    /// uid and gid 501 named `mobile`, as on iOS (`id -un`, `whoami`, git's default
    /// identity), every other line as on the host. Lines naming 501 or `mobile` are dropped.
    static func accounts(passwd: [UInt8], group: [UInt8], home: String = Sandbox.home) -> (passwd: [UInt8], group: [UInt8]) {
        func replacing(_ table: [UInt8], idField: Int, with line: String) -> [UInt8] {
            let kept = table.split(separator: UInt8(ascii: "\n")).filter { entry in
                let fields = entry.split(separator: UInt8(ascii: ":"), omittingEmptySubsequences: false)
                return !(fields.first?.elementsEqual("mobile".utf8) ?? false)
                    && !(fields.count > idField && fields[idField].elementsEqual(String(appUserID).utf8))
            }
            return Array(kept.joined(separator: [UInt8(ascii: "\n")])) + (kept.isEmpty ? [] : [UInt8(ascii: "\n")]) + Array(line.utf8)
        }
        return (replacing(passwd, idField: 2, with: "mobile:x:\(appUserID):\(appUserID):Mobile:\(home):/bin/sh\n"),
                replacing(group, idField: 2, with: "mobile:x:\(appUserID):\n"))
    }

    /// The variables of the caller's environment the program gets (besides those `run`
    /// sets and those named with `--env`): how to find programs and how to talk to the
    /// user. Any other, a token or a password among them, stays outside.
    static let passedVariables: Set<String> = ["PATH", "TERM", "COLORTERM", "NO_COLOR", "LANG", "LANGUAGE", "TZ"]
    /// Prefixes of further variables passed on: the locale's categories.
    static let passedPrefixes = ["LC_"]

    /// The `bwrap` executable.
    let bubblewrap: String
    /// Keep the host's network (`--share-net`).
    let network: Bool
    /// Host paths shown read-only at the same place, absolute with symlinks resolved.
    let readOnlyBinds: [String]
    /// When root runs the program: the host user it runs as.
    let appUser: HostAppUser?
    /// The host files and folders the program may open (`--grant`), at `/grants/NAME`.
    var grants: [OpenedGrant] = []

    /// Finds bubblewrap (and, for root, `HostAppUser`) and checks the paths to bind; fails
    /// with one line if any is missing.
    init(network: Bool, readOnlyBinds: [String]) throws(UserError) {
        appUser = geteuid() == 0 ? try HostAppUser.find() : nil
        guard let bubblewrap = Self.findExecutable("bwrap") else {
            throw UserError("bubblewrap is not installed, so the program cannot be confined: apt-get install bubblewrap (or run it unconfined with --no-confine)")
        }
        self.bubblewrap = bubblewrap
        self.network = network
        var binds: [String] = []
        for path in readOnlyBinds {
            guard let resolved = realpath(path, nil) else {
                let error = Errno.current
                throw UserError("cannot show \(path) inside: \(error); \(error.advice(whenMissing: "name an existing host path with --bind-ro"))")
            }
            let bind = String(cString: resolved)
            free(resolved)
            if Self.home.hasPrefix(bind == "/" ? "/" : bind + "/") || bind == Self.home || bind.hasPrefix(Self.home + "/") || bind == "/tmp" {
                throw UserError.usage("--bind-ro \(path) would hide the container (\(Self.home), /tmp): name a path outside them")
            }
            binds.append(bind)
        }
        self.readOnlyBinds = binds
    }

    /// The command line that runs `command` under bubblewrap with the container mounted at
    /// `mountpoint`: the executable to spawn and its arguments (`argv[0]` included).
    ///
    /// - `newSession`: when there is no terminal, the program gets its own session
    ///   (`--new-session`), so that it cannot push input into a terminal it does not own.
    ///   With a terminal it stays in the terminal's foreground process group, for Ctrl-C
    ///   and job control to reach it.
    /// - `terminalSignals`: with a terminal, the signals it sends to the whole foreground
    ///   group (those `run` did not find ignored). bubblewrap's outer process is in that
    ///   group too, and would die of Ctrl-C and take the sandbox with it (a Python REPL
    ///   could never be interrupted). So bubblewrap runs with them ignored (`env
    ///   --ignore-signal`), and the program with them back to their defaults (`env
    ///   --default-signal`, which execs it: it stays pid 2 in the sandbox).
    /// - `infoFD`: the descriptor bubblewrap writes the sandbox's first pid to.
    /// - `filterFD`: the descriptor bubblewrap reads the seccomp filter from
    ///   (`clinux_write_terminal_filter`), which keeps the program from pushing input into
    ///   the terminal it shares (TIOCSTI) without taking the terminal away from it.
    /// - `devicesFolder`: for root's program, where `makeDevices` made its `/dev` nodes.
    /// - `accountFDs`: descriptors bubblewrap reads the `accounts` files from, shown as
    ///   `/etc/passwd` and `/etc/group` (for a program run as `appUserID`).
    /// - `grantFDs`: the descriptors bubblewrap gets `grants`' nodes as, in their order.
    /// - `environment`: the program's. bubblewrap itself runs on the host with every
    ///   capability (as root) and starts with `hostEnvironment` only: a variable meant for
    ///   the program (`--env LD_PRELOAD=…`) must not reach the host's side. bubblewrap sets
    ///   the program's with `--clearenv` and `--setenv`.
    /// - `layout`, `bundleName`: where the container and its bundle appear.
    /// - `groups`: the member groups' mounts, each shown at its `inside` path
    ///   (`/groups/ID`, `SandboxLayout.groupPath`) and nothing else of their folders.
    func commandLine(mountpoint: String, command: [String], environment: [String: String], newSession: Bool,
                     terminalSignals: [Int32], infoFD: Int32, filterFD: Int32, devicesFolder: String? = nil,
                     accountFDs: (passwd: Int32, group: Int32)? = nil, grantFDs: [Int32] = [],
                     layout: SandboxLayout = .home, bundleName: String = "",
                     groups: [SharedGroupMount] = []) -> (executable: String, arguments: [String]) {
        let names = newSession ? "" : terminalSignals.compactMap { Self.signalNames[$0] }.joined(separator: ",")
        var arguments = bubblewrapArguments(mountpoint: mountpoint, newSession: newSession, infoFD: infoFD,
                                            filterFD: filterFD, devicesFolder: devicesFolder, accountFDs: accountFDs,
                                            grantFDs: grantFDs, layout: layout, bundleName: bundleName, groups: groups)
        let settings = ["--clearenv"] + environment.sorted { $0.key < $1.key }.flatMap { ["--setenv", $0.key, $0.value] }
        arguments.insert(contentsOf: settings, at: arguments.count - 1)   // before the closing "--"
        var line = (executable: bubblewrap, arguments: arguments + command)
        if !names.isEmpty {
            line = ("/usr/bin/env", ["env", "--ignore-signal=" + names, bubblewrap] + arguments.dropFirst()
                    + ["/usr/bin/env", "--default-signal=" + names] + command)
        }
        // Root's program: bubblewrap starts as the host app user, as it does for an ordinary
        // user, so that the sandbox's uid 501 is that user outside, not root.
        guard let appUser else { return line }
        return ("/usr/bin/setpriv", ["setpriv", "--reuid=\(appUser.uid)", "--regid=\(appUser.gid)", "--clear-groups", "--",
                                     line.executable] + line.arguments.dropFirst())
    }

    static let signalNames: [Int32: String] = [SIGINT: "INT", SIGQUIT: "QUIT", SIGHUP: "HUP"]

    /// bubblewrap's own arguments (`argv[0]` included), up to `--`.
    private func bubblewrapArguments(mountpoint: String, newSession: Bool, infoFD: Int32, filterFD: Int32, devicesFolder: String?,
                                     accountFDs: (passwd: Int32, group: Int32)?, grantFDs: [Int32], layout: SandboxLayout,
                                     bundleName: String, groups: [SharedGroupMount] = []) -> [String] {
        // A user namespace always, even for root: the program has no capability (a root
        // one could remount the read-only binds and write the host), cannot make another
        // user namespace to get some back, and bubblewrap sets no_new_privs.
        var arguments = ["bwrap", "--unshare-all", "--unshare-user", "--disable-userns", "--cap-drop", "ALL"]
        if appUser != nil { arguments += ["--uid", "\(Self.appUserID)", "--gid", "\(Self.appUserID)"] }
        if network { arguments.append("--share-net") }
        arguments += ["--die-with-parent", "--info-fd", "\(infoFD)", "--seccomp", "\(filterFD)"]
        if newSession { arguments.append("--new-session") }
        for folder in Self.systemFolders { arguments += ["--ro-bind", folder, folder] }
        if let accountFDs {
            arguments += ["--ro-bind-data", "\(accountFDs.passwd)", "/etc/passwd", "--ro-bind-data", "\(accountFDs.group)", "/etc/group"]
        }
        for link in Self.systemLinks {
            var info = stat()
            guard lstat(link, &info) == 0 else { continue }
            if info.st_mode & S_IFMT == S_IFLNK, let target = try? FileManager.default.destinationOfSymbolicLink(atPath: link) {
                arguments += ["--symlink", target, link]
            } else if info.st_mode & S_IFMT == S_IFDIR {
                arguments += ["--ro-bind", link, link]
            }
        }
        // With the network kept, name resolution needs resolv.conf's real file, which
        // systemd-resolved keeps under /run.
        if network, let resolved = realpath("/etc/resolv.conf", nil) {
            let path = String(cString: resolved)
            free(resolved)
            if !Self.systemFolders.contains(where: { path.hasPrefix($0 + "/") }) { arguments += ["--ro-bind-try", path, path] }
        }
        // bubblewrap covers /proc/irq and /proc/bus but leaves /proc/sys writable, and the
        // kernel lets a root uid write a sysctl with no capability (kernel.core_pattern
        // runs a program as root on the host): read-only, as the host's view of this
        // sandbox's namespaces. /proc/sysrq-trigger likewise, where the kernel has it.
        arguments += ["--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys"]
        arguments += ["--ro-bind-try", "/proc/sysrq-trigger", "/proc/sysrq-trigger"]
        arguments += ["--dev", "/dev"]
        if let devicesFolder {
            for name in Self.devices { arguments += ["--dev-bind", devicesFolder + "/" + name, "/dev/" + name] }
        }
        switch layout {
        case .home:
            arguments += ["--dir", "/var", "--symlink", "/tmp", "/var/tmp"]
            // The container; its tmp is also /tmp.
            arguments += ["--bind", mountpoint, Self.home, "--bind", mountpoint + "/tmp", "/tmp"]
        case .ios:
            // The whole mount as the data container, so that a rename from tmp/ into
            // Documents/ stays within one mount (across two binds it would be EXDEV); its
            // bundle folder is covered by an empty read-only one, and the bundle shown at
            // its own path, from the same mount (its rules unchanged).
            let home = layout.home, bundle = layout.bundle(bundleName)
            arguments += ["--dir", "/private/var", "--symlink", "private/var", "/var", "--symlink", "/tmp", "/private/var/tmp"]
            arguments += ["--bind", mountpoint, home, "--bind", mountpoint + "/tmp", "/tmp"]
            arguments += ["--bind", mountpoint + "/" + bundleName, bundle]
            arguments += ["--tmpfs", home + "/" + bundleName, "--remount-ro", home + "/" + bundleName]
        }
        // Each member group's mount, and only those, at `group.inside` (`/groups/ID`, or
        // its UUID under Shared/AppGroup): made on the sandbox's own read-only root, so no
        // other group or host folder is below it. Identifiers are
        // single harmless names (AppGroup.problem), checked again when read.
        for group in groups where AppGroup.problem(with: group.identifier) == nil {
            arguments += ["--bind", group.mountpoint, group.inside]
        }
        // The caller's binds last, so that one below /tmp is not hidden by the container's
        // tmp (bubblewrap makes its mount point there, purged with tmp). `init` refused
        // those that would hide the container.
        for path in readOnlyBinds { arguments += ["--ro-bind", path, path] }
        // The grants, each bound from the descriptor `OpenedGrant.open` checked (bubblewrap
        // checks the mount is that node): no path is looked up again, so nothing can be
        // swapped in. Alone in /grants, a folder's `..` and its symlinks lead nowhere else
        // of the host: they resolve in the sandbox. Read-only binds are so recursively.
        for (grant, fd) in zip(grants, grantFDs) {
            arguments += [grant.writable ? "--bind-fd" : "--ro-bind-fd", "\(fd)", grant.insidePath]
        }
        // The sandbox's own root is a tmpfs: read-only, so that a write outside the
        // container fails as it would on iOS instead of vanishing with the sandbox.
        arguments += ["--remount-ro", "/", "--chdir", layout.home, "--"]
        return arguments
    }

    /// Makes `folder` a read-only tmpfs holding fresh nodes of `devices` (root only): what
    /// root's program gets as `/dev/null` and the rest, nodes it can use but not chmod,
    /// chown, touch or label (EROFS), and that are not the host's. `removeDevices` undoes it.
    static func makeDevices(in folder: String) throws(UserError) {
        func failure(_ what: String) -> UserError { UserError.failed("cannot make the sandbox's /dev in \(folder): \(what)", Errno.current) }
        guard mkdir(folder, 0o755) == 0 else { throw failure("mkdir") }
        guard mount("tmpfs", folder, "tmpfs", UInt(MS_NOSUID | MS_NOEXEC), "mode=0755,size=16k") == 0 else { throw failure("mount") }
        for name in devices {
            var host = stat()
            guard stat("/dev/" + name, &host) == 0, host.st_mode & S_IFMT == S_IFCHR else { continue }
            guard mknod(folder + "/" + name, S_IFCHR | 0o666, host.st_rdev) == 0, chmod(folder + "/" + name, 0o666) == 0 else {
                throw failure("mknod \(name)")
            }
        }
        guard mount(nil, folder, nil, UInt(MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC), nil) == 0 else { throw failure("remount") }
    }

    /// Unmounts and removes what `makeDevices` made, if anything.
    static func removeDevices(in folder: String) {
        while umount2(folder, Int32(MNT_DETACH) | Int32(UMOUNT_NOFOLLOW)) == 0 {}
        rmdir(folder)
    }

    /// The program's environment: `passedVariables` and the locale's from the caller's,
    /// the home and XDG folders in the container at `home`, then `added` (`--env`: a
    /// value, or nil to take the caller's, and left out when the caller has none).
    /// `bundle`: with `--layout ios`, the bundle's path, as `CONTAINERFS_BUNDLE_PATH` (an
    /// app's `Bundle.main.bundlePath`).
    /// `groups`: each member group's path, as `APP_GROUP_…` and `APP_GROUPS`.
    static func environment(home: String, bundle: String? = nil, added: [(name: String, value: String?)] = [],
                            groups: [(identifier: String, path: String)] = []) -> [String: String] {
        let caller = ProcessInfo.processInfo.environment
        var environment = caller.filter { name, _ in
            passedVariables.contains(name) || passedPrefixes.contains { name.hasPrefix($0) }
        }
        environment["HOME"] = home
        environment["PWD"] = home
        environment["TMPDIR"] = home + "/tmp"
        environment["XDG_CACHE_HOME"] = home + "/Library/Caches"
        environment["XDG_CONFIG_HOME"] = home + "/Library/Preferences"
        environment["XDG_DATA_HOME"] = home + "/Library/Application Support"
        if let bundle { environment["CONTAINERFS_BUNDLE_PATH"] = bundle }
        if environment["PATH"] == nil { environment["PATH"] = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin" }
        // Each group where the program finds it, as containerURL(forSecurityApplicationGroupIdentifier:) tells an app.
        for group in groups { environment[AppGroup.environmentName(of: group.identifier)] = group.path }
        if !groups.isEmpty { environment[AppGroup.listVariable] = groups.map(\.identifier).joined(separator: ":") }
        for (name, value) in added { environment[name] = value ?? caller[name] }
        return environment
    }

    /// The environment bubblewrap (and `env`, which starts it on a terminal) run with on
    /// the host: nothing of the caller's or the program's.
    static let hostEnvironment = ["PATH": "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"]

    /// The first executable file named `name` on `PATH`.
    static func findExecutable(_ name: String) -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        for directory in path.split(separator: ":") {
            let candidate = "\(directory)/\(name)"
            if access(candidate, X_OK) == 0 { return candidate }
        }
        return nil
    }
}

/// The host user root's program runs as: a system user that owns no file (made by the
/// package's postinst and scripts/install-deps.sh), so that without capabilities the
/// program is nobody to the kernel's owner checks on the host (docs/run.md).
public struct HostAppUser: Sendable {
    public static let name = "_containerfs"
    public let uid: uid_t
    public let gid: gid_t

    /// Looks the user up; fails with one line when it is missing or is root.
    static func find() throws(UserError) -> HostAppUser {
        guard let entry = getpwnam(name) else {
            throw UserError("user \(name), whom root's confined programs run as, does not exist: create it with 'useradd --system --user-group --no-create-home --shell /usr/sbin/nologin \(name)' (the package makes it)")
        }
        guard entry.pointee.pw_uid != 0, entry.pointee.pw_gid != 0 else {
            throw UserError("user \(name) has uid or gid 0, so root's confined programs would be root on the host: give it ids of its own (userdel \(name), then useradd --system --user-group … as the package does)")
        }
        return HostAppUser(uid: entry.pointee.pw_uid, gid: entry.pointee.pw_gid)
    }
}
