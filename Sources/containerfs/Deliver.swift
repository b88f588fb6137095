import ArgumentParser
import ContainerPolicy
import ContainerStore

struct Deliver: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Hand files over to a container's Documents/Inbox, as another app or Mail does.",
        discussion: """
            Each file or folder is copied whole and appears in the Inbox in one step (the app never \
            sees a partial file), never overwriting: a taken name gets a numbered suffix \
            (report.pdf, report-1.pdf; a name too long to take its number is shortened before it). Names are bytes: a name that is not UTF-8 is delivered as it is. Works whether the container is mounted or not; a mounted \
            container shows the files at once. A container with a capacity refuses a delivery that \
            would not fit (see 'containerfs capacity'), and so does a container of a device folder \
            with a capacity when the device has less free, mounted or not: one line says how much \
            the files take in blocks and how much is free, and nothing reaches the Inbox (exit 1). \
            See docs/capacity.md, "Installing on a full device". The copies belong to the container's owner, as what its app makes (root delivering into another user's container copies in only what that user may read), and \
            keep no set-user-ID, set-group-ID or sticky bit; no folder is writable by others. A file named that is missing, or neither a file nor a folder, is refused before any is delivered.

            A lock that another process holds (a stopped update or delivery) is waited for at most 10 s, then the command gives up naming that process, exit 75 (see 'containerfs --help').
            """)

    @Argument(help: "The container's store.")
    var store: String

    @Argument(help: "Files or folders to deliver.")
    var files: [String]

    @Option(name: .customLong("as"), help: "The name to deliver a single file under.")
    var name: String?

    func validate() throws {
        if files.isEmpty { throw ValidationError("name at least one file to deliver") }
        if name != nil, files.count > 1 { throw ValidationError("--as names one file: deliver the others separately") }
    }

    func run() throws {
        try reportingErrors {
            let opened = try Store.open(store)
            try opened.requireApp(for: "deliver")
            // Paths and names are bytes, as given (a String replaces what is not UTF-8).
            let sources = rawArguments(files)
            try Delivery.checkSources(sources)
            try Delivery.checkFits(sources, into: opened, device: DeviceInstall(storePaths: [store]))
            for (file, source) in zip(files, sources) {
                // A device with a capacity refuses what does not fit; what fits goes to its
                // live count (docs/capacity.md, "Installing on a full device"), one file at
                // a time: the device's lock is held from the measure to the rename only.
                let device = DeviceInstall(storePaths: [store])
                defer { device.finish() }
                let wanted = name.map(rawArgument) ?? Array(source.split(separator: UInt8(ascii: "/")).last ?? [])
                let used = try Delivery.deliver(source, as: wanted, into: opened, device: device)
                let path = StandardDirectory.inbox.path.appending(used)
                // A mounted container's daemon counts the file (a recount) before the
                // device's reservation of it is given back.
                try ControlChannel.invalidate(opened, [path])
                FileHandleOutput.standardOutput.write("delivered \(file) as \(path)\n")
            }
        }
    }
}
