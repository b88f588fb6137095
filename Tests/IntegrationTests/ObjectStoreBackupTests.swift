import Foundation
import Glibc
import Testing

/// Backups off the machine (issue 16, SPEC §13) against a real S3-compatible server,
/// SeaweedFS on loopback: no mock.
@Suite("Backups in an object store", .serialized)
struct ObjectStoreBackupTests {
    /// Every kind of entry survives the trip through the object store; `backups` lists the
    /// archive; a second store with another installer key — another machine — restores
    /// it, and the container verifies, mounts and shows the data.
    @Test func roundTripToAnotherMachine() throws {
        try withSeaweedFS { server in
            let source = try MountedContainer()
            let documents = source.stored("Documents")
            try Data("notes".utf8).write(to: URL(fileURLWithPath: documents + "/notes.txt"))
            try FileManager.default.createDirectory(atPath: documents + "/empty/deeper", withIntermediateDirectories: true)
            try FileManager.default.createSymbolicLink(atPath: documents + "/latest", withDestinationPath: "notes.txt")
            #expect(link(documents + "/notes.txt", documents + "/hard.txt") == 0)
            let odd = Array(documents.utf8) + Array("/caf\u{e9}-".utf8) + [0xFF, 0xFE] + Array(".bin".utf8) + [0]
            let fd = odd.map { CChar(bitPattern: $0) }.withUnsafeBufferPointer { open($0.baseAddress!, O_CREAT | O_WRONLY, 0o640) }
            #expect(fd >= 0)
            _ = "not utf-8".withCString { write(fd, $0, 9) }
            close(fd)
            #expect(try runProgram(["setfattr", "-n", "user.colour", "-v", "blue", documents + "/notes.txt"]).status == 0)
            try Data("secret".utf8).write(to: URL(fileURLWithPath: documents + "/skip.txt"))
            #expect(try runProgram(["setfattr", "-n", "user.containerfs.exclude-from-backup", "-v", "1", documents + "/skip.txt"]).status == 0)

            let url = "s3://\(SeaweedFS.bucket)/fleet/demo.tar"
            let backup = try server.containerfs(["backup", source.store, url])
            #expect(backup.status == 0, "\(backup)")
            #expect(backup.stderr.isEmpty, "\(backup)")
            #expect(backup.stdout.contains("to \(url)"), "\(backup)")
            // The same pax archive as on disk: GNU tar lists it.
            let object = try #require(try server.object("fleet/demo.tar"))
            let tarPath = source.base + "/fetched.tar"
            try object.write(to: URL(fileURLWithPath: tarPath))
            let names = try runProgram(["tar", "-tf", tarPath]).stdout
            #expect(names.hasPrefix(".containerfs-backup/manifest\n") && names.contains("Documents/empty/deeper/"))
            #expect(!names.contains("skip.txt"))

            let listed = try server.containerfs(["backups", "s3://\(SeaweedFS.bucket)/fleet"])
            #expect(listed.status == 0, "\(listed)")
            #expect(listed.stdout.contains("Demo.app  \(url)") && listed.stdout.contains("1 backup\n"), "\(listed)")
            let json = try server.containerfs(["backups", "s3://\(SeaweedFS.bucket)", "--json"])
            let parsed = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
            let backups = try #require(parsed["backups"] as? [[String: Any]])
            #expect(backups.count == 1 && backups[0]["key"] as? String == "fleet/demo.tar" && backups[0]["bundle"] as? String == "Demo.app")
            #expect(backups[0]["size"] as? Int == object.count)

            // Another machine: its own folder, its own installer key.
            let machine = source.base + "/machine-b"
            try FileManager.default.createDirectory(atPath: machine, withIntermediateDirectories: true)
            let restoredStore = machine + "/Demo.container"
            let restore = try server.containerfs(["restore", url, restoredStore, "--bundle", source.base + "/Demo.app", "--key", machine + "/installer.key"])
            #expect(restore.status == 0, "\(restore)")
            #expect(try FileManager.default.contentsOfDirectory(atPath: machine).allSatisfy { !$0.hasPrefix(".") }, "no temporary files left")
            let verify = try containerfs(["verify", restoredStore, "--key", machine + "/installer.key"])
            #expect(verify.status == 0, "\(verify)")
            let mountpoint = machine + "/mnt"
            try FileManager.default.createDirectory(atPath: mountpoint, withIntermediateDirectories: true)
            let mount = try containerfs(["mount", restoredStore, mountpoint, "--key", machine + "/installer.key"])
            #expect(mount.status == 0, "\(mount)")
            defer { _ = try? containerfs(["unmount", mountpoint]) }
            guard mount.status == 0 else { return }
            #expect(FileManager.default.contents(atPath: mountpoint + "/Documents/notes.txt") == Data("notes".utf8))
            #expect(FileManager.default.contents(atPath: mountpoint + "/Documents/hard.txt") == Data("notes".utf8))
            #expect(try FileManager.default.destinationOfSymbolicLink(atPath: mountpoint + "/Documents/latest") == "notes.txt")
            #expect(try FileManager.default.contentsOfDirectory(atPath: mountpoint + "/Documents/empty") == ["deeper"])
            #expect(!FileManager.default.fileExists(atPath: mountpoint + "/Documents/skip.txt"))
            let colour = try runProgram(["getfattr", "--only-values", "-n", "user.colour", mountpoint + "/Documents/notes.txt"])
            #expect(colour.stdout == "blue", "\(colour)")
            let oddMounted = Array(mountpoint.utf8) + Array("/Documents/caf\u{e9}-".utf8) + [0xFF, 0xFE] + Array(".bin".utf8) + [0]
            var info = stat()
            #expect(oddMounted.map { CChar(bitPattern: $0) }.withUnsafeBufferPointer { lstat($0.baseAddress!, &info) } == 0 && info.st_size == 9)
            var notes = stat()
            #expect(lstat(mountpoint + "/Documents/hard.txt", &notes) == 0 && notes.st_nlink == 2)
        }
    }

