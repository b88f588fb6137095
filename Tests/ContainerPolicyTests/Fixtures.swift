#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import ContainerPolicy
import PolicySpec
import Testing

/// The layout every table uses unless it says otherwise.
let layout = ContainerLayout(bundleName: Array("Demo.app".utf8))

/// The bytes of a name or path written in a table.
func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

/// A path from `/`-separated text; the tables only hold valid paths.
func path(_ text: String) -> ContainerPath { ContainerPath(bytes: bytes(text))! }

/// Checks `decision` against `expected`: the same outcome, the same rule, the same errno.
func check(
    _ decision: Decision, _ expected: Expected, _ comment: @autoclosure () -> String,
    sourceLocation: SourceLocation = #_sourceLocation
) {
    switch (expected, decision) {
    case (.allow, _):
        #expect(decision == .allow, "\(comment())", sourceLocation: sourceLocation)
    case (.deny(let denial, let errno), .deny(let actual)):
        #expect(actual == denial, "\(comment())", sourceLocation: sourceLocation)
        #expect(
            errnoName(actual.errno) == errnoName(errno), "\(comment()): errno",
            sourceLocation: sourceLocation)
    case (.denyWithErrno(let errno), .deny(let actual)):
        #expect(
            errnoName(actual.errno) == errnoName(errno), "\(comment()): errno of \(actual.rawValue)",
            sourceLocation: sourceLocation)
    case (_, .allow):
        Issue.record("\(comment()): allowed, expected \(expected)", sourceLocation: sourceLocation)
    }
}

/// A short name for a location in test names and failure messages.
func name(_ location: Location) -> String {
    switch location {
    case .root: "root"
    case .standard(let directory): directory.path.description
    case .bundle: "bundle"
    case .inside(let area): "inside(\(area.rawValue))"
    case .foreign: "foreign"
    case .hidden: "hidden"
    }
}
