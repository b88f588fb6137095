import ArgumentParser
import ContainerPurge
import ContainerStore

struct CapacityCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "capacity",
        abstract: "Give a container a capacity (a simulated device size), change it, or remove it.",
        discussion: """
            With a capacity, everything in the container counts against it (bundle and data, in \
            blocks; not the state folder): a write past it fails with ENOSPC as on a full disk, and \
            df inside the container shows it. On a mounted container the change takes effect at the \
            next write. Shrinking below what is used deletes nothing: growth fails until space is \
            freed. Without SIZE, prints the capacity and the space used. See docs/capacity.md.

            Examples: 'containerfs capacity ~/C 8M'; 'containerfs capacity ~/C none'.
            """)

    @Argument(help: "The container store.")
    var store: String

    @Argument(help: ArgumentHelp("Bytes, or a number with K, M, G or T (powers of 1024); 'none' removes the capacity.", valueName: "SIZE|none"))
    var size: String?

    func run() throws {
        try reportingErrors {
            // Parsed before the store is opened: bad input leaves it untouched.
            let capacity = try size.map { (text) throws(UserError) in try parseCapacity(text) }
            let opened = try Store.open(store)
            if let capacity {
                try Capacity.write(opened, capacity.bytes)
                try ControlChannel.capacityChanged(opened)
            }
            let current = Capacity.read(opened)
            let used = Capacity.usedBytes(rootFD: opened.rootFD)
            let shown = current.map { "\($0) bytes (\(humanBytes($0)))" } ?? "none"
            FileHandleOutput.standardOutput.write("capacity of \(store): \(shown); used \(used) bytes (\(humanBytes(used)))\n")
        }
    }
}

/// A capacity the command line asks for.
struct CapacityChoice {
    /// The bytes; nil: no capacity.
    var bytes: Int64?
}

/// A capacity from the command line: SIZE, or `none`.
func parseCapacity(_ text: String) throws(UserError) -> CapacityChoice {
    if text == "none" { return CapacityChoice(bytes: nil) }
    guard let bytes = Quantity.bytes(text), bytes > 0 else {
        throw UserError.usage("bad capacity '\(text)': write bytes or a number with K, M, G or T (powers of 1024), as 8M, or 'none'")
    }
    return CapacityChoice(bytes: bytes)
}
