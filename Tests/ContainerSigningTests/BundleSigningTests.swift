import ContainerPolicy
import Crypto
import Foundation
import Glibc
import Synchronization
import Testing

@testable import ContainerSigning
@testable import ContainerStore

/// A signed container in a temporary folder, with its own installer key; removed afterwards.
///
/// The bundle: `Info.plist`, `run.sh` (0755), `res/data.txt`, `link` -> `Info.plist`, `ext`
/// -> `/etc/hosts` (leads outside), and a file whose name is not UTF-8.
private final class SignedContainer {
    let base: String
    let store: Store
    let key: InstallerKey
    static let oddName = Array("odd-".utf8) + [0xFF]

    init() throws {
        var template = Array("/tmp/containerfs-sign-XXXXXX".utf8CString)
        base = String(cString: mkdtemp(&template)!)
        let bundle = base + "/Demo.app"
        let fm = FileManager.default
        try fm.createDirectory(atPath: bundle + "/res", withIntermediateDirectories: true)
        try Data("<plist>demo</plist>\n".utf8).write(to: URL(fileURLWithPath: bundle + "/Info.plist"))
        try Data("#!/bin/sh\necho hi\n".utf8).write(to: URL(fileURLWithPath: bundle + "/run.sh"))
        chmod(bundle + "/run.sh", 0o755)
        try Data("resource\n".utf8).write(to: URL(fileURLWithPath: bundle + "/res/data.txt"))
        symlink("Info.plist", bundle + "/link")
        symlink("/etc/hosts", bundle + "/ext")
        let odd = Array((bundle + "/").utf8) + Self.oddName + [0]
        let fd = odd.withUnsafeBufferPointer { $0.withMemoryRebound(to: CChar.self) { open($0.baseAddress!, O_WRONLY | O_CREAT, 0o644) } }
        close(fd)
        mkdir(base + "/keys", 0o700)
        key = try InstallerKey.loadOrCreate(at: base + "/keys/installer.key")
        store = try Store.create(at: base + "/store", bundle: bundle, installerKey: key)
    }

    deinit { try? FileManager.default.removeItem(atPath: base) }

    /// Host path of `relative` in the store.
    func stored(_ relative: String) -> String { base + "/store/" + relative }

    func verify(full: Bool = false, key: InstallerKey? = nil) -> BundleVerification {
        BundleSignature.verify(store, key: key ?? self.key, full: full)
    }

    func write(_ relative: String, _ text: String) throws {
        try Data(text.utf8).write(to: URL(fileURLWithPath: stored(relative)))
    }

    func contents(_ relative: String) -> Data { FileManager.default.contents(atPath: stored(relative))! }
}

/// One way of changing a signed container behind its back, and what `verify` must say.
enum Tampering: String, CaseIterable, CustomTestStringConvertible {
    case content, appendedByte, newFile, removedFile, mode, symlinkRetargeted, typeChanged, specialFile
    case manifestEdited, manifestTruncated, manifestDeleted, signatureTruncated, signatureDeleted, keySwapped

    var testDescription: String { rawValue }

    fileprivate func apply(to container: SignedContainer) throws {
        switch self {
        case .content: try container.write("Demo.app/Info.plist", "<plist>DEMO</plist>\n")
        case .appendedByte:
            let handle = FileHandle(forWritingAtPath: container.stored("Demo.app/res/data.txt"))!
            handle.seekToEndOfFile()
            handle.write(Data([0x0A]))
            handle.closeFile()
        case .newFile: try container.write("Demo.app/res/new.txt", "new\n")
        case .removedFile: unlink(container.stored("Demo.app/res/data.txt"))
        case .mode: chmod(container.stored("Demo.app/run.sh"), 0o644)
        case .symlinkRetargeted:
            unlink(container.stored("Demo.app/link"))
            symlink("res/data.txt", container.stored("Demo.app/link"))
        case .typeChanged:
            unlink(container.stored("Demo.app/res/data.txt"))
            mkdir(container.stored("Demo.app/res/data.txt"), 0o755)
        case .specialFile: mkfifo(container.stored("Demo.app/res/pipe"), 0o644)
        case .manifestEdited:
            var bytes = Array(container.contents(".containerfs/bundle.manifest"))
            bytes[bytes.count / 2] ^= 0x01
            try Data(bytes).write(to: URL(fileURLWithPath: container.stored(".containerfs/bundle.manifest")))
        case .manifestTruncated: truncate(container.stored(".containerfs/bundle.manifest"), 100)
        case .manifestDeleted: unlink(container.stored(".containerfs/bundle.manifest"))
        case .signatureTruncated: truncate(container.stored(".containerfs/bundle.sig"), 40)
        case .signatureDeleted: unlink(container.stored(".containerfs/bundle.sig"))
        case .keySwapped:
            // Whoever changed the bundle re-signs it with a key of their own, and stores that key.
            try container.write("Demo.app/Info.plist", "evil\n")
            let forger = InstallerKey(privateKey: Curve25519.Signing.PrivateKey())
            let scan = BundleScan.scan(rootFD: container.store.rootFD, bundleName: Array("Demo.app".utf8))
            let manifest = BundleManifest(entries: scan.entries).encoded()
            try Data(manifest).write(to: URL(fileURLWithPath: container.stored(".containerfs/bundle.manifest")))
            try Data(try forger.signature(for: manifest)).write(to: URL(fileURLWithPath: container.stored(".containerfs/bundle.sig")))
            try Data(forger.publicKey).write(to: URL(fileURLWithPath: container.stored(".containerfs/bundle.pub")))
        }
    }

