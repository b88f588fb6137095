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

    // MARK: --share-edits random

    /// Edits replay from the seed, act only on files still there (a deleted file is never
    /// edited again, a renamed one is edited under its new name), keep a renamed file's
    /// extension, add a file when none is left, and make every kind over many draws.
    @Test func shareEditsReplayAndActOnlyOnFilesStillThere() {
        let files: [[[UInt8]]] = [[Array("a.db".utf8)], [Array("b".utf8)], [Array("sub".utf8), Array("c.txt".utf8)]]
        var kinds: Set<String> = []
        for seed in 0..<200 as Range<UInt64> {
            var first = SplitMix64(seed: seed), second = SplitMix64(seed: seed)
            let edits = Launches.randomEdits(of: files, beforeLaunch: 3, using: &first)
            #expect(edits == Launches.randomEdits(of: files, beforeLaunch: 3, using: &second))
            #expect((1...3).contains(edits.count))
            var present = Set(files.map { Array($0.joined(separator: [0x2F])) })
            for edit in edits {
                switch edit {
                case .add(let path):
                    kinds.insert("add")
                    #expect(path.count == 1 && String(decoding: path[0], as: UTF8.self).hasPrefix("Shared 3-"))
                case .rename(let from, let to):
                    kinds.insert("rename")
                    #expect(present.remove(Array(from.joined(separator: [0x2F]))) != nil, "renamed a file not there: \(edit)")
                    #expect(Array(from.dropLast()) == Array(to.dropLast()), "renamed in its folder")
                    let old = String(decoding: from.last ?? [], as: UTF8.self), new = String(decoding: to.last ?? [], as: UTF8.self)
                    #expect(new.hasPrefix("renamed-3-") && (old.contains(".") ? new.hasSuffix(String(old[old.lastIndex(of: ".")!...])) : !new.contains(".")))
                    present.insert(Array(to.joined(separator: [0x2F])))
                case .replace(let path):
                    kinds.insert("replace")
                    #expect(present.contains(Array(path.joined(separator: [0x2F]))), "replaced a file not there: \(edit)")
                case .delete(let path):
                    kinds.insert("delete")
                    #expect(present.remove(Array(path.joined(separator: [0x2F]))) != nil, "deleted a file not there: \(edit)")
                }
            }
        }
        #expect(kinds == ["add", "rename", "replace", "delete"])
        var generator = SplitMix64(seed: 1)
        #expect(Launches.randomEdits(of: [], beforeLaunch: 2, using: &generator).allSatisfy { if case .add = $0 { true } else { false } })
        #expect(Launches(count: 4, seed: 9, purge: .tmp, shareEdits: true).replay == "--launches 4 --purge-between tmp --share-edits random --seed 9")
        #expect(Launches(count: 4, seed: 9, purge: .caches).replay == "--launches 4 --purge-between caches --seed 9")
    }
}

/// The moments of `run --launches --power-cut/--kill` (docs/power-loss.md).
@Suite("Launch events")
struct LaunchEventTests {
    @Test func theSameSeedGivesTheSameMomentsWithinTheWindow() {
        let event = Launches.Event(kind: .powerCut, moment: .random(within: 1.5))
        let first = Launches(count: 6, seed: 42, purge: .tmp, event: event)
        let again = Launches(count: 6, seed: 42, purge: .tmp, event: event)
        let other = Launches(count: 6, seed: 43, purge: .tmp, event: event)
        let moments = (1...6).map { first.moment(ofLaunch: $0) }
        #expect(moments == (1...6).map { again.moment(ofLaunch: $0) })
        #expect(moments != (1...6).map { other.moment(ofLaunch: $0) })
        // Every launch but the last, each within the window, in milliseconds.
        #expect(moments.last == .some(nil))
        for moment in moments.dropLast() {
            let seconds = try! #require(moment)
            #expect(seconds >= 0 && seconds <= 1.5)
            #expect((seconds * 1000).rounded() == seconds * 1000)
        }
    }

    @Test func aChosenMomentAndTheReplayOptions() {
        let launches = Launches(count: 3, seed: 7, purge: .caches, event: .init(kind: .kill, moment: .at(0.25)))
        #expect(launches.moment(ofLaunch: 1) == 0.25)
        #expect(launches.moment(ofLaunch: 3) == nil)
        #expect(launches.replay == "--launches 3 --purge-between caches --seed 7 --kill 0.25")
        #expect(Launches(count: 2, seed: 1, purge: .tmp).moment(ofLaunch: 1) == nil)
        #expect(Launches.Moment("random", within: 2) == .random(within: 2))
        #expect(Launches.Moment("1.5", within: 2) == .at(1.5))
        for bad in ["-1", "soon", "nan", "inf", ""] { #expect(Launches.Moment(bad, within: 2) == nil) }
    }

    @Test func aSeededSuspensionMomentInEveryLaunch() {
        var first = Launches(count: 5, seed: 42, purge: .tmp)
        first.randomSuspension = 3
        var again = Launches(count: 5, seed: 42, purge: .random, shareEdits: true,
                             event: .init(kind: .kill, moment: .random(within: 3)))
        again.randomSuspension = 3
        var other = first
        other.seed = 43
        let moments = (1...5).map { first.suspensionMoment(ofLaunch: $0) }
        // The same seed, the same moments, whatever else draws from it; another seed, others.
        #expect(moments == (1...5).map { again.suspensionMoment(ofLaunch: $0) })
        #expect(moments != (1...5).map { other.suspensionMoment(ofLaunch: $0) })
        // Not the power cut's or kill's stream: a kill and a suspension at one moment would hide each other.
        #expect(moments.dropLast() != (1...4).map { again.moment(ofLaunch: $0) })
        for moment in moments {   // every launch, the last too, within the window, in milliseconds
            let seconds = try! #require(moment)
            #expect(seconds >= 0 && seconds <= 3)
            #expect((seconds * 1000).rounded() == seconds * 1000)
        }
        #expect(first.suspensionMoment(ofLaunch: 0) == nil && first.suspensionMoment(ofLaunch: 6) == nil)
        #expect(Launches(count: 2, seed: 1, purge: .tmp).suspensionMoment(ofLaunch: 1) == nil)
        #expect(first.replay == "--launches 5 --purge-between tmp --seed 42 --suspend-after random --within 3.0")
        #expect(again.replay.hasSuffix("--kill random --within 3.0 --suspend-after random"))
    }
}
