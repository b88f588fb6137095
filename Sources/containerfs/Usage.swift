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
            Per area — the bundle, Documents (without the Inbox), the Inbox, Library (without \
            Caches), Library/Caches and tmp — the bytes and number of regular files, as a phone's \
            storage view shows them, with a bar per area on a terminal; a group container's areas \
            are its root (what its members write there, without Library; backed up), Library and \
            Library/Caches. The bundle of an \
            offloaded app (`containerfs offload`) is marked offloaded. Then the device as the app \
            sees it: its capacity (see 'containerfs capacity'; none: the store's file system), the \
            bytes used (in blocks, as the capacity counts them), free, and available for important \
            usage (free plus the purgeable cache and tmp bytes, as iOS reports it). --json also \
            gives the bytes of the data (all but the bundle) per protection class \
            (bytesByProtection).
            """)

    @Argument(help: "Container stores.")
    var stores: [String] = []

    @Flag(help: "Print a JSON array, one object per store.")
    var json = false

    func run() throws {
        try reportingErrors {
            if stores.isEmpty { throw UserError.usage("name at least one container store") }
            // A device folder stands for every container in it.
            let opened = try Device.stores(stores, withGroups: false)
            var output = BufferedOutput()
            if json { output.write("[") }
            for (number, store) in opened.enumerated() {
                let usage = StorageUsage.measure(store)
                let device = DeviceSpace.measure(store, usage)
                if json {
                    if number > 0 { output.write(",") }
                    printJSON(store, usage, device, &output)
                } else {
                    if number > 0 { output.write("\n") }
                    printTable(store, usage, bars: isatty(1) == 1, &output)
                    printDevice(device, &output)
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
            let mark = area.offloaded ? "offloaded" : area.backedUp ? "backed up" : area.purgeable ? "purgeable" : "reinstalled"
            var line = "  " + pad(area.name, 10) + pad(humanBytes(area.bytes), 10, right: true)
                + pad(counted(area.files, "file"), 14, right: true) + "  " + pad(mark, 11)
            if bars {
                let width = area.bytes == 0 ? 0 : max(1, Int(Double(area.bytes) / Double(largest) * 30))
                line += "  " + String(repeating: "█", count: width)
            }
            while line.hasSuffix(" ") { line.removeLast() }
            output.write(line + "\n")
        }
        output.write("  " + pad("total", 10) + pad(humanBytes(usage.totalBytes), 10, right: true)
            + pad(counted(usage.totalFiles, "file"), 14, right: true) + "\n")
    }

    private func printDevice(_ device: DeviceSpace, _ output: inout BufferedOutput) {
        output.write("  capacity  " + (device.capacity.map(humanBytes) ?? "none") + "\n")
        output.write("  used      \(humanBytes(device.used))\n")
        output.write("  free      \(humanBytes(device.free))\n")
        output.write("  available for important usage \(humanBytes(device.availableForImportantUsage))\n")
    }

    private func printJSON(_ store: Store, _ usage: StorageUsage, _ device: DeviceSpace, _ output: inout BufferedOutput) {
        let areas = usage.areas.map {
            "{\"area\":\(jsonString($0.name)),\"path\":\(jsonString($0.path)),\"bytes\":\($0.bytes),\"files\":\($0.files),\"backedUp\":\($0.backedUp),\"purgeable\":\($0.purgeable),\"offloaded\":\($0.offloaded)}"
        }
        let classes = ProtectionClass.allCases.map { "\(jsonString($0.rawValue)):\(usage.bytesByClass[$0] ?? 0)" }
        output.write("{\"store\":\(jsonString(store.path)),\"areas\":[\(areas.joined(separator: ","))],\"totalBytes\":\(usage.totalBytes),\"totalFiles\":\(usage.totalFiles),"
            + "\"capacity\":\(device.capacity.map(String.init) ?? "null"),\"used\":\(device.used),\"free\":\(device.free),\"availableForImportantUsage\":\(device.availableForImportantUsage),"
            + "\"bytesByProtection\":{\(classes.joined(separator: ","))}}")
    }

    private func pad(_ text: String, _ width: Int, right: Bool = false) -> String {
        let fill = String(repeating: " ", count: max(0, width - text.count))
        return right ? fill + text : text + fill
    }
}
