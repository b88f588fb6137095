import Glibc

/// The mode a file or folder gets when a command copies it into a store: `restore` from an
/// archive, `deliver` and `create` from the host (docs/backup.md, "Modes").
///
/// The copy belongs to whoever runs the command, not to the owner the source had (or, in an
/// archive, claims), so the bits that lend an owner's rights to others or weaken a folder
/// are dropped, as `cp` drops set-ID bits when the owner changes. They are dropped whoever
/// runs the command, even for a user copying their own files: the mount is `nosuid` and an
/// iOS app holds no set-ID programs, so in a store the bits only ever act outside the
/// mount, where a root-run copy would make them root's. One rule, whoever runs it.
public enum HandedOverMode {
    /// A file keeps read, write and execute for owner, group and others; never
    /// set-user-ID, set-group-ID or sticky.
    public static func file(_ mode: mode_t) -> mode_t { mode & 0o777 }

    /// A folder keeps read, write and search for owner and group, read and search for
    /// others; never writable by others, set-user-ID, set-group-ID or sticky.
    public static func folder(_ mode: mode_t) -> mode_t { mode & 0o775 }
}

/// Hidden working names in a folder others may share (a sticky `/tmp`):
/// `.LEAF.PURPOSE-XXXXXXXXXXXX`, twelve random letters and digits from the kernel's
/// random source, as `mkdtemp` and `mkstemp` make them, so that nobody can predict a name
/// to pre-create or block it. A taken name is never reused: another is drawn.
public enum StagingName {
    static let alphabet = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789".utf8)
    /// Room left for the prefix, the purpose and the random part within `NAME_MAX`.
    static let leafLimit = 200

    /// A fresh name for `purpose` beside `leaf` (shortened to fit).
    static func random(beside leaf: [UInt8], _ purpose: String) -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        let suffix = (0..<12).map { _ in alphabet.randomElement(using: &generator) ?? UInt8(ascii: "x") }
        return [UInt8(ascii: ".")] + leaf.prefix(leafLimit) + Array(".\(purpose)-".utf8) + suffix
    }

    /// Calls `make` (a `mkdirat` or an `openat` with `O_CREAT | O_EXCL`) with fresh names
    /// until one is not taken; returns the name and what `make` returned.
    public static func create(beside leaf: [UInt8], _ purpose: String,
                              _ make: (UnsafePointer<CChar>) -> Int32) throws(Errno) -> (name: [UInt8], result: Int32) {
        for _ in 0..<100 {
            let name = random(beside: leaf, purpose)
            let result = withCName(name, make)
            if result >= 0 { return (name, result) }
            if errno != EEXIST && errno != EINTR { throw Errno.current }
        }
        throw Errno(EEXIST)
    }
}
