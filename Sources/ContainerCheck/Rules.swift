import ContainerPolicy
import ContainerStore

/// The rules as pure functions of the facts (docs/check.md gives each one's source in
/// Apple's guide).
enum Rules {
    static func evaluate(_ rule: CheckRule, _ facts: CheckFacts, _ settings: CheckSettings) -> CheckResult {
        let verdict: Verdict
        switch rule {
        case .backupBudget: verdict = backupBudget(facts, settings)
        case .recreatableData: verdict = recreatableData(facts, settings)
        case .documentsContent: verdict = documentsContent(facts)
        case .tmpCleanup: verdict = tmpCleanup(facts)
        case .inboxHandled: verdict = inboxHandled(facts)
        case .denials: verdict = denials(facts)
        case .cacheDependence: verdict = cacheDependence(facts)
        }
        let outcome: CheckOutcome =
            switch verdict.state {
            case .kept: .pass
            case .notApplicable: .skipped
            case .broken: settings.failOn.contains(rule) ? .failure : .warning
            }
        // Largest first, then by path, so that the report is the same from run to run;
        // denials and launches stay in time order.
        let sorted = verdict.inOrder ? verdict.findings : verdict.findings.sorted { ($0.bytes ?? -1, $1.path) > ($1.bytes ?? -1, $0.path) }
        return CheckResult(
            rule: rule, outcome: outcome, summary: verdict.summary,
            findings: Array(sorted.prefix(max(0, settings.listLimit))), findingCount: verdict.count ?? sorted.count)
    }

    /// A rule's finding before the settings say whether a violation fails.
    struct Verdict {
        enum State { case kept, broken, notApplicable }
        var state: State
        var summary: String
        var findings: [CheckFinding] = []
        /// The findings are in time order, not about size.
        var inOrder = false
        /// How many findings there were, when only the largest were kept.
        var count: Int?
    }

    // MARK: 1. Backup budget

    static func backupBudget(_ facts: CheckFacts, _ settings: CheckSettings) -> Verdict {
        var problems: [String] = []
        var summary = "backup set \(humanBytes(facts.backupBytes)) of a budget of \(humanBytes(settings.backupBudget))"
        if facts.backupBytes > settings.backupBudget { problems.append("over budget") }
        if let first = facts.backupBytesAtFirstLaunch {
            let (growth, overflow) = facts.backupBytes.subtractingReportingOverflow(first)
            let grown = overflow ? Int64.max : growth
            summary += "; grew \(humanBytes(grown)) from the first launch to the last, of \(humanBytes(settings.backupGrowth)) allowed"
            if grown > settings.backupGrowth { problems.append("grew too much") }
        }
        guard !problems.isEmpty else { return Verdict(state: .kept, summary: summary) }
        // Every file of the set is a finding: only the largest are turned into text.
        let files = facts.backupItems.filter { !$0.isFolder && $0.bytes > 0 }
        let findings = largest(files, settings.listLimit).map {
            CheckFinding(path: $0.path.description, bytes: $0.bytes, note: "backed up")
        }
        return Verdict(state: .broken, summary: problems.joined(separator: ", ") + ": " + summary, findings: findings, count: files.count)
    }

    /// The `limit` largest of `items`, the first met winning a tie: one pass, no sort of them all.
    static func largest(_ items: [CheckFacts.Item], _ limit: Int) -> [CheckFacts.Item] {
        guard limit > 0 else { return [] }
        var kept: [CheckFacts.Item] = []
        for item in items where kept.count < limit || item.bytes > (kept.last?.bytes ?? .min) {
            let index = kept.firstIndex { $0.bytes < item.bytes } ?? kept.count
            kept.insert(item, at: index)
            if kept.count > limit { kept.removeLast() }
        }
        return kept
    }

    // MARK: 2. Re-creatable data backed up

