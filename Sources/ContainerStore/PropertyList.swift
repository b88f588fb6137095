import ContainerPolicy

/// A property list (`Info.plist`) as read by `PropertyList.parse`: XML or binary
/// (`bplist00`), the two forms a bundle ships.
///
/// Foundation's `PropertyListSerialization` parses both on Linux, but crashes (SIGSEGV in
/// its bridging) on some damaged binary lists — a 130-byte one in ContainerStoreTests — and
/// a bundle's `Info.plist` is input from whoever made the app. So this is a small strict
/// parser of its own: every offset and length is checked against the bytes before it is
/// used, nesting is bounded, and the work a binary list can ask for (objects shared by
/// reference) is bounded too; anything it does not understand is an error, never a guess.
public indirect enum PropertyListValue: Equatable, Sendable {
    case bool(Bool)
    case integer(Int64)
    case real(Double)
    case string(String)
    case data([UInt8])
    /// Seconds since 2001-01-01 00:00:00 UTC (binary), or the XML text as written.
    case date(String)
    case array([PropertyListValue])
    case dictionary([String: PropertyListValue])
}

/// Why a property list was refused: what and where, for a one-line message.
public struct PropertyListError: Error, Equatable, CustomStringConvertible, Sendable {
    /// What is wrong, and where.
    public let description: String
    /// Quoted text comes from the list (a key, an entity, an integer's text): control
    /// characters are escaped and a long message is cut, so that it stays one short line.
    init(_ description: String) {
        let line = ContainerPath.printable(Array(description.utf8), escapingControls: true)
        self.description = line.count > Self.lengthLimit ? String(line.prefix(Self.lengthLimit)) + "…" : line
    }

    static let lengthLimit = 300
}

/// The parser: `parse`.
public enum PropertyList {
    /// Deeper nesting than any real Info.plist has.
    static let depthLimit = 64
    /// Objects visited in a binary list, counting each reference: a list whose objects
    /// refer to each other many times over cannot make the parse exponential.
    static let visitLimit = 100_000
    /// Bytes of strings and data a binary list may expand to, counting each reference: one
    /// large object named by thousands of references would otherwise be copied for each
    /// (a 1 MiB list, 100,000 times its data: 100 GB). Far above what any Info.plist holds.
    static let expansionLimit = 16 << 20

    /// Parses `bytes` as a binary list when they start with `bplist00`, else as XML.
    public static func parse(_ bytes: [UInt8]) throws(PropertyListError) -> PropertyListValue {
        if bytes.starts(with: Array("bplist00".utf8)) {
            var reader = try BinaryReader(bytes)
            return try reader.value()
        }
        var reader = XMLReader(bytes)
        return try reader.document()
    }
}

// MARK: Binary

/// `bplist00`: objects addressed through an offset table described by a 32-byte trailer
/// (CFBinaryPList.c's format).
private struct BinaryReader {
    let bytes: [UInt8]
    let offsetSize: Int
    let referenceSize: Int
    let objectCount: Int
    let top: Int
    let tableStart: Int
    var visits = 0
    /// Bytes of strings and data made so far (`PropertyList.expansionLimit`).
    var expanded = 0

    init(_ bytes: [UInt8]) throws(PropertyListError) {
        self.bytes = bytes
        guard bytes.count >= 8 + 1 + 32 else { throw PropertyListError("binary property list too short") }
        let trailer = bytes.count - 32
        offsetSize = Int(bytes[trailer + 6])
        referenceSize = Int(bytes[trailer + 7])
        guard (1...8).contains(offsetSize), (1...8).contains(referenceSize) else {
            throw PropertyListError("binary property list: bad offset or reference size")
        }
        let count = Self.bigEndian(bytes[(trailer + 8)..<(trailer + 16)])
        let topObject = Self.bigEndian(bytes[(trailer + 16)..<(trailer + 24)])
        let table = Self.bigEndian(bytes[(trailer + 24)..<(trailer + 32)])
        // The table lies between the header and the trailer; compared without overflow.
        guard count >= 1, count <= UInt64(trailer), topObject < count, table >= 8, table <= UInt64(trailer),
            count <= (UInt64(trailer) - table) / UInt64(offsetSize)
        else {
            throw PropertyListError("binary property list: bad trailer")
        }
        objectCount = Int(count)
        top = Int(topObject)
        tableStart = Int(table)
    }

