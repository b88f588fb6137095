/// A count with its noun, for every line a command prints: `1 entry`, `2 entries`,
/// `0 files`, `1 byte`. The singular is for exactly one, as in English; the plural is
/// the singular with `s` unless given (`counted(n, "entry", "entries")`). The one
/// helper for this: a fixed plural after a count ("1 entries") reads as a bug.
public func counted<Count: BinaryInteger>(_ count: Count, _ singular: String, _ plural: String? = nil) -> String {
    "\(count) \(count == 1 ? singular : plural ?? singular + "s")"
}
