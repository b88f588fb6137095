import Glibc

/// The names in a directory, read through a descriptor so no path is resolved.
public enum Directory {
    /// Every entry of the directory open at `fd` except `.` and `..`, with its type (`DT_*`).
    public static func entries(of fd: Int32) throws(Errno) -> [(name: [UInt8], type: UInt8)] {
        let own = try sys { openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
        guard let stream = fdopendir(own) else {
            let error = Errno.current
            close(own)
            throw error
        }
        defer { closedir(stream) }
        var result: [(name: [UInt8], type: UInt8)] = []
        while let entry = readdir(stream) {
            let name = entryName(entry)
            if name == [0x2E] || name == [0x2E, 0x2E] { continue }
            result.append((name, entry.pointee.d_type))
        }
        return result
    }

    /// A `dirent`'s name as bytes (`d_name` imports as a 256-element tuple).
    public static func entryName(_ entry: UnsafePointer<dirent>) -> [UInt8] {
        withUnsafeBytes(of: entry.pointee.d_name) { raw in
            let bytes = raw.bindMemory(to: UInt8.self)
            return Array(bytes.prefix { $0 != 0 })
        }
    }
}
