import ContainerPolicy
import ContainerStore
import Crypto
import Glibc

/// Signing a bundle at install, and checking it later (SPEC §5).
///
/// The state folder holds `bundle.manifest` (the canonical `BundleManifest`),
/// `bundle.sig` (the installer key's 64-byte Ed25519 signature of it) and `bundle.pub`
/// (the 32-byte public key that signed, so that a manifest signed by another key can be
/// told apart from an edited one). Trust comes only from the installer key: a store
/// re-signed with any other key fails, whatever `bundle.pub` says.
public enum BundleSignature {
    static let manifestName = Array(name: "bundle.manifest")
    static let signatureName = Array(name: "bundle.sig")
    static let publicKeyName = Array(name: "bundle.pub")

    /// Records and signs the bundle `bundleName` in the store root `rootFD`, writing the
    /// manifest, signature and public key into `stateFD` (none may exist yet), and seeds
    /// the verification cache. Called on the container being built, before it is renamed
    /// into place, so the manifest describes the copy in the store.
    public static func sign(rootFD: Int32, stateFD: Int32, bundleName: [UInt8], key: InstallerKey) throws {
        let scan = BundleScan.scan(rootFD: rootFD, bundleName: bundleName)
        for entry in scan.entries where entry.kind == .special || (entry.kind == .file && entry.digest.isEmpty) {
            throw UserError("cannot sign the bundle: \(entry.printablePath) is \(entry.kind == .special ? "a special file" : "unreadable")")
        }
        let manifest = BundleManifest(entries: scan.entries).encoded()
        try writeNewFile(at: stateFD, manifestName, manifest)
        try writeNewFile(at: stateFD, signatureName, try key.signature(for: manifest))
        try writeNewFile(at: stateFD, publicKeyName, key.publicKey)
        VerificationCache.write(scan.cache, stateFD: stateFD, key: key.cacheKey)
    }

    /// Checks the store's bundle against its signed manifest. Reads only the files whose
    /// identity is not in the verification cache, or every file with `full`; refreshes
    /// the cache when it can.
    public static func verify(_ store: Store, key: InstallerKey, full: Bool = false) -> BundleVerification {
        var result = BundleVerification(bundleName: store.layout.bundleName, keyFingerprint: key.fingerprint)
        let manifestBytes: [UInt8]
        do {
            manifestBytes = try signedManifest(stateFD: store.stateFD, key: key)
        } catch {
            result.problem = error
            return result
        }
        let manifest: BundleManifest
        do {
            manifest = try BundleManifest(decoding: manifestBytes)
        } catch {
            result.problem = .malformedManifest(error.description)
            return result
        }
        if let top = manifest.entries.first?.path, top != store.layout.bundleName {
            result.problem = .otherBundle(signed: top)
            return result
        }
        let cacheKey = key.cacheKey
        let cache = full ? [:] : VerificationCache.read(stateFD: store.stateFD, key: cacheKey)
        let signedSizes = Dictionary(manifest.entries.lazy.filter { $0.kind == .file }.map { ($0.path, $0.size) }, uniquingKeysWith: { first, _ in first })
        let scan = BundleScan.scan(rootFD: store.rootFD, bundleName: store.layout.bundleName, cache: cache, signedSizes: signedSizes)
        if scan.cache != cache { VerificationCache.write(scan.cache, stateFD: store.stateFD, key: cacheKey) }
        result.changes = manifest.changes(to: scan.entries)
        result.outsideLinks = manifest.linksLeavingTheBundle
        result.entries = manifest.entries.count
        result.files = manifest.entries.count { $0.kind == .file }
        result.bytes = manifest.entries.reduce(0) { $0 + ($1.kind == .file ? $1.size : 0) }
        result.hashedFiles = scan.hashedFiles
        result.hashedBytes = scan.hashedBytes
        result.cachedFiles = scan.cachedFiles
        return result
    }

    /// The SHA-256 of the store's manifest as signed: names the installed bundle exactly
    /// (a backup records it instead of the bundle). Nil when the store has no manifest.
    public static func manifestDigest(of store: Store) -> [UInt8]? {
        guard let manifest = try? readFile(at: store.stateFD, manifestName) else { return nil }
        return Array(SHA256.hash(data: manifest))
    }

