import ArgumentParser
import ContainerCheck
import ContainerPurge
import ContainerRun
import ContainerStore
import Foundation
import Glibc

/// The thresholds and reports `check` and `run --check` share.
struct CheckOptions: ParsableArguments {
    @Option(
        help: ArgumentHelp(
            "The config file (default: \(CheckConfig.defaultFileName) in the working directory, if there is one).", valueName: "FILE"))
    var config: String?

    @Option(help: ArgumentHelp("The most the backup set may hold (default 20M).", valueName: "SIZE"))
    var backupBudget: String?

    @Option(
        help: ArgumentHelp(
            "With run --launches: the most the backup set may grow from the first launch to the last (default 5M).", valueName: "SIZE"))
    var backupGrowth: String?

    @Option(help: ArgumentHelp("A backed-up file larger than this is re-creatable data (default 5M).", valueName: "SIZE"))
    var largeFile: String?

    @Option(
        help: ArgumentHelp(
            "The rules whose violation fails the check, replacing the default: names separated by commas, all or none.",
            valueName: "RULE,..."))
    var failOn: String?

    @Flag(help: "Report every violation as a warning: the check never fails.")
    var warnOnly = false

    @Option(help: ArgumentHelp("Also write the report as JUnit XML to FILE (one test case per rule).", valueName: "FILE"))
    var junit: String?

    /// Whether any of these was given (`run` needs `--check` for them).
    var given: Bool {
        config != nil || backupBudget != nil || backupGrowth != nil || largeFile != nil || failOn != nil || warnOnly || junit != nil
    }

    /// The settings: defaults, then the config file, then the flags.
    func settings() throws(UserError) -> CheckSettings {
        var settings = CheckSettings()
        let configPath = config ?? (access(CheckConfig.defaultFileName, F_OK) == 0 ? CheckConfig.defaultFileName : nil)
        if let configPath {
            let contents: [UInt8]
            do { contents = try readFile(at: AT_FDCWD, Array(configPath.utf8), limit: 1 << 20) } catch {
                throw UserError.usage("cannot read the config file \(configPath) (\(error)): name an existing JSON file with --config (docs/check.md)")
            }
            settings = try CheckConfig.apply(contents, name: configPath, to: settings)
        }
        func size(_ text: String?, _ option: String) throws(UserError) -> Int64? {
            guard let text else { return nil }
            guard let bytes = Quantity.bytes(text) else {
                throw UserError.usage(
                    "bad size '\(text)' for \(option): write bytes or a number with K, M, G or T (powers of 1024), as 20M")
            }
            return bytes
        }
        if let bytes = try size(backupBudget, "--backup-budget") { settings.backupBudget = bytes }
        if let bytes = try size(backupGrowth, "--backup-growth") { settings.backupGrowth = bytes }
        if let bytes = try size(largeFile, "--large-file") { settings.largeFile = bytes }
        if warnOnly, failOn != nil { throw UserError.usage("--warn-only and --fail-on exclude each other") }
        if let failOn { settings.failOn = try CheckSettings.rules(failOn) }
        if warnOnly { settings.failOn = [] }
        return settings
    }

    /// Writes the JUnit report, if asked: beside FILE first, then renamed over it, so that a
    /// CI job never reads half a report.
    func writeJUnit(_ report: CheckReport) throws(UserError) {
        guard let junit else { return }
        var host = [CChar](repeating: 0, count: 256)
        let hostname = gethostname(&host, host.count - 1) == 0 ? String(cString: host) : "localhost"
        let text = report.junit(timestamp: isoTime(nowNanoseconds()).replacingOccurrences(of: "Z", with: ""), hostname: hostname)
        let aside = junit + ".partial-\(getpid())"
        // Its folder named, not the working name beside it, nor Foundation's wording.
        let folder = (junit as NSString).deletingLastPathComponent
        var info = stat()
        guard stat(folder.isEmpty ? "." : folder, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else {
            throw UserError("cannot write the JUnit report \(junit): its folder \(folder) does not exist: create it, or name another path with --junit")
        }
        do {
            try Data(text.utf8).write(to: URL(fileURLWithPath: aside))
        } catch {
            // Foundation's wording names the working name: its errno, with what to do, instead.
            if let underlying = (error as NSError).userInfo[NSUnderlyingErrorKey] as? POSIXError {
                throw UserError.failed("cannot write the JUnit report \(junit)", Errno(underlying.code.rawValue))
            }
            throw UserError("cannot write the JUnit report \(junit): \(error.localizedDescription)")
        }
        guard rename(aside, junit) == 0 else {
            let error = Errno.current
            unlink(aside)
            throw UserError.failed("cannot write the JUnit report \(junit)", error)
        }
    }

    private func nowNanoseconds() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
    }
}

