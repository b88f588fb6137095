import ContainerPolicy
import Foundation
import Glibc
import Testing

@testable import ContainerBackup
@testable import ContainerStore

// Sparse files in backups (docs/backup.md, "Sparse files"): GNU tar is the referee of
// the archive, the restored file is compared with the source region by region.

private let tebibyte: Int64 = 1 << 40

@discardableResult
private func shell(_ arguments: [String]) throws -> (status: Int32, output: String) {
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

private func folderNames(_ path: String) -> [String] {
    ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted()
}

/// Makes `path` a file of `size` bytes holding `data` at each offset, holes elsewhere.
private func makeSparse(_ path: String, size: Int64, data: [(Int64, [UInt8])]) throws {
    let fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0o640)
    guard fd >= 0 else { throw TestError("create \(path): \(String(cString: strerror(errno)))") }
    defer { close(fd) }
    guard ftruncate(fd, off_t(size)) == 0 else { throw TestError("ftruncate \(path)") }
    for (offset, bytes) in data {
        let written = bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, off_t(offset)) }
        guard written == bytes.count else { throw TestError("pwrite \(path)") }
    }
}

/// A file's size, blocks, and data regions with their bytes, found here with
/// SEEK_DATA/SEEK_HOLE, independently of the code under test.
private struct Layout: Equatable, CustomStringConvertible {
    var size: Int64
    var blocks: Int64
    var regions: [(offset: Int64, bytes: [UInt8])]

    init(_ path: String) throws {
        let fd = open(path, O_RDONLY | O_NOFOLLOW)
        guard fd >= 0 else { throw TestError("open \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var info = stat()
        fstat(fd, &info)
        size = Int64(info.st_size)
        blocks = Int64(info.st_blocks)
        regions = []
        var position: Int64 = 0
        while position < size {
            let data = Int64(lseek(fd, off_t(position), 3))  // SEEK_DATA
            if data < 0 { break }
            let hole = Int64(lseek(fd, off_t(data), 4))  // SEEK_HOLE
            var bytes = [UInt8](repeating: 0, count: Int(hole - data))
            _ = bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, off_t(data)) }
            regions.append((data, bytes))
            position = hole
        }
    }

    static func == (a: Layout, b: Layout) -> Bool {
        a.size == b.size && a.regions.count == b.regions.count
            && zip(a.regions, b.regions).allSatisfy { $0.offset == $1.offset && $0.bytes == $1.bytes }
    }

    var description: String { "size \(size), \(blocks) blocks, regions \(regions.map { "\($0.offset)+\($0.bytes.count)" })" }
}

/// `du -k`'s figure for a file: the blocks it takes.
private func duKiB(_ path: String) throws -> Int {
    let result = try shell(["du", "-k", path])
    return Int(result.output.split(separator: "\t").first ?? "") ?? -1
}

