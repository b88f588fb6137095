import ContainerPolicy
import Foundation
import Glibc
import Testing

@testable import ContainerStore

/// A temporary folder with a small bundle in it, removed afterwards.
private struct Scratch: ~Copyable {
    let path: String

    init() throws {
        var template = Array("/tmp/containerfs-store-XXXXXX".utf8CString)
        path = String(cString: mkdtemp(&template)!)
        try FileManager.default.createDirectory(atPath: path + "/Demo.app/res", withIntermediateDirectories: true)
        try Data("plist".utf8).write(to: URL(fileURLWithPath: path + "/Demo.app/Info.plist"))
        try FileManager.default.createSymbolicLink(atPath: path + "/Demo.app/link", withDestinationPath: "Info.plist")
        chmod(path + "/Demo.app/Info.plist", 0o640)
    }

    deinit { try? FileManager.default.removeItem(atPath: path) }
}

@Suite("Store")
struct StoreTests {
    /// The folder holding a path, as dirname(1) says, from the bytes (Foundation's
    /// version trapped on a one-letter name).
    @Test func theFolderHoldingAPath() {
        let cases: [(String, String)] = [("s", "."), ("store", "."), ("./s", "."), ("a/b", "a"), ("a//b/", "a"),
                                         ("/s", "/"), ("//s", "/"), ("/a/b/c", "/a/b"), ("/", "/"), ("", "."),
                                         ("a/", "."), ("/tmp/é/ü", "/tmp/é")]
        for (path, folder) in cases { #expect(Directory.holding(path) == folder, "\(path)") }
    }

    @Test func createMakesTheStructureTheBundleAndTheStateFolder() throws {
        let scratch = try Scratch()
        let store = try Store.create(at: scratch.path + "/store", bundle: scratch.path + "/Demo.app")
        #expect(store.layout.bundleName == Array("Demo.app".utf8))
        let fm = FileManager.default
        for directory in StandardDirectory.allCases {
            var isDirectory: ObjCBool = false
            #expect(fm.fileExists(atPath: scratch.path + "/store/" + directory.path.description, isDirectory: &isDirectory) && isDirectory.boolValue)
        }
        #expect(fm.contents(atPath: scratch.path + "/store/Demo.app/Info.plist") == Data("plist".utf8))
        #expect(try fm.destinationOfSymbolicLink(atPath: scratch.path + "/store/Demo.app/link") == "Info.plist")
        var info = stat()
        stat(scratch.path + "/store/Demo.app/Info.plist", &info)
        #expect(info.st_mode & 0o777 == 0o640, "modes are copied")
        #expect(fm.fileExists(atPath: scratch.path + "/store/Library/Caches/CACHEDIR.TAG"))
        #expect(fm.fileExists(atPath: scratch.path + "/store/tmp/CACHEDIR.TAG"))
        #expect(try fm.contentsOfDirectory(atPath: scratch.path).sorted() == ["Demo.app", "store"], "no staging folder left")
    }

    @Test func createRefusesBadBundlesAndLeavesNothing() throws {
        let scratch = try Scratch()
        symlink(scratch.path + "/Demo.app", scratch.path + "/Link.app")
        try FileManager.default.createDirectory(atPath: scratch.path + "/NotABundle", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: scratch.path + "/Fifo.app", withIntermediateDirectories: true)
        mkfifo(scratch.path + "/Fifo.app/pipe", 0o644)
        let cases: [(String, String)] = [
            ("/Missing.app", "no bundle at"),
            ("/Link.app", "is a symlink"),
            ("/NotABundle", "must be a folder named NAME.app"),
            ("/Fifo.app", "special file"),
        ]
        for (bundle, message) in cases {
            let error = #expect(throws: UserError.self) {
                _ = try Store.create(at: scratch.path + "/store", bundle: scratch.path + bundle)
            }
            #expect(error?.message.contains(message) == true, "\(bundle): \(error?.message ?? "")")
            #expect(error?.message.contains("\n") == false)
        }
        let left = try FileManager.default.contentsOfDirectory(atPath: scratch.path).filter { $0.hasPrefix(".") || $0 == "store" }
        #expect(left.isEmpty, "nothing left behind: \(left)")
    }