    /// An app makes a file of 1 TiB with three blocks of data through the mount (`truncate`,
    /// `dd`): the object uploaded is a few KiB, GNU tar lists the file at 1 TiB, and the
    /// restore from the object store makes it sparse again.
    @Test func aSparseFileGoesUpAsItsDataAlone() throws {
        try withSeaweedFS { server in
            let source = try MountedContainer()
            try source.mount()
            let file = source.mounted("Documents/disk.img")
            #expect(try runProgram(["truncate", "-s", "1T", file]).status == 0)
            for (offset, text) in [(0, "begin"), (1 << 39, "middle"), ((1 << 40) - 3, "end")] {
                #expect(try runProgram(["sh", "-c", "printf \(text) | dd of='\(file)' bs=1 seek=\(offset) conv=notrunc status=none"]).status == 0)
            }
            let url = "s3://\(SeaweedFS.bucket)/sparse.tar"
            let backup = try server.containerfs(["backup", source.store, url, "--json"])
            #expect(backup.status == 0, "\(backup)")
            let report = try #require(try JSONSerialization.jsonObject(with: Data(backup.stdout.utf8)) as? [String: Any])
            #expect(report["bytes"] as? Int == 1 << 40 && report["sparseFiles"] as? Int == 1, "\(report)")
            #expect((report["dataBytes"] as? Int ?? Int.max) <= 3 * 4096, "\(report)")
            let object = try #require(try server.object("sparse.tar"))
            #expect(object.count < 64 * 1024, "the object holds \(object.count) bytes")
            let tarPath = source.base + "/fetched.tar"
            try object.write(to: URL(fileURLWithPath: tarPath))
            let listing = try runProgram(["tar", "-tvf", tarPath]).stdout
            #expect(listing.contains("1099511627776") && listing.contains("Documents/disk.img"), "\(listing)")

            let restored = source.base + "/restored"
            let restore = try server.containerfs(["restore", url, restored, "--bundle", source.base + "/Demo.app"])
            #expect(restore.status == 0, "\(restore)")
            var info = stat()
            #expect(stat(restored + "/Documents/disk.img", &info) == 0 && info.st_size == 1 << 40 && info.st_blocks <= 64, "size \(info.st_size), blocks \(info.st_blocks)")
            for (offset, text) in [(0, "begin"), (1 << 39, "middle"), ((1 << 40) - 3, "end")] {
                let read = try runProgram(["sh", "-c", "dd if='\(restored)/Documents/disk.img' bs=1 skip=\(offset) count=\(text.count) status=none"])
                #expect(read.stdout == text, "at \(offset): \(read)")
            }
        }
    }

