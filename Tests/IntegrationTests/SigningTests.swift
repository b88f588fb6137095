import Foundation
import Glibc
import Testing

/// A container signed with its own installer key in a temporary folder (nothing touches
/// the real home), its mount point, and the commands run against it.
private final class SignedStore {
    let base: String
    let store: String
    let mountpoint: String
    let key: String
    let user: String?
    /// What `containerfs create` printed.
    var created = ProgramResult(status: -1, stdout: "", stderr: "")

    /// The bundle: `Info.plist`, `run.sh` (0755), `res/data.txt`, `link` -> `Info.plist`,
    /// `ext` -> `/etc/hosts`. `environment` replaces the environment of every command.
    init(user: String? = nil, environment: [String: String]? = nil, explicitKey: Bool = true) throws {
        base = try makeTemporaryDirectory()
        store = base + "/store"
        mountpoint = base + "/mnt"
        key = base + "/keys/installer.key"
        self.user = user
        self.environment = environment
        self.explicitKey = explicitKey
        let bundle = base + "/Demo.app"
        let fm = FileManager.default
        try fm.createDirectory(atPath: bundle + "/res", withIntermediateDirectories: true)
        try fm.createDirectory(atPath: mountpoint, withIntermediateDirectories: true)
        try fm.createDirectory(atPath: base + "/keys", withIntermediateDirectories: true)
        chmod(base + "/keys", 0o700)
        try Data("<plist>demo</plist>\n".utf8).write(to: URL(fileURLWithPath: bundle + "/Info.plist"))
        try Data("#!/bin/sh\necho hi\n".utf8).write(to: URL(fileURLWithPath: bundle + "/run.sh"))
        chmod(bundle + "/run.sh", 0o755)
        try Data("resource\n".utf8).write(to: URL(fileURLWithPath: bundle + "/res/data.txt"))
        try fm.createSymbolicLink(atPath: bundle + "/link", withDestinationPath: "Info.plist")
        try fm.createSymbolicLink(atPath: bundle + "/ext", withDestinationPath: "/etc/hosts")
        if let user {
            try runProgram(["chown", "-R", "\(user):\(user)", base])
            chmod(base, 0o755)
        }
        created = try run(["create", store, "--bundle", bundle])
        guard created.status == 0 else { throw TestFailure("containerfs create failed: \(created)") }
    }

    private let environment: [String: String]?
    private let explicitKey: Bool

    /// Runs `containerfs ARGUMENTS`, with `--key` unless told otherwise.
    @discardableResult
    func run(_ arguments: [String], key: String? = nil) throws -> ProgramResult {
        let keyArguments = explicitKey || key != nil ? ["--key", key ?? self.key] : []
        return try runProgram([containerfsBinary] + arguments + keyArguments, user: user, environment: environment)
    }

    func stored(_ relative: String) -> String { store + "/" + relative }

    func write(_ relative: String, _ text: String) throws {
        try Data(text.utf8).write(to: URL(fileURLWithPath: stored(relative)))
    }

    func unmount() {
        if user != nil {
            // Root cannot stat another user's FUSE mount: ask mountinfo, and clear it as root.
            guard isListedMount(mountpoint) else { return }
            _ = try? runProgram(["fusermount3", "-u", mountpoint], user: user)
            if isListedMount(mountpoint) { _ = try? runProgram(["fusermount3", "-uz", mountpoint]) }
            return
        }
        for _ in 0..<20 {
            guard isMountPoint(mountpoint) || isDeadMount(mountpoint) else { return }
            if (try? runProgram([containerfsBinary, "unmount", mountpoint], user: user))?.status == 0 { return }
            usleep(100_000)
        }
        _ = try? runProgram(["fusermount3", "-uz", mountpoint])
    }

    deinit {
        unmount()
        _ = try? runProgram(["rm", "-rf", base])
    }
}

