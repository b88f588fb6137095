import Foundation
import Glibc
import Testing

/// POSIX checks of our own, for what pjdfstest found (issue 12), in the manner of
/// go-fuse's `posixtest`: a named list of checks, each run in a folder of a mount and in
/// a native folder, by root and by the test users (cfs-alice, cfs-bob). Each check
/// records what every call gave; the mount must give what native gives, and a few
/// results are also spelt out, so that a check cannot pass by failing on both sides.
@Suite("POSIX checks")
struct PosixTests {
    /// python: `as_user(name, fn)` runs `fn` in a child with that user's ids (and `umask`).
    static let prelude = """
        import pwd
        D = sys.argv[1]
        A, B = pwd.getpwnam("cfs-alice"), pwd.getpwnam("cfs-bob")
        def as_user(account, fn, mask=0o022):
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(r)
                try:
                    os.setgroups([])
                    os.setgid(account.pw_gid)
                    os.setuid(account.pw_uid)
                    os.umask(mask)
                    value = fn()
                    out = "ok" if value is None else str(value)
                except OSError as error:
                    out = errno.errorcode.get(error.errno, str(error.errno))
                except BaseException as error:
                    out = "child " + repr(error)
                os.write(w, out.encode())
                os._exit(0)
            os.close(w)
            data = b""
            while True:
                chunk = os.read(r, 4096)
                if not chunk: break
                data += chunk
            os.waitpid(pid, 0)
            os.close(r)
            return data.decode()
        def user_check(label, account, fn, mask=0o022):
            results[label] = as_user(account, fn, mask)
        def mode(path): return "%o" % stat.S_IMODE(os.lstat(path).st_mode)
        def owner(path):
            info = os.lstat(path)
            return "%d:%d" % (info.st_uid, info.st_gid)
        def folder(name, mode_bits=0o777, uid=0, gid=0):
            path = os.path.join(D, name)
            os.mkdir(path)
            os.chown(path, uid, gid)
            os.chmod(path, mode_bits)
            return path
        def write_one(path, flags=os.O_WRONLY):
            fd = os.open(path, flags)
            try:
                os.write(fd, b"x")
            finally:
                os.close(fd)

        """

    /// The checks, by name: python run as root in the folder `D`.
    static let checks: [(name: String, code: String)] = [
        ("umask", """
            d = folder("umask")
            for mask in [0o000, 0o002, 0o022, 0o077]:
                user_check("file %03o" % mask, A, lambda: make(d + "/f%03o" % mask, mode=0o666) or mode(d + "/f%03o" % mask), mask)
                user_check("dir %03o" % mask, A, lambda: os.mkdir(d + "/d%03o" % mask, 0o777) or mode(d + "/d%03o" % mask), mask)
            """),
        ("set-ID cleared on write by another user", """
            d = folder("setid")
            for name, bits in [("both", 0o6777), ("suid", 0o4777), ("sgid-exec", 0o2777), ("sgid-noexec", 0o2767)]:
                for way in ["write", "append", "truncate", "root-write"]:
                    path = "%s/%s-%s" % (d, name, way)
                    make(path)
                    os.chmod(path, bits)
                    if way == "write": user_check(path, A, lambda: write_one(path))
                    if way == "append": user_check(path, A, lambda: write_one(path, os.O_WRONLY | os.O_APPEND))
                    if way == "truncate": user_check(path, A, lambda: os.truncate(path, 1))
                    if way == "root-write": check(path, lambda: write_one(path))
                    results[path + " mode"] = mode(path)
            """),
        ("set-group-ID folder passes its group", """
            d = folder("sgid", 0o2777, 0, B.pw_gid)
            user_check("file", A, lambda: make(d + "/file") or owner(d + "/file") + " " + mode(d + "/file"))
            user_check("dir", A, lambda: os.mkdir(d + "/dir", 0o777) or owner(d + "/dir") + " " + mode(d + "/dir"))
            user_check("sgid file of a non-member", A, lambda: os.close(os.open(d + "/exe", os.O_WRONLY | os.O_CREAT, 0o2775)) or mode(d + "/exe"))
            user_check("fifo", A, lambda: os.mkfifo(d + "/fifo") or owner(d + "/fifo"))
            user_check("symlink", A, lambda: os.symlink("file", d + "/link") or owner(d + "/link"))
            check("root's file", lambda: make(d + "/roots") or owner(d + "/roots"))
            """),
        ("sticky folder", """
            d = folder("sticky", 0o1777)
            user_check("alice creates", A, lambda: make(d + "/alices"))
            user_check("bob creates", B, lambda: make(d + "/bobs"))
            user_check("bob unlinks alice's", B, lambda: os.unlink(d + "/alices"))
            user_check("bob renames alice's", B, lambda: os.rename(d + "/alices", d + "/taken"))
            user_check("bob replaces alice's", B, lambda: os.rename(d + "/bobs", d + "/alices"))
            user_check("bob writes alice's", B, lambda: write_one(d + "/alices"))
            user_check("alice renames hers", A, lambda: os.rename(d + "/alices", d + "/alices2"))
            user_check("alice unlinks hers", A, lambda: os.unlink(d + "/alices2"))
            check("root unlinks bob's", lambda: os.unlink(d + "/bobs"))
            check("names left", lambda: ",".join(sorted(os.listdir(d))))
            """),
        ("rename permission rules", """
            d = folder("rename")
            user_check("alice makes", A, lambda: (os.mkdir(d + "/a"), os.mkdir(d + "/a/sub"), os.mkdir(d + "/b"),
                                                   make(d + "/a/file"), os.mkdir(d + "/full"), make(d + "/full/x"), os.mkdir(d + "/empty")) and None)
            os.chmod(d + "/a", 0o755)
            user_check("bob moves alice's folder elsewhere", B, lambda: os.rename(d + "/a", d + "/b/a"))
            user_check("bob renames alice's folder in place", B, lambda: os.rename(d + "/a", d + "/a2"))
            user_check("bob moves a file out of alice's folder", B, lambda: os.rename(d + "/a/file", d + "/file"))
            user_check("into itself", A, lambda: os.rename(d + "/empty", d + "/empty/inner"))
            user_check("folder over non-empty folder", A, lambda: os.rename(d + "/empty", d + "/full"))
            user_check("folder over file", A, lambda: os.rename(d + "/empty", d + "/full/x"))
            user_check("file over folder", A, lambda: os.rename(d + "/full/x", d + "/empty"))
            user_check("folder over empty folder", A, lambda: os.rename(d + "/a/sub", d + "/empty"))
            user_check("dot", A, lambda: os.rename(d + "/full/.", d + "/dot"))
            check("names left", lambda: ",".join(sorted(os.listdir(d))))
            """),
        ("owner-only changes", """
            d = folder("owner")
            make(d + "/roots", mode=0o666)
            os.chmod(d + "/roots", 0o666)
            user_check("alice chmods root's", A, lambda: os.chmod(d + "/roots", 0o777))
            user_check("alice sets root's times to now", A, lambda: os.utime(d + "/roots"))
            user_check("alice sets root's times", A, lambda: os.utime(d + "/roots", (1, 1)))
            user_check("alice chowns root's to herself", A, lambda: os.chown(d + "/roots", A.pw_uid, -1))
            user_check("alice makes hers", A, lambda: make(d + "/hers"))
            user_check("alice gives hers a group she is not in", A, lambda: os.chown(d + "/hers", -1, B.pw_gid))
            os.chown(d + "/hers", A.pw_uid, B.pw_gid)
            user_check("alice sets set-group-ID of a group she is not in", A, lambda: os.chmod(d + "/hers", 0o2755) or mode(d + "/hers"))
            user_check("alice links root's file", A, lambda: os.link(d + "/roots", d + "/roots-link"))
            os.chmod(d + "/roots", 0o4755)
            user_check("alice no-op chowns root's set-user-ID file", A, lambda: os.chown(d + "/roots", -1, -1))
            results["root's mode"] = mode(d + "/roots")
            """),
    ]

