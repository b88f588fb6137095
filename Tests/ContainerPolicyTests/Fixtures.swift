#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import ContainerPolicy
import Testing

/// The layout every table uses unless it says otherwise.
let layout = ContainerLayout(bundleName: Array("Demo.app".utf8))

/// The bytes of a name or path written in a table.
func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

/// A path from `/`-separated text; the tables only hold valid paths.
func path(_ text: String) -> ContainerPath { ContainerPath(bytes: bytes(text))! }

/// The kinds of location SPEC §2's table distinguishes, each with every location of that kind.
///
/// The structure row of the spec is split into the root, the standard directories and
/// the foreign names at the root, and the hidden names get a row of their own, so that a
/// rule that treats one of them differently shows up as a failing cell.
enum Kind: String, CaseIterable, Sendable {
    case root, standard, foreign, bundle, inbox, data, cache, temporary, hidden

    /// Every location of this kind; the standard directories are all listed.
    var locations: [Location] {
        switch self {
        case .root: [.root]
        case .standard: StandardDirectory.allCases.map(Location.standard)
        case .foreign: [.foreign]
        case .bundle: [.bundle]
        case .inbox: [.inside(.inbox)]
        case .data: [.inside(.data)]
        case .cache: [.inside(.cache)]
        case .temporary: [.inside(.temporary)]
        case .hidden: [.hidden]
        }
    }

    /// The row or column of this kind in the tables.
    var index: Int { Self.allCases.firstIndex(of: self)! }
}

/// What a table expects of `Policy.decide`.
///
/// A denial names both its `Denial` case and its errno, written out independently, so a
/// wrong rule and a wrong errno mapping each fail on their own.
enum Expected: Hashable, Sendable, CustomStringConvertible {
    case allow
    case deny(Denial, errno: Int32)
    /// A denial whose errno SPEC §2 fixes but for which the engine has no matching rule
    /// name yet; only the errno is checked.
    case denyWithErrno(Int32)

    static let ok = Expected.allow
    static let bundle = Expected.deny(.bundleIsReadOnly, errno: EPERM)
    static let fixed = Expected.deny(.structureIsFixed, errno: EPERM)
    static let inbox = Expected.deny(.inboxIsReadDeleteOnly, errno: EACCES)
    static let link = Expected.deny(.linkWouldExposeReadOnlyFile, errno: EPERM)
    static let absent = Expected.deny(.notInContainer, errno: ENOENT)
    static let reserved = Expected.deny(.nameIsReserved, errno: EPERM)
    static let eperm = Expected.denyWithErrno(EPERM)
    static let eacces = Expected.denyWithErrno(EACCES)

    var description: String {
        switch self {
        case .allow: "allow"
        case .deny(let denial, let errno): "deny(\(denial.rawValue), \(errnoName(errno)))"
        case .denyWithErrno(let errno): "deny(\(errnoName(errno)))"
        }
    }
}

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

/// A symbolic name for the errno values the policy uses, so failures read as the spec does.
func errnoName(_ code: Int32) -> String {
    switch code {
    case EPERM: "EPERM"
    case EACCES: "EACCES"
    case ENOENT: "ENOENT"
    case EROFS: "EROFS"
    default: "errno \(code)"
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
