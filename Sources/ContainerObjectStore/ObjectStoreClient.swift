import CCurl
import ContainerStore
import Crypto
import Foundation
import Glibc

/// A request the object store refused or could not be sent; `description` is one line
/// naming no secret.
public struct ObjectStoreError: Error, CustomStringConvertible, Sendable {
    public let description: String
    /// S3's error code (`NoSuchBucket`, `SlowDown`), or nil for a transport error.
    public let code: String?
    /// The HTTP status, or 0 when no answer came.
    public let status: Int
    /// Whether trying again may succeed (S3's retryable errors, a reset connection).
    let retryable: Bool
    /// The upload was interrupted by SIGINT or SIGTERM (the signal's number).
    public var interruption: Int32 = 0
}

/// The body of a request.
enum RequestBody {
    case none
    /// Small bodies (the XML of CompleteMultipartUpload).
    case bytes([UInt8])
    /// A part, sent from memory, signed with its SHA-256.
    case buffer(UnsafeRawBufferPointer)
}

/// An object being downloaded: its bytes go to `receive` in order, across the attempts
/// of a request (a retried one resumes after the bytes received, from the same ETag).
final class Download {
    /// Takes the next bytes; false stops the download (its reader is gone).
    let receive: (UnsafeRawBufferPointer) -> Bool
    /// Told the object's size when the first answer comes.
    let started: (Int64) -> Void
    /// Asked about once a second: true ends the download (its reader is gone), even
    /// while the server sends nothing.
    let stopped: () -> Bool
    var received: Int64 = 0
    /// From the first answer.
    var etag: String?
    var size: Int64?

    init(receive: @escaping (UnsafeRawBufferPointer) -> Bool, started: @escaping (Int64) -> Void, stopped: @escaping () -> Bool) {
        self.receive = receive
        self.started = started
        self.stopped = stopped
    }
}

/// An answer from the object store.
struct ObjectStoreResponse {
    var status = 0
    var body: [UInt8] = []
    var etag: String?
    var contentLength: Int64?
}

/// One connection's worth of requests to an S3-compatible store through libcurl, signed
/// with curl's AWS Signature V4 (`CURLOPT_AWS_SIGV4`). Not shared between threads: each
/// thread uses its own client (connections are kept alive per client).
///
/// What curl 7.88 (Debian 12) signs, and what this client gives it so that the signature
/// is AWS's: the query string exactly as signed (names sorted, values encoded, `name=`
/// even without a value; curl 7.88 signs it as written), and the payload's SHA-256 in
/// `x-amz-content-sha256` (curl 7.88 does not send that header, which AWS requires, and
/// for a streamed body would sign the empty payload's hash; given the header, it signs
/// its value). No header is ever removed with `Name:` (curl 7.88 would sign it empty).
public final class ObjectStoreClient {
    public let config: ObjectStoreConfig
    private let handle: UnsafeMutableRawPointer
    /// Back-off between attempts of a retryable request (then it fails).
    static let backoff: [Double] = [0.2, 0.4, 0.8, 1.6, 3.2]
    private static let emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    private static let initialized: Bool = {
        curl_global_init(Int(CURL_GLOBAL_DEFAULT))
        return true
    }()

    public init(config: ObjectStoreConfig) throws(UserError) {
        _ = ObjectStoreClient.initialized
        guard let handle = curl_easy_init() else { throw UserError("cannot start libcurl") }
        self.config = config
        self.handle = handle
    }

    deinit { curl_easy_cleanup(handle) }

    /// Sends a request, again after a back-off when S3 says the error is retryable, and
    /// returns a successful (2xx) answer or throws. With `download`, a successful answer's
    /// body goes to it instead of memory, and a retried request resumes where the last one
    /// stopped.
    func send(_ method: String, bucket: String, key: String = "", query: [(String, String)] = [],
              body: RequestBody = .none, range: ClosedRange<Int64>? = nil, download: Download? = nil,
              interruptible: Bool = true) throws(ObjectStoreError) -> ObjectStoreResponse {
        var attempt = 0
        while true {
            do {
                return try perform(method, bucket: bucket, key: key, query: query, body: body, range: range, download: download,
                                   interruptible: interruptible)
            } catch {
                guard error.retryable, attempt < ObjectStoreClient.backoff.count, !interruptible || ccurl_interruption() == 0 else { throw error }
                // Full jitter, so that many clients do not come back at once.
                usleep(UInt32(ObjectStoreClient.backoff[attempt] * Double.random(in: 0.5...1) * 1_000_000))
                attempt += 1
            }
        }
    }