@Suite("Sparse backups")
struct SparseBackupTests {
    /// A file of 1 TiB holding three blocks of data: backed up in well under a second into
    /// an archive of a few KiB; GNU tar lists its size and extracts it sparse and identical;
    /// restore makes it sparse again.
    @Test func aTebibyteSparseFileBacksUpInAFewKiBAndComesBackSparse() throws {
        let scratch = try BackupScratch()
        let source = scratch.path + "/store/Documents/huge.img"
        try makeSparse(source, size: tebibyte, data: [(0, Array("begin".utf8)), (tebibyte / 2, Array("middle".utf8)), (tebibyte - 3, Array("end".utf8))])
        let original = try Layout(source)
        #expect(original.regions.count == 3)

        let set = try BackupSet.scan(scratch.store)
        #expect(set.totalBytes == tebibyte && set.dataEstimate < 1 << 20, "apparent \(set.totalBytes), data guessed \(set.dataEstimate)")
        #expect(ObjectStoreBackup.partSize(for: set) == ObjectStoreBackup.minimumPartSize, "an object store's parts sized by the data, not 1 TiB")
        let clock = ContinuousClock()
        let started = clock.now
        let summary = try Backup.write(scratch.store, set: set, to: scratch.path + "/backup.tar")
        let took = clock.now - started
        #expect(took < .seconds(3), "backup of a 1 TiB sparse file took \(took)")
        #expect(summary.archiveBytes < 48 * 1024, "archive of \(summary.archiveBytes) bytes")
        #expect(summary.sparseFiles == 1 && summary.files == 1)
        #expect(summary.bytes == tebibyte, "reported as its apparent size")
        #expect(summary.dataBytes == original.regions.reduce(0) { $0 + Int64($1.bytes.count) }, "and the data stored apart")

        // GNU tar, the independent referee: lists the apparent size, extracts it sparse.
        let listing = try shell(["tar", "-tvf", scratch.path + "/backup.tar"])
        #expect(listing.status == 0, "\(listing.output)")
        #expect(listing.output.contains("1099511627776") && listing.output.contains("Documents/huge.img"), "\(listing.output)")
        try FileManager.default.createDirectory(atPath: scratch.path + "/extracted", withIntermediateDirectories: true)
        let extracted = try shell(["tar", "-xf", scratch.path + "/backup.tar", "-C", scratch.path + "/extracted"])
        #expect(extracted.status == 0, "\(extracted.output)")
        let fromTar = try Layout(scratch.path + "/extracted/Documents/huge.img")
        #expect(fromTar == original, "GNU tar: \(fromTar) vs \(original)")
        // cmp of each data region (all of a terabyte would take minutes), and du.
        for region in original.regions {
            let compared = try shell(["cmp", "-i", "\(region.offset)", "-n", "\(region.bytes.count)", source, scratch.path + "/extracted/Documents/huge.img"])
            #expect(compared.status == 0, "\(compared.output)")
        }
        #expect(try duKiB(scratch.path + "/extracted/Documents/huge.img") <= max(64, 2 * (try duKiB(source))))

        let restored = try Restore.restore(archive: scratch.path + "/backup.tar", to: scratch.path + "/restored", bundle: scratch.bundle)
        #expect(restored.bytes == tebibyte && restored.dataBytes == summary.dataBytes)
        let back = try Layout(scratch.path + "/restored/Documents/huge.img")
        #expect(back == original, "restored: \(back) vs \(original)")
        #expect(back.blocks <= original.blocks, "restored with its holes: \(back)")
        var info = stat()
        #expect(stat(scratch.path + "/restored/Documents/huge.img", &info) == 0 && info.st_mode & 0o777 == 0o640)
    }

    /// Holes first, last, between, only holes; next to plain files and a hard link: the
    /// manifest says which are sparse, GNU tar extracts each identical (`cmp`), restore too,
    /// and no restored file takes more blocks than its source.
    @Test func sparseShapesRoundTripThroughGNUTarAndRestore() throws {
        let scratch = try BackupScratch()
        let folder = scratch.path + "/store/Documents/shapes"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let mib: Int64 = 1 << 20
        let block = (0..<8192).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        try makeSparse(folder + "/hole-first", size: 64 * mib, data: [(60 * mib, Array("tail".utf8))])
        try makeSparse(folder + "/hole-last", size: 64 * mib, data: [(0, block)])
        try makeSparse(folder + "/holes-between", size: 48 * mib, data: [(0, block), (16 * mib, block), (48 * mib - 8192, block)])
        try makeSparse(folder + "/all-hole", size: 32 * mib, data: [])
        // Data enough to be hashed on the second core (from 256 KiB), both ways.
        let megabyte = (0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ $0 >> 12) }
        try makeSparse(folder + "/big-regions", size: 64 * mib, data: [(mib, megabyte), (40 * mib, megabyte)])
        try makeSparse(folder + "/dense", size: 8192, data: [(0, block)])
        try makeSparse(folder + "/empty", size: 0, data: [])
        #expect(link(folder + "/hole-first", folder + "/same-as-hole-first") == 0)
        let sparse = ["all-hole", "big-regions", "hole-first", "hole-last", "holes-between"]
        let all = sparse + ["dense", "empty", "same-as-hole-first"]

        let summary = try Backup.write(scratch.store, set: try BackupSet.scan(scratch.store), to: scratch.path + "/backup.tar")
        #expect(summary.sparseFiles == 5, "the hard link is no second sparse file")
        #expect(summary.bytes == (64 + 64 + 64 + 48 + 32) * mib + 8192)
        #expect(summary.archiveBytes < 2 * mib + 256 * 1024)

