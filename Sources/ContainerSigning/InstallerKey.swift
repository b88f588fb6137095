import ContainerStore
import Crypto
import Foundation
import Glibc

/// The Ed25519 key that signs every bundle this user installs (SPEC §5).
///
/// It lives outside every store, so that whoever can write a store cannot re-sign a
/// changed bundle. Where it lives, in order:
///
/// 1. `--key PATH`, when given;
/// 2. `$XDG_CONFIG_HOME/containerfs/installer.key`, when `XDG_CONFIG_HOME` is an absolute
///    path that does not exist yet or is a folder owned by this user;
/// 3. `HOME/.config/containerfs/installer.key`, with HOME the first of `$HOME` and the
///    password database's home that is an existing folder owned by this user (so
///    `setpriv` or `sudo` keeping root's `HOME` or `XDG_CONFIG_HOME` does not send
///    another user there);
/// 4. otherwise `/var/tmp/containerfs-UID/installer.key`, in a folder of mode 0700 owned by
///    this user, checked on every use as tmux checks its socket folder — for system users
///    without a home. Making a key there says so.
///
/// The key file is made on first use by `create`, mode 0600 in a folder of mode 0700, and
/// never by `verify` or `mount`. It is text: a header line, then the 32-byte private key
/// in base64.
public struct InstallerKey: Sendable {
    /// Where the key file is.
    public let path: String
    /// Set when this call made the key: a line telling the user where it went.
    public let creationNote: String?
    /// The raw private key; kept as bytes so the value is `Sendable`.
    private let privateKeyBytes: [UInt8]
    var privateKey: Curve25519.Signing.PrivateKey { try! Curve25519.Signing.PrivateKey(rawRepresentation: privateKeyBytes) }

    /// The 32-byte Ed25519 public key.
    public var publicKey: [UInt8] { Array(privateKey.publicKey.rawRepresentation) }

    /// `SHA256:` and the base64 of the public key's SHA-256, as `ssh-keygen -l` shows keys.
    public var fingerprint: String { Self.fingerprint(of: publicKey) }

    /// The fingerprint of a raw Ed25519 public key.
    public static func fingerprint(of publicKey: [UInt8]) -> String {
        let digest = Data(SHA256.hash(data: publicKey)).base64EncodedString()
        return "SHA256:" + digest.prefix { $0 != "=" }
    }

    static let header = "containerfs installer key 1 (Ed25519); keep it secret"
    static let fileName = "installer.key"

    private init(path: String, privateKey: Curve25519.Signing.PrivateKey, creationNote: String? = nil) {
        self.path = path
        self.privateKeyBytes = Array(privateKey.rawRepresentation)
        self.creationNote = creationNote
    }

    /// A key held in memory only, for tests.
    init(privateKey: Curve25519.Signing.PrivateKey, path: String = "(memory)") {
        self.init(path: path, privateKey: privateKey)
    }

    /// Signs `message`.
    func signature(for message: [UInt8]) throws -> [UInt8] {
        Array(try privateKey.signature(for: message))
    }

    /// True when `signature` is this key's signature of `message`.
    func isValidSignature(_ signature: [UInt8], for message: [UInt8]) -> Bool {
        privateKey.publicKey.isValidSignature(signature, for: message)
    }

    /// The key that authenticates the verification cache, derived from the private key so
    /// that whoever can write the store cannot forge cache entries.
    var cacheKey: SymmetricKey {
        HKDF<SHA256>.deriveKey(
            inputKeyMaterial: SymmetricKey(data: privateKey.rawRepresentation),
            info: Array("containerfs verification cache 1".utf8), outputByteCount: 32)
    }

    // MARK: Finding, loading, making

    /// Loads the key at `path` (or the default place); never makes one.
    public static func load(at path: String?, environment: [String: String] = ProcessInfo.processInfo.environment) throws(UserError)
        -> InstallerKey
    {
        let location = try location(path, environment)
        guard let key = try read(location.file) else {
            let hint = path == nil ? "pass --key with the key it was installed with" : "check the path"
            throw UserError(
                "no installer key at \(location.file): verifying a bundle needs the key that signed it; \(hint), or, the key lost, move the data to a fresh install: 'containerfs backup STORE FILE.tar', then 'containerfs restore FILE.tar NEWSTORE --bundle PATH/NAME.app'"
            )
        }
        return key
    }