    /// A 1 GiB container goes up and comes back in bounded memory: the peak resident
    /// size of `containerfs` (GNU time) stays below 64 MiB both ways.
    @Test func largeContainerInBoundedMemory() throws {
        try withSeaweedFS { server in
            let source = try MountedContainer()
            let big = source.stored("Documents/big.bin")
            #expect(try runProgram(["sh", "-c", "head -c \(1 << 30) /dev/urandom > '\(big)'"]).status == 0)
            for index in 0..<200 {
                try Data("small file \(index)\n".utf8).write(to: URL(fileURLWithPath: source.stored("Documents/small-\(index).txt")))
            }
            let url = "s3://\(SeaweedFS.bucket)/big.tar"
            let backup = try runProgram(["/usr/bin/time", "-f", "peak %M", containerfsBinary, "backup", source.store, url], environment: server.environment)
            #expect(backup.status == 0, "\(backup)")
            let backupPeak = peakKiB(backup.stderr)
            #expect(backupPeak > 0 && backupPeak < 64 * 1024, "backup peak RSS \(backupPeak) KiB")
            let restored = source.base + "/restored"
            let restore = try runProgram(["/usr/bin/time", "-f", "peak %M", containerfsBinary, "restore", url, restored, "--bundle", source.base + "/Demo.app"],
                                         environment: server.environment)
            #expect(restore.status == 0, "\(restore)")
            let restorePeak = peakKiB(restore.stderr)
            #expect(restorePeak > 0 && restorePeak < 64 * 1024, "restore peak RSS \(restorePeak) KiB")
            #expect(try runProgram(["cmp", big, restored + "/Documents/big.bin"]).status == 0)
            print("1 GiB container: backup peak RSS \(backupPeak) KiB, restore peak RSS \(restorePeak) KiB")
        }
    }

    /// The server killed during an upload: the backup fails with one line, nothing is at
    /// the key once the server is back, and the next backup succeeds.
    @Test func serverKilledDuringUpload() throws {
        try withSeaweedFS { server in
            let source = try MountedContainer()
            #expect(try runProgram(["sh", "-c", "head -c \(128 << 20) /dev/urandom > '\(source.stored("Documents/data.bin"))'"]).status == 0)
            let url = "s3://\(SeaweedFS.bucket)/killed.tar"
            let (backup, errors) = try startUploading(source.store, to: url, server: server)
            // Parts are going up: the server dies.
            usleep(500_000)
            server.kill()
            let stderr = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            backup.waitUntilExit()
            #expect(backup.terminationStatus == 1, "\(stderr)")
            #expect(stderr.split(separator: "\n").count == 1 && stderr.contains("nothing was stored at \(url)"), "\(stderr)")
            try server.start()
            #expect(try server.object("killed.tar") == nil, "no object at the key")
            let again = try server.containerfs(["backup", source.store, url])
            #expect(again.status == 0, "\(again)")
            #expect(try server.object("killed.tar") != nil)
        }
    }

    /// SIGINT and SIGTERM during an upload abort the multipart upload: no object, no
    /// upload left on the server.
    @Test func interruptedUploadLeavesNothing() throws {
        try withSeaweedFS { server in
            let source = try MountedContainer()
            #expect(try runProgram(["sh", "-c", "head -c \(128 << 20) /dev/urandom > '\(source.stored("Documents/data.bin"))'"]).status == 0)
            for (signal, status) in [(SIGINT, Int32(130)), (SIGTERM, Int32(143))] {
                let key = "interrupted-\(signal).tar"
                let (backup, errors) = try startUploading(source.store, to: "s3://\(SeaweedFS.bucket)/\(key)", server: server)
                kill(backup.processIdentifier, signal)
                let stderr = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
                backup.waitUntilExit()
                #expect(backup.terminationStatus == status, "\(stderr)")
                #expect(stderr.contains("interrupted by") && stderr.contains("nothing was stored"), "\(stderr)")
                #expect(try server.object(key) == nil)
                #expect(try server.pendingUploads().isEmpty, "the multipart upload was aborted")
            }
        }
    }

