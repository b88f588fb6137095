import CLinux
import ContainerPolicy
import Crypto
import Foundation
import Glibc
import Testing

@testable import ContainerBackup
@testable import ContainerStore

/// A temporary folder with a bundle and a container store in it, removed afterwards.
final class BackupScratch {
    let path: String
    let store: Store
    var bundle: String { path + "/Demo.app" }

    init() throws {
        var template = Array("/tmp/containerfs-backup-XXXXXX".utf8CString)
        path = String(cString: mkdtemp(&template)!)
        try FileManager.default.createDirectory(atPath: path + "/Demo.app", withIntermediateDirectories: true)
        try Data("plist".utf8).write(to: URL(fileURLWithPath: path + "/Demo.app/Info.plist"))
        store = try Store.create(at: path + "/store", bundle: path + "/Demo.app")
    }

    deinit { _ = try? run(["rm", "-rf", path]) }

    /// The store's host path of a container path given as bytes.
    func stored(_ relative: [UInt8]) -> [UInt8] { Array((path + "/store/").utf8) + relative }
}

// MARK: Building and describing trees by bytes (names need not be UTF-8)

private func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

@discardableResult
private func check(_ result: Int32, _ what: String) throws -> Int32 {
    guard result >= 0 else { throw TestError("\(what): \(String(cString: strerror(errno)))") }
    return result
}

private func makeDirectory(_ path: [UInt8], mode: mode_t = 0o755) throws {
    try check(withCName(path) { mkdir($0, mode) }, "mkdir \(ContainerPath.printable(path))")
    _ = withCName(path) { chmod($0, mode) }
}

private func makeFile(_ path: [UInt8], _ contents: [UInt8], mode: mode_t = 0o644) throws {
    let fd = try check(withCName(path) { open($0, O_WRONLY | O_CREAT | O_EXCL, 0o600) }, "create \(ContainerPath.printable(path))")
    defer { close(fd) }
    var done = 0
    while done < contents.count {
        let start = done
        done += try contents.withUnsafeBytes { Int(try check(Int32(write(fd, $0.baseAddress! + start, $0.count - start)), "write")) }
    }
    fchmod(fd, mode)
}

private func setTimes(_ path: [UInt8], modified: Int, nanoseconds: Int) {
    // Access time recent and after the modification: relatime then leaves it alone when
    // the backup reads the file, so it can be compared exactly afterwards.
    var now = timespec()
    clock_gettime(CLOCK_REALTIME, &now)
    var times = [timespec(tv_sec: now.tv_sec - 60, tv_nsec: 123_456_789), timespec(tv_sec: modified, tv_nsec: nanoseconds)]
    _ = withCName(path) { utimensat(AT_FDCWD, $0, &times, AT_SYMLINK_NOFOLLOW) }
}

private func setAttribute(_ path: [UInt8], _ name: String, _ value: String) throws {
    try check(withCName(path) { lsetxattr($0, name, value, value.utf8.count, 0) }, "setxattr \(name)")
}

/// The SHA-256 of the file at `path`, read here, independently of the code under test.
private func fileDigest(_ path: [UInt8], flags: Int32 = 0) throws -> [UInt8] {
    let fd = try check(withCName(path) { open($0, O_RDONLY | flags) }, "open \(ContainerPath.printable(path))")
    defer { close(fd) }
    var hasher = SHA256()
    var buffer = [UInt8](repeating: 0, count: 65536)
    while true {
        let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if count <= 0 { break }
        hasher.update(data: buffer[0..<count])
    }
    return Array(hasher.finalize())
}

