import ContainerPolicy
import PolicySpec
import Testing

/// Bytes as the kernel might hand them over, and the components they must give.
struct ParseCase: Sendable, CustomTestStringConvertible {
    let input: [UInt8]
    /// `nil` when the path must be refused.
    let components: [[UInt8]]?
    var testDescription: String { "\"\(ContainerPath.printable(input))\"" }

    init(_ input: String, _ components: [String]?) {
        self.init(bytes: bytes(input), components?.map(bytes))
    }

    init(bytes input: [UInt8], _ components: [[UInt8]]?) {
        self.input = input
        self.components = components
    }
}

let parseCases: [ParseCase] = [
    // The root, however spelled.
    .init("", []),
    .init("/", []),
    .init("//", []),
    .init(".", []),
    .init("./", []),
    .init("/././/.", []),
    // Empty and "." components are dropped.
    .init("a", ["a"]),
    .init("/a", ["a"]),
    .init("a/", ["a"]),
    .init("a//b", ["a", "b"]),
    .init("a/./b", ["a", "b"]),
    .init("./a/.", ["a"]),
    .init("Documents/Inbox/report.pdf", ["Documents", "Inbox", "report.pdf"]),
    .init("Library/Application Support", ["Library", "Application Support"]),
    // ".." anywhere refuses the path: the policy never resolves it.
    .init("..", nil),
    .init("/..", nil),
    .init("../a", nil),
    .init("a/..", nil),
    .init("a/../b", nil),
    .init("a/b/..", nil),
    .init("a/./../b", nil),
    .init("a//..//b", nil),
    // Names that merely contain dots are names.
    .init("...", ["..."]),
    .init("..a", ["..a"]),
    .init("a..", ["a.."]),
    .init(".a", [".a"]),
    .init(". ", [". "]),
    .init(".. ", [".. "]),
    .init(".containerfs", [".containerfs"]),
    // Bytes, not text: overlong encodings of "." and "/" are not "." and "/".
    .init(bytes: [0xC0, 0xAE], [[0xC0, 0xAE]]),
    .init(bytes: [0xC0, 0xAE, 0xC0, 0xAE], [[0xC0, 0xAE, 0xC0, 0xAE]]),
    .init(bytes: [0x61, 0xC0, 0xAF, 0x62], [[0x61, 0xC0, 0xAF, 0x62]]),
    .init(bytes: [0xE0, 0x80, 0xAF], [[0xE0, 0x80, 0xAF]]),
    // A "/" byte splits even after a truncated sequence, as the kernel splits it.
    .init(bytes: [0xC3, 0x2F, 0x61], [[0xC3], [0x61]]),
    .init(bytes: [0xFF, 0x2F, 0x2E, 0x2F, 0xFE], [[0xFF], [0xFE]]),
    .init(bytes: [0xFF, 0x2F, 0x2E, 0x2E], nil),
    // Composed and decomposed forms stay as given.
    .init("Cach\u{E9}", ["Cach\u{E9}"]),
    .init(bytes: bytes("Cache") + [0xCC, 0x81], [bytes("Cache") + [0xCC, 0x81]]),
]

/// Bytes and their printable form.
struct PrintableCase: Sendable, CustomTestStringConvertible {
    let input: [UInt8]
    let expected: String
    var testDescription: String { "\(input.map { String($0, radix: 16) }) → \(expected.debugDescription)" }

    init(_ input: String, _ expected: String) {
        self.init(bytes: bytes(input), expected)
    }

    init(bytes input: [UInt8], _ expected: String) {
        self.input = input
        self.expected = expected
    }
}

