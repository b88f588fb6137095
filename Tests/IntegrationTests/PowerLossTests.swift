import Foundation
import Glibc
import Testing

/// `mount -o power-loss` and `containerfs power-cut` (docs/power-loss.md): through a real
/// mount, what was made durable stays and the rest is dropped, as a power failure would.
@Suite("Power loss", .serialized)
struct PowerLossTests {
    /// Runs Python `code` in the mount's `Documents` folder, with `sync(path)` (fsync of a
    /// file or folder) and `save(path, text)` (write without sync) at hand.
    @discardableResult
    static func python(_ code: String, in container: MountedContainer, sourceLocation: SourceLocation = #_sourceLocation) throws -> ProgramResult {
        let prelude = """
            import os
            def sync(path):
                fd = os.open(path, os.O_RDONLY)
                os.fsync(fd)
                os.close(fd)
            def save(path, text):
                with open(path, 'w') as f: f.write(text)

            """
        let result = try runProgram(["python3", "-c", prelude + code], directory: container.mounted("Documents"))
        #expect(result.status == 0, "\(code): \(result)", sourceLocation: sourceLocation)
        return result
    }

    static func cut(_ container: MountedContainer, sourceLocation: SourceLocation = #_sourceLocation) throws -> String {
        let result = try containerfs(["power-cut", container.store])
        #expect(result.status == 0, "power-cut: \(result)", sourceLocation: sourceLocation)
        return result.stdout
    }

    static func stored(_ container: MountedContainer, _ relative: String) -> String? {
        (try? Data(contentsOf: URL(fileURLWithPath: container.stored("Documents/" + relative)))).map { String(decoding: $0, as: UTF8.self) }
    }

    @Test func dataWrittenWithoutFsyncIsDroppedAndSyncedDataStays() throws {
        try withMountedContainer(options: ["power-loss"]) { container in
            try Self.python("""
                for name in ['plain', 'synced', 'datasynced', 'appended']: save(name, 'durable ' + name)
                for name in ['plain', 'synced', 'datasynced', 'appended', '.']: sync(name)
                save('plain', 'lost: never synced, and longer than before')
                save('synced', 'kept: synced')
                sync('synced')
                with open('datasynced', 'r+') as f:
                    f.write('KEPT')
                    f.flush()
                    os.fdatasync(f.fileno())
                with open('appended', 'a') as f: f.write(' and an end that never reached the disk')
                fd = os.open('dsync', os.O_WRONLY | os.O_CREAT | os.O_DSYNC, 0o644)
                os.write(fd, b'kept: O_DSYNC')
                os.close(fd)
                sync('.')
                with open('synced', 'r+') as f: f.write('LOST')
                """, in: container)
            let report = try Self.cut(container)
            #expect(report.hasPrefix("power cut: dropped 3 files"), "\(report)")
            #expect(Self.stored(container, "plain") == "durable plain")
            #expect(Self.stored(container, "synced") == "kept: synced")
            #expect(Self.stored(container, "datasynced") == "KEPTble datasynced")
            #expect(Self.stored(container, "appended") == "durable appended")
            #expect(Self.stored(container, "dsync") == "kept: O_DSYNC")
            // The kernel forgot what it cached: the mount shows the store.
            #expect((try? String(contentsOfFile: container.mounted("Documents/plain"), encoding: .utf8)) == "durable plain")
            // A disk without power takes no more changes; the journal is emptied.
            #expect(errnoOf { open(container.mounted("Documents/plain"), O_WRONLY | O_TRUNC) } == EIO)
            #expect(errnoOf { mkdir(container.mounted("Documents/more"), 0o755) } == EIO)
            #expect((try? FileManager.default.contentsOfDirectory(atPath: container.stored(".containerfs/power-loss"))) == [])
            // Mounted again, the container goes on from the durable state.
            container.unmount()
            try container.mount(options: ["power-loss"])
            #expect((try? String(contentsOfFile: container.mounted("Documents/synced"), encoding: .utf8)) == "kept: synced")
            try Self.python("save('plain', 'writable again')", in: container)
        }
    }

    @Test func namesNeedTheirFolderSynced() throws {
        try withMountedContainer(options: ["power-loss"]) { container in
            try Self.python("""
                os.makedirs('kept/inner')
                save('kept/inner/file', 'durable')
                save('gone-later', 'durable')
                os.mkdir('emptied')
                for path in ['kept/inner/file', 'kept/inner', 'kept', 'gone-later', 'emptied', '.']: sync(path)
                save('new-unsynced', 'not durable')
                sync('new-unsynced')
                save('kept/new-synced', 'durable name')
                sync('kept/new-synced'); sync('kept')
                os.makedirs('newdir/deeper')
                save('newdir/deeper/file', 'x')
                os.unlink('gone-later')
                os.rmdir('emptied')
                os.rename('kept/inner', 'moved-inner')
                os.unlink('moved-inner/file')
                """, in: container)
            let report = try Self.cut(container)
            #expect(report.contains("names"), "\(report)")
            let names = try FileManager.default.contentsOfDirectory(atPath: container.stored("Documents")).sorted()
            #expect(names == ["Inbox", "emptied", "gone-later", "kept"])
            #expect(Self.stored(container, "gone-later") == "durable")
            #expect(Self.stored(container, "kept/inner/file") == "durable")
            #expect(Self.stored(container, "kept/new-synced") == "durable name")
        }
    }

    @Test func aRenameOverWithoutFsyncRevertsAndWithItKeepsTheNewData() throws {
        try withMountedContainer(options: ["power-loss"]) { container in
            try Self.python("""
                save('state.json', '{"version": 1}')
                sync('state.json'); sync('.')
                save('state.json.tmp', '{"version": 2}')
                os.rename('state.json.tmp', 'state.json')
                """, in: container)
            _ = try Self.cut(container)
            #expect(Self.stored(container, "state.json") == #"{"version": 1}"#)
            #expect(Self.stored(container, "state.json.tmp") == nil)
            container.unmount()
            try container.mount(options: ["power-loss"])
            // The folder's fsync makes the rename durable, and with it the data of the file
            // renamed over the old one (ext4's auto_da_alloc), though the file was never synced.
            try Self.python("""
                save('state.json.tmp', '{"version": 3}')
                os.rename('state.json.tmp', 'state.json')
                sync('.')
                """, in: container)
            _ = try Self.cut(container)
            #expect(Self.stored(container, "state.json") == #"{"version": 3}"#)
        }
    }

    @Test func theModeIsAnOptionAndTheCutNeedsIt() throws {
        let refused = try containerfs(["mount", "/nonexistent", "/nonexistent", "-o", "power-loss,writeback"])
        #expect(refused.status == 64)
        #expect(refused.stderr.contains("'power-loss' and 'writeback' do not go together"), "\(refused)")
        try withMountedContainer { container in
            let result = try containerfs(["power-cut", container.store])
            #expect(result.status == 1)
            #expect(result.stderr.contains("mount it with -o power-loss"), "\(result)")
            // Off, nothing is tracked: the journal folder does not exist.
            #expect(!FileManager.default.fileExists(atPath: container.stored(".containerfs/power-loss")))
        }
    }
}
