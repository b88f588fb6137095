import ContainerDurability
import ContainerPolicy
import ContainerPurge
import ContainerStore
import Foundation
import Glibc
import Synchronization

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
    /// Whether the user edits `Documents/` between launches through file sharing
    /// (`--share-edits random`): files renamed, replaced, deleted, added, drawn from `seed`.
    public var shareEdits: Bool

    /// What ends every launch but the last at a moment (`--power-cut`, `--kill`); nil: none.
    public var event: Event?
    /// Print the launches' report as JSON on stdout at the end (`--json`).
    public var json = false
    /// `--suspend-after random`: every launch is suspended at a moment drawn from `seed`
    /// between 0 and this many seconds (docs/groups.md); nil: no drawn suspension.
    public var randomSuspension: Double?

    /// `count` launches purging `purge` between them, drawing from `seed`.
    public init(count: Int, seed: UInt64, purge: PurgeBetween, shareEdits: Bool = false, event: Event? = nil) {
        self.count = count
        self.seed = seed
        self.purge = purge
        self.shareEdits = shareEdits
        self.event = event
    }

    /// A sudden end of a launch (docs/power-loss.md): at `moment`, the power is cut (what
    /// was never made durable is dropped) or the program is killed with SIGKILL (nothing
    /// dropped); its processes are killed either way and the next launch starts.
    public struct Event: Equatable, Sendable {
        public enum Kind: String, Sendable {
            case powerCut = "power-cut"
            case kill
        }
        public var kind: Kind
        /// When, in seconds after the program started.
        public var moment: Moment
        /// For a power cut: when a name change is durable (`--power-model`).
        public var model: Durability.NameModel
        public init(kind: Kind, moment: Moment, model: Durability.NameModel = .posix) {
            self.kind = kind
            self.moment = moment
            self.model = model
        }
    }

    /// When the event comes.
    public enum Moment: Equatable, Sendable {
        /// Drawn from the seed for each launch, between 0 and `within` seconds.
        case random(within: Double)
        /// This many seconds after the program started, in each launch.
        case at(Double)

        /// `random` or a number of seconds; nil for anything else.
        public init?(_ text: String, within: Double) {
            if text == "random" { self = .random(within: within); return }
            guard let seconds = Double(text), seconds.isFinite, seconds >= 0, seconds <= 86400 else { return nil }
            self = .at(seconds)
        }

        var option: String {
            switch self {
            case .random(let within): "random --within \(within)"
            case .at(let seconds): "\(seconds)"
            }
        }
    }

    /// The moment of the event in launch `number` (1-based), in seconds: the same seed
    /// gives the same moments, apart from the purge's draws, whatever the program does.
    public func moment(ofLaunch number: Int) -> Double? {
        guard let event, number < count else { return nil }
        switch event.moment {
        case .at(let seconds): return seconds
        case .random(let within):
            var generator = SplitMix64(seed: seed ^ 0x504F_5745_5243_5554)   // "POWERCUT"
            var draw: UInt64 = 0
            for _ in 0..<number { draw = generator.next() }
            // Milliseconds: a moment printed is the moment replayed.
            return Double(draw % UInt64(max(1, within * 1000) + 1)) / 1000
        }
    }

    /// The moment launch `number` (1-based) is suspended with `--suspend-after random`, in
    /// seconds: drawn from the seed on a stream of its own, so the same seed gives the same
    /// moments whatever the purge, the edits or a power cut draw. Every launch has one.
    public func suspensionMoment(ofLaunch number: Int) -> Double? {
        guard let within = randomSuspension, within.isFinite, within > 0, within <= 86400, number >= 1, number <= count else { return nil }
        var generator = SplitMix64(seed: seed ^ 0x5355_5350_454E_4421)   // "SUSPEND!"
        var draw: UInt64 = 0
        for _ in 0..<number { draw = generator.next() }
        // Milliseconds, as the power cut's: a moment printed is the moment replayed.
        return Double(draw % UInt64(max(1, within * 1000) + 1)) / 1000
    }

    /// The options that replay these launches.
    public var replay: String {
        var text = "--launches \(count) --purge-between \(purge.rawValue)\(shareEdits ? " --share-edits random" : "") --seed \(seed)"
        if let event { text += " --\(event.kind.rawValue) \(event.moment.option)" }
        if let event, event.kind == .powerCut, event.model != .posix { text += " --power-model \(event.model.rawValue)" }
        if let within = randomSuspension {
            text += " --suspend-after random"
            // One --within serves both draws; named once.
            if event?.moment != .random(within: within) { text += " --within \(within)" }
        }
        return text
    }

    /// One change the user makes in `Documents/` through file sharing. Paths are below
    /// `Documents/`, as components (bytes).
    public enum ShareEdit: Equatable, Sendable {
        /// A new file at the top of `Documents/`.
        case add([[UInt8]])
        /// A file renamed in its folder.
        case rename([[UInt8]], to: [[UInt8]])
        /// A file's contents replaced by others (as a save from another device).
        case replace([[UInt8]])
        case delete([[UInt8]])

        /// What the edit does, as a verb ("add").
        public var verb: String {
            switch self {
            case .add: "add"
            case .rename: "rename"
            case .replace: "replace"
            case .delete: "delete"
            }
        }

        /// The file the edit is made on (the old name of a rename).
        public var path: [[UInt8]] {
            switch self {
            case .add(let path), .rename(let path, _), .replace(let path), .delete(let path): path
            }
        }
    }

    /// The edits the user makes before launch `launch`, among `files` (the files file
    /// sharing shows, in byte order): one to three, each on a file drawn from those still
    /// there — renamed (to `renamed-L-K` with its extension), replaced, deleted — or a new
    /// file added (`Shared L-K.txt`), always an add when no file is left. The same
    /// generator state on the same files gives the same edits.
    public static func randomEdits(of files: [[[UInt8]]], beforeLaunch launch: Int, using generator: inout SplitMix64) -> [ShareEdit] {
        var files = files
        var edits: [ShareEdit] = []
        for number in 0..<Int(1 + generator.next() % 3) {
            let kind = files.isEmpty ? 0 : generator.next() % 4
            if kind == 0 {
                let added = [Array("Shared \(launch)-\(number).txt".utf8)]
                edits.append(.add(added))
                continue
            }
            let index = Int(generator.next() % UInt64(files.count))
            let file = files[index]
            switch kind {
            case 1:
                let name = file.last ?? []
                let dot = name.lastIndex(of: UInt8(ascii: ".")).flatMap { $0 > 0 ? $0 : nil }
                let renamed = Array(file.dropLast()) + [Array("renamed-\(launch)-\(number)".utf8) + (dot.map { Array(name[$0...]) } ?? [])]
                edits.append(.rename(file, to: renamed))
                files[index] = renamed
            case 2:
                edits.append(.replace(file))
            default:
                edits.append(.delete(file))
                files.remove(at: index)
            }
        }
        return edits
    }

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
    /// a single run, and no launch starts after it. With an event, every launch but the
    /// last ends at its moment (power cut or kill) unless the program exits first; a launch
    /// that exits with a failure after one fails the run, named with the seed.
    func launch(_ launches: Launches, _ opened: Store, sandbox: Sandbox?, relay: SignalRelay, lock: RunLock,
                groups: [GroupMount] = []) throws(UserError) -> Int32 {
        let replay = launches.replay
        // The user can edit Documents/ only of an app that shares it: refused before any launch.
        if launches.shareEdits { try FileSharing.requireEnabled(opened) }
        let ending = launches.event.map { ", \($0.kind == .powerCut ? "a power cut" : "a kill") in each launch but the last" } ?? ""
        say("\(counted(launches.count, "launch", "launches")), purging \(launches.purge.rawValue)\(launches.shareEdits ? " and the user editing Documents/" : "") between them\(ending), seed \(launches.seed)")
        var generator = SplitMix64(seed: launches.seed)
        var purged: String?
        var report = LaunchesReport(seed: launches.seed, replay: replay)
        defer { if launches.json { report.print() } }
        var previousEvent: String?
        for number in 1...launches.count {
            if number > 1 { relay.rearm() }
            let armed = launches.moment(ofLaunch: number).flatMap { moment in
                launches.event.map { ArmedEvent(kind: $0.kind, moment: moment, store: opened) }
            }
            if let at = launches.suspensionMoment(ofLaunch: number) {
                say("launch \(number) of \(launches.count): suspended at \(at) s (drawn from seed \(launches.seed))")
            }
            let status = try launch(opened, sandbox: sandbox, relay: relay, lock: lock, groups: groups, number: number,
                                purgedBefore: purged, armed: armed)
            var entry = LaunchesReport.Entry(launch: number, status: status)
            entry.suspendedAt = launches.suspensionMoment(ofLaunch: number)
            if let armed, let fired = armed.outcome {
                entry.event = armed.kind.rawValue
                entry.at = armed.moment
                entry.status = nil
                switch fired {
                case .failed(let message):
                    report.append(entry)
                    say("launch \(number) of \(launches.count): the \(armed.kind.rawValue) at \(armed.moment) s failed: \(message)")
                    report.failed = number
                    return 1
                case .done(let dropped):
                    entry.dropped = dropped
                    let what = armed.kind == .powerCut ? "power cut at \(armed.moment) s: \(dropped?.summary ?? "nothing to drop")"
                        : "killed at \(armed.moment) s (SIGKILL, nothing dropped)"
                    say("launch \(number) of \(launches.count): \(what)")
                    previousEvent = "after the \(armed.kind == .powerCut ? "power cut" : "kill") in launch \(number)"
                }
                report.append(entry)
            } else {
                report.append(entry)
                if status != 0 {
                    let after = previousEvent.map { " \($0)" } ?? ""
                    say("launch \(number) of \(launches.count) failed with status \(status)\(after) (seed \(launches.seed)); replay it with \(replay)")
                    report.failed = number
                    return status
                }
                let early = armed.map { " before the \($0.kind.rawValue) at \($0.moment) s" } ?? ""
                if launches.event != nil { say("launch \(number) of \(launches.count): exited 0\(early)") }
                previousEvent = nil
            }
            if let signal = relay.caughtAny {
                say("launch \(number) of \(launches.count) ended after signal \(signal): no further launch")
                return status
            }
            guard number < launches.count else { break }
            var line = purgeBetween(opened, launches.purge, &generator)
            if launches.shareEdits { line += "; " + shareEdits(opened, beforeLaunch: number + 1, &generator) }
            purged = line
            say("before launch \(number + 1): \(line)")
        }
        say("all \(counted(launches.count, "launch", "launches")) exited 0\(launches.event == nil ? "" : " or ended as chosen") (seed \(launches.seed))")
        return 0
    }

    /// Purges the caches as chosen (`tmp/` was emptied when the last launch ended) and says
    /// what went, as one line. What it frees goes to the device's live count while another
    /// container of the device is mounted (the app's groups stay mounted across the
    /// launches), as `containerfs purge` gives it (`markChanges`).
    private func purgeBetween(_ store: Store, _ purge: Launches.PurgeBetween, _ generator: inout SplitMix64) -> String {
        let caches = Tags.scan(store, kinds: [.cache]).sorted { $0.path.lexicographicallyPrecedes($1.path) }
        let chosen: [Tag]
        switch purge {
        case .none, .tmp: chosen = []
        case .caches: chosen = caches
        case .random: chosen = Launches.randomChoice(of: caches.count, using: &generator).map { caches[$0] }
        }
        // The walks before and after only when something goes.
        // A device ledger another process keeps locked: the purge still happens (the app is
        // not running), its bytes recounted by the device's next first mount.
        let settle = chosen.isEmpty ? {} : (try? DeviceCapacity.markChanges(storePaths: [store.path])) ?? {}
        defer { settle() }
        let removed = Purge.remove(chosen, from: store)
        let kept = caches.count - removed.files
        let what =
            removed.files == 0
            ? "caches kept"
            : removed.files == caches.count
                ? "all \(counted(caches.count, "cache file")) purged"
                : "\(removed.files) of \(caches.count) cache files purged"
        return "tmp/ emptied; \(what) (\(counted(removed.bytes, "byte")) freed, \(counted(kept, "file")) kept)"
    }

    /// Makes the user's edits before `launch` (the app is not running: nothing is mounted)
    /// and says what they were, as part of the line. Each goes through the path of
    /// `containerfs share`: an add or a replacement is held to the container's capacity
    /// and to its device's free space (`DeviceInstall`, as `share put`), a deletion or a
    /// rename is given to the device's live count (`markChanges`, as `share rm` and `mv`),
    /// and the daemon's recorded count goes (`ControlChannel.invalidate`), so that the next
    /// launch's mount counts the store afresh. An edit refused or failing is not made: its
    /// one line goes to stderr as `share` would print it, the launch's line says which edit
    /// could not be made, and the launches go on (a copy the Files app could not make does
    /// not stop the app).
    private func shareEdits(_ store: Store, beforeLaunch launch: Int, _ generator: inout SplitMix64) -> String {
        let edits = Launches.randomEdits(of: FileSharing.files(store), beforeLaunch: launch, using: &generator)
        let said = edits.map { edit -> String in
            do throws(UserError) {
                switch edit {
                case .add(let path):
                    let device = DeviceInstall(storePaths: [store.path])
                    defer { device.finish() }
                    let added = try FileSharing.write(Array("added by the user before launch \(launch)\n".utf8), to: path, in: store,
                                                      replacing: false, device: device)
                    _ = try? ControlChannel.invalidate(store, [added])
                    return "added \(added)"
                case .rename(let from, let to):
                    let settle = try DeviceCapacity.markChanges(storePaths: [store.path])
                    defer { settle() }
                    let paths = try FileSharing.move(from, to: to, in: store)
                    _ = try? ControlChannel.invalidate(store, paths)
                    return "renamed \(paths[0]) to \(paths[1])"
                case .replace(let path):
                    let device = DeviceInstall(storePaths: [store.path])
                    defer { device.finish() }
                    let replaced = try FileSharing.write(Array("replaced by the user before launch \(launch)\n".utf8), to: path, in: store,
                                                         replacing: true, device: device)
                    _ = try? ControlChannel.invalidate(store, [replaced])
                    return "replaced \(replaced)"
                case .delete(let path):
                    let settle = try DeviceCapacity.markChanges(storePaths: [store.path])
                    defer { settle() }
                    let deleted = try FileSharing.remove(path, from: store)
                    _ = try? ControlChannel.invalidate(store, [deleted])
                    return "deleted \(deleted)"
                }
            } catch {
                say(error.message)
                return "could not \(edit.verb) \(FileSharing.containerPath(edit.path))"
            }
        }
        return "the user " + said.joined(separator: ", ")
    }

    private func say(_ line: String) {
        FileHandleOutput.standardError.write("containerfs: \(line)\n")
    }
}

