import ContainerPolicy
import PolicySpec
import Testing

/// A path, as bytes, and where the layout must place it.
struct ClassificationCase: Sendable, CustomTestStringConvertible {
    let path: [UInt8]
    let expected: Location
    var testDescription: String { "\(ContainerPath.printable(path)) → \(name(expected))" }

    init(_ path: String, _ expected: Location) {
        self.init(bytes: bytes(path), expected)
    }

    init(bytes path: [UInt8], _ expected: Location) {
        self.path = path
        self.expected = expected
    }
}

/// The locations of paths in `Demo.app`'s container, by area.
let classificationCases: [ClassificationCase] = [
    // The root and its names.
    .init("", .root),
    .init("Demo.app", .bundle),
    .init("Documents", .standard(.documents)),
    .init("Library", .standard(.library)),
    .init("tmp", .standard(.tmp)),
    .init("Inbox", .foreign),
    .init("Caches", .foreign),
    .init("Application Support", .foreign),
    .init("Preferences", .foreign),
    .init("Other.app", .foreign),
    .init("Demo", .foreign),
    .init("notes.txt", .foreign),
    .init("documents", .foreign),
    .init("LIBRARY", .foreign),
    .init("Tmp", .foreign),
    .init("Documents ", .foreign),
    .init(" Documents", .foreign),
    .init("demo.app", .foreign),
    .init("Demo.app ", .foreign),
    // Below a foreign name stays foreign, whatever the name.
    .init("Other.app/Documents", .foreign),
    .init("notes/tmp/x", .foreign),

    // The bundle and everything below it, standard-looking names included.
    .init("Demo.app/Info.plist", .bundle),
    .init("Demo.app/Documents", .bundle),
    .init("Demo.app/Documents/Inbox", .bundle),
    .init("Demo.app/Library/Caches", .bundle),
    .init("Demo.app/tmp", .bundle),
    .init("Demo.app/Frameworks/Kit.framework/Kit", .bundle),

    // Documents: data, except its Inbox.
    .init("Documents/Inbox", .standard(.inbox)),
    .init("Documents/report.pdf", .inside(.data)),
    .init("Documents/sub/deeper/file", .inside(.data)),
    .init("Documents/inbox", .inside(.data)),
    .init("Documents/Inbox ", .inside(.data)),
    .init("Documents/Documents", .inside(.data)),
    .init("Documents/Library", .inside(.data)),
    .init("Documents/tmp", .inside(.data)),
    .init("Documents/Caches", .inside(.data)),
    .init("Documents/Demo.app", .inside(.data)),
    .init("Documents/sub/Inbox", .inside(.data)),
    .init("Documents/sub/Inbox/file", .inside(.data)),

    // The inbox: everything below Documents/Inbox.
    .init("Documents/Inbox/report.pdf", .inside(.inbox)),
    .init("Documents/Inbox/folder", .inside(.inbox)),
    .init("Documents/Inbox/folder/file", .inside(.inbox)),
    .init("Documents/Inbox/Inbox", .inside(.inbox)),
    .init("Documents/Inbox/Documents", .inside(.inbox)),

    // Library: data, except its three standard folders.
    .init("Library/Application Support", .standard(.applicationSupport)),
    .init("Library/Preferences", .standard(.preferences)),
    .init("Library/Caches", .standard(.caches)),
    .init("Library/Cookies", .inside(.data)),
    .init("Library/caches", .inside(.data)),
    .init("Library/ApplicationSupport", .inside(.data)),
    .init("Library/Application  Support", .inside(.data)),
    .init("Library/Inbox", .inside(.data)),
    .init("Library/tmp", .inside(.data)),
    .init("Library/Library", .inside(.data)),
    .init("Library/Application Support/db.sqlite", .inside(.data)),
    .init("Library/Application Support/Caches", .inside(.data)),
    .init("Library/Application Support/Preferences", .inside(.data)),
    .init("Library/Preferences/com.example.demo.plist", .inside(.data)),
    .init("Library/Preferences/Caches", .inside(.data)),
    .init("Library/Cookies/Caches/x", .inside(.data)),

    // Caches and tmp.
    .init("Library/Caches/thumb.png", .inside(.cache)),
    .init("Library/Caches/sub/dir/file", .inside(.cache)),
    .init("Library/Caches/tmp", .inside(.cache)),
    .init("Library/Caches/Caches", .inside(.cache)),
    .init("Library/Caches/Inbox", .inside(.cache)),
    .init("tmp/scratch", .inside(.temporary)),
    .init("tmp/sub/dir/file", .inside(.temporary)),
    .init("tmp/Caches", .inside(.temporary)),
    .init("tmp/tmp", .inside(.temporary)),
    .init("tmp/Documents", .inside(.temporary)),
]

