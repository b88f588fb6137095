import ContainerPolicy
import ContainerPurge
import Foundation
import Glibc
import Testing

@testable import ContainerRun
@testable import ContainerStore

/// What `containerfs run` keeps in the store: the run lock, the purge of tmp/ when the
/// program ends, the count of the run's denials.
@Suite("RunSupport")
struct RunSupportTests {
    /// mountinfo's escapes are decoded to the path's bytes; a backslash not followed by
    /// three octal digits, and the digits of an escape past 255, stay as they can.
    @Test func mountinfoEscapesAreDecodedToBytes() {
        func decode(_ text: String) -> [UInt8] { NodeAncestry.unescaped(ArraySlice(Array(text.utf8))) }
        #expect(decode(#"/tmp/sub\040dir"#) == Array("/tmp/sub dir".utf8))
        #expect(decode(#"/a\012b\134c\011"#) == Array("/a\nb\\c\t".utf8))
        #expect(decode(#"/x\377"#) == Array("/x".utf8) + [0xff])
        #expect(decode(#"/x\9a\"#) == Array(#"/x\9a\"#.utf8))
        #expect(decode(#"/x\777"#) == Array("/x".utf8) + [0xff])
    }

    /// A fresh store in a temporary folder (removed afterwards) and that folder.
    private func makeStore() throws -> (Store, String) {
        var template = Array("/tmp/containerfs-runstore-XXXXXX".utf8CString)
        let base = String(cString: mkdtemp(&template)!)
        try FileManager.default.createDirectory(atPath: base + "/Demo.app", withIntermediateDirectories: true)
        try Data("plist".utf8).write(to: URL(fileURLWithPath: base + "/Demo.app/Info.plist"))
        return (try Store.create(at: base + "/store", bundle: base + "/Demo.app"), base)
    }

    /// The passwd and group files root's program sees: 501 is `mobile`, whatever the host
    /// called it; every other line as on the host.
    /// `--grant PATH[:ro|:rw]`: the suffix chooses, anything else is part of the path.
    @Test func aGrantIsReadOnlyUnlessItEndsInRW() {
        #expect(GrantRequest(parsing: "/a/b") == GrantRequest(path: "/a/b", writable: false))
        #expect(GrantRequest(parsing: "/a/b:rw") == GrantRequest(path: "/a/b", writable: true))
        #expect(GrantRequest(parsing: "/a/b:ro") == GrantRequest(path: "/a/b", writable: false))
        #expect(GrantRequest(parsing: "/a:rw/b") == GrantRequest(path: "/a:rw/b", writable: false))
        #expect(GrantRequest(parsing: "/a/b:rwx") == GrantRequest(path: "/a/b:rwx", writable: false))
    }

    /// A grant record is not a denial: `run` and `check` leave it out of their counts.
    @Test func aGrantRecordIsNoDenial() throws {
        let (store, base) = try makeStore()
        defer { try? FileManager.default.removeItem(atPath: base) }
        AuditLog.recordGrant(stateFD: store.stateFD, pid: getpid(), uid: getuid(), hostPath: "/h/doc\n", insidePath: "/grants/doc\n",
                             writable: true)
        let records = AuditLog.read(stateFD: store.stateFD)
        #expect(records.count == 1 && records[0].isGrant && records[0].rule == "granted read-write")
        #expect(records.first?.textLine.contains("grant /h/doc\\x0a [host] -> /grants/doc\\x0a [sandbox]") == true, "\(records)")
    }

    /// The iOS layout's UUIDs: drawn and recorded once, the same until renewed or
    /// forgotten (`update`), and drawn anew when the record is damaged.
    @Test func containerUUIDsAreRecordedUntilRenewedOrForgotten() throws {
        let (store, base) = try makeStore()
        defer { try? FileManager.default.removeItem(atPath: base) }
        #expect(ContainerUUIDs.recorded(store) == nil)
        let first = try ContainerUUIDs.current(store)
        #expect(try ContainerUUIDs.current(store) == first && ContainerUUIDs.recorded(store) == first)
        #expect(first.data != first.bundle && UUID(uuidString: first.data) != nil && first.data == first.data.uppercased())
        let renewed = try ContainerUUIDs.current(store, renewing: true)
        #expect(renewed.data != first.data && renewed.bundle != first.bundle && ContainerUUIDs.recorded(store) == renewed)
        ContainerUUIDs.forget(store)
        #expect(ContainerUUIDs.recorded(store) == nil)
        try writeNewFile(at: store.stateFD, Array("ios-uuids".utf8), Array("not a uuid\n../../etc\n".utf8))
        #expect(ContainerUUIDs.recorded(store) == nil, "a damaged record names no path")
        #expect(SandboxLayout.ios(renewed).home == "/private/var/mobile/Containers/Data/Application/" + renewed.data)
        #expect(SandboxLayout.ios(renewed).bundle("Demo.app") == "/private/var/containers/Bundle/Application/\(renewed.bundle)/Demo.app")
        #expect(SandboxLayout.home.home == "/home/app")
    }

