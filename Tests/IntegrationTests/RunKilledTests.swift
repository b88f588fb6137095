import ContainerStore
import Foundation
import Glibc
import Testing

/// True once process `pid` has exited (gone, or a zombie its new parent has not reaped yet).
func processGone(_ pid: pid_t) -> Bool {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8) else { return true }
    // "PID (name) STATE …": the name may hold spaces and parentheses, the state follows the last ")".
    guard let close = stat.lastIndex(of: ")") else { return true }
    return stat[stat.index(after: close)...].trimmingCharacters(in: .whitespaces).hasPrefix("Z")
}

/// Polls `condition` every 50 ms for at most `seconds`; true once it holds.
func eventually(seconds: Double = 30, _ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while !condition() {
        if Date() > deadline { return false }
        usleep(50_000)
    }
    return true
}

/// The pid of the daemon holding `store`'s mount lock.
func daemonPID(_ store: String) throws -> pid_t {
    try #require(MountLock.holder(try Store.open(store))?.pid, "\(store) has no daemon")
}

/// `containerfs run` killed with SIGKILL: its daemons notice through their lifeline
/// (`Lifeline`) and leave nothing mounted, the shared group mount only once no member's
/// run uses it (docs/run.md, docs/groups.md).
@Suite("RunKilled", .serialized)
struct RunKilledTests {
    @Test func aKilledRunsDaemonsUnmountAndExit() throws {
        let device = try GroupDevice()
        let run = try device.start(device.app, ["sh", "-c", "echo x > tmp/left; echo kept > Documents/kept; touch Documents/ready; sleep 60"])
        #expect(waitForFile(device.app + "/Documents/ready"), "the program never started")
        let appDaemon = try daemonPID(device.app), groupDaemon = try daemonPID(device.groupStore)
        let runFolder = (try #require(containerMounts(of: device.app).first) as NSString).deletingLastPathComponent
        kill(run.pid, SIGKILL)
        _ = run.wait()
        #expect(eventually { containerMounts(of: device.app).isEmpty && containerMounts(of: device.groupStore).isEmpty },
                "mounts left: \(containerMounts(of: device.app)) \(containerMounts(of: device.groupStore))")
        #expect(eventually { processGone(appDaemon) && processGone(groupDaemon) }, "a daemon is still running")
        #expect(!FileManager.default.fileExists(atPath: runFolder), "the run folder \(runFolder) is left")
        let appStore = try Store.open(device.app), groupStore = try Store.open(device.groupStore)
        #expect(MountLock.holder(appStore) == nil && MountLock.holder(groupStore) == nil)
        // The store is intact, and the next run has nothing to clear but tmp/ ('left' gone).
        #expect(try String(contentsOfFile: device.app + "/Documents/kept", encoding: .utf8) == "kept\n")
        let next = try runProgram([containerfsBinary, "run", device.app, "--", "sh", "-c", "cat Documents/kept; ls tmp"])
        #expect(next.status == 0 && next.stdout == "kept\n" && !next.stderr.contains("clearing"), "\(next.status) \(next.stdout) \(next.stderr)")
        #expect(containerMounts(of: device.app).isEmpty && containerMounts(of: device.groupStore).isEmpty)
    }

    /// `run` out of descriptors (`ulimit -n 30`, its output piped) fails with one line and
    /// ends, leaving nothing mounted: the mount table then read as empty, so the mount
    /// looked gone while the daemon still served it, and `run` waited for it forever.
    @Test func aRunOutOfDescriptorsEndsAndLeavesNothingMounted() throws {
        let container = try MountedContainer()
        defer { container.unmount() }
        let script = #"ulimit -n 30 && "$0" run "$1" -- sh -c 'echo hi' 2>&1 | cat"#
        let run = try BackgroundProgram(["/bin/sh", "-c", script, containerfsBinary, container.store])
        let ended = eventually(seconds: 40) { processGone(run.pid) }
        if !ended, let daemon = try? daemonPID(container.store) { kill(daemon, SIGTERM) }  // what a hung run leaves
        let result = run.wait(seconds: 20)
        #expect(ended, "run did not end: \(result)")
        #expect(eventually { containerMounts(of: container.store).isEmpty }, "mounts left: \(containerMounts(of: container.store))")
    }

    /// The run that mounted the group ends first, the other member's run last: that one
    /// unmounts the group while the daemon looks whether anyone still uses it, and neither
    /// waits for the other (it did, 10 s, when the daemon's look blocked on the decision
    /// lock that run holds while it waits for the daemon). Four times, the look being every
    /// quarter second.
    @Test func membersEndingOneAfterTheOtherDoNotWaitForTheDaemon() throws {
        let device = try GroupDevice()
        for round in 0..<4 {
            let app = try device.start(device.app, ["sh", "-c", "touch Documents/ready\(round); sleep 0.3"])
            #expect(waitForFile(device.app + "/Documents/ready\(round)"), "the app never started")
            let started = Date()
            let widget = try device.start(device.widget, ["sleep", "1.2"])
            #expect(app.wait().status == 0)
            let result = widget.wait()
            let seconds = Date().timeIntervalSince(started)
            #expect(result.status == 0 && seconds < 6, "round \(round): the widget's run took \(seconds) s: \(result)")
            #expect(containerMounts(of: device.groupStore).isEmpty, "round \(round): the group is left mounted")
        }
    }

    /// The run that mounted the group is killed while another member's run uses it: the
    /// group stays mounted for that one; killed in turn, it leaves nothing mounted either.
    @Test func theGroupStaysWhileAnotherMemberRuns() throws {
        let device = try GroupDevice()
        let go = Pipe()
        let app = try device.start(device.app, ["sh", "-c", "touch Documents/ready; sleep 60"])
        #expect(waitForFile(device.app + "/Documents/ready"), "the app never started")
        // The widget writes to the group once told on its standard input.
        let widget = try BackgroundProgram([containerfsBinary, "run", device.widget, "--", "sh", "-c", "touch Documents/ready; read line; echo after > \"$\(GroupDevice.variable)/after\"; touch Documents/wrote; sleep 60"], stdinPipe: go)
        #expect(waitForFile(device.widget + "/Documents/ready"), "the widget never started")
        let groupDaemon = try daemonPID(device.groupStore)
        kill(app.pid, SIGKILL)
        _ = app.wait()
        #expect(eventually { containerMounts(of: device.app).isEmpty }, "the app's own mount is left")
        // Several of the daemon's looks at the users' lock.
        usleep(1_500_000)
        #expect(containerMounts(of: device.groupStore).count == 1 && !processGone(groupDaemon), "the group went while the widget uses it")
        go.fileHandleForWriting.write(Data("go\n".utf8))
        #expect(waitForFile(device.widget + "/Documents/wrote"), "the widget could not write to the group")
        #expect(try String(contentsOfFile: device.groupStore + "/after", encoding: .utf8) == "after\n")
        kill(widget.pid, SIGKILL)
        _ = widget.wait()
        #expect(eventually { containerMounts(of: device.widget).isEmpty && containerMounts(of: device.groupStore).isEmpty },
                "mounts left: \(containerMounts(of: device.widget)) \(containerMounts(of: device.groupStore))")
        #expect(eventually { processGone(groupDaemon) }, "the group's daemon is still running")
    }
}
