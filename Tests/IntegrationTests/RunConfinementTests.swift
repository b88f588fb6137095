import CLinux
import ContainerStore
import Foundation
import Glibc
import Testing

/// What a program under `containerfs run` cannot do, tried as an attacker would, as root
/// (the test runner) and as an ordinary user: each attempt fails inside, and the host is
/// checked from outside to be unchanged (docs/run.md, "Threat model").
@Suite("RunConfinement", .serialized)
struct RunConfinementTests {
    /// Who runs `containerfs run`: root, then an ordinary user.
    static let runners: [String?] = [nil, "cfs-alice"]

    // MARK: Privileges

    @Test(arguments: runners)
    func theProgramHasNoCapabilityAndNoNewPrivileges(runner: String?) throws {
        let container = try MountedContainer(user: runner)
        let result = try inside(container, "grep -E '^(CapEff|CapPrm|CapBnd|CapAmb|NoNewPrivs):' /proc/self/status")
        #expect(result.status == 0, "\(result)")
        let fields = statusFields(result.stdout)
        #expect(fields["CapEff"] == "0000000000000000", "\(result)")
        #expect(fields["CapPrm"] == "0000000000000000", "\(result)")
        #expect(fields["CapBnd"] == "0000000000000000", "\(result)")
        #expect(fields["CapAmb"] == "0000000000000000", "\(result)")
        #expect(fields["NoNewPrivs"] == "1", "\(result)")
        try expectCleanedUp(container)
    }

    /// Root's program runs as uid 501 inside (iOS's `mobile`), which is `_containerfs`
    /// outside, never root; what it makes still belongs to the caller in the store. An
    /// ordinary user's runs as that user.
    @Test(arguments: runners)
    func theProgramRunsAsAnUnprivilegedUIDInsideAndMakesTheCallersFiles(runner: String?) throws {
        let container = try MountedContainer(user: runner)
        let result = try inside(container, "id -u; id -g; id -un; id -gn; touch Documents/made")
        #expect(result.status == 0, "\(result)")
        // Seen from the host, the program is `_containerfs` (root's) or the user: a sleep
        // with a marker of its own, found by its command line.
        let marker = "3.\(Int.random(in: 1000...9999))"   // seconds
        let sleeper = try BackgroundProgram(["/usr/bin/setpriv"] + (runner.map { ["--reuid=\($0)", "--regid=\($0)", "--init-groups"] } ?? [])
                                            + ["--", containerfsBinary, "run", container.store, "--", "sleep", marker])
        defer { _ = sleeper.wait() }
        var hostIDs: (uid: String, gid: String)?
        for _ in 0..<200 where hostIDs == nil {
            usleep(50_000)
            hostIDs = processIDs(commandLine: "sleep\0\(marker)\0")
        }
        let host = try #require(getpwnam(runner ?? "_containerfs"), "no host user")
        #expect(hostIDs?.uid == "\(host.pointee.pw_uid)" && hostIDs?.gid == "\(host.pointee.pw_gid)", "the program's host ids: \(String(describing: hostIDs))")
        #expect(hostIDs?.uid != "0", "never root outside")
        #expect(sleeper.wait().status == 0)
        let expected = runner.map { getpwnam($0).pointee.pw_uid } ?? 501
        let expectedGroup = runner.map { getpwnam($0).pointee.pw_gid } ?? 501
        // Root's program is `mobile`, as on iOS; an ordinary user's keeps its names.
        let names = runner.map { "\($0)\n\(String(cString: getgrgid(getpwnam($0).pointee.pw_gid).pointee.gr_name))" } ?? "mobile\nmobile"
        #expect(result.stdout == "\(expected)\n\(expectedGroup)\n\(names)\n", "\(result)")
        var info = stat()
        #expect(stat(container.stored("Documents/made"), &info) == 0)
        #expect(info.st_uid == (runner.map { getpwnam($0).pointee.pw_uid } ?? 0), "the caller owns it outside")
        try expectCleanedUp(container)
    }

