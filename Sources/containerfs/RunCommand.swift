import ArgumentParser
import ContainerCheck
import ContainerDurability
import ContainerPurge
import ContainerRun
import ContainerStore

struct RunCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Run a program inside a container, confined to it as an iOS app is.",
        discussion: """
            Mounts the container privately and runs PROGRAM under bubblewrap. It sees the \
            container as its home, \(Sandbox.home); the system folders (/usr, /etc…) read-only; \
            a fresh /proc, a minimal /dev, the container's tmp as /tmp; nothing else of the \
            host. It has no capability and cannot gain one, may not push input into the \
            terminal (TIOCSTI), and runs as uid \(Sandbox.appUserID), named mobile, inside when root runs it (what it \
            makes still belongs to the caller); set-user-ID and set-group-ID bits are dropped \
            from files it makes or chmods. HOME, TMPDIR, XDG_CACHE_HOME, XDG_CONFIG_HOME and \
            XDG_DATA_HOME point into the container and the working directory is HOME; of the \
            caller's environment only PATH, TERM, COLORTERM, NO_COLOR, LANG, LANGUAGE, LC_* and \
            TZ are passed on, others only with --env. The bundle is verified first, as \
            `mount` does: a tampered app does not run. The program has the standard streams \
            and the terminal; SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to containerfs are passed \
            on to it. Afterwards tmp/ is purged, the denials of the run are counted on stderr, \
            and the container is unmounted, also when the program crashes or is killed. One \
            program runs in a container at a time. See docs/run.md.

            --grant PATH opens one host file or folder to the program for the run, as iOS's \
            document picker does (a security-scoped URL): it appears inside at /grants/NAME, NAME \
            being the last component of PATH, read-only, or read-write with PATH:rw; nothing else \
            of the host around it is reachable (its folder's `..` and symlinks resolve inside the \
            sandbox). It is opened once and bound by descriptor, so a path swapped afterwards changes \
            nothing; each grant is printed on stderr and recorded in the store's audit log \
            ('containerfs audit STORE'), and is gone when the run ends. Root's program reads and \
            writes it with _containerfs's host rights. The store, anything inside or above it, / and \
            /tmp cannot be granted. See docs/run.md.

            --layout ios presents the container at iOS's paths: HOME is the data container \
            /private/var/mobile/Containers/Data/Application/UUID (Documents/, Library/, tmp/), \
            the bundle is at /private/var/containers/Bundle/Application/UUID/Name.app (also in \
            CONTAINERFS_BUNDLE_PATH), /var is a symlink to /private/var. The UUIDs are recorded \
            in the store, the same from run to run, and change as on iOS: at 'containerfs \
            update', at the reinstall of an offloaded app, and in a restored store; --relocate \
            changes them at every one of --launches. A program that stores absolute paths \
            breaks there as it would on a device. Each member group is then at \
            /private/var/mobile/Containers/Shared/AppGroup/UUID, its APP_GROUP_ variable naming \
            that path, under the group's own UUID: the same for all its members and from run to \
            run, recorded in the group. See docs/run.md.

            --launches N runs the program N times, as N launches of the app, each in a mount \
            of its own; between launches tmp/ is emptied and the caches are purged as \
            --purge-between says (none, tmp: caches kept; caches: all; random: a share drawn \
            from --seed, sometimes all), one line each on stderr. The seed is printed first; \
            the exit status is the first failing launch's, named with the seed to replay it. \
            --share-edits random also has the user edit Documents/ between launches, as \
            through file sharing (files renamed, replaced, deleted, added; drawn from the \
            seed), for an app whose Info.plist enables it. A file the user adds or replaces \
            is held to the container's capacity and its device's free space as 'share put' \
            is: one that does not fit is not made, its one line goes to stderr, and the \
            launches go on. See docs/lifecycle.md.

            A container with a capacity (see 'containerfs capacity') is a full disk to the \
            program past it. --low-storage SIZE|PERCENT frees space before the program starts, \
            as iOS does when the device is low: 'containerfs run ~/C --low-storage 2M -- ./app' \
            empties tmp/ and purges caches least recently used first until 2 MiB are free, \
            printing what went. See docs/capacity.md.

            --power-cut random (or SECONDS) ends every launch but the last with a power cut, at a \
            moment drawn from --seed between 0 and --within seconds (default 2), or SECONDS after \
            the program started: the container is mounted with -o power-loss, everything the \
            program never made durable (fsync of a file for its data, of a folder for its names) \
            is dropped as a power failure would, its processes are killed, and the next launch \
            starts, as the app after a reboot. --kill random (or SECONDS) kills the program with \
            SIGKILL instead, dropping nothing. One line per launch says what was dropped (files, \
            bytes, names) and whether the launch exited 0; --power-model ext4 makes every name \
            change durable with any fsync, as ext4's journal does, instead of with its folder's; a launch that fails after a cut names \
            the seed and the options that replay it; --json prints the whole report as one JSON \
            object on stdout at the end. See docs/power-loss.md.

            --check checks the container against Apple's storage guidelines when the program \
            exits, before tmp/ is purged, as 'containerfs check' does, and also reports the files \
            left in tmp/, with --launches the backup set's growth from the first launch to the last \
            and a launch that failed after a purge (with the seed). The table goes to stderr; the \
            thresholds and --junit FILE are check's (see 'containerfs check --help', docs/check.md).

            App Groups: each group the app belongs to ('create --group ID') is shown inside at \
            /groups/ID, named in APP_GROUP_NAME (group.com.example.shared: \
            APP_GROUP_COM_EXAMPLE_SHARED) and listed in APP_GROUPS; no other group is there. A \
            group is mounted once for all its members' runs at the same time, so an app and its \
            extension (two runs of two stores on one device folder) see one another's writes and \
            file locks at once. See docs/groups.md.

            --suspend-after DURATION suspends the program that long after each launch starts, as \
            iOS suspends an app sent to the background: every process of the sandbox is stopped \
            with SIGSTOP. If one holds a file lock (flock, POSIX or OFD) on a file in a shared \
            group container then, the program is killed as iOS kills it, and run prints one line \
            naming the file and the code 0xdead10cc and exits with status 204; locks in its own \
            container do not count. Otherwise it is resumed --resume-after later (default 1s). With \
            --launches N, --suspend-after random suspends each launch at a moment drawn from --seed \
            between 0 and --within seconds (default 2): the same seed gives the same moments, and \
            each launch's moment is printed with the seed. \
            'containerfs suspend STORE' and 'containerfs resume STORE' do the same from another \
            shell at any moment.

            Exit status: the program's; 128+N when signal N killed it; 204 when it was killed at \
            suspension holding a lock in a shared group container (0xdead10cc); 1 when containerfs (or \
            bubblewrap, with a line saying why) could not start it, or when the program exited 0 \
            and --check failed; 64 for a misuse.
            """)

    @Argument(help: "The container's store.")
    var store: String

    @Flag(help: "Run without bubblewrap: the program sees the whole host (HOME, TMPDIR, XDG_* and the working directory are still set).")
    var noConfine = false

    @Flag(help: "No network inside: only a loopback interface.")
    var noNetwork = false

    @Option(name: .customLong("bind-ro"), help: ArgumentHelp("Show a host path inside, read-only, at the same place (repeatable).", valueName: "PATH"))
    var bindReadOnly: [String] = []

    @Option(name: .customLong("grant"),
            help: ArgumentHelp("Open a host file or folder to the program at /grants/NAME, read-only, or read-write with :rw (repeatable).",
                               valueName: "PATH[:rw]"))
    var grantItems: [String] = []

    @Option(name: .customLong("env"),
            help: ArgumentHelp("Pass a variable of this environment (NAME) or set one (NAME=VALUE) for the program (repeatable).",
                               valueName: "NAME[=VALUE]"))
    var environmentItems: [String] = []

    @Option(name: .customLong("low-storage"), help: ArgumentHelp("Before the program starts, if less than this is free (a size, or a percentage of the capacity), empty tmp and purge caches least recently used first until it is, printing what went.", valueName: "SIZE|PERCENT"))
    var lowStorage: String?

    @Option(help: "The installer key the bundle was signed with (default: see docs/signing.md).")
    var key: String?

    @Flag(help: "Start with the device locked since boot: only data of class none is available until 'containerfs unlock STORE' (docs/protection.md).")
    var locked = false

    @Option(help: ArgumentHelp("Run the program N times, as N launches of the app.", valueName: "N"))
    var launches: Int?

    @Option(help: ArgumentHelp("The seed of --purge-between random (default: drawn, and printed).", valueName: "S"))
    var seed: UInt64?

    @Option(help: ArgumentHelp("What to purge between launches besides tmp/: none, tmp, caches or random (default: tmp).", valueName: "WHAT"))
    var purgeBetween: String?

    @Option(help: ArgumentHelp("Where the program finds its container: home (/home/app, the default) or ios (iOS's paths under UUIDs recorded in the store; see docs/run.md).", valueName: "home|ios"))
    var layout: String?

    @Flag(help: "With --layout ios and --launches: new UUIDs at every launch, as if the app were reinstalled between launches.")
    var relocate = false

    @Option(help: ArgumentHelp("Between launches, the user edits Documents/ through file sharing: random renames, replacements, deletions and additions drawn from the seed (needs an Info.plist that enables file sharing).", valueName: "random"))
    var shareEdits: String?

    @Option(name: .customLong("power-cut"), help: ArgumentHelp("With --launches: end every launch but the last with a power cut at a moment drawn from --seed (random) or SECONDS after the program started.", valueName: "random|SECONDS"))
    var powerCut: String?

    @Option(name: .customLong("kill"), help: ArgumentHelp("With --launches: kill every launch but the last with SIGKILL at a moment drawn from --seed (random) or SECONDS after it started.", valueName: "random|SECONDS"))
    var kill: String?

    @Option(help: ArgumentHelp("The latest moment a random --power-cut, --kill or --suspend-after may be drawn at (default 2).", valueName: "SECONDS"))
    var within: Double?

    @Option(name: .customLong("power-model"), help: ArgumentHelp("When a name change becomes durable for --power-cut: posix (with its folder's fsync, the default) or ext4 (with any fsync, as ext4's journal commits).", valueName: "MODEL"))
    var powerModel: String?

    @Flag(help: "With --launches: print the launches' report as one JSON object on stdout at the end.")
    var json = false

    @Option(help: ArgumentHelp("Suspend the program this long after each launch starts (30s, 1.5s), or with --launches at a moment drawn from --seed (random): killed with 0xdead10cc, status 204, if it holds a lock on a shared group's file then.", valueName: "DURATION|random"))
    var suspendAfter: String?

    @Option(help: ArgumentHelp("How long a program suspended by --suspend-after stays suspended before it is resumed (default 1s).", valueName: "DURATION"))
    var resumeAfter: String?

    @Flag(help: "Check the container against the storage guidelines when the program exits (see 'containerfs check').")
    var check = false

    @OptionGroup(title: "Check options (with --check)") var checkOptions: CheckOptions

    @Argument(parsing: .postTerminator, help: ArgumentHelp("The program and its arguments, after --.", valueName: "PROGRAM ARGS"))
    var command: [String] = []

    func validate() throws {
        if command.isEmpty { throw ValidationError("name the program to run after --: containerfs run STORE -- PROGRAM ARGS…") }
        if noConfine, noNetwork { throw ValidationError("--no-network needs the confinement: drop --no-confine") }
        if noConfine, !bindReadOnly.isEmpty { throw ValidationError("--bind-ro needs the confinement: drop --no-confine") }
        if noConfine, !grantItems.isEmpty { throw ValidationError("--grant needs the confinement (unconfined, the program sees the whole host): drop --no-confine") }
        for item in environmentItems where item.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)[0].isEmpty {
            throw ValidationError("--env \(item) names no variable: write --env NAME or --env NAME=VALUE")
        }
        if let launches, launches < 1 { throw ValidationError("--launches must be at least 1, not \(launches)") }
        if launches == nil, seed != nil || purgeBetween != nil || shareEdits != nil {
            throw ValidationError("--seed, --purge-between and --share-edits go with --launches N")
        }
        if let layout, layout != "home", layout != "ios" { throw ValidationError("--layout must be home or ios, not '\(layout)'") }
        if noConfine, layout == "ios" { throw ValidationError("--layout ios needs the confinement: drop --no-confine") }
        if relocate, layout != "ios" || launches == nil { throw ValidationError("--relocate goes with --layout ios and --launches N") }
        if let shareEdits, shareEdits != "random" { throw ValidationError("--share-edits must be random, not '\(shareEdits)'") }
        if powerCut != nil, kill != nil { throw ValidationError("choose --power-cut or --kill, not both") }
        if let when = powerCut ?? kill {
            guard let launches, launches >= 2 else {
                throw ValidationError("--\(powerCut != nil ? "power-cut" : "kill") ends every launch but the last: it goes with --launches N, N at least 2")
            }
            guard Launches.Moment(when, within: 2) != nil else {
                throw ValidationError("--\(powerCut != nil ? "power-cut" : "kill") takes random or a number of seconds, not '\(when)'")
            }
        }
        if let within, !(within.isFinite && within > 0 && within <= 86400) {
            throw ValidationError("--within takes a number of seconds above 0, not \(within)")
        }
        if within != nil, powerCut != "random", kill != "random", suspendAfter != "random" {
            throw ValidationError("--within goes with --power-cut random, --kill random or --suspend-after random")
        }
        if suspendAfter == "random", launches == nil {
            throw ValidationError("--suspend-after random draws each launch's moment from --seed: it goes with --launches N")
        }
        if let powerModel {
            guard powerCut != nil else { throw ValidationError("--power-model goes with --power-cut") }
            guard Durability.NameModel(rawValue: powerModel) != nil else {
                throw ValidationError("--power-model must be posix or ext4, not '\(powerModel)'")
            }
        }
        if json, launches == nil { throw ValidationError("--json goes with --launches N") }
        if noConfine, suspendAfter != nil { throw ValidationError("--suspend-after needs the confinement: drop --no-confine") }
        if resumeAfter != nil, suspendAfter == nil { throw ValidationError("--resume-after goes with --suspend-after") }
        for (option, value) in [("--suspend-after", suspendAfter == "random" ? nil : suspendAfter), ("--resume-after", resumeAfter)] {
            if let value, Quantity.seconds(value) == nil {
                throw ValidationError("bad duration '\(value)' for \(option): write a number of seconds, or one with s, m or h, as 2s or 1.5s")
            }
        }
        if !check, checkOptions.given { throw ValidationError("the check's options go with --check") }
        if let purgeBetween, Launches.PurgeBetween(rawValue: purgeBetween) == nil {
            throw ValidationError("--purge-between must be none, tmp, caches or random, not '\(purgeBetween)'")
        }
    }

    /// The `--env` items: a name with its value, or with nil to take this environment's.
    private var addedEnvironment: [(name: String, value: String?)] {
        environmentItems.map { item in
            let parts = item.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
            return (parts[0], parts.count == 2 ? parts[1] : nil)
        }
    }

    func run() throws {
        var status: Int32 = 0
        var checkFailed = false
        try reportingErrors {
            let settings = check ? try checkOptions.settings() : nil
            if let lowStorage { try purgeForLowStorage(try Store.open(store), lowStorage, option: "--low-storage") }
            var run = Run(store: store, noConfine: noConfine, noNetwork: noNetwork, bindReadOnly: bindReadOnly, key: key,
                          command: command, addedEnvironment: addedEnvironment)
            run.locked = locked
            run.grants = grantItems.map(GrantRequest.init(parsing:))
            run.iosLayout = layout == "ios"
            run.relocate = relocate
            run.suspendAfter = suspendAfter.flatMap(Quantity.seconds)
            if let resumeAfter = resumeAfter.flatMap(Quantity.seconds) { run.resumeAfter = resumeAfter }
            if let launches {
                let event = (powerCut ?? kill).flatMap { Launches.Moment($0, within: within ?? 2) }.map {
                    Launches.Event(kind: powerCut != nil ? .powerCut : .kill, moment: $0,
                                   model: powerModel.flatMap(Durability.NameModel.init(rawValue:)) ?? .posix)
                }
                run.launches = Launches(count: launches, seed: seed ?? UInt64.random(in: 0..<(1 << 32)),
                                        purge: purgeBetween.flatMap(Launches.PurgeBetween.init(rawValue:)) ?? .tmp,
                                        shareEdits: shareEdits != nil, event: event)
                run.launches?.json = json
                if suspendAfter == "random" { run.launches?.randomSuspension = within ?? 2 }
            }
            let runCheck = settings.map { _ in RunCheck() }
            if let runCheck { run.atProgramExit = { runCheck.take($0) } }
            let since = AuditLog.now()
            status = try run.runInContainer()
            if let runCheck, let settings {
                if let error = runCheck.error { throw error }
                let report = runCheck.report(try Store.open(store, changing: false), name: store, since: since, settings: settings,
                                             replay: run.launches?.replay)
                try checkOptions.writeJUnit(report)
                FileHandleOutput.standardError.write(report.table)
                checkFailed = report.failed
            }
        }
        if status != 0 { throw ExitCode(status) }
        if checkFailed { throw ExitCode(1) }
    }
}

