import ArgumentParser
import ContainerStore
import Foundation
import Glibc

struct Unmount: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Unmount a container; also clears a mount whose daemon died.",
        discussion: "Waits until the daemon has exited, so the store can be mounted again at once.")

    @Argument(help: "The mount point.")
    var mountpoint: String

    @Flag(name: .customShort("z"), help: "Detach now even if busy; the mount goes when the last user leaves.")
    var lazy = false

    func run() throws {
        try reportingErrors { try Self.unmount(mountpoint, lazy: lazy) }
    }

    /// Unmounts the container at `mountpoint` and waits for its daemon (unless `lazy`).
    static func unmount(_ mountpoint: String, lazy: Bool) throws(UserError) {
        guard let entry = MountEntry.at(mountpoint), entry.isContainer else {
            throw UserError("\(mountpoint) is not a containerfs mount: nothing to unmount (see 'mount -t fuse.containerfs')")
        }
        let result = try fusermount(lazy ? ["-uz", entry.mountpoint] : ["-u", entry.mountpoint])
        guard result.status == 0 else {
            if result.output.contains("busy") {
                throw UserError("\(mountpoint) is busy: a program still uses it ('fuser -vm \(mountpoint)' lists them); close it, or use -z to detach lazily")
            }
            throw UserError("cannot unmount \(mountpoint): \(result.output.trimmingCharacters(in: .whitespacesAndNewlines))")
        }
        // The daemon takes a moment to exit after the kernel lets go; wait for its lock, but
        // only if it is this mount's daemon: a dead mount's store may be mounted elsewhere now.
        guard !lazy, let store = try? Store.open(entry.source),
              let holder = MountLock.holder(store), holder.mountpoint == entry.mountpoint else { return }
        if !MountLock.waitUntilFree(store, seconds: 10) {
            throw UserError("unmounted \(mountpoint), but its daemon (pid \(holder.pid)) has not exited after 10 s: kill it")
        }
    }

    private static func fusermount(_ arguments: [String]) throws(UserError) -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/fusermount3")
        process.arguments = arguments
        // It needs no working folder, and the caller's may be one this user cannot enter
        // (after `sudo -u` in root's home), where Process could not start it.
        process.currentDirectoryURL = URL(fileURLWithPath: "/")
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        do { try process.run() } catch {
            if access("/bin/fusermount3", X_OK) != 0 { throw UserError("fusermount3 is not installed: apt-get install fuse3") }
            throw UserError("cannot run /bin/fusermount3: \(error.localizedDescription)")
        }
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return (process.terminationStatus, output)
    }
}