    /// Wrong credentials, a missing bucket, an unreachable endpoint: one line, exit 1,
    /// no secret printed, nothing written.
    @Test func clearErrors() throws {
        try withSeaweedFS { server in
            let source = try MountedContainer()
            try Data("x".utf8).write(to: URL(fileURLWithPath: source.stored("Documents/x.txt")))
            let good = "s3://\(SeaweedFS.bucket)/x.tar"
            #expect(try server.containerfs(["backup", source.store, good]).status == 0)
            let wrongSecret = "wrong-secret-must-not-show"
            let cases: [(arguments: [String], environment: [String: String], says: String)] = [
                (["backup", source.store, "s3://\(SeaweedFS.bucket)/y.tar"], ["AWS_SECRET_ACCESS_KEY": wrongSecret], "refused the credentials"),
                (["restore", good, source.base + "/r1", "--bundle", source.base + "/Demo.app"], ["AWS_ACCESS_KEY_ID": "nobody"], "refused the credentials"),
                (["backups", "s3://\(SeaweedFS.bucket)"], ["AWS_SECRET_ACCESS_KEY": wrongSecret], "refused the credentials"),
                (["backup", source.store, "s3://no-such-bucket/x.tar"], [:], "bucket no-such-bucket does not exist"),
                (["restore", "s3://no-such-bucket/x.tar", source.base + "/r2", "--bundle", source.base + "/Demo.app"], [:], "bucket no-such-bucket does not exist"),
                (["restore", "s3://\(SeaweedFS.bucket)/nothing.tar", source.base + "/r3", "--bundle", source.base + "/Demo.app"], [:], "no object at"),
                (["backup", source.store, good], ["AWS_ENDPOINT_URL": "http://127.0.0.1:9"], "cannot reach the object store at http://127.0.0.1:9"),
            ]
            for (arguments, environment, says) in cases {
                let result = try server.containerfs(arguments, environment: environment)
                #expect(result.status == 1, "\(arguments): \(result)")
                #expect(result.stderr.split(separator: "\n").count == 1 && result.stderr.contains(says), "\(arguments): \(result)")
                #expect(!result.stderr.contains(wrongSecret) && !result.stderr.contains(SeaweedFS.secretKey) && !result.stdout.contains(SeaweedFS.secretKey))
            }
            for store in ["r1", "r2", "r3"] { #expect(!FileManager.default.fileExists(atPath: source.base + "/" + store)) }
            #expect(try server.object("y.tar") == nil)
            #expect(try FileManager.default.contentsOfDirectory(atPath: source.base).allSatisfy { !$0.hasPrefix(".") }, "no temporary files left")
        }
    }

    /// An object overwritten with garbage, or truncated, is refused and nothing is written.
    @Test func corruptOrTruncatedObjectIsRefused() throws {
        try withSeaweedFS { server in
            let source = try MountedContainer()
            for index in 0..<20 {
                try Data(repeating: UInt8(index), count: 100_000).write(to: URL(fileURLWithPath: source.stored("Documents/f\(index).bin")))
            }
            let url = "s3://\(SeaweedFS.bucket)/victim.tar"
            #expect(try server.containerfs(["backup", source.store, url]).status == 0)
            let archive = try #require(try server.object("victim.tar"))
            var garbage = Data(count: archive.count)
            garbage.withUnsafeMutableBytes { arc4random_buf($0.baseAddress!, $0.count) }
            var flipped = archive
            flipped[archive.count / 2] ^= 0x40
            for (damaged, what) in [(garbage, "not a containerfs backup"), (archive.prefix(archive.count / 2), "truncated"), (flipped, "SHA-256")] {
                try server.put(damaged, at: "victim.tar")
                let target = source.base + "/restored"
                let restore = try server.containerfs(["restore", url, target, "--bundle", source.base + "/Demo.app"])
                #expect(restore.status == 1, "\(restore)")
                #expect(restore.stderr.split(separator: "\n").count == 1 && restore.stderr.contains("nothing was written"), "\(what): \(restore)")
                #expect(!FileManager.default.fileExists(atPath: target))
                #expect(try FileManager.default.contentsOfDirectory(atPath: source.base).allSatisfy { !$0.hasPrefix(".") }, "no temporary files left")
            }
        }
    }
}

extension ObjectStoreBackupTests {
    /// A 20 MiB file rewritten over and over during uploads spans several parts: when it
    /// changes while read, its entry is taken back by sending the part it began in again
    /// (and the parts after it), and the object never holds it half old, half new.
    @Test func fileRewrittenDuringUploadIsNeverTorn() throws {
        try withSeaweedFS { server in
            let source = try MountedContainer()
            let path = source.stored("Documents/busy.bin")
            try Data(repeating: 0x41, count: 20 << 20).write(to: URL(fileURLWithPath: path))
            try Data(repeating: 0x7A, count: 3 << 20).write(to: URL(fileURLWithPath: source.stored("Documents/a-before.bin")))
            let writer = Process()
            writer.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            writer.arguments = ["python3", "-c", """
                import os, sys, time
                fd = os.open(sys.argv[1], os.O_WRONLY)
                for i in range(600):
                    block = bytes([0x42 + i % 20]) * (1 << 20)
                    for j in range(20): os.pwrite(fd, block, j << 20)
                    time.sleep(1.0)
                """, path]
            try writer.run()
            // SIGKILL: the test runner starts children with SIGTERM blocked.
            defer {
                kill(writer.processIdentifier, SIGKILL)
                writer.waitUntilExit()
            }
            for round in 0..<2 {
                let key = "busy-\(round).tar"
                let backup = try server.containerfs(["backup", source.store, "s3://\(SeaweedFS.bucket)/\(key)"])
                #expect(backup.status == 0, "\(backup)")
                let object = try #require(try server.object(key))
                let extracted = source.base + "/x\(round)"
                try FileManager.default.createDirectory(atPath: extracted, withIntermediateDirectories: true)
                try object.write(to: URL(fileURLWithPath: extracted + ".tar"))
                #expect(try runProgram(["tar", "-xf", extracted + ".tar", "-C", extracted]).status == 0)
                let data = try Data(contentsOf: URL(fileURLWithPath: extracted + "/Documents/busy.bin"))
                #expect(data.count == 20 << 20)
                #expect(Set(data).count == 1, "round \(round): the archived file mixes versions")
                // And the archive is whole: the manifest's SHA-256 of every file holds.
                let restore = try server.containerfs(["restore", "s3://\(SeaweedFS.bucket)/\(key)", source.base + "/r\(round)", "--bundle", source.base + "/Demo.app"])
                #expect(restore.status == 0, "\(restore)")
            }
        }
    }
}

/// Starts `containerfs backup STORE URL` in the background and returns once its multipart
/// upload is under way, with its stderr to read.
private func startUploading(_ store: String, to url: String, server: SeaweedFS) throws -> (Process, Pipe) {
    let backup = Process()
    backup.executableURL = URL(fileURLWithPath: containerfsBinary)
    backup.arguments = ["backup", store, url]
    backup.environment = server.environment
    let errors = Pipe()
    backup.standardError = errors
    backup.standardOutput = FileHandle.nullDevice
    try backup.run()
    let deadline = Date().addingTimeInterval(30)
    while try server.pendingUploads().isEmpty, Date() < deadline { usleep(100_000) }
    return (backup, errors)
}

/// The `peak %M` line GNU time printed, in KiB.
private func peakKiB(_ stderr: String) -> Int {
    stderr.split(separator: "\n").compactMap { $0.hasPrefix("peak ") ? Int($0.dropFirst(5)) : nil }.last ?? 0
}

/// The restore reads the object as it is downloaded (SPEC §13, issue 16), through a bad
/// network: a relay in front of the real server.
extension ObjectStoreBackupTests {
    /// A download cut off midway resumes where it stopped (a Range from the bytes
    /// received, If-Match the object's ETag) instead of starting over, and the restore
    /// completes with every byte right.
    @Test func cutDownloadResumesWhereItStopped() throws {
        try withSeaweedFS { server in
            let (source, url) = try backedUpContainer(server, key: "resume.tar", mebibytes: 24)
            let data = source.stored("Documents/data.bin")
            let link = try FlakyLink(to: server, after: 5 << 20, fault: .cut(atCut: []))
            let restored = source.base + "/restored"
            let key = source.base + "/installer.key"
            let restore = try server.containerfs(["restore", url, restored, "--bundle", source.base + "/Demo.app", "--key", key],
                                                 environment: ["AWS_ENDPOINT_URL": link.endpoint])
            #expect(restore.status == 0, "\(restore)")
            #expect(link.faultReached, "the relay cut the first download")
            let gets = link.requests.filter { $0.hasPrefix("GET /\(SeaweedFS.bucket)/resume.tar ") }
            #expect(gets.count == 2, "\(gets)")
            let resumed = gets.last?.lowercased() ?? ""
            #expect(resumed.contains("range: bytes=") && !resumed.contains("range: bytes=0-") && resumed.contains("if-match: "), "\(resumed)")
            #expect(try runProgram(["cmp", data, restored + "/Documents/data.bin"]).status == 0)
            #expect(try containerfs(["verify", restored, "--key", key]).status == 0)
        }
    }