    static func bigEndian(_ slice: ArraySlice<UInt8>) -> UInt64 {
        slice.reduce(0) { $0 << 8 | UInt64($1) }
    }

    mutating func value() throws(PropertyListError) -> PropertyListValue {
        try object(top, depth: 0)
    }

    /// Where object `index` starts (before the trailer, after the header).
    private func offset(of index: Int) throws(PropertyListError) -> Int {
        let start = tableStart + index * offsetSize
        let offset = Self.bigEndian(bytes[start..<(start + offsetSize)])
        guard offset >= 8, offset < UInt64(bytes.count - 32) else {
            throw PropertyListError("binary property list: object \(index) out of bounds")
        }
        return Int(offset)
    }

    /// `count` bytes at `start`, if they lie before the trailer.
    private func slice(_ start: Int, _ count: Int) throws(PropertyListError) -> ArraySlice<UInt8> {
        guard start >= 0, count >= 0, start <= bytes.count - 32, count <= bytes.count - 32 - start else {
            throw PropertyListError("binary property list: object runs past the end")
        }
        return bytes[start..<(start + count)]
    }

    /// Counts `count` more bytes of strings or data against `PropertyList.expansionLimit`.
    private mutating func expand(by count: Int) throws(PropertyListError) {
        guard count <= PropertyList.expansionLimit - expanded else {
            throw PropertyListError("binary property list: shared objects expand past \(PropertyList.expansionLimit >> 20) MiB")
        }
        expanded += count
    }

    /// An object's length: the marker's low nibble, or an integer object after it when that is 15.
    /// Returns the length and where the contents start.
    private func length(marker: UInt8, at position: Int) throws(PropertyListError) -> (Int, Int) {
        let low = Int(marker & 0x0F)
        guard low == 0x0F else { return (low, position + 1) }
        let intMarker = try slice(position + 1, 1).first ?? 0
        guard intMarker & 0xF0 == 0x10, intMarker & 0x0F <= 3 else { throw PropertyListError("binary property list: bad length") }
        let size = 1 << Int(intMarker & 0x0F)
        let value = Self.bigEndian(try slice(position + 2, size))
        guard value <= UInt64(bytes.count) else { throw PropertyListError("binary property list: length past the end") }
        return (Int(value), position + 2 + size)
    }

