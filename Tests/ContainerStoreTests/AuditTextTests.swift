import ContainerPolicy
import Testing

@testable import ContainerStore

/// `containerfs audit`'s text view: nothing in a record reaches the terminal as a control.
@Suite("Audit text view")
struct AuditTextTests {
    @Test func theAuditTextViewEscapesControlCharacters() {
        #expect(AuditRecord.printable("plain name.txt") == "plain name.txt")
        #expect(AuditRecord.printable("a\nb\r\t\u{1B}[31mred\u{7F}") == "a\\x0ab\\x0d\\x09\\x1b[31mred\\x7f")
        #expect(AuditRecord.printable("csi\u{9B}2J") == "csi\\xc2\\x9b2J", "C1 controls, as their UTF-8 bytes")
        #expect(AuditRecord.printable("\u{202E}txt.exe\u{2028}") == "\\u{202E}txt.exe\\u{2028}")
        #expect(AuditRecord.printable("café ☕ 日本") == "café ☕ 日本", "other characters as they are")
    }

    @Test func anAuditLineCannotBeForgedByAName() {
        let forged = "x\n2026-01-01T00:00:00.000Z  sh[1] uid 0  unlink secrets.txt [data]  EPERM (forged)\u{1B}[31m"
        let record = AuditRecord(
            time: "2026-11-24T05:00:00.000Z", pid: 7, process: "evil\u{1B}]0;title\u{7}\\x0a", uid: 1000, operation: "mkdir",
            paths: ["Demo.app/" + forged], areas: ["bundle"], errno: "EPERM", rule: "bundleIsReadOnly")
        let line = record.textLine
        #expect(!line.unicodeScalars.contains { $0.value < 0x20 || ($0.value >= 0x7F && $0.value <= 0x9F) }, "\(line)")
        #expect(line.contains("Demo.app/x\\x0a2026-01-01T00:00:00.000Z"))
        #expect(line.contains("(forged)\\x1b[31m [bundle]"))
        // The process name's own backslash is doubled, so it is not taken for an escape.
        #expect(line.contains("evil\\x1b]0;title\\x07\\\\x0a[7] uid 1000  mkdir "))
        #expect(line.hasSuffix("EPERM (bundleIsReadOnly)"))
    }
}