    /// The manifest's bytes, once its signature holds for the installer key.
    private static func signedManifest(stateFD: Int32, key: InstallerKey) throws(BundleVerification.Problem) -> [UInt8] {
        func read(_ name: [UInt8]) throws(BundleVerification.Problem) -> [UInt8] {
            do {
                return try readFile(at: stateFD, name)
            } catch {
                if error.code == ENOENT { throw .missing(String(decoding: name, as: UTF8.self)) }
                throw .unreadable(String(decoding: name, as: UTF8.self), error)
            }
        }
        let manifest = try read(manifestName)
        let signature = try read(signatureName)
        guard signature.count == 64 else {
            throw .badSignatureLength(signature.count)
        }
        if key.isValidSignature(signature, for: manifest) { return manifest }
        // Only to say which failure this is: the stored public key is never trusted.
        if let signer = try? readFile(at: stateFD, publicKeyName), signer != key.publicKey,
            let signerKey = try? Curve25519.Signing.PublicKey(rawRepresentation: signer),
            signerKey.isValidSignature(signature, for: manifest)
        {
            throw .otherKey(signer: InstallerKey.fingerprint(of: signer), installer: key.fingerprint, path: key.path)
        }
        throw .signatureMismatch
    }
}

/// The outcome of `BundleSignature.verify`.
public struct BundleVerification: Sendable {
    /// Why the manifest itself cannot be trusted; then nothing was compared.
    public enum Problem: Error, Sendable, Equatable {
        /// A state file is missing: `bundle.manifest` or `bundle.sig`.
        case missing(String)
        case unreadable(String, Errno)
        /// `bundle.sig` is not 64 bytes (truncated or grown).
        case badSignatureLength(Int)
        /// The manifest or signature was changed after signing.
        case signatureMismatch
        /// A valid signature, but by another key than the installer key.
        case otherKey(signer: String, installer: String, path: String)
        /// Signed, yet not a manifest this version can read.
        case malformedManifest(String)
        /// The manifest is of another bundle than the one the store names.
        case otherBundle(signed: [UInt8])

        /// What is wrong, as part of one line.
        public var description: String {
            switch self {
            case .missing(let name): "its \(name) is missing from .containerfs/"
            case .unreadable(let name, let error): "its .containerfs/\(name) cannot be read (\(error))"
            case .badSignatureLength(let count):
                "its signature .containerfs/bundle.sig is \(count < 64 ? "truncated" : "too long") (\(count) bytes, not 64)"
            case .signatureMismatch:
                "its manifest does not match its signature: .containerfs/bundle.manifest or bundle.sig was edited after signing"
            case .otherKey(let signer, let installer, let path):
                "its manifest was signed by another key (\(signer)), not the installer key \(installer) (\(path))"
            case .malformedManifest(let why): "its signed manifest cannot be read: \(why)"
            case .otherBundle(let signed):
                "the signed manifest is of \(ContainerPath.printable(signed)), but the store names another bundle in .containerfs/bundle-name"
            }
        }
    }

    /// The bundle's name in the store.
    public let bundleName: [UInt8]
    /// The installer key's fingerprint.
    public let keyFingerprint: String
    /// Set when the manifest could not be trusted.
    public var problem: Problem?
    /// Every entry added, removed or changed, by path.
    public var changes: [BundleChange] = []
    /// Symlinks recorded in the manifest that lead outside the bundle: a warning only.
    public var outsideLinks: [BundleEntry] = []
    /// Entries in the manifest, files among them.
    public var entries = 0, files = 0
    /// The files' total size, as signed.
    public var bytes: UInt64 = 0
    /// Files read and hashed this time.
    public var hashedFiles = 0
    /// Bytes read and hashed this time.
    public var hashedBytes: UInt64 = 0
    /// Files vouched for by the verification cache, not read.
    public var cachedFiles = 0

    /// True when the manifest holds and the bundle matches it.
    public var isIntact: Bool { problem == nil && changes.isEmpty }

    /// The one-line error `verify` and `mount` end with when the bundle does not hold;
    /// nil when it does.
    public func failure(store: String, listed: Bool = false) -> UserError? {
        // Not `create`, which refuses an existing store: `update` installs afresh, data kept.
        let advice = "the app does not launch — reinstall it with 'containerfs update \(store) --bundle PATH/NAME.app' (its data is kept)"
        if let problem {
            var advice = advice
            if case .otherKey = problem { advice += ", or pass --key with the key it was installed with" }
            return UserError("bundle of \(store) cannot be verified: \(problem.description); \(advice)")
        }
        guard !changes.isEmpty else { return nil }
        let what: String
        if listed {
            what = "\(counted(changes.count, "entry", "entries")) (listed above)"
        } else {
            let shown = changes.prefix(3).map(\.summary).joined(separator: ", ")
            what = shown + (changes.count > 3 ? " and \(changes.count - 3) more" : "")
        }
        return UserError("bundle of \(store) was changed: \(what); \(advice)")
    }

    /// Fails with the one-line error unless the bundle holds: what `mount` and `run` call
    /// before anything else.
    public static func requireIntact(_ store: Store, keyPath: String?) throws(UserError) {
        // A group container has no bundle: nothing to verify (docs/groups.md).
        if store.layout.isGroup { return }
        try store.requireInstalled()
        let key = try InstallerKey.load(at: keyPath)
        if let failure = BundleSignature.verify(store, key: key).failure(store: store.path) { throw failure }
    }
}