    private mutating func object(_ index: Int, depth: Int) throws(PropertyListError) -> PropertyListValue {
        visits += 1
        guard visits <= PropertyList.visitLimit else { throw PropertyListError("binary property list: too many object references") }
        guard depth <= PropertyList.depthLimit else { throw PropertyListError("property list nested too deeply") }
        guard index < objectCount else { throw PropertyListError("binary property list: reference out of range") }
        let position = try offset(of: index)
        let marker = bytes[position]
        switch marker >> 4 {
        case 0x0:
            switch marker {
            case 0x08: return .bool(false)
            case 0x09: return .bool(true)
            default: throw PropertyListError("binary property list: unsupported object 0x\(String(marker, radix: 16))")
            }
        case 0x1:
            let exponent = Int(marker & 0x0F)
            guard exponent <= 3 else { throw PropertyListError("binary property list: integer too wide") }
            let size = 1 << exponent
            let raw = Self.bigEndian(try slice(position + 1, size))
            // 1, 2 and 4 bytes are unsigned; 8 bytes are two's complement.
            return .integer(size == 8 ? Int64(bitPattern: raw) : Int64(raw))
        case 0x2:
            let exponent = Int(marker & 0x0F)
            guard exponent == 2 || exponent == 3 else { throw PropertyListError("binary property list: bad real") }
            let raw = Self.bigEndian(try slice(position + 1, 1 << exponent))
            return .real(exponent == 2 ? Double(Float(bitPattern: UInt32(truncatingIfNeeded: raw))) : Double(bitPattern: raw))
        case 0x3:
            guard marker == 0x33 else { throw PropertyListError("binary property list: bad date") }
            return .date(String(Double(bitPattern: Self.bigEndian(try slice(position + 1, 8)))))
        case 0x4:
            let (count, start) = try length(marker: marker, at: position)
            let contents = try slice(start, count)
            try expand(by: count)
            return .data(Array(contents))
        case 0x5:
            let (count, start) = try length(marker: marker, at: position)
            let ascii = try slice(start, count)
            try expand(by: count)
            guard ascii.allSatisfy({ $0 < 0x80 }) else {
                throw PropertyListError("binary property list: ASCII string with a byte past 127")
            }
            return .string(String(decoding: ascii, as: UTF8.self))
        case 0x6:
            let (count, start) = try length(marker: marker, at: position)
            guard count <= Int.max / 2 else { throw PropertyListError("binary property list: string too long") }
            let raw = try slice(start, count * 2)
            try expand(by: count * 2)
            var units: [UInt16] = []
            units.reserveCapacity(count)
            var index = raw.startIndex
            while index < raw.endIndex {
                units.append(UInt16(raw[index]) << 8 | UInt16(raw[index + 1]))
                index += 2
            }
            guard let text = String(validating: units, as: UTF16.self) else {
                throw PropertyListError("binary property list: bad UTF-16 string")
            }
            return .string(text)
        case 0xA:
            let (count, start) = try length(marker: marker, at: position)
            guard count <= Int.max / referenceSize else { throw PropertyListError("binary property list: array too long") }
            let references = try slice(start, count * referenceSize)
            var items: [PropertyListValue] = []
            for item in 0..<count {
                let at = references.startIndex + item * referenceSize
                try items.append(object(try reference(references[at..<(at + referenceSize)]), depth: depth + 1))
            }
            return .array(items)
        case 0xD:
            let (count, start) = try length(marker: marker, at: position)
            guard count <= Int.max / (2 * referenceSize) else { throw PropertyListError("binary property list: dictionary too long") }
            let references = try slice(start, count * 2 * referenceSize)
            var entries: [String: PropertyListValue] = [:]
            for item in 0..<count {
                let keyAt = references.startIndex + item * referenceSize
                let valueAt = references.startIndex + (count + item) * referenceSize
                guard case .string(let key) = try object(try reference(references[keyAt..<(keyAt + referenceSize)]), depth: depth + 1)
                else {
                    throw PropertyListError("binary property list: a dictionary key is not a string")
                }
                guard entries[key] == nil else { throw PropertyListError("property list: key \(key) appears twice") }
                entries[key] = try object(try reference(references[valueAt..<(valueAt + referenceSize)]), depth: depth + 1)
            }
            return .dictionary(entries)
        default:
            // Sets (0xC) and UIDs (0x8) belong to archives, not to an Info.plist.
            throw PropertyListError("binary property list: unsupported object 0x\(String(marker, radix: 16))")
        }
    }

    private func reference(_ slice: ArraySlice<UInt8>) throws(PropertyListError) -> Int {
        let value = Self.bigEndian(slice)
        guard value < UInt64(objectCount) else { throw PropertyListError("binary property list: reference out of range") }
        return Int(value)
    }
}

// MARK: XML

/// The XML form: `<?xml …?>`, an optional `<!DOCTYPE plist …>` (without an internal subset:
/// no entity can be declared), comments, one `<plist>` holding one value. Text knows the
/// five predefined entities, character references and CDATA sections.
private struct XMLReader {
    let bytes: [UInt8]
    var position = 0

    init(_ bytes: [UInt8]) {
        self.bytes = bytes
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { position = 3 }
    }

    private func error(_ what: String) -> PropertyListError {
        let line = bytes[..<min(position, bytes.count)].count { $0 == UInt8(ascii: "\n") } + 1
        return PropertyListError("XML property list, line \(line): \(what)")
    }

    private func starts(with text: String) -> Bool {
        bytes[position...].starts(with: Array(text.utf8))
    }

