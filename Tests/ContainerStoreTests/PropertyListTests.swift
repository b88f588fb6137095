import Foundation
import Testing

@testable import ContainerStore

/// `PropertyList.parse`: the XML and binary `Info.plist` that file sharing reads (issue #30),
/// strictly, and never crashing on damaged input — which Foundation's
/// `PropertyListSerialization` does on Linux (the 130-byte `foundationCrasher` below
/// segfaults it).
@Suite("PropertyList")
struct PropertyListTests {
    static let expected: PropertyListValue = .dictionary([
        "UIFileSharingEnabled": .bool(true), "CFBundleName": .string("Demo"),
        "n": .dictionary(["a": .array([.integer(1), .real(2.5), .string("x"), .string("üé")])]),
        "d": .data([0, 1]), "big": .integer(1 << 40), "neg": .integer(-5), "f": .bool(false),
    ])

    /// Python's plistlib wrote both forms of `expected`.
    static let binary = bytes(hex: "62706c6973743030d70102030405060708090a0b0c0d145c434642756e646c654e616d655f1014554946696c6553686172696e67456e61626c65645362696751645166516e536e65675444656d6f0913000001000000000042000108d10e0f5161a410111213100123400400000000000051786200fc00e913fffffffffffffffb0817243b3f414345494e4f585b5c5f6166687173780000000000000101000000000000001500000000000000000000000000000081")
    static let xml = """
        <?xml version="1.0" encoding="UTF-8"?>
        <!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
        <plist version="1.0">
        <dict>
        \t<key>CFBundleName</key>
        \t<string>Demo</string>
        \t<key>UIFileSharingEnabled</key>
        \t<true/>
        \t<key>big</key>
        \t<integer>1099511627776</integer>
        \t<key>d</key>
        \t<data>
        \tAAE=
        \t</data>
        \t<key>f</key>
        \t<false/>
        \t<key>n</key>
        \t<dict>
        \t\t<key>a</key>
        \t\t<array>
        \t\t\t<integer>1</integer>
        \t\t\t<real>2.5</real>
        \t\t\t<string>x</string>
        \t\t\t<string>üé</string>
        \t\t</array>
        \t</dict>
        \t<key>neg</key>
        \t<integer>-5</integer>
        </dict>
        </plist>

        """
    /// A damaged binary list (a set whose references point into a string) that makes
    /// `PropertyListSerialization.propertyList(from:)` crash with SIGSEGV on Linux.
    static let foundationCrasher = bytes(hex: "62706c6973743030c301020304050b5c434642756e646c654e6c6d65564e65737465645f1014554946696c6553686172696e67456e61626c65645444656d6fd106075161a308090a1001234004000000000000517809080f1c233a3f4244484a53550000000000000101000000000000000c00000000000000000000000000000056")

    static func bytes(hex: String) -> [UInt8] {
        var out: [UInt8] = []
        var index = hex.startIndex
        while index < hex.endIndex {
            let next = hex.index(index, offsetBy: 2)
            out.append(UInt8(hex[index..<next], radix: 16)!)
            index = next
        }
        return out
    }

    @Test func bothFormsGiveTheSameValues() throws {
        #expect(try PropertyList.parse(Self.binary) == Self.expected)
        #expect(try PropertyList.parse(Array(Self.xml.utf8)) == Self.expected)
        #expect(try PropertyList.parse([0xEF, 0xBB, 0xBF] + Array(Self.xml.utf8)) == Self.expected, "a byte order mark")
    }

    @Test func xmlTextKnowsEntitiesCDATAAndComments() throws {
        let text = "<plist><!-- c --><dict><key>a&amp;b</key><string>&lt;&#233;&#x1F600;&quot;<![CDATA[<x>&amp;]]></string><key>e</key><string/></dict></plist>"
        #expect(try PropertyList.parse(Array(text.utf8)) == .dictionary(["a&b": .string("<é😀\"<x>&amp;"), "e": .string("")]))
    }

