import Foundation
import Glibc
import Testing

/// `treeDigest` of each of `areas` of the store (every top-level entry when nil), lock
/// files left out (every command may take a lock): equal before and after means nothing
/// changed.
private func storeDigest(_ path: String, only areas: [String]? = nil) throws -> String {
    let names = try areas ?? FileManager.default.contentsOfDirectory(atPath: path).sorted()
    return try names.map { name in
        let lines = try treeDigest(path + "/" + name).split(separator: "\n").filter { !$0.contains(".lock") }
        return name + ":\n" + lines.joined(separator: "\n")
    }.joined(separator: "\n")
}

/// Writes a bundle `name` (`Info.plist` saying `version`) into `folder`; returns its path.
private func makeBundle(_ folder: String, _ name: String = "Demo.app", version: String) throws -> String {
    let bundle = folder + "/" + version + "/" + name
    try FileManager.default.createDirectory(atPath: bundle + "/res", withIntermediateDirectories: true)
    try Data("<plist>\(version)</plist>\n".utf8).write(to: URL(fileURLWithPath: bundle + "/Info.plist"))
    try Data("resource of \(version)\n".utf8).write(to: URL(fileURLWithPath: bundle + "/res/data.txt"))
    return bundle
}

/// Puts version 1's data in through `run`: a sqlite3 database in Application Support, a
/// file in Documents, a cache file, and something in tmp.
private func writeVersionOneData(_ container: MountedContainer) throws {
    let result = try containerfsRun(
        container,
        [
            "sh", "-c",
            """
            set -e
            mkdir -p "Library/Application Support/db"
            sqlite3 "Library/Application Support/db/notes.sqlite" "create table notes(t text); insert into notes values ('written by v1');"
            echo 'my note' > Documents/note.txt
            echo thumbnail > Library/Caches/thumb.png
            """,
        ])
    guard result.status == 0 else { throw TestFailure("version 1 could not write its data: \(result)") }
    try Data("left in tmp\n".utf8).write(to: URL(fileURLWithPath: container.stored("tmp/scratch")))
}

@Suite("Lifecycle", .serialized)
struct LifecycleTests {
    /// The counts in `update`'s line agree with their nouns: one entry of tmp/ is "1 entry",
    /// not "1 entries" (every count a command prints goes through `counted`).
    @Test func updateCountsInWords() throws {
        let container = try MountedContainer()
        try Data("left in tmp\n".utf8).write(to: URL(fileURLWithPath: container.stored("tmp/scratch")))
        let updated = try containerfs(["update", container.store, "--bundle", try makeBundle(container.base, version: "v2")])
        #expect(updated.status == 0, "\(updated)")
        #expect(updated.stdout.contains("tmp/ emptied (1 entry)"), "\(updated)")
        #expect(updated.stdout.contains("(2 files, ") && !updated.stdout.contains(" 1 entries"), "\(updated)")
    }