/// True when `path` is a mount point in /proc/self/mountinfo (read whole: past 4 KiB too).
private func isListedMount(_ path: String) -> Bool {
    let data = FileHandle(forReadingAtPath: "/proc/self/mountinfo").flatMap { try? $0.readToEnd() } ?? Data()
    return String(decoding: data, as: UTF8.self).split(separator: "\n").contains {
        $0.split(separator: " ").dropFirst(4).first == Substring(path)
    }
}

private func reinstall(_ store: String) -> String {
    "the app does not launch — reinstall it with 'containerfs update \(store) --bundle PATH/NAME.app' (its data is kept)"
}

@Suite("Signing")
struct SigningTests {
    @Test func createSignsAndACleanBundleVerifies() throws {
        let container = try SignedStore()
        #expect(container.created.stdout.contains("made a new installer key at \(container.key)"))
        #expect(container.created.stdout.contains(", signed by SHA256:"))
        var info = stat()
        #expect(stat(container.key, &info) == 0 && info.st_mode & 0o777 == 0o600)

        let verified = try container.run(["verify", container.store])
        #expect(verified.status == 0, "\(verified)")
        #expect(verified.stderr.isEmpty)
        let lines = verified.stdout.split(separator: "\n").map(String.init)
        #expect(lines.count == 2, "\(verified)")
        #expect(lines.first == "warning: Demo.app/ext: symlink leads outside the bundle (\"/etc/hosts\")")
        #expect(
            lines.last?.hasPrefix("bundle Demo.app of \(container.store) is intact: 7 entries, 3 files, 47 bytes;") == true, "\(verified)")
    }

    @Test func verifyNamesEveryChangeAndFails() throws {
        let container = try SignedStore()
        try container.write("Demo.app/Info.plist", "<plist>DEMO</plist>\n")
        try container.write("Demo.app/res/new.txt", "new\n")
        unlink(container.stored("Demo.app/res/data.txt"))
        chmod(container.stored("Demo.app/run.sh"), 0o644)
        unlink(container.stored("Demo.app/link"))
        symlink("run.sh", container.stored("Demo.app/link"))

        let result = try container.run(["verify", container.store])
        #expect(result.status == 1)
        #expect(
            result.stdout == """
                Demo.app/Info.plist: content changed
                Demo.app/link: link target changed "Info.plist" -> "run.sh"
                Demo.app/res/data.txt: removed (file)
                Demo.app/res/new.txt: added (file)
                Demo.app/run.sh: mode changed 0755 -> 0644
                warning: Demo.app/ext: symlink leads outside the bundle ("/etc/hosts")

                """)
        #expect(result.stderr == "containerfs: bundle of \(container.store) was changed: 5 entries (listed above); \(reinstall(container.store))\n")

        let json = try container.run(["verify", container.store, "--json", "--full"])
        #expect(json.status == 1)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        #expect(object["intact"] as? Bool == false)
        let changes = try #require(object["changes"] as? [[String: Any]])
        #expect(
            changes.map { $0["path"] as? String } == [
                "Demo.app/Info.plist", "Demo.app/link", "Demo.app/res/data.txt", "Demo.app/res/new.txt", "Demo.app/run.sh",
            ])
        #expect(changes.map { $0["kinds"] as? [String] } == [["content"], ["link target"], ["removed"], ["added"], ["mode"]])
        // Every file of its signed size; res/new.txt, never signed, is a change unread.
        #expect(object["hashed_files"] as? Int == 2, "--full reads every file of its signed size")
    }

    @Test func verifyJSONOfACleanBundle() throws {
        let container = try SignedStore()
        let result = try container.run(["verify", container.store, "--json"])
        #expect(result.status == 0, "\(result)")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
        #expect(object["intact"] as? Bool == true)
        #expect(object["bundle"] as? String == "Demo.app")
        #expect((object["changes"] as? [Any])?.isEmpty == true)
        #expect((object["warnings"] as? [[String: Any]])?.first?["path"] as? String == "Demo.app/ext")
        #expect((object["key"] as? String)?.hasPrefix("SHA256:") == true)
    }

    /// A manifest that cannot be trusted: one line saying so, exit 1, and the same from mount.
    @Test(arguments: [
        ("manifest deleted", "its bundle.manifest is missing from .containerfs/"),
        ("manifest edited", "its manifest does not match its signature"),
        ("signature truncated", "its signature .containerfs/bundle.sig is truncated (10 bytes, not 64)"),
        ("another key", "its manifest was signed by another key (SHA256:"),
    ])
    func anUntrustworthyManifestIsOneLine(_ tampering: String, _ message: String) throws {
        let container = try SignedStore()
        var key: String? = nil
        switch tampering {
        case "manifest deleted": unlink(container.stored(".containerfs/bundle.manifest"))
        case "manifest edited":
            var bytes = Array(FileManager.default.contents(atPath: container.stored(".containerfs/bundle.manifest"))!)
            bytes[bytes.count - 1] ^= 0x20
            try Data(bytes).write(to: URL(fileURLWithPath: container.stored(".containerfs/bundle.manifest")))
        case "signature truncated": truncate(container.stored(".containerfs/bundle.sig"), 10)
        default:
            key = container.base + "/keys/other.key"
            let made = try runProgram([
                containerfsBinary, "create", container.base + "/other", "--bundle", container.base + "/Demo.app", "--key", key!,
            ])
            #expect(made.status == 0)
        }
        for command in [["verify", container.store], ["mount", container.store, container.mountpoint]] {
            let result = try container.run(command, key: key)
            #expect(result.status == 1, "\(result)")
            #expect(result.stdout.isEmpty)
            #expect(result.stderr.hasPrefix("containerfs: bundle of \(container.store) cannot be verified: \(message)"), "\(result)")
            #expect(result.stderr.filter { $0 == "\n" }.count == 1)
            #expect(!isMountPoint(container.mountpoint))
        }
    }

    @Test func verifyWithoutTheKeySaysWhichKeyIsMissing() throws {
        let container = try SignedStore()
        let result = try container.run(["verify", container.store], key: container.base + "/keys/missing.key")
        #expect(result.status == 1)
        #expect(result.stderr.hasPrefix("containerfs: no installer key at \(container.base)/keys/missing.key: "))
    }

    /// The refusal of a tampered bundle names a command that repairs it: `create` refuses
    /// an existing store, `update` installs the bundle afresh and keeps the data.
    @Test func theTamperedBundleAdviceRepairsIt() throws {
        let container = try SignedStore()
        try container.write("Documents/notes.txt", "mine\n")
        try container.write("Demo.app/Info.plist", "<plist>DEMO</plist>\n")
        let refused = try container.run(["mount", container.store, container.mountpoint])
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("reinstall it with 'containerfs update \(container.store) --bundle PATH/NAME.app'"), "\(refused)")
        let repaired = try container.run(["update", container.store, "--bundle", container.base + "/Demo.app"])
        #expect(repaired.status == 0, "\(repaired)")
        #expect(try container.run(["verify", container.store]).status == 0)
        #expect((try? String(contentsOfFile: container.stored("Documents/notes.txt"), encoding: .utf8)) == "mine\n")
    }

    /// With the installer key lost, neither `create` (the store exists) nor `update` (it
    /// verifies first) can reinstall in place: the line names the way that works, a backup
    /// restored with a fresh install, and following it gives a container that verifies.
    @Test func aLostKeysAdviceGivesAContainerThatVerifies() throws {
        let container = try SignedStore()
        try container.write("Documents/notes.txt", "mine\n")
        let lost = container.base + "/keys/lost.key"
        let refused = try container.run(["verify", container.store], key: lost)
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("'containerfs backup STORE FILE.tar', then 'containerfs restore FILE.tar NEWSTORE --bundle PATH/NAME.app'"), "\(refused)")
        let archive = container.base + "/notes.tar", restored = container.base + "/restored"
        #expect(try runProgram([containerfsBinary, "backup", container.store, archive]).status == 0)
        let made = try runProgram([containerfsBinary, "restore", archive, restored, "--bundle", container.base + "/Demo.app", "--key", lost])
        #expect(made.status == 0, "\(made)")
        #expect(try runProgram([containerfsBinary, "verify", restored, "--key", lost]).status == 0)
        #expect((try? String(contentsOfFile: restored + "/Documents/notes.txt", encoding: .utf8)) == "mine\n")
    }

    @Test func mountRefusesATamperedBundle() throws {
        let container = try SignedStore()
        try container.write("Demo.app/Info.plist", "<plist>DEMO</plist>\n")
        let result = try container.run(["mount", container.store, container.mountpoint])
        #expect(result.status == 1)
        #expect(result.stderr == "containerfs: bundle of \(container.store) was changed: Demo.app/Info.plist (content); \(reinstall(container.store))\n")
        #expect(!isMountPoint(container.mountpoint))

        // Put back byte for byte, it launches again.
        try container.write("Demo.app/Info.plist", "<plist>demo</plist>\n")
        let mounted = try container.run(["mount", container.store, container.mountpoint])
        #expect(mounted.status == 0, "\(mounted)")
        #expect(isMountPoint(container.mountpoint))
        container.unmount()
    }

    /// The store's owner makes a bundle file, and a new one, sparse files of a TiB (no
    /// blocks): root's `mount` and `verify` read and hashed every byte before comparing with
    /// the signed manifest (minutes per TiB, hours for ext4's 16 TiB files) instead of
    /// refusing at once. A file whose size is not the signed one is a change without a hash.
    @Test func aBundleFileMadeHugeIsRefusedWithoutReadingIt() throws {
        let container = try SignedStore()
        #expect(truncate(container.stored("Demo.app/Info.plist"), 1 << 40) == 0)
        let added = open(container.stored("Demo.app/added.bin"), O_WRONLY | O_CREAT | O_EXCL, 0o644)
        #expect(added >= 0 && ftruncate(added, 1 << 40) == 0)
        close(added)
        let started = Date()
        let verified = try runProgram(["timeout", "-s", "KILL", "30", containerfsBinary, "verify", container.store, "--key", container.key])
        #expect(verified.status == 1, "\(verified)")
        #expect(verified.stdout.contains("Demo.app/Info.plist: "), "\(verified)")
        #expect(verified.stdout.contains("Demo.app/added.bin: "), "\(verified)")
        let mounted = try runProgram(["timeout", "-s", "KILL", "30", containerfsBinary, "mount", container.store, container.mountpoint, "--key", container.key])
        defer { container.unmount() }
        #expect(mounted.status == 1, "\(mounted)")
        #expect(mounted.stderr.hasPrefix("containerfs: bundle of \(container.store) was changed: "), "\(mounted)")
        #expect(Date().timeIntervalSince(started) < 10)
    }

    /// A bundle file with a second name outside the bundle, planted in the store: the app
    /// would rewrite its own signed bundle through `Documents/` (an allowed write), a
    /// tampered bundle that launched. No install makes a hard link, so it is refused.
    @Test func aBundleFileHardLinkedOutOfTheBundleIsRefused() throws {
        let container = try SignedStore()
        #expect(link(container.stored("Demo.app/run.sh"), container.stored("Documents/run.sh")) == 0)
        let verified = try container.run(["verify", container.store])
        #expect(verified.status == 1, "\(verified)")
        #expect(verified.stdout.hasPrefix("Demo.app/run.sh: has 2 names (a hard link elsewhere could change it)\n"), "\(verified)")
        let mounted = try container.run(["mount", container.store, container.mountpoint])
        defer { container.unmount() }
        #expect(mounted.status == 1, "\(mounted)")
        #expect(mounted.stderr == "containerfs: bundle of \(container.store) was changed: Demo.app/run.sh (hard link); \(reinstall(container.store))\n")
        #expect(!isMountPoint(container.mountpoint))
        // The second name gone, it launches again.
        unlink(container.stored("Documents/run.sh"))
        #expect(try container.run(["verify", container.store]).status == 0)
    }

    @Test func mountWorksOnACleanBundle() throws {
        let container = try SignedStore()
        let result = try container.run(["mount", container.store, container.mountpoint])
        defer { container.unmount() }
        #expect(result.status == 0, "\(result)")
        #expect(FileManager.default.contents(atPath: container.mountpoint + "/Demo.app/Info.plist") == Data("<plist>demo</plist>\n".utf8))
        #expect(errnoOf { open(container.mountpoint + "/Demo.app/Info.plist", O_WRONLY) } == EPERM)
        // Denied writes through the mount change nothing: it still verifies.
        #expect(try container.run(["verify", container.store]).status == 0)
    }

    @Test func theDefaultKeyLivesInXDGConfigHome() throws {
        var template = Array("/tmp/containerfs-xdg-XXXXXX".utf8CString)
        let config = String(cString: mkdtemp(&template)!)
        defer { _ = try? runProgram(["rm", "-rf", config]) }
        let environment = ["PATH": "/usr/bin:/bin", "XDG_CONFIG_HOME": config, "HOME": "/nonexistent"]
        let container = try SignedStore(environment: environment, explicitKey: false)
        let key = config + "/containerfs/installer.key"
        #expect(container.created.stdout.contains("made a new installer key at \(key)"))
        var info = stat()
        #expect(stat(key, &info) == 0 && info.st_mode & 0o777 == 0o600)
        #expect(stat(config + "/containerfs", &info) == 0 && info.st_mode & 0o777 == 0o700)
        #expect(try container.run(["verify", container.store]).status == 0)
        let mounted = try container.run(["mount", container.store, container.mountpoint])
        #expect(mounted.status == 0, "\(mounted)")
        container.unmount()
        // Another user's config (here: another folder) has no key for it.
        let elsewhere = try runProgram(
            [containerfsBinary, "verify", container.store],
            environment: ["PATH": "/usr/bin:/bin", "XDG_CONFIG_HOME": config + "/other"])
        #expect(elsewhere.status == 1)
        #expect(elsewhere.stderr.hasPrefix("containerfs: no installer key at \(config)/other/containerfs/installer.key: "))
    }

    /// cfs-alice is a system user without a home, and setpriv leaves root's HOME (and
    /// XDG_CONFIG_HOME, if set): the key goes to her private folder in /var/tmp, and
    /// create, verify and mount work.
    @Test func anOrdinaryUserWithoutAHomeSignsAndMounts() throws {
        let inherited: [[String: String]] = [
            [:], ["HOME": "/nonexistent"], ["HOME": "/root"], ["HOME": "/root", "XDG_CONFIG_HOME": "/root/.config"],
        ]
        for variables in inherited {
            let environment = variables.merging(["PATH": "/usr/bin:/bin"]) { a, _ in a }
            let container = try SignedStore(user: "cfs-alice", environment: environment, explicitKey: false)
            let uid = try runProgram(["id", "-u", "cfs-alice"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            let key = "/var/tmp/containerfs-\(uid)/installer.key"
            var info = stat()
            #expect(stat(key, &info) == 0 && info.st_mode & 0o777 == 0o600 && String(info.st_uid) == uid)
            #expect(lstat("/var/tmp/containerfs-\(uid)", &info) == 0 && info.st_mode & 0o777 == 0o700)
            #expect(try container.run(["verify", container.store]).status == 0)
            let mounted = try container.run(["mount", container.store, container.mountpoint])
            #expect(mounted.status == 0, "\(mounted)")
            #expect(isListedMount(container.mountpoint))
            container.unmount()
            #expect(!isListedMount(container.mountpoint))
        }
    }
}
