import Foundation
import Glibc
import Testing

/// Installing on a full device (docs/capacity.md, "Installing on a full device"): `create`,
/// `create --group`, `create-group`, `restore`, `update`, `deliver` and `share put` into a device folder
/// with a capacity refuse, with one line and exit 1, what would not fit in the device's
/// free space, and leave nothing behind; what fits exactly is installed, and the device's
/// count (a walk, the daemons' ledger) agrees with du afterwards.
@Suite("DeviceFull", .serialized)
struct DeviceFullTests {
    /// The bytes `containerfs capacity DEVICE` finds the device's containers use (a walk).
    private func deviceUsed(_ device: GroupDevice) throws -> Int64 {
        let shown = try containerfs(["capacity", device.device])
        let words = shown.stdout.split(separator: " ")
        guard let used = words.firstIndex(of: "used").flatMap({ Int64(words[$0 + 1]) }) else { throw TestFailure("capacity: \(shown)") }
        return used
    }

    /// What GNU du finds in `stores`, their state folders excluded, as the capacity counts.
    private func du(_ stores: [String]) throws -> Int64 {
        let result = try runProgram(["du", "--summarize", "--block-size=1", "--exclude=.containerfs"] + stores)
        guard result.status == 0 else { throw TestFailure("du: \(result)") }
        return result.stdout.split(separator: "\n").compactMap { Int64($0.prefix { $0.isNumber }) }.reduce(0, +)
    }

