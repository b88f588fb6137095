import ContainerStore
import Foundation
import Glibc

/// An object read in order in bounded memory (SPEC §13: a restore verifies as it reads):
/// a thread of its own downloads it into a few chunks, which the reader takes one after
/// the other. A download cut off resumes where it stopped, from the same object.
public final class ObjectStream: @unchecked Sendable {
    /// Eight chunks of 1 MiB: the download runs ahead of the reader by at most 8 MiB.
    static let chunkSize = 1 << 20
    static let chunkCount = 8

    private let condition = NSCondition()
    /// Chunks the reader has not taken yet, in order, and chunks free to fill.
    private var ready: [Chunk] = []
    private var free: [Chunk]
    /// The chunk the reader has (given back at its next call).
    private var taken: Chunk?
    private var size: Int64?
    private var finished = false
    private var failure: ObjectStoreError?
    private var stopped = false
    public let url: ObjectURL
    /// The download thread's own.
    private let client: ObjectStoreClient

    /// Starts downloading the object at `url`.
    public init(url: ObjectURL, config: ObjectStoreConfig) throws(UserError) {
        self.url = url
        client = try ObjectStoreClient(config: config)
        free = (0..<ObjectStream.chunkCount).map { _ in Chunk(capacity: ObjectStream.chunkSize) }
        let thread = Thread { [self] in self.download() }
        thread.stackSize = 1 << 20
        thread.start()
    }

    /// Waits for the object store's first answer: the object's size, or why there is none.
    public func waitForSize() throws(ObjectStoreError) -> Int64 {
        condition.lock()
        defer { condition.unlock() }
        while size == nil, !finished { condition.wait() }
        if let failure { throw failure }
        return size ?? 0
    }

    /// The next bytes of the object, valid until the next call; empty at its end. Throws
    /// why the download failed, or `interrupted` after SIGINT or SIGTERM.
    public func next() throws(ObjectStoreError) -> UnsafeRawBufferPointer {
        condition.lock()
        defer { condition.unlock() }
        if let chunk = taken {
            chunk.count = 0
            free.append(chunk)
            taken = nil
            condition.broadcast()
        }
        while ready.isEmpty, !finished, Interruption.signal == 0 { _ = condition.wait(until: Date().addingTimeInterval(0.2)) }
        if Interruption.signal != 0 { throw .interrupted(Interruption.signal) }
        if ready.isEmpty {
            if let failure { throw failure }
            return UnsafeRawBufferPointer(start: nil, count: 0)
        }
        let chunk = ready.removeFirst()
        taken = chunk
        return UnsafeRawBufferPointer(rebasing: chunk.memory[0..<chunk.count])
    }

    /// Ends the download (the reader needs no more) and waits for its thread.
    public func stop() {
        condition.lock()
        stopped = true
        condition.broadcast()
        while !finished { condition.wait() }
        condition.unlock()
    }

    private func download() {
        var filling: Chunk?
        let download = Download(receive: { [self] bytes in
            var done = 0
            while done < bytes.count {
                if filling == nil {
                    guard let chunk = takeFree() else { return false }
                    filling = chunk
                }
                guard let chunk = filling else { return false }
                let length = min(chunk.memory.count - chunk.count, bytes.count - done)
                UnsafeMutableRawBufferPointer(rebasing: chunk.memory[chunk.count..<chunk.count + length])
                    .copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes[done..<done + length]))
                chunk.count += length
                done += length
                if chunk.count == chunk.memory.count {
                    hand(chunk)
                    filling = nil
                }
            }
            return true
        }, started: { [self] size in
            condition.lock()
            self.size = size
            condition.broadcast()
            condition.unlock()
        }, stopped: { [self] in
            condition.lock()
            defer { condition.unlock() }
            return stopped
        })
        var failure: ObjectStoreError?
        do {
            _ = try client.send("GET", bucket: url.bucket, key: url.key, download: download)
        } catch {
            failure = error
        }
        if let chunk = filling, chunk.count > 0 { hand(chunk) }
        condition.lock()
        self.failure = failure
        finished = true
        condition.broadcast()
        condition.unlock()
    }

    /// A free chunk, once the reader gave one back; nil when the stream was stopped.
    private func takeFree() -> Chunk? {
        condition.lock()
        defer { condition.unlock() }
        while free.isEmpty, !stopped { condition.wait() }
        return stopped ? nil : free.removeLast()
    }

    /// Hands a filled chunk to the reader.
    private func hand(_ chunk: Chunk) {
        condition.lock()
        ready.append(chunk)
        condition.broadcast()
        condition.unlock()
    }
}

/// A chunk of the download in memory.
private final class Chunk {
    let memory: UnsafeMutableRawBufferPointer
    var count = 0

    init(capacity: Int) {
        memory = .allocate(byteCount: capacity, alignment: 4096)
    }

    deinit { memory.deallocate() }
}
