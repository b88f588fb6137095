import ContainerStore
import Foundation
import Glibc
import Testing

/// `containerfs share STORE ls|put|get|rm|mv` (issue #30, docs/lifecycle.md "File
/// sharing"): Documents/ as Finder and the Files app show it, only for an app whose
/// Info.plist enables file sharing (XML or binary), through a live mount too.
@Suite("Share", .serialized)
struct ShareTests {
    /// An XML Info.plist, as Xcode writes one, with `extra` inside its dictionary.
    static func xmlPlist(_ extra: String) -> [UInt8] {
        Array("""
            <?xml version="1.0" encoding="UTF-8"?>
            <!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
            <plist version="1.0">
            <dict>
            \t<key>CFBundleIdentifier</key>
            \t<string>com.example.demo</string>
            \t\(extra)
            </dict>
            </plist>

            """.utf8)
    }

    /// A binary Info.plist made by Python's plistlib from `dictionary` (Python syntax).
    static func binaryPlist(_ dictionary: String) throws -> [UInt8] {
        let folder = try makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let made = try runProgram(["python3", "-c", "import plistlib, sys; plistlib.dump(\(dictionary), open(sys.argv[1], 'wb'), fmt=plistlib.FMT_BINARY)",
                                   folder + "/Info.plist"])
        guard made.status == 0 else { throw TestFailure("plistlib: \(made)") }
        let bytes = Array(try Data(contentsOf: URL(fileURLWithPath: folder + "/Info.plist")))
        guard bytes.starts(with: Array("bplist00".utf8)) else { throw TestFailure("plistlib wrote no binary list") }
        return bytes
    }

    static let sharingXML = xmlPlist("<key>UIFileSharingEnabled</key>\n\t<true/>")

    private func share(_ container: MountedContainer, _ arguments: [String]) throws -> ProgramResult {
        try containerfs(["share", container.store] + arguments)
    }

    private func hostFile(_ container: MountedContainer, _ name: String, _ contents: String) throws -> String {
        let folder = container.base + "/host"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        try Data(contents.utf8).write(to: URL(fileURLWithPath: folder + "/" + name))
        return folder + "/" + name
    }

    /// Refused with one line, Documents/ untouched, unless a true UIFileSharingEnabled (XML)
    /// or LSSupportsOpeningDocumentsInPlace (binary) is there: not for a plist without the
    /// key, with it false or a string, one that does not parse, or the binary list that
    /// crashes Foundation's parser.
    @Test func shareIsRefusedUnlessTheInfoPlistEnablesIt() throws {
        let refused: [(plist: [UInt8], says: String)] = [
            (Self.xmlPlist("<key>CFBundleName</key>\n\t<string>Demo</string>"), "sets neither UIFileSharingEnabled nor LSSupportsOpeningDocumentsInPlace to true"),
            (Self.xmlPlist("<key>UIFileSharingEnabled</key>\n\t<false/>"), "sets neither"),
            (Self.xmlPlist("<key>UIFileSharingEnabled</key>\n\t<string>YES</string>"), "sets neither"),
            (try Self.binaryPlist("{'LSSupportsOpeningDocumentsInPlace': False}"), "sets neither"),
            (Array("<plist>demo</plist>\n".utf8), "Info.plist cannot be parsed"),
            (PropertyListSamples.foundationCrasher, "Info.plist cannot be parsed"),
        ]
        for (plist, says) in refused {
            let container = try MountedContainer(infoPlist: plist)
            let file = try hostFile(container, "a.txt", "a")
            for arguments in [["ls"], ["put", file], ["rm", "x"]] {
                let result = try share(container, arguments)
                #expect(result.status == 1 && result.stderr.contains(says), "\(arguments): \(result)")
                #expect(result.stderr.split(separator: "\n").count == 1 && result.stdout.isEmpty, "one line: \(result)")
            }
            #expect(try FileManager.default.contentsOfDirectory(atPath: container.stored("Documents")) == ["Inbox"])
        }
        let enabled: [[UInt8]] = [Self.sharingXML, try Self.binaryPlist("{'CFBundleName': 'Demo', 'LSSupportsOpeningDocumentsInPlace': True}")]
        for plist in enabled {
            let container = try MountedContainer(infoPlist: plist)
            let put = try share(container, ["put", try hostFile(container, "a.txt", "shared")])
            #expect(put.status == 0 && put.stdout == "put \(container.base)/host/a.txt as Documents/a.txt\n", "\(put)")
            #expect(try share(container, ["ls"]).stdout == "a.txt\n")
        }
    }