struct SuspendCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "suspend",
        abstract: "Suspend the program running in a container, as iOS suspends an app sent to the background.",
        discussion: """
            Stops every process of the program that 'containerfs run STORE' runs (SIGSTOP, all \
            of its sandbox). If one of them holds a file lock (flock, POSIX or OFD) on a file in \
            a shared group container at that moment, the program is killed instead, as iOS kills \
            it with the termination code 0xdead10cc: this command prints that line, and the run \
            prints it too and exits with status 204. Locks in the app's own container do not \
            count. 'containerfs resume STORE' continues a suspended program. See docs/groups.md.

            A lock that another process holds (a stopped update or delivery) is waited for at most 10 s, then the command gives up naming that process, exit 75 (see 'containerfs --help').
            """)

    @Argument(help: "The store of the app container whose program runs.")
    var store: String

    func run() throws {
        try reportingErrors {
            switch try Suspension.suspend(store: store) {
            case .suspended:
                FileHandleOutput.standardOutput.write("suspended the program of \(store): it holds no lock in a shared group container; continue it with 'containerfs resume \(store)'\n")
            case .killed(let lock):
                FileHandleOutput.standardOutput.write(SuspensionRule.message(lock) + "\n")
            }
        }
    }
}

struct ResumeCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "resume",
        abstract: "Continue a program that 'containerfs suspend' suspended.",
        discussion: "Sends SIGCONT to every process of the program's sandbox. See docs/groups.md.")

    @Argument(help: "The store of the app container whose program runs.")
    var store: String

    func run() throws {
        try reportingErrors {
            try Suspension.resume(store: store)
            FileHandleOutput.standardOutput.write("resumed the program of \(store)\n")
        }
    }
}