    static func recreatableData(_ facts: CheckFacts, _ settings: CheckSettings) -> Verdict {
        var findings: [CheckFinding] = []
        var cacheFolders: [ContainerPath: Int64] = [:]
        for item in facts.backupItems {
            if let folder = cacheLikeFolder(item.path, isFolder: item.isFolder) {
                // A cache layout is named once, as its top folder with the bytes below it.
                if !item.isFolder || item.path == folder {
                    cacheFolders[folder, default: 0] = cacheFolders[folder, default: 0].addingSaturated(item.bytes)
                }
                continue
            }
            guard !item.isFolder, let name = item.path.components.last else { continue }
            if isCacheLikeFile(name) {
                findings.append(CheckFinding(path: item.path.description, bytes: item.bytes, note: "cache file, backed up"))
            } else if item.bytes > settings.largeFile {
                findings.append(
                    CheckFinding(
                        path: item.path.description, bytes: item.bytes,
                        note: "larger than \(humanBytes(settings.largeFile)), backed up"))
            }
        }
        for (folder, bytes) in cacheFolders {
            findings.append(
                CheckFinding(path: folder.description + "/", bytes: bytes, note: "cache folder outside Library/Caches, backed up"))
        }
        guard !findings.isEmpty else {
            return Verdict(state: .kept, summary: "no backed-up file over \(humanBytes(settings.largeFile)), no cache outside Library/Caches")
        }
        return Verdict(
            state: .broken, summary: "\(counted(findings.count, "large or cache item")) backed up", findings: findings)
    }

    /// The topmost folder of `path` (itself included when it is a folder) whose name is a
    /// cache's, if any.
    static func cacheLikeFolder(_ path: ContainerPath, isFolder: Bool) -> ContainerPath? {
        let folders = path.components.dropLast(isFolder ? 0 : 1)
        for (index, name) in folders.enumerated() where isCacheLikeFolderName(name) {
            return ContainerPath(components: Array(path.components.prefix(index + 1)))
        }
        return nil
    }

    /// `Caches`, `cache`, `.cache`, `HTTPCache`, `ImageCache`, `image_cache`,
    /// `fsCachedData` (NSURLCache's): any name ending in cache or caches.
    static func isCacheLikeFolderName(_ name: [UInt8]) -> Bool {
        let lower = lowercased(name)
        return lower.hasSuffix(Array("cache".utf8)) || lower.hasSuffix(Array("caches".utf8)) || lower == Array("fscacheddata".utf8)
    }

    /// `*.cache` and NSURLCache's `Cache.db` with its journal files.
    static func isCacheLikeFile(_ name: [UInt8]) -> Bool {
        let lower = lowercased(name)
        return lower.hasSuffix(Array(".cache".utf8)) || lower.starts(with: Array("cache.db".utf8))
    }

    // MARK: 3. Documents holds what the user may see

    static func documentsContent(_ facts: CheckFacts) -> Verdict {
        var findings: [CheckFinding] = []
        var reported: ContainerPath?
        for item in facts.backupItems {
            let parts = item.path.components
            guard parts.count > 1, parts[0] == documentsComponent, parts[1] != inboxComponents[1] || parts.count == 2 else { continue }
            // A hidden folder is named once, not with everything in it. The set lists a
            // folder's subtree right after it, so the last folder named is the only one to test.
            if let reported, parts.count > reported.components.count, parts.starts(with: reported.components) { continue }
            guard let name = parts.last, let kind = nonUserKind(name, isFolder: item.isFolder) else { continue }
            if item.isFolder { reported = item.path }
            findings.append(
                CheckFinding(path: item.path.description + (item.isFolder ? "/" : ""), bytes: item.isFolder ? nil : item.bytes, note: kind))
        }
        guard !findings.isEmpty else { return Verdict(state: .kept, summary: "only user content in Documents") }
        return Verdict(
            state: .broken, summary: "\(counted(findings.count, "item")) in Documents the user should not see",
            findings: findings)
    }

