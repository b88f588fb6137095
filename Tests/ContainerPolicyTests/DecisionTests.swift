#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import ContainerPolicy
import PolicySpec
import Testing

/// One cell of the area × operation table, for one location of that area.
struct SinglePathCase: Sendable, CustomTestStringConvertible {
    let operation: SinglePathOperation
    let location: Location
    let expected: Expected
    var testDescription: String { "\(operation.rawValue)(\(name(location))) → \(expected)" }
}

let singlePathCases: [SinglePathCase] = Kind.allCases.flatMap { kind in
    kind.locations.flatMap { location in
        SinglePathOperation.allCases.enumerated().map { column, operation in
            SinglePathCase(operation: operation, location: location, expected: singlePathTable[kind]![column])
        }
    }
}

@Suite("Decisions on one path")
struct DecisionTests {
    @Test("The table covers every kind of location and every operation")
    func tableIsComplete() {
        #expect(Set(singlePathTable.keys) == Set(Kind.allCases))
        for (kind, row) in singlePathTable {
            #expect(row.count == SinglePathOperation.allCases.count, "row \(kind)")
        }
        // 9 kinds, the standard one counting each of the 7 directories, × 5 operations.
        #expect(singlePathCases.count == (8 + StandardDirectory.allCases.count) * 5)
    }

    @Test("Area × operation", arguments: singlePathCases)
    func decide(_ cell: SinglePathCase) {
        check(Policy.decide(cell.operation(cell.location)), cell.expected, cell.testDescription)
    }

    @Test("allows(_:) agrees with decide(_:)", arguments: singlePathCases)
    func allowsAgreesWithDecide(_ cell: SinglePathCase) {
        let operation = cell.operation(cell.location)
        #expect(Policy.allows(operation) == (cell.expected == .allow))
    }

    @Test("The inbox may be read and emptied, never written")
    func inbox() {
        let item = Location.inside(.inbox)
        #expect(Policy.decide(.read(item)) == .allow)
        #expect(Policy.decide(.delete(item)) == .allow)
        for operation in [Operation.create(item), .changeContent(item), .changeMetadata(item)] {
            #expect(Policy.decide(operation) == .deny(.inboxIsReadDeleteOnly), "\(operation)")
        }
        // The Inbox folder itself is structure, not inbox: it cannot be removed.
        #expect(Policy.decide(.delete(.standard(.inbox))) == .deny(.structureIsFixed))
    }

    @Test("A standard directory cannot be deleted, changed or chmod'ed", arguments: StandardDirectory.allCases)
    func standardDirectoryIsFixed(_ directory: StandardDirectory) {
        let location = Location.standard(directory)
        #expect(Policy.decide(.read(location)) == .allow)
        #expect(Policy.decide(.delete(location)) == .deny(.structureIsFixed))
        #expect(Policy.decide(.changeMetadata(location)) == .deny(.structureIsFixed))
        #expect(Policy.decide(.changeContent(location)) == .deny(.structureIsFixed))
        #expect(Policy.decide(.create(location)) == .deny(.structureIsFixed))
    }
}

/// Each rule's errno and whether it is audited, checked against SPEC §2 directly.
@Suite("Denials")
struct DenialTests {
    @Test(
        "Each denial's errno",
        arguments: [
            (Denial.bundleIsReadOnly, "EPERM"),
            (.structureIsFixed, "EPERM"),
            (.inboxIsReadDeleteOnly, "EACCES"),
            (.linkWouldExposeReadOnlyFile, "EPERM"),
            (.notInContainer, "ENOENT"),
            (.nameIsReserved, "EPERM"),
        ])
    func errno(_ denial: Denial, _ expected: String) {
        #expect(errnoName(denial.errno) == expected)
    }

    @Test("Every denial a program can tell from an absent file is audited")
    func audited() {
        let all: [Denial] = [
            .bundleIsReadOnly, .structureIsFixed, .inboxIsReadDeleteOnly,
            .linkWouldExposeReadOnlyFile, .notInContainer, .nameIsReserved,
        ]
        for denial in all {
            #expect(denial.isAudited == (denial != .notInContainer), "\(denial)")
        }
    }

    @Test("The audit log's rule names are stable", arguments: [
        (Denial.bundleIsReadOnly, "bundleIsReadOnly"),
        (.structureIsFixed, "structureIsFixed"),
        (.inboxIsReadDeleteOnly, "inboxIsReadDeleteOnly"),
        (.linkWouldExposeReadOnlyFile, "linkWouldExposeReadOnlyFile"),
        (.notInContainer, "notInContainer"),
        (.nameIsReserved, "nameIsReserved"),
    ])
    func ruleName(_ denial: Denial, _ expected: String) {
        #expect(denial.rawValue == expected)
        #expect(Denial(rawValue: expected) == denial)
    }
}
