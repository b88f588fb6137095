/// A mistake or a condition the user can act on: one line saying what is wrong and
/// what to do (SPEC §9). The CLI prints it and exits with `exitCode`.
public struct UserError: Error, CustomStringConvertible, Sendable {
    /// What is wrong and what to do, as one line.
    public let message: String
    /// 64 for misuse (EX_USAGE), 75 for a lock another process held too long
    /// (EX_TEMPFAIL, `LockWait`), 1 for anything else.
    public let exitCode: Int32

    public init(_ message: String, exitCode: Int32 = 1) {
        self.message = message
        self.exitCode = exitCode
    }

    public var description: String { message }

    /// A misuse of the command line.
    public static func usage(_ message: String) -> UserError { UserError(message, exitCode: 64) }
}
