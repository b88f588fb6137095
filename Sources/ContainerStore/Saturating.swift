import Glibc

// Arithmetic on values from outside the process (a store file's size or times, an index,
// an archive, the command line): it saturates at the ends of the range instead of
// trapping, so a planted value can make a figure wrong but never stop the process.

extension Int64 {
    /// `self + other`, held at `Int64.max` or `Int64.min` instead of overflowing.
    public func addingSaturated(_ other: Int64) -> Int64 {
        let (sum, overflow) = addingReportingOverflow(other)
        return overflow ? (other > 0 ? .max : .min) : sum
    }

    /// `self - other`, held at `Int64.max` or `Int64.min` instead of overflowing.
    public func subtractingSaturated(_ other: Int64) -> Int64 {
        let (difference, overflow) = subtractingReportingOverflow(other)
        return overflow ? (other < 0 ? .max : .min) : difference
    }

    /// `self × other`, held at `Int64.max` or `Int64.min` instead of overflowing.
    public func multipliedSaturated(by other: Int64) -> Int64 {
        let (product, overflow) = multipliedReportingOverflow(by: other)
        return overflow ? ((self < 0) == (other < 0) ? .max : .min) : product
    }

    /// Nanoseconds since the epoch of `time` (a `stat` time or one the kernel sent), held
    /// at the ends of the range: 2^63 ns is the year 2262, and a file may say 2300.
    public init(saturatingNanoseconds time: timespec) {
        self = Int64(time.tv_sec).multipliedSaturated(by: 1_000_000_000).addingSaturated(Int64(time.tv_nsec))
    }

    /// `seconds` in nanoseconds, held at the ends of the range (0 for NaN).
    public init(saturatingNanosecondsOf seconds: Double) {
        let nanoseconds = seconds * 1e9
        if nanoseconds.isNaN {
            self = 0
        } else if nanoseconds >= 0x1p63 {
            self = .max
        } else if nanoseconds < -0x1p63 {
            self = .min
        } else {
            self = Int64(nanoseconds)
        }
    }
}

extension Sequence {
    /// The sum of `value` over the elements, held at the ends of the range.
    public func saturatedSum(_ value: (Element) -> Int64) -> Int64 {
        reduce(0) { $0.addingSaturated(value($1)) }
    }
}
