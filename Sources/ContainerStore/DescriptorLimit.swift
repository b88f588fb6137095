import Glibc

/// The process's soft limit of open descriptors (`RLIMIT_NOFILE`).
///
/// A walk of the store keeps a descriptor open per folder level (every access is relative
/// to its parent's descriptor, never by path), and the daemon keeps its nodes' descriptors:
/// a login shell's soft limit (often 1024) is no measure of either. So every command takes
/// the whole allowance, as libfuse's passthrough_hp does, and hands a program it starts
/// the limit it found.
public enum DescriptorLimit {
    private static let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)

    /// The limit as the process found it, read once, before `raise` changed it.
    private static let found: rlimit? = {
        var limit = rlimit()
        return getrlimit(resource, &limit) == 0 ? limit : nil
    }()

    /// Raises the soft limit to the hard one.
    public static func raise() {
        guard var limit = found, limit.rlim_cur < limit.rlim_max else { return }
        limit.rlim_cur = limit.rlim_max
        setrlimit(resource, &limit)
    }

    /// Runs `body` (a spawn) with the soft limit put back as the process found it, so that
    /// the program started inherits that, not the raised one (`select` breaks past 1024).
    public static func asFound<Result>(_ body: () -> Result) -> Result {
        guard var original = found else { return body() }
        var current = rlimit()
        guard getrlimit(resource, &current) == 0, current.rlim_cur != original.rlim_cur else { return body() }
        setrlimit(resource, &original)
        defer { setrlimit(resource, &current) }
        return body()
    }
}
