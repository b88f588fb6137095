import ContainerPolicy
import Foundation
import Glibc
import Testing

@testable import ContainerStore

/// The records behind `update` and `offload`: the journal that commits a bundle switch and
/// the offload record, read back exactly and refused when they are not what was written.
@Suite("Bundle switch records")
struct BundleSwitchRecordTests {
    @Test func theJournalReadsBackAndRefusesAnythingElse() {
        let journal = BundleSwitch.Journal(working: Array(".bundle.update-AbC123xyz789".utf8), device: 2049, inode: 1_234_567)
        #expect(BundleSwitch.Journal(decoding: journal.encoded()) == journal)
        let bad = [
            "containerfs update 2\n.bundle.update-a\n1 2\n",  // another version
            "containerfs update 1\n../../etc\n1 2\n",  // not a working name
            "containerfs update 1\n.bundle./x\n1 2\n",  // a slash
            "containerfs update 1\n.bundle.update-a\n1\n",  // no inode
            "containerfs update 1\n.bundle.update-a\n-1 2\n",  // not a number
            "containerfs update 1\n",
        ]
        for text in bad { #expect(BundleSwitch.Journal(decoding: Array(text.utf8)) == nil, "\(text)") }
    }

    @Test func theOffloadRecordReadsBackAndAMissingOneMeansInstalled() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("offload-\(getpid())").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let fd = open(folder, O_RDONLY | O_DIRECTORY)
        defer { close(fd) }
        let name = Array("Notes.app".utf8)
        #expect(try OffloadRecord.read(stateFD: fd, bundleName: name) == nil)
        let record = OffloadRecord(bundleName: name, manifestDigest: String(repeating: "ab", count: 32), bytes: 123_456, files: 7)
        try BundleSwitch.writeAtomically(at: fd, OffloadRecord.fileName, record.encoded())
        #expect(try OffloadRecord.read(stateFD: fd, bundleName: name) == record)
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder) == ["offloaded"], "no working file is left")
        try Data("containerfs offloaded 1\nab\nlots\n7\n".utf8).write(to: URL(fileURLWithPath: folder + "/offloaded"))
        #expect(throws: Errno.self) { try OffloadRecord.read(stateFD: fd, bundleName: name) }
    }
}
