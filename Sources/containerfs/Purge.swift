import ArgumentParser
import ContainerPolicy
import ContainerPurge
import ContainerStore
import Glibc

struct PurgeCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "purge",
        abstract: "Delete cache or temporary files, least recently used first, as iOS does when space runs low.",
        discussion: """
            Deletes tagged files only: regular files below Library/Caches (--caches) or tmp (--tmp), \
            never a folder, a symlink or anything elsewhere, across all the stores named (on one \
            device), oldest last use first, until --free SIZE bytes are freed (default: --all). \
            Mounted containers are skipped, as iOS purges apps that are not running, unless \
            --include-running: then their mounts show the files gone at once.

            SIZE: 123, 10K, 5M, 2G (powers of 1024). DURATION: 30s, 10m, 2h, 3d, 1w (at most 292 years).

            Examples: 'containerfs purge ~/A ~/B --caches --free 500M'; \
            'containerfs purge ~/A --tmp --older-than 3d' (the periodic sweep of tmp).

            --until-free SIZE|PERCENT frees space in each store not running, against its capacity \
            (see 'containerfs capacity'): tmp first, then caches least recently used first, only \
            until that much is free, e.g. 'containerfs purge ~/A --caches --tmp --until-free 20%'. \
            A mounted store is refused (exit 1), even when nothing would have to go. In a device \
            folder with a capacity ('containerfs capacity DEVICE SIZE'), the free space is the \
            device's: its containers are purged one after the other only until the device has \
            that much free. With --json it prints plain purge's object (freedBytes then counts \
            tmp's files too) and untilFree: what was asked, whether every store reached it, and \
            per store the bytes wanted, free before and after (against the capacity, as \
            'containerfs capacity' counts), and tmp's entries removed and bytes freed.

            The device: an app container's store stands for itself and the group containers it \
            belongs to ('create --group'); a device folder, for every container store in it, \
            apps and groups (docs/groups.md).

            A lock that another process holds (a stopped update or delivery) is waited for at most 10 s, then the command gives up naming that process, exit 75 (see 'containerfs --help').
            """)

    @Argument(help: "Container stores, all on one device, or device folders.")
    var stores: [String] = []

    @Flag(help: "Purge cache files (below Library/Caches).")
    var caches = false

    @Flag(help: "Purge temporary files (below tmp).")
    var tmp = false

    @Option(help: ArgumentHelp("Stop once this many bytes are freed.", valueName: "SIZE"))
    var free: String?

    @Flag(help: "Delete every tagged file that qualifies (the default without --free).")
    var all = false

    @Option(help: ArgumentHelp("Only files last used at least this long ago.", valueName: "DURATION"))
    var olderThan: String?

    @Option(name: .customLong("until-free"), help: ArgumentHelp("Per store not running: delete (tmp first, then caches least recently used first) only until this much is free (see 'containerfs capacity').", valueName: "SIZE|PERCENT"))
    var untilFree: String?

    @Flag(help: "Purge mounted containers too.")
    var includeRunning = false

    @Flag(help: "Print what would be deleted; delete nothing.")
    var dryRun = false

    @Flag(help: "Print one JSON object.")
    var json = false

    func run() throws {
        try reportingErrors {
            let options = try parseOptions()
            // One device: the stores named, the groups they belong to, every store of a device folder.
            let opened = try Device.stores(stores, changing: true)
            if let untilFree {
                // A running app is never purged, whether or not anything would have to go:
                // every store is checked before any is touched.
                for store in opened {
                    if let holder = MountLock.holder(store) {
                        throw UserError("\(store.path) is in use (pid \(holder.pid), mounted at \(holder.mountpoint)): a running container is never purged; nothing was purged: stop its run, or unmount it first with 'containerfs unmount \(holder.mountpoint)'")
                    }
                }
                return try purgeUntilFree(untilFree, opened, options.kinds)
            }
            // Stores not mounted, on a device whose mounted containers' daemons keep its
            // count: what goes is given back to the device's ledger (docs/capacity.md).
            var marks: [DeviceCapacity.ChangeMark?] = []
            if !options.dryRun {
                for store in opened { marks.append(MountLock.holder(store) == nil ? try DeviceCapacity.markChange(store) : nil) }
            }
            let report = try Purge.purge(opened, options)
            for (store, mark) in zip(opened, marks) { DeviceCapacity.settleChange(mark, store) }
            var output = BufferedOutput()
            if json {
                printJSON(report, opened, &output)
            } else {
                printText(report, opened, &output)
            }
            output.flush()
            if let failure = report.failures.first {
                throw UserError("could not delete \(counted(report.failures.count, "file")), such as \(opened[failure.store].path)/\(ContainerPath.printable(failure.path)): \(failure.error)")
            }
            if let stale = report.notInvalidated.first {
                throw UserError(stale.message)
            }
        }
    }

    /// The options, checked here so that every mistake is one line (SPEC §9).
    private func parseOptions() throws(UserError) -> Purge.Options {
        if stores.isEmpty { throw UserError.usage("name at least one container store to purge") }
        guard caches || tmp else { throw UserError.usage("say what to purge: --caches (Library/Caches), --tmp (tmp) or both") }
        if all, free != nil { throw UserError.usage("--all and --free exclude each other: --all deletes everything that qualifies") }
        if untilFree != nil {
            let others = [(all, "--all"), (free != nil, "--free"), (olderThan != nil, "--older-than"), (dryRun, "--dry-run"),
                          (includeRunning, "--include-running")].filter(\.0).map(\.1)
            if !others.isEmpty {
                throw UserError.usage("--until-free goes alone: it deletes only until that much is free, in stores not running; drop \(others.joined(separator: " and "))")
            }
        }
        var options = Purge.Options(kinds: (caches ? [TagKind.cache] : []) + (tmp ? [.temporary] : []))
        if let free {
            guard let bytes = Quantity.bytes(free) else {
                throw UserError.usage("bad size '\(free)' for --free: write bytes or a number with K, M, G or T (powers of 1024), as 500M")
            }
            options.free = bytes
        }
        if let olderThan {
            guard let seconds = Quantity.seconds(olderThan) else {
                throw UserError.usage("bad duration '\(olderThan)' for --older-than: write a number with s, m, h, d or w, as 3d, of at most 292 years")
            }
            options.olderThan = seconds
        }
        options.includeRunning = includeRunning
        options.dryRun = dryRun
        return options
    }

    private func printText(_ report: Purge.Report, _ opened: [Store], _ output: inout BufferedOutput) {
        let verb = dryRun ? "would delete" : "deleted"
        for item in report.deleted {
            let kept = item.freedBytes == item.tag.size ? "" : "  (another name keeps them)"
            output.write("\(verb) \(opened[item.store].path)/\(shownPath(item.tag.path))  \(counted(item.tag.size, "byte"))\(kept)  last used \(isoTime(item.tag.lastUse))\n")
        }
        let storeCount = Set(report.deleted.map(\.store)).count
        output.write("\(dryRun ? "would free" : "freed") \(counted(report.freedBytes, "byte")) (\(humanBytes(report.freedBytes))) in \(counted(report.deleted.count, "file")) from \(counted(storeCount, "store"))\n")
        for skipped in report.skipped {
            output.write("skipped \(opened[skipped.store].path): mounted at \(skipped.mountpoint) (use --include-running to purge it too)\n")
        }
    }

    /// `--until-free`: each store not running, one after the other, until it has `text`
    /// free; printed as it goes, or as one JSON object (`printJSON` with `untilFree`).
    private func purgeUntilFree(_ text: String, _ opened: [Store], _ kinds: [TagKind]) throws(UserError) {
        // Every threshold read before any store is touched: one that does not parse, or
        // that a store has no capacity for, leaves them all as they were.
        var thresholds: [Int64] = []
        for store in opened { thresholds.append(try LowStorage.threshold(text, for: store, option: "--until-free")) }
        // One purge report over all the stores, as plain purge gives; each store's line apart.
        var combined = Purge.Report()
        var lines: [String] = []
        for (number, (store, wanted)) in zip(opened, thresholds).enumerated() {
            // Changed behind the device's mounts: given to its live count (docs/capacity.md).
            let mark = try DeviceCapacity.markChange(store)
            let report = try LowStorage.purge(store, until: wanted, kinds: kinds)
            DeviceCapacity.settleChange(mark, store)
            if !json { printLowStorage(store, wanted, report) }
            let caches = report.caches ?? Purge.Report()
            combined.deleted += caches.deleted.map { var item = $0; item.store = number; return item }
            combined.failures += caches.failures.map { var failure = $0; failure.store = number; return failure }
            if !caches.walked.isEmpty { combined.walked.append(number) }
            combined.freedBytes = combined.freedBytes.addingSaturated(caches.freedBytes).addingSaturated(report.temporaryFreedBytes)
            lines.append("{\"store\":\(jsonString(store.path)),\"wantedBytes\":\(wanted),\"freeBeforeBytes\":\(report.freeBefore),\"freeAfterBytes\":\(report.freeAfter),\"reached\":\(report.freeAfter >= wanted),\"tmpEntriesRemoved\":\(report.temporaryEntries),\"tmpFreedBytes\":\(report.temporaryFreedBytes)}")
        }
        if json {
            // Reached when every store has its free space now: in a device folder a later
            // store's purge frees the device's space for the earlier ones too.
            let reached = zip(opened, thresholds).allSatisfy { LowStorage.freeBytes($0) >= $1 }
            var output = BufferedOutput()
            printJSON(combined, opened, &output,
                      untilFree: "{\"asked\":\(jsonString(text)),\"reached\":\(reached),\"stores\":[\(lines.joined(separator: ","))]}")
            output.flush()
        }
        if let failure = combined.failures.first {
            throw UserError("could not delete \(counted(combined.failures.count, "file")), such as \(opened[failure.store].path)/\(ContainerPath.printable(failure.path)): \(failure.error)")
        }
    }

    /// `untilFree`: the JSON object of `--until-free`'s goal, added as the key `untilFree`.
    private func printJSON(_ report: Purge.Report, _ opened: [Store], _ output: inout BufferedOutput, untilFree: String? = nil) {
        output.write("{\"dryRun\":\(dryRun),\"freedBytes\":\(report.freedBytes),\"deleted\":[")
        for (number, item) in report.deleted.enumerated() {
            if number > 0 { output.write(",") }
            output.write("{\"store\":\(jsonString(opened[item.store].path)),\"path\":\(jsonString(printablePath(item.tag.path)))")
            output.write(",\"kind\":\"\(item.tag.kind.name)\",\"size\":\(item.tag.size),\"freedBytes\":\(item.freedBytes),\"lastUse\":\"\(isoTime(item.tag.lastUse))\",\"lastUseNanoseconds\":\(item.tag.lastUse)}")
        }
        output.write("],\"skipped\":[")
        output.write(report.skipped.map { "{\"store\":\(jsonString(opened[$0.store].path)),\"mountpoint\":\(jsonString($0.mountpoint)),\"pid\":\($0.pid)}" }.joined(separator: ","))
        output.write("],\"walked\":[")
        output.write(report.walked.map { jsonString(opened[$0].path) }.joined(separator: ","))
        output.write("],\"failed\":[")
        output.write(report.failures.map { "{\"store\":\(jsonString(opened[$0.store].path)),\"path\":\(jsonString(ContainerPath.printable($0.path))),\"error\":\(jsonString($0.error.description))}" }.joined(separator: ","))
        output.write("]" + (untilFree.map { ",\"untilFree\":" + $0 } ?? "") + "}\n")
    }
}

