import Foundation
import Glibc
import Testing

/// The harness's own helpers fail when what they wait for or read is not there: a test
/// built on them cannot pass without the audit record, or the tree, it claims to check.
@Suite("Harness")
struct HarnessTests {
    @Test func waitingForAuditRecordsThatDoNotComeFails() throws {
        try withMountedContainer { container in
            let probe = try Probe(container)
            // Allowed, so not audited.
            try Data("x".utf8).write(to: URL(fileURLWithPath: container.mounted("Documents/allowed")))
            #expect(throws: TestFailure.self) { _ = try container.waitForAudit(count: 1, seconds: 0.5) }
            #expect(throws: TestFailure.self) { _ = try probe.takeAuditRecords(atLeast: 1) }
            // And a denial is taken.
            #expect(errnoOf { mkdir(container.mounted("Stray"), 0o755) } == EPERM)
            #expect(try probe.takeAuditRecords(atLeast: 1).count == 1)
        }
    }

    @Test func digestsOfAnUnreadableTreeFail() throws {
        let missing = "/nonexistent-\(getpid())"
        #expect(throws: TestFailure.self) { _ = try treeDigest(missing) }
        #expect(throws: TestFailure.self) { _ = try treeState(missing) }
    }
}
