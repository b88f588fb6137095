#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import ContainerPolicy

// SPEC §2's tables, written out independently of the engine: ContainerPolicyTests checks
// `Policy.decide` against them cell by cell, and the differential fuzz test of
// IntegrationTests uses them as its oracle for what the mount must answer.

/// The kinds of location SPEC §2's table distinguishes, each with every location of that kind.
///
/// The structure row of the spec is split into the root, the standard directories and
/// the foreign names at the root, and the hidden names get a row of their own, so that a
/// rule that treats one of them differently shows up as a failing cell.
public enum Kind: String, CaseIterable, Sendable {
    case root, standard, foreign, bundle, inbox, data, cache, temporary, hidden

    /// Every location of this kind; the standard directories are all listed.
    public var locations: [Location] {
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
    public var index: Int { Self.allCases.firstIndex(of: self)! }
}

/// What a table expects of `Policy.decide`.
///
/// A denial names both its `Denial` case and its errno, written out independently, so a
/// wrong rule and a wrong errno mapping each fail on their own.
public enum Expected: Hashable, Sendable, CustomStringConvertible {
    case allow
    case deny(Denial, errno: Int32)
    /// A denial whose errno SPEC §2 fixes but for which the engine has no matching rule
    /// name yet; only the errno is checked.
    case denyWithErrno(Int32)

    public static let ok = Expected.allow
    public static let bundle = Expected.deny(.bundleIsReadOnly, errno: EPERM)
    public static let fixed = Expected.deny(.structureIsFixed, errno: EPERM)
    public static let inbox = Expected.deny(.inboxIsReadDeleteOnly, errno: EACCES)
    public static let link = Expected.deny(.linkWouldExposeReadOnlyFile, errno: EPERM)
    public static let absent = Expected.deny(.notInContainer, errno: ENOENT)
    public static let reserved = Expected.deny(.nameIsReserved, errno: EPERM)
    public static let eperm = Expected.denyWithErrno(EPERM)
    public static let eacces = Expected.denyWithErrno(EACCES)

    public var description: String {
        switch self {
        case .allow: "allow"
        case .deny(let denial, let errno): "deny(\(denial.rawValue), \(errnoName(errno)))"
        case .denyWithErrno(let errno): "deny(\(errnoName(errno)))"
        }
    }
}

/// A symbolic name for the errno values the policy uses, so failures read as the spec does.
public func errnoName(_ code: Int32) -> String {
    switch code {
    case EPERM: "EPERM"
    case EACCES: "EACCES"
    case ENOENT: "ENOENT"
    case EROFS: "EROFS"
    default: "errno \(code)"
    }
}

/// The operations that name one node.
public enum SinglePathOperation: String, CaseIterable, Sendable {
    case read, create, changeContent, changeMetadata, delete

    /// The operation on `location`.
    public func callAsFunction(_ location: Location) -> Operation {
        switch self {
        case .read: .read(location)
        case .create: .create(location)
        case .changeContent: .changeContent(location)
        case .changeMetadata: .changeMetadata(location)
        case .delete: .delete(location)
        }
    }
}

/// SPEC §2's table for the operations that name one node.
///
/// Columns: read (and list, stat, getxattr); create inside; change content; change
/// metadata (chmod, chown, utimens, setxattr, removexattr); delete.
public let singlePathTable: [Kind: [Expected]] = [
    //           read       create     content    metadata   delete
    .root:      [.ok,       .fixed,    .fixed,    .fixed,    .fixed],
    .standard:  [.ok,       .fixed,    .fixed,    .fixed,    .fixed],
    .foreign:   [.ok,       .fixed,    .fixed,    .fixed,    .fixed],
    .bundle:    [.ok,       .bundle,   .bundle,   .bundle,   .bundle],
    .inbox:     [.ok,       .inbox,    .inbox,    .inbox,    .ok],
    .data:      [.ok,       .ok,       .ok,       .ok,       .ok],
    .cache:     [.ok,       .ok,       .ok,       .ok,       .ok],
    .temporary: [.ok,       .ok,       .ok,       .ok,       .ok],
    // SPEC §1: the state folder is never listed, reachable or creatable. Reading or
    // removing it answers as if it did not exist; making one, or changing one the
    // program cannot reach anyway, is refused as a reserved name.
    .hidden:    [.absent,   .reserved, .reserved, .reserved, .absent],
]

/// The operations that name two nodes, each checked at both ends (SPEC §2).
public enum TwoPathOperation: String, CaseIterable, Sendable {
    case rename, exchange, link

