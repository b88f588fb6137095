/// The storage areas of an iOS app container (SPEC §1), which decide what may be done.
public enum Area: String, Sendable, CaseIterable, Codable {
    /// `Name.app` and below: read-only, signed at install.
    case bundle
    /// The root and the standard directories themselves: fixed.
    case structure
    /// Below `Documents/Inbox`: read, delete, move out.
    case inbox
    /// `Documents`, `Library` and its standard folders: user data, backed up.
    case data
    /// Below `Library/Caches`: re-creatable, purgeable.
    case cache
    /// Below `tmp`: purged when the app is not running.
    case temporary

    /// Whether programs may create, change and delete here.
    public var isWritable: Bool {
        switch self {
        case .data, .cache, .temporary: true
        case .bundle, .structure, .inbox: false
        }
    }
}

/// The standard directories of a container, which together with the root form its structure.
public enum StandardDirectory: Sendable, CaseIterable {
    case documents, inbox, library, applicationSupport, preferences, caches, tmp

    /// The directory's path relative to the container's root.
    public var path: ContainerPath {
        switch self {
        case .documents: ContainerPath(components: [Names.documents])
        case .inbox: ContainerPath(components: [Names.documents, Names.inbox])
        case .library: ContainerPath(components: [Names.library])
        case .applicationSupport: ContainerPath(components: [Names.library, Names.applicationSupport])
        case .preferences: ContainerPath(components: [Names.library, Names.preferences])
        case .caches: ContainerPath(components: [Names.library, Names.caches])
        case .tmp: ContainerPath(components: [Names.tmp])
        }
    }

    /// The area of what lies below this directory.
    var contentArea: Area {
        switch self {
        case .documents, .library, .applicationSupport, .preferences: .data
        case .inbox: .inbox
        case .caches: .cache
        case .tmp: .temporary
        }
    }
}

/// Where a node sits in a container: enough to know its area and its children's.
///
/// A child's location depends only on its parent's location and its own name, so a
/// filesystem can keep one per node and classify a new name in constant time.
public enum Location: Hashable, Sendable {
    /// The container's root.
    case root
    /// One of the standard directories itself.
    case standard(StandardDirectory)
    /// The bundle directory or anything below it.
    case bundle
    /// Anything below a standard directory that is not itself standard.
    case inside(Area)
    /// A name at the root that is neither the bundle nor a standard directory; only
    /// something outside the mount can have put it there, so it is kept read-only.
    case foreign
    /// The state folder, or a marker file in the store that the mount does not show.
    case hidden

    /// The area that decides what may be done here.
    public var area: Area {
        switch self {
        case .root, .standard, .foreign, .hidden: .structure
        case .bundle: .bundle
        case .inside(let area): area
        }
    }
}

/// The names a container gives meaning to; the bundle's name differs per container.
///
/// Two kinds share it: an app's data container (a bundle, `Documents/`, `Library/`,
/// `tmp/`), and an App Group container (SPEC §15, docs/groups.md), which has no bundle,
/// only `Library/`, `Library/Caches/` and `Library/Preferences/` as its structure, and a
/// root its members may write: any other name at a group's root is data.
public struct ContainerLayout: Hashable, Sendable {
    /// The bundle directory's name, such as `Demo.app`, as bytes; empty for a group.
    public let bundleName: [UInt8]
    /// The group's identifier (`group.com.example.shared`) for a group container; nil for
    /// an app's.
    public let groupIdentifier: [UInt8]?

    /// Whether this is an App Group container.
    public var isGroup: Bool { groupIdentifier != nil }

    /// The standard directories this kind of container has: all of them for an app;
    /// `Library`, `Library/Caches` and `Library/Preferences` for a group, as iOS makes one.
    public var standardDirectories: [StandardDirectory] {
        isGroup ? [.library, .caches, .preferences] : StandardDirectory.allCases
    }