    /// What the Files app shows of Documents/: files and folders, no hidden name, no
    /// Inbox, no symlink or FIFO. Nothing else can be reached: a symlink in the store is
    /// neither followed (a put through it writes nothing where it points) nor replaced;
    /// names are bytes (a Latin-1 name goes in and out as it is).
    @Test func shareReachesOnlyWhatTheFilesAppShows() throws {
        let container = try MountedContainer(infoPlist: Self.sharingXML)
        let documents = container.stored("Documents")
        try FileManager.default.createDirectory(atPath: documents + "/sub", withIntermediateDirectories: true)
        try Data("a".utf8).write(to: URL(fileURLWithPath: documents + "/a.txt"))
        try Data("b".utf8).write(to: URL(fileURLWithPath: documents + "/sub/b.txt"))
        try Data("h".utf8).write(to: URL(fileURLWithPath: documents + "/.hidden"))
        try Data("i".utf8).write(to: URL(fileURLWithPath: documents + "/Inbox/mail.pdf"))
        let outside = container.base + "/outside"
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: documents + "/link", withDestinationPath: outside)
        try FileManager.default.createSymbolicLink(atPath: documents + "/filelink", withDestinationPath: container.base + "/host/new.txt")
        #expect(mkfifo(documents + "/fifo", 0o600) == 0)
        let file = try hostFile(container, "new.txt", "from the host")

        #expect(try share(container, ["ls"]).stdout == "a.txt\nsub/\n")
        #expect(try share(container, ["ls", "sub"]).stdout == "b.txt\n")
        let refusals: [([String], String)] = [
            (["ls", "Inbox"], "Documents/Inbox belongs to the app"),
            (["ls", "link"], "Too many levels of symbolic links"),
            (["put", file, ".secret"], "no hidden file"),
            (["put", file, "sub/.secret"], "no hidden file"),
            (["put", file, "Inbox/x"], "Documents/Inbox belongs to the app"),
            (["put", file, "link/x"], "Too many levels of symbolic links"),
            (["put", file, "filelink"], "is not a file"),
            (["put", file, "sub"], "exists as a folder"),
            (["get", "link", container.base + "/got"], "Too many levels of symbolic links"),
            (["get", "Inbox/mail.pdf", container.base + "/got"], "Documents/Inbox belongs to the app"),
            (["rm", ".hidden"], "no hidden file"),
            (["rm", "fifo"], "is not a file or folder"),
            (["rm", "filelink"], "is not a file or folder"),
            (["mv", "a.txt", "Inbox/a.txt"], "Documents/Inbox belongs to the app"),
            (["mv", "a.txt", "sub"], "File exists"),
            (["mv", "a.txt", "link/a.txt"], "Too many levels of symbolic links"),
        ]
        for (arguments, says) in refusals {
            let result = try share(container, arguments)
            #expect(result.status != 0 && result.stderr.contains(says), "\(arguments): \(result)")
            #expect(result.stderr.split(separator: "\n").count == 1, "one line: \(result)")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: outside) == [], "written through a symlink")
        #expect(try FileManager.default.destinationOfSymbolicLink(atPath: documents + "/filelink") == container.base + "/host/new.txt")
        #expect(FileManager.default.fileExists(atPath: documents + "/.hidden") && FileManager.default.fileExists(atPath: documents + "/Inbox/mail.pdf"))
        #expect(!FileManager.default.fileExists(atPath: container.base + "/got"))

        // Put (new, then replacing), get, mv, rm.
        #expect(try share(container, ["put", file, "sub/new.txt"]).status == 0)
        #expect(try String(contentsOfFile: documents + "/sub/new.txt", encoding: .utf8) == "from the host")
        let replacement = try hostFile(container, "a2.txt", "replaced")
        #expect(try share(container, ["put", replacement, "a.txt"]).stdout == "put \(replacement) as Documents/a.txt\n")
        #expect(try String(contentsOfFile: documents + "/a.txt", encoding: .utf8) == "replaced")
        let got = try share(container, ["get", "sub", container.base + "/got"])
        #expect(got.status == 0 && got.stdout == "got Documents/sub as \(container.base)/got\n", "\(got)")
        #expect(try treeDigest(container.base + "/got") == treeDigest(documents + "/sub"))
        let again = try share(container, ["get", "a.txt", container.base + "/got"])
        #expect(again.stdout == "got Documents/a.txt as \(container.base)/got/a.txt\n", "an existing folder receives it: \(again)")
        #expect(try share(container, ["get", "a.txt", container.base + "/got/a.txt"]).stderr.contains("get never overwrites"))
        #expect(try share(container, ["mv", "sub/new.txt", "moved.txt"]).stdout == "moved Documents/sub/new.txt to Documents/moved.txt\n")
        #expect(try share(container, ["rm", "sub"]).stdout == "removed Documents/sub\n")
        #expect(try share(container, ["ls"]).stdout == "a.txt\nmoved.txt\n")
        #expect(try FileManager.default.contentsOfDirectory(atPath: container.stored(".containerfs/incoming")) == [], "no staging copy left")

        // Names are bytes: é in Latin-1 (0xE9), which is not UTF-8.
        let bytes = try runProgram(["sh", "-c", """
            set -e
            "$1" share "$2" put "$3" "$(printf 'caf\\351.txt')" >/dev/null
            "$1" share "$2" ls
            "$1" share "$2" mv "$(printf 'caf\\351.txt')" "$(printf 'th\\351.txt')" >/dev/null
            ls "$2/Documents" | od -An -c | tr -s ' '
            """, "sh", containerfsBinary, container.store, file])
        #expect(bytes.status == 0, "\(bytes)")
        #expect(bytes.stdout.hasPrefix("a.txt\ncaf\\xe9.txt\nmoved.txt\n"), "\(bytes)")
        #expect(bytes.stdout.contains("t h 351 . t x t"), "the name kept its byte: \(bytes)")
    }