        try FileManager.default.createDirectory(atPath: scratch.path + "/extracted", withIntermediateDirectories: true)
        let extracted = try shell(["tar", "-xf", scratch.path + "/backup.tar", "-C", scratch.path + "/extracted"])
        #expect(extracted.status == 0, "\(extracted.output)")
        let manifest = try #require(BackupManifest(parsing: Array(try Data(contentsOf: URL(fileURLWithPath: scratch.path + "/extracted/.containerfs-backup/manifest")))))
        let kinds = Dictionary(uniqueKeysWithValues: manifest.records.compactMap { record -> (String, String)? in
            switch record {
            case .file(let path, _): (path.description, "f")
            case .sparseFile(let path, _): (path.description, "s")
            case .hardLink(let path, _): (path.description, "h")
            default: nil
            }
        })
        for name in sparse { #expect(kinds["Documents/shapes/" + name] == "s", "\(name)") }
        #expect(kinds["Documents/shapes/dense"] == "f" && kinds["Documents/shapes/empty"] == "f")
        #expect(kinds["Documents/shapes/same-as-hole-first"] == "h")

        _ = try Restore.restore(archive: scratch.path + "/backup.tar", to: scratch.path + "/restored", bundle: scratch.bundle)
        for name in all {
            let original = try Layout(folder + "/" + name)
            for copy in [scratch.path + "/extracted/Documents/shapes/" + name, scratch.path + "/restored/Documents/shapes/" + name] {
                let compared = try shell(["cmp", folder + "/" + name, copy])
                #expect(compared.status == 0, "\(copy): \(compared.output)")
                let layout = try Layout(copy)
                #expect(layout.blocks <= original.blocks + 16, "\(copy): \(layout) vs \(original)")
            }
        }
        var first = stat(), second = stat()
        #expect(stat(scratch.path + "/restored/Documents/shapes/hole-first", &first) == 0 && stat(scratch.path + "/restored/Documents/shapes/same-as-hole-first", &second) == 0)
        #expect(first.st_ino == second.st_ino, "the hard link restored as one")
    }

