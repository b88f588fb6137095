import ContainerPolicy
import ContainerStore
import Foundation

/// `s3://BUCKET/KEY` or `s3://BUCKET[/PREFIX]`: where in an object store.
public struct ObjectURL: Sendable, CustomStringConvertible {
    /// The bucket's name.
    public let bucket: String
    /// The key (or prefix), without a leading `/`; may be empty for a listing.
    public let key: String

    /// True when `text` names an object store (`s3://…`) rather than a local path.
    public static func isObjectURL(_ text: String) -> Bool { text.hasPrefix("s3://") }

    /// Parses `s3://BUCKET/KEY`; `requireKey` for an object (not a listing).
    public init(parsing text: String, requireKey: Bool) throws(UserError) {
        guard text.hasPrefix("s3://") else { throw UserError.usage("\(text) is not an s3:// URL: write s3://BUCKET/KEY (backup, restore) or s3://BUCKET[/PREFIX] (backups)") }
        let rest = text.dropFirst("s3://".count)
        let bucket = String(rest.prefix { $0 != "/" })
        let key = String(rest.dropFirst(bucket.count).drop { $0 == "/" })
        // S3's bucket names: 3 to 63 lowercase letters, digits, dots and hyphens.
        let allowed = Set("abcdefghijklmnopqrstuvwxyz0123456789.-")
        guard (3...63).contains(bucket.count), bucket.allSatisfy(allowed.contains) else {
            throw UserError.usage("\(text): '\(bucket)' is not a bucket name (3 to 63 lowercase letters, digits, dots, hyphens)")
        }
        if requireKey, key.isEmpty || key.hasSuffix("/") {
            throw UserError.usage("\(text) names no object: give a key, as in s3://\(bucket)/notes.tar")
        }
        guard key.utf8.count <= 1024 else { throw UserError.usage("\(text): the key is longer than S3's 1024 bytes") }
        self.bucket = bucket
        self.key = key
    }

    /// As messages show it: the key's control characters escaped (a key comes from a
    /// listing, which the server wrote).
    public var description: String { Self.shown(bucket: bucket, key: key) }

    /// `s3://BUCKET/KEY` (`s3://BUCKET` without a key) with the key's control characters
    /// escaped, as `ContainerPath.description` escapes a name.
    public static func shown(bucket: String, key: String) -> String {
        key.isEmpty ? "s3://\(bucket)" : "s3://\(bucket)/\(ContainerPath.printable(Array(key.utf8), escapingControls: true))"
    }
}

/// Credentials for signing requests. Never printed: `description` shows the key id only.
public struct ObjectStoreCredentials: Sendable, CustomStringConvertible {
    let accessKeyID: String
    let secretAccessKey: String
    let sessionToken: String?

    public var description: String { "access key \(accessKeyID)" }
}

/// Where the object store is and how to sign for it, found as the AWS tools find it
/// (SPEC §13): the environment first, then the profile's `~/.aws/credentials` and
/// `~/.aws/config`.
public struct ObjectStoreConfig: Sendable {
    /// The endpoint's scheme, host and port (`https://s3.eu-west-1.amazonaws.com`), or a
    /// custom one from `AWS_ENDPOINT_URL`.
    public let endpoint: String
    /// True for a custom endpoint: path-style URLs (`ENDPOINT/BUCKET/KEY`), which every
    /// S3-compatible server understands.
    public let pathStyle: Bool
    public let region: String
    let credentials: ObjectStoreCredentials
    /// `AWS_CA_BUNDLE`, for an `https` endpoint.
    let caBundle: String?

