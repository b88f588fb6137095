import Foundation
import Glibc
import Testing

/// Bad input (SPEC §9): one line on stderr saying what is wrong and what to do, a non-zero
/// exit (64 for misuse of the command line), and the store — or whatever was named —
/// left exactly as it was.
@Suite("CLI errors")
struct CLIErrorTests {
    // MARK: create

    /// State files planted by whoever can write the state folder: a 100 GB sparse file is
    /// refused at once instead of read into memory, and a FIFO blocks nothing.
    @Test func plantedStateFilesAreRefusedAtOnce() throws {
        let container = try MountedContainer()
        let format = container.stored(".containerfs/format")
        let saved = try Data(contentsOf: URL(fileURLWithPath: format))
        try #require(truncate(format, 100 << 30) == 0)
        let huge = try runProgram(["/usr/bin/time", "-f", "%M", containerfsBinary, "usage", container.store])
        #expect(huge.status == 1, "\(huge)")
        let peakKiB = Int(huge.stderr.split(separator: "\n").last ?? "") ?? .max
        #expect(peakKiB < 64 << 10, "peak \(peakKiB) KiB")
        try saved.write(to: URL(fileURLWithPath: format))

        let protection = container.stored(".containerfs/protection")
        unlink(protection)
        try #require(mkfifo(protection, 0o600) == 0)
        for command in [["usage", container.store], ["status", container.store]] {
            // SIGKILL: a child of a test thread inherits SIGTERM blocked.
            let result = try runProgram(["timeout", "-s", "KILL", "20", containerfsBinary] + command)
            #expect(result.status != 137, "\(command) blocked on a FIFO")
        }
    }

    /// A damaged capacity or protection file is one line and exit 1 from every command
    /// that opens the store (the mount included), not a silent "no capacity" or default
    /// class; `capacity STORE SIZE` repairs the capacity.
    @Test func damagedSettingsAreOneClearLine() throws {
        let scene = try CLIScene()
        let store = scene.base + "/store"
        #expect(try containerfs(["create", store, "--bundle", scene.bundle, "--capacity", "8M", "--protection", "complete"]).status == 0)
        let mountpoint = scene.base + "/mnt"
        try FileManager.default.createDirectory(atPath: mountpoint, withIntermediateDirectories: true)
        defer { _ = try? containerfs(["unmount", mountpoint]) }  // a build that mounts it anyway
        let capacityFile = store + "/.containerfs/capacity", protectionFile = store + "/.containerfs/protection"
        let goodProtection = try Data(contentsOf: URL(fileURLWithPath: protectionFile))
        let cases: [(file: String, contents: String, mentions: String, advice: String)] = [
            (capacityFile, "garbage\n", "capacity", "containerfs capacity"),
            (capacityFile, "-5\n", "capacity", "containerfs capacity"),
            (protectionFile, "nonsense\n", "protection", "complete"),
        ]
        for (file, contents, mentions, advice) in cases {
            try Data(contents.utf8).write(to: URL(fileURLWithPath: file))
            for command in [["usage", store], ["mount", store, mountpoint], ["capacity", store]] {
                let result = try containerfs(command)
                expectUserError(result, status: 1, mentions: [mentions, "damaged"], advice: [advice])
            }
            if file == capacityFile {
                #expect(try containerfs(["capacity", store, "4M"]).status == 0, "the capacity command repairs it")
            } else {
                try goodProtection.write(to: URL(fileURLWithPath: file))
            }
            #expect(try containerfs(["usage", store]).status == 0)
        }
    }

    /// A store named relative to the working folder, with one letter: the device check
    /// that looks at the folder holding it trapped there once.
    @Test func createWithAOneLetterStoreInTheWorkingFolder() throws {
        let scene = try CLIScene()
        let result = try runProgram([containerfsBinary, "create", "s", "--bundle", scene.bundle], directory: scene.base)
        #expect(result.status == 0, "\(result)")
        #expect(access(scene.base + "/s/.containerfs", F_OK) == 0)
    }

    @Test func createWithAMissingBundle() throws {
        let scene = try CLIScene()
        let result = try scene.unchanged { try containerfs(["create", scene.base + "/store", "--bundle", scene.base + "/Missing.app"]) }
        expectUserError(result, mentions: ["Missing.app"], advice: [".app", "--bundle"])
    }

