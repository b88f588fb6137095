import CFuse
import CLinux
import ContainerStore
import Glibc

// Every @convention(c) callback, in one file. Each decodes its arguments, calls the
// handler named after its system call, and replies; `respond` is the one place where
// a thrown errno becomes libfuse's error reply.

/// The filesystem a request belongs to.
@inline(__always)
private func fileSystem(_ request: fuse_req_t?) -> FileSystem {
    Unmanaged<FileSystem>.fromOpaque(fuse_req_userdata(request)!).takeUnretainedValue()
}

@inline(__always)
private func caller(_ request: fuse_req_t?) -> Caller {
    let context = fuse_req_ctx(request)!.pointee
    let ids = fileSystem(request).ownerMapping?.recorded(uid: context.uid, gid: context.gid) ?? (uid: context.uid, gid: context.gid)
    return Caller(uid: ids.uid, gid: ids.gid, kernelUID: context.uid, pid: context.pid, umask: context.umask, request: request)
}

extension Caller {
    /// Whether the caller has `group` among its supplementary groups. Slow (libfuse reads
    /// the caller's /proc status): for rare paths only.
    func isMember(of group: gid_t) -> Bool {
        var groups = [gid_t](repeating: 0, count: 64)
        var count = Int(fuse_req_getgroups(request, Int32(groups.count), &groups))
        if count > groups.count {
            // More than there was room for: the count is how many the caller has.
            groups = [gid_t](repeating: 0, count: count)
            count = Int(fuse_req_getgroups(request, Int32(clamping: groups.count), &groups))
        }
        return count > 0 && groups.prefix(min(count, groups.count)).contains(group)
    }
}

/// Runs `body`, which replies on success; replies with the errno it throws otherwise.
@inline(__always)
private func respond(_ request: fuse_req_t?, _ body: () throws(Errno) -> Void) {
    do throws(Errno) {
        try body()
    } catch {
        fuse_reply_err(request, error.code)
    }
}

/// `respond` for a request that may change the space a container with a capacity uses:
/// a recount waits for it, and it for a recount.
@inline(__always)
private func respondChanging(_ request: fuse_req_t?, _ body: () throws(Errno) -> Void) {
    fileSystem(request).countingChange { respond(request, body) }
}

@inline(__always)
private func replyEntry(_ request: fuse_req_t?, _ entry: fuse_entry_param) {
    var entry = entry
    entry.attr = fileSystem(request).shown(entry.attr)
    fuse_reply_entry(request, &entry)
}

@inline(__always)
private func replyAttributes(_ request: fuse_req_t?, _ info: stat, _ fs: FileSystem) {
    var info = fs.shown(info)
    fuse_reply_attr(request, &info, fs.timeouts.attributes)
}

@inline(__always)
private func handle(_ info: UnsafeMutablePointer<fuse_file_info>?) -> Int32 {
    Int32(truncatingIfNeeded: info!.pointee.fh)
}

/// An open file's flags: passed through, the store's own page cache serves it (and
/// O_DIRECT reaches the store); otherwise direct I/O bypasses the page cache, and the cache
/// is kept across opens. No FLUSH on close either way: writes reach the store as they
/// come, and locks are the kernel's.
/// Returns the backing ID to reply with (0: not passed through). The handle records the
/// path taken (`DataProtection.passthroughBit`, `cachedBit`) for its release.
private func setHandle(_ info: UnsafeMutablePointer<fuse_file_info>?, _ fd: Int32, _ path: OpenPath, directIO: Bool) -> Int32 {
    info!.pointee.fh = UInt64(UInt32(bitPattern: fd))
    switch path {
    case .passthrough(let backing):
        info!.pointee.fh |= DataProtection.passthroughBit
        cfuse_set_open_flags(info, false, false, true, false)
        return backing
    case .cached:
        info!.pointee.fh |= DataProtection.cachedBit
        cfuse_set_open_flags(info, directIO, !directIO, true, false)
        return 0
    case .direct:
        cfuse_set_open_flags(info, directIO, !directIO, true, false)
        return 0
    }
}

/// Marks an open file of class `complete` guarded: its reads and writes reach the daemon
/// and are checked against the device state (SPEC §11, `DataProtection`).
private func markGuarded(_ info: UnsafeMutablePointer<fuse_file_info>?, _ ino: fuse_ino_t, _ fs: FileSystem) {
    info!.pointee.fh |= DataProtection.guardedBit
    fs.protection.opened(ino)
}

@inline(__always)
private func directory(_ info: UnsafeMutablePointer<fuse_file_info>?) -> DirectoryHandle {
    Unmanaged<DirectoryHandle>.fromOpaque(UnsafeRawPointer(bitPattern: UInt(info!.pointee.fh))!).takeUnretainedValue()
}

