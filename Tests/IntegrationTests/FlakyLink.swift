import Foundation
import Glibc

/// A bad network between `containerfs` and the real server: a TCP relay on loopback
/// (python3) in front of SeaweedFS's S3 port that, in the answer to the first GET of an
/// object, either cuts the connection after `after` bytes (running `atCut` first, if
/// given) or stops sending for `pause` seconds there. Every request's head is logged.
final class FlakyLink {
    enum Fault {
        case cut(atCut: [String])
        case stall(seconds: Double)
    }

    let endpoint: String
    private let process = Process()
    private let logPath: String
    private let markPath: String

    init(to server: SeaweedFS, after: Int, fault: Fault) throws {
        logPath = server.base + "/link-\(UInt32.random(in: 0...UInt32.max)).log"
        markPath = logPath + ".reached"
        let (mode, pause, hook): (String, Double, [String]) = switch fault {
        case .cut(let command): ("cut", 0, command)
        case .stall(let seconds): ("stall", seconds, [])
        }
        let port = try startPythonServer(process, FlakyLink.relay, [String(server.firstPort + 7), mode, String(after), String(pause), logPath, markPath] + hook)
        endpoint = "http://127.0.0.1:\(port)"
    }

    deinit { stop() }

    /// The heads of the requests relayed so far.
    var requests: [String] {
        ((try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "").components(separatedBy: "\n\n").filter { !$0.isEmpty }
    }

    /// Whether the fault has happened (the answer reached `after` bytes).
    var faultReached: Bool { access(markPath, F_OK) == 0 }

    /// SIGKILL: the test runner starts children with SIGTERM blocked.
    func stop() {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    private static let relay = """
        import socket, subprocess, sys, threading, time
        upstream, mode, after, pause, log, mark = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5], sys.argv[6]
        hook = sys.argv[7:]
        lock = threading.Lock()
        chosen = []
        def up(client, server, conn):
            try:
                while True:
                    data = client.recv(65536)
                    if not data: break
                    if data[:4] in (b"GET ", b"PUT ", b"POST", b"HEAD", b"DELE"):
                        head = data.split(b"\\r\\n\\r\\n")[0]
                        with lock:
                            with open(log, "ab") as f: f.write(head + b"\\n\\n")
                            target = head.split(b" ")[1]
                            if not chosen and head.startswith(b"GET ") and b"?" not in target:
                                chosen.append(target)
                                conn["target"] = True
                    server.sendall(data)
            except OSError: pass
            for s in (client, server):
                try: s.shutdown(socket.SHUT_RDWR)
                except OSError: pass
        def down(server, client, conn):
            sent = 0
            try:
                while True:
                    data = server.recv(65536)
                    if not data: break
                    if conn.get("target") and not conn.get("done") and sent + len(data) > after:
                        conn["done"] = True
                        head = after - sent
                        client.sendall(data[:head])
                        sent += head
                        data = data[head:]
                        if mode == "cut":
                            if hook: subprocess.run(hook, check=True)
                            open(mark, "w").close()
                            break
                        open(mark, "w").close()
                        time.sleep(pause)
                    client.sendall(data)
                    sent += len(data)
            except OSError: pass
            for s in (client, server):
                try: s.shutdown(socket.SHUT_RDWR)
                except OSError: pass
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        print(listener.getsockname()[1], flush=True)
        while True:
            client, _ = listener.accept()
            server = socket.create_connection(("127.0.0.1", upstream))
            conn = {}
            threading.Thread(target=up, args=(client, server, conn), daemon=True).start()
            threading.Thread(target=down, args=(server, client, conn), daemon=True).start()
        """
}

/// Starts `script` with python3 in `process` (with `arguments`) and returns the loopback
/// port it prints on its first line once it listens.
func startPythonServer(_ process: Process, _ script: String, _ arguments: [String]) throws -> Int {
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = ["python3", "-c", script] + arguments
    let output = Pipe()
    process.standardOutput = output
    process.standardError = FileHandle.nullDevice
    try process.run()
    let line = String(decoding: output.fileHandleForReading.availableData, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    guard let port = Int(line) else {
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        throw TestFailure("the python server did not start: \(line)")
    }
    return port
}
