import ContainerPolicy
import Foundation
import Glibc
import Synchronization
import Testing

@testable import ContainerStore

/// The capacity setting and the count of used bytes (SPEC §10), on a real store.
@Suite("CapacitySetting")
struct CapacitySettingTests {
    private func makeStore() throws -> (Store, String) {
        var template = Array("/tmp/containerfs-capacity-XXXXXX".utf8CString)
        let base = String(cString: mkdtemp(&template)!)
        try FileManager.default.createDirectory(atPath: base + "/Demo.app", withIntermediateDirectories: true)
        try Data("plist".utf8).write(to: URL(fileURLWithPath: base + "/Demo.app/Info.plist"))
        return (try Store.create(at: base + "/store", bundle: base + "/Demo.app"), base)
    }

    @Test func setReadAndRemove() throws {
        let (store, base) = try makeStore()
        defer { try? FileManager.default.removeItem(atPath: base) }
        #expect(Capacity.read(store) == nil)
        try Capacity.write(store, 8 << 20)
        #expect(Capacity.read(store) == 8 << 20)
        try Capacity.write(store, nil)
        #expect(Capacity.read(store) == nil)
        try Capacity.write(store, nil)  // removing none is fine
        // A garbled file counts as none, never as a limit.
        try Data("eight\n".utf8).write(to: URL(fileURLWithPath: store.path + "/.containerfs/capacity"))
        #expect(Capacity.read(store) == nil)
        try Data("-5\n".utf8).write(to: URL(fileURLWithPath: store.path + "/.containerfs/capacity"))
        #expect(Capacity.read(store) == nil)
    }

    /// An oracle that is not `usedBytes`: GNU du's allocated bytes of the store (every
    /// inode once, so hard links once), the state folder excluded.
    private func du(_ store: Store) throws -> Int64 {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/du")
        process.arguments = ["--summarize", "--block-size=1", "--exclude=.containerfs", store.path]
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return Int64(output.prefix { $0.isNumber }) ?? -1
    }

    @Test func usedBytesCountsBlocksOnceAndSkipsTheStateFolder() throws {
        let (store, base) = try makeStore()
        defer { try? FileManager.default.removeItem(atPath: base) }
        #expect(Capacity.usedBytes(rootFD: store.rootFD) == (try du(store)))
        // A file of 100,000 bytes holds at least that many in blocks, as du sees it.
        let empty = try du(store)
        try Data(repeating: 7, count: 100_000).write(to: URL(fileURLWithPath: store.path + "/Documents/a"))
        let withFile = try du(store)
        #expect(withFile - empty >= 100_000)
        #expect(Capacity.usedBytes(rootFD: store.rootFD) == withFile)
        // A second link to the same file adds nothing (du counts it once too).
        #expect(link(store.path + "/Documents/a", store.path + "/Library/b") == 0)
        #expect(try du(store) == withFile)
        #expect(Capacity.usedBytes(rootFD: store.rootFD) == withFile)
        // A sparse file counts its blocks, not its size.
        let sparse = open(store.path + "/Documents/sparse", O_WRONLY | O_CREAT | O_EXCL, 0o600)
        #expect(sparse >= 0 && ftruncate(sparse, 64 << 20) == 0)
        close(sparse)
        #expect(try du(store) < withFile + (1 << 20))
        #expect(Capacity.usedBytes(rootFD: store.rootFD) == (try du(store)))
        // The state folder does not count.
        let before = try du(store)
        try Data(repeating: 1, count: 200_000).write(to: URL(fileURLWithPath: store.path + "/.containerfs/big"))
        #expect(try du(store) == before)
        #expect(Capacity.usedBytes(rootFD: store.rootFD) == before)
    }

    @Test func saturatingArithmetic() {
        #expect(Int64.max.addingSaturating(1) == .max)
        #expect(Int64.min.addingSaturating(-1) == .min)
        #expect(Int64.max.multipliedSaturating(by: 512) == .max)
        #expect(Int64(-2).multipliedSaturating(by: .max) == .min)
        #expect(Int64(3).multipliedSaturating(by: 512) == 1536)
    }
}

/// One device's capacity (docs/capacity.md, "One device's capacity"): the ledger that the
/// daemons of a device's containers share, here two attached at once as two daemons are.
@Suite("DeviceLedger")
struct DeviceLedgerTests {
    private func makeDevice() throws -> (app: Store, group: Store, device: String, base: String) {
        var template = Array("/tmp/containerfs-device-XXXXXX".utf8CString)
        let base = String(cString: mkdtemp(&template)!)
        let device = base + "/device"
        try FileManager.default.createDirectory(atPath: device, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: base + "/Demo.app", withIntermediateDirectories: true)
        try Data("plist".utf8).write(to: URL(fileURLWithPath: base + "/Demo.app/Info.plist"))
        let app = try Store.create(at: device + "/App", bundle: base + "/Demo.app")
        let group = try Store.createGroup(at: device + "/group.com.example.shared")
        return (app, group, device, base)
    }