    @Test func createRefusesANonEmptyTarget() throws {
        let scratch = try Scratch()
        try FileManager.default.createDirectory(atPath: scratch.path + "/store/x", withIntermediateDirectories: true)
        let error = #expect(throws: UserError.self) {
            _ = try Store.create(at: scratch.path + "/store", bundle: scratch.path + "/Demo.app")
        }
        #expect(error?.exitCode == 64)
        #expect(try FileManager.default.contentsOfDirectory(atPath: scratch.path + "/store") == ["x"])
    }

    @Test func openRefusesForeignAndDamagedStores() throws {
        let scratch = try Scratch()
        #expect(throws: UserError.self) { _ = try Store.open(scratch.path + "/Demo.app") }
        _ = try Store.create(at: scratch.path + "/store", bundle: scratch.path + "/Demo.app")
        rmdir(scratch.path + "/store/Documents/Inbox")
        let error = #expect(throws: UserError.self) { _ = try Store.open(scratch.path + "/store") }
        #expect(error?.message.contains("Documents/Inbox") == true)
        // A symlink in place of a standard directory is damage too, not a way out.
        symlink("/etc", scratch.path + "/store/Documents/Inbox")
        #expect(throws: UserError.self) { _ = try Store.open(scratch.path + "/store") }
    }

    /// The state folder is its owner's to write, and every command opens a store by
    /// finishing an offload or update a crash cut short. A bundle name recorded as a path
    /// (`../../victim/secret`) made that roll forward rename files outside the store: root
    /// running `usage` or `verify` on another user's store moved root's files into that
    /// user's folder, and the user's files anywhere root can write. The name is refused
    /// instead, and nothing outside the store moves.
    @Test func anOffloadRecordedWithABundleNameThatIsAPathMovesNothingOutOfTheStore() throws {
        let scratch = try Scratch()
        let fm = FileManager.default
        try fm.createDirectory(atPath: scratch.path + "/a", withIntermediateDirectories: true)
        let root = scratch.path + "/a/s"
        _ = try Store.create(at: root, bundle: scratch.path + "/Demo.app")
        // Outside the store, two levels up from its root: what the roll forward must not reach.
        try fm.createDirectory(atPath: scratch.path + "/victim", withIntermediateDirectories: true)
        try Data("secret".utf8).write(to: URL(fileURLWithPath: scratch.path + "/victim/secret"))
        // The owner's side: a folder where the escaped rename would land, an offload record,
        // and the name.
        try fm.createDirectory(atPath: root + "/victim", withIntermediateDirectories: true)
        try Data("x\n".utf8).write(to: URL(fileURLWithPath: root + "/.containerfs/offloaded"))
        try Data("../../victim/secret".utf8).write(to: URL(fileURLWithPath: root + "/.containerfs/bundle-name"))

        let error = #expect(throws: UserError.self) { _ = try Store.open(root) }
        #expect(error?.message.contains("bundle-name") == true, "\(error?.message ?? "")")
        #expect(fm.contents(atPath: scratch.path + "/victim/secret") == Data("secret".utf8), "the file outside stays")
        #expect(!fm.fileExists(atPath: root + "/victim/secret"), "nothing came into the owner's folder")
    }

    /// The same through a planted update journal: its staged bundle name, a path, would
    /// have renamed the owner's file out of the store to where root writes.
    @Test func anUpdateJournalWithABundleNameThatIsAPathMovesNothingOutOfTheStore() throws {
        let scratch = try Scratch()
        let fm = FileManager.default
        try fm.createDirectory(atPath: scratch.path + "/a", withIntermediateDirectories: true)
        let root = scratch.path + "/a/s"
        _ = try Store.create(at: root, bundle: scratch.path + "/Demo.app")
        try Data("planted".utf8).write(to: URL(fileURLWithPath: root + "/planted"))
        try fm.createDirectory(atPath: root + "/.containerfs/.bundle.evil/.containerfs", withIntermediateDirectories: true)
        try Data("../../planted".utf8).write(to: URL(fileURLWithPath: root + "/.containerfs/.bundle.evil/.containerfs/bundle-name"))
        try Data("containerfs update 1\n.bundle.evil\n1 1\n".utf8).write(to: URL(fileURLWithPath: root + "/.containerfs/update"))

        #expect(throws: UserError.self) { _ = try Store.open(root) }
        #expect(!fm.fileExists(atPath: scratch.path + "/planted"), "nothing was renamed out of the store")
        #expect(fm.contents(atPath: root + "/planted") == Data("planted".utf8))
        #expect(fm.fileExists(atPath: root + "/Demo.app/Info.plist"), "the bundle stays in place")
    }
}

@Suite("Audit log")
struct AuditLogTests {
    @Test func recordsAreWrittenAndReadBack() throws {
        let scratch = try Scratch()
        let store = try Store.create(at: scratch.path + "/store", bundle: scratch.path + "/Demo.app")
        let log = AuditLog(stateFD: store.stateFD)
        log.record(pid: getpid(), uid: 1000, operation: "unlink", paths: [ContainerPath(components: [Array("Demo.app".utf8), [0x66, 0xFF]])],
                   areas: [.bundle], denial: .bundleIsReadOnly)
        log.close()
        let records = AuditLog.read(stateFD: store.stateFD)
        #expect(records.count == 1)
        #expect(records.first?.paths == ["Demo.app/f\\xff"])
        #expect(records.first?.errno == "EPERM")
        #expect(records.first?.rule == "bundleIsReadOnly")
        #expect(records.first?.uid == 1000)
        #expect(records.first?.time.hasSuffix("Z") == true)
    }