    private func perform(_ method: String, bucket: String, key: String, query: [(String, String)], body: RequestBody,
                         range: ClosedRange<Int64>?, download: Download?, interruptible: Bool) throws(ObjectStoreError) -> ObjectStoreResponse {
        curl_easy_reset(handle)
        let transfer = Transfer(download: download)
        transfer.interruptible = interruptible
        let url = config.url(bucket: bucket, key: key, query: ObjectStoreConfig.canonicalQuery(query))
        var headers: [String] = []
        switch body {
        case .none: headers.append("x-amz-content-sha256: \(ObjectStoreClient.emptySHA256)")
        case .bytes(let bytes):
            headers.append("x-amz-content-sha256: \(hex(SHA256.hash(data: bytes)))")
            headers.append("Content-Type: application/xml")
        case .buffer(let buffer):
            headers.append("x-amz-content-sha256: \(hex(SHA256.hash(data: buffer)))")
            transfer.upload = buffer
        }
        if let token = config.credentials.sessionToken { headers.append("x-amz-security-token: \(token)") }
        if let range { headers.append("Range: bytes=\(range.lowerBound)-\(range.upperBound)") }
        if let download, download.received > 0 {
            // A resumed download: the rest of the same object, or nothing.
            guard let etag = download.etag else {
                throw ObjectStoreError(description: "the download of \(ObjectURL.shown(bucket: bucket, key: key)) was cut off, and the object store gave no ETag to resume it by: try again",
                                       code: nil, status: 0, retryable: false)
            }
            headers.append("Range: bytes=\(download.received)-")
            headers.append("If-Match: \(etag)")
        }
        var list: UnsafeMutablePointer<curl_slist>?
        for header in headers { list = curl_slist_append(list, header) }
        defer { curl_slist_free_all(list) }

        let context = Unmanaged.passUnretained(transfer).toOpaque()
        var status = CURLE_OK
        func set(_ result: CURLcode) { if status == CURLE_OK { status = result } }
        set(ccurl_setopt_string(handle, CURLOPT_URL, url))
        set(ccurl_setopt_string(handle, CURLOPT_AWS_SIGV4, "aws:amz:\(config.region):s3"))
        set(ccurl_setopt_string(handle, CURLOPT_USERNAME, config.credentials.accessKeyID))
        set(ccurl_setopt_string(handle, CURLOPT_PASSWORD, config.credentials.secretAccessKey))
        set(ccurl_setopt_pointer(handle, CURLOPT_HTTPHEADER, list.map { UnsafeMutableRawPointer($0) }))
        set(ccurl_setopt_string(handle, CURLOPT_PROTOCOLS_STR, "http,https"))
        set(ccurl_setopt_long(handle, CURLOPT_NOSIGNAL, 1))
        set(ccurl_setopt_long(handle, CURLOPT_CONNECTTIMEOUT, 10))
        // A transfer that moves nothing for a minute has stalled.
        set(ccurl_setopt_long(handle, CURLOPT_LOW_SPEED_LIMIT, 1))
        set(ccurl_setopt_long(handle, CURLOPT_LOW_SPEED_TIME, 60))
        set(ccurl_setopt_long(handle, CURLOPT_EXPECT_100_TIMEOUT_MS, 200))
        if let caBundle = config.caBundle, url.hasPrefix("https://") { set(ccurl_setopt_string(handle, CURLOPT_CAINFO, caBundle)) }
        set(ccurl_setopt_data_function(handle, CURLOPT_HEADERFUNCTION, headerCallback))
        set(ccurl_setopt_pointer(handle, CURLOPT_HEADERDATA, context))
        set(ccurl_setopt_data_function(handle, CURLOPT_WRITEFUNCTION, writeCallback))
        set(ccurl_setopt_pointer(handle, CURLOPT_WRITEDATA, context))
        set(ccurl_setopt_progress_function(handle, progressCallback))
        set(ccurl_setopt_pointer(handle, CURLOPT_XFERINFODATA, context))
        switch (method, body) {
        case ("PUT", .buffer(let buffer)):
            set(ccurl_setopt_long(handle, CURLOPT_UPLOAD, 1))
            set(ccurl_setopt_offset(handle, CURLOPT_INFILESIZE_LARGE, curl_off_t(buffer.count)))
            set(ccurl_setopt_data_function(handle, CURLOPT_READFUNCTION, readCallback))
            set(ccurl_setopt_pointer(handle, CURLOPT_READDATA, context))
        case ("POST", _):
            let bytes: [UInt8] = if case .bytes(let bytes) = body { bytes } else { [] }
            transfer.postBytes = bytes
            set(ccurl_setopt_offset(handle, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(bytes.count)))
            set(ccurl_setopt_pointer(handle, CURLOPT_POSTFIELDS, transfer.postPointer))
        case ("HEAD", _):
            set(ccurl_setopt_long(handle, CURLOPT_NOBODY, 1))
        case ("GET", _):
            break
        default:
            set(ccurl_setopt_string(handle, CURLOPT_CUSTOMREQUEST, method))
        }
        guard status == CURLE_OK else {
            throw ObjectStoreError(description: "libcurl refused an option (\(String(cString: curl_easy_strerror(status))))", code: nil, status: 0, retryable: false)
        }

        let result = curl_easy_perform(handle)
        if let error = transfer.writeError { throw error }
        if interruptible, ccurl_interruption() != 0 { throw .interrupted(ccurl_interruption()) }
        guard result == CURLE_OK else { throw transportError(result) }
        var response = ObjectStoreResponse()
        response.status = transfer.status
        response.etag = transfer.etag
        response.contentLength = transfer.contentLength
        response.body = transfer.body
        guard (200..<300).contains(response.status) else { throw serviceError(response, bucket: bucket, key: key) }
        if let download, let size = download.size, download.received != size {
            throw ObjectStoreError(description: "the download of \(ObjectURL.shown(bucket: bucket, key: key)) ended after \(download.received) of \(size) bytes",
                                   code: nil, status: response.status, retryable: true)
        }
        return response
    }

