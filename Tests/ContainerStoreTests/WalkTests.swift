import Foundation
import Testing

/// Every walk over a tree is linear in the files of one folder (issue 26 §4).
///
/// The quadratic pattern was `while let level = levels.last { … levels[levels.count - 1]
/// .names.removeLast() … }`: `level` is a second reference to the level's names, so each
/// removal copied the whole array (121 s of CPU for `update` of a bundle with 100,000
/// files in one folder). A timed test would flake on a shared machine; this one reads the
/// sources and refuses the pattern itself, and `bench/bundle_scale.py` shows the growth
/// (docs/benchmarks.md).
@Suite("Walks")
struct WalkTests {
    @Test func noWalkKeepsASecondReferenceToTheLevelItPops() throws {
        let sources = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Sources")
        let pattern = try Regex(#"while\s+let\s+\w+\s*=\s*\w+\.last\s*\{"#)
        var found: [String] = []
        var files = 0
        let walker = FileManager.default.enumerator(at: sources, includingPropertiesForKeys: nil)
        while let url = walker?.nextObject() as? URL {
            guard url.pathExtension == "swift" else { continue }
            files += 1
            let text = try String(contentsOf: url, encoding: .utf8)
            for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() where line.contains(pattern) {
                found.append("\(url.path.dropFirst(sources.path.count + 1)):\(number + 1): \(line.trimmingCharacters(in: .whitespaces))")
            }
        }
        #expect(files > 50, "the sources were not found at \(sources.path)")
        #expect(found.isEmpty, "pop the top level in place (levels[levels.count - 1].names.popLast()):\n\(found.joined(separator: "\n"))")
    }
}
