import ContainerPolicy
import Foundation
import Glibc
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

    @Test func usedBytesCountsBlocksOnceAndSkipsTheStateFolder() throws {
        let (store, base) = try makeStore()
        defer { try? FileManager.default.removeItem(atPath: base) }
        let before = Capacity.usedBytes(rootFD: store.rootFD)
        try Data(repeating: 7, count: 100_000).write(to: URL(fileURLWithPath: store.path + "/Documents/a"))
        var info = stat()
        #expect(stat(store.path + "/Documents/a", &info) == 0)
        let fileBytes = Capacity.blockBytes(info)
        #expect(fileBytes >= 100_000)
        #expect(Capacity.usedBytes(rootFD: store.rootFD) == before + fileBytes)
        // A second link to the same file adds nothing.
        #expect(link(store.path + "/Documents/a", store.path + "/Library/b") == 0)
        #expect(Capacity.usedBytes(rootFD: store.rootFD) == before + fileBytes)
        // The state folder does not count.
        try Data(repeating: 1, count: 200_000).write(to: URL(fileURLWithPath: store.path + "/.containerfs/big"))
        #expect(Capacity.usedBytes(rootFD: store.rootFD) == before + fileBytes)
    }

    @Test func saturatingArithmetic() {
        #expect(Int64.max.addingSaturating(1) == .max)
        #expect(Int64.min.addingSaturating(-1) == .min)
        #expect(Int64.max.multipliedSaturating(by: 512) == .max)
        #expect(Int64(-2).multipliedSaturating(by: .max) == .min)
        #expect(Int64(3).multipliedSaturating(by: 512) == 1536)
    }
}