    private func transportError(_ result: CURLcode) -> ObjectStoreError {
        let reason = String(cString: curl_easy_strerror(result))
        let retryable = [CURLE_COULDNT_CONNECT, CURLE_OPERATION_TIMEDOUT, CURLE_SEND_ERROR, CURLE_RECV_ERROR,
                         CURLE_GOT_NOTHING, CURLE_PARTIAL_FILE, CURLE_HTTP2, CURLE_HTTP2_STREAM].contains(result)
        let hint: String
        switch result {
        case CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_CONNECT, CURLE_OPERATION_TIMEDOUT:
            hint = ": check AWS_ENDPOINT_URL (or AWS_REGION) and that the server is up"
        case CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CACERT_BADFILE, CURLE_SSL_CONNECT_ERROR:
            hint = ": check the server's certificate and AWS_CA_BUNDLE"
        default:
            hint = ""
        }
        return ObjectStoreError(description: "cannot reach the object store at \(config.endpointName) (\(reason))\(hint)", code: nil, status: 0, retryable: retryable)
    }

    private func serviceError(_ response: ObjectStoreResponse, bucket: String, key: String) -> ObjectStoreError {
        let text = String(decoding: response.body.prefix(64 * 1024), as: UTF8.self)
        let code = XMLText.first("Code", in: text)
        let retryable = [500, 502, 503, 504, 429].contains(response.status)
            || ["SlowDown", "RequestTimeout", "InternalError", "ServiceUnavailable", "RequestTimeTooSkewed"].contains(code ?? "")
        let object = ObjectURL.shown(bucket: bucket, key: key)
        let description: String
        switch code {
        case "NoSuchBucket": description = "the bucket \(bucket) does not exist at \(config.endpointName): create it, or check the URL and AWS_ENDPOINT_URL"
        case "NoSuchKey": description = "there is no object at \(object)"
        case "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken", "AccessDenied", "InvalidSecurity":
            description = "the object store refused the credentials (\(code!), \(config.credentials)) for \(object): check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE"
        case "PreconditionFailed": description = "the object at \(object) changed during the download: restore again"
        case "NoSuchUpload": description = "the object store forgot the upload to \(object) (NoSuchUpload): back up again"
        default:
            let statusText = response.status == 404 ? "not found" : "HTTP \(response.status)"
            description = "the object store answered \(code ?? statusText) for \(object)" + (XMLText.first("Message", in: text).map { " (\($0))" } ?? "")
        }
        return ObjectStoreError(description: description, code: code, status: response.status, retryable: retryable)
    }
}