let printableCases: [PrintableCase] = [
    // Valid UTF-8 as is.
    .init("", ""),
    .init("Documents/Inbox/report.pdf", "Documents/Inbox/report.pdf"),
    .init("Library/Application Support", "Library/Application Support"),
    .init("Cach\u{E9}", "Cach\u{E9}"),
    .init("Cache\u{301}", "Cache\u{301}"),
    .init("\u{20AC}", "\u{20AC}"),  // 3 bytes
    .init("\u{1F4C4}", "\u{1F4C4}"),  // 4 bytes
    .init("\u{10FFFF}", "\u{10FFFF}"),  // the last scalar
    .init("\u{FFFD}", "\u{FFFD}"),  // a real replacement character is kept, not escaped
    .init("\u{7F}", "\u{7F}"),
    .init("tab\there", "tab\there"),
    // A backslash is doubled, so that an escape cannot be forged.
    .init("\\", "\\\\"),
    .init("a\\b", "a\\\\b"),
    .init("\\xff", "\\\\xff"),
    // Any byte that does not start a valid sequence as \xNN, lowercase hex.
    .init(bytes: [0xFF], "\\xff"),
    .init(bytes: [0x61, 0xFF, 0x62], "a\\xffb"),
    .init(bytes: [0x80], "\\x80"),
    .init(bytes: [0xBF], "\\xbf"),
    .init(bytes: [0xC3], "\\xc3"),  // truncated at the end
    .init(bytes: [0xC3, 0x28], "\\xc3("),  // a lead followed by no continuation
    .init(bytes: [0xE2, 0x82], "\\xe2\\x82"),
    .init(bytes: [0xE2, 0x82, 0xAC], "\u{20AC}"),
    .init(bytes: [0xE2, 0x82, 0x41], "\\xe2\\x82A"),
    .init(bytes: [0xC0, 0xAF], "\\xc0\\xaf"),  // overlong "/"
    .init(bytes: [0xC1, 0xBF], "\\xc1\\xbf"),  // overlong, 2 bytes
    .init(bytes: [0xE0, 0x80, 0xAF], "\\xe0\\x80\\xaf"),  // overlong, 3 bytes
    .init(bytes: [0xF0, 0x82, 0x82, 0xAC], "\\xf0\\x82\\x82\\xac"),  // overlong, 4 bytes
    .init(bytes: [0xED, 0xA0, 0x80], "\\xed\\xa0\\x80"),  // a surrogate
    .init(bytes: [0xED, 0x9F, 0xBF], "\u{D7FF}"),  // just below the surrogates
    .init(bytes: [0xF4, 0x90, 0x80, 0x80], "\\xf4\\x90\\x80\\x80"),  // above U+10FFFF
    .init(bytes: [0xF5, 0x80, 0x80, 0x80], "\\xf5\\x80\\x80\\x80"),
    .init(bytes: [0xF8, 0x88, 0x80, 0x80, 0x80], "\\xf8\\x88\\x80\\x80\\x80"),
    .init(bytes: [0xFF, 0x5C], "\\xff\\\\"),
    .init(bytes: [0xC3, 0xA9, 0xA9], "\u{E9}\\xa9"),
    .init(bytes: [0xF0, 0x9F, 0x93], "\\xf0\\x9f\\x93"),  // a 4-byte sequence cut short
]

@Suite("ContainerPath")
struct ContainerPathTests {
    @Test("Parsing bytes", arguments: parseCases)
    func parse(_ cell: ParseCase) {
        let parsed = ContainerPath(bytes: cell.input)
        #expect(parsed?.components == cell.components)
    }

    @Test("Bytes round-trip", arguments: parseCases.filter { $0.components != nil })
    func roundTrip(_ cell: ParseCase) throws {
        let parsed = try #require(ContainerPath(bytes: cell.input))
        #expect(parsed.bytes == Array(cell.components!.joined(separator: [0x2F])))
        #expect(ContainerPath(bytes: parsed.bytes) == parsed)
    }

    @Test("The root is empty")
    func root() {
        #expect(ContainerPath.root.components.isEmpty)
        #expect(ContainerPath.root.bytes.isEmpty)
        #expect(ContainerPath.root.description == "")
        #expect(ContainerPath(bytes: []) == .root)
        #expect(layout.location(of: .root) == .root)
    }

