import Foundation
import Glibc
import Testing

/// Files handed over into a store by `restore`, `deliver` and `create`, run as root and as
/// an ordinary user, never keep set-ID bits (nor, from an archive, a world-writable or
/// sticky folder); archives are written 0600; the working names beside a target cannot be
/// predicted and so cannot be blocked (docs/backup.md, "Modes" and "Working names").
@Suite("Hand-over", .serialized)
struct HandOverTests {
    static let alice = "cfs-alice"
    static let bob = "cfs-bob"

    /// A folder of the container's temporary folder, owned by `user` (root when nil).
    private func folder(_ container: MountedContainer, _ name: String, owner user: String? = nil, mode: mode_t = 0o755) throws -> String {
        let path = container.base + "/" + name
        try #require(chmod(container.base, 0o755) == 0, "others may reach it")
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        if let user {
            let (uid, gid) = try ids(user)
            try #require(chown(path, uid, gid) == 0)
        }
        try #require(chmod(path, mode) == 0)
        return path
    }

    /// Writes a file, gives it to `user` and then sets `mode` (a chown clears set-ID bits).
    private func hostileFile(_ path: String, owner user: String?, mode: mode_t) throws {
        try Data("#!/bin/sh\nid\n".utf8).write(to: URL(fileURLWithPath: path))
        if let user {
            let (uid, gid) = try ids(user)
            try #require(chown(path, uid, gid) == 0)
        }
        try #require(chmod(path, mode) == 0)
        try #require(try modeOf(path) == mode, "the source has the hostile mode")
    }

    /// A backup archive holding a file of mode 04755, one of 02755 and a folder of 07777,
    /// as an archive from elsewhere may; the archive's own entries show those modes.
    private func hostileArchive(_ source: MountedContainer) throws -> String {
        try hostileFile(source.stored("Documents/tool"), owner: nil, mode: 0o4755)
        try hostileFile(source.stored("Documents/group-tool"), owner: nil, mode: 0o2755)
        try FileManager.default.createDirectory(atPath: source.stored("Documents/shared"), withIntermediateDirectories: false)
        try hostileFile(source.stored("Documents/shared/inside"), owner: nil, mode: 0o6755)
        try #require(chmod(source.stored("Documents/shared"), 0o7777) == 0)
        try #require(chmod(source.stored("Documents"), 0o1777) == 0)
        let archive = source.base + "/hostile.tar"
        let backup = try containerfs(["backup", source.store, archive])
        try #require(backup.status == 0, "\(backup)")
        let listed = try runProgram(["/usr/bin/python3", "-c", """
            import sys, tarfile
            with tarfile.open(sys.argv[1]) as t:
                for m in t.getmembers():
                    print(oct(m.mode), m.name)
            """, archive])
        for line in ["0o4755 Documents/tool", "0o2755 Documents/group-tool", "0o7777 Documents/shared", "0o6755 Documents/shared/inside", "0o1777 Documents"] {
            try #require(listed.stdout.contains(line + "\n"), "the archive holds \(line): \(listed)")
        }
        return archive
    }

    /// The modes `restore` gives the hostile archive's entries, as `user` (root when nil).
    private func checkRestore(of archive: String, into target: String, as user: String?) throws {
        let restored = try containerfs(["restore", archive, target, "--bundle", URL(fileURLWithPath: archive).deletingLastPathComponent().path + "/Demo.app"], user: user)
        try #require(restored.status == 0, "\(restored)")
        let expected: [(String, mode_t)] = [
            ("Documents/tool", 0o755), ("Documents/group-tool", 0o755), ("Documents/shared/inside", 0o755),
            ("Documents/shared", 0o775), ("Documents", 0o775),
        ]
        let owner = try user.map { try ids($0).uid } ?? 0
        for (path, mode) in expected {
            #expect(try modeOf(target + "/" + path) == mode, "\(path) restored by \(user ?? "root")")
            #expect(try ownerOf(target + "/" + path) == owner, "\(path) belongs to who restored it")
        }
        let verify = try containerfs(["verify", target], user: user)
        #expect(verify.status == 0, "\(verify)")
    }

    @Test func restoreAsRootKeepsNoSetIDBitsNorOpenFolders() throws {
        let source = try MountedContainer()
        let archive = try hostileArchive(source)
        try checkRestore(of: archive, into: source.base + "/restored", as: nil)
    }

