import Crypto

/// The SHA-256 of one file's data as a backup writes it or a restore reads it back (the
/// manifest's digest), and the count of its bytes. A file of `Backup.backgroundHashSize`
/// bytes or more is hashed on the second core (`BackgroundHasher`) through the two
/// `buffers`, in turn; a smaller one here, where handing it over would cost more than
/// hashing it. Backup and restore hash exactly alike through it, plain and sparse files.
struct DigestStream {
    private var hasher = SHA256()
    /// The hasher of the second core, for a large file; nil for a small one.
    private let background: BackgroundHasher?
    private let buffers: [UnsafeMutableRawBufferPointer]
    /// The buffer the next chunk goes through (always 0 for a small file).
    private var slot = 0
    /// The data bytes hashed so far (not the prefix).
    private(set) var count: Int64 = 0

    /// Starts the digest of `size` data bytes: `prefix` first (a sparse file's map), then
    /// the data handed to `update`.
    init(size: Int64, prefix: [UInt8] = [], background: BackgroundHasher, buffers: [UnsafeMutableRawBufferPointer]) {
        self.background = size >= Backup.backgroundHashSize ? background : nil
        self.buffers = buffers
        if let background = self.background {
            background.reset()
            prefix.withUnsafeBytes { background.feed($0, through: buffers, slot: &slot) }
        } else {
            hasher.update(data: prefix)
        }
    }

    /// The buffer to read the next chunk into, once the second core is done with it; the
    /// chunk read there is then given to `update(inBuffer:)`.
    func nextBuffer() -> UnsafeMutableRawBufferPointer {
        background?.waitForSlot(slot)
        return buffers[slot]
    }

    /// Hashes `chunk`, read into `nextBuffer()`, where it stays until hashed.
    mutating func update(inBuffer chunk: UnsafeRawBufferPointer) {
        if let background {
            background.update(chunk, slot: slot)
            slot ^= 1
        } else {
            hasher.update(bufferPointer: chunk)
        }
        count += Int64(chunk.count)
    }

    /// Hashes `chunk`, which may change once this returns (libarchive's block): a large
    /// file's is copied into the buffers first.
    mutating func update(copying chunk: UnsafeRawBufferPointer) {
        if let background {
            background.feed(chunk, through: buffers, slot: &slot)
        } else {
            hasher.update(bufferPointer: chunk)
        }
        count += Int64(chunk.count)
    }

    /// Waits until the second core is done with the buffers, for a digest given up (the
    /// file changed): they are read into again at once.
    func abandon() {
        background?.drain()
    }

    /// The digest of the prefix and everything hashed since.
    func finalize() -> [UInt8] {
        background?.finalize() ?? Array(hasher.finalize())
    }
}
