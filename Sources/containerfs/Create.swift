import ArgumentParser
import ContainerStore

struct Create: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Make a container: the standard folders and a copy of an app bundle.",
        discussion: "STORE must not exist, or be an empty folder. Nothing is left behind on failure.")

    @Argument(help: "The folder to make the container in.")
    var store: String

    @Option(help: "The app bundle to install: a folder named NAME.app.")
    var bundle: String

    func run() throws {
        try reportingErrors {
            let created = try Store.create(at: store, bundle: bundle)
            FileHandleOutput.standardOutput.write("created container \(store) with bundle \(String(decoding: created.layout.bundleName, as: UTF8.self))\n")
        }
    }
}