    @Test func restoreAsAUserKeepsNoSetIDBitsNorOpenFolders() throws {
        try requireTestUsers()
        let source = try MountedContainer()
        let archive = try hostileArchive(source)
        // The archive is root's and 0600: a copy of it is given to alice, with the bundle.
        let own = try folder(source, "alice", owner: Self.alice)
        try runProgram(["cp", "-r", archive, source.base + "/Demo.app", own])
        try runProgram(["chown", "-R", "\(Self.alice):\(Self.alice)", own])
        try checkRestore(of: own + "/hostile.tar", into: own + "/restored", as: Self.alice)
    }

    @Test func deliverByRootOfAUsersSetIDFileDropsTheBits() throws {
        try requireTestUsers()
        let container = try MountedContainer()
        let outside = try folder(container, "alice-files", owner: Self.alice)
        try hostileFile(outside + "/tool", owner: Self.alice, mode: 0o6755)
        let album = outside + "/album"
        try FileManager.default.createDirectory(atPath: album, withIntermediateDirectories: false)
        try hostileFile(album + "/inside", owner: Self.alice, mode: 0o4711)
        try #require(chmod(album, 0o3777) == 0)
        let delivered = try containerfs(["deliver", container.store, outside + "/tool", album])
        try #require(delivered.status == 0, "\(delivered)")
        #expect(try modeOf(container.stored("Documents/Inbox/tool")) == 0o755)
        #expect(try ownerOf(container.stored("Documents/Inbox/tool")) == 0)
        #expect(try modeOf(container.stored("Documents/Inbox/album/inside")) == 0o711)
        #expect(try modeOf(container.stored("Documents/Inbox/album")) == 0o775)
        #expect(try String(contentsOfFile: container.stored("Documents/Inbox/tool"), encoding: .utf8) == "#!/bin/sh\nid\n")
        #expect(try modeOf(outside + "/tool") == 0o6755, "the source is untouched")
    }

    @Test func deliverByAUserOfTheirOwnSetIDFileDropsTheBits() throws {
        try requireTestUsers()
        let container = try MountedContainer(user: Self.alice)
        let outside = try folder(container, "alice-files", owner: Self.alice)
        try hostileFile(outside + "/tool", owner: Self.alice, mode: 0o6755)
        let delivered = try containerfs(["deliver", container.store, outside + "/tool"], user: Self.alice)
        try #require(delivered.status == 0, "\(delivered)")
        #expect(try modeOf(container.stored("Documents/Inbox/tool")) == 0o755)
        #expect(try ownerOf(container.stored("Documents/Inbox/tool")) == ids(Self.alice).uid)
    }

    /// `create`, by root from a bundle holding another user's set-ID file, and by alice
    /// from her own: no set-ID bit in the store, and the signed copy verifies.
    @Test(arguments: [nil, HandOverTests.alice] as [String?])
    func createKeepsNoSetIDBitsAndVerifies(_ user: String?) throws {
        try requireTestUsers()
        let scratch = try MountedContainer(user: user)
        let bundle = scratch.base + "/Setid.app"
        try FileManager.default.createDirectory(atPath: bundle, withIntermediateDirectories: false)
        try hostileFile(bundle + "/tool", owner: user ?? Self.bob, mode: 0o4755)
        try hostileFile(bundle + "/group-tool", owner: user ?? Self.bob, mode: 0o2755)
        try runProgram(["chown", "\(user ?? "root"):\(user ?? "root")", bundle])
        let store = scratch.base + "/setid-store"
        let created = try containerfs(["create", store, "--bundle", bundle, "--key", scratch.base + "/key-\(user ?? "root")"], user: user)
        try #require(created.status == 0, "\(created)")
        #expect(try modeOf(store + "/Setid.app/tool") == 0o755)
        #expect(try modeOf(store + "/Setid.app/group-tool") == 0o755)
        #expect(try ownerOf(store + "/Setid.app/tool") == (try user.map { try ids($0).uid } ?? 0))
        let verify = try containerfs(["verify", store, "--key", scratch.base + "/key-\(user ?? "root")"], user: user)
        #expect(verify.status == 0, "\(verify)")
    }