/// A path as `ContainerPath.printable` shows it, without its per-character work for the
/// usual name: valid UTF-8 with no backslash.
func printablePath(_ bytes: [UInt8]) -> String {
    if !bytes.contains(UInt8(ascii: "\\")), let text = String(validating: bytes, as: UTF8.self) { return text }
    return ContainerPath.printable(bytes)
}

/// A path as a line for the terminal shows it (`ContainerPath.description`: no control
/// character of a name an app chose reaches the terminal), without the per-character work
/// for the usual name: printable ASCII with no backslash.
func shownPath(_ bytes: [UInt8]) -> String {
    if bytes.allSatisfy({ $0 >= 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "\\") }) { return String(decoding: bytes, as: UTF8.self) }
    return ContainerPath.printable(bytes, escapingControls: true)
}

/// Standard output gathered in large writes: a purge can list many thousand files.
struct BufferedOutput {
    private var buffer: [UInt8] = []

    mutating func write(_ text: String) {
        buffer.append(contentsOf: text.utf8)
        if buffer.count >= 1 << 16 { flush() }
    }

    mutating func flush() {
        var offset = 0
        while offset < buffer.count {
            let written = buffer.withUnsafeBytes { Glibc.write(1, $0.baseAddress! + offset, $0.count - offset) }
            if written < 0 { if errno == EINTR { continue } else { break } }
            offset += written
        }
        buffer.removeAll(keepingCapacity: true)
    }
}

/// `2026-11-21T10:53:15.982Z` from nanoseconds since the epoch.
func isoTime(_ nanoseconds: Int64) -> String {
    var seconds = time_t(nanoseconds / 1_000_000_000)
    var parts = tm()
    gmtime_r(&seconds, &parts)
    func pad(_ value: Int, _ width: Int) -> String {
        let digits = String(value)
        return String(repeating: "0", count: max(0, width - digits.count)) + digits
    }
    let millis = Int(nanoseconds % 1_000_000_000 / 1_000_000)
    return "\(parts.tm_year + 1900)-\(pad(Int(parts.tm_mon) + 1, 2))-\(pad(Int(parts.tm_mday), 2))T\(pad(Int(parts.tm_hour), 2)):\(pad(Int(parts.tm_min), 2)):\(pad(Int(parts.tm_sec), 2)).\(pad(millis, 3))Z"
}
