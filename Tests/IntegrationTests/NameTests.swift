import Foundation
import Glibc
import Testing

/// SPEC §2: names are bytes. A name that is not valid UTF-8, or that differs from another
/// only by Unicode normalization, is a distinct file, exactly as in the store; names and
/// paths may be as long as the kernel allows.
@Suite("Names are bytes")
struct NameTests {
    /// `parent/name` as bytes.
    static func join(_ parent: String, _ name: [UInt8]) -> [UInt8] {
        bytes(parent) + [UInt8(ascii: "/")] + name
    }

    /// Creates `parent/name` through the mount holding `text`; returns the errno or 0.
    static func create(_ parent: String, _ name: [UInt8], _ text: String) -> Int32 {
        let fd = open(cPath(join(parent, name)), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0o644)
        guard fd >= 0 else { return errno }
        defer { close(fd) }
        return writeAll(fd, bytes(text))
    }

    /// Names in byte order, as `listingAsBytes` gives them.
    static func sorted(_ names: [[UInt8]]) -> [[UInt8]] {
        names.sorted { $0.lexicographicallyPrecedes($1) }
    }

    @Test("names that are not valid UTF-8 are files like any other", arguments: ["Documents", "Library/Caches", "tmp"])
    func invalidUTF8(_ directory: String) throws {
        try withMountedContainer { container in
            let probe = try Probe(container)
            let relative = directory + "/names"
            let here = container.mounted(relative)
            probe.allowed("mkdir") { outcome(mkdir(here, 0o755)) }
            let latin1 = bytes("caf") + [0xE9]  // café in ISO 8859-1
            let utf8 = bytes("caf\u{E9}")
            let garbage: [UInt8] = [0xFF, 0xFE, 0x80, 0x2E, 0xC0, 0xAF]  // stray bytes, an overlong "/"
            let files = [(latin1, "latin-1"), (utf8, "utf-8"), (garbage, "garbage")]
            for (name, text) in files {
                probe.allowed("create \(name)") { Self.create(here, name, text) }
            }
            let folder: [UInt8] = bytes("dir") + [0xA0]
            probe.allowed("mkdir with a Latin-1 name") { outcome(mkdir(cPath(Self.join(here, folder)), 0o755)) }
            probe.allowed("create inside it") { Self.create(here, folder + bytes("/inner"), "inner") }

            let expected = Self.sorted(files.map(\.0) + [folder])
            #expect(try listingAsBytes(bytes(here)) == expected, "the mount lists the names as they are")
            #expect(try listingAsBytes(bytes(container.stored(relative))) == expected, "the store holds the names as they are")
            for (name, text) in files {
                #expect(contents(cPath(Self.join(here, name))) == bytes(text), "\(name) through the mount")
                #expect(contents(cPath(Self.join(container.stored(relative), name))) == bytes(text), "\(name) in the store")
            }
            #expect(contents(cPath(Self.join(container.stored(relative), folder + bytes("/inner")))) == bytes("inner"))

            // Renamed to another invalid name, and removed.
            let renamed: [UInt8] = [0xFE, 0xED]
            probe.allowed("rename") { outcome(rename(cPath(Self.join(here, latin1)), cPath(Self.join(here, renamed)))) }
            probe.allowed("unlink") { outcome(unlink(cPath(Self.join(here, garbage)))) }
            #expect(try listingAsBytes(bytes(container.stored(relative))) == Self.sorted([utf8, renamed, folder]))
            #expect(contents(cPath(Self.join(container.stored(relative), renamed))) == bytes("latin-1"))
            #expect(contents(cPath(Self.join(container.stored(relative), utf8))) == bytes("utf-8"))
            try probe.finish()
        }
    }

