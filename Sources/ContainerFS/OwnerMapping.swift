import Glibc

/// How a root daemon shows its store to the unprivileged host user that root's
/// `containerfs run` program is (`-o appuser=UID:GID`, docs/run.md).
///
/// The program is `_containerfs` on the host, a user that owns nothing, so that it is
/// nobody to the kernel's owner checks outside the container. Inside the container it must
/// still own its files: the mount shows the store owner's ids as the app user's, and
/// records what the app user makes or chowns as the owner's. The store stays the owner's
/// on disk, as it was when root's program ran as root.
///
/// The mapping is applied at the boundary only: to the ids of each request's caller and
/// of each chown as they come in, and to the attributes of each reply as it goes out, so
/// that the daemon itself works in the store's ids throughout.
struct OwnerMapping: Sendable {
    /// The store's owner: its top folder's.
    let owner: (uid: uid_t, gid: gid_t)
    /// The host user the program runs as.
    let app: (uid: uid_t, gid: gid_t)

    /// The ids as the store records them.
    func recorded(uid: uid_t, gid: gid_t) -> (uid: uid_t, gid: gid_t) {
        (uid == app.uid ? owner.uid : uid, gid == app.gid ? owner.gid : gid)
    }

    /// `info` as the app user is shown it.
    func present(_ info: inout stat) {
        if info.st_uid == owner.uid { info.st_uid = app.uid }
        if info.st_gid == owner.gid { info.st_gid = app.gid }
    }

    /// Whether `name` is that of a POSIX ACL, whose value names users and groups.
    static func isACL(_ name: UnsafePointer<CChar>) -> Bool {
        strcmp(name, "system.posix_acl_access") == 0 || strcmp(name, "system.posix_acl_default") == 0
    }

    /// An ACL's value as the store records it: an entry naming the app user (or its group)
    /// names the owner, as a chown does, so that no ACL in the store grants `_containerfs`
    /// anything on the host.
    func recordACL(_ value: UnsafeMutableRawBufferPointer) {
        Self.mapACL(value, user: { $0 == app.uid ? owner.uid : $0 }, group: { $0 == app.gid ? owner.gid : $0 })
    }

    /// An ACL's value as the app user is shown it (the reverse of `recordACL`).
    func presentACL(_ value: UnsafeMutableRawBufferPointer) {
        Self.mapACL(value, user: { $0 == owner.uid ? app.uid : $0 }, group: { $0 == owner.gid ? app.gid : $0 })
    }

    /// Maps the ids of the named-user and named-group entries of an ACL value (the
    /// kernel's xattr format: a 4-byte version 2, then 8-byte entries of tag, permissions
    /// and id, little-endian). A value not in that format is left as it is: the kernel
    /// refuses it.
    private static func mapACL(_ value: UnsafeMutableRawBufferPointer, user: (UInt32) -> UInt32, group: (UInt32) -> UInt32) {
        let header = 4, entry = 8, namedUser: UInt16 = 0x02, namedGroup: UInt16 = 0x08
        guard value.count >= header, (value.count - header) % entry == 0,
              UInt32(littleEndian: value.loadUnaligned(as: UInt32.self)) == 2 else { return }
        for offset in stride(from: header, to: value.count, by: entry) {
            let tag = UInt16(littleEndian: value.loadUnaligned(fromByteOffset: offset, as: UInt16.self))
            guard tag == namedUser || tag == namedGroup else { continue }
            let id = UInt32(littleEndian: value.loadUnaligned(fromByteOffset: offset + 4, as: UInt32.self))
            let mapped = tag == namedUser ? user(id) : group(id)
            value.storeBytes(of: mapped.littleEndian, toByteOffset: offset + 4, as: UInt32.self)
        }
    }
}
