import ContainerStore
import Glibc
import Testing

/// `UserError.failed`: an errno that says plainly what to do gets that advice after it.
@Test func failedAddsTheErrnosAdviceAndNothingElse() {
    #expect(UserError.failed("cannot write a.tar", Errno(ENOENT)).message
        == "cannot write a.tar: No such file or directory; check that the path and every folder above it exist")
    #expect(UserError.failed("cannot write a.tar", Errno(EROFS)).message.hasSuffix("; its file system is read-only: choose a writable place"))
    #expect(UserError.failed("cannot write a.tar", Errno(EIO)).message == "cannot write a.tar: Input/output error")
    #expect(UserError.failed("cannot write a.tar", Errno(EACCES)).exitCode == 1)
}

/// A path the user named that is not there gets the caller's "name an existing …"; one that
/// is there but refused gets its errno's advice, not that.
@Test func adviceWhenMissingNamesTheRefusalOfAPathThatIsThere() {
    let missing = "name an existing file"
    #expect(Errno(ENOENT).advice(whenMissing: missing) == missing)
    #expect(Errno(ENOTDIR).advice(whenMissing: missing) == missing)
    #expect(Errno(EACCES).advice(whenMissing: missing) == Errno(EACCES).advice)
    #expect(Errno(EIO).advice(whenMissing: missing) == missing)
}

/// A new path's folder that is not there is to be made first; one that is refused gets
/// its errno's advice.
@Test func folderUnavailableSaysToMakeAMissingFolder() {
    #expect(UserError.folderUnavailable("cannot write /x/a.tar", folder: "/x", Errno(ENOENT)).message
        == "cannot write /x/a.tar: its folder /x does not exist; make it first (mkdir -p), or name a path in a folder that exists")
    #expect(UserError.folderUnavailable("cannot create /x/s", folder: "/x", role: "parent folder", Errno(EACCES)).message
        == "cannot create /x/s: its parent folder /x cannot be opened: Permission denied; \(Errno(EACCES).advice!)")
}

/// A program that cannot be started: EAGAIN is a process limit there, not a lock.
@Test func cannotStartSaysWhatToDoAboutTheProgram() {
    #expect(UserError.cannotStart("cannot run x", Errno(ENOENT)).message.hasSuffix("; no such program: name one on PATH, or give its full path"))
    #expect(UserError.cannotStart("cannot run x", Errno(EAGAIN)).message.contains("ulimit -u"))
    #expect(UserError.cannotStart("cannot run x", Errno(EMFILE)).message.hasSuffix(Errno(EMFILE).advice!))
    #expect(UserError.cannotStart("cannot run x", Errno(EIO)).message == "cannot run x: Input/output error")
}

/// The errnos a command commonly meets on a mount or a socket say what to do too.
@Test(arguments: [ENOTCONN, EBUSY, ETIMEDOUT, ENOMEM])
func commonErrnosHaveAdvice(code: Int32) {
    #expect(Errno(code).advice != nil)
}
