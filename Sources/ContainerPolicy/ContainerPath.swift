/// A path inside a container, relative to its root, held as raw bytes.
///
/// Names are bytes, never `String`: a name that is not valid UTF-8, or that differs
/// from another only by Unicode normalization, is a different file.
public struct ContainerPath: Hashable, Sendable, CustomStringConvertible {
    /// The path's components, each a name without `/` and never empty, `.` or `..`.
    public let components: [[UInt8]]

    /// The container's root.
    public static let root = ContainerPath(components: [])

    public init(components: [[UInt8]]) {
        self.components = components
    }

    /// Splits `bytes` at `/`, dropping empty and `.` components; `nil` if any is `..`.
    public init?(bytes: some Sequence<UInt8>) {
        var parts: [[UInt8]] = []
        for part in Array(bytes).split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: true) {
            if part.elementsEqual([UInt8(ascii: ".")]) { continue }
            if part.elementsEqual([UInt8(ascii: "."), UInt8(ascii: ".")]) { return nil }
            parts.append(Array(part))
        }
        self.components = parts
    }

    /// This path with `name` appended.
    public func appending(_ name: [UInt8]) -> ContainerPath {
        ContainerPath(components: components + [name])
    }

    /// The path as bytes, components joined by `/`; the root is empty.
    public var bytes: [UInt8] {
        Array(components.joined(separator: [UInt8(ascii: "/")]))
    }

    /// The form for people: `printable`, with control characters as `\xNN` and bidi and
    /// line separators as `\u{N}`, so that a name someone else chose (a file an app made,
    /// a file handed over) cannot drive the terminal a message names it on.
    public var description: String { Self.printable(bytes, escapingControls: true) }

    /// Renders bytes for logs and JSON without losing information: valid UTF-8 as is, any
    /// other byte as `\xNN`, and `\` as `\\`; with `escapingControls`, as `description`.
    public static func printable(_ bytes: [UInt8], escapingControls: Bool = false) -> String {
        var out = ""
        var index = 0
        while index < bytes.count {
            let length = utf8SequenceLength(bytes, at: index)
            if length == 0 {
                out += "\\x" + hex(bytes[index])
                index += 1
            } else {
                let scalar = String(decoding: bytes[index..<index + length], as: UTF8.self)
                if escapingControls, let first = scalar.unicodeScalars.first, let escaped = escapedControl(first) {
                    out += escaped
                } else {
                    out += scalar == "\\" ? "\\\\" : scalar
                }
                index += length
            }
        }
        return out
    }

    /// How a control character prints (`\xNN` per UTF-8 byte; bidi controls and line
    /// separators `\u{N}`); nil for any other character. Shared with the audit's text view.
    public static func escapedControl(_ scalar: Unicode.Scalar) -> String? {
        switch scalar.value {
        case 0x00..<0x20, 0x7F...0x9F:
            return String(scalar).utf8.map { "\\x" + hex($0) }.joined()
        case 0x200E, 0x200F, 0x2028, 0x2029, 0x202A...0x202E, 0x2066...0x2069:
            return "\\u{" + String(scalar.value, radix: 16, uppercase: true) + "}"
        default:
            return nil
        }
    }

    /// The length of the valid UTF-8 sequence starting at `index`, or 0 if there is none.
    private static func utf8SequenceLength(_ bytes: [UInt8], at index: Int) -> Int {
        let lead = bytes[index]
        let (length, minimum): (Int, UInt32)
        switch lead {
        case 0x00...0x7F: return 1
        case 0xC2...0xDF: (length, minimum) = (2, 0x80)
        case 0xE0...0xEF: (length, minimum) = (3, 0x800)
        case 0xF0...0xF4: (length, minimum) = (4, 0x10000)
        default: return 0
        }
        guard index + length <= bytes.count else { return 0 }
        var scalar = UInt32(lead) & (0xFF >> (length + 1))
        for offset in 1..<length {
            let byte = bytes[index + offset]
            guard byte & 0xC0 == 0x80 else { return 0 }
            scalar = scalar << 6 | UInt32(byte & 0x3F)
        }
        guard scalar >= minimum, scalar <= 0x10FFFF, !(0xD800...0xDFFF).contains(scalar) else { return 0 }
        return length
    }

    private static func hex(_ byte: UInt8) -> String {
        let digits = Array("0123456789abcdef")
        return String([digits[Int(byte >> 4)], digits[Int(byte & 0xF)]])
    }
}

extension Array where Element == UInt8 {
    /// The UTF-8 bytes of a name written in source code.
    @inlinable public init(name: StaticString) {
        self = name.withUTF8Buffer { Array($0) }
    }
}