    @Test func createWithABundleNotNamedApp() throws {
        let scene = try CLIScene()
        try FileManager.default.createDirectory(atPath: scene.base + "/Thing", withIntermediateDirectories: true)
        let result = try scene.unchanged { try containerfs(["create", scene.base + "/store", "--bundle", scene.base + "/Thing"]) }
        expectUserError(result, status: 64, mentions: ["Thing"], advice: ["NAME.app", ".app"])
    }

    @Test func createWithABundleThatIsASymlink() throws {
        let scene = try CLIScene()
        try FileManager.default.createSymbolicLink(atPath: scene.base + "/Link.app", withDestinationPath: scene.bundle)
        let result = try scene.unchanged { try containerfs(["create", scene.base + "/store", "--bundle", scene.base + "/Link.app"]) }
        expectUserError(result, mentions: ["Link.app", "symlink"], advice: ["real", "folder"])
    }

    @Test func createWithABundleHoldingAFIFO() throws {
        let scene = try CLIScene()
        #expect(mkfifo(scene.bundle + "/res/pipe", 0o644) == 0)
        // A FIFO opened for copying would block forever: bound the wait.
        let result = try scene.unchanged {
            try runProgram(["timeout", "30", containerfsBinary, "create", scene.base + "/store", "--bundle", scene.bundle])
        }
        #expect(result.status != 124, "create hung on the FIFO")
        expectUserError(result, mentions: ["pipe"], advice: ["remove", "only"])
    }

    @Test func createOverANonEmptyFolder() throws {
        let scene = try CLIScene()
        let target = scene.base + "/occupied"
        try FileManager.default.createDirectory(atPath: target, withIntermediateDirectories: true)
        try Data("mine\n".utf8).write(to: URL(fileURLWithPath: target + "/file"))
        let result = try scene.unchanged { try containerfs(["create", target, "--bundle", scene.bundle]) }
        expectUserError(result, mentions: ["occupied"], advice: ["new path", "choose", "empty"])
    }

    @Test func createOverAnExistingStore() throws {
        let container = try MountedContainer()
        let before = try treeDigest(container.store)
        let result = try containerfs(["create", container.store, "--bundle", container.base + "/Demo.app"])
        expectUserError(result, mentions: [container.store], advice: ["new path", "choose", "empty"])
        #expect(try treeDigest(container.store) == before, "the store changed")
    }

    // MARK: mount

    @Test func mountAMissingStore() throws {
        let scene = try CLIScene()
        try FileManager.default.createDirectory(atPath: scene.base + "/mnt", withIntermediateDirectories: true)
        let result = try scene.unchanged { try containerfs(["mount", scene.base + "/nostore", scene.base + "/mnt"]) }
        expectUserError(result, mentions: ["nostore"], advice: ["create"])
        #expect(!isMountPoint(scene.base + "/mnt"))
    }

    @Test func mountAFolderThatIsNotAStore() throws {
        let scene = try CLIScene()
        let foreign = scene.base + "/foreign"
        try FileManager.default.createDirectory(atPath: foreign + "/Documents", withIntermediateDirectories: true)
        try Data("not a container\n".utf8).write(to: URL(fileURLWithPath: foreign + "/notes.txt"))
        try FileManager.default.createDirectory(atPath: scene.base + "/mnt", withIntermediateDirectories: true)
        let result = try scene.unchanged { try containerfs(["mount", foreign, scene.base + "/mnt"]) }
        expectUserError(result, mentions: ["foreign", "not a container"], advice: ["create"])
        #expect(!isMountPoint(scene.base + "/mnt"))
    }

    @Test func mountOnAMissingMountPoint() throws {
        let container = try MountedContainer()
        let missing = container.base + "/nowhere"
        let result = try unchangedStore(container) { try containerfs(["mount", container.store, missing]) }
        expectUserError(result, mentions: ["nowhere"], advice: ["mkdir", "create"])
        #expect(!FileManager.default.fileExists(atPath: missing), "the mount point must not be made")
    }

