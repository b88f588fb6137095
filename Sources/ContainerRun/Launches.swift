import ContainerPurge
import ContainerStore

/// `containerfs run --launches N`: the program run N times, as N launches of the app,
/// with `tmp/` emptied and the caches purged as chosen between them (SPEC §12).
///
/// Each launch is its own mount session: between launches the app is not running and the
/// container is not mounted — the moment iOS purges in — so the purge needs no word to a
/// kernel's caches, each launch finds a freshly mounted container (nothing the previous
/// one left in the kernel), and every end writes the tag index as a single `run` does. The
/// run lock is held across all launches, so no other run or mount slips in between. Each
/// unmount empties `tmp/` (SPEC §3), so `tmp/` is emptied between launches whatever is chosen.
public struct Launches: Sendable {
    /// What goes between two launches, besides `tmp/`.
    public enum PurgeBetween: String, CaseIterable, Sendable {
        /// Nothing else: caches stay.
        case none
        /// `tmp/` only: caches stay (the same as `none`, named for the reader).
        case tmp
        /// Every file of `Library/Caches`.
        case caches
        /// A seeded share of the cache files, and sometimes all of them.
        case random
    }

    /// How many launches (at least 1; the command line checks).
    public var count: Int
    /// The seed of `random`'s draws, printed so that a failure can be replayed.
    public var seed: UInt64
    /// What is purged between launches.
    public var purge: PurgeBetween

    /// `count` launches purging `purge` between them, drawing from `seed`.
    public init(count: Int, seed: UInt64, purge: PurgeBetween) {
        self.count = count
        self.seed = seed
        self.purge = purge
    }

    /// The options that replay these launches.
    public var replay: String { "--launches \(count) --purge-between \(purge.rawValue) --seed \(seed)" }

    /// Which of `files` cache files `random` purges: one draw in four takes all of them,
    /// otherwise a share of 0–100 % is drawn and each file (in path order) goes with that
    /// chance. The same generator state gives the same choice.
    public static func randomChoice(of files: Int, using generator: inout SplitMix64) -> [Int] {
        if generator.next() % 4 == 0 { return Array(0..<files) }
        let share = generator.next() % 101
        return (0..<files).filter { _ in generator.next() % 100 < share }
    }
}

/// SplitMix64 (Steele, Lea and Flood, 2014): a tiny generator whose whole state is one
/// number, so a seed replays every draw exactly on any machine.
public struct SplitMix64: RandomNumberGenerator, Sendable {
    private var state: UInt64

    /// A generator starting from `seed`.
    public init(seed: UInt64) { state = seed }

    /// The next 64 random bits.
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

extension Run {
    /// Runs the launches one after the other, purging between them; returns the first
    /// failing launch's status, or 0. A signal caught during any launch is passed on as in
    /// a single run, and no launch starts after it.
    func launch(_ launches: Launches, _ opened: Store, sandbox: Sandbox?, relay: SignalRelay, lock: RunLock,
                groups: [GroupMount] = []) throws(UserError) -> Int32 {
        let replay = launches.replay
        say("\(launches.count) launches, purging \(launches.purge.rawValue) between them, seed \(launches.seed)")
        var generator = SplitMix64(seed: launches.seed)
        var purged: String?
        for number in 1...launches.count {
            if number > 1 { relay.rearm() }
            let status = try launch(opened, sandbox: sandbox, relay: relay, lock: lock, groups: groups, number: number, purgedBefore: purged)
            if status != 0 {
                say("launch \(number) of \(launches.count) failed with status \(status) (seed \(launches.seed)); replay it with \(replay)")
                return status
            }
            if let signal = relay.caughtAny {
                say("launch \(number) of \(launches.count) ended after signal \(signal): no further launch")
                return status
            }
            guard number < launches.count else { break }
            let line = purgeBetween(opened, launches.purge, &generator)
            purged = line
            say("before launch \(number + 1): \(line)")
        }
        say("all \(launches.count) launches exited 0 (seed \(launches.seed))")
        return 0
    }

    /// Purges the caches as chosen (`tmp/` was emptied when the last launch ended) and says
    /// what went, as one line.
    private func purgeBetween(_ store: Store, _ purge: Launches.PurgeBetween, _ generator: inout SplitMix64) -> String {
        let caches = Tags.scan(store, kinds: [.cache]).sorted { $0.path.lexicographicallyPrecedes($1.path) }
        let chosen: [Tag]
        switch purge {
        case .none, .tmp: chosen = []
        case .caches: chosen = caches
        case .random: chosen = Launches.randomChoice(of: caches.count, using: &generator).map { caches[$0] }
        }
        let removed = Purge.remove(chosen, from: store)
        let kept = caches.count - removed.files
        let what =
            removed.files == 0
            ? "caches kept"
            : removed.files == caches.count
                ? "all \(caches.count) cache file\(caches.count == 1 ? "" : "s") purged"
                : "\(removed.files) of \(caches.count) cache files purged"
        return "tmp/ emptied; \(what) (\(removed.bytes) bytes freed, \(kept) file\(kept == 1 ? "" : "s") kept)"
    }

    private func say(_ line: String) {
        FileHandleOutput.standardError.write("containerfs: \(line)\n")
    }
}
