@testable import ContainerRun
import Testing

/// iOS's 0xdead10cc rule as a pure function (docs/groups.md).
@Suite struct SuspensionRuleTests {
    let own = HeldLock(path: "/home/app/Documents/db.sqlite", pid: 10, command: "sqlite3", inSharedGroup: false)
    let shared = HeldLock(path: "/groups/group.a/db.sqlite", pid: 11, command: "sqlite3", inSharedGroup: true)
    let sharedToo = HeldLock(path: "/groups/group.a/a.lock", pid: 12, command: "flock", inSharedGroup: true)

    @Test func noLockOrOwnLocksOnlyStaySuspended() {
        #expect(SuspensionRule.verdict([]) == .suspended)
        #expect(SuspensionRule.verdict([own]) == .suspended)
    }

    @Test func aSharedLockKillsNamingTheFirstFile() {
        #expect(SuspensionRule.verdict([own, shared]) == .killed(shared))
        #expect(SuspensionRule.verdict([shared, sharedToo, own]) == .killed(sharedToo))
        let line = SuspensionRule.message(shared)
        #expect(line.hasPrefix("0xdead10cc: ") && line.contains("/groups/group.a/db.sqlite") && !line.contains("\n"))
        #expect(SuspensionRule.exitStatus == 0xcc)
    }

    /// The program names the file and itself: its escape sequences (clear the screen, set
    /// the title) and newlines reach the caller's terminal, or root's through `suspend`,
    /// only as text.
    @Test func theProgramsNamesAreEscapedInTheLine() {
        let hostile = HeldLock(path: "/groups/group.a/x\u{1B}[2J\u{1B}]0;PWNED\u{07}\nfake line", pid: 13,
                               command: "sh\u{1B}[31m", inSharedGroup: true)
        let line = SuspensionRule.message(hostile)
        #expect(!line.utf8.contains(0x1B) && !line.utf8.contains(0x07) && !line.contains("\n"), "\(line)")
        #expect(line.contains("/groups/group.a/x") && line.contains("PWNED"), "\(line)")
    }
}
