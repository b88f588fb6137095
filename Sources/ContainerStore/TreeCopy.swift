import CLinux
import ContainerPolicy
import Glibc

/// Copies a directory tree between descriptors, following no symlink, keeping times,
/// symlink targets and modes as `HandedOverMode` allows. Used to install a bundle, to
/// deliver and by file sharing.
///
/// Every file is opened as `openRegularFile` opens it: a FIFO or device swapped in after
/// its type was looked at is refused, never waited on or read.
enum TreeCopy {
    /// What a copy takes from the source tree.
    enum Selection {
        /// Every file, folder and symlink; a special file (FIFO, socket, device) is refused
        /// with a line naming `what` holds it ("bundle Demo.app").
        case everything(what: String)
        /// What file sharing shows (`FileSharing.list`): files and folders whose names do
        /// not start with `.`; the rest (hidden names, symlinks, special files) is left out
        /// and counted.
        case shown
    }

    /// Copies the directory open at `sourceFD` to a new directory `name` in `parentFD`;
    /// returns how many entries `selection` left out. `owner`: the ids every copy is given
    /// (root handing files to a store's owner), else they stay the copier's; a file or
    /// folder that owner could not read is refused (`EACCES`: `Owner.mayRead`).
    ///
    /// Iterative, on two `FolderChain`s: a chain of folders of any depth neither overflows
    /// the thread's stack nor runs out of descriptors.
    @discardableResult
    static func copyDirectory(from sourceFD: Int32, toNew name: [UInt8], in parentFD: Int32, _ selection: Selection,
                              owner: Owner? = nil, relative: ContainerPath = .root) throws -> Int {
        var info = stat()
        var leftOut = 0
        try sys { fstat(sourceFD, &info) }
        if let owner, !owner.mayRead(info) { throw Errno(EACCES) }
        try withCName(name) { (cname) throws(Errno) in _ = try sys { mkdirat(parentFD, cname, 0o700) } }
        let targetFD = try withCName(name) { (cname) throws(Errno) in
            try sys { openat(parentFD, cname, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
        }
        defer { close(targetFD) }
        let sources = try FolderChain(top: sourceFD)
        let targets = try FolderChain(top: targetFD)
        // Each level: the source folder (its mode and times go on the copy once it is full),
        // and the names still to copy. `components` names the level for messages.
        var levels: [(info: stat, names: [[UInt8]])] = [(info, try Directory.entries(of: sourceFD).map(\.name))]
        var components = relative.components
        // The top level is popped in place, never through a copy of it (`levels.last`
        // would share its names, and each removal would copy them: quadratic in a folder).
        while !levels.isEmpty {
            guard let entry = levels[levels.count - 1].names.popLast() else {
                let folder = levels.removeLast().info
                if let owner { try sys { fchown(targets.fd, owner.uid, owner.gid) } }
                try sys { fchmod(targets.fd, HandedOverMode.folder(folder.st_mode)) }
                var times = [folder.st_atim, folder.st_mtim]
                try sys { futimens(targets.fd, &times) }
                if levels.isEmpty { break }
                try sources.leave()
                try targets.leave()
                components.removeLast()
                continue
            }
            try withCName(entry) { (cname) throws(Errno) in _ = try sys { fstatat(sources.fd, cname, &info, AT_SYMLINK_NOFOLLOW) } }
            if case .shown = selection {
                let type = info.st_mode & S_IFMT
                guard entry.first != UInt8(ascii: "."), type == S_IFREG || type == S_IFDIR else {
                    leftOut += 1
                    continue
                }
            }
            switch info.st_mode & S_IFMT {
            case S_IFDIR:
                if let owner, !owner.mayRead(info) { throw Errno(EACCES) }
                try withCName(entry) { (cname) throws(Errno) in _ = try sys { mkdirat(targets.fd, cname, 0o700) } }
                try sources.enter(entry)
                try targets.enter(entry)
                components.append(entry)
                levels.append((info, try Directory.entries(of: sources.fd).map(\.name)))
            case S_IFREG:
                let input = try openRegularFile(at: sources.fd, entry)
                defer { close(input) }
                try copyFile(from: input, toNew: entry, in: targets.fd, owner: owner)
            case S_IFLNK:
                let target = try readLink(at: sources.fd, entry)
                try withCName(target) { (ctarget) throws(Errno) in
                    try withCName(entry) { (cname) throws(Errno) in _ = try sys { symlinkat(ctarget, targets.fd, cname) } }
                }
                if let owner {
                    try withCName(entry) { (cname) throws(Errno) in _ = try sys { fchownat(targets.fd, cname, owner.uid, owner.gid, AT_SYMLINK_NOFOLLOW) } }
                }
                var times = [info.st_atim, info.st_mtim]
                try withCName(entry) { (cname) throws(Errno) in _ = try sys { utimensat(targets.fd, cname, &times, AT_SYMLINK_NOFOLLOW) } }
            default:
                let at = ContainerPath(components: components + [entry])
                let what = if case .everything(let what) = selection { what } else { "the folder" }
                throw UserError("\(what) contains a special file (FIFO, socket or device) at \(at): remove it; only files, folders and symlinks are copied")
            }
        }
        return leftOut
    }

    /// Copies the file open at `input` (a regular file, else `EINVAL`) to a new file `name`
    /// in `targetDir`, with its times and its mode as `HandedOverMode` allows, owned by
    /// `owner` if given, which must be able to read it (else `EACCES`: `Owner.mayRead`).
    static func copyFile(from input: Int32, toNew name: [UInt8], in targetDir: Int32, owner: Owner? = nil) throws(Errno) {
        var info = stat()
        try sys { fstat(input, &info) }
        guard info.st_mode & S_IFMT == S_IFREG else { throw Errno(EINVAL) }
        if let owner, !owner.mayRead(info) { throw Errno(EACCES) }
        let output = try withCName(name) { (cname) throws(Errno) in
            try sys { openat(targetDir, cname, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600) }
        }
        defer { close(output) }
        try copyContents(from: input, to: output)
        // Before the mode: a chown clears set-ID bits (HandedOverMode drops them anyway).
        if let owner { try sys { fchown(output, owner.uid, owner.gid) } }
        try sys { fchmod(output, HandedOverMode.file(info.st_mode)) }
        var times = [info.st_atim, info.st_mtim]
        try sys { futimens(output, &times) }
    }

    /// Copies all of `input` to `output`, in the kernel where it can. A sparse file (fewer
    /// blocks than its size) is copied by its data only, its holes kept, as `cp` does: read
    /// whole, a file of a terabyte with two blocks in it (which an app makes within any
    /// capacity) would write a terabyte of zeros onto the disk it is copied to.
    static func copyContents(from input: Int32, to output: Int32) throws(Errno) {
        var info = stat()
        if fstat(input, &info) == 0, info.st_mode & S_IFMT == S_IFREG, Int64(info.st_blocks) * 512 < Int64(info.st_size),
           try copyData(from: input, to: output, size: Int64(info.st_size)) {
            return
        }
        while true {
            let copied = clinux_copy_file_range(input, nil, output, nil, 1 << 30, 0)
            if copied == 0 { return }
            if copied > 0 { continue }
            if errno == EINTR { continue }
            if errno == EXDEV || errno == ENOSYS || errno == EINVAL { break }
            throw Errno.current
        }
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        while true {
            let count = try sys { buffer.withUnsafeMutableBytes { read(input, $0.baseAddress, $0.count) } }
            if count == 0 { return }
            var written = 0
            while written < count {
                let offset = written
                written += try sys { buffer.withUnsafeBytes { write(output, $0.baseAddress! + offset, count - offset) } }
            }
        }
    }
}

extension TreeCopy {
    /// Copies the data of `input`, `size` bytes long, found by `SEEK_DATA`/`SEEK_HOLE`, to
    /// the same offsets of the empty `output`, then gives it that size: its holes stay holes.
    /// False, with nothing written, when the file system cannot tell where the data is.
    static func copyData(from input: Int32, to output: Int32, size: Int64) throws(Errno) -> Bool {
        var position: Int64 = 0
        while position < size {
            let data = lseek(input, off_t(position), clinux_SEEK_DATA)
            if data < 0 {
                if errno == ENXIO { break }   // only a hole is left
                if position == 0, errno == EINVAL { return false }
                throw Errno.current
            }
            let hole = try sys { lseek(input, data, clinux_SEEK_HOLE) }
            let end = min(size, Int64(hole))
            guard Int64(data) < end else { break }   // shorter than it was
            try copyRange(from: input, to: output, Int64(data) ..< end)
            position = end
        }
        try sys { ftruncate(output, off_t(size)) }
        return true
    }

    /// Copies `range` of `input` to the same offsets of `output`, in the kernel where it can.
    private static func copyRange(from input: Int32, to output: Int32, _ range: Range<Int64>) throws(Errno) {
        var inOffset = off_t(range.lowerBound), outOffset = off_t(range.lowerBound)
        while Int64(inOffset) < range.upperBound {
            let copied = clinux_copy_file_range(input, &inOffset, output, &outOffset, Int(min(range.upperBound - Int64(inOffset), 1 << 30)), 0)
            if copied > 0 { continue }
            if copied == 0 { return }   // the file got shorter
            if errno == EINTR { continue }
            guard errno == EXDEV || errno == ENOSYS || errno == EINVAL else { throw Errno.current }
            break
        }
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        while Int64(inOffset) < range.upperBound {
            let wanted = Int(min(Int64(buffer.count), range.upperBound - Int64(inOffset)))
            let count = try sys { buffer.withUnsafeMutableBytes { pread(input, $0.baseAddress, wanted, inOffset) } }
            if count == 0 { return }
            var written = 0
            while written < count {
                let offset = written
                written += try sys { buffer.withUnsafeBytes { pwrite(output, $0.baseAddress! + offset, count - offset, inOffset + off_t(offset)) } }
            }
            inOffset += off_t(count)
        }
    }
}

/// The target of the symlink `name` inside `parent`, as bytes.
public func readLink(at parent: Int32, _ name: [UInt8]) throws(Errno) -> [UInt8] {
    var buffer = [UInt8](repeating: 0, count: Int(PATH_MAX) + 1)
    let count = try withCName(name) { (cname) throws(Errno) in
        try sys { buffer.withUnsafeMutableBytes { readlinkat(parent, cname, $0.baseAddress!.assumingMemoryBound(to: CChar.self), $0.count) } }
    }
    return Array(buffer[0..<count])
}
