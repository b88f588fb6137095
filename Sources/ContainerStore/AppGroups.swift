import CLinux
import ContainerPolicy
import Glibc

/// App Group containers on disk and the membership of app containers (SPEC §15,
/// docs/groups.md).
///
/// A group's store lives in the device folder: the folder that holds its member apps'
/// stores, under the group's identifier as its name (`DEVICE/group.com.example.shared`).
/// An app's groups are recorded in its state folder (`.containerfs/groups`, one identifier
/// a line), written only by `create --group` and `update --group`: the tool decides what a
/// program reaches, never the program.
extension Store {
    /// The state file listing the groups an app container belongs to.
    static let membershipFile = Array(name: "groups")

    /// Makes the group container `identifier` at `path` (whose last component must be the
    /// identifier): `Library/`, `Library/Caches/` (tagged), `Library/Preferences/` and the
    /// state folder, built aside and renamed into place as `create` does. `configure` runs
    /// on the complete staging store's state folder (protection, capacity).
    public static func createGroup(at path: String, configure: ((_ rootFD: Int32, _ stateFD: Int32) throws -> Void)? = nil) throws(UserError) -> Store {
        let (parentPath, leaf) = splitParent(path)
        let identifier = String(decoding: leaf, as: UTF8.self)
        if let problem = AppGroup.problem(with: identifier) {
            throw UserError.usage("cannot make a group container named \(ContainerPath.printable(leaf)): \(problem); its folder is named by the group's identifier")
        }
        let parentFD = Glibc.open(parentPath, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard parentFD >= 0 else {
            throw UserError.folderUnavailable("cannot create \(path)", folder: parentPath, role: "parent folder", Errno.current)
        }
        defer { close(parentFD) }
        var info = stat()
        if withCName(leaf, { fstatat(parentFD, $0, &info, AT_SYMLINK_NOFOLLOW) }) == 0 {
            throw UserError.usage("\(path) already exists: the group container is there already, or choose another folder")
        }
        StagingName.removeAbandoned(in: parentFD, beside: leaf, "creating")
        let (staging, lock) = try buildGroupAsideHeld(in: parentFD, leaf, "creating", path: path, configure: configure)
        defer { close(lock) }
        do {
            try withCName(staging) { (from) throws(Errno) in
                try withCName(leaf) { (to) throws(Errno) in _ = try sys { clinux_renameat2(parentFD, from, parentFD, to, clinux_RENAME_NOREPLACE) } }
            }
        } catch {
            removeTree(at: parentFD, staging)
            throw UserError.failed("cannot create \(path)", error)
        }
        return try open(path)
    }

    /// Builds a whole empty group container `leaf` (its identifier) in a new hidden folder
    /// of `parentFD`, as `buildAsideHeld` builds an app's: returns its name and the lock
    /// that keeps it from being taken for abandoned; a failure leaves nothing behind.
    public static func buildGroupAsideHeld(in parentFD: Int32, _ leaf: [UInt8], _ purpose: String, path: String,
                                           configure: ((_ rootFD: Int32, _ stateFD: Int32) throws -> Void)? = nil) throws(UserError) -> (name: [UInt8], lock: Int32) {
        try stageHeld(in: parentFD, beside: leaf, purpose, path: path) { rootFD in
            let layout = ContainerLayout(groupIdentifier: leaf)
            for directory in layout.standardDirectories {
                try withCName(directory.path.bytes) { (name) throws(Errno) in _ = try sys { mkdirat(rootFD, name, 0o755) } }
            }
            let caches = try openDirectory(at: rootFD, StandardDirectory.caches.path.bytes)
            defer { close(caches) }
            try writeNewFile(at: caches, ContainerLayout.cacheTagName, cacheDirectoryTag)
            try withCName(ContainerLayout.stateFolderName) { (name) throws(Errno) in _ = try sys { mkdirat(rootFD, name, 0o700) } }
            let stateFD = try openDirectory(at: rootFD, ContainerLayout.stateFolderName)
            defer { close(stateFD) }
            try writeNewFile(at: stateFD, groupIdentifierFile, leaf)
            try configure?(rootFD, stateFD)
            // The marker goes last: a store without it is never opened.
            try writeNewFile(at: stateFD, formatName, formatContents)
        }
    }

    /// Checks a list of group identifiers given on the command line: each valid, none
    /// twice, no two sharing a variable name (`group.a-b` and `group.a.b`).
    public static func checkGroupIdentifiers(_ identifiers: [String]) throws(UserError) -> [String] {
        var variables: [String: String] = [:]
        var unique: [String] = []
        for identifier in identifiers {
            if let problem = AppGroup.problem(with: identifier) { throw UserError.usage("--group \(identifier): \(problem)") }
            if unique.contains(identifier) { continue }
            let variable = AppGroup.environmentName(of: identifier)
            if let other = variables[variable] {
                throw UserError.usage("--group \(identifier) and --group \(other) would share the variable \(variable): rename one of the groups")
            }
            variables[variable] = identifier
            unique.append(identifier)
        }
        return unique
    }

    /// Records `identifiers` as the groups of the app container whose state folder is
    /// `stateFD`, replacing any list before (written aside, then renamed: old list or new).
    public static func writeMembership(_ identifiers: [String], stateFD: Int32) throws(Errno) {
        let aside = membershipFile + Array(".new".utf8)
        _ = withCName(aside) { unlinkat(stateFD, $0, 0) }
        try writeNewFile(at: stateFD, aside, Array(identifiers.map { $0 + "\n" }.joined().utf8), mode: 0o644)
        try withCName(aside) { (from) throws(Errno) in
            try withCName(membershipFile) { (to) throws(Errno) in _ = try sys { renameat(stateFD, from, stateFD, to) } }
        }
    }

    /// Records `identifiers` as this app container's groups (`writeMembership`).
    public func recordMembership(_ identifiers: [String]) throws(Errno) {
        try withExtendedLifetime(self) { () throws(Errno) in try Self.writeMembership(identifiers, stateFD: stateFD) }
    }

    /// The groups this app container belongs to (none for a group container, or an app
    /// made without `--group`). A list that does not parse is one clear line, never read
    /// as fewer groups.
    public func memberGroups() throws(UserError) -> [String] {
        guard !layout.isGroup else { return [] }
        let bytes: [UInt8]
        do {
            bytes = try readFile(at: stateFD, Self.membershipFile, limit: smallStateFileLimit)
        } catch {
            if error.code == ENOENT { return [] }
            throw UserError("cannot read the groups of \(path) (\(statePath)/groups): \(error); set them again with 'containerfs update \(path) --bundle … --group ID'")
        }
        let lines = String(decoding: bytes, as: UTF8.self).split(separator: "\n").map(String.init)
        for line in lines where AppGroup.problem(with: line) != nil {
            throw UserError("the groups of \(path) are damaged (\(statePath)/groups names no group id): set them again with 'containerfs update \(path) --bundle … --group ID'")
        }
        return lines
    }

    /// Opens the group container `identifier` beside this app's store, fd-relative: from
    /// the store's root through `..`, then the identifier with `O_NOFOLLOW`, so a symlink
    /// planted in the device folder leads nowhere. It must be the group named so and have
    /// the app store's owner. nil when there is none; an error when something else is there.
    public func openGroup(_ identifier: String, changing: Bool = false) throws(UserError) -> Store? {
        let path = groupPath(identifier)
        guard AppGroup.problem(with: identifier) == nil else { throw UserError("\(path): \(identifier) is not a group identifier") }
        let parentFD = withCName(Array("..".utf8)) { openat(rootFD, $0, clinux_O_PATH | O_DIRECTORY | O_CLOEXEC) }
        guard parentFD >= 0 else { throw UserError.failed("cannot open the device folder of \(self.path)", Errno.current) }
        defer { close(parentFD) }
        var info = stat()
        guard withCName(Array(identifier.utf8), { fstatat(parentFD, $0, &info, AT_SYMLINK_NOFOLLOW) }) == 0 else {
            if errno == ENOENT { return nil }
            throw UserError.failed("cannot reach the group container \(path)", Errno.current)
        }
        guard info.st_mode & S_IFMT == S_IFDIR else {
            throw UserError("\(path) is not a folder (a symlink, a file): a group container is a real folder beside its apps; move it away")
        }
        let group = try Self.open(at: parentFD, Array(identifier.utf8), path: path, changing: changing)
        var mine = stat(), theirs = stat()
        guard group.groupIdentifier == identifier else {
            throw UserError("\(path) is not the group container of \(identifier): move it away and make the group with 'containerfs create-group \(path)'")
        }
        guard fstat(rootFD, &mine) == 0, fstat(group.rootFD, &theirs) == 0, mine.st_uid == theirs.st_uid else {
            throw UserError("the group container \(path) belongs to another user than \(self.path): a group is shared only by its owner's apps")
        }
        return group
    }

    /// The real path of this store's root, with no symlink in it (from its descriptor):
    /// what is handed to a daemon that opens the store again by path.
    public var resolvedPath: String {
        (try? readLinkTarget("/proc/self/fd/\(rootFD)")) ?? path
    }

    /// The path of the group container `identifier` on this app's device: beside this store.
    public func groupPath(_ identifier: String) -> String {
        Self.groupPath(identifier, besideStore: path)
    }

    /// The path of the group container `identifier` beside the store at `storePath`.
    public static func groupPath(_ identifier: String, besideStore storePath: String) -> String {
        let parent = splitParent(storePath).parent
        return (parent == "/" ? "" : parent) + "/" + identifier
    }

    /// Makes the group containers of `identifiers` that do not exist beside `storePath`,
    /// as installing a member app makes its groups on iOS; returns those made.
    public static func createMissingGroups(_ identifiers: [String], besideStore storePath: String) throws(UserError) -> [String] {
        var made: [String] = []
        let app = try open(storePath, changing: false)
        for identifier in identifiers {
            if try app.openGroup(identifier) != nil { continue }
            let path = groupPath(identifier, besideStore: storePath)
            _ = try createGroup(at: path)
            made.append(path)
        }
        return made
    }
}

extension Store {
    /// Fails with one line when this is a group container: `command` needs an app's
    /// (a bundle, an Inbox, a program to run).
    public func requireApp(for command: String) throws(UserError) {
        guard let group = groupIdentifier else { return }
        throw UserError.usage("\(path) is the group container of \(group), which has no app: \(command) needs an app's container (a member reaches the group through its own 'containerfs run')")
    }
}

/// The target of the symlink at `path` (a /proc magic link here).
private func readLinkTarget(_ path: String) throws(Errno) -> String {
    var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
    let count = readlink(path, &buffer, buffer.count - 1)
    guard count > 0 else { throw Errno.current }
    return String(decoding: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
}
