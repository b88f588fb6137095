import ContainerStore
import Foundation
import Glibc
import Testing

/// `containerfs run`: unmodified programs confined to a container (SPEC §7).
@Suite("Run", .serialized)
struct RunTests {
    // MARK: What the program sees

    @Test func homeTmpdirXDGAndWorkingDirectoryPointIntoTheContainer() throws {
        let container = try MountedContainer()
        let result = try containerfsRun(container, ["sh", "-c", #"printf '%s\n' "$HOME" "$TMPDIR" "$XDG_CACHE_HOME" "$XDG_CONFIG_HOME" "$XDG_DATA_HOME" "$(pwd)" "$PWD"; ls"#])
        #expect(result.status == 0, "\(result)")
        #expect(result.stdout.split(separator: "\n").map(String.init) == [
            "/home/app", "/home/app/tmp", "/home/app/Library/Caches", "/home/app/Library/Preferences",
            "/home/app/Library/Application Support", "/home/app", "/home/app",
            "Demo.app", "Documents", "Library", "tmp",
        ])
        #expect(result.stderr == "", "no denial, no summary")
        try expectCleanedUp(container)
    }

    @Test func pythonWritesThroughTheMountAndSeesItsTemporaryFolder() throws {
        let container = try MountedContainer()
        let script = """
            import os, tempfile
            print(os.getcwd(), tempfile.gettempdir(), os.path.expanduser("~"))
            with open(os.path.join(os.environ["XDG_DATA_HOME"], "settings.json"), "w") as f:
                f.write('{"theme": "dark"}')
            with tempfile.NamedTemporaryFile(delete=False) as f:
                f.write(b"scratch")
                print(f.name.startswith("/home/app/tmp/"))
            """
        let result = try containerfsRun(container, ["python3", "-c", script])
        #expect(result.status == 0, "\(result)")
        #expect(result.stdout == "/home/app /home/app/tmp /home/app\nTrue\n")
        #expect(try String(contentsOfFile: container.stored("Library/Application Support/settings.json"), encoding: .utf8) == #"{"theme": "dark"}"#)
        try expectCleanedUp(container)
    }

    @Test func sqliteKeepsADatabaseInDocumentsAcrossRuns() throws {
        let container = try MountedContainer()
        let first = try containerfsRun(container, ["sqlite3", "Documents/notes.db", "create table notes(body text); insert into notes values('first note'); pragma integrity_check;"])
        #expect(first.status == 0, "\(first)")
        #expect(first.stdout == "ok\n")
        let second = try containerfsRun(container, ["sqlite3", "Documents/notes.db", "insert into notes values('second'); select body from notes order by rowid;"])
        #expect(second.status == 0, "\(second)")
        #expect(second.stdout == "first note\nsecond\n")
        #expect(FileManager.default.fileExists(atPath: container.stored("Documents/notes.db")))
        try expectCleanedUp(container)
    }

    @Test func gitInitAndCommitInDocuments() throws {
        let container = try MountedContainer()
        let script = """
            set -e
            git init -q Documents/project
            cd Documents/project
            echo 'hello' > README
            git add README
            git -c user.name=App -c user.email=app@example.com commit -q -m 'first commit'
            git log --format=%s
            git status --porcelain
            """
        let result = try containerfsRun(container, ["sh", "-c", script])
        #expect(result.status == 0, "\(result)")
        #expect(result.stdout == "first commit\n")
        // The repository is real in the store: git outside reads it.
        let log = try runProgram(["git", "-c", "safe.directory=*", "-C", container.stored("Documents/project"), "log", "--format=%s"])
        #expect(log.stdout == "first commit\n", "\(log)")
        try expectCleanedUp(container)
    }

