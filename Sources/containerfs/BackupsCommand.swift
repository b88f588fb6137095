import ArgumentParser
import ContainerBackup
import ContainerObjectStore
import ContainerPolicy
import ContainerStore

/// `containerfs backups s3://BUCKET[/PREFIX] [--json]`.
struct BackupsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "backups",
        abstract: "List the backups in an S3-compatible object store: key, size, time, container.",
        discussion: """
            Lists the objects under PREFIX and reads the first bytes of each for its manifest; \
            objects that are not containerfs backups are counted, not listed. Configured as the \
            AWS tools are (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION, \
            AWS_ENDPOINT_URL, AWS_PROFILE, AWS_CA_BUNDLE). See docs/backup.md.
            """)

    @Argument(help: "s3://BUCKET or s3://BUCKET/PREFIX.")
    var location: String

    @Flag(help: "Print JSON.")
    var json = false

    func run() throws {
        try reportingErrors {
            let url = try ObjectURL(parsing: location, requireKey: false)
            let (backups, others) = try ObjectStoreBackup.list(bucket: url.bucket, prefix: url.key, config: try ObjectStoreConfig.load())
            if json {
                let items: [[String: Any]] = backups.map {
                    ["key": $0.object.key, "size": $0.object.size, "lastModified": $0.object.lastModified,
                     "bundle": ContainerPath.printable($0.bundleName)]
                }
                printJSON(["location": location, "backups": items, "otherObjects": others])
                return
            }
            var out = ""
            for backup in backups {
                // What the server and the archive say, with their control characters escaped.
                let time = ContainerPath.printable(Array(backup.object.lastModified.utf8), escapingControls: true)
                let bundle = ContainerPath.printable(backup.bundleName, escapingControls: true)
                out += "\(time)  \(formatBytes(backup.object.size).padding(10))  \(bundle)  s3://\(url.bucket)/\(ContainerPath.printable(Array(backup.object.key.utf8), escapingControls: true))\n"
            }
            out += counted(backups.count, "backup") + (others > 0 ? " (and \(counted(others, "other object")))" : "") + "\n"
            FileHandleOutput.standardOutput.write(out)
        }
    }
}

extension String {
    /// Right-aligned in `width` columns.
    fileprivate func padding(_ width: Int) -> String { String(repeating: " ", count: max(0, width - count)) + self }
}
