import CCurl

/// SIGINT and SIGTERM during a transfer: caught (a flag is set), so that an upload can
/// abort its multipart upload and say so before the process exits. Transfers under way
/// end at once (curl's progress callback); an upload notices at its next write.
public enum Interruption {
    /// Catches SIGINT and SIGTERM from now on.
    public static func catchSignals() { ccurl_catch_interruptions() }

    /// The signal caught (SIGINT or SIGTERM), or 0.
    public static var signal: Int32 { ccurl_interruption() }

    /// Puts the default actions back.
    public static func restoreSignals() { ccurl_restore_signals() }
}

extension ObjectStoreError {
    /// The error of a transfer ended by `signal`.
    public static func interrupted(_ signal: Int32) -> ObjectStoreError {
        var error = ObjectStoreError(description: "interrupted", code: nil, status: 0, retryable: false)
        error.interruption = signal
        return error
    }
}