    @Test func tarPacksAndUnpacksIntoLibraryCaches() throws {
        let container = try MountedContainer()
        let script = """
            set -e
            tar -cf Library/Caches/bundle.tar Demo.app
            mkdir Library/Caches/unpacked
            tar -xf Library/Caches/bundle.tar -C Library/Caches/unpacked
            cat Library/Caches/unpacked/Demo.app/res/data.txt
            """
        let result = try containerfsRun(container, ["sh", "-c", script])
        #expect(result.status == 0, "\(result)")
        #expect(result.stdout == "resource\n")
        #expect(try treeDigest(container.stored("Library/Caches/unpacked/Demo.app")) == treeDigest(container.stored("Demo.app")))
        try expectCleanedUp(container)
    }

    @Test func theHostOutsideTheContainerIsInvisible() throws {
        let container = try MountedContainer()
        let other = try MountedContainer()
        let secretFolder = try makeTemporaryDirectory()
        defer { _ = try? runProgram(["rm", "-rf", secretFolder]) }
        let hostSecret = secretFolder + "/containerfs-secret"
        try Data("host secret\n".utf8).write(to: URL(fileURLWithPath: hostSecret))
        let rootSecret = "/root/containerfs-secret-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try Data("root secret\n".utf8).write(to: URL(fileURLWithPath: rootSecret))
        defer { unlink(rootSecret) }
        // Put behind the mount's back into the store's tmp: inside, /tmp is that folder.
        try Data("mine\n".utf8).write(to: URL(fileURLWithPath: container.stored("tmp/marker")))

        let probed = [hostSecret, secretFolder, rootSecret, "/root", other.store, other.stored("Demo.app/Info.plist"),
                      container.store, "/work", "/home/app/.containerfs", "/var/lib"]
        // Writes outside the container, one at a time: each must fail inside and leave
        // nothing on the host (RunConfinementTests tries harder, with remounts).
        let probe = "containerfs-probe-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let writes = ["/etc/" + probe, "/usr/" + probe, "/" + probe]
        defer { writes.forEach { unlink($0) } }
        let script = #"for p in "$@"; do [ -e "$p" ] && echo "visible: $p"; done; ls /; echo --; ls /home; echo --; ls /tmp; echo --; "#
            + writes.map { "touch \($0) 2>/dev/null; echo \"\($0) $?\"; " }.joined() + "exit 0"
        let result = try containerfsRun(container, ["sh", "-c", script, "sh"] + probed)
        #expect(result.status == 0, "\(result)")
        let sections = result.stdout.components(separatedBy: "--\n")
        #expect(sections.count == 4, "\(result)")
        guard sections.count == 4 else { return }
        let statuses = Dictionary(sections[3].split(separator: "\n").map { line in
            let words = line.split(separator: " ").map(String.init)
            return (words.first ?? "", words.last ?? "")
        }, uniquingKeysWith: { first, _ in first })
        for path in writes {
            #expect(statuses[path] != nil, "\(path) was not tried: \(result)")
            #expect(statuses[path] != "0", "touch \(path) succeeded inside")
            #expect(access(path, F_OK) != 0, "\(path) exists on the host")
        }
        #expect(!sections[0].contains("visible:"), "\(sections[0])")
        let root = Set(sections[0].split(separator: "\n").map(String.init))
        #expect(root.isSubset(of: ["bin", "dev", "etc", "home", "lib", "lib32", "lib64", "libx32", "proc", "sbin", "tmp", "usr", "var"]), "\(root)")
        #expect(sections[1] == "app\n")
        #expect(sections[2] == "marker\n")
        try expectCleanedUp(container)
    }

    @Test func noNetworkLeavesOnlyLoopback() throws {
        let container = try MountedContainer()
        let result = try containerfsRun(container, ["--no-network"], ["sh", "-c", "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '"])
        #expect(result.status == 0, "\(result)")
        #expect(result.stdout == "lo\n")
    }