    /// The operation from `source` to `target`.
    public func callAsFunction(from source: Location, to target: Location) -> Operation {
        switch self {
        case .rename: .rename(from: source, to: target, exchange: false)
        case .exchange: .rename(from: source, to: target, exchange: true)
        case .link: .link(from: source, to: target)
        }
    }

    /// The table for this operation: rows are the source's kind, columns the target's,
    /// both in `Kind.allCases` order.
    public var table: [[Expected]] {
        switch self {
        case .rename: renameTable
        case .exchange: exchangeTable
        case .link: linkTable
        }
    }
}

// The tables read as SPEC §2 does: the source must allow "rename out of" (delete), the
// target "rename into" (create); a bundle or structure denial (EPERM) wins over an inbox
// denial (EACCES); a hidden name does not exist, whatever the other end. When both ends
// are refused by EPERM rules, the source's rule is the one named.

/// rename(2) without `RENAME_EXCHANGE`.
public let renameTable: [[Expected]] = [
    // target:      root       standard   foreign    bundle     inbox      data       cache      temporary  hidden
    /* root      */ [.fixed,    .fixed,    .fixed,    .fixed,    .fixed,    .fixed,    .fixed,    .fixed,    .fixed],
    /* standard  */ [.fixed,    .fixed,    .fixed,    .fixed,    .fixed,    .fixed,    .fixed,    .fixed,    .fixed],
    /* foreign   */ [.fixed,    .fixed,    .fixed,    .fixed,    .fixed,    .fixed,    .fixed,    .fixed,    .fixed],
    /* bundle    */ [.bundle,   .bundle,   .bundle,   .bundle,   .bundle,   .bundle,   .bundle,   .bundle,   .bundle],
    /* inbox     */ [.fixed,    .fixed,    .fixed,    .bundle,   .inbox,    .ok,       .ok,       .ok,       .reserved],
    /* data      */ [.fixed,    .fixed,    .fixed,    .bundle,   .inbox,    .ok,       .ok,       .ok,       .reserved],
    /* cache     */ [.fixed,    .fixed,    .fixed,    .bundle,   .inbox,    .ok,       .ok,       .ok,       .reserved],
    /* temporary */ [.fixed,    .fixed,    .fixed,    .bundle,   .inbox,    .ok,       .ok,       .ok,       .reserved],
    /* hidden    */ [.absent,   .absent,   .absent,   .absent,   .absent,   .absent,   .absent,   .absent,   .absent],
]

/// rename(2) with `RENAME_EXCHANGE`: each end both loses its entry and gains the other's,
/// so each end must allow rename out of and rename into; an inbox end is refused.
public let exchangeTable: [[Expected]] = [
    // target:      root       standard   foreign    bundle     inbox      data       cache      temporary  hidden
    /* root      */ [.fixed,    .fixed,    .fixed,    .fixed,    .fixed,    .fixed,    .fixed,    .fixed,    .absent],
    /* standard  */ [.fixed,    .fixed,    .fixed,    .fixed,    .fixed,    .fixed,    .fixed,    .fixed,    .absent],
    /* foreign   */ [.fixed,    .fixed,    .fixed,    .fixed,    .fixed,    .fixed,    .fixed,    .fixed,    .absent],
    /* bundle    */ [.bundle,   .bundle,   .bundle,   .bundle,   .bundle,   .bundle,   .bundle,   .bundle,   .absent],
    /* inbox     */ [.fixed,    .fixed,    .fixed,    .bundle,   .inbox,    .inbox,    .inbox,    .inbox,    .absent],
    /* data      */ [.fixed,    .fixed,    .fixed,    .bundle,   .inbox,    .ok,       .ok,       .ok,       .absent],
    /* cache     */ [.fixed,    .fixed,    .fixed,    .bundle,   .inbox,    .ok,       .ok,       .ok,       .absent],
    /* temporary */ [.fixed,    .fixed,    .fixed,    .bundle,   .inbox,    .ok,       .ok,       .ok,       .absent],
    /* hidden    */ [.absent,   .absent,   .absent,   .absent,   .absent,   .absent,   .absent,   .absent,   .absent],
]

/// link(2). SPEC §2: "A hard link whose source is in the bundle or the inbox is denied
/// (`EPERM`, `EACCES`)" — the inbox's own errno, which an EPERM target still beats. The
/// engine has no EACCES rule for links, so that row checks errno only.
public let linkTable: [[Expected]] = [
    // target:      root       standard   foreign    bundle     inbox      data       cache      temporary  hidden
    /* root      */ [.fixed,    .fixed,    .fixed,    .fixed,    .fixed,    .fixed,    .fixed,    .fixed,    .fixed],
    /* standard  */ [.fixed,    .fixed,    .fixed,    .fixed,    .fixed,    .fixed,    .fixed,    .fixed,    .fixed],
    /* foreign   */ [.fixed,    .fixed,    .fixed,    .fixed,    .fixed,    .fixed,    .fixed,    .fixed,    .fixed],
    /* bundle    */ [.link,     .link,     .link,     .link,     .link,     .link,     .link,     .link,     .link],
    /* inbox     */ [.eperm,    .eperm,    .eperm,    .eperm,    .eacces,   .eacces,   .eacces,   .eacces,   .eperm],
    /* data      */ [.fixed,    .fixed,    .fixed,    .bundle,   .inbox,    .ok,       .ok,       .ok,       .reserved],
    /* cache     */ [.fixed,    .fixed,    .fixed,    .bundle,   .inbox,    .ok,       .ok,       .ok,       .reserved],
    /* temporary */ [.fixed,    .fixed,    .fixed,    .bundle,   .inbox,    .ok,       .ok,       .ok,       .reserved],
    /* hidden    */ [.absent,   .absent,   .absent,   .absent,   .absent,   .absent,   .absent,   .absent,   .absent],
]

extension Kind {
    /// The kind of `location`.
    public init(_ location: Location) {
        switch location {
        case .root: self = .root
        case .standard: self = .standard
        case .foreign: self = .foreign
        case .bundle: self = .bundle
        case .inside(.inbox): self = .inbox
        case .inside(.data): self = .data
        case .inside(.cache): self = .cache
        case .inside(.temporary): self = .temporary
        case .inside(let area): preconditionFailure("the layout places nothing inside(\(area))")
        case .hidden: self = .hidden
        }
    }
}

extension Expected {
    /// The errno the program sees: nil when the operation is allowed.
    public var errno: Int32? {
        switch self {
        case .allow: nil
        case .deny(_, let errno), .denyWithErrno(let errno): errno
        }
    }

    /// Whether the denial is written to the audit log: every denial but "not in the
    /// container", which a program cannot tell from an absent file (SPEC §2).
    public var isAudited: Bool { errno != nil && self != .absent }
}

/// What SPEC §2's tables say of `operation`.
public func specified(_ operation: Operation) -> Expected {
    switch operation {
    case .read(let location): singlePathTable[Kind(location)]![0]
    case .create(let location): singlePathTable[Kind(location)]![1]
    case .changeContent(let location): singlePathTable[Kind(location)]![2]
    case .changeMetadata(let location): singlePathTable[Kind(location)]![3]
    case .delete(let location): singlePathTable[Kind(location)]![4]
    case .rename(let source, let target, let exchange):
        (exchange ? exchangeTable : renameTable)[Kind(source).index][Kind(target).index]
    case .link(let source, let target): linkTable[Kind(source).index][Kind(target).index]
    }
}