/// The event armed for one launch: a thread waits until its moment and, if the program
/// still runs, cuts the power (through the mount's control socket) and kills the program's
/// processes with SIGKILL.
final class ArmedEvent: @unchecked Sendable {
    let kind: Launches.Event.Kind
    let moment: Double
    private let store: Store
    private let over = DispatchSemaphore(value: 0)
    private let state = Mutex<(exited: Bool, outcome: Outcome?)>((false, nil))
    private var thread: Thread?

    enum Outcome {
        /// The event happened: for a power cut, what it dropped.
        case done(PowerCutReport?)
        case failed(String)
    }

    init(kind: Launches.Event.Kind, moment: Double, store: Store) {
        self.kind = kind
        self.moment = moment
        self.store = store
    }

    /// The program `pid` (with its process group when `group`) started: the clock runs.
    func start(pid: pid_t, group: Bool) {
        let thread = Thread { [self] in
            guard over.wait(timeout: .now() + moment) == .timedOut else { return }
            state.withLock { state in
                guard !state.exited else { return }
                var outcome = Outcome.done(nil)
                if kind == .powerCut {
                    do throws(UserError) {
                        let answer = try ControlChannel.powerCut(store)
                        outcome = .done(PowerCutReport(wire: answer))
                    } catch {
                        outcome = .failed(error.message)
                    }
                }
                kill(group ? -pid : pid, SIGKILL)
                state.outcome = outcome
            }
        }
        thread.name = "launch event"
        self.thread = thread
        thread.start()
    }

