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
}
