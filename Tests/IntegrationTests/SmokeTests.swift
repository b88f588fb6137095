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

    /// `-o auto_unmount` goes to libfuse, which leaves fusermount3 running beside the daemon
    /// to unmount after it: `mount` still returns once the mount is ready (SPEC §8). It waited
    /// for fusermount3 to close the daemon's readiness pipe, that is forever.
    @Test func mountWithAutoUnmountReturnsWhenReady() throws {
        let container = try MountedContainer()
        let result = try runProgram(["timeout", "-s", "KILL", "60", containerfsBinary, "mount", container.store, container.mountpoint, "-o", "auto_unmount"])
        #expect(result.status == 0, "mount -o auto_unmount did not return (137: killed after 60 s): \(result)")
        #expect(isMountPoint(container.mountpoint))
        #expect(try containerfs(["unmount", container.mountpoint]).status == 0)
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
