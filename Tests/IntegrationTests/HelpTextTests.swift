import Foundation
import Testing

/// The help of every command, as a person reads it on an 80-column terminal: its discussion
/// is written as paragraphs that ArgumentParser wraps, never wrapped by hand (ArgumentParser
/// would wrap a hand-wrapped line again, leaving a word or two alone on a line). The man
/// pages are made from the same text (docs/packaging.md).
@Suite("Help text")
struct HelpTextTests {
    /// Every command's path (["run"], ["protect"]…), from the command's own description of itself.
    static func commandPaths() throws -> [[String]] {
        let dump = try runProgram([containerfsBinary, "--experimental-dump-help"])
        let json = try #require(try JSONSerialization.jsonObject(with: Data(dump.stdout.utf8)) as? [String: Any])
        var paths: [[String]] = []
        func walk(_ command: [String: Any], _ path: [String]) {
            paths.append(path)
            for sub in command["subcommands"] as? [[String: Any]] ?? [] {
                guard let name = sub["commandName"] as? String, name != "help" else { continue }
                walk(sub, path + [name])
            }
        }
        walk(try #require(json["command"] as? [String: Any]), [])
        return paths
    }

    @Test func everyDiscussionIsWrappedByTheParserAt80Columns() throws {
        let paths = try Self.commandPaths()
        #expect(paths.count > 10, "\(paths)")
        var environment = ProcessInfo.processInfo.environment
        environment["COLUMNS"] = "80"
        for path in paths {
            let result = try runProgram([containerfsBinary] + path + ["--help"], environment: environment)
            let name = (["containerfs"] + path).joined(separator: " ")
            #expect(result.status == 0, "\(name): \(result)")
            // The discussion: the lines between OVERVIEW and USAGE.
            let lines = result.stdout.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
            let end = lines.firstIndex { $0.hasPrefix("USAGE:") } ?? lines.count
            let discussion = Array(lines[min(1, end)..<end])
            for (index, line) in discussion.enumerated() {
                #expect(line.count <= 80, "\(name): a line of \(line.count) columns: \(line)")
                // Wrapped by the parser, a line of a paragraph is followed by one whose first
                // word did not fit on it (it fills to 79 columns). Examples are indented.
                guard index + 1 < discussion.count, !line.isEmpty, !line.hasPrefix(" ") else { continue }
                let next = discussion[index + 1]
                guard let word = next.split(separator: " ").first, !next.hasPrefix(" ") else { continue }
                #expect(line.count + 1 + word.count > 79,
                        "\(name): a line broken by hand: \"\(line)\" could have taken \"\(word)\"")
            }
        }
    }
}