    /// Root's program owns nothing of the host (issue #25): it is nobody to the kernel's
    /// owner checks. Inside, every `/dev` entry is chmodded, chowned, touched and labelled
    /// (to values that change nothing, so that a failure breaks no other process), and
    /// root-only files are read; outside, the host's nodes are checked unchanged. An
    /// ordinary user may `touch` a world-writable node, as outside (docs/run.md).
    @Test(arguments: runners)
    func theProgramOwnsNothingOfTheHost(runner: String?) throws {
        let container = try MountedContainer(user: runner)
        let nodes = ["null", "zero", "full", "random", "urandom", "tty"]
        func hostState() -> [String: stat] {
            var states: [String: stat] = [:]
            for node in nodes {
                var info = stat()
                if stat("/dev/" + node, &info) == 0 { states[node] = info }
            }
            return states
        }
        let before = hostState()
        defer {
            // A failing build changed the host: put its nodes back as they were.
            for (node, info) in hostState() where before[node].map({ $0.st_mode != info.st_mode || $0.st_uid != info.st_uid }) ?? false {
                chmod("/dev/" + node, before[node]!.st_mode & 0o7777)
                chown("/dev/" + node, before[node]!.st_uid, before[node]!.st_gid)
            }
        }
        usleep(20_000)   // so that a change inside would show in the times
        let result = try inside(container, """
            for entry in /dev/* /dev/pts/* /dev/shm; do
              chmod 0666 "$entry" 2>/dev/null && echo "chmod $entry ok"
              chown "$(id -u):$(id -g)" "$entry" 2>/dev/null && echo "chown $entry ok"
              touch -c "$entry" 2>/dev/null && echo "touch $entry ok"
              setfattr -n user.cfs -v 1 "$entry" 2>/dev/null && echo "setfattr $entry ok"
            done
            for file in /etc/shadow /etc/gshadow /etc/sudoers /proc/kpagecount /proc/kcore; do
              head -c 1 "$file" >/dev/null 2>&1 && echo "read $file ok"
            done
            echo x >/dev/null && head -c 4 /dev/urandom | wc -c && head -c 4 /dev/zero | wc -c
            """)
        let lines = result.stdout.split(separator: "\n").map(String.init)
        // The nodes still work.
        #expect(lines.suffix(2) == ["4", "4"], "\(result)")
        for line in lines.dropLast(2) {
            let words = line.split(separator: " ")
            // The sandbox's own /dev folder, pts and shm are private to it: changing them changes nothing outside.
            let entry = words.count > 1 ? String(words[1]) : ""
            let privateEntry = ["/dev/pts", "/dev/shm", "/dev/pts/ptmx"].contains(entry) || entry.hasPrefix("/dev/shm/")
                || ["/dev/fd", "/dev/stdin", "/dev/stdout", "/dev/stderr", "/dev/core", "/dev/ptmx"].contains(entry)
            let ordinaryTouch = runner != nil && words.first == "touch"
            #expect(privateEntry || ordinaryTouch, "the program could: \(line)")
        }
        for (node, old) in before {
            let now = hostState()[node]
            #expect(now?.st_mode == old.st_mode && now?.st_uid == old.st_uid && now?.st_gid == old.st_gid, "/dev/\(node) changed on the host")
            if runner == nil {
                #expect(now?.st_ctim.tv_sec == old.st_ctim.tv_sec && now?.st_ctim.tv_nsec == old.st_ctim.tv_nsec, "/dev/\(node)'s ctime changed")
                #expect(now?.st_mtim.tv_sec == old.st_mtim.tv_sec && now?.st_mtim.tv_nsec == old.st_mtim.tv_nsec, "/dev/\(node)'s mtime changed")
            }
        }
        try expectCleanedUp(container)
    }

