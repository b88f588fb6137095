import Testing

@testable import ContainerDurability

/// The pure model of a power-loss mount (docs/power-loss.md).
@Suite("Durability model")
struct DurabilityTests {
    @Test(arguments: [
        (Durability.Event.fsync, Durability.Effect.fileData),
        (.fdatasync, .fileData),
        (.synchronousWrite, .fileData),
        (.folderFsync, .folderNames),
        (.syncFileRange, Durability.Effect()),
        (.sync, Durability.Effect()),
        (.close, Durability.Effect()),
    ])
    func eachEventMakesDurableWhatTheTableSays(event: Durability.Event, effect: Durability.Effect) {
        #expect(Durability.effect(of: event) == effect)
    }

    @Test(arguments: Durability.Event.allCases)
    func underExt4AnySyncMakesEveryNameDurable(event: Durability.Event) {
        let posix = Durability.effect(of: event, model: .posix)
        let ext4 = Durability.effect(of: event, model: .ext4)
        #expect(!posix.contains(.allNames))
        #expect(ext4 == (posix.isEmpty ? [] : posix.union(.allNames)))
    }

    @Test func everyEventIsInTheTable() {
        // A new event must be placed in the table above: the count catches one left out.
        #expect(Durability.Event.allCases.count == 7)
    }

    @Test(arguments: [
        // A write inside, across the end of, and past the durable content.
        (Durability.Change.write(offset: 0, count: 10), 100 as Int64, 0..<10 as Range<Int64>),
        (.write(offset: 90, count: 20), 100, 90..<100),
        (.write(offset: 100, count: 20), 100, 0..<0),
        (.write(offset: 0, count: 10), 0, 0..<0),
        (.write(offset: Int64.max - 1, count: 10), 100, 0..<0),
        (.write(offset: -5, count: 10), 100, 0..<10),
        // Truncating keeps what lies below the new size; growing changes no durable byte.
        (.truncate(to: 0), 100, 0..<100),
        (.truncate(to: 40), 100, 40..<100),
        (.truncate(to: 400), 100, 0..<0),
        // Plain allocation changes no byte; punching a hole does; collapsing moves the rest.
        (.allocate(mode: 0, offset: 0, length: 50), 100, 0..<0),
        (.allocate(mode: 0x01, offset: 0, length: 50), 100, 0..<0),
        (.allocate(mode: 0x03, offset: 10, length: 20), 100, 10..<30),
        (.allocate(mode: 0x08, offset: 10, length: 20), 100, 10..<100),
        (.allocate(mode: 0x10, offset: 50, length: 100), 100, 50..<100),
    ])
    func aChangeOverwritesOnlyDurableBytesItCanAlter(change: Durability.Change, durableSize: Int64, expected: Range<Int64>) {
        #expect(Durability.overwritten(by: change, durableSize: durableSize) == expected)
    }

    @Test func rangesMergeAndReportWhatIsMissing() {
        var saved = ByteRanges()
        #expect(saved.missing(from: 0..<10) == [0..<10])
        saved.insert(10..<20)
        saved.insert(30..<40)
        #expect(saved.missing(from: 0..<50) == [0..<10, 20..<30, 40..<50])
        #expect(saved.missing(from: 12..<18) == [])
        #expect(saved.missing(from: 15..<35) == [20..<30])
        saved.insert(20..<30)   // touching both: one range
        #expect(saved.ranges == [10..<40])
        saved.insert(0..<5)
        saved.insert(45..<50)
        #expect(saved.ranges == [0..<5, 10..<40, 45..<50])
        saved.insert(3..<46)
        #expect(saved.ranges == [0..<50])
        #expect(saved.count == 50)
        saved.insert(60..<60)
        #expect(saved.ranges == [0..<50])
    }

    /// Against a byte-by-byte reference, seeded: random saves, each asked first what it misses.
    @Test func rangesAgreeWithEveryByteCountedApart() {
        var generator = SeededGenerator(seed: 7)
        for _ in 0..<200 {
            var saved = ByteRanges()
            var bytes = [Bool](repeating: false, count: 300)
            for _ in 0..<30 {
                let start = Int64.random(in: 0..<290, using: &generator)
                let range = start..<min(300, start + Int64.random(in: 0..<40, using: &generator))
                let expected = range.filter { !bytes[Int($0)] }
                #expect(saved.missing(from: range).flatMap { Array($0) } == expected)
                saved.insert(range)
                range.forEach { bytes[Int($0)] = true }
            }
            #expect(saved.ranges.flatMap { Array($0) } == bytes.indices.filter { bytes[$0] }.map { Int64($0) })
            #expect(zip(saved.ranges, saved.ranges.dropFirst()).allSatisfy { $0.upperBound < $1.lowerBound })
        }
    }

    /// A database rewriting every other page of a big file between two syncs: each save finds
    /// its place by a binary search, so 20,000 of them take milliseconds (each once walked and
    /// copied every range saved before: 13 s here, and the daemon took 40 s over 40,000
    /// one-byte writes through a mount).
    @Test func manyScatteredSavesStayCheap() {
        var saved = ByteRanges()
        let started = ContinuousClock.now
        for page in stride(from: Int64(0), to: 40_000, by: 2) {
            let range = page * 4096..<page * 4096 + 4096
            _ = saved.missing(from: range)
            saved.insert(range)
        }
        #expect(saved.ranges.count == 20_000)
        #expect(saved.missing(from: 0..<8192) == [4096..<8192])
        let elapsed = ContinuousClock.now - started
        #expect(elapsed < .seconds(5), "20,000 saves took \(elapsed)")
    }

    @Test func theReportTravelsAndReads() {
        let report = PowerCutReport(files: 2, bytes: 8192, names: 3)
        #expect(PowerCutReport(wire: report.wire) == report)
        #expect(report.summary == "dropped 2 files (8192 bytes), 3 names")
        #expect(PowerCutReport().summary == "nothing to drop")
        #expect(PowerCutReport(files: 1, bytes: 1, names: 1).summary == "dropped 1 file (1 byte), 1 name")
        #expect(PowerCutReport(names: 2).summary == "dropped 2 names")
        #expect(PowerCutReport(files: 1, bytes: 10).summary == "dropped 1 file (10 bytes)")
        #expect(PowerCutReport(untracked: 1).summary == "nothing to drop; 1 change could not be undone and stayed")
        #expect(PowerCutReport(wire: "1 2 3") == nil)
        #expect(PowerCutReport(wire: "1 -2 3 0") == nil)
        #expect(PowerCutReport(wire: "a b c d") == nil)
    }
}

/// SplitMix64: the same numbers for the same seed, on every platform.
struct SeededGenerator: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
