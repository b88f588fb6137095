import ArgumentParser
import ContainerDurability
import ContainerStore
import Foundation

struct PowerCut: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "power-cut",
        abstract: "Cut the power of a live power-loss mount: drop everything that was never made durable.",
        discussion: """
            The container must be mounted with -o power-loss, under which its daemon keeps track \
            of what is durable: a file's data as of its last fsync, fdatasync or O_SYNC/O_DSYNC \
            write; a folder's names as of its last fsync. The store becomes what the disk would \
            hold had the power failed at this instant, and one line says what was dropped (files, \
            bytes, names). From then on the mount answers every change with EIO, as a disk \
            without power: unmount it and mount it again to go on. The model and what it leaves \
            out are in docs/power-loss.md.
            """)

    @Argument(help: "The container's store.")
    var store: String

    @Flag(help: "Print the report as JSON.")
    var json = false

    func run() throws {
        try reportingErrors {
            let opened = try Store.open(store, changing: false)
            let answer = try ControlChannel.powerCut(opened)
            guard let report = PowerCutReport(wire: answer) else {
                throw UserError("the daemon of \(store) sent a report that cannot be read: \(answer)")
            }
            if json {
                let encoder = JSONEncoder()
                encoder.outputFormatting = [.sortedKeys]
                let data = (try? encoder.encode(report)) ?? Data()
                FileHandleOutput.standardOutput.write(String(decoding: data, as: UTF8.self) + "\n")
            } else {
                FileHandleOutput.standardOutput.write("power cut: \(report.summary)\n")
            }
        }
    }
}