    @Test("names that differ only by Unicode normalization are two files", arguments: ["Documents", "Library/Caches"])
    func normalization(_ directory: String) throws {
        try withMountedContainer { container in
            let probe = try Probe(container)
            let here = container.mounted(directory)
            let nfc = bytes("Cach\u{E9}")  // é as one code point
            let nfd = bytes("Cache\u{301}")  // e + combining acute accent
            #expect(nfc != nfd)
            probe.allowed("create NFC") { Self.create(here, nfc, "composed") }
            probe.allowed("create NFD") { Self.create(here, nfd, "decomposed") }
            probe.fails("O_EXCL on the NFC name again", with: EEXIST) { Self.create(here, nfc, "again") }
            // A folder and a file whose names differ only by normalization.
            let folderNFC = bytes("R\u{E9}sum\u{E9}"), fileNFD = bytes("Re\u{301}sume\u{301}")
            probe.allowed("mkdir NFC") { outcome(mkdir(cPath(Self.join(here, folderNFC)), 0o755)) }
            probe.allowed("create NFD beside it") { Self.create(here, fileNFD, "a file") }

            let names = Self.sorted([nfc, nfd, folderNFC, fileNFD])
            #expect(try listingAsBytes(bytes(here)).filter { names.contains($0) } == names)
            #expect(try listingAsBytes(bytes(container.stored(directory))).filter { names.contains($0) } == names)
            for (name, text) in [(nfc, "composed"), (nfd, "decomposed"), (fileNFD, "a file")] {
                #expect(contents(cPath(Self.join(here, name))) == bytes(text), "\(name) through the mount")
                #expect(contents(cPath(Self.join(container.stored(directory), name))) == bytes(text), "\(name) in the store")
            }
            var info = stat()
            #expect(stat(cPath(Self.join(container.stored(directory), folderNFC)), &info) == 0 && info.st_mode & S_IFMT == S_IFDIR)

            // Changing one leaves the other alone.
            probe.allowed("rename NFC away") { outcome(rename(cPath(Self.join(here, nfc)), cPath(Self.join(here, bytes("moved"))))) }
            probe.allowed("append to NFD") {
                let fd = open(cPath(Self.join(here, nfd)), O_WRONLY | O_APPEND)
                guard fd >= 0 else { return errno }
                defer { close(fd) }
                return writeAll(fd, bytes("+"))
            }
            #expect(contents(cPath(Self.join(container.stored(directory), nfd))) == bytes("decomposed+"))
            #expect(contents(container.stored(directory + "/moved")) == bytes("composed"))
            #expect(access(cPath(Self.join(container.stored(directory), nfc)), F_OK) != 0, "the NFC name is gone from the store")
            probe.fails("the NFC name is gone", with: ENOENT) { outcome(access(cPath(Self.join(here, nfc)), F_OK)) }
            probe.allowed("the NFD name is still there") { outcome(access(cPath(Self.join(here, nfd)), F_OK)) }
            try probe.finish()
        }
    }

    @Test("the audit log keeps a denied path's bytes")
    func auditedNamesKeepTheirBytes() throws {
        try withMountedContainer { container in
            let probe = try Probe(container)
            let bundle = container.mounted("Demo.app")
            let cases: [(name: [UInt8], printed: String)] = [
                (bytes("caf") + [0xE9], "Demo.app/caf\\xe9"),
                (bytes("Cache\u{301}"), "Demo.app/Cache\u{301}"),
                (bytes("Cach\u{E9}"), "Demo.app/Cach\u{E9}"),
                (bytes("a\\xe9"), "Demo.app/a\\\\xe9"),  // the text \xe9, not the byte
            ]
            for (name, printed) in cases {
                try probe.denied(
                    "create \(printed)",
                    Denial(
                        errno: EPERM, operation: "create", paths: [printed], areas: ["bundle"],
                        rule: "bundleIsReadOnly")
                ) {
                    Self.create(bundle, name, "x")
                }
            }
            try probe.finish()
        }
    }

    @Test("a 255-byte name works; 256 bytes is ENAMETOOLONG")
    func nameLength() throws {
        try withMountedContainer { container in
            let probe = try Probe(container)
            let here = container.mounted("Documents")
            let ascii = bytes(String(repeating: "a", count: 255))
            let accented = bytes(String(repeating: "\u{E9}", count: 127) + "z")  // 255 bytes
            let other = bytes(String(repeating: "b", count: 255))
            #expect(ascii.count == 255 && accented.count == 255)
            probe.allowed("create 255 bytes") { Self.create(here, ascii, "long") }
            probe.allowed("create 255 bytes of é") { Self.create(here, accented, "accented") }
            probe.allowed("rename to another 255-byte name") {
                outcome(rename(cPath(Self.join(here, ascii)), cPath(Self.join(here, other))))
            }
            probe.allowed("mkdir 255 bytes") { outcome(mkdir(cPath(Self.join(here, ascii)), 0o755)) }
            let longFolder = here + "/" + String(repeating: "a", count: 255)
            probe.allowed("symlink 255 bytes") { outcome(symlink("x", cPath(Self.join(longFolder, ascii)))) }
            probe.allowed("link 255 bytes") { outcome(link(cPath(Self.join(here, other)), cPath(Self.join(longFolder, other)))) }
            #expect(contents(cPath(Self.join(container.stored("Documents"), other))) == bytes("long"))
            #expect(contents(cPath(Self.join(container.stored("Documents"), accented))) == bytes("accented"))
            #expect(try listingAsBytes(bytes(container.stored("Documents"))).contains(other))

            let tooLong = bytes(String(repeating: "a", count: 256))
            let tooLongAccented = bytes(String(repeating: "\u{E9}", count: 128))
            for name in [tooLong, tooLongAccented] {
                let path = cPath(Self.join(here, name))
                var info = stat()
                probe.fails("create \(name.count) bytes", with: ENAMETOOLONG) { Self.create(here, name, "x") }
                probe.fails("stat \(name.count) bytes", with: ENAMETOOLONG) { outcome(stat(path, &info)) }
                probe.fails("mkdir \(name.count) bytes", with: ENAMETOOLONG) { outcome(mkdir(path, 0o755)) }
                probe.fails("symlink \(name.count) bytes", with: ENAMETOOLONG) { outcome(symlink("x", path)) }
                probe.fails("link \(name.count) bytes", with: ENAMETOOLONG) { outcome(link(cPath(Self.join(here, other)), path)) }
                probe.fails("rename to \(name.count) bytes", with: ENAMETOOLONG) { outcome(rename(cPath(Self.join(here, other)), path)) }
            }
            #expect(try listingAsBytes(bytes(container.stored("Documents"))).allSatisfy { $0.count <= 255 })
            try probe.finish()
        }
    }

