import Foundation
import Glibc

/// The kernel's table of mounts, as `/proc/self/mountinfo` shows it.
public struct MountEntry: Sendable, Equatable {
    /// The mount point.
    public let mountpoint: String
    /// The filesystem type, as `fuse.containerfs`.
    public let type: String
    /// The source: for a container, its store's absolute path.
    public let source: String

    /// Whether a containerfs daemon serves (or served) this mount.
    public var isContainer: Bool { type == "fuse.containerfs" }

    /// The mounts now, parsed from `/proc/self/mountinfo`.
    public static func all() -> [MountEntry] {
        // Read to the end: /proc files report size 0, and Foundation's file reading stops
        // after the first page, losing mounts when there are many.
        guard let bytes = try? readFile(at: AT_FDCWD, Array("/proc/self/mountinfo".utf8)) else { return [] }
        return String(decoding: bytes, as: UTF8.self).split(separator: "\n").compactMap { parse(String($0)) }
    }

    /// One mountinfo line: `id parent major:minor root MOUNTPOINT options… - TYPE SOURCE superoptions`.
    static func parse(_ line: String) -> MountEntry? {
        let halves = line.components(separatedBy: " - ")
        guard halves.count >= 2 else { return nil }
        let left = halves[0].split(separator: " ")
        let right = halves[1].split(separator: " ")
        guard left.count >= 5, right.count >= 2 else { return nil }
        return MountEntry(mountpoint: unescape(String(left[4])), type: String(right[0]), source: unescape(String(right[1])))
    }

    /// mountinfo writes space, tab, newline and backslash as octal escapes (`\040`).
    static func unescape(_ field: String) -> String {
        var bytes: [UInt8] = []
        var input = Array(field.utf8)[...]
        while let byte = input.first {
            if byte == UInt8(ascii: "\\"), input.count >= 4,
               let value = UInt8(String(decoding: input.dropFirst().prefix(3), as: UTF8.self), radix: 8) {
                bytes.append(value)
                input = input.dropFirst(4)
            } else {
                bytes.append(byte)
                input = input.dropFirst()
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The mount at `path`, if there is one. Only the parent is resolved: the mount
    /// point itself may belong to a dead daemon, and then it cannot be stat'ed.
    public static func at(_ path: String) -> MountEntry? {
        let resolved = absolute(path)
        return all().last { $0.mountpoint == resolved }
    }

    /// `path` made absolute with its parent's symlinks resolved.
    public static func absolute(_ path: String) -> String {
        let url = URL(fileURLWithPath: path).standardizedFileURL
        let parent = url.deletingLastPathComponent().path
        guard let real = realpath(parent, nil) else { return url.path }
        defer { free(real) }
        let base = String(cString: real)
        return (base == "/" ? "" : base) + "/" + url.lastPathComponent
    }
}
