#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import ContainerPolicy
import PolicySpec
import Testing

/// What a program does, by path, and what it must be told: classification and decision
/// together, as the filesystem uses them.
struct Scenario: Sendable, CustomTestStringConvertible {
    let title: String
    let operation: @Sendable (Location, Location) -> Operation
    let paths: (String, String)
    let expected: Expected
    var testDescription: String { "\(title): \(paths.0)\(paths.1.isEmpty ? "" : " → \(paths.1)")" }

    init(
        _ title: String, _ path: String, _ expected: Expected,
        _ operation: @escaping @Sendable (Location) -> Operation
    ) {
        self.title = title
        self.paths = (path, "")
        self.expected = expected
        self.operation = { first, _ in operation(first) }
    }

    init(
        _ title: String, _ source: String, _ target: String, _ expected: Expected,
        _ operation: @escaping @Sendable (Location, Location) -> Operation
    ) {
        self.title = title
        self.paths = (source, target)
        self.expected = expected
        self.operation = operation
    }
}

/// The two-path operations, for the scenario table.
let renaming: @Sendable (Location, Location) -> Operation = { .rename(from: $0, to: $1, exchange: false) }
let exchanging: @Sendable (Location, Location) -> Operation = { .rename(from: $0, to: $1, exchange: true) }
let linking: @Sendable (Location, Location) -> Operation = { .link(from: $0, to: $1) }

let scenarios: [Scenario] = [
    .init("read the bundle", "Demo.app/Info.plist", .ok, Operation.read),
    .init("write the bundle", "Demo.app/Info.plist", .bundle, Operation.changeContent),
    .init("chmod the bundle", "Demo.app", .bundle, Operation.changeMetadata),
    .init("add to the bundle", "Demo.app/extra", .bundle, Operation.create),
    .init("rm -r the bundle", "Demo.app/Info.plist", .bundle, Operation.delete),
    .init("mkdir at the root", "Music", .fixed, Operation.create),
    .init("rmdir Documents", "Documents", .fixed, Operation.delete),
    .init("chmod Library/Caches", "Library/Caches", .fixed, Operation.changeMetadata),
    .init("touch the root", "", .fixed, Operation.changeMetadata),
    .init("setfattr tmp", "tmp", .fixed, Operation.changeMetadata),
    .init("save a document", "Documents/notes.txt", .ok, Operation.create),
    .init("write preferences", "Library/Preferences/demo.plist", .ok, Operation.changeContent),
    .init("exclude from backup", "Library/Application Support/db", .ok, Operation.changeMetadata),
    .init("fill a cache", "Library/Caches/img/1.png", .ok, Operation.create),
    .init("remove a temporary file", "tmp/scratch", .ok, Operation.delete),
    .init("open a handed-over file", "Documents/Inbox/report.pdf", .ok, Operation.read),
    .init("edit it in place", "Documents/Inbox/report.pdf", .inbox, Operation.changeContent),
    .init("drop a file in the inbox", "Documents/Inbox/new.pdf", .inbox, Operation.create),
    .init("chmod it", "Documents/Inbox/report.pdf", .inbox, Operation.changeMetadata),
    .init("delete it", "Documents/Inbox/report.pdf", .ok, Operation.delete),
    .init("delete a folder in it", "Documents/Inbox/folder", .ok, Operation.delete),
    .init("look up the state folder", ".containerfs", .absent, Operation.read),
    .init("read the audit log", ".containerfs/audit.log", .absent, Operation.read),
    .init("make a state folder", ".containerfs", .reserved, Operation.create),
    .init("remove the state folder", ".containerfs", .absent, Operation.delete),
    .init("look up the cache tag", "Library/Caches/CACHEDIR.TAG", .absent, Operation.read),
    .init("make a cache tag", "tmp/CACHEDIR.TAG", .reserved, Operation.create),
    .init("remove the cache tag", "tmp/CACHEDIR.TAG", .absent, Operation.delete),
    .init("make a cache tag deeper down", "Library/Caches/x/CACHEDIR.TAG", .ok, Operation.create),

    .init("move a handed-over file out", "Documents/Inbox/report.pdf", "Documents/report.pdf", .ok, renaming),
    .init("move it to the cache", "Documents/Inbox/report.pdf", "Library/Caches/report.pdf", .ok, renaming),
    .init("move a folder out", "Documents/Inbox/folder", "tmp/folder", .ok, renaming),
    .init("rename within the inbox", "Documents/Inbox/a.pdf", "Documents/Inbox/b.pdf", .inbox, renaming),
    .init("move a file into the inbox", "Documents/a.pdf", "Documents/Inbox/a.pdf", .inbox, renaming),
    .init("swap with an inbox file", "Documents/a.pdf", "Documents/Inbox/a.pdf", .inbox, exchanging),
    .init("move an inbox file into the bundle", "Documents/Inbox/a.pdf", "Demo.app/a.pdf", .bundle, renaming),
    .init("move the inbox file to the root", "Documents/Inbox/a.pdf", "a.pdf", .fixed, renaming),
    .init("replace Documents", "tmp/d", "Documents", .fixed, renaming),
    .init("rename Library", "Library", "Library2", .fixed, renaming),
    .init("move the inbox away", "Documents/Inbox", "Documents/Old", .fixed, renaming),
    .init("move a file out of the bundle", "Demo.app/Info.plist", "tmp/Info.plist", .bundle, renaming),
    .init("atomic save", "Documents/.notes.tmp", "Documents/notes.txt", .ok, renaming),
    .init("swap two documents", "Documents/a", "Library/b", .ok, exchanging),
    .init("rename onto the cache tag", "tmp/x", "tmp/CACHEDIR.TAG", .reserved, renaming),
    .init("rename the cache tag", "tmp/CACHEDIR.TAG", "tmp/x", .absent, renaming),
    .init("hard-link a bundle file", "Demo.app/Info.plist", "Documents/Info.plist", .link, linking),
    .init("hard-link an inbox file", "Documents/Inbox/a.pdf", "Documents/a.pdf", .eacces, linking),
    .init("hard-link a document", "Documents/a", "tmp/a", .ok, linking),
    .init("hard-link into the inbox", "Documents/a", "Documents/Inbox/a", .inbox, linking),
    .init("hard-link into the bundle", "Documents/a", "Demo.app/a", .bundle, linking),
]

@Suite("Scenarios by path")
struct ScenarioTests {
    @Test("What a program is told", arguments: scenarios)
    func scenario(_ scenario: Scenario) {
        let source = layout.location(of: path(scenario.paths.0))
        let target = layout.location(of: path(scenario.paths.1))
        check(Policy.decide(scenario.operation(source, target)), scenario.expected, scenario.testDescription)
    }
}
