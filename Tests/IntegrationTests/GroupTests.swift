import ContainerStore
import Foundation
import Glibc
import Testing

/// A device folder: three app containers of one bundle, two of them (`App`, `Widget`, an app
/// and its extension) members of `group.com.example.shared`, one (`Other`) of no group.
final class GroupDevice {
    static let group = "group.com.example.shared"
    static let variable = "APP_GROUP_COM_EXAMPLE_SHARED"
    static let inside = "/groups/group.com.example.shared"
    let base: String
    let device: String
    var app: String { device + "/App" }
    var widget: String { device + "/Widget" }
    var other: String { device + "/Other" }
    var groupStore: String { device + "/" + Self.group }

    init() throws {
        base = try makeTemporaryDirectory()
        device = base + "/device"
        let bundle = base + "/Demo.app"
        try FileManager.default.createDirectory(atPath: bundle, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: device, withIntermediateDirectories: true)
        try Data("<plist>demo</plist>\n".utf8).write(to: URL(fileURLWithPath: bundle + "/Info.plist"))
        for (store, groups) in [(app, [Self.group]), (widget, [Self.group]), (other, [])] {
            let created = try containerfs(["create", store, "--bundle", bundle] + groups.flatMap { ["--group", $0] })
            guard created.status == 0 else { throw TestFailure("create failed: \(created)") }
        }
    }

    /// `containerfs run STORE -- PROGRAM…` in the background.
    func start(_ store: String, _ program: [String], options: [String] = []) throws -> BackgroundProgram {
        try BackgroundProgram([containerfsBinary, "run", store] + options + ["--"] + program)
    }

    deinit {
        // A run that failed may leave the group mounted: never another test's mount.
        for mountpoint in containerMounts(of: groupStore) { _ = try? runProgram(["fusermount3", "-uz", mountpoint]) }
        _ = try? runProgram(["rm", "-rf", base])
    }
}

/// App Groups: group containers, membership, an app and its extension at once (docs/groups.md).
@Suite("Groups", .serialized)
struct GroupTests {
    @Test func createMakesTheGroupLaidOutAsIOSDoes() throws {
        let device = try GroupDevice()
        var listing = try FileManager.default.contentsOfDirectory(atPath: device.groupStore).sorted()
        #expect(listing == [".containerfs", "Library"])
        listing = try FileManager.default.contentsOfDirectory(atPath: device.groupStore + "/Library").sorted()
        #expect(listing == ["Caches", "Preferences"])
        #expect(try String(contentsOfFile: device.app + "/.containerfs/groups", encoding: .utf8) == GroupDevice.group + "\n")
        #expect(!FileManager.default.fileExists(atPath: device.other + "/.containerfs/groups"))
        let again = try containerfs(["create-group", device.groupStore])
        #expect(again.status == 64, "\(again)")
        let bad = try containerfs(["create-group", device.device + "/com.example.shared"])
        #expect(bad.status == 64 && bad.stderr.contains("group."), "\(bad)")
        let run = try containerfs(["run", device.groupStore, "--", "true"])
        #expect(run.status == 64 && run.stderr.contains("group container"), "\(run)")
    }

    @Test func aMemberFindsItsGroupAtTheDocumentedPathAndVariable() throws {
        let device = try GroupDevice()
        let script = #"printf '%s\n' "$APP_GROUP_COM_EXAMPLE_SHARED" "$APP_GROUPS"; ls -A /groups; ls -A "$APP_GROUP_COM_EXAMPLE_SHARED"; echo from-app > "$APP_GROUP_COM_EXAMPLE_SHARED/shared.txt"; mkdir "$APP_GROUP_COM_EXAMPLE_SHARED/Documents"; rmdir "$APP_GROUP_COM_EXAMPLE_SHARED/Library/Caches" 2>/dev/null || echo structure-fixed"#
        let result = try runProgram([containerfsBinary, "run", device.app, "--", "sh", "-c", script])
        #expect(result.status == 0, "\(result)")
        #expect(result.stdout == "\(GroupDevice.inside)\n\(GroupDevice.group)\n\(GroupDevice.group)\nLibrary\nstructure-fixed\n", "\(result)")
        #expect(try String(contentsOfFile: device.groupStore + "/shared.txt", encoding: .utf8) == "from-app\n")
        #expect(containerMounts(of: device.groupStore) == [], "the last run unmounts the group")
        #expect(containerMounts(of: device.app) == [])
    }

