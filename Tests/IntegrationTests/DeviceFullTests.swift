import Foundation
import Glibc
import Testing

/// Installing on a full device (docs/capacity.md, "Installing on a full device"): `create`,
/// `create --group`, `create-group` and `restore` into a device folder with a capacity
/// refuse, with one line and exit 1, what would not fit in the device's free space, and
/// leave nothing behind; what fits exactly is installed, and the device's count (a walk,
/// the daemons' ledger) agrees with du afterwards.
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
}