    @Test func twoDaemonsShareOneCountThatNeverPassesTheCapacity() throws {
        let (app, group, device, base) = try makeDevice()
        defer { try? FileManager.default.removeItem(atPath: base) }
        #expect(try DeviceLedger.attach(app) == nil, "no device capacity: nothing to attach")
        let used = try DeviceCapacity.usedBytes(devicePath: device)
        try DeviceCapacity.write(devicePath: device, used + 1 << 20)
        #expect(DeviceCapacity.read(devicePath: device) == used + 1 << 20)
        let first = try #require(try DeviceLedger.attach(app))
        #expect(first.used == used, "the first to attach counts the device")
        let second = try #require(try DeviceLedger.attach(group))
        #expect(throws: UserError.self) { try DeviceCapacity.write(devicePath: device, nil) }
        // Eight threads, two ledgers: reserve 4 KiB, keep some, give the rest back.
        let kept = Mutex<Int64>(0)
        DispatchQueue.concurrentPerform(iterations: 8) { worker in
            let ledger = worker % 2 == 0 ? first : second
            for round in 0..<200 {
                let granted = ledger.reserve(4096)
                #expect(ledger.used <= used + 1 << 20)
                let keep = (round + worker) % 3 == 0 ? granted : granted / 2
                ledger.add(keep - granted)
                kept.withLock { $0 += keep }
            }
        }
        #expect(first.used == used + kept.withLock { $0 }, "every change counted once, from both")
        #expect(first.free == second.free && first.free == max(0, used + 1 << 20 - first.used))
        // What is left is granted once, to one of them, and then nothing to either.
        let left = first.free
        #expect(first.reserve(2 << 20) == left)
        #expect(second.free == 0 && second.reserve(1) == 0)
    }

    /// The device's state folder is its owner's to write. Where the kernel lets anyone
    /// hard-link a file they do not own (`fs.protected_hardlinks` off), a lock or ledger
    /// planted there as a second name of root's file made root's daemon give that file to
    /// the folder's owner (fchown) and write its first 8 bytes. Here root's own file,
    /// linked by root, stands for it: it is neither chowned nor written, and attach fails
    /// with one line.
    @Test func aLockOrLedgerLinkedToAnotherFileIsNeitherChownedNorWritten() throws {
        let (app, _, device, base) = try makeDevice()
        defer { try? FileManager.default.removeItem(atPath: base) }
        try #require(geteuid() == 0, "root's daemon is what is tested")
        try DeviceCapacity.write(devicePath: device, 1 << 30)
        let state = device + "/.containerfs-device"
        // The folder (and so the device) belongs to another user.
        #expect(chown(state, 65534, 65534) == 0)
        for name in ["decide.lock", "ledger"] {
            let victim = base + "/victim-" + name
            try Data("root's own file\n".utf8).write(to: URL(fileURLWithPath: victim))
            chmod(victim, 0o600)
            unlink(state + "/" + name)
            #expect(link(victim, state + "/" + name) == 0)
            #expect(throws: UserError.self) { _ = try DeviceLedger.attach(app) }
            DeviceCapacity.addToLedger(device, 4096)
            var info = stat()
            #expect(stat(victim, &info) == 0 && info.st_uid == 0, "\(name): the linked file was given away")
            #expect(FileManager.default.contents(atPath: victim) == Data("root's own file\n".utf8), "\(name): the linked file was written")
            unlink(state + "/" + name)
        }
    }

    /// A planted ledger makes the count wrong, never stops the daemon; the next first
    /// attach counts the device again.
    @Test func aPlantedLedgerIsBoundedAndRecountedAtTheNextFirstAttach() throws {
        let (app, _, device, base) = try makeDevice()
        defer { try? FileManager.default.removeItem(atPath: base) }
        try DeviceCapacity.write(devicePath: device, 1 << 30)
        try Data(repeating: 0xFF, count: 8).write(to: URL(fileURLWithPath: device + "/.containerfs-device/ledger"))
        let ledger = try #require(try DeviceLedger.attach(app))
        #expect(ledger.used == (try DeviceCapacity.usedBytes(devicePath: device)))
        try Data(repeating: 0xFF, count: 3).write(to: URL(fileURLWithPath: device + "/.containerfs-device/ledger"))
        #expect(ledger.used == 0)
        ledger.add(.max)
        ledger.add(.min)
        #expect(ledger.reserve(.max) >= 0)
        try Data(repeating: 0xFF, count: 8).write(to: URL(fileURLWithPath: device + "/.containerfs-device/ledger"))
        #expect(ledger.used == .max && ledger.free == 0 && ledger.reserve(4096) == 0)
    }
}
