import Glibc

/// An errno value, thrown by every call that touches the store.
public struct Errno: Error, Hashable, Sendable, CustomStringConvertible {
    /// The raw errno code, as `EPERM`.
    public let code: Int32

    public init(_ code: Int32) {
        self.code = code
    }

    /// The calling thread's current errno.
    public static var current: Errno { Errno(errno) }

    /// The C library's message for this errno.
    public var description: String { String(cString: strerror(code)) }
}

/// Runs a system call, retrying on `EINTR`, and throws its errno when it returns -1.
/// The one place that reads `errno` after a call (swift-system's `valueOrErrno`).
@inline(__always) @discardableResult
public func sys<Result: FixedWidthInteger>(_ call: () -> Result) throws(Errno) -> Result {
    while true {
        let result = call()
        if result != -1 { return result }
        let error = errno
        if error != EINTR {
            // EBADF and EFAULT mean we passed a closed descriptor or a bad pointer: our bug.
            assert(error != EBADF && error != EFAULT, "store call failed with \(Errno(error))")
            throw Errno(error)
        }
    }
}

/// `name` as a NUL-terminated C string for the duration of `body`; names are bytes.
@inline(__always)
public func withCName<R, E: Error>(_ name: [UInt8], _ body: (UnsafePointer<CChar>) throws(E) -> R) throws(E) -> R {
    var bytes = name
    bytes.append(0)
    return try bytes.withUnsafeBufferPointer { (buffer) throws(E) -> R in
        try buffer.withMemoryRebound(to: CChar.self) { (chars) throws(E) -> R in try body(chars.baseAddress!) }
    }
}