    @Test(arguments: [
        "<plist><dict><key>a</key><true/><key>a</key><false/></dict></plist>",   // a key twice
        "<plist><dict><true/></dict></plist>",                                    // a value without key
        "<plist><dict><key>a</key><blob/></dict></plist>",                        // unknown element
        "<plist><true/></plist><plist/>",                                          // content after
        "<!DOCTYPE plist [<!ENTITY x \"y\">]><plist><string>&x;</string></plist>", // an internal subset
        "<plist><string>&x;</string></plist>",                                     // unknown entity
        "<plist><integer>12a</integer></plist>",
        "<plist><data>A$A=</data></plist>",
        "<plist><string>open</plist>",
        "<plist><dict><key>a</key>",
        "",
    ])
    func badXMLIsRefused(text: String) {
        #expect(throws: PropertyListError.self) { try PropertyList.parse(Array(text.utf8)) }
    }

    /// Text of the list quoted in an error (an integer's, an entity's, a key) cannot make the
    /// message more than one short line, nor drive the terminal it is printed on.
    @Test func errorsAreOneShortLine() {
        let lists = [
            "<plist><integer>1\n2</integer></plist>",
            "<plist><string>&" + String(repeating: "a", count: 100_000) + ";</string></plist>",
            "<plist><dict><key>\u{1B}]0;owned\u{07}\n</key><true/><key>\u{1B}]0;owned\u{07}\n</key><true/></dict></plist>",
        ]
        for list in lists {
            do {
                _ = try PropertyList.parse(Array(list.utf8))
                Issue.record("parsed: \(list.prefix(60))")
            } catch {
                #expect(!error.description.contains("\n") && !error.description.contains("\u{1B}") && error.description.count <= 301, "\(error.description.prefix(400))")
            }
        }
    }

    @Test func nestingIsBounded() {
        let deep = "<plist>" + String(repeating: "<array>", count: 10_000) + String(repeating: "</array>", count: 10_000) + "</plist>"
        #expect(throws: PropertyListError("XML property list, line 1: nested too deeply")) { try PropertyList.parse(Array(deep.utf8)) }
    }

    /// Objects that refer to each other thousands of times over (a dictionary of 14 keys
    /// each naming the same array of 14 references to the dictionary one level down…) are
    /// refused by the visit limit, not walked for ever.
    @Test func sharedReferencesCannotMakeTheParseExplode() {
        // Object 0: an array of 14 references to object 1; object k: 14 references to k+1; the last: true.
        let levels = 20, width = 14
        var objects: [[UInt8]] = (0..<levels).map { level in [0xA0 | UInt8(width)] + Array(repeating: UInt8(level + 1), count: width) }
        objects.append([0x09])
        var data = Array("bplist00".utf8)
        var offsets: [UInt8] = []
        for object in objects {
            offsets += [UInt8(data.count >> 8), UInt8(data.count & 0xFF)]
            data += object
        }
        let table = data.count
        data += offsets
        data += [0, 0, 0, 0, 0, 0, 2, 1] + be(objects.count) + be(0) + be(table)
        #expect(throws: PropertyListError("binary property list: too many object references")) { try PropertyList.parse(data) }
        func be(_ value: Int) -> [UInt8] { (0..<8).reversed().map { UInt8(truncatingIfNeeded: value >> ($0 * 8)) } }
    }

    /// One 64 KiB data object named 2,000 times by an array: 125 MiB if each reference were
    /// copied (a 1 MiB Info.plist could ask for 100 GB). Refused by the expansion limit; the
    /// same array naming a short string is read.
    @Test func oneLargeObjectNamedThousandsOfTimesIsRefused() throws {
        func list(objectBytes: Int, references: Int) -> [UInt8] {
            let header: [UInt8] = [0xAF, 0x11, UInt8(references >> 8), UInt8(references & 0xFF)]
            let array: [UInt8] = header + Array(repeating: [UInt8]([0, 1]), count: references).flatMap { $0 }
            let object: [UInt8] = [0x4F, 0x12] + Array(be(objectBytes).suffix(4)) + Array(repeating: UInt8(ascii: "x"), count: objectBytes)
            var data = Array("bplist00".utf8)
            let offsets = [data.count, data.count + array.count]
            data += array + object
            let table = data.count
            data += offsets.flatMap { Array(be($0).suffix(4)) }
            data += [0, 0, 0, 0, 0, 0, 4, 2] + be(2) + be(0) + be(table)
            return data
        }
        // Not #expect(throws:): a list parsed in full would be printed, 125 MiB of it.
        let large = Result { () throws(PropertyListError) in try PropertyList.parse(list(objectBytes: 64 << 10, references: 2000)) }
        if case .failure(let error) = large {
            #expect(error == PropertyListError("binary property list: shared objects expand past 16 MiB"))
        } else {
            Issue.record("a list expanding to 125 MiB was parsed")
        }
        let small = try PropertyList.parse(list(objectBytes: 3, references: 2000))
        #expect(small == .array(Array(repeating: .data(Array("xxx".utf8)), count: 2000)))
        func be(_ value: Int) -> [UInt8] { (0..<8).reversed().map { UInt8(truncatingIfNeeded: value >> ($0 * 8)) } }
    }