/// The names the store keeps for itself: hidden only where the store puts them.
let hiddenNameCases: [ClassificationCase] = [
    // The state folder, at the root only, and everything in it.
    .init(".containerfs", .hidden),
    .init(".containerfs/audit.log", .hidden),
    .init(".containerfs/tags/index", .hidden),
    .init(".containerfs/Documents", .hidden),
    .init(".ContainerFS", .foreign),
    .init(".containerfs ", .foreign),
    .init("containerfs", .foreign),
    .init(".containerfs.old", .foreign),
    .init("Documents/.containerfs", .inside(.data)),
    .init("Documents/Inbox/.containerfs", .inside(.inbox)),
    .init("Library/.containerfs", .inside(.data)),
    .init("Library/Caches/.containerfs", .inside(.cache)),
    .init("tmp/.containerfs", .inside(.temporary)),
    .init("Demo.app/.containerfs", .bundle),

    // The cache tag, directly in Library/Caches and tmp only.
    .init("Library/Caches/CACHEDIR.TAG", .hidden),
    .init("tmp/CACHEDIR.TAG", .hidden),
    .init("tmp/CACHEDIR.TAG/x", .hidden),
    .init("CACHEDIR.TAG", .foreign),
    .init("Documents/CACHEDIR.TAG", .inside(.data)),
    .init("Documents/Inbox/CACHEDIR.TAG", .inside(.inbox)),
    .init("Library/CACHEDIR.TAG", .inside(.data)),
    .init("Library/Application Support/CACHEDIR.TAG", .inside(.data)),
    .init("Library/Preferences/CACHEDIR.TAG", .inside(.data)),
    .init("Library/Caches/sub/CACHEDIR.TAG", .inside(.cache)),
    .init("tmp/sub/CACHEDIR.TAG", .inside(.temporary)),
    .init("Demo.app/CACHEDIR.TAG", .bundle),
    .init("Library/Caches/cachedir.tag", .inside(.cache)),
    .init("Library/Caches/CACHEDIR.TAG ", .inside(.cache)),
    .init("tmp/CACHEDIR.TAG~", .inside(.temporary)),
]

/// Names that a program, a person or a `String` could take for a standard name, but whose
/// bytes differ: each is a distinct file, classified by its bytes (SPEC §2).
let lookalikeCases: [ClassificationCase] = [
    // Canonically equivalent to a different name, or differing only by combining marks.
    .init("Documents\u{301}", .foreign),  // "Document" + "s" + combining acute (NFD)
    .init("Documen\u{15B}", .foreign),  // the same, composed: "Documenś" (NFC)
    .init("Documents\u{200B}", .foreign),  // zero-width space
    .init("\u{FEFF}Documents", .foreign),  // byte-order mark
    .init("tmp\u{200D}", .foreign),  // zero-width joiner
    // Compatibility forms (NFKC would map them onto the standard names).
    .init("\u{FF24}ocuments", .foreign),  // fullwidth D
    .init("\u{FF54}\u{FF4D}\u{FF50}", .foreign),  // fullwidth "tmp"
    .init("Library/Application\u{A0}Support", .inside(.data)),  // no-break space
    .init("Library/\u{FF23}aches", .inside(.data)),
    // Lookalike letters.
    .init("Documents/\u{406}nbox", .inside(.data)),  // Cyrillic І
    .init("Library/Pr\u{435}ferences", .inside(.data)),  // Cyrillic е
    .init("\u{2024}containerfs", .foreign),  // one dot leader
    .init("Library/Caches/CACHEDIR\u{2024}TAG", .inside(.cache)),
    // Invalid UTF-8: a stray byte, a truncated sequence, an overlong encoding that a lax
    // decoder reads as the standard name.
    .init(bytes: [0xFF], .foreign),
    .init(bytes: bytes("Documents") + [0xFF], .foreign),
    .init(bytes: bytes("Document") + [0xC1, 0xB3], .foreign),  // overlong "s"
    .init(bytes: [0xC0, 0xAE] + bytes("containerfs"), .foreign),  // overlong "."
    .init(bytes: bytes("tm") + [0xE0, 0x81, 0xB0], .foreign),  // 3-byte overlong "p"
    .init(bytes: bytes("Documents/Inbo") + [0xC1, 0xB8], .inside(.data)),  // overlong "x"
    .init(bytes: bytes("Library/Caches/") + [0xFF, 0xFE], .inside(.cache)),
    .init(bytes: bytes("Library/Caches/CACHEDIR.TA") + [0xC1, 0x87], .inside(.cache)),  // overlong "G"
    .init(bytes: bytes("Documents/Inbox/") + [0xED, 0xA0, 0x80], .inside(.inbox)),  // a surrogate
    .init(bytes: bytes("tmp/") + [0xC3], .inside(.temporary)),
    .init(bytes: bytes("Demo.app/") + [0x80], .bundle),
]

