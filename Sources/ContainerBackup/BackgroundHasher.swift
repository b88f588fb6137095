import Crypto
import Dispatch

/// SHA-256 on a second thread, so that hashing overlaps reading and writing: a backup or
/// a restore's first pass hands a chunk over and goes on (writing the chunk to the
/// archive, reading the next into the other of two buffers); the machine's second core
/// hashes. Chunks are hashed in the order given.
///
/// A chunk handed to `update` must not change until its slot is free again (`waitForSlot`):
/// the caller alternates two buffers, slot 0 and slot 1.
final class BackgroundHasher: @unchecked Sendable {
    private var hasher = SHA256()
    private let queue = DispatchQueue(label: "containerfs.sha256")
    /// One per buffer: 1 while the buffer is free, 0 while its chunk waits to be hashed.
    private let free = [DispatchSemaphore(value: 1), DispatchSemaphore(value: 1)]

    /// A chunk's address, handed to the hashing thread (the caller keeps it alive and unchanged).
    private struct Chunk: @unchecked Sendable {
        let bytes: UnsafeRawBufferPointer
    }

    /// Starts a new digest once everything handed over so far is hashed.
    func reset() {
        queue.sync { hasher = SHA256() }
    }

    /// Waits until the buffer of `slot` may be written again.
    func waitForSlot(_ slot: Int) {
        free[slot].wait()
        free[slot].signal()
    }

    /// Hashes `bytes`, the contents of the buffer of `slot`, on the hashing thread.
    func update(_ bytes: UnsafeRawBufferPointer, slot: Int) {
        free[slot].wait()
        let chunk = Chunk(bytes: bytes)
        queue.async {
            self.hasher.update(bufferPointer: chunk.bytes)
            self.free[slot].signal()
        }
    }

    /// Hands `bytes` over in pieces copied into `buffers` in turn (`slot` is the next one's),
    /// for bytes that do not stay put until hashed (libarchive's block, a small array).
    func feed(_ bytes: UnsafeRawBufferPointer, through buffers: [UnsafeMutableRawBufferPointer], slot: inout Int) {
        var start = 0
        while start < bytes.count {
            let buffer = buffers[slot]
            let count = min(buffer.count, bytes.count - start)
            waitForSlot(slot)
            buffer.baseAddress!.copyMemory(from: bytes.baseAddress! + start, byteCount: count)
            update(UnsafeRawBufferPointer(rebasing: buffer[0..<count]), slot: slot)
            slot ^= 1
            start += count
        }
    }

    /// The digest of everything handed over since `reset`.
    func finalize() -> [UInt8] {
        queue.sync { Array(hasher.finalize()) }
    }

    /// Waits until nothing handed over is still being hashed (before buffers are freed).
    func drain() {
        queue.sync {}
    }
}