    /// Reads the configuration from `environment` and the profile files.
    public static func load(environment: [String: String] = ProcessInfo.processInfo.environment) throws(UserError) -> ObjectStoreConfig {
        let home = environment["HOME"] ?? NSHomeDirectory()
        let profile = environment["AWS_PROFILE"] ?? environment["AWS_DEFAULT_PROFILE"] ?? "default"
        let credentialsPath = environment["AWS_SHARED_CREDENTIALS_FILE"] ?? home + "/.aws/credentials"
        let configPath = environment["AWS_CONFIG_FILE"] ?? home + "/.aws/config"
        let credentialsFile = IniFile(path: credentialsPath)
        let configFile = IniFile(path: configPath)
        // ~/.aws/credentials names a section by the profile; ~/.aws/config as [profile NAME]
        // (but [default] for the default one).
        let fromCredentials = credentialsFile?.sections[profile] ?? [:]
        let fromConfig = configFile?.sections[profile == "default" ? "default" : "profile \(profile)"] ?? configFile?.sections[profile] ?? [:]
        if environment["AWS_PROFILE"] != nil, fromCredentials.isEmpty, fromConfig.isEmpty {
            throw UserError("no profile '\(profile)' in \(credentialsPath) or \(configPath): fix AWS_PROFILE or add the profile")
        }
        func setting(_ variable: String, _ key: String) -> String? {
            if let value = environment[variable], !value.isEmpty { return value }
            return fromCredentials[key] ?? fromConfig[key]
        }

        let credentials: ObjectStoreCredentials
        if let id = environment["AWS_ACCESS_KEY_ID"], !id.isEmpty {
            guard let secret = environment["AWS_SECRET_ACCESS_KEY"], !secret.isEmpty else {
                throw UserError("AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not: set both")
            }
            credentials = ObjectStoreCredentials(accessKeyID: id, secretAccessKey: secret, sessionToken: nonEmpty(environment["AWS_SESSION_TOKEN"]))
        } else if let id = fromCredentials["aws_access_key_id"] ?? fromConfig["aws_access_key_id"],
                  let secret = fromCredentials["aws_secret_access_key"] ?? fromConfig["aws_secret_access_key"] {
            credentials = ObjectStoreCredentials(accessKeyID: id, secretAccessKey: secret,
                                                 sessionToken: fromCredentials["aws_session_token"] ?? fromConfig["aws_session_token"])
        } else {
            throw UserError("no credentials for the object store: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE naming a profile in ~/.aws/credentials")
        }
        // A line break would end the header curl builds.
        if [credentials.accessKeyID, credentials.secretAccessKey, credentials.sessionToken ?? ""].contains(where: { $0.contains(where: \.isNewline) }) {
            throw UserError("the object store's credentials hold a line break: check them")
        }
        let region = setting("AWS_REGION", "region") ?? nonEmpty(environment["AWS_DEFAULT_REGION"]) ?? "us-east-1"
        guard !region.isEmpty, region.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" }), region.utf8.count <= 64 else {
            throw UserError("'\(region)' is not a region name: fix AWS_REGION")
        }
        var endpoint: String
        let custom = setting("AWS_ENDPOINT_URL_S3", "endpoint_url") ?? nonEmpty(environment["AWS_ENDPOINT_URL"])
        if let custom {
            endpoint = custom
            while endpoint.hasSuffix("/") { endpoint.removeLast() }
            guard endpoint.hasPrefix("http://") || endpoint.hasPrefix("https://"),
                  let url = URLComponents(string: endpoint), url.host?.isEmpty == false, url.path.isEmpty, url.query == nil, url.user == nil
            else {
                throw UserError("AWS_ENDPOINT_URL '\(Self.withoutUserInfo(custom))' is not an http:// or https:// URL of a server (scheme, host, port; no path, no user or password)")
            }
        } else {
            endpoint = "https://s3.\(region).amazonaws.com"
        }
        return ObjectStoreConfig(endpoint: endpoint, pathStyle: custom != nil, region: region, credentials: credentials,
                                 caBundle: nonEmpty(environment["AWS_CA_BUNDLE"]))
    }

    /// `url` without a `user:password@` part, which an error line must never print: what
    /// follows the scheme up to the last `@` before the first `/`, `?` or `#` goes.
    static func withoutUserInfo(_ url: String) -> String {
        guard let scheme = url.range(of: "://") else { return url }
        let rest = url[scheme.upperBound...]
        let authorityEnd = rest.firstIndex { $0 == "/" || $0 == "?" || $0 == "#" } ?? rest.endIndex
        guard let at = rest[..<authorityEnd].lastIndex(of: "@") else { return url }
        return String(url[..<scheme.upperBound]) + "…@" + String(rest[rest.index(after: at)...])
    }

    /// The URL of `key` in `bucket` (already percent-encoded), with `query` (already in
    /// SigV4's canonical form). AWS's own endpoint takes the bucket in the host name
    /// (virtual-hosted style), unless the name has dots, which TLS names cannot match.
    func url(bucket: String, key: String, query: String) -> String {
        let path = ObjectStoreConfig.encodePath(key)
        let base: String
        if pathStyle || bucket.contains(".") {
            base = "\(endpoint)/\(bucket)/\(path)"
        } else {
            let host = endpoint.dropFirst("https://".count)
            base = "https://\(bucket).\(host)/\(path)"
        }
        return query.isEmpty ? base : base + "?" + query
    }

    /// The server's name for messages (no credentials are ever in it).
    public var endpointName: String { endpoint }

    /// A key as S3 signs it: every byte but the unreserved ones and `/` percent-encoded.
    static func encodePath(_ key: String) -> String { encode(key, keepSlash: true) }

    /// A query string in SigV4's canonical form: names sorted, names and values encoded,
    /// `=` even for an empty value.
    static func canonicalQuery(_ items: [(String, String)]) -> String {
        let pairs: [(name: String, value: String)] = items.map { item in
            (encode(item.0, keepSlash: false), encode(item.1, keepSlash: false))
        }
        // Encoded, every character is ASCII: String's order is byte order.
        let sorted = pairs.sorted { (a, b) -> Bool in a.name == b.name ? a.value < b.value : a.name < b.name }
        return sorted.map { $0.name + "=" + $0.value }.joined(separator: "&")
    }

    /// RFC 3986's percent-encoding of all but unreserved characters (SigV4's UriEncode).
    static func encode(_ text: String, keepSlash: Bool) -> String {
        var out = ""
        let hexDigits = Array("0123456789ABCDEF")
        for byte in text.utf8 {
            if isUnreserved(byte) || (keepSlash && byte == 0x2F) {
                out.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                out += "%"
                out.append(hexDigits[Int(byte >> 4)])
                out.append(hexDigits[Int(byte & 15)])
            }
        }
        return out
    }
}

