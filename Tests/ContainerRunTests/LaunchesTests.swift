import Testing

@testable import ContainerRun

/// The draws behind `run --launches --purge-between random`: replayable from the seed.
@Suite("Launches")
struct LaunchesTests {
    @Test func splitMix64GivesTheReferenceSequence() {
        // The published test vector of SplitMix64 for seed 1234567.
        var generator = SplitMix64(seed: 1_234_567)
        #expect(
            [generator.next(), generator.next(), generator.next()] == [
                6_457_827_717_110_365_317, 3_203_168_211_198_807_973, 9_817_491_932_198_370_423,
            ])
    }

    /// The draw alone; that `run --launches --seed` replays the same files end to end is
    /// `LifecycleTests.randomPurgesReplay`.
    @Test func theSameGeneratorStateDrawsTheSameChoice() {
        for seed in [0, 7, 42, UInt64.max] as [UInt64] {
            var first = SplitMix64(seed: seed), second = SplitMix64(seed: seed)
            for _ in 0..<20 {
                #expect(Launches.randomChoice(of: 50, using: &first) == Launches.randomChoice(of: 50, using: &second))
            }
        }
    }

    @Test func aChoiceIsSometimesAllAndOtherwiseAShareInOrder() {
        var generator = SplitMix64(seed: 7)
        var all = 0, partial = 0
        for _ in 0..<200 {
            let chosen = Launches.randomChoice(of: 40, using: &generator)
            #expect(chosen == chosen.sorted() && Set(chosen).count == chosen.count && chosen.allSatisfy { (0..<40).contains($0) })
            if chosen.count == 40 { all += 1 } else { partial += 1 }
        }
        #expect(all > 20 && partial > 100, "about one purge in four takes all: \(all) of 200")
        #expect(Launches.randomChoice(of: 0, using: &generator) == [])
    }
}
