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
}