    /// Under `--layout ios` a member finds its group at iOS's path, under the group's UUID:
    /// the same for the app and its extension and from run to run, recorded in the group.
    @Test func theIOSLayoutShowsTheGroupUnderItsUUID() throws {
        let device = try GroupDevice()
        let script = #"printf '%s\n' "$APP_GROUP_COM_EXAMPLE_SHARED"; ls /groups 2>/dev/null || echo no-groups-folder; echo "$1" >> "$APP_GROUP_COM_EXAMPLE_SHARED/seen.txt""#
        let app = try runProgram([containerfsBinary, "run", device.app, "--layout", "ios", "--", "sh", "-c", script, "sh", "app"])
        #expect(app.status == 0, "\(app)")
        let lines = app.stdout.split(separator: "\n").map(String.init)
        let prefix = "/private/var/mobile/Containers/Shared/AppGroup/"
        let path = try #require(lines.first)
        #expect(path.hasPrefix(prefix) && UUID(uuidString: String(path.dropFirst(prefix.count))) != nil, "\(app)")
        #expect(lines.dropFirst() == ["no-groups-folder"], "\(app)")
        #expect(app.stderr.contains(GroupDevice.group + " at " + path), "\(app)")
        let recorded = try String(contentsOfFile: device.groupStore + "/.containerfs/ios-uuid", encoding: .utf8)
        #expect(prefix + recorded == path + "\n")
        let widget = try runProgram([containerfsBinary, "run", device.widget, "--layout", "ios", "--", "sh", "-c", script + #"; cat "$APP_GROUP_COM_EXAMPLE_SHARED/seen.txt""#, "sh", "widget"])
        #expect(widget.status == 0 && widget.stdout == path + "\nno-groups-folder\napp\nwidget\n", "\(widget)")
        let again = try runProgram([containerfsBinary, "run", device.app, "--layout", "ios", "--relocate", "--launches", "2", "--", "sh", "-c", #"echo "$APP_GROUP_COM_EXAMPLE_SHARED""#])
        #expect(again.status == 0 && again.stdout == path + "\n" + path + "\n", "the group keeps its UUID when the app's change: \(again)")
        let other = try runProgram([containerfsBinary, "run", device.other, "--layout", "ios", "--", "sh", "-c", "ls /private/var/mobile/Containers/Shared 2>&1; env | grep -c APP_GROUP"])
        #expect(other.stdout.contains("No such file") && other.stdout.hasSuffix("0\n"), "\(other)")
        // A kill at suspension names the locked file by the path the program used.
        let killed = try runProgram([containerfsBinary, "run", device.app, "--layout", "ios", "--suspend-after", "0.5s", "--", "sh", "-c", #"exec flock "$APP_GROUP_COM_EXAMPLE_SHARED/g.lock" sleep 10"#])
        #expect(killed.status == 204 && killed.stderr.contains(path + "/g.lock") && killed.stderr.contains("0xdead10cc"), "\(killed)")
    }

    @Test func aNonMemberSeesNothingOfTheGroup() throws {
        let device = try GroupDevice()
        try Data("secret\n".utf8).write(to: URL(fileURLWithPath: device.groupStore + "/secret.txt"))
        // A member runs meanwhile, so the group is mounted on the host.
        let member = try device.start(device.app, ["sh", "-c", #"touch "$APP_GROUP_COM_EXAMPLE_SHARED/member.up"; exec sleep 60"#])
        #expect(waitForFile(device.groupStore + "/member.up"))
        let script = #"env | grep -c APP_GROUP; ls /groups 2>&1 >/dev/null && echo listed; cat /groups/group.com.example.shared/secret.txt 2>/dev/null && echo read; ls /tmp/containerfs-group-* 2>/dev/null && echo host; cat ../*/secret.txt 2>/dev/null && echo escaped; echo end"#
        let result = try runProgram([containerfsBinary, "run", device.other, "--", "sh", "-c", script])
        kill(member.pid, SIGTERM)  // run passes it on, then cleans up
        #expect(result.stdout.hasPrefix("0\n") && result.stdout.hasSuffix("end\n") && !result.stdout.contains("secret"), "\(result)")
        #expect(!result.stdout.contains("listed") && !result.stdout.contains("read") && !result.stdout.contains("host") && !result.stdout.contains("escaped"), "\(result)")
        #expect(member.wait().status == 128 + SIGTERM)
        #expect(containerMounts(of: device.groupStore) == [])
    }

    /// The app and its widget at once: one mount of the group, writes seen at once, flock,
    /// POSIX and OFD locks between them as on one disk, and a WAL database both write.
    @Test func anAppAndItsExtensionShareTheGroupAtOnce() throws {
        let device = try GroupDevice()
        let script = #"""
            import fcntl, os, sqlite3, sys, time
            me, peer = sys.argv[1], sys.argv[2]
            group = os.environ["APP_GROUP_COM_EXAMPLE_SHARED"]
            def mark(name): open(os.path.join(group, name), "w").close()
            def wait(name):
                deadline = time.time() + 30
                while not os.path.exists(os.path.join(group, name)):
                    if time.time() > deadline: sys.exit("no " + name)
                    time.sleep(0.02)
            mark(me + ".up"); wait(peer + ".up")          # each sees the other's file at once
            # Locks: the app holds each kind; the widget must find each taken.
            path = os.path.join(group, "lockfile")
            if me == "app":
                fd = os.open(path, os.O_RDWR | os.O_CREAT)
                fcntl.flock(fd, fcntl.LOCK_EX)
                fd2 = os.open(path + ".posix", os.O_RDWR | os.O_CREAT); fcntl.lockf(fd2, fcntl.LOCK_EX)
                fd3 = os.open(path + ".ofd", os.O_RDWR | os.O_CREAT)
                fcntl.fcntl(fd3, fcntl.F_OFD_SETLK, __import__("struct").pack("hhqqi", fcntl.F_WRLCK, 0, 0, 0, 0))
                mark("app.locked"); wait("widget.tried")
                os.close(fd); os.close(fd2); os.close(fd3)
            else:
                wait("app.locked")
                taken = 0
                fd = os.open(path, os.O_RDWR)
                try: fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError: taken += 1
                fd2 = os.open(path + ".posix", os.O_RDWR)
                try: fcntl.lockf(fd2, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError: taken += 1
                fd3 = os.open(path + ".ofd", os.O_RDWR)
                try: fcntl.fcntl(fd3, fcntl.F_OFD_SETLK, __import__("struct").pack("hhqqi", fcntl.F_WRLCK, 0, 0, 0, 0))
                except OSError: taken += 1
                print("taken", taken)
                mark("widget.tried")
                fcntl.flock(fd, fcntl.LOCK_EX)             # blocks until the app lets go
                print("flock after release")
            # Both write one WAL database at once.
            db = sqlite3.connect(os.path.join(group, "shared.sqlite"), timeout=30, isolation_level=None)
            # Switching to WAL needs the database to itself: the other program may hold it a
            # moment, and SQLite then answers "locked" at once, without waiting (both try).
            for attempt in range(200):
                try:
                    db.execute("PRAGMA journal_mode=WAL")
                    db.execute("CREATE TABLE IF NOT EXISTS t(who TEXT, n INTEGER, pad TEXT)")
                    break
                except sqlite3.OperationalError:
                    if attempt == 199: raise
                    time.sleep(0.05)
            for n in range(300):
                db.execute("BEGIN IMMEDIATE")
                db.execute("INSERT INTO t VALUES(?, ?, ?)", (me, n, "x" * 200))
                db.execute("COMMIT")
                if n % 50 == 0: db.execute("SELECT count(*) FROM t").fetchone()
            db.close()
            print("done")
            """#
        let app = try device.start(device.app, ["python3", "-c", script, "app", "widget"])
        let widget = try device.start(device.widget, ["python3", "-c", script, "widget", "app"])
        #expect(waitForFile(device.groupStore + "/app.up") && waitForFile(device.groupStore + "/widget.up"))
        #expect(containerMounts(of: device.groupStore).count == 1, "one mount of the group for both runs")
        let appResult = app.wait(seconds: 120), widgetResult = widget.wait(seconds: 120)
        #expect(appResult.status == 0 && appResult.stdout == "done\n", "\(appResult)")
        #expect(widgetResult.status == 0 && widgetResult.stdout == "taken 3\nflock after release\ndone\n", "\(widgetResult)")
        let check = try runProgram([containerfsBinary, "run", device.widget, "--", "sqlite3", GroupDevice.inside + "/shared.sqlite",
                                    "PRAGMA integrity_check; SELECT who, count(*) FROM t GROUP BY who ORDER BY who;"])
        #expect(check.stdout == "ok\napp|300\nwidget|300\n", "\(check)")
        #expect(containerMounts(of: device.groupStore) == [], "the last run unmounts the group")
    }

    @Test func aMissingOrForeignGroupIsOneLine() throws {
        let device = try GroupDevice()
        _ = try runProgram(["rm", "-rf", device.groupStore])
        let result = try runProgram([containerfsBinary, "run", device.app, "--", "true"])
        #expect(result.status == 1 && result.stderr.contains("create-group") && result.stderr.split(separator: "\n").count == 1, "\(result)")
        let update = try containerfs(["update", device.app, "--bundle", device.base + "/Demo.app", "--group", GroupDevice.group, "--group", "group.b"])
        #expect(update.status == 0, "\(update)")
        #expect(FileManager.default.fileExists(atPath: device.groupStore + "/Library/Caches"))
        #expect(FileManager.default.fileExists(atPath: device.device + "/group.b/Library/Preferences"))
        let both = try runProgram([containerfsBinary, "run", device.app, "--", "sh", "-c", "echo $APP_GROUPS; ls /groups"])
        #expect(both.stdout == "\(GroupDevice.group):group.b\ngroup.b\n\(GroupDevice.group)\n", "\(both)")
        // A symlink in the device folder in place of the group leads nowhere.
        let elsewhere = device.base + "/elsewhere"
        try FileManager.default.createDirectory(atPath: elsewhere, withIntermediateDirectories: true)
        #expect(try containerfs(["create-group", elsewhere + "/" + GroupDevice.group]).status == 0)
        _ = try runProgram(["rm", "-rf", device.groupStore])
        try FileManager.default.createSymbolicLink(atPath: device.groupStore, withDestinationPath: elsewhere + "/" + GroupDevice.group)
        let planted = try runProgram([containerfsBinary, "run", device.app, "--", "true"])
        #expect(planted.status == 1 && planted.stderr.contains("not a folder") && planted.stderr.split(separator: "\n").count == 1, "\(planted)")
        #expect(containerMounts(of: elsewhere + "/" + GroupDevice.group) == [])
        let clash = try containerfs(["create", device.device + "/X", "--bundle", device.base + "/Demo.app", "--group", "group.a-b", "--group", "group.a.b"])
        #expect(clash.status == 64, "\(clash)")
    }

    /// The group's mount record (`.containerfs/mount.lock`) is the group owner's to write,
    /// and a run joins the mount it names. A planted record naming a symlink, in a folder
    /// shaped as a group folder, to another app's running container made root's run of the
    /// owner's app bind that container into the sandbox at `/groups/ID`, to read and write.
    /// Only a group folder of ours with this group mounted there is joined now.
    @Test func aPlantedGroupMountRecordIsNotBoundIntoTheSandbox() throws {
        let device = try GroupDevice()
        var template = Array("/tmp/containerfs-group-XXXXXX".utf8CString)
        let folder = String(cString: try #require(mkdtemp(&template)))
        defer { _ = try? runProgram(["rm", "-rf", folder]) }
        chmod(folder, 0o755)
        // What root's program (_containerfs outside) can read, as another app's mount is to it.
        let victim = folder + "/victim"
        try FileManager.default.createDirectory(atPath: victim, withIntermediateDirectories: true)
        try Data("victim secret\n".utf8).write(to: URL(fileURLWithPath: victim + "/secret.txt"))
        chmod(victim, 0o755)
        chmod(victim + "/secret.txt", 0o644)
        try FileManager.default.createSymbolicLink(atPath: folder + "/group", withDestinationPath: victim)
        let lock = device.groupStore + "/.containerfs/mount.lock"
        try Data("1\n\(folder)/group\n".utf8).write(to: URL(fileURLWithPath: lock))
        // Held as the group's daemon holds it (flock locks of two opens conflict, even in one process).
        let held = open(lock, O_RDWR | O_CLOEXEC)
        try #require(held >= 0 && flock(held, LOCK_EX) == 0)
        defer { close(held) }
        let group = try Store.open(device.groupStore)
        #expect(eventually { MountLock.holder(group)?.mountpoint == folder + "/group" }, "the planted record is not held")
        let result = try runProgram([containerfsBinary, "run", device.app, "--", "sh", "-c", "cat \(GroupDevice.inside)/secret.txt; echo end"])
        #expect(!result.stdout.contains("victim secret"), "the planted path was bound: \(result)")
        #expect(result.status == 1 && result.stderr.contains("not its group mount") && result.stderr.split(separator: "\n").count == 1, "\(result)")
        #expect(containerMounts(of: device.app) == [])
    }

    // MARK: Suspension and 0xdead10cc

    /// sqlite3 inside a write transaction on a database in the group when the app is
    /// suspended: killed, one line naming the file and the code, status 204.
    @Test func sqliteHoldingAWriteTransactionInTheGroupIsKilledAtSuspension() throws {
        let device = try GroupDevice()
        let program = #"(printf 'CREATE TABLE t(x);\nBEGIN IMMEDIATE;\nINSERT INTO t VALUES(1);\n'; sleep 20; printf 'COMMIT;\n') | sqlite3 "$APP_GROUP_COM_EXAMPLE_SHARED/shared.sqlite"; echo not-killed"#
        let started = Date()
        let result = try runProgram([containerfsBinary, "run", device.app, "--suspend-after", "1s", "--", "sh", "-c", program])
        #expect(result.status == 204, "\(result)")
        let lines = result.stderr.split(separator: "\n")
        #expect(lines.count == 1 && lines[0].contains("0xdead10cc") && lines[0].contains(GroupDevice.inside + "/shared.sqlite"), "\(result)")
        #expect(!result.stdout.contains("not-killed"))
        #expect(Date().timeIntervalSince(started) < 15, "killed at suspension, not at the end")
        #expect(containerMounts(of: device.groupStore) == [] && containerMounts(of: device.app) == [])
    }

    /// The same program committing before the suspension survives it and ends normally;
    /// so does one holding a lock only in its own container.
    @Test func aProgramHoldingNoSharedLockSurvivesSuspension() throws {
        let device = try GroupDevice()
        let committed = #"printf 'CREATE TABLE t(x);\nBEGIN IMMEDIATE;\nINSERT INTO t VALUES(1);\nCOMMIT;\n' | sqlite3 "$APP_GROUP_COM_EXAMPLE_SHARED/shared.sqlite"; flock Documents/own.lock sleep 2; echo survived"#
        let result = try runProgram([containerfsBinary, "run", device.app, "--suspend-after", "0.5s", "--resume-after", "0.5s", "--", "sh", "-c", committed])
        #expect(result.status == 0 && result.stdout == "survived\n", "\(result)")
        #expect(result.stderr.contains("suspended the program") && !result.stderr.contains("0xdead10cc"), "\(result)")
        let rows = try runProgram(["sqlite3", device.groupStore + "/shared.sqlite", "SELECT count(*) FROM t"])
        #expect(rows.stdout == "1\n")
    }

    /// A flock lasts as long as its open file, which a descriptor in flight over a socket
    /// keeps with no descriptor left in any process: such a lock in the group escaped the
    /// check (it looked only at descriptors) and the program survived its suspension. It is
    /// found by /proc/locks now, which names the process that took it.
    @Test func aLockWhoseDescriptorIsInFlightIsFoundAtSuspension() throws {
        let device = try GroupDevice()
        let program = #"""
            import fcntl, os, socket, time
            fd = os.open(os.environ["APP_GROUP_COM_EXAMPLE_SHARED"] + "/hidden.lock", os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.flock(fd, fcntl.LOCK_EX)
            a, b = socket.socketpair()
            socket.send_fds(a, [b"x"], [fd])
            os.close(fd)
            time.sleep(8)
            print("not-killed")
            """#
        let result = try runProgram([containerfsBinary, "run", device.app, "--suspend-after", "0.5s", "--resume-after", "0.5s", "--", "python3", "-c", program])
        #expect(result.status == 204 && !result.stdout.contains("not-killed"), "\(result)")
        let lines = result.stderr.split(separator: "\n")
        #expect(lines.count == 1 && lines[0].contains("0xdead10cc") && lines[0].contains(GroupDevice.inside) && lines[0].contains("no descriptor open"), "\(result)")
    }

    /// `--launches --suspend-after random`: each launch suspended at a moment drawn from the
    /// seed, printed with it; the same seed, the same moments, whether the program holds a
    /// shared lock then (killed, 204) or not (resumed, exits 0).
    @Test func aSeededRandomSuspensionInLaunches() throws {
        let device = try GroupDevice()
        let options = ["--launches", "2", "--seed", "7", "--suspend-after", "random", "--within", "0.5", "--resume-after", "0.2"]
        func moments(_ stderr: String) -> [String] {
            stderr.split(separator: "\n").filter { $0.contains("suspended at") && $0.contains("drawn from seed 7") }.map(String.init)
        }
        let holding = #"exec flock "$APP_GROUP_COM_EXAMPLE_SHARED/g.lock" sleep 5"#
        let killed = try runProgram([containerfsBinary, "run", device.app] + options + ["--", "sh", "-c", holding])
        #expect(killed.status == 204 && killed.stderr.contains("0xdead10cc") && killed.stderr.contains("seed 7"), "\(killed)")
        let survived = try runProgram([containerfsBinary, "run", device.app] + options + ["--json", "--", "sleep", "1"])
        #expect(survived.status == 0 && survived.stderr.contains("suspended the program") && !survived.stderr.contains("0xdead10cc"), "\(survived)")
        #expect(moments(survived.stderr).count == 2, "\(survived)")
        #expect(moments(killed.stderr) == [moments(survived.stderr).first], "the same seed, the same moment: \(killed) \(survived)")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(survived.stdout.utf8)) as? [String: Any])
        let drawn = (report["launches"] as? [[String: Any]] ?? []).compactMap { $0["suspend_at"] as? Double }
        #expect(drawn.count == 2 && drawn.allSatisfy { $0 >= 0 && $0 <= 0.5 }, "\(survived.stdout)")
        #expect((report["replay"] as? String)?.contains("--suspend-after random --within 0.5") == true, "\(survived.stdout)")
        let alone = try containerfs(["run", device.app, "--suspend-after", "random", "--", "true"])
        #expect(alone.status == 64 && alone.stderr.contains("--launches"), "\(alone)")
    }

    /// `containerfs suspend` and `resume` from another shell, with the widget running meanwhile.
    @Test func suspendAndResumeCommands() throws {
        let device = try GroupDevice()
        let app = try device.start(device.app, ["sh", "-c", #"touch "$APP_GROUP_COM_EXAMPLE_SHARED/app.up"; sleep 2; echo resumed"#])
        #expect(waitForFile(device.groupStore + "/app.up"))
        let suspended = try containerfs(["suspend", device.app])
        #expect(suspended.status == 0 && suspended.stdout.contains("suspended"), "\(suspended)")
        let states = try runProgram(["sh", "-c", "for p in $(pgrep -u _containerfs -xf 'sleep 2'); do ps -o stat= -p $p; done"])
        #expect(states.stdout.contains("T"), "stopped: \(states)")
        #expect(try containerfs(["resume", device.app]).status == 0)
        let result = app.wait()
        #expect(result.status == 0 && result.stdout == "resumed\n", "\(result)")

        let widget = try device.start(device.widget, ["sh", "-c", #"exec flock "$APP_GROUP_COM_EXAMPLE_SHARED/g.lock" sh -c 'touch "$APP_GROUP_COM_EXAMPLE_SHARED/locked"; sleep 30'"#])
        #expect(waitForFile(device.groupStore + "/locked"))
        let killed = try containerfs(["suspend", device.widget])
        #expect(killed.stdout.contains("0xdead10cc") && killed.stdout.contains(GroupDevice.inside + "/g.lock"), "\(killed)")
        let ended = widget.wait()
        #expect(ended.status == 204 && ended.stderr.contains("0xdead10cc"), "\(ended)")
        let none = try containerfs(["suspend", device.widget])
        #expect(none.status == 1 && none.stderr.contains("no program runs"), "\(none)")
    }

    /// `suspend` acts on the sandbox a store's run records (`.containerfs/sandbox`), a file
    /// the store's owner can write. A record naming another app's running sandbox, with the
    /// run lock held by some process of the owner's, made root's `suspend` of the owner's
    /// store stop that other app (and kill it, given a "group" it holds a lock in). Only a
    /// sandbox started by the process holding the store's run lock is acted on now.
    @Test func suspendDoesNotActOnASandboxAnotherRunStarted() throws {
        let device = try GroupDevice()
        let victim = try device.start(device.other, ["sh", "-c", "touch Documents/up; sleep 30; echo victim"])
        defer { _ = victim.wait() }
        #expect(waitForFile(device.other + "/Documents/up"))
        let record = try String(contentsOfFile: device.other + "/.containerfs/sandbox", encoding: .utf8)
        let victimInit = try #require(record.split(separator: "\n").first.flatMap { pid_t($0) })
        // The owner's side: the app's run lock held (here by the test), the victim's init recorded.
        let lock = device.app + "/.containerfs/run.lock"
        let held = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        try #require(held >= 0 && flock(held, LOCK_EX) == 0)
        defer { close(held) }
        try Data("\(victimInit)\n".utf8).write(to: URL(fileURLWithPath: device.app + "/.containerfs/sandbox"))
        let suspended = try containerfs(["suspend", device.app])
        let states = try runProgram(["sh", "-c", "for p in $(pgrep -u _containerfs -xf 'sleep 30'); do ps -o stat= -p $p; done"])
        _ = try containerfs(["resume", device.other])   // whatever happened, the victim goes on
        #expect(suspended.status == 1 && suspended.stderr.contains("is not running confined"), "\(suspended)")
        #expect(!states.stdout.contains("T"), "the other app was stopped: \(states)")
        kill(victim.pid, SIGTERM)
    }

    // MARK: One device

    /// Locking the app's device locks its group: a complete file there becomes unreadable
    /// to the running app at once; unlocking the device folder brings it back.
    @Test func theDeviceLockActsOnTheGroup() throws {
        let device = try GroupDevice()
        try Data("secret\n".utf8).write(to: URL(fileURLWithPath: device.groupStore + "/secret.txt"))
        #expect(try containerfs(["protect", device.groupStore + "/secret.txt", "--class", "complete"]).status == 0)
        let program = #"G=$APP_GROUP_COM_EXAMPLE_SHARED; cat $G/secret.txt; touch $G/up; while cat $G/secret.txt >/dev/null 2>&1; do sleep 0.05; done; echo locked-out; touch $G/denied; while ! cat $G/secret.txt 2>/dev/null; do sleep 0.05; done"#
        let app = try device.start(device.app, ["sh", "-c", program])
        #expect(waitForFile(device.groupStore + "/up"))
        let locked = try containerfs(["lock", device.app])
        #expect(locked.status == 0 && locked.stdout.contains(device.groupStore + ": locked"), "\(locked)")
        #expect(waitForFile(device.groupStore + "/denied"))
        let unlocked = try containerfs(["unlock", device.device])
        #expect(unlocked.status == 0 && unlocked.stdout.contains(device.groupStore + ": unlocked") && unlocked.stdout.contains(device.app + ": unlocked"), "\(unlocked)")
        let result = app.wait()
        #expect(result.status == 0 && result.stdout == "secret\nlocked-out\nsecret\n", "\(result)")
        let audit = try containerfs(["audit", device.groupStore])
        #expect(audit.stdout.contains("protectedDataUnavailable"), "\(audit)")
    }

    /// Purge and usage take the device: the group's caches go with the apps'; a group with a
    /// capacity is a full disk to every member.
    @Test func purgeUsageAndCapacityReachTheGroup() throws {
        let device = try GroupDevice()
        try Data(count: 4096).write(to: URL(fileURLWithPath: device.groupStore + "/Library/Caches/thumb.png"))
        try Data(count: 4096).write(to: URL(fileURLWithPath: device.app + "/Library/Caches/app.bin"))
        try Data("keep\n".utf8).write(to: URL(fileURLWithPath: device.groupStore + "/Library/keep.plist"))
        let usage = try containerfs(["usage", device.device, "--json"])
        #expect(usage.status == 0 && usage.stdout.contains(device.groupStore), "\(usage)")
        let purged = try containerfs(["purge", device.app, "--caches", "--all"])
        #expect(purged.status == 0, "\(purged)")
        #expect(!FileManager.default.fileExists(atPath: device.groupStore + "/Library/Caches/thumb.png"), "\(purged)")
        #expect(!FileManager.default.fileExists(atPath: device.app + "/Library/Caches/app.bin"))
        #expect(FileManager.default.fileExists(atPath: device.groupStore + "/Library/keep.plist"))
        #expect(try containerfs(["capacity", device.groupStore, "1M"]).status == 0)
        let full = try runProgram([containerfsBinary, "run", device.widget, "--", "sh", "-c", #"dd if=/dev/zero of="$APP_GROUP_COM_EXAMPLE_SHARED/big" bs=64k count=64 2>&1; df -k "$APP_GROUP_COM_EXAMPLE_SHARED" | tail -1"#])
        #expect(full.stdout.contains("No space left on device"), "\(full)")
    }

    /// `usage` of a group container shows its own areas (SPEC §8, §15): the root its members
    /// write and `Library/`, backed up, and `Library/Caches/`, purgeable — not an app's
    /// bundle, Documents, Inbox and tmp, which it has not. Files at the root were counted
    /// nowhere.
    @Test func usageOfAGroupShowsItsRootLibraryAndCaches() throws {
        let device = try GroupDevice()
        try FileManager.default.createDirectory(atPath: device.groupStore + "/shared", withIntermediateDirectories: true)
        try Data(count: 5000).write(to: URL(fileURLWithPath: device.groupStore + "/shared/notes.sqlite"))
        try Data(count: 3).write(to: URL(fileURLWithPath: device.groupStore + "/top.txt"))
        try Data(count: 700).write(to: URL(fileURLWithPath: device.groupStore + "/Library/Preferences/p.plist"))
        try Data(count: 40).write(to: URL(fileURLWithPath: device.groupStore + "/Library/Caches/thumb.png"))
        let result = try containerfs(["usage", device.groupStore, "--json"])
        #expect(result.status == 0, "\(result)")
        let stores = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [[String: Any]])
        let areas = try #require(stores.first?["areas"] as? [[String: Any]])
        let summary = areas.map { "\($0["area"] ?? "?") \($0["path"] ?? "?") \($0["bytes"] ?? "?") \($0["backedUp"] as? Bool ?? false) \($0["purgeable"] as? Bool ?? false)" }
        #expect(summary == ["root . 5003 true false", "Library Library 700 true false", "Caches Library/Caches 40 false true"], "\(summary)")
        #expect(stores.first?["totalBytes"] as? Int == 5743)
        let backup = try containerfs(["backup", device.groupStore, "--list", "--json"])
        let listed = try #require(try JSONSerialization.jsonObject(with: Data(backup.stdout.utf8)) as? [String: Any])
        #expect(listed["totalBytes"] as? Int == 5703, "usage's backed-up areas and the backup set agree: \(backup)")
        let table = try containerfs(["usage", device.groupStore])
        #expect(!table.stdout.contains("bundle") && !table.stdout.contains("Inbox"), "\(table)")
    }

    /// One device's capacity, shared by the app, its widget and their group, through three
    /// daemons (two apps' mounts, the group's): the app fills the device, and the widget —
    /// which has no capacity of its own — is refused growth in its own Documents/ and in the
    /// group, `df` showing no room in either. Then both write and delete at once, at the
    /// edge of the capacity, and the device's count equals a walk of its containers.
    @Test func aFullDeviceRefusesGrowthInEveryContainer() throws {
        let device = try GroupDevice()
        let shown = try containerfs(["capacity", device.device])
        let used = try #require(shown.stdout.split(separator: " ").firstIndex(of: "used").flatMap { Int64(shown.stdout.split(separator: " ")[$0 + 1]) }, "\(shown)")
        let capacity = (used / 4096 + 512) * 4096   // 2 MiB more than the device holds
        #expect(try containerfs(["capacity", device.device, "\(capacity)"]).status == 0)
        let widget = try device.start(device.widget, ["sh", "-c", #"G=$APP_GROUP_COM_EXAMPLE_SHARED; touch $G/w.up; while [ -e $G/w.up ]; do sleep 0.05; done; echo x > Documents/w.txt 2>/dev/null && echo own-written || echo own-refused; dd if=/dev/zero of=$G/more bs=4k count=1 2>/dev/null && echo group-written || echo group-refused; df -B1 --output=avail . $G | tail -2 | tr -s ' \n' ' '"#])
        #expect(waitForFile(device.groupStore + "/w.up"))
        let mounted = try containerfs(["capacity", device.device, "none"])
        #expect(mounted.status == 1 && mounted.stderr.contains("mounted"), "\(mounted)")
        let fill = #"G=$APP_GROUP_COM_EXAMPLE_SHARED; dd if=/dev/zero of=$G/fill bs=64k count=16 2>/dev/null; dd if=/dev/zero of=Documents/fill bs=64k count=64 2>&1 | grep -c 'No space left'; df -B1 --output=avail . $G | tail -2 | tr -s ' \n' ' '; rm $G/w.up"#
        let app = try runProgram([containerfsBinary, "run", device.app, "--", "sh", "-c", fill])
        #expect(app.status == 0 && app.stdout == "1\n 0 0 ", "\(app)")
        let widgetEnded = widget.wait()
        #expect(widgetEnded.status == 0 && widgetEnded.stdout == "own-refused\ngroup-refused\n 0 0 ", "\(widgetEnded)")

        // Concurrent writers at the edge of the capacity: files made, grown, cut and removed.
        let writer = #"""
        import os, random, sys, time
        random.seed(sys.argv[1]); G = os.environ["APP_GROUP_COM_EXAMPLE_SHARED"]
        for folder in ("Documents", G):
            for name in ("fill",):
                try: os.remove(os.path.join(folder, name))
                except FileNotFoundError: pass
        # Both writers start together: each waits for the other's mark (20 s at most).
        me, other = sys.argv[1], ("widget" if sys.argv[1] == "app" else "app")
        open(os.path.join(G, "ready-" + me), "w").close()
        deadline = time.time() + 20
        while not os.path.exists(os.path.join(G, "ready-" + other)) and time.time() < deadline: time.sleep(0.01)
        full = 0
        for i in range(600):
            path = os.path.join(random.choice(["Documents", G]), "%s-%d" % (sys.argv[1], random.randrange(40)))
            try:
                if random.random() < 0.3 and os.path.exists(path): os.remove(path); continue
                with open(path, "ab") as f: f.write(os.urandom(random.randrange(1, 48 * 1024)))
                if random.random() < 0.2: os.truncate(path, random.randrange(8192))
            except OSError as error: full += error.errno == 28
        print(full)
        """#
        let other = try device.start(device.widget, ["python3", "-c", writer, "widget"])
        let first = try runProgram([containerfsBinary, "run", device.app, "--", "python3", "-c", writer, "app"])
        let second = other.wait()
        #expect(first.status == 0 && second.status == 0, "\(first) \(second)")
        #expect((Int(first.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0) + (Int(second.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0) > 0,
                "the writers met the full device (ENOSPC): \(first.stdout) \(second.stdout)")
        let bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: device.device + "/.containerfs-device/ledger")))
        let ledger = bytes.count == 8 ? bytes.enumerated().reduce(Int64(0)) { $0 | Int64($1.element) << (8 * Int64($1.offset)) } : -1
        let walked = try containerfs(["capacity", device.device])
        #expect(walked.stdout.contains("used \(ledger) bytes"), "the device's count \(ledger) is what a walk finds: \(walked)")
        // An independent walk: GNU du of each container, state folders excluded.
        let du = try runProgram(["du", "--summarize", "--block-size=1", "--exclude=.containerfs", device.app, device.widget, device.other, device.groupStore])
        let total = du.stdout.split(separator: "\n").compactMap { Int64($0.prefix { $0.isNumber }) }.reduce(0, +)
        #expect(du.status == 0 && total == ledger, "du \(total), the device's count \(ledger)")
        #expect(ledger <= capacity)
    }

    /// `purge DEVICE --until-free` measures the device's capacity: caches go across its
    /// containers (store by store) only until the device has that much free, and never while
    /// one of them runs.
    @Test func lowStoragePurgesAcrossTheDevice() throws {
        let device = try GroupDevice()
        try Data(count: 512 * 1024).write(to: URL(fileURLWithPath: device.app + "/Library/Caches/app.bin"))
        try Data(count: 512 * 1024).write(to: URL(fileURLWithPath: device.groupStore + "/Library/Caches/group.bin"))
        let shown = try containerfs(["capacity", device.device])
        let used = try #require(shown.stdout.split(separator: " ").firstIndex(of: "used").flatMap { Int64(shown.stdout.split(separator: " ")[$0 + 1]) }, "\(shown)")
        #expect(try containerfs(["capacity", device.device, "\(used + 256 * 1024)"]).status == 0)
        let widget = try device.start(device.widget, ["sh", "-c", #"touch "$APP_GROUP_COM_EXAMPLE_SHARED/w.up"; sleep 30"#])
        #expect(waitForFile(device.groupStore + "/w.up"))
        let running = try containerfs(["purge", device.device, "--caches", "--until-free", "700K"])
        #expect(running.status == 1 && running.stderr.contains("in use"), "\(running)")
        kill(widget.pid, SIGTERM)
        _ = widget.wait()
        let some = try containerfs(["purge", device.device, "--caches", "--until-free", "700K"])
        #expect(some.status == 0 && some.stdout.contains("app.bin") && !some.stdout.contains("group.bin"), "\(some)")
        #expect(FileManager.default.fileExists(atPath: device.groupStore + "/Library/Caches/group.bin"))
        let more = try containerfs(["purge", device.device, "--caches", "--until-free", "1100K"])
        #expect(more.status == 0 && more.stdout.contains("group.bin"), "\(more)")
        let percent = try containerfs(["purge", device.app, "--caches", "--until-free", "10%"])
        #expect(percent.status == 0, "a percentage of the device's capacity: \(percent)")
        // A purge of a container not running while another of the device runs gives what
        // it freed back to the device's count, which the running daemons keep.
        let cached = try runProgram([containerfsBinary, "run", device.app, "--", "dd", "if=/dev/zero", "of=Library/Caches/late.bin", "bs=64k", "count=2"])
        #expect(cached.status == 0, "\(cached)")
        let again = try device.start(device.widget, ["sh", "-c", #"touch "$APP_GROUP_COM_EXAMPLE_SHARED/again.up"; sleep 30"#])
        #expect(waitForFile(device.groupStore + "/again.up"))
        let behind = try containerfs(["purge", device.app, "--caches", "--all"])
        #expect(behind.status == 0 && behind.stdout.contains("late.bin"), "\(behind)")
        // So do a container made and a file delivered meanwhile.
        let made = try containerfs(["create", device.device + "/Late", "--bundle", device.base + "/Demo.app", "--group", GroupDevice.group])
        #expect(made.status == 0, "\(made)")
        try Data(count: 64 * 1024).write(to: URL(fileURLWithPath: device.base + "/doc.bin"))
        let delivered = try containerfs(["deliver", device.app, device.base + "/doc.bin"])
        #expect(delivered.status == 0, "\(delivered)")
        kill(again.pid, SIGTERM)
        _ = again.wait()
        let bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: device.device + "/.containerfs-device/ledger")))
        let ledger = bytes.count == 8 ? bytes.enumerated().reduce(Int64(0)) { $0 | Int64($1.element) << (8 * Int64($1.offset)) } : -1
        let du = try runProgram(["du", "--summarize", "--block-size=1", "--exclude=.containerfs", device.app, device.widget, device.other, device.groupStore, device.device + "/Late"])
        let total = du.stdout.split(separator: "\n").compactMap { Int64($0.prefix { $0.isNumber }) }.reduce(0, +)
        #expect(total == ledger, "du \(total), the device's count \(ledger)")
    }

    /// A group's backup holds its root and Library but not its caches; restored without a
    /// bundle beside its apps, members find it whole; an app's archive is not a group's.
    /// What a member program can plant in the group — symlinks out of it (absolute,
    /// relative, to a folder, chained, to itself), a FIFO, a socket, a hard link at the
    /// group's root — and a device node put there on the host: the backup reads no host file
    /// (symlinks are kept as symlinks, the rest skipped) and the restore makes the group again
    /// with the hard link (it could not: a root-level link's folder was opened as "").
    @Test func plantedLinksFIFOsAndDevicesAreBackedUpAsWhatTheyAre() throws {
        let device = try GroupDevice()
        let plant = #"cd "$APP_GROUP_COM_EXAMPLE_SHARED" && echo mine > data.txt && ln data.txt hard && ln -s /etc/passwd abs && ln -s ../../../../../etc/passwd rel && ln -s /etc etc && ln -s . loop && mkdir sub && ln -s ../abs sub/chain && mkfifo fifo && python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind("sock")'"#
        let planted = try runProgram([containerfsBinary, "run", device.app, "--", "sh", "-c", plant])
        #expect(planted.status == 0, "\(planted)")
        // The manifest's folder is reserved at the group's root: no second manifest in the archive.
        let manifest = try runProgram([containerfsBinary, "run", device.app, "--", "sh", "-c",
                                       #"cd "$APP_GROUP_COM_EXAMPLE_SHARED"; mkdir .containerfs-backup; echo $?; touch .containerfs-backup; echo $?; ls -a | grep -c containerfs"#])
        #expect(manifest.stdout == "1\n1\n0\n", "\(manifest)")
        // 1:3, /dev/null, as the old makedev encodes it.
        #expect(mknod(device.groupStore + "/null", S_IFCHR | 0o666, dev_t(1 << 8 | 3)) == 0)
        let listedSet = try containerfs(["backup", device.groupStore, "--list"])
        for name in ["fifo", "null", "sock"] {
            #expect(listedSet.stdout.contains("skipped  \(name) (a FIFO, socket or device: not backed up)"), "\(listedSet.stdout)")
        }
        let archive = device.base + "/group.tar"
        let backedUp = try containerfs(["backup", device.groupStore, archive])
        #expect(backedUp.status == 0, "\(backedUp)")
        let listed = try runProgram(["tar", "tvf", archive])
        #expect(!listed.stdout.contains("fifo") && !listed.stdout.contains("sock") && !listed.stdout.contains(" null"), "\(listed.stdout)")
        // Only data.txt has data: no symlink was followed.
        let data = listed.stdout.split(separator: "\n").filter { $0.hasPrefix("-") }.map { String($0.split(separator: " ").last ?? "") }
        #expect(data.sorted() == [".containerfs-backup/manifest", "data.txt"].sorted(), "\(listed.stdout)")
        #expect(listed.stdout.components(separatedBy: ".containerfs-backup").count == 2, "one entry at the manifest's folder: \(listed.stdout)")
        let restoredGroup = device.base + "/restored/" + GroupDevice.group
        try FileManager.default.createDirectory(atPath: device.base + "/restored", withIntermediateDirectories: true)
        let restored = try containerfs(["restore", archive, restoredGroup])
        #expect(restored.status == 0, "\(restored)")
        for (name, target) in [("abs", "/etc/passwd"), ("rel", "../../../../../etc/passwd"), ("etc", "/etc"), ("loop", "."), ("sub/chain", "../abs")] {
            #expect((try? FileManager.default.destinationOfSymbolicLink(atPath: restoredGroup + "/" + name)) == target, "\(name)")
        }
        var first = stat(), second = stat()
        #expect(lstat(restoredGroup + "/data.txt", &first) == 0 && lstat(restoredGroup + "/hard", &second) == 0)
        #expect(first.st_ino == second.st_ino && first.st_nlink == 2, "the hard link is one file again")
        for name in ["fifo", "sock", "null"] { #expect(!FileManager.default.fileExists(atPath: restoredGroup + "/" + name), "\(name)") }
    }

    @Test func backupAndRestoreOfTheGroupKeepItWhole() throws {
        let device = try GroupDevice()
        let write = #"G=$APP_GROUP_COM_EXAMPLE_SHARED; sqlite3 $G/shared.sqlite 'PRAGMA journal_mode=WAL; CREATE TABLE t(x); INSERT INTO t VALUES(1),(2),(3);' >/dev/null; echo pref > $G/Library/Preferences/group.plist; echo cache > $G/Library/Caches/c.bin"#
        #expect(try runProgram([containerfsBinary, "run", device.app, "--", "sh", "-c", write]).status == 0)
        let archive = device.base + "/group.tar", appArchive = device.base + "/app.tar"
        let listed = try containerfs(["backup", device.groupStore, "--list"])
        #expect(listed.stdout.contains("shared.sqlite") && listed.stdout.contains("Library/Preferences/group.plist") && !listed.stdout.contains("c.bin"), "\(listed)")
        #expect(try containerfs(["backup", device.groupStore, archive]).status == 0)
        #expect(try containerfs(["backup", device.app, appArchive]).status == 0)
        let restoredDevice = device.base + "/restored"
        try FileManager.default.createDirectory(atPath: restoredDevice, withIntermediateDirectories: true)
        let wrong = try containerfs(["restore", appArchive, restoredDevice + "/" + GroupDevice.group])
        #expect(wrong.status == 64, "\(wrong)")
        let restored = try containerfs(["restore", archive, restoredDevice + "/" + GroupDevice.group])
        #expect(restored.status == 0, "\(restored)")
        #expect(try containerfs(["restore", appArchive, restoredDevice + "/App", "--bundle", device.base + "/Demo.app", "--group", GroupDevice.group]).status == 0)
        let check = try runProgram([containerfsBinary, "run", restoredDevice + "/App", "--", "sh", "-c",
                                    #"G=$APP_GROUP_COM_EXAMPLE_SHARED; sqlite3 $G/shared.sqlite 'PRAGMA integrity_check; SELECT count(*) FROM t;'; cat $G/Library/Preferences/group.plist; ls $G/Library/Caches"#])
        #expect(check.status == 0 && check.stdout == "ok\n3\npref\n", "\(check)")
    }
}
