import ContainerPolicy
import ContainerStore
import Foundation
import Glibc

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
    public static func recordTime(_ time: timespec) -> String {
        var seconds = time.tv_sec
        var parts = tm()
        gmtime_r(&seconds, &parts)
        return String(format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", parts.tm_year + 1900, parts.tm_mon + 1, parts.tm_mday,
                      parts.tm_hour, parts.tm_min, parts.tm_sec, Int32(time.tv_nsec / 1_000_000))
    }

    /// The time now, on the clock the log's timestamps use.
    public static func now() -> timespec {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return now
    }
}
