import ContainerStore
import Foundation
import Glibc
import Testing

/// What root's commands take from, and give to, folders other users own: a store's owner
/// may put a FIFO where a command will open a file, a symlink where it will write, and
/// what root copies into a store must be the owner's to change (docs/lifecycle.md, "File
/// sharing"; docs/capacity.md).
@Suite("HandOverAttacks", .serialized)
struct HandOverAttackTests {
    private static let alice = "cfs-alice"

    private func owner(_ path: String) -> (uid: uid_t, gid: gid_t, mode: mode_t)? {
        var info = stat()
        guard lstat(path, &info) == 0 else { return nil }
        return (info.st_uid, info.st_gid, info.st_mode & 0o7777)
    }

    /// Root's `share put` (a file, a folder) and `deliver` into a store of cfs-alice: the
    /// copies were root's, so the app (which runs as the owner, or as the user the mount
    /// maps to the owner) could read them but not change, replace or chmod them. They are
    /// the owner's now, with no set-ID bit, and the owner can append to each.
    @Test func whatRootCopiesIntoAStoreIsTheOwners() throws {
        let container = try MountedContainer(user: Self.alice, infoPlist: ShareTests.sharingXML)
        guard let storeOwner = owner(container.store), storeOwner.uid != 0 else { throw TestFailure("the store is not cfs-alice's") }
        let host = container.base + "/roots"
        try FileManager.default.createDirectory(atPath: host + "/folder/sub", withIntermediateDirectories: true)
        try Data("file\n".utf8).write(to: URL(fileURLWithPath: host + "/file.txt"))
        try Data("inner\n".utf8).write(to: URL(fileURLWithPath: host + "/folder/sub/inner.txt"))
        try Data("tool\n".utf8).write(to: URL(fileURLWithPath: host + "/folder/tool"))
        #expect(chmod(host + "/folder/tool", 0o4755) == 0)
        for arguments in [["put", host + "/file.txt"], ["put", host + "/folder"]] {
            let put = try containerfs(["share", container.store] + arguments)
            #expect(put.status == 0, "\(put)")
        }
        let delivered = try containerfs(["deliver", container.store, host + "/file.txt"])
        #expect(delivered.status == 0, "\(delivered)")
        let documents = container.store + "/Documents"
        let copies = ["file.txt", "folder", "folder/sub", "folder/sub/inner.txt", "folder/tool", "Inbox/file.txt"].map { documents + "/" + $0 }
        for path in copies {
            let found = owner(path)
            #expect(found?.uid == storeOwner.uid && found?.gid == storeOwner.gid, "\(path) belongs to \(String(describing: found))")
            #expect((found?.mode ?? 0) & 0o7000 == 0, "\(path): no set-ID bit")
        }
        for file in copies where !file.hasSuffix("folder") && !file.hasSuffix("sub") {
            let appended = try runProgram(["sh", "-c", "echo more >> \"$1\"", "sh", file], user: Self.alice)
            #expect(appended.status == 0, "the owner changes \(file): \(appended)")
        }
    }

    /// A store of cfs-alice, made again signed with a key in a folder both she and root can
    /// name; returns the `--key` option.
    private func aliceStore(_ container: MountedContainer) throws -> [String] {
        let keys = container.base + "/keys"
        let made = try runProgram(["install", "-d", "-m", "700", "-o", Self.alice, "-g", Self.alice, keys])
        try #require(made.status == 0, "\(made)")
        let key = ["--key", keys + "/installer.key"]
        try FileManager.default.removeItem(atPath: container.store)
        let create = try containerfs(["create", container.store, "--bundle", container.base + "/Demo.app"] + key, user: Self.alice)
        try #require(create.status == 0, "\(create)")
        return key
    }

    /// Root's `update` of a store of cfs-alice installed the new app root's (bundle,
    /// manifest, signature, cache, lock): afterwards her `offload` and `update` failed with
    /// "Permission denied". The installed app is the owner's now, as the rest of her store.
    @Test func rootsUpdateInstallsTheAppAsTheOwners() throws {
        let container = try MountedContainer(user: Self.alice)
        let key = try aliceStore(container)
        let bundle = container.base + "/Demo.app"
        try Data("v2\n".utf8).write(to: URL(fileURLWithPath: bundle + "/new.txt"))
        let update = try containerfs(["update", container.store, "--bundle", bundle] + key)
        try #require(update.status == 0, "\(update)")
        #expect(try containerfs(["verify", container.store] + key).status == 0)
        let roots = try runProgram(["find", container.store, "-user", "root"])
        #expect(roots.status == 0 && roots.stdout.isEmpty, "left root's in the store: \(roots)")
        for arguments in [["verify", container.store] + key, ["offload", container.store], ["update", container.store, "--bundle", bundle] + key] {
            let result = try containerfs(arguments, user: Self.alice)
            #expect(result.status == 0, "\(arguments): \(result)")
        }
        // A bundle file only root may read is not installed as hers.
        try Data("secret\n".utf8).write(to: URL(fileURLWithPath: bundle + "/secret"))
        #expect(chown(bundle + "/secret", 0, 0) == 0 && chmod(bundle + "/secret", 0o600) == 0)
        let refused = try containerfs(["update", container.store, "--bundle", bundle] + key)
        #expect(refused.status == 1 && refused.stderr.contains("Permission denied"), "\(refused)")
        #expect(!FileManager.default.fileExists(atPath: container.store + "/Demo.app/secret"))
        #expect(try containerfs(["verify", container.store] + key, user: Self.alice).status == 0, "the old app stays")
    }