    @Test("Appending a name")
    func appending() {
        let inbox = ContainerPath.root.appending(bytes("Documents")).appending(bytes("Inbox"))
        #expect(inbox == StandardDirectory.inbox.path)
        #expect(inbox.appending([0xFF]).bytes == bytes("Documents/Inbox/") + [0xFF])
    }

    /// The form for people (`description`) escapes what could drive a terminal; the
    /// lossless `printable` keeps it, for logs and JSON.
    @Test func theShownFormEscapesControlsAndBidi() {
        let cases: [(String, String)] = [
            ("plain/name.txt", "plain/name.txt"),
            ("\u{7F}", "\\x7f"),
            ("tab\there\nand", "tab\\x09here\\x0aand"),
            ("\u{1B}]0;title\u{7}", "\\x1b]0;title\\x07"),
            ("csi\u{9B}2J", "csi\\xc2\\x9b2J"),
            ("\u{202E}fdp.exe\u{2028}", "\\u{202E}fdp.exe\\u{2028}"),
            ("back\\slash", "back\\\\slash"),
        ]
        for (input, shown) in cases {
            let path = ContainerPath(components: [Array(input.utf8)])
            #expect(path.description == shown, "\(input.debugDescription)")
        }
        #expect(ContainerPath.printable(Array("a\u{1B}b".utf8)) == "a\u{1B}b", "the lossless form keeps it")
    }

    @Test("Printable form", arguments: printableCases)
    func printable(_ cell: PrintableCase) {
        // Compared as UTF-8 bytes: `String`'s == would take NFC and NFD output as equal.
        #expect(Array(ContainerPath.printable(cell.input).utf8) == Array(cell.expected.utf8))
    }

    @Test("A path's description is its printable form")
    func description() {
        let path = ContainerPath(components: [bytes("Documents"), [0xFF, 0x5C], bytes("Cach\u{E9}")])
        #expect(Array(path.description.utf8) == Array("Documents/\\xff\\\\/Cach\u{E9}".utf8))
        #expect("\(path)" == path.description)
    }

    @Test("The printable form loses nothing: different bytes print differently")
    func printableIsInjective() {
        let samples = printableCases.map(\.input) + [
            bytes("\\x"), [0x5C, 0x78], bytes("\\xff"), bytes("\\\\"), [0x5C, 0x5C, 0x78, 0x66, 0x66],
            bytes("Cache\u{301}"), bytes("Cach\u{E9}"), [0xC3, 0xA9], [0xC3], [0xA9], [0xC3, 0x5C],
        ]
        // Keyed by the printed UTF-8 bytes, as a log holds them: `String` keys would merge
        // the NFC and NFD forms, which print as different bytes.
        var seen: [[UInt8]: [UInt8]] = [:]
        for sample in samples {
            let printed = Array(ContainerPath.printable(sample).utf8)
            if let earlier = seen[printed], earlier != sample {
                Issue.record("\(earlier) and \(sample) both print as \(ContainerPath.printable(printed))")
            }
            seen[printed] = sample
        }
        #expect(seen.count == Set(samples).count)
    }
}

/// `counted`: the one helper every command's line uses for a count and its noun.
@Test(arguments: [(0, "0 files"), (1, "1 file"), (2, "2 files")])
func countedNounsAgreeWithTheirCount(count: Int, expected: String) {
    #expect(counted(count, "file") == expected)
}

@Test func countedTakesAnIrregularPluralAndAnyInteger() {
    #expect(counted(1, "entry", "entries") == "1 entry")
    #expect(counted(3, "entry", "entries") == "3 entries")
    #expect(counted(Int64(1), "byte") == "1 byte")
    #expect(counted(UInt(0), "byte") == "0 bytes")
    #expect(counted(-1, "byte") == "-1 bytes")
}