    /// Archives are 0600 whatever the umask, also when they replace a 0644 file.
    @Test(arguments: [nil, HandOverTests.alice] as [String?])
    func archivesAreReadableByTheirOwnerOnly(_ user: String?) throws {
        try requireTestUsers()
        let container = try MountedContainer(user: user)
        try #require(chmod(container.base, 0o755) == 0, "bob may reach the archive's folder")
        let secret = container.stored("Documents/secret.txt")
        try Data("only mine".utf8).write(to: URL(fileURLWithPath: secret))
        if let user {
            let (uid, gid) = try ids(user)
            try #require(chown(secret, uid, gid) == 0)
        }
        try #require(chmod(secret, 0o600) == 0)
        let archive = container.base + "/backup.tar"
        let first = try runProgram(["sh", "-c", #"umask 022 && exec "$0" backup "$1" "$2""#, containerfsBinary, container.store, archive], user: user)
        try #require(first.status == 0, "\(first)")
        #expect(try modeOf(archive) == 0o600)
        try #require(chmod(archive, 0o644) == 0)
        let second = try runProgram(["sh", "-c", #"umask 000 && exec "$0" backup "$1" "$2""#, containerfsBinary, container.store, archive], user: user)
        try #require(second.status == 0, "\(second)")
        #expect(try modeOf(archive) == 0o600)
        let other = try runProgram(["cat", archive], user: Self.bob)
        #expect(other.status != 0, "bob cannot read the archive: \(other)")
    }

    /// Bob fills a shared sticky folder with every working name the old scheme would use
    /// (`.NAME.creating-PID`, `.NAME.partial-PID`, `.NAME.restoring-PID`) for the next
    /// thousands of process ids; `create`, `backup` and `restore` into that folder each
    /// still succeed, as root and as alice, and leave bob's files alone.
    @Test(arguments: [nil, HandOverTests.alice] as [String?])
    func workingNamesCannotBeBlocked(_ user: String?) throws {
        try requireTestUsers()
        let scratch = try MountedContainer(user: user)
        let key = ["--key", try folder(scratch, "keys", owner: user, mode: 0o700) + "/installer.key"]
        let bundle = scratch.base + "/Demo.app"
        // An archive made beforehand elsewhere, so that each command below stands alone.
        let made = try containerfs(["backup", scratch.store, scratch.base + "/private.tar"], user: user)
        try #require(made.status == 0, "\(made)")
        let shared = try folder(scratch, "shared", mode: 0o1777)
        let blocked = try runProgram(["/usr/bin/python3", "-c", """
            import os, sys
            shared = sys.argv[1]
            last = int(open("/proc/sys/kernel/ns_last_pid").read())
            for pid in range(last + 1, last + 6001):
                for name in (f".store.creating-{pid}", f".archive.tar.partial-{pid}", f".restored.restoring-{pid}"):
                    os.close(os.open(os.path.join(shared, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            """, shared], user: Self.bob)
        try #require(blocked.status == 0, "\(blocked)")
        let before = try FileManager.default.contentsOfDirectory(atPath: shared).count

        let created = try containerfs(["create", shared + "/store", "--bundle", bundle] + key, user: user)
        #expect(created.status == 0, "\(created)")
        let backup = try containerfs(["backup", scratch.store, shared + "/archive.tar"], user: user)
        #expect(backup.status == 0, "\(backup)")
        let restored = try containerfs(["restore", scratch.base + "/private.tar", shared + "/restored", "--bundle", bundle] + key, user: user)
        #expect(restored.status == 0, "\(restored)")
        let after = try FileManager.default.contentsOfDirectory(atPath: shared)
        #expect(Set(after.filter { !$0.hasPrefix(".") }) == ["store", "archive.tar", "restored"])
        #expect(after.count == before + 3, "no working name is left behind")
        for name in after where name.hasPrefix(".") {
            #expect(try ownerOf(shared + "/" + name) == ids(Self.bob).uid, "\(name) is one of bob's, untouched")
        }
    }
}

/// The uid and gid of `user`.
private func ids(_ user: String) throws -> (uid: uid_t, gid: gid_t) {
    guard let entry = getpwnam(user) else { throw TestFailure("user \(user) does not exist: run scripts/install-deps.sh") }
    return (entry.pointee.pw_uid, entry.pointee.pw_gid)
}

/// The test users exist and can run the binary.
private func requireTestUsers() throws {
    for user in [HandOverTests.alice, HandOverTests.bob] { _ = try ids(user) }
    let reach = try runProgram(["test", "-x", containerfsBinary], user: HandOverTests.alice)
    guard reach.status == 0 else { throw TestFailure("\(containerfsBinary) cannot be run by \(HandOverTests.alice)") }
}

private func modeOf(_ path: String) throws -> mode_t {
    var info = stat()
    guard lstat(path, &info) == 0 else { throw TestFailure("cannot stat \(path): \(String(cString: strerror(errno)))") }
    return info.st_mode & 0o7777
}

private func ownerOf(_ path: String) throws -> uid_t {
    var info = stat()
    guard lstat(path, &info) == 0 else { throw TestFailure("cannot stat \(path): \(String(cString: strerror(errno)))") }
    return info.st_uid
}
