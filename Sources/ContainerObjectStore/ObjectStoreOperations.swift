import ContainerStore
import Foundation
import Glibc

/// An object in a listing.
public struct ObjectSummary: Sendable {
    public let key: String
    public let size: Int64
    /// As the server wrote it (ISO 8601, UTC).
    public let lastModified: String
}

/// A multipart upload under way: parts sent in any order (a part sent again replaces the
/// one of that number), then completed into one object, or aborted. Until it completes,
/// nothing is at its key.
public final class MultipartUpload: @unchecked Sendable {
    public let url: ObjectURL
    let uploadID: String

    /// Starts an upload to `url`.
    public init(url: ObjectURL, client: ObjectStoreClient) throws(ObjectStoreError) {
        self.url = url
        let response = try client.send("POST", bucket: url.bucket, key: url.key, query: [("uploads", "")])
        guard let id = XMLText.first("UploadId", in: String(decoding: response.body, as: UTF8.self)), !id.isEmpty else {
            throw ObjectStoreError(description: "the object store at \(client.config.endpointName) gave no upload id for \(url)", code: nil, status: response.status, retryable: false)
        }
        uploadID = id
    }

    /// Sends part `number` (1 to 10,000); returns its ETag.
    public func send(part number: Int, _ data: UnsafeRawBufferPointer, client: ObjectStoreClient) throws(ObjectStoreError) -> String {
        let response = try client.send("PUT", bucket: url.bucket, key: url.key, query: [("partNumber", String(number)), ("uploadId", uploadID)], body: .buffer(data))
        guard let etag = response.etag else {
            throw ObjectStoreError(description: "the object store gave no ETag for part \(number) of \(url)", code: nil, status: response.status, retryable: true)
        }
        return etag
    }

    /// Makes the object from `parts` (number and ETag, ascending).
    public func complete(_ parts: [(number: Int, etag: String)], client: ObjectStoreClient) throws(ObjectStoreError) {
        var xml = "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
        for part in parts { xml += "<Part><PartNumber>\(part.number)</PartNumber><ETag>\(XMLText.escape(part.etag))</ETag></Part>" }
        xml += "</CompleteMultipartUpload>"
        let response = try client.send("POST", bucket: url.bucket, key: url.key, query: [("uploadId", uploadID)], body: .bytes(Array(xml.utf8)))
        // CompleteMultipartUpload can fail after its 200 OK, with an error in the body.
        let text = String(decoding: response.body, as: UTF8.self)
        if text.contains("<Error>") {
            let code = XMLText.first("Code", in: text)
            throw ObjectStoreError(description: "the object store could not complete \(url) (\(code ?? "error"))", code: code, status: response.status,
                                   retryable: ["SlowDown", "InternalError", "RequestTimeout"].contains(code ?? ""))
        }
    }

    /// Drops the parts sent; nothing is left at the key. Runs even after SIGINT or
    /// SIGTERM. Best effort: a server that is gone keeps the parts until its lifecycle
    /// rule (AbortIncompleteMultipartUpload) drops them; the object never appears.
    @discardableResult
    public func abort(client: ObjectStoreClient) -> Bool {
        (try? client.send("DELETE", bucket: url.bucket, key: url.key, query: [("uploadId", uploadID)], interruptible: false)) != nil
    }
}

extension ObjectStoreClient {
    /// Every object under `prefix` in `bucket`, page by page.
    public func list(bucket: String, prefix: String) throws(ObjectStoreError) -> [ObjectSummary] {
        var objects: [ObjectSummary] = []
        var token: String?
        var pages = 0
        repeat {
            var query = [("list-type", "2"), ("prefix", prefix)]
            if let token { query.append(("continuation-token", token)) }
            let response = try send("GET", bucket: bucket, query: query)
            let text = String(decoding: response.body, as: UTF8.self)
            for block in XMLText.blocks("Contents", in: text) {
                guard let key = XMLText.first("Key", in: block), let size = XMLText.first("Size", in: block).flatMap({ Int64($0) }) else { continue }
                objects.append(ObjectSummary(key: key, size: size, lastModified: XMLText.first("LastModified", in: block) ?? ""))
            }
            let truncated = XMLText.first("IsTruncated", in: text) == "true"
            let next = truncated ? XMLText.first("NextContinuationToken", in: text) : nil
            // A server that names the same page again, or pages without end, is not listing.
            pages += 1
            if let next, next == token || pages >= 100_000 {
                throw ObjectStoreError(description: "the object store's listing of s3://\(bucket) does not end (page \(pages) names the same next page, or 100,000 pages)",
                                       code: nil, status: response.status, retryable: false)
            }
            token = next
            if truncated, token == nil {
                throw ObjectStoreError(description: "the object store's listing of s3://\(bucket) is truncated but names no next page", code: nil, status: response.status, retryable: false)
            }
        } while token != nil
        return objects
    }

    /// The first `count` bytes of an object (fewer if it is shorter).
    public func head(of url: ObjectURL, count: Int) throws(ObjectStoreError) -> [UInt8] {
        try send("GET", bucket: url.bucket, key: url.key, range: 0...Int64(max(count, 1) - 1)).body
    }
}