    /// The store is closed to other users on disk: `create` makes it 0700, so a folder a
    /// program of root's makes 2777 in `Documents/` is no way in for another user, while
    /// the mount shows its root 0755 to serve them through the rules (issue #25).
    @Test func otherUsersStayOutOfAContainerOnDisk() throws {
        let container = try MountedContainer()
        chmod(container.base, 0o755)   // only the store's own mode may keep alice out
        var info = stat()
        #expect(stat(container.store, &info) == 0 && info.st_mode & 0o777 == 0o700, "store mode \(String(info.st_mode & 0o777, radix: 8))")
        let made = try inside(container, "mkdir Documents/open && chmod 2777 Documents/open && echo secret >Documents/open/s")
        #expect(made.status == 0, "\(made)")
        let alice = try probe(as: "cfs-alice", root: container.store, """
            check("write", lambda: write(M + "/Documents/open/alice", b"x"))
            check("read", lambda: read(M + "/Documents/open/s"))
            check("list", lambda: os.listdir(M + "/Documents"))
            """)
        for (name, outcome) in alice { #expect(outcome == "EACCES", "alice's \(name) from disk: \(outcome)") }
        #expect(alice.count == 3, "\(alice)")
        try container.mount(options: ["allow_other"])
        defer { container.unmount() }
        #expect(stat(container.mountpoint, &info) == 0 && info.st_mode & 0o777 == 0o755, "the mount's root")
        let throughMount = try probe(as: "cfs-alice", root: container.mountpoint, """
            check("list", lambda: ",".join(sorted(os.listdir(M + "/Documents"))))
            """)
        #expect(throughMount["list"] == "Inbox,open", "\(throughMount)")
    }

    /// A program that stops the sandbox's init (ptrace of pid 1) and leaves a child behind
    /// cannot keep the run, nor the mount, alive after it ends: `run` ends the sandbox a
    /// grace period after the program, says so, and cleans up (an adversarial review's
    /// finding: before, `run` never returned).
    @Test(arguments: runners)
    func aProgramThatStopsTheSandboxInitCannotOutliveItsRun(runner: String?) throws {
        let container = try MountedContainer(user: runner)
        let marker = "30\(Int.random(in: 1000...9999))"
        let script = """
            python3 -c 'import ctypes; l = ctypes.CDLL(None, use_errno=True); print("attach", l.ptrace(16, 1, 0, 0))'
            setsid sh -c 'exec sleep \(marker)' </dev/null >/dev/null 2>&1 &
            exit 7
            """
        let started = Date()
        // SIGKILL after 60 s: a child of a test thread inherits SIGTERM blocked.
        let result = try runProgram(["timeout", "-s", "KILL", "60", containerfsBinary, "run", container.store, "--", "sh", "-c", script],
                                    user: container.user)
        // The program's status, not the killed sandbox's (137 also: run never returned). In a
        // race the init collects it, then stops before passing it on: run says it was lost.
        #expect(result.status == 7 || result.stderr.contains("exit status was lost"), "\(result)")
        #expect(Date().timeIntervalSince(started) < 30)
        #expect(result.stdout.contains("attach 0"), "the program stopped the init: \(result)")
        #expect(result.stderr.contains("ended it"), "\(result)")
        #expect(try runProgram(["pgrep", "-f", "sleep \(marker)"]).status == 1, "the child left behind is gone")
        try expectCleanedUp(container)
    }

    // MARK: Mounts and namespaces

    /// Every mount the program sees, remounted read-write both ways through mount(2) itself
    /// (mount(8) would refuse a non-root uid before asking the kernel): each refused.
    @Test(arguments: runners)
    func noBindCanBeRemountedReadWrite(runner: String?) throws {
        let container = try MountedContainer(user: runner)
        let script = """
            import ctypes, errno
            libc = ctypes.CDLL(None, use_errno=True)
            MS_REMOUNT, MS_BIND = 32, 4096
            points = sorted({line.split()[4] for line in open("/proc/self/mountinfo")})
            for point in points:
                for name, flags in [("remount,rw", MS_REMOUNT), ("remount,bind,rw", MS_REMOUNT | MS_BIND)]:
                    done = libc.mount(None, point.encode(), None, flags, None) == 0
                    print(name, point, "remounted" if done else errno.errorcode[ctypes.get_errno()])
            """
        let result = try runProgram([containerfsBinary, "run", container.store, "--", "python3", "-c", script], user: runner)
        #expect(result.status == 0, "\(result)")
        let lines = result.stdout.split(separator: "\n").map { $0.split(separator: " ").map(String.init) }
        let mounts = Set(lines.compactMap { $0.count == 3 ? $0[1] : nil })
        // The attempts did run, on the binds that matter.
        for expected in ["/", "/etc", "/usr", "/proc", "/proc/sys", "/home/app", "/tmp"] {
            #expect(mounts.contains(expected), "\(expected) was not tried: \(result)")
        }
        for line in lines where line.count == 3 {
            #expect(line[2] == "EPERM", "mount -o \(line[0]) \(line[1]): \(line[2])")
        }
        try expectCleanedUp(container)
    }

    @Test(arguments: runners)
    func writingTheHostsSystemFoldersFails(runner: String?) throws {
        let container = try MountedContainer(user: runner)
        let probe = "containerfs-probe-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let corePattern = try String(contentsOfFile: "/proc/sys/kernel/core_pattern", encoding: .utf8)
        let targets = ["/etc/\(probe)", "/usr/\(probe)", "/\(probe)", "/sys/\(probe)", "/proc/sys/\(probe)"]
        defer { targets.forEach { unlink($0) } }
        // Each write alone, its own status; core_pattern gets its own value back (harmless
        // if it went through, but it must not: a root uid may write a sysctl with no capability).
        var script = #"attempt() { label=$1; shift; "$@" >/dev/null 2>&1; echo "$label $?"; }"# + "\n"
        for target in targets { script += "attempt \(target) sh -c 'echo escaped > \(target)'\n" }
        script += #"attempt core_pattern sh -c 'v=$(cat /proc/sys/kernel/core_pattern); printf "%s\n" "$v" > /proc/sys/kernel/core_pattern'"# + "\n"
        script += "attempt sysctl sh -c 'echo 1 > /proc/sys/net/ipv4/ip_forward'\n"
        let result = try inside(container, script)
        let outcomes = labelledStatuses(result.stdout)
        for label in targets + ["core_pattern", "sysctl"] {
            #expect(outcomes[label] != nil, "\(label) was not tried: \(result)")
            #expect(outcomes[label] != "0", "the write to \(label) succeeded")
        }
        for target in targets where !target.hasPrefix("/proc/") && !target.hasPrefix("/sys/") {
            #expect(access(target, F_OK) != 0, "\(target) exists on the host")
        }
        #expect(try String(contentsOfFile: "/proc/sys/kernel/core_pattern", encoding: .utf8) == corePattern)
        try expectCleanedUp(container)
    }

    /// A new user namespace would give the program every capability again in it.
    @Test(arguments: runners)
    func noUserNamespaceCanBeMadeInside(runner: String?) throws {
        let container = try MountedContainer(user: runner)
        let probe = "/etc/containerfs-probe-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        defer { unlink(probe) }
        let script = """
            unshare -Urm true >/dev/null 2>&1; echo "unshare $?"
            unshare -Urm sh -c 'mount -o remount,bind,rw /etc && echo escaped > \(probe)' >/dev/null 2>&1; echo "remount $?"
            """
        let result = try inside(container, script)
        let outcomes = labelledStatuses(result.stdout)
        #expect(outcomes["unshare"] != nil && outcomes["unshare"] != "0", "\(result)")
        #expect(outcomes["remount"] != nil && outcomes["remount"] != "0", "\(result)")
        #expect(access(probe, F_OK) != 0, "\(probe) exists on the host")
        try expectCleanedUp(container)
    }

    @Test(arguments: runners)
    func mknodChrootAndSetnsFail(runner: String?) throws {
        let container = try MountedContainer(user: runner)
        let script = """
            mknod tmp/mem c 1 1 >/dev/null 2>&1; echo "mknod-tmp $?"
            mknod Documents/mem c 1 1 >/dev/null 2>&1; echo "mknod-documents $?"
            chroot / true >/dev/null 2>&1; echo "chroot $?"
            nsenter -t 1 -m true >/dev/null 2>&1; echo "setns-mnt $?"
            nsenter -t 1 -n true >/dev/null 2>&1; echo "setns-net $?"
            touch Documents/capable
            python3 -c 'import os, struct; os.setxattr("Documents/capable", "security.capability", struct.pack("<5I", 0x02000001, 1 << 21, 0, 0, 0))' >/dev/null 2>&1; echo "file-capability $?"
            """
        let result = try inside(container, script)
        let outcomes = labelledStatuses(result.stdout)
        for label in ["mknod-tmp", "mknod-documents", "chroot", "setns-mnt", "setns-net", "file-capability"] {
            #expect(outcomes[label] != nil, "\(label) was not tried: \(result)")
            #expect(outcomes[label] != "0", "\(label) succeeded")
        }
        #expect(access(container.stored("Documents/mem"), F_OK) != 0, "a device file is in the store")
        var capability = [UInt8](repeating: 0, count: 64)
        #expect(getxattr(container.stored("Documents/capable"), "security.capability", &capability, capability.count) < 0,
                "a file capability is in the store")
        try expectCleanedUp(container)
    }