/// What one transfer's callbacks share.
private final class Transfer {
    var status = 0
    var etag: String?
    var contentLength: Int64?
    var body: [UInt8] = []
    var upload: UnsafeRawBufferPointer?
    var uploaded = 0
    var postBytes: [UInt8] = [] {
        didSet {
            postStorage?.deallocate()
            postStorage = .allocate(byteCount: max(postBytes.count, 1), alignment: 1)
            postBytes.withUnsafeBytes { postStorage!.copyMemory(from: $0) }
        }
    }
    private var postStorage: UnsafeMutableRawBufferPointer?
    var postPointer: UnsafeMutableRawPointer? { postStorage?.baseAddress }
    let download: Download?
    var writeError: ObjectStoreError?
    /// Whether SIGINT or SIGTERM ends the transfer (not the abort that cleans up after them).
    var interruptible = true

    init(download: Download?) {
        self.download = download
    }

    /// The headers of a successful answer to a download have come: the first answer gives
    /// the object's ETag and size; a resumed one must be the rest of that same object.
    func acceptAnswer(of download: Download) -> Bool {
        let resumed = download.received > 0
        guard status == (resumed ? 206 : 200), download.etag == nil || etag == download.etag else {
            writeError = ObjectStoreError(description: "the object changed during the download (its ETag or the range answered differ): restore again",
                                          code: nil, status: status, retryable: false)
            return false
        }
        if download.size == nil {
            download.etag = etag
            download.size = contentLength.map { max(0, $0) }
            download.started(download.size ?? 0)
        }
        return true
    }

    deinit { postStorage?.deallocate() }
}

private let headerCallback: curl_write_callback = { data, size, count, context in
    let transfer = Unmanaged<Transfer>.fromOpaque(context!).takeUnretainedValue()
    let length = size * count
    let line = String(decoding: UnsafeRawBufferPointer(start: data, count: length), as: UTF8.self)
    if line == "\r\n" || line == "\n" {
        // The end of an answer's headers.
        if let download = transfer.download, (200..<300).contains(transfer.status), !transfer.acceptAnswer(of: download) { return 0 }
    } else if line.hasPrefix("HTTP/") {
        // A new answer (after a 100 Continue): start over.
        let fields = line.split(separator: " ")
        transfer.status = fields.count > 1 ? Int(fields[1]) ?? 0 : 0
        transfer.etag = nil
        transfer.contentLength = nil
    } else if let colon = line.firstIndex(of: ":") {
        let name = line[..<colon].lowercased()
        let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespacesAndNewlines)
        if name == "etag" { transfer.etag = value }
        if name == "content-length" { transfer.contentLength = Int64(value) }
    }
    return length
}

private let writeCallback: curl_write_callback = { data, size, count, context in
    let transfer = Unmanaged<Transfer>.fromOpaque(context!).takeUnretainedValue()
    let length = size * count
    let chunk = UnsafeRawBufferPointer(start: data, count: length)
    if let download = transfer.download, (200..<300).contains(transfer.status) {
        guard download.size.map({ download.received + Int64(length) <= $0 }) ?? true else {
            transfer.writeError = ObjectStoreError(description: "the object store sent more than the object's size", code: nil, status: 0, retryable: false)
            return 0
        }
        guard download.receive(chunk) else {
            transfer.writeError = ObjectStoreError(description: "the download was stopped", code: nil, status: 0, retryable: false)
            return 0
        }
        download.received += Int64(length)
    } else {
        // An answer's XML, or an error's; a listing page is well below this.
        guard transfer.body.count + length <= 16 << 20 else { return 0 }
        transfer.body.append(contentsOf: chunk)
    }
    return length
}