    @Test func mountOnAFile() throws {
        let container = try MountedContainer()
        let file = container.base + "/file"
        try Data("x".utf8).write(to: URL(fileURLWithPath: file))
        let result = try unchangedStore(container) { try containerfs(["mount", container.store, file]) }
        expectUserError(result, mentions: [file], advice: ["folder", "directory"])
    }

    @Test func mountAStoreThatIsAlreadyMounted() throws {
        try withMountedContainer { container in
            let second = container.base + "/second"
            try FileManager.default.createDirectory(atPath: second, withIntermediateDirectories: true)
            let result = try unchangedStore(container) { try containerfs(["mount", container.store, second]) }
            // It names where the store is mounted, and says to unmount it.
            expectUserError(result, mentions: ["already mounted", container.mountpoint], advice: ["unmount"])
            #expect(!isMountPoint(second))
            #expect(FileManager.default.fileExists(atPath: container.mounted("Demo.app/Info.plist")), "the first mount still works")
        }
    }

    @Test func mountOnAMountPointThatIsAlreadyMounted() throws {
        try withMountedContainer { container in
            let other = try MountedContainer()
            let result = try unchangedStore(other) { try containerfs(["mount", other.store, container.mountpoint]) }
            expectUserError(result, mentions: [container.mountpoint], advice: ["unmount"])
            #expect(!storeIsLocked(other), "no daemon may be left serving the second store")
            #expect(FileManager.default.fileExists(atPath: container.mounted("Demo.app/Info.plist")), "the first mount still works")
        }
    }

    // "=", "==" and "rw,=" trapped the option parser (a name was read from an empty split).
    @Test(arguments: ["timeout=abc", "timeout", "threads=0", "ro", "rw,ro", "nosuchoption", "=", "==", "rw,="])
    func mountWithABadOption(option: String) throws {
        let container = try MountedContainer()
        let result = try unchangedStore(container) { try containerfs(["mount", container.store, container.mountpoint, "-o", option]) }
        // The message names the offending item itself.
        let named = option.split(separator: ",").last.map(String.init) ?? option
        expectUserError(result, status: 64, mentions: [named], advice: ["help", "takes", "supported", "rules"])
        #expect(!isMountPoint(container.mountpoint))
        #expect(!storeIsLocked(container), "no daemon may be left holding the store")
    }

    // MARK: the command line itself

    @Test(arguments: [
        (["mount"], "mount", "<store>"),
        (["mount", "a", "b", "--bogus"], "mount", "--bogus"),
        (["create", "store"], "create", "--bundle"),
        (["purge", "--older-than"], "purge", "--older-than"),
        (["frobnicate"], nil, "frobnicate"),
    ] as [([String], String?, String)])
    func aCommandLineThatDoesNotParse(arguments: [String], command: String?, named: String) throws {
        let result = try containerfs(arguments)
        let help = ["containerfs", command, "--help"].compactMap { $0 }.joined(separator: " ")
        expectUserError(result, status: 64, mentions: [named], advice: [help])
    }

    @Test func helpIsStillTheWholeText() throws {
        let result = try containerfs(["mount", "--help"])
        #expect(result.status == 0, "\(result)")
        #expect(result.stdout.contains("USAGE: containerfs mount") && result.stdout.contains("OPTIONS:"), "\(result)")
    }

    // MARK: several paths, one bad

    /// `exclude`, `include` and `protect` name several paths: one that is missing fails the
    /// command before any is changed (SPEC §9: the store as it was), in one line that names
    /// it and says what to do.
    @Test func excludeIncludeAndProtectChangeNothingWhenOnePathIsMissing() throws {
        let container = try MountedContainer()
        let kept = container.stored("Library/kept")
        try FileManager.default.createDirectory(atPath: kept, withIntermediateDirectories: true)
        let missing = container.stored("Documents/missing")
        for command in ["exclude", "protect"] {
            let extra = command == "protect" ? ["--class", "complete"] : []
            let result = try unchangedStore(container) { try containerfs([command, kept, missing] + extra) }
            expectUserError(result, status: 1, mentions: ["Documents/missing"], advice: ["name an existing"])
        }
        // The listing sees no attribute: look at them.
        func attribute(_ name: String) throws -> Bool { try runProgram(["getfattr", "-n", name, kept]).status == 0 }
        #expect(try !attribute("user.containerfs.exclude-from-backup"), "exclude changed the first path")
        #expect(try !attribute("user.containerfs.protection"), "protect changed the first path")
        #expect(try containerfs(["exclude", kept]).status == 0)
        let result = try unchangedStore(container) { try containerfs(["include", kept, missing]) }
        expectUserError(result, status: 1, mentions: ["Documents/missing"], advice: ["name an existing"])
        #expect(try attribute("user.containerfs.exclude-from-backup"), "include changed the first path")
    }