    /// The object replaced while its download was cut off: the resumed request is for the
    /// old object only, so the restore is refused instead of joining two objects; nothing
    /// is written.
    @Test func objectReplacedDuringTheDownloadIsRefused() throws {
        try withSeaweedFS { server in
            let (source, url) = try backedUpContainer(server, key: "replaced.tar", mebibytes: 16)
            // Another backup of the same app, which is put at the key when the link is cut.
            #expect(try runProgram(["sh", "-c", "head -c \(16 << 20) /dev/urandom > '\(source.stored("Documents/data.bin"))'"]).status == 0)
            let other = source.base + "/other.tar"
            #expect(try containerfs(["backup", source.store, other]).status == 0)
            let put = server.curlCommand(["-T", other, "\(server.endpoint)/\(SeaweedFS.bucket)/replaced.tar"])
            let link = try FlakyLink(to: server, after: 4 << 20, fault: .cut(atCut: put))
            let restored = source.base + "/restored"
            let restore = try server.containerfs(["restore", url, restored, "--bundle", source.base + "/Demo.app"],
                                                 environment: ["AWS_ENDPOINT_URL": link.endpoint])
            #expect(link.faultReached)
            #expect(restore.status == 1, "\(restore)")
            #expect(restore.stderr.split(separator: "\n").count == 1 && restore.stderr.contains("changed during the download")
                    && restore.stderr.contains("nothing was written"), "\(restore)")
            #expect(!FileManager.default.fileExists(atPath: restored))
            #expect(try FileManager.default.contentsOfDirectory(atPath: source.base).allSatisfy { !$0.hasPrefix(".") }, "no temporary files left")
        }
    }

