import Foundation
import Glibc
import Testing

/// `containerfs audit` shows denials as text that a name cannot forge or use to reach the
/// operator's terminal.
@Suite("Audit view")
struct AuditViewTests {
    /// A denied `mkdir` of a name holding a newline, a forged record and an escape
    /// sequence shows in `containerfs audit` as one line, with the controls escaped.
    @Test func theAuditTextViewEscapesControlCharactersInNames() throws {
        try withMountedContainer { container in
            let name = "x\n2026-01-01T00:00:00.000Z  sh[1] uid 0  unlink secrets.txt [data]  EPERM (forged)\u{1B}[31m"
            #expect(errnoOf { mkdir(container.mounted("Demo.app/" + name), 0o755) } == EPERM)
            #expect(!FileManager.default.fileExists(atPath: container.stored("Demo.app/" + name)))
            let records = try container.waitForAudit(count: 1)
            try #require(records.count == 1, "\(records)")
            #expect(records.first?["paths"] as? [String] == ["Demo.app/" + name], "--json keeps the name exactly")
            let shown = try containerfs(["audit", container.store])
            #expect(shown.status == 0, "\(shown)")
            #expect(shown.stdout.split(separator: "\n").count == 1, "one line: \(shown.stdout)")
            #expect(!shown.stdout.utf8.contains(0x1B), "no escape character reaches the terminal")
            #expect(shown.stdout.contains(" mkdir Demo.app/x\\x0a2026-01-01T00:00:00.000Z  sh[1] uid 0  unlink secrets.txt [data]  EPERM (forged)\\x1b[31m [bundle]  EPERM ("), "\(shown.stdout)")
        }
    }
}