    /// Every check through a mount open to other users, and natively.
    @Test(arguments: [[], ["nopassthrough"]])
    func posixChecksGiveWhatNativeGives(options: [String]) throws {
        try withMountedContainer(options: ["allow_other"] + options) { container in
            #expect(chmod(container.base, 0o755) == 0)
            let native = container.base + "/native"
            #expect(mkdir(native, 0o755) == 0 && chmod(native, 0o777) == 0)
            #expect(mkdir(container.mounted("Documents/posix"), 0o777) == 0 && chmod(container.mounted("Documents/posix"), 0o777) == 0)
            var failed: [String] = []
            var calls = 0
            for check in Self.checks {
                let nativeFolder = native + "/" + check.name.replacingOccurrences(of: " ", with: "-")
                let mountFolder = container.mounted("Documents/posix/" + check.name.replacingOccurrences(of: " ", with: "-"))
                #expect(mkdir(nativeFolder, 0o777) == 0 && chmod(nativeFolder, 0o777) == 0)
                #expect(mkdir(mountFolder, 0o777) == 0 && chmod(mountFolder, 0o777) == 0)
                let expected = try pythonProbe(Self.prelude + check.code, [nativeFolder])
                let got = try pythonProbe(Self.prelude + check.code, [mountFolder])
                #expect(!expected.isEmpty, "\(check.name) ran no call")
                calls += expected.count
                for (label, value) in expected.sorted(by: { $0.key < $1.key }) {
                    let shortLabel = label.replacingOccurrences(of: nativeFolder, with: "")
                    let mounted = got[label.replacingOccurrences(of: nativeFolder, with: mountFolder)]
                    if mounted != value {
                        failed.append(check.name)
                        Issue.record("\(check.name) \(options): \(shortLabel): native \(value), mount \(mounted ?? "nothing")")
                    }
                }
                Self.expectKnownNativeResults(check.name, expected, nativeFolder)
            }
            #expect(daemonIsAlive(container))
            print("POSIX checks \(options): \(Self.checks.count) checks, \(calls) calls, failed: \(Set(failed).sorted())")
        }
    }

    /// Native results spelt out, so a check that fails the same way on both sides fails.
    static func expectKnownNativeResults(_ check: String, _ results: [String: String], _ folder: String) {
        switch check {
        case "umask":
            #expect(results["file 002"] == "664" && results["dir 002"] == "775" && results["file 077"] == "600", "\(results)")
        case "set-ID cleared on write by another user":
            let path = folder + "/setid"
            #expect(results[path + "/both-write mode"] == "777" && results[path + "/both-root-write mode"] == "6777", "\(results)")
            // Not group-executable, but alice is not in the file's group: cleared too.
            #expect(results[path + "/sgid-noexec-truncate mode"] == "767", "\(results)")
        case "set-group-ID folder passes its group":
            #expect(results["dir"]?.hasSuffix("2755") == true && results["sgid file of a non-member"] == "755", "\(results)")
        case "sticky folder":
            #expect(results["bob unlinks alice's"] == "EPERM" && results["alice unlinks hers"] == "ok", "\(results)")
        case "rename permission rules":
            #expect(results["bob moves alice's folder elsewhere"] == "EACCES" && results["into itself"] == "EINVAL", "\(results)")
        case "owner-only changes":
            #expect(results["alice no-op chowns root's set-user-ID file"] == "EPERM" && results["root's mode"] == "4755", "\(results)")
        default:
            Issue.record("no known results for \(check)")
        }
    }
}
