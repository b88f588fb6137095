#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import ContainerPolicy
import PolicySpec
import Testing

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