    @Test func rootsProgramSeesMobile() {
        let passwd = Array("root:x:0:0:root:/root:/bin/bash\nsomeone:x:501:501::/home/someone:/bin/sh\nbob:x:1001:1001::/home/bob:/bin/sh\n".utf8)
        let group = Array("root:x:0:\nstaff:x:501:\nmobile:x:777:\n".utf8)
        let accounts = Sandbox.accounts(passwd: passwd, group: group)
        #expect(String(decoding: accounts.passwd, as: UTF8.self)
                == "root:x:0:0:root:/root:/bin/bash\nbob:x:1001:1001::/home/bob:/bin/sh\nmobile:x:501:501:Mobile:/home/app:/bin/sh\n")
        #expect(String(decoding: accounts.group, as: UTF8.self) == "root:x:0:\nmobile:x:501:\n")
        #expect(String(decoding: Sandbox.accounts(passwd: [], group: []).group, as: UTF8.self) == "mobile:x:501:\n")
    }

    @Test func purgeEmptiesTmpButKeepsItsTagAndFollowsNoSymlink() throws {
        let (store, base) = try makeStore()
        defer { try? FileManager.default.removeItem(atPath: base) }
        let tmp = base + "/store/tmp"
        let outside = base + "/outside"
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
        try Data("keep".utf8).write(to: URL(fileURLWithPath: outside + "/precious"))
        try FileManager.default.createDirectory(atPath: tmp + "/deep/er/still", withIntermediateDirectories: true)
        try Data("x".utf8).write(to: URL(fileURLWithPath: tmp + "/deep/er/still/file"))
        try Data("y".utf8).write(to: URL(fileURLWithPath: tmp + "/top"))
        try FileManager.default.createSymbolicLink(atPath: tmp + "/link-to-outside", withDestinationPath: outside)
        try FileManager.default.createSymbolicLink(atPath: tmp + "/deep/dangling", withDestinationPath: "/nonexistent")
        mkfifo(tmp + "/fifo", 0o600)
        chmod(tmp + "/deep/er", 0o500)  // a folder the program made unwritable

        #expect(Purge.emptyTemporary(store).left == 0)
        #expect(try FileManager.default.contentsOfDirectory(atPath: tmp) == ["CACHEDIR.TAG"])
        #expect(FileManager.default.contents(atPath: outside + "/precious") == Data("keep".utf8), "a symlink's target is never touched")
        #expect(Purge.emptyTemporary(store) == (0, 0), "purging an empty tmp is fine")
    }

    @Test func theRunLockIsExclusiveAndRemembersAnAbandonedMountpoint() throws {
        let (store, base) = try makeStore()
        defer { try? FileManager.default.removeItem(atPath: base) }
        var first: RunLock? = try RunLock(store: store)
        #expect(first?.abandonedMountpoint == nil)
        first?.record(mountpoint: "/tmp/containerfs-run-abc/container")
        // flock belongs to the open file: a second open, even in this process, is refused.
        let error = #expect(throws: UserError.self) { _ = try RunLock(store: store) }
        #expect(error?.message == "a program is already running in \(store.path) (containerfs run, pid \(getpid())): one app runs as one process at a time; wait for it to end")
        first = nil  // as if the run were killed: the record stays, the lock goes
        do {
            let second = try RunLock(store: store)
            #expect(second.abandonedMountpoint == "/tmp/containerfs-run-abc/container")
            second.record(mountpoint: nil)
        }
        #expect(try RunLock(store: store).abandonedMountpoint == nil, "a run that cleaned up leaves nothing to clear")
    }

    @Test func denialsAreCountedFromATimeOn() throws {
        let (store, base) = try makeStore()
        defer { try? FileManager.default.removeItem(atPath: base) }
        func line(_ time: String) -> String {
            #"{"areas":["bundle"],"errno":"EPERM","operation":"open","paths":["Demo.app/Info.plist"],"pid":1,"process":"sh","rule":"bundleIsReadOnly","time":"\#(time)","uid":0}"#
        }
        let log = [line("2026-11-21T10:00:00.000Z"), line("2026-11-21T10:00:05.250Z"), line("2026-11-21T10:00:07.000Z"), #"{"dropped":3}"#]
        try Data((log.joined(separator: "\n") + "\n").utf8).write(to: URL(fileURLWithPath: base + "/store/.containerfs/audit.log"))
        var since = timespec()
        var parts = tm()
        parts.tm_year = 2026 - 1900
        parts.tm_mon = 10
        parts.tm_mday = 21
        parts.tm_hour = 10
        parts.tm_sec = 5
        since.tv_sec = timegm(&parts)
        since.tv_nsec = 250_000_000
        #expect(AuditLog.recordTime(since) == "2026-11-21T10:00:05.250Z")
        #expect(AuditLog.countDenials(stateFD: store.stateFD, since: since) == 2)
        #expect(AuditLog.countDenials(stateFD: store.stateFD, since: AuditLog.now()) == 0)
    }
}
