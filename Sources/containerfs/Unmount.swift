import ArgumentParser
import ContainerRun

struct Unmount: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Unmount a container; also clears a mount whose daemon died.",
        discussion: "Waits until the daemon has exited, so the store can be mounted again at once.")

    @Argument(help: "The mount point.")
    var mountpoint: String

    @Flag(name: .customShort("z"), help: "Detach now even if busy; the mount goes when the last user leaves.")
    var lazy = false

    func run() throws {
        try reportingErrors { try MountDaemon.unmount(mountpoint, lazy: lazy) }
    }
}
