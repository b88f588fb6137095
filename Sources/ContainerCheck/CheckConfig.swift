import ContainerPurge
import ContainerStore
import Foundation

/// The config file an app's repository may hold, `.containerfs-check.json` (docs/check.md):
///
///     { "backupBudget": "20M", "backupGrowth": "5M", "largeFile": "5M",
///       "failOn": ["backup-budget", "denials"], "warnOnly": false, "listLimit": 10 }
///
/// Every key is optional; an unknown key or a bad value is a misuse (exit 64), so that a
/// typo never silently loosens the gate.
public enum CheckConfig {
    /// The name `check` and `run --check` look for in the working directory.
    public static let defaultFileName = ".containerfs-check.json"

    /// The keys the file may hold.
    static let keys: Set<String> = ["backupBudget", "backupGrowth", "largeFile", "failOn", "warnOnly", "listLimit"]

    /// `settings` with what the file's `contents` set; `name` is for the error.
    public static func apply(_ contents: [UInt8], name: String, to settings: CheckSettings) throws(UserError) -> CheckSettings {
        func bad(_ what: String) -> UserError { UserError.usage("\(name): \(what) (see docs/check.md)") }
        let parsed: Any
        do { parsed = try JSONSerialization.jsonObject(with: Data(contents)) } catch {
            throw bad("not JSON: \(error.localizedDescription)")
        }
        guard let object = parsed as? [String: Any] else { throw bad("expected a JSON object") }
        if let unknown = object.keys.sorted().first(where: { !keys.contains($0) }) {
            throw bad("unknown key '\(unknown)'; known: \(keys.sorted().joined(separator: ", "))")
        }
        var settings = settings
        func size(_ key: String) throws(UserError) -> Int64? {
            guard let value = object[key] else { return nil }
            // A string only: JSON numbers lose exactness past 2^53, and "20M" reads better.
            guard let text = value as? String, let bytes = Quantity.bytes(text) else {
                throw bad("\(key) must be a size as a string: \"20M\", \"1G\" or bytes as \"5000\"")
            }
            return bytes
        }
        if let bytes = try size("backupBudget") { settings.backupBudget = bytes }
        if let bytes = try size("backupGrowth") { settings.backupGrowth = bytes }
        if let bytes = try size("largeFile") { settings.largeFile = bytes }
        if let value = object["failOn"] {
            guard let names = value as? [String] else { throw bad("failOn must be a list of rule names") }
            settings.failOn = try CheckSettings.rules(names.joined(separator: ","), what: "\(name)'s failOn")
        }
        if let value = object["warnOnly"] {
            guard let warnOnly = value as? Bool else { throw bad("warnOnly must be true or false") }
            if warnOnly { settings.failOn = [] }
        }
        if let value = object["listLimit"] {
            guard let limit = value as? Int, (0...100_000).contains(limit) else {
                throw bad("listLimit must be a whole number from 0 to 100000")
            }
            settings.listLimit = limit
        }
        return settings
    }
}