    /// Root's `run` of a store of cfs-alice (its program runs as the unprivileged app user)
    /// and root's `deliver` into it made the state folder's run lock, audit log, tag index
    /// and staging folder, root's and 0600: afterwards alice's own `run` failed with
    /// "cannot open …/run.lock: Permission denied", her `deliver` likewise, and her `audit`
    /// showed nothing. What root makes in a store's state folder is the owner's now.
    @Test func rootsRunAndDeliverLeaveTheStoreUsableByItsOwner() throws {
        let container = try MountedContainer(user: Self.alice)
        let key = try aliceStore(container)
        let file = container.base + "/handed.txt"
        try Data("over\n".utf8).write(to: URL(fileURLWithPath: file))
        let run = try containerfs(["run", container.store] + key + ["--", "sh", "-c", "echo c > Library/Caches/c; touch Demo.app/x 2>/dev/null; true"])
        #expect(run.status == 0, "\(run)")
        #expect(try containerfs(["deliver", container.store, file]).status == 0)
        let roots = try runProgram(["find", container.store, "-user", "root"])
        #expect(roots.status == 0 && roots.stdout.isEmpty, "left root's in the store: \(roots)")
        let again = try containerfs(["run", container.store] + key + ["--", "true"], user: Self.alice)
        #expect(again.status == 0, "\(again)")
        #expect(try containerfs(["deliver", container.store, file], user: Self.alice).status == 0)
        let audit = try containerfs(["audit", container.store], user: Self.alice)
        #expect(audit.status == 0 && audit.stdout.contains("Demo.app/x"), "the owner reads the denial root's run met: \(audit)")
    }