    /// With the host's network and with a network of the sandbox's own.
    @Test(arguments: runners, [[], ["--no-network"]])
    func rawSocketsAreRefused(runner: String?, options: [String]) throws {
        let container = try MountedContainer(user: runner)
        let script = """
            import errno, socket
            for name, family, kind, protocol in [("inet-raw", socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP),
                                                 ("packet", socket.AF_PACKET, socket.SOCK_RAW, 0)]:
                try:
                    socket.socket(family, kind, protocol).close()
                    print(name, "opened")
                except OSError as error:
                    print(name, errno.errorcode[error.errno])
            """
        let result = try runProgram([containerfsBinary, "run", container.store] + options + ["--", "python3", "-c", script], user: runner)
        let outcomes = labelledStatuses(result.stdout)
        #expect(outcomes["inet-raw"] == "EPERM", "\(result)")
        #expect(outcomes["packet"] == "EPERM", "\(result)")
        try expectCleanedUp(container)
    }

    /// A process of the host, the caller's own: not visible inside, so neither signalled
    /// nor traced.
    @Test(arguments: runners)
    func aHostProcessCannotBeSeenSignalledOrTraced(runner: String?) throws {
        let container = try MountedContainer(user: runner)
        let asRunner = runner.map { ["/usr/bin/setpriv", "--reuid=\($0)", "--regid=\($0)", "--init-groups", "--"] } ?? []
        let host = try BackgroundProgram((asRunner.isEmpty ? ["/usr/bin/sleep"] : asRunner + ["sleep"]) + ["60"])
        defer { kill(host.pid, SIGKILL); _ = host.wait(seconds: 5) }
        let pid = host.pid
        let script = """
            import ctypes, errno, os
            print("visible", os.path.exists("/proc/\(pid)"))
            try:
                os.kill(\(pid), 0); print("kill", "sent")
            except OSError as error:
                print("kill", errno.errorcode[error.errno])
            libc = ctypes.CDLL(None, use_errno=True)
            PTRACE_ATTACH = 16
            print("ptrace", "attached" if libc.ptrace(PTRACE_ATTACH, \(pid), None, None) == 0 else errno.errorcode[ctypes.get_errno()])
            """
        let result = try runProgram([containerfsBinary, "run", container.store, "--", "python3", "-c", script], user: runner)
        let outcomes = labelledStatuses(result.stdout)
        #expect(outcomes["visible"] == "False", "\(result)")
        #expect(outcomes["kill"] == "ESRCH", "\(result)")
        #expect(outcomes["ptrace"] == "ESRCH", "\(result)")
        #expect(kill(pid, 0) == 0, "the host process lives on")
        try expectCleanedUp(container)
    }