private let readCallback: curl_write_callback = { buffer, size, count, context in
    let transfer = Unmanaged<Transfer>.fromOpaque(context!).takeUnretainedValue()
    guard let upload = transfer.upload, let buffer else { return 0 }
    let length = min(size * count, upload.count - transfer.uploaded)
    UnsafeMutableRawPointer(buffer).copyMemory(from: upload.baseAddress! + transfer.uploaded, byteCount: length)
    transfer.uploaded += length
    return length
}

/// Ends a transfer when SIGINT or SIGTERM came, or its download was stopped.
private let progressCallback: curl_xferinfo_callback = { context, _, _, _, _ in
    let transfer = Unmanaged<Transfer>.fromOpaque(context!).takeUnretainedValue()
    if transfer.download?.stopped() == true {
        transfer.writeError = ObjectStoreError(description: "the download was stopped", code: nil, status: 0, retryable: false)
        return 1
    }
    return transfer.interruptible && ccurl_interruption() != 0 ? 1 : 0
}

/// Lowercase hexadecimal.
func hex<Bytes: Sequence>(_ bytes: Bytes) -> String where Bytes.Element == UInt8 {
    let digits = Array("0123456789abcdef")
    var out = ""
    for byte in bytes {
        out.append(digits[Int(byte >> 4)])
        out.append(digits[Int(byte & 15)])
    }
    return out
}

/// The few values read from S3's XML answers, without an XML library: S3's answers are
/// flat, and every value read is checked afterwards.
enum XMLText {
    /// The text of the first `<name>…</name>`, entities decoded.
    static func first(_ name: String, in text: String) -> String? {
        all(name, in: text).first
    }

    /// The texts of every `<name>…</name>`, in order.
    static func all(_ name: String, in text: String) -> [String] {
        var values: [String] = []
        var rest = text[...]
        while let open = rest.range(of: "<\(name)>") {
            guard let close = rest[open.upperBound...].range(of: "</\(name)>") else { break }
            values.append(decode(String(rest[open.upperBound..<close.lowerBound])))
            rest = rest[close.upperBound...]
        }
        return values
    }

    /// Splits `text` into the insides of each `<name>…</name>` block.
    static func blocks(_ name: String, in text: String) -> [String] {
        var blocks: [String] = []
        var rest = text[...]
        while let open = rest.range(of: "<\(name)>") {
            guard let close = rest[open.upperBound...].range(of: "</\(name)>") else { break }
            blocks.append(String(rest[open.upperBound..<close.lowerBound]))
            rest = rest[close.upperBound...]
        }
        return blocks
    }

    static func decode(_ text: String) -> String {
        guard text.contains("&") else { return text }
        var out = ""
        var rest = text[...]
        while let amp = rest.firstIndex(of: "&") {
            out += rest[..<amp]
            guard let semicolon = rest[amp...].firstIndex(of: ";") else { break }
            let entity = rest[rest.index(after: amp)..<semicolon]
            switch entity {
            case "amp": out += "&"
            case "lt": out += "<"
            case "gt": out += ">"
            case "quot": out += "\""
            case "apos": out += "'"
            default:
                let number = entity.hasPrefix("#x") ? UInt32(entity.dropFirst(2), radix: 16) : entity.hasPrefix("#") ? UInt32(entity.dropFirst()) : nil
                if let number, let scalar = Unicode.Scalar(number) { out.unicodeScalars.append(scalar) } else { out += "&\(entity);" }
            }
            rest = rest[rest.index(after: semicolon)...]
        }
        return out + rest
    }

    /// `text` with XML's special characters escaped.
    static func escape(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;").replacingOccurrences(of: ">", with: "&gt;")
            .replacingOccurrences(of: "\"", with: "&quot;")
    }
}