@Suite("Classification")
struct ClassificationTests {
    @Test("Paths in each area", arguments: classificationCases)
    func area(_ cell: ClassificationCase) {
        #expect(layout.location(of: ContainerPath(bytes: cell.path)!) == cell.expected)
    }

    /// A bundle's name is one `NAME.app` folder name: the store records it, and its owner
    /// can write the record, so a path there must never be taken for one.
    @Test("Bundle names are single NAME.app folder names")
    func bundleNames() {
        for good in ["Demo.app", "..app", "Notes Pro.app", "é.app"] {
            #expect(ContainerLayout.isBundleName(bytes(good)), "\(good)")
        }
        #expect(ContainerLayout.isBundleName([0xFF] + bytes(".app")), "bytes that are not UTF-8 are a name like any other")
        #expect(ContainerLayout.isBundleName(Array(repeating: UInt8(ascii: "a"), count: 251) + bytes(".app")))
        let bad: [[UInt8]] = [
            [], bytes(".app"), bytes("Demo"), bytes("Demo.appx"), bytes("../../etc/x.app"), bytes("a/b.app"), bytes("/Demo.app"),
            bytes("Demo.app/"), bytes("../../victim/secret"), bytes("Demo") + [0] + bytes(".app"),
            Array(repeating: UInt8(ascii: "a"), count: 252) + bytes(".app"),
        ]
        for name in bad { #expect(!ContainerLayout.isBundleName(name), "\(ContainerPath.printable(name))") }
    }

    @Test("Hidden names", arguments: hiddenNameCases)
    func hidden(_ cell: ClassificationCase) {
        #expect(layout.location(of: ContainerPath(bytes: cell.path)!) == cell.expected)
    }

    @Test("Only a directory that hidesNames can hold a hidden name", arguments: allLocations)
    func hidesNames(_ directory: Location) {
        let hidden = [ContainerLayout.stateFolderName, ContainerLayout.cacheTagName, layout.bundleName, bytes("x")]
            .filter { layout.child($0, of: directory) == .hidden }
        #expect(layout.hidesNames(in: directory) == !hidden.isEmpty, "\(hidden)")
    }

    @Test("Names are bytes: lookalikes and invalid UTF-8 are distinct", arguments: lookalikeCases)
    func lookalike(_ cell: ClassificationCase) {
        #expect(layout.location(of: ContainerPath(bytes: cell.path)!) == cell.expected)
    }

    @Test(
        "Each standard directory's path",
        arguments: [
            (StandardDirectory.documents, "Documents"),
            (.inbox, "Documents/Inbox"),
            (.library, "Library"),
            (.applicationSupport, "Library/Application Support"),
            (.preferences, "Library/Preferences"),
            (.caches, "Library/Caches"),
            (.tmp, "tmp"),
        ])
    func standardDirectory(_ directory: StandardDirectory, _ text: String) {
        #expect(directory.path == path(text))
        #expect(layout.location(of: directory.path) == .standard(directory))
    }

    @Test("Every standard directory is listed")
    func everyStandardDirectory() {
        #expect(StandardDirectory.allCases.count == 7)
        #expect(Set(StandardDirectory.allCases.map(\.path)).count == 7)
    }

    @Test(
        "Each location's area",
        arguments: [
            (Location.root, Area.structure),
            (.standard(.documents), .structure),
            (.standard(.inbox), .structure),
            (.standard(.library), .structure),
            (.standard(.applicationSupport), .structure),
            (.standard(.preferences), .structure),
            (.standard(.caches), .structure),
            (.standard(.tmp), .structure),
            (.foreign, .structure),
            (.hidden, .structure),
            (.bundle, .bundle),
            (.inside(.inbox), .inbox),
            (.inside(.data), .data),
            (.inside(.cache), .cache),
            (.inside(.temporary), .temporary),
        ])
    func locationArea(_ location: Location, _ area: Area) {
        #expect(location.area == area)
    }

    @Test("Only data, cache and temporary are writable", arguments: Area.allCases)
    func writable(_ area: Area) {
        #expect(area.isWritable == [.data, .cache, .temporary].contains(area))
    }

    /// The cases whose parent path is a case too, with the parent's expected location: both
    /// ends come from the tables, not from `location(of:)` (which is `child` applied step by
    /// step, so comparing the two would restate it).
    static let casesWithTheirParent: [(parent: ClassificationCase, child: ClassificationCase)] = {
        let cases = classificationCases + hiddenNameCases + lookalikeCases
        let byPath = Dictionary(cases.map { ($0.path, $0) }, uniquingKeysWith: { first, _ in first })
        return cases.compactMap { cell in
            guard let slash = cell.path.lastIndex(of: UInt8(ascii: "/")) else {
                return cell.path.isEmpty ? nil : byPath[[]].map { ($0, cell) }
            }
            return byPath[Array(cell.path[..<slash])].map { ($0, cell) }
        }
    }()

    @Test func mostCasesHaveTheirParentInTheTables() {
        #expect(Self.casesWithTheirParent.count >= 40)
    }

    @Test(
        "A path's location is its parent's expected location and its own name",
        arguments: zip(ClassificationTests.casesWithTheirParent.map(\.parent), ClassificationTests.casesWithTheirParent.map(\.child)))
    func locationIsStepwise(_ parent: ClassificationCase, _ cell: ClassificationCase) throws {
        let last = try #require(ContainerPath(bytes: cell.path)?.components.last)
        #expect(layout.child(last, of: parent.expected) == cell.expected)
    }

    @Test(
        "Below anything but the root and a standard directory, every name keeps its parent's location",
        arguments: [
            Location.bundle, .foreign, .hidden, .inside(.data), .inside(.inbox), .inside(.cache), .inside(.temporary),
        ])
    func belowLeaf(_ parent: Location) {
        let names = ["Documents", "Inbox", "Library", "Caches", "tmp", "Demo.app", ".containerfs", "CACHEDIR.TAG", "x"]
        for name in names {
            #expect(layout.child(bytes(name), of: parent) == parent, "\(name)")
        }
    }
}

/// Unicode normalization and encoding, where `String` equality would mislead.
@Suite("Names are bytes")
struct NameBytesTests {
    static let nfc = "Cach\u{E9}"  // é as one scalar
    static let nfd = "Cache\u{301}"  // e + combining acute

