import ArgumentParser
import ContainerPolicy
import ContainerSigning
import ContainerStore
import Foundation

struct Verify: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Check a container's bundle against the manifest signed at install.",
        discussion:
            "Prints one line per entry added, removed, or changed in content, mode, type or link target, or hard-linked to another name in the store, and a warning per symlink leading outside the bundle. "
            + "Exit status 0 only when the signature holds for the installer key and nothing changed; 1 otherwise, including a manifest or signature that is missing, truncated, edited or made with another key. "
            + "Files unchanged since they were last hashed (same inode, size, ctime and mtime) are taken from a cache; --full reads every file."
    )

    @Argument(help: "The container's store.")
    var store: String

    @Flag(help: "One JSON object.")
    var json = false

    @Flag(help: "Rehash every file, trusting no cache.")
    var full = false

    @Option(help: "The installer key the bundle was signed with (default: see docs/signing.md).")
    var key: String?

    func run() throws {
        try reportingErrors {
            let opened = try Store.open(store, changing: false)
            try opened.requireApp(for: "verify")
            try opened.requireInstalled()
            let installerKey = try InstallerKey.load(at: key)
            let result = BundleSignature.verify(opened, key: installerKey, full: full)
            let out = FileHandleOutput.standardOutput
            if json {
                out.write(try encode(result) + "\n")
            } else {
                for change in result.changes { out.write(change.description + "\n") }
                for link in result.outsideLinks {
                    out.write(
                        "warning: \(link.printablePath): symlink leads outside the bundle (\"\(ContainerPath.printable(link.target))\")\n")
                }
            }
            if let failure = result.failure(store: store, listed: !json) { throw failure }
            if !json {
                out.write(
                    "bundle \(ContainerPath.printable(result.bundleName)) of \(store) is intact: \(counted(result.entries, "entry", "entries")), \(counted(result.files, "file")), \(counted(result.bytes, "byte")); \(result.hashedFiles) hashed, \(result.cachedFiles) from the cache; signed by \(result.keyFingerprint)\n"
                )
            }
        }
    }

    /// The JSON form: every field of the text form, paths printable as in the audit log.
    private func encode(_ result: BundleVerification) throws -> String {
        struct Change: Encodable {
            let path: String
            let kinds: [BundleChange.Kind]
            let description: String
        }
        struct Warning: Encodable {
            let path: String
            let target: String
            let warning = "symlink leads outside the bundle"
        }
        struct Output: Encodable {
            let store: String
            let bundle: String
            let intact: Bool
            let problem: String?
            let changes: [Change]
            let warnings: [Warning]
            let entries: Int
            let files: Int
            let bytes: UInt64
            let hashedFiles: Int
            let hashedBytes: UInt64
            let cachedFiles: Int
            let key: String
        }
        let output = Output(
            store: store, bundle: ContainerPath.printable(result.bundleName), intact: result.isIntact,
            problem: result.problem?.description,
            changes: result.changes.map { Change(path: ContainerPath.printable($0.path), kinds: $0.kinds, description: $0.description) },
            warnings: result.outsideLinks.map { Warning(path: $0.printablePath, target: ContainerPath.printable($0.target)) },
            entries: result.entries, files: result.files, bytes: result.bytes,
            hashedFiles: result.hashedFiles, hashedBytes: result.hashedBytes, cachedFiles: result.cachedFiles,
            key: result.keyFingerprint)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.keyEncodingStrategy = .convertToSnakeCase
        return String(decoding: try encoder.encode(output), as: UTF8.self)
    }
}