/// Everything the round trip must keep, one line per entry below `root`, sorted by path
/// bytes: path (printable), type, mode, size, modification and access times in
/// nanoseconds, SHA-256 or symlink target, user.* attributes, and which earlier entry it
/// is a hard link of.
private func describe(_ root: [UInt8]) throws -> [String] {
    var lines: [String] = []
    var inodes: [UInt64: String] = [:]
    func walk(_ relative: [UInt8]) throws {
        let full = relative.isEmpty ? root : root + [UInt8(ascii: "/")] + relative
        var info = stat()
        try check(withCName(full) { lstat($0, &info) }, "lstat")
        let type = info.st_mode & S_IFMT
        var line = "\(ContainerPath.printable(relative)) type=\(type) mode=\(String(info.st_mode & 0o7777, radix: 8))"
        line += " mtime=\(info.st_mtim.tv_sec).\(info.st_mtim.tv_nsec)"
        if type != S_IFDIR { line += " atime=\(info.st_atim.tv_sec).\(info.st_atim.tv_nsec)" }
        if type == S_IFREG {
            let sha = try fileDigest(full, flags: O_NOFOLLOW)
            line += " size=\(info.st_size) sha=\(sha.map { String($0, radix: 16) }.joined())"
            if info.st_nlink > 1 {
                if let first = inodes[UInt64(info.st_ino)] { line += " link-of=\(first)" } else { inodes[UInt64(info.st_ino)] = ContainerPath.printable(relative) }
            }
        }
        if type == S_IFLNK {
            var target = [UInt8](repeating: 0, count: 4096)
            let count = withCName(full) { name in target.withUnsafeMutableBytes { readlink(name, $0.baseAddress!.assumingMemoryBound(to: CChar.self), $0.count) } }
            line += " target=\(ContainerPath.printable(Array(target[0..<count])))"
        } else {
            let fd = try check(withCName(full) { open($0, O_RDONLY | O_NOFOLLOW | O_NONBLOCK) }, "open")
            defer { close(fd) }
            let attributes = try ExtendedAttributes.user(of: fd).map { "\(ContainerPath.printable($0.name))=\(ContainerPath.printable($0.value))" }
            line += " xattrs=[\(attributes.sorted().joined(separator: ","))]"
        }
        lines.append(line)
        if type == S_IFDIR {
            let fd = try check(withCName(full) { open($0, O_RDONLY | O_DIRECTORY | O_NOFOLLOW) }, "opendir")
            defer { close(fd) }
            for name in try Directory.entries(of: fd).map(\.name).sorted(by: { $0.lexicographicallyPrecedes($1) }) {
                try walk(relative.isEmpty ? name : relative + [UInt8(ascii: "/")] + name)
            }
        }
    }
    try walk([])
    return lines
}

