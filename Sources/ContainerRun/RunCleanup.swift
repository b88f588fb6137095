import ContainerPolicy
import ContainerStore
import Foundation
import Glibc

extension Store {
    /// Deletes everything inside `tmp/` except its `CACHEDIR.TAG`, following no symlink
    /// (SPEC §3: tmp is purged when the app stops running). Call it with the container
    /// unmounted, or about to be: the mount's caches are not told.
    ///
    /// A folder the program made unwritable is made writable first, so its contents can go.
    /// Returns how many entries are left (0 when all went).
    @discardableResult
    func purgeTemporaryFolder() -> Int {
        guard let tmp = try? withCName(StandardDirectory.tmp.path.bytes, { (name) throws(Errno) in
            try sys { openat(rootFD, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
        }) else { return 0 }
        defer { close(tmp) }
        for entry in (try? Directory.entries(of: tmp)) ?? [] where entry.name != ContainerLayout.cacheTagName {
            removeEntry(at: tmp, entry.name)
        }
        return ((try? Directory.entries(of: tmp)) ?? []).filter { $0.name != ContainerLayout.cacheTagName }.count
    }

    /// Removes `name` inside `parent` and all below it, following no symlink; best effort.
    private func removeEntry(at parent: Int32, _ name: [UInt8]) {
        if withCName(name, { unlinkat(parent, $0, 0) }) == 0 { return }
        guard errno == EISDIR,
              let fd = try? withCName(name, { (cname) throws(Errno) in
                  try sys { openat(parent, cname, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
              })
        else { return }
        var info = stat()
        if fstat(fd, &info) == 0, info.st_mode & 0o700 != 0o700 { fchmod(fd, info.st_mode & 0o7777 | 0o700) }
        for entry in (try? Directory.entries(of: fd)) ?? [] { removeEntry(at: fd, entry.name) }
        close(fd)
        _ = withCName(name) { unlinkat(parent, $0, AT_REMOVEDIR) }
    }
}

extension AuditLog {
    /// How many denials the store's log holds from `since` (a `CLOCK_REALTIME` time) on.
    ///
    /// Records are compared by their timestamps, so rotation during the period does not
    /// matter; denials dropped from a full queue are not counted.
    static func countDenials(stateFD: Int32, since: timespec) -> Int {
        let start = recordTime(since)
        return read(stateFD: stateFD).count { $0.time >= start }
    }

    /// `time` written as an `AuditRecord`'s time (`2026-11-21T10:53:15.982Z`), which
    /// sorts as text in time order.
    static func recordTime(_ time: timespec) -> String {
        var seconds = time.tv_sec
        var parts = tm()
        gmtime_r(&seconds, &parts)
        return String(format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", parts.tm_year + 1900, parts.tm_mon + 1, parts.tm_mday,
                      parts.tm_hour, parts.tm_min, parts.tm_sec, Int32(time.tv_nsec / 1_000_000))
    }

    /// The time now, on the clock the log's timestamps use.
    static func now() -> timespec {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return now
    }
}