    /// `protect A B` by the store's owner, where B is a file of root's she may not change
    /// (EACCES), changes neither: every path's change is asked first.
    @Test func protectChangesNothingWhenOnePathIsRefused() throws {
        let alice = "cfs-alice"
        let container = try MountedContainer(user: alice)
        let mine = container.stored("Documents/mine.txt"), roots = container.stored("Documents/roots.txt")
        for path in [mine, roots] { try Data("x\n".utf8).write(to: URL(fileURLWithPath: path)) }
        let owner = try #require(getpwnam(alice))
        #expect(chown(mine, owner.pointee.pw_uid, owner.pointee.pw_gid) == 0 && chown(roots, 0, 0) == 0 && chmod(roots, 0o644) == 0)
        let result = try containerfs(["protect", mine, roots, "--class", "complete"], user: alice)
        expectUserError(result, status: 1, mentions: ["Documents/roots.txt", "Permission denied", "nothing was changed"], advice: ["leave it out"])
        #expect(try runProgram(["getfattr", "-n", "user.containerfs.protection", mine]).status != 0, "protect changed the first path")
        #expect(try containerfs(["protect", mine, "--class", "complete"], user: alice).status == 0)
    }

    /// Through a mount, `exclude A B` and `include A B` with B in the Inbox (the rules refuse
    /// its change, EACCES) change neither path: every path's change is asked first.
    @Test func excludeAndIncludeThroughAMountChangeNothingWhenOnePathIsRefused() throws {
        try withMountedContainer { container in
            let name = "user.containerfs.exclude-from-backup"
            try Data("mine\n".utf8).write(to: URL(fileURLWithPath: container.mounted("Documents/mine.txt")))
            try Data("handed over\n".utf8).write(to: URL(fileURLWithPath: container.stored("Documents/Inbox/given.txt")))
            let allowed = container.mounted("Documents/mine.txt"), refused = container.mounted("Documents/Inbox/given.txt")
            func attribute(_ path: String) throws -> Bool { try runProgram(["getfattr", "-n", name, path]).status == 0 }
            let excluded = try containerfs(["exclude", allowed, refused])
            expectUserError(excluded, status: 1, mentions: ["Documents/Inbox/given.txt", "Permission denied", "nothing was changed"], advice: ["leave it out"])
            #expect(try !attribute(container.stored("Documents/mine.txt")), "exclude changed the first path")
            // Both excluded in the store, behind the mount: include may not half-undo it.
            for path in ["Documents/mine.txt", "Documents/Inbox/given.txt"] {
                #expect(try runProgram(["setfattr", "-n", name, "-v", "1", container.stored(path)]).status == 0)
            }
            let included = try containerfs(["include", allowed, refused])
            expectUserError(included, status: 1, mentions: ["Documents/Inbox/given.txt", "nothing was changed"], advice: ["leave it out"])
            #expect(try attribute(container.stored("Documents/mine.txt")), "include changed the first path")
            // Alone, the allowed path changes.
            #expect(try containerfs(["include", allowed]).status == 0)
            #expect(try !attribute(container.stored("Documents/mine.txt")))
        }
    }

    /// A path the system refuses (a missing archive, a store under /proc) is named with the
    /// errno and what to do about it, not the bare errno string.
    @Test func systemRefusalsSayWhatToDo() throws {
        let scene = try CLIScene()
        let missing = try scene.unchanged { try containerfs(["restore", scene.base + "/missing.tar", scene.base + "/restored", "--bundle", scene.bundle]) }
        expectUserError(missing, status: 1, mentions: ["missing.tar", "No such file or directory"], advice: ["check that the path"])
        let proc = try containerfs(["create", "/proc/containerfs-store", "--bundle", scene.bundle])
        expectUserError(proc, status: 1, mentions: ["/proc/containerfs-store"], advice: ["check that the path"])
    }

