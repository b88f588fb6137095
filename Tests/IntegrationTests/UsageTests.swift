import Foundation
import Glibc
import Testing

@Suite("Usage", .serialized)
struct UsageTests {
    @Test func usageShowsEachAreaWithItsBytesAndFiles() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        try container.mount()
        try Purging.write(container.mounted("Documents/a"), size: 1000)
        try Purging.write(container.mounted("Documents/sub/b"), size: 24)
        try Purging.write(container.mounted("Library/Preferences/p"), size: 300)
        try Purging.write(container.mounted("Library/Caches/c"), size: 4096)
        try Purging.write(container.mounted("tmp/t"), size: 50)
        let source = container.base + "/delivered.txt"
        try Data(repeating: 0x41, count: 70).write(to: URL(fileURLWithPath: source))
        #expect(try containerfs(["deliver", container.store, source]).status == 0)

        let result = try containerfs(["usage", container.store, "--json"])
        #expect(result.status == 0, "\(result)")
        let stores = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [[String: Any]]
        let areas = try #require(stores?.first?["areas"] as? [[String: Any]])
        let rows = areas.map { ($0["area"] as? String ?? "?", $0["bytes"] as? Int ?? -1, $0["files"] as? Int ?? -1) }
        let bundleBytes = "<plist>demo</plist>\n".utf8.count + "resource\n".utf8.count
        #expect(rows.map(\.0) == ["bundle", "Documents", "Inbox", "Library", "Caches", "tmp"])
        #expect(rows.map(\.1) == [bundleBytes, 1024, 70, 300, 4096, 50])
        #expect(rows.map(\.2) == [2, 2, 1, 1, 1, 1])
        #expect(areas.map { $0["purgeable"] as? Bool } == [false, false, false, false, true, true])
        #expect(areas.map { $0["backedUp"] as? Bool } == [false, true, true, true, false, false])

        // Not a terminal: plain lines, no bars.
        let plain = try containerfs(["usage", container.store])
        #expect(plain.status == 0)
        #expect(plain.stdout.contains("Caches") && plain.stdout.contains("purgeable") && plain.stdout.contains("backed up"))
        #expect(!plain.stdout.contains("█"))
        // On a terminal, a bar per area that has bytes.
        let terminal = try runProgram(["script", "-qec", "\(containerfsBinary) usage \(container.store)", "/dev/null"])
        #expect(terminal.stdout.components(separatedBy: "█").count > 1, "\(terminal)")
    }

    @Test func aMissingStoreIsOneLine() throws {
        let result = try containerfs(["usage", "/nonexistent/store"])
        #expect(result.status == 1)
        #expect(result.stderr.contains("no store at /nonexistent/store"))
        #expect(result.stderr.split(separator: "\n").count == 1)
    }
}