    /// Reads `components`… below `root` in the store one directory descriptor at a time, as
    /// an absolute path would be longer than PATH_MAX.
    static func readStored(_ root: String, _ components: [String]) throws -> String {
        let script = """
            import os, sys
            fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
            for name in sys.argv[2:-1]:
                fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            sys.stdout.write(open(os.open(sys.argv[-1], os.O_RDONLY, dir_fd=fd)).read())
            """
        let result = try runProgram(["python3", "-c", script, root] + components)
        guard result.status == 0 else { throw TestFailure("reading the store: \(result)") }
        return result.stdout
    }

    @Test("paths up to PATH_MAX work, and deeper ones through directory descriptors")
    func deepPaths() throws {
        try withMountedContainer { container in
            let probe = try Probe(container)
            let component = String(repeating: "d", count: 200)
            var path = container.mounted("Documents/deep")
            var components: [String] = []
            probe.allowed("mkdir deep") { outcome(mkdir(path, 0o755)) }
            // Folders until a last name of at most 255 bytes makes the path PATH_MAX - 1 bytes long.
            while Int(PATH_MAX) - 1 - path.utf8.count - 1 > 255 {
                path += "/" + component
                components.append(component)
                let current = path
                probe.allowed("mkdir at \(current.utf8.count) bytes") { outcome(mkdir(current, 0o755)) }
            }
            let name = String(repeating: "f", count: Int(PATH_MAX) - 1 - path.utf8.count - 1)
            let file = path + "/" + name
            #expect(file.utf8.count == Int(PATH_MAX) - 1)
            probe.allowed("create at PATH_MAX - 1 bytes") { withOpened(file, O_CREAT | O_WRONLY) { writeAll($0, bytes("at the limit")) } }
            #expect(contents(file) == bytes("at the limit"))
            probe.allowed("rename at PATH_MAX - 1 bytes") {
                outcome(rename(file, path + "/" + String(repeating: "g", count: name.utf8.count)))
            }
            probe.fails("one byte more is the kernel's ENAMETOOLONG", with: ENAMETOOLONG) { withOpened(file + "x", O_CREAT | O_WRONLY) }
            // The same path in the store is longer than PATH_MAX: the daemon must work relative to descriptors.
            #expect(
                try Self.readStored(container.stored("Documents/deep"), components + [String(repeating: "g", count: name.utf8.count)])
                    == "at the limit")

            // Deeper, through descriptors: about twice PATH_MAX.
            var fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            #expect(fd >= 0)
            var deeper = components
            for level in 0..<25 {
                let next = String(repeating: "e", count: 200)
                probe.allowed("mkdirat level \(level)") { outcome(mkdirat(fd, next, 0o755)) }
                let child = openat(fd, next, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
                close(fd)
                fd = child
                deeper.append(next)
                if fd < 0 { break }
            }
            probe.allowed("create at the bottom") {
                let file = openat(fd, "bottom.txt", O_CREAT | O_WRONLY | O_CLOEXEC, 0o644)
                guard file >= 0 else { return errno }
                defer { close(file) }
                return writeAll(file, bytes("bottom"))
            }
            close(fd)
            #expect(deeper.joined(separator: "/").utf8.count > 2 * Int(PATH_MAX))
            #expect(try Self.readStored(container.stored("Documents/deep"), deeper + ["bottom.txt"]) == "bottom")
            #expect(try Self.readStored(container.mounted("Documents/deep"), deeper + ["bottom.txt"]) == "bottom")

            let rm = try runProgram(["rm", "-rf", container.mounted("Documents/deep")])
            #expect(rm.status == 0, "rm -rf a deep tree: \(rm)")
            #expect(status(container.stored("Documents/deep")) == nil)
            try probe.finish()
        }
    }
}