    @Test(arguments: HostileSparseCase.allCases)
    func hostileSparseMapsAreRefusedWritingNothing(_ hostile: HostileSparseCase) throws {
        let scratch = try BackupScratch()
        let archive = scratch.path + "/hostile.tar"
        let made = try shell(["python3", "-c", sparseArchiveScript, hostile.rawValue, archive])
        try #require(made.status == 0, "\(made.output)")
        // ext4 holds files up to 16 TiB; tmpfs, xfs, btrfs up to 2^63 − 1 bytes, where that
        // map is a valid (if absurd) sparse file.
        let fileSystem = try shell(["stat", "-f", "-c", "%T", scratch.path]).output
        if hostile == .sizeNear2To63, !fileSystem.hasPrefix("ext") { return }
        let error = #expect(throws: UserError.self) {
            _ = try Restore.restore(archive: archive, to: scratch.path + "/restored", bundle: scratch.bundle)
        }
        let message = error?.message ?? ""
        #expect(message.contains(hostile.message), "\(hostile): \(message)")
        #expect(message.contains("nothing was written"), "\(hostile): \(message)")
        #expect(!message.contains("\n"), "one line")
        #expect(folderNames(scratch.path) == ["Demo.app", "hostile.tar", "store"], "nothing written beside the target")
    }

    @Test func aWellFormedCraftedSparseEntryIsAccepted() throws {
        // The control for the hostile maps: the same script's clean archive restores, and
        // GNU tar reads it as the restore does.
        let scratch = try BackupScratch()
        let archive = scratch.path + "/clean.tar"
        let made = try shell(["python3", "-c", sparseArchiveScript, "clean", archive])
        try #require(made.status == 0, "\(made.output)")
        _ = try Restore.restore(archive: archive, to: scratch.path + "/restored", bundle: scratch.bundle)
        let layout = try Layout(scratch.path + "/restored/Documents/s.bin")
        #expect(layout.size == 1 << 20)
        var expected = [UInt8](repeating: 0, count: 1 << 20)
        expected.replaceSubrange(0..<4, with: Array("abcd".utf8))
        expected.replaceSubrange(65536..<65540, with: Array("wxyz".utf8))
        #expect(FileManager.default.contents(atPath: scratch.path + "/restored/Documents/s.bin") == Data(expected))
        try FileManager.default.createDirectory(atPath: scratch.path + "/extracted", withIntermediateDirectories: true)
        #expect(try shell(["tar", "-xf", archive, "-C", scratch.path + "/extracted"]).status == 0)
        #expect(try shell(["cmp", scratch.path + "/extracted/Documents/s.bin", scratch.path + "/restored/Documents/s.bin"]).status == 0)
    }

    /// The map a backup takes of a file: its data regions as SEEK_DATA/SEEK_HOLE see them
    /// (whole blocks already); past the limit, one line naming the file.
    @Test func theBackupMapsAFilesDataRegionsUpToTheLimit() throws {
        let scratch = try BackupScratch()
        let path = scratch.path + "/store/Documents/five.img"
        let mib: Int64 = 1 << 20
        try makeSparse(path, size: 10 * mib, data: (0..<5).map { (Int64($0) * 2 * mib + mib, Array("x".utf8)) })
        let fd = open(path, O_RDONLY)
        defer { close(fd) }
        let firstHole = Int64(lseek(fd, 0, 4))
        #expect(firstHole == 0)
        let file = ContainerPath(components: [Array("Documents".utf8), Array("five.img".utf8)])
        let map = try BackupWriter.dataRegions(fd, size: 10 * mib, firstHole: firstHole, path: file)
        let layout = try Layout(path)
        #expect(map.regions.map(\.offset) == layout.regions.map(\.offset))
        #expect(map.regions.map(\.length) == layout.regions.map { Int64($0.bytes.count) })
        #expect(map.size == 10 * mib && map.problem == nil)
        let error = #expect(throws: UserError.self) { _ = try BackupWriter.dataRegions(fd, size: 10 * mib, firstHole: firstHole, path: file, limit: 4) }
        #expect(error?.message.contains("Documents/five.img: it has more than 4 data regions") == true, "\(error?.message ?? "")")
    }

    @Test func sparseMapProblemsAreFoundBeforeAnythingIsWritten() {
        func map(_ regions: [(Int64, Int64)], size: Int64) -> SparseMap {
            SparseMap(regions: regions.map { SparseRegion(offset: $0.0, length: $0.1) }, size: size)
        }
        #expect(map([(0, 512), (1024, 512), (4096, 0)], size: 4096).problem == nil)
        #expect(map([(0, 512), (1024, 5)], size: 1029).problem == nil, "the last region ends at the size")
        #expect(map([], size: 0).problem == nil)
        #expect(map([(Int64.max - 511, 511)], size: Int64.max).problem == nil)
        let cases: [(SparseMap, String)] = [
            (map([(0, 1)], size: -1), "negative"),
            (map([(-1, 1)], size: 10), "negative"),
            (map([(0, -1)], size: 10), "negative"),
            (map([(0, 1024), (512, 1024)], size: 4096), "starts before the previous region ends"),
            (map([(2048, 512), (0, 512)], size: 4096), "starts before the previous region ends"),
            (map([(0, 4), (1024, 512)], size: 4096), "not whole 512-byte blocks"),
            (map([(100, 512)], size: 4096), "not whole 512-byte blocks"),
            (map([(95, 10)], size: 100), "ends past the file's size"),
            (map([(101, 0)], size: 100), "ends past the file's size"),
            (map([(Int64.max, Int64.max)], size: Int64.max), "ends past the file's size"),
            (map([(1, Int64.max)], size: Int64.max), "ends past the file's size"),
            (SparseMap(regions: (0..<(SparseMap.regionLimit + 1)).map { SparseRegion(offset: Int64($0) * 2, length: 1) }, size: 1 << 30), "more than the"),
        ]
        for (bad, phrase) in cases {
            #expect(bad.problem?.contains(phrase) == true, "\(bad.regions.prefix(3)) size \(bad.size): \(bad.problem ?? "nil")")
        }

        // Whole tar blocks for GNU tar: widened, merged where they then touch, the last to the size.
        #expect(map([(0, 10), (600, 10), (1030, 4), (5000, 1)], size: 5001).alignedToTarBlocks == map([(0, 1536), (4608, 393)], size: 5001))
        #expect(map([(Int64.max - 4, 4)], size: Int64.max).alignedToTarBlocks == map([((Int64.max - 4) & ~511, Int64.max - ((Int64.max - 4) & ~511))], size: Int64.max))
        #expect(map([(0, 0)], size: 100).alignedToTarBlocks == map([], size: 100))

        var follower = SparseMap.DataFollower(map([(0, 10), (20, 0), (30, 10)], size: 100))
        let steps = [follower.accept(offset: 0, length: 4), follower.accept(offset: 4, length: 6), follower.accept(offset: 20, length: 1)]
        #expect(steps == [true, true, false], "an empty region takes no data")
        #expect(!follower.isComplete)
        let last = follower.accept(offset: 30, length: 10)
        #expect(last && follower.isComplete)
        let after = follower.accept(offset: 40, length: 1)
        #expect(!after, "nothing after the last region")
        var overlapping = SparseMap.DataFollower(map([(0, 10), (30, 10)], size: 100))
        let overlap = [overlapping.accept(offset: 0, length: 10), overlapping.accept(offset: 5, length: 5)]
        #expect(overlap == [true, false], "data back inside a region already written")
        #expect(map([(0, Int64.max)], size: Int64.max).dataBytes == Int64.max)
    }
}

