import ContainerPolicy
import ContainerStore
import Testing

@testable import ContainerCheck

/// The rules as pure functions: facts built by hand, results asserted.
@Suite struct RuleTests {
    func path(_ text: String) -> ContainerPath { ContainerPath(bytes: Array(text.utf8)) ?? .root }
    func file(_ text: String, _ bytes: Int64) -> CheckFacts.Item { .init(path: path(text), isFolder: false, bytes: bytes) }
    func folder(_ text: String) -> CheckFacts.Item { .init(path: path(text), isFolder: true, bytes: 0) }

    func result(_ rule: CheckRule, _ facts: CheckFacts, _ settings: CheckSettings = CheckSettings()) -> CheckResult {
        CheckReport(store: "S", facts: facts, settings: settings).results.first { $0.rule == rule }!
    }

    @Test func anEmptyContainerPassesAndSkipsWhatNeedsARun() {
        let report = CheckReport(store: "S", facts: CheckFacts(), settings: CheckSettings())
        #expect(!report.failed)
        #expect(report.results.map(\.outcome) == [.pass, .pass, .pass, .skipped, .pass, .pass, .skipped])
    }

    @Test func aBigDownloadInDocumentsBreaksTheBudgetAndIsRecreatable() {
        var facts = CheckFacts()
        facts.backupItems = [folder("Documents"), file("Documents/download.bin", 50 << 20), file("Documents/note.txt", 10)]
        facts.backupBytes = (50 << 20) + 10
        let budget = result(.backupBudget, facts)
        #expect(budget.outcome == .failure)
        #expect(budget.findings.first?.path == "Documents/download.bin")
        let recreatable = result(.recreatableData, facts)
        #expect(recreatable.outcome == .failure)
        #expect(recreatable.findings.map(\.path) == ["Documents/download.bin"])
        var loose = CheckSettings()
        loose.failOn = []
        #expect(result(.backupBudget, facts, loose).outcome == .warning)
    }

    @Test func growthIsMeasuredFromTheFirstLaunch() {
        var facts = CheckFacts()
        facts.backupBytes = 30 << 20
        facts.backupBytesAtFirstLaunch = 1 << 20
        var settings = CheckSettings()
        settings.backupBudget = 1 << 30
        #expect(result(.backupBudget, facts, settings).outcome == .failure)
        facts.backupBytesAtFirstLaunch = 29 << 20
        #expect(result(.backupBudget, facts, settings).outcome == .pass)
        // A first size larger than the last (the app deleted data) is no growth, and no overflow.
        facts.backupBytes = 0
        facts.backupBytesAtFirstLaunch = .max
        #expect(result(.backupBudget, facts, settings).outcome == .pass)
    }

    @Test(arguments: [
        ("Library/Application Support/ImageCache/a.png", "Library/Application Support/ImageCache/"),
        ("Documents/http_cache/x", "Documents/http_cache/"),
        ("Library/Caches2/fsCachedData/blob", "Library/Caches2/fsCachedData/"),
        ("Library/Cache.db", "Library/Cache.db"),
        ("Library/feed.cache", "Library/feed.cache"),
    ])
    func cacheLayoutsOutsideCachesAreRecreatable(item: String, named: String) {
        var facts = CheckFacts()
        facts.backupItems = [file(item, 100)]
        let result = result(.recreatableData, facts)
        #expect(result.outcome == .failure)
        #expect(result.findings.map(\.path) == [named])
    }