    @Test("update: version 2 reads version 1's data, verifies as version 2, tmp/ emptied")
    func updateKeepsData() throws {
        let container = try MountedContainer()
        try writeVersionOneData(container)
        let data = try storeDigest(container.store, only: ["Documents", "Library"])
        let v2 = try makeBundle(container.base, version: "v2")

        let updated = try containerfs(["update", container.store, "--bundle", v2])
        #expect(updated.status == 0, "\(updated)")
        #expect(updated.stdout.contains("Demo.app replaced by Demo.app"))
        #expect(try storeDigest(container.store, only: ["Documents", "Library"]) == data)
        #expect(temporaryEntries(container) == [])
        let verified = try containerfs(["verify", container.store])
        #expect(verified.status == 0, "\(verified)")
        let read = try containerfsRun(
            container,
            [
                "sh", "-c",
                """
                cat Demo.app/Info.plist; cat Documents/note.txt; cat Library/Caches/thumb.png
                sqlite3 "Library/Application Support/db/notes.sqlite" "select t from notes;"
                """,
            ])
        #expect(read.status == 0, "\(read)")
        #expect(read.stdout == "<plist>v2</plist>\nmy note\nthumbnail\nwritten by v1\n")
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: container.stored(".containerfs")).filter {
            $0.hasPrefix(".bundle.") || $0 == "update"
        }
        #expect(leftovers == [])
    }

    /// Whether the data reaches the disk cannot be seen without cutting the power; the
    /// order of the calls can: the file system is synced before the journal's rename.
    @Test("update syncs the staged bundle to the disk before its journal commits")
    func updateSyncsBeforeItCommits() throws {
        let container = try MountedContainer()
        let v2 = try makeBundle(container.base, version: "v2")
        let traced = try runProgram(["strace", "-f", "-qq", "-e", "trace=syncfs,rename,renameat,renameat2", "-o", container.base + "/trace",
                                     containerfsBinary, "update", container.store, "--bundle", v2])
        #expect(traced.status == 0, "\(traced)")
        let calls = try String(contentsOfFile: container.base + "/trace", encoding: .utf8).split(separator: "\n")
        let commit = try #require(calls.firstIndex { $0.contains("rename") && $0.contains("\"update\"") }, "\(calls)")
        #expect(calls[..<commit].contains { $0.contains("syncfs(") && $0.contains("= 0") }, "\(calls)")
    }

    @Test("update to another bundle name: the layout follows, the old bundle is gone")
    func updateRenamesBundle() throws {
        let container = try MountedContainer()
        try writeVersionOneData(container)
        let renamed = try makeBundle(container.base, "Demo2.app", version: "v2")
        let updated = try containerfs(["update", container.store, "--bundle", renamed])
        #expect(updated.status == 0, "\(updated)")
        let entries = try FileManager.default.contentsOfDirectory(atPath: container.store).sorted()
        #expect(entries == [".containerfs", "Demo2.app", "Documents", "Library", "tmp"])
        #expect(try containerfs(["verify", container.store]).status == 0)
        let denied = try containerfsRun(container, ["sh", "-c", "echo x >> Demo2.app/Info.plist"])
        #expect(denied.status != 0, "the new bundle must be read-only through the mount")
    }

    @Test("a tampered new bundle is refused before anything changes")
    func tamperedBundleRefused() throws {
        let container = try MountedContainer()
        try writeVersionOneData(container)
        let before = try storeDigest(container.store)

        // A bundle holding a FIFO cannot be signed.
        let fifo = try makeBundle(container.base, version: "fifo")
        #expect(mkfifo(fifo + "/res/pipe", 0o644) == 0)
        let refused = try containerfs(["update", container.store, "--bundle", fifo])
        #expect(refused.status == 1)
        #expect(refused.stderr.hasPrefix("containerfs: ") && refused.stderr.split(separator: "\n").count == 1, "\(refused)")
        #expect(try storeDigest(container.store) == before)

        // The staged copy changed between signing and switching (the update stopped there).
        let v2 = try makeBundle(container.base, version: "v2")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: containerfsBinary)
        process.arguments = ["update", container.store, "--bundle", v2]
        process.environment = ProcessInfo.processInfo.environment.merging(["CONTAINERFS_TEST_STOP_AT": "staged"]) { $1 }
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        let deadline = Date().addingTimeInterval(60)
        while processState(process.processIdentifier) != "T", Date() < deadline { usleep(20_000) }
        let state = container.stored(".containerfs")
        let working = try FileManager.default.contentsOfDirectory(atPath: state).filter { $0.hasPrefix(".bundle.update-") }
        #expect(working.count == 1)
        if let working = working.first {
            try Data("<plist>evil</plist>\n".utf8).write(to: URL(fileURLWithPath: state + "/" + working + "/Demo.app/Info.plist"))
        }
        kill(process.processIdentifier, SIGCONT)
        process.waitUntilExit()
        let message = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(process.terminationStatus == 1)
        #expect(message.contains("changed while it was being installed") && message.contains("nothing was changed"), "\(message)")
        #expect(try storeDigest(container.store) == before)
        #expect(try containerfs(["verify", container.store]).status == 0)
    }

    @Test("update while mounted or running is refused with one line naming the mount")
    func updateWhileMountedRefused() throws {
        try withMountedContainer { container in
            let before = try storeDigest(container.store)
            let v2 = try makeBundle(container.base, version: "v2")
            let refused = try containerfs(["update", container.store, "--bundle", v2])
            #expect(refused.status == 1)
            #expect(
                refused.stderr.contains("is mounted at \(container.mountpoint)") && refused.stderr.contains("containerfs unmount"),
                "\(refused)")
            #expect(refused.stderr.split(separator: "\n").count == 1)
            let offload = try containerfs(["offload", container.store])
            #expect(offload.status == 1 && offload.stderr.contains("is mounted at"))
            #expect(try storeDigest(container.store) == before)
        }
    }

    @Test(
        "kill -9 of update at each step leaves the old or the new app, verifying",
        arguments: [
            ("staged", false), ("verified", false), ("committed", true), ("exchanged", true), ("manifest", true), ("switched", true),
            ("journal-removed", true),
        ])
    func updateKilled(step: String, installed: Bool) throws {
        let container = try MountedContainer()
        try writeVersionOneData(container)
        let data = try storeDigest(container.store, only: ["Documents", "Library"])
        for (name, version) in [("Demo.app", "v2"), ("Demo3.app", "v3")] {
            let current = try FileManager.default.contentsOfDirectory(atPath: container.store).filter { $0.hasSuffix(".app") }
            let bundle = try makeBundle(container.base, name, version: version)
            var environment = ProcessInfo.processInfo.environment
            environment["CONTAINERFS_TEST_CRASH_AT"] = step
            let killed = try runProgram([containerfsBinary, "update", container.store, "--bundle", bundle], environment: environment)
            #expect(killed.status == SIGKILL, "\(killed)")  // runProgram gives a signal's number
            let verified = try containerfs(["verify", container.store])
            #expect(verified.status == 0, "after a kill at \(step): \(verified)")
            let bundles = try FileManager.default.contentsOfDirectory(atPath: container.store).filter { $0.hasSuffix(".app") }
            #expect(bundles == (installed ? [name] : current), "after a kill at \(step)")
            let plist = try String(contentsOfFile: container.stored(bundles.first ?? "none") + "/Info.plist", encoding: .utf8)
            #expect(plist.contains(version) == installed)
            let state = try FileManager.default.contentsOfDirectory(atPath: container.stored(".containerfs"))
            #expect(state.filter { $0.hasPrefix(".bundle.") || $0 == "update" } == [], "after a kill at \(step): \(state)")
            #expect(try storeDigest(container.store, only: ["Documents", "Library"]) == data)
        }
    }

    @Test("offload and reinstall keep every byte of data; mount, run and verify name update meanwhile")
    func offloadRoundTrip() throws {
        let container = try MountedContainer()
        try writeVersionOneData(container)
        let data = try storeDigest(container.store, only: ["Documents", "Library"])
        let offloaded = try containerfs(["offload", container.store])
        #expect(offloaded.status == 0, "\(offloaded)")
        #expect(!FileManager.default.fileExists(atPath: container.stored("Demo.app")))
        #expect(try storeDigest(container.store, only: ["Documents", "Library"]) == data)

        for arguments in [
            ["mount", container.store, container.mountpoint], ["verify", container.store],
            ["run", container.store, "--", "true"],
        ] {
            let refused = try containerfs(arguments)
            #expect(refused.status == 1, "\(arguments): \(refused)")
            #expect(
                refused.stderr.contains("is offloaded") && refused.stderr.contains("containerfs update \(container.store) --bundle"),
                "\(refused)")
            #expect(refused.stderr.split(separator: "\n").count == 1)
        }
        let usage = try containerfs(["usage", container.store, "--json"])
        #expect(
            usage.stdout.contains(
                "\"area\":\"bundle\",\"path\":\"Demo.app\",\"bytes\":0,\"files\":0,\"backedUp\":false,\"purgeable\":false,\"offloaded\":true"
            ), "\(usage)")

        // Backup and restore work on the offloaded container.
        let archive = container.base + "/backup.tar"
        let backup = try containerfs(["backup", container.store, archive])
        #expect(backup.status == 0, "\(backup)")
        let original = try makeBundle(container.base, version: "v1")
        let restored = container.base + "/restored"
        let restore = try containerfs(["restore", archive, restored, "--bundle", original])
        #expect(restore.status == 0, "\(restore)")
        #expect(try storeDigest(restored, only: ["Documents"]) == (try storeDigest(container.store, only: ["Documents"])))

        let reinstalled = try containerfs(["update", container.store, "--bundle", original])
        #expect(reinstalled.status == 0 && reinstalled.stdout.hasPrefix("reinstalled Demo.app"), "\(reinstalled)")
        #expect(try storeDigest(container.store, only: ["Documents", "Library"]) == data)
        #expect(try containerfs(["verify", container.store]).status == 0)
        let read = try containerfsRun(container, ["sqlite3", "Library/Application Support/db/notes.sqlite", "select t from notes;"])
        #expect(read.stdout == "written by v1\n", "\(read)")
    }

    /// A program with a cache bug: its first launch builds `Library/Caches/index` and marks
    /// itself initialised in Documents; later launches read the index without rebuilding it.
    static let cacheBug = """
        if [ -e Documents/initialized ]; then cat Library/Caches/index > /dev/null || exit 3
        else echo built > Library/Caches/index; touch Documents/initialized; fi
        for i in 1 2 3 4 5 6 7 8; do echo $i > Library/Caches/thumb$i; done
        echo scratch > tmp/scratch
        """

    /// `run --launches --seed` replays end to end: two runs with the same seed on equal
    /// containers leave the same cache files at every launch; another seed leaves others,
    /// and the purges take a part, not all or nothing (so the seed, and nothing fixed,
    /// chooses). Each launch prints the cache files it found, then makes all 8 again.
    @Test("--launches 5 --purge-between random --seed 7 purges the same files twice")
    func randomPurgesReplay() throws {
        func launches(seed: Int) throws -> (purges: [Substring], found: [Substring]) {
            let container = try MountedContainer()
            let program =
                "echo launch; ls Library/Caches; for i in 1 2 3 4 5 6 7 8; do echo $i > Library/Caches/c$i; done; ls tmp; echo x > tmp/t"
            let result = try containerfsRun(
                container, ["--launches", "5", "--purge-between", "random", "--seed", "\(seed)"], ["sh", "-c", program])
            #expect(result.status == 0, "\(result)")
            #expect(result.stderr.hasPrefix("containerfs: 5 launches, purging random between them, seed \(seed)\n"))
            let purges = result.stderr.split(separator: "\n").filter { $0.contains("before launch") }
            #expect(purges.count == 4)
            #expect(!result.stdout.contains("\nt\n"), "tmp/ must be emptied between launches")
            return (purges, result.stdout.split(separator: "\n"))
        }
        let first = try launches(seed: 7), again = try launches(seed: 7), other = try launches(seed: 8)
        #expect(first.found.filter { $0 == "launch" }.count == 5, "\(first.found)")
        #expect(first.found == again.found, "the same seed must leave the same files: \(first.found) and \(again.found)")
        #expect(first.purges == again.purges)
        #expect(first.found != other.found, "another seed must choose other files: \(first.found)")
        #expect(first.purges.contains { $0.contains(" of 8 cache files purged") }, "a part was chosen: \(first.purges)")
    }

    @Test("a program failing without its cache is caught at the launch after the purge, with the seed")
    func cacheBugCaught() throws {
        let container = try MountedContainer()
        let kept = try containerfsRun(
            container, ["--launches", "3", "--purge-between", "none", "--seed", "11"], ["sh", "-c", Self.cacheBug])
        #expect(kept.status == 0, "\(kept)")
        try FileManager.default.removeItem(atPath: container.stored("Documents/initialized"))
        let caught = try containerfsRun(
            container, ["--launches", "5", "--purge-between", "caches", "--seed", "11"], ["sh", "-c", Self.cacheBug])
        #expect(caught.status == 3, "\(caught)")
        #expect(caught.stderr.contains("containerfs: before launch 2: tmp/ emptied; all 9 cache files purged"), "\(caught)")
        #expect(caught.stderr.contains("containerfs: launch 2 of 5 failed with status 3 (seed 11)"), "\(caught)")
        #expect(!caught.stderr.contains("launch 3"))
        try expectCleanedUp(container)
    }

    /// SPEC §10: purge removes the folders it empties below `Library/Caches` (never that
    /// one), also the purge between launches; a folder the app left empty itself stays.
    @Test("--purge-between caches removes the cache folders it empties, as purge does")
    func purgeBetweenRemovesEmptiedFolders() throws {
        let container = try MountedContainer()
        let program = """
            if [ -e Documents/second ]; then ls -A Library/Caches; exit 0; fi
            mkdir -p Library/Caches/deep/er Library/Caches/empty && echo x > Library/Caches/deep/er/f && touch Documents/second
            """
        let result = try containerfsRun(container, ["--launches", "2", "--purge-between", "caches", "--seed", "1"], ["sh", "-c", program])
        #expect(result.status == 0, "\(result)")
        #expect(result.stderr.contains("before launch 2: tmp/ emptied; all 1 cache file purged"), "\(result)")
        #expect(result.stdout == "empty\n", "launch 2 must find no folder the purge emptied: \(result.stdout.debugDescription)")
        #expect(access(container.stored("Library/Caches/deep"), F_OK) != 0, "Library/Caches/deep was left in the store")
        #expect(access(container.stored("Library/Caches/CACHEDIR.TAG"), F_OK) == 0)
    }

    @Test("a signal during a launch reaches the program as in a single run, and no launch follows")
    func signalDuringALaunch() throws {
        let container = try MountedContainer()
        // Launch 2 waits for SIGTERM and exits 0 on it: the exit status alone would go on.
        let script = """
            import os, signal, sys, time
            launch = len([n for n in os.listdir("Documents") if n.startswith("launch")]) + 1
            open("Documents/launch%d" % launch, "w").write("started")
            if launch == 2:
                signal.signal(signal.SIGTERM, lambda number, frame: sys.exit(0))
                open("Documents/ready", "w").write("ready")
                while True:
                    time.sleep(0.05)
            """
        let run = try BackgroundProgram(
            [containerfsBinary, "run", container.store, "--launches", "4", "--", "python3", "-c", script])
        #expect(waitForFile(container.stored("Documents/ready")), "launch 2 never started")
        kill(run.pid, SIGTERM)
        let result = run.wait()
        #expect(result.status == 0, "\(result)")
        #expect(result.stderr.contains("launch 2 of 4 ended after signal 15: no further launch"), "\(result)")
        let launched = try FileManager.default.contentsOfDirectory(atPath: container.stored("Documents")).filter { $0.hasPrefix("launch") }
        #expect(launched.sorted() == ["launch1", "launch2"])
        try expectCleanedUp(container)
    }

    @Test("kill -9 of offload after its record leaves it offloaded at the next open, data kept")
    func offloadKilled() throws {
        let container = try MountedContainer()
        try writeVersionOneData(container)
        let data = try storeDigest(container.store, only: ["Documents", "Library"])
        var environment = ProcessInfo.processInfo.environment
        environment["CONTAINERFS_TEST_CRASH_AT"] = "offload-recorded"
        let killed = try runProgram([containerfsBinary, "offload", container.store], environment: environment)
        #expect(killed.status == SIGKILL, "\(killed)")
        let usage = try containerfs(["usage", container.store])
        #expect(usage.status == 0 && usage.stdout.contains("offloaded"), "\(usage)")
        #expect(!FileManager.default.fileExists(atPath: container.stored("Demo.app")))
        #expect(try storeDigest(container.store, only: ["Documents", "Library"]) == data)
        let reinstalled = try containerfs(["update", container.store, "--bundle", try makeBundle(container.base, version: "v1")])
        #expect(reinstalled.status == 0, "\(reinstalled)")
        #expect(try containerfs(["verify", container.store]).status == 0)
    }

    @Test("bad input: one line, exit 64 or 1, nothing changed")
    func badInput() throws {
        let container = try MountedContainer()
        try writeVersionOneData(container)
        let before = try storeDigest(container.store)
        let cases: [([String], Int32)] = [
            (["update", container.store, "--bundle", container.base + "/Missing.app"], 64),
            (["update", container.store], 64),
            (["update", container.base + "/no-store", "--bundle", container.base + "/Demo.app"], 1),
            (["run", container.store, "--launches", "0", "--", "touch", "Documents/ran"], 64),
            (["run", container.store, "--launches", "2", "--purge-between", "sometimes", "--", "touch", "Documents/ran"], 64),
            (["run", container.store, "--seed", "3", "--", "touch", "Documents/ran"], 64),
            (["offload", container.base + "/no-store"], 1),
        ]
        for (arguments, status) in cases {
            let result = try containerfs(arguments)
            #expect(result.status == status, "\(arguments): \(result)")
            #expect(result.stderr.hasPrefix("containerfs: ") && result.stderr.split(separator: "\n").count == 1, "\(arguments): \(result)")
            #expect(try storeDigest(container.store) == before, "\(arguments) changed the store")
        }
    }
}

/// The state letter of `/proc/PID/stat` (`T` when stopped).
private func processState(_ pid: pid_t) -> String? {
    guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
        let close = text.lastIndex(of: ")")
    else { return nil }
    return text[text.index(after: close)...].split(separator: " ").first.map(String.init)
}