    /// The change `verify` must report (path and kinds), or the problem with the manifest.
    var expected: (change: String?, problem: String?) {
        switch self {
        case .content: ("Demo.app/Info.plist (content)", nil)
        case .appendedByte: ("Demo.app/res/data.txt (content)", nil)
        case .newFile: ("Demo.app/res/new.txt (added)", nil)
        case .removedFile: ("Demo.app/res/data.txt (removed)", nil)
        case .mode: ("Demo.app/run.sh (mode)", nil)
        case .symlinkRetargeted: ("Demo.app/link (link target)", nil)
        case .typeChanged: ("Demo.app/res/data.txt (type, mode)", nil)
        case .specialFile: ("Demo.app/res/pipe (added)", nil)
        case .manifestEdited, .manifestTruncated: (nil, "does not match its signature")
        case .manifestDeleted: (nil, "bundle.manifest is missing")
        case .signatureTruncated: (nil, "bundle.sig is truncated (40 bytes, not 64)")
        case .signatureDeleted: (nil, "bundle.sig is missing")
        case .keySwapped: (nil, "signed by another key")
        }
    }
}

@Suite("Bundle signing")
struct BundleSigningTests {
    @Test func aCleanBundleVerifiesAndItsOutsideLinkIsAWarning() throws {
        let container = try SignedContainer()
        let result = container.verify()
        #expect(result.isIntact)
        #expect(result.problem == nil)
        #expect(result.changes.isEmpty)
        #expect(result.outsideLinks.map(\.printablePath) == ["Demo.app/ext"])
        #expect(result.entries == 8, "the bundle folder, res, 4 files, 2 symlinks")
        #expect(result.files == 4)
        #expect(result.failure(store: "s") == nil)
    }

    @Test func theManifestRecordsEveryEntryAsBytes() throws {
        let container = try SignedContainer()
        let bytes = try readFile(at: container.store.stateFD, BundleSignature.manifestName)
        let manifest = try BundleManifest(decoding: bytes)
        #expect(manifest.encoded() == bytes, "the encoding is canonical")
        let byPath = Dictionary(uniqueKeysWithValues: manifest.entries.map { ($0.path, $0) })
        let plist = try #require(byPath[Array("Demo.app/Info.plist".utf8)])
        #expect(plist.kind == .file)
        #expect(plist.size == 20)
        #expect(plist.digest == Array(SHA256.hash(data: Data("<plist>demo</plist>\n".utf8))))
        #expect(byPath[Array("Demo.app/run.sh".utf8)]?.mode == 0o755)
        #expect(byPath[Array("Demo.app/link".utf8)]?.target == Array("Info.plist".utf8))
        #expect(byPath[Array("Demo.app/res".utf8)]?.kind == .folder)
        #expect(byPath[Array("Demo.app/".utf8) + SignedContainer.oddName] != nil, "a name that is not UTF-8 is kept as bytes")
        #expect(try readFile(at: container.store.stateFD, BundleSignature.publicKeyName) == container.key.publicKey)
        #expect(try readFile(at: container.store.stateFD, BundleSignature.signatureName).count == 64)
        #expect(BundleSignature.manifestDigest(of: container.store) == manifest.digest)
    }

