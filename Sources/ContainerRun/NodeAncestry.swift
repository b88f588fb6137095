import CLinux
import ContainerPolicy
import ContainerStore
import Glibc

/// Where a node lies among folders and mounts, told from descriptors: by device and inode
/// and by mount ID, never by comparing path text (a bind mount shows one folder at two
/// paths; paths are bytes). What `--grant` checks (Grant.swift).
enum NodeAncestry {
    /// A file or folder: its device and inode.
    struct Node: Equatable {
        let device: UInt64
        let inode: UInt64
    }

    static func node(_ fd: Int32) -> Node? {
        var info = stat()
        guard fstat(fd, &info) == 0 else { return nil }
        return Node(device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
    }

    /// One line of /proc/self/mountinfo.
    struct Mount {
        let id: Int
        let parent: Int
        /// `major:minor` of the file system.
        let device: [UInt8]
        /// The folder of the file system the mount shows (not `/` for a bind of a subfolder).
        let root: [UInt8]
        let mountpoint: [UInt8]
    }

    /// This process's mounts; empty if /proc/self/mountinfo cannot be read.
    static func mounts() -> [Mount] {
        let fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return [] }
        defer { close(fd) }
        var text: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0, errno == EINTR { continue }
            if count <= 0 { break }
            text += buffer[0..<count]
        }
        return text.split(separator: UInt8(ascii: "\n")).compactMap { line in
            let fields = line.split(separator: UInt8(ascii: " "), omittingEmptySubsequences: false)
            guard fields.count > 4, let id = Int(String(decoding: fields[0], as: UTF8.self)),
                  let parent = Int(String(decoding: fields[1], as: UTF8.self)) else { return nil }
            return Mount(id: id, parent: parent, device: Array(fields[2]), root: unescaped(fields[3]), mountpoint: unescaped(fields[4]))
        }
    }

    /// A mountinfo field with its `\ooo` escapes (space, tab, newline, backslash) decoded.
    static func unescaped(_ field: ArraySlice<UInt8>) -> [UInt8] {
        var bytes: [UInt8] = []
        var index = field.startIndex
        while index < field.endIndex {
            let digits = field[index...].dropFirst().prefix(3)
            if field[index] == UInt8(ascii: "\\"), digits.count == 3, digits.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "7")).contains($0) }) {
                let value = digits.reduce(0) { $0 * 8 + Int($1 - UInt8(ascii: "0")) }
                bytes.append(UInt8(truncatingIfNeeded: value))
                index += 4
            } else {
                bytes.append(field[index])
                index += 1
            }
        }
        return bytes
    }

    /// The ID of the mount `fd` lies on, from /proc/self/fdinfo.
    static func mountID(_ fd: Int32) -> Int? {
        let info = open("/proc/self/fdinfo/\(fd)", O_RDONLY | O_CLOEXEC)
        guard info >= 0 else { return nil }
        defer { close(info) }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = buffer.withUnsafeMutableBytes { read(info, $0.baseAddress, $0.count) }
        guard count > 0 else { return nil }
        for line in buffer[0..<count].split(separator: UInt8(ascii: "\n")) where line.starts(with: Array("mnt_id:".utf8)) {
            return Int(String(decoding: line.dropFirst(7), as: UTF8.self).trimmingCharacters(in: .whitespaces))
        }
        return nil
    }

    /// Opens the absolute path `path` from `/`, following no symlink; -1 if it cannot.
    static func openPath(_ path: [UInt8], flags: Int32 = O_DIRECTORY) -> Int32 {
        let root = open("/", clinux_O_PATH | O_DIRECTORY | O_CLOEXEC)
        guard root >= 0 else { return -1 }
        let relative = Array(path.drop { $0 == UInt8(ascii: "/") })
        if relative.isEmpty { return root }
        defer { close(root) }
        return withCName(relative) { clinux_open_beneath(root, $0, clinux_O_PATH | flags | O_CLOEXEC, 0) }
    }

    /// Whether `target` is the folder `start` (a folder's descriptor, taken over and closed)
    /// or one above it, walking up by `..` to this process's root. Where `..` would leave a
    /// bind mount of a subfolder, the walk goes on in the file system itself, through a
    /// mount of its whole (root `/`), so a folder bound elsewhere is still inside its parents.
    static func isAtOrAbove(_ target: Node, _ start: Int32, mounts: [Mount]) -> Bool {
        let rootFD = open("/", clinux_O_PATH | O_DIRECTORY | O_CLOEXEC)
        guard rootFD >= 0 else {
            close(start)
            return false
        }
        let root = node(rootFD)
        close(rootFD)
        var current = start
        defer { close(current) }
        for _ in 0..<4096 {
            guard let here = node(current) else { return false }
            if here == target { return true }
            if here == root { return false }
            var next = openat(current, "..", clinux_O_PATH | O_DIRECTORY | O_CLOEXEC)
            guard next >= 0 else { return false }
            if let id = mountID(current), mountID(next) != id, let mount = mounts.first(where: { $0.id == id }), mount.root != [UInt8(ascii: "/")],
               let whole = mounts.first(where: { $0.device == mount.device && $0.root == [UInt8(ascii: "/")] }) {
                // `current` is the root of a bind of `mount.root`: the same folder in a mount of the whole file system.
                let same = openPath(whole.mountpoint + mount.root)
                if same >= 0, node(same) == here {
                    close(next)
                    next = openat(same, "..", clinux_O_PATH | O_DIRECTORY | O_CLOEXEC)
                    guard next >= 0 else {
                        close(same)
                        return false
                    }
                }
                if same >= 0 { close(same) }
            }
            close(current)
            current = next
        }
        return false
    }

    /// The mount point of a mount lying beneath the folder `folder` (its descriptor), if
    /// any: a mount on the folder's own mount whose mount point's folder is `folder` or
    /// below it, by device and inode. A bind of `folder` would show it (bubblewrap binds
    /// recursively).
    static func mountBeneath(_ folder: Int32, mounts: [Mount]) -> [UInt8]? {
        guard let id = mountID(folder), let target = node(folder) else { return nil }
        for child in mounts where child.parent == id && child.id != id {
            var parentPath = child.mountpoint
            while let last = parentPath.last, last != UInt8(ascii: "/") { parentPath.removeLast() }
            // The folder holding the mount point: on `folder`'s mount (it is the child's parent).
            var current = openPath(parentPath)
            // Unreachable to this user: unreachable to its program as well.
            guard current >= 0 else { continue }
            var beneath = false
            for _ in 0..<4096 {
                guard mountID(current) == id, let here = node(current) else { break }
                if here == target {
                    beneath = true
                    break
                }
                let next = openat(current, "..", clinux_O_PATH | O_DIRECTORY | O_CLOEXEC)
                guard next >= 0, node(next) != here else {
                    if next >= 0 { close(next) }
                    break
                }
                close(current)
                current = next
            }
            close(current)
            if beneath { return child.mountpoint }
        }
        return nil
    }
}