    // MARK: Set-ID files

    /// Root's program owns the store owner's files, and no other: it cannot clear the
    /// set-ID bits of another user's file (`chown(f, -1, -1)`), as natively (a review's
    /// finding: the app user mapped to root had root's pass in the daemon's own check).
    @Test func theProgramCannotClearAnotherUsersSetIDBits() throws {
        let container = try MountedContainer()
        let alice = try #require(getpwnam("cfs-alice"))
        let file = container.stored("Documents/helper")
        try Data("#!/bin/sh\n".utf8).write(to: URL(fileURLWithPath: file))
        chown(file, alice.pointee.pw_uid, alice.pointee.pw_gid)
        chmod(file, 0o6755)
        let result = try inside(container, #"python3 -c 'import os; os.chown("Documents/helper", -1, -1)' 2>&1 | tail -1"#)
        #expect(result.stdout.contains("PermissionError"), "\(result)")
        var info = stat()
        #expect(stat(file, &info) == 0 && info.st_mode & 0o7777 == 0o6755, "mode now \(String(info.st_mode & 0o7777, radix: 8))")
        try expectCleanedUp(container)
    }

    /// An ACL root's program sets naming itself (`mobile`, 501 inside, `_containerfs`
    /// outside) and its group is recorded naming the store's owner, as a chown is, and
    /// read back inside as set: no ACL in the store grants `_containerfs` anything on the
    /// host (before, the store held its uid and gid, 994 and 993 here).
    @Test func anACLTheProgramSetsNamesTheOwnerInTheStore() throws {
        let container = try MountedContainer()
        let script = #"""
            import os, struct
            p = "Documents/shared"
            open(p, "w").write("x")
            def entries(v): return [struct.unpack_from("<HHI", v, 4 + 8 * k) for k in range((len(v) - 4) // 8)]
            none = 0xFFFFFFFF
            acl = [(1, 6, none), (2, 7, os.getuid()), (4, 4, none), (8, 5, os.getgid()), (0x10, 7, none), (0x20, 0, none)]
            os.setxattr(p, "system.posix_acl_access", struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in acl))
            print(entries(os.getxattr(p, "system.posix_acl_access")) == acl, os.getuid(), os.getgid())
            """#
        let result = try inside(container, "python3 -c '\(script.replacingOccurrences(of: "'", with: "'\\''"))'")
        #expect(result.status == 0 && result.stdout == "True 501 501\n", "\(result)")
        var value = [UInt8](repeating: 0, count: 256)
        let count = getxattr(container.stored("Documents/shared"), "system.posix_acl_access", &value, value.count)
        try #require(count == 4 + 6 * 8, "the store's ACL: \(count)")
        let named = stride(from: 4, to: count, by: 8).compactMap { offset -> (UInt16, UInt32)? in
            let tag = UInt16(value[offset]) | UInt16(value[offset + 1]) << 8
            let id = (0..<4).reduce(UInt32(0)) { $0 | UInt32(value[offset + 4 + $1]) << (8 * $1) }
            return tag == 0x02 || tag == 0x08 ? (tag, id) : nil
        }
        var store = stat()
        #expect(stat(container.store, &store) == 0)
        #expect(named.map(\.0) == [0x02, 0x08] && named.map(\.1) == [store.st_uid, store.st_gid], "the store's named entries: \(named)")
        try expectCleanedUp(container)
    }

    /// A program root runs makes files owned by root in the store, which sits on an ordinary
    /// file system: none may be set-user-ID or set-group-ID, however it tries.
    @Test(arguments: runners)
    func noSetIDFileComesOutOfARun(runner: String?) throws {
        let container = try MountedContainer(user: runner)
        let script = """
            import os
            open("Documents/chmod", "w").close()
            os.chmod("Documents/chmod", 0o6755)
            os.close(os.open("Documents/created", os.O_CREAT | os.O_WRONLY, 0o6755))
            os.mknod("Documents/mknod", 0o100000 | 0o6755)
            with open("/bin/sh", "rb") as source, open("Documents/shell", "wb") as copy:
                copy.write(source.read())
            os.chmod("Documents/shell", 0o4755)
            os.mkdir("Documents/shared")
            os.chmod("Documents/shared", 0o2775)
            """
        let result = try runProgram([containerfsBinary, "run", container.store, "--", "python3", "-c", script], user: runner)
        #expect(result.status == 0, "\(result)")
        let owner = runner.map { getpwnam($0).pointee.pw_uid } ?? 0
        for name in ["chmod", "created", "mknod", "shell"] {
            var info = stat()
            #expect(stat(container.stored("Documents/" + name), &info) == 0, "\(name) missing")
            #expect(info.st_uid == owner, "\(name) owned by \(info.st_uid)")
            #expect(info.st_mode & (S_ISUID | S_ISGID) == 0, "\(name) has mode \(String(info.st_mode & 0o7777, radix: 8))")
            #expect(info.st_mode & 0o777 == 0o755, "\(name) keeps its other bits: \(String(info.st_mode & 0o7777, radix: 8))")
        }
        // A set-group-ID folder only passes its group on: it stays.
        var folder = stat()
        #expect(stat(container.stored("Documents/shared"), &folder) == 0)
        #expect(folder.st_mode & 0o7777 == 0o2775, "\(String(folder.st_mode & 0o7777, radix: 8))")
        try expectCleanedUp(container)
    }

    /// `-o nosetid` is what `run` relies on; a mount without it keeps what root asks for,
    /// as a file system does.
    @Test(arguments: [(["nosetid"], mode_t(0o755)), ([], mode_t(0o6755))])
    func theNoSetIDMountOptionDropsTheBits(options: [String], expected: mode_t) throws {
        try withMountedContainer(options: options) { container in
            let made = container.mounted("Documents/tool")
            #expect(FileManager.default.createFile(atPath: made, contents: Data("#!/bin/sh\n".utf8)))
            #expect(chmod(made, 0o6755) == 0, "chmod: \(String(cString: strerror(errno)))")
            let created = open(container.mounted("Documents/created"), O_CREAT | O_WRONLY, 0o6755)
            #expect(created >= 0)
            if created >= 0 { close(created) }
            for name in ["tool", "created"] {
                var info = stat()
                #expect(stat(container.stored("Documents/" + name), &info) == 0)
                #expect(info.st_mode & 0o7777 == expected, "\(name): \(String(info.st_mode & 0o7777, radix: 8))")
            }
        }
    }

    // MARK: Environment

    @Test(arguments: runners)
    func theCallersSecretsStayOutsideUnlessPassed(runner: String?) throws {
        let container = try MountedContainer(user: runner)
        let environment = ["PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "LANG": "C.UTF-8",
                           "AWS_SECRET_ACCESS_KEY": "aws-secret-value", "GITHUB_TOKEN": "github-token-value", "SOME_SETTING": "kept-out"]
        let plain = try runProgram([containerfsBinary, "run", container.store, "--", "env"], user: runner, environment: environment)
        #expect(plain.status == 0, "\(plain)")
        let names = Set(plain.stdout.split(separator: "\n").compactMap { $0.split(separator: "=", maxSplits: 1).first.map(String.init) })
        #expect(!names.contains("AWS_SECRET_ACCESS_KEY"), "\(plain.stdout)")
        #expect(!names.contains("GITHUB_TOKEN"), "\(plain.stdout)")
        #expect(!names.contains("SOME_SETTING"), "\(plain.stdout)")
        #expect(!plain.stdout.contains("secret-value") && !plain.stdout.contains("token-value"))
        #expect(names.contains("LANG") && names.contains("PATH") && names.contains("HOME"), "\(plain.stdout)")

        let printed = #"echo "$GITHUB_TOKEN|$MODE|${UNSET_NAME-unset}|${AWS_SECRET_ACCESS_KEY-unset}""#
        let passed = try runProgram([containerfsBinary, "run", container.store, "--env", "GITHUB_TOKEN", "--env", "MODE=test=1",
                                     "--env", "UNSET_NAME", "--", "sh", "-c", printed],
                                    user: runner, environment: environment)
        #expect(passed.status == 0, "\(passed)")
        #expect(passed.stdout == "github-token-value|test=1|unset|unset\n", "\(passed)")

        let misuse = try runProgram([containerfsBinary, "run", container.store, "--env", "=value", "--", "true"],
                                    user: runner, environment: environment)
        #expect(misuse.status == 64, "\(misuse)")
        #expect(misuse.stderr.contains("--env =value names no variable"), "\(misuse.stderr)")
        try expectCleanedUp(container)
    }

    /// A variable passed with `--env` is the program's only: bubblewrap, which runs on the
    /// host (with every capability, as root), starts without it. ld.so says once per
    /// process that it cannot preload a missing library: the program alone may say it.
    @Test(arguments: runners)
    func variablesPassedInReachOnlyTheProgram(runner: String?) throws {
        let container = try MountedContainer(user: runner)
        let missing = "/nonexistent-containerfs-preload.so"
        let ran = try runProgram([containerfsBinary, "run", container.store, "--env", "LD_PRELOAD=" + missing, "--", "true"],
                                 user: runner)
        #expect(ran.status == 0, "\(ran)")
        let complaints = ran.stderr.components(separatedBy: missing).count - 1
        #expect(complaints == 1, "LD_PRELOAD reached \(complaints) processes, not the program alone: \(ran.stderr)")
        try expectCleanedUp(container)
    }

    // MARK: Terminal

    /// On a real terminal (script(1)'s pty), TIOCSTI and TIOCLINUX fail inside, and nothing
    /// the program tried to push is read by the shell after `run` ends; the program still
    /// has the terminal in the foreground.
    @Test(arguments: runners)
    func theProgramCannotPushInputIntoTheTerminal(runner: String?) throws {
        let container = try MountedContainer(user: runner)
        try Data("""
            import errno, fcntl, os, termios
            for name, request in [("TIOCSTI", termios.TIOCSTI), ("TIOCSTI-high", termios.TIOCSTI | (1 << 32)), ("TIOCLINUX", 0x541C)]:
                try:
                    for c in "echo injected\\n":
                        fcntl.ioctl(0, request, c.encode())
                    print(name, "pushed")
                except OSError as error:
                    print(name, errno.errorcode[error.errno])
            print("foreground", os.isatty(0) and os.tcgetpgrp(0) == os.getpgrp())
            """.utf8).write(to: URL(fileURLWithPath: container.stored("Documents/inject.py")))
        // After `run`, the shell on the terminal reads a line: what was pushed, if anything.
        let session = container.base + "/terminal.sh"
        try Data("""
            \(containerfsBinary) run \(container.store) -- python3 Documents/inject.py
            IFS= read -r -t 2 line
            echo "after:[$line]"
            """.utf8).write(to: URL(fileURLWithPath: session))
        if let runner { try runProgram(["chown", "\(runner):\(runner)", container.stored("Documents/inject.py"), session]) }
        let shell = (runner.map { "setpriv --reuid=\($0) --regid=\($0) --init-groups -- " } ?? "") + "bash \(session)"
        let keyboard = Pipe()
        let terminal = try BackgroundProgram(["/usr/bin/script", "-qfec", shell, "/dev/null"], stdinPipe: keyboard)
        let result = terminal.wait(seconds: 60)
        try? keyboard.fileHandleForWriting.close()
        let outcomes = labelledStatuses(result.stdout.replacingOccurrences(of: "\r", with: ""))
        #expect(outcomes["TIOCSTI"] == "EPERM", "\(result)")
        #expect(outcomes["TIOCSTI-high"] == "EPERM", "\(result)")
        #expect(outcomes["TIOCLINUX"] == "EPERM", "\(result)")
        #expect(outcomes["foreground"] == "True", "\(result)")
        #expect(result.stdout.contains("after:[]"), "\(result)")
        #expect(!result.stdout.contains("after:[echo"), "input reached the terminal: \(result)")
        try expectCleanedUp(container)
    }

    // MARK: Kernel keyrings

    /// The caller's session keyring (Kerberos tickets, tokens a login put there) is
    /// inherited across fork and exec, and whoever possesses it reads every key in it
    /// whatever their uid: the program must not reach it, nor any keyring (an attack
    /// found it readable, as root and as an ordinary user).
    @Test(arguments: runners)
    func theCallersKeyringsStayOutside(runner: String?) throws {
        let container = try MountedContainer(user: runner)
        // The caller joins a fresh session keyring, puts a secret in it and execs `run`.
        let caller = """
            import ctypes, os, sys
            libc = ctypes.CDLL(None, use_errno=True)
            libc.syscall.restype = ctypes.c_long
            assert libc.syscall(250, ctypes.c_long(1), None) > 0, "join"   # keyctl(KEYCTL_JOIN_SESSION_KEYRING, NULL)
            assert libc.syscall(248, b"user", b"cfs-secret", b"keyring-secret-value", ctypes.c_size_t(20), ctypes.c_long(-3)) > 0, "add_key"
            os.execv(sys.argv[1], sys.argv[1:])
            """
        let program = """
            import ctypes, errno
            libc = ctypes.CDLL(None, use_errno=True)
            libc.syscall.restype = ctypes.c_long
            def outcome(result):
                return "allowed" if result >= 0 else errno.errorcode[ctypes.get_errno()]
            found = libc.syscall(250, ctypes.c_long(10), ctypes.c_long(-3), b"user", b"cfs-secret", ctypes.c_long(0))
            print("search", outcome(found))
            if found >= 0:
                buffer = ctypes.create_string_buffer(64)
                libc.syscall(250, ctypes.c_long(11), ctypes.c_long(found), buffer, ctypes.c_long(64))
                print("read", buffer.value.decode())
            print("session", outcome(libc.syscall(250, ctypes.c_long(0), ctypes.c_long(-3), ctypes.c_long(0))))
            print("add_key", outcome(libc.syscall(248, b"user", b"planted", b"x", ctypes.c_size_t(1), ctypes.c_long(-4))))
            print("request_key", outcome(libc.syscall(249, b"user", b"cfs-secret", None, ctypes.c_long(0))))
            """
        let result = try runProgram(["/usr/bin/python3", "-c", caller, containerfsBinary, "run", container.store, "--", "python3", "-c", program],
                                    user: runner)
        #expect(result.status == 0, "\(result)")
        #expect(!result.stdout.contains("keyring-secret-value"), "the program read the caller's key: \(result)")
        let outcomes = labelledStatuses(result.stdout)
        for call in ["search", "session", "add_key", "request_key"] {
            #expect(outcomes[call] == "ENOSYS", "\(call): \(result)")
        }
        try expectCleanedUp(container)
    }

    // MARK: Helpers

    /// Runs `sh -c script` under `containerfs run` as the container's user.
    private func inside(_ container: MountedContainer, _ script: String) throws -> ProgramResult {
        try runProgram([containerfsBinary, "run", container.store, "--", "sh", "-c", script], user: container.user)
    }

    /// The real uid and gid, as the host sees them, of the process whose command line is `commandLine`.
    private func processIDs(commandLine: String) -> (uid: String, gid: String)? {
        for entry in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] where Int(entry) != nil {
            guard let line = try? Data(contentsOf: URL(fileURLWithPath: "/proc/\(entry)/cmdline")),
                  String(decoding: line, as: UTF8.self) == commandLine,
                  let status = try? String(contentsOfFile: "/proc/\(entry)/status", encoding: .utf8) else { continue }
            let fields = statusFields(status)
            guard let uid = fields["Uid"]?.split(separator: "\t").first, let gid = fields["Gid"]?.split(separator: "\t").first else { continue }
            return (String(uid), String(gid))
        }
        return nil
    }

    /// `Name:\tvalue` lines of /proc/self/status.
    private func statusFields(_ text: String) -> [String: String] {
        var fields: [String: String] = [:]
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: ":", maxSplits: 1)
            if parts.count == 2 { fields[String(parts[0])] = parts[1].trimmingCharacters(in: .whitespaces) }
        }
        return fields
    }

    /// `label outcome` lines: the last word of each, by its first.
    private func labelledStatuses(_ text: String) -> [String: String] {
        var outcomes: [String: String] = [:]
        for line in text.split(separator: "\n") {
            let words = line.split(separator: " ")
            if words.count >= 2 { outcomes[String(words[0])] = String(words[words.count - 1]) }
        }
        return outcomes
    }
}
