@testable import ContainerObjectStore
import ContainerStore
import Foundation
import Testing

/// How the object store's configuration is found (SPEC §13), and the URLs and query
/// strings signed by curl.
@Suite("Object store configuration")
struct ObjectStoreConfigTests {
    @Test func environmentWinsAndCustomEndpointIsPathStyle() throws {
        let config = try ObjectStoreConfig.load(environment: [
            "HOME": "/nonexistent", "AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": "secret", "AWS_REGION": "eu-west-3",
            "AWS_ENDPOINT_URL": "http://127.0.0.1:8333/",
        ])
        #expect(config.region == "eu-west-3")
        #expect(config.pathStyle)
        #expect(config.url(bucket: "bkt", key: "a b/c+d.tar", query: "") == "http://127.0.0.1:8333/bkt/a%20b/c%2Bd.tar")
        #expect(!"\(config.credentials)".contains("secret"))
    }

    /// A password in the endpoint's URL never reaches the error line (issue #25).
    @Test(arguments: ["http://user:hunter2secret@host:9000", "https://hunter2secret@host/path", "http://a:hunter2secret@b@host:1/x?y#z"])
    func anEndpointsPasswordIsNeverPrinted(url: String) {
        #expect(throws: UserError.self) {
            try ObjectStoreConfig.load(environment: ["HOME": "/nonexistent", "AWS_ACCESS_KEY_ID": "A", "AWS_SECRET_ACCESS_KEY": "S",
                                                     "AWS_ENDPOINT_URL": url])
        }
        do {
            _ = try ObjectStoreConfig.load(environment: ["HOME": "/nonexistent", "AWS_ACCESS_KEY_ID": "A", "AWS_SECRET_ACCESS_KEY": "S",
                                                         "AWS_ENDPOINT_URL": url])
        } catch {
            #expect(!error.message.contains("hunter2secret"), "\(error.message)")
            #expect(error.message.contains("host"), "\(error.message)")
        }
    }

    @Test func awsEndpointIsVirtualHosted() throws {
        let config = try ObjectStoreConfig.load(environment: ["HOME": "/nonexistent", "AWS_ACCESS_KEY_ID": "A", "AWS_SECRET_ACCESS_KEY": "S", "AWS_DEFAULT_REGION": "us-west-2"])
        #expect(config.url(bucket: "bkt", key: "k", query: "uploads=") == "https://bkt.s3.us-west-2.amazonaws.com/k?uploads=")
        #expect(config.url(bucket: "my.bkt", key: "k", query: "") == "https://s3.us-west-2.amazonaws.com/my.bkt/k")
    }

    @Test func profilesFromTheSharedFiles() throws {
        let home = NSTemporaryDirectory() + "cfs-aws-\(getpid())"
        try FileManager.default.createDirectory(atPath: home + "/.aws", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: home) }
        try "[default]\naws_access_key_id = D\naws_secret_access_key = DS\n\n[ci]\naws_access_key_id=CI\naws_secret_access_key = CIS\naws_session_token = T\n"
            .write(toFile: home + "/.aws/credentials", atomically: true, encoding: .utf8)
        try "[default]\nregion = eu-north-1\n[profile ci]\nregion = ap-south-1\nendpoint_url = https://s3.example.net\n"
            .write(toFile: home + "/.aws/config", atomically: true, encoding: .utf8)
        let fallback = try ObjectStoreConfig.load(environment: ["HOME": home])
        #expect(fallback.credentials.accessKeyID == "D" && fallback.region == "eu-north-1" && !fallback.pathStyle)
        let ci = try ObjectStoreConfig.load(environment: ["HOME": home, "AWS_PROFILE": "ci"])
        #expect(ci.credentials.accessKeyID == "CI" && ci.credentials.sessionToken == "T")
        #expect(ci.region == "ap-south-1" && ci.endpoint == "https://s3.example.net" && ci.pathStyle)
        #expect(throws: UserError.self) { try ObjectStoreConfig.load(environment: ["HOME": home, "AWS_PROFILE": "nope"]) }
        #expect(throws: UserError.self) { try ObjectStoreConfig.load(environment: ["HOME": "/nonexistent"]) }
    }

    /// SigV4's canonical query: sorted names, RFC 3986 encoding, `=` for empty values.
    @Test func canonicalQuery() {
        #expect(ObjectStoreConfig.canonicalQuery([("uploads", "")]) == "uploads=")
        #expect(ObjectStoreConfig.canonicalQuery([("uploadId", "a/b+c"), ("partNumber", "2")]) == "partNumber=2&uploadId=a%2Fb%2Bc")
        #expect(ObjectStoreConfig.canonicalQuery([("prefix", "x y~"), ("list-type", "2"), ("continuation-token", "t=")])
            == "continuation-token=t%3D&list-type=2&prefix=x%20y~")
    }

    @Test func urls() throws {
        let url = try ObjectURL(parsing: "s3://my-bucket/ci/notes.tar", requireKey: true)
        #expect(url.bucket == "my-bucket" && url.key == "ci/notes.tar")
        let listing = try ObjectURL(parsing: "s3://my-bucket", requireKey: false)
        #expect(listing.key.isEmpty)
        #expect(throws: UserError.self) { try ObjectURL(parsing: "s3://my-bucket/", requireKey: true) }
        #expect(throws: UserError.self) { try ObjectURL(parsing: "s3://UPPER/k", requireKey: true) }
    }

    @Test func xmlValues() {
        let text = "<R><Contents><Key>a&amp;b</Key><Size>3</Size></Contents><Contents><Key>c&#x41;</Key></Contents></R>"
        #expect(XMLText.blocks("Contents", in: text).count == 2)
        #expect(XMLText.all("Key", in: text) == ["a&b", "cA"])
    }
}
