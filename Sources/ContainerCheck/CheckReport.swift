import ContainerPolicy
import ContainerStore

/// How a rule came out.
public enum CheckOutcome: String, Sendable {
    /// The rule holds.
    case pass
    /// The rule is broken and is not one that fails the check.
    case warning
    /// The rule is broken and fails the check (exit 1).
    case failure
    /// The rule needs what this check does not have (`tmp/` at exit, launches).
    case skipped
}

/// A file (or folder, or audit record) that broke a rule.
public struct CheckFinding: Sendable, Equatable {
    /// Its path in the container, printable (`\xNN` for bytes that are not UTF-8).
    public var path: String
    /// Its bytes, when the rule is about size.
    public var bytes: Int64?
    /// Why it is named: the pattern it matches, or the audit line.
    public var note: String
}

/// One rule's result.
public struct CheckResult: Sendable {
    /// The rule.
    public var rule: CheckRule
    /// Pass, warning, failure or skipped.
    public var outcome: CheckOutcome
    /// One line: what was measured against what.
    public var summary: String
    /// What broke the rule, largest first, at most `CheckSettings.listLimit` of them.
    public var findings: [CheckFinding]
    /// How many there were in all.
    public var findingCount: Int
}

/// Every rule's result for one container.
public struct CheckReport: Sendable {
    /// The store checked, as named on the command line.
    public var store: String
    /// One result per rule, in `CheckRule.allCases` order.
    public var results: [CheckResult]

    /// Whether a failing rule failed: the check's exit status is then 1.
    public var failed: Bool { results.contains { $0.outcome == .failure } }

    /// Applies every rule to `facts`.
    public init(store: String, facts: CheckFacts, settings: CheckSettings) {
        self.store = store
        results = CheckRule.allCases.map { Rules.evaluate($0, facts, settings) }
    }
}