    /// `deliver A MISSING` hands nothing over: the Inbox stays empty.
    @Test func deliverWithOneMissingFileDeliversNothing() throws {
        let container = try MountedContainer()
        let present = container.base + "/report.txt"
        try Data("report\n".utf8).write(to: URL(fileURLWithPath: present))
        let result = try unchangedStore(container) { try containerfs(["deliver", container.store, present, container.base + "/absent.txt"]) }
        expectUserError(result, status: 1, mentions: ["absent.txt"], advice: ["name an existing"])
        #expect(result.stdout.isEmpty, "nothing may be delivered: \(result.stdout)")
    }

    /// A path that does not exist, named to `share`, `run --grant` or `check`, is one line
    /// that says what to do (SPEC §9), not the bare errno, nor a report's working name.
    @Test func missingPathsSayWhatToDo() throws {
        let plist = Array(#"<plist version="1.0"><dict><key>UIFileSharingEnabled</key><true/></dict></plist>"#.utf8)
        let container = try MountedContainer(infoPlist: plist)
        let store = container.store, absent = container.base + "/absent"
        let cases: [([String], String, String)] = [
            (["share", store, "ls", "missing"], "Documents/missing", "share \(store) ls"),
            (["share", store, "get", "missing", container.base + "/out"], "Documents/missing", "share \(store) ls"),
            (["share", store, "rm", "missing"], "Documents/missing", "share \(store) ls"),
            (["share", store, "mv", "missing", "b"], "Documents/missing", "share \(store) ls"),
            (["share", store, "put", absent], absent, "name an existing"),
            (["run", store, "--grant", absent, "--", "true"], absent, "name an existing"),
            (["check", store, "--config", absent + ".json"], absent + ".json", "name an existing"),
            (["check", store, "--junit", absent + "/report.xml"], absent + "/report.xml", "create it"),
        ]
        for (arguments, mention, advice) in cases {
            let result = try unchangedStore(container) { try containerfs(arguments) }
            expectUserError(result, mentions: [mention], advice: [advice])
            #expect(!result.stderr.contains(".partial-"), "\(arguments): \(result.stderr)")
        }
    }

    /// `share` of an app whose Info.plist does not allow file sharing (or does not parse)
    /// says how to allow it, not only that it is off.
    @Test(arguments: [nil, #"<plist version="1.0"><dict><key>CFBundleName</key><string>Demo</string></dict></plist>"#])
    func shareOfAnAppThatDoesNotAllowItSaysHow(plist: String?) throws {
        let container = try MountedContainer(infoPlist: plist.map { Array($0.utf8) })
        let result = try unchangedStore(container) { try containerfs(["share", container.store, "ls"]) }
        expectUserError(result, status: 1, mentions: ["file sharing is off"], advice: ["UIFileSharingEnabled</key><true/> to Demo.app/Info.plist"])
        #expect(result.stderr.contains("containerfs update \(container.store) --bundle"), "\(result.stderr)")
    }

    /// `purge --until-free` refused, with another option or on a running container, says
    /// which option to drop or what to unmount, not only that it is refused.
    @Test func purgeUntilFreeRefusalsSayWhatToDo() throws {
        let container = try MountedContainer()
        for option in ["--dry-run", "--include-running"] {
            let result = try unchangedStore(container) { try containerfs(["purge", container.store, "--caches", "--until-free", "1M", option]) }
            expectUserError(result, status: 64, mentions: [option], advice: ["drop \(option)"])
        }
        try container.mount()
        let result = try unchangedStore(container) { try containerfs(["purge", container.store, "--caches", "--until-free", "1M"]) }
        expectUserError(result, status: 1, mentions: ["in use"], advice: ["containerfs unmount \(container.mountpoint)"])
    }

    /// `lock` of a device folder none of whose containers is mounted, and an object-store
    /// command given something that is not an s3:// URL: the line says what to do.
    @Test func lockOfAnIdleDeviceAndANonURLSayWhatToDo() throws {
        let scene = try CLIScene()
        let device = scene.base + "/device"
        try FileManager.default.createDirectory(atPath: device, withIntermediateDirectories: true)
        #expect(try containerfs(["create", device + "/App", "--bundle", scene.bundle, "--group", "group.com.example.idle"]).status == 0)
        for command in ["lock", "unlock"] {
            let result = try scene.unchanged { try containerfs([command, device]) }
            expectUserError(result, status: 1, mentions: [device, "mounted"], advice: ["containerfs mount", "containerfs run"])
        }
        let result = try containerfs(["backups", "notaurl"])
        expectUserError(result, status: 64, mentions: ["notaurl"], advice: ["write s3://BUCKET"])
    }

    // MARK: what the system refused, and what to do about it

    /// `power-cut` needs the daemon of a live mount: on a container that is not mounted,
    /// the line says how to mount it, not only that it is not.
    @Test func aCommandNeedingTheDaemonSaysHowToMount() throws {
        let container = try MountedContainer()
        let result = try unchangedStore(container) { try containerfs(["power-cut", container.store]) }
        expectUserError(result, status: 1, mentions: [container.store, "not mounted"],
                        advice: ["containerfs mount \(container.store) MOUNTPOINT -o power-loss"])
    }

    /// A new store or archive in a folder that does not exist: the line says to make the
    /// folder first, and nothing is made (not the folder either).
    @Test func createBackupAndRestoreIntoAFolderThatDoesNotExist() throws {
        let container = try MountedContainer()
        let missing = container.base + "/nofolder"
        let archive = container.base + "/backup.tar"
        #expect(try containerfs(["backup", container.store, archive]).status == 0)
        let bundle = container.base + "/Demo.app"
        for arguments in [["backup", container.store, missing + "/backup.tar"],
                          ["restore", archive, missing + "/restored", "--bundle", bundle],
                          ["create", missing + "/store", "--bundle", bundle]] {
            let result = try unchangedStore(container) { try containerfs(arguments) }
            expectUserError(result, status: 1, mentions: [missing, "does not exist"], advice: ["make it first (mkdir -p)"])
        }
        #expect(!FileManager.default.fileExists(atPath: missing))
    }

    /// `share get` into a host folder that does not exist, and `share mv` onto a name that
    /// is taken: the errno and what to do about it.
    @Test func shareRefusedByTheSystemSaysWhatToDo() throws {
        let plist = Array(#"<plist version="1.0"><dict><key>UIFileSharingEnabled</key><true/></dict></plist>"#.utf8)
        let container = try MountedContainer(infoPlist: plist)
        for name in ["a.txt", "b.txt"] { try Data("\(name)\n".utf8).write(to: URL(fileURLWithPath: container.stored("Documents/" + name))) }
        let store = container.store, missing = container.base + "/nofolder"
        let cases: [([String], [String], String)] = [
            (["share", store, "get", "a.txt", missing + "/a.txt"], [missing, "No such file or directory"], "check that the path"),
            (["share", store, "mv", "a.txt", "b.txt"], ["Documents/b.txt", "File exists"], "remove it, or choose another name"),
        ]
        for (arguments, mentions, advice) in cases {
            let result = try unchangedStore(container) { try containerfs(arguments) }
            expectUserError(result, status: 1, mentions: mentions, advice: [advice])
        }
        #expect(!FileManager.default.fileExists(atPath: missing))
    }

    /// A path that is there but that the user may not reach (in a folder of root's she
    /// cannot enter), named to `deliver`, `share put`, `run --grant` or `check --junit`: the
    /// line says it is a matter of permission, not to name an existing file (nor, for the
    /// report, Foundation's wording).
    @Test func anUnreachablePathIsNamedAsSuch() throws {
        let alice = "cfs-alice"
        let plist = Array(#"<plist version="1.0"><dict><key>UIFileSharingEnabled</key><true/></dict></plist>"#.utf8)
        let container = try MountedContainer(user: alice, infoPlist: plist)
        let secret = container.base + "/secret", source = container.base + "/secret/report.txt"
        try FileManager.default.createDirectory(atPath: secret, withIntermediateDirectories: false)
        try Data("report\n".utf8).write(to: URL(fileURLWithPath: source))
        #expect(chown(secret, 0, 0) == 0 && chmod(secret, 0o700) == 0)
        for arguments in [["deliver", container.store, source], ["share", container.store, "put", source],
                          ["run", container.store, "--grant", source, "--", "true"]] {
            let result = try unchangedStore(container) { try containerfs(arguments, user: alice) }
            expectUserError(result, status: 1, mentions: [source, "Permission denied"], advice: ["this user may not"])
        }
        let report = secret + "/report.xml"
        let result = try unchangedStore(container) { try containerfs(["check", container.store, "--junit", report], user: alice) }
        expectUserError(result, status: 1, mentions: [report, "Permission denied"], advice: ["this user may not"])
    }

    /// `run --no-confine` of a program that is not there: one line naming it, and how to
    /// name one that is; nothing is left mounted.
    @Test func runOfAMissingProgramSaysHowToNameOne() throws {
        let container = try MountedContainer()
        let result = try containerfs(["run", container.store, "--no-confine", "--", "cfs-no-such-program"])
        expectUserError(result, status: 1, mentions: ["cfs-no-such-program", "No such file or directory"], advice: ["give its full path"])
        #expect(!isMountPoint(container.mountpoint))
    }

    // MARK: unmount and audit

    @Test func unmountAFolderThatIsNotAMount() throws {
        let scene = try CLIScene()
        let plain = scene.base + "/plain"
        try FileManager.default.createDirectory(atPath: plain, withIntermediateDirectories: true)
        let result = try scene.unchanged { try containerfs(["unmount", plain]) }
        expectUserError(result, mentions: [plain, "not a containerfs mount"], advice: ["nothing to unmount", "mount -t"])
    }

    @Test func unmountAMountThatIsNotAContainer() throws {
        // A tmpfs is a mount, but not ours: it must be refused, not unmounted.
        let scene = try CLIScene()
        let other = scene.base + "/tmpfs"
        try FileManager.default.createDirectory(atPath: other, withIntermediateDirectories: true)
        let mounted = try runProgram(["mount", "-t", "tmpfs", "-o", "size=1m", "cfs-test-tmpfs", other])
        try #require(mounted.status == 0, "mount -t tmpfs: \(mounted)")
        defer {
            _ = try? runProgram(["umount", "-l", other])
            withExtendedLifetime(scene) {}
        }
        try Data("kept\n".utf8).write(to: URL(fileURLWithPath: other + "/file"))
        let result = try containerfs(["unmount", other])
        expectUserError(result, mentions: [other, "not a containerfs mount"], advice: ["nothing to unmount", "mount -t"])
        #expect(isMountPoint(other), "the tmpfs is still mounted")
        #expect((try? String(contentsOfFile: other + "/file", encoding: .utf8)) == "kept\n")
    }

    @Test func unmountAMissingPath() throws {
        let scene = try CLIScene()
        let result = try scene.unchanged { try containerfs(["unmount", scene.base + "/absent"]) }
        expectUserError(result, mentions: ["absent"], advice: ["nothing to unmount", "mount -t"])
    }

    /// A duration past what nanoseconds since the epoch count (292 years) is refused in one
    /// line, not a trap (exit 132).
    @Test(arguments: ["10000000000", "99999999999999999999999w"])
    func purgeOlderThanBeyondTimeItself(_ duration: String) throws {
        let container = try MountedContainer()
        let result = try unchangedStore(container) { try containerfs(["purge", container.store, "--caches", "--older-than", duration]) }
        expectUserError(result, status: 64, mentions: [duration, "--older-than"], advice: ["292 years"])
    }

    @Test func auditAMissingStore() throws {
        let scene = try CLIScene()
        let result = try scene.unchanged { try containerfs(["audit", scene.base + "/nostore"]) }
        expectUserError(result, mentions: ["nostore"], advice: ["create"])
        #expect(result.stdout.isEmpty)
    }

    @Test func auditAFolderThatIsNotAStore() throws {
        let scene = try CLIScene()
        let result = try scene.unchanged { try containerfs(["audit", scene.bundle]) }
        expectUserError(result, mentions: ["Demo.app", "not a container"], advice: ["create"])
    }
}

// MARK: - Helpers

/// A temporary folder with a valid bundle `Demo.app` in it, removed afterwards.
private final class CLIScene {
    let base: String
    let bundle: String

    init() throws {
        base = try makeTemporaryDirectory()
        bundle = base + "/Demo.app"
        try FileManager.default.createDirectory(atPath: bundle + "/res", withIntermediateDirectories: true)
        try Data("<plist>demo</plist>\n".utf8).write(to: URL(fileURLWithPath: bundle + "/Info.plist"))
        try Data("resource\n".utf8).write(to: URL(fileURLWithPath: bundle + "/res/data.txt"))
    }

    /// Runs `body` and checks that nothing in the folder changed (no store, no leftovers).
    func unchanged(_ body: () throws -> ProgramResult) throws -> ProgramResult {
        let before = try cliTreeListing(base)
        let result = try body()
        let after = try cliTreeListing(base)
        #expect(after == before, "the command changed \(base):\nbefore:\n\(before)\nafter:\n\(after)")
        return result
    }

    deinit { _ = try? runProgram(["rm", "-rf", base]) }
}

/// Runs `body` and checks that the container's store and the folder around it are unchanged.
///
/// Two files of the state folder are the daemon's and the verifier's run-time records, not
/// the container: `mount.lock` (rewritten by every daemon that starts) and `bundle.cache`
/// (which bundle verification may refresh, SPEC §5).
private func unchangedStore(_ container: MountedContainer, _ body: () throws -> ProgramResult) throws -> ProgramResult {
    let runtime = [container.stored(".containerfs/mount.lock"), container.stored(".containerfs/bundle.cache")]
    let before = try cliTreeListing(container.base, excluding: [container.mountpoint] + runtime)
    let result = try body()
    let after = try cliTreeListing(container.base, excluding: [container.mountpoint] + runtime)
    #expect(after == before, "the store or the folder around it changed:\nbefore:\n\(before)\nafter:\n\(after)")
    return result
}

/// Every path below `path` with its type, size, mode and content digest, leaving out the
/// paths in `excluding` (a mount point is not entered: it may be another user's or dead).
private func cliTreeListing(_ path: String, excluding: [String] = []) throws -> String {
    let prune = excluding.flatMap { ["-path", $0, "-prune", "-o"] }
    let listing = try runProgram(["find", path] + prune + ["-printf", "%P %y %s %m\\n"])
    let files = try runProgram(["find", path] + prune + ["-type", "f", "-print0"])
    let digests = try runProgram(["xargs", "-0", "-r", "sha256sum"], input: Data(files.stdout.utf8))
    return listing.stdout.split(separator: "\n").sorted().joined(separator: "\n") + "\n"
        + digests.stdout.split(separator: "\n").sorted().joined(separator: "\n")
}

/// Whether a daemon holds the store's mount lock (a daemon that died does not: the kernel
/// drops its lock, even while it is a zombie).
private func storeIsLocked(_ container: MountedContainer) -> Bool {
    let fd = open(container.stored(".containerfs/mount.lock"), O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return false }
    defer { close(fd) }
    return flock(fd, LOCK_SH | LOCK_NB) != 0
}

/// Checks an error's form: failed (with `status` when given), one line on stderr that
/// names each of `mentions` (what is wrong) and holds one of `advice` (what to do).
private func expectUserError(_ result: ProgramResult, status: Int32? = nil, mentions: [String], advice: [String],
                             sourceLocation: SourceLocation = #_sourceLocation) {
    #expect(result.status != 0, "the command must fail: \(result)", sourceLocation: sourceLocation)
    if let status {
        #expect(result.status == status, "exit status \(result.status), expected \(status): \(result)", sourceLocation: sourceLocation)
    }
    let lines = result.stderr.split(separator: "\n", omittingEmptySubsequences: false)
    #expect(lines.count == 2 && lines[1].isEmpty && !lines[0].isEmpty,
            "stderr must be exactly one line: \(result.stderr.debugDescription)", sourceLocation: sourceLocation)
    let line = String(lines.first ?? "")
    for mention in mentions {
        #expect(line.contains(mention), "the message must name \(mention.debugDescription): \(line)", sourceLocation: sourceLocation)
    }
    #expect(advice.contains { line.contains($0) }, "the message must say what to do (\(advice.joined(separator: " or "))): \(line)",
            sourceLocation: sourceLocation)
}