    private mutating func skipSpace() {
        while position < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[position]) { position += 1 }
    }

    /// Moves past the next `terminator`, or fails.
    private mutating func skip(past terminator: String) throws(PropertyListError) {
        let pattern = Array(terminator.utf8)
        while position < bytes.count {
            if bytes[position...].starts(with: pattern) {
                position += pattern.count
                return
            }
            position += 1
        }
        throw error("unterminated construct, \(terminator) expected")
    }

    /// Skips spaces, comments and processing instructions (and, in the prolog, the doctype).
    private mutating func skipMisc(prolog: Bool) throws(PropertyListError) {
        while true {
            skipSpace()
            if starts(with: "<!--") {
                try skip(past: "-->")
            } else if starts(with: "<?") {
                try skip(past: "?>")
            } else if prolog, starts(with: "<!DOCTYPE") {
                let start = position
                try skip(past: ">")
                if bytes[start..<position].contains(UInt8(ascii: "[")) { throw error("a DOCTYPE with an internal subset is not allowed") }
            } else {
                return
            }
        }
    }

    mutating func document() throws(PropertyListError) -> PropertyListValue {
        try skipMisc(prolog: true)
        let (name, empty) = try openTag()
        guard name == "plist", !empty else { throw error("<plist> expected") }
        try skipMisc(prolog: false)
        let value = try self.value(depth: 0)
        try skipMisc(prolog: false)
        try closeTag("plist")
        try skipMisc(prolog: false)
        guard position == bytes.count else { throw error("content after </plist>") }
        return value
    }

    /// `<name attributes…>` or `<name …/>`: the name and whether it was empty.
    private mutating func openTag() throws(PropertyListError) -> (String, Bool) {
        guard position < bytes.count, bytes[position] == UInt8(ascii: "<") else { throw error("an element expected") }
        position += 1
        let start = position
        while position < bytes.count, !([0x20, 0x09, 0x0A, 0x0D, UInt8(ascii: ">"), UInt8(ascii: "/")].contains(bytes[position])) {
            position += 1
        }
        let name = String(decoding: bytes[start..<position], as: UTF8.self)
        guard !name.isEmpty, !name.hasPrefix("/"), !name.hasPrefix("!"), !name.hasPrefix("?") else { throw error("an element expected") }
        // Attributes (plist's version) are skipped, quotes respected.
        var quote: UInt8?
        while position < bytes.count {
            let byte = bytes[position]
            if let open = quote {
                if byte == open { quote = nil }
            } else if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "'") {
                quote = byte
            } else if byte == UInt8(ascii: "<") {
                throw error("< inside a tag")
            } else if byte == UInt8(ascii: ">") {
                position += 1
                return (name, false)
            } else if byte == UInt8(ascii: "/"), position + 1 < bytes.count, bytes[position + 1] == UInt8(ascii: ">") {
                position += 2
                return (name, true)
            }
            position += 1
        }
        throw error("unterminated tag <\(name)")
    }

    private mutating func closeTag(_ name: String) throws(PropertyListError) {
        let tag = "</\(name)"
        guard starts(with: tag) else { throw error("</\(name)> expected") }
        position += tag.utf8.count
        skipSpace()
        guard position < bytes.count, bytes[position] == UInt8(ascii: ">") else { throw error("</\(name)> expected") }
        position += 1
    }

    /// Character data up to the next tag (not a CDATA section), entities decoded.
    private mutating func text() throws(PropertyListError) -> String {
        var out: [UInt8] = []
        while position < bytes.count {
            if starts(with: "<![CDATA[") {
                position += 9
                let start = position
                try skip(past: "]]>")
                out += bytes[start..<(position - 3)]
                continue
            }
            if starts(with: "<!--") {
                try skip(past: "-->")
                continue
            }
            let byte = bytes[position]
            if byte == UInt8(ascii: "<") { break }
            if byte == UInt8(ascii: "&") {
                let start = position + 1
                try skip(past: ";")
                let entity = String(decoding: bytes[start..<(position - 1)], as: UTF8.self)
                switch entity {
                case "lt": out.append(UInt8(ascii: "<"))
                case "gt": out.append(UInt8(ascii: ">"))
                case "amp": out.append(UInt8(ascii: "&"))
                case "quot": out.append(UInt8(ascii: "\""))
                case "apos": out.append(UInt8(ascii: "'"))
                default:
                    let code: UInt32? =
                        entity.hasPrefix("#x")
                        ? UInt32(entity.dropFirst(2), radix: 16)
                        : entity.hasPrefix("#") ? UInt32(entity.dropFirst(), radix: 10) : nil
                    guard let code, code != 0, let scalar = Unicode.Scalar(code) else { throw error("unknown entity &\(entity);") }
                    out += Array(String(Character(scalar)).utf8)
                }
                continue
            }
            out.append(byte)
            position += 1
        }
        guard let text = String(validating: out, as: UTF8.self) else { throw error("text is not UTF-8") }
        return text
    }

    /// The text of a `<name>…</name>` whose opening tag was read (`empty`: `<name/>`).
    private mutating func content(of name: String, empty: Bool) throws(PropertyListError) -> String {
        if empty { return "" }
        let value = try text()
        try closeTag(name)
        return value
    }

    private mutating func value(depth: Int) throws(PropertyListError) -> PropertyListValue {
        guard depth <= PropertyList.depthLimit else { throw error("nested too deeply") }
        let (name, empty) = try openTag()
        switch name {
        case "true", "false":
            guard empty || ((try? closeTag(name)) != nil) else { throw error("<\(name)/> expected") }
            return .bool(name == "true")
        case "string":
            return .string(try content(of: name, empty: empty))
        case "integer":
            let text = try content(of: name, empty: empty).trimmingSpaces
            let value = text.hasPrefix("0x") || text.hasPrefix("0X") ? Int64(text.dropFirst(2), radix: 16) : Int64(text)
            guard let value else { throw error("bad integer \(text)") }
            return .integer(value)
        case "real":
            let text = try content(of: name, empty: empty).trimmingSpaces
            guard let value = Double(text) else { throw error("bad real \(text)") }
            return .real(value)
        case "date":
            return .date(try content(of: name, empty: empty).trimmingSpaces)
        case "data":
            let text = try content(of: name, empty: empty)
            guard let data = Base64.decode(text) else { throw error("bad base64 in <data>") }
            return .data(data)
        case "array":
            var items: [PropertyListValue] = []
            if empty { return .array(items) }
            while true {
                try skipMisc(prolog: false)
                if starts(with: "</") { break }
                items.append(try value(depth: depth + 1))
            }
            try closeTag(name)
            return .array(items)
        case "dict":
            var entries: [String: PropertyListValue] = [:]
            if empty { return .dictionary(entries) }
            while true {
                try skipMisc(prolog: false)
                if starts(with: "</") { break }
                let (keyTag, keyEmpty) = try openTag()
                guard keyTag == "key" else { throw error("<key> expected in <dict>, found <\(keyTag)>") }
                let key = try content(of: "key", empty: keyEmpty)
                try skipMisc(prolog: false)
                guard entries[key] == nil else { throw error("key \(key) appears twice") }
                entries[key] = try value(depth: depth + 1)
            }
            try closeTag(name)
            return .dictionary(entries)
        default:
            throw error("unknown element <\(name)>")
        }
    }
}

