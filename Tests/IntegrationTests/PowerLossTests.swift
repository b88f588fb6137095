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

    @Test func aCutContainerWithACapacityIsCountedAgain() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        let set = try containerfs(["capacity", container.store, "50M"])
        #expect(set.status == 0, "\(set)")
        try container.mount(options: ["power-loss"])
        try Self.python("save('big', 'x' * 4_000_000)", in: container)
        _ = try Self.cut(container)
        // The daemon's own count, as statfs shows it through the mount (a count made afresh,
        // as `containerfs capacity` makes, would not tell).
        var info = statvfs()
        #expect(statvfs(container.mountpoint, &info) == 0)
        let used = Int64(info.f_blocks - info.f_bfree) * Int64(info.f_frsize)
        #expect(used < 1_000_000, "the daemon counts \(used) bytes used after the cut")
    }

    /// A durable file removed is kept by the journal (and counted as used) until its
    /// folder's fsync makes the removal durable; then its blocks are free, in the count
    /// too. Found by fsstress on a `power-loss` mount with a capacity: every durable file
    /// removed stayed counted until the next mount, so that a program deleting and making
    /// files (sqlite's rollback journal) filled the container with nothing in it.
    @Test func aRemovalMadeDurableFreesTheCapacity() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        let set = try containerfs(["capacity", container.store, "64M"])
        #expect(set.status == 0, "\(set)")
        try container.mount(options: ["power-loss"])
        let folder = container.mounted("Documents")
        func syncFolder() {
            let fd = open(folder, O_RDONLY | O_DIRECTORY)
            #expect(fd >= 0 && fsync(fd) == 0, "fsync of the folder: errno \(errno)")
            if fd >= 0 { close(fd) }
        }
        func expectCount(_ journal: Int, _ when: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
            let walked = try CapacityTests.storeBytes(container.store)
            #expect(CapacityTests.daemonUsed(container) == walked + journal,
                    "\(when): the daemon counts \(CapacityTests.daemonUsed(container)), the store holds \(walked) and the journal \(journal)",
                    sourceLocation: sourceLocation)
        }
        let megabyte = 1 << 20
        let data = [UInt8](repeating: 7, count: megabyte)
        // The second time, a recount (`containerfs capacity` on the mounted store) comes
        // between the removal and the folder's fsync: it counts what the journal keeps.
        for recount in [false, true] {
            let fd = open(folder + "/durable", O_CREAT | O_WRONLY, 0o644)
            #expect(fd >= 0, "create: errno \(errno)")
            #expect(write(fd, data, data.count) == data.count && fsync(fd) == 0, "write and fsync: errno \(errno)")
            close(fd)
            syncFolder()
            try expectCount(0, "durable")
            #expect(unlink(folder + "/durable") == 0)
            if recount {
                let result = try containerfs(["capacity", container.store])
                #expect(result.status == 0, "\(result)")
            }
            // Not durably removed: the journal keeps it, and the count with it.
            try expectCount(megabyte, recount ? "removed, recounted" : "removed")
            syncFolder()
            try expectCount(0, recount ? "recounted, durably removed" : "durably removed")
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

    /// A daemon with 256 descriptors, and 600 synced files rewritten without a sync: each
    /// record holds one descriptor, and once they run out a change is refused with `EIO`
    /// (said once in the daemon's log), never let through untracked; after the cut every
    /// file holds its durable content.
    @Test func changesBeyondTheDaemonsDescriptorsAreRefusedNotLetThrough() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        let daemon = try limitedDaemon(container, descriptors: 256, options: "power-loss")
        let script = #"""
            import errno, os, sys
            docs = sys.argv[1] + "/Documents"
            for i in range(600):
                with open(f"{docs}/f{i}", "w") as f:
                    f.write(f"durable {i}"); f.flush(); os.fsync(f.fileno())
            fd = os.open(docs, os.O_RDONLY); os.fsync(fd); os.close(fd)
            changed = refused = 0
            for i in range(600):
                try:
                    with open(f"{docs}/f{i}", "r+") as f: f.write("CHANGED")
                    changed += 1
                except OSError as e:
                    assert e.errno == errno.EIO, e
                    refused += 1
            print(changed, refused)
            """#
        let result = try runProgram(["python3", "-c", script, container.mountpoint])
        #expect(result.status == 0, "\(result)")
        let counts = result.stdout.split(whereSeparator: \.isWhitespace).compactMap { Int($0) }
        #expect(counts.count == 2 && counts[0] > 100 && counts[1] > 0, "changed, refused: \(result.stdout)")
        let report = try Self.cut(container)
        #expect(!report.contains("could not"), "\(report)")
        let kept = (0..<600).filter { Self.stored(container, "f\($0)") == "durable \($0)" }.count
        #expect(kept == 600, "\(kept) of 600 files hold their durable content; \(report)")
        container.unmount()
        let log = daemon.wait(seconds: 10).stderr
        #expect(log.components(separatedBy: "power-loss: a change to a file was refused").count == 2, "daemon log: \(log)")
        print("power-loss descriptors: changed, refused: \(result.stdout)", terminator: "")
    }

    /// New files hold no descriptor in their record: with 256 descriptors a program makes
    /// and writes 1,000 files without syncing them (their folder synced, so the names are
    /// durable), none refused; the cut finds each by a walk and empties it.
    @Test func newFilesBeyondTheDaemonsDescriptorsAreRecordedAndEmptiedByTheCut() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        let daemon = try limitedDaemon(container, descriptors: 256, options: "power-loss")
        let script = #"""
            import os, sys
            docs = sys.argv[1] + "/Documents"
            os.mkdir(docs + "/tree")
            for i in range(1000):
                with open(f"{docs}/tree/f{i}", "w") as f: f.write(f"never synced {i}")
            os.link(f"{docs}/tree/f0", f"{docs}/tree/link")
            for folder in [docs + "/tree", docs]:
                fd = os.open(folder, os.O_RDONLY); os.fsync(fd); os.close(fd)
            """#
        let result = try runProgram(["python3", "-c", script, container.mountpoint])
        #expect(result.status == 0, "\(result)")
        let report = try Self.cut(container)
        #expect(report.hasPrefix("power cut: dropped 1000 files (") && !report.contains("could not"), "\(report)")
        let sizes = (0..<1000).map { (try? FileManager.default.attributesOfItem(atPath: container.stored("Documents/tree/f\($0)"))[.size] as? Int) ?? -1 }
        #expect(sizes.allSatisfy { $0 == 0 }, "sizes other than 0: \(sizes.filter { $0 != 0 }.prefix(5))")
        #expect(Self.stored(container, "tree/link") == "")
        container.unmount()
        _ = daemon.wait(seconds: 10)
    }

    /// Folders made through the mount hold no descriptor in their records either: with 256
    /// descriptors a program makes 2,000 folders and a chain 300 deep without syncing them,
    /// none refused (the records' limit was 128 folders); the cut empties each such folder
    /// whose own name is durable, and what was durable elsewhere and moved into one comes
    /// back where it was.
    @Test func newFoldersBeyondTheDaemonsDescriptorsAreRecordedAndEmptiedByTheCut() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        let daemon = try limitedDaemon(container, descriptors: 256, options: "power-loss")
        let script = #"""
            import os, sys
            docs = sys.argv[1] + "/Documents"
            def sync(path):
                fd = os.open(path, os.O_RDONLY); os.fsync(fd); os.close(fd)
            with open(docs + "/keep", "w") as f: f.write("durable"); f.flush(); os.fsync(f.fileno())
            os.makedirs(docs + "/old")
            with open(docs + "/old/inside", "w") as f: f.write("durable too"); f.flush(); os.fsync(f.fileno())
            sync(docs + "/old"); sync(docs)
            tree = docs + "/tree"
            os.mkdir(tree)
            sync(docs)   # tree's name is durable, nothing in it
            for i in range(1000):
                os.mkdir(f"{tree}/d{i}"); os.mkdir(f"{tree}/d{i}/s")
                with open(f"{tree}/d{i}/f", "w") as f: f.write("never synced")
            chain = tree + "/chain"
            os.mkdir(chain)
            fd = os.open(chain, os.O_RDONLY)
            for _ in range(300):
                os.mkdir("c", dir_fd=fd); child = os.open("c", os.O_RDONLY, dir_fd=fd); os.close(fd); fd = child
            os.close(fd)
            sync(tree); sync(f"{tree}/d5")   # d0..d999 and chain durable in tree; f and s in d5
            os.rename(docs + "/keep", tree + "/d0/keep")
            os.rename(docs + "/old", tree + "/d1/old")
            """#
        let result = try runProgram(["python3", "-c", script, container.mountpoint])
        #expect(result.status == 0, "\(result)")
        let report = try Self.cut(container)
        #expect(!report.contains("could not"), "\(report)")
        let tree = container.stored("Documents/tree")
        let names = Set((try? FileManager.default.contentsOfDirectory(atPath: tree)) ?? [])
        let expected = Set((0..<1000).map { "d\($0)" } + ["chain"])
        #expect(names.count == expected.count && names.isSuperset(of: expected),
                "tree holds \(names.count) names, \(expected.subtracting(names).count) of the durable ones missing")
        let filled = (0..<1000).filter { ((try? FileManager.default.contentsOfDirectory(atPath: tree + "/d\($0)").sorted()) ?? ["?"]) != ($0 == 5 ? ["f", "s"] : []) }
        #expect(filled.count == 0, "folders not as durable: \(filled.prefix(5))")
        #expect((try? FileManager.default.contentsOfDirectory(atPath: tree + "/d5").sorted()) == ["f", "s"])
        #expect(Self.stored(container, "tree/d5/f") == "")
        #expect((try? FileManager.default.contentsOfDirectory(atPath: tree + "/d5/s")) == [])
        #expect((try? FileManager.default.contentsOfDirectory(atPath: tree + "/chain")) == [])
        #expect(Self.stored(container, "keep") == "durable")
        #expect(Self.stored(container, "old/inside") == "durable too")
        container.unmount()
        _ = daemon.wait(seconds: 10)
    }

    /// A file renamed over another gets its data durable with its folder's fsync; removed
    /// before that fsync, its inode number would be freed, and the store's file system (ext4)
    /// gives it to the next new file (the record once keyed by the number alone, and this
    /// showed it: 5 of 5 rounds). That file, written and never synced, must still be emptied
    /// by the cut: the fsync makes the renamed file's data durable, not the data of whatever
    /// file holds its number by then.
    @Test func aNewFileTakingTheNumberOfARemovedRenamedFileIsNotMadeDurable() throws {
        try withMountedContainer(options: ["power-loss"]) { container in
            let result = try Self.python("""
                store = \(String(reflecting: container.stored("Documents")))
                save('state', 'durable'); sync('state'); sync('.')
                reused = made = 0
                for round in range(5):
                    if round > 0: save('state', 'replaced')
                    save('state.tmp', 'renamed over, then removed')
                    number = os.stat(store + '/state.tmp').st_ino
                    os.rename('state.tmp', 'state')
                    os.unlink('state')
                    for i in range(20):
                        made += 1
                        save(f'new{made}', 'never synced')
                        if os.stat(f'{store}/new{made}').st_ino == number:
                            reused += 1
                            break
                sync('.')
                print(reused, made)   # reused: 0 once the record holds the renamed file
                """, in: container)
            let counts = result.stdout.split(whereSeparator: \.isWhitespace).compactMap { Int($0) }
            try #require(counts.count == 2)
            _ = try Self.cut(container)
            let kept = (1...counts[1]).filter { Self.stored(container, "new\($0)") != "" }
            #expect(kept.isEmpty, "new files never synced that kept their data after the cut: \(kept)")
            #expect(Self.stored(container, "state") == nil)
        }
    }

    /// A file made and written through the mount and removed before its folder's sync has a
    /// record with no descriptor (nothing durable), which the cut's walk finds by number. A
    /// file that arrives behind the mount (`share put`, `deliver`, an update) takes that
    /// number as soon as it is free (ext4 gives a folder's next file the lowest free one):
    /// the cut must leave it alone, not empty a file the program could never write. Before
    /// the records kept the file's birth time, the root daemon emptied it.
    @Test func aFileArrivingBehindTheMountWithTheNumberOfARemovedNewFileKeepsItsData() throws {
        try withMountedContainer(options: ["power-loss"]) { container in
            let result = try Self.python("""
                store = \(String(reflecting: container.stored("Documents")))
                save('scratch', 'never durable')
                print(os.stat(store + '/scratch').st_ino)
                os.unlink('scratch')
                """, in: container)
            let number = try #require(UInt(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)))
            // The number is free once the daemon let go of the file (the kernel's forget).
            var taken: String?
            let deadline = Date().addingTimeInterval(20)
            for index in 0..<100_000 where taken == nil && Date() < deadline {
                if index > 0, index % 16 == 0 { usleep(50_000) }
                let path = container.stored("Documents/arrived\(index)")
                let fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0o644)
                try #require(fd >= 0)
                #expect(write(fd, "put by share", 12) == 12)
                close(fd)
                var info = stat()
                if lstat(path, &info) == 0, UInt(info.st_ino) == number { taken = "arrived\(index)" }
            }
            let name = try #require(taken, "no file made behind the mount took number \(number)")
            _ = try Self.cut(container)
            #expect(Self.stored(container, name) == "put by share")
        }
    }

    /// A durable sparse file (1 GiB, two blocks) truncated and rewritten: the daemon saves
    /// the durable bytes the change alters, and read holes as bytes, so it wrote a GiB of
    /// zeros into the journal, on the store's disk, outside any capacity: a confined program
    /// filled its host's disk (here a 64 MiB tmpfs, ENOSPC) with files that take no room.
    /// The copy keeps the holes, and the cut puts back the file as it was, holes and all.
    @Test func aSparseDurableFileIsSavedWithItsHolesNotFillingTheDisk() throws {
        let container = try MountedContainer(tmpfs: "64m")
        defer { container.unmount() }
        try container.mount(options: ["power-loss"])
        try Self.python("""
            with open('sparse', 'wb') as f:
                f.write(b'head')
                f.seek(1 << 30)
                f.write(b'tail')
            sync('sparse'); sync('.')
            with open('sparse', 'wb') as f: f.write(b'new')
            with open('sparse', 'r+b') as f:
                f.seek((1 << 29) - 2)
                f.write(b'middle')
            """, in: container)
        var disk = statvfs()
        #expect(statvfs(container.stored("."), &disk) == 0)
        let used = Int64(disk.f_blocks - disk.f_bfree) * Int64(disk.f_frsize)
        #expect(used < 8 << 20, "the journal takes \(used) bytes of the disk")
        _ = try Self.cut(container)
        var info = stat()
        #expect(lstat(container.stored("Documents/sparse"), &info) == 0)
        #expect(info.st_size == (1 << 30) + 4)
        #expect(Int64(info.st_blocks) * 512 < 1 << 20, "the file put back takes \(info.st_blocks) blocks")
        let file = try FileHandle(forReadingFrom: URL(fileURLWithPath: container.stored("Documents/sparse")))
        defer { try? file.close() }
        #expect(try file.read(upToCount: 4) == Data("head".utf8))
        try file.seek(toOffset: (1 << 29) - 2)
        #expect(try file.read(upToCount: 6) == Data(count: 6))
        try file.seek(toOffset: 1 << 30)
        #expect(try file.read(upToCount: 4) == Data("tail".utf8))
    }

    /// Files made as long as the store's file system allows (a tmpfs: 2^63 - 1 bytes, no
    /// blocks) add up past what an Int64 holds: the cut's report summed the bytes it
    /// dropped with a trapping `+`, and the root daemon died halfway through the cut, one
    /// file emptied and the other not, the mount gone ("did not confirm the power cut").
    @Test func theCutOfFilesAsLongAsTheFileSystemAllowsCompletes() throws {
        let container = try MountedContainer(tmpfs: "16m")
        defer { container.unmount() }
        try container.mount(options: ["power-loss"])
        let refused = try Self.python("""
            for name in ['a', 'b', 'c']: save(name, 'durable' if name == 'c' else '')
            for name in ['a', 'b', 'c', '.']: sync(name)
            for name in ['a', 'b', 'c']: os.truncate(name, (1 << 63) - 1)
            # Two durable files of that length rewritten: their saved copies (holes) would
            # end past 2^63 - 1; the second is refused.
            for name in ['d', 'e']:
                save(name, '')
                os.truncate(name, (1 << 63) - 1)
                with open(name, 'r+b') as f:
                    f.seek(1 << 20)
                    f.write(b'durable')
                sync(name)
            sync('.')
            os.truncate('d', 0)
            try:
                os.truncate('e', 0)
                print('e truncated')
            except OSError as error:
                print('e:', os.strerror(error.errno))
            """, in: container)
        #expect(refused.stdout == "e: Input/output error\n")
        let report = try Self.cut(container)
        #expect(report.hasPrefix("power cut: dropped 4 files (9223372036854775807 bytes)"), "\(report)")
        #expect(Self.stored(container, "a") == "")
        #expect(Self.stored(container, "b") == "")
        #expect(Self.stored(container, "c") == "durable")
        var info = stat()
        #expect(lstat(container.stored("Documents/d"), &info) == 0 && info.st_size == Int.max)
    }

    /// A seeded random program against a model of what a power failure must leave:
    /// `python3 PROGRAM SEED OPERATIONS MODEL EXPECTED` writes, truncates, punches and zeroes
    /// (fallocate), copies (copy_file_range), rewrites with `O_TRUNC` and `O_SYNC`, links,
    /// renames (over recorded files, across folders), removes and makes files in two
    /// folders, through fresh and long-open descriptors, with fsync and fdatasync of files and
    /// folders between; it prints each operation and leaves as JSON each folder's durable
    /// names and each file's durable bytes, which the store must hold exactly after the cut.
    static let differentialProgram = #"""
        import ctypes, json, os, random, sys
        seed, ops, ext4, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == 'ext4', sys.argv[4]
        rnd = random.Random(seed)
        libc = ctypes.CDLL(None, use_errno=True)
        libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
        def data(n): return bytes(rnd.randrange(256) for _ in range(n))
        def fsync_path(path):
            fd = os.open(path, os.O_RDONLY); os.fsync(fd); os.close(fd)
        class File:
            def __init__(self): self.durable = b''
        folders = ['d0', 'd1']
        names = {}        # 'd0/f1' -> File, now
        durable = {}      # folder -> {name: File}, as of its last fsync
        ordered = {d: set() for d in folders}
        partners = {d: set() for d in folders}
        fds = {}          # descriptor -> File
        for d in folders: os.mkdir(d)
        for i in range(6):
            f, path = File(), '%s/f%d' % (rnd.choice(folders), i)
            f.durable = data(rnd.choice([0, 10, 4096, 9000]))
            with open(path, 'wb') as h:
                h.write(f.durable); h.flush(); os.fsync(h.fileno())
            names[path] = f
        for d in folders + ['.']: fsync_path(d)
        for d in folders: durable[d] = {k.split('/')[1]: v for k, v in names.items() if k.startswith(d + '/')}
        def current(f):
            for k, v in names.items():
                if v is f: return open(k, 'rb').read()
            for fd, v in fds.items():
                if v is f: return os.pread(fd, os.fstat(fd).st_size, 0)
        def folder_synced(d):
            todo, seen = (list(folders) if ext4 else [d]), set()
            while todo:
                x = todo.pop()
                if x in seen: continue
                seen.add(x); todo += partners[x]
                durable[x] = {k.split('/')[1]: v for k, v in names.items() if k.startswith(x + '/')}
                for f in ordered[x]: f.durable = current(f)
                ordered[x], partners[x] = set(), set()
        def file_synced(f):
            f.durable = current(f)
            if ext4: folder_synced(folders[0])
        count = [6]
        def new_name(d):
            count[0] += 1
            return '%s/n%d' % (d, count[0])
        for step in range(ops):
            kind = rnd.choice(['pwrite'] * 5 + ['truncate', 'truncate', 'fsync', 'fsync', 'fdatasync', 'osync', 'punch', 'zero',
                               'keepsize', 'copy', 'otrunc', 'link', 'rename', 'rename', 'unlink', 'create', 'dirsync', 'dirsync', 'open', 'close'])
            if not names and kind not in ('create', 'dirsync', 'close'): continue
            name = rnd.choice(sorted(names)) if names else None
            line = '%d %s %s' % (step, kind, name)
            if kind in ('pwrite', 'truncate', 'fsync', 'fdatasync', 'punch', 'zero', 'keepsize'):
                if fds and rnd.random() < 0.3:
                    fd = rnd.choice(sorted(fds)); f, mine = fds[fd], False
                    line += ' (fd %d)' % fd
                else:
                    fd, f, mine = os.open(name, os.O_RDWR), names[name], True
                size = os.fstat(fd).st_size
                if kind == 'pwrite':
                    off, n = rnd.randrange(0, size + 9000), rnd.choice([1, 100, 4096, 5000])
                    os.pwrite(fd, data(n), off); line += ' @%d +%d' % (off, n)
                elif kind == 'truncate':
                    new = rnd.choice([0, size // 2, size + rnd.randrange(1, 9000)])
                    os.ftruncate(fd, new); line += ' to %d' % new
                elif kind in ('fsync', 'fdatasync'):
                    (os.fsync if kind == 'fsync' else os.fdatasync)(fd)
                else:
                    off, n = rnd.randrange(0, size + 3000), rnd.randrange(1, 9000)
                    mode = {'punch': 0x03, 'zero': 0x10, 'keepsize': 0x01}[kind]
                    assert libc.fallocate(fd, mode, off, n) == 0, ctypes.get_errno()
                    line += ' @%d +%d' % (off, n)
                if mine: os.close(fd)
                if kind in ('fsync', 'fdatasync'): file_synced(f)
            elif kind == 'osync':
                fd = os.open(name, os.O_WRONLY | rnd.choice([os.O_SYNC, os.O_DSYNC]))
                os.pwrite(fd, data(100), rnd.randrange(0, os.fstat(fd).st_size + 3000)); os.close(fd)
                file_synced(names[name])
            elif kind == 'copy':
                target = rnd.choice(sorted(names))
                if names[target] is names[name]: continue
                source, sink = os.open(name, os.O_RDONLY), os.open(target, os.O_WRONLY)
                offset = rnd.randrange(0, os.fstat(source).st_size + 1)
                os.copy_file_range(source, sink, rnd.randrange(1, 20000), offset, rnd.randrange(0, os.fstat(sink).st_size + 5000))
                os.close(source); os.close(sink); line += ' -> ' + target
            elif kind == 'otrunc':
                with open(name, 'wb') as h: h.write(data(rnd.choice([0, 10, 3000])))
            elif kind in ('link', 'rename'):
                folder = rnd.choice(folders)
                others = [k for k in names if k.startswith(folder + '/') and names[k] is not names[name]]
                target = rnd.choice(sorted(others)) if kind == 'rename' and others and rnd.random() < 0.5 else new_name(folder)
                line += ' -> ' + target
                if kind == 'link':
                    os.link(name, target); names[target] = names[name]
                else:
                    over = target in names
                    os.rename(name, target); names[target] = names.pop(name)
                    if over: ordered[folder].add(names[target])
                    source = name.split('/')[0]
                    if source != folder: partners[source].add(folder); partners[folder].add(source)
            elif kind == 'unlink':
                os.unlink(name); del names[name]
            elif kind == 'create':
                f, target = File(), new_name(rnd.choice(folders))
                with open(target, 'wb') as h:
                    h.write(data(rnd.choice([0, 5, 4096])))
                    if rnd.random() < 0.3:
                        h.flush(); os.fsync(h.fileno()); names[target] = f; file_synced(f)
                names[target] = f; line += ' ' + target
            elif kind == 'dirsync':
                folder = rnd.choice(folders); fsync_path(folder); folder_synced(folder); line += ' ' + folder
            elif kind == 'open' and len(fds) < 4:
                fd = os.open(name, os.O_RDWR); fds[fd] = names[name]; line += ' fd %d' % fd
            elif kind == 'close' and fds:
                fd = rnd.choice(sorted(fds)); os.close(fd); del fds[fd]; line += ' fd %d' % fd
            print(line)
        for fd in fds: os.close(fd)
        json.dump({d: {k: v.durable.hex() for k, v in durable[d].items()} for d in folders}, open(out, 'w'))
        """#

    @Test(arguments: [(11 as UInt64, "posix"), (12, "posix"), (13, "posix"), (14, "ext4"), (15, "ext4")])
    func aSeededRandomProgramLeavesExactlyTheDurableState(seed: UInt64, model: String) throws {
        let container = try Self.container(["program.py": Self.differentialProgram])
        defer { container.unmount() }
        try container.mount(options: [model == "ext4" ? "power-loss=ext4" : "power-loss"])
        let expected = container.base + "/expected.json"
        let result = try runProgram(["python3", container.base + "/program.py", "\(seed)", "300", model, expected],
                                    directory: container.mounted("Documents"))
        try #require(result.status == 0, "seed \(seed): \(result)")
        let report = try Self.cut(container)
        let json = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: expected)))
        let durable = try #require(json as? [String: [String: String]])
        let hex = { (data: Data) in data.map { String(format: "%02x", $0) }.joined() }
        for (folder, files) in durable.sorted(by: { $0.key < $1.key }) {
            let names = try FileManager.default.contentsOfDirectory(atPath: container.stored("Documents/" + folder)).sorted()
            #expect(names == files.keys.sorted(), "seed \(seed), \(folder): \(report)\n\(result.stdout)")
            for (name, bytes) in files.sorted(by: { $0.key < $1.key }) {
                let stored = try? Data(contentsOf: URL(fileURLWithPath: container.stored("Documents/\(folder)/\(name)")))
                let holdsTheDurableBytes = stored.map(hex) == bytes
                #expect(holdsTheDurableBytes, "seed \(seed), \(folder)/\(name): \(stored?.count ?? -1) bytes, \(bytes.count / 2) durable; \(report)\n\(result.stdout)")
            }
        }
    }

    /// A daemon with 256 descriptors, its records and node cache full: a file renamed over
    /// another needs its record (a descriptor) for its data to become durable with the
    /// folder's fsync. Each rename is recorded or refused with `EIO`, never let through
    /// unrecorded (a failed open let 7 of 200 through, whose data the cut then dropped);
    /// after the cut each name holds the data of the rename that happened.
    @Test func renamesOverFilesWithTheDaemonsDescriptorsSpentAreRecordedOrRefused() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        let daemon = try limitedDaemon(container, descriptors: 256, options: "power-loss")
        let script = #"""
            import errno, os, sys
            docs = sys.argv[1] + "/Documents"
            def sync(path):
                fd = os.open(path, os.O_RDONLY); os.fsync(fd); os.close(fd)
            for i in range(400):
                with open(f"{docs}/f{i}", "w") as f:
                    f.write("durable"); f.flush(); os.fsync(f.fileno())
            sync(docs)
            for i in range(200):
                try:
                    with open(f"{docs}/f{i}", "r+") as f: f.write("CHANGED")
                except OSError as e:
                    assert e.errno == errno.EIO, e
            renamed = []
            def rename_over(i):
                try:
                    with open(f"{docs}/tmp{i}", "w") as f: f.write(f"renamed {i}")
                    os.rename(f"{docs}/tmp{i}", f"{docs}/f{i}")
                    renamed.append(i)
                except OSError as e:
                    assert e.errno == errno.EIO, e
            for i in range(200, 300): rename_over(i)
            sync(docs)
            # Synced, 50 records may go to the next changes; each fsync of the folder frees
            # those its renames took.
            for i in range(50): sync(f"{docs}/f{i}")
            for i in range(300, 400):
                rename_over(i)
                if i % 10 == 9: sync(docs)
            print(" ".join(map(str, renamed)))
            """#
        let result = try runProgram(["python3", "-c", script, container.mountpoint])
        #expect(result.status == 0, "\(result)")
        let renamed = Set(result.stdout.split(whereSeparator: \.isWhitespace).compactMap { Int($0) })
        #expect(!renamed.isEmpty, "every rename was refused")
        _ = try Self.cut(container)
        let wrong = (200..<400).filter { Self.stored(container, "f\($0)") != (renamed.contains($0) ? "renamed \($0)" : "durable") }
        #expect(wrong.isEmpty, "\(wrong.count) names of \(200) hold other data than their rename's (\(renamed.count) renamed), first f\(wrong.first ?? 0): \(Self.stored(container, "f\(wrong.first ?? 0)") ?? "none")")
        container.unmount()
        _ = daemon.wait(seconds: 10)
    }

    /// The same daemon, descriptors spent: the first name change in a folder since its sync
    /// needs a descriptor for the folder's record. It gets one once the node cache is halved
    /// (as the other records do), else the change is refused with `EIO`; never `EMFILE`,
    /// which a program does not expect from `mkdir`, `rename` or `unlink`.
    @Test func nameChangesWithTheDaemonsDescriptorsSpentAreRecordedOrRefusedWithEIO() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        let daemon = try limitedDaemon(container, descriptors: 256, options: "power-loss")
        let script = #"""
            import collections, errno, os, sys
            docs = sys.argv[1] + "/Documents"
            for i in range(300):
                with open(f"{docs}/f{i}", "w") as f:
                    f.write("durable"); f.flush(); os.fsync(f.fileno())
            fd = os.open(docs, os.O_RDONLY); os.fsync(fd); os.close(fd)
            for i in range(200):
                try:
                    with open(f"{docs}/f{i}", "r+") as f: f.write("CHANGED")
                except OSError as e:
                    assert e.errno == errno.EIO, e
            for i in range(100):   # records the next changes may take
                fd = os.open(f"{docs}/f{i}", os.O_RDONLY); os.fsync(fd); os.close(fd)
            results = collections.Counter()
            for i in range(150):
                for step in [lambda: os.mkdir(f"{docs}/d{i}"), lambda: open(f"{docs}/d{i}/new", "w").close(),
                             lambda: os.rename(f"{docs}/d{i}/new", f"{docs}/d{i}/renamed"), lambda: os.unlink(f"{docs}/f{i + 150}")]:
                    try:
                        step(); results["ok"] += 1
                    except OSError as e:
                        results[errno.errorcode[e.errno]] += 1
            print(dict(results))
            """#
        let result = try runProgram(["python3", "-c", script, container.mountpoint])
        #expect(result.status == 0, "\(result)")
        #expect(!result.stdout.contains("EMFILE") && result.stdout.contains("'ok'"), "\(result.stdout)")
        let report = try Self.cut(container)
        #expect(!report.contains("could not"), "\(report)")
        // Nothing of it was durable: the folders go, the removed files come back.
        let names = try FileManager.default.contentsOfDirectory(atPath: container.stored("Documents"))
        #expect(!names.contains { $0.hasPrefix("d") } && (0..<300).allSatisfy { names.contains("f\($0)") }, "\(names.sorted().prefix(10))")
        container.unmount()
        _ = daemon.wait(seconds: 10)
        print("power-loss name changes, descriptors spent: \(result.stdout)", terminator: "")
    }

    /// A rename refused with `EIO` (the records had no descriptor left for the file it
    /// would have put over another) never happened: a later fsync of its source folder
    /// must not make its target folder's names durable. It once joined the two folders
    /// before the refusal, and the cut kept a file the target's sync never covered (found
    /// by `power-fuzz.py --descriptors 64`).
    @Test func aRenameRefusedWithEIOJoinsNoFolders() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        let daemon = try limitedDaemon(container, descriptors: 256, options: "power-loss")
        let script = #"""
            import errno, os, sys
            docs = sys.argv[1] + "/Documents"
            def sync(path):
                fd = os.open(path, os.O_RDONLY); os.fsync(fd); os.close(fd)
            def durable(path, text):
                with open(path, "w") as f: f.write(text); f.flush(); os.fsync(f.fileno())
            os.mkdir(docs + "/A"); os.mkdir(docs + "/B")
            durable(docs + "/A/x", "x"); durable(docs + "/B/y", "y")
            for i in range(300): durable(f"{docs}/f{i}", "durable")
            sync(docs + "/A"); sync(docs + "/B"); sync(docs)
            open(docs + "/A/a1", "w").close(); open(docs + "/B/b1", "w").close()
            refused = 0
            for i in range(300):   # until the records have no descriptor left
                try:
                    with open(f"{docs}/f{i}", "r+") as f: f.write("CHANGED")
                except OSError as e:
                    assert e.errno == errno.EIO, e
                    refused += 1
            assert refused > 0, "the records never filled"
            try:
                os.rename(docs + "/A/x", docs + "/B/y")
                print("renamed")
            except OSError as e:
                assert e.errno == errno.EIO, e
                print("refused")
            sync(docs + "/A")
            """#
        let result = try runProgram(["python3", "-c", script, container.mountpoint])
        #expect(result.status == 0 && result.stdout == "refused\n", "\(result)")
        let report = try Self.cut(container)
        #expect(!report.contains("could not"), "\(report)")
        let inB = (try? FileManager.default.contentsOfDirectory(atPath: container.stored("Documents/B")).sorted()) ?? []
        let inA = (try? FileManager.default.contentsOfDirectory(atPath: container.stored("Documents/A")).sorted()) ?? []
        #expect(inB == ["y"], "B, never synced since b1 was made, holds \(inB)")
        #expect(inA == ["a1", "x"], "A, synced, holds \(inA)")
        #expect(Self.stored(container, "A/x") == "x" && Self.stored(container, "B/y") == "y")
        container.unmount()
        _ = daemon.wait(seconds: 10)
    }

    /// A daemon with 64 descriptors, its records holding theirs as the power goes (folders
    /// with a name removed since their sync): the cut's walk for new files, 24 folders deep,
    /// must still find and empty the one never synced (the folders' records let go of their
    /// descriptors only after it, and it stopped short, silently).
    @Test func theCutsWalkFindsNewFilesWithTheDaemonsDescriptorsSpent() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        let daemon = try limitedDaemon(container, descriptors: 64, options: "power-loss")
        let script = #"""
            import errno, os, sys
            docs = sys.argv[1] + "/Documents"
            def sync(path):
                fd = os.open(path, os.O_RDONLY); os.fsync(fd); os.close(fd)
            deep = docs + "".join(f"/d{i}" for i in range(24))
            os.makedirs(deep)
            with open(deep + "/new", "w") as f: f.write("never synced")
            for i in range(24, -1, -1): sync(docs + "".join(f"/d{j}" for j in range(i)))
            for i in range(40):
                os.mkdir(f"{docs}/k{i}")
                with open(f"{docs}/k{i}/file", "w") as f: f.write("durable"); f.flush(); os.fsync(f.fileno())
                sync(f"{docs}/k{i}")
            sync(docs)
            for i in range(40):
                try:
                    os.unlink(f"{docs}/k{i}/file")
                except OSError as e:
                    assert e.errno == errno.EIO, e   # the records are full
            """#
        let result = try runProgram(["python3", "-c", script, container.mountpoint])
        #expect(result.status == 0, "\(result)")
        let report = try Self.cut(container)
        #expect(Self.stored(container, (0..<24).map { "d\($0)/" }.joined() + "new") == "", "\(report)")
        #expect((0..<40).allSatisfy { Self.stored(container, "k\($0)/file") == "durable" })
        container.unmount()
        _ = daemon.wait(seconds: 10)
    }

    /// A program rewriting every other byte of a synced file, 100,000 one-byte writes before
    /// its next sync: each saves its durable byte, and the record of what is saved grows to
    /// 100,000 ranges. Each write must cost the same (each once copied the whole record:
    /// these writes took 45 s, now 2 s), and the cut puts every byte back.
    @Test func manyScatteredWritesBetweenTwoSyncsStayCheap() throws {
        try withMountedContainer(options: ["power-loss"]) { container in
            let result = try Self.python("""
                import time
                with open('big', 'wb') as f: f.write(b'D' * 200_000)
                sync('big'); sync('.')
                fd = os.open('big', os.O_RDWR)
                started = time.monotonic()
                for offset in range(0, 200_000, 2): os.pwrite(fd, b'x', offset)
                print(round(time.monotonic() - started, 2))
                os.close(fd)
                """, in: container)
            let seconds = Double(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) ?? .infinity
            #expect(seconds < 20, "100,000 scattered writes took \(seconds) s")
            _ = try Self.cut(container)
            #expect(Self.stored(container, "big") == String(repeating: "D", count: 200_000))
            print("power-loss: 100,000 scattered one-byte writes: \(seconds) s")
        }
    }

    // MARK: Launches: run --power-cut, --kill

    /// A store (not mounted: `run` mounts it), with `programs` written beside it.
    static func container(_ programs: [String: String]) throws -> MountedContainer {
        let container = try MountedContainer()
        for (name, text) in programs { try Data(text.utf8).write(to: URL(fileURLWithPath: container.base + "/" + name)) }
        return container
    }

    /// `containerfs run STORE --no-confine --launches … --json -- PROGRAM`: the result and
    /// its JSON report (the last line of stdout).
    static func launches(_ container: MountedContainer, _ options: [String], _ program: [String]) throws -> (ProgramResult, [String: Any]) {
        let result = try containerfs(["run", container.store, "--no-confine", "--json"] + options + ["--"] + program)
        let last = result.stdout.split(separator: "\n").last.map(String.init) ?? ""
        let report = (try? JSONSerialization.jsonObject(with: Data(last.utf8))) as? [String: Any] ?? [:]
        return (result, report)
    }

    static func events(_ report: [String: Any]) -> [[String: Any]] {
        report["launches"] as? [[String: Any]] ?? []
    }

    @Test func killedLaunchesAreReportedAndTheLastRunsToItsEnd() throws {
        let container = try Self.container([:])
        let (result, report) = try Self.launches(container, ["--launches", "3", "--kill", "random", "--within", "0.3", "--seed", "9"],
                                                 ["sh", "-c", "echo started >> Documents/log; sleep 0.6; echo ended >> Documents/log"])
        #expect(result.status == 0, "\(result)")
        let launches = Self.events(report)
        #expect(launches.count == 3)
        #expect(launches.prefix(2).allSatisfy { $0["event"] as? String == "kill" && $0["status"] is NSNull && $0["dropped"] == nil })
        #expect(launches.last?["status"] as? Int == 0)
        #expect(report["seed"] as? Int == 9)
        #expect(result.stderr.contains("launch 1 of 3: killed at "), "\(result)")
        #expect(result.stderr.contains("launch 3 of 3: exited 0"), "\(result)")
        // A kill drops nothing: each launch's line stays (one killed before its shell wrote
        // would not have one); only the last launch ended.
        let log = (try? String(contentsOfFile: container.stored("Documents/log"), encoding: .utf8)) ?? ""
        #expect(log.hasSuffix("started\nended\n") && log.components(separatedBy: "ended").count == 2, "\(log)")
    }

    /// sqlite3 (Python's module) in a write loop: at its start, each launch checks the
    /// database (`integrity_check`) and that every transaction a previous launch logged as
    /// committed is there, then commits numbered transactions for `seconds`, logging each
    /// on the host once `COMMIT` returned.
    static let sqliteProgram = """
        import os, sqlite3, sys, time
        mode, sync, log, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
        os.chdir(os.path.join(os.environ['HOME'], 'Documents'))
        committed = [int(x) for x in open(log).read().split()] if os.path.exists(log) else []
        db = sqlite3.connect('app.db', isolation_level=None)
        db.execute('pragma journal_mode=%s' % mode)
        db.execute('pragma synchronous=%s' % sync)
        db.execute('create table if not exists t(id integer primary key, body text)')
        check = db.execute('pragma integrity_check').fetchone()[0]
        if check != 'ok':
            print('integrity_check: %s' % check, file=sys.stderr); sys.exit(2)
        have = {row[0] for row in db.execute('select id from t')}
        missing = [i for i in committed if i not in have]
        if missing:
            print('lost %d of %d committed transactions (first %d)' % (len(missing), len(committed), missing[0]), file=sys.stderr)
            sys.exit(3)
        i = max(have | set(committed) | {0})
        end = time.monotonic() + seconds
        with open(log, 'a') as out:
            while time.monotonic() < end:
                i += 1
                db.execute('begin')
                db.execute('insert into t values (?, ?)', (i, 'x' * 300))
                db.execute('commit')
                out.write('%d\\n' % i); out.flush()
        """

    @Test(arguments: [("wal", "FULL", 21 as UInt64), ("truncate", "FULL", 22), ("delete", "EXTRA", 23)])
    func sqliteKeepsEveryCommittedTransactionAcrossCuts(mode: String, sync: String, seed: UInt64) throws {
        let container = try Self.container(["app.py": Self.sqliteProgram])
        let log = container.base + "/committed"
        let (result, report) = try Self.launches(container, ["--launches", "4", "--power-cut", "random", "--within", "0.8", "--seed", "\(seed)"],
                                                 ["python3", container.base + "/app.py", mode, sync, log, "0.8"])
        #expect(result.status == 0, "\(mode) \(sync): \(result)")
        let launches = Self.events(report)
        #expect(launches.prefix(3).allSatisfy { $0["event"] as? String == "power-cut" }, "\(report)")
        #expect(launches.last?["status"] as? Int == 0)
        let committed = (try? String(contentsOfFile: log, encoding: .utf8))?.split(separator: "\n").count ?? 0
        #expect(committed > 0, "no transaction was committed")
    }

    @Test func sqliteWithoutSyncLosesCommittedTransactionsAndTheRunNamesTheSeed() throws {
        let container = try Self.container(["app.py": Self.sqliteProgram])
        let log = container.base + "/committed"
        let (result, report) = try Self.launches(container, ["--launches", "2", "--power-cut", "1", "--seed", "5"],
                                                 ["python3", container.base + "/app.py", "wal", "OFF", log, "2"])
        #expect(result.status == 3, "\(result)")
        #expect(result.stderr.contains("lost "), "\(result)")
        #expect(result.stderr.contains("launch 2 of 2 failed with status 3 after the power cut in launch 1 (seed 5); replay it with --launches 2 --purge-between tmp --seed 5 --power-cut 1.0"), "\(result)")
        let dropped = Self.events(report).first?["dropped"] as? [String: Any]
        #expect((dropped?["names"] as? Int ?? 0) > 0, "\(report)")
        #expect(report["failed"] as? Int == 2)
    }

    /// Saves its state as JSON to a temporary name and renames it over the old file,
    /// `--sync` with fsync of the file and of the folder; at its start, fails if the state
    /// it saved last time (logged on the host) is missing or cannot be read.
    static let jsonSaver = """
        import json, os, sys, time
        log, sync = sys.argv[1], '--sync' in sys.argv
        os.chdir(os.path.join(os.environ['HOME'], 'Documents'))
        if os.path.exists(log):
            try:
                state = json.load(open('state.json'))
            except Exception as error:
                print('state lost: %s' % error, file=sys.stderr); sys.exit(4)
        end = time.monotonic() + 1.5
        version = 0
        while time.monotonic() < end:
            version += 1
            with open('state.json.tmp', 'w') as f:
                json.dump({'version': version, 'notes': ['x' * 100] * 20}, f)
                if sync:
                    f.flush(); os.fsync(f.fileno())
            os.rename('state.json.tmp', 'state.json')
            if sync:
                folder = os.open('.', os.O_RDONLY); os.fsync(folder); os.close(folder)
            with open(log, 'a') as out: out.write('%d\\n' % version)
        """

    @Test(arguments: [false, true])
    func aJSONSaverLosesItsFileWithoutFsyncAndNeverWithIt(synced: Bool) throws {
        let container = try Self.container(["saver.py": Self.jsonSaver])
        let log = container.base + "/saved"
        let cuts = synced ? ["--launches", "4", "--power-cut", "random", "--within", "0.7"] : ["--launches", "2", "--power-cut", "1"]
        let (result, _) = try Self.launches(container, cuts + ["--seed", "31"],
                                            ["python3", container.base + "/saver.py", log] + (synced ? ["--sync"] : []))
        if synced {
            #expect(result.status == 0, "\(result)")
        } else {
            #expect(result.status == 4, "\(result)")
            #expect(result.stderr.contains("state lost"), "\(result)")
        }
    }

    /// A git commit loop for `$3` milliseconds: at its start `git fsck --full`, and every
    /// commit logged on the host as made must be there but the last `$4`; `init` makes the
    /// repository (in a run without cuts).
    static let gitProgram = """
        set -u
        log=$1; fsync=$2
        cd "$HOME/Documents"
        export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@t GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@t HOME=/tmp GIT_CONFIG_NOSYSTEM=1
        if [ "$3" = init ]; then git init -q repo && cd repo && git commit -q --allow-empty -m start && : > "$log"; exit 0; fi
        cd repo || exit 9
        git fsck --full >/dev/null 2>&1 || { echo "git fsck failed" >&2; exit 2; }
        have=$(git rev-list --count HEAD); want=$(wc -l < "$log")
        [ $((have + $4)) -gt "$want" ] || { echo "lost commits: $have of $want" >&2; exit 3; }
        git config core.fsync "$fsync"; git config core.fsyncMethod fsync
        i=0; end=$(( $(date +%s%N) + $3 * 1000000 ))
        while [ "$(date +%s%N)" -lt "$end" ]; do
          i=$((i+1)); echo "$i" > "file$((i % 5))"
          # A cut can leave index.lock behind, as a crash does: git then refuses to commit.
          git add -A && git commit -q -m "c$i" || exit 0
          echo "$i" >> "$log"
        done
        """

    /// With core.fsync=all the last commit may go: git fsyncs its ref's new file but not the
    /// folder it is renamed in, which only the next fsync makes durable.
    @Test(arguments: ["all", "none"])
    func gitKeepsItsCommitsUnderExt4sModelOnlyWhenItFsyncs(fsync: String) throws {
        let container = try Self.container(["git.sh": Self.gitProgram])
        let log = container.base + "/commits"
        let made = try containerfs(["run", container.store, "--no-confine", "--", "sh", container.base + "/git.sh", log, fsync, "init"])
        #expect(made.status == 0, "\(made)")
        // The loop outlasts the cut: each launch but the last is cut while it commits.
        let cuts = fsync == "all" ? ["--launches", "4", "--power-cut", "random", "--within", "0.8"] : ["--launches", "2", "--power-cut", "0.6"]
        let (result, report) = try Self.launches(container, cuts + ["--power-model", "ext4", "--seed", "41"],
                                                 ["sh", container.base + "/git.sh", log, fsync, "1000", fsync == "all" ? "1" : "0"])
        if fsync == "all" {
            #expect(result.status == 0, "\(result)")
            #expect(Self.events(report).last?["status"] as? Int == 0)
        } else {
            #expect(result.status == 3, "\(result)")
            #expect(result.stderr.contains("lost commits"), "\(result)")
            #expect(result.stderr.contains("--power-model ext4"), "\(result)")
        }
    }
}