    @Test("\"Caché\" in NFC and NFD are two files")
    func normalizationFormsAreDistinct() {
        // Swift calls these strings equal; the filesystem must not.
        #expect(Self.nfc == Self.nfd)
        #expect(bytes(Self.nfc) != bytes(Self.nfd))
        for parent in ["Documents", "Library/Caches", "tmp", "Documents/Inbox"] {
            let composed = path(parent + "/" + Self.nfc)
            let decomposed = path(parent + "/" + Self.nfd)
            #expect(composed != decomposed)
            #expect(Set([composed, decomposed]).count == 2)
            #expect(layout.location(of: composed) == layout.location(of: decomposed))
        }
        #expect(layout.location(of: path(Self.nfc)) == .foreign)
        #expect(layout.location(of: path("Library/" + Self.nfd)) == .inside(.data))
    }

    @Test("A bundle name matches its own bytes only", arguments: [
        ("Caf\u{E9}.app", "Cafe\u{301}.app"),
        ("Cafe\u{301}.app", "Caf\u{E9}.app"),
    ])
    func bundleNameNormalization(_ bundle: String, _ equivalent: String) {
        #expect(bundle == equivalent)
        let layout = ContainerLayout(bundleName: bytes(bundle))
        #expect(layout.child(bytes(bundle), of: .root) == .bundle)
        #expect(layout.child(bytes(equivalent), of: .root) == .foreign)
        #expect(layout.location(of: path(equivalent + "/Info.plist")) == .foreign)
        #expect(layout.location(of: path(bundle + "/Info.plist")) == .bundle)
    }

    @Test("A bundle name that is not UTF-8")
    func nonUTF8BundleName() {
        let name = bytes("Demo") + [0xFF] + bytes(".app")
        let layout = ContainerLayout(bundleName: name)
        #expect(layout.bundleName == name)
        #expect(layout.child(name, of: .root) == .bundle)
        #expect(layout.location(of: ContainerPath(bytes: name + bytes("/Info.plist"))!) == .bundle)
        // What a lossy decoding would turn it into is another name.
        let lossy = bytes(String(decoding: name, as: UTF8.self))
        #expect(lossy == bytes("Demo\u{FFFD}.app"))
        #expect(layout.child(lossy, of: .root) == .foreign)
        #expect(layout.child(bytes("Demo.app"), of: .root) == .foreign)
        #expect(layout.child(bytes("Demo") + [0xFE] + bytes(".app"), of: .root) == .foreign)
        // The standard names are unaffected.
        #expect(layout.child(bytes("Documents"), of: .root) == .standard(.documents))
        #expect(layout.child(bytes("tmp"), of: .root) == .standard(.tmp))
    }

    @Test("Another container's bundle name is foreign here")
    func bundleNameIsPerContainer() {
        let other = ContainerLayout(bundleName: bytes("Other.app"))
        #expect(other.child(bytes("Other.app"), of: .root) == .bundle)
        #expect(other.child(bytes("Demo.app"), of: .root) == .foreign)
        #expect(other.location(of: path("Documents/Inbox/x")) == .inside(.inbox))
    }
}