    /// Through a live mount every change shows at once, although the kernel caches entries
    /// and attributes for a day: a name it knows to be missing, a file it has read and
    /// holds open (which keeps its old contents: the replacement is a new file, renamed
    /// over it in one step), a rename and a removal. A reader polling the file while it is
    /// replaced ten times sees only whole versions.
    /// Names are bytes (SPEC §2): a host file whose name is not UTF-8 is put as it is, or
    /// under a name that is not UTF-8 either (before, "cannot read": the host path went
    /// through a String, which replaced the byte 0xFF).
    @Test func putTakesHostNamesAsBytes() throws {
        let container = try MountedContainer(infoPlist: Self.sharingXML)
        let script = #"""
            odd=$(printf 'h\377'); printf data > "$1/$odd"
            "$2" share "$3" put "$1/$odd" >/dev/null || exit 1
            "$2" share "$3" put "$1/$odd" "n$(printf '\376')" >/dev/null || exit 1
            cat "$3/Documents/$odd" "$3/Documents/n$(printf '\376')"
            """#
        let result = try runProgram(["sh", "-c", script, "sh", container.base, containerfsBinary, container.store])
        #expect(result.status == 0 && result.stdout == "datadata", "\(result)")
    }

    /// `get` writes the host name it was given, byte for byte: a new file named with the
    /// byte 0xFF, and an existing folder so named receiving the file (before, the host path
    /// went through a String: the file appeared under U+FFFD, and the folder was not found).
    /// A sparse file in Documents/ (1 GiB, two blocks: an app makes one within any capacity,
    /// its store's owner at will): root's `share get` copied it byte for byte, a GiB of zeros
    /// onto the host's disk (here a 64 MiB tmpfs: ENOSPC). The copy keeps its holes now, as
    /// `cp` does; `put` and `deliver` copy the same way.
    @Test func getKeepsASparseFilesHoles() throws {
        let container = try MountedContainer(infoPlist: Self.sharingXML)
        let made = try runProgram(["python3", "-c", """
            import sys
            with open(sys.argv[1], 'wb') as f:
                f.write(b'head'); f.seek(1 << 30); f.write(b'tail')
            """, container.stored("Documents/sparse.bin")])
        try #require(made.status == 0, "\(made)")
        let host = container.base + "/host"
        try FileManager.default.createDirectory(atPath: host, withIntermediateDirectories: true)
        let mounted = try runProgram(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", host])
        try #require(mounted.status == 0, "\(mounted)")
        defer { _ = try? runProgram(["umount", "-l", host]) }
        let got = try containerfs(["share", container.store, "get", "sparse.bin", host + "/copy.bin"])
        #expect(got.status == 0, "\(got)")
        var info = stat()
        #expect(lstat(host + "/copy.bin", &info) == 0)
        #expect(info.st_size == (1 << 30) + 4)
        #expect(Int64(info.st_blocks) * 512 < 1 << 20, "the copy takes \(info.st_blocks) blocks")
        let file = try FileHandle(forReadingFrom: URL(fileURLWithPath: host + "/copy.bin"))
        defer { try? file.close() }
        #expect(try file.read(upToCount: 4) == Data("head".utf8))
        try file.seek(toOffset: 1 << 29)
        #expect(try file.read(upToCount: 4) == Data(count: 4))
        try file.seek(toOffset: 1 << 30)
        #expect(try file.read(upToCount: 4) == Data("tail".utf8))
    }

    @Test func getWritesHostNamesAsBytes() throws {
        let container = try MountedContainer(infoPlist: Self.sharingXML)
        try Data("data".utf8).write(to: URL(fileURLWithPath: container.stored("Documents/a.txt")))
        let script = #"""
            out="$1/out"; mkdir "$out" "$out/d$(printf '\377')" || exit 1
            "$2" share "$3" get a.txt "$out/g$(printf '\377')" || exit 1
            "$2" share "$3" get a.txt "$out/d$(printf '\377')" || exit 1
            cat "$out/g$(printf '\377')" "$out/d$(printf '\377')/a.txt" || exit 1
            echo; ls -A "$out" "$out"/d* | od -An -tx1 | tr -d '\n'
            """#
        let result = try runProgram(["sh", "-c", script, "sh", container.base, containerfsBinary, container.store])
        #expect(result.status == 0, "\(result)")
        #expect(result.stdout.contains("got Documents/a.txt as \(container.base)/out/g\\xff\n"), "the name shown as bytes: \(result)")
        #expect(result.stdout.contains("got Documents/a.txt as \(container.base)/out/d\\xff/a.txt\n"), "\(result)")
        #expect(result.stdout.contains("datadata\n"), "\(result)")
        // "d\xff" and "g\xff" listed, then the folder's "a.txt"; no U+FFFD (ef bf bd) anywhere.
        #expect(result.stdout.contains(" 64 ff 0a 67 ff 0a") && !result.stdout.contains("ef bf bd"), "\(result)")
    }

    @Test func aLiveMountSeesEachChangeAtOnce() throws {
        let container = try MountedContainer(infoPlist: Self.sharingXML)
        try Data("old".utf8).write(to: URL(fileURLWithPath: container.stored("Documents/a.txt")))
        try container.mount()
        defer { container.unmount() }
        let mounted = container.mounted("Documents/")
        #expect(errnoOf { access(mounted + "new.txt", F_OK) } == ENOENT)
        #expect(try String(contentsOfFile: mounted + "a.txt", encoding: .utf8) == "old")
        let held = open(mounted + "a.txt", O_RDONLY)
        defer { close(held) }
        _ = try FileManager.default.contentsOfDirectory(atPath: mounted)

        #expect(try share(container, ["put", try hostFile(container, "new.txt", "new")]).status == 0)
        #expect(try String(contentsOfFile: mounted + "new.txt", encoding: .utf8) == "new")
        #expect(try share(container, ["put", try hostFile(container, "a-v2.txt", "version 2"), "a.txt"]).status == 0)
        #expect(try String(contentsOfFile: mounted + "a.txt", encoding: .utf8) == "version 2")
        var buffer = [UInt8](repeating: 0, count: 16)
        #expect(pread(held, &buffer, 16, 0) == 3 && Array(buffer.prefix(3)) == Array("old".utf8), "an open file keeps what it had")
        #expect(try share(container, ["mv", "new.txt", "renamed.txt"]).status == 0)
        #expect(errnoOf { access(mounted + "new.txt", F_OK) } == ENOENT)
        #expect(try String(contentsOfFile: mounted + "renamed.txt", encoding: .utf8) == "new")
        #expect(try share(container, ["rm", "renamed.txt"]).status == 0)
        #expect(errnoOf { access(mounted + "renamed.txt", F_OK) } == ENOENT)
        #expect(try FileManager.default.contentsOfDirectory(atPath: mounted).sorted() == ["Inbox", "a.txt"])

        // Whole versions only: 2 MB files of one repeated byte, put ten times over a.txt.
        let reader = try BackgroundProgram(["/usr/bin/python3", "-c", """
            import os, sys, time
            path, seen, torn = sys.argv[1], set(), 0
            end = time.time() + 60
            while not os.path.exists(path + ".stop") and time.time() < end:
                data = open(path, "rb").read()
                if data == b"version 2": continue
                if len(data) != 2 << 20 or data.count(data[:1]) != len(data): torn += 1
                else: seen.add(data[0])
            print(torn, len(seen))
            """, mounted + "a.txt"])
        for version in 0..<10 {
            let host = container.base + "/host/v\(version)"
            try Data(repeating: UInt8(65 + version), count: 2 << 20).write(to: URL(fileURLWithPath: host))
            #expect(try share(container, ["put", host, "a.txt"]).status == 0)
            usleep(50_000)
        }
        // The reader stops on a marker beside the file (a put of the marker).
        #expect(try share(container, ["put", try hostFile(container, "a.txt.stop", ""), "a.txt.stop"]).status == 0)
        let read = reader.wait()
        let fields = read.stdout.split(separator: " ").compactMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
        #expect(fields.first == 0, "a torn read: \(read)")
        #expect((fields.last ?? 0) >= 2, "the reader saw more than one version: \(read)")
    }

    // MARK: run --launches --share-edits random

    /// An app that trusts its document to stay as it left it fails at the first launch
    /// after the user touched it; the failing launch names the seed and the options that
    /// replay it, and the replay makes the same edits and fails at the same launch. Without
    /// file sharing in Info.plist the option is refused before any launch.
    @Test func shareEditsBreakAnAppThatTrustsItsDocumentsAndReplay() throws {
        let fragile = "test \"$(cat Documents/notes.txt 2>/dev/null)\" = mine"
        func launches(_ container: MountedContainer) throws -> ProgramResult {
            try Data("mine".utf8).write(to: URL(fileURLWithPath: container.stored("Documents/notes.txt")))
            return try containerfsRun(container, ["--launches", "8", "--share-edits", "random", "--seed", "5"], ["sh", "-c", fragile])
        }
        let first = try launches(try MountedContainer(infoPlist: Self.sharingXML))
        let again = try launches(try MountedContainer(infoPlist: Self.sharingXML))
        #expect(first.status == 1, "\(first)")
        #expect(first.stderr.hasPrefix("containerfs: 8 launches, purging tmp and the user editing Documents/ between them, seed 5\n"), "\(first)")
        #expect(first.stderr.contains("(seed 5); replay it with --launches 8 --purge-between tmp --share-edits random --seed 5\n"), "\(first)")
        #expect(first.stderr.contains("notes.txt"), "the edit that broke it is named: \(first)")
        #expect(first.stderr == again.stderr, "the replay differs:\n\(first.stderr)\n\(again.stderr)")

        let closed = try MountedContainer(infoPlist: Self.xmlPlist("<key>CFBundleName</key>\n\t<string>Demo</string>"))
        let refused = try containerfsRun(closed, ["--launches", "3", "--share-edits", "random"], ["touch", "Documents/ran"])
        #expect(refused.status == 1 && refused.stderr.contains("file sharing is off"), "\(refused)")
        #expect(refused.stderr.split(separator: "\n").count == 1, "\(refused)")
        #expect(!FileManager.default.fileExists(atPath: closed.stored("Documents/ran")))
        try expectCleanedUp(closed)
    }

    /// What du finds in `container`'s store, its state folder excluded, as the capacity counts.
    private func du(_ container: MountedContainer) throws -> Int64 {
        let result = try runProgram(["du", "--summarize", "--block-size=1", "--exclude=.containerfs", container.store])
        guard result.status == 0, let bytes = Int64(result.stdout.prefix { $0.isNumber }) else { throw TestFailure("du: \(result)") }
        return bytes
    }

    /// The user's edits between launches are held to the container's own capacity, as
    /// `share put` is: on a full container each add is refused with one line, nothing is
    /// written, and the launches go on. And they make the next launch count the store
    /// afresh: the count the daemon recorded at the last unmount (which a mount takes
    /// instead of walking) goes, so that what a deletion freed is free to the app at once.
    /// (Before, adds passed the capacity, and launch 2 believed the 1 MiB file deleted
    /// still there: its 600 kB write failed with ENOSPC.)
    @Test func shareEditsAreHeldToTheContainersCapacity() throws {
        let container = try MountedContainer(infoPlist: Self.sharingXML)
        var used = try du(container)
        #expect(try containerfs(["capacity", container.store, "\(used + 2048)"]).status == 0)
        let full = try containerfsRun(container, ["--launches", "2", "--share-edits", "random", "--seed", "1"], ["true"])
        #expect(full.status == 0 && full.stderr.contains("all 2 launches exited 0"), "\(full)")
        #expect(full.stderr.contains("containerfs: cannot add Documents/Shared 2-0.txt in \(container.store): it needs 4096 bytes and the container has"),
                "\(full)")
        #expect(full.stderr.contains("the user could not add Documents/Shared 2-0.txt"), "\(full)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: container.stored("Documents")) == ["Inbox"], "nothing was written")
        #expect(try du(container) <= used + 2048)

        // Seed 1 deletes big.bin before launch 2 (and adds two small files).
        let other = try MountedContainer(infoPlist: Self.sharingXML)
        try Data(repeating: 7, count: 1 << 20).write(to: URL(fileURLWithPath: other.stored("Documents/big.bin")))
        used = try du(other)
        #expect(try containerfs(["capacity", other.store, "\(used + 300_000)"]).status == 0)
        let app = "if [ -e Library/once ]; then head -c 600000 /dev/zero > Library/written; else touch Library/once; fi"
        let freed = try containerfsRun(other, ["--launches", "2", "--share-edits", "random", "--seed", "1"], ["sh", "-c", app])
        #expect(freed.stderr.contains("the user deleted Documents/big.bin"), "\(freed)")
        #expect(freed.status == 0, "launch 2 has the room the deletion freed: \(freed)")
        #expect(try FileManager.default.attributesOfItem(atPath: other.stored("Library/written"))[.size] as? Int == 600_000)
    }

    /// An app that copes — python3 opening its SQLite database in Documents/, starting a new
    /// one when the user deleted, renamed or replaced it with something that is not a
    /// database — passes every launch while the user edits around it.
    @Test func anAppThatCopesWithShareEditsPassesEveryLaunch() throws {
        let container = try MountedContainer(infoPlist: Self.sharingXML)
        let app = """
            import os, sqlite3
            path = "Documents/notes.db"
            try:
                db = sqlite3.connect(path)
                db.execute("create table if not exists notes(text)")
            except sqlite3.DatabaseError:
                db.close()
                os.replace(path, "Documents/notes (damaged).db")
                db = sqlite3.connect(path)
                db.execute("create table notes(text)")
                print("recovered")
            db.execute("insert into notes values ('launch')")
            db.commit()
            print(db.execute("select count(*) from notes").fetchone()[0])
            """
        let result = try containerfsRun(container, ["--launches", "10", "--share-edits", "random", "--seed", "3"], ["python3", "-c", app])
        #expect(result.status == 0, "\(result)")
        #expect(result.stderr.contains("all 10 launches exited 0 (seed 3)"), "\(result)")
        let edits = result.stderr.split(separator: "\n").filter { $0.contains("before launch") && $0.contains("; the user ") }
        #expect(edits.count == 9, "\(result)")
        #expect(edits.contains { $0.contains("replaced Documents/notes") || $0.contains("deleted Documents/notes") || $0.contains("renamed Documents/notes") },
                "the database itself was edited: \(result)")
        #expect(result.stdout.contains("recovered"), "the app met a replaced database: \(result)")
        try expectCleanedUp(container)
    }
}

/// Property lists shared with ContainerStoreTests' (the integration tests cannot import that target).
enum PropertyListSamples {
    /// A damaged binary list that makes Foundation's `PropertyListSerialization` crash on Linux.
    static let foundationCrasher: [UInt8] = {
        let hex = "62706c6973743030c301020304050b5c434642756e646c654e6c6d65564e65737465645f1014554946696c6553686172696e67456e61626c65645444656d6fd106075161a308090a1001234004000000000000517809080f1c233a3f4244484a53550000000000000101000000000000000c00000000000000000000000000000056"
        var out: [UInt8] = []
        var index = hex.startIndex
        while index < hex.endIndex {
            let next = hex.index(index, offsetBy: 2)
            out.append(UInt8(hex[index..<next], radix: 16) ?? 0)
            index = next
        }
        return out
    }()
}
