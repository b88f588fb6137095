import ContainerStore

/// One of the storage-guideline rules `containerfs check` reports (SPEC §17, docs/check.md).
///
/// The raw values are the names `--fail-on`, the config file, JSON and JUnit use.
public enum CheckRule: String, CaseIterable, Sendable {
    /// 1. The backup set's size (and growth across launches) within a budget.
    case backupBudget = "backup-budget"
    /// 2. No large file or cache layout backed up.
    case recreatableData = "recreatable-data"
    /// 3. Only what the user may see in `Documents/`.
    case documentsContent = "documents-content"
    /// 4. Nothing left in `tmp/` when the program exits.
    case tmpCleanup = "tmp-cleanup"
    /// 5. Nothing left in `Documents/Inbox/`.
    case inboxHandled = "inbox-handled"
    /// 6. No operation denied.
    case denials = "denials"
    /// 7. No launch failing after a purge.
    case cacheDependence = "cache-dependence"

    /// What the rule asks, for the table and the JUnit test case's name.
    public var title: String {
        switch self {
        case .backupBudget: "backup set within its budget"
        case .recreatableData: "re-creatable data not backed up"
        case .documentsContent: "Documents holds only user content"
        case .tmpCleanup: "tmp cleaned by the app"
        case .inboxHandled: "Inbox handled by the app"
        case .denials: "no operation denied"
        case .cacheDependence: "launches survive purged caches"
        }
    }

    /// What to do about a violation.
    public var hint: String {
        switch self {
        case .backupBudget:
            "move what can be downloaded or re-created to Library/Caches, or exclude it from backup (containerfs exclude, or the attribute user.containerfs.exclude-from-backup)"
        case .recreatableData:
            "put re-creatable and downloaded data in Library/Caches, or exclude it from backup"
        case .documentsContent:
            "keep databases, property lists, hidden and lock files and caches in Library/Application Support or Library/Caches: Documents is shown to the user"
        case .tmpCleanup: "delete temporary files once they are no longer needed"
        case .inboxHandled: "move what the app was handed out of Documents/Inbox, or delete it once handled"
        case .denials: "see containerfs audit STORE: on a device this operation fails too"
        case .cacheDependence: "re-create or download what the caches held when it is missing; replay the launches with the seed"
        }
    }

    /// The rules that fail the check unless flags or the config file say otherwise; the
    /// others are warnings. Documents, tmp and Inbox are "should"s of the guide, the rest
    /// are what App Review rejects or a device refuses.
    public static let failingByDefault: Set<CheckRule> = [.backupBudget, .recreatableData, .denials, .cacheDependence]
}

/// The thresholds and which rules fail the check: flags over the config file over defaults.
public struct CheckSettings: Sendable, Equatable {
    /// The most the backup set may hold.
    public var backupBudget: Int64 = 20 << 20
    /// The most the backup set may grow from the first launch's exit to the last's.
    public var backupGrowth: Int64 = 5 << 20
    /// A backed-up file larger than this counts as re-creatable data.
    public var largeFile: Int64 = 5 << 20
    /// The rules whose violation is a failure; the others' are warnings.
    public var failOn: Set<CheckRule> = CheckRule.failingByDefault
    /// How many files a rule names at most (largest first); the count says how many there were.
    public var listLimit = 10

    /// The defaults.
    public init() {}

    /// Parses `--fail-on`'s list (`what` names it in the error): rule names separated by
    /// commas, `all` or `none`; a word that is not a rule is a misuse.
    public static func rules(_ list: String, what: String = "--fail-on") throws(UserError) -> Set<CheckRule> {
        var rules: Set<CheckRule> = []
        for word in list.split(separator: ",").map({ $0.trimmingCharactersInSpaces() }) where !word.isEmpty {
            switch word {
            case "all": rules.formUnion(CheckRule.allCases)
            case "none": break
            default:
                guard let rule = CheckRule(rawValue: word) else {
                    throw UserError.usage(
                        "no rule '\(word)' in \(what): name \(CheckRule.allCases.map(\.rawValue).joined(separator: ", ")), all or none")
                }
                rules.insert(rule)
            }
        }
        return rules
    }
}

extension Substring {
    fileprivate func trimmingCharactersInSpaces() -> String {
        String(drop { $0 == " " }.reversed().drop { $0 == " " }.reversed())
    }
}