    /// The state folder's name at the store's root.
    public static let stateFolderName = Array(name: ".containerfs")
    /// The folder a backup archive keeps its manifest in (`.containerfs-backup/manifest`,
    /// its first entry). A group's backup starts at the group's root: a member's folder of
    /// that name would put a second manifest at that path, which `tar x` would write over
    /// the real one. So it is reserved at a group's root.
    public static let backupFolderName = Array(name: ".containerfs-backup")
    /// The Cache Directory Tagging marker kept in `Library/Caches` and `tmp` of the store.
    public static let cacheTagName = Array(name: "CACHEDIR.TAG")

    /// An app's container, whose bundle is `bundleName`.
    public init(bundleName: [UInt8]) {
        self.bundleName = bundleName
        self.groupIdentifier = nil
    }

    /// The longest name a folder may have (Linux's `NAME_MAX`).
    static let nameLimit = 255

    /// Whether `name` can be an app's bundle: one folder name at the store's root, `NAME.app`
    /// as `create` takes it, no longer than a name may be. The store records it in its
    /// state folder, which the store's owner can write; a recorded name holding a `/` would
    /// be a path, and every `*at` call naming the bundle (the roll forward of an update, an
    /// offload, a verification) would follow its `..` out of the store — with root's rights
    /// when root opens another user's store.
    public static func isBundleName(_ name: [UInt8]) -> Bool {
        name.count > 4 && name.count <= nameLimit && name.suffix(4).elementsEqual(".app".utf8)
            && !name.contains(UInt8(ascii: "/")) && !name.contains(0)
    }

    /// An App Group container identified by `groupIdentifier`.
    public init(groupIdentifier: [UInt8]) {
        self.bundleName = []
        self.groupIdentifier = groupIdentifier
    }

    /// The location of the entry `name` inside a directory at `parent`.
    public func child(_ name: [UInt8], of parent: Location) -> Location {
        switch parent {
        case .root:
            if name == Self.stateFolderName { return .hidden }
            if isGroup {
                if name == Self.backupFolderName { return .hidden }
                return name == Names.library ? .standard(.library) : .inside(.data)
            }
            if name == bundleName { return .bundle }
            if name == Names.documents { return .standard(.documents) }
            if name == Names.library { return .standard(.library) }
            if name == Names.tmp { return .standard(.tmp) }
            return .foreign
        case .standard(.documents):
            return name == Names.inbox ? .standard(.inbox) : .inside(.data)
        case .standard(.library):
            if name == Names.caches { return .standard(.caches) }
            if name == Names.applicationSupport, !isGroup { return .standard(.applicationSupport) }
            if name == Names.preferences { return .standard(.preferences) }
            return .inside(.data)
        case .standard(let directory):
            if name == Self.cacheTagName, directory == .caches || directory == .tmp { return .hidden }
            return .inside(directory.contentArea)
        case .bundle, .inside, .foreign, .hidden:
            return parent
        }
    }

    /// Whether a directory at `location` can hold a name that `child` hides: only the
    /// root and the Caches and tmp folders can (and what is hidden itself), so a listing
    /// of any other skips the check.
    public func hidesNames(in location: Location) -> Bool {
        switch location {
        case .root, .standard(.caches), .standard(.tmp), .hidden: true
        default: false
        }
    }

    /// The location of a whole path, classified component by component from the root.
    public func location(of path: ContainerPath) -> Location {
        path.components.reduce(Location.root) { child($1, of: $0) }
    }
}

/// The standard names, made once: `child(_:of:)` runs on every lookup.
private enum Names {
    static let documents = Array(name: "Documents")
    static let inbox = Array(name: "Inbox")
    static let library = Array(name: "Library")
    static let applicationSupport = Array(name: "Application Support")
    static let preferences = Array(name: "Preferences")
    static let caches = Array(name: "Caches")
    static let tmp = Array(name: "tmp")
}
