import Glibc

/// Minimal unbuffered output to the standard streams.
public enum FileHandleOutput {
    case standardOutput, standardError

    /// Writes all of `text`, retrying on EINTR; stops at any other error.
    public func write(_ text: String) {
        let fd: Int32 = self == .standardOutput ? 1 : 2
        var bytes = Array(text.utf8)[...]
        while !bytes.isEmpty {
            let written = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            if written < 0 { if errno == EINTR { continue } else { return } }
            bytes = bytes.dropFirst(written)
        }
    }
}