    /// Files are written while the object is still coming: with the download held up
    /// halfway, the container being built aside already holds files.
    @Test func restoreWritesWhileTheObjectIsDownloaded() throws {
        try withSeaweedFS { server in
            let source = try MountedContainer()
            #expect(try runProgram(["sh", "-c", "for i in $(seq 300); do head -c 131072 /dev/urandom > '\(source.stored("Documents"))'/f$i; done"]).status == 0)
            let url = "s3://\(SeaweedFS.bucket)/stream.tar"
            #expect(try server.containerfs(["backup", source.store, url]).status == 0)
            let link = try FlakyLink(to: server, after: 24 << 20, fault: .stall(seconds: 5))
            let restored = source.base + "/restored"
            let restore = try startRestoring(url, into: restored, of: source, through: link, server: server, errors: FileHandle.nullDevice)
            defer {
                if restore.isRunning { kill(restore.processIdentifier, SIGKILL) }
                restore.waitUntilExit()
            }
            let deadline = Date().addingTimeInterval(60)
            while !link.faultReached, restore.isRunning, Date() < deadline { usleep(50_000) }
            #expect(link.faultReached, "the download reached the stall")
            usleep(1_500_000)  // the restore catches up with what came before the stall
            let staging = try FileManager.default.contentsOfDirectory(atPath: source.base).filter { $0.hasPrefix(".restored.restoring-") }
            #expect(staging.count == 1, "\(staging)")
            let written = (staging.first.flatMap { try? FileManager.default.contentsOfDirectory(atPath: source.base + "/" + $0 + "/Documents") } ?? [])
                .filter { $0.hasPrefix("f") }
            #expect(written.count > 100, "files written before the download ended: \(written.count)")
            #expect(restore.isRunning, "the download is still held up")
            restore.waitUntilExit()
            #expect(restore.terminationStatus == 0)
            #expect(try FileManager.default.contentsOfDirectory(atPath: restored + "/Documents").filter { $0.hasPrefix("f") }.count == 300)
        }
    }

