import ArgumentParser
import ContainerPolicy
import ContainerPurge
import ContainerStore
import Glibc

struct UsageCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "usage",
        abstract: "Show the space a container uses per area, and what is backed up or purgeable.",
        discussion: """
            Per area — the bundle, Documents (without the Inbox), the Inbox, Library (without
            Caches), Library/Caches and tmp — the bytes and number of regular files, as a phone's
            storage view shows them, with a bar per area on a terminal. --json also gives the
            bytes of the data (all but the bundle) per protection class (bytesByProtection).
            """)

    @Argument(help: "Container stores.")
    var stores: [String] = []

    @Flag(help: "Print a JSON array, one object per store.")
    var json = false

    func run() throws {
        try reportingErrors {
            if stores.isEmpty { throw UserError.usage("name at least one container store") }
            var opened: [Store] = []
            for path in stores { opened.append(try Store.open(path)) }
            var output = BufferedOutput()
            if json { output.write("[") }
            for (number, store) in opened.enumerated() {
                let usage = StorageUsage.measure(store)
                if json {
                    if number > 0 { output.write(",") }
                    printJSON(store, usage, &output)
                } else {
                    if number > 0 { output.write("\n") }
                    printTable(store, usage, bars: isatty(1) == 1, &output)
                }
            }
            if json { output.write("]\n") }
            output.flush()
        }
    }

    private func printTable(_ store: Store, _ usage: StorageUsage, bars: Bool, _ output: inout BufferedOutput) {
        output.write("\(store.path)\n")
        let largest = max(1, usage.areas.map(\.bytes).max() ?? 1)
        for area in usage.areas {
            let mark = area.backedUp ? "backed up" : area.purgeable ? "purgeable" : "reinstalled"
            var line = "  " + pad(area.name, 10) + pad(humanBytes(area.bytes), 10, right: true)
                + pad("\(area.files) file\(area.files == 1 ? "" : "s")", 14, right: true) + "  " + pad(mark, 11)
            if bars {
                let width = area.bytes == 0 ? 0 : max(1, Int(Double(area.bytes) / Double(largest) * 30))
                line += "  " + String(repeating: "█", count: width)
            }
            while line.hasSuffix(" ") { line.removeLast() }
            output.write(line + "\n")
        }
        output.write("  " + pad("total", 10) + pad(humanBytes(usage.totalBytes), 10, right: true)
            + pad("\(usage.totalFiles) file\(usage.totalFiles == 1 ? "" : "s")", 14, right: true) + "\n")
    }

    private func printJSON(_ store: Store, _ usage: StorageUsage, _ output: inout BufferedOutput) {
        let areas = usage.areas.map {
            "{\"area\":\(jsonString($0.name)),\"path\":\(jsonString($0.path)),\"bytes\":\($0.bytes),\"files\":\($0.files),\"backedUp\":\($0.backedUp),\"purgeable\":\($0.purgeable)}"
        }
        let classes = ProtectionClass.allCases.map { "\(jsonString($0.rawValue)):\(usage.bytesByClass[$0] ?? 0)" }
        output.write("{\"store\":\(jsonString(store.path)),\"areas\":[\(areas.joined(separator: ","))],\"totalBytes\":\(usage.totalBytes),\"totalFiles\":\(usage.totalFiles),"
            + "\"bytesByProtection\":{\(classes.joined(separator: ","))}}")
    }

    private func pad(_ text: String, _ width: Int, right: Bool = false) -> String {
        let fill = String(repeating: " ", count: max(0, width - text.count))
        return right ? fill + text : text + fill
    }
}