    /// Giving root's copies to the store's owner must not hand the owner what only root
    /// could read: a host file of mode 0600 root's (what a hard link the owner planted to
    /// `/etc/shadow` would be), alone or in a folder, is refused by `share put` and
    /// `deliver`, with one line, and nothing arrives.
    @Test func rootHandsTheOwnerOnlyWhatTheOwnerCouldRead() throws {
        let container = try MountedContainer(user: Self.alice, infoPlist: ShareTests.sharingXML)
        let host = container.base + "/roots"
        try FileManager.default.createDirectory(atPath: host + "/folder", withIntermediateDirectories: true)
        try Data("secret\n".utf8).write(to: URL(fileURLWithPath: host + "/secret"))
        try Data("secret\n".utf8).write(to: URL(fileURLWithPath: host + "/folder/secret"))
        #expect(chmod(host + "/secret", 0o600) == 0 && chmod(host + "/folder/secret", 0o600) == 0)
        for arguments in [["share", container.store, "put", host + "/secret"], ["share", container.store, "put", host + "/folder"],
                          ["deliver", container.store, host + "/secret"], ["deliver", container.store, host + "/folder"]] {
            let result = try containerfs(arguments)
            #expect(result.status == 1 && result.stderr.contains("Permission denied"), "\(arguments): \(result)")
            #expect(result.stderr.split(separator: "\n").count == 1, "one line: \(result)")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: container.store + "/Documents") == ["Inbox"])
        #expect(try FileManager.default.contentsOfDirectory(atPath: container.store + "/Documents/Inbox") == [])
    }

    /// `share get` of a folder copies what file sharing shows, as `ls` lists it: the app's
    /// hidden files (a `.git`, a lock, a database's journal), its symlinks and a FIFO stay in
    /// the container. Before, the hidden files and symlinks came out, and a FIFO refused the
    /// whole copy with a line calling Documents/ a bundle.
    @Test func getOfAFolderTakesOnlyWhatFileSharingShows() throws {
        let container = try MountedContainer(infoPlist: ShareTests.sharingXML)
        let folder = container.store + "/Documents/project"
        try FileManager.default.createDirectory(atPath: folder + "/.git", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: folder + "/notes", withIntermediateDirectories: true)
        try Data("shown\n".utf8).write(to: URL(fileURLWithPath: folder + "/notes/a.txt"))
        try Data("secret\n".utf8).write(to: URL(fileURLWithPath: folder + "/.token"))
        try Data("ref\n".utf8).write(to: URL(fileURLWithPath: folder + "/.git/HEAD"))
        try FileManager.default.createSymbolicLink(atPath: folder + "/notes/link", withDestinationPath: "/etc/passwd")
        #expect(mkfifo(folder + "/notes/pipe", 0o600) == 0)
        #expect(try containerfs(["share", container.store, "ls", "project/notes"]).stdout == "a.txt\n")
        let got = try containerfs(["share", container.store, "get", "project", container.base + "/out"])
        #expect(got.status == 0, "\(got)")
        #expect(got.stdout == "got Documents/project as \(container.base)/out (left out 4 hidden entries, symlinks or special files: file sharing shows none)\n", "\(got)")
        let copied = try runProgram(["find", container.base + "/out", "-printf", "%P %y\n"])
        #expect(copied.stdout.split(separator: "\n").sorted() == [" d", "notes d", "notes/a.txt f"], "\(copied)")
    }

    /// `share get`'s host destination is not followed when it is a symlink: whoever owns the
    /// host folder root copies into may point a name there at a folder of root's
    /// (`/etc/cron.d`), and the file, whose contents the container's owner chose, landed
    /// in it, root's. A symlink is a path that exists (get never overwrites), also written
    /// with a trailing slash; a real folder still receives the copy.
    @Test func getNeverFollowsASymlinkAtItsDestination() throws {
        let container = try MountedContainer(infoPlist: ShareTests.sharingXML)
        try Data("* * * * * root id\n".utf8).write(to: URL(fileURLWithPath: container.store + "/Documents/job"))
        let victim = container.base + "/victim", out = container.base + "/out"
        try FileManager.default.createDirectory(atPath: victim, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: out + "/cron", withDestinationPath: victim)
        for destination in [out + "/cron", out + "/cron/", out + "/cron//"] {
            let got = try containerfs(["share", container.store, "get", "job", destination])
            #expect(got.status == 1 && got.stderr.contains("exists (a symlink: never followed): get never overwrites"), "\(destination): \(got)")
            #expect(got.stderr.split(separator: "\n").count == 1, "one line: \(got)")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: victim) == [], "written through the symlink")
        let into = try containerfs(["share", container.store, "get", "job", out + "/"])
        #expect(into.status == 0 && FileManager.default.fileExists(atPath: out + "/job"), "\(into)")
    }

    /// The mount lock replaced by a FIFO (the state folder is the store owner's): `mount`
    /// and `run` refused with "the daemon exited before the mount was ready", which names
    /// nothing; the daemon's reason is their one line now. Nothing is mounted.
    @Test func aFIFOInPlaceOfTheMountLockIsNamedInOneLine() throws {
        let container = try MountedContainer()
        let lock = container.store + "/.containerfs/mount.lock"
        unlink(lock)
        #expect(mkfifo(lock, 0o600) == 0)
        for arguments in [["mount", container.store, container.mountpoint], ["run", container.store, "--", "true"]] {
            let result = try runProgram(["timeout", "-s", "KILL", "20", containerfsBinary] + arguments)
            #expect(result.status == 1 && result.stderr.contains("mount.lock is not a plain file of the store (a FIFO"), "\(arguments): \(result)")
            #expect(result.stderr.split(separator: "\n").count == 1, "one line: \(result)")
        }
        #expect(!isMountPoint(container.mountpoint))
    }

    /// `share` of a group container (which has no app, so no Info.plist) said "cannot read
    /// /Info.plist: No such file or directory"; it says what a group is, as `deliver` does.
    @Test func shareOfAGroupContainerSaysItHasNoApp() throws {
        let device = try GroupDevice()
        let result = try containerfs(["share", device.groupStore, "ls"])
        #expect(result.status == 64 && result.stderr.contains("is the group container of \(GroupDevice.group), which has no app: share needs"), "\(result)")
        #expect(result.stderr.split(separator: "\n").count == 1, "one line: \(result)")
    }

    /// A device's ledger replaced by a FIFO (the device folder is its owner's): `capacity
    /// DEVICE` and a `deliver` into a container of the device opened it to read and
    /// blocked for good, root's commands both. Now the FIFO is never opened: the ledger
    /// counts as absent (no daemon attached), and both finish.
    @Test func aFIFOInPlaceOfTheDevicesLedgerBlocksNoCommand() throws {
        let device = try GroupDevice()
        let set = try containerfs(["capacity", device.device, "1g"])
        try #require(set.status == 0, "\(set)")
        let ledger = device.device + "/.containerfs-device/ledger"
        unlink(ledger)
        #expect(mkfifo(ledger, 0o600) == 0)
        let file = device.base + "/handed.txt"
        try Data("over\n".utf8).write(to: URL(fileURLWithPath: file))
        for arguments in [["capacity", device.device], ["deliver", device.app, file]] {
            // `timeout`: the command blocked in open(2) before; 20 s is generous for either.
            let result = try runProgram(["timeout", "-s", "KILL", "20", containerfsBinary] + arguments)
            #expect(result.status == 0, "\(arguments): \(result)")
        }
        #expect(FileManager.default.fileExists(atPath: device.app + "/Documents/Inbox/handed.txt"))
    }
}
