import CLinux
import ContainerPolicy
import Glibc

/// Hands files over to a container's `Documents/Inbox`, as another app or Mail does (SPEC §6).
public enum Delivery {
    static let stagingName = Array(name: "incoming")

    /// The staging folder's lock, for the line of a command that waited for it: one
    /// delivery, `share put` or user edit into the container at a time.
    static func stagingDescription(_ store: Store) -> String {
        "the lock on \(store.statePath)/incoming (one delivery or file-sharing change at a time)"
    }

    /// Copies the file or folder at `source` into the Inbox as `name` (or the next free
    /// `name-1.ext`, `name-2.ext`…), never overwriting, and returns the name used.
    ///
    /// The copy is made in the state folder (same filesystem, invisible to the app) and
    /// renamed into the Inbox in one step, so the app never sees a partial file. In a device
    /// folder with a capacity, `device` (made for this store) admits the copy as measured
    /// (SPEC §15); its caller finishes it once a mounted store's daemon has recounted.
    public static func deliver(_ source: [UInt8], as name: [UInt8], into store: Store, device: DeviceInstall? = nil) throws(UserError) -> [UInt8] {
        // The path is bytes, as given: a name that is not UTF-8 is a name like any other.
        let shown = ContainerPath.printable(source)
        var info = stat()
        guard withCName(source, { lstat($0, &info) }) == 0 else { throw UserError.failed("cannot read \(shown)", Errno.current) }
        let type = info.st_mode & S_IFMT
        guard type == S_IFREG || type == S_IFDIR else {
            throw UserError("\(shown) is not a file or folder: only files and folders can be delivered")
        }
        guard !name.isEmpty, !name.contains(UInt8(ascii: "/")), name != [0x2E], name != [0x2E, 0x2E] else {
            throw UserError.usage("bad name to deliver as: it must be a single file name")
        }
        do {
            let staging = try stagingFolder(store)
            defer { close(staging) }
            // Unpredictable, as every working name of a command that root may run.
            let temporary = StagingName.random(beside: name, "delivering")
            try copy(source, shown: shown, type: type, to: temporary, in: staging, owner: Owner.handingTo(rootFD: store.rootFD))
            // Measured as copied, before it enters the container (SPEC §10), one delivery at
            // a time from the check to the rename: two at once could each fit alone.
            let lock = try withCName(stagingName) { (name) throws(Errno) in
                try sys { openat(store.stateFD, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
            }
            defer { close(lock) }  // and the lock with it
            do {
                try LockWait.take(lock, LOCK_EX, stagingDescription(store))
                let bytes = Capacity.treeBytes(at: staging, temporary)
                try Capacity.checkFits(store, adding: bytes, "deliver \(shown) into \(store.path)")
                try device?.admit(bytes, "deliver \(shown) into \(store.path)", need: "the delivery adds")
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
            throw UserError.failed("cannot deliver \(shown) into \(store.path)", error)
        }
    }

    /// Refuses, before anything is copied, a delivery of several `sources` one of which
    /// is missing or neither a file nor a folder: all are delivered, or none (SPEC §9).
    public static func checkSources(_ sources: [[UInt8]]) throws(UserError) {
        for source in sources {
            let shown = ContainerPath.printable(source)
            var info = stat()
            guard withCName(source, { lstat($0, &info) }) == 0 else {
                let error = Errno.current
                throw UserError("cannot read \(shown) (\(error)): \(error.advice(whenMissing: "name an existing file or folder to deliver")); nothing was delivered")
            }
            let type = info.st_mode & S_IFMT
            guard type == S_IFREG || type == S_IFDIR else {
                throw UserError("\(shown) is not a file or folder: only files and folders can be delivered; nothing was delivered")
            }
        }
    }

    /// Refuses, before anything is copied, a delivery of several `sources` that would
    /// not fit in the container's capacity together, or in its device's (`device`) free
    /// space (each is checked exactly as it goes in).
    public static func checkFits(_ sources: [[UInt8]], into store: Store, device: DeviceInstall? = nil) throws(UserError) {
        guard sources.count > 1 else { return }
        let bytes = sources.reduce(Int64(0)) { $0.addingSaturating(Capacity.treeBytes(at: AT_FDCWD, $1)) }
        let what = "deliver \(counted(sources.count, "file")) into \(store.path)"
        try Capacity.checkFits(store, adding: bytes, what)
        try device?.check(bytes, what, need: "the delivery adds")
    }

    /// `name`, then `base-1.ext`, `base-2.ext`, … (the extension is what follows the last
    /// dot). A numbered name never exceeds `NAME_MAX`: the base is shortened to make room
    /// for the suffix (at a character's start, when it is UTF-8), and an extension too long
    /// to keep is numbered as part of the base.
    static func candidates(for name: [UInt8]) -> some Sequence<[UInt8]> {
        let dot = name.lastIndex(of: UInt8(ascii: ".")).flatMap { $0 > 0 ? $0 : nil }
        let longestSuffix = 6   // "-99999"
        let (base, ext): ([UInt8], [UInt8]) = if let dot, name.count - dot + longestSuffix < Int(NAME_MAX) {
            (Array(name[..<dot]), Array(name[dot...]))
        } else {
            (name, [])
        }
        return [name].lazy + (1..<100_000).lazy.map { number in
            let suffix = Array("-\(number)".utf8)
            var kept = base.prefix(max(0, Int(NAME_MAX) - suffix.count - ext.count))
            // Not half a character: while the first byte cut off continues a UTF-8
            // sequence, the cut moves back to that sequence's lead byte.
            while !kept.isEmpty, kept.count < base.count, base[kept.endIndex] & 0xC0 == 0x80 { kept = kept.dropLast() }
            return Array(kept) + suffix + ext
        }
    }

    /// The state folder's staging folder, the store owner's whoever makes it
    /// (`ownedLikeTheFolder`).
    static func stagingFolder(_ store: Store) throws(Errno) -> Int32 {
        let made = withCName(stagingName) { mkdirat(store.stateFD, $0, 0o700) }
        if made != 0, errno != EEXIST { throw Errno.current }
        let fd = try withCName(stagingName) { (name) throws(Errno) in
            try sys { openat(store.stateFD, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
        }
        ownedLikeTheFolder(fd, store.stateFD)
        return fd
    }

    /// Root's copy is the store owner's, as a file the app received (`Owner`).
    private static func copy(_ source: [UInt8], shown: String, type: mode_t, to name: [UInt8], in directory: Int32, owner: Owner?) throws {
        if type == S_IFDIR {
            let sourceFD = withCName(source) { Glibc.open($0, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
            guard sourceFD >= 0 else { throw Errno.current }
            defer { close(sourceFD) }
            try TreeCopy.copyDirectory(from: sourceFD, toNew: name, in: directory, .everything(what: shown), owner: owner)
        } else {
            let sourceFD = try openRegularFile(at: AT_FDCWD, source)
            defer { close(sourceFD) }
            try TreeCopy.copyFile(from: sourceFD, toNew: name, in: directory, owner: owner)
        }
    }
}