    @Test func theLogIsBoundedByRotation() throws {
        let scratch = try Scratch()
        let store = try Store.create(at: scratch.path + "/store", bundle: scratch.path + "/Demo.app")
        // Unpaced: the queue (4096 by default) holds them all, so the writer writes them all.
        let log = AuditLog(stateFD: store.stateFD, maximumBytes: 4096)
        for number in 0..<200 {
            log.record(pid: 1, uid: UInt32(number), operation: "open", paths: [ContainerPath(components: [Array("Demo.app".utf8)])],
                       areas: [.bundle], denial: .bundleIsReadOnly)
        }
        log.close()
        var current = stat(), previous = stat()
        #expect(stat(scratch.path + "/store/.containerfs/audit.log", &current) == 0)
        #expect(stat(scratch.path + "/store/.containerfs/audit.log.1", &previous) == 0)
        #expect(current.st_size <= 4096 + 512 && previous.st_size <= 4096 + 512)
        #expect(AuditLog.read(stateFD: store.stateFD).last?.uid == 199, "the newest record is in the current file")
    }

    /// An audit log the store's owner made huge (sparse: no disk taken) with a record at its
    /// end: root's `audit` and `check` read a log of 1000 MB whole (20 s, 2 GB of memory,
    /// five times a second with `--follow`), and one past 1 GiB not at all, its denials
    /// hidden from `check`. The reader takes the last 8 MiB: the record, at once.
    @Test func aHugeLogIsReadByItsTailOnly() throws {
        let scratch = try Scratch()
        let store = try Store.create(at: scratch.path + "/store", bundle: scratch.path + "/Demo.app")
        let log = AuditLog(stateFD: store.stateFD)
        log.record(pid: getpid(), uid: 1000, operation: "unlink", paths: [ContainerPath(components: [Array("Demo.app".utf8)])],
                   areas: [.bundle], denial: .bundleIsReadOnly)
        log.close()
        let path = scratch.path + "/store/.containerfs/audit.log"
        let line = try Data(contentsOf: URL(fileURLWithPath: path))
        #expect(truncate(path, 3 << 29) == 0)   // 1.5 GiB of holes
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        try handle.seekToEnd()
        try handle.write(contentsOf: Data("\n".utf8) + line)
        try handle.close()
        let started = ContinuousClock.now
        let records = AuditLog.read(stateFD: store.stateFD)
        #expect(records.count == 1 && records.first?.uid == 1000, "\(records)")
        #expect(ContinuousClock.now - started < .seconds(5))
    }

    /// With a queue of one and a burst of records, the writer cannot keep up: `record`
    /// still returns at once, and what it dropped is counted in `{"dropped":N}` lines, so
    /// records written plus records dropped are all the records made.
    @Test func recordNeverWaitsAndDroppedRecordsAreCounted() throws {
        let scratch = try Scratch()
        let store = try Store.create(at: scratch.path + "/store", bundle: scratch.path + "/Demo.app")
        let log = AuditLog(stateFD: store.stateFD, maximumBytes: 1 << 30, capacity: 1)
        let total = 20_000
        var durations: [Duration] = []
        let clock = ContinuousClock()
        for number in 0..<total {
            durations.append(clock.measure {
                log.record(pid: 1, uid: UInt32(number), operation: "open", paths: [ContainerPath(components: [Array("Demo.app".utf8)])],
                           areas: [.bundle], denial: .bundleIsReadOnly)
            })
        }
        log.close()
        let text = try String(contentsOfFile: scratch.path + "/store/.containerfs/audit.log", encoding: .utf8)
        let lines = text.split(separator: "\n")
        let dropLines = lines.filter { $0.hasPrefix("{\"dropped\":") }
        let dropped = dropLines.compactMap { Int($0.dropFirst("{\"dropped\":".count).dropLast()) }.reduce(0, +)
        #expect(dropLines.count == dropLines.compactMap { Int($0.dropFirst("{\"dropped\":".count).dropLast()) }.count)
        #expect(dropped > 0, "a queue of one must overflow in a burst of \(total)")
        #expect(AuditLog.read(stateFD: store.stateFD).count == lines.count - dropLines.count, "every other line is a record")
        #expect(lines.count - dropLines.count + dropped == total, "written + dropped = made")
        // The 99th percentile: on a loaded machine any call may lose the CPU now and then.
        // A record costs microseconds (two /proc reads); waiting for the writer's I/O would
        // cost it the writer's whole batch.
        let typical = durations.sorted()[total * 99 / 100]
        #expect(typical < .milliseconds(50), "1 record in 100 took \(typical) or more")
    }
}

@Suite("Mount table")
struct MountTableTests {
    @Test func parsesMountinfoWithEscapes() {
        let line = #"36 25 0:32 / /tmp/my\040mount rw,nosuid,nodev,relatime shared:1 - fuse.containerfs /home/a\040b/store rw,user_id=0"#
        let entry = MountEntry.parse(line)
        #expect(entry == MountEntry(mountpoint: "/tmp/my mount", type: "fuse.containerfs", source: "/home/a b/store"))
        #expect(entry?.isContainer == true)
    }
}
