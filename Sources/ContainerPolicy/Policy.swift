#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// An operation on a container, with the location of every node it names (SPEC §2).
///
/// Locations are those of real nodes: the kernel has already resolved symlinks.
public enum Operation: Hashable, Sendable {
    /// Lookup, stat, list, read, readlink, getxattr, listxattr, open for reading.
    case read(Location)
    /// Create, mknod, mkdir or symlink of a new entry at `Location`.
    case create(Location)
    /// Write, truncate, fallocate, copy_file_range into, open for writing.
    case changeContent(Location)
    /// chmod, chown, utimens, setxattr, removexattr.
    case changeMetadata(Location)
    /// unlink, rmdir.
    case delete(Location)
    /// rename(2); `exchange` is `RENAME_EXCHANGE`, which moves each end into the other.
    case rename(from: Location, to: Location, exchange: Bool)
    /// link(2): a new name at `to` for the node at `from`.
    case link(from: Location, to: Location)
}

/// Why an operation is refused; one case per rule, so the audit log can name it.
public enum Denial: String, Hashable, Sendable, Codable {
    /// The bundle is read-only, as a signed app bundle is.
    case bundleIsReadOnly
    /// The root and the standard directories cannot be created, changed, moved or removed.
    case structureIsFixed
    /// The inbox may be read, emptied and moved out of, never written.
    case inboxIsReadDeleteOnly
    /// A hard link to a bundle or inbox file would let it change under another name.
    case linkWouldExposeReadOnlyFile
    /// The state folder and marker files of the store are not part of the container:
    /// to a program they do not exist.
    case notInContainer
    /// A name the store uses for itself (the state folder, `CACHEDIR.TAG`) cannot be made.
    case nameIsReserved
    /// The file's protection class makes its data unavailable in the device's state
    /// (SPEC §11; `ProtectionPolicy`).
    case protectedDataUnavailable

    /// The errno a program sees (SPEC §2): `EPERM` as iOS's sandbox denial, `EACCES`
    /// for the inbox; a hidden name does not exist.
    public var errno: Int32 {
        switch self {
        case .bundleIsReadOnly, .structureIsFixed: EPERM
        case .inboxIsReadDeleteOnly: EACCES
        case .linkWouldExposeReadOnlyFile, .nameIsReserved, .protectedDataUnavailable: EPERM
        case .notInContainer: ENOENT
        }
    }

    /// Whether the denial is written to the audit log; not finding a hidden name is not
    /// a denial a program can tell from an absent file, so it is not logged.
    public var isAudited: Bool { self != .notInContainer }

    /// Which of two denials a program is told: `EPERM` rules win over the inbox's `EACCES`.
    var strictness: Int {
        switch self {
        case .notInContainer: 3
        case .bundleIsReadOnly, .structureIsFixed, .linkWouldExposeReadOnlyFile, .nameIsReserved, .protectedDataUnavailable: 2
        case .inboxIsReadDeleteOnly: 1
        }
    }
}

/// The outcome of a policy check.
public enum Decision: Hashable, Sendable {
    case allow
    case deny(Denial)
}

/// The iOS sandbox rules as a pure function from operations to decisions. The only
/// place that knows them.
public enum Policy {
    /// Decides `operation`.
    public static func decide(_ operation: Operation) -> Decision {
        switch operation {
        case .read(let location):
            return location == .hidden ? .deny(.notInContainer) : .allow
        case .create(let location), .changeContent(let location),
             .changeMetadata(let location):
            return decision(strictest(mutationDenial(location)))
        case .delete(let location):
            return decision(strictest(deletionDenial(location)))
        case .rename(let source, let target, let exchange):
            // Each end loses its entry and gains one; with exchange both ends do both.
            let sourceDenial = exchange ? strictest(deletionDenial(source), mutationDenial(source))
                                        : deletionDenial(source)
            let targetDenial = exchange ? strictest(deletionDenial(target), mutationDenial(target))
                                        : mutationDenial(target)
            return decision(strictest(sourceDenial, targetDenial))
        case .link(let source, let target):
            // A second name would let the file change outside its area's rules; each area
            // refuses with its own errno (bundle EPERM, inbox EACCES).
            let sourceDenial: Denial? = switch source.area {
            case .bundle: .linkWouldExposeReadOnlyFile
            case .inbox: .inboxIsReadDeleteOnly
            case .structure: source == .hidden ? .notInContainer : .structureIsFixed
            case .data, .cache, .temporary: nil
            }
            return decision(strictest(sourceDenial, mutationDenial(target)))
        }
    }

    /// Shorthand: `true` when `operation` is allowed.
    public static func allows(_ operation: Operation) -> Bool {
        decide(operation) == .allow
    }

    /// Why a node at `location` may not be created, changed or be the target of a move.
    private static func mutationDenial(_ location: Location) -> Denial? {
        if location == .hidden { return .nameIsReserved }
        return switch location.area {
        case .bundle: .bundleIsReadOnly
        case .structure: .structureIsFixed
        case .inbox: .inboxIsReadDeleteOnly
        case .data, .cache, .temporary: nil
        }
    }

    /// Why a node at `location` may not be removed or moved away. The inbox allows both.
    private static func deletionDenial(_ location: Location) -> Denial? {
        if location == .hidden { return .notInContainer }
        return location.area == .inbox ? nil : mutationDenial(location)
    }

    private static func strictest(_ denials: Denial?...) -> Denial? {
        denials.compactMap { $0 }.max { $0.strictness < $1.strictness }
    }

    private static func decision(_ denial: Denial?) -> Decision {
        denial.map(Decision.deny) ?? .allow
    }
}
