import ContainerStore
import Foundation
import Glibc
import Testing

/// `mount-helper/mount.containerfs`: `mount -t containerfs`, fstab lines and `umount` (SPEC §8).
///
/// mount(8) runs helpers from /sbin only, so the suite links /sbin/mount.containerfs and
/// /sbin/mount.fuse.containerfs to the repository's helper for its duration (putting back
/// whatever was there), and tells the helper where the built binary is with CONTAINERFS.
@Suite("MountHelper", .serialized)
struct MountHelperTests {
    /// The helper in this repository.
    static let helper = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("mount-helper/mount.containerfs").path

    /// Runs `body` with the helper installed in /sbin under both names.
    private func withHelperInstalled(_ body: () throws -> Void) throws {
        let names = ["/sbin/mount.containerfs", "/sbin/mount.fuse.containerfs"]
        for name in names {
            if (try? FileManager.default.attributesOfItem(atPath: name)) != nil {
                try FileManager.default.moveItem(atPath: name, toPath: name + ".containerfs-test-saved")
            }
            try FileManager.default.createSymbolicLink(atPath: name, withDestinationPath: Self.helper)
        }
        defer {
            for name in names {
                unlink(name)
                rename(name + ".containerfs-test-saved", name)
            }
        }
        try body()
    }

    /// `mount`/`umount` with CONTAINERFS naming the built binary, as root runs them.
    private func system(_ arguments: [String]) throws -> ProgramResult {
        var environment = ProcessInfo.processInfo.environment
        environment["CONTAINERFS"] = containerfsBinary
        return try runProgram(arguments, environment: environment)
    }

    /// Waits until the store's daemon has exited after an unmount.
    private func daemonExits(_ container: MountedContainer) throws -> Bool {
        MountLock.waitUntilFree(try Store.open(container.store), seconds: 10)
    }

    @Test(arguments: ["containerfs", "fuse.containerfs"])
    func mountTypeMountsAndUmountUnmounts(type: String) throws {
        let container = try MountedContainer()
        try withHelperInstalled {
            let mounted = try system(["mount", "-t", type, container.store, container.mountpoint])
            #expect(mounted.status == 0, "\(mounted)")
            #expect(isMountPoint(container.mountpoint))
            #expect(containerMounts(of: container.store) == [container.mountpoint])
            #expect(try FileManager.default.contentsOfDirectory(atPath: container.mountpoint).sorted() == ["Demo.app", "Documents", "Library", "tmp"])
            #expect(errnoOf { open(container.mounted("Demo.app/Info.plist"), O_WRONLY) } == EPERM)

            let unmounted = try system(["umount", container.mountpoint])
            #expect(unmounted.status == 0, "\(unmounted)")
            #expect(!isMountPoint(container.mountpoint))
            #expect(containerMounts(of: container.store) == [])
            #expect(try daemonExits(container))
        }
    }

    @Test func optionsAreTranslatedAndFstabWordsDropped() throws {
        let container = try MountedContainer()
        try withHelperInstalled {
            let mounted = try system(["mount", "-t", "containerfs", "-o", "defaults,noatime,nofail,_netdev,x-systemd.automount,comment=notes,timeout=5", container.store, container.mountpoint])
            #expect(mounted.status == 0, "\(mounted)")
            #expect(isMountPoint(container.mountpoint))
            let unmounted = try system(["umount", container.mountpoint])
            #expect(unmounted.status == 0, "\(unmounted)")
            #expect(try daemonExits(container))
        }
    }

    @Test func anFstabLineMountsByItsMountPoint() throws {
        let container = try MountedContainer()
        let fstab = container.base + "/fstab"
        try Data("# a test fstab\n\(container.store) \(container.mountpoint) containerfs defaults,noauto,nofail,x-systemd.automount 0 0\n".utf8)
            .write(to: URL(fileURLWithPath: fstab))
        try withHelperInstalled {
            let mounted = try system(["mount", "--fstab", fstab, container.mountpoint])
            #expect(mounted.status == 0, "\(mounted)")
            #expect(containerMounts(of: container.store) == [container.mountpoint])
            let unmounted = try system(["umount", container.mountpoint])
            #expect(unmounted.status == 0, "\(unmounted)")
            #expect(try daemonExits(container))
        }
    }

    @Test func errorsOfContainerfsReachMount() throws {
        let container = try MountedContainer()
        try withHelperInstalled {
            let missing = try system(["mount", "-t", "containerfs", container.base + "/no-store", container.mountpoint])
            #expect(missing.status != 0)
            #expect(missing.stderr.contains("containerfs: no store at \(container.base)/no-store"), "\(missing)")
            let readOnly = try system(["mount", "-t", "containerfs", "-o", "ro", container.store, container.mountpoint])
            #expect(readOnly.status != 0)
            #expect(readOnly.stderr.contains("mount option 'ro' is not supported"), "\(readOnly)")
            #expect(!isMountPoint(container.mountpoint))
        }
    }

    @Test func helperWithoutContainerfsSaysSo() throws {
        let result = try runProgram(["/bin/sh", Self.helper, "/store", "/mnt"], environment: ["PATH": "/nonexistent", "CONTAINERFS": "/nonexistent/containerfs"])
        #expect(result.status == 1)
        #expect(result.stderr == "mount.containerfs: containerfs is not installed (/nonexistent/containerfs): run 'make install', or set CONTAINERFS to its path\n")
        let usage = try runProgram(["sh", Self.helper, "/store"])
        #expect(usage.status == 1)
        #expect(usage.stderr.hasPrefix("usage: mount.containerfs STORE DIR"))
    }
}
