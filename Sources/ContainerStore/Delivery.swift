import CLinux
import ContainerPolicy
import Glibc

/// Hands files over to a container's `Documents/Inbox`, as another app or Mail does (SPEC §6).
public enum Delivery {
    static let stagingName = Array(name: "incoming")

    /// Copies the file or folder at `source` into the Inbox as `name` (or the next free
    /// `name-1.ext`, `name-2.ext`…), never overwriting, and returns the name used.
    ///
    /// The copy is made in the state folder (same filesystem, invisible to the app) and
    /// renamed into the Inbox in one step, so the app never sees a partial file. In a device
    /// folder with a capacity, `device` (made for this store) admits the copy as measured
    /// (SPEC §15); its caller finishes it once a mounted store's daemon has recounted.
    public static func deliver(_ source: String, as name: [UInt8], into store: Store, device: DeviceInstall? = nil) throws(UserError) -> [UInt8] {
        var info = stat()
        guard lstat(source, &info) == 0 else { throw UserError("cannot read \(source): \(Errno.current)") }
        let type = info.st_mode & S_IFMT
        guard type == S_IFREG || type == S_IFDIR else {
            throw UserError("\(source) is not a file or folder: only files and folders can be delivered")
        }
        guard !name.isEmpty, !name.contains(UInt8(ascii: "/")), name != [0x2E], name != [0x2E, 0x2E] else {
            throw UserError.usage("bad name to deliver as: it must be a single file name")
        }
        do {
            let staging = try stagingFolder(store)
            defer { close(staging) }
            // Unpredictable, as every working name of a command that root may run.
            let temporary = StagingName.random(beside: name, "delivering")
            try copy(source, type: type, to: temporary, in: staging)
            // Measured as copied, before it enters the container (SPEC §10), one delivery at
            // a time from the check to the rename: two at once could each fit alone.
            let lock = try withCName(stagingName) { (name) throws(Errno) in
                try sys { openat(store.stateFD, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
            }
            defer { close(lock) }  // and the lock with it
            do {
                try sys { flock(lock, LOCK_EX) }
                let bytes = Capacity.treeBytes(at: staging, temporary)
                try Capacity.checkFits(store, adding: bytes, "deliver \(source) into \(store.path)")
                try device?.admit(bytes, "deliver \(source) into \(store.path)", need: "the delivery adds")
            } catch {
                removeTree(at: staging, temporary)
                throw error
            }
            TestCrashPoint.reach("delivery-checked")
            let inbox = try openDirectory(at: store.rootFD, StandardDirectory.inbox.path.bytes)
            defer { close(inbox) }
            for candidate in candidates(for: name) {
                let result = withCName(temporary) { from in
                    withCName(candidate) { to in clinux_renameat2(staging, from, inbox, to, clinux_RENAME_NOREPLACE) }
                }
                if result == 0 { return candidate }
                guard errno == EEXIST else {
                    let error = Errno.current
                    removeTree(at: staging, temporary)
                    throw error
                }
            }
            removeTree(at: staging, temporary)
            throw Errno(EEXIST)
        } catch let error as UserError {
            throw error
        } catch {
            throw UserError("cannot deliver \(source) into \(store.path): \(error)")
        }
    }

    /// Refuses, before anything is copied, a delivery of several `sources` that would
    /// not fit in the container's capacity together, or in its device's (`device`) free
    /// space (each is checked exactly as it goes in).
    public static func checkFits(_ sources: [String], into store: Store, device: DeviceInstall? = nil) throws(UserError) {
        guard sources.count > 1 else { return }
        let bytes = sources.reduce(Int64(0)) { $0.addingSaturating(Capacity.treeBytes(at: AT_FDCWD, Array($1.utf8))) }
        let what = "deliver \(sources.count) files into \(store.path)"
        try Capacity.checkFits(store, adding: bytes, what)
        try device?.check(bytes, what, need: "the delivery adds")
    }

    /// `name`, then `base-1.ext`, `base-2.ext`, … (the extension is what follows the last dot).
    static func candidates(for name: [UInt8]) -> some Sequence<[UInt8]> {
        let dot = name.lastIndex(of: UInt8(ascii: ".")).flatMap { $0 > 0 ? $0 : nil }
        let base = dot.map { Array(name[..<$0]) } ?? name
        let ext = dot.map { Array(name[$0...]) } ?? []
        return [name].lazy + (1..<100_000).lazy.map { base + Array("-\($0)".utf8) + ext }
    }

    private static func stagingFolder(_ store: Store) throws(Errno) -> Int32 {
        let made = withCName(stagingName) { mkdirat(store.stateFD, $0, 0o700) }
        if made != 0, errno != EEXIST { throw Errno.current }
        return try openDirectory(at: store.stateFD, stagingName)
    }

    private static func copy(_ source: String, type: mode_t, to name: [UInt8], in directory: Int32) throws {
        let sourceFD = Glibc.open(source, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | (type == S_IFDIR ? O_DIRECTORY : 0))
        guard sourceFD >= 0 else { throw Errno.current }
        defer { close(sourceFD) }
        if type == S_IFDIR {
            try TreeCopy.copyDirectory(from: sourceFD, toNew: name, in: directory, source: source)
        } else {
            try TreeCopy.copyFile(from: sourceFD, toNew: name, in: directory)
        }
    }
}
