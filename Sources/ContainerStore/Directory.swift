import Glibc

/// The names in a directory, read through a descriptor so no path is resolved.
public enum Directory {
    /// Every entry of the directory open at `fd` except `.` and `..`, with its type (`DT_*`).
    public static func entries(of fd: Int32) throws(Errno) -> [(name: [UInt8], type: UInt8)] {
        var result: [(name: [UInt8], type: UInt8)] = []
        try forEachEntry(of: fd) { name, type, _ in result.append((Array(name), type)) }
        return result
    }

    /// Calls `body` with the name (valid only during the call), type (`DT_*`) and inode
    /// number as the directory gives it (`d_ino`) of every entry of the directory open at
    /// `fd` except `.` and `..`; nothing is copied, for a folder read only to be checked.
    public static func forEachEntry(of fd: Int32, _ body: (UnsafeBufferPointer<UInt8>, UInt8, UInt64) -> Void) throws(Errno) {
        let own = try sys { openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
        guard let stream = fdopendir(own) else {
            let error = Errno.current
            close(own)
            throw error
        }
        defer { closedir(stream) }
        while let entry = readdir(stream) {
            let type = entry.pointee.d_type, inode = UInt64(entry.pointee.d_ino)
            withUnsafeBytes(of: &entry.pointee.d_name) { raw in
                let all = raw.bindMemory(to: UInt8.self)
                let name = UnsafeBufferPointer(rebasing: all[..<(all.firstIndex(of: 0) ?? all.endIndex)])
                if name.count == 1 && name[0] == 0x2E || name.count == 2 && name[0] == 0x2E && name[1] == 0x2E { return }
                body(name, type, inode)
            }
        }
    }

    /// The folder holding `path`, as `dirname(1)` gives it: "." for a bare name, "/" for a
    /// name at the root. Worked out on the bytes: Foundation's `deletingLastPathComponent`
    /// trapped on the one-letter store of `containerfs create s`.
    public static func holding(_ path: String) -> String {
        let slash = UInt8(ascii: "/")
        var bytes = Array(path.utf8)
        while bytes.count > 1, bytes.last == slash { bytes.removeLast() }
        guard var end = bytes.lastIndex(of: slash) else { return "." }
        while end > 0, bytes[end - 1] == slash { end -= 1 }
        return end == 0 ? "/" : String(decoding: bytes[..<end], as: UTF8.self)
    }
}
