import Foundation
import Glibc
import Synchronization
import Testing

@testable import ContainerPurge
@testable import ContainerStore

/// The writers that keep a trusted index after changing the store (purge, `Purge.remove`
/// between `run`'s launches, the emptying of `tmp/`) restamp the folders they changed. A
/// file another program puts into such a folder while they do (here through
/// `TagIndex.restampHook`, at each step of the restamp) must leave the index untrusted,
/// so that the next purge walks and finds it (SPEC §10). Against a restamp that recorded
/// the folder's ctime after the file went in, the index was trusted and the file missed.
@Suite("Restamp race", .serialized)
struct RestampRaceTests {
    enum Writer: String, CaseIterable, Sendable {
        case purge, remove, emptyTemporary
    }

    static let cases: [(Writer, TagIndex.RestampStep)] = Writer.allCases.flatMap { writer in
        [TagIndex.RestampStep.beforeStamp, .beforeEntries].map { (writer, $0) }
    }

    @Test(arguments: cases)
    func aFilePutWhileAWriterRestampsIsStillSeen(writer: Writer, step: TagIndex.RestampStep) throws {
        let scratch = try PurgeScratch()
        try scratch.file("Library/Caches/sub/old", size: 1, secondsAgo: 30)
        try scratch.file("Library/Caches/sub/kept", size: 1, secondsAgo: 10)
        try scratch.file("tmp/sub/t", size: 1, secondsAgo: 10)
        try scratch.file("tmp/u", size: 1, secondsAgo: 10)
        TagIndex.rebuild(scratch.store)
        try #require(TagIndex.load(scratch.store) != nil)

        // The folder the writer deletes in, and the file that races it there.
        let folder = writer == .emptyTemporary ? "tmp" : "Library/Caches/sub"
        let late = folder + "/late"
        let (storePath, target, latePath) = (scratch.store.path, Array(folder.utf8), scratch.root + "/" + late)
        let injected = Mutex(false)
        TagIndex.restampHook.withLock {
            $0 = { path, restamped, at in
                guard path == storePath, restamped == target, at == step else { return }
                let fd = open(latePath, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
                if fd >= 0 { close(fd) }
                injected.withLock { $0 = fd >= 0 }
            }
        }
        defer { TagIndex.restampHook.withLock { $0 = nil } }

        switch writer {
        case .purge:
            let report = try Purge.purge([scratch.store], .init(kinds: [.cache], free: 1))
            #expect(report.walked.isEmpty, "the index was trusted before the race")
            #expect(report.deleted.map { String(decoding: $0.tag.path, as: UTF8.self) } == ["Library/Caches/sub/old"])
        case .remove:
            let old = Tags.scan(scratch.store, kinds: [.cache]).filter { $0.path == Array("Library/Caches/sub/old".utf8) }
            #expect(Purge.remove(old, from: scratch.store).files == 1)
        case .emptyTemporary:
            #expect(Purge.emptyTemporary(scratch.store).removed == 2)
        }
        TagIndex.restampHook.withLock { $0 = nil }
        try #require(injected.withLock { $0 }, "the writer restamped \(folder) at \(step)")

        let after = try Purge.purge([scratch.store], .init(kinds: [.cache, .temporary], dryRun: true))
        #expect(after.deleted.map { String(decoding: $0.tag.path, as: UTF8.self) }.contains(late), "\(late) is a candidate")
        #expect(after.walked == [0])
    }

    /// Without a race, the index a writer leaves is trusted: purging from it stays fast.
    @Test(arguments: Writer.allCases)
    func withoutARaceTheIndexStaysTrusted(writer: Writer) throws {
        let scratch = try PurgeScratch()
        try scratch.file("Library/Caches/sub/old", size: 1, secondsAgo: 30)
        try scratch.file("Library/Caches/sub/kept", size: 1, secondsAgo: 10)
        try scratch.file("Library/Caches/gone/x", size: 1, secondsAgo: 40)
        try scratch.file("tmp/sub/t", size: 1, secondsAgo: 10)
        try scratch.file("tmp/u", size: 1, secondsAgo: 10)
        TagIndex.rebuild(scratch.store)
        switch writer {
        case .purge:
            _ = try Purge.purge([scratch.store], .init(kinds: [.cache], free: 2))
        case .remove:
            let old = Tags.scan(scratch.store, kinds: [.cache]).filter { $0.path == Array("Library/Caches/sub/old".utf8) }
            #expect(Purge.remove(old, from: scratch.store).files == 1)
        case .emptyTemporary:
            Purge.emptyTemporary(scratch.store)
        }
        let index = try #require(TagIndex.load(scratch.store), "the index \(writer) wrote is trusted")
        let expected: Set<String> = switch writer {
        case .purge: ["Library/Caches/sub/kept", "tmp/sub/t", "tmp/u"]
        case .remove: ["Library/Caches/gone/x", "Library/Caches/sub/kept", "tmp/sub/t", "tmp/u"]
        case .emptyTemporary: ["Library/Caches/gone/x", "Library/Caches/sub/kept", "Library/Caches/sub/old"]
        }
        #expect(Set(index.tags.map { String(decoding: $0.path, as: UTF8.self) }) == expected)
    }

    /// A file purge cannot delete (immutable: `EPERM`) is reported and stays in the index
    /// purge writes, a candidate still. It used to be dropped from that index, which was
    /// trusted all the same: the file was not tried again until a walk.
    @Test func aFilePurgeCouldNotDeleteStaysACandidate() throws {
        let scratch = try PurgeScratch()
        try scratch.file("Library/Caches/sub/stuck", size: 1, secondsAgo: 30)
        try scratch.file("Library/Caches/sub/goes", size: 1, secondsAgo: 20)
        let stuck = scratch.root + "/Library/Caches/sub/stuck"
        try #require(try chattr("+i", stuck), "chattr +i \(stuck)")
        defer { _ = try? chattr("-i", stuck) }
        let first = try Purge.purge([scratch.store], .init(kinds: [.cache]))
        #expect(first.failures.map(\.error.code) == [EPERM])
        #expect(first.deleted.map { String(decoding: $0.tag.path, as: UTF8.self) } == ["Library/Caches/sub/goes"])
        let index = try #require(TagIndex.load(scratch.store), "the index purge wrote is trusted")
        #expect(index.tags.map { String(decoding: $0.path, as: UTF8.self) } == ["Library/Caches/sub/stuck"])
        try #require(try chattr("-i", stuck))
        let second = try Purge.purge([scratch.store], .init(kinds: [.cache]))
        #expect(second.walked.isEmpty)
        #expect(second.deleted.map { String(decoding: $0.tag.path, as: UTF8.self) } == ["Library/Caches/sub/stuck"])
    }

    private func chattr(_ flags: String, _ path: String) throws -> Bool {
        let process = try Process.run(URL(fileURLWithPath: "/usr/bin/chattr"), arguments: [flags, path])
        process.waitUntilExit()
        return process.terminationStatus == 0
    }
}