/// The low-level operations table handed to libfuse.
func makeOperations() -> fuse_lowlevel_ops {
    var ops = fuse_lowlevel_ops()

    ops.`init` = { userdata, connection in
        let fs = Unmanaged<FileSystem>.fromOpaque(userdata!).takeUnretainedValue()
        fs.configure(connection!)
    }
    ops.lookup = { request, parent, name in
        respond(request) { () throws(Errno) in replyEntry(request, try fileSystem(request).lookup(caller(request), parent: parent, name: name!)) }
    }
    ops.forget = { request, ino, count in
        fileSystem(request).forget(ino, count)
        fuse_reply_none(request)
    }
    ops.forget_multi = { request, count, forgets in
        let fs = fileSystem(request)
        for each in UnsafeBufferPointer(start: forgets, count: count) { fs.forget(each.ino, each.nlookup) }
        fuse_reply_none(request)
    }
    ops.getattr = { request, ino, _ in
        respond(request) { () throws(Errno) in
            let fs = fileSystem(request)
            replyAttributes(request, try fs.getattr(ino), fs)
        }
    }
    ops.setattr = { request, ino, attr, toSet, info in
        respondChanging(request) { () throws(Errno) in
            let fs = fileSystem(request)
            let fh = info.map { Int32(truncatingIfNeeded: $0.pointee.fh) }
            if toSet & FUSE_SET_ATTR_SIZE != 0 {   // SPEC §11: a truncate by name is an open
                if info == nil { _ = try fs.admitOpen(caller(request), ino, "truncate") }
                if DataProtection.isGuarded(info) { try fs.admitGuarded(caller(request), ino, "truncate") }
            }
            var asked = attr!.pointee
            if let mapping = fs.ownerMapping { (asked.st_uid, asked.st_gid) = mapping.recorded(uid: asked.st_uid, gid: asked.st_gid) }
            replyAttributes(request, try fs.setattr(caller(request), ino, asked, toSet, fh), fs)
        }
    }
    ops.readlink = { request, ino in
        respond(request) { () throws(Errno) in
            let target = try fileSystem(request).readlink(ino)
            fuse_reply_readlink(request, target)
        }
    }
    ops.mknod = { request, parent, name, mode, device in
        respondChanging(request) { () throws(Errno) in replyEntry(request, try fileSystem(request).mknod(caller(request), parent, name!, mode, device)) }
    }
    ops.mkdir = { request, parent, name, mode in
        respondChanging(request) { () throws(Errno) in replyEntry(request, try fileSystem(request).mkdir(caller(request), parent, name!, mode)) }
    }
    ops.symlink = { request, target, parent, name in
        respondChanging(request) { () throws(Errno) in replyEntry(request, try fileSystem(request).symlink(caller(request), target!, parent, name!)) }
    }
    ops.link = { request, ino, parent, name in
        respondChanging(request) { () throws(Errno) in replyEntry(request, try fileSystem(request).link(caller(request), ino, parent, name!)) }
    }
    ops.unlink = { request, parent, name in
        respondChanging(request) { () throws(Errno) in
            let released = try fileSystem(request).unlink(caller(request), parent, name!)
            fuse_reply_err(request, 0)
            released.close()   // the blocks are freed after the reply
        }
    }
    ops.rmdir = { request, parent, name in
        respondChanging(request) { () throws(Errno) in
            let released = try fileSystem(request).rmdir(caller(request), parent, name!)
            fuse_reply_err(request, 0)
            released.close()   // the blocks are freed after the reply
        }
    }
    ops.rename = { request, parent, name, newParent, newName, flags in
        respondChanging(request) { () throws(Errno) in
            let released = try fileSystem(request).rename(caller(request), parent, name!, newParent, newName!, flags)
            fuse_reply_err(request, 0)
            released.close()   // the blocks are freed after the reply
        }
    }
    ops.open = { request, ino, info in
        respondChanging(request) { () throws(Errno) in
            let fs = fileSystem(request)
            var guarded = try fs.admitOpen(caller(request), ino, "open")   // SPEC §11
            let (fd, directIO) = try fs.open(caller(request), ino, cfuse_open_flags(info))
            if cfuse_request_kills_suidgid() { fs.dropSetIDBits(caller(request), ino) }   // a truncating open
            let direct = directIO || guarded && fs.writeback
            let path = fs.openPath(ino, guarded: &guarded, directIO: direct)
            let backing = setHandle(info, fd, path, directIO: direct)
            if guarded { markGuarded(info, ino, fs) }
            fs.countOpened(ino, fd)
            if cfuse_reply_open_backed(request, info, backing) == -ENOENT {
                if guarded { fs.protection.released(ino) }
                fs.protection.releasedPath(ino, info!.pointee.fh)
                fs.closeCounted(ino, fd)
                fs.closed(ino)
            }
        }
    }
    ops.create = { request, parent, name, mode, info in
        respondChanging(request) { () throws(Errno) in
            let fs = fileSystem(request)
            var guarded = try fs.admitCreation(caller(request), in: parent, cfuse_request_is_tmpfile() ? "open" : "create")
            var (entry, fd, directIO) = cfuse_request_is_tmpfile()
                ? try fs.tmpfile(caller(request), parent, mode, cfuse_open_flags(info))
                : try fs.create(caller(request), parent, name!, mode, cfuse_open_flags(info))
            if cfuse_request_kills_suidgid() { fs.dropSetIDBits(caller(request), entry.ino) }   // it truncated a file
            let direct = directIO || guarded && fs.writeback
            let path = fs.openPath(entry.ino, guarded: &guarded, directIO: direct)
            let backing = setHandle(info, fd, path, directIO: direct)
            if guarded { markGuarded(info, entry.ino, fs) }
            fs.countOpened(entry.ino, fd)
            entry.attr = fs.shown(entry.attr)
            if cfuse_reply_create_backed(request, &entry, info, backing) == -ENOENT {
                if guarded { fs.protection.released(entry.ino) }
                fs.protection.releasedPath(entry.ino, info!.pointee.fh)
                fs.closeCounted(entry.ino, fd)
                fs.closed(entry.ino)
            }
        }
    }
    ops.read = { request, ino, size, offset, info in
        // The policy was applied when the file was opened; a read passes straight to the
        // store, unless the file is `complete` and the device locked (SPEC §11).
        guard DataProtection.isGuarded(info) else {
            cfuse_reply_fd_data(request, handle(info), offset, size)
            return
        }
        let fs = fileSystem(request)
        if !fs.protection.whileAvailable({ _ = cfuse_reply_fd_data(request, handle(info), offset, size) }) {
            // Refused only if still `complete`: a class changed from outside applies at once.
            guard fs.isStillComplete(ino) else { _ = cfuse_reply_fd_data(request, handle(info), offset, size); return }
            fuse_reply_err(request, fs.refuseGuarded(caller(request), ino, "read"))
        }
    }
    ops.write = { request, ino, buffer, size, offset, info in
        // Only a descriptor opened for writing, after the policy allowed it, receives writes.
        // Within the container's capacity, if it has one: a short write, or ENOSPC.
        let fs = fileSystem(request)
        let write = {
            if cfuse_request_kills_suidgid() { fs.dropSetIDBits(caller(request), ino) }
            respondChanging(request) { () throws(Errno) in
                // O_SYNC, O_DSYNC, RWF_DSYNC: the kernel says so in the write's flags.
                let synchronous = fs.powerLoss != nil && cfuse_open_flags(info) & O_DSYNC != 0
                fuse_reply_write(request, try fs.write(ino, handle(info), buffer, size, offset, synchronous: synchronous))
            }
        }
        guard DataProtection.isGuarded(info) else { return write() }
        if !fs.protection.whileAvailable(write) {
            guard fs.isStillComplete(ino) else { return write() }
            fuse_reply_err(request, fs.refuseGuarded(caller(request), ino, "write"))
        }
    }
    ops.flush = { request, _, info in
        // Only with the writeback cache: every open is answered with FOPEN_NOFLUSH, which
        // the kernel ignores then (it writes the dirty pages back and flushes). Closing a
        // duplicate gives the store the close(2) it would have seen.
        let result = close(dup(handle(info)))
        fuse_reply_err(request, result == 0 ? 0 : errno)
    }
    ops.release = { request, ino, info in
        let fs = fileSystem(request)
        if DataProtection.isGuarded(info) { fs.protection.released(ino) }
        fs.protection.releasedPath(ino, info!.pointee.fh)
        Tagging.released(handle(info))
        fs.countingChange {
            fs.closeCounted(ino, handle(info))
            fs.closed(ino)
        }
        fuse_reply_err(request, 0)
    }
    ops.fsync = { request, ino, dataOnly, info in
        let fs = fileSystem(request)
        fs.countingChange {
            let result = fs.syncFile(ino, handle(info), dataOnly: dataOnly != 0)
            fuse_reply_err(request, result == 0 ? 0 : errno)
        }
    }
    ops.opendir = { request, ino, info in
        respond(request) { () throws(Errno) in
            let directory = try fileSystem(request).opendir(ino)
            info!.pointee.fh = UInt64(UInt(bitPattern: Unmanaged.passRetained(directory).toOpaque()))
            // The kernel keeps listings: it drops one when the directory's mtime or
            // version changes, and deliver and purge invalidate what they change.
            cfuse_set_open_flags(info, false, true, false, true)
            fuse_reply_open(request, info)
        }
    }
    ops.readdir = { request, _, size, offset, info in
        readDirectory(request, size, offset, info, plus: false)
    }
    ops.readdirplus = { request, _, size, offset, info in
        readDirectory(request, size, offset, info, plus: true)
    }
    ops.releasedir = { request, _, info in
        Unmanaged<DirectoryHandle>.fromOpaque(UnsafeRawPointer(bitPattern: UInt(info!.pointee.fh))!).release()
        fuse_reply_err(request, 0)
    }
    ops.fsyncdir = { request, _, dataOnly, info in
        let handle = directory(info)
        let result = fileSystem(request).syncFolder(handle.node, dirfd(handle.stream), dataOnly: dataOnly != 0)
        fuse_reply_err(request, result == 0 ? 0 : errno)
    }
    ops.statfs = { request, _ in
        respond(request) { () throws(Errno) in
            var info = try fileSystem(request).statfs()
            fuse_reply_statfs(request, &info)
        }
    }
    ops.setxattr = { request, ino, name, value, size, flags in
        respondChanging(request) { () throws(Errno) in
            try fileSystem(request).setxattr(caller(request), ino, name!, value, size, flags)
            fuse_reply_err(request, 0)
        }
    }
    ops.getxattr = { request, ino, name, size in
        respond(request) { () throws(Errno) in
            try withBuffer(size) { (buffer) throws(Errno) in
                let count = try fileSystem(request).getxattr(ino, name!, buffer)
                if size == 0 { fuse_reply_xattr(request, count) } else { fuse_reply_buf(request, buffer.baseAddress, count) }
            }
        }
    }
    ops.listxattr = { request, ino, size in
        respond(request) { () throws(Errno) in
            try withBuffer(size) { (buffer) throws(Errno) in
                let count = try fileSystem(request).listxattr(ino, buffer)
                if size == 0 { fuse_reply_xattr(request, count) } else { fuse_reply_buf(request, buffer.baseAddress, count) }
            }
        }
    }
    ops.removexattr = { request, ino, name in
        respondChanging(request) { () throws(Errno) in
            try fileSystem(request).removexattr(caller(request), ino, name!)
            fuse_reply_err(request, 0)
        }
    }
    ops.fallocate = { request, ino, mode, offset, length, info in
        respondChanging(request) { () throws(Errno) in
            if DataProtection.isGuarded(info) { try fileSystem(request).admitGuarded(caller(request), ino, "fallocate") }
            try fileSystem(request).fallocate(caller(request), ino, handle(info), mode, offset, length)
            fuse_reply_err(request, 0)
        }
    }
    ops.copy_file_range = { request, input, inputOffset, inputInfo, output, outputOffset, outputInfo, length, flags in
        respondChanging(request) { () throws(Errno) in
            if DataProtection.isGuarded(inputInfo) { try fileSystem(request).admitGuarded(caller(request), input, "copy_file_range") }
            if DataProtection.isGuarded(outputInfo) { try fileSystem(request).admitGuarded(caller(request), output, "copy_file_range") }
            let copied = try fileSystem(request).copyFileRange(
                caller(request), from: input, handle(inputInfo), inputOffset,
                to: output, handle(outputInfo), outputOffset, length, UInt32(bitPattern: Int32(flags)))
            fuse_reply_write(request, copied)
        }
    }
    ops.lseek = { request, _, offset, whence, info in
        let result = lseek(handle(info), offset, whence)
        if result < 0 { fuse_reply_err(request, errno) } else { fuse_reply_lseek(request, result) }
    }
    return ops
}

private func readDirectory(_ request: fuse_req_t?, _ size: Int, _ offset: off_t, _ info: UnsafeMutablePointer<fuse_file_info>?, plus: Bool) {
    respond(request) { () throws(Errno) in
        try withBuffer(size) { (buffer) throws(Errno) in
            let base = buffer.baseAddress!.assumingMemoryBound(to: CChar.self)
            let used = try fileSystem(request).readdir(request, directory(info), offset, base, size, plus: plus)
            fuse_reply_buf(request, base, used)
        }
    }
}

/// A scratch buffer of `size` bytes (at least one, so the base address exists). The
/// kernel bounds the sizes it asks for (64 KiB for attributes, a request's pages for
/// listings); a size beyond 16 MiB is refused rather than allocated.
@inline(__always)
private func withBuffer(_ size: Int, _ body: (UnsafeMutableRawBufferPointer) throws(Errno) -> Void) throws(Errno) {
    guard size >= 0, size <= 1 << 24 else { throw Errno(EINVAL) }
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: max(size, 1), alignment: 16)
    defer { buffer.deallocate() }
    try body(UnsafeMutableRawBufferPointer(rebasing: buffer[0..<size]))
}