/// Fills a store with every kind of thing a backup must keep exactly.
private func populate(_ scratch: BackupScratch) throws {
    let s = scratch.stored
    try makeFile(s(bytes("Documents/notes.txt")), bytes("hello\n"), mode: 0o640)
    try makeDirectory(s(bytes("Documents/Projects")), mode: 0o750)
    try makeDirectory(s(bytes("Documents/Projects/Empty")))
    try makeFile(s(bytes("Documents/Projects/big.bin")), (0..<3_000_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }, mode: 0o600)
    try makeFile(s(bytes("Documents/Projects/empty.txt")), [])
    try makeFile(s(bytes("Documents/Projects/run.sh")), bytes("#!/bin/sh\n"), mode: 0o755)
    // Names that are not UTF-8, and two that differ only by normalization.
    try makeFile(s(bytes("Documents/") + [0x63, 0x61, 0x66, 0xE9, 0x2E, 0x74, 0x78, 0x74]), bytes("latin-1 name\n"))
    try makeDirectory(s(bytes("Documents/") + [0xFF, 0xFE]))
    try makeFile(s(bytes("Documents/") + [0xFF, 0xFE] + bytes("/inside")), bytes("x"))
    try makeFile(s(bytes("Documents/caf\u{E9}")), bytes("NFC"))
    try makeFile(s(bytes("Documents/cafe\u{301}")), bytes("NFD"))
    try makeFile(s(bytes("Documents/with space & 100% odd")), bytes("spaces"))
    // Symlinks: relative, absolute, dangling; hard links.
    _ = withCName(s(bytes("Documents/latest"))) { symlink("notes.txt", $0) }
    _ = withCName(s(bytes("Documents/absolute"))) { symlink("/etc/hostname", $0) }
    _ = withCName(s(bytes("Documents/dangling"))) { symlink("no/such/file", $0) }
    try check(withCName(s(bytes("Documents/notes.txt"))) { from in withCName(s(bytes("Documents/Projects/notes-link.txt"))) { link(from, $0) } }, "link")
    // Extended attributes, and a "0" exclusion, which keeps the file in.
    try setAttribute(s(bytes("Documents/notes.txt")), "user.color", "blue")
    try setAttribute(s(bytes("Documents/Projects")), "user.tag", "work")
    try setAttribute(s(bytes("Documents/Projects/run.sh")), BackupExclusion.attributeName, "0")
    try makeFile(s(bytes("Documents/Inbox/handed-over.pdf")), bytes("%PDF"))
    try makeFile(s(bytes("Library/Preferences/app.plist")), bytes("<plist/>"), mode: 0o600)
    try makeDirectory(s(bytes("Library/Application Support/db")))
    try makeFile(s(bytes("Library/Application Support/db/store.sqlite")), bytes("SQLite format 3\0"))
    try makeFile(s(bytes("Library/custom.dat")), bytes("custom"))
    // Never backed up.
    try makeFile(s(bytes("Library/Caches/thumb.png")), bytes("cache"))
    try makeFile(s(bytes("tmp/scratch")), bytes("tmp"))
    // Fixed times everywhere, deepest first so folders keep theirs.
    var all = 0
    for top in ["Documents", "Library"] {
        let paths = try allPaths(s(bytes(top)))
        for (index, path) in paths.reversed().enumerated() {
            setTimes(path, modified: 1_600_000_000 + index + all, nanoseconds: 100_000_000 + index * 7)
        }
        all += paths.count
    }
}

/// Every path below and including `root`, parents first.
private func allPaths(_ root: [UInt8]) throws -> [[UInt8]] {
    var result: [[UInt8]] = [root]
    var info = stat()
    _ = withCName(root) { lstat($0, &info) }
    guard info.st_mode & S_IFMT == S_IFDIR else { return result }
    let fd = try check(withCName(root) { open($0, O_RDONLY | O_DIRECTORY | O_NOFOLLOW) }, "open")
    defer { close(fd) }
    for name in try Directory.entries(of: fd).map(\.name).sorted(by: { $0.lexicographicallyPrecedes($1) }) {
        result += try allPaths(root + [UInt8(ascii: "/")] + name)
    }
    return result
}

@discardableResult
private func run(_ arguments: [String], input: Data? = nil) throws -> (status: Int32, output: String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = arguments
    let pipe = Pipe()
    process.standardOutput = pipe
    process.standardError = pipe
    try process.run()
    let output = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: output, as: UTF8.self))
}

struct TestError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// The names in a folder, sorted (to show nothing was left behind).
private func names(_ path: String) -> [String] {
    ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted()
}