    /// A restore refused early (the backup of another app) ends at once even when the
    /// server then sends nothing: the download is stopped, not waited for (a minute, or
    /// for ever with a server that trickles).
    @Test func refusedRestoreDoesNotWaitForAStalledDownload() throws {
        try withSeaweedFS { server in
            let (source, url) = try backedUpContainer(server, key: "other-app.tar", mebibytes: 16)
            let other = source.base + "/Other.app"
            try FileManager.default.createDirectory(atPath: other, withIntermediateDirectories: true)
            try Data("<plist>other</plist>\n".utf8).write(to: URL(fileURLWithPath: other + "/Info.plist"))
            let link = try FlakyLink(to: server, after: 3 << 20, fault: .stall(seconds: 120))
            let started = Date()
            let restore = try runProgram(["timeout", "-s", "KILL", "100", containerfsBinary, "restore", url, source.base + "/restored", "--bundle", other],
                                         environment: server.environment.merging(["AWS_ENDPOINT_URL": link.endpoint]) { $1 })
            #expect(restore.status == 64 && restore.stderr.contains("is a backup of Demo.app"), "\(restore)")
            #expect(Date().timeIntervalSince(started) < 30, "the refusal waited for the stalled download")
            #expect(!FileManager.default.fileExists(atPath: source.base + "/restored"))
        }
    }

    /// SIGINT or SIGTERM while the object is coming ends the restore at once: the
    /// container being built aside is removed, nothing is written.
    @Test func interruptedRestoreLeavesNothing() throws {
        try withSeaweedFS { server in
            let (source, url) = try backedUpContainer(server, key: "interrupted.tar", mebibytes: 16)
            for (signal, status) in [(SIGINT, Int32(130)), (SIGTERM, Int32(143))] {
                let link = try FlakyLink(to: server, after: 8 << 20, fault: .stall(seconds: 30))
                let restored = source.base + "/restored"
                let errors = Pipe()
                let restore = try startRestoring(url, into: restored, of: source, through: link, server: server, errors: errors)
                let deadline = Date().addingTimeInterval(60)
                while !link.faultReached, restore.isRunning, Date() < deadline { usleep(50_000) }
                #expect(link.faultReached)
                kill(restore.processIdentifier, signal)
                let stderr = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
                restore.waitUntilExit()
                #expect(restore.terminationStatus == status, "\(stderr)")
                #expect(stderr.contains("interrupted by") && stderr.contains("nothing was written"), "\(stderr)")
                #expect(!FileManager.default.fileExists(atPath: restored))
                #expect(try FileManager.default.contentsOfDirectory(atPath: source.base).allSatisfy { !$0.hasPrefix(".") }, "nothing left aside")
                link.stop()
            }
        }
    }
}

/// `containerfs restore URL RESTORED` of `source`'s app, started through `link`.
private func startRestoring(_ url: String, into restored: String, of source: MountedContainer, through link: FlakyLink,
                            server: SeaweedFS, errors: Any) throws -> Process {
    let restore = Process()
    restore.executableURL = URL(fileURLWithPath: containerfsBinary)
    restore.arguments = ["restore", url, restored, "--bundle", source.base + "/Demo.app"]
    restore.environment = server.environment.merging(["AWS_ENDPOINT_URL": link.endpoint]) { $1 }
    restore.standardOutput = FileHandle.nullDevice
    restore.standardError = errors
    try restore.run()
    return restore
}

