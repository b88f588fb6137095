import Glibc

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

extension UserError {
    /// `LEAD: ERROR; WHAT TO DO` (SPEC §9), the advice when the error is an errno that says
    /// plainly what to do (`Errno.advice`); otherwise `LEAD: ERROR`.
    public static func failed(_ lead: String, _ error: any Error) -> UserError {
        guard let advice = (error as? Errno)?.advice else { return UserError("\(lead): \(error)") }
        return UserError("\(lead): \(error); \(advice)")
    }

    /// `LEAD: its folder FOLDER does not exist; WHAT TO DO` for a new path (a store, an
    /// archive) whose folder must be there already; `LEAD: its folder FOLDER cannot be
    /// opened: ERROR; WHAT TO DO` when it is there but refused. `role` names the folder
    /// ("folder", "parent folder").
    public static func folderUnavailable(_ lead: String, folder: String, role: String = "folder", _ error: Errno) -> UserError {
        if error.code == ENOENT {
            return UserError("\(lead): its \(role) \(folder) does not exist; make it first (mkdir -p), or name a path in a folder that exists")
        }
        return failed("\(lead): its \(role) \(folder) cannot be opened", error)
    }

    /// `LEAD: ERROR; WHAT TO DO` for a program that could not be started (`posix_spawn`'s
    /// error): not there, not executable, or the machine out of processes or memory.
    public static func cannotStart(_ lead: String, _ error: Errno) -> UserError {
        guard let advice = startAdvice(error) else { return UserError("\(lead): \(error)") }
        return UserError("\(lead): \(error); \(advice)")
    }

    /// `posix_spawn`'s errno, as `cannotStart` explains it (EAGAIN is a process limit here,
    /// not the lock `Errno.advice` takes it for).
    private static func startAdvice(_ error: Errno) -> String? {
        switch error.code {
        case ENOENT: "no such program: name one on PATH, or give its full path"
        case EACCES: "it is not an executable file, or a folder above it cannot be searched: check their modes (ls -l), or name another program"
        case ENOEXEC: "it is not a program this machine can run: name another"
        case EAGAIN: "too many processes are running: wait for some to end (or raise ulimit -u), and try again"
        default: error.advice
        }
    }
}

extension Errno {
    /// What a user can do about this errno when a command meets it on a path they named
    /// (an archive, a store, a bundle, a report); nil when nothing general can be said.
    public var advice: String? {
        switch code {
        case EACCES, EPERM: "this user may not: check the owner and mode of the path and the folders above it (ls -ld), or run as a user who may"
        case ENOENT: "check that the path and every folder above it exist"
        case ENOTDIR: "a part of the path is a file, not a folder: check the path"
        case ENOSPC, EDQUOT: "its file system is full: free space there, or choose another place"
        case EROFS: "its file system is read-only: choose a writable place"
        case ELOOP: "a symlink is in the way, and none is followed there: name the real path"
        case EMFILE, ENFILE: "too many files are open: raise the limit (ulimit -n) and try again"
        case EISDIR: "it is a folder: name a file"
        case EEXIST: "something is in the way: remove it, or choose another name"
        case ENAMETOOLONG: "a name or the path is too long: choose a shorter one"
        case EWOULDBLOCK: "another process keeps a lock on its folder (see /proc/locks): try again once it ends"
        case ENOTCONN: "a mount on the way has lost its daemon: unmount it (fusermount3 -u MOUNTPOINT), and try again"
        case EBUSY: "it is in use (a mount, or a program holding it): end that use, and try again"
        case ETIMEDOUT: "it did not answer in time: check that it is reachable, and try again"
        case ENOMEM, ENOBUFS: "the machine is short of memory: free some, and try again"
        default: nil
        }
    }

    /// What to do about a path the user named that could not be reached: `missing` (name
    /// an existing one…) when it is not there; when it is there but refused (no permission,
    /// a symlink in the way), that errno's own advice.
    public func advice(whenMissing missing: String) -> String {
        code == ENOENT || code == ENOTDIR ? missing : advice ?? missing
    }
}
