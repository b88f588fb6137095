#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import ContainerPolicy
import Testing

/// The operations that name two nodes, each checked at both ends (SPEC §2).
enum TwoPathOperation: String, CaseIterable, Sendable {
    case rename, exchange, link

    /// The operation from `source` to `target`.
    func callAsFunction(from source: Location, to target: Location) -> Operation {
        switch self {
        case .rename: .rename(from: source, to: target, exchange: false)
        case .exchange: .rename(from: source, to: target, exchange: true)
        case .link: .link(from: source, to: target)
        }
    }

    /// The table for this operation: rows are the source's kind, columns the target's,
    /// both in `Kind.allCases` order.
    var table: [[Expected]] {
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
let renameTable: [[Expected]] = [
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
let exchangeTable: [[Expected]] = [
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
let linkTable: [[Expected]] = [
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

/// One cell of a two-path table, for one pair of locations of those kinds.
struct TwoPathCase: Sendable, CustomTestStringConvertible {
    let operation: TwoPathOperation
    let source: Location
    let target: Location
    let expected: Expected
    var testDescription: String {
        "\(operation.rawValue)(\(name(source)) → \(name(target))) → \(expected)"
    }

    /// Every pair of locations, with the cell of their kinds.
    static func all(_ operation: TwoPathOperation) -> [TwoPathCase] {
        Kind.allCases.flatMap { sourceKind in
            Kind.allCases.flatMap { targetKind in
                sourceKind.locations.flatMap { source in
                    targetKind.locations.map { target in
                        TwoPathCase(
                            operation: operation, source: source, target: target,
                            expected: operation.table[sourceKind.index][targetKind.index])
                    }
                }
            }
        }
    }
}

/// Every location, each standard directory separately.
let allLocations = Kind.allCases.flatMap(\.locations)

@Suite("Decisions on two paths")
struct TwoPathDecisionTests {
    @Test("Each table has a row and a column per kind", arguments: TwoPathOperation.allCases)
    func tableIsComplete(_ operation: TwoPathOperation) {
        #expect(operation.table.count == Kind.allCases.count)
        for row in operation.table {
            #expect(row.count == Kind.allCases.count)
        }
        #expect(TwoPathCase.all(operation).count == allLocations.count * allLocations.count)
    }

    @Test("rename: source × target", arguments: TwoPathCase.all(.rename))
    func rename(_ cell: TwoPathCase) {
        check(Policy.decide(cell.operation(from: cell.source, to: cell.target)), cell.expected, cell.testDescription)
    }

    @Test("rename with RENAME_EXCHANGE: source × target", arguments: TwoPathCase.all(.exchange))
    func exchange(_ cell: TwoPathCase) {
        check(Policy.decide(cell.operation(from: cell.source, to: cell.target)), cell.expected, cell.testDescription)
    }

    @Test("link: source × target", arguments: TwoPathCase.all(.link))
    func link(_ cell: TwoPathCase) {
        check(Policy.decide(cell.operation(from: cell.source, to: cell.target)), cell.expected, cell.testDescription)
    }

    @Test("An exchange is refused with the same errno whichever end is named first", arguments: allLocations)
    func exchangeIsSymmetric(_ first: Location) {
        for second in allLocations {
            let forward = Policy.decide(.rename(from: first, to: second, exchange: true))
            let backward = Policy.decide(.rename(from: second, to: first, exchange: true))
            #expect(errno(of: forward) == errno(of: backward), "\(name(first)) ⇄ \(name(second))")
        }
    }

    // The cases the spec spells out, by name, so that a change to one of them reads plainly.

    @Test("EPERM beats EACCES: a bundle or structure end wins over an inbox end")
    func strictestDenialWins() {
        let item = Location.inside(.inbox)
        let documents = Location.standard(.documents)
        #expect(Policy.decide(.rename(from: item, to: .bundle, exchange: false)) == .deny(.bundleIsReadOnly))
        #expect(Policy.decide(.rename(from: .bundle, to: item, exchange: false)) == .deny(.bundleIsReadOnly))
        #expect(Policy.decide(.rename(from: item, to: documents, exchange: false)) == .deny(.structureIsFixed))
        #expect(Policy.decide(.rename(from: documents, to: item, exchange: false)) == .deny(.structureIsFixed))
        #expect(Policy.decide(.rename(from: item, to: .bundle, exchange: true)) == .deny(.bundleIsReadOnly))
        #expect(Policy.decide(.rename(from: .bundle, to: item, exchange: true)) == .deny(.bundleIsReadOnly))
        #expect(Policy.decide(.link(from: .inside(.data), to: .bundle)) == .deny(.bundleIsReadOnly))
        #expect(errno(of: Policy.decide(.rename(from: item, to: .bundle, exchange: false))) == "EPERM")
        #expect(errno(of: Policy.decide(.link(from: item, to: .bundle))) == "EPERM")
    }

    @Test("Out of the inbox into a writable area is allowed", arguments: [Area.data, .cache, .temporary])
    func renameOutOfInbox(_ area: Area) {
        #expect(Policy.decide(.rename(from: .inside(.inbox), to: .inside(area), exchange: false)) == .allow)
        // Into the inbox, or swapping with it, is not.
        #expect(
            Policy.decide(.rename(from: .inside(area), to: .inside(.inbox), exchange: false))
                == .deny(.inboxIsReadDeleteOnly))
        #expect(
            Policy.decide(.rename(from: .inside(.inbox), to: .inside(area), exchange: true))
                == .deny(.inboxIsReadDeleteOnly))
    }

    @Test("Within the inbox, a rename is refused with EACCES")
    func renameWithinInbox() {
        let item = Location.inside(.inbox)
        #expect(Policy.decide(.rename(from: item, to: item, exchange: false)) == .deny(.inboxIsReadDeleteOnly))
        #expect(Policy.decide(.rename(from: item, to: item, exchange: true)) == .deny(.inboxIsReadDeleteOnly))
    }

    @Test("Out of the inbox into a place that is not writable is refused", arguments: [
        Location.root, .standard(.documents), .standard(.inbox), .foreign, .bundle, .hidden,
    ])
    func renameOutOfInboxIntoReadOnly(_ target: Location) {
        let decision = Policy.decide(.rename(from: .inside(.inbox), to: target, exchange: false))
        #expect(decision != .allow)
        #expect(errno(of: decision) == "EPERM")
    }

    @Test("A hard link to a bundle file is refused with EPERM", arguments: [Area.data, .cache, .temporary])
    func linkFromBundle(_ area: Area) {
        #expect(Policy.decide(.link(from: .bundle, to: .inside(area))) == .deny(.linkWouldExposeReadOnlyFile))
    }

    /// SPEC §2: a hard link from the inbox is denied with `EACCES`, the inbox's errno.
    @Test("A hard link to an inbox file is refused with EACCES", arguments: [Area.data, .cache, .temporary, .inbox])
    func linkFromInbox(_ area: Area) {
        let decision = Policy.decide(.link(from: .inside(.inbox), to: .inside(area)))
        #expect(decision != .allow)
        #expect(errno(of: decision) == "EACCES")
    }

    @Test("A standard directory cannot be replaced, renamed or swapped", arguments: StandardDirectory.allCases)
    func standardDirectoryCannotMove(_ directory: StandardDirectory) {
        let location = Location.standard(directory)
        for area in [Area.data, .cache, .temporary] {
            let other = Location.inside(area)
            #expect(Policy.decide(.rename(from: other, to: location, exchange: false)) == .deny(.structureIsFixed))
            #expect(Policy.decide(.rename(from: location, to: other, exchange: false)) == .deny(.structureIsFixed))
            #expect(Policy.decide(.rename(from: other, to: location, exchange: true)) == .deny(.structureIsFixed))
            #expect(Policy.decide(.rename(from: location, to: other, exchange: true)) == .deny(.structureIsFixed))
            #expect(Policy.decide(.link(from: other, to: location)) == .deny(.structureIsFixed))
        }
    }

    private func errno(of decision: Decision) -> String? {
        if case .deny(let denial) = decision { errnoName(denial.errno) } else { nil }
    }
}