/// A container whose Documents/data.bin holds `mebibytes` of random bytes, backed up to
/// `key` of the test bucket; returns it and the object's URL.
private func backedUpContainer(_ server: SeaweedFS, key: String, mebibytes: Int) throws -> (MountedContainer, String) {
    let source = try MountedContainer()
    #expect(try runProgram(["sh", "-c", "head -c \(mebibytes << 20) /dev/urandom > '\(source.stored("Documents/data.bin"))'"]).status == 0)
    let url = "s3://\(SeaweedFS.bucket)/\(key)"
    #expect(try server.containerfs(["backup", source.store, url]).status == 0)
    return (source, url)
}

/// A server that is not SeaweedFS: odd or hostile answers to a listing (python3 on
/// loopback). The client must neither loop, nor fail on an object deleted meanwhile, nor
/// pass the server's control characters to the terminal.
extension ObjectStoreBackupTests {
    @Test func oddListingsAreHandled() throws {
        let source = try MountedContainer()
        let archive = source.base + "/real.tar"
        #expect(try containerfs(["backup", source.store, archive]).status == 0)
        let environment = { (port: Int) in
            ["AWS_ACCESS_KEY_ID": "odd", "AWS_SECRET_ACCESS_KEY": "odd-secret", "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": "http://127.0.0.1:\(port)"]
        }
        // Every page names the same next page.
        let looping = try OddServer(mode: "loop", archive: archive)
        let loop = try runProgram(["timeout", "-s", "KILL", "30", containerfsBinary, "backups", "s3://odd-bucket"], environment: environment(looping.port))
        #expect(loop.status == 1 && loop.stderr.contains("does not end") && loop.stderr.split(separator: "\n").count == 1, "\(loop)")

        // A backup whose key holds a terminal escape, and an object deleted after the listing.
        let odd = try OddServer(mode: "odd", archive: archive)
        for json in [false, true] {
            let listed = try runProgram([containerfsBinary, "backups", "s3://odd-bucket"] + (json ? ["--json"] : []), environment: environment(odd.port))
            #expect(listed.status == 0, "\(listed)")
            #expect(!listed.stdout.contains("\u{1B}") && !listed.stdout.contains("\u{07}"), "raw control characters: \(listed.stdout.debugDescription)")
            if json {
                let parsed = try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as? [String: Any]
                let keys = (parsed?["backups"] as? [[String: Any]])?.compactMap { $0["key"] as? String }
                #expect(keys == ["evil\u{1B}]0;pwn\u{07}.tar"], "JSON keeps the key exactly: \(String(describing: keys))")
            } else {
                #expect(listed.stdout.contains("evil\\x1b]0;pwn\\x07.tar") && listed.stdout.contains("1 backup\n"), "\(listed)")
            }
        }
    }
}

/// A python3 S3 impostor on loopback: `loop` lists forever with the same continuation
/// token; `odd` lists a backup under a key with a terminal escape (its GET answers with
/// the first bytes of `archive`) and an object that is gone by the time it is read.
private final class OddServer {
    let port: Int
    private let process = Process()

    init(mode: String, archive: String) throws {
        port = try startPythonServer(process, OddServer.script, [mode, archive])
    }

    deinit {
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    private static let script = #"""
        import http.server, sys
        mode, archive = sys.argv[1], sys.argv[2]
        evil = "evil\x1b]0;pwn\x07.tar"
        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            def log_message(self, *args): pass
            def answer(self, code, body):
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("ETag", '"e"')
                self.end_headers()
                self.wfile.write(body)
            def do_GET(self):
                if "list-type" in self.path:
                    if mode == "loop":
                        return self.answer(200, b"<ListBucketResult><IsTruncated>true</IsTruncated><NextContinuationToken>again</NextContinuationToken></ListBucketResult>")
                    contents = "".join("<Contents><Key>%s</Key><Size>%d</Size><LastModified>2026-11-24T00:00:00Z</LastModified></Contents>" % item
                                       for item in [(evil, 20480), ("gone.tar", 20480)])
                    return self.answer(200, ("<ListBucketResult><IsTruncated>false</IsTruncated>%s</ListBucketResult>" % contents).encode())
                if "gone.tar" in self.path:
                    return self.answer(404, b"<Error><Code>NoSuchKey</Code></Error>")
                with open(archive, "rb") as f: head = f.read(16384)
                return self.answer(206, head)
        server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        print(server.server_address[1], flush=True)
        server.serve_forever()
        """#
}
