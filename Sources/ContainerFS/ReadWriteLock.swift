import Glibc

/// A `pthread_rwlock_t` at a fixed address, preferring the writer: a power cut or a
/// recount waits for the changes under way, not for a stream of new ones. Never taken
/// twice by one thread.
final class ReadWriteLock: @unchecked Sendable {
    private let raw = UnsafeMutablePointer<pthread_rwlock_t>.allocate(capacity: 1)
    init() {
        var attributes = pthread_rwlockattr_t()
        pthread_rwlockattr_init(&attributes)
        pthread_rwlockattr_setkind_np(&attributes, Int32(PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP))
        pthread_rwlock_init(raw, &attributes)
        pthread_rwlockattr_destroy(&attributes)
    }
    deinit {
        pthread_rwlock_destroy(raw)
        raw.deallocate()
    }
    func lockShared() { pthread_rwlock_rdlock(raw) }
    func lock() { pthread_rwlock_wrlock(raw) }
    func unlock() { pthread_rwlock_unlock(raw) }
}
