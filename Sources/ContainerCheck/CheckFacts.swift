import ContainerBackup
import ContainerPolicy
import ContainerPurge
import ContainerStore

/// What the rules look at, gathered from a store (and, for `run --check`, from the
/// launches). Plain data: the rules are pure functions of it, and tests build it by hand.
public struct CheckFacts: Sendable {
    /// One item of the backup set.
    public struct Item: Sendable {
        /// Its path in the container.
        public var path: ContainerPath
        /// A folder (then `bytes` is 0) or not.
        public var isFolder: Bool
        /// A file's size; 0 for a hard link whose first name is already counted.
        public var bytes: Int64

        /// An item of the backup set.
        public init(path: ContainerPath, isFolder: Bool, bytes: Int64) {
            self.path = path
            self.isFolder = isFolder
            self.bytes = bytes
        }
    }

    /// One launch of `run --launches` (or the single launch of `run`).
    public struct Launch: Sendable {
        /// 1 for the first.
        public var number: Int
        /// Its exit status; nil when the program never started.
        public var status: Int32?
        /// What was purged before it (nil for the first launch).
        public var purgedBefore: String?

        /// A launch that ended with `status`.
        public init(number: Int, status: Int32?, purgedBefore: String?) {
            self.number = number
            self.status = status
            self.purgedBefore = purgedBefore
        }
    }

    /// The backup set's files, folders and symlinks (what `backup` would write).
    public var backupItems: [Item] = []
    /// The backup set's bytes.
    public var backupBytes: Int64 = 0
    /// The backup set's bytes when the first launch exited (`run --launches`); nil otherwise.
    public var backupBytesAtFirstLaunch: Int64?
    /// Regular files in `tmp/` when the program exited; nil when not known (`check STORE`,
    /// where the app is not running and `tmp/` was purged when it stopped).
    public var temporaryFiles: [(path: ContainerPath, bytes: Int64)]?
    /// The denials the program met, as the audit log has them.
    public var denials: [AuditRecord] = []
    /// The launches, in order; empty for `check STORE`.
    public var launches: [Launch] = []
    /// How to replay the launches (`--launches N --purge-between P --seed S`); nil without them.
    public var replay: String?

    /// No facts: an empty container.
    public init() {}

    /// The files the app has not taken out of `Documents/Inbox` (from the backup set, which
    /// holds the Inbox).
    var inboxFiles: [Item] {
        backupItems.filter { !$0.isFolder && $0.path.components.count > 2 && $0.path.components.starts(with: inboxComponents) }
    }

    /// Reads the store's backup set and, with `temporary`, its `tmp/` files. Reuses the
    /// walkers of `backup` and `purge` (descriptors opened with `O_NOFOLLOW`, paths as bytes).
    public mutating func measure(_ store: Store, temporary: Bool) throws(UserError) {
        let set = try BackupSet.scan(store)
        backupItems = set.items.map { item in
            Item(path: item.path, isFolder: item.kind == .directory, bytes: item.hardLinkTarget == nil ? item.size : 0)
        }
        backupBytes = set.totalBytes
        if temporary {
            temporaryFiles = Tags.scan(store, kinds: [.temporary]).map { ($0.containerPath, $0.size) }
        }
    }
}

let documentsComponent = Array("Documents".utf8)
let inboxComponents = [documentsComponent, Array("Inbox".utf8)]