    /// 50,000 binary lists built at random from whole objects — every marker, lengths long
    /// and short (inline and as an integer object of 1 to 8 bytes), references in and out of
    /// range and back to their own container, offset and reference sizes of 1 to 8 bytes,
    /// trailers that lie: each parses or is refused; none traps or hangs. Seeded.
    @Test func randomlyBuiltBinaryListsNeverTrap() {
        var state: UInt64 = 7
        func next(_ bound: Int) -> Int {
            state = state &* 6364136223846793005 &+ 1442695040888963407
            return Int(truncatingIfNeeded: state >> 33) % bound
        }
        func bigEndian(_ value: Int, _ size: Int) -> [UInt8] { (0..<size).reversed().map { UInt8(truncatingIfNeeded: value >> ($0 * 8)) } }
        var parsed = 0
        for _ in 0..<50_000 {
            let count = 1 + next(12), referenceSize = 1 + next(next(4) == 0 ? 8 : 2), offsetSize = 1 + next(next(4) == 0 ? 8 : 2)
            var objects: [[UInt8]] = []
            for _ in 0..<count {
                let kind = [0x0, 0x1, 0x2, 0x3, 0x4, 0x5, 0x6, 0x8, 0xA, 0xC, 0xD, 0xF][next(12)]
                let length = next(6) == 0 ? [15, 200, 70_000, Int(Int32.max)][next(4)] : next(15)
                var object: [UInt8] = [UInt8(kind << 4 | min(length, 15))]
                if length >= 15 {
                    let width = next(4)
                    object = [UInt8(kind << 4 | 0x0F), UInt8(0x10 | width)] + bigEndian(length, 1 << width)
                }
                let entries = kind == 0xD ? 2 * min(length, 40) : kind == 0xA ? min(length, 40) : min(length, 40) * (kind == 0x6 ? 2 : 1)
                for _ in 0..<entries {
                    object += kind == 0xA || kind == 0xD ? bigEndian(next(count + 2), referenceSize) : [UInt8(next(256))]
                }
                objects.append(object)
            }
            var data = Array("bplist00".utf8)
            var offsets: [UInt8] = []
            for object in objects {
                offsets += bigEndian(next(50) == 0 ? next(1 << 20) : data.count, offsetSize)
                data += object
            }
            let table = next(50) == 0 ? next(data.count + 100) : data.count
            data += offsets
            let claimed = next(50) == 0 ? next(1 << 30) : count
            data += [0, 0, 0, 0, 0, 0, UInt8(offsetSize), UInt8(referenceSize)] + bigEndian(claimed, 8) + bigEndian(next(count + 1), 8) + bigEndian(table, 8)
            if (try? PropertyList.parse(data)) != nil { parsed += 1 }
        }
        #expect(parsed > 1_000, "some of the lists are well formed")
    }

    @Test func theListThatCrashesFoundationIsRefused() {
        #expect(throws: PropertyListError.self) { try PropertyList.parse(Self.foundationCrasher) }
    }

    /// 30,000 damaged copies of the binary list (bytes changed, cut short): each parses or
    /// is refused; none crashes or hangs. A seeded generator: the same copies every run.
    @Test func damagedBinaryListsNeverCrash() {
        var state: UInt64 = 30
        func next() -> Int {
            state = state &* 6364136223846793005 &+ 1442695040888963407
            return Int(truncatingIfNeeded: state >> 33)
        }
        var refused = 0
        for round in 0..<30_000 {
            var copy = Self.binary
            for _ in 0..<(1 + next() % 6) { copy[8 + next() % (copy.count - 8)] = UInt8(truncatingIfNeeded: next()) }
            if round % 3 == 0 { copy = Array(copy.prefix(8 + next() % (copy.count - 8))) }
            if (try? PropertyList.parse(copy)) == nil { refused += 1 }
        }
        #expect(refused > 10_000, "most damaged copies are refused")
    }
}