    /// The program has exited (or never started): no event from now on.
    func exited() {
        state.withLock { $0.exited = true }
        over.signal()
    }

    /// What happened, if the event came; read after `exited`.
    var outcome: Outcome? { state.withLock { $0.outcome } }
}

/// `run --launches --json`: each launch, its event and what it dropped, and whether it
/// exited 0; printed on stdout as one JSON object when the launches end.
struct LaunchesReport {
    struct Entry {
        var launch: Int
        /// The exit status; nil when the event ended the launch.
        var status: Int32?
        var event: String?
        var at: Double?
        var dropped: PowerCutReport?
        /// The drawn moment of `--suspend-after random`.
        var suspendedAt: Double?
    }
    let seed: UInt64
    let replay: String
    var entries: [Entry] = []
    /// The launch that failed, if one did.
    var failed: Int?

    init(seed: UInt64, replay: String) {
        self.seed = seed
        self.replay = replay
    }

    mutating func append(_ entry: Entry) { entries.append(entry) }

    func print() {
        let launches: [[String: Any]] = entries.map { entry in
            var object: [String: Any] = ["launch": entry.launch, "status": entry.status.map { Int($0) } as Any? ?? NSNull()]
            if let event = entry.event { object["event"] = event }
            if let at = entry.at { object["at"] = at }
            if let suspendedAt = entry.suspendedAt { object["suspend_at"] = suspendedAt }
            if let dropped = entry.dropped {
                object["dropped"] = ["files": dropped.files, "bytes": dropped.bytes, "names": dropped.names, "untracked": dropped.untracked]
            }
            return object
        }
        let object: [String: Any] = ["seed": seed, "replay": replay, "launches": launches, "failed": failed.map { $0 as Any } ?? NSNull()]
        guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) else { return }
        FileHandleOutput.standardOutput.write(String(decoding: data, as: UTF8.self) + "\n")
    }
}
