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