    /// What kind of non-user item `name` is, or nil for user content.
    static func nonUserKind(_ name: [UInt8], isFolder: Bool) -> String? {
        let lower = lowercased(name)
        if name.first == UInt8(ascii: ".") { return isFolder ? "hidden folder" : "hidden file" }
        if isFolder { return isCacheLikeFolderName(name) ? "cache folder" : nil }
        if isCacheLikeFile(name) { return "cache file" }
        for suffix in [
            ".db", ".sqlite", ".sqlite3", ".realm", ".db-wal", ".db-shm", ".db-journal", ".sqlite-wal", ".sqlite-shm", ".sqlite-journal",
        ]
        where lower.hasSuffix(Array(suffix.utf8)) {
            return "database"
        }
        if lower.hasSuffix(Array(".plist".utf8)) { return "property list" }
        if lower.hasSuffix(Array(".lock".utf8)) || lower.hasSuffix(Array(".lck".utf8)) || lower == Array("lock".utf8) { return "lock file" }
        return nil
    }

    // MARK: 4. tmp cleaned by the app

    static func tmpCleanup(_ facts: CheckFacts) -> Verdict {
        guard let files = facts.temporaryFiles else {
            return Verdict(state: .notApplicable, summary: "only with run --check: tmp/ is purged when the app stops")
        }
        guard !files.isEmpty else { return Verdict(state: .kept, summary: "tmp/ empty when the program exited") }
        // Held at Int64.max: sparse files can claim more than that between them.
        let bytes = files.reduce(Int64(0)) { $0.addingSaturated($1.bytes) }
        return Verdict(
            state: .broken, summary: "\(counted(files.count, "file")) (\(humanBytes(bytes))) left in tmp/ at exit",
            findings: files.map { CheckFinding(path: $0.path.description, bytes: $0.bytes, note: "left in tmp/") })
    }

    // MARK: 5. Inbox handled

    static func inboxHandled(_ facts: CheckFacts) -> Verdict {
        let files = facts.inboxFiles
        guard !files.isEmpty else { return Verdict(state: .kept, summary: "Documents/Inbox empty") }
        return Verdict(
            state: .broken, summary: "\(counted(files.count, "file")) left in Documents/Inbox",
            findings: files.map { CheckFinding(path: $0.path.description, bytes: $0.bytes, note: "not moved out or deleted") })
    }

    // MARK: 6. Denials

    static func denials(_ facts: CheckFacts) -> Verdict {
        guard !facts.denials.isEmpty else { return Verdict(state: .kept, summary: "no denial in the audit log") }
        let findings = facts.denials.map { CheckFinding(path: AuditRecord.printable($0.paths.first ?? ""), bytes: nil, note: $0.textLine) }
        // Oldest first, as the log has them: a denial's story reads in time order.
        return Verdict(
            state: .broken, summary: "\(counted(findings.count, "operation")) denied", findings: findings, inOrder: true)
    }

    // MARK: 7. Cache dependence

    static func cacheDependence(_ facts: CheckFacts) -> Verdict {
        guard facts.launches.count > 1 else {
            return Verdict(state: .notApplicable, summary: "only with run --check --launches N (N > 1)")
        }
        let failed = facts.launches.filter { $0.number > 1 && $0.status.map { $0 != 0 } ?? false }
        guard let first = failed.first else {
            return Verdict(state: .kept, summary: "all \(counted(facts.launches.count, "launch", "launches")) exited 0 with purges between them")
        }
        let replay = facts.replay.map { "; replay with \($0)" } ?? ""
        let findings = failed.map { launch in
            CheckFinding(
                path: "launch \(launch.number)", bytes: nil,
                note: "exited with status \(launch.status ?? 0) after: \(launch.purgedBefore ?? "a purge")\(replay)")
        }
        return Verdict(state: .broken, summary: "launch \(first.number) failed after a purge\(replay)", findings: findings, inOrder: true)
    }

    // MARK: Helpers

    static func lowercased(_ name: [UInt8]) -> [UInt8] {
        name.map { $0 >= 0x41 && $0 <= 0x5A ? $0 + 0x20 : $0 }
    }

}

extension Array where Element == UInt8 {
    fileprivate func hasSuffix(_ suffix: [UInt8]) -> Bool {
        count >= suffix.count && self[(count - suffix.count)...].elementsEqual(suffix)
    }
}