    @Test func bindReadOnlyShowsAHostFolderThatCannotBeWritten() throws {
        let container = try MountedContainer()
        let shared = try makeTemporaryDirectory()
        defer { _ = try? runProgram(["rm", "-rf", shared]) }
        try Data("shared\n".utf8).write(to: URL(fileURLWithPath: shared + "/data.txt"))
        try Data("root's\n".utf8).write(to: URL(fileURLWithPath: shared + "/private.txt"))
        // Root's program is `_containerfs` on the host: it reads what other users may read.
        chmod(shared, 0o755)
        chmod(shared + "/private.txt", 0o600)
        let result = try containerfsRun(container, ["--bind-ro", shared], ["sh", "-c", #"cat "$1/data.txt"; touch "$1/new" 2>/dev/null || echo "read-only"; cat "$1/private.txt" 2>/dev/null || echo "not root's""#, "sh", shared])
        #expect(result.status == 0, "\(result)")
        #expect(result.stdout == "shared\nread-only\nnot root's\n")
        #expect(!FileManager.default.fileExists(atPath: shared + "/new"))
    }

    @Test func unconfinedRunStillSetsHomeAndWorkingDirectory() throws {
        let container = try MountedContainer()
        let result = try containerfsRun(container, ["--no-confine"], ["sh", "-c", #"echo "$HOME"; pwd; echo "$TMPDIR"; ls"#])
        #expect(result.status == 0, "\(result)")
        let lines = result.stdout.split(separator: "\n").map(String.init)
        guard lines.count >= 3 else { Issue.record("\(result)"); return }
        let home = lines[0]
        #expect(home.hasPrefix("/tmp/containerfs-run-"), "\(home)")
        #expect(lines[1] == home)
        #expect(lines[2] == home + "/tmp")
        #expect(Array(lines.dropFirst(3)) == ["Demo.app", "Documents", "Library", "tmp"])
        #expect(!FileManager.default.fileExists(atPath: home), "the private mount point is removed")
        #expect(!FileManager.default.fileExists(atPath: (home as NSString).deletingLastPathComponent))
        try expectCleanedUp(container)
    }

    /// An ordinary user (no root, so bubblewrap uses a user namespace and the mount goes
    /// through fusermount3): the same view, and tmp/ purged even of folders made unwritable.
    @Test func anOrdinaryUserRunsAProgramConfined() throws {
        let container = try MountedContainer(user: "cfs-alice")
        let script = """
            id -un; echo "$HOME"; ls /home; touch Documents/mine
            mkdir -p tmp/locked/inner && touch tmp/locked/inner/file && chmod 500 tmp/locked/inner tmp/locked
            [ -e /root ] && echo "root visible"; exit 0
            """
        let result = try runProgram([containerfsBinary, "run", container.store, "--", "sh", "-c", script], user: "cfs-alice")
        #expect(result.status == 0, "\(result)")
        #expect(result.stdout == "cfs-alice\n/home/app\napp\n")
        var info = stat()
        #expect(stat(container.stored("Documents/mine"), &info) == 0)
        #expect(info.st_uid == getpwnam("cfs-alice").pointee.pw_uid, "files belong to the user")
        try expectCleanedUp(container)
    }

    // MARK: The rules and the denial summary

    @Test func bundleWriteIsDeniedWithEPERMAndCountedInTheSummary() throws {
        let container = try MountedContainer()
        let before = try treeDigest(container.stored("Demo.app"))
        let script = """
            import errno, sys
            try:
                open("Demo.app/Info.plist", "a").write("tampered")
            except OSError as error:
                print(errno.errorcode[error.errno])
                sys.exit(3)
            """
        let result = try containerfsRun(container, ["python3", "-c", script])
        #expect(result.status == 3, "\(result)")
        #expect(result.stdout == "EPERM\n")
        #expect(result.stderr == denialSummary(1, container) + "\n")
        #expect(try treeDigest(container.stored("Demo.app")) == before)

        let shell = try containerfsRun(container, ["sh", "-c", "echo x >> Demo.app/Info.plist; rm Demo.app/res/data.txt"])
        #expect(shell.status != 0, "\(shell)")
        #expect(shell.stderr.contains("Operation not permitted"))
        #expect(shell.stderr.hasSuffix("\n" + denialSummary(2, container) + "\n"), "\(shell.stderr)")
        #expect(try treeDigest(container.stored("Demo.app")) == before)
        try expectCleanedUp(container)
    }

    @Test func aTamperedBundleDoesNotRun() throws {
        let container = try MountedContainer()
        // Changed in the store, behind any mount's back, as malware on disk would.
        try Data("<plist>evil</plist>\n".utf8).write(to: URL(fileURLWithPath: container.stored("Demo.app/Info.plist")))
        for options in [[String](), ["--no-confine"]] {
            let result = try containerfsRun(container, options, ["touch", "Documents/ran"])
            #expect(result.status == 1, "\(result)")
            #expect(result.stderr.hasPrefix("containerfs: bundle of \(container.store) was changed: "), "\(result.stderr)")
            #expect(result.stderr.contains("Demo.app/Info.plist"))
            #expect(result.stderr.split(separator: "\n").count == 1)
        }
        #expect(!FileManager.default.fileExists(atPath: container.stored("Documents/ran")), "the program must not start")
        #expect(containerMounts(of: container.store) == [])
    }

    // MARK: Exit status and signals

    @Test(arguments: [[String](), ["--no-confine"]])
    func exitStatusPropagates(options: [String]) throws {
        let container = try MountedContainer()
        #expect(try containerfsRun(container, options, ["sh", "-c", "exit 7"]).status == 7)
        #expect(try containerfsRun(container, options, ["true"]).status == 0)
        let killed = try containerfsRun(container, options, ["sh", "-c", "kill -TERM $$"])
        #expect(killed.status == 143, "\(killed)")
        try expectCleanedUp(container)
    }

    @Test func programKilledWithSIGKILLStillLeavesTmpPurgedAndNothingMounted() throws {
        let container = try MountedContainer()
        let script = "echo scratch > tmp/scratch; mkdir -p tmp/deep/er; echo x > tmp/deep/er/file; chmod 500 tmp/deep; kill -KILL $$"
        let result = try containerfsRun(container, ["sh", "-c", script])
        #expect(result.status == 137, "\(result)")
        try expectCleanedUp(container)
    }

    @Test(arguments: [[String](), ["--no-confine"]])
    func sigtermToRunReachesTheProgramAndRunCleansUp(options: [String]) throws {
        let container = try MountedContainer()
        let script = """
            import os, signal, time
            def stop(number, frame):
                open("Documents/got-sigterm", "w").write("yes")
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGTERM)
            signal.signal(signal.SIGTERM, stop)
            open("tmp/scratch", "w").write("scratch")
            open("Documents/ready", "w").write("ready")
            while True:
                time.sleep(0.05)
            """
        let run = try BackgroundProgram([containerfsBinary, "run", container.store] + options + ["--", "python3", "-c", script])
        #expect(waitForFile(container.stored("Documents/ready")), "the program never started")
        kill(run.pid, SIGTERM)
        let result = run.wait()
        #expect(result.status == 143, "\(result)")
        #expect(FileManager.default.fileExists(atPath: container.stored("Documents/got-sigterm")), "the program must get the signal")
        try expectCleanedUp(container)
    }

    /// On a terminal (a pty from script(1)), Ctrl-C reaches the program once, and only the
    /// program: bubblewrap, in the same foreground group, must survive it.
    @Test func ctrlCOnATerminalReachesTheProgramOnce() throws {
        let container = try MountedContainer()
        try Data("""
            import os, signal, time
            count = 0
            def interrupted(number, frame):
                global count
                count += 1
            signal.signal(signal.SIGINT, interrupted)
            open("Documents/ready", "w").close()
            deadline = time.time() + 20
            while count == 0 and time.time() < deadline:
                time.sleep(0.05)
            time.sleep(0.3)
            print("interrupts", count, os.isatty(0), os.tcgetpgrp(0) == os.getpgrp())
            """.utf8).write(to: URL(fileURLWithPath: container.stored("Documents/interrupt.py")))
        for (program, expectedStatus) in [("python3 Documents/interrupt.py", Int32(0)), ("sh -c 'touch Documents/ready; exec sleep 30'", 130)] {
            unlink(container.stored("Documents/ready"))
            let keyboard = Pipe()
            // script(1) starts its command with `$SHELL -c`. `exec`, because dash (CI's /bin/sh
            // when SHELL is unset) would otherwise wait in the foreground group and, on Ctrl-C,
            // end itself with SIGINT after `run` returns, whatever the program did with it.
            let terminal = try BackgroundProgram(["/usr/bin/script", "-qfec", "exec \(containerfsBinary) run \(container.store) -- \(program)", "/dev/null"], stdinPipe: keyboard)
            #expect(waitForFile(container.stored("Documents/ready")), "the program never started")
            keyboard.fileHandleForWriting.write(Data([0x03]))
            let result = terminal.wait(seconds: 30)
            try? keyboard.fileHandleForWriting.close()
            #expect(result.status == expectedStatus, "\(program): \(result)")
            if expectedStatus == 0 { #expect(result.stdout.contains("interrupts 1 True True"), "\(result)") }
            try expectCleanedUp(container)
        }
    }

    /// A run killed with its daemon (a killed run's daemon unmounts by itself: RunKilledTests).
    @Test func runKilledWithSIGKILLIsClearedByTheNextRun() throws {
        let container = try MountedContainer()
        let run = try BackgroundProgram([containerfsBinary, "run", container.store, "--", "sh", "-c", "echo x > tmp/left; touch Documents/ready; sleep 60"])
        #expect(waitForFile(container.stored("Documents/ready")))
        kill(try daemonPID(container.store), SIGKILL)
        kill(run.pid, SIGKILL)
        _ = run.wait()
        // bubblewrap dies with its parent; the dead daemon's mount stays.
        #expect(containerMounts(of: container.store).count == 1)
        let next = try containerfsRun(container, ["cat", "Documents/ready"])
        #expect(next.status == 0, "\(next)")
        #expect(next.stderr.hasPrefix("containerfs: clearing the mount a killed run left at /tmp/containerfs-run-"), "\(next.stderr)")
        try expectCleanedUp(container)
    }

    /// The run lock's record of a killed run's mount point is the store owner's to write:
    /// `run` clears only a run folder it made (`/tmp/containerfs-run-XXXXXX/container`,
    /// root's or this user's), mounted from this store. A planted `/container` made root's
    /// run of another user's store detach the host's `/dev` (the `dev` beside the mount
    /// point) and remove the folder; here a tmpfs at `VICTIM/dev` stands for it.
    @Test func aPlantedAbandonedMountPointIsLeftAlone() throws {
        let container = try MountedContainer()
        let victim = container.base + "/victim"
        try FileManager.default.createDirectory(atPath: victim + "/dev", withIntermediateDirectories: true)
        let mounted = try runProgram(["mount", "-t", "tmpfs", "-o", "size=64k", "victim", victim + "/dev"])
        try #require(mounted.status == 0, "\(mounted)")
        defer { _ = try? runProgram(["umount", "-l", victim + "/dev"]) }
        FileManager.default.createFile(atPath: victim + "/dev/marker", contents: nil)
        try Data("1\n\(victim)/container\n".utf8).write(to: URL(fileURLWithPath: container.stored(".containerfs/run.lock")))
        let result = try containerfsRun(container, ["true"])
        #expect(result.status == 0, "\(result)")
        #expect(mountTable().contains { $0.mountpoint == victim + "/dev" }, "the planted mount point's dev was detached")
        #expect(FileManager.default.fileExists(atPath: victim + "/dev/marker"))
        #expect(!result.stderr.contains("clearing"), "\(result.stderr)")
        try expectCleanedUp(container)
    }

    /// `containerfs unmount` of the mount a killed run left clears the rest of its run
    /// folder too: the read-only tmpfs of root's program's /dev nodes, and the folder.
    @Test func unmountingAKilledRunsMountClearsItsRunFolder() throws {
        let container = try MountedContainer()
        let run = try BackgroundProgram([containerfsBinary, "run", container.store, "--", "sh", "-c", "touch Documents/ready; sleep 60"])
        #expect(waitForFile(container.stored("Documents/ready")))
        kill(try daemonPID(container.store), SIGKILL)
        kill(run.pid, SIGKILL)
        _ = run.wait()
        let mountpoint = try #require(containerMounts(of: container.store).first)
        let folder = (mountpoint as NSString).deletingLastPathComponent
        #expect(mountTable().contains { $0.mountpoint == folder + "/dev" }, "root's run has its /dev tmpfs")
        let unmounted = try containerfs(["unmount", mountpoint])
        #expect(unmounted.status == 0, "\(unmounted)")
        #expect(!mountTable().contains { $0.mountpoint.hasPrefix(folder + "/") }, "left mounted in \(folder)")
        #expect(!FileManager.default.fileExists(atPath: folder), "\(folder) is left")
        try expectCleanedUp(container)
    }

    @Test func aSecondRunOfTheSameStoreIsRefused() throws {
        let container = try MountedContainer()
        let input = Pipe()
        let first = try BackgroundProgram([containerfsBinary, "run", container.store, "--", "sh", "-c", "touch Documents/ready; read line || true"], stdinPipe: input)
        #expect(waitForFile(container.stored("Documents/ready")))
        let second = try containerfsRun(container, ["touch", "Documents/second"])
        #expect(second.status == 1, "\(second)")
        #expect(second.stderr.hasPrefix("containerfs: a program is already running in \(container.store) (containerfs run, pid \(first.pid))"), "\(second.stderr)")
        #expect(second.stderr.split(separator: "\n").count == 1)
        #expect(!FileManager.default.fileExists(atPath: container.stored("Documents/second")))
        try input.fileHandleForWriting.close()
        let result = first.wait()
        #expect(result.status == 0, "\(result)")
        try expectCleanedUp(container)
    }

    @Test func aMountedStoreIsRefused() throws {
        try withMountedContainer { container in
            let result = try containerfsRun(container, ["true"])
            #expect(result.status == 1)
            #expect(result.stderr.hasPrefix("containerfs: store \(container.store) is mounted at \(container.mountpoint)"), "\(result.stderr)")
            #expect(result.stderr.split(separator: "\n").count == 1)
        }
    }

    // MARK: Errors

    @Test func missingBubblewrapIsOneLine() throws {
        let container = try MountedContainer()
        let result = try runProgram([containerfsBinary, "run", container.store, "--", "true"], environment: ["PATH": "/nonexistent"])
        #expect(result.status == 1)
        #expect(result.stderr == "containerfs: bubblewrap is not installed, so the program cannot be confined: apt-get install bubblewrap (or run it unconfined with --no-confine)\n")
        #expect(containerMounts(of: container.store) == [])
    }

    @Test func misuseAndMissingStore() throws {
        let container = try MountedContainer()
        let noProgram = try containerfs(["run", container.store])
        #expect(noProgram.status == 64, "\(noProgram)")
        let conflicting = try containerfs(["run", container.store, "--no-confine", "--no-network", "--", "true"])
        #expect(conflicting.status == 64, "\(conflicting)")
        let hidingBind = try containerfs(["run", container.store, "--bind-ro", "/", "--", "true"])
        #expect(hidingBind.status == 64, "\(hidingBind)")
        #expect(hidingBind.stderr == "containerfs: --bind-ro / would hide the container (/home/app, /tmp): name a path outside them\n")
        let missing = try containerfs(["run", container.base + "/nothing", "--", "true"])
        #expect(missing.status == 1)
        #expect(missing.stderr == "containerfs: no store at \(container.base)/nothing: make one with 'containerfs create \(container.base)/nothing --bundle NAME.app'\n")
        let missingProgram = try containerfsRun(container, ["--no-confine"], ["/nonexistent/program"])
        #expect(missingProgram.status == 1)
        #expect(missingProgram.stderr == "containerfs: cannot run /nonexistent/program: No such file or directory; no such program: name one on PATH, or give its full path\n")
        try expectCleanedUp(container)
    }
}