    @Test func documentsWarnsOfDatabasesPlistsDotFilesLocksAndCaches() {
        var facts = CheckFacts()
        facts.backupItems = [
            folder("Documents"), file("Documents/photo.jpg", 5), file("Documents/notes.sqlite", 4), file("Documents/Settings.plist", 3),
            folder("Documents/.git"), file("Documents/.git/HEAD", 2), file("Documents/app.lock", 1), file("Documents/Inbox/in.db", 1),
            file("Library/store.db", 9),
        ]
        let result = result(.documentsContent, facts)
        #expect(result.outcome == .warning)
        #expect(
            result.findings.map(\.path) == ["Documents/notes.sqlite", "Documents/Settings.plist", "Documents/app.lock", "Documents/.git/"])
    }

    @Test func tmpAndInboxLeftoversAreWarningsUnlessFailOnNamesThem() {
        var facts = CheckFacts()
        facts.temporaryFiles = [(path("tmp/a"), 3)]
        facts.backupItems = [folder("Documents/Inbox"), file("Documents/Inbox/report.pdf", 7)]
        #expect(result(.tmpCleanup, facts).outcome == .warning)
        #expect(result(.inboxHandled, facts).findings.map(\.path) == ["Documents/Inbox/report.pdf"])
        var strict = CheckSettings()
        strict.failOn = Set(CheckRule.allCases)
        #expect(result(.tmpCleanup, facts, strict).outcome == .failure)
        #expect(result(.inboxHandled, facts, strict).outcome == .failure)
    }

    @Test func sizesPastInt64SaturateInsteadOfTrapping() {
        var facts = CheckFacts()
        facts.temporaryFiles = [(path("tmp/a"), .max), (path("tmp/b"), .max)]
        facts.backupItems = [file("Library/cache/a", .max), file("Library/cache/b", .max)]
        facts.backupBytes = .max
        let report = CheckReport(store: "S", facts: facts, settings: CheckSettings())
        #expect(report.results.first { $0.rule == .tmpCleanup }?.summary.contains("8388608.0 TiB") == true)
        #expect(report.results.first { $0.rule == .recreatableData }?.findings.first?.bytes == .max)
    }

    @Test func aLaunchFailingAfterAPurgeNamesTheSeed() {
        var facts = CheckFacts()
        facts.launches = [
            .init(number: 1, status: 0, purgedBefore: nil), .init(number: 2, status: 3, purgedBefore: "all 2 cache files purged"),
        ]
        facts.replay = "--launches 2 --purge-between caches --seed 7"
        let result = result(.cacheDependence, facts)
        #expect(result.outcome == .failure)
        #expect(result.summary.contains("--seed 7"))
        #expect(result.findings.first?.note.contains("all 2 cache files purged") == true)
    }

    @Test func findingsAreCappedLargestFirstAndCounted() {
        var facts = CheckFacts()
        facts.backupItems = (1...30).map { file("Library/f\($0)", Int64($0) << 20 + 6 << 20) }
        facts.backupBytes = 1 << 40
        let result = result(.backupBudget, facts)
        #expect(result.findings.count == 10)
        #expect(result.findingCount == 30)
        #expect(result.findings.first?.path == "Library/f30")
    }

    @Test func failOnParsesNamesAllAndNone() throws {
        #expect(try CheckSettings.rules("denials, tmp-cleanup") == [.denials, .tmpCleanup])
        #expect(try CheckSettings.rules("all") == Set(CheckRule.allCases))
        #expect(try CheckSettings.rules("none") == [])
        #expect(throws: UserError.self) { try CheckSettings.rules("denials,budget") }
    }

    @Test func theConfigFileSetsThresholdsAndRefusesWhatItDoesNotKnow() throws {
        let settings = try CheckConfig.apply(
            Array(#"{"backupBudget": "1M", "failOn": ["tmp-cleanup"], "listLimit": 3}"#.utf8), name: "c", to: CheckSettings())
        #expect(settings.backupBudget == 1 << 20)
        #expect(settings.failOn == [.tmpCleanup])
        #expect(settings.listLimit == 3)
        for bad in [
            #"{"budget": "1M"}"#, #"{"backupBudget": 5}"#, #"{"failOn": ["nope"]}"#, "[]", "{", #"{"listLimit": -1}"#,
            #"{"warnOnly": "yes"}"#,
        ] {
            #expect(throws: UserError.self) { try CheckConfig.apply(Array(bad.utf8), name: "c", to: CheckSettings()) }
        }
    }

    @Test func reportsEscapeWhatAnAppNamed() {
        var facts = CheckFacts()
        facts.backupItems = [file("Documents/<&\"\u{1}>.db", 1)]
        let report = CheckReport(store: "S", facts: facts, settings: CheckSettings())
        let xml = report.junit(timestamp: "2026-01-01T00:00:00", hostname: "h")
        #expect(!xml.contains("<&"))
        #expect(!xml.unicodeScalars.contains { $0.value == 1 })
        #expect(!report.json.unicodeScalars.contains { $0.value == 1 })
        // The writers themselves, for text that did not come through ContainerPath (audit
        // lines, summaries): XML 1.0 cannot hold most C0 controls even as references.
        #expect(xmlText("a\u{1}<&\u{FFFE}") == "a\\x01&lt;&amp;\\u{fffe}")
        #expect(xmlAttribute("x\n\"y") == "\"x&#10;&quot;y\"")
        #expect(jsonString("a\u{1}\"\\") == "\"a\\u0001\\\"\\\\\"")
    }
}
