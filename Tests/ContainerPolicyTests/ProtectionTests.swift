#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import ContainerPolicy
import Testing

/// SPEC §11's table, written out cell by cell: for each class and device state, whether
/// opening an existing file, creating one, and using a descriptor opened while the data was
/// available is allowed (`o`) or denied (`x`).
let protectionTable: [ProtectionClass: [DeviceState: String]] = [
    //                                       open create descriptor
    .complete: [.unlocked: "ooo", .locked: "xxx", .lockedSinceBoot: "xxx"],
    .completeUnlessOpen: [.unlocked: "ooo", .locked: "xoo", .lockedSinceBoot: "xoo"],
    .completeUntilFirstUserAuthentication: [.unlocked: "ooo", .locked: "ooo", .lockedSinceBoot: "xxo"],
    .none: [.unlocked: "ooo", .locked: "ooo", .lockedSinceBoot: "ooo"],
]

struct ProtectionCase: Sendable, CustomTestStringConvertible {
    let protection: ProtectionClass
    let state: DeviceState
    let access: ProtectedAccess
    let allowed: Bool
    var testDescription: String { "\(protection.rawValue) \(state.rawValue) \(access) → \(allowed ? "allow" : "deny")" }
}

let protectionCases: [ProtectionCase] = ProtectionClass.allCases.flatMap { protection in
    DeviceState.allCases.flatMap { state in
        zip([ProtectedAccess.open, .create, .descriptor], protectionTable[protection]![state]!).map {
            ProtectionCase(protection: protection, state: state, access: $0, allowed: $1 == "o")
        }
    }
}

@Suite("Data protection")
struct ProtectionTests {
    @Test("class × state × access", arguments: protectionCases)
    func decision(_ cell: ProtectionCase) {
        let expected: Decision = cell.allowed ? .allow : .deny(.protectedDataUnavailable)
        #expect(ProtectionPolicy.decide(cell.protection, cell.state, cell.access) == expected)
    }

    @Test("the table covers every class, state and access")
    func coverage() {
        #expect(protectionCases.count == ProtectionClass.allCases.count * DeviceState.allCases.count * 3)
    }

    @Test("a denial is EPERM, audited")
    func denial() {
        #expect(Denial.protectedDataUnavailable.errno == EPERM)
        #expect(Denial.protectedDataUnavailable.isAudited)
        #expect(Denial.protectedDataUnavailable.rawValue == "protectedDataUnavailable")
    }

    @Test("only exact class names are values", arguments: [
        ("complete", ProtectionClass.complete), ("completeUnlessOpen", .completeUnlessOpen),
        ("completeUntilFirstUserAuthentication", .completeUntilFirstUserAuthentication), ("none", .none),
    ])
    func values(_ text: String, _ protection: ProtectionClass) {
        #expect(ProtectionClass(value: Array(text.utf8)) == protection)
    }

    @Test("anything else is no class", arguments: ["", "Complete", "complete\0", "complete\n", " none", "nonE", "completeUnless", "\u{FF}"])
    func badValues(_ text: String) {
        #expect(ProtectionClass(value: Array(text.utf8)) == nil)
    }

    @Test("only complete guards open descriptors")
    func guards() {
        #expect(ProtectionClass.allCases.filter(ProtectionPolicy.guardsDescriptors) == [.complete])
    }

    @Test("unlocking ends locked since boot; locking again is locked, not since boot")
    func transitions() {
        #expect(DeviceState.lockedSinceBoot.switched(locked: false) == .unlocked)
        #expect(DeviceState.lockedSinceBoot.switched(locked: true) == .lockedSinceBoot)
        #expect(DeviceState.unlocked.switched(locked: true) == .locked)
        #expect(DeviceState.locked.switched(locked: true) == .locked)
        #expect(DeviceState.locked.switched(locked: false) == .unlocked)
    }
}
