import Foundation
import Glibc
import Testing

/// `containerfs check` and `run --check` (issue 29): real programs break Apple's storage
/// guidelines and the report says so, as a table, JSON and JUnit XML that a schema and a
/// real JUnit consumer accept.
@Suite("Check", .serialized)
struct CheckTests {
    /// Jenkins' JUnit schema, as scripts/install-deps.sh installs it.
    static let junitSchema = "/usr/local/share/containerfs-tests/junit-10.xsd"

    /// A program that downloads 50 MB into `folder`.
    func download(into folder: String) -> [String] {
        ["sh", "-c", "head -c 52428800 /dev/zero > '\(folder)/download.bin'"]
    }

    /// The JSON report of `containerfs check STORE OPTIONS… --json`, and its status.
    func checkJSON(_ container: MountedContainer, _ options: [String] = []) throws -> (
        status: Int32, outcomes: [String: String], findings: [String: [String]]
    ) {
        let result = try containerfs(["check", container.store, "--json"] + options)
        guard let object = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any],
            let rules = object["rules"] as? [[String: Any]]
        else { throw TestFailure("check --json printed no report: \(result)") }
        var outcomes: [String: String] = [:], findings: [String: [String]] = [:]
        for rule in rules {
            guard let name = rule["rule"] as? String else { continue }
            outcomes[name] = rule["outcome"] as? String
            findings[name] = (rule["findings"] as? [[String: Any]] ?? []).compactMap { $0["path"] as? String }
        }
        return (result.status, outcomes, findings)
    }

    @Test func aDownloadInDocumentsFailsTheBudgetAndTheRecreatableRuleAndPassesInCaches() throws {
        let inDocuments = try MountedContainer()
        let run = try containerfsRun(inDocuments, ["--check"], download(into: "Documents"))
        #expect(run.status == 1, "the program exits 0; the check fails: \(run)")
        #expect(run.stderr.contains("FAIL  backup-budget"), "\(run)")
        #expect(run.stderr.contains("FAIL  recreatable-data"), "\(run)")
        #expect(run.stderr.contains("50.0 MiB  Documents/download.bin"), "\(run)")
        let report = try checkJSON(inDocuments)
        #expect(report.status == 1)
        #expect(report.outcomes["backup-budget"] == "failure")
        #expect(report.outcomes["recreatable-data"] == "failure")
        #expect(report.findings["recreatable-data"] == ["Documents/download.bin"])
        #expect(report.outcomes["tmp-cleanup"] == "skipped")
        // A budget that holds it passes that rule; the file is still re-creatable data.
        let roomy = try checkJSON(inDocuments, ["--backup-budget", "60M"])
        #expect(roomy.outcomes["backup-budget"] == "pass")
        #expect(roomy.outcomes["recreatable-data"] == "failure")
        // Excluded from backup, as the hint says: both pass.
        #expect(try containerfs(["exclude", inDocuments.stored("Documents/download.bin")]).status == 0)
        let excluded = try checkJSON(inDocuments)
        #expect(excluded.status == 0)
        #expect(excluded.outcomes["backup-budget"] == "pass")
        #expect(excluded.outcomes["recreatable-data"] == "pass")

        let inCaches = try MountedContainer()
        let fixed = try containerfsRun(inCaches, ["--check"], download(into: "Library/Caches"))
        #expect(fixed.status == 0, "\(fixed)")
        #expect(fixed.stderr.contains("pass  backup-budget"), "\(fixed)")
        #expect(fixed.stderr.contains("pass  recreatable-data"), "\(fixed)")
        let cached = try checkJSON(inCaches)
        #expect(cached.status == 0)
        #expect(cached.outcomes.values.allSatisfy { $0 == "pass" || $0 == "skipped" }, "\(cached)")
    }

    @Test func filesLeftInTmpAndTheInboxAreReported() throws {
        let container = try MountedContainer()
        let handed = container.base + "/report.pdf"
        try Data("handed over\n".utf8).write(to: URL(fileURLWithPath: handed))
        #expect(try containerfs(["deliver", container.store, handed]).status == 0)
        let sloppy = ["sh", "-c", "echo scratch > tmp/scratch.txt && cat Documents/Inbox/report.pdf > /dev/null"]
        let run = try containerfsRun(container, ["--check"], sloppy)
        #expect(run.status == 0, "warnings by default: \(run)")
        #expect(run.stderr.contains("WARN  tmp-cleanup"), "\(run)")
        #expect(run.stderr.contains("tmp/scratch.txt  (left in tmp/)"), "\(run)")
        #expect(run.stderr.contains("WARN  inbox-handled"), "\(run)")
        #expect(run.stderr.contains("Documents/Inbox/report.pdf  (not moved out or deleted)"), "\(run)")
        #expect(!FileManager.default.fileExists(atPath: container.stored("tmp/scratch.txt")), "tmp/ is still purged after the check")
        // Failing rules when CI says so.
        let strict = try containerfsRun(container, ["--check", "--fail-on", "tmp-cleanup,inbox-handled"], sloppy)
        #expect(strict.status == 1, "\(strict)")
        #expect(strict.stderr.contains("FAIL  tmp-cleanup") && strict.stderr.contains("FAIL  inbox-handled"), "\(strict)")
        // An app that moves what it was handed out and cleans up passes.
        let tidy = ["sh", "-c", "echo scratch > tmp/s && rm tmp/s && mv Documents/Inbox/report.pdf Documents/"]
        let clean = try containerfsRun(container, ["--check", "--fail-on", "all"], tidy)
        #expect(clean.status == 0, "\(clean)")
        #expect(clean.stderr.contains("pass  tmp-cleanup") && clean.stderr.contains("pass  inbox-handled"), "\(clean)")
    }

    @Test func aProgramThatWritesItsBundleFailsWithTheAuditLine() throws {
        let container = try MountedContainer()
        let run = try containerfsRun(container, ["--check"], ["sh", "-c", "echo x > Demo.app/extra 2>/dev/null; exit 0"])
        #expect(run.status == 1, "\(run)")
        #expect(run.stderr.contains("FAIL  denials"), "\(run)")
        let auditLine = run.stderr.split(separator: "\n").first { $0.contains("create Demo.app/extra [bundle]") }
        #expect(auditLine?.contains("EPERM (bundleIsReadOnly)") == true, "\(run)")
        let report = try checkJSON(container)
        #expect(report.status == 1)
        #expect(report.outcomes["denials"] == "failure")
        #expect(report.findings["denials"] == ["Demo.app/extra"])
        // --warn-only reports it and lets the build pass.
        #expect(try containerfs(["check", container.store, "--warn-only"]).status == 0)
    }

    @Test func aLaunchThatFailsAfterAPurgeIsReportedWithTheSeed() throws {
        let container = try MountedContainer()
        // The first launch fills its cache; later ones assume it is still there.
        let program = [
            "sh", "-c",
            "if [ -e Documents/launched ]; then test -e Library/Caches/feed; else touch Documents/launched; echo x > Library/Caches/feed; fi",
        ]
        let run = try containerfsRun(container, ["--check", "--launches", "3", "--purge-between", "caches", "--seed", "42"], program)
        #expect(run.status == 1, "the program's status: \(run)")
        #expect(run.stderr.contains("FAIL  cache-dependence"), "\(run)")
        #expect(run.stderr.contains("launch 2 failed after a purge; replay with --launches 3 --purge-between caches --seed 42"), "\(run)")
        #expect(run.stderr.contains("all 1 cache file purged"), "\(run)")
    }

    @Test func theBackupSetsGrowthIsMeasuredAcrossLaunches() throws {
        let container = try MountedContainer()
        // Each launch adds 3 MiB of backed-up data: 6 MiB from the first launch's end to the third's.
        let program = ["sh", "-c", "head -c 3145728 /dev/zero > \"Library/Application Support/log-$(date +%s%N)\""]
        let run = try containerfsRun(container, ["--check", "--launches", "3", "--backup-growth", "5M", "--large-file", "10M"], program)
        #expect(run.status == 1, "\(run)")
        #expect(run.stderr.contains("grew 6.0 MiB from the first launch to the last, of 5.0 MiB allowed"), "\(run)")
        let loose = try containerfsRun(container, ["--check", "--launches", "2", "--backup-growth", "4M", "--large-file", "10M"], program)
        #expect(loose.status == 0, "\(loose)")
    }

    @Test func theJUnitReportValidatesAgainstTheSchemaAndReadsBackInJunitparser() throws {
        guard FileManager.default.fileExists(atPath: Self.junitSchema) else {
            throw TestFailure("\(Self.junitSchema) is missing: run scripts/install-deps.sh")
        }
        let container = try MountedContainer()
        let junit = container.base + "/check.xml"
        // A name with XML's special characters and a control character, as an app may choose.
        let run = try containerfsRun(
            container, ["--check", "--junit", junit],
            ["sh", "-c", "head -c 8000000 /dev/zero > \"Documents/<a&b>\"$(printf '\\001')\".bin\"; echo x > tmp/left"])
        #expect(run.status == 1, "\(run)")
        let valid = try runProgram(["xmllint", "--noout", "--schema", Self.junitSchema, junit])
        #expect(valid.status == 0, "xmllint (libxml2-utils) must be installed and accept the report: \(valid)")
        let reader = """
            import sys
            from junitparser import JUnitXml, Failure, Skipped
            xml = JUnitXml.fromfile(sys.argv[1])
            for suite in xml:
                print("suite", suite.tests, suite.failures, suite.errors, suite.skipped)
                for case in suite:
                    kinds = [type(r).__name__ for r in case.result]
                    print("case", case.name.split(":")[0], ",".join(kinds) or "pass")
                    for r in case.result:
                        if isinstance(r, Failure):
                            print("text", (r.text or "").splitlines()[0])
            """
        let read = try runProgram(["python3", "-c", reader, junit])
        #expect(read.status == 0, "junitparser must be installed (scripts/install-deps.sh): \(read)")
        #expect(
            read.stdout.split(separator: "\n").map(String.init) == [
                "suite 7 1 0 1",
                "case backup-budget pass",
                "case recreatable-data Failure",
                "text 7.6 MiB  Documents/<a&b>\\x01.bin  (larger than 5.0 MiB, backed up)",
                "case documents-content pass",
                "case tmp-cleanup pass",
                "case inbox-handled pass",
                "case denials pass",
                "case cache-dependence Skipped",
            ], "\(read)")
        let files = try FileManager.default.contentsOfDirectory(atPath: container.base)
        #expect(!files.contains { $0.contains(".partial-") }, "the report is written aside and renamed")
    }

    @Test func misuseExits64() throws {
        let container = try MountedContainer()
        #expect(try containerfs(["check", container.store, "--fail-on", "budget"]).status == 64)
        #expect(try containerfs(["check", container.store, "--backup-budget", "lots"]).status == 64)
        #expect(try containerfs(["check", container.store, "--warn-only", "--fail-on", "denials"]).status == 64)
        #expect(try containerfs(["run", container.store, "--junit", container.base + "/x.xml", "--", "true"]).status == 64)
        let config = container.base + "/.containerfs-check.json"
        try Data(#"{"backupBudjet": "1M"}"#.utf8).write(to: URL(fileURLWithPath: config))
        let typo = try containerfs(["check", container.store, "--config", config])
        #expect(typo.status == 64)
        #expect(typo.stderr.contains("unknown key 'backupBudjet'"), "\(typo)")
        // A config file's budget applies, and a flag wins over it.
        try Data("two bytes".utf8).write(to: URL(fileURLWithPath: container.stored("Library/notes")))
        try Data(#"{"backupBudget": "1"}"#.utf8).write(to: URL(fileURLWithPath: config))
        #expect(try containerfs(["check", container.store, "--config", config]).status == 1)
        #expect(try containerfs(["check", container.store, "--config", config, "--backup-budget", "1K"]).status == 0)
    }
}