    /// Loads the key at `path` (or the default place), making it first if there is none.
    public static func loadOrCreate(at path: String?, environment: [String: String] = ProcessInfo.processInfo.environment) throws(UserError)
        -> InstallerKey
    {
        let location = try location(path, environment)
        if let key = try read(location.file) { return key }
        let folder = Directory.holding(location.file)
        if path == nil {
            try makeFolders(folder)
        } else {
            var info = stat()
            guard stat(folder, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else {
                throw UserError.usage("cannot make the installer key \(location.file): folder \(folder) does not exist; create it first")
            }
        }
        let privateKey = Curve25519.Signing.PrivateKey()
        let text = header + "\n" + privateKey.rawRepresentation.base64EncodedString() + "\n"
        // Written aside and linked into place: a key is never seen half-written, and when
        // two installs make one at the same moment, the first link wins and both use it.
        let staging = location.file + ".new-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let fd = Glibc.open(staging, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            throw UserError(
                "cannot make the installer key \(location.file): \(Errno.current); set XDG_CONFIG_HOME to a folder you can write, or pass --key PATH"
            )
        }
        defer { unlink(staging) }
        let bytes = Array(text.utf8)
        let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        let synced = fsync(fd) == 0
        close(fd)
        guard written == bytes.count, synced else {
            throw UserError.failed("cannot write the installer key \(location.file)", Errno.current)
        }
        if link(staging, location.file) != 0 {
            let error = Errno.current
            guard error.code == EEXIST, let key = try read(location.file) else {
                throw UserError.failed("cannot make the installer key \(location.file)", error)
            }
            return key
        }
        let note =
            "made a new installer key at \(location.file)" + (location.reason.map { " (\($0))" } ?? "")
            + "; it signs every bundle you install: keep it"
        return InstallerKey(path: location.file, privateKey: privateKey, creationNote: note)
    }

    /// Reads the key file; nil when there is none.
    private static func read(_ path: String) throws(UserError) -> InstallerKey? {
        let fd = Glibc.open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            if errno == ENOENT { return nil }
            throw UserError.failed("cannot read the installer key \(path)", Errno.current)
        }
        defer { close(fd) }
        var info = stat()
        fstat(fd, &info)
        guard info.st_mode & S_IFMT == S_IFREG else {
            throw UserError("installer key \(path) is not a file: name the key file made by 'containerfs create'")
        }
        // As ssh refuses a private key others can read: they could sign a changed bundle.
        guard info.st_mode & 0o077 == 0 else {
            throw UserError(
                "installer key \(path) is accessible by other users (mode \(String(info.st_mode & 0o777, radix: 8))): chmod 600 \(path)")
        }
        var contents = [UInt8](repeating: 0, count: 4096)
        let count = contents.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
        let lines = String(decoding: contents[0..<max(count, 0)], as: UTF8.self).split(separator: "\n")
        guard lines.count == 2, lines[0] == header, let raw = Data(base64Encoded: String(lines[1])),
            let privateKey = try? Curve25519.Signing.PrivateKey(rawRepresentation: raw)
        else {
            throw UserError("\(path) is not a containerfs installer key: name the key file made by 'containerfs create'")
        }
        return InstallerKey(path: path, privateKey: privateKey)
    }

    // MARK: The default place

    /// A key file's path, and why it is there when that is not the usual place.
    struct Location: Equatable {
        let file: String
        let reason: String?
    }

    /// `path` if given, else the default place.
    private static func location(_ path: String?, _ environment: [String: String]) throws(UserError) -> Location {
        if let path { return Location(file: path, reason: nil) }
        return try defaultLocation(environment)
    }

    /// Where the key lives when `--key` is not given (see the type's comment).
    static func defaultLocation(_ environment: [String: String]) throws(UserError) -> Location {
        let uid = geteuid()
        // Like HOME below, an XDG_CONFIG_HOME of another user's (inherited through setpriv
        // or sudo) is passed over; one that does not exist yet is made.
        if let config = environment["XDG_CONFIG_HOME"], config.hasPrefix("/"), !exists(config) || isOwnedFolder(config, uid: uid) {
            return Location(file: config + "/containerfs/" + fileName, reason: nil)
        }
        var homes: [String] = []
        if let home = environment["HOME"], home.hasPrefix("/") { homes.append(home) }
        if let entry = getpwuid(uid), let directory = entry.pointee.pw_dir {
            homes.append(String(cString: directory))
        }
        for home in homes where isOwnedFolder(home, uid: uid) {
            return Location(file: home + "/.config/containerfs/" + fileName, reason: nil)
        }
        let folder = "/var/tmp/containerfs-\(uid)"
        var info = stat()
        if lstat(folder, &info) == 0, !(info.st_mode & S_IFMT == S_IFDIR && info.st_uid == uid && info.st_mode & 0o077 == 0) {
            throw UserError(
                "\(folder) is not a private folder of yours, so the installer key cannot be kept there: set XDG_CONFIG_HOME to a folder you can write, or pass --key PATH"
            )
        }
        return Location(
            file: folder + "/" + fileName, reason: "this user has no home folder; set XDG_CONFIG_HOME or pass --key to keep it elsewhere")
    }

    /// False only when nothing is there: a path that cannot be looked at (another user's
    /// home) counts as there, and not ours.
    private static func exists(_ path: String) -> Bool {
        var info = stat()
        return lstat(path, &info) == 0 || errno != ENOENT
    }

    private static func isOwnedFolder(_ path: String, uid: uid_t) -> Bool {
        var info = stat()
        return stat(path, &info) == 0 && info.st_mode & S_IFMT == S_IFDIR && info.st_uid == uid
    }

    /// Makes the key's folder and any missing parent, the ones it makes mode 0700.
    private static func makeFolders(_ folder: String) throws(UserError) {
        var prefix = ""
        for component in folder.split(separator: "/") {
            prefix += "/" + component
            if mkdir(prefix, 0o700) != 0, errno != EEXIST {
                throw UserError(
                    "cannot make the installer key's folder \(prefix): \(Errno.current); set XDG_CONFIG_HOME to a folder you can write, or pass --key PATH"
                )
            }
        }
        var info = stat()
        guard lstat(folder, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else {
            throw UserError("installer key folder \(folder) is not a folder: remove it, or pass --key PATH")
        }
        if folder.hasPrefix("/var/tmp/"), info.st_uid != geteuid() || info.st_mode & 0o077 != 0 {
            throw UserError("\(folder) is not a private folder of yours: set XDG_CONFIG_HOME to a folder you can write, or pass --key PATH")
        }
    }
}