/// RFC 3986's unreserved characters: letters, digits, `-`, `.`, `_`, `~`.
private func isUnreserved(_ byte: UInt8) -> Bool {
    (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte) || (0x30...0x39).contains(byte) || [0x2D, 0x2E, 0x5F, 0x7E].contains(byte)
}

private func nonEmpty(_ value: String?) -> String? {
    guard let value, !value.isEmpty else { return nil }
    return value
}

/// An AWS configuration file: `[section]` headers and `key = value` lines; `#` and `;`
/// start comments. Nothing from it is ever printed.
struct IniFile {
    var sections: [String: [String: String]] = [:]

    init?(path: String) {
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        self.init(text: String(decoding: data, as: UTF8.self))
    }

    init(text: String) {
        var current: String?
        for rawLine in text.split(whereSeparator: \.isNewline) {
            let line = rawLine.trimmingCharacters(in: .whitespaces)
            if line.isEmpty || line.hasPrefix("#") || line.hasPrefix(";") { continue }
            if line.hasPrefix("["), line.hasSuffix("]") {
                let name = line.dropFirst().dropLast().trimmingCharacters(in: .whitespaces)
                current = name.split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ")
                if let current, sections[current] == nil { sections[current] = [:] }
                continue
            }
            guard let current, let equals = line.firstIndex(of: "=") else { continue }
            let key = line[..<equals].trimmingCharacters(in: .whitespaces).lowercased()
            let value = line[line.index(after: equals)...].trimmingCharacters(in: .whitespaces)
            sections[current]?[key] = value
        }
    }
}
