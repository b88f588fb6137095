import ArgumentParser
import ContainerStore
import Foundation

struct Audit: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show the operations the container's rules denied.",
        discussion: """
            One line per denial: time, process, user, operation, path(s) with their area, errno and the rule. \
            Control characters in names show as \\xNN (a newline as \\x0a), so a name cannot forge a line \
            or reach the terminal; --json escapes them as JSON does.
            """)

    @Argument(help: "The container's store.")
    var store: String

    @Flag(help: "One JSON object per line.")
    var json = false

    @Flag(help: "Keep printing denials as they happen.")
    var follow = false

    func run() throws {
        try reportingErrors {
            let opened = try Store.open(store, changing: false)
            var shown = 0
            while true {
                let records = AuditLog.read(stateFD: opened.stateFD)
                // The log rotates: when it shrank, start over from what is there now.
                if records.count < shown { shown = 0 }
                for record in records.dropFirst(shown) { FileHandleOutput.standardOutput.write(format(record) + "\n") }
                shown = records.count
                guard follow else { return }
                usleep(200_000)
            }
        }
    }

    private func format(_ record: AuditRecord) -> String {
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            return String(decoding: (try? encoder.encode(record)) ?? Data(), as: UTF8.self)
        }
        return record.textLine
    }
}
