import ContainerPolicy
import Foundation
import Glibc
import Testing

@testable import ContainerStore

/// What a copied-in mode may be, and the working names beside a target: the pure parts of
/// docs/backup.md's "Modes" and "Working names".
@Suite("Hand-over rules")
struct HandOverRuleTests {
    @Test func filesKeepTheirPermissionsButNoSetIDOrStickyBit() {
        #expect(HandedOverMode.file(0o4755) == 0o755)
        #expect(HandedOverMode.file(0o6755) == 0o755)
        #expect(HandedOverMode.file(0o7777) == 0o777)
        #expect(HandedOverMode.file(0o640) == 0o640)
        #expect(HandedOverMode.file(S_IFREG | 0o2711) == 0o711, "the type bits are not part of the mode set")
    }

    @Test func foldersLoseSetIDStickyAndWriteForOthers() {
        #expect(HandedOverMode.folder(0o7777) == 0o775)
        #expect(HandedOverMode.folder(0o1777) == 0o775)
        #expect(HandedOverMode.folder(0o2770) == 0o770)
        #expect(HandedOverMode.folder(0o755) == 0o755)
        #expect(HandedOverMode.folder(0o700) == 0o700)
    }

    @Test func workingNamesAreHiddenRandomAndFitAName() {
        let names = (0..<200).map { _ in StagingName.random(beside: Array("notes.tar".utf8), "partial") }
        #expect(Set(names).count == names.count, "no name drawn twice")
        for name in names {
            let text = String(decoding: name, as: UTF8.self)
            #expect(text.hasPrefix(".notes.tar.partial-"), "\(text)")
            #expect(name.count == ".notes.tar.partial-".count + 12)
            #expect(name.suffix(12).allSatisfy { StagingName.alphabet.contains($0) })
        }
        let long = StagingName.random(beside: [UInt8](repeating: 0xFF, count: 255), "restoring")
        #expect(long.count <= Int(NAME_MAX))
    }

    @Test func aTakenWorkingNameIsNeverUsedAgain() throws {
        var template = Array("/tmp/containerfs-staging-XXXXXX".utf8CString)
        let folder = String(cString: try #require(mkdtemp(&template)))
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let fd = open(folder, O_RDONLY | O_DIRECTORY)
        defer { close(fd) }
        var attempts: [[UInt8]] = []
        // The first two names drawn are taken: the third, a new one, is made.
        let made = try StagingName.create(beside: Array("store".utf8), "creating") { name in
            attempts.append(Array(String(cString: name).utf8))
            if attempts.count < 3 {
                errno = EEXIST
                return -1
            }
            return mkdirat(fd, name, 0o700)
        }
        #expect(attempts.count == 3 && Set(attempts).count == 3)
        #expect(made.name == attempts[2] && made.result == 0)
        #expect(FileManager.default.fileExists(atPath: folder + "/" + String(decoding: made.name, as: UTF8.self)))
        // Any other failure is the caller's.
        #expect(throws: Errno(EACCES)) {
            try StagingName.create(beside: [], "x") { _ in
                errno = EACCES
                return -1
            }
        }
    }
}