private extension String {
    /// Without XML's spaces at either end.
    var trimmingSpaces: String {
        let bytes = Array(utf8)
        let space: (UInt8) -> Bool = { [0x20, 0x09, 0x0A, 0x0D].contains($0) }
        guard let first = bytes.firstIndex(where: { !space($0) }), let last = bytes.lastIndex(where: { !space($0) }) else { return "" }
        return String(decoding: bytes[first...last], as: UTF8.self)
    }
}

/// Base64 as `<data>` holds it: whitespace anywhere, `=` padding at the end.
enum Base64 {
    static func decode(_ text: String) -> [UInt8]? {
        var bits: UInt32 = 0, count = 0
        var out: [UInt8] = []
        var padding = 0
        for byte in text.utf8 {
            let value: UInt32
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"): value = UInt32(byte - UInt8(ascii: "A"))
            case UInt8(ascii: "a")...UInt8(ascii: "z"): value = UInt32(byte - UInt8(ascii: "a")) + 26
            case UInt8(ascii: "0")...UInt8(ascii: "9"): value = UInt32(byte - UInt8(ascii: "0")) + 52
            case UInt8(ascii: "+"): value = 62
            case UInt8(ascii: "/"): value = 63
            case UInt8(ascii: "="):
                padding += 1
                continue
            case 0x20, 0x09, 0x0A, 0x0D: continue
            default: return nil
            }
            guard padding == 0 else { return nil }
            bits = bits << 6 | value
            count += 6
            if count >= 8 {
                count -= 8
                out.append(UInt8(truncatingIfNeeded: bits >> UInt32(count)))
                bits &= (1 << UInt32(count)) - 1
            }
        }
        return padding <= 2 ? out : nil
    }
}