struct CheckCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check",
        abstract: "Check a container against Apple's storage guidelines, as a CI gate.",
        discussion: """
            Reports each rule as pass, warning or failure, with the files that broke it (largest first): \
            backup-budget (the backup set's size against --backup-budget; with run --check --launches, its \
            growth against --backup-growth), recreatable-data (backed-up files over --large-file, cache \
            layouts outside Library/Caches), documents-content (databases, property lists, hidden and lock \
            files and caches in Documents), tmp-cleanup (files left in tmp/ at exit: only with run --check), \
            inbox-handled (files left in Documents/Inbox), denials (every denial in the audit log) and \
            cache-dependence (a launch that failed after a purge: only with run --check --launches).

            By default backup-budget, recreatable-data, denials and cache-dependence fail the check and the \
            others warn; --fail-on RULE,... names the failing rules instead, --warn-only makes every rule \
            warn. Thresholds and failing rules may also come from a JSON file in the app's repository, \
            \(CheckConfig.defaultFileName) (or --config FILE); flags win over it. See docs/check.md.

              containerfs check ~/C --backup-budget 50M --junit check.xml
              containerfs run ~/C --check --launches 5 --purge-between random -- ./app

            Exit status: 0 when no failing rule failed (warnings allowed), 1 when one did (or the \
            container could not be read), 64 for a misuse.
            """)

    @Argument(help: "The container's store.")
    var store: String

    @OptionGroup var options: CheckOptions

    @Flag(help: "Print the report as one JSON object instead of the table.")
    var json = false

    func run() throws {
        var failed = false
        try reportingErrors {
            let settings = try options.settings()
            let opened = try Store.open(store, changing: false)
            var facts = CheckFacts()
            try facts.measure(opened, temporary: false)
            facts.denials = AuditLog.read(stateFD: opened.stateFD).filter { !$0.isGrant }
            let report = CheckReport(store: store, facts: facts, settings: settings)
            try options.writeJUnit(report)
            FileHandleOutput.standardOutput.write(json ? report.json : report.table)
            failed = report.failed
        }
        if failed { throw ExitCode(1) }
    }
}

/// `run --check`: the facts of each launch's end, gathered by `Run.atProgramExit`.
final class RunCheck {
    private(set) var facts = CheckFacts()
    private(set) var error: UserError?

    /// Takes one launch's end: the backup set and tmp/ as the program left them.
    func take(_ exit: ProgramExit) {
        do {
            try facts.measure(exit.store, temporary: true)
        } catch {
            self.error = error
        }
        if exit.launch == 1 { facts.backupBytesAtFirstLaunch = facts.backupBytes }
        facts.launches.append(CheckFacts.Launch(number: exit.launch, status: exit.status, purgedBefore: exit.purgedBefore))
    }

    /// The report once every launch has ended, with the denials of the whole run (read
    /// once the last daemon has written its log); the growth only counts with several launches.
    func report(_ store: Store, name: String, since: timespec, settings: CheckSettings, replay: String?) -> CheckReport {
        var facts = facts
        let start = AuditLog.recordTime(since)
        facts.denials = AuditLog.read(stateFD: store.stateFD).filter { $0.time >= start && !$0.isGrant }
        if facts.launches.count < 2 { facts.backupBytesAtFirstLaunch = nil }
        facts.replay = replay
        return CheckReport(store: name, facts: facts, settings: settings)
    }
}