    /// The device's ledger, as its daemons keep it.
    private func ledger(_ device: GroupDevice) throws -> Int64 {
        let bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: device.device + "/.containerfs-device/ledger")))
        return bytes.count == 8 ? bytes.enumerated().reduce(Int64(0)) { $0 | Int64($1.element) << (8 * Int64($1.offset)) } : -1
    }

    /// Every name in `folder`, hidden ones too (a staging folder left behind shows here).
    private func names(_ folder: String) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: folder).sorted()
    }

    /// A refusal: exit 1 and one line naming the device's free space and both ways out.
    private func expectRefused(_ result: ProgramResult, _ device: GroupDevice, sourceLocation: SourceLocation = #_sourceLocation) {
        let lines = result.stderr.split(separator: "\n")
        #expect(result.status == 1 && lines.count == 1, "\(result)", sourceLocation: sourceLocation)
        #expect(result.stderr.contains("the device \(device.device) has") && result.stderr.contains("containerfs purge")
                && result.stderr.contains("containerfs capacity \(device.device) SIZE"), "\(result)", sourceLocation: sourceLocation)
    }

    /// A bundle of about 256 KiB, and what a container made of it takes (measured by du on a
    /// scratch device without a capacity, on the same file system).
    private func bigBundle(_ device: GroupDevice) throws -> (bundle: String, bytes: Int64) {
        let bundle = device.base + "/Big.app"
        try FileManager.default.createDirectory(atPath: bundle, withIntermediateDirectories: true)
        try Data("<plist>big</plist>\n".utf8).write(to: URL(fileURLWithPath: bundle + "/Info.plist"))
        try Data((0..<(256 * 1024)).map { UInt8(truncatingIfNeeded: $0 &* 7) }).write(to: URL(fileURLWithPath: bundle + "/asset.bin"))
        let scratch = device.base + "/scratch"
        try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
        let made = try containerfs(["create", scratch + "/Big", "--bundle", bundle])
        guard made.status == 0 else { throw TestFailure("scratch create: \(made)") }
        return (bundle, try du([scratch + "/Big"]))
    }

    /// No container of the device mounted (its count is a walk): two creates racing for
    /// room for one install one, the other is refused with one line and leaves nothing;
    /// then one block short is refused, and an exact fit is installed.
    @Test func createIsRefusedOnAFullDevice() throws {
        let device = try GroupDevice()
        let (bundle, need) = try bigBundle(device)
        var used = try deviceUsed(device)
        #expect(try containerfs(["capacity", device.device, "\(used + need + need / 2)"]).status == 0)
        let before = try names(device.device)
        let racers = try ["One", "Two"].map { try BackgroundProgram([containerfsBinary, "create", device.device + "/" + $0, "--bundle", bundle]) }
        let results = racers.map { $0.wait() }
        #expect(results.filter { $0.status == 0 }.count == 1, "exactly one of two racing creates fits: \(results)")
        guard let loser = results.first(where: { $0.status != 0 }) else { return }
        expectRefused(loser, device)
        let made = results[0].status == 0 ? "One" : "Two"
        #expect(try names(device.device) == (before + [made]).sorted(), "the refused create left nothing")

        used = try deviceUsed(device)
        #expect(try containerfs(["capacity", device.device, "\(used + need - 4096)"]).status == 0)
        let short = try containerfs(["create", device.device + "/Short", "--bundle", bundle])
        expectRefused(short, device)
        #expect(short.stderr.contains("needs \(need) bytes"), "the need is counted in blocks, as du counts: \(short)")
        #expect(try names(device.device) == (before + [made]).sorted())
        #expect(try containerfs(["capacity", device.device, "\(used + need)"]).status == 0)
        let exact = try containerfs(["create", device.device + "/Exact", "--bundle", bundle])
        #expect(exact.status == 0, "an exact fit is installed: \(exact)")
        let stores = [device.app, device.widget, device.other, device.groupStore, device.device + "/" + made, device.device + "/Exact"]
        #expect(try deviceUsed(device) == used + need && du(stores) == used + need)
    }

    /// A container of the device mounted (its group, by the widget's run): the daemons'
    /// ledger is the count. A create that fits is reserved in it, one that no longer fits
    /// is refused, and afterwards the ledger equals du of the device.
    @Test func createWhileTheDeviceIsMountedCountsInTheLedger() throws {
        let device = try GroupDevice()
        let (bundle, need) = try bigBundle(device)
        let used = try deviceUsed(device)
        #expect(try containerfs(["capacity", device.device, "\(used + need + need / 2)"]).status == 0)
        let widget = try device.start(device.widget, ["sh", "-c", #"touch "$APP_GROUP_COM_EXAMPLE_SHARED/w.up"; sleep 30"#])
        #expect(waitForFile(device.groupStore + "/w.up"))
        let attached = try containerfs(["capacity", device.device])
        #expect(attached.stdout.contains("daemons count it"), "the group's daemon keeps the device's ledger: \(attached)")
        let first = try containerfs(["create", device.device + "/First", "--bundle", bundle])
        #expect(first.status == 0, "\(first)")
        let before = try names(device.device)
        let second = try containerfs(["create", device.device + "/Second", "--bundle", bundle])
        expectRefused(second, device)
        #expect(try names(device.device) == before, "the refused create left nothing")
        // The run ends (and unmounts) on SIGTERM, as the other device tests end theirs.
        kill(widget.pid, SIGTERM)
        _ = widget.wait()
        let stores = [device.app, device.widget, device.other, device.groupStore, device.device + "/First"]
        let counted = try ledger(device), walked = try du(stores)
        #expect(counted == walked && walked == used + need, "ledger \(counted), du \(walked), expected \(used + need)")
    }

    /// A restore that would not fit is refused after verifying, before anything is put in
    /// place: the container backed up stays as it was, nothing new is in the device; with
    /// exactly the room it needs it is restored.
    @Test func restoreIsRefusedWhenItWouldNotFit() throws {
        let device = try GroupDevice()
        try Data((0..<(512 * 1024)).map { UInt8(truncatingIfNeeded: $0 &* 13) }).write(to: URL(fileURLWithPath: device.app + "/Documents/big.bin"))
        let archive = device.base + "/app.tar"
        #expect(try containerfs(["backup", device.app, archive]).status == 0)
        let scratch = device.base + "/scratch"
        try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
        #expect(try containerfs(["restore", archive, scratch + "/App", "--bundle", device.base + "/Demo.app"]).status == 0)
        let need = try du([scratch + "/App"])
        let used = try deviceUsed(device)
        #expect(try containerfs(["capacity", device.device, "\(used + need - 4096)"]).status == 0)
        let before = try names(device.device)
        let refused = try containerfs(["restore", archive, device.device + "/Restored", "--bundle", device.base + "/Demo.app"])
        expectRefused(refused, device)
        #expect(refused.stderr.contains("nothing was written"), "\(refused)")
        #expect(try names(device.device) == before, "the refused restore left nothing")
        #expect(try Data(contentsOf: URL(fileURLWithPath: device.app + "/Documents/big.bin")).count == 512 * 1024)
        #expect(try containerfs(["verify", device.app]).status == 0, "the container backed up is intact")
        #expect(try deviceUsed(device) == used)
        #expect(try containerfs(["capacity", device.device, "\(used + need)"]).status == 0)
        let restored = try containerfs(["restore", archive, device.device + "/Restored", "--bundle", device.base + "/Demo.app"])
        #expect(restored.status == 0, "an exact fit is restored: \(restored)")
        #expect(try deviceUsed(device) == used + need)
    }

    /// A sparse file of 1 TiB (three blocks of data) restored into a device with a capacity
    /// of a few MiB free: the capacity counts blocks, so it is charged its blocks, as it was
    /// in the container it came from, never its apparent size.
    @Test func aRestoredSparseFileIsChargedItsBlocksNotItsSize() throws {
        let device = try GroupDevice()
        let file = device.app + "/Documents/disk.img"
        #expect(try runProgram(["truncate", "-s", "1T", file]).status == 0)
        for (offset, text) in [(0, "begin"), (1 << 39, "middle"), ((1 << 40) - 3, "end")] {
            #expect(try runProgram(["sh", "-c", "printf \(text) | dd of='\(file)' bs=1 seek=\(offset) conv=notrunc status=none"]).status == 0)
        }
        let archive = device.base + "/app.tar"
        #expect(try containerfs(["backup", device.app, archive]).status == 0)
        let used = try deviceUsed(device)
        #expect(try containerfs(["capacity", device.device, "\(used + 4 * 1024 * 1024)"]).status == 0)
        let restored = try containerfs(["restore", archive, device.device + "/Restored", "--bundle", device.base + "/Demo.app"])
        #expect(restored.status == 0, "\(restored)")
        var info = stat()
        #expect(stat(device.device + "/Restored/Documents/disk.img", &info) == 0 && info.st_size == 1 << 40)
        let charged = try deviceUsed(device) - used
        #expect(charged == (try du([device.device + "/Restored"])) && charged < 4 * 1024 * 1024, "charged \(charged) bytes")
    }

    /// The same from an object store: the object is downloaded and verified aside, then
    /// refused, nothing put in the device.
    @Test func restoreFromAnObjectStoreIsRefusedToo() throws {
        let device = try GroupDevice()
        try Data((0..<(512 * 1024)).map { UInt8(truncatingIfNeeded: $0 &* 13) }).write(to: URL(fileURLWithPath: device.app + "/Documents/big.bin"))
        let used = try deviceUsed(device)
        #expect(try containerfs(["capacity", device.device, "\(used + 256 * 1024)"]).status == 0)
        try withSeaweedFS { server in
            let url = "s3://\(SeaweedFS.bucket)/device/app.tar"
            let backup = try server.containerfs(["backup", device.app, url])
            #expect(backup.status == 0, "\(backup)")
            let before = try names(device.device)
            let refused = try server.containerfs(["restore", url, device.device + "/FromS3", "--bundle", device.base + "/Demo.app"])
            expectRefused(refused, device)
            #expect(try names(device.device) == before, "the refused restore left nothing")
            #expect(try deviceUsed(device) == used)
        }
    }

    /// `create --group` adds the group container it makes: the app alone would fit, with
    /// its new group it does not, and neither is made; with room for both, both are. Then
    /// the full device refuses `create-group` too.
    @Test func createWithANewGroupCountsTheGroup() throws {
        let device = try GroupDevice()
        let extra = "group.com.example.extra"
        let scratch = device.base + "/scratch"
        try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
        let made = try containerfs(["create", scratch + "/New", "--bundle", device.base + "/Demo.app", "--group", extra])
        #expect(made.status == 0, "\(made)")
        let app = try du([scratch + "/New"]), group = try du([scratch + "/" + extra])
        let used = try deviceUsed(device)
        #expect(try containerfs(["capacity", device.device, "\(used + app + group - 4096)"]).status == 0)
        let before = try names(device.device)
        let refused = try containerfs(["create", device.device + "/New", "--bundle", device.base + "/Demo.app", "--group", extra])
        expectRefused(refused, device)
        #expect(refused.stderr.contains("needs \(app + group) bytes"), "\(refused)")
        #expect(try names(device.device) == before, "neither the app nor its group was made, nothing left aside")
        #expect(try containerfs(["capacity", device.device, "\(used + app + group)"]).status == 0)
        let fits = try containerfs(["create", device.device + "/New", "--bundle", device.base + "/Demo.app", "--group", extra])
        #expect(fits.status == 0 && fits.stdout.contains("created group container"), "\(fits)")
        #expect(try deviceUsed(device) == used + app + group)
        let more = try containerfs(["create-group", device.device + "/group.com.example.more"])
        expectRefused(more, device)
        #expect(try names(device.device) == (before + ["New", extra]).sorted())
    }

    /// A device whose group container was removed (`rm -rf`, as an app is deleted) keeps
    /// its capacity and still counts its apps: a create that does not fit is refused, not
    /// taken as the first install of an empty device; `capacity DEVICE` still shows it.
    @Test func aDeviceWithoutItsGroupStillCountsItsApps() throws {
        let device = try GroupDevice()
        let (bundle, need) = try bigBundle(device)
        #expect(try containerfs(["create", device.device + "/Big", "--bundle", bundle]).status == 0)
        let used = try deviceUsed(device)
        #expect(try containerfs(["capacity", device.device, "\(used + need / 2)"]).status == 0)
        #expect(try runProgram(["rm", "-rf", device.groupStore]).status == 0)
        let before = try names(device.device)
        let refused = try containerfs(["create", device.device + "/More", "--bundle", bundle])
        expectRefused(refused, device)
        #expect(try names(device.device) == before, "the refused create left nothing")
        let left = try du([device.app, device.widget, device.other, device.device + "/Big"])
        #expect(try deviceUsed(device) == left, "the apps are still counted")
    }

    /// What `containerfs run STORE -- cat FILE` prints: the app launches from its bundle.
    private func launch(_ store: String, reading file: String) throws -> ProgramResult {
        try containerfs(["run", store, "--", "cat", file])
    }

    /// Hidden working folders an update leaves in a store's state folder, if any.
    private func leftAside(_ store: String) throws -> [String] {
        try names(store + "/.containerfs").filter { $0.hasPrefix(".bundle.") }
    }

    /// No container mounted (the count is a walk): two updates racing for room for one
    /// switch one app, the other is refused with one line and its old app still launches;
    /// then one block short is refused, and an exact fit is installed and launches.
    @Test func updateIsRefusedOnAFullDevice() throws {
        let device = try GroupDevice()
        let (bundle, _) = try bigBundle(device)
        // What the update adds: the new bundle as copied, less the old one (tmp/ holds
        // only its CACHEDIR.TAG, which stays).
        let growth = try du([device.base + "/scratch/Big/Big.app"]) - du([device.app + "/Demo.app"])
        let used = try deviceUsed(device)
        #expect(try containerfs(["capacity", device.device, "\(used + growth + growth / 2)"]).status == 0)
        let before = try names(device.device), app = try names(device.app), other = try names(device.other)
        let racers = try [device.app, device.other].map { try BackgroundProgram([containerfsBinary, "update", $0, "--bundle", bundle]) }
        let results = racers.map { $0.wait() }
        #expect(results.filter { $0.status == 0 }.count == 1, "exactly one of two racing updates fits: \(results)")
        guard let loserIndex = results.firstIndex(where: { $0.status != 0 }) else { return }
        expectRefused(results[loserIndex], device)
        #expect(results[loserIndex].stderr.contains("adds \(growth) bytes"), "the growth is counted in blocks, as du counts: \(results[loserIndex])")
        let loser = loserIndex == 0 ? device.app : device.other
        #expect(try names(loser) == (loserIndex == 0 ? app : other) && leftAside(loser).isEmpty, "the refused update left nothing")
        let old = try launch(loser, reading: "Demo.app/Info.plist")
        #expect(old.status == 0 && old.stdout == "<plist>demo</plist>\n", "the old app still launches: \(old)")
        #expect(try containerfs(["verify", loser]).status == 0)
        #expect(try names(device.device) == before)
        #expect(try deviceUsed(device) == used + growth)

        let used2 = used + growth
        #expect(try containerfs(["capacity", device.device, "\(used2 + growth - 4096)"]).status == 0)
        let short = try containerfs(["update", device.widget, "--bundle", bundle])
        expectRefused(short, device)
        #expect(try leftAside(device.widget).isEmpty && launch(device.widget, reading: "Demo.app/Info.plist").stdout == "<plist>demo</plist>\n")
        #expect(try containerfs(["capacity", device.device, "\(used2 + growth)"]).status == 0)
        let exact = try containerfs(["update", device.widget, "--bundle", bundle])
        #expect(exact.status == 0, "an exact fit is installed: \(exact)")
        let new = try launch(device.widget, reading: "Big.app/Info.plist")
        #expect(new.status == 0 && new.stdout == "<plist>big</plist>\n", "the new app launches: \(new)")
        let stores = [device.app, device.widget, device.other, device.groupStore]
        #expect(try deviceUsed(device) == used2 + growth && du(stores) == used2 + growth)

        // The device full: offloading the app frees its bundle, and a reinstall needs all of
        // a bundle's room (a larger one is refused, the app left offloaded), as on iOS.
        #expect(try containerfs(["offload", device.widget]).status == 0)
        let larger = device.base + "/Larger.app"
        #expect(try runProgram(["cp", "-r", bundle, larger]).status == 0)
        try Data(repeating: 7, count: 8192).write(to: URL(fileURLWithPath: larger + "/more.bin"))
        let tooLarge = try containerfs(["update", device.widget, "--bundle", larger])
        expectRefused(tooLarge, device)
        #expect(try leftAside(device.widget).isEmpty && !names(device.widget).contains("Larger.app"))
        let reinstalled = try containerfs(["update", device.widget, "--bundle", bundle])
        #expect(reinstalled.status == 0 && reinstalled.stdout.contains("reinstalled"), "\(reinstalled)")
        #expect(try deviceUsed(device) == used2 + growth && du(stores) == used2 + growth)
    }

    /// A file of tmp/ with another name in Documents/ (a hard link the app made) is not
    /// freed by the update's emptying of tmp/: the update needs all its growth. Against an
    /// update that counts it as freed, it goes in and the device ends past its capacity.
    @Test func updateCountsNothingFreedForATmpFileLinkedElsewhere() throws {
        let device = try GroupDevice()
        let (bundle, _) = try bigBundle(device)
        let growth = try du([device.base + "/scratch/Big/Big.app"]) - du([device.app + "/Demo.app"])
        try Data(repeating: 3, count: 200_000).write(to: URL(fileURLWithPath: device.app + "/tmp/scratch"))
        #expect(link(device.app + "/tmp/scratch", device.app + "/Documents/kept") == 0)
        #expect(try containerfs(["capacity", device.device]).status == 0)   // recounted after the change by hand
        let used = try deviceUsed(device)
        #expect(try containerfs(["capacity", device.device, "\(used + growth - 4096)"]).status == 0)
        let refused = try containerfs(["update", device.app, "--bundle", bundle])
        expectRefused(refused, device)
        #expect(try leftAside(device.app).isEmpty && access(device.app + "/tmp/scratch", F_OK) == 0)
        let stores = [device.app, device.widget, device.other, device.groupStore]
        #expect(try du(stores) <= used + growth - 4096, "the device is never past its capacity")
    }

    /// A file of `bytes` bytes in the test's folder, and what it takes in blocks.
    private func document(_ device: GroupDevice, _ name: String, _ bytes: Int) throws -> (path: String, blocks: Int64) {
        let path = device.base + "/" + name
        try Data((0..<bytes).map { UInt8(truncatingIfNeeded: $0 &* 11) }).write(to: URL(fileURLWithPath: path))
        return (path, try du([path]))
    }

    /// No container mounted: two deliveries into two apps racing for room for one put one
    /// file in one Inbox; a batch that does not fit together delivers nothing; one block
    /// short is refused, nothing in the Inbox nor left aside; an exact fit is delivered.
    @Test func deliverIsRefusedOnAFullDevice() throws {
        let device = try GroupDevice()
        let (file, need) = try document(device, "report.pdf", 100_000)
        let (second, _) = try document(device, "notes.txt", 100_000)
        let used = try deviceUsed(device)
        #expect(try containerfs(["capacity", device.device, "\(used + need + need / 2)"]).status == 0)
        let racers = try [device.app, device.other].map { try BackgroundProgram([containerfsBinary, "deliver", $0, file]) }
        let results = racers.map { $0.wait() }
        #expect(results.filter { $0.status == 0 }.count == 1, "exactly one of two racing deliveries fits: \(results)")
        if let loserIndex = results.firstIndex(where: { $0.status != 0 }) {
            expectRefused(results[loserIndex], device)
            let loser = loserIndex == 0 ? device.app : device.other
            #expect(try names(loser + "/Documents/Inbox") == [] && names(loser + "/.containerfs/incoming") == [], "the refused delivery left nothing")
        }
        let used2 = try deviceUsed(device)
        #expect(used2 == used + need)

        #expect(try containerfs(["capacity", device.device, "\(used2 + need + need / 2)"]).status == 0)
        let batch = try containerfs(["deliver", device.widget, file, second])
        expectRefused(batch, device)
        #expect(try names(device.widget + "/Documents/Inbox") == [], "a batch that does not fit delivers nothing")
        #expect(try containerfs(["capacity", device.device, "\(used2 + need - 4096)"]).status == 0)
        let short = try containerfs(["deliver", device.widget, file])
        expectRefused(short, device)
        #expect(short.stderr.contains("adds \(need) bytes"), "the file is counted in blocks, as du counts: \(short)")
        #expect(try names(device.widget + "/Documents/Inbox") == [] && names(device.widget + "/.containerfs/incoming") == [])
        #expect(try containerfs(["capacity", device.device, "\(used2 + need)"]).status == 0)
        let exact = try containerfs(["deliver", device.widget, file])
        #expect(exact.status == 0, "an exact fit is delivered: \(exact)")
        #expect(try names(device.widget + "/Documents/Inbox") == ["report.pdf"])
        let stores = [device.app, device.widget, device.other, device.groupStore]
        #expect(try deviceUsed(device) == used2 + need && du(stores) == used2 + need)
    }

    /// The app run in the background, mounted with its group until `endRun`: its daemons
    /// keep the device's ledger meanwhile.
    private func runApp(_ device: GroupDevice, sourceLocation: SourceLocation = #_sourceLocation) throws -> BackgroundProgram {
        let app = try device.start(device.app, ["sh", "-c", #"touch "$APP_GROUP_COM_EXAMPLE_SHARED/a.up"; sleep 30"#])
        #expect(waitForFile(device.groupStore + "/a.up"), sourceLocation: sourceLocation)
        let attached = try containerfs(["capacity", device.device])
        #expect(attached.stdout.contains("daemons count it"), "the app's daemons keep the device's ledger: \(attached)", sourceLocation: sourceLocation)
        return app
    }

    /// Ends `runApp`'s run (it unmounts on SIGTERM, as the other device tests end theirs);
    /// the ledger its daemons kept must equal du of the device, and `expected`.
    private func endRun(_ app: BackgroundProgram, _ device: GroupDevice, expectingTheLedger expected: Int64,
                        sourceLocation: SourceLocation = #_sourceLocation) throws {
        kill(app.pid, SIGTERM)
        _ = app.wait()
        let stores = [device.app, device.widget, device.other, device.groupStore]
        let counted = try ledger(device), walked = try du(stores)
        #expect(counted == walked && walked == expected, "ledger \(counted), du \(walked), expected \(expected)", sourceLocation: sourceLocation)
    }

    /// The app mounted by its run (with its group): the daemons' ledger is the count. An
    /// update of another app that fits is reserved in it and one that no longer fits is
    /// refused (the old app still launches); a delivery into the mounted app itself, which
    /// its daemon counts, fits once and is refused the second time. Afterwards the ledger
    /// equals du of the device.
    @Test func updateAndDeliverWhileTheDeviceIsMountedCountInTheLedger() throws {
        let device = try GroupDevice()
        let (bundle, _) = try bigBundle(device)
        let growth = try du([device.base + "/scratch/Big/Big.app"]) - du([device.app + "/Demo.app"])
        let (file, need) = try document(device, "report.pdf", 100_000)
        let used = try deviceUsed(device)
        #expect(growth > need + need / 2, "the second update cannot fit where the deliveries' room is")
        #expect(try containerfs(["capacity", device.device, "\(used + growth + need + need / 2)"]).status == 0)
        let app = try runApp(device)

        let fits = try containerfs(["update", device.other, "--bundle", bundle])
        #expect(fits.status == 0, "\(fits)")
        let refused = try containerfs(["update", device.widget, "--bundle", bundle])
        expectRefused(refused, device)
        #expect(try leftAside(device.widget).isEmpty && containerfs(["verify", device.widget]).status == 0)
        let delivered = try containerfs(["deliver", device.app, file])
        #expect(delivered.status == 0, "\(delivered)")
        let again = try containerfs(["deliver", device.app, file])
        expectRefused(again, device)
        #expect(try names(device.app + "/Documents/Inbox") == ["report.pdf"] && names(device.app + "/.containerfs/incoming") == [])

        try endRun(app, device, expectingTheLedger: used + growth + need)
        let old = try launch(device.widget, reading: "Demo.app/Info.plist")
        #expect(old.status == 0 && old.stdout == "<plist>demo</plist>\n", "the refused update left the old app: \(old)")
    }

    /// The app and the other app updated (before the device gets a capacity) to a bundle
    /// whose Info.plist enables file sharing, so that `share put` takes files into them.
    private func shareDocuments(_ device: GroupDevice) throws {
        let bundle = device.base + "/Sharing.app"
        try FileManager.default.createDirectory(atPath: bundle, withIntermediateDirectories: true)
        try Data(ShareTests.sharingXML).write(to: URL(fileURLWithPath: bundle + "/Info.plist"))
        for store in [device.app, device.other] {
            let updated = try containerfs(["update", store, "--bundle", bundle])
            guard updated.status == 0 else { throw TestFailure("update to a sharing bundle: \(updated)") }
        }
    }

    /// No container mounted: `share put` one block short of the device's room is refused,
    /// Documents/ unchanged and nothing left aside; an exact fit goes in; a replacement by a
    /// file of the same size adds nothing and goes in on the full device.
    @Test func sharePutIsRefusedOnAFullDevice() throws {
        let device = try GroupDevice()
        try shareDocuments(device)
        let (file, need) = try document(device, "notes.txt", 100_000)
        let used = try deviceUsed(device)
        #expect(try containerfs(["capacity", device.device, "\(used + need - 4096)"]).status == 0)
        let documents = try names(device.app + "/Documents")
        let short = try containerfs(["share", device.app, "put", file])
        expectRefused(short, device)
        #expect(short.stderr.contains("cannot put \(file) into \(device.app): the copy adds \(need) bytes"), "counted in blocks, as du counts: \(short)")
        #expect(try names(device.app + "/Documents") == documents && names(device.app + "/.containerfs/incoming") == [], "the refused put left nothing")
        #expect(try deviceUsed(device) == used)

        #expect(try containerfs(["capacity", device.device, "\(used + need)"]).status == 0)
        let exact = try containerfs(["share", device.app, "put", file])
        #expect(exact.status == 0, "an exact fit goes in: \(exact)")
        #expect(try names(device.app + "/Documents") == (documents + ["notes.txt"]).sorted())
        let replaced = try containerfs(["share", device.app, "put", file])
        #expect(replaced.status == 0, "a replacement of the same size adds nothing: \(replaced)")
        let stores = [device.app, device.widget, device.other, device.groupStore]
        #expect(try deviceUsed(device) == used + need && du(stores) == used + need)
    }

    /// A replaced file with another name (a hard link the app made) frees nothing: `share
    /// put` over it adds the whole copy, and on a device without that room it is refused.
    /// Against a put that counts the replaced file's blocks as freed, the device ends past
    /// its capacity (du above it).
    @Test func sharePutOverAHardLinkedFileCountsTheWholeCopy() throws {
        let device = try GroupDevice()
        try shareDocuments(device)
        let (file, need) = try document(device, "notes.txt", 100_000)
        #expect(try containerfs(["share", device.app, "put", file]).status == 0)
        #expect(link(device.app + "/Documents/notes.txt", device.app + "/Documents/kept.txt") == 0)
        let (other, _) = try document(device, "other.txt", 100_000)
        let used = try deviceUsed(device)
        #expect(try containerfs(["capacity", device.device, "\(used + need - 4096)"]).status == 0)
        let documents = try names(device.app + "/Documents")
        let put = try containerfs(["share", device.app, "put", other, "notes.txt"])
        expectRefused(put, device)
        #expect(try names(device.app + "/Documents") == documents && names(device.app + "/.containerfs/incoming") == [])
        let stores = [device.app, device.widget, device.other, device.groupStore]
        #expect(try du(stores) <= used + need - 4096, "the device is never past its capacity")
    }

    /// The app mounted by its run (with its group): the daemons' ledger is the count. A
    /// `share put` into the mounted app (its daemon counts it) and one into the other app
    /// (not mounted, its sibling is) fit; a third is refused, and fits once `share rm` has
    /// freed the other app's file. After the unmount the ledger equals du of the device.
    @Test func sharePutWhileTheDeviceIsMountedCountsInTheLedger() throws {
        let device = try GroupDevice()
        try shareDocuments(device)
        let (file, need) = try document(device, "notes.txt", 100_000)
        let used = try deviceUsed(device)
        #expect(try containerfs(["capacity", device.device, "\(used + need + need + need / 2)"]).status == 0)
        let app = try runApp(device)

        let mounted = try containerfs(["share", device.app, "put", file])
        #expect(mounted.status == 0, "\(mounted)")
        let sibling = try containerfs(["share", device.other, "put", file])
        #expect(sibling.status == 0, "\(sibling)")
        let documents = try names(device.other + "/Documents")
        let third = try containerfs(["share", device.other, "put", file, "more.txt"])
        expectRefused(third, device)
        #expect(try names(device.other + "/Documents") == documents && names(device.other + "/.containerfs/incoming") == [])
        // What share rm frees in the sibling is given back to the ledger at once: the same
        // file now fits.
        #expect(try containerfs(["share", device.other, "rm", "notes.txt"]).status == 0)
        let freed = try containerfs(["share", device.other, "put", file, "more.txt"])
        #expect(freed.status == 0, "share rm gave its room back to the ledger: \(freed)")

        try endRun(app, device, expectingTheLedger: used + need + need)
    }

    // MARK: run --launches --share-edits random, share mv

    /// `run --launches N --share-edits random -- true` on the app, whose group stays mounted
    /// across the launches (its daemon keeps the device's ledger between them).
    private func runWithShareEdits(_ device: GroupDevice, launches: Int, seed: Int) throws -> ProgramResult {
        try containerfs(["run", device.app, "--launches", "\(launches)", "--share-edits", "random", "--seed", "\(seed)", "--", "true"])
    }

    /// A full device (less than a block free) refuses every file the user would add between
    /// launches, as `share put` is refused: each refusal is one line on stderr naming the
    /// device's free space, the launch's line says the edit could not be made, nothing is
    /// written, the launches go on (exit 0), and the ledger equals du, within the capacity.
    /// (Before, the edits were written unchecked: du ended past the capacity.)
    @Test func runShareEditsAreRefusedOnAFullDevice() throws {
        let device = try GroupDevice()
        try shareDocuments(device)
        let used = try deviceUsed(device)
        #expect(try containerfs(["capacity", device.device, "\(used + 2048)"]).status == 0)
        // Documents/ shows no file: every edit drawn is an add.
        let result = try runWithShareEdits(device, launches: 3, seed: 4)
        #expect(result.status == 0 && result.stderr.contains("all 3 launches exited 0 (seed 4)"), "the launches go on: \(result)")
        let lines = result.stderr.split(separator: "\n")
        let refusals = lines.filter { $0.hasPrefix("containerfs: cannot add Documents/Shared ") }
        let edits = lines.filter { $0.contains("; the user ") }
        #expect(edits.count == 2 && !refusals.isEmpty, "\(result)")
        #expect(refusals.count == edits.map { $0.components(separatedBy: "could not add Documents/Shared ").count - 1 }.reduce(0, +),
                "one line per edit refused: \(result)")
        for line in refusals {
            #expect(line.contains(" in \(device.app): the edit adds ") && line.contains("the device \(device.device) has ")
                    && line.contains("containerfs capacity \(device.device) SIZE"), "\(line)")
        }
        #expect(try names(device.app + "/Documents") == ["Inbox"] && names(device.app + "/.containerfs/incoming") == [], "nothing was written")
        let stores = [device.app, device.widget, device.other, device.groupStore]
        let counted = try ledger(device), walked = try du(stores)
        #expect(counted == walked && walked <= used + 2048, "ledger \(counted), du \(walked), capacity \(used + 2048)")
    }

    /// With room, the user's edits between launches (adds, replacements, deletions and
    /// renames of 100 kB files) are made, and each goes to the device's ledger while the
    /// group is mounted: after the run the ledger equals du. (Before, they went uncounted.)
    @Test func runShareEditsSettleTheDeviceLedger() throws {
        let device = try GroupDevice()
        try shareDocuments(device)
        for name in ["a.bin", "b.bin", "c.txt"] {
            try Data((0..<100_000).map { UInt8(truncatingIfNeeded: $0 &* 5) }).write(to: URL(fileURLWithPath: device.app + "/Documents/" + name))
        }
        let used = try deviceUsed(device)
        #expect(try containerfs(["capacity", device.device, "\(used + (1 << 20))"]).status == 0)
        let result = try runWithShareEdits(device, launches: 4, seed: 3)
        #expect(result.status == 0, "\(result)")
        let edits = result.stderr.split(separator: "\n").filter { $0.contains("; the user ") }
        #expect(edits.count == 3 && !result.stderr.contains("could not"), "\(result)")
        #expect(edits.contains { $0.contains("deleted Documents/") || $0.contains("replaced Documents/") },
                "an edit freed blocks: \(result)")
        let stores = [device.app, device.widget, device.other, device.groupStore]
        let counted = try ledger(device), walked = try du(stores)
        #expect(counted == walked && walked != used, "ledger \(counted), du \(walked), before \(used)")
    }

    /// What `--purge-between caches` frees between launches goes to the device's ledger
    /// while the group is mounted, as `purge` gives it: after the run the ledger equals du.
    /// (Before, the ledger kept the purged 300 kB: it ended above du.)
    @Test func runPurgeBetweenLaunchesSettlesTheDeviceLedger() throws {
        let device = try GroupDevice()
        try Data(repeating: 9, count: 300_000).write(to: URL(fileURLWithPath: device.app + "/Library/Caches/cache.bin"))
        let used = try deviceUsed(device)
        #expect(try containerfs(["capacity", device.device, "\(used + (1 << 20))"]).status == 0)
        let result = try containerfs(["run", device.app, "--launches", "2", "--purge-between", "caches", "--", "true"])
        #expect(result.status == 0 && result.stderr.contains("all 1 cache file purged (300000 bytes freed"), "\(result)")
        let stores = [device.app, device.widget, device.other, device.groupStore]
        let counted = try ledger(device), walked = try du(stores)
        #expect(counted == walked && walked < used, "ledger \(counted), du \(walked), before \(used)")
    }

    /// The blocks of the folder at `path`, in bytes.
    private func folderBytes(_ path: String) -> Int64 {
        var info = stat()
        return stat(path, &info) == 0 ? Int64(info.st_blocks) * 512 : -1
    }

    /// `share mv` into a folder that must grow by a block to take the name, in the other
    /// app while the app is mounted (its daemons keep the ledger): the block goes to the
    /// ledger, which equals du after the run, as after `share rm`. (Before, the rename was
    /// not settled: the ledger missed the block.)
    @Test func shareMvWhileTheDeviceIsMountedSettlesTheLedger() throws {
        let device = try GroupDevice()
        try shareDocuments(device)
        // How many entries of 200-byte names one folder's first blocks hold, found in a
        // scratch folder on the same file system; the folder in Documents/ gets one fewer.
        let entry = { (number: Int) in "e" + String(repeating: "0", count: 190) + String(format: "%09d", number) }
        let scratch = device.base + "/grow"
        #expect(mkdir(scratch, 0o755) == 0)
        let empty = folderBytes(scratch)
        var held = 0
        while folderBytes(scratch) == empty, held < 1000 {
            #expect(FileManager.default.createFile(atPath: scratch + "/" + entry(held), contents: nil))
            held += 1
        }
        let folder = device.other + "/Documents/full"
        #expect(mkdir(folder, 0o755) == 0)
        for number in 0..<(held - 1) { #expect(FileManager.default.createFile(atPath: folder + "/" + entry(number), contents: nil)) }
        let moved = entry(held - 1)
        #expect(FileManager.default.createFile(atPath: device.other + "/Documents/" + moved, contents: nil))
        let before = folderBytes(folder)
        #expect(before == empty, "the folder has not grown yet")
        let used = try deviceUsed(device)
        #expect(try containerfs(["capacity", device.device, "\(used + (1 << 20))"]).status == 0)
        let app = try runApp(device)

        let mv = try containerfs(["share", device.other, "mv", moved, "full/" + moved])
        #expect(mv.status == 0, "\(mv)")
        let growth = folderBytes(folder) - before
        // A file system whose folders take no blocks (tmpfs) never grows one: the ledger
        // must still equal du, but the test then proves less.
        let grows = folderBytes(scratch) != empty
        #expect(!grows || growth > 0, "the rename grew the folder: the test proves nothing otherwise")
        try endRun(app, device, expectingTheLedger: used + growth)
    }
}