/// Sparse entries whose map is hostile, each with a manifest whose digest matches, so
/// that the map (not the manifest) is what refuses them.
enum HostileSparseCase: String, CaseIterable, CustomTestStringConvertible {
    case overlapping, outOfOrder, pastTheSize, notWholeBlocks, offsetOverflows, hugeNumber, mapLongerThanData, tooManyRegions
    case sizeNear2To63, negativeSize, notNumbers, listedAsPlainFile

    var testDescription: String { rawValue }

    var message: String {
        switch self {
        case .overlapping, .outOfOrder, .pastTheSize: "is not where its map puts data"
        case .notWholeBlocks: "is not whole 512-byte blocks"
        case .offsetOverflows, .hugeNumber: "Malformed sparse map"
        case .mapLongerThanData: "data ends before its map does"
        case .tooManyRegions: "more than the 262144 a backup writes"
        case .sizeNear2To63: "more than the file system restored into allows"
        case .negativeSize: "has a negative size (-1)"
        case .notNumbers: "corrupt"
        case .listedAsPlainFile: "does not match its manifest"
        }
    }
}

/// Writes the archive CASE to OUT: a manifest, Documents/, and one GNU "sparse 1.0" pax
/// entry Documents/s.bin (python3's tarfile with the GNU.sparse.* records, the map at the
/// start of the data as GNU tar writes it).
let sparseArchiveScript = #"""
import hashlib, io, sys, tarfile
case, out = sys.argv[1], sys.argv[2]
# Ends with (size, 0), as GNU tar and libarchive end a map when the file ends in a hole:
# GNU tar extends the file to the size only so. GNU tar reads each region from a block of
# its own (libarchive reads them back to back): regions of 512 bytes read alike.
size, regions, data = 1 << 20, [(0, 512), (65536, 512), (1 << 20, 0)], b"abcd" + bytes(508) + b"wxyz" + bytes(508)
map_text = None
# Regions of whole 512-byte blocks, so that each case meets the check it is about.
if case == "overlapping": size, regions, data = 4096, [(0, 1024), (512, 1024)], b"a" * 2048
if case == "outOfOrder": size, regions, data = 4096, [(2048, 512), (0, 512)], b"a" * 1024
if case == "pastTheSize": size, regions, data = 4096, [(0, 512), (3584, 1024)], b"a" * 1536
if case == "notWholeBlocks": size, regions, data = 1 << 20, [(0, 4), (65536, 4), (1 << 20, 0)], b"abcdwxyz"
if case == "offsetOverflows": size, regions, data = (1 << 63) - 1, [((1 << 63) - 8, 100)], b"a" * 100
if case == "hugeNumber": map_text = "1\n99999999999999999999999999\n4\n"; data = b"abcd"
if case == "mapLongerThanData": size, regions, data = 4096, [(0, 512), (1024, 512)], b"a" * 512
if case == "tooManyRegions": n = 262145; size, regions, data = 512 * n, [(512 * i, 0) for i in range(n)], b""
if case == "sizeNear2To63": size, regions, data = (1 << 63) - 1, [(0, 512)], b"abcd" + bytes(508)
if case == "negativeSize": size, regions, data = -1, [(0, 512)], b"abcd" + bytes(508)
if case == "notNumbers": map_text = "2\nzero\nfour\n"; data = b"abcd"
if map_text is None:
    map_text = "%d\n" % len(regions) + "".join("%d\n%d\n" % r for r in regions)
body = map_text.encode()
body += b"\0" * (-len(body) % 512) + data
nonempty = [r for r in regions if r[1] > 0]
prefix = ("sparse %d %d\n" % (size, len(nonempty)) + "".join("%d %d\n" % r for r in nonempty)).encode()
kind = "f" if case == "listedAsPlainFile" else "s"
digest = hashlib.sha256(prefix + data).hexdigest()
manifest = ("containerfs-backup 1\nbundle Demo.app\nbundle-manifest-sha256 -\nd Documents\n%s %s Documents/s.bin\n" % (kind, digest)).encode()
with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as archive:
    info = tarfile.TarInfo(".containerfs-backup/manifest")
    info.size = len(manifest)
    archive.addfile(info, io.BytesIO(manifest))
    info = tarfile.TarInfo("Documents")
    info.type, info.mode = tarfile.DIRTYPE, 0o755
    archive.addfile(info)
    info = tarfile.TarInfo("Documents/GNUSparseFile.0/s.bin")
    info.size, info.mode, info.mtime = len(body), 0o644, 1600000000
    info.pax_headers = {"GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.name": "Documents/s.bin", "GNU.sparse.realsize": str(size)}
    archive.addfile(info, io.BytesIO(body))
"""#
