import ContainerPolicy
import Glibc

/// What is kept of an offloaded app (SPEC §12, iOS's "Offload App"): its bundle's name,
/// the SHA-256 of its signed manifest and its size, in `.containerfs/offloaded`. The
/// signed manifest stays too; the data stays; only the bundle folder is gone.
///
/// The record is the commit: written whole (renamed into place) before the bundle is
/// moved away, so a crash in between leaves a record and a bundle, and the next
/// `Store.open` finishes the offload. `update` reinstalls and removes the record.
public struct OffloadRecord: Sendable, Equatable {
    static let fileName = Array(name: "offloaded")
    static let magic = "containerfs offloaded 1"

    /// The offloaded bundle's name (`Notes.app`).
    public var bundleName: [UInt8]
    /// The SHA-256 of its signed manifest, in hex (empty when it had none).
    public var manifestDigest: String
    /// Its files' total size, in bytes, and their number.
    public var bytes: UInt64
    public var files: Int

    /// A record of the bundle `bundleName`.
    public init(bundleName: [UInt8], manifestDigest: String, bytes: UInt64, files: Int) {
        self.bundleName = bundleName
        self.manifestDigest = manifestDigest
        self.bytes = bytes
        self.files = files
    }

    /// The record's bytes: the magic line, then the digest, size and file count (the name
    /// is `bundle-name`'s, which stays).
    func encoded() -> [UInt8] {
        Array("\(Self.magic)\n\(manifestDigest)\n\(bytes)\n\(files)\n".utf8)
    }

    /// Reads the store's record; nil when the app is installed (no record).
    static func read(stateFD: Int32, bundleName: [UInt8]) throws(Errno) -> OffloadRecord? {
        let bytes: [UInt8]
        do {
            bytes = try readFile(at: stateFD, fileName, limit: smallStateFileLimit)
        } catch {
            if error.code == ENOENT { return nil }
            throw error
        }
        let lines = String(decoding: bytes, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        guard lines.count >= 4, lines[0] == magic, let size = UInt64(lines[2]), let files = Int(lines[3]) else { throw Errno(EBADMSG) }
        return OffloadRecord(bundleName: bundleName, manifestDigest: lines[1], bytes: size, files: files)
    }

    /// True when a record exists and the bundle is still there: an offload a crash cut short.
    static func isUnfinished(rootFD: Int32, stateFD: Int32) -> Bool {
        guard BundleSwitch.exists(at: stateFD, fileName), let name = try? readBundleName(at: stateFD) else { return false }
        return BundleSwitch.exists(at: rootFD, name)
    }

    /// Moves the bundle of an offloaded store into a working folder and removes it; nothing
    /// to do when it is installed or already gone.
    static func finish(rootFD: Int32, stateFD: Int32) throws(Errno) {
        guard isUnfinished(rootFD: rootFD, stateFD: stateFD) else { return }
        let name = try readBundleName(at: stateFD)
        let (working, _) = try StagingName.create(beside: Array(name: "bundle"), "offload") { mkdirat(stateFD, $0, 0o700) }
        let workingFD = try openDirectory(at: stateFD, working)
        defer { close(workingFD) }
        try BundleSwitch.rename(rootFD, name, workingFD, name, 0)
        TestCrashPoint.reach("offload-moved")
        removeTree(at: stateFD, working)
    }

    /// Offloads the store's app: writes `record`, then removes the bundle. The caller holds
    /// `BundleSwitch.Lock`, and the store is neither mounted nor run.
    public static func offload(_ store: Store, _ record: OffloadRecord) throws(UserError) {
        do {
            try BundleSwitch.writeAtomically(at: store.stateFD, fileName, record.encoded())
        } catch {
            throw UserError("cannot offload \(store.path): \(error); nothing was changed")
        }
        TestCrashPoint.reach("offload-recorded")
        do {
            try finish(rootFD: store.rootFD, stateFD: store.stateFD)
        } catch {
            throw UserError("the offload of \(store.path) stopped half-way (\(error)): it is finished the next time the store is opened")
        }
    }

    /// The one line `mount`, `run` and `verify` refuse an offloaded app with.
    public func refusal(store: String) -> UserError {
        let name = ContainerPath.printable(bundleName)
        return UserError(
            "the app \(name) of \(store) is offloaded (its data is kept, its bundle removed): reinstall it with 'containerfs update \(store) --bundle PATH/\(name)'"
        )
    }
}

extension Store {
    /// Fails with the one line naming `update` when the app is offloaded.
    public func requireInstalled() throws(UserError) {
        if let offloaded { throw offloaded.refusal(store: path) }
    }
}
