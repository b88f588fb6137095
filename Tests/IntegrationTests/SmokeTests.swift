import Foundation
import Glibc
import Testing

/// The basic promise: a container mounts, shows its layout, and its rules bite.
@Suite("Smoke")
struct SmokeTests {
    @Test func mountShowsTheLayoutAndHidesTheStateFolder() throws {
        try withMountedContainer { container in
            let names = try FileManager.default.contentsOfDirectory(atPath: container.mountpoint).sorted()
            #expect(names == ["Demo.app", "Documents", "Library", "tmp"])
            #expect(errnoOf { access(container.mounted(".containerfs"), F_OK) } == ENOENT)
            let caches = try FileManager.default.contentsOfDirectory(atPath: container.mounted("Library/Caches"))
            #expect(caches.isEmpty, "CACHEDIR.TAG must be hidden")
        }
    }

    @Test func bundleWriteIsDeniedWithEPERMAndAudited() throws {
        try withMountedContainer { container in
            let before = try treeDigest(container.stored("Demo.app"))
            #expect(errnoOf { open(container.mounted("Demo.app/Info.plist"), O_WRONLY) } == EPERM)
            let records = try container.waitForAudit(count: 1)
            #expect(records.count == 1)
            #expect(records.first?["operation"] as? String == "open")
            #expect(records.first?["errno"] as? String == "EPERM")
            #expect(records.first?["paths"] as? [String] == ["Demo.app/Info.plist"])
            #expect(try treeDigest(container.stored("Demo.app")) == before)
        }
    }
}
