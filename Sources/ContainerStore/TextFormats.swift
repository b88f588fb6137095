/// `12.0 KiB`, `3.4 GiB`; plain bytes below 1 KiB.
public func humanBytes(_ bytes: Int64) -> String {
    if bytes < 1024 { return "\(bytes) B" }
    var value = Double(bytes)
    for unit in ["KiB", "MiB", "GiB", "TiB"] {
        value /= 1024
        if value < 1024 || unit == "TiB" {
            let tenths = Int((value * 10).rounded())
            return "\(tenths / 10).\(tenths % 10) \(unit)"
        }
    }
    return "\(bytes) B"
}

/// `text` as a JSON string literal: quotes, backslashes and every control character escaped.
public func jsonString(_ text: String) -> String {
    var out = "\""
    for scalar in text.unicodeScalars {
        switch scalar {
        case "\"": out += "\\\""
        case "\\": out += "\\\\"
        case "\n": out += "\\n"
        case "\t": out += "\\t"
        case "\r": out += "\\r"
        default:
            if scalar.value < 0x20 || scalar.value == 0x7F {
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
    }
    return out + "\""
}
