import ContainerPolicy
import Foundation
import Glibc
import Testing

/// `containerfs deliver`: files handed over into Documents/Inbox (SPEC §6).
@Suite("Deliver", .serialized)
struct DeliverTests {
    /// A file named `name` holding `contents` in a fresh folder outside the store (beside
    /// it, in the container's temporary folder, so that it goes with it).
    private func hostFile(_ container: MountedContainer, _ name: String, _ contents: String) throws -> String {
        let folder = container.base + "/outside-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let path = folder + "/" + name
        try Data(contents.utf8).write(to: URL(fileURLWithPath: path))
        return path
    }

    @Test func takenNamesGetNumberedSuffixes() throws {
        let container = try MountedContainer()
        var reported: [String] = []
        for version in 0..<3 {
            let file = try hostFile(container, "report.pdf", "version \(version)")
            let result = try containerfs(["deliver", container.store, file])
            #expect(result.status == 0, "\(result)")
            reported.append(result.stdout)
        }
        #expect(reported.map { $0.components(separatedBy: " as ").last } == [
            "Documents/Inbox/report.pdf\n", "Documents/Inbox/report-1.pdf\n", "Documents/Inbox/report-2.pdf\n",
        ])
        for (name, version) in [("report.pdf", 0), ("report-1.pdf", 1), ("report-2.pdf", 2)] {
            #expect(try String(contentsOfFile: container.stored("Documents/Inbox/" + name), encoding: .utf8) == "version \(version)")
        }
        // A name without an extension is numbered at its end.
        for _ in 0..<2 { try containerfs(["deliver", container.store, try hostFile(container, "README", "r")]) }
        #expect(FileManager.default.fileExists(atPath: container.stored("Documents/Inbox/README-1")))
    }

    /// Names are bytes (SPEC §2): a name that is not UTF-8 is delivered as it is, and a
    /// name of 255 bytes taken already gets its suffix by shortening its base, never
    /// `ENAMETOOLONG` (an attack found both refused).
    @Test func oddAndLongNamesAreDeliveredAsTheyAre() throws {
        let container = try MountedContainer()
        let folder = container.base + "/outside-odd"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        // The arguments made by the shell: a Swift String cannot carry the byte 0xFF.
        let script = #"""
            odd=$(printf 'r\351sum\303\251\377.txt'); long=$(printf '%0251d.pdf' 0)
            printf odd > "$1/$odd"; printf long > "$1/$long"
            for i in 1 2; do "$2" deliver "$3" "$1/$odd" >/dev/null || echo "odd $i failed"; done
            for i in 1 2 3; do "$2" deliver "$3" "$1/$long" >/dev/null || echo "long $i failed"; done
            "$2" deliver "$3" "$1/$odd" --as "$odd" >/dev/null || echo "as failed"
            # Two names that differ only in bytes that are not UTF-8, in one command.
            a=$(printf 'x\376'); b=$(printf 'x\377'); printf a > "$1/$a"; printf b > "$1/$b"
            "$2" deliver "$3" "$1/$a" "$1/$b" >/dev/null || echo "pair failed"
            """#
        let result = try runProgram(["sh", "-c", script, "sh", folder, containerfsBinary, container.store])
        #expect(result.status == 0 && result.stdout.isEmpty, "\(result)")
        var names = Set<[UInt8]>()
        let stream = try #require(opendir(container.stored("Documents/Inbox")))
        defer { closedir(stream) }
        while let entry = readdir(stream) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { Array($0.prefix(while: { $0 != 0 })) }
            if name != [0x2E], name != [0x2E, 0x2E] { names.insert(name) }
        }
        // "r", é in Latin-1, "sum", é in UTF-8, then 0xFF.
        let oddBase: [UInt8] = [0x72, 0xE9, 0x73, 0x75, 0x6D, 0xC3, 0xA9, 0xFF]
        let odd = oddBase + Array(".txt".utf8)
        let oddNumbered = oddBase + Array("-1.txt".utf8)
        let oddAs = oddBase + Array("-2.txt".utf8)
        let long = Array(String(repeating: "0", count: 251).utf8) + Array(".pdf".utf8)
        let long1 = Array(String(repeating: "0", count: 249).utf8) + Array("-1.pdf".utf8)
        let long2 = Array(String(repeating: "0", count: 249).utf8) + Array("-2.pdf".utf8)
        #expect(names == [odd, oddNumbered, oddAs, long, long1, long2, [0x78, 0xFE], [0x78, 0xFF]], "\(names.map { ContainerPath.printable($0) })")
    }

    @Test func deliverAsNamesTheFile() throws {
        let container = try MountedContainer()
        let file = try hostFile(container, "scan-0001.jpg", "jpeg")
        let result = try containerfs(["deliver", container.store, file, "--as", "Receipt.jpg"])
        #expect(result.status == 0, "\(result)")
        #expect(result.stdout == "delivered \(file) as Documents/Inbox/Receipt.jpg\n")
        #expect(try String(contentsOfFile: container.stored("Documents/Inbox/Receipt.jpg"), encoding: .utf8) == "jpeg")
        let again = try containerfs(["deliver", container.store, file, "--as", "Receipt.jpg"])
        #expect(again.stdout == "delivered \(file) as Documents/Inbox/Receipt-1.jpg\n")
    }

    @Test func foldersAreDeliveredWhole() throws {
        let container = try MountedContainer()
        let folder = container.base + "/outside/Album"
        try FileManager.default.createDirectory(atPath: folder + "/2024/summer", withIntermediateDirectories: true)
        try Data("a".utf8).write(to: URL(fileURLWithPath: folder + "/cover.txt"))
        try Data(repeating: 7, count: 300_000).write(to: URL(fileURLWithPath: folder + "/2024/summer/beach.raw"))
        try FileManager.default.createSymbolicLink(atPath: folder + "/latest", withDestinationPath: "2024/summer/beach.raw")
        let result = try containerfs(["deliver", container.store, folder])
        #expect(result.status == 0, "\(result)")
        #expect(try treeDigest(container.stored("Documents/Inbox/Album")) == treeDigest(folder))
        let again = try containerfs(["deliver", container.store, folder])
        #expect(again.stdout.hasSuffix(" as Documents/Inbox/Album-1\n"))
        #expect(try treeDigest(container.stored("Documents/Inbox/Album-1")) == treeDigest(folder))
    }

    @Test func aDeliveryIsVisibleThroughALiveMountAtOnce() throws {
        try withMountedContainer { container in
            let inboxFile = container.mounted("Documents/Inbox/note.txt")
            // The kernel now caches that the name does not exist (for a day): the delivery
            // must make it forget.
            #expect(errnoOf { access(inboxFile, F_OK) } == ENOENT)
            _ = try FileManager.default.contentsOfDirectory(atPath: container.mounted("Documents/Inbox"))
            let result = try containerfs(["deliver", container.store, try hostFile(container, "note.txt", "handed over")])
            #expect(result.status == 0, "\(result)")
            #expect(try String(contentsOfFile: inboxFile, encoding: .utf8) == "handed over")
            #expect(try FileManager.default.contentsOfDirectory(atPath: container.mounted("Documents/Inbox")) == ["note.txt"])
            // A second delivery under the same name, while the first is cached.
            try containerfs(["deliver", container.store, try hostFile(container, "note.txt", "second")])
            #expect(try String(contentsOfFile: container.mounted("Documents/Inbox/note-1.txt"), encoding: .utf8) == "second")
            // The inbox's rule applies to what was delivered: read and delete, not change.
            #expect(errnoOf { open(inboxFile, O_WRONLY) } == EACCES)
            #expect(unlink(inboxFile) == 0)
        }
    }

    @Test func deliveryIntoAnUnmountedStore() throws {
        let container = try MountedContainer()
        let result = try containerfs(["deliver", container.store, try hostFile(container, "offline.txt", "while unmounted")])
        #expect(result.status == 0, "\(result)")
        #expect(try String(contentsOfFile: container.stored("Documents/Inbox/offline.txt"), encoding: .utf8) == "while unmounted")
        try container.mount()
        defer { container.unmount() }
        #expect(try String(contentsOfFile: container.mounted("Documents/Inbox/offline.txt"), encoding: .utf8) == "while unmounted")
    }

    /// A reader polling the Inbox through the mount during a 200 MB delivery sees either
    /// no file or the whole file, never a part.
    @Test func aReaderPollingTheInboxNeverSeesAPartialFile() throws {
        try withMountedContainer { container in
            let big = container.base + "/big.bin"
            let made = try runProgram(["sh", "-c", #"head -c 200M /dev/urandom > "$1" && sha256sum "$1""#, "sh", big])
            #expect(made.status == 0, "\(made)")
            let digest = String(made.stdout.prefix(64))
            let reader = """
                import hashlib, os, sys, time
                inbox, size, digest, started = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
                open(started, "w").close()
                polls, deadline = 0, time.time() + 300
                while time.time() < deadline:
                    polls += 1
                    for name in os.listdir(inbox):
                        path = os.path.join(inbox, name)
                        seen = os.stat(path).st_size
                        if seen != size:
                            print(f"partial: {name} has {seen} of {size} bytes after {polls} polls")
                            sys.exit(1)
                        hasher = hashlib.sha256()
                        with open(path, "rb") as f:
                            for chunk in iter(lambda: f.read(1 << 20), b""):
                                hasher.update(chunk)
                        if hasher.hexdigest() != digest:
                            print(f"wrong content: {name}")
                            sys.exit(1)
                        print(f"whole: {name} after {polls} polls")
                        sys.exit(0)
                print("never saw the file")
                sys.exit(2)
                """
            let started = container.base + "/reader-started"
            let poller = try BackgroundProgram(["/usr/bin/python3", "-c", reader, container.mounted("Documents/Inbox"), "209715200", digest, started])
            #expect(waitForFile(started))
            let delivered = try containerfs(["deliver", container.store, big])
            #expect(delivered.status == 0, "\(delivered)")
            let result = poller.wait(seconds: 300)
            #expect(result.status == 0, "\(result)")
            #expect(result.stdout.hasPrefix("whole: big.bin after "), "\(result)")
            // Many polls ran while the copy was made: the check had a chance to fail.
            let polls = Int(result.stdout.split(separator: " ")[3]) ?? 0
            #expect(polls > 10, "\(result)")
        }
    }

    @Test func badInputsAreOneLine() throws {
        let container = try MountedContainer()
        let missingFile = try containerfs(["deliver", container.store, container.base + "/no-such-file"])
        #expect(missingFile.status == 1)
        #expect(missingFile.stderr == "containerfs: cannot read \(container.base)/no-such-file (No such file or directory): name an existing file or folder to deliver; nothing was delivered\n")
        let missingStore = try containerfs(["deliver", container.base + "/no-store", try hostFile(container, "a.txt", "a")])
        #expect(missingStore.status == 1)
        #expect(missingStore.stderr == "containerfs: no store at \(container.base)/no-store: make one with 'containerfs create \(container.base)/no-store --bundle NAME.app'\n")
        let twoAs = try containerfs(["deliver", container.store, try hostFile(container, "a.txt", "a"), try hostFile(container, "b.txt", "b"), "--as", "c.txt"])
        #expect(twoAs.status == 64)
        #expect(try FileManager.default.contentsOfDirectory(atPath: container.stored("Documents/Inbox")) == [])
        // Nothing is left half-made in the state folder either.
        #expect(((try? FileManager.default.contentsOfDirectory(atPath: container.stored(".containerfs/incoming"))) ?? []) == [])
    }

    /// The control socket is in the store, which its owner can write: one that accepts and
    /// never answers, served with the mount lock held, must not hold root's `deliver`
    /// forever. It gives up with one line once the daemon's time to answer is past.
    @Test func aControlSocketThatNeverAnswersDoesNotHoldDeliverForever() throws {
        let container = try MountedContainer()
        let source = container.base + "/handed-over.txt"
        try Data("x".utf8).write(to: URL(fileURLWithPath: source))
        var environment = ProcessInfo.processInfo.environment
        environment["CONTAINERFS_TEST_CONTROL_TIMEOUT"] = "2"
        let result = try runProgram(["/usr/bin/python3", "-c", """
            import fcntl, os, socket, subprocess, sys, time
            state, binary, store, source = sys.argv[1:5]
            lock = open(state + "/mount.lock", "w")
            fcntl.flock(lock, fcntl.LOCK_EX)
            lock.write(f"{os.getpid()}\\n/nowhere\\n"); lock.flush()
            server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            server.bind(state + "/control.sock"); server.listen(8)
            started = time.monotonic()
            try:
                done = subprocess.run([binary, "deliver", store, source], capture_output=True, text=True, timeout=60)
                print(done.returncode, round(time.monotonic() - started), done.stderr.strip(), sep="|")
            except subprocess.TimeoutExpired:
                print("hung")
            """, container.stored(".containerfs"), containerfsBinary, container.store, source], environment: environment)
        let fields = result.stdout.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: "|", maxSplits: 2).map(String.init)
        try #require(fields.count == 3, "\(result)")
        #expect(fields[0] == "1", "\(result)")
        #expect((Int(fields[1]) ?? 99) < 30, "\(result)")
        #expect(fields[2].contains("did not answer within 2 s") && !fields[2].contains("\n"), "\(result)")
    }
}
