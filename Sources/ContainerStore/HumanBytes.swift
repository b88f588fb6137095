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