    @Test func decodingRefusesAnythingButTheCanonicalEncoding() throws {
        let entries = [
            BundleEntry(path: Array("A.app/b".utf8), kind: .file, mode: 0o644, size: 1, digest: [UInt8](repeating: 7, count: 32)),
            BundleEntry(path: Array("A.app".utf8), kind: .folder, mode: 0o755, size: 0),
        ]
        let bytes = BundleManifest(entries: entries).encoded()
        #expect(try BundleManifest(decoding: bytes).entries.map(\.path) == [Array("A.app".utf8), Array("A.app/b".utf8)])
        #expect(throws: ManifestError.self) { try BundleManifest(decoding: bytes + [0]) }
        #expect(throws: ManifestError.self) { try BundleManifest(decoding: Array(bytes.dropLast())) }
        // The same entries in the wrong order.
        var swapped = BundleManifest.magic + [0, 0, 0, 2]
        swapped +=
            Array(bytes[(BundleManifest.magic.count + 4 + 15 + 5)...])
            + Array(bytes[(BundleManifest.magic.count + 4)..<(BundleManifest.magic.count + 4 + 15 + 5)])
        #expect(throws: ManifestError.self) { try BundleManifest(decoding: swapped) }
    }

    @Test(arguments: Tampering.allCases)
    func everyKindOfTamperingIsDetected(_ tampering: Tampering) throws {
        let container = try SignedContainer()
        #expect(container.verify().isIntact)
        try tampering.apply(to: container)
        for full in [false, true] {
            let result = container.verify(full: full)
            #expect(!result.isIntact)
            let failure = try #require(result.failure(store: "STORE"))
            #expect(!failure.message.contains("\n"))
            #expect(
                failure.message.hasSuffix("the app does not launch — reinstall it with 'containerfs update STORE --bundle PATH/NAME.app' (its data is kept)")
                    || failure.message.contains("or pass --key"))
            if let change = tampering.expected.change {
                #expect(result.problem == nil)
                #expect(result.changes.map(\.summary) == [change])
                #expect(
                    failure.message
                        == "bundle of STORE was changed: \(change); the app does not launch — reinstall it with 'containerfs update STORE --bundle PATH/NAME.app' (its data is kept)")
            }
            if let problem = tampering.expected.problem {
                #expect(result.changes.isEmpty)
                #expect(failure.message.contains("bundle of STORE cannot be verified: "))
                #expect(failure.message.contains(problem), "\(failure.message)")
            }
        }
    }

    @Test func aKeyOtherThanTheInstallersIsRefused() throws {
        let container = try SignedContainer()
        let other = InstallerKey(privateKey: Curve25519.Signing.PrivateKey(), path: "/elsewhere/installer.key")
        let result = container.verify(key: other)
        #expect(
            result.problem == .otherKey(signer: container.key.fingerprint, installer: other.fingerprint, path: "/elsewhere/installer.key"))
        #expect(result.failure(store: "S")?.message.contains("or pass --key with the key it was installed with") == true)
    }

    @Test func filesRestoredToTheirExactBytesVerifyAgain() throws {
        let container = try SignedContainer()
        let plist = container.contents("Demo.app/Info.plist")
        let data = container.contents("Demo.app/res/data.txt")
        try container.write("Demo.app/Info.plist", "changed\n")
        unlink(container.stored("Demo.app/res/data.txt"))
        chmod(container.stored("Demo.app/run.sh"), 0o700)
        unlink(container.stored("Demo.app/link"))
        symlink("elsewhere", container.stored("Demo.app/link"))
        #expect(container.verify().changes.count == 4)

        try plist.write(to: URL(fileURLWithPath: container.stored("Demo.app/Info.plist")))
        try data.write(to: URL(fileURLWithPath: container.stored("Demo.app/res/data.txt")))
        chmod(container.stored("Demo.app/res/data.txt"), 0o644)
        chmod(container.stored("Demo.app/run.sh"), 0o755)
        unlink(container.stored("Demo.app/link"))
        symlink("Info.plist", container.stored("Demo.app/link"))
        let result = container.verify()
        #expect(result.isIntact, "\(result.changes.map(\.description))")
        #expect(container.verify(full: true).isIntact)
    }

    @Test func aWarmVerifyReadsNoFile() throws {
        let container = try SignedContainer()
        // A file changed within the clock tick it was hashed in is not cached; let one pass.
        usleep(50_000)
        _ = container.verify()
        let warm = container.verify()
        #expect(warm.isIntact)
        #expect(warm.hashedFiles == 0)
        #expect(warm.cachedFiles == 4)
        let full = container.verify(full: true)
        #expect(full.isIntact)
        #expect(full.hashedFiles == 4, "--full reads every file")
        #expect(full.cachedFiles == 0)
    }

    @Test func aChangeWithItsTimesSetBackIsCaught() throws {
        let container = try SignedContainer()
        usleep(50_000)
        _ = container.verify()
        let path = container.stored("Demo.app/Info.plist")
        var before = stat()
        stat(path, &before)
        try container.write("Demo.app/Info.plist", "<plist>DEMO</plist>\n")
        var times = [before.st_atim, before.st_mtim]
        utimensat(AT_FDCWD, path, &times, 0)
        // The ctime moved, so even the cache sees it.
        #expect(container.verify().changes.map(\.summary) == ["Demo.app/Info.plist (content)"])

        // Should the ctime be set back too (the clock turned back, by root), only the
        // cache would be fooled: --full reads the file and catches it.
        try container.write("Demo.app/Info.plist", "<plist>demo</plist>\n")
        usleep(50_000)
        #expect(container.verify().isIntact)
        var now = stat()
        stat(path, &now)
        try container.write("Demo.app/Info.plist", "<plist>DEMO</plist>\n")
        var changed = stat()
        stat(path, &changed)
        var cache = VerificationCache.read(stateFD: container.store.stateFD, key: container.key.cacheKey)
        let oldDigest = try #require(cache[FileIdentity(now)])
        cache[FileIdentity(changed)] = oldDigest
        VerificationCache.write(cache, stateFD: container.store.stateFD, key: container.key.cacheKey)
        #expect(container.verify().isIntact, "the cache is trusted for an unchanged identity")
        #expect(container.verify(full: true).changes.map(\.summary) == ["Demo.app/Info.plist (content)"])
    }

    @Test func aCacheThatDoesNotAuthenticateIsIgnored() throws {
        let container = try SignedContainer()
        usleep(50_000)
        _ = container.verify()
        // Forge: claim the changed file still has its signed digest, without the key.
        var cache = VerificationCache.read(stateFD: container.store.stateFD, key: container.key.cacheKey)
        #expect(!cache.isEmpty)
        try container.write("Demo.app/Info.plist", "<plist>DEMO</plist>\n")
        var changed = stat()
        stat(container.stored("Demo.app/Info.plist"), &changed)
        cache[FileIdentity(changed)] = Array(SHA256.hash(data: Data("<plist>demo</plist>\n".utf8)))
        VerificationCache.write(cache, stateFD: container.store.stateFD, key: SymmetricKey(size: .bits256))
        let result = container.verify()
        #expect(result.changes.map(\.summary) == ["Demo.app/Info.plist (content)"])
        #expect(result.cachedFiles == 0)
    }

    @Test func aBigBundleIsHashedOnEveryCore() throws {
        // Many files, some large: the digests must match a plain serial hash.
        let container = try SignedContainer()
        var template = Array("/tmp/containerfs-sign-big-XXXXXX".utf8CString)
        let base = String(cString: mkdtemp(&template)!)
        defer { try? FileManager.default.removeItem(atPath: base) }
        try FileManager.default.createDirectory(atPath: base + "/Big.app/d", withIntermediateDirectories: true)
        var expected: [String: [UInt8]] = [:]
        for index in 0..<200 {
            let bytes = (0..<(index * 997 % 300_000)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ index) }
            let name = "d/f\(index)"
            try Data(bytes).write(to: URL(fileURLWithPath: base + "/Big.app/" + name))
            expected["Big.app/" + name] = Array(SHA256.hash(data: bytes))
        }
        let store = try Store.create(at: base + "/store", bundle: base + "/Big.app", installerKey: container.key)
        let result = BundleSignature.verify(store, key: container.key, full: true)
        #expect(result.isIntact)
        #expect(result.hashedFiles == 200)
        let manifest = try BundleManifest(decoding: readFile(at: store.stateFD, BundleSignature.manifestName))
        for entry in manifest.entries where entry.kind == .file {
            #expect(expected[entry.printablePath] == entry.digest, "\(entry.printablePath)")
        }
    }

    @Test func aBundleNestedDeeperThanPATHMAXIsSignedAndChecked() throws {
        let container = try SignedContainer()
        var template = Array("/tmp/containerfs-sign-deep-XXXXXX".utf8CString)
        let base = String(cString: mkdtemp(&template)!)
        defer { _ = try? FileManager.default.removeItem(atPath: base) }
        mkdir(base + "/Deep.app", 0o755)
        // 20 folders of 240-byte names: the file's path is about 4,900 bytes, past PATH_MAX.
        let name = Array(repeating: UInt8(ascii: "d"), count: 240)
        func descend(_ top: Int32, _ body: (Int32) throws -> Void) throws {
            var fd = top
            for _ in 0..<20 {
                _ = withCName(name) { mkdirat(fd, $0, 0o755) }
                let next = withCName(name) { openat(fd, $0, O_RDONLY | O_DIRECTORY) }
                if fd != top { close(fd) }
                fd = next
            }
            defer { close(fd) }
            try body(fd)
        }
        func writeDeep(_ top: Int32, _ text: String) throws {
            try descend(top) { folder in
                let file = withCName(Array("leaf".utf8)) { openat(folder, $0, O_WRONLY | O_CREAT | O_TRUNC, 0o644) }
                _ = Array(text.utf8).withUnsafeBytes { write(file, $0.baseAddress, $0.count) }
                close(file)
            }
        }
        let source = open(base + "/Deep.app", O_RDONLY | O_DIRECTORY)
        try writeDeep(source, "deep\n")
        close(source)
        let store = try Store.create(at: base + "/store", bundle: base + "/Deep.app", installerKey: container.key)
        #expect(BundleSignature.verify(store, key: container.key, full: true).isIntact)
        let stored = openat(store.rootFD, "Deep.app", O_RDONLY | O_DIRECTORY)
        try writeDeep(stored, "DEEP\n")
        close(stored)
        let changes = BundleSignature.verify(store, key: container.key).changes
        #expect(changes.map(\.kinds) == [[.content]])
        #expect(changes.first?.path.count ?? 0 > Int(PATH_MAX))
    }

    @Test func theInstallerKeyIsMadeOnceWithPrivateModes() throws {
        var template = Array("/tmp/containerfs-key-XXXXXX".utf8CString)
        let base = String(cString: mkdtemp(&template)!)
        defer { try? FileManager.default.removeItem(atPath: base) }
        let environment = ["XDG_CONFIG_HOME": base + "/config", "HOME": "/nonexistent"]
        #expect(throws: UserError.self) { _ = try InstallerKey.load(at: nil, environment: environment) }

        // Several installs making the key at once all end up with the same one.
        let keys = Mutex<[[UInt8]]>([])
        DispatchQueue.concurrentPerform(iterations: 4) { _ in
            if let key = try? InstallerKey.loadOrCreate(at: nil, environment: environment) {
                keys.withLock { $0.append(key.publicKey) }
            }
        }
        let made = keys.withLock { $0 }
        #expect(made.count == 4)
        #expect(Set(made).count == 1)
        let path = base + "/config/containerfs/installer.key"
        var info = stat()
        #expect(stat(path, &info) == 0 && info.st_mode & 0o777 == 0o600)
        #expect(stat(base + "/config/containerfs", &info) == 0 && info.st_mode & 0o777 == 0o700)
        #expect(try FileManager.default.contentsOfDirectory(atPath: base + "/config/containerfs") == ["installer.key"])
        #expect(try InstallerKey.load(at: nil, environment: environment).publicKey == made[0])
        #expect(try InstallerKey.load(at: path).publicKey == made[0], "--key names the same file")

        chmod(path, 0o644)
        let open = #expect(throws: UserError.self) { _ = try InstallerKey.load(at: path) }
        #expect(open?.message.contains("chmod 600") == true)
        try Data("not a key\n".utf8).write(to: URL(fileURLWithPath: base + "/bad.key"))
        chmod(base + "/bad.key", 0o600)
        let bad = #expect(throws: UserError.self) { _ = try InstallerKey.load(at: base + "/bad.key") }
        #expect(bad?.message.contains("is not a containerfs installer key") == true)
        let missingFolder = #expect(throws: UserError.self) { _ = try InstallerKey.loadOrCreate(at: base + "/nowhere/k.key") }
        #expect(missingFolder?.exitCode == 64)
    }

    @Test func theDefaultKeyPlaceFollowsXDGThenAnOwnedHome() throws {
        #expect(try InstallerKey.defaultLocation(["XDG_CONFIG_HOME": "/x/y", "HOME": "/root"]).file == "/x/y/containerfs/installer.key")
        // A relative XDG_CONFIG_HOME is ignored, as the XDG spec says.
        let home = try #require(getpwuid(geteuid())).pointee.pw_dir.map { String(cString: $0) }
        #expect(
            try InstallerKey.defaultLocation(["XDG_CONFIG_HOME": "rel", "HOME": "/nonexistent"]).file == home!
                + "/.config/containerfs/installer.key")
        // A HOME that is not this user's (setpriv keeping root's) is passed over.
        if geteuid() != 0 {
            #expect(try InstallerKey.defaultLocation(["HOME": "/root"]).file != "/root/.config/containerfs/installer.key")
        } else {
            var template = Array("/tmp/containerfs-home-XXXXXX".utf8CString)
            let foreign = String(cString: mkdtemp(&template)!)
            defer { rmdir(foreign) }
            chown(foreign, 65534, 65534)
            #expect(try InstallerKey.defaultLocation(["HOME": foreign]).file == home! + "/.config/containerfs/installer.key")
        }
    }
}
