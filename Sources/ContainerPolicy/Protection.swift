/// A file's or folder's data protection class (SPEC §11), as iOS's `NSFileProtection…`.
/// Stored as the extended attribute `user.containerfs.protection`; a node without it has
/// its container's default class.
public enum ProtectionClass: String, CaseIterable, Hashable, Sendable, Codable {
    /// Unavailable while the device is locked, even through descriptors already open.
    case complete
    /// Cannot be opened while locked; descriptors opened before, and a file created
    /// while locked, keep working until closed.
    case completeUnlessOpen
    /// Unavailable only while locked since boot (iOS's default).
    case completeUntilFirstUserAuthentication
    /// Always available.
    case none

    /// The extended attribute that holds a node's class.
    public static let attributeName = "user.containerfs.protection"
    /// The class of a container created without `--protection`.
    public static let containerDefault = ProtectionClass.completeUntilFirstUserAuthentication

    /// The class an attribute value names, exactly (no trailing NUL or newline); nil for
    /// anything else, which a program setting it gets as `EINVAL`.
    public init?(value: some Collection<UInt8>) {
        guard let match = Self.allCases.first(where: { value.elementsEqual($0.rawValue.utf8) }) else { return nil }
        self = match
    }
}

/// A mounted container's device state (SPEC §11).
public enum DeviceState: String, CaseIterable, Hashable, Sendable, Codable {
    case unlocked
    case locked
    /// Locked and never unlocked since the mount started (`mount -o locked`, `run --locked`).
    case lockedSinceBoot

    /// As `status` prints it.
    public var text: String { self == .lockedSinceBoot ? "locked since boot" : rawValue }

    /// The state after the user unlocks, or locks, the device.
    public func switched(locked: Bool) -> DeviceState {
        guard locked else { return .unlocked }
        return self == .lockedSinceBoot ? .lockedSinceBoot : .locked
    }
}

/// What a program does with a protected file's data.
public enum ProtectedAccess: Hashable, Sendable, CaseIterable {
    /// Opening an existing file (any mode), or truncating one by name.
    case open
    /// Creating a new file and using the descriptor that creation returned.
    case create
    /// A read, write or truncate through a descriptor opened while the data was available.
    case descriptor
}

/// The data protection rules: which class's data is available in which device state.
public enum ProtectionPolicy {
    /// Decides `access` to data of class `protection` while the device is in `state`.
    /// A denial is `protectedDataUnavailable` (`EPERM`).
    public static func decide(_ protection: ProtectionClass, _ state: DeviceState, _ access: ProtectedAccess) -> Decision {
        allows(protection, state, access) ? .allow : .deny(.protectedDataUnavailable)
    }

    private static func allows(_ protection: ProtectionClass, _ state: DeviceState, _ access: ProtectedAccess) -> Bool {
        switch (protection, state) {
        case (.none, _), (_, .unlocked): true
        // iOS discards the class key shortly after lock: nothing, not even open descriptors.
        case (.complete, _): false
        // Only what was open before the lock, and what is created while locked, until closed.
        case (.completeUnlessOpen, _): access != .open
        // A descriptor can only have been opened after the first unlock.
        case (.completeUntilFirstUserAuthentication, .locked): true
        case (.completeUntilFirstUserAuthentication, .lockedSinceBoot): access == .descriptor
        }
    }

    /// Whether the daemon must see every read and write of a file of class `protection`
    /// (no passthrough, no kernel page cache across a lock): only `complete` fails
    /// descriptors that are already open.
    public static func guardsDescriptors(_ protection: ProtectionClass) -> Bool {
        protection == .complete
    }
}