@Suite("Backup")
struct BackupTests {
    @Test func roundTripIsByteExact() throws {
        let scratch = try BackupScratch()
        try populate(scratch)
        let before = try describe(scratch.stored(bytes("Documents"))) + (try describe(scratch.stored(bytes("Library"))))
        let set = try BackupSet.scan(scratch.store)
        #expect(set.items.contains { $0.path == ContainerPath(components: [bytes("Documents"), [0x63, 0x61, 0x66, 0xE9, 0x2E, 0x74, 0x78, 0x74]]) })
        #expect(!set.items.contains { $0.path.description.hasPrefix("Library/Caches") })
        let summary = try Backup.write(scratch.store, set: set, to: scratch.path + "/backup.tar")
        #expect(summary.vanished.isEmpty)
        #expect(summary.bytes == set.totalBytes)
        #expect(names(scratch.path) == ["Demo.app", "backup.tar", "store"], "no partial archive left")

        let restored = try Restore.restore(archive: scratch.path + "/backup.tar", to: scratch.path + "/restored", bundle: scratch.bundle)
        #expect(restored.entries == summary.entries)
        let after = try describe(Array((scratch.path + "/restored/Documents").utf8)) + (try describe(Array((scratch.path + "/restored/Library").utf8)))
        // The restored Library/Caches is empty: the source's cache file is the only difference.
        // Access times are not compared: libarchive's pax writer records none (a restored
        // file's access time is its modification time).
        let withoutAccessTimes = { (lines: [String]) in lines.map { $0.replacing(#/ atime=[0-9.]+/#, with: "") } }
        let expected = withoutAccessTimes(before.filter { !$0.hasPrefix("Caches") })
        let restoredData = withoutAccessTimes(after.filter { !$0.hasPrefix("Caches") })
        #expect(restoredData.count == expected.count)
        for (a, b) in zip(restoredData, expected) { #expect(a == b) }
        #expect(names(scratch.path + "/restored/Library/Caches") == ["CACHEDIR.TAG"])
        #expect(names(scratch.path + "/restored/tmp") == ["CACHEDIR.TAG"])
        #expect(FileManager.default.contents(atPath: scratch.path + "/restored/Demo.app/Info.plist") == Data("plist".utf8))
        _ = try Store.open(scratch.path + "/restored")
        #expect(names(scratch.path) == ["Demo.app", "backup.tar", "restored", "store"], "no staging folder left")
    }

    @Test func exclusionKeepsFilesAndFolderSubtreesOut() throws {
        let scratch = try BackupScratch()
        let s = scratch.stored
        try makeFile(s(bytes("Documents/keep.txt")), bytes("keep"))
        try makeFile(s(bytes("Documents/skip.txt")), bytes("skip"))
        try makeDirectory(s(bytes("Documents/Downloads")))
        try makeFile(s(bytes("Documents/Downloads/a.bin")), bytes("a"))
        try makeDirectory(s(bytes("Documents/Downloads/deep")))
        try makeFile(s(bytes("Documents/Downloads/deep/b.bin")), bytes("b"))
        try makeFile(s(bytes("Library/zero.txt")), bytes("kept: value 0"))
        try setAttribute(s(bytes("Documents/skip.txt")), BackupExclusion.attributeName, "1")
        try setAttribute(s(bytes("Documents/Downloads")), BackupExclusion.attributeName, "yes")
        try setAttribute(s(bytes("Library/zero.txt")), BackupExclusion.attributeName, "0")
        let set = try BackupSet.scan(scratch.store)
        let paths = set.items.map(\.path.description)
        #expect(paths.contains("Documents/keep.txt"))
        #expect(paths.contains("Library/zero.txt"))
        #expect(!paths.contains { $0.contains("skip") || $0.contains("Downloads") })
        #expect(set.excluded.map(\.path.description).sorted() == ["Documents/Downloads", "Documents/skip.txt"])
        #expect(set.totalBytes == 4 + 13)

        // From outside: include the folder again, exclude the kept file.
        let notes = try BackupExclusion.set(false, paths: [scratch.path + "/store/Documents/Downloads"])
        #expect(notes.isEmpty)
        _ = try BackupExclusion.set(true, paths: [scratch.path + "/store/Documents/keep.txt"])
        let again = try BackupSet.scan(scratch.store).items.map(\.path.description)
        #expect(again.contains("Documents/Downloads/deep/b.bin"))
        #expect(!again.contains("Documents/keep.txt"))
        // Including a file inside an excluded folder says that the folder still excludes it.
        _ = try BackupExclusion.set(true, paths: [scratch.path + "/store/Documents/Downloads"])
        let stillOut = try BackupExclusion.set(false, paths: [scratch.path + "/store/Documents/Downloads/a.bin"])
        #expect(stillOut.count == 1 && stillOut[0].contains("Downloads"))
        // Outside every container, and in places never backed up: one clear error.
        for (path, message) in [("/etc/hostname", "not inside a container"), (scratch.path + "/store/Library/Caches", "never backed up"),
                                (scratch.path + "/store/Demo.app/Info.plist", "not in Documents/ or Library/")] {
            let error = #expect(throws: UserError.self) { _ = try BackupExclusion.set(true, paths: [path]) }
            #expect(error?.message.contains(message) == true, "\(path): \(error?.message ?? "")")
        }
    }

    @Test func gnuTarListsAndExtractsTheArchive() throws {
        let scratch = try BackupScratch()
        try populate(scratch)
        _ = try Backup.write(scratch.store, set: try BackupSet.scan(scratch.store), to: scratch.path + "/backup.tar")
        let listing = try run(["tar", "-tf", scratch.path + "/backup.tar"])
        #expect(listing.status == 0, "\(listing.output)")
        let lines = listing.output.split(separator: "\n").map(String.init)
        #expect(lines.first == ".containerfs-backup/manifest")
        #expect(lines.contains("Documents/Projects/big.bin"))
        #expect(lines.contains("Library/Preferences/app.plist"))
        try FileManager.default.createDirectory(atPath: scratch.path + "/extracted", withIntermediateDirectories: true)
        let extracted = try run(["tar", "--xattrs", "--xattrs-include=user.*", "-xf", scratch.path + "/backup.tar", "-C", scratch.path + "/extracted"])
        #expect(extracted.status == 0, "\(extracted.output)")
        // The files GNU tar extracted hash as the manifest says.
        let manifest = try #require(BackupManifest(parsing: Array(try Data(contentsOf: URL(fileURLWithPath: scratch.path + "/extracted/.containerfs-backup/manifest")))))
        #expect(manifest.bundleName == bytes("Demo.app"))
        var files = 0
        for case .file(let path, let sha256) in manifest.records {
            let full = Array((scratch.path + "/extracted/").utf8) + path.bytes
            #expect(try fileDigest(full) == sha256, "\(path)")
            files += 1
        }
        #expect(files >= 10)
        // Modes, nanosecond times, symlinks and xattrs as in the store.
        let withoutAccessTimes = { (lines: [String]) in lines.map { $0.replacing(#/ atime=[0-9.]+/#, with: "") } }
        let source = withoutAccessTimes(try describe(scratch.stored(bytes("Documents"))))
        let fromTar = withoutAccessTimes(try describe(Array((scratch.path + "/extracted/Documents").utf8)))
        #expect(source == fromTar)
        #expect(try FileManager.default.destinationOfSymbolicLink(atPath: scratch.path + "/extracted/Documents/latest") == "notes.txt")
    }

    @Test func corruptAndTruncatedArchivesAreRefusedWritingNothing() throws {
        let scratch = try BackupScratch()
        try populate(scratch)
        let archive = scratch.path + "/backup.tar"
        _ = try Backup.write(scratch.store, set: try BackupSet.scan(scratch.store), to: archive)
        let good = try Data(contentsOf: URL(fileURLWithPath: archive))
        let bigFileOffset = try #require(good.range(of: Data((0..<64).map { UInt8(truncatingIfNeeded: $0 &* 7) }))).lowerBound
        var flipped = good
        flipped[bigFileOffset + 1_000_000] ^= 0xFF
        // A header's checksum garbled (the ustar header of big.bin starts with its name).
        var badHeader = good
        let header = try #require(good.range(of: Data("Documents/Projects/big.bin\0".utf8))).lowerBound
        for index in header + 148..<header + 156 { badHeader[index] = 0x41 }
        // Cut exactly before an entry (its pax header), so the tar itself ends cleanly.
        let entryStart = try #require(good.range(of: Data("Library/Preferences/PaxHeader/app.plist\0".utf8))).lowerBound
        let cases: [(String, Data, String)] = [
            ("flipped byte in a file", flipped, "SHA-256"),
            ("garbled header", badHeader, "corrupt"),
            ("cut before an entry", good.prefix(entryStart), "it is truncated"),
            ("truncated in the middle", good.prefix(good.count / 2), "truncated"),
            ("truncated at a block boundary", good.prefix((bigFileOffset / 512 + 10) * 512), "truncated"),
            ("only the first block", good.prefix(512), "refused"),
            ("empty file", Data(), "refused"),
            ("not an archive", Data(repeating: 0x41, count: 4096), "refused"),
        ]
        for (name, data, message) in cases {
            let path = scratch.path + "/bad.tar"
            try data.write(to: URL(fileURLWithPath: path))
            let error = #expect(throws: UserError.self, "\(name)") {
                _ = try Restore.restore(archive: path, to: scratch.path + "/restored", bundle: scratch.bundle)
            }
            #expect(error?.message.contains(message) == true, "\(name): \(error?.message ?? "")")
            #expect(error?.message.contains("nothing was written") == true, "\(name)")
            #expect(names(scratch.path) == ["Demo.app", "backup.tar", "bad.tar", "store"], "\(name): nothing written")
        }
    }

    @Test(arguments: HostileCase.allCases)
    func hostileArchivesAreRefusedWritingNothing(_ hostile: HostileCase) throws {
        let scratch = try BackupScratch()
        let outside = scratch.path + "/outside"
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
        let archive = scratch.path + "/hostile.tar"
        let made = try run(["python3", "-c", hostileArchiveScript, hostile.rawValue, archive, outside])
        try #require(made.status == 0, "\(made.output)")
        let storeBefore = names(scratch.path + "/store/Documents")
        let error = #expect(throws: UserError.self) {
            _ = try Restore.restore(archive: archive, to: scratch.path + "/restored", bundle: scratch.bundle)
        }
        #expect(error?.message.contains(hostile.message) == true, "\(hostile): \(error?.message ?? "")")
        #expect(error?.message.contains("nothing was written") == true)
        #expect(names(scratch.path) == ["Demo.app", "hostile.tar", "outside", "store"], "nothing written beside the target")
        #expect(names(outside).isEmpty, "nothing written outside")
        #expect(names(scratch.path + "/store/Documents") == storeBefore)
        #expect(!FileManager.default.fileExists(atPath: "/tmp/containerfs-hostile-absolute"))
    }

    /// A file with names in Documents/Inbox and in Documents (made in the store by hand: the
    /// mount denies such a link) is backed up as two files, since a restore refuses a hard
    /// link across the inbox; names on one side of it stay one file.
    @Test func aHardLinkAcrossTheInboxIsBackedUpAsACopy() throws {
        let scratch = try BackupScratch()
        try makeFile(scratch.stored(bytes("Documents/Inbox/got.txt")), bytes("handed over"))
        _ = try check(link(scratch.path + "/store/Documents/Inbox/got.txt", scratch.path + "/store/Documents/edit.txt"), "link")
        _ = try check(link(scratch.path + "/store/Documents/edit.txt", scratch.path + "/store/Documents/again.txt"), "link")
        let set = try BackupSet.scan(scratch.store)
        _ = try Backup.write(scratch.store, set: set, to: scratch.path + "/backup.tar")
        _ = try Restore.restore(archive: scratch.path + "/backup.tar", to: scratch.path + "/restored", bundle: scratch.bundle)
        var inbox = stat(), edit = stat(), again = stat()
        _ = try check(stat(scratch.path + "/restored/Documents/Inbox/got.txt", &inbox), "stat")
        _ = try check(stat(scratch.path + "/restored/Documents/edit.txt", &edit), "stat")
        _ = try check(stat(scratch.path + "/restored/Documents/again.txt", &again), "stat")
        #expect(inbox.st_ino != edit.st_ino && inbox.st_nlink == 1, "the inbox file is a file of its own")
        #expect(edit.st_ino == again.st_ino && edit.st_nlink == 2, "the two names outside the inbox stay one file")
        #expect(FileManager.default.contents(atPath: scratch.path + "/restored/Documents/edit.txt") == Data("handed over".utf8))
    }

    @Test func wellFormedCraftedArchiveIsAccepted() throws {
        // The control for the hostile cases: the same script's clean archive restores.
        let scratch = try BackupScratch()
        let archive = scratch.path + "/clean.tar"
        let made = try run(["python3", "-c", hostileArchiveScript, "clean", archive, scratch.path])
        try #require(made.status == 0, "\(made.output)")
        _ = try Restore.restore(archive: archive, to: scratch.path + "/restored", bundle: scratch.bundle)
        #expect(FileManager.default.contents(atPath: scratch.path + "/restored/Documents/a.txt") == Data("good".utf8))
    }

    @Test func manifestRoundTripsAnyBytes() {
        let odd: [UInt8] = [0x20, 0x25, 0x0A, 0xFF, 0x41, 0x00]
        #expect(BackupManifest.unescape(BackupManifest.escape(odd)) == odd)
        let manifest = BackupManifest(bundleName: bytes("My App.app"), bundleManifestDigest: [UInt8](repeating: 7, count: 32), records: [
            .directory(ContainerPath(components: [bytes("Documents")])),
            .file(ContainerPath(components: [bytes("Documents"), [0xFF, 0x20]]), sha256: [UInt8](repeating: 1, count: 32)),
            .symlink(ContainerPath(components: [bytes("Documents"), bytes("l")]), target: bytes("../a b")),
            .hardLink(ContainerPath(components: [bytes("Documents"), bytes("h")]), target: ContainerPath(components: [bytes("Documents"), [0xFF, 0x20]])),
        ])
        #expect(BackupManifest(parsing: manifest.bytes + [0x0A, 0x0A, 0x0A]) == manifest)
        #expect(BackupManifest(parsing: Array("containerfs-backup 1\nbundle A.app\nbundle-manifest-sha256 -\nf 00 x\n".utf8)) == nil)
        #expect(BackupManifest(parsing: Array("containerfs-backup 1\nbundle A.app\nbundle-manifest-sha256 -\nd Documents/../x\n".utf8)) == nil)
    }
}

/// The hostile archives of docs/backup.md, each with an otherwise valid manifest.
enum HostileCase: String, CaseIterable, CustomTestStringConvertible {
    case dotdot, absolute, throughSymlink, intoBundle, intoStateFolder, intoCaches, intoTmp
    case device, fifo, hardLinkOutside, hardLinkAcrossInbox, duplicate, notInManifest, wrongContent, noManifest, malformedLastLine, missingEntry

    var testDescription: String { rawValue }

    /// What the refusal must say.
    var message: String {
        switch self {
        case .dotdot: "'..'"
        case .absolute: "absolute path"
        case .throughSymlink: "passes through a symlink"
        case .intoBundle: "in the bundle"
        case .intoStateFolder: "state folder"
        case .intoCaches: "Library/Caches"
        case .intoTmp: "in tmp"
        case .device: "device file"
        case .fifo: "FIFO"
        case .hardLinkOutside: "hard link"
        case .hardLinkAcrossInbox: "across Documents/Inbox"
        case .duplicate: "appears twice"
        case .notInManifest: "not in the manifest"
        case .wrongContent: "SHA-256"
        case .noManifest: "not a containerfs backup"
        case .malformedLastLine: "manifest is malformed"
        case .missingEntry: "it ends before Documents/missing.txt"
        }
    }
}

/// Writes the archive CASE to OUT (python3's tarfile, pax format); OUTSIDE is a folder
/// outside the container that a hostile entry aims at.
let hostileArchiveScript = #"""
import hashlib, io, sys, tarfile
case, out, outside = sys.argv[1], sys.argv[2], sys.argv[3]
entries = []  # (TarInfo, data, listed in the manifest)
def add(name, kind=tarfile.REGTYPE, data=b"", link="", listed=True, mode=0o644):
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.linkname, info.mtime = kind, mode, link, 1600000000
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    entries.append((info, data, listed))
add("Documents", tarfile.DIRTYPE, mode=0o755)
add("Library", tarfile.DIRTYPE, mode=0o755)
add("Documents/a.txt", data=b"good")
if case == "dotdot": add("Documents/../../escaped.txt", data=b"evil", listed=False)
if case == "absolute": add("/tmp/containerfs-hostile-absolute", data=b"evil", listed=False)
if case == "throughSymlink":
    add("Documents/link", tarfile.SYMTYPE, link=outside)
    add("Documents/link/evil.txt", data=b"evil", listed=False)
if case == "intoBundle": add("Demo.app/Info.plist", data=b"evil", listed=False)
if case == "intoStateFolder": add(".containerfs/format", data=b"evil", listed=False)
if case == "intoCaches": add("Library/Caches/evil", data=b"evil", listed=False)
if case == "intoTmp": add("tmp/evil", data=b"evil", listed=False)
if case == "device": add("Documents/null", tarfile.CHRTYPE, listed=False)
if case == "fifo": add("Documents/fifo", tarfile.FIFOTYPE, listed=False)
if case == "hardLinkOutside": add("Documents/passwd", tarfile.LNKTYPE, link="/etc/passwd", listed=False)
if case == "hardLinkAcrossInbox":  # the app could change the handed-over file by its other name
    add("Documents/Inbox", tarfile.DIRTYPE, mode=0o755)
    add("Documents/Inbox/got.txt", data=b"handed over")
    add("Documents/edit.txt", tarfile.LNKTYPE, link="Documents/Inbox/got.txt")
if case == "duplicate":
    add("Documents/b", data=b"b")
    add("Documents/b", tarfile.SYMTYPE, link=outside, listed=False)
if case == "notInManifest": add("Documents/extra.txt", data=b"extra", listed=False)
if case == "wrongContent": entries[2] = (entries[2][0], b"evil", True); entries[2][0].size = 4
def esc(b):
    return "".join(chr(c) if 0x20 < c < 0x7F and c != 0x25 else "%%%02X" % c for c in b)
lines = ["containerfs-backup 1", "bundle Demo.app", "bundle-manifest-sha256 -"]
for info, data, listed in entries:
    if not listed: continue
    path = esc(info.name.rstrip("/").encode())
    if info.isdir(): lines.append("d " + path)
    elif info.issym(): lines.append("l %s %s" % (path, esc(info.linkname.encode())))
    elif info.islnk(): lines.append("h %s %s" % (path, esc(info.linkname.encode())))
    else:
        content = b"good" if case == "wrongContent" and info.name == "Documents/a.txt" else data
        lines.append("f %s %s" % (hashlib.sha256(content).hexdigest(), path))
# Found only once every entry has been restored aside: the manifest is read as it goes.
if case == "malformedLastLine": lines.append("? not a record")
if case == "missingEntry": lines.append("f %s Documents/missing.txt" % hashlib.sha256(b"x").hexdigest())
manifest = ("\n".join(lines) + "\n").encode()
with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as archive:
    if case != "noManifest":
        info = tarfile.TarInfo(".containerfs-backup/manifest")
        info.size = len(manifest)
        archive.addfile(info, io.BytesIO(manifest))
    for info, data, listed in entries:
        archive.addfile(info, io.BytesIO(data) if info.type == tarfile.REGTYPE else None)
"""#
